/*
 * The switchyard configuration file: INI, read with inih, checked into the typed structs below.
 * docs/config.md is the reference of every section and key.
 *
 * Loading never stops at the first problem: every error and warning is collected with its file and line
 * ("demo.ini:12: [model.qwen] ttl: 'abc' is not a number of seconds"). A config with errors must not be used
 * beyond printing its diagnostics; one without errors has every model complete and every reference resolved.
 */
#ifndef SY_HOST_CONFIG_H
#define SY_HOST_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <switchyard/abi.h>

/* Limits on what one config may hold; anything above is an error, not a crash. */
#define SY_CONFIG_MAX_BYTES ((size_t)4 << 20) /* the whole file */
#define SY_CONFIG_MAX_MODELS 1024
#define SY_CONFIG_MAX_GROUPS 1024
#define SY_CONFIG_MAX_NAMES 4096      /* model names and aliases together */
#define SY_CONFIG_MAX_LIST_ITEMS 256  /* items of one list (aliases, api_keys, members, kv_cache_dir) */
#define SY_CONFIG_MAX_OPTIONS 64      /* engine options of one model */
#define SY_CONFIG_MAX_NAME_LEN 128    /* a model, alias or group name */
#define SY_CONFIG_MAX_PATH_LEN 4096   /* a path after ~ expansion and resolution */
#define SY_CONFIG_MAX_DIAGNOSTICS 100
#define SY_CONFIG_MAX_PEERS 64
#define SY_CONFIG_MAX_TEXT_LEN 16384  /* a cmd and its continuation lines, after macro expansion too */ /* errors (and, separately, warnings) kept; the rest are counted */

/* Defaults of keys that other code needs to know. */
#define SY_CONFIG_DEFAULT_MAX_CONNECTIONS 256u
#define SY_CONFIG_DEFAULT_REQUEST_TIMEOUT_S 30u
#define SY_CONFIG_DEFAULT_STREAM_TIMEOUT_S 60u
#define SY_CONFIG_DEFAULT_MAX_PER_CLIENT 64u
#define SY_CONFIG_DEFAULT_CONNECTION_RESERVE 16u
#define SY_CONFIG_DEFAULT_TOKENIZE_MEMORY ((uint64_t)256 << 20)
#define SY_CONFIG_DEFAULT_PREFIX_CACHE_TOKENS 8192u
#define SY_CONFIG_DEFAULT_RESUME_MAX_BYTES ((uint64_t)4 << 30)

/* The name of the group of models that name no group. */
#define SY_CONFIG_DEFAULT_GROUP "default"

/* A list of strings with the config line each item came from. */
typedef struct sy_config_list {
    char **items;
    unsigned *lines;
    size_t count;
} sy_config_list;

typedef enum sy_config_draft {
    SY_CONFIG_DRAFT_NONE = 0,
    SY_CONFIG_DRAFT_NGRAM,   /* n-gram prompt lookup */
    SY_CONFIG_DRAFT_MODEL    /* another configured model drafts (draft_model) */
} sy_config_draft;

/* [host] */
typedef struct sy_config_host {
    char *listen;              /* "HOST:PORT" or "[V6]:PORT"; default "127.0.0.1:8080" */
    char *plugin_dir;          /* NULL: the plugins beside the executable */
    char *resume_path;         /* default ~/.local/state/switchyard/resume (NULL when HOME is unset) */
    bool resume;               /* restore the snapshots in resume_path at start */
    bool resume_no_host_cache; /* restore into the slots only, not into the host prefix cache */
    uint32_t drain_timeout_s;  /* at a stop, how long work in flight may finish before it is cut; default 0 */
    char *slot_save_path;      /* NULL: the slot save/restore API is off */
    uint64_t slot_save_max_bytes; /* what the saved slots may hold together; 0: no limit; default 4 GiB */
    uint64_t max_memory;       /* bytes all loaded models may use together; 0: no limit */
    uint64_t max_device_memory; /* accelerator bytes all loaded models may use together; 0: no limit */
    sy_config_list api_keys;   /* inference endpoints; empty: no authentication */
    sy_config_list admin_api_keys; /* management endpoints (/unload, /slots, /running, /metrics, /reload);
                                    * empty: the api_keys protect them (none: open) */
    sy_config_list cors_origins;   /* origins browsers may call from ("*": any); empty: none */
    sy_config_list allowed_hosts;  /* Host names a loopback listener accepts besides loopback ones ("*": any) */
    uint32_t request_timeout_s;  /* a whole request must arrive within this; default 30 */
    uint32_t stream_timeout_s;   /* a client must take what it is sent within this; default 60 */
    uint32_t max_connections_per_client; /* default 64 */
    uint32_t connection_reserve; /* slots kept for addresses with at most one connection; default 16 */
    uint64_t tokenize_memory;    /* memory tokenizing may take at once, all requests together; default 256 MiB */
    sy_log_level log_level;    /* meaningful only when log_level_set */
    bool log_level_set;
    uint32_t http_threads;       /* deprecated and ignored (one thread per connection); default 4 */
    uint32_t max_connections;    /* connections the HTTP server holds at once; default 256 */
    uint64_t max_request_body;   /* bytes; default 16 MiB */
    uint64_t resume_max_bytes;   /* bytes each model's snapshot folder may hold; default 4 GiB */
    uint32_t load_timeout_s;     /* how long a request waits for its model to load; default 600 */
    uint32_t start_port;         /* the first ${PORT} handed to process models; default 5800 (llama-swap's) */
    unsigned line;               /* of the [host] header; 0 when there is none */
} sy_config_host;

/* [model.NAME] */
typedef struct sy_config_model {
    char *name;
    char *plugin;              /* required */
    char *path;                /* required; ~ expanded, relative paths resolved against the config's folder */
    sy_config_list aliases;
    char *group;               /* never NULL in a config without errors (SY_CONFIG_DEFAULT_GROUP if unnamed) */
    uint32_t ttl_s;            /* idle seconds before unload; 0: never */
    uint32_t parallel;         /* slots (concurrent sequences); default 1 */
    sy_config_draft draft;
    char *draft_model;         /* the drafting model's canonical name when draft == SY_CONFIG_DRAFT_MODEL */
    uint32_t draft_max;        /* tokens proposed per step; default 16 */
    uint32_t draft_min;        /* fewer proposed tokens than this are dropped; default 0 */
    char *chat_template;       /* a built-in template name overriding the model's own; NULL */
    char *chat_template_file;  /* a template file overriding the model's own; NULL */
    bool preload;              /* load at start rather than on the first request */
    bool persist_on_unload;    /* snapshot warm slots when unloaded; default true */
    uint32_t max_queue;        /* requests waiting for a free slot; more are refused (429); default 64 */
    uint32_t queue_timeout_s;  /* how long a request may wait for a slot; 0: no limit; default 600 */
    uint32_t prefix_cache_tokens; /* the host prefix cache's budget of parked tokens; 0: off; default 8192 */
    /* A model that is a process (llama-swap's models): `cmd` set, plugin and path unused. Macros are expanded
     * once the whole file is read (config/macros.c); ${PID} of cmd_stop stays for the stop. */
    char *cmd;
    char *cmd_stop;            /* NULL: SIGTERM to its process group, then SIGKILL after stop_grace */
    sy_config_list env;        /* NAME=VALUE items added to the child's environment */
    char *check_endpoint;      /* polled until 200 when it starts; default "/health"; "none": no check */
    char *proxy;               /* the upstream's base URL; default http://127.0.0.1:${PORT} */
    char *use_model_name;      /* sent upstream as `model` instead of the name the client asked for; NULL */
    uint64_t memory;           /* declared bytes, for max_memory (a process cannot be measured); default 0 */
    uint32_t port;             /* the ${PORT} assigned to it; 0 when it uses none */
    uint32_t connect_timeout_s; /* to the upstream; default 10 */
    uint32_t header_timeout_s;  /* for the upstream's response header; 0: none; default 600 */
    uint32_t stop_grace_s;      /* between SIGTERM (or cmd_stop) and SIGKILL; default 5 */
    sy_config_list strip_params; /* request fields removed before forwarding (process and peer models) */
    char *set_params;           /* a JSON object whose fields are set in every forwarded request; NULL */
    /* What /v1/models shows (llama-swap's name, description, metadata), and whether it lists the model. */
    bool unlisted;
    char *display_name;
    char *description;
    char *metadata;             /* a JSON object, as written */
    char *peer;                 /* the [peer.NAME] that serves it (a model made from a peer's list); NULL */
    /* Keys of the section that are not model keys (KEY, or engine.KEY for an option named like a model key): the
     * plugin's load options, as written. sy_config_check_options checks them against what the plugin declares. */
    struct sy_config_raw_option *raw_options;
    size_t n_raw_options;
    /* Engine options handed to the plugin's load(), filled by sy_config_check_options: normalized as the command
     * line passes them ("threads"="8", bools "1"/"0", paths resolved against the config's folder, path lists
     * comma-joined), in config order. The strings are owned by the config. */
    sy_option *options;
    size_t n_options;
    /* defaults.KEY, set_params.KEY and strip_params (config/request_params.h), in config order */
    struct sy_config_request_param *request_params;
    size_t n_request_params;
    unsigned line;             /* of the [model.NAME] header */
} sy_config_model;

/* An engine key as written in a [model.NAME] section. */
typedef struct sy_config_raw_option {
    char *written;      /* the key as written ("engine.threads") */
    char *key;          /* the option's key ("threads") */
    char *value;        /* indented continuation lines appended after a comma */
    unsigned line;      /* of the key */
    unsigned continued; /* of its first continuation line; 0 if none */
    size_t n_items;     /* comma-separated items so far, for the list limit */
} sy_config_raw_option;

/* [group.NAME], or a group that models name without a section (implicit, with the defaults). */
typedef struct sy_config_group {
    char *name;
    bool swap;                 /* at most one member loaded at a time; default true */
    bool exclusive;            /* loading a member unloads the models of other groups; default true */
    bool persistent;           /* never unloaded by another group's exclusive load; default false */
    sy_config_list members;    /* canonical model names, in config order (lines: the models' headers) */
    bool implicit;             /* no [group.NAME] section */
    unsigned line;             /* of the header; 0 when implicit */
} sy_config_group;

/* [peer.NAME]: another server whose models are proxied there (another switchyard, a llama-swap, a hosted API).
 * Each model it lists becomes a model of the config with `peer` set (no process, nothing to load). */
typedef struct sy_config_peer {
    char *name;
    char *url;                 /* base URL, without the /v1 */
    char *api_key;             /* sent as Authorization: Bearer and x-api-key; NULL */
    sy_config_list models;
    sy_config_list strip_params; /* given to each of its models */
    char *set_params;
    unsigned line;
} sy_config_peer;

/* [selector.NAME]: a model name resolved per request to one of its targets (llama-swap's selectors). */
typedef enum sy_config_strategy {
    SY_SELECT_WARM = 0,  /* the first target that is loaded, else one loading, else the first */
    SY_SELECT_PIN,       /* always the first */
    SY_SELECT_SPILLOVER  /* the first loaded target with fewer than `spillover` requests, else the next one */
} sy_config_strategy;

typedef struct sy_config_selector {
    char *name;
    sy_config_strategy strategy;
    sy_config_list targets;    /* canonical model names once read */
    uint32_t spillover;        /* default 1 */
    char *display_name, *description;
    unsigned line;
} sy_config_selector;

typedef struct sy_config {
    char *source;              /* the name used in messages: the path as given, or the string's name */
    char *base_dir;            /* relative paths resolve against it; NULL: left relative */
    sy_config_host host;
    sy_config_model *models;
    size_t n_models;
    sy_config_group *groups;
    size_t n_groups;
    sy_config_peer *peers;
    size_t n_peers;
    sy_config_selector *selectors;
    size_t n_selectors;
    /* [macros]: NAME = VALUE, used as ${NAME} in the process keys of models (in file order). */
    sy_config_list macro_names, macro_values;
    /* Diagnostics, each "FILE:LINE: [SECTION] KEY: what is wrong". */
    char **errors;
    size_t n_errors;
    size_t n_errors_dropped;   /* beyond SY_CONFIG_MAX_DIAGNOSTICS */
    char **warnings;
    size_t n_warnings;
    size_t n_warnings_dropped;
    /* Some model has engine keys that sy_config_check_options has not checked yet (its options are empty). */
    bool options_unchecked;
} sy_config;

/* Load a config file. Never returns NULL (out of memory aborts); check sy_config_ok(). A file that cannot be
 * read gives a config with one error. */
sy_config *sy_config_load_file(const char *path);

/* Load a config from memory: `len` bytes (embedded NULs are errors, not terminators). `source` names it in
 * messages (NULL: "<string>"); relative paths resolve against `base_dir` (NULL: they stay relative). */
sy_config *sy_config_load_string(const char *text, size_t len, const char *source, const char *base_dir);

void sy_config_free(sy_config *cfg);

static inline bool sy_config_ok(const sy_config *cfg) {
    return cfg != NULL && cfg->n_errors == 0 && cfg->n_errors_dropped == 0;
}

/* Print warnings then errors, one a line ("warning: ..." / "error: ..."). */
void sy_config_print_diagnostics(const sy_config *cfg, FILE *out);

/* The model whose name or one of whose aliases is exactly `name_or_alias`; NULL if none. */
const sy_config_model *sy_config_find_model(const sy_config *cfg, const char *name_or_alias);
const sy_config_group *sy_config_find_group(const sy_config *cfg, const char *name);
/* The value of one engine option of a model, or NULL. */
const char *sy_config_model_option(const sy_config_model *model, const char *key);

/* What the plugins declare for one model's engine keys: the options of its plugin and, when it drafts, of its
 * drafter plugin. Filled by a sy_config_schema_fn; the specs must stay valid until sy_config_check_options
 * returns. */
#define SY_CONFIG_MAX_SCHEMA 512
typedef struct sy_config_option_schema {
    const sy_option_spec *specs[SY_CONFIG_MAX_SCHEMA]; /* the first spec of a key wins */
    size_t n_specs;
    char asked[160];     /* for messages: "plugin gguf-quant", "plugins gguf-quant, spec-drafter" */
    char unchecked[256]; /* non-empty: a key no spec names is passed on with a warning saying this, e.g. "plugin
                          * old-engine (ABI 1.1) declares no options" */
} sy_config_option_schema;

/* Fills *out (zeroed by the caller) for `model`. */
typedef void (*sy_config_schema_fn)(void *user, const sy_config_model *model, sy_config_option_schema *out);

/* Checks every model's engine keys against schema_of's answer and fills the models' options: a key no spec
 * names is an error ("demo.ini:12: [model.qwen] thread: not a model key, nor an option of plugin gguf-quant (its
 * options: threads, ...)") unless the schema is unchecked; a value is checked against its spec's type and range.
 * schema_of is called once for each model that has engine keys and a plugin. Runs once: later calls do nothing.
 * The config layer knows no plugins; the layer that holds the registry supplies schema_of. */
void sy_config_check_options(sy_config *cfg, sy_config_schema_fn schema_of, void *user);

/* Expands the macros of a process model's cmd, cmd_stop, proxy and check_endpoint (config/macros.c): ${NAME} of
 * [macros], ${env.NAME}, ${MODEL_ID}, ${PORT} (assigning m->port from start_port when first used); ${PID} stays
 * in cmd_stop. Fills the defaults of proxy and check_endpoint. 0, or -1 with why set. */
int sy_config_expand_process(sy_config *cfg, sy_config_model *m, char *why, size_t why_size);

/* The value parsers the config uses, for command-line options that take the same forms.
 * Each returns 0 on success, -1 (leaving *out alone) when the whole string is not such a value. */
int sy_config_parse_bool(const char *s, bool *out);                /* true/false, yes/no, on/off, 1/0 */
int sy_config_parse_size(const char *s, uint64_t *out);            /* 512, 64K, 512M, 8G, 1T, 8GiB, 8GB */
int sy_config_parse_seconds(const char *s, uint64_t *out);         /* 300, 300s, 5m, 2h, 1d */

#endif
