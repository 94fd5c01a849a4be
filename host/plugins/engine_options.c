#include "plugins/engine_options.h"

#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/option_schema.h"
#include "base/util.h"

/* The documented spellings of common keys; whether a plugin takes one is its schema's business. */
typedef struct engine_flag {
    const char *name; /* command-line spelling */
    const char *spelled; /* "--name", for messages */
    const char *key;  /* option key the plugin sees */
    int has_arg;
    const char *help;
} engine_flag;

#define ENGINE_OPTION_BASE 2000
#define ENGINE_OPTION_GENERIC 1999
#define GENERIC_FLAG "-o/--option"

static const engine_flag flags[] = {
    {"threads", "--threads", "threads", required_argument, "compute threads (default: all cores)"},
    {"ctx-size", "--ctx-size", "ctx_size", required_argument, "context length in tokens (default: the model's)"},
    {"kv-cache-dir", "--kv-cache-dir", "kv_cache_dir", required_argument, "keep KV on disk in these folders (comma list)"},
    {"kv-max-tokens", "--kv-max-tokens", "kv_max_tokens", required_argument, "most KV tokens the disk cache holds"},
    {"kv-buffer-mb", "--kv-buffer-mb", "kv_buffer_mb", required_argument, "resident tile buffer of the disk KV cache in MB"},
    {"keep-kv-cache", "--keep-kv-cache", "keep_kv_cache", no_argument, "keep KV cache files after unload"},
    {"backend", "--backend", "backend", required_argument, "engine backend, e.g. reference"},
    {"cache-type-k", "--cache-type-k", "cache_type_k", required_argument, "KV cache type of keys: f16 (default), q8_0, f32 (-ctk)"},
    {"cache-type-v", "--cache-type-v", "cache_type_v", required_argument, "KV cache type of values: f16 (default), q8_0, f32 (-ctv)"},
};
#define N_FLAGS (sizeof flags / sizeof *flags)

void sy_engine_options_init(sy_engine_options *eo) { memset(eo, 0, sizeof *eo); }

void sy_engine_options_free(sy_engine_options *eo) {
    for (size_t i = 0; i < eo->n_items; i++) {
        free((char *)eo->items[i].key);
        free((char *)eo->items[i].value);
    }
    free(eo->items);
    free(eo->flags);
    memset(eo, 0, sizeof *eo);
}

void sy_engine_options_set(sy_engine_options *eo, const char *key, const char *value, const char *flag) {
    for (size_t i = 0; i < eo->n_items; i++) {
        if (strcmp(eo->items[i].key, key) == 0) {
            free((char *)eo->items[i].value);
            eo->items[i].value = sy_strdup(value);
            eo->flags[i] = flag;
            return;
        }
    }
    eo->items = sy_xrealloc(eo->items, (eo->n_items + 1) * sizeof *eo->items);
    eo->flags = sy_xrealloc(eo->flags, (eo->n_items + 1) * sizeof *eo->flags);
    eo->items[eo->n_items].key = sy_strdup(key);
    eo->items[eo->n_items].value = sy_strdup(value);
    eo->flags[eo->n_items] = flag;
    eo->n_items++;
}

/* llama.cpp's short spellings that getopt cannot take (several letters after one dash). */
static const struct {
    const char *spelled, *as;
} short_aliases[] = {{"-ctk", "--cache-type-k"}, {"-ctv", "--cache-type-v"}};

void sy_engine_options_rewrite_aliases(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0) return;
        for (size_t a = 0; a < sizeof short_aliases / sizeof *short_aliases; a++)
            if (strcmp(argv[i], short_aliases[a].spelled) == 0) argv[i] = (char *)short_aliases[a].as;
    }
}

size_t sy_engine_options_getopt(struct option *out, size_t room) {
    size_t n = 0;
    for (size_t i = 0; i < N_FLAGS && n < room; i++, n++)
        out[n] = (struct option){flags[i].name, flags[i].has_arg, NULL, ENGINE_OPTION_BASE + (int)i};
    if (n < room) out[n++] = (struct option){"option", required_argument, NULL, ENGINE_OPTION_GENERIC};
    return n;
}

int sy_engine_options_handle(sy_engine_options *eo, int code, const char *arg, char *err, size_t err_size) {
    if (code == 'o' || code == ENGINE_OPTION_GENERIC) {
        const char *eq = arg ? strchr(arg, '=') : NULL;
        if (eq == NULL || eq == arg) {
            snprintf(err, err_size, "-o/--option wants KEY=VALUE, got '%.80s'", arg ? arg : "");
            return -1;
        }
        char *key = sy_strdup(arg);
        key[eq - arg] = '\0';
        sy_engine_options_set(eo, key, eq + 1, GENERIC_FLAG);
        free(key);
        return 1;
    }
    if (code < ENGINE_OPTION_BASE || code >= ENGINE_OPTION_BASE + (int)N_FLAGS) return 0;
    const engine_flag *f = &flags[code - ENGINE_OPTION_BASE];
    sy_engine_options_set(eo, f->key, f->has_arg == no_argument ? "1" : arg, f->spelled);
    return 1;
}

void sy_engine_options_usage(FILE *out) {
    for (size_t i = 0; i < N_FLAGS; i++) {
        char spelled[64];
        snprintf(spelled, sizeof spelled, "--%s%s", flags[i].name, flags[i].has_arg == no_argument ? "" : " V");
        fprintf(out, "  %-21s %s\n", spelled, flags[i].help);
    }
    fprintf(out, "  %-21s %s\n", "-o, --option K=V", "any option the plugin declares");
    fprintf(out, "  %-21s %s\n", "", "(`switchyard plugins --options NAME` lists them)");
}

/* "plugin a" or "plugins a, b" */
static void asked_text(const sy_plugin *engine, const sy_plugin *drafter, char *buf, size_t size) {
    if (engine != NULL && drafter != NULL)
        snprintf(buf, size, "plugins %s, %s", engine->entry->name, drafter->entry->name);
    else
        snprintf(buf, size, "plugin %s", (engine ? engine : drafter)->entry->name);
}

int sy_engine_options_check(sy_engine_options *eo, const sy_plugin *engine, const sy_plugin *drafter, char *err,
                            size_t err_size) {
    if (drafter == engine) drafter = NULL;
    if (engine == NULL && drafter == NULL) return 0;
    for (size_t i = 0; i < eo->n_items; i++) {
        static const char generic[] = "-o";
        const char *key = eo->items[i].key, *flag = eo->flags[i] && strcmp(eo->flags[i], GENERIC_FLAG) != 0 ? eo->flags[i] : generic;
        const sy_option_spec *spec = NULL;
        if (engine != NULL) spec = sy_option_schema_find(engine->options, key);
        if (spec == NULL && drafter != NULL) spec = sy_option_schema_find(drafter->options, key);
        if (spec == NULL) {
            const sy_plugin *silent = engine && engine->options == NULL ? engine
                                      : drafter && drafter->options == NULL ? drafter : NULL;
            if (silent != NULL) {
                /* It cannot say what it reads: pass the key on, as hosts before 1.2 did. */
                sy_log(SY_LOG_WARN, "%s %.64s: passed to the plugin unchecked: plugin %s (ABI %u.%u) declares no options",
                       flag, key, silent->entry->name, (unsigned)silent->entry->abi_major,
                       (unsigned)silent->entry->abi_minor);
                continue;
            }
            char asked[160], keys[300], more[300] = "";
            asked_text(engine, drafter, asked, sizeof asked);
            sy_option_schema_keys(engine ? engine->options : drafter->options, keys, sizeof keys);
            if (engine != NULL && drafter != NULL) sy_option_schema_keys(drafter->options, more, sizeof more);
            snprintf(err, err_size, "%s%s%.64s: %s has no option '%.64s' (%s: %s%s%s)", flag,
                     flag == generic ? " " : "", flag == generic ? key : "", asked, key,
                     engine && drafter ? "their options" : "its options", keys[0] ? keys : "none", more[0] ? ", " : "",
                     more);
            return -1;
        }
        char norm[SY_OPTION_NORM_MAX], why[320];
        const char *value = sy_option_value_check(spec, eo->items[i].value, norm, why, sizeof why);
        if (value == NULL) {
            snprintf(err, err_size, "%s%s%.64s: %s", flag, flag == generic ? " " : "", flag == generic ? key : "", why);
            return -1;
        }
        if (value == norm) {
            free((char *)eo->items[i].value);
            eo->items[i].value = sy_strdup(norm);
        }
    }
    return 0;
}
