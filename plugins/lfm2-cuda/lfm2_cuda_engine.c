/* The LFM2 model on one GPU: see lfm2_cuda_engine.h. The forward pass of one chunk of N rows (run_chunk):
 *
 *   x[N][n] = embed[token]                                              lc_embed
 *   for each layer:
 *     xn = rmsnorm(x += delta) * operator_norm                          lc_add_rmsnorm
 *     conv layer:  bcx = in_proj · xn;  u = B ⊙ X;  y = C ⊙ conv(u)      GEMM, lc_conv_input/apply/store
 *                  delta = out_proj · y                                  GEMM
 *     attention:   qkv = Wqkv · xn; q, k = rope(rmsnorm(q, k)); k, v -> KV blocks   GEMM, lc_qk_norm_rope_kv
 *                  a = softmax(q kᵀ / √d) v (split over keys for long decodes)       lc_attention(_combine)
 *                  delta = Wo · a                                        GEMM
 *     xn = rmsnorm(x += delta) * ffn_norm;  delta = w2 · (silu(w1 · xn) ⊙ (w3 · xn))  GEMM, lc_swiglu, GEMM
 *   xn = rmsnorm(x += delta) * final_norm;  logits = lm_head · xn (rows asked for)    GEMM, lc_argmax
 *
 * Every CUDA call is checked; a failure becomes SY_ERR_INTERNAL (SY_ERR_OUT_OF_MEMORY for allocations) with the
 * call and CUDA's message.
 */
#include "lfm2_cuda_engine.h"

#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "lfm2_cuda_gemm.h"
#include "lfm2_kernels.h"
#include "errmsg.h"
#include "sy_kernels.h"
#include "tensor_names.h"

#define WORKSPACE_BYTES (32u << 20)
#define ALIGN 256
#define STAGING_BYTES (16u << 20)      /* host buffer converting checkpoint tensors to BF16, piece by piece */
#define KV_RESERVE_BYTES (512ull << 20) /* left free when sizing the KV cache from free memory */
#define STATE_STAGING_BYTES (2u << 20)  /* KV blocks per state transfer: about this many bytes (at least one block) */

typedef struct layer_w {
    bool conv;
    int32_t index; /* among the conv layers or among the attention layers */
    float *op_norm, *ffn_norm;
    lc_bf16 *w13, *w2; /* [2ff][n] (w1 rows, then w3 rows), [n][ff] */
    /* conv */
    lc_bf16 *in_proj, *out_proj;          /* [3n][n], [n][n] */
    float *conv_kernel;                   /* [n][L] */
    float *in_bias, *conv_bias, *out_bias; /* NULL unless conv_bias */
    /* attention */
    lc_bf16 *wqkv, *wo; /* [(nh + 2 nkv) hd][n], [n][nh hd] */
    float *q_norm, *k_norm;
} layer_w;

typedef struct seq_state {
    bool used;
    uint32_t len;      /* tokens held */
    uint32_t held;     /* conv inputs held: positions [len - held, len) */
    uint32_t n_blocks; /* KV blocks in its page table row */
} seq_state;

/* Where a selected row's logits go. */
typedef struct row_out {
    float *logits; /* host row (logits mode) */
    int32_t item;  /* the item it belongs to (argmax mode: tokens_out[item]) */
} row_out;

struct lc_engine {
    sy_hf_config cfg;
    lc_options opt;
    char device_name[256];
    int32_t n, n_layer, n_head, n_kv, hd, ff, vocab, L, ring, n_conv, n_attn, q_dim, qkv_dim, group;
    float eps;
    cudaStream_t stream;
    lc_gemm *gemm;

    /* device memory: three allocations */
    void *weights_mem, *state_mem, *kv_mem;
    size_t weights_bytes, state_bytes, kv_mem_bytes;
    layer_w *layers;
    lc_bf16 *embed, *lm_head;
    float *final_norm, *inv_freq;

    lc_conv_state conv;

    /* KV blocks */
    int32_t n_blocks, max_blocks;
    size_t block_elems;   /* per pool: n_kv * LC_KV_BLOCK * hd */
    uint64_t block_bytes; /* all pools together */
    lc_bf16 **pools_host; /* [2 n_attn]: K, V of attention layer a at 2a, 2a+1 */
    lc_bf16 **pools_dev;
    int32_t *page_dev;  /* [max_sequences][max_blocks] */
    int32_t *page_host; /* pinned mirror */
    uint32_t *block_ref;
    int32_t *free_blocks;
    int32_t n_free;

    /* scratch (device) */
    float *x, *big, *delta, *u, *q, *logits, *partial;
    lc_bf16 *xn, *act, *xsel;
    int32_t *argmax_dev;
    void *workspace;
    int32_t max_tasks, split_keys, max_splits;

    /* per-chunk metadata: tokens, pos, slot, first, last, len, splits, sel ([T] each), then tasks */
    size_t meta_bytes;
    int32_t *meta_dev;
    int32_t *meta_host[2]; /* pinned, alternating, each guarded by an event */
    cudaEvent_t meta_done[2];
    int meta_turn;
    /* per-decode: KV block copies (src, dst) and conv commits (slot, len, n_new), [max_sequences] each */
    int32_t *small_dev, *small_host;
    int32_t *argmax_host; /* pinned [T] */
    uint32_t *undo_blocks; /* host [max_sequences]: n_blocks before the decode */

    seq_state *seqs;
    /* CUDA graphs of pure decode steps (every item one token, one logits row), per row count and output mode
     * (0: logits rows, 1: argmax); warmed: the step ran once eagerly (GEMM algorithms chosen), so it can be
     * captured next time */
    cudaGraphExec_t graphs[2][LC_SPLIT_ROWS];
    bool warmed[2][LC_SPLIT_ROWS];
    bool graphs_off;
    _Atomic uint64_t kv_used;
    uint64_t weight_bytes;

    /* state transfers (pinned, allocated by the first state call): whole KV blocks (or the conv state) in
     * state_blocks, the same positions in chunk layout in state_chunk */
    uint8_t *state_host;
    uint8_t *state_blocks, *state_chunk;
    uint32_t state_group; /* blocks per transfer */
};

/* Checks a CUDA call: false with "what: CUDA's message" in err. */
static bool ck(cudaError_t e, const char *what, char *err, size_t err_size) {
    if (e == cudaSuccess) return true;
    sy_errmsg(err, err_size, "%s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
    return false;
}

static size_t align_up(size_t v) { return (v + ALIGN - 1) / ALIGN * ALIGN; }

/* ---- weights ---- */

/* A bump allocator over one device allocation: the first pass (base NULL) only counts bytes. */
typedef struct bump {
    char *base;
    size_t used;
} bump;

static void *bump_take(bump *b, size_t bytes) {
    void *p = b->base ? b->base + b->used : NULL;
    b->used += align_up(bytes);
    return p;
}

/* Lays out every weight: with b->base NULL it sizes, otherwise it sets the pointers. */
static void layout_weights(lc_engine *e, bump *b) {
    const size_t n = (size_t)e->n, bf = sizeof(lc_bf16), f = sizeof(float);
    e->embed = bump_take(b, (size_t)e->vocab * n * bf);
    e->lm_head = e->cfg.tie_word_embeddings ? e->embed : bump_take(b, (size_t)e->vocab * n * bf);
    e->final_norm = bump_take(b, n * f);
    e->inv_freq = bump_take(b, (size_t)(e->hd / 2) * f);
    for (int32_t l = 0; l < e->n_layer; l++) {
        layer_w *w = &e->layers[l];
        w->op_norm = bump_take(b, n * f);
        w->ffn_norm = bump_take(b, n * f);
        w->w13 = bump_take(b, 2 * (size_t)e->ff * n * bf);
        w->w2 = bump_take(b, n * (size_t)e->ff * bf);
        if (w->conv) {
            w->in_proj = bump_take(b, 3 * n * n * bf);
            w->out_proj = bump_take(b, n * n * bf);
            w->conv_kernel = bump_take(b, n * (size_t)e->L * f);
            if (e->cfg.conv_bias) {
                w->in_bias = bump_take(b, 3 * n * f);
                w->conv_bias = bump_take(b, n * f);
                w->out_bias = bump_take(b, n * f);
            }
        } else {
            w->wqkv = bump_take(b, (size_t)e->qkv_dim * n * bf);
            w->wo = bump_take(b, n * (size_t)e->q_dim * bf);
            w->q_norm = bump_take(b, (size_t)e->hd * f);
            w->k_norm = bump_take(b, (size_t)e->hd * f);
        }
    }
}

/* Host staging for uploads. */
typedef struct uploader {
    lc_engine *e;
    const sy_safetensors *st;
    void *staging;
    uint64_t seed; /* synthetic weights */
    uint32_t tensor_index;
    char *err;
    size_t err_size;
} uploader;

/* Converts count elements of a checkpoint tensor (from element `from`) to BF16 or F32 at dst, piece by piece. */
static bool upload_elems(uploader *u, const sy_safetensors_tensor *t, uint64_t from, uint64_t count, void *dst,
                         bool to_bf16) {
    const size_t out_size = to_bf16 ? 2 : 4;
    const size_t piece = STAGING_BYTES / 4;
    for (uint64_t done = 0; done < count;) {
        size_t m = count - done < piece ? (size_t)(count - done) : piece;
        uint64_t at = from + done;
        float *tmp = u->staging; /* F32 first, then narrowed in place when BF16 is wanted */
        if (t->dtype == SY_DTYPE_F32) {
            memcpy(tmp, (const float *)t->data + at, m * sizeof(float));
        } else if (t->dtype == SY_DTYPE_BF16) {
            if (to_bf16) {
                memcpy(tmp, (const uint16_t *)t->data + at, m * 2);
                goto copy;
            }
            sy_bf16_to_f32_row((const uint16_t *)t->data + at, tmp, m);
        } else if (t->dtype == SY_DTYPE_F16) {
            sy_f16_to_f32_row((const uint16_t *)t->data + at, tmp, m);
        } else {
            sy_errmsg(u->err, u->err_size, "tensor %s: dtype %s is not supported", t->name, t->dtype_name);
            return false;
        }
        if (to_bf16) sy_f32_to_bf16_row(tmp, (uint16_t *)tmp, m); /* in place: writes trail the reads */
    copy:
        if (!ck(cudaMemcpy((char *)dst + done * out_size, tmp, m * out_size, cudaMemcpyHostToDevice), "cudaMemcpy",
                u->err, u->err_size))
            return false;
        done += m;
    }
    return true;
}

/* One tensor (by HF name, exact shape) into dst, converted; synthetic values when there is no checkpoint. */
static bool upload(uploader *u, const char *name, uint32_t n_dims, const uint64_t *shape, void *dst, bool to_bf16,
                   float lo, float hi) {
    u->tensor_index++;
    uint64_t count = 1;
    for (uint32_t i = 0; i < n_dims; i++) count *= shape[i];
    if (u->st == NULL) { /* synthetic: seeded uniform values */
        uint64_t seed = u->seed * 0x9E3779B97F4A7C15ull + u->tensor_index;
        cudaError_t r = to_bf16 ? lc_fill_uniform_bf16(u->e->stream, dst, count, seed, lo, hi)
                                : lc_fill_uniform_f32(u->e->stream, dst, count, seed, lo, hi);
        return ck(r, "filling synthetic weights", u->err, u->err_size);
    }
    const sy_safetensors_tensor *t = sy_safetensors_require_shape(u->st, name, n_dims, shape, u->err, u->err_size);
    return t != NULL && upload_elems(u, t, 0, count, dst, to_bf16);
}

/* Rows [row0, row0 + rows) of a concatenated matrix from one checkpoint tensor of shape [rows][cols]. */
static bool upload_rows(uploader *u, const char *name, uint64_t rows, uint64_t cols, lc_bf16 *dst, uint64_t row0,
                        float scale) {
    uint64_t shape[2] = {rows, cols};
    return upload(u, name, 2, shape, dst + row0 * cols, true, -scale, scale);
}

static bool load_weights(lc_engine *e, const sy_safetensors *st, char *err, size_t err_size) {
    uploader u = {e, st, NULL, e->opt.synthetic_seed, 0, err, err_size};
    if (st) {
        u.staging = malloc(STAGING_BYTES);
        if (u.staging == NULL) {
            sy_errmsg(err, err_size, "out of host memory for the upload buffer");
            return false;
        }
    }
    const uint64_t n = (uint64_t)e->n, ff = (uint64_t)e->ff, hd = (uint64_t)e->hd;
    /* synthetic value ranges: matrices uniform in ±√(3/in) (unit variance of outputs), norms near 1 */
    const float s_n = sqrtf(3.0f / (float)e->n), s_ff = sqrtf(3.0f / (float)e->ff),
                s_q = sqrtf(3.0f / (float)e->q_dim);
    char name[160];
    bool ok = true;
    uint64_t embd_shape[2] = {(uint64_t)e->vocab, n}, vec_n[1] = {n}, vec_hd[1] = {hd};
    /* the checkpoint's names (tensor_names.h) */
#define NAME(role, layer) (sy_tensor_name(SY_TENSORS_HF_LFM2, role, (uint32_t)(layer), name, sizeof name), name)
    ok = ok && upload(&u, NAME(SY_TENSOR_TOKEN_EMBD, 0), 2, embd_shape, e->embed, true, -1.0f, 1.0f);
    if (!e->cfg.tie_word_embeddings)
        ok = ok && upload(&u, NAME(SY_TENSOR_OUTPUT, 0), 2, embd_shape, e->lm_head, true, -s_n, s_n);
    ok = ok && upload(&u, NAME(SY_TENSOR_TOKEN_EMBD_NORM, 0), 1, vec_n, e->final_norm, false, 0.9f, 1.1f);
    for (int32_t l = 0; ok && l < e->n_layer; l++) {
        const layer_w *w = &e->layers[l];
        ok = upload(&u, NAME(SY_TENSOR_ATTN_NORM, l), 1, vec_n, w->op_norm, false, 0.9f, 1.1f) &&
             upload(&u, NAME(SY_TENSOR_FFN_NORM, l), 1, vec_n, w->ffn_norm, false, 0.9f, 1.1f) &&
             upload_rows(&u, NAME(SY_TENSOR_FFN_GATE, l), ff, n, w->w13, 0, s_n) &&
             upload_rows(&u, NAME(SY_TENSOR_FFN_UP, l), ff, n, w->w13, ff, s_n) &&
             upload_rows(&u, NAME(SY_TENSOR_FFN_DOWN, l), n, ff, w->w2, 0, s_ff);
        if (!ok) break;
        if (w->conv) {
            uint64_t taps[3] = {n, 1, (uint64_t)e->L}, vec_3n[1] = {3 * n};
            ok = upload_rows(&u, NAME(SY_TENSOR_CONV_IN, l), 3 * n, n, w->in_proj, 0, s_n) &&
                 upload_rows(&u, NAME(SY_TENSOR_CONV_OUT, l), n, n, w->out_proj, 0, s_n) &&
                 upload(&u, NAME(SY_TENSOR_CONV_KERNEL, l), 3, taps, w->conv_kernel, false, -0.5f, 0.5f);
            if (ok && e->cfg.conv_bias)
                ok = upload(&u, NAME(SY_TENSOR_CONV_IN_BIAS, l), 1, vec_3n, w->in_bias, false, -0.1f, 0.1f) &&
                     upload(&u, NAME(SY_TENSOR_CONV_KERNEL_BIAS, l), 1, vec_n, w->conv_bias, false, -0.1f, 0.1f) &&
                     upload(&u, NAME(SY_TENSOR_CONV_OUT_BIAS, l), 1, vec_n, w->out_bias, false, -0.1f, 0.1f);
        } else {
            uint64_t q_rows = (uint64_t)e->q_dim, kv_rows = (uint64_t)e->n_kv * hd;
            ok = upload_rows(&u, NAME(SY_TENSOR_ATTN_Q, l), q_rows, n, w->wqkv, 0, s_n) &&
                 upload_rows(&u, NAME(SY_TENSOR_ATTN_K, l), kv_rows, n, w->wqkv, q_rows, s_n) &&
                 upload_rows(&u, NAME(SY_TENSOR_ATTN_V, l), kv_rows, n, w->wqkv, q_rows + kv_rows, s_n) &&
                 upload_rows(&u, NAME(SY_TENSOR_ATTN_OUTPUT, l), n, q_rows, w->wo, 0, s_q) &&
                 upload(&u, NAME(SY_TENSOR_ATTN_Q_NORM, l), 1, vec_hd, w->q_norm, false, 0.9f, 1.1f) &&
                 upload(&u, NAME(SY_TENSOR_ATTN_K_NORM, l), 1, vec_hd, w->k_norm, false, 0.9f, 1.1f);
        }
    }
#undef NAME
    free(u.staging);
    if (!ok) return false;

    /* RoPE inverse frequencies (double, then F32), divided by a linear scaling factor */
    float inv[LC_MAX_HEAD_DIM / 2];
    double scale = e->cfg.rope.type == SY_HF_ROPE_LINEAR ? e->cfg.rope.factor : 1.0;
    for (int32_t i = 0; i < e->hd / 2; i++)
        inv[i] = (float)(1.0 / pow(e->cfg.rope.theta, 2.0 * i / (double)e->hd) / scale);
    return ck(cudaMemcpy(e->inv_freq, inv, (size_t)(e->hd / 2) * sizeof(float), cudaMemcpyHostToDevice),
              "cudaMemcpy", err, err_size) &&
           ck(cudaStreamSynchronize(e->stream), "uploading weights", err, err_size);
}

/* ---- creating ---- */

static sy_status check_config(lc_engine *e, char *err, size_t err_size) {
    const sy_hf_config *c = &e->cfg;
    if (c->arch != SY_HF_ARCH_LFM2) {
        sy_errmsg(err, err_size, "model_type %s is not lfm2", c->model_type);
        return SY_ERR_UNSUPPORTED;
    }
    e->n = (int32_t)c->hidden_size;
    e->n_layer = (int32_t)c->num_hidden_layers;
    e->n_head = (int32_t)c->num_attention_heads;
    e->n_kv = (int32_t)c->num_key_value_heads;
    e->hd = (int32_t)c->head_dim;
    e->ff = (int32_t)c->lfm2_ff_dim;
    e->vocab = (int32_t)c->vocab_size;
    e->L = (int32_t)c->conv_l_cache;
    e->eps = (float)c->rms_norm_eps;
    e->ring = LC_ROLLBACK + e->L - 1;
    e->q_dim = e->n_head * e->hd;
    e->qkv_dim = (e->n_head + 2 * e->n_kv) * e->hd;
    e->group = e->n_kv > 0 ? e->n_head / e->n_kv : 0;
    if (e->hd < 2 || e->hd > LC_MAX_HEAD_DIM || e->hd % 2 != 0) {
        sy_errmsg(err, err_size, "head_dim %d: lfm2-cuda runs even head sizes up to %d", e->hd, LC_MAX_HEAD_DIM);
        return SY_ERR_UNSUPPORTED;
    }
    if (e->n_kv <= 0 || e->n_head % e->n_kv != 0 || e->group > LC_ATTN_QUERIES) {
        sy_errmsg(err, err_size, "%d query heads over %d KV heads: groups of at most %d are supported", e->n_head,
                  e->n_kv, LC_ATTN_QUERIES);
        return SY_ERR_UNSUPPORTED;
    }
    if (e->L < 2 || e->L > LC_MAX_CONV_KERNEL) {
        sy_errmsg(err, err_size, "conv_L_cache %d: lfm2-cuda runs widths 2 to %d", e->L, LC_MAX_CONV_KERNEL);
        return SY_ERR_UNSUPPORTED;
    }
    if (c->rope.type != SY_HF_ROPE_DEFAULT && c->rope.type != SY_HF_ROPE_LINEAR) {
        sy_errmsg(err, err_size, "rope scaling of this config is not supported by lfm2-cuda (default and linear are)");
        return SY_ERR_UNSUPPORTED;
    }
    for (int32_t l = 0; l < e->n_layer; l++) {
        if (c->layer_types[l] == SY_HF_LAYER_CONV) e->n_conv++;
        else e->n_attn++;
    }
    if (e->n_attn == 0) {
        sy_errmsg(err, err_size, "the config has no attention layer");
        return SY_ERR_UNSUPPORTED;
    }
    return SY_OK;
}

static void resolve_options(lc_engine *e) {
    lc_options *o = &e->opt;
    uint32_t train = e->cfg.max_position_embeddings ? e->cfg.max_position_embeddings : 4096;
    if (o->n_ctx == 0) o->n_ctx = train < 32768 ? train : 32768;
    if (o->max_sequences == 0) o->max_sequences = 64;
    if (o->max_batch_tokens == 0) o->max_batch_tokens = 512;
    e->max_blocks = (int32_t)((o->n_ctx + LC_KV_BLOCK - 1) / LC_KV_BLOCK);
    /* split-K for decode: splits of at least 256 keys, at most 64 of them */
    uint32_t keys = (o->n_ctx + 63) / 64;
    keys = (keys + LC_ATTN_KEYS - 1) / LC_ATTN_KEYS * LC_ATTN_KEYS;
    e->split_keys = (int32_t)(keys < 256 ? 256 : keys);
    e->max_splits = (int32_t)((o->n_ctx + (uint32_t)e->split_keys - 1) / (uint32_t)e->split_keys);
    int32_t T = (int32_t)o->max_batch_tokens;
    int32_t split_tasks = 2 * LC_SPLIT_ROWS * e->max_splits;
    e->max_tasks = 2 * T > split_tasks ? 2 * T : split_tasks;
}

/* Lays out the state allocation (conv rings, scratch, metadata); base NULL only sizes it. */
static size_t layout_state(lc_engine *e, char *base) {
    bump b = {base, 0};
    const size_t T = e->opt.max_batch_tokens, n = (size_t)e->n, S = e->opt.max_sequences;
    size_t ring_floats = (size_t)e->n_conv * (size_t)e->ring * n;
    e->conv.committed = bump_take(&b, S * ring_floats * sizeof(float));
    e->conv.work = bump_take(&b, S * ring_floats * sizeof(float));
    e->conv.slot_stride = ring_floats;
    e->conv.ring = e->ring;
    e->conv.n_embd = e->n;
    size_t widest = 3 * n;
    if ((size_t)e->qkv_dim > widest) widest = (size_t)e->qkv_dim;
    if (2 * (size_t)e->ff > widest) widest = 2 * (size_t)e->ff;
    size_t act = n;
    if ((size_t)e->q_dim > act) act = (size_t)e->q_dim;
    if ((size_t)e->ff > act) act = (size_t)e->ff;
    e->x = bump_take(&b, T * n * sizeof(float));
    e->big = bump_take(&b, T * widest * sizeof(float));
    e->delta = bump_take(&b, T * n * sizeof(float));
    e->u = bump_take(&b, T * n * sizeof(float));
    e->q = bump_take(&b, T * (size_t)e->q_dim * sizeof(float));
    e->logits = bump_take(&b, (size_t)LC_LOGIT_ROWS * (size_t)e->vocab * sizeof(float));
    e->partial = bump_take(&b, (size_t)LC_SPLIT_ROWS * (size_t)e->n_head * (size_t)e->max_splits *
                                   (size_t)(e->hd + 2) * sizeof(float));
    e->xn = bump_take(&b, T * n * sizeof(lc_bf16));
    e->act = bump_take(&b, T * act * sizeof(lc_bf16));
    e->xsel = bump_take(&b, T * n * sizeof(lc_bf16));
    e->argmax_dev = bump_take(&b, T * sizeof(int32_t));
    e->workspace = bump_take(&b, WORKSPACE_BYTES);
    e->meta_bytes = 8 * T * sizeof(int32_t) + (size_t)e->max_tasks * sizeof(lc_attn_task);
    e->meta_dev = bump_take(&b, e->meta_bytes);
    e->small_dev = bump_take(&b, 5 * S * sizeof(int32_t));
    e->pools_dev = bump_take(&b, 2 * (size_t)e->n_attn * sizeof(lc_bf16 *));
    e->page_dev = bump_take(&b, S * (size_t)e->max_blocks * sizeof(int32_t));
    return b.used;
}

/* KV blocks (block_bytes set) for the options within the device's free memory. */
static uint64_t kv_blocks(const lc_engine *e, uint64_t free_b) {
    const uint64_t S = e->opt.max_sequences;
    uint64_t want = e->opt.kv_cache_bytes ? e->opt.kv_cache_bytes
                                          : (S * (uint64_t)e->max_blocks + S) * e->block_bytes;
    uint64_t room = free_b > KV_RESERVE_BYTES ? free_b - KV_RESERVE_BYTES : 0;
    if (want > room) want = room;
    uint64_t blocks = want / e->block_bytes;
    return blocks > INT32_MAX - 1 ? INT32_MAX - 1 : blocks;
}

/* Host memory of an engine (layout_state run, n_blocks set): the pinned buffers of create and its tables. */
static uint64_t host_bytes(const lc_engine *e) {
    const uint64_t S = e->opt.max_sequences, T = e->opt.max_batch_tokens;
    uint64_t pinned = 2ull * e->meta_bytes + 5 * S * sizeof(int32_t) + T * sizeof(int32_t) +
                      S * (uint64_t)e->max_blocks * sizeof(int32_t);
    uint64_t tables = (uint64_t)e->n_layer * sizeof(layer_w) + S * (sizeof(seq_state) + sizeof(uint32_t)) +
                      2ull * (uint64_t)e->n_attn * sizeof(lc_bf16 *) +
                      (uint64_t)e->n_blocks * (sizeof(uint32_t) + sizeof(int32_t));
    return sizeof *e + pinned + tables;
}

sy_status lc_engine_estimate(const sy_hf_config *cfg, const lc_options *opt, lc_estimate *out, char *err,
                             size_t err_size) {
    memset(out, 0, sizeof *out);
    int count = 0;
    cudaError_t ce = cudaGetDeviceCount(&count);
    if (ce != cudaSuccess || count == 0) {
        sy_errmsg(err, err_size, "no CUDA device (%s)",
                  ce != cudaSuccess ? cudaGetErrorString(ce) : "the driver reports none");
        cudaGetLastError();
        return SY_ERR_NO_DEVICE;
    }
    if (opt->device < 0 || opt->device >= count) {
        sy_errmsg(err, err_size, "device %d: there are %d CUDA devices", opt->device, count);
        return SY_ERR_INVALID_ARGUMENT;
    }
    /* The sizes lc_engine_create computes, on an engine that allocates nothing; the KV takes what it asks for
     * within the device's free memory now, as the load will. */
    lc_engine *e = calloc(1, sizeof *e);
    if (e == NULL) {
        sy_errmsg(err, err_size, "out of memory");
        return SY_ERR_OUT_OF_MEMORY;
    }
    e->cfg = *cfg;
    e->opt = *opt;
    sy_status status = check_config(e, err, err_size);
    if (status == SY_OK) {
        resolve_options(e);
        e->layers = calloc((size_t)e->n_layer, sizeof *e->layers);
        if (e->layers == NULL) {
            sy_errmsg(err, err_size, "out of memory");
            status = SY_ERR_OUT_OF_MEMORY;
        }
    }
    size_t free_b = 0, total_b = 0;
    if (status == SY_OK && (!ck(cudaSetDevice(opt->device), "cudaSetDevice", err, err_size) ||
                            !ck(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo", err, err_size)))
        status = SY_ERR_NO_DEVICE;
    if (status == SY_OK) {
        for (int32_t l = 0; l < e->n_layer; l++) e->layers[l].conv = cfg->layer_types[l] == SY_HF_LAYER_CONV;
        bump sizing = {NULL, 0};
        layout_weights(e, &sizing);
        uint64_t state = layout_state(e, NULL);
        e->block_elems = (size_t)e->n_kv * LC_KV_BLOCK * (size_t)e->hd;
        e->block_bytes = 2ull * (uint64_t)e->n_attn * e->block_elems * sizeof(lc_bf16);
        uint64_t blocks = kv_blocks(e, free_b);
        e->n_blocks = (int32_t)blocks;
        out->device_bytes = sizing.used + state + blocks * e->block_bytes;
        out->host_bytes = host_bytes(e);
    }
    free(e->layers);
    free(e);
    return status;
}

const lc_options *lc_engine_options(const lc_engine *e) { return &e->opt; }
const char *lc_engine_device_name(const lc_engine *e) { return e->device_name; }

void lc_engine_memory(const lc_engine *e, lc_memory *out) {
    out->device_bytes = e->weights_bytes + e->state_bytes + e->kv_mem_bytes;
    out->kv_bytes = atomic_load(&((lc_engine *)e)->kv_used);
    out->weight_bytes = e->weight_bytes;
    out->host_bytes = host_bytes(e);
}

sy_status lc_engine_create(const sy_hf_config *cfg, const sy_safetensors *st, const lc_options *opt,
                           lc_engine **out, char *err, size_t err_size) {
    *out = NULL;
    int count = 0;
    cudaError_t ce = cudaGetDeviceCount(&count);
    if (ce != cudaSuccess || count == 0) {
        sy_errmsg(err, err_size, "no CUDA device (%s)",
                  ce != cudaSuccess ? cudaGetErrorString(ce) : "the driver reports none");
        cudaGetLastError(); /* clear the error so later calls in this process are not affected */
        return SY_ERR_NO_DEVICE;
    }
    if (opt->device < 0 || opt->device >= count) {
        sy_errmsg(err, err_size, "device %d: there are %d CUDA devices", opt->device, count);
        return SY_ERR_INVALID_ARGUMENT;
    }
    struct cudaDeviceProp prop;
    if (!ck(cudaSetDevice(opt->device), "cudaSetDevice", err, err_size) ||
        !ck(cudaGetDeviceProperties(&prop, opt->device), "cudaGetDeviceProperties", err, err_size))
        return SY_ERR_NO_DEVICE;
    if (prop.major < 9) {
        sy_errmsg(err, err_size, "%s has compute capability %d.%d; lfm2-cuda is built for 9.0 (Hopper) and newer",
                  prop.name, prop.major, prop.minor);
        return SY_ERR_NO_DEVICE;
    }

    lc_engine *e = calloc(1, sizeof *e);
    if (e == NULL) {
        sy_errmsg(err, err_size, "out of memory");
        return SY_ERR_OUT_OF_MEMORY;
    }
    e->cfg = *cfg;
    e->opt = *opt;
    e->graphs_off = !opt->cuda_graphs;
    snprintf(e->device_name, sizeof e->device_name, "%s", prop.name);
    sy_status status = check_config(e, err, err_size);
    if (status != SY_OK) goto fail;
    resolve_options(e);
    status = SY_ERR_INTERNAL;
    e->layers = calloc((size_t)e->n_layer, sizeof *e->layers);
    e->seqs = calloc(e->opt.max_sequences, sizeof *e->seqs);
    e->undo_blocks = calloc(e->opt.max_sequences, sizeof *e->undo_blocks);
    if (e->layers == NULL || e->seqs == NULL || e->undo_blocks == NULL) goto oom_host;
    for (int32_t l = 0, ci = 0, ai = 0; l < e->n_layer; l++) {
        e->layers[l].conv = cfg->layer_types[l] == SY_HF_LAYER_CONV;
        e->layers[l].index = e->layers[l].conv ? ci++ : ai++;
    }
    if (!ck(lc_kernels_init(), "setting kernel attributes", err, err_size) ||
        !ck(cudaStreamCreateWithFlags(&e->stream, cudaStreamNonBlocking), "cudaStreamCreate", err, err_size) ||
        !ck(cudaEventCreateWithFlags(&e->meta_done[0], cudaEventDisableTiming), "cudaEventCreate", err, err_size) ||
        !ck(cudaEventCreateWithFlags(&e->meta_done[1], cudaEventDisableTiming), "cudaEventCreate", err, err_size))
        goto fail;

    /* weights */
    bump sizing = {NULL, 0};
    layout_weights(e, &sizing);
    e->weights_bytes = sizing.used;
    if (!ck(cudaMalloc(&e->weights_mem, e->weights_bytes), "cudaMalloc (weights)", err, err_size)) goto oom_dev;
    bump placing = {e->weights_mem, 0};
    layout_weights(e, &placing);
    for (int32_t l = 0; l < e->n_layer; l++) {
        const layer_w *w = &e->layers[l];
        e->weight_bytes += 2ull * 3 * (uint64_t)e->ff * (uint64_t)e->n;
        e->weight_bytes += w->conv ? 2ull * 4 * (uint64_t)e->n * (uint64_t)e->n
                                   : 2ull * ((uint64_t)e->qkv_dim + (uint64_t)e->q_dim) * (uint64_t)e->n;
    }
    e->weight_bytes += 2ull * (uint64_t)e->vocab * (uint64_t)e->n * (cfg->tie_word_embeddings ? 1 : 2);
    if (!load_weights(e, st, err, err_size)) goto fail;

    /* conv state, scratch, metadata */
    e->state_bytes = layout_state(e, NULL);
    if (!ck(cudaMalloc(&e->state_mem, e->state_bytes), "cudaMalloc (state and scratch)", err, err_size))
        goto oom_dev;
    layout_state(e, e->state_mem);
    const size_t S = e->opt.max_sequences, T = e->opt.max_batch_tokens;
    if (!ck(cudaMallocHost((void **)&e->meta_host[0], e->meta_bytes), "cudaMallocHost", err, err_size) ||
        !ck(cudaMallocHost((void **)&e->meta_host[1], e->meta_bytes), "cudaMallocHost", err, err_size) ||
        !ck(cudaMallocHost((void **)&e->small_host, 5 * S * sizeof(int32_t)), "cudaMallocHost", err, err_size) ||
        !ck(cudaMallocHost((void **)&e->argmax_host, T * sizeof(int32_t)), "cudaMallocHost", err, err_size) ||
        !ck(cudaMallocHost((void **)&e->page_host, S * (size_t)e->max_blocks * sizeof(int32_t)), "cudaMallocHost",
            err, err_size))
        goto oom_dev;
    memset(e->page_host, 0, S * (size_t)e->max_blocks * sizeof(int32_t));
    e->gemm = lc_gemm_create(e->workspace, WORKSPACE_BYTES, err, err_size);
    if (e->gemm == NULL) goto fail;

    /* KV blocks: what was asked for, or all sequences at full context, within the free memory */
    e->block_elems = (size_t)e->n_kv * LC_KV_BLOCK * (size_t)e->hd;
    e->block_bytes = 2ull * (uint64_t)e->n_attn * e->block_elems * sizeof(lc_bf16);
    size_t free_b = 0, total_b = 0;
    if (!ck(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo", err, err_size)) goto fail;
    uint64_t blocks = kv_blocks(e, free_b);
    if (blocks < (uint64_t)e->max_blocks + 1) {
        sy_errmsg(err, err_size,
                  "device memory: room for %llu KV positions, one sequence of %u needs more (lower ctx_size)",
                  (unsigned long long)(blocks * LC_KV_BLOCK), e->opt.n_ctx);
        status = SY_ERR_OUT_OF_MEMORY;
        goto fail;
    }
    e->n_blocks = (int32_t)blocks;
    e->kv_mem_bytes = (size_t)blocks * e->block_bytes;
    if (!ck(cudaMalloc(&e->kv_mem, e->kv_mem_bytes), "cudaMalloc (KV cache)", err, err_size)) goto oom_dev;
    e->pools_host = calloc(2 * (size_t)e->n_attn, sizeof *e->pools_host);
    e->block_ref = calloc((size_t)e->n_blocks, sizeof *e->block_ref);
    e->free_blocks = calloc((size_t)e->n_blocks, sizeof *e->free_blocks);
    if (e->pools_host == NULL || e->block_ref == NULL || e->free_blocks == NULL) goto oom_host;
    for (int32_t p = 0; p < 2 * e->n_attn; p++)
        e->pools_host[p] = (lc_bf16 *)e->kv_mem + (size_t)p * (size_t)e->n_blocks * e->block_elems;
    for (int32_t b = 0; b < e->n_blocks; b++) e->free_blocks[b] = e->n_blocks - 1 - b; /* block 0 first */
    e->n_free = e->n_blocks;
    if (!ck(cudaMemcpy(e->pools_dev, e->pools_host, 2 * (size_t)e->n_attn * sizeof(lc_bf16 *),
                       cudaMemcpyHostToDevice),
            "cudaMemcpy", err, err_size) ||
        !ck(cudaMemset(e->page_dev, 0, S * (size_t)e->max_blocks * sizeof(int32_t)), "cudaMemset", err, err_size) ||
        /* the legacy stream's work (memset, copies) before any work on the non-blocking stream */
        !ck(cudaDeviceSynchronize(), "cudaDeviceSynchronize", err, err_size))
        goto fail;
    *out = e;
    return SY_OK;

oom_host:
    sy_errmsg(err, err_size, "out of host memory");
    status = SY_ERR_OUT_OF_MEMORY;
    goto fail;
oom_dev:
    status = SY_ERR_OUT_OF_MEMORY;
fail:
    lc_engine_destroy(e);
    return status;
}

void lc_engine_destroy(lc_engine *e) {
    if (e == NULL) return;
    cudaSetDevice(e->opt.device);
    if (e->stream) cudaStreamSynchronize(e->stream);
    lc_gemm_destroy(e->gemm);
    for (int mode = 0; mode < 2; mode++)
        for (int k = 0; k < LC_SPLIT_ROWS; k++)
            if (e->graphs[mode][k]) cudaGraphExecDestroy(e->graphs[mode][k]);
    for (int i = 0; i < 2; i++) {
        if (e->meta_host[i]) cudaFreeHost(e->meta_host[i]);
        if (e->meta_done[i]) cudaEventDestroy(e->meta_done[i]);
    }
    if (e->small_host) cudaFreeHost(e->small_host);
    if (e->argmax_host) cudaFreeHost(e->argmax_host);
    if (e->page_host) cudaFreeHost(e->page_host);
    if (e->state_host) cudaFreeHost(e->state_host);
    if (e->weights_mem) cudaFree(e->weights_mem);
    if (e->state_mem) cudaFree(e->state_mem);
    if (e->kv_mem) cudaFree(e->kv_mem);
    if (e->stream) cudaStreamDestroy(e->stream);
    free(e->pools_host);
    free(e->block_ref);
    free(e->free_blocks);
    free(e->layers);
    free(e->seqs);
    free(e->undo_blocks);
    free(e);
}

/* ---- KV blocks and sequences ---- */

static int32_t block_alloc(lc_engine *e) {
    if (e->n_free == 0) return -1;
    int32_t b = e->free_blocks[--e->n_free];
    e->block_ref[b] = 1;
    return b;
}

static void block_release(lc_engine *e, int32_t b) {
    if (--e->block_ref[b] == 0) e->free_blocks[e->n_free++] = b;
}

static uint64_t conv_slot_bytes(const lc_engine *e) { return 2ull * e->conv.slot_stride * sizeof(float); }

static void update_kv_used(lc_engine *e) {
    uint64_t live = 0;
    for (uint32_t s = 0; s < e->opt.max_sequences; s++) live += e->seqs[s].used;
    atomic_store(&e->kv_used,
                 (uint64_t)(e->n_blocks - e->n_free) * e->block_bytes + live * conv_slot_bytes(e));
}

static int32_t *page_row(lc_engine *e, int32_t slot) { return e->page_host + (size_t)slot * (size_t)e->max_blocks; }

static bool valid_slot(const lc_engine *e, int32_t slot) {
    return slot >= 0 && (uint32_t)slot < e->opt.max_sequences && e->seqs[slot].used;
}

sy_status lc_seq_create(lc_engine *e, int32_t *slot, char *err, size_t err_size) {
    for (uint32_t s = 0; s < e->opt.max_sequences; s++) {
        if (e->seqs[s].used) continue;
        e->seqs[s] = (seq_state){.used = true};
        *slot = (int32_t)s;
        update_kv_used(e);
        return SY_OK;
    }
    sy_errmsg(err, err_size, "all %u sequence slots are in use (option max_sequences)", e->opt.max_sequences);
    return SY_ERR_OUT_OF_MEMORY;
}

/* Releases the blocks of a sequence past its first keep. */
static void release_blocks(lc_engine *e, int32_t slot, uint32_t keep) {
    seq_state *s = &e->seqs[slot];
    int32_t *row = page_row(e, slot);
    for (uint32_t j = keep; j < s->n_blocks; j++) block_release(e, row[j]);
    if (keep < s->n_blocks) s->n_blocks = keep;
}

void lc_seq_free(lc_engine *e, int32_t slot) {
    if (!valid_slot(e, slot)) return;
    release_blocks(e, slot, 0);
    e->seqs[slot].used = false;
    update_kv_used(e);
}

uint32_t lc_seq_length(const lc_engine *e, int32_t slot) { return valid_slot(e, slot) ? e->seqs[slot].len : 0; }

/* The same rule as the CPU core (transformer_lfm2.c): the L-1 inputs before the new end must be held. */
static bool can_truncate(const lc_engine *e, const seq_state *s, uint32_t n) {
    if (n > s->len) return false;
    if (n == s->len || n == 0 || e->n_conv == 0) return true;
    uint32_t need_from = n >= (uint32_t)(e->L - 1) ? n - (uint32_t)(e->L - 1) : 0;
    return need_from >= s->len - s->held;
}

static void cut(lc_engine *e, int32_t slot, uint32_t n) {
    seq_state *s = &e->seqs[slot];
    uint32_t dropped = s->len - n;
    s->held = s->held > dropped ? s->held - dropped : 0;
    s->len = n;
    release_blocks(e, slot, (n + LC_KV_BLOCK - 1) / LC_KV_BLOCK);
}

sy_status lc_seq_truncate(lc_engine *e, int32_t slot, uint32_t n, char *err, size_t err_size) {
    if (!valid_slot(e, slot)) {
        sy_errmsg(err, err_size, "no such sequence");
        return SY_ERR_INVALID_ARGUMENT;
    }
    seq_state *s = &e->seqs[slot];
    if (n > s->len) {
        sy_errmsg(err, err_size, "%u is more than the %u tokens held", n, s->len);
        return SY_ERR_INVALID_ARGUMENT;
    }
    if (!can_truncate(e, s, n)) {
        sy_errmsg(err, err_size, "the recurrent state cannot roll back from %u to %u tokens", s->len, n);
        return SY_ERR_UNSUPPORTED;
    }
    cut(e, slot, n);
    update_kv_used(e);
    return SY_OK;
}

sy_status lc_seq_fork(lc_engine *e, int32_t src, uint32_t n, int32_t *dst, char *err, size_t err_size) {
    if (!valid_slot(e, src)) {
        sy_errmsg(err, err_size, "no such sequence");
        return SY_ERR_INVALID_ARGUMENT;
    }
    const seq_state *s = &e->seqs[src];
    if (n > s->len) {
        sy_errmsg(err, err_size, "%u is more than the %u tokens held", n, s->len);
        return SY_ERR_INVALID_ARGUMENT;
    }
    if (!can_truncate(e, s, n)) {
        sy_errmsg(err, err_size, "the recurrent state cannot roll back from %u to %u tokens", s->len, n);
        return SY_ERR_UNSUPPORTED;
    }
    if (!ck(cudaSetDevice(e->opt.device), "cudaSetDevice", err, err_size)) return SY_ERR_INTERNAL;
    int32_t d;
    sy_status st = lc_seq_create(e, &d, err, err_size);
    if (st != SY_OK) return st;
    /* share the KV blocks (a decode copies a shared block before writing into it), copy the conv state */
    uint32_t nb = (n + LC_KV_BLOCK - 1) / LC_KV_BLOCK;
    const int32_t *from = page_row(e, src);
    int32_t *to = page_row(e, d);
    for (uint32_t j = 0; j < nb; j++) {
        to[j] = from[j];
        e->block_ref[from[j]]++;
    }
    e->seqs[d].n_blocks = nb;
    e->seqs[d].len = s->len;
    e->seqs[d].held = s->held;
    size_t ring_bytes = e->conv.slot_stride * sizeof(float);
    bool ok = (ring_bytes == 0 ||
               ck(cudaMemcpyAsync(e->conv.committed + (size_t)d * e->conv.slot_stride,
                                  e->conv.committed + (size_t)src * e->conv.slot_stride, ring_bytes,
                                  cudaMemcpyDeviceToDevice, e->stream),
                  "cudaMemcpyAsync (conv state)", err, err_size)) &&
              (nb == 0 || ck(cudaMemcpyAsync(e->page_dev + (size_t)d * (size_t)e->max_blocks, to,
                                             nb * sizeof(int32_t), cudaMemcpyHostToDevice, e->stream),
                             "cudaMemcpyAsync (page table)", err, err_size)) &&
              ck(cudaStreamSynchronize(e->stream), "fork", err, err_size);
    if (!ok) {
        lc_seq_free(e, d);
        return SY_ERR_INTERNAL;
    }
    cut(e, d, n);
    update_kv_used(e);
    *dst = d;
    return SY_OK;
}

/* ---- decode ---- */

/* Metadata arrays of a chunk inside one meta buffer (host or device). */
typedef struct meta_view {
    int32_t *tokens, *pos, *slot, *first, *last, *len, *splits, *sel;
    lc_attn_task *tasks;
} meta_view;

static meta_view meta_at(const lc_engine *e, int32_t *base) {
    size_t T = e->opt.max_batch_tokens;
    meta_view v = {base,         base + T,     base + 2 * T, base + 3 * T, base + 4 * T,
                   base + 5 * T, base + 6 * T, base + 7 * T, (lc_attn_task *)(void *)(base + 8 * T)};
    return v;
}

/* One segment of a chunk: rows [row0, row0 + n) are tokens [t0, t0 + n) of item `item`. */
typedef struct segment {
    size_t item;
    uint32_t t0, n, row0;
} segment;

/* Attention tasks of a segment (see lc_attn_task); splits per row when the chunk is small enough for split-K.
 * -1 if they would pass max_tasks (which the sizing in resolve_options rules out; checked all the same). */
static int32_t add_tasks(const lc_engine *e, const segment *sg, uint32_t len, int32_t slot, bool split,
                         meta_view *h, int32_t n_tasks) {
    int32_t per_task = LC_ATTN_QUERIES / e->group;
    for (uint32_t r = 0; r < sg->n; r += (uint32_t)per_task) {
        if (n_tasks < 0 || n_tasks + e->max_splits > e->max_tasks) return -1;
        int32_t nr = (int32_t)(sg->n - r) < per_task ? (int32_t)(sg->n - r) : per_task;
        int32_t row0 = (int32_t)(sg->row0 + r), pos0 = (int32_t)(len + sg->t0 + r), k_end = pos0 + nr;
        int32_t n_split = split && k_end > e->split_keys ? (k_end + e->split_keys - 1) / e->split_keys : 0;
        for (int32_t i = 0; i < nr; i++) h->splits[row0 + i] = n_split;
        if (n_split == 0) {
            h->tasks[n_tasks++] = (lc_attn_task){row0, nr, slot, pos0, 0, k_end, -1, 0};
            continue;
        }
        for (int32_t s = 0; s < n_split; s++) {
            int32_t kb = s * e->split_keys, ke = kb + e->split_keys < k_end ? kb + e->split_keys : k_end;
            h->tasks[n_tasks++] = (lc_attn_task){row0, nr, slot, pos0, kb, ke, s, 0};
        }
    }
    return n_tasks;
}

#define GEMM(W, out, in, X, rows, Y)                                                                                 \
    do {                                                                                                             \
        if (!lc_gemm_bf16(e->gemm, e->stream, (W), (out), (in), (X), (rows), (Y), err, err_size))                    \
            return SY_ERR_INTERNAL;                                                                                  \
    } while (0)
#define CK(call, what)                                                                                               \
    do {                                                                                                             \
        if (!ck((call), (what), err, err_size)) return SY_ERR_INTERNAL;                                              \
    } while (0)

/* The layers over the chunk whose metadata is at meta_dev; x ends normalized by the final norm in xn. */
static sy_status run_layers(lc_engine *e, int32_t N, int32_t n_tasks, bool any_split, lc_cancel_fn cancel,
                            void *cancel_ctx, char *err, size_t err_size) {
    meta_view d = meta_at(e, e->meta_dev);
    lc_rows rows = {N, d.pos, d.slot, d.first, d.last, d.len};
    const int32_t n = e->n;
    CK(lc_embed(e->stream, e->embed, n, d.tokens, N, e->x), "lc_embed");
    const float *delta = NULL, *delta_bias = NULL;
    for (int32_t l = 0; l < e->n_layer; l++) {
        if (cancel && cancel(cancel_ctx)) {
            sy_errmsg(err, err_size, "cancelled");
            return SY_ERR_CANCELLED;
        }
        const layer_w *w = &e->layers[l];
        CK(lc_add_rmsnorm(e->stream, e->x, delta, delta_bias, w->op_norm, N, n, e->eps, e->xn), "lc_add_rmsnorm");
        if (w->conv) {
            GEMM(w->in_proj, 3 * n, n, e->xn, N, e->big);
            CK(lc_conv_input(e->stream, e->big, w->in_bias, N, n, e->u), "lc_conv_input");
            CK(lc_conv_apply(e->stream, rows, e->u, e->big, w->in_bias, w->conv_kernel, w->conv_bias, e->L, e->conv,
                             w->index, e->act),
               "lc_conv_apply");
            CK(lc_conv_store(e->stream, rows, e->u, e->conv, w->index), "lc_conv_store");
            GEMM(w->out_proj, n, n, e->act, N, e->delta);
            delta_bias = w->out_bias;
        } else {
            lc_kv_layer kv = {e->pools_host[2 * w->index], e->pools_host[2 * w->index + 1], e->page_dev,
                              e->max_blocks, e->n_kv, e->hd};
            GEMM(w->wqkv, e->qkv_dim, n, e->xn, N, e->big);
            CK(lc_qk_norm_rope_kv(e->stream, rows, e->big, e->n_head, w->q_norm, w->k_norm, e->eps, e->inv_freq,
                                  e->q, kv),
               "lc_qk_norm_rope_kv");
            CK(lc_attention(e->stream, d.tasks, n_tasks, e->group, 1.0f / sqrtf((float)e->hd), e->q, kv, e->act,
                            e->partial, e->max_splits),
               "lc_attention");
            if (any_split)
                CK(lc_attention_combine(e->stream, d.splits, N, e->n_head, e->hd, e->max_splits, e->partial, e->act),
                   "lc_attention_combine");
            GEMM(w->wo, n, e->q_dim, e->act, N, e->delta);
            delta_bias = NULL;
        }
        CK(lc_add_rmsnorm(e->stream, e->x, e->delta, delta_bias, w->ffn_norm, N, n, e->eps, e->xn),
           "lc_add_rmsnorm");
        GEMM(w->w13, 2 * e->ff, n, e->xn, N, e->big);
        CK(lc_swiglu(e->stream, e->big, N, e->ff, e->act), "lc_swiglu");
        GEMM(w->w2, n, e->ff, e->act, N, e->delta);
        delta = e->delta;
        delta_bias = NULL;
    }
    CK(lc_add_rmsnorm(e->stream, e->x, e->delta, NULL, e->final_norm, N, n, e->eps, e->xn), "lc_add_rmsnorm");
    return SY_OK;
}

/* Logits of the chunk's selected rows (sel[i]: where the i-th selected row's logits go, in row order),
 * LC_LOGIT_ROWS at a time: to host rows, or through the argmax into tokens_out. */
static sy_status emit_logits(lc_engine *e, int32_t N, const row_out *sel, int32_t n_sel, int32_t *tokens_out,
                             char *err, size_t err_size) {
    if (n_sel == 0) return SY_OK;
    meta_view d = meta_at(e, e->meta_dev);
    const lc_bf16 *src = e->xn;
    if (n_sel < N) {
        CK(lc_gather_rows(e->stream, e->xn, d.sel, n_sel, e->n, e->xsel), "lc_gather_rows");
        src = e->xsel;
    }
    const size_t V = (size_t)e->vocab;
    for (int32_t b0 = 0; b0 < n_sel; b0 += LC_LOGIT_ROWS) {
        int32_t nb = n_sel - b0 < LC_LOGIT_ROWS ? n_sel - b0 : LC_LOGIT_ROWS;
        GEMM(e->lm_head, e->vocab, e->n, src + (size_t)b0 * (size_t)e->n, nb, e->logits);
        if (tokens_out) {
            CK(lc_argmax(e->stream, e->logits, nb, e->vocab, e->argmax_dev + b0), "lc_argmax");
            continue;
        }
        /* one transfer per run of rows whose host destinations follow each other */
        for (int32_t i = 0; i < nb;) {
            float *dst = sel[b0 + i].logits;
            int32_t run = 1;
            while (i + run < nb && sel[b0 + i + run].logits == dst + (size_t)run * V) run++;
            CK(cudaMemcpyAsync(dst, e->logits + (size_t)i * V, (size_t)run * V * sizeof(float),
                               cudaMemcpyDeviceToHost, e->stream),
               "cudaMemcpyAsync (logits)");
            i += run;
        }
    }
    if (tokens_out) {
        CK(cudaMemcpyAsync(e->argmax_host, e->argmax_dev, (size_t)n_sel * sizeof(int32_t), cudaMemcpyDeviceToHost,
                           e->stream),
           "cudaMemcpyAsync (tokens)");
        CK(cudaStreamSynchronize(e->stream), "argmax");
        for (int32_t i = 0; i < n_sel; i++) tokens_out[sel[i].item] = e->argmax_host[i];
    }
    return SY_OK;
}

/* The device part of a pure decode step's output, for all N (<= LC_LOGIT_ROWS) rows: their logits, and in argmax
 * mode the argmax copied to argmax_host. Capturable in a graph (no host memory but pinned, no synchronization). */
static sy_status decode_tail(lc_engine *e, int32_t N, bool argmax, char *err, size_t err_size) {
    GEMM(e->lm_head, e->vocab, e->n, e->xn, N, e->logits);
    if (argmax) {
        CK(lc_argmax(e->stream, e->logits, N, e->vocab, e->argmax_dev), "lc_argmax");
        CK(cudaMemcpyAsync(e->argmax_host, e->argmax_dev, (size_t)N * sizeof(int32_t), cudaMemcpyDeviceToHost,
                           e->stream),
           "cudaMemcpyAsync (tokens)");
    }
    return SY_OK;
}

/* The host part after it: tokens out, or the logits rows to the items' buffers. */
static sy_status finish_tail(lc_engine *e, int32_t N, const row_out *sel, int32_t *tokens_out, char *err,
                             size_t err_size) {
    if (tokens_out) {
        CK(cudaStreamSynchronize(e->stream), "decode step");
        for (int32_t i = 0; i < N; i++) tokens_out[sel[i].item] = e->argmax_host[i];
        return SY_OK;
    }
    const size_t V = (size_t)e->vocab;
    for (int32_t i = 0; i < N;) {
        float *dst = sel[i].logits;
        int32_t run = 1;
        while (i + run < N && sel[i + run].logits == dst + (size_t)run * V) run++;
        CK(cudaMemcpyAsync(dst, e->logits + (size_t)i * V, (size_t)run * V * sizeof(float), cudaMemcpyDeviceToHost,
                           e->stream),
           "cudaMemcpyAsync (logits)");
        i += run;
    }
    return SY_OK;
}

/* A pure decode step of N rows whose metadata is on the device: through its CUDA graph when there is one; the
 * first time eagerly (so its GEMM shapes have their algorithms), the second time captured. Any failure to capture
 * or instantiate turns graphs off for this engine and runs the step eagerly. */
static sy_status run_pure_step(lc_engine *e, int32_t N, bool argmax, char *err, size_t err_size) {
    const int mode = argmax ? 1 : 0;
    const int32_t n_tasks = N * e->max_splits;
    cudaGraphExec_t *exec = &e->graphs[mode][N - 1];
    if (*exec) return ck(cudaGraphLaunch(*exec, e->stream), "cudaGraphLaunch", err, err_size) ? SY_OK : SY_ERR_INTERNAL;
    sy_status st;
    if (!e->graphs_off && e->warmed[mode][N - 1] &&
        cudaStreamBeginCapture(e->stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess) {
        cudaGraph_t graph = NULL;
        st = run_layers(e, N, n_tasks, true, NULL, NULL, err, err_size);
        if (st == SY_OK) st = decode_tail(e, N, argmax, err, err_size);
        cudaError_t ce = cudaStreamEndCapture(e->stream, &graph);
        if (st == SY_OK && ce == cudaSuccess) ce = cudaGraphInstantiate(exec, graph, 0);
        if (graph) cudaGraphDestroy(graph);
        if (st == SY_OK && ce == cudaSuccess)
            return ck(cudaGraphLaunch(*exec, e->stream), "cudaGraphLaunch", err, err_size) ? SY_OK : SY_ERR_INTERNAL;
        *exec = NULL;
        e->graphs_off = true; /* and run it eagerly below */
        cudaGetLastError();
    }
    e->warmed[mode][N - 1] = true;
    st = run_layers(e, N, n_tasks, true, NULL, NULL, err, err_size);
    return st == SY_OK ? decode_tail(e, N, argmax, err, err_size) : st;
}

bool lc_engine_graphs_active(const lc_engine *e) { return !e->graphs_off; }

static sy_status validate(lc_engine *e, const lc_item *items, size_t n_items, bool sampling, char *err,
                          size_t err_size) {
    if (n_items > e->opt.max_sequences) {
        sy_errmsg(err, err_size, "%zu items: more than the %u sequence slots", n_items, e->opt.max_sequences);
        return SY_ERR_INVALID_ARGUMENT;
    }
    for (size_t i = 0; i < n_items; i++) {
        const lc_item *it = &items[i];
        if (!valid_slot(e, it->slot) || (it->n_tokens > 0 && it->tokens == NULL) || it->n_logits > it->n_tokens ||
            (!sampling && it->n_logits > 0 && it->logits == NULL) || (sampling && it->n_logits != 1)) {
            sy_errmsg(err, err_size, "item %zu: bad sequence, tokens, logits buffer or n_logits", i);
            return SY_ERR_INVALID_ARGUMENT;
        }
        for (size_t j = 0; j < i; j++) {
            if (items[j].slot == it->slot) {
                sy_errmsg(err, err_size, "item %zu: the sequence appears twice in the batch", i);
                return SY_ERR_INVALID_ARGUMENT;
            }
        }
        const seq_state *s = &e->seqs[it->slot];
        if ((uint64_t)s->len + it->n_tokens > e->opt.n_ctx) {
            sy_errmsg(err, err_size, "item %zu: %u + %u tokens exceed the context size %u", i, s->len, it->n_tokens,
                      e->opt.n_ctx);
            return SY_ERR_CONTEXT_FULL;
        }
        for (uint32_t t = 0; t < it->n_tokens; t++) {
            if (it->tokens[t] < 0 || it->tokens[t] >= e->vocab) {
                sy_errmsg(err, err_size, "item %zu: token id %d out of range (vocabulary %d)", i, it->tokens[t],
                          e->vocab);
                return SY_ERR_INVALID_ARGUMENT;
            }
        }
    }
    return SY_OK;
}

/* Gives every item the KV blocks its new tokens need, copying a shared block before it is written (the block
 * copies and page-table rows are enqueued even when it fails, so the table stays consistent). On failure the
 * blocks appended here are released again. undo_blocks[i] keeps item i's block count from before. */
static sy_status reserve_blocks(lc_engine *e, const lc_item *items, size_t n_items, char *err, size_t err_size) {
    int32_t *copy_src = e->small_host, *copy_dst = e->small_host + e->opt.max_sequences;
    int32_t n_copies = 0;
    size_t touched = 0;
    bool full = false;
    for (size_t i = 0; i < n_items && !full; i++) {
        const lc_item *it = &items[i];
        seq_state *s = &e->seqs[it->slot];
        int32_t *row = page_row(e, it->slot);
        e->undo_blocks[i] = s->n_blocks;
        touched = i + 1;
        if (it->n_tokens == 0) continue;
        uint32_t from = s->n_blocks;
        if (s->len % LC_KV_BLOCK != 0) { /* appending into a partly filled block: it must be ours alone */
            uint32_t j = s->len / LC_KV_BLOCK;
            int32_t old = row[j];
            if (e->block_ref[old] > 1) {
                int32_t b = block_alloc(e);
                if (b < 0) {
                    full = true;
                    break;
                }
                copy_src[n_copies] = old, copy_dst[n_copies++] = b;
                row[j] = b;
                block_release(e, old);
                from = j;
            }
        }
        uint32_t need = (s->len + it->n_tokens + LC_KV_BLOCK - 1) / LC_KV_BLOCK;
        for (uint32_t j = s->n_blocks; j < need && !full; j++) {
            int32_t b = block_alloc(e);
            if (b < 0) full = true;
            else row[j] = b, s->n_blocks = j + 1;
        }
        if (s->n_blocks > from &&
            !ck(cudaMemcpyAsync(e->page_dev + (size_t)it->slot * (size_t)e->max_blocks + from, row + from,
                                (s->n_blocks - from) * sizeof(int32_t), cudaMemcpyHostToDevice, e->stream),
                "cudaMemcpyAsync (page table)", err, err_size))
            return SY_ERR_INTERNAL;
    }
    if (n_copies > 0) {
        if (!ck(cudaMemcpyAsync(e->small_dev, e->small_host, 2 * e->opt.max_sequences * sizeof(int32_t),
                                cudaMemcpyHostToDevice, e->stream),
                "cudaMemcpyAsync (block copies)", err, err_size) ||
            !ck(lc_copy_kv_blocks(e->stream, e->pools_dev, 2 * e->n_attn, e->block_elems, e->small_dev,
                                  e->small_dev + e->opt.max_sequences, n_copies),
                "lc_copy_kv_blocks", err, err_size))
            return SY_ERR_INTERNAL;
    }
    if (full) {
        for (size_t i = 0; i < touched; i++) release_blocks(e, items[i].slot, e->undo_blocks[i]);
        sy_errmsg(err, err_size, "the KV cache is full (%d blocks of %d positions; option kv_cache_mb)", e->n_blocks,
                  LC_KV_BLOCK);
        return SY_ERR_OUT_OF_MEMORY;
    }
    return SY_OK;
}

sy_status lc_decode(lc_engine *e, const lc_item *items, size_t n_items, int32_t *tokens_out, lc_cancel_fn cancel,
                    void *cancel_ctx, char *err, size_t err_size) {
    sy_status st = validate(e, items, n_items, tokens_out != NULL, err, err_size);
    if (st != SY_OK) return st;
    if (!ck(cudaSetDevice(e->opt.device), "cudaSetDevice", err, err_size)) return SY_ERR_INTERNAL;
    st = reserve_blocks(e, items, n_items, err, err_size);
    if (st != SY_OK) {
        cudaStreamSynchronize(e->stream);
        return st;
    }

    const int32_t T = (int32_t)e->opt.max_batch_tokens;
    row_out *outs = calloc((size_t)T, sizeof *outs);
    segment *segs = calloc((size_t)T, sizeof *segs);
    if (outs == NULL || segs == NULL) {
        sy_errmsg(err, err_size, "out of host memory");
        st = SY_ERR_OUT_OF_MEMORY;
        goto done;
    }
    /* a pure decode step (every item one token and its logits) runs as one chunk, through a CUDA graph */
    bool pure = n_items >= 1 && n_items <= LC_SPLIT_ROWS && n_items <= (size_t)T;
    for (size_t i = 0; pure && i < n_items; i++) pure = items[i].n_tokens == 1 && items[i].n_logits == 1;
    size_t item = 0;
    uint32_t t = 0;
    while (item < n_items) {
        /* the next chunk: up to T rows, item after item */
        int32_t N = 0, n_segs = 0;
        while (N < T && item < n_items) {
            const lc_item *it = &items[item];
            if (t >= it->n_tokens) {
                item++, t = 0;
                continue;
            }
            uint32_t take = it->n_tokens - t < (uint32_t)(T - N) ? it->n_tokens - t : (uint32_t)(T - N);
            segs[n_segs++] = (segment){item, t, take, (uint32_t)N};
            N += (int32_t)take;
            t += take;
        }
        if (N == 0) break;

        int turn = e->meta_turn;
        e->meta_turn ^= 1;
        if (!ck(cudaEventSynchronize(e->meta_done[turn]), "cudaEventSynchronize", err, err_size)) {
            st = SY_ERR_INTERNAL;
            goto done;
        }
        meta_view h = meta_at(e, e->meta_host[turn]);
        bool split = N <= LC_SPLIT_ROWS;
        int32_t n_tasks = 0, n_sel = 0;
        bool any_split = false;
        for (int32_t si = 0; si < n_segs; si++) {
            const segment *sg = &segs[si];
            const lc_item *it = &items[sg->item];
            uint32_t len = e->seqs[it->slot].len;
            uint32_t first_logit = it->n_tokens - it->n_logits;
            for (uint32_t k = 0; k < sg->n; k++) {
                int32_t r = (int32_t)(sg->row0 + k);
                uint32_t tok = sg->t0 + k;
                h.tokens[r] = it->tokens[tok];
                h.pos[r] = (int32_t)(len + tok);
                h.slot[r] = it->slot;
                h.first[r] = (int32_t)(len + sg->t0);
                h.last[r] = (int32_t)(len + sg->t0 + sg->n - 1);
                h.len[r] = (int32_t)len;
                h.splits[r] = 0;
                if (tok >= first_logit) {
                    outs[n_sel] = (row_out){NULL, (int32_t)sg->item};
                    if (!tokens_out) outs[n_sel].logits = it->logits + (size_t)(tok - first_logit) * (size_t)e->vocab;
                    h.sel[n_sel++] = r;
                }
            }
            if (pure) { /* a fixed task list (empty key ranges do nothing), so one graph fits every step */
                int32_t r = (int32_t)sg->row0, pos = (int32_t)len;
                h.splits[r] = e->max_splits;
                for (int32_t k = 0; k < e->max_splits; k++) {
                    int32_t kb = k * e->split_keys, ke = kb + e->split_keys < pos + 1 ? kb + e->split_keys : pos + 1;
                    h.tasks[n_tasks++] = (lc_attn_task){r, 1, it->slot, pos, kb, ke, k, 0};
                }
            } else {
                n_tasks = add_tasks(e, sg, len, it->slot, split, &h, n_tasks);
            }
        }
        if (n_tasks < 0) {
            sy_errmsg(err, err_size, "internal: attention task list overflow");
            st = SY_ERR_INTERNAL;
            goto done;
        }
        for (int32_t r = 0; r < N; r++) any_split = any_split || h.splits[r] > 0;
        size_t T_ = (size_t)T;
        size_t bytes = 8 * T_ * sizeof(int32_t) + (size_t)n_tasks * sizeof(lc_attn_task);
        if (!ck(cudaMemcpyAsync(e->meta_dev, e->meta_host[turn], bytes, cudaMemcpyHostToDevice, e->stream),
                "cudaMemcpyAsync (chunk metadata)", err, err_size) ||
            !ck(cudaEventRecord(e->meta_done[turn], e->stream), "cudaEventRecord", err, err_size)) {
            st = SY_ERR_INTERNAL;
            goto done;
        }
        if (pure) {
            if (cancel && cancel(cancel_ctx)) {
                sy_errmsg(err, err_size, "cancelled");
                st = SY_ERR_CANCELLED;
                goto done;
            }
            st = run_pure_step(e, N, tokens_out != NULL, err, err_size);
            if (st == SY_OK) st = finish_tail(e, N, outs, tokens_out, err, err_size);
        } else {
            st = run_layers(e, N, n_tasks, any_split, cancel, cancel_ctx, err, err_size);
            if (st == SY_OK) st = emit_logits(e, N, outs, n_sel, tokens_out, err, err_size);
        }
        if (st != SY_OK) goto done;
    }

    /* commit: the conv inputs of the new positions become the state */
    int32_t *c_slot = e->small_host + 2 * e->opt.max_sequences, *c_len = c_slot + e->opt.max_sequences,
            *c_new = c_len + e->opt.max_sequences;
    int32_t n_commit = 0;
    for (size_t i = 0; i < n_items; i++) {
        if (items[i].n_tokens == 0) continue;
        c_slot[n_commit] = items[i].slot;
        c_len[n_commit] = (int32_t)e->seqs[items[i].slot].len;
        c_new[n_commit++] = (int32_t)items[i].n_tokens;
    }
    if (n_commit > 0 && e->n_conv > 0) {
        int32_t *d_slot = e->small_dev + 2 * e->opt.max_sequences;
        if (!ck(cudaMemcpyAsync(d_slot, c_slot, 3 * e->opt.max_sequences * sizeof(int32_t), cudaMemcpyHostToDevice,
                                e->stream),
                "cudaMemcpyAsync (commit)", err, err_size) ||
            !ck(lc_conv_commit(e->stream, d_slot, d_slot + e->opt.max_sequences,
                               d_slot + 2 * e->opt.max_sequences, n_commit, e->n_conv, e->conv),
                "lc_conv_commit", err, err_size)) {
            st = SY_ERR_INTERNAL;
            goto done;
        }
    }
    if (!ck(cudaStreamSynchronize(e->stream), "decode", err, err_size)) {
        st = SY_ERR_INTERNAL;
        goto done;
    }
    for (size_t i = 0; i < n_items; i++) {
        seq_state *s = &e->seqs[items[i].slot];
        s->len += items[i].n_tokens;
        uint32_t held = s->held + items[i].n_tokens;
        s->held = held > (uint32_t)e->ring ? (uint32_t)e->ring : held;
    }
    st = SY_OK;
done:
    if (st != SY_OK) {
        cudaStreamSynchronize(e->stream); /* nothing of this decode runs after it returns */
        for (size_t i = 0; i < n_items; i++) release_blocks(e, items[i].slot, e->undo_blocks[i]);
    }
    update_kv_used(e);
    free(outs);
    free(segs);
    return st;
}

/* ---- state (snapshots): see lfm2_cuda_engine.h for the chunk layout ---- */

void lc_state_shape_of(const lc_engine *e, lc_state_shape *out) {
    out->kv_bytes_per_token = 2ull * (uint64_t)e->n_attn * (uint64_t)e->n_kv * (uint64_t)e->hd * sizeof(lc_bf16);
    out->recurrent_bytes = (uint64_t)e->n_conv * (uint64_t)(e->L - 1) * (uint64_t)e->n * sizeof(float);
}

/* The pinned staging of state transfers, once: a group of whole KV blocks as they lie on the device (also used for
 * the conv state) and the same positions in chunk layout. A block of 16 positions is 16 positions' chunk bytes. */
static bool state_staging(lc_engine *e, char *err, size_t err_size) {
    if (e->state_host) return true;
    lc_state_shape sh;
    lc_state_shape_of(e, &sh);
    uint64_t group = STATE_STAGING_BYTES / e->block_bytes;
    if (group < 1) group = 1;
    if (group > (uint64_t)e->max_blocks) group = (uint64_t)e->max_blocks;
    uint64_t blocks_bytes = group * e->block_bytes;
    if (blocks_bytes < sh.recurrent_bytes) blocks_bytes = sh.recurrent_bytes;
    blocks_bytes = align_up((size_t)blocks_bytes);
    uint64_t chunk_bytes = group * LC_KV_BLOCK * sh.kv_bytes_per_token;
    void *p = NULL;
    if (!ck(cudaMallocHost(&p, (size_t)(blocks_bytes + chunk_bytes)), "cudaMallocHost (state staging)", err,
            err_size)) {
        cudaGetLastError(); /* reported in err; the next launch's check starts clean */
        return false;
    }
    e->state_host = p;
    e->state_blocks = e->state_host;
    e->state_chunk = e->state_host + blocks_bytes;
    e->state_group = (uint32_t)group;
    return true;
}

/* Positions [pb, pe) between chunk layout (chunk: [position][attention layer][K, V][kv head][hd]) and the staged
 * blocks of the group starting at the sequence's block jb (blocks: [block][pool][kv head][LC_KV_BLOCK][hd], pool
 * 2a K and 2a+1 V of attention layer a, as on the device). */
static void kv_transpose(const lc_engine *e, lc_bf16 *blocks, lc_bf16 *chunk, uint32_t jb, uint32_t pb, uint32_t pe,
                         bool to_chunk) {
    const size_t hd = (size_t)e->hd, n_kv = (size_t)e->n_kv, n_pools = 2 * (size_t)e->n_attn;
    const size_t per_position = n_pools * n_kv * hd;
    for (uint32_t p = pb; p < pe; p++) {
        const size_t blk = p / LC_KV_BLOCK - jb, o = p % LC_KV_BLOCK;
        lc_bf16 *row = chunk + (size_t)(p - pb) * per_position;
        for (size_t pool = 0; pool < n_pools; pool++) {
            for (size_t h = 0; h < n_kv; h++) {
                lc_bf16 *b = blocks + (blk * n_pools + pool) * e->block_elems + (h * LC_KV_BLOCK + o) * hd;
                lc_bf16 *c = row + (pool * n_kv + h) * hd;
                memcpy(to_chunk ? c : b, to_chunk ? b : c, hd * sizeof(lc_bf16));
            }
        }
    }
}

/* Block j of the staged group, pool `pool`. */
static lc_bf16 *staged_block(const lc_engine *e, uint32_t j, int32_t pool) {
    return (lc_bf16 *)(void *)e->state_blocks + ((size_t)j * 2 * (size_t)e->n_attn + (size_t)pool) * e->block_elems;
}

/* Device ring row of position p (>= 0) of conv layer c in a slot's committed state. */
static float *conv_row(const lc_engine *e, int32_t slot, int32_t c, uint32_t p) {
    return e->conv.committed + (size_t)slot * e->conv.slot_stride +
           ((size_t)c * (size_t)e->ring + p % (uint32_t)e->ring) * (size_t)e->n;
}

/* The conv inputs of positions [end - (L-1), end) are still in the ring (the CPU core's rule). */
static bool conv_state_held(const lc_engine *e, const seq_state *s, uint32_t end) {
    if (e->n_conv == 0) return true;
    uint32_t hist = (uint32_t)e->L - 1, need_from = end >= hist ? end - hist : 0;
    return need_from >= s->len - s->held;
}

sy_status lc_state_save(lc_engine *e, int32_t slot, uint32_t begin, uint32_t end, lc_state_write_fn write_fn,
                        void *ctx, char *err, size_t err_size) {
    if (!valid_slot(e, slot)) {
        sy_errmsg(err, err_size, "no such sequence");
        return SY_ERR_INVALID_ARGUMENT;
    }
    const seq_state *s = &e->seqs[slot];
    if (begin >= end || end > s->len) {
        sy_errmsg(err, err_size, "chunk [%u, %u) is not inside the %u tokens held", begin, end, s->len);
        return SY_ERR_INVALID_ARGUMENT;
    }
    if (!conv_state_held(e, s, end)) {
        sy_errmsg(err, err_size, "the conv state after %u of %u tokens is no longer held", end, s->len);
        return SY_ERR_UNSUPPORTED;
    }
    if (!ck(cudaSetDevice(e->opt.device), "cudaSetDevice", err, err_size)) return SY_ERR_INTERNAL;
    if (!state_staging(e, err, err_size)) return SY_ERR_OUT_OF_MEMORY;
    lc_state_shape sh;
    lc_state_shape_of(e, &sh);
    const int32_t *row = page_row(e, slot);
    const int32_t n_pools = 2 * e->n_attn;
    const size_t block_pool_bytes = e->block_elems * sizeof(lc_bf16);
    const uint32_t last_block = (end - 1) / LC_KV_BLOCK;
    if (last_block >= s->n_blocks) { /* every held position has its block; checked rather than trusted */
        sy_errmsg(err, err_size, "internal: position %u has no KV block (%u blocks)", end - 1, s->n_blocks);
        return SY_ERR_INTERNAL;
    }
    for (uint32_t jb = begin / LC_KV_BLOCK; jb <= last_block; jb += e->state_group) {
        uint32_t je = last_block + 1 - jb < e->state_group ? last_block + 1 : jb + e->state_group;
        for (uint32_t j = jb; j < je; j++)
            for (int32_t pool = 0; pool < n_pools; pool++)
                if (!ck(cudaMemcpyAsync(staged_block(e, j - jb, pool),
                                        e->pools_host[pool] + (size_t)row[j] * e->block_elems, block_pool_bytes,
                                        cudaMemcpyDeviceToHost, e->stream),
                        "cudaMemcpyAsync (KV block to the host)", err, err_size))
                    goto cuda_failed;
        /* the bytes are complete before the host sees them */
        if (!ck(cudaStreamSynchronize(e->stream), "state save (KV)", err, err_size)) goto cuda_failed;
        uint32_t pb = begin > jb * LC_KV_BLOCK ? begin : jb * LC_KV_BLOCK;
        uint32_t pe = end < je * LC_KV_BLOCK ? end : je * LC_KV_BLOCK;
        kv_transpose(e, (lc_bf16 *)(void *)e->state_blocks, (lc_bf16 *)(void *)e->state_chunk, jb, pb, pe, true);
        sy_status st = write_fn(ctx, e->state_chunk, (size_t)(pe - pb) * (size_t)sh.kv_bytes_per_token);
        if (st != SY_OK) {
            sy_errmsg(err, err_size, "the host's writer failed (status %d)", (int)st);
            return st;
        }
    }
    if (e->n_conv == 0) return SY_OK;
    const uint32_t hist = (uint32_t)e->L - 1;
    const size_t n = (size_t)e->n;
    float *conv = (float *)(void *)e->state_blocks;
    for (int32_t c = 0; c < e->n_conv; c++) {
        for (uint32_t j = 0; j < hist; j++) {
            float *dst = conv + ((size_t)c * hist + j) * n;
            if (end + j < hist) { /* before position 0 */
                memset(dst, 0, n * sizeof(float));
                continue;
            }
            if (!ck(cudaMemcpyAsync(dst, conv_row(e, slot, c, end + j - hist), n * sizeof(float),
                                    cudaMemcpyDeviceToHost, e->stream),
                    "cudaMemcpyAsync (conv state to the host)", err, err_size))
                goto cuda_failed;
        }
    }
    if (!ck(cudaStreamSynchronize(e->stream), "state save (conv state)", err, err_size)) goto cuda_failed;
    sy_status st = write_fn(ctx, conv, (size_t)sh.recurrent_bytes);
    if (st != SY_OK) sy_errmsg(err, err_size, "the host's writer failed (status %d)", (int)st);
    return st;

cuda_failed: /* the message is set; nothing of this call stays queued, and the next launch's check starts clean */
    cudaStreamSynchronize(e->stream);
    cudaGetLastError();
    return SY_ERR_INTERNAL;
}

/* Index of the first BF16 value that is Inf or NaN (all exponent bits set), or n. */
static size_t first_nonfinite_bf16(const lc_bf16 *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if ((x[i] & 0x7F80u) == 0x7F80u) return i;
    return n;
}

sy_status lc_state_load(lc_engine *e, int32_t slot, uint32_t begin, uint32_t end, lc_state_read_fn read_fn, void *ctx,
                        char *err, size_t err_size) {
    if (!valid_slot(e, slot)) {
        sy_errmsg(err, err_size, "no such sequence");
        return SY_ERR_INVALID_ARGUMENT;
    }
    seq_state *s = &e->seqs[slot];
    if (begin != s->len) {
        sy_errmsg(err, err_size, "the chunk begins at %u but the sequence holds %u tokens", begin, s->len);
        return SY_ERR_INVALID_ARGUMENT;
    }
    if (begin >= end) {
        sy_errmsg(err, err_size, "empty chunk [%u, %u)", begin, end);
        return SY_ERR_INVALID_ARGUMENT;
    }
    if (end > e->opt.n_ctx) {
        sy_errmsg(err, err_size, "the chunk [%u, %u) passes the context size %u", begin, end, e->opt.n_ctx);
        return SY_ERR_CONTEXT_FULL;
    }
    if (!ck(cudaSetDevice(e->opt.device), "cudaSetDevice", err, err_size)) return SY_ERR_INTERNAL;
    if (!state_staging(e, err, err_size)) return SY_ERR_OUT_OF_MEMORY;
    lc_state_shape sh;
    lc_state_shape_of(e, &sh);
    const int32_t n_pools = 2 * e->n_attn;
    const size_t block_pool_bytes = e->block_elems * sizeof(lc_bf16);
    sy_status st = SY_OK;

    /* blocks: the sequence's own (none past its tokens), a private copy of a shared, partly filled last block, and
     * new ones up to end; undone on failure */
    release_blocks(e, slot, (begin + LC_KV_BLOCK - 1) / LC_KV_BLOCK);
    int32_t *row = page_row(e, slot);
    const uint32_t old_blocks = s->n_blocks, need = (end + LC_KV_BLOCK - 1) / LC_KV_BLOCK;
    const uint32_t j0 = begin / LC_KV_BLOCK;
    int32_t shared_src = -1; /* the shared block whose positions before begin the copy at row[j0] starts from */
    uint32_t first_changed = old_blocks;
    if (begin % LC_KV_BLOCK != 0 && j0 < old_blocks && e->block_ref[row[j0]] > 1) {
        int32_t b = block_alloc(e);
        if (b < 0) goto full;
        shared_src = row[j0];
        row[j0] = b;
        first_changed = j0;
    }
    for (uint32_t j = old_blocks; j < need; j++) {
        int32_t b = block_alloc(e);
        if (b < 0) goto full;
        row[j] = b;
        s->n_blocks = j + 1;
    }

    /* KV, a group of blocks at a time: chunk bytes from the reader, checked, laid out as blocks, uploaded */
    for (uint32_t jb = j0; jb < need; jb += e->state_group) {
        uint32_t je = need - jb < e->state_group ? need : jb + e->state_group;
        uint32_t pb = begin > jb * LC_KV_BLOCK ? begin : jb * LC_KV_BLOCK;
        uint32_t pe = end < je * LC_KV_BLOCK ? end : je * LC_KV_BLOCK;
        if (jb * LC_KV_BLOCK < begin) { /* the partly filled block: its positions before begin stay as they are */
            int32_t src = shared_src >= 0 ? shared_src : row[jb];
            for (int32_t pool = 0; pool < n_pools; pool++)
                if (!ck(cudaMemcpyAsync(staged_block(e, 0, pool), e->pools_host[pool] + (size_t)src * e->block_elems,
                                        block_pool_bytes, cudaMemcpyDeviceToHost, e->stream),
                        "cudaMemcpyAsync (KV block to the host)", err, err_size)) {
                    st = SY_ERR_INTERNAL;
                    goto undo;
                }
            if (!ck(cudaStreamSynchronize(e->stream), "state load (partly filled block)", err, err_size)) {
                st = SY_ERR_INTERNAL;
                goto undo;
            }
        }
        size_t bytes = (size_t)(pe - pb) * (size_t)sh.kv_bytes_per_token;
        st = read_fn(ctx, e->state_chunk, bytes);
        if (st != SY_OK) {
            sy_errmsg(err, err_size, "the host's reader failed (status %d) at the KV of positions [%u, %u)", (int)st,
                      pb, pe);
            goto undo;
        }
        size_t bad = first_nonfinite_bf16((const lc_bf16 *)(const void *)e->state_chunk, bytes / sizeof(lc_bf16));
        if (bad < bytes / sizeof(lc_bf16)) {
            sy_errmsg(err, err_size, "a K/V value of position %llu is not finite",
                      (unsigned long long)(pb + bad / (sh.kv_bytes_per_token / sizeof(lc_bf16))));
            st = SY_ERR_INVALID_ARGUMENT;
            goto undo;
        }
        kv_transpose(e, (lc_bf16 *)(void *)e->state_blocks, (lc_bf16 *)(void *)e->state_chunk, jb, pb, pe, false);
        for (uint32_t j = jb; j < je; j++)
            for (int32_t pool = 0; pool < n_pools; pool++)
                if (!ck(cudaMemcpyAsync(e->pools_host[pool] + (size_t)row[j] * e->block_elems,
                                        staged_block(e, j - jb, pool), block_pool_bytes, cudaMemcpyHostToDevice,
                                        e->stream),
                        "cudaMemcpyAsync (KV block to the device)", err, err_size)) {
                    st = SY_ERR_INTERNAL;
                    goto undo;
                }
        /* the staging is free again before the next group is laid out in it */
        if (!ck(cudaStreamSynchronize(e->stream), "state load (KV)", err, err_size)) {
            st = SY_ERR_INTERNAL;
            goto undo;
        }
    }

    /* conv state: read and checked whole before any of it reaches the ring */
    if (e->n_conv > 0) {
        float *conv = (float *)(void *)e->state_blocks;
        const uint32_t hist = (uint32_t)e->L - 1;
        const size_t n = (size_t)e->n, n_floats = (size_t)sh.recurrent_bytes / sizeof(float);
        st = read_fn(ctx, conv, (size_t)sh.recurrent_bytes);
        if (st != SY_OK) {
            sy_errmsg(err, err_size, "the host's reader failed (status %d) at the conv state", (int)st);
            goto undo;
        }
        for (size_t i = 0; i < n_floats; i++) {
            if (!isfinite(conv[i])) {
                sy_errmsg(err, err_size, "conv state value %zu is not finite", i);
                st = SY_ERR_INVALID_ARGUMENT;
                goto undo;
            }
        }
        for (int32_t c = 0; c < e->n_conv; c++) {
            for (uint32_t j = 0; j < hist; j++) {
                if (end + j < hist) continue; /* before position 0: never read */
                if (!ck(cudaMemcpyAsync(conv_row(e, slot, c, end + j - hist), conv + ((size_t)c * hist + j) * n,
                                        n * sizeof(float), cudaMemcpyHostToDevice, e->stream),
                        "cudaMemcpyAsync (conv state to the device)", err, err_size)) {
                    st = SY_ERR_INTERNAL;
                    goto undo;
                }
            }
        }
    }
    /* the page table row from the first changed block on */
    if (need > first_changed &&
        !ck(cudaMemcpyAsync(e->page_dev + (size_t)slot * (size_t)e->max_blocks + first_changed, row + first_changed,
                            (need - first_changed) * sizeof(int32_t), cudaMemcpyHostToDevice, e->stream),
            "cudaMemcpyAsync (page table)", err, err_size)) {
        st = SY_ERR_INTERNAL;
        goto undo;
    }
    if (!ck(cudaStreamSynchronize(e->stream), "state load", err, err_size)) {
        st = SY_ERR_INTERNAL;
        goto undo;
    }
    if (shared_src >= 0) block_release(e, shared_src);
    s->len = end;
    /* only the conv inputs of the chunk's last L-1 positions are known */
    s->held = end < (uint32_t)e->L - 1 ? end : (uint32_t)e->L - 1;
    update_kv_used(e);
    return SY_OK;

full:
    sy_errmsg(err, err_size, "the KV cache is full (%d blocks of %d positions; option kv_cache_mb)", e->n_blocks,
              LC_KV_BLOCK);
    st = SY_ERR_OUT_OF_MEMORY;
undo:
    cudaStreamSynchronize(e->stream); /* nothing of this call runs after it returns (an error here is already set) */
    if (shared_src >= 0) {
        block_release(e, row[j0]);
        row[j0] = shared_src;
        /* in case the page table upload ran before a later step failed (its error, if any, is already set) */
        cudaMemcpy(e->page_dev + (size_t)slot * (size_t)e->max_blocks + j0, row + j0, sizeof(int32_t),
                   cudaMemcpyHostToDevice);
    }
    cudaGetLastError(); /* a CUDA failure is reported in err; the next launch's check starts clean */
    release_blocks(e, slot, old_blocks);
    update_kv_used(e);
    return st;
}
