/* The JSON reader of plugins/common (json_reader.h): trees read right (types, order, repeated keys, escapes,
 * numbers in any locale), the streaming skip and the tree parse refuse the same documents at the same byte with
 * the same words, the depth limit holds, and nothing is read past the given length. */
#include <locale.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "json_reader.h"

/* A copy of s in a buffer of exactly its length (no NUL after it), so that a read past the end is an ASan error. */
static char *exact_copy(const char *s, size_t n) {
    char *p = malloc(n > 0 ? n : 1);
    assert_non_null(p);
    memcpy(p, s, n);
    return p;
}

static void parse_ok(sy_json_doc *doc, const char *text) {
    size_t n = strlen(text);
    char *copy = exact_copy(text, n);
    sy_json_error e = {0};
    if (!sy_json_parse(doc, copy, n, NULL, &e))
        fail_msg("refused at byte %zu (%s): %s", e.at, e.what, text);
    free(copy); /* the tree owns copies of its strings */
}

static void test_tree(void **state) {
    (void)state;
    sy_json_doc doc;
    parse_ok(&doc, " {\"s\": \"a\\n\\u00e9\\ud83d\\ude00\\/\", \"n\": -12.5e1, \"i\": 7, \"t\": true, \"f\": false,"
                   " \"z\": null, \"a\": [1, [], {}, \"x\"], \"o\": {\"k\": 1, \"k\": 2}, \"\": 0} ");
    const sy_json *root = doc.root;
    assert_true(sy_json_is_object(root));
    assert_int_equal(sy_json_size(root), 9);
    assert_false(doc.saw_nul);

    const sy_json *s = sy_json_get(root, "s");
    assert_true(sy_json_is_string(s));
    assert_int_equal(s->len, 9);
    assert_memory_equal(s->str, "a\n\xc3\xa9\xf0\x9f\x98\x80/", 10); /* with its NUL */
    assert_string_equal(s->key, "s");
    assert_int_equal(s->key_len, 1);

    assert_true(sy_json_get(root, "n")->num == -125.0);
    assert_true(sy_json_get(root, "i")->num == 7.0);
    assert_true(sy_json_is_true(sy_json_get(root, "t")) && sy_json_is_bool(sy_json_get(root, "t")));
    assert_true(sy_json_is_bool(sy_json_get(root, "f")) && !sy_json_is_true(sy_json_get(root, "f")));
    assert_true(sy_json_is_null(sy_json_get(root, "z")));
    assert_true(sy_json_is_number(sy_json_get(root, "")));
    assert_null(sy_json_get(root, "missing"));

    const sy_json *a = sy_json_get(root, "a");
    assert_int_equal(sy_json_size(a), 4);
    assert_true(sy_json_is_number(sy_json_at(a, 0)));
    assert_true(sy_json_is_array(sy_json_at(a, 1)) && sy_json_size(sy_json_at(a, 1)) == 0);
    assert_true(sy_json_is_object(sy_json_at(a, 2)) && sy_json_size(sy_json_at(a, 2)) == 0);
    assert_string_equal(sy_json_at(a, 3)->str, "x");
    assert_null(sy_json_at(a, 4));
    assert_null(sy_json_at(a, 3)->key); /* elements have no name */

    /* a repeated key is kept, in order; a lookup finds the first */
    const sy_json *o = sy_json_get(root, "o");
    assert_int_equal(sy_json_size(o), 2);
    assert_true(sy_json_get(o, "k")->num == 1.0);
    assert_true(sy_json_at(o, 1)->num == 2.0);

    /* every lookup takes NULL and the wrong type */
    assert_null(sy_json_get(NULL, "k"));
    assert_null(sy_json_get(a, "k"));
    assert_null(sy_json_at(NULL, 0));
    assert_null(sy_json_at(s, 0));
    assert_int_equal(sy_json_size(NULL), 0);
    assert_int_equal(sy_json_size(s), 0);
    assert_false(sy_json_is_string(NULL) || sy_json_is_null(NULL) || sy_json_is_bool(NULL));
    sy_json_doc_free(&doc);
    assert_null(doc.root);
    sy_json_doc_free(&doc); /* twice is harmless */

    /* a scalar document, and one large enough to take several blocks */
    parse_ok(&doc, "\"just a string\"");
    assert_string_equal(doc.root->str, "just a string");
    sy_json_doc_free(&doc);
    size_t n = 200000;
    char *big = malloc(n * 6 + 3);
    assert_non_null(big);
    size_t o_ = 0;
    big[o_++] = '[';
    for (size_t i = 0; i < n; i++)
        o_ += (size_t)sprintf(big + o_, "%s\"%zu\"", i ? "," : "", i % 10);
    big[o_++] = ']';
    assert_true(sy_json_parse(&doc, big, o_, NULL, NULL));
    assert_int_equal(sy_json_size(doc.root), n);
    size_t count = 0;
    for (const sy_json *e = doc.root->child; e != NULL; e = e->next, count++)
        assert_int_equal(e->str[0] - '0', (int)(count % 10));
    assert_int_equal(count, n);
    sy_json_doc_free(&doc);
    free(big);
}

static void test_numbers(void **state) {
    (void)state;
    /* the number a JSON reader must give: as strtod reads it in the C locale, even when the process has a locale
     * whose decimal point is not '.' (where one is installed) */
    const char *locales[] = {"de_DE.UTF-8", "de_DE.utf8", "fr_FR.UTF-8", NULL};
    char *previous = strdup(setlocale(LC_NUMERIC, NULL));
    for (size_t i = 0; locales[i] != NULL && setlocale(LC_NUMERIC, locales[i]) == NULL; i++) {
    }
    sy_json_doc doc;
    parse_ok(&doc, "[0, -0, 0.5, 1e2, 1E-2, 2.5e+3, 9007199254740993, 1e400, -1e400, "
                   "1000000000000000000000000000000000000000000000000000000000000000000000000000000000]");
    const double want[] = {0.0, -0.0, 0.5, 100.0, 0.01, 2500.0, 9007199254740992.0, HUGE_VAL, -HUGE_VAL, 1e81};
    assert_int_equal(sy_json_size(doc.root), sizeof want / sizeof want[0]);
    size_t i = 0;
    for (const sy_json *e = doc.root->child; e != NULL; e = e->next, i++) {
        if (e->num != want[i])
            fail_msg("number %zu: %.17g, expected %.17g", i, e->num, want[i]);
    }
    assert_true(signbit(sy_json_at(doc.root, 1)->num));
    sy_json_doc_free(&doc);
    setlocale(LC_NUMERIC, previous);
    free(previous);
}

static void test_end_and_nul(void **state) {
    (void)state;
    sy_json_doc doc;
    sy_json_error e;
    size_t end = 0;
    /* with end, what follows the value is the caller's */
    assert_true(sy_json_parse(&doc, "  {\"a\":[]}  x", 13, &end, &e));
    assert_int_equal(end, 10);
    sy_json_doc_free(&doc);
    /* without, it is refused */
    assert_false(sy_json_parse(&doc, "  {\"a\":[]}  x", 13, NULL, &e));
    assert_int_equal(e.at, 12);
    assert_string_equal(e.what, "trailing data after the document");
    assert_null(doc.root);
    assert_true(sy_json_parse(&doc, "{} \t\r\n", 6, NULL, &e));
    sy_json_doc_free(&doc);
    /* U+0000 is kept, with the length, and flagged */
    assert_true(sy_json_parse(&doc, "{\"a\\u0000b\":\"x\\u0000y\"}", 23, NULL, &e));
    assert_true(doc.saw_nul);
    const sy_json *m = doc.root->child;
    assert_int_equal(m->key_len, 3);
    assert_int_equal(m->len, 3);
    assert_memory_equal(m->str, "x\0y", 4);
    assert_null(sy_json_get(doc.root, "a")); /* keys compare with their length */
    sy_json_doc_free(&doc);
    /* the length bounds the read: a document cut short is incomplete */
    const char *full = "{\"key\":\"value\"}";
    char *cut = exact_copy(full, strlen(full) - 1);
    assert_false(sy_json_parse(&doc, cut, strlen(full) - 1, NULL, &e));
    assert_string_equal(e.what, "unexpected end of input");
    free(cut);
    assert_false(sy_json_parse(&doc, NULL, 0, NULL, &e));
}

/* Refusals: the tree parse and the streaming skip give the same byte and the same words. */
static void test_refusals(void **state) {
    (void)state;
    static const struct {
        const char *text;
        size_t at;
        const char *what;
    } cases[] = {
        {"", 0, "unexpected end of input"},
        {"   ", 3, "unexpected end of input"},
        {"{\"a\":", 5, "unexpected end of input"},
        {"[1,]", 3, "unexpected character"},
        {"[1 2]", 3, "expected ',' or ']'"},
        {"{\"a\":1 \"b\":2}", 7, "expected ',' or '}'"},
        {"{\"a\" 1}", 5, "expected ':' after an object key"},
        {"{1:2}", 1, "expected a string"},
        {"{\"a\":1,}", 7, "expected a string"},
        {"01", 1, "invalid number"},
        {"1.", 2, "invalid number: no digit after '.'"},
        {"1e+", 3, "invalid number: no digit in the exponent"},
        {"-", 1, "invalid number"},
        {"+1", 0, "unexpected character"},
        {"tru", 0, "unexpected character"},
        {"truex", 4, "unexpected characters after a literal"},
        {"NaN", 0, "unexpected character"},
        {"\"abc", 4, "unterminated string"},
        {"\"a\\x\"", 2, "unknown escape in a string"},
        {"\"a\nb\"", 2, "control character inside a string"},
        {"\"\xff\"", 1, "invalid UTF-8 inside a string"},
        {"\"\xc0\xaf\"", 1, "invalid UTF-8 inside a string"},
        {"\"\xed\xa0\x80\"", 1, "invalid UTF-8 inside a string"},
        {"\"\\ud800\"", 7, "lone high surrogate in a \\u escape"},
        {"\"\\udc00\"", 7, "lone low surrogate in a \\u escape"},
        {"\"\\ud800\\u0041\"", 13, "high surrogate not followed by a low one"},
        {"\"\\u12g4\"", 3, "bad hex digit in a \\u escape"},
        {"\xef\xbb\xbf{}", 0, "unexpected character"}, /* a byte-order mark is not JSON */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n = strlen(cases[i].text);
        char *copy = exact_copy(cases[i].text, n);
        sy_json_doc doc;
        sy_json_error e = {0};
        if (sy_json_parse(&doc, copy, n, NULL, &e))
            fail_msg("case %zu (%s): accepted", i, cases[i].text);
        if (e.at != cases[i].at || strcmp(e.what, cases[i].what) != 0)
            fail_msg("case %zu (%s): byte %zu, \"%s\"; expected byte %zu, \"%s\"", i, cases[i].text, e.at, e.what,
                     cases[i].at, cases[i].what);
        char err[200];
        sy_json_scan j = {.base = copy, .p = copy, .end = copy + n, .err = err, .err_size = sizeof err};
        bool skipped = sy_json_skip(&j);
        if (skipped) { /* a complete value followed by something else: the skip leaves that to its caller */
            sy_json_ws(&j);
            skipped = j.p == j.end;
            if (!skipped)
                sy_json_fail(&j, "trailing data after the document");
        }
        assert_false(skipped);
        char want[200];
        snprintf(want, sizeof want, "invalid JSON at byte %zu: %s", cases[i].at, cases[i].what);
        assert_string_equal(err, want);
        assert_int_equal(j.fail_at, cases[i].at);
        free(copy);
    }
}

static void test_depth_limit(void **state) {
    (void)state;
    char text[2 * (SY_JSON_MAX_DEPTH + 1)];
    for (size_t depth = SY_JSON_MAX_DEPTH; depth <= SY_JSON_MAX_DEPTH + 1; depth++) {
        memset(text, '[', depth);
        memset(text + depth, ']', depth);
        sy_json_doc doc;
        sy_json_error e;
        bool ok = sy_json_parse(&doc, text, 2 * depth, NULL, &e);
        sy_json_scan j = {.base = text, .p = text, .end = text + 2 * depth};
        bool skipped = sy_json_skip(&j);
        assert_true(ok == skipped);
        if (depth <= SY_JSON_MAX_DEPTH) {
            assert_true(ok);
            const sy_json *v = doc.root;
            size_t levels = 0;
            for (; v != NULL; v = v->child)
                levels++;
            assert_int_equal(levels, depth);
            sy_json_doc_free(&doc);
        } else {
            assert_false(ok);
            assert_int_equal(e.at, SY_JSON_MAX_DEPTH);
            assert_string_equal(e.what, "nesting deeper than 256 levels");
        }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tree),        cmocka_unit_test(test_numbers),     cmocka_unit_test(test_end_and_nul),
        cmocka_unit_test(test_refusals),    cmocka_unit_test(test_depth_limit),
    };
    return cmocka_run_group_tests_name("json_reader", tests, NULL, NULL);
}
