/* JSON Schema to GBNF over the corpus of tests/fixtures/json-schemas: every schema compiles (or is refused with
 * the expected message); the documents generated from it with fixed seeds parse as JSON (cJSON) and are the
 * ones Python jsonschema judged valid (verdicts.json, by tools/oracle/json_schema_fixtures.py); the corpus's
 * hand-written valid documents are accepted and its invalid ones rejected. Also: whitespace modes, the
 * json_object mode, generation through the Qwen3 vocabulary, and the compiled-grammar cache. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "schema_corpus.h"

static gt_vocab *bytes_v, *qwen_v;
static cJSON *verdicts;

static int setup(void **state) {
    (void)state;
    bytes_v = gt_byte_vocab();
    qwen_v = gt_qwen3_vocab();
    char path[1024];
    gt_source_path(path, sizeof path, "tests/fixtures/json-schemas/verdicts.json");
    char *t = gt_read_file(path, NULL);
    verdicts = t ? cJSON_Parse(t) : NULL;
    free(t);
    if (verdicts == NULL) fprintf(stderr, "cannot read %s\n", path);
    return bytes_v && qwen_v && verdicts ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    gt_vocab_free(bytes_v);
    gt_vocab_free(qwen_v);
    cJSON_Delete(verdicts);
    return 0;
}

static sy_grammar *schema_grammar(const cJSON *schema, int ws, char *err, size_t cap) {
    sy_schema_options o = sy_schema_defaults();
    o.whitespace = ws;
    char *gbnf = NULL;
    if (sy_json_schema_to_gbnf(schema, &o, &gbnf, err, cap) != 0) return NULL;
    sy_grammar *g = sy_grammar_compile(gbnf, strlen(gbnf), NULL, err, cap);
    if (g == NULL) fprintf(stderr, "GBNF that failed:\n%s\n", gbnf);
    free(gbnf);
    return g;
}

static bool accepts(sy_grammar *g, const char *text) {
    char err[256];
    sy_grammar_state *st = sy_grammar_state_create(g, bytes_v->v, NULL, err, sizeof err);
    assert_non_null(st);
    bool ok = sy_grammar_state_accept_bytes(st, (const uint8_t *)text, strlen(text)) == 0 && sy_grammar_state_can_end(st);
    sy_grammar_state_free(st);
    return ok;
}

/* Adds spaces and newlines after the structural characters of compact JSON (outside strings). */
static char *spread(const char *s) {
    size_t n = strlen(s);
    char *o = malloc(n * 4 + 1), *p = o;
    bool in_str = false;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        *p++ = ch;
        if (in_str) {
            if (ch == '\\' && i + 1 < n) *p++ = s[++i];
            else if (ch == '"') in_str = false;
            if (!in_str && ch == '"') *p++ = ' ';
            continue;
        }
        if (ch == '"') in_str = true;
        else if (ch == ',' ) *p++ = '\n', *p++ = ' ', *p++ = ' ';
        else if (ch == ':' || ch == '{' || ch == '[') *p++ = ' ';
    }
    *p = '\0';
    return o;
}

static void corpus(void **state) {
    (void)state;
    char dir[1024];
    gt_source_path(dir, sizeof dir, "tests/fixtures/json-schemas");
    size_t n;
    char **files = sc_list(dir, &n);
    const cJSON *vs = cJSON_GetObjectItemCaseSensitive(verdicts, "schemas");
    size_t compiled = 0, refused = 0, samples = 0, docs = 0;
    for (size_t i = 0; i < n; i++) {
        char path[2048], err[256] = "";
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        char *text = gt_read_file(path, NULL);
        cJSON *fx = text ? cJSON_Parse(text) : NULL;
        free(text);
        if (fx == NULL) fail_msg("%s: unreadable", files[i]);
        const char *name = cJSON_GetObjectItemCaseSensitive(fx, "name")->valuestring;
        const cJSON *schema = cJSON_GetObjectItemCaseSensitive(fx, "schema");
        const cJSON *want_err = cJSON_GetObjectItemCaseSensitive(fx, "error");
        sy_grammar *g = schema_grammar(schema, SY_SCHEMA_WS_COMPACT, err, sizeof err);
        if (want_err) {
            if (g != NULL) fail_msg("%s: compiled, expected an error with \"%s\"", name, want_err->valuestring);
            if (strstr(err, want_err->valuestring) == NULL)
                fail_msg("%s: error \"%s\" lacks \"%s\"", name, err, want_err->valuestring);
            refused++;
            cJSON_Delete(fx);
            continue;
        }
        if (g == NULL) fail_msg("%s: %s", name, err);
        compiled++;
        /* the generated documents are JSON and are the ones the oracle judged */
        gt_sample s[SCHEMA_SAMPLES];
        int k = sc_samples(g, bytes_v, name, s, err, sizeof err);
        if (k < 0) fail_msg("%s: generation failed: %s", name, err);
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(vs, name);
        if (v == NULL) fail_msg("%s: no verdicts (rerun tools/oracle/json_schema_fixtures.py)", name);
        if (cJSON_GetArraySize(v) != k)
            fail_msg("%s: %d samples, %d verdicts: the generator changed, rerun the oracle", name, k,
                     cJSON_GetArraySize(v));
        for (int j = 0; j < k; j++) {
            cJSON *doc = cJSON_ParseWithLength(s[j].text, s[j].len);
            if (doc == NULL) fail_msg("%s: generated text is not JSON: %s", name, s[j].text);
            cJSON_Delete(doc);
            char h[20];
            snprintf(h, sizeof h, "%016llx", (unsigned long long)sc_fnv(s[j].text, s[j].len));
            const cJSON *vj = cJSON_GetArrayItem(v, j);
            if (strcmp(cJSON_GetObjectItemCaseSensitive(vj, "hash")->valuestring, h) != 0)
                fail_msg("%s: sample %d differs from the one the oracle judged: rerun the oracle", name, j);
            if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(vj, "valid")))
                fail_msg("%s: jsonschema rejected sample %d: %s", name, j, s[j].text);
            samples++;
            free(s[j].text);
        }
        /* hand-written documents; the valid ones also with whitespace under the flexible mode */
        sy_grammar *gf = schema_grammar(schema, SY_SCHEMA_WS_FLEXIBLE, err, sizeof err);
        if (gf == NULL) fail_msg("%s (flexible whitespace): %s", name, err);
        const cJSON *d;
        char *stext = cJSON_PrintUnformatted(schema);
        bool literal = strstr(stext, "\"enum\"") || strstr(stext, "\"const\""); /* literals have no inner space */
        free(stext);
        cJSON_ArrayForEach(d, cJSON_GetObjectItemCaseSensitive(fx, "valid")) {
            if (!accepts(g, d->valuestring)) fail_msg("%s: rejected valid document %s", name, d->valuestring);
            if (literal) {
                docs++;
                continue;
            }
            char *sp = spread(d->valuestring);
            if (!accepts(gf, sp)) fail_msg("%s: flexible whitespace rejected %s", name, sp);
            if (strcmp(sp, d->valuestring) != 0 && accepts(g, sp))
                fail_msg("%s: compact mode accepted whitespace: %s", name, sp);
            free(sp);
            docs++;
        }
        cJSON_ArrayForEach(d, cJSON_GetObjectItemCaseSensitive(fx, "invalid")) {
            if (accepts(g, d->valuestring)) fail_msg("%s: accepted invalid document %s", name, d->valuestring);
            if (accepts(gf, d->valuestring)) fail_msg("%s: flexible mode accepted invalid document %s", name, d->valuestring);
            docs++;
        }
        sy_grammar_free(gf);
        sy_grammar_free(g);
        cJSON_Delete(fx);
    }
    for (size_t i = 0; i < n; i++) free(files[i]);
    free(files);
    printf("corpus: %zu schemas compiled, %zu refused, %zu samples checked, %zu documents\n", compiled, refused,
           samples, docs);
    assert_true(compiled >= 200);
    assert_true(samples >= 1000);
    assert_int_equal(samples, (size_t)cJSON_GetObjectItemCaseSensitive(verdicts, "samples")->valueint);
}

/* Through the real vocabulary too: Qwen3 tokens, uniformly among the allowed ones. */
static void qwen_generation(void **state) {
    (void)state;
    char dir[1024];
    gt_source_path(dir, sizeof dir, "tests/fixtures/json-schemas");
    size_t n;
    char **files = sc_list(dir, &n);
    int checked = 0;
    uint64_t rng = 99;
    for (size_t i = 0; i < n; i += 5) {
        char path[2048], err[256];
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        char *text = gt_read_file(path, NULL);
        cJSON *fx = cJSON_Parse(text);
        free(text);
        if (cJSON_GetObjectItemCaseSensitive(fx, "error") == NULL) {
            sy_grammar *g = schema_grammar(cJSON_GetObjectItemCaseSensitive(fx, "schema"), SY_SCHEMA_WS_COMPACT, err,
                                           sizeof err);
            assert_non_null(g);
            sy_grammar_state *st = sy_grammar_state_create(g, qwen_v->v, NULL, err, sizeof err);
            gt_sample s = gt_generate(st, qwen_v, &rng, 200, 400, 1.0);
            if (s.error) fail_msg("%s: %s", files[i], s.msg);
            if (s.ended) {
                cJSON *doc = cJSON_ParseWithLength(s.text, s.len);
                if (doc == NULL) fail_msg("%s: not JSON: %s", files[i], s.text);
                cJSON_Delete(doc);
                assert_true(accepts(g, s.text));
                checked++;
            }
            free(s.text);
            sy_grammar_state_free(st);
            sy_grammar_free(g);
        }
        cJSON_Delete(fx);
    }
    for (size_t i = 0; i < n; i++) free(files[i]);
    free(files);
    assert_true(checked >= 20);
}

static void json_object_mode(void **state) {
    (void)state;
    char *gbnf = NULL, err[256];
    sy_schema_options o = sy_schema_defaults();
    assert_int_equal(sy_json_object_gbnf(&o, &gbnf, err, sizeof err), 0);
    sy_grammar *g = sy_grammar_compile(gbnf, strlen(gbnf), NULL, err, sizeof err);
    assert_non_null(g);
    free(gbnf);
    assert_true(accepts(g, "{\"a\":[1,{\"b\":null}],\"c\":\"d\"}"));
    assert_true(accepts(g, "{}"));
    assert_false(accepts(g, "[]"));
    assert_false(accepts(g, "\"s\""));
    assert_false(accepts(g, "{\"a\":1} "));
    uint64_t rng = 5;
    int ended = 0;
    for (int k = 0; k < 20; k++) {
        sy_grammar_state *st = sy_grammar_state_create(g, qwen_v->v, NULL, err, sizeof err);
        gt_sample s = gt_generate(st, qwen_v, &rng, 150, 400, 1.0);
        assert_int_equal(s.error, 0);
        if (s.ended) {
            cJSON *doc = cJSON_ParseWithLength(s.text, s.len);
            if (doc == NULL || !cJSON_IsObject(doc)) fail_msg("not a JSON object: %s", s.text);
            cJSON_Delete(doc);
            ended++;
        }
        free(s.text);
        sy_grammar_state_free(st);
    }
    assert_true(ended >= 5);
    sy_grammar_free(g);
}

static void cache(void **state) {
    (void)state;
    char err[256];
    sy_grammar_cache *c = sy_grammar_cache_create(2);
    const char *a = "{\"type\":\"integer\",\"maximum\":5}", *b = "{\"type\":\"string\"}", *d = "{\"type\":\"null\"}";
    sy_grammar *g1 = sy_grammar_cache_schema(c, a, strlen(a), NULL, err, sizeof err);
    sy_grammar *g2 = sy_grammar_cache_schema(c, a, strlen(a), NULL, err, sizeof err);
    assert_non_null(g1);
    assert_ptr_equal(g1, g2);
    sy_schema_options flex = sy_schema_defaults();
    flex.whitespace = SY_SCHEMA_WS_FLEXIBLE;
    sy_grammar *g3 = sy_grammar_cache_schema(c, a, strlen(a), &flex, err, sizeof err); /* other options */
    assert_ptr_not_equal(g1, g3);
    uint64_t hits, misses;
    sy_grammar_cache_stats(c, &hits, &misses);
    assert_int_equal(hits, 1);
    assert_int_equal(misses, 2);
    sy_grammar *g4 = sy_grammar_cache_schema(c, b, strlen(b), NULL, err, sizeof err); /* evicts a/flex's LRU */
    sy_grammar *g5 = sy_grammar_cache_schema(c, d, strlen(d), NULL, err, sizeof err);
    assert_non_null(g4);
    assert_non_null(g5);
    /* errors are reported and not cached */
    assert_null(sy_grammar_cache_schema(c, "{\"not\":{}}", 10, NULL, err, sizeof err));
    assert_non_null(strstr(err, "'not'"));
    assert_null(sy_grammar_cache_schema(c, "{bad json", 9, NULL, err, sizeof err));
    assert_non_null(strstr(err, "not valid JSON"));
    sy_grammar *o1 = sy_grammar_cache_schema(c, NULL, 0, NULL, err, sizeof err); /* any JSON object */
    assert_non_null(o1);
    sy_grammar *gb = sy_grammar_cache_gbnf(c, "root ::= \"x\"", 12, err, sizeof err);
    assert_non_null(gb);
    assert_null(sy_grammar_cache_gbnf(c, "root ::= (", 10, err, sizeof err));
    /* the grammars outlive the cache; a grammar still works after its entry was evicted */
    sy_grammar_cache_free(c);
    assert_true(accepts(g1, "5"));
    assert_false(accepts(g1, "6"));
    assert_true(accepts(o1, "{}"));
    assert_true(accepts(gb, "x"));
    sy_grammar *all[] = {g1, g2, g3, g4, g5, o1, gb};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) sy_grammar_free(all[i]);
}

/* A few shapes checked directly against the generated GBNF. */
static void grammar_text(void **state) {
    (void)state;
    char *gbnf = NULL, err[256];
    cJSON *s = cJSON_Parse("{\"type\":\"integer\",\"minimum\":0,\"maximum\":150}");
    assert_int_equal(sy_json_schema_to_gbnf(s, NULL, &gbnf, err, sizeof err), 0);
    assert_non_null(strstr(gbnf, "root ::= "));
    assert_non_null(strstr(gbnf, "space ::= \"\""));
    sy_grammar *g = sy_grammar_compile(gbnf, strlen(gbnf), NULL, err, sizeof err);
    assert_non_null(g);
    for (int i = -20; i <= 200; i++) { /* exactly the range, canonical spelling only */
        char t[16];
        snprintf(t, sizeof t, "%d", i);
        assert_int_equal(accepts(g, t), i >= 0 && i <= 150);
        snprintf(t, sizeof t, "0%d", i);
        assert_false(accepts(g, t));
    }
    sy_grammar_free(g);
    free(gbnf);
    cJSON_Delete(s);
    /* every integer range with small bounds is exact */
    for (int lo = -25; lo <= 25; lo += 7)
        for (int hi = lo; hi <= 130; hi += 11) {
            char js[128];
            snprintf(js, sizeof js, "{\"type\":\"integer\",\"minimum\":%d,\"maximum\":%d}", lo, hi);
            s = cJSON_Parse(js);
            assert_int_equal(sy_json_schema_to_gbnf(s, NULL, &gbnf, err, sizeof err), 0);
            g = sy_grammar_compile(gbnf, strlen(gbnf), NULL, err, sizeof err);
            assert_non_null(g);
            for (int i = lo - 12; i <= hi + 12; i++) {
                char t[16];
                snprintf(t, sizeof t, "%d", i);
                if (accepts(g, t) != (i >= lo && i <= hi)) fail_msg("[%d,%d]: %d", lo, hi, i);
            }
            sy_grammar_free(g);
            free(gbnf);
            cJSON_Delete(s);
        }
    /* text that is not UTF-8 cannot become a grammar literal */
    cJSON *bad = cJSON_CreateObject();
    cJSON *en = cJSON_AddArrayToObject(bad, "enum");
    cJSON_AddItemToArray(en, cJSON_CreateString("\xff\xfe"));
    assert_true(sy_json_schema_to_gbnf(bad, NULL, &gbnf, err, sizeof err) < 0);
    assert_non_null(strstr(err, "UTF-8"));
    cJSON_Delete(bad);
    bad = cJSON_CreateObject();
    cJSON_AddStringToObject(bad, "const", "fix\xd7" "ed");
    assert_true(sy_json_schema_to_gbnf(bad, NULL, &gbnf, err, sizeof err) < 0);
    assert_null(gbnf);
    cJSON_Delete(bad);
    /* null and bad arguments */
    assert_int_equal(sy_json_schema_to_gbnf(NULL, NULL, &gbnf, err, sizeof err) < 0, 1);
    assert_null(gbnf);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(grammar_text),
        cmocka_unit_test(cache),
        cmocka_unit_test(json_object_mode),
        cmocka_unit_test(corpus),
        cmocka_unit_test(qwen_generation),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
