/* SentencePiece-style tokenizer of GGUF `tokenizer.ggml.model = "llama"` vocabularies, token-exact with
 * llama.cpp's SPM tokenizer:
 *
 *   - special-token text (control and unknown tokens when asked to parse specials, user-defined tokens always)
 *     is cut out of the input first, longest token text first;
 *   - each remaining text fragment gets a leading space when it starts the input or follows a special token
 *     (tokenizer.ggml.add_space_prefix, default on), spaces become U+2581 "▁";
 *   - the fragment is split into UTF-8 characters which are merged pairwise, always the adjacent pair whose
 *     merged text is a token with the highest score (ties: leftmost first), until no pair is a token;
 *   - pieces that are not tokens fall back to byte tokens "<0xXX>" (or the unknown token).
 *
 * Decoding maps "▁" back to a space and byte tokens to their raw byte; control tokens give their text.
 * A built tokenizer is immutable: every function below may run concurrently. */
#ifndef SY_TOKENIZER_SPM_H
#define SY_TOKENIZER_SPM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf.h"

/* GGUF tokenizer.ggml.token_type values. */
typedef enum sy_spm_token_type {
    SY_SPM_TOKEN_NORMAL = 1,
    SY_SPM_TOKEN_UNKNOWN = 2,
    SY_SPM_TOKEN_CONTROL = 3,
    SY_SPM_TOKEN_USER_DEFINED = 4,
    SY_SPM_TOKEN_UNUSED = 5,
    SY_SPM_TOKEN_BYTE = 6
} sy_spm_token_kind;

typedef struct sy_spm sy_spm;

/* Builds the tokenizer from tokenizer.ggml.{tokens,scores,token_type,bos_token_id,eos_token_id,
 * unknown_token_id,padding_token_id,eot_token_id,add_bos_token,add_eos_token,add_space_prefix}. The caller
 * checks tokenizer.ggml.model. Copies what it needs: the GGUF may be closed afterwards. NULL + one line in err
 * on failure. */
sy_spm *sy_spm_from_gguf(const sy_gguf *g, char *err, size_t err_size);
void sy_spm_free(sy_spm *t);

uint32_t sy_spm_vocab_size(const sy_spm *t);
int32_t sy_spm_bos(const sy_spm *t); /* -1 when absent */
int32_t sy_spm_eos(const sy_spm *t);
int32_t sy_spm_unk(const sy_spm *t);
int32_t sy_spm_pad(const sy_spm *t);
int32_t sy_spm_eot(const sy_spm *t);
bool sy_spm_add_bos(const sy_spm *t);
bool sy_spm_add_eos(const sy_spm *t);

/* The token's type (SY_SPM_TOKEN_*), 0 for an id out of range. */
uint32_t sy_spm_token_type(const sy_spm *t, int32_t id);
/* The token's text as stored in the vocabulary ("▁the", "<0x0A>", "<s>"); NULL for an id out of range. */
const char *sy_spm_token_text(const sy_spm *t, int32_t id, size_t *len);
float sy_spm_token_score(const sy_spm *t, int32_t id);
/* Id of an exact token text, or -1. */
int32_t sy_spm_find(const sy_spm *t, const char *text, size_t len);

/* Text -> ids. add_special prepends BOS (and appends EOS) where the vocabulary asks for it; parse_special
 * matches control-token text inside the input. Writes at most `capacity` ids to out and sets *n_out to the full
 * count; returns 0, or 1 when capacity was too small, or -1 when out of memory. */
int sy_spm_encode(const sy_spm *t, const char *text, size_t len, bool add_special, bool parse_special,
                  int32_t *out, size_t capacity, size_t *n_out);

/* The bytes a token stands for: "▁" -> " ", "<0x0A>" -> "\n", others their text. Same buffer protocol as
 * encode (0 ok, 1 too small with *n_out the needed size, -1 id out of range). */
int sy_spm_decode_token(const sy_spm *t, int32_t id, char *out, size_t capacity, size_t *n_out);

#endif
