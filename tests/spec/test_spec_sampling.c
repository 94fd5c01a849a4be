/*
 * Sampling fidelity through the scheduler on the test engine: over 20,000 seeded runs, the joint distribution of
 * the first three sampled tokens with speculative decoding equals the one without (chi-square homogeneity,
 * p > 0.01), for several sampling transforms; and deliberately broken acceptance rules (the test-only hook
 * sy_speculator_options.rule) fail the same test.
 *
 * The drafter is the target model itself (through the model drafter), so every proposal is the greedy token: it
 * is accepted about as often as the target gives it probability, and rejected often enough that both branches of
 * the rule matter. Drafts cover tokens 2 and 3 (draft_max 2): token 1 comes from the prompt's logits.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "spec_fixture.h"
#include "base/util.h"

#define RUNS 20000
#define BROKEN_RUNS 2000
#define N_TOKENS 3
#define WINDOW 64 /* requests in flight at once */

static spec_env env;
static sy_loaded_model lm;
static int32_t *prompt;
static size_t n_prompt;

static int group_setup(void **state) {
    (void)state;
    if (spec_env_open(&env) != 0) return -1;
    char *path = spec_write_model(&env, "target.txt", "name=target\nseed=11\nn_ctx=512\neos_one_in=0");
    spec_open_model(&env, path, NULL, 0, &lm);
    free(path);
    if (sy_loaded_model_publish("s:target", &lm) != 0) return -1;
    prompt = spec_make_prompt(12, true, &n_prompt);
    if (n_prompt > 40) n_prompt = 40;
    return 0;
}

static int group_teardown(void **state) {
    (void)state;
    sy_loaded_model_unpublish("s:target", &lm);
    sy_loaded_model_close(&lm);
    free(prompt);
    spec_env_close(&env);
    return 0;
}

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* The first three tokens of `runs` generations seeded 1..runs, each as one code. Sorted. */
static uint32_t *sample_codes(const sy_sampler_params *sampling, sy_spec_rule rule, bool speculate, size_t runs,
                              uint64_t *drafted, uint64_t *accepted) {
    sy_speculator *sp = NULL;
    if (speculate) {
        sy_speculator_options o = sy_speculator_defaults();
        o.draft_max = 2;
        o.draft_cost = 0; /* always worth drafting: the rule is what is under test */
        o.rule = rule;
        char err[512];
        sp = sy_speculator_open(&env.reg, "model:s:target", "s:target", lm.info.n_vocab, NULL, 0, &o, err,
                                sizeof err);
        if (sp == NULL) fprintf(stderr, "%s\n", err);
        assert_non_null(sp);
    }
    sy_scheduler_options so;
    memset(&so, 0, sizeof so);
    so.parallel = 8;
    so.max_queue = (uint32_t)runs;
    so.speculator = sp;
    sy_scheduler *s = sy_scheduler_create(&lm, &so);
    assert_non_null(s);
    spec_batch *b = spec_batch_new(runs);
    for (size_t i = 0; i < runs; i++) {
        sy_gen_params p = sy_gen_params_defaults();
        p.sampling = *sampling;
        p.sampling.seed = 1 + i;
        p.max_tokens = N_TOKENS + 1; /* so that both tokens after the first can be drafted in one step */
        p.ignore_eos = true;
        p.logprobs = true; /* one event per token */
        if (i >= WINDOW) assert_true(spec_batch_wait_count(b, i - WINDOW + 1, 60));
        spec_batch_submit(b, i, s, prompt, n_prompt, &p);
    }
    assert_true(spec_batch_wait(b, 300));
    uint32_t *codes = malloc(runs * sizeof *codes);
    *drafted = *accepted = 0;
    for (size_t i = 0; i < runs; i++) {
        const spec_result *r = &b->results[i];
        assert_false(r->error);
        assert_int_equal(r->n_tokens, N_TOKENS + 1);
        uint32_t code = 0;
        for (int t = 0; t < N_TOKENS; t++) code = code * lm.info.n_vocab + (uint32_t)r->tokens[t];
        codes[i] = code;
        *drafted += r->usage.drafted_tokens;
        *accepted += r->usage.accepted_tokens;
    }
    sy_scheduler_destroy(s);
    spec_batch_free(b);
    sy_speculator_free(sp);
    qsort(codes, runs, sizeof *codes, cmp_u32);
    return codes;
}

/* Chi-square homogeneity of two sorted code samples over the codes seen in either. */
static double compare(const uint32_t *a, size_t na, const uint32_t *b, size_t nb, int *dof_out) {
    size_t cap = na + nb, n_cells = 0;
    uint64_t *ca = calloc(cap, sizeof *ca), *cb = calloc(cap, sizeof *cb);
    size_t i = 0, j = 0;
    while (i < na || j < nb) {
        uint32_t code = (j >= nb || (i < na && a[i] <= b[j])) ? a[i] : b[j];
        while (i < na && a[i] == code) ca[n_cells]++, i++;
        while (j < nb && b[j] == code) cb[n_cells]++, j++;
        n_cells++;
    }
    double chi2;
    int dof;
    double p = spec_chi2_homogeneity(ca, cb, n_cells, &chi2, &dof);
    printf("  %zu distinct triples, chi2 %.1f with %d dof: p %.4g\n", n_cells, chi2, dof, p);
    free(ca);
    free(cb);
    *dof_out = dof;
    return p;
}

static void check_case(const char *name, sy_sampler_params sampling) {
    uint64_t drafted, accepted, d2, a2;
    printf("%s\n", name);
    uint32_t *plain = sample_codes(&sampling, SY_SPEC_RULE_EXACT, false, RUNS, &drafted, &accepted);
    assert_int_equal(drafted, 0);
    uint32_t *spec = sample_codes(&sampling, SY_SPEC_RULE_EXACT, true, RUNS, &drafted, &accepted);
    printf("  speculative: drafted %llu, accepted %llu (%.0f%%)\n", (unsigned long long)drafted,
           (unsigned long long)accepted, 100.0 * (double)accepted / (double)(drafted ? drafted : 1));
    /* Both branches of the rule were taken many times. */
    assert_true(drafted >= RUNS);
    assert_true(accepted > drafted / 10 && accepted < drafted - drafted / 10);
    int dof;
    double p = compare(plain, RUNS, spec, RUNS, &dof);
    assert_true(dof >= 3);
    assert_true(p > 0.01);

    /* The same test catches rules that break the distribution. */
    static const sy_spec_rule broken[] = {SY_SPEC_RULE_TEST_ALWAYS_ACCEPT, SY_SPEC_RULE_TEST_RESAMPLE_FULL_P};
    static const char *const broken_name[] = {"always accept", "resample from p"};
    for (int r = 0; r < 2; r++) {
        uint32_t *bad = sample_codes(&sampling, broken[r], true, BROKEN_RUNS, &d2, &a2);
        printf("  broken rule (%s):\n", broken_name[r]);
        double pb = compare(plain, RUNS, bad, BROKEN_RUNS, &dof);
        assert_true(pb < 1e-6);
        free(bad);
    }
    free(plain);
    free(spec);
}

static void top_k_sampling_is_preserved(void **state) {
    (void)state;
    sy_sampler_params p = sy_sampler_defaults();
    p.temperature = 1.0f, p.top_k = 3, p.top_p = 1.0f, p.min_p = 0;
    check_case("temperature 1, top-k 3", p);
}

static void top_p_min_p_temperature_are_preserved(void **state) {
    (void)state;
    sy_sampler_params p = sy_sampler_defaults();
    p.temperature = 0.5f, p.top_k = 0, p.top_p = 0.9f, p.min_p = 0.1f;
    check_case("temperature 0.5, top-p 0.9, min-p 0.1", p);
}

static void penalties_are_preserved(void **state) {
    (void)state;
    sy_sampler_params p = sy_sampler_defaults();
    p.temperature = 0.8f, p.top_k = 4, p.top_p = 1.0f, p.min_p = 0;
    p.repeat_penalty = 1.6f, p.presence_penalty = 0.4f, p.frequency_penalty = 0.3f, p.penalty_last_n = 8;
    check_case("temperature 0.8, top-k 4, repetition penalties", p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(top_k_sampling_is_preserved),
        cmocka_unit_test(top_p_min_p_temperature_are_preserved),
        cmocka_unit_test(penalties_are_preserved),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
