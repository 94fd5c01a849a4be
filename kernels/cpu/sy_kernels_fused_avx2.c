/* Fused quantized dots, AVX2 tier (AVX2 + FMA + F16C), for every quantized type and batch size (see
 * sy_kernels_internal.h).
 *
 * Each weight block is decoded to unsigned bytes in registers (Q8_0 stays signed and uses the sign trick) and
 * multiplied with up to four tokens' 8-bit activations: maddubs (unsigned x signed bytes, pairs summed to 16 bits)
 * then madd to 32 bits, exact for the ranges here (unsigned codes <= 63 or |w| <= 128, |q| <= 127). One f32 FMA
 * per 32 elements and token applies the weight scale times the activation block scale. Offsets and mins multiply
 * the activations' per-16 sums s16, so they cost one FMA per 16 groups instead of touching the elements.
 * K-quants with 16-element sub-scales (Q2_K, Q3_K, Q6_K) take the integer sub-scale in the madd. The 32-element
 * block types go eight blocks at a time, so that their scales come in one gather and cost one multiply per token. */
#include "sy_kernels_x86.h"

#if SY_KERNELS_X86

#define AVX2 SY_AVX2_TARGET
#define ALWAYS_INLINE SY_ALWAYS_INLINE
#define TILE 4
#define SY_FUSED_TILE TILE

/* Per 32-bit lane j, the sum of u[4j..4j+3] * q[4j..4j+3] (u unsigned, q signed; no pair may exceed 32767). */
AVX2 static ALWAYS_INLINE __m256i dot4_u8i8(__m256i u, __m256i q) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, q), _mm256_set1_epi16(1));
}

/* ---- 32-element blocks: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 ---- */

/* Independent FMA accumulators per token for 32-element block types, so FMA latency hides. The same number whatever
 * the batch: a token's result must not depend on how many others share the call (batch invariance, sy_kernels.h). */
static inline int chains(int nb) {
    (void)nb;
    return 2;
}

/* Lanes below count set (a maskload/gather mask). */
AVX2 static ALWAYS_INLINE __m256i lanes_below(int count) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(count), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* Blocks i0 .. i0 + count - 1 (count 8, or fewer at the end of a row) against every token.
 * w = d * u + offset per block (offset -8d, m, -16d, m); Q8_0: w = d * q, signed, by the sign trick. The eight
 * blocks' scales come in one gather (d, and m in the upper half of the same 32 bits), so each token pays one
 * multiply for the eight products d * dx and two FMAs for the offsets times the activation sums. */
AVX2 static ALWAYS_INLINE void blocks32_group(sy_dtype type, const uint8_t *w, size_t i0, const int count,
                                              const sy_qx_row *x, const int nb, __m256 (*acc)[TILE],
                                              __m256 *acc_off) {
    const int bytes = sy_blocks32_bytes(type);
    const uint8_t *g = w + i0 * (size_t)bytes;
    sy_prefetch_ahead(g, 8 * (size_t)bytes);
    const __m256i at = _mm256_setr_epi32(0, bytes, 2 * bytes, 3 * bytes, 4 * bytes, 5 * bytes, 6 * bytes, 7 * bytes);
    __m256i mask = lanes_below(count);
    /* the first 4 bytes of each block: d (and Q4_1/Q5_1's m); masked lanes are not read */
    __m256i head = count == 8 ? _mm256_i32gather_epi32((const int *)(const void *)g, at, 1)
                              : _mm256_mask_i32gather_epi32(_mm256_setzero_si256(), (const int *)(const void *)g, at,
                                                            mask, 1);
    /* low halves (d) to the lower 128 bits, high halves (m) to the upper */
    const __m256i split = _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15, 0, 1, 4, 5, 8, 9, 12,
                                           13, 2, 3, 6, 7, 10, 11, 14, 15);
    __m256i halves = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(head, split), 0xd8);
    __m256 d8 = _mm256_cvtph_ps(_mm256_castsi256_si128(halves));
    __m256 off_lo = _mm256_setzero_ps(), off_hi = _mm256_setzero_ps(); /* per 16-element group */
    if (type != SY_DTYPE_Q8_0) {
        __m256 off8 = type == SY_DTYPE_Q4_0   ? _mm256_mul_ps(d8, _mm256_set1_ps(-8.0f))
                      : type == SY_DTYPE_Q5_0 ? _mm256_mul_ps(d8, _mm256_set1_ps(-16.0f))
                                              : _mm256_cvtph_ps(_mm256_extracti128_si256(halves, 1));
        off_lo = _mm256_permutevar8x32_ps(off8, _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3));
        off_hi = _mm256_permutevar8x32_ps(off8, _mm256_setr_epi32(4, 4, 5, 5, 6, 6, 7, 7));
    }
    _Alignas(32) float scale[TILE][8];
    for (int t = 0; t < nb; t++) {
        __m256 dx = count == 8 ? _mm256_loadu_ps(x[t].d + i0) : _mm256_maskload_ps(x[t].d + i0, mask);
        _mm256_store_ps(scale[t], _mm256_mul_ps(d8, dx));
        if (type != SY_DTYPE_Q8_0) {
            const float *s16 = x[t].s16 + 2 * i0;
            __m256 lo = count == 8 ? _mm256_loadu_ps(s16) : _mm256_maskload_ps(s16, lanes_below(2 * count));
            __m256 hi = count == 8  ? _mm256_loadu_ps(s16 + 8)
                        : count > 4 ? _mm256_maskload_ps(s16 + 8, lanes_below(2 * count - 8))
                                    : _mm256_setzero_ps();
            acc_off[t] = _mm256_fmadd_ps(off_lo, lo, acc_off[t]);
            acc_off[t] = _mm256_fmadd_ps(off_hi, hi, acc_off[t]);
        }
    }
    for (int j = 0; j < count; j++) {
        const uint8_t *b = g + (size_t)j * (size_t)bytes;
        __m256i u, sign = _mm256_setzero_si256();
        if (type == SY_DTYPE_Q8_0) {
            sign = sy_load32(b + 2);
            u = _mm256_sign_epi8(sign, sign); /* |w|; -128 stays 0x80 = 128 unsigned */
        } else if (type == SY_DTYPE_Q4_0) {
            u = sy_nibbles16(b + 2);
        } else if (type == SY_DTYPE_Q4_1) {
            u = sy_nibbles16(b + 4);
        } else if (type == SY_DTYPE_Q5_0) {
            u = _mm256_or_si256(sy_nibbles16(b + 6), sy_bits_to_0x10(sy_u32_at(b + 2)));
        } else {
            u = _mm256_or_si256(sy_nibbles16(b + 8), sy_bits_to_0x10(sy_u32_at(b + 4)));
        }
        for (int t = 0; t < nb; t++) {
            __m256i q = sy_load32(x[t].q + 32 * (i0 + (size_t)j));
            if (type == SY_DTYPE_Q8_0) q = _mm256_sign_epi8(q, sign);
            __m256 f = _mm256_cvtepi32_ps(dot4_u8i8(u, q));
            /* a constant chain index keeps the accumulators in registers (the tail's loop is not unrolled) */
            int chain = count == 8 ? j % chains(nb) : 0;
            acc[chain][t] = _mm256_fmadd_ps(f, _mm256_broadcast_ss(&scale[t][j]), acc[chain][t]);
        }
    }
}

AVX2 static ALWAYS_INLINE void row_blocks32(sy_dtype type, const uint8_t *w, size_t n_blocks, const sy_qx_row *x,
                                            const int nb, float *out) {
    __m256 acc[2][TILE], acc_off[TILE];
    for (int t = 0; t < nb; t++) {
        for (int c = 0; c < chains(nb); c++) acc[c][t] = _mm256_setzero_ps();
        acc_off[t] = _mm256_setzero_ps();
    }
    size_t i0 = 0;
    for (; i0 + 8 <= n_blocks; i0 += 8) blocks32_group(type, w, i0, 8, x, nb, acc, acc_off);
    if (i0 < n_blocks) blocks32_group(type, w, i0, (int)(n_blocks - i0), x, nb, acc, acc_off);
    for (int t = 0; t < nb; t++) {
        for (int c = 1; c < chains(nb); c++) acc[0][t] = _mm256_add_ps(acc[0][t], acc[c][t]);
        out[t] = sy_hsum8(_mm256_add_ps(acc[0][t], acc_off[t]));
    }
}

/* ---- Q4_K, Q5_K: eight 32-element sub-blocks with 6-bit scale and min ---- */

/* Sub-blocks 2i and 2i + 1 (the low and high nibbles of 32 bytes) against every token; h holds Q5_K's fifth bits
 * shifted so that bits 0 and 1 of each byte are those of sub-blocks 2i and 2i + 1. */
AVX2 static ALWAYS_INLINE void k4_pair_dot(const int five, const uint8_t *qs, int i, __m256i h, const int8_t *const *q,
                                           const float (*scale)[8], const int nb, const int two_chains, __m256 *acc,
                                           __m256 *acc2) {
    const __m256i m15 = _mm256_set1_epi8(15), bit4 = _mm256_set1_epi8(0x10);
    __m256i v = sy_load32(qs + 32 * i);
    __m256i lo = _mm256_and_si256(v, m15), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m15);
    if (five) {
        /* 16-bit shifts; the mask keeps each byte's own bit */
        lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16(h, 4), bit4));
        hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_slli_epi16(h, 3), bit4));
    }
    for (int t = 0; t < nb; t++) {
        __m256 p0 = _mm256_cvtepi32_ps(dot4_u8i8(lo, sy_load32(q[t] + 64 * i)));
        __m256 p1 = _mm256_cvtepi32_ps(dot4_u8i8(hi, sy_load32(q[t] + 64 * i + 32)));
        acc[t] = _mm256_fmadd_ps(p0, _mm256_broadcast_ss(&scale[t][2 * i]), acc[t]);
        if (two_chains) {
            acc2[t] = _mm256_fmadd_ps(p1, _mm256_broadcast_ss(&scale[t][2 * i + 1]), acc2[t]);
        } else {
            acc[t] = _mm256_fmadd_ps(p1, _mm256_broadcast_ss(&scale[t][2 * i + 1]), acc[t]);
        }
    }
}

/* Each token's part of K-quant block s: where its codes start, its per-32 scales (w_scale times its block scales)
 * and the block's offsets (per 16 elements, lo and hi halves) times its per-16 sums. */
AVX2 static ALWAYS_INLINE void k_tokens(size_t s, __m256 w_scale, __m256 off_lo, __m256 off_hi, const sy_qx_row *x,
                                        const int nb, const int8_t **q, float (*scale)[8], __m256 *acc,
                                        __m256 *acc2) {
    for (int t = 0; t < nb; t++) {
        q[t] = x[t].q + 256 * s;
        _mm256_store_ps(scale[t], _mm256_mul_ps(w_scale, _mm256_loadu_ps(x[t].d + 8 * s)));
        acc[t] = _mm256_fmadd_ps(off_lo, _mm256_loadu_ps(x[t].s16 + 16 * s), acc[t]);
        acc2[t] = _mm256_fmadd_ps(off_hi, _mm256_loadu_ps(x[t].s16 + 16 * s + 8), acc2[t]);
    }
}

AVX2 static ALWAYS_INLINE void row_q4k_q5k(const int five, const uint8_t *w, size_t n_super, const sy_qx_row *x,
                                           const int nb, float *out) {
    const size_t bytes = five ? 176 : 144;
    const int two_chains = 1; /* two accumulators per token whatever the batch (batch invariance) */
    __m256 acc[TILE], acc2[TILE];
    _Alignas(32) float scale[TILE][8];
    for (int t = 0; t < nb; t++) acc[t] = acc2[t] = _mm256_setzero_ps();
    for (size_t s = 0; s < n_super; s++, w += bytes) {
        sy_prefetch_ahead(w, bytes);
        __m256 sc, mn;
        sy_k4_scales_mins(w + 4, &sc, &mn);
        __m256 dsc = _mm256_mul_ps(sc, _mm256_set1_ps(sy_f16_at(w)));
        __m256 neg_min = _mm256_mul_ps(mn, _mm256_set1_ps(-sy_f16_at(w + 2)));
        /* per 16-element group: sub-block j's min serves groups 2j and 2j + 1 */
        __m256 min_lo = _mm256_permutevar8x32_ps(neg_min, _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3));
        __m256 min_hi = _mm256_permutevar8x32_ps(neg_min, _mm256_setr_epi32(4, 4, 5, 5, 6, 6, 7, 7));
        const int8_t *q[TILE];
        k_tokens(s, dsc, min_lo, min_hi, x, nb, q, scale, acc, acc2);
        const uint8_t *qs = w + (five ? 48 : 16);
        __m256i h = five ? sy_load32(w + 16) : _mm256_setzero_si256();
        k4_pair_dot(five, qs, 0, h, q, scale, nb, two_chains, acc, acc2);
        k4_pair_dot(five, qs, 1, _mm256_srli_epi16(h, 2), q, scale, nb, two_chains, acc, acc2);
        k4_pair_dot(five, qs, 2, _mm256_srli_epi16(h, 4), q, scale, nb, two_chains, acc, acc2);
        k4_pair_dot(five, qs, 3, _mm256_srli_epi16(h, 6), q, scale, nb, two_chains, acc, acc2);
    }
    for (int t = 0; t < nb; t++) out[t] = sy_hsum8(_mm256_add_ps(acc[t], acc2[t]));
}

/* ---- Q2_K, Q3_K, Q6_K: sixteen 16-element sub-blocks with an integer scale each ---- */

/* The unsigned codes of 32-element chunk c (0..7) of a block; all chunks of a block are asked for in order.
 * Q6_K: (ql & 15 or ql >> 4) | 2 high bits << 4, w = d * sc * (u - 32); Q3_K: 2 low bits | high bit << 2,
 * w = d * sc * (u - 4); Q2_K: 2 bits, w = d * sc * u - dmin * min. */
AVX2 static ALWAYS_INLINE __m256i k16_chunk(sy_dtype type, const uint8_t *b, int c) {
    const __m256i m3 = _mm256_set1_epi8(3);
    int n = c / 4, j = c % 4;
    if (type == SY_DTYPE_Q6_K) {
        __m256i l = sy_load32(b + 64 * n + 32 * (j & 1)), h = sy_load32(b + 128 + 32 * n);
        __m256i low = j < 2 ? _mm256_and_si256(l, _mm256_set1_epi8(15))
                            : _mm256_and_si256(_mm256_srli_epi16(l, 4), _mm256_set1_epi8(15));
        /* high bits (h >> 2j) & 3 moved to bits 4-5: 16-bit shifts, the mask keeps each byte's own bits */
        __m256i high = j == 0   ? _mm256_slli_epi16(h, 4)
                       : j == 1 ? _mm256_slli_epi16(h, 2)
                       : j == 2 ? h
                                : _mm256_srli_epi16(h, 2);
        return _mm256_or_si256(low, _mm256_and_si256(high, _mm256_set1_epi8(0x30)));
    }
    __m256i qs = sy_load32(b + (type == SY_DTYPE_Q3_K ? 32 : 16) + 32 * n);
    __m256i low = _mm256_and_si256(_mm256_srli_epi16(qs, 2 * j), m3);
    if (type == SY_DTYPE_Q2_K) return low;
    /* Q3_K: bit 4n + j of hmask to bit 2 */
    int bit = 4 * n + j;
    __m256i hm = sy_load32(b);
    __m256i high = bit >= 2 ? _mm256_srli_epi16(hm, bit - 2) : _mm256_slli_epi16(hm, 2 - bit);
    return _mm256_or_si256(low, _mm256_and_si256(high, _mm256_set1_epi8(4)));
}

/* Chunk c of a block against every token: a separate function so that c is a constant (no loop to unroll). */
AVX2 static ALWAYS_INLINE void k16_chunk_dot(sy_dtype type, const uint8_t *w, int c, __m128i sc8,
                                             const int8_t *const *q, const float (*scale)[8], const int nb,
                                             const int two_chains, __m256 *acc, __m256 *acc2) {
    __m256i u = k16_chunk(type, w, c);
    /* 16-bit scales: sub-block 2c for the chunk's first 16 bytes, 2c + 1 for the rest */
    __m128i pick = _mm_set_epi64x((long long)(0x0101010101010101ull * (uint64_t)(2 * c + 1)),
                                  (long long)(0x0101010101010101ull * (uint64_t)(2 * c)));
    __m256i sc16 = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc8, pick));
    for (int t = 0; t < nb; t++) {
        __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(u, sy_load32(q[t] + 32 * c)), sc16);
        __m256 f = _mm256_cvtepi32_ps(p);
        if (two_chains && (c & 1)) {
            acc2[t] = _mm256_fmadd_ps(f, _mm256_broadcast_ss(&scale[t][c]), acc2[t]);
        } else {
            acc[t] = _mm256_fmadd_ps(f, _mm256_broadcast_ss(&scale[t][c]), acc[t]);
        }
    }
}

AVX2 static ALWAYS_INLINE void row_k16(sy_dtype type, const uint8_t *w, size_t n_super, const sy_qx_row *x,
                                       const int nb, float *out) {
    const size_t bytes = type == SY_DTYPE_Q2_K ? 84 : type == SY_DTYPE_Q3_K ? 110 : 210;
    const int two_chains = 1; /* as above */
    __m256 acc[TILE], acc2[TILE];
    _Alignas(32) float scale[TILE][8];
    for (int t = 0; t < nb; t++) acc[t] = acc2[t] = _mm256_setzero_ps();
    for (size_t s = 0; s < n_super; s++, w += bytes) {
        sy_prefetch_ahead(w, bytes);
        __m128i sc8; /* 16 signed sub-scales */
        float d;
        __m256 off_lo, off_hi; /* per 16-element group: the weight offset */
        if (type == SY_DTYPE_Q6_K) {
            d = sy_f16_at(w + 208);
            sc8 = _mm_loadu_si128((const __m128i *)(const void *)(w + 192));
        } else if (type == SY_DTYPE_Q3_K) {
            d = sy_f16_at(w + 108);
            sc8 = sy_q3k_scales(w + 96);
        } else {
            d = sy_f16_at(w + 80);
            sc8 = _mm_and_si128(_mm_loadu_si128((const __m128i *)(const void *)w), _mm_set1_epi8(15));
        }
        if (type == SY_DTYPE_Q2_K) {
            __m128i mins = _mm_and_si128(_mm_srli_epi16(_mm_loadu_si128((const __m128i *)(const void *)w), 4),
                                         _mm_set1_epi8(15));
            __m256 neg_dmin = _mm256_set1_ps(-sy_f16_at(w + 82));
            off_lo = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(mins)), neg_dmin);
            off_hi = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(mins, 8))), neg_dmin);
        } else {
            __m256 bias = _mm256_set1_ps((type == SY_DTYPE_Q6_K ? -32.0f : -4.0f) * d);
            off_lo = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc8)), bias);
            off_hi = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(sc8, 8))), bias);
        }
        const int8_t *q[TILE];
        k_tokens(s, _mm256_set1_ps(d), off_lo, off_hi, x, nb, q, scale, acc, acc2);
        k16_chunk_dot(type, w, 0, sc8, q, scale, nb, two_chains, acc, acc2);
        k16_chunk_dot(type, w, 1, sc8, q, scale, nb, two_chains, acc, acc2);
        k16_chunk_dot(type, w, 2, sc8, q, scale, nb, two_chains, acc, acc2);
        k16_chunk_dot(type, w, 3, sc8, q, scale, nb, two_chains, acc, acc2);
        k16_chunk_dot(type, w, 4, sc8, q, scale, nb, two_chains, acc, acc2);
        k16_chunk_dot(type, w, 5, sc8, q, scale, nb, two_chains, acc, acc2);
        k16_chunk_dot(type, w, 6, sc8, q, scale, nb, two_chains, acc, acc2);
        k16_chunk_dot(type, w, 7, sc8, q, scale, nb, two_chains, acc, acc2);
    }
    for (int t = 0; t < nb; t++) out[t] = sy_hsum8(_mm256_add_ps(acc[t], acc2[t]));
}

/* The K-quants' entry, as sy_kernels_fused_table.h calls it. */
AVX2 static ALWAYS_INLINE void row_kquant(sy_dtype type, const uint8_t *w, size_t n_super, const sy_qx_row *x,
                                          const int nb, float *out) {
    if (type == SY_DTYPE_Q4_K || type == SY_DTYPE_Q5_K) {
        row_q4k_q5k(type == SY_DTYPE_Q5_K, w, n_super, x, nb, out);
    } else {
        row_k16(type, w, n_super, x, nb, out);
    }
}

/* ---- one function per type and tile width ---- */

#define SY_FUSED_TARGET AVX2
#define SY_FUSED_TABLE_FN sy_fused_kernels_avx2
#include "sy_kernels_fused_table.h"

#endif
