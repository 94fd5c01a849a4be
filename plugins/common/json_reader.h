/* The JSON reader of plugins/common: strict (RFC 8259; strings must be valid UTF-8 without lone surrogates, as
 * serde_json, which wrote most of the files it reads, requires) and safe on hostile input. Two ways to use it:
 *
 *   - streaming (sy_json_scan): the caller walks the document with the calls below and takes each string in
 *     place (sy_json_string_view points into the document when the string has no escapes). The tokenizer.json
 *     of a 150k-token vocabulary is 11 MB of some 450k strings: streamed, its vocab and merges go straight into
 *     the tokenizer's tables, where a tree parser would spend most of the load allocating a node for each
 *     (docs/benchmarks.md, "tokenizer.json loading": through cJSON the whole load took 2.7-2.9x as long);
 *   - as a tree (sy_json_parse): for small documents read by looking values up, config.json and
 *     generation_config.json, a SafeTensors header or index, tokenizer_config.json, the small sections of a
 *     tokenizer.json. The same walk as the streaming skip builds it, so both accept exactly the same documents.
 *
 * Bounds: every read stays within [p, end) (the document need not be NUL-terminated); nesting deeper than
 * SY_JSON_MAX_DEPTH is refused; neither walk recurses (explicit stacks); a tree takes memory in proportion to
 * its text, in a few large blocks: 72 bytes per value plus the decoded strings, so a caller bounds the size of
 * what it parses with that in mind (as much as cJSON's 64-byte nodes, each a malloc, took). Errors are one line,
 * "invalid JSON at byte N: what", with N counted from `base`; a tree parse gives N and what instead
 * (sy_json_error).
 *
 * The scanning state is a plain value: copy it to scan a recorded span later (see sy_json_skip_span). A parsed
 * tree is immutable and may be read from any number of threads.
 */
#ifndef SY_JSON_READER_H
#define SY_JSON_READER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "strbuf.h"

#define SY_JSON_MAX_DEPTH 256

/* ---- streaming --------------------------------------------------------------------------------------------- */

typedef struct sy_json_scan {
    const char *base; /* start of the whole document: offsets in messages count from here */
    const char *p;
    const char *end;
    char *err;
    size_t err_size;
    bool saw_nul;          /* some string held U+0000 (a reader of C strings would cut it short there) */
    size_t fail_at;        /* where the last sy_json_fail happened, from base */
    const char *fail_what; /* and what it said */
} sy_json_scan;

/* Where a value lies in the document, as sy_json_skip_span recorded it. */
typedef struct sy_json_span {
    const char *p;
    size_t len;
    bool present;
    bool saw_nul; /* a string inside it held U+0000 */
} sy_json_span;

/* Writes "invalid JSON at byte N: what" (what: a static string) and returns false. */
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

/* ---- trees ------------------------------------------------------------------------------------------------- */

typedef enum sy_json_type {
    SY_JSON_NULL = 0,
    SY_JSON_FALSE,
    SY_JSON_TRUE,
    SY_JSON_NUMBER,
    SY_JSON_STRING,
    SY_JSON_ARRAY,
    SY_JSON_OBJECT
} sy_json_type;

/* One value. Elements of an array and members of an object are a list from `child` through `next`, in document
 * order; an object keeps every member, a repeated key too (sy_json_get finds the first). */
typedef struct sy_json sy_json;
struct sy_json {
    sy_json_type type;
    const char *key; /* the member name, inside an object (NUL-terminated); NULL elsewhere */
    size_t key_len;
    const char *str; /* SY_JSON_STRING: the decoded text, NUL-terminated (U+0000 inside: see saw_nul) */
    size_t len;      /* its bytes */
    double num;      /* SY_JSON_NUMBER: as strtod reads it in the C locale */
    sy_json *child;  /* SY_JSON_ARRAY, SY_JSON_OBJECT: the first element or member */
    size_t count;    /* and how many there are */
    sy_json *next;   /* the next element or member of the container */
};

typedef struct sy_json_doc {
    const sy_json *root;
    bool saw_nul; /* some string or key held U+0000: a user of C strings should refuse the document */
    struct sy_json_block *blocks_; /* private: the memory of the tree */
} sy_json_doc;

typedef struct sy_json_error {
    size_t at;        /* byte offset from the start of the text */
    const char *what; /* static text: "unexpected end of input", "out of memory", ... */
} sy_json_error;

/* Parses the value at text[0..len) into *doc. With end NULL the value must be all there is (whitespace around it
 * is allowed; anything else is "trailing data after the document"); otherwise *end is the offset just past the
 * value and what follows is the caller's to judge. False with *error (may be NULL) set on invalid JSON or when
 * memory runs out; *doc is then empty. Free a parsed doc with sy_json_doc_free. */
bool sy_json_parse(sy_json_doc *doc, const char *text, size_t len, size_t *end, sy_json_error *error);
/* Frees the tree; the doc is empty afterwards. An empty (zeroed or failed) doc may be freed too. */
void sy_json_doc_free(sy_json_doc *doc);

/* Lookups; each takes NULL (and values of the wrong type) and gives NULL, false or 0, so that they chain. */
/* The first member of obj named key. */
const sy_json *sy_json_get(const sy_json *obj, const char *key);
/* The index-th element of an array (or member of an object). */
const sy_json *sy_json_at(const sy_json *arr, size_t index);

static inline bool sy_json_is(const sy_json *v, sy_json_type type) {
    return v != NULL && v->type == type;
}
static inline bool sy_json_is_null(const sy_json *v) {
    return sy_json_is(v, SY_JSON_NULL);
}
static inline bool sy_json_is_bool(const sy_json *v) {
    return sy_json_is(v, SY_JSON_TRUE) || sy_json_is(v, SY_JSON_FALSE);
}
static inline bool sy_json_is_true(const sy_json *v) {
    return sy_json_is(v, SY_JSON_TRUE);
}
static inline bool sy_json_is_number(const sy_json *v) {
    return sy_json_is(v, SY_JSON_NUMBER);
}
static inline bool sy_json_is_string(const sy_json *v) {
    return sy_json_is(v, SY_JSON_STRING);
}
static inline bool sy_json_is_array(const sy_json *v) {
    return sy_json_is(v, SY_JSON_ARRAY);
}
static inline bool sy_json_is_object(const sy_json *v) {
    return sy_json_is(v, SY_JSON_OBJECT);
}
/* Elements of an array or members of an object; 0 for anything else. */
static inline size_t sy_json_size(const sy_json *v) {
    return sy_json_is_array(v) || sy_json_is_object(v) ? v->count : 0;
}

/* Reads a whole file (a regular file, or a pipe) of at most max_bytes into *data (malloc'ed: free it) and *len.
 * False with "path: reason" in err. */
bool sy_json_read_file(const char *path, size_t max_bytes, char **data, size_t *len, char *err, size_t err_size);

#endif
