/*
 * Jinja source -> tokens -> AST, with the whitespace rules transformers sets (trim_blocks, lstrip_blocks), '-' and
 * '+' on tags, raw blocks, and jinja2's newline handling (\r\n and \r read as \n, one trailing newline dropped).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat_jinja_internal.h"

typedef enum {
    T_EOF = 0,
    T_TEXT,
    T_VAR_BEGIN,
    T_VAR_END,
    T_BLOCK_BEGIN,
    T_BLOCK_END,
    T_NAME,
    T_STRING,
    T_INT,
    T_FLOAT,
    T_OP
} tok_kind;

typedef struct tok {
    uint8_t kind;
    char op[3];
    uint32_t line;
    const char *p; /* NAME, TEXT, STRING (decoded) */
    size_t n;
    int64_t i;
    double f;
} tok;

typedef struct parser {
    sy_chat_jinja *t;
    const char *src;
    size_t len;
    tok *toks;
    size_t n_toks, cap_toks, pos;
    char *err;
    size_t err_size;
    bool failed;
    jj_node *cur_macro;
    uint32_t depth;
} parser;

#define MAX_PARSE_DEPTH 200

static void perr(parser *p, uint32_t line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void perr(parser *p, uint32_t line, const char *fmt, ...) {
    if (p->failed) return;
    p->failed = true;
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(p->err, p->err_size, "chat template line %u: %s", line, msg);
}

static void *palloc(parser *p, size_t n) {
    void *m = jj_arena_alloc(&p->t->arena, n);
    if (m == NULL) {
        perr(p, 0, "the template needs more memory than allowed");
        return NULL;
    }
    return m;
}

/* ------------------------------------------------------------------------------------------------------------
 * Lexer */

static bool push_tok(parser *p, tok t) {
    if (p->n_toks == p->cap_toks) {
        size_t cap = p->cap_toks ? p->cap_toks * 2 : 256;
        if (cap > SY_CHAT_JINJA_MAX_NODES * 4) {
            perr(p, t.line, "the template has too many tokens");
            return false;
        }
        tok *n = realloc(p->toks, cap * sizeof *n);
        if (n == NULL) {
            perr(p, t.line, "out of memory");
            return false;
        }
        p->toks = n;
        p->cap_toks = cap;
    }
    p->toks[p->n_toks++] = t;
    return true;
}

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
static bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static bool is_name_char(char c) { return is_name_start(c) || (c >= '0' && c <= '9'); }

static uint32_t count_lines(const char *s, size_t n) {
    uint32_t k = 0;
    for (size_t i = 0; i < n; i++) k += s[i] == '\n';
    return k;
}

static void put_utf8(char *out, size_t *o, uint32_t cp) {
    if (cp < 0x80) out[(*o)++] = (char)cp;
    else if (cp < 0x800) {
        out[(*o)++] = (char)(0xC0 | (cp >> 6));
        out[(*o)++] = (char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out[(*o)++] = (char)(0xE0 | (cp >> 12));
        out[(*o)++] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[(*o)++] = (char)(0x80 | (cp & 0x3F));
    } else {
        out[(*o)++] = (char)(0xF0 | (cp >> 18));
        out[(*o)++] = (char)(0x80 | ((cp >> 12) & 0x3F));
        out[(*o)++] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[(*o)++] = (char)(0x80 | (cp & 0x3F));
    }
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* A string literal's body with Python's escapes decoded. */
static bool decode_string(parser *p, const char *s, size_t n, uint32_t line, tok *t) {
    char *out = palloc(p, n + 1);
    if (out == NULL) return false;
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c != '\\' || i + 1 >= n) {
            out[o++] = c;
            continue;
        }
        char e = s[++i];
        switch (e) {
        case '\\': out[o++] = '\\'; break;
        case '\'': out[o++] = '\''; break;
        case '"': out[o++] = '"'; break;
        case 'n': out[o++] = '\n'; break;
        case 't': out[o++] = '\t'; break;
        case 'r': out[o++] = '\r'; break;
        case 'b': out[o++] = '\b'; break;
        case 'f': out[o++] = '\f'; break;
        case 'v': out[o++] = '\v'; break;
        case 'a': out[o++] = '\a'; break;
        case '\n': break; /* line continuation */
        case 'x':
        case 'u':
        case 'U': {
            size_t digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
            uint32_t cp = 0;
            for (size_t k = 1; k <= digits; k++) {
                int h = i + k < n ? hexval(s[i + k]) : -1;
                if (h < 0) {
                    perr(p, line, "truncated \\%c escape in a string", e);
                    return false;
                }
                cp = cp * 16 + (uint32_t)h;
            }
            if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF) || cp == 0) {
                perr(p, line, "a string escape names an invalid character U+%04X", cp);
                return false;
            }
            i += digits;
            put_utf8(out, &o, cp);
            break;
        }
        default:
            if (e >= '0' && e <= '7') {
                uint32_t cp = (uint32_t)(e - '0');
                for (int k = 0; k < 2 && i + 1 < n && s[i + 1] >= '0' && s[i + 1] <= '7'; k++) cp = cp * 8 + (uint32_t)(s[++i] - '0');
                if (cp == 0) {
                    perr(p, line, "a string escape names the NUL character");
                    return false;
                }
                put_utf8(out, &o, cp);
            } else {
                out[o++] = '\\';
                out[o++] = e;
            }
        }
    }
    out[o] = '\0';
    t->p = out;
    t->n = o;
    return true;
}

static const char *const OPS2[] = {"//", "**", "==", "!=", "<=", ">="};
static const char OPS1[] = "+-*/%~[](){}<>=.:|,;";

/* Tokens of one tag from s[*i]; stops after its end marker. Returns false on error. */
static bool lex_tag(parser *p, size_t *ip, uint32_t *line, bool is_var, uint8_t *end_sign) {
    const char *s = p->src;
    size_t i = *ip;
    int balance = 0;
    uint32_t start_line = *line;
    for (;;) {
        while (i < p->len && is_space(s[i])) {
            if (s[i] == '\n') (*line)++;
            i++;
        }
        if (i >= p->len) {
            perr(p, start_line, "unexpected end of template: the tag opened here is not closed");
            return false;
        }
        if (balance == 0) {
            const char *endm = is_var ? "}}" : "%}";
            if ((s[i] == '-' || s[i] == '+') && i + 3 <= p->len && strncmp(s + i + 1, endm, 2) == 0) {
                *end_sign = (uint8_t)s[i];
                tok t = {.kind = is_var ? T_VAR_END : T_BLOCK_END, .line = *line};
                if (!push_tok(p, t)) return false;
                *ip = i + 3;
                return true;
            }
            if (i + 2 <= p->len && strncmp(s + i, endm, 2) == 0) {
                *end_sign = 0;
                tok t = {.kind = is_var ? T_VAR_END : T_BLOCK_END, .line = *line};
                if (!push_tok(p, t)) return false;
                *ip = i + 2;
                return true;
            }
        }
        char c = s[i];
        tok t = {.line = *line};
        if (is_name_start(c)) {
            size_t j = i;
            while (j < p->len && is_name_char(s[j])) j++;
            t.kind = T_NAME;
            t.p = s + i;
            t.n = j - i;
            i = j;
        } else if (c >= '0' && c <= '9') {
            size_t j = i;
            bool is_float = false;
            char num[80];
            size_t k = 0;
            while (j < p->len && ((s[j] >= '0' && s[j] <= '9') || s[j] == '_')) {
                if (s[j] != '_' && k < sizeof num - 1) num[k++] = s[j];
                j++;
            }
            if (j + 1 < p->len && s[j] == '.' && s[j + 1] >= '0' && s[j + 1] <= '9') {
                is_float = true;
                if (k < sizeof num - 1) num[k++] = '.';
                j++;
                while (j < p->len && ((s[j] >= '0' && s[j] <= '9') || s[j] == '_')) {
                    if (s[j] != '_' && k < sizeof num - 1) num[k++] = s[j];
                    j++;
                }
            }
            if (j < p->len && (s[j] == 'e' || s[j] == 'E')) {
                size_t q = j + 1;
                if (q < p->len && (s[q] == '+' || s[q] == '-')) q++;
                if (q < p->len && s[q] >= '0' && s[q] <= '9') {
                    is_float = true;
                    if (k < sizeof num - 1) num[k++] = 'e';
                    for (size_t r = j + 1; r < q; r++)
                        if (k < sizeof num - 1) num[k++] = s[r];
                    j = q;
                    while (j < p->len && s[j] >= '0' && s[j] <= '9') {
                        if (k < sizeof num - 1) num[k++] = s[j];
                        j++;
                    }
                }
            }
            num[k] = '\0';
            if (k >= sizeof num - 1) {
                perr(p, *line, "a number literal is too long");
                return false;
            }
            if (is_float) {
                t.kind = T_FLOAT;
                t.f = strtod(num, NULL);
            } else {
                t.kind = T_INT;
                char *end = NULL;
                unsigned long long v = strtoull(num, &end, 10);
                if (v > (unsigned long long)INT64_MAX || k > 19) {
                    perr(p, *line, "an integer literal is too large");
                    return false;
                }
                t.i = (int64_t)v;
            }
            i = j;
        } else if (c == '\'' || c == '"') {
            size_t j = i + 1;
            uint32_t nl = 0;
            while (j < p->len && s[j] != c) {
                if (s[j] == '\\' && j + 1 < p->len) j++;
                if (s[j] == '\n') nl++;
                j++;
            }
            if (j >= p->len) {
                perr(p, *line, "unexpected end of string: a string literal is not closed");
                return false;
            }
            t.kind = T_STRING;
            if (!decode_string(p, s + i + 1, j - i - 1, *line, &t)) return false;
            *line += nl;
            i = j + 1;
        } else {
            t.kind = T_OP;
            bool two = false;
            if (i + 1 < p->len)
                for (size_t k = 0; k < sizeof OPS2 / sizeof OPS2[0]; k++)
                    if (s[i] == OPS2[k][0] && s[i + 1] == OPS2[k][1]) {
                        two = true;
                        break;
                    }
            if (two) {
                t.op[0] = s[i];
                t.op[1] = s[i + 1];
                i += 2;
            } else if (strchr(OPS1, c) != NULL && c != '\0') {
                t.op[0] = c;
                i++;
                if (c == '(' || c == '[' || c == '{') balance++;
                if (c == ')' || c == ']' || c == '}') {
                    if (balance == 0) {
                        perr(p, *line, "unexpected '%c'", c);
                        return false;
                    }
                    balance--;
                }
            } else {
                perr(p, *line, "unexpected character '%c' in a tag", c);
                return false;
            }
        }
        if (!push_tok(p, t)) return false;
    }
}

/* The text before a tag, cut as jinja2 does: '-' strips all whitespace before, lstrip_blocks strips the spaces
 * and tabs from the line's start for block and comment tags. */
static size_t cut_text(const char *s, size_t start, size_t end, char sign, bool block_or_comment, bool line_starting) {
    if (sign == '-') {
        while (end > start && is_space(s[end - 1])) end--;
        return end;
    }
    if (sign != '+' && block_or_comment) {
        size_t l = end;
        while (l > start && s[l - 1] != '\n') l--;
        if (l > start || line_starting) {
            bool only_ws = true;
            for (size_t k = l; k < end; k++)
                if (s[k] != ' ' && s[k] != '\t') {
                    only_ws = false;
                    break;
                }
            if (only_ws) return l;
        }
    }
    return end;
}

static bool emit_text(parser *p, const char *s, size_t n, uint32_t line) {
    if (n == 0) return true;
    tok t = {.kind = T_TEXT, .p = s, .n = n, .line = line};
    return push_tok(p, t);
}

/* After a tag's end: '-' eats all whitespace, trim_blocks one newline (blocks and comments; '+' keeps it). */
static size_t after_end(parser *p, size_t i, uint8_t sign, bool trim, uint32_t *line, bool *line_starting) {
    const char *s = p->src;
    size_t start = i;
    if (sign == '-') {
        while (i < p->len && is_space(s[i])) i++;
    } else if (sign != '+' && trim && i < p->len && s[i] == '\n') {
        i++;
    }
    *line += count_lines(s + start, i - start);
    /* jinja2: the next tag starts a line when the text matched with this end ends in a newline */
    *line_starting = i > 0 && s[i - 1] == '\n';
    return i;
}

static bool lex(parser *p) {
    const char *s = p->src;
    size_t i = 0;
    uint32_t line = 1;
    bool line_starting = true;
    while (i < p->len) {
        /* find the next tag opener */
        size_t j = i;
        int kind = 0; /* 1 var, 2 block, 3 comment */
        while (j + 1 < p->len) {
            if (s[j] == '{' && (s[j + 1] == '{' || s[j + 1] == '%' || s[j + 1] == '#')) {
                kind = s[j + 1] == '{' ? 1 : s[j + 1] == '%' ? 2 : 3;
                break;
            }
            j++;
        }
        if (kind == 0) {
            if (!emit_text(p, s + i, p->len - i, line)) return false;
            break;
        }
        char sign = j + 2 < p->len ? s[j + 2] : 0;
        if (sign != '-' && sign != '+') sign = 0;
        size_t text_end = cut_text(s, i, j, sign, kind != 1, line_starting);
        if (!emit_text(p, s + i, text_end - i, line)) return false;
        line += count_lines(s + i, j - i);
        size_t k = j + 2 + (sign ? 1 : 0);
        if (kind == 3) {
            size_t e = k;
            while (e + 1 < p->len && !(s[e] == '#' && s[e + 1] == '}')) e++;
            if (e + 1 >= p->len) {
                perr(p, line, "unexpected end of template: a comment is not closed");
                return false;
            }
            uint8_t esign = (e > k && (s[e - 1] == '-' || s[e - 1] == '+')) ? (uint8_t)s[e - 1] : 0;
            line += count_lines(s + k, e - k);
            i = after_end(p, e + 2, esign, true, &line, &line_starting);
            continue;
        }
        /* raw blocks: {% raw %} ... {% endraw %} as text */
        if (kind == 2) {
            size_t q = k;
            while (q < p->len && is_space(s[q])) q++;
            if (q + 3 <= p->len && strncmp(s + q, "raw", 3) == 0 && (q + 3 == p->len || !is_name_char(s[q + 3]))) {
                size_t r = q + 3;
                while (r < p->len && is_space(s[r])) r++;
                uint8_t osign = 0;
                if (r < p->len && (s[r] == '-' || s[r] == '+')) osign = (uint8_t)s[r++];
                if (r + 2 > p->len || strncmp(s + r, "%}", 2) != 0) {
                    perr(p, line, "the raw tag takes no arguments");
                    return false;
                }
                line += count_lines(s + k, r - k);
                size_t body = r + 2;
                if (osign == '-')
                    while (body < p->len && is_space(s[body])) body++;
                else if (osign != '+' && body < p->len && s[body] == '\n')
                    body++;
                line += count_lines(s + r, body - r);
                /* find {%[-+]? endraw [-+]?%} */
                size_t e = body;
                size_t tag_start = 0, tag_end = 0;
                char esign_open = 0;
                uint8_t esign_close = 0;
                for (; e + 1 < p->len; e++) {
                    if (s[e] != '{' || s[e + 1] != '%') continue;
                    size_t x = e + 2;
                    char so = 0;
                    if (x < p->len && (s[x] == '-' || s[x] == '+')) so = s[x++];
                    while (x < p->len && is_space(s[x])) x++;
                    if (x + 6 > p->len || strncmp(s + x, "endraw", 6) != 0) continue;
                    x += 6;
                    while (x < p->len && is_space(s[x])) x++;
                    uint8_t sc = 0;
                    if (x < p->len && (s[x] == '-' || s[x] == '+')) sc = (uint8_t)s[x++];
                    if (x + 2 > p->len || strncmp(s + x, "%}", 2) != 0) continue;
                    tag_start = e;
                    tag_end = x + 2;
                    esign_open = so;
                    esign_close = sc;
                    break;
                }
                if (tag_end == 0) {
                    perr(p, line, "missing end of raw directive");
                    return false;
                }
                size_t body_end = cut_text(s, body, tag_start, esign_open, true, false);
                if (!emit_text(p, s + body, body_end - body, line)) return false;
                line += count_lines(s + body, tag_end - body);
                i = after_end(p, tag_end, esign_close, true, &line, &line_starting);
                continue;
            }
        }
        tok open = {.kind = kind == 1 ? T_VAR_BEGIN : T_BLOCK_BEGIN, .line = line};
        if (!push_tok(p, open)) return false;
        uint8_t esign = 0;
        size_t after = k;
        if (!lex_tag(p, &after, &line, kind == 1, &esign)) return false;
        i = after_end(p, after, esign, kind == 2, &line, &line_starting);
    }
    tok eof = {.kind = T_EOF, .line = line};
    return push_tok(p, eof);
}

/* ------------------------------------------------------------------------------------------------------------
 * Parser */

static tok *cur(parser *p) { return &p->toks[p->pos]; }
static tok *peek(parser *p, size_t k) {
    size_t i = p->pos + k;
    return i < p->n_toks ? &p->toks[i] : &p->toks[p->n_toks - 1];
}
static void adv(parser *p) {
    if (p->pos + 1 < p->n_toks) p->pos++;
}
static bool is_op(tok *t, const char *op) { return t->kind == T_OP && strcmp(t->op, op) == 0; }
static bool is_name(tok *t, const char *name) {
    return t->kind == T_NAME && t->n == strlen(name) && memcmp(t->p, name, t->n) == 0;
}

static const char *tok_desc(tok *t, char *buf, size_t size) {
    switch (t->kind) {
    case T_EOF: return "end of template";
    case T_TEXT: return "template data";
    case T_VAR_BEGIN: return "begin of print statement";
    case T_VAR_END: return "end of print statement";
    case T_BLOCK_BEGIN: return "begin of statement block";
    case T_BLOCK_END: return "end of statement block";
    case T_NAME: snprintf(buf, size, "'%.*s'", (int)(t->n > 40 ? 40 : t->n), t->p); return buf;
    case T_STRING: return "string";
    case T_INT: return "integer";
    case T_FLOAT: return "float";
    default: snprintf(buf, size, "'%s'", t->op); return buf;
    }
}

static bool expect_op(parser *p, const char *op) {
    if (p->failed) return false;
    if (!is_op(cur(p), op)) {
        char b[64];
        perr(p, cur(p)->line, "expected token '%s', got %s", op, tok_desc(cur(p), b, sizeof b));
        return false;
    }
    adv(p);
    return true;
}

static bool expect_kind(parser *p, tok_kind k, const char *what) {
    if (p->failed) return false;
    if (cur(p)->kind != k) {
        char b[64];
        perr(p, cur(p)->line, "expected %s, got %s", what, tok_desc(cur(p), b, sizeof b));
        return false;
    }
    adv(p);
    return true;
}

static jj_node *node(parser *p, jj_node_kind kind, uint32_t line) {
    if (p->failed) return NULL;
    if (++p->t->n_nodes > SY_CHAT_JINJA_MAX_NODES) {
        perr(p, line, "the template has more than %u nodes", SY_CHAT_JINJA_MAX_NODES);
        return NULL;
    }
    jj_node *n = palloc(p, sizeof *n);
    if (n == NULL) return NULL;
    memset(n, 0, sizeof *n);
    n->kind = (uint16_t)kind;
    n->line = line;
    return n;
}

/* growable node lists in the arena */
typedef struct nodevec {
    jj_node **items;
    size_t n, cap;
} nodevec;

static bool vec_push(parser *p, nodevec *v, jj_node *n) {
    if (n == NULL) return false;
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 4;
        jj_node **m = palloc(p, cap * sizeof *m);
        if (m == NULL) return false;
        if (v->n) memcpy(m, v->items, v->n * sizeof *m);
        v->items = m;
        v->cap = cap;
    }
    v->items[v->n++] = n;
    return true;
}

static jj_nodes vec_done(nodevec *v) {
    jj_nodes r = {v->items, v->n};
    return r;
}

static jj_node *parse_expression(parser *p, bool with_condexpr);
static jj_node *parse_unary(parser *p, bool with_filter);
static jj_node *parse_primary(parser *p);
static jj_node *parse_postfix(parser *p, jj_node *n);
static jj_node *parse_filter_expr(parser *p, jj_node *n);

static bool enter(parser *p) {
    if (++p->depth > MAX_PARSE_DEPTH) {
        perr(p, cur(p)->line, "the template nests deeper than %d levels", MAX_PARSE_DEPTH);
        return false;
    }
    return true;
}

/* a, b, c (a tuple when there is a comma); with_condexpr false for `for ... in X if` */
static jj_node *parse_tuple(parser *p, bool with_condexpr, bool simplified, bool explicit_parens) {
    uint32_t line = cur(p)->line;
    nodevec items = {0};
    bool is_tuple = false;
    for (;;) {
        if (items.n > 0) {
            if (!expect_op(p, ",")) return NULL;
            is_tuple = true;
        }
        tok *c = cur(p);
        if (c->kind == T_VAR_END || c->kind == T_BLOCK_END || is_op(c, ")") || c->kind == T_EOF ||
            (items.n > 0 && (is_name(c, "in") || is_name(c, "recursive") || is_name(c, "if")) && !with_condexpr))
            break;
        if (items.n > 0 && is_op(c, "=")) break;
        jj_node *e = simplified ? parse_primary(p) : parse_expression(p, with_condexpr);
        if (simplified && e) e = parse_postfix(p, e);
        if (!vec_push(p, &items, e)) return NULL;
        if (!is_op(cur(p), ",")) break;
    }
    if (p->failed) return NULL;
    if (!is_tuple) {
        if (items.n == 0) {
            if (!explicit_parens) {
                char b[64];
                perr(p, cur(p)->line, "expected an expression, got %s", tok_desc(cur(p), b, sizeof b));
                return NULL;
            }
            jj_node *t = node(p, JN_TUPLE, line);
            return t;
        }
        return items.items[0];
    }
    jj_node *t = node(p, JN_TUPLE, line);
    if (t) t->body = vec_done(&items);
    return t;
}

static jj_node *parse_list(parser *p) {
    uint32_t line = cur(p)->line;
    adv(p); /* [ */
    nodevec items = {0};
    while (!is_op(cur(p), "]") && !p->failed) {
        if (items.n > 0 && !expect_op(p, ",")) return NULL;
        if (is_op(cur(p), "]")) break;
        if (!vec_push(p, &items, parse_expression(p, true))) return NULL;
    }
    if (!expect_op(p, "]")) return NULL;
    jj_node *n = node(p, JN_LIST, line);
    if (n) n->body = vec_done(&items);
    return n;
}

static jj_node *parse_dict(parser *p) {
    uint32_t line = cur(p)->line;
    adv(p); /* { */
    nodevec items = {0};
    while (!is_op(cur(p), "}") && !p->failed) {
        if (items.n > 0 && !expect_op(p, ",")) return NULL;
        if (is_op(cur(p), "}")) break;
        if (!vec_push(p, &items, parse_expression(p, true))) return NULL;
        if (!expect_op(p, ":")) return NULL;
        if (!vec_push(p, &items, parse_expression(p, true))) return NULL;
    }
    if (!expect_op(p, "}")) return NULL;
    jj_node *n = node(p, JN_DICT, line);
    if (n) n->body = vec_done(&items);
    return n;
}

static jj_node *parse_primary(parser *p) {
    if (!enter(p)) return NULL;
    tok *t = cur(p);
    jj_node *n = NULL;
    if (t->kind == T_NAME) {
        if (is_name(t, "true") || is_name(t, "True") || is_name(t, "false") || is_name(t, "False")) {
            n = node(p, JN_CONST, t->line);
            if (n) n->value = jj_bool(t->p[0] == 't' || t->p[0] == 'T');
        } else if (is_name(t, "none") || is_name(t, "None")) {
            n = node(p, JN_CONST, t->line);
            if (n) n->value = jj_none();
        } else {
            n = node(p, JN_NAME, t->line);
            if (n) {
                n->name = t->p;
                n->name_len = t->n;
                if (p->cur_macro != NULL && t->n == 6 && memcmp(t->p, "caller", 6) == 0) p->cur_macro->uses_caller = true;
            }
        }
        adv(p);
    } else if (t->kind == T_STRING) {
        /* adjacent literals concatenate */
        size_t total = 0, k = 0;
        while (peek(p, k)->kind == T_STRING) total += peek(p, k++)->n;
        char *buf = palloc(p, total + 1);
        if (buf == NULL) return NULL;
        size_t o = 0;
        uint32_t line = t->line;
        while (cur(p)->kind == T_STRING) {
            memcpy(buf + o, cur(p)->p, cur(p)->n);
            o += cur(p)->n;
            adv(p);
        }
        buf[o] = '\0';
        n = node(p, JN_CONST, line);
        if (n) n->value = jj_str(buf, o);
    } else if (t->kind == T_INT || t->kind == T_FLOAT) {
        n = node(p, JN_CONST, t->line);
        if (n) n->value = t->kind == T_INT ? jj_int(t->i) : jj_float(t->f);
        adv(p);
    } else if (is_op(t, "(")) {
        adv(p);
        n = parse_tuple(p, true, false, true);
        if (!expect_op(p, ")")) n = NULL;
    } else if (is_op(t, "[")) {
        n = parse_list(p);
    } else if (is_op(t, "{")) {
        n = parse_dict(p);
    } else {
        char b[64];
        perr(p, t->line, "unexpected %s", tok_desc(t, b, sizeof b));
    }
    p->depth--;
    return p->failed ? NULL : n;
}

static bool parse_call_args(parser *p, jj_args *args) {
    if (!expect_op(p, "(")) return false;
    nodevec pos = {0}, kw = {0};
    const char **names = NULL;
    size_t names_cap = 0;
    while (!is_op(cur(p), ")") && !p->failed) {
        if (pos.n + kw.n > 0 && !expect_op(p, ",")) return false;
        if (is_op(cur(p), ")")) break;
        if (is_op(cur(p), "*") || is_op(cur(p), "**")) {
            perr(p, cur(p)->line, "*args and **kwargs in calls are not supported");
            return false;
        }
        if (cur(p)->kind == T_NAME && is_op(peek(p, 1), "=")) {
            tok *name = cur(p);
            adv(p);
            adv(p);
            if (kw.n == names_cap) {
                size_t cap = names_cap ? names_cap * 2 : 4;
                const char **m = palloc(p, cap * sizeof *m);
                if (m == NULL) return false;
                if (kw.n) memcpy(m, names, kw.n * sizeof *m);
                names = m;
                names_cap = cap;
            }
            char *nm = palloc(p, name->n + 1);
            if (nm == NULL) return false;
            memcpy(nm, name->p, name->n);
            nm[name->n] = '\0';
            names[kw.n] = nm;
            if (!vec_push(p, &kw, parse_expression(p, true))) return false;
        } else {
            if (kw.n > 0) {
                perr(p, cur(p)->line, "positional argument follows keyword argument");
                return false;
            }
            if (!vec_push(p, &pos, parse_expression(p, true))) return false;
        }
    }
    if (!expect_op(p, ")")) return false;
    args->pos = vec_done(&pos);
    args->kw = vec_done(&kw);
    args->kw_names = names;
    return true;
}

static jj_node *parse_subscript(parser *p, jj_node *obj) {
    tok *t = cur(p);
    if (is_op(t, ".")) {
        adv(p);
        tok *a = cur(p);
        if (a->kind == T_NAME) {
            jj_node *n = node(p, JN_GETATTR, a->line);
            if (n == NULL) return NULL;
            n->a = obj;
            n->name = a->p;
            n->name_len = a->n;
            adv(p);
            return n;
        }
        if (a->kind == T_INT) {
            jj_node *n = node(p, JN_GETITEM, a->line);
            jj_node *k = node(p, JN_CONST, a->line);
            if (n == NULL || k == NULL) return NULL;
            k->value = jj_int(a->i);
            n->a = obj;
            n->b = k;
            adv(p);
            return n;
        }
        perr(p, a->line, "expected name or number after '.'");
        return NULL;
    }
    /* [ ... ] : an index or a slice */
    uint32_t line = t->line;
    adv(p);
    jj_node *parts[3] = {NULL, NULL, NULL};
    int part = 0;
    bool is_slice = false;
    for (;;) {
        if (is_op(cur(p), ":")) {
            is_slice = true;
            if (++part > 2) {
                perr(p, cur(p)->line, "a slice takes at most three parts");
                return NULL;
            }
            adv(p);
            continue;
        }
        if (is_op(cur(p), "]")) break;
        if (parts[part] != NULL) {
            char b[64];
            perr(p, cur(p)->line, "expected ']', got %s", tok_desc(cur(p), b, sizeof b));
            return NULL;
        }
        parts[part] = parse_expression(p, true);
        if (parts[part] == NULL) return NULL;
    }
    if (!expect_op(p, "]")) return NULL;
    if (!is_slice) {
        if (parts[0] == NULL) {
            perr(p, line, "expected an index inside []");
            return NULL;
        }
        jj_node *n = node(p, JN_GETITEM, line);
        if (n == NULL) return NULL;
        n->a = obj;
        n->b = parts[0];
        return n;
    }
    jj_node *n = node(p, JN_SLICE, line);
    if (n == NULL) return NULL;
    n->a = obj;
    n->b = parts[0];
    n->c = parts[1];
    /* the step goes in body */
    if (parts[2] != NULL) {
        nodevec v = {0};
        if (!vec_push(p, &v, parts[2])) return NULL;
        n->body = vec_done(&v);
    }
    return n;
}

static jj_node *parse_postfix(parser *p, jj_node *n) {
    while (n != NULL && !p->failed) {
        tok *t = cur(p);
        if (is_op(t, ".") || is_op(t, "[")) {
            n = parse_subscript(p, n);
        } else if (is_op(t, "(")) {
            jj_node *c = node(p, JN_CALL, t->line);
            if (c == NULL) return NULL;
            c->a = n;
            if (!parse_call_args(p, &c->args)) return NULL;
            n = c;
        } else {
            break;
        }
    }
    return p->failed ? NULL : n;
}

static const char *dup_name(parser *p, tok *t) {
    char *s = palloc(p, t->n + 1);
    if (s == NULL) return NULL;
    memcpy(s, t->p, t->n);
    s[t->n] = '\0';
    return s;
}

/* |name[.name](args) ... and `is` tests */
static jj_node *parse_filter(parser *p, jj_node *n, bool start_inline) {
    while (!p->failed) {
        if (!start_inline) {
            if (!is_op(cur(p), "|")) break;
            adv(p);
        }
        start_inline = false;
        tok *name = cur(p);
        if (name->kind != T_NAME) {
            perr(p, name->line, "expected a filter name after '|'");
            return NULL;
        }
        jj_node *f = node(p, JN_FILTER, name->line);
        if (f == NULL) return NULL;
        f->name = dup_name(p, name);
        f->name_len = name->n;
        f->a = n;
        adv(p);
        if (is_op(cur(p), "(") && !parse_call_args(p, &f->args)) return NULL;
        n = f;
    }
    return p->failed ? NULL : n;
}

static jj_node *parse_test(parser *p, jj_node *n) {
    uint32_t line = cur(p)->line;
    adv(p); /* is */
    bool negated = false;
    if (is_name(cur(p), "not")) {
        negated = true;
        adv(p);
    }
    tok *name = cur(p);
    if (name->kind != T_NAME) {
        /* `is none` arrives as a name; `is true`... too; other tokens are errors */
        perr(p, name->line, "expected a test name after 'is'");
        return NULL;
    }
    jj_node *t = node(p, JN_TEST, line);
    if (t == NULL) return NULL;
    t->name = dup_name(p, name);
    t->name_len = name->n;
    t->a = n;
    t->negated = negated;
    adv(p);
    tok *c = cur(p);
    if (is_op(c, "(")) {
        if (!parse_call_args(p, &t->args)) return NULL;
    } else if ((c->kind == T_NAME || c->kind == T_STRING || c->kind == T_INT || c->kind == T_FLOAT || is_op(c, "[") ||
                is_op(c, "{")) &&
               !is_name(c, "else") && !is_name(c, "or") && !is_name(c, "and")) {
        if (is_name(c, "is")) {
            perr(p, c->line, "You cannot chain multiple tests with is");
            return NULL;
        }
        jj_node *arg = parse_primary(p);
        arg = parse_postfix(p, arg);
        nodevec v = {0};
        if (!vec_push(p, &v, arg)) return NULL;
        t->args.pos = vec_done(&v);
    }
    return t;
}

static jj_node *parse_filter_expr(parser *p, jj_node *n) {
    while (n != NULL && !p->failed) {
        tok *t = cur(p);
        if (is_op(t, "|")) n = parse_filter(p, n, false);
        else if (is_name(t, "is")) n = parse_test(p, n);
        else if (is_op(t, "(")) {
            jj_node *c = node(p, JN_CALL, t->line);
            if (c == NULL) return NULL;
            c->a = n;
            if (!parse_call_args(p, &c->args)) return NULL;
            n = c;
        } else break;
    }
    return p->failed ? NULL : n;
}

static jj_node *parse_unary(parser *p, bool with_filter) {
    if (!enter(p)) return NULL;
    tok *t = cur(p);
    jj_node *n;
    if (is_op(t, "-") || is_op(t, "+")) {
        adv(p);
        n = node(p, JN_UNARY, t->line);
        if (n) {
            n->op = t->op[0] == '-' ? JOP_NEG : JOP_POS;
            n->a = parse_unary(p, false);
            if (n->a == NULL) n = NULL;
        }
    } else {
        n = parse_primary(p);
    }
    n = parse_postfix(p, n);
    if (with_filter) n = parse_filter_expr(p, n);
    p->depth--;
    return p->failed ? NULL : n;
}

static jj_node *binary(parser *p, int op, jj_node *a, jj_node *b, uint32_t line) {
    if (a == NULL || b == NULL) return NULL;
    jj_node *n = node(p, JN_BINARY, line);
    if (n == NULL) return NULL;
    n->op = (uint16_t)op;
    n->a = a;
    n->b = b;
    return n;
}

static jj_node *parse_pow(parser *p) {
    jj_node *n = parse_unary(p, true);
    while (n && is_op(cur(p), "**")) {
        uint32_t line = cur(p)->line;
        adv(p);
        n = binary(p, JOP_POW, n, parse_unary(p, true), line);
    }
    return n;
}

static jj_node *parse_math2(parser *p) {
    jj_node *n = parse_pow(p);
    while (n) {
        tok *t = cur(p);
        int op = is_op(t, "*") ? JOP_MUL : is_op(t, "/") ? JOP_DIV : is_op(t, "//") ? JOP_FLOORDIV : is_op(t, "%") ? JOP_MOD : 0;
        if (!op) break;
        adv(p);
        n = binary(p, op, n, parse_pow(p), t->line);
    }
    return n;
}

static jj_node *parse_concat(parser *p) {
    jj_node *n = parse_math2(p);
    while (n && is_op(cur(p), "~")) {
        uint32_t line = cur(p)->line;
        adv(p);
        n = binary(p, JOP_TILDE, n, parse_math2(p), line);
    }
    return n;
}

static jj_node *parse_math1(parser *p) {
    jj_node *n = parse_concat(p);
    while (n) {
        tok *t = cur(p);
        int op = is_op(t, "+") ? JOP_ADD : is_op(t, "-") ? JOP_SUB : 0;
        if (!op) break;
        adv(p);
        n = binary(p, op, n, parse_concat(p), t->line);
    }
    return n;
}

static jj_node *parse_compare(parser *p) {
    uint32_t line = cur(p)->line;
    jj_node *first = parse_math1(p);
    if (first == NULL) return NULL;
    nodevec ops = {0};
    uint16_t codes[64];
    size_t n_codes = 0;
    for (;;) {
        tok *t = cur(p);
        int op = 0;
        if (is_op(t, "==")) op = JOP_EQ;
        else if (is_op(t, "!=")) op = JOP_NE;
        else if (is_op(t, "<")) op = JOP_LT;
        else if (is_op(t, "<=")) op = JOP_LE;
        else if (is_op(t, ">")) op = JOP_GT;
        else if (is_op(t, ">=")) op = JOP_GE;
        else if (is_name(t, "in")) op = JOP_IN;
        else if (is_name(t, "not") && is_name(peek(p, 1), "in")) {
            op = JOP_NOTIN;
            adv(p);
        }
        if (!op) break;
        adv(p);
        if (n_codes >= 64) {
            perr(p, t->line, "too many chained comparisons");
            return NULL;
        }
        codes[n_codes++] = (uint16_t)op;
        if (!vec_push(p, &ops, parse_math1(p))) return NULL;
    }
    if (n_codes == 0) return first;
    jj_node *n = node(p, JN_COMPARE, line);
    if (n == NULL) return NULL;
    n->a = first;
    n->ops = vec_done(&ops);
    n->opcodes = palloc(p, n_codes * sizeof *n->opcodes);
    if (n->opcodes == NULL) return NULL;
    memcpy(n->opcodes, codes, n_codes * sizeof *codes);
    return n;
}

static jj_node *parse_not(parser *p) {
    if (is_name(cur(p), "not")) {
        uint32_t line = cur(p)->line;
        adv(p);
        if (!enter(p)) return NULL;
        jj_node *n = node(p, JN_NOT, line);
        if (n) n->a = parse_not(p);
        p->depth--;
        return n && n->a ? n : NULL;
    }
    return parse_compare(p);
}

static jj_node *parse_and(parser *p) {
    jj_node *n = parse_not(p);
    while (n && is_name(cur(p), "and")) {
        uint32_t line = cur(p)->line;
        adv(p);
        jj_node *b = parse_not(p);
        jj_node *m = node(p, JN_AND, line);
        if (m == NULL || b == NULL) return NULL;
        m->a = n;
        m->b = b;
        n = m;
    }
    return n;
}

static jj_node *parse_or(parser *p) {
    jj_node *n = parse_and(p);
    while (n && is_name(cur(p), "or")) {
        uint32_t line = cur(p)->line;
        adv(p);
        jj_node *b = parse_and(p);
        jj_node *m = node(p, JN_OR, line);
        if (m == NULL || b == NULL) return NULL;
        m->a = n;
        m->b = b;
        n = m;
    }
    return n;
}

static jj_node *parse_condexpr(parser *p) {
    jj_node *n = parse_or(p);
    while (n && is_name(cur(p), "if")) {
        uint32_t line = cur(p)->line;
        adv(p);
        jj_node *cond = parse_or(p);
        jj_node *m = node(p, JN_COND, line);
        if (m == NULL || cond == NULL) return NULL;
        m->a = cond;
        m->b = n;
        if (is_name(cur(p), "else")) {
            adv(p);
            m->c = parse_condexpr(p);
            if (m->c == NULL) return NULL;
        }
        n = m;
    }
    return n;
}

static jj_node *parse_expression(parser *p, bool with_condexpr) {
    if (!enter(p)) return NULL;
    jj_node *n = with_condexpr ? parse_condexpr(p) : parse_or(p);
    p->depth--;
    return n;
}

/* ---- statements ---- */

static bool parse_body(parser *p, jj_nodes *out, const char *const *ends, size_t n_ends);

static bool expect_block_end(parser *p) { return expect_kind(p, T_BLOCK_END, "end of statement block"); }

/* name, or a, b (names), or ns.attr (with_namespace) */
static jj_node *parse_assign_target(parser *p, bool with_namespace, bool allow_tuple) {
    uint32_t line = cur(p)->line;
    nodevec names = {0};
    for (;;) {
        tok *t = cur(p);
        if (t->kind != T_NAME) {
            char b[64];
            perr(p, t->line, "expected a name to assign to, got %s", tok_desc(t, b, sizeof b));
            return NULL;
        }
        jj_node *n = node(p, JN_NAME, t->line);
        if (n == NULL) return NULL;
        n->name = t->p;
        n->name_len = t->n;
        adv(p);
        if (with_namespace && is_op(cur(p), ".") && peek(p, 1)->kind == T_NAME) {
            adv(p);
            jj_node *a = node(p, JN_GETATTR, cur(p)->line);
            if (a == NULL) return NULL;
            a->a = n;
            a->name = cur(p)->p;
            a->name_len = cur(p)->n;
            adv(p);
            return a;
        }
        if (!vec_push(p, &names, n)) return NULL;
        if (!allow_tuple || !is_op(cur(p), ",")) break;
        adv(p);
    }
    if (names.n == 1) return names.items[0];
    jj_node *t = node(p, JN_TUPLE, line);
    if (t) t->body = vec_done(&names);
    return t;
}

static const char *const END_FOR[] = {"endfor", "else"};
static const char *const END_FOR_ONLY[] = {"endfor"};
static const char *const END_IF[] = {"elif", "else", "endif"};
static const char *const END_IF_ONLY[] = {"endif"};

static jj_node *parse_for(parser *p, uint32_t line) {
    jj_node *n = node(p, JN_FOR, line);
    if (n == NULL) return NULL;
    n->a = parse_assign_target(p, false, true);
    if (n->a == NULL) return NULL;
    if (!is_name(cur(p), "in")) {
        perr(p, cur(p)->line, "expected 'in' in a for loop");
        return NULL;
    }
    adv(p);
    n->b = parse_tuple(p, false, false, false);
    if (n->b == NULL) return NULL;
    if (is_name(cur(p), "if")) {
        adv(p);
        n->c = parse_expression(p, true);
        if (n->c == NULL) return NULL;
    }
    if (is_name(cur(p), "recursive")) {
        perr(p, cur(p)->line, "recursive for loops are not supported");
        return NULL;
    }
    if (!expect_block_end(p)) return NULL;
    if (!parse_body(p, &n->body, END_FOR, 2)) return NULL;
    if (is_name(cur(p), "else")) {
        adv(p);
        if (!expect_block_end(p)) return NULL;
        if (!parse_body(p, &n->else_body, END_FOR_ONLY, 1)) return NULL;
    }
    adv(p); /* endfor */
    return expect_block_end(p) ? n : NULL;
}

static jj_node *parse_if(parser *p, uint32_t line) {
    jj_node *n = node(p, JN_IF, line);
    if (n == NULL) return NULL;
    n->a = parse_tuple(p, false, false, false);
    if (n->a == NULL || !expect_block_end(p)) return NULL;
    if (!parse_body(p, &n->body, END_IF, 3)) return NULL;
    if (is_name(cur(p), "elif")) {
        uint32_t l2 = cur(p)->line;
        adv(p);
        jj_node *e = parse_if(p, l2); /* consumes the endif */
        if (e == NULL) return NULL;
        nodevec v = {0};
        if (!vec_push(p, &v, e)) return NULL;
        n->else_body = vec_done(&v);
        return n;
    }
    if (is_name(cur(p), "else")) {
        adv(p);
        if (!expect_block_end(p)) return NULL;
        if (!parse_body(p, &n->else_body, END_IF_ONLY, 1)) return NULL;
    }
    adv(p); /* endif */
    return expect_block_end(p) ? n : NULL;
}

static bool parse_signature(parser *p, jj_node *n) {
    if (!expect_op(p, "(")) return false;
    const char *names[256];
    jj_node *defs[256];
    size_t k = 0;
    while (!is_op(cur(p), ")") && !p->failed) {
        if (k > 0 && !expect_op(p, ",")) return false;
        if (is_op(cur(p), ")")) break;
        tok *t = cur(p);
        if (t->kind != T_NAME || k >= 256) {
            perr(p, t->line, "expected a parameter name");
            return false;
        }
        names[k] = dup_name(p, t);
        defs[k] = NULL;
        adv(p);
        if (is_op(cur(p), "=")) {
            adv(p);
            defs[k] = parse_expression(p, true);
            if (defs[k] == NULL) return false;
        } else if (k > 0 && defs[k - 1] != NULL) {
            perr(p, t->line, "parameter without a default follows parameter with a default");
            return false;
        }
        k++;
    }
    if (!expect_op(p, ")")) return false;
    n->n_params = k;
    n->params = palloc(p, (k + 1) * sizeof *n->params);
    n->defaults = palloc(p, (k + 1) * sizeof *n->defaults);
    if (n->params == NULL || n->defaults == NULL) return false;
    memcpy(n->params, names, k * sizeof *names);
    memcpy(n->defaults, defs, k * sizeof *defs);
    return true;
}

static jj_node *parse_macro(parser *p, uint32_t line) {
    jj_node *n = node(p, JN_MACRO, line);
    if (n == NULL) return NULL;
    if (cur(p)->kind != T_NAME) {
        perr(p, cur(p)->line, "expected a macro name");
        return NULL;
    }
    n->name = dup_name(p, cur(p));
    n->name_len = cur(p)->n;
    adv(p);
    if (!parse_signature(p, n) || !expect_block_end(p)) return NULL;
    jj_node *outer = p->cur_macro;
    p->cur_macro = n;
    static const char *const ends[] = {"endmacro"};
    bool ok = parse_body(p, &n->body, ends, 1);
    p->cur_macro = outer;
    if (!ok) return NULL;
    adv(p);
    if (cur(p)->kind == T_NAME) adv(p); /* {% endmacro name %} */
    return expect_block_end(p) ? n : NULL;
}

static jj_node *parse_call_block(parser *p, uint32_t line) {
    jj_node *n = node(p, JN_CALL_BLOCK, line);
    if (n == NULL) return NULL;
    if (is_op(cur(p), "(")) {
        if (!parse_signature(p, n)) return NULL;
    }
    n->a = parse_expression(p, true);
    if (n->a == NULL) return NULL;
    if (n->a->kind != JN_CALL) {
        perr(p, line, "expected call");
        return NULL;
    }
    if (!expect_block_end(p)) return NULL;
    jj_node *outer = p->cur_macro;
    p->cur_macro = n;
    static const char *const ends[] = {"endcall"};
    bool ok = parse_body(p, &n->body, ends, 1);
    p->cur_macro = outer;
    if (!ok) return NULL;
    adv(p);
    return expect_block_end(p) ? n : NULL;
}

static jj_node *parse_set(parser *p, uint32_t line) {
    jj_node *target = parse_assign_target(p, true, true);
    if (target == NULL) return NULL;
    if (is_op(cur(p), "=")) {
        adv(p);
        jj_node *n = node(p, JN_SET, line);
        if (n == NULL) return NULL;
        n->a = target;
        n->b = parse_tuple(p, true, false, false);
        if (n->b == NULL) return NULL;
        return expect_block_end(p) ? n : NULL;
    }
    jj_node *n = node(p, JN_SET_BLOCK, line);
    if (n == NULL) return NULL;
    n->a = target;
    if (is_op(cur(p), "|")) {
        /* the filters are applied to a placeholder: b holds the chain with a NULL innermost operand */
        n->b = parse_filter(p, NULL, false);
        if (n->b == NULL) return NULL;
    }
    if (!expect_block_end(p)) return NULL;
    static const char *const ends[] = {"endset"};
    if (!parse_body(p, &n->body, ends, 1)) return NULL;
    adv(p);
    return expect_block_end(p) ? n : NULL;
}

static jj_node *parse_filter_block(parser *p, uint32_t line) {
    jj_node *n = node(p, JN_FILTER_BLOCK, line);
    if (n == NULL) return NULL;
    n->b = parse_filter(p, NULL, true);
    if (n->b == NULL || !expect_block_end(p)) return NULL;
    static const char *const ends[] = {"endfilter"};
    if (!parse_body(p, &n->body, ends, 1)) return NULL;
    adv(p);
    return expect_block_end(p) ? n : NULL;
}

static jj_node *parse_with(parser *p, uint32_t line) {
    jj_node *n = node(p, JN_WITH, line);
    if (n == NULL) return NULL;
    nodevec assigns = {0};
    while (cur(p)->kind != T_BLOCK_END && !p->failed) {
        if (assigns.n > 0 && !expect_op(p, ",")) return NULL;
        jj_node *s = node(p, JN_SET, cur(p)->line);
        if (s == NULL) return NULL;
        s->a = parse_assign_target(p, false, false);
        if (s->a == NULL || !expect_op(p, "=")) return NULL;
        s->b = parse_expression(p, true);
        if (!vec_push(p, &assigns, s->b ? s : NULL)) return NULL;
    }
    n->else_body = vec_done(&assigns);
    if (!expect_block_end(p)) return NULL;
    static const char *const ends[] = {"endwith"};
    if (!parse_body(p, &n->body, ends, 1)) return NULL;
    adv(p);
    return expect_block_end(p) ? n : NULL;
}

static jj_node *parse_statement(parser *p) {
    uint32_t line = cur(p)->line;
    adv(p); /* {% */
    tok *t = cur(p);
    if (t->kind != T_NAME) {
        perr(p, t->line, "tag name expected");
        return NULL;
    }
    if (!enter(p)) return NULL;
    jj_node *n = NULL;
    line = t->line;
    if (is_name(t, "for")) {
        adv(p);
        n = parse_for(p, line);
    } else if (is_name(t, "if")) {
        adv(p);
        n = parse_if(p, line);
    } else if (is_name(t, "set")) {
        adv(p);
        n = parse_set(p, line);
    } else if (is_name(t, "macro")) {
        adv(p);
        n = parse_macro(p, line);
    } else if (is_name(t, "call")) {
        adv(p);
        n = parse_call_block(p, line);
    } else if (is_name(t, "filter")) {
        adv(p);
        n = parse_filter_block(p, line);
    } else if (is_name(t, "with")) {
        adv(p);
        n = parse_with(p, line);
    } else if (is_name(t, "break") || is_name(t, "continue")) {
        bool is_break = is_name(t, "break");
        adv(p);
        n = node(p, is_break ? JN_BREAK : JN_CONTINUE, line);
        if (n && !expect_block_end(p)) n = NULL;
    } else if (is_name(t, "generation")) {
        adv(p);
        n = node(p, JN_GENERATION, line);
        static const char *const ends[] = {"endgeneration"};
        if (n && (!expect_block_end(p) || !parse_body(p, &n->body, ends, 1))) n = NULL;
        if (n) {
            adv(p);
            if (!expect_block_end(p)) n = NULL;
        }
    } else {
        perr(p, t->line, "Encountered unknown tag '%.*s'.", (int)(t->n > 40 ? 40 : t->n), t->p);
    }
    p->depth--;
    return p->failed ? NULL : n;
}

/* Nodes until a block whose name is one of ends (left as the current token, after its {%), or the end. */
static bool parse_body(parser *p, jj_nodes *out, const char *const *ends, size_t n_ends) {
    nodevec v = {0};
    if (!enter(p)) return false;
    for (;;) {
        if (p->failed) return false;
        tok *t = cur(p);
        if (t->kind == T_EOF) {
            if (n_ends > 0) {
                char list[200] = "";
                size_t o = 0;
                for (size_t k = 0; k < n_ends && o < sizeof list; k++) {
                    int w = snprintf(list + o, sizeof list - o, "%s'%s'", k ? " or " : "", ends[k]);
                    if (w < 0) break;
                    o += (size_t)w;
                }
                perr(p, t->line, "Unexpected end of template. Jinja was looking for the following tags: %s.", list);
                return false;
            }
            break;
        }
        if (t->kind == T_TEXT) {
            jj_node *n = node(p, JN_TEXT, t->line);
            if (n == NULL) return false;
            n->value = jj_str(t->p, t->n);
            adv(p);
            if (!vec_push(p, &v, n)) return false;
        } else if (t->kind == T_VAR_BEGIN) {
            adv(p);
            jj_node *n = node(p, JN_OUTPUT, t->line);
            if (n == NULL) return false;
            n->a = parse_tuple(p, true, false, false);
            if (n->a == NULL || !expect_kind(p, T_VAR_END, "end of print statement")) return false;
            if (!vec_push(p, &v, n)) return false;
        } else if (t->kind == T_BLOCK_BEGIN) {
            tok *name = peek(p, 1);
            bool is_end = false;
            for (size_t k = 0; k < n_ends; k++)
                if (is_name(name, ends[k])) is_end = true;
            if (is_end) {
                adv(p);
                break;
            }
            static const char *const stray[] = {"endfor", "endif", "else", "elif", "endmacro", "endset", "endcall",
                                                "endfilter", "endgeneration", "endwith", "endraw"};
            for (size_t k = 0; k < sizeof stray / sizeof stray[0]; k++)
                if (is_name(name, stray[k])) {
                    perr(p, name->line, "Encountered unknown tag '%s'.", stray[k]);
                    return false;
                }
            if (!vec_push(p, &v, parse_statement(p))) return false;
        } else {
            char b[64];
            perr(p, t->line, "unexpected %s", tok_desc(t, b, sizeof b));
            return false;
        }
    }
    p->depth--;
    *out = vec_done(&v);
    return true;
}

jj_node *jj_parse(sy_chat_jinja *t, const char *src, size_t len, char *err, size_t err_size) {
    /* jinja2 reads \r\n and \r as \n and drops one trailing newline (keep_trailing_newline is off) */
    char *norm = jj_arena_alloc(&t->arena, len + 1);
    if (norm == NULL) {
        snprintf(err, err_size, "chat template: out of memory");
        return NULL;
    }
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            norm[o++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n') i++;
        } else {
            norm[o++] = src[i];
        }
    }
    if (o > 0 && norm[o - 1] == '\n') o--;
    norm[o] = '\0';
    parser p = {.t = t, .src = norm, .len = o, .err = err, .err_size = err_size};
    jj_node *root = NULL;
    if (lex(&p)) {
        root = node(&p, JN_TEMPLATE_BODY, 1);
        if (root != NULL && !parse_body(&p, &root->body, NULL, 0)) root = NULL;
    }
    free(p.toks);
    return p.failed ? NULL : root;
}
