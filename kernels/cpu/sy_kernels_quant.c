/* GGUF block formats: the scalar dequantizer (the reference for what each block means) and the scalar unpacker
 * to the common form weight = a * u + c that the scalar tier's integer dot products use.
 *
 * Block layouts (all little-endian, f16 scales):
 *   Q4_0 (18 B / 32):  d, qs[16]             w[j] = d * ((qs[j] & 15) - 8), w[j+16] = d * ((qs[j] >> 4) - 8)
 *   Q4_1 (20 B / 32):  d, m, qs[16]          w = d * nibble + m
 *   Q5_0 (22 B / 32):  d, qh[4], qs[16]      5th bit of element j is bit j of the 32-bit qh; w = d * (q - 16)
 *   Q5_1 (24 B / 32):  d, m, qh[4], qs[16]   w = d * q + m
 *   Q8_0 (34 B / 32):  d, int8 qs[32]        w = d * q
 *   Q2_K (84 B / 256): scales[16] (low nibble scale, high nibble min), qs[64], d, dmin
 *                      element 128n + 32j + l (l < 32): q = (qs[32n + l] >> 2j) & 3, sub-block 8n + 2j + l/16,
 *                      w = d * scale * q - dmin * min
 *   Q3_K (110 B / 256): hmask[32], qs[64], scales[12] (16 6-bit scales), d
 *                      element 128n + 32j + l: low = (qs[32n + l] >> 2j) & 3, high bit = hmask[l] bit (4n + j),
 *                      q = low - (high ? 0 : 4), sub-block 8n + 2j + l/16, w = d * (scale - 32) * q
 *   Q4_K (144 B / 256): d, dmin, scales[12] (8 6-bit scale/min pairs), qs[128]
 *                      element 64i + l: q = qs[32i + l] & 15 (sub-block 2i), element 64i + 32 + l: qs >> 4
 *                      (sub-block 2i + 1); w = d * scale * q - dmin * min
 *   Q5_K (176 B / 256): d, dmin, scales[12], qh[32], qs[128]; as Q4_K with a 5th bit from qh[l] bit 2i
 *                      (low nibble) or 2i + 1 (high nibble)
 *   Q6_K (210 B / 256): ql[128], qh[64], int8 scales[16], d
 *                      in each half n (128 elements), l < 32: four elements l, l+32, l+64, l+96 take low bits
 *                      ql[64n + l] & 15, ql[64n + l + 32] & 15, ql[64n + l] >> 4, ql[64n + l + 32] >> 4 and
 *                      high bits (qh[32n + l] >> 0, 2, 4, 6) & 3; q = value - 32; sub-block 8n + l/16 + 2m for
 *                      the m-th of the four; w = d * scale * q
 *   Q8_K (292 B / 256): f32 d, int8 qs[256], int16 bsums[16]; w = d * q */
#include "sy_kernels_internal.h"

/* 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K block's 12 scale bytes. */
static inline void k4_scale_min(const uint8_t *s, int j, int *scale, int *min) {
    if (j < 4) {
        *scale = s[j] & 63;
        *min = s[j + 4] & 63;
    } else {
        *scale = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
        *min = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* 6-bit scale of sub-block i (0..15) of a Q3_K block's 12 scale bytes, before the -32 offset. */
static inline int q3k_scale(const uint8_t *s, int i) {
    int low = i < 8 ? s[i] & 15 : s[i - 8] >> 4;
    int high = (s[8 + (i & 3)] >> (2 * (i / 4))) & 3;
    return low | (high << 4);
}

static inline uint32_t load_u32le(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static void dequant_block(sy_dtype type, const uint8_t *b, float *y) {
    switch (type) {
    case SY_DTYPE_Q4_0: {
        float d = sy_load_f16(b);
        for (int j = 0; j < 16; j++) {
            y[j] = d * (float)((b[2 + j] & 15) - 8);
            y[j + 16] = d * (float)((b[2 + j] >> 4) - 8);
        }
        break;
    }
    case SY_DTYPE_Q4_1: {
        float d = sy_load_f16(b), m = sy_load_f16(b + 2);
        for (int j = 0; j < 16; j++) {
            y[j] = d * (float)(b[4 + j] & 15) + m;
            y[j + 16] = d * (float)(b[4 + j] >> 4) + m;
        }
        break;
    }
    case SY_DTYPE_Q5_0: {
        float d = sy_load_f16(b);
        uint32_t qh = load_u32le(b + 2);
        for (int j = 0; j < 16; j++) {
            int q0 = (b[6 + j] & 15) | (int)(((qh >> j) & 1) << 4);
            int q1 = (b[6 + j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
            y[j] = d * (float)(q0 - 16);
            y[j + 16] = d * (float)(q1 - 16);
        }
        break;
    }
    case SY_DTYPE_Q5_1: {
        float d = sy_load_f16(b), m = sy_load_f16(b + 2);
        uint32_t qh = load_u32le(b + 4);
        for (int j = 0; j < 16; j++) {
            int q0 = (b[8 + j] & 15) | (int)(((qh >> j) & 1) << 4);
            int q1 = (b[8 + j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
            y[j] = d * (float)q0 + m;
            y[j + 16] = d * (float)q1 + m;
        }
        break;
    }
    case SY_DTYPE_Q8_0: {
        float d = sy_load_f16(b);
        for (int j = 0; j < 32; j++) y[j] = d * (float)(int8_t)b[2 + j];
        break;
    }
    case SY_DTYPE_Q2_K: {
        const uint8_t *scales = b, *qs = b + 16;
        float d = sy_load_f16(b + 80), dmin = sy_load_f16(b + 82);
        for (int n = 0; n < 2; n++) {
            for (int j = 0; j < 4; j++) {
                for (int l = 0; l < 32; l++) {
                    int sc = scales[8 * n + 2 * j + l / 16];
                    int q = (qs[32 * n + l] >> (2 * j)) & 3;
                    y[128 * n + 32 * j + l] = d * (float)(sc & 15) * (float)q - dmin * (float)(sc >> 4);
                }
            }
        }
        break;
    }
    case SY_DTYPE_Q3_K: {
        const uint8_t *hmask = b, *qs = b + 32, *scales = b + 96;
        float d = sy_load_f16(b + 108);
        for (int n = 0; n < 2; n++) {
            for (int j = 0; j < 4; j++) {
                for (int l = 0; l < 32; l++) {
                    int sc = q3k_scale(scales, 8 * n + 2 * j + l / 16) - 32;
                    int low = (qs[32 * n + l] >> (2 * j)) & 3;
                    int high = (hmask[l] >> (4 * n + j)) & 1;
                    y[128 * n + 32 * j + l] = d * (float)sc * (float)(low - (high ? 0 : 4));
                }
            }
        }
        break;
    }
    case SY_DTYPE_Q4_K:
    case SY_DTYPE_Q5_K: {
        float d = sy_load_f16(b), dmin = sy_load_f16(b + 2);
        const uint8_t *scales = b + 4;
        const uint8_t *qh = type == SY_DTYPE_Q5_K ? b + 16 : NULL;
        const uint8_t *qs = type == SY_DTYPE_Q5_K ? b + 48 : b + 16;
        for (int i = 0; i < 4; i++) {
            int sc0, m0, sc1, m1;
            k4_scale_min(scales, 2 * i, &sc0, &m0);
            k4_scale_min(scales, 2 * i + 1, &sc1, &m1);
            for (int l = 0; l < 32; l++) {
                int q0 = qs[32 * i + l] & 15, q1 = qs[32 * i + l] >> 4;
                if (qh != NULL) {
                    q0 |= ((qh[l] >> (2 * i)) & 1) << 4;
                    q1 |= ((qh[l] >> (2 * i + 1)) & 1) << 4;
                }
                y[64 * i + l] = d * (float)sc0 * (float)q0 - dmin * (float)m0;
                y[64 * i + 32 + l] = d * (float)sc1 * (float)q1 - dmin * (float)m1;
            }
        }
        break;
    }
    case SY_DTYPE_Q6_K: {
        const uint8_t *ql = b, *qh = b + 128;
        const int8_t *scales = (const int8_t *)(b + 192);
        float d = sy_load_f16(b + 208);
        for (int n = 0; n < 2; n++) {
            for (int l = 0; l < 32; l++) {
                int lo0 = ql[64 * n + l] & 15, lo1 = ql[64 * n + l + 32] & 15;
                int lo2 = ql[64 * n + l] >> 4, lo3 = ql[64 * n + l + 32] >> 4;
                int h = qh[32 * n + l];
                int q[4] = {(lo0 | ((h & 3) << 4)) - 32, (lo1 | (((h >> 2) & 3) << 4)) - 32,
                            (lo2 | (((h >> 4) & 3) << 4)) - 32, (lo3 | (((h >> 6) & 3) << 4)) - 32};
                for (int m = 0; m < 4; m++) {
                    int sc = scales[8 * n + l / 16 + 2 * m];
                    y[128 * n + 32 * m + l] = d * (float)sc * (float)q[m];
                }
            }
        }
        break;
    }
    case SY_DTYPE_Q8_K: {
        float d;
        memcpy(&d, b, sizeof d);
        for (int j = 0; j < 256; j++) y[j] = d * (float)(int8_t)b[4 + j];
        break;
    }
    default:
        break;
    }
}

int sy_dequantize_row(sy_dtype type, const void *src, size_t src_bytes, float *dst, size_t n) {
    const sy_dtype_traits *traits = sy_dtype_get(type);
    if (traits == NULL || type == SY_DTYPE_Q8_1) return SY_KERNEL_EINVAL;
    if (n % traits->block_elems != 0) return SY_KERNEL_EINVAL;
    size_t need = sy_dtype_row_bytes(type, n);
    if ((need == 0 && n != 0) || src_bytes < need) return SY_KERNEL_EINVAL;
    if (n == 0) return SY_KERNEL_OK;
    if (src == NULL || dst == NULL) return SY_KERNEL_EINVAL;
    const uint8_t *s = src;
    switch (type) {
    case SY_DTYPE_F32:
        memcpy(dst, s, n * sizeof(float));
        return SY_KERNEL_OK;
    case SY_DTYPE_F16:
    case SY_DTYPE_BF16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h = (uint16_t)(s[2 * i] | (s[2 * i + 1] << 8));
            dst[i] = type == SY_DTYPE_F16 ? sy_f16_to_f32(h) : sy_bf16_to_f32(h);
        }
        return SY_KERNEL_OK;
    default:
        for (size_t blk = 0; blk < n / traits->block_elems; blk++)
            dequant_block(type, s + blk * traits->block_bytes, dst + blk * traits->block_elems);
        return SY_KERNEL_OK;
    }
}

/* ---- unpacking to weight = a * u + c, 16 elements per (a, c) ---- */

static void unpack_block(sy_dtype type, const uint8_t *b, uint8_t *u, float *a, float *c) {
    switch (type) {
    case SY_DTYPE_Q4_0:
    case SY_DTYPE_Q4_1: {
        float d = sy_load_f16(b);
        float offset = type == SY_DTYPE_Q4_0 ? -8.0f * d : sy_load_f16(b + 2);
        const uint8_t *qs = b + (type == SY_DTYPE_Q4_0 ? 2 : 4);
        for (int j = 0; j < 16; j++) {
            u[j] = qs[j] & 15;
            u[j + 16] = qs[j] >> 4;
        }
        a[0] = a[1] = d;
        c[0] = c[1] = offset;
        break;
    }
    case SY_DTYPE_Q5_0:
    case SY_DTYPE_Q5_1: {
        float d = sy_load_f16(b);
        float offset = type == SY_DTYPE_Q5_0 ? -16.0f * d : sy_load_f16(b + 2);
        const uint8_t *qhp = b + (type == SY_DTYPE_Q5_0 ? 2 : 4);
        uint32_t qh = load_u32le(qhp);
        const uint8_t *qs = qhp + 4;
        for (int j = 0; j < 16; j++) {
            u[j] = (uint8_t)((qs[j] & 15) | (((qh >> j) & 1) << 4));
            u[j + 16] = (uint8_t)((qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4));
        }
        a[0] = a[1] = d;
        c[0] = c[1] = offset;
        break;
    }
    case SY_DTYPE_Q8_0: {
        float d = sy_load_f16(b);
        for (int j = 0; j < 32; j++) u[j] = (uint8_t)(b[2 + j] ^ 0x80); /* q + 128 */
        a[0] = a[1] = d;
        c[0] = c[1] = -128.0f * d;
        break;
    }
    case SY_DTYPE_Q2_K: {
        const uint8_t *scales = b, *qs = b + 16;
        float d = sy_load_f16(b + 80), dmin = sy_load_f16(b + 82);
        for (int n = 0; n < 2; n++) {
            for (int j = 0; j < 4; j++) {
                for (int l = 0; l < 32; l++) u[128 * n + 32 * j + l] = (qs[32 * n + l] >> (2 * j)) & 3;
                for (int half = 0; half < 2; half++) {
                    int sc = scales[8 * n + 2 * j + half];
                    a[8 * n + 2 * j + half] = d * (float)(sc & 15);
                    c[8 * n + 2 * j + half] = -(dmin * (float)(sc >> 4));
                }
            }
        }
        break;
    }
    case SY_DTYPE_Q3_K: {
        const uint8_t *hmask = b, *qs = b + 32, *scales = b + 96;
        float d = sy_load_f16(b + 108);
        for (int n = 0; n < 2; n++) {
            for (int j = 0; j < 4; j++) {
                for (int l = 0; l < 32; l++) {
                    int low = (qs[32 * n + l] >> (2 * j)) & 3;
                    int high = (hmask[l] >> (4 * n + j)) & 1;
                    u[128 * n + 32 * j + l] = (uint8_t)(low | (high << 2)); /* q + 4 */
                }
            }
        }
        for (int i = 0; i < 16; i++) {
            a[i] = d * (float)(q3k_scale(scales, i) - 32);
            c[i] = -4.0f * a[i];
        }
        break;
    }
    case SY_DTYPE_Q4_K:
    case SY_DTYPE_Q5_K: {
        float d = sy_load_f16(b), dmin = sy_load_f16(b + 2);
        const uint8_t *scales = b + 4;
        const uint8_t *qh = type == SY_DTYPE_Q5_K ? b + 16 : NULL;
        const uint8_t *qs = type == SY_DTYPE_Q5_K ? b + 48 : b + 16;
        for (int i = 0; i < 4; i++) {
            for (int l = 0; l < 32; l++) {
                int q0 = qs[32 * i + l] & 15, q1 = qs[32 * i + l] >> 4;
                if (qh != NULL) {
                    q0 |= ((qh[l] >> (2 * i)) & 1) << 4;
                    q1 |= ((qh[l] >> (2 * i + 1)) & 1) << 4;
                }
                u[64 * i + l] = (uint8_t)q0;
                u[64 * i + 32 + l] = (uint8_t)q1;
            }
        }
        for (int s = 0; s < 8; s++) {
            int sc, m;
            k4_scale_min(scales, s, &sc, &m);
            a[2 * s] = a[2 * s + 1] = d * (float)sc;
            c[2 * s] = c[2 * s + 1] = -(dmin * (float)m);
        }
        break;
    }
    case SY_DTYPE_Q6_K: {
        const uint8_t *ql = b, *qh = b + 128;
        const int8_t *scales = (const int8_t *)(b + 192);
        float d = sy_load_f16(b + 208);
        for (int n = 0; n < 2; n++) {
            for (int l = 0; l < 32; l++) {
                int h = qh[32 * n + l];
                u[128 * n + l] = (uint8_t)((ql[64 * n + l] & 15) | ((h & 3) << 4));
                u[128 * n + 32 + l] = (uint8_t)((ql[64 * n + l + 32] & 15) | (((h >> 2) & 3) << 4));
                u[128 * n + 64 + l] = (uint8_t)((ql[64 * n + l] >> 4) | (((h >> 4) & 3) << 4));
                u[128 * n + 96 + l] = (uint8_t)((ql[64 * n + l + 32] >> 4) | (((h >> 6) & 3) << 4));
            }
        }
        for (int i = 0; i < 16; i++) {
            a[i] = d * (float)scales[i];
            c[i] = -32.0f * a[i];
        }
        break;
    }
    default:
        break;
    }
}

void sy_unpack_scalar(sy_dtype wtype, const uint8_t *blocks, size_t n, uint8_t *u, float *a, float *c) {
    const sy_dtype_traits *traits = sy_dtype_get(wtype);
    size_t elems = traits->block_elems;
    for (size_t blk = 0; blk < n / elems; blk++) {
        unpack_block(wtype, blocks + blk * traits->block_bytes, u + blk * elems, a + blk * elems / SY_QX_GROUP,
                     c + blk * elems / SY_QX_GROUP);
    }
}
