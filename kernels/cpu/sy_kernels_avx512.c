/* The AVX-512 tier (F, BW, VL, VNNI): 16-wide f32 FMA with masked tails; quantized weights go to the fused
 * vpdpbusd kernels (sy_kernels_fused_avx512.c). */
#include "sy_kernels_x86.h"

#if SY_KERNELS_X86

#include <immintrin.h>

#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))
#define ALWAYS_INLINE __attribute__((always_inline)) inline

AVX512 static float dot_f32_avx512(const float *a, const float *b, size_t n) {
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps(), acc2 = _mm512_setzero_ps(),
           acc3 = _mm512_setzero_ps();
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
        acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), acc1);
        acc2 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 32), _mm512_loadu_ps(b + i + 32), acc2);
        acc3 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 48), _mm512_loadu_ps(b + i + 48), acc3);
    }
    for (; i + 16 <= n; i += 16) acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
        acc1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), acc1);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc0, acc1), _mm512_add_ps(acc2, acc3)));
}

AVX512 static void axpy_f32_avx512(float *y, float alpha, const float *x, size_t n) {
    __m512 va = _mm512_set1_ps(alpha);
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, _mm512_fmadd_ps(va, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
        _mm512_mask_storeu_ps(y + i, m,
                              _mm512_fmadd_ps(va, _mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i)));
    }
}

/* 16 weights (fewer under the mask, the rest zero) from element i of a row, widened to f32. Masked-off lanes are
 * not read, so tails never touch memory past the row. */
AVX512 static ALWAYS_INLINE __m512 load16_weights(sy_dtype wtype, const uint8_t *row, size_t i, __mmask16 m) {
    if (wtype == SY_DTYPE_F32) return _mm512_maskz_loadu_ps(m, row + 4 * i);
    __m256i h = _mm256_maskz_loadu_epi16(m, row + 2 * i);
    if (wtype == SY_DTYPE_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

#define ROW_TILE 4
#define BATCH_TILE 4

static inline __mmask16 tail_mask(size_t left) {
    return left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1u);
}

AVX512 static ALWAYS_INLINE void fma4(__m512 w, __m512 x0, __m512 x1, __m512 x2, __m512 x3, __m512 *a0, __m512 *a1,
                                      __m512 *a2, __m512 *a3) {
    *a0 = _mm512_fmadd_ps(w, x0, *a0);
    *a1 = _mm512_fmadd_ps(w, x1, *a1);
    *a2 = _mm512_fmadd_ps(w, x2, *a2);
    *a3 = _mm512_fmadd_ps(w, x3, *a3);
}

/* 4 rows x 4 batch rows: 16 accumulators in named registers (arrays of vectors would live in memory), each
 * weight vector widened once and used four times. */
AVX512 static ALWAYS_INLINE void tile_4x4(sy_dtype wt, const uint8_t *const *rows, const float *const *xs, size_t k,
                                          float out[ROW_TILE][BATCH_TILE]) {
    __m512 a00 = _mm512_setzero_ps(), a01 = a00, a02 = a00, a03 = a00, a10 = a00, a11 = a00, a12 = a00, a13 = a00,
           a20 = a00, a21 = a00, a22 = a00, a23 = a00, a30 = a00, a31 = a00, a32 = a00, a33 = a00;
    for (size_t i = 0; i < k; i += 16) {
        __mmask16 m = tail_mask(k - i);
        __m512 x0 = _mm512_maskz_loadu_ps(m, xs[0] + i), x1 = _mm512_maskz_loadu_ps(m, xs[1] + i);
        __m512 x2 = _mm512_maskz_loadu_ps(m, xs[2] + i), x3 = _mm512_maskz_loadu_ps(m, xs[3] + i);
        fma4(load16_weights(wt, rows[0], i, m), x0, x1, x2, x3, &a00, &a01, &a02, &a03);
        fma4(load16_weights(wt, rows[1], i, m), x0, x1, x2, x3, &a10, &a11, &a12, &a13);
        fma4(load16_weights(wt, rows[2], i, m), x0, x1, x2, x3, &a20, &a21, &a22, &a23);
        fma4(load16_weights(wt, rows[3], i, m), x0, x1, x2, x3, &a30, &a31, &a32, &a33);
    }
    out[0][0] = _mm512_reduce_add_ps(a00), out[0][1] = _mm512_reduce_add_ps(a01);
    out[0][2] = _mm512_reduce_add_ps(a02), out[0][3] = _mm512_reduce_add_ps(a03);
    out[1][0] = _mm512_reduce_add_ps(a10), out[1][1] = _mm512_reduce_add_ps(a11);
    out[1][2] = _mm512_reduce_add_ps(a12), out[1][3] = _mm512_reduce_add_ps(a13);
    out[2][0] = _mm512_reduce_add_ps(a20), out[2][1] = _mm512_reduce_add_ps(a21);
    out[2][2] = _mm512_reduce_add_ps(a22), out[2][3] = _mm512_reduce_add_ps(a23);
    out[3][0] = _mm512_reduce_add_ps(a30), out[3][1] = _mm512_reduce_add_ps(a31);
    out[3][2] = _mm512_reduce_add_ps(a32), out[3][3] = _mm512_reduce_add_ps(a33);
}

/* 4 rows x 1 batch row (decode): two accumulators per row so eight FMA chains are in flight. */
AVX512 static ALWAYS_INLINE void tile_4x1(sy_dtype wt, const uint8_t *const *rows, const float *const *xs, size_t k,
                                          float out[ROW_TILE][BATCH_TILE]) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
    const float *x = xs[0];
    size_t i = 0;
    const size_t esize = wt == SY_DTYPE_F32 ? 4 : 2;
    for (; i + 32 <= k; i += 32) {
        /* the weight stream crosses 4 KiB pages, where the hardware prefetcher stops: ask ahead (sy_prefetch_ahead) */
        for (int r = 0; r < ROW_TILE; r++) sy_prefetch_ahead(rows[r] + esize * i, 32 * esize);
        __m512 x0 = _mm512_loadu_ps(x + i), x1 = _mm512_loadu_ps(x + i + 16);
        a0 = _mm512_fmadd_ps(load16_weights(wt, rows[0], i, 0xffff), x0, a0);
        a1 = _mm512_fmadd_ps(load16_weights(wt, rows[1], i, 0xffff), x0, a1);
        a2 = _mm512_fmadd_ps(load16_weights(wt, rows[2], i, 0xffff), x0, a2);
        a3 = _mm512_fmadd_ps(load16_weights(wt, rows[3], i, 0xffff), x0, a3);
        b0 = _mm512_fmadd_ps(load16_weights(wt, rows[0], i + 16, 0xffff), x1, b0);
        b1 = _mm512_fmadd_ps(load16_weights(wt, rows[1], i + 16, 0xffff), x1, b1);
        b2 = _mm512_fmadd_ps(load16_weights(wt, rows[2], i + 16, 0xffff), x1, b2);
        b3 = _mm512_fmadd_ps(load16_weights(wt, rows[3], i + 16, 0xffff), x1, b3);
    }
    for (; i < k; i += 16) {
        __mmask16 m = tail_mask(k - i);
        __m512 x0 = _mm512_maskz_loadu_ps(m, x + i);
        a0 = _mm512_fmadd_ps(load16_weights(wt, rows[0], i, m), x0, a0);
        a1 = _mm512_fmadd_ps(load16_weights(wt, rows[1], i, m), x0, a1);
        a2 = _mm512_fmadd_ps(load16_weights(wt, rows[2], i, m), x0, a2);
        a3 = _mm512_fmadd_ps(load16_weights(wt, rows[3], i, m), x0, a3);
    }
    out[0][0] = _mm512_reduce_add_ps(_mm512_add_ps(a0, b0));
    out[1][0] = _mm512_reduce_add_ps(_mm512_add_ps(a1, b1));
    out[2][0] = _mm512_reduce_add_ps(_mm512_add_ps(a2, b2));
    out[3][0] = _mm512_reduce_add_ps(_mm512_add_ps(a3, b3));
}

/* Any tile up to 4 x 4 (the edges of the matrix): one row at a time, up to four batch rows. */
AVX512 static ALWAYS_INLINE void tile_edge(sy_dtype wt, const uint8_t *const *rows, int nr, const float *const *xs,
                                           int nb, size_t k, float out[ROW_TILE][BATCH_TILE]) {
    for (int r = 0; r < nr; r++) {
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (size_t i = 0; i < k; i += 16) {
            __mmask16 m = tail_mask(k - i);
            __m512 w = load16_weights(wt, rows[r], i, m);
            a0 = _mm512_fmadd_ps(w, _mm512_maskz_loadu_ps(m, xs[0] + i), a0);
            if (nb > 1) a1 = _mm512_fmadd_ps(w, _mm512_maskz_loadu_ps(m, xs[1] + i), a1);
            if (nb > 2) a2 = _mm512_fmadd_ps(w, _mm512_maskz_loadu_ps(m, xs[2] + i), a2);
            if (nb > 3) a3 = _mm512_fmadd_ps(w, _mm512_maskz_loadu_ps(m, xs[3] + i), a3);
        }
        out[r][0] = _mm512_reduce_add_ps(a0);
        out[r][1] = _mm512_reduce_add_ps(a1);
        out[r][2] = _mm512_reduce_add_ps(a2);
        out[r][3] = _mm512_reduce_add_ps(a3);
    }
}

/* Specializations per weight type, so the widening is chosen at compile time. */
#define TILE_FUNCS(suffix, wt)                                                                                     \
    AVX512 static void tile_4x4_##suffix(const uint8_t *const *rows, int nr, const float *const *xs, int nb,      \
                                         size_t k, float out[ROW_TILE][BATCH_TILE]) {                             \
        (void)nr;                                                                                                  \
        (void)nb;                                                                                                  \
        tile_4x4(wt, rows, xs, k, out);                                                                            \
    }                                                                                                              \
    AVX512 static void tile_4x1_##suffix(const uint8_t *const *rows, int nr, const float *const *xs, int nb,      \
                                         size_t k, float out[ROW_TILE][BATCH_TILE]) {                             \
        (void)nr;                                                                                                  \
        (void)nb;                                                                                                  \
        tile_4x1(wt, rows, xs, k, out);                                                                            \
    }                                                                                                              \
    AVX512 static void tile_any_##suffix(const uint8_t *const *rows, int nr, const float *const *xs, int nb,      \
                                         size_t k, float out[ROW_TILE][BATCH_TILE]) {                             \
        tile_edge(wt, rows, nr, xs, nb, k, out);                                                                   \
    }

TILE_FUNCS(f32, SY_DTYPE_F32)
TILE_FUNCS(f16, SY_DTYPE_F16)
TILE_FUNCS(bf16, SY_DTYPE_BF16)

typedef void (*tile_fn)(const uint8_t *const *rows, int nr, const float *const *xs, int nb, size_t k,
                        float out[ROW_TILE][BATCH_TILE]);

static int matmul_avx512(sy_dtype wtype, const void *W, size_t row_bytes, size_t row_begin, size_t row_end,
                         size_t k, const float *X, size_t n_batch, size_t ldx, float *Y, size_t ldy) {
    if (sy_matmul_check(wtype, W, row_bytes, row_begin, row_end, k, X, n_batch, ldx, Y, ldy) != NULL)
        return SY_KERNEL_EINVAL;
    if (sy_matmul_wants_quantized_x(wtype))
        return sy_matmul_quantized_via_qx(&sy_kernels_avx512_table, wtype, W, row_bytes, row_begin, row_end, k, X,
                                          n_batch, ldx, Y, ldy);
    if (wtype == SY_DTYPE_BF16 && sy_matmul_bf16_avx512(W, row_bytes, row_begin, row_end, k, X, n_batch, ldx, Y, ldy))
        return SY_KERNEL_OK;
    tile_fn full, single, any;
    if (wtype == SY_DTYPE_F32) {
        full = tile_4x4_f32, single = tile_4x1_f32, any = tile_any_f32;
    } else if (wtype == SY_DTYPE_F16) {
        full = tile_4x4_f16, single = tile_4x1_f16, any = tile_any_f16;
    } else {
        full = tile_4x4_bf16, single = tile_4x1_bf16, any = tile_any_bf16;
    }
    for (size_t r0 = row_begin; r0 < row_end; r0 += ROW_TILE) {
        int nr = row_end - r0 < ROW_TILE ? (int)(row_end - r0) : ROW_TILE;
        const uint8_t *rows[ROW_TILE];
        for (int r = 0; r < nr; r++) rows[r] = (const uint8_t *)W + (r0 + (size_t)r) * row_bytes;
        for (size_t b0 = 0; b0 < n_batch; b0 += BATCH_TILE) {
            int nb = n_batch - b0 < BATCH_TILE ? (int)(n_batch - b0) : BATCH_TILE;
            const float *xs[BATCH_TILE];
            for (int b = 0; b < nb; b++) xs[b] = X + (b0 + (size_t)b) * ldx;
            float out[ROW_TILE][BATCH_TILE];
            tile_fn fn = nr == ROW_TILE && nb == BATCH_TILE ? full : nr == ROW_TILE && nb == 1 ? single : any;
            fn(rows, nr, xs, nb, k, out);
            for (int r = 0; r < nr; r++)
                for (int b = 0; b < nb; b++) Y[(b0 + (size_t)b) * ldy + r0 + (size_t)r] = out[r][b];
        }
    }
    return SY_KERNEL_OK;
}

/* Every quantized type at every batch size by the fused kernels: one accumulation order whatever the batch, so a
 * token's result does not depend on how many others share its call (speculative verification and continuous
 * batching pick the tokens of a plain decode). sy_matmul_qx_check accepts exactly the types the fused table has. */
static int matmul_qx_avx512(sy_dtype wtype, const void *W, size_t row_bytes, size_t row_begin, size_t row_end,
                            size_t k, const void *QX, size_t n_batch, float *Y, size_t ldy) {
    if (sy_matmul_qx_check(wtype, W, row_bytes, row_begin, row_end, k, QX, n_batch, Y, ldy) != NULL)
        return SY_KERNEL_EINVAL;
    sy_fused_rows_fn fused[SY_FUSED_TILE_MAX];
    int tile = sy_fused_kernels_avx512(wtype, fused);
    if (tile == 0) return SY_KERNEL_EINVAL;
    if (n_batch > (size_t)tile &&
        sy_fused_panel_avx512(wtype, W, row_bytes, row_begin, row_end, k, QX, n_batch, Y, ldy))
        return SY_KERNEL_OK;
    sy_matmul_qx_fused_driver(fused, tile, wtype, W, row_bytes, row_begin, row_end, k, QX, n_batch, Y, ldy);
    return SY_KERNEL_OK;
}

/* sy_expf sixteen at a time, the tail through a masked vector (its lanes are independent: the same bits). */
AVX512 static void exp_f32_avx512(const float *x, float *y, size_t n) {
    __m512i tab[4];
    sy_expf_table_load(tab);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, sy_expf16(_mm512_loadu_ps(x + i), tab));
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
        _mm512_mask_storeu_ps(y + i, m, sy_expf16(_mm512_maskz_loadu_ps(m, x + i), tab));
    }
}

/* glibc's vector erff (libmvec), the AVX-512 variant */
__m512 _ZGVeN16v_erff(__m512 x);

/* The GELU sixteen at a time, the tail through a masked vector (the lanes are independent: the same bits). */
AVX512 static void gelu_f32_avx512(const float *x, float *y, size_t n) {
    const __m512 half = _mm512_set1_ps(0.5f), one = _mm512_set1_ps(1.0f), r2 = _mm512_set1_ps((float)M_SQRT1_2);
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1u);
        __m512 v = _mm512_maskz_loadu_ps(m, x + i);
        __m512 g = _mm512_mul_ps(_mm512_mul_ps(half, v), _mm512_add_ps(one, _ZGVeN16v_erff(_mm512_mul_ps(v, r2))));
        _mm512_mask_storeu_ps(y + i, m, g);
    }
}

/* One key's products with q (hd = 16 nv, nv a multiple of 4) folded to one vector exactly as dot_f32_avx512 folds
 * them before its final reduction: four chains, each 64 elements a step, then (0 + 1) + (2 + 3). */
AVX512 static ALWAYS_INLINE __m512 key_products(const int nv, const __m512 *qv, const float *k) {
    __m512 c[4];
    for (int j = 0; j < 4; j++) c[j] = _mm512_fmadd_ps(qv[j], _mm512_loadu_ps(k + 16 * j), _mm512_setzero_ps());
    for (int j = 4; j < nv; j++) c[j % 4] = _mm512_fmadd_ps(qv[j], _mm512_loadu_ps(k + 16 * j), c[j % 4]);
    return _mm512_add_ps(_mm512_add_ps(c[0], c[1]), _mm512_add_ps(c[2], c[3]));
}

/* attend_f32 for hd = 16 nv (64, 128): scores sixteen keys at a time, their sixteen vectors summed together by one
 * transposing reduction with dot_f32_avx512's tree, so each score has dot_f32's bits without a reduction per key;
 * their exponentials sixteen at a time (sy_expf's bits); out kept in nv registers through the same FMAs as
 * axpy_f32_avx512. */
AVX512 static ALWAYS_INLINE void attend_in_registers(const int nv, const float *q, const float *K, const float *V,
                                                     size_t stride, size_t n, float scale, float *max, float *sum,
                                                     float *out) {
    /* sy_reduce16 leaves key 4a + b's sum in lane 4b + a: this puts key j in lane j */
    const __m512i key_order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    const __m512 vscale = _mm512_set1_ps(scale);
    __m512i tab[4];
    sy_expf_table_load(tab);
    __m512 qv[8], acc[8];
    for (int j = 0; j < nv; j++) qv[j] = _mm512_loadu_ps(q + 16 * j), acc[j] = _mm512_loadu_ps(out + 16 * j);
    for (size_t c0 = 0; c0 < n; c0 += SY_ATTEND_CHUNK) {
        size_t nc = n - c0 < SY_ATTEND_CHUNK ? n - c0 : SY_ATTEND_CHUNK;
        const float *Kc = K + c0 * stride, *Vc = V + c0 * stride;
        _Alignas(64) float s[SY_ATTEND_CHUNK];
        __m512 vmax = _mm512_set1_ps(-INFINITY);
        for (size_t g = 0; g < nc; g += 16) {
            const size_t cnt = nc - g < 16 ? nc - g : 16;
            __m512 keys[16];
            for (size_t j = 0; j < 16; j++)
                keys[j] = j < cnt ? key_products(nv, qv, Kc + (g + j) * stride) : _mm512_setzero_ps();
            __m512 sc = _mm512_mul_ps(_mm512_permutexvar_ps(key_order, sy_reduce16(keys)), vscale);
            __mmask16 live = (__mmask16)(cnt == 16 ? 0xffffu : (1u << cnt) - 1u);
            _mm512_store_ps(s + g, sc);
            vmax = _mm512_mask_max_ps(vmax, live, vmax, sc);
        }
        float block_max = _mm512_reduce_max_ps(vmax);
        if (block_max > *max) {
            float shrink = sy_expf(*max - block_max);
            *sum *= shrink;
            for (int j = 0; j < nv; j++) acc[j] = _mm512_mul_ps(acc[j], _mm512_set1_ps(shrink));
            *max = block_max;
        }
        const __m512 vm = _mm512_set1_ps(*max);
        for (size_t g = 0; g < nc; g += 16) _mm512_store_ps(s + g, sy_expf16(_mm512_sub_ps(_mm512_load_ps(s + g), vm), tab));
        for (size_t i = 0; i < nc; i++) {
            float e = s[i];
            *sum += e;
            __m512 ve = _mm512_set1_ps(e);
            const float *v = Vc + i * stride;
            for (int j = 0; j < nv; j++) acc[j] = _mm512_fmadd_ps(ve, _mm512_loadu_ps(v + 16 * j), acc[j]);
        }
    }
    for (int j = 0; j < nv; j++) _mm512_storeu_ps(out + 16 * j, acc[j]);
}

AVX512 static void attend_f32_avx512(const float *q, const float *K, const float *V, size_t stride, size_t n,
                                     size_t hd, float scale, float *max, float *sum, float *out) {
    switch (hd) { /* the usual head sizes */
    case 64: attend_in_registers(4, q, K, V, stride, n, scale, max, sum, out); return;
    case 128: attend_in_registers(8, q, K, V, stride, n, scale, max, sum, out); return;
    default: sy_attend_with(dot_f32_avx512, exp_f32_avx512, axpy_f32_avx512, q, K, V, stride, n, hd, scale, max, sum, out);
    }
}

/* KV cache conversions: 16 at a time, masked tails (round to nearest even, as sy_f32_to_f16). */
AVX512 static void f16_to_f32_avx512(const uint16_t *src, float *dst, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(src + i))));
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
        _mm512_mask_storeu_ps(dst + i, m, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, src + i)));
    }
}

AVX512 static void f32_to_f16_avx512(const float *src, uint16_t *dst, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(void *)(dst + i),
                            _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
        _mm256_mask_storeu_epi16(dst + i, m,
                                 _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, src + i),
                                                 _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
}

/* Q8_0 blocks: 16 codes sign-extended per multiply by the broadcast scale (d * q, exact). */
AVX512 static void q8_0_to_f32_avx512(const void *blocks, float *dst, size_t n_blocks) {
    const uint8_t *in = blocks;
    for (size_t b = 0; b < n_blocks; b++, in += 34, dst += 32) {
        __m512 d = _mm512_set1_ps(sy_load_f16(in));
        __m128i lo = _mm_loadu_si128((const __m128i *)(const void *)(in + 2));
        __m128i hi = _mm_loadu_si128((const __m128i *)(const void *)(in + 18));
        _mm512_storeu_ps(dst, _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(lo))));
        _mm512_storeu_ps(dst + 16, _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(hi))));
    }
}

const sy_kernels sy_kernels_avx512_table = {
    .tier = SY_CPU_TIER_AVX512,
    .name = "avx512",
    .dot_f32 = dot_f32_avx512,
    .axpy_f32 = axpy_f32_avx512,
    .matmul = matmul_avx512,
    .matmul_qx = matmul_qx_avx512,
    .exp_f32 = exp_f32_avx512,
    .gelu_f32 = gelu_f32_avx512,
    .attend_f32 = attend_f32_avx512,
    .f16_to_f32 = f16_to_f32_avx512,
    .f32_to_f16 = f32_to_f16_avx512,
    .q8_0_to_f32 = q8_0_to_f32_avx512,
};

#endif
