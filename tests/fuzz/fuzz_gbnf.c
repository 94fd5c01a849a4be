/*
 * Fuzz target: the GBNF compiler (host/grammar) on arbitrary text, then the engine on what compiled.
 *
 * Beyond "no crash, no leak, no hang, no undefined behaviour": a failed compile says why; a compiled grammar
 * dumps; a short generation through masks keeps the engine's promises (fuzz_grammar_common.h), and the tokens
 * it generated are accepted again by a fresh state, complete where generation ended.
 */
#include "fuzz_grammar_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[256] = "";
    sy_grammar *g = sy_grammar_compile((const char *)data, size, NULL, err, sizeof err);
    if (g == NULL) {
        CHECK(err[0] != '\0');
        return 0;
    }
    char *dump = sy_grammar_dump(g);
    CHECK(dump != NULL);
    free(dump);
    char text[512];
    int ended;
    uint64_t seed = size;
    for (size_t i = 0; i < size && i < 64; i++) seed = seed * 31 + data[i];
    int32_t toks[96];
    size_t n_toks;
    fz_generate(g, seed, 96, text, sizeof text, &ended, toks, &n_toks);
    sy_grammar_state *st = sy_grammar_state_create(g, fz_vocab(), NULL, err, sizeof err);
    if (st != NULL) {
        int rc = 0;
        for (size_t i = 0; i < n_toks && rc == 0; i++) {
            rc = sy_grammar_state_accept_token(st, toks[i]);
            CHECK(rc == 0 || rc == SY_GRAMMAR_ELIMIT);
        }
        if (rc == 0 && ended) CHECK(sy_grammar_state_is_final(st));
        /* the input itself as text to match: any outcome, no crash */
        sy_grammar_state_accept_bytes(st, data, size < 256 ? size : 256);
        sy_grammar_state_free(st);
    }
    sy_grammar_free(g);
    return 0;
}
