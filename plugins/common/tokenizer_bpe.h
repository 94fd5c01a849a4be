/* Byte-level BPE tokenizer (GPT-2, Llama 3, Qwen2/2.5/3), token-exact with Hugging Face `tokenizers`.
 *
 * Encoding a text runs the same stages, in the same order, as `tokenizers` does:
 *
 *   1. added tokens whose `normalized` flag is false are cut out of the raw text (leftmost match, longest at
 *      that position; special ones only when SY_TOKENIZE_PARSE_SPECIAL is given; lstrip / rstrip / single_word
 *      honoured);
 *   2. every remaining piece is normalized (NFC, NFD, NFKC, NFKD or nothing), then added tokens whose
 *      `normalized` flag is true are cut out of the normalized piece;
 *   3. the pre-tokenizer splits each piece with its regexes (PCRE2, Unicode mode, with the split behaviours of
 *      `tokenizers`), then the ByteLevel step optionally prefixes a space and splits with the GPT-2 regex;
 *   4. each resulting word is mapped to bytes and merged pairwise, lowest merge rank first (leftmost on ties),
 *      until no adjacent pair has a merge; repeated words come from a cache.
 *
 * Two ways to build one:
 *   - sy_bpe_load_json(): a Hugging Face tokenizer.json (model.type "BPE" with a ByteLevel pre-tokenizer);
 *   - sy_bpe_builder_*(): from in-memory lists, as a GGUF file stores them (tokenizer.ggml.tokens, .merges,
 *     token types, and a pre-tokenizer named by tokenizer.ggml.pre: see sy_bpe_builder_use_preset()).
 *     The tokenizer.json loader is a thin layer over the builder.
 *
 * Where it can differ from tokenizers (the oracle fixture leaves out the one random string of its corpus that
 * hits the first point, and compares decoded text after U+FFFD replacement for the last):
 *   - normalization uses utf8proc's Unicode tables; tokenizers' are older, so a combining mark newer than its
 *     tables, placed out of canonical order, is reordered here and not there;
 *   - regexes run on PCRE2: \s, \p{L} and \p{N} are rewritten to the Oniguruma/Unicode 16 sets tokenizers uses,
 *     other Unicode properties follow PCRE2's tables;
 *   - text must be valid UTF-8 (tokenizers only takes Rust strings); invalid input is refused, not replaced;
 *   - token bytes follow tokenizers' ByteLevel decoder, which also maps an added token whose characters all lie
 *     in the byte-level alphabet: "café" as an added token gives "caf\xE9" (tokenizers then shows U+FFFD).
 *
 * Errors: every fallible call takes `char *err, size_t err_size` and on failure writes one line naming what is
 * wrong (err may be NULL or err_size 0 when the caller does not want it).
 *
 * Threading: a built sy_bpe is immutable from the caller's point of view; every const function below may run
 * concurrently on any thread (the word cache inside is locked). sy_bpe_set_token_flags() is the exception: call
 * it before sharing the tokenizer.
 */
#ifndef SY_TOKENIZER_BPE_H
#define SY_TOKENIZER_BPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Ids are below this bound (4,194,304): it caps what a hostile file can make the tokenizer allocate. */
#define SY_BPE_MAX_TOKENS (1u << 22)
/* Longest token text (vocabulary entry or added token) accepted, in bytes. */
#define SY_BPE_MAX_TOKEN_BYTES 65536u
/* Most pre-tokenizer split steps. */
#define SY_BPE_MAX_SPLITS 32u

typedef struct sy_bpe sy_bpe;
typedef struct sy_bpe_builder sy_bpe_builder;

/* How a split step treats the regex matches (tokenizers' SplitDelimiterBehavior). */
typedef enum sy_bpe_split_behavior {
    SY_BPE_SPLIT_REMOVED = 0,          /* matches are dropped */
    SY_BPE_SPLIT_ISOLATED,             /* each match is a piece of its own */
    SY_BPE_SPLIT_MERGED_WITH_PREVIOUS, /* a match joins the piece before it */
    SY_BPE_SPLIT_MERGED_WITH_NEXT,     /* a match joins the piece after it */
    SY_BPE_SPLIT_CONTIGUOUS            /* consecutive matches form one piece */
} sy_bpe_split_behavior;

typedef enum sy_bpe_normalization {
    SY_BPE_NORM_NONE = 0,
    SY_BPE_NORM_NFC,
    SY_BPE_NORM_NFD,
    SY_BPE_NORM_NFKC,
    SY_BPE_NORM_NFKD
} sy_bpe_normalization;

/* A token matched in the text before BPE (tokenizers' AddedToken). */
typedef struct sy_bpe_added_token {
    const char *content;
    size_t content_len;
    int32_t id;
    bool special;     /* a control token: matched only with SY_TOKENIZE_PARSE_SPECIAL, SY_TOKEN_CONTROL flag */
    bool lstrip;      /* the match swallows the whitespace before it */
    bool rstrip;      /* the match swallows the whitespace after it */
    bool normalized;  /* matched in the normalized text rather than the raw text */
    bool single_word; /* matched only when no word character touches it on either side */
} sy_bpe_added_token;

/* ---- Building from lists (the GGUF path) ------------------------------------------------------------------
 * Order: tokens first (any order of ids), then merges (their rank is the order they are added in), then added
 * tokens, pre-tokenizer and options in any order, then finish. Each add_* copies what it is given.
 *
 * From GGUF metadata: tokenizer.ggml.tokens[i] with token_type NORMAL (1), BYTE (6) or UNUSED (5) go to
 * add_token(text, i); CONTROL (3) and USER_DEFINED (4) ones to add_added_token(text, i, special = CONTROL),
 * as tokenizer.json keeps them out of the model vocabulary too; tokenizer.ggml.merges to add_merge_line; the
 * pre-tokenizer from tokenizer.ggml.pre with use_preset. */

sy_bpe_builder *sy_bpe_builder_new(char *err, size_t err_size);
void sy_bpe_builder_free(sy_bpe_builder *b); /* only for a builder that is not passed to finish */
/* Optional: room for this many tokens and merges, so that loading a large vocabulary never rehashes. */
bool sy_bpe_builder_reserve(sy_bpe_builder *b, size_t n_tokens, size_t n_merges, char *err, size_t err_size);

/* A vocabulary entry in the byte-level alphabet ("Ġthe"). Ids and texts must each be unique. */
bool sy_bpe_builder_add_token(sy_bpe_builder *b, const char *text, size_t len, int32_t id, char *err,
                              size_t err_size);
/* A merge of two vocabulary entries whose concatenation is also one. A pair merged twice keeps the later rank,
 * as tokenizers does. */
bool sy_bpe_builder_add_merge(sy_bpe_builder *b, const char *left, size_t left_len, const char *right,
                              size_t right_len, char *err, size_t err_size);
/* A merge written as "left right" (exactly one space), as GGUF and older tokenizer.json files store them. */
bool sy_bpe_builder_add_merge_line(sy_bpe_builder *b, const char *line, size_t len, char *err, size_t err_size);
/* Bulk forms of the two above for large vocabularies (about twice as fast: the hash-table lookups of a batch
 * overlap). add_tokens gives texts[i] the id first_id + i. add_merge_lines adds lines in order; on failure
 * *failed (when not NULL) is the index of the line that failed. Entries before a failing one stay added. */
bool sy_bpe_builder_add_tokens(sy_bpe_builder *b, const char *const *texts, const size_t *lens, int32_t first_id,
                               size_t n, char *err, size_t err_size);
bool sy_bpe_builder_add_merge_lines(sy_bpe_builder *b, const char *const *lines, const size_t *lens, size_t n,
                                    size_t *failed, char *err, size_t err_size);
/* An added token. Its id may be a vocabulary id only when the vocabulary entry has the same text. */
bool sy_bpe_builder_add_added_token(sy_bpe_builder *b, const sy_bpe_added_token *token, char *err,
                                    size_t err_size);
/* A pre-tokenizer split step, applied in the order added. `pattern` is a regex (Oniguruma syntax as in
 * tokenizer.json; compiled with PCRE2_UTF | PCRE2_UCP) or, when is_regex is false, a literal string. */
bool sy_bpe_builder_add_split(sy_bpe_builder *b, const char *pattern, size_t len, bool is_regex,
                              sy_bpe_split_behavior behavior, bool invert, char *err, size_t err_size);
/* The final ByteLevel step (default: add_prefix_space false, use_regex false). */
void sy_bpe_builder_set_byte_level(sy_bpe_builder *b, bool add_prefix_space, bool use_regex);
void sy_bpe_builder_set_normalization(sy_bpe_builder *b, sy_bpe_normalization n);
/* Whole words found in the vocabulary skip merging (Llama 3's tokenizer.json sets this). */
void sy_bpe_builder_set_ignore_merges(sy_bpe_builder *b, bool ignore_merges);
/* What a byte without a vocabulary entry becomes: the unknown token (optionally fusing runs of them) and/or,
 * first, "<0xXX>" byte tokens. Without either it is dropped, as tokenizers does. */
bool sy_bpe_builder_set_unknown(sy_bpe_builder *b, const char *unk_text, size_t len, bool fuse_unk, char *err,
                                size_t err_size);
void sy_bpe_builder_set_byte_fallback(sy_bpe_builder *b, bool byte_fallback);
/* Ids the post-processor puts around an encoding when SY_TOKENIZE_ADD_SPECIAL is given (Llama 3's BOS). */
bool sy_bpe_builder_set_template(sy_bpe_builder *b, const int32_t *prefix, size_t n_prefix, const int32_t *suffix,
                                 size_t n_suffix, char *err, size_t err_size);
/* Sets the split steps and ByteLevel options of a known pre-tokenizer, by its GGUF tokenizer.ggml.pre name:
 * "qwen2", "llama-bpe" (Llama 3), "gpt-2", "smollm" (SmolLM / SmolLM2: each digit alone, then GPT-2's split).
 * Returns false, naming the known ones, for any other name. */
bool sy_bpe_builder_use_preset(sy_bpe_builder *b, const char *name, char *err, size_t err_size);

/* Checks and freezes the tokenizer. Always consumes the builder; NULL + err on failure. */
sy_bpe *sy_bpe_builder_finish(sy_bpe_builder *b, char *err, size_t err_size);

/* ---- Loading a tokenizer.json ------------------------------------------------------------------------------ */

sy_bpe *sy_bpe_load_json(const char *path, char *err, size_t err_size);
/* Same from a buffer (need not be NUL-terminated; not kept). */
sy_bpe *sy_bpe_load_json_buffer(const char *json, size_t len, char *err, size_t err_size);

void sy_bpe_free(sy_bpe *t);

/* ---- Using it ---------------------------------------------------------------------------------------------- */

/* A growable id list owned by the caller; start it zeroed, free it with sy_bpe_ids_free. */
typedef struct sy_bpe_ids {
    int32_t *ids;
    size_t n;
    size_t cap;
} sy_bpe_ids;
void sy_bpe_ids_free(sy_bpe_ids *ids);

/* Text (UTF-8; invalid UTF-8 is refused with its byte offset) -> ids appended to out. Flags are the ABI's
 * SY_TOKENIZE_PARSE_SPECIAL (match special-token text in the input) and SY_TOKENIZE_ADD_SPECIAL (put the
 * post-processor's template ids around the result). On failure out keeps what it held before. */
bool sy_bpe_tokenize(const sy_bpe *t, const char *text, size_t len, uint32_t flags, sy_bpe_ids *out, char *err,
                     size_t err_size);

/* Rows of the embedding: one more than the largest id. Ids in between that name no token are unused. */
uint32_t sy_bpe_n_vocab(const sy_bpe *t);
/* Bytes the tokenizer holds (its tables and text; the word cache, which fills as it is used, left out), and the
 * same predicted before building one of n_vocab tokens, n_merges merges and text_bytes of token text. */
uint64_t sy_bpe_memory(const sy_bpe *t);
uint64_t sy_bpe_memory_estimate(uint64_t n_vocab, uint64_t n_merges, uint64_t text_bytes);
/* The bytes a token stands for (a part of a UTF-8 sequence for byte-level tokens; an added token's text). NULL
 * with *len 0 for an id out of range or unused. Valid until sy_bpe_free. */
const char *sy_bpe_token_bytes(const sy_bpe *t, int32_t id, size_t *len);
/* The token's text as stored: the byte-level form for vocabulary entries ("Ġthe"), the content for added
 * tokens. NULL for an id out of range or unused. */
const char *sy_bpe_token_text(const sy_bpe *t, int32_t id, size_t *len);
/* SY_TOKEN_* bits (abi/switchyard/engine.h): CONTROL for special added tokens, UNUSED for ids without a token,
 * plus whatever sy_bpe_set_token_flags added. 0 for an id out of range. */
uint32_t sy_bpe_token_flags(const sy_bpe *t, int32_t id);
/* ORs SY_TOKEN_* bits into a token's flags (e.g. END_OF_GENERATION for EOS). Not thread-safe: before sharing. */
bool sy_bpe_set_token_flags(sy_bpe *t, int32_t id, uint32_t flags);
/* Id of a token by its text: an added token's content first, then a vocabulary entry's byte-level text.
 * -1 when there is none. */
int32_t sy_bpe_find_token(const sy_bpe *t, const char *text, size_t len);
/* Ids -> bytes appended to *out (grown with realloc; *out may start NULL with *len and *cap 0). Special tokens
 * are left out when skip_special is set. Invalid ids are refused. */
bool sy_bpe_decode(const sy_bpe *t, const int32_t *ids, size_t n, bool skip_special, char **out, size_t *len,
                   size_t *cap, char *err, size_t err_size);

/* Merges in rank order, as loaded (for writing them out again, e.g. into a GGUF). */
size_t sy_bpe_n_merges(const sy_bpe *t);
bool sy_bpe_merge_at(const sy_bpe *t, size_t rank, int32_t *left, int32_t *right);
/* Template ids of the post-processor (may be empty). */
void sy_bpe_template(const sy_bpe *t, const int32_t **prefix, size_t *n_prefix, const int32_t **suffix,
                     size_t *n_suffix);

/* ---- tokenizer_config.json --------------------------------------------------------------------------------- */

/* What the engines need from a Hugging Face tokenizer_config.json. Strings are owned (free with
 * sy_tokenizer_config_free) and NULL when absent; the add_* flags are -1 when absent. */
typedef struct sy_tokenizer_config {
    char *bos_token;
    char *eos_token;
    char *pad_token;
    char *unk_token;
    int add_bos_token;
    int add_eos_token;
    /* The chat template text: the string, or from a list of {name, template} the one named "default" (else the
     * first). */
    char *chat_template;
    /* Every entry of such a list, by name (n_templates pairs, malloc'd); 0 for a plain string. */
    char **template_names, **template_texts;
    size_t n_templates;
} sy_tokenizer_config;

bool sy_tokenizer_config_load(const char *path, sy_tokenizer_config *out, char *err, size_t err_size);
bool sy_tokenizer_config_parse(const char *json, size_t len, sy_tokenizer_config *out, char *err, size_t err_size);
void sy_tokenizer_config_free(sy_tokenizer_config *c);

#endif
