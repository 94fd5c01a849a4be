/* GBNF text to the compiled element form (llama.cpp's grammar format, see docs/grammar.md), with the checks that
 * keep matching bounded: undefined rules, missing root, left recursion (also through nullable rules), repetition
 * counts, nesting, size. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/utf8.h"
#include "grammar_internal.h"

void sy_gerr(char *err, size_t cap, const char *fmt, ...) {
    if (err == NULL || cap == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, cap, fmt, ap);
    va_end(ap);
}

/* ---- classes --------------------------------------------------------------------------------------------- */

bool sy_gclass_match(const gelem *e, uint32_t cp) {
    if (e->type == GE_ANY) return true;
    bool positive = e->type == GE_CHAR, found = false;
    do {
        if (e[1].type == GE_CHAR_RNG) {
            found = found || (e->value <= cp && cp <= e[1].value);
            e += 2;
        } else {
            found = found || e->value == cp;
            e += 1;
        }
    } while (e->type == GE_CHAR_ALT);
    return found == positive;
}

bool sy_gclass_match_range(const gelem *e, uint32_t lo, uint32_t hi) {
    if (e->type == GE_ANY) return true;
    const gelem *first = e;
    if (e->type == GE_CHAR) {
        do {
            uint32_t a = e->value, b = e->value;
            if (e[1].type == GE_CHAR_RNG) {
                b = e[1].value;
                e += 2;
            } else {
                e += 1;
            }
            if (a <= hi && b >= lo) return true;
        } while (e->type == GE_CHAR_ALT);
        return false;
    }
    /* negated: some point of [lo, hi] lies outside every listed range. Walk up from lo over covering ranges
     * (classes are short; quadratic is fine). */
    uint64_t point = lo;
    for (;;) {
        if (point > hi) return false;
        bool covered = false;
        e = first;
        do {
            uint32_t a = e->value, b = e->value;
            if (e[1].type == GE_CHAR_RNG) {
                b = e[1].value;
                e += 2;
            } else {
                e += 1;
            }
            if (a <= point && point <= b) {
                point = (uint64_t)b + 1;
                covered = true;
            }
        } while (e->type == GE_CHAR_ALT);
        if (!covered) return true;
    }
}

/* ---- parser ---------------------------------------------------------------------------------------------- */

typedef struct prule {
    gelem *e;
    uint32_t n, cap;
    bool defined;
    uint32_t first_ref_by; /* a rule that referenced it (for the undefined-rule message) */
} prule;

typedef struct parser {
    const char *src; /* NUL-terminated copy */
    const char *end; /* its NUL */
    prule *rules;
    char **names;
    uint32_t n_rules, cap_rules;
    uint32_t *map; /* open addressing over names: rule id + 1, 0 empty */
    uint32_t map_cap;
    size_t total_elems;
    char **texts;
    size_t *text_lens;
    uint32_t n_texts, cap_texts;
    uint32_t depth;
    char *err;
    size_t err_cap;
    bool failed;
} parser;

static void perr(parser *p, const char *at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void perr(parser *p, const char *at, const char *fmt, ...) {
    if (p->failed) return;
    p->failed = true;
    char msg[320];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (at == NULL) {
        sy_gerr(p->err, p->err_cap, "%s", msg);
        return;
    }
    /* line and column of `at`, and a short excerpt */
    size_t line = 1, col = 1;
    for (const char *s = p->src; s < at && *s; s++) {
        if (*s == '\n') {
            line++;
            col = 1;
        } else {
            col++;
        }
    }
    char excerpt[24];
    size_t k = 0;
    for (const char *s = at; *s && *s != '\n' && *s != '\r' && k < sizeof excerpt - 1; s++) excerpt[k++] = *s;
    excerpt[k] = '\0';
    sy_gerr(p->err, p->err_cap, "%s at line %zu column %zu%s%s%s", msg, line, col, k ? " near \"" : "",
            excerpt, k ? "\"" : "");
}

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    return h;
}

static bool map_grow(parser *p) {
    uint32_t cap = p->map_cap ? p->map_cap * 2 : 256;
    uint32_t *m = calloc(cap, sizeof *m);
    if (m == NULL) return false;
    for (uint32_t i = 0; i < p->n_rules; i++) {
        uint64_t h = hash_bytes(p->names[i], strlen(p->names[i]));
        uint32_t j = (uint32_t)h & (cap - 1);
        while (m[j]) j = (j + 1) & (cap - 1);
        m[j] = i + 1;
    }
    free(p->map);
    p->map = m;
    p->map_cap = cap;
    return true;
}

/* The id of rule `name` (creating it, undefined, if new). UINT32_MAX on failure (reported). */
static uint32_t rule_id(parser *p, const char *name, size_t n, bool lookup_only) {
    if (p->map_cap == 0 && !map_grow(p)) goto oom;
    uint64_t h = hash_bytes(name, n);
    uint32_t j = (uint32_t)h & (p->map_cap - 1);
    while (p->map[j]) {
        const char *s = p->names[p->map[j] - 1];
        if (strlen(s) == n && memcmp(s, name, n) == 0) return p->map[j] - 1;
        j = (j + 1) & (p->map_cap - 1);
    }
    if (lookup_only) return UINT32_MAX;
    if (p->n_rules >= SY_GRAMMAR_MAX_RULES) {
        perr(p, NULL, "grammar has more than %u rules", SY_GRAMMAR_MAX_RULES);
        return UINT32_MAX;
    }
    if (p->n_rules == p->cap_rules) {
        uint32_t cap = p->cap_rules ? p->cap_rules * 2 : 64;
        prule *r = realloc(p->rules, cap * sizeof *r);
        if (r == NULL) goto oom;
        p->rules = r;
        char **nm = realloc(p->names, cap * sizeof *nm);
        if (nm == NULL) goto oom;
        p->names = nm;
        p->cap_rules = cap;
    }
    char *copy = malloc(n + 1);
    if (copy == NULL) goto oom;
    memcpy(copy, name, n);
    copy[n] = '\0';
    uint32_t id = p->n_rules++;
    p->names[id] = copy;
    memset(&p->rules[id], 0, sizeof p->rules[id]);
    p->rules[id].first_ref_by = UINT32_MAX;
    if ((uint64_t)p->n_rules * 2 > p->map_cap) {
        if (!map_grow(p)) goto oom;
    } else {
        p->map[j] = id + 1;
    }
    return id;
oom:
    perr(p, NULL, "out of memory");
    return UINT32_MAX;
}

static uint32_t generated_rule(parser *p, uint32_t base) {
    char name[320];
    int n = snprintf(name, sizeof name, "%.200s_%u", p->names[base], p->n_rules);
    uint32_t id = rule_id(p, name, (size_t)n, false);
    if (id != UINT32_MAX) p->rules[id].defined = true;
    return id;
}

static bool push(parser *p, prule *r, uint32_t type, uint32_t value) {
    if (p->failed) return false;
    if (p->total_elems >= SY_GRAMMAR_MAX_ELEMENTS) {
        perr(p, NULL, "grammar too large: more than %u elements after expanding repetitions",
             SY_GRAMMAR_MAX_ELEMENTS);
        return false;
    }
    if (r->n == r->cap) {
        uint32_t cap = r->cap ? r->cap * 2 : 8;
        gelem *e = realloc(r->e, cap * sizeof *e);
        if (e == NULL) {
            perr(p, NULL, "out of memory");
            return false;
        }
        r->e = e;
        r->cap = cap;
    }
    r->e[r->n++] = (gelem){type, value};
    p->total_elems++;
    return true;
}

static bool is_word_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
}

static const char *skip_space(const char *s, bool newline_ok) {
    while (*s == ' ' || *s == '\t' || *s == '#' || (newline_ok && (*s == '\r' || *s == '\n'))) {
        if (*s == '#') {
            while (*s && *s != '\r' && *s != '\n') s++;
        } else {
            s++;
        }
    }
    return s;
}

static const char *parse_hex(parser *p, const char *s, int digits, uint32_t *out) {
    uint32_t v = 0;
    for (int i = 0; i < digits; i++) {
        char c = s[i];
        uint32_t d;
        if (c >= '0' && c <= '9') d = (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f') d = (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') d = (uint32_t)(c - 'A' + 10);
        else {
            perr(p, s, "expecting %d hex digits", digits);
            return NULL;
        }
        v = (v << 4) | d;
    }
    if (v > 0x10FFFF) {
        perr(p, s, "code point above U+10FFFF");
        return NULL;
    }
    *out = v;
    return s + digits;
}

static const char *parse_char(parser *p, const char *s, uint32_t *cp) {
    if (*s == '\\') {
        switch (s[1]) {
        case 'x': return parse_hex(p, s + 2, 2, cp);
        case 'u': return parse_hex(p, s + 2, 4, cp);
        case 'U': return parse_hex(p, s + 2, 8, cp);
        case 't': *cp = '\t'; return s + 2;
        case 'r': *cp = '\r'; return s + 2;
        case 'n': *cp = '\n'; return s + 2;
        case '\\': case '"': case '[': case ']':
            *cp = (uint8_t)s[1];
            return s + 2;
        default:
            perr(p, s, "unknown escape");
            return NULL;
        }
    }
    if (*s == '\0') {
        perr(p, s, "unexpected end of input");
        return NULL;
    }
    /* strict UTF-8: no overlong forms, no surrogates, nothing above U+10FFFF */
    size_t n = sy_utf8_decode((const unsigned char *)s, (size_t)(p->end - s), cp);
    if (n == 0) {
        perr(p, s, "invalid UTF-8");
        return NULL;
    }
    return s + n;
}

static const char *parse_alternates(parser *p, const char *s, uint32_t rule, uint32_t base, bool nested);

/* S{min,max} (max < 0: unbounded) applied to r->e[sym_start..], llama.cpp's rewrite:
 *   S{m,n} -> S (m times) S'(n-m),  S'(x) ::= S S'(x-1) | ,  S'(1) ::= S |
 *   S{m,}  -> S (m times) S',       S'    ::= S S' |                                                    */
static bool repeat(parser *p, const char *at, uint32_t rule, uint32_t base, uint32_t sym_start, long min,
                   long max) {
    prule *r = &p->rules[rule];
    if (sym_start >= r->n) {
        perr(p, at, "expecting an item before */+/?/{");
        return false;
    }
    uint32_t plen = r->n - sym_start;
    gelem *prev = malloc(plen * sizeof *prev);
    if (prev == NULL) {
        perr(p, NULL, "out of memory");
        return false;
    }
    memcpy(prev, r->e + sym_start, plen * sizeof *prev);
    long n_opt = max < 0 ? 1 : max - min;
    /* size check before expanding: the copies and the helper rules */
    uint64_t need = (uint64_t)(min > 0 ? min - 1 : 0) * plen + (uint64_t)n_opt * (plen + 3);
    if (p->total_elems + need > SY_GRAMMAR_MAX_ELEMENTS) {
        perr(p, at, "repetition in rule '%s' expands past %u elements", p->names[base], SY_GRAMMAR_MAX_ELEMENTS);
        free(prev);
        return false;
    }
    if (min == 0) {
        p->total_elems -= plen;
        r->n = sym_start;
    } else {
        for (long i = 1; i < min; i++)
            for (uint32_t k = 0; k < plen; k++)
                if (!push(p, &p->rules[rule], prev[k].type, prev[k].value)) goto fail;
    }
    uint32_t last = 0;
    for (long i = 0; i < n_opt; i++) {
        uint32_t id = generated_rule(p, base);
        if (id == UINT32_MAX) goto fail;
        prule *rr = &p->rules[id];
        for (uint32_t k = 0; k < plen; k++)
            if (!push(p, rr, prev[k].type, prev[k].value)) goto fail;
        if (i > 0 || max < 0)
            if (!push(p, rr, GE_REF, max < 0 ? id : last)) goto fail;
        if (!push(p, rr, GE_ALT, 0) || !push(p, rr, GE_END, 0)) goto fail;
        last = id;
    }
    if (n_opt > 0 && !push(p, &p->rules[rule], GE_REF, last)) goto fail;
    free(prev);
    return true;
fail:
    free(prev);
    return false;
}

static const char *parse_int(parser *p, const char *s, long *out) {
    if (!(*s >= '0' && *s <= '9')) {
        perr(p, s, "expecting an integer");
        return NULL;
    }
    long v = 0;
    while (*s >= '0' && *s <= '9') {
        if (v > (long)SY_GRAMMAR_MAX_REPEAT) {
            s++;
            continue;
        }
        v = v * 10 + (*s++ - '0');
    }
    *out = v;
    return s;
}

static uint32_t add_text(parser *p, const char *s, size_t n) {
    if (p->n_texts == p->cap_texts) {
        uint32_t cap = p->cap_texts ? p->cap_texts * 2 : 8;
        char **t = realloc(p->texts, cap * sizeof *t);
        if (t == NULL) return UINT32_MAX;
        p->texts = t;
        size_t *l = realloc(p->text_lens, cap * sizeof *l);
        if (l == NULL) return UINT32_MAX;
        p->text_lens = l;
        p->cap_texts = cap;
    }
    char *c = malloc(n + 1);
    if (c == NULL) return UINT32_MAX;
    memcpy(c, s, n);
    c[n] = '\0';
    p->texts[p->n_texts] = c;
    p->text_lens[p->n_texts] = n;
    return p->n_texts++;
}

/* <[id]> or <text>, after an optional '!'. */
static const char *parse_token(parser *p, const char *s, uint32_t rule, bool negated) {
    const char *start = s;
    s++; /* '<' */
    if (*s == '[') {
        s++;
        uint64_t v = 0;
        const char *d = s;
        while (*s >= '0' && *s <= '9') {
            v = v * 10 + (uint64_t)(*s++ - '0');
            if (v > INT32_MAX) {
                perr(p, d, "token id out of range");
                return NULL;
            }
        }
        if (s == d || s[0] != ']' || s[1] != '>') {
            perr(p, start, "expecting <[token-id]>");
            return NULL;
        }
        push(p, &p->rules[rule], negated ? GE_TOKEN_NOT : GE_TOKEN, (uint32_t)v);
        return s + 2;
    }
    const char *t = s;
    while (*s && *s != '>' && *s != '\n' && *s != '\r') s++;
    if (*s != '>' || s == t) {
        perr(p, start, "expecting <token-text>");
        return NULL;
    }
    /* the token's text is the whole reference, brackets included: <think> is the token "<think>" */
    uint32_t idx = add_text(p, start, (size_t)(s + 1 - start));
    if (idx == UINT32_MAX) {
        perr(p, NULL, "out of memory");
        return NULL;
    }
    push(p, &p->rules[rule], negated ? GE_TOKEN_TEXT_NOT : GE_TOKEN_TEXT, idx);
    return s + 1;
}

static const char *parse_sequence(parser *p, const char *s, uint32_t rule, uint32_t base, bool nested) {
    uint32_t sym_start = p->rules[rule].n;
    while (*s && !p->failed) {
        if (*s == '"') {
            s++;
            sym_start = p->rules[rule].n;
            while (*s != '"') {
                if (*s == '\0') {
                    perr(p, s, "unterminated string literal in rule '%s'", p->names[base]);
                    return NULL;
                }
                uint32_t cp;
                s = parse_char(p, s, &cp);
                if (s == NULL || !push(p, &p->rules[rule], GE_CHAR, cp)) return NULL;
            }
            s = skip_space(s + 1, nested);
        } else if (*s == '[') {
            s++;
            uint32_t type = GE_CHAR;
            if (*s == '^') {
                s++;
                type = GE_CHAR_NOT;
            }
            sym_start = p->rules[rule].n;
            while (*s != ']') {
                if (*s == '\0') {
                    perr(p, s, "unterminated character class in rule '%s'", p->names[base]);
                    return NULL;
                }
                uint32_t cp;
                s = parse_char(p, s, &cp);
                if (s == NULL) return NULL;
                uint32_t t = p->rules[rule].n > sym_start ? GE_CHAR_ALT : type;
                if (!push(p, &p->rules[rule], t, cp)) return NULL;
                if (s[0] == '-' && s[1] != ']') {
                    if (s[1] == '\0') {
                        perr(p, s, "unterminated character class in rule '%s'", p->names[base]);
                        return NULL;
                    }
                    uint32_t hi;
                    const char *at = s + 1;
                    s = parse_char(p, s + 1, &hi);
                    if (s == NULL) return NULL;
                    if (hi < cp) {
                        perr(p, at, "empty range in rule '%s'", p->names[base]);
                        return NULL;
                    }
                    if (!push(p, &p->rules[rule], GE_CHAR_RNG, hi)) return NULL;
                }
            }
            s = skip_space(s + 1, nested);
        } else if (is_word_char(*s)) {
            const char *e = s;
            while (is_word_char(*e)) e++;
            uint32_t id = rule_id(p, s, (size_t)(e - s), false);
            if (id == UINT32_MAX) return NULL;
            if (p->rules[id].first_ref_by == UINT32_MAX) p->rules[id].first_ref_by = base;
            sym_start = p->rules[rule].n;
            if (!push(p, &p->rules[rule], GE_REF, id)) return NULL;
            s = skip_space(e, nested);
        } else if (*s == '(') {
            if (p->depth >= SY_GRAMMAR_MAX_NESTING) {
                perr(p, s, "parentheses nested deeper than %u in rule '%s'", SY_GRAMMAR_MAX_NESTING,
                     p->names[base]);
                return NULL;
            }
            const char *open = s;
            s = skip_space(s + 1, true);
            uint32_t sub = generated_rule(p, base);
            if (sub == UINT32_MAX) return NULL;
            p->depth++;
            s = parse_alternates(p, s, sub, base, true);
            p->depth--;
            if (s == NULL) return NULL;
            if (*s != ')') {
                perr(p, *s ? s : open, "expecting ')' in rule '%s'", p->names[base]);
                return NULL;
            }
            sym_start = p->rules[rule].n;
            if (!push(p, &p->rules[rule], GE_REF, sub)) return NULL;
            s = skip_space(s + 1, nested);
        } else if (*s == '.') {
            sym_start = p->rules[rule].n;
            if (!push(p, &p->rules[rule], GE_ANY, 0)) return NULL;
            s = skip_space(s + 1, nested);
        } else if (*s == '<' || (*s == '!' && s[1] == '<')) {
            bool neg = *s == '!';
            sym_start = p->rules[rule].n;
            s = parse_token(p, neg ? s + 1 : s, rule, neg);
            if (s == NULL) return NULL;
            s = skip_space(s, nested);
        } else if (*s == '*' || *s == '+' || *s == '?') {
            const char *at = s;
            long min = *s == '+' ? 1 : 0, max = *s == '?' ? 1 : -1;
            s = skip_space(s + 1, nested);
            /* as in llama.cpp, the symbol stays where it started: a second quantifier applies to the result */
            if (!repeat(p, at, rule, base, sym_start, min, max)) return NULL;
        } else if (*s == '{') {
            const char *at = s;
            long min, max;
            s = skip_space(s + 1, nested);
            s = parse_int(p, s, &min);
            if (s == NULL) return NULL;
            s = skip_space(s, nested);
            if (*s == '}') {
                max = min;
            } else if (*s == ',') {
                s = skip_space(s + 1, nested);
                max = -1;
                if (*s >= '0' && *s <= '9') {
                    s = parse_int(p, s, &max);
                    if (s == NULL) return NULL;
                    s = skip_space(s, nested);
                }
                if (*s != '}') {
                    perr(p, s, "expecting '}'");
                    return NULL;
                }
            } else {
                perr(p, s, "expecting ',' or '}'");
                return NULL;
            }
            s = skip_space(s + 1, nested);
            if (min > (long)SY_GRAMMAR_MAX_REPEAT || max > (long)SY_GRAMMAR_MAX_REPEAT) {
                perr(p, at, "repetition count over %u in rule '%s'", SY_GRAMMAR_MAX_REPEAT, p->names[base]);
                return NULL;
            }
            if (max >= 0 && max < min) {
                perr(p, at, "repetition {%ld,%ld} has max < min in rule '%s'", min, max, p->names[base]);
                return NULL;
            }
            if (!repeat(p, at, rule, base, sym_start, min, max)) return NULL;
        } else {
            break;
        }
    }
    return p->failed ? NULL : s;
}

static const char *parse_alternates(parser *p, const char *s, uint32_t rule, uint32_t base, bool nested) {
    uint32_t n_alts = 1;
    s = parse_sequence(p, s, rule, base, nested);
    while (s != NULL && *s == '|') {
        if (++n_alts > SY_GRAMMAR_MAX_ALTERNATIVES) {
            perr(p, s, "rule '%s' has more than %u alternatives", p->names[base], SY_GRAMMAR_MAX_ALTERNATIVES);
            return NULL;
        }
        if (!push(p, &p->rules[rule], GE_ALT, 0)) return NULL;
        s = skip_space(s + 1, true);
        s = parse_sequence(p, s, rule, base, nested);
    }
    if (s == NULL || !push(p, &p->rules[rule], GE_END, 0)) return NULL;
    return s;
}

static const char *parse_rule(parser *p, const char *s) {
    const char *e = s;
    while (is_word_char(*e)) e++;
    if (e == s) {
        perr(p, s, "expecting a rule name");
        return NULL;
    }
    uint32_t id = rule_id(p, s, (size_t)(e - s), false);
    if (id == UINT32_MAX) return NULL;
    if (p->rules[id].defined) {
        perr(p, s, "rule '%s' is defined twice", p->names[id]);
        return NULL;
    }
    p->rules[id].defined = true;
    const char *q = skip_space(e, false);
    if (strncmp(q, "::=", 3) != 0) {
        perr(p, q, "expecting ::= after rule name '%s'", p->names[id]);
        return NULL;
    }
    q = skip_space(q + 3, true);
    q = parse_alternates(p, q, id, id, false);
    if (q == NULL) return NULL;
    if (*q == '\r') q += q[1] == '\n' ? 2 : 1;
    else if (*q == '\n') q++;
    else if (*q) {
        perr(p, q, "expecting newline or end after rule '%s'", p->names[id]);
        return NULL;
    }
    return skip_space(q, true);
}

/* ---- checks ---------------------------------------------------------------------------------------------- */

/* Rules that can match the empty string, by a linear worklist: an alternative becomes empty-capable when all
 * its rule references are (an alternative with a terminal never is). */
static bool compute_nullable(sy_grammar *g, bool *nullable) {
    uint32_t n_alts = g->alt_off[g->n_rules];
    uint32_t *cnt = calloc(n_alts ? n_alts : 1, sizeof *cnt), *owner = malloc((n_alts + 1) * sizeof *owner);
    uint32_t *occ_off = calloc(g->n_rules + 1, sizeof *occ_off), *queue = malloc((g->n_rules + 1) * sizeof *queue);
    uint32_t *occ = NULL;
    bool ok = cnt && owner && occ_off && queue;
    if (!ok) goto done;
    for (uint32_t r = 0; r < g->n_rules; r++)
        for (uint32_t a = g->alt_off[r]; a < g->alt_off[r + 1]; a++) {
            owner[a] = r;
            bool term = false;
            uint32_t refs = 0;
            for (uint32_t pos = g->alts[a]; !ge_is_end(&g->elems[pos]); pos = g->next[pos]) {
                if (g->elems[pos].type == GE_REF) refs++;
                else term = true;
            }
            cnt[a] = term ? UINT32_MAX : refs;
            if (!term)
                for (uint32_t pos = g->alts[a]; !ge_is_end(&g->elems[pos]); pos = g->next[pos])
                    occ_off[g->elems[pos].value + 1]++;
        }
    for (uint32_t r = 0; r < g->n_rules; r++) occ_off[r + 1] += occ_off[r];
    occ = malloc((occ_off[g->n_rules] + 1) * sizeof *occ);
    uint32_t *fill = calloc(g->n_rules + 1, sizeof *fill);
    if (occ == NULL || fill == NULL) {
        free(fill);
        ok = false;
        goto done;
    }
    for (uint32_t a = 0; a < n_alts; a++) {
        if (cnt[a] == UINT32_MAX) continue;
        for (uint32_t pos = g->alts[a]; !ge_is_end(&g->elems[pos]); pos = g->next[pos]) {
            uint32_t t = g->elems[pos].value;
            occ[occ_off[t] + fill[t]++] = a;
        }
    }
    free(fill);
    uint32_t qn = 0;
    for (uint32_t a = 0; a < n_alts; a++)
        if (cnt[a] == 0 && !nullable[owner[a]]) {
            nullable[owner[a]] = true;
            queue[qn++] = owner[a];
        }
    for (uint32_t qi = 0; qi < qn; qi++) {
        uint32_t r = queue[qi];
        for (uint32_t k = occ_off[r]; k < occ_off[r + 1]; k++) {
            uint32_t a = occ[k];
            if (--cnt[a] == 0 && !nullable[owner[a]]) {
                nullable[owner[a]] = true;
                queue[qn++] = owner[a];
            }
        }
    }
done:
    free(cnt);
    free(owner);
    free(occ_off);
    free(queue);
    free(occ);
    return ok;
}

/* Left recursion: a cycle in "rule A can start with rule B" (B first in an alternative of A, or after rules
 * that can be empty). Such a cycle would make expansion loop forever. Edges in CSR form, iterative DFS. */
static bool check_left_recursion(sy_grammar *g, const bool *nullable, char *err, size_t cap) {
    uint32_t n = g->n_rules;
    uint32_t *off = calloc((size_t)n + 1, sizeof *off), *edges = NULL, *fill = NULL, *st = NULL, *it = NULL;
    uint8_t *color = calloc(n, 1);
    bool ok = off && color;
    for (int pass = 0; ok && pass < 2; pass++) {
        for (uint32_t r = 0; r < n; r++)
            for (uint32_t a = g->alt_off[r]; a < g->alt_off[r + 1]; a++)
                for (uint32_t pos = g->alts[a]; !ge_is_end(&g->elems[pos]); pos = g->next[pos]) {
                    const gelem *e = &g->elems[pos];
                    if (e->type != GE_REF) break;
                    if (pass == 0) off[r + 1]++;
                    else edges[off[r] + fill[r]++] = e->value;
                    if (!nullable[e->value]) break;
                }
        if (pass == 0) {
            for (uint32_t r = 0; r < n; r++) off[r + 1] += off[r];
            edges = malloc(((size_t)off[n] + 1) * sizeof *edges);
            fill = calloc((size_t)n + 1, sizeof *fill);
            ok = edges && fill;
        }
    }
    st = malloc(((size_t)n + 1) * sizeof *st);
    it = malloc(((size_t)n + 1) * sizeof *it);
    ok = ok && st && it;
    if (!ok) sy_gerr(err, cap, "out of memory");
    for (uint32_t r0 = 0; r0 < n && ok; r0++) {
        if (color[r0]) continue;
        uint32_t sp = 0;
        st[sp] = r0;
        it[sp++] = off[r0];
        color[r0] = 1;
        while (sp > 0 && ok) {
            uint32_t r = st[sp - 1];
            if (it[sp - 1] == off[r + 1]) {
                color[r] = 2;
                sp--;
                continue;
            }
            uint32_t t = edges[it[sp - 1]++];
            if (color[t] == 1) {
                char path[256];
                size_t k = 0;
                uint32_t from = 0;
                while (from < sp && st[from] != t) from++;
                for (uint32_t i = from; i < sp && k < sizeof path - 48; i++)
                    k += (size_t)snprintf(path + k, sizeof path - k, "%.40s -> ", g->rule_names[st[i]]);
                snprintf(path + k, sizeof path - k, "%.40s", g->rule_names[t]);
                sy_gerr(err, cap, "left recursion in rule '%s': %s", g->rule_names[t], path);
                ok = false;
            } else if (color[t] == 0) {
                color[t] = 1;
                st[sp] = t;
                it[sp++] = off[t];
            }
        }
    }
    free(off);
    free(edges);
    free(fill);
    free(st);
    free(it);
    free(color);
    return ok;
}

void sy_grammar_free(sy_grammar *g) {
    if (g == NULL) return;
    if (atomic_fetch_sub(&g->refs, 1) != 1) return;
    if (g->memo) sy_gmemo_release(g->memo);
    pthread_mutex_destroy(&g->mu);
    for (uint32_t i = 0; i < g->n_rules; i++) free(g->rule_names ? g->rule_names[i] : NULL);
    for (uint32_t i = 0; i < g->n_tok_texts; i++) free(g->tok_texts[i]);
    free(g->tok_texts);
    free(g->tok_text_lens);
    free(g->rule_names);
    free(g->elems);
    free(g->rule_start);
    free(g->alt_off);
    free(g->alts);
    free(g->next);
    free(g);
}

sy_grammar *sy_grammar_ref(sy_grammar *g) {
    if (g) atomic_fetch_add(&g->refs, 1);
    return g;
}

static void parser_free(parser *p) {
    for (uint32_t i = 0; i < p->n_rules; i++) {
        free(p->rules[i].e);
        free(p->names ? p->names[i] : NULL);
    }
    for (uint32_t i = 0; i < p->n_texts; i++) free(p->texts[i]);
    free(p->texts);
    free(p->text_lens);
    free(p->rules);
    free(p->names);
    free(p->map);
    free((char *)p->src);
}

sy_grammar *sy_grammar_compile(const char *gbnf, size_t len, const char *root_rule, char *err, size_t err_cap) {
    sy_gerr(err, err_cap, "%s", "");
    if (gbnf == NULL) {
        sy_gerr(err, err_cap, "no grammar text");
        return NULL;
    }
    if (len > SY_GRAMMAR_MAX_TEXT) {
        sy_gerr(err, err_cap, "grammar text is %zu bytes, over the %u byte limit", len, SY_GRAMMAR_MAX_TEXT);
        return NULL;
    }
    if (memchr(gbnf, '\0', len) != NULL) {
        sy_gerr(err, err_cap, "grammar text contains a NUL byte at offset %zu",
                (size_t)((const char *)memchr(gbnf, '\0', len) - gbnf));
        return NULL;
    }
    parser p = {0};
    p.err = err;
    p.err_cap = err_cap;
    char *src = malloc(len + 1);
    if (src == NULL) {
        sy_gerr(err, err_cap, "out of memory");
        return NULL;
    }
    memcpy(src, gbnf, len);
    src[len] = '\0';
    p.src = src;
    p.end = src + len;
    const char *s = skip_space(src, true);
    while (*s && s != NULL) {
        s = parse_rule(&p, s);
        if (s == NULL) break;
    }
    sy_grammar *g = NULL;
    if (p.failed) goto out;
    for (uint32_t i = 0; i < p.n_rules; i++)
        if (!p.rules[i].defined) {
            uint32_t by = p.rules[i].first_ref_by;
            perr(&p, NULL, "undefined rule '%s' (referenced by rule '%s')", p.names[i],
                 by < p.n_rules ? p.names[by] : "?");
            goto out;
        }
    const char *root_name = root_rule ? root_rule : "root";
    uint32_t root = p.n_rules ? rule_id(&p, root_name, strlen(root_name), true) : UINT32_MAX;
    if (root == UINT32_MAX) {
        perr(&p, NULL, "grammar has no rule '%s'", root_name);
        goto out;
    }

    g = calloc(1, sizeof *g);
    if (g == NULL) goto oom;
    atomic_init(&g->refs, 1);
    pthread_mutex_init(&g->mu, NULL);
    g->n_rules = p.n_rules;
    g->root = root;
    g->n_elems = (uint32_t)p.total_elems;
    g->elems = malloc((p.total_elems + 1) * sizeof *g->elems);
    g->rule_start = malloc((p.n_rules + 1) * sizeof *g->rule_start);
    g->alt_off = malloc((p.n_rules + 1) * sizeof *g->alt_off);
    g->next = malloc((p.total_elems + 1) * sizeof *g->next);
    if (!g->elems || !g->rule_start || !g->alt_off || !g->next) goto oom;
    uint32_t pos = 0, n_alts = 0;
    for (uint32_t r = 0; r < p.n_rules; r++) {
        g->rule_start[r] = pos;
        memcpy(g->elems + pos, p.rules[r].e, p.rules[r].n * sizeof *g->elems);
        for (uint32_t k = 0; k < p.rules[r].n; k++)
            if (ge_is_end(&p.rules[r].e[k])) n_alts++;
        pos += p.rules[r].n;
    }
    g->alts = malloc((n_alts + 1) * sizeof *g->alts);
    if (g->alts == NULL) goto oom;
    n_alts = 0;
    for (uint32_t r = 0; r < p.n_rules; r++) {
        g->alt_off[r] = n_alts;
        uint32_t start = g->rule_start[r], end = start + p.rules[r].n;
        g->alts[n_alts++] = start;
        for (uint32_t k = start; k < end; k++) {
            if (g->elems[k].type == GE_ALT) g->alts[n_alts++] = k + 1;
            /* next symbol: classes span their continuation elements */
            uint32_t t = g->elems[k].type, nx = k + 1;
            if (t == GE_CHAR || t == GE_CHAR_NOT)
                while (g->elems[nx].type == GE_CHAR_ALT || g->elems[nx].type == GE_CHAR_RNG) nx++;
            g->next[k] = nx;
        }
    }
    g->alt_off[p.n_rules] = n_alts;
    g->rule_names = p.names;
    p.names = NULL;
    g->tok_texts = p.texts;
    g->tok_text_lens = p.text_lens;
    g->n_tok_texts = p.n_texts;
    p.texts = NULL;
    p.text_lens = NULL;
    p.n_texts = 0;

    bool *nullable = calloc(g->n_rules, sizeof *nullable);
    if (nullable == NULL || !compute_nullable(g, nullable)) {
        free(nullable);
        goto oom;
    }
    bool ok = check_left_recursion(g, nullable, err, err_cap);
    free(nullable);
    if (!ok) {
        sy_grammar_free(g);
        g = NULL;
    }
    goto out;
oom:
    sy_gerr(err, err_cap, "out of memory compiling the grammar");
    if (g) {
        if (g->rule_names == NULL) g->n_rules = 0;
        sy_grammar_free(g);
    }
    g = NULL;
out:
    parser_free(&p);
    return g;
}

/* ---- dump ------------------------------------------------------------------------------------------------ */

static void dump_char(sy_buf *b, uint32_t c, bool in_class) {
    if (c == '\\' || c == '"' || (in_class && (c == ']' || c == '[' || c == '-' || c == '^'))) {
        if (c == '-' || c == '^') sy_buf_printf(b, "\\x%02X", c);
        else sy_buf_printf(b, "\\%c", (char)c);
    } else if (c >= 0x20 && c < 0x7F) {
        char ch = (char)c;
        sy_buf_append(b, &ch, 1);
    } else if (c < 0x100) {
        sy_buf_printf(b, "\\x%02X", c);
    } else if (c < 0x10000) {
        sy_buf_printf(b, "\\u%04X", c);
    } else {
        sy_buf_printf(b, "\\U%08X", c);
    }
}

char *sy_grammar_dump(const sy_grammar *g) {
    sy_buf b = {0};
    for (uint32_t r = 0; r < g->n_rules; r++) {
        sy_buf_printf(&b, "%s ::=", g->rule_names[r]);
        for (uint32_t a = g->alt_off[r]; a < g->alt_off[r + 1]; a++) {
            if (a > g->alt_off[r]) sy_buf_puts(&b, " |");
            for (uint32_t pos = g->alts[a]; !ge_is_end(&g->elems[pos]); pos = g->next[pos]) {
                const gelem *e = &g->elems[pos];
                sy_buf_puts(&b, " ");
                switch (e->type) {
                case GE_REF: sy_buf_puts(&b, g->rule_names[e->value]); break;
                case GE_ANY: sy_buf_puts(&b, "."); break;
                case GE_TOKEN: sy_buf_printf(&b, "<[%u]>", e->value); break;
                case GE_TOKEN_NOT: sy_buf_printf(&b, "!<[%u]>", e->value); break;
                case GE_TOKEN_TEXT: sy_buf_printf(&b, "%s", g->tok_texts[e->value]); break;
                case GE_TOKEN_TEXT_NOT: sy_buf_printf(&b, "!%s", g->tok_texts[e->value]); break;
                case GE_CHAR:
                case GE_CHAR_NOT:
                    sy_buf_puts(&b, e->type == GE_CHAR_NOT ? "[^" : "[");
                    for (const gelem *c = e; c < &g->elems[g->next[pos]]; c++) {
                        if (c->type == GE_CHAR_RNG) sy_buf_puts(&b, "-");
                        dump_char(&b, c->value, true);
                    }
                    sy_buf_puts(&b, "]");
                    break;
                default: break;
                }
            }
        }
        sy_buf_puts(&b, "\n");
    }
    return sy_buf_take(&b);
}
