/* Logging to stderr with levels; the level comes from --log-level / SY_LOG_LEVEL. Thread-safe. */
#ifndef SY_HOST_LOG_H
#define SY_HOST_LOG_H

#include <switchyard/abi.h>

void sy_log_set_level(sy_log_level level);
sy_log_level sy_log_get_level(void);
/* "error", "warn", "info", "debug" -> level; returns 0 on success. */
int sy_log_parse_level(const char *s, sy_log_level *out);
void sy_log(sy_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A line a plugin logged through the host API. */
void sy_log_plugin(sy_log_level level, const char *plugin, const char *message);
/* Every line written to stderr is also handed to sink (NULL: none), after the write; for /logs. */
void sy_log_set_sink(void (*sink)(const char *line));

#endif
