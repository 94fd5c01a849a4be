/* Every kernel of kernels/cuda (and the cuBLASLt GEMM wrapper of lfm2-cuda) against a plain CPU reference on
 * seeded random inputs. Output buffers are poisoned with 0xFF bytes (NaN as F32 and as BF16) before each launch,
 * so an element a kernel forgets to write fails the comparison; results must be finite and within a relative
 * error of 1e-2 for BF16 outputs (1e-4 for F32 ones), measured against the largest reference magnitude.
 *
 * Label gpu. Without a CUDA device the test prints why and exits 77, which CTest reports as skipped. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <cuda_runtime_api.h>

#include "lfm2_cuda_gemm.h"
#include "lfm2_kernels.h"
#include "sy_kernels.h"

#define SKIP_CODE 77

static cudaStream_t stream;

/* ---- helpers ---- */

#define CUDA(call)                                                                                                   \
    do {                                                                                                             \
        cudaError_t e_ = (call);                                                                                     \
        if (e_ != cudaSuccess) fail_msg("%s: %s", #call, cudaGetErrorString(e_));                                    \
    } while (0)

static uint32_t rng = 12345;
static float frand(float lo, float hi) {
    rng = rng * 1664525u + 1013904223u;
    return lo + (hi - lo) * (float)(rng >> 8) / 16777216.0f;
}
static void fill(float *x, size_t n, float lo, float hi) {
    for (size_t i = 0; i < n; i++) x[i] = frand(lo, hi);
}

static void *dev_alloc(size_t bytes) {
    void *p = NULL;
    CUDA(cudaMalloc(&p, bytes ? bytes : 1));
    CUDA(cudaMemset(p, 0xFF, bytes ? bytes : 1)); /* poison */
    return p;
}
static void *dev_copy(const void *host, size_t bytes) {
    void *p = dev_alloc(bytes);
    CUDA(cudaMemcpy(p, host, bytes, cudaMemcpyHostToDevice));
    return p;
}
static void to_host(void *host, const void *dev, size_t bytes) {
    CUDA(cudaStreamSynchronize(stream));
    CUDA(cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost));
}
static void poison(void *dev, size_t bytes) { CUDA(cudaMemset(dev, 0xFF, bytes)); }

static lc_bf16 *bf16_copy(const float *x, size_t n) {
    uint16_t *h = malloc(n * 2);
    sy_f32_to_bf16_row(x, h, n);
    lc_bf16 *d = dev_copy(h, n * 2);
    free(h);
    return d;
}
static void bf16_round(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = sy_bf16_to_f32(sy_f32_to_bf16(x[i]));
}
static void bf16_to_host(float *out, const lc_bf16 *dev, size_t n) {
    uint16_t *h = malloc(n * 2);
    to_host(h, dev, n * 2);
    sy_bf16_to_f32_row(h, out, n);
    free(h);
}

/* max |got - want| / max |want|, failing on any non-finite value */
static void expect_rel(const float *got, const float *want, size_t n, double bar, const char *what) {
    double worst = 0, scale = 1e-30;
    for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(want[i]));
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(got[i])) fail_msg("%s: element %zu is %g", what, i, (double)got[i]);
        worst = fmax(worst, fabs((double)got[i] - want[i]) / scale);
    }
    if (!(worst < bar)) fail_msg("%s: relative error %.3g (bar %.3g)", what, worst, bar);
}

static void rmsnorm_ref(float *out, const float *x, const float *w, size_t n, float eps) {
    double ss = 0;
    for (size_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float inv = (float)(1.0 / sqrt(ss / (double)n + eps));
    for (size_t i = 0; i < n; i++) out[i] = w[i] * (x[i] * inv);
}

/* ---- tests ---- */

static void test_embed_and_rmsnorm(void **state) {
    (void)state;
    enum { V = 50, N = 7, D = 300 };
    float *table = malloc(V * D * 4), *x = malloc(N * D * 4), *delta = malloc(N * D * 4), bias[D], w[D];
    fill(table, V * D, -2, 2);
    bf16_round(table, V * D);
    fill(delta, N * D, -1, 1);
    fill(bias, D, -0.5f, 0.5f);
    fill(w, D, 0.5f, 1.5f);
    int32_t tokens[N] = {0, 49, 3, 3, 17, 25, 8};
    lc_bf16 *d_table = bf16_copy(table, V * D);
    int32_t *d_tok = dev_copy(tokens, sizeof tokens);
    float *d_x = dev_alloc(N * D * 4), *d_delta = dev_copy(delta, N * D * 4), *d_bias = dev_copy(bias, sizeof bias),
          *d_w = dev_copy(w, sizeof w);
    lc_bf16 *d_out = dev_alloc(N * D * 2);
    CUDA(lc_embed(stream, d_table, D, d_tok, N, d_x));
    float *got = malloc(N * D * 4), *want = malloc(N * D * 4);
    to_host(got, d_x, N * D * 4);
    for (int r = 0; r < N; r++) memcpy(want + r * D, table + tokens[r] * D, D * 4);
    expect_rel(got, want, N * D, 1e-7, "lc_embed");

    /* without delta: out = rmsnorm(x) */
    CUDA(lc_add_rmsnorm(stream, d_x, NULL, NULL, d_w, N, D, 1e-5f, d_out));
    bf16_to_host(got, d_out, N * D);
    for (int r = 0; r < N; r++) rmsnorm_ref(want + r * D, table + tokens[r] * D, w, D, 1e-5f);
    expect_rel(got, want, N * D, 1e-2, "lc_add_rmsnorm");
    /* with delta and bias: x += delta + bias first */
    poison(d_out, N * D * 2);
    CUDA(lc_add_rmsnorm(stream, d_x, d_delta, d_bias, d_w, N, D, 1e-5f, d_out));
    for (int r = 0; r < N; r++)
        for (int c = 0; c < D; c++) x[r * D + c] = table[tokens[r] * D + c] + delta[r * D + c] + bias[c];
    to_host(got, d_x, N * D * 4);
    expect_rel(got, x, N * D, 1e-6, "lc_add_rmsnorm residual");
    bf16_to_host(got, d_out, N * D);
    for (int r = 0; r < N; r++) rmsnorm_ref(want + r * D, x + r * D, w, D, 1e-5f);
    expect_rel(got, want, N * D, 1e-2, "lc_add_rmsnorm with delta");
    cudaFree(d_table), cudaFree(d_tok), cudaFree(d_x), cudaFree(d_delta), cudaFree(d_bias), cudaFree(d_w);
    cudaFree(d_out);
    free(table), free(x), free(delta), free(got), free(want);
}

/* Two sequences in one chunk: slot 1 continues a decode (committed history, plus an earlier chunk of this decode in
 * the work ring), slot 0 starts from its beginning. The reference reads u by position from one plain history
 * array per sequence; the kernels read it from the rings and the chunk. */
static void test_short_conv(void **state) {
    (void)state;
    enum { D = 96, L = 3, RING = 16 + L - 1, SLOTS = 2, NCONV = 2, CONV = 1, MAXP = 200 };
    const int len1 = 70, first1 = 75, rows1 = 20, rows0 = 5; /* slot 1: committed 70, work 70..74, chunk 75..94 */
    const int N = rows1 + rows0;
    static float hist[SLOTS][MAXP][D];
    fill(&hist[0][0][0], (size_t)SLOTS * MAXP * D, -1, 1);
    size_t slot_stride = (size_t)NCONV * RING * D;
    float *committed = malloc(SLOTS * slot_stride * 4), *work = malloc(SLOTS * slot_stride * 4);
    fill(committed, SLOTS * slot_stride, 50, 60); /* stale values: any read of them shows */
    fill(work, SLOTS * slot_stride, 50, 60);
    for (int p = len1 - RING; p < len1; p++)
        memcpy(committed + slot_stride + (CONV * RING + p % RING) * D, hist[1][p], D * 4);
    for (int p = len1; p < first1; p++) memcpy(work + slot_stride + (CONV * RING + p % RING) * D, hist[1][p], D * 4);
    /* chunk rows: bcx = [B | C | X] with B ⊙ X = hist at the row's position */
    float *bcx = malloc((size_t)N * 3 * D * 4), in_bias[3 * D], kernel[D * L], cbias[D];
    fill(in_bias, 3 * D, -0.2f, 0.2f);
    fill(kernel, D * L, -1, 1);
    fill(cbias, D, -0.3f, 0.3f);
    int32_t pos[N], slot[N], first[N], last[N], len[N];
    for (int r = 0; r < N; r++) {
        bool s1 = r < rows1;
        slot[r] = s1 ? 1 : 0;
        pos[r] = s1 ? first1 + r : r - rows1;
        first[r] = s1 ? first1 : 0;
        last[r] = s1 ? first1 + rows1 - 1 : rows0 - 1;
        len[r] = s1 ? len1 : 0;
        float *row = bcx + (size_t)r * 3 * D;
        for (int c = 0; c < D; c++) {
            float xv = frand(0.5f, 1.5f);
            row[2 * D + c] = xv - in_bias[2 * D + c];
            row[c] = hist[slot[r]][pos[r]][c] / xv - in_bias[c];
            row[D + c] = frand(-1, 1);
        }
    }
    float *d_bcx = dev_copy(bcx, (size_t)N * 3 * D * 4), *d_bias = dev_copy(in_bias, sizeof in_bias),
          *d_kernel = dev_copy(kernel, sizeof kernel), *d_cbias = dev_copy(cbias, sizeof cbias),
          *d_u = dev_alloc((size_t)N * D * 4);
    lc_conv_state st = {dev_copy(committed, SLOTS * slot_stride * 4), dev_copy(work, SLOTS * slot_stride * 4),
                        slot_stride, RING, D};
    int32_t *d_pos = dev_copy(pos, sizeof pos), *d_slot = dev_copy(slot, sizeof slot),
            *d_first = dev_copy(first, sizeof first), *d_last = dev_copy(last, sizeof last),
            *d_len = dev_copy(len, sizeof len);
    lc_rows rows = {N, d_pos, d_slot, d_first, d_last, d_len};
    lc_bf16 *d_y = dev_alloc((size_t)N * D * 2);

    CUDA(lc_conv_input(stream, d_bcx, d_bias, N, D, d_u));
    float *got = malloc((size_t)N * D * 4), *want = malloc((size_t)N * D * 4);
    to_host(got, d_u, (size_t)N * D * 4);
    for (int r = 0; r < N; r++) memcpy(want + r * D, hist[slot[r]][pos[r]], D * 4);
    expect_rel(got, want, (size_t)N * D, 1e-5, "lc_conv_input");

    CUDA(lc_conv_apply(stream, rows, d_u, d_bcx, d_bias, d_kernel, d_cbias, L, st, CONV, d_y));
    for (int r = 0; r < N; r++) {
        for (int c = 0; c < D; c++) {
            double acc = cbias[c];
            for (int j = 0; j < L; j++) {
                int q = pos[r] - (L - 1) + j;
                if (q >= 0) acc += (double)kernel[c * L + j] * hist[slot[r]][q][c];
            }
            want[r * D + c] = (float)((bcx[(size_t)r * 3 * D + D + c] + in_bias[D + c]) * acc);
        }
    }
    bf16_to_host(got, d_y, (size_t)N * D);
    expect_rel(got, want, (size_t)N * D, 1e-2, "lc_conv_apply");

    /* store, then commit both sequences; the committed rings must then hold the last RING positions */
    CUDA(lc_conv_store(stream, rows, d_u, st, CONV));
    int32_t c_slot[2] = {1, 0}, c_len[2] = {len1, 0}, c_new[2] = {first1 + rows1 - len1, rows0};
    int32_t *d_cs = dev_copy(c_slot, 8), *d_cl = dev_copy(c_len, 8), *d_cn = dev_copy(c_new, 8);
    CUDA(lc_conv_commit(stream, d_cs, d_cl, d_cn, 2, NCONV, st));
    float *ring = malloc(SLOTS * slot_stride * 4);
    to_host(ring, st.committed, SLOTS * slot_stride * 4);
    const int end1 = first1 + rows1;
    for (int p = end1 - RING; p < end1; p++)
        expect_rel(ring + slot_stride + (CONV * RING + p % RING) * D, hist[1][p], D, 1e-6, "committed ring, slot 1");
    for (int p = 0; p < rows0; p++)
        expect_rel(ring + (CONV * RING + p % RING) * D, hist[0][p], D, 1e-6, "committed ring, slot 0");
    cudaFree(st.committed), cudaFree(st.work), cudaFree(d_bcx), cudaFree(d_bias), cudaFree(d_kernel);
    cudaFree(d_cbias), cudaFree(d_u), cudaFree(d_pos), cudaFree(d_slot), cudaFree(d_first), cudaFree(d_last);
    cudaFree(d_len), cudaFree(d_y), cudaFree(d_cs), cudaFree(d_cl), cudaFree(d_cn);
    free(committed), free(work), free(bcx), free(got), free(want), free(ring);
}

/* A KV layout with blocks handed out in a scrambled order. */
typedef struct kv_setup {
    int n_blocks, max_blocks, n_kv, hd;
    int32_t *page;       /* host [slots][max_blocks] */
    lc_kv_layer dev;
} kv_setup;

static kv_setup kv_make(int slots, int max_blocks, int n_kv, int hd) {
    kv_setup k = {slots * max_blocks, max_blocks, n_kv, hd, malloc((size_t)slots * max_blocks * 4), {0}};
    for (int i = 0; i < slots * max_blocks; i++) k.page[i] = (i * 7 + 3) % (slots * max_blocks);
    size_t elems = (size_t)k.n_blocks * n_kv * LC_KV_BLOCK * hd;
    k.dev = (lc_kv_layer){dev_alloc(elems * 2), dev_alloc(elems * 2), dev_copy(k.page, (size_t)slots * max_blocks * 4),
                          max_blocks, n_kv, hd};
    return k;
}
static size_t kv_at(const kv_setup *k, int slot, int pos, int head) {
    int block = k->page[slot * k->max_blocks + pos / LC_KV_BLOCK];
    return (((size_t)block * k->n_kv + head) * LC_KV_BLOCK + pos % LC_KV_BLOCK) * k->hd;
}

static void rope_ref(float *v, int hd, int pos, const float *inv_freq) {
    float tmp[LC_MAX_HEAD_DIM];
    int half = hd / 2;
    for (int i = 0; i < half; i++) {
        float s = sinf((float)pos * inv_freq[i]), c = cosf((float)pos * inv_freq[i]);
        tmp[i] = v[i] * c - v[i + half] * s;
        tmp[i + half] = v[i + half] * c + v[i] * s;
    }
    memcpy(v, tmp, (size_t)hd * 4);
}

static void test_qk_norm_rope_kv(void **state) {
    (void)state;
    const int hds[3] = {16, 64, 128};
    for (int t = 0; t < 3; t++) {
        const int hd = hds[t], nh = 8, nkv = 2, N = 9, slots = 3, max_blocks = 8, qkv_dim = (nh + 2 * nkv) * hd;
        kv_setup k = kv_make(slots, max_blocks, nkv, hd);
        float *qkv = malloc((size_t)N * qkv_dim * 4), qn[LC_MAX_HEAD_DIM], kn[LC_MAX_HEAD_DIM],
              inv[LC_MAX_HEAD_DIM / 2];
        fill(qkv, (size_t)N * qkv_dim, -2, 2);
        fill(qn, hd, 0.5f, 1.5f);
        fill(kn, hd, 0.5f, 1.5f);
        for (int i = 0; i < hd / 2; i++) inv[i] = (float)pow(10000.0, -2.0 * i / hd);
        int32_t pos[9] = {0, 1, 2, 15, 16, 17, 100, 127, 5}, slot[9] = {0, 0, 0, 1, 1, 1, 2, 2, 1};
        int32_t *d_pos = dev_copy(pos, sizeof pos), *d_slot = dev_copy(slot, sizeof slot);
        lc_rows rows = {N, d_pos, d_slot, d_pos, d_pos, d_pos};
        float *d_qkv = dev_copy(qkv, (size_t)N * qkv_dim * 4), *d_qn = dev_copy(qn, (size_t)hd * 4),
              *d_kn = dev_copy(kn, (size_t)hd * 4), *d_inv = dev_copy(inv, (size_t)hd * 2),
              *d_q = dev_alloc((size_t)N * nh * hd * 4);
        CUDA(lc_qk_norm_rope_kv(stream, rows, d_qkv, nh, d_qn, d_kn, 1e-6f, d_inv, d_q, k.dev));
        float *q = malloc((size_t)N * nh * hd * 4), *want = malloc((size_t)N * nh * hd * 4);
        to_host(q, d_q, (size_t)N * nh * hd * 4);
        size_t pool = (size_t)k.n_blocks * nkv * LC_KV_BLOCK * hd;
        float *kp = malloc(pool * 4), *vp = malloc(pool * 4);
        bf16_to_host(kp, k.dev.k, pool);
        bf16_to_host(vp, k.dev.v, pool);
        for (int r = 0; r < N; r++) {
            for (int h = 0; h < nh; h++) {
                float *w = want + ((size_t)r * nh + h) * hd;
                rmsnorm_ref(w, qkv + (size_t)r * qkv_dim + h * hd, qn, hd, 1e-6f);
                rope_ref(w, hd, pos[r], inv);
            }
            for (int h = 0; h < nkv; h++) {
                float kw[LC_MAX_HEAD_DIM], got_k[LC_MAX_HEAD_DIM], got_v[LC_MAX_HEAD_DIM];
                rmsnorm_ref(kw, qkv + (size_t)r * qkv_dim + (nh + h) * hd, kn, hd, 1e-6f);
                rope_ref(kw, hd, pos[r], inv);
                memcpy(got_k, kp + kv_at(&k, slot[r], pos[r], h), (size_t)hd * 4);
                memcpy(got_v, vp + kv_at(&k, slot[r], pos[r], h), (size_t)hd * 4);
                expect_rel(got_k, kw, hd, 1e-2, "k in the cache");
                expect_rel(got_v, qkv + (size_t)r * qkv_dim + (nh + nkv + h) * hd, hd, 1e-2, "v in the cache");
            }
        }
        expect_rel(q, want, (size_t)N * nh * hd, 1e-4, "q");
        cudaFree(k.dev.k), cudaFree((void *)k.dev.v), cudaFree((void *)k.dev.page_table), cudaFree(d_pos);
        cudaFree(d_slot), cudaFree(d_qkv), cudaFree(d_qn), cudaFree(d_kn), cudaFree(d_inv), cudaFree(d_q);
        free(k.page), free(qkv), free(q), free(want), free(kp), free(vp);
    }
}

/* Attention of a prefill tile and of decode rows with split-K, against a double-precision softmax over the
 * BF16-rounded cache. */
static void test_attention(void **state) {
    (void)state;
    const int hds[2] = {64, 16};
    for (int t = 0; t < 2; t++) {
        const int hd = hds[t], nkv = 2, group = 4, nh = nkv * group, slots = 2, max_blocks = 64, P = 700;
        kv_setup k = kv_make(slots, max_blocks, nkv, hd);
        size_t pool = (size_t)k.n_blocks * nkv * LC_KV_BLOCK * hd;
        float *kp = malloc(pool * 4), *vp = malloc(pool * 4);
        fill(kp, pool, -1, 1);
        fill(vp, pool, -1, 1);
        bf16_round(kp, pool);
        bf16_round(vp, pool);
        uint16_t *hb = malloc(pool * 2);
        sy_f32_to_bf16_row(kp, hb, pool);
        CUDA(cudaMemcpy(k.dev.k, hb, pool * 2, cudaMemcpyHostToDevice));
        sy_f32_to_bf16_row(vp, hb, pool);
        CUDA(cudaMemcpy(k.dev.v, hb, pool * 2, cudaMemcpyHostToDevice));
        free(hb);
        /* rows 0..5: slot 0 positions 300..305 (one task, no split); rows 6, 7: slot 1 at 699 and slot 0 at 650,
         * split over 256 keys; row 8: slot 1 at 3 (short) */
        enum { N = 9 };
        int32_t pos[N] = {300, 301, 302, 303, 304, 305, 699, 650, 3}, slot[N] = {0, 0, 0, 0, 0, 0, 1, 0, 1};
        float *q = malloc((size_t)N * nh * hd * 4);
        fill(q, (size_t)N * nh * hd, -1, 1);
        const int split_keys = 256, max_splits = (P + split_keys - 1) / split_keys;
        lc_attn_task tasks[16];
        int n_tasks = 0;
        tasks[n_tasks++] = (lc_attn_task){0, 6, 0, 300, 0, 306, -1, 0};
        int32_t splits[N] = {0};
        for (int r = 6; r < 8; r++) {
            int k_end = pos[r] + 1, ns = (k_end + split_keys - 1) / split_keys;
            splits[r] = ns;
            for (int s = 0; s < ns; s++)
                tasks[n_tasks++] = (lc_attn_task){r, 1, slot[r], pos[r], s * split_keys,
                                                  (s + 1) * split_keys < k_end ? (s + 1) * split_keys : k_end, s, 0};
        }
        tasks[n_tasks++] = (lc_attn_task){8, 1, 1, 3, 0, 4, -1, 0};
        lc_attn_task *d_tasks = dev_copy(tasks, (size_t)n_tasks * sizeof *tasks);
        int32_t *d_splits = dev_copy(splits, sizeof splits);
        float *d_q = dev_copy(q, (size_t)N * nh * hd * 4),
              *d_partial = dev_alloc((size_t)N * nh * max_splits * (hd + 2) * 4);
        lc_bf16 *d_out = dev_alloc((size_t)N * nh * hd * 2);
        float scale = 1.0f / sqrtf((float)hd);
        CUDA(lc_attention(stream, d_tasks, n_tasks, group, scale, d_q, k.dev, d_out, d_partial, max_splits));
        CUDA(lc_attention_combine(stream, d_splits, N, nh, hd, max_splits, d_partial, d_out));
        float *got = malloc((size_t)N * nh * hd * 4), *want = malloc((size_t)N * nh * hd * 4);
        bf16_to_host(got, d_out, (size_t)N * nh * hd);
        double *sc = malloc(P * sizeof(double));
        for (int r = 0; r < N; r++) {
            for (int h = 0; h < nh; h++) {
                const float *qv = q + ((size_t)r * nh + h) * hd;
                int g = h / group;
                double mx = -INFINITY, sum = 0;
                for (int p = 0; p <= pos[r]; p++) {
                    const float *kv = kp + kv_at(&k, slot[r], p, g);
                    double d = 0;
                    for (int i = 0; i < hd; i++) d += (double)qv[i] * kv[i];
                    sc[p] = d * scale;
                    mx = fmax(mx, sc[p]);
                }
                float *o = want + ((size_t)r * nh + h) * hd;
                double acc[LC_MAX_HEAD_DIM] = {0};
                for (int p = 0; p <= pos[r]; p++) {
                    double e = exp(sc[p] - mx);
                    sum += e;
                    const float *vv = vp + kv_at(&k, slot[r], p, g);
                    for (int i = 0; i < hd; i++) acc[i] += e * vv[i];
                }
                for (int i = 0; i < hd; i++) o[i] = (float)(acc[i] / sum);
            }
        }
        expect_rel(got, want, (size_t)N * nh * hd, 1e-2,
                   hd == 64 ? "attention, head_dim 64" : "attention, head_dim 16");
        cudaFree(k.dev.k), cudaFree((void *)k.dev.v), cudaFree((void *)k.dev.page_table), cudaFree(d_tasks);
        cudaFree(d_splits), cudaFree(d_q), cudaFree(d_partial), cudaFree(d_out);
        free(k.page), free(kp), free(vp), free(q), free(got), free(want), free(sc);
    }
}

static void test_swiglu_gather_argmax(void **state) {
    (void)state;
    enum { N = 5, FF = 333, V = 1000, D = 40 };
    float *gu = malloc(N * 2 * FF * 4), *want = malloc(N * FF * 4), *got = malloc(N * FF * 4);
    fill(gu, N * 2 * FF, -6, 6);
    for (int r = 0; r < N; r++)
        for (int i = 0; i < FF; i++) {
            float g = gu[r * 2 * FF + i];
            want[r * FF + i] = g / (1.0f + expf(-g)) * gu[r * 2 * FF + FF + i];
        }
    float *d_gu = dev_copy(gu, N * 2 * FF * 4);
    lc_bf16 *d_h = dev_alloc(N * FF * 2);
    CUDA(lc_swiglu(stream, d_gu, N, FF, d_h));
    bf16_to_host(got, d_h, N * FF);
    expect_rel(got, want, N * FF, 1e-2, "lc_swiglu");

    float src[N * D], gathered[3 * D], expect_g[3 * D];
    fill(src, N * D, -1, 1);
    bf16_round(src, N * D);
    int32_t rows[3] = {4, 0, 2};
    for (int i = 0; i < 3; i++) memcpy(expect_g + i * D, src + rows[i] * D, D * 4);
    lc_bf16 *d_src = bf16_copy(src, N * D), *d_dst = dev_alloc(3 * D * 2);
    int32_t *d_rows = dev_copy(rows, sizeof rows);
    CUDA(lc_gather_rows(stream, d_src, d_rows, 3, D, d_dst));
    bf16_to_host(gathered, d_dst, 3 * D);
    expect_rel(gathered, expect_g, 3 * D, 1e-7, "lc_gather_rows");

    /* argmax: a tie goes to the lower id; NaN never wins; an all -inf row gives its first id */
    float *logits = malloc(4 * V * 4);
    fill(logits, 4 * V, -5, 5);
    logits[0 * V + 700] = 9, logits[0 * V + 300] = 9;
    logits[1 * V + 10] = NAN, logits[1 * V + 999] = 8;
    for (int i = 0; i < V; i++) logits[2 * V + i] = -INFINITY;
    logits[3 * V + 0] = 7.5f;
    float *d_logits = dev_copy(logits, 4 * V * 4);
    int32_t *d_best = dev_alloc(16), best[4];
    CUDA(lc_argmax(stream, d_logits, 4, V, d_best));
    to_host(best, d_best, 16);
    assert_int_equal(best[0], 300);
    assert_int_equal(best[1], 999);
    assert_int_equal(best[2], 0);
    assert_int_equal(best[3], 0);
    cudaFree(d_gu), cudaFree(d_h), cudaFree(d_src), cudaFree(d_dst), cudaFree(d_rows), cudaFree(d_logits);
    cudaFree(d_best);
    free(gu), free(want), free(got), free(logits);
}

static void test_copy_blocks_and_fill(void **state) {
    (void)state;
    enum { BLOCKS = 6, ELEMS = 100, POOLS = 3 };
    float *vals = malloc(POOLS * BLOCKS * ELEMS * 4);
    fill(vals, POOLS * BLOCKS * ELEMS, -1, 1);
    bf16_round(vals, POOLS * BLOCKS * ELEMS);
    lc_bf16 *host_ptrs[POOLS];
    for (int p = 0; p < POOLS; p++) host_ptrs[p] = bf16_copy(vals + p * BLOCKS * ELEMS, BLOCKS * ELEMS);
    lc_bf16 **d_ptrs = dev_copy(host_ptrs, sizeof host_ptrs);
    int32_t src[2] = {1, 4}, dst[2] = {5, 0};
    int32_t *d_src = dev_copy(src, 8), *d_dst = dev_copy(dst, 8);
    CUDA(lc_copy_kv_blocks(stream, d_ptrs, POOLS, ELEMS, d_src, d_dst, 2));
    float got[BLOCKS * ELEMS];
    for (int p = 0; p < POOLS; p++) {
        float *want = vals + p * BLOCKS * ELEMS;
        memcpy(want + 5 * ELEMS, want + 1 * ELEMS, ELEMS * 4);
        memcpy(want + 0 * ELEMS, want + 4 * ELEMS, ELEMS * 4);
        bf16_to_host(got, host_ptrs[p], BLOCKS * ELEMS);
        expect_rel(got, want, BLOCKS * ELEMS, 1e-7, "lc_copy_kv_blocks");
        cudaFree(host_ptrs[p]);
    }
    cudaFree(d_ptrs), cudaFree(d_src), cudaFree(d_dst);
    free(vals);

    /* seeded fills: in range, equal for equal seeds, different otherwise */
    enum { M = 100000 };
    float *a = malloc(M * 4), *b = malloc(M * 4);
    float *d_a = dev_alloc(M * 4);
    CUDA(lc_fill_uniform_f32(stream, d_a, M, 7, -0.5f, 0.25f));
    to_host(a, d_a, M * 4);
    CUDA(lc_fill_uniform_f32(stream, d_a, M, 7, -0.5f, 0.25f));
    to_host(b, d_a, M * 4);
    assert_memory_equal(a, b, M * 4);
    double mean = 0;
    for (int i = 0; i < M; i++) {
        assert_true(a[i] >= -0.5f && a[i] < 0.25f);
        mean += a[i] / M;
    }
    assert_true(fabs(mean - (-0.125)) < 0.01);
    CUDA(lc_fill_uniform_f32(stream, d_a, M, 8, -0.5f, 0.25f));
    to_host(b, d_a, M * 4);
    assert_memory_not_equal(a, b, M * 4);
    lc_bf16 *d_h = dev_alloc(M * 2);
    CUDA(lc_fill_uniform_bf16(stream, d_h, M, 7, 1.0f, 2.0f));
    bf16_to_host(a, d_h, M);
    for (int i = 0; i < M; i++) assert_true(a[i] >= 1.0f && a[i] <= 2.0f);
    cudaFree(d_a), cudaFree(d_h);
    free(a), free(b);
}

static void test_gemm(void **state) {
    (void)state;
    void *ws = dev_alloc(32u << 20);
    char err[256];
    lc_gemm *g = lc_gemm_create(ws, 32u << 20, err, sizeof err);
    if (g == NULL) fail_msg("lc_gemm_create: %s", err);
    const int shapes[4][3] = {{96, 64, 1}, {64, 96, 7}, {2048, 512, 33}, {512, 2048, 64}}; /* out, in, n */
    for (int s = 0; s < 4; s++) {
        int out = shapes[s][0], in = shapes[s][1], n = shapes[s][2];
        float *w = malloc((size_t)out * in * 4), *x = malloc((size_t)n * in * 4), *y = malloc((size_t)n * out * 4),
              *want = malloc((size_t)n * out * 4);
        fill(w, (size_t)out * in, -1, 1);
        fill(x, (size_t)n * in, -1, 1);
        bf16_round(w, (size_t)out * in);
        bf16_round(x, (size_t)n * in);
        for (int r = 0; r < n; r++)
            for (int o = 0; o < out; o++) {
                double acc = 0;
                for (int i = 0; i < in; i++) acc += (double)x[(size_t)r * in + i] * w[(size_t)o * in + i];
                want[(size_t)r * out + o] = (float)acc;
            }
        lc_bf16 *d_w = bf16_copy(w, (size_t)out * in), *d_x = bf16_copy(x, (size_t)n * in);
        float *d_y = dev_alloc((size_t)n * out * 4);
        for (int rep = 0; rep < 2; rep++) { /* the second time from the cached algorithm */
            poison(d_y, (size_t)n * out * 4);
            if (!lc_gemm_bf16(g, stream, d_w, out, in, d_x, n, d_y, err, sizeof err)) fail_msg("gemm: %s", err);
            to_host(y, d_y, (size_t)n * out * 4);
            expect_rel(y, want, (size_t)n * out, 1e-4, "lc_gemm_bf16");
        }
        cudaFree(d_w), cudaFree(d_x), cudaFree(d_y);
        free(w), free(x), free(y), free(want);
    }
    assert_int_equal(lc_gemm_cached_shapes(g), 4);
    lc_gemm_destroy(g);
    cudaFree(ws);
}

int main(void) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        printf("skipped: no CUDA device (%s)\n", e != cudaSuccess ? cudaGetErrorString(e) : "none reported");
        return SKIP_CODE;
    }
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess || prop.major < 9) {
        printf("skipped: device 0 is not compute capability 9.0 or newer (the kernels are built for sm_90)\n");
        return SKIP_CODE;
    }
    if (lc_kernels_init() != cudaSuccess || cudaStreamCreate(&stream) != cudaSuccess) {
        printf("kernel setup failed\n");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_embed_and_rmsnorm), cmocka_unit_test(test_short_conv),
        cmocka_unit_test(test_qk_norm_rope_kv),   cmocka_unit_test(test_attention),
        cmocka_unit_test(test_swiglu_gather_argmax), cmocka_unit_test(test_copy_blocks_and_fill),
        cmocka_unit_test(test_gemm),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
