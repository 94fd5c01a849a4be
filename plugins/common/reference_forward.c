/* The reference backend (see reference_forward.h): one position at a time, everything in double.
 *
 *   x = token_embd[token]
 *   for each layer:
 *     h = rmsnorm(x) * attn_norm
 *     q, k, v = Wq h + bq, Wk h + bk, Wv h + bv        (qk_norm: rmsnorm over each head of q and k)
 *     q, k = rope(q, pos), rope(k, pos);  K[pos], V[pos] = k, v
 *     a[head] = Σ_p softmax_p(q[head] · K[p][head'] / √d) V[p][head']     head' = head / (n_head / n_head_kv)
 *     x += Wo a + bo
 *     h = rmsnorm(x) * ffn_norm
 *     x += W_down (silu(W_gate h) * (W_up h))
 *   logits = output · (rmsnorm(x) * output_norm)
 */
#include "reference_forward.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errmsg.h"
#include "sy_kernels.h"

typedef struct ref_layer {
    double *attn_norm, *bq, *bk, *bv, *q_norm, *k_norm, *bo, *ffn_norm; /* NULL when absent */
    const sy_tf_matrix *wq, *wk, *wv, *wo, *w_gate, *w_up, *w_down;
} ref_layer;

struct sy_ref_seq {
    uint32_t len, cap;
    double **k, **v; /* [n_layer] -> [cap][kv_dim] */
    uint64_t mark;
};

struct sy_ref_model {
    sy_tf_config cfg;
    uint32_t n_ctx;
    size_t q_dim, kv_dim;
    sy_tf_matrix token_embd, output;
    double *output_norm;
    double *inv_freq; /* [rope_dims / 2] */
    ref_layer *layers;
    /* one position's activations */
    double *x, *h, *q, *k, *v, *att, *gate, *up, *scores;
    float *row; /* one weight row widened to float */
    uint64_t decode_calls;
    _Atomic uint64_t kv_bytes, resident_bytes;
};

static void *counted_calloc(sy_ref_model *m, size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size);
    if (p) atomic_fetch_add(&m->resident_bytes, (uint64_t)n * size);
    return p;
}

/* ---- building (over weights sy_tf_check accepted) ---- */

/* A vector widened to double; *out NULL when the vector is absent. false when out of memory. */
static bool widen(sy_ref_model *m, const sy_tf_vector *v, double **out) {
    *out = NULL;
    if (v->data == NULL) return true;
    float *f = malloc((v->n ? v->n : 1) * sizeof *f);
    double *d = counted_calloc(m, v->n, sizeof *d);
    bool ok = f && d && sy_dequantize_row(v->type, v->data, sy_dtype_row_bytes(v->type, v->n), f, v->n) == SY_KERNEL_OK;
    for (uint64_t i = 0; ok && i < v->n; i++) d[i] = f[i];
    free(f);
    if (!ok) free(d);
    else *out = d;
    return ok;
}

static bool widen_layer(sy_ref_model *m, const sy_tf_layer_weights *w, ref_layer *L) {
    L->wq = &w->wq, L->wk = &w->wk, L->wv = &w->wv, L->wo = &w->wo;
    L->w_gate = &w->w_gate, L->w_up = &w->w_up, L->w_down = &w->w_down;
    return widen(m, &w->attn_norm, &L->attn_norm) && widen(m, &w->ffn_norm, &L->ffn_norm) &&
           widen(m, &w->bq, &L->bq) && widen(m, &w->bk, &L->bk) && widen(m, &w->bv, &L->bv) &&
           widen(m, &w->bo, &L->bo) && widen(m, &w->q_norm, &L->q_norm) && widen(m, &w->k_norm, &L->k_norm);
}

sy_ref_model *sy_ref_create(const sy_tf_config *cfg, const sy_tf_weights *w, uint32_t n_ctx, char *err,
                            size_t err_size) {
    if (cfg->arch == NULL || cfg->arch->short_conv) {
        sy_errmsg(err, err_size, "the reference backend does not run this architecture");
        return NULL;
    }
    /* exactly the checkpoints the core accepts: shapes, types, sizes, required tensors */
    if (!sy_tf_check(cfg, w, n_ctx, err, err_size)) return NULL;
    sy_ref_model *m = calloc(1, sizeof *m);
    if (m == NULL) {
        sy_errmsg(err, err_size, "out of memory");
        return NULL;
    }
    m->cfg = *cfg;
    m->n_ctx = n_ctx;
    m->q_dim = (size_t)cfg->n_head * cfg->head_dim;
    m->kv_dim = (size_t)cfg->n_head_kv * cfg->head_dim;
    m->token_embd = w->token_embd;
    m->output = w->output;
    m->layers = counted_calloc(m, cfg->n_layer, sizeof *m->layers);
    double *factors = NULL;
    bool ok = m->layers != NULL && widen(m, &w->output_norm, &m->output_norm) &&
              widen(m, &w->rope_freq_factors, &factors);
    for (uint32_t l = 0; ok && l < cfg->n_layer; l++) ok = widen_layer(m, &w->layers[l], &m->layers[l]);

    size_t n_freq = cfg->rope_dims / 2;
    m->inv_freq = counted_calloc(m, n_freq, sizeof *m->inv_freq);
    for (size_t i = 0; ok && m->inv_freq && i < n_freq; i++) {
        m->inv_freq[i] = 1.0 / pow(cfg->rope_base, (double)(2 * i) / (double)cfg->rope_dims);
        if (factors) m->inv_freq[i] /= factors[i];
    }
    free(factors);

    size_t widest = cfg->n_embd > cfg->n_ff ? cfg->n_embd : cfg->n_ff;
    if (m->q_dim > widest) widest = m->q_dim;
    m->x = counted_calloc(m, cfg->n_embd, sizeof(double));
    m->h = counted_calloc(m, cfg->n_embd, sizeof(double));
    m->q = counted_calloc(m, m->q_dim, sizeof(double));
    m->att = counted_calloc(m, m->q_dim, sizeof(double));
    m->k = counted_calloc(m, m->kv_dim, sizeof(double));
    m->v = counted_calloc(m, m->kv_dim, sizeof(double));
    m->gate = counted_calloc(m, cfg->n_ff, sizeof(double));
    m->up = counted_calloc(m, cfg->n_ff, sizeof(double));
    m->scores = counted_calloc(m, n_ctx, sizeof(double));
    m->row = counted_calloc(m, widest, sizeof(float));
    if (!ok || !m->inv_freq || !m->x || !m->h || !m->q || !m->att || !m->k || !m->v || !m->gate || !m->up ||
        !m->scores || !m->row) {
        sy_errmsg(err, err_size, "out of memory building the reference model");
        sy_ref_destroy(m);
        return NULL;
    }
    return m;
}

void sy_ref_destroy(sy_ref_model *m) {
    if (m == NULL) return;
    if (m->layers) {
        for (uint32_t l = 0; l < m->cfg.n_layer; l++) {
            ref_layer *L = &m->layers[l];
            free(L->attn_norm), free(L->bq), free(L->bk), free(L->bv);
            free(L->q_norm), free(L->k_norm), free(L->bo), free(L->ffn_norm);
        }
    }
    free(m->layers), free(m->output_norm), free(m->inv_freq);
    free(m->x), free(m->h), free(m->q), free(m->att), free(m->k), free(m->v);
    free(m->gate), free(m->up), free(m->scores), free(m->row);
    free(m);
}

/* ---- sequences ---- */

sy_ref_seq *sy_ref_seq_create(sy_ref_model *m) {
    sy_ref_seq *s = calloc(1, sizeof *s);
    if (s == NULL) return NULL;
    s->k = calloc(m->cfg.n_layer, sizeof *s->k);
    s->v = calloc(m->cfg.n_layer, sizeof *s->v);
    if (s->k == NULL || s->v == NULL) {
        free(s->k), free(s->v), free(s);
        return NULL;
    }
    return s;
}

static uint64_t seq_bytes(const sy_ref_model *m, uint32_t cap) {
    return 2ull * m->cfg.n_layer * cap * m->kv_dim * sizeof(double);
}

void sy_ref_seq_free(sy_ref_model *m, sy_ref_seq *s) {
    if (s == NULL) return;
    for (uint32_t l = 0; l < m->cfg.n_layer; l++) free(s->k[l]), free(s->v[l]);
    atomic_fetch_sub(&m->kv_bytes, seq_bytes(m, s->cap));
    atomic_fetch_sub(&m->resident_bytes, seq_bytes(m, s->cap));
    free(s->k), free(s->v), free(s);
}

uint32_t sy_ref_seq_length(const sy_ref_seq *s) { return s->len; }

static bool seq_room(sy_ref_model *m, sy_ref_seq *s, uint32_t need) {
    if (need <= s->cap) return true;
    uint64_t grown = s->cap * 2ull < 64 ? 64 : s->cap * 2ull;
    uint32_t cap = grown > m->n_ctx ? m->n_ctx : (uint32_t)grown;
    if (cap < need) cap = need;
    size_t bytes = (size_t)cap * m->kv_dim * sizeof(double);
    for (uint32_t l = 0; l < m->cfg.n_layer; l++) {
        double *k = realloc(s->k[l], bytes);
        if (k) s->k[l] = k;
        double *v = k ? realloc(s->v[l], bytes) : NULL;
        if (v == NULL) return false;
        s->v[l] = v;
    }
    atomic_fetch_add(&m->kv_bytes, seq_bytes(m, cap) - seq_bytes(m, s->cap));
    atomic_fetch_add(&m->resident_bytes, seq_bytes(m, cap) - seq_bytes(m, s->cap));
    s->cap = cap;
    return true;
}

sy_status sy_ref_seq_truncate(sy_ref_model *m, sy_ref_seq *s, uint32_t n) {
    (void)m;
    if (n > s->len) return SY_ERR_INVALID_ARGUMENT;
    s->len = n;
    return SY_OK;
}

sy_status sy_ref_seq_fork(sy_ref_model *m, const sy_ref_seq *src, uint32_t n, sy_ref_seq **out) {
    if (n > src->len) return SY_ERR_INVALID_ARGUMENT;
    sy_ref_seq *s = sy_ref_seq_create(m);
    if (s == NULL || !seq_room(m, s, n)) {
        sy_ref_seq_free(m, s);
        return SY_ERR_OUT_OF_MEMORY;
    }
    for (uint32_t l = 0; l < m->cfg.n_layer && n > 0; l++) {
        memcpy(s->k[l], src->k[l], (size_t)n * m->kv_dim * sizeof(double));
        memcpy(s->v[l], src->v[l], (size_t)n * m->kv_dim * sizeof(double));
    }
    s->len = n;
    *out = s;
    return SY_OK;
}

/* ---- the math ---- */

/* y = W x (+ b): each row widened to float (exact for F32/F16/BF16), then summed in double. */
static void matvec(sy_ref_model *m, const sy_tf_matrix *w, const double *x, const double *b, double *y) {
    for (uint64_t r = 0; r < w->rows; r++) {
        sy_dequantize_row(w->type, (const uint8_t *)w->data + r * w->row_bytes, w->row_bytes, m->row,
                          (size_t)w->cols);
        double s = 0.0;
        for (uint64_t i = 0; i < w->cols; i++) s += (double)m->row[i] * x[i];
        y[r] = s + (b ? b[r] : 0.0);
    }
}

static void rmsnorm(double *out, const double *x, const double *weight, size_t n, double eps) {
    double ss = 0.0;
    for (size_t i = 0; i < n; i++) ss += x[i] * x[i];
    double scale = 1.0 / sqrt(ss / (double)n + eps);
    for (size_t i = 0; i < n; i++) out[i] = x[i] * scale * (weight ? weight[i] : 1.0);
}

/* Rotates the first rope_dims dimensions of each head: NEOX pairs (i, i + d/2), NORM pairs (2i, 2i + 1). */
static void rope(const sy_ref_model *m, double *x, size_t n_heads, double pos) {
    const sy_tf_config *c = &m->cfg;
    size_t half = c->rope_dims / 2;
    for (size_t h = 0; h < n_heads; h++) {
        double *v = x + h * c->head_dim;
        for (size_t i = 0; i < half; i++) {
            double a = pos * m->inv_freq[i], cs = cos(a), sn = sin(a);
            size_t i0 = c->arch->rope_style == SY_ROPE_NEOX ? i : 2 * i;
            size_t i1 = c->arch->rope_style == SY_ROPE_NEOX ? i + half : 2 * i + 1;
            double x0 = v[i0], x1 = v[i1];
            v[i0] = x0 * cs - x1 * sn;
            v[i1] = x0 * sn + x1 * cs;
        }
    }
}

/* One token at position pos of s through the whole model; logits (if wanted) rounded to float. */
static void forward_token(sy_ref_model *m, sy_ref_seq *s, int32_t token, uint32_t pos, float *logits) {
    const sy_tf_config *c = &m->cfg;
    const size_t hd = c->head_dim, group = c->n_head / c->n_head_kv, n_embd = c->n_embd;
    const double eps = c->rms_eps;
    const sy_tf_matrix *e = &m->token_embd;
    sy_dequantize_row(e->type, (const uint8_t *)e->data + (size_t)token * e->row_bytes, e->row_bytes, m->row,
                      n_embd);
    for (size_t i = 0; i < n_embd; i++) m->x[i] = m->row[i];

    for (uint32_t l = 0; l < c->n_layer; l++) {
        const ref_layer *L = &m->layers[l];
        rmsnorm(m->h, m->x, L->attn_norm, n_embd, eps);
        matvec(m, L->wq, m->h, L->bq, m->q);
        matvec(m, L->wk, m->h, L->bk, m->k);
        matvec(m, L->wv, m->h, L->bv, m->v);
        if (L->q_norm)
            for (size_t h = 0; h < c->n_head; h++) rmsnorm(m->q + h * hd, m->q + h * hd, L->q_norm, hd, eps);
        if (L->k_norm)
            for (size_t h = 0; h < c->n_head_kv; h++) rmsnorm(m->k + h * hd, m->k + h * hd, L->k_norm, hd, eps);
        double p = (double)pos / c->rope_scale;
        rope(m, m->q, c->n_head, p);
        rope(m, m->k, c->n_head_kv, p);
        memcpy(s->k[l] + (size_t)pos * m->kv_dim, m->k, m->kv_dim * sizeof(double));
        memcpy(s->v[l] + (size_t)pos * m->kv_dim, m->v, m->kv_dim * sizeof(double));

        for (size_t h = 0; h < c->n_head; h++) {
            const double *q = m->q + h * hd;
            size_t off = (h / group) * hd;
            double best = -INFINITY, sum = 0.0;
            for (uint32_t t = 0; t <= pos; t++) {
                const double *k = s->k[l] + (size_t)t * m->kv_dim + off;
                double d = 0.0;
                for (size_t i = 0; i < hd; i++) d += q[i] * k[i];
                m->scores[t] = d / sqrt((double)hd);
                if (m->scores[t] > best) best = m->scores[t];
            }
            double *out = m->att + h * hd;
            memset(out, 0, hd * sizeof *out);
            for (uint32_t t = 0; t <= pos; t++) {
                double wgt = exp(m->scores[t] - best);
                sum += wgt;
                const double *v = s->v[l] + (size_t)t * m->kv_dim + off;
                for (size_t i = 0; i < hd; i++) out[i] += wgt * v[i];
            }
            for (size_t i = 0; i < hd; i++) out[i] /= sum;
        }
        matvec(m, L->wo, m->att, L->bo, m->h);
        for (size_t i = 0; i < n_embd; i++) m->x[i] += m->h[i];

        rmsnorm(m->h, m->x, L->ffn_norm, n_embd, eps);
        matvec(m, L->w_gate, m->h, NULL, m->gate);
        matvec(m, L->w_up, m->h, NULL, m->up);
        for (size_t i = 0; i < c->n_ff; i++) m->gate[i] = m->gate[i] / (1.0 + exp(-m->gate[i])) * m->up[i];
        matvec(m, L->w_down, m->gate, NULL, m->h);
        for (size_t i = 0; i < n_embd; i++) m->x[i] += m->h[i];
    }
    if (logits == NULL) return;
    rmsnorm(m->h, m->x, m->output_norm, n_embd, eps);
    const sy_tf_matrix *o = &m->output;
    for (uint64_t r = 0; r < o->rows; r++) {
        sy_dequantize_row(o->type, (const uint8_t *)o->data + r * o->row_bytes, o->row_bytes, m->row, n_embd);
        double d = 0.0;
        for (size_t i = 0; i < n_embd; i++) d += (double)m->row[i] * m->h[i];
        logits[r] = (float)d;
    }
}

sy_status sy_ref_decode(sy_ref_model *m, const sy_ref_item *items, size_t n_items, sy_tf_cancel_fn cancel,
                        void *cancel_ctx, char *err, size_t err_size) {
    uint64_t mark = ++m->decode_calls;
    for (size_t i = 0; i < n_items; i++) {
        const sy_ref_item *it = &items[i];
        sy_status st = sy_tf_check_item(i, it->seq ? &it->seq->mark : NULL, mark, it->seq ? it->seq->len : 0,
                                        it->tokens, it->n_tokens, it->n_logits, it->logits, m->n_ctx,
                                        m->cfg.n_vocab, err, err_size);
        if (st != SY_OK) return st;
    }
    for (size_t i = 0; i < n_items; i++) {
        if (!seq_room(m, items[i].seq, items[i].seq->len + items[i].n_tokens)) {
            sy_errmsg(err, err_size, "out of memory for the KV of item %zu", i);
            return SY_ERR_OUT_OF_MEMORY;
        }
    }
    /* positions are written past each sequence's length and committed at the end */
    for (size_t i = 0; i < n_items; i++) {
        const sy_ref_item *it = &items[i];
        uint32_t first_logit = it->n_tokens - it->n_logits;
        for (uint32_t t = 0; t < it->n_tokens; t++) {
            if (cancel && cancel(cancel_ctx)) {
                sy_errmsg(err, err_size, "cancelled");
                return SY_ERR_CANCELLED;
            }
            float *logits = t >= first_logit ? it->logits + (size_t)(t - first_logit) * m->cfg.n_vocab : NULL;
            forward_token(m, it->seq, it->tokens[t], it->seq->len + t, logits);
        }
    }
    for (size_t i = 0; i < n_items; i++) items[i].seq->len += items[i].n_tokens;
    return SY_OK;
}

void sy_ref_memory(const sy_ref_model *m, sy_tf_memory_info *out) {
    out->kv_bytes = atomic_load(&((sy_ref_model *)m)->kv_bytes);
    out->resident_bytes = atomic_load(&((sy_ref_model *)m)->resident_bytes);
    out->mapped_bytes = 0;
}

const sy_tf_config *sy_ref_model_config(const sy_ref_model *m, uint32_t *n_ctx) {
    *n_ctx = m->n_ctx;
    return &m->cfg;
}
