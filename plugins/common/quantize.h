/* Quantization for the GGUF writer: f32 rows -> GGUF tensor types, and llama.cpp's per-tensor type choices for
 * its file types ("recipes": Q4_K_M, Q8_0, ...).
 *
 * Row quantizers. Each produces, bit for bit, what llama.cpp's reference quantizer produces for the same floats
 * without an importance matrix (what `llama-quantize` does when none is given), so a file quantized here equals
 * one quantized by llama.cpp, tensor by tensor. Scales are rounded to f16 the same way (nearest even). The
 * arithmetic is plain f32 in a fixed order; the build must not contract a*b+c into fused multiply-adds (C11 mode
 * does not), or a rare rounding tie would go the other way.
 *
 * Per-tensor types. llama.cpp does not quantize every tensor to the file type: the output matrix (and the token
 * embedding when it is tied to the output) gets Q6_K, Q4_K_M / Q5_K_M give a pattern of attn_v and ffn_down
 * layers Q6_K, Q2_K / Q3_K_* raise several tensors, norms and other vectors stay F32, and a row length that is not
 * a multiple of a K-quant's 256 falls back to a 32-element type (Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, Q2_K /
 * Q3_K -> Q4_0; F16 when even 32 does not divide it). sy_quant_choose_types() applies those rules to a tensor list
 * in llama.cpp's processing order (sy_quant_tensor_compare), which the counters of those patterns depend on.
 *
 * Everything here is pure computation: thread-safe, no allocation except where stated. */
#ifndef SY_QUANTIZE_H
#define SY_QUANTIZE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sy_dtype.h"

/* ---- rows ---- */

/* Whether sy_quantize_rows can write this type: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K .. Q6_K. */
bool sy_quantize_supports(sy_dtype type);

/* Quantizes n_rows rows of n_per_row floats (row r at src + r * n_per_row) into dst, rows packed one after the
 * other (sy_dtype_row_bytes(type, n_per_row) bytes each). dst_size is checked. Returns the bytes written, or 0
 * when the type is not supported, n_per_row is not a multiple of its block size, a size overflows, or dst_size is
 * too small. Inputs must be finite (sy_quantize_find_nonfinite checks): the quantizers divide by maxima. */
size_t sy_quantize_rows(sy_dtype type, const float *src, size_t n_rows, size_t n_per_row, void *dst, size_t dst_size);

/* Index of the first NaN or infinity among n floats, or n when all are finite. */
size_t sy_quantize_find_nonfinite(const float *x, size_t n);

/* ---- file types (recipes) ---- */

/* llama.cpp's llama_ftype numbers, as written to general.file_type. */
typedef enum sy_quant_ftype {
    SY_FTYPE_F32 = 0,
    SY_FTYPE_F16 = 1,
    SY_FTYPE_Q4_0 = 2,
    SY_FTYPE_Q4_1 = 3,
    SY_FTYPE_Q8_0 = 7,
    SY_FTYPE_Q5_0 = 8,
    SY_FTYPE_Q5_1 = 9,
    SY_FTYPE_Q2_K = 10,
    SY_FTYPE_Q3_K_S = 11,
    SY_FTYPE_Q3_K_M = 12,
    SY_FTYPE_Q3_K_L = 13,
    SY_FTYPE_Q4_K_S = 14,
    SY_FTYPE_Q4_K_M = 15,
    SY_FTYPE_Q5_K_S = 16,
    SY_FTYPE_Q5_K_M = 17,
    SY_FTYPE_Q6_K = 18,
    SY_FTYPE_BF16 = 32,
} sy_quant_ftype;

/* "Q4_K_M", "q8_0", "F16", ... (case-insensitive) -> the file type. false for any other name. */
bool sy_quant_ftype_parse(const char *name, sy_quant_ftype *out);
/* Upper-case name ("Q4_K_M"), or NULL for a number that is not one of the above. */
const char *sy_quant_ftype_name(sy_quant_ftype ftype);
/* The names sy_quant_ftype_parse accepts, comma-separated (for usage messages). */
const char *sy_quant_ftype_list(void);
/* The tensor type most tensors get (Q4_K for Q4_K_M, F16 for F16, ...). */
sy_dtype sy_quant_ftype_base_type(sy_quant_ftype ftype);

/* llama.cpp's tensor order: tensors outside blocks first, then block 0, 1, ...; by name within each group
 * ("blk.N." is read as a number, so blk.10 comes after blk.9). qsort-style result. */
int sy_quant_tensor_compare(const char *a, const char *b);

/* One tensor of a model being quantized. The caller fills name, n_dims, dims and src_type;
 * sy_quant_choose_types fills out_type (the source type for tensors that are not quantized) and fallback (true
 * when the row length forced a type other than the recipe's). */
typedef struct sy_quant_tensor {
    const char *name;
    uint32_t n_dims;
    uint64_t dims[4]; /* dims[0] is the row length */
    sy_dtype src_type;
    sy_dtype out_type;
    bool fallback;
} sy_quant_tensor;

/* The model facts the rules read. */
typedef struct sy_quant_model {
    uint32_t n_layer;   /* block_count */
    uint32_t n_head;    /* attention.head_count */
    uint32_t n_head_kv; /* attention.head_count_kv (0: same as n_head) */
} sy_quant_model;

/* Chooses every tensor's output type for the file type, visiting the tensors in the order given (sort them with
 * sy_quant_tensor_compare first to match llama.cpp). Tensors that are not matrices, whose names do not end in
 * "weight", norms, and lfm2's short-conv kernel keep their type. A tensor to quantize must come from F32, F16 or
 * BF16 (llama.cpp refuses to requantize without --allow-requantize, and so does this). Returns false with one
 * line in err naming the tensor otherwise. */
bool sy_quant_choose_types(sy_quant_ftype ftype, const sy_quant_model *model, sy_quant_tensor *tensors, size_t n,
                           char *err, size_t err_size);

#endif
