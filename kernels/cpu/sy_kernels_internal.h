/* Shared between the kernel tiers; not part of the kernels' API. */
#ifndef SY_KERNELS_INTERNAL_H
#define SY_KERNELS_INTERNAL_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <limits.h>
#include <string.h>

#include "sy_kernels.h"

#if defined(__x86_64__) || defined(__i386__)
#define SY_KERNELS_X86 1
#else
#define SY_KERNELS_X86 0
#endif

/* Quantized activations, one row of k per batch element, laid out as
 *   int8 qi[G * 512] | int32 nsum[G * 16] | int8 q[k] | f32 d[k/32] (block scales) | f32 s16[k/16] (d * sum of q over
 *   each 16 elements), the row padded to a multiple of 64 bytes,
 * with G = ceil(k / 512) groups of 16 blocks of 32. q holds the codes in element order; qi the same codes again, group
 * by group, with the four bytes c of each block of the group side by side (block l of group g, elements 4c .. 4c + 3
 * at qi[512 g + 64 c + 4 l]), so that one 512-bit vpdpbusd per c sums a different block in each 32-bit lane; nsum is
 * minus each block's sum of codes. Blocks past the row's end are zero in both. Every part is 64-byte aligned when the
 * buffer is. */
#define SY_QX_BLOCK 32
#define SY_QX_GROUP 16
#define SY_QX_IGROUP_BLOCKS 16 /* blocks per group of qi */

static inline size_t sy_qx_igroups(size_t k) { return (k / SY_QX_BLOCK + SY_QX_IGROUP_BLOCKS - 1) / SY_QX_IGROUP_BLOCKS; }

/* k must be at most SIZE_MAX / 4 (sy_quantize_x_bytes checks) */
static inline size_t sy_qx_row_bytes(size_t k) {
    size_t bytes = sy_qx_igroups(k) * (SY_QX_IGROUP_BLOCKS * SY_QX_BLOCK + SY_QX_IGROUP_BLOCKS * 4) + k +
                   (k / SY_QX_BLOCK) * 4 + (k / SY_QX_GROUP) * 4;
    return (bytes + 63) / 64 * 64;
}

typedef struct sy_qx_row {
    const int8_t *q;
    const float *d;
    const float *s16;
    const int8_t *qi;
    const int32_t *nsum;
} sy_qx_row;

static inline sy_qx_row sy_qx_row_at(const void *QX, size_t k, size_t b) {
    const uint8_t *base = (const uint8_t *)QX + b * sy_qx_row_bytes(k);
    size_t groups = sy_qx_igroups(k);
    const uint8_t *q = base + groups * (SY_QX_IGROUP_BLOCKS * SY_QX_BLOCK + SY_QX_IGROUP_BLOCKS * 4);
    sy_qx_row row = {(const int8_t *)q, (const float *)(const void *)(q + k),
                     (const float *)(const void *)(q + k + (k / SY_QX_BLOCK) * 4), (const int8_t *)base,
                     (const int32_t *)(const void *)(base + groups * SY_QX_IGROUP_BLOCKS * SY_QX_BLOCK)};
    return row;
}

/* The scalar reference unpacks quantized weights, a chunk of a row at a time, to a common form that all types share:
 * weight[i] = a[i/16] * u[i] + c[i/16] with u[i] an unsigned 8-bit integer (Q8_0 uses all 8 bits, the others at
 * most 6), and dots it with the quantized activations per 16 elements. A chunk is a whole number of blocks. The
 * SIMD tiers never unpack: they use the fused kernels below. */
#define SY_UNPACK_CHUNK 1024

/* Unpacks n elements (a multiple of the type's block size) starting at a block boundary (sy_kernels_quant.c). */
void sy_unpack_scalar(sy_dtype wtype, const uint8_t *blocks, size_t n, uint8_t *u, float *a, float *c);

/* Fused products, the SIMD tiers' matmul_qx for every quantized type and batch size: each weight block is decoded
 * in registers and dotted at once with a tile of activation rows (the tier's, at most SY_FUSED_TILE_MAX), with no
 * unpacked copy. A kernel sets Y[t * ldy + r] = dot(row r, x[t]) for rows r in [row_begin, row_end) and t < nb,
 * each row being n_blocks whole blocks of the weight type at W + r * row_bytes (x[t] point at the rows' first
 * element). */
#define SY_FUSED_TILE_MAX 8
/* Weights usually stream from a mapped file's 4 KiB pages, where the hardware prefetcher stops at every page
 * boundary: the fused kernels ask for the bytes SY_PREFETCH_AHEAD ahead of those they read (past the matrix too:
 * a prefetch never faults), which keeps the stream going. */
#ifndef SY_PREFETCH_AHEAD
#define SY_PREFETCH_AHEAD 2048
#endif
static inline void sy_prefetch_ahead(const uint8_t *p, size_t bytes) {
    uintptr_t ahead = (uintptr_t)p + SY_PREFETCH_AHEAD;
    for (size_t off = 0; off < bytes; off += 64) __builtin_prefetch((const void *)(ahead + off));
}
typedef void (*sy_fused_rows_fn)(const uint8_t *W, size_t row_bytes, size_t row_begin, size_t row_end,
                                 size_t n_blocks, const sy_qx_row *x, float *Y, size_t ldy);
/* A tier's kernels for wtype, one per nb = 1..tile (index nb - 1); returns the tile, 0 when it has none. */
#if SY_KERNELS_X86
int sy_fused_kernels_avx2(sy_dtype wtype, sy_fused_rows_fn out[SY_FUSED_TILE_MAX]);
int sy_fused_kernels_avx512(sy_dtype wtype, sy_fused_rows_fn out[SY_FUSED_TILE_MAX]);
#endif

#if SY_KERNELS_X86
/* The AVX-512 matmul_qx for batches: PANEL_ROWS rows decoded once meet every token (sy_kernels_fused_avx512.c), with
 * the row kernels' bits; false (nothing written) for a type it lacks or a row too long for its buffer. */
bool sy_fused_panel_avx512(sy_dtype wtype, const void *W, size_t row_bytes, size_t row_begin, size_t row_end,
                           size_t k, const void *QX, size_t n_batch, float *Y, size_t ldy);
#endif

/* The matmul_qx body of the fused path: every row against the batch in groups of `tile` (fns as above). */
void sy_matmul_qx_fused_driver(sy_fused_rows_fn const fns[SY_FUSED_TILE_MAX], int tile, sy_dtype wtype, const void *W,
                               size_t row_bytes, size_t row_begin, size_t row_end, size_t k, const void *QX,
                               size_t n_batch, float *Y, size_t ldy);

/* Validates a matmul_qx call (QX alignment included); NULL when valid. */
const char *sy_matmul_qx_check(sy_dtype wtype, const void *W, size_t row_bytes, size_t row_begin, size_t row_end,
                               size_t k, const void *QX, size_t n_batch, const float *Y, size_t ldy);

/* Runs matmul on a quantized type: quantizes X into a heap buffer and calls the tier's matmul_qx. */
int sy_matmul_quantized_via_qx(const sy_kernels *tier, sy_dtype wtype, const void *W, size_t row_bytes,
                               size_t row_begin, size_t row_end, size_t k, const float *X, size_t n_batch,
                               size_t ldx, float *Y, size_t ldy);

/* One row of sy_quantize_x (k a multiple of 32): the scalar reference, and an AVX2 version that writes the same bytes
 * (sy_quantize_x takes it on the AVX2 and AVX-512 tiers). */
void sy_quantize_row_scalar(const float *x, size_t k, int8_t *q, float *d, float *s16);
#if SY_KERNELS_X86
void sy_quantize_row_avx2(const float *x, size_t k, int8_t *q, float *d, float *s16);
#endif

/* Loads a little-endian f16 stored at an arbitrary address (block scales are 2-byte aligned at best). */
static inline float sy_load_f16(const uint8_t *p) { return sy_f16_to_f32((uint16_t)(p[0] | (p[1] << 8))); }

/* sy_expf's data (sy_kernels.c), which the vector forms share: 2^(i/32) as double bits less i << 47 (so that adding
 * k << 47 for k = 32 q + i makes 2^(k/32)), 32 / ln 2, the rounding shift 1.5 * 2^52, the cubic's coefficients
 * (scaled for r in units of 1/32), and the range outside which the result is 0 or +inf. */
extern const uint64_t sy_expf_table[32];
#define SY_EXPF_INVLN2_32 0x1.71547652b82fep+5
#define SY_EXPF_SHIFT 0x1.8p+52
#define SY_EXPF_C0 (0x1.c6af84b912394p-5 / 32 / 32 / 32)
#define SY_EXPF_C1 (0x1.ebfce50fac4f3p-3 / 32 / 32)
#define SY_EXPF_C2 (0x1.62e42ff0c52d6p-1 / 32)
#define SY_EXPF_UNDER -0x1.9fe368p6f /* log(2^-150): below it e^x rounds to 0 */
#define SY_EXPF_OVER 0x1.62e42ep6f   /* log(2^128) rounded down: above it e^x is +inf */

/* attend_f32 (sy_kernels.h) in terms of a tier's dot and axpy, which the compiler inlines where the tier's function
 * passes its own; keys are scored SY_ATTEND_CHUNK at a time (the transformer's blocks are smaller). */
#define SY_ATTEND_CHUNK 256

/* s[i] = scale * dot(q, K + i*stride) for i < n; returns the largest (-inf for none). */
static inline __attribute__((always_inline)) float sy_attend_scores(float (*dot)(const float *, const float *, size_t),
                                                                    const float *q, const float *K, size_t stride,
                                                                    size_t n, size_t hd, float scale, float *s) {
    float block_max = -INFINITY;
    for (size_t i = 0; i < n; i++) {
        s[i] = dot(q, K + i * stride, hd) * scale;
        if (s[i] > block_max) block_max = s[i];
    }
    return block_max;
}

/* The rest of attend_f32 for a block of nc keys whose scores s hold and whose largest is block_max: the rescale
 * when the maximum moves, the exponentials (s is overwritten with them) and the value sums, in attend_f32's order. */
static inline __attribute__((always_inline)) void sy_attend_fold(void (*exp_row)(const float *, float *, size_t),
                                                                 void (*axpy)(float *, float, const float *, size_t),
                                                                 float *s, float block_max, const float *Vc,
                                                                 size_t stride, size_t nc, size_t hd, float *max,
                                                                 float *sum, float *out) {
    if (block_max > *max) { /* rescale what was summed under the old maximum */
        float shrink = sy_expf(*max - block_max);
        *sum *= shrink;
        for (size_t i = 0; i < hd; i++) out[i] *= shrink;
        *max = block_max;
    }
    for (size_t i = 0; i < nc; i++) s[i] -= *max;
    exp_row(s, s, nc);
    for (size_t i = 0; i < nc; i++) {
        *sum += s[i];
        axpy(out, s[i], Vc + i * stride, hd);
    }
}

static inline __attribute__((always_inline)) void sy_attend_with(float (*dot)(const float *, const float *, size_t),
                                                                 void (*exp_row)(const float *, float *, size_t),
                                                                 void (*axpy)(float *, float, const float *, size_t),
                                                                 const float *q, const float *K, const float *V,
                                                                 size_t stride, size_t n, size_t hd, float scale,
                                                                 float *max, float *sum, float *out) {
    for (size_t c0 = 0; c0 < n; c0 += SY_ATTEND_CHUNK) {
        size_t nc = n - c0 < SY_ATTEND_CHUNK ? n - c0 : SY_ATTEND_CHUNK;
        const float *Kc = K + c0 * stride, *Vc = V + c0 * stride;
        float s[SY_ATTEND_CHUNK];
        float block_max = sy_attend_scores(dot, q, Kc, stride, nc, hd, scale, s);
        sy_attend_fold(exp_row, axpy, s, block_max, Vc, stride, nc, hd, max, sum, out);
    }
}

#define SY_BF16_AVX512_MAX_K 32768 /* the longest BF16 row sy_matmul_bf16_avx512 takes */

extern const sy_kernels sy_kernels_scalar_table;
#if SY_KERNELS_X86
extern const sy_kernels sy_kernels_avx2_table;
extern const sy_kernels sy_kernels_avx512_table;
extern const sy_kernels sy_kernels_amx_table;
/* BF16 weights on the AVX-512 tier (sy_kernels_bf16_avx512.c): matmul's contract, batch-invariant; returns false,
 * doing nothing, when k is over SY_BF16_AVX512_MAX_K (its stack buffer), and the caller takes the 16-wide tiles. */
bool sy_matmul_bf16_avx512(const void *W, size_t row_bytes, size_t row_begin, size_t row_end, size_t k, const float *X,
                           size_t n_batch, size_t ldx, float *Y, size_t ldy);
#endif
/* NULL when the AMX tier can run here, else why not (sy_kernels_amx.c). */
const char *sy_amx_unavailable_reason(void);

#endif
