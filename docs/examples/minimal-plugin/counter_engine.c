/*
 * example-counter: the smallest complete switchyard engine plugin, a walk-through of the ABI.
 *
 * Its "model" is a text file whose first line is `example-counter-model`. Its vocabulary is the 256 bytes plus one
 * end token, and it knows one thing: after a digit comes the next digit, after '9' the end. After any other byte it
 * predicts the byte after it. So the prompt "1" continues "23456789" and stops.
 *
 * Read it with docs/plugin-abi.md beside you. Everything a real engine does is here in miniature: error messages per
 * thread, strict input checks, sequences owned by the plugin, an all-or-nothing batched decode.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <switchyard/switchyard.h>

#define COUNTER_MAGIC "example-counter-model"
#define COUNTER_EOS 256
#define COUNTER_VOCAB 257

/* --- Errors: one message per thread, valid until that thread's next call ------------------------------------- */

static _Thread_local char error_buf[256];

static const char *counter_error_message(void) { return error_buf; }

static sy_status fail(sy_status status, const char *message, const char *detail) {
    snprintf(error_buf, sizeof error_buf, "%s%s%s", message, detail ? ": " : "", detail ? detail : "");
    return status;
}

/* --- The host: kept from init() for logging ------------------------------------------------------------------ */

static const sy_host_api *host;

static void log_debug(const char *message) {
    if (SY_HAS_FIELD(host, sy_host_api, log) && host->log) host->log(SY_LOG_DEBUG, "example-counter", message);
}

/* --- Models and sequences: opaque to the host, owned by the plugin ------------------------------------------ */

struct sy_model {
    uint32_t n_ctx;
    char fingerprint[17];
};

struct sy_seq {
    sy_model *model;
    uint32_t len, cap;
    int32_t *tokens;
};

/* --- Probe and load ------------------------------------------------------------------------------------------ */

/* Reads the first line of path into line (NUL-terminated); 0 on success. */
static int read_first_line(const char *path, char *line, size_t size) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) return -1;
    size_t n = fread(line, 1, size - 1, f);
    fclose(f);
    line[n] = '\0';
    line[strcspn(line, "\r\n")] = '\0';
    return 0;
}

static sy_status counter_probe(const char *path) {
    char line[64];
    if (path == NULL) return fail(SY_ERR_INVALID_ARGUMENT, "probe: path is NULL", NULL);
    if (read_first_line(path, line, sizeof line) != 0) return fail(SY_ERR_UNSUPPORTED, "cannot read", path);
    if (strcmp(line, COUNTER_MAGIC) != 0)
        return fail(SY_ERR_UNSUPPORTED, "first line is not '" COUNTER_MAGIC "'", path);
    return SY_OK;
}

/* A stable id for the model: FNV-1a over the file's bytes. */
static void fingerprint_file(const char *path, char out[17]) {
    uint64_t h = 0xcbf29ce484222325ull;
    FILE *f = fopen(path, "rb");
    int c;
    while (f != NULL && (c = fgetc(f)) != EOF) h = (h ^ (uint64_t)c) * 0x100000001b3ull;
    if (f != NULL) fclose(f);
    snprintf(out, 17, "%016llx", (unsigned long long)h);
}

static sy_status counter_load(const char *path, const sy_option *options, size_t n_options, sy_model **out) {
    if (out == NULL) return fail(SY_ERR_INVALID_ARGUMENT, "load: out is NULL", NULL);
    *out = NULL;
    sy_status st = counter_probe(path);
    if (st != SY_OK) return st;
    uint32_t n_ctx = 256;
    for (size_t i = 0; i < n_options; i++) {
        if (options[i].key == NULL || options[i].value == NULL)
            return fail(SY_ERR_INVALID_ARGUMENT, "load: an option has a NULL key or value", NULL);
        if (strcmp(options[i].key, "ctx_size") == 0) { /* the host's --ctx-size */
            /* Keys we know: reject bad values, naming the key. */
            char *end;
            unsigned long v = strtoul(options[i].value, &end, 10);
            if (*options[i].value < '0' || *options[i].value > '9' || *end != '\0' || v < 1 || v > 65536)
                return fail(SY_ERR_INVALID_ARGUMENT, "option ctx_size must be 1..65536", options[i].value);
            n_ctx = (uint32_t)v;
        } else {
            /* Keys we do not know are the host's general options, meant for other engines. */
            log_debug("ignoring an option this engine does not use");
        }
    }
    sy_model *model = calloc(1, sizeof *model);
    if (model == NULL) return fail(SY_ERR_OUT_OF_MEMORY, "load: out of memory", NULL);
    model->n_ctx = n_ctx;
    fingerprint_file(path, model->fingerprint);
    *out = model;
    return SY_OK;
}

static void counter_unload(sy_model *model) { free(model); }

/* --- Facts and tokenizer (any-thread: they only read immutable data) ------------------------------------------ */

/* Copy what fits in the host's struct (its struct_size may be older and smaller than ours), keeping its size. */
static void copy_out(void *dst, const void *src, size_t src_size) {
    uint32_t dst_size;
    memcpy(&dst_size, dst, sizeof dst_size);
    size_t n = dst_size < src_size ? dst_size : src_size;
    if (n > sizeof(uint32_t)) memcpy((char *)dst + 4, (const char *)src + 4, n - 4);
}

static sy_status counter_model_info(const sy_model *model, sy_model_info *out) {
    if (model == NULL || out == NULL) return fail(SY_ERR_INVALID_ARGUMENT, "model_info: NULL argument", NULL);
    sy_model_info info = {
        .struct_size = sizeof info,
        .architecture = "counter",
        .name = "example counter",
        .weight_dtype = "none",
        .fingerprint = model->fingerprint,
        .chat_template = NULL, /* no chat template: the host uses plain prompts */
        .n_vocab = COUNTER_VOCAB,
        .n_ctx_train = 65536,
        .n_ctx = model->n_ctx,
        .bos_token = -1,
        .eos_token = COUNTER_EOS,
        .pad_token = -1,
        /* (1.2) what the host would otherwise learn by failing; leaving these 0 would say "cannot roll back" */
        .max_rollback = UINT32_MAX, /* a sequence is its tokens: truncate anywhere */
        .max_decode_tokens = 0,     /* any batch size */
        .capabilities = 0,
    };
    copy_out(out, &info, sizeof info);
    return SY_OK;
}

static sy_status counter_tokenize(const sy_model *model, const char *text, size_t text_len, uint32_t flags,
                                  int32_t *out, size_t capacity, size_t *n_out) {
    if (model == NULL || n_out == NULL || (text == NULL && text_len > 0) || (out == NULL && capacity > 0))
        return fail(SY_ERR_INVALID_ARGUMENT, "tokenize: NULL argument", NULL);
    (void)flags; /* one token per byte: no BOS to add, and the end token has no text to parse */
    for (size_t i = 0; i < text_len && i < capacity; i++) out[i] = (unsigned char)text[i];
    *n_out = text_len;
    if (text_len > capacity) return fail(SY_ERR_BUFFER_TOO_SMALL, "tokenize: buffer too small", NULL);
    return SY_OK;
}

static sy_status counter_token_to_bytes(const sy_model *model, int32_t token, char *out, size_t capacity,
                                        size_t *n_out) {
    if (model == NULL || n_out == NULL || (out == NULL && capacity > 0))
        return fail(SY_ERR_INVALID_ARGUMENT, "token_to_bytes: NULL argument", NULL);
    if (token < 0 || token >= COUNTER_VOCAB) return fail(SY_ERR_INVALID_ARGUMENT, "token_to_bytes: bad token", NULL);
    const char *text = token == COUNTER_EOS ? "</s>" : NULL;
    size_t n = text ? strlen(text) : 1;
    *n_out = n;
    if (n > capacity) return fail(SY_ERR_BUFFER_TOO_SMALL, "token_to_bytes: buffer too small", NULL);
    if (text) memcpy(out, text, n);
    else out[0] = (char)token;
    return SY_OK;
}

static uint32_t counter_token_flags(const sy_model *model, int32_t token) {
    if (model == NULL) return 0;
    if (token < 0 || token >= COUNTER_VOCAB) return SY_TOKEN_INVALID; /* since 1.2: 0 would read as a normal token */
    return token == COUNTER_EOS ? SY_TOKEN_CONTROL | SY_TOKEN_END_OF_GENERATION : SY_TOKEN_NORMAL;
}

static sy_status counter_memory_usage(const sy_model *model, sy_memory_usage *out) {
    if (model == NULL || out == NULL) return fail(SY_ERR_INVALID_ARGUMENT, "memory_usage: NULL argument", NULL);
    sy_memory_usage usage = {.struct_size = sizeof usage, .resident_bytes = sizeof *model};
    copy_out(out, &usage, sizeof usage);
    return SY_OK;
}

/* --- Sequences (serial: the host never runs two of these on one model at once) ------------------------------- */

static sy_status counter_seq_create(sy_model *model, sy_seq **out) {
    if (model == NULL || out == NULL) return fail(SY_ERR_INVALID_ARGUMENT, "seq_create: NULL argument", NULL);
    *out = calloc(1, sizeof **out);
    if (*out == NULL) return fail(SY_ERR_OUT_OF_MEMORY, "seq_create: out of memory", NULL);
    (*out)->model = model;
    return SY_OK;
}

static void counter_seq_free(sy_model *model, sy_seq *seq) {
    (void)model;
    if (seq == NULL) return;
    free(seq->tokens);
    free(seq);
}

static uint32_t counter_seq_length(const sy_model *model, const sy_seq *seq) {
    (void)model;
    return seq ? seq->len : 0;
}

static sy_status counter_seq_truncate(sy_model *model, sy_seq *seq, uint32_t n_tokens) {
    if (seq == NULL || seq->model != model) return fail(SY_ERR_INVALID_ARGUMENT, "seq_truncate: bad sequence", NULL);
    if (n_tokens > seq->len) return fail(SY_ERR_INVALID_ARGUMENT, "seq_truncate: longer than the sequence", NULL);
    seq->len = n_tokens; /* no recurrent state, so any rollback is possible */
    return SY_OK;
}

static sy_status reserve(sy_seq *seq, uint32_t n) {
    if (n <= seq->cap) return SY_OK;
    int32_t *grown = realloc(seq->tokens, (size_t)n * sizeof *grown);
    if (grown == NULL) return fail(SY_ERR_OUT_OF_MEMORY, "out of memory", NULL);
    seq->tokens = grown;
    seq->cap = n;
    return SY_OK;
}

static sy_status counter_seq_fork(sy_model *model, const sy_seq *src, uint32_t n_tokens, sy_seq **out) {
    if (out == NULL || src == NULL || src->model != model || n_tokens > src->len)
        return fail(SY_ERR_INVALID_ARGUMENT, "seq_fork: bad arguments", NULL);
    sy_status st = counter_seq_create(model, out);
    if (st == SY_OK) st = reserve(*out, n_tokens);
    if (st != SY_OK) {
        counter_seq_free(model, *out);
        *out = NULL;
        return st;
    }
    if (n_tokens > 0) memcpy((*out)->tokens, src->tokens, (size_t)n_tokens * sizeof *src->tokens);
    (*out)->len = n_tokens;
    return SY_OK;
}

/* The whole "model": what follows token t. */
static int32_t next_token(int32_t t) {
    if (t == '9') return COUNTER_EOS;
    if (t >= '0' && t < '9') return t + 1;
    return (t + 1) % 256;
}

static sy_status counter_decode(sy_model *model, const sy_decode_batch *batch) {
    if (model == NULL || !SY_HAS_FIELD(batch, sy_decode_batch, items) || (batch->n_items > 0 && batch->items == NULL))
        return fail(SY_ERR_INVALID_ARGUMENT, "decode: bad batch", NULL);
    /* Items are read with the host's stride; it may have compiled a longer item struct than ours, or a shorter one
     * (an older host: fields a later minor appended, such as `call` in 1.2, are then absent). So require only the
     * 1.0 part, and read later fields only where item->struct_size covers them (SY_HAS_FIELD). Checking against
     * sizeof(sy_decode_item) would refuse every older host as soon as a minor appends to the item. */
    if (batch->n_items > 0 && batch->item_size < offsetof(sy_decode_item, logits) + sizeof(float *))
        return fail(SY_ERR_INVALID_ARGUMENT, "decode: item_size too small", NULL);

    /* First check every item, so that a refused batch changes no sequence. */
    for (uint32_t i = 0; i < batch->n_items; i++) {
        const sy_decode_item *item = sy_decode_batch_item(batch, i);
        if (item->seq == NULL || item->seq->model != model)
            return fail(SY_ERR_INVALID_ARGUMENT, "decode: bad sequence", NULL);
        if (item->n_tokens > 0 && item->tokens == NULL)
            return fail(SY_ERR_INVALID_ARGUMENT, "decode: tokens is NULL", NULL);
        if (item->n_logits > item->n_tokens || (item->n_logits > 0 && item->logits == NULL))
            return fail(SY_ERR_INVALID_ARGUMENT, "decode: bad n_logits or logits", NULL);
        for (uint32_t k = 0; k < item->n_tokens; k++)
            if (item->tokens[k] < 0 || item->tokens[k] >= COUNTER_VOCAB)
                return fail(SY_ERR_INVALID_ARGUMENT, "decode: token out of range", NULL);
        if ((uint64_t)item->seq->len + item->n_tokens > model->n_ctx)
            return fail(SY_ERR_CONTEXT_FULL, "decode: the sequence would pass n_ctx", NULL);
        for (uint32_t j = 0; j < i; j++)
            if (sy_decode_batch_item(batch, j)->seq == item->seq)
                return fail(SY_ERR_INVALID_ARGUMENT, "decode: a sequence appears twice", NULL);
        if (reserve(item->seq, item->seq->len + item->n_tokens) != SY_OK) return SY_ERR_OUT_OF_MEMORY;
    }
    /* Then run: append the tokens, and write a logits row for each of the last n_logits positions. */
    for (uint32_t i = 0; i < batch->n_items; i++) {
        const sy_decode_item *item = sy_decode_batch_item(batch, i);
        sy_seq *seq = item->seq;
        for (uint32_t k = 0; k < item->n_tokens; k++) {
            seq->tokens[seq->len + k] = item->tokens[k];
            uint32_t first_row = item->n_tokens - item->n_logits;
            if (k < first_row) continue;
            float *row = item->logits + (size_t)(k - first_row) * COUNTER_VOCAB;
            for (int v = 0; v < COUNTER_VOCAB; v++) row[v] = -10.0f;
            row[next_token(item->tokens[k])] = 10.0f;
        }
        seq->len += item->n_tokens;
    }
    return SY_OK;
}

/* --- The interface table, the entry ---------------------------------------------------------------------------- */

static const sy_engine_api counter_engine = {
    .struct_size = sizeof(sy_engine_api),
    .error_message = counter_error_message,
    .probe = counter_probe,
    .load = counter_load,
    .unload = counter_unload,
    .model_info = counter_model_info,
    .tokenize = counter_tokenize,
    .token_to_bytes = counter_token_to_bytes,
    .token_flags = counter_token_flags,
    .seq_create = counter_seq_create,
    .seq_free = counter_seq_free,
    .seq_length = counter_seq_length,
    .seq_truncate = counter_seq_truncate,
    .seq_fork = counter_seq_fork,
    .decode = counter_decode,
    .memory_usage = counter_memory_usage,
};

static sy_status counter_init(const sy_host_api *h) {
    if (h == NULL || h->abi_major != SY_ABI_VERSION_MAJOR) return SY_ERR_UNSUPPORTED;
    host = h;
    return SY_OK;
}

static void counter_deinit(void) { host = NULL; }

/* The options counter_load reads, so the host can list them (`switchyard plugins --options example-counter`) and
 * refuse a misspelt key or a value out of range before a load, naming the config line or the flag. */
static const sy_option_spec counter_options[] = {
    {sizeof(sy_option_spec), "ctx_size", SY_OPTION_UINT, "256", "most tokens one sequence may hold", 1, 65536, NULL},
};

static const sy_plugin_options_api counter_options_api = {
    sizeof(sy_plugin_options_api), sizeof counter_options / sizeof counter_options[0], sizeof(sy_option_spec),
    counter_options};

static const void *counter_get_interface(const char *id) {
    if (id != NULL && strcmp(id, SY_ENGINE_INTERFACE_ID) == 0) return &counter_engine;
    if (id != NULL && strcmp(id, SY_PLUGIN_OPTIONS_INTERFACE_ID) == 0) return &counter_options_api;
    return NULL; /* no state, sampling or drafter extensions */
}

SY_DEFINE_PLUGIN_ENTRY("example-counter", "0.1.0", "counts digits: the minimal example plugin", counter_init,
                         counter_deinit, counter_get_interface);
