/*
 * Fuzz target: the JSON reader of plugins/common (json_reader.c) on arbitrary bytes, against itself and against
 * cJSON, an independent parser.
 *
 * Beyond "no crash, no leak, no undefined behaviour, no hang" it checks:
 *   - the tree parse and the streaming skip accept the same documents, and refuse the others at the same byte
 *     with the same words (every refusal is within the input and one line);
 *   - the form that stops after the value (end != NULL) accepts whatever the whole-document form accepts, ends
 *     where only whitespace follows, and never claims to end past the input;
 *   - an accepted tree is well formed: counts match the lists, members have keys and elements have none,
 *     strings are valid UTF-8 of the length given;
 *   - where cJSON also accepts the document whole (it is laxer: it takes invalid UTF-8 and control characters),
 *     both read the same values: types, order, keys, strings, numbers (documents holding U+0000, which cJSON
 *     cuts short, are compared for structure only).
 */
#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_reader.h"
#include "utf8_util.h"

#define CHECK(cond)                                                                                      \
    do {                                                                                                 \
        if (!(cond)) {                                                                                   \
            fprintf(stderr, "fuzz_json: %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);         \
            abort();                                                                                     \
        }                                                                                                \
    } while (0)

static void check_tree(const sy_json *v, bool in_object) {
    CHECK(v != NULL);
    CHECK(in_object == (v->key != NULL));
    if (v->key != NULL) {
        CHECK(v->key[v->key_len] == '\0');
        CHECK(utf8_invalid_offset(v->key, v->key_len) == v->key_len);
    }
    switch (v->type) {
    case SY_JSON_STRING:
        CHECK(v->str != NULL && v->str[v->len] == '\0');
        CHECK(utf8_invalid_offset(v->str, v->len) == v->len);
        break;
    case SY_JSON_ARRAY:
    case SY_JSON_OBJECT: {
        size_t n = 0;
        for (const sy_json *c = v->child; c != NULL; c = c->next, n++)
            check_tree(c, v->type == SY_JSON_OBJECT);
        CHECK(n == v->count && n == sy_json_size(v));
        break;
    }
    case SY_JSON_NUMBER:
        CHECK(v->num == v->num); /* never NaN */
        break;
    default:
        CHECK(v->type == SY_JSON_NULL || v->type == SY_JSON_TRUE || v->type == SY_JSON_FALSE);
    }
}

static void check_same(const sy_json *v, const cJSON *c, bool compare_text) {
    CHECK(c != NULL);
    if (v->key != NULL && compare_text)
        CHECK(c->string != NULL && strcmp(c->string, v->key) == 0);
    switch (v->type) {
    case SY_JSON_NULL: CHECK(cJSON_IsNull(c)); break;
    case SY_JSON_TRUE: CHECK(cJSON_IsTrue(c)); break;
    case SY_JSON_FALSE: CHECK(cJSON_IsFalse(c)); break;
    case SY_JSON_NUMBER: CHECK(cJSON_IsNumber(c) && c->valuedouble == v->num); break;
    case SY_JSON_STRING:
        CHECK(cJSON_IsString(c));
        if (compare_text)
            CHECK(strcmp(c->valuestring, v->str) == 0);
        break;
    case SY_JSON_ARRAY:
    case SY_JSON_OBJECT: {
        CHECK(v->type == SY_JSON_ARRAY ? cJSON_IsArray(c) : cJSON_IsObject(c));
        const cJSON *cc = c->child;
        for (const sy_json *vc = v->child; vc != NULL; vc = vc->next, cc = cc->next)
            check_same(vc, cc, compare_text);
        CHECK(cc == NULL);
        break;
    }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *text = (const char *)data;
    sy_json_doc doc;
    sy_json_error e = {0};
    bool parsed = sy_json_parse(&doc, text, size, NULL, &e);

    char err[256] = "";
    sy_json_scan j = {.base = text, .p = text, .end = text + size, .err = err, .err_size = sizeof err};
    bool skipped = sy_json_skip(&j);
    if (skipped) {
        sy_json_ws(&j);
        if (j.p != j.end)
            skipped = sy_json_fail(&j, "trailing data after the document");
    }
    CHECK(parsed == skipped);
    if (!parsed) {
        CHECK(doc.root == NULL);
        CHECK(e.what != NULL && e.at <= size);
        /* the tree can also run out of memory where the skip does not; nothing else may differ */
        CHECK(strcmp(e.what, "out of memory") == 0 || (e.at == j.fail_at && strcmp(e.what, j.fail_what) == 0));
        CHECK(err[0] != '\0' && strchr(err, '\n') == NULL);
    }

    sy_json_doc prefix;
    size_t end = SIZE_MAX;
    bool prefix_parsed = sy_json_parse(&prefix, text, size, &end, NULL);
    if (parsed)
        CHECK(prefix_parsed);
    if (prefix_parsed) {
        CHECK(end <= size && end > 0);
        bool only_space = true;
        for (size_t i = end; i < size; i++)
            only_space = only_space && sy_json_is_space(text[i]);
        CHECK(parsed == only_space);
        check_tree(prefix.root, false);
    }
    sy_json_doc_free(&prefix);

    if (parsed) {
        check_tree(doc.root, false);
        /* cJSON must take the whole document: with require_null_terminated and the NUL inside the length, a
         * number it cuts short (it reads at most 63 characters of one) fails instead of reading differently */
        char *z = malloc(size + 1);
        CHECK(z != NULL);
        memcpy(z, data, size);
        z[size] = '\0';
        cJSON *c = cJSON_ParseWithLengthOpts(z, size + 1, NULL, true);
        if (c != NULL)
            check_same(doc.root, c, !doc.saw_nul);
        cJSON_Delete(c);
        free(z);
    }
    sy_json_doc_free(&doc);
    return 0;
}
