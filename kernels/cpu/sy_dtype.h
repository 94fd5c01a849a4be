/* Element and block types of weights and activations. The numbers are GGUF's (ggml_type) so that a GGUF tensor's
 * type field maps directly; SafeTensors dtypes map onto the same set. */
#ifndef SY_DTYPE_H
#define SY_DTYPE_H

#include <stddef.h>
#include <stdint.h>

typedef enum sy_dtype {
    SY_DTYPE_F32 = 0,
    SY_DTYPE_F16 = 1,
    SY_DTYPE_Q4_0 = 2,
    SY_DTYPE_Q4_1 = 3,
    SY_DTYPE_Q5_0 = 6,
    SY_DTYPE_Q5_1 = 7,
    SY_DTYPE_Q8_0 = 8,
    SY_DTYPE_Q8_1 = 9,
    SY_DTYPE_Q2_K = 10,
    SY_DTYPE_Q3_K = 11,
    SY_DTYPE_Q4_K = 12,
    SY_DTYPE_Q5_K = 13,
    SY_DTYPE_Q6_K = 14,
    SY_DTYPE_Q8_K = 15,
    SY_DTYPE_BF16 = 30,
    SY_DTYPE_COUNT_ /* not a type: one past the largest id */
} sy_dtype;

/* Elements per block (1 for plain types) and bytes per block; 0/0 for ids that are not supported types. */
typedef struct sy_dtype_traits {
    const char *name; /* "f32", "q4_k", ... */
    uint32_t block_elems;
    uint32_t block_bytes;
} sy_dtype_traits;

/* Traits of a type id, or NULL when the id is not a supported type. */
const sy_dtype_traits *sy_dtype_get(uint32_t id);

/* Bytes of a row of n elements: 0 when n is not a multiple of the block size or the id is unknown, or when the
 * size would overflow. */
size_t sy_dtype_row_bytes(uint32_t id, uint64_t n);

#endif
