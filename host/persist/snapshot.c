/*
 * KV snapshot files (see snapshot.h and docs/snapshot-format.md): the streaming writer, the atomic file write
 * and the checking reader. All integers are little-endian on disk, whatever the host.
 */
#include "persist/snapshot.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <xxhash.h>
#include <zstd.h>

/* ------------------------------------------------------------------------------------------------------------
 * Layout constants */

#define PREAMBLE_BYTES 16u      /* magic, version major/minor, header body size */
#define HEADER_FIXED_BYTES 40u  /* the fixed fields of the header body */
#define RECORD_BYTES 56u        /* a chunk record without its payload */
#define TRAILER_BYTES 32u
#define TAG_CHUNK 0x4b4e4843u   /* "CHNK" read as a little-endian u32 */
#define TAG_END 0x444e4554u     /* "TEND" */
#define CODEC_RAW 0u
#define CODEC_ZSTD 1u
#define CODEC_SHUFFLED 0x100u   /* flag: the payload is byte-planed by element size */
/* Future minors may append header fields; bounded so a hostile header size cannot ask for much. */
#define HEADER_SLACK_BYTES 65536u
#define DEFAULT_ZSTD_LEVEL 1 /* fast: a swap waits for the snapshot; -3 saves only ~1-4% more (snapshot_bench) */

/* ------------------------------------------------------------------------------------------------------------
 * Small helpers */

static void put_u16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
static void put_u32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put_u64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint16_t get_u16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t get_u32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static uint64_t get_u64(const uint8_t *p) { return (uint64_t)get_u32(p) | ((uint64_t)get_u32(p + 4) << 32); }

static sy_snapshot_error fail(char *err, size_t err_size, sy_snapshot_error e, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static sy_snapshot_error fail(char *err, size_t err_size, sy_snapshot_error e, const char *fmt, ...) {
    if (err != NULL && err_size > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, err_size, fmt, ap);
        va_end(ap);
    }
    return e;
}

const char *sy_snapshot_error_name(sy_snapshot_error e) {
    switch (e) {
    case SY_SNAPSHOT_OK: return "ok";
    case SY_SNAPSHOT_ERR_IO: return "io";
    case SY_SNAPSHOT_ERR_TRUNCATED: return "truncated";
    case SY_SNAPSHOT_ERR_FORMAT: return "format";
    case SY_SNAPSHOT_ERR_VERSION: return "version";
    case SY_SNAPSHOT_ERR_CHECKSUM: return "checksum";
    case SY_SNAPSHOT_ERR_KEY: return "key";
    case SY_SNAPSHOT_ERR_ENGINE: return "engine";
    case SY_SNAPSHOT_ERR_ARGUMENT: return "argument";
    }
    return "unknown";
}

void sy_snapshot_shuffle(const uint8_t *in, uint8_t *out, size_t len, uint32_t element_size) {
    if (element_size <= 1 || len / element_size == 0) {
        memcpy(out, in, len);
        return;
    }
    size_t n = len / element_size;
    if (element_size == 2) { /* F16/BF16, the common case: one pass, two planes (vectorizes) */
        uint8_t *lo = out, *hi = out + n;
        for (size_t i = 0; i < n; i++) {
            lo[i] = in[2 * i];
            hi[i] = in[2 * i + 1];
        }
    } else {
        for (uint32_t k = 0; k < element_size; k++) {
            uint8_t *plane = out + (size_t)k * n;
            const uint8_t *src = in + k;
            for (size_t i = 0; i < n; i++) plane[i] = src[i * element_size];
        }
    }
    size_t whole = n * element_size;
    memcpy(out + whole, in + whole, len - whole);
}

void sy_snapshot_unshuffle(const uint8_t *in, uint8_t *out, size_t len, uint32_t element_size) {
    if (element_size <= 1 || len / element_size == 0) {
        memcpy(out, in, len);
        return;
    }
    size_t n = len / element_size;
    if (element_size == 2) {
        const uint8_t *lo = in, *hi = in + n;
        for (size_t i = 0; i < n; i++) {
            out[2 * i] = lo[i];
            out[2 * i + 1] = hi[i];
        }
    } else {
        for (uint32_t k = 0; k < element_size; k++) {
            const uint8_t *plane = in + (size_t)k * n;
            uint8_t *dst = out + k;
            for (size_t i = 0; i < n; i++) dst[i * element_size] = plane[i];
        }
    }
    size_t whole = n * element_size;
    memcpy(out + whole, in + whole, len - whole);
}

/* Grow a scratch buffer to at least n bytes; false when memory is short. */
static bool reserve(uint8_t **buf, size_t *cap, size_t n) {
    if (n <= *cap) return true;
    uint8_t *p = realloc(*buf, n ? n : 1);
    if (p == NULL) return false;
    *buf = p;
    *cap = n;
    return true;
}

/* The byte count of a chunk of n positions as the key says it must be; false on overflow. */
static bool chunk_bytes_of(const sy_snapshot_key *key, uint32_t n_positions, uint64_t *out) {
    if (key->kv_bytes_per_token != 0 && n_positions > UINT64_MAX / key->kv_bytes_per_token) return false;
    uint64_t kv = (uint64_t)n_positions * key->kv_bytes_per_token;
    if (kv > UINT64_MAX - key->recurrent_bytes) return false;
    *out = kv + key->recurrent_bytes;
    return true;
}

static sy_snapshot_error check_key_bounds(const sy_snapshot_key *key, char *err, size_t err_size) {
    const char *names[4] = {"fingerprint", "plugin name", "plugin version", "layout"};
    const char *values[4] = {key->fingerprint, key->plugin_name, key->plugin_version, key->layout};
    for (int i = 0; i < 4; i++) {
        if (values[i] == NULL) return fail(err, err_size, SY_SNAPSHOT_ERR_ARGUMENT, "the key has no %s", names[i]);
        if (strlen(values[i]) > SY_SNAPSHOT_MAX_STRING)
            return fail(err, err_size, SY_SNAPSHOT_ERR_ARGUMENT, "the key's %s is longer than %u bytes", names[i],
                        SY_SNAPSHOT_MAX_STRING);
    }
    if (key->element_size < 1 || key->element_size > SY_SNAPSHOT_MAX_ELEMENT_SIZE)
        return fail(err, err_size, SY_SNAPSHOT_ERR_ARGUMENT, "element size %u is outside 1..%u",
                    (unsigned)key->element_size, SY_SNAPSHOT_MAX_ELEMENT_SIZE);
    if (key->kv_bytes_per_token < 1 || key->kv_bytes_per_token > SY_SNAPSHOT_MAX_KV_BYTES_PER_TOKEN)
        return fail(err, err_size, SY_SNAPSHOT_ERR_ARGUMENT, "kv bytes per token %llu is outside 1..%llu",
                    (unsigned long long)key->kv_bytes_per_token,
                    (unsigned long long)SY_SNAPSHOT_MAX_KV_BYTES_PER_TOKEN);
    if (key->recurrent_bytes > SY_SNAPSHOT_MAX_RECURRENT_BYTES)
        return fail(err, err_size, SY_SNAPSHOT_ERR_ARGUMENT, "recurrent bytes %llu are more than %llu",
                    (unsigned long long)key->recurrent_bytes, (unsigned long long)SY_SNAPSHOT_MAX_RECURRENT_BYTES);
    return SY_SNAPSHOT_OK;
}

/* ------------------------------------------------------------------------------------------------------------
 * Writer */

static sy_snapshot_error write_all(int fd, const void *data, size_t len, uint64_t *written, char *err,
                                   size_t err_size) {
    const uint8_t *p = data;
    while (len > 0) {
        ssize_t w = write(fd, p, len);
        if (w < 0) {
            if (errno == EINTR) continue;
            return fail(err, err_size, SY_SNAPSHOT_ERR_IO, "write: %s", strerror(errno));
        }
        if (w == 0) return fail(err, err_size, SY_SNAPSHOT_ERR_IO, "write: wrote nothing");
        p += w;
        len -= (size_t)w;
        *written += (uint64_t)w;
    }
    return SY_SNAPSHOT_OK;
}

/* Collects one chunk from the engine's writer callbacks, never past the size the engine announced. */
typedef struct chunk_sink {
    uint8_t *buf;
    size_t len, expected;
    bool overflow;
} chunk_sink;

static sy_status sink_write(void *user, const void *data, size_t len) {
    chunk_sink *sink = user;
    if (len == 0) return SY_OK;
    if (data == NULL || len > sink->expected - sink->len) {
        sink->overflow = true;
        return SY_ERR_FORMAT;
    }
    memcpy(sink->buf + sink->len, data, len);
    sink->len += len;
    return SY_OK;
}

typedef struct writer_scratch {
    uint8_t *raw, *shuffled, *packed;
    size_t raw_cap, shuffled_cap, packed_cap;
    ZSTD_CCtx *cctx;
} writer_scratch;

static void scratch_free(writer_scratch *w) {
    free(w->raw);
    free(w->shuffled);
    free(w->packed);
    ZSTD_freeCCtx(w->cctx);
}

/* The header: preamble, body (fixed fields, strings, tokens) and its checksum, in one buffer. */
static uint8_t *build_header(const sy_snapshot_key *key, const int32_t *tokens, uint32_t n_tokens,
                             uint32_t chunk_tokens, size_t *out_len) {
    const char *strings[4] = {key->fingerprint, key->plugin_name, key->plugin_version, key->layout};
    size_t body = HEADER_FIXED_BYTES;
    for (int i = 0; i < 4; i++) body += 2 + strlen(strings[i]);
    body += (size_t)n_tokens * 4;
    size_t total = PREAMBLE_BYTES + body + 8;
    uint8_t *h = malloc(total);
    if (h == NULL) return NULL;
    memcpy(h, SY_SNAPSHOT_MAGIC, 8);
    put_u16(h + 8, SY_SNAPSHOT_VERSION_MAJOR);
    put_u16(h + 10, SY_SNAPSHOT_VERSION_MINOR);
    put_u32(h + 12, (uint32_t)body);
    uint8_t *p = h + PREAMBLE_BYTES;
    put_u32(p, key->element_size);
    put_u32(p + 4, chunk_tokens);
    put_u64(p + 8, key->kv_bytes_per_token);
    put_u64(p + 16, key->recurrent_bytes);
    put_u32(p + 24, n_tokens);
    put_u32(p + 28, 0); /* flags */
    put_u64(p + 32, (uint64_t)time(NULL));
    p += HEADER_FIXED_BYTES;
    for (int i = 0; i < 4; i++) {
        size_t n = strlen(strings[i]);
        put_u16(p, (uint16_t)n);
        memcpy(p + 2, strings[i], n);
        p += 2 + n;
    }
    for (uint32_t i = 0; i < n_tokens; i++, p += 4) put_u32(p, (uint32_t)tokens[i]);
    put_u64(p, XXH64(h, PREAMBLE_BYTES + body, 0));
    *out_len = total;
    return h;
}

/* Encode one chunk held in w->raw (raw_len bytes) and write its record and payload. */
static sy_snapshot_error write_chunk(int fd, writer_scratch *w, const sy_snapshot_key *key,
                                     const sy_snapshot_write_options *opts, uint32_t begin, uint32_t end,
                                     size_t raw_len, XXH64_state_t *chain, sy_snapshot_write_stats *stats,
                                     char *err, size_t err_size) {
    uint32_t codec = CODEC_RAW;
    const uint8_t *payload = w->raw;
    size_t payload_len = raw_len;
    if (opts->codec != SY_SNAPSHOT_CODEC_NONE) {
        bool shuffle = opts->codec == SY_SNAPSHOT_CODEC_AUTO && key->element_size > 1;
        const uint8_t *src = w->raw;
        if (shuffle) {
            if (!reserve(&w->shuffled, &w->shuffled_cap, raw_len))
                return fail(err, err_size, SY_SNAPSHOT_ERR_IO, "out of memory for a %zu-byte chunk", raw_len);
            sy_snapshot_shuffle(w->raw, w->shuffled, raw_len, key->element_size);
            src = w->shuffled;
        }
        size_t bound = ZSTD_compressBound(raw_len);
        if (!reserve(&w->packed, &w->packed_cap, bound))
            return fail(err, err_size, SY_SNAPSHOT_ERR_IO, "out of memory for a %zu-byte chunk", bound);
        size_t n = ZSTD_compressCCtx(w->cctx, w->packed, bound, src, raw_len, opts->zstd_level);
        if (ZSTD_isError(n))
            return fail(err, err_size, SY_SNAPSHOT_ERR_IO, "zstd: %s", ZSTD_getErrorName(n));
        /* Keep zstd's frame unless it does not pay (AUTO); the measurement codec keeps it always. */
        if (n < raw_len || opts->codec == SY_SNAPSHOT_CODEC_ZSTD_PLAIN) {
            codec = CODEC_ZSTD | (shuffle ? CODEC_SHUFFLED : 0u);
            payload = w->packed;
            payload_len = n;
        }
    }
    uint8_t record[RECORD_BYTES];
    put_u32(record, TAG_CHUNK);
    put_u32(record + 4, codec);
    put_u32(record + 8, begin);
    put_u32(record + 12, end);
    put_u64(record + 16, raw_len);
    put_u64(record + 24, payload_len);
    put_u64(record + 32, XXH64(w->raw, raw_len, 0));
    put_u64(record + 40, XXH64(payload, payload_len, 0));
    put_u64(record + 48, XXH64(record, 48, 0));
    XXH64_update(chain, record, sizeof record);
    sy_snapshot_error e = write_all(fd, record, sizeof record, &stats->file_bytes, err, err_size);
    if (e == SY_SNAPSHOT_OK) e = write_all(fd, payload, payload_len, &stats->file_bytes, err, err_size);
    if (e != SY_SNAPSHOT_OK) return e;
    stats->raw_bytes += raw_len;
    stats->stored_bytes += payload_len;
    stats->n_chunks++;
    return SY_SNAPSHOT_OK;
}

sy_snapshot_error sy_snapshot_write_fd(int fd, const sy_snapshot_key *key, const sy_engine_state_api *state,
                                       sy_model *model, const sy_seq *seq, const int32_t *tokens, uint32_t n_tokens,
                                       const sy_snapshot_write_options *options, sy_snapshot_write_stats *stats_out,
                                       char *err, size_t err_size) {
    if (key == NULL || state == NULL || model == NULL || seq == NULL || tokens == NULL)
        return fail(err, err_size, SY_SNAPSHOT_ERR_ARGUMENT, "snapshot write: missing key, engine, sequence or tokens");
    if (!SY_HAS_FIELD(state, sy_engine_state_api, state_load_chunk) || state->state_save_chunk == NULL ||
        state->state_chunk_bytes == NULL)
        return fail(err, err_size, SY_SNAPSHOT_ERR_ENGINE, "the engine's state extension is incomplete");
    sy_snapshot_error e = check_key_bounds(key, err, err_size);
    if (e != SY_SNAPSHOT_OK) return e;
    if (n_tokens == 0 || n_tokens > SY_SNAPSHOT_MAX_TOKENS)
        return fail(err, err_size, SY_SNAPSHOT_ERR_ARGUMENT, "%u tokens to save: must be 1..%u", (unsigned)n_tokens,
                    SY_SNAPSHOT_MAX_TOKENS);
    for (uint32_t i = 0; i < n_tokens; i++)
        if (tokens[i] < 0)
            return fail(err, err_size, SY_SNAPSHOT_ERR_ARGUMENT, "token %ld at %u is negative", (long)tokens[i],
                        (unsigned)i);
    sy_snapshot_write_options opts = {0};
    if (options != NULL) opts = *options;
    if (opts.chunk_tokens == 0) opts.chunk_tokens = SY_SNAPSHOT_DEFAULT_CHUNK_TOKENS;
    if (opts.zstd_level == 0) opts.zstd_level = DEFAULT_ZSTD_LEVEL;
    sy_snapshot_write_stats stats = {0};

    size_t header_len = 0;
    uint8_t *header = build_header(key, tokens, n_tokens, opts.chunk_tokens, &header_len);
    if (header == NULL) return fail(err, err_size, SY_SNAPSHOT_ERR_IO, "out of memory for the snapshot header");
    e = write_all(fd, header, header_len, &stats.file_bytes, err, err_size);
    free(header);
    if (e != SY_SNAPSHOT_OK) return e;

    writer_scratch w = {0};
    w.cctx = ZSTD_createCCtx();
    XXH64_state_t *chain = XXH64_createState();
    if (w.cctx == NULL || chain == NULL) {
        scratch_free(&w);
        XXH64_freeState(chain);
        return fail(err, err_size, SY_SNAPSHOT_ERR_IO, "out of memory for the compressor");
    }
    XXH64_reset(chain, 0);
    for (uint32_t begin = 0; begin < n_tokens && e == SY_SNAPSHOT_OK;) {
        uint32_t end = n_tokens - begin < opts.chunk_tokens ? n_tokens : begin + opts.chunk_tokens;
        for (;;) {
            uint64_t expected = 0;
            if (!chunk_bytes_of(key, end - begin, &expected) || expected > SY_SNAPSHOT_DEFAULT_MAX_CHUNK_BYTES) {
                e = fail(err, err_size, SY_SNAPSHOT_ERR_ENGINE,
                         "the chunk [%u, %u) would be larger than %llu bytes", (unsigned)begin, (unsigned)end,
                         (unsigned long long)SY_SNAPSHOT_DEFAULT_MAX_CHUNK_BYTES);
                break;
            }
            uint64_t engine_bytes = state->state_chunk_bytes(model, end - begin);
            if (engine_bytes != expected) {
                e = fail(err, err_size, SY_SNAPSHOT_ERR_ENGINE,
                         "the engine says a chunk of %u positions is %llu bytes, its state info %llu",
                         (unsigned)(end - begin), (unsigned long long)engine_bytes, (unsigned long long)expected);
                break;
            }
            if (!reserve(&w.raw, &w.raw_cap, (size_t)expected)) {
                e = fail(err, err_size, SY_SNAPSHOT_ERR_IO, "out of memory for a %llu-byte chunk",
                         (unsigned long long)expected);
                break;
            }
            chunk_sink sink = {w.raw, 0, (size_t)expected, false};
            sy_state_writer writer = {sizeof writer, &sink, sink_write};
            sy_status st = state->state_save_chunk(model, seq, begin, end, &writer);
            if (st == SY_ERR_UNSUPPORTED && end < n_tokens && !sink.overflow) {
                /* The engine cannot cut here (recurrent state known only at some ends): a longer chunk. */
                end = n_tokens - end < opts.chunk_tokens ? n_tokens : end + opts.chunk_tokens;
                continue;
            }
            if (st != SY_OK || sink.overflow || sink.len != expected) {
                e = fail(err, err_size, SY_SNAPSHOT_ERR_ENGINE, "the engine saved the chunk [%u, %u) %s",
                         (unsigned)begin, (unsigned)end,
                         st != SY_OK ? "with an error"
                         : sink.overflow ? "with more bytes than state_chunk_bytes"
                                         : "with fewer bytes than state_chunk_bytes");
                break;
            }
            e = write_chunk(fd, &w, key, &opts, begin, end, sink.len, chain, &stats, err, err_size);
            break;
        }
        begin = end;
    }
    if (e == SY_SNAPSHOT_OK) {
        uint8_t trailer[TRAILER_BYTES];
        put_u32(trailer, TAG_END);
        put_u32(trailer + 4, stats.n_chunks);
        put_u32(trailer + 8, n_tokens);
        put_u32(trailer + 12, 0);
        put_u64(trailer + 16, XXH64_digest(chain));
        put_u64(trailer + 24, XXH64(trailer, 24, 0));
        e = write_all(fd, trailer, sizeof trailer, &stats.file_bytes, err, err_size);
    }
    scratch_free(&w);
    XXH64_freeState(chain);
    if (e == SY_SNAPSHOT_OK && stats_out != NULL) *stats_out = stats;
    return e;
}

bool sy_snapshot_is_temp_name(const char *name) {
    return name != NULL && name[0] == '.' && strstr(name, ".tmp.") != NULL;
}

static atomic_uint temp_counter;

/* The folder part of a path ("." when there is none); malloc'd. */
static char *folder_of(const char *path) {
    const char *slash = strrchr(path, '/');
    if (slash == NULL) {
        char *d = malloc(2);
        if (d != NULL) memcpy(d, ".", 2);
        return d;
    }
    size_t n = slash == path ? 1 : (size_t)(slash - path);
    char *d = malloc(n + 1);
    if (d == NULL) return NULL;
    memcpy(d, path, n);
    d[n] = '\0';
    return d;
}

sy_snapshot_error sy_snapshot_write_file(const char *path, const sy_snapshot_key *key,
                                         const sy_engine_state_api *state, sy_model *model, const sy_seq *seq,
                                         const int32_t *tokens, uint32_t n_tokens,
                                         const sy_snapshot_write_options *opts, sy_snapshot_write_stats *stats,
                                         char *err, size_t err_size) {
    if (path == NULL || *path == '\0')
        return fail(err, err_size, SY_SNAPSHOT_ERR_ARGUMENT, "snapshot write: no path");
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    if (*base == '\0') return fail(err, err_size, SY_SNAPSHOT_ERR_ARGUMENT, "snapshot path %s names a folder", path);
    char *folder = folder_of(path);
    size_t tmp_size = strlen(path) + 64;
    char *tmp = malloc(tmp_size);
    if (folder == NULL || tmp == NULL) {
        free(folder);
        free(tmp);
        return fail(err, err_size, SY_SNAPSHOT_ERR_IO, "out of memory");
    }
    /* The same folder, so rename is atomic; a dot name with ".tmp.", which listings skip (the name cut to 100
     * bytes, so that a long one still leaves room for the suffix). */
    snprintf(tmp, tmp_size, "%.*s.%.100s.tmp.%ld.%u", (int)(base - path), path, base, (long)getpid(),
             atomic_fetch_add(&temp_counter, 1));
    sy_snapshot_error e = SY_SNAPSHOT_OK;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        e = fail(err, err_size, SY_SNAPSHOT_ERR_IO, "cannot create %s: %s", tmp, strerror(errno));
        goto out;
    }
    char why[512] = "";
    e = sy_snapshot_write_fd(fd, key, state, model, seq, tokens, n_tokens, opts, stats, why, sizeof why);
    if (e != SY_SNAPSHOT_OK) {
        fail(err, err_size, e, "%s: %s", path, why);
    } else if (fsync(fd) != 0) {
        e = fail(err, err_size, SY_SNAPSHOT_ERR_IO, "%s: fsync: %s", path, strerror(errno));
    }
    if (close(fd) != 0 && e == SY_SNAPSHOT_OK)
        e = fail(err, err_size, SY_SNAPSHOT_ERR_IO, "%s: close: %s", path, strerror(errno));
    if (e == SY_SNAPSHOT_OK && rename(tmp, path) != 0)
        e = fail(err, err_size, SY_SNAPSHOT_ERR_IO, "rename to %s: %s", path, strerror(errno));
    if (e != SY_SNAPSHOT_OK) {
        unlink(tmp);
        goto out;
    }
    /* The rename itself must survive a power loss: sync the folder's entry too. */
    int dir_fd = open(folder, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir_fd < 0 || fsync(dir_fd) != 0)
        e = fail(err, err_size, SY_SNAPSHOT_ERR_IO, "fsync of folder %s: %s", folder, strerror(errno));
    if (dir_fd >= 0) close(dir_fd);
out:
    free(folder);
    free(tmp);
    return e;
}

/* ------------------------------------------------------------------------------------------------------------
 * Reader */

struct sy_snapshot {
    /* Source: a file descriptor (owned) or borrowed memory. */
    int fd;
    const uint8_t *mem;
    uint64_t size, pos;
    sy_snapshot_limits limits;

    unsigned major, minor;
    char *strings[4];
    sy_snapshot_key key;
    int32_t *tokens;
    uint32_t n_tokens;
    uint32_t chunk_tokens;
    uint64_t created;

    uint32_t next_begin; /* where the next chunk must begin */
    uint32_t n_chunks;
    bool done;
    sy_snapshot_error failed; /* a reader that failed stays failed */
    XXH64_state_t *chain;

    uint8_t *stored, *raw, *planes;
    size_t stored_cap, raw_cap, planes_cap;
    ZSTD_DCtx *dctx;
};

/* Read exactly n bytes at the current position. */
static sy_snapshot_error src_read(sy_snapshot *s, void *dst, size_t n, const char *what, char *err,
                                  size_t err_size) {
    if (n > s->size - s->pos)
        return fail(err, err_size, SY_SNAPSHOT_ERR_TRUNCATED,
                    "the file ends in %s (%llu bytes needed at offset %llu, %llu left)", what,
                    (unsigned long long)n, (unsigned long long)s->pos, (unsigned long long)(s->size - s->pos));
    if (s->mem != NULL) {
        memcpy(dst, s->mem + s->pos, n);
        s->pos += n;
        return SY_SNAPSHOT_OK;
    }
    uint8_t *p = dst;
    size_t left = n;
    while (left > 0) {
        ssize_t r = read(s->fd, p, left);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return fail(err, err_size, SY_SNAPSHOT_ERR_IO, "reading %s: %s", what, strerror(errno));
        if (r == 0)
            return fail(err, err_size, SY_SNAPSHOT_ERR_TRUNCATED, "the file ends in %s (it shrank while read)", what);
        p += r;
        left -= (size_t)r;
    }
    s->pos += n;
    return SY_SNAPSHOT_OK;
}

void sy_snapshot_close(sy_snapshot *s) {
    if (s == NULL) return;
    if (s->mem == NULL && s->fd >= 0) close(s->fd);
    for (int i = 0; i < 4; i++) free(s->strings[i]);
    free(s->tokens);
    free(s->stored);
    free(s->raw);
    free(s->planes);
    ZSTD_freeDCtx(s->dctx);
    XXH64_freeState(s->chain);
    free(s);
}

/* A bounded cursor over the header body. */
typedef struct cursor {
    const uint8_t *p;
    size_t left;
} cursor;

static bool take(cursor *c, size_t n, const uint8_t **out) {
    if (n > c->left) return false;
    *out = c->p;
    c->p += n;
    c->left -= n;
    return true;
}

static sy_snapshot_error parse_header(sy_snapshot *s, const uint8_t *body, size_t body_len, char *err,
                                      size_t err_size) {
    cursor c = {body, body_len};
    const uint8_t *f;
    if (!take(&c, HEADER_FIXED_BYTES, &f))
        return fail(err, err_size, SY_SNAPSHOT_ERR_FORMAT, "the header is %zu bytes, fewer than its %u fixed ones",
                    body_len, HEADER_FIXED_BYTES);
    s->key.element_size = get_u32(f);
    s->chunk_tokens = get_u32(f + 4);
    s->key.kv_bytes_per_token = get_u64(f + 8);
    s->key.recurrent_bytes = get_u64(f + 16);
    s->n_tokens = get_u32(f + 24);
    uint32_t flags = get_u32(f + 28);
    s->created = get_u64(f + 32);
    if (s->key.element_size < 1 || s->key.element_size > SY_SNAPSHOT_MAX_ELEMENT_SIZE)
        return fail(err, err_size, SY_SNAPSHOT_ERR_FORMAT, "element size %u is outside 1..%u",
                    (unsigned)s->key.element_size, SY_SNAPSHOT_MAX_ELEMENT_SIZE);
    if (s->key.kv_bytes_per_token < 1 || s->key.kv_bytes_per_token > SY_SNAPSHOT_MAX_KV_BYTES_PER_TOKEN)
        return fail(err, err_size, SY_SNAPSHOT_ERR_FORMAT, "kv bytes per token %llu is outside 1..%llu",
                    (unsigned long long)s->key.kv_bytes_per_token,
                    (unsigned long long)SY_SNAPSHOT_MAX_KV_BYTES_PER_TOKEN);
    if (s->key.recurrent_bytes > SY_SNAPSHOT_MAX_RECURRENT_BYTES)
        return fail(err, err_size, SY_SNAPSHOT_ERR_FORMAT, "recurrent bytes %llu are more than %llu",
                    (unsigned long long)s->key.recurrent_bytes, (unsigned long long)SY_SNAPSHOT_MAX_RECURRENT_BYTES);
    if (s->n_tokens < 1 || s->n_tokens > s->limits.max_tokens)
        return fail(err, err_size, SY_SNAPSHOT_ERR_FORMAT, "token count %u is outside 1..%u", (unsigned)s->n_tokens,
                    (unsigned)s->limits.max_tokens);
    if (flags != 0 && s->minor <= SY_SNAPSHOT_VERSION_MINOR)
        return fail(err, err_size, SY_SNAPSHOT_ERR_FORMAT, "unknown header flags 0x%x", (unsigned)flags);
    static const char *const names[4] = {"fingerprint", "plugin name", "plugin version", "layout"};
    for (int i = 0; i < 4; i++) {
        const uint8_t *len_bytes, *text;
        if (!take(&c, 2, &len_bytes))
            return fail(err, err_size, SY_SNAPSHOT_ERR_FORMAT, "the header ends before the %s", names[i]);
        uint16_t n = get_u16(len_bytes);
        if (n > SY_SNAPSHOT_MAX_STRING)
            return fail(err, err_size, SY_SNAPSHOT_ERR_FORMAT, "the %s is %u bytes, more than %u", names[i],
                        (unsigned)n, SY_SNAPSHOT_MAX_STRING);
        if (!take(&c, n, &text))
            return fail(err, err_size, SY_SNAPSHOT_ERR_FORMAT, "the %s (%u bytes) runs past the header", names[i],
                        (unsigned)n);
        if (memchr(text, '\0', n) != NULL)
            return fail(err, err_size, SY_SNAPSHOT_ERR_FORMAT, "the %s holds a NUL byte", names[i]);
        s->strings[i] = malloc((size_t)n + 1);
        if (s->strings[i] == NULL) return fail(err, err_size, SY_SNAPSHOT_ERR_IO, "out of memory");
        memcpy(s->strings[i], text, n);
        s->strings[i][n] = '\0';
    }
    s->key.fingerprint = s->strings[0];
    s->key.plugin_name = s->strings[1];
    s->key.plugin_version = s->strings[2];
    s->key.layout = s->strings[3];
    const uint8_t *ids;
    if (!take(&c, (size_t)s->n_tokens * 4, &ids))
        return fail(err, err_size, SY_SNAPSHOT_ERR_FORMAT, "the token ledger (%u tokens) runs past the header",
                    (unsigned)s->n_tokens);
    s->tokens = malloc((size_t)s->n_tokens * sizeof *s->tokens);
    if (s->tokens == NULL) return fail(err, err_size, SY_SNAPSHOT_ERR_IO, "out of memory for the token ledger");
    for (uint32_t i = 0; i < s->n_tokens; i++) {
        uint32_t v = get_u32(ids + (size_t)i * 4);
        if (v > INT32_MAX)
            return fail(err, err_size, SY_SNAPSHOT_ERR_FORMAT, "token at %u is negative", (unsigned)i);
        s->tokens[i] = (int32_t)v;
    }
    /* Fields a newer minor appended are skipped; the same minor must not leave anything unexplained. */
    if (c.left != 0 && s->minor <= SY_SNAPSHOT_VERSION_MINOR)
        return fail(err, err_size, SY_SNAPSHOT_ERR_FORMAT, "the header has %zu bytes after its last field", c.left);
    return SY_SNAPSHOT_OK;
}

static sy_snapshot_error open_common(sy_snapshot *s, char *err, size_t err_size) {
    uint8_t pre[PREAMBLE_BYTES];
    sy_snapshot_error e = src_read(s, pre, sizeof pre, "the preamble", err, err_size);
    if (e == SY_SNAPSHOT_ERR_TRUNCATED)
        return fail(err, err_size, SY_SNAPSHOT_ERR_FORMAT, "not a snapshot: %llu bytes, shorter than a preamble",
                    (unsigned long long)s->size);
    if (e != SY_SNAPSHOT_OK) return e;
    if (memcmp(pre, SY_SNAPSHOT_MAGIC, 8) != 0)
        return fail(err, err_size, SY_SNAPSHOT_ERR_FORMAT, "not a snapshot (bad magic)");
    s->major = get_u16(pre + 8);
    s->minor = get_u16(pre + 10);
    if (s->major != SY_SNAPSHOT_VERSION_MAJOR)
        return fail(err, err_size, SY_SNAPSHOT_ERR_VERSION, "format version %u.%u; this host reads %u.x", s->major,
                    s->minor, SY_SNAPSHOT_VERSION_MAJOR);
    uint32_t body_len = get_u32(pre + 12);
    uint64_t most = HEADER_FIXED_BYTES + 4 * (2 + (uint64_t)SY_SNAPSHOT_MAX_STRING) +
                    4 * (uint64_t)s->limits.max_tokens + HEADER_SLACK_BYTES;
    if (body_len < HEADER_FIXED_BYTES || body_len > most)
        return fail(err, err_size, SY_SNAPSHOT_ERR_FORMAT, "header size %u is outside %u..%llu", (unsigned)body_len,
                    HEADER_FIXED_BYTES, (unsigned long long)most);
    if ((uint64_t)body_len + 8 > s->size - s->pos)
        return fail(err, err_size, SY_SNAPSHOT_ERR_TRUNCATED, "the file ends inside its %u-byte header",
                    (unsigned)body_len);
    uint8_t *body = malloc((size_t)body_len + 8);
    if (body == NULL) return fail(err, err_size, SY_SNAPSHOT_ERR_IO, "out of memory for the header");
    e = src_read(s, body, (size_t)body_len + 8, "the header", err, err_size);
    if (e == SY_SNAPSHOT_OK) {
        XXH64_state_t *h = XXH64_createState();
        if (h == NULL) {
            e = fail(err, err_size, SY_SNAPSHOT_ERR_IO, "out of memory");
        } else {
            XXH64_reset(h, 0);
            XXH64_update(h, pre, sizeof pre);
            XXH64_update(h, body, body_len);
            if (XXH64_digest(h) != get_u64(body + body_len))
                e = fail(err, err_size, SY_SNAPSHOT_ERR_CHECKSUM, "header checksum mismatch");
            XXH64_freeState(h);
        }
    }
    if (e == SY_SNAPSHOT_OK) e = parse_header(s, body, body_len, err, err_size);
    free(body);
    if (e != SY_SNAPSHOT_OK) return e;
    s->chain = XXH64_createState();
    s->dctx = ZSTD_createDCtx();
    if (s->chain == NULL || s->dctx == NULL) return fail(err, err_size, SY_SNAPSHOT_ERR_IO, "out of memory");
    XXH64_reset(s->chain, 0);
    return SY_SNAPSHOT_OK;
}

static sy_snapshot *new_reader(const sy_snapshot_limits *limits) {
    sy_snapshot *s = calloc(1, sizeof *s);
    if (s == NULL) return NULL;
    s->fd = -1;
    if (limits != NULL) s->limits = *limits;
    if (s->limits.max_chunk_bytes == 0) s->limits.max_chunk_bytes = SY_SNAPSHOT_DEFAULT_MAX_CHUNK_BYTES;
    if (s->limits.max_tokens == 0 || s->limits.max_tokens > SY_SNAPSHOT_MAX_TOKENS)
        s->limits.max_tokens = SY_SNAPSHOT_MAX_TOKENS;
    return s;
}

sy_snapshot_error sy_snapshot_open_file(const char *path, const sy_snapshot_limits *limits, sy_snapshot **out,
                                        char *err, size_t err_size) {
    if (out == NULL || path == NULL) return fail(err, err_size, SY_SNAPSHOT_ERR_ARGUMENT, "snapshot open: no path");
    *out = NULL;
    sy_snapshot *s = new_reader(limits);
    if (s == NULL) return fail(err, err_size, SY_SNAPSHOT_ERR_IO, "out of memory");
    s->fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (s->fd < 0 || fstat(s->fd, &st) != 0) {
        sy_snapshot_error e = fail(err, err_size, SY_SNAPSHOT_ERR_IO, "cannot open: %s", strerror(errno));
        sy_snapshot_close(s);
        return e;
    }
    if (!S_ISREG(st.st_mode)) {
        sy_snapshot_close(s);
        return fail(err, err_size, SY_SNAPSHOT_ERR_FORMAT, "not a regular file");
    }
    s->size = (uint64_t)st.st_size;
    sy_snapshot_error e = open_common(s, err, err_size);
    if (e != SY_SNAPSHOT_OK) {
        sy_snapshot_close(s);
        return e;
    }
    *out = s;
    return SY_SNAPSHOT_OK;
}

sy_snapshot_error sy_snapshot_open_memory(const void *data, size_t len, const sy_snapshot_limits *limits,
                                          sy_snapshot **out, char *err, size_t err_size) {
    if (out == NULL || (data == NULL && len > 0))
        return fail(err, err_size, SY_SNAPSHOT_ERR_ARGUMENT, "snapshot open: no data");
    *out = NULL;
    static const uint8_t empty[1] = {0};
    sy_snapshot *s = new_reader(limits);
    if (s == NULL) return fail(err, err_size, SY_SNAPSHOT_ERR_IO, "out of memory");
    s->mem = data != NULL ? data : empty;
    s->size = len;
    sy_snapshot_error e = open_common(s, err, err_size);
    if (e != SY_SNAPSHOT_OK) {
        sy_snapshot_close(s);
        return e;
    }
    *out = s;
    return SY_SNAPSHOT_OK;
}

const sy_snapshot_key *sy_snapshot_get_key(const sy_snapshot *s) { return &s->key; }

const int32_t *sy_snapshot_tokens(const sy_snapshot *s, uint32_t *n_tokens) {
    if (n_tokens != NULL) *n_tokens = s->n_tokens;
    return s->tokens;
}

void sy_snapshot_version(const sy_snapshot *s, unsigned *major, unsigned *minor) {
    if (major != NULL) *major = s->major;
    if (minor != NULL) *minor = s->minor;
}

uint64_t sy_snapshot_created(const sy_snapshot *s) { return s->created; }

static bool same_string(const char *a, const char *b) { return a != NULL && b != NULL && strcmp(a, b) == 0; }

sy_snapshot_error sy_snapshot_key_check(const sy_snapshot_key *have, const sy_snapshot_key *want, char *reason,
                                        size_t reason_size) {
    return sy_snapshot_key_accepts(have, want, NULL, NULL, reason, reason_size);
}

sy_snapshot_error sy_snapshot_key_accepts(const sy_snapshot_key *have, const sy_snapshot_key *want,
                                          sy_snapshot_can_read_fn can_read, void *ctx, char *reason,
                                          size_t reason_size) {
    if (have == NULL || want == NULL)
        return fail(reason, reason_size, SY_SNAPSHOT_ERR_ARGUMENT, "key check: a key is missing");
    const char *names[4] = {"model fingerprint", "plugin", "plugin version", "state layout"};
    const char *a[4] = {have->fingerprint, have->plugin_name, have->plugin_version, have->layout};
    const char *b[4] = {want->fingerprint, want->plugin_name, want->plugin_version, want->layout};
    for (int i = 0; i < 2; i++) { /* the model and the plugin: never negotiable */
        if (!same_string(a[i], b[i]))
            return fail(reason, reason_size, SY_SNAPSHOT_ERR_KEY, "%s differs (snapshot '%.80s', model '%.80s')",
                        names[i], a[i] ? a[i] : "", b[i] ? b[i] : "");
    }
    bool same_version = same_string(a[2], b[2]), same_layout = same_string(a[3], b[3]);
    if (!same_version || !same_layout) {
        /* Another build of the plugin wrote it: the plugin decides whether it reads that layout and version. */
        int i = same_version ? 3 : 2;
        if (can_read == NULL || a[2] == NULL || a[3] == NULL || !can_read(ctx, a[3], a[2]))
            return fail(reason, reason_size, SY_SNAPSHOT_ERR_KEY,
                        "%s differs (snapshot '%.80s', model '%.80s')%s", names[i], a[i] ? a[i] : "",
                        b[i] ? b[i] : "", can_read ? " and the plugin cannot read it" : "");
        if (!same_layout) return SY_SNAPSHOT_OK; /* the sizes below are the old layout's, read by the plugin */
    }
    if (have->element_size != want->element_size)
        return fail(reason, reason_size, SY_SNAPSHOT_ERR_KEY, "element size differs (snapshot %u, model %u)",
                    (unsigned)have->element_size, (unsigned)want->element_size);
    if (have->kv_bytes_per_token != want->kv_bytes_per_token)
        return fail(reason, reason_size, SY_SNAPSHOT_ERR_KEY, "kv bytes per token differ (snapshot %llu, model %llu)",
                    (unsigned long long)have->kv_bytes_per_token, (unsigned long long)want->kv_bytes_per_token);
    if (have->recurrent_bytes != want->recurrent_bytes)
        return fail(reason, reason_size, SY_SNAPSHOT_ERR_KEY, "recurrent bytes differ (snapshot %llu, model %llu)",
                    (unsigned long long)have->recurrent_bytes, (unsigned long long)want->recurrent_bytes);
    return SY_SNAPSHOT_OK;
}

sy_snapshot_error sy_snapshot_check_tokens(const sy_snapshot *s, uint32_t n_vocab, char *err, size_t err_size) {
    for (uint32_t i = 0; i < s->n_tokens; i++)
        if ((uint32_t)s->tokens[i] >= n_vocab)
            return fail(err, err_size, SY_SNAPSHOT_ERR_FORMAT, "token %ld at %u is outside the vocabulary of %u",
                        (long)s->tokens[i], (unsigned)i, (unsigned)n_vocab);
    return SY_SNAPSHOT_OK;
}

static sy_snapshot_error read_trailer(sy_snapshot *s, const uint8_t tag[4], char *err, size_t err_size) {
    uint8_t t[TRAILER_BYTES];
    memcpy(t, tag, 4);
    sy_snapshot_error e = src_read(s, t + 4, sizeof t - 4, "the trailer", err, err_size);
    if (e != SY_SNAPSHOT_OK) return e;
    if (XXH64(t, 24, 0) != get_u64(t + 24))
        return fail(err, err_size, SY_SNAPSHOT_ERR_CHECKSUM, "trailer checksum mismatch");
    if (s->next_begin != s->n_tokens)
        return fail(err, err_size, SY_SNAPSHOT_ERR_FORMAT, "the chunks cover %u of the %u tokens",
                    (unsigned)s->next_begin, (unsigned)s->n_tokens);
    if (get_u32(t + 4) != s->n_chunks || get_u32(t + 8) != s->n_tokens || get_u32(t + 12) != 0)
        return fail(err, err_size, SY_SNAPSHOT_ERR_FORMAT, "the trailer counts %u chunks and %u tokens, the file %u and %u",
                    (unsigned)get_u32(t + 4), (unsigned)get_u32(t + 8), (unsigned)s->n_chunks, (unsigned)s->n_tokens);
    if (get_u64(t + 16) != XXH64_digest(s->chain))
        return fail(err, err_size, SY_SNAPSHOT_ERR_CHECKSUM, "the chunk chain checksum does not match the trailer");
    if (s->pos != s->size)
        return fail(err, err_size, SY_SNAPSHOT_ERR_FORMAT, "%llu unexpected bytes after the trailer",
                    (unsigned long long)(s->size - s->pos));
    s->done = true;
    return SY_SNAPSHOT_OK;
}

static sy_snapshot_error next_chunk(sy_snapshot *s, uint32_t *begin_out, uint32_t *end_out, char *err,
                                    size_t err_size) {
    uint8_t rec[RECORD_BYTES];
    char what[64];
    snprintf(what, sizeof what, "chunk %u", (unsigned)s->n_chunks);
    sy_snapshot_error e = src_read(s, rec, 4, what, err, err_size);
    if (e != SY_SNAPSHOT_OK) return e;
    uint32_t tag = get_u32(rec);
    if (tag == TAG_END) return read_trailer(s, rec, err, err_size);
    if (tag != TAG_CHUNK)
        return fail(err, err_size, SY_SNAPSHOT_ERR_FORMAT, "%s: unknown record tag 0x%08x at offset %llu", what,
                    (unsigned)tag, (unsigned long long)(s->pos - 4));
    e = src_read(s, rec + 4, sizeof rec - 4, what, err, err_size);
    if (e != SY_SNAPSHOT_OK) return e;
    if (XXH64(rec, 48, 0) != get_u64(rec + 48))
        return fail(err, err_size, SY_SNAPSHOT_ERR_CHECKSUM, "%s: record checksum mismatch", what);
    uint32_t codec = get_u32(rec + 4), begin = get_u32(rec + 8), end = get_u32(rec + 12);
    uint64_t raw_len = get_u64(rec + 16), stored_len = get_u64(rec + 24);
    uint64_t raw_sum = get_u64(rec + 32), stored_sum = get_u64(rec + 40);
    if (begin != s->next_begin || end <= begin || end > s->n_tokens)
        return fail(err, err_size, SY_SNAPSHOT_ERR_FORMAT, "%s covers [%u, %u); expected a chunk from %u up to %u",
                    what, (unsigned)begin, (unsigned)end, (unsigned)s->next_begin, (unsigned)s->n_tokens);
    uint64_t expected = 0;
    if (!chunk_bytes_of(&s->key, end - begin, &expected) || raw_len != expected)
        return fail(err, err_size, SY_SNAPSHOT_ERR_FORMAT, "%s: %llu bytes of state for %u positions; the key says %llu",
                    what, (unsigned long long)raw_len, (unsigned)(end - begin), (unsigned long long)expected);
    if (raw_len > s->limits.max_chunk_bytes)
        return fail(err, err_size, SY_SNAPSHOT_ERR_FORMAT, "%s: %llu bytes, more than the limit of %llu", what,
                    (unsigned long long)raw_len, (unsigned long long)s->limits.max_chunk_bytes);
    uint32_t kind = codec & 0xffu;
    bool shuffled = (codec & CODEC_SHUFFLED) != 0;
    if ((codec & ~(0xffu | CODEC_SHUFFLED)) != 0 || kind > CODEC_ZSTD || (kind == CODEC_RAW && shuffled))
        return fail(err, err_size, SY_SNAPSHOT_ERR_FORMAT, "%s: unknown codec 0x%x", what, (unsigned)codec);
    if (kind == CODEC_RAW ? stored_len != raw_len
                          : stored_len == 0 || stored_len > ZSTD_compressBound((size_t)raw_len))
        return fail(err, err_size, SY_SNAPSHOT_ERR_FORMAT, "%s: stored size %llu does not fit its %llu bytes", what,
                    (unsigned long long)stored_len, (unsigned long long)raw_len);
    if (stored_len > s->size - s->pos)
        return fail(err, err_size, SY_SNAPSHOT_ERR_TRUNCATED, "the file ends inside %s (%llu of %llu bytes there)",
                    what, (unsigned long long)(s->size - s->pos), (unsigned long long)stored_len);
    if (!reserve(&s->stored, &s->stored_cap, (size_t)stored_len) ||
        !reserve(&s->raw, &s->raw_cap, (size_t)raw_len))
        return fail(err, err_size, SY_SNAPSHOT_ERR_IO, "out of memory for %s", what);
    e = src_read(s, s->stored, (size_t)stored_len, what, err, err_size);
    if (e != SY_SNAPSHOT_OK) return e;
    /* Checksum first: nothing damaged reaches the decompressor. */
    if (XXH64(s->stored, (size_t)stored_len, 0) != stored_sum)
        return fail(err, err_size, SY_SNAPSHOT_ERR_CHECKSUM, "%s: payload checksum mismatch", what);
    if (kind == CODEC_RAW) {
        memcpy(s->raw, s->stored, (size_t)raw_len);
    } else {
        unsigned long long declared = ZSTD_getFrameContentSize(s->stored, (size_t)stored_len);
        if (declared != raw_len)
            return fail(err, err_size, SY_SNAPSHOT_ERR_FORMAT, "%s: the zstd frame does not declare %llu bytes", what,
                        (unsigned long long)raw_len);
        size_t frame = ZSTD_findFrameCompressedSize(s->stored, (size_t)stored_len);
        if (ZSTD_isError(frame) || frame != stored_len)
            return fail(err, err_size, SY_SNAPSHOT_ERR_FORMAT, "%s: the payload is not exactly one zstd frame", what);
        uint8_t *dst = s->raw;
        if (shuffled) {
            if (!reserve(&s->planes, &s->planes_cap, (size_t)raw_len))
                return fail(err, err_size, SY_SNAPSHOT_ERR_IO, "out of memory for %s", what);
            dst = s->planes;
        }
        size_t n = ZSTD_decompressDCtx(s->dctx, dst, (size_t)raw_len, s->stored, (size_t)stored_len);
        if (ZSTD_isError(n) || n != raw_len)
            return fail(err, err_size, SY_SNAPSHOT_ERR_FORMAT, "%s: zstd: %s", what,
                        ZSTD_isError(n) ? ZSTD_getErrorName(n) : "short output");
        if (shuffled) sy_snapshot_unshuffle(s->planes, s->raw, (size_t)raw_len, s->key.element_size);
    }
    if (XXH64(s->raw, (size_t)raw_len, 0) != raw_sum)
        return fail(err, err_size, SY_SNAPSHOT_ERR_CHECKSUM, "%s: checksum of the decoded state mismatch", what);
    XXH64_update(s->chain, rec, sizeof rec);
    s->next_begin = end;
    s->n_chunks++;
    *begin_out = begin;
    *end_out = end;
    return SY_SNAPSHOT_OK;
}

sy_snapshot_error sy_snapshot_next_chunk(sy_snapshot *s, uint32_t *begin, uint32_t *end, const uint8_t **raw,
                                         size_t *raw_len, bool *done, char *err, size_t err_size) {
    if (s == NULL || begin == NULL || end == NULL || raw == NULL || raw_len == NULL || done == NULL)
        return fail(err, err_size, SY_SNAPSHOT_ERR_ARGUMENT, "next_chunk: missing argument");
    *done = false;
    *raw = NULL;
    *raw_len = 0;
    if (s->failed != SY_SNAPSHOT_OK)
        return fail(err, err_size, s->failed, "the snapshot failed to read before");
    if (s->done) {
        *done = true;
        return SY_SNAPSHOT_OK;
    }
    uint32_t b = 0, e_pos = 0;
    sy_snapshot_error e = next_chunk(s, &b, &e_pos, err, err_size);
    if (e != SY_SNAPSHOT_OK) {
        s->failed = e;
        return e;
    }
    if (s->done) {
        *done = true;
        return SY_SNAPSHOT_OK;
    }
    uint64_t len = 0;
    chunk_bytes_of(&s->key, e_pos - b, &len);
    *begin = b;
    *end = e_pos;
    *raw = s->raw;
    *raw_len = (size_t)len;
    return SY_SNAPSHOT_OK;
}

/* Hands one decoded chunk to the engine's reader callbacks. */
typedef struct chunk_source {
    const uint8_t *data;
    size_t len, pos;
    bool overrun;
} chunk_source;

static sy_status source_read(void *user, void *data, size_t len) {
    chunk_source *src = user;
    if (len == 0) return SY_OK;
    if (data == NULL || len > src->len - src->pos) {
        src->overrun = true;
        return SY_ERR_FORMAT;
    }
    memcpy(data, src->data + src->pos, len);
    src->pos += len;
    return SY_OK;
}

sy_snapshot_error sy_snapshot_restore(sy_snapshot *s, const sy_engine_api *engine, const sy_engine_state_api *state,
                                      sy_model *model, const int32_t *want, uint32_t n_want, uint32_t max_tokens,
                                      sy_seq **out, uint32_t *n_restored, char *err, size_t err_size) {
    if (s == NULL || engine == NULL || state == NULL || model == NULL || out == NULL || n_restored == NULL ||
        (want == NULL && n_want > 0))
        return fail(err, err_size, SY_SNAPSHOT_ERR_ARGUMENT, "restore: missing argument");
    *out = NULL;
    *n_restored = 0;
    if (!SY_HAS_FIELD(state, sy_engine_state_api, state_load_chunk) || state->state_load_chunk == NULL ||
        state->state_chunk_bytes == NULL)
        return fail(err, err_size, SY_SNAPSHOT_ERR_ENGINE, "the engine's state extension is incomplete");
    if (s->n_chunks != 0 || s->done || s->failed != SY_SNAPSHOT_OK)
        return fail(err, err_size, SY_SNAPSHOT_ERR_ARGUMENT, "restore: the snapshot was read from already");
    uint32_t limit = s->n_tokens;
    if (want != NULL) {
        uint32_t same = 0;
        while (same < limit && same < n_want && s->tokens[same] == want[same]) same++;
        limit = same;
    }
    if (max_tokens != 0 && max_tokens < limit) limit = max_tokens;

    sy_seq *seq = NULL;
    uint32_t have = 0;
    sy_snapshot_error e = SY_SNAPSHOT_OK;
    while (have < limit) {
        uint32_t begin = 0, end = 0;
        const uint8_t *raw = NULL;
        size_t raw_len = 0;
        bool done = false;
        e = sy_snapshot_next_chunk(s, &begin, &end, &raw, &raw_len, &done, err, err_size);
        if (e != SY_SNAPSHOT_OK) break;
        if (done || end > limit) break; /* the next chunk reaches past what agrees: stop at this boundary */
        uint64_t engine_bytes = state->state_chunk_bytes(model, end - begin);
        if (engine_bytes != raw_len) {
            e = fail(err, err_size, SY_SNAPSHOT_ERR_ENGINE,
                     "the engine's chunk of %u positions is %llu bytes, the snapshot's %zu", (unsigned)(end - begin),
                     (unsigned long long)engine_bytes, raw_len);
            break;
        }
        if (seq == NULL && (engine->seq_create(model, &seq) != SY_OK || seq == NULL)) {
            seq = NULL;
            e = fail(err, err_size, SY_SNAPSHOT_ERR_ENGINE, "the engine could not create a sequence: %s",
                     engine->error_message());
            break;
        }
        chunk_source src = {raw, raw_len, 0, false};
        sy_state_reader reader = {sizeof reader, &src, source_read};
        sy_status st = state->state_load_chunk(model, seq, begin, end, s->tokens + begin, &reader);
        if (st != SY_OK || src.pos != raw_len || engine->seq_length(model, seq) != end) {
            e = fail(err, err_size, SY_SNAPSHOT_ERR_ENGINE, "the engine loaded the chunk [%u, %u) %s%s",
                     (unsigned)begin, (unsigned)end,
                     st != SY_OK ? "with an error: " : src.pos != raw_len ? "reading the wrong byte count" :
                                                                             "to the wrong length",
                     st != SY_OK ? engine->error_message() : "");
            break;
        }
        have = end;
    }
    if (e == SY_SNAPSHOT_OK && have == s->n_tokens) {
        /* All of it: the trailer must confirm that nothing is missing or was reordered. */
        uint32_t begin = 0, end = 0;
        const uint8_t *raw = NULL;
        size_t raw_len = 0;
        bool done = false;
        e = sy_snapshot_next_chunk(s, &begin, &end, &raw, &raw_len, &done, err, err_size);
        if (e == SY_SNAPSHOT_OK && !done)
            e = fail(err, err_size, SY_SNAPSHOT_ERR_FORMAT, "a chunk follows the last position");
    }
    if (e != SY_SNAPSHOT_OK) {
        if (seq != NULL) engine->seq_free(model, seq);
        return e;
    }
    *out = seq;
    *n_restored = have;
    return SY_SNAPSHOT_OK;
}
