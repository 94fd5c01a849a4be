/* Shared between the kernel tiers; not part of the kernels' API. */
#ifndef SY_KERNELS_INTERNAL_H
#define SY_KERNELS_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "sy_kernels.h"

#if defined(__x86_64__) || defined(__i386__)
#define SY_KERNELS_X86 1
#else
#define SY_KERNELS_X86 0
#endif

/* Quantized activations, one row of k per batch element, laid out as
 *   int8 q[k] | f32 d[k/32] (block scales) | f32 s16[k/16] (d * sum of q over each 16 elements)
 * so a row is k * 11 / 8 bytes and every part is 4-byte aligned when the buffer is. */
#define SY_QX_BLOCK 32
#define SY_QX_GROUP 16

static inline size_t sy_qx_row_bytes(size_t k) { return k + (k / SY_QX_BLOCK) * 4 + (k / SY_QX_GROUP) * 4; }

typedef struct sy_qx_row {
    const int8_t *q;
    const float *d;
    const float *s16;
} sy_qx_row;

static inline sy_qx_row sy_qx_row_at(const void *QX, size_t k, size_t b) {
    const uint8_t *base = (const uint8_t *)QX + b * sy_qx_row_bytes(k);
    sy_qx_row row = {(const int8_t *)base, (const float *)(const void *)(base + k),
                     (const float *)(const void *)(base + k + (k / SY_QX_BLOCK) * 4)};
    return row;
}

/* Quantized weights are unpacked, a chunk of a row at a time, to a common form that all types share:
 * weight[i] = a[i/16] * u[i] + c[i/16] with u[i] an unsigned 8-bit integer (Q8_0 uses all 8 bits, the others at
 * most 6). A chunk is a whole number of blocks. */
#define SY_UNPACK_CHUNK 1024

/* Unpacks n elements (a multiple of the type's block size) starting at a block boundary. */
typedef void (*sy_unpack_fn)(sy_dtype wtype, const uint8_t *blocks, size_t n, uint8_t *u, float *a, float *c);
/* Sum over the chunk of weight[i] * x[i] with x in quantized form; n is a multiple of 32. */
typedef float (*sy_dot_unpacked_fn)(const uint8_t *u, const float *a, const float *c, const int8_t *q,
                                    const float *d, const float *s16, size_t n);
/* Whether the unpacked values of this type can exceed 127 (Q8_0), which some integer paths must know. */
static inline int sy_unpacked_is_wide(sy_dtype wtype) { return wtype == SY_DTYPE_Q8_0; }

void sy_unpack_scalar(sy_dtype wtype, const uint8_t *blocks, size_t n, uint8_t *u, float *a, float *c);
#if SY_KERNELS_X86
void sy_unpack_avx2(sy_dtype wtype, const uint8_t *blocks, size_t n, uint8_t *u, float *a, float *c);
#endif

/* The matmul_qx body common to all tiers: unpack each chunk of a row once, then dot it with every batch row.
 * Arguments are already validated; dot must handle the type's unpacked range (see sy_unpacked_is_wide). */
void sy_matmul_qx_driver(sy_unpack_fn unpack, sy_dot_unpacked_fn dot, sy_dtype wtype,
                         const void *W, size_t row_bytes, size_t row_begin, size_t row_end, size_t k,
                         const void *QX, size_t n_batch, float *Y, size_t ldy);

/* Validates a matmul_qx call (QX alignment included); NULL when valid. */
const char *sy_matmul_qx_check(sy_dtype wtype, const void *W, size_t row_bytes, size_t row_begin, size_t row_end,
                               size_t k, const void *QX, size_t n_batch, const float *Y, size_t ldy);

/* Runs matmul on a quantized type: quantizes X into a heap buffer and calls the tier's matmul_qx. */
int sy_matmul_quantized_via_qx(const sy_kernels *tier, sy_dtype wtype, const void *W, size_t row_bytes,
                               size_t row_begin, size_t row_end, size_t k, const float *X, size_t n_batch,
                               size_t ldx, float *Y, size_t ldy);

/* Loads a little-endian f16 stored at an arbitrary address (block scales are 2-byte aligned at best). */
static inline float sy_load_f16(const uint8_t *p) { return sy_f16_to_f32((uint16_t)(p[0] | (p[1] << 8))); }

extern const sy_kernels sy_kernels_scalar_table;
#if SY_KERNELS_X86
extern const sy_kernels sy_kernels_avx2_table;
extern const sy_kernels sy_kernels_avx512_table;
#endif

#endif
