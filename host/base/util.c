#include "base/util.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void out_of_memory(void) {
    fputs("switchyard: out of memory\n", stderr);
    abort();
}

void *sy_xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (p == NULL) out_of_memory();
    return p;
}

void *sy_xcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (p == NULL) out_of_memory();
    return p;
}

void *sy_xrealloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (q == NULL) out_of_memory();
    return q;
}

char *sy_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = sy_xmalloc(n);
    memcpy(d, s, n);
    return d;
}

char *sy_path_join(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    while (a > 1 && dir[a - 1] == '/') a--;
    char *p = sy_xmalloc(a + b + 2);
    memcpy(p, dir, a);
    p[a] = '/';
    memcpy(p + a + 1, name, b + 1);
    return p;
}

const char *sy_status_name(sy_status st) {
    switch (st) {
    case SY_OK: return "ok";
    case SY_ERR_INVALID_ARGUMENT: return "invalid argument";
    case SY_ERR_UNSUPPORTED: return "unsupported";
    case SY_ERR_IO: return "I/O error";
    case SY_ERR_FORMAT: return "malformed input";
    case SY_ERR_OUT_OF_MEMORY: return "out of memory";
    case SY_ERR_CONTEXT_FULL: return "context full";
    case SY_ERR_CANCELLED: return "cancelled";
    case SY_ERR_NO_DEVICE: return "no device";
    case SY_ERR_BUFFER_TOO_SMALL: return "buffer too small";
    case SY_ERR_INTERNAL: return "internal error";
    }
    return "unknown status";
}

int sy_parse_i64(const char *s, int64_t min, int64_t max, int64_t *out) {
    if (s == NULL || *s == '\0') return -1;
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < min || v > max) return -1;
    *out = v;
    return 0;
}

int sy_parse_u64(const char *s, uint64_t max, uint64_t *out) {
    if (s == NULL || *s == '\0' || *s == '-' || *s == '+') return -1;
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v > max) return -1;
    *out = v;
    return 0;
}

int sy_parse_double(const char *s, double min, double max, double *out) {
    if (s == NULL || *s == '\0') return -1;
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (errno != 0 || end == s || *end != '\0' || !isfinite(v) || v < min || v > max) return -1;
    *out = v;
    return 0;
}

double sy_now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

const char *sy_exe_dir(char *buf, size_t size) {
    if (size < 2) return NULL;
    ssize_t n = readlink("/proc/self/exe", buf, size - 1);
    if (n <= 0 || (size_t)n >= size - 1) return NULL; /* a full buffer may be a truncated path */
    buf[n] = '\0';
    char *slash = strrchr(buf, '/');
    if (slash == NULL) return NULL;
    if (slash == buf) slash++; /* an executable in / */
    *slash = '\0';
    return buf;
}

bool sy_model_name_equal(const char *a, const char *b) {
    if (strcmp(a, b) == 0) return true;
    size_t la = strlen(a), lb = strlen(b);
    static const char tag[] = ":latest";
    const size_t lt = sizeof tag - 1;
    if (la == lb + lt) return strncmp(a, b, lb) == 0 && strcmp(a + lb, tag) == 0;
    if (lb == la + lt) return strncmp(b, a, la) == 0 && strcmp(b + la, tag) == 0;
    return false;
}
