/*
 * The drafters of the spec-drafter plugin through their ABI: n-gram prompt lookup (against a brute-force
 * reference, incrementally and after rollbacks, fast), the replay drafter, and the model drafter (greedy proposals
 * of the draft model, refusals naming the tokenizer difference).
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

static spec_env env;
static const sy_drafter_api *api;

static int group_setup(void **state) {
    (void)state;
    if (spec_env_open(&env) != 0) return -1;
    api = sy_plugin_registry_find(&env.reg, "spec-drafter")->drafter;
    return api != NULL ? 0 : -1;
}

static int group_teardown(void **state) {
    (void)state;
    spec_env_close(&env);
    return 0;
}

static sy_drafter *make(const char *spec, const char *target, uint32_t n_vocab, const char *const *opts,
                        size_t n_opts) {
    sy_option o[8] = {{0}};
    char k[8][64], v[8][256];
    for (size_t i = 0; i < n_opts; i++) {
        const char *eq = strchr(opts[i], '=');
        snprintf(k[i], sizeof k[i], "%.*s", (int)(eq - opts[i]), opts[i]);
        snprintf(v[i], sizeof v[i], "%s", eq + 1);
        o[i].key = k[i];
        o[i].value = v[i];
    }
    sy_drafter *d = NULL;
    sy_status st = api->create(spec, target, n_vocab, o, n_opts, &d);
    if (st != SY_OK) fprintf(stderr, "create %s: %s\n", spec, api->error_message());
    assert_int_equal(st, SY_OK);
    return d;
}

static uint32_t propose(sy_drafter *d, sy_draft_state *s, const int32_t *ctx, uint32_t n, uint32_t k,
                        int32_t *out) {
    uint32_t got = 99999;
    assert_int_equal(api->propose(d, s, ctx, n, k, out, &got), SY_OK);
    assert_true(got <= k);
    return got;
}

/* ---- n-gram ------------------------------------------------------------------------------------------------- */

static void ngram_proposes_what_followed(void **state) {
    (void)state;
    sy_drafter *d = make("ngram", NULL, 100, NULL, 0);
    sy_draft_state *s = NULL;
    assert_int_equal(api->state_create(d, &s), SY_OK);
    int32_t out[8];

    static const int32_t repeat[] = {1, 2, 3, 4, 1, 2, 3};
    assert_int_equal(propose(d, s, repeat, 7, 4, out), 4);
    int32_t want1[] = {4, 1, 2, 3};
    assert_memory_equal(out, want1, sizeof want1);

    /* The longest n-gram wins over a more recent shorter one. */
    static const int32_t longest[] = {1, 2, 3, 7, 2, 4, 1, 2};
    assert_int_equal(propose(d, s, longest, 8, 1, out), 1);
    assert_int_equal(out[0], 3);
    /* Among equal n-grams the most recent occurrence. */
    static const int32_t recent[] = {5, 6, 7, 5, 6, 8, 9, 5, 6};
    assert_int_equal(propose(d, s, recent, 9, 2, out), 2);
    assert_int_equal(out[0], 8);
    assert_int_equal(out[1], 9);
    /* A periodic tail continues past the end. */
    static const int32_t same[] = {5, 5, 5};
    assert_int_equal(propose(d, s, same, 3, 5, out), 5);
    for (int i = 0; i < 5; i++) assert_int_equal(out[i], 5);
    /* Nothing to look up. */
    static const int32_t fresh[] = {1, 2, 3};
    assert_int_equal(propose(d, s, fresh, 3, 4, out), 0);
    assert_int_equal(propose(d, s, fresh, 3, 0, out), 0);
    api->state_free(d, s);
    api->destroy(d);

    /* Options narrow the n-gram sizes. */
    static const char *const only_unigrams[] = {"draft_ngram_max=1"};
    d = make("ngram", NULL, 100, only_unigrams, 1);
    assert_int_equal(api->state_create(d, &s), SY_OK);
    assert_int_equal(propose(d, s, longest, 8, 1, out), 1);
    assert_int_equal(out[0], 4);
    api->state_free(d, s);
    api->destroy(d);
    static const char *const only_trigrams[] = {"draft_ngram_min=3", "draft_ngram_max=3"};
    d = make("ngram", NULL, 100, only_trigrams, 2);
    assert_int_equal(api->state_create(d, &s), SY_OK);
    assert_int_equal(propose(d, s, longest, 8, 1, out), 0);
    api->state_free(d, s);
    api->destroy(d);
}

static void ngram_refuses_bad_options(void **state) {
    (void)state;
    static const struct {
        const char *key, *value, *expect;
    } bad[] = {
        {"draft_ngram_max", "0", "draft_ngram_max"},
        {"draft_ngram_max", "33", "draft_ngram_max"},
        {"draft_ngram_min", "x", "draft_ngram_min"},
        {"draft_ngram_min", "-1", "draft_ngram_min"},
        {"draft_ngram_min", "99999999999", "draft_ngram_min"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        sy_option o = {bad[i].key, bad[i].value};
        sy_drafter *d = NULL;
        assert_int_equal(api->create("ngram", NULL, 100, &o, 1, &d), SY_ERR_INVALID_ARGUMENT);
        assert_null(d);
        assert_non_null(strstr(api->error_message(), bad[i].expect));
    }
    sy_option o[2] = {{"draft_ngram_min", "4"}, {"draft_ngram_max", "2"}};
    sy_drafter *d = NULL;
    assert_int_equal(api->create("ngram", NULL, 100, o, 2, &d), SY_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(api->error_message(), "more than"));
    assert_int_equal(api->supports("ngram"), SY_OK);
    assert_int_equal(api->supports("model:x"), SY_OK);
    assert_int_equal(api->supports("model:"), SY_ERR_UNSUPPORTED);
    assert_int_equal(api->supports("eagle"), SY_ERR_UNSUPPORTED);
    assert_int_equal(api->create("eagle", NULL, 100, NULL, 0, &d), SY_ERR_UNSUPPORTED);
    assert_int_equal(api->create("ngram", NULL, 0, NULL, 0, &d), SY_ERR_INVALID_ARGUMENT);
}

/* What prompt lookup must propose: the most recent earlier occurrence of the longest tail n-gram. */
static uint32_t reference_lookup(const int32_t *t, uint32_t n, uint32_t n_min, uint32_t n_max, uint32_t k,
                                 int32_t *out) {
    for (uint32_t g = n_max; g >= n_min; g--) {
        if (g > n) continue;
        for (uint32_t j = n - 1; j >= g; j--) { /* the follower position of an occurrence ending at j-1 */
            if (memcmp(t + j - g, t + n - g, g * sizeof *t) != 0) continue;
            uint32_t period = n - j;
            for (uint32_t i = 0; i < k; i++) out[i] = i < period ? t[j + i] : out[i - period];
            return k;
        }
    }
    return 0;
}

static void ngram_matches_reference_incrementally(void **state) {
    (void)state;
    sy_drafter *d = make("ngram", NULL, 1000, NULL, 0);
    sy_draft_state *s = NULL;
    assert_int_equal(api->state_create(d, &s), SY_OK);
    enum { N = 3000 };
    int32_t *ctx = malloc(N * sizeof *ctx);
    uint32_t x = 12345;
    int32_t got[8], want[8];
    uint32_t n = 0, hits = 0;
    for (uint32_t step = 0; n < N; step++) {
        /* Mostly small-alphabet tokens so n-grams recur; sometimes a rollback, as after rejected proposals. */
        x = x * 1103515245u + 12345u;
        if ((x >> 16) % 50 == 0 && n > 20) {
            n -= 1 + (x >> 8) % 10;
        } else {
            uint32_t add = 1 + (x >> 12) % 3;
            for (uint32_t a = 0; a < add && n < N; a++) {
                x = x * 1103515245u + 12345u;
                ctx[n++] = (int32_t)((x >> 16) % 6);
            }
        }
        uint32_t k = 1 + step % 8;
        uint32_t g1 = propose(d, s, ctx, n, k, got);
        uint32_t g2 = reference_lookup(ctx, n, 1, 4, k, want);
        assert_int_equal(g1, g2);
        if (g1 > 0) {
            assert_memory_equal(got, want, g1 * sizeof *got);
            hits++;
        }
        if (step % 7 == 0) assert_int_equal(api->observe(d, s, k, 0, ctx, n), SY_OK);
    }
    assert_true(hits > 100);
    /* A context that is not an extension of the last one (another request in the state) is indexed afresh. */
    for (uint32_t i = 0; i < 100; i++) ctx[i] = (int32_t)(500 + i % 9);
    assert_int_equal(propose(d, s, ctx, 100, 3, got), reference_lookup(ctx, 100, 1, 4, 3, want));
    assert_memory_equal(got, want, 3 * sizeof *got);
    free(ctx);
    api->state_free(d, s);
    api->destroy(d);
}

static void ngram_proposal_costs_microseconds(void **state) {
    (void)state;
    sy_drafter *d = make("ngram", NULL, 32000, NULL, 0);
    sy_draft_state *s = NULL;
    assert_int_equal(api->state_create(d, &s), SY_OK);
    enum { N = 120000, START = 100000 };
    int32_t *ctx = malloc(N * sizeof *ctx);
    uint32_t x = 7;
    for (uint32_t i = 0; i < N; i++) {
        x = x * 1103515245u + 12345u;
        ctx[i] = (int32_t)((x >> 16) % 3000);
    }
    int32_t out[16];
    propose(d, s, ctx, START, 16, out); /* indexes the long context once */
    double t0 = sy_now_seconds();
    for (uint32_t n = START + 1; n <= N; n++) propose(d, s, ctx, n, 16, out);
    double per = (sy_now_seconds() - t0) / (N - START);
    printf("ngram: %.2f us per proposal at a context of %u tokens\n", per * 1e6, (unsigned)N);
    /* A scan of the context would take ~100x longer; generous for sanitizer builds and a shared machine. */
    assert_true(per < 100e-6);
    free(ctx);
    api->state_free(d, s);
    api->destroy(d);
}

static void state_calls_are_checked(void **state) {
    (void)state;
    sy_drafter *d = make("ngram", NULL, 100, NULL, 0), *other = make("ngram", NULL, 100, NULL, 0);
    sy_draft_state *s = NULL;
    assert_int_equal(api->state_create(d, &s), SY_OK);
    int32_t ctx[4] = {1, 2, 1, 2}, out[4];
    uint32_t got = 0;
    assert_int_equal(api->propose(other, s, ctx, 4, 4, out, &got), SY_ERR_INVALID_ARGUMENT);
    assert_int_equal(api->propose(d, s, NULL, 4, 4, out, &got), SY_ERR_INVALID_ARGUMENT);
    assert_int_equal(api->propose(d, s, ctx, 4, 4, NULL, &got), SY_ERR_INVALID_ARGUMENT);
    assert_int_equal(api->observe(d, s, 2, 3, ctx, 4), SY_ERR_INVALID_ARGUMENT);
    sy_draft_state *none = NULL;
    assert_int_equal(api->state_create(NULL, &none), SY_ERR_INVALID_ARGUMENT);
    assert_null(none);
    api->state_free(d, s);
    api->destroy(d);
    api->destroy(other);
}

/* ---- replay ------------------------------------------------------------------------------------------------- */

static void replay_proposes_the_file_with_corruption(void **state) {
    (void)state;
    char text[40000];
    size_t len = 0;
    for (int i = 0; i < 4000; i++) len += (size_t)snprintf(text + len, sizeof text - len, "%d%s", (i * 7) % 97, i % 10 ? " " : ",\n");
    char *path = spec_write_file(&env, "replay.txt", text);
    char spec[512];
    int32_t ctx[4000], out[8];
    for (int i = 0; i < 4000; i++) ctx[i] = (i * 7) % 97;

    snprintf(spec, sizeof spec, "replay:%s:0", path);
    sy_drafter *d = make(spec, NULL, 100, NULL, 0);
    sy_draft_state *s = NULL;
    assert_int_equal(api->state_create(d, &s), SY_OK);
    assert_int_equal(propose(d, s, ctx, 3, 4, out), 4);
    assert_memory_equal(out, ctx + 3, 4 * sizeof *out);
    /* Found by its last tokens when not by position (the file repeats itself with period 97). */
    assert_int_equal(propose(d, s, ctx + 500, 20, 4, out), 4);
    assert_memory_equal(out, ctx + 520, 4 * sizeof *out);
    /* A context that is not in the file: nothing. */
    int32_t alien[2] = {98, 99};
    assert_int_equal(propose(d, s, alien, 2, 4, out), 0);
    api->state_free(d, s);
    api->destroy(d);

    /* PCT percent of the positions are corrupted: always to another token of the vocabulary. */
    static const int pcts[] = {100, 30};
    for (int c = 0; c < 2; c++) {
        snprintf(spec, sizeof spec, "replay:%s:%d", path, pcts[c]);
        d = make(spec, NULL, 100, NULL, 0);
        assert_int_equal(api->state_create(d, &s), SY_OK);
        uint32_t wrong = 0, total = 0;
        for (uint32_t n = 1; n + 8 < 4000; n += 8) {
            uint32_t got = propose(d, s, ctx, n, 8, out);
            assert_int_equal(got, 8);
            for (uint32_t i = 0; i < got; i++) {
                assert_true(out[i] >= 0 && out[i] < 100);
                wrong += out[i] != ctx[n + i];
                total++;
            }
        }
        double share = (double)wrong / total;
        if (pcts[c] == 100) assert_int_equal(wrong, total);
        else assert_true(share > 0.27 && share < 0.33);
        api->state_free(d, s);
        api->destroy(d);
    }

    /* Refusals name the file and the problem. */
    sy_drafter *none = NULL;
    assert_int_not_equal(api->create("replay:/nonexistent/file.txt:10", NULL, 100, NULL, 0, &none), SY_OK);
    assert_non_null(strstr(api->error_message(), "/nonexistent/file.txt"));
    char *bad = spec_write_file(&env, "bad.txt", "1 2 three 4");
    snprintf(spec, sizeof spec, "replay:%s:10", bad);
    assert_int_equal(api->create(spec, NULL, 100, NULL, 0, &none), SY_ERR_FORMAT);
    assert_non_null(strstr(api->error_message(), "expected a token id"));
    char *big = spec_write_file(&env, "big.txt", "1 2 300");
    snprintf(spec, sizeof spec, "replay:%s", big);
    assert_int_equal(api->create(spec, NULL, 100, NULL, 0, &none), SY_ERR_FORMAT);
    assert_non_null(strstr(api->error_message(), "outside the vocabulary"));
    free(bad);
    free(big);
    free(path);
}

/* ---- model drafter ------------------------------------------------------------------------------------------ */

/* The greedy continuation of ctx by a model, decoded directly. */
static void greedy_reference(const sy_loaded_model *lm, const int32_t *ctx, uint32_t n, uint32_t k, int32_t *out) {
    sy_seq *seq = NULL;
    assert_int_equal(lm->engine->seq_create(lm->model, &seq), SY_OK);
    float *logits = malloc(lm->info.n_vocab * sizeof *logits);
    sy_decode_item item = {sizeof item, seq, ctx, n, 1, logits, NULL};
    sy_decode_batch batch = {sizeof batch, 1, sizeof item, &item, NULL, NULL};
    assert_int_equal(lm->engine->decode(lm->model, &batch), SY_OK);
    for (uint32_t i = 0; i < k; i++) {
        out[i] = sy_argmax(logits, lm->info.n_vocab);
        item.tokens = &out[i];
        item.n_tokens = 1;
        assert_int_equal(lm->engine->decode(lm->model, &batch), SY_OK);
    }
    free(logits);
    lm->engine->seq_free(lm->model, seq);
}

/* A test engine that lies about one token's bytes, to stand for a model with another tokenizer. */
static const sy_engine_api *real_engine;
static sy_engine_api liar_engine;
static sy_status liar_token_to_bytes(const sy_model *m, int32_t token, char *out, size_t cap, size_t *n) {
    if (token == 200) {
        *n = 3;
        if (cap < 3) return SY_ERR_BUFFER_TOO_SMALL;
        memcpy(out, "zz\n", 3);
        return SY_OK;
    }
    return real_engine->token_to_bytes(m, token, out, cap, n);
}

static void model_drafter_drafts_greedily_and_checks_tokenizers(void **state) {
    (void)state;
    char *target_path = spec_write_model(&env, "target.txt", "seed=11\nn_ctx=2048");
    char *draft_path = spec_write_model(&env, "draft.txt", "seed=202\nn_ctx=2048");
    char *wide_path = spec_write_model(&env, "wide.txt", "seed=5\nn_vocab=300");
    sy_loaded_model target, draft, wide;
    spec_open_model(&env, target_path, NULL, 0, &target);
    spec_open_model(&env, draft_path, NULL, 0, &draft);
    spec_open_model(&env, wide_path, NULL, 0, &wide);
    assert_int_equal(sy_loaded_model_publish("t:target", &target), 0);
    assert_int_equal(sy_loaded_model_publish("t:draft", &draft), 0);
    assert_int_equal(sy_loaded_model_publish("t:wide", &wide), 0);
    uint32_t n_vocab = target.info.n_vocab;

    sy_drafter *d = make("model:t:draft", "t:target", n_vocab, NULL, 0);
    /* Borrowed while the drafter lives. */
    assert_int_equal(sy_loaded_model_unpublish("t:draft", &draft), -1);
    sy_draft_state *s = NULL;
    assert_int_equal(api->state_create(d, &s), SY_OK);
    int32_t ctx[300], got[8], want[8];
    size_t n_prompt = 0;
    int32_t *prompt = spec_make_prompt(3, false, &n_prompt);
    uint32_t n = (uint32_t)(n_prompt < 200 ? n_prompt : 200);
    memcpy(ctx, prompt, n * sizeof *ctx);
    free(prompt);
    /* The drafts follow the context as it grows, shrinks and changes, always the draft model's greedy choice. */
    static const int32_t edits[][2] = {{0, 5}, {3, 1}, {8, 0}, {0, 7}, {1, 2}};
    for (size_t e = 0; e < sizeof edits / sizeof *edits; e++) {
        n -= (uint32_t)edits[e][0];
        for (int32_t i = 0; i < edits[e][1]; i++) ctx[n++] = 'a' + (int32_t)((e * 7 + (size_t)i) % 26);
        uint32_t k = 1 + (uint32_t)e;
        assert_int_equal(propose(d, s, ctx, n, k, got), k);
        greedy_reference(&draft, ctx, n, k, want);
        assert_memory_equal(got, want, k * sizeof *got);
        assert_int_equal(api->observe(d, s, k, 1, ctx, n), SY_OK);
    }
    api->state_free(d, s);
    api->destroy(d);
    assert_int_equal(sy_loaded_model_unpublish("t:draft", &draft), 0);
    assert_int_equal(sy_loaded_model_publish("t:draft", &draft), 0);

    /* Refusals say what differs. */
    sy_drafter *none = NULL;
    assert_int_equal(api->create("model:t:wide", "t:target", n_vocab, NULL, 0, &none), SY_ERR_UNSUPPORTED);
    assert_non_null(strstr(api->error_message(), "300"));
    assert_non_null(strstr(api->error_message(), "264"));
    assert_int_equal(api->create("model:t:nope", "t:target", n_vocab, NULL, 0, &none), SY_ERR_UNSUPPORTED);
    assert_non_null(strstr(api->error_message(), "t:nope"));
    assert_int_equal(api->create("model:t:draft", NULL, n_vocab, NULL, 0, &none), SY_ERR_INVALID_ARGUMENT);
    real_engine = target.engine;
    liar_engine = *target.engine;
    liar_engine.token_to_bytes = liar_token_to_bytes;
    sy_loaded_model liar = target;
    liar.engine = &liar_engine;
    assert_int_equal(sy_loaded_model_publish("t:liar", &liar), 0);
    assert_int_equal(api->create("model:t:liar", "t:target", n_vocab, NULL, 0, &none), SY_ERR_UNSUPPORTED);
    const char *msg = api->error_message();
    assert_non_null(strstr(msg, "token 200"));
    assert_non_null(strstr(msg, "zz\\x0a"));
    assert_non_null(strstr(msg, "\\xc8")); /* the target's byte 200 */
    /* Every reference taken by the refused creates was given back. */
    static const char *const names[] = {"t:liar", "t:wide", "t:draft", "t:target"};
    for (size_t i = 0; i < 4; i++) assert_int_equal(sy_loaded_model_unpublish(names[i], &target), 0);
    sy_loaded_model_close(&wide);
    sy_loaded_model_close(&draft);
    sy_loaded_model_close(&target);
    free(target_path);
    free(draft_path);
    free(wide_path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(ngram_proposes_what_followed),
        cmocka_unit_test(ngram_refuses_bad_options),
        cmocka_unit_test(ngram_matches_reference_incrementally),
        cmocka_unit_test(ngram_proposal_costs_microseconds),
        cmocka_unit_test(state_calls_are_checked),
        cmocka_unit_test(replay_proposes_the_file_with_corruption),
        cmocka_unit_test(model_drafter_drafts_greedily_and_checks_tokenizers),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
