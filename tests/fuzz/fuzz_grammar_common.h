/* Shared by the grammar fuzz targets: a 256-byte vocabulary (plus an end and a control token) and a short
 * deterministic generation through masks that checks the engine's promises on the way: the count matches the
 * mask, every allowed token is accepted, a disallowed one is refused, and generation ends only where the grammar
 * is complete. */
#ifndef SY_FUZZ_GRAMMAR_COMMON_H
#define SY_FUZZ_GRAMMAR_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sy_grammar.h"

#define CHECK(cond)                                                                                      \
    do {                                                                                                 \
        if (!(cond)) {                                                                                   \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);                    \
            abort();                                                                                     \
        }                                                                                                \
    } while (0)

#define FZ_TOKENS 258

static int fz_token(void *user, uint32_t id, const uint8_t **bytes, size_t *len, uint32_t *kind) {
    static uint8_t b[256];
    (void)user;
    if (id < 256) {
        b[id] = (uint8_t)id;
        *bytes = &b[id];
        *len = 1;
        *kind = SY_GRAMMAR_TOKEN_NORMAL;
    } else {
        *bytes = (const uint8_t *)(id == 256 ? "</s>" : "<c>");
        *len = id == 256 ? 4 : 3;
        *kind = id == 256 ? SY_GRAMMAR_TOKEN_EOG : SY_GRAMMAR_TOKEN_CONTROL;
    }
    return 0;
}

static sy_grammar_vocab *fz_vocab(void) {
    static sy_grammar_vocab *v;
    if (v == NULL) {
        char err[128];
        v = sy_grammar_vocab_create(FZ_TOKENS, fz_token, NULL, err, sizeof err);
        CHECK(v != NULL);
    }
    return v;
}

/* Up to `steps` tokens; the text generated goes to out (cap bytes), its length returned; *ended set when the
 * end token was taken; the tokens (at most `steps`) into toks. */
static size_t fz_generate(sy_grammar *g, uint64_t seed, int steps, char *out, size_t cap, int *ended,
                          int32_t *toks, size_t *n_toks) {
    char err[256];
    *ended = 0;
    *n_toks = 0;
    sy_grammar_state *st = sy_grammar_state_create(g, fz_vocab(), NULL, err, sizeof err);
    if (st == NULL) return 0; /* e.g. a token reference the vocabulary lacks */
    uint32_t bits[(FZ_TOKENS + 31) / 32];
    size_t n = 0;
    for (int i = 0; i < steps; i++) {
        long count = sy_grammar_state_mask(st, bits);
        if (count < 0) break; /* a limit: reported, state unchanged */
        long seen = 0;
        for (int w = 0; w < (FZ_TOKENS + 31) / 32; w++) seen += __builtin_popcount(bits[w]);
        CHECK(seen == count);
        if (count == 0) {
            CHECK(sy_grammar_state_is_final(st) || !sy_grammar_state_can_end(st));
            break;
        }
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        long k = (long)((seed >> 33) % (uint64_t)count);
        int tok = -1;
        for (int t = 0; t < FZ_TOKENS; t++)
            if ((bits[t / 32] >> (t % 32)) & 1 && k-- == 0) {
                tok = t;
                break;
            }
        /* a token outside the mask is refused */
        for (int t = (int)(seed >> 40) % FZ_TOKENS, j = 0; j < FZ_TOKENS; j++, t = (t + 1) % FZ_TOKENS)
            if (!((bits[t / 32] >> (t % 32)) & 1)) {
                int c = sy_grammar_state_check_token(st, t);
                CHECK(c == 0 || c == SY_GRAMMAR_ELIMIT);
                break;
            }
        int c = sy_grammar_state_check_token(st, tok);
        CHECK(c == 1 || c == SY_GRAMMAR_ELIMIT);
        int rc = sy_grammar_state_accept_token(st, tok);
        CHECK(rc == 0 || rc == SY_GRAMMAR_ELIMIT);
        if (rc != 0) break;
        toks[(*n_toks)++] = tok;
        if (tok == 256 && sy_grammar_state_is_final(st)) { /* an end token (a reference to it goes on) */
            *ended = 1;
            break;
        }
        if (n < cap && tok < 256) out[n++] = (char)tok;
    }
    sy_grammar_state_free(st);
    return n;
}

#endif
