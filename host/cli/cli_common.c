#include "cli/cli_common.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

void sy_cli_error(const char *verb, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "switchyard %s: ", verb);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}
