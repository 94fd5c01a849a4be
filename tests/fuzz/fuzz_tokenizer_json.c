/*
 * Fuzz target: the byte-level BPE tokenizer.json loader, the tokenizer_config.json reader and the UTF-8 stream
 * (plugins/common/tokenizer_bpe.c, host/base/utf8.c) on arbitrary bytes.
 *
 * Beyond "no crash, no leak, no undefined behaviour, no hang" it checks their promises: a refusal is one
 * non-empty line; an accepted tokenizer encodes to ids that all name tokens, refuses invalid UTF-8, and
 * decodes every id it has; the stream only ever emits valid UTF-8 when replacing, and loses no byte when not.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "switchyard/engine.h"
#include "tokenizer_bpe.h"
#include "base/utf8.h"

#define CHECK(cond)                                                                                      \
    do {                                                                                                 \
        if (!(cond)) {                                                                                   \
            fprintf(stderr, "fuzz_tokenizer_json: %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            abort();                                                                                     \
        }                                                                                                \
    } while (0)

static void check_message(const char *err) {
    CHECK(err[0] != '\0');
    CHECK(strchr(err, '\n') == NULL);
}

static bool valid_utf8(const char *s, size_t n) {
    /* the stream in replacing mode must leave valid UTF-8 unchanged */
    sy_utf8_stream st;
    sy_utf8_stream_init(&st, true);
    char *out = malloc(SY_UTF8_STREAM_MAX_OUT(n));
    CHECK(out != NULL);
    size_t o = sy_utf8_stream_feed(&st, s, n, out);
    o += sy_utf8_stream_finish(&st, out + o);
    bool same = o == n && (n == 0 || memcmp(out, s, n) == 0);
    free(out);
    return same;
}

static void encode_and_decode(const sy_bpe *t, const char *text, size_t len, uint32_t flags) {
    sy_bpe_ids ids = {0};
    char err[512] = "";
    if (!sy_bpe_tokenize(t, text, len, flags, &ids, err, sizeof err)) {
        check_message(err);
        CHECK(ids.n == 0);
        sy_bpe_ids_free(&ids);
        return;
    }
    for (size_t i = 0; i < ids.n; i++) {
        size_t bl;
        CHECK(sy_bpe_token_bytes(t, ids.ids[i], &bl) != NULL);
    }
    char *out = NULL;
    size_t out_len = 0, out_cap = 0;
    CHECK(sy_bpe_decode(t, ids.ids, ids.n, false, &out, &out_len, &out_cap, err, sizeof err));
    free(out);
    sy_bpe_ids_free(&ids);
}

static void fuzz_tokenizer(const uint8_t *data, size_t size) {
    char err[512] = "";
    sy_bpe *t = sy_bpe_load_json_buffer((const char *)data, size, err, sizeof err);
    if (t == NULL) {
        check_message(err);
        return;
    }
    static const char *const texts[] = {"Hello world", "It's 12345 <|e|> done!\n\n", " \t  x  ", "",
                                        "\xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80 caf\xc3\xa9 cafe\xcc\x81",
                                        "ab\xff"};
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++)
        for (uint32_t flags = 0; flags < 4; flags++)
            encode_and_decode(t, texts[i], strlen(texts[i]), flags);
    /* the input itself as text (refused when it is not UTF-8, which must agree with the stream's view) */
    size_t n = size < 2048 ? size : 2048;
    sy_bpe_ids ids = {0};
    bool ok = sy_bpe_tokenize(t, (const char *)data, n, SY_TOKENIZE_PARSE_SPECIAL, &ids, err, sizeof err);
    bool valid = valid_utf8((const char *)data, n);
    CHECK(valid || !ok);                                /* invalid UTF-8 is always refused */
    CHECK(ok || !valid || strstr(err, "UTF-8") == NULL); /* and valid UTF-8 never for being invalid */
    sy_bpe_ids_free(&ids);

    uint32_t n_vocab = sy_bpe_n_vocab(t);
    CHECK(n_vocab > 0);
    for (uint32_t id = 0; id < n_vocab && id < 4096; id++) {
        size_t bl, tl;
        const char *b = sy_bpe_token_bytes(t, (int32_t)id, &bl);
        const char *text = sy_bpe_token_text(t, (int32_t)id, &tl);
        CHECK((b == NULL) == (text == NULL));
        CHECK((b == NULL) == ((sy_bpe_token_flags(t, (int32_t)id) & SY_TOKEN_UNUSED) != 0));
        if (text != NULL)
            CHECK(sy_bpe_find_token(t, text, tl) >= 0);
    }
    for (size_t r = 0; r < sy_bpe_n_merges(t) && r < 4096; r++) {
        int32_t a, c;
        CHECK(sy_bpe_merge_at(t, r, &a, &c));
        CHECK(a >= 0 && (uint32_t)a < n_vocab && c >= 0 && (uint32_t)c < n_vocab);
    }
    sy_bpe_free(t);
}

static void fuzz_config(const uint8_t *data, size_t size) {
    sy_tokenizer_config c;
    char err[512] = "";
    if (sy_tokenizer_config_parse((const char *)data, size, &c, err, sizeof err))
        sy_tokenizer_config_free(&c);
    else
        check_message(err);
}

static void fuzz_stream(const uint8_t *data, size_t size) {
    for (int replace = 0; replace < 2; replace++) {
        sy_utf8_stream st;
        sy_utf8_stream_init(&st, replace);
        char *all = malloc(SY_UTF8_STREAM_MAX_OUT(size) + 16);
        CHECK(all != NULL);
        size_t o = 0, at = 0, chunk = 1;
        while (at < size) { /* chunks of 1, 2, 3, ... bytes */
            size_t k = size - at < chunk ? size - at : chunk;
            o += sy_utf8_stream_feed(&st, data + at, k, all + o);
            CHECK(sy_utf8_stream_pending(&st) <= 3);
            at += k;
            chunk = chunk % 7 + 1;
        }
        o += sy_utf8_stream_finish(&st, all + o);
        if (replace)
            CHECK(valid_utf8(all, o));
        else
            CHECK(o == size && (size == 0 || memcmp(all, data, size) == 0));
        free(all);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_tokenizer(data, size);
    fuzz_config(data, size);
    fuzz_stream(data, size);
    return 0;
}
