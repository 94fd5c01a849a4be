/* Row quantizers and llama.cpp's per-tensor type rules: see quantize.h.
 *
 * The block layouts are those of kernels/cpu/sy_kernels_quant.c (the dequantizer is the definition of what the
 * bytes mean). The quantizers search for scales the way llama.cpp's reference ones do, in the same f32 operation
 * order, so that the same input gives the same bytes:
 *   - 32-element types: one scale (and a minimum for _1 types) from the block's extremes, then rounding;
 *   - Q2_K, Q4_K, Q5_K: per sub-block a weighted least-squares fit of scale and minimum over a range of trial
 *     inverse scales (fit_scale_min), then 4/6-bit sub-block scales relative to the block's largest;
 *   - Q3_K: per sub-block a symmetric fit refined by coordinate descent (fit_symmetric_refined);
 *   - Q6_K: per sub-block a symmetric fit over 19 trial scales (fit_symmetric_search).
 */
#include "quantize.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "sy_kernels.h"

#define QK 32   /* elements of a 32-element block */
#define QK_K 256 /* elements of a K-quant super-block */
#define ALL_ZERO_EPS 1e-15f

/* Round to nearest, ties to even, for |v| < 2^22: adding 1.5 * 2^23 leaves the rounded integer in the low
 * mantissa bits. Much faster than lrintf in the quantizers' inner loops, and exactly the same result. */
static inline int round_even(float v) {
    float shifted = v + 12582912.0f;
    int32_t bits;
    memcpy(&bits, &shifted, sizeof bits);
    return (bits & 0x007fffff) - 0x00400000;
}

static inline int clamp_int(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* (int8_t)v, truncating toward zero, for v in range; out-of-range values (only from degenerate scales such as a
 * subnormal block range, where 1/d overflows) saturate instead of being undefined behaviour. */
static inline int trunc_i8(float v) {
    if (!(v > -129.0f)) return -128;
    if (v >= 128.0f) return 127;
    return (int)v;
}

/* min(v, hi) stored in a byte, as the reference code does (a negative v wraps; only degenerate scales give one) */
static inline uint8_t to_u8_max(int v, int hi) { return (uint8_t)(v < hi ? v : hi); }

static inline void put_f16(uint8_t *p, float v) {
    uint16_t h = sy_f32_to_f16(v);
    p[0] = (uint8_t)h;
    p[1] = (uint8_t)(h >> 8);
}

static inline float get_f16(const uint8_t *p) { return sy_f16_to_f32((uint16_t)(p[0] | (p[1] << 8))); }

static inline void put_u32le(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

/* The element of largest magnitude (the first one on ties) and that magnitude. */
static void signed_absmax(const float *x, int n, float *value, float *magnitude) {
    float amax = 0.0f, v = 0.0f;
    for (int i = 0; i < n; i++) {
        if (amax < fabsf(x[i])) {
            amax = fabsf(x[i]);
            v = x[i];
        }
    }
    *value = v;
    *magnitude = amax;
}

static void min_max(const float *x, int n, float *lo, float *hi) {
    float mn = FLT_MAX, mx = -FLT_MAX;
    for (int i = 0; i < n; i++) {
        if (x[i] < mn) mn = x[i];
        if (x[i] > mx) mx = x[i];
    }
    *lo = mn;
    *hi = mx;
}

/* ---- 32-element blocks ---- */

/* Q4_0: d = (signed extreme) / -8, so the extreme maps to -8 exactly and the rest to [-8, 8). */
static void block_q4_0(const float *x, uint8_t *b) {
    float max, amax;
    signed_absmax(x, QK, &max, &amax);
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    put_f16(b, d);
    for (int j = 0; j < QK / 2; j++) {
        uint8_t q0 = to_u8_max(trunc_i8(x[j] * id + 8.5f), 15);
        uint8_t q1 = to_u8_max(trunc_i8(x[j + QK / 2] * id + 8.5f), 15);
        b[2 + j] = (uint8_t)(q0 | (q1 << 4));
    }
}

/* Q4_1: minimum m and d = (max - min) / 15. */
static void block_q4_1(const float *x, uint8_t *b) {
    float mn, mx;
    min_max(x, QK, &mn, &mx);
    const float d = (mx - mn) / 15.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    put_f16(b, d);
    put_f16(b + 2, mn);
    for (int j = 0; j < QK / 2; j++) {
        uint8_t q0 = to_u8_max(trunc_i8((x[j] - mn) * id + 0.5f), 15);
        uint8_t q1 = to_u8_max(trunc_i8((x[j + QK / 2] - mn) * id + 0.5f), 15);
        b[4 + j] = (uint8_t)(q0 | (q1 << 4));
    }
}

/* Q5_0: as Q4_0 with 5 bits, the fifth bit of element j in bit j of qh. */
static void block_q5_0(const float *x, uint8_t *b) {
    float max, amax;
    signed_absmax(x, QK, &max, &amax);
    const float d = max / -16.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    put_f16(b, d);
    uint32_t qh = 0;
    for (int j = 0; j < QK / 2; j++) {
        uint8_t q0 = to_u8_max(trunc_i8(x[j] * id + 16.5f), 31);
        uint8_t q1 = to_u8_max(trunc_i8(x[j + QK / 2] * id + 16.5f), 31);
        b[6 + j] = (uint8_t)((q0 & 15) | ((q1 & 15) << 4));
        qh |= (uint32_t)((q0 >> 4) & 1) << j;
        qh |= (uint32_t)((q1 >> 4) & 1) << (j + QK / 2);
    }
    put_u32le(b + 2, qh);
}

static void block_q5_1(const float *x, uint8_t *b) {
    float mn, mx;
    min_max(x, QK, &mn, &mx);
    const float d = (mx - mn) / 31.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    put_f16(b, d);
    put_f16(b + 2, mn);
    uint32_t qh = 0;
    for (int j = 0; j < QK / 2; j++) {
        /* (x - min) * id <= 31 (+ rounding), so + 0.5 truncates to at most 31 */
        uint8_t q0 = (uint8_t)trunc_i8((x[j] - mn) * id + 0.5f);
        uint8_t q1 = (uint8_t)trunc_i8((x[j + QK / 2] - mn) * id + 0.5f);
        b[8 + j] = (uint8_t)((q0 & 15) | ((q1 & 15) << 4));
        qh |= (uint32_t)((q0 >> 4) & 1) << j;
        qh |= (uint32_t)((q1 >> 4) & 1) << (j + QK / 2);
    }
    put_u32le(b + 4, qh);
}

/* Q8_0: d = max|x| / 127, values rounded half away from zero. */
static void block_q8_0(const float *x, uint8_t *b) {
    float amax = 0.0f;
    for (int j = 0; j < QK; j++) amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    put_f16(b, d);
    for (int j = 0; j < QK; j++) b[2 + j] = (uint8_t)(int8_t)trunc_i8(roundf(x[j] * id));
}

/* ---- scale searches of the K-quants ---- */

/* Asymmetric fit x ~ scale * L + min with L in [0, nmax] and min <= 0, minimizing sum w * err (err squared, or
 * absolute when use_abs). Starts from the range fit, then tries inverse scales (nmax + rmin + rdelta * s) /
 * (max - min) for s = 0..nstep, each followed by the closed-form least-squares scale and minimum for the levels it
 * gives; keeps the best. Later trials measure from the best minimum so far (not the range's), as llama.cpp does.
 * Returns the scale; *neg_min gets -min (>= 0). */
static float fit_scale_min(int n, int nmax, const float *x, const float *w, uint8_t *L, float *neg_min,
                           uint8_t *L_try, float rmin, float rdelta, int nstep, bool use_abs) {
    float min = x[0], max = x[0];
    float sum_w = w[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        memset(L, 0, (size_t)n);
        *neg_min = -min;
        return 0.0f;
    }
    float iscale = (float)nmax / (max - min);
    float scale = 1.0f / iscale;
    float best_err = 0.0f;
    for (int i = 0; i < n; i++) {
        L[i] = (uint8_t)clamp_int(round_even(iscale * (x[i] - min)), 0, nmax);
        float diff = scale * (float)L[i] + min - x[i];
        diff = use_abs ? fabsf(diff) : diff * diff;
        best_err += w[i] * diff;
    }
    /* the trials grid over [min, max] with the best minimum found so far, as the reference does */
    for (int s = 0; s <= nstep; s++) {
        iscale = (rmin + rdelta * (float)s + (float)nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            int l = clamp_int(round_even(iscale * (x[i] - min)), 0, nmax);
            L_try[i] = (uint8_t)l;
            sum_l += w[i] * (float)l;
            sum_l2 += w[i] * (float)l * (float)l;
            sum_xl += w[i] * (float)l * x[i];
        }
        float det = sum_w * sum_l2 - sum_l * sum_l;
        if (det > 0) {
            float try_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
            float try_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
            if (try_min > 0) {
                try_min = 0;
                try_scale = sum_xl / sum_l2;
            }
            float err = 0;
            for (int i = 0; i < n; i++) {
                float diff = try_scale * (float)L_try[i] + try_min - x[i];
                diff = use_abs ? fabsf(diff) : diff * diff;
                err += w[i] * diff;
            }
            if (err < best_err) {
                memcpy(L, L_try, (size_t)n);
                best_err = err;
                scale = try_scale;
                min = try_min;
            }
        }
    }
    *neg_min = -min;
    return scale;
}

/* The symmetric levels l = round(iscale * x) in [-nmax, nmax - 1] and their weighted sums (weights x^2):
 * sum w x l and sum w l^2. Writes l + offset to L unless L is NULL. */
static void symmetric_levels(int n, int nmax, const float *x, float iscale, int8_t *L, int offset, float *sumlx,
                             float *suml2) {
    float slx = 0, sl2 = 0;
    for (int i = 0; i < n; i++) {
        int l = clamp_int(round_even(iscale * x[i]), -nmax, nmax - 1);
        if (L != NULL) L[i] = (int8_t)(l + offset);
        float w = x[i] * x[i];
        slx += w * x[i] * (float)l;
        sl2 += w * (float)l * (float)l;
    }
    *sumlx = slx;
    *suml2 = sl2;
}

/* Symmetric fit x ~ scale * (L - nmax), L - nmax in [-nmax, nmax - 1], weights x^2: the level set of
 * -nmax / (signed extreme), then of 18 nearby inverse scales, each scored by its least-squares scale; keeps the
 * best. Returns the scale (0 for an all-zero group). */
static float fit_symmetric_search(int n, int nmax, const float *x, int8_t *L) {
    float max, amax;
    signed_absmax(x, n, &max, &amax);
    if (amax < ALL_ZERO_EPS) {
        memset(L, 0, (size_t)n);
        return 0.0f;
    }
    float sumlx, suml2;
    symmetric_levels(n, nmax, x, -(float)nmax / max, L, nmax, &sumlx, &suml2);
    float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int s = -9; s <= 9; s++) {
        if (s == 0) continue;
        float iscale = -((float)nmax + 0.1f * (float)s) / max;
        symmetric_levels(n, nmax, x, iscale, NULL, 0, &sumlx, &suml2);
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            symmetric_levels(n, nmax, x, iscale, L, nmax, &sumlx, &suml2);
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* Symmetric fit for Q3_K: levels of -nmax / (signed extreme), then up to 5 passes that move single levels to
 * their best value given the others (weights x^2) while the fit improves. L gets level + nmax. */
static float fit_symmetric_refined(int n, int nmax, const float *x, int8_t *L) {
    float max, amax;
    signed_absmax(x, n, &max, &amax);
    if (amax < ALL_ZERO_EPS) {
        memset(L, 0, (size_t)n);
        return 0.0f;
    }
    float sumlx, suml2;
    symmetric_levels(n, nmax, x, -(float)nmax / max, L, 0, &sumlx, &suml2);
    for (int pass = 0; pass < 5; pass++) {
        int changed = 0;
        for (int i = 0; i < n; i++) {
            float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * (float)L[i];
            if (slx > 0) {
                float sl2 = suml2 - w * (float)L[i] * (float)L[i];
                int l = clamp_int(round_even(x[i] * sl2 / slx), -nmax, nmax - 1);
                if (l != L[i]) {
                    slx += w * x[i] * (float)l;
                    sl2 += w * (float)l * (float)l;
                    if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (int8_t)l;
                        sumlx = slx;
                        suml2 = sl2;
                        changed++;
                    }
                }
            }
        }
        if (!changed) break;
    }
    for (int i = 0; i < n; i++) L[i] = (int8_t)(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* 6-bit scale and min of sub-block j of a Q4_K/Q5_K block's 12 scale bytes. */
static inline void k4_scale_min(const uint8_t *s, int j, int *scale, int *min) {
    if (j < 4) {
        *scale = s[j] & 63;
        *min = s[j + 4] & 63;
    } else {
        *scale = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
        *min = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* ---- 256-element blocks ---- */

/* Q2_K (84 B): 16 sub-blocks of 16, 2-bit levels, 4-bit scale and min per sub-block. */
static void block_q2_k(const float *x, uint8_t *b) {
    uint8_t *scales = b, *qs = b + 16;
    uint8_t L[QK_K], L_try[16];
    float w[16], sc[QK_K / 16], mn[QK_K / 16];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < QK_K / 16; j++) {
        for (int l = 0; l < 16; l++) w[l] = fabsf(x[16 * j + l]);
        sc[j] = fit_scale_min(16, 3, x + 16 * j, w, L + 16 * j, &mn[j], L_try, -0.5f, 0.1f, 15, true);
        if (sc[j] > max_scale) max_scale = sc[j];
        if (mn[j] > max_min) max_min = mn[j];
    }
    if (max_scale > 0) {
        float iscale = 15.0f / max_scale;
        for (int j = 0; j < QK_K / 16; j++) scales[j] = (uint8_t)round_even(iscale * sc[j]);
        put_f16(b + 80, max_scale / 15.0f);
    } else {
        memset(scales, 0, QK_K / 16);
        put_f16(b + 80, 0.0f);
    }
    if (max_min > 0) {
        float iscale = 15.0f / max_min;
        for (int j = 0; j < QK_K / 16; j++)
            scales[j] = (uint8_t)(scales[j] | (((unsigned)round_even(iscale * mn[j]) & 15u) << 4));
        put_f16(b + 82, max_min / 15.0f);
    } else {
        put_f16(b + 82, 0.0f);
    }
    const float d_all = get_f16(b + 80), dmin_all = get_f16(b + 82);
    for (int j = 0; j < QK_K / 16; j++) {
        const float d = d_all * (float)(scales[j] & 15);
        if (d == 0.0f) continue; /* keeps the levels of the fit */
        const float dm = dmin_all * (float)(scales[j] >> 4);
        for (int i = 0; i < 16; i++) L[16 * j + i] = (uint8_t)clamp_int(round_even((x[16 * j + i] + dm) / d), 0, 3);
    }
    for (int n = 0; n < 2; n++)
        for (int l = 0; l < 32; l++)
            qs[32 * n + l] = (uint8_t)(L[128 * n + l] | (L[128 * n + l + 32] << 2) | (L[128 * n + l + 64] << 4) |
                                       (L[128 * n + l + 96] << 6));
}

/* Q3_K (110 B): 16 sub-blocks of 16, 3-bit levels (2 low bits in qs, the high bit in hmask), 6-bit signed
 * scales. */
static void block_q3_k(const float *x, uint8_t *b) {
    uint8_t *hmask = b, *qs = b + 32, *scales = b + 96;
    int8_t L[QK_K];
    float sc[QK_K / 16];
    float max_scale = 0, amax = 0;
    for (int j = 0; j < QK_K / 16; j++) {
        sc[j] = fit_symmetric_refined(16, 4, x + 16 * j, L + 16 * j);
        if (fabsf(sc[j]) > amax) {
            amax = fabsf(sc[j]);
            max_scale = sc[j];
        }
    }
    memset(scales, 0, 12);
    if (max_scale != 0.0f) {
        float iscale = -32.0f / max_scale;
        for (int j = 0; j < QK_K / 16; j++) {
            int8_t l8 = (int8_t)round_even(iscale * sc[j]);
            int l = clamp_int(l8, -32, 31) + 32;
            if (j < 8) scales[j] = (uint8_t)(l & 15);
            else scales[j - 8] = (uint8_t)(scales[j - 8] | ((l & 15) << 4));
            scales[8 + j % 4] = (uint8_t)(scales[8 + j % 4] | ((l >> 4) << (2 * (j / 4))));
        }
        put_f16(b + 108, 1.0f / iscale);
    } else {
        put_f16(b + 108, 0.0f);
    }
    const float d_all = get_f16(b + 108);
    for (int j = 0; j < QK_K / 16; j++) {
        int s = j < 8 ? scales[j] & 15 : scales[j - 8] >> 4;
        s = (s | (((scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32;
        const float d = d_all * (float)s;
        if (d == 0.0f) continue;
        for (int i = 0; i < 16; i++) L[16 * j + i] = (int8_t)(clamp_int(round_even(x[16 * j + i] / d), -4, 3) + 4);
    }
    memset(hmask, 0, 32);
    /* high bit of element j: hmask[j % 32], bit j / 32 */
    for (int j = 0; j < QK_K; j++) {
        if (L[j] > 3) {
            hmask[j % 32] = (uint8_t)(hmask[j % 32] | (1 << (j / 32)));
            L[j] = (int8_t)(L[j] - 4);
        }
    }
    for (int n = 0; n < 2; n++)
        for (int l = 0; l < 32; l++)
            qs[32 * n + l] = (uint8_t)(L[128 * n + l] | (L[128 * n + l + 32] << 2) | (L[128 * n + l + 64] << 4) |
                                       (L[128 * n + l + 96] << 6));
}

/* The 8 sub-block fits of a Q4_K / Q5_K block and their 6-bit scales and mins; fills L with the levels requantized
 * to the stored scales. Writes d, dmin and the 12 scale bytes at b. */
static void k4_fit(const float *x, uint8_t *b, int nmax, float rmin, float rdelta, int nstep, uint8_t *L) {
    uint8_t *scales = b + 4;
    uint8_t L_try[32];
    float w[32], sc[QK_K / 32], mn[QK_K / 32];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < QK_K / 32; j++) {
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++) sum_x2 += x[32 * j + l] * x[32 * j + l];
        const float av_x = sqrtf(sum_x2 / 32.0f);
        for (int l = 0; l < 32; l++) w[l] = av_x + fabsf(x[32 * j + l]);
        sc[j] = fit_scale_min(32, nmax, x + 32 * j, w, L + 32 * j, &mn[j], L_try, rmin, rdelta, nstep, false);
        if (sc[j] > max_scale) max_scale = sc[j];
        if (mn[j] > max_min) max_min = mn[j];
    }
    const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
    const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
    for (int j = 0; j < QK_K / 32; j++) {
        uint8_t ls = (uint8_t)round_even(inv_scale * sc[j]), lm = (uint8_t)round_even(inv_min * mn[j]);
        ls = ls < 63 ? ls : 63;
        lm = lm < 63 ? lm : 63;
        if (j < 4) {
            scales[j] = ls;
            scales[j + 4] = lm;
        } else {
            scales[j + 4] = (uint8_t)((ls & 15) | ((lm & 15) << 4));
            scales[j - 4] = (uint8_t)(scales[j - 4] | ((ls >> 4) << 6));
            scales[j] = (uint8_t)(scales[j] | ((lm >> 4) << 6));
        }
    }
    put_f16(b, max_scale / 63.0f);
    put_f16(b + 2, max_min / 63.0f);
    const float d_all = get_f16(b), dmin_all = get_f16(b + 2);
    for (int j = 0; j < QK_K / 32; j++) {
        int s, m;
        k4_scale_min(scales, j, &s, &m);
        const float d = d_all * (float)s;
        if (d == 0.0f) continue;
        const float dm = dmin_all * (float)m;
        for (int i = 0; i < 32; i++)
            L[32 * j + i] = (uint8_t)clamp_int(round_even((x[32 * j + i] + dm) / d), 0, nmax);
    }
}

/* Q4_K (144 B): d, dmin, scales[12], qs[128]: elements 64i + l in the low nibble of qs[32i + l], 64i + 32 + l in
 * the high one. */
static void block_q4_k(const float *x, uint8_t *b) {
    uint8_t L[QK_K];
    /* the scales bytes are OR-ed into: start from zero */
    memset(b + 4, 0, 12);
    k4_fit(x, b, 15, -1.0f, 0.1f, 20, L);
    uint8_t *qs = b + 16;
    for (int i = 0; i < 4; i++)
        for (int l = 0; l < 32; l++) qs[32 * i + l] = (uint8_t)(L[64 * i + l] | (L[64 * i + 32 + l] << 4));
}

/* Q5_K (176 B): as Q4_K plus qh[32]: the fifth bit of element 64i + l in bit 2i of qh[l], of 64i + 32 + l in bit
 * 2i + 1. */
static void block_q5_k(const float *x, uint8_t *b) {
    uint8_t L[QK_K];
    memset(b + 4, 0, 12);
    k4_fit(x, b, 31, -0.5f, 0.1f, 15, L);
    uint8_t *qh = b + 16, *qs = b + 48;
    memset(qh, 0, 32);
    for (int i = 0; i < 4; i++) {
        for (int l = 0; l < 32; l++) {
            int lo = L[64 * i + l], hi = L[64 * i + 32 + l];
            if (lo > 15) {
                lo -= 16;
                qh[l] = (uint8_t)(qh[l] | (1 << (2 * i)));
            }
            if (hi > 15) {
                hi -= 16;
                qh[l] = (uint8_t)(qh[l] | (1 << (2 * i + 1)));
            }
            qs[32 * i + l] = (uint8_t)(lo | (hi << 4));
        }
    }
}

/* Q6_K (210 B): ql[128], qh[64], int8 scales[16], d. */
static void block_q6_k(const float *x, uint8_t *b) {
    uint8_t *ql = b, *qh = b + 128;
    int8_t *scales = (int8_t *)(b + 192);
    int8_t L[QK_K];
    float sc[QK_K / 16];
    float max_scale = 0, max_abs = 0;
    for (int j = 0; j < QK_K / 16; j++) {
        sc[j] = fit_symmetric_search(16, 32, x + 16 * j, L + 16 * j);
        if (fabsf(sc[j]) > max_abs) {
            max_abs = fabsf(sc[j]);
            max_scale = sc[j];
        }
    }
    if (max_abs < ALL_ZERO_EPS) {
        memset(b, 0, 210);
        return;
    }
    const float iscale = -128.0f / max_scale;
    put_f16(b + 208, 1.0f / iscale);
    for (int j = 0; j < QK_K / 16; j++) {
        int s = round_even(iscale * sc[j]);
        scales[j] = (int8_t)(s < 127 ? s : 127);
    }
    const float d_all = get_f16(b + 208);
    for (int j = 0; j < QK_K / 16; j++) {
        const float d = d_all * (float)scales[j];
        if (d == 0.0f) continue;
        for (int i = 0; i < 16; i++)
            L[16 * j + i] = (int8_t)(clamp_int(round_even(x[16 * j + i] / d), -32, 31) + 32);
    }
    for (int n = 0; n < 2; n++) {
        const int8_t *Ln = L + 128 * n;
        for (int l = 0; l < 32; l++) {
            ql[64 * n + l] = (uint8_t)((Ln[l] & 15) | ((Ln[l + 64] & 15) << 4));
            ql[64 * n + l + 32] = (uint8_t)((Ln[l + 32] & 15) | ((Ln[l + 96] & 15) << 4));
            qh[32 * n + l] = (uint8_t)((Ln[l] >> 4) | ((Ln[l + 32] >> 4) << 2) | ((Ln[l + 64] >> 4) << 4) |
                                       ((Ln[l + 96] >> 4) << 6));
        }
    }
}

/* ---- rows ---- */

typedef void (*block_fn)(const float *x, uint8_t *b);

static block_fn block_quantizer(sy_dtype type) {
    switch (type) {
    case SY_DTYPE_Q4_0: return block_q4_0;
    case SY_DTYPE_Q4_1: return block_q4_1;
    case SY_DTYPE_Q5_0: return block_q5_0;
    case SY_DTYPE_Q5_1: return block_q5_1;
    case SY_DTYPE_Q8_0: return block_q8_0;
    case SY_DTYPE_Q2_K: return block_q2_k;
    case SY_DTYPE_Q3_K: return block_q3_k;
    case SY_DTYPE_Q4_K: return block_q4_k;
    case SY_DTYPE_Q5_K: return block_q5_k;
    case SY_DTYPE_Q6_K: return block_q6_k;
    default: return NULL;
    }
}

bool sy_quantize_supports(sy_dtype type) {
    return type == SY_DTYPE_F32 || type == SY_DTYPE_F16 || type == SY_DTYPE_BF16 || block_quantizer(type) != NULL;
}

size_t sy_quantize_find_nonfinite(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return i;
    return n;
}

size_t sy_quantize_rows(sy_dtype type, const float *src, size_t n_rows, size_t n_per_row, void *dst,
                        size_t dst_size) {
    if (!sy_quantize_supports(type) || src == NULL || dst == NULL) return 0;
    const size_t row_bytes = sy_dtype_row_bytes(type, n_per_row);
    if (row_bytes == 0 || (n_rows > 0 && row_bytes > SIZE_MAX / n_rows)) return 0;
    const size_t total = row_bytes * n_rows;
    if (total > dst_size || (n_rows > 0 && n_per_row > SIZE_MAX / n_rows)) return 0;
    uint8_t *out = dst;
    const size_t n = n_rows * n_per_row;
    switch (type) {
    case SY_DTYPE_F32:
        memcpy(out, src, n * sizeof(float));
        return total;
    case SY_DTYPE_F16:
    case SY_DTYPE_BF16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h = type == SY_DTYPE_F16 ? sy_f32_to_f16(src[i]) : sy_f32_to_bf16(src[i]);
            out[2 * i] = (uint8_t)h;
            out[2 * i + 1] = (uint8_t)(h >> 8);
        }
        return total;
    default: break;
    }
    const sy_dtype_traits *tr = sy_dtype_get(type);
    const block_fn fn = block_quantizer(type);
    const size_t blocks = n / tr->block_elems; /* rows are packed, so blocks run on across rows */
    for (size_t i = 0; i < blocks; i++) fn(src + i * tr->block_elems, out + i * tr->block_bytes);
    return total;
}

/* ---- file types ---- */

static const struct {
    const char *name;
    sy_quant_ftype ftype;
    sy_dtype base;
} ftypes[] = {
    {"F32", SY_FTYPE_F32, SY_DTYPE_F32},          {"F16", SY_FTYPE_F16, SY_DTYPE_F16},
    {"BF16", SY_FTYPE_BF16, SY_DTYPE_BF16},       {"Q8_0", SY_FTYPE_Q8_0, SY_DTYPE_Q8_0},
    {"Q4_0", SY_FTYPE_Q4_0, SY_DTYPE_Q4_0},       {"Q4_1", SY_FTYPE_Q4_1, SY_DTYPE_Q4_1},
    {"Q5_0", SY_FTYPE_Q5_0, SY_DTYPE_Q5_0},       {"Q5_1", SY_FTYPE_Q5_1, SY_DTYPE_Q5_1},
    {"Q2_K", SY_FTYPE_Q2_K, SY_DTYPE_Q2_K},       {"Q3_K_S", SY_FTYPE_Q3_K_S, SY_DTYPE_Q3_K},
    {"Q3_K_M", SY_FTYPE_Q3_K_M, SY_DTYPE_Q3_K},   {"Q3_K_L", SY_FTYPE_Q3_K_L, SY_DTYPE_Q3_K},
    {"Q4_K_S", SY_FTYPE_Q4_K_S, SY_DTYPE_Q4_K},   {"Q4_K_M", SY_FTYPE_Q4_K_M, SY_DTYPE_Q4_K},
    {"Q5_K_S", SY_FTYPE_Q5_K_S, SY_DTYPE_Q5_K},   {"Q5_K_M", SY_FTYPE_Q5_K_M, SY_DTYPE_Q5_K},
    {"Q6_K", SY_FTYPE_Q6_K, SY_DTYPE_Q6_K},
};
#define N_FTYPES (sizeof ftypes / sizeof ftypes[0])

bool sy_quant_ftype_parse(const char *name, sy_quant_ftype *out) {
    for (size_t i = 0; name != NULL && i < N_FTYPES; i++) {
        if (strcasecmp(name, ftypes[i].name) == 0) {
            *out = ftypes[i].ftype;
            return true;
        }
    }
    return false;
}

const char *sy_quant_ftype_name(sy_quant_ftype ftype) {
    for (size_t i = 0; i < N_FTYPES; i++)
        if (ftypes[i].ftype == ftype) return ftypes[i].name;
    return NULL;
}

const char *sy_quant_ftype_list(void) {
    return "Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K_S, Q3_K_M, Q3_K_L, Q4_K_S, Q4_K_M, Q5_K_S, Q5_K_M, Q6_K, F16, "
           "BF16, F32";
}

sy_dtype sy_quant_ftype_base_type(sy_quant_ftype ftype) {
    for (size_t i = 0; i < N_FTYPES; i++)
        if (ftypes[i].ftype == ftype) return ftypes[i].base;
    return SY_DTYPE_COUNT_;
}

/* The block number of "blk.N.<rest>", or -1 (also for N that does not fit an int, as sscanf would fail). */
static long block_number(const char *name) {
    if (strncmp(name, "blk.", 4) != 0) return -1;
    const char *p = name + 4;
    if (*p < '0' || *p > '9') return -1;
    long v = 0;
    for (; *p >= '0' && *p <= '9'; p++) {
        v = v * 10 + (*p - '0');
        if (v > 0x7fffffffL) return -1;
    }
    return *p == '.' ? v : -1;
}

int sy_quant_tensor_compare(const char *a, const char *b) {
    long la = block_number(a), lb = block_number(b);
    if (la != lb) return la < lb ? -1 : 1;
    return strcmp(a, b);
}

typedef enum category {
    CAT_OTHER,
    CAT_TOKEN_EMBD,
    CAT_OUTPUT,
    CAT_ATTN_V, /* attn_v, attn_qkv, attn_kv_b: the sensitive value projections */
    CAT_ATTN_OUTPUT,
    CAT_FFN_DOWN,
} category;

static category tensor_category(const char *name) {
    if (strcmp(name, "output.weight") == 0) return CAT_OUTPUT;
    if (strcmp(name, "token_embd.weight") == 0 || strcmp(name, "per_layer_token_embd.weight") == 0)
        return CAT_TOKEN_EMBD;
    if (strstr(name, "attn_qkv.weight") || strstr(name, "attn_kv_b.weight") || strstr(name, "attn_v.weight"))
        return CAT_ATTN_V;
    if (strstr(name, "attn_k.weight") || strstr(name, "attn_q.weight")) return CAT_OTHER;
    if (strstr(name, "attn_output.weight")) return CAT_ATTN_OUTPUT;
    if (strstr(name, "ffn_up") || strstr(name, "ffn_gate")) return CAT_OTHER;
    if (strstr(name, "ffn_down")) return CAT_FFN_DOWN;
    return CAT_OTHER;
}

/* Whether llama.cpp quantizes a tensor at all (the subset of its exclusions that concerns dense decoders). */
static bool quantizable(const sy_quant_tensor *t) {
    uint32_t dims = 0;
    for (uint32_t i = 0; i < t->n_dims && i < 4; i++)
        if (t->dims[i] > 1 || i == 0) dims = i + 1;
    if (dims < 2) return false;
    size_t len = strlen(t->name);
    if (len < 6 || strcmp(t->name + len - 6, "weight") != 0) return false;
    static const char *const excluded[] = {"_norm.weight", "ffn_gate_inp.weight", "ssm_conv1d", "shortconv.conv.weight",
                                           "attn_rel_b.weight", "position_embd", "token_types", "altup", "laurel"};
    for (size_t i = 0; i < sizeof excluded / sizeof excluded[0]; i++)
        if (strstr(t->name, excluded[i])) return false;
    return true;
}

static bool more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

static bool is_float_type(sy_dtype t) { return t == SY_DTYPE_F32 || t == SY_DTYPE_F16 || t == SY_DTYPE_BF16; }

bool sy_quant_choose_types(sy_quant_ftype ftype, const sy_quant_model *model, sy_quant_tensor *tensors, size_t n,
                           char *err, size_t err_size) {
    const sy_dtype base = sy_quant_ftype_base_type(ftype);
    if (base == SY_DTYPE_COUNT_) {
        snprintf(err, err_size, "file type %d is not one of %s", (int)ftype, sy_quant_ftype_list());
        return false;
    }
    const bool base_quantized = !is_float_type(base);
    const uint32_t n_head_kv = model->n_head_kv ? model->n_head_kv : model->n_head;
    const uint32_t n_gqa = n_head_kv ? model->n_head / n_head_kv : 1;
    const int n_layer = (int)model->n_layer;
    int n_attn_v = 0, i_attn_v = 0, i_ffn_down = 0;
    bool tied = true; /* llama.cpp assumes tied embeddings until it sees output.weight */
    for (size_t i = 0; i < n; i++) {
        category c = tensor_category(tensors[i].name);
        if (c == CAT_ATTN_V) n_attn_v++;
        if (c == CAT_OUTPUT) tied = false;
    }
    for (size_t i = 0; i < n; i++) {
        sy_quant_tensor *t = &tensors[i];
        t->out_type = t->src_type;
        t->fallback = false;
        if (!quantizable(t)) continue;
        sy_dtype type = base;
        if (base_quantized) {
            const category c = tensor_category(t->name);
            const uint32_t block = sy_dtype_get(type)->block_elems;
            if (c == CAT_OUTPUT || (tied && c == CAT_TOKEN_EMBD)) {
                if (t->dims[0] % block != 0) type = SY_DTYPE_Q8_0;
                else if (type != SY_DTYPE_Q8_0) type = SY_DTYPE_Q6_K;
            } else if (c == CAT_TOKEN_EMBD) {
                /* the recipe's type */
            } else if (c == CAT_ATTN_V) {
                if (ftype == SY_FTYPE_Q2_K) type = n_gqa >= 4 ? SY_DTYPE_Q4_K : SY_DTYPE_Q3_K;
                else if (ftype == SY_FTYPE_Q3_K_M) type = i_attn_v < 2 ? SY_DTYPE_Q5_K : SY_DTYPE_Q4_K;
                else if (ftype == SY_FTYPE_Q3_K_L) type = SY_DTYPE_Q5_K;
                else if ((ftype == SY_FTYPE_Q4_K_M || ftype == SY_FTYPE_Q5_K_M) && more_bits(i_attn_v, n_attn_v))
                    type = SY_DTYPE_Q6_K;
                else if (ftype == SY_FTYPE_Q4_K_S && i_attn_v < 4) type = SY_DTYPE_Q5_K;
                i_attn_v++;
            } else if (c == CAT_FFN_DOWN) {
                /* llama.cpp counts ffn_down tensors as layers */
                const int il = i_ffn_down;
                if (ftype == SY_FTYPE_Q2_K) type = SY_DTYPE_Q3_K;
                else if (ftype == SY_FTYPE_Q3_K_M) type = il < n_layer / 16 ? SY_DTYPE_Q5_K : SY_DTYPE_Q4_K;
                else if (ftype == SY_FTYPE_Q3_K_L) type = SY_DTYPE_Q5_K;
                else if (ftype == SY_FTYPE_Q4_K_M) {
                    if (more_bits(il, n_layer)) type = SY_DTYPE_Q6_K;
                } else if (ftype == SY_FTYPE_Q5_K_M && more_bits(il, n_layer)) type = SY_DTYPE_Q6_K;
                else if (ftype == SY_FTYPE_Q4_K_S && il < n_layer / 8) type = SY_DTYPE_Q5_K;
                i_ffn_down++;
            } else if (c == CAT_ATTN_OUTPUT) {
                if (ftype == SY_FTYPE_Q2_K) type = SY_DTYPE_Q3_K;
                else if (ftype == SY_FTYPE_Q3_K_M) type = SY_DTYPE_Q4_K;
                else if (ftype == SY_FTYPE_Q3_K_L) type = SY_DTYPE_Q5_K;
            }
            /* a row length the type's blocks do not divide: the nearest 32-element type, else F16 */
            const uint32_t blk = sy_dtype_get(type)->block_elems;
            if (t->dims[0] % blk != 0) {
                t->fallback = true;
                switch (type) {
                case SY_DTYPE_Q2_K:
                case SY_DTYPE_Q3_K: type = SY_DTYPE_Q4_0; break;
                case SY_DTYPE_Q4_K: type = SY_DTYPE_Q5_0; break;
                case SY_DTYPE_Q5_K: type = SY_DTYPE_Q5_1; break;
                case SY_DTYPE_Q6_K: type = SY_DTYPE_Q8_0; break;
                default: break;
                }
                if (t->dims[0] % sy_dtype_get(type)->block_elems != 0) type = SY_DTYPE_F16;
            }
        }
        if (type != t->src_type && !is_float_type(t->src_type)) {
            const sy_dtype_traits *st = sy_dtype_get(t->src_type);
            snprintf(err, err_size, "tensor %s is already quantized (%s): requantizing is not supported, start from "
                                    "an F32, F16 or BF16 file", t->name, st ? st->name : "unknown type");
            return false;
        }
        t->out_type = type;
    }
    return true;
}
