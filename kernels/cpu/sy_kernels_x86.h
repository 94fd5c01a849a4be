/* Small helpers the x86 tiers share (sy_kernels_avx2.c, sy_kernels_avx512.c, sy_kernels_bf16_avx512.c and the
 * fused kernels). Most carry the AVX2 target, a subset of the AVX-512 tier's, so either tier's functions inline
 * them; the K-quant scale decoders serve both fused tiers; the AVX-512 ones are marked. */
#ifndef SY_KERNELS_X86_H
#define SY_KERNELS_X86_H

#include "sy_kernels_internal.h"

#if SY_KERNELS_X86

#include <immintrin.h>

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

#endif
#endif
