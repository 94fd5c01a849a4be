/* Threaded matrix products for the CPU cores (the transformer core and the encoder core): ys[i][n][ws[i].rows] =
 * x[n][cols] · ws[i]ᵀ for up to SY_MATMUL_GROUP_MAX matrices of one width, in one pass of a thread pool.
 *
 * x is quantized once (into the caller's scratch) where any matrix's kernel takes quantized activations; every
 * matrix's rows are cut into a few ranges per thread (at least 16 rows each), so uneven progress balances out and
 * the threads meet once per group, not once per matrix. A range runs x in blocks of about SY_MATMUL_X_BLOCK_BYTES
 * (a multiple of 4 rows, the kernels' batch tile), so each block stays in the core's L2 cache while the range's
 * weight rows stream past it. Each row's result is the same as from a product of its matrix alone, whatever the
 * group or the thread count. */
#ifndef SY_MATMUL_JOB_H
#define SY_MATMUL_JOB_H

#include <stdbool.h>
#include <stddef.h>

#include "sy_kernels.h"
#include "threadpool.h"
#include "transformer_weights.h"

#define SY_MATMUL_GROUP_MAX 3                 /* Q, K and V share one pass */
#define SY_MATMUL_X_BLOCK_BYTES (256 * 1024) /* x per block: a wide matrix's whole x is megabytes */

/* qx: scratch of sy_quantize_x_bytes(cols, n) bytes, used only when a matrix's type takes quantized activations
 * (may be NULL otherwise). False when the matrices differ in width, count is 0 or above SY_MATMUL_GROUP_MAX, or a
 * kernel fails (an unsupported type). */
bool sy_matmul_group(sy_threadpool *pool, const sy_kernels *kern, const sy_tf_matrix *const *ws, float *const *ys,
                     size_t count, const float *x, size_t n, void *qx);

/* One matrix: sy_matmul_group of count 1. */
bool sy_matmul(sy_threadpool *pool, const sy_kernels *kern, const sy_tf_matrix *w, const float *x, size_t n,
               float *y, void *qx);

#endif
