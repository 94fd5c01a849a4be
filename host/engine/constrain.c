/* See constrain.h. */
#include "engine/constrain.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/util.h"

typedef struct vocab_reader {
    const sy_loaded_model *lm;
    char *buf;
    size_t cap;
    int32_t *eog;
    uint32_t n_eog, cap_eog;
} vocab_reader;

static int vocab_token(void *user, uint32_t id, const uint8_t **bytes, size_t *len, uint32_t *kind) {
    vocab_reader *r = user;
    uint32_t flags = r->lm->engine->token_flags(r->lm->model, (int32_t)id);
    long n = sy_loaded_model_token_bytes(r->lm, (int32_t)id, &r->buf, &r->cap);
    *bytes = (const uint8_t *)r->buf;
    *len = n > 0 ? (size_t)n : 0; /* a token without text can only be reached through a token reference */
    if (flags & SY_TOKEN_END_OF_GENERATION) {
        *kind = SY_GRAMMAR_TOKEN_EOG;
        if (r->n_eog == r->cap_eog) {
            r->cap_eog = r->cap_eog ? r->cap_eog * 2 : 8;
            r->eog = sy_xrealloc(r->eog, r->cap_eog * sizeof *r->eog);
        }
        r->eog[r->n_eog++] = (int32_t)id;
    } else if (flags & (SY_TOKEN_CONTROL | SY_TOKEN_UNUSED | SY_TOKEN_INVALID)) {
        /* A control token's text ("<|im_start|>") is not output text: grammar text never produces it. */
        *kind = SY_GRAMMAR_TOKEN_CONTROL;
    } else {
        *kind = SY_GRAMMAR_TOKEN_NORMAL;
    }
    return 0;
}

sy_grammar_vocab *sy_constrain_vocab_create(const sy_loaded_model *lm, int32_t **eog, uint32_t *n_eog, char *err,
                                            size_t err_size) {
    vocab_reader r = {lm, NULL, 0, NULL, 0, 0};
    sy_grammar_vocab *v = sy_grammar_vocab_create(lm->info.n_vocab, vocab_token, &r, err, err_size);
    free(r.buf);
    if (v == NULL) {
        free(r.eog);
        return NULL;
    }
    *eog = r.eog;
    *n_eog = r.n_eog;
    return v;
}

int sy_constrain_row(sy_grammar_state *st, uint32_t *mask, float *row, uint32_t n_vocab, const int32_t *eog,
                     uint32_t n_eog, bool no_eog, char *msg, size_t msg_size) {
    long allowed = sy_grammar_state_mask(st, mask);
    if (allowed < 0) {
        snprintf(msg, msg_size, "grammar: %s", sy_grammar_state_error(st));
        return -1;
    }
    if (no_eog)
        for (uint32_t i = 0; i < n_eog; i++) {
            uint32_t t = (uint32_t)eog[i];
            if (t >= n_vocab) continue;
            if (mask[t / 32] & (1u << (t % 32))) allowed--;
            mask[t / 32] &= ~(1u << (t % 32));
        }
    if (allowed <= 0) {
        snprintf(msg, msg_size, "grammar: no token of this model's vocabulary can continue the output here");
        return -1;
    }
    for (uint32_t w = 0, v = 0; v < n_vocab; w++, v += 32) {
        uint32_t word = mask[w];
        if (word == UINT32_MAX) continue; /* all allowed: every word before a lazy grammar's trigger */
        uint32_t end = n_vocab - v < 32 ? n_vocab - v : 32;
        if (word == 0) { /* none allowed: most words where only a few tokens fit (outside JSON strings) */
            for (uint32_t b = 0; b < end; b++) row[v + b] = -INFINITY;
            continue;
        }
        for (uint32_t b = 0; b < end; b++)
            if (!(word & (1u << b))) row[v + b] = -INFINITY;
    }
    return 0;
}
