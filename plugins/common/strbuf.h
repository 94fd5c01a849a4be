/* Growable buffers for the parsers of plugins/common (the JSON reader, the regex rewriter, the BPE tokenizer).
 *
 * Header-only, static inline: these run once per token while a 150k-entry vocabulary loads, and a call into
 * another object file for each would show in the load time. Every function returns false when memory runs out
 * or a size would overflow; the buffer is then left as it was.
 */
#ifndef SY_STRBUF_H
#define SY_STRBUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Grows *p (elements of `size` bytes, capacity *cap) to hold at least `need` elements. */
static inline bool grow_array(void **p, size_t *cap, size_t need, size_t size) {
    if (need <= *cap)
        return true;
    size_t n = *cap ? *cap : 16;
    while (n < need) {
        if (n > SIZE_MAX / 2)
            return false;
        n *= 2;
    }
    if (n > SIZE_MAX / size)
        return false;
    void *q = realloc(*p, n * size);
    if (q == NULL)
        return false;
    *p = q;
    *cap = n;
    return true;
}

typedef struct strbuf {
    char *data;
    size_t len;
    size_t cap;
} strbuf;

static inline bool sb_reserve(strbuf *b, size_t extra) {
    if (extra > SIZE_MAX - b->len - 1)
        return false;
    return grow_array((void **)&b->data, &b->cap, b->len + extra + 1, 1);
}

static inline bool sb_append(strbuf *b, const void *s, size_t n) {
    if (!sb_reserve(b, n))
        return false;
    if (n > 0)
        memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
    return true;
}

static inline bool sb_append_str(strbuf *b, const char *s) {
    return sb_append(b, s, strlen(s));
}

static inline void sb_free(strbuf *b) {
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}


#endif
