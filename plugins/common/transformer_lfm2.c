/* lfm2's gated short convolution for the CPU transformer core: see transformer_lfm2.h. */
#include "transformer_lfm2.h"
#include "errmsg.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct conv_layer {
    sy_tf_matrix in_proj, out_proj;
    float *in_bias, *kernel, *bias, *out_bias; /* F32 copies; biases NULL when absent */
} conv_layer;

struct sy_lfm2 {
    uint32_t n_embd, kernel, n_layer, n_conv;
    uint32_t ring;       /* inputs kept per conv layer: SY_LFM2_ROLLBACK + kernel - 1 */
    int32_t *conv_index; /* [n_layer]: index among the conv layers, -1 for the others */
    conv_layer *conv;    /* [n_conv] */
    size_t max_rows;
    /* the rows of the chunk being run */
    sy_lfm2_seq **row_seq;
    uint32_t *row_pos, *row_len, *row_first; /* row_first: position of the sequence's first row in the chunk */
    /* scratch: xn [max_rows][n], bcx [max_rows][3n], u [max_rows][n] */
    float *xn, *bcx, *u;
    uint64_t bytes;
};

/* Ring slot of position p at ring + (p % ring) * n_embd, per conv layer l at + l * ring * n_embd. */
struct sy_lfm2_seq {
    uint32_t held;    /* committed inputs held: positions [len - held, len) */
    float *committed; /* [n_conv][ring][n_embd] */
    float *work;      /* same shape: inputs of the decode in progress */
};

/* ---- building ---- */

static bool check_matrix(const sy_tf_matrix *w, const char *what, uint32_t layer, uint64_t rows, uint64_t cols,
                         char *err, size_t err_size) {
    char fallback[48];
    snprintf(fallback, sizeof fallback, "layer %u %s", layer, what);
    return sy_tf_check_matrix(w, fallback, rows, cols, err, err_size);
}

/* An F32 copy of a vector of n elements; *out stays NULL when it is absent and optional. */
static bool copy_vector(sy_lfm2 *lf, const sy_tf_vector *v, const char *what, uint32_t layer, uint64_t n,
                        bool required, float **out, char *err, size_t err_size) {
    char fallback[48];
    snprintf(fallback, sizeof fallback, "layer %u %s", layer, what);
    const char *name = v->name ? v->name : fallback;
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
    float *f = malloc(n * sizeof(float));
    if (f == NULL) {
        sy_errmsg(err, err_size, "out of memory for tensor %s", name);
        return false;
    }
    if (bytes == 0 || sy_dequantize_row(v->type, v->data, bytes, f, n) != SY_KERNEL_OK) {
        sy_errmsg(err, err_size, "tensor %s: type not supported for a vector", name);
        free(f);
        return false;
    }
    lf->bytes += n * sizeof(float);
    *out = f;
    return true;
}

sy_lfm2 *sy_lfm2_create(const sy_tf_config *cfg, const sy_tf_layer_weights *layers, size_t max_rows, char *err,
                        size_t err_size) {
    if (cfg->conv_kernel < 2 || cfg->conv_kernel > SY_LFM2_MAX_KERNEL) {
        sy_errmsg(err, err_size, "short convolution width %u out of range [2, %u]", cfg->conv_kernel,
                  SY_LFM2_MAX_KERNEL);
        return NULL;
    }
    if (max_rows == 0 || max_rows > (1u << 16)) {
        sy_errmsg(err, err_size, "chunk of %zu rows out of range", max_rows);
        return NULL;
    }
    sy_lfm2 *lf = calloc(1, sizeof *lf);
    if (lf == NULL) goto oom;
    const uint64_t n = cfg->n_embd;
    lf->n_embd = cfg->n_embd;
    lf->kernel = cfg->conv_kernel;
    lf->n_layer = cfg->n_layer;
    lf->ring = SY_LFM2_ROLLBACK + cfg->conv_kernel - 1;
    lf->max_rows = max_rows;
    lf->conv_index = calloc(cfg->n_layer, sizeof *lf->conv_index);
    if (lf->conv_index == NULL) goto oom;
    for (uint32_t l = 0; l < cfg->n_layer; l++) {
        if (layers[l].kind == SY_TF_LAYER_SHORT_CONV) lf->conv_index[l] = (int32_t)lf->n_conv++;
        else lf->conv_index[l] = -1;
    }
    lf->conv = calloc(lf->n_conv ? lf->n_conv : 1, sizeof *lf->conv);
    if (lf->conv == NULL) goto oom;
    for (uint32_t l = 0; l < cfg->n_layer; l++) {
        if (lf->conv_index[l] < 0) continue;
        const sy_tf_layer_weights *w = &layers[l];
        conv_layer *c = &lf->conv[lf->conv_index[l]];
        c->in_proj = w->conv_in;
        c->out_proj = w->conv_out;
        if (!check_matrix(&w->conv_in, "conv in_proj", l, 3 * n, n, err, err_size) ||
            !check_matrix(&w->conv_out, "conv out_proj", l, n, n, err, err_size) ||
            !copy_vector(lf, &w->conv_kernel, "conv kernel", l, n * cfg->conv_kernel, true, &c->kernel, err,
                         err_size) ||
            !copy_vector(lf, &w->conv_in_bias, "conv in_proj bias", l, 3 * n, false, &c->in_bias, err, err_size) ||
            !copy_vector(lf, &w->conv_bias, "conv bias", l, n, false, &c->bias, err, err_size) ||
            !copy_vector(lf, &w->conv_out_bias, "conv out_proj bias", l, n, false, &c->out_bias, err, err_size))
            goto fail;
    }
    lf->row_seq = calloc(max_rows, sizeof *lf->row_seq);
    lf->row_pos = calloc(max_rows, sizeof *lf->row_pos);
    lf->row_len = calloc(max_rows, sizeof *lf->row_len);
    lf->row_first = calloc(max_rows, sizeof *lf->row_first);
    lf->xn = calloc(max_rows * n, sizeof(float));
    lf->bcx = calloc(max_rows * 3 * n, sizeof(float));
    lf->u = calloc(max_rows * n, sizeof(float));
    if (!lf->row_seq || !lf->row_pos || !lf->row_len || !lf->row_first || !lf->xn || !lf->bcx || !lf->u) goto oom;
    lf->bytes += max_rows * (sizeof(void *) + 3 * sizeof(uint32_t) + 5 * n * sizeof(float)) +
                 cfg->n_layer * sizeof(int32_t) + lf->n_conv * sizeof(conv_layer);
    return lf;

oom:
    sy_errmsg(err, err_size, "out of memory building the short convolution layers");
fail:
    sy_lfm2_destroy(lf);
    return NULL;
}

void sy_lfm2_destroy(sy_lfm2 *lf) {
    if (lf == NULL) return;
    for (uint32_t i = 0; lf->conv && i < lf->n_conv; i++) {
        conv_layer *c = &lf->conv[i];
        free(c->in_bias), free(c->kernel), free(c->bias), free(c->out_bias);
    }
    free(lf->conv);
    free(lf->conv_index);
    free(lf->row_seq), free(lf->row_pos), free(lf->row_len), free(lf->row_first);
    free(lf->xn), free(lf->bcx), free(lf->u);
    free(lf);
}

uint64_t sy_lfm2_bytes(const sy_lfm2 *lf) { return lf->bytes; }

static size_t ring_floats(const sy_lfm2 *lf) { return (size_t)lf->n_conv * lf->ring * lf->n_embd; }

uint64_t sy_lfm2_seq_bytes(const sy_lfm2 *lf) { return 2ull * ring_floats(lf) * sizeof(float); }

/* ---- sequences ---- */

sy_lfm2_seq *sy_lfm2_seq_create(const sy_lfm2 *lf) {
    sy_lfm2_seq *s = calloc(1, sizeof *s);
    if (s == NULL) return NULL;
    size_t n = ring_floats(lf) ? ring_floats(lf) : 1;
    s->committed = calloc(n, sizeof(float));
    s->work = calloc(n, sizeof(float));
    if (s->committed == NULL || s->work == NULL) {
        sy_lfm2_seq_free(s);
        return NULL;
    }
    return s;
}

void sy_lfm2_seq_free(sy_lfm2_seq *s) {
    if (s == NULL) return;
    free(s->committed);
    free(s->work);
    free(s);
}

bool sy_lfm2_seq_can_truncate(const sy_lfm2 *lf, const sy_lfm2_seq *s, uint32_t len, uint32_t n) {
    if (n > len) return false;
    if (n == len || n == 0) return true;
    /* the inputs the next token's convolution reads: positions [n - (L-1), n), clipped at 0 */
    uint32_t need_from = n >= lf->kernel - 1 ? n - (lf->kernel - 1) : 0;
    return need_from >= len - s->held;
}

void sy_lfm2_seq_truncate(const sy_lfm2 *lf, sy_lfm2_seq *s, uint32_t len, uint32_t n) {
    (void)lf;
    uint32_t dropped = len - n;
    s->held = s->held > dropped ? s->held - dropped : 0;
}

void sy_lfm2_seq_copy(const sy_lfm2 *lf, sy_lfm2_seq *dst, const sy_lfm2_seq *src, uint32_t src_len, uint32_t n) {
    memcpy(dst->committed, src->committed, ring_floats(lf) * sizeof(float));
    dst->held = src->held;
    sy_lfm2_seq_truncate(lf, dst, src_len, n);
}

void sy_lfm2_seq_commit(const sy_lfm2 *lf, sy_lfm2_seq *s, uint32_t len, uint32_t n_new) {
    if (n_new == 0) return;
    uint32_t first = n_new > lf->ring ? len + n_new - lf->ring : len;
    size_t layer_floats = (size_t)lf->ring * lf->n_embd;
    for (uint32_t c = 0; c < lf->n_conv; c++) {
        for (uint32_t p = first; p < len + n_new; p++) {
            size_t at = c * layer_floats + (size_t)(p % lf->ring) * lf->n_embd;
            memcpy(s->committed + at, s->work + at, lf->n_embd * sizeof(float));
        }
    }
    uint64_t held = (uint64_t)s->held + n_new;
    s->held = held > lf->ring ? lf->ring : (uint32_t)held;
}

/* ---- snapshots ---- */

size_t sy_lfm2_state_floats(const sy_lfm2 *lf) { return (size_t)lf->n_conv * (lf->kernel - 1) * lf->n_embd; }

bool sy_lfm2_seq_state_get(const sy_lfm2 *lf, const sy_lfm2_seq *s, uint32_t len, uint32_t end, float *out) {
    if (end > len) return false;
    uint32_t hist = lf->kernel - 1;
    uint32_t need_from = end >= hist ? end - hist : 0;
    if (need_from < end && need_from < len - s->held) return false;
    size_t layer_floats = (size_t)lf->ring * lf->n_embd;
    for (uint32_t c = 0; c < lf->n_conv; c++) {
        for (uint32_t j = 0; j < hist; j++) {
            float *dst = out + ((size_t)c * hist + j) * lf->n_embd;
            int64_t p = (int64_t)end - hist + j;
            if (p < 0) memset(dst, 0, lf->n_embd * sizeof(float));
            else memcpy(dst, s->committed + c * layer_floats + (size_t)((uint64_t)p % lf->ring) * lf->n_embd,
                        lf->n_embd * sizeof(float));
        }
    }
    return true;
}

void sy_lfm2_seq_state_set(const sy_lfm2 *lf, sy_lfm2_seq *s, uint32_t end, const float *in) {
    uint32_t hist = lf->kernel - 1;
    size_t layer_floats = (size_t)lf->ring * lf->n_embd;
    for (uint32_t c = 0; c < lf->n_conv; c++) {
        for (uint32_t j = 0; j < hist; j++) {
            int64_t p = (int64_t)end - hist + j;
            if (p < 0) continue;
            memcpy(s->committed + c * layer_floats + (size_t)((uint64_t)p % lf->ring) * lf->n_embd,
                   in + ((size_t)c * hist + j) * lf->n_embd, lf->n_embd * sizeof(float));
        }
    }
    s->held = end < hist ? end : hist;
}

/* ---- the layer ---- */

void sy_lfm2_bind_row(sy_lfm2 *lf, size_t r, sy_lfm2_seq *s, uint32_t pos, uint32_t len) {
    lf->row_seq[r] = s;
    lf->row_pos[r] = pos;
    lf->row_len[r] = len;
    bool continues = r > 0 && lf->row_seq[r - 1] == s && lf->row_pos[r - 1] + 1 == pos;
    lf->row_first[r] = continues ? lf->row_first[r - 1] : pos;
}

/* The convolution input of position q for chunk row r (q <= row_pos[r]): from this chunk's rows, from an earlier
 * chunk of the same decode (work ring), from the committed state, or zero before the sequence's start. */
static const float *input_at(const sy_lfm2 *lf, uint32_t conv, size_t r, int64_t q, const float *zeros) {
    if (q < 0) return zeros;
    uint32_t p = lf->row_pos[r];
    if (q >= lf->row_first[r]) return lf->u + (r - (size_t)(p - (uint32_t)q)) * lf->n_embd;
    const sy_lfm2_seq *s = lf->row_seq[r];
    const float *ring = q >= lf->row_len[r] ? s->work : s->committed;
    return ring + ((size_t)conv * lf->ring + (size_t)((uint64_t)q % lf->ring)) * lf->n_embd;
}

bool sy_lfm2_conv_block(sy_lfm2 *lf, uint32_t layer, float *x, size_t N, const float *norm, float eps,
                        sy_lfm2_matmul_fn matmul, void *matmul_ctx) {
    const size_t n = lf->n_embd, L = lf->kernel;
    const uint32_t ci = (uint32_t)lf->conv_index[layer];
    const conv_layer *c = &lf->conv[ci];
    for (size_t r = 0; r < N; r++) sy_rmsnorm_f32(lf->xn + r * n, x + r * n, norm, n, eps);

    /* bcx[N][3n] = in_proj · xn;  u = B ⊙ x */
    if (!matmul(matmul_ctx, &c->in_proj, lf->xn, N, lf->bcx)) return false;
    for (size_t r = 0; r < N; r++) {
        float *bcx = lf->bcx + r * 3 * n;
        if (c->in_bias)
            for (size_t i = 0; i < 3 * n; i++) bcx[i] += c->in_bias[i];
        float *u = lf->u + r * n;
        for (size_t i = 0; i < n; i++) u[i] = bcx[i] * bcx[2 * n + i];
    }

    /* y = C ⊙ conv(u), into xn (no longer needed) */
    float zeros[1] = {0};
    const float *taps[SY_LFM2_MAX_KERNEL];
    for (size_t r = 0; r < N; r++) {
        int64_t p = lf->row_pos[r];
        for (size_t j = 0; j < L; j++) taps[j] = input_at(lf, ci, r, p - (int64_t)(L - 1) + (int64_t)j, zeros);
        const float *C = lf->bcx + r * 3 * n + n;
        float *y = lf->xn + r * n;
        for (size_t i = 0; i < n; i++) {
            const float *k = c->kernel + i * L;
            float acc = c->bias ? c->bias[i] : 0.0f;
            for (size_t j = 0; j < L; j++) acc += k[j] * (taps[j] == zeros ? 0.0f : taps[j][i]);
            y[i] = C[i] * acc;
        }
    }

    /* this chunk's inputs into the work ring, for the next chunk and the commit */
    for (size_t r = 0; r < N; r++) {
        sy_lfm2_seq *s = lf->row_seq[r];
        float *slot = s->work + ((size_t)ci * lf->ring + lf->row_pos[r] % lf->ring) * n;
        memcpy(slot, lf->u + r * n, n * sizeof(float));
    }

    /* x += out_proj · y  (the product goes to u, which is free now) */
    if (!matmul(matmul_ctx, &c->out_proj, lf->xn, N, lf->u)) return false;
    for (size_t r = 0; r < N; r++) {
        float *xr = x + r * n;
        const float *o = lf->u + r * n;
        for (size_t i = 0; i < n; i++) xr[i] += o[i] + (c->out_bias ? c->out_bias[i] : 0.0f);
    }
    return true;
}
