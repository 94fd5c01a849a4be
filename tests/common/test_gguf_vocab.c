/* gguf-quant's GGUF vocabulary layer for byte-level BPE ("gpt2" models): the Qwen3 tokenizer.json fixture is
 * written into GGUF metadata the way GGUF converters store it (tokens by id, token types, "left right" merge
 * lines, tokenizer.ggml.pre = qwen2), read back through gq_vocab, and must tokenize the oracle's strings
 * (Hugging Face tokenizers, tests/fixtures/tokenizers/qwen3/bpe_cases.json.zst) to the same ids. Plus the
 * refusals of unknown tokenizer models and pre-tokenizers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <cmocka.h>
#include <zstd.h>

#include "gguf.h"
#include "gguf_builder.h"
#include "gguf_tokenizer_json.h"
#include "qwen3_fixture.h"
#include "gguf_vocab.h"

typedef struct fixture {
    gguf_buf file;
    sy_gguf *gguf;
    gq_vocab *vocab;
    cJSON *cases;
} fixture;

/* tokenizer.json -> GGUF metadata (no tensors). */
static void build_gguf(gguf_buf *b, const cJSON *tj, const char *pre) {
    gb_header(b, 3, 0, 8);
    gb_tokenizer_json_kvs(b, tj, pre);
    gb_kv_u32(b, "tokenizer.ggml.bos_token_id", 151643);
    gb_kv_u32(b, "tokenizer.ggml.eos_token_id", 151645);
    gb_kv_bool(b, "tokenizer.ggml.add_bos_token", 0);
}

static int setup(void **state) {
    fixture *fx = calloc(1, sizeof *fx);
    char *json = qwen3_fixture_read_zst("tokenizer.json.zst", NULL);
    if (json == NULL) return -1;
    cJSON *tj = cJSON_Parse(json);
    free(json);
    if (tj == NULL) return -1;
    build_gguf(&fx->file, tj, "qwen2");
    cJSON_Delete(tj);
    char err[256];
    fx->gguf = sy_gguf_open_memory(fx->file.data, fx->file.size, err, sizeof err);
    if (fx->gguf == NULL) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    sy_status st;
    fx->vocab = gq_vocab_from_gguf(fx->gguf, &st, err, sizeof err);
    if (fx->vocab == NULL) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    json = qwen3_fixture_read_zst("bpe_cases.json.zst", NULL);
    fx->cases = json ? cJSON_Parse(json) : NULL;
    free(json);
    *state = fx;
    return fx->cases ? 0 : -1;
}

static int teardown(void **state) {
    fixture *fx = *state;
    cJSON_Delete(fx->cases);
    gq_vocab_free(fx->vocab);
    sy_gguf_close(fx->gguf);
    gb_free(&fx->file);
    free(fx);
    return 0;
}

static size_t unhex(const char *hex, char *out) {
    size_t n = strlen(hex) / 2;
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        sscanf(hex + 2 * i, "%2x", &v);
        out[i] = (char)v;
    }
    return n;
}

static void test_qwen_bpe_from_gguf_matches_tokenizers(void **state) {
    fixture *fx = *state;
    assert_string_equal(gq_vocab_kind(fx->vocab), "bpe");
    assert_int_equal(gq_vocab_size(fx->vocab), 151669);
    const cJSON *variant = cJSON_GetArrayItem(cJSON_GetObjectItem(fx->cases, "variants"), 0);
    assert_string_equal(cJSON_GetObjectItem(variant, "name")->valuestring, "qwen3");
    const cJSON *c;
    int checked = 0, failed = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(variant, "cases")) {
        const char *hex = cJSON_GetObjectItem(c, "hex")->valuestring;
        char *text = malloc(strlen(hex) / 2 + 1);
        size_t len = unhex(hex, text);
        const cJSON *want = cJSON_GetObjectItem(c, "ids");
        size_t n_want = (size_t)cJSON_GetArraySize(want), n_got = 0;
        int32_t *got = malloc((n_want + 16) * sizeof *got);
        char err[256];
        sy_status st = gq_vocab_tokenize(fx->vocab, text, len, SY_TOKENIZE_PARSE_SPECIAL, got, n_want + 16, &n_got,
                                         err, sizeof err);
        bool same = st == SY_OK && n_got == n_want;
        for (size_t i = 0; same && i < n_want; i++) same = got[i] == cJSON_GetArrayItem(want, (int)i)->valueint;
        if (!same && failed++ < 5) fprintf(stderr, "mismatch on hex %.80s (status %d)\n", hex, st);
        checked++;
        free(got);
        free(text);
    }
    fprintf(stderr, "%d of %d cases differ\n", failed, checked);
    assert_true(checked > 2000);
    assert_int_equal(failed, 0);
}

static void test_bpe_pieces_and_flags(void **state) {
    fixture *fx = *state;
    int32_t ids[16];
    size_t n;
    char err[256];
    const char *text = "<|im_start|>user\nHi<|im_end|>";
    assert_int_equal(gq_vocab_tokenize(fx->vocab, text, strlen(text), SY_TOKENIZE_PARSE_SPECIAL, ids, 16, &n, err,
                                       sizeof err),
                     SY_OK);
    assert_int_equal(ids[0], 151644);
    assert_int_equal(ids[n - 1], 151645);
    assert_true(gq_vocab_token_flags(fx->vocab, 151645) & SY_TOKEN_END_OF_GENERATION);
    assert_true(gq_vocab_token_flags(fx->vocab, 151644) & SY_TOKEN_CONTROL);
    assert_false(gq_vocab_token_flags(fx->vocab, ids[1]) & SY_TOKEN_CONTROL);
    /* the pieces join back to the text */
    char joined[128];
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        size_t pn;
        assert_int_equal(gq_vocab_token_bytes(fx->vocab, ids[i], joined + len, sizeof joined - len, &pn), SY_OK);
        len += pn;
    }
    assert_int_equal(len, strlen(text));
    assert_memory_equal(joined, text, len);
    assert_int_equal(gq_vocab_token_bytes(fx->vocab, 151669, joined, sizeof joined, &n), SY_ERR_INVALID_ARGUMENT);
    assert_int_equal(gq_vocab_bos(fx->vocab), 151643);
    assert_false(gq_vocab_add_bos(fx->vocab));
    /* no BOS added for Qwen even when asked for special tokens */
    assert_int_equal(gq_vocab_tokenize(fx->vocab, "Hi", 2, SY_TOKENIZE_ADD_SPECIAL, ids, 16, &n, err, sizeof err),
                     SY_OK);
    assert_int_equal(n, 1);
    assert_int_equal(gq_vocab_tokenize(fx->vocab, "Hi there", 8, 0, ids, 1, &n, err, sizeof err),
                     SY_ERR_BUFFER_TOO_SMALL);
    assert_int_equal(n, 2);
}

static void expect_refused(gguf_buf *b, sy_status want, const char *needle) {
    char err[256];
    sy_gguf *g = sy_gguf_open_memory(b->data, b->size, err, sizeof err);
    if (g == NULL) fail_msg("%s", err);
    sy_status st;
    gq_vocab *v = gq_vocab_from_gguf(g, &st, err, sizeof err);
    assert_null(v);
    assert_int_equal(st, want);
    if (strstr(err, needle) == NULL) fail_msg("'%s' does not contain '%s'", err, needle);
    sy_gguf_close(g);
    gb_free(b);
}

static void test_refusals(void **state) {
    (void)state;
    gguf_buf b = {0};
    gb_header(&b, 3, 0, 1);
    gb_kv_str(&b, "tokenizer.ggml.model", "bert");
    expect_refused(&b, SY_ERR_UNSUPPORTED, "tokenizer model 'bert' is not supported");

    gb_header(&b, 3, 0, 0);
    expect_refused(&b, SY_ERR_FORMAT, "tokenizer.ggml.model");

    gb_header(&b, 3, 0, 4);
    gb_kv_str(&b, "tokenizer.ggml.model", "gpt2");
    gb_kv_str(&b, "tokenizer.ggml.pre", "falcon");
    gb_kv_array(&b, "tokenizer.ggml.tokens", 8, 2);
    gb_str(&b, "a");
    gb_str(&b, "b");
    gb_kv_array(&b, "tokenizer.ggml.merges", 8, 0);
    expect_refused(&b, SY_ERR_UNSUPPORTED, "falcon");

    gb_header(&b, 3, 0, 3);
    gb_kv_str(&b, "tokenizer.ggml.model", "gpt2");
    gb_kv_array(&b, "tokenizer.ggml.tokens", 8, 1);
    gb_str(&b, "a");
    gb_kv_array(&b, "tokenizer.ggml.merges", 8, 0);
    expect_refused(&b, SY_ERR_UNSUPPORTED, "tokenizer.ggml.pre");

    gb_header(&b, 3, 0, 3);
    gb_kv_str(&b, "tokenizer.ggml.model", "gpt2");
    gb_kv_str(&b, "tokenizer.ggml.pre", "qwen2");
    gb_kv_array(&b, "tokenizer.ggml.tokens", 8, 1);
    gb_str(&b, "a");
    expect_refused(&b, SY_ERR_FORMAT, "tokenizer.ggml.merges");

    gb_header(&b, 3, 0, 4);
    gb_kv_str(&b, "tokenizer.ggml.model", "gpt2");
    gb_kv_str(&b, "tokenizer.ggml.pre", "qwen2");
    gb_kv_array(&b, "tokenizer.ggml.tokens", 8, 2);
    gb_str(&b, "a");
    gb_str(&b, "b");
    gb_kv_array(&b, "tokenizer.ggml.merges", 8, 1);
    gb_str(&b, "a c"); /* c is not a token */
    expect_refused(&b, SY_ERR_FORMAT, "BPE tokenizer");
}

int main(void) {
    const struct CMUnitTest with_qwen[] = {
        cmocka_unit_test(test_qwen_bpe_from_gguf_matches_tokenizers),
        cmocka_unit_test(test_bpe_pieces_and_flags),
    };
    const struct CMUnitTest alone[] = {
        cmocka_unit_test(test_refusals),
    };
    int failed = cmocka_run_group_tests_name("gguf_vocab (qwen3 bpe)", with_qwen, setup, teardown);
    failed += cmocka_run_group_tests_name("gguf_vocab refusals", alone, NULL, NULL);
    return failed;
}
