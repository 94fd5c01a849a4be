/* The AVX-512 tier (F, BW, VL, VNNI): 16-wide f32 FMA with masked tails, vpdpbusd integer dots. Block unpacking
 * reuses the AVX2 code (every CPU of this tier has AVX2). */
#include "sy_kernels_internal.h"

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
    for (; i + 32 <= k; i += 32) {
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

/* ---- integer dot of an unpacked chunk with quantized activations ---- */

AVX512 static float dot_unpacked_avx512(const uint8_t *u, const float *a, const float *c, const int8_t *q,
                                       const float *d, const float *s16, size_t n) {
    /* lane j of a vpdpbusd result sums elements 4j..4j+3, so group g of a 64-element step owns lanes 4g..4g+3 */
    const __m512i spread = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    size_t blocks = n / 32, blk = 0;
    for (; blk + 2 <= blocks; blk += 2) {
        __m512i uu = _mm512_loadu_si512(u + 32 * blk);
        __m512i qq = _mm512_loadu_si512(q + 32 * blk);
        __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), uu, qq);
        __m128 dd = _mm_castsi128_ps(_mm_loadl_epi64((const __m128i *)(const void *)(d + blk))); /* d0 d1 - - */
        __m128 s4 = _mm_mul_ps(_mm_loadu_ps(a + 2 * blk), _mm_unpacklo_ps(dd, dd));     /* per group */
        __m512 scales = _mm512_permutexvar_ps(spread, _mm512_castps128_ps512(s4));
        if ((blk / 2) & 1) {
            acc1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), scales, acc1);
        } else {
            acc0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), scales, acc0);
        }
    }
    float sum = 0.0f;
    if (blk < blocks) {
        __m256i uu = _mm256_loadu_si256((const __m256i *)(const void *)(u + 32 * blk));
        __m256i qq = _mm256_loadu_si256((const __m256i *)(const void *)(q + 32 * blk));
        __m256i p = _mm256_dpbusd_epi32(_mm256_setzero_si256(), uu, qq);
        __m128i a2 = _mm_loadl_epi64((const __m128i *)(const void *)(a + 2 * blk));
        __m256 pair = _mm256_castps128_ps256(_mm_castsi128_ps(a2));
        __m256 scales = _mm256_mul_ps(_mm256_permutevar8x32_ps(pair, _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1)),
                                      _mm256_set1_ps(d[blk]));
        __m256 t = _mm256_mul_ps(_mm256_cvtepi32_ps(p), scales);
        __m128 h = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
        h = _mm_add_ps(h, _mm_movehl_ps(h, h));
        sum = _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
    }
    /* offsets times group sums */
    size_t groups = n / SY_QX_GROUP, g = 0;
    __m512 off = _mm512_setzero_ps();
    for (; g + 16 <= groups; g += 16) off = _mm512_fmadd_ps(_mm512_loadu_ps(c + g), _mm512_loadu_ps(s16 + g), off);
    if (g < groups) {
        __mmask16 m = (__mmask16)((1u << (groups - g)) - 1u);
        off = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, c + g), _mm512_maskz_loadu_ps(m, s16 + g), off);
    }
    sum += _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc0, acc1), off));
    return sum;
}

/* Four tokens per pass over an unpacked chunk, one or two rows (rows == 2) at a time: each row's codes and per-lane
 * scales are loaded and spread once for the four tokens, each token's block scales once for the rows; then every
 * (row, token) pair costs a dpbusd, a multiply of the two scales, a conversion and an FMA per 64 elements.
 * Accumulators are named variables: arrays of vectors would live in memory. */
#define TILE_PAIR(i, t, uu, as, qq, ds)                                                                            \
    acc##i##t = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), uu, qq)),            \
                                _mm512_mul_ps(as, ds), acc##i##t)
#define TILE_TOKEN(t, m, dmask)                                                                                    \
    do {                                                                                                           \
        __m512i qq = _mm512_maskz_loadu_epi32(m, q##t + 64 * s);                                                   \
        __m512 ds = _mm512_permutexvar_ps(by8, _mm512_castps128_ps512(_mm_maskz_loadu_ps(dmask, d##t + 2 * s)));  \
        TILE_PAIR(0, t, uu0, as0, qq, ds);                                                                         \
        if (rows == 2) TILE_PAIR(1, t, uu1, as1, qq, ds);                                                          \
    } while (0)
#define TILE_STEP(m, amask, dmask)                                                                                 \
    do {                                                                                                           \
        __m512i uu0 = _mm512_maskz_loadu_epi32(m, u0 + 64 * s), uu1 = uu0;                                         \
        __m512 as0 = _mm512_permutexvar_ps(by4, _mm512_castps128_ps512(_mm_maskz_loadu_ps(amask, a0 + 4 * s))),   \
               as1 = as0;                                                                                          \
        if (rows == 2) {                                                                                           \
            uu1 = _mm512_maskz_loadu_epi32(m, u1 + 64 * s);                                                        \
            as1 = _mm512_permutexvar_ps(by4, _mm512_castps128_ps512(_mm_maskz_loadu_ps(amask, a1 + 4 * s)));      \
        }                                                                                                          \
        TILE_TOKEN(0, m, dmask);                                                                                   \
        TILE_TOKEN(1, m, dmask);                                                                                   \
        TILE_TOKEN(2, m, dmask);                                                                                   \
        TILE_TOKEN(3, m, dmask);                                                                                   \
    } while (0)
#define TILE_OFFSETS(t)                                                                                            \
    do {                                                                                                           \
        __m512 sums = _mm512_maskz_loadu_ps(m, s##t + g);                                                          \
        acc0##t = _mm512_fmadd_ps(cc0, sums, acc0##t);                                                             \
        if (rows == 2) acc1##t = _mm512_fmadd_ps(cc1, sums, acc1##t);                                              \
    } while (0)

AVX512 static ALWAYS_INLINE void dot_unpacked_tile(const int rows, const uint8_t *u0, const float *a0, const float *c0,
                                                   const uint8_t *u1, const float *a1, const float *c1,
                                                   const sy_qx_row *x, size_t k0, size_t n, float out[2][4]) {
    const __m512i by4 = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    const __m512i by8 = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    const int8_t *q0 = x[0].q + k0, *q1 = x[1].q + k0, *q2 = x[2].q + k0, *q3 = x[3].q + k0;
    const float *d0 = x[0].d + k0 / 32, *d1 = x[1].d + k0 / 32, *d2 = x[2].d + k0 / 32, *d3 = x[3].d + k0 / 32;
    __m512 acc00 = _mm512_setzero_ps(), acc01 = acc00, acc02 = acc00, acc03 = acc00;
    __m512 acc10 = acc00, acc11 = acc00, acc12 = acc00, acc13 = acc00;
    size_t s = 0;
    for (; s < n / 64; s++) TILE_STEP(0xffff, 0xf, 0x3);
    if (n % 64 != 0) TILE_STEP(0xff, 0x3, 0x1); /* one block of 32 left: the upper half masked off, not read */
    /* offsets times group sums, each row's offsets loaded once for the four tokens */
    const float *s0 = x[0].s16 + k0 / 16, *s1 = x[1].s16 + k0 / 16, *s2 = x[2].s16 + k0 / 16, *s3 = x[3].s16 + k0 / 16;
    size_t groups = n / SY_QX_GROUP;
    for (size_t g = 0; g < groups; g += 16) {
        __mmask16 m = groups - g >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (groups - g)) - 1u);
        __m512 cc0 = _mm512_maskz_loadu_ps(m, c0 + g), cc1 = cc0;
        if (rows == 2) cc1 = _mm512_maskz_loadu_ps(m, c1 + g);
        TILE_OFFSETS(0);
        TILE_OFFSETS(1);
        TILE_OFFSETS(2);
        TILE_OFFSETS(3);
    }
    out[0][0] = _mm512_reduce_add_ps(acc00);
    out[0][1] = _mm512_reduce_add_ps(acc01);
    out[0][2] = _mm512_reduce_add_ps(acc02);
    out[0][3] = _mm512_reduce_add_ps(acc03);
    if (rows == 2) {
        out[1][0] = _mm512_reduce_add_ps(acc10);
        out[1][1] = _mm512_reduce_add_ps(acc11);
        out[1][2] = _mm512_reduce_add_ps(acc12);
        out[1][3] = _mm512_reduce_add_ps(acc13);
    }
}
#undef TILE_PAIR
#undef TILE_TOKEN
#undef TILE_STEP
#undef TILE_OFFSETS

AVX512 static void dot_unpacked4_avx512(const uint8_t *u, const float *a, const float *c, const sy_qx_row *x,
                                        size_t k0, size_t n, float *out) {
    float tile[2][4];
    dot_unpacked_tile(1, u, a, c, u, a, c, x, k0, n, tile);
    memcpy(out, tile[0], sizeof tile[0]);
}

AVX512 static void dot_unpacked2x4_avx512(const uint8_t *u0, const float *a0, const float *c0, const uint8_t *u1,
                                          const float *a1, const float *c1, const sy_qx_row *x, size_t k0, size_t n,
                                          float out[2][4]) {
    dot_unpacked_tile(2, u0, a0, c0, u1, a1, c1, x, k0, n, out);
}

/* The fused kernels serve every batch size: the unpack path adds up in another order, so a token's result would
 * depend on how many others share its call, and speculative verification and continuous batching could pick other
 * tokens than a plain decode at a near-tie. The unpack path stays for -DSY_FUSED_DISABLE=1 builds. */
#define FUSED_CROSSOVER_BLOCKS32 SIZE_MAX

static int matmul_qx_avx512(sy_dtype wtype, const void *W, size_t row_bytes, size_t row_begin, size_t row_end,
                            size_t k, const void *QX, size_t n_batch, float *Y, size_t ldy) {
    if (sy_matmul_qx_check(wtype, W, row_bytes, row_begin, row_end, k, QX, n_batch, Y, ldy) != NULL)
        return SY_KERNEL_EINVAL;
    sy_fused_rows_fn fused[SY_FUSED_TILE_MAX];
    int tile = 0;
    if (sy_fused_wanted(wtype, n_batch, FUSED_CROSSOVER_BLOCKS32) &&
        (tile = sy_fused_kernels_avx512(wtype, fused)) > 0) {
        sy_matmul_qx_fused_driver(fused, tile, wtype, W, row_bytes, row_begin, row_end, k, QX, n_batch, Y, ldy);
        return SY_KERNEL_OK;
    }
    /* vpdpbusd multiplies unsigned by signed bytes without saturating, so Q8_0's full 8-bit range is fine */
    sy_matmul_qx_driver(sy_unpack_avx2, dot_unpacked_avx512, dot_unpacked4_avx512, dot_unpacked2x4_avx512, wtype, W,
                        row_bytes, row_begin, row_end, k, QX, n_batch, Y, ldy);
    return SY_KERNEL_OK;
}

/* attend_f32 with out in nv registers (hd = 16 nv): the same FMAs and multiplies as axpy_f32_avx512 on each
 * element, so the same bits, without loading and storing out for every key. */
AVX512 static ALWAYS_INLINE void attend_in_registers(const int nv, const float *q, const float *K, const float *V,
                                                     size_t stride, size_t n, float scale, float *max, float *sum,
                                                     float *out) {
    const size_t hd = 16 * (size_t)nv;
    __m512 acc[8];
    for (int j = 0; j < nv; j++) acc[j] = _mm512_loadu_ps(out + 16 * j);
    for (size_t c0 = 0; c0 < n; c0 += SY_ATTEND_CHUNK) {
        size_t nc = n - c0 < SY_ATTEND_CHUNK ? n - c0 : SY_ATTEND_CHUNK;
        const float *Kc = K + c0 * stride, *Vc = V + c0 * stride;
        float s[SY_ATTEND_CHUNK];
        float block_max = sy_attend_scores(dot_f32_avx512, q, Kc, stride, nc, hd, scale, s);
        if (block_max > *max) {
            float shrink = expf(*max - block_max);
            *sum *= shrink;
            for (int j = 0; j < nv; j++) acc[j] = _mm512_mul_ps(acc[j], _mm512_set1_ps(shrink));
            *max = block_max;
        }
        for (size_t i = 0; i < nc; i++) {
            float e = expf(s[i] - *max);
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
    default: sy_attend_with(dot_f32_avx512, axpy_f32_avx512, q, K, V, stride, n, hd, scale, max, sum, out);
    }
}

const sy_kernels sy_kernels_avx512_table = {
    .tier = SY_CPU_TIER_AVX512,
    .name = "avx512",
    .dot_f32 = dot_f32_avx512,
    .axpy_f32 = axpy_f32_avx512,
    .matmul = matmul_avx512,
    .matmul_qx = matmul_qx_avx512,
    .attend_f32 = attend_f32_avx512,
};

#endif
