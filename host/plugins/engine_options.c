#include "plugins/engine_options.h"

#include <stdlib.h>
#include <string.h>

#include "base/util.h"

typedef struct engine_flag {
    const char *name; /* command-line spelling */
    const char *key;  /* option key the plugin sees */
    int has_arg;
    const char *help;
} engine_flag;

#define ENGINE_OPTION_BASE 2000
#define ENGINE_OPTION_GENERIC 1999

static const engine_flag flags[] = {
    {"threads", "threads", required_argument, "compute threads (default: all cores)"},
    {"ctx-size", "ctx_size", required_argument, "context length in tokens (default: the model's)"},
    {"kv-cache-dir", "kv_cache_dir", required_argument, "keep KV on disk in these folders (comma list)"},
    {"kv-max-tokens", "kv_max_tokens", required_argument, "most KV tokens the disk cache holds"},
    {"kv-buffer-mb", "kv_buffer_mb", required_argument, "resident tile buffer of the disk KV cache in MB"},
    {"keep-kv-cache", "keep_kv_cache", no_argument, "keep KV cache files after unload"},
    {"backend", "backend", required_argument, "engine backend, e.g. reference"},
};
#define N_FLAGS (sizeof flags / sizeof *flags)

void sy_engine_options_init(sy_engine_options *eo) { memset(eo, 0, sizeof *eo); }

void sy_engine_options_free(sy_engine_options *eo) {
    for (size_t i = 0; i < eo->n_items; i++) {
        free((char *)eo->items[i].key);
        free((char *)eo->items[i].value);
    }
    free(eo->items);
    memset(eo, 0, sizeof *eo);
}

void sy_engine_options_set(sy_engine_options *eo, const char *key, const char *value) {
    for (size_t i = 0; i < eo->n_items; i++) {
        if (strcmp(eo->items[i].key, key) == 0) {
            free((char *)eo->items[i].value);
            eo->items[i].value = sy_strdup(value);
            return;
        }
    }
    eo->items = sy_xrealloc(eo->items, (eo->n_items + 1) * sizeof *eo->items);
    eo->items[eo->n_items].key = sy_strdup(key);
    eo->items[eo->n_items].value = sy_strdup(value);
    eo->n_items++;
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
            snprintf(err, err_size, "-o/--option wants KEY=VALUE, got '%s'", arg ? arg : "");
            return -1;
        }
        char *key = sy_strdup(arg);
        key[eq - arg] = '\0';
        sy_engine_options_set(eo, key, eq + 1);
        free(key);
        return 1;
    }
    if (code < ENGINE_OPTION_BASE || code >= ENGINE_OPTION_BASE + (int)N_FLAGS) return 0;
    const engine_flag *f = &flags[code - ENGINE_OPTION_BASE];
    sy_engine_options_set(eo, f->key, f->has_arg == no_argument ? "1" : arg);
    return 1;
}

void sy_engine_options_usage(FILE *out) {
    for (size_t i = 0; i < N_FLAGS; i++) {
        char spelled[64];
        snprintf(spelled, sizeof spelled, "--%s%s", flags[i].name, flags[i].has_arg == no_argument ? "" : " V");
        fprintf(out, "  %-21s %s\n", spelled, flags[i].help);
    }
    fprintf(out, "  %-21s %s\n", "-o, --option K=V", "any other plugin option");
}
