/* The tiled causal attention of the CPU transformer core (transformer.c: tiles of rows x query heads of one KV
 * head, key blocks, causal block skipping, key ranges split over threads in decode at depth and their partial
 * softmax states combined) against the double-precision reference backend (reference_forward.h), on random
 * weights: odd prompt lengths on both sides of the tile and block sizes, GQA groups larger than a tile's heads,
 * several sequences in one call, and decode deep enough to be split. Every case runs with the KV cache in each of
 * its types (cache_type_k/v: f32, f16, q8_0, and K and V apart), each against the reference's f32 with a tolerance
 * that fits the type. Run once per forced CPU tier (CMake). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "reference_forward.h"
#include "transformer.h"

typedef struct random_model {
    sy_tf_config cfg;
    sy_tf_weights w;
    sy_tf_layer_weights *layers;
    float **blobs;
    size_t n_blobs;
    uint64_t rng;
} random_model;

static float next_uniform(uint64_t *s) { /* splitmix64 -> [-1, 1) */
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (float)((double)(z >> 11) / (double)(1ull << 52)) - 1.0f;
}

static float *blob(random_model *r, size_t n, float scale, float offset) {
    float *p = malloc(n * sizeof *p);
    assert_non_null(p);
    for (size_t i = 0; i < n; i++) p[i] = offset + scale * next_uniform(&r->rng);
    r->blobs = realloc(r->blobs, (r->n_blobs + 1) * sizeof *r->blobs);
    assert_non_null(r->blobs);
    r->blobs[r->n_blobs++] = p;
    return p;
}

static sy_tf_matrix matrix(random_model *r, uint64_t rows, uint64_t cols, float scale) {
    return (sy_tf_matrix){"w", blob(r, rows * cols, scale, 0.0f), SY_DTYPE_F32, rows, cols, cols * sizeof(float)};
}

static sy_tf_vector vector(random_model *r, uint64_t n, float scale, float offset) {
    return (sy_tf_vector){"v", blob(r, n, scale, offset), SY_DTYPE_F32, n};
}

/* Query and key weights large enough that the softmax is far from uniform (so a wrong causal mask or a lost
 * block shows in the logits). */
static void random_model_make(random_model *r, uint32_t n_head, uint32_t n_head_kv, uint32_t head_dim) {
    memset(r, 0, sizeof *r);
    r->rng = 0x5EEDu + n_head * 131u + head_dim;
    uint32_t embd = 64, q_dim = n_head * head_dim, kv_dim = n_head_kv * head_dim;
    r->cfg = (sy_tf_config){.arch = sy_tf_arch_find("llama"), .n_vocab = 97, .n_embd = embd, .n_ff = 96,
                            .n_layer = 2, .n_head = n_head, .n_head_kv = n_head_kv, .head_dim = head_dim,
                            .rope_dims = head_dim, .rope_base = 10000.0, .rope_scale = 1.0, .rms_eps = 1e-5f};
    assert_non_null(r->cfg.arch);
    r->layers = calloc(r->cfg.n_layer, sizeof *r->layers);
    assert_non_null(r->layers);
    for (uint32_t l = 0; l < r->cfg.n_layer; l++) {
        sy_tf_layer_weights *L = &r->layers[l];
        L->kind = SY_TF_LAYER_ATTENTION;
        L->attn_norm = vector(r, embd, 0.1f, 1.0f);
        L->wq = matrix(r, q_dim, embd, 0.6f);
        L->wk = matrix(r, kv_dim, embd, 0.6f);
        L->wv = matrix(r, kv_dim, embd, 0.3f);
        L->wo = matrix(r, embd, q_dim, 0.3f);
        L->ffn_norm = vector(r, embd, 0.1f, 1.0f);
        L->w_gate = matrix(r, r->cfg.n_ff, embd, 0.2f);
        L->w_up = matrix(r, r->cfg.n_ff, embd, 0.2f);
        L->w_down = matrix(r, embd, r->cfg.n_ff, 0.2f);
    }
    r->w.token_embd = matrix(r, r->cfg.n_vocab, embd, 1.0f);
    r->w.output_norm = vector(r, embd, 0.1f, 1.0f);
    r->w.output = matrix(r, r->cfg.n_vocab, embd, 0.3f);
    r->w.layers = r->layers;
}

static void random_model_free(random_model *r) {
    for (size_t i = 0; i < r->n_blobs; i++) free(r->blobs[i]);
    free(r->blobs);
    free(r->layers);
}

/* The KV cache types of the case running, and how far its logits may be from the f32 reference relative to the
 * largest: f32 as before; f16 rounds K and V to 11 significant bits, q8_0 to 8 bits of each block's largest, and
 * this model's sharp softmax (large scores) magnifies that: measured at most 0.73% (f16) and 5.1% (q8_0) over
 * these cases on every tier, so the bounds are twice that. The exact check of what the cache holds is
 * stored_rows_are_the_rounded_f32_rows below. */
typedef struct kv_case {
    sy_dtype k, v;
    double tolerance;
    const char *name;
} kv_case;
static const kv_case kv_cases[] = {
    {SY_DTYPE_F32, SY_DTYPE_F32, 2e-3, "f32"},
    {SY_DTYPE_F16, SY_DTYPE_F16, 1.5e-2, "f16"},
    {SY_DTYPE_Q8_0, SY_DTYPE_Q8_0, 1e-1, "q8_0"},
    {SY_DTYPE_F16, SY_DTYPE_Q8_0, 1e-1, "k f16 v q8_0"},
};
static const kv_case *kv_now = &kv_cases[0];

/* SY_ATTENTION_KV_CASES (a comma list of the names above; default all of them) narrows the runs: the sanitizer
 * suite's forced-tier runs check the default f16 only, its untiered run and the release suite every case. */
static bool kv_case_wanted(const kv_case *c) {
    const char *list = getenv("SY_ATTENTION_KV_CASES");
    if (list == NULL || *list == '\0') return true;
    size_t n = strlen(c->name);
    for (const char *p = list; *p != '\0';) {
        const char *end = strchr(p, ',');
        size_t len = end != NULL ? (size_t)(end - p) : strlen(p);
        if (len == n && strncmp(p, c->name, n) == 0) return true;
        p += len + (end != NULL);
    }
    return false;
}

/* Largest |a - b| over n, against the largest |b|. */
static void assert_close(const float *a, const double *b, size_t n, const char *what) {
    double worst = 0.0, scale = 1e-3;
    for (size_t i = 0; i < n; i++) {
        if (fabs(b[i]) > scale) scale = fabs(b[i]);
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= worst)) worst = d;
    }
    if (!(worst <= kv_now->tolerance * scale))
        fail_msg("%s, KV %s: logits differ by %g (largest %g)", what, kv_now->name, worst, scale);
}

#define MAX_SEQS 3

/* Prompts of the given lengths as sequences of one call (prefill), then `decode_steps` single tokens each,
 * comparing every step's last logits with the reference. */
static void check_against_reference(uint32_t n_head, uint32_t n_head_kv, uint32_t head_dim, uint32_t n_threads,
                                    const uint32_t *lens, size_t n_seqs, uint32_t decode_steps) {
    random_model r;
    random_model_make(&r, n_head, n_head_kv, head_dim);
    char err[256] = "";
    uint32_t n_ctx = 4096;
    sy_tf_model *m = sy_tf_create(&r.cfg, &r.w, n_ctx, n_threads, err, sizeof err);
    if (m == NULL) fail_msg("create: %s", err);
    bool q8 = kv_now->k == SY_DTYPE_Q8_0 || kv_now->v == SY_DTYPE_Q8_0;
    sy_status kv_st = sy_tf_set_kv_types(m, kv_now->k, kv_now->v, err, sizeof err);
    if (q8 && (n_head_kv * head_dim) % 32 != 0) { /* Q8_0 blocks of 32 along a row that has no whole block */
        assert_int_equal(kv_st, SY_ERR_UNSUPPORTED);
        assert_non_null(strstr(err, "multiple of 32"));
        sy_tf_destroy(m);
        random_model_free(&r);
        return;
    }
    if (kv_st != SY_OK) fail_msg("kv types: %s", err);
    sy_ref_model *ref = sy_ref_create(&r.cfg, &r.w, n_ctx, err, sizeof err);
    if (ref == NULL) fail_msg("reference: %s", err);
    const size_t V = r.cfg.n_vocab;
    sy_tf_seq *seqs[MAX_SEQS];
    sy_ref_seq *rseqs[MAX_SEQS];
    int32_t *tokens[MAX_SEQS];
    float *logits = malloc(MAX_SEQS * V * sizeof *logits), *rlogits = malloc(MAX_SEQS * V * sizeof *rlogits);
    double *want = malloc(V * sizeof *want);
    assert_true(logits && rlogits && want && n_seqs <= MAX_SEQS);
    uint64_t rng = 77;
    sy_tf_batch_item items[MAX_SEQS];
    sy_ref_item ritems[MAX_SEQS];
    for (size_t s = 0; s < n_seqs; s++) {
        seqs[s] = sy_tf_seq_create(m);
        rseqs[s] = sy_ref_seq_create(ref);
        assert_true(seqs[s] && rseqs[s]);
        tokens[s] = malloc(lens[s] * sizeof(int32_t));
        assert_non_null(tokens[s]);
        for (uint32_t i = 0; i < lens[s]; i++) tokens[s][i] = (int32_t)((next_uniform(&rng) + 1.0f) * 0.5f * (float)V) % (int32_t)V;
        items[s] = (sy_tf_batch_item){seqs[s], tokens[s], lens[s], 1, logits + s * V, NULL};
        ritems[s] = (sy_ref_item){rseqs[s], tokens[s], lens[s], 1, rlogits + s * V};
    }
    assert_int_equal(sy_tf_decode(m, items, n_seqs, NULL, NULL, err, sizeof err), SY_OK);
    assert_int_equal(sy_ref_decode(ref, ritems, n_seqs, NULL, NULL, err, sizeof err), SY_OK);
    char what[128];
    for (size_t s = 0; s < n_seqs; s++) {
        for (size_t i = 0; i < V; i++) want[i] = rlogits[s * V + i];
        snprintf(what, sizeof what, "heads %u/%u dim %u, prompt %u", n_head, n_head_kv, head_dim, lens[s]);
        assert_close(logits + s * V, want, V, what);
    }
    int32_t next[MAX_SEQS];
    for (uint32_t step = 0; step < decode_steps; step++) {
        for (size_t s = 0; s < n_seqs; s++) {
            next[s] = (int32_t)((step * 31u + (uint32_t)s * 7u) % V);
            items[s] = (sy_tf_batch_item){seqs[s], &next[s], 1, 1, logits + s * V, NULL};
            ritems[s] = (sy_ref_item){rseqs[s], &next[s], 1, 1, rlogits + s * V};
        }
        assert_int_equal(sy_tf_decode(m, items, n_seqs, NULL, NULL, err, sizeof err), SY_OK);
        assert_int_equal(sy_ref_decode(ref, ritems, n_seqs, NULL, NULL, err, sizeof err), SY_OK);
        for (size_t s = 0; s < n_seqs; s++) {
            for (size_t i = 0; i < V; i++) want[i] = rlogits[s * V + i];
            snprintf(what, sizeof what, "heads %u/%u dim %u, decode at depth %u", n_head, n_head_kv, head_dim,
                     lens[s] + step);
            assert_close(logits + s * V, want, V, what);
        }
    }
    for (size_t s = 0; s < n_seqs; s++) {
        sy_tf_seq_free(m, seqs[s]);
        sy_ref_seq_free(ref, rseqs[s]);
        free(tokens[s]);
    }
    free(logits), free(rlogits), free(want);
    sy_ref_destroy(ref);
    sy_tf_destroy(m);
    random_model_free(&r);
}

/* Prompt lengths around the 8-row tiles and 64-key blocks, one sequence per call. */
static void test_odd_lengths_gqa(void **state) {
    (void)state;
    for (kv_now = kv_cases; kv_now < kv_cases + sizeof kv_cases / sizeof *kv_cases; kv_now++) {
        if (!kv_case_wanted(kv_now)) continue;
        const uint32_t lens[] = {1, 7, 9, 63, 65, 129, 200};
        for (size_t i = 0; i < sizeof lens / sizeof *lens; i++) {
            check_against_reference(4, 2, 64, 2, &lens[i], 1, 2);  /* the in-register head size of AVX-512 */
            check_against_reference(6, 2, 16, 3, &lens[i], 1, 1);  /* another head size: the generic tier code */
        }
    }
}

/* A group of 18 query heads per KV head: more than one tile's heads (16). */
static void test_wide_group(void **state) {
    (void)state;
    for (kv_now = kv_cases; kv_now < kv_cases + sizeof kv_cases / sizeof *kv_cases; kv_now++) {
        if (!kv_case_wanted(kv_now)) continue;
        const uint32_t lens[] = {70};
        check_against_reference(18, 1, 16, 2, lens, 1, 2);
    }
}

/* Several sequences in one call: tiles never span two sequences. */
static void test_several_sequences(void **state) {
    (void)state;
    for (kv_now = kv_cases; kv_now < kv_cases + sizeof kv_cases / sizeof *kv_cases; kv_now++) {
        if (!kv_case_wanted(kv_now)) continue;
        const uint32_t lens[] = {13, 1, 66};
        check_against_reference(4, 2, 64, 2, lens, 3, 3);
    }
}

/* Decode at depth > 1024: each tile's keys split into ranges over the threads, partial states combined. */
static void test_split_decode_at_depth(void **state) {
    (void)state;
    for (kv_now = kv_cases; kv_now < kv_cases + sizeof kv_cases / sizeof *kv_cases; kv_now++) {
        if (!kv_case_wanted(kv_now)) continue;
        const uint32_t one[] = {1500}, two[] = {1300, 1100};
        check_against_reference(4, 2, 64, 4, one, 1, 3);
        check_against_reference(4, 1, 64, 8, one, 1, 2);
        check_against_reference(6, 2, 16, 3, two, 2, 2);
    }
}

/* Layer 0's K and V depend on the token alone, so a cache of another type must hold exactly the f32 cache's rows
 * converted: f16 rounded to nearest even, q8_0 as ggml's reference quantizer writes them; read back (widened by
 * the tier) and as raw rows (what snapshots save). */
static void stored_rows_are_the_rounded_f32_rows(void **state) {
    (void)state;
    random_model r;
    random_model_make(&r, 4, 2, 64);
    const size_t kv_dim = 128, n = 150;
    char err[256];
    sy_tf_model *ref = sy_tf_create(&r.cfg, &r.w, 512, 2, err, sizeof err);
    assert_non_null(ref);
    int32_t tokens[150];
    for (size_t i = 0; i < n; i++) tokens[i] = (int32_t)((i * 37u + 5u) % r.cfg.n_vocab);
    sy_tf_seq *rs = sy_tf_seq_create(ref);
    sy_tf_batch_item item = {rs, tokens, (uint32_t)n, 0, NULL, NULL};
    assert_int_equal(sy_tf_decode(ref, &item, 1, NULL, NULL, err, sizeof err), SY_OK);
    float k32[128], v32[128], k[128], v[128], want_k[128], want_v[128];
    uint8_t raw_k[512], raw_v[512], conv_k[512], conv_v[512];
    for (size_t c = 1; c < sizeof kv_cases / sizeof *kv_cases; c++) {
        kv_now = &kv_cases[c];
        sy_tf_model *m = sy_tf_create(&r.cfg, &r.w, 512, 2, err, sizeof err);
        assert_non_null(m);
        assert_int_equal(sy_tf_set_kv_types(m, kv_now->k, kv_now->v, err, sizeof err), SY_OK);
        assert_int_equal(sy_tf_kv_row_bytes(m, 0), kv_now->k == SY_DTYPE_F16 ? 256 : 136);
        assert_int_equal(sy_tf_kv_row_bytes(m, 1), kv_now->v == SY_DTYPE_F16 ? 256 : 136);
        sy_tf_seq *s = sy_tf_seq_create(m);
        item.seq = s;
        assert_int_equal(sy_tf_decode(m, &item, 1, NULL, NULL, err, sizeof err), SY_OK);
        for (uint32_t p = 0; p < n; p++) {
            sy_tf_seq_get_kv(ref, rs, 0, p, k32, v32);
            sy_tf_seq_get_kv(m, s, 0, p, k, v);
            sy_tf_seq_get_kv_rows(m, s, 0, p, raw_k, raw_v);
            const sy_dtype types[2] = {kv_now->k, kv_now->v};
            const float *src[2] = {k32, v32};
            float *want[2] = {want_k, want_v};
            uint8_t *conv[2] = {conv_k, conv_v};
            for (int i = 0; i < 2; i++) {
                if (types[i] == SY_DTYPE_F16) {
                    sy_f32_to_f16_row(src[i], (uint16_t *)(void *)conv[i], kv_dim);
                    sy_f16_to_f32_row((const uint16_t *)(const void *)conv[i], want[i], kv_dim);
                } else {
                    sy_quantize_q8_0_row(src[i], conv[i], kv_dim);
                    sy_q8_0_to_f32_row(conv[i], want[i], kv_dim / 32);
                }
            }
            if (memcmp(k, want_k, sizeof k) != 0 || memcmp(v, want_v, sizeof v) != 0 ||
                memcmp(raw_k, conv_k, sy_tf_kv_row_bytes(m, 0)) != 0 || memcmp(raw_v, conv_v, sy_tf_kv_row_bytes(m, 1)) != 0)
                fail_msg("KV %s: layer 0, position %u is not the f32 row converted", kv_now->name, p);
        }
        /* raw rows written back into a fresh sequence read the same */
        sy_tf_seq *copy = sy_tf_seq_create(m);
        assert_int_equal(sy_tf_seq_begin_append(m, copy, 1, err, sizeof err), SY_OK);
        sy_tf_seq_set_kv_rows(m, copy, 0, 0, raw_k, raw_v);
        sy_tf_seq_end_append(m, copy, 1, NULL);
        sy_tf_seq_get_kv(m, copy, 0, 0, k32, v32);
        sy_tf_seq_get_kv(m, s, 0, (uint32_t)n - 1, k, v);
        assert_memory_equal(k32, k, sizeof k);
        assert_memory_equal(v32, v, sizeof v);
        sy_tf_seq_free(m, copy);
        sy_tf_seq_free(m, s);
        sy_tf_destroy(m);
    }
    /* types the cache cannot keep, or not while sequences live */
    assert_int_equal(sy_tf_set_kv_types(ref, SY_DTYPE_F16, SY_DTYPE_F16, err, sizeof err), SY_ERR_INVALID_ARGUMENT);
    sy_tf_seq_free(ref, rs);
    assert_int_equal(sy_tf_set_kv_types(ref, SY_DTYPE_BF16, SY_DTYPE_F16, err, sizeof err), SY_ERR_UNSUPPORTED);
    assert_int_equal(sy_tf_set_kv_types(ref, SY_DTYPE_F16, SY_DTYPE_Q4_0, err, sizeof err), SY_ERR_UNSUPPORTED);
    sy_tf_destroy(ref);
    random_model_free(&r);
    kv_now = &kv_cases[0];
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_odd_lengths_gqa),
        cmocka_unit_test(test_wide_group),
        cmocka_unit_test(test_several_sequences),
        cmocka_unit_test(test_split_decode_at_depth),
        cmocka_unit_test(stored_rows_are_the_rounded_f32_rows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
