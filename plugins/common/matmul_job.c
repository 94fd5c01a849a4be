/* Threaded matrix products: see matmul_job.h. */
#include "matmul_job.h"

#include <stdatomic.h>
#include <string.h>

typedef struct matmul_part {
    const sy_kernels *kern;
    const sy_tf_matrix *w;
    const float *x;   /* [n][cols] */
    const void *qx;   /* quantized x, for block-quantized weights */
    size_t n;
    float *y;         /* [n][rows] */
    size_t n_tasks;   /* the rows are cut into this many ranges */
    _Atomic int failed;
} matmul_part;

typedef struct matmul_group_job {
    matmul_part parts[SY_MATMUL_GROUP_MAX];
    size_t first_task[SY_MATMUL_GROUP_MAX + 1]; /* part i owns tasks first_task[i] .. first_task[i + 1] - 1 */
} matmul_group_job;

static void part_task(matmul_part *j, size_t task) {
    const sy_tf_matrix *w = j->w;
    size_t begin = (size_t)(w->rows * task / j->n_tasks), end = (size_t)(w->rows * (task + 1) / j->n_tasks);
    if (begin == end) return;
    if (j->qx) {
        if (j->kern->matmul_qx(w->type, w->data, w->row_bytes, begin, end, w->cols, j->qx, j->n, j->y, w->rows) !=
            SY_KERNEL_OK)
            atomic_store(&j->failed, 1);
        return;
    }
    /* blocks of a multiple of 4 rows, so the kernel's batch tiles (and results) are those of one call */
    size_t block = SY_MATMUL_X_BLOCK_BYTES / (w->cols * sizeof(float)) / 4 * 4;
    if (block < 4) block = j->n;
    for (size_t b0 = 0; b0 < j->n; b0 += block) {
        size_t nb = j->n - b0 < block ? j->n - b0 : block;
        if (j->kern->matmul(w->type, w->data, w->row_bytes, begin, end, w->cols, j->x + b0 * w->cols, nb, w->cols,
                            j->y + b0 * w->rows, w->rows) != SY_KERNEL_OK)
            atomic_store(&j->failed, 1);
    }
}

static void group_task(void *arg, size_t task, size_t thread_index) {
    (void)thread_index;
    matmul_group_job *g = arg;
    size_t i = 0;
    while (task >= g->first_task[i + 1]) i++;
    part_task(&g->parts[i], task - g->first_task[i]);
}

/* The activations quantized a few rows per task (rows are independent: the bits of one call). */
typedef struct quantize_job {
    const float *x;
    size_t n, k, row_bytes;
    uint8_t *qx;
    _Atomic int failed;
} quantize_job;
#define QUANTIZE_ROWS_PER_TASK 16

static void quantize_task(void *arg, size_t task, size_t thread_index) {
    (void)thread_index;
    quantize_job *j = arg;
    size_t r0 = task * QUANTIZE_ROWS_PER_TASK;
    size_t n = j->n - r0 < QUANTIZE_ROWS_PER_TASK ? j->n - r0 : QUANTIZE_ROWS_PER_TASK;
    if (sy_quantize_x(j->x + r0 * j->k, n, j->k, j->k, j->qx + r0 * j->row_bytes) != SY_KERNEL_OK)
        atomic_store(&j->failed, 1);
}

/* Below this many elements a pass of the pool costs more than it saves. */
#define QUANTIZE_PARALLEL_ELEMS ((size_t)128 << 10)

static bool quantize_rows(sy_threadpool *pool, const float *x, size_t n, size_t k, void *qx) {
    if (n * k < QUANTIZE_PARALLEL_ELEMS) return sy_quantize_x(x, n, k, k, qx) == SY_KERNEL_OK;
    quantize_job j = {x, n, k, sy_quantize_x_bytes(k, 1), qx, 0};
    if (j.row_bytes == 0) return false;
    sy_threadpool_parallel_for(pool, (n + QUANTIZE_ROWS_PER_TASK - 1) / QUANTIZE_ROWS_PER_TASK, quantize_task, &j);
    return atomic_load(&j.failed) == 0;
}

bool sy_matmul_group(sy_threadpool *pool, const sy_kernels *kern, const sy_tf_matrix *const *ws, float *const *ys,
                     size_t count, const float *x, size_t n, void *qx) {
    if (count == 0 || count > SY_MATMUL_GROUP_MAX) return false;
    matmul_group_job g;
    memset(&g, 0, sizeof g);
    bool quantized = false;
    for (size_t i = 0; i < count; i++) {
        const sy_tf_matrix *w = ws[i];
        if (w->cols != ws[0]->cols) return false;
        size_t n_tasks = sy_threadpool_size(pool) * 4;
        if (n_tasks > w->rows / 16) n_tasks = w->rows / 16;
        if (n_tasks == 0) n_tasks = 1;
        g.parts[i] = (matmul_part){kern, w, x, NULL, n, ys[i], n_tasks, 0};
        g.first_task[i + 1] = g.first_task[i] + n_tasks;
        if (sy_matmul_wants_quantized_x(w->type)) quantized = true;
    }
    if (quantized) {
        if (qx == NULL || !quantize_rows(pool, x, n, ws[0]->cols, qx)) return false;
        for (size_t i = 0; i < count; i++)
            if (sy_matmul_wants_quantized_x(ws[i]->type)) g.parts[i].qx = qx;
    }
    sy_threadpool_parallel_for(pool, g.first_task[count], group_task, &g);
    for (size_t i = 0; i < count; i++)
        if (atomic_load(&g.parts[i].failed) != 0) return false;
    return true;
}

bool sy_matmul(sy_threadpool *pool, const sy_kernels *kern, const sy_tf_matrix *w, const float *x, size_t n,
               float *y, void *qx) {
    return sy_matmul_group(pool, kern, &w, &y, 1, x, n, qx);
}
