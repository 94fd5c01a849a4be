/*
 * The Jinja chat-template engine against jinja2: every template of tests/fixtures/chat-templates/templates times
 * every conversation of conversations.json, rendered and compared byte for byte with what
 * tools/oracle/chat_template_fixtures.py got from transformers; where jinja2 raised, we must refuse too, and a
 * template's raise_exception message must be ours word for word. Plus the engine's own rules: whitespace control,
 * scoping, the sandbox, the limits, errors with their line.
 */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <cjson/cJSON.h>

#include "base/buf.h"
#include "chat/chat_jinja.h"
#include "chat/chat_template.h"

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) return NULL;
    sy_buf b;
    sy_buf_init(&b);
    bool ok = sy_buf_read(&b, f, (size_t)64 << 20);
    fclose(f);
    if (!ok) {
        sy_buf_free(&b);
        return NULL;
    }
    if (len) *len = b.len;
    return sy_buf_take(&b);
}

static const char *fixture_dir(char *buf, size_t size) {
    const char *src = getenv("SY_SOURCE_DIR");
    snprintf(buf, size, "%s/tests/fixtures/chat-templates", src ? src : ".");
    return buf;
}

static int cmp_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void all_templates_match_jinja2(void **state) {
    (void)state;
    char dir[1024], path[2048];
    fixture_dir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/conversations.json", dir);
    char *conv_text = read_file(path, NULL);
    assert_non_null(conv_text);
    cJSON *conv = cJSON_Parse(conv_text);
    free(conv_text);
    assert_non_null(conv);
    const cJSON *now = cJSON_GetObjectItemCaseSensitive(conv, "now_unix");
    const cJSON *convs = cJSON_GetObjectItemCaseSensitive(conv, "conversations");
    assert_true(cJSON_IsNumber(now) && cJSON_IsArray(convs));
    sy_chat_jinja_options opt = {.now_set = true, .now_unix = (int64_t)now->valuedouble};

    snprintf(path, sizeof path, "%s/templates", dir);
    DIR *d = opendir(path);
    assert_non_null(d);
    char *names[256];
    size_t n_names = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && n_names < 256) {
        size_t n = strlen(e->d_name);
        if (n > 6 && strcmp(e->d_name + n - 6, ".jinja") == 0) names[n_names++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, n_names, sizeof *names, cmp_names);
    assert_int_equal(n_names, 55);

    size_t pairs = 0, same_text = 0, same_error = 0, mismatched = 0;
    for (size_t t = 0; t < n_names; t++) {
        snprintf(path, sizeof path, "%s/templates/%s", dir, names[t]);
        size_t src_len = 0;
        char *src = read_file(path, &src_len);
        assert_non_null(src);
        char stem[512];
        snprintf(stem, sizeof stem, "%.*s", (int)(strlen(names[t]) - 6), names[t]);
        snprintf(path, sizeof path, "%s/expected/%s.json", dir, stem);
        char *exp_text = read_file(path, NULL);
        assert_non_null(exp_text);
        cJSON *expected = cJSON_Parse(exp_text);
        free(exp_text);
        assert_non_null(expected);
        char err[2048] = "";
        sy_chat_jinja *tpl = sy_chat_jinja_compile(src, src_len, err, sizeof err);
        if (tpl == NULL) fprintf(stderr, "%s: does not compile: %s\n", names[t], err);
        const cJSON *c;
        cJSON_ArrayForEach(c, convs) {
            const char *cname = cJSON_GetObjectItemCaseSensitive(c, "name")->valuestring;
            const cJSON *req = cJSON_GetObjectItemCaseSensitive(c, "request");
            const cJSON *want = cJSON_GetObjectItemCaseSensitive(expected, cname);
            assert_non_null(want);
            const cJSON *want_text = cJSON_GetObjectItemCaseSensitive(want, "text");
            const cJSON *want_err = cJSON_GetObjectItemCaseSensitive(want, "error");
            const cJSON *kind = cJSON_GetObjectItemCaseSensitive(want, "kind");
            pairs++;
            size_t len = 0;
            err[0] = '\0';
            char *got = tpl ? sy_chat_jinja_apply(tpl, req, &opt, &len, err, sizeof err) : NULL;
            if (cJSON_IsString(want_text)) {
                size_t wl = strlen(want_text->valuestring);
                if (got != NULL && len == wl && memcmp(got, want_text->valuestring, wl) == 0) {
                    same_text++;
                } else {
                    mismatched++;
                    if (got == NULL) {
                        fprintf(stderr, "MISMATCH %s / %s: we fail: %s\n", stem, cname, err);
                    } else {
                        size_t k = 0;
                        while (k < len && k < wl && got[k] == want_text->valuestring[k]) k++;
                        size_t from = k > 40 ? k - 40 : 0;
                        fprintf(stderr, "MISMATCH %s / %s at byte %zu (ours %zu bytes, jinja2 %zu)\n  ours:   %.*s\n  jinja2: %.*s\n",
                                stem, cname, k, len, wl, (int)(len - from > 120 ? 120 : len - from), got + from,
                                (int)(wl - from > 120 ? 120 : wl - from), want_text->valuestring + from);
                    }
                }
            } else {
                assert_true(cJSON_IsString(want_err) && cJSON_IsString(kind));
                bool ok = got == NULL;
                if (ok && strcmp(kind->valuestring, "TemplateError") == 0) {
                    /* raise_exception: our message after "line N: " is the template's own */
                    const char *msg = strstr(err, ": ");
                    ok = msg != NULL && strcmp(msg + 2, want_err->valuestring) == 0;
                }
                if (ok) same_error++;
                else {
                    mismatched++;
                    fprintf(stderr, "MISMATCH %s / %s: jinja2 raises %s: %s; we %s %s\n", stem, cname, kind->valuestring,
                            want_err->valuestring, got ? "render" : "fail with", got ? "" : err);
                }
            }
            free(got);
        }
        sy_chat_jinja_free(tpl);
        cJSON_Delete(expected);
        free(src);
        free(names[t]);
    }
    cJSON_Delete(conv);
    fprintf(stderr, "chat templates: %zu pairs, %zu rendered identically, %zu refused as jinja2 does, %zu mismatched\n",
            pairs, same_text, same_error, mismatched);
    assert_int_equal(mismatched, 0);
}

/* ---- the engine's own rules, each checked against what jinja2 (configured as transformers does) gives ---- */

static char *render(const char *tpl, const char *request_json, char *err, size_t err_size) {
    cJSON *req = cJSON_Parse(request_json ? request_json : "{\"messages\": []}");
    assert_non_null(req);
    size_t len;
    sy_chat_jinja_options opt = {.now_set = true, .now_unix = 1772874300};
    char *out = sy_chat_jinja_render(tpl, strlen(tpl), req, &opt, &len, err, err_size);
    cJSON_Delete(req);
    return out;
}

static void expect(const char *tpl, const char *request_json, const char *want) {
    char err[1024] = "";
    char *got = render(tpl, request_json, err, sizeof err);
    if (got == NULL) fail_msg("template %s failed: %s", tpl, err);
    if (strcmp(got, want) != 0) fail_msg("template %s\n got: [%s]\nwant: [%s]", tpl, got, want);
    free(got);
}

static void expect_error(const char *tpl, const char *request_json, const char *want_substring) {
    char err[1024] = "";
    char *got = render(tpl, request_json, err, sizeof err);
    if (got != NULL) fail_msg("template %s rendered [%s], expected an error with '%s'", tpl, got, want_substring);
    if (strstr(err, want_substring) == NULL) fail_msg("template %s: error [%s] lacks '%s'", tpl, err, want_substring);
}

static void whitespace_control(void **state) {
    (void)state;
    /* expected values from jinja2 3.1.6, trim_blocks and lstrip_blocks on */
    expect("a\n  {% if true %}\nb\n  {% endif %}\nc", NULL, "a\nb\nc");
    expect("a  {{- 'x' -}}  b", NULL, "axb");
    expect("a\n  {%+ if true %}x{% endif %}", NULL, "a\n  x");
    expect("{% if true +%}\nx{% endif %}", NULL, "\nx");
    expect("x {# c #}\ny", NULL, "x y");
    expect("{% raw %}{{ not parsed }}{% endraw %}", NULL, "{{ not parsed }}");
    expect("line\n", NULL, "line");
    expect("a\r\nb", NULL, "a\nb");
    expect("{{ 'x' }}\n{{ 'y' }}", NULL, "x\ny");
}

static void expressions(void **state) {
    (void)state;
    expect("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % -3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 1 ~ 2 }}", NULL, "3 -4 -2 3.5 1024 12");
    expect("{{ [1, 'a', none, true, 1.5] }} {{ {'k': [1]} }} {{ (1,) }}", NULL, "[1, 'a', None, True, 1.5] {'k': [1]} (1,)");
    expect("{{ 'abcdef'[1:4] }}{{ 'abc'[::-1] }}{{ [1,2,3][-1] }}", NULL, "bcdcba3");
    expect("{{ 'a' if false }}|{{ 'b' if false else 'c' }}", NULL, "|c");
    expect("{{ 1 < 2 < 3 }} {{ 'b' in 'abc' }} {{ 3 not in [1, 2] }}", NULL, "True True True");
    expect("{{ 1e20 }} {{ 0.1 + 0.2 }} {{ 1e-5 }} {{ 100.0 }}", NULL, "1e+20 0.30000000000000004 1e-05 100.0");
    expect("{{ undefined_thing }}|{{ undefined_thing is defined }}|{{ (undefined_thing or 'x') }}", NULL, "|False|x");
    expect_error("{{ undefined_thing.attr }}", NULL, "'undefined_thing' is undefined");
    expect_error("{{ 1 + 'a' }}", NULL, "unsupported operand");
}

static void statements(void **state) {
    (void)state;
    expect("{% for x in [1,2,3] if x != 2 %}{{ loop.index }}{{ x }}{% if loop.last %}.{% endif %}{% endfor %}", NULL, "1123.");
    expect("{% for x in [] %}a{% else %}empty{% endfor %}", NULL, "empty");
    expect("{% for x in [1,2,3,4] %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}{{ x }}{% endfor %}",
           NULL, "13");
    expect("{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{% endfor %}{{ x }}", NULL, "1");
    expect("{% set ns = namespace(x=1) %}{% for i in [1] %}{% set ns.x = 2 %}{% endfor %}{{ ns.x }}", NULL, "2");
    expect("{% set t %}a{{ 1 }}b{% endset %}{{ t }}", NULL, "a1b");
    expect("{% macro m(a, b='d') %}{{ a }}-{{ b }}{% endmacro %}{{ m(1) }} {{ m(1, b=2) }}", NULL, "1-d 1-2");
    expect("{% macro w() %}[{{ caller() }}]{% endmacro %}{% call w() %}in{% endcall %}", NULL, "[in]");
    expect("{% filter upper %}abc{% endfilter %}", NULL, "ABC");
    expect("{% generation %}gen{% endgeneration %}", NULL, "gen");
    expect("{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }}{{ loop.cycle('x', 'y') }}{% endfor %}", NULL, "3x7y");
    expect("{% for x in 'ab' %}{{ loop.previtem is defined }}{{ loop.nextitem | default('-') }}{% endfor %}", NULL, "FalsebTrue-");
}

static void filters_and_methods(void **state) {
    (void)state;
    expect("{{ {'b': 'é', 'a': [1, 2.5, none]} | tojson }}", NULL, "{\"b\": \"é\", \"a\": [1, 2.5, null]}");
    expect("{{ {'b': 1, 'a': 2} | tojson(indent=2, sort_keys=true) }}", NULL, "{\n  \"a\": 2,\n  \"b\": 1\n}");
    expect("{{ '  x  ' | trim }}|{{ 'a,b' .split(',') }}|{{ 'Hello' | upper }}|{{ [3,1,2] | sort | join('') }}", NULL,
           "x|['a', 'b']|HELLO|123");
    expect("{{ [{'n': 'a'}, {'n': 'b'}] | map(attribute='n') | join(',') }}", NULL, "a,b");
    expect("{{ [{'r': 'u'}, {'r': 's'}] | selectattr('r', 'equalto', 's') | list | length }}", NULL, "1");
    expect("{{ 'a\nb' | indent(2) }}|{{ 'a\nb' | indent(2, first=true) }}", NULL, "a\n  b|  a\n  b");
    expect("{{ '{} and {}'.format(1, 'x') }}|{{ 'abc'.startswith(('x', 'a')) }}", NULL, "1 and x|True");
    expect("{{ {'a': 1}.get('b', 'none') }}|{{ {'a': 1} | items | list }}", NULL, "none|[('a', 1)]");
    expect("{{ strftime_now('%Y-%m-%d') }}", NULL, "2026-03-07");
    expect("{{ messages[0]['content'] }}", "{\"messages\": [{\"role\": \"user\", \"content\": \"{{ not a template }}\"}]}",
           "{{ not a template }}");
    expect("{{ enable_thinking }}{{ tools }}", "{\"messages\": [], \"chat_template_kwargs\": {\"enable_thinking\": false}}",
           "FalseNone");
}

static void sandbox_and_limits(void **state) {
    (void)state;
    expect_error("{% set l = [] %}{{ l.append(1) }}", NULL, "access to attribute 'append' of 'list' object is unsafe.");
    expect_error("{{ ''.__class__ }}{{ ''.__class__() }}", NULL, "unsafe");
    expect_error("{% set ns = namespace() %}{% set ns._x = 1 %}", NULL, "underscore-prefixed");
    expect_error("{{ raise_exception('Bad roles!') }}", NULL, "line 1: Bad roles!");
    expect_error("\n\n{% if %}", NULL, "line 3");
    expect_error("{% for x in range(1000000) %}{% endfor %}", NULL, "Range too big");
    expect_error("{% macro r(n) %}{{ r(n) }}{% endmacro %}{{ r(1) }}", NULL, "nest deeper");
    expect_error("{% set s = 'xxxxxxxxxxxxxxxx' %}{% for i in range(40) %}{% set s = s ~ s %}{% endfor %}{{ s }}", NULL,
                 "exceeds");
    expect_error("{% set s = range(100000) %}{% for i in s %}{% for j in s %}{% endfor %}{% endfor %}", NULL, "steps");
    expect_error("{{ x | no_such_filter }}", NULL, "No filter named 'no_such_filter'");
    /* values nested deeper than any stack: printing and comparing them fail cleanly or stop */
    expect_error("{% set ns = namespace(x=[]) %}{% for i in range(60000) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x }}",
                 NULL, "nests too deeply");
    expect("{% set ns = namespace(x=[]) %}{% for i in range(60000) %}{% set ns.x = [ns.x] %}{% endfor %}"
           "{{ ns.x == ns.x }}", NULL, "True");
    expect_error("{% for x in [1] %}", NULL, "endfor");
}

/* SmolLM2-135M-Instruct's GGUF template (tokenizer.chat_template): through Jinja it gives what the built-in
 * ChatML renderer gave for it (jinja2 gives the same text: checked with tools/oracle at the time of writing). */
static const char SMOLLM2_TEMPLATE[] =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n"
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' "
    "+ message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt "
    "%}{{ '<|im_start|>assistant\n' }}{% endif %}";

static void smollm2_jinja_equals_builtin_chatml(void **state) {
    (void)state;
    sy_chat_template t;
    char err[512];
    assert_int_equal(sy_chat_template_init(&t, NULL, SMOLLM2_TEMPLATE, "<|im_start|>", "<|im_end|>", err, sizeof err), 0);
    assert_int_equal(t.format, SY_CHAT_FORMAT_CHATML);
    const char *convs[] = {
        "[{\"role\": \"user\", \"content\": \"Hi\"}]",
        "[{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": \"Hi\"}]",
        "[{\"role\": \"user\", \"content\": \"Hi\"}, {\"role\": \"assistant\", \"content\": \"Hello\"}, "
        "{\"role\": \"user\", \"content\": \"Bye é\"}]",
    };
    for (size_t c = 0; c < sizeof convs / sizeof convs[0]; c++) {
        for (int agp = 0; agp < 2; agp++) {
            cJSON *msgs = cJSON_Parse(convs[c]);
            assert_non_null(msgs);
            sy_chat_message items[8];
            size_t n = 0;
            const cJSON *m;
            cJSON_ArrayForEach(m, msgs) {
                const char *content = cJSON_GetObjectItemCaseSensitive(m, "content")->valuestring;
                items[n++] = (sy_chat_message){cJSON_GetObjectItemCaseSensitive(m, "role")->valuestring, content,
                                               strlen(content)};
            }
            size_t blen = 0, jlen = 0;
            char *builtin = sy_chat_render(&t, items, n, agp, &blen, err, sizeof err);
            assert_non_null(builtin);
            cJSON *req = cJSON_CreateObject();
            cJSON_AddItemToObject(req, "messages", msgs);
            cJSON_AddBoolToObject(req, "add_generation_prompt", agp);
            char *jinja = sy_chat_jinja_render(SMOLLM2_TEMPLATE, strlen(SMOLLM2_TEMPLATE), req, NULL, &jlen, err, sizeof err);
            assert_non_null(jinja);
            assert_string_equal(jinja, builtin);
            free(builtin);
            free(jinja);
            cJSON_Delete(req);
        }
    }
    sy_chat_template_free(&t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(all_templates_match_jinja2),
        cmocka_unit_test(whitespace_control),
        cmocka_unit_test(expressions),
        cmocka_unit_test(statements),
        cmocka_unit_test(filters_and_methods),
        cmocka_unit_test(sandbox_and_limits),
        cmocka_unit_test(smollm2_jinja_equals_builtin_chatml),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
