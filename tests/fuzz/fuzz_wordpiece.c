/*
 * Fuzz target: the WordPiece tokenizer.json reader and encoder, and the BERT config.json reader
 * (plugins/common/tokenizer_wordpiece.c, bert_config.c) on arbitrary bytes.
 *
 * The input is split at its first NUL: before it a tokenizer.json (or a config.json, when it starts with '{' and
 * holds "model_type"), after it text to encode. Beyond "no crash, no leak, no undefined behaviour, no hang": a
 * refusal is one non-empty line; an accepted tokenizer gives ids that all name tokens, for single texts and pairs,
 * with as many token types as ids, and answers a too-small buffer with the full count.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bert_config.h"
#include "switchyard/engine.h"
#include "tokenizer_wordpiece.h"

#define CHECK(cond)                                                                                      \
    do {                                                                                                 \
        if (!(cond)) {                                                                                   \
            fprintf(stderr, "fuzz_wordpiece: %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);     \
            abort();                                                                                     \
        }                                                                                                \
    } while (0)

static void check_message(const char *err) {
    CHECK(err[0] != '\0');
    CHECK(strchr(err, '\n') == NULL);
}

static void encode(const sy_wordpiece *wp, const char *text, size_t len) {
    int32_t ids[512], types[512];
    size_t n = 0;
    char err[300] = "";
    for (uint32_t flags = 0; flags < 4; flags++) {
        sy_status st = sy_wordpiece_encode(wp, text, len, flags, ids, 512, &n, err, sizeof err);
        if (st == SY_ERR_BUFFER_TOO_SMALL) {
            CHECK(n > 512);
            continue;
        }
        if (st != SY_OK) {
            check_message(err);
            continue;
        }
        for (size_t i = 0; i < n; i++) CHECK(sy_wordpiece_token_text(wp, ids[i], NULL) != NULL);
        if (n > 0) { /* one short: the count, and the same answer */
            size_t m = 0;
            CHECK(sy_wordpiece_encode(wp, text, len, flags, ids, n - 1, &m, err, sizeof err) == SY_ERR_BUFFER_TOO_SMALL);
            CHECK(m == n);
        }
    }
    size_t half = len / 2;
    sy_status st = sy_wordpiece_encode_pair(wp, text, half, text + half, len - half, ids, types, 512, &n, err,
                                            sizeof err);
    if (st == SY_OK)
        for (size_t i = 0; i < n; i++) {
            CHECK(sy_wordpiece_token_text(wp, ids[i], NULL) != NULL);
            CHECK(types[i] >= 0 && types[i] <= 255);
        }
    else if (st != SY_ERR_BUFFER_TOO_SMALL)
        check_message(err);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *doc = (const char *)data;
    const char *nul = memchr(doc, 0, size);
    size_t doc_len = nul ? (size_t)(nul - doc) : size;
    const char *text = nul ? nul + 1 : "";
    size_t text_len = nul ? size - doc_len - 1 : 0;
    char err[400] = "";
    sy_bert_config cfg;
    if (sy_bert_config_parse(doc, doc_len, &cfg, err, sizeof err)) {
        CHECK(cfg.hidden_size > 0 && cfg.num_attention_heads > 0 && cfg.hidden_size % cfg.num_attention_heads == 0);
    } else {
        check_message(err);
    }
    err[0] = '\0';
    sy_wordpiece *wp = sy_wordpiece_from_json(doc, doc_len, err, sizeof err);
    if (wp == NULL) {
        check_message(err);
        return 0;
    }
    CHECK(sy_wordpiece_vocab_size(wp) > 0);
    encode(wp, text, text_len);
    sy_wordpiece_free(wp);
    return 0;
}
