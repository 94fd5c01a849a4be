/* Constrained decoding on the host side of a model (host/grammar does the grammar): the model's vocabulary as
 * the grammar sees it, and a logits row masked with a grammar state. Shared by the scheduler and `generate`. */
#ifndef SY_HOST_CONSTRAIN_H
#define SY_HOST_CONSTRAIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "grammar/sy_grammar.h"
#include "plugins/loaded_model.h"

/* Every token's bytes (sy_loaded_model_token_bytes) and kind: end-of-generation tokens (token_flags) may end a
 * complete grammar, control tokens are never spelled by grammar text (only by a token reference). *eog gets the
 * end-of-generation ids (malloc'd). NULL with err on failure. A pass over the vocabulary: build it once. */
sy_grammar_vocab *sy_constrain_vocab_create(const sy_loaded_model *lm, int32_t **eog, uint32_t *n_eog, char *err,
                                            size_t err_size);

/* Masks row (n_vocab logits): the tokens st disallows get -INFINITY; with no_eog the end-of-generation tokens
 * eog[0..n_eog) too. mask: sy_grammar_vocab_mask_words words of scratch, left holding the allowed set. Returns
 * 0, or -1 with msg (a grammar step failed, or nothing is allowed). */
int sy_constrain_row(sy_grammar_state *st, uint32_t *mask, float *row, uint32_t n_vocab, const int32_t *eog,
                     uint32_t n_eog, bool no_eog, char *msg, size_t msg_size);

static inline bool sy_constrain_allows(const uint32_t *mask, int32_t token) {
    return token >= 0 && ((mask[(uint32_t)token / 32] >> ((uint32_t)token % 32)) & 1u);
}

#endif
