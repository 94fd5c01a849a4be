/*
 * The slot API (see api_slots.h): save, restore and erase a slot's KV through snapshot files.
 */
#include "api/slots.h"

#include <dirent.h>
#include <stdatomic.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "api/context.h"
#include "api/lease.h"
#include "persist/snapshot_capture.h"
#include "base/log.h"
#include "persist/snapshot_store.h"
#include "base/util.h"

/* ------------------------------------------------------------------------------------------------------------
 * File names */

bool sy_slot_filename_ok(const char *name, char *err, size_t err_size) {
    if (name == NULL || name[0] == '\0') {
        snprintf(err, err_size, "filename is required");
        return false;
    }
    size_t len = strlen(name);
    if (len > SY_SLOT_MAX_FILENAME) {
        snprintf(err, err_size, "filename is %zu bytes, more than %d", len, SY_SLOT_MAX_FILENAME);
        return false;
    }
    if (name[0] == '.') {
        snprintf(err, err_size, "filename must not start with '.'");
        return false;
    }
    const unsigned char *s = (const unsigned char *)name;
    for (size_t i = 0; i < len;) {
        if (s[i] == '/' || s[i] == '\\') {
            snprintf(err, err_size, "filename must be a plain name, without path separators");
            return false;
        }
        if (s[i] < 0x20 || s[i] == 0x7F) {
            snprintf(err, err_size, "filename holds a control character at byte %zu", i);
            return false;
        }
        size_t n = sy_utf8_char_len(s + i, len - i);
        if (n == 0) {
            snprintf(err, err_size, "filename is not valid UTF-8 at byte %zu", i);
            return false;
        }
        i += n;
    }
    return true;
}

/* ------------------------------------------------------------------------------------------------------------
 * The operations, as tasks on the engine loop */

typedef struct slot_job {
    const sy_loaded_model *lm;
    uint32_t slot;
    const char *path;
    sy_snapshot_capture *capture; /* save: the slot's state, written to path off the engine loop */
    int status;
    sy_slot_result res;
    char err[1024];
} slot_job;

static void save_task(sy_scheduler *s, void *user) {
    slot_job *job = user;
    sy_sched_sequence seq;
    if (!sy_scheduler_get_slot(s, job->slot, &seq)) {
        job->status = 404;
        snprintf(job->err, sizeof job->err, "there is no slot %u (the model has %u)", (unsigned)job->slot,
                 (unsigned)sy_scheduler_slot_count(s));
        return;
    }
    if (seq.busy) {
        job->status = 409;
        snprintf(job->err, sizeof job->err, "slot %u is processing a request", (unsigned)job->slot);
        return;
    }
    if (seq.seq == NULL || seq.n_tokens == 0) {
        job->status = 400;
        snprintf(job->err, sizeof job->err, "slot %u holds no tokens to save", (unsigned)job->slot);
        return;
    }
    sy_snapshot_key key;
    if (sy_snapshot_model_key(job->lm, &key, job->err, sizeof job->err) != 0) {
        job->status = 501;
        return;
    }
    /* Only the copy happens here, on the engine loop; compressing and writing happen on the caller's thread. */
    job->capture = sy_snapshot_capture_take(&key, job->lm->plugin->engine_state, job->lm->model, seq.seq, seq.tokens,
                                        seq.n_tokens, job->err, sizeof job->err);
    if (job->capture == NULL) {
        job->status = 500;
        return;
    }
    job->status = 200;
    job->res.n_tokens = seq.n_tokens;
    job->res.bytes = sy_snapshot_capture_bytes(job->capture);
}

static void restore_task(sy_scheduler *s, void *user) {
    slot_job *job = user;
    sy_sched_sequence current;
    if (!sy_scheduler_get_slot(s, job->slot, &current)) {
        job->status = 404;
        snprintf(job->err, sizeof job->err, "there is no slot %u (the model has %u)", (unsigned)job->slot,
                 (unsigned)sy_scheduler_slot_count(s));
        return;
    }
    if (current.busy) {
        job->status = 409;
        snprintf(job->err, sizeof job->err, "slot %u is processing a request", (unsigned)job->slot);
        return;
    }
    sy_snapshot_key key;
    if (sy_snapshot_model_key(job->lm, &key, job->err, sizeof job->err) != 0) {
        job->status = 501;
        return;
    }
    char why[900] = "";
    sy_snapshot *snap = NULL;
    sy_snapshot_error e = sy_snapshot_open_file(job->path, NULL, &snap, why, sizeof why);
    if (e == SY_SNAPSHOT_OK) e = sy_snapshot_model_accepts(job->lm, sy_snapshot_get_key(snap), &key, why, sizeof why);
    if (e == SY_SNAPSHOT_OK) e = sy_snapshot_check_tokens(snap, job->lm->info.n_vocab, why, sizeof why);
    sy_seq *seq = NULL;
    uint32_t n = 0;
    if (e == SY_SNAPSHOT_OK)
        e = sy_snapshot_restore(snap, job->lm->engine, job->lm->plugin->engine_state, job->lm->model, NULL, 0,
                                job->lm->info.n_ctx, &seq, &n, why, sizeof why);
    if (e != SY_SNAPSHOT_OK) {
        sy_snapshot_close(snap);
        if (e != SY_SNAPSHOT_ERR_IO) sy_snapshot_count_rejected(e);
        sy_log(SY_LOG_WARN, "slot %u: snapshot %s refused (%s): %s", (unsigned)job->slot, job->path,
               sy_snapshot_error_name(e), why);
        job->status = e == SY_SNAPSHOT_ERR_IO ? 500 : 400;
        snprintf(job->err, sizeof job->err, "snapshot refused (%s): %s", sy_snapshot_error_name(e), why);
        return;
    }
    uint32_t n_ledger = 0;
    const int32_t *ledger = sy_snapshot_tokens(snap, &n_ledger);
    if (seq == NULL || sy_scheduler_adopt_sequence(s, (int32_t)job->slot, seq, ledger, n) != 0) {
        if (seq != NULL) job->lm->engine->seq_free(job->lm->model, seq);
        sy_snapshot_close(snap);
        job->status = 500;
        snprintf(job->err, sizeof job->err, "the restored sequence could not be given to slot %u",
                 (unsigned)job->slot);
        return;
    }
    sy_snapshot_close(snap);
    struct stat sb;
    job->status = 200;
    job->res.n_tokens = n;
    job->res.bytes = stat(job->path, &sb) == 0 ? (uint64_t)sb.st_size : 0;
}

static void erase_task(sy_scheduler *s, void *user) {
    slot_job *job = user;
    if (job->slot >= sy_scheduler_slot_count(s)) {
        job->status = 404;
        snprintf(job->err, sizeof job->err, "there is no slot %u (the model has %u)", (unsigned)job->slot,
                 (unsigned)sy_scheduler_slot_count(s));
        return;
    }
    long n = sy_scheduler_erase_slot(s, job->slot);
    if (n < 0) {
        job->status = 409;
        snprintf(job->err, sizeof job->err, "slot %u is processing a request", (unsigned)job->slot);
        return;
    }
    job->status = 200;
    job->res.n_tokens = (uint32_t)n;
}

static int run_job(sy_scheduler *s, void (*fn)(sy_scheduler *, void *), slot_job *job, sy_slot_result *res,
                   char *err, size_t err_size) {
    double t0 = sy_now_seconds();
    if (sy_scheduler_run_task(s, fn, job) != 0) {
        snprintf(err, err_size, "the model is shutting down");
        return 503;
    }
    job->res.ms = (sy_now_seconds() - t0) * 1000.0;
    if (res != NULL) *res = job->res;
    if (job->status != 200) snprintf(err, err_size, "%s", job->err);
    return job->status;
}

static int path_job(sy_scheduler *s, const sy_loaded_model *lm, uint32_t slot, const char *path,
                    void (*fn)(sy_scheduler *, void *), sy_slot_result *res, char *err, size_t err_size) {
    slot_job *job = sy_xcalloc(1, sizeof *job);
    job->lm = lm;
    job->slot = slot;
    job->path = path;
    int status = run_job(s, fn, job, res, err, err_size);
    free(job);
    return status;
}

static int file_job(sy_scheduler *s, const sy_loaded_model *lm, uint32_t slot, const char *dir,
                    const char *filename, void (*fn)(sy_scheduler *, void *), sy_slot_result *res, char *err,
                    size_t err_size) {
    if (s == NULL || lm == NULL || dir == NULL) {
        snprintf(err, err_size, "the slot API is off: set [host] slot_save_path");
        return 501;
    }
    if (!sy_slot_filename_ok(filename, err, err_size)) return 400;
    char *path = sy_path_join(dir, filename);
    int status = path_job(s, lm, slot, path, fn, res, err, err_size);
    free(path);
    return status;
}

/* Bytes of the saved slots in dir (plain files, not the dot files of saves in progress), but `except`. */
static uint64_t folder_bytes(const char *dir, const char *except) {
    DIR *d = opendir(dir);
    if (d == NULL) return 0;
    uint64_t total = 0;
    struct dirent *ent;
    while ((ent = readdir(d)) != NULL) {
        if (ent->d_name[0] == '.' || (except != NULL && strcmp(ent->d_name, except) == 0)) continue;
        struct stat sb;
        if (fstatat(dirfd(d), ent->d_name, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(sb.st_mode))
            total += (uint64_t)sb.st_size;
    }
    closedir(d);
    return total;
}

/* rename(2) that fails with EEXIST instead of replacing. */
static int rename_no_replace(const char *from, const char *to) {
#ifdef SYS_renameat2
    if (syscall(SYS_renameat2, AT_FDCWD, from, AT_FDCWD, to, 1 /* RENAME_NOREPLACE */) == 0) return 0;
    if (errno != EINVAL && errno != ENOSYS) return -1;
#endif
    if (link(from, to) != 0) return -1; /* a file system without renameat2: link refuses an existing name too */
    unlink(from);
    return 0;
}

int sy_slot_save_with(sy_scheduler *s, const sy_loaded_model *lm, uint32_t slot, const char *dir,
                      const char *filename, const sy_slot_save_options *opts, sy_slot_result *res, char *err,
                      size_t err_size) {
    if (dir == NULL || s == NULL || lm == NULL) return file_job(s, lm, slot, dir, filename, save_task, res, err, err_size);
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        snprintf(err, err_size, "slot_save_path %s is not a folder", dir);
        return 500;
    }
    if (!sy_slot_filename_ok(filename, err, err_size)) return 400;
    char *path = sy_path_join(dir, filename);
    if (!opts->overwrite && stat(path, &sb) == 0) {
        snprintf(err, err_size, "a saved slot named '%s' exists; send \"overwrite\": true to replace it", filename);
        free(path);
        return 409;
    }
    /* Written under a dot name (which no user name can take), then moved into place once within budget. */
    static atomic_uint staged_count;
    char staged_name[64];
    snprintf(staged_name, sizeof staged_name, ".saving-%ld-%u", (long)getpid(), atomic_fetch_add(&staged_count, 1));
    char *staged = sy_path_join(dir, staged_name);
    sy_slot_result mine;
    memset(&mine, 0, sizeof mine);
    if (res == NULL) res = &mine;
    slot_job *job = sy_xcalloc(1, sizeof *job);
    job->lm = lm;
    job->slot = slot;
    job->path = staged;
    int status = run_job(s, save_task, job, res, err, err_size);
    if (status == 200) {
        double t0 = sy_now_seconds();
        sy_snapshot_write_stats stats = {0};
        sy_snapshot_error e = sy_snapshot_capture_write(job->capture, staged, &stats, err, err_size);
        if (e != SY_SNAPSHOT_OK) status = e == SY_SNAPSHOT_ERR_ARGUMENT ? 400 : 500;
        res->bytes = stats.file_bytes;
        res->ms += (sy_now_seconds() - t0) * 1000.0;
    }
    sy_snapshot_capture_free(job->capture);
    free(job);
    if (status == 200 && opts->max_bytes > 0) {
        uint64_t used = folder_bytes(dir, opts->overwrite ? filename : NULL);
        if (used + res->bytes > opts->max_bytes) {
            snprintf(err, err_size,
                     "saving slot %u takes %llu bytes, and the saved slots hold %llu of slot_save_max_bytes (%llu): "
                     "erase some files first",
                     (unsigned)slot, (unsigned long long)res->bytes, (unsigned long long)used,
                     (unsigned long long)opts->max_bytes);
            status = 507;
        }
    }
    if (status == 200) {
        int rc = opts->overwrite ? rename(staged, path) : rename_no_replace(staged, path);
        if (rc != 0) {
            if (errno == EEXIST) {
                snprintf(err, err_size, "a saved slot named '%s' exists; send \"overwrite\": true to replace it",
                         filename);
                status = 409;
            } else {
                snprintf(err, err_size, "moving the saved slot into %s: %s", path, strerror(errno));
                status = 500;
            }
        }
    }
    if (status != 200) unlink(staged);
    free(staged);
    free(path);
    return status;
}

int sy_slot_save(sy_scheduler *s, const sy_loaded_model *lm, uint32_t slot, const char *dir, const char *filename,
                 sy_slot_result *res, char *err, size_t err_size) {
    sy_slot_save_options opts = {false, 0};
    return sy_slot_save_with(s, lm, slot, dir, filename, &opts, res, err, err_size);
}

int sy_slot_restore(sy_scheduler *s, const sy_loaded_model *lm, uint32_t slot, const char *dir,
                    const char *filename, sy_slot_result *res, char *err, size_t err_size) {
    if (dir != NULL && sy_slot_filename_ok(filename, err, err_size)) {
        char *path = sy_path_join(dir, filename);
        struct stat sb;
        bool exists = stat(path, &sb) == 0;
        free(path);
        if (!exists) {
            snprintf(err, err_size, "no saved slot file named '%s'", filename);
            return 404;
        }
    }
    return file_job(s, lm, slot, dir, filename, restore_task, res, err, err_size);
}

int sy_slot_erase(sy_scheduler *s, uint32_t slot, sy_slot_result *res, char *err, size_t err_size) {
    if (s == NULL) {
        snprintf(err, err_size, "no scheduler");
        return 500;
    }
    slot_job job;
    memset(&job, 0, sizeof job);
    job.slot = slot;
    return run_job(s, erase_task, &job, res, err, err_size);
}

typedef struct list_job {
    sy_slot_info *out;
    size_t cap, n;
} list_job;

static void list_task(sy_scheduler *s, void *user) {
    list_job *job = user;
    job->n = sy_scheduler_slot_count(s);
    for (uint32_t i = 0; i < job->n && i < job->cap; i++) {
        sy_sched_sequence seq;
        sy_scheduler_get_slot(s, i, &seq);
        job->out[i].id = i;
        job->out[i].busy = seq.busy;
        job->out[i].n_tokens = seq.n_tokens;
    }
}

size_t sy_slot_list(sy_scheduler *s, sy_slot_info *out, size_t cap) {
    list_job job = {out, out != NULL ? cap : 0, 0};
    if (sy_scheduler_run_task(s, list_task, &job) != 0) return 0;
    return job.n;
}

/* ------------------------------------------------------------------------------------------------------------
 * HTTP */

/* The model a slot request is about: ?model=, else the only configured model. Copied into name. */
static bool request_model(sy_http_request *r, char *name, size_t name_size, char *slot_dir, size_t dir_size) {
    sy_api_context *srv = sy_api_ctx(r);
    const sy_config *cfg = sy_api_config_acquire(srv);
    const char *model = sy_http_query(r, "model");
    bool ok = true;
    if (model != NULL && model[0] != '\0') snprintf(name, name_size, "%s", model);
    else if (cfg != NULL && cfg->n_models == 1) snprintf(name, name_size, "%s", cfg->models[0].name);
    else ok = false;
    slot_dir[0] = '\0';
    if (cfg != NULL && cfg->host.slot_save_path != NULL)
        snprintf(slot_dir, dir_size, "%s", cfg->host.slot_save_path);
    sy_api_config_release(srv, cfg);
    return ok;
}

static void respond_slots(sy_http_request *r, const sy_api_model *m) {
    sy_scheduler *s = sy_model_lease_scheduler(m->lease);
    uint32_t n_slots = sy_scheduler_slot_count(s);
    sy_slot_info *info = sy_xcalloc(n_slots ? n_slots : 1, sizeof *info);
    size_t n = sy_slot_list(s, info, n_slots);
    if (n == 0) {
        free(info);
        sy_http_respond_error(r, 503, "model_unavailable", NULL, "model %s is shutting down", m->name);
        return;
    }
    cJSON *arr = cJSON_CreateArray();
    for (size_t i = 0; i < n && i < n_slots; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "id", info[i].id);
        cJSON_AddNumberToObject(o, "id_task", -1);
        cJSON_AddNumberToObject(o, "n_ctx", m->lm->info.n_ctx);
        cJSON_AddBoolToObject(o, "is_processing", info[i].busy);
        cJSON_AddNumberToObject(o, "n_tokens", info[i].n_tokens);
        cJSON_AddStringToObject(o, "model", m->name);
        cJSON_AddBoolToObject(o, "loaded", true);
        cJSON_AddItemToArray(arr, o);
    }
    free(info);
    sy_http_respond_json(r, 200, arr);
}

/* The slots of a model that is not loaded, from its config: idle and empty. */
static void respond_unloaded_slots(sy_http_request *r, const char *model_name) {
    sy_api_context *srv = sy_api_ctx(r);
    const sy_config *cfg = sy_api_config_acquire(srv);
    const sy_config_model *cm = cfg ? sy_config_find_model(cfg, model_name) : NULL;
    if (cm == NULL) {
        sy_api_config_release(srv, cfg);
        char shown[160];
        sy_utf8_sanitize(shown, sizeof shown, model_name, strlen(model_name));
        sy_http_respond_error(r, 404, "model_not_found", "model", "model '%s' not found", shown);
        return;
    }
    cJSON *arr = cJSON_CreateArray();
    for (uint32_t i = 0; i < cm->parallel; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "id", i);
        cJSON_AddNumberToObject(o, "id_task", -1);
        cJSON_AddNumberToObject(o, "n_ctx", 0); /* not known before the load */
        cJSON_AddBoolToObject(o, "is_processing", false);
        cJSON_AddNumberToObject(o, "n_tokens", 0);
        cJSON_AddStringToObject(o, "model", cm->name);
        cJSON_AddBoolToObject(o, "loaded", false);
        cJSON_AddItemToArray(arr, o);
    }
    sy_api_config_release(srv, cfg);
    sy_http_respond_json(r, 200, arr);
}

/* "0".."999999999" -> slot id. */
bool sy_slot_parse_id(const char *s, uint32_t *out) {
    if (s == NULL || *s == '\0' || strlen(s) > 9) return false;
    uint32_t v = 0;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9') return false;
        v = v * 10 + (uint32_t)(*p - '0');
    }
    *out = v;
    return true;
}

void sy_api_slots(sy_http_request *r) {
    char model_name[SY_CONFIG_MAX_NAME_LEN + 1];
    char slot_dir[SY_CONFIG_MAX_PATH_LEN + 1];
    bool named = request_model(r, model_name, sizeof model_name, slot_dir, sizeof slot_dir);
    uint64_t slot_max_bytes = 0;
    {
        const sy_config *cfg = sy_api_config_acquire(sy_api_ctx(r));
        if (cfg != NULL) slot_max_bytes = cfg->host.slot_save_max_bytes;
        sy_api_config_release(sy_api_ctx(r), cfg);
    }
    const char *id_text = sy_http_path_param(r);
    bool listing = id_text == NULL || id_text[0] == '\0';
    uint32_t slot = 0;
    const char *action = sy_http_query(r, "action");
    const char *filename = NULL;
    bool overwrite = false;
    cJSON *body = NULL;
    sy_api_error e;
    memset(&e, 0, sizeof e);
    if (!listing) {
        if (!sy_slot_parse_id(id_text, &slot)) {
            char shown[64];
            sy_utf8_sanitize(shown, sizeof shown, id_text, strlen(id_text));
            sy_http_respond_error(r, 400, "invalid_slot", "id_slot", "'%s' is not a slot id", shown);
            return;
        }
        if (action == NULL || (strcmp(action, "save") != 0 && strcmp(action, "restore") != 0 &&
                               strcmp(action, "erase") != 0)) {
            sy_http_respond_error(r, 400, "invalid_action", "action", "action must be save, restore or erase");
            return;
        }
        if (slot_dir[0] == '\0') {
            sy_http_respond_error(r, 501, "not_supported", NULL,
                                  "the slot save/restore API is off: set [host] slot_save_path in the config");
            return;
        }
        if (strcmp(action, "erase") != 0) {
            size_t len = 0;
            sy_http_body(r, &len);
            if (len > 0) {
                if (sy_api_parse_body(r, &body, &e) != 0 ||
                    sy_json_get_string(body, "", "filename", &filename, NULL, &e) != 0 ||
                    sy_json_get_bool(body, "", "overwrite", &overwrite, NULL, &e) != 0) {
                    cJSON_Delete(body);
                    sy_api_respond_error(r, &e);
                    return;
                }
            }
            if (filename == NULL) filename = sy_http_query(r, "filename");
            const char *ow = sy_http_query(r, "overwrite");
            if (ow != NULL) overwrite = strcmp(ow, "true") == 0 || strcmp(ow, "1") == 0;
            char why[256];
            if (!sy_slot_filename_ok(filename, why, sizeof why)) {
                cJSON_Delete(body);
                sy_http_respond_error(r, 400, "invalid_filename", "filename", "%s", why);
                return;
            }
        }
    }
    if (!named) {
        cJSON_Delete(body);
        sy_http_respond_error(r, 400, "missing_model", "model",
                              "name the model with ?model=NAME (more than one model is configured)");
        return;
    }
    sy_api_model m;
    /* A listing reports; it never loads (or swaps) a model: an unloaded one shows its configured slots idle. */
    if (listing && sy_api_acquire_loaded(r, model_name, &m) != 0) {
        respond_unloaded_slots(r, model_name);
        return;
    }
    if (!listing && sy_api_acquire(r, model_name, &m, &e) != 0) {
        cJSON_Delete(body);
        sy_api_respond_error(r, &e);
        return;
    }
    if (listing) {
        respond_slots(r, &m);
        sy_api_model_release(&m);
        return;
    }
    sy_scheduler *s = sy_model_lease_scheduler(m.lease);
    sy_slot_result res;
    memset(&res, 0, sizeof res);
    char err[1024] = "";
    int status;
    cJSON *out = cJSON_CreateObject();
    cJSON_AddNumberToObject(out, "id_slot", slot);
    if (strcmp(action, "save") == 0) {
        sy_slot_save_options so = {overwrite, slot_max_bytes};
        status = sy_slot_save_with(s, m.lm, slot, slot_dir, filename, &so, &res, err, sizeof err);
        cJSON_AddStringToObject(out, "filename", filename);
        cJSON_AddNumberToObject(out, "n_saved", res.n_tokens);
        cJSON_AddNumberToObject(out, "n_written", (double)res.bytes);
        cJSON *t = cJSON_AddObjectToObject(out, "timings");
        cJSON_AddNumberToObject(t, "save_ms", res.ms);
    } else if (strcmp(action, "restore") == 0) {
        status = sy_slot_restore(s, m.lm, slot, slot_dir, filename, &res, err, sizeof err);
        cJSON_AddStringToObject(out, "filename", filename);
        cJSON_AddNumberToObject(out, "n_restored", res.n_tokens);
        cJSON_AddNumberToObject(out, "n_read", (double)res.bytes);
        cJSON *t = cJSON_AddObjectToObject(out, "timings");
        cJSON_AddNumberToObject(t, "restore_ms", res.ms);
    } else {
        status = sy_slot_erase(s, slot, &res, err, sizeof err);
        cJSON_AddNumberToObject(out, "n_erased", res.n_tokens);
    }
    sy_api_model_release(&m);
    cJSON_Delete(body); /* filename pointed into it: used above, before this */
    if (status != 200) {
        cJSON_Delete(out);
        const char *code = status == 404                          ? "not_found"
                           : status == 409 && strstr(err, "exists") ? "file_exists"
                           : status == 409                          ? "slot_busy"
                           : status == 501                          ? "not_supported"
                           : status == 507 ? "slot_save_budget"
                           : status == 400 ? "invalid_request" : "slot_action_failed";
        sy_http_respond_error(r, status, code, NULL, "%s", err);
        return;
    }
    sy_http_respond_json(r, 200, out);
}
