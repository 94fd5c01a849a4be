/* CPU kernels with runtime dispatch: a scalar reference tier plus AVX2/FMA and AVX-512 tiers chosen by cpuid.
 *
 * Matrix products take weights in their storage type (F32, F16, BF16, or a GGUF block-quantized type) and f32
 * activations. Weight rows are read once per call for the whole batch, which is what makes batched prefill fast.
 *
 * Precision choices:
 *  - F16/BF16 weights are widened to f32 and multiplied with f32 FMA (products are exact in f32, only the
 *    accumulation rounds). The AVX-512 BF16 dot instruction is not used: it needs the activations rounded to bf16
 *    (~3 significant digits off every product) and was not faster here than the AVX-512 tier's BF16 kernel, which
 *    widens 32 weights with two instructions (sy_kernels_bf16_avx512.c).
 *  - Quantized weights are multiplied by activations quantized to 8 bits with one f32 scale per 32 elements (for
 *    every quantized weight type, the K-quants included: finer than 256-element Q8_K scales, so at least as
 *    accurate), with exact integer sums per 16 elements. All tiers quantize the activations to the same bytes (the
 *    AVX2 and AVX-512 tiers by a SIMD version of the same IEEE operations), so tiers differ only by f32 rounding
 *    order. The AVX2 and AVX-512 tiers decode each weight block in registers and dot it with up to four (AVX2) or
 *    eight (AVX-512) tokens at once (no unpacked copy of the weights).
 *  - Batch invariance: within a tier, a row of X gives the same bits whatever the batch around it (how many rows,
 *    at which position), so a token's logits do not depend on what shares its decode call; speculative
 *    verification and continuous batching then pick exactly the tokens of a plain decode.
 *
 * All functions are thread-safe; none allocates except sy_kernels->matmul on quantized weight types (the
 * activation buffer; use sy_quantize_x + matmul_qx to supply it yourself). */
#ifndef SY_KERNELS_H
#define SY_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sy_dtype.h"

/* ---- tiers and dispatch ---- */

typedef enum sy_cpu_tier {
    SY_CPU_TIER_SCALAR = 0,
    SY_CPU_TIER_AVX2 = 1,   /* AVX2 + FMA + F16C */
    SY_CPU_TIER_AVX512 = 2, /* AVX-512 F/BW/VL/VNNI (Ice Lake, Zen 4 and later) */
    SY_CPU_TIER_AMX = 3,    /* AVX-512 plus AMX INT8 tiles for Q8_0 products of >= 16 tokens (Sapphire Rapids on) */
    SY_CPU_TIER_COUNT_
} sy_cpu_tier;

/* "scalar", "avx2", "avx512", "amx"; "unknown" for anything else. */
const char *sy_cpu_tier_name(sy_cpu_tier tier);
/* Parses a tier name (exact, lower case); false when it is not one. */
bool sy_cpu_tier_from_name(const char *name, sy_cpu_tier *out);
/* Whether this build has the tier and this CPU can run it. */
bool sy_cpu_tier_supported(sy_cpu_tier tier);
/* Why the tier is unsupported here (one line), or NULL when it is supported. */
const char *sy_cpu_tier_unavailable_reason(sy_cpu_tier tier);
/* The fastest supported tier. */
sy_cpu_tier sy_cpu_tier_supported_best(void);

/* Status of the kernels that validate their arguments. */
enum {
    SY_KERNEL_OK = 0,
    SY_KERNEL_EINVAL = -1, /* unsupported type, bad length/stride/range: see sy_matmul_check */
    SY_KERNEL_ENOMEM = -2,
};

typedef struct sy_kernels {
    sy_cpu_tier tier;
    const char *name; /* the tier's name */

    /* sum a[i]*b[i] */
    float (*dot_f32)(const float *a, const float *b, size_t n);
    /* y[i] += alpha * x[i] (the attention value accumulation) */
    void (*axpy_f32)(float *y, float alpha, const float *x, size_t n);

    /* Y[b*ldy + r] = dot(row r of W, X[b*ldx .. b*ldx+k)) for r in [row_begin, row_end), b in [0, n_batch).
     * W points at row 0; row r starts at W + r*row_bytes and holds k elements of wtype (row_bytes may exceed
     * the packed size, e.g. for padded rows). Threads split the work by disjoint row ranges.
     * Returns SY_KERNEL_OK, SY_KERNEL_EINVAL (see sy_matmul_check) or SY_KERNEL_ENOMEM (quantized types allocate
     * the quantized activations). */
    int (*matmul)(sy_dtype wtype, const void *W, size_t row_bytes, size_t row_begin, size_t row_end, size_t k,
                  const float *X, size_t n_batch, size_t ldx, float *Y, size_t ldy);

    /* The same for quantized wtype with activations already quantized by sy_quantize_x (n_batch rows of k);
     * never allocates, so a thread pool can quantize once and share QX among threads. */
    int (*matmul_qx)(sy_dtype wtype, const void *W, size_t row_bytes, size_t row_begin, size_t row_end, size_t k,
                     const void *QX, size_t n_batch, float *Y, size_t ldy);

    /* y[i] = sy_expf(x[i]) for i < n (y may be x): the same bits on every tier, vectorised where the tier can. */
    void (*exp_f32)(const float *x, float *y, size_t n);

    /* y[i] = x[i] / 2 * (1 + erf(x[i] / sqrt 2)), BERT's exact GELU, for i < n (y may be x). The scalar tier uses
     * libm's erff; AVX2 and AVX-512 glibc's vector erff (libmvec, within 4 ulp of it), each element through a whole
     * vector, so a result does not depend on where in x it sits, but the tiers differ in the last bits. */
    void (*gelu_f32)(const float *x, float *y, size_t n);

    /* One block of keys of a query's attention with an online softmax: s_i = scale * dot_f32(q, K + i*stride, hd)
     * for i < n; if the largest s_i exceeds *max, out and *sum are first scaled by sy_expf(*max - largest) and
     * *max becomes it; then for each i in order, e = sy_expf(s_i - *max), *sum += e, axpy_f32(out, e, V +
     * i*stride, hd). That is the tier's dot_f32 and axpy_f32 key by key, bit for bit, without a call per key and,
     * where the tier can, with sixteen keys scored and exponentiated at once and out held in registers. */
    void (*attend_f32)(const float *q, const float *K, const float *V, size_t stride, size_t n, size_t hd,
                       float scale, float *max, float *sum, float *out);

    /* KV cache rows in their storage type (the transformer's cache_type_k/v), to and from the f32 the attention
     * reads. Every tier gives the same bits for finite values (the conversions are exact, or round to nearest
     * even): f16_to_f32 and f32_to_f16 convert n elements; q8_0_to_f32 widens n_blocks Q8_0 blocks (34 bytes each:
     * an f16 scale d, then 32 int8 codes q, as ggml lays them out) to 32 * n_blocks floats d * q. */
    void (*f16_to_f32)(const uint16_t *src, float *dst, size_t n);
    void (*f32_to_f16)(const float *src, uint16_t *dst, size_t n);
    void (*q8_0_to_f32)(const void *blocks, float *dst, size_t n_blocks);
} sy_kernels;

/* The table of a tier, or NULL when this CPU (or this build) cannot run it. */
const sy_kernels *sy_kernels_for_tier(sy_cpu_tier tier);

/* The best supported tier, unless the environment variable SY_CPU_TIER (scalar|avx2|avx512|amx) forces one. A forced
 * tier this CPU lacks, or an unknown value, prints one warning to stderr and gives the best supported tier, except
 * SY_CPU_TIER=amx, which exits the process with the reason (whoever asks for AMX is measuring it). The choice is
 * made once per process. */
const sy_kernels *sy_kernels_active(void);

/* One line for logs and `switchyard plugins`: the tier of `tier`, what it uses for BF16 and Q8_0 weights, and why
 * AMX is not used where it is not (the CPU lacks it, the kernel refused the tile state, or a lower tier was forced by
 * SY_CPU_TIER), e.g. "avx512 (bf16: f32 fma, even/odd; q8_0: vnni; amx unavailable: the CPU reports no ...)".
 * Writes at most size bytes (NUL included) and returns out. */
char *sy_kernels_describe(const sy_kernels *tier, char *out, size_t size);

/* ---- argument checks ---- */

/* Whether matmul handles this weight type (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K..Q6_K). */
bool sy_matmul_supports(sy_dtype wtype);
/* Whether the weight type is block-quantized, i.e. takes quantized activations (matmul_qx). */
bool sy_matmul_wants_quantized_x(sy_dtype wtype);
/* NULL when a matmul with these arguments is valid, else a message naming what is wrong. X/QX/Y are checked
 * for NULL, strides for overflow; the caller vouches that the buffers are as large as the shapes say. */
const char *sy_matmul_check(sy_dtype wtype, const void *W, size_t row_bytes, size_t row_begin, size_t row_end,
                            size_t k, const void *X, size_t n_batch, size_t ldx, const float *Y, size_t ldy);

/* ---- quantized activations ---- */

/* Bytes sy_quantize_x writes for n_batch rows of k (k a multiple of 32); 0 when k is not, or on overflow. */
size_t sy_quantize_x_bytes(size_t k, size_t n_batch);
/* Quantizes n_batch rows of k floats (row b at X + b*ldx) to 8-bit blocks of 32 with an f32 scale each.
 * Returns SY_KERNEL_EINVAL when k is not a multiple of 32 or a stride overflows. */
int sy_quantize_x(const float *X, size_t n_batch, size_t ldx, size_t k, void *QX);

/* ---- Q8_0 rows (the KV cache's q8_0) ---- */

#define SY_Q8_0_BLOCK_ELEMS 32
#define SY_Q8_0_BLOCK_BYTES 34
/* n floats (a multiple of 32) to n / 32 Q8_0 blocks exactly as ggml's quantize_row_q8_0_ref: per block
 * d = max|x| / 127 stored as f16, codes roundf(x / d) (0 when d is 0). Writes are rare next to reads (one row per
 * token and layer), so one scalar version serves every tier. */
void sy_quantize_q8_0_row(const float *x, void *blocks, size_t n);
/* The scalar widening of n_blocks Q8_0 blocks (the scalar tier's q8_0_to_f32). */
void sy_q8_0_to_f32_row(const void *blocks, float *dst, size_t n_blocks);

/* ---- dequantization (scalar reference) ---- */

/* Writes n elements of a row of type `type` (F32, F16, BF16, or a quantized type above, Q8_K included) to dst.
 * src holds src_bytes bytes. Returns SY_KERNEL_EINVAL when the type is unsupported, n is not a multiple of the
 * block size, or src_bytes is too small. */
int sy_dequantize_row(sy_dtype type, const void *src, size_t src_bytes, float *dst, size_t n);

/* ---- conversions (exact, round to nearest even; NaN stays NaN, overflow gives infinity) ---- */

/* e^x with the bits of glibc's expf (2.28 and later: the Arm optimized-routines algorithm, x / ln 2 split into k/32
 * and r, 2^(k/32) from a 32-entry table, a cubic for 2^r, all in double, rounded once to float; under 0.51 ulp;
 * equal to Debian 12's glibc 2.36 expf on all 2^32 inputs):
 * computed here so that the tiers' vector forms (exp_f32) and the scalar tier agree bit for bit with each other
 * and with the expf the engines called before, whatever the platform's libm. 0 below log(2^-150), +inf above
 * log(2^128), NaN for NaN. */
float sy_expf(float x);
float sy_f16_to_f32(uint16_t h);
uint16_t sy_f32_to_f16(float f);
float sy_bf16_to_f32(uint16_t h);
uint16_t sy_f32_to_bf16(float f);
void sy_f16_to_f32_row(const uint16_t *src, float *dst, size_t n);
void sy_f32_to_f16_row(const float *src, uint16_t *dst, size_t n);
void sy_bf16_to_f32_row(const uint16_t *src, float *dst, size_t n);
void sy_f32_to_bf16_row(const float *src, uint16_t *dst, size_t n);

/* ---- transformer helpers (scalar; out may alias the input) ---- */

/* out[i] = x[i] / sqrt(mean(x^2) + eps) * weight[i]; weight NULL means 1. */
void sy_rmsnorm_f32(float *out, const float *x, const float *weight, size_t n, float eps);
/* In place, numerically stable (max subtracted). n == 0 is a no-op; a row of -inf stays finite (uniform). */
void sy_softmax_f32(float *x, size_t n);
/* x[i] = x[i] * sigmoid(x[i]) in place. */
void sy_silu_f32(float *x, size_t n);
/* out[i] = silu(gate[i]) * up[i]. */
void sy_swiglu_f32(float *out, const float *gate, const float *up, size_t n);

typedef enum sy_rope_style {
    SY_ROPE_NORM = 0, /* pairs (2i, 2i+1): GGUF llama-family layout */
    SY_ROPE_NEOX = 1, /* pairs (i, i + rot_dims/2): Hugging Face rotate_half, GGUF qwen2/qwen3/neox */
} sy_rope_style;

#define SY_ROPE_MAX_DIMS 1024

/* inv_freq[i] = base^(-2i/rot_dims) for i < rot_dims/2 (computed in double, stored as f32). */
void sy_rope_inv_freq(float *inv_freq, size_t rot_dims, double base);
/* Rotates the first rot_dims dimensions of each of n_heads heads (head h at x + h*head_dim) by the angles
 * pos * inv_freq[i] (computed in f32 like the reference implementations). Dimensions past rot_dims are left
 * alone. rot_dims 0 does nothing. Returns SY_KERNEL_EINVAL when rot_dims is odd or larger than head_dim or
 * SY_ROPE_MAX_DIMS, or x/inv_freq is NULL with work to do. */
int sy_rope_f32(float *x, size_t n_heads, size_t head_dim, size_t rot_dims, float pos, const float *inv_freq,
                sy_rope_style style);

#endif
