/* lfm2-cuda on a GPU, through the plugin ABI, on the transformers fixture tests/fixtures/hf/lfm2-f32:
 *  - the tokenizer gives the fixture's ids; logits (every position of prompt 1, the last of the others) are within
 *    5e-2 of the logit range of transformers' F32 logits (BF16 weights and GEMM inputs, F32 accumulation and
 *    residual: a full-BF16 transformers run of this model is off by up to 2.5e-2), greedy tokens agree until a
 *    near tie;
 *  - decode_sample (greedy, on-device argmax) picks the argmax of decode's logits;
 *  - truncate-then-redecode gives the first decode's logits, back to 16 tokens; deeper is SY_ERR_UNSUPPORTED; fork
 *    shares KV blocks and copies on write (the source and the fork stay independent);
 *  - chunked prefill (max_batch_tokens 16), split-K decode attention (600 positions), several sequences in one
 *    decode, a cancelled decode and a full KV cache all leave sequences consistent;
 *  - decode steps replayed as CUDA graphs equal the same steps run eagerly;
 *  - synthetic weights are deterministic per seed.
 * Label gpu. Without a usable GPU the test prints why and exits 77 (skipped). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "lfm2_cuda_test_util.h"

#define V 512

static const sy_engine_sampling_api *sampling;
static const char *fixture;

static sy_model *load(const char *path, const char *batch_tokens, const char *ctx, const char *kv_mb) {
    sy_option opts[4] = {{"max_batch_tokens", batch_tokens}, {"ctx_size", ctx}, {"kv_cache_mb", kv_mb},
                         {"max_sequences", "32"}};
    sy_option used[4];
    size_t n = 0;
    for (int i = 0; i < 4; i++)
        if (opts[i].value) used[n++] = opts[i];
    sy_model *m = NULL;
    sy_status st = lct_api->load(path, used, n, &m);
    if (st != SY_OK) fail_msg("load %s: %s", path, lct_api->error_message());
    return m;
}

static sy_status decode1(sy_model *m, sy_seq *s, const int32_t *t, uint32_t n, uint32_t n_logits, float *logits,
                         const sy_host_call *call) {
    sy_decode_item item = {sizeof item, s, t, n, n_logits, logits, NULL};
    sy_decode_batch batch = {sizeof batch, 1, sizeof item, &item, call, NULL};
    return lct_api->decode(m, &batch);
}

static int32_t argmax(const float *x) {
    int32_t b = 0;
    for (int32_t i = 1; i < V; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

static double range_of(const float *x) {
    float lo = x[0], hi = x[0];
    for (int i = 1; i < V; i++) lo = fminf(lo, x[i]), hi = fmaxf(hi, x[i]);
    return hi - lo;
}

static void expect_close(const float *got, const float *want, size_t n, double fraction, const char *what) {
    double worst = 0, r = range_of(want);
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(got[i])) fail_msg("%s: logit %zu is %g", what, i, (double)got[i]);
        worst = fmax(worst, fabs((double)got[i] - want[i]));
    }
    if (!(worst <= fraction * r)) fail_msg("%s: max |diff| %.4g is %.3g of the range", what, worst, worst / r);
}

static void test_matches_transformers(void **state) {
    (void)state;
    cJSON *exp = lct_read_json(lct_source_path("tests/fixtures/hf/lfm2-f32/expected.json"));
    assert_non_null(exp);
    sy_model *m = load(fixture, NULL, NULL, NULL);
    sy_model_info info = {.struct_size = sizeof info};
    assert_int_equal(lct_api->model_info(m, &info), SY_OK);
    assert_string_equal(info.architecture, "lfm2");
    assert_string_equal(info.weight_dtype, "bf16");
    assert_int_equal(info.n_vocab, V);
    assert_int_equal(info.n_layer, 4);
    const cJSON *p;
    cJSON_ArrayForEach(p, cJSON_GetObjectItem(exp, "prompts")) {
        int32_t ids[64];
        int n = 0;
        const cJSON *v;
        cJSON_ArrayForEach(v, cJSON_GetObjectItem(p, "ids")) ids[n++] = (int32_t)v->valuedouble;
        /* the tokenizer from tokenizer.json gives the same ids */
        const char *text = cJSON_GetObjectItem(p, "text")->valuestring;
        int32_t tok[64];
        size_t nt;
        if (n > 1) {
            assert_int_equal(lct_api->tokenize(m, text, strlen(text), 0, tok, 64, &nt), SY_OK);
            assert_int_equal(nt, (size_t)n);
            assert_memory_equal(tok, ids, (size_t)n * sizeof *ids);
        }
        const cJSON *all = cJSON_GetObjectItem(p, "all_logits");
        uint32_t rows = all ? (uint32_t)n : 1;
        float *got = malloc((size_t)rows * V * sizeof(float)), want[V];
        sy_seq *s;
        assert_int_equal(lct_api->seq_create(m, &s), SY_OK);
        assert_int_equal(decode1(m, s, ids, (uint32_t)n, rows, got, NULL), SY_OK);
        for (uint32_t r = 0; r < rows; r++) {
            const cJSON *row = all ? cJSON_GetArrayItem(all, (int)r) : cJSON_GetObjectItem(p, "last_logits");
            int i = 0;
            cJSON_ArrayForEach(v, row) want[i++] = (float)v->valuedouble;
            expect_close(got + (size_t)r * V, want, V, 5e-2, "logits vs transformers");
        }
        /* greedy: the same tokens until a near tie (margin under a tenth of the range) */
        const cJSON *greedy = cJSON_GetObjectItem(p, "greedy");
        float last[V];
        memcpy(last, got + (size_t)(rows - 1) * V, sizeof last);
        for (int t = 0; t < 32; t++) {
            int32_t want_tok = (int32_t)cJSON_GetArrayItem(cJSON_GetObjectItem(greedy, "tokens"), t)->valuedouble;
            double margin = cJSON_GetArrayItem(cJSON_GetObjectItem(greedy, "top1_margins"), t)->valuedouble;
            int32_t tok1 = argmax(last);
            if (tok1 != want_tok) {
                if (margin < 0.1 * range_of(last)) break;
                fail_msg("greedy step %d: %d, expected %d (margin %g)", t, tok1, want_tok, margin);
            }
            assert_int_equal(decode1(m, s, &tok1, 1, 1, last, NULL), SY_OK);
        }
        lct_api->seq_free(m, s);
        free(got);
    }
    lct_api->unload(m);
    cJSON_Delete(exp);
}

static const int32_t prompt[12] = {308, 261, 44, 7, 99, 120, 401, 33, 250, 17, 64, 480};
enum { NP = 12, NC = 24 };

static void test_sampling_truncate_fork(void **state) {
    (void)state;
    sy_model *m = load(fixture, NULL, NULL, NULL);
    sy_seq *a, *b;
    float step[NC][V], got[V];
    int32_t cont[NC];
    assert_int_equal(lct_api->seq_create(m, &a), SY_OK);
    assert_int_equal(lct_api->seq_create(m, &b), SY_OK);
    assert_int_equal(decode1(m, a, prompt, NP, 1, got, NULL), SY_OK);
    /* decode_sample, greedy: the argmax of the same row */
    int32_t sampled;
    uint64_t rng = 1;
    sy_sampling_params greedy = {sizeof greedy, 0.0f, 0, 1.0f, 0.0f, &rng};
    sy_decode_item item = {sizeof item, b, prompt, NP, 1, NULL, NULL};
    sy_decode_batch batch = {sizeof batch, 1, sizeof item, &item, NULL, NULL};
    assert_int_equal(sampling->decode_sample(m, &batch, &greedy, &sampled), SY_OK);
    assert_int_equal(sampled, argmax(got));
    for (int i = 0; i < NC; i++) {
        cont[i] = (argmax(i ? step[i - 1] : got) + 37 * i) % 500;
        assert_int_equal(decode1(m, a, &cont[i], 1, 1, step[i], NULL), SY_OK);
    }
    const uint32_t len = NP + NC;
    /* truncate and redecode */
    assert_int_equal(lct_api->seq_truncate(m, a, len - 16), SY_OK);
    for (int i = NC - 16; i < NC; i++) {
        assert_int_equal(decode1(m, a, &cont[i], 1, 1, got, NULL), SY_OK);
        expect_close(got, step[i], V, 1e-5, "truncate-then-redecode");
    }
    assert_int_equal(lct_api->seq_truncate(m, a, len - 17), SY_ERR_UNSUPPORTED);
    assert_int_equal(lct_api->seq_length(m, a), len);
    /* fork 2 back: the fork shares all 3 blocks; the source then writes into the shared third block (it copies
     * it first), and the fork's own continuation is unaffected */
    sy_seq *f;
    int32_t other = 9;
    assert_int_equal(lct_api->seq_fork(m, a, len - 2, &f), SY_OK);
    assert_int_equal(decode1(m, a, &other, 1, 1, got, NULL), SY_OK);
    for (int i = NC - 2; i < NC; i++) {
        assert_int_equal(decode1(m, f, &cont[i], 1, 1, got, NULL), SY_OK);
        expect_close(got, step[i], V, 1e-5, "fork, after the source wrote");
    }
    lct_api->seq_free(m, f);
    /* fork 6 back from the source (now len + 1 long): this time the fork writes into a shared block */
    assert_int_equal(lct_api->seq_fork(m, a, len - 5, &f), SY_OK);
    for (int i = NC - 5; i < NC; i++) {
        assert_int_equal(decode1(m, f, &cont[i], 1, 1, got, NULL), SY_OK);
        expect_close(got, step[i], V, 1e-5, "fork");
    }
    assert_int_equal(lct_api->seq_truncate(m, a, len), SY_OK);
    assert_int_equal(lct_api->seq_truncate(m, a, len - 1), SY_OK);
    assert_int_equal(decode1(m, a, &cont[NC - 1], 1, 1, got, NULL), SY_OK);
    expect_close(got, step[NC - 1], V, 1e-5, "the source after the fork");
    assert_int_equal(lct_api->seq_fork(m, a, len - 17, &f), SY_ERR_UNSUPPORTED);
    lct_api->seq_free(m, f);
    lct_api->seq_free(m, a);
    lct_api->seq_free(m, b);
    lct_api->unload(m);
}

static void test_chunks_splits_batches_cancel(void **state) {
    (void)state;
    /* chunks of 16 rows against the default 512 */
    sy_model *big = load(fixture, NULL, "1024", NULL), *small = load(fixture, "16", "1024", NULL);
    enum { LONG = 600 };
    static int32_t toks[LONG];
    uint32_t seed = 5;
    for (int i = 0; i < LONG; i++) seed = seed * 1664525u + 1013904223u, toks[i] = (int32_t)((seed >> 8) % 500);
    sy_seq *x, *y;
    float lx[2 * V], ly[2 * V];
    assert_int_equal(lct_api->seq_create(big, &x), SY_OK);
    assert_int_equal(lct_api->seq_create(small, &y), SY_OK);
    assert_int_equal(decode1(big, x, toks, 100, 2, lx, NULL), SY_OK);
    assert_int_equal(decode1(small, y, toks, 100, 2, ly, NULL), SY_OK);
    expect_close(ly, lx, 2 * V, 1e-2, "chunks of 16 vs one chunk");
    /* split-K: position 599 decoded alone (1 row: keys split in 256s) vs inside a 500-row chunk (no split) */
    assert_int_equal(decode1(big, x, toks + 100, 499, 1, lx, NULL), SY_OK);
    assert_int_equal(decode1(big, x, toks + 599, 1, 1, lx, NULL), SY_OK);
    sy_seq *z;
    assert_int_equal(lct_api->seq_create(big, &z), SY_OK);
    assert_int_equal(decode1(big, z, toks, 500, 0, NULL, NULL), SY_OK);
    assert_int_equal(decode1(big, z, toks + 500, 100, 1, ly, NULL), SY_OK);
    expect_close(lx, ly, V, 1e-2, "split-K decode vs unsplit");
    /* three sequences in one call equal each alone */
    sy_seq *t[3], *alone[3];
    float lt[3][V], la[V];
    sy_decode_item items[3];
    for (int i = 0; i < 3; i++) {
        assert_int_equal(lct_api->seq_create(big, &t[i]), SY_OK);
        assert_int_equal(lct_api->seq_create(big, &alone[i]), SY_OK);
        items[i] = (sy_decode_item){sizeof(sy_decode_item), t[i], toks + 50 * i, (uint32_t)(10 + 40 * i), 1, lt[i], NULL};
    }
    sy_decode_batch batch = {sizeof batch, 3, sizeof(sy_decode_item), items, NULL, NULL};
    assert_int_equal(lct_api->decode(big, &batch), SY_OK);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(decode1(big, alone[i], toks + 50 * i, (uint32_t)(10 + 40 * i), 1, la, NULL), SY_OK);
        expect_close(lt[i], la, V, 1e-2, "batched vs alone");
    }
    /* a cancellation after 2 layers leaves every sequence as it was */
    int marker;
    int32_t next[3] = {1, 2, 3};
    for (int i = 0; i < 3; i++) items[i] = (sy_decode_item){sizeof(sy_decode_item), t[i], &next[i], 1, 1, lt[i], NULL};
    batch.call = (const sy_host_call *)&marker;
    lct_cancel_countdown = 2;
    assert_int_equal(lct_api->decode(big, &batch), SY_ERR_CANCELLED);
    lct_cancel_countdown = -1;
    for (int i = 0; i < 3; i++) assert_int_equal(lct_api->seq_length(big, t[i]), (uint32_t)(10 + 40 * i));
    assert_int_equal(lct_api->decode(big, &batch), SY_OK);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(decode1(big, alone[i], &next[i], 1, 1, la, NULL), SY_OK);
        expect_close(lt[i], la, V, 1e-2, "after a cancelled decode");
    }
    sy_memory_usage mu = {.struct_size = sizeof mu};
    assert_int_equal(lct_api->memory_usage(big, &mu), SY_OK);
    assert_true(mu.device_bytes > mu.kv_bytes && mu.kv_bytes > 0);
    lct_api->unload(big);
    lct_api->unload(small);
}

static void test_full_kv_cache(void **state) {
    (void)state;
    /* 1 MB of KV: 256 blocks of 16 positions (2 attention layers x K, V x 2 heads x 16 x 16 x 2 bytes = 4 KB) */
    sy_model *m = load(fixture, NULL, "256", "1");
    static int32_t toks[256];
    for (int i = 0; i < 256; i++) toks[i] = i;
    sy_seq *s[17];
    int ok = 0;
    for (int i = 0; i < 17; i++) {
        assert_int_equal(lct_api->seq_create(m, &s[i]), SY_OK);
        sy_status st = decode1(m, s[i], toks, 256, 0, NULL, NULL);
        if (st == SY_OK) {
            ok++;
            continue;
        }
        assert_int_equal(st, SY_ERR_OUT_OF_MEMORY);
        assert_non_null(strstr(lct_api->error_message(), "KV cache is full"));
        assert_int_equal(lct_api->seq_length(m, s[i]), 0);
    }
    assert_int_equal(ok, 16);
    /* freeing one makes room again */
    lct_api->seq_free(m, s[0]);
    assert_int_equal(decode1(m, s[16], toks, 256, 0, NULL, NULL), SY_OK);
    for (int i = 1; i < 17; i++) lct_api->seq_free(m, s[i]);
    lct_api->unload(m);
}

/* Decode steps replayed as CUDA graphs (the default) equal the same steps run eagerly (cuda_graphs=0), in both
 * output modes and at two batch sizes. */
static void test_graphs_match_eager(void **state) {
    (void)state;
    sy_option eager_opt[2] = {{"cuda_graphs", "0"}, {"ctx_size", "1024"}}, graph_opt[1] = {{"ctx_size", "1024"}};
    sy_model *eager = NULL, *graphed = NULL;
    assert_int_equal(lct_api->load(fixture, eager_opt, 2, &eager), SY_OK);
    assert_int_equal(lct_api->load(fixture, graph_opt, 1, &graphed), SY_OK);
    sy_model *models[2] = {eager, graphed};
    enum { B = 3, STEPS = 300 }; /* past 256 positions: more than one key split */
    sy_seq *seqs[2][B];
    float logits[2][B][V];
    int32_t next[2][B];
    for (int mi = 0; mi < 2; mi++) {
        for (int b = 0; b < B; b++) {
            assert_int_equal(lct_api->seq_create(models[mi], &seqs[mi][b]), SY_OK);
            assert_int_equal(decode1(models[mi], seqs[mi][b], prompt + b, NP - b, 1, logits[mi][b], NULL), SY_OK);
            next[mi][b] = argmax(logits[mi][b]);
        }
    }
    for (int step = 0; step < STEPS; step++) {
        int batch = step % 2 ? B : 1; /* alternate batch sizes: two graphs per mode */
        bool sample = step % 3 == 0;
        for (int mi = 0; mi < 2; mi++) {
            sy_decode_item items[B];
            for (int b = 0; b < batch; b++)
                items[b] = (sy_decode_item){sizeof(sy_decode_item), seqs[mi][b], &next[mi][b], 1, 1,
                                            sample ? NULL : logits[mi][b], NULL};
            sy_decode_batch batch_desc = {sizeof batch_desc, (uint32_t)batch, sizeof(sy_decode_item), items, NULL, NULL};
            if (sample) {
                uint64_t rngs[B] = {1, 2, 3};
                sy_sampling_params params[B];
                for (int b = 0; b < batch; b++)
                    params[b] = (sy_sampling_params){sizeof params[b], 0, 0, 1, 0, &rngs[b]};
                int32_t out[B];
                assert_int_equal(sampling->decode_sample(models[mi], &batch_desc, params, out), SY_OK);
                for (int b = 0; b < batch; b++) next[mi][b] = out[b];
            } else {
                assert_int_equal(lct_api->decode(models[mi], &batch_desc), SY_OK);
                for (int b = 0; b < batch; b++) next[mi][b] = argmax(logits[mi][b]);
            }
        }
        if (!sample)
            for (int b = 0; b < batch; b++) expect_close(logits[1][b], logits[0][b], V, 1e-3, "graph vs eager");
        /* both runs feed the eager run's tokens, so a near tie cannot make them drift apart */
        for (int b = 0; b < B; b++) next[1][b] = next[0][b];
    }
    for (int mi = 0; mi < 2; mi++) {
        for (int b = 0; b < B; b++) lct_api->seq_free(models[mi], seqs[mi][b]);
        lct_api->unload(models[mi]);
    }
}

static void test_synthetic_weights(void **state) {
    (void)state;
    const char *cfg = lct_source_path("tests/fixtures/hf/lfm2-f32/config.json");
    float l1[V], l2[V], l3[V];
    for (int i = 0; i < 3; i++) {
        sy_option opts[2] = {{"seed", i < 2 ? "7" : "8"}, {"ctx_size", "256"}};
        sy_model *m = NULL;
        if (lct_api->load(cfg, opts, 2, &m) != SY_OK) fail_msg("synthetic load: %s", lct_api->error_message());
        int32_t ids[4];
        size_t n;
        assert_int_equal(lct_api->tokenize(m, "hi", 2, 0, ids, 4, &n), SY_ERR_UNSUPPORTED);
        sy_seq *s;
        assert_int_equal(lct_api->seq_create(m, &s), SY_OK);
        assert_int_equal(decode1(m, s, prompt, NP, 1, i == 0 ? l1 : i == 1 ? l2 : l3, NULL), SY_OK);
        lct_api->seq_free(m, s);
        lct_api->unload(m);
    }
    /* equal seeds: the same weights (the GEMM algorithm is chosen per load by timing, so allow rounding) */
    expect_close(l2, l1, V, 1e-3, "the same seed");
    double diff = 0;
    for (int i = 0; i < V; i++) diff = fmax(diff, fabs((double)l1[i] - l3[i]));
    assert_true(diff > 0.1 * range_of(l1)); /* another seed: other weights */
}

int main(void) {
    fixture = lct_source_path("tests/fixtures/hf/lfm2-f32");
    int ready = lct_open_on_device(fixture);
    if (ready != 0) return ready;
    sampling = lct_entry->get_interface(SY_ENGINE_SAMPLING_INTERFACE_ID);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_transformers),      cmocka_unit_test(test_sampling_truncate_fork),
        cmocka_unit_test(test_chunks_splits_batches_cancel), cmocka_unit_test(test_full_kv_cache),
        cmocka_unit_test(test_graphs_match_eager),        cmocka_unit_test(test_synthetic_weights),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    lct_close();
    return rc;
}
