/* JSON Schema to GBNF: the subset OpenAI strict mode, Pydantic and llama.cpp's json-schema-to-grammar use (see
 * docs/grammar.md for the list). Every keyword is either honoured, ignored because it is an annotation, or an
 * error naming it and where it is (a JSON pointer): the API answers 400 rather than constraining less than the
 * schema says. Generated documents are always valid; where a keyword allows several spellings the grammar picks
 * a subset (fixed property order, canonical numbers, no escapes beyond what is needed). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "base/buf.h"
#include "base/utf8.h"
#include "grammar_internal.h"

#define MAX_RULES 20000
#define MAX_DEPTH 64       /* nesting of subschemas */
#define MAX_REGEX_DEPTH 64 /* nesting of pattern groups */
#define NUM_FRAC_DIGITS 6  /* fraction digits of bounded numbers: keeps I.F from rounding onto a bound */

typedef struct rule {
    char *name, *body;
} rule;

typedef struct refent {
    char *ref, *name;
} refent;

typedef struct sc {
    const cJSON *root;
    sy_schema_options o;
    rule *rules;
    size_t n_rules, cap_rules;
    refent *refs;
    size_t n_refs, cap_refs;
    cJSON *scratch; /* merged schemas live here until the end */
    int depth;
    bool failed;
    char *err;
    size_t err_cap;
} sc;

sy_schema_options sy_schema_defaults(void) {
    sy_schema_options o = {SY_SCHEMA_WS_COMPACT, true};
    return o;
}

static char *dupn(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}
static char *dup(const char *s) { return dupn(s, strlen(s)); }

static char *fail(sc *c, const char *ptr, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static char *fail(sc *c, const char *ptr, const char *fmt, ...) {
    if (c->failed) return NULL;
    c->failed = true;
    char msg[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    sy_gerr(c->err, c->err_cap, "%s (at %s)", msg, ptr && *ptr ? ptr : "#");
    return NULL;
}

static char *fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));
static char *fmt(const char *f, ...) {
    va_list ap;
    va_start(ap, f);
    int n = vsnprintf(NULL, 0, f, ap);
    va_end(ap);
    if (n < 0) return NULL;
    char *s = malloc((size_t)n + 1);
    if (s == NULL) return NULL;
    va_start(ap, f);
    vsnprintf(s, (size_t)n + 1, f, ap);
    va_end(ap);
    return s;
}

static bool name_taken(const sc *c, const char *name) {
    for (size_t i = 0; i < c->n_rules; i++)
        if (strcmp(c->rules[i].name, name) == 0) return true;
    return false;
}

/* A fresh rule name from a hint: [a-zA-Z0-9-] only (GBNF rule names), made unique with -N. */
static char *new_name(sc *c, const char *hint) {
    char base[96];
    size_t k = 0;
    for (const char *s = hint; *s && k < sizeof base - 12; s++) {
        char ch = *s;
        bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '-';
        if (!ok) ch = '-';
        if (ch == '-' && k > 0 && base[k - 1] == '-') continue;
        base[k++] = ch;
    }
    while (k > 0 && base[k - 1] == '-') k--;
    if (k == 0) base[k++] = 'r';
    base[k] = '\0';
    char cand[112];
    snprintf(cand, sizeof cand, "%s", base);
    for (int i = 1; name_taken(c, cand); i++) snprintf(cand, sizeof cand, "%s-%d", base, i);
    return dup(cand);
}

/* Adds `name ::= body` (takes body). An empty name reserves nothing. */
static char *add_rule_named(sc *c, char *name, char *body) {
    if (name == NULL || body == NULL) {
        free(name);
        free(body);
        return fail(c, NULL, "out of memory");
    }
    for (size_t i = 0; i < c->n_rules; i++)
        if (strcmp(c->rules[i].name, name) == 0) { /* a reserved name gets its body */
            free(c->rules[i].body);
            c->rules[i].body = body;
            return name;
        }
    if (c->n_rules >= MAX_RULES) {
        free(name);
        free(body);
        return fail(c, NULL, "schema needs more than %d grammar rules", MAX_RULES);
    }
    if (c->n_rules == c->cap_rules) {
        size_t cap = c->cap_rules ? c->cap_rules * 2 : 32;
        rule *r = realloc(c->rules, cap * sizeof *r);
        if (r == NULL) {
            free(name);
            free(body);
            return fail(c, NULL, "out of memory");
        }
        c->rules = r;
        c->cap_rules = cap;
    }
    c->rules[c->n_rules++] = (rule){name, body};
    return dup(name);
}

/* A rule for body under a name from hint; returns the name (malloc'd). Reuses an identical existing rule. */
static char *add_rule(sc *c, const char *hint, char *body) {
    if (body == NULL) return fail(c, NULL, "out of memory");
    for (size_t i = 0; i < c->n_rules; i++)
        if (c->rules[i].body && strcmp(c->rules[i].body, body) == 0 && strncmp(c->rules[i].name, hint, strlen(hint)) == 0) {
            free(body);
            return dup(c->rules[i].name);
        }
    char *name = new_name(c, hint);
    char *r = add_rule_named(c, name, body);
    return r;
}

/* ---- primitives ------------------------------------------------------------------------------------------- */

/* non-surrogate, non-NUL \uXXXX */
#define HEX "[0-9a-fA-F]"
#define U_ESC "\"u\" ([1-9a-cA-CefEF] " HEX "{3} | [dD] [0-7] " HEX "{2} | \"0\" ([1-9a-fA-F] " HEX "{2} | \"0\" ([1-9a-fA-F] " HEX " | \"0\" [1-9a-fA-F])))"

static const struct {
    const char *name, *body, *deps;
} prims[] = {
    {"boolean", "(\"true\" | \"false\") space", "space"},
    {"null", "\"null\" space", "space"},
    {"integral-part", "[0] | [1-9] [0-9]{0,15}", ""},
    {"decimal-part", "[0-9]{1,16}", ""},
    {"number", "(\"-\"? integral-part) (\".\" decimal-part)? ([eE] [-+]? [1-9] [0-9]?)? space",
     "integral-part decimal-part space"},
    {"integer", "(\"-\"? integral-part) space", "integral-part space"},
    {"char", "[^\"\\\\\\x7F\\x00-\\x1F] | [\\\\] ([\"\\\\/bfnrt] | " U_ESC ")", ""},
    {"string", "\"\\\"\" char* \"\\\"\" space", "char space"},
    {"value", "object | array | string | number | boolean | null", "object array string number boolean null"},
    {"object", "\"{\" space ( string \":\" space value (\",\" space string \":\" space value)* )? \"}\" space",
     "string value space"},
    {"array", "\"[\" space ( value (\",\" space value)* )? \"]\" space", "value space"},
    {"uuid", "\"\\\"\" " HEX "{8} \"-\" " HEX "{4} \"-\" " HEX "{4} \"-\" " HEX "{4} \"-\" " HEX "{12} \"\\\"\" space",
     "space"},
    /* dates Python's date.fromisoformat and RFC 3339 accept: years 0001-9999, days per month, Feb 29 in leap
     * years only */
    {"date-year", "[0-9]{3} [1-9] | [0-9]{2} [1-9] \"0\" | [0-9] [1-9] \"00\" | [1-9] \"000\"", ""},
    {"date-leap-year",
     "[0-9]{2} (\"0\" [48] | [2468] [048] | [13579] [26]) | (\"0\" [48] | [2468] [048] | [13579] [26]) \"00\"", ""},
    {"date", "date-year \"-\" ((\"0\" [13578] | \"1\" [02]) \"-\" (\"0\" [1-9] | [12] [0-9] | \"3\" [01]) | "
             "(\"0\" [469] | \"11\") \"-\" (\"0\" [1-9] | [12] [0-9] | \"30\") | "
             "\"02-\" (\"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8])) | date-leap-year \"-02-29\"",
     "date-year date-leap-year"},
    {"time", "([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] (\".\" [0-9]{1,6})? "
             "([zZ] | [-+] ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])",
     ""},
    {"date-time", "date [tT] time", "date time"},
    {"date-string", "\"\\\"\" date \"\\\"\" space", "date space"},
    {"time-string", "\"\\\"\" time \"\\\"\" space", "time space"},
    {"date-time-string", "\"\\\"\" date-time \"\\\"\" space", "date-time space"},
    {"ipv4-octet", "[0-9] | [1-9] [0-9] | \"1\" [0-9] [0-9] | \"2\" [0-4] [0-9] | \"25\" [0-5]", ""},
    {"ipv4-string", "\"\\\"\" ipv4-octet (\".\" ipv4-octet){3} \"\\\"\" space", "ipv4-octet space"},
    {"email-string", "\"\\\"\" [a-zA-Z0-9._%+-]{1,64} \"@\" [a-zA-Z0-9-]{1,63} (\".\" [a-zA-Z0-9-]{1,63}){0,4} \"\\\"\" space",
     "space"},
};

static void prim(sc *c, const char *name) {
    if (c->failed || name_taken(c, name)) return;
    if (strcmp(name, "space") == 0) {
        const char *ws = c->o.whitespace == SY_SCHEMA_WS_FLEXIBLE ? "| \" \" | \"\\n\" [ \\t]{0,20}" : "\"\"";
        free(add_rule_named(c, dup("space"), dup(ws)));
        return;
    }
    for (size_t i = 0; i < sizeof prims / sizeof prims[0]; i++) {
        if (strcmp(prims[i].name, name) != 0) continue;
        free(add_rule_named(c, dup(name), dup(prims[i].body)));
        /* its dependencies, recursively */
        char copy[128];
        snprintf(copy, sizeof copy, "%s", prims[i].deps);
        char *p = copy;
        while (*p) {
            char *e = strchr(p, ' ');
            if (e) *e = '\0';
            if (*p) prim(c, p);
            if (!e) break;
            p = e + 1;
        }
        return;
    }
}

static char *use(sc *c, const char *name) {
    prim(c, name);
    return dup(name);
}

/* ---- text ------------------------------------------------------------------------------------------------- */

/* A GBNF string literal matching exactly the bytes s[0..n). */
static void lit(sy_buf *b, const char *s, size_t n) {
    sy_buf_append(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\') {
            char e[2] = {'\\', (char)ch};
            sy_buf_append(b, e, 2);
        } else if (ch < 0x20 || ch == 0x7F) {
            sy_buf_printf(b, "\\x%02X", ch);
        } else {
            sy_buf_append(b, (const char *)&ch, 1);
        }
    }
    sy_buf_append(b, "\"", 1);
}

/* Strict UTF-8 (cJSON passes any bytes through strings; a grammar literal must be text). */
static bool utf8_ok(const char *s) { return sy_utf8_valid(s, strlen(s)); }

/* A literal for the compact JSON text of v, followed by space. */
static char *json_literal(sc *c, const cJSON *v) {
    char *text = cJSON_PrintUnformatted(v);
    if (text == NULL) return fail(c, NULL, "out of memory");
    if (!utf8_ok(text)) {
        free(text);
        return fail(c, NULL, "enum/const value is not valid UTF-8");
    }
    sy_buf b = {0};
    lit(&b, text, strlen(text));
    sy_buf_puts(&b, " space");
    free(text);
    prim(c, "space");
    return sy_buf_take(&b);
}

/* ---- integer and number ranges ----------------------------------------------------------------------------- */

static int ndigits(int64_t v) {
    int n = 1;
    while (v >= 10) {
        v /= 10;
        n++;
    }
    return n;
}

static int64_t pow10i(int n) {
    int64_t p = 1;
    while (n-- > 0) p *= 10;
    return p;
}

static void digit_class(sy_buf *b, int lo, int hi) {
    if (lo == hi) sy_buf_printf(b, "[%d]", lo);
    else sy_buf_printf(b, "[%d-%d]", lo, hi);
}

static void any_digits(sy_buf *b, int n) {
    if (n == 1) sy_buf_puts(b, " [0-9]");
    else if (n > 1) sy_buf_printf(b, " [0-9]{%d}", n);
}

static bool all_of(const char *s, int n, char ch) {
    for (int i = 0; i < n; i++)
        if (s[i] != ch) return false;
    return true;
}

/* Digit strings of length n that are >= s (ge) or <= s (!ge). */
static void bound_digits(sy_buf *b, const char *s, int n, bool ge) {
    if (n == 0) return;
    if (all_of(s, n, ge ? '0' : '9')) {
        any_digits(b, n);
        return;
    }
    int d = s[0] - '0';
    sy_buf_puts(b, " (");
    digit_class(b, d, d);
    bound_digits(b, s + 1, n - 1, ge);
    if (ge ? d < 9 : d > 0) {
        sy_buf_puts(b, " | ");
        if (ge) digit_class(b, d + 1, 9);
        else digit_class(b, 0, d - 1);
        any_digits(b, n - 1);
    }
    sy_buf_puts(b, ")");
}

/* Equal-length digit strings in [x, y]. */
static void same_len_range(sy_buf *b, const char *x, const char *y, int n) {
    int c = 0;
    while (c < n && x[c] == y[c]) c++;
    if (c > 0) lit(b, x, (size_t)c);
    if (c == n) return;
    int dx = x[c] - '0', dy = y[c] - '0', r = n - c - 1;
    bool xz = all_of(x + c + 1, r, '0'), y9 = all_of(y + c + 1, r, '9');
    sy_buf_puts(b, c > 0 ? " (" : "(");
    int mid_lo = xz ? dx : dx + 1, mid_hi = y9 ? dy : dy - 1;
    bool first = true;
    if (!xz) {
        digit_class(b, dx, dx);
        bound_digits(b, x + c + 1, r, true);
        first = false;
    }
    if (mid_lo <= mid_hi) {
        if (!first) sy_buf_puts(b, " | ");
        digit_class(b, mid_lo, mid_hi);
        any_digits(b, r);
        first = false;
    }
    if (!y9) {
        if (!first) sy_buf_puts(b, " | ");
        digit_class(b, dy, dy);
        bound_digits(b, y + c + 1, r, false);
    }
    sy_buf_puts(b, ")");
}

/* Canonical decimal integers in [a, b], 0 <= a <= b: alternatives by digit count. */
static void pos_range(sy_buf *b, int64_t a, int64_t hi) {
    sy_buf_puts(b, "(");
    bool first = true;
    for (int len = ndigits(a); len <= ndigits(hi); len++) {
        int64_t lo = len == 1 ? 0 : pow10i(len - 1), top = pow10i(len) - 1;
        if (lo < a) lo = a;
        if (top > hi) top = hi;
        if (lo > top) continue;
        char xs[24], ys[24];
        snprintf(xs, sizeof xs, "%lld", (long long)lo);
        snprintf(ys, sizeof ys, "%lld", (long long)top);
        if (!first) sy_buf_puts(b, " | ");
        same_len_range(b, xs, ys, len);
        first = false;
    }
    sy_buf_puts(b, ")");
}

#define INT_UNBOUNDED 9999999999999999ll /* 16 digits, as the plain integer rule */

/* Integers in [lo, hi] (inclusive) as canonical JSON numbers. */
static void int_range(sy_buf *b, int64_t lo, int64_t hi) {
    bool neg = lo < 0, pos = hi >= 0;
    sy_buf_puts(b, "(");
    if (neg) {
        sy_buf_puts(b, "\"-\" ");
        pos_range(b, hi < 0 ? -hi : 1, -lo);
    }
    if (neg && pos) sy_buf_puts(b, " | ");
    if (pos) pos_range(b, lo > 0 ? lo : 0, hi);
    sy_buf_puts(b, ")");
}

typedef struct bound {
    bool set, exclusive;
    double v;
} bound;

/* minimum/maximum with draft 4 (boolean exclusive*) and draft 6+ (numeric exclusive*) forms; the tighter wins. */
static bool read_bounds(sc *c, const cJSON *s, const char *ptr, bound *lo, bound *hi) {
    *lo = (bound){0};
    *hi = (bound){0};
    const cJSON *mn = cJSON_GetObjectItemCaseSensitive(s, "minimum"), *mx = cJSON_GetObjectItemCaseSensitive(s, "maximum");
    const cJSON *emn = cJSON_GetObjectItemCaseSensitive(s, "exclusiveMinimum"),
                *emx = cJSON_GetObjectItemCaseSensitive(s, "exclusiveMaximum");
    const cJSON *all[4] = {mn, mx, emn, emx};
    const char *names[4] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};
    for (int i = 0; i < 4; i++) {
        if (all[i] == NULL) continue;
        if (!cJSON_IsNumber(all[i]) && !(i >= 2 && cJSON_IsBool(all[i]))) {
            fail(c, ptr, "'%s' must be a number", names[i]);
            return false;
        }
        if (cJSON_IsNumber(all[i]) && !isfinite(all[i]->valuedouble)) {
            fail(c, ptr, "'%s' is not finite", names[i]);
            return false;
        }
    }
    if (mn) *lo = (bound){true, cJSON_IsTrue(emn), mn->valuedouble};
    if (mx) *hi = (bound){true, cJSON_IsTrue(emx), mx->valuedouble};
    if (emn && cJSON_IsNumber(emn) && (!lo->set || emn->valuedouble >= lo->v))
        *lo = (bound){true, true, emn->valuedouble};
    if (emx && cJSON_IsNumber(emx) && (!hi->set || emx->valuedouble <= hi->v))
        *hi = (bound){true, true, emx->valuedouble};
    if ((emn && cJSON_IsBool(emn) && !mn) || (emx && cJSON_IsBool(emx) && !mx)) {
        fail(c, ptr, "boolean exclusiveMinimum/exclusiveMaximum without minimum/maximum");
        return false;
    }
    return true;
}

static char *integer_rule(sc *c, const cJSON *s, const char *ptr) {
    bound lo, hi;
    if (!read_bounds(c, s, ptr, &lo, &hi)) return NULL;
    if (!lo.set && !hi.set) return use(c, "integer");
    int64_t a = -INT_UNBOUNDED, z = INT_UNBOUNDED;
    if (lo.set) {
        if (fabs(lo.v) > 1e15) return fail(c, ptr, "integer bound %g is too large (limit 1e15)", lo.v);
        double f = lo.exclusive ? floor(lo.v) + 1 : ceil(lo.v);
        a = (int64_t)f;
    }
    if (hi.set) {
        if (fabs(hi.v) > 1e15) return fail(c, ptr, "integer bound %g is too large (limit 1e15)", hi.v);
        double f = hi.exclusive ? ceil(hi.v) - 1 : floor(hi.v);
        z = (int64_t)f;
    }
    if (a > z) return fail(c, ptr, "no integer satisfies minimum/maximum");
    sy_buf b = {0};
    int_range(&b, a, z);
    sy_buf_puts(&b, " space");
    prim(c, "space");
    return sy_buf_take(&b);
}

/* Non-negative numbers I[.F] with magnitude in [A, B] (B < 0: unbounded), either end possibly exclusive. */
static bool mag_range(sy_buf *b, int64_t A, bool Aex, int64_t B, bool Bex, bool *first) {
    const char *frac = " (\".\" [0-9]{1,6})?";
    int64_t top = B < 0 ? 999999999999999ll : B - 1;
#define ALT() (*first ? (void)(*first = false) : sy_buf_puts(b, " | "))
    if (B >= 0 && A == B) {
        if (Aex || Bex) return true;
        ALT();
        sy_buf_printf(b, "\"%lld\" (\".\" [0]{1,6})?", (long long)A);
        return true;
    }
    if (A + 1 <= top) { /* strictly between: any fraction */
        ALT();
        pos_range(b, A + 1, top);
        sy_buf_puts(b, frac);
    }
    ALT();
    if (Aex) sy_buf_printf(b, "\"%lld.\" [0-9]{0,5} [1-9]", (long long)A);
    else sy_buf_printf(b, "\"%lld\"%s", (long long)A, frac);
    if (B >= 0 && !Bex) {
        ALT();
        sy_buf_printf(b, "\"%lld\" (\".\" [0]{1,6})?", (long long)B);
    }
#undef ALT
    return true;
}

static char *number_rule(sc *c, const cJSON *s, const char *ptr) {
    bound lo, hi;
    if (!read_bounds(c, s, ptr, &lo, &hi)) return NULL;
    if (!lo.set && !hi.set) return use(c, "number");
    const bound *bs[2] = {&lo, &hi};
    for (int i = 0; i < 2; i++) {
        if (!bs[i]->set) continue;
        if (bs[i]->v != floor(bs[i]->v))
            return fail(c, ptr, "number bound %g: only whole-number minimum/maximum are supported for numbers",
                        bs[i]->v);
        if (fabs(bs[i]->v) > (bs[i]->exclusive ? 1e9 : 1e15))
            return fail(c, ptr, "number bound %g is too large (limit %s)", bs[i]->v,
                        bs[i]->exclusive ? "1e9 when exclusive" : "1e15");
    }
    if (lo.set && hi.set && (lo.v > hi.v || (lo.v == hi.v && (lo.exclusive || hi.exclusive))))
        return fail(c, ptr, "no number satisfies minimum/maximum");
    sy_buf b = {0};
    sy_buf_puts(&b, "(");
    bool first = true;
    /* x >= 0 part */
    if (!hi.set || hi.v > 0 || (hi.v == 0 && !hi.exclusive)) {
        int64_t A = lo.set && lo.v >= 0 ? (int64_t)lo.v : 0;
        bool Aex = lo.set && lo.v >= 0 && lo.exclusive;
        mag_range(&b, A, Aex, hi.set ? (int64_t)hi.v : -1, hi.set && hi.exclusive, &first);
    }
    /* x < 0 part: "-" and the magnitude in (max(-hi, 0), -lo] */
    if (!lo.set || lo.v < 0) {
        if (!first) sy_buf_puts(&b, " | ");
        bool f2 = true;
        sy_buf_puts(&b, "\"-\" (");
        int64_t A = hi.set && hi.v < 0 ? (int64_t)-hi.v : 0;
        bool Aex = hi.set && hi.v < 0 ? hi.exclusive : true;
        mag_range(&b, A, Aex, lo.set ? (int64_t)-lo.v : -1, lo.set && lo.exclusive, &f2);
        sy_buf_puts(&b, ")");
        first = false;
    }
    sy_buf_puts(&b, ") space");
    prim(c, "space");
    return sy_buf_take(&b);
}

/* ---- pattern (regular expression subset) ------------------------------------------------------------------- */

typedef struct cset {
    uint32_t *r; /* pairs lo, hi, sorted, disjoint */
    size_t n, cap;
} cset;

static void cs_add(cset *s, uint32_t lo, uint32_t hi) {
    if (s->n + 2 > s->cap) {
        s->cap = s->cap ? s->cap * 2 : 16;
        s->r = realloc(s->r, s->cap * sizeof *s->r);
    }
    s->r[s->n++] = lo;
    s->r[s->n++] = hi;
}

static int cmp_pair(const void *a, const void *b) {
    const uint32_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

static void cs_norm(cset *s) {
    if (s->n == 0) return;
    qsort(s->r, s->n / 2, 2 * sizeof *s->r, cmp_pair);
    size_t k = 0;
    for (size_t i = 0; i < s->n; i += 2) {
        if (k > 0 && s->r[i] <= s->r[k - 1] + 1) {
            if (s->r[i + 1] > s->r[k - 1]) s->r[k - 1] = s->r[i + 1];
        } else {
            s->r[k++] = s->r[i];
            s->r[k++] = s->r[i + 1];
        }
    }
    s->n = k;
}

/* Complement over [0, top] (top 0x10FFFF, or 0x7F for the ASCII-only negations). */
static void cs_negate(cset *s, uint32_t top) {
    cs_norm(s);
    cset o = {0};
    uint32_t next = 0;
    for (size_t i = 0; i < s->n; i += 2) {
        if (s->r[i] > top) break;
        if (s->r[i] > next) cs_add(&o, next, s->r[i] - 1);
        next = s->r[i + 1] + 1;
    }
    if (next <= top) cs_add(&o, next, top);
    free(s->r);
    *s = o;
}

static void class_char(sy_buf *b, uint32_t cp) {
    if (cp == '\\' || cp == ']' || cp == '[' || cp == '"') sy_buf_printf(b, "\\%c", (char)cp);
    else if (cp == '-' || cp == '^' || cp < 0x20 || cp == 0x7F) sy_buf_printf(b, "\\x%02X", cp);
    else if (cp < 0x80) {
        char ch = (char)cp;
        sy_buf_append(b, &ch, 1);
    } else if (cp < 0x10000) sy_buf_printf(b, "\\u%04X", cp);
    else sy_buf_printf(b, "\\U%08X", cp);
}

/* GBNF for one JSON-string character (as it appears in the JSON text) whose decoded value is in the set:
 * plain characters raw, '"' and '\\' and control characters escaped. */
static bool emit_cset(sy_buf *b, cset *s) {
    cs_norm(s);
    cset plain = {0};
    bool special[0x80] = {0};
    for (size_t i = 0; i < s->n; i += 2) {
        uint32_t lo = s->r[i], hi = s->r[i + 1];
        for (uint32_t x = lo; x <= hi && x < 0x80; x++)
            if (x < 0x20 || x == '"' || x == '\\' || x == 0x7F) special[x] = true;
        /* plain: the range minus the specials and surrogates */
        uint32_t a = lo;
        while (a <= hi) {
            if (a < 0x20) {
                a = 0x20;
                continue;
            }
            uint32_t stop = hi;
            uint32_t cut[] = {'"', '\\', 0x7F};
            uint32_t skip_to = 0;
            for (int k = 0; k < 3; k++)
                if (cut[k] >= a && cut[k] <= stop) {
                    stop = cut[k] - 1;
                    skip_to = cut[k] + 1;
                    break;
                }
            if (a <= 0xDFFF && stop >= 0xD800) {
                if (a < 0xD800) {
                    if (!skip_to || 0xD7FF < stop) stop = 0xD7FF, skip_to = 0xE000;
                } else {
                    a = 0xE000;
                    continue;
                }
            }
            if (stop >= a) cs_add(&plain, a, stop);
            if (!skip_to || skip_to > hi || skip_to <= a) break;
            a = skip_to;
        }
    }
    bool first = true;
    sy_buf_puts(b, "(");
    if (plain.n) {
        sy_buf_puts(b, "[");
        for (size_t i = 0; i < plain.n; i += 2) {
            class_char(b, plain.r[i]);
            if (plain.r[i + 1] > plain.r[i]) {
                sy_buf_puts(b, "-");
                class_char(b, plain.r[i + 1]);
            }
        }
        sy_buf_puts(b, "]");
        first = false;
    }
    free(plain.r);
    for (uint32_t x = 0; x < 0x80; x++) {
        if (!special[x]) continue;
        if (!first) sy_buf_puts(b, " | ");
        first = false;
        switch (x) {
        case '"': sy_buf_puts(b, "\"\\\\\\\"\""); break;
        case '\\': sy_buf_puts(b, "\"\\\\\\\\\""); break;
        case '\n': sy_buf_puts(b, "\"\\\\n\""); break;
        case '\t': sy_buf_puts(b, "\"\\\\t\""); break;
        case '\r': sy_buf_puts(b, "\"\\\\r\""); break;
        case '\b': sy_buf_puts(b, "\"\\\\b\""); break;
        case '\f': sy_buf_puts(b, "\"\\\\f\""); break;
        default: sy_buf_printf(b, "\"\\\\u00%02x\"", x); break;
        }
    }
    sy_buf_puts(b, ")");
    return !first;
}

typedef struct rx {
    sc *c;
    const char *ptr;
    const char *s, *p, *end;
    int depth;
    bool failed;
} rx;

static bool rx_fail(rx *r, const char *what) {
    if (!r->failed) fail(r->c, r->ptr, "pattern: %s at offset %zu", what, (size_t)(r->p - r->s));
    r->failed = true;
    return false;
}

static bool rx_utf8(rx *r, uint32_t *cp) {
    size_t n = sy_utf8_decode((const unsigned char *)r->p, (size_t)(r->end - r->p), cp);
    if (n == 0) return rx_fail(r, "invalid UTF-8");
    r->p += n;
    return true;
}

static bool rx_hex(rx *r, int n, uint32_t *out) {
    uint32_t v = 0;
    for (int i = 0; i < n; i++) {
        if (r->p >= r->end) return rx_fail(r, "short hex escape");
        char ch = *r->p++;
        int d = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10 : -1;
        if (d < 0) return rx_fail(r, "bad hex escape");
        v = v * 16 + (uint32_t)d;
    }
    *out = v;
    return true;
}

/* An escape after '\\': a class (\d \w \s and negations, into set) or one char (*cp). Returns 1 for a class,
 * 0 for a char, -1 on error. */
static int rx_escape(rx *r, cset *set, uint32_t *cp, bool in_class) {
    if (r->p >= r->end) return rx_fail(r, "trailing backslash") ? -1 : -1;
    char e = *r->p++;
    switch (e) {
    case 'd': cs_add(set, '0', '9'); return 1;
    case 'w': cs_add(set, '0', '9'), cs_add(set, 'A', 'Z'), cs_add(set, 'a', 'z'), cs_add(set, '_', '_'); return 1;
    /* ASCII whitespace as Python's str.isspace sees it: \t-\r, \x1c-\x1f, space */
    case 's': cs_add(set, '\t', '\r'), cs_add(set, 0x1C, ' '); return 1;
    /* Python's \d \w \s match Unicode digits, letters and spaces too, so their complements are taken within
     * ASCII: never a character Python's class would have matched */
    case 'D':
    case 'W':
    case 'S': {
        cset t = {0};
        if (e == 'D') cs_add(&t, '0', '9');
        if (e == 'W') cs_add(&t, '0', '9'), cs_add(&t, 'A', 'Z'), cs_add(&t, 'a', 'z'), cs_add(&t, '_', '_');
        if (e == 'S') cs_add(&t, '\t', '\r'), cs_add(&t, 0x1C, ' ');
        cs_negate(&t, 0x7F);
        for (size_t i = 0; i < t.n; i += 2) cs_add(set, t.r[i], t.r[i + 1]);
        free(t.r);
        return 1;
    }
    case 'n': *cp = '\n'; return 0;
    case 't': *cp = '\t'; return 0;
    case 'r': *cp = '\r'; return 0;
    case 'f': *cp = '\f'; return 0;
    case 'v': *cp = '\v'; return 0;
    case '0': *cp = 0; return 0;
    case 'x': return rx_hex(r, 2, cp) ? 0 : -1;
    case 'u': return rx_hex(r, 4, cp) ? 0 : -1;
    case 'b':
        if (in_class) {
            *cp = '\b';
            return 0;
        }
        rx_fail(r, "\\b (word boundary) is not supported");
        return -1;
    default:
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9')) {
            rx_fail(r, "unsupported escape (backreferences, \\B, \\A, \\Z, \\p are not supported)");
            return -1;
        }
        r->p--;
        if (!rx_utf8(r, cp)) return -1;
        return 0;
    }
}

static bool rx_class(rx *r, cset *set) {
    bool neg = false, ascii_neg = false;
    if (r->p < r->end && *r->p == '^') {
        neg = true;
        r->p++;
    }
    bool first = true;
    while (r->p < r->end && (*r->p != ']' || first)) {
        first = false;
        uint32_t lo;
        if (*r->p == '\\') {
            r->p++;
            cset tmp = {0};
            int k = rx_escape(r, &tmp, &lo, true);
            if (k < 0) {
                free(tmp.r);
                return false;
            }
            if (k == 1) {
                for (size_t i = 0; i < tmp.n; i += 2) cs_add(set, tmp.r[i], tmp.r[i + 1]);
                free(tmp.r);
                ascii_neg = true;
                continue;
            }
            free(tmp.r);
        } else if (*r->p == '[' && r->p + 1 < r->end && r->p[1] == ':') {
            return rx_fail(r, "POSIX classes are not supported");
        } else if (!rx_utf8(r, &lo)) {
            return false;
        }
        uint32_t hi = lo;
        if (r->p + 1 < r->end && *r->p == '-' && r->p[1] != ']') {
            r->p++;
            if (*r->p == '\\') {
                r->p++;
                cset tmp = {0};
                int k = rx_escape(r, &tmp, &hi, true);
                free(tmp.r);
                if (k != 0) return k < 0 ? false : rx_fail(r, "class escape as a range end");
            } else if (!rx_utf8(r, &hi)) {
                return false;
            }
            if (hi < lo) return rx_fail(r, "bad character range");
        }
        cs_add(set, lo, hi);
    }
    if (r->p >= r->end) return rx_fail(r, "unterminated character class");
    r->p++;
    if (neg) cs_negate(set, ascii_neg ? 0x7F : 0x10FFFF);
    return true;
}

static bool rx_alt(rx *r, sy_buf *b);

/* One atom into b (a parenthesized GBNF expression). */
static bool rx_atom(rx *r, sy_buf *b) {
    char ch = *r->p;
    cset set = {0};
    bool ok = true;
    if (ch == '(') {
        r->p++;
        if (r->p < r->end && *r->p == '?') {
            if (r->p + 1 < r->end && r->p[1] == ':') {
                r->p += 2;
            } else if (r->p + 2 < r->end && r->p[1] == 'P' && r->p[2] == '<') {
                const char *e = memchr(r->p, '>', (size_t)(r->end - r->p));
                if (e == NULL) return rx_fail(r, "bad named group");
                r->p = e + 1;
            } else if (r->p + 1 < r->end && r->p[1] == '<' && r->p + 2 < r->end && r->p[2] != '=' && r->p[2] != '!') {
                const char *e = memchr(r->p, '>', (size_t)(r->end - r->p));
                if (e == NULL) return rx_fail(r, "bad named group");
                r->p = e + 1;
            } else {
                return rx_fail(r, "lookaround, inline flags and other (? groups are not supported");
            }
        }
        if (++r->depth > MAX_REGEX_DEPTH) return rx_fail(r, "groups nested too deep");
        sy_buf_puts(b, "(");
        if (!rx_alt(r, b)) return false;
        sy_buf_puts(b, ")");
        r->depth--;
        if (r->p >= r->end || *r->p != ')') return rx_fail(r, "missing )");
        r->p++;
        return true;
    }
    if (ch == '[') {
        r->p++;
        ok = rx_class(r, &set);
    } else if (ch == '.') {
        r->p++;
        cs_add(&set, 0, '\n' - 1);
        cs_add(&set, '\n' + 1, 0x10FFFF);
    } else if (ch == '\\') {
        r->p++;
        uint32_t cp;
        int k = rx_escape(r, &set, &cp, false);
        ok = k >= 0;
        if (k == 0) cs_add(&set, cp, cp);
    } else if (ch == '^' || ch == '$') {
        return rx_fail(r, "anchors are supported only at the start and end of the pattern");
    } else if (ch == '*' || ch == '+' || ch == '?' || ch == '{') {
        return rx_fail(r, "quantifier without an item");
    } else {
        uint32_t cp;
        ok = rx_utf8(r, &cp);
        if (ok) cs_add(&set, cp, cp);
    }
    if (ok && !emit_cset(b, &set)) ok = rx_fail(r, "empty character class");
    free(set.r);
    return ok;
}

static bool rx_int(rx *r, long *v) {
    if (r->p >= r->end || *r->p < '0' || *r->p > '9') return false;
    long x = 0;
    while (r->p < r->end && *r->p >= '0' && *r->p <= '9') {
        if (x <= 100000) x = x * 10 + (*r->p - '0');
        r->p++;
    }
    *v = x;
    return true;
}

static bool rx_seq(rx *r, sy_buf *b) {
    bool any = false;
    while (r->p < r->end && *r->p != '|' && *r->p != ')') {
        if (r->depth == 0 && *r->p == '$' && (r->p + 1 == r->end || r->p[1] == '|')) break; /* end anchor */
        if (any) sy_buf_puts(b, " ");
        if (!rx_atom(r, b)) return false;
        any = true;
        if (r->p < r->end && (*r->p == '*' || *r->p == '+' || *r->p == '?' || *r->p == '{')) {
            char q = *r->p;
            if (q == '{') {
                const char *save = r->p;
                r->p++;
                long m = 0, n = -1;
                if (!rx_int(r, &m)) { /* Python takes a brace that is no quantifier literally: refuse instead */
                    r->p = save;
                    return rx_fail(r, "'{' that is not a quantifier (escape it)");
                }
                if (r->p < r->end && *r->p == ',') {
                    r->p++;
                    if (!rx_int(r, &n)) n = -1;
                } else {
                    n = m;
                }
                if (r->p >= r->end || *r->p != '}') return rx_fail(r, "bad {m,n} quantifier");
                r->p++;
                if (m > SY_GRAMMAR_MAX_REPEAT || n > (long)SY_GRAMMAR_MAX_REPEAT)
                    return rx_fail(r, "repetition count over 10000");
                if (n >= 0 && n < m) return rx_fail(r, "{m,n} with n < m");
                if (n < 0) sy_buf_printf(b, "{%ld,}", m);
                else if (n == m) sy_buf_printf(b, "{%ld}", m);
                else sy_buf_printf(b, "{%ld,%ld}", m, n);
            } else {
                r->p++;
                char s[2] = {q, 0};
                sy_buf_puts(b, s);
            }
            if (r->p < r->end && *r->p == '?') r->p++; /* lazy: the same language */
            else if (r->p < r->end && *r->p == '+') return rx_fail(r, "possessive quantifiers are not supported");
            if (r->p < r->end && (*r->p == '*' || *r->p == '+' || *r->p == '{'))
                return rx_fail(r, "multiple repeat");
        }
    }
    if (!any) sy_buf_puts(b, "\"\"");
    return true;
}

static bool rx_alt(rx *r, sy_buf *b) {
    if (!rx_seq(r, b)) return false;
    while (r->p < r->end && *r->p == '|') {
        r->p++;
        sy_buf_puts(b, " | ");
        if (!rx_seq(r, b)) return false;
    }
    return true;
}

/* pattern: Python re.search semantics (jsonschema's), so an unanchored side may have anything around it. */
static char *pattern_rule(sc *c, const char *pat, const char *ptr) {
    rx r = {c, ptr, pat, pat, pat + strlen(pat), 0, false};
    sy_buf b = {0};
    prim(c, "char");
    prim(c, "space");
    sy_buf_puts(&b, "\"\\\"\" (");
    bool first = true;
    do { /* each top-level alternative carries its own anchors */
        if (!first) r.p++;
        if (!first) sy_buf_puts(&b, " | ");
        first = false;
        bool start = r.p < r.end && *r.p == '^';
        if (start) r.p++;
        sy_buf_puts(&b, start ? "(" : "(char* ");
        if (!rx_seq(&r, &b)) break;
        bool endanch = r.p < r.end && *r.p == '$';
        if (endanch) r.p++;
        sy_buf_puts(&b, endanch ? ")" : " char*)");
    } while (r.p < r.end && *r.p == '|');
    if (!r.failed && r.p < r.end) rx_fail(&r, *r.p == ')' ? "unbalanced )" : "unexpected character");
    if (r.failed) {
        sy_buf_free(&b);
        return NULL;
    }
    sy_buf_puts(&b, ") \"\\\"\" space");
    return sy_buf_take(&b);
}

/* ---- schemas ------------------------------------------------------------------------------------------- */

static char *visit(sc *c, const cJSON *s, const char *hint, const char *ptr);

static const char *const annotations[] = {
    "title", "description", "examples", "default", "$schema", "$id", "id", "$comment", "deprecated", "readOnly",
    "writeOnly", "contentEncoding", "contentMediaType", "discriminator", "strict", "$defs", "definitions",
    "example", "externalDocs", "xml", NULL};

static const char *const handled[] = {
    "type", "properties", "required", "additionalProperties", "enum", "const", "anyOf", "oneOf", "allOf", "$ref",
    "items", "prefixItems", "additionalItems", "minItems", "maxItems", "minLength", "maxLength", "pattern", "format",
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "nullable", "uniqueItems", NULL};

static bool in_list(const char *const *l, const char *k) {
    for (; *l; l++)
        if (strcmp(*l, k) == 0) return true;
    return false;
}

static bool is_annotation(const char *k) { return in_list(annotations, k) || strncmp(k, "x-", 2) == 0; }

static char *subptr(const char *ptr, const char *key) {
    sy_buf b = {0};
    sy_buf_puts(&b, ptr);
    sy_buf_puts(&b, "/");
    for (const char *k = key; *k && b.len < 200; k++) {
        if (*k == '~') sy_buf_puts(&b, "~0");
        else if (*k == '/') sy_buf_puts(&b, "~1");
        else sy_buf_append(&b, k, 1);
    }
    return sy_buf_take(&b);
}

static char *subptr_i(const char *ptr, const char *key, int i) {
    char n[16];
    snprintf(n, sizeof n, "%d", i);
    char *a = subptr(ptr, key), *r = subptr(a, n);
    free(a);
    return r;
}

static const cJSON *resolve_ref(sc *c, const char *ref, const char *ptr) {
    if (ref[0] != '#') return fail(c, ptr, "$ref '%s': only local references (#/...) are supported", ref), NULL;
    const cJSON *cur = c->root;
    const char *p = ref + 1;
    if (*p && *p != '/') return fail(c, ptr, "$ref '%s': anchors are not supported", ref), NULL;
    while (*p == '/') {
        p++;
        const char *e = strchr(p, '/');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        char key[256];
        size_t k = 0;
        for (size_t i = 0; i < n && k < sizeof key - 1; i++) {
            if (p[i] == '~' && i + 1 < n && (p[i + 1] == '0' || p[i + 1] == '1')) {
                key[k++] = p[i + 1] == '0' ? '~' : '/';
                i++;
            } else if (p[i] == '%' && i + 2 < n) { /* URI-escaped pointer characters */
                char hx[3] = {p[i + 1], p[i + 2], 0};
                key[k++] = (char)strtol(hx, NULL, 16);
                i += 2;
            } else {
                key[k++] = p[i];
            }
        }
        key[k] = '\0';
        if (cJSON_IsArray(cur)) {
            char *endp;
            long idx = strtol(key, &endp, 10);
            cur = *key && *endp == '\0' ? cJSON_GetArrayItem(cur, (int)idx) : NULL;
        } else {
            cur = cJSON_IsObject(cur) ? cJSON_GetObjectItemCaseSensitive(cur, key) : NULL;
        }
        if (cur == NULL) return fail(c, ptr, "$ref '%s' points at nothing", ref), NULL;
        p += n;
    }
    return cur;
}

static char *ref_rule(sc *c, const char *ref, const char *ptr) {
    for (size_t i = 0; i < c->n_refs; i++)
        if (strcmp(c->refs[i].ref, ref) == 0) return dup(c->refs[i].name);
    const cJSON *target = resolve_ref(c, ref, ptr);
    if (target == NULL) return NULL;
    const char *last = strrchr(ref, '/');
    char *name = new_name(c, last && last[1] ? last + 1 : "root");
    /* reserve the name before visiting, so recursion refers to it */
    free(add_rule_named(c, dup(name), dup("\"\"")));
    if (c->n_refs == c->cap_refs) {
        c->cap_refs = c->cap_refs ? c->cap_refs * 2 : 8;
        c->refs = realloc(c->refs, c->cap_refs * sizeof *c->refs);
    }
    c->refs[c->n_refs++] = (refent){dup(ref), dup(name)};
    char *body = visit(c, target, name, ref);
    if (body == NULL) {
        free(name);
        return NULL;
    }
    free(add_rule_named(c, dup(name), body));
    return name;
}

static bool type_ok(const cJSON *v, const char *t) {
    if (strcmp(t, "string") == 0) return cJSON_IsString(v);
    if (strcmp(t, "number") == 0) return cJSON_IsNumber(v);
    if (strcmp(t, "integer") == 0) return cJSON_IsNumber(v) && v->valuedouble == floor(v->valuedouble);
    if (strcmp(t, "boolean") == 0) return cJSON_IsBool(v);
    if (strcmp(t, "null") == 0) return cJSON_IsNull(v);
    if (strcmp(t, "object") == 0) return cJSON_IsObject(v);
    if (strcmp(t, "array") == 0) return cJSON_IsArray(v);
    return false;
}

static bool types_allow(const cJSON *type, const cJSON *v) {
    if (type == NULL) return true;
    if (cJSON_IsString(type)) return type_ok(v, type->valuestring);
    const cJSON *t;
    cJSON_ArrayForEach(t, type) if (cJSON_IsString(t) && type_ok(v, t->valuestring)) return true;
    return false;
}

/* enum/const: the literal JSON of each value (filtered by type, if both are given). */
static char *enum_rule(sc *c, const cJSON *s, const char *ptr) {
    const cJSON *en = cJSON_GetObjectItemCaseSensitive(s, "enum"), *cn = cJSON_GetObjectItemCaseSensitive(s, "const");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(s, "type");
    if (en && !cJSON_IsArray(en)) return fail(c, ptr, "'enum' must be an array");
    for (const cJSON *k = s->child; k; k = k->next)
        if (!is_annotation(k->string) && strcmp(k->string, "enum") && strcmp(k->string, "const") &&
            strcmp(k->string, "type") && strcmp(k->string, "nullable"))
            return fail(c, ptr, "'%s' next to enum/const is not supported", k->string);
    sy_buf b = {0};
    sy_buf_puts(&b, "(");
    int n = 0;
    const cJSON *v;
    if (cn) {
        if (en) {
            bool found = false;
            cJSON_ArrayForEach(v, en) found = found || cJSON_Compare(v, cn, true);
            if (!found) {
                sy_buf_free(&b);
                return fail(c, ptr, "const is not one of enum");
            }
        }
        if (types_allow(type, cn)) {
            char *l = json_literal(c, cn);
            if (l) sy_buf_puts(&b, l);
            free(l);
            n++;
        }
    } else {
        cJSON_ArrayForEach(v, en) {
            if (!types_allow(type, v)) continue;
            char *l = json_literal(c, v);
            if (l == NULL) break;
            if (n++) sy_buf_puts(&b, " | ");
            sy_buf_puts(&b, l);
            free(l);
        }
    }
    const cJSON *nullable = cJSON_GetObjectItemCaseSensitive(s, "nullable");
    if (cJSON_IsTrue(nullable)) {
        if (n++) sy_buf_puts(&b, " | ");
        sy_buf_puts(&b, "null");
        prim(c, "null");
    }
    sy_buf_puts(&b, ")");
    if (n == 0) {
        sy_buf_free(&b);
        return fail(c, ptr, "enum/const allows no value of the given type");
    }
    return sy_buf_take(&b);
}

/* ---- allOf / merging ----------------------------------------------------------------------------------------- */

static const cJSON *deref(sc *c, const cJSON *s, const char *ptr, int *hops) {
    while (cJSON_IsObject(s)) {
        const cJSON *ref = cJSON_GetObjectItemCaseSensitive(s, "$ref");
        if (!cJSON_IsString(ref)) break;
        for (const cJSON *k = s->child; k; k = k->next)
            if (strcmp(k->string, "$ref") && !is_annotation(k->string)) return s; /* visit reports it */
        if (++*hops > 32) return fail(c, ptr, "$ref chain too long or circular inside allOf"), NULL;
        s = resolve_ref(c, ref->valuestring, ptr);
    }
    return s;
}

/* Intersection of two schemas as one object (into c->scratch). Handles what allOf is used for: object members
 * (properties, required), types, bounds, lengths, enums. */
static cJSON *merge(sc *c, const cJSON *a, const cJSON *b, const char *ptr) {
    int hops = 0;
    a = deref(c, a, ptr, &hops);
    if (a == NULL) return NULL;
    b = deref(c, b, ptr, &hops);
    if (b == NULL) return NULL;
    if (cJSON_IsTrue(a)) return cJSON_Duplicate(b, true);
    if (cJSON_IsTrue(b)) return cJSON_Duplicate(a, true);
    if (!cJSON_IsObject(a) || !cJSON_IsObject(b)) return fail(c, ptr, "allOf member is not a schema object"), NULL;
    cJSON *m = cJSON_Duplicate(a, true);
    for (const cJSON *k = b->child; k && !c->failed; k = k->next) {
        const char *key = k->string;
        cJSON *mine = cJSON_GetObjectItemCaseSensitive(m, key);
        if (is_annotation(key) || mine == NULL) {
            if (mine == NULL) cJSON_AddItemToObject(m, key, cJSON_Duplicate(k, true));
            continue;
        }
        if (cJSON_Compare(mine, k, true)) continue;
        if (strcmp(key, "properties") == 0) {
            for (const cJSON *p = k->child; p; p = p->next) {
                cJSON *q = cJSON_GetObjectItemCaseSensitive(mine, p->string);
                if (q == NULL) {
                    cJSON_AddItemToObject(mine, p->string, cJSON_Duplicate(p, true));
                } else { /* both constrain it: both apply */
                    cJSON *all = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(all, "allOf");
                    cJSON_AddItemToArray(arr, cJSON_Duplicate(q, true));
                    cJSON_AddItemToArray(arr, cJSON_Duplicate(p, true));
                    cJSON_ReplaceItemInObjectCaseSensitive(mine, p->string, all);
                }
            }
        } else if (strcmp(key, "required") == 0) {
            for (const cJSON *r = k->child; r; r = r->next) {
                bool have = false;
                const cJSON *x;
                cJSON_ArrayForEach(x, mine) have = have || cJSON_Compare(x, r, true);
                if (!have) cJSON_AddItemToArray(mine, cJSON_Duplicate(r, true));
            }
        } else if (strcmp(key, "type") == 0) {
            /* intersection of the type lists */
            cJSON *out = cJSON_CreateArray();
            const cJSON *ta = mine, *tb = k;
            cJSON *la = cJSON_IsString(ta) ? cJSON_CreateStringArray((const char *[]){ta->valuestring}, 1)
                                           : cJSON_Duplicate(ta, true);
            const cJSON *x, *y;
            cJSON_ArrayForEach(x, la) {
                bool in = false;
                if (cJSON_IsString(tb)) in = cJSON_IsString(x) && (strcmp(x->valuestring, tb->valuestring) == 0 ||
                                               (strcmp(x->valuestring, "number") == 0 && strcmp(tb->valuestring, "integer") == 0));
                else cJSON_ArrayForEach(y, tb) in = in || (cJSON_IsString(x) && cJSON_IsString(y) && strcmp(x->valuestring, y->valuestring) == 0);
                if (in) cJSON_AddItemToArray(out, cJSON_CreateString(cJSON_IsString(tb) && strcmp(tb->valuestring, "integer") == 0 ? "integer" : x->valuestring));
            }
            cJSON_Delete(la);
            if (cJSON_GetArraySize(out) == 0) {
                cJSON_Delete(out);
                cJSON_Delete(m);
                return fail(c, ptr, "allOf: the types do not intersect"), NULL;
            }
            cJSON_ReplaceItemInObjectCaseSensitive(m, "type", out);
        } else if (strcmp(key, "minimum") == 0 || strcmp(key, "minLength") == 0 || strcmp(key, "minItems") == 0 ||
                   (strcmp(key, "exclusiveMinimum") == 0 && cJSON_IsNumber(k) && cJSON_IsNumber(mine))) {
            if (cJSON_IsNumber(k) && cJSON_IsNumber(mine) && k->valuedouble > mine->valuedouble)
                cJSON_ReplaceItemInObjectCaseSensitive(m, key, cJSON_CreateNumber(k->valuedouble));
        } else if (strcmp(key, "maximum") == 0 || strcmp(key, "maxLength") == 0 || strcmp(key, "maxItems") == 0 ||
                   (strcmp(key, "exclusiveMaximum") == 0 && cJSON_IsNumber(k) && cJSON_IsNumber(mine))) {
            if (cJSON_IsNumber(k) && cJSON_IsNumber(mine) && k->valuedouble < mine->valuedouble)
                cJSON_ReplaceItemInObjectCaseSensitive(m, key, cJSON_CreateNumber(k->valuedouble));
        } else if (strcmp(key, "enum") == 0) {
            cJSON *out = cJSON_CreateArray();
            const cJSON *x, *y;
            cJSON_ArrayForEach(x, mine) {
                bool in = false;
                cJSON_ArrayForEach(y, k) in = in || cJSON_Compare(x, y, true);
                if (in) cJSON_AddItemToArray(out, cJSON_Duplicate(x, true));
            }
            cJSON_ReplaceItemInObjectCaseSensitive(m, "enum", out);
        } else if (strcmp(key, "items") == 0 || strcmp(key, "additionalProperties") == 0) {
            if (cJSON_IsFalse(k) || cJSON_IsFalse(mine)) {
                cJSON_ReplaceItemInObjectCaseSensitive(m, key, cJSON_CreateFalse());
            } else {
                cJSON *all = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(all, "allOf");
                cJSON_AddItemToArray(arr, cJSON_Duplicate(mine, true));
                cJSON_AddItemToArray(arr, cJSON_Duplicate(k, true));
                cJSON_ReplaceItemInObjectCaseSensitive(m, key, all);
            }
        } else {
            cJSON_Delete(m);
            return fail(c, ptr, "allOf: cannot combine two different '%s'", key), NULL;
        }
    }
    if (c->failed) {
        cJSON_Delete(m);
        return NULL;
    }
    /* A closed member (additionalProperties false) only allows its own properties. The merged object is closed
     * over the union; properties only the other member named would be rejected by the closed one. */
    const cJSON *members[2] = {a, b};
    for (int i = 0; i < 2; i++) {
        if (!cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(members[i], "additionalProperties"))) continue;
        const cJSON *own = cJSON_GetObjectItemCaseSensitive(members[i], "properties");
        cJSON *props = cJSON_GetObjectItemCaseSensitive(m, "properties");
        for (cJSON *p = props ? props->child : NULL; p;) {
            cJSON *next = p->next;
            if (own == NULL || cJSON_GetObjectItemCaseSensitive(own, p->string) == NULL) {
                const cJSON *req = cJSON_GetObjectItemCaseSensitive(m, "required"), *r;
                cJSON_ArrayForEach(r, req) if (cJSON_IsString(r) && strcmp(r->valuestring, p->string) == 0) {
                    char name[128];
                    snprintf(name, sizeof name, "%s", p->string);
                    cJSON_Delete(m);
                    return fail(c, ptr, "allOf: required property '%s' is excluded by additionalProperties false", name), NULL;
                }
                cJSON_DeleteItemFromObjectCaseSensitive(props, p->string);
            }
            p = next;
        }
    }
    return m;
}

/* Keeps a merged schema alive until the compile ends. */
static const cJSON *keep(sc *c, cJSON *m) {
    if (m == NULL) return NULL;
    if (c->scratch == NULL) c->scratch = cJSON_CreateArray();
    cJSON_AddItemToArray(c->scratch, m);
    return m;
}

/* ---- objects -------------------------------------------------------------------------------------------- */

typedef struct ktrie {
    uint32_t cp;
    bool end;
    struct ktrie *kids;
    size_t n, cap;
} ktrie;

static void kt_free(ktrie *t) {
    for (size_t i = 0; i < t->n; i++) kt_free(&t->kids[i]);
    free(t->kids);
}

/* Rule for an extra key: any string of plain key characters that is none of the named keys (a trie of them, one
 * rule per node: "a key that has followed this prefix so far"). */
static char *kt_rule(sc *c, const ktrie *t, const char *hint) {
    sy_buf b = {0};
    sy_buf_puts(&b, "(");
    cset others = {0};
    cs_add(&others, 0x20, 0x10FFFF);
    bool first = true;
    for (size_t i = 0; i < t->n; i++) {
        char *sub = kt_rule(c, &t->kids[i], hint);
        if (sub == NULL) {
            sy_buf_free(&b);
            free(others.r);
            return NULL;
        }
        if (!first) sy_buf_puts(&b, " | ");
        first = false;
        char u[4];
        lit(&b, u, sy_utf8_encode(t->kids[i].cp, u));
        sy_buf_printf(&b, " %s", sub);
        free(sub);
    }
    /* any other character, then anything */
    cset ex = {0};
    for (size_t i = 0; i < t->n; i++) cs_add(&ex, t->kids[i].cp, t->kids[i].cp);
    cs_add(&ex, '"', '"');
    cs_add(&ex, '\\', '\\');
    cs_add(&ex, 0x7F, 0x7F);
    cs_add(&ex, 0, 0x1F);
    cs_add(&ex, 0xD800, 0xDFFF);
    cs_negate(&ex, 0x10FFFF);
    if (ex.n) {
        if (!first) sy_buf_puts(&b, " | ");
        first = false;
        emit_cset(&b, &ex);
        sy_buf_puts(&b, " key-char*");
    }
    free(ex.r);
    free(others.r);
    if (!t->end) {
        if (!first) sy_buf_puts(&b, " | ");
        sy_buf_puts(&b, "\"\"");
    }
    sy_buf_puts(&b, ")");
    char *body = sy_buf_take(&b);
    return body ? add_rule(c, hint, body) : NULL;
}

static bool kt_insert(ktrie *t, const char *key) {
    const unsigned char *u = (const unsigned char *)key;
    size_t left = strlen(key);
    while (left > 0) {
        uint32_t cp;
        size_t n = sy_utf8_decode(u, left, &cp);
        if (n == 0) return false;
        u += n, left -= n;
        /* a key with characters an extra key never has cannot collide with one */
        if (cp < 0x20 || cp == '"' || cp == '\\' || cp == 0x7F) return true;
        ktrie *kid = NULL;
        for (size_t i = 0; i < t->n; i++)
            if (t->kids[i].cp == cp) kid = &t->kids[i];
        if (kid == NULL) {
            if (t->n == t->cap) {
                t->cap = t->cap ? t->cap * 2 : 4;
                t->kids = realloc(t->kids, t->cap * sizeof *t->kids);
            }
            kid = &t->kids[t->n++];
            *kid = (ktrie){cp, false, NULL, 0, 0};
        }
        t = kid;
    }
    t->end = true;
    return true;
}

static char *object_rule(sc *c, const cJSON *s, const char *hint, const char *ptr) {
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(s, "required");
    const cJSON *addl = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
    if (props && !cJSON_IsObject(props)) return fail(c, ptr, "'properties' must be an object");
    if (req && !cJSON_IsArray(req)) return fail(c, ptr, "'required' must be an array");
    if (addl && !cJSON_IsBool(addl) && !cJSON_IsObject(addl))
        return fail(c, ptr, "'additionalProperties' must be a boolean or a schema");
    const cJSON *r;
    cJSON_ArrayForEach(r, req) if (!cJSON_IsString(r) || !utf8_ok(r->valuestring))
        return fail(c, ptr, "'required' must list strings of valid UTF-8");
    bool extra = addl ? !cJSON_IsFalse(addl) : c->o.additional_properties_default;
    prim(c, "space");

    /* named keys in order: required ones (in property order, then required-only ones), then optional ones */
    size_t n_props = (size_t)cJSON_GetArraySize(props), n_req = (size_t)cJSON_GetArraySize(req);
    char **kv = calloc(n_props + n_req + 1, sizeof *kv);
    bool *is_req = calloc(n_props + n_req + 1, sizeof *is_req);
    const char **keys = calloc(n_props + n_req + 1, sizeof *keys);
    size_t n = 0;
    char *addl_value = NULL;
    if (!kv || !is_req || !keys) goto oom;
    if (extra) {
        char *p = subptr(ptr, "additionalProperties");
        char h[128];
        snprintf(h, sizeof h, "%.100s-additional-value", hint);
        addl_value = cJSON_IsObject(addl) ? visit(c, addl, h, p) : use(c, "value");
        free(p);
        if (addl_value == NULL) goto out;
    }
    for (const cJSON *p = props ? props->child : NULL; p; p = p->next) {
        if (!utf8_ok(p->string)) {
            fail(c, ptr, "property name is not valid UTF-8");
            goto out;
        }
        bool rq = false;
        cJSON_ArrayForEach(r, req) rq = rq || strcmp(r->valuestring, p->string) == 0;
        keys[n] = p->string;
        is_req[n++] = rq;
    }
    cJSON_ArrayForEach(r, req) {
        bool found = props && cJSON_GetObjectItemCaseSensitive(props, r->valuestring);
        for (size_t i = 0; i < n && !found; i++) found = strcmp(keys[i], r->valuestring) == 0;
        if (found) continue;
        if (!extra) {
            free(kv);
            free(is_req);
            free(keys);
            return fail(c, ptr, "required property '%s' is not in properties and additionalProperties is false",
                        r->valuestring);
        }
        keys[n] = r->valuestring;
        is_req[n++] = true;
    }
    for (size_t i = 0; i < n; i++) {
        const cJSON *ps = props ? cJSON_GetObjectItemCaseSensitive(props, keys[i]) : NULL;
        if (cJSON_IsFalse(ps)) { /* a property that must not appear: no kv (and no extra key of that name) */
            if (is_req[i]) {
                fail(c, ptr, "required property '%s' has schema false", keys[i]);
                goto out;
            }
            continue;
        }
        char h[160];
        snprintf(h, sizeof h, "%.100s-%.40s", hint, keys[i]);
        char *value;
        if (ps) {
            char *pp = subptr(ptr, "properties"), *p2 = subptr(pp, keys[i]);
            value = visit(c, ps, h, p2);
            free(pp);
            free(p2);
        } else {
            value = dup(addl_value);
        }
        if (value == NULL) goto out;
        cJSON *ks = cJSON_CreateString(keys[i]);
        char *ktext = ks ? cJSON_PrintUnformatted(ks) : NULL;
        cJSON_Delete(ks);
        if (ktext == NULL) {
            free(value);
            goto oom;
        }
        sy_buf b = {0};
        lit(&b, ktext, strlen(ktext));
        sy_buf_printf(&b, " space \":\" space %s", value);
        free(ktext);
        free(value);
        char hk[170];
        snprintf(hk, sizeof hk, "%.150s-kv", h);
        kv[i] = add_rule(c, hk, sy_buf_take(&b));
        if (kv[i] == NULL) goto out;
    }
    char *addkv = NULL;
    if (extra) {
        ktrie t = {0};
        for (size_t i = 0; i < n; i++)
            if (!kt_insert(&t, keys[i])) {
                kt_free(&t);
                fail(c, ptr, "property name is not valid UTF-8");
                goto out;
            }
        free(add_rule_named(c, dup("key-char"), dup("[^\"\\\\\\x7F\\x00-\\x1F]")));
        char h[128];
        snprintf(h, sizeof h, "%.100s-extra-key", hint);
        char *k = kt_rule(c, &t, h);
        kt_free(&t);
        if (k == NULL) goto out;
        snprintf(h, sizeof h, "%.100s-extra-kv", hint);
        addkv = add_rule(c, h, fmt("\"\\\"\" %s \"\\\"\" space \":\" space %s", k, addl_value));
        free(k);
        if (addkv == NULL) goto out;
    }
    /* Keys in property order, required ones always, optional ones maybe, extra keys after them:
     *   S_i: the rest after something was written (each key with its comma),
     *   F_i: the rest when nothing was written yet.
     * Both as chains of rules, so the size stays linear in the number of keys. */
    char *S = addkv ? fmt("(\",\" space %s)*", addkv) : dup("\"\"");
    char *F = addkv ? fmt("(%s (\",\" space %s)*)?", addkv, addkv) : dup("\"\"");
    for (size_t i = n; i-- > 0 && S && F;) {
        if (kv[i] == NULL) continue;
        char h[128];
        snprintf(h, sizeof h, "%.100s-f", hint);
        char *f = add_rule(c, h, is_req[i] ? fmt("%s %s", kv[i], S) : fmt("%s %s | %s", kv[i], S, F));
        snprintf(h, sizeof h, "%.100s-s", hint);
        char *sn = add_rule(c, h, is_req[i] ? fmt("\",\" space %s %s", kv[i], S) : fmt("(\",\" space %s)? %s", kv[i], S));
        free(S);
        free(F);
        S = sn;
        F = f;
    }
    char *body = S && F ? fmt("\"{\" space %s \"}\" space", F) : NULL;
    free(S);
    free(F);
    free(addkv);
    for (size_t i = 0; i < n; i++) free(kv[i]);
    free(kv);
    free(is_req);
    free(keys);
    free(addl_value);
    return body ? body : fail(c, ptr, "out of memory");
oom:
    fail(c, ptr, "out of memory");
out:
    for (size_t i = 0; kv && i < n; i++) free(kv[i]);
    free(kv);
    free(is_req);
    free(keys);
    free(addl_value);
    return NULL;
}

/* ---- arrays ------------------------------------------------------------------------------------------------ */

static bool read_count(sc *c, const cJSON *s, const char *key, long *out, const char *ptr) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, key);
    if (v == NULL) return true;
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble != floor(v->valuedouble)) {
        fail(c, ptr, "'%s' must be a non-negative integer", key);
        return false;
    }
    if (v->valuedouble > SY_GRAMMAR_MAX_REPEAT) {
        fail(c, ptr, "'%s' %g is over the limit of %u", key, v->valuedouble, SY_GRAMMAR_MAX_REPEAT);
        return false;
    }
    *out = (long)v->valuedouble;
    return true;
}

static void rep(sy_buf *b, long lo, long hi) { /* {lo,hi}, hi < 0 unbounded */
    if (hi < 0) sy_buf_printf(b, "{%ld,}", lo);
    else if (lo == hi) sy_buf_printf(b, "{%ld}", lo);
    else sy_buf_printf(b, "{%ld,%ld}", lo, hi);
}

static char *array_rule(sc *c, const cJSON *s, const char *hint, const char *ptr) {
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
    const cJSON *prefix = cJSON_GetObjectItemCaseSensitive(s, "prefixItems");
    const cJSON *additional = cJSON_GetObjectItemCaseSensitive(s, "additionalItems");
    const cJSON *unique = cJSON_GetObjectItemCaseSensitive(s, "uniqueItems");
    if (cJSON_IsTrue(unique)) return fail(c, ptr, "'uniqueItems' true is not supported");
    long lo = 0, hi = -1;
    if (!read_count(c, s, "minItems", &lo, ptr) || !read_count(c, s, "maxItems", &hi, ptr)) return NULL;
    /* tuple positions and the schema of the rest */
    const cJSON *tuple = prefix;
    const cJSON *rest = items;
    const char *rest_key = "items";
    if (prefix && !cJSON_IsArray(prefix)) return fail(c, ptr, "'prefixItems' must be an array");
    if (!prefix && cJSON_IsArray(items)) { /* draft 4-7 tuple form */
        tuple = items;
        rest = additional;
        rest_key = "additionalItems";
    }
    if (rest && !cJSON_IsBool(rest) && !cJSON_IsObject(rest))
        return fail(c, ptr, "'%s' must be a schema", rest_key);
    long k = (long)cJSON_GetArraySize(tuple);
    bool no_rest = cJSON_IsFalse(rest);
    if (no_rest && (hi < 0 || hi > k)) hi = k;
    if (hi >= 0 && lo > hi) return fail(c, ptr, "minItems is larger than the array can be");
    char **e = calloc((size_t)k + 1, sizeof *e);
    char *r = NULL;
    if (e == NULL) return fail(c, ptr, "out of memory");
    bool ok = true;
    for (long i = 0; i < k && ok; i++) {
        char h[128];
        snprintf(h, sizeof h, "%.100s-%ld", hint, i);
        char *p = subptr_i(ptr, tuple == prefix ? "prefixItems" : "items", (int)i);
        e[i] = visit(c, cJSON_GetArrayItem(tuple, (int)i), h, p);
        free(p);
        ok = e[i] != NULL;
    }
    if (ok && !no_rest) {
        char h[128];
        snprintf(h, sizeof h, "%.100s-item", hint);
        char *p = subptr(ptr, rest_key);
        r = rest && !cJSON_IsTrue(rest) ? visit(c, rest, h, p) : use(c, "value");
        free(p);
        ok = r != NULL;
    }
    sy_buf b = {0};
    if (ok) {
        prim(c, "space");
        sy_buf_puts(&b, "\"[\" space ");
        if (hi == 0) {
            /* nothing inside */
        } else if (k == 0) {
            sy_buf_printf(&b, lo == 0 ? "(%s (\",\" space %s)" : "%s (\",\" space %s)", r, r);
            rep(&b, lo > 0 ? lo - 1 : 0, hi < 0 ? -1 : hi - 1);
            if (lo == 0) sy_buf_puts(&b, ")?");
        } else {
            if (lo == 0) sy_buf_puts(&b, "(");
            sy_buf_puts(&b, e[0]);
            int opened = 0;
            long upto = hi < 0 || hi > k ? k : hi;
            for (long i = 1; i < upto; i++) {
                if (i < lo) sy_buf_printf(&b, " \",\" space %s", e[i]);
                else {
                    sy_buf_printf(&b, " (\",\" space %s", e[i]);
                    opened++;
                }
            }
            if (r && (hi < 0 || hi > k)) {
                long req_more = lo > k ? lo - k : 0;
                long max_more = hi < 0 ? -1 : hi - k;
                sy_buf_printf(&b, " (\",\" space %s)", r);
                rep(&b, req_more, max_more);
            }
            for (int i = 0; i < opened; i++) sy_buf_puts(&b, ")?");
            if (lo == 0) sy_buf_puts(&b, ")?");
        }
        sy_buf_puts(&b, " \"]\" space");
    }
    for (long i = 0; i < k; i++) free(e[i]);
    free(e);
    free(r);
    if (!ok) {
        sy_buf_free(&b);
        return NULL;
    }
    return sy_buf_take(&b);
}

/* ---- strings ------------------------------------------------------------------------------------------------ */

static char *string_rule(sc *c, const cJSON *s, const char *ptr) {
    const cJSON *pattern = cJSON_GetObjectItemCaseSensitive(s, "pattern");
    const cJSON *format = cJSON_GetObjectItemCaseSensitive(s, "format");
    long lo = 0, hi = -1;
    if (!read_count(c, s, "minLength", &lo, ptr) || !read_count(c, s, "maxLength", &hi, ptr)) return NULL;
    bool lengths = cJSON_GetObjectItemCaseSensitive(s, "minLength") || cJSON_GetObjectItemCaseSensitive(s, "maxLength");
    if (hi >= 0 && lo > hi) return fail(c, ptr, "minLength is larger than maxLength");
    if (pattern) {
        if (!cJSON_IsString(pattern)) return fail(c, ptr, "'pattern' must be a string");
        if (lengths) return fail(c, ptr, "'pattern' together with minLength/maxLength is not supported");
        if (format) return fail(c, ptr, "'pattern' together with format is not supported");
        char *p = subptr(ptr, "pattern");
        char *r = pattern_rule(c, pattern->valuestring, p);
        free(p);
        return r;
    }
    if (format) {
        if (!cJSON_IsString(format)) return fail(c, ptr, "'format' must be a string");
        if (lengths) return fail(c, ptr, "'format' together with minLength/maxLength is not supported");
        const char *f = format->valuestring;
        static const char *const fmts[][2] = {{"date", "date-string"},     {"time", "time-string"},
                                              {"date-time", "date-time-string"}, {"uuid", "uuid"},
                                              {"email", "email-string"},   {"ipv4", "ipv4-string"}};
        for (size_t i = 0; i < sizeof fmts / sizeof fmts[0]; i++)
            if (strcmp(f, fmts[i][0]) == 0) return use(c, fmts[i][1]);
        return fail(c, ptr, "format '%s' is not supported (supported: date, time, date-time, uuid, email, ipv4)", f);
    }
    if (!lengths) return use(c, "string");
    prim(c, "char");
    prim(c, "space");
    sy_buf b = {0};
    sy_buf_puts(&b, "\"\\\"\" char");
    rep(&b, lo, hi);
    sy_buf_puts(&b, " \"\\\"\" space");
    return sy_buf_take(&b);
}

/* ---- dispatch ----------------------------------------------------------------------------------------------- */

static const char *const type_keys[][2] = {
    {"properties", "object"}, {"additionalProperties", "object"}, {"required", "object"},
    {"items", "array"},       {"prefixItems", "array"},           {"additionalItems", "array"},
    {"minItems", "array"},    {"maxItems", "array"},              {"uniqueItems", "array"},
    {"minLength", "string"},  {"maxLength", "string"},            {"pattern", "string"},
    {"format", "string"},     {"minimum", "number"},              {"maximum", "number"},
    {"exclusiveMinimum", "number"}, {"exclusiveMaximum", "number"}};

static const char *key_type(const char *k) {
    for (size_t i = 0; i < sizeof type_keys / sizeof type_keys[0]; i++)
        if (strcmp(type_keys[i][0], k) == 0) return type_keys[i][1];
    return NULL;
}

static char *visit_type(sc *c, const cJSON *s, const char *t, const char *hint, const char *ptr) {
    /* keywords of another type do not constrain this one (JSON Schema), so they are skipped here */
    if (strcmp(t, "object") == 0) return object_rule(c, s, hint, ptr);
    if (strcmp(t, "array") == 0) return array_rule(c, s, hint, ptr);
    if (strcmp(t, "string") == 0) return string_rule(c, s, ptr);
    if (strcmp(t, "integer") == 0) return integer_rule(c, s, ptr);
    if (strcmp(t, "number") == 0) return number_rule(c, s, ptr);
    if (strcmp(t, "boolean") == 0) return use(c, "boolean");
    if (strcmp(t, "null") == 0) return use(c, "null");
    return fail(c, ptr, "unknown type '%s'", t);
}

static char *alternatives(sc *c, const cJSON *s, const cJSON *list, const char *key, const char *hint,
                          const char *ptr) {
    if (!cJSON_IsArray(list) || cJSON_GetArraySize(list) == 0) return fail(c, ptr, "'%s' must be a non-empty array", key);
    /* other constraints beside anyOf/oneOf apply to every branch */
    cJSON *rest = cJSON_CreateObject();
    for (const cJSON *k = s->child; k; k = k->next)
        if (strcmp(k->string, key) && !is_annotation(k->string) && strcmp(k->string, "nullable"))
            cJSON_AddItemToObject(rest, k->string, cJSON_Duplicate(k, true));
    bool constrained = rest->child != NULL;
    sy_buf b = {0};
    sy_buf_puts(&b, "(");
    int i = 0;
    const cJSON *br;
    cJSON_ArrayForEach(br, list) {
        char *p = subptr_i(ptr, key, i);
        const cJSON *schema = br;
        if (constrained) schema = keep(c, merge(c, rest, br, p));
        char h[128];
        snprintf(h, sizeof h, "%.100s-%d", hint, i);
        char *r = schema ? visit(c, schema, h, p) : NULL;
        free(p);
        if (r == NULL) {
            cJSON_Delete(rest);
            sy_buf_free(&b);
            return NULL;
        }
        if (i++) sy_buf_puts(&b, " | ");
        sy_buf_puts(&b, r);
        free(r);
    }
    cJSON_Delete(rest);
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(s, "nullable"))) {
        sy_buf_puts(&b, " | null");
        prim(c, "null");
    }
    sy_buf_puts(&b, ")");
    return sy_buf_take(&b);
}

static char *visit_inner(sc *c, const cJSON *s, const char *hint, const char *ptr) {
    if (cJSON_IsTrue(s)) return use(c, "value");
    if (cJSON_IsFalse(s)) return fail(c, ptr, "schema false allows nothing");
    if (!cJSON_IsObject(s)) return fail(c, ptr, "a schema must be an object or a boolean");
    for (const cJSON *k = s->child; k; k = k->next) {
        if (is_annotation(k->string) || in_list(handled, k->string)) continue;
        return fail(c, ptr, "unsupported keyword '%s'", k->string);
    }
    const cJSON *ref = cJSON_GetObjectItemCaseSensitive(s, "$ref");
    if (ref) {
        if (!cJSON_IsString(ref)) return fail(c, ptr, "'$ref' must be a string");
        bool siblings = false;
        for (const cJSON *k = s->child; k; k = k->next) siblings = siblings || (strcmp(k->string, "$ref") && !is_annotation(k->string));
        if (!siblings) return ref_rule(c, ref->valuestring, ptr);
        /* $ref with constraints beside it: both apply */
        cJSON *self = cJSON_Duplicate(s, true);
        cJSON_DeleteItemFromObjectCaseSensitive(self, "$ref");
        cJSON *tmp = cJSON_CreateObject();
        cJSON_AddStringToObject(tmp, "$ref", ref->valuestring);
        const cJSON *m = keep(c, merge(c, self, tmp, ptr));
        cJSON_Delete(self);
        cJSON_Delete(tmp);
        return m ? visit(c, m, hint, ptr) : NULL;
    }
    const cJSON *all = cJSON_GetObjectItemCaseSensitive(s, "allOf");
    if (all) {
        if (!cJSON_IsArray(all) || cJSON_GetArraySize(all) == 0) return fail(c, ptr, "'allOf' must be a non-empty array");
        cJSON *acc = cJSON_Duplicate(s, true);
        cJSON_DeleteItemFromObjectCaseSensitive(acc, "allOf");
        const cJSON *m;
        int i = 0;
        cJSON_ArrayForEach(m, all) {
            char *p = subptr_i(ptr, "allOf", i++);
            cJSON *next = merge(c, acc, m, p);
            free(p);
            cJSON_Delete(acc);
            acc = next;
            if (acc == NULL) return NULL;
        }
        return visit(c, keep(c, acc), hint, ptr);
    }
    if (cJSON_GetObjectItemCaseSensitive(s, "enum") || cJSON_GetObjectItemCaseSensitive(s, "const"))
        return enum_rule(c, s, ptr);
    const cJSON *any = cJSON_GetObjectItemCaseSensitive(s, "anyOf");
    const cJSON *one = cJSON_GetObjectItemCaseSensitive(s, "oneOf");
    if (any && one) return fail(c, ptr, "anyOf together with oneOf is not supported");
    /* oneOf as anyOf: a document matching two branches would fail oneOf; schemas should make them disjoint */
    if (any || one) return alternatives(c, s, any ? any : one, any ? "anyOf" : "oneOf", hint, ptr);

    const cJSON *type = cJSON_GetObjectItemCaseSensitive(s, "type");
    const cJSON *nullable = cJSON_GetObjectItemCaseSensitive(s, "nullable");
    if (nullable && !cJSON_IsBool(nullable)) return fail(c, ptr, "'nullable' must be a boolean");
    bool add_null = cJSON_IsTrue(nullable);
    const char *types[8];
    int nt = 0;
    if (type == NULL) {
        /* no type: the one the keywords imply (a subset of what the schema allows), else any value */
        const char *implied = NULL;
        for (const cJSON *k = s->child; k; k = k->next) {
            const char *t = key_type(k->string);
            if (t == NULL) continue;
            if (implied && strcmp(implied, t)) return fail(c, ptr, "keywords of different types without 'type'");
            implied = t;
        }
        if (implied == NULL) return use(c, "value"); /* any value, null included */
        types[nt++] = implied;
    } else if (cJSON_IsString(type)) {
        types[nt++] = type->valuestring;
    } else if (cJSON_IsArray(type) && cJSON_GetArraySize(type) > 0 && cJSON_GetArraySize(type) <= 7) {
        const cJSON *t;
        cJSON_ArrayForEach(t, type) {
            if (!cJSON_IsString(t)) return fail(c, ptr, "'type' must name types");
            types[nt++] = t->valuestring;
        }
    } else {
        return fail(c, ptr, "'type' must be a type name or a list of them");
    }
    sy_buf b = {0};
    if (nt > 1 || add_null) sy_buf_puts(&b, "(");
    bool has_null = false;
    for (int i = 0; i < nt; i++) {
        /* integer inside number would be redundant but harmless; keep both */
        char h[128];
        snprintf(h, sizeof h, nt > 1 ? "%.100s-%.16s" : "%.100s", hint, types[i]);
        char *r = visit_type(c, s, types[i], nt > 1 ? h : hint, ptr);
        if (r == NULL) {
            sy_buf_free(&b);
            return NULL;
        }
        has_null = has_null || strcmp(types[i], "null") == 0;
        if (i) sy_buf_puts(&b, " | ");
        sy_buf_puts(&b, r);
        free(r);
    }
    if (add_null && !has_null) {
        sy_buf_puts(&b, " | null");
        prim(c, "null");
    }
    if (nt > 1 || add_null) sy_buf_puts(&b, ")");
    return sy_buf_take(&b);
}

static char *visit(sc *c, const cJSON *s, const char *hint, const char *ptr) {
    if (c->failed) return NULL;
    if (++c->depth > MAX_DEPTH) {
        c->depth--;
        return fail(c, ptr, "schema nested deeper than %d", MAX_DEPTH);
    }
    char *r = visit_inner(c, s, hint, ptr);
    c->depth--;
    if (c->failed) { /* a failure deep inside wins over whatever text was assembled around it */
        free(r);
        return NULL;
    }
    if (r == NULL && !c->failed) fail(c, ptr, "out of memory");
    return r;
}

static void sc_free(sc *c) {
    for (size_t i = 0; i < c->n_rules; i++) {
        free(c->rules[i].name);
        free(c->rules[i].body);
    }
    free(c->rules);
    for (size_t i = 0; i < c->n_refs; i++) {
        free(c->refs[i].ref);
        free(c->refs[i].name);
    }
    free(c->refs);
    cJSON_Delete(c->scratch);
}

static int finish(sc *c, char *root_body, char **gbnf) {
    if (root_body == NULL || c->failed) {
        free(root_body);
        sc_free(c);
        return SY_GRAMMAR_EINVAL;
    }
    sy_buf b = {0};
    sy_buf_printf(&b, "root ::= %s\n", root_body);
    free(root_body);
    for (size_t i = 0; i < c->n_rules; i++)
        if (strcmp(c->rules[i].name, "root") != 0) sy_buf_printf(&b, "%s ::= %s\n", c->rules[i].name, c->rules[i].body);
    sc_free(c);
    *gbnf = sy_buf_take(&b);
    return 0;
}

int sy_json_schema_to_gbnf(const cJSON *schema, const sy_schema_options *o, char **gbnf, char *err, size_t err_cap) {
    *gbnf = NULL;
    sc c = {0};
    c.root = schema;
    c.o = o ? *o : sy_schema_defaults();
    c.err = err;
    c.err_cap = err_cap;
    sy_gerr(err, err_cap, "%s", "");
    /* "root" is taken so no generated rule claims it */
    free(add_rule_named(&c, dup("root"), dup("\"\"")));
    char *body = schema ? visit(&c, schema, "root", "#") : fail(&c, "#", "no schema");
    int rc = finish(&c, body, gbnf);
    if (rc != 0) return rc;
    /* A repetition of something that can match nothing (a pattern such as "(|ab)+") is left-recursive in GBNF;
     * refuse the schema with the reason rather than hand on a grammar that cannot compile. */
    char why[256] = "";
    sy_grammar *g = sy_grammar_compile(*gbnf, strlen(*gbnf), NULL, why, sizeof why);
    if (g == NULL && strstr(why, "left recursion") != NULL) {
        free(*gbnf);
        *gbnf = NULL;
        sy_gerr(err, err_cap, "a repetition in the schema (a pattern's '*' or '+' over something that can match "
                              "nothing) is not supported: %s", why);
        return -1;
    }
    sy_grammar_free(g);
    return 0;
}

int sy_json_object_gbnf(const sy_schema_options *o, char **gbnf, char *err, size_t err_cap) {
    *gbnf = NULL;
    sc c = {0};
    c.o = o ? *o : sy_schema_defaults();
    c.err = err;
    c.err_cap = err_cap;
    free(add_rule_named(&c, dup("root"), dup("\"\"")));
    return finish(&c, use(&c, "object"), gbnf);
}
