/*
 * The model manager (see model_manager.h): llama-swap's rules over the models of a config.
 *
 * One mutex guards everything here and one condition variable announces every change of state, lease count or
 * table. Engine calls that take long (load, unload, stopping a scheduler) run with the mutex released by the
 * thread that owns the transition: a model in LOADING belongs to its loader, one in UNLOADING to whoever claims
 * the unload once its last lease is gone. Only one model loads at a time (`loader_busy`), which keeps the group
 * and budget decisions simple and free of load-against-load deadlocks.
 *
 * Entries: `models` are the current config's, in config order; `retired` ones were removed or changed by a reload
 * and live on only until they are unloaded and nothing points at them (leases, pins of waiting threads).
 *
 * Lock order: manager, then a scheduler's own lock (status reads scheduler counters under the manager lock).
 * Schedulers never call the manager, and their callbacks run with no scheduler lock held, so a lease may be
 * released from a generation's callback; the unload that release would trigger is then left to another thread
 * (a waiting loader, tick(), unload() or destroy), since a scheduler cannot stop itself from its own loop.
 */
#include "manager/model_manager.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "base/log.h"
#include "base/worker.h"
#include "manager/process_model.h"
#include "persist/snapshot_store.h"
#include "engine/speculative.h"
#include "base/util.h"

typedef struct mm_group {
    char *name;
    bool swap, exclusive, persistent;
} mm_group;

typedef struct mm_model {
    /* From the config. */
    char *name, *plugin, *path, *group;
    char **aliases;
    size_t n_aliases;
    char *chat_template, *chat_template_file;
    sy_option *options; /* deep copies */
    size_t n_options;
    uint32_t ttl_s, parallel, max_queue, queue_timeout_s;
    uint32_t prefix_cache_tokens; /* the scheduler's host prefix cache budget; 0: off */
    bool preload;
    bool persist_on_unload; /* KV snapshots at swap and ttl unloads (shutdown always saves) */
    sy_config_draft draft;  /* speculative decoding: none, ngram, or the model named draft_model */
    char *draft_model;
    uint32_t draft_max, draft_min;
    sy_process_spec *proc_spec; /* a process model (cmd); NULL for plugin models */
    char *peer;                 /* served by this peer (the proxy's business): never loaded here */

    /* State, under the manager lock. */
    sy_model_state state;
    bool retired;        /* removed or replaced by a reload */
    bool unload_pending; /* UNLOADING, not yet claimed: the first thread that sees it lease-free unloads it */
    bool unload_is_swap; /* the unload makes room for another model (counted in swaps) */
    uint32_t leases;
    uint32_t pins;       /* threads holding the pointer across a wait */
    sy_loaded_model lm;
    sy_scheduler *sched;
    double last_used;
    /* A keep_alive override of ttl_s for the current load (sy_model_manager_set_ttl); an unload ends it. */
    bool ttl_override_set;
    int64_t ttl_override_s; /* < 0: never unload when idle; 0: as soon as idle; else seconds */
    uint64_t memory_bytes; /* host bytes last measured; after an unload, the estimate for the next load */
    uint64_t device_bytes; /* the same for accelerator memory */
    bool measured;
    bool estimated;        /* not measured yet: the two above are the engine's estimate */
    uint64_t load_failures;
    uint64_t unload_count; /* unloads done, so a waiter can tell "it went" even if it is loading again */
    bool snapshots_saved;  /* this process saved its KV at an unload: its next load restores them */
    /* Speculative decoding while loaded (owned like lm: by the loader, then by the unloader). A draft model is
     * loaded as a private instance beside the target, so that only the target's engine loop ever calls it. */
    sy_speculator *speculator;
    sy_loaded_model draft_lm;
    char *published_target, *published_draft; /* names lent to the drafter through acquire_engine */
    sy_process *proc;    /* the running child of a process model (owned like lm) */
    char last_error[512];
} mm_model;

struct sy_model_lease {
    sy_model_manager *mm;
    mm_model *m;
    char *chat_template, *chat_template_file; /* copies: a reload may change the model's while we run */
};

typedef struct mm_selector {
    char *name;
    sy_config_strategy strategy;
    char **targets;
    size_t n_targets;
    uint32_t spillover;
} mm_selector;

struct sy_model_manager {
    const sy_plugin_registry *reg;
    mm_selector *selectors;
    size_t n_selectors;
    pthread_mutex_t lock;
    pthread_cond_t changed;
    mm_model **models;
    size_t n_models;
    mm_model **retired;
    size_t n_retired, cap_retired;
    mm_group *groups;
    size_t n_groups;
    uint64_t max_memory, max_device_memory;
    uint32_t load_timeout_s;
    bool loader_busy;
    bool destroying;
    sy_model_manager_counters counters;
    /* KV snapshots ([host] resume_path, resume, resume_no_host_cache; snapshot_store.h). */
    char *resume_path; /* NULL: no snapshots */
    bool resume, resume_no_host_cache;
    uint64_t resume_max_bytes; /* each model's snapshot folder; 0: the store's default */
    sy_preload_state preload_state; /* the start's preload (/health: readiness) */
    /* What an unload need not wait for: its KV snapshot writes (tagged with the model's store folder) and, with no
     * memory budget, the close of the model (unmapping, freeing). NULL: done in line. */
    sy_worker *background;
};

/* ------------------------------------------------------------------------------------------------------------
 * Config copies */

static void free_options(sy_option *options, size_t n) {
    for (size_t i = 0; i < n; i++) {
        free((char *)options[i].key);
        free((char *)options[i].value);
    }
    free(options);
}

static char *dup_or_null(const char *s) { return s != NULL ? sy_strdup(s) : NULL; }

static void model_free_config(mm_model *m) {
    free(m->name);
    free(m->plugin);
    free(m->path);
    free(m->group);
    for (size_t i = 0; i < m->n_aliases; i++) free(m->aliases[i]);
    free(m->aliases);
    free(m->chat_template);
    free(m->chat_template_file);
    free(m->draft_model);
    free_options(m->options, m->n_options);
    sy_process_spec_free(m->proc_spec);
    free(m->peer);
}

static void model_free(mm_model *m) {
    model_free_config(m);
    free(m);
}

static mm_model *model_from_config(const sy_config_model *c) {
    mm_model *m = sy_xcalloc(1, sizeof *m);
    m->name = sy_strdup(c->name);
    m->plugin = dup_or_null(c->plugin);
    m->path = dup_or_null(c->path);
    m->group = sy_strdup(c->group != NULL ? c->group : SY_CONFIG_DEFAULT_GROUP);
    m->n_aliases = c->aliases.count;
    m->aliases = sy_xcalloc(m->n_aliases ? m->n_aliases : 1, sizeof *m->aliases);
    for (size_t i = 0; i < m->n_aliases; i++) m->aliases[i] = sy_strdup(c->aliases.items[i]);
    m->chat_template = dup_or_null(c->chat_template);
    m->chat_template_file = dup_or_null(c->chat_template_file);
    m->n_options = c->n_options;
    m->options = sy_xcalloc(m->n_options ? m->n_options : 1, sizeof *m->options);
    for (size_t i = 0; i < m->n_options; i++) {
        m->options[i].key = sy_strdup(c->options[i].key);
        m->options[i].value = sy_strdup(c->options[i].value);
    }
    m->ttl_s = c->ttl_s;
    m->parallel = c->parallel ? c->parallel : 1;
    m->max_queue = c->max_queue;
    m->queue_timeout_s = c->queue_timeout_s;
    m->prefix_cache_tokens = c->prefix_cache_tokens;
    m->preload = c->preload;
    m->persist_on_unload = c->persist_on_unload;
    m->draft = c->draft;
    m->draft_model = dup_or_null(c->draft_model);
    m->draft_max = c->draft_max;
    m->draft_min = c->draft_min;
    m->proc_spec = sy_process_spec_from_config(c);
    m->peer = dup_or_null(c->peer);
    m->state = SY_MODEL_UNLOADED;
    return m;
}

static bool same_string(const char *a, const char *b) {
    if (a == NULL || b == NULL) return a == b;
    return strcmp(a, b) == 0;
}

/* Would the loaded instance of `a` differ from one loaded with `b`'s settings? */
static bool same_instance(const mm_model *a, const mm_model *b) {
    if (!same_string(a->plugin, b->plugin) || !same_string(a->path, b->path)) return false;
    if (!sy_process_spec_equal(a->proc_spec, b->proc_spec) || !same_string(a->peer, b->peer)) return false;
    if (a->parallel != b->parallel || a->max_queue != b->max_queue || a->queue_timeout_s != b->queue_timeout_s ||
        a->prefix_cache_tokens != b->prefix_cache_tokens)
        return false;
    if (a->draft != b->draft || !same_string(a->draft_model, b->draft_model) || a->draft_max != b->draft_max ||
        a->draft_min != b->draft_min)
        return false;
    if (a->n_options != b->n_options) return false;
    for (size_t i = 0; i < a->n_options; i++)
        if (!same_string(a->options[i].key, b->options[i].key) ||
            !same_string(a->options[i].value, b->options[i].value))
            return false;
    return true;
}

/* Moves the settings that apply without reloading (names, group, ttl, templates) from `from` into `to`. */
static void take_light_settings(mm_model *to, mm_model *from) {
    char **aliases = to->aliases;
    size_t n_aliases = to->n_aliases;
    to->aliases = from->aliases, to->n_aliases = from->n_aliases;
    from->aliases = aliases, from->n_aliases = n_aliases;
    char *group = to->group, *chat_template = to->chat_template, *chat_template_file = to->chat_template_file;
    to->group = from->group, from->group = group;
    to->chat_template = from->chat_template, from->chat_template = chat_template;
    to->chat_template_file = from->chat_template_file, from->chat_template_file = chat_template_file;
    to->ttl_s = from->ttl_s;
    to->preload = from->preload;
    to->persist_on_unload = from->persist_on_unload;
}

static mm_group *groups_from_config(const sy_config *cfg, size_t *n) {
    mm_group *g = sy_xcalloc(cfg->n_groups ? cfg->n_groups : 1, sizeof *g);
    for (size_t i = 0; i < cfg->n_groups; i++) {
        g[i].name = sy_strdup(cfg->groups[i].name);
        g[i].swap = cfg->groups[i].swap;
        g[i].exclusive = cfg->groups[i].exclusive;
        g[i].persistent = cfg->groups[i].persistent;
    }
    *n = cfg->n_groups;
    return g;
}

static mm_selector *selectors_from_config(const sy_config *cfg, size_t *n) {
    mm_selector *s = sy_xcalloc(cfg->n_selectors ? cfg->n_selectors : 1, sizeof *s);
    for (size_t i = 0; i < cfg->n_selectors; i++) {
        const sy_config_selector *c = &cfg->selectors[i];
        s[i].name = sy_strdup(c->name);
        s[i].strategy = c->strategy;
        s[i].spillover = c->spillover ? c->spillover : 1;
        s[i].n_targets = c->targets.count;
        s[i].targets = sy_xcalloc(c->targets.count ? c->targets.count : 1, sizeof *s[i].targets);
        for (size_t k = 0; k < c->targets.count; k++) s[i].targets[k] = sy_strdup(c->targets.items[k]);
    }
    *n = cfg->n_selectors;
    return s;
}

static void selectors_free(mm_selector *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        free(s[i].name);
        for (size_t k = 0; k < s[i].n_targets; k++) free(s[i].targets[k]);
        free(s[i].targets);
    }
    free(s);
}

static void groups_free(mm_group *g, size_t n) {
    for (size_t i = 0; i < n; i++) free(g[i].name);
    free(g);
}

/* ------------------------------------------------------------------------------------------------------------
 * Helpers under the lock */

static const mm_group *find_group(const sy_model_manager *mm, const char *name) {
    for (size_t i = 0; i < mm->n_groups; i++)
        if (strcmp(mm->groups[i].name, name) == 0) return &mm->groups[i];
    return NULL;
}

/* A group the config does not list (a retired model's, gone from the config) acts with the defaults. */
static mm_group group_rules(const sy_model_manager *mm, const char *name) {
    const mm_group *g = find_group(mm, name);
    if (g != NULL) return *g;
    mm_group d = {NULL, true, true, false};
    return d;
}

static mm_model *find_current(const sy_model_manager *mm, const char *name_or_alias) {
    for (size_t i = 0; i < mm->n_models; i++)
        if (strcmp(mm->models[i]->name, name_or_alias) == 0) return mm->models[i];
    for (size_t i = 0; i < mm->n_models; i++)
        for (size_t k = 0; k < mm->models[i]->n_aliases; k++)
            if (strcmp(mm->models[i]->aliases[k], name_or_alias) == 0) return mm->models[i];
    /* then as Ollama names them: "NAME" and "NAME:latest" are one model */
    for (size_t i = 0; i < mm->n_models; i++) {
        if (sy_model_name_equal(mm->models[i]->name, name_or_alias)) return mm->models[i];
        for (size_t k = 0; k < mm->models[i]->n_aliases; k++)
            if (sy_model_name_equal(mm->models[i]->aliases[k], name_or_alias)) return mm->models[i];
    }
    return NULL;
}

/* Every entry, current then retired: index i < n_models + n_retired. */
static size_t n_entries(const sy_model_manager *mm) { return mm->n_models + mm->n_retired; }
static mm_model *entry_at(const sy_model_manager *mm, size_t i) {
    return i < mm->n_models ? mm->models[i] : mm->retired[i - mm->n_models];
}

/* Frees a retired entry once nothing refers to it. The caller must not use m afterwards. */
static void maybe_free_retired(sy_model_manager *mm, mm_model *m) {
    if (!m->retired || m->state != SY_MODEL_UNLOADED || m->leases != 0 || m->pins != 0) return;
    for (size_t i = 0; i < mm->n_retired; i++) {
        if (mm->retired[i] != m) continue;
        mm->retired[i] = mm->retired[--mm->n_retired];
        model_free(m);
        return;
    }
}

static void retire(sy_model_manager *mm, mm_model *m) {
    m->retired = true;
    if (mm->n_retired == mm->cap_retired) {
        mm->cap_retired = mm->cap_retired ? mm->cap_retired * 2 : 8;
        mm->retired = sy_xrealloc(mm->retired, mm->cap_retired * sizeof *mm->retired);
    }
    mm->retired[mm->n_retired++] = m;
}

static double seconds_now(void) { return sy_now_seconds(); }

/* Idle seconds before an unload: a keep_alive override, else the configured ttl; -1: never. */
static int64_t effective_ttl(const mm_model *m) {
    if (m->ttl_override_set) return m->ttl_override_s < 0 ? -1 : m->ttl_override_s;
    return m->ttl_s != 0 ? (int64_t)m->ttl_s : -1;
}

/* Waits for a change; false once `deadline` (sy_now_seconds; 0: none) has passed. */
static bool wait_change(sy_model_manager *mm, double deadline) {
    if (deadline == 0) {
        pthread_cond_wait(&mm->changed, &mm->lock);
        return true;
    }
    double left = deadline - seconds_now();
    if (left <= 0) return false;
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    double whole = (double)(long)left;
    until.tv_sec += (time_t)whole;
    until.tv_nsec += (long)((left - whole) * 1e9);
    if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
    pthread_cond_timedwait(&mm->changed, &mm->lock, &until);
    return seconds_now() < deadline;
}

/* Bytes of a model file, or of the files directly inside a model directory. */
static uint64_t path_bytes(const char *path) {
    struct stat st;
    if (path == NULL || stat(path, &st) != 0) return 0;
    if (!S_ISDIR(st.st_mode)) return (uint64_t)st.st_size;
    uint64_t total = 0;
    DIR *d = opendir(path);
    if (d == NULL) return 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.') continue;
        char *p = sy_path_join(path, de->d_name);
        if (stat(p, &st) == 0 && S_ISREG(st.st_mode)) total += (uint64_t)st.st_size;
        free(p);
    }
    closedir(d);
    return total;
}

/* Host and device bytes of a model. */
typedef struct mm_bytes {
    uint64_t host, device;
} mm_bytes;

/* Measures a loaded model through the engine (1.1 plugins), else estimates it by its files (as host memory). */
static mm_bytes measure_loaded(const sy_loaded_model *lm, const char *path) {
    const sy_engine_api *e = lm->engine;
    if (lm->model != NULL && SY_HAS_FIELD(e, sy_engine_api, memory_usage) && e->memory_usage != NULL) {
        sy_memory_usage u;
        memset(&u, 0, sizeof u);
        u.struct_size = sizeof u;
        if (e->memory_usage(lm->model, &u) == SY_OK) return (mm_bytes){u.mapped_bytes + u.resident_bytes, u.device_bytes};
    }
    return (mm_bytes){path_bytes(path), 0};
}

/* The model and, when it has one, its private draft model; stored as its latest measurement. */
static void measure(mm_model *m) {
    if (m->proc_spec != NULL) { /* a process cannot be measured from here: its declared memory */
        m->memory_bytes = m->proc_spec->memory;
        m->device_bytes = 0;
        m->measured = true;
        return;
    }
    mm_bytes b = measure_loaded(&m->lm, m->path);
    if (m->draft_lm.model != NULL) {
        mm_bytes d = measure_loaded(&m->draft_lm, NULL);
        b.host += d.host, b.device += d.device;
    }
    m->memory_bytes = b.host;
    m->device_bytes = b.device;
    m->measured = true;
}

/* Memory of every loaded model but `except`, refreshing the measurements of ready ones. */
static mm_bytes memory_in_use(sy_model_manager *mm, const mm_model *except) {
    mm_bytes used = {0, 0};
    for (size_t i = 0; i < n_entries(mm); i++) {
        mm_model *x = entry_at(mm, i);
        if (x == except || x->state == SY_MODEL_UNLOADED) continue;
        if (x->state == SY_MODEL_READY || (x->state == SY_MODEL_UNLOADING && x->unload_pending)) measure(x);
        used.host += x->memory_bytes;
        used.device += x->device_bytes;
    }
    return used;
}

/* What loading m will take before it was ever measured: the engine's estimate when its plugin offers one, else
 * its files' size as host memory. Called without the lock (it reads the model's headers); m is LOADING and ours,
 * so its config copies stay. */
static mm_bytes estimate_load(const sy_model_manager *mm, const mm_model *m, bool *from_engine) {
    if (m->proc_spec != NULL) {
        *from_engine = false;
        return (mm_bytes){m->proc_spec->memory, 0};
    }
    sy_resource_estimate e;
    *from_engine = sy_loaded_model_estimate(mm->reg, m->plugin, m->path, m->options, m->n_options, &e) == 0;
    if (*from_engine) return (mm_bytes){e.mapped_bytes + e.resident_bytes, e.device_bytes};
    return (mm_bytes){path_bytes(m->path), 0};
}

/* READY -> UNLOADING: it takes no new leases; the unload happens once the last one is gone. */
static void request_unload(mm_model *m, bool swap) {
    m->state = SY_MODEL_UNLOADING;
    m->unload_pending = true;
    m->unload_is_swap = swap;
}

static bool try_claim_unload(mm_model *m) {
    if (m->state != SY_MODEL_UNLOADING || !m->unload_pending || m->leases != 0) return false;
    m->unload_pending = false;
    return true;
}

static void drafting_stop(mm_model *m); /* speculative decoding, below */

/* Unloads a claimed model: the lock is released meanwhile. The caller must not use m afterwards (a retired
 * entry is freed). */
typedef struct background_close {
    sy_loaded_model lm;
    char name[SY_CONFIG_MAX_NAME_LEN + 1];
} background_close;

static void close_task(void *arg) {
    background_close *c = arg;
    double t0 = seconds_now();
    sy_loaded_model_close(&c->lm);
    sy_log(SY_LOG_DEBUG, "model %s closed in the background in %.3f s", c->name, seconds_now() - t0);
    free(c);
}

static void snapshot_write_task(void *arg) { sy_snapshot_batch_write(arg); }

static void perform_unload(sy_model_manager *mm, mm_model *m) {
    /* The scheduler borrows m->lm, which stays intact until it is stopped; nobody else reads it meanwhile (no
     * leases, and a claimed unload is neither measured nor reported). */
    sy_scheduler *sched = m->sched;
    m->sched = NULL;
    char name[SY_CONFIG_MAX_NAME_LEN + 1];
    snprintf(name, sizeof name, "%s", m->name);
    /* Warm KV goes to snapshots at shutdown, and at other unloads unless the model says not to. */
    char *resume_path = (mm->destroying || m->persist_on_unload) ? dup_or_null(mm->resume_path) : NULL;
    bool keep_parked = !mm->resume_no_host_cache;
    uint64_t budget = mm->resume_max_bytes;
    /* With a memory budget the model is closed here, so that the next load's room is real; without one its
     * unmapping and freeing overlap the next load. */
    bool close_in_background = mm->background != NULL && mm->max_memory == 0 && mm->max_device_memory == 0;
    m->ttl_override_set = false; /* a keep_alive lasts for one load */
    pthread_mutex_unlock(&mm->lock);
    double t0 = seconds_now();
    bool saved = false;
    sy_snapshot_batch *batch = NULL;
    if (resume_path != NULL && sched != NULL) {
        sy_scheduler_stop(sched);
        /* Only the copy out of the engine happens here; compressing, writing and syncing happen on the worker. */
        batch = sy_snapshot_capture_model(resume_path, name, &m->lm, sched, keep_parked, budget);
        saved = batch != NULL;
    }
    free(resume_path);
    sy_scheduler_destroy(sched);
    drafting_stop(m);
    if (close_in_background && m->lm.model != NULL) {
        background_close *c = sy_xcalloc(1, sizeof *c);
        c->lm = m->lm;
        snprintf(c->name, sizeof c->name, "%s", name);
        memset(&m->lm, 0, sizeof m->lm);
        sy_worker_submit(mm->background, NULL, close_task, c);
    } else {
        sy_loaded_model_close(&m->lm);
    }
    if (batch != NULL) {
        /* Queued after the close, so memory goes first; tagged, so the model's next load waits for its files. */
        if (mm->background != NULL) sy_worker_submit(mm->background, sy_snapshot_batch_dir(batch), snapshot_write_task, batch);
        else sy_snapshot_batch_write(batch);
    }
    sy_process_stop(m->proc); /* its requests are over: no lease is left */
    m->proc = NULL;
    sy_log(SY_LOG_INFO, "model %s unloaded in %.3f s", name, seconds_now() - t0);
    pthread_mutex_lock(&mm->lock);
    if (saved) m->snapshots_saved = true;
    m->state = SY_MODEL_UNLOADED;
    m->unload_count++;
    mm->counters.unloads++;
    if (m->unload_is_swap) mm->counters.swaps++;
    m->unload_is_swap = false;
    pthread_cond_broadcast(&mm->changed);
    maybe_free_retired(mm, m);
}

/* Performs one unload that is waiting for a thread (its leases are gone). True if it did one; the lock was then
 * released, so the caller must look at the tables afresh. */
static bool claim_any_pending(sy_model_manager *mm) {
    for (size_t i = 0; i < n_entries(mm); i++) {
        mm_model *x = entry_at(mm, i);
        if (try_claim_unload(x)) {
            perform_unload(mm, x);
            return true;
        }
    }
    return false;
}

/* Does loading m require x to go? */
static bool conflicts(const sy_model_manager *mm, const mm_model *m, const mm_model *x) {
    mm_group gm = group_rules(mm, m->group);
    if (strcmp(m->group, x->group) == 0) return gm.swap;
    return gm.exclusive && !group_rules(mm, x->group).persistent;
}

/* The least recently used idle ready model other than m, non-persistent ones first; NULL if none. With `device`,
 * only models that hold accelerator memory (unloading the others would not help that budget). */
static mm_model *lru_idle(sy_model_manager *mm, const mm_model *m, bool device) {
    mm_model *best = NULL;
    bool best_persistent = true;
    for (size_t i = 0; i < n_entries(mm); i++) {
        mm_model *x = entry_at(mm, i);
        if (x == m || x->state != SY_MODEL_READY || x->leases != 0) continue;
        if (device && x->device_bytes == 0) continue;
        bool persistent = group_rules(mm, x->group).persistent;
        if (best == NULL || (best_persistent && !persistent) ||
            (persistent == best_persistent && x->last_used < best->last_used)) {
            best = x;
            best_persistent = persistent;
        }
    }
    return best;
}

/* Called when a loader gives up: unloads it asked for that still wait on leases are called off. */
static void call_off_swaps(sy_model_manager *mm) {
    for (size_t i = 0; i < n_entries(mm); i++) {
        mm_model *x = entry_at(mm, i);
        if (x->state == SY_MODEL_UNLOADING && x->unload_pending && x->unload_is_swap && !x->retired) {
            x->state = SY_MODEL_READY;
            x->unload_pending = false;
            x->unload_is_swap = false;
        }
    }
    pthread_cond_broadcast(&mm->changed);
}

/* Unloads what must go before m loads (its group's rules, then the memory budget), waiting for leases to end.
 * Lock held, loader token held, m is LOADING. 0, or -1 with err set. */
static int make_room(sy_model_manager *mm, mm_model *m, double deadline, char *err, size_t err_size) {
    for (;;) {
        if (mm->destroying) {
            snprintf(err, err_size, "the server is shutting down");
            return -1;
        }
        if (claim_any_pending(mm)) continue;
        bool must_wait = false, unloaded = false;
        for (size_t i = 0; i < n_entries(mm) && !unloaded; i++) {
            mm_model *x = entry_at(mm, i);
            if (x == m || x->state == SY_MODEL_UNLOADED || !conflicts(mm, m, x)) continue;
            if (x->state == SY_MODEL_READY) {
                sy_log(SY_LOG_INFO, "unloading %s to load %s (group rules)", x->name, m->name);
                request_unload(x, true);
            }
            if (try_claim_unload(x)) {
                perform_unload(mm, x);
                unloaded = true; /* the tables may have changed: look again */
            } else {
                must_wait = true;
            }
        }
        if (unloaded) continue;
        if (!must_wait && (mm->max_memory != 0 || mm->max_device_memory != 0)) {
            /* Host and device memory are two budgets: each need counts against its own only. */
            const struct {
                const char *key;
                uint64_t max, need;
                bool device;
            } budgets[2] = {{"max_memory", mm->max_memory, m->memory_bytes, false},
                            {"max_device_memory", mm->max_device_memory, m->device_bytes, true}};
            for (int k = 0; k < 2; k++)
                if (budgets[k].max != 0 && budgets[k].need > budgets[k].max) {
                    snprintf(err, err_size, "model %s needs about %llu bytes, more than %s (%llu bytes)", m->name,
                             (unsigned long long)budgets[k].need, budgets[k].key, (unsigned long long)budgets[k].max);
                    return -1;
                }
            mm_bytes used = memory_in_use(mm, m);
            bool evicted = false;
            for (int k = 0; k < 2 && !evicted && !must_wait; k++) {
                uint64_t in_use = budgets[k].device ? used.device : used.host;
                if (budgets[k].max == 0 || in_use + budgets[k].need <= budgets[k].max) continue;
                mm_model *victim = lru_idle(mm, m, budgets[k].device);
                if (victim == NULL) {
                    must_wait = true; /* only busy models are left: wait for one of them to become idle */
                    break;
                }
                sy_log(SY_LOG_INFO, "unloading %s to load %s (%s: %llu + %llu > %llu bytes%s)", victim->name, m->name,
                       budgets[k].key, (unsigned long long)in_use, (unsigned long long)budgets[k].need,
                       (unsigned long long)budgets[k].max,
                       m->measured ? "" : m->estimated ? ", the engine's estimate" : ", its files' size");
                request_unload(victim, true);
                mm->counters.budget_unloads++;
                if (try_claim_unload(victim)) perform_unload(mm, victim);
                evicted = true;
            }
            if (evicted) continue;
        }
        if (!must_wait) return 0;
        if (!wait_change(mm, deadline)) {
            call_off_swaps(mm);
            snprintf(err, err_size, "timed out after %u s making room for model %s (other models are busy)",
                     (unsigned)mm->load_timeout_s, m->name);
            return -1;
        }
    }
}

/* After a load: measured usage may exceed the estimate; unload idle models until both budgets fit again. Lock
 * held. */
static void enforce_budget(sy_model_manager *mm, mm_model *loaded) {
    for (;;) {
        if (mm->max_memory == 0 && mm->max_device_memory == 0) return;
        mm_bytes used = memory_in_use(mm, NULL);
        bool device = mm->max_device_memory != 0 && used.device > mm->max_device_memory;
        if (!device && (mm->max_memory == 0 || used.host <= mm->max_memory)) return;
        const char *key = device ? "max_device_memory" : "max_memory";
        uint64_t in_use = device ? used.device : used.host, max = device ? mm->max_device_memory : mm->max_memory;
        mm_model *victim = lru_idle(mm, loaded, device);
        if (victim == NULL) {
            sy_log(SY_LOG_WARN, "loaded models use %llu bytes, more than %s (%llu bytes)", (unsigned long long)in_use,
                   key, (unsigned long long)max);
            return;
        }
        sy_log(SY_LOG_INFO, "unloading %s (%s: %llu > %llu bytes)", victim->name, key, (unsigned long long)in_use,
               (unsigned long long)max);
        request_unload(victim, true);
        if (try_claim_unload(victim)) perform_unload(mm, victim);
    }
}

/* ------------------------------------------------------------------------------------------------------------
 * Create, destroy */

const sy_plugin_registry *sy_model_manager_registry(const sy_model_manager *mm) { return mm->reg; }

sy_model_manager *sy_model_manager_create(const sy_config *cfg, const sy_plugin_registry *reg) {
    if (cfg == NULL || reg == NULL || !sy_config_ok(cfg)) return NULL;
    if (cfg->options_unchecked) { /* its models' options are still empty: sy_config_check_plugin_options first */
        sy_log(SY_LOG_ERROR, "%s: the engine keys were not checked against the plugins' options", cfg->source);
        return NULL;
    }
    sy_model_manager *mm = sy_xcalloc(1, sizeof *mm);
    mm->reg = reg;
    pthread_mutex_init(&mm->lock, NULL);
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&mm->changed, &attr);
    pthread_condattr_destroy(&attr);
    mm->n_models = cfg->n_models;
    mm->models = sy_xcalloc(cfg->n_models ? cfg->n_models : 1, sizeof *mm->models);
    for (size_t i = 0; i < cfg->n_models; i++) mm->models[i] = model_from_config(&cfg->models[i]);
    mm->groups = groups_from_config(cfg, &mm->n_groups);
    mm->selectors = selectors_from_config(cfg, &mm->n_selectors);
    mm->max_memory = cfg->host.max_memory;
    mm->max_device_memory = cfg->host.max_device_memory;
    mm->load_timeout_s = cfg->host.load_timeout_s;
    mm->resume_path = dup_or_null(cfg->host.resume_path);
    mm->resume = cfg->host.resume;
    mm->resume_no_host_cache = cfg->host.resume_no_host_cache;
    mm->resume_max_bytes = cfg->host.resume_max_bytes;
    mm->preload_state = SY_PRELOAD_DONE;
    for (size_t i = 0; i < cfg->n_models; i++)
        if (cfg->models[i].preload) mm->preload_state = SY_PRELOAD_PENDING;
    mm->background = sy_worker_create();
    return mm;
}

void sy_model_manager_destroy(sy_model_manager *mm) {
    if (mm == NULL) return;
    sy_worker_hold(mm->background, false); /* a test's hold must not keep the shutdown's writes waiting */
    pthread_mutex_lock(&mm->lock);
    mm->destroying = true;
    pthread_cond_broadcast(&mm->changed);
    pthread_mutex_unlock(&mm->lock);
    sy_model_manager_unload(mm, NULL);
    pthread_mutex_lock(&mm->lock);
    /* Threads still inside acquire() leave on `destroying`; wait until none pins an entry. */
    for (;;) {
        bool pinned = mm->loader_busy;
        for (size_t i = 0; i < n_entries(mm); i++) pinned = pinned || entry_at(mm, i)->pins != 0;
        if (!pinned) break;
        wait_change(mm, 0);
    }
    for (size_t i = 0; i < mm->n_models; i++) model_free(mm->models[i]);
    for (size_t i = 0; i < mm->n_retired; i++) model_free(mm->retired[i]);
    pthread_mutex_unlock(&mm->lock);
    sy_worker_destroy(mm->background); /* every snapshot written, every model closed */
    free(mm->models);
    free(mm->retired);
    groups_free(mm->groups, mm->n_groups);
    selectors_free(mm->selectors, mm->n_selectors);
    free(mm->resume_path);
    pthread_cond_destroy(&mm->changed);
    pthread_mutex_destroy(&mm->lock);
    free(mm);
}

/* ------------------------------------------------------------------------------------------------------------
 * Leases */

static int fail(char *err, size_t err_size, int *http_status, int status, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int fail(char *err, size_t err_size, int *http_status, int status, const char *fmt, ...) {
    if (err != NULL && err_size > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, err_size, fmt, ap);
        va_end(ap);
    }
    if (http_status != NULL) *http_status = status;
    return -1;
}

static void unknown_model(sy_model_manager *mm, const char *name, char *err, size_t err_size, int *http_status) {
    if (err == NULL || err_size == 0) {
        fail(err, err_size, http_status, 404, "unknown model");
        return;
    }
    int w = snprintf(err, err_size, "model '%.*s' is not configured; the models offered are: ", 200, name);
    size_t used = w > 0 ? (size_t)w : 0;
    for (size_t i = 0; i < mm->n_models && used < err_size; i++) {
        w = snprintf(err + used, err_size - used, "%s%s", i ? ", " : "", mm->models[i]->name);
        if (w > 0) used += (size_t)w;
    }
    if (mm->n_models == 0 && used < err_size) snprintf(err + used, err_size - used, "(none)");
    if (http_status != NULL) *http_status = 404;
}

static sy_model_lease *new_lease(sy_model_manager *mm, mm_model *m) {
    sy_model_lease *lease = sy_xcalloc(1, sizeof *lease);
    lease->mm = mm;
    lease->m = m;
    lease->chat_template = dup_or_null(m->chat_template);
    lease->chat_template_file = dup_or_null(m->chat_template_file);
    m->leases++;
    m->last_used = seconds_now();
    return lease;
}

/* ------------------------------------------------------------------------------------------------------------
 * Speculative decoding: the drafter of a loaded model (speculative.h) */

/* What a load needs to know about the model's drafter, copied under the lock. */
typedef struct draft_plan {
    sy_config_draft draft;
    char *draft_name;    /* the draft model's canonical name */
    char *plugin, *path; /* the draft model's, from its own [model.NAME] section */
    sy_option *options;
    size_t n_options;
    uint32_t draft_max, draft_min;
    bool missing;        /* the draft model is no longer configured */
} draft_plan;

/* Lock held. */
static void draft_plan_take(const sy_model_manager *mm, const mm_model *m, draft_plan *p) {
    memset(p, 0, sizeof *p);
    p->draft = m->draft;
    p->draft_max = m->draft_max;
    p->draft_min = m->draft_min;
    if (m->draft != SY_CONFIG_DRAFT_MODEL) return;
    p->draft_name = dup_or_null(m->draft_model);
    const mm_model *d = m->draft_model != NULL ? find_current(mm, m->draft_model) : NULL;
    if (d == NULL || d == m) {
        p->missing = true;
        return;
    }
    p->plugin = dup_or_null(d->plugin);
    p->path = dup_or_null(d->path);
    p->n_options = d->n_options;
    p->options = sy_xcalloc(d->n_options ? d->n_options : 1, sizeof *p->options);
    for (size_t i = 0; i < d->n_options; i++) {
        p->options[i].key = sy_strdup(d->options[i].key);
        p->options[i].value = sy_strdup(d->options[i].value);
    }
}

static void draft_plan_free(draft_plan *p) {
    free(p->draft_name);
    free(p->plugin);
    free(p->path);
    free_options(p->options, p->n_options);
    memset(p, 0, sizeof *p);
}

/* Ends drafting after the scheduler is gone: the drafter first (it releases what it borrowed), then the names it
 * borrowed through, then the draft model. Lock released; the entry is the unloader's (or the failed loader's). */
static void drafting_stop(mm_model *m) {
    sy_speculator_free(m->speculator);
    m->speculator = NULL;
    char **names[2] = {&m->published_draft, &m->published_target};
    for (int i = 0; i < 2; i++) {
        if (*names[i] == NULL) continue;
        if (sy_host_unpublish_model(m->lm.plugin->host, *names[i]) != 0)
            sy_log(SY_LOG_ERROR, "model %s: %s is still borrowed by a drafter", m->name, *names[i]);
        free(*names[i]);
        *names[i] = NULL;
    }
    sy_loaded_model_close(&m->draft_lm);
}

/* Starts the drafter of a model just loaded (LOADING, the lock released): m->speculator, or NULL when the model
 * has none or it cannot start (then the model serves without speculation, which is logged). */
static void drafting_start(sy_model_manager *mm, mm_model *m, const draft_plan *p) {
    static atomic_uint_fast64_t instances;
    if (p->draft == SY_CONFIG_DRAFT_NONE) return;
    unsigned long long id = (unsigned long long)atomic_fetch_add(&instances, 1);
    char err[1024], name[2 * SY_CONFIG_MAX_NAME_LEN + 32], spec[2 * SY_CONFIG_MAX_NAME_LEN + 48];
    /* Unique names: a retired entry of the same model may still be loaded. */
    snprintf(name, sizeof name, "%s#%llu", m->name, id);
    if (sy_loaded_model_publish(name, &m->lm) != 0) {
        sy_log(SY_LOG_WARN, "model %s: cannot lend it to a drafter as %s; no speculative decoding", m->name, name);
        return;
    }
    m->published_target = sy_strdup(name);
    if (p->draft == SY_CONFIG_DRAFT_NGRAM) {
        snprintf(spec, sizeof spec, "ngram");
    } else {
        if (p->missing) {
            sy_log(SY_LOG_WARN, "model %s: draft model %s is not configured; no speculative decoding", m->name,
                   p->draft_name ? p->draft_name : "(none)");
            goto fail;
        }
        if (sy_loaded_model_open(mm->reg, p->plugin, p->path, p->options, p->n_options, &m->draft_lm, err,
                                 sizeof err) != 0) {
            sy_log(SY_LOG_WARN, "model %s: draft model %s did not load (%s); no speculative decoding", m->name,
                   p->draft_name, err);
            memset(&m->draft_lm, 0, sizeof m->draft_lm);
            goto fail;
        }
        snprintf(name, sizeof name, "%s@%s#%llu", p->draft_name, m->name, id);
        if (sy_loaded_model_publish(name, &m->draft_lm) != 0) goto fail;
        m->published_draft = sy_strdup(name);
        snprintf(spec, sizeof spec, "model:%s", name);
    }
    sy_speculator_options o = sy_speculator_defaults();
    o.draft_max = p->draft_max;
    o.draft_min = p->draft_min;
    m->speculator = sy_speculator_open(mm->reg, spec, m->published_target, m->lm.info.n_vocab, m->options,
                                       m->n_options, &o, err, sizeof err);
    if (m->speculator == NULL) {
        sy_log(SY_LOG_WARN, "model %s: no speculative decoding: %s", m->name, err);
        goto fail;
    }
    sy_speculator_limit_rollback(m->speculator, m->lm.info.max_rollback);
    sy_log(SY_LOG_INFO, "model %s: speculative decoding with %s (draft_max %u, draft_min %u)", m->name,
           p->draft == SY_CONFIG_DRAFT_NGRAM ? "ngram" : p->draft_name, (unsigned)o.draft_max,
           (unsigned)o.draft_min);
    return;
fail:
    drafting_stop(m);
}

/* Loads m (LOADING, ours) with the lock released. 0, or -1 with err set. */
static int load_model(sy_model_manager *mm, mm_model *m, char *err, size_t err_size) {
    /* KV snapshots come back with --resume, or when this process saved them at the model's last unload. */
    char *resume_path = (mm->resume || m->snapshots_saved) ? dup_or_null(mm->resume_path) : NULL;
    bool into_host_cache = !mm->resume_no_host_cache;
    uint64_t budget = mm->resume_max_bytes;
    draft_plan plan;
    draft_plan_take(mm, m, &plan);
    double deadline = mm->load_timeout_s ? seconds_now() + mm->load_timeout_s : 0;
    pthread_mutex_unlock(&mm->lock);
    double t0 = seconds_now();
    sy_loaded_model lm;
    memset(&lm, 0, sizeof lm);
    int rc;
    if (m->proc_spec != NULL) {
        /* A process: started, then ready once its check endpoint answers. No scheduler: the proxy forwards. */
        m->proc = sy_process_start(m->proc_spec, deadline, err, err_size);
        rc = m->proc != NULL ? 0 : -1;
    } else {
        rc = sy_loaded_model_open(mm->reg, m->plugin, m->path, m->options, m->n_options, &lm, err, err_size);
    }
    sy_scheduler *sched = NULL;
    if (rc == 0 && m->proc_spec == NULL) {
        /* The scheduler borrows the loaded model by address: it lives in the entry. No one else reads the entry's
         * lm while it is LOADING. */
        m->lm = lm;
        sy_scheduler_options opts;
        memset(&opts, 0, sizeof opts);
        opts.parallel = m->parallel;
        opts.max_queue = m->max_queue;
        opts.queue_timeout_s = m->queue_timeout_s;
        opts.cache_tokens = m->prefix_cache_tokens;
        drafting_start(mm, m, &plan);
        opts.speculator = m->speculator;
        sched = sy_scheduler_create(&m->lm, &opts);
        if (sched == NULL) {
            snprintf(err, err_size, "could not start the scheduler of model %s", m->name);
            drafting_stop(m);
            sy_loaded_model_close(&m->lm);
            rc = -1;
        } else if (resume_path != NULL) {
            /* Snapshots of its last unload may still be on their way to disk: they are read once written (the
             * model's files were opened meanwhile, so the wait overlaps the load). */
            char *dir = sy_snapshot_model_dir(resume_path, m->name);
            double t_wait = seconds_now();
            if (sy_worker_has_tag(mm->background, dir)) {
                sy_worker_wait_tag(mm->background, dir);
                sy_log(SY_LOG_INFO, "model %s: waited %.3f s for the KV snapshots of its last unload to be written",
                       m->name, seconds_now() - t_wait);
            }
            free(dir);
            /* Before the model reports ready: no request has reached the scheduler yet. */
            sy_snapshot_resume_model(resume_path, m->name, &m->lm, sched, into_host_cache, budget);
        }
    }
    free(resume_path);
    draft_plan_free(&plan);
    double seconds = seconds_now() - t0;
    pthread_mutex_lock(&mm->lock);
    if (rc != 0) {
        memset(&m->lm, 0, sizeof m->lm);
        mm->counters.load_failures++;
        m->load_failures++;
        snprintf(m->last_error, sizeof m->last_error, "%s", err);
        sy_log(SY_LOG_ERROR, "model %s failed to load: %s", m->name, err);
        return -1;
    }
    m->sched = sched;
    measure(m);
    m->estimated = false;
    mm->counters.loads++;
    mm->counters.load_seconds_total += seconds;
    if (m->proc != NULL)
        sy_log(SY_LOG_INFO, "model %s ready in %.3f s (process %d, %s, %llu bytes declared)", m->name, seconds,
               (int)sy_process_pid(m->proc), m->proc_spec->proxy, (unsigned long long)m->memory_bytes);
    else
        sy_log(SY_LOG_INFO, "model %s loaded in %.3f s (%s, %llu bytes, %llu on the device)", m->name, seconds,
               m->lm.plugin->entry->name, (unsigned long long)m->memory_bytes, (unsigned long long)m->device_bytes);
    return 0;
}

sy_model_lease *sy_model_manager_acquire_loaded(sy_model_manager *mm, const char *name_or_alias, char *err,
                                                size_t err_size, int *http_status) {
    if (mm == NULL || name_or_alias == NULL) {
        fail(err, err_size, http_status, 400, "no model named");
        return NULL;
    }
    pthread_mutex_lock(&mm->lock);
    sy_model_lease *lease = NULL;
    mm_model *m = mm->destroying ? NULL : find_current(mm, name_or_alias);
    if (mm->destroying) fail(err, err_size, http_status, 503, "the server is shutting down");
    else if (m == NULL) unknown_model(mm, name_or_alias, err, err_size, http_status);
    else if (m->state != SY_MODEL_READY) fail(err, err_size, http_status, 409, "model %s is not loaded", m->name);
    else lease = new_lease(mm, m);
    pthread_mutex_unlock(&mm->lock);
    return lease;
}

sy_model_lease *sy_model_manager_acquire(sy_model_manager *mm, const char *name_or_alias, char *err,
                                         size_t err_size, int *http_status) {
    if (mm == NULL || name_or_alias == NULL) {
        fail(err, err_size, http_status, 400, "no model named");
        return NULL;
    }
    pthread_mutex_lock(&mm->lock);
    double deadline = mm->load_timeout_s ? seconds_now() + mm->load_timeout_s : 0;
    mm_model *m;
    for (;;) {
        if (mm->destroying) {
            pthread_cond_broadcast(&mm->changed); /* destroy waits for pins like ours to go */
            pthread_mutex_unlock(&mm->lock);
            fail(err, err_size, http_status, 503, "the server is shutting down");
            return NULL;
        }
        m = find_current(mm, name_or_alias);
        if (m == NULL) {
            unknown_model(mm, name_or_alias, err, err_size, http_status);
            pthread_mutex_unlock(&mm->lock);
            return NULL;
        }
        if (m->peer != NULL) {
            fail(err, err_size, http_status, 400, "model %s is served by peer %s: only the OpenAI API is forwarded there",
                 m->name, m->peer);
            pthread_mutex_unlock(&mm->lock);
            return NULL;
        }
        if (m->state == SY_MODEL_READY && m->proc != NULL && !sy_process_alive(m->proc)) {
            /* It died since its last request: unloaded (once its requests are over), then started again. */
            sy_log(SY_LOG_WARN, "model %s: its process %d has exited; it starts again on this request", m->name,
                   (int)sy_process_pid(m->proc));
            request_unload(m, false);
            if (try_claim_unload(m)) perform_unload(mm, m);
            continue;
        }
        if (m->state == SY_MODEL_READY) {
            if (m->sched != NULL && sy_scheduler_full(m->sched)) {
                fail(err, err_size, http_status, 429, "model %s is busy: every slot is taken and its queue is full",
                     m->name);
                pthread_mutex_unlock(&mm->lock);
                return NULL;
            }
            sy_model_lease *lease = new_lease(mm, m);
            pthread_mutex_unlock(&mm->lock);
            return lease;
        }
        if (m->state == SY_MODEL_UNLOADED && !mm->loader_busy) break;
        if (claim_any_pending(mm)) continue;
        /* Loading, unloading, or another model loading: wait, then look again. */
        bool was_loading = m->state == SY_MODEL_LOADING;
        uint64_t failures = m->load_failures;
        m->pins++;
        bool in_time = wait_change(mm, deadline);
        m->pins--;
        if (was_loading && m->load_failures != failures && m->state != SY_MODEL_LOADING) {
            fail(err, err_size, http_status, 503, "model %s failed to load: %s", m->name, m->last_error);
            maybe_free_retired(mm, m);
            pthread_mutex_unlock(&mm->lock);
            return NULL;
        }
        maybe_free_retired(mm, m);
        if (!in_time) {
            pthread_mutex_unlock(&mm->lock);
            fail(err, err_size, http_status, 503, "timed out after %u s waiting for model '%s' to load",
                 (unsigned)mm->load_timeout_s, name_or_alias);
            return NULL;
        }
    }

    /* This thread loads m. */
    mm->loader_busy = true;
    m->state = SY_MODEL_LOADING;
    pthread_cond_broadcast(&mm->changed);
    char why[512] = "";
    if (!m->measured && (mm->max_memory != 0 || mm->max_device_memory != 0)) {
        m->pins++;
        pthread_mutex_unlock(&mm->lock);
        bool from_engine;
        mm_bytes need = estimate_load(mm, m, &from_engine);
        pthread_mutex_lock(&mm->lock);
        m->pins--;
        m->memory_bytes = need.host;
        m->device_bytes = need.device;
        m->estimated = from_engine;
        if (from_engine) mm->counters.estimated_loads++;
    }
    int rc = make_room(mm, m, deadline, why, sizeof why);
    if (rc == 0) rc = load_model(mm, m, why, sizeof why);
    mm->loader_busy = false;
    if (rc != 0) {
        m->state = SY_MODEL_UNLOADED;
        pthread_cond_broadcast(&mm->changed);
        fail(err, err_size, http_status, 503, "model %s could not be loaded: %s", m->name, why);
        maybe_free_retired(mm, m);
        pthread_mutex_unlock(&mm->lock);
        return NULL;
    }
    m->state = SY_MODEL_READY;
    sy_model_lease *lease = new_lease(mm, m);
    /* A reload retired it while it loaded: serve this request, then let it go. */
    if (m->retired) request_unload(m, false);
    enforce_budget(mm, m);
    pthread_cond_broadcast(&mm->changed);
    pthread_mutex_unlock(&mm->lock);
    return lease;
}

void sy_model_lease_release(sy_model_lease *lease) {
    if (lease == NULL) return;
    sy_model_manager *mm = lease->mm;
    mm_model *m = lease->m;
    pthread_mutex_lock(&mm->lock);
    if (m->leases > 0) m->leases--;
    m->last_used = seconds_now();
    if (m->leases == 0 && m->state == SY_MODEL_READY && m->retired) request_unload(m, false);
    /* The last lease of a model waiting to unload: unload it here, unless this is the model's own engine loop
     * (a callback), which cannot stop itself; then a waiting thread or tick() does it. */
    bool own_loop = m->sched != NULL && sy_scheduler_on_loop_thread(m->sched);
    pthread_cond_broadcast(&mm->changed);
    if (!own_loop && try_claim_unload(m)) perform_unload(mm, m);
    else maybe_free_retired(mm, m);
    pthread_mutex_unlock(&mm->lock);
    free(lease->chat_template);
    free(lease->chat_template_file);
    free(lease);
}

const sy_loaded_model *sy_model_lease_model(const sy_model_lease *lease) { return &lease->m->lm; }
sy_scheduler *sy_model_lease_scheduler(const sy_model_lease *lease) { return lease->m->sched; }
/* The name never changes for an entry, so it is safe to read without the lock while the lease holds it. */
const char *sy_model_lease_name(const sy_model_lease *lease) { return lease->m->name; }
const char *sy_model_lease_chat_template(const sy_model_lease *lease) { return lease->chat_template; }
const char *sy_model_lease_chat_template_file(const sy_model_lease *lease) { return lease->chat_template_file; }
const sy_process_spec *sy_model_lease_process(const sy_model_lease *lease) { return lease->m->proc_spec; }

bool sy_model_lease_upstream_failed(sy_model_lease *lease) {
    sy_model_manager *mm = lease->mm;
    mm_model *m = lease->m;
    /* A broken connection is most often a process on its way out: give it a moment to be gone (the lease keeps
     * m->proc in place, and sy_process_alive takes the process's own lock). */
    bool dead = m->proc != NULL && !sy_process_alive(m->proc);
    for (int i = 0; i < 50 && !dead && m->proc != NULL; i++) {
        struct timespec ts = {0, 20 * 1000000L};
        nanosleep(&ts, NULL);
        dead = !sy_process_alive(m->proc);
    }
    pthread_mutex_lock(&mm->lock);
    if (dead && m->state == SY_MODEL_READY) {
        /* Unloaded once this lease is released, so the next request starts it again. */
        sy_log(SY_LOG_WARN, "model %s: its process %d died during a request", m->name, (int)sy_process_pid(m->proc));
        request_unload(m, false);
    }
    pthread_mutex_unlock(&mm->lock);
    return dead;
}

int sy_model_manager_preload(sy_model_manager *mm) {
    if (mm == NULL) return 0;
    pthread_mutex_lock(&mm->lock);
    size_t n = mm->n_models;
    char **names = sy_xcalloc(n ? n : 1, sizeof *names);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (mm->models[i]->preload) names[k++] = sy_strdup(mm->models[i]->name);
    pthread_mutex_unlock(&mm->lock);
    int failed = 0;
    for (size_t i = 0; i < k; i++) {
        char err[1024];
        int status = 0;
        sy_model_lease *lease = sy_model_manager_acquire(mm, names[i], err, sizeof err, &status);
        if (lease == NULL) {
            sy_log(SY_LOG_ERROR, "preload of %s failed: %s", names[i], err);
            failed++;
        }
        sy_model_lease_release(lease);
        free(names[i]);
    }
    free(names);
    pthread_mutex_lock(&mm->lock);
    mm->preload_state = failed > 0 ? SY_PRELOAD_FAILED : SY_PRELOAD_DONE;
    pthread_mutex_unlock(&mm->lock);
    return failed;
}

sy_preload_state sy_model_manager_preload_state(sy_model_manager *mm) {
    if (mm == NULL) return SY_PRELOAD_DONE;
    pthread_mutex_lock(&mm->lock);
    sy_preload_state st = mm->preload_state;
    pthread_mutex_unlock(&mm->lock);
    return st;
}

/* ------------------------------------------------------------------------------------------------------------
 * Unload, tick, reload */

/* Unloads one model, waiting for its load to finish or its leases to end. Lock held; m pinned by the caller.
 * True when it was loaded and has been unloaded since (it may be loading again already for a new request). */
static bool unload_one(sy_model_manager *mm, mm_model *m) {
    uint64_t start = m->unload_count;
    for (;;) {
        if (m->unload_count != start) return true;
        if (m->state == SY_MODEL_UNLOADED) return false;
        if (m->state == SY_MODEL_READY) request_unload(m, false);
        if (try_claim_unload(m)) {
            perform_unload(mm, m); /* m is pinned: a retired entry stays */
            continue;
        }
        if (claim_any_pending(mm)) continue;
        wait_change(mm, 0);
    }
}

int sy_model_manager_unload(sy_model_manager *mm, const char *name_or_alias) {
    if (mm == NULL) return -1;
    pthread_mutex_lock(&mm->lock);
    size_t n = 0;
    mm_model **targets;
    if (name_or_alias != NULL) {
        mm_model *m = find_current(mm, name_or_alias);
        if (m == NULL) {
            pthread_mutex_unlock(&mm->lock);
            return -1;
        }
        targets = sy_xmalloc(sizeof *targets);
        targets[n++] = m;
    } else {
        targets = sy_xcalloc(n_entries(mm) ? n_entries(mm) : 1, sizeof *targets);
        for (size_t i = 0; i < n_entries(mm); i++) targets[n++] = entry_at(mm, i);
    }
    for (size_t i = 0; i < n; i++) targets[i]->pins++;
    int unloaded = 0;
    for (size_t i = 0; i < n; i++)
        if (unload_one(mm, targets[i])) unloaded++;
    for (size_t i = 0; i < n; i++) {
        targets[i]->pins--;
        maybe_free_retired(mm, targets[i]);
    }
    pthread_cond_broadcast(&mm->changed);
    pthread_mutex_unlock(&mm->lock);
    free(targets);
    /* An explicit unload (/unload, destroy) ends with its snapshots on disk and its memory returned; a swap's or a
     * ttl's does not wait. */
    if (unloaded > 0) sy_worker_wait_idle(mm->background);
    return unloaded;
}

void sy_model_manager_hold_background(sy_model_manager *mm, bool hold) { sy_worker_hold(mm->background, hold); }

void sy_model_manager_tick(sy_model_manager *mm) {
    if (mm == NULL) return;
    pthread_mutex_lock(&mm->lock);
    bool again = true;
    while (again) {
        again = claim_any_pending(mm);
        if (again) continue;
        double now = seconds_now();
        for (size_t i = 0; i < n_entries(mm) && !again; i++) {
            mm_model *m = entry_at(mm, i);
            if (m->state != SY_MODEL_READY || m->leases != 0) continue;
            if (m->proc != NULL && !sy_process_alive(m->proc)) {
                sy_log(SY_LOG_WARN, "model %s: its process %d has exited; unloaded", m->name,
                       (int)sy_process_pid(m->proc));
                request_unload(m, false);
                if (try_claim_unload(m)) perform_unload(mm, m);
                again = true;
                continue;
            }
            int64_t ttl = effective_ttl(m);
            bool expired = ttl >= 0 && now - m->last_used >= (double)ttl;
            if (!expired && !m->retired) continue;
            if (m->sched != NULL && !sy_scheduler_idle(m->sched)) continue; /* leases end after the requests */
            if (expired)
                sy_log(SY_LOG_INFO, "model %s idle for %lld s%s: unloading", m->name, (long long)ttl,
                       m->ttl_override_set ? " (keep_alive)" : "");
            request_unload(m, false);
            if (try_claim_unload(m)) perform_unload(mm, m);
            again = true;
        }
    }
    pthread_mutex_unlock(&mm->lock);
}

int sy_model_manager_set_ttl(sy_model_manager *mm, const char *name_or_alias, int64_t seconds) {
    if (mm == NULL || name_or_alias == NULL) return -1;
    pthread_mutex_lock(&mm->lock);
    mm_model *m = find_current(mm, name_or_alias);
    if (m == NULL) {
        pthread_mutex_unlock(&mm->lock);
        return -1;
    }
    if (seconds == SY_MODEL_TTL_CONFIGURED) {
        m->ttl_override_set = false;
    } else {
        m->ttl_override_set = true;
        m->ttl_override_s = seconds < 0 ? -1 : seconds;
    }
    /* The idle clock restarts now, as a request's end restarts it. */
    if (m->leases == 0) m->last_used = seconds_now();
    pthread_mutex_unlock(&mm->lock);
    return 0;
}

int sy_model_manager_reload(sy_model_manager *mm, const sy_config *cfg) {
    if (mm == NULL || !sy_config_ok(cfg)) return -1;
    if (cfg->options_unchecked) {
        sy_log(SY_LOG_ERROR, "%s: the engine keys were not checked against the plugins' options", cfg->source);
        return -1;
    }
    size_t n_new = cfg->n_models;
    mm_model **next = sy_xcalloc(n_new ? n_new : 1, sizeof *next);
    for (size_t i = 0; i < n_new; i++) next[i] = model_from_config(&cfg->models[i]);
    size_t n_groups = 0;
    mm_group *groups = groups_from_config(cfg, &n_groups);

    pthread_mutex_lock(&mm->lock);
    bool *kept = sy_xcalloc(mm->n_models ? mm->n_models : 1, sizeof *kept);
    size_t added = 0, changed = 0, removed = 0;
    for (size_t i = 0; i < n_new; i++) {
        size_t old_index = SIZE_MAX;
        for (size_t k = 0; k < mm->n_models; k++)
            if (!kept[k] && strcmp(mm->models[k]->name, next[i]->name) == 0) old_index = k;
        if (old_index == SIZE_MAX) {
            added++;
            continue;
        }
        mm_model *old = mm->models[old_index];
        if (same_instance(old, next[i])) {
            take_light_settings(old, next[i]);
            model_free(next[i]);
            next[i] = old;
            kept[old_index] = true;
        } else {
            changed++;
        }
    }
    for (size_t k = 0; k < mm->n_models; k++) {
        if (kept[k]) continue;
        mm_model *old = mm->models[k];
        bool replaced = false;
        for (size_t i = 0; i < n_new; i++) replaced = replaced || strcmp(next[i]->name, old->name) == 0;
        if (!replaced) removed++;
        retire(mm, old);
        if (old->state == SY_MODEL_READY) request_unload(old, false);
        maybe_free_retired(mm, old);
    }
    free(kept);
    free(mm->models);
    mm->models = next;
    mm->n_models = n_new;
    groups_free(mm->groups, mm->n_groups);
    mm->groups = groups;
    mm->n_groups = n_groups;
    selectors_free(mm->selectors, mm->n_selectors);
    mm->selectors = selectors_from_config(cfg, &mm->n_selectors);
    mm->max_memory = cfg->host.max_memory;
    mm->max_device_memory = cfg->host.max_device_memory;
    mm->load_timeout_s = cfg->host.load_timeout_s;
    free(mm->resume_path);
    mm->resume_path = dup_or_null(cfg->host.resume_path);
    mm->resume = cfg->host.resume;
    mm->resume_no_host_cache = cfg->host.resume_no_host_cache;
    mm->resume_max_bytes = cfg->host.resume_max_bytes;
    sy_log(SY_LOG_INFO, "config reloaded: %zu models added, %zu changed, %zu removed", added, changed, removed);
    /* Retired models without leases go now; the others when their last request ends. */
    while (claim_any_pending(mm)) {
    }
    pthread_cond_broadcast(&mm->changed);
    pthread_mutex_unlock(&mm->lock);
    return 0;
}

/* ------------------------------------------------------------------------------------------------------------
 * Selectors */

static bool active(const mm_model *m) {
    return m->peer != NULL || m->state == SY_MODEL_READY || m->state == SY_MODEL_LOADING;
}

int sy_model_manager_resolve(sy_model_manager *mm, const char *name, char *out, size_t out_size) {
    if (mm == NULL || name == NULL) return 0;
    pthread_mutex_lock(&mm->lock);
    const mm_selector *sel = NULL;
    for (size_t i = 0; i < mm->n_selectors && sel == NULL; i++)
        if (strcmp(mm->selectors[i].name, name) == 0) sel = &mm->selectors[i];
    if (sel == NULL || sel->n_targets == 0) {
        pthread_mutex_unlock(&mm->lock);
        return 0;
    }
    const char *choice = sel->targets[0];
    if (sel->strategy == SY_SELECT_WARM) {
        const char *loading = NULL, *ready = NULL;
        for (size_t k = 0; k < sel->n_targets && ready == NULL; k++) {
            const mm_model *m = find_current(mm, sel->targets[k]);
            if (m == NULL) continue;
            if (m->state == SY_MODEL_READY || m->peer != NULL) ready = m->name;
            else if (m->state == SY_MODEL_LOADING && loading == NULL) loading = m->name;
        }
        choice = ready ? ready : loading ? loading : choice;
    } else if (sel->strategy == SY_SELECT_SPILLOVER) {
        /* The first running target with room; else the first that is not running (it starts); else the least
         * busy running one. */
        const char *room = NULL, *idle = NULL, *least = NULL;
        uint32_t least_leases = UINT32_MAX;
        for (size_t k = 0; k < sel->n_targets && room == NULL; k++) {
            const mm_model *m = find_current(mm, sel->targets[k]);
            if (m == NULL) continue;
            if (!active(m)) {
                if (idle == NULL) idle = m->name;
                continue;
            }
            /* A peer's requests are not counted here: it always has room. */
            if (m->peer != NULL || m->leases < sel->spillover) room = m->name;
            if (m->leases < least_leases) least = m->name, least_leases = m->leases;
        }
        choice = room ? room : idle ? idle : least ? least : choice;
    }
    snprintf(out, out_size, "%s", choice);
    pthread_mutex_unlock(&mm->lock);
    return 1;
}

/* ------------------------------------------------------------------------------------------------------------
 * Status */

size_t sy_model_manager_status(sy_model_manager *mm, sy_model_status *out, size_t cap) {
    if (mm == NULL) return 0;
    pthread_mutex_lock(&mm->lock);
    double now = seconds_now();
    for (size_t i = 0; i < mm->n_models && i < cap; i++) {
        mm_model *m = mm->models[i];
        sy_model_status *st = &out[i];
        memset(st, 0, sizeof *st);
        st->name = m->name;
        st->plugin = m->proc_spec != NULL ? "process" : m->peer != NULL ? "peer" : m->plugin;
        st->path = m->proc_spec != NULL ? m->proc_spec->cmd : m->path;
        st->pid = m->proc != NULL ? (int)sy_process_pid(m->proc) : 0;
        st->state = m->state;
        st->ttl_s = m->ttl_s;
        st->ttl_in_effect_s = effective_ttl(m);
        if (m->state == SY_MODEL_READY) {
            measure(m);
            st->memory_bytes = m->memory_bytes;
            st->device_bytes = m->device_bytes;
            st->idle_seconds = m->leases ? 0 : now - m->last_used;
            if (m->sched != NULL) sy_scheduler_get_stats(m->sched, &st->sched);
            st->in_flight = m->leases;
        } else if (m->state == SY_MODEL_UNLOADING) {
            st->memory_bytes = m->memory_bytes;
            st->device_bytes = m->device_bytes;
            if (m->sched != NULL) sy_scheduler_get_stats(m->sched, &st->sched);
        }
    }
    size_t n = mm->n_models;
    pthread_mutex_unlock(&mm->lock);
    return n;
}

void sy_model_manager_get_counters(sy_model_manager *mm, sy_model_manager_counters *out) {
    memset(out, 0, sizeof *out);
    if (mm == NULL) return;
    pthread_mutex_lock(&mm->lock);
    *out = mm->counters;
    pthread_mutex_unlock(&mm->lock);
}

bool sy_model_manager_loading(sy_model_manager *mm) {
    if (mm == NULL) return false;
    pthread_mutex_lock(&mm->lock);
    bool loading = false;
    for (size_t i = 0; i < n_entries(mm); i++) loading = loading || entry_at(mm, i)->state == SY_MODEL_LOADING;
    pthread_mutex_unlock(&mm->lock);
    return loading;
}
