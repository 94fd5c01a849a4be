/*
 * jinja2's filters, tests and globals, transformers' additions (tojson without ASCII escaping, raise_exception,
 * strftime_now, dict, namespace refusing underscore names), and the methods of Python's str, dict and list that
 * templates call. The sandbox is ImmutableSandboxedEnvironment's: methods that modify a list or dict are refused
 * (SecurityError when called), as are attributes starting with '_'.
 *
 * Case mapping (upper, lower, title, capitalize) covers ASCII; other characters are kept as they are.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chat/chat_jinja_internal.h"

#define SAFE_LEN(n) ((int)((n) > 100 ? 100 : (n)))

const jj_value *jj_arg(const jj_callargs *a, size_t pos_index, const char *name) {
    if (name != NULL)
        for (size_t i = 0; i < a->n_kw; i++)
            if (strcmp(a->kw_names[i], name) == 0) return &a->kw[i];
    if (pos_index != (size_t)-1 && pos_index < a->n_pos) return &a->pos[pos_index];
    return NULL;
}

static jj_value str_arg(jj_render *r, const jj_value *v, const char *what) {
    if (v == NULL || v->type != JJ_STR) jj_fail(r, "%s must be a string", what);
    return *v;
}

static int64_t int_arg(jj_render *r, const jj_value *v, int64_t dflt, const char *what) {
    if (v == NULL || v->type == JJ_NONE) return dflt;
    if (v->type == JJ_INT) return v->v.i;
    if (v->type == JJ_BOOL) return v->v.b;
    jj_fail(r, "%s must be an integer", what);
}

static bool bool_arg(const jj_value *v, bool dflt) { return v == NULL ? dflt : jj_truthy(*v); }

/* ------------------------------------------------------------------------------------------------------------
 * Strings */

static size_t utf8_next(const char *p, size_t n, size_t i) {
    i++;
    while (i < n && ((unsigned char)p[i] & 0xC0) == 0x80) i++;
    return i;
}

static uint32_t utf8_cp(const char *p, size_t n, size_t i) {
    unsigned char c = (unsigned char)p[i];
    if (c < 0x80) return c;
    int k = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : 1;
    uint32_t cp = c & (0x3F >> k);
    for (int j = 1; j <= k && i + (size_t)j < n; j++) cp = (cp << 6) | ((unsigned char)p[i + (size_t)j] & 0x3F);
    return cp;
}

/* Python's str.isspace() characters */
static bool py_space(uint32_t c) {
    return (c >= 9 && c <= 13) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

static bool in_chars(uint32_t c, jj_value chars) {
    for (size_t i = 0; i < chars.v.s.n; i = utf8_next(chars.v.s.p, chars.v.s.n, i))
        if (utf8_cp(chars.v.s.p, chars.v.s.n, i) == c) return true;
    return false;
}

static jj_value strip(jj_value s, const jj_value *chars, bool left, bool right) {
    const char *p = s.v.s.p;
    size_t n = s.v.s.n, a = 0, b = n;
    bool ws = chars == NULL || chars->type == JJ_NONE;
    if (left)
        while (a < b) {
            uint32_t c = utf8_cp(p, n, a);
            if (!(ws ? py_space(c) : in_chars(c, *chars))) break;
            a = utf8_next(p, n, a);
        }
    if (right)
        while (b > a) {
            size_t k = b - 1;
            while (k > a && ((unsigned char)p[k] & 0xC0) == 0x80) k--;
            uint32_t c = utf8_cp(p, n, k);
            if (!(ws ? py_space(c) : in_chars(c, *chars))) break;
            b = k;
        }
    return jj_str(p + a, b - a);
}

static char ascii_up(char c) { return c >= 'a' && c <= 'z' ? (char)(c - 32) : c; }
static char ascii_low(char c) { return c >= 'A' && c <= 'Z' ? (char)(c + 32) : c; }

static jj_value map_case(jj_render *r, jj_value s, int mode) {
    char *m = jj_ralloc(r, s.v.s.n + 1);
    bool word_start = true;
    for (size_t i = 0; i < s.v.s.n; i++) {
        char c = s.v.s.p[i];
        switch (mode) {
        case 0: m[i] = ascii_up(c); break;
        case 1: m[i] = ascii_low(c); break;
        case 2: m[i] = i == 0 ? ascii_up(c) : ascii_low(c); break; /* capitalize */
        case 3: {                                                  /* str.title: letters after non-letters up */
            bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || ((unsigned char)c >= 0x80);
            m[i] = alpha ? (word_start ? ascii_up(c) : ascii_low(c)) : c;
            word_start = !alpha;
            break;
        }
        default: {                                                 /* jinja2's |title: words split at -, space, ([{< */
            bool sep = c == ' ' || c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || c == '\t' || c == '\n' ||
                       c == '\r' || c == '\f' || c == '\v';
            m[i] = sep ? c : (word_start ? ascii_up(c) : ascii_low(c));
            word_start = sep;
        }
        }
    }
    m[s.v.s.n] = '\0';
    return jj_str(m, s.v.s.n);
}

static const char *find_bytes(const char *h, size_t hn, const char *nd, size_t nn, size_t from) {
    if (nn == 0) return from <= hn ? h + from : NULL;
    for (size_t i = from; i + nn <= hn; i++)
        if (memcmp(h + i, nd, nn) == 0) return h + i;
    return NULL;
}

static jj_value str_replace(jj_render *r, jj_value s, jj_value old, jj_value new_, int64_t count) {
    sy_buf *b = jj_buf_begin(r);
    size_t i = 0;
    int64_t done = 0;
    if (old.v.s.n == 0) {
        /* Python inserts new before every character and at the end */
        while (count < 0 || done < count) {
            sy_buf_append(b, new_.v.s.p, new_.v.s.n);
            done++;
            if (i >= s.v.s.n) break;
            size_t j = utf8_next(s.v.s.p, s.v.s.n, i);
            sy_buf_append(b, s.v.s.p + i, j - i);
            i = j;
            if (b->len > r->max_output) break;
        }
        sy_buf_append(b, s.v.s.p + i, s.v.s.n - i);
    } else {
        while (count < 0 || done < count) {
            const char *f = find_bytes(s.v.s.p, s.v.s.n, old.v.s.p, old.v.s.n, i);
            if (f == NULL) break;
            size_t at = (size_t)(f - s.v.s.p);
            sy_buf_append(b, s.v.s.p + i, at - i);
            sy_buf_append(b, new_.v.s.p, new_.v.s.n);
            i = at + old.v.s.n;
            done++;
            if (b->len > r->max_output) break;
        }
        sy_buf_append(b, s.v.s.p + i, s.v.s.n - i);
    }
    if (b->len > r->max_output) {
        jj_buf_end(r, b);
        jj_fail(r, "the rendered text exceeds %zu bytes", r->max_output);
    }
    jj_value v = jj_str_copy(r, b->data ? b->data : "", b->len);
    jj_buf_end(r, b);
    return v;
}

static jj_value str_split(jj_render *r, jj_value s, const jj_value *sep, int64_t maxsplit, bool from_right) {
    jj_list *l = jj_list_new(r, 0);
    const char *p = s.v.s.p;
    size_t n = s.v.s.n;
    if (sep == NULL || sep->type == JJ_NONE) {
        /* runs of whitespace; leading and trailing ones dropped */
        if (!from_right) {
            size_t i = 0;
            int64_t splits = 0;
            for (;;) {
                while (i < n && py_space(utf8_cp(p, n, i))) i = utf8_next(p, n, i);
                if (i >= n) break;
                if (maxsplit >= 0 && splits >= maxsplit) {
                    size_t e = n;
                    while (e > i) {
                        size_t k = e - 1;
                        while (k > i && ((unsigned char)p[k] & 0xC0) == 0x80) k--;
                        if (!py_space(utf8_cp(p, n, k))) break;
                        e = k;
                    }
                    jj_list_push(r, l, jj_str(p + i, e - i));
                    break;
                }
                size_t j = i;
                while (j < n && !py_space(utf8_cp(p, n, j))) j = utf8_next(p, n, j);
                jj_list_push(r, l, jj_str(p + i, j - i));
                splits++;
                i = j;
            }
            return jj_list_v(l);
        }
        /* rsplit(None): collect words, then join the first ones when maxsplit limits */
        jj_value all = str_split(r, s, NULL, -1, false);
        jj_list *w = all.v.l;
        if (maxsplit < 0 || (size_t)maxsplit >= w->n) return all;
        size_t keep = w->n - (size_t)maxsplit;
        const char *start = w->items[0].v.s.p;
        const char *end = w->items[keep - 1].v.s.p + w->items[keep - 1].v.s.n;
        jj_list_push(r, l, jj_str(start, (size_t)(end - start)));
        for (size_t i = keep; i < w->n; i++) jj_list_push(r, l, w->items[i]);
        return jj_list_v(l);
    }
    if (sep->type != JJ_STR) jj_fail(r, "must be str or None, not %s", jj_type_name(*sep));
    size_t sn = sep->v.s.n;
    if (sn == 0) jj_fail(r, "empty separator");
    if (!from_right) {
        size_t i = 0;
        int64_t splits = 0;
        for (;;) {
            const char *f = (maxsplit >= 0 && splits >= maxsplit) ? NULL : find_bytes(p, n, sep->v.s.p, sn, i);
            if (f == NULL) {
                jj_list_push(r, l, jj_str(p + i, n - i));
                break;
            }
            jj_list_push(r, l, jj_str(p + i, (size_t)(f - p) - i));
            i = (size_t)(f - p) + sn;
            splits++;
            jj_step(r);
        }
        return jj_list_v(l);
    }
    /* from the right */
    jj_list *rev = jj_list_new(r, 0);
    size_t end = n;
    int64_t splits = 0;
    for (;;) {
        size_t found = (size_t)-1;
        if (!(maxsplit >= 0 && splits >= maxsplit) && end >= sn)
            for (size_t k = end - sn + 1; k-- > 0;)
                if (memcmp(p + k, sep->v.s.p, sn) == 0) {
                    found = k;
                    break;
                }
        if (found == (size_t)-1) {
            jj_list_push(r, rev, jj_str(p, end));
            break;
        }
        jj_list_push(r, rev, jj_str(p + found + sn, end - found - sn));
        end = found;
        splits++;
        jj_step(r);
    }
    for (size_t i = rev->n; i-- > 0;) jj_list_push(r, l, rev->items[i]);
    return jj_list_v(l);
}

static bool affix_match(jj_render *r, jj_value s, jj_value affix, bool at_end) {
    if (affix.type == JJ_LIST && affix.v.l->tuple) {
        for (size_t i = 0; i < affix.v.l->n; i++)
            if (affix_match(r, s, affix.v.l->items[i], at_end)) return true;
        return false;
    }
    if (affix.type != JJ_STR)
        jj_fail(r, "%s first arg must be str or a tuple of str, not %s", at_end ? "endswith" : "startswith",
                jj_type_name(affix));
    if (affix.v.s.n > s.v.s.n) return false;
    return memcmp(s.v.s.p + (at_end ? s.v.s.n - affix.v.s.n : 0), affix.v.s.p, affix.v.s.n) == 0;
}

/* str.format with {} {0} {name} and {{ }}; format specs and conversions are refused */
static jj_value str_format(jj_render *r, jj_value fmt, const jj_callargs *a) {
    sy_buf *b = jj_buf_begin(r);
    size_t auto_idx = 0;
    const char *p = fmt.v.s.p;
    size_t n = fmt.v.s.n;
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (c == '{' && i + 1 < n && p[i + 1] == '{') {
            sy_buf_puts(b, "{");
            i++;
        } else if (c == '}' && i + 1 < n && p[i + 1] == '}') {
            sy_buf_puts(b, "}");
            i++;
        } else if (c == '{') {
            size_t j = i + 1;
            while (j < n && p[j] != '}') j++;
            if (j >= n) {
                jj_buf_end(r, b);
                jj_fail(r, "Single '{' encountered in format string");
            }
            const char *field = p + i + 1;
            size_t fn = j - i - 1;
            const jj_value *v = NULL;
            if (memchr(field, ':', fn) || memchr(field, '!', fn) || memchr(field, '.', fn) || memchr(field, '[', fn)) {
                jj_buf_end(r, b);
                jj_fail(r, "format specs, conversions and field attributes in str.format are not supported");
            }
            if (fn == 0) {
                v = auto_idx < a->n_pos ? &a->pos[auto_idx] : NULL;
                auto_idx++;
            } else if (field[0] >= '0' && field[0] <= '9') {
                size_t idx = (size_t)strtoul(field, NULL, 10);
                v = idx < a->n_pos ? &a->pos[idx] : NULL;
            } else {
                for (size_t k = 0; k < a->n_kw; k++)
                    if (strlen(a->kw_names[k]) == fn && memcmp(a->kw_names[k], field, fn) == 0) v = &a->kw[k];
                if (v == NULL) {
                    jj_buf_end(r, b);
                    jj_fail(r, "'%.*s'", SAFE_LEN(fn), field);
                }
            }
            if (v == NULL) {
                jj_buf_end(r, b);
                jj_fail(r, "Replacement index %zu out of range for positional args tuple", auto_idx ? auto_idx - 1 : 0);
            }
            jj_to_str(r, b, *v);
            i = j;
        } else if (c == '}') {
            jj_buf_end(r, b);
            jj_fail(r, "Single '}' encountered in format string");
        } else {
            sy_buf_append(b, &c, 1);
        }
    }
    jj_value v = jj_str_copy(r, b->data ? b->data : "", b->len);
    jj_buf_end(r, b);
    return v;
}

static int64_t cp_index(const char *p, size_t byte_off) { return (int64_t)jj_utf8_len(p, byte_off); }

/* splitlines as Python does it */
static jj_list *split_lines(jj_render *r, jj_value s, bool keepends) {
    jj_list *l = jj_list_new(r, 0);
    const char *p = s.v.s.p;
    size_t n = s.v.s.n, start = 0, i = 0;
    while (i < n) {
        uint32_t c = utf8_cp(p, n, i);
        size_t next = utf8_next(p, n, i);
        bool br = c == '\n' || c == '\r' || c == 0x0b || c == 0x0c || (c >= 0x1c && c <= 0x1e) || c == 0x85 ||
                  c == 0x2028 || c == 0x2029;
        if (br) {
            if (c == '\r' && next < n && p[next] == '\n') next++;
            jj_list_push(r, l, jj_str(p + start, (keepends ? next : i) - start));
            start = next;
        }
        i = next;
    }
    if (start < n) jj_list_push(r, l, jj_str(p + start, n - start));
    return l;
}

#define METHOD(name) static jj_value name(jj_render *r, jj_value self, const jj_callargs *a)

METHOD(m_strip) { return strip(self, jj_arg(a, 0, "chars"), true, true); }
METHOD(m_lstrip) { return strip(self, jj_arg(a, 0, "chars"), true, false); }
METHOD(m_rstrip) { return strip(self, jj_arg(a, 0, "chars"), false, true); }
METHOD(m_upper) { (void)a; return map_case(r, self, 0); }
METHOD(m_lower) { (void)a; return map_case(r, self, 1); }
METHOD(m_capitalize) { (void)a; return map_case(r, self, 2); }
METHOD(m_title) { (void)a; return map_case(r, self, 3); }
METHOD(m_split) { return str_split(r, self, jj_arg(a, 0, "sep"), int_arg(r, jj_arg(a, 1, "maxsplit"), -1, "maxsplit"), false); }
METHOD(m_rsplit) { return str_split(r, self, jj_arg(a, 0, "sep"), int_arg(r, jj_arg(a, 1, "maxsplit"), -1, "maxsplit"), true); }
METHOD(m_startswith) {
    const jj_value *x = jj_arg(a, 0, NULL);
    if (x == NULL) jj_fail(r, "startswith() takes at least 1 argument (0 given)");
    return jj_bool(affix_match(r, self, *x, false));
}
METHOD(m_endswith) {
    const jj_value *x = jj_arg(a, 0, NULL);
    if (x == NULL) jj_fail(r, "endswith() takes at least 1 argument (0 given)");
    return jj_bool(affix_match(r, self, *x, true));
}
METHOD(m_replace) {
    jj_value old = str_arg(r, jj_arg(a, 0, NULL), "replace() argument 1");
    jj_value nw = str_arg(r, jj_arg(a, 1, NULL), "replace() argument 2");
    return str_replace(r, self, old, nw, int_arg(r, jj_arg(a, 2, "count"), -1, "count"));
}
METHOD(m_find) {
    jj_value sub = str_arg(r, jj_arg(a, 0, NULL), "find() argument");
    const char *f = find_bytes(self.v.s.p, self.v.s.n, sub.v.s.p, sub.v.s.n, 0);
    return jj_int(f ? cp_index(self.v.s.p, (size_t)(f - self.v.s.p)) : -1);
}
METHOD(m_rfind) {
    jj_value sub = str_arg(r, jj_arg(a, 0, NULL), "rfind() argument");
    if (sub.v.s.n > self.v.s.n) return jj_int(-1);
    for (size_t k = self.v.s.n - sub.v.s.n + 1; k-- > 0;)
        if (memcmp(self.v.s.p + k, sub.v.s.p, sub.v.s.n) == 0) return jj_int(cp_index(self.v.s.p, k));
    return jj_int(-1);
}
METHOD(m_index) {
    jj_value v = m_find(r, self, a);
    if (v.v.i < 0) jj_fail(r, "substring not found");
    return v;
}
METHOD(m_count) {
    jj_value sub = str_arg(r, jj_arg(a, 0, NULL), "count() argument");
    if (sub.v.s.n == 0) return jj_int((int64_t)jj_utf8_len(self.v.s.p, self.v.s.n) + 1);
    int64_t k = 0;
    size_t i = 0;
    const char *f;
    while ((f = find_bytes(self.v.s.p, self.v.s.n, sub.v.s.p, sub.v.s.n, i)) != NULL) {
        k++;
        i = (size_t)(f - self.v.s.p) + sub.v.s.n;
    }
    return jj_int(k);
}
METHOD(m_join) {
    const jj_value *it = jj_arg(a, 0, NULL);
    if (it == NULL) jj_fail(r, "join() takes exactly one argument (0 given)");
    jj_list *items = jj_iter(r, *it);
    sy_buf *b = jj_buf_begin(r);
    for (size_t i = 0; i < items->n; i++) {
        if (items->items[i].type != JJ_STR) {
            jj_buf_end(r, b);
            jj_fail(r, "sequence item %zu: expected str instance, %s found", i, jj_type_name(items->items[i]));
        }
        if (i) sy_buf_append(b, self.v.s.p, self.v.s.n);
        sy_buf_append(b, items->items[i].v.s.p, items->items[i].v.s.n);
        if (b->len > r->max_output) {
            jj_buf_end(r, b);
            jj_fail(r, "the rendered text exceeds %zu bytes", r->max_output);
        }
    }
    jj_value v = jj_str_copy(r, b->data ? b->data : "", b->len);
    jj_buf_end(r, b);
    return v;
}
METHOD(m_format) { return str_format(r, self, a); }
METHOD(m_splitlines) { return jj_list_v(split_lines(r, self, bool_arg(jj_arg(a, 0, "keepends"), false))); }
METHOD(m_removeprefix) {
    jj_value x = str_arg(r, jj_arg(a, 0, NULL), "removeprefix() argument");
    if (x.v.s.n <= self.v.s.n && memcmp(self.v.s.p, x.v.s.p, x.v.s.n) == 0)
        return jj_str(self.v.s.p + x.v.s.n, self.v.s.n - x.v.s.n);
    return self;
}
METHOD(m_removesuffix) {
    jj_value x = str_arg(r, jj_arg(a, 0, NULL), "removesuffix() argument");
    if (x.v.s.n > 0 && x.v.s.n <= self.v.s.n && memcmp(self.v.s.p + self.v.s.n - x.v.s.n, x.v.s.p, x.v.s.n) == 0)
        return jj_str(self.v.s.p, self.v.s.n - x.v.s.n);
    return self;
}

static jj_value str_class(jj_value self, int kind) {
    /* isdigit, isalpha, isalnum, isspace, islower, isupper (ASCII letters; other characters count as letters) */
    if (self.v.s.n == 0) return jj_bool(false);
    bool cased = false;
    for (size_t i = 0; i < self.v.s.n; i = utf8_next(self.v.s.p, self.v.s.n, i)) {
        uint32_t c = utf8_cp(self.v.s.p, self.v.s.n, i);
        bool digit = c >= '0' && c <= '9';
        bool lower = c >= 'a' && c <= 'z', upper = c >= 'A' && c <= 'Z';
        bool alpha = lower || upper || (c >= 0x80 && !py_space(c));
        switch (kind) {
        case 0: if (!digit) return jj_bool(false); break;
        case 1: if (!alpha) return jj_bool(false); break;
        case 2: if (!alpha && !digit) return jj_bool(false); break;
        case 3: if (!py_space(c)) return jj_bool(false); break;
        case 4: if (upper) return jj_bool(false); cased |= lower; break;
        case 5: if (lower) return jj_bool(false); cased |= upper; break;
        }
    }
    return jj_bool(kind >= 4 ? cased : true);
}
METHOD(m_isdigit) { (void)r; (void)a; return str_class(self, 0); }
METHOD(m_isalpha) { (void)r; (void)a; return str_class(self, 1); }
METHOD(m_isalnum) { (void)r; (void)a; return str_class(self, 2); }
METHOD(m_isspace) { (void)r; (void)a; return str_class(self, 3); }
METHOD(m_islower) { (void)r; (void)a; return str_class(self, 4); }
METHOD(m_isupper) { (void)r; (void)a; return str_class(self, 5); }

METHOD(m_partition) {
    jj_value sep = str_arg(r, jj_arg(a, 0, NULL), "partition() argument");
    if (sep.v.s.n == 0) jj_fail(r, "empty separator");
    jj_list *l = jj_list_new(r, 3);
    l->tuple = true;
    const char *f = find_bytes(self.v.s.p, self.v.s.n, sep.v.s.p, sep.v.s.n, 0);
    if (f == NULL) {
        jj_list_push(r, l, self);
        jj_list_push(r, l, jj_str("", 0));
        jj_list_push(r, l, jj_str("", 0));
    } else {
        size_t at = (size_t)(f - self.v.s.p);
        jj_list_push(r, l, jj_str(self.v.s.p, at));
        jj_list_push(r, l, sep);
        jj_list_push(r, l, jj_str(self.v.s.p + at + sep.v.s.n, self.v.s.n - at - sep.v.s.n));
    }
    return jj_list_v(l);
}

/* dict methods */
static jj_value items_of(jj_render *r, jj_dict *d) {
    jj_list *l = jj_list_new(r, d->n);
    for (size_t i = 0; i < d->n; i++) {
        jj_list *t = jj_list_new(r, 2);
        t->tuple = true;
        jj_list_push(r, t, d->keys[i]);
        jj_list_push(r, t, d->vals[i]);
        jj_list_push(r, l, jj_list_v(t));
    }
    return jj_list_v(l);
}
METHOD(m_items) {
    (void)a;
    jj_value v = items_of(r, self.v.d);
    v.v.l->pytype = "dict_items";
    return v;
}
METHOD(m_keys) {
    (void)a;
    jj_list *l = jj_list_new(r, self.v.d->n);
    l->pytype = "dict_keys";
    for (size_t i = 0; i < self.v.d->n; i++) jj_list_push(r, l, self.v.d->keys[i]);
    return jj_list_v(l);
}
METHOD(m_values) {
    (void)a;
    jj_list *l = jj_list_new(r, self.v.d->n);
    l->pytype = "dict_values";
    for (size_t i = 0; i < self.v.d->n; i++) jj_list_push(r, l, self.v.d->vals[i]);
    return jj_list_v(l);
}
METHOD(m_get) {
    const jj_value *k = jj_arg(a, 0, NULL);
    if (k == NULL) jj_fail(r, "get expected at least 1 argument, got 0");
    jj_value *v = jj_dict_get(self.v.d, *k);
    if (v != NULL) return *v;
    const jj_value *d = jj_arg(a, 1, NULL);
    return d ? *d : jj_none();
}
METHOD(m_dict_copy) {
    (void)a;
    jj_dict *d = jj_dict_new(r, self.v.d->n);
    for (size_t i = 0; i < self.v.d->n; i++) jj_dict_set(r, d, self.v.d->keys[i], self.v.d->vals[i]);
    return jj_dict_v(d);
}
/* list methods */
METHOD(m_list_index) {
    const jj_value *x = jj_arg(a, 0, NULL);
    if (x == NULL) jj_fail(r, "index expected at least 1 argument, got 0");
    for (size_t i = 0; i < self.v.l->n; i++)
        if (jj_eq(self.v.l->items[i], *x)) return jj_int((int64_t)i);
    jj_fail(r, "value is not in list");
}
METHOD(m_list_count) {
    const jj_value *x = jj_arg(a, 0, NULL);
    if (x == NULL) jj_fail(r, "count() takes exactly one argument (0 given)");
    int64_t k = 0;
    for (size_t i = 0; i < self.v.l->n; i++) k += jj_eq(self.v.l->items[i], *x);
    return jj_int(k);
}
METHOD(m_list_copy) {
    (void)a;
    jj_list *l = jj_list_new(r, self.v.l->n);
    for (size_t i = 0; i < self.v.l->n; i++) jj_list_push(r, l, self.v.l->items[i]);
    return jj_list_v(l);
}

typedef struct method_entry {
    const char *name;
    jj_builtin_fn fn;
} method_entry;

static const method_entry STR_METHODS[] = {
    {"strip", m_strip}, {"lstrip", m_lstrip}, {"rstrip", m_rstrip}, {"upper", m_upper}, {"lower", m_lower},
    {"capitalize", m_capitalize}, {"title", m_title}, {"split", m_split}, {"rsplit", m_rsplit},
    {"startswith", m_startswith}, {"endswith", m_endswith}, {"replace", m_replace}, {"find", m_find},
    {"rfind", m_rfind}, {"index", m_index}, {"count", m_count}, {"join", m_join}, {"format", m_format},
    {"splitlines", m_splitlines}, {"removeprefix", m_removeprefix}, {"removesuffix", m_removesuffix},
    {"isdigit", m_isdigit}, {"isalpha", m_isalpha}, {"isalnum", m_isalnum}, {"isspace", m_isspace},
    {"islower", m_islower}, {"isupper", m_isupper}, {"partition", m_partition}, {NULL, NULL}};
static const method_entry DICT_METHODS[] = {{"items", m_items}, {"keys", m_keys}, {"values", m_values}, {"get", m_get},
                                            {"copy", m_dict_copy}, {NULL, NULL}};
static const method_entry LIST_METHODS[] = {{"index", m_list_index}, {"count", m_list_count}, {"copy", m_list_copy},
                                            {NULL, NULL}};
/* what ImmutableSandboxedEnvironment refuses (jinja2.sandbox._mutable_spec) */
static const char *const DICT_MUTATORS[] = {"clear", "pop", "popitem", "setdefault", "update", NULL};
static const char *const LIST_MUTATORS[] = {"append", "clear", "pop", "reverse", "insert", "sort", "extend", "remove", NULL};
/* str methods jinja2 would find but this engine does not implement */
static const char *const STR_OTHER[] = {"casefold", "center", "encode", "expandtabs", "format_map", "isascii",
                                        "isdecimal", "isidentifier", "isnumeric", "isprintable", "istitle", "ljust",
                                        "maketrans", "rindex", "rjust", "rpartition", "swapcase", "translate",
                                        "zfill", NULL};

static bool name_is(const char *a, const char *name, size_t n) { return strlen(a) == n && memcmp(a, name, n) == 0; }

static jj_value make_bound(jj_render *r, const char *name, jj_builtin_fn fn, jj_value self) {
    jj_func *f = jj_ralloc(r, sizeof *f);
    f->name = name;
    f->fn = fn;
    f->self = self;
    jj_value v = {.type = JJ_FUNC};
    v.v.fn = f;
    return v;
}

jj_value jj_method(jj_render *r, jj_value obj, const char *name, size_t n, bool *found) {
    const method_entry *table = NULL;
    const char *const *mut = NULL;
    if (obj.type == JJ_STR) table = STR_METHODS;
    else if (obj.type == JJ_DICT) {
        table = DICT_METHODS;
        mut = DICT_MUTATORS;
    } else if (obj.type == JJ_LIST && !obj.v.l->tuple) {
        table = LIST_METHODS;
        mut = LIST_MUTATORS;
    } else if (obj.type == JJ_LIST) {
        table = LIST_METHODS; /* tuple: index, count */
    }
    *found = false;
    if (table == NULL) return jj_undef_v();
    for (const method_entry *e = table; e->name; e++)
        if (name_is(e->name, name, n)) {
            *found = true;
            return make_bound(r, e->name, e->fn, obj);
        }
    if (mut != NULL)
        for (const char *const *m = mut; *m; m++)
            if (name_is(*m, name, n)) {
                *found = true;
                return jj_undef_msg(r, true, "access to attribute '%s' of '%s' object is unsafe.", *m, jj_type_name(obj));
            }
    if (obj.type == JJ_STR)
        for (const char *const *m = STR_OTHER; *m; m++)
            if (name_is(*m, name, n)) jj_fail(r, "str.%s() is not supported by this template engine", *m);
    return jj_undef_v();
}

/* ------------------------------------------------------------------------------------------------------------
 * tojson: json.dumps(x, ensure_ascii=False, indent, separators, sort_keys) */

static void json_str(sy_buf *b, const char *p, size_t n, bool ensure_ascii) {
    sy_buf_puts(b, "\"");
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        const char *esc = NULL;
        char tmp[16];
        if (ensure_ascii && c >= 0x80) {
            uint32_t cp = utf8_cp(p, n, i);
            size_t next = utf8_next(p, n, i);
            sy_buf_append(b, p + run, i - run);
            if (cp >= 0x10000) {
                uint32_t v = cp - 0x10000;
                sy_buf_printf(b, "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
            } else {
                sy_buf_printf(b, "\\u%04x", cp);
            }
            run = next;
            i = next - 1;
            continue;
        }
        if (c == '"') esc = "\\\"";
        else if (c == '\\') esc = "\\\\";
        else if (c == '\n') esc = "\\n";
        else if (c == '\r') esc = "\\r";
        else if (c == '\t') esc = "\\t";
        else if (c == '\b') esc = "\\b";
        else if (c == '\f') esc = "\\f";
        else if (c < 0x20) {
            snprintf(tmp, sizeof tmp, "\\u%04x", c);
            esc = tmp;
        }
        if (esc) {
            sy_buf_append(b, p + run, i - run);
            sy_buf_puts(b, esc);
            run = i + 1;
        }
    }
    sy_buf_append(b, p + run, n - run);
    sy_buf_puts(b, "\"");
}

static void json_newline(sy_buf *b, const char *indent, size_t indent_len, int level) {
    sy_buf_puts(b, "\n");
    for (int i = 0; i < level; i++) sy_buf_append(b, indent, indent_len);
}

static int cmp_keys(jj_render *r, jj_value a, jj_value b) { return jj_cmp(r, a, b); }

void jj_tojson(jj_render *r, sy_buf *b, jj_value v, const char *indent, size_t indent_len, int level, bool sort_keys,
               const char *item_sep, const char *key_sep, bool ensure_ascii) {
    jj_step(r);
    if (b->len > r->max_output) jj_fail(r, "the rendered text exceeds %zu bytes", r->max_output);
    if (level > (int)r->max_depth) jj_fail(r, "tojson: the value nests deeper than %u", r->max_depth);
    switch (v.type) {
    case JJ_NONE: sy_buf_puts(b, "null"); return;
    case JJ_BOOL: sy_buf_puts(b, v.v.b ? "true" : "false"); return;
    case JJ_INT: sy_buf_printf(b, "%lld", (long long)v.v.i); return;
    case JJ_FLOAT:
        if (isnan(v.v.f)) sy_buf_puts(b, "NaN");
        else if (isinf(v.v.f)) sy_buf_puts(b, v.v.f < 0 ? "-Infinity" : "Infinity");
        else jj_py_float(b, v.v.f);
        return;
    case JJ_STR: json_str(b, v.v.s.p, v.v.s.n, ensure_ascii); return;
    case JJ_LIST: {
        jj_list *l = v.v.l;
        if (l->pytype != NULL) jj_fail(r, "Object of type %s is not JSON serializable", l->pytype);
        if (l->n == 0) {
            sy_buf_puts(b, "[]");
            return;
        }
        sy_buf_puts(b, "[");
        for (size_t i = 0; i < l->n; i++) {
            if (i) sy_buf_puts(b, item_sep);
            if (indent) json_newline(b, indent, indent_len, level + 1);
            jj_tojson(r, b, l->items[i], indent, indent_len, level + 1, sort_keys, item_sep, key_sep, ensure_ascii);
        }
        if (indent) json_newline(b, indent, indent_len, level);
        sy_buf_puts(b, "]");
        return;
    }
    case JJ_DICT: {
        jj_dict *d = v.v.d;
        if (d->n == 0) {
            sy_buf_puts(b, "{}");
            return;
        }
        size_t *order = jj_ralloc(r, d->n * sizeof *order);
        for (size_t i = 0; i < d->n; i++) order[i] = i;
        if (sort_keys)
            for (size_t i = 1; i < d->n; i++) /* insertion sort: stable, as Python's sorted */
                for (size_t j = i; j > 0 && cmp_keys(r, d->keys[order[j - 1]], d->keys[order[j]]) > 0; j--) {
                    size_t t = order[j];
                    order[j] = order[j - 1];
                    order[j - 1] = t;
                }
        sy_buf_puts(b, "{");
        for (size_t k = 0; k < d->n; k++) {
            size_t i = order[k];
            if (k) sy_buf_puts(b, item_sep);
            if (indent) json_newline(b, indent, indent_len, level + 1);
            jj_value key = d->keys[i];
            if (key.type == JJ_STR) json_str(b, key.v.s.p, key.v.s.n, ensure_ascii);
            else if (key.type == JJ_INT || key.type == JJ_FLOAT || key.type == JJ_BOOL || key.type == JJ_NONE) {
                sy_buf *kb = jj_buf_begin(r);
                jj_tojson(r, kb, key, NULL, 0, 0, false, ", ", ": ", ensure_ascii);
                sy_buf_puts(b, "\"");
                sy_buf_append(b, kb->data, kb->len);
                sy_buf_puts(b, "\"");
                jj_buf_end(r, kb);
            } else {
                jj_fail(r, "keys must be str, int, float, bool or None, not %s", jj_type_name(key));
            }
            sy_buf_puts(b, key_sep);
            jj_tojson(r, b, d->vals[i], indent, indent_len, level + 1, sort_keys, item_sep, key_sep, ensure_ascii);
        }
        if (indent) json_newline(b, indent, indent_len, level);
        sy_buf_puts(b, "}");
        return;
    }
    default: jj_fail(r, "Object of type %s is not JSON serializable", jj_type_name(v));
    }
}

/* ------------------------------------------------------------------------------------------------------------
 * Filters */

#define FILTER(name) static jj_value name(jj_render *r, jj_value v, const jj_callargs *a)

static size_t py_len(jj_render *r, jj_value v) {
    switch (v.type) {
    case JJ_UNDEF: return 0;
    case JJ_STR: return jj_utf8_len(v.v.s.p, v.v.s.n);
    case JJ_LIST:
        if (jj_is_iterator(v)) jj_fail(r, "object of type '%s' has no len()", v.v.l->pytype);
        return v.v.l->n;
    case JJ_DICT:
    case JJ_NS: return v.v.d->n;
    case JJ_LOOP: jj_fail(r, "object of type 'LoopContext' has no len()");
    default: jj_fail(r, "object of type '%s' has no len()", jj_type_name(v));
    }
}

FILTER(f_length) { (void)a; return jj_int((int64_t)py_len(r, v)); }

FILTER(f_tojson) {
    const jj_value *ind = jj_arg(a, 1, "indent");
    const jj_value *seps = jj_arg(a, 2, "separators");
    const jj_value *sk = jj_arg(a, 3, "sort_keys");
    const jj_value *ea = jj_arg(a, 0, "ensure_ascii");
    const char *indent = NULL;
    size_t indent_len = 0;
    char spaces[64];
    if (ind != NULL && ind->type != JJ_NONE) {
        if (ind->type == JJ_STR) {
            indent = ind->v.s.p;
            indent_len = ind->v.s.n;
        } else {
            int64_t k = int_arg(r, ind, 0, "indent");
            if (k < 0) k = 0;
            if (k > 63) jj_fail(r, "tojson: indent is at most 63 here");
            memset(spaces, ' ', (size_t)k);
            spaces[k] = '\0';
            indent = spaces;
            indent_len = (size_t)k;
        }
    }
    const char *item_sep = indent ? "," : ", ", *key_sep = ": ";
    char isep[64], ksep[64];
    if (seps != NULL && seps->type != JJ_NONE) {
        if (seps->type != JJ_LIST || seps->v.l->n != 2 || seps->v.l->items[0].type != JJ_STR ||
            seps->v.l->items[1].type != JJ_STR || seps->v.l->items[0].v.s.n >= 63 || seps->v.l->items[1].v.s.n >= 63)
            jj_fail(r, "tojson: separators must be a pair of short strings");
        snprintf(isep, sizeof isep, "%.*s", (int)seps->v.l->items[0].v.s.n, seps->v.l->items[0].v.s.p);
        snprintf(ksep, sizeof ksep, "%.*s", (int)seps->v.l->items[1].v.s.n, seps->v.l->items[1].v.s.p);
        item_sep = isep;
        key_sep = ksep;
    }
    sy_buf *b = jj_buf_begin(r);
    jj_tojson(r, b, v, indent, indent_len, 0, sk ? jj_truthy(*sk) : false, item_sep, key_sep,
              ea != NULL && jj_truthy(*ea));
    jj_value s = jj_str_copy(r, b->data ? b->data : "", b->len);
    jj_buf_end(r, b);
    return s;
}

FILTER(f_string) { (void)a; return jj_stringify(r, v); }
FILTER(f_safe) {
    (void)a;
    jj_value s = jj_stringify(r, v);
    s.safe = 1;
    return s;
}

FILTER(f_trim) {
    jj_value s = jj_stringify(r, v);
    return strip(s, jj_arg(a, 0, "chars"), true, true);
}
FILTER(f_upper) { (void)a; return map_case(r, jj_stringify(r, v), 0); }
FILTER(f_lower) { (void)a; return map_case(r, jj_stringify(r, v), 1); }
FILTER(f_capitalize) { (void)a; return map_case(r, jj_stringify(r, v), 2); }
FILTER(f_title) { (void)a; return map_case(r, jj_stringify(r, v), 4); }

FILTER(f_default) {
    const jj_value *d = jj_arg(a, 0, "default_value");
    bool boolean = bool_arg(jj_arg(a, 1, "boolean"), false);
    if (v.type == JJ_UNDEF || (boolean && !jj_truthy(v))) return d ? *d : jj_str("", 0);
    return v;
}

FILTER(f_join) {
    const jj_value *sep = jj_arg(a, 0, "d");
    const jj_value *attr = jj_arg(a, 1, "attribute");
    jj_list *items = jj_iter(r, v);
    sy_buf *b = jj_buf_begin(r);
    jj_value sepv = sep ? jj_stringify(r, *sep) : jj_str("", 0);
    for (size_t i = 0; i < items->n; i++) {
        if (i) sy_buf_append(b, sepv.v.s.p, sepv.v.s.n);
        jj_value it = items->items[i];
        if (attr) it = attr->type == JJ_STR ? jj_getattr(r, it, attr->v.s.p, attr->v.s.n) : jj_getitem(r, it, *attr);
        jj_to_str(r, b, it);
        if (b->len > r->max_output) {
            jj_buf_end(r, b);
            jj_fail(r, "the rendered text exceeds %zu bytes", r->max_output);
        }
    }
    jj_value s = jj_str_copy(r, b->data ? b->data : "", b->len);
    jj_buf_end(r, b);
    return s;
}

FILTER(f_replace) {
    jj_value s = jj_stringify(r, v);
    const jj_value *old = jj_arg(a, 0, "old"), *nw = jj_arg(a, 1, "new");
    if (old == NULL || nw == NULL) jj_fail(r, "replace needs old and new");
    return str_replace(r, s, jj_stringify(r, *old), jj_stringify(r, *nw), int_arg(r, jj_arg(a, 2, "count"), -1, "count"));
}

FILTER(f_list) {
    (void)a;
    jj_list *src = jj_iter(r, v);
    jj_list *l = jj_list_new(r, src->n);
    for (size_t i = 0; i < src->n; i++) jj_list_push(r, l, src->items[i]);
    return jj_list_v(l);
}

FILTER(f_items) {
    (void)a;
    if (v.type == JJ_UNDEF) return jj_list_v(jj_list_new(r, 0));
    if (v.type != JJ_DICT) jj_fail(r, "Can only get item pairs from a mapping.");
    jj_value it = items_of(r, v.v.d);
    it.v.l->pytype = "generator";
    return it;
}

FILTER(f_first) {
    (void)a;
    jj_list *l = jj_iter(r, v);
    if (l->n == 0) return jj_undef_msg(r, false, "No first item, sequence was empty.");
    return l->items[0];
}

FILTER(f_last) {
    (void)a;
    if (v.type == JJ_DICT || v.type == JJ_UNDEF) jj_fail(r, "'%s' object is not reversible", jj_type_name(v));
    jj_list *l = jj_iter(r, v);
    if (l->n == 0) return jj_undef_msg(r, false, "No last item, sequence was empty.");
    return l->items[l->n - 1];
}

FILTER(f_reverse) {
    (void)a;
    if (v.type == JJ_STR) {
        jj_list *chars = jj_iter(r, v);
        char *m = jj_ralloc(r, v.v.s.n + 1);
        size_t o = 0;
        for (size_t i = chars->n; i-- > 0;) {
            memcpy(m + o, chars->items[i].v.s.p, chars->items[i].v.s.n);
            o += chars->items[i].v.s.n;
        }
        m[o] = '\0';
        return jj_str(m, o);
    }
    jj_list *src = jj_iter(r, v);
    jj_list *l = jj_list_new(r, src->n);
    if (v.type == JJ_LIST || v.type == JJ_DICT) l->pytype = v.type == JJ_DICT ? "dict_reversekeyiterator" : "list_reverseiterator";
    for (size_t i = src->n; i-- > 0;) jj_list_push(r, l, src->items[i]);
    return jj_list_v(l);
}

FILTER(f_int) {
    const jj_value *d = jj_arg(a, 0, "default");
    int64_t base = int_arg(r, jj_arg(a, 1, "base"), 10, "base");
    jj_value dflt = d ? *d : jj_int(0);
    switch (v.type) {
    case JJ_INT: return v;
    case JJ_BOOL: return jj_int(v.v.b);
    case JJ_FLOAT:
        if (!isfinite(v.v.f) || fabs(v.v.f) > 9.2e18) return dflt;
        return jj_int((int64_t)v.v.f);
    case JJ_STR: {
        char buf[64];
        jj_value s = strip(v, NULL, true, true);
        if (s.v.s.n == 0 || s.v.s.n >= sizeof buf) return dflt;
        memcpy(buf, s.v.s.p, s.v.s.n);
        buf[s.v.s.n] = '\0';
        char *end = NULL;
        long long x = strtoll(buf, &end, (int)base);
        if (end && *end == '\0') return jj_int(x);
        double f = strtod(buf, &end);
        if (end && *end == '\0' && isfinite(f) && fabs(f) < 9.2e18) return jj_int((int64_t)f);
        return dflt;
    }
    default: return dflt;
    }
}

FILTER(f_float) {
    const jj_value *d = jj_arg(a, 0, "default");
    jj_value dflt = d ? *d : jj_float(0.0);
    switch (v.type) {
    case JJ_INT: return jj_float((double)v.v.i);
    case JJ_BOOL: return jj_float(v.v.b);
    case JJ_FLOAT: return v;
    case JJ_STR: {
        char buf[64];
        jj_value s = strip(v, NULL, true, true);
        if (s.v.s.n == 0 || s.v.s.n >= sizeof buf) return dflt;
        memcpy(buf, s.v.s.p, s.v.s.n);
        buf[s.v.s.n] = '\0';
        char *end = NULL;
        double f = strtod(buf, &end);
        return end && *end == '\0' ? jj_float(f) : dflt;
    }
    default: return dflt;
    }
}

FILTER(f_abs) {
    (void)a;
    if (v.type == JJ_INT) {
        if (v.v.i == INT64_MIN) jj_fail(r, "integer overflow");
        return jj_int(v.v.i < 0 ? -v.v.i : v.v.i);
    }
    if (v.type == JJ_FLOAT) return jj_float(fabs(v.v.f));
    if (v.type == JJ_BOOL) return jj_int(v.v.b);
    jj_fail(r, "bad operand type for abs(): '%s'", jj_type_name(v));
}

FILTER(f_round) {
    int64_t prec = int_arg(r, jj_arg(a, 0, "precision"), 0, "precision");
    const jj_value *method = jj_arg(a, 1, "method");
    double x = v.type == JJ_INT ? (double)v.v.i : v.type == JJ_FLOAT ? v.v.f : v.type == JJ_BOOL ? v.v.b : NAN;
    if (isnan(x) && v.type != JJ_FLOAT) jj_fail(r, "round: a number is needed, not %s", jj_type_name(v));
    double scale = pow(10.0, (double)prec);
    const char *m = method && method->type == JJ_STR ? method->v.s.p : "common";
    double y;
    if (strncmp(m, "ceil", 4) == 0) y = ceil(x * scale) / scale;
    else if (strncmp(m, "floor", 5) == 0) y = floor(x * scale) / scale;
    else {
        /* Python's round(): half to even */
        double t = x * scale;
        double rr = nearbyint(t);
        y = rr / scale;
    }
    return jj_float(y);
}

static jj_value item_attr(jj_render *r, jj_value it, jj_value attr) {
    if (attr.type == JJ_INT) return jj_getitem(r, it, attr);
    if (attr.type != JJ_STR) jj_fail(r, "attribute must be a string");
    /* dotted paths: "a.b", with numeric parts as indices */
    const char *p = attr.v.s.p;
    size_t n = attr.v.s.n, i = 0;
    while (i <= n) {
        size_t j = i;
        while (j < n && p[j] != '.') j++;
        bool digits = j > i;
        for (size_t k = i; k < j; k++)
            if (p[k] < '0' || p[k] > '9') digits = false;
        if (digits) it = jj_getitem(r, it, jj_int(strtoll(p + i, NULL, 10)));
        else it = jj_getitem(r, it, jj_str(p + i, j - i));
        i = j + 1;
        if (j >= n) break;
    }
    return it;
}

static jj_value apply_named_filter(jj_render *r, jj_value name, jj_value v, const jj_callargs *rest) {
    if (name.type != JJ_STR) jj_fail(r, "a filter name must be a string");
    char fname[64];
    snprintf(fname, sizeof fname, "%.*s", SAFE_LEN(name.v.s.n), name.v.s.p);
    if (!jj_filter_exists(fname)) jj_fail(r, "No filter named '%s' found.", fname);
    return jj_apply_filter(r, fname, v, rest);
}

FILTER(f_map) {
    jj_list *src = jj_truthy(v) ? jj_iter(r, v) : jj_list_new(r, 0); /* jinja2: `if value:` first */
    jj_list *l = jj_list_new(r, src->n);
    l->pytype = "generator";
    const jj_value *attr = jj_arg(a, (size_t)-1, "attribute");
    if (attr != NULL) {
        const jj_value *dflt = jj_arg(a, (size_t)-1, "default");
        for (size_t i = 0; i < src->n; i++) {
            jj_value x = item_attr(r, src->items[i], *attr);
            if (x.type == JJ_UNDEF && dflt) x = *dflt;
            jj_list_push(r, l, x);
        }
        return jj_list_v(l);
    }
    if (a->n_pos == 0) jj_fail(r, "map requires a filter argument");
    jj_callargs rest = {a->pos + 1, a->n_pos - 1, a->kw, a->kw_names, a->n_kw};
    for (size_t i = 0; i < src->n; i++) jj_list_push(r, l, apply_named_filter(r, a->pos[0], src->items[i], &rest));
    return jj_list_v(l);
}

static bool run_test(jj_render *r, const jj_callargs *a, size_t name_pos, jj_value x) {
    if (a->n_pos <= name_pos) return jj_truthy(x);
    jj_value name = a->pos[name_pos];
    if (name.type != JJ_STR) jj_fail(r, "a test name must be a string");
    char tname[64];
    snprintf(tname, sizeof tname, "%.*s", SAFE_LEN(name.v.s.n), name.v.s.p);
    if (!jj_test_exists(tname)) jj_fail(r, "No test named '%s'.", tname);
    jj_callargs rest = {a->pos + name_pos + 1, a->n_pos - name_pos - 1, a->kw, a->kw_names, a->n_kw};
    return jj_apply_test(r, tname, x, &rest);
}

static jj_value select_common(jj_render *r, jj_value v, const jj_callargs *a, bool by_attr, bool keep) {
    jj_list *src = jj_truthy(v) ? jj_iter(r, v) : jj_list_new(r, 0); /* jinja2: `if value:` first */
    jj_list *l = jj_list_new(r, src->n);
    l->pytype = "generator";
    if (by_attr && a->n_pos == 0) jj_fail(r, "Missing parameter for attribute name");
    for (size_t i = 0; i < src->n; i++) {
        jj_step(r);
        jj_value x = by_attr ? item_attr(r, src->items[i], a->pos[0]) : src->items[i];
        if (run_test(r, a, by_attr ? 1 : 0, x) == keep) jj_list_push(r, l, src->items[i]);
    }
    return jj_list_v(l);
}

FILTER(f_select) { return select_common(r, v, a, false, true); }
FILTER(f_reject) { return select_common(r, v, a, false, false); }
FILTER(f_selectattr) { return select_common(r, v, a, true, true); }
FILTER(f_rejectattr) { return select_common(r, v, a, true, false); }

static int cmp_ci(jj_render *r, jj_value x, jj_value y, bool case_sensitive) {
    if (!case_sensitive && x.type == JJ_STR && y.type == JJ_STR) {
        x = map_case(r, x, 1);
        y = map_case(r, y, 1);
    }
    return jj_cmp(r, x, y);
}

static void stable_sort(jj_render *r, jj_value *items, jj_value *keys, size_t n, bool reverse, bool case_sensitive) {
    for (size_t i = 1; i < n; i++) {
        for (size_t j = i; j > 0; j--) {
            jj_step(r);
            int c = cmp_ci(r, keys[j - 1], keys[j], case_sensitive);
            if (reverse ? c >= 0 : c <= 0) break;
            jj_value t = items[j];
            items[j] = items[j - 1];
            items[j - 1] = t;
            t = keys[j];
            keys[j] = keys[j - 1];
            keys[j - 1] = t;
        }
    }
}

FILTER(f_sort) {
    bool reverse = bool_arg(jj_arg(a, 0, "reverse"), false);
    bool cs = bool_arg(jj_arg(a, 1, "case_sensitive"), false);
    const jj_value *attr = jj_arg(a, 2, "attribute");
    jj_list *src = jj_iter(r, v);
    jj_list *l = jj_list_new(r, src->n);
    jj_value *keys = jj_ralloc(r, (src->n + 1) * sizeof *keys);
    for (size_t i = 0; i < src->n; i++) {
        jj_list_push(r, l, src->items[i]);
        keys[i] = attr ? item_attr(r, src->items[i], *attr) : src->items[i];
    }
    stable_sort(r, l->items, keys, l->n, reverse, cs);
    return jj_list_v(l);
}

FILTER(f_dictsort) {
    bool cs = bool_arg(jj_arg(a, 0, "case_sensitive"), false);
    const jj_value *by = jj_arg(a, 1, "by");
    bool reverse = bool_arg(jj_arg(a, 2, "reverse"), false);
    if (v.type != JJ_DICT) jj_fail(r, "dictsort: a mapping is needed");
    bool by_value = by && by->type == JJ_STR && by->v.s.n == 5 && memcmp(by->v.s.p, "value", 5) == 0;
    jj_value items = items_of(r, v.v.d);
    jj_list *l = items.v.l;
    jj_value *keys = jj_ralloc(r, (l->n + 1) * sizeof *keys);
    for (size_t i = 0; i < l->n; i++) keys[i] = l->items[i].v.l->items[by_value ? 1 : 0];
    stable_sort(r, l->items, keys, l->n, reverse, cs);
    return items;
}

FILTER(f_unique) {
    bool cs = bool_arg(jj_arg(a, 0, "case_sensitive"), false);
    const jj_value *attr = jj_arg(a, 1, "attribute");
    jj_list *src = jj_iter(r, v);
    jj_list *l = jj_list_new(r, src->n);
    l->pytype = "generator";
    jj_list *seen = jj_list_new(r, src->n);
    for (size_t i = 0; i < src->n; i++) {
        jj_value k = attr ? item_attr(r, src->items[i], *attr) : src->items[i];
        if (!cs && k.type == JJ_STR) k = map_case(r, k, 1);
        bool dup = false;
        for (size_t j = 0; j < seen->n && !dup; j++) dup = jj_eq(seen->items[j], k);
        if (!dup) {
            jj_list_push(r, seen, k);
            jj_list_push(r, l, src->items[i]);
        }
    }
    return jj_list_v(l);
}

static jj_value min_max(jj_render *r, jj_value v, const jj_callargs *a, bool want_max) {
    bool cs = bool_arg(jj_arg(a, 0, "case_sensitive"), false);
    const jj_value *attr = jj_arg(a, 1, "attribute");
    jj_list *src = jj_iter(r, v);
    if (src->n == 0) return jj_undef_msg(r, false, "No aggregated item, sequence was empty.");
    size_t best = 0;
    for (size_t i = 1; i < src->n; i++) {
        jj_value x = attr ? item_attr(r, src->items[i], *attr) : src->items[i];
        jj_value y = attr ? item_attr(r, src->items[best], *attr) : src->items[best];
        int c = cmp_ci(r, x, y, cs);
        if (want_max ? c > 0 : c < 0) best = i;
    }
    return src->items[best];
}
FILTER(f_max) { return min_max(r, v, a, true); }
FILTER(f_min) { return min_max(r, v, a, false); }

FILTER(f_sum) {
    const jj_value *attr = jj_arg(a, 0, "attribute");
    const jj_value *start = jj_arg(a, 1, "start");
    jj_list *src = jj_iter(r, v);
    jj_value acc = start ? *start : jj_int(0);
    for (size_t i = 0; i < src->n; i++) {
        jj_value x = attr ? item_attr(r, src->items[i], *attr) : src->items[i];
        if (!((acc.type == JJ_INT || acc.type == JJ_FLOAT || acc.type == JJ_BOOL) &&
              (x.type == JJ_INT || x.type == JJ_FLOAT || x.type == JJ_BOOL)))
            jj_fail(r, "unsupported operand type(s) for +: '%s' and '%s'", jj_type_name(acc), jj_type_name(x));
        if (acc.type == JJ_FLOAT || x.type == JJ_FLOAT)
            acc = jj_float((acc.type == JJ_FLOAT ? acc.v.f : (double)(acc.type == JJ_INT ? acc.v.i : acc.v.b)) +
                           (x.type == JJ_FLOAT ? x.v.f : (double)(x.type == JJ_INT ? x.v.i : x.v.b)));
        else {
            int64_t s;
            int64_t xa = acc.type == JJ_INT ? acc.v.i : acc.v.b, xb = x.type == JJ_INT ? x.v.i : x.v.b;
            if (__builtin_add_overflow(xa, xb, &s)) jj_fail(r, "integer overflow");
            acc = jj_int(s);
        }
    }
    return acc;
}

FILTER(f_indent) {
    const jj_value *w = jj_arg(a, 0, "width");
    bool first = bool_arg(jj_arg(a, 1, "first"), false);
    bool blank = bool_arg(jj_arg(a, 2, "blank"), false);
    jj_value ind;
    char spaces[256];
    if (w != NULL && w->type == JJ_STR) ind = *w;
    else {
        int64_t k = int_arg(r, w, 4, "width");
        if (k < 0) k = 0;
        if (k > 255) jj_fail(r, "indent: width is at most 255 here");
        memset(spaces, ' ', (size_t)k);
        ind = jj_str_copy(r, spaces, (size_t)k);
    }
    jj_value s = jj_stringify(r, v);
    /* jinja2 appends a newline so splitlines keeps a trailing empty line */
    char *withnl = jj_ralloc(r, s.v.s.n + 2);
    memcpy(withnl, s.v.s.p, s.v.s.n);
    withnl[s.v.s.n] = '\n';
    withnl[s.v.s.n + 1] = '\0';
    jj_list *lines = split_lines(r, jj_str(withnl, s.v.s.n + 1), false);
    sy_buf *b = jj_buf_begin(r);
    if (first) sy_buf_append(b, ind.v.s.p, ind.v.s.n);
    for (size_t i = 0; i < lines->n; i++) {
        jj_value ln = lines->items[i];
        if (i > 0) {
            sy_buf_puts(b, "\n");
            if (blank || ln.v.s.n > 0) sy_buf_append(b, ind.v.s.p, ind.v.s.n);
        }
        sy_buf_append(b, ln.v.s.p, ln.v.s.n);
        if (b->len > r->max_output) {
            jj_buf_end(r, b);
            jj_fail(r, "the rendered text exceeds %zu bytes", r->max_output);
        }
    }
    jj_value out = jj_str_copy(r, b->data ? b->data : "", b->len);
    jj_buf_end(r, b);
    return out;
}

jj_value jj_html_escape(jj_render *r, jj_value s) {
    sy_buf *b = jj_buf_begin(r);
    for (size_t i = 0; i < s.v.s.n; i++) {
        char c = s.v.s.p[i];
        switch (c) {
        case '&': sy_buf_puts(b, "&amp;"); break;
        case '<': sy_buf_puts(b, "&lt;"); break;
        case '>': sy_buf_puts(b, "&gt;"); break;
        case '"': sy_buf_puts(b, "&#34;"); break;
        case '\'': sy_buf_puts(b, "&#39;"); break;
        default: sy_buf_append(b, &c, 1);
        }
    }
    jj_value out = jj_str_copy(r, b->data ? b->data : "", b->len);
    jj_buf_end(r, b);
    out.safe = 1;
    return out;
}

FILTER(f_escape) {
    (void)a;
    if (v.type == JJ_STR && v.safe) return v;
    return jj_html_escape(r, jj_stringify(r, v));
}

FILTER(f_wordcount) {
    (void)a;
    jj_value s = jj_stringify(r, v);
    int64_t k = 0;
    bool in_word = false;
    for (size_t i = 0; i < s.v.s.n; i = utf8_next(s.v.s.p, s.v.s.n, i)) {
        uint32_t c = utf8_cp(s.v.s.p, s.v.s.n, i);
        bool w = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
                 (c >= 0x80 && !py_space(c));
        if (w && !in_word) k++;
        in_word = w;
    }
    return jj_int(k);
}

FILTER(f_truncate) {
    int64_t length = int_arg(r, jj_arg(a, 0, "length"), 255, "length");
    bool killwords = bool_arg(jj_arg(a, 1, "killwords"), false);
    const jj_value *endv = jj_arg(a, 2, "end");
    int64_t leeway = int_arg(r, jj_arg(a, 3, "leeway"), 5, "leeway");
    jj_value s = jj_stringify(r, v);
    jj_value end = endv ? jj_stringify(r, *endv) : jj_cstr("...");
    int64_t n = (int64_t)jj_utf8_len(s.v.s.p, s.v.s.n);
    int64_t endn = (int64_t)jj_utf8_len(end.v.s.p, end.v.s.n);
    if (length < endn) jj_fail(r, "expected length >= %lld, got %lld", (long long)endn, (long long)length);
    if (leeway < 0) jj_fail(r, "expected leeway >= 0, got %lld", (long long)leeway);
    if (n <= length + leeway) return s;
    int64_t keep = length - endn;
    jj_callargs none = {0};
    (void)none;
    size_t off = 0;
    for (int64_t i = 0; i < keep; i++) off = utf8_next(s.v.s.p, s.v.s.n, off);
    jj_value head = jj_str(s.v.s.p, off);
    if (!killwords) {
        /* drop the last (partial) word: rsplit(" ", 1)[0] */
        const char *sp = NULL;
        for (size_t k = head.v.s.n; k-- > 0;)
            if (head.v.s.p[k] == ' ') {
                sp = head.v.s.p + k;
                break;
            }
        if (sp) head.v.s.n = (size_t)(sp - head.v.s.p);
    }
    char *m = jj_ralloc(r, head.v.s.n + end.v.s.n + 1);
    memcpy(m, head.v.s.p, head.v.s.n);
    memcpy(m + head.v.s.n, end.v.s.p, end.v.s.n);
    m[head.v.s.n + end.v.s.n] = '\0';
    return jj_str(m, head.v.s.n + end.v.s.n);
}

FILTER(f_batch) {
    int64_t size = int_arg(r, jj_arg(a, 0, "linecount"), 0, "linecount");
    const jj_value *fill = jj_arg(a, 1, "fill_with");
    if (size <= 0) jj_fail(r, "batch: linecount must be positive");
    jj_list *src = jj_iter(r, v);
    jj_list *out = jj_list_new(r, 0);
    out->pytype = "generator";
    jj_list *cur = NULL;
    for (size_t i = 0; i < src->n; i++) {
        if (cur == NULL || cur->n == (size_t)size) {
            cur = jj_list_new(r, (size_t)size);
            jj_list_push(r, out, jj_list_v(cur));
        }
        jj_list_push(r, cur, src->items[i]);
    }
    if (cur && fill && cur->n < (size_t)size)
        while (cur->n < (size_t)size) jj_list_push(r, cur, *fill);
    return jj_list_v(out);
}

FILTER(f_attr) {
    const jj_value *name = jj_arg(a, 0, "name");
    if (name == NULL || name->type != JJ_STR) jj_fail(r, "attr needs a name");
    return jj_getattr(r, v, name->v.s.p, name->v.s.n);
}

FILTER(f_center) {
    int64_t width = int_arg(r, jj_arg(a, 0, "width"), 80, "width");
    jj_value s = jj_stringify(r, v);
    int64_t n = (int64_t)jj_utf8_len(s.v.s.p, s.v.s.n);
    if (width <= n) return s;
    if (width > 4096) jj_fail(r, "center: width is at most 4096 here");
    int64_t pad = width - n, left = pad / 2 + (pad & width & 1);
    char *m = jj_ralloc(r, s.v.s.n + (size_t)pad + 1);
    memset(m, ' ', (size_t)left);
    memcpy(m + left, s.v.s.p, s.v.s.n);
    memset(m + left + s.v.s.n, ' ', (size_t)(pad - left));
    m[s.v.s.n + (size_t)pad] = '\0';
    return jj_str(m, s.v.s.n + (size_t)pad);
}

typedef struct filter_entry {
    const char *name;
    jj_builtin_fn fn;
} filter_entry;

static const filter_entry FILTERS[] = {
    {"abs", f_abs}, {"attr", f_attr}, {"batch", f_batch}, {"capitalize", f_capitalize}, {"center", f_center},
    {"count", f_length}, {"d", f_default}, {"default", f_default}, {"dictsort", f_dictsort}, {"e", f_escape},
    {"escape", f_escape}, {"first", f_first}, {"float", f_float}, {"forceescape", f_escape}, {"indent", f_indent},
    {"int", f_int}, {"items", f_items}, {"join", f_join}, {"last", f_last}, {"length", f_length}, {"list", f_list},
    {"lower", f_lower}, {"map", f_map}, {"max", f_max}, {"min", f_min}, {"reject", f_reject},
    {"rejectattr", f_rejectattr}, {"replace", f_replace}, {"reverse", f_reverse}, {"round", f_round},
    {"safe", f_safe}, {"select", f_select}, {"selectattr", f_selectattr}, {"sort", f_sort}, {"string", f_string},
    {"sum", f_sum}, {"title", f_title}, {"tojson", f_tojson}, {"trim", f_trim}, {"truncate", f_truncate},
    {"unique", f_unique}, {"upper", f_upper}, {"wordcount", f_wordcount}, {NULL, NULL}};

bool jj_filter_exists(const char *name) {
    for (const filter_entry *e = FILTERS; e->name; e++)
        if (strcmp(e->name, name) == 0) return true;
    return false;
}

jj_value jj_apply_filter(jj_render *r, const char *name, jj_value v, const jj_callargs *a) {
    for (const filter_entry *e = FILTERS; e->name; e++)
        if (strcmp(e->name, name) == 0) {
            /* filters that operate on strings raise on an unsafe (sandbox-refused) value, as jinja2 does */
            if (v.type == JJ_UNDEF && v.v.u != NULL && v.v.u->security) jj_check_undef(r, v);
            return e->fn(r, v, a);
        }
    jj_fail(r, "No filter named '%s' found.", name);
}

/* ------------------------------------------------------------------------------------------------------------
 * Tests */

#define TEST(name) static bool name(jj_render *r, jj_value v, const jj_callargs *a)

static const jj_value *need(jj_render *r, const jj_callargs *a, const char *test) {
    const jj_value *x = jj_arg(a, 0, NULL);
    if (x == NULL) jj_fail(r, "test '%s' needs an argument", test);
    return x;
}

TEST(t_defined) { (void)r; (void)a; return v.type != JJ_UNDEF; }
TEST(t_undefined) { (void)r; (void)a; return v.type == JJ_UNDEF; }
TEST(t_none) { (void)r; (void)a; return v.type == JJ_NONE; }
TEST(t_string) { (void)r; (void)a; return v.type == JJ_STR; }
TEST(t_number) { (void)r; (void)a; return v.type == JJ_INT || v.type == JJ_FLOAT || v.type == JJ_BOOL; }
TEST(t_integer) { (void)r; (void)a; return v.type == JJ_INT; }
TEST(t_float) { (void)r; (void)a; return v.type == JJ_FLOAT; }
TEST(t_boolean) { (void)r; (void)a; return v.type == JJ_BOOL; }
TEST(t_true) { (void)r; (void)a; return v.type == JJ_BOOL && v.v.b; }
TEST(t_false) { (void)r; (void)a; return v.type == JJ_BOOL && !v.v.b; }
TEST(t_mapping) { (void)r; (void)a; return v.type == JJ_DICT; }
TEST(t_iterable) {
    (void)r;
    (void)a;
    return v.type == JJ_STR || v.type == JJ_LIST || v.type == JJ_DICT || v.type == JJ_UNDEF;
}
TEST(t_sequence) { (void)r; (void)a; return v.type == JJ_STR || v.type == JJ_LIST || v.type == JJ_DICT; }
TEST(t_callable) { (void)r; (void)a; return v.type == JJ_MACRO || v.type == JJ_FUNC; }
TEST(t_odd) {
    (void)a;
    if (v.type != JJ_INT) jj_fail(r, "test 'odd' needs an integer");
    return (v.v.i % 2) != 0;
}
TEST(t_even) {
    (void)a;
    if (v.type != JJ_INT) jj_fail(r, "test 'even' needs an integer");
    return (v.v.i % 2) == 0;
}
TEST(t_divisibleby) {
    const jj_value *x = need(r, a, "divisibleby");
    if (v.type != JJ_INT || x->type != JJ_INT) jj_fail(r, "test 'divisibleby' needs integers");
    if (x->v.i == 0) jj_fail(r, "integer division or modulo by zero");
    return v.v.i % x->v.i == 0;
}
TEST(t_eq) { return jj_eq(v, *need(r, a, "eq")); }
TEST(t_ne) { return !jj_eq(v, *need(r, a, "ne")); }
TEST(t_lt) { return jj_cmp(r, v, *need(r, a, "lt")) < 0; }
TEST(t_le) { return jj_cmp(r, v, *need(r, a, "le")) <= 0; }
TEST(t_gt) { return jj_cmp(r, v, *need(r, a, "gt")) > 0; }
TEST(t_ge) { return jj_cmp(r, v, *need(r, a, "ge")) >= 0; }
TEST(t_in) {
    const jj_value *seq = need(r, a, "in");
    switch (seq->type) {
    case JJ_LIST:
        for (size_t i = 0; i < seq->v.l->n; i++)
            if (jj_eq(seq->v.l->items[i], v)) return true;
        return false;
    case JJ_DICT: return jj_dict_get(seq->v.d, v) != NULL;
    case JJ_STR:
        if (v.type != JJ_STR) jj_fail(r, "'in <string>' requires string as left operand");
        return find_bytes(seq->v.s.p, seq->v.s.n, v.v.s.p, v.v.s.n, 0) != NULL;
    default: jj_fail(r, "argument of type '%s' is not iterable", jj_type_name(*seq));
    }
}
TEST(t_sameas) {
    const jj_value *x = need(r, a, "sameas");
    if (v.type != x->type) return false;
    switch (v.type) {
    case JJ_NONE:
    case JJ_UNDEF: return true;
    case JJ_BOOL: return v.v.b == x->v.b;
    case JJ_INT: return v.v.i == x->v.i && v.v.i >= -5 && v.v.i <= 256; /* CPython's small-int cache */
    case JJ_STR: return v.v.s.p == x->v.s.p && v.v.s.n == x->v.s.n;
    case JJ_LIST: return v.v.l == x->v.l;
    case JJ_DICT:
    case JJ_NS: return v.v.d == x->v.d;
    default: return jj_eq(v, *x);
    }
}
TEST(t_lower) {
    (void)a;
    if (v.type != JJ_STR) jj_fail(r, "test 'lower' needs a string");
    return jj_truthy(str_class(v, 4)) || false;
}
TEST(t_upper) {
    (void)a;
    if (v.type != JJ_STR) jj_fail(r, "test 'upper' needs a string");
    return jj_truthy(str_class(v, 5));
}
TEST(t_filter) {
    (void)a;
    if (v.type != JJ_STR) return false;
    char n[64];
    snprintf(n, sizeof n, "%.*s", SAFE_LEN(v.v.s.n), v.v.s.p);
    (void)r;
    return jj_filter_exists(n);
}
TEST(t_test) {
    (void)a;
    if (v.type != JJ_STR) return false;
    char n[64];
    snprintf(n, sizeof n, "%.*s", SAFE_LEN(v.v.s.n), v.v.s.p);
    (void)r;
    return jj_test_exists(n);
}
TEST(t_escaped) { (void)r; (void)a; return v.safe; }

typedef bool (*test_fn)(jj_render *r, jj_value v, const jj_callargs *a);
typedef struct test_entry {
    const char *name;
    test_fn fn;
} test_entry;

static const test_entry TESTS[] = {
    {"boolean", t_boolean}, {"callable", t_callable}, {"defined", t_defined}, {"divisibleby", t_divisibleby},
    {"eq", t_eq}, {"equalto", t_eq}, {"==", t_eq}, {"escaped", t_escaped}, {"even", t_even}, {"false", t_false},
    {"filter", t_filter}, {"float", t_float}, {"ge", t_ge}, {">=", t_ge}, {"gt", t_gt}, {"greaterthan", t_gt},
    {">", t_gt}, {"in", t_in}, {"integer", t_integer}, {"iterable", t_iterable}, {"le", t_le}, {"<=", t_le},
    {"lower", t_lower}, {"lt", t_lt}, {"lessthan", t_lt}, {"<", t_lt}, {"mapping", t_mapping}, {"ne", t_ne},
    {"!=", t_ne}, {"none", t_none}, {"number", t_number}, {"odd", t_odd}, {"sameas", t_sameas},
    {"sequence", t_sequence}, {"string", t_string}, {"test", t_test}, {"true", t_true}, {"undefined", t_undefined},
    {"upper", t_upper}, {NULL, NULL}};

bool jj_test_exists(const char *name) {
    for (const test_entry *e = TESTS; e->name; e++)
        if (strcmp(e->name, name) == 0) return true;
    return false;
}

bool jj_apply_test(jj_render *r, const char *name, jj_value v, const jj_callargs *a) {
    for (const test_entry *e = TESTS; e->name; e++)
        if (strcmp(e->name, name) == 0) return e->fn(r, v, a);
    jj_fail(r, "No test named '%s'.", name);
}

/* ------------------------------------------------------------------------------------------------------------
 * Globals */

#define GLOBAL(name) static jj_value name(jj_render *r, jj_value self, const jj_callargs *a)

GLOBAL(g_raise_exception) {
    (void)self;
    const jj_value *m = jj_arg(a, 0, "message");
    if (m == NULL) jj_fail(r, "raise_exception() missing 1 required positional argument: 'message'");
    jj_value s = jj_stringify(r, *m);
    jj_fail_raw(r, s.v.s.p, s.v.s.n);
}

GLOBAL(g_strftime_now) {
    (void)self;
    const jj_value *f = jj_arg(a, 0, "format");
    if (f == NULL || f->type != JJ_STR) jj_fail(r, "strftime_now needs a format string");
    time_t t = (time_t)r->now_unix;
    struct tm tm;
    if (r->now_utc) gmtime_r(&t, &tm);
    else localtime_r(&t, &tm);
    char fmt[256], out[512];
    if (f->v.s.n >= sizeof fmt) jj_fail(r, "strftime_now: the format is too long");
    memcpy(fmt, f->v.s.p, f->v.s.n);
    fmt[f->v.s.n] = '\0';
    size_t n = strftime(out, sizeof out, fmt, &tm);
    return jj_str_copy(r, out, n);
}

GLOBAL(g_range) {
    (void)self;
    int64_t start = 0, stop, step = 1;
    if (a->n_pos == 1) stop = int_arg(r, &a->pos[0], 0, "range() argument");
    else if (a->n_pos == 2 || a->n_pos == 3) {
        start = int_arg(r, &a->pos[0], 0, "range() argument");
        stop = int_arg(r, &a->pos[1], 0, "range() argument");
        if (a->n_pos == 3) step = int_arg(r, &a->pos[2], 1, "range() argument");
    } else jj_fail(r, "range expected 1 to 3 arguments, got %zu", a->n_pos);
    if (step == 0) jj_fail(r, "range() arg 3 must not be zero");
    int64_t count = 0;
    if (step > 0 && stop > start) count = (stop - start + step - 1) / step;
    if (step < 0 && stop < start) count = (start - stop - step - 1) / (-step);
    if (count > 100000) jj_fail(r, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    jj_list *l = jj_list_new(r, (size_t)count);
    for (int64_t i = 0; i < count; i++) jj_list_push(r, l, jj_int(start + i * step));
    return jj_list_v(l);
}

static void dict_update_from(jj_render *r, jj_dict *d, const jj_callargs *a, bool check_names) {
    for (size_t i = 0; i < a->n_pos; i++) {
        jj_value x = a->pos[i];
        if (x.type == JJ_DICT || x.type == JJ_NS) {
            for (size_t k = 0; k < x.v.d->n; k++) {
                if (check_names && x.v.d->keys[k].type == JJ_STR && x.v.d->keys[k].v.s.n > 0 &&
                    x.v.d->keys[k].v.s.p[0] == '_')
                    jj_fail(r, "Chat templates cannot store underscore-prefixed attributes on a namespace, but got "
                               "'%.*s'. Please rename the attribute.",
                            SAFE_LEN(x.v.d->keys[k].v.s.n), x.v.d->keys[k].v.s.p);
                jj_dict_set(r, d, x.v.d->keys[k], x.v.d->vals[k]);
            }
        } else if (x.type == JJ_LIST) {
            for (size_t k = 0; k < x.v.l->n; k++) {
                jj_value pair = x.v.l->items[k];
                if (pair.type != JJ_LIST || pair.v.l->n != 2) jj_fail(r, "dictionary update sequence element #%zu has the wrong length", k);
                jj_dict_set(r, d, pair.v.l->items[0], pair.v.l->items[1]);
            }
        } else {
            jj_fail(r, "'%s' object is not iterable", jj_type_name(x));
        }
    }
    for (size_t i = 0; i < a->n_kw; i++) {
        if (check_names && a->kw_names[i][0] == '_')
            jj_fail(r, "Chat templates cannot store underscore-prefixed attributes on a namespace, but got '%s'. Please "
                       "rename the attribute.",
                    a->kw_names[i]);
        jj_dict_set(r, d, jj_cstr(a->kw_names[i]), a->kw[i]);
    }
}

GLOBAL(g_namespace) {
    (void)self;
    jj_dict *d = jj_dict_new(r, 0);
    dict_update_from(r, d, a, true);
    jj_value v = {.type = JJ_NS};
    v.v.d = d;
    return v;
}

GLOBAL(g_dict) {
    (void)self;
    jj_dict *d = jj_dict_new(r, 0);
    dict_update_from(r, d, a, false);
    return jj_dict_v(d);
}

/* joiner(sep): "" the first call, sep after; cycler(items...).next() */
struct jj_obj {
    int kind; /* 0 joiner, 1 cycler */
    jj_value sep;
    bool used;
    jj_list *items;
    size_t pos;
};

GLOBAL(m_joiner_call) {
    (void)a;
    (void)r;
    jj_obj *o = self.v.o;
    if (!o->used) {
        o->used = true;
        return jj_str("", 0);
    }
    return o->sep;
}

GLOBAL(g_joiner) {
    (void)self;
    const jj_value *sep = jj_arg(a, 0, "sep");
    jj_obj *o = jj_ralloc(r, sizeof *o);
    memset(o, 0, sizeof *o);
    o->sep = sep ? jj_stringify(r, *sep) : jj_cstr(", ");
    jj_value ov = {.type = JJ_OBJ};
    ov.v.o = o;
    return make_bound(r, "joiner", m_joiner_call, ov);
}

void jj_install_globals(jj_render *r, jj_frame *f) {
    static const struct {
        const char *name;
        jj_builtin_fn fn;
    } G[] = {{"raise_exception", g_raise_exception}, {"strftime_now", g_strftime_now}, {"range", g_range},
             {"namespace", g_namespace}, {"dict", g_dict}, {"joiner", g_joiner}};
    for (size_t i = 0; i < sizeof G / sizeof G[0]; i++)
        jj_frame_set(r, f, G[i].name, strlen(G[i].name), make_bound(r, G[i].name, G[i].fn, jj_none()));
}
