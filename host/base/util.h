/* Small helpers used across the host. */
#ifndef SY_HOST_UTIL_H
#define SY_HOST_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <switchyard/abi.h>

/* strdup that aborts on out-of-memory (the host cannot continue without its own strings). */
char *sy_strdup(const char *s);
void *sy_xmalloc(size_t n);
void *sy_xcalloc(size_t n, size_t size);
void *sy_xrealloc(void *p, size_t n);

/* "dir/name" (one slash); the result is malloc'd. */
char *sy_path_join(const char *dir, const char *name);

const char *sy_status_name(sy_status st);

/* Strict number parsing: the whole string must be the number, within [min, max]. Return 0 on success. */
int sy_parse_i64(const char *s, int64_t min, int64_t max, int64_t *out);
int sy_parse_u64(const char *s, uint64_t max, uint64_t *out);
int sy_parse_double(const char *s, double min, double max, double *out);

/* Monotonic clock in seconds. */
double sy_now_seconds(void);

/* The folder holding this process's executable (/proc/self/exe), where the host looks for its plugins and helper
 * programs. Writes into buf; returns buf, or NULL when the link cannot be read or the path does not fit. */
const char *sy_exe_dir(char *buf, size_t size);

/* Model names as Ollama compares them: a name without a tag is the same as NAME:latest ("qwen" == "qwen:latest"). */
bool sy_model_name_equal(const char *a, const char *b);

#endif
