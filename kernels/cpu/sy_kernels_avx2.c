/* The AVX2 tier (AVX2 + FMA + F16C). Functions carry target attributes instead of per-file flags, so this file
 * builds with the project's ordinary flags and its code runs only after cpuid said yes. Quantized weights go to the
 * fused kernels (sy_kernels_fused_avx2.c). */
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

/* Every quantized type at every batch size by the fused kernels: one accumulation order whatever the batch (batch
 * invariance, sy_kernels.h). sy_matmul_qx_check accepts exactly the types the fused table has. */
static int matmul_qx_avx2(sy_dtype wtype, const void *W, size_t row_bytes, size_t row_begin, size_t row_end,
                          size_t k, const void *QX, size_t n_batch, float *Y, size_t ldy) {
    if (sy_matmul_qx_check(wtype, W, row_bytes, row_begin, row_end, k, QX, n_batch, Y, ldy) != NULL)
        return SY_KERNEL_EINVAL;
    sy_fused_rows_fn fused[SY_FUSED_TILE_MAX];
    int tile = sy_fused_kernels_avx2(wtype, fused);
    if (tile == 0) return SY_KERNEL_EINVAL;
    sy_matmul_qx_fused_driver(fused, tile, wtype, W, row_bytes, row_begin, row_end, k, QX, n_batch, Y, ldy);
    return SY_KERNEL_OK;
}

/* sy_expf eight at a time; the tail element by element (the same bits). */
AVX2 static void exp_f32_avx2(const float *x, float *y, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, sy_expf8(_mm256_loadu_ps(x + i)));
    for (; i < n; i++) y[i] = sy_expf(x[i]);
}

/* glibc's vector erff (libmvec), the AVX2 variant */
__m256 _ZGVdN8v_erff(__m256 x);

/* The GELU eight at a time; the tail through a zero-padded vector (the lanes are independent: the same bits). */
AVX2 static void gelu_f32_avx2(const float *x, float *y, size_t n) {
    const __m256 half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f), r2 = _mm256_set1_ps((float)M_SQRT1_2);
    for (size_t i = 0; i < n; i += 8) {
        _Alignas(32) float buf[8] = {0};
        const size_t m = n - i < 8 ? n - i : 8;
        __m256 v;
        if (m == 8) {
            v = _mm256_loadu_ps(x + i);
        } else {
            memcpy(buf, x + i, m * sizeof(float));
            v = _mm256_load_ps(buf);
        }
        __m256 g = _mm256_mul_ps(_mm256_mul_ps(half, v), _mm256_add_ps(one, _ZGVdN8v_erff(_mm256_mul_ps(v, r2))));
        if (m == 8) {
            _mm256_storeu_ps(y + i, g);
        } else {
            _mm256_store_ps(buf, g);
            memcpy(y + i, buf, m * sizeof(float));
        }
    }
}

/* Eight accumulators to one vector of their sums, a[j] in lane j, each by sy_hsum8's tree (lane i + i + 4, then
 * i + 2, then i + 1) and never mixing two, so each sum has the bits sy_hsum8 gives it alone. */
AVX2 static ALWAYS_INLINE __m256 reduce8(const __m256 a[8]) {
    __m256 t[4], u[2];
    for (int i = 0; i < 4; i++) /* low half: a[2i]'s i + i + 4; high half: a[2i + 1]'s */
        t[i] = _mm256_add_ps(_mm256_permute2f128_ps(a[2 * i], a[2 * i + 1], 0x20),
                             _mm256_permute2f128_ps(a[2 * i], a[2 * i + 1], 0x31));
    for (int i = 0; i < 2; i++)
        u[i] = _mm256_add_ps(_mm256_shuffle_ps(t[2 * i], t[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm256_shuffle_ps(t[2 * i], t[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    __m256 w = _mm256_add_ps(_mm256_shuffle_ps(u[0], u[1], _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm256_shuffle_ps(u[0], u[1], _MM_SHUFFLE(3, 1, 3, 1)));
    /* w holds a[0], a[2], a[4], a[6] in its low half and a[1], a[3], a[5], a[7] in its high half */
    return _mm256_permutevar8x32_ps(w, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* One key's products with q (hd = 8 nv, nv a multiple of 4) folded to one vector exactly as dot_f32_avx2 folds them
 * before sy_hsum8: four chains, 32 elements a step, then (0 + 1) + (2 + 3). */
AVX2 static ALWAYS_INLINE __m256 key_products(const int nv, const float *q, const float *k) {
    __m256 c[4];
    for (int j = 0; j < 4; j++)
        c[j] = _mm256_fmadd_ps(_mm256_loadu_ps(q + 8 * j), _mm256_loadu_ps(k + 8 * j), _mm256_setzero_ps());
    for (int j = 4; j < nv; j++)
        c[j % 4] = _mm256_fmadd_ps(_mm256_loadu_ps(q + 8 * j), _mm256_loadu_ps(k + 8 * j), c[j % 4]);
    return _mm256_add_ps(_mm256_add_ps(c[0], c[1]), _mm256_add_ps(c[2], c[3]));
}

/* attend_f32 for hd = 64, 128: eight keys scored at a time through one transposing reduction (each score has
 * dot_f32_avx2's bits without a reduction per key), their exponentials eight at a time. */
AVX2 static ALWAYS_INLINE void attend_scored8(const int nv, const float *q, const float *K, const float *V,
                                              size_t stride, size_t n, float scale, float *max, float *sum,
                                              float *out) {
    const size_t hd = 8 * (size_t)nv;
    const __m256 vscale = _mm256_set1_ps(scale);
    for (size_t c0 = 0; c0 < n; c0 += SY_ATTEND_CHUNK) {
        size_t nc = n - c0 < SY_ATTEND_CHUNK ? n - c0 : SY_ATTEND_CHUNK;
        const float *Kc = K + c0 * stride, *Vc = V + c0 * stride;
        _Alignas(32) float s[SY_ATTEND_CHUNK];
        float block_max = -INFINITY;
        for (size_t g = 0; g < nc; g += 8) {
            const size_t cnt = nc - g < 8 ? nc - g : 8;
            __m256 keys[8];
            for (size_t j = 0; j < 8; j++)
                keys[j] = j < cnt ? key_products(nv, q, Kc + (g + j) * stride) : _mm256_setzero_ps();
            _mm256_store_ps(s + g, _mm256_mul_ps(reduce8(keys), vscale));
            for (size_t j = 0; j < cnt; j++)
                if (s[g + j] > block_max) block_max = s[g + j];
        }
        sy_attend_fold(exp_f32_avx2, axpy_f32_avx2, s, block_max, Vc, stride, nc, hd, max, sum, out);
    }
}

AVX2 static void attend_f32_avx2(const float *q, const float *K, const float *V, size_t stride, size_t n, size_t hd,
                                 float scale, float *max, float *sum, float *out) {
    switch (hd) { /* the usual head sizes */
    case 64: attend_scored8(8, q, K, V, stride, n, scale, max, sum, out); return;
    case 128: attend_scored8(16, q, K, V, stride, n, scale, max, sum, out); return;
    default: sy_attend_with(dot_f32_avx2, exp_f32_avx2, axpy_f32_avx2, q, K, V, stride, n, hd, scale, max, sum, out);
    }
}

/* KV cache conversions: F16C, 8 at a time (round to nearest even, as sy_f32_to_f16), scalar tails. */
AVX2 static void f16_to_f32_avx2(const uint16_t *src, float *dst, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(src + i))));
    for (; i < n; i++) dst[i] = sy_f16_to_f32(src[i]);
}

AVX2 static void f32_to_f16_avx2(const float *src, uint16_t *dst, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(void *)(dst + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) dst[i] = sy_f32_to_f16(src[i]);
}

/* Q8_0 blocks: the scale broadcast, 8 codes sign-extended and converted per multiply (d * q, exact). */
AVX2 static void q8_0_to_f32_avx2(const void *blocks, float *dst, size_t n_blocks) {
    const uint8_t *in = blocks;
    for (size_t b = 0; b < n_blocks; b++, in += 34, dst += 32) {
        __m256 d = _mm256_set1_ps(sy_load_f16(in));
        for (size_t j = 0; j < 32; j += 8) {
            __m128i q8 = _mm_loadl_epi64((const __m128i *)(const void *)(in + 2 + j));
            _mm256_storeu_ps(dst + j, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q8))));
        }
    }
}

const sy_kernels sy_kernels_avx2_table = {
    .tier = SY_CPU_TIER_AVX2,
    .name = "avx2",
    .dot_f32 = dot_f32_avx2,
    .axpy_f32 = axpy_f32_avx2,
    .matmul = matmul_avx2,
    .matmul_qx = matmul_qx_avx2,
    .exp_f32 = exp_f32_avx2,
    .gelu_f32 = gelu_f32_avx2,
    .attend_f32 = attend_f32_avx2,
    .f16_to_f32 = f16_to_f32_avx2,
    .f32_to_f16 = f32_to_f16_avx2,
    .q8_0_to_f32 = q8_0_to_f32_avx2,
};

#endif
