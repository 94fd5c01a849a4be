#include "base/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static atomic_int current_level = SY_LOG_WARN;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static const char *const level_names[] = {"error", "warn", "info", "debug"};

void sy_log_set_level(sy_log_level level) { atomic_store(&current_level, (int)level); }
sy_log_level sy_log_get_level(void) { return (sy_log_level)atomic_load(&current_level); }

int sy_log_parse_level(const char *s, sy_log_level *out) {
    for (int i = 0; i < 4; i++) {
        if (strcmp(s, level_names[i]) == 0) {
            *out = (sy_log_level)i;
            return 0;
        }
    }
    return -1;
}

static void (*_Atomic log_sink)(const char *line);

void sy_log_set_sink(void (*sink)(const char *line)) { atomic_store(&log_sink, sink); }

static void emit(sy_log_level level, const char *who, const char *text) {
    if ((int)level > atomic_load(&current_level) || (int)level < 0 || (int)level > 3) return;
    char line[2400];
    if (who != NULL)
        snprintf(line, sizeof line, "switchyard: %s: [%s] %s\n", level_names[level], who, text);
    else
        snprintf(line, sizeof line, "switchyard: %s: %s\n", level_names[level], text);
    pthread_mutex_lock(&log_lock);
    fputs(line, stderr);
    pthread_mutex_unlock(&log_lock);
    void (*sink)(const char *) = atomic_load(&log_sink);
    if (sink != NULL) sink(line);
}

void sy_log(sy_log_level level, const char *fmt, ...) {
    if ((int)level > atomic_load(&current_level)) return;
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    emit(level, NULL, buf);
}

void sy_log_plugin(sy_log_level level, const char *plugin, const char *message) {
    emit(level, plugin ? plugin : "plugin", message ? message : "");
}

__attribute__((constructor)) static void log_level_from_environment(void) {
    const char *env = getenv("SY_LOG_LEVEL");
    sy_log_level level;
    if (env != NULL && sy_log_parse_level(env, &level) == 0) sy_log_set_level(level);
}
