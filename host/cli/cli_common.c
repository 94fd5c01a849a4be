#include "cli/cli_common.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/speculative.h"

/* Resolves the plugin directory into dir_out; -1 (with a message) when there is none. */
static int resolve_plugin_dir(const char *explicit_dir, char *dir_out, size_t dir_size) {
    const char *dir = explicit_dir;
    if (dir == NULL) dir = getenv("SY_PLUGIN_DIR");
    if (dir == NULL) dir = sy_default_plugin_dir(dir_out, dir_size);
    if (dir == NULL) {
        fprintf(stderr, "switchyard: no plugin directory found beside the executable; pass --plugin-dir DIR\n");
        return -1;
    }
    if (dir != dir_out) snprintf(dir_out, dir_size, "%s", dir);
    return 0;
}

int sy_cli_load_plugin_named(const char *explicit_dir, const char *only, sy_plugin_registry *reg, char *dir_out,
                             size_t dir_size) {
    if (sy_cli_open_plugins_lazy(explicit_dir, reg, dir_out, dir_size) != 0) return -1;
    if (only != NULL) sy_plugin_registry_need(reg, only); /* now, so that a refusal shows before any work */
    return 0;
}

/* Resolves the directory, then opens it with `opener` (load it all, or lazily). */
static int open_plugin_dir(int (*opener)(sy_plugin_registry *, const char *, char *, size_t), const char *explicit_dir,
                           sy_plugin_registry *reg, char *dir_out, size_t dir_size) {
    if (resolve_plugin_dir(explicit_dir, dir_out, dir_size) != 0) return -1;
    char err[512];
    if (opener(reg, dir_out, err, sizeof err) != 0) {
        fprintf(stderr, "switchyard: %s\n", err);
        return -1;
    }
    return 0;
}

int sy_cli_load_plugins(const char *explicit_dir, sy_plugin_registry *reg, char *dir_out, size_t dir_size) {
    return open_plugin_dir(sy_plugin_registry_load_dir, explicit_dir, reg, dir_out, dir_size);
}

int sy_cli_open_plugins_lazy(const char *explicit_dir, sy_plugin_registry *reg, char *dir_out, size_t dir_size) {
    return open_plugin_dir(sy_plugin_registry_open_lazy, explicit_dir, reg, dir_out, dir_size);
}

int sy_cli_engine_option(const char *verb, sy_engine_options *eo, int code, const char *arg, void (*usage)(FILE *)) {
    char err[256];
    int handled = sy_engine_options_handle(eo, code, arg, err, sizeof err);
    if (handled > 0) return 0;
    if (handled < 0) {
        sy_cli_error(verb, "%s", err);
        return 1;
    }
    usage(stderr);
    return 2;
}

/* The engine sy_loaded_model_open would pick for path, or NULL (then it says why). */
static const sy_plugin *choose_engine(const sy_plugin_registry *reg, const char *plugin, const char *path) {
    if (plugin != NULL) return sy_plugin_registry_need(reg, plugin);
    size_t i = 0;
    do {
        for (; i < reg->n_plugins; i++) {
            const sy_plugin *p = &reg->plugins[i];
            if (p->engine != NULL && p->engine->probe(path) == SY_OK) return p;
        }
    } while (sy_plugin_registry_load_next(reg));
    return NULL;
}

int sy_cli_open_model(const char *verb, const sy_plugin_registry *reg, const char *plugin, const char *path,
                      const char *draft_spec, sy_engine_options *eo, sy_loaded_model *lm) {
    char err[1024];
    const sy_plugin *p = access(path, F_OK) == 0 ? choose_engine(reg, plugin, path) : NULL;
    if (p != NULL && eo->n_items > 0) {
        const sy_plugin *d = NULL;
        if (draft_spec != NULL) {
            /* "model:PATH" names a file here; any model: spec finds the same drafter */
            d = sy_speculator_plugin_for(reg, strncmp(draft_spec, "model:", 6) == 0 ? "model:draft" : draft_spec);
        }
        if (sy_engine_options_check(eo, p, d, err, sizeof err) != 0) {
            sy_cli_error(verb, "%s", err);
            return -1;
        }
    }
    if (sy_loaded_model_open(reg, p != NULL ? p->entry->name : plugin, path, eo->items, eo->n_items, lm, err,
                             sizeof err) != 0) {
        sy_cli_error(verb, "%s", err);
        return -1;
    }
    return 0;
}

void sy_cli_error(const char *verb, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "switchyard %s: ", verb);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

const char *sy_cli_plugin_runtime(const sy_plugin *p, char *out, size_t size) {
    if (p == NULL || p->runtime == NULL || out == NULL || size == 0) return NULL;
    const char *line = p->runtime->describe();
    if (line == NULL || line[0] == '\0') return NULL;
    size_t n = 0;
    for (; line[n] != '\0' && n + 1 < size; n++)
        out[n] = (unsigned char)line[n] < 0x20 || line[n] == 0x7f ? ' ' : line[n];
    out[n] = '\0';
    return out;
}
