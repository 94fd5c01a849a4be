/* Fused quantized dots, AVX-512 tier (F, BW, VL, VNNI), for every batch size (see sy_kernels_internal.h and
 * sy_kernels_fused_avx2.c for the scheme).
 *
 * vpdpbusd multiplies unsigned weight codes by signed activation bytes and sums each four into 32 bits in one
 * instruction. The 32-element block types take sixteen blocks at a time, one block per 32-bit lane (see
 * blocks32_decode), up to eight tokens per pass over the weights (more in a batch: see panel); the K-quants take
 * 64 elements of a 256-element block at a time, with the per-lane f32 scales picked by one permute per token, four
 * tokens per pass. Reading ahead: see sy_prefetch_ahead. */
#include "sy_kernels_x86.h"

#if SY_KERNELS_X86

#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))
#define ALWAYS_INLINE __attribute__((always_inline)) inline
#define TILE 8
#define SY_FUSED_TILE TILE

AVX512 static ALWAYS_INLINE float hsum16(__m512 v) {
    __m256 high = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)); /* AVX512F, not DQ */
    return sy_hsum8(_mm256_add_ps(_mm512_castps512_ps256(v), high));
}

/* out[t] = hsum16(acc[t]) for t < nb, bit for bit: eight vectors at once through a tree that packs two tokens per
 * vector at every step and adds the same lanes in the same order (i + 8, then i + 4, i + 2, i + 1), so a token's
 * result does not depend on the others in its tile (batch invariance) but costs about a third as much. */
AVX512 static ALWAYS_INLINE void hsum16_tokens(const __m512 *acc, const int nb, float *out) {
    if (nb <= 2) {
        for (int t = 0; t < nb; t++) out[t] = hsum16(acc[t]);
        return;
    }
    __m512 a[8], s[4], u[2];
    for (int t = 0; t < 8; t++) a[t] = t < nb ? acc[t] : _mm512_setzero_ps();
    for (int i = 0; i < 4; i++) /* lanes 0-7: token 2i's lane j + lane j + 8; lanes 8-15: token 2i + 1's */
        s[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    for (int i = 0; i < 2; i++) /* 128-bit chunk c: token 4i + c's lane j + lane j + 4 */
        u[i] = _mm512_add_ps(_mm512_shuffle_f32x4(s[2 * i], s[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_f32x4(s[2 * i], s[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    /* chunk c: lanes 0, 1 of token c, lanes 2, 3 of token 4 + c (j + j + 2); then lane pairs */
    __m512 w = _mm512_add_ps(_mm512_shuffle_ps(u[0], u[1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_ps(u[0], u[1], _MM_SHUFFLE(3, 2, 3, 2)));
    __m512 r = _mm512_add_ps(w, _mm512_movehdup_ps(w));
    _Alignas(64) float lanes[16];
    _mm512_store_ps(lanes, r);
    for (int t = 0; t < nb; t++) out[t] = lanes[t < 4 ? 4 * t : 4 * (t - 4) + 2];
}

AVX512 static ALWAYS_INLINE __m512i load64(const void *p) { return _mm512_loadu_si512(p); }
/* 32 bytes into both halves of a 512-bit vector (a load-port broadcast). */
AVX512 static ALWAYS_INLINE __m512i load32x2(const void *p) {
    return _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)p));
}

/* ---- the common core: sixteen blocks of 32 at a time, one block per 32-bit lane ----
 *
 * A group's codes are decoded two blocks of 32 to a vector (in element order), then transposed so that vector c
 * holds the four codes c of every block, which meet the activations' interleaved copy (sy_qx_row.qi) in eight
 * vpdpbusd. Each lane then holds its block's exact integer dot product, and each token pays one convert, one multiply
 * and one FMA per sixteen blocks for the scales (two of each where a block has two scales, as the K-quants with
 * sub-blocks of 16 have): the per-token work is little more than the eight vpdpbusd, while decoding and transposing
 * are shared by the tile. The K-quants take two 256-element blocks per group. */

/* v[p] holds blocks 2p and 2p + 1, eight 32-bit lanes each; afterwards v[c] holds lane c of block l in lane l. Three
 * rounds of two-source permutes, each trading one bit of the vector index for one of the lane index. */
AVX512 static ALWAYS_INLINE void transpose_blocks16(__m512i v[8]) {
    const __m512i r1a = _mm512_setr_epi32(0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30);
    const __m512i r1b = _mm512_setr_epi32(1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31);
    const __m512i r2a = _mm512_setr_epi32(0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29);
    const __m512i r2b = _mm512_setr_epi32(2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31);
    const __m512i r3a = _mm512_setr_epi32(0, 8, 1, 9, 2, 10, 3, 11, 16, 24, 17, 25, 18, 26, 19, 27);
    const __m512i r3b = _mm512_setr_epi32(4, 12, 5, 13, 6, 14, 7, 15, 20, 28, 21, 29, 22, 30, 23, 31);
    __m512i t[8];
    for (int m = 0; m < 4; m++) {
        t[2 * m] = _mm512_permutex2var_epi32(v[2 * m], r1a, v[2 * m + 1]);
        t[2 * m + 1] = _mm512_permutex2var_epi32(v[2 * m], r1b, v[2 * m + 1]);
    }
    for (int h = 0; h < 2; h++)
        for (int c0 = 0; c0 < 2; c0++) {
            v[4 * h + c0] = _mm512_permutex2var_epi32(t[4 * h + c0], r2a, t[4 * h + 2 + c0]);
            v[4 * h + 2 + c0] = _mm512_permutex2var_epi32(t[4 * h + c0], r2b, t[4 * h + 2 + c0]);
        }
    for (int j = 0; j < 4; j++) {
        t[j] = _mm512_permutex2var_epi32(v[j], r3a, v[4 + j]);
        t[4 + j] = _mm512_permutex2var_epi32(v[j], r3b, v[4 + j]);
    }
    for (int c = 0; c < 8; c++) v[c] = t[c];
}

/* How a group's weights turn codes into values, per lane (block of 32) unless said otherwise. */
typedef struct group_scales {
    __m512 scale;    /* w = scale * code ... (split: of the block's first 16 elements) */
    __m512 scale_hi; /* split: of its last 16 */
    __m512 min;      /* ... + min (with_min), times the token's block scale and block sum */
    __m512 off16[2]; /* ... + off16 per 16 elements in element order, one vector per 256 (n_off16 of them) */
} group_scales;

/* One group of a row, decoded: its transposed codes and scales, as group_dot takes them. */
typedef struct decoded_group {
    __m512i v[8];
    group_scales gs;
    int count;   /* live lanes: blocks of 32, or the 32-element sub-blocks of the 256-element blocks */
    int n_off16; /* vectors of gs.off16 in use */
} decoded_group;

/* Group gi's transposed codes v against every token. shift: the codes' integer offset, w = scale * (code -
 * 2^shift) (0: none), started in the integer sums from the activations' block sums. */
AVX512 static ALWAYS_INLINE void group_dot(const __m512i v[8], const group_scales *gs, const int split, const int shift,
                                           const int with_min, const int n_off16, size_t gi, const int count,
                                           const sy_qx_row *x, const int nb, __m512 *acc) {
    const __mmask16 live = (__mmask16)(count == 16 ? 0xffffu : (1u << count) - 1u);
    for (int t = 0; t < nb; t++) {
        const int8_t *qi = x[t].qi + gi * 512;
        const __m512 dx = count == 16 ? _mm512_loadu_ps(x[t].d + gi * 16) : _mm512_maskz_loadu_ps(live, x[t].d + gi * 16);
        const __m512i nsum = _mm512_loadu_si512(x[t].nsum + gi * 16); /* zero past the row's blocks */
        /* two integer chains per sum: exact, so how they are split cannot change a result */
        __m512i s0 = shift ? _mm512_slli_epi32(nsum, (unsigned)shift) : _mm512_setzero_si512();
        __m512i s1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), v[1], load64(qi + 64));
        s0 = _mm512_dpbusd_epi32(s0, v[0], load64(qi));
        s0 = _mm512_dpbusd_epi32(s0, v[2], load64(qi + 128));
        s1 = _mm512_dpbusd_epi32(s1, v[3], load64(qi + 192));
        if (split) {
            __m512i h0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), v[4], load64(qi + 256));
            __m512i h1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), v[5], load64(qi + 320));
            h0 = _mm512_dpbusd_epi32(h0, v[6], load64(qi + 384));
            h1 = _mm512_dpbusd_epi32(h1, v[7], load64(qi + 448));
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1)), _mm512_mul_ps(gs->scale, dx), acc[t]);
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(h0, h1)), _mm512_mul_ps(gs->scale_hi, dx),
                                     acc[t]);
        } else {
            s0 = _mm512_dpbusd_epi32(s0, v[4], load64(qi + 256));
            s1 = _mm512_dpbusd_epi32(s1, v[5], load64(qi + 320));
            s0 = _mm512_dpbusd_epi32(s0, v[6], load64(qi + 384));
            s1 = _mm512_dpbusd_epi32(s1, v[7], load64(qi + 448));
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1)), _mm512_mul_ps(gs->scale, dx), acc[t]);
        }
        /* min * dx * sum(q), the block sum being -nsum */
        if (with_min) acc[t] = _mm512_fnmadd_ps(gs->min, _mm512_mul_ps(dx, _mm512_cvtepi32_ps(nsum)), acc[t]);
        /* s16 holds dx * sum(q) per 16 elements, in element order, 16 per 256 */
        for (int o = 0; o < n_off16; o++)
            acc[t] = _mm512_fmadd_ps(gs->off16[o], _mm512_loadu_ps(x[t].s16 + gi * 32 + 16 * (size_t)o), acc[t]);
    }
}

/* ---- 32-element blocks: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 ----
 * The integer offsets (-8, -16; Q8_0's codes are biased by +128 to be unsigned) start the integer sums; Q4_1 and
 * Q5_1 add m * dx * sum(q) in floating point. */

/* log2 of minus the weights' integer offset (w = d * (u - offset)); 0: none */
static inline int blocks32_offset_shift(sy_dtype type) {
    return type == SY_DTYPE_Q4_0 ? 3 : type == SY_DTYPE_Q5_0 ? 4 : type == SY_DTYPE_Q8_0 ? 7 : 0;
}

/* The unsigned codes of block a in the lower half and of block b (the next one) in the upper half, in element
 * order; with pair 0 only block a, the upper half zero and b not read. */
AVX512 static ALWAYS_INLINE __m512i blocks32_codes(sy_dtype type, const uint8_t *a, const uint8_t *b, const int pair) {
    if (type == SY_DTYPE_Q8_0) {
        __m512i w = pair ? _mm512_inserti64x4(_mm512_castsi256_si512(sy_load32(a + 2)), sy_load32(b + 2), 1)
                         : _mm512_zextsi256_si512(sy_load32(a + 2));
        return _mm512_xor_si512(w, _mm512_set1_epi8((char)0x80)); /* q + 128 */
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
        __mmask64 high = (__mmask64)sy_u32_at(a + qh) | (pair ? (__mmask64)sy_u32_at(b + qh) << 32 : 0);
        u = _mm512_mask_add_epi8(u, high, u, _mm512_set1_epi8(0x10));
    }
    return u;
}

/* Blocks 16 gi .. 16 gi + count - 1 (count 16, or fewer at the end of a row) of the row at w, decoded. */
AVX512 static ALWAYS_INLINE void blocks32_decode(sy_dtype type, const uint8_t *w, size_t gi, const int count,
                                                 decoded_group *d) {
    const int bytes = sy_blocks32_bytes(type);
    const uint8_t *g = w + gi * 16 * (size_t)bytes;
    sy_prefetch_ahead(g, 16 * (size_t)bytes);
    const __mmask16 live = (__mmask16)(count == 16 ? 0xffffu : (1u << count) - 1u);
    const __m512i at = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                          _mm512_set1_epi32(bytes));
    /* the first 4 bytes of each block: d (and Q4_1/Q5_1's m); lanes past count are zero and not read */
    __m512i head = count == 16 ? _mm512_i32gather_epi32(at, (const void *)g, 1)
                               : _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), live, at, (const void *)g, 1);
    const int with_min = type == SY_DTYPE_Q4_1 || type == SY_DTYPE_Q5_1;
    d->gs.scale = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(head));
    d->gs.min = with_min ? _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(head, 16))) : d->gs.scale;
    for (int p = 0; p < 8; p++) {
        if (2 * p + 1 < count) {
            d->v[p] = blocks32_codes(type, g + 2 * p * bytes, g + (2 * p + 1) * bytes, 1);
        } else if (2 * p < count) {
            d->v[p] = blocks32_codes(type, g + 2 * p * bytes, NULL, 0);
        } else {
            d->v[p] = _mm512_setzero_si512();
        }
    }
    transpose_blocks16(d->v);
    d->count = count;
    d->n_off16 = 0;
}

/* ---- K-quants: 256-element blocks, two per group ---- */

/* Q4_K/Q5_K sub-blocks 2i, 2i + 1 (elements 64i .. 64i + 63) of the block at b, in element order: low nibbles of
 * 32 bytes, then their high nibbles; Q5_K's fifth bits are bits 2i and 2i + 1 of qh. */
AVX512 static ALWAYS_INLINE __m512i k4_codes(const int five, const uint8_t *b, int i) {
    const uint8_t *qs = b + (five ? 48 : 16);
    __m512i u = _mm512_and_si512(_mm512_srlv_epi64(load32x2(qs + 32 * i), _mm512_setr_epi64(0, 0, 0, 0, 4, 4, 4, 4)),
                                 _mm512_set1_epi8(15));
    if (five) {
        __m512i bits = _mm512_inserti64x4(_mm512_set1_epi8((char)(1 << (2 * i))),
                                          _mm256_set1_epi8((char)(2 << (2 * i))), 1);
        u = _mm512_mask_add_epi8(u, _mm512_test_epi8_mask(load32x2(b + 16), bits), u, _mm512_set1_epi8(0x10));
    }
    return u;
}

/* lo in lanes 0-7, hi in 8-15 (AVX512F, not DQ) */
AVX512 static ALWAYS_INLINE __m512 join8(__m256 lo, __m256 hi) {
    return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(lo)), _mm256_castps_pd(hi), 1));
}

/* Blocks 2 gi and (pair) 2 gi + 1, decoded: w = d * sc * u - dmin * m per sub-block of 32. */
AVX512 static ALWAYS_INLINE void q4k_q5k_decode(const int five, const uint8_t *w, size_t gi, const int pair,
                                                decoded_group *d) {
    const size_t bytes = five ? 176 : 144;
    const uint8_t *b0 = w + 2 * gi * bytes, *b1 = b0 + bytes;
    sy_prefetch_ahead(b0, (pair ? 2 : 1) * bytes);
    __m256 sc[2], mn[2], dsc[2], dmn[2];
    for (int h = 0; h < 2; h++) {
        if (h == 1 && !pair) {
            dsc[1] = dmn[1] = _mm256_setzero_ps();
            for (int i = 0; i < 4; i++) d->v[4 + i] = _mm512_setzero_si512();
            break;
        }
        const uint8_t *b = h ? b1 : b0;
        sy_k4_scales_mins(b + 4, &sc[h], &mn[h]);
        dsc[h] = _mm256_mul_ps(sc[h], _mm256_set1_ps(sy_f16_at(b)));
        dmn[h] = _mm256_mul_ps(mn[h], _mm256_set1_ps(-sy_f16_at(b + 2)));
        for (int i = 0; i < 4; i++) d->v[4 * h + i] = k4_codes(five, b, i);
    }
    d->gs.scale = join8(dsc[0], dsc[1]);
    d->gs.min = join8(dmn[0], dmn[1]);
    transpose_blocks16(d->v);
    d->count = pair ? 16 : 8;
    d->n_off16 = 0;
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

/* A Q2_K/Q3_K/Q6_K block's 16 scales d * sc and offsets per sub-block of 16, in element order. */
AVX512 static ALWAYS_INLINE void k16_scales(sy_dtype type, const uint8_t *w, __m512 *dsc, __m512 *off) {
    if (type == SY_DTYPE_Q2_K) {
        __m128i raw = _mm_loadu_si128((const __m128i *)(const void *)w);
        __m512 sc = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(raw, _mm_set1_epi8(15))));
        __m512 mn = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(raw, 4), _mm_set1_epi8(15))));
        *dsc = _mm512_mul_ps(sc, _mm512_set1_ps(sy_f16_at(w + 80)));
        *off = _mm512_mul_ps(mn, _mm512_set1_ps(-sy_f16_at(w + 82)));
    } else {
        int six = type == SY_DTYPE_Q6_K;
        __m128i sc8 = six ? _mm_loadu_si128((const __m128i *)(const void *)(w + 192)) : sy_q3k_scales(w + 96);
        *dsc = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(sc8)),
                             _mm512_set1_ps(sy_f16_at(w + (six ? 208 : 108))));
        *off = _mm512_mul_ps(*dsc, _mm512_set1_ps(six ? -32.0f : -4.0f));
    }
}

/* Blocks 2 gi and (pair) 2 gi + 1, decoded: two scales per lane (the sub-blocks of 16), offsets per 16 in element
 * order. */
AVX512 static ALWAYS_INLINE void k16_decode(sy_dtype type, const uint8_t *w, size_t gi, const int pair,
                                            decoded_group *d) {
    const size_t bytes = type == SY_DTYPE_Q2_K ? 84 : type == SY_DTYPE_Q3_K ? 110 : 210;
    const uint8_t *b0 = w + 2 * gi * bytes, *b1 = b0 + bytes;
    sy_prefetch_ahead(b0, (pair ? 2 : 1) * bytes);
    __m512 dsc[2];
    k16_scales(type, b0, &dsc[0], &d->gs.off16[0]);
    for (int i = 0; i < 4; i++) d->v[i] = k16_codes(type, b0, i);
    if (pair) {
        k16_scales(type, b1, &dsc[1], &d->gs.off16[1]);
        for (int i = 0; i < 4; i++) d->v[4 + i] = k16_codes(type, b1, i);
    } else {
        dsc[1] = d->gs.off16[1] = _mm512_setzero_ps();
        for (int i = 0; i < 4; i++) d->v[4 + i] = _mm512_setzero_si512();
    }
    /* lane l: block l / 8's sub-blocks 2 (l % 8) and 2 (l % 8) + 1 */
    d->gs.scale = _mm512_permutex2var_ps(
        dsc[0], _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30), dsc[1]);
    d->gs.scale_hi = _mm512_permutex2var_ps(
        dsc[0], _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31), dsc[1]);
    d->gs.min = d->gs.scale;
    transpose_blocks16(d->v);
    d->count = pair ? 16 : 8;
    d->n_off16 = pair ? 2 : 1;
}

/* ---- every type: a row's groups, decoded one at a time ---- */

static inline int fused_kquant(sy_dtype type) { return type >= SY_DTYPE_Q2_K && type <= SY_DTYPE_Q6_K; }
/* two integer sums per lane (sub-blocks of 16 with their own scales) */
static inline int fused_split(sy_dtype type) {
    return type == SY_DTYPE_Q2_K || type == SY_DTYPE_Q3_K || type == SY_DTYPE_Q6_K;
}
static inline int fused_with_min(sy_dtype type) {
    return type == SY_DTYPE_Q4_1 || type == SY_DTYPE_Q5_1 || type == SY_DTYPE_Q4_K || type == SY_DTYPE_Q5_K;
}
/* groups in a row of n blocks (n 256-element blocks for the K-quants, two per group; else 16 per group) */
static inline size_t fused_groups(sy_dtype type, size_t n) { return fused_kquant(type) ? (n + 1) / 2 : (n + 15) / 16; }

/* Group gi of a row of n blocks, decoded; full (a constant where it is inlined): every lane of the group is live,
 * so the row kernels' main loop has no masks. */
AVX512 static ALWAYS_INLINE void decode_group_in(sy_dtype type, const uint8_t *w, size_t n, size_t gi, const int full,
                                                 decoded_group *d) {
    if (type == SY_DTYPE_Q4_K || type == SY_DTYPE_Q5_K) {
        q4k_q5k_decode(type == SY_DTYPE_Q5_K, w, gi, full ? 1 : 2 * gi + 2 <= n, d);
    } else if (fused_kquant(type)) {
        k16_decode(type, w, gi, full ? 1 : 2 * gi + 2 <= n, d);
    } else {
        blocks32_decode(type, w, gi, full ? 16 : n - 16 * gi >= 16 ? 16 : (int)(n - 16 * gi), d);
    }
}

AVX512 static ALWAYS_INLINE void decode_group(sy_dtype type, const uint8_t *w, size_t n, size_t gi, decoded_group *d) {
    decode_group_in(type, w, n, gi, 0, d);
}

/* groups of a row of n blocks with every lane live */
static inline size_t fused_full_groups(sy_dtype type, size_t n) { return fused_kquant(type) ? n / 2 : n / 16; }

AVX512 static ALWAYS_INLINE void row_group(sy_dtype type, const uint8_t *w, size_t n, size_t gi, const int full,
                                           const sy_qx_row *x, const int nb, __m512 *acc) {
    decoded_group d;
    decode_group_in(type, w, n, gi, full, &d);
    group_dot(d.v, &d.gs, fused_split(type), blocks32_offset_shift(type), fused_with_min(type),
              full ? (fused_split(type) ? 2 : 0) : d.n_off16, gi, full ? 16 : d.count, x, nb, acc);
}

/* A row of n blocks against up to TILE tokens. */
AVX512 static ALWAYS_INLINE void row_fused(sy_dtype type, const uint8_t *w, size_t n, const sy_qx_row *x,
                                           const int nb, float *out) {
    __m512 acc[TILE];
    for (int t = 0; t < nb; t++) acc[t] = _mm512_setzero_ps();
    const size_t full = fused_full_groups(type, n);
    for (size_t gi = 0; gi < full; gi++) row_group(type, w, n, gi, 1, x, nb, acc);
    if (full < fused_groups(type, n)) row_group(type, w, n, full, 0, x, nb, acc);
    hsum16_tokens(acc, nb, out);
}
#define row_blocks32 row_fused
#define row_kquant row_fused

/* ---- prefill: a panel of rows decoded once, then met by every token of the batch ----
 *
 * The row kernels above decode and transpose a row's groups again for every tile of eight tokens, which costs about
 * as much as the products themselves. Here PANEL_ROWS rows are decoded once into a buffer, and tiles of PANEL_TOKENS
 * tokens meet them group by group: each activation vector is loaded once for all the panel's rows and each weight
 * vector once for all the tile's tokens. Every (row, token) pair runs group_dot's arithmetic in group_dot's order
 * (exact integer sums, then the same float operations), so its result has the row kernels' bits: batch invariance
 * holds whichever path a call takes. The tokens go in blocks whose activations stay in L2. */
#define PANEL_ROWS 3
#define PANEL_TOKENS 4
#define PANEL_MAX_GROUPS 40               /* 20480 elements of Q8_0 and the K-quants: 105 KiB of decoded rows */
#define PANEL_X_BYTES ((size_t)256 << 10) /* activations per token block */

AVX512 static ALWAYS_INLINE void panel_dot(const int split, const int shift, const int with_min,
                                           const decoded_group *const *d, size_t gi, const sy_qx_row *x,
                                           __m512 *acc) {
    enum { R = PANEL_ROWS, T = PANEL_TOKENS };
    const int count = d[0]->count, n_off16 = d[0]->n_off16;
    const __mmask16 live = (__mmask16)(count == 16 ? 0xffffu : (1u << count) - 1u);
    const int8_t *qi[T];
    __m512 dx[T];
    for (int t = 0; t < T; t++) {
        qi[t] = x[t].qi + gi * 512;
        dx[t] = count == 16 ? _mm512_loadu_ps(x[t].d + gi * 16) : _mm512_maskz_loadu_ps(live, x[t].d + gi * 16);
    }
    for (int h = 0; h < (split ? 2 : 1); h++) {
        __m512i s[R * T];
        for (int t = 0; t < T; t++) {
            __m512i s0 = shift && h == 0 ? _mm512_slli_epi32(_mm512_loadu_si512(x[t].nsum + gi * 16), (unsigned)shift)
                                         : _mm512_setzero_si512();
            for (int r = 0; r < R; r++) s[r * T + t] = s0;
        }
        const int c0 = split ? 4 * h : 0, c1 = split ? 4 * h + 4 : 8;
        for (int c = c0; c < c1; c++) {
            __m512i w[R];
            for (int r = 0; r < R; r++) w[r] = d[r]->v[c];
            for (int t = 0; t < T; t++) {
                __m512i a = load64(qi[t] + 64 * c);
                __asm__("" : "+v"(a)); /* one load for the panel's rows, not a memory operand in each vpdpbusd */
                for (int r = 0; r < R; r++) s[r * T + t] = _mm512_dpbusd_epi32(s[r * T + t], w[r], a);
            }
        }
        for (int r = 0; r < R; r++) {
            const __m512 scale = h ? d[r]->gs.scale_hi : d[r]->gs.scale;
            for (int t = 0; t < T; t++)
                acc[r * T + t] =
                    _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[r * T + t]), _mm512_mul_ps(scale, dx[t]), acc[r * T + t]);
        }
    }
    if (with_min)
        for (int t = 0; t < T; t++) {
            const __m512 m = _mm512_mul_ps(dx[t], _mm512_cvtepi32_ps(_mm512_loadu_si512(x[t].nsum + gi * 16)));
            for (int r = 0; r < R; r++) acc[r * T + t] = _mm512_fnmadd_ps(d[r]->gs.min, m, acc[r * T + t]);
        }
    for (int o = 0; o < n_off16; o++)
        for (int t = 0; t < T; t++) {
            const __m512 s16 = _mm512_loadu_ps(x[t].s16 + gi * 32 + 16 * (size_t)o);
            for (int r = 0; r < R; r++) acc[r * T + t] = _mm512_fmadd_ps(d[r]->gs.off16[o], s16, acc[r * T + t]);
        }
}

AVX512 static ALWAYS_INLINE void panel(sy_dtype type, const uint8_t *W, size_t row_bytes, size_t row_begin,
                                       size_t row_end, size_t n, const void *QX, size_t k, size_t n_batch, float *Y,
                                       size_t ldy, decoded_group (*decoded)[PANEL_MAX_GROUPS]) {
    enum { R = PANEL_ROWS, T = PANEL_TOKENS };
    const size_t n_groups = fused_groups(type, n);
    size_t block = PANEL_X_BYTES / sy_qx_row_bytes(k) / T * T;
    if (block < T) block = T;
    for (size_t b0 = 0; b0 < n_batch; b0 += block) {
        const size_t b1 = n_batch - b0 < block ? n_batch : b0 + block;
        for (size_t r0 = row_begin; r0 < row_end; r0 += R) {
            const int nr = row_end - r0 < (size_t)R ? (int)(row_end - r0) : R;
            for (int r = 0; r < nr; r++) {
                const uint8_t *w = W + (r0 + (size_t)r) * row_bytes;
                for (size_t g = 0; g < n_groups; g++) decode_group(type, w, n, g, &decoded[r][g]);
            }
            for (size_t t0 = b0; t0 < b1; t0 += T) {
                const int nt = b1 - t0 < (size_t)T ? (int)(b1 - t0) : T;
                sy_qx_row x[T];
                for (int t = 0; t < T; t++) x[t] = sy_qx_row_at(QX, k, t0 + (size_t)(t < nt ? t : nt - 1));
                __m512 acc[R * T];
                for (int i = 0; i < R * T; i++) acc[i] = _mm512_setzero_ps();
                for (size_t g = 0; g < n_groups; g++) {
                    const decoded_group *d[R];
                    for (int r = 0; r < R; r++) d[r] = &decoded[r < nr ? r : 0][g]; /* past nr: discarded */
                    panel_dot(fused_split(type), blocks32_offset_shift(type), fused_with_min(type), d, g, x, acc);
                }
                for (int r = 0; r < nr; r++) {
                    float out[T];
                    hsum16_tokens(acc + r * T, nt, out);
                    for (int t = 0; t < nt; t++) Y[(t0 + (size_t)t) * ldy + r0 + (size_t)r] = out[t];
                }
            }
        }
    }
}

/* one function per type, the decoding chosen at compile time */
#define PANEL_FN(name, type)                                                                                       \
    AVX512 static void panel_##name(const uint8_t *W, size_t row_bytes, size_t row_begin, size_t row_end, size_t n, \
                                    const void *QX, size_t k, size_t n_batch, float *Y, size_t ldy) {               \
        _Alignas(64) decoded_group decoded[PANEL_ROWS][PANEL_MAX_GROUPS];                                           \
        panel(type, W, row_bytes, row_begin, row_end, n, QX, k, n_batch, Y, ldy, decoded);                          \
    }
PANEL_FN(q4_0, SY_DTYPE_Q4_0)
PANEL_FN(q4_1, SY_DTYPE_Q4_1)
PANEL_FN(q5_0, SY_DTYPE_Q5_0)
PANEL_FN(q5_1, SY_DTYPE_Q5_1)
PANEL_FN(q8_0, SY_DTYPE_Q8_0)
PANEL_FN(q2_k, SY_DTYPE_Q2_K)
PANEL_FN(q3_k, SY_DTYPE_Q3_K)
PANEL_FN(q4_k, SY_DTYPE_Q4_K)
PANEL_FN(q5_k, SY_DTYPE_Q5_K)
PANEL_FN(q6_k, SY_DTYPE_Q6_K)
#undef PANEL_FN

bool sy_fused_panel_avx512(sy_dtype wtype, const void *W, size_t row_bytes, size_t row_begin, size_t row_end,
                           size_t k, const void *QX, size_t n_batch, float *Y, size_t ldy) {
    const sy_dtype_traits *info = sy_dtype_get(wtype);
    if (k == 0 || info == NULL || info->block_elems == 0) return false;
    const size_t n = k / info->block_elems;
    if (fused_groups(wtype, n) > PANEL_MAX_GROUPS) return false;
    void (*fn)(const uint8_t *, size_t, size_t, size_t, size_t, const void *, size_t, size_t, float *, size_t);
    switch (wtype) {
    case SY_DTYPE_Q4_0: fn = panel_q4_0; break;
    case SY_DTYPE_Q4_1: fn = panel_q4_1; break;
    case SY_DTYPE_Q5_0: fn = panel_q5_0; break;
    case SY_DTYPE_Q5_1: fn = panel_q5_1; break;
    case SY_DTYPE_Q8_0: fn = panel_q8_0; break;
    case SY_DTYPE_Q2_K: fn = panel_q2_k; break;
    case SY_DTYPE_Q3_K: fn = panel_q3_k; break;
    case SY_DTYPE_Q4_K: fn = panel_q4_k; break;
    case SY_DTYPE_Q5_K: fn = panel_q5_k; break;
    case SY_DTYPE_Q6_K: fn = panel_q6_k; break;
    default: return false;
    }
    fn((const uint8_t *)W, row_bytes, row_begin, row_end, n, QX, k, n_batch, Y, ldy);
    return true;
}

/* ---- one function per type and tile width ---- */

#define SY_FUSED_TARGET AVX512
#define SY_FUSED_TABLE_FN sy_fused_kernels_avx512
#include "sy_kernels_fused_table.h"

#endif
