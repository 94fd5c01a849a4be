/* BF16 weights on the AVX-512 tier, exact products: a bf16 is the high half of an f32, so each 64-byte load of 32
 * weights gives its even elements as f32 by one shift and its odd ones by one mask, which meet the activations,
 * reordered once per call to even/odd per 32, in two FMAs. That halves the widening work of converting 16 weights
 * at a time (the old tiles), and the single-token tile asks for the weight stream ahead across 4 KiB pages.
 *
 * AVX512_BF16's vdpbf16ps was measured against this and was not faster on the Sapphire Rapids-class guest this was
 * written on (one vdpbf16ps per ~4 FMA slots), and it would round the activations to bf16; so it is not used.
 *
 * Batch invariance: every (row, token) dot runs the same chain (one accumulator, 32 elements a step in order, the
 * same reduction tree), whatever the tile around it, so a token's result does not depend on its batch. */
#include "sy_kernels_x86.h"

#if SY_KERNELS_X86

#include <immintrin.h>

#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma")))
#define ALWAYS_INLINE __attribute__((always_inline)) inline

/* The exact variant: each 64-byte load of 32 bf16 weights gives its even elements as f32 by one shift and its odd
 * ones by one mask (a bf16 is the high half of an f32), which meet the activations stored even/odd per 32 (below)
 * in two FMAs. Half the widening work of converting 16 weights at a time, products exact. */
AVX512 static ALWAYS_INLINE void tile_eo(const int R, const int T, const uint8_t *const *rows,
                                             const float *const *xs, size_t k, size_t kp, const int prefetch,
                                             float out[16]) {
    __m512 acc[16];
    for (int i = 0; i < 16; i++) acc[i] = _mm512_setzero_ps();
    const __m512i high = _mm512_set1_epi32((int)0xffff0000u);
    for (size_t i = 0; i < kp; i += 32) {
        __m512 xe[4], xo[4];
        for (int t = 0; t < T; t++) xe[t] = _mm512_loadu_ps(xs[t] + i), xo[t] = _mm512_loadu_ps(xs[t] + i + 16);
        __mmask32 m = k - i >= 32 ? (__mmask32)0xffffffffu : (__mmask32)((1ull << (k - i)) - 1u);
        for (int r = 0; r < R; r++) {
            const uint8_t *p = rows[r] + 2 * i;
            if (prefetch) __builtin_prefetch(p + SY_PREFETCH_AHEAD);
            __m512i w = k - i >= 32 ? _mm512_loadu_si512((const void *)p)
                                    : _mm512_maskz_loadu_epi16(m, (const void *)p);
            __m512 we = _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
            __m512 wo = _mm512_castsi512_ps(_mm512_and_si512(w, high));
            for (int t = 0; t < T; t++) {
                acc[r * T + t] = _mm512_fmadd_ps(we, xe[t], acc[r * T + t]);
                acc[r * T + t] = _mm512_fmadd_ps(wo, xo[t], acc[r * T + t]);
            }
        }
    }
    _Alignas(64) float lanes[16];
    _mm512_store_ps(lanes, sy_reduce16(acc));
    for (int a = 0; a < R * T; a++) out[a] = lanes[4 * (a % 4) + a / 4];
}

/* n rows of k floats to kp floats each, every 32 as its 16 even elements then its 16 odd ones, zero past k. */
AVX512 static void split_rows_eo(const float *X, size_t n, size_t ldx, size_t k, size_t kp, float *out) {
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    for (size_t b = 0; b < n; b++) {
        const float *x = X + b * ldx;
        float *o = out + b * kp;
        for (size_t i = 0; i < kp; i += 32) {
            __mmask16 lo = (__mmask16)(k - i >= 16 ? 0xffff : k > i ? (1u << (k - i)) - 1u : 0);
            __mmask16 hi = (__mmask16)(k - i >= 32 ? 0xffff : k > i + 16 ? (1u << (k - i - 16)) - 1u : 0);
            __m512 a = _mm512_maskz_loadu_ps(lo, x + i), c = _mm512_maskz_loadu_ps(hi, x + i + 16);
            _mm512_storeu_ps(o + i, _mm512_permutex2var_ps(a, even, c));
            _mm512_storeu_ps(o + i + 16, _mm512_permutex2var_ps(a, odd, c));
        }
    }
}

/* The reordered activations live on the stack (128 KiB), a chunk of tokens at a time: the transformer's 256 KiB
 * blocks of activations take two chunks. */
#define XEO_ELEMS SY_BF16_AVX512_MAX_K
#define DECODE_ROWS 8 /* 1 token: 8 rows, eight independent FMA chains in flight, eight weight streams */
#define PREFILL_ROWS 4
#define PREFILL_TOKENS 4

AVX512 bool sy_matmul_bf16_avx512(const void *W, size_t row_bytes, size_t row_begin, size_t row_end, size_t k,
                                  const float *X, size_t n_batch, size_t ldx, float *Y, size_t ldy) {
    size_t kp = (k + 31) / 32 * 32;
    if (kp > XEO_ELEMS) return false;
    _Alignas(64) float xeo[XEO_ELEMS];
    size_t chunk = XEO_ELEMS / kp;
    if (chunk >= PREFILL_TOKENS) chunk = chunk / PREFILL_TOKENS * PREFILL_TOKENS;
    for (size_t c0 = 0; c0 < n_batch; c0 += chunk) {
        size_t nc = n_batch - c0 < chunk ? n_batch - c0 : chunk;
        split_rows_eo(X + c0 * ldx, nc, ldx, k, kp, xeo);
        const int single = nc == 1;
        const int R = single ? DECODE_ROWS : PREFILL_ROWS, T = single ? 1 : PREFILL_TOKENS;
        for (size_t r0 = row_begin; r0 < row_end; r0 += (size_t)R) {
            int nr = row_end - r0 < (size_t)R ? (int)(row_end - r0) : R;
            const uint8_t *rows[DECODE_ROWS];
            for (int r = 0; r < R; r++)
                rows[r] = (const uint8_t *)W + (r0 + (size_t)(r < nr ? r : nr - 1)) * row_bytes;
            for (size_t b0 = 0; b0 < nc; b0 += (size_t)T) {
                int nb = nc - b0 < (size_t)T ? (int)(nc - b0) : T;
                const float *xs[PREFILL_TOKENS];
                for (int t = 0; t < T; t++) xs[t] = xeo + (b0 + (size_t)(t < nb ? t : nb - 1)) * kp;
                float out[16];
                if (single) {
                    tile_eo(DECODE_ROWS, 1, rows, xs, k, kp, 1, out);
                } else {
                    tile_eo(PREFILL_ROWS, PREFILL_TOKENS, rows, xs, k, kp, 0, out);
                }
                for (int r = 0; r < nr; r++)
                    for (int t = 0; t < nb; t++) Y[(c0 + b0 + (size_t)t) * ldy + r0 + (size_t)r] = out[r * T + t];
            }
        }
    }
    return true;
}

#endif
