/* CPU kernels: the scalar tier against plain f64 computations, every SIMD tier against the scalar tier, known
 * values for every block format, argument checks. With SY_CPU_TIER set, checks that sy_kernels_active() is that
 * tier (skipped when this CPU lacks it) and tests that tier only; without it, tests every supported tier. */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "sy_kernels.h"
#include "sy_kernels_internal.h"

#define KERNEL_TEST_RNG_SEED 0x9e3779b97f4a7c15ull
#include "kernel_test_util.h"

/* ---- helpers ---- */

static void fill_random(float *x, size_t n, float scale) {
    for (size_t i = 0; i < n; i++) x[i] = rng_float() * scale;
}

static float bits_to_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint32_t f32_to_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static const sy_kernels *scalar(void) { return sy_kernels_for_tier(SY_CPU_TIER_SCALAR); }

/* ---- dispatch ---- */

static void test_active_tier(void **state) {
    (void)state;
    const char *forced = getenv("SY_CPU_TIER");
    const sy_kernels *active = sy_kernels_active();
    assert_non_null(active);
    assert_true(sy_cpu_tier_supported(active->tier));
    assert_string_equal(active->name, sy_cpu_tier_name(active->tier));
    if (forced == NULL || forced[0] == '\0') {
        assert_int_equal(active->tier, sy_cpu_tier_supported_best());
        return;
    }
    sy_cpu_tier wanted;
    if (!sy_cpu_tier_from_name(forced, &wanted)) {
        /* an unknown name (warned about on stderr) gives the best tier */
        assert_int_equal(active->tier, sy_cpu_tier_supported_best());
        return;
    }
    if (!sy_cpu_tier_supported(wanted)) {
        /* the warned fallback is the best tier */
        assert_int_equal(active->tier, sy_cpu_tier_supported_best());
        skip();
    }
    assert_int_equal(active->tier, wanted);
    assert_ptr_equal(active, sy_kernels_for_tier(wanted));
}

static void test_tier_names(void **state) {
    (void)state;
    sy_cpu_tier t;
    assert_true(sy_cpu_tier_from_name("scalar", &t));
    assert_int_equal(t, SY_CPU_TIER_SCALAR);
    assert_true(sy_cpu_tier_from_name("avx2", &t));
    assert_int_equal(t, SY_CPU_TIER_AVX2);
    assert_true(sy_cpu_tier_from_name("avx512", &t));
    assert_int_equal(t, SY_CPU_TIER_AVX512);
    assert_false(sy_cpu_tier_from_name("AVX2", &t));
    assert_false(sy_cpu_tier_from_name("", &t));
    assert_false(sy_cpu_tier_from_name(NULL, &t));
    assert_string_equal(sy_cpu_tier_name(SY_CPU_TIER_AVX512), "avx512");
    assert_true(sy_cpu_tier_from_name("amx", &t));
    assert_int_equal(t, SY_CPU_TIER_AMX);
    /* a tier is supported exactly when there is no reason it is not */
    for (int i = 0; i < SY_CPU_TIER_COUNT_; i++)
        assert_int_equal(sy_cpu_tier_unavailable_reason((sy_cpu_tier)i) == NULL, sy_cpu_tier_supported((sy_cpu_tier)i));
    if (!sy_cpu_tier_supported(SY_CPU_TIER_AMX))
        print_message("AMX tier unavailable: %s\n", sy_cpu_tier_unavailable_reason(SY_CPU_TIER_AMX));
    assert_string_equal(sy_cpu_tier_name((sy_cpu_tier)99), "unknown");
    assert_null(sy_kernels_for_tier((sy_cpu_tier)99));
    assert_true(sy_cpu_tier_supported(SY_CPU_TIER_SCALAR));
    for (int i = 0; i < SY_CPU_TIER_COUNT_; i++) {
        const sy_kernels *k = sy_kernels_for_tier((sy_cpu_tier)i);
        assert_int_equal(k != NULL, sy_cpu_tier_supported((sy_cpu_tier)i));
        if (k != NULL) {
            assert_int_equal(k->tier, i);
            assert_non_null(k->dot_f32);
            assert_non_null(k->axpy_f32);
            assert_non_null(k->matmul);
            assert_non_null(k->matmul_qx);
        }
    }
}

/* ---- conversions ---- */

static double f16_value_by_definition(uint16_t h) {
    int sign = h >> 15, exponent = (h >> 10) & 31, mantissa = h & 1023;
    double v;
    if (exponent == 0) {
        v = ldexp(mantissa, -24);
    } else if (exponent == 31) {
        v = mantissa ? NAN : INFINITY;
    } else {
        v = ldexp(1024 + mantissa, exponent - 25);
    }
    return sign ? -v : v;
}

static void test_f16_to_f32_exhaustive(void **state) {
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = sy_f16_to_f32((uint16_t)h);
        double want = f16_value_by_definition((uint16_t)h);
        if (isnan(want)) {
            assert_true(isnan(f));
            assert_true(isnan(sy_f16_to_f32(sy_f32_to_f16(f))));
            continue;
        }
        assert_true((double)f == want);
        assert_int_equal(signbit(f) != 0, (h >> 15) != 0);
        /* every f16 survives the round trip bit for bit */
        assert_int_equal(sy_f32_to_f16(f), h);
    }
}

/* Nearest f16 to x by search over all finite f16 values, ties to the even bit pattern. */
static uint16_t f16_nearest_by_search(float x) {
    if (isnan(x)) return 0x7e00;
    uint16_t sign = signbit(x) ? 0x8000 : 0;
    double ax = fabs((double)x);
    if (ax >= 65520.0) return sign | 0x7c00;
    uint32_t lo = 0, hi = 0x7bff; /* positive finite f16 are ordered by bit pattern */
    while (lo < hi) {
        uint32_t mid = (lo + hi + 1) / 2;
        if (f16_value_by_definition((uint16_t)mid) <= ax) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    uint32_t below = lo;
    if (below == 0x7bff || f16_value_by_definition((uint16_t)below) == ax) return (uint16_t)(sign | below);
    double d_below = ax - f16_value_by_definition((uint16_t)below);
    double d_above = f16_value_by_definition((uint16_t)(below + 1)) - ax;
    uint32_t pick = d_below < d_above ? below : d_above < d_below ? below + 1 : (below & 1 ? below + 1 : below);
    return (uint16_t)(sign | pick);
}

static void test_f32_to_f16_rounding(void **state) {
    (void)state;
    /* edge values: halfway points, the overflow threshold, subnormal boundaries */
    const float edges[] = {0.0f, -0.0f, 65504.0f, 65519.99f, 65520.0f, 65536.0f, 1e9f, INFINITY, -INFINITY,
                           0x1p-24f, 0x1p-25f, 0x1.000002p-25f, 0x1.8p-24f, 0x1.8p-23f, 0x1p-14f, 0x1.ffcp-15f,
                           1.0f + 0x1p-11f, 1.0f + 0x1p-11f + 0x1p-23f, 1.0f + 3 * 0x1p-11f, 0x1p-30f, 1e-8f};
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++) {
        assert_int_equal(sy_f32_to_f16(edges[i]), f16_nearest_by_search(edges[i]));
        assert_int_equal(sy_f32_to_f16(-edges[i]), f16_nearest_by_search(-edges[i]));
    }
    assert_int_equal(sy_f32_to_f16(0x1p-25f), 0x0000);      /* tie to even zero */
    assert_int_equal(sy_f32_to_f16(0x1.8p-24f), 0x0002);    /* 1.5 subnormal units tie to 2 */
    assert_int_equal(sy_f32_to_f16(65520.0f), 0x7c00);      /* tie past the largest rounds to infinity */
    assert_int_equal(sy_f32_to_f16(1.0f + 0x1p-11f), 0x3c00); /* tie to even */
    assert_true((sy_f32_to_f16(NAN) & 0x7c00) == 0x7c00 && (sy_f32_to_f16(NAN) & 0x3ff) != 0);
    /* random bit patterns over the whole range that matters (|x| < 2^17) and anywhere */
    for (int i = 0; i < 200000; i++) {
        uint32_t bits = (uint32_t)rng_next();
        if (i % 2 == 0) bits = (bits & 0x80000000u) | (0x30000000u + (bits % 0x18000000u));
        float x = bits_to_f32(bits);
        if (isnan(x)) continue;
        assert_int_equal(sy_f32_to_f16(x), f16_nearest_by_search(x));
    }
}

static void test_bf16_conversions(void **state) {
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = sy_bf16_to_f32((uint16_t)h);
        assert_int_equal(f32_to_bits(f), h << 16);
        if (!isnan(f)) assert_int_equal(sy_f32_to_bf16(f), h);
    }
    for (int i = 0; i < 200000; i++) {
        uint32_t bits = (uint32_t)rng_next();
        float x = bits_to_f32(bits);
        uint16_t got = sy_f32_to_bf16(x);
        if (isnan(x)) {
            assert_true(isnan(sy_bf16_to_f32(got)));
            continue;
        }
        /* the two candidates: truncated, and one above it in magnitude */
        uint16_t trunc = (uint16_t)(bits >> 16);
        double v = fabs((double)x), lo = fabs((double)sy_bf16_to_f32(trunc));
        double hi = fabs((double)sy_bf16_to_f32((uint16_t)(trunc + 1)));
        uint16_t want;
        if ((bits & 0xffff) == 0) {
            want = trunc;
        } else if ((trunc & 0x7fff) == 0x7f7f) { /* above the largest finite: RNE goes to infinity at the tie */
            want = (bits & 0xffff) >= 0x8000 ? (uint16_t)(trunc + 1) : trunc;
        } else if (v - lo < hi - v) {
            want = trunc;
        } else if (hi - v < v - lo) {
            want = (uint16_t)(trunc + 1);
        } else {
            want = (trunc & 1) ? (uint16_t)(trunc + 1) : trunc;
        }
        assert_int_equal(got, want);
    }
    assert_int_equal(sy_f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);  /* tie to even */
    assert_int_equal(sy_f32_to_bf16(1.0f + 0x3p-8f), 0x3f82);  /* tie to even, upward */
    assert_int_equal(sy_f32_to_bf16(INFINITY), 0x7f80);
    assert_true(isnan(sy_bf16_to_f32(sy_f32_to_bf16(NAN))));
    /* row versions agree with the single-value ones */
    float src[37];
    uint16_t h16[37];
    float back[37];
    fill_random(src, 37, 100.0f);
    sy_f32_to_bf16_row(src, h16, 37);
    sy_bf16_to_f32_row(h16, back, 37);
    for (int i = 0; i < 37; i++) assert_true(back[i] == sy_bf16_to_f32(sy_f32_to_bf16(src[i])));
    sy_f32_to_f16_row(src, h16, 37);
    sy_f16_to_f32_row(h16, back, 37);
    for (int i = 0; i < 37; i++) assert_true(back[i] == sy_f16_to_f32(sy_f32_to_f16(src[i])));
}

/* ---- dot, axpy ---- */

static void test_dot_and_axpy(void **state) {
    (void)state;
    const sy_kernels *tiers[SY_CPU_TIER_COUNT_];
    int n_tiers = tiers_under_test(tiers);
    const size_t lengths[] = {0, 1, 2, 3, 7, 8, 15, 16, 17, 31, 33, 63, 64, 65, 100, 127, 128, 129, 896, 1000, 4099};
    for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; li++) {
        size_t n = lengths[li];
        float *a = xmalloc((n + 1) * sizeof(float)), *b = xmalloc((n + 1) * sizeof(float));
        /* offset by one float so SIMD loads see unaligned data */
        fill_random(a, n + 1, 2.0f);
        fill_random(b, n + 1, 3.0f);
        double ref = 0.0, mag = 0.0;
        for (size_t i = 0; i < n; i++) {
            ref += (double)a[i + 1] * b[i + 1];
            mag += fabs((double)a[i + 1] * b[i + 1]);
        }
        float s = scalar()->dot_f32(a + 1, b + 1, n);
        assert_true(fabs(s - ref) <= 1e-6 * mag + 1e-30);
        for (int t = 0; t < n_tiers; t++) {
            float v = tiers[t]->dot_f32(a + 1, b + 1, n);
            if (!(fabs(v - ref) <= 1e-6 * mag + 1e-30))
                fail_msg("%s dot_f32 n=%zu: %.9g vs %.9g", tiers[t]->name, n, (double)v, ref);
            float *y = xmalloc((n + 2) * sizeof(float));
            for (size_t i = 0; i < n + 2; i++) y[i] = (float)i;
            tiers[t]->axpy_f32(y + 1, 0.75f, b + 1, n);
            assert_true(y[0] == 0.0f && y[n + 1] == (float)(n + 1));
            for (size_t i = 0; i < n; i++) {
                float want = (float)(i + 1) + 0.75f * b[i + 1];
                assert_true(fabsf(y[i + 1] - want) <= 1e-6f * (fabsf(want) + 1.0f));
            }
            free(y);
        }
        free(a);
        free(b);
    }
}

/* attend_f32 over a sequence of blocks: bit for bit the tier's dot_f32, sy_expf and axpy_f32 key by key (what the
 * transformer ran before the kernel had it), and within rounding of the softmax-weighted sum in double precision. */
static void attend_reference_loop(const sy_kernels *k, const float *q, const float *K, const float *V, size_t stride,
                                  size_t n, size_t hd, float scale, float *max, float *sum, float *out) {
    float s[300], block_max = -INFINITY;
    for (size_t i = 0; i < n; i++) {
        s[i] = k->dot_f32(q, K + i * stride, hd) * scale;
        if (s[i] > block_max) block_max = s[i];
    }
    if (block_max > *max) {
        float shrink = sy_expf(*max - block_max);
        *sum *= shrink;
        for (size_t i = 0; i < hd; i++) out[i] *= shrink;
        *max = block_max;
    }
    for (size_t i = 0; i < n; i++) {
        float e = sy_expf(s[i] - *max);
        *sum += e;
        k->axpy_f32(out, e, V + i * stride, hd);
    }
}

/* sy_expf: within 0.51 ulp of e^x wherever e^x is a normal float, 0 and +inf past its range, NaN for NaN; on glibc
 * (2.28 and later) the bits of libm's expf, which the attention used before; and every tier's exp_f32 gives sy_expf's
 * bits, wherever an element sits in the call. Over every 509th float bit pattern (8.4 million), both signs. */
static void test_exp(void **state) {
    (void)state;
    const sy_kernels *tiers[SY_CPU_TIER_COUNT_];
    int n_tiers = tiers_under_test(tiers);
    enum { CHUNK = 4099 };
    float x[CHUNK], want[CHUNK], got[CHUNK];
    double worst = 0.0;
    size_t libm_differs = 0;
    uint64_t pattern = 0;
    for (bool done = false; !done;) {
        size_t n = 0;
        for (; n < CHUNK && !done; n++, pattern += 509) {
            uint32_t b = (uint32_t)pattern;
            memcpy(&x[n], &b, sizeof b);
            done = pattern + 509 > UINT32_MAX;
        }
        for (size_t i = 0; i < n; i++) {
            want[i] = sy_expf(x[i]);
            double e = exp((double)x[i]);
            if (isnan(x[i])) {
                if (!isnan(want[i])) fail_msg("sy_expf(nan) = %g", want[i]);
            } else if (e >= FLT_MIN && e <= FLT_MAX) {
                double ulp = (double)nextafterf((float)e, INFINITY) - (double)(float)e;
                double err = fabs((double)want[i] - e) / ulp;
                if (err > worst) worst = err;
            } else if (e > FLT_MAX && want[i] != INFINITY) {
                fail_msg("sy_expf(%a) = %a, want +inf", x[i], want[i]);
            } else if (e < 0x1p-150 && want[i] != 0.0f) {
                fail_msg("sy_expf(%a) = %a, want 0", x[i], want[i]);
            }
#ifdef __GLIBC__
            float libm = expf(x[i]);
            if (memcmp(&libm, &want[i], sizeof libm) != 0 && !(isnan(libm) && isnan(want[i]))) libm_differs++;
#endif
        }
        for (int t = 0; t < n_tiers; t++) {
            size_t off = (size_t)t % 5; /* shift the lanes an element lands in */
            tiers[t]->exp_f32(x + off, got, n - off);
            for (size_t i = 0; i + off < n; i++)
                if (memcmp(&got[i], &want[i + off], sizeof got[i]) != 0 && !(isnan(got[i]) && isnan(want[i + off])))
                    fail_msg("%s exp_f32(%a) = %a, sy_expf %a", tiers[t]->name, x[i + off], got[i], want[i + off]);
        }
    }
    if (worst > 0.51) fail_msg("sy_expf: %.3f ulp from e^x", worst);
    if (libm_differs != 0) fail_msg("sy_expf differs from glibc's expf on %zu inputs", libm_differs);
    const float edge[] = {-INFINITY, -104.0f, 0.0f, -0.0f, 89.0f, INFINITY};
    const float edge_want[] = {0.0f, 0.0f, 1.0f, 1.0f, INFINITY, INFINITY};
    for (size_t i = 0; i < 6; i++)
        if (sy_expf(edge[i]) != edge_want[i]) fail_msg("sy_expf(%g) = %g", edge[i], sy_expf(edge[i]));
}

/* The GELU of every tier against x/2 (1 + erf(x / sqrt 2)) in double precision, over -10..10 in steps of 1/1024 and
 * the edges: within 4 ulp of erf's error bound plus float rounding (libmvec's erff is within 4 ulp), each element
 * with the bits it gets alone (the tails go through a whole vector), and NaN, infinities and signed zero kept. */
static void test_gelu(void **state) {
    (void)state;
    const sy_kernels *tiers[SY_CPU_TIER_COUNT_];
    int n_tiers = tiers_under_test(tiers);
    enum { N = 20481 };
    float *x = xmalloc(N * sizeof(float)), *got = xmalloc(N * sizeof(float));
    for (size_t i = 0; i < N; i++) x[i] = (float)((double)i / 1024.0 - 10.0);
    for (int t = 0; t < n_tiers; t++) {
        tiers[t]->gelu_f32(x, got, N);
        for (size_t i = 0; i < N; i++) {
            double v = x[i], ref = 0.5 * v * (1.0 + erf(v * M_SQRT1_2));
            /* erf's error of 4 ulp of 1 at most, times |x| / 2, and the result's own rounding */
            double tol = 4.0 * 0x1p-23 * fabs(v) + 2.0 * 0x1p-24 * fabs(ref) + 1e-30;
            if (!(fabs((double)got[i] - ref) <= tol))
                fail_msg("%s gelu(%.9g) = %.9g, want %.9g", tiers[t]->name, v, (double)got[i], ref);
            if (i % 97 == 0) {
                float alone;
                tiers[t]->gelu_f32(&x[i], &alone, 1);
                if (memcmp(&alone, &got[i], sizeof alone) != 0)
                    fail_msg("%s gelu(%.9g): %a in a row, %a alone", tiers[t]->name, v, (double)got[i], (double)alone);
            }
        }
        const float edge[] = {NAN, INFINITY, -INFINITY, -0.0f, 0.0f};
        float out[5];
        tiers[t]->gelu_f32(edge, out, 5);
        if (!isnan(out[0]) || out[1] != INFINITY || !(out[2] == 0.0f || isnan(out[2])) || out[3] != 0.0f ||
            !signbit(out[3]) || out[4] != 0.0f || signbit(out[4]))
            fail_msg("%s gelu of NaN, inf, -inf, -0, 0: %g %g %g %g %g", tiers[t]->name, (double)out[0],
                     (double)out[1], (double)out[2], (double)out[3], (double)out[4]);
    }
    free(x);
    free(got);
}

static void test_attend(void **state) {
    (void)state;
    const sy_kernels *tiers[SY_CPU_TIER_COUNT_];
    int n_tiers = tiers_under_test(tiers);
    const size_t head_dims[] = {8, 16, 48, 64, 80, 128, 144};
    const size_t n_keys = 300, blocks[] = {1, 7, 128, 164}; /* cut into blocks of these sizes, in turn */
    for (size_t hi = 0; hi < sizeof head_dims / sizeof head_dims[0]; hi++) {
        size_t hd = head_dims[hi], stride = hd * 2 + 3; /* K and V rows of a wider cache, unaligned */
        float *q = xmalloc(hd * sizeof(float)), *KV = xmalloc((n_keys * stride + hd) * sizeof(float));
        fill_random(q, hd, 1.0f);
        fill_random(KV, n_keys * stride + hd, 1.0f);
        const float *K = KV, *V = KV + hd + 1;
        const float scale = 1.0f / sqrtf((float)hd) * 4.0f; /* sharp enough that the maximum moves */
        for (int t = 0; t < n_tiers; t++) {
            float max_a = -INFINITY, sum_a = 0.0f, max_b = -INFINITY, sum_b = 0.0f;
            float *out_a = xmalloc(hd * sizeof(float)), *out_b = xmalloc(hd * sizeof(float));
            memset(out_a, 0, hd * sizeof(float));
            memset(out_b, 0, hd * sizeof(float));
            for (size_t p0 = 0, bi = 0; p0 < n_keys; bi++) {
                size_t nb = blocks[bi % 4] < n_keys - p0 ? blocks[bi % 4] : n_keys - p0;
                tiers[t]->attend_f32(q, K + p0 * stride, V + p0 * stride, stride, nb, hd, scale, &max_a, &sum_a, out_a);
                attend_reference_loop(tiers[t], q, K + p0 * stride, V + p0 * stride, stride, nb, hd, scale, &max_b,
                                      &sum_b, out_b);
                p0 += nb;
            }
            if (memcmp(&max_a, &max_b, sizeof max_a) != 0 || memcmp(&sum_a, &sum_b, sizeof sum_a) != 0 ||
                memcmp(out_a, out_b, hd * sizeof(float)) != 0)
                fail_msg("%s attend_f32 hd=%zu differs from its dot_f32 + axpy_f32 loop", tiers[t]->name, hd);
            /* the softmax-weighted sum of V in double precision */
            double mx = -INFINITY, den = 0.0;
            for (size_t i = 0; i < n_keys; i++) {
                double d = 0.0;
                for (size_t j = 0; j < hd; j++) d += (double)q[j] * K[i * stride + j];
                if (d * scale > mx) mx = d * scale;
            }
            for (size_t j = 0; j < hd; j++) {
                double num = 0.0;
                den = 0.0;
                for (size_t i = 0; i < n_keys; i++) {
                    double d = 0.0;
                    for (size_t u = 0; u < hd; u++) d += (double)q[u] * K[i * stride + u];
                    double e = exp(d * scale - mx);
                    den += e;
                    num += e * V[i * stride + j];
                }
                double got = out_a[j] / sum_a, want = num / den;
                if (!(fabs(got - want) <= 1e-4 * (fabs(want) + 0.1)))
                    fail_msg("%s attend_f32 hd=%zu element %zu: %.9g, exact %.9g", tiers[t]->name, hd, j, got, want);
            }
            free(out_a);
            free(out_b);
        }
        free(q);
        free(KV);
    }
}

/* ---- matmul on F32/F16/BF16 weights ---- */

/* Builds rows x k weights of wtype with row_bytes = packed + pad bytes, at a misaligned address when misalign
 * is set; returns the allocation (W points inside) and fills Wf with the exact f32 values of the weights. */
static uint8_t *make_float_weights(sy_dtype wtype, size_t rows, size_t k, size_t pad, int misalign,
                                   const uint8_t **W, size_t *row_bytes, float *Wf) {
    size_t esize = wtype == SY_DTYPE_F32 ? 4 : 2;
    *row_bytes = k * esize + pad;
    uint8_t *mem = xmalloc(rows * *row_bytes + 8);
    uint8_t *base = mem + (misalign ? (wtype == SY_DTYPE_F32 ? 4 : 2) : 0);
    for (size_t r = 0; r < rows; r++) {
        for (size_t i = 0; i < k; i++) {
            float v = rng_float() * 2.0f;
            uint8_t *dst = base + r * *row_bytes + i * esize;
            if (wtype == SY_DTYPE_F32) {
                memcpy(dst, &v, 4);
            } else {
                uint16_t h = wtype == SY_DTYPE_F16 ? sy_f32_to_f16(v) : sy_f32_to_bf16(v);
                v = wtype == SY_DTYPE_F16 ? sy_f16_to_f32(h) : sy_bf16_to_f32(h);
                memcpy(dst, &h, 2);
            }
            Wf[r * k + i] = v;
        }
        memset(base + r * *row_bytes + k * esize, 0xff, pad); /* NaN-ish padding must never be read */
    }
    *W = base;
    return mem;
}

typedef struct matmul_case {
    size_t rows, row_begin, row_end, k, n_batch, ldx_extra, ldy_extra, pad;
    int misalign;
} matmul_case;

static const matmul_case float_cases[] = {
    {1, 0, 1, 1, 1, 0, 0, 0, 0},       {3, 0, 3, 7, 1, 0, 0, 0, 1},     {5, 1, 4, 16, 2, 3, 1, 4, 0},
    {9, 2, 9, 33, 3, 1, 2, 0, 1},      {17, 0, 17, 64, 5, 0, 0, 8, 0},  {13, 3, 11, 127, 7, 5, 3, 2, 1},
    {33, 0, 33, 896, 1, 0, 0, 0, 0},   {20, 4, 19, 1100, 9, 1, 1, 6, 1}, {8, 0, 8, 513, 17, 2, 0, 0, 0},
    {6, 0, 6, 2048, 4, 0, 5, 0, 1},    {4, 2, 2, 32, 3, 0, 0, 0, 0} /* empty row range */,
    {19, 1, 18, 4100, 17, 1, 2, 0, 1} /* AVX-512 BF16: the batch in two chunks of the stack buffer */,
    {3, 0, 3, 33000, 2, 0, 0, 2, 0} /* AVX-512 BF16: k past its buffer, the 16-wide tiles */,
};

static void check_float_matmul(sy_dtype wtype) {
    const sy_kernels *tiers[SY_CPU_TIER_COUNT_];
    int n_tiers = tiers_under_test(tiers);
    for (size_t ci = 0; ci < sizeof float_cases / sizeof float_cases[0]; ci++) {
        const matmul_case *mc = &float_cases[ci];
        size_t ldx = mc->k + mc->ldx_extra, ldy = mc->rows + mc->ldy_extra;
        float *Wf = xmalloc(mc->rows * mc->k * sizeof(float));
        const uint8_t *W;
        size_t row_bytes;
        uint8_t *mem = make_float_weights(wtype, mc->rows, mc->k, mc->pad, mc->misalign, &W, &row_bytes, Wf);
        float *X = xmalloc(mc->n_batch * ldx * sizeof(float));
        fill_random(X, mc->n_batch * ldx, 1.5f);
        float *Ys = xmalloc(mc->n_batch * ldy * sizeof(float));
        float *Yt = xmalloc(mc->n_batch * ldy * sizeof(float));
        for (size_t i = 0; i < mc->n_batch * ldy; i++) Ys[i] = -12345.0f;
        assert_int_equal(scalar()->matmul(wtype, W, row_bytes, mc->row_begin, mc->row_end, mc->k, X, mc->n_batch,
                                          ldx, Ys, ldy),
                         SY_KERNEL_OK);
        for (size_t b = 0; b < mc->n_batch; b++) {
            for (size_t r = 0; r < mc->rows; r++) {
                float got = Ys[b * ldy + r];
                if (r < mc->row_begin || r >= mc->row_end) {
                    assert_true(got == -12345.0f); /* outside the row range: untouched */
                    continue;
                }
                double ref = 0.0, mag = 0.0;
                for (size_t i = 0; i < mc->k; i++) {
                    ref += (double)Wf[r * mc->k + i] * X[b * ldx + i];
                    mag += fabs((double)Wf[r * mc->k + i] * X[b * ldx + i]);
                }
                if (!(fabs(got - ref) <= 2e-6 * mag + 1e-30))
                    fail_msg("scalar %s case %zu b=%zu r=%zu: %.9g vs %.9g", sy_dtype_get(wtype)->name, ci, b, r,
                             (double)got, ref);
            }
        }
        for (int t = 0; t < n_tiers; t++) {
            for (size_t i = 0; i < mc->n_batch * ldy; i++) Yt[i] = -12345.0f;
            assert_int_equal(tiers[t]->matmul(wtype, W, row_bytes, mc->row_begin, mc->row_end, mc->k, X,
                                              mc->n_batch, ldx, Yt, ldy),
                             SY_KERNEL_OK);
            for (size_t b = 0; b < mc->n_batch; b++) {
                for (size_t r = 0; r < mc->rows; r++) {
                    float s = Ys[b * ldy + r], v = Yt[b * ldy + r];
                    double mag = 0.0;
                    for (size_t i = 0; i < mc->k; i++) mag += fabs((double)Wf[r * mc->k + i] * X[b * ldx + i]);
                    if (!(fabs((double)v - s) <= 4e-6 * mag + 1e-30))
                        fail_msg("%s %s case %zu b=%zu r=%zu: %.9g vs scalar %.9g", tiers[t]->name,
                                 sy_dtype_get(wtype)->name, ci, b, r, (double)v, (double)s);
                }
            }
            /* BF16 on the AVX-512 kernel (sy_kernels_bf16_avx512.c, rows up to its buffer): each row of the batch
             * gives the same bits alone (batch invariance) */
            bool invariant = wtype == SY_DTYPE_BF16 && tiers[t]->tier >= SY_CPU_TIER_AVX512 &&
                             mc->k <= SY_BF16_AVX512_MAX_K;
            if (invariant && mc->row_end > mc->row_begin) {
                float *Y1 = xmalloc(ldy * sizeof(float));
                for (size_t b = 0; b < mc->n_batch; b++) {
                    assert_int_equal(tiers[t]->matmul(wtype, W, row_bytes, mc->row_begin, mc->row_end, mc->k,
                                                      X + b * ldx, 1, ldx, Y1, ldy),
                                     SY_KERNEL_OK);
                    for (size_t r = mc->row_begin; r < mc->row_end; r++)
                        if (f32_to_bits(Y1[r]) != f32_to_bits(Yt[b * ldy + r]))
                            fail_msg("%s bf16 case %zu: row %zu of a batch of %zu gives %.9g, alone %.9g",
                                     tiers[t]->name, ci, b, mc->n_batch, (double)Yt[b * ldy + r], (double)Y1[r]);
                }
                free(Y1);
            }
            /* the columns between rows and ldy are never written */
            for (size_t b = 0; b < mc->n_batch; b++)
                for (size_t r = mc->rows; r < ldy; r++) assert_true(Yt[b * ldy + r] == -12345.0f);
        }
        free(Wf);
        free(mem);
        free(X);
        free(Ys);
        free(Yt);
    }
}

static void test_matmul_f32(void **state) {
    (void)state;
    check_float_matmul(SY_DTYPE_F32);
}
static void test_matmul_f16(void **state) {
    (void)state;
    check_float_matmul(SY_DTYPE_F16);
}
static void test_matmul_bf16(void **state) {
    (void)state;
    check_float_matmul(SY_DTYPE_BF16);
}

/* ---- the tier's one-line description (switchyard plugins) ---- */

static void test_kernels_describe(void **state) {
    (void)state;
    char line[200];
    for (int t = 0; t < SY_CPU_TIER_COUNT_; t++) {
        const sy_kernels *k = sy_kernels_for_tier((sy_cpu_tier)t);
        if (k == NULL) continue;
        sy_kernels_describe(k, line, sizeof line);
        assert_int_equal(strncmp(line, k->name, strlen(k->name)), 0);
        assert_non_null(strstr(line, "bf16: "));
        assert_non_null(strstr(line, "q8_0: "));
        const char *why = sy_cpu_tier_unavailable_reason(SY_CPU_TIER_AMX);
        if (t == SY_CPU_TIER_AMX) {
            assert_null(strstr(line, "amx unavailable"));
        } else if (why != NULL) { /* the reason itself, from the CPU or the kernel */
            assert_non_null(strstr(line, "amx unavailable: "));
            assert_non_null(strstr(line, why));
        } else {
            assert_non_null(strstr(line, "amx not used: SY_CPU_TIER forced a lower tier"));
        }
    }
    /* cut to the buffer, NUL-terminated */
    char tiny[8];
    sy_kernels_describe(sy_kernels_for_tier(SY_CPU_TIER_SCALAR), tiny, sizeof tiny);
    assert_int_equal(strlen(tiny), 7);
    assert_string_equal(sy_kernels_describe(NULL, line, sizeof line), "none");
}

/* ---- quantized blocks ---- */

typedef struct quant_layout {
    sy_dtype type;
    int d_offset;    /* f16 scale */
    int dmin_offset; /* f16 min/offset, -1 if none */
    float d_max;     /* scale magnitude used for random blocks */
} quant_layout;

static const quant_layout quant_layouts[] = {
    {SY_DTYPE_Q8_0, 0, -1, 0.02f},  {SY_DTYPE_Q4_0, 0, -1, 0.2f},  {SY_DTYPE_Q4_1, 0, 2, 0.2f},
    {SY_DTYPE_Q5_0, 0, -1, 0.1f},   {SY_DTYPE_Q5_1, 0, 2, 0.1f},   {SY_DTYPE_Q2_K, 80, 82, 0.05f},
    {SY_DTYPE_Q3_K, 108, -1, 0.02f}, {SY_DTYPE_Q4_K, 0, 2, 0.02f}, {SY_DTYPE_Q5_K, 0, 2, 0.01f},
    {SY_DTYPE_Q6_K, 208, -1, 0.005f},
};

static void put_f16(uint8_t *p, float v) {
    uint16_t h = sy_f32_to_f16(v);
    p[0] = (uint8_t)h;
    p[1] = (uint8_t)(h >> 8);
}

/* Random blocks: random bytes, then sane random scales. */
static void fill_random_blocks(const quant_layout *ql, uint8_t *row, size_t n_blocks) {
    const sy_dtype_traits *tr = sy_dtype_get(ql->type);
    for (size_t blk = 0; blk < n_blocks; blk++) {
        uint8_t *b = row + blk * tr->block_bytes;
        for (uint32_t i = 0; i < tr->block_bytes; i++) b[i] = (uint8_t)rng_next();
        put_f16(b + ql->d_offset, ql->d_max * (0.1f + 0.9f * fabsf(rng_float())) * (rng_next() & 1 ? 1.0f : -1.0f));
        if (ql->dmin_offset >= 0) put_f16(b + ql->dmin_offset, ql->d_max * rng_float() * 4.0f);
    }
}

typedef struct quant_case {
    size_t rows, row_begin, row_end, blocks_per_row, n_batch, ldx_extra, ldy_extra, pad;
} quant_case;

static const quant_case quant_cases[] = {
    {1, 0, 1, 1, 1, 0, 0, 0},   {3, 0, 3, 4, 1, 5, 0, 0},   {7, 2, 6, 3, 2, 0, 2, 3},
    {9, 0, 9, 5, 7, 1, 1, 1},   {16, 1, 15, 8, 3, 0, 0, 0}, {4, 0, 4, 9, 17, 3, 0, 2},
};

static void check_quant_matmul(const quant_layout *ql) {
    const sy_kernels *tiers[SY_CPU_TIER_COUNT_];
    int n_tiers = tiers_under_test(tiers);
    const sy_dtype_traits *tr = sy_dtype_get(ql->type);
    for (size_t ci = 0; ci < sizeof quant_cases / sizeof quant_cases[0]; ci++) {
        const quant_case *qc = &quant_cases[ci];
        /* 32-element blocks get longer rows so rows span several of the scalar tier's unpack chunks */
        size_t n_blocks = qc->blocks_per_row * (tr->block_elems == 32 ? 9 : 1);
        size_t k = n_blocks * tr->block_elems;
        size_t row_bytes = n_blocks * tr->block_bytes + qc->pad;
        uint8_t *W = xmalloc(qc->rows * row_bytes);
        float *Wf = xmalloc(qc->rows * k * sizeof(float));
        for (size_t r = 0; r < qc->rows; r++) {
            fill_random_blocks(ql, W + r * row_bytes, n_blocks);
            assert_int_equal(sy_dequantize_row(ql->type, W + r * row_bytes, row_bytes, Wf + r * k, k), SY_KERNEL_OK);
        }
        size_t ldx = k + qc->ldx_extra, ldy = qc->rows + qc->ldy_extra;
        float *X = xmalloc(qc->n_batch * ldx * sizeof(float));
        fill_random(X, qc->n_batch * ldx, 1.0f);
        /* one block of large values, one of zeros: scale extremes */
        for (size_t i = 0; i < 32 && i < k; i++) X[i] *= 100.0f;
        if (qc->n_batch > 1 && k >= 64)
            for (size_t i = 32; i < 64; i++) X[ldx + i] = 0.0f;
        float *Ys = xmalloc(qc->n_batch * ldy * sizeof(float));
        float *Yt = xmalloc(qc->n_batch * ldy * sizeof(float));
        for (size_t i = 0; i < qc->n_batch * ldy; i++) Ys[i] = -12345.0f;
        assert_int_equal(scalar()->matmul(ql->type, W, row_bytes, qc->row_begin, qc->row_end, k, X, qc->n_batch, ldx,
                                          Ys, ldy),
                         SY_KERNEL_OK);
        for (size_t b = 0; b < qc->n_batch; b++) {
            for (size_t r = 0; r < qc->rows; r++) {
                float got = Ys[b * ldy + r];
                if (r < qc->row_begin || r >= qc->row_end) {
                    assert_true(got == -12345.0f);
                    continue;
                }
                /* exact dot with the dequantized weights; the activations' 8-bit rounding moves each product by
                 * at most |w| * amax / 254, which bounds the difference */
                double ref = 0.0, bound = 0.0, mag = 0.0;
                for (size_t blk = 0; blk < k / 32; blk++) {
                    double amax = 0.0;
                    for (size_t i = 0; i < 32; i++) amax = fmax(amax, fabs((double)X[b * ldx + blk * 32 + i]));
                    for (size_t i = 0; i < 32; i++) {
                        double w = Wf[r * k + blk * 32 + i], x = X[b * ldx + blk * 32 + i];
                        ref += w * x;
                        mag += fabs(w * x) + fabs(w) * amax / 254.0;
                        bound += fabs(w) * amax / 254.0;
                    }
                }
                if (!(fabs(got - ref) <= bound * 1.0001 + 1e-5 * mag + 1e-30))
                    fail_msg("scalar %s case %zu b=%zu r=%zu: %.9g vs %.9g (bound %.3g)", tr->name, ci, b, r,
                             (double)got, ref, bound);
            }
        }
        /* the quantization error must actually be small relative to the result's scale */
        for (int t = 0; t < n_tiers; t++) {
            for (size_t i = 0; i < qc->n_batch * ldy; i++) Yt[i] = -12345.0f;
            assert_int_equal(tiers[t]->matmul(ql->type, W, row_bytes, qc->row_begin, qc->row_end, k, X, qc->n_batch,
                                              ldx, Yt, ldy),
                             SY_KERNEL_OK);
            for (size_t b = 0; b < qc->n_batch; b++) {
                for (size_t r = 0; r < ldy; r++) {
                    float s = Ys[b * ldy + r], v = Yt[b * ldy + r];
                    if (r < qc->row_begin || r >= qc->row_end) {
                        assert_true(v == -12345.0f);
                        continue;
                    }
                    double mag = 0.0;
                    for (size_t i = 0; i < k; i++) mag += fabs((double)Wf[r * k + i] * X[b * ldx + i]);
                    if (!(fabs((double)v - s) <= 1e-5 * mag + 1e-30))
                        fail_msg("%s %s case %zu b=%zu r=%zu: %.9g vs scalar %.9g", tiers[t]->name, tr->name, ci, b,
                                 r, (double)v, (double)s);
                }
            }
            /* the pre-quantized entry point gives the same answer */
            size_t qx_bytes = sy_quantize_x_bytes(k, qc->n_batch);
            assert_true(qx_bytes > 0);
            void *QX = xmalloc(qx_bytes);
            assert_int_equal(sy_quantize_x(X, qc->n_batch, ldx, k, QX), SY_KERNEL_OK);
            float *Yq = xmalloc(qc->n_batch * ldy * sizeof(float));
            for (size_t i = 0; i < qc->n_batch * ldy; i++) Yq[i] = -12345.0f;
            assert_int_equal(tiers[t]->matmul_qx(ql->type, W, row_bytes, qc->row_begin, qc->row_end, k, QX,
                                                 qc->n_batch, Yq, ldy),
                             SY_KERNEL_OK);
            assert_memory_equal(Yq, Yt, qc->n_batch * ldy * sizeof(float));
            free(Yq);
            free(QX);
        }
        free(W);
        free(Wf);
        free(X);
        free(Ys);
        free(Yt);
    }
}

static void test_matmul_quantized(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof quant_layouts / sizeof quant_layouts[0]; i++) check_quant_matmul(&quant_layouts[i]);
}

/* ---- dequantization: known values ---- */

static void expect_values(const float *got, const int *index, const float *want, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (got[index[i]] != want[i])
            fail_msg("element %d: got %.9g, want %.9g", index[i], (double)got[index[i]], (double)want[i]);
    }
}

static void test_dequant_q4_0_q4_1_q8_0(void **state) {
    (void)state;
    float y[32];
    uint8_t b[34];
    memset(b, 0, sizeof b);
    put_f16(b, 0.5f);
    b[2] = 0xf0; /* element 0: 0 - 8, element 16: 15 - 8 */
    b[3] = 0x39; /* element 1: 9 - 8, element 17: 3 - 8 */
    assert_int_equal(sy_dequantize_row(SY_DTYPE_Q4_0, b, 18, y, 32), SY_KERNEL_OK);
    expect_values(y, (const int[]){0, 16, 1, 17, 5}, (const float[]){-4.0f, 3.5f, 0.5f, -2.5f, -4.0f}, 5);

    memset(b, 0, sizeof b);
    put_f16(b, 0.25f);
    put_f16(b + 2, -1.0f);
    b[4] = 0xf0;
    b[19] = 0x7a; /* element 15: 10, element 31: 7 */
    assert_int_equal(sy_dequantize_row(SY_DTYPE_Q4_1, b, 20, y, 32), SY_KERNEL_OK);
    expect_values(y, (const int[]){0, 16, 15, 31, 2}, (const float[]){-1.0f, 2.75f, 1.5f, 0.75f, -1.0f}, 5);

    memset(b, 0, sizeof b);
    put_f16(b, 0.125f);
    b[2] = 0x80;  /* -128 */
    b[3] = 0x7f;  /* 127 */
    b[33] = 0xfe; /* -2 */
    assert_int_equal(sy_dequantize_row(SY_DTYPE_Q8_0, b, 34, y, 32), SY_KERNEL_OK);
    expect_values(y, (const int[]){0, 1, 31, 2}, (const float[]){-16.0f, 15.875f, -0.25f, 0.0f}, 4);
}

static void test_dequant_q5_0_q5_1(void **state) {
    (void)state;
    float y[32];
    uint8_t b[24];
    memset(b, 0, sizeof b);
    put_f16(b, 1.0f);
    b[2] = 0x01; /* qh bit 0: element 0 */
    b[4] = 0x01; /* qh bit 16: element 16 */
    b[5] = 0x80; /* qh bit 31: element 31 */
    b[6] = 0x21; /* element 0: 1 | 16, element 16: 2 | 16 */
    b[7] = 0x3f; /* element 1: 15, element 17: 3 */
    b[21] = 0xe0; /* element 15: 0, element 31: 14 | 16 */
    assert_int_equal(sy_dequantize_row(SY_DTYPE_Q5_0, b, 22, y, 32), SY_KERNEL_OK);
    expect_values(y, (const int[]){0, 16, 1, 17, 15, 31},
                  (const float[]){1.0f, 2.0f, -1.0f, -13.0f, -16.0f, 14.0f}, 6);

    memset(b, 0, sizeof b);
    put_f16(b, 0.5f);
    put_f16(b + 2, 2.0f);
    b[4] = 0x02;  /* element 1 */
    b[7] = 0x40;  /* bit 30: element 30 */
    b[9] = 0x0f;  /* element 1: 15 | 16 = 31 */
    b[22] = 0x50; /* element 30: 5 | 16 = 21 (high nibble of qs[14]) */
    assert_int_equal(sy_dequantize_row(SY_DTYPE_Q5_1, b, 24, y, 32), SY_KERNEL_OK);
    expect_values(y, (const int[]){0, 1, 30, 14}, (const float[]){2.0f, 17.5f, 12.5f, 2.0f}, 4);
}

static void test_dequant_q2_k(void **state) {
    (void)state;
    float y[256];
    uint8_t b[84];
    memset(b, 0, sizeof b);
    for (int i = 0; i < 16; i++) b[i] = (uint8_t)((i & 15) | (1 << 4)); /* scale i, min 1 */
    b[16 + 0] = 0xe4;  /* qs[0]: shifts 0,2,4,6 give 0,1,2,3 */
    b[16 + 37] = 0x0c; /* qs[37] (n=1, l=5): j=1 gives 3 */
    put_f16(b + 80, 0.5f);
    put_f16(b + 82, 0.25f);
    assert_int_equal(sy_dequantize_row(SY_DTYPE_Q2_K, b, 84, y, 256), SY_KERNEL_OK);
    /* element 128n + 32j + l: sub-block 8n + 2j + l/16 */
    expect_values(y, (const int[]){0, 32, 64, 96, 128 + 32 + 5, 20},
                  (const float[]){0.0f * 0.5f - 0.25f, 0.5f * 2 * 1 - 0.25f, 0.5f * 4 * 2 - 0.25f,
                                  0.5f * 6 * 3 - 0.25f, 0.5f * 10 * 3 - 0.25f, -0.25f},
                  6);
}

static void test_dequant_q3_k(void **state) {
    (void)state;
    float y[256];
    uint8_t b[110];
    memset(b, 0, sizeof b);
    memset(b, 0xff, 32);  /* hmask: all high bits set (no -4) */
    b[5] = 0xfe;          /* element 5 (n=0, j=0): high bit clear, so q = low - 4 */
    memset(b + 32, 0xe4, 64); /* low bits: j gives j */
    for (int i = 0; i < 8; i++) b[96 + i] = 0x21; /* low nibbles 1 (scales 0-7), high nibbles 2 (8-15) */
    for (int i = 8; i < 12; i++) b[96 + i] = 0xe4; /* high 2 bits: 0,1,2,3 for scale groups 0-3,4-7,8-11,12-15 */
    put_f16(b + 108, 1.0f);
    assert_int_equal(sy_dequantize_row(SY_DTYPE_Q3_K, b, 110, y, 256), SY_KERNEL_OK);
    /* scale of sub-block i: 1 + 16*0 - 32 = -31 (i<4), 1 + 16 - 32 = -15 (4..7), 2 + 32 - 32 = 2 (8..11),
     * 2 + 48 - 32 = 18 (12..15) */
    expect_values(y, (const int[]){0, 5, 32, 80, 160, 192, 244},
                  (const float[]){0.0f, 124.0f, -31.0f, -30.0f, 2.0f * 1, 18.0f * 2, 18.0f * 3}, 7);
}

static void test_dequant_q4_k_q5_k(void **state) {
    (void)state;
    float y[256];
    uint8_t b[176];
    memset(b, 0, sizeof b);
    put_f16(b, 0.5f);
    put_f16(b + 2, 0.25f);
    /* sub-blocks 0-3: scale s[j] & 63, min s[j+4] & 63; 4-7: scale low nibble of s[j+4] | top bits of s[j-4] */
    b[4 + 0] = 3;           /* scale 0 = 3 */
    b[4 + 4] = 5;           /* min 0 = 5 */
    b[4 + 1] = 0x40 | 7;    /* scale 1 = 7; top bits 01 go to scale 5 */
    b[4 + 5] = 0x80 | 2;    /* min 1 = 2; top bits 10 go to min 5 */
    b[4 + 9] = 0x9a;        /* sub-block 5: scale low nibble 10, min low nibble 9 */
    b[16 + 0] = 0xf2;       /* element 0: 2 (sub-block 0), element 32: 15 (sub-block 1) */
    b[16 + 64 + 3] = 0x60;  /* element 128+32+3 = 163 in sub-block 5: 6 */
    assert_int_equal(sy_dequantize_row(SY_DTYPE_Q4_K, b, 144, y, 256), SY_KERNEL_OK);
    /* scale 5 = 10 | 1<<4 = 26, min 5 = 9 | 2<<4 = 41 */
    expect_values(y, (const int[]){0, 32, 163, 1},
                  (const float[]){0.5f * 3 * 2 - 0.25f * 5, 0.5f * 7 * 15 - 0.25f * 2, 0.5f * 26 * 6 - 0.25f * 41,
                                  -0.25f * 5},
                  4);

    /* Q5_K: the same scales, qh[32] at 16, qs at 48 */
    uint8_t c[176];
    memset(c, 0, sizeof c);
    memcpy(c, b, 16);
    c[16 + 3] = 0x08;  /* qh[3] bit 3 = 2*1+1: element 64*1 + 32 + 3 = 99 (sub-block 3) gets +16 */
    c[16 + 0] = 0x01;  /* qh[0] bit 0: element 0 gets +16 */
    c[48 + 0] = 0xf2;
    c[48 + 32 + 3] = 0x40; /* element 99: 4 (+16) */
    assert_int_equal(sy_dequantize_row(SY_DTYPE_Q5_K, c, 176, y, 256), SY_KERNEL_OK);
    /* sub-block 3: scale s[3] & 63 = 0 ... set nonzero below */
    expect_values(y, (const int[]){0, 32}, (const float[]){0.5f * 3 * 18 - 0.25f * 5, 0.5f * 7 * 15 - 0.25f * 2}, 2);
    c[4 + 3] = 9;  /* scale 3 = 9 */
    c[4 + 7] = 4;  /* min 3 = 4 */
    assert_int_equal(sy_dequantize_row(SY_DTYPE_Q5_K, c, 176, y, 256), SY_KERNEL_OK);
    expect_values(y, (const int[]){99}, (const float[]){0.5f * 9 * 20 - 0.25f * 4}, 1);
}

static void test_dequant_q6_k_q8_k(void **state) {
    (void)state;
    float y[256];
    uint8_t b[292];
    memset(b, 0, sizeof b);
    /* ql[128], qh[64], scales[16], d */
    for (int i = 0; i < 16; i++) b[192 + i] = (uint8_t)(int8_t)(i - 8); /* scale of sub-block i: i - 8 */
    put_f16(b + 208, 0.5f);
    b[0] = 0x5a;       /* element 0: low 10, element 64: low 5 */
    b[32] = 0x3c;      /* element 32: low 12, element 96: low 3 */
    b[128] = 0xe4;     /* high bits: element 0: 0, element 32: 1, element 64: 2, element 96: 3 */
    b[64 + 17] = 0x07; /* n=1, l=17: element 128+17 low 7 */
    b[128 + 32 + 17] = 0x03; /* its high bits 3: 7 | 48 = 55 */
    assert_int_equal(sy_dequantize_row(SY_DTYPE_Q6_K, b, 210, y, 256), SY_KERNEL_OK);
    /* element 128n + 32m + l: sub-block 8n + 2m + l/16 */
    expect_values(y, (const int[]){0, 32, 64, 96, 145, 1},
                  (const float[]){0.5f * -8 * (10 - 32), 0.5f * -6 * (12 + 16 - 32), 0.5f * -4 * (5 + 32 - 32),
                                  0.5f * -2 * (3 + 48 - 32), 0.5f * 1 * (55 - 32), 0.5f * -8 * -32},
                  6);

    memset(b, 0, sizeof b);
    float d = 0.75f;
    memcpy(b, &d, 4);
    b[4] = 0x80;
    b[4 + 255] = 3;
    assert_int_equal(sy_dequantize_row(SY_DTYPE_Q8_K, b, 292, y, 256), SY_KERNEL_OK);
    expect_values(y, (const int[]){0, 255, 1}, (const float[]){-96.0f, 2.25f, 0.0f}, 3);
}

static void test_dequant_rejects_bad_input(void **state) {
    (void)state;
    uint8_t b[300] = {0};
    float y[512];
    assert_int_equal(sy_dequantize_row(SY_DTYPE_Q4_0, b, 18, y, 31), SY_KERNEL_EINVAL);   /* not a block */
    assert_int_equal(sy_dequantize_row(SY_DTYPE_Q4_0, b, 35, y, 64), SY_KERNEL_EINVAL);   /* src too small */
    assert_int_equal(sy_dequantize_row(SY_DTYPE_Q6_K, b, 209, y, 256), SY_KERNEL_EINVAL);
    assert_int_equal(sy_dequantize_row((sy_dtype)4, b, 300, y, 32), SY_KERNEL_EINVAL);    /* hole in the ids */
    assert_int_equal(sy_dequantize_row((sy_dtype)200, b, 300, y, 32), SY_KERNEL_EINVAL);
    assert_int_equal(sy_dequantize_row(SY_DTYPE_Q8_1, b, 300, y, 32), SY_KERNEL_EINVAL);
    assert_int_equal(sy_dequantize_row(SY_DTYPE_Q4_0, NULL, 300, y, 32), SY_KERNEL_EINVAL);
    assert_int_equal(sy_dequantize_row(SY_DTYPE_Q4_0, b, 300, NULL, 32), SY_KERNEL_EINVAL);
    assert_int_equal(sy_dequantize_row(SY_DTYPE_F16, b, 300, y, 151), SY_KERNEL_EINVAL);
    assert_int_equal(sy_dequantize_row(SY_DTYPE_F16, b, 300, y, 150), SY_KERNEL_OK);
    assert_int_equal(sy_dequantize_row(SY_DTYPE_Q4_0, b, 0, y, 0), SY_KERNEL_OK);
    assert_int_equal(sy_dequantize_row(SY_DTYPE_Q4_0, b, 300, y, SIZE_MAX - 31), SY_KERNEL_EINVAL);
}

/* ---- argument checks ---- */

static void test_matmul_rejects_bad_arguments(void **state) {
    (void)state;
    float W[64] = {0}, X[64] = {0}, Y[64];
    const sy_kernels *tiers[SY_CPU_TIER_COUNT_];
    int n_tiers = tiers_under_test(tiers);
    for (int t = 0; t < n_tiers; t++) {
        const sy_kernels *kt = tiers[t];
        assert_int_equal(kt->matmul((sy_dtype)4, W, 16, 0, 1, 4, X, 1, 4, Y, 1), SY_KERNEL_EINVAL);
        assert_int_equal(kt->matmul(SY_DTYPE_Q8_1, W, 36, 0, 1, 32, X, 1, 32, Y, 1), SY_KERNEL_EINVAL);
        assert_int_equal(kt->matmul(SY_DTYPE_F32, W, 15, 0, 1, 4, X, 1, 4, Y, 1), SY_KERNEL_EINVAL);
        assert_int_equal(kt->matmul(SY_DTYPE_F32, W, 16, 2, 1, 4, X, 1, 4, Y, 2), SY_KERNEL_EINVAL);
        assert_int_equal(kt->matmul(SY_DTYPE_F32, W, 16, 0, 2, 4, X, 2, 3, Y, 2), SY_KERNEL_EINVAL); /* ldx < k */
        assert_int_equal(kt->matmul(SY_DTYPE_F32, W, 16, 0, 2, 4, X, 2, 4, Y, 1), SY_KERNEL_EINVAL); /* ldy */
        assert_int_equal(kt->matmul(SY_DTYPE_F32, NULL, 16, 0, 2, 4, X, 1, 4, Y, 2), SY_KERNEL_EINVAL);
        assert_int_equal(kt->matmul(SY_DTYPE_F32, W, 16, 0, 2, 4, NULL, 1, 4, Y, 2), SY_KERNEL_EINVAL);
        assert_int_equal(kt->matmul(SY_DTYPE_F32, W, 16, 0, 2, 4, X, 1, 4, NULL, 2), SY_KERNEL_EINVAL);
        assert_int_equal(kt->matmul(SY_DTYPE_Q4_0, W, 18, 0, 1, 33, X, 1, 33, Y, 1), SY_KERNEL_EINVAL);
        assert_int_equal(kt->matmul(SY_DTYPE_Q4_0, W, 17, 0, 1, 32, X, 1, 32, Y, 1), SY_KERNEL_EINVAL);
        assert_int_equal(kt->matmul(SY_DTYPE_F32, W, SIZE_MAX / 2, 0, 4, 4, X, 1, 4, Y, 4), SY_KERNEL_EINVAL);
        assert_int_equal(kt->matmul(SY_DTYPE_F32, W, 16, 0, 2, 4, X, SIZE_MAX / 4, 4, Y, 2), SY_KERNEL_EINVAL);
        assert_int_equal(kt->matmul(SY_DTYPE_F32, W, 16, 0, 2, 4, X, 2, SIZE_MAX / 2, Y, 2), SY_KERNEL_EINVAL);
        /* matmul_qx only takes quantized types, and a 4-byte aligned QX */
        assert_int_equal(kt->matmul_qx(SY_DTYPE_F32, W, 16, 0, 1, 4, X, 1, Y, 1), SY_KERNEL_EINVAL);
        assert_int_equal(kt->matmul_qx(SY_DTYPE_Q4_0, W, 18, 0, 1, 32, (const char *)X + 1, 1, Y, 1),
                         SY_KERNEL_EINVAL);
        /* nothing to do is fine */
        assert_int_equal(kt->matmul(SY_DTYPE_F32, W, 16, 1, 1, 4, NULL, 1, 4, NULL, 1), SY_KERNEL_OK);
        assert_int_equal(kt->matmul(SY_DTYPE_F32, W, 16, 0, 1, 4, X, 0, 4, NULL, 1), SY_KERNEL_OK);
        /* k = 0 gives zeros */
        Y[0] = Y[1] = 5.0f;
        assert_int_equal(kt->matmul(SY_DTYPE_F32, W, 0, 0, 2, 0, X, 1, 0, Y, 2), SY_KERNEL_OK);
        assert_true(Y[0] == 0.0f && Y[1] == 0.0f);
        Y[0] = Y[1] = 5.0f;
        assert_int_equal(kt->matmul(SY_DTYPE_Q4_K, W, 0, 0, 2, 0, X, 1, 0, Y, 2), SY_KERNEL_OK);
        assert_true(Y[0] == 0.0f && Y[1] == 0.0f);
    }
    assert_non_null(sy_matmul_check(SY_DTYPE_F32, W, 15, 0, 1, 4, X, 1, 4, Y, 1));
    assert_null(sy_matmul_check(SY_DTYPE_F32, W, 16, 0, 1, 4, X, 1, 4, Y, 1));
    assert_true(sy_matmul_supports(SY_DTYPE_Q6_K));
    assert_false(sy_matmul_supports(SY_DTYPE_Q8_K));
    assert_false(sy_matmul_wants_quantized_x(SY_DTYPE_BF16));
    assert_true(sy_matmul_wants_quantized_x(SY_DTYPE_Q4_0));
}

/* ---- activation quantization ---- */

static void test_quantize_x(void **state) {
    (void)state;
    const size_t k = 96;
    float X[2 * 100];
    fill_random(X, 200, 5.0f);
    for (size_t i = 32; i < 64; i++) X[i] = 0.0f;             /* all-zero block */
    X[64] = NAN;                                              /* NaN quantizes to 0 */
    X[65] = INFINITY;                                         /* saturates */
    X[66] = -INFINITY;
    size_t bytes = sy_quantize_x_bytes(k, 2);
    /* per row: one group of interleaved codes (512) and sums (64), then q (96), d (12), s16 (24), to 64 bytes */
    assert_int_equal(bytes, 2 * 768);
    uint32_t *storage = xmalloc(bytes);
    memset(storage, 0x5a, bytes); /* the padding blocks must come out zero whatever was there */
    assert_int_equal(sy_quantize_x(X, 2, 100, k, storage), SY_KERNEL_OK);
    for (size_t b = 0; b < 2; b++) {
        sy_qx_row row = sy_qx_row_at(storage, k, b);
        const int8_t *q = row.q;
        const float *d = row.d, *s16 = row.s16;
        for (size_t blk = 0; blk < 16; blk++) {
            int sum = 0;
            for (size_t i = 0; i < 32; i++) {
                int want = blk < 3 ? q[blk * 32 + i] : 0;
                sum += want;
                assert_int_equal(row.qi[64 * (i / 4) + 4 * blk + i % 4], want);
            }
            assert_int_equal(row.nsum[blk], -sum);
        }
        for (size_t blk = 0; blk < 3; blk++) {
            int sums[2] = {0, 0};
            for (size_t i = 0; i < 32; i++) {
                float x = X[b * 100 + blk * 32 + i];
                int qi = q[blk * 32 + i];
                assert_true(qi >= -127 && qi <= 127);
                sums[i / 16] += qi;
                if (isfinite(x)) {
                    if (b == 0 && blk == 2) continue; /* the block with infinities has a saturated scale */
                    assert_true(fabsf(x - d[blk] * (float)qi) <= d[blk] * 0.5f * 1.0001f + 1e-30f);
                } else if (isnan(x)) {
                    assert_int_equal(qi, 0);
                } else {
                    assert_int_equal(qi, x > 0 ? 127 : -127);
                }
            }
            assert_true(s16[2 * blk] == d[blk] * (float)sums[0]);
            assert_true(s16[2 * blk + 1] == d[blk] * (float)sums[1]);
        }
        if (b == 0) assert_true(d[1] == 0.0f);
    }
    assert_int_equal(sy_quantize_x_bytes(33, 1), 0);
    assert_int_equal(sy_quantize_x_bytes(SIZE_MAX - 31, 2), 0);
    assert_int_equal(sy_quantize_x(X, 1, 100, 33, storage), SY_KERNEL_EINVAL);
    assert_int_equal(sy_quantize_x(X, 2, 50, 64, storage), SY_KERNEL_EINVAL); /* ldx < k */
    assert_int_equal(sy_quantize_x(X, 1, 100, 64, (char *)storage + 2), SY_KERNEL_EINVAL);
    free(storage);
}

/* ---- transformer helpers ---- */

static void test_rmsnorm_softmax_silu(void **state) {
    (void)state;
    float x[67], w[67], out[67];
    fill_random(x, 67, 3.0f);
    fill_random(w, 67, 1.0f);
    double ss = 0.0;
    for (int i = 0; i < 67; i++) ss += (double)x[i] * x[i];
    double scale = 1.0 / sqrt(ss / 67 + 1e-5);
    sy_rmsnorm_f32(out, x, w, 67, 1e-5f);
    for (int i = 0; i < 67; i++) assert_true(fabs(out[i] - x[i] * scale * w[i]) <= 1e-5 * fabs(x[i] * scale) + 1e-7);
    memcpy(out, x, sizeof x);
    sy_rmsnorm_f32(out, out, NULL, 67, 1e-5f); /* in place, no weight */
    for (int i = 0; i < 67; i++) assert_true(fabs(out[i] - x[i] * scale) <= 1e-5 * fabs(x[i] * scale) + 1e-7);

    float s[67];
    memcpy(s, x, sizeof x);
    s[3] = 80.0f; /* large values must not overflow */
    s[4] = -INFINITY;
    double mx = 80.0, sum = 0.0;
    for (int i = 0; i < 67; i++) sum += exp((double)(i == 3 ? 80.0f : i == 4 ? -INFINITY : x[i]) - mx);
    float copy[67];
    memcpy(copy, s, sizeof s);
    sy_softmax_f32(s, 67);
    double total = 0.0;
    for (int i = 0; i < 67; i++) {
        double want = exp((double)copy[i] - mx) / sum;
        assert_true(fabs(s[i] - want) <= 1e-6 * want + 1e-12);
        total += s[i];
    }
    assert_true(fabs(total - 1.0) < 1e-5);
    assert_true(s[4] == 0.0f);
    float masked[5] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
    sy_softmax_f32(masked, 5);
    for (int i = 0; i < 5; i++) assert_true(masked[i] == 0.2f);
    sy_softmax_f32(masked, 0);

    float g[33], u[33], o[33];
    fill_random(g, 33, 8.0f);
    fill_random(u, 33, 2.0f);
    sy_swiglu_f32(o, g, u, 33);
    memcpy(s, g, sizeof g);
    sy_silu_f32(s, 33);
    for (int i = 0; i < 33; i++) {
        double want = (double)g[i] / (1.0 + exp(-(double)g[i]));
        assert_true(fabs(s[i] - want) <= 1e-6 * fabs(want) + 1e-7);
        assert_true(fabs(o[i] - want * u[i]) <= 1e-6 * fabs(want * u[i]) + 1e-7);
    }
}

static void test_rope(void **state) {
    (void)state;
    const size_t n_heads = 3, head_dim = 24, rot = 16;
    float inv[8];
    sy_rope_inv_freq(inv, rot, 10000.0);
    for (size_t i = 0; i < rot / 2; i++) assert_true(fabs(inv[i] - pow(10000.0, -(double)(2 * i) / rot)) < 1e-7);
    for (int style = 0; style < 2; style++) {
        float x[72], orig[72];
        fill_random(x, 72, 1.0f);
        memcpy(orig, x, sizeof x);
        const float pos = 37.0f;
        assert_int_equal(sy_rope_f32(x, n_heads, head_dim, rot, pos, inv, (sy_rope_style)style), SY_KERNEL_OK);
        for (size_t h = 0; h < n_heads; h++) {
            for (size_t i = 0; i < rot / 2; i++) {
                size_t i0 = style == SY_ROPE_NORM ? 2 * i : i, i1 = style == SY_ROPE_NORM ? 2 * i + 1 : i + rot / 2;
                double angle = (double)(pos * inv[i]);
                double a = orig[h * head_dim + i0], b = orig[h * head_dim + i1];
                assert_true(fabs(x[h * head_dim + i0] - (a * cos(angle) - b * sin(angle))) < 1e-5);
                assert_true(fabs(x[h * head_dim + i1] - (a * sin(angle) + b * cos(angle))) < 1e-5);
            }
            for (size_t i = rot; i < head_dim; i++) assert_true(x[h * head_dim + i] == orig[h * head_dim + i]);
        }
        /* position 0 is the identity */
        memcpy(x, orig, sizeof x);
        assert_int_equal(sy_rope_f32(x, n_heads, head_dim, rot, 0.0f, inv, (sy_rope_style)style), SY_KERNEL_OK);
        assert_memory_equal(x, orig, sizeof x);
    }
    float x[8] = {0};
    assert_int_equal(sy_rope_f32(x, 1, 8, 7, 1.0f, inv, SY_ROPE_NORM), SY_KERNEL_EINVAL);
    assert_int_equal(sy_rope_f32(x, 1, 8, 10, 1.0f, inv, SY_ROPE_NORM), SY_KERNEL_EINVAL);
    assert_int_equal(sy_rope_f32(x, 1, 8, 8, 1.0f, NULL, SY_ROPE_NORM), SY_KERNEL_EINVAL);
    assert_int_equal(sy_rope_f32(x, 1, 8, 8, 1.0f, inv, (sy_rope_style)7), SY_KERNEL_EINVAL);
    assert_int_equal(sy_rope_f32(x, 1, 8, 0, 1.0f, inv, SY_ROPE_NORM), SY_KERNEL_OK);
}

/* ---- KV cache conversions (the transformer's cache_type_k/v) ---- */

/* Every tier's f16_to_f32, f32_to_f16 and q8_0_to_f32 give the scalar reference's bits, at every length (SIMD
 * bodies and tails); q8_0 blocks are what ggml's quantize_row_q8_0_ref writes (checked by hand on one block) and
 * widen back within half a step of their scale (and the scale's f16 rounding). */
static void test_kv_conversions(void **state) {
    (void)state;
    const sy_kernels *tiers[SY_CPU_TIER_COUNT_];
    int n_tiers = tiers_under_test(tiers);
    const size_t n_max = 200;
    float *x = xmalloc(n_max * sizeof(float)), *a = xmalloc(n_max * sizeof(float)), *b = xmalloc(n_max * sizeof(float));
    uint16_t *ha = xmalloc(n_max * sizeof(uint16_t)), *hb = xmalloc(n_max * sizeof(uint16_t));
    fill_random(x, n_max, 3.0f);
    x[5] = 70000.0f, x[6] = -1e-7f, x[7] = 0.0f, x[8] = 65519.0f; /* overflow, subnormal, zero, the rounding edge */
    for (size_t n = 0; n <= n_max; n += (n < 40 ? 1 : 37)) {
        sy_f32_to_f16_row(x, hb, n);
        sy_f16_to_f32_row(hb, b, n);
        for (int t = 0; t < n_tiers; t++) {
            tiers[t]->f32_to_f16(x, ha, n);
            if (memcmp(ha, hb, n * sizeof *ha) != 0) fail_msg("%s f32_to_f16 n=%zu differs from scalar", tiers[t]->name, n);
            tiers[t]->f16_to_f32(hb, a, n);
            if (memcmp(a, b, n * sizeof *a) != 0) fail_msg("%s f16_to_f32 n=%zu differs from scalar", tiers[t]->name, n);
        }
    }
    /* one block by hand: max |x| = 127, d = 1 (exact), codes roundf(x) half away from zero */
    float blk[32] = {0};
    blk[0] = 127.0f, blk[1] = -63.5f, blk[2] = 0.5f, blk[3] = -1.5f, blk[4] = 0.25f;
    uint8_t q[SY_Q8_0_BLOCK_BYTES];
    sy_quantize_q8_0_row(blk, q, 32);
    assert_int_equal(q[0] | (q[1] << 8), 0x3c00); /* 1.0 in f16 */
    assert_int_equal((int8_t)q[2], 127);
    assert_int_equal((int8_t)q[3], -64); /* -63.5 rounds away from zero */
    assert_int_equal((int8_t)q[4], 1);   /* 0.5 */
    assert_int_equal((int8_t)q[5], -2);  /* -1.5 */
    assert_int_equal((int8_t)q[6], 0);
    float zeros[32] = {0};
    sy_quantize_q8_0_row(zeros, q, 32);
    for (size_t i = 0; i < sizeof q; i++) assert_int_equal(q[i], 0);
    /* rows of 1..6 blocks, every tier against the scalar widening, and the round trip within d / 2 */
    uint8_t *blocks = xmalloc(6 * SY_Q8_0_BLOCK_BYTES);
    for (size_t nb = 1; nb <= 6; nb++) {
        sy_quantize_q8_0_row(x, blocks, nb * 32);
        sy_q8_0_to_f32_row(blocks, b, nb);
        for (size_t i = 0; i < nb * 32; i++) {
            const uint8_t *bk = blocks + i / 32 * SY_Q8_0_BLOCK_BYTES;
            float d = sy_f16_to_f32((uint16_t)(bk[0] | (bk[1] << 8)));
            /* half a step, plus the code times the scale's own f16 rounding (codes use d before it is rounded) */
            if (!(fabsf(b[i] - x[i]) <= 0.5f * d + 128.0f * d * 0x1p-11f + 1e-6f))
                fail_msg("q8_0 element %zu: %g back as %g (d %g)", i, (double)x[i], (double)b[i], (double)d);
        }
        for (int t = 0; t < n_tiers; t++) {
            tiers[t]->q8_0_to_f32(blocks, a, nb);
            if (memcmp(a, b, nb * 32 * sizeof *a) != 0)
                fail_msg("%s q8_0_to_f32 of %zu blocks differs from scalar", tiers[t]->name, nb);
        }
    }
    free(x), free(a), free(b), free(ha), free(hb), free(blocks);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_active_tier),
        cmocka_unit_test(test_tier_names),
        cmocka_unit_test(test_f16_to_f32_exhaustive),
        cmocka_unit_test(test_f32_to_f16_rounding),
        cmocka_unit_test(test_bf16_conversions),
        cmocka_unit_test(test_dot_and_axpy),
        cmocka_unit_test(test_exp),
        cmocka_unit_test(test_gelu),
        cmocka_unit_test(test_attend),
        cmocka_unit_test(test_kv_conversions),
        cmocka_unit_test(test_matmul_f32),
        cmocka_unit_test(test_matmul_f16),
        cmocka_unit_test(test_matmul_bf16),
        cmocka_unit_test(test_kernels_describe),
        cmocka_unit_test(test_matmul_quantized),
        cmocka_unit_test(test_dequant_q4_0_q4_1_q8_0),
        cmocka_unit_test(test_dequant_q5_0_q5_1),
        cmocka_unit_test(test_dequant_q2_k),
        cmocka_unit_test(test_dequant_q3_k),
        cmocka_unit_test(test_dequant_q4_k_q5_k),
        cmocka_unit_test(test_dequant_q6_k_q8_k),
        cmocka_unit_test(test_dequant_rejects_bad_input),
        cmocka_unit_test(test_matmul_rejects_bad_arguments),
        cmocka_unit_test(test_quantize_x),
        cmocka_unit_test(test_rmsnorm_softmax_silu),
        cmocka_unit_test(test_rope),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
