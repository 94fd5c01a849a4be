/* Greedy equality of speculative decoding on the real CPU engines (gguf-quant, qwen-cpu-mmap): a workload of
 * token-id prompts run through the scheduler without speculation and with each drafter, compared token for token.
 * Shared by test_spec_gguf.c and test_spec_safetensors.c; each of those takes an optional cmocka test-name
 * pattern as its argument, so that CTest runs one model per test (tests/spec/CMakeLists.txt). */
#ifndef SY_TEST_SPEC_ENGINES_H
#define SY_TEST_SPEC_ENGINES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "spec_fixture.h"

/* Prompts of token ids below n_vocab: every third repeats a short phrase (n-gram drafting has something to find),
 * the others are varied; 6..70 tokens, so prompt + output fit a 256-token context. */
typedef struct se_workload {
    size_t n;
    int32_t **prompts;
    size_t *n_prompt;
    sy_gen_params *params;
} se_workload;

/* Prompts per model: `fallback`, or SY_SPEC_PROMPTS from the environment (the sanitizer build sets fewer:
 * tests/spec/CMakeLists.txt). */
size_t se_prompt_count(size_t fallback);

se_workload se_make_workload(size_t n, unsigned seed, uint32_t n_vocab, uint32_t max_tokens);
void se_free_workload(se_workload *w);

/* Every request of w on a new scheduler of lm with 4 slots (speculation meets continuous batching and prefix
 * reuse), optionally with a speculator. Asserts that all of them end within the timeout. */
spec_batch *se_run(const sy_loaded_model *lm, sy_speculator *sp, const se_workload *w);

typedef struct se_totals {
    uint64_t drafted, accepted, tokens;
} se_totals;

/* Fails the test, naming the request and position, unless `spec` produced exactly `plain`'s tokens (and finish
 * reasons, counts; log-probabilities within 1e-4: the chosen token's row is computed in a batch of another
 * shape). Returns the drafting totals. */
se_totals se_assert_same_output(const char *label, const spec_batch *plain, const spec_batch *spec, size_t n);

/* How many requests of `spec` differ from `plain` in their tokens (for checks that the comparison can fail). */
size_t se_count_different(const spec_batch *plain, const spec_batch *spec, size_t n);

/* A speculator of `env`'s drafter plugin. cost >= 0 fixes the cost model (the draft lengths are then the same on
 * every run); < 0 measures it. */
sy_speculator *se_open_spec(const spec_env *env, const char *spec, const char *target, uint32_t n_vocab,
                            uint32_t draft_max, double cost);
/* The same with an acceptance rule (a deliberately wrong one in the checks that the comparison can fail). */
sy_speculator *se_open_spec_rule(const spec_env *env, const char *spec, const char *target, uint32_t n_vocab,
                                 uint32_t draft_max, double cost, sy_spec_rule rule);

/* One model's checks: plain vs n-gram drafting, vs the model drafting for itself, and vs `other` (a model of the
 * same vocabulary; NULL: none) as the drafter. `recurrent`: also n-gram drafts of up to 32 tokens with a zero cost,
 * so that rejections reach past the engine's rollback limit (16) and the sequence must be rebuilt. */
typedef struct se_model_case {
    const char *label;
    const sy_loaded_model *target;
    const sy_loaded_model *other; /* may be NULL */
    bool recurrent;
    size_t n_prompts;
    uint32_t max_tokens;
} se_model_case;

void se_check_model(const spec_env *env, const se_model_case *c);

#endif
