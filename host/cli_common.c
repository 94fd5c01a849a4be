#include "cli_common.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int sy_cli_load_plugins(const char *explicit_dir, sy_plugin_registry *reg, char *dir_out, size_t dir_size) {
    const char *dir = explicit_dir;
    if (dir == NULL) dir = getenv("SY_PLUGIN_DIR");
    if (dir == NULL) dir = sy_default_plugin_dir(dir_out, dir_size);
    if (dir == NULL) {
        fprintf(stderr, "switchyard: no plugin directory found beside the executable; pass --plugin-dir DIR\n");
        return -1;
    }
    if (dir != dir_out) snprintf(dir_out, dir_size, "%s", dir);
    char err[512];
    if (sy_plugin_registry_load_dir(reg, dir_out, err, sizeof err) != 0) {
        fprintf(stderr, "switchyard: %s\n", err);
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
