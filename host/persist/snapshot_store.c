/*
 * Snapshot stores and the model manager's persist/resume (see snapshot_store.h).
 */
#include "persist/snapshot_store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

#include "base/log.h"
#include "base/util.h"
#include "persist/snapshot_capture.h"

/* ------------------------------------------------------------------------------------------------------------
 * Counters */

static _Atomic uint64_t count_written, count_write_failures, count_bytes_written, count_restored,
    count_restored_tokens, count_rejected;
static _Atomic uint64_t count_rejected_by[SY_SNAPSHOT_N_ERRORS];

void sy_snapshot_get_counters(sy_snapshot_counters *out) {
    memset(out, 0, sizeof *out);
    out->written = atomic_load(&count_written);
    out->write_failures = atomic_load(&count_write_failures);
    out->bytes_written = atomic_load(&count_bytes_written);
    out->restored = atomic_load(&count_restored);
    out->restored_tokens = atomic_load(&count_restored_tokens);
    out->rejected = atomic_load(&count_rejected);
    for (int i = 0; i < SY_SNAPSHOT_N_ERRORS; i++) out->rejected_by[i] = atomic_load(&count_rejected_by[i]);
}

void sy_snapshot_count_rejected(sy_snapshot_error why) {
    atomic_fetch_add(&count_rejected, 1);
    if ((int)why >= 0 && (int)why < SY_SNAPSHOT_N_ERRORS) atomic_fetch_add(&count_rejected_by[why], 1);
}

/* ------------------------------------------------------------------------------------------------------------
 * The store: a folder with a budget */

/* Set a file's modification time to now, strictly later than every time set before by this process: file
 * systems take coarse timestamps on write (a few ms), and the LRU order must not depend on ties. */
static void stamp_now(const char *path) {
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static struct timespec last;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    pthread_mutex_lock(&lock);
    if (now.tv_sec < last.tv_sec || (now.tv_sec == last.tv_sec && now.tv_nsec <= last.tv_nsec)) {
        now = last;
        if (++now.tv_nsec >= 1000000000L) now.tv_sec++, now.tv_nsec = 0;
    }
    last = now;
    pthread_mutex_unlock(&lock);
    struct timespec times[2] = {{0, UTIME_OMIT}, now};
    utimensat(AT_FDCWD, path, times, 0);
}

struct sy_snapshot_store {
    char *dir;
    uint64_t budget;
};

/* mkdir -p; 0 or -1 with errno set. */
static int make_dirs(const char *path) {
    char *p = sy_strdup(path);
    int rc = 0;
    for (char *q = p + 1; rc == 0; q++) {
        bool last = *q == '\0';
        if (*q != '/' && !last) continue;
        char saved = *q;
        *q = '\0';
        if (mkdir(p, 0755) != 0 && errno != EEXIST) rc = -1;
        *q = saved;
        if (last) break;
    }
    free(p);
    if (rc == 0) {
        struct stat st;
        if (stat(path, &st) != 0) return -1;
        if (!S_ISDIR(st.st_mode)) {
            errno = ENOTDIR;
            return -1;
        }
    }
    return rc;
}

/* A writer's temp file whose process is gone: ".NAME.tmp.PID.N". Our own are left alone (a write may be on). */
static bool stale_temp(const char *name) {
    if (!sy_snapshot_is_temp_name(name)) return false;
    /* The last ".tmp.": the file's own name may hold one too. */
    const char *tmp = strstr(name, ".tmp.");
    for (const char *next = tmp; next != NULL; next = strstr(next + 1, ".tmp.")) tmp = next;
    char *end = NULL;
    long pid = strtol(tmp + 5, &end, 10);
    if (end == tmp + 5 || pid <= 0) return true; /* not ours to understand: a leftover */
    if (pid == (long)getpid()) return false;
    return kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

sy_snapshot_store *sy_snapshot_store_open(const char *dir, uint64_t budget_bytes, char *err, size_t err_size) {
    if (dir == NULL || *dir == '\0') {
        snprintf(err, err_size, "no snapshot folder given");
        return NULL;
    }
    if (make_dirs(dir) != 0) {
        snprintf(err, err_size, "cannot create snapshot folder %s: %s", dir, strerror(errno));
        return NULL;
    }
    DIR *d = opendir(dir);
    if (d == NULL) {
        snprintf(err, err_size, "cannot read snapshot folder %s: %s", dir, strerror(errno));
        return NULL;
    }
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (!stale_temp(de->d_name)) continue;
        char *path = sy_path_join(dir, de->d_name);
        if (unlink(path) == 0) sy_log(SY_LOG_INFO, "snapshot store: removed %s, left by a writer that died", path);
        free(path);
    }
    closedir(d);
    sy_snapshot_store *st = sy_xcalloc(1, sizeof *st);
    st->dir = sy_strdup(dir);
    st->budget = budget_bytes ? budget_bytes : SY_SNAPSHOT_STORE_DEFAULT_BUDGET;
    return st;
}

void sy_snapshot_store_close(sy_snapshot_store *st) {
    if (st == NULL) return;
    free(st->dir);
    free(st);
}

const char *sy_snapshot_store_dir(const sy_snapshot_store *st) { return st->dir; }

/* Exactly "<16 lowercase hex>.sysnap": nothing else in the folder is taken for a snapshot. */
static bool is_snapshot_name(const char *name) {
    for (int i = 0; i < 16; i++)
        if (!((name[i] >= '0' && name[i] <= '9') || (name[i] >= 'a' && name[i] <= 'f'))) return false;
    return strcmp(name + 16, SY_SNAPSHOT_SUFFIX) == 0;
}

void sy_snapshot_store_name(const int32_t *tokens, uint32_t n_tokens, char out[32]) {
    uint64_t h = XXH64(tokens, (size_t)n_tokens * sizeof *tokens, 0x5359534e4150ull);
    snprintf(out, 32, "%016llx%s", (unsigned long long)h, SY_SNAPSHOT_SUFFIX);
}

static int newer_first(const void *pa, const void *pb) {
    const sy_snapshot_file *a = pa, *b = pb;
    if (a->mtime.tv_sec != b->mtime.tv_sec) return a->mtime.tv_sec > b->mtime.tv_sec ? -1 : 1;
    if (a->mtime.tv_nsec != b->mtime.tv_nsec) return a->mtime.tv_nsec > b->mtime.tv_nsec ? -1 : 1;
    return strcmp(a->path, b->path);
}

size_t sy_snapshot_store_list(const sy_snapshot_store *st, sy_snapshot_file **out) {
    *out = NULL;
    DIR *d = opendir(st->dir);
    if (d == NULL) return 0;
    size_t n = 0, cap = 0;
    sy_snapshot_file *files = NULL;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (!is_snapshot_name(de->d_name)) continue;
        char *path = sy_path_join(st->dir, de->d_name);
        struct stat sb;
        if (lstat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) {
            free(path);
            continue;
        }
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            files = sy_xrealloc(files, cap * sizeof *files);
        }
        files[n].path = path;
        files[n].bytes = (uint64_t)sb.st_size;
        files[n].mtime = sb.st_mtim;
        n++;
    }
    closedir(d);
    if (n > 1) qsort(files, n, sizeof *files, newer_first);
    *out = files;
    return n;
}

void sy_snapshot_files_free(sy_snapshot_file *files, size_t n) {
    for (size_t i = 0; i < n; i++) free(files[i].path);
    free(files);
}

size_t sy_snapshot_store_evict(sy_snapshot_store *st, const char *keep) {
    sy_snapshot_file *files = NULL;
    size_t n = sy_snapshot_store_list(st, &files);
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++) total += files[i].bytes;
    size_t removed = 0;
    for (size_t i = n; i-- > 0 && total > st->budget;) {
        if (keep != NULL && strcmp(files[i].path, keep) == 0) continue;
        if (unlink(files[i].path) == 0) {
            sy_log(SY_LOG_INFO, "snapshot store: evicted %s (%llu bytes; the folder's budget is %llu)", files[i].path,
                   (unsigned long long)files[i].bytes, (unsigned long long)st->budget);
            total -= files[i].bytes;
            removed++;
        }
    }
    sy_snapshot_files_free(files, n);
    return removed;
}

sy_snapshot_error sy_snapshot_store_save(sy_snapshot_store *st, const sy_snapshot_key *key,
                                         const sy_engine_state_api *state, sy_model *model, const sy_seq *seq,
                                         const int32_t *tokens, uint32_t n_tokens, char **path_out,
                                         sy_snapshot_write_stats *stats, char *err, size_t err_size) {
    if (path_out != NULL) *path_out = NULL;
    if (tokens == NULL || n_tokens == 0) {
        snprintf(err, err_size, "no tokens to save");
        return SY_SNAPSHOT_ERR_ARGUMENT;
    }
    char name[32];
    sy_snapshot_store_name(tokens, n_tokens, name);
    char *path = sy_path_join(st->dir, name);
    sy_snapshot_write_stats local;
    if (stats == NULL) stats = &local;
    sy_snapshot_error e =
        sy_snapshot_write_file(path, key, state, model, seq, tokens, n_tokens, NULL, stats, err, err_size);
    if (e == SY_SNAPSHOT_OK && stats->file_bytes > st->budget) {
        /* It alone is over the budget: nothing of it is kept. */
        unlink(path);
        snprintf(err, err_size, "%s (%llu bytes) does not fit the folder's budget of %llu bytes", path,
                 (unsigned long long)stats->file_bytes, (unsigned long long)st->budget);
        e = SY_SNAPSHOT_ERR_IO;
    }
    if (e == SY_SNAPSHOT_OK) {
        atomic_fetch_add(&count_written, 1);
        atomic_fetch_add(&count_bytes_written, stats->file_bytes);
        stamp_now(path);
        sy_snapshot_store_evict(st, path);
    } else {
        atomic_fetch_add(&count_write_failures, 1);
    }
    if (e == SY_SNAPSHOT_OK && path_out != NULL) *path_out = path;
    else free(path);
    return e;
}

/* ------------------------------------------------------------------------------------------------------------
 * A loaded model's snapshots */

int sy_snapshot_model_key(const sy_loaded_model *lm, sy_snapshot_key *key, char *err, size_t err_size) {
    memset(key, 0, sizeof *key);
    const sy_engine_state_api *state = lm->plugin != NULL ? lm->plugin->engine_state : NULL;
    if (state == NULL || !SY_HAS_FIELD(state, sy_engine_state_api, state_load_chunk) || state->state_info == NULL) {
        snprintf(err, err_size, "plugin %s has no state extension (%s)",
                 lm->plugin != NULL ? lm->plugin->entry->name : "?", SY_ENGINE_STATE_INTERFACE_ID);
        return -1;
    }
    if (lm->info.fingerprint == NULL || lm->info.fingerprint[0] == '\0') {
        snprintf(err, err_size, "the model reports no fingerprint, so a snapshot could not be matched to it");
        return -1;
    }
    sy_state_info info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    if (state->state_info(lm->model, &info) != SY_OK || info.layout == NULL) {
        snprintf(err, err_size, "state_info failed: %s", lm->engine->error_message());
        return -1;
    }
    key->fingerprint = lm->info.fingerprint;
    key->plugin_name = lm->plugin->entry->name;
    key->plugin_version = lm->plugin->entry->version != NULL ? lm->plugin->entry->version : "";
    key->layout = info.layout;
    key->element_size = info.element_size;
    key->kv_bytes_per_token = info.kv_bytes_per_token;
    key->recurrent_bytes = info.recurrent_bytes;
    return 0;
}

static int plugin_can_read(void *ctx, const char *layout, const char *writer_version) {
    const sy_loaded_model *lm = ctx;
    return lm->plugin->engine_state->state_can_read(lm->model, layout, writer_version) != 0;
}

sy_snapshot_error sy_snapshot_model_accepts(const sy_loaded_model *lm, const sy_snapshot_key *have,
                                            const sy_snapshot_key *want, char *reason, size_t reason_size) {
    const sy_engine_state_api *state = lm->plugin->engine_state;
    bool asks = state != NULL && SY_HAS_FIELD(state, sy_engine_state_api, state_can_read) &&
                state->state_can_read != NULL;
    return sy_snapshot_key_accepts(have, want, asks ? plugin_can_read : NULL, (void *)lm, reason, reason_size);
}

char *sy_snapshot_model_dir(const char *resume_path, const char *model_name) {
    size_t n = strlen(model_name);
    char *escaped = sy_xmalloc(3 * n + 1);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)model_name[i];
        bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                     c == '-' || (c == '.' && i > 0);
        if (plain) {
            escaped[k++] = (char)c;
        } else {
            snprintf(escaped + k, 4, "%%%02X", c);
            k += 3;
        }
    }
    escaped[k] = '\0';
    char *dir = sy_path_join(resume_path, k ? escaped : "%00");
    free(escaped);
    return dir;
}

static bool is_prefix_of(const int32_t *a, uint32_t na, const int32_t *b, uint32_t nb) {
    return na <= nb && memcmp(a, b, (size_t)na * sizeof *a) == 0;
}

/* A sound snapshot at `path` already holding exactly these tokens for this key (rewriting it would change
 * nothing). Every chunk is checked: a damaged file is rewritten rather than kept. */
static bool already_saved(const char *path, const sy_snapshot_key *key, const int32_t *tokens, uint32_t n) {
    sy_snapshot *snap = NULL;
    char why[256];
    if (sy_snapshot_open_file(path, NULL, &snap, why, sizeof why) != SY_SNAPSHOT_OK) return false;
    uint32_t have = 0;
    const int32_t *ledger = sy_snapshot_tokens(snap, &have);
    bool same = sy_snapshot_key_check(sy_snapshot_get_key(snap), key, why, sizeof why) == SY_SNAPSHOT_OK &&
                have == n && memcmp(ledger, tokens, (size_t)n * sizeof *tokens) == 0;
    while (same) {
        uint32_t begin, end;
        const uint8_t *raw;
        size_t len;
        bool done;
        if (sy_snapshot_next_chunk(snap, &begin, &end, &raw, &len, &done, why, sizeof why) != SY_SNAPSHOT_OK)
            same = false;
        else if (done)
            break;
    }
    sy_snapshot_close(snap);
    return same;
}

static int by_last_used(const void *pa, const void *pb) {
    const sy_sched_sequence *a = pa, *b = pb;
    if (a->last_used != b->last_used) return a->last_used < b->last_used ? -1 : 1;
    return a->slot - b->slot;
}

/* A model's warm sequences, copied out of the engine, waiting to be written (see snapshot_store.h). */
struct sy_snapshot_batch {
    char *model_name, *dir;
    uint64_t budget;
    sy_snapshot_capture **captures; /* oldest first: the most recently used gets the newest file time */
    size_t n;
};

sy_snapshot_batch *sy_snapshot_capture_model(const char *resume_path, const char *model_name,
                                             const sy_loaded_model *lm, sy_scheduler *sched, bool include_parked,
                                             uint64_t budget_bytes) {
    if (resume_path == NULL || model_name == NULL || lm == NULL || sched == NULL) return NULL;
    sy_snapshot_key key;
    char err[1024];
    if (sy_snapshot_model_key(lm, &key, err, sizeof err) != 0) {
        sy_log(SY_LOG_DEBUG, "model %s: no KV snapshot: %s", model_name, err);
        return NULL;
    }
    /* Gather what is warm: the slots, then the parked sequences. */
    uint32_t n_slots = sy_scheduler_slot_count(sched);
    size_t n_parked = include_parked ? sy_scheduler_get_parked(sched, NULL, 0) : 0;
    sy_sched_sequence *seqs = sy_xcalloc((size_t)n_slots + n_parked + 1, sizeof *seqs);
    size_t n = 0;
    for (uint32_t i = 0; i < n_slots; i++)
        if (sy_scheduler_get_slot(sched, i, &seqs[n]) && seqs[n].seq != NULL && seqs[n].n_tokens > 0 &&
            !seqs[n].busy)
            n++;
    if (n_parked > 0) {
        size_t got = sy_scheduler_get_parked(sched, seqs + n, n_parked);
        n += got < n_parked ? got : n_parked;
    }
    if (n == 0) {
        free(seqs);
        return NULL;
    }
    qsort(seqs, n, sizeof *seqs, by_last_used);
    bool *skip = sy_xcalloc(n, sizeof *skip);
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < n && !skip[i]; j++)
            if (i != j && !skip[j] && is_prefix_of(seqs[i].tokens, seqs[i].n_tokens, seqs[j].tokens, seqs[j].n_tokens) &&
                (seqs[i].n_tokens < seqs[j].n_tokens || i < j))
                skip[i] = true; /* another one begins with all of it */
    sy_snapshot_batch *b = sy_xcalloc(1, sizeof *b);
    b->model_name = sy_strdup(model_name);
    b->dir = sy_snapshot_model_dir(resume_path, model_name);
    b->budget = budget_bytes;
    b->captures = sy_xcalloc(n, sizeof *b->captures);
    for (size_t i = 0; i < n; i++) {
        if (skip[i]) continue;
        if (lm->engine->seq_length(lm->model, seqs[i].seq) != seqs[i].n_tokens) {
            sy_log(SY_LOG_WARN, "model %s: a sequence holds %u tokens but the scheduler counts %u; not saved",
                   model_name, (unsigned)lm->engine->seq_length(lm->model, seqs[i].seq),
                   (unsigned)seqs[i].n_tokens);
            continue;
        }
        sy_snapshot_capture *c = sy_snapshot_capture_take(&key, lm->plugin->engine_state, lm->model, seqs[i].seq,
                                                          seqs[i].tokens, seqs[i].n_tokens, err, sizeof err);
        if (c == NULL) {
            sy_log(SY_LOG_WARN, "model %s: KV snapshot of %u tokens not saved (engine): %s", model_name,
                   (unsigned)seqs[i].n_tokens, err);
            atomic_fetch_add(&count_write_failures, 1);
            continue;
        }
        b->captures[b->n++] = c;
    }
    free(skip);
    free(seqs);
    if (b->n == 0) {
        sy_snapshot_batch_free(b);
        return NULL;
    }
    return b;
}

size_t sy_snapshot_batch_count(const sy_snapshot_batch *b) { return b != NULL ? b->n : 0; }
const char *sy_snapshot_batch_dir(const sy_snapshot_batch *b) { return b->dir; }

uint64_t sy_snapshot_batch_bytes(const sy_snapshot_batch *b) {
    uint64_t total = 0;
    for (size_t i = 0; b != NULL && i < b->n; i++) total += sy_snapshot_capture_bytes(b->captures[i]);
    return total;
}

void sy_snapshot_batch_free(sy_snapshot_batch *b) {
    if (b == NULL) return;
    for (size_t i = 0; i < b->n; i++) sy_snapshot_capture_free(b->captures[i]);
    free(b->captures);
    free(b->model_name);
    free(b->dir);
    free(b);
}

int sy_snapshot_batch_write(sy_snapshot_batch *b) {
    if (b == NULL) return 0;
    const char *model_name = b->model_name, *dir = b->dir;
    char err[1024];
    sy_snapshot_store *st = sy_snapshot_store_open(dir, b->budget, err, sizeof err);
    if (st == NULL) {
        sy_log(SY_LOG_WARN, "model %s: KV snapshots not saved: %s", model_name, err);
        atomic_fetch_add(&count_write_failures, 1);
        sy_snapshot_batch_free(b);
        return 0;
    }
    double t0 = sy_now_seconds();
    int saved = 0, unchanged = 0;
    uint64_t tokens_saved = 0;
    sy_snapshot_write_stats total = {0};
    size_t n = b->n;
    char **written = sy_xcalloc(n, sizeof *written);
    for (size_t i = 0; i < n; i++) {
        const sy_snapshot_capture *c = b->captures[i];
        const sy_snapshot_key *key = sy_snapshot_capture_key(c);
        uint32_t n_tokens = 0;
        const int32_t *tokens = sy_snapshot_capture_tokens(c, &n_tokens);
        char name[32];
        sy_snapshot_store_name(tokens, n_tokens, name);
        char *path = sy_path_join(dir, name);
        if (already_saved(path, key, tokens, n_tokens)) {
            stamp_now(path); /* used again: newest in the LRU order */
            written[i] = path;
            saved++;
            unchanged++;
            tokens_saved += n_tokens;
            continue;
        }
        free(path);
        sy_engine_state_api replay;
        sy_model *model;
        const sy_seq *seq;
        sy_snapshot_capture_replay(c, &replay, &model, &seq);
        sy_snapshot_write_stats stats = {0};
        sy_snapshot_error e = sy_snapshot_store_save(st, key, &replay, model, seq, tokens, n_tokens, &written[i],
                                                     &stats, err, sizeof err);
        if (e != SY_SNAPSHOT_OK) {
            sy_log(SY_LOG_WARN, "model %s: KV snapshot of %u tokens not saved (%s): %s", model_name,
                   (unsigned)n_tokens, sy_snapshot_error_name(e), err);
            continue;
        }
        saved++;
        tokens_saved += n_tokens;
        total.raw_bytes += stats.raw_bytes;
        total.file_bytes += stats.file_bytes;
    }
    /* Older snapshots of this model that a sequence saved now extends are superseded. */
    sy_snapshot_file *files = NULL;
    size_t n_files = sy_snapshot_store_list(st, &files);
    for (size_t f = 0; f < n_files; f++) {
        bool mine = false;
        for (size_t i = 0; i < n && !mine; i++) mine = written[i] != NULL && strcmp(written[i], files[f].path) == 0;
        if (mine) continue;
        sy_snapshot *snap = NULL;
        if (sy_snapshot_open_file(files[f].path, NULL, &snap, err, sizeof err) != SY_SNAPSHOT_OK) continue;
        uint32_t have = 0;
        const int32_t *ledger = sy_snapshot_tokens(snap, &have);
        bool superseded = false;
        for (size_t i = 0; i < n && !superseded; i++) {
            if (written[i] == NULL) continue;
            uint32_t n_tokens = 0;
            const int32_t *tokens = sy_snapshot_capture_tokens(b->captures[i], &n_tokens);
            superseded = sy_snapshot_key_check(sy_snapshot_get_key(snap), sy_snapshot_capture_key(b->captures[i]),
                                               err, sizeof err) == SY_SNAPSHOT_OK &&
                         is_prefix_of(ledger, have, tokens, n_tokens);
        }
        sy_snapshot_close(snap);
        if (superseded && unlink(files[f].path) == 0)
            sy_log(SY_LOG_DEBUG, "model %s: removed %s, superseded by a longer snapshot", model_name, files[f].path);
    }
    sy_snapshot_files_free(files, n_files);
    if (saved > 0)
        sy_log(SY_LOG_INFO,
               "model %s: KV of %d sequence(s), %llu tokens, saved to %s in %.3f s (%d written: %llu state bytes in "
               "%llu file bytes; %d unchanged)",
               model_name, saved, (unsigned long long)tokens_saved, dir, sy_now_seconds() - t0, saved - unchanged,
               (unsigned long long)total.raw_bytes, (unsigned long long)total.file_bytes, unchanged);
    for (size_t i = 0; i < n; i++) free(written[i]);
    free(written);
    sy_snapshot_store_close(st);
    sy_snapshot_batch_free(b);
    return saved;
}

int sy_snapshot_persist_model(const char *resume_path, const char *model_name, const sy_loaded_model *lm,
                              sy_scheduler *sched, bool include_parked, uint64_t budget_bytes) {
    return sy_snapshot_batch_write(
        sy_snapshot_capture_model(resume_path, model_name, lm, sched, include_parked, budget_bytes));
}

/* Token ledgers restored so far, to skip snapshots that only repeat a prefix of one of them. */
typedef struct ledger_list {
    int32_t **tokens;
    uint32_t *n;
    size_t count;
} ledger_list;

static bool covered(const ledger_list *l, const int32_t *tokens, uint32_t n) {
    for (size_t i = 0; i < l->count; i++)
        if (is_prefix_of(tokens, n, l->tokens[i], l->n[i])) return true;
    return false;
}

int sy_snapshot_resume_model(const char *resume_path, const char *model_name, const sy_loaded_model *lm,
                             sy_scheduler *sched, bool into_host_cache, uint64_t budget_bytes) {
    if (resume_path == NULL || model_name == NULL || lm == NULL || sched == NULL) return 0;
    char *dir = sy_snapshot_model_dir(resume_path, model_name);
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        free(dir);
        return 0; /* nothing was ever saved */
    }
    char err[1024];
    sy_snapshot_key key;
    if (sy_snapshot_model_key(lm, &key, err, sizeof err) != 0) {
        sy_log(SY_LOG_INFO, "model %s: KV snapshots in %s not restored: %s", model_name, dir, err);
        free(dir);
        return 0;
    }
    sy_snapshot_store *st = sy_snapshot_store_open(dir, budget_bytes, err, sizeof err);
    if (st == NULL) {
        sy_log(SY_LOG_WARN, "model %s: KV snapshots not restored: %s", model_name, err);
        free(dir);
        return 0;
    }
    double t0 = sy_now_seconds();
    sy_snapshot_file *files = NULL;
    size_t n_files = sy_snapshot_store_list(st, &files);
    uint32_t n_slots = sy_scheduler_slot_count(sched);
    uint32_t next_slot = 0;
    bool cache_full = !into_host_cache;
    ledger_list done = {sy_xcalloc(n_files + 1, sizeof(int32_t *)), sy_xcalloc(n_files + 1, sizeof(uint32_t)), 0};
    int restored = 0;
    uint64_t tokens_restored = 0;
    bool *used = sy_xcalloc(n_files + 1, sizeof *used);
    for (size_t f = 0; f < n_files && (next_slot < n_slots || !cache_full); f++) {
        const char *path = files[f].path;
        sy_snapshot *snap = NULL;
        sy_snapshot_error e = sy_snapshot_open_file(path, NULL, &snap, err, sizeof err);
        if (e == SY_SNAPSHOT_OK) e = sy_snapshot_model_accepts(lm, sy_snapshot_get_key(snap), &key, err, sizeof err);
        if (e == SY_SNAPSHOT_OK) e = sy_snapshot_check_tokens(snap, lm->info.n_vocab, err, sizeof err);
        if (e != SY_SNAPSHOT_OK) {
            sy_log(SY_LOG_WARN, "model %s: snapshot %s skipped (%s): %s", model_name, path, sy_snapshot_error_name(e),
                   err);
            sy_snapshot_count_rejected(e);
            sy_snapshot_close(snap);
            continue;
        }
        uint32_t n_ledger = 0;
        const int32_t *ledger = sy_snapshot_tokens(snap, &n_ledger);
        if (covered(&done, ledger, n_ledger)) {
            sy_snapshot_close(snap);
            continue;
        }
        sy_seq *seq = NULL;
        uint32_t n_restored = 0;
        e = sy_snapshot_restore(snap, lm->engine, lm->plugin->engine_state, lm->model, NULL, 0, lm->info.n_ctx, &seq,
                                &n_restored, err, sizeof err);
        if (e != SY_SNAPSHOT_OK) {
            sy_log(SY_LOG_WARN, "model %s: snapshot %s skipped (%s): %s", model_name, path, sy_snapshot_error_name(e),
                   err);
            sy_snapshot_count_rejected(e);
            sy_snapshot_close(snap);
            continue;
        }
        if (seq == NULL) {
            sy_snapshot_close(snap);
            continue;
        }
        int32_t slot = next_slot < n_slots ? (int32_t)next_slot : -1;
        if (sy_scheduler_adopt_sequence(sched, slot, seq, ledger, n_restored) != 0) {
            lm->engine->seq_free(lm->model, seq);
            if (slot < 0) cache_full = true;
            sy_snapshot_close(snap);
            continue;
        }
        if (slot >= 0) next_slot++;
        done.tokens[done.count] = sy_xmalloc((size_t)n_restored * sizeof(int32_t));
        memcpy(done.tokens[done.count], ledger, (size_t)n_restored * sizeof(int32_t));
        done.n[done.count++] = n_restored;
        restored++;
        tokens_restored += n_restored;
        used[f] = true;
        sy_snapshot_close(snap);
    }
    /* Restored means used: they move to the newest end of the LRU order, keeping their order among themselves. */
    for (size_t f = n_files; f-- > 0;)
        if (used[f]) stamp_now(files[f].path);
    free(used);
    atomic_fetch_add(&count_restored, (uint64_t)restored);
    atomic_fetch_add(&count_restored_tokens, tokens_restored);
    if (restored > 0 || n_files > 0)
        sy_log(SY_LOG_INFO, "model %s: restored %d KV snapshot(s), %llu tokens, from %s in %.3f s", model_name,
               restored, (unsigned long long)tokens_restored, dir, sy_now_seconds() - t0);
    for (size_t i = 0; i < done.count; i++) free(done.tokens[i]);
    free(done.tokens);
    free(done.n);
    sy_snapshot_files_free(files, n_files);
    sy_snapshot_store_close(st);
    free(dir);
    return restored;
}
