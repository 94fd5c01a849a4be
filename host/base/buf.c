/* See buf.h. */
#include "base/buf.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"


void sy_buf_init(sy_buf *b) {
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
}

void sy_buf_free(sy_buf *b) {
    free(b->data);
    sy_buf_init(b);
}

static void buf_reserve(sy_buf *b, size_t extra) {
    if (extra > SIZE_MAX - b->len - 1) {
        fputs("switchyard: buffer size overflow\n", stderr);
        abort();
    }
    size_t need = b->len + extra + 1;
    if (need <= b->cap) return;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need) cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    b->data = sy_xrealloc(b->data, cap);
    b->cap = cap;
}

void sy_buf_append(sy_buf *b, const void *data, size_t len) {
    buf_reserve(b, len);
    if (len > 0) memcpy(b->data + b->len, data, len);
    b->len += len;
    b->data[b->len] = '\0';
}

void sy_buf_puts(sy_buf *b, const char *s) { sy_buf_append(b, s, strlen(s)); }

void sy_buf_printf(sy_buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char small[256];
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof small) {
        sy_buf_append(b, small, (size_t)n);
        return;
    }
    buf_reserve(b, (size_t)n);
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

bool sy_buf_read(sy_buf *b, FILE *f, size_t max) {
    size_t start = b->len;
    for (;;) {
        size_t left = max - (b->len - start); /* max + 1 - read would overflow for max = SIZE_MAX */
        size_t want = left >= 65536 ? 65536 : left + 1;
        buf_reserve(b, want);
        size_t got = fread(b->data + b->len, 1, want, f);
        b->len += got;
        b->data[b->len] = '\0';
        if (got < want || b->len - start > max) break; /* a short read is the end of the stream or an error */
    }
    return !ferror(f);
}

void sy_buf_consume(sy_buf *b, size_t n) {
    if (n >= b->len) {
        b->len = 0;
        if (b->data) b->data[0] = '\0';
        return;
    }
    memmove(b->data, b->data + n, b->len - n);
    b->len -= n;
    b->data[b->len] = '\0';
}

char *sy_buf_take(sy_buf *b) {
    if (b->data == NULL) buf_reserve(b, 0), b->data[0] = '\0';
    char *s = b->data;
    sy_buf_init(b);
    return s;
}

void sy_buf_clear(sy_buf *b) {
    b->len = 0;
    if (b->data) b->data[0] = '\0';
}
