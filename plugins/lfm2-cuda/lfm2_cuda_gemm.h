/* BF16 GEMMs of lfm2-cuda through cuBLASLt: Y[n][out] (F32) = X[n][in] (BF16) · W[out][in]ᵀ (BF16), FP32
 * accumulation. The first product of each shape (out, in, n) asks cuBLASLt's heuristic for up to 8 algorithms,
 * times each once on the real operands (they all write the same Y, so the timing run is the product) and keeps the
 * fastest; later products of that shape reuse it with no heuristic call. */
#ifndef LFM2_CUDA_GEMM_H
#define LFM2_CUDA_GEMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "lfm2_kernels.h"

typedef struct lc_gemm lc_gemm;

/* workspace: device memory of workspace_bytes the products may use (owned by the caller, outlives the gemm).
 * NULL + one line in err on failure. */
lc_gemm *lc_gemm_create(void *workspace, size_t workspace_bytes, char *err, size_t err_size);
void lc_gemm_destroy(lc_gemm *g);

/* Enqueues the product on stream. false + err on a cuBLASLt or CUDA failure. */
bool lc_gemm_bf16(lc_gemm *g, cudaStream_t stream, const lc_bf16 *W, int32_t out, int32_t in, const lc_bf16 *X,
                  int32_t n, float *Y, char *err, size_t err_size);

/* Shapes whose algorithm is cached (for tests and logs). */
size_t lc_gemm_cached_shapes(const lc_gemm *g);

#endif
