/* Quantized matrix products, every tier against the scalar reference: every weight type, batches of 1-8 and 17
 * activation rows (each fused kernel of the AVX2 tier's 4-token and the AVX-512 tier's 8-token tiles, and full tiles
 * with remainders), odd row ranges, padded rows and a strided Y, random blocks with ordinary, huge, tiny, zero and
 * mixed scales, and the codes that push the integer dot products to their limits.
 *
 * The AMX tier's tiles are checked by the same cases (batches of 16 and more) and by batch invariance, which holds
 * only if its tiles give the bits of the AVX-512 kernels that take its leftovers and single tokens.
 *
 * The tolerance is relative to what the scalar reference itself adds up (its weight-scale and offset terms, from its
 * unpacked form), so tiers may differ only by f32 rounding order. The scalar tier is also checked against an exact
 * double-precision sum over the dequantized weights and activations. With SY_CPU_TIER set, only that tier is tested
 * (skipped when this CPU lacks it). */
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

#define KERNEL_TEST_RNG_SEED 0x2545f4914f6cdd1dull
#include "kernel_test_util.h"

/* ---- weights ---- */

typedef struct type_layout {
    sy_dtype type;
    int scale_offsets[2]; /* byte offsets of the block's f16 scales (-1: none) */
} type_layout;

static const type_layout layouts[] = {
    {SY_DTYPE_Q8_0, {0, -1}},   {SY_DTYPE_Q4_0, {0, -1}},  {SY_DTYPE_Q4_1, {0, 2}},   {SY_DTYPE_Q5_0, {0, -1}},
    {SY_DTYPE_Q5_1, {0, 2}},    {SY_DTYPE_Q2_K, {80, 82}}, {SY_DTYPE_Q3_K, {108, -1}}, {SY_DTYPE_Q4_K, {0, 2}},
    {SY_DTYPE_Q5_K, {0, 2}},    {SY_DTYPE_Q6_K, {208, -1}},
};

typedef enum scale_kind {
    SCALES_ORDINARY, /* 1e-3 .. 1e-1, either sign */
    SCALES_HUGE,     /* up to the largest finite f16 */
    SCALES_TINY,     /* f16 subnormals */
    SCALES_MIXED,    /* per block: zero, subnormal, ordinary, huge, negative */
    SCALES_KIND_COUNT
} scale_kind;

static const char *const scale_kind_names[] = {"ordinary", "huge", "tiny", "mixed"};

static void put_f16(uint8_t *p, float v) {
    uint16_t h = sy_f32_to_f16(v);
    p[0] = (uint8_t)h;
    p[1] = (uint8_t)(h >> 8);
}

static float random_scale(scale_kind kind) {
    float sign = (rng_next() & 1) ? 1.0f : -1.0f;
    switch (kind) {
    case SCALES_ORDINARY:
        return sign * (1e-3f + 0.1f * fabsf(rng_float()));
    case SCALES_HUGE:
        return sign * (30000.0f + 35000.0f * fabsf(rng_float())); /* f16 max is 65504 */
    case SCALES_TINY:
        return sign * 0x1p-24f * (float)(1 + rng_next() % 1023); /* subnormal f16 */
    default: {
        static const scale_kind pick[] = {SCALES_ORDINARY, SCALES_HUGE, SCALES_TINY};
        uint64_t r = rng_next() % 5;
        if (r == 3) return 0.0f;
        if (r == 4) return -random_scale(SCALES_ORDINARY);
        return random_scale(pick[r]);
    }
    }
}

/* Random blocks with the chosen scales; saturate: every code at its largest (all bits set; Q8_0: -128). */
static void fill_blocks(const type_layout *tl, uint8_t *row, size_t n_blocks, scale_kind kind, int saturate) {
    const sy_dtype_traits *tr = sy_dtype_get(tl->type);
    for (size_t blk = 0; blk < n_blocks; blk++) {
        uint8_t *b = row + blk * tr->block_bytes;
        for (uint32_t i = 0; i < tr->block_bytes; i++) b[i] = saturate ? 0xff : (uint8_t)rng_next();
        if (saturate && tl->type == SY_DTYPE_Q8_0) memset(b + 2, 0x80, 32);
        for (int s = 0; s < 2; s++)
            if (tl->scale_offsets[s] >= 0) put_f16(b + tl->scale_offsets[s], random_scale(kind));
    }
}

/* ---- activations ---- */

typedef enum act_kind {
    ACT_RANDOM,   /* uniform, a different magnitude per block (1e-20 .. 1e4), some blocks zero, some spikes */
    ACT_EXTREMES, /* every value at +-amax, so every 8-bit code is +-127 */
    ACT_KIND_COUNT
} act_kind;

static void fill_activations(float *x, size_t k, act_kind kind) {
    static const float magnitudes[] = {1.0f, 1e4f, 1e-3f, 1e-20f, 37.0f};
    for (size_t blk = 0; blk < k / 32; blk++) {
        float *xb = x + blk * 32;
        uint64_t r = rng_next();
        float mag = magnitudes[r % 5];
        for (size_t i = 0; i < 32; i++) {
            xb[i] = kind == ACT_EXTREMES ? ((rng_next() & 1) ? mag : -mag) : rng_float() * mag;
        }
        if (kind == ACT_RANDOM && (r >> 8) % 7 == 0) memset(xb, 0, 32 * sizeof(float));
        if (kind == ACT_RANDOM && (r >> 8) % 7 == 1) xb[(r >> 16) % 32] = 1000.0f * mag;
    }
}

/* ---- the check ---- */

typedef struct quant_case {
    size_t rows, row_begin, row_end;
    size_t elems_32, elems_256; /* k in elements for 32- and 256-element block types */
    size_t n_batch, pad, ldy_extra;
} quant_case;

/* k values leave every tail of 1..7 blocks of 32 after groups of 8, odd blocks in the last 64 elements, and rows past
 * one of the scalar reference's 1024-element unpack chunks */
static const quant_case cases[] = {
    {1, 0, 1, 32, 256, 1, 0, 0},        {5, 1, 4, 224, 768, 1, 3, 2},      {7, 2, 7, 896, 1280, 2, 0, 0},
    {6, 1, 6, 1056, 256, 3, 1, 1},      {9, 0, 9, 96, 2304, 4, 2, 3},      {4, 1, 3, 2080, 512, 5, 0, 0},
    {3, 0, 3, 416, 1792, 8, 5, 1},      {8, 3, 8, 160, 256, 17, 0, 4},     {2, 0, 2, 64, 1024, 3, 0, 0},
    {11, 5, 10, 448, 768, 2, 1, 0},     {5, 1, 5, 608, 1536, 6, 2, 1},     {6, 0, 6, 288, 512, 7, 0, 2},
    /* the AMX tier's 16 x 16 tiles: exactly one; whole tiles with row and token tails, odd k; more than 16 blocks
     * (the f32 lanes wrap) with a padded row and a strided Y */
    {16, 0, 16, 32, 256, 16, 0, 0},     {37, 3, 37, 1184, 256, 33, 5, 3},  {40, 0, 32, 544, 512, 48, 2, 1},
};

/* Per row and batch row, the sum the scalar tier adds up in absolute value (its per-16 weight scale and offset
 * terms) and the exact value of the product of the dequantized weights with the dequantized activations. */
static void reference(sy_dtype type, const uint8_t *row, size_t k, const float *wf, const void *QX, size_t b,
                      double *exact, double *magnitude) {
    uint8_t *u = xmalloc(k);
    float *a = xmalloc(k / 16 * sizeof(float)), *c = xmalloc(k / 16 * sizeof(float));
    sy_unpack_scalar(type, row, k, u, a, c);
    sy_qx_row x = sy_qx_row_at(QX, k, b);
    double sum = 0.0, mag = 0.0;
    for (size_t g = 0; g < k / 16; g++) {
        double d = x.d[g / 2], udot = 0.0, qabs = 0.0;
        for (size_t i = 16 * g; i < 16 * g + 16; i++) {
            sum += (double)wf[i] * d * x.q[i];
            udot += (double)u[i] * fabs((double)x.q[i]);
            qabs += fabs((double)x.q[i]);
            mag += fabs((double)wf[i] * d * x.q[i]);
        }
        mag += fabs((double)a[g]) * d * udot + fabs((double)c[g]) * d * qabs;
    }
    *exact = sum;
    *magnitude = mag;
    free(u);
    free(a);
    free(c);
}

static void check_one(const sy_kernels *const *tiers, int n_tiers, const type_layout *tl, const quant_case *qc,
                      scale_kind scales, act_kind acts, int saturate) {
    const sy_dtype_traits *tr = sy_dtype_get(tl->type);
    size_t k = tr->block_elems == 32 ? qc->elems_32 : qc->elems_256;
    size_t n_blocks = k / tr->block_elems;
    size_t row_bytes = n_blocks * tr->block_bytes + qc->pad;
    size_t ldy = qc->rows + qc->ldy_extra, n_batch = qc->n_batch;
    uint8_t *W = xmalloc(qc->rows * row_bytes);
    float *Wf = xmalloc(qc->rows * k * sizeof(float));
    for (size_t r = 0; r < qc->rows; r++) {
        fill_blocks(tl, W + r * row_bytes, n_blocks, scales, saturate);
        memset(W + r * row_bytes + n_blocks * tr->block_bytes, 0xa5, qc->pad);
        assert_int_equal(sy_dequantize_row(tl->type, W + r * row_bytes, row_bytes, Wf + r * k, k), SY_KERNEL_OK);
    }
    float *X = xmalloc(n_batch * k * sizeof(float));
    for (size_t b = 0; b < n_batch; b++) fill_activations(X + b * k, k, acts);
    size_t qx_bytes = sy_quantize_x_bytes(k, n_batch);
    assert_true(qx_bytes > 0);
    void *QX = xmalloc(qx_bytes);
    assert_int_equal(sy_quantize_x(X, n_batch, k, k, QX), SY_KERNEL_OK);

    const float untouched = -12345.0f;
    float *Ys = xmalloc(n_batch * ldy * sizeof(float)), *Yt = xmalloc(n_batch * ldy * sizeof(float));
    for (size_t i = 0; i < n_batch * ldy; i++) Ys[i] = untouched;
    const sy_kernels *scalar = sy_kernels_for_tier(SY_CPU_TIER_SCALAR);
    assert_int_equal(scalar->matmul_qx(tl->type, W, row_bytes, qc->row_begin, qc->row_end, k, QX, n_batch, Ys, ldy),
                     SY_KERNEL_OK);
    double *mag = xmalloc(n_batch * qc->rows * sizeof(double));
    for (size_t b = 0; b < n_batch; b++) {
        for (size_t r = qc->row_begin; r < qc->row_end; r++) {
            double exact;
            reference(tl->type, W + r * row_bytes, k, Wf + r * k, QX, b, &exact, &mag[b * qc->rows + r]);
            double got = Ys[b * ldy + r], tol = 1e-5 * mag[b * qc->rows + r] + 1e-35;
            if (!(fabs(got - exact) <= tol))
                fail_msg("scalar %s k=%zu b=%zu r=%zu (%s scales): %.9g, exact %.9g (tolerance %.3g)", tr->name, k, b,
                         r, scale_kind_names[scales], got, exact, tol);
        }
    }
    for (int t = 0; t < n_tiers; t++) {
        for (size_t i = 0; i < n_batch * ldy; i++) Yt[i] = untouched;
        assert_int_equal(
            tiers[t]->matmul_qx(tl->type, W, row_bytes, qc->row_begin, qc->row_end, k, QX, n_batch, Yt, ldy),
            SY_KERNEL_OK);
        for (size_t b = 0; b < n_batch; b++) {
            for (size_t r = 0; r < ldy; r++) {
                float s = Ys[b * ldy + r], v = Yt[b * ldy + r];
                if (r < qc->row_begin || r >= qc->row_end) {
                    if (v != untouched)
                        fail_msg("%s %s wrote Y[%zu][%zu] outside rows %zu..%zu", tiers[t]->name, tr->name, b, r,
                                 qc->row_begin, qc->row_end);
                    continue;
                }
                double tol = 1e-5 * mag[b * qc->rows + r] + 1e-35;
                if (!(fabs((double)v - (double)s) <= tol))
                    fail_msg("%s %s k=%zu n_batch=%zu b=%zu r=%zu (%s scales, %s activations%s): %.9g, scalar %.9g "
                             "(tolerance %.3g)",
                             tiers[t]->name, tr->name, k, n_batch, b, r, scale_kind_names[scales],
                             acts == ACT_RANDOM ? "random" : "extreme", saturate ? ", saturated codes" : "",
                             (double)v, (double)s, tol);
            }
        }
        /* Batch invariance: each row of the batch gives the same bits when it is multiplied alone, so that a
         * token's logits do not depend on what else shares its decode call (speculative verification and
         * continuous batching must give the tokens of a plain decode). */
        float *Y1 = xmalloc(ldy * sizeof(float));
        size_t qx_row = sy_quantize_x_bytes(k, 1);
        for (size_t b = 0; b < n_batch; b++) {
            assert_int_equal(tiers[t]->matmul_qx(tl->type, W, row_bytes, qc->row_begin, qc->row_end, k,
                                                 (const uint8_t *)QX + b * qx_row, 1, Y1, ldy),
                             SY_KERNEL_OK);
            for (size_t r = qc->row_begin; r < qc->row_end; r++)
                if (memcmp(&Y1[r], &Yt[b * ldy + r], sizeof(float)) != 0)
                    fail_msg("%s %s k=%zu: row %zu of a batch of %zu gives %.9g, alone %.9g (not batch-invariant)",
                             tiers[t]->name, tr->name, k, b, n_batch, (double)Yt[b * ldy + r], (double)Y1[r]);
        }
        free(Y1);
    }
    free(mag);
    free(W);
    free(Wf);
    free(X);
    free(QX);
    free(Ys);
    free(Yt);
}

static void check_type(const type_layout *tl) {
    const sy_kernels *tiers[SY_CPU_TIER_COUNT_];
    int n_tiers = tiers_under_test(tiers);
    size_t n_cases = sizeof cases / sizeof cases[0];
    for (size_t ci = 0; ci < n_cases; ci++) {
        /* every case with ordinary scales, and a rotating other kind of scales and activations */
        check_one(tiers, n_tiers, tl, &cases[ci], SCALES_ORDINARY, ACT_RANDOM, 0);
        check_one(tiers, n_tiers, tl, &cases[ci], (scale_kind)(1 + ci % (SCALES_KIND_COUNT - 1)),
                  (act_kind)(ci % ACT_KIND_COUNT), 0);
    }
    /* the largest codes against +-127 activations: the 16-bit pair sums and 32-bit lanes at their limits */
    for (size_t ci = 0; ci < n_cases; ci += 3)
        check_one(tiers, n_tiers, tl, &cases[ci], SCALES_ORDINARY, ACT_EXTREMES, 1);
}

#define TYPE_TEST(name, index)                                                                                     \
    static void name(void **state) {                                                                               \
        (void)state;                                                                                               \
        check_type(&layouts[index]);                                                                               \
    }

TYPE_TEST(test_q8_0, 0)
TYPE_TEST(test_q4_0, 1)
TYPE_TEST(test_q4_1, 2)
TYPE_TEST(test_q5_0, 3)
TYPE_TEST(test_q5_1, 4)
TYPE_TEST(test_q2_k, 5)
TYPE_TEST(test_q3_k, 6)
TYPE_TEST(test_q4_k, 7)
TYPE_TEST(test_q5_k, 8)
TYPE_TEST(test_q6_k, 9)

/* ---- activation quantization: the SIMD row quantizer writes exactly the scalar reference's bytes ---- */

static void fill_special_block(float *xb, uint64_t kind) {
    static const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 0x1p-149f, -0x1p-126f,
                                     3.4028234663852886e38f, -3.4028234663852886e38f, 1.0f, -1.0f, 127.0f};
    switch (kind % 6) {
    case 0: /* random bit patterns: NaN payloads, subnormals, infinities, everything */
        for (int i = 0; i < 32; i++) {
            uint32_t bits = (uint32_t)rng_next();
            memcpy(&xb[i], &bits, sizeof bits);
        }
        break;
    case 1: /* amax 127 gives a scale of exactly 1: halves are ties, rounded to even */
        for (int i = 0; i < 32; i++) xb[i] = (float)((int)(rng_next() % 254) - 127) + ((i & 1) ? 0.5f : 0.0f);
        xb[0] = 127.0f;
        xb[1] = -126.5f;
        break;
    case 2: /* specials mixed into ordinary values */
        for (int i = 0; i < 32; i++) xb[i] = rng_float() * 3.0f;
        for (int i = 0; i < 4; i++) xb[rng_next() % 32] = specials[rng_next() % 12];
        break;
    case 3: /* one tiny value: the scale underflows or 127 / amax overflows */
        memset(xb, 0, 32 * sizeof(float));
        xb[rng_next() % 32] = (rng_next() & 1) ? 0x1p-140f : -0x1p-149f;
        break;
    case 4: /* all zero */
        memset(xb, 0, 32 * sizeof(float));
        break;
    default: /* ordinary values of a random magnitude */
        for (int i = 0; i < 32; i++) xb[i] = rng_float() * ldexpf(1.0f, (int)(rng_next() % 200) - 100);
        break;
    }
}

static void test_quantize_simd_matches_scalar(void **state) {
    (void)state;
#if SY_KERNELS_X86
    if (!sy_cpu_tier_supported(SY_CPU_TIER_AVX2)) skip();
    const size_t k = 32 * 64, n_rows = 40;
    float *X = xmalloc(n_rows * k * sizeof(float));
    for (size_t blk = 0; blk < n_rows * k / 32; blk++) fill_special_block(X + 32 * blk, rng_next());
    size_t bytes = sy_quantize_x_bytes(k, n_rows);
    void *want = xmalloc(bytes), *got = xmalloc(bytes);
    memset(want, 0x11, bytes);
    memset(got, 0x22, bytes);
    for (size_t r = 0; r < n_rows; r++) {
        sy_qx_row a = sy_qx_row_at(want, k, r), b = sy_qx_row_at(got, k, r);
        sy_quantize_row_scalar(X + r * k, k, (int8_t *)(uintptr_t)a.q, (float *)(uintptr_t)a.d,
                               (float *)(uintptr_t)a.s16);
        sy_quantize_row_avx2(X + r * k, k, (int8_t *)(uintptr_t)b.q, (float *)(uintptr_t)b.d,
                             (float *)(uintptr_t)b.s16);
    }
    /* the parts a row quantizer writes: q, d and s16 (the interleaved copy is made from q afterwards) */
    const size_t part_bytes = k + k / 32 * 4 + k / 16 * 4;
    for (size_t r = 0; r < n_rows; r++) {
        const uint8_t *a = (const uint8_t *)sy_qx_row_at(want, k, r).q, *b = (const uint8_t *)sy_qx_row_at(got, k, r).q;
        for (size_t i = 0; i < part_bytes; i++)
            if (a[i] != b[i]) fail_msg("AVX2 quantizer differs from the scalar one at byte %zu of row %zu", i, r);
    }
    /* and whichever the active tier uses */
    memset(got, 0x33, bytes);
    assert_int_equal(sy_quantize_x(X, n_rows, k, k, got), SY_KERNEL_OK);
    for (size_t r = 0; r < n_rows; r++)
        assert_memory_equal(sy_qx_row_at(want, k, r).q, sy_qx_row_at(got, k, r).q, part_bytes);
    free(X);
    free(want);
    free(got);
#else
    skip();
#endif
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_q8_0), cmocka_unit_test(test_q4_0), cmocka_unit_test(test_q4_1),
        cmocka_unit_test(test_q5_0), cmocka_unit_test(test_q5_1), cmocka_unit_test(test_q2_k),
        cmocka_unit_test(test_q3_k), cmocka_unit_test(test_q4_k), cmocka_unit_test(test_q5_k),
        cmocka_unit_test(test_q6_k), cmocka_unit_test(test_quantize_simd_matches_scalar),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
