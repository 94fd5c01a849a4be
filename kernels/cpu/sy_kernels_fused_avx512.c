/* Fused quantized dots, AVX-512 tier (F, BW, VL, VNNI): small batches, and the K-quants at every batch size (see
 * sy_kernels_internal.h and sy_kernels_fused_avx2.c for the scheme).
 *
 * vpdpbusd multiplies unsigned weight codes by signed activation bytes and sums each four into 32 bits in one
 * instruction. Every type works on 512-bit vectors, 64 elements (two activation blocks) at a time, with the
 * per-lane f32 scales picked by one permute per token: the 32-element block types two consecutive blocks per vector
 * (eight blocks' scales per gather, a lone block at the end of an odd row), the K-quants 64 elements of a
 * 256-element block. Reading ahead: see sy_prefetch_ahead. */
#include "sy_kernels_internal.h"

#if SY_KERNELS_X86

#include <immintrin.h>

#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))
#define ALWAYS_INLINE __attribute__((always_inline)) inline
#define TILE SY_FUSED_TILE

AVX512 static ALWAYS_INLINE float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

AVX512 static ALWAYS_INLINE float hsum16(__m512 v) {
    __m256 high = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)); /* AVX512F, not DQ */
    return hsum8(_mm256_add_ps(_mm512_castps512_ps256(v), high));
}

AVX512 static ALWAYS_INLINE float f16_at(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

static inline uint32_t u32_at(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4); /* x86 is little-endian, like the files */
    return v;
}

AVX512 static ALWAYS_INLINE __m256i load32(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }
AVX512 static ALWAYS_INLINE __m512i load64(const void *p) { return _mm512_loadu_si512(p); }
/* 32 bytes into both halves of a 512-bit vector (a load-port broadcast). */
AVX512 static ALWAYS_INLINE __m512i load32x2(const void *p) {
    return _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)p));
}

/* Lane l of the result is v's lane base + l / per: per 4 picks the groups of 16 of a 64-element dpbusd result, per 8
 * its two blocks of 32, per 2 spreads 8 per-block values over 16 groups. */
AVX512 static ALWAYS_INLINE __m512 spread(__m512 v, int base, int per) {
    __m512i step = per == 2   ? _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7)
                   : per == 4 ? _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3)
                              : _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    return _mm512_permutexvar_ps(_mm512_add_epi32(_mm512_set1_epi32(base), step), v);
}

/* Independent FMA accumulators per token of the 32-element block kernels, so FMA latency hides. The same number
 * whatever the batch: a token's result must not depend on how many others share the call (batch invariance, see
 * sy_kernels.h). Two, as for the K-quants: with four tokens that is eight chains in flight, and the accumulators,
 * scales and codes of a four-token tile then fit the 32 vector registers (four chains spilled; measured slower). */
#define CHAINS 2

/* ---- 32-element blocks: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 ---- */

static inline size_t blocks32_bytes(sy_dtype type) {
    return type == SY_DTYPE_Q4_0   ? 18
           : type == SY_DTYPE_Q4_1 ? 20
           : type == SY_DTYPE_Q5_0 ? 22
           : type == SY_DTYPE_Q5_1 ? 24
                                   : 34;
}

/* The unsigned codes of block a in the lower half and of block b (the next one) in the upper half, in element
 * order; with pair 0 only block a, the upper half zero and b not read. Q8_0: |w|, with *negative the lanes whose
 * weight is negative (the sign moves to the activations). */
AVX512 static ALWAYS_INLINE __m512i blocks32_codes(sy_dtype type, const uint8_t *a, const uint8_t *b, const int pair,
                                                   __mmask64 *negative) {
    if (type == SY_DTYPE_Q8_0) {
        __m512i w = pair ? _mm512_inserti64x4(_mm512_castsi256_si512(load32(a + 2)), load32(b + 2), 1)
                         : _mm512_zextsi256_si512(load32(a + 2));
        *negative = _mm512_cmplt_epi8_mask(w, _mm512_setzero_si512()); /* a compare runs beside vpdpbusd's port */
        return _mm512_abs_epi8(w); /* -128 gives 0x80 = 128 unsigned */
    }
    const int at = type == SY_DTYPE_Q4_0 ? 2 : type == SY_DTYPE_Q4_1 ? 4 : type == SY_DTYPE_Q5_0 ? 6 : 8;
    /* each block's 16 bytes twice (low nibbles, then high nibbles), from load-port broadcasts */
    __m512i v = _mm512_maskz_broadcast_i32x4(pair ? (__mmask16)0xffff : (__mmask16)0x00ff,
                                             _mm_loadu_si128((const __m128i *)(const void *)(a + at)));
    if (pair)
        v = _mm512_mask_broadcast_i32x4(v, (__mmask16)0xff00, _mm_loadu_si128((const __m128i *)(const void *)(b + at)));
    __m512i u = _mm512_and_si512(_mm512_srlv_epi64(v, _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4)), _mm512_set1_epi8(15));
    if (type == SY_DTYPE_Q5_0 || type == SY_DTYPE_Q5_1) {
        const int qh = type == SY_DTYPE_Q5_0 ? 2 : 4; /* the fifth bits, one mask bit per element */
        __mmask64 high = (__mmask64)u32_at(a + qh) | (pair ? (__mmask64)u32_at(b + qh) << 32 : 0);
        u = _mm512_mask_add_epi8(u, high, u, _mm512_set1_epi8(0x10));
    }
    return u;
}

/* Blocks j, j + 1 (pair) or j alone of the group at g against every token, into accumulator chain `chain`.
 * vpdpbusd into a zero vector gives each block's eight exact int32 partial sums (codes <= 128 times activations
 * of magnitude <= 127, four per lane: far from overflow; it does not saturate), lanes 0-7 block j, 8-15 block j + 1;
 * one convert and one FMA with the two blocks' scales spread over their lanes serve both. */
AVX512 static ALWAYS_INLINE void blocks32_pair(sy_dtype type, const uint8_t *g, size_t i0, const int j, const int pair,
                                               const sy_qx_row *x, const int nb, const __m256 *scale,
                                               const int chain, __m512 (*acc)[TILE]) {
    const size_t bytes = blocks32_bytes(type);
    const uint8_t *a = g + (size_t)j * bytes;
    __mmask64 negative = 0;
    __m512i u = blocks32_codes(type, a, a + bytes, pair, &negative);
    for (int t = 0; t < nb; t++) {
        const int8_t *qp = x[t].q + 32 * (i0 + (size_t)j);
        /* a lone block reads only its own 32 activations (the row may end there) */
        __m512i q = pair ? load64(qp) : _mm512_maskz_loadu_epi8((__mmask64)0xffffffffu, qp);
        if (type == SY_DTYPE_Q8_0) q = _mm512_mask_sub_epi8(q, negative, _mm512_setzero_si512(), q);
        __m512 f = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), u, q));
        acc[chain][t] = _mm512_fmadd_ps(f, spread(_mm512_castps256_ps512(scale[t]), j, 8), acc[chain][t]);
    }
}

/* Blocks i0 .. i0 + count - 1 (count 8, or fewer at the end of a row) against every token.
 * w = d * u + offset per block (offset -8d, m, -16d, m); Q8_0: w = d * q, signed, by the sign trick. The eight
 * blocks' scales come in one gather (d, and m in the upper half of the same 32 bits), so each token pays one
 * multiply for the eight products d * dx and one FMA for the eight offsets times the activation sums. */
AVX512 static ALWAYS_INLINE void blocks32_group(sy_dtype type, const uint8_t *w, size_t i0, const int count,
                                                const sy_qx_row *x, const int nb, __m512 (*acc)[TILE]) {
    const int bytes = (int)blocks32_bytes(type);
    const __mmask8 m8 = (__mmask8)((1u << count) - 1u);
    const __mmask16 m16 = (__mmask16)((1u << (2 * count)) - 1u);
    const uint8_t *g = w + i0 * (size_t)bytes;
    sy_prefetch_ahead(g, 8 * (size_t)bytes);
    __m256i at = _mm256_setr_epi32(0, bytes, 2 * bytes, 3 * bytes, 4 * bytes, 5 * bytes, 6 * bytes, 7 * bytes);
    /* the first 4 bytes of each block: d (and Q4_1/Q5_1's m); masked lanes are not read */
    __m256i head = count == 8 ? _mm256_i32gather_epi32((const int *)(const void *)g, at, 1)
                              : _mm256_mmask_i32gather_epi32(_mm256_setzero_si256(), m8, at, g, 1);
    __m256 d8 = _mm256_cvtph_ps(_mm256_cvtepi32_epi16(head));
    __m512 off16 = _mm512_setzero_ps(); /* per 16-element group */
    if (type != SY_DTYPE_Q8_0) {
        __m256 off8 = type == SY_DTYPE_Q4_0   ? _mm256_mul_ps(d8, _mm256_set1_ps(-8.0f))
                      : type == SY_DTYPE_Q5_0 ? _mm256_mul_ps(d8, _mm256_set1_ps(-16.0f))
                                              : _mm256_cvtph_ps(_mm256_cvtepi32_epi16(_mm256_srli_epi32(head, 16)));
        off16 = spread(_mm512_castps256_ps512(off8), 0, 2);
    }
    __m256 scale[TILE]; /* lanes past count are zero (masked loads), and so are their codes */
    for (int t = 0; t < nb; t++) {
        __m256 dx = count == 8 ? _mm256_loadu_ps(x[t].d + i0) : _mm256_maskz_loadu_ps(m8, x[t].d + i0);
        scale[t] = _mm256_mul_ps(d8, dx);
        if (type != SY_DTYPE_Q8_0) {
            const float *sums = x[t].s16 + 2 * i0;
            __m512 s16 = count == 8 ? _mm512_loadu_ps(sums) : _mm512_maskz_loadu_ps(m16, sums);
            acc[1][t] = _mm512_fmadd_ps(off16, s16, acc[1][t]); /* lanes per 16 elements, summed alike at the end */
        }
    }
    if (count == 8) {
        /* constant chain indices keep the accumulators in registers */
        blocks32_pair(type, g, i0, 0, 1, x, nb, scale, 0, acc);
        blocks32_pair(type, g, i0, 2, 1, x, nb, scale, 1, acc);
        blocks32_pair(type, g, i0, 4, 1, x, nb, scale, 0, acc);
        blocks32_pair(type, g, i0, 6, 1, x, nb, scale, 1, acc);
        return;
    }
    int j = 0;
    for (; j + 2 <= count; j += 2) blocks32_pair(type, g, i0, j, 1, x, nb, scale, 0, acc);
    if (j < count) blocks32_pair(type, g, i0, j, 0, x, nb, scale, 0, acc); /* an odd block left */
}

AVX512 static ALWAYS_INLINE void row_blocks32(sy_dtype type, const uint8_t *w, size_t n_blocks,
                                              const sy_qx_row *x, const int nb, float *out) {
    __m512 acc[CHAINS][TILE];
    for (int t = 0; t < nb; t++)
        for (int c = 0; c < CHAINS; c++) acc[c][t] = _mm512_setzero_ps();
    size_t i0 = 0;
    for (; i0 + 8 <= n_blocks; i0 += 8) blocks32_group(type, w, i0, 8, x, nb, acc);
    if (i0 < n_blocks) blocks32_group(type, w, i0, (int)(n_blocks - i0), x, nb, acc);
    for (int t = 0; t < nb; t++) out[t] = hsum16(_mm512_add_ps(acc[0][t], acc[1][t]));
}

/* ---- K-quants: 256-element blocks, 64 elements per step ---- */

/* The 8 scales and 8 mins of a Q4_K/Q5_K block's 12 scale bytes, as floats. */
AVX512 static ALWAYS_INLINE void k4_scales_mins(const uint8_t *s, __m256 *scales, __m256 *mins) {
    uint32_t w0 = u32_at(s), w1 = u32_at(s + 4), w2 = u32_at(s + 8);
    uint32_t sc_lo = w0 & 0x3f3f3f3fu, mn_lo = w1 & 0x3f3f3f3fu;
    uint32_t sc_hi = (w2 & 0x0f0f0f0fu) | ((w0 >> 2) & 0x30303030u);
    uint32_t mn_hi = ((w2 >> 4) & 0x0f0f0f0fu) | ((w1 >> 2) & 0x30303030u);
    __m128i v = _mm_set_epi32((int)mn_hi, (int)mn_lo, (int)sc_hi, (int)sc_lo);
    *scales = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v));
    *mins = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(v, 8)));
}

/* Elements 64i..64i+63 (sub-blocks 2i, 2i+1) against every token; scale[t] lanes 0-7 hold d * scale_j * dx_j. */
AVX512 static ALWAYS_INLINE void k4_step(const int five, const uint8_t *qs, __m512i h, int i, const int8_t *const *q,
                                         const __m512 *scale, const int nb, const int two_chains, __m512 *acc,
                                         __m512 *acc2) {
    /* low nibbles in the lower half, high nibbles in the upper: 64 elements in order */
    __m512i u = _mm512_and_si512(_mm512_srlv_epi64(load32x2(qs + 32 * i), _mm512_setr_epi64(0, 0, 0, 0, 4, 4, 4, 4)),
                                 _mm512_set1_epi8(15));
    if (five) {
        /* the fifth bits: qh bit 2i for the lower half, 2i + 1 for the upper */
        __m512i bits = _mm512_inserti64x4(_mm512_set1_epi8((char)(1 << (2 * i))),
                                          _mm256_set1_epi8((char)(2 << (2 * i))), 1);
        u = _mm512_mask_add_epi8(u, _mm512_test_epi8_mask(h, bits), u, _mm512_set1_epi8(0x10));
    }
    for (int t = 0; t < nb; t++) {
        __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, load64(q[t] + 64 * i));
        __m512 f = _mm512_cvtepi32_ps(p), s = spread(scale[t], 2 * i, 8);
        if (two_chains && (i & 1)) {
            acc2[t] = _mm512_fmadd_ps(f, s, acc2[t]);
        } else {
            acc[t] = _mm512_fmadd_ps(f, s, acc[t]);
        }
    }
}

AVX512 static ALWAYS_INLINE void row_q4k_q5k(const int five, const uint8_t *w, size_t n_super, const sy_qx_row *x,
                                             const int nb, float *out) {
    const size_t bytes = five ? 176 : 144;
    const int two_chains = 1; /* two accumulators per token whatever the batch (batch invariance) */
    __m512 acc[TILE], acc2[TILE];
    for (int t = 0; t < nb; t++) acc[t] = acc2[t] = _mm512_setzero_ps();
    for (size_t s = 0; s < n_super; s++, w += bytes) {
        sy_prefetch_ahead(w, bytes);
        __m256 sc, mn;
        k4_scales_mins(w + 4, &sc, &mn);
        __m256 dsc = _mm256_mul_ps(sc, _mm256_set1_ps(f16_at(w)));
        /* per 16-element group: sub-block j's min serves groups 2j and 2j + 1 */
        __m512 neg_min = spread(_mm512_castps256_ps512(_mm256_mul_ps(mn, _mm256_set1_ps(-f16_at(w + 2)))), 0, 2);
        const int8_t *q[TILE];
        __m512 scale[TILE];
        for (int t = 0; t < nb; t++) {
            q[t] = x[t].q + 256 * s;
            scale[t] = _mm512_castps256_ps512(_mm256_mul_ps(dsc, _mm256_loadu_ps(x[t].d + 8 * s)));
            acc2[t] = _mm512_fmadd_ps(neg_min, _mm512_loadu_ps(x[t].s16 + 16 * s), acc2[t]);
        }
        const uint8_t *qs = w + (five ? 48 : 16);
        __m512i h = five ? load32x2(w + 16) : _mm512_setzero_si512();
        k4_step(five, qs, h, 0, q, scale, nb, two_chains, acc, acc2);
        k4_step(five, qs, h, 1, q, scale, nb, two_chains, acc, acc2);
        k4_step(five, qs, h, 2, q, scale, nb, two_chains, acc, acc2);
        k4_step(five, qs, h, 3, q, scale, nb, two_chains, acc, acc2);
    }
    for (int t = 0; t < nb; t++) out[t] = hsum16(_mm512_add_ps(acc[t], acc2[t]));
}

/* 16 signed 6-bit Q3_K scales (already minus 32) from its 12 scale bytes. */
static inline __m128i q3k_scales(const uint8_t *s) {
    uint32_t w0 = u32_at(s), w1 = u32_at(s + 4), w2 = u32_at(s + 8);
    uint32_t lo[4] = {w0 & 0x0f0f0f0fu, w1 & 0x0f0f0f0fu, (w0 >> 4) & 0x0f0f0f0fu, (w1 >> 4) & 0x0f0f0f0fu};
    for (int k = 0; k < 4; k++) lo[k] |= ((w2 >> (2 * k)) & 0x03030303u) << 4;
    __m128i v = _mm_set_epi32((int)lo[3], (int)lo[2], (int)lo[1], (int)lo[0]);
    return _mm_sub_epi8(v, _mm_set1_epi8(32));
}

/* The unsigned codes of elements 64i..64i+63 (chunks 2i and 2i + 1 of 32) of a Q2_K/Q3_K/Q6_K block, in order.
 * Q6_K: w = d * sc * (u - 32); Q3_K: w = d * sc * (u - 4); Q2_K: w = d * sc * u - dmin * min. */
AVX512 static ALWAYS_INLINE __m512i k16_codes(sy_dtype type, const uint8_t *b, int i) {
    int n = i / 2, j = 2 * (i % 2); /* half n, chunks j and j + 1 of it */
    if (type == SY_DTYPE_Q6_K) {
        /* chunks 0, 1 of a half: ql[64n .. 64n + 63] & 15; chunks 2, 3: >> 4; high bits (qh >> 2j) & 3 */
        __m512i l = load64(b + 64 * n), h = load32x2(b + 128 + 32 * n);
        __m512i low = _mm512_and_si512(j == 0 ? l : _mm512_srli_epi16(l, 4), _mm512_set1_epi8(15));
        /* high bits to bits 4-5: shifts within each byte (64-bit lanes, the mask drops what crossed) */
        __m512i high = j == 0 ? _mm512_sllv_epi64(h, _mm512_setr_epi64(4, 4, 4, 4, 2, 2, 2, 2))
                              : _mm512_srlv_epi64(h, _mm512_setr_epi64(0, 0, 0, 0, 2, 2, 2, 2));
        return _mm512_or_si512(low, _mm512_and_si512(high, _mm512_set1_epi8(0x30)));
    }
    __m512i qs = load32x2(b + (type == SY_DTYPE_Q3_K ? 32 : 16) + 32 * n);
    __m512i shifts = _mm512_setr_epi64(2 * j, 2 * j, 2 * j, 2 * j, 2 * j + 2, 2 * j + 2, 2 * j + 2, 2 * j + 2);
    __m512i low = _mm512_and_si512(_mm512_srlv_epi64(qs, shifts), _mm512_set1_epi8(3));
    if (type == SY_DTYPE_Q2_K) return low;
    /* Q3_K: hmask bit 4n + j (lower half) or 4n + j + 1 (upper half) adds 4 */
    __m512i bits = _mm512_inserti64x4(_mm512_set1_epi8((char)(1 << (4 * n + j))),
                                      _mm256_set1_epi8((char)(1 << (4 * n + j + 1))), 1);
    __mmask64 high = _mm512_test_epi8_mask(load32x2(b), bits);
    return _mm512_mask_add_epi8(low, high, low, _mm512_set1_epi8(4));
}

AVX512 static ALWAYS_INLINE void k16_step(sy_dtype type, const uint8_t *w, int i, const int8_t *const *q,
                                          const __m512 *scale, const int nb, const int two_chains, __m512 *acc,
                                          __m512 *acc2) {
    __m512i u = k16_codes(type, w, i);
    for (int t = 0; t < nb; t++) {
        __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, load64(q[t] + 64 * i));
        __m512 f = _mm512_cvtepi32_ps(p), s = spread(scale[t], 4 * i, 4);
        if (two_chains && (i & 1)) {
            acc2[t] = _mm512_fmadd_ps(f, s, acc2[t]);
        } else {
            acc[t] = _mm512_fmadd_ps(f, s, acc[t]);
        }
    }
}

AVX512 static ALWAYS_INLINE void row_k16(sy_dtype type, const uint8_t *w, size_t n_super, const sy_qx_row *x,
                                         const int nb, float *out) {
    const size_t bytes = type == SY_DTYPE_Q2_K ? 84 : type == SY_DTYPE_Q3_K ? 110 : 210;
    const int two_chains = 1; /* as above */
    __m512 acc[TILE], acc2[TILE];
    for (int t = 0; t < nb; t++) acc[t] = acc2[t] = _mm512_setzero_ps();
    for (size_t s = 0; s < n_super; s++, w += bytes) {
        sy_prefetch_ahead(w, bytes);
        __m512 dsc, off; /* per 16-element group: d * sub-scale, and the weight offset */
        if (type == SY_DTYPE_Q2_K) {
            __m128i raw = _mm_loadu_si128((const __m128i *)(const void *)w);
            __m512 sc = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(raw, _mm_set1_epi8(15))));
            __m512 mn = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(raw, 4),
                                                                             _mm_set1_epi8(15))));
            dsc = _mm512_mul_ps(sc, _mm512_set1_ps(f16_at(w + 80)));
            off = _mm512_mul_ps(mn, _mm512_set1_ps(-f16_at(w + 82)));
        } else {
            int six = type == SY_DTYPE_Q6_K;
            __m128i sc8 = six ? _mm_loadu_si128((const __m128i *)(const void *)(w + 192)) : q3k_scales(w + 96);
            dsc = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(sc8)),
                                _mm512_set1_ps(f16_at(w + (six ? 208 : 108))));
            off = _mm512_mul_ps(dsc, _mm512_set1_ps(six ? -32.0f : -4.0f));
        }
        const int8_t *q[TILE];
        __m512 scale[TILE];
        for (int t = 0; t < nb; t++) {
            q[t] = x[t].q + 256 * s;
            /* group g's block scale is dx[g / 2] */
            __m512 dx = spread(_mm512_castps256_ps512(_mm256_loadu_ps(x[t].d + 8 * s)), 0, 2);
            scale[t] = _mm512_mul_ps(dsc, dx);
            acc2[t] = _mm512_fmadd_ps(off, _mm512_loadu_ps(x[t].s16 + 16 * s), acc2[t]);
        }
        k16_step(type, w, 0, q, scale, nb, two_chains, acc, acc2);
        k16_step(type, w, 1, q, scale, nb, two_chains, acc, acc2);
        k16_step(type, w, 2, q, scale, nb, two_chains, acc, acc2);
        k16_step(type, w, 3, q, scale, nb, two_chains, acc, acc2);
    }
    for (int t = 0; t < nb; t++) out[t] = hsum16(_mm512_add_ps(acc[t], acc2[t]));
}

/* ---- one function per type and tile width ---- */

#define SY_FUSED_TARGET AVX512
#define SY_FUSED_TABLE_FN sy_fused_kernels_avx512
#include "sy_kernels_fused_table.h"

#endif
