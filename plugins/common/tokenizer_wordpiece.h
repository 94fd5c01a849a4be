/* The WordPiece tokenizer of BERT-family models, read from a Hugging Face tokenizer.json whose model is
 * "WordPiece", with what those files use around it (and nothing else: anything else is refused by name):
 *   - normalizer BertNormalizer: clean_text (drops U+0000, U+FFFD and other/control characters, maps whitespace to
 *     a space), handle_chinese_chars (spaces around CJK ideographs), strip_accents (NFD, then nonspacing marks
 *     dropped; null means "as lowercase"), lowercase; or no normalizer;
 *   - pre_tokenizer BertPreTokenizer: split on whitespace, every punctuation character a word of its own;
 *   - model WordPiece: greedy longest match, continuing pieces with continuing_subword_prefix ("##"), a word
 *     without a match or longer than max_input_chars_per_word characters is unk_token;
 *   - post_processor TemplateProcessing (or BertProcessing): [CLS] A [SEP] and [CLS] A [SEP] B [SEP] with their
 *     token types; added_tokens matched in the raw text (special ones only with SY_TOKENIZE_PARSE_SPECIAL).
 * Truncation and padding in the file are not applied: the caller cuts (the host keeps the final [SEP]).
 *
 * Control and punctuation classes are the oracle's own tables (wordpiece_unicode.h, generated from tokenizers by
 * tools/oracle/wordpiece_tables.py: its Unicode is older than utf8proc's); NFD and lower case come from utf8proc,
 * with Rust's char::to_lowercase matched
 * (U+0130 becomes "i" + U+0307). Immutable once built; every call may run on any thread. */
#ifndef SY_TOKENIZER_WORDPIECE_H
#define SY_TOKENIZER_WORDPIECE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <switchyard/engine.h>

typedef struct sy_wordpiece sy_wordpiece;

/* Whether the tokenizer.json text has a WordPiece model (a cheap look at "model": {"type": ...}). */
bool sy_wordpiece_is_wordpiece_json(const char *json, size_t len);

/* Builds the tokenizer from tokenizer.json bytes (need not be NUL-terminated). NULL with one line in err. */
sy_wordpiece *sy_wordpiece_from_json(const char *json, size_t len, char *err, size_t err_size);
/* From a plain token list (GGUF's tokenizer.ggml.tokens in WordPiece spelling: "##" on continuing pieces), ids
 * 0..n-1, with BertNormalizer's defaults (lower case and accent stripping as `lowercase` says), BertPreTokenizer,
 * and [CLS] A [SEP] ([CLS] A [SEP] B [SEP]) when cls and sep are ids; special[i] marks added special tokens
 * (may be NULL). NULL with one line in err. */
sy_wordpiece *sy_wordpiece_from_list(const char *const *tokens, const size_t *lens, uint32_t n, const uint8_t *special,
                                     int32_t unk, int32_t cls, int32_t sep, int32_t pad, bool lowercase, char *err,
                                     size_t err_size);
void sy_wordpiece_free(sy_wordpiece *wp);

/* Token ids of text (valid UTF-8; invalid bytes are SY_ERR_INVALID_ARGUMENT). flags: SY_TOKENIZE_ADD_SPECIAL puts the
 * single-sequence template around it, SY_TOKENIZE_PARSE_SPECIAL matches special tokens' text. Buffer protocol of
 * the engine ABI (capacity, *n_out, SY_ERR_BUFFER_TOO_SMALL). */
sy_status sy_wordpiece_encode(const sy_wordpiece *wp, const char *text, size_t len, uint32_t flags, int32_t *out,
                              size_t capacity, size_t *n_out, char *err, size_t err_size);
/* The pair template around a and b, with token types into types (may be NULL). Special tokens' text is matched. */
sy_status sy_wordpiece_encode_pair(const sy_wordpiece *wp, const char *a, size_t a_len, const char *b, size_t b_len,
                                   int32_t *out, int32_t *types, size_t capacity, size_t *n_out, char *err,
                                   size_t err_size);

uint32_t sy_wordpiece_vocab_size(const sy_wordpiece *wp); /* one past the highest id */
/* The token's text (NUL-terminated, "##" pieces as stored), or NULL for an id no token has. */
const char *sy_wordpiece_token_text(const sy_wordpiece *wp, int32_t id, size_t *len);
/* Whether the id is a special added token ([CLS], [SEP], [PAD], [UNK], [MASK]). */
bool sy_wordpiece_is_special(const sy_wordpiece *wp, int32_t id);
/* Ids of the template's tokens; -1 where absent. */
int32_t sy_wordpiece_cls(const sy_wordpiece *wp);
int32_t sy_wordpiece_sep(const sy_wordpiece *wp);
int32_t sy_wordpiece_pad(const sy_wordpiece *wp);
int32_t sy_wordpiece_unk(const sy_wordpiece *wp);
uint64_t sy_wordpiece_memory(const sy_wordpiece *wp);

#endif
