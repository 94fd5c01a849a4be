/* See snapshot_capture.h. The snapshot writer takes a state extension and a model pointer it hands back to it;
 * here that pointer is the capture itself, so the same writer (chunking, checks, format) serves both halves. */
#include "persist/snapshot_capture.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"

typedef struct captured_chunk {
    uint32_t begin, end;
    uint8_t *data;
    size_t len;
} captured_chunk;

struct sy_snapshot_capture {
    const sy_engine_state_api *state; /* the engine's: during the take only */
    sy_model *model;
    sy_snapshot_key key;              /* strings owned (key_strings) */
    char *key_strings[4];
    int32_t *tokens;
    uint32_t n_tokens;
    captured_chunk *chunks;
    size_t n_chunks, cap_chunks;
    uint64_t bytes;
    const sy_seq *seq; /* during the take only */
};

typedef struct grow_sink {
    uint8_t *data;
    size_t len, cap;
} grow_sink;

static sy_status grow_write(void *user, const void *data, size_t len) {
    grow_sink *g = user;
    if (len > SIZE_MAX - g->len) return SY_ERR_OUT_OF_MEMORY;
    if (g->len + len > g->cap) {
        size_t cap = g->cap ? g->cap : 4096;
        while (cap < g->len + len) cap *= 2;
        g->data = sy_xrealloc(g->data, cap);
        g->cap = cap;
    }
    memcpy(g->data + g->len, data, len);
    g->len += len;
    return SY_OK;
}

static sy_snapshot_capture *capture_of(const sy_model *model) { return (sy_snapshot_capture *)(void *)model; }

/* The take asks the engine; the replay answers from the key (what the writer checks the engine's answer against),
 * so that it needs no model. 0 on overflow, which the writer refuses. */
static uint64_t proxy_chunk_bytes(const sy_model *model, uint32_t n_positions) {
    sy_snapshot_capture *c = capture_of(model);
    if (c->model != NULL) return c->state->state_chunk_bytes(c->model, n_positions);
    if (c->key.kv_bytes_per_token != 0 && n_positions > UINT64_MAX / c->key.kv_bytes_per_token) return 0;
    uint64_t kv = (uint64_t)n_positions * c->key.kv_bytes_per_token;
    return kv > UINT64_MAX - c->key.recurrent_bytes ? 0 : kv + c->key.recurrent_bytes;
}

/* The take: the engine's chunk into a copy, and on to the writer (which writes to /dev/null). */
static sy_status record_chunk(sy_model *model, const sy_seq *seq, uint32_t begin, uint32_t end,
                              const sy_state_writer *writer) {
    (void)seq;
    sy_snapshot_capture *c = capture_of(model);
    grow_sink g = {0};
    sy_state_writer mine = {sizeof mine, &g, grow_write};
    sy_status st = c->state->state_save_chunk(c->model, c->seq, begin, end, &mine);
    if (st != SY_OK) {
        free(g.data);
        return st;
    }
    if (c->n_chunks == c->cap_chunks) {
        c->cap_chunks = c->cap_chunks ? c->cap_chunks * 2 : 16;
        c->chunks = sy_xrealloc(c->chunks, c->cap_chunks * sizeof *c->chunks);
    }
    c->chunks[c->n_chunks++] = (captured_chunk){begin, end, g.data, g.len};
    c->bytes += g.len;
    return writer->write(writer->user, g.data, g.len);
}

/* The write: the copied chunk of [begin, end); a range the take did not cut is refused as the engine refused it,
 * so the writer widens it the same way. */
static sy_status replay_chunk(sy_model *model, const sy_seq *seq, uint32_t begin, uint32_t end,
                              const sy_state_writer *writer) {
    (void)seq;
    sy_snapshot_capture *c = capture_of(model);
    for (size_t i = 0; i < c->n_chunks; i++)
        if (c->chunks[i].begin == begin && c->chunks[i].end == end)
            return writer->write(writer->user, c->chunks[i].data, c->chunks[i].len);
    return SY_ERR_UNSUPPORTED;
}

static sy_status no_load(sy_model *model, sy_seq *seq, uint32_t begin, uint32_t end, const int32_t *tokens,
                         const sy_state_reader *reader) {
    (void)model, (void)seq, (void)begin, (void)end, (void)tokens, (void)reader;
    return SY_ERR_UNSUPPORTED;
}

static sy_engine_state_api proxy_api(sy_status (*save)(sy_model *, const sy_seq *, uint32_t, uint32_t,
                                                       const sy_state_writer *)) {
    sy_engine_state_api api;
    memset(&api, 0, sizeof api);
    api.struct_size = sizeof api;
    api.state_chunk_bytes = proxy_chunk_bytes;
    api.state_save_chunk = save;
    api.state_load_chunk = no_load;
    return api;
}

sy_snapshot_capture *sy_snapshot_capture_take(const sy_snapshot_key *key, const sy_engine_state_api *state, sy_model *model,
                                      const sy_seq *seq, const int32_t *tokens, uint32_t n_tokens, char *err,
                                      size_t err_size) {
    if (state == NULL || state->state_chunk_bytes == NULL || state->state_save_chunk == NULL) {
        snprintf(err, err_size, "the engine has no state extension");
        return NULL;
    }
    sy_snapshot_capture *c = sy_xcalloc(1, sizeof *c);
    c->state = state;
    c->model = model;
    c->key = *key;
    const char **strings[4] = {&c->key.fingerprint, &c->key.plugin_name, &c->key.plugin_version, &c->key.layout};
    for (int i = 0; i < 4; i++) {
        c->key_strings[i] = *strings[i] != NULL ? sy_strdup(*strings[i]) : NULL;
        *strings[i] = c->key_strings[i];
    }
    c->seq = seq;
    c->n_tokens = n_tokens;
    c->tokens = sy_xmalloc((n_tokens ? n_tokens : 1) * sizeof *c->tokens);
    memcpy(c->tokens, tokens, n_tokens * sizeof *tokens);
    int null_fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (null_fd < 0) {
        snprintf(err, err_size, "cannot open /dev/null");
        sy_snapshot_capture_free(c);
        return NULL;
    }
    sy_engine_state_api api = proxy_api(record_chunk);
    /* Stored as is: nothing is compressed here, on the engine loop. */
    sy_snapshot_write_options opts = {0, 0, SY_SNAPSHOT_CODEC_NONE};
    sy_snapshot_error e = sy_snapshot_write_fd(null_fd, key, &api, (sy_model *)(void *)c, seq, tokens, n_tokens,
                                               &opts, NULL, err, err_size);
    close(null_fd);
    c->seq = NULL;
    c->state = NULL; /* from here on the capture needs nothing of the engine */
    c->model = NULL;
    if (e != SY_SNAPSHOT_OK) {
        sy_snapshot_capture_free(c);
        return NULL;
    }
    return c;
}

void sy_snapshot_capture_replay(const sy_snapshot_capture *c, sy_engine_state_api *api, sy_model **model,
                                const sy_seq **seq) {
    *api = proxy_api(replay_chunk);
    *model = (sy_model *)(void *)c;
    *seq = (const sy_seq *)(const void *)c; /* not read: the replay serves the chunks */
}

sy_snapshot_error sy_snapshot_capture_write(const sy_snapshot_capture *c, const char *path, sy_snapshot_write_stats *stats,
                                        char *err, size_t err_size) {
    sy_engine_state_api api = proxy_api(replay_chunk);
    /* The sequence is not read: the replay serves the chunks; any non-NULL pointer satisfies the writer. */
    return sy_snapshot_write_file(path, &c->key, &api, (sy_model *)(void *)c, (const sy_seq *)(const void *)c,
                                  c->tokens, c->n_tokens, NULL, stats, err, err_size);
}

const sy_snapshot_key *sy_snapshot_capture_key(const sy_snapshot_capture *c) { return &c->key; }

const int32_t *sy_snapshot_capture_tokens(const sy_snapshot_capture *c, uint32_t *n_tokens) {
    *n_tokens = c->n_tokens;
    return c->tokens;
}

uint64_t sy_snapshot_capture_bytes(const sy_snapshot_capture *c) { return c->bytes; }

void sy_snapshot_capture_free(sy_snapshot_capture *c) {
    if (c == NULL) return;
    for (size_t i = 0; i < c->n_chunks; i++) free(c->chunks[i].data);
    free(c->chunks);
    free(c->tokens);
    for (int i = 0; i < 4; i++) free(c->key_strings[i]);
    free(c);
}
