#include "spec_engines.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/util.h"

/* Log-probabilities of the same token may differ by this much between a row decoded alone and one decoded among
 * the k+1 rows of a verification (the matrix kernels tile batches differently, and with the KV cache in f16, the
 * default, such a last-bit difference can round a key or value to the neighbouring f16: logits moved by up to
 * 2.2e-3 on the AVX-512 tier, tests/common/test_stories260k.c). Tokens may not differ at all. */
#define SE_LOGPROB_TOLERANCE 5e-3

size_t se_prompt_count(size_t fallback) {
    const char *v = getenv("SY_SPEC_PROMPTS");
    uint64_t n;
    if (v == NULL || sy_parse_u64(v, 100000, &n) != 0 || n == 0) return fallback;
    return (size_t)n;
}

se_workload se_make_workload(size_t n, unsigned seed, uint32_t n_vocab, uint32_t max_tokens) {
    se_workload w = {n, calloc(n, sizeof(int32_t *)), calloc(n, sizeof(size_t)), calloc(n, sizeof(sy_gen_params))};
    assert_non_null(w.prompts);
    assert_non_null(w.n_prompt);
    assert_non_null(w.params);
    uint64_t x = 0x9e3779b97f4a7c15ull * (seed + 1u);
    for (size_t i = 0; i < n; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        size_t len = 6 + (size_t)((x >> 33) % 65);
        int32_t *p = malloc(len * sizeof *p);
        assert_non_null(p);
        if (i % 3 == 0) {
            /* A phrase of 2..6 tokens said again and again. */
            int32_t phrase[6];
            size_t plen = 2 + i % 5;
            for (size_t k = 0; k < plen; k++) {
                x = x * 6364136223846793005ull + 1442695040888963407ull;
                phrase[k] = (int32_t)((x >> 33) % n_vocab);
            }
            for (size_t k = 0; k < len; k++) p[k] = phrase[k % plen];
        } else {
            for (size_t k = 0; k < len; k++) {
                x = x * 6364136223846793005ull + 1442695040888963407ull;
                p[k] = (int32_t)((x >> 33) % n_vocab);
            }
        }
        w.prompts[i] = p;
        w.n_prompt[i] = len;
        w.params[i] = sy_gen_params_defaults();
        w.params[i].sampling.temperature = 0;
        w.params[i].max_tokens = max_tokens;
        w.params[i].ignore_eos = i % 2 == 0; /* odd ones may end at an end token */
        w.params[i].logprobs = true;         /* an event for every token, with the logprob of its row */
    }
    return w;
}

void se_free_workload(se_workload *w) {
    for (size_t i = 0; i < w->n; i++) free(w->prompts[i]);
    free(w->prompts);
    free(w->n_prompt);
    free(w->params);
}

spec_batch *se_run(const sy_loaded_model *lm, sy_speculator *sp, const se_workload *w) {
    sy_scheduler_options so;
    memset(&so, 0, sizeof so);
    so.parallel = 4;
    so.max_queue = (uint32_t)w->n;
    so.prefill_chunk = 64;
    so.speculator = sp;
    sy_scheduler *s = sy_scheduler_create(lm, &so);
    assert_non_null(s);
    spec_batch *b = spec_batch_new(w->n);
    for (size_t i = 0; i < w->n; i++) spec_batch_submit(b, i, s, w->prompts[i], w->n_prompt[i], &w->params[i]);
    assert_true(spec_batch_wait(b, 300));
    sy_scheduler_destroy(s);
    return b;
}

se_totals se_assert_same_output(const char *label, const spec_batch *plain, const spec_batch *spec, size_t n) {
    se_totals t = {0, 0, 0};
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        const spec_result *a = &plain->results[i], *b = &spec->results[i];
        assert_false(a->error);
        assert_false(b->error);
        uint32_t common = a->n_tokens < b->n_tokens ? a->n_tokens : b->n_tokens;
        for (uint32_t k = 0; k < common; k++)
            if (a->tokens[k] != b->tokens[k])
                fail_msg("%s, request %zu: token %u is %d without speculation, %d with", label, i, (unsigned)k,
                         a->tokens[k], b->tokens[k]);
        if (a->n_tokens != b->n_tokens)
            fail_msg("%s, request %zu: %u tokens without speculation, %u with", label, i, (unsigned)a->n_tokens,
                     (unsigned)b->n_tokens);
        for (uint32_t k = 0; k < a->n_tokens; k++) {
            double d = fabs(a->logprobs[k] - b->logprobs[k]);
            if (!(d <= SE_LOGPROB_TOLERANCE))
                fail_msg("%s, request %zu token %u: logprob %.9g without speculation, %.9g with", label, i,
                         (unsigned)k, a->logprobs[k], b->logprobs[k]);
            if (d > worst) worst = d;
        }
        assert_string_equal(a->finish_reason, b->finish_reason);
        assert_int_equal(a->usage.completion_tokens, b->usage.completion_tokens);
        assert_int_equal(a->usage.drafted_tokens, 0);
        assert_true(b->usage.accepted_tokens <= b->usage.drafted_tokens);
        t.drafted += b->usage.drafted_tokens;
        t.accepted += b->usage.accepted_tokens;
        t.tokens += b->usage.completion_tokens;
    }
    printf("  %-40s %6llu tokens, drafted %6llu, accepted %6llu (%5.1f%%), logprobs within %.1e\n", label,
           (unsigned long long)t.tokens, (unsigned long long)t.drafted, (unsigned long long)t.accepted,
           t.drafted ? 100.0 * (double)t.accepted / (double)t.drafted : 0.0, worst);
    return t;
}

size_t se_count_different(const spec_batch *plain, const spec_batch *spec, size_t n) {
    size_t different = 0;
    for (size_t i = 0; i < n; i++) {
        const spec_result *a = &plain->results[i], *b = &spec->results[i];
        different += a->n_tokens != b->n_tokens ||
                     memcmp(a->tokens, b->tokens, a->n_tokens * sizeof *a->tokens) != 0;
    }
    return different;
}

sy_speculator *se_open_spec(const spec_env *env, const char *spec, const char *target, uint32_t n_vocab,
                            uint32_t draft_max, double cost) {
    return se_open_spec_rule(env, spec, target, n_vocab, draft_max, cost, SY_SPEC_RULE_EXACT);
}

sy_speculator *se_open_spec_rule(const spec_env *env, const char *spec, const char *target, uint32_t n_vocab,
                                 uint32_t draft_max, double cost, sy_spec_rule rule) {
    sy_speculator_options o = sy_speculator_defaults();
    o.draft_max = draft_max;
    o.draft_cost = cost;
    o.rule = rule;
    char err[512] = "";
    sy_speculator *sp = sy_speculator_open(&env->reg, spec, target, n_vocab, NULL, 0, &o, err, sizeof err);
    if (sp == NULL) fail_msg("drafter %s: %s", spec, err);
    return sp;
}

/* One drafter against the plain outputs. */
static se_totals check_drafter(const spec_env *env, const se_model_case *c, const se_workload *w,
                               const spec_batch *plain, const char *spec, const char *what, uint32_t draft_max,
                               double cost) {
    sy_speculator *sp = se_open_spec(env, spec, "se:target", c->target->info.n_vocab, draft_max, cost);
    double t0 = sy_now_seconds();
    spec_batch *b = se_run(c->target, sp, w);
    char label[128];
    snprintf(label, sizeof label, "%s, %s (%.1f s)", c->label, what, sy_now_seconds() - t0);
    se_totals t = se_assert_same_output(label, plain, b, w->n);
    spec_batch_free(b);
    sy_speculator_free(sp);
    return t;
}

void se_check_model(const spec_env *env, const se_model_case *c) {
    const sy_loaded_model *lm = c->target;
    se_workload w = se_make_workload(c->n_prompts, 17, lm->info.n_vocab, c->max_tokens);
    double t0 = sy_now_seconds();
    spec_batch *plain = se_run(lm, NULL, &w);
    printf("%s: %zu prompts, %u new tokens each, plain run %.1f s\n", c->label, w.n, (unsigned)c->max_tokens,
           sy_now_seconds() - t0);
    assert_int_equal(sy_loaded_model_publish("se:target", lm), 0);

    /* Prompt lookup: the repeated phrases and the models' own loops give it hits. */
    se_totals t = check_drafter(env, c, &w, plain, "ngram", "ngram", 8, 0.05);
    /* Hits are certain over the full workload; the sanitizer run's few prompts may back off before one. */
    if (w.n >= 50) assert_true(t.accepted > 0);
    if (c->recurrent) {
        /* Up to 32 proposals every step whatever they cost: rejections run past the rollback limit. */
        check_drafter(env, c, &w, plain, "ngram", "ngram, 32 drafts, deep rollbacks", 32, 0.0);
    }
    /* The model as its own drafter: its greedy proposals are the target's own choices, so (but for rows whose
     * top two logits the batch shape can swap) all of them stand. */
    t = check_drafter(env, c, &w, plain, "model:se:target", "itself as drafter", 6, 0.05);
    assert_true(t.drafted > w.n * 10);
    assert_true(t.accepted * 100 >= t.drafted * 99);
    if (c->other != NULL) {
        assert_int_equal(sy_loaded_model_publish("se:other", c->other), 0);
        t = check_drafter(env, c, &w, plain, "model:se:other", "another model as drafter", 6, 0.05);
        assert_true(t.drafted > 0);
        assert_int_equal(sy_loaded_model_unpublish("se:other", c->other), 0);
    }
    assert_int_equal(sy_loaded_model_unpublish("se:target", lm), 0);
    spec_batch_free(plain);
    se_free_workload(&w);
}
