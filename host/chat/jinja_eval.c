/*
 * The evaluator: statements and expressions over jj_value, with the semantics of Python objects as jinja2 sees
 * them (its default Undefined, its sandboxed attribute access, its scoping: for loops, macros and blocks get a
 * scope of their own, if does not).
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat_jinja_internal.h"

/* ------------------------------------------------------------------------------------------------------------
 * Arena */

struct jj_chunk {
    jj_chunk *next;
    size_t size, used;
    max_align_t data[];
};

void jj_arena_init(jj_arena *a, size_t limit) {
    memset(a, 0, sizeof *a);
    a->limit = limit;
}

void jj_arena_free(jj_arena *a) {
    jj_chunk *c = a->head;
    while (c != NULL) {
        jj_chunk *n = c->next;
        free(c);
        c = n;
    }
    a->head = NULL;
    a->used_total = 0;
}

void *jj_arena_alloc(jj_arena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (n == 0) n = 16;
    jj_chunk *c = a->head;
    if (c == NULL || c->size - c->used < n) {
        size_t size = n > 65536 ? n : 65536;
        if (a->used_total > a->limit || size > a->limit - a->used_total) return NULL;
        c = malloc(sizeof *c + size);
        if (c == NULL) return NULL;
        c->size = size;
        c->used = 0;
        c->next = a->head;
        a->head = c;
        a->used_total += size;
    }
    void *p = (char *)c->data + c->used;
    c->used += n;
    return p;
}

void *jj_ralloc(jj_render *r, size_t n) {
    void *p = jj_arena_alloc(&r->arena, n);
    if (p == NULL) jj_fail(r, "the template needs more memory than allowed (%zu MiB)", r->arena.limit >> 20);
    return p;
}

_Noreturn void jj_fail(jj_render *r, const char *fmt, ...) {
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(r->err, r->err_size, "chat template line %u: %s", r->line, msg);
    longjmp(r->fail, 1);
}

_Noreturn void jj_fail_raw(jj_render *r, const char *msg, size_t n) {
    int k = snprintf(r->err, r->err_size, "chat template line %u: ", r->line);
    if (k < 0) k = 0;
    size_t off = (size_t)k < r->err_size ? (size_t)k : r->err_size;
    size_t room = r->err_size > off ? r->err_size - off - 1 : 0;
    if (n > room) n = room;
    if (room > 0) {
        memcpy(r->err + off, msg, n);
        r->err[off + n] = '\0';
    }
    longjmp(r->fail, 1);
}

void jj_step(jj_render *r) {
    if (++r->steps > r->max_steps) jj_fail(r, "the template ran more than %llu steps", (unsigned long long)r->max_steps);
}

void jj_emit(jj_render *r, const char *p, size_t n) {
    if (n == 0) return;
    if (r->out->len + n > r->max_output) jj_fail(r, "the rendered text exceeds %zu bytes", r->max_output);
    sy_buf_append(r->out, p, n);
}

static void check_stack(jj_render *r);

/* ------------------------------------------------------------------------------------------------------------
 * Values */

jj_value jj_undef_v(void) {
    jj_value v = {.type = JJ_UNDEF};
    return v;
}

jj_value jj_undef_msg(jj_render *r, bool security, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    jj_undef *u = jj_ralloc(r, sizeof *u);
    size_t n = strlen(msg);
    char *m = jj_ralloc(r, n + 1);
    memcpy(m, msg, n + 1);
    u->msg = m;
    u->security = security;
    jj_value v = {.type = JJ_UNDEF};
    v.v.u = u;
    return v;
}

jj_value jj_none(void) {
    jj_value v = {.type = JJ_NONE};
    return v;
}
jj_value jj_bool(bool b) {
    jj_value v = {.type = JJ_BOOL};
    v.v.b = b;
    return v;
}
jj_value jj_int(int64_t i) {
    jj_value v = {.type = JJ_INT};
    v.v.i = i;
    return v;
}
jj_value jj_float(double f) {
    jj_value v = {.type = JJ_FLOAT};
    v.v.f = f;
    return v;
}
jj_value jj_str(const char *p, size_t n) {
    jj_value v = {.type = JJ_STR};
    v.v.s.p = p;
    v.v.s.n = n;
    return v;
}
jj_value jj_cstr(const char *s) { return jj_str(s, strlen(s)); }
jj_value jj_str_copy(jj_render *r, const char *p, size_t n) {
    char *m = jj_ralloc(r, n + 1);
    if (n) memcpy(m, p, n);
    m[n] = '\0';
    return jj_str(m, n);
}

jj_list *jj_list_new(jj_render *r, size_t cap) {
    jj_list *l = jj_ralloc(r, sizeof *l);
    memset(l, 0, sizeof *l);
    if (cap > 0) {
        if (cap > (SIZE_MAX / 2) / sizeof(jj_value)) jj_fail(r, "a list is too large");
        l->items = jj_ralloc(r, cap * sizeof *l->items);
        l->cap = cap;
    }
    return l;
}

void jj_list_push(jj_render *r, jj_list *l, jj_value v) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        if (cap > (SIZE_MAX / 2) / sizeof(jj_value)) jj_fail(r, "a list is too large");
        jj_value *m = jj_ralloc(r, cap * sizeof *m);
        if (l->n) memcpy(m, l->items, l->n * sizeof *m);
        l->items = m;
        l->cap = cap;
    }
    l->items[l->n++] = v;
}

jj_value jj_list_v(jj_list *l) {
    jj_value v = {.type = JJ_LIST};
    v.v.l = l;
    return v;
}

jj_dict *jj_dict_new(jj_render *r, size_t cap) {
    jj_dict *d = jj_ralloc(r, sizeof *d);
    memset(d, 0, sizeof *d);
    if (cap > 0) {
        if (cap > (SIZE_MAX / 4) / sizeof(jj_value)) jj_fail(r, "a dict is too large");
        d->keys = jj_ralloc(r, cap * sizeof *d->keys);
        d->vals = jj_ralloc(r, cap * sizeof *d->vals);
        d->cap = cap;
    }
    return d;
}

jj_value *jj_dict_get(jj_dict *d, jj_value key) {
    for (size_t i = 0; i < d->n; i++)
        if (jj_eq(d->keys[i], key)) return &d->vals[i];
    return NULL;
}

jj_value *jj_dict_gets(jj_dict *d, const char *key, size_t n) {
    for (size_t i = 0; i < d->n; i++)
        if (d->keys[i].type == JJ_STR && d->keys[i].v.s.n == n && memcmp(d->keys[i].v.s.p, key, n) == 0)
            return &d->vals[i];
    return NULL;
}

void jj_dict_set(jj_render *r, jj_dict *d, jj_value key, jj_value val) {
    jj_value *have = jj_dict_get(d, key);
    if (have != NULL) {
        *have = val;
        return;
    }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 4;
        if (cap > (SIZE_MAX / 4) / sizeof(jj_value)) jj_fail(r, "a dict is too large");
        jj_value *k = jj_ralloc(r, cap * sizeof *k);
        jj_value *v = jj_ralloc(r, cap * sizeof *v);
        if (d->n) {
            memcpy(k, d->keys, d->n * sizeof *k);
            memcpy(v, d->vals, d->n * sizeof *v);
        }
        d->keys = k;
        d->vals = v;
        d->cap = cap;
    }
    d->keys[d->n] = key;
    d->vals[d->n] = val;
    d->n++;
}

jj_value jj_dict_v(jj_dict *d) {
    jj_value v = {.type = JJ_DICT};
    v.v.d = d;
    return v;
}

bool jj_truthy(jj_value v) {
    switch (v.type) {
    case JJ_UNDEF:
    case JJ_NONE: return false;
    case JJ_BOOL: return v.v.b;
    case JJ_INT: return v.v.i != 0;
    case JJ_FLOAT: return v.v.f != 0.0;
    case JJ_STR: return v.v.s.n > 0;
    case JJ_LIST: return jj_is_iterator(v) || v.v.l->n > 0;
    case JJ_DICT: return v.v.d->n > 0;
    default: return true;
    }
}

bool jj_is_iterator(jj_value v) {
    return v.type == JJ_LIST && v.v.l->pytype != NULL && strncmp(v.v.l->pytype, "dict_", 5) != 0;
}

static bool is_num(jj_value v) { return v.type == JJ_INT || v.type == JJ_FLOAT || v.type == JJ_BOOL; }
static double num_f(jj_value v) {
    return v.type == JJ_FLOAT ? v.v.f : v.type == JJ_INT ? (double)v.v.i : (v.v.b ? 1.0 : 0.0);
}
static int64_t num_i(jj_value v) { return v.type == JJ_INT ? v.v.i : (v.v.b ? 1 : 0); }

/* Python stops comparing containers nested deeper than its recursion limit (RecursionError); so do we, at 1000 */
static bool eq_depth(jj_value a, jj_value b, int depth);

bool jj_eq(jj_value a, jj_value b) { return eq_depth(a, b, 0); }

static bool eq_depth(jj_value a, jj_value b, int depth) {
    if (depth > 1000) return false;
    if (is_num(a) && is_num(b)) {
        if (a.type == JJ_FLOAT || b.type == JJ_FLOAT) return num_f(a) == num_f(b);
        return num_i(a) == num_i(b);
    }
    if (a.type != b.type) {
        /* a namespace is no dict; anything else of different types differs */
        return false;
    }
    switch (a.type) {
    case JJ_UNDEF:
    case JJ_NONE: return true;
    case JJ_STR: return a.v.s.n == b.v.s.n && memcmp(a.v.s.p, b.v.s.p, a.v.s.n) == 0;
    case JJ_LIST:
        /* the same object is equal to itself (Python compares items by identity first) */
        if (a.v.l == b.v.l) return true;
        if (a.v.l->pytype != NULL || b.v.l->pytype != NULL) return false;
        if (a.v.l->tuple != b.v.l->tuple || a.v.l->n != b.v.l->n) return false;
        for (size_t i = 0; i < a.v.l->n; i++)
            if (!eq_depth(a.v.l->items[i], b.v.l->items[i], depth + 1)) return false;
        return true;
    case JJ_DICT:
        if (a.v.d == b.v.d) return true;
        if (a.v.d->n != b.v.d->n) return false;
        for (size_t i = 0; i < a.v.d->n; i++) {
            jj_value *o = jj_dict_get(b.v.d, a.v.d->keys[i]);
            if (o == NULL || !eq_depth(a.v.d->vals[i], *o, depth + 1)) return false;
        }
        return true;
    case JJ_NS: return a.v.d == b.v.d;
    case JJ_LOOP: return a.v.loop == b.v.loop;
    case JJ_MACRO: return a.v.m == b.v.m;
    case JJ_FUNC: return a.v.fn == b.v.fn;
    case JJ_OBJ: return a.v.o == b.v.o;
    default: return false;
    }
}

const char *jj_type_name(jj_value v) {
    switch (v.type) {
    case JJ_UNDEF: return "Undefined";
    case JJ_NONE: return "NoneType";
    case JJ_BOOL: return "bool";
    case JJ_INT: return "int";
    case JJ_FLOAT: return "float";
    case JJ_STR: return "str";
    case JJ_LIST: return v.v.l->pytype ? v.v.l->pytype : v.v.l->tuple ? "tuple" : "list";
    case JJ_DICT: return "dict";
    case JJ_NS: return "TemplateNamespace";
    case JJ_LOOP: return "LoopContext";
    case JJ_MACRO: return "Macro";
    case JJ_FUNC: return "builtin_function_or_method";
    default: return "object";
    }
}

void jj_check_undef(jj_render *r, jj_value v) {
    if (v.type != JJ_UNDEF) return;
    if (v.v.u == NULL) jj_fail(r, "a value is undefined");
    jj_fail(r, "%s", v.v.u->msg);
}

int jj_cmp(jj_render *r, jj_value a, jj_value b) {
    check_stack(r);
    jj_check_undef(r, a);
    jj_check_undef(r, b);
    if (is_num(a) && is_num(b)) {
        if (a.type == JJ_FLOAT || b.type == JJ_FLOAT) {
            double x = num_f(a), y = num_f(b);
            return x < y ? -1 : x > y ? 1 : 0;
        }
        int64_t x = num_i(a), y = num_i(b);
        return x < y ? -1 : x > y ? 1 : 0;
    }
    if (a.type == JJ_STR && b.type == JJ_STR) {
        size_t n = a.v.s.n < b.v.s.n ? a.v.s.n : b.v.s.n;
        int c = memcmp(a.v.s.p, b.v.s.p, n); /* UTF-8 byte order is code point order */
        if (c != 0) return c < 0 ? -1 : 1;
        return a.v.s.n < b.v.s.n ? -1 : a.v.s.n > b.v.s.n ? 1 : 0;
    }
    if (a.type == JJ_LIST && b.type == JJ_LIST) {
        size_t n = a.v.l->n < b.v.l->n ? a.v.l->n : b.v.l->n;
        for (size_t i = 0; i < n; i++) {
            if (jj_eq(a.v.l->items[i], b.v.l->items[i])) continue;
            return jj_cmp(r, a.v.l->items[i], b.v.l->items[i]);
        }
        return a.v.l->n < b.v.l->n ? -1 : a.v.l->n > b.v.l->n ? 1 : 0;
    }
    jj_fail(r, "'<' not supported between instances of '%s' and '%s'", jj_type_name(a), jj_type_name(b));
}

size_t jj_utf8_len(const char *p, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (((unsigned char)p[i] & 0xC0) != 0x80) k++;
    return k;
}

void jj_py_float(sy_buf *b, double f) {
    if (isnan(f)) {
        sy_buf_puts(b, "nan");
        return;
    }
    if (isinf(f)) {
        sy_buf_puts(b, f < 0 ? "-inf" : "inf");
        return;
    }
    /* the shortest digits that read back as f, laid out as Python's repr */
    char digits[40];
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(digits, sizeof digits, "%.*e", prec - 1, f);
        if (strtod(digits, NULL) == f) break;
    }
    /* digits: [-]d.ddde[+-]XX */
    char mant[32];
    size_t m = 0;
    bool neg = digits[0] == '-';
    const char *q = digits + (neg ? 1 : 0);
    while (*q && *q != 'e') {
        if (*q != '.') mant[m++] = *q;
        q++;
    }
    mant[m] = '\0';
    int exp = atoi(q + 1);
    while (m > 1 && mant[m - 1] == '0') mant[--m] = '\0';
    if (neg) sy_buf_puts(b, "-");
    if (exp >= 16 || exp < -4) {
        sy_buf_append(b, mant, 1);
        if (m > 1) {
            sy_buf_puts(b, ".");
            sy_buf_append(b, mant + 1, m - 1);
        }
        sy_buf_printf(b, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
        return;
    }
    if (exp < 0) {
        sy_buf_puts(b, "0.");
        for (int k = -1; k > exp; k--) sy_buf_puts(b, "0");
        sy_buf_append(b, mant, m);
        return;
    }
    /* exp >= 0: integer part is mant[0..exp] */
    for (int k = 0; k <= exp; k++) sy_buf_append(b, k < (int)m ? &mant[k] : "0", 1);
    sy_buf_puts(b, ".");
    if ((int)m > exp + 1) sy_buf_append(b, mant + exp + 1, m - (size_t)exp - 1);
    else sy_buf_puts(b, "0");
}

static void repr_str(sy_buf *b, const char *p, size_t n) {
    bool has_sq = memchr(p, '\'', n) != NULL, has_dq = memchr(p, '"', n) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    sy_buf_append(b, &q, 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c == '\\') sy_buf_puts(b, "\\\\");
        else if (c == (unsigned char)q) {
            sy_buf_puts(b, "\\");
            sy_buf_append(b, &q, 1);
        } else if (c == '\n') sy_buf_puts(b, "\\n");
        else if (c == '\r') sy_buf_puts(b, "\\r");
        else if (c == '\t') sy_buf_puts(b, "\\t");
        else if (c < 0x20 || c == 0x7f) sy_buf_printf(b, "\\x%02x", c);
        else sy_buf_append(b, &p[i], 1);
    }
    sy_buf_append(b, &q, 1);
}

void jj_repr(jj_render *r, sy_buf *b, jj_value v) {
    check_stack(r);
    jj_step(r);
    if (b->len > r->max_output) jj_fail(r, "the rendered text exceeds %zu bytes", r->max_output);
    switch (v.type) {
    case JJ_STR: repr_str(b, v.v.s.p, v.v.s.n); return;
    case JJ_UNDEF: return; /* str(Undefined) inside a repr is its repr; templates never print one */
    default: jj_to_str(r, b, v);
    }
}

void jj_to_str(jj_render *r, sy_buf *b, jj_value v) {
    check_stack(r);
    switch (v.type) {
    case JJ_UNDEF: return;
    case JJ_NONE: sy_buf_puts(b, "None"); return;
    case JJ_BOOL: sy_buf_puts(b, v.v.b ? "True" : "False"); return;
    case JJ_INT: sy_buf_printf(b, "%lld", (long long)v.v.i); return;
    case JJ_FLOAT: jj_py_float(b, v.v.f); return;
    case JJ_STR: sy_buf_append(b, v.v.s.p, v.v.s.n); return;
    case JJ_LIST: {
        jj_list *l = v.v.l;
        if (jj_is_iterator(v)) {
            /* Python prints an address here; no template can depend on it */
            sy_buf_printf(b, "<%s object>", l->pytype);
            return;
        }
        if (l->pytype != NULL) sy_buf_printf(b, "%s(", l->pytype);
        sy_buf_puts(b, l->tuple ? "(" : "[");
        for (size_t i = 0; i < l->n; i++) {
            if (i) sy_buf_puts(b, ", ");
            jj_repr(r, b, l->items[i]);
        }
        if (l->tuple && l->n == 1) sy_buf_puts(b, ",");
        sy_buf_puts(b, l->tuple ? ")" : "]");
        if (l->pytype != NULL) sy_buf_puts(b, ")");
        return;
    }
    case JJ_DICT:
    case JJ_NS: {
        jj_dict *d = v.v.d;
        sy_buf_puts(b, v.type == JJ_NS ? "<Namespace {" : "{");
        for (size_t i = 0; i < d->n; i++) {
            if (i) sy_buf_puts(b, ", ");
            jj_repr(r, b, d->keys[i]);
            sy_buf_puts(b, ": ");
            jj_repr(r, b, d->vals[i]);
        }
        sy_buf_puts(b, v.type == JJ_NS ? "}>" : "}");
        return;
    }
    case JJ_LOOP: sy_buf_puts(b, "<LoopContext>"); return;
    case JJ_MACRO: sy_buf_puts(b, "<Macro>"); return;
    case JJ_FUNC: sy_buf_printf(b, "<built-in function %s>", v.v.fn->name); return;
    default: sy_buf_puts(b, "<object>"); return;
    }
}

jj_value jj_stringify(jj_render *r, jj_value v) {
    if (v.type == JJ_STR) return v;
    sy_buf *b = jj_buf_begin(r);
    jj_to_str(r, b, v);
    if (b->len > r->max_output) {
        jj_buf_end(r, b);
        jj_fail(r, "the rendered text exceeds %zu bytes", r->max_output);
    }
    jj_value s = jj_str_copy(r, b->data ? b->data : "", b->len);
    jj_buf_end(r, b);
    return s;
}

jj_list *jj_iter(jj_render *r, jj_value v) {
    switch (v.type) {
    case JJ_UNDEF: return jj_list_new(r, 0);
    case JJ_LIST: return v.v.l;
    case JJ_DICT: {
        jj_list *l = jj_list_new(r, v.v.d->n);
        for (size_t i = 0; i < v.v.d->n; i++) jj_list_push(r, l, v.v.d->keys[i]);
        return l;
    }
    case JJ_STR: {
        jj_list *l = jj_list_new(r, v.v.s.n);
        const char *p = v.v.s.p;
        size_t n = v.v.s.n, i = 0;
        while (i < n) {
            size_t j = i + 1;
            while (j < n && ((unsigned char)p[j] & 0xC0) == 0x80) j++;
            jj_list_push(r, l, jj_str(p + i, j - i));
            i = j;
        }
        return l;
    }
    default: jj_fail(r, "'%s' object is not iterable", jj_type_name(v));
    }
}

/* ------------------------------------------------------------------------------------------------------------
 * Frames */

struct jj_frame {
    jj_frame *parent;
    const char **names;
    size_t *lens;
    jj_value *vals;
    size_t n, cap;
};

jj_frame *jj_frame_new(jj_render *r, jj_frame *parent) {
    jj_frame *f = jj_ralloc(r, sizeof *f);
    memset(f, 0, sizeof *f);
    f->parent = parent;
    return f;
}

static jj_value *frame_find_local(jj_frame *f, const char *name, size_t n) {
    for (size_t i = 0; i < f->n; i++)
        if (f->lens[i] == n && memcmp(f->names[i], name, n) == 0) return &f->vals[i];
    return NULL;
}

void jj_frame_set(jj_render *r, jj_frame *f, const char *name, size_t n, jj_value v) {
    jj_value *have = frame_find_local(f, name, n);
    if (have != NULL) {
        *have = v;
        return;
    }
    if (f->n == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 8;
        const char **names = jj_ralloc(r, cap * sizeof *names);
        size_t *lens = jj_ralloc(r, cap * sizeof *lens);
        jj_value *vals = jj_ralloc(r, cap * sizeof *vals);
        if (f->n) {
            memcpy(names, f->names, f->n * sizeof *names);
            memcpy(lens, f->lens, f->n * sizeof *lens);
            memcpy(vals, f->vals, f->n * sizeof *vals);
        }
        f->names = names;
        f->lens = lens;
        f->vals = vals;
        f->cap = cap;
    }
    f->names[f->n] = name;
    f->lens[f->n] = n;
    f->vals[f->n] = v;
    f->n++;
}

static jj_value frame_lookup(jj_render *r, jj_frame *f, const char *name, size_t n) {
    for (; f != NULL; f = f->parent) {
        jj_value *v = frame_find_local(f, name, n);
        if (v != NULL) return *v;
    }
    return jj_undef_msg(r, false, "'%.*s' is undefined", (int)(n > 100 ? 100 : n), name);
}

/* ------------------------------------------------------------------------------------------------------------
 * Loops, macros */

struct jj_loop {
    jj_list *items;
    size_t index0;
    jj_loop *parent;
    uint32_t depth;
    bool have_changed;
    jj_value last_changed;
};

struct jj_macro {
    const jj_node *def; /* JN_MACRO, or the JN_CALL_BLOCK of a caller */
    jj_frame *closure;
    jj_value caller; /* set while called from a call block */
};

static jj_value loop_cycle(jj_render *r, jj_value self, const jj_callargs *a) {
    if (a->n_pos == 0) jj_fail(r, "no items for cycling given");
    return a->pos[self.v.loop->index0 % a->n_pos];
}

static jj_value loop_changed(jj_render *r, jj_value self, const jj_callargs *a) {
    jj_loop *l = self.v.loop;
    jj_list *vals = jj_list_new(r, a->n_pos);
    for (size_t i = 0; i < a->n_pos; i++) jj_list_push(r, vals, a->pos[i]);
    jj_value now = jj_list_v(vals);
    if (!l->have_changed || !jj_eq(now, l->last_changed)) {
        l->have_changed = true;
        l->last_changed = now;
        return jj_bool(true);
    }
    return jj_bool(false);
}

static jj_value bound(jj_render *r, const char *name, jj_builtin_fn fn, jj_value self) {
    jj_func *f = jj_ralloc(r, sizeof *f);
    f->name = name;
    f->fn = fn;
    f->self = self;
    jj_value v = {.type = JJ_FUNC};
    v.v.fn = f;
    return v;
}

jj_value jj_loop_attr(jj_render *r, jj_loop *l, const char *name, size_t n) {
    size_t len = l->items->n;
#define IS(s) (n == sizeof(s) - 1 && memcmp(name, s, n) == 0)
    if (IS("index")) return jj_int((int64_t)l->index0 + 1);
    if (IS("index0")) return jj_int((int64_t)l->index0);
    if (IS("revindex")) return jj_int((int64_t)(len - l->index0));
    if (IS("revindex0")) return jj_int((int64_t)(len - l->index0 - 1));
    if (IS("first")) return jj_bool(l->index0 == 0);
    if (IS("last")) return jj_bool(l->index0 + 1 == len);
    if (IS("length")) return jj_int((int64_t)len);
    if (IS("depth")) return jj_int((int64_t)l->depth);
    if (IS("depth0")) return jj_int((int64_t)l->depth - 1);
    if (IS("previtem"))
        return l->index0 > 0 ? l->items->items[l->index0 - 1] : jj_undef_msg(r, false, "there is no previous item");
    if (IS("nextitem"))
        return l->index0 + 1 < len ? l->items->items[l->index0 + 1] : jj_undef_msg(r, false, "there is no next item");
    jj_value self = {.type = JJ_LOOP};
    self.v.loop = l;
    if (IS("cycle")) return bound(r, "cycle", loop_cycle, self);
    if (IS("changed")) return bound(r, "changed", loop_changed, self);
#undef IS
    return jj_undef_msg(r, false, "'LoopContext' object has no attribute '%.*s'", (int)(n > 100 ? 100 : n), name);
}

/* ------------------------------------------------------------------------------------------------------------
 * Attribute and item access (jinja2's SandboxedEnvironment.getattr / getitem) */

static const char *object_type_repr(jj_value v) {
    switch (v.type) {
    case JJ_NONE: return "None";
    default: return NULL;
    }
}

static jj_value missing_attr(jj_render *r, jj_value obj, const char *name, size_t n) {
    const char *special = object_type_repr(obj);
    if (special != NULL)
        return jj_undef_msg(r, false, "'%s' has no attribute '%.*s'", special, (int)(n > 100 ? 100 : n), name);
    return jj_undef_msg(r, false, "'%s object' has no attribute '%.*s'", jj_type_name(obj), (int)(n > 100 ? 100 : n),
                        name);
}

jj_value jj_getattr(jj_render *r, jj_value obj, const char *name, size_t n) {
    jj_check_undef(r, obj);
    if (n > 0 && name[0] == '_')
        return jj_undef_msg(r, true, "access to attribute '%.*s' of '%s' object is unsafe.", (int)(n > 100 ? 100 : n),
                            name, jj_type_name(obj));
    if (obj.type == JJ_LOOP) return jj_loop_attr(r, obj.v.loop, name, n);
    if (obj.type == JJ_NS) {
        jj_value *v = jj_dict_gets(obj.v.d, name, n);
        if (v != NULL) return *v;
        return jj_undef_msg(r, false, "'%s object' has no attribute '%.*s'", jj_type_name(obj), (int)(n > 100 ? 100 : n),
                            name);
    }
    bool found = false;
    jj_value m = jj_method(r, obj, name, n, &found);
    if (found) return m;
    if (obj.type == JJ_DICT) {
        jj_value *v = jj_dict_gets(obj.v.d, name, n);
        if (v != NULL) return *v;
    }
    return missing_attr(r, obj, name, n);
}

static bool index_of(jj_render *r, jj_value key, size_t len, size_t *out) {
    if (key.type != JJ_INT && key.type != JJ_BOOL) return false;
    int64_t i = num_i(key);
    if (i < 0) i += (int64_t)len;
    (void)r;
    if (i < 0 || (uint64_t)i >= len) return false;
    *out = (size_t)i;
    return true;
}

static size_t utf8_offset(const char *p, size_t n, size_t cp) {
    size_t i = 0, k = 0;
    while (i < n && k < cp) {
        i++;
        while (i < n && ((unsigned char)p[i] & 0xC0) == 0x80) i++;
        k++;
    }
    return i;
}

jj_value jj_getitem(jj_render *r, jj_value obj, jj_value key) {
    jj_check_undef(r, obj);
    jj_check_undef(r, key);
    switch (obj.type) {
    case JJ_DICT: {
        jj_value *v = jj_dict_get(obj.v.d, key);
        if (v != NULL) return *v;
        break;
    }
    case JJ_NS: break;
    case JJ_LIST: {
        size_t i;
        if (obj.v.l->pytype != NULL) jj_fail(r, "'%s' object is not subscriptable", obj.v.l->pytype);
        if (index_of(r, key, obj.v.l->n, &i)) return obj.v.l->items[i];
        if (key.type == JJ_INT || key.type == JJ_BOOL)
            return jj_undef_msg(r, false, "%s object has no element %lld", jj_type_name(obj), (long long)num_i(key));
        break;
    }
    case JJ_STR: {
        size_t len = jj_utf8_len(obj.v.s.p, obj.v.s.n), i;
        if (index_of(r, key, len, &i)) {
            size_t a = utf8_offset(obj.v.s.p, obj.v.s.n, i);
            size_t b = utf8_offset(obj.v.s.p, obj.v.s.n, i + 1);
            return jj_str(obj.v.s.p + a, b - a);
        }
        if (key.type == JJ_INT || key.type == JJ_BOOL)
            return jj_undef_msg(r, false, "str object has no element %lld", (long long)num_i(key));
        break;
    }
    default: break;
    }
    if (key.type == JJ_STR) {
        if (obj.type == JJ_LOOP || obj.type == JJ_NS) return jj_getattr(r, obj, key.v.s.p, key.v.s.n);
        if (key.v.s.n > 0 && key.v.s.p[0] == '_')
            return jj_undef_msg(r, true, "access to attribute '%.*s' of '%s' object is unsafe.",
                                (int)(key.v.s.n > 100 ? 100 : key.v.s.n), key.v.s.p, jj_type_name(obj));
        bool found = false;
        jj_value m = jj_method(r, obj, key.v.s.p, key.v.s.n, &found);
        if (found) return m;
        return missing_attr(r, obj, key.v.s.p, key.v.s.n);
    }
    sy_buf *b = jj_buf_begin(r);
    jj_repr(r, b, key);
    jj_value u = jj_undef_msg(r, false, "%s object has no element %.*s", jj_type_name(obj),
                              (int)(b->len > 100 ? 100 : b->len), b->data ? b->data : "");
    jj_buf_end(r, b);
    return u;
}

/* Python's slice over a length: start, stop, step -> the indices taken. */
static jj_list *slice_indices(jj_render *r, size_t len, const jj_value *start, const jj_value *stop,
                              const jj_value *step) {
    int64_t st = 1;
    if (step != NULL && step->type != JJ_NONE) {
        if (step->type != JJ_INT) jj_fail(r, "slice indices must be integers or None");
        st = step->v.i;
        if (st == 0) jj_fail(r, "slice step cannot be zero");
    }
    int64_t n = (int64_t)len;
    int64_t lo, hi;
    if (start == NULL || start->type == JJ_NONE) lo = st > 0 ? 0 : n - 1;
    else {
        if (start->type != JJ_INT && start->type != JJ_BOOL) jj_fail(r, "slice indices must be integers or None");
        lo = num_i(*start);
        if (lo < 0) lo += n;
        if (st > 0) lo = lo < 0 ? 0 : lo > n ? n : lo;
        else lo = lo < -1 ? -1 : lo > n - 1 ? n - 1 : lo;
    }
    if (stop == NULL || stop->type == JJ_NONE) hi = st > 0 ? n : -1;
    else {
        if (stop->type != JJ_INT && stop->type != JJ_BOOL) jj_fail(r, "slice indices must be integers or None");
        hi = num_i(*stop);
        if (hi < 0) hi += n;
        if (st > 0) hi = hi < 0 ? 0 : hi > n ? n : hi;
        else hi = hi < -1 ? -1 : hi > n - 1 ? n - 1 : hi;
    }
    jj_list *idx = jj_list_new(r, 0);
    if (st > 0)
        for (int64_t i = lo; i < hi; i += st) jj_list_push(r, idx, jj_int(i));
    else
        for (int64_t i = lo; i > hi; i += st) jj_list_push(r, idx, jj_int(i));
    return idx;
}

static jj_value do_slice(jj_render *r, jj_value obj, const jj_value *start, const jj_value *stop, const jj_value *step) {
    jj_check_undef(r, obj);
    if (obj.type == JJ_LIST && obj.v.l->pytype != NULL) jj_fail(r, "'%s' object is not subscriptable", obj.v.l->pytype);
    if (obj.type == JJ_LIST) {
        jj_list *idx = slice_indices(r, obj.v.l->n, start, stop, step);
        jj_list *out = jj_list_new(r, idx->n);
        out->tuple = obj.v.l->tuple;
        for (size_t i = 0; i < idx->n; i++) jj_list_push(r, out, obj.v.l->items[idx->items[i].v.i]);
        return jj_list_v(out);
    }
    if (obj.type == JJ_STR) {
        const char *p = obj.v.s.p;
        size_t n = obj.v.s.n;
        size_t len = jj_utf8_len(p, n);
        bool simple = (step == NULL || step->type == JJ_NONE || (step->type == JJ_INT && step->v.i == 1));
        jj_list *idx = slice_indices(r, len, start, stop, step);
        if (simple) {
            if (idx->n == 0) return jj_str("", 0);
            size_t a = utf8_offset(p, n, (size_t)idx->items[0].v.i);
            size_t b = utf8_offset(p, n, (size_t)idx->items[idx->n - 1].v.i + 1);
            return jj_str(p + a, b - a);
        }
        /* per character */
        size_t *offs = jj_ralloc(r, (len + 1) * sizeof *offs);
        size_t i = 0, k = 0;
        while (k <= len) {
            offs[k++] = i;
            if (i < n) {
                i++;
                while (i < n && ((unsigned char)p[i] & 0xC0) == 0x80) i++;
            }
        }
        char *out = jj_ralloc(r, n + 1);
        size_t o = 0;
        for (size_t j = 0; j < idx->n; j++) {
            size_t c = (size_t)idx->items[j].v.i;
            memcpy(out + o, p + offs[c], offs[c + 1] - offs[c]);
            o += offs[c + 1] - offs[c];
        }
        return jj_str(out, o);
    }
    jj_fail(r, "'%s' object is not subscriptable", jj_type_name(obj));
}

/* ------------------------------------------------------------------------------------------------------------
 * Expressions */

static jj_value eval(jj_render *r, const jj_node *n, jj_frame *f);
static int exec_body(jj_render *r, const jj_nodes *body, jj_frame *f);

enum { FLOW_NORMAL = 0, FLOW_BREAK, FLOW_CONTINUE };

static jj_value arith(jj_render *r, int op, jj_value a, jj_value b) {
    if (op == JOP_TILDE) {
        sy_buf *s = jj_buf_begin(r);
        jj_to_str(r, s, a);
        jj_to_str(r, s, b);
        if (s->len > r->max_output) {
            jj_buf_end(r, s);
            jj_fail(r, "the rendered text exceeds %zu bytes", r->max_output);
        }
        jj_value v = jj_str_copy(r, s->data ? s->data : "", s->len);
        jj_buf_end(r, s);
        return v;
    }
    jj_check_undef(r, a);
    jj_check_undef(r, b);
    static const char *const names[] = {"", "+", "-", "*", "/", "//", "%", "**"};
    if (is_num(a) && is_num(b)) {
        bool fl = a.type == JJ_FLOAT || b.type == JJ_FLOAT;
        if (op == JOP_DIV) {
            double y = num_f(b);
            if (y == 0) jj_fail(r, fl ? "float division by zero" : "division by zero");
            return jj_float(num_f(a) / y);
        }
        if (fl) {
            double x = num_f(a), y = num_f(b);
            switch (op) {
            case JOP_ADD: return jj_float(x + y);
            case JOP_SUB: return jj_float(x - y);
            case JOP_MUL: return jj_float(x * y);
            case JOP_FLOORDIV:
                if (y == 0) jj_fail(r, "float floor division by zero");
                return jj_float(floor(x / y));
            case JOP_MOD: {
                if (y == 0) jj_fail(r, "float modulo");
                double m = fmod(x, y);
                if (m != 0 && ((m < 0) != (y < 0))) m += y;
                return jj_float(m);
            }
            case JOP_POW: return jj_float(pow(x, y));
            }
        }
        int64_t x = num_i(a), y = num_i(b), z = 0;
        switch (op) {
        case JOP_ADD:
            if (__builtin_add_overflow(x, y, &z)) jj_fail(r, "integer overflow");
            return jj_int(z);
        case JOP_SUB:
            if (__builtin_sub_overflow(x, y, &z)) jj_fail(r, "integer overflow");
            return jj_int(z);
        case JOP_MUL:
            if (__builtin_mul_overflow(x, y, &z)) jj_fail(r, "integer overflow");
            return jj_int(z);
        case JOP_FLOORDIV:
        case JOP_MOD: {
            if (y == 0) jj_fail(r, op == JOP_MOD ? "integer modulo by zero" : "integer division or modulo by zero");
            if (x == INT64_MIN && y == -1) jj_fail(r, "integer overflow");
            int64_t q = x / y, m = x % y;
            if (m != 0 && ((m < 0) != (y < 0))) {
                q--;
                m += y;
            }
            return jj_int(op == JOP_MOD ? m : q);
        }
        case JOP_POW: {
            if (y < 0) return jj_float(pow((double)x, (double)y));
            int64_t acc = 1;
            for (int64_t k = 0; k < y; k++) {
                jj_step(r);
                if (__builtin_mul_overflow(acc, x, &acc)) jj_fail(r, "integer overflow");
            }
            return jj_int(acc);
        }
        }
    }
    if (op == JOP_ADD && a.type == JJ_STR && b.type == JJ_STR) {
        /* markupsafe: Markup + str escapes the str, and the result is Markup */
        bool markup = a.safe || b.safe;
        if (markup) {
            if (!a.safe) a = jj_html_escape(r, a);
            if (!b.safe) b = jj_html_escape(r, b);
        }
        if (a.v.s.n + b.v.s.n > r->max_output) jj_fail(r, "the rendered text exceeds %zu bytes", r->max_output);
        char *m = jj_ralloc(r, a.v.s.n + b.v.s.n + 1);
        memcpy(m, a.v.s.p, a.v.s.n);
        memcpy(m + a.v.s.n, b.v.s.p, b.v.s.n);
        m[a.v.s.n + b.v.s.n] = '\0';
        jj_value v = jj_str(m, a.v.s.n + b.v.s.n);
        v.safe = markup;
        return v;
    }
    if (op == JOP_ADD && a.type == JJ_LIST && b.type == JJ_LIST && a.v.l->tuple == b.v.l->tuple && !a.v.l->pytype &&
        !b.v.l->pytype) {
        jj_list *l = jj_list_new(r, a.v.l->n + b.v.l->n);
        l->tuple = a.v.l->tuple;
        for (size_t i = 0; i < a.v.l->n; i++) jj_list_push(r, l, a.v.l->items[i]);
        for (size_t i = 0; i < b.v.l->n; i++) jj_list_push(r, l, b.v.l->items[i]);
        return jj_list_v(l);
    }
    if (op == JOP_MUL && (((a.type == JJ_STR || a.type == JJ_LIST) && (b.type == JJ_INT || b.type == JJ_BOOL)) ||
                          ((b.type == JJ_STR || b.type == JJ_LIST) && (a.type == JJ_INT || a.type == JJ_BOOL)))) {
        jj_value seq = a.type == JJ_STR || a.type == JJ_LIST ? a : b;
        int64_t k = num_i(a.type == JJ_STR || a.type == JJ_LIST ? b : a);
        if (k < 0) k = 0;
        if (seq.type == JJ_STR) {
            if (seq.v.s.n > 0 && (uint64_t)k > r->max_output / seq.v.s.n)
                jj_fail(r, "the rendered text exceeds %zu bytes", r->max_output);
            size_t total = seq.v.s.n * (size_t)k;
            char *m = jj_ralloc(r, total + 1);
            for (int64_t i = 0; i < k; i++) memcpy(m + (size_t)i * seq.v.s.n, seq.v.s.p, seq.v.s.n);
            m[total] = '\0';
            return jj_str(m, total);
        }
        if (seq.v.l->n > 0 && (uint64_t)k > r->max_output / seq.v.l->n) jj_fail(r, "a list is too large");
        jj_list *l = jj_list_new(r, seq.v.l->n * (size_t)k);
        l->tuple = seq.v.l->tuple;
        for (int64_t i = 0; i < k; i++)
            for (size_t j = 0; j < seq.v.l->n; j++) jj_list_push(r, l, seq.v.l->items[j]);
        return jj_list_v(l);
    }
    if (op == JOP_MOD && a.type == JJ_STR) jj_fail(r, "printf-style string formatting (%%) is not supported");
    if (op == JOP_ADD && a.type == JJ_STR) jj_fail(r, "can only concatenate str (not \"%s\") to str", jj_type_name(b));
    jj_fail(r, "unsupported operand type(s) for %s: '%s' and '%s'", names[op], jj_type_name(a), jj_type_name(b));
}

static bool contains(jj_render *r, jj_value item, jj_value seq) {
    switch (seq.type) {
    case JJ_UNDEF: return false;
    case JJ_STR:
        if (item.type != JJ_STR) jj_fail(r, "'in <string>' requires string as left operand, not %s", jj_type_name(item));
        if (item.v.s.n == 0) return true;
        if (item.v.s.n > seq.v.s.n) return false;
        for (size_t i = 0; i + item.v.s.n <= seq.v.s.n; i++)
            if (memcmp(seq.v.s.p + i, item.v.s.p, item.v.s.n) == 0) return true;
        return false;
    case JJ_LIST:
        for (size_t i = 0; i < seq.v.l->n; i++)
            if (jj_eq(seq.v.l->items[i], item)) return true;
        return false;
    case JJ_DICT: return jj_dict_get(seq.v.d, item) != NULL;
    default: jj_fail(r, "argument of type '%s' is not iterable", jj_type_name(seq));
    }
}

static bool compare(jj_render *r, int op, jj_value a, jj_value b) {
    switch (op) {
    case JOP_EQ: return jj_eq(a, b);
    case JOP_NE: return !jj_eq(a, b);
    case JOP_LT: return jj_cmp(r, a, b) < 0;
    case JOP_LE: return jj_cmp(r, a, b) <= 0;
    case JOP_GT: return jj_cmp(r, a, b) > 0;
    case JOP_GE: return jj_cmp(r, a, b) >= 0;
    case JOP_IN: return contains(r, a, b);
    case JOP_NOTIN: return !contains(r, a, b);
    }
    return false;
}

static void eval_args(jj_render *r, const jj_args *args, jj_frame *f, jj_callargs *out, const jj_value *first) {
    size_t extra = first ? 1 : 0;
    out->n_pos = args->pos.n + extra;
    out->pos = jj_ralloc(r, (out->n_pos + 1) * sizeof *out->pos);
    if (first) out->pos[0] = *first;
    for (size_t i = 0; i < args->pos.n; i++) out->pos[i + extra] = eval(r, args->pos.items[i], f);
    out->n_kw = args->kw.n;
    out->kw = jj_ralloc(r, (out->n_kw + 1) * sizeof *out->kw);
    out->kw_names = args->kw_names;
    for (size_t i = 0; i < args->kw.n; i++) out->kw[i] = eval(r, args->kw.items[i], f);
}

static jj_value call_macro(jj_render *r, jj_macro *m, const jj_callargs *a, jj_value caller);

jj_value jj_call_value(jj_render *r, jj_value callee, const jj_callargs *a) {
    jj_step(r);
    if (callee.type == JJ_UNDEF) {
        jj_check_undef(r, callee);
    }
    if (callee.type == JJ_FUNC) return callee.v.fn->fn(r, callee.v.fn->self, a);
    if (callee.type == JJ_MACRO) return call_macro(r, callee.v.m, a, jj_undef_v());
    jj_fail(r, "'%s' object is not callable", jj_type_name(callee));
}

static jj_value eval_filter(jj_render *r, const jj_node *n, jj_frame *f, jj_value input) {
    /* a chain: evaluate inner filters first (the innermost operand is input when a is NULL) */
    jj_value v = n->a == NULL ? input : n->a->kind == JN_FILTER ? eval_filter(r, n->a, f, input) : eval(r, n->a, f);
    r->line = n->line;
    jj_callargs a;
    eval_args(r, &n->args, f, &a, NULL);
    jj_step(r);
    return jj_apply_filter(r, n->name, v, &a);
}

static void check_stack(jj_render *r) {
    if (r->stack_base == NULL) return;
    char here;
    const char *p = &here;
    size_t used = p < r->stack_base ? (size_t)(r->stack_base - p) : (size_t)(p - r->stack_base);
    if (used > JJ_STACK_BUDGET) jj_fail(r, "the template nests too deeply");
}

static jj_value eval(jj_render *r, const jj_node *n, jj_frame *f) {
    check_stack(r);
    r->line = n->line;
    switch (n->kind) {
    case JN_CONST: return n->value;
    case JN_NAME: return frame_lookup(r, f, n->name, n->name_len);
    case JN_LIST:
    case JN_TUPLE: {
        jj_list *l = jj_list_new(r, n->body.n);
        l->tuple = n->kind == JN_TUPLE;
        for (size_t i = 0; i < n->body.n; i++) jj_list_push(r, l, eval(r, n->body.items[i], f));
        return jj_list_v(l);
    }
    case JN_DICT: {
        jj_dict *d = jj_dict_new(r, n->body.n / 2);
        for (size_t i = 0; i + 1 < n->body.n; i += 2) {
            jj_value k = eval(r, n->body.items[i], f);
            jj_value v = eval(r, n->body.items[i + 1], f);
            if (k.type == JJ_LIST && !k.v.l->tuple) jj_fail(r, "unhashable type: 'list'");
            if (k.type == JJ_DICT) jj_fail(r, "unhashable type: 'dict'");
            jj_dict_set(r, d, k, v);
        }
        return jj_dict_v(d);
    }
    case JN_GETATTR: {
        jj_value o = eval(r, n->a, f);
        r->line = n->line;
        return jj_getattr(r, o, n->name, n->name_len);
    }
    case JN_GETITEM: {
        jj_value o = eval(r, n->a, f);
        jj_value k = eval(r, n->b, f);
        r->line = n->line;
        return jj_getitem(r, o, k);
    }
    case JN_SLICE: {
        jj_value o = eval(r, n->a, f);
        jj_value s0, s1, s2;
        const jj_value *p0 = NULL, *p1 = NULL, *p2 = NULL;
        if (n->b) {
            s0 = eval(r, n->b, f);
            p0 = &s0;
        }
        if (n->c) {
            s1 = eval(r, n->c, f);
            p1 = &s1;
        }
        if (n->body.n) {
            s2 = eval(r, n->body.items[0], f);
            p2 = &s2;
        }
        r->line = n->line;
        return do_slice(r, o, p0, p1, p2);
    }
    case JN_CALL: {
        jj_value callee = eval(r, n->a, f);
        jj_callargs a;
        eval_args(r, &n->args, f, &a, NULL);
        r->line = n->line;
        return jj_call_value(r, callee, &a);
    }
    case JN_FILTER: return eval_filter(r, n, f, jj_undef_v());
    case JN_TEST: {
        jj_value v = eval(r, n->a, f);
        jj_callargs a;
        eval_args(r, &n->args, f, &a, NULL);
        r->line = n->line;
        bool res = jj_apply_test(r, n->name, v, &a);
        return jj_bool(n->negated ? !res : res);
    }
    case JN_UNARY: {
        jj_value v = eval(r, n->a, f);
        r->line = n->line;
        jj_check_undef(r, v);
        if (!is_num(v)) jj_fail(r, "bad operand type for unary %c: '%s'", n->op == JOP_NEG ? '-' : '+', jj_type_name(v));
        if (n->op == JOP_POS) return v.type == JJ_BOOL ? jj_int(num_i(v)) : v;
        if (v.type == JJ_FLOAT) return jj_float(-v.v.f);
        if (num_i(v) == INT64_MIN) jj_fail(r, "integer overflow");
        return jj_int(-num_i(v));
    }
    case JN_BINARY: {
        jj_value a = eval(r, n->a, f);
        jj_value b = eval(r, n->b, f);
        r->line = n->line;
        return arith(r, n->op, a, b);
    }
    case JN_COMPARE: {
        jj_value a = eval(r, n->a, f);
        for (size_t i = 0; i < n->ops.n; i++) {
            jj_value b = eval(r, n->ops.items[i], f);
            r->line = n->line;
            if (!compare(r, n->opcodes[i], a, b)) return jj_bool(false);
            a = b;
        }
        return jj_bool(true);
    }
    case JN_AND: {
        jj_value a = eval(r, n->a, f);
        return jj_truthy(a) ? eval(r, n->b, f) : a;
    }
    case JN_OR: {
        jj_value a = eval(r, n->a, f);
        return jj_truthy(a) ? a : eval(r, n->b, f);
    }
    case JN_NOT: return jj_bool(!jj_truthy(eval(r, n->a, f)));
    case JN_COND: {
        if (jj_truthy(eval(r, n->a, f))) return eval(r, n->b, f);
        if (n->c) return eval(r, n->c, f);
        return jj_undef_msg(r, false, "the inline if-expression on line %u evaluated to false and no else section was defined.",
                            n->line);
    }
    default: jj_fail(r, "internal error: node %d is no expression", n->kind);
    }
}

/* ------------------------------------------------------------------------------------------------------------
 * Statements */

static void assign(jj_render *r, const jj_node *target, jj_value v, jj_frame *f) {
    if (target->kind == JN_NAME) {
        jj_frame_set(r, f, target->name, target->name_len, v);
        return;
    }
    if (target->kind == JN_GETATTR) {
        jj_value ns = frame_lookup(r, f, target->a->name, target->a->name_len);
        if (ns.type != JJ_NS) jj_fail(r, "cannot assign attribute on non-namespace object");
        if (target->name_len > 0 && target->name[0] == '_')
            jj_fail(r, "Chat templates cannot store underscore-prefixed attributes on a namespace, but got '%.*s'. Please "
                       "rename the attribute.",
                    (int)target->name_len, target->name);
        jj_dict_set(r, ns.v.d, jj_str(target->name, target->name_len), v);
        return;
    }
    /* tuple unpacking */
    jj_check_undef(r, v);
    jj_list *items = jj_iter(r, v);
    if (items->n != target->body.n)
        jj_fail(r, items->n > target->body.n ? "too many values to unpack (expected %zu)"
                                              : "not enough values to unpack (expected %zu, got fewer)",
                target->body.n);
    for (size_t i = 0; i < items->n; i++) assign(r, target->body.items[i], items->items[i], f);
}

/* The body's output as a string. Its buffer is on the heap and listed in r->open_bufs, so a failure inside
 * (a longjmp past this frame) still frees it (jj_render_cleanup). */
static jj_value render_to_string(jj_render *r, const jj_nodes *body, jj_frame *f) {
    sy_buf *saved = r->out;
    jj_bufnode *node = jj_ralloc(r, sizeof *node);
    sy_buf_init(&node->b);
    node->next = r->open_bufs;
    r->open_bufs = node;
    r->out = &node->b;
    exec_body(r, body, f);
    r->out = saved;
    r->open_bufs = node->next;
    jj_value v = jj_str_copy(r, node->b.data ? node->b.data : "", node->b.len);
    sy_buf_free(&node->b);
    return v;
}

sy_buf *jj_buf_begin(jj_render *r) {
    jj_bufnode *node = jj_ralloc(r, sizeof *node);
    sy_buf_init(&node->b);
    node->next = r->open_bufs;
    r->open_bufs = node;
    return &node->b;
}

void jj_buf_end(jj_render *r, sy_buf *b) {
    for (jj_bufnode **p = &r->open_bufs; *p != NULL; p = &(*p)->next)
        if (&(*p)->b == b) {
            *p = (*p)->next;
            break;
        }
    sy_buf_free(b);
}

void jj_render_cleanup(jj_render *r) {
    for (jj_bufnode *n = r->open_bufs; n != NULL; n = n->next) sy_buf_free(&n->b);
    r->open_bufs = NULL;
}

static jj_value call_macro(jj_render *r, jj_macro *m, const jj_callargs *a, jj_value caller) {
    const jj_node *def = m->def;
    if (++r->depth > r->max_depth) jj_fail(r, "macro calls nest deeper than %u", r->max_depth);
    jj_frame *f = jj_frame_new(r, m->closure);
    size_t np = def->n_params;
    if (a->n_pos > np && def->kind == JN_MACRO)
        jj_fail(r, "macro '%s' takes not more than %zu argument(s)", def->name, np);
    bool *set = jj_ralloc(r, (np + 1) * sizeof *set);
    memset(set, 0, (np + 1) * sizeof *set);
    for (size_t i = 0; i < a->n_pos && i < np; i++) {
        jj_frame_set(r, f, def->params[i], strlen(def->params[i]), a->pos[i]);
        set[i] = true;
    }
    jj_dict *kwargs = jj_dict_new(r, 0);
    for (size_t k = 0; k < a->n_kw; k++) {
        size_t i;
        for (i = 0; i < np; i++)
            if (strcmp(def->params[i], a->kw_names[k]) == 0) break;
        if (i == np) {
            if (strcmp(a->kw_names[k], "caller") == 0) {
                caller = a->kw[k];
                continue;
            }
            jj_dict_set(r, kwargs, jj_cstr(a->kw_names[k]), a->kw[k]);
            continue;
        }
        jj_frame_set(r, f, def->params[i], strlen(def->params[i]), a->kw[k]);
        set[i] = true;
    }
    if (kwargs->n > 0 && def->kind == JN_MACRO)
        jj_fail(r, "macro '%s' takes no keyword argument '%s'", def->name, (const char *)kwargs->keys[0].v.s.p);
    for (size_t i = 0; i < np; i++) {
        if (set[i]) continue;
        jj_value v = def->defaults[i] ? eval(r, def->defaults[i], f)
                                      : jj_undef_msg(r, false, "parameter '%s' was not provided", def->params[i]);
        jj_frame_set(r, f, def->params[i], strlen(def->params[i]), v);
    }
    jj_list *varargs = jj_list_new(r, 0);
    for (size_t i = np; i < a->n_pos; i++) jj_list_push(r, varargs, a->pos[i]);
    jj_frame_set(r, f, "varargs", 7, jj_list_v(varargs));
    jj_frame_set(r, f, "kwargs", 6, jj_dict_v(kwargs));
    if (caller.type != JJ_UNDEF) jj_frame_set(r, f, "caller", 6, caller);
    uint32_t line = r->line;
    jj_value out = render_to_string(r, &def->body, f);
    r->line = line;
    r->depth--;
    return out;
}

static int exec_for(jj_render *r, const jj_node *n, jj_frame *f) {
    jj_value it = eval(r, n->b, f);
    r->line = n->line;
    if (it.type == JJ_UNDEF && it.v.u != NULL && it.v.u->security) jj_check_undef(r, it);
    jj_list *all = jj_iter(r, it);
    jj_frame *lf = jj_frame_new(r, f);
    jj_list *items = all;
    if (n->c != NULL) {
        items = jj_list_new(r, all->n);
        for (size_t i = 0; i < all->n; i++) {
            jj_step(r);
            assign(r, n->a, all->items[i], lf);
            if (jj_truthy(eval(r, n->c, lf))) jj_list_push(r, items, all->items[i]);
        }
    } /* no copy: the sandbox lets no template modify a list it walks */
    jj_loop *loop = jj_ralloc(r, sizeof *loop);
    memset(loop, 0, sizeof *loop);
    loop->items = items;
    jj_value outer = frame_lookup(r, f, "loop", 4);
    loop->parent = outer.type == JJ_LOOP ? outer.v.loop : NULL;
    loop->depth = loop->parent ? loop->parent->depth + 1 : 1;
    jj_value lv = {.type = JJ_LOOP};
    lv.v.loop = loop;
    for (size_t i = 0; i < items->n; i++) {
        jj_step(r);
        loop->index0 = i;
        jj_frame_set(r, lf, "loop", 4, lv);
        assign(r, n->a, items->items[i], lf);
        int flow = exec_body(r, &n->body, lf);
        if (flow == FLOW_BREAK) break;
    }
    if (items->n == 0 && n->else_body.n > 0) {
        jj_frame *ef = jj_frame_new(r, f);
        return exec_body(r, &n->else_body, ef) == FLOW_NORMAL ? FLOW_NORMAL : FLOW_NORMAL;
    }
    return FLOW_NORMAL;
}

static int exec_node(jj_render *r, const jj_node *n, jj_frame *f) {
    check_stack(r);
    r->line = n->line;
    switch (n->kind) {
    case JN_TEXT: jj_emit(r, n->value.v.s.p, n->value.v.s.n); return FLOW_NORMAL;
    case JN_OUTPUT: {
        jj_value v = eval(r, n->a, f);
        r->line = n->line;
        jj_step(r);
        if (v.type == JJ_STR) jj_emit(r, v.v.s.p, v.v.s.n);
        else if (v.type != JJ_UNDEF) {
            sy_buf *b = jj_buf_begin(r);
            jj_to_str(r, b, v);
            if (b->len > r->max_output) {
                jj_buf_end(r, b);
                jj_fail(r, "the rendered text exceeds %zu bytes", r->max_output);
            }
            jj_emit(r, b->data ? b->data : "", b->len);
            jj_buf_end(r, b);
        } else if (v.v.u != NULL && v.v.u->security) {
            /* printing an unsafe attribute renders nothing in jinja2 too */
        }
        return FLOW_NORMAL;
    }
    case JN_IF: {
        jj_value c = eval(r, n->a, f);
        if (jj_truthy(c)) return exec_body(r, &n->body, f);
        return exec_body(r, &n->else_body, f);
    }
    case JN_FOR: return exec_for(r, n, f);
    case JN_SET: {
        jj_value v = eval(r, n->b, f);
        r->line = n->line;
        assign(r, n->a, v, f);
        return FLOW_NORMAL;
    }
    case JN_SET_BLOCK: {
        jj_frame *bf = jj_frame_new(r, f);
        jj_value v = render_to_string(r, &n->body, bf);
        if (n->b != NULL) v = eval_filter(r, n->b, f, v);
        r->line = n->line;
        assign(r, n->a, v, f);
        return FLOW_NORMAL;
    }
    case JN_MACRO: {
        jj_macro *m = jj_ralloc(r, sizeof *m);
        m->def = n;
        m->closure = f;
        m->caller = jj_undef_v();
        jj_value v = {.type = JJ_MACRO};
        v.v.m = m;
        jj_frame_set(r, f, n->name, n->name_len, v);
        return FLOW_NORMAL;
    }
    case JN_CALL_BLOCK: {
        jj_macro *cm = jj_ralloc(r, sizeof *cm);
        cm->def = n;
        cm->closure = f;
        cm->caller = jj_undef_v();
        jj_value caller = {.type = JJ_MACRO};
        caller.v.m = cm;
        const jj_node *call = n->a;
        jj_value callee = eval(r, call->a, f);
        jj_callargs a;
        eval_args(r, &call->args, f, &a, NULL);
        r->line = n->line;
        jj_value out;
        if (callee.type == JJ_MACRO) {
            jj_step(r);
            out = call_macro(r, callee.v.m, &a, caller);
        } else {
            out = jj_call_value(r, callee, &a);
        }
        jj_value s = jj_stringify(r, out);
        jj_emit(r, s.v.s.p, s.v.s.n);
        return FLOW_NORMAL;
    }
    case JN_FILTER_BLOCK: {
        jj_frame *bf = jj_frame_new(r, f);
        jj_value v = render_to_string(r, &n->body, bf);
        v = eval_filter(r, n->b, f, v);
        jj_value s = jj_stringify(r, v);
        jj_emit(r, s.v.s.p, s.v.s.n);
        return FLOW_NORMAL;
    }
    case JN_GENERATION: {
        jj_frame *bf = jj_frame_new(r, f);
        jj_value v = render_to_string(r, &n->body, bf);
        jj_emit(r, v.v.s.p, v.v.s.n);
        return FLOW_NORMAL;
    }
    case JN_WITH: {
        jj_frame *wf = jj_frame_new(r, f);
        for (size_t i = 0; i < n->else_body.n; i++) {
            const jj_node *s = n->else_body.items[i];
            assign(r, s->a, eval(r, s->b, f), wf);
        }
        return exec_body(r, &n->body, wf);
    }
    case JN_BREAK: return FLOW_BREAK;
    case JN_CONTINUE: return FLOW_CONTINUE;
    default: jj_fail(r, "internal error: node %d is no statement", n->kind);
    }
}

static int exec_body(jj_render *r, const jj_nodes *body, jj_frame *f) {
    for (size_t i = 0; i < body->n; i++) {
        int flow = exec_node(r, body->items[i], f);
        if (flow != FLOW_NORMAL) return flow;
    }
    return FLOW_NORMAL;
}

int jj_render_template(jj_render *r, const sy_chat_jinja *t) {
    exec_body(r, &t->root->body, r->globals);
    return 0;
}
