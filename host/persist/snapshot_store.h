/*
 * Where KV snapshots live and when they are written and read back.
 *
 * A store is one folder of snapshot files ("<16 hex digits>.sysnap", named after a hash of the token ledger) with a
 * byte budget: after a write, the least recently used files (by modification time, which a restore refreshes) are
 * removed until the folder fits. Temp files of writers that died (".NAME.tmp.PID.N") are never read as snapshots
 * and are removed when a store is opened.
 *
 * The model manager keeps one store per model under the resume path (resume_path/<model name>): it persists the
 * warm slots (and the parked sequences of the host prefix cache) when a model is unloaded or the server stops,
 * and restores them when the model loads, before it reports ready (see docs/snapshot-format.md).
 *
 * Threading: a store object is used by one thread at a time; different stores (folders) are independent. The
 * counters are global and atomic.
 */
#ifndef SY_HOST_SNAPSHOT_STORE_H
#define SY_HOST_SNAPSHOT_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "plugins/loaded_model.h"
#include "engine/scheduler.h"
#include "persist/snapshot.h"

/* Bytes one model's store may hold before the least recently used snapshots go. */
#define SY_SNAPSHOT_STORE_DEFAULT_BUDGET ((uint64_t)4 << 30)

typedef struct sy_snapshot_store sy_snapshot_store;

/* Open the folder (creating it and its parents). NULL with err set when it cannot be created or read. */
sy_snapshot_store *sy_snapshot_store_open(const char *dir, uint64_t budget_bytes, char *err, size_t err_size);
void sy_snapshot_store_close(sy_snapshot_store *st);
const char *sy_snapshot_store_dir(const sy_snapshot_store *st);

typedef struct sy_snapshot_file {
    char *path;
    uint64_t bytes;
    struct timespec mtime;
} sy_snapshot_file;

/* The snapshot files of the store, most recently used first (malloc'd array; free with _files_free). */
size_t sy_snapshot_store_list(const sy_snapshot_store *st, sy_snapshot_file **out);
void sy_snapshot_files_free(sy_snapshot_file *files, size_t n);

/* Write one sequence (all n_tokens it holds) as the store's snapshot of those tokens, replacing an older one of
 * the same tokens atomically, then evict down to the budget. *path_out (may be NULL) gets the file's path,
 * malloc'd. */
sy_snapshot_error sy_snapshot_store_save(sy_snapshot_store *st, const sy_snapshot_key *key,
                                         const sy_engine_state_api *state, sy_model *model, const sy_seq *seq,
                                         const int32_t *tokens, uint32_t n_tokens, char **path_out,
                                         sy_snapshot_write_stats *stats, char *err, size_t err_size);

/* Remove least recently used snapshots until the store fits its budget, never `keep` (may be NULL). Returns the
 * number of files removed. */
size_t sy_snapshot_store_evict(sy_snapshot_store *st, const char *keep);

/* The file name a sequence of these tokens gets in a store ("0123456789abcdef.sysnap"; 24 bytes with the NUL). */
void sy_snapshot_store_name(const int32_t *tokens, uint32_t n_tokens, char out[32]);

/* ---- a loaded model's snapshots ------------------------------------------------------------------------------ */

/* The compatibility key of a loaded model (strings borrowed from the model and its plugin). Returns 0, or -1
 * with err set when its plugin has no state extension or the model no fingerprint. */
int sy_snapshot_model_key(const sy_loaded_model *lm, sy_snapshot_key *key, char *err, size_t err_size);
/* Whether a snapshot with key `have` may be restored into lm (whose key is `want`): the same key, or one the
 * plugin says it reads (state_can_read, ABI 1.2) when only the plugin version or the layout differ. */
sy_snapshot_error sy_snapshot_model_accepts(const sy_loaded_model *lm, const sy_snapshot_key *have,
                                            const sy_snapshot_key *want, char *reason, size_t reason_size);

/* The store folder of a model under the resume path: resume_path/<name, with every byte outside [A-Za-z0-9._-]
 * written as %XX>; malloc'd. */
char *sy_snapshot_model_dir(const char *resume_path, const char *model_name);

/* Save the warm sequences of a scheduler that is stopped (sy_scheduler_stop) or held by a task: every slot that
 * holds tokens and, with include_parked, the parked sequences of the host prefix cache. A sequence whose tokens
 * begin another one saved now is left out; older snapshots of the same model whose tokens begin one saved now
 * are removed. Failures (a full disk) are logged and counted; serving goes on. Returns the number of sequences
 * saved (or found saved already). */
int sy_snapshot_persist_model(const char *resume_path, const char *model_name, const sy_loaded_model *lm,
                              sy_scheduler *sched, bool include_parked, uint64_t budget_bytes);

/* The same in two halves, so that a swap waits only for the first: sy_snapshot_capture_model copies the warm
 * sequences' state out of the engine (serial calls on the model; memory for the raw state bytes meanwhile) and
 * returns them as a batch, or NULL when nothing is warm or the model keeps no state; sy_snapshot_batch_write then
 * writes them anywhere, after the model is gone too, exactly as sy_snapshot_persist_model would (each file
 * atomically: temp file, fsync, rename, so a failed or interrupted write leaves the older snapshot), and frees
 * the batch. It returns the number saved. */
typedef struct sy_snapshot_batch sy_snapshot_batch;
sy_snapshot_batch *sy_snapshot_capture_model(const char *resume_path, const char *model_name,
                                             const sy_loaded_model *lm, sy_scheduler *sched, bool include_parked,
                                             uint64_t budget_bytes);
size_t sy_snapshot_batch_count(const sy_snapshot_batch *b);
uint64_t sy_snapshot_batch_bytes(const sy_snapshot_batch *b); /* raw state bytes held */
const char *sy_snapshot_batch_dir(const sy_snapshot_batch *b); /* the model's store folder */
int sy_snapshot_batch_write(sy_snapshot_batch *b);
void sy_snapshot_batch_free(sy_snapshot_batch *b);

/* Restore a model's snapshots into a scheduler that has not served anything yet: the most recently used first,
 * one per slot, then (into_host_cache) into the host prefix cache while it has room. A snapshot whose key,
 * version or checksum does not match is skipped with one log line naming the reason, and counted. Returns the
 * number of sequences restored. */
int sy_snapshot_resume_model(const char *resume_path, const char *model_name, const sy_loaded_model *lm,
                             sy_scheduler *sched, bool into_host_cache, uint64_t budget_bytes);

/* ---- counters for /metrics ----------------------------------------------------------------------------------- */

#define SY_SNAPSHOT_N_ERRORS 9 /* sy_snapshot_error values */

typedef struct sy_snapshot_counters {
    uint64_t written;          /* snapshot files written */
    uint64_t write_failures;   /* writes that failed (full disk, engine refused, ...) */
    uint64_t bytes_written;
    uint64_t restored;         /* sequences restored */
    uint64_t restored_tokens;  /* tokens whose prefill a restore saved */
    uint64_t rejected;         /* snapshots skipped at restore (the sum of rejected_by) */
    uint64_t rejected_by[SY_SNAPSHOT_N_ERRORS]; /* indexed by sy_snapshot_error: key, version, checksum, ... */
} sy_snapshot_counters;

void sy_snapshot_get_counters(sy_snapshot_counters *out);
/* Count one rejected snapshot (the slot API and the store use it). */
void sy_snapshot_count_rejected(sy_snapshot_error why);

#endif
