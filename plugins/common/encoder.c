/* The CPU encoder core (encoder.h). Per chunk of inputs, N rows in all (each input's rows adjacent):
 *
 *   x[N][n_embd] = layernorm(word[t] + pos[p] + type[s])                 embed()
 *   per layer:  attention_block(): q, k, v = W·x + b; att = softmax(q·kᵀ/√d)·v over the row's own input;
 *                                  x = layernorm(x + Wo·att + bo)
 *               ffn_block():       x = layernorm(x + W2·gelu(W1·x + b1) + b2)
 *   pool() per input: mean / first / last row, normalized; or the classification head (RANK)
 */
#include "encoder.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "errmsg.h"
#include "matmul_job.h"
#include "sy_kernels.h"
#include "threadpool.h"

#define ATTN_Q_BLOCK 64 /* query rows per attention task */
#define CHUNK_ROWS 256  /* rows of inputs run together through the layers (see sy_enc_run) */

typedef struct enc_layer {
    sy_tf_matrix wq, wk, wv, wo, w_up, w_down;
    float *bq, *bk, *bv, *bo, *attn_ln_w, *attn_ln_b, *b_up, *b_down, *ffn_ln_w, *ffn_ln_b;
} enc_layer;

struct sy_enc_model {
    sy_enc_config cfg;
    uint32_t n_ctx, out_dim;
    const sy_kernels *kern;
    sy_threadpool *pool;
    sy_tf_matrix token_embd, pos_embd, type_embd, pooler, classifier;
    float *embd_ln_w, *embd_ln_b, *pooler_b, *classifier_b;
    enc_layer *layers;
    /* scratch of one chunk */
    float *x, *xb, *q, *k, *v, *att, *ff;
    void *qx;
    /* the chunk's inputs: first row, rows, first attention task (task_first[n_in] = all tasks) */
    uint32_t in_start[SY_ENC_MAX_ROWS], in_len[SY_ENC_MAX_ROWS], task_first[SY_ENC_MAX_ROWS + 1];
    size_t n_in;
    float *attn_scratch; /* per thread: scores [ATTN_Q_BLOCK][n_ctx] and vᵀ [head_dim][n_ctx] */
    size_t attn_scratch_floats;
    _Atomic int attn_failed;
    _Atomic uint64_t bytes;
};

static void *alloc_counted(sy_enc_model *m, size_t n) {
    void *p = calloc(1, n ? n : 1);
    if (p) atomic_fetch_add(&m->bytes, n);
    return p;
}

/* ---- building ---- */

static bool load_vector(sy_enc_model *m, const sy_tf_vector *v, uint64_t n, const char *what, float **out, char *err,
                        size_t err_size) {
    const char *name = v->name ? v->name : what;
    if (v->data == NULL) {
        sy_errmsg(err, err_size, "tensor %s is missing", name);
        return false;
    }
    if (v->n != n) {
        sy_errmsg(err, err_size, "tensor %s: %llu elements, expected %llu", name, (unsigned long long)v->n,
                  (unsigned long long)n);
        return false;
    }
    size_t bytes = sy_dtype_row_bytes(v->type, n);
    *out = alloc_counted(m, n * sizeof(float));
    if (*out == NULL) {
        sy_errmsg(err, err_size, "out of memory for tensor %s", name);
        return false;
    }
    if (bytes == 0 || sy_dequantize_row(v->type, v->data, bytes, *out, n) != SY_KERNEL_OK) {
        sy_errmsg(err, err_size, "tensor %s: type not supported for a vector", name);
        return false;
    }
    return true;
}

/* A lookup table (embedding): its rows must dequantize to n_embd floats. */
static bool check_table(const sy_tf_matrix *t, uint64_t rows, uint64_t cols, const char *what, char *err,
                        size_t err_size) {
    const char *name = t->name ? t->name : what;
    if (t->data == NULL) {
        sy_errmsg(err, err_size, "tensor %s is missing", name);
        return false;
    }
    if (t->rows != rows || t->cols != cols || t->row_bytes < sy_dtype_row_bytes(t->type, cols) ||
        sy_dtype_row_bytes(t->type, cols) == 0) {
        sy_errmsg(err, err_size, "tensor %s: %llu x %llu, expected %llu x %llu of a readable type", name,
                  (unsigned long long)t->rows, (unsigned long long)t->cols, (unsigned long long)rows,
                  (unsigned long long)cols);
        return false;
    }
    return true;
}

static bool check_config(const sy_enc_config *c, char *err, size_t err_size) {
    const uint32_t big = 1u << 20;
    if (c->n_vocab == 0 || c->n_vocab > (1u << 24) || c->n_embd == 0 || c->n_embd > big || c->n_ff == 0 ||
        c->n_ff > big || c->n_layer == 0 || c->n_layer > 1024 || c->n_head == 0 || c->n_embd % c->n_head != 0 ||
        c->n_embd / c->n_head > SY_TF_MAX_HEAD_DIM || c->n_pos == 0 || c->n_pos > (1u << 20) || c->n_types > 1024 ||
        !(c->ln_eps > 0) || !isfinite(c->ln_eps)) {
        sy_errmsg(err, err_size, "unsupported encoder dimensions: vocab %u, embd %u, ff %u, layers %u, heads %u, "
                  "positions %u, types %u, eps %g", c->n_vocab, c->n_embd, c->n_ff, c->n_layer, c->n_head, c->n_pos,
                  c->n_types, (double)c->ln_eps);
        return false;
    }
    if (c->pooling != SY_POOLING_MEAN && c->pooling != SY_POOLING_CLS && c->pooling != SY_POOLING_LAST &&
        c->pooling != SY_POOLING_RANK) {
        sy_errmsg(err, err_size, "pooling %d is not one the encoder computes", (int)c->pooling);
        return false;
    }
    return true;
}

void sy_enc_destroy(sy_enc_model *m) {
    if (m == NULL) return;
    sy_threadpool_destroy(m->pool);
    for (uint32_t l = 0; m->layers && l < m->cfg.n_layer; l++) {
        enc_layer *L = &m->layers[l];
        free(L->bq), free(L->bk), free(L->bv), free(L->bo), free(L->attn_ln_w), free(L->attn_ln_b);
        free(L->b_up), free(L->b_down), free(L->ffn_ln_w), free(L->ffn_ln_b);
    }
    free(m->layers);
    free(m->embd_ln_w), free(m->embd_ln_b), free(m->pooler_b), free(m->classifier_b);
    free(m->x), free(m->xb), free(m->q), free(m->k), free(m->v), free(m->att), free(m->ff), free(m->qx);
    free(m->attn_scratch);
    free(m);
}

sy_enc_model *sy_enc_create(const sy_enc_config *cfg, const sy_enc_weights *w, uint32_t n_threads, char *err,
                            size_t err_size) {
    if (!check_config(cfg, err, err_size)) return NULL;
    sy_enc_model *m = calloc(1, sizeof *m);
    if (m == NULL) {
        sy_errmsg(err, err_size, "out of memory");
        return NULL;
    }
    m->cfg = *cfg;
    const sy_enc_config *c = &m->cfg;
    const uint64_t E = c->n_embd, F = c->n_ff;
    m->n_ctx = c->n_pos < SY_ENC_MAX_ROWS ? c->n_pos : SY_ENC_MAX_ROWS;
    m->out_dim = c->pooling == SY_POOLING_RANK ? 1 : c->n_embd;
    m->kern = sy_kernels_active();
    m->token_embd = w->token_embd;
    m->pos_embd = w->pos_embd;
    m->type_embd = w->type_embd;
    bool ok = check_table(&w->token_embd, c->n_vocab, E, "token embedding", err, err_size) &&
              check_table(&w->pos_embd, c->n_pos, E, "position embedding", err, err_size) &&
              (c->n_types == 0 || check_table(&w->type_embd, c->n_types, E, "token type embedding", err, err_size)) &&
              load_vector(m, &w->embd_ln_w, E, "embedding LayerNorm weight", &m->embd_ln_w, err, err_size) &&
              load_vector(m, &w->embd_ln_b, E, "embedding LayerNorm bias", &m->embd_ln_b, err, err_size);
    if (ok && c->pooling == SY_POOLING_RANK) {
        m->pooler = w->pooler;
        m->classifier = w->classifier;
        ok = sy_tf_check_matrix(&w->pooler, "pooler", E, E, err, err_size) &&
             w->classifier.rows >= 1 && w->classifier.rows <= E &&
             sy_tf_check_matrix(&w->classifier, "classifier", w->classifier.rows, E, err, err_size) &&
             load_vector(m, &w->pooler_b, E, "pooler bias", &m->pooler_b, err, err_size) &&
             load_vector(m, &w->classifier_b, w->classifier.rows, "classifier bias", &m->classifier_b, err, err_size);
    }
    m->layers = ok ? alloc_counted(m, c->n_layer * sizeof *m->layers) : NULL;
    if (ok && m->layers == NULL) {
        sy_errmsg(err, err_size, "out of memory");
        ok = false;
    }
    for (uint32_t l = 0; ok && l < c->n_layer; l++) {
        const sy_enc_layer_weights *lw = &w->layers[l];
        enc_layer *L = &m->layers[l];
        L->wq = lw->wq, L->wk = lw->wk, L->wv = lw->wv, L->wo = lw->wo, L->w_up = lw->w_up, L->w_down = lw->w_down;
        ok = sy_tf_check_matrix(&lw->wq, "query", E, E, err, err_size) &&
             sy_tf_check_matrix(&lw->wk, "key", E, E, err, err_size) &&
             sy_tf_check_matrix(&lw->wv, "value", E, E, err, err_size) &&
             sy_tf_check_matrix(&lw->wo, "attention output", E, E, err, err_size) &&
             sy_tf_check_matrix(&lw->w_up, "intermediate", F, E, err, err_size) &&
             sy_tf_check_matrix(&lw->w_down, "output", E, F, err, err_size) &&
             load_vector(m, &lw->bq, E, "query bias", &L->bq, err, err_size) &&
             load_vector(m, &lw->bk, E, "key bias", &L->bk, err, err_size) &&
             load_vector(m, &lw->bv, E, "value bias", &L->bv, err, err_size) &&
             load_vector(m, &lw->bo, E, "attention output bias", &L->bo, err, err_size) &&
             load_vector(m, &lw->attn_ln_w, E, "attention LayerNorm weight", &L->attn_ln_w, err, err_size) &&
             load_vector(m, &lw->attn_ln_b, E, "attention LayerNorm bias", &L->attn_ln_b, err, err_size) &&
             load_vector(m, &lw->b_up, F, "intermediate bias", &L->b_up, err, err_size) &&
             load_vector(m, &lw->b_down, E, "output bias", &L->b_down, err, err_size) &&
             load_vector(m, &lw->ffn_ln_w, E, "output LayerNorm weight", &L->ffn_ln_w, err, err_size) &&
             load_vector(m, &lw->ffn_ln_b, E, "output LayerNorm bias", &L->ffn_ln_b, err, err_size);
    }
    if (ok) {
        size_t R = SY_ENC_MAX_ROWS;
        m->x = alloc_counted(m, R * E * sizeof(float));
        m->xb = alloc_counted(m, R * E * sizeof(float));
        m->q = alloc_counted(m, R * E * sizeof(float));
        m->k = alloc_counted(m, R * E * sizeof(float));
        m->v = alloc_counted(m, R * E * sizeof(float));
        m->att = alloc_counted(m, R * E * sizeof(float));
        m->ff = alloc_counted(m, R * F * sizeof(float));
        size_t qx = sy_quantize_x_bytes((F > E ? F : E) / 32 * 32 + 32, R);
        m->qx = alloc_counted(m, qx);
        m->pool = sy_threadpool_create(n_threads ? n_threads : 1);
        m->attn_scratch_floats = (ATTN_Q_BLOCK + E / c->n_head) * (size_t)m->n_ctx;
        if (m->pool)
            m->attn_scratch = alloc_counted(m, sy_threadpool_size(m->pool) * m->attn_scratch_floats * sizeof(float));
        ok = m->x && m->xb && m->q && m->k && m->v && m->att && m->ff && m->qx && m->pool && m->attn_scratch;
        if (!ok) sy_errmsg(err, err_size, "out of memory for the encoder's scratch or threads");
    }
    if (!ok) {
        sy_enc_destroy(m);
        return NULL;
    }
    return m;
}

const sy_enc_config *sy_enc_model_config(const sy_enc_model *m) { return &m->cfg; }
uint32_t sy_enc_n_ctx(const sy_enc_model *m) { return m->n_ctx; }
uint32_t sy_enc_out_dim(const sy_enc_model *m) { return m->out_dim; }
uint64_t sy_enc_memory(const sy_enc_model *m) { return atomic_load(&((sy_enc_model *)m)->bytes); }

/* ---- threaded products (matmul_job.h): y[n][w.rows] = x[n][w.cols] · wᵀ + b ---- */

static void add_bias(float *y, const float *bias, size_t n, size_t dim) {
    for (size_t r = 0; r < n; r++)
        for (size_t i = 0; i < dim; i++) y[r * dim + i] += bias[i];
}

static bool matmul(sy_enc_model *m, const sy_tf_matrix *w, const float *bias, const float *x, size_t n, float *y) {
    if (!sy_matmul(m->pool, m->kern, w, x, n, y, m->qx)) return false;
    if (bias) add_bias(y, bias, n, w->rows);
    return true;
}

/* ---- the pieces ---- */

/* out = (x - mean) / sqrt(var + eps) * w + b (biased variance, as torch's LayerNorm) */
static void layernorm(float *out, const float *x, const float *w, const float *b, size_t n, float eps) {
    double mean = 0, var = 0;
    for (size_t i = 0; i < n; i++) mean += x[i];
    mean /= (double)n;
    for (size_t i = 0; i < n; i++) var += ((double)x[i] - mean) * ((double)x[i] - mean);
    var /= (double)n;
    float inv = (float)(1.0 / sqrt(var + eps)), mf = (float)mean;
    for (size_t i = 0; i < n; i++) out[i] = (x[i] - mf) * inv * w[i] + b[i];
}

static bool embed(sy_enc_model *m, const sy_enc_input *in, size_t n_in, char *err, size_t err_size) {
    const size_t E = m->cfg.n_embd;
    float *tmp = m->xb;
    size_t r = 0;
    for (size_t i = 0; i < n_in; i++) {
        for (uint32_t t = 0; t < in[i].n_tokens; t++, r++) {
            float *x = m->x + r * E;
            int32_t type = in[i].types ? in[i].types[t] : 0;
            const sy_tf_matrix *tabs[3] = {&m->token_embd, &m->pos_embd, &m->type_embd};
            uint64_t rows[3] = {(uint64_t)in[i].tokens[t], t, (uint64_t)type};
            for (int k = 0; k < 3; k++) {
                if (k == 2 && m->cfg.n_types == 0) break;
                const sy_tf_matrix *e = tabs[k];
                const uint8_t *row = (const uint8_t *)e->data + rows[k] * e->row_bytes;
                if (sy_dequantize_row(e->type, row, e->row_bytes, k == 0 ? x : tmp, E) != SY_KERNEL_OK) {
                    sy_errmsg(err, err_size, "tensor %s: cannot read rows of this type", e->name ? e->name : "embedding");
                    return false;
                }
                if (k > 0)
                    for (size_t d = 0; d < E; d++) x[d] += tmp[d];
            }
            layernorm(x, x, m->embd_ln_w, m->embd_ln_b, E, m->cfg.ln_eps);
        }
    }
    return true;
}

/* One (input, head, block of up to ATTN_Q_BLOCK query rows): softmax(q·kᵀ/√d)·v over the input's own rows, as two
 * small products through the matrix kernel (the keys as the "weights" of the scores, vᵀ those of the output), so
 * the work runs in the kernel's register tiles instead of one dot product per query and key. */
static void attention_task(void *arg, size_t task, size_t thread_index) {
    sy_enc_model *m = arg;
    const size_t E = m->cfg.n_embd, n_head = m->cfg.n_head, hd = E / n_head;
    size_t lo = 0, hi = m->n_in; /* the input: the last whose first task is <= task */
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (m->task_first[mid] <= task) lo = mid;
        else hi = mid;
    }
    const size_t s0 = m->in_start[lo], n = m->in_len[lo], t = task - m->task_first[lo];
    const size_t n_qb = (n + ATTN_Q_BLOCK - 1) / ATTN_Q_BLOCK, h = t / n_qb, q0 = (t % n_qb) * ATTN_Q_BLOCK;
    const size_t nq = n - q0 < ATTN_Q_BLOCK ? n - q0 : ATTN_Q_BLOCK;
    float *scores = m->attn_scratch + thread_index * m->attn_scratch_floats, *vt = scores + ATTN_Q_BLOCK * n;
    const float *Q = m->q + (s0 + q0) * E + h * hd, *K = m->k + s0 * E + h * hd, *V = m->v + s0 * E + h * hd;
    /* scores[nq][n] = Q·Kᵀ */
    if (m->kern->matmul(SY_DTYPE_F32, K, E * sizeof(float), 0, n, hd, Q, nq, E, scores, n) != SY_KERNEL_OK) {
        atomic_store(&m->attn_failed, 1);
        return;
    }
    const float scale = 1.0f / sqrtf((float)hd);
    for (size_t r = 0; r < nq; r++) {
        float *row = scores + r * n, mx = -INFINITY, sum = 0.0f;
        for (size_t c = 0; c < n; c++) mx = row[c] > mx ? row[c] : mx;
        for (size_t c = 0; c < n; c++) row[c] = (row[c] - mx) * scale;
        m->kern->exp_f32(row, row, n); /* sy_expf: expf's bits, a vector at a time */
        for (size_t c = 0; c < n; c++) sum += row[c];
        float inv = 1.0f / sum;
        for (size_t c = 0; c < n; c++) row[c] *= inv;
    }
    for (size_t c = 0; c < n; c++)
        for (size_t d = 0; d < hd; d++) vt[d * n + c] = V[c * E + d];
    /* att[nq][hd] = P·V */
    if (m->kern->matmul(SY_DTYPE_F32, vt, n * sizeof(float), 0, hd, n, scores, nq, n, m->att + (s0 + q0) * E + h * hd,
                        E) != SY_KERNEL_OK)
        atomic_store(&m->attn_failed, 1);
}

/* ---- the per-row steps between the products, on the pool's threads (a single thread would leave the others idle
 * for a third of a layer: the GELU's erff over N x n_ff elements costs nearly as much as the products) ---- */

#define ROWS_PER_TASK 8

typedef struct rows_job {
    sy_enc_model *m;
    size_t n_rows;
    const float *bias;             /* added first (the product's bias) */
    const float *ln_w, *ln_b;      /* residual_norm_rows: x = layernorm(y + bias + x) */
    float *y;                      /* gelu_rows: y = gelu(y + bias), rows of n_ff */
} rows_job;

static void residual_norm_rows(void *arg, size_t task, size_t thread_index) {
    (void)thread_index;
    const rows_job *j = arg;
    sy_enc_model *m = j->m;
    const size_t E = m->cfg.n_embd;
    size_t r1 = (task + 1) * ROWS_PER_TASK < j->n_rows ? (task + 1) * ROWS_PER_TASK : j->n_rows;
    for (size_t r = task * ROWS_PER_TASK; r < r1; r++) {
        float *x = m->x + r * E, *o = m->xb + r * E;
        for (size_t i = 0; i < E; i++) o[i] = (o[i] + j->bias[i]) + x[i];
        layernorm(x, o, j->ln_w, j->ln_b, E, m->cfg.ln_eps);
    }
}

/* exact (erf) GELU, as BERT's "gelu" */
static void gelu_rows(void *arg, size_t task, size_t thread_index) {
    (void)thread_index;
    const rows_job *j = arg;
    const size_t F = j->m->cfg.n_ff;
    size_t r1 = (task + 1) * ROWS_PER_TASK < j->n_rows ? (task + 1) * ROWS_PER_TASK : j->n_rows;
    for (size_t r = task * ROWS_PER_TASK; r < r1; r++) {
        float *y = j->y + r * F;
        for (size_t i = 0; i < F; i++) y[i] += j->bias[i];
        j->m->kern->gelu_f32(y, y, F);
    }
}

static void for_rows(sy_enc_model *m, size_t N, sy_threadpool_fn fn, rows_job *j) {
    j->m = m;
    j->n_rows = N;
    sy_threadpool_parallel_for(m->pool, (N + ROWS_PER_TASK - 1) / ROWS_PER_TASK, fn, j);
}

static bool attention_block(sy_enc_model *m, const enc_layer *L, size_t N) {
    const size_t E = m->cfg.n_embd;
    /* Q, K and V in one pass of the threads */
    const sy_tf_matrix *qkv[3] = {&L->wq, &L->wk, &L->wv};
    float *const qkv_out[3] = {m->q, m->k, m->v};
    if (!sy_matmul_group(m->pool, m->kern, qkv, qkv_out, 3, m->x, N, m->qx)) return false;
    add_bias(m->q, L->bq, N, E), add_bias(m->k, L->bk, N, E), add_bias(m->v, L->bv, N, E);
    atomic_store(&m->attn_failed, 0);
    sy_threadpool_parallel_for(m->pool, m->task_first[m->n_in], attention_task, m);
    if (atomic_load(&m->attn_failed)) return false;
    if (!matmul(m, &L->wo, NULL, m->att, N, m->xb)) return false;
    rows_job r = {.bias = L->bo, .ln_w = L->attn_ln_w, .ln_b = L->attn_ln_b};
    for_rows(m, N, residual_norm_rows, &r);
    return true;
}

static bool ffn_block(sy_enc_model *m, const enc_layer *L, size_t N) {
    if (!matmul(m, &L->w_up, NULL, m->x, N, m->ff)) return false;
    rows_job g = {.bias = L->b_up, .y = m->ff};
    for_rows(m, N, gelu_rows, &g);
    if (!matmul(m, &L->w_down, NULL, m->ff, N, m->xb)) return false;
    rows_job r = {.bias = L->b_down, .ln_w = L->ffn_ln_w, .ln_b = L->ffn_ln_b};
    for_rows(m, N, residual_norm_rows, &r);
    return true;
}

/* Each input's output from its rows (x after the last layer). */
static bool pool(sy_enc_model *m, const sy_enc_input *in, size_t n_in, float *out) {
    const size_t E = m->cfg.n_embd;
    size_t r0 = 0;
    if (m->cfg.pooling == SY_POOLING_RANK) {
        /* the [CLS] rows of the chunk through the pooler (tanh) and the classifier, together */
        for (size_t i = 0; i < n_in; r0 += in[i].n_tokens, i++) memcpy(m->xb + i * E, m->x + r0 * E, E * sizeof(float));
        if (!matmul(m, &m->pooler, m->pooler_b, m->xb, n_in, m->q)) return false;
        for (size_t i = 0; i < n_in * E; i++) m->q[i] = tanhf(m->q[i]);
        if (!matmul(m, &m->classifier, m->classifier_b, m->q, n_in, m->att)) return false;
        for (size_t i = 0; i < n_in; i++) out[i] = m->att[i * m->classifier.rows];
        return true;
    }
    for (size_t i = 0; i < n_in; r0 += in[i].n_tokens, i++) {
        float *o = out + i * E;
        size_t n = in[i].n_tokens;
        if (m->cfg.pooling == SY_POOLING_MEAN) {
            for (size_t d = 0; d < E; d++) {
                double s = 0;
                for (size_t t = 0; t < n; t++) s += m->x[(r0 + t) * E + d];
                o[d] = (float)(s / (double)n);
            }
        } else {
            size_t r = m->cfg.pooling == SY_POOLING_CLS ? r0 : r0 + n - 1;
            memcpy(o, m->x + r * E, E * sizeof(float));
        }
        if (m->cfg.normalize) {
            double ss = 0;
            for (size_t d = 0; d < E; d++) ss += (double)o[d] * o[d];
            double norm = sqrt(ss);
            float inv = (float)(1.0 / (norm > 1e-12 ? norm : 1e-12));
            for (size_t d = 0; d < E; d++) o[d] *= inv;
        }
    }
    return true;
}

static sy_status run_chunk(sy_enc_model *m, const sy_enc_input *in, size_t n_in, float *out, sy_enc_cancel_fn cancel,
                           void *cancel_ctx, char *err, size_t err_size) {
    size_t N = 0;
    m->n_in = n_in;
    m->task_first[0] = 0;
    for (size_t i = 0; i < n_in; i++) {
        m->in_start[i] = (uint32_t)N;
        m->in_len[i] = in[i].n_tokens;
        N += in[i].n_tokens;
        uint32_t blocks = (in[i].n_tokens + ATTN_Q_BLOCK - 1) / ATTN_Q_BLOCK;
        m->task_first[i + 1] = m->task_first[i] + blocks * m->cfg.n_head;
    }
    if (!embed(m, in, n_in, err, err_size)) return SY_ERR_UNSUPPORTED;
    for (uint32_t l = 0; l < m->cfg.n_layer; l++) {
        if (cancel && cancel(cancel_ctx)) {
            sy_errmsg(err, err_size, "cancelled");
            return SY_ERR_CANCELLED;
        }
        if (!attention_block(m, &m->layers[l], N) || !ffn_block(m, &m->layers[l], N)) {
            sy_errmsg(err, err_size, "layer %u: a matrix product failed", l);
            return SY_ERR_INTERNAL;
        }
    }
    if (!pool(m, in, n_in, out)) {
        sy_errmsg(err, err_size, "the classification head's product failed");
        return SY_ERR_INTERNAL;
    }
    return SY_OK;
}

sy_status sy_enc_run(sy_enc_model *m, const sy_enc_input *inputs, size_t n_inputs, float *out, sy_enc_cancel_fn cancel,
                     void *cancel_ctx, char *err, size_t err_size) {
    if (n_inputs > 0 && (inputs == NULL || out == NULL)) {
        sy_errmsg(err, err_size, "no inputs or no output buffer");
        return SY_ERR_INVALID_ARGUMENT;
    }
    for (size_t i = 0; i < n_inputs; i++) {
        const sy_enc_input *in = &inputs[i];
        if (in->n_tokens == 0 || in->tokens == NULL) {
            sy_errmsg(err, err_size, "input %zu is empty", i);
            return SY_ERR_INVALID_ARGUMENT;
        }
        if (in->n_tokens > m->n_ctx) {
            sy_errmsg(err, err_size, "input %zu: %u tokens exceed the context size %u", i, in->n_tokens, m->n_ctx);
            return SY_ERR_CONTEXT_FULL;
        }
        for (uint32_t t = 0; t < in->n_tokens; t++) {
            if (in->tokens[t] < 0 || (uint32_t)in->tokens[t] >= m->cfg.n_vocab) {
                sy_errmsg(err, err_size, "input %zu: token id %d out of range (vocabulary %u)", i, in->tokens[t],
                          m->cfg.n_vocab);
                return SY_ERR_INVALID_ARGUMENT;
            }
            int32_t type = in->types ? in->types[t] : 0;
            if (type < 0 || (uint32_t)type >= (m->cfg.n_types ? m->cfg.n_types : 1)) {
                sy_errmsg(err, err_size, "input %zu: token type %d out of range (%u types)", i, type, m->cfg.n_types);
                return SY_ERR_INVALID_ARGUMENT;
            }
        }
    }
    /* whole inputs per chunk, as many as fit in CHUNK_ROWS rows (an input longer than that is a chunk of its own, up
     * to SY_ENC_MAX_ROWS): a chunk's activations then stay in the cores' caches between the products (1024 rows of
     * MiniLM are 15 MB of activations; 256 rows under 4 MB), which is worth more than reading the weights fewer
     * times */
    size_t first = 0, rows = 0;
    for (size_t i = 0; i <= n_inputs; i++) {
        if (i == n_inputs || (rows > 0 && rows + inputs[i].n_tokens > CHUNK_ROWS)) {
            if (i > first) {
                sy_status st = run_chunk(m, inputs + first, i - first, out + first * m->out_dim, cancel, cancel_ctx,
                                         err, err_size);
                if (st != SY_OK) return st;
            }
            first = i;
            rows = 0;
        }
        if (i < n_inputs) rows += inputs[i].n_tokens;
    }
    return SY_OK;
}
