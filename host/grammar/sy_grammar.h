/* Constrained decoding: GBNF grammars (llama.cpp's format), token masks over a vocabulary, lazy (triggered)
 * grammars, and JSON Schema to GBNF. Self-contained: libc, pthreads and cJSON.
 *
 * Objects and threads:
 *   sy_grammar        a compiled grammar. Immutable once compiled, shared by any number of states and threads
 *                     (reference counted: sy_grammar_ref / sy_grammar_free). It carries an internal,
 *                     mutex-protected memo (a lazily built byte automaton and cached masks per vocabulary) that
 *                     its states share; nothing about it is visible through the API.
 *   sy_grammar_vocab  the token texts of one model as a byte trie. Immutable, shared across threads.
 *   sy_grammar_state  where one sequence is in the grammar. Belongs to one sequence (one thread at a time);
 *                     sy_grammar_state_clone is cheap (a copy of the live stacks), for speculative drafts and
 *                     n>1 choices. Clones may then be used on different threads.
 *
 * Per decode step:  n = sy_grammar_state_mask(st, bits)   allowed tokens as a bitmask (bit i of word i/32)
 *                   ... sample a token t with bit t set ...
 *                   sy_grammar_state_accept_token(st, t)
 * An end-of-generation token is allowed only where the grammar is complete (sy_grammar_state_can_end).
 * sy_grammar_state_check_token tells whether a token would be accepted without committing it (draft checks).
 *
 * Errors: functions returning int return >= 0 on success and a negative SY_GRAMMAR_E* code on failure, with a
 * message in the caller's buffer (compile, vocab, schema) or in sy_grammar_state_error (states). A state
 * whose step failed for a resource limit (SY_GRAMMAR_ELIMIT) is left unchanged. */
#ifndef SY_GRAMMAR_H
#define SY_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum {
    SY_GRAMMAR_OK = 0,
    SY_GRAMMAR_EREJECT = -1, /* the token or text is not allowed here (state unchanged) */
    SY_GRAMMAR_ELIMIT = -2,  /* a bound was hit: too many live stacks, too deep, automaton too large */
    SY_GRAMMAR_EINVAL = -3,  /* bad argument, bad input text, unknown token id */
    SY_GRAMMAR_ENOMEM = -4,
    SY_GRAMMAR_EDONE = -5,   /* the state already ended (an end-of-generation token was accepted) */
};

/* ---- grammars ------------------------------------------------------------------------------------------- */

typedef struct sy_grammar sy_grammar;

/* Compiles GBNF text (`len` bytes, need not be NUL-terminated). `root_rule` NULL means "root". Returns NULL
 * with one line in err (naming the rule or the position) on a syntax error, an undefined rule, a missing
 * root, left recursion (direct or indirect, including empty loops like ("a"?)*), a repetition count over
 * SY_GRAMMAR_MAX_REPEAT, nesting deeper than SY_GRAMMAR_MAX_NESTING, or a grammar over the size limits. */
sy_grammar *sy_grammar_compile(const char *gbnf, size_t len, const char *root_rule, char *err, size_t err_cap);
sy_grammar *sy_grammar_ref(sy_grammar *g);
void sy_grammar_free(sy_grammar *g); /* drops one reference */

/* Limits (also in docs/grammar.md). */
#define SY_GRAMMAR_MAX_TEXT (4u << 20)        /* bytes of GBNF */
#define SY_GRAMMAR_MAX_REPEAT 10000u          /* m and n of {m,n} */
#define SY_GRAMMAR_MAX_NESTING 256u           /* nested parentheses */
#define SY_GRAMMAR_MAX_ELEMENTS (4u << 20)    /* compiled elements, after repetitions are expanded */
#define SY_GRAMMAR_MAX_RULES (1u << 20)
#define SY_GRAMMAR_MAX_ALTERNATIVES 65536u    /* alternatives of one rule */
#define SY_GRAMMAR_MAX_STACKS 4096u           /* live stacks after one code point */
#define SY_GRAMMAR_MAX_DEPTH 8192u            /* depth of one stack (nesting of the text being matched) */

/* The GBNF the grammar was compiled from, rule by rule as the compiler sees it (for logs and debugging).
 * Returns a malloc'd string. */
char *sy_grammar_dump(const sy_grammar *g);

/* ---- vocabularies -------------------------------------------------------------------------------------- */

enum {
    SY_GRAMMAR_TOKEN_NORMAL = 0,
    SY_GRAMMAR_TOKEN_CONTROL = 1, /* special/control token: never produced by grammar text, only by a token
                                     reference <[id]> / <text> naming it */
    SY_GRAMMAR_TOKEN_EOG = 2,     /* end of generation: allowed only where the grammar is complete */
};

/* Token `id`'s bytes (as the detokenizer emits them, e.g. byte-level BPE already mapped back to bytes) and its
 * SY_GRAMMAR_TOKEN_* kind. Return 0, or nonzero to fail the build. The bytes are copied. */
typedef int (*sy_grammar_token_fn)(void *user, uint32_t id, const uint8_t **bytes, size_t *len, uint32_t *kind);

typedef struct sy_grammar_vocab sy_grammar_vocab;

sy_grammar_vocab *sy_grammar_vocab_create(uint32_t n_tokens, sy_grammar_token_fn fn, void *user, char *err,
                                          size_t err_cap);
void sy_grammar_vocab_free(sy_grammar_vocab *v);
uint32_t sy_grammar_vocab_size(const sy_grammar_vocab *v);
/* Words of a mask: (n_tokens + 31) / 32. */
size_t sy_grammar_vocab_mask_words(const sy_grammar_vocab *v);
/* The token whose bytes are exactly `text`, or -1 (the lowest id when several are). */
int32_t sy_grammar_vocab_find(const sy_grammar_vocab *v, const char *text, size_t len);

/* ---- states ----------------------------------------------------------------------------------------------- */

/* Lazy grammars. NULL (or no words and no tokens) means the grammar constrains from the first token.
 * Otherwise every token is allowed until a trigger appears in the output:
 *   - a trigger word (literal bytes) anywhere in the text so far: the grammar then matches the text from the
 *     start of the (earliest) trigger word, so the trigger is part of the grammar's input, as in llama.cpp
 *     (write the grammar as  root ::= "<tool_call>" ...);
 *   - a trigger token id: the grammar matches from that token (its text, or a <[id]> reference).
 * If the grammar rejects the triggering text, accept_token fails with SY_GRAMMAR_EREJECT. */
typedef struct sy_grammar_triggers {
    const char *const *words;
    const size_t *word_lens; /* NULL: the words are NUL-terminated */
    size_t n_words;
    const int32_t *tokens;
    size_t n_tokens;
} sy_grammar_triggers;

#define SY_GRAMMAR_MAX_TRIGGER_LEN 1024u

typedef struct sy_grammar_state sy_grammar_state;

/* A state at the start of `g` for tokens of `v` (both must outlive it). Token references by text (<think>)
 * are resolved against `v` here: NULL with a message when one names no single token. */
sy_grammar_state *sy_grammar_state_create(sy_grammar *g, const sy_grammar_vocab *v,
                                          const sy_grammar_triggers *triggers, char *err, size_t err_cap);
sy_grammar_state *sy_grammar_state_clone(const sy_grammar_state *st);
void sy_grammar_state_free(sy_grammar_state *st);

/* Writes the allowed tokens into `bits` (sy_grammar_vocab_mask_words words; bit t set = token t allowed).
 * Returns how many tokens are allowed (0 means a dead end: only possible with a vocabulary that cannot spell
 * what the grammar needs), or a negative error. */
long sy_grammar_state_mask(sy_grammar_state *st, uint32_t *bits);
/* Advances by one token. SY_GRAMMAR_EREJECT (state unchanged) when the mask would not have allowed it. */
int sy_grammar_state_accept_token(sy_grammar_state *st, int32_t token);
/* Whether accept_token would succeed, without changing the state: 1 yes, 0 no, negative on error. */
int sy_grammar_state_check_token(sy_grammar_state *st, int32_t token);
/* Advances by raw bytes (a prefix forced into the output, tests). Bytes may end inside a UTF-8 character. */
int sy_grammar_state_accept_bytes(sy_grammar_state *st, const uint8_t *bytes, size_t len);
/* True where the grammar is complete: an end-of-generation token would be allowed (or, while a lazy grammar
 * waits for its trigger, always). */
bool sy_grammar_state_can_end(const sy_grammar_state *st);
/* True once the grammar has nothing more to match: complete, and no further text could be accepted. */
bool sy_grammar_state_is_final(const sy_grammar_state *st);
/* True while a lazy grammar waits for its trigger. */
bool sy_grammar_state_awaiting_trigger(const sy_grammar_state *st);
/* The message of the last failed call on this state ("" if none). */
const char *sy_grammar_state_error(const sy_grammar_state *st);

/* ---- JSON Schema ------------------------------------------------------------------------------------------ */

struct cJSON;

enum {
    SY_SCHEMA_WS_COMPACT = 0,  /* no whitespace between tokens: {"a":1,"b":[2,3]} (as OpenAI emits) */
    SY_SCHEMA_WS_FLEXIBLE = 1, /* llama.cpp's bounded whitespace: after each token "", " ", or a newline
                                  followed by up to 20 spaces or tabs */
};

typedef struct sy_schema_options {
    int whitespace;                      /* SY_SCHEMA_WS_* */
    bool additional_properties_default;  /* what an object without "additionalProperties" allows: true as the
                                            JSON Schema spec says (the default); false as llama.cpp does */
} sy_schema_options;

sy_schema_options sy_schema_defaults(void);

/* GBNF for documents valid against `schema` (root rule "root"). *gbnf is malloc'd. Returns 0, or a negative
 * error with one line naming the keyword and where it is (a JSON pointer) for anything it cannot honour. */
int sy_json_schema_to_gbnf(const struct cJSON *schema, const sy_schema_options *o, char **gbnf, char *err,
                           size_t err_cap);
/* GBNF for any JSON object (response_format json_object, Ollama format:"json"). */
int sy_json_object_gbnf(const sy_schema_options *o, char **gbnf, char *err, size_t err_cap);

/* Compiled grammars by schema text: a small LRU keyed by a 64-bit FNV-1a hash of the text and the options
 * (the text is compared too, so collisions are harmless). Thread-safe. */
typedef struct sy_grammar_cache sy_grammar_cache;
sy_grammar_cache *sy_grammar_cache_create(size_t capacity);
void sy_grammar_cache_free(sy_grammar_cache *c);
/* The grammar for schema JSON text (`len` bytes; NULL schema = any JSON object), compiled on a miss. The
 * caller owns one reference (sy_grammar_free). NULL with a message on error (not cached). */
sy_grammar *sy_grammar_cache_schema(sy_grammar_cache *c, const char *schema, size_t len,
                                    const sy_schema_options *o, char *err, size_t err_cap);
/* The same for GBNF text. */
sy_grammar *sy_grammar_cache_gbnf(sy_grammar_cache *c, const char *gbnf, size_t len, char *err, size_t err_cap);
/* Hits and misses so far (for metrics). */
void sy_grammar_cache_stats(sy_grammar_cache *c, uint64_t *hits, uint64_t *misses);

#ifdef __cplusplus
}
#endif

#endif
