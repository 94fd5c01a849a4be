/* Sampling: greedy ties, seeded reproducibility, the sampled distribution itself, and each filter. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "dry_fixture.h"
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>

#include "engine/sampler.h"

static sy_sampler_params plain(float temperature, uint64_t seed) {
    sy_sampler_params p = sy_sampler_defaults();
    p.temperature = temperature;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.seed = seed;
    return p;
}

static void argmax_takes_lowest_id_on_ties(void **state) {
    (void)state;
    float l[5] = {1, 3, 2, 3, -1};
    assert_int_equal(sy_argmax(l, 5), 1);
}

static void temperature_zero_is_greedy(void **state) {
    (void)state;
    sy_sampler_params p = plain(0.0f, 1);
    sy_sampler *s = sy_sampler_create(&p, 4);
    for (int i = 0; i < 10; i++) {
        float l[4] = {0.1f, 0.2f, 5.0f, 4.9f};
        assert_int_equal(sy_sampler_sample(s, l, NULL, 0), 2);
    }
    sy_sampler_free(s);
}

static void draw(uint64_t seed, int32_t *out, int n) {
    sy_sampler_params p = plain(1.0f, seed);
    sy_sampler *s = sy_sampler_create(&p, 8);
    for (int i = 0; i < n; i++) {
        float l[8] = {0, 0.5f, 1, 0.2f, 0.9f, 0.1f, 0.7f, 0.3f};
        out[i] = sy_sampler_sample(s, l, NULL, 0);
    }
    sy_sampler_free(s);
}

static void same_seed_same_tokens_other_seed_other_tokens(void **state) {
    (void)state;
    int32_t a[64], b[64], c[64];
    draw(42, a, 64);
    draw(42, b, 64);
    draw(43, c, 64);
    assert_memory_equal(a, b, sizeof a);
    assert_memory_not_equal(a, c, sizeof a);
}

/* Pearson's chi-square of observed counts against probabilities; 3 degrees of freedom at p = 0.001 is 16.27. */
static void samples_follow_the_softmax(void **state) {
    (void)state;
    const double probs[4] = {0.4, 0.3, 0.2, 0.1};
    sy_sampler_params p = plain(1.0f, 7);
    sy_sampler *s = sy_sampler_create(&p, 4);
    int counts[4] = {0};
    const int n = 20000;
    for (int i = 0; i < n; i++) {
        float l[4];
        for (int k = 0; k < 4; k++) l[k] = (float)log(probs[k]);
        counts[sy_sampler_sample(s, l, NULL, 0)]++;
    }
    double chi2 = 0;
    for (int k = 0; k < 4; k++) {
        double e = probs[k] * n;
        chi2 += (counts[k] - e) * (counts[k] - e) / e;
    }
    assert_true(chi2 < 16.27);
    sy_sampler_free(s);
}

static void temperature_sharpens(void **state) {
    (void)state;
    sy_sampler_params p = plain(0.25f, 3);
    sy_sampler *s = sy_sampler_create(&p, 2);
    int first = 0;
    for (int i = 0; i < 4000; i++) {
        float l[2] = {(float)log(0.6), (float)log(0.4)};
        first += sy_sampler_sample(s, l, NULL, 0) == 0;
    }
    /* At T = 0.25 the odds 0.6:0.4 become 0.6^4:0.4^4, i.e. p(first) = 0.835. */
    assert_true(first > 0.80 * 4000 && first < 0.87 * 4000);
    sy_sampler_free(s);
}

static void filters_cut_the_tail(void **state) {
    (void)state;
    const double probs[4] = {0.5, 0.3, 0.15, 0.05};
    for (int mode = 0; mode < 3; mode++) {
        sy_sampler_params p = plain(1.0f, 11);
        if (mode == 0) p.top_k = 2;  /* keeps ids 0 and 1 */
        if (mode == 1) p.top_p = 0.75f; /* 0.5 + 0.3 passes 0.75: keeps 0 and 1 */
        if (mode == 2) p.min_p = 0.5f; /* floor 0.25: keeps 0 and 1 */
        sy_sampler *s = sy_sampler_create(&p, 4);
        int seen[4] = {0};
        for (int i = 0; i < 3000; i++) {
            float l[4];
            for (int k = 0; k < 4; k++) l[k] = (float)log(probs[k]);
            seen[sy_sampler_sample(s, l, NULL, 0)]++;
        }
        assert_true(seen[0] > 0 && seen[1] > 0);
        assert_int_equal(seen[2], 0);
        assert_int_equal(seen[3], 0);
        sy_sampler_free(s);
    }
}

static void top_k_over_a_large_vocabulary_keeps_exactly_the_k_best(void **state) {
    (void)state;
    enum { N = 5000, K = 5 };
    static float base[N];
    sy_rng rng;
    sy_rng_seed(&rng, 99);
    for (int i = 0; i < N; i++) base[i] = (float)(sy_rng_uniform(&rng) * 4.0);
    int best[K];
    for (int k = 0; k < K; k++) { /* the K best by a plain scan */
        int b = -1;
        for (int i = 0; i < N; i++) {
            int taken = 0;
            for (int j = 0; j < k; j++) taken |= best[j] == i;
            if (!taken && (b < 0 || base[i] > base[b])) b = i;
        }
        best[k] = b;
    }
    sy_sampler_params p = plain(5.0f, 5);
    p.top_k = K;
    sy_sampler *s = sy_sampler_create(&p, N);
    int hits[K] = {0};
    static float l[N];
    for (int i = 0; i < 2000; i++) {
        memcpy(l, base, sizeof l);
        int32_t t = sy_sampler_sample(s, l, NULL, 0);
        int found = -1;
        for (int k = 0; k < K; k++) if (best[k] == t) found = k;
        assert_true(found >= 0);
        hits[found]++;
    }
    for (int k = 0; k < K; k++) assert_true(hits[k] > 0); /* a high temperature reaches all of them */
    sy_sampler_free(s);
}

static void penalties_change_the_logits_as_documented(void **state) {
    (void)state;
    sy_sampler_params p = plain(0.0f, 1);
    p.repeat_penalty = 2.0f;
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.25f;
    p.penalty_last_n = 0;
    sy_sampler *s = sy_sampler_create(&p, 3);
    float l[3] = {4.0f, -1.0f, 3.0f};
    int32_t history[] = {0, 1, 0};
    sy_sampler_sample(s, l, history, 3);
    assert_float_equal(l[0], 4.0f / 2 - 0.5f - 0.25f * 2, 1e-6);
    assert_float_equal(l[1], -1.0f * 2 - 0.5f - 0.25f * 1, 1e-6);
    assert_float_equal(l[2], 3.0f, 1e-6);
    sy_sampler_free(s);
}

static void logprob_is_log_softmax(void **state) {
    (void)state;
    sy_sampler_params p = plain(0.0f, 1);
    sy_sampler *s = sy_sampler_create(&p, 3);
    float l[3] = {1.0f, 2.0f, 3.0f};
    sy_sampler_sample(s, l, NULL, 0);
    double z = log(exp(1.0) + exp(2.0) + exp(3.0));
    assert_float_equal(sy_sampler_last_logprob(s, 0), 1.0 - z, 1e-9);
    assert_float_equal(sy_sampler_last_logprob(s, 2), 3.0 - z, 1e-9);
    assert_true(isinf(sy_sampler_last_logprob(s, 7)));
    sy_sampler_free(s);
}

/* tests/fixtures/sampler/NAME, parsed (the oracle's files, tools/oracle/sampler_fixtures.py). */
static cJSON *load_sampler_fixture(const char *name) {
    const char *src = getenv("SY_SOURCE_DIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/fixtures/sampler/%s", src ? src : ".", name);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    static char text[1 << 21];
    size_t len = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    assert_true(len < sizeof text - 1); /* the whole file was read */
    text[len] = '\0';
    cJSON *doc = cJSON_Parse(text);
    assert_non_null(doc);
    return doc;
}

/* llama.cpp's own chain (tests/fixtures/sampler/llama-chain.json, tools/oracle/sampler_fixtures.py): logit
 * bias, top-k, typical-p, top-p, min-p, XTC (its coin always on) and temperature leave the same candidates with
 * the same probabilities. */
static void chain_matches_llama_cpp(void **state) {
    (void)state;
    cJSON *doc = load_sampler_fixture("llama-chain.json");
    const cJSON *c;
    int n_cases = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(doc, "cases")) {
        const cJSON *logits = cJSON_GetObjectItem(c, "logits"), *p = cJSON_GetObjectItem(c, "params");
        uint32_t n = (uint32_t)cJSON_GetArraySize(logits);
        float *row = malloc(n * sizeof *row);
        for (uint32_t i = 0; i < n; i++) row[i] = (float)cJSON_GetArrayItem(logits, (int)i)->valuedouble;
        sy_sampler_params sp = plain((float)cJSON_GetObjectItem(p, "temperature")->valuedouble, 5);
        sp.top_k = (uint32_t)cJSON_GetObjectItem(p, "top_k")->valuedouble;
        sp.typical_p = (float)cJSON_GetObjectItem(p, "typical_p")->valuedouble;
        sp.top_p = (float)cJSON_GetObjectItem(p, "top_p")->valuedouble;
        sp.min_p = (float)cJSON_GetObjectItem(p, "min_p")->valuedouble;
        sp.xtc_probability = (float)cJSON_GetObjectItem(p, "xtc_probability")->valuedouble;
        sp.xtc_threshold = (float)cJSON_GetObjectItem(p, "xtc_threshold")->valuedouble;
        sy_logit_bias bias[4];
        const cJSON *b;
        cJSON_ArrayForEach(b, cJSON_GetObjectItem(c, "logit_bias")) {
            bias[sp.n_logit_bias].token = (int32_t)cJSON_GetArrayItem(b, 0)->valuedouble;
            bias[sp.n_logit_bias].bias = (float)cJSON_GetArrayItem(b, 1)->valuedouble;
            sp.n_logit_bias++;
        }
        sp.logit_bias = bias;
        sy_sampler *s = sy_sampler_create(&sp, n);
        int32_t ids[256];
        double probs[256];
        size_t k = sy_sampler_distribution(s, row, NULL, 0, ids, probs, 256);
        const cJSON *want_ids = cJSON_GetObjectItem(c, "ids"), *want_p = cJSON_GetObjectItem(c, "probs");
        if (k != (size_t)cJSON_GetArraySize(want_ids)) {
            print_error("case %d: %zu candidates, llama.cpp keeps %d\n", n_cases, k, cJSON_GetArraySize(want_ids));
            fail();
        }
        for (size_t i = 0; i < k; i++) {
            if (ids[i] != (int32_t)cJSON_GetArrayItem(want_ids, (int)i)->valuedouble)
                print_error("case %d: candidate %zu is %d, llama.cpp's %d\n", n_cases, i, ids[i],
                            (int)cJSON_GetArrayItem(want_ids, (int)i)->valuedouble);
            assert_int_equal(ids[i], (int32_t)cJSON_GetArrayItem(want_ids, (int)i)->valuedouble);
            assert_true(fabs(probs[i] - cJSON_GetArrayItem(want_p, (int)i)->valuedouble) < 1e-4);
        }
        sy_sampler_free(s);
        free(row);
        n_cases++;
    }
    assert_true(n_cases >= 50);
    cJSON_Delete(doc);
}

static int by_head(const void *a, const void *b) {
    const sy_dry_sequence *x = a, *y = b;
    return (x->head > y->head) - (x->head < y->head);
}

/* llama.cpp's DRY (tests/fixtures/sampler/llama-dry.json, its "token" cases: breakers given as token sequences):
 * the same logits after it for repetitive histories, over allowed lengths, bases, windows and breakers that
 * span several tokens, and a repetition long enough that the exponent's cap decides. */
static void dry_matches_llama_cpp(void **state) {
    (void)state;
    cJSON *doc = load_sampler_fixture("llama-dry.json");
    const cJSON *c;
    int n_cases = 0, bad = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(doc, "cases")) {
        if (strcmp(cJSON_GetObjectItem(c, "kind")->valuestring, "token") != 0) continue;
        sy_dry_sequence seq[8];
        int32_t tails[32];
        sy_dry_breakers b = {seq, 0, tails, 0};
        const cJSON *br;
        cJSON_ArrayForEach(br, cJSON_GetObjectItem(c, "breakers")) {
            int n = cJSON_GetArraySize(br);
            seq[b.n_sequences] = (sy_dry_sequence){(int32_t)cJSON_GetArrayItem(br, 0)->valuedouble, b.n_tails,
                                                   (uint32_t)(n - 1)};
            for (int i = 1; i < n; i++) tails[b.n_tails++] = (int32_t)cJSON_GetArrayItem(br, i)->valuedouble;
            b.n_sequences++;
        }
        qsort(seq, b.n_sequences, sizeof *seq, by_head);
        bad += dry_fixture_check(c, &b, (uint32_t)cJSON_GetArraySize(cJSON_GetObjectItem(c, "ids")), n_cases);
        n_cases++;
    }
    assert_int_equal(bad, 0);
    assert_true(n_cases >= 50);
    cJSON_Delete(doc);
}

/* DRY's window: -1 reads the whole history, as a window as long as the history does; 0 turns it off. */
static void dry_window_whole_history_and_off(void **state) {
    (void)state;
    int32_t h[40];
    for (int i = 0; i < 40; i++) h[i] = i % 4; /* 0 1 2 3 0 1 2 3 ... : 0 would extend the repetition */
    sy_sampler_params p = plain(1.0f, 1);
    p.dry_multiplier = 1.0f;
    p.dry_penalty_last_n = -1;
    float whole[4] = {0, 0, 0, 0}, sized[4] = {0, 0, 0, 0}, off[4] = {0, 0, 0, 0};
    sy_sampler *s = sy_sampler_create(&p, 4);
    (void)sy_sampler_sample(s, whole, h, 40);
    sy_sampler_free(s);
    p.dry_penalty_last_n = 40;
    s = sy_sampler_create(&p, 4);
    (void)sy_sampler_sample(s, sized, h, 40);
    sy_sampler_free(s);
    assert_memory_equal(whole, sized, sizeof whole);
    assert_true(whole[0] < -1.0f && whole[1] == 0.0f); /* only the token that continues it */
    p.dry_penalty_last_n = 0;
    assert_false(sy_sampler_dry_enabled(&p));
    s = sy_sampler_create(&p, 4);
    (void)sy_sampler_sample(s, off, h, 40);
    sy_sampler_free(s);
    assert_true(off[0] == 0.0f);
}

/* logit_bias adds to the logit: -100 all but bans (a greedy choice moves to the next best), -inf removes. */
static void logit_bias_bans_and_shifts(void **state) {
    (void)state;
    float l[4] = {1, 5, 3, 2};
    sy_logit_bias ban = {1, -100.0f};
    sy_sampler_params p = plain(0, 1);
    p.logit_bias = &ban;
    p.n_logit_bias = 1;
    sy_sampler *s = sy_sampler_create(&p, 4);
    assert_int_equal(sy_sampler_sample(s, l, NULL, 0), 2);
    sy_sampler_free(s);
    float l2[4] = {1, 5, 3, 2};
    sy_logit_bias up = {3, 3.5f};
    p.logit_bias = &up;
    s = sy_sampler_create(&p, 4);
    assert_int_equal(sy_sampler_sample(s, l2, NULL, 0), 3);
    sy_sampler_free(s);
}

/* Every filter combination over rows of NaN and infinities: no read outside the row (ASan), a clear "no token"
 * when nothing is finite, the +inf token when there is one, and the finite ones otherwise. */
static void nan_and_infinite_logits(void **state) {
    (void)state;
    enum { N = 64 };
    const sy_sampler_params variants[] = {
        {.temperature = 0},
        {.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f, .repeat_penalty = 1, .seed = 1},
        {.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0, .repeat_penalty = 1.3f, .seed = 2},
        {.temperature = 1.5f, .top_k = 3, .top_p = 0.5f, .min_p = 0.5f, .repeat_penalty = 1, .presence_penalty = 2,
         .seed = 3},
    };
    const int32_t history[] = {1, 2, 3, 3};
    for (size_t v = 0; v < sizeof variants / sizeof *variants; v++) {
        sy_sampler *s = sy_sampler_create(&variants[v], N);
        float row[N];
        for (int i = 0; i < N; i++) row[i] = NAN;
        assert_int_equal(sy_sampler_sample(s, row, history, 4), SY_SAMPLER_NO_TOKEN);
        for (int i = 0; i < N; i++) row[i] = i % 2 ? NAN : -INFINITY;
        assert_int_equal(sy_sampler_sample(s, row, history, 4), SY_SAMPLER_NO_TOKEN);
        for (int i = 0; i < N; i++) row[i] = NAN;
        row[17] = INFINITY;
        row[40] = INFINITY;
        row[5] = 3.0f;
        int32_t certain = sy_sampler_sample(s, row, history, 4);
        assert_true(certain == 17 || certain == 40); /* the +inf ones share all the mass */
        for (int i = 0; i < N; i++) row[i] = NAN;
        row[9] = 1.0f;
        row[33] = -INFINITY;
        assert_int_equal(sy_sampler_sample(s, row, history, 4), 9);
        for (int i = 0; i < N; i++) row[i] = i == 50 ? -INFINITY : (float)(i % 7);
        for (int k = 0; k < 20; k++) {
            float copy[N];
            memcpy(copy, row, sizeof row);
            int32_t t = sy_sampler_sample(s, copy, history, 4);
            assert_true(t >= 0 && t < N && t != 50);
            assert_false(isnan(sy_sampler_last_logprob(s, t)));
        }
        sy_sampler_free(s);
    }
    float all_nan[3] = {NAN, NAN, NAN};
    assert_int_equal(sy_logits_sanitize(all_nan, 3), 0);
    assert_true(isinf(all_nan[0]) && all_nan[0] < 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(argmax_takes_lowest_id_on_ties),
        cmocka_unit_test(temperature_zero_is_greedy),
        cmocka_unit_test(same_seed_same_tokens_other_seed_other_tokens),
        cmocka_unit_test(samples_follow_the_softmax),
        cmocka_unit_test(temperature_sharpens),
        cmocka_unit_test(filters_cut_the_tail),
        cmocka_unit_test(top_k_over_a_large_vocabulary_keeps_exactly_the_k_best),
        cmocka_unit_test(penalties_change_the_logits_as_documented),
        cmocka_unit_test(logprob_is_log_softmax),
        cmocka_unit_test(chain_matches_llama_cpp),
        cmocka_unit_test(logit_bias_bans_and_shifts),
        cmocka_unit_test(dry_matches_llama_cpp),
        cmocka_unit_test(dry_window_whole_history_and_off),
        cmocka_unit_test(nan_and_infinite_logits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
