/* The CPU transformer core: see transformer.h. The forward pass, per chunk of N tokens (rows):
 *
 *   x[N][n_embd] = token_embd[token]
 *   for each layer:   x += attention(rmsnorm(x))      attention_block()
 *                       (lfm2 short-conv layers:     sy_lfm2_conv_block(), transformer_lfm2.c)
 *                     x += ffn(rmsnorm(x))            ffn_block()
 *   logits = output · rmsnorm(x)   (only for the rows asked for)
 */
#include "transformer.h"

#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "matmul_job.h"
#include "threadpool.h"
#include "transformer_lfm2.h"
#include "errmsg.h"

#define LOGIT_ROWS 32   /* logits rows computed per pass through the output matrix (bounds that scratch) */
#define KV_MIN_GROW 256 /* tokens a sequence's KV grows by at least */

/* ---- the architecture table ---- */

static const sy_tf_arch arch_table[] = {
    /* name     rope style     qkv_bias qk_norm short_conv */
    {"llama", SY_ROPE_NORM, false, false, false},
    {"qwen2", SY_ROPE_NEOX, true, false, false},
    {"qwen3", SY_ROPE_NEOX, false, true, false},
    {"lfm2", SY_ROPE_NEOX, false, true, true},
};

const sy_tf_arch *sy_tf_arch_find(const char *name) {
    for (size_t i = 0; i < sizeof arch_table / sizeof arch_table[0]; i++)
        if (strcmp(arch_table[i].name, name) == 0) return &arch_table[i];
    return NULL;
}

/* ---- model and sequences ---- */

typedef struct layer {
    sy_tf_layer_kind kind; /* short-conv layers keep their weights in m->lfm2 */
    /* F32 copies of the vectors; NULL when absent */
    float *attn_norm, *bq, *bk, *bv, *q_norm, *k_norm, *bo, *ffn_norm;
    sy_tf_matrix wq, wk, wv, wo, w_gate, w_up, w_down;
} layer;

struct sy_tf_seq {
    uint32_t len;  /* tokens held */
    void *kv;      /* its part of the KV store */
    sy_lfm2_seq *conv; /* short_conv architectures: the conv layers' rolling inputs */
    uint64_t mark; /* decode call that last saw it (duplicate check) */
};

struct sy_tf_model {
    sy_tf_config cfg;
    uint32_t n_ctx;
    size_t q_dim, kv_dim;
    const sy_kernels *kern;
    sy_threadpool *pool;

    sy_tf_matrix token_embd, output;
    float *output_norm;
    float *inv_freq; /* [rope_dims/2] */
    layer *layers;
    sy_lfm2 *lfm2; /* short_conv architectures: the conv layers */

    const sy_tf_kv_store_ops *kv_ops;
    void *kv_store;
    sy_dtype kv_type[2];     /* K, V: the RAM store's cache types (sy_tf_set_kv_types) */
    size_t kv_row_bytes[2];  /* one position's K / V row of one layer in them */
    float *kv_scratch;       /* widened reads, kv_scratch_floats per thread; NULL when both are F32 */
    size_t kv_scratch_floats;
    uint32_t n_seqs; /* alive, so the store is not swapped under them */

    /* scratch of one chunk (decode is serial per model) */
    float *x, *xb, *q, *k, *v, *att, *gate, *up, *logits;
    float *att_part; /* split decode's partial softmax states (attention_tile) */
    void *qx;
    size_t qx_bytes;
    uint32_t row_pos[SY_TF_MAX_BATCH];
    sy_tf_seq *row_seq[SY_TF_MAX_BATCH];

    uint64_t decode_calls;
    _Atomic uint64_t kv_bytes;
    _Atomic uint64_t resident_bytes;
};

static void *alloc_counted(sy_tf_model *m, size_t n_bytes) {
    void *p = calloc(1, n_bytes ? n_bytes : 1);
    if (p) atomic_fetch_add(&m->resident_bytes, n_bytes);
    return p;
}

static size_t attn_part_floats(const sy_tf_config *c);

/* ---- building ---- */

static bool check_matrix(const sy_tf_matrix *w, uint64_t rows, uint64_t cols, char *err, size_t err_size) {
    return sy_tf_check_matrix(w, "(unnamed matrix)", rows, cols, err, err_size);
}

/* Copies a vector to F32. *out stays NULL when the vector is absent and optional. */
static bool load_vector(sy_tf_model *m, const sy_tf_vector *v, uint64_t n, bool required, float **out, char *err,
                        size_t err_size) {
    const char *name = v->name ? v->name : "(unnamed vector)";
    *out = NULL;
    if (v->data == NULL) {
        if (required) sy_errmsg(err, err_size, "tensor %s is missing", name);
        return !required;
    }
    if (v->n != n) {
        sy_errmsg(err, err_size, "tensor %s: %llu elements, expected %llu", name, (unsigned long long)v->n,
                  (unsigned long long)n);
        return false;
    }
    size_t bytes = sy_dtype_row_bytes(v->type, n);
    float *f = alloc_counted(m, n * sizeof(float));
    if (f == NULL) {
        sy_errmsg(err, err_size, "out of memory for tensor %s", name);
        return false;
    }
    if (bytes == 0 || sy_dequantize_row(v->type, v->data, bytes, f, n) != SY_KERNEL_OK) {
        sy_errmsg(err, err_size, "tensor %s: type not supported for a vector", name);
        free(f);
        return false;
    }
    *out = f;
    return true;
}

static bool check_config(const sy_tf_config *c, uint32_t n_ctx, char *err, size_t err_size) {
    const uint32_t big = 1u << 20;
    if (c->arch == NULL) {
        sy_errmsg(err, err_size, "no architecture");
        return false;
    }
    if (c->n_vocab == 0 || c->n_vocab > (1u << 24) || c->n_embd == 0 || c->n_embd > big || c->n_ff == 0 ||
        c->n_ff > big || c->n_layer == 0 || c->n_layer > 4096 || c->n_head == 0 || c->n_head > 4096 ||
        c->n_head_kv == 0 || c->n_head % c->n_head_kv != 0 || c->head_dim == 0 ||
        c->head_dim > SY_TF_MAX_HEAD_DIM || c->head_dim % 2 != 0 || (uint64_t)c->n_head * c->head_dim > big) {
        sy_errmsg(err, err_size,
                  "unsupported dimensions: vocab %u, embd %u, ff %u, layers %u, heads %u/%u, head_dim %u",
                  c->n_vocab, c->n_embd, c->n_ff, c->n_layer, c->n_head, c->n_head_kv, c->head_dim);
        return false;
    }
    if (c->rope_dims > c->head_dim || c->rope_dims % 2 != 0 || c->rope_dims > SY_ROPE_MAX_DIMS) {
        sy_errmsg(err, err_size, "rope dimension count %u does not fit head dimension %u", c->rope_dims,
                  c->head_dim);
        return false;
    }
    if (!(c->rope_base > 0) || !(c->rope_scale > 0) || !(c->rms_eps > 0) || !isfinite(c->rope_base) ||
        !isfinite(c->rope_scale)) {
        sy_errmsg(err, err_size, "invalid rope base %g, rope scale %g or rms epsilon %g", c->rope_base,
                  c->rope_scale, (double)c->rms_eps);
        return false;
    }
    if (n_ctx == 0 || n_ctx > (1u << 24)) {
        sy_errmsg(err, err_size, "context size %u out of range", n_ctx);
        return false;
    }
    return true;
}

static bool load_layer(sy_tf_model *m, const sy_tf_layer_weights *w, layer *L, char *err, size_t err_size) {
    const sy_tf_config *c = &m->cfg;
    bool bias = c->arch->qkv_bias;
    L->kind = w->kind;
    if (w->kind != SY_TF_LAYER_ATTENTION) { /* the operator itself is checked by sy_lfm2_create */
        if (w->kind != SY_TF_LAYER_SHORT_CONV || !c->arch->short_conv) {
            sy_errmsg(err, err_size, "%s: layer kind %d is not one of this architecture", c->arch->name,
                      (int)w->kind);
            return false;
        }
        L->w_gate = w->w_gate;
        L->w_up = w->w_up;
        L->w_down = w->w_down;
        return check_matrix(&w->w_gate, c->n_ff, c->n_embd, err, err_size) &&
               check_matrix(&w->w_up, c->n_ff, c->n_embd, err, err_size) &&
               check_matrix(&w->w_down, c->n_embd, c->n_ff, err, err_size) &&
               load_vector(m, &w->attn_norm, c->n_embd, true, &L->attn_norm, err, err_size) &&
               load_vector(m, &w->ffn_norm, c->n_embd, true, &L->ffn_norm, err, err_size);
    }
    L->wq = w->wq;
    L->wk = w->wk;
    L->wv = w->wv;
    L->wo = w->wo;
    L->w_gate = w->w_gate;
    L->w_up = w->w_up;
    L->w_down = w->w_down;
    return check_matrix(&w->wq, m->q_dim, c->n_embd, err, err_size) &&
           check_matrix(&w->wk, m->kv_dim, c->n_embd, err, err_size) &&
           check_matrix(&w->wv, m->kv_dim, c->n_embd, err, err_size) &&
           check_matrix(&w->wo, c->n_embd, m->q_dim, err, err_size) &&
           check_matrix(&w->w_gate, c->n_ff, c->n_embd, err, err_size) &&
           check_matrix(&w->w_up, c->n_ff, c->n_embd, err, err_size) &&
           check_matrix(&w->w_down, c->n_embd, c->n_ff, err, err_size) &&
           load_vector(m, &w->attn_norm, c->n_embd, true, &L->attn_norm, err, err_size) &&
           load_vector(m, &w->ffn_norm, c->n_embd, true, &L->ffn_norm, err, err_size) &&
           load_vector(m, &w->bq, m->q_dim, bias, &L->bq, err, err_size) &&
           load_vector(m, &w->bk, m->kv_dim, bias, &L->bk, err, err_size) &&
           load_vector(m, &w->bv, m->kv_dim, bias, &L->bv, err, err_size) &&
           load_vector(m, &w->bo, c->n_embd, false, &L->bo, err, err_size) &&
           load_vector(m, &w->q_norm, c->head_dim, c->arch->qk_norm, &L->q_norm, err, err_size) &&
           load_vector(m, &w->k_norm, c->head_dim, c->arch->qk_norm, &L->k_norm, err, err_size);
}

sy_tf_model *sy_tf_create(const sy_tf_config *cfg, const sy_tf_weights *w, uint32_t n_ctx, uint32_t n_threads,
                          char *err, size_t err_size) {
    if (!check_config(cfg, n_ctx, err, err_size)) return NULL;
    sy_tf_model *m = calloc(1, sizeof *m);
    if (m == NULL) {
        sy_errmsg(err, err_size, "out of memory");
        return NULL;
    }
    m->cfg = *cfg;
    m->n_ctx = n_ctx;
    m->q_dim = (size_t)cfg->n_head * cfg->head_dim;
    m->kv_dim = (size_t)cfg->n_head_kv * cfg->head_dim;
    m->kern = sy_kernels_active();
    m->token_embd = w->token_embd;
    m->output = w->output;

    /* The embedding table is only read row by row, so any type dequantize_row knows will do. */
    size_t embd_row = sy_dtype_row_bytes(w->token_embd.type, cfg->n_embd);
    if (w->token_embd.data == NULL || w->token_embd.rows != cfg->n_vocab || w->token_embd.cols != cfg->n_embd ||
        embd_row == 0 || w->token_embd.row_bytes < embd_row) {
        sy_errmsg(err, err_size, "tensor %s: expected %u x %u", w->token_embd.name ? w->token_embd.name : "token_embd",
                  cfg->n_vocab, cfg->n_embd);
        goto fail;
    }
    if (!check_matrix(&w->output, cfg->n_vocab, cfg->n_embd, err, err_size) ||
        !load_vector(m, &w->output_norm, cfg->n_embd, true, &m->output_norm, err, err_size))
        goto fail;

    m->layers = alloc_counted(m, cfg->n_layer * sizeof *m->layers);
    if (m->layers == NULL) goto oom;
    for (uint32_t l = 0; l < cfg->n_layer; l++)
        if (!load_layer(m, &w->layers[l], &m->layers[l], err, err_size)) goto fail;
    if (cfg->arch->short_conv) {
        m->lfm2 = sy_lfm2_create(cfg, w->layers, SY_TF_MAX_BATCH, err, err_size);
        if (m->lfm2 == NULL) goto fail;
        atomic_fetch_add(&m->resident_bytes, sy_lfm2_bytes(m->lfm2));
    }

    /* RoPE inverse frequencies, with the optional per-frequency divisors (llama 3 style scaling). */
    size_t n_freq = cfg->rope_dims / 2;
    m->inv_freq = alloc_counted(m, (n_freq ? n_freq : 1) * sizeof(float));
    if (m->inv_freq == NULL) goto oom;
    sy_rope_inv_freq(m->inv_freq, cfg->rope_dims, cfg->rope_base);
    if (w->rope_freq_factors.data != NULL) {
        float *factors;
        if (!load_vector(m, &w->rope_freq_factors, n_freq, true, &factors, err, err_size)) goto fail;
        for (size_t i = 0; i < n_freq; i++) m->inv_freq[i] /= factors[i];
        free(factors);
        atomic_fetch_sub(&m->resident_bytes, n_freq * sizeof(float));
    }

    size_t N = SY_TF_MAX_BATCH;
    size_t widest = cfg->n_embd > m->q_dim ? cfg->n_embd : m->q_dim;
    if (cfg->n_ff > widest) widest = cfg->n_ff;
    m->qx_bytes = sy_quantize_x_bytes((widest + 31) / 32 * 32, N);
    m->x = alloc_counted(m, N * cfg->n_embd * sizeof(float));
    m->xb = alloc_counted(m, N * cfg->n_embd * sizeof(float));
    m->q = alloc_counted(m, N * m->q_dim * sizeof(float));
    m->att = alloc_counted(m, N * m->q_dim * sizeof(float));
    m->k = alloc_counted(m, N * m->kv_dim * sizeof(float));
    m->v = alloc_counted(m, N * m->kv_dim * sizeof(float));
    m->gate = alloc_counted(m, N * cfg->n_ff * sizeof(float));
    m->up = alloc_counted(m, N * cfg->n_ff * sizeof(float));
    m->logits = alloc_counted(m, (size_t)LOGIT_ROWS * cfg->n_vocab * sizeof(float));
    m->att_part = alloc_counted(m, attn_part_floats(cfg) * sizeof(float));
    m->qx = alloc_counted(m, m->qx_bytes);
    if (!m->x || !m->xb || !m->q || !m->att || !m->k || !m->v || !m->gate || !m->up || !m->logits || !m->qx ||
        !m->att_part)
        goto oom;

    m->pool = sy_threadpool_create(n_threads ? n_threads : 1);
    if (m->pool == NULL) goto oom;
    sy_tf_set_kv_store(m, NULL, NULL);
    if (sy_tf_set_kv_types(m, SY_DTYPE_F32, SY_DTYPE_F32, err, err_size) != SY_OK) goto fail;
    return m;

oom:
    sy_errmsg(err, err_size, "out of memory building the model");
fail:
    sy_tf_destroy(m);
    return NULL;
}

void sy_tf_destroy(sy_tf_model *m) {
    if (m == NULL) return;
    sy_threadpool_destroy(m->pool);
    if (m->layers) {
        for (uint32_t l = 0; l < m->cfg.n_layer; l++) {
            layer *L = &m->layers[l];
            free(L->attn_norm), free(L->bq), free(L->bk), free(L->bv);
            free(L->q_norm), free(L->k_norm), free(L->bo), free(L->ffn_norm);
        }
    }
    free(m->layers);
    sy_lfm2_destroy(m->lfm2);
    free(m->output_norm);
    free(m->inv_freq);
    free(m->x), free(m->xb), free(m->q), free(m->att), free(m->att_part), free(m->k), free(m->v);
    free(m->gate), free(m->up), free(m->logits), free(m->qx), free(m->kv_scratch);
    free(m);
}

void sy_tf_prefault(sy_tf_model *m) {
    /* Scratch this large is fresh zero pages from calloc; each decode writes some of it, so writing it all now
     * makes the footprint after the load the one the model serves with (what memory_usage counts, what the
     * process's RSS shows, what a budget plans with), and a short machine fail here, not in a later decode. */
    const size_t N = SY_TF_MAX_BATCH;
    memset(m->x, 0, N * m->cfg.n_embd * sizeof(float));
    memset(m->xb, 0, N * m->cfg.n_embd * sizeof(float));
    memset(m->q, 0, N * m->q_dim * sizeof(float));
    memset(m->att, 0, N * m->q_dim * sizeof(float));
    memset(m->k, 0, N * m->kv_dim * sizeof(float));
    memset(m->v, 0, N * m->kv_dim * sizeof(float));
    memset(m->gate, 0, N * m->cfg.n_ff * sizeof(float));
    memset(m->up, 0, N * m->cfg.n_ff * sizeof(float));
    memset(m->logits, 0, (size_t)LOGIT_ROWS * m->cfg.n_vocab * sizeof(float));
    memset(m->qx, 0, m->qx_bytes);
}

bool sy_tf_check(const sy_tf_config *cfg, const sy_tf_weights *w, uint32_t n_ctx, char *err, size_t err_size) {
    /* building is checking: scratch is calloc'd, so a model built and dropped costs little */
    sy_tf_model *m = sy_tf_create(cfg, w, n_ctx, 1, err, err_size);
    sy_tf_destroy(m);
    return m != NULL;
}

const sy_tf_config *sy_tf_model_config(const sy_tf_model *m) { return &m->cfg; }
uint32_t sy_tf_n_ctx(const sy_tf_model *m) { return m->n_ctx; }

uint32_t sy_tf_n_threads(const sy_tf_model *m) { return (uint32_t)sy_threadpool_size(m->pool); }

void sy_tf_memory(const sy_tf_model *m, sy_tf_memory_info *out) {
    out->kv_bytes = atomic_load(&((sy_tf_model *)m)->kv_bytes);
    out->resident_bytes = atomic_load(&((sy_tf_model *)m)->resident_bytes);
    out->mapped_bytes = 0;
    if (m->kv_ops->memory) m->kv_ops->memory(m->kv_store, out);
}

/* ---- the RAM KV store: per sequence and layer one K and one V buffer of [cap] rows in the cache types
 * (cache_type_k/v: F32, F16 or Q8_0 blocks of 32 along the row), grown as they fill ----
 *
 * F32 rows are read in place. Rows of the other types are widened to F32 on read, a block of up to
 * RAM_READ_POSITIONS positions and the columns asked for (whole Q8_0 blocks around them) at a time, into the
 * reading thread's scratch: the attention asks for one tile's keys (64) of one KV head, which the tile's query
 * heads then share, so each stored byte is widened once per tile and the cache's memory traffic shrinks with its
 * type. */

#define RAM_READ_POSITIONS 64 /* positions one read widens: ATTN_TILE_KEYS */

typedef struct ram_kv {
    uint32_t cap;     /* positions the buffers have room for */
    uint8_t **k, **v; /* [n_layer] -> [cap] rows of kv_row_bytes[0] / [1] */
} ram_kv;

static size_t ram_layer_bytes(const sy_tf_model *m, uint32_t cap) {
    return (size_t)cap * (m->kv_row_bytes[0] + m->kv_row_bytes[1]);
}

static void *ram_seq_create(void *store) {
    sy_tf_model *m = store;
    ram_kv *s = calloc(1, sizeof *s);
    if (s == NULL) return NULL;
    s->k = calloc(m->cfg.n_layer, sizeof *s->k);
    s->v = calloc(m->cfg.n_layer, sizeof *s->v);
    if (s->k == NULL || s->v == NULL) {
        free(s->k);
        free(s->v);
        free(s);
        return NULL;
    }
    return s;
}

static void ram_seq_free(void *store, void *kv) {
    sy_tf_model *m = store;
    ram_kv *s = kv;
    for (uint32_t l = 0; l < m->cfg.n_layer; l++) {
        free(s->k[l]);
        free(s->v[l]);
    }
    uint64_t bytes = (uint64_t)m->cfg.n_layer * ram_layer_bytes(m, s->cap);
    atomic_fetch_sub(&m->kv_bytes, bytes);
    atomic_fetch_sub(&m->resident_bytes, bytes);
    free(s->k);
    free(s->v);
    free(s);
}

/* Makes room for `need` tokens; the content stays. false when out of memory (nothing lost). */
static bool ram_reserve(void *store, void *kv, uint32_t keep, uint32_t need, char *err, size_t err_size) {
    (void)keep;
    sy_tf_model *m = store;
    ram_kv *s = kv;
    if (need <= s->cap) return true;
    uint64_t cap = (uint64_t)s->cap * 2;
    if (cap < (uint64_t)s->cap + KV_MIN_GROW) cap = (uint64_t)s->cap + KV_MIN_GROW;
    if (cap < need) cap = need;
    if (cap > m->n_ctx) cap = m->n_ctx;
    size_t k_bytes = (size_t)cap * m->kv_row_bytes[0], v_bytes = (size_t)cap * m->kv_row_bytes[1];
    for (uint32_t l = 0; l < m->cfg.n_layer; l++) {
        /* Each layer grows on its own; a failure midway leaves larger buffers than cap says, which is harmless
         * (the next reserve reallocates them again). */
        uint8_t *k = realloc(s->k[l], k_bytes);
        uint8_t *v = k ? realloc(s->v[l], v_bytes) : NULL;
        if (k) s->k[l] = k;
        if (v == NULL) {
            sy_errmsg(err, err_size, "out of memory for %u positions of KV", (unsigned)cap);
            return false;
        }
        s->v[l] = v;
    }
    uint64_t grown = (uint64_t)m->cfg.n_layer * (ram_layer_bytes(m, (uint32_t)cap) - ram_layer_bytes(m, s->cap));
    atomic_fetch_add(&m->kv_bytes, grown);
    atomic_fetch_add(&m->resident_bytes, grown);
    s->cap = (uint32_t)cap;
    return true;
}

/* One row of kv_dim floats in the cache type `type` at dst. */
static void kv_row_store(const sy_tf_model *m, sy_dtype type, const float *src, uint8_t *dst) {
    if (type == SY_DTYPE_F16)
        m->kern->f32_to_f16(src, (uint16_t *)(void *)dst, m->kv_dim);
    else if (type == SY_DTYPE_Q8_0)
        sy_quantize_q8_0_row(src, dst, m->kv_dim);
    else
        memcpy(dst, src, m->kv_dim * sizeof(float));
}

/* Columns [c0, c0 + n_cols) of a row in the cache type `type` widened to F32 at dst (for Q8_0, c0 and n_cols
 * are whole blocks). */
static void kv_row_load(const sy_tf_model *m, sy_dtype type, const uint8_t *row, size_t c0, size_t n_cols,
                        float *dst) {
    if (type == SY_DTYPE_F16)
        m->kern->f16_to_f32((const uint16_t *)(const void *)row + c0, dst, n_cols);
    else if (type == SY_DTYPE_Q8_0)
        m->kern->q8_0_to_f32(row + c0 / SY_Q8_0_BLOCK_ELEMS * SY_Q8_0_BLOCK_BYTES, dst, n_cols / SY_Q8_0_BLOCK_ELEMS);
    else
        memcpy(dst, (const float *)(const void *)row + c0, n_cols * sizeof(float));
}

static void ram_write(void *store, void *kv, uint32_t l, uint32_t pos, const float *k, const float *v) {
    sy_tf_model *m = store;
    ram_kv *s = kv;
    kv_row_store(m, m->kv_type[0], k, s->k[l] + (size_t)pos * m->kv_row_bytes[0]);
    kv_row_store(m, m->kv_type[1], v, s->v[l] + (size_t)pos * m->kv_row_bytes[1]);
}

static void ram_read(void *store, const void *kv, uint32_t l, uint32_t p0, uint32_t n, uint32_t col,
                     uint32_t n_cols, size_t thread_index, sy_tf_kv_view *out) {
    const sy_tf_model *m = store;
    const ram_kv *s = kv;
    if (m->kv_scratch == NULL) { /* both F32: in place */
        size_t at = (size_t)p0 * m->kv_dim + col;
        *out = (sy_tf_kv_view){(const float *)(const void *)s->k[l] + at, (const float *)(const void *)s->v[l] + at,
                               m->kv_dim, n};
        return;
    }
    /* K and V share the view's stride, so both are widened over the same window: the columns asked for, or the
     * whole Q8_0 blocks around them when either type is Q8_0. */
    size_t c0 = col, width = n_cols;
    if (m->kv_type[0] == SY_DTYPE_Q8_0 || m->kv_type[1] == SY_DTYPE_Q8_0) {
        c0 = col / SY_Q8_0_BLOCK_ELEMS * SY_Q8_0_BLOCK_ELEMS;
        width = ((size_t)col + n_cols + SY_Q8_0_BLOCK_ELEMS - 1) / SY_Q8_0_BLOCK_ELEMS * SY_Q8_0_BLOCK_ELEMS - c0;
    }
    if (n > RAM_READ_POSITIONS) n = RAM_READ_POSITIONS;
    float *k = m->kv_scratch + thread_index * m->kv_scratch_floats, *v = k + m->kv_scratch_floats / 2;
    for (uint32_t i = 0; i < n; i++) {
        size_t p = (size_t)p0 + i;
        kv_row_load(m, m->kv_type[0], s->k[l] + p * m->kv_row_bytes[0], c0, width, k + i * width);
        kv_row_load(m, m->kv_type[1], s->v[l] + p * m->kv_row_bytes[1], c0, width, v + i * width);
    }
    *out = (sy_tf_kv_view){k + (col - c0), v + (col - c0), width, n};
}

static bool ram_copy_prefix(void *store, void *dst, const void *src, uint32_t n, char *err, size_t err_size) {
    sy_tf_model *m = store;
    ram_kv *d = dst;
    const ram_kv *s = src;
    if (!ram_reserve(store, dst, 0, n, err, err_size)) return false;
    for (uint32_t l = 0; l < m->cfg.n_layer && n > 0; l++) {
        memcpy(d->k[l], s->k[l], (size_t)n * m->kv_row_bytes[0]);
        memcpy(d->v[l], s->v[l], (size_t)n * m->kv_row_bytes[1]);
    }
    return true;
}

static const sy_tf_kv_store_ops ram_store_ops = {
    .seq_create = ram_seq_create,
    .seq_free = ram_seq_free,
    .reserve = ram_reserve,
    .write = ram_write,
    .read = ram_read,
    .copy_prefix = ram_copy_prefix,
};

sy_status sy_tf_set_kv_store(sy_tf_model *m, const sy_tf_kv_store_ops *ops, void *store) {
    if (m->n_seqs > 0) return SY_ERR_INVALID_ARGUMENT;
    m->kv_ops = ops ? ops : &ram_store_ops;
    m->kv_store = ops ? store : m;
    return SY_OK;
}

bool sy_tf_kv_type_supported(sy_dtype type) {
    return type == SY_DTYPE_F32 || type == SY_DTYPE_F16 || type == SY_DTYPE_Q8_0;
}

sy_status sy_tf_set_kv_types(sy_tf_model *m, sy_dtype type_k, sy_dtype type_v, char *err, size_t err_size) {
    if (m->n_seqs > 0) {
        sy_errmsg(err, err_size, "the KV cache types cannot change while sequences exist");
        return SY_ERR_INVALID_ARGUMENT;
    }
    const sy_dtype types[2] = {type_k, type_v};
    for (int i = 0; i < 2; i++) {
        if (!sy_tf_kv_type_supported(types[i])) {
            sy_errmsg(err, err_size, "KV cache type %d is not one of f32, f16, q8_0", (int)types[i]);
            return SY_ERR_UNSUPPORTED;
        }
        if (types[i] == SY_DTYPE_Q8_0 && m->kv_dim % SY_Q8_0_BLOCK_ELEMS != 0) {
            sy_errmsg(err, err_size, "cache_type_%c q8_0 needs a KV row (%u KV heads x %u) that is a multiple of 32",
                      i == 0 ? 'k' : 'v', m->cfg.n_head_kv, m->cfg.head_dim);
            return SY_ERR_UNSUPPORTED;
        }
    }
    /* scratch of the widened reads: K and V of RAM_READ_POSITIONS positions per thread, up to a whole row each */
    float *scratch = NULL;
    size_t per_thread = 2 * RAM_READ_POSITIONS * m->kv_dim, threads = sy_threadpool_size(m->pool);
    /* m->kv_scratch_floats and the allocation below are what sy_tf_kv_read_scratch_bytes counts */
    if (type_k != SY_DTYPE_F32 || type_v != SY_DTYPE_F32) {
        scratch = alloc_counted(m, threads * per_thread * sizeof(float));
        if (scratch == NULL) {
            sy_errmsg(err, err_size, "out of memory for the KV cache's read scratch");
            return SY_ERR_OUT_OF_MEMORY;
        }
    }
    if (m->kv_scratch) {
        free(m->kv_scratch);
        atomic_fetch_sub(&m->resident_bytes, threads * m->kv_scratch_floats * sizeof(float));
    }
    m->kv_scratch = scratch;
    m->kv_scratch_floats = scratch ? per_thread : 0;
    for (int i = 0; i < 2; i++) {
        m->kv_type[i] = types[i];
        m->kv_row_bytes[i] = sy_dtype_row_bytes(types[i], m->kv_dim);
    }
    return SY_OK;
}

uint64_t sy_tf_kv_read_scratch_bytes(size_t kv_dim, sy_dtype type_k, sy_dtype type_v, uint32_t n_threads) {
    if (type_k == SY_DTYPE_F32 && type_v == SY_DTYPE_F32) return 0;
    return 2ull * RAM_READ_POSITIONS * kv_dim * sizeof(float) * n_threads;
}

void sy_tf_kv_types(const sy_tf_model *m, sy_dtype *type_k, sy_dtype *type_v) {
    *type_k = m->kv_type[0];
    *type_v = m->kv_type[1];
}

size_t sy_tf_kv_row_bytes(const sy_tf_model *m, int kind) { return m->kv_row_bytes[kind != 0]; }

/* ---- snapshots ---- */

size_t sy_tf_kv_dim(const sy_tf_model *m) { return m->kv_dim; }

bool sy_tf_layer_has_kv(const sy_tf_model *m, uint32_t l) {
    return l < m->cfg.n_layer && m->layers[l].kind != SY_TF_LAYER_SHORT_CONV;
}

size_t sy_tf_conv_state_floats(const sy_tf_model *m) { return m->lfm2 ? sy_lfm2_state_floats(m->lfm2) : 0; }

void sy_tf_seq_get_kv(sy_tf_model *m, const sy_tf_seq *s, uint32_t l, uint32_t pos, float *k, float *v) {
    sy_tf_kv_view view;
    /* serial: no decode runs, so thread 0's scratch is free */
    m->kv_ops->read(m->kv_store, s->kv, l, pos, 1, 0, (uint32_t)m->kv_dim, 0, &view);
    memcpy(k, view.k, m->kv_dim * sizeof(float));
    memcpy(v, view.v, m->kv_dim * sizeof(float));
}

bool sy_tf_seq_get_conv_state(const sy_tf_model *m, const sy_tf_seq *s, uint32_t end, float *out) {
    if (s->conv == NULL) return true;
    return sy_lfm2_seq_state_get(m->lfm2, s->conv, s->len, end, out);
}

sy_status sy_tf_seq_begin_append(sy_tf_model *m, sy_tf_seq *s, uint32_t n, char *err, size_t err_size) {
    if ((uint64_t)s->len + n > m->n_ctx) {
        sy_errmsg(err, err_size, "%u + %u positions exceed the context of %u", s->len, n, m->n_ctx);
        return SY_ERR_CONTEXT_FULL;
    }
    if (!m->kv_ops->reserve(m->kv_store, s->kv, s->len, s->len + n, err, err_size)) return SY_ERR_OUT_OF_MEMORY;
    return SY_OK;
}

void sy_tf_seq_set_kv(sy_tf_model *m, sy_tf_seq *s, uint32_t l, uint32_t pos, const float *k, const float *v) {
    m->kv_ops->write(m->kv_store, s->kv, l, pos, k, v);
}

void sy_tf_seq_get_kv_rows(sy_tf_model *m, const sy_tf_seq *s, uint32_t l, uint32_t pos, void *k, void *v) {
    if (m->kv_ops == &ram_store_ops) {
        const ram_kv *r = s->kv;
        memcpy(k, r->k[l] + (size_t)pos * m->kv_row_bytes[0], m->kv_row_bytes[0]);
        memcpy(v, r->v[l] + (size_t)pos * m->kv_row_bytes[1], m->kv_row_bytes[1]);
        return;
    }
    /* another store holds F32 or less precise values (kv_cache.c: F16), so storing them in the cache type
     * loses nothing the store had */
    sy_tf_kv_view view;
    m->kv_ops->read(m->kv_store, s->kv, l, pos, 1, 0, (uint32_t)m->kv_dim, 0, &view);
    kv_row_store(m, m->kv_type[0], view.k, k);
    kv_row_store(m, m->kv_type[1], view.v, v);
}

void sy_tf_seq_set_kv_rows(sy_tf_model *m, sy_tf_seq *s, uint32_t l, uint32_t pos, const void *k, const void *v) {
    if (m->kv_ops == &ram_store_ops) {
        ram_kv *r = s->kv;
        memcpy(r->k[l] + (size_t)pos * m->kv_row_bytes[0], k, m->kv_row_bytes[0]);
        memcpy(r->v[l] + (size_t)pos * m->kv_row_bytes[1], v, m->kv_row_bytes[1]);
        return;
    }
    float *fk = m->k, *fv = m->v; /* the chunk scratch: serial, no decode runs */
    kv_row_load(m, m->kv_type[0], k, 0, m->kv_dim, fk);
    kv_row_load(m, m->kv_type[1], v, 0, m->kv_dim, fv);
    m->kv_ops->write(m->kv_store, s->kv, l, pos, fk, fv);
}

void sy_tf_seq_end_append(sy_tf_model *m, sy_tf_seq *s, uint32_t n, const float *conv_state) {
    s->len += n;
    if (s->conv && conv_state) sy_lfm2_seq_state_set(m->lfm2, s->conv, s->len, conv_state);
}

/* ---- sequences ---- */

sy_tf_seq *sy_tf_seq_create(sy_tf_model *m) {
    sy_tf_seq *s = calloc(1, sizeof *s);
    if (s == NULL) return NULL;
    s->kv = m->kv_ops->seq_create(m->kv_store);
    if (s->kv == NULL) {
        free(s);
        return NULL;
    }
    if (m->lfm2 && (s->conv = sy_lfm2_seq_create(m->lfm2)) == NULL) {
        m->kv_ops->seq_free(m->kv_store, s->kv);
        free(s);
        return NULL;
    }
    if (m->lfm2) { /* recurrent state counts as KV */
        atomic_fetch_add(&m->kv_bytes, sy_lfm2_seq_bytes(m->lfm2));
        atomic_fetch_add(&m->resident_bytes, sy_lfm2_seq_bytes(m->lfm2));
    }
    m->n_seqs++;
    return s;
}

void sy_tf_seq_free(sy_tf_model *m, sy_tf_seq *s) {
    if (s == NULL) return;
    m->kv_ops->seq_free(m->kv_store, s->kv);
    if (s->conv) {
        sy_lfm2_seq_free(s->conv);
        atomic_fetch_sub(&m->kv_bytes, sy_lfm2_seq_bytes(m->lfm2));
        atomic_fetch_sub(&m->resident_bytes, sy_lfm2_seq_bytes(m->lfm2));
    }
    m->n_seqs--;
    free(s);
}

uint32_t sy_tf_seq_length(const sy_tf_seq *s) { return s->len; }

sy_status sy_tf_seq_truncate(sy_tf_model *m, sy_tf_seq *s, uint32_t n) {
    if (n > s->len) return SY_ERR_INVALID_ARGUMENT;
    if (s->conv) {
        if (!sy_lfm2_seq_can_truncate(m->lfm2, s->conv, s->len, n)) return SY_ERR_UNSUPPORTED;
        sy_lfm2_seq_truncate(m->lfm2, s->conv, s->len, n);
    }
    s->len = n;
    if (m->kv_ops->truncate) m->kv_ops->truncate(m->kv_store, s->kv, n);
    return SY_OK;
}

sy_status sy_tf_seq_fork(sy_tf_model *m, const sy_tf_seq *src, uint32_t n, sy_tf_seq **out) {
    if (n > src->len) return SY_ERR_INVALID_ARGUMENT;
    if (src->conv && !sy_lfm2_seq_can_truncate(m->lfm2, src->conv, src->len, n)) return SY_ERR_UNSUPPORTED;
    sy_tf_seq *s = sy_tf_seq_create(m);
    if (s == NULL || !m->kv_ops->copy_prefix(m->kv_store, s->kv, src->kv, n, NULL, 0)) {
        sy_tf_seq_free(m, s);
        return SY_ERR_OUT_OF_MEMORY;
    }
    if (s->conv) sy_lfm2_seq_copy(m->lfm2, s->conv, src->conv, src->len, n);
    s->len = n;
    *out = s;
    return SY_OK;
}

/* ---- threaded matrix products (matmul_job.h) ---- */

static bool matmul_group(sy_tf_model *m, const sy_tf_matrix *const *ws, float *const *ys, size_t count,
                         const float *x, size_t n) {
    return sy_matmul_group(m->pool, m->kern, ws, ys, count, x, n, m->qx);
}

/* y[n][w.rows] = x[n][w.cols] · wᵀ */
static bool matmul(sy_tf_model *m, const sy_tf_matrix *w, const float *x, size_t n, float *y) {
    return matmul_group(m, &w, &y, 1, x, n);
}

/* matmul() for the short-conv layers (transformer_lfm2.h) */
static bool matmul_ctx(void *m, const sy_tf_matrix *w, const float *x, size_t n, float *y) {
    return matmul(m, w, x, n, y);
}

/* ---- the layers ---- */

static void add_bias(float *y, const float *b, size_t n_rows, size_t dim) {
    if (b == NULL) return;
    for (size_t r = 0; r < n_rows; r++)
        for (size_t i = 0; i < dim; i++) y[r * dim + i] += b[i];
}

/* Causal attention, tiled (flash-attention style): a task is one tile of up to ATTN_TILE_ROWS consecutive rows of
 * one sequence and one KV head, that is the tile's rows times the `group` query heads sharing that KV head. Keys
 * come ATTN_TILE_KEYS at a time, so each block of K and V is read from the store once per tile (not once per row
 * and head) while it sits in L1, and every query vector of the tile folds it into its own online-softmax state
 * (running max, sum, and out in the tier's registers, attend_f32). A block past a row's position is skipped for
 * that row, one past all the tile's rows is never read. No buffer of n_ctx scores exists anywhere:
 *   att = Σ_p softmax(q·k_p / √d)_p v_p
 * Decode at depth has few tiles (one row each), so the keys of a tile are split into ranges over the threads;
 * each range keeps a partial state (max, sum, unnormalized out) and the states are combined afterwards. */
#define ATTN_TILE_ROWS 8
#define ATTN_TILE_KEYS 64
#define ATTN_MAX_SPLITS 16
#define ATTN_SPLIT_MIN_KEYS 512 /* no key range shorter than this */
#define ATTN_PART_TASKS 64      /* partial states the split buffer holds (tiles of one row each) */
#define ATTN_TILE_HEADS 16      /* query heads of one KV head in a task (a group may be larger: several units) */

typedef struct attn_job {
    sy_tf_model *m;
    uint32_t layer;
    size_t n_tiles, n_split;
    uint16_t tile_r0[SY_TF_MAX_BATCH], tile_rows[SY_TF_MAX_BATCH];
} attn_job;

/* A unit is up to ATTN_TILE_HEADS query heads sharing one KV head. */
static size_t attn_unit_slices(const sy_tf_config *c) {
    size_t group = c->n_head / c->n_head_kv;
    return (group + ATTN_TILE_HEADS - 1) / ATTN_TILE_HEADS;
}
static size_t attn_units(const sy_tf_config *c) { return c->n_head_kv * attn_unit_slices(c); }

/* Partial states of split decode, per task ATTN_TILE_HEADS * (hd + 2) floats (outs, then max and sum per head). */
static size_t attn_part_task_floats(const sy_tf_config *c) { return (size_t)ATTN_TILE_HEADS * (c->head_dim + 2); }
static size_t attn_part_floats(const sy_tf_config *c) { return ATTN_PART_TASKS * attn_part_task_floats(c); }

/* The query heads [h0, h0 + nh) of unit u; they read KV head kvh. */
static void attn_unit_heads(const sy_tf_config *c, size_t u, size_t *kvh, size_t *h0, size_t *nh) {
    size_t group = c->n_head / c->n_head_kv, slices = attn_unit_slices(c);
    size_t first = (u % slices) * ATTN_TILE_HEADS;
    *kvh = u / slices;
    *h0 = *kvh * group + first;
    *nh = group - first < ATTN_TILE_HEADS ? group - first : ATTN_TILE_HEADS;
}

static void attention_tile(void *arg, size_t task, size_t thread_index) {
    const attn_job *j = arg;
    sy_tf_model *m = j->m;
    const sy_tf_config *c = &m->cfg;
    const size_t hd = c->head_dim, units = attn_units(c);
    const float scale = 1.0f / sqrtf((float)hd);
    const size_t split = task % j->n_split;
    const size_t tile = j->n_tiles - 1 - task / (j->n_split * units); /* the longest tiles first */
    size_t kvh, h0, group;
    attn_unit_heads(c, (task / j->n_split) % units, &kvh, &h0, &group);
    const size_t r0 = j->tile_r0[tile], nr = j->tile_rows[tile];
    const void *kv = m->row_seq[r0]->kv;

    size_t n_keys = 0; /* keys the tile's last-reaching row sees */
    for (size_t i = 0; i < nr; i++)
        if ((size_t)m->row_pos[r0 + i] + 1 > n_keys) n_keys = (size_t)m->row_pos[r0 + i] + 1;
    /* this task's range of keys, in whole blocks */
    size_t n_blocks = (n_keys + ATTN_TILE_KEYS - 1) / ATTN_TILE_KEYS;
    size_t lo = n_blocks * split / j->n_split * ATTN_TILE_KEYS;
    size_t hi = n_blocks * (split + 1) / j->n_split * ATTN_TILE_KEYS;
    if (hi > n_keys) hi = n_keys;

    float run_max[ATTN_TILE_ROWS * ATTN_TILE_HEADS], run_sum[ATTN_TILE_ROWS * ATTN_TILE_HEADS];
    float *outs[ATTN_TILE_ROWS * ATTN_TILE_HEADS];
    float *part = j->n_split > 1 ? m->att_part + task * attn_part_task_floats(c) : NULL;
    for (size_t i = 0; i < nr; i++)
        for (size_t g = 0; g < group; g++) {
            size_t v = i * group + g;
            outs[v] = part ? part + g * hd : m->att + (r0 + i) * m->q_dim + (h0 + g) * hd;
            memset(outs[v], 0, hd * sizeof(float));
            run_max[v] = -INFINITY;
            run_sum[v] = 0.0f;
        }
    sy_tf_kv_view view;
    for (size_t p0 = lo; p0 < hi; p0 += view.n) {
        size_t want = hi - p0 < ATTN_TILE_KEYS ? hi - p0 : ATTN_TILE_KEYS;
        m->kv_ops->read(m->kv_store, kv, j->layer, (uint32_t)p0, (uint32_t)want, (uint32_t)(kvh * hd), (uint32_t)hd,
                        thread_index, &view);
        for (size_t i = 0; i < nr; i++) {
            size_t seen = (size_t)m->row_pos[r0 + i] + 1;
            if (seen <= p0) continue; /* causal: the whole block lies after this row */
            size_t n = seen - p0 < view.n ? seen - p0 : view.n;
            const float *q = m->q + (r0 + i) * m->q_dim + h0 * hd;
            for (size_t g = 0; g < group; g++) {
                size_t v = i * group + g;
                m->kern->attend_f32(q + g * hd, view.k, view.v, view.stride, n, hd, scale, &run_max[v], &run_sum[v],
                                    outs[v]);
            }
        }
    }
    if (part) { /* combined by attention_combine */
        for (size_t g = 0; g < group; g++) {
            part[ATTN_TILE_HEADS * hd + 2 * g] = run_max[g];
            part[ATTN_TILE_HEADS * hd + 2 * g + 1] = run_sum[g];
        }
        return;
    }
    for (size_t v = 0; v < nr * group; v++) {
        float inv = 1.0f / run_sum[v];
        for (size_t e = 0; e < hd; e++) outs[v][e] *= inv;
    }
}

/* The split ranges' partial states of each (tile, KV head) into the tile's row of att: with M the largest
 * maximum, out = Σ_s e^(max_s - M) out_s / Σ_s e^(max_s - M) sum_s (a range with no key has sum 0). */
static void attention_combine(sy_tf_model *m, const attn_job *j) {
    const sy_tf_config *c = &m->cfg;
    const size_t hd = c->head_dim, S = j->n_split, units = attn_units(c);
    const size_t part_floats = attn_part_task_floats(c);
    for (size_t task0 = 0; task0 < j->n_tiles * units * S; task0 += S) {
        size_t tile = j->n_tiles - 1 - task0 / (S * units), kvh, h0, group;
        attn_unit_heads(c, (task0 / S) % units, &kvh, &h0, &group);
        size_t r = j->tile_r0[tile];
        for (size_t g = 0; g < group; g++) {
            float M = -INFINITY, total = 0.0f;
            for (size_t s = 0; s < S; s++) {
                const float *st = m->att_part + (task0 + s) * part_floats + ATTN_TILE_HEADS * hd + 2 * g;
                if (st[1] > 0.0f && st[0] > M) M = st[0];
            }
            float *out = m->att + r * m->q_dim + (h0 + g) * hd;
            memset(out, 0, hd * sizeof *out);
            for (size_t s = 0; s < S; s++) {
                const float *p = m->att_part + (task0 + s) * part_floats;
                const float *st = p + ATTN_TILE_HEADS * hd + 2 * g;
                if (!(st[1] > 0.0f)) continue;
                float w = expf(st[0] - M);
                total += w * st[1];
                m->kern->axpy_f32(out, w, p + g * hd, hd);
            }
            float inv = 1.0f / total;
            for (size_t e = 0; e < hd; e++) out[e] *= inv;
        }
    }
}

static void attention_rows(sy_tf_model *m, uint32_t l, size_t N) {
    const sy_tf_config *c = &m->cfg;
    attn_job j = {.m = m, .layer = l, .n_split = 1};
    size_t deepest = 0;
    for (size_t r = 0; r < N; r++) {
        bool extend = j.n_tiles > 0 && m->row_seq[r] == m->row_seq[r - 1] &&
                      j.tile_rows[j.n_tiles - 1] < ATTN_TILE_ROWS;
        if (extend) {
            j.tile_rows[j.n_tiles - 1]++;
        } else {
            j.tile_r0[j.n_tiles] = (uint16_t)r;
            j.tile_rows[j.n_tiles++] = 1;
        }
        if ((size_t)m->row_pos[r] + 1 > deepest) deepest = (size_t)m->row_pos[r] + 1;
    }
    /* decode at depth: too few tiles to keep the threads busy, so split their keys */
    size_t base = j.n_tiles * attn_units(c), threads = sy_threadpool_size(m->pool);
    if (m->att_part && j.n_tiles == N && base < 2 * threads && deepest >= 2 * ATTN_SPLIT_MIN_KEYS) {
        size_t s = (2 * threads + base - 1) / base;
        if (s > deepest / ATTN_SPLIT_MIN_KEYS) s = deepest / ATTN_SPLIT_MIN_KEYS;
        if (s > ATTN_MAX_SPLITS) s = ATTN_MAX_SPLITS;
        if (s > ATTN_PART_TASKS / base) s = ATTN_PART_TASKS / base;
        if (s > 1) j.n_split = s;
    }
    sy_threadpool_parallel_for(m->pool, base * j.n_split, attention_tile, &j);
    if (j.n_split > 1) attention_combine(m, &j);
}

/* x += Wo · attention(rope(Wq·xn), rope(Wk·xn), Wv·xn),  xn = rmsnorm(x)        x: [N][n_embd] */
static bool attention_block(sy_tf_model *m, uint32_t l, size_t N) {
    const sy_tf_config *c = &m->cfg;
    const layer *L = &m->layers[l];
    for (size_t r = 0; r < N; r++)
        sy_rmsnorm_f32(m->xb + r * c->n_embd, m->x + r * c->n_embd, L->attn_norm, c->n_embd, c->rms_eps);

    /* q: [N][n_head*hd]   k, v: [N][n_head_kv*hd] */
    const sy_tf_matrix *qkv[] = {&L->wq, &L->wk, &L->wv};
    float *const qkv_out[] = {m->q, m->k, m->v};
    if (!matmul_group(m, qkv, qkv_out, 3, m->xb, N)) return false;
    add_bias(m->q, L->bq, N, m->q_dim);
    add_bias(m->k, L->bk, N, m->kv_dim);
    add_bias(m->v, L->bv, N, m->kv_dim);

    for (size_t r = 0; r < N; r++) {
        float *q = m->q + r * m->q_dim, *k = m->k + r * m->kv_dim;
        if (L->q_norm) /* qwen3: each head normalized on its own */
            for (size_t h = 0; h < c->n_head; h++)
                sy_rmsnorm_f32(q + h * c->head_dim, q + h * c->head_dim, L->q_norm, c->head_dim, c->rms_eps);
        if (L->k_norm)
            for (size_t h = 0; h < c->n_head_kv; h++)
                sy_rmsnorm_f32(k + h * c->head_dim, k + h * c->head_dim, L->k_norm, c->head_dim, c->rms_eps);
        float pos = (float)((double)m->row_pos[r] / c->rope_scale);
        sy_rope_f32(q, c->n_head, c->head_dim, c->rope_dims, pos, m->inv_freq, c->arch->rope_style);
        sy_rope_f32(k, c->n_head_kv, c->head_dim, c->rope_dims, pos, m->inv_freq, c->arch->rope_style);
        /* into the sequence's cache at the row's position (committed only when the whole decode succeeds) */
        m->kv_ops->write(m->kv_store, m->row_seq[r]->kv, l, m->row_pos[r], k, m->v + r * m->kv_dim);
    }
    if (m->kv_ops->prepare) {
        /* the chunk's sequences (their rows are adjacent) and how far each one's reads reach */
        void *kvs[SY_TF_MAX_BATCH];
        uint32_t n_pos[SY_TF_MAX_BATCH];
        size_t n_kvs = 0;
        for (size_t r = 0; r < N; r++) {
            if (n_kvs == 0 || kvs[n_kvs - 1] != m->row_seq[r]->kv) kvs[n_kvs++] = m->row_seq[r]->kv;
            n_pos[n_kvs - 1] = m->row_pos[r] + 1;
        }
        m->kv_ops->prepare(m->kv_store, l, kvs, n_pos, n_kvs);
    }

    attention_rows(m, l, N);

    /* x += Wo · att */
    if (!matmul(m, &L->wo, m->att, N, m->xb)) return false;
    add_bias(m->xb, L->bo, N, c->n_embd);
    for (size_t i = 0; i < N * c->n_embd; i++) m->x[i] += m->xb[i];
    return true;
}

/* gate = silu(gate) * up over rows of the chunk, a few per task */
typedef struct swiglu_job {
    float *gate;
    const float *up;
    size_t n_rows, width;
} swiglu_job;
#define SWIGLU_ROWS_PER_TASK 8

static void swiglu_task(void *arg, size_t task, size_t thread_index) {
    (void)thread_index;
    const swiglu_job *j = arg;
    size_t r0 = task * SWIGLU_ROWS_PER_TASK;
    size_t r1 = r0 + SWIGLU_ROWS_PER_TASK < j->n_rows ? r0 + SWIGLU_ROWS_PER_TASK : j->n_rows;
    sy_swiglu_f32(j->gate + r0 * j->width, j->gate + r0 * j->width, j->up + r0 * j->width, (r1 - r0) * j->width);
}

/* x += W_down · (silu(W_gate · xn) * (W_up · xn)),  xn = rmsnorm(x)       gate, up: [N][n_ff] */
static bool ffn_block(sy_tf_model *m, uint32_t l, size_t N) {
    const sy_tf_config *c = &m->cfg;
    const layer *L = &m->layers[l];
    for (size_t r = 0; r < N; r++)
        sy_rmsnorm_f32(m->xb + r * c->n_embd, m->x + r * c->n_embd, L->ffn_norm, c->n_embd, c->rms_eps);
    const sy_tf_matrix *gate_up[] = {&L->w_gate, &L->w_up};
    float *const gate_up_out[] = {m->gate, m->up};
    if (!matmul_group(m, gate_up, gate_up_out, 2, m->xb, N)) return false;
    swiglu_job sj = {m->gate, m->up, N, c->n_ff};
    sy_threadpool_parallel_for(m->pool, (N + SWIGLU_ROWS_PER_TASK - 1) / SWIGLU_ROWS_PER_TASK, swiglu_task, &sj);
    if (!matmul(m, &L->w_down, m->gate, N, m->xb)) return false;
    for (size_t i = 0; i < N * c->n_embd; i++) m->x[i] += m->xb[i];
    return true;
}

/* ---- decode ---- */

/* Where the logits of a chunk row go: NULL when that row wants none. */
typedef struct row_out {
    float *logits;
    float *hidden;
} row_out;

static sy_status forward_chunk(sy_tf_model *m, const int32_t *tokens, const row_out *outs, size_t N,
                               sy_tf_cancel_fn cancel, void *cancel_ctx, char *err, size_t err_size) {
    const sy_tf_config *c = &m->cfg;
    for (size_t r = 0; r < N; r++) {
        const sy_tf_matrix *e = &m->token_embd;
        const uint8_t *row = (const uint8_t *)e->data + (size_t)tokens[r] * e->row_bytes;
        if (sy_dequantize_row(e->type, row, e->row_bytes, m->x + r * c->n_embd, c->n_embd) != SY_KERNEL_OK) {
            sy_errmsg(err, err_size, "tensor %s: cannot read embedding rows of this type", e->name);
            return SY_ERR_UNSUPPORTED;
        }
    }
    for (size_t r = 0; m->lfm2 && r < N; r++)
        sy_lfm2_bind_row(m->lfm2, r, m->row_seq[r]->conv, m->row_pos[r], m->row_seq[r]->len);
    for (uint32_t l = 0; l < c->n_layer; l++) {
        if (cancel && cancel(cancel_ctx)) {
            sy_errmsg(err, err_size, "cancelled");
            return SY_ERR_CANCELLED;
        }
        bool ok = m->layers[l].kind == SY_TF_LAYER_SHORT_CONV
                      ? sy_lfm2_conv_block(m->lfm2, l, m->x, N, m->layers[l].attn_norm, c->rms_eps, matmul_ctx, m)
                      : attention_block(m, l, N);
        if (!ok || !ffn_block(m, l, N)) {
            sy_errmsg(err, err_size, "layer %u: a matrix product failed", l);
            return SY_ERR_INTERNAL;
        }
    }
    /* logits = output · rmsnorm(x), for the rows asked for, LOGIT_ROWS at a time */
    size_t sel[LOGIT_ROWS], n_sel = 0;
    for (size_t r = 0; r <= N; r++) {
        if (r < N && outs[r].hidden)
            sy_rmsnorm_f32(outs[r].hidden, m->x + r * c->n_embd, m->output_norm, c->n_embd, c->rms_eps);
        if (r < N && outs[r].logits) {
            sy_rmsnorm_f32(m->xb + n_sel * c->n_embd, m->x + r * c->n_embd, m->output_norm, c->n_embd,
                           c->rms_eps);
            sel[n_sel++] = r;
        }
        if (n_sel == LOGIT_ROWS || (r == N && n_sel > 0)) {
            if (!matmul(m, &m->output, m->xb, n_sel, m->logits)) {
                sy_errmsg(err, err_size, "output: a matrix product failed");
                return SY_ERR_INTERNAL;
            }
            for (size_t i = 0; i < n_sel; i++)
                memcpy(outs[sel[i]].logits, m->logits + i * c->n_vocab, c->n_vocab * sizeof(float));
            n_sel = 0;
        }
    }
    return SY_OK;
}

sy_status sy_tf_check_item(size_t index, uint64_t *seq_mark, uint64_t mark, uint32_t seq_len, const int32_t *tokens,
                           uint32_t n_tokens, uint32_t n_logits, const float *logits, uint32_t n_ctx,
                           uint32_t n_vocab, char *err, size_t err_size) {
    if (seq_mark == NULL || (n_tokens > 0 && tokens == NULL) || n_logits > n_tokens ||
        (n_logits > 0 && logits == NULL)) {
        sy_errmsg(err, err_size, "item %zu: missing sequence, tokens or logits buffer, or n_logits > n_tokens", index);
        return SY_ERR_INVALID_ARGUMENT;
    }
    if (*seq_mark == mark) {
        sy_errmsg(err, err_size, "item %zu: the sequence appears twice in the batch", index);
        return SY_ERR_INVALID_ARGUMENT;
    }
    *seq_mark = mark;
    if ((uint64_t)seq_len + n_tokens > n_ctx) {
        sy_errmsg(err, err_size, "item %zu: %u + %u tokens exceed the context size %u", index, seq_len, n_tokens,
                  n_ctx);
        return SY_ERR_CONTEXT_FULL;
    }
    for (uint32_t t = 0; t < n_tokens; t++) {
        if (tokens[t] < 0 || (uint32_t)tokens[t] >= n_vocab) {
            sy_errmsg(err, err_size, "item %zu: token id %d out of range (vocabulary %u)", index, tokens[t], n_vocab);
            return SY_ERR_INVALID_ARGUMENT;
        }
    }
    return SY_OK;
}

static sy_status validate_batch(sy_tf_model *m, const sy_tf_batch_item *items, size_t n_items, char *err,
                                size_t err_size) {
    uint64_t mark = ++m->decode_calls;
    for (size_t i = 0; i < n_items; i++) {
        const sy_tf_batch_item *it = &items[i];
        sy_status st = sy_tf_check_item(i, it->seq ? &it->seq->mark : NULL, mark, it->seq ? it->seq->len : 0,
                                        it->tokens, it->n_tokens, it->n_logits, it->logits ? it->logits : it->hidden,
                                        m->n_ctx,
                                        m->cfg.n_vocab, err, err_size);
        if (st != SY_OK) return st;
    }
    return SY_OK;
}

sy_status sy_tf_decode(sy_tf_model *m, const sy_tf_batch_item *items, size_t n_items, sy_tf_cancel_fn cancel,
                       void *cancel_ctx, char *err, size_t err_size) {
    sy_status st = validate_batch(m, items, n_items, err, err_size);
    if (st != SY_OK) return st;
    for (size_t i = 0; i < n_items; i++) {
        sy_tf_seq *s = items[i].seq;
        char why[200];
        if (!m->kv_ops->reserve(m->kv_store, s->kv, s->len, s->len + items[i].n_tokens, why, sizeof why)) {
            sy_errmsg(err, err_size, "KV cache of item %zu: %s", i, why);
            return SY_ERR_OUT_OF_MEMORY;
        }
    }

    /* All tokens of all items, in order, cut into chunks of SY_TF_MAX_BATCH rows. A row's K/V go to its
     * sequence at len + index, beyond the committed length until every chunk has run. */
    int32_t tokens[SY_TF_MAX_BATCH];
    row_out outs[SY_TF_MAX_BATCH];
    size_t N = 0;
    for (size_t i = 0; i < n_items; i++) {
        const sy_tf_batch_item *it = &items[i];
        for (uint32_t t = 0; t < it->n_tokens; t++) {
            uint32_t first_logit = it->n_tokens - it->n_logits;
            tokens[N] = it->tokens[t];
            m->row_seq[N] = it->seq;
            m->row_pos[N] = it->seq->len + t;
            outs[N].logits = t >= first_logit && it->logits ? it->logits + (size_t)(t - first_logit) * m->cfg.n_vocab
                                                            : NULL;
            outs[N].hidden = t >= first_logit && it->hidden ? it->hidden + (size_t)(t - first_logit) * m->cfg.n_embd
                                                            : NULL;
            if (++N == SY_TF_MAX_BATCH) {
                st = forward_chunk(m, tokens, outs, N, cancel, cancel_ctx, err, err_size);
                if (st != SY_OK) return st;
                N = 0;
            }
        }
    }
    if (N > 0) {
        st = forward_chunk(m, tokens, outs, N, cancel, cancel_ctx, err, err_size);
        if (st != SY_OK) return st;
    }
    for (size_t i = 0; i < n_items; i++) {
        sy_tf_seq *s = items[i].seq;
        if (s->conv) sy_lfm2_seq_commit(m->lfm2, s->conv, s->len, items[i].n_tokens);
        s->len += items[i].n_tokens;
    }
    return SY_OK;
}
