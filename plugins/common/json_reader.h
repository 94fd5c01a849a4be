/* A strict JSON reader for hostile input (RFC 8259; strings must be valid UTF-8 without lone surrogates, as
 * serde_json, which wrote most of the files it reads, requires).
 *
 * Why a reader of our own: the tokenizer.json of a 150k-token vocabulary is 11 MB of some 450k strings, and a
 * tree parser spends most of its time allocating a node for each of them. This one streams: the caller walks
 * the document with the calls below and takes each string in place (sy_json_string_view points into the
 * document when the string has no escapes), so the vocabulary and merges go straight into the tokenizer's tables.
 *
 * Bounds: every read stays within [p, end) (the document need not be NUL-terminated); nesting deeper than
 * SY_JSON_MAX_DEPTH is refused; skipping a value uses an explicit stack, never recursion. Errors are one line,
 * "invalid JSON at byte N: what", with N counted from `base`.
 *
 * The scanning state is a plain value: copy it to scan a recorded span later (see sy_json_skip_span).
 */
#ifndef SY_JSON_READER_H
#define SY_JSON_READER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "strbuf.h"

#define SY_JSON_MAX_DEPTH 256

typedef struct sy_json_scan {
    const char *base; /* start of the whole document: offsets in messages count from here */
    const char *p;
    const char *end;
    char *err;
    size_t err_size;
    bool saw_nul; /* some string held U+0000 (a reader of C strings would cut it short there) */
} sy_json_scan;

/* Where a value lies in the document, as sy_json_skip_span recorded it. */
typedef struct sy_json_span {
    const char *p;
    size_t len;
    bool present;
    bool saw_nul; /* a string inside it held U+0000 */
} sy_json_span;

/* Writes "invalid JSON at byte N: what" and returns false. */
bool sy_json_fail(sy_json_scan *j, const char *what);

/* The small steps are inline: they run several times for each of the ~450k entries of a large vocabulary. */
static inline bool sy_json_is_space(char c) {
    /* one compare rejects every byte above ' ', which is nearly every non-space byte */
    return (unsigned char)c <= ' ' && (c == ' ' || c == '\n' || c == '\r' || c == '\t');
}

static inline bool sy_json_is_digit(char c) {
    return c >= '0' && c <= '9';
}

/* Skips whitespace. */
static inline void sy_json_ws(sy_json_scan *j) {
    const char *p = j->p, *end = j->end;
    while (p < end && sy_json_is_space(*p))
        p++;
    j->p = p;
}

/* Whether the next byte (without skipping whitespace) is c. */
static inline bool sy_json_peek(const sy_json_scan *j, char c) {
    return j->p < j->end && *j->p == c;
}

/* Skips whitespace and the byte c; fails with `what` when c is not next. */
static inline bool sy_json_expect(sy_json_scan *j, char c, const char *what) {
    sy_json_ws(j);
    if (!sy_json_peek(j, c))
        return sy_json_fail(j, what);
    j->p++;
    return true;
}

/* A string at j->p; its decoded UTF-8 is appended to out (NULL: validate only). */
bool sy_json_string(sy_json_scan *j, strbuf *out);
/* A string at j->p without copying when it has no escapes: *s points into the document then, else into buf
 * (which holds the decoded text). Valid until the next use of buf. */
bool sy_json_string_view(sy_json_scan *j, strbuf *buf, const char **s, size_t *n);
/* A number at j->p. *uint_value is set when it is a plain non-negative integer (no sign, fraction or
 * exponent) that fits below 2^53; otherwise *is_uint is false. */
bool sy_json_number(sy_json_scan *j, bool *is_uint, uint64_t *uint_value);
/* Skips one value (after whitespace), validating it, without recursion. */
bool sy_json_skip(sy_json_scan *j);
/* Skips one value and records its extent in *s. */
bool sy_json_skip_span(sy_json_scan *j, sy_json_span *s);
/* Iterates the members of an object: call with *first true; returns false at the closing brace (or on error,
 * with *failed set), true with the key in (*key, *key_len) (see sy_json_string_view) and j->p at the value. */
bool sy_json_next_member(sy_json_scan *j, bool *first, strbuf *buf, const char **key, size_t *key_len,
                         bool *failed);

/* Reads a whole file (a regular file, or a pipe) of at most max_bytes into *data (malloc'ed: free it) and *len.
 * False with "path: reason" in err. */
bool sy_json_read_file(const char *path, size_t max_bytes, char **data, size_t *len, char *err, size_t err_size);

#endif
