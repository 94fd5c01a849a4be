/* Internals shared by the GBNF compiler and the matching engine. Not part of the public API. */
#ifndef SY_GRAMMAR_INTERNAL_H
#define SY_GRAMMAR_INTERNAL_H

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sy_grammar.h"

/* One compiled element. Rules are runs of elements; alternatives end with GE_ALT, the rule with GE_END (as in
 * llama.cpp's binary form). A character class is one GE_CHAR / GE_CHAR_NOT element followed by GE_CHAR_ALT
 * (another char) and GE_CHAR_RNG (the upper end of a range starting at the element before) elements. */
enum {
    GE_END = 0,
    GE_ALT,
    GE_REF,            /* value: rule id */
    GE_CHAR,           /* value: code point; starts a class */
    GE_CHAR_NOT,       /* value: code point; starts a negated class */
    GE_CHAR_ALT,       /* value: code point; continues a class */
    GE_CHAR_RNG,       /* value: upper end of the range started by the previous char */
    GE_ANY,            /* any code point */
    GE_TOKEN,          /* value: token id */
    GE_TOKEN_NOT,      /* value: token id; any normal token except it */
    GE_TOKEN_TEXT,     /* value: index of a token text, resolved against the vocabulary */
    GE_TOKEN_TEXT_NOT, /* value: as above, negated */
};

typedef struct gelem {
    uint32_t type;
    uint32_t value;
} gelem;

struct gmemo;

struct sy_grammar {
    atomic_uint refs;
    gelem *elems;
    uint32_t n_elems;
    uint32_t n_rules;
    uint32_t root;
    uint32_t *rule_start;  /* n_rules: first element of each rule */
    char **rule_names;     /* n_rules */
    uint32_t *alt_off;     /* n_rules + 1: alternatives of rule r are alts[alt_off[r] .. alt_off[r+1]) */
    uint32_t *alts;        /* start element of each alternative */
    uint32_t *next;        /* per element: the element after this symbol (after the whole class for a class) */
    char **tok_texts;      /* texts of <text> token references */
    size_t *tok_text_lens;
    uint32_t n_tok_texts;
    pthread_mutex_t mu;    /* guards memo */
    struct gmemo *memo;    /* the automaton of the most recently used vocabulary */
};

static inline bool ge_is_end(const gelem *e) { return e->type == GE_END || e->type == GE_ALT; }
static inline bool ge_is_class(uint32_t t) { return t == GE_CHAR || t == GE_CHAR_NOT || t == GE_ANY; }
static inline bool ge_is_token(uint32_t t) { return t >= GE_TOKEN && t <= GE_TOKEN_TEXT_NOT; }

/* Whether code point `cp` matches the class starting at element p. */
bool sy_gclass_match(const gelem *e, uint32_t cp);
/* Whether some code point of [lo, hi] matches the class starting at element p. */
bool sy_gclass_match_range(const gelem *e, uint32_t lo, uint32_t hi);

/* Formats into err (never overflows; NULL / 0 ok). */
void sy_gerr(char *err, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

void sy_gmemo_release(struct gmemo *m);

#endif
