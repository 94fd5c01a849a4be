/* GGUF block types against independent oracles (tests/fixtures/gguf/quant-blocks.json, written by
 * tools/oracle/gguf_dequant_fixtures.py):
 *   - the kernels' dequantizer (sy_dequantize_row) against the `gguf` package's numpy dequantizer on random blocks
 *     of every type, bit for bit (1 ulp allowed, NaN matching NaN);
 *   - the row quantizers (plugins/common/quantize.c) against llama.cpp's ggml_quantize_chunk on 262,144 floats,
 *     byte for byte;
 * and, without an oracle: quantize -> dequantize errors stay within each type's resolution; the quantized matmul
 * on real quantizer output equals the double-precision dot of the dequantized weights within the activation
 * rounding bound (random blocks of every type and tier are covered in tests/kernels); bad arguments are refused.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gguf_test_util.h"
#include "quantize.h"
#include "sy_kernels.h"

static cJSON *fixture;

static int setup(void **state) {
    (void)state;
    fixture = gt_load_json("tests/fixtures/gguf/quant-blocks.json");
    return fixture ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    cJSON_Delete(fixture);
    return 0;
}

static sy_dtype type_by_name(const char *name) {
    for (uint32_t t = 0; t < SY_DTYPE_COUNT_; t++) {
        const sy_dtype_traits *tr = sy_dtype_get(t);
        if (tr && strcmp(tr->name, name) == 0) return (sy_dtype)t;
    }
    fail_msg("unknown type name %s", name);
    return SY_DTYPE_COUNT_;
}

/* Distance in representable floats (same sign); UINT64_MAX across signs unless both are zero. */
static uint64_t ulp_distance(float a, float b) {
    int32_t ia, ib;
    memcpy(&ia, &a, 4);
    memcpy(&ib, &b, 4);
    if ((ia < 0) != (ib < 0)) return (a == b) ? 0 : UINT64_MAX;
    int64_t d = (int64_t)ia - (int64_t)ib;
    return (uint64_t)(d < 0 ? -d : d);
}

static void test_dequant_matches_gguf_package(void **state) {
    (void)state;
    const cJSON *cases = cJSON_GetObjectItem(fixture, "dequant");
    assert_non_null(cases);
    int n_types = 0;
    for (const cJSON *c = cases->child; c; c = c->next) {
        sy_dtype type = type_by_name(c->string);
        size_t n_blocks_bytes = 0, n_value_bytes = 0;
        uint8_t *blocks = gt_unhex(cJSON_GetObjectItem(c, "blocks")->valuestring, &n_blocks_bytes);
        uint8_t *values = gt_unhex(cJSON_GetObjectItem(c, "values")->valuestring, &n_value_bytes);
        size_t n = (size_t)cJSON_GetObjectItem(c, "n")->valuedouble;
        assert_non_null(blocks);
        assert_non_null(values);
        assert_int_equal(n_value_bytes, n * sizeof(float));
        assert_int_equal(sy_dtype_row_bytes(type, n), n_blocks_bytes);
        float *got = gt_xmalloc(n * sizeof *got);
        assert_int_equal(sy_dequantize_row(type, blocks, n_blocks_bytes, got, n), SY_KERNEL_OK);
        size_t exact = 0;
        for (size_t i = 0; i < n; i++) {
            float want;
            memcpy(&want, values + 4 * i, 4);
            if (isnan(want) || isnan(got[i])) {
                if (!(isnan(want) && isnan(got[i]))) fail_msg("%s element %zu: %g vs %g", c->string, i, got[i], want);
                exact++;
                continue;
            }
            uint64_t ulps = ulp_distance(got[i], want);
            if (ulps > 1) fail_msg("%s element %zu: %.9g, gguf package %.9g (%llu ulp)", c->string, i, (double)got[i],
                                   (double)want, (unsigned long long)ulps);
            exact += ulps == 0;
        }
        /* equal to the bit in practice; the 1-ulp allowance is for a compiler that fuses d * q - m */
        assert_true(exact * 100 >= n * 99);
        free(got);
        free(blocks);
        free(values);
        n_types++;
    }
    assert_int_equal(n_types, 12);
}

static void test_quantize_matches_llama_cpp(void **state) {
    (void)state;
    const cJSON *q = cJSON_GetObjectItem(fixture, "quantize");
    size_t rows = (size_t)cJSON_GetObjectItem(q, "rows")->valuedouble;
    size_t n_per_row = (size_t)cJSON_GetObjectItem(q, "n_per_row")->valuedouble;
    size_t head_rows = (size_t)cJSON_GetObjectItem(q, "head_rows")->valuedouble;
    uint64_t seed = (uint64_t)cJSON_GetObjectItem(q, "seed")->valuedouble;
    float *x = gt_quant_input(rows, n_per_row, seed);
    int n_types = 0;
    for (const cJSON *t = cJSON_GetObjectItem(q, "types")->child; t; t = t->next) {
        sy_dtype type = type_by_name(t->string);
        assert_true(sy_quantize_supports(type));
        size_t row_bytes = sy_dtype_row_bytes(type, n_per_row);
        size_t size = row_bytes * rows;
        uint8_t *out = gt_xmalloc(size);
        assert_int_equal(sy_quantize_rows(type, x, rows, n_per_row, out, size), size);
        size_t head_len = 0;
        uint8_t *head = gt_unhex(cJSON_GetObjectItem(t, "head")->valuestring, &head_len);
        assert_int_equal(head_len, head_rows * row_bytes);
        for (size_t i = 0; i < head_len; i++) {
            if (out[i] != head[i])
                fail_msg("%s: byte %zu (row %zu, block byte %zu) is %02x, llama.cpp wrote %02x", t->string, i,
                         i / row_bytes, i % sy_dtype_get(type)->block_bytes, out[i], head[i]);
        }
        char hash[17];
        snprintf(hash, sizeof hash, "%016llx", (unsigned long long)gt_fnv1a64(out, size));
        if (strcmp(hash, cJSON_GetObjectItem(t, "fnv1a64")->valuestring) != 0) {
            /* name the first differing row to make a mismatch debuggable: rows quantize independently */
            fail_msg("%s: the %zu rows hash to %s, llama.cpp's to %s", t->string, rows, hash,
                     cJSON_GetObjectItem(t, "fnv1a64")->valuestring);
        }
        free(head);
        free(out);
        n_types++;
    }
    assert_int_equal(n_types, 12);
    free(x);
}

/* Quantize -> dequantize: the error of each element is bounded by its block's resolution. */
static void test_roundtrip_error(void **state) {
    (void)state;
    static const struct {
        sy_dtype type;
        double max_rel_rms; /* RMS error over RMS value on the oracle input (outliers included): ~1.3x measured */
    } cases[] = {
        {SY_DTYPE_F32, 0.0},      {SY_DTYPE_F16, 3e-4},     {SY_DTYPE_BF16, 2.3e-3},    {SY_DTYPE_Q8_0, 0.016},
        {SY_DTYPE_Q6_K, 0.045},   {SY_DTYPE_Q5_0, 0.11},    {SY_DTYPE_Q5_1, 0.066},    {SY_DTYPE_Q5_K, 0.065},
        {SY_DTYPE_Q4_0, 0.15},    {SY_DTYPE_Q4_1, 0.155},    {SY_DTYPE_Q4_K, 0.12},    {SY_DTYPE_Q3_K, 0.125},
        {SY_DTYPE_Q2_K, 0.29},
    };
    const size_t rows = 40, n = 512;
    float *x = gt_quant_input(rows, n, 99);
    float *y = gt_xmalloc(n * sizeof *y);
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        size_t row_bytes = sy_dtype_row_bytes(cases[ci].type, n);
        uint8_t *q = gt_xmalloc(row_bytes * rows);
        assert_int_equal(sy_quantize_rows(cases[ci].type, x, rows, n, q, row_bytes * rows), row_bytes * rows);
        double err2 = 0, val2 = 0;
        for (size_t r = 0; r < rows; r++) {
            assert_int_equal(sy_dequantize_row(cases[ci].type, q + r * row_bytes, row_bytes, y, n), SY_KERNEL_OK);
            for (size_t i = 0; i < n; i++) {
                double e = (double)y[i] - x[r * n + i];
                err2 += e * e;
                val2 += (double)x[r * n + i] * x[r * n + i];
                /* an all-zero block stays zero, a constant block stays close */
                if (r % 5 == 3 && i >= 64 && i < 96) assert_true(y[i] == 0.0f);
            }
        }
        double rel = sqrt(err2 / val2);
        if (rel > cases[ci].max_rel_rms)
            fail_msg("%s: relative RMS error %.4g > %.4g", sy_dtype_get(cases[ci].type)->name, rel,
                     cases[ci].max_rel_rms);
        free(q);
    }
    free(x);
    free(y);
}

/* The quantized product on real quantizer output, against the dot of the dequantized weights in double. */
static void test_matmul_on_quantized_rows(void **state) {
    (void)state;
    static const sy_dtype types[] = {SY_DTYPE_Q8_0, SY_DTYPE_Q4_0, SY_DTYPE_Q4_1, SY_DTYPE_Q5_0, SY_DTYPE_Q5_1,
                                     SY_DTYPE_Q2_K, SY_DTYPE_Q3_K, SY_DTYPE_Q4_K, SY_DTYPE_Q5_K, SY_DTYPE_Q6_K};
    const size_t rows = 24, k = 512, n_batch = 3;
    float *w = gt_quant_input(rows, k, 5);
    float *X = gt_quant_input(n_batch, k, 6);
    float *wd = gt_xmalloc(rows * k * sizeof *wd);
    float Y[3 * 24];
    const sy_kernels *kern = sy_kernels_active();
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        size_t row_bytes = sy_dtype_row_bytes(types[ti], k);
        uint8_t *q = gt_xmalloc(row_bytes * rows);
        assert_int_equal(sy_quantize_rows(types[ti], w, rows, k, q, row_bytes * rows), row_bytes * rows);
        for (size_t r = 0; r < rows; r++)
            assert_int_equal(sy_dequantize_row(types[ti], q + r * row_bytes, row_bytes, wd + r * k, k), SY_KERNEL_OK);
        assert_int_equal(kern->matmul(types[ti], q, row_bytes, 0, rows, k, X, n_batch, k, Y, rows), SY_KERNEL_OK);
        for (size_t b = 0; b < n_batch; b++) {
            for (size_t r = 0; r < rows; r++) {
                double ref = 0, bound = 0, mag = 0;
                for (size_t blk = 0; blk < k / 32; blk++) {
                    double amax = 0;
                    for (size_t i = 0; i < 32; i++) amax = fmax(amax, fabs((double)X[b * k + blk * 32 + i]));
                    for (size_t i = 0; i < 32; i++) {
                        double wv = wd[r * k + blk * 32 + i], xv = X[b * k + blk * 32 + i];
                        ref += wv * xv;
                        bound += fabs(wv) * amax / 254.0;
                        mag += fabs(wv * xv);
                    }
                }
                double got = Y[b * rows + r];
                if (!(fabs(got - ref) <= bound * 1.0001 + 1e-5 * (mag + bound) + 1e-30))
                    fail_msg("%s %s b=%zu r=%zu: %.9g vs %.9g (bound %.3g)", kern->name,
                             sy_dtype_get(types[ti])->name, b, r, got, ref, bound);
            }
        }
        free(q);
    }
    free(w);
    free(X);
    free(wd);
}

static void test_quantize_refuses_bad_arguments(void **state) {
    (void)state;
    float x[1024] = {0};
    uint8_t out[2048];
    assert_int_equal(sy_quantize_rows(SY_DTYPE_Q4_K, x, 1, 128, out, sizeof out), 0);   /* not a multiple of 256 */
    assert_int_equal(sy_quantize_rows(SY_DTYPE_Q8_0, x, 1, 48, out, sizeof out), 0);    /* not a multiple of 32 */
    assert_int_equal(sy_quantize_rows(SY_DTYPE_Q8_K, x, 1, 256, out, sizeof out), 0);   /* no quantizer */
    assert_int_equal(sy_quantize_rows(SY_DTYPE_Q8_1, x, 1, 32, out, sizeof out), 0);
    assert_int_equal(sy_quantize_rows((sy_dtype)99, x, 1, 32, out, sizeof out), 0);
    assert_int_equal(sy_quantize_rows(SY_DTYPE_Q8_0, x, 2, 512, out, 1087), 0);        /* dst one byte short */
    assert_int_equal(sy_quantize_rows(SY_DTYPE_Q8_0, x, 2, 512, out, 1088), 1088);
    assert_int_equal(sy_quantize_rows(SY_DTYPE_Q8_0, NULL, 1, 32, out, sizeof out), 0);
    assert_int_equal(sy_quantize_rows(SY_DTYPE_F16, x, SIZE_MAX / 2, 512, out, sizeof out), 0); /* overflow */
    assert_int_equal(sy_quantize_rows(SY_DTYPE_Q6_K, x, (size_t)1 << 62, 256, out, sizeof out), 0);
    assert_false(sy_quantize_supports(SY_DTYPE_Q8_K));
    float bad[4] = {1, 2, NAN, INFINITY};
    assert_int_equal(sy_quantize_find_nonfinite(bad, 4), 2);
    assert_int_equal(sy_quantize_find_nonfinite(bad, 2), 2);
    bad[2] = 0;
    assert_int_equal(sy_quantize_find_nonfinite(bad, 4), 3);
}

/* Degenerate inputs stay defined: all zeros, tiny (subnormal) values, a single huge value. */
static void test_quantize_degenerate_blocks(void **state) {
    (void)state;
    static const sy_dtype types[] = {SY_DTYPE_Q8_0, SY_DTYPE_Q4_0, SY_DTYPE_Q4_1, SY_DTYPE_Q5_0, SY_DTYPE_Q5_1,
                                     SY_DTYPE_Q2_K, SY_DTYPE_Q3_K, SY_DTYPE_Q4_K, SY_DTYPE_Q5_K, SY_DTYPE_Q6_K};
    float x[3][256];
    for (int i = 0; i < 256; i++) {
        x[0][i] = 0.0f;
        x[1][i] = (i % 3 ? 1e-42f : -3e-41f);
        x[2][i] = i == 17 ? 3e38f : 1.0f;
    }
    float y[256];
    uint8_t out[512];
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        size_t rb = sy_dtype_row_bytes(types[ti], 256);
        for (int c = 0; c < 3; c++) {
            assert_int_equal(sy_quantize_rows(types[ti], x[c], 1, 256, out, sizeof out), rb);
            assert_int_equal(sy_dequantize_row(types[ti], out, rb, y, 256), SY_KERNEL_OK);
            for (int i = 0; i < 256; i++) {
                if (c == 0) assert_true(y[i] == 0.0f);
                if (c == 1) assert_true(fabsf(y[i]) < 1e-30f); /* may flush to zero; never blows up */
            }
        }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dequant_matches_gguf_package),
        cmocka_unit_test(test_quantize_matches_llama_cpp),
        cmocka_unit_test(test_roundtrip_error),
        cmocka_unit_test(test_matmul_on_quantized_rows),
        cmocka_unit_test(test_quantize_refuses_bad_arguments),
        cmocka_unit_test(test_quantize_degenerate_blocks),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
