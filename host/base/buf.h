/* The host's one growable byte buffer, always NUL-terminated after its bytes once anything was added (aborts on
 * out-of-memory, like sy_xmalloc: the host cannot go on without its own buffers). A zeroed sy_buf is an empty
 * one, as sy_buf_init leaves it. */
#ifndef SY_HOST_BASE_BUF_H
#define SY_HOST_BASE_BUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

typedef struct sy_buf {
    char *data;
    size_t len;
    size_t cap;
} sy_buf;

void sy_buf_init(sy_buf *b);
void sy_buf_free(sy_buf *b);
void sy_buf_append(sy_buf *b, const void *data, size_t len);
void sy_buf_puts(sy_buf *b, const char *s);
void sy_buf_printf(sy_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Append what is left of f, up to its end or to max + 1 bytes: b->len grown by more than max says the stream
 * is longer than max (reading stops there). False on a read error (errno says which); what was read stays. */
bool sy_buf_read(sy_buf *b, FILE *f, size_t max);
/* Drop the first n bytes. */
void sy_buf_consume(sy_buf *b, size_t n);
/* Empty the buffer, keeping its memory. */
void sy_buf_clear(sy_buf *b);
/* The bytes as a malloc'd NUL-terminated string (never NULL); the buffer is left empty. */
char *sy_buf_take(sy_buf *b);

#endif
