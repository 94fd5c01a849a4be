/* The scalar tier: portable C, the reference every SIMD tier is tested against. */
#include "sy_kernels_internal.h"

#define FLOAT_CHUNK 512 /* weights widened to f32 per step, reused for every batch row */

static float dot_f32_scalar(const float *a, const float *b, size_t n) {
    /* Four partial sums: a shorter dependency chain, and a pattern compilers vectorize. */
    float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        s0 += a[i] * b[i];
        s1 += a[i + 1] * b[i + 1];
        s2 += a[i + 2] * b[i + 2];
        s3 += a[i + 3] * b[i + 3];
    }
    for (; i < n; i++) s0 += a[i] * b[i];
    return (s0 + s1) + (s2 + s3);
}

static void axpy_f32_scalar(float *y, float alpha, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] += alpha * x[i];
}

/* Widens n weights starting at element e0 of a row (which may be unaligned) to f32. */
static void widen_row(sy_dtype wtype, const uint8_t *row, size_t e0, size_t n, float *out) {
    if (wtype == SY_DTYPE_F32) {
        memcpy(out, row + e0 * 4, n * 4);
        return;
    }
    uint16_t h[FLOAT_CHUNK];
    memcpy(h, row + e0 * 2, n * 2);
    if (wtype == SY_DTYPE_F16) {
        sy_f16_to_f32_row(h, out, n);
    } else {
        sy_bf16_to_f32_row(h, out, n);
    }
}

static float dot_unpacked_scalar(const uint8_t *u, const float *a, const float *c, const int8_t *q, const float *d,
                                 const float *s16, size_t n) {
    float acc = 0.0f;
    for (size_t g = 0; g < n / SY_QX_GROUP; g++) {
        int32_t isum = 0;
        for (size_t i = 0; i < SY_QX_GROUP; i++) isum += (int32_t)u[g * SY_QX_GROUP + i] * q[g * SY_QX_GROUP + i];
        acc += (a[g] * d[g / 2]) * (float)isum + c[g] * s16[g];
    }
    return acc;
}

static int matmul_scalar(sy_dtype wtype, const void *W, size_t row_bytes, size_t row_begin, size_t row_end,
                         size_t k, const float *X, size_t n_batch, size_t ldx, float *Y, size_t ldy) {
    if (sy_matmul_check(wtype, W, row_bytes, row_begin, row_end, k, X, n_batch, ldx, Y, ldy) != NULL)
        return SY_KERNEL_EINVAL;
    if (sy_matmul_wants_quantized_x(wtype))
        return sy_matmul_quantized_via_qx(&sy_kernels_scalar_table, wtype, W, row_bytes, row_begin, row_end, k, X,
                                          n_batch, ldx, Y, ldy);
    float w[FLOAT_CHUNK];
    for (size_t r = row_begin; r < row_end; r++) {
        const uint8_t *row = (const uint8_t *)W + r * row_bytes;
        for (size_t b = 0; b < n_batch; b++) Y[b * ldy + r] = 0.0f;
        for (size_t k0 = 0; k0 < k; k0 += FLOAT_CHUNK) {
            size_t n = k - k0 < FLOAT_CHUNK ? k - k0 : FLOAT_CHUNK;
            widen_row(wtype, row, k0, n, w);
            for (size_t b = 0; b < n_batch; b++) Y[b * ldy + r] += dot_f32_scalar(w, X + b * ldx + k0, n);
        }
    }
    return SY_KERNEL_OK;
}

/* Each chunk of a row is unpacked once (sy_unpack_scalar), then dotted with every batch row; a row's chunks add up
 * in order. Arguments are already validated. */
static void matmul_qx_unpacked(sy_dtype wtype, const void *W, size_t row_bytes, size_t row_begin, size_t row_end,
                               size_t k, const void *QX, size_t n_batch, float *Y, size_t ldy) {
    _Alignas(64) uint8_t u[SY_UNPACK_CHUNK];
    _Alignas(64) float a[SY_UNPACK_CHUNK / SY_QX_GROUP];
    _Alignas(64) float c[SY_UNPACK_CHUNK / SY_QX_GROUP];
    const sy_dtype_traits *traits = sy_dtype_get(wtype);
    if (k == 0) { /* empty sums */
        for (size_t r = row_begin; r < row_end; r++)
            for (size_t b = 0; b < n_batch; b++) Y[b * ldy + r] = 0.0f;
        return;
    }
    for (size_t r = row_begin; r < row_end; r++) {
        const uint8_t *row = (const uint8_t *)W + r * row_bytes;
        for (size_t k0 = 0; k0 < k; k0 += SY_UNPACK_CHUNK) {
            size_t n = k - k0 < SY_UNPACK_CHUNK ? k - k0 : SY_UNPACK_CHUNK;
            sy_unpack_scalar(wtype, row + (k0 / traits->block_elems) * traits->block_bytes, n, u, a, c);
            for (size_t b = 0; b < n_batch; b++) {
                sy_qx_row x = sy_qx_row_at(QX, k, b);
                float partial =
                    dot_unpacked_scalar(u, a, c, x.q + k0, x.d + k0 / SY_QX_BLOCK, x.s16 + k0 / SY_QX_GROUP, n);
                if (k0 == 0) {
                    Y[b * ldy + r] = partial;
                } else {
                    Y[b * ldy + r] += partial;
                }
            }
        }
    }
}

static int matmul_qx_scalar(sy_dtype wtype, const void *W, size_t row_bytes, size_t row_begin, size_t row_end,
                            size_t k, const void *QX, size_t n_batch, float *Y, size_t ldy) {
    if (sy_matmul_qx_check(wtype, W, row_bytes, row_begin, row_end, k, QX, n_batch, Y, ldy) != NULL)
        return SY_KERNEL_EINVAL;
    matmul_qx_unpacked(wtype, W, row_bytes, row_begin, row_end, k, QX, n_batch, Y, ldy);
    return SY_KERNEL_OK;
}

static void exp_f32_scalar(const float *x, float *y, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] = sy_expf(x[i]);
}

static void gelu_f32_scalar(const float *x, float *y, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] = 0.5f * x[i] * (1.0f + erff(x[i] * (float)M_SQRT1_2));
}

static void attend_f32_scalar(const float *q, const float *K, const float *V, size_t stride, size_t n, size_t hd,
                              float scale, float *max, float *sum, float *out) {
    sy_attend_with(dot_f32_scalar, exp_f32_scalar, axpy_f32_scalar, q, K, V, stride, n, hd, scale, max, sum, out);
}

const sy_kernels sy_kernels_scalar_table = {
    .tier = SY_CPU_TIER_SCALAR,
    .name = "scalar",
    .dot_f32 = dot_f32_scalar,
    .axpy_f32 = axpy_f32_scalar,
    .matmul = matmul_scalar,
    .matmul_qx = matmul_qx_scalar,
    .exp_f32 = exp_f32_scalar,
    .gelu_f32 = gelu_f32_scalar,
    .attend_f32 = attend_f32_scalar,
    .f16_to_f32 = sy_f16_to_f32_row,
    .f32_to_f16 = sy_f32_to_f16_row,
    .q8_0_to_f32 = sy_q8_0_to_f32_row,
};
