/* cuBLASLt BF16 GEMMs with a per-shape algorithm cache: see lfm2_cuda_gemm.h.
 *
 * Layout: cuBLASLt is column-major, so the row-major W[out][in] is the column-major in x out matrix A, X[n][in] the
 * in x n matrix B and Y[n][out] the out x n matrix D: D = Aᵀ · B ("TN"), cuBLASLt's preferred form. */
#include "lfm2_cuda_gemm.h"
#include "errmsg.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublasLt.h>

#define MAX_CACHED 1024 /* shapes; a product of a shape past this still runs, choosing its algorithm each time */
#define CANDIDATES 8

typedef struct shape_entry {
    int32_t out, in, n;
    cublasLtMatrixLayout_t a, b, d;
    cublasLtMatmulAlgo_t algo;
} shape_entry;

struct lc_gemm {
    cublasLtHandle_t handle;
    cublasLtMatmulDesc_t op;
    cublasLtMatmulPreference_t pref;
    void *workspace;
    size_t workspace_bytes;
    shape_entry *cache;
    size_t n_cached;
    cudaEvent_t t0, t1;
};

static bool lt_ok(cublasStatus_t st, const char *what, char *err, size_t err_size) {
    if (st == CUBLAS_STATUS_SUCCESS) return true;
    sy_errmsg(err, err_size, "cuBLASLt %s: %s", what, cublasLtGetStatusString(st));
    return false;
}

static bool cuda_ok(cudaError_t e, const char *what, char *err, size_t err_size) {
    if (e == cudaSuccess) return true;
    sy_errmsg(err, err_size, "%s: %s", what, cudaGetErrorString(e));
    return false;
}

lc_gemm *lc_gemm_create(void *workspace, size_t workspace_bytes, char *err, size_t err_size) {
    lc_gemm *g = calloc(1, sizeof *g);
    if (g == NULL) {
        sy_errmsg(err, err_size, "out of memory");
        return NULL;
    }
    g->workspace = workspace;
    g->workspace_bytes = workspace_bytes;
    g->cache = calloc(MAX_CACHED, sizeof *g->cache);
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    uint64_t ws = workspace_bytes;
    if (g->cache == NULL) {
        sy_errmsg(err, err_size, "out of memory");
        goto fail;
    }
    if (!lt_ok(cublasLtCreate(&g->handle), "create", err, err_size) ||
        !lt_ok(cublasLtMatmulDescCreate(&g->op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "matmul descriptor", err,
               err_size) ||
        !lt_ok(cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), "transa", err,
               err_size) ||
        !lt_ok(cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), "transb", err,
               err_size) ||
        !lt_ok(cublasLtMatmulPreferenceCreate(&g->pref), "preference", err, err_size) ||
        !lt_ok(cublasLtMatmulPreferenceSetAttribute(g->pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws),
               "workspace preference", err, err_size))
        goto fail;
    if (!cuda_ok(cudaEventCreate(&g->t0), "cudaEventCreate", err, err_size) ||
        !cuda_ok(cudaEventCreate(&g->t1), "cudaEventCreate", err, err_size))
        goto fail;
    return g;
fail:
    lc_gemm_destroy(g);
    return NULL;
}

static void destroy_layouts(shape_entry *e) {
    if (e->a) cublasLtMatrixLayoutDestroy(e->a);
    if (e->b) cublasLtMatrixLayoutDestroy(e->b);
    if (e->d) cublasLtMatrixLayoutDestroy(e->d);
    e->a = e->b = e->d = NULL;
}

void lc_gemm_destroy(lc_gemm *g) {
    if (g == NULL) return;
    for (size_t i = 0; g->cache && i < g->n_cached; i++) destroy_layouts(&g->cache[i]);
    free(g->cache);
    if (g->pref) cublasLtMatmulPreferenceDestroy(g->pref);
    if (g->op) cublasLtMatmulDescDestroy(g->op);
    if (g->handle) cublasLtDestroy(g->handle);
    if (g->t0) cudaEventDestroy(g->t0);
    if (g->t1) cudaEventDestroy(g->t1);
    free(g);
}

size_t lc_gemm_cached_shapes(const lc_gemm *g) { return g->n_cached; }

static bool make_layouts(shape_entry *e, char *err, size_t err_size) {
    return lt_ok(cublasLtMatrixLayoutCreate(&e->a, CUDA_R_16BF, (uint64_t)e->in, (uint64_t)e->out, e->in),
                 "layout A", err, err_size) &&
           lt_ok(cublasLtMatrixLayoutCreate(&e->b, CUDA_R_16BF, (uint64_t)e->in, (uint64_t)e->n, e->in), "layout B",
                 err, err_size) &&
           lt_ok(cublasLtMatrixLayoutCreate(&e->d, CUDA_R_32F, (uint64_t)e->out, (uint64_t)e->n, e->out),
                 "layout D", err, err_size);
}

static bool run(lc_gemm *g, cudaStream_t stream, const shape_entry *e, const cublasLtMatmulAlgo_t *algo,
                const lc_bf16 *W, const lc_bf16 *X, float *Y, char *err, size_t err_size) {
    const float alpha = 1.0f, beta = 0.0f;
    return lt_ok(cublasLtMatmul(g->handle, g->op, &alpha, W, e->a, X, e->b, &beta, Y, e->d, Y, e->d, algo,
                                g->workspace, g->workspace_bytes, stream),
                 "matmul", err, err_size);
}

/* Heuristic candidates for the shape, each run once and timed; the fastest goes to e->algo. The timing runs are
 * the product itself (beta = 0: each one writes the same Y). */
static bool choose_algo(lc_gemm *g, cudaStream_t stream, shape_entry *e, const lc_bf16 *W, const lc_bf16 *X,
                        float *Y, char *err, size_t err_size) {
    cublasLtMatmulHeuristicResult_t res[CANDIDATES];
    int n_res = 0;
    if (!lt_ok(cublasLtMatmulAlgoGetHeuristic(g->handle, g->op, e->a, e->b, e->d, e->d, g->pref, CANDIDATES, res,
                                              &n_res),
               "heuristic", err, err_size))
        return false;
    if (n_res <= 0) {
        sy_errmsg(err, err_size, "cuBLASLt has no algorithm for a BF16 product of %d x %d by %d rows", e->out, e->in,
                  e->n);
        return false;
    }
    int best = -1;
    float best_ms = 0;
    for (int i = 0; i < n_res; i++) {
        if (res[i].state != CUBLAS_STATUS_SUCCESS) continue;
        if (!cuda_ok(cudaEventRecord(g->t0, stream), "cudaEventRecord", err, err_size)) return false;
        if (!run(g, stream, e, &res[i].algo, W, X, Y, NULL, 0)) continue; /* a candidate may refuse: skip it */
        float ms;
        if (!cuda_ok(cudaEventRecord(g->t1, stream), "cudaEventRecord", err, err_size) ||
            !cuda_ok(cudaEventSynchronize(g->t1), "cudaEventSynchronize", err, err_size) ||
            !cuda_ok(cudaEventElapsedTime(&ms, g->t0, g->t1), "cudaEventElapsedTime", err, err_size))
            return false;
        if (best < 0 || ms < best_ms) best = i, best_ms = ms;
    }
    if (best < 0) {
        sy_errmsg(err, err_size, "no cuBLASLt algorithm ran a BF16 product of %d x %d by %d rows", e->out, e->in,
                  e->n);
        return false;
    }
    e->algo = res[best].algo;
    /* Y must hold the product of the chosen algorithm (any candidate's is the same product; rerun to be exact) */
    return run(g, stream, e, &e->algo, W, X, Y, err, err_size);
}

bool lc_gemm_bf16(lc_gemm *g, cudaStream_t stream, const lc_bf16 *W, int32_t out, int32_t in, const lc_bf16 *X,
                  int32_t n, float *Y, char *err, size_t err_size) {
    if (n <= 0) return true;
    if (out <= 0 || in <= 0) {
        sy_errmsg(err, err_size, "GEMM of %d x %d: bad shape", out, in);
        return false;
    }
    for (size_t i = 0; i < g->n_cached; i++) {
        shape_entry *e = &g->cache[i];
        if (e->out == out && e->in == in && e->n == n) return run(g, stream, e, &e->algo, W, X, Y, err, err_size);
    }
    shape_entry fresh = {.out = out, .in = in, .n = n};
    if (!make_layouts(&fresh, err, err_size) || !choose_algo(g, stream, &fresh, W, X, Y, err, err_size)) {
        destroy_layouts(&fresh);
        return false;
    }
    if (g->n_cached < MAX_CACHED) {
        g->cache[g->n_cached++] = fresh;
    } else {
        destroy_layouts(&fresh); /* the product ran; its algorithm is chosen again next time */
    }
    return true;
}
