/*
 * switchyard plugin ABI — common part: versions, status codes, options, the host API and the plugin entry.
 *
 * This header and its siblings (engine.h, drafter.h) are the whole contract between the switchyard host and a
 * plugin. Plain C99, no dependencies beyond <stdint.h> and <stddef.h>.
 *
 * Versioning
 *   - The ABI has a major and a minor version. A host loads a plugin only if the majors are equal and the
 *     plugin's minor is not newer than the host's. Minors only append: fields at the end of structs, functions at
 *     the end of tables, new interface ids. Nothing is ever removed or reordered within a major.
 *   - Every struct that crosses the boundary starts with `uint32_t struct_size`, set by whoever fills the struct
 *     to sizeof() of the struct as it was compiled. The reader only touches fields that lie inside struct_size
 *     (SY_HAS_FIELD below); a field outside it reads as absent (NULL / 0).
 *   - A plugin may compile against an older minor by defining SY_ABI_TARGET_MINOR before including these
 *     headers; fields added after that minor are then left out of the structs and its entry reports that minor.
 *   - Interfaces are looked up by string id with their major inside the id ("sy.engine/1"). NULL means the
 *     plugin does not offer that interface.
 *
 * Ownership
 *   - What a side allocates, that side frees. Pointers a plugin returns (names, messages, model handles, token
 *     bytes) stay owned by the plugin; their lifetime is stated beside each call. Buffers the host passes in
 *     (logits rows, token arrays) stay owned by the host and are only valid during the call.
 *   - No FILE *, errno, C++ exceptions or allocator handles cross the boundary. Calls return sy_status; on failure
 *     the plugin's error_message() explains (see engine.h).
 *
 * Threading (the general rule; each call's own rule is written beside it)
 *   - entry->init and entry->deinit run once each, on one thread, before and after every other call.
 *   - Host API functions may be called from any thread, at any time between init and deinit.
 */
#ifndef SWITCHYARD_ABI_H
#define SWITCHYARD_ABI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SY_ABI_VERSION_MAJOR 1
#define SY_ABI_VERSION_MINOR 3

/* Minor 1.1 appended: sy_engine_api.memory_usage.
 * Minor 1.2 appended: sy_host_api.context, .plugin_path and the *_ctx callbacks; sy_model_info's capabilities
 * (max_rollback, max_decode_tokens, capabilities); sy_decode_item.call and sy_decode_batch.item_status;
 * sy_engine_state_api.state_can_read; the interfaces "sy.plugin.options/1" (option schema) and
 * "sy.engine.resources/1" (the memory a load will take).
 * Minor 1.3 appended: sy_option_spec.choices (the values a STRING option takes, e.g. a KV cache type). */

#ifndef SY_ABI_TARGET_MINOR
#define SY_ABI_TARGET_MINOR SY_ABI_VERSION_MINOR
#endif
#if SY_ABI_TARGET_MINOR > SY_ABI_VERSION_MINOR
#error "SY_ABI_TARGET_MINOR is newer than these headers"
#endif

/* True when the struct pointed to by p, whose struct_size the filler set, contains member m. */
#define SY_HAS_FIELD(p, type, m) \
    ((p) != NULL && (size_t)(p)->struct_size >= offsetof(type, m) + sizeof(((type *)0)->m))

#if defined(_WIN32)
#define SY_EXPORT __declspec(dllexport)
#else
#define SY_EXPORT __attribute__((visibility("default")))
#endif

/* The one symbol every plugin exports: `const sy_plugin_entry switchyard_plugin_entry` (SY_DEFINE_PLUGIN_ENTRY). */
#define SY_PLUGIN_ENTRY_SYMBOL "switchyard_plugin_entry"

typedef enum sy_status {
    SY_OK = 0,
    SY_ERR_INVALID_ARGUMENT = 1, /* a bad parameter or option value */
    SY_ERR_UNSUPPORTED = 2,      /* not this plugin's format, architecture, or feature */
    SY_ERR_IO = 3,               /* reading or writing a file failed */
    SY_ERR_FORMAT = 4,           /* an input (model file, state stream) is malformed */
    SY_ERR_OUT_OF_MEMORY = 5,
    SY_ERR_CONTEXT_FULL = 6,     /* a sequence would grow past the loaded context length */
    SY_ERR_CANCELLED = 7,        /* the host asked for cancellation (sy_host_api.is_cancelled) */
    SY_ERR_NO_DEVICE = 8,        /* the accelerator this plugin needs is absent */
    SY_ERR_BUFFER_TOO_SMALL = 9, /* the host's buffer is too small; the needed size was reported */
    SY_ERR_INTERNAL = 10
} sy_status;

typedef enum sy_log_level {
    SY_LOG_ERROR = 0,
    SY_LOG_WARN = 1,
    SY_LOG_INFO = 2,
    SY_LOG_DEBUG = 3
} sy_log_level;

/* A key=value option, e.g. {"threads", "4"}. Both strings are owned by the caller. */
typedef struct sy_option {
    const char *key;
    const char *value;
} sy_option;

/* Opaque host-side handle of one host call in progress (for cancellation checks). */
typedef struct sy_host_call sy_host_call;
/* Opaque host-side reference to another loaded model, held by a drafter. */
typedef struct sy_engine_ref sy_engine_ref;

struct sy_engine_api;
struct sy_model;

/*
 * Functions the host lends to plugins. Passed to init(); valid until deinit() returns.
 * All of them may be called from any thread.
 */
typedef struct sy_host_api {
    uint32_t struct_size;
    uint16_t abi_major;
    uint16_t abi_minor;
    const char *host_version; /* "switchyard 0.1.0", owned by the host */

    /* Log one line (no trailing newline needed). `plugin` names the caller. */
    void (*log)(sy_log_level level, const char *plugin, const char *message);

    /* Non-zero once the host wants the call behind `call` to stop (client gone, shutdown).
     * Long calls (a prefill over thousands of tokens) check it between layers or chunks and then return
     * SY_ERR_CANCELLED, leaving the sequence as it was before the call. `call` may be NULL: returns 0. */
    int (*is_cancelled)(const sy_host_call *call);

    /* For drafters: borrow another loaded model by its configured name. On SY_OK the engine table, the model
     * handle and a reference are returned; the model stays loaded until release_engine(ref). The borrower must
     * follow the engine's threading rules, i.e. call it only from within its own drafter calls. */
    sy_status (*acquire_engine)(const char *model_name, const struct sy_engine_api **engine,
                                struct sy_model **model, sy_engine_ref **ref);
    void (*release_engine)(sy_engine_ref *ref);

#if SY_ABI_TARGET_MINOR >= 2
    /* (since 1.2) Each plugin gets a table of its own: `context` is this plugin's handle in the host, passed
     * back to every *_ctx callback below, so a plugin needs no process-global state to find its host (several
     * hosts, or registries, may live in one process). Prefer these to the 1.0 callbacks above. */
    void *context;
    /* The plugin's own shared object, as the host opened it (for files shipped beside it). */
    const char *plugin_path;
    /* As log, with the plugin's name taken from the context. */
    void (*log_ctx)(void *context, sy_log_level level, const char *message);
    int (*is_cancelled_ctx)(void *context, const sy_host_call *call);
    /* Models are looked up among those published in this plugin's host, not process-wide. */
    sy_status (*acquire_engine_ctx)(void *context, const char *model_name, const struct sy_engine_api **engine,
                                    struct sy_model **model, sy_engine_ref **ref);
    void (*release_engine_ctx)(void *context, sy_engine_ref *ref);
#endif
} sy_host_api;

/*
 * "sy.plugin.options/1" (since 1.2, optional): the load options a plugin understands, so the host can print them
 * (`switchyard plugins --options NAME`) and refuse a config key that no plugin declares, with its file and line,
 * instead of passing it on to be ignored.
 */
#define SY_PLUGIN_OPTIONS_INTERFACE_ID "sy.plugin.options/1"

typedef enum sy_option_type {
    SY_OPTION_BOOL = 0,   /* true/false, 1/0, yes/no, on/off */
    SY_OPTION_UINT = 1,   /* a whole number within [min, max] */
    SY_OPTION_NUMBER = 2, /* a decimal number within [min, max] */
    SY_OPTION_STRING = 3,
    SY_OPTION_PATH = 4,   /* a file or folder; relative paths resolve against the config file's folder */
    SY_OPTION_PATH_LIST = 5 /* paths separated by commas */
} sy_option_type;

typedef struct sy_option_spec {
    uint32_t struct_size;
    const char *key;           /* [a-z0-9_.]: the config key and the load option's key */
    uint32_t type;             /* sy_option_type */
    const char *default_value; /* as text; "" when the default is computed (e.g. "the CPUs available") */
    const char *help;          /* one line */
    double min, max;           /* UINT and NUMBER: the range; ignored otherwise */
#if SY_ABI_TARGET_MINOR >= 3
    /* 1.3, STRING options: NULL (any text), or the values it takes, comma-separated ("f16,q8_0,f32"); the host
     * refuses any other value with them listed. A host older than 1.3 does not read it: check the value again. */
    const char *choices;
#endif
} sy_option_spec;

typedef struct sy_plugin_options_api {
    uint32_t struct_size;
    uint32_t n_options;
    uint32_t spec_size; /* stride of options[]: sizeof(sy_option_spec) as the plugin compiled it */
    const sy_option_spec *options;
} sy_plugin_options_api;

/* The i-th option spec, honouring the plugin's stride. */
static inline const sy_option_spec *sy_plugin_option(const sy_plugin_options_api *o, uint32_t i) {
    return (const sy_option_spec *)(const void *)((const char *)o->options + (size_t)i * o->spec_size);
}

/*
 * "sy.plugin.runtime/1" (optional, any 1.x: a host that does not know the id never asks for it): what the plugin
 * chose on this machine at run time, for `switchyard plugins` and `switchyard bench`, e.g. a CPU engine's kernel tier
 * and why a faster one is not used ("cpu kernels: avx512 (...; amx unavailable: the CPU reports no AMX-TILE)").
 */
#define SY_PLUGIN_RUNTIME_INTERFACE_ID "sy.plugin.runtime/1"

typedef struct sy_plugin_runtime_api {
    uint32_t struct_size;
    /* One line of text owned by the plugin, valid until its deinit; NULL when there is nothing to say. Any thread,
     * any time after init; it does not change while the plugin is loaded. */
    const char *(*describe)(void);
} sy_plugin_runtime_api;

/*
 * The plugin entry, exported as `switchyard_plugin_entry`. Define it with SY_DEFINE_PLUGIN_ENTRY (or fill it with
 * SY_PLUGIN_ENTRY_INIT) so the versions and struct_size are right for the headers compiled against.
 */
typedef struct sy_plugin_entry {
    uint32_t struct_size;
    uint16_t abi_major;
    uint16_t abi_minor;
    const char *name;        /* unique among loaded plugins: [a-z0-9-], at most 63 chars */
    const char *version;     /* the plugin's own version, e.g. "0.1.0" */
    const char *description; /* one line */

    /* Called once after loading, before anything else. Return SY_OK or an error (the host then unloads the
     * plugin and reports it refused). `host` outlives the plugin; since 1.2 it is this plugin's own table
     * (context, plugin_path). */
    sy_status (*init)(const sy_host_api *host);
    /* Called once before unloading, after every model of the plugin was unloaded. */
    void (*deinit)(void);
    /* A function table by interface id ("sy.engine/1", "sy.engine.state/1", "sy.drafter/1", ...), or NULL.
     * The table is static and stays valid until deinit. May be called from any thread after init. */
    const void *(*get_interface)(const char *id);
} sy_plugin_entry;

#define SY_PLUGIN_ENTRY_INIT(name_, version_, description_, init_, deinit_, get_interface_) \
    { sizeof(sy_plugin_entry), SY_ABI_VERSION_MAJOR, SY_ABI_TARGET_MINOR, (name_), (version_),    \
      (description_), (init_), (deinit_), (get_interface_) }

/* SY_DEFINE_PLUGIN_ENTRY("my-engine", "1.0.0", "what it does", my_init, my_deinit, my_get_interface); */
#define SY_DEFINE_PLUGIN_ENTRY(name_, version_, description_, init_, deinit_, get_interface_)           \
    SY_EXPORT const sy_plugin_entry switchyard_plugin_entry =                                            \
        SY_PLUGIN_ENTRY_INIT(name_, version_, description_, init_, deinit_, get_interface_)

#ifdef __cplusplus
}
#endif

#endif /* SWITCHYARD_ABI_H */
