/* WordPiece (plugins/common/tokenizer_wordpiece.c): token-exact with Hugging Face `tokenizers` on
 * all-MiniLM-L6-v2's tokenizer.json over 2,400 strings with and without [CLS]/[SEP] and 200 pairs with their token
 * types (fixture recorded by tools/oracle/wordpiece_fixtures.py), the buffer protocol, and refusal of malformed or
 * unsupported tokenizer.json files. */
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

#include "switchyard/engine.h"
#include "tokenizer_wordpiece.h"

static char *read_zst(const char *name, size_t *size) {
    char path[1024];
    const char *src = getenv("SY_SOURCE_DIR");
    snprintf(path, sizeof path, "%s/tests/fixtures/tokenizers/minilm/%s", src ? src : ".", name);
    FILE *f = fopen(path, "rb");
    if (f == NULL) return NULL;
    fseek(f, 0, SEEK_END);
    long packed_size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *packed = malloc((size_t)packed_size);
    if (packed == NULL || fread(packed, 1, (size_t)packed_size, f) != (size_t)packed_size) {
        fclose(f);
        free(packed);
        return NULL;
    }
    fclose(f);
    unsigned long long n = ZSTD_getFrameContentSize(packed, (size_t)packed_size);
    if (n == ZSTD_CONTENTSIZE_ERROR || n == ZSTD_CONTENTSIZE_UNKNOWN) {
        free(packed);
        return NULL;
    }
    char *out = malloc((size_t)n + 1);
    size_t got = out ? ZSTD_decompress(out, (size_t)n, packed, (size_t)packed_size) : 0;
    free(packed);
    if (out == NULL || ZSTD_isError(got) || got != n) {
        free(out);
        return NULL;
    }
    out[n] = '\0';
    if (size) *size = (size_t)n;
    return out;
}

static char *unhex(const char *hex, size_t *len) {
    size_t n = strlen(hex) / 2;
    char *out = malloc(n + 1);
    assert_non_null(out);
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        assert_int_equal(sscanf(hex + 2 * i, "%2x", &v), 1);
        out[i] = (char)v;
    }
    out[n] = '\0';
    *len = n;
    return out;
}

typedef struct fixture {
    char *json;
    size_t json_len;
    sy_wordpiece *wp;
    cJSON *cases;
} fixture;

static int setup(void **state) {
    static fixture f;
    f.json = read_zst("tokenizer.json.zst", &f.json_len);
    size_t n = 0;
    char *doc = read_zst("wordpiece_cases.json.zst", &n);
    if (f.json == NULL || doc == NULL) return -1;
    f.cases = cJSON_Parse(doc);
    free(doc);
    char err[300];
    f.wp = sy_wordpiece_from_json(f.json, f.json_len, err, sizeof err);
    if (f.wp == NULL) fprintf(stderr, "%s\n", err);
    if (f.wp == NULL || f.cases == NULL) return -1;
    *state = &f;
    return 0;
}

static int teardown(void **state) {
    fixture *f = *state;
    sy_wordpiece_free(f->wp);
    cJSON_Delete(f->cases);
    free(f->json);
    return 0;
}

/* ids of text against the oracle's array; prints the first difference. */
static bool same_ids(const int32_t *ids, size_t n, const cJSON *want, const char *what, size_t index) {
    size_t wn = (size_t)cJSON_GetArraySize(want);
    bool ok = wn == n;
    for (size_t i = 0; ok && i < n; i++) ok = ids[i] == cJSON_GetArrayItem(want, (int)i)->valueint;
    if (!ok) {
        fprintf(stderr, "case %zu (%s): %zu ids, oracle %zu; ours:", index, what, n, wn);
        for (size_t i = 0; i < n && i < 40; i++) fprintf(stderr, " %d", ids[i]);
        fprintf(stderr, "\n  oracle:");
        for (size_t i = 0; i < wn && i < 40; i++) fprintf(stderr, " %d", cJSON_GetArrayItem(want, (int)i)->valueint);
        fprintf(stderr, "\n");
    }
    return ok;
}

static void test_against_tokenizers(void **state) {
    fixture *f = *state;
    const cJSON *cases = cJSON_GetObjectItem(f->cases, "cases");
    assert_true(cJSON_GetArraySize(cases) >= 2000);
    size_t bad = 0, index = 0;
    int32_t ids[4096];
    const cJSON *c;
    cJSON_ArrayForEach(c, cases) {
        size_t len, n;
        char *text = unhex(cJSON_GetObjectItem(c, "hex")->valuestring, &len);
        char err[200];
        assert_int_equal(sy_wordpiece_encode(f->wp, text, len, SY_TOKENIZE_ADD_SPECIAL | SY_TOKENIZE_PARSE_SPECIAL, ids,
                                             4096, &n, err, sizeof err), SY_OK);
        if (!same_ids(ids, n, cJSON_GetObjectItem(c, "special"), "special", index)) bad++;
        assert_int_equal(sy_wordpiece_encode(f->wp, text, len, SY_TOKENIZE_PARSE_SPECIAL, ids, 4096, &n, err,
                                             sizeof err), SY_OK);
        if (!same_ids(ids, n, cJSON_GetObjectItem(c, "plain"), "plain", index)) bad++;
        free(text);
        index++;
    }
    assert_int_equal(bad, 0);
}

static void test_pairs(void **state) {
    fixture *f = *state;
    const cJSON *pairs = cJSON_GetObjectItem(f->cases, "pairs"), *p;
    size_t bad = 0, index = 0;
    int32_t ids[8192], types[8192];
    cJSON_ArrayForEach(p, pairs) {
        size_t al, bl, n;
        char *a = unhex(cJSON_GetObjectItem(p, "a")->valuestring, &al);
        char *b = unhex(cJSON_GetObjectItem(p, "b")->valuestring, &bl);
        char err[200];
        assert_int_equal(sy_wordpiece_encode_pair(f->wp, a, al, b, bl, ids, types, 8192, &n, err, sizeof err), SY_OK);
        if (!same_ids(ids, n, cJSON_GetObjectItem(p, "ids"), "pair", index) ||
            !same_ids(types, n, cJSON_GetObjectItem(p, "types"), "pair types", index))
            bad++;
        free(a), free(b);
        index++;
    }
    assert_true(index >= 200);
    assert_int_equal(bad, 0);
}

static void test_facts_and_buffers(void **state) {
    fixture *f = *state;
    assert_int_equal(sy_wordpiece_vocab_size(f->wp), 30522);
    assert_int_equal(sy_wordpiece_cls(f->wp), 101);
    assert_int_equal(sy_wordpiece_sep(f->wp), 102);
    assert_int_equal(sy_wordpiece_pad(f->wp), 0);
    assert_int_equal(sy_wordpiece_unk(f->wp), 100);
    assert_true(sy_wordpiece_is_special(f->wp, 101));
    assert_false(sy_wordpiece_is_special(f->wp, 2000));
    size_t len;
    assert_string_equal(sy_wordpiece_token_text(f->wp, 101, &len), "[CLS]");
    assert_null(sy_wordpiece_token_text(f->wp, 30522, &len));
    int32_t ids[2];
    size_t n;
    char err[200];
    assert_int_equal(sy_wordpiece_encode(f->wp, "hello world", 11, SY_TOKENIZE_ADD_SPECIAL, ids, 2, &n, err, sizeof err),
                     SY_ERR_BUFFER_TOO_SMALL);
    assert_int_equal(n, 4);
    assert_int_equal(sy_wordpiece_encode(f->wp, "\xff", 1, 0, ids, 2, &n, err, sizeof err), SY_ERR_INVALID_ARGUMENT);
    /* special-token text stays text without PARSE_SPECIAL */
    int32_t many[16];
    assert_int_equal(sy_wordpiece_encode(f->wp, "[CLS]", 5, 0, many, 16, &n, err, sizeof err), SY_OK);
    assert_true(n > 1);
}

static void refuse(const char *json, const char *needle) {
    char err[300] = "";
    sy_wordpiece *wp = sy_wordpiece_from_json(json, strlen(json), err, sizeof err);
    if (wp != NULL || strstr(err, needle) == NULL) fprintf(stderr, "expected \"%s\" in \"%s\"\n", needle, err);
    assert_null(wp);
    assert_non_null(strstr(err, needle));
}

static void test_refusals(void **state) {
    (void)state;
    refuse("{", "invalid JSON");
    refuse("{\"model\": {\"type\": \"BPE\", \"vocab\": {}}}", "not WordPiece");
    refuse("{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}", "1 to");
    refuse("{\"model\": {\"type\": \"WordPiece\", \"unk_token\": \"[UNK]\", \"vocab\": {\"a\": -1}}}", "whole number");
    refuse("{\"model\": {\"type\": \"WordPiece\", \"unk_token\": \"[UNK]\", \"vocab\": {\"a\": 0, \"b\": 0}}}", "twice");
    refuse("{\"model\": {\"type\": \"WordPiece\", \"unk_token\": \"[UNK]\", \"vocab\": {\"a\": 0, \"b\": 99999}}}",
           "reach");
    refuse("{\"model\": {\"type\": \"WordPiece\", \"unk_token\": \"x\", \"vocab\": {\"a\": 0}}}", "unk_token");
    const char *base = "{\"model\": {\"type\": \"WordPiece\", \"unk_token\": \"[UNK]\", \"vocab\": {\"[UNK]\": 0, "
                       "\"[CLS]\": 1, \"[SEP]\": 2, \"a\": 3}}, \"pre_tokenizer\": {\"type\": \"BertPreTokenizer\"}";
    char buf[1024];
    snprintf(buf, sizeof buf, "%s, \"normalizer\": {\"type\": \"NFC\"}}", base);
    refuse(buf, "normalizer NFC");
    snprintf(buf, sizeof buf, "%s, \"post_processor\": {\"type\": \"ByteLevel\"}}", base);
    refuse(buf, "post_processor ByteLevel");
    snprintf(buf, sizeof buf, "%s, \"added_tokens\": [{\"id\": 1, \"content\": \"[CLS]\", \"lstrip\": true}]}", base);
    refuse(buf, "lstrip");
    snprintf(buf, sizeof buf, "%s, \"added_tokens\": [{\"id\": 2, \"content\": \"[CLS]\"}]}", base);
    refuse(buf, "is not vocab id");
    snprintf(buf, sizeof buf, "%s, \"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": "
             "{\"id\": \"[X]\", \"type_id\": 0}}], \"pair\": [], \"special_tokens\": {}}}", base);
    refuse(buf, "special token [X]");
    /* the minimal valid one */
    snprintf(buf, sizeof buf, "%s}", base);
    char err[300];
    sy_wordpiece *wp = sy_wordpiece_from_json(buf, strlen(buf), err, sizeof err);
    assert_non_null(wp);
    int32_t ids[8];
    size_t n;
    assert_int_equal(sy_wordpiece_encode(wp, "a b", 3, SY_TOKENIZE_ADD_SPECIAL, ids, 8, &n, err, sizeof err), SY_OK);
    assert_int_equal(n, 2);
    assert_int_equal(ids[0], 3);
    sy_wordpiece_free(wp);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_against_tokenizers),
        cmocka_unit_test(test_pairs),
        cmocka_unit_test(test_facts_and_buffers),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
