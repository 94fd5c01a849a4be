/* SPM tokenizer: token-exact with llama.cpp on the stories260K vocabulary (fixture recorded by
 * tools/oracle/spm_fixtures.py with llama-cpp-python), decoding of every token, the buffer protocol, and
 * refusal of malformed tokenizer metadata. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "gguf.h"
#include "gguf_builder.h"
#include "tokenizer_spm.h"
#include "hf_config.h"

typedef struct fixture {
    sy_gguf *gguf;
    sy_spm *tok;
    cJSON *doc;
} fixture;

/* A whole fixture file, NUL-terminated; NULL when it cannot be read. */
static char *read_file(const char *path, size_t *size) { return sy_hf_read_file(path, SIZE_MAX - 1, size, NULL, 0); }

static int setup(void **state) {
    const char *src = getenv("SY_SOURCE_DIR");
    char path[1024], err[256];
    fixture *fx = calloc(1, sizeof *fx);
    snprintf(path, sizeof path, "%s/tests/fixtures/stories260K/stories260K.gguf", src ? src : ".");
    fx->gguf = sy_gguf_open(path, err, sizeof err);
    if (fx->gguf == NULL) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    fx->tok = sy_spm_from_gguf(fx->gguf, err, sizeof err);
    if (fx->tok == NULL) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    snprintf(path, sizeof path, "%s/tests/fixtures/stories260K/spm-tokens.json", src ? src : ".");
    size_t size;
    char *json = read_file(path, &size);
    if (json == NULL) {
        fprintf(stderr, "cannot read %s\n", path);
        return -1;
    }
    fx->doc = cJSON_Parse(json);
    free(json);
    if (fx->doc == NULL) return -1;
    *state = fx;
    return 0;
}

static int teardown(void **state) {
    fixture *fx = *state;
    cJSON_Delete(fx->doc);
    sy_spm_free(fx->tok);
    sy_gguf_close(fx->gguf);
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

static void test_matches_llama_cpp(void **state) {
    fixture *fx = *state;
    const cJSON *cases = cJSON_GetObjectItem(fx->doc, "cases");
    assert_true(cJSON_GetArraySize(cases) >= 400);
    int checked = 0, failed = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cases) {
        const char *hex = cJSON_GetObjectItem(c, "hex")->valuestring;
        char *text = malloc(strlen(hex) / 2 + 1);
        size_t len = unhex(hex, text);
        bool add_special = cJSON_IsTrue(cJSON_GetObjectItem(c, "add_special"));
        bool parse_special = cJSON_IsTrue(cJSON_GetObjectItem(c, "parse_special"));
        const cJSON *want = cJSON_GetObjectItem(c, "ids");
        size_t n_want = (size_t)cJSON_GetArraySize(want);
        int32_t got[1024];
        size_t n_got;
        assert_int_equal(sy_spm_encode(fx->tok, text, len, add_special, parse_special, got, 1024, &n_got), 0);
        bool same = n_got == n_want;
        for (size_t i = 0; same && i < n_want; i++) same = got[i] == cJSON_GetArrayItem(want, (int)i)->valueint;
        if (!same) {
            failed++;
            fprintf(stderr, "mismatch for hex '%s' (add_special %d, parse_special %d): got", hex, add_special,
                    parse_special);
            for (size_t i = 0; i < n_got; i++) fprintf(stderr, " %d", got[i]);
            fprintf(stderr, ", llama.cpp");
            for (size_t i = 0; i < n_want; i++) fprintf(stderr, " %d", cJSON_GetArrayItem(want, (int)i)->valueint);
            fprintf(stderr, "\n");
        }
        checked++;
        free(text);
    }
    assert_int_equal(failed, 0);
    assert_true(checked >= 400);
}

static void test_decode_matches_llama_cpp_pieces(void **state) {
    fixture *fx = *state;
    const cJSON *pieces = cJSON_GetObjectItem(fx->doc, "pieces");
    assert_int_equal(cJSON_GetArraySize(pieces), (int)sy_spm_vocab_size(fx->tok));
    for (int id = 0; id < cJSON_GetArraySize(pieces); id++) {
        const char *hex = cJSON_GetArrayItem(pieces, id)->valuestring;
        char want[128], got[128];
        size_t n_want = unhex(hex, want), n_got;
        assert_int_equal(sy_spm_decode_token(fx->tok, id, got, sizeof got, &n_got), 0);
        if (n_got != n_want || memcmp(got, want, n_got) != 0) fail_msg("token %d decodes differently", id);
    }
}

static void test_special_ids_and_types(void **state) {
    fixture *fx = *state;
    assert_int_equal(sy_spm_vocab_size(fx->tok), 512);
    assert_int_equal(sy_spm_bos(fx->tok), 1);
    assert_int_equal(sy_spm_eos(fx->tok), 2);
    assert_int_equal(sy_spm_unk(fx->tok), 0);
    assert_int_equal(sy_spm_pad(fx->tok), -1); /* the file says 4294967295: out of range means none */
    assert_true(sy_spm_add_bos(fx->tok));
    assert_false(sy_spm_add_eos(fx->tok));
    assert_int_equal(sy_spm_token_type(fx->tok, 1), SY_SPM_TOKEN_CONTROL);
    assert_int_equal(sy_spm_token_type(fx->tok, 0), SY_SPM_TOKEN_UNKNOWN);
    assert_int_equal(sy_spm_token_type(fx->tok, 3 + 0x41), SY_SPM_TOKEN_BYTE);
    assert_int_equal(sy_spm_token_type(fx->tok, 300), SY_SPM_TOKEN_NORMAL);
    assert_int_equal(sy_spm_token_type(fx->tok, 512), 0);
    assert_int_equal(sy_spm_token_type(fx->tok, -1), 0);
    assert_int_equal(sy_spm_find(fx->tok, "<0x41>", 6), 3 + 0x41);
    assert_int_equal(sy_spm_find(fx->tok, "no such token", 13), -1);
    size_t len;
    assert_null(sy_spm_token_text(fx->tok, 512, &len));
    const char *t = sy_spm_token_text(fx->tok, 2, &len);
    assert_int_equal(len, 4);
    assert_memory_equal(t, "</s>", 4);
}

static void test_buffer_protocol(void **state) {
    fixture *fx = *state;
    const char *text = "Once upon a time";
    int32_t ids[3];
    size_t n;
    assert_int_equal(sy_spm_encode(fx->tok, text, strlen(text), true, false, ids, 3, &n), 1);
    assert_int_equal(n, 5);
    assert_int_equal(ids[0], 1);
    assert_int_equal(sy_spm_encode(fx->tok, text, strlen(text), true, false, NULL, 0, &n), 1);
    assert_int_equal(n, 5);
    char piece[2];
    int32_t once = sy_spm_find(fx->tok, "\xe2\x96\x81Once", 7);
    assert_true(once >= 0);
    assert_int_equal(sy_spm_decode_token(fx->tok, once, piece, sizeof piece, &n), 1);
    assert_int_equal(n, 5); /* " Once" */
    assert_int_equal(sy_spm_decode_token(fx->tok, 512, piece, sizeof piece, &n), -1);
}

/* A tiny vocabulary written in memory: tokens, then whatever the test breaks. */
static sy_spm *spm_from(gguf_buf *b, char *err, size_t err_size) {
    sy_gguf *g = sy_gguf_open_memory(b->data, b->size, err, err_size);
    if (g == NULL) return NULL;
    sy_spm *t = sy_spm_from_gguf(g, err, err_size);
    sy_gguf_close(g); /* the tokenizer copies what it needs */
    return t;
}

static void test_malformed_metadata(void **state) {
    (void)state;
    char err[256];
    gguf_buf b = {0};
    gb_header(&b, 3, 0, 0);
    assert_null(spm_from(&b, err, sizeof err));
    assert_non_null(strstr(err, "tokenizer.ggml.tokens"));
    gb_free(&b);

    gb_header(&b, 3, 0, 2);
    gb_kv_array(&b, "tokenizer.ggml.tokens", 8, 2);
    gb_str(&b, "a");
    gb_str(&b, "b");
    gb_kv_array(&b, "tokenizer.ggml.scores", 6, 1);
    gb_f32(&b, 0.0f);
    assert_null(spm_from(&b, err, sizeof err));
    assert_non_null(strstr(err, "tokenizer.ggml.scores"));
    gb_free(&b);

    gb_header(&b, 3, 0, 2);
    gb_kv_array(&b, "tokenizer.ggml.tokens", 8, 2);
    gb_str(&b, "a");
    gb_str(&b, "b");
    gb_kv_array(&b, "tokenizer.ggml.token_type", 5, 2);
    gb_i32(&b, 1);
    gb_i32(&b, 42);
    assert_null(spm_from(&b, err, sizeof err));
    assert_non_null(strstr(err, "token_type[1]"));
    gb_free(&b);

    gb_header(&b, 3, 0, 2);
    gb_kv_array(&b, "tokenizer.ggml.tokens", 8, 2);
    gb_str(&b, "a");
    gb_str(&b, "b");
    gb_kv_str(&b, "tokenizer.ggml.bos_token_id", "1");
    assert_null(spm_from(&b, err, sizeof err));
    assert_non_null(strstr(err, "bos_token_id"));
    gb_free(&b);
}

/* Without byte tokens, an unknown character falls back to <unk>; merges follow scores, not order. */
static void test_small_vocabulary(void **state) {
    (void)state;
    char err[256];
    gguf_buf b = {0};
    static const char *tokens[] = {"<unk>", "<s>", "</s>", "\xe2\x96\x81", "a", "b", "ab", "\xe2\x96\x81" "a",
                                   "\xe2\x96\x81" "ab"};
    static const float scores[] = {0, 0, 0, -5, -1, -1, -3, -2, -4};
    static const int32_t types[] = {2, 3, 3, 1, 1, 1, 1, 1, 1};
    gb_header(&b, 3, 0, 4);
    gb_kv_array(&b, "tokenizer.ggml.tokens", 8, 9);
    for (int i = 0; i < 9; i++) gb_str(&b, tokens[i]);
    gb_kv_array(&b, "tokenizer.ggml.scores", 6, 9);
    for (int i = 0; i < 9; i++) gb_f32(&b, scores[i]);
    gb_kv_array(&b, "tokenizer.ggml.token_type", 5, 9);
    for (int i = 0; i < 9; i++) gb_i32(&b, types[i]);
    gb_kv_bool(&b, "tokenizer.ggml.add_bos_token", 0);
    sy_spm *t = spm_from(&b, err, sizeof err);
    if (t == NULL) fail_msg("%s", err);
    assert_false(sy_spm_add_bos(t));
    int32_t ids[16];
    size_t n;
    /* "▁ab": ▁+a (-2) beats a+b (-3); then ▁a+b = ▁ab (-4) */
    assert_int_equal(sy_spm_encode(t, "ab", 2, true, false, ids, 16, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], 8);
    /* "▁abxb": x is unknown and there are no byte tokens */
    assert_int_equal(sy_spm_encode(t, "abxb", 4, true, false, ids, 16, &n), 0);
    assert_int_equal(n, 3);
    assert_int_equal(ids[0], 8);
    assert_int_equal(ids[1], 0);
    assert_int_equal(ids[2], 5);
    sy_spm_free(t);
    gb_free(&b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_llama_cpp),
        cmocka_unit_test(test_decode_matches_llama_cpp_pieces),
        cmocka_unit_test(test_special_ids_and_types),
        cmocka_unit_test(test_buffer_protocol),
    };
    const struct CMUnitTest standalone[] = {
        cmocka_unit_test(test_malformed_metadata),
        cmocka_unit_test(test_small_vocabulary),
    };
    int failed = cmocka_run_group_tests_name("tokenizer_spm", tests, setup, teardown);
    failed += cmocka_run_group_tests_name("tokenizer_spm_metadata", standalone, NULL, NULL);
    return failed;
}
