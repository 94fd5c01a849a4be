/*
 * KV snapshots: one sequence's tokens and engine state in a compressed, checksummed file, written streaming and
 * atomically, read back with every field checked. The format is described in docs/snapshot-format.md.
 *
 * The state comes from and goes to the engine through the optional "sy.engine.state/1" extension in
 * position-ordered chunks (SY_SNAPSHOT_DEFAULT_CHUNK_TOKENS positions each where the engine allows), so the writer
 * holds one chunk in memory at a time and a reader can restore a prefix without touching the rest. Each chunk is
 * byte-shuffled by the engine's element size (F16/BF16: two byte planes, which zstd compresses far better) and
 * zstd-compressed; it carries xxHash64 checksums of its stored and of its original bytes.
 *
 * This file depends only on the plugin ABI, libzstd and libxxhash (the fuzz target builds it alone).
 * Every function is thread-safe on distinct objects; engine calls follow the engine's "serial" rule, which the
 * caller ensures.
 */
#ifndef SY_HOST_SNAPSHOT_H
#define SY_HOST_SNAPSHOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <switchyard/switchyard.h>

#define SY_SNAPSHOT_MAGIC "SYKVSNAP" /* 8 bytes, no NUL */
#define SY_SNAPSHOT_VERSION_MAJOR 1u
#define SY_SNAPSHOT_VERSION_MINOR 0u
#define SY_SNAPSHOT_SUFFIX ".sysnap"

#define SY_SNAPSHOT_DEFAULT_CHUNK_TOKENS 256u
/* Bounds a reader enforces (and a writer refuses to exceed, so that whatever it writes can be read). */
#define SY_SNAPSHOT_MAX_TOKENS (1u << 24)
#define SY_SNAPSHOT_MAX_STRING 1024u                   /* fingerprint, plugin name and version, layout */
#define SY_SNAPSHOT_MAX_ELEMENT_SIZE 16u
#define SY_SNAPSHOT_MAX_KV_BYTES_PER_TOKEN ((uint64_t)64 << 20)
#define SY_SNAPSHOT_MAX_RECURRENT_BYTES ((uint64_t)1 << 30)
#define SY_SNAPSHOT_DEFAULT_MAX_CHUNK_BYTES ((uint64_t)1 << 30) /* original bytes of one chunk */

/* What ties a snapshot to the model that can load it. Every field must match for a restore. */
typedef struct sy_snapshot_key {
    const char *fingerprint;    /* sy_model_info.fingerprint */
    const char *plugin_name;    /* the plugin entry's name and version */
    const char *plugin_version;
    const char *layout;         /* sy_state_info.layout */
    uint32_t element_size;
    uint64_t kv_bytes_per_token;
    uint64_t recurrent_bytes;
} sy_snapshot_key;

/* Why an operation failed; each comes with a one-line message. */
typedef enum sy_snapshot_error {
    SY_SNAPSHOT_OK = 0,
    SY_SNAPSHOT_ERR_IO,        /* opening, reading, writing, syncing or renaming failed (ENOSPC, EFBIG, ...) */
    SY_SNAPSHOT_ERR_TRUNCATED, /* the file ends before its content does */
    SY_SNAPSHOT_ERR_FORMAT,    /* not a snapshot, or a field outside its bounds or inconsistent with another */
    SY_SNAPSHOT_ERR_VERSION,   /* a format version this host does not read */
    SY_SNAPSHOT_ERR_CHECKSUM,  /* a checksum does not match: the file was damaged */
    SY_SNAPSHOT_ERR_KEY,       /* written for another model, plugin or state layout */
    SY_SNAPSHOT_ERR_ENGINE,    /* the engine refused to save or load state, or broke the state contract */
    SY_SNAPSHOT_ERR_ARGUMENT   /* a caller's mistake (NULL, zero tokens, ...) */
} sy_snapshot_error;

/* "checksum", "key", ... (for logs and metrics labels). */
const char *sy_snapshot_error_name(sy_snapshot_error e);

/* ---- writing ------------------------------------------------------------------------------------------------ */

typedef enum sy_snapshot_codec {
    SY_SNAPSHOT_CODEC_AUTO = 0,     /* shuffled zstd; a chunk zstd cannot shrink is stored as is */
    SY_SNAPSHOT_CODEC_ZSTD_PLAIN,   /* zstd without the shuffle (for measurements) */
    SY_SNAPSHOT_CODEC_NONE          /* stored as is (for measurements) */
} sy_snapshot_codec;

typedef struct sy_snapshot_write_options {
    uint32_t chunk_tokens; /* 0: SY_SNAPSHOT_DEFAULT_CHUNK_TOKENS */
    int zstd_level;        /* 0: 1 (fast; see docs/snapshot-format.md for the measurements) */
    sy_snapshot_codec codec;
} sy_snapshot_write_options;

typedef struct sy_snapshot_write_stats {
    uint64_t raw_bytes;    /* the engine's state bytes */
    uint64_t stored_bytes; /* chunk payloads as stored */
    uint64_t file_bytes;   /* everything written */
    uint32_t n_chunks;
} sy_snapshot_write_stats;

/* Write the first n_tokens of seq (which must hold exactly n_tokens, the ids in `tokens`) to fd at its current
 * offset, streaming chunk by chunk. The caller owns fd (no sync, no close here). */
sy_snapshot_error sy_snapshot_write_fd(int fd, const sy_snapshot_key *key, const sy_engine_state_api *state,
                                       sy_model *model, const sy_seq *seq, const int32_t *tokens, uint32_t n_tokens,
                                       const sy_snapshot_write_options *opts, sy_snapshot_write_stats *stats,
                                       char *err, size_t err_size);

/* The same into `path`, atomically: a temp file in the same folder (".NAME.tmp.PID.N", a dot file that no
 * listing takes for a snapshot), fsync, rename over path, fsync of the folder. On any failure path is untouched
 * (an older snapshot there stays valid) and the temp file is removed. */
sy_snapshot_error sy_snapshot_write_file(const char *path, const sy_snapshot_key *key,
                                         const sy_engine_state_api *state, sy_model *model, const sy_seq *seq,
                                         const int32_t *tokens, uint32_t n_tokens,
                                         const sy_snapshot_write_options *opts, sy_snapshot_write_stats *stats,
                                         char *err, size_t err_size);

/* True for the temp-file names sy_snapshot_write_file uses (".*.tmp.*"). */
bool sy_snapshot_is_temp_name(const char *name);

/* ---- reading ------------------------------------------------------------------------------------------------ */

typedef struct sy_snapshot sy_snapshot; /* an open snapshot, read front to back */

typedef struct sy_snapshot_limits {
    uint64_t max_chunk_bytes; /* 0: SY_SNAPSHOT_DEFAULT_MAX_CHUNK_BYTES */
    uint32_t max_tokens;      /* 0: SY_SNAPSHOT_MAX_TOKENS */
} sy_snapshot_limits;

/* Open and check the header (magic, version, bounds, checksum). On failure *out is NULL. */
sy_snapshot_error sy_snapshot_open_file(const char *path, const sy_snapshot_limits *limits, sy_snapshot **out,
                                        char *err, size_t err_size);
/* The same over bytes in memory (borrowed until close). */
sy_snapshot_error sy_snapshot_open_memory(const void *data, size_t len, const sy_snapshot_limits *limits,
                                          sy_snapshot **out, char *err, size_t err_size);
void sy_snapshot_close(sy_snapshot *s);

/* The snapshot's key (strings owned by s) and token ledger. */
const sy_snapshot_key *sy_snapshot_get_key(const sy_snapshot *s);
const int32_t *sy_snapshot_tokens(const sy_snapshot *s, uint32_t *n_tokens);
void sy_snapshot_version(const sy_snapshot *s, unsigned *major, unsigned *minor);
/* Seconds since the epoch when it was written. */
uint64_t sy_snapshot_created(const sy_snapshot *s);

/* SY_SNAPSHOT_OK when `have` (a snapshot's) matches `want` (a model's); else SY_SNAPSHOT_ERR_KEY with a reason
 * naming the first field that differs. */
sy_snapshot_error sy_snapshot_key_check(const sy_snapshot_key *have, const sy_snapshot_key *want, char *reason,
                                        size_t reason_size);
/* Whether the plugin reads state written with `layout` by its version `writer_version` (sy.engine.state/1's
 * state_can_read). */
typedef int (*sy_snapshot_can_read_fn)(void *ctx, const char *layout, const char *writer_version);
/* Like sy_snapshot_key_check, but a snapshot of the same model and plugin whose plugin version or state layout
 * differs is accepted when can_read (may be NULL: strict) says the plugin reads it. */
sy_snapshot_error sy_snapshot_key_accepts(const sy_snapshot_key *have, const sy_snapshot_key *want,
                                          sy_snapshot_can_read_fn can_read, void *ctx, char *reason,
                                          size_t reason_size);

/* SY_SNAPSHOT_OK when every token of the ledger is below n_vocab (the model's); else SY_SNAPSHOT_ERR_FORMAT naming
 * the first one outside. Check it before a restore: engines may trust the ids they are handed. */
sy_snapshot_error sy_snapshot_check_tokens(const sy_snapshot *s, uint32_t n_vocab, char *err, size_t err_size);

/* The next chunk, its checksums verified before anything is decompressed: positions [*begin, *end) and the
 * engine's original bytes (*raw, valid until the next call or close). After the last chunk *done is set and the
 * trailer and the end of the file have been checked. */
sy_snapshot_error sy_snapshot_next_chunk(sy_snapshot *s, uint32_t *begin, uint32_t *end, const uint8_t **raw,
                                         size_t *raw_len, bool *done, char *err, size_t err_size);

/* Restore into a new sequence the longest prefix of the snapshot that agrees with `want` (n_want tokens; NULL:
 * the whole snapshot), whole chunks only, at most max_tokens (0: no limit). The snapshot must be freshly opened.
 * On success *out holds *n_restored tokens (NULL and 0 when not even the first chunk matches); the key must have
 * been checked by the caller. Every byte handed to the engine has been checksummed, and its size is the
 * engine's state_chunk_bytes. On failure no sequence is left behind. */
sy_snapshot_error sy_snapshot_restore(sy_snapshot *s, const sy_engine_api *engine, const sy_engine_state_api *state,
                                      sy_model *model, const int32_t *want, uint32_t n_want, uint32_t max_tokens,
                                      sy_seq **out, uint32_t *n_restored, char *err, size_t err_size);

/* ---- helpers shared with the bench and tests ----------------------------------------------------------------- */

/* Byte planes: out[k * n + i] = in[i * element_size + k] for the n = len / element_size whole elements; the
 * remaining len % element_size bytes are copied at the end. unshuffle inverts it. */
void sy_snapshot_shuffle(const uint8_t *in, uint8_t *out, size_t len, uint32_t element_size);
void sy_snapshot_unshuffle(const uint8_t *in, uint8_t *out, size_t len, uint32_t element_size);

#endif
