/* DRY's sequence breakers, strings in a request, turned into token sequences over a model's vocabulary the way
 * llama.cpp does it (llama_sampler_init_dry): a token whose text holds a whole breaker is a sequence of its own;
 * a token whose text ends with the beginning of a breaker heads a sequence whose tail is the tokenization of the
 * breaker's rest (cut at SY_DRY_MAX_TAIL tokens). */
#ifndef SY_HOST_DRY_BREAKERS_H
#define SY_HOST_DRY_BREAKERS_H

#include <stddef.h>
#include <stdint.h>

#include "engine/sampler.h"

#define SY_DRY_MAX_BREAKERS 64      /* strings per request */
#define SY_DRY_MAX_BREAKER_BYTES 40 /* llama.cpp's MAX_CHAR_LEN (it cuts longer ones; requests are refused) */

/* The vocabulary as the builder reads it: a token's text (llama.cpp's detokenize of the token alone, control
 * tokens spelled out) into *buf (grown as needed; the length, or -1), and a text tokenized without BOS or
 * control-token parsing (a malloc'd array and its count, or NULL). */
typedef struct sy_dry_vocab {
    uint32_t n_vocab;
    long (*token_text)(void *user, int32_t token, char **buf, size_t *cap);
    int32_t *(*tokenize)(void *user, const char *text, size_t len, size_t *n);
    void *user;
} sy_dry_vocab;

/* The breakers' sequences into out (free with sy_dry_breakers_free). Every string must be 1 to
 * SY_DRY_MAX_BREAKER_BYTES bytes and there at most SY_DRY_MAX_BREAKERS of them: -1 with err otherwise, or when a
 * tokenization fails. One pass over the vocabulary per breaker. */
int sy_dry_breakers_build(const sy_dry_vocab *v, const char *const *breakers, size_t n_breakers, sy_dry_breakers *out,
                          char *err, size_t err_size);

/* llama.cpp's default breakers: "\n", ":", "\"", "*". */
extern const char *const sy_dry_default_breakers[4];

#endif
