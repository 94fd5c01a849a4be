/*
 * The model manager: which configured models are loaded, with llama-swap's semantics.
 *
 * A request names a model (or an alias); acquire() returns a lease on it once it is loaded, loading it first if
 * needed. Loading a model applies its group's rules: in a `swap` group the other loaded members are unloaded
 * first; an `exclusive` group unloads every model of the other groups (except `persistent` ones). With
 * max_memory set, a load that would pass the budget first unloads the least recently used idle models; the load's
 * size is its last measurement, else the engine's estimate ("sy.engine.resources/1"), else its files' size.
 * max_device_memory does the same with accelerator memory alone (device bytes never count against max_memory).
 * Models are unloaded only when no lease is held on them (in-flight requests finish first). Requests for a model
 * that is loading wait for it (bounded by load_timeout_s, then 503); a request is never served by another model.
 *
 * Threading: every function may be called from any thread.
 */
#ifndef SY_HOST_MODEL_MANAGER_H
#define SY_HOST_MODEL_MANAGER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config/config.h"
#include "plugins/loaded_model.h"
#include "plugins/plugin_loader.h"
#include "engine/scheduler.h"

typedef struct sy_model_manager sy_model_manager;
typedef struct sy_model_lease sy_model_lease;

/* The manager borrows the registry (it must outlive the manager) and copies what it needs of the config. */
sy_model_manager *sy_model_manager_create(const sy_config *cfg, const sy_plugin_registry *reg);
/* The registry it was created with. */
const sy_plugin_registry *sy_model_manager_registry(const sy_model_manager *mm);
/* Unload everything (waiting for leases to end) and free. */
void sy_model_manager_destroy(sy_model_manager *mm);

/* Load the models marked `preload`. Returns the number that failed (each logged). */
int sy_model_manager_preload(sy_model_manager *mm);
/* Where the start's preload is: PENDING from create (when a model is marked preload) until
 * sy_model_manager_preload has run, then DONE, or FAILED when a preload model did not load. /health's
 * readiness is this. */
typedef enum sy_preload_state { SY_PRELOAD_PENDING = 0, SY_PRELOAD_DONE, SY_PRELOAD_FAILED } sy_preload_state;
sy_preload_state sy_model_manager_preload_state(sy_model_manager *mm);

/* A lease on a loaded model. NULL with err and *http_status set: 404 unknown model (err names the models
 * offered), 503 load failed or timed out, 429 its queue is full. */
sy_model_lease *sy_model_manager_acquire(sy_model_manager *mm, const char *name_or_alias, char *err,
                                         size_t err_size, int *http_status);
/* A lease only when the model is loaded now: never loads, swaps or waits. NULL with *http_status 404 (unknown,
 * err naming the models offered) or 409 (not loaded, or loading). For listings that must not load. */
sy_model_lease *sy_model_manager_acquire_loaded(sy_model_manager *mm, const char *name_or_alias, char *err,
                                                size_t err_size, int *http_status);
void sy_model_lease_release(sy_model_lease *lease);

const sy_loaded_model *sy_model_lease_model(const sy_model_lease *lease);
sy_scheduler *sy_model_lease_scheduler(const sy_model_lease *lease);
const char *sy_model_lease_name(const sy_model_lease *lease); /* the canonical model name */
/* The model's chat template override from the config: a built-in template name (`chat_template`) or a template
 * file (`chat_template_file`), or NULL. Copies taken at acquire, valid until the lease is released. */
const char *sy_model_lease_chat_template(const sy_model_lease *lease);
const char *sy_model_lease_chat_template_file(const sy_model_lease *lease);
/* A process model's settings (proxy URL, filters, timeouts), or NULL for a plugin model. Valid while leased. */
struct sy_process_spec;
const struct sy_process_spec *sy_model_lease_process(const sy_model_lease *lease);
/* A request to a process model failed upstream: true when its process has died, which then unloads the model
 * once its leases are released (the next request starts it again). */
bool sy_model_lease_upstream_failed(sy_model_lease *lease);

/* A [selector.NAME]'s choice for a request now (warm, pin, spillover): 1 with the target's name in out, 0 when
 * `name` is not a selector. The choice is advice: the caller acquires that model as usual. */
int sy_model_manager_resolve(sy_model_manager *mm, const char *name, char *out, size_t out_size);

/* Unload one model (by name or alias) or, with NULL, all. In-flight requests finish first, and it returns once
 * the unloads' KV snapshots are written. Returns the number of models unloaded, or -1 if the name is unknown.
 * (The unloads of swaps and ttls do not wait: their snapshots are written by a background worker while the next
 * model loads, and a model's next load waits for its own.) */
int sy_model_manager_unload(sy_model_manager *mm, const char *name_or_alias);

/* Apply a new config: removed models are unloaded (after their requests), changed ones (plugin, path or
 * options differ) are unloaded to be loaded again on demand, added ones become available. Returns 0; on a
 * config with errors nothing changes and -1 is returned. */
int sy_model_manager_reload(sy_model_manager *mm, const sy_config *cfg);

/* Override a model's ttl for as long as it stays loaded (Ollama's keep_alive): unloaded once idle for `seconds`;
 * SY_MODEL_TTL_FOREVER (any negative) never while idle; 0 as soon as it is idle (at the next tick);
 * SY_MODEL_TTL_CONFIGURED back to the config's ttl. An unload ends the override: the next load starts with the
 * configured ttl. A model that is not loaded keeps the override for its next load. The idle clock restarts.
 * Returns 0, or -1 when the name is unknown. */
#define SY_MODEL_TTL_FOREVER ((int64_t)-1)
#define SY_MODEL_TTL_CONFIGURED INT64_MIN
int sy_model_manager_set_ttl(sy_model_manager *mm, const char *name_or_alias, int64_t seconds);

/* Unload models idle past their ttl; the server calls it about once a second. */
void sy_model_manager_tick(sy_model_manager *mm);

/* For /v1/models, /api/tags, /running, /api/ps, /health, /metrics. */
typedef enum sy_model_state {
    SY_MODEL_UNLOADED = 0,
    SY_MODEL_LOADING,
    SY_MODEL_READY,
    SY_MODEL_UNLOADING
} sy_model_state;

typedef struct sy_model_status {
    const char *name;        /* valid until the next reload */
    const char *plugin;
    const char *path;
    sy_model_state state;
    uint64_t memory_bytes;   /* host memory (mapped + resident), measured through the engine's memory_usage */
    uint64_t device_bytes;   /* accelerator memory, likewise */
    double idle_seconds;
    uint32_t ttl_s;          /* configured; 0: never */
    int64_t ttl_in_effect_s; /* the idle seconds before an unload now (ttl_s or a keep_alive override); -1: never */
    sy_scheduler_stats sched; /* zero when not loaded */
    int pid;                 /* a process model's running child; 0 otherwise */
    uint32_t in_flight;      /* requests holding the model (leases) */
} sy_model_status;

/* Fill up to `cap` entries in config order; returns the number of configured models. */
size_t sy_model_manager_status(sy_model_manager *mm, sy_model_status *out, size_t cap);

typedef struct sy_model_manager_counters {
    uint64_t loads;
    uint64_t load_failures;
    uint64_t swaps;          /* unloads caused by loading another model */
    uint64_t estimated_loads; /* loads planned with the engine's estimate ("sy.engine.resources/1") */
    uint64_t budget_unloads;  /* unloads for max_memory / max_device_memory before a load (also in swaps) */
    uint64_t unloads;
    double load_seconds_total;
} sy_model_manager_counters;
void sy_model_manager_get_counters(sy_model_manager *mm, sy_model_manager_counters *out);

/* For tests: while held, the background worker (KV snapshot writes, closes of unloaded models) starts nothing,
 * so a test can keep a snapshot write in flight. */
void sy_model_manager_hold_background(sy_model_manager *mm, bool hold);

/* True while any model is loading (for /health: 503 then). */
bool sy_model_manager_loading(sy_model_manager *mm);

#endif
