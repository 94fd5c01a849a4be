/* The AVX2 tier (AVX2 + FMA + F16C). Functions carry target attributes instead of per-file flags, so this file
 * builds with the project's ordinary flags and its code runs only after cpuid said yes. The block unpackers here
 * are also used by the AVX-512 tier. */
#include "sy_kernels_x86.h"

#if SY_KERNELS_X86

#define AVX2 SY_AVX2_TARGET

/* ---- float kernels ---- */


AVX2 static float dot_f32_avx2(const float *a, const float *b, size_t n) {
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps(), acc2 = _mm256_setzero_ps(),
           acc3 = _mm256_setzero_ps();
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
        acc2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), acc2);
        acc3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), acc3);
    }
    for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    float sum = sy_hsum8(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3)));
    for (; i < n; i++) sum += a[i] * b[i];
    return sum;
}

AVX2 static void axpy_f32_avx2(float *y, float alpha, const float *x, size_t n) {
    __m256 va = _mm256_set1_ps(alpha);
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += alpha * x[i];
}

#define ALWAYS_INLINE __attribute__((always_inline)) inline

/* ---- activation quantization: the same IEEE operations as sy_quantize_row_scalar, so the same bytes ---- */

AVX2 static inline int hsum_epi32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

AVX2 void sy_quantize_row_avx2(const float *x, size_t k, int8_t *q, float *d, float *s16) {
    const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256 high = _mm256_set1_ps(127.0f), low = _mm256_set1_ps(-127.0f);
    const __m256 round = _mm256_set1_ps(12582912.0f); /* 1.5 * 2^23, see the scalar version */
    for (size_t blk = 0; blk < k / SY_QX_BLOCK; blk++) {
        const float *xb = x + blk * SY_QX_BLOCK;
        __m256 v[4], m = _mm256_setzero_ps();
        for (int i = 0; i < 4; i++) {
            v[i] = _mm256_loadu_ps(xb + 8 * i);
            /* maxps returns its second operand when the first is NaN: NaNs leave the maximum alone */
            m = _mm256_max_ps(_mm256_and_ps(v[i], magnitude), m);
        }
        __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        h = _mm_max_ps(h, _mm_movehl_ps(h, h));
        h = _mm_max_ss(h, _mm_movehdup_ps(h));
        float amax = _mm_cvtss_f32(h);
        if (!(amax <= 3.4028234663852886e38f)) amax = 3.4028234663852886e38f; /* infinity */
        float scale = amax / 127.0f;
        float inv = scale > 0.0f ? 127.0f / amax : 0.0f;
        __m256 vinv = _mm256_set1_ps(inv);
        __m256i qi[4];
        for (int i = 0; i < 4; i++) {
            __m256 t = _mm256_mul_ps(v[i], vinv);
            t = _mm256_and_ps(t, _mm256_cmp_ps(t, t, _CMP_ORD_Q)); /* NaN to 0 */
            t = _mm256_min_ps(_mm256_max_ps(t, low), high);
            qi[i] = _mm256_cvttps_epi32(_mm256_sub_ps(_mm256_add_ps(t, round), round));
        }
        int sum0 = hsum_epi32(_mm256_add_epi32(qi[0], qi[1])), sum1 = hsum_epi32(_mm256_add_epi32(qi[2], qi[3]));
        /* packs work within 128-bit lanes: dword j of the result holds 4 codes of vector j % 4, lane j / 4 */
        __m256i bytes = _mm256_packs_epi16(_mm256_packs_epi32(qi[0], qi[1]), _mm256_packs_epi32(qi[2], qi[3]));
        bytes = _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256((__m256i *)(void *)(q + blk * SY_QX_BLOCK), bytes);
        d[blk] = scale;
        s16[2 * blk] = scale * (float)sum0;
        s16[2 * blk + 1] = scale * (float)sum1;
    }
}

/* 8 weights from element i of a row, widened to f32 (rows may sit at any address). */
AVX2 static ALWAYS_INLINE __m256 load8_weights(sy_dtype wtype, const uint8_t *row, size_t i) {
    if (wtype == SY_DTYPE_F32) return _mm256_loadu_ps((const float *)(const void *)(row + 4 * i));
    __m128i h = _mm_loadu_si128((const __m128i *)(const void *)(row + 2 * i));
    if (wtype == SY_DTYPE_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

static inline float load1_weight(sy_dtype wtype, const uint8_t *row, size_t i) {
    if (wtype == SY_DTYPE_F32) {
        float f;
        memcpy(&f, row + 4 * i, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, row + 2 * i, 2);
    return wtype == SY_DTYPE_F16 ? sy_f16_to_f32(h) : sy_bf16_to_f32(h);
}

/* The scalar tail of one dot product, past the last whole vector. */
static inline float dot_tail(sy_dtype wtype, const uint8_t *row, const float *x, size_t from, size_t k) {
    float s = 0.0f;
    for (size_t j = from; j < k; j++) s += load1_weight(wtype, row, j) * x[j];
    return s;
}

#define ROW_TILE 4
#define BATCH_TILE 2

/* 4 rows x 2 batch rows: 8 accumulators in named registers, each weight vector widened once, used twice. */
AVX2 static ALWAYS_INLINE void tile_4x2(sy_dtype wt, const uint8_t *const *rows, const float *const *xs, size_t k,
                                        float out[ROW_TILE][BATCH_TILE]) {
    __m256 a00 = _mm256_setzero_ps(), a01 = a00, a10 = a00, a11 = a00, a20 = a00, a21 = a00, a30 = a00, a31 = a00;
    size_t i = 0;
    for (; i + 8 <= k; i += 8) {
        __m256 x0 = _mm256_loadu_ps(xs[0] + i), x1 = _mm256_loadu_ps(xs[1] + i);
        __m256 w0 = load8_weights(wt, rows[0], i), w1 = load8_weights(wt, rows[1], i);
        a00 = _mm256_fmadd_ps(w0, x0, a00);
        a01 = _mm256_fmadd_ps(w0, x1, a01);
        a10 = _mm256_fmadd_ps(w1, x0, a10);
        a11 = _mm256_fmadd_ps(w1, x1, a11);
        __m256 w2 = load8_weights(wt, rows[2], i), w3 = load8_weights(wt, rows[3], i);
        a20 = _mm256_fmadd_ps(w2, x0, a20);
        a21 = _mm256_fmadd_ps(w2, x1, a21);
        a30 = _mm256_fmadd_ps(w3, x0, a30);
        a31 = _mm256_fmadd_ps(w3, x1, a31);
    }
    out[0][0] = sy_hsum8(a00) + dot_tail(wt, rows[0], xs[0], i, k);
    out[0][1] = sy_hsum8(a01) + dot_tail(wt, rows[0], xs[1], i, k);
    out[1][0] = sy_hsum8(a10) + dot_tail(wt, rows[1], xs[0], i, k);
    out[1][1] = sy_hsum8(a11) + dot_tail(wt, rows[1], xs[1], i, k);
    out[2][0] = sy_hsum8(a20) + dot_tail(wt, rows[2], xs[0], i, k);
    out[2][1] = sy_hsum8(a21) + dot_tail(wt, rows[2], xs[1], i, k);
    out[3][0] = sy_hsum8(a30) + dot_tail(wt, rows[3], xs[0], i, k);
    out[3][1] = sy_hsum8(a31) + dot_tail(wt, rows[3], xs[1], i, k);
}

/* 4 rows x 1 batch row (decode): two accumulators per row so eight FMA chains are in flight. */
AVX2 static ALWAYS_INLINE void tile_4x1(sy_dtype wt, const uint8_t *const *rows, const float *const *xs, size_t k,
                                        float out[ROW_TILE][BATCH_TILE]) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
    const float *x = xs[0];
    size_t i = 0;
    for (; i + 16 <= k; i += 16) {
        __m256 x0 = _mm256_loadu_ps(x + i), x1 = _mm256_loadu_ps(x + i + 8);
        a0 = _mm256_fmadd_ps(load8_weights(wt, rows[0], i), x0, a0);
        a1 = _mm256_fmadd_ps(load8_weights(wt, rows[1], i), x0, a1);
        a2 = _mm256_fmadd_ps(load8_weights(wt, rows[2], i), x0, a2);
        a3 = _mm256_fmadd_ps(load8_weights(wt, rows[3], i), x0, a3);
        b0 = _mm256_fmadd_ps(load8_weights(wt, rows[0], i + 8), x1, b0);
        b1 = _mm256_fmadd_ps(load8_weights(wt, rows[1], i + 8), x1, b1);
        b2 = _mm256_fmadd_ps(load8_weights(wt, rows[2], i + 8), x1, b2);
        b3 = _mm256_fmadd_ps(load8_weights(wt, rows[3], i + 8), x1, b3);
    }
    for (; i + 8 <= k; i += 8) {
        __m256 x0 = _mm256_loadu_ps(x + i);
        a0 = _mm256_fmadd_ps(load8_weights(wt, rows[0], i), x0, a0);
        a1 = _mm256_fmadd_ps(load8_weights(wt, rows[1], i), x0, a1);
        a2 = _mm256_fmadd_ps(load8_weights(wt, rows[2], i), x0, a2);
        a3 = _mm256_fmadd_ps(load8_weights(wt, rows[3], i), x0, a3);
    }
    out[0][0] = sy_hsum8(_mm256_add_ps(a0, b0)) + dot_tail(wt, rows[0], x, i, k);
    out[1][0] = sy_hsum8(_mm256_add_ps(a1, b1)) + dot_tail(wt, rows[1], x, i, k);
    out[2][0] = sy_hsum8(_mm256_add_ps(a2, b2)) + dot_tail(wt, rows[2], x, i, k);
    out[3][0] = sy_hsum8(_mm256_add_ps(a3, b3)) + dot_tail(wt, rows[3], x, i, k);
}

/* Any tile up to 4 x 2 (the edges of the matrix): one row at a time. */
AVX2 static ALWAYS_INLINE void tile_edge(sy_dtype wt, const uint8_t *const *rows, int nr, const float *const *xs,
                                         int nb, size_t k, float out[ROW_TILE][BATCH_TILE]) {
    for (int r = 0; r < nr; r++) {
        __m256 a0 = _mm256_setzero_ps(), a1 = a0;
        size_t i = 0;
        for (; i + 8 <= k; i += 8) {
            __m256 w = load8_weights(wt, rows[r], i);
            a0 = _mm256_fmadd_ps(w, _mm256_loadu_ps(xs[0] + i), a0);
            if (nb > 1) a1 = _mm256_fmadd_ps(w, _mm256_loadu_ps(xs[1] + i), a1);
        }
        out[r][0] = sy_hsum8(a0) + dot_tail(wt, rows[r], xs[0], i, k);
        if (nb > 1) out[r][1] = sy_hsum8(a1) + dot_tail(wt, rows[r], xs[1], i, k);
    }
}

typedef void (*tile_fn)(const uint8_t *const *rows, int nr, const float *const *xs, int nb, size_t k,
                        float out[ROW_TILE][BATCH_TILE]);

/* Specializations per weight type, so the widening is chosen at compile time. */
#define TILE_FUNCS(suffix, wt)                                                                                     \
    AVX2 static void tile_full_##suffix(const uint8_t *const *rows, int nr, const float *const *xs, int nb,       \
                                        size_t k, float out[ROW_TILE][BATCH_TILE]) {                              \
        (void)nr;                                                                                                  \
        (void)nb;                                                                                                  \
        tile_4x2(wt, rows, xs, k, out);                                                                            \
    }                                                                                                              \
    AVX2 static void tile_4x1_##suffix(const uint8_t *const *rows, int nr, const float *const *xs, int nb,        \
                                       size_t k, float out[ROW_TILE][BATCH_TILE]) {                               \
        (void)nr;                                                                                                  \
        (void)nb;                                                                                                  \
        tile_4x1(wt, rows, xs, k, out);                                                                            \
    }                                                                                                              \
    AVX2 static void tile_any_##suffix(const uint8_t *const *rows, int nr, const float *const *xs, int nb,        \
                                       size_t k, float out[ROW_TILE][BATCH_TILE]) {                               \
        tile_edge(wt, rows, nr, xs, nb, k, out);                                                                   \
    }

TILE_FUNCS(f32, SY_DTYPE_F32)
TILE_FUNCS(f16, SY_DTYPE_F16)
TILE_FUNCS(bf16, SY_DTYPE_BF16)

static int matmul_avx2(sy_dtype wtype, const void *W, size_t row_bytes, size_t row_begin, size_t row_end, size_t k,
                       const float *X, size_t n_batch, size_t ldx, float *Y, size_t ldy) {
    if (sy_matmul_check(wtype, W, row_bytes, row_begin, row_end, k, X, n_batch, ldx, Y, ldy) != NULL)
        return SY_KERNEL_EINVAL;
    if (sy_matmul_wants_quantized_x(wtype))
        return sy_matmul_quantized_via_qx(&sy_kernels_avx2_table, wtype, W, row_bytes, row_begin, row_end, k, X,
                                          n_batch, ldx, Y, ldy);
    tile_fn full, single, any;
    if (wtype == SY_DTYPE_F32) {
        full = tile_full_f32, single = tile_4x1_f32, any = tile_any_f32;
    } else if (wtype == SY_DTYPE_F16) {
        full = tile_full_f16, single = tile_4x1_f16, any = tile_any_f16;
    } else {
        full = tile_full_bf16, single = tile_4x1_bf16, any = tile_any_bf16;
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

/* ---- block unpacking (see sy_kernels_quant.c for the formats) ---- */

static inline void k4_scale_min(const uint8_t *s, int j, int *scale, int *min) {
    if (j < 4) {
        *scale = s[j] & 63;
        *min = s[j + 4] & 63;
    } else {
        *scale = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
        *min = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

static inline int q3k_scale(const uint8_t *s, int i) {
    int low = i < 8 ? s[i] & 15 : s[i - 8] >> 4;
    int high = (s[8 + (i & 3)] >> (2 * (i / 4))) & 3;
    return low | (high << 4);
}

/* f16 block scales by the F16C instruction. */
AVX2 static ALWAYS_INLINE float f16_hw(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
}

AVX2 static ALWAYS_INLINE void unpack_block_avx2(sy_dtype type, const uint8_t *b, uint8_t *u, float *a, float *c) {
    const __m256i m3 = _mm256_set1_epi8(3), m15 = _mm256_set1_epi8(15);
    switch (type) {
    case SY_DTYPE_Q4_0:
    case SY_DTYPE_Q4_1: {
        float d = f16_hw(b);
        float offset = type == SY_DTYPE_Q4_0 ? -8.0f * d : f16_hw(b + 2);
        _mm256_storeu_si256((__m256i *)(void *)u, sy_nibbles16(b + (type == SY_DTYPE_Q4_0 ? 2 : 4)));
        a[0] = a[1] = d;
        c[0] = c[1] = offset;
        break;
    }
    case SY_DTYPE_Q5_0:
    case SY_DTYPE_Q5_1: {
        float d = f16_hw(b);
        float offset = type == SY_DTYPE_Q5_0 ? -16.0f * d : f16_hw(b + 2);
        const uint8_t *qh = b + (type == SY_DTYPE_Q5_0 ? 2 : 4);
        __m256i v = _mm256_or_si256(sy_nibbles16(qh + 4), sy_bits_to_0x10(sy_u32_at(qh)));
        _mm256_storeu_si256((__m256i *)(void *)u, v);
        a[0] = a[1] = d;
        c[0] = c[1] = offset;
        break;
    }
    case SY_DTYPE_Q8_0: {
        float d = f16_hw(b);
        __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(b + 2));
        _mm256_storeu_si256((__m256i *)(void *)u, _mm256_xor_si256(v, _mm256_set1_epi8((char)0x80)));
        a[0] = a[1] = d;
        c[0] = c[1] = -128.0f * d;
        break;
    }
    case SY_DTYPE_Q2_K: {
        const uint8_t *scales = b, *qs = b + 16;
        float d = f16_hw(b + 80), dmin = f16_hw(b + 82);
        for (int n = 0; n < 2; n++) {
            __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(qs + 32 * n));
            for (int j = 0; j < 4; j++)
                _mm256_storeu_si256((__m256i *)(void *)(u + 128 * n + 32 * j),
                                    _mm256_and_si256(_mm256_srli_epi16(v, 2 * j), m3));
        }
        for (int i = 0; i < 16; i++) {
            a[i] = d * (float)(scales[i] & 15);
            c[i] = -(dmin * (float)(scales[i] >> 4));
        }
        break;
    }
    case SY_DTYPE_Q3_K: {
        const uint8_t *hmask = b, *qs = b + 32, *scales = b + 96;
        float d = f16_hw(b + 108);
        __m256i h = _mm256_loadu_si256((const __m256i *)(const void *)hmask);
        for (int n = 0; n < 2; n++) {
            __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(qs + 32 * n));
            for (int j = 0; j < 4; j++) {
                __m256i bit = _mm256_set1_epi8((char)(1 << (4 * n + j)));
                __m256i high = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(h, bit), bit),
                                                _mm256_set1_epi8(4));
                __m256i low = _mm256_and_si256(_mm256_srli_epi16(v, 2 * j), m3);
                _mm256_storeu_si256((__m256i *)(void *)(u + 128 * n + 32 * j), _mm256_or_si256(low, high));
            }
        }
        for (int i = 0; i < 16; i++) {
            a[i] = d * (float)(q3k_scale(scales, i) - 32);
            c[i] = -4.0f * a[i];
        }
        break;
    }
    case SY_DTYPE_Q4_K:
    case SY_DTYPE_Q5_K: {
        float d = f16_hw(b), dmin = f16_hw(b + 2);
        const uint8_t *scales = b + 4;
        int five = type == SY_DTYPE_Q5_K;
        const uint8_t *qs = five ? b + 48 : b + 16;
        __m256i h = five ? _mm256_loadu_si256((const __m256i *)(const void *)(b + 16)) : _mm256_setzero_si256();
        for (int i = 0; i < 4; i++) {
            __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(qs + 32 * i));
            __m256i lo = _mm256_and_si256(v, m15), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m15);
            if (five) {
                __m256i b0 = _mm256_set1_epi8((char)(1 << (2 * i))), b1 = _mm256_set1_epi8((char)(2 << (2 * i)));
                __m256i x10 = _mm256_set1_epi8(0x10);
                lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(h, b0), b0), x10));
                hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(h, b1), b1), x10));
            }
            _mm256_storeu_si256((__m256i *)(void *)(u + 64 * i), lo);
            _mm256_storeu_si256((__m256i *)(void *)(u + 64 * i + 32), hi);
        }
        for (int s = 0; s < 8; s++) {
            int sc, m;
            k4_scale_min(scales, s, &sc, &m);
            a[2 * s] = a[2 * s + 1] = d * (float)sc;
            c[2 * s] = c[2 * s + 1] = -(dmin * (float)m);
        }
        break;
    }
    case SY_DTYPE_Q6_K: {
        const uint8_t *ql = b, *qh = b + 128;
        const int8_t *scales = (const int8_t *)(b + 192);
        float d = f16_hw(b + 208);
        for (int n = 0; n < 2; n++) {
            __m256i l0 = _mm256_loadu_si256((const __m256i *)(const void *)(ql + 64 * n));
            __m256i l1 = _mm256_loadu_si256((const __m256i *)(const void *)(ql + 64 * n + 32));
            __m256i h = _mm256_loadu_si256((const __m256i *)(const void *)(qh + 32 * n));
            __m256i h0 = _mm256_slli_epi16(_mm256_and_si256(h, m3), 4);
            __m256i h1 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2), m3), 4);
            __m256i h2 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 4), m3), 4);
            __m256i h3 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 6), m3), 4);
            uint8_t *o = u + 128 * n;
            _mm256_storeu_si256((__m256i *)(void *)o, _mm256_or_si256(_mm256_and_si256(l0, m15), h0));
            _mm256_storeu_si256((__m256i *)(void *)(o + 32), _mm256_or_si256(_mm256_and_si256(l1, m15), h1));
            _mm256_storeu_si256((__m256i *)(void *)(o + 64),
                                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m15), h2));
            _mm256_storeu_si256((__m256i *)(void *)(o + 96),
                                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m15), h3));
        }
        for (int i = 0; i < 16; i++) {
            a[i] = d * (float)scales[i];
            c[i] = -32.0f * a[i];
        }
        break;
    }
    default:
        break;
    }
}

/* One loop per type, so the type's code is inlined without a per-block switch. */
AVX2 static ALWAYS_INLINE void unpack_blocks(sy_dtype type, size_t elems, size_t bytes, const uint8_t *blocks,
                                             size_t n_blocks, uint8_t *u, float *a, float *c) {
    for (size_t blk = 0; blk < n_blocks; blk++)
        unpack_block_avx2(type, blocks + blk * bytes, u + blk * elems, a + blk * elems / SY_QX_GROUP,
                          c + blk * elems / SY_QX_GROUP);
}

#define UNPACK_CASE(type, elems, bytes)                                                                            \
    case type:                                                                                                     \
        unpack_blocks(type, elems, bytes, blocks, n / (elems), u, a, c);                                           \
        break;

AVX2 void sy_unpack_avx2(sy_dtype wtype, const uint8_t *blocks, size_t n, uint8_t *u, float *a, float *c) {
    switch (wtype) {
        UNPACK_CASE(SY_DTYPE_Q4_0, 32, 18)
        UNPACK_CASE(SY_DTYPE_Q4_1, 32, 20)
        UNPACK_CASE(SY_DTYPE_Q5_0, 32, 22)
        UNPACK_CASE(SY_DTYPE_Q5_1, 32, 24)
        UNPACK_CASE(SY_DTYPE_Q8_0, 32, 34)
        UNPACK_CASE(SY_DTYPE_Q2_K, 256, 84)
        UNPACK_CASE(SY_DTYPE_Q3_K, 256, 110)
        UNPACK_CASE(SY_DTYPE_Q4_K, 256, 144)
        UNPACK_CASE(SY_DTYPE_Q5_K, 256, 176)
        UNPACK_CASE(SY_DTYPE_Q6_K, 256, 210)
    default:
        break;
    }
}

/* ---- integer dot of an unpacked chunk with quantized activations ---- */

/* Sum over groups of c[g] * s16[g]: the weights' offsets times the activations' group sums. */
AVX2 static inline __m256 offsets_times_sums(const float *c, const float *s16, size_t groups) {
    __m256 acc = _mm256_setzero_ps();
    size_t g = 0;
    for (; g + 8 <= groups; g += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(c + g), _mm256_loadu_ps(s16 + g), acc);
    float tail = 0.0f;
    for (; g < groups; g++) tail += c[g] * s16[g];
    return _mm256_add_ps(acc, _mm256_setr_ps(tail, 0, 0, 0, 0, 0, 0, 0));
}

/* Per-lane scales for one 32-element block: lanes 0-3 hold group 0 (a[0] * d), lanes 4-7 group 1. */
AVX2 static inline __m256 block_scales(const float *a, float d) {
    __m256 pair = _mm256_castps128_ps256(_mm_castsi128_ps(_mm_loadl_epi64((const __m128i *)(const void *)a)));
    __m256 spread = _mm256_permutevar8x32_ps(pair, _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1));
    return _mm256_mul_ps(spread, _mm256_set1_ps(d));
}

AVX2 static float dot_unpacked_avx2(const uint8_t *u, const float *a, const float *c, const int8_t *q,
                                   const float *d, const float *s16, size_t n) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    size_t blk = 0;
    for (; blk + 2 <= n / 32; blk += 2) {
        __m256i u0 = _mm256_loadu_si256((const __m256i *)(const void *)(u + 32 * blk));
        __m256i q0 = _mm256_loadu_si256((const __m256i *)(const void *)(q + 32 * blk));
        __m256i u1 = _mm256_loadu_si256((const __m256i *)(const void *)(u + 32 * blk + 32));
        __m256i q1 = _mm256_loadu_si256((const __m256i *)(const void *)(q + 32 * blk + 32));
        /* u <= 63 here, so the pairwise 16-bit sums of u*q cannot saturate */
        __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(u0, q0), ones);
        __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(u1, q1), ones);
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), block_scales(a + 2 * blk, d[blk]), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p1), block_scales(a + 2 * blk + 2, d[blk + 1]), acc1);
    }
    if (blk < n / 32) {
        __m256i u0 = _mm256_loadu_si256((const __m256i *)(const void *)(u + 32 * blk));
        __m256i q0 = _mm256_loadu_si256((const __m256i *)(const void *)(q + 32 * blk));
        __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(u0, q0), ones);
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), block_scales(a + 2 * blk, d[blk]), acc0);
    }
    __m256 acc = _mm256_add_ps(_mm256_add_ps(acc0, acc1), offsets_times_sums(c, s16, n / SY_QX_GROUP));
    return sy_hsum8(acc);
}

/* Q8_0 (u = q + 128 uses all 8 bits, which maddubs could saturate): multiply the signed weights directly with
 * the sign trick, |w| * (q with w's sign), and drop the -128 offset term it makes unnecessary. */
AVX2 static float dot_unpacked_wide_avx2(const uint8_t *u, const float *a, const float *c, const int8_t *q,
                                        const float *d, const float *s16, size_t n) {
    const __m256i ones = _mm256_set1_epi16(1), flip = _mm256_set1_epi8((char)0x80);
    __m256 acc = _mm256_setzero_ps();
    for (size_t blk = 0; blk < n / 32; blk++) {
        __m256i w = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(const void *)(u + 32 * blk)), flip);
        __m256i x = _mm256_loadu_si256((const __m256i *)(const void *)(q + 32 * blk));
        __m256i p = _mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(x, w));
        p = _mm256_madd_epi16(p, ones);
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), block_scales(a + 2 * blk, d[blk]), acc);
    }
    return sy_hsum8(acc);
}

/* Four tokens per pass over the unpacked chunk: each block's codes and scales are loaded once for the four tokens.
 * Not for Q8_0 (its unpacked codes would saturate maddubs; its fused kernel serves every batch size here). */
AVX2 static void dot_unpacked4_avx2(const uint8_t *u, const float *a, const float *c, const sy_qx_row *x, size_t k0,
                                    size_t n, float *out) {
    const __m256i ones = _mm256_set1_epi16(1), pair = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
    const int8_t *q0 = x[0].q + k0, *q1 = x[1].q + k0, *q2 = x[2].q + k0, *q3 = x[3].q + k0;
    const float *d0 = x[0].d + k0 / 32, *d1 = x[1].d + k0 / 32, *d2 = x[2].d + k0 / 32, *d3 = x[3].d + k0 / 32;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
    for (size_t blk = 0; blk < n / 32; blk++) {
        __m256i uu = _mm256_loadu_si256((const __m256i *)(const void *)(u + 32 * blk));
        __m256 as = _mm256_permutevar8x32_ps(
            _mm256_castps128_ps256(_mm_castsi128_ps(_mm_loadl_epi64((const __m128i *)(const void *)(a + 2 * blk)))),
            pair);
#define TOKEN(t)                                                                                                   \
    do {                                                                                                           \
        __m256i qq = _mm256_loadu_si256((const __m256i *)(const void *)(q##t + 32 * blk));                       \
        __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(uu, qq), ones);                                         \
        acc##t = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_mul_ps(as, _mm256_broadcast_ss(d##t + blk)), acc##t); \
    } while (0)
        TOKEN(0);
        TOKEN(1);
        TOKEN(2);
        TOKEN(3);
#undef TOKEN
    }
    acc0 = _mm256_add_ps(acc0, offsets_times_sums(c, x[0].s16 + k0 / 16, n / SY_QX_GROUP));
    acc1 = _mm256_add_ps(acc1, offsets_times_sums(c, x[1].s16 + k0 / 16, n / SY_QX_GROUP));
    acc2 = _mm256_add_ps(acc2, offsets_times_sums(c, x[2].s16 + k0 / 16, n / SY_QX_GROUP));
    acc3 = _mm256_add_ps(acc3, offsets_times_sums(c, x[3].s16 + k0 / 16, n / SY_QX_GROUP));
    out[0] = sy_hsum8(acc0);
    out[1] = sy_hsum8(acc1);
    out[2] = sy_hsum8(acc2);
    out[3] = sy_hsum8(acc3);
}

/* The fused kernels serve every batch size, for batch invariance (see the AVX-512 tier), though Q5_0 gains from
 * the unpack path past 8 tokens (measured on 1024 x 896 matrices, one thread; Q8_0 never does). */
#define FUSED_CROSSOVER_BLOCKS32(wtype) ((void)(wtype), SIZE_MAX)

static int matmul_qx_avx2(sy_dtype wtype, const void *W, size_t row_bytes, size_t row_begin, size_t row_end,
                          size_t k, const void *QX, size_t n_batch, float *Y, size_t ldy) {
    if (sy_matmul_qx_check(wtype, W, row_bytes, row_begin, row_end, k, QX, n_batch, Y, ldy) != NULL)
        return SY_KERNEL_EINVAL;
    sy_fused_rows_fn fused[SY_FUSED_TILE_MAX];
    int tile = 0;
    if (sy_fused_wanted(wtype, n_batch, FUSED_CROSSOVER_BLOCKS32(wtype)) &&
        (tile = sy_fused_kernels_avx2(wtype, fused)) > 0) {
        sy_matmul_qx_fused_driver(fused, tile, wtype, W, row_bytes, row_begin, row_end, k, QX, n_batch, Y, ldy);
        return SY_KERNEL_OK;
    }
    int wide = sy_unpacked_is_wide(wtype);
    sy_matmul_qx_driver(sy_unpack_avx2, wide ? dot_unpacked_wide_avx2 : dot_unpacked_avx2,
                        wide ? NULL : dot_unpacked4_avx2, NULL, wtype, W, row_bytes, row_begin, row_end, k, QX,
                        n_batch, Y, ldy);
    return SY_KERNEL_OK;
}

AVX2 static void attend_f32_avx2(const float *q, const float *K, const float *V, size_t stride, size_t n, size_t hd,
                                 float scale, float *max, float *sum, float *out) {
    sy_attend_with(dot_f32_avx2, axpy_f32_avx2, q, K, V, stride, n, hd, scale, max, sum, out);
}

const sy_kernels sy_kernels_avx2_table = {
    .tier = SY_CPU_TIER_AVX2,
    .name = "avx2",
    .dot_f32 = dot_f32_avx2,
    .axpy_f32 = axpy_f32_avx2,
    .matmul = matmul_avx2,
    .matmul_qx = matmul_qx_avx2,
    .attend_f32 = attend_f32_avx2,
};

#endif
