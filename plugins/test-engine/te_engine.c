/* test-engine: the plugin entry, models, sequences and batched decode ("sy.engine/1"). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#include "te_internal.h"

#define TE_MODEL_MAGIC 0x54454d4fu /* "TEMO" */
#define TE_SEQ_MAGIC 0x54455351u   /* "TESQ" */
#define TE_MAX_BATCH_ITEMS 65536u

static const sy_host_api *te_host;
static _Thread_local char te_error_buf[512];

/* ------------------------------------------------------------------------------------------------------------
 * Errors, logging, cancellation */

const char *te_error_message(void) { return te_error_buf; }

sy_status te_fail(sy_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(te_error_buf, sizeof te_error_buf, fmt, ap);
    va_end(ap);
    return st;
}

void te_log(sy_log_level level, const char *fmt, ...) {
    const sy_host_api *host = te_host;
    if (!SY_HAS_FIELD(host, sy_host_api, log) || host->log == NULL) return;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    host->log(level, TE_PLUGIN_NAME, line);
}

int te_cancelled(const sy_host_call *call) {
    const sy_host_api *host = te_host;
    if (call == NULL || !SY_HAS_FIELD(host, sy_host_api, is_cancelled) || host->is_cancelled == NULL) return 0;
    return host->is_cancelled(call) != 0;
}

/* ------------------------------------------------------------------------------------------------------------
 * Probe and load */

/* ChatML, the template the control tokens are named after. */
static const char te_chat_template[] =
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

#if SY_ABI_TARGET_MINOR >= 2
/* A named template (ABI 1.2's n_chat_templates), which hosts choose for requests with tools: ChatML with the tools
 * listed in a system turn. */
static const char te_tool_use_template[] =
    "{%- if tools %}{{- '<|im_start|>system\\n# Tools: ' + (tools | map(attribute='function.name') | join(', ')) + "
    "'<|im_end|>\\n' }}{%- endif %}"
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + (message['content'] or '') + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";
static const char *const te_template_names[] = {"tool_use"};
static const char *const te_template_texts[] = {te_tool_use_template};
#endif

static sy_status te_probe(const char *path) {
    if (path == NULL) return te_fail(SY_ERR_INVALID_ARGUMENT, "probe: path is NULL");
    FILE *f = fopen(path, "rb");
    if (f == NULL) return te_fail(SY_ERR_UNSUPPORTED, "%s: cannot open: %s", path, strerror(errno));
    char head[sizeof TE_MAGIC_LINE + 1];
    size_t n = fread(head, 1, sizeof head, f);
    int read_failed = ferror(f);
    int saved_errno = errno;
    fclose(f);
    if (read_failed) return te_fail(SY_ERR_UNSUPPORTED, "%s: cannot read: %s", path, strerror(saved_errno));
    size_t magic_len = strlen(TE_MAGIC_LINE);
    int line_ends = n == magic_len || (n > magic_len && (head[magic_len] == '\n' || head[magic_len] == '\r'));
    if (n < magic_len || memcmp(head, TE_MAGIC_LINE, magic_len) != 0 || !line_ends)
        return te_fail(SY_ERR_UNSUPPORTED, "%s: not a test-engine model (first line is not '" TE_MAGIC_LINE "')",
                       path);
    return SY_OK;
}

/* Reads the whole (small) model file into buf; *len is its size. */
static sy_status te_read_model_file(const char *path, char *buf, size_t size, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) return te_fail(SY_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    size_t n = fread(buf, 1, size, f);
    int read_failed = ferror(f);
    int saved_errno = errno;
    fclose(f);
    if (read_failed) return te_fail(SY_ERR_IO, "%s: cannot read: %s", path, strerror(saved_errno));
    if (n == size) return te_fail(SY_ERR_FORMAT, "%s: too large for a test-engine model (limit %u bytes)", path,
                                  (unsigned)TE_MAX_FILE_BYTES - 1);
    *len = n;
    return SY_OK;
}

/* Hex of a 128-bit hash over the file and the settings that change the math. */
static void te_fingerprint(const char *file, size_t len, const te_config *cfg, char out[33]) {
    XXH128_hash_t file_hash = XXH3_128bits(file, len);
    XXH128_canonical_t canon;
    XXH128_canonicalFromHash(&canon, file_hash);
    char buf[sizeof canon.digest + 96];
    memcpy(buf, canon.digest, sizeof canon.digest);
    int n = snprintf(buf + sizeof canon.digest, sizeof buf - sizeof canon.digest, "recurrent=%u eos_one_in=%u",
                     (unsigned)cfg->recurrent, (unsigned)cfg->eos_one_in);
    XXH128_hash_t h = XXH3_128bits(buf, sizeof canon.digest + (size_t)(n > 0 ? n : 0));
    snprintf(out, 33, "%016llx%016llx", (unsigned long long)h.high64, (unsigned long long)h.low64);
}

static void te_free_seq_memory(sy_seq *seq);

/* The model file (into file, TE_MAX_FILE_BYTES, its length in *len) and the config it gives with the options. */
static sy_status te_read_config(const char *path, const sy_option *options, size_t n_options, char *file, size_t *len,
                                te_config *cfg_out) {
    te_config cfg;
    sy_status st = te_read_model_file(path, file, TE_MAX_FILE_BYTES, len);
    if (st == SY_OK) {
        st = te_config_parse_file(file, *len, &cfg);
        if (st != SY_OK) {
            char msg[sizeof te_error_buf];
            memcpy(msg, te_error_buf, sizeof msg);
            te_fail(st, "%s: %s", path, msg);
        }
    }
    for (size_t i = 0; st == SY_OK && i < n_options; i++) {
        if (options[i].key == NULL || options[i].value == NULL) {
            st = te_fail(SY_ERR_INVALID_ARGUMENT, "load: option %zu has a NULL key or value", i);
            break;
        }
        int known = 0;
        st = te_config_apply_option(&cfg, options[i].key, options[i].value, &known);
        if (st == SY_OK && !known) te_log(SY_LOG_DEBUG, "ignoring option %.64s", options[i].key);
    }
    if (st == SY_OK) *cfg_out = cfg;
    return st;
}

/* What a loaded model holds before any sequence: the model and its two token tables (te_math_init). */
static uint64_t te_resident_at_load(const te_config *cfg) {
    return sizeof(sy_model) + (uint64_t)cfg->n_vocab * (8 + sizeof(te_key_entry));
}

static sy_status te_load(const char *path, const sy_option *options, size_t n_options, sy_model **out) {
    if (out == NULL) return te_fail(SY_ERR_INVALID_ARGUMENT, "load: out is NULL");
    *out = NULL;
    if (path == NULL) return te_fail(SY_ERR_INVALID_ARGUMENT, "load: path is NULL");
    if (options == NULL && n_options > 0) return te_fail(SY_ERR_INVALID_ARGUMENT, "load: options is NULL");

    char *file = malloc(TE_MAX_FILE_BYTES);
    if (file == NULL) return te_fail(SY_ERR_OUT_OF_MEMORY, "out of memory reading %s", path);
    size_t len = 0;
    te_config cfg;
    sy_status st = te_read_config(path, options, n_options, file, &len, &cfg);
    sy_model *model = NULL;
    if (st == SY_OK) {
        model = calloc(1, sizeof *model);
        if (model == NULL) st = te_fail(SY_ERR_OUT_OF_MEMORY, "out of memory loading %s", path);
    }
    if (st == SY_OK) {
        model->magic = TE_MODEL_MAGIC;
        model->cfg = cfg;
        model->kv_bytes_per_token = cfg.n_layer * TE_ROW_BYTES;
        te_fingerprint(file, len, &cfg, model->fingerprint);
        st = te_math_init(model);
    }
    free(file);
    if (st != SY_OK) {
        free(model);
        return st;
    }
    if (cfg.load_delay_ms > 0) {
        struct timespec delay = {(time_t)(cfg.load_delay_ms / 1000), (long)(cfg.load_delay_ms % 1000) * 1000000L};
        while (nanosleep(&delay, &delay) != 0 && errno == EINTR) {
        }
    }
    atomic_store(&model->resident_bytes, te_resident_at_load(&cfg));
    te_log(SY_LOG_INFO, "loaded %s: n_ctx=%u n_vocab=%u n_layer=%u recurrent=%u", path, (unsigned)cfg.n_ctx,
           (unsigned)cfg.n_vocab, (unsigned)cfg.n_layer, (unsigned)cfg.recurrent);
    *out = model;
    return SY_OK;
}

int te_model_ok(const sy_model *model) { return model != NULL && model->magic == TE_MODEL_MAGIC; }

static void te_unload(sy_model *model) {
    if (!te_model_ok(model)) return;
    /* Sequences the host did not free go with their model. */
    while (model->seqs != NULL) {
        sy_seq *seq = model->seqs;
        model->seqs = seq->next;
        te_free_seq_memory(seq);
    }
    te_math_free(model);
    free(model->sample_logits);
    model->magic = 0;
    free(model);
}

/* Writes the fields of a local struct that fit in the caller's struct_size, keeping the caller's struct_size. */
static void te_copy_out(void *dst, const void *src, size_t src_size) {
    uint32_t dst_size;
    memcpy(&dst_size, dst, sizeof dst_size);
    size_t n = dst_size < src_size ? dst_size : src_size;
    if (n > sizeof(uint32_t)) memcpy((char *)dst + sizeof(uint32_t), (const char *)src + sizeof(uint32_t),
                                     n - sizeof(uint32_t));
}

static sy_status te_model_info(const sy_model *model, sy_model_info *out) {
    if (!te_model_ok(model)) return te_fail(SY_ERR_INVALID_ARGUMENT, "model_info: not a test-engine model");
    if (out == NULL || out->struct_size < sizeof(uint32_t))
        return te_fail(SY_ERR_INVALID_ARGUMENT, "model_info: out is NULL or its struct_size is too small");
    const te_config *cfg = &model->cfg;
    sy_model_info info = {
        .struct_size = sizeof info,
        .architecture = "test",
        .name = cfg->name,
        .weight_dtype = "f16",
        .fingerprint = model->fingerprint,
        .chat_template = te_chat_template,
        .n_vocab = cfg->n_vocab,
        .n_ctx_train = cfg->n_ctx_train,
        .n_ctx = cfg->n_ctx,
        .n_layer = cfg->n_layer,
        .n_embd = TE_ROW_VALUES,
        .n_params = (uint64_t)cfg->n_vocab * TE_ROW_VALUES * cfg->n_layer,
        .bos_token = TE_TOKEN_BOS,
        .eos_token = TE_TOKEN_EOS,
        .pad_token = TE_TOKEN_PAD,
        .add_bos = cfg->add_bos,
        .max_sequences = cfg->max_sequences,
#if SY_ABI_TARGET_MINOR >= 2
        /* a recurrent model keeps `history` tokens of state to return to */
        .max_rollback = cfg->recurrent ? cfg->history : UINT32_MAX,
        .max_decode_tokens = cfg->max_decode_tokens,
        .capabilities = SY_CAP_ITEM_CANCEL,
        .n_chat_templates = 1,
        .chat_template_names = te_template_names,
        .chat_template_texts = te_template_texts,
#endif
    };
    te_copy_out(out, &info, sizeof info);
    return SY_OK;
}

static sy_status te_memory_usage(const sy_model *model, sy_memory_usage *out) {
    if (!te_model_ok(model)) return te_fail(SY_ERR_INVALID_ARGUMENT, "memory_usage: not a test-engine model");
    if (out == NULL || out->struct_size < sizeof(uint32_t))
        return te_fail(SY_ERR_INVALID_ARGUMENT, "memory_usage: out is NULL or its struct_size is too small");
    sy_memory_usage usage = {
        .struct_size = sizeof usage,
        .resident_bytes = atomic_load(&((sy_model *)model)->resident_bytes),
        .kv_bytes = atomic_load(&((sy_model *)model)->kv_bytes),
        .device_bytes = (uint64_t)model->cfg.device_mb << 20,
    };
    te_copy_out(out, &usage, sizeof usage);
    return SY_OK;
}

static sy_status te_tokenize_checked(const sy_model *model, const char *text, size_t text_len, uint32_t flags,
                                     int32_t *out, size_t capacity, size_t *n_out) {
    if (!te_model_ok(model)) return te_fail(SY_ERR_INVALID_ARGUMENT, "tokenize: not a test-engine model");
    return te_tokenize(model, text, text_len, flags, out, capacity, n_out);
}

static sy_status te_token_to_bytes_checked(const sy_model *model, int32_t token, char *out, size_t capacity,
                                           size_t *n_out) {
    if (!te_model_ok(model)) return te_fail(SY_ERR_INVALID_ARGUMENT, "token_to_bytes: not a test-engine model");
    return te_token_to_bytes(model, token, out, capacity, n_out);
}

static uint32_t te_token_flags_checked(const sy_model *model, int32_t token) {
    return te_model_ok(model) ? te_token_flags(model, token) : 0;
}

/* ------------------------------------------------------------------------------------------------------------
 * Sequences */

int te_seq_ok(const sy_model *model, const sy_seq *seq) {
    return seq != NULL && seq->magic == TE_SEQ_MAGIC && seq->model == model;
}

static uint64_t te_seq_alloc_bytes(const sy_model *model, uint32_t cap) {
    uint64_t bytes = sizeof(sy_seq) + (uint64_t)cap * (sizeof(int32_t) + model->kv_bytes_per_token);
    if (model->cfg.recurrent) bytes += ((uint64_t)cap + 1) * (TE_RECURRENT_BYTES + 1);
    return bytes;
}

static uint64_t te_seq_kv_bytes(const sy_model *model, uint32_t len) {
    return (uint64_t)len * model->kv_bytes_per_token + (model->cfg.recurrent ? TE_RECURRENT_BYTES : 0);
}

sy_status te_seq_reserve(sy_model *model, sy_seq *seq, uint32_t n_positions) {
    if (n_positions <= seq->cap) return SY_OK;
    uint32_t cap = seq->cap < 64 ? 64 : seq->cap;
    while (cap < n_positions) cap = cap > UINT32_MAX / 2 ? n_positions : cap * 2;
    if (cap > model->cfg.n_ctx) cap = model->cfg.n_ctx;
    if (cap < n_positions) cap = n_positions;
    int32_t *tokens = realloc(seq->tokens, (size_t)cap * sizeof *tokens);
    if (tokens != NULL) seq->tokens = tokens;
    uint8_t *kv = tokens ? realloc(seq->kv, (size_t)cap * model->kv_bytes_per_token) : NULL;
    if (kv != NULL) seq->kv = kv;
    int grown = kv != NULL;
    if (grown && model->cfg.recurrent) {
        uint8_t *rec = realloc(seq->rec, ((size_t)cap + 1) * TE_RECURRENT_BYTES);
        if (rec != NULL) seq->rec = rec;
        uint8_t *known = rec ? realloc(seq->rec_known, (size_t)cap + 1) : NULL;
        if (known != NULL) seq->rec_known = known;
        grown = known != NULL;
    }
    /* A partial failure leaves some buffers larger than cap; harmless, cap stays the old size. */
    if (!grown) return te_fail(SY_ERR_OUT_OF_MEMORY, "out of memory growing a sequence to %u positions",
                               (unsigned)n_positions);
    atomic_fetch_add(&model->resident_bytes, te_seq_alloc_bytes(model, cap) - te_seq_alloc_bytes(model, seq->cap));
    seq->cap = cap;
    return SY_OK;
}

/* Sets the committed length and keeps the kv counter in step. */
void te_seq_set_length(sy_model *model, sy_seq *seq, uint32_t len) {
    atomic_fetch_sub(&model->kv_bytes, te_seq_kv_bytes(model, seq->len));
    atomic_fetch_add(&model->kv_bytes, te_seq_kv_bytes(model, len));
    if (model->cfg.recurrent && len > seq->len && len > model->cfg.history &&
        len - model->cfg.history > seq->rec_floor)
        seq->rec_floor = len - model->cfg.history;
    seq->len = len;
}

static sy_status te_seq_new(sy_model *model, sy_seq **out) {
    if (model->cfg.max_sequences != 0 && atomic_load(&model->n_seqs) >= model->cfg.max_sequences)
        return te_fail(SY_ERR_OUT_OF_MEMORY, "all %u sequences of the model are in use",
                       (unsigned)model->cfg.max_sequences);
    sy_seq *seq = calloc(1, sizeof *seq);
    if (seq == NULL) return te_fail(SY_ERR_OUT_OF_MEMORY, "out of memory creating a sequence");
    seq->magic = TE_SEQ_MAGIC;
    seq->model = model;
    if (model->cfg.recurrent) {
        seq->rec = malloc(TE_RECURRENT_BYTES);
        seq->rec_known = malloc(1);
        if (seq->rec == NULL || seq->rec_known == NULL) {
            free(seq->rec);
            free(seq->rec_known);
            free(seq);
            return te_fail(SY_ERR_OUT_OF_MEMORY, "out of memory creating a sequence");
        }
        memcpy(seq->rec, model->recurrent_init, TE_RECURRENT_BYTES);
        seq->rec_known[0] = 1;
    }
    seq->next = model->seqs;
    if (model->seqs != NULL) model->seqs->prev = seq;
    model->seqs = seq;
    atomic_fetch_add(&model->n_seqs, 1);
    atomic_fetch_add(&model->resident_bytes, te_seq_alloc_bytes(model, 0));
    atomic_fetch_add(&model->kv_bytes, te_seq_kv_bytes(model, 0));
    *out = seq;
    return SY_OK;
}

static void te_free_seq_memory(sy_seq *seq) {
    seq->magic = 0;
    free(seq->tokens);
    free(seq->kv);
    free(seq->rec);
    free(seq->rec_known);
    free(seq);
}

static sy_status te_seq_create(sy_model *model, sy_seq **out) {
    if (out == NULL) return te_fail(SY_ERR_INVALID_ARGUMENT, "seq_create: out is NULL");
    *out = NULL;
    if (!te_model_ok(model)) return te_fail(SY_ERR_INVALID_ARGUMENT, "seq_create: not a test-engine model");
    return te_seq_new(model, out);
}

static void te_seq_free(sy_model *model, sy_seq *seq) {
    if (!te_model_ok(model) || !te_seq_ok(model, seq)) return;
    if (seq->prev) seq->prev->next = seq->next;
    else model->seqs = seq->next;
    if (seq->next) seq->next->prev = seq->prev;
    atomic_fetch_sub(&model->n_seqs, 1);
    atomic_fetch_sub(&model->resident_bytes, te_seq_alloc_bytes(model, seq->cap));
    atomic_fetch_sub(&model->kv_bytes, te_seq_kv_bytes(model, seq->len));
    te_free_seq_memory(seq);
}

static uint32_t te_seq_length(const sy_model *model, const sy_seq *seq) {
    return te_seq_ok(model, seq) ? seq->len : 0;
}

/* Can a recurrent sequence go back to n tokens? SY_OK, or SY_ERR_UNSUPPORTED saying why not. */
static sy_status te_recurrent_can_return_to(const sy_model *model, const sy_seq *seq, uint32_t n, const char *what) {
    if (!model->cfg.recurrent || n == seq->len || n == 0) return SY_OK;
    if (n < seq->rec_floor)
        return te_fail(SY_ERR_UNSUPPORTED,
                       "%s: cannot roll a recurrent sequence back to %u tokens (it keeps %u tokens of history, "
                       "back to %u)",
                       what, (unsigned)n, (unsigned)model->cfg.history, (unsigned)seq->rec_floor);
    if (!seq->rec_known[n])
        return te_fail(SY_ERR_UNSUPPORTED,
                       "%s: the recurrent state after %u tokens is not known (restored from a chunk ending elsewhere)",
                       what, (unsigned)n);
    return SY_OK;
}

static sy_status te_seq_truncate(sy_model *model, sy_seq *seq, uint32_t n_tokens) {
    if (!te_model_ok(model) || !te_seq_ok(model, seq))
        return te_fail(SY_ERR_INVALID_ARGUMENT, "seq_truncate: not a sequence of this model");
    if (n_tokens > seq->len)
        return te_fail(SY_ERR_INVALID_ARGUMENT, "seq_truncate: %u tokens asked, the sequence holds %u",
                       (unsigned)n_tokens, (unsigned)seq->len);
    sy_status st = te_recurrent_can_return_to(model, seq, n_tokens, "seq_truncate");
    if (st != SY_OK) return st;
    if (n_tokens == 0) seq->rec_floor = 0;
    te_seq_set_length(model, seq, n_tokens);
    return SY_OK;
}

static sy_status te_seq_fork(sy_model *model, const sy_seq *src, uint32_t n_tokens, sy_seq **out) {
    if (out == NULL) return te_fail(SY_ERR_INVALID_ARGUMENT, "seq_fork: out is NULL");
    *out = NULL;
    if (!te_model_ok(model) || !te_seq_ok(model, src))
        return te_fail(SY_ERR_INVALID_ARGUMENT, "seq_fork: not a sequence of this model");
    if (n_tokens > src->len)
        return te_fail(SY_ERR_INVALID_ARGUMENT, "seq_fork: %u tokens asked, the sequence holds %u",
                       (unsigned)n_tokens, (unsigned)src->len);
    sy_status st = te_recurrent_can_return_to(model, src, n_tokens, "seq_fork");
    if (st != SY_OK) return st;
    sy_seq *seq;
    st = te_seq_new(model, &seq);
    if (st != SY_OK) return st;
    st = te_seq_reserve(model, seq, n_tokens);
    if (st != SY_OK) {
        te_seq_free(model, seq);
        return st;
    }
    if (n_tokens > 0) {
        memcpy(seq->tokens, src->tokens, (size_t)n_tokens * sizeof *seq->tokens);
        memcpy(seq->kv, src->kv, (size_t)n_tokens * model->kv_bytes_per_token);
    }
    if (model->cfg.recurrent) {
        memcpy(seq->rec, src->rec, ((size_t)n_tokens + 1) * TE_RECURRENT_BYTES);
        memcpy(seq->rec_known, src->rec_known, (size_t)n_tokens + 1);
        seq->rec_floor = n_tokens; /* a fork starts from the state at n_tokens, as a real engine's would */
    }
    te_seq_set_length(model, seq, n_tokens);
    *out = seq;
    return SY_OK;
}

/* ------------------------------------------------------------------------------------------------------------
 * Decode */

static void te_sleep_us(uint32_t us) {
    struct timespec ts = {.tv_sec = us / 1000000u, .tv_nsec = (long)(us % 1000000u) * 1000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* The host's per-item outcome array (ABI 1.2), or NULL. */
static sy_status *te_item_status(const sy_decode_batch *batch) {
#if SY_ABI_TARGET_MINOR >= 2
    return SY_HAS_FIELD(batch, sy_decode_batch, item_status) ? batch->item_status : NULL;
#else
    (void)batch;
    return NULL;
#endif
}

/* An item's own cancellation (ABI 1.2), or NULL. */
static const sy_host_call *te_item_call(const sy_decode_batch *batch, const sy_decode_item *item) {
#if SY_ABI_TARGET_MINOR >= 2
    if (batch->item_size >= offsetof(sy_decode_item, call) + sizeof item->call &&
        SY_HAS_FIELD(item, sy_decode_item, call))
        return item->call;
#else
    (void)batch;
    (void)item;
#endif
    return NULL;
}

sy_status te_decode_checked(sy_model *model, const sy_decode_batch *batch, int sampling) {
    const char *what = sampling ? "decode_sample" : "decode";
    if (!te_model_ok(model)) return te_fail(SY_ERR_INVALID_ARGUMENT, "%s: not a test-engine model", what);
    if (!SY_HAS_FIELD(batch, sy_decode_batch, items))
        return te_fail(SY_ERR_INVALID_ARGUMENT, "%s: batch is NULL or its struct_size is too small", what);
    if (batch->n_items > TE_MAX_BATCH_ITEMS)
        return te_fail(SY_ERR_INVALID_ARGUMENT, "%s: %u items, at most %u", what, (unsigned)batch->n_items,
                       (unsigned)TE_MAX_BATCH_ITEMS);
    if (batch->n_items == 0) return SY_OK;
    if (batch->items == NULL) return te_fail(SY_ERR_INVALID_ARGUMENT, "%s: items is NULL", what);
    if (batch->item_size < offsetof(sy_decode_item, logits) + sizeof(float *))
        return te_fail(SY_ERR_INVALID_ARGUMENT, "%s: item_size %u is smaller than an item", what,
                       (unsigned)batch->item_size);
    /* Check everything before touching any sequence, so a refused batch changes nothing. */
    if (model->cfg.max_decode_tokens != 0) {
        uint64_t total = 0;
        for (uint32_t i = 0; i < batch->n_items; i++) total += sy_decode_batch_item(batch, i)->n_tokens;
        if (total > model->cfg.max_decode_tokens)
            return te_fail(SY_ERR_INVALID_ARGUMENT, "%s: %llu tokens in one call, this model takes at most %u", what,
                           (unsigned long long)total, (unsigned)model->cfg.max_decode_tokens);
    }
    model->batch_epoch++;
    for (uint32_t i = 0; i < batch->n_items; i++) {
        const sy_decode_item *item = sy_decode_batch_item(batch, i);
        if (!SY_HAS_FIELD(item, sy_decode_item, logits))
            return te_fail(SY_ERR_INVALID_ARGUMENT, "%s: item %u: struct_size %u is too small", what, (unsigned)i,
                           (unsigned)item->struct_size);
        sy_seq *seq = item->seq;
        if (!te_seq_ok(model, seq))
            return te_fail(SY_ERR_INVALID_ARGUMENT, "%s: item %u: not a sequence of this model", what, (unsigned)i);
        if (seq->batch_epoch == model->batch_epoch)
            return te_fail(SY_ERR_INVALID_ARGUMENT, "%s: item %u: the sequence appears twice in the batch", what,
                           (unsigned)i);
        seq->batch_epoch = model->batch_epoch;
        if (item->n_tokens > 0 && item->tokens == NULL)
            return te_fail(SY_ERR_INVALID_ARGUMENT, "%s: item %u: tokens is NULL", what, (unsigned)i);
        if (item->n_logits > item->n_tokens)
            return te_fail(SY_ERR_INVALID_ARGUMENT, "%s: item %u: n_logits %u > n_tokens %u", what, (unsigned)i,
                           (unsigned)item->n_logits, (unsigned)item->n_tokens);
        if (sampling) {
            if (item->n_logits != 1 || item->logits != NULL)
                return te_fail(SY_ERR_INVALID_ARGUMENT, "%s: item %u: needs n_logits == 1 and logits == NULL", what,
                               (unsigned)i);
        } else if (item->n_logits > 0 && item->logits == NULL) {
            return te_fail(SY_ERR_INVALID_ARGUMENT, "%s: item %u: logits is NULL", what, (unsigned)i);
        }
        for (uint32_t k = 0; k < item->n_tokens; k++)
            if (item->tokens[k] < 0 || (uint32_t)item->tokens[k] >= model->cfg.n_vocab)
                return te_fail(SY_ERR_INVALID_ARGUMENT, "%s: item %u: token %ld at %u is outside the vocabulary of %u",
                               what, (unsigned)i, (long)item->tokens[k], (unsigned)k, (unsigned)model->cfg.n_vocab);
        sy_status *status = te_item_status(batch);
        if (status != NULL) status[i] = SY_OK;
        if ((uint64_t)seq->len + item->n_tokens > model->cfg.n_ctx) {
            if (status != NULL) { /* this item alone is left out; the host reads why in item_status */
                status[i] = SY_ERR_CONTEXT_FULL;
                continue;
            }
            return te_fail(SY_ERR_CONTEXT_FULL, "%s: item %u: %u + %u tokens exceed the context of %u", what,
                           (unsigned)i, (unsigned)seq->len, (unsigned)item->n_tokens, (unsigned)model->cfg.n_ctx);
        }
    }
    for (uint32_t i = 0; i < batch->n_items; i++) {
        const sy_decode_item *item = sy_decode_batch_item(batch, i);
        if (te_item_status(batch) != NULL && te_item_status(batch)[i] != SY_OK) continue;
        sy_status st = te_seq_reserve(model, item->seq, item->seq->len + item->n_tokens);
        if (st != SY_OK) return st;
    }
    return SY_OK;
}

/* Runs a checked batch. logits_rows, when not NULL, replaces each item's logits pointer (decode_sample). */
sy_status te_decode_run(sy_model *model, const sy_decode_batch *batch, float *const *logits_rows) {
    const sy_host_call *call = SY_HAS_FIELD(batch, sy_decode_batch, call) ? batch->call : NULL;
    const uint32_t n_vocab = model->cfg.n_vocab;
    /* Positions past each sequence's length are scratch until the commit below. */
    sy_status *status = te_item_status(batch);
    for (uint32_t i = 0; i < batch->n_items; i++) {
        const sy_decode_item *item = sy_decode_batch_item(batch, i);
        if (status != NULL && status[i] != SY_OK) continue; /* left out by the checks */
        const sy_host_call *own = status != NULL ? te_item_call(batch, item) : NULL;
        sy_seq *seq = item->seq;
        float *logits = logits_rows ? logits_rows[i] : item->logits;
        uint32_t first_logit = item->n_tokens - item->n_logits;
        for (uint32_t k = 0; k < item->n_tokens; k++) {
            if (te_cancelled(call)) return te_fail(SY_ERR_CANCELLED, "decode cancelled by the host");
            if (own != NULL && te_cancelled(own)) { /* this item alone: its positions stay scratch */
                status[i] = SY_ERR_CANCELLED;
                break;
            }
            if (model->cfg.delay_us) te_sleep_us(model->cfg.delay_us);
            uint32_t pos = seq->len + k;
            seq->tokens[pos] = item->tokens[k];
            te_compute_position(model, seq, pos, item->tokens[k]);
            if (k >= first_logit) te_compute_logits(model, seq, pos, logits + (size_t)(k - first_logit) * n_vocab);
        }
    }
    for (uint32_t i = 0; i < batch->n_items; i++) {
        const sy_decode_item *item = sy_decode_batch_item(batch, i);
        if (status != NULL && status[i] != SY_OK) continue;
        te_seq_set_length(model, item->seq, item->seq->len + item->n_tokens);
    }
    return SY_OK;
}

static sy_status te_decode(sy_model *model, const sy_decode_batch *batch) {
    sy_status st = te_decode_checked(model, batch, 0);
    if (st != SY_OK || batch->n_items == 0) return st;
    return te_decode_run(model, batch, NULL);
}

/* ------------------------------------------------------------------------------------------------------------
 * Tables and the entry */

static const sy_engine_api te_engine_api = {
    .struct_size = sizeof(sy_engine_api),
    .error_message = te_error_message,
    .probe = te_probe,
    .load = te_load,
    .unload = te_unload,
    .model_info = te_model_info,
    .tokenize = te_tokenize_checked,
    .token_to_bytes = te_token_to_bytes_checked,
    .token_flags = te_token_flags_checked,
    .seq_create = te_seq_create,
    .seq_free = te_seq_free,
    .seq_length = te_seq_length,
    .seq_truncate = te_seq_truncate,
    .seq_fork = te_seq_fork,
    .decode = te_decode,
    .memory_usage = te_memory_usage,
};

static sy_status te_init(const sy_host_api *host) {
    if (host == NULL || host->struct_size < offsetof(sy_host_api, log))
        return te_fail(SY_ERR_INVALID_ARGUMENT, "init: no host API");
    if (host->abi_major != SY_ABI_VERSION_MAJOR)
        return te_fail(SY_ERR_UNSUPPORTED, "init: host ABI major %u, plugin %u", (unsigned)host->abi_major,
                       (unsigned)SY_ABI_VERSION_MAJOR);
    te_host = host;
    return SY_OK;
}

static void te_deinit(void) { te_host = NULL; }

static sy_status te_estimate(const char *path, const sy_option *options, size_t n_options, sy_resource_estimate *out) {
    if (path == NULL || out == NULL || out->struct_size < sizeof(uint32_t))
        return te_fail(SY_ERR_INVALID_ARGUMENT, "estimate: bad arguments");
    if (options == NULL && n_options > 0) return te_fail(SY_ERR_INVALID_ARGUMENT, "estimate: options is NULL");
    char *file = malloc(TE_MAX_FILE_BYTES);
    if (file == NULL) return te_fail(SY_ERR_OUT_OF_MEMORY, "out of memory reading %s", path);
    size_t len = 0;
    te_config cfg;
    sy_status st = te_read_config(path, options, n_options, file, &len, &cfg);
    free(file);
    if (st != SY_OK) return st;
    sy_resource_estimate e = {
        .struct_size = sizeof e,
        .resident_bytes = te_resident_at_load(&cfg),
        .device_bytes = (uint64_t)cfg.device_mb << 20,
    };
    te_copy_out(out, &e, sizeof e);
    return SY_OK;
}

static const sy_engine_resources_api te_resources_api = {
    .struct_size = sizeof(sy_engine_resources_api),
    .estimate = te_estimate,
};

/* Describe ("sy.engine.describe/1"): the facts model_info gives, from the model file alone. */
static int te_put_int(const sy_metadata_sink *sink, const char *key, int64_t v) {
    sy_metadata_value mv = {.struct_size = sizeof mv, .type = SY_META_INT, .i = v};
    return sink->put(sink->user, key, &mv);
}

static sy_status te_describe(const char *path, const sy_metadata_sink *sink) {
    if (path == NULL || sink == NULL || sink->put == NULL) return te_fail(SY_ERR_INVALID_ARGUMENT, "describe: bad arguments");
    char *file = malloc(TE_MAX_FILE_BYTES);
    if (file == NULL) return te_fail(SY_ERR_OUT_OF_MEMORY, "out of memory reading %s", path);
    size_t len = 0;
    te_config cfg;
    sy_status st = te_read_config(path, NULL, 0, file, &len, &cfg);
    free(file);
    if (st != SY_OK) return st;
    sy_metadata_value arch = {.struct_size = sizeof arch, .type = SY_META_STRING, .string = "test", .len = 4};
    sy_metadata_value name = {.struct_size = sizeof name, .type = SY_META_STRING, .string = cfg.name,
                              .len = strlen(cfg.name)};
    sy_metadata_value ft = {.struct_size = sizeof ft, .type = SY_META_STRING, .string = "F16", .len = 3};
    if (sink->put(sink->user, "general.architecture", &arch) || sink->put(sink->user, "general.name", &name) ||
        sink->put(sink->user, "general.file_type_name", &ft) || te_put_int(sink, "general.file_type", 1) ||
        te_put_int(sink, "general.parameter_count", (int64_t)cfg.n_vocab * TE_ROW_VALUES * cfg.n_layer) ||
        te_put_int(sink, "test.context_length", cfg.n_ctx_train) ||
        te_put_int(sink, "test.embedding_length", TE_ROW_VALUES) || te_put_int(sink, "test.block_count", cfg.n_layer) ||
        te_put_int(sink, "test.vocab_size", cfg.n_vocab))
        return SY_OK;
    return SY_OK;
}

static const sy_engine_describe_api te_describe_api = {
    .struct_size = sizeof(sy_engine_describe_api),
    .describe = te_describe,
};

static const void *te_get_interface(const char *id) {
    if (id == NULL) return NULL;
    if (strcmp(id, SY_ENGINE_INTERFACE_ID) == 0) return &te_engine_api;
    if (strcmp(id, SY_ENGINE_STATE_INTERFACE_ID) == 0) return &te_state_api;
    if (strcmp(id, SY_ENGINE_RESOURCES_INTERFACE_ID) == 0) return &te_resources_api;
    if (strcmp(id, SY_ENGINE_DESCRIBE_INTERFACE_ID) == 0) return &te_describe_api;
    if (strcmp(id, SY_ENGINE_SAMPLING_INTERFACE_ID) == 0) return &te_sampling_api;
    if (strcmp(id, SY_PLUGIN_OPTIONS_INTERFACE_ID) == 0) return &te_options_api;
    return NULL;
}

SY_DEFINE_PLUGIN_ENTRY(
    TE_PLUGIN_NAME, "0.1.0", "deterministic fake engine for host tests", te_init, te_deinit, te_get_interface);
