/* The strict JSON reader; see json_reader.h. */
#include "json_reader.h"

#include <errno.h>
#include <locale.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errmsg.h"
#include "utf8_util.h"

bool sy_json_fail(sy_json_scan *j, const char *what) {
    j->fail_at = (size_t)(j->p - j->base);
    j->fail_what = what;
    sy_errmsg(j->err, j->err_size, "invalid JSON at byte %zu: %s", j->fail_at, what);
    return false;
}

static int hex_digit(char c) {
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static bool jhex4(sy_json_scan *j, uint32_t *v) {
    if (j->end - j->p < 4)
        return sy_json_fail(j, "truncated \\u escape");
    uint32_t x = 0;
    for (int i = 0; i < 4; i++) {
        int d = hex_digit(j->p[i]);
        if (d < 0)
            return sy_json_fail(j, "bad hex digit in a \\u escape");
        x = (x << 4) | (uint32_t)d;
    }
    j->p += 4;
    *v = x;
    return true;
}

bool sy_json_string(sy_json_scan *j, strbuf *out) {
    if (!sy_json_peek(j, '"'))
        return sy_json_fail(j, "expected a string");
    j->p++;
    for (;;) {
        const char *run = j->p;
        while (j->p < j->end) {
            unsigned char c = (unsigned char)*j->p;
            if (c == '"' || c == '\\' || c < 0x20 || c >= 0x80)
                break;
            j->p++;
        }
        if (out != NULL && j->p > run && !sb_append(out, run, (size_t)(j->p - run)))
            return sy_json_fail(j, "out of memory");
        if (j->p >= j->end)
            return sy_json_fail(j, "unterminated string");
        unsigned char c = (unsigned char)*j->p;
        if (c == '"') {
            j->p++;
            return true;
        }
        if (c < 0x20)
            return sy_json_fail(j, "control character inside a string");
        if (c >= 0x80) {
            uint32_t cp;
            size_t k = utf8_seq_len((const unsigned char *)j->p, (size_t)(j->end - j->p), &cp);
            if (k == 0)
                return sy_json_fail(j, "invalid UTF-8 inside a string");
            if (out != NULL && !sb_append(out, j->p, k))
                return sy_json_fail(j, "out of memory");
            j->p += k;
            continue;
        }
        /* an escape */
        if (j->end - j->p < 2)
            return sy_json_fail(j, "unterminated escape");
        char esc = j->p[1];
        char ch;
        switch (esc) {
        case '"': ch = '"'; break;
        case '\\': ch = '\\'; break;
        case '/': ch = '/'; break;
        case 'b': ch = '\b'; break;
        case 'f': ch = '\f'; break;
        case 'n': ch = '\n'; break;
        case 'r': ch = '\r'; break;
        case 't': ch = '\t'; break;
        case 'u': {
            j->p += 2;
            uint32_t cp;
            if (!jhex4(j, &cp))
                return false;
            if (cp >= 0xDC00 && cp <= 0xDFFF)
                return sy_json_fail(j, "lone low surrogate in a \\u escape");
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                uint32_t lo;
                if (j->end - j->p < 2 || j->p[0] != '\\' || j->p[1] != 'u')
                    return sy_json_fail(j, "lone high surrogate in a \\u escape");
                j->p += 2;
                if (!jhex4(j, &lo))
                    return false;
                if (lo < 0xDC00 || lo > 0xDFFF)
                    return sy_json_fail(j, "high surrogate not followed by a low one");
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            if (cp == 0)
                j->saw_nul = true;
            char u8[4];
            size_t k = utf8_encode(cp, u8);
            if (out != NULL && !sb_append(out, u8, k))
                return sy_json_fail(j, "out of memory");
            continue;
        }
        default:
            return sy_json_fail(j, "unknown escape in a string");
        }
        if (out != NULL && !sb_append(out, &ch, 1))
            return sy_json_fail(j, "out of memory");
        j->p += 2;
    }
}

/* Bytes that end a plain run inside a string: the quote, the backslash, controls, and non-ASCII (checked as
 * UTF-8). One table load per byte instead of four compares. */
static const unsigned char json_string_stop[256] = {
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
};

bool sy_json_string_view(sy_json_scan *j, strbuf *buf, const char **s, size_t *n) {
    if (!sy_json_peek(j, '"'))
        return sy_json_fail(j, "expected a string");
    const char *start = j->p + 1;
    const char *p = start;
    const char *end = j->end;
    for (;;) {
        while (p < end && !json_string_stop[(unsigned char)*p])
            p++;
        if (p >= end || (unsigned char)*p < 0x20 || *p == '\\')
            break; /* errors and escapes: the decoding reader handles (and reports) them */
        if (*p == '"') {
            *s = start;
            *n = (size_t)(p - start);
            j->p = p + 1;
            return true;
        }
        /* two-byte characters (the byte-level alphabet's "Ġ", "Ċ", ...) are most of the non-ASCII */
        unsigned char c0 = (unsigned char)p[0];
        if (c0 >= 0xC2 && c0 <= 0xDF && end - p >= 2 && ((unsigned char)p[1] & 0xC0) == 0x80) {
            p += 2;
            continue;
        }
        uint32_t cp;
        size_t k = utf8_seq_len((const unsigned char *)p, (size_t)(end - p), &cp);
        if (k == 0)
            break;
        p += k;
    }
    buf->len = 0;
    if (!sy_json_string(j, buf))
        return false;
    *s = buf->data ? buf->data : "";
    *n = buf->len;
    return true;
}

bool sy_json_number(sy_json_scan *j, bool *is_uint, uint64_t *uint_value) {
    bool plain = true;
    uint64_t v = 0;
    if (sy_json_peek(j, '-')) {
        plain = false;
        j->p++;
    }
    if (sy_json_peek(j, '0')) {
        j->p++;
    } else if (j->p < j->end && *j->p >= '1' && *j->p <= '9') {
        while (j->p < j->end && sy_json_is_digit(*j->p)) {
            if (v > ((uint64_t)1 << 53))
                plain = false;
            else
                v = v * 10 + (uint64_t)(*j->p - '0');
            j->p++;
        }
    } else {
        return sy_json_fail(j, "invalid number");
    }
    if (sy_json_peek(j, '.')) {
        plain = false;
        j->p++;
        if (j->p >= j->end || !sy_json_is_digit(*j->p))
            return sy_json_fail(j, "invalid number: no digit after '.'");
        while (j->p < j->end && sy_json_is_digit(*j->p))
            j->p++;
    }
    if (j->p < j->end && (*j->p == 'e' || *j->p == 'E')) {
        plain = false;
        j->p++;
        if (j->p < j->end && (*j->p == '+' || *j->p == '-'))
            j->p++;
        if (j->p >= j->end || !sy_json_is_digit(*j->p))
            return sy_json_fail(j, "invalid number: no digit in the exponent");
        while (j->p < j->end && sy_json_is_digit(*j->p))
            j->p++;
    }
    if (j->p < j->end && (sy_json_is_digit(*j->p) || *j->p == '.' || *j->p == 'e' || *j->p == 'E'))
        return sy_json_fail(j, "invalid number");
    *is_uint = plain && v <= ((uint64_t)1 << 53);
    *uint_value = v;
    return true;
}

/* true, false or null at j->p: 0, 1 or 2, or -1 after an error. */
static int jliteral(sy_json_scan *j) {
    static const char *const words[] = {"true", "false", "null"};
    for (int i = 0; i < 3; i++) {
        size_t n = strlen(words[i]);
        if ((size_t)(j->end - j->p) >= n && memcmp(j->p, words[i], n) == 0) {
            j->p += n;
            if (j->p < j->end && ((*j->p >= 'a' && *j->p <= 'z') || (*j->p >= 'A' && *j->p <= 'Z'))) {
                sy_json_fail(j, "unexpected characters after a literal");
                return -1;
            }
            return i;
        }
    }
    sy_json_fail(j, "unexpected character");
    return -1;
}

/* ---- trees ---------------------------------------------------------------------------------------------------
 * Nodes and strings live in blocks owned by the document, allocated as the tree grows (the first small, then
 * doubling up to 1 MiB), so that a document costs a few allocations however many values it holds. */

struct sy_json_block {
    struct sy_json_block *next;
    size_t used;
    size_t cap;
    uint64_t pad_; /* keeps data 16-byte aligned, as malloc's own memory */
    unsigned char data[];
};

#define BLOCK_FIRST 4096
#define BLOCK_MAX ((size_t)1 << 20)

static void *arena_alloc(sy_json_doc *d, size_t n) {
    if (n > SIZE_MAX - 7)
        return NULL;
    n = (n + 7) & ~(size_t)7; /* nodes need 8-byte alignment, strings none */
    struct sy_json_block *b = d->blocks_;
    if (b == NULL || b->cap - b->used < n) {
        size_t cap = b == NULL ? BLOCK_FIRST : b->cap < BLOCK_MAX ? b->cap * 2 : BLOCK_MAX;
        if (cap < n)
            cap = n;
        if (cap > SIZE_MAX - sizeof *b)
            return NULL;
        struct sy_json_block *nb = malloc(sizeof *nb + cap);
        if (nb == NULL)
            return NULL;
        nb->next = b;
        nb->used = 0;
        nb->cap = cap;
        d->blocks_ = b = nb;
    }
    void *p = b->data + b->used;
    b->used += n;
    return p;
}

/* The state of building a tree while walking the document. */
typedef struct tree {
    sy_json_doc *doc;
    strbuf text;                      /* the string being decoded */
    sy_json *open[SY_JSON_MAX_DEPTH]; /* the containers being filled, outermost first */
    sy_json *last[SY_JSON_MAX_DEPTH]; /* the last child of each so far */
    const char *key;                  /* the member name for the next value inside an object */
    size_t key_len;
} tree;

/* A new node at depth (0: the root), appended to its container. */
static sy_json *tree_add(tree *t, size_t depth) {
    sy_json *v = arena_alloc(t->doc, sizeof *v);
    if (v == NULL)
        return NULL;
    memset(v, 0, sizeof *v);
    if (depth == 0) {
        t->doc->root = v;
        return v;
    }
    sy_json *parent = t->open[depth - 1];
    if (parent->type == SY_JSON_OBJECT) {
        v->key = t->key;
        v->key_len = t->key_len;
    }
    if (t->last[depth - 1] == NULL)
        parent->child = v;
    else
        t->last[depth - 1]->next = v;
    t->last[depth - 1] = v;
    parent->count++;
    return v;
}

/* A string at j->p into the document's blocks (NUL-terminated); without a tree, only validated. */
static bool tree_string(sy_json_scan *j, tree *t, const char **s, size_t *n) {
    if (t == NULL)
        return sy_json_string(j, NULL);
    t->text.len = 0;
    if (!sy_json_string(j, &t->text))
        return false;
    char *copy = arena_alloc(t->doc, t->text.len + 1);
    if (copy == NULL)
        return sy_json_fail(j, "out of memory");
    if (t->text.len > 0)
        memcpy(copy, t->text.data, t->text.len);
    copy[t->text.len] = '\0';
    *s = copy;
    *n = t->text.len;
    return true;
}

/* An object key at j->p and the colon after it. */
static bool member_key(sy_json_scan *j, tree *t) {
    const char *key = NULL;
    size_t key_len = 0;
    if (!tree_string(j, t, &key, &key_len) || !sy_json_expect(j, ':', "expected ':' after an object key"))
        return false;
    if (t != NULL) {
        t->key = key;
        t->key_len = key_len;
    }
    return true;
}

static locale_t c_numeric_locale;
static pthread_once_t c_numeric_once = PTHREAD_ONCE_INIT;

static void make_c_numeric_locale(void) {
    c_numeric_locale = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
}

/* The value of a number the scanner accepted, as strtod reads it in the C locale (whatever the process's locale:
 * JSON's decimal point is '.'). Overflow gives +-HUGE_VAL, as for any reader built on strtod. */
static double number_value(const char *s, size_t n) {
    char small[64];
    char *buf = n < sizeof small ? small : malloc(n + 1);
    if (buf == NULL)
        return NAN; /* out of memory: a value no caller accepts as a number */
    memcpy(buf, s, n);
    buf[n] = '\0';
    pthread_once(&c_numeric_once, make_c_numeric_locale);
    double v = c_numeric_locale != (locale_t)0 ? strtod_l(buf, NULL, c_numeric_locale) : strtod(buf, NULL);
    if (buf != small)
        free(buf);
    return v;
}

/* Walks one value (after whitespace), validating it, without recursion; builds its tree when t is not NULL.
 * Skipping and building share this walk so that they accept the same documents and fail at the same byte. */
static bool walk(sy_json_scan *j, tree *t) {
    char stack[SY_JSON_MAX_DEPTH];
    size_t depth = 0;
    for (;;) {
        /* a value is expected here */
        sy_json_ws(j);
        if (j->p >= j->end)
            return sy_json_fail(j, "unexpected end of input");
        char c = *j->p;
        sy_json *v = NULL;
        if (t != NULL && (v = tree_add(t, depth)) == NULL)
            return sy_json_fail(j, "out of memory");
        if (c == '{' || c == '[') {
            if (depth >= SY_JSON_MAX_DEPTH)
                return sy_json_fail(j, "nesting deeper than 256 levels");
            if (v != NULL) {
                v->type = c == '{' ? SY_JSON_OBJECT : SY_JSON_ARRAY;
                t->open[depth] = v;
                t->last[depth] = NULL;
            }
            stack[depth++] = c;
            j->p++;
            sy_json_ws(j);
            if (sy_json_peek(j, c == '{' ? '}' : ']')) { /* empty: it is a complete value */
                j->p++;
                depth--;
            } else if (c == '{') {
                if (!member_key(j, t))
                    return false;
                continue;
            } else {
                continue;
            }
        } else if (c == '"') {
            const char *s = NULL;
            size_t n = 0;
            if (!tree_string(j, t, &s, &n))
                return false;
            if (v != NULL) {
                v->type = SY_JSON_STRING;
                v->str = s;
                v->len = n;
            }
        } else if (c == '-' || sy_json_is_digit(c)) {
            const char *start = j->p;
            bool u;
            uint64_t uv;
            if (!sy_json_number(j, &u, &uv))
                return false;
            if (v != NULL) {
                v->type = SY_JSON_NUMBER;
                v->num = number_value(start, (size_t)(j->p - start));
            }
        } else {
            int lit = jliteral(j);
            if (lit < 0)
                return false;
            if (v != NULL)
                v->type = lit == 0 ? SY_JSON_TRUE : lit == 1 ? SY_JSON_FALSE : SY_JSON_NULL;
        }
        /* after a value: close containers or move to the next element */
        for (;;) {
            if (depth == 0)
                return true;
            sy_json_ws(j);
            if (j->p >= j->end)
                return sy_json_fail(j, "unexpected end of input");
            char top = stack[depth - 1];
            if (*j->p == ',') {
                j->p++;
                if (top == '{') {
                    sy_json_ws(j);
                    if (!member_key(j, t))
                        return false;
                }
                break;
            }
            if (*j->p == (top == '{' ? '}' : ']')) {
                j->p++;
                depth--;
                continue;
            }
            return sy_json_fail(j, top == '{' ? "expected ',' or '}'" : "expected ',' or ']'");
        }
    }
}

bool sy_json_skip(sy_json_scan *j) {
    return walk(j, NULL);
}

bool sy_json_parse(sy_json_doc *doc, const char *text, size_t len, size_t *end, sy_json_error *error) {
    memset(doc, 0, sizeof *doc);
    sy_json_scan j = {.base = text, .p = text, .end = text + len};
    tree *t = malloc(sizeof *t); /* 4 KiB of container stacks: not on the caller's stack */
    bool ok = text != NULL || len == 0;
    if (t == NULL || !ok) {
        ok = false;
        j.fail_at = 0;
        j.fail_what = t == NULL ? "out of memory" : "no text";
    } else {
        memset(t, 0, sizeof *t);
        t->doc = doc;
        ok = walk(&j, t);
        if (ok && end != NULL) {
            *end = (size_t)(j.p - text);
        } else if (ok) {
            sy_json_ws(&j);
            if (j.p != j.end)
                ok = sy_json_fail(&j, "trailing data after the document");
        }
        sb_free(&t->text);
    }
    free(t);
    if (!ok) {
        if (error != NULL)
            *error = (sy_json_error){.at = j.fail_at, .what = j.fail_what};
        sy_json_doc_free(doc);
        return false;
    }
    doc->saw_nul = j.saw_nul;
    return true;
}

void sy_json_doc_free(sy_json_doc *doc) {
    if (doc == NULL)
        return;
    for (struct sy_json_block *b = doc->blocks_, *next; b != NULL; b = next) {
        next = b->next;
        free(b);
    }
    memset(doc, 0, sizeof *doc);
}

const sy_json *sy_json_get(const sy_json *obj, const char *key) {
    if (!sy_json_is_object(obj))
        return NULL;
    size_t n = strlen(key);
    for (const sy_json *m = obj->child; m != NULL; m = m->next)
        if (m->key_len == n && memcmp(m->key, key, n) == 0)
            return m;
    return NULL;
}

const sy_json *sy_json_at(const sy_json *arr, size_t index) {
    if (!sy_json_is_array(arr) && !sy_json_is_object(arr))
        return NULL;
    const sy_json *v = arr->child;
    while (v != NULL && index-- > 0)
        v = v->next;
    return v;
}

bool sy_json_skip_span(sy_json_scan *j, sy_json_span *s) {
    sy_json_ws(j);
    bool nul_before = j->saw_nul;
    j->saw_nul = false;
    const char *start = j->p;
    if (!sy_json_skip(j))
        return false;
    s->p = start;
    s->len = (size_t)(j->p - start);
    s->present = true;
    s->saw_nul = j->saw_nul;
    j->saw_nul = nul_before || j->saw_nul;
    return true;
}

bool sy_json_next_member(sy_json_scan *j, bool *first, strbuf *buf, const char **key, size_t *key_len,
                         bool *failed) {
    *failed = false;
    sy_json_ws(j);
    if (*first) {
        *first = false;
        if (!sy_json_peek(j, '{')) {
            *failed = true;
            return sy_json_fail(j, "expected an object");
        }
        j->p++;
        sy_json_ws(j);
        if (sy_json_peek(j, '}')) {
            j->p++;
            return false;
        }
    } else {
        if (sy_json_peek(j, '}')) {
            j->p++;
            return false;
        }
        if (!sy_json_peek(j, ',')) {
            *failed = true;
            return sy_json_fail(j, "expected ',' or '}'");
        }
        j->p++;
        sy_json_ws(j);
    }
    if (!sy_json_string_view(j, buf, key, key_len) || !sy_json_expect(j, ':', "expected ':' after an object key")) {
        *failed = true;
        return false;
    }
    sy_json_ws(j);
    return true;
}

bool sy_json_read_file(const char *path, size_t max_bytes, char **data, size_t *len, char *err, size_t err_size) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        sy_errmsg(err, err_size, "%s: cannot open: %s", path, strerror(errno));
        return false;
    }
    strbuf b = {0};
    bool ok = true;
    /* size the buffer once from the file size (a pipe or a growing file still works: the loop appends) */
    if (fseek(f, 0, SEEK_END) == 0) {
        long size = ftell(f);
        if (size > 0 && (unsigned long)size <= max_bytes && !sb_reserve(&b, (size_t)size + 1))
            ok = false;
        rewind(f);
    }
    while (ok) {
        if (!sb_reserve(&b, 65536)) {
            ok = false;
            break;
        }
        size_t n = fread(b.data + b.len, 1, b.cap - b.len - 1, f);
        if (n == 0)
            break;
        b.len += n;
        if (b.len > max_bytes) {
            sy_errmsg(err, err_size, "%s: larger than %zu bytes", path, max_bytes);
            fclose(f);
            sb_free(&b);
            return false;
        }
    }
    if (!ok)
        sy_errmsg(err, err_size, "%s: out of memory", path);
    else if (ferror(f)) {
        sy_errmsg(err, err_size, "%s: read error", path);
        ok = false;
    }
    fclose(f);
    if (!ok) {
        sb_free(&b);
        return false;
    }
    *data = b.data;
    *len = b.len;
    return true;
}

/* Where the sections of a tokenizer.json lie, and the model's small options. */
