/* Small helpers the x86 tiers share (sy_kernels_avx2.c, sy_kernels_avx512.c, sy_kernels_bf16_avx512.c and the
 * fused kernels). Most carry the AVX2 target, a subset of the AVX-512 tier's, so either tier's functions inline
 * them; the K-quant scale decoders serve both fused tiers; the AVX-512 ones are marked. */
#ifndef SY_KERNELS_X86_H
#define SY_KERNELS_X86_H

#include "sy_kernels_internal.h"

#if SY_KERNELS_X86

#include <immintrin.h>
#include <math.h>

#define SY_AVX2_TARGET __attribute__((target("avx2,fma,f16c")))
#define SY_ALWAYS_INLINE __attribute__((always_inline)) inline

/* The sum of a vector's eight lanes: (i + 4), then (i + 2), then (i + 1). */
SY_AVX2_TARGET static SY_ALWAYS_INLINE float sy_hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* A little-endian f16 at any address, as f32. */
SY_AVX2_TARGET static SY_ALWAYS_INLINE float sy_f16_at(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

/* A little-endian u32 at any address (x86 is little-endian, like the files). */
static inline uint32_t sy_u32_at(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

SY_AVX2_TARGET static SY_ALWAYS_INLINE __m256i sy_load32(const void *p) {
    return _mm256_loadu_si256((const __m256i *)p);
}

/* The 32 nibbles of 16 bytes in element order: low nibbles, then high nibbles. */
SY_AVX2_TARGET static SY_ALWAYS_INLINE __m256i sy_nibbles16(const uint8_t *p) {
    __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)p));
    return _mm256_and_si256(_mm256_srlv_epi64(v, _mm256_setr_epi64x(0, 0, 4, 4)), _mm256_set1_epi8(15));
}

/* Byte i = 0x10 when bit i of bits is set, else 0 (the fifth bit of Q5_0/Q5_1). */
SY_AVX2_TARGET static SY_ALWAYS_INLINE __m256i sy_bits_to_0x10(uint32_t bits) {
    const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2,
                                            3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), spread);
    v = _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x10));
}

/* Bytes per block of the 32-element block types (sy_dtype_get()->block_bytes, as a constant the kernels fold). */
static inline int sy_blocks32_bytes(sy_dtype type) {
    return type == SY_DTYPE_Q4_0   ? 18
           : type == SY_DTYPE_Q4_1 ? 20
           : type == SY_DTYPE_Q5_0 ? 22
           : type == SY_DTYPE_Q5_1 ? 24
                                   : 34;
}

/* The 8 scales and 8 mins of a Q4_K/Q5_K block's 12 scale bytes, as floats. */
SY_AVX2_TARGET static SY_ALWAYS_INLINE void sy_k4_scales_mins(const uint8_t *s, __m256 *scales, __m256 *mins) {
    uint32_t w0 = sy_u32_at(s), w1 = sy_u32_at(s + 4), w2 = sy_u32_at(s + 8);
    uint32_t sc_lo = w0 & 0x3f3f3f3fu, mn_lo = w1 & 0x3f3f3f3fu;
    uint32_t sc_hi = (w2 & 0x0f0f0f0fu) | ((w0 >> 2) & 0x30303030u);
    uint32_t mn_hi = ((w2 >> 4) & 0x0f0f0f0fu) | ((w1 >> 2) & 0x30303030u);
    __m128i v = _mm_set_epi32((int)mn_hi, (int)mn_lo, (int)sc_hi, (int)sc_lo);
    *scales = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v));
    *mins = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(v, 8)));
}

/* 16 signed 6-bit Q3_K scales (already minus 32) from its 12 scale bytes. */
static inline __m128i sy_q3k_scales(const uint8_t *s) {
    uint32_t w0 = sy_u32_at(s), w1 = sy_u32_at(s + 4), w2 = sy_u32_at(s + 8);
    uint32_t lo[4] = {w0 & 0x0f0f0f0fu, w1 & 0x0f0f0f0fu, (w0 >> 4) & 0x0f0f0f0fu, (w1 >> 4) & 0x0f0f0f0fu};
    for (int k = 0; k < 4; k++) lo[k] |= ((w2 >> (2 * k)) & 0x03030303u) << 4;
    __m128i v = _mm_set_epi32((int)lo[3], (int)lo[2], (int)lo[1], (int)lo[0]);
    return _mm_sub_epi8(v, _mm_set1_epi8(32));
}

/* sy_expf on four doubles widened from floats: the same operations, so the same bits (the table by a gather). */
SY_AVX2_TARGET static SY_ALWAYS_INLINE __m128 sy_expf4_pd(__m128 x) {
    const __m256d shift = _mm256_set1_pd(SY_EXPF_SHIFT);
    const __m256d invln2 = _mm256_set1_pd(SY_EXPF_INVLN2_32), xd = _mm256_cvtps_pd(x);
    __m256d kd = _mm256_add_pd(_mm256_mul_pd(invln2, xd), shift);
    __m256i ki = _mm256_castpd_si256(kd);
    kd = _mm256_sub_pd(kd, shift);
    __m256d r = _mm256_fmsub_pd(invln2, xd, kd);
    __m256i t = _mm256_i64gather_epi64((const long long *)(const void *)sy_expf_table,
                                       _mm256_and_si256(ki, _mm256_set1_epi64x(31)), 8);
    __m256d scale = _mm256_castsi256_pd(_mm256_add_epi64(t, _mm256_slli_epi64(ki, 47)));
    __m256d p = _mm256_fmadd_pd(_mm256_set1_pd(SY_EXPF_C0), r, _mm256_set1_pd(SY_EXPF_C1));
    __m256d r2 = _mm256_mul_pd(r, r);
    __m256d y = _mm256_fmadd_pd(_mm256_set1_pd(SY_EXPF_C2), r, _mm256_set1_pd(1.0));
    y = _mm256_fmadd_pd(p, r2, y);
    return _mm256_cvtpd_ps(_mm256_mul_pd(y, scale));
}

/* sy_expf on eight floats, the special cases by masks. */
SY_AVX2_TARGET static SY_ALWAYS_INLINE __m256 sy_expf8(__m256 x) {
    __m256 y = _mm256_set_m128(sy_expf4_pd(_mm256_extractf128_ps(x, 1)), sy_expf4_pd(_mm256_castps256_ps128(x)));
    y = _mm256_andnot_ps(_mm256_cmp_ps(x, _mm256_set1_ps(SY_EXPF_UNDER), _CMP_LT_OQ), y);
    y = _mm256_blendv_ps(y, _mm256_set1_ps(INFINITY), _mm256_cmp_ps(x, _mm256_set1_ps(SY_EXPF_OVER), _CMP_GT_OQ));
    return _mm256_blendv_ps(y, _mm256_add_ps(x, x), _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

/* The AVX-512 helpers (the AVX-512 tier's files only): their target is a subset of every AVX-512 file's. */
#define SY_AVX512_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma")))

/* Sixteen accumulators to one vector of their sums: lane 4c + q holds the sum of a[4q + c]. Each sum adds lane j
 * and j + 8, then j + 4, j + 2, j + 1 (the tree of _mm512_reduce_add_ps), and never mixes two accumulators, so an
 * accumulator's sum has the same bits whichever others share the call (unused ones are zero). */
SY_AVX512_TARGET static SY_ALWAYS_INLINE __m512 sy_reduce16(const __m512 a[16]) {
    __m512 s[8], u[4], w[2];
    for (int i = 0; i < 8; i++)
        s[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    for (int i = 0; i < 4; i++)
        u[i] = _mm512_add_ps(_mm512_shuffle_f32x4(s[2 * i], s[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_f32x4(s[2 * i], s[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    for (int i = 0; i < 2; i++)
        w[i] = _mm512_add_ps(_mm512_shuffle_ps(u[2 * i], u[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_ps(u[2 * i], u[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    return _mm512_add_ps(_mm512_shuffle_ps(w[0], w[1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_ps(w[0], w[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

/* sy_expf on eight doubles widened from floats: the same operations, so the same bits (the table by two
 * two-source permutes). */
SY_AVX512_TARGET static SY_ALWAYS_INLINE __m256 sy_expf8_pd(__m256 x, const __m512i tab[4]) {
    const __m512d shift = _mm512_set1_pd(SY_EXPF_SHIFT);
    const __m512d invln2 = _mm512_set1_pd(SY_EXPF_INVLN2_32), xd = _mm512_cvtps_pd(x);
    __m512d kd = _mm512_add_pd(_mm512_mul_pd(invln2, xd), shift);
    __m512i ki = _mm512_castpd_si512(kd);
    kd = _mm512_sub_pd(kd, shift);
    __m512d r = _mm512_fmsub_pd(invln2, xd, kd);
    __m512i lo = _mm512_permutex2var_epi64(tab[0], ki, tab[1]), hi = _mm512_permutex2var_epi64(tab[2], ki, tab[3]);
    __m512i t = _mm512_mask_blend_epi64(_mm512_test_epi64_mask(ki, _mm512_set1_epi64(16)), lo, hi);
    __m512d scale = _mm512_castsi512_pd(_mm512_add_epi64(t, _mm512_slli_epi64(ki, 47)));
    __m512d p = _mm512_fmadd_pd(_mm512_set1_pd(SY_EXPF_C0), r, _mm512_set1_pd(SY_EXPF_C1));
    __m512d r2 = _mm512_mul_pd(r, r);
    __m512d y = _mm512_fmadd_pd(_mm512_set1_pd(SY_EXPF_C2), r, _mm512_set1_pd(1.0));
    y = _mm512_fmadd_pd(p, r2, y);
    return _mm512_cvtpd_ps(_mm512_mul_pd(y, scale));
}

/* The table as four vectors, for sy_expf16. */
SY_AVX512_TARGET static SY_ALWAYS_INLINE void sy_expf_table_load(__m512i tab[4]) {
    for (int i = 0; i < 4; i++) tab[i] = _mm512_loadu_si512((const void *)(sy_expf_table + 8 * i));
}

/* sy_expf on sixteen floats, the special cases by masks. */
SY_AVX512_TARGET static SY_ALWAYS_INLINE __m512 sy_expf16(__m512 x, const __m512i tab[4]) {
    __m256 lo = sy_expf8_pd(_mm512_castps512_ps256(x), tab);
    __m256 hi = sy_expf8_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)), tab);
    __m512 y = _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(lo)), _mm256_castps_pd(hi), 1));
    y = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(SY_EXPF_UNDER), _CMP_NLT_UQ), y);
    y = _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, _mm512_set1_ps(SY_EXPF_OVER), _CMP_GT_OQ), _mm512_set1_ps(INFINITY));
    return _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), _mm512_add_ps(x, x));
}

#endif
#endif
