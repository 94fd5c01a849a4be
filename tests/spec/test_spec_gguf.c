/*
 * Speculative decoding on the gguf-quant engine: greedy output with n-gram drafting, with the model as its own
 * drafter and with another model of the same vocabulary as drafter is token for token the output without
 * speculation, 200 prompts per model through the scheduler:
 *
 *   stories260K (trained, F32, SentencePiece)      drafted by its own Q8_0 quantization
 *   tiny llama, qwen2, qwen3 (F16, random weights)  drafted by tiny qwen2, qwen3, llama
 *   tiny qwen3 Q4_K_M                               drafted by tiny qwen3 F16
 *   lfm2 F32 and Q8_0 (recurrent short-conv layers: rollback is limited to 16 tokens) drafted by each other
 *
 * The tiny llama/qwen2/qwen3 files are rebuilt from their committed metadata (tests/fixtures/gguf/tiny-*-meta.gguf)
 * and the weight generator of tools/oracle/gguf_model_fixtures.py (the seeds and shapes of tiny-models.json), and
 * quantized with `switchyard quantize`. A last check shows that the comparison can fail (a rule that accepts every
 * proposal). The argument, a cmocka test-name pattern, picks the models of one CTest test.
 */
#include <math.h>
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
#include "gguf_writer.h"
#include "quantizer.h"
#include "spec_engines.h"
#include "sy_kernels.h"
#include "base/util.h"

#define N_PROMPTS 200
#define MAX_TOKENS 24

static spec_env env;

static const char *source_dir(void) {
    const char *s = getenv("SY_SOURCE_DIR");
    return s != NULL ? s : ".";
}

static char *source_path(const char *rel) { return sy_path_join(source_dir(), rel); }

static char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) return NULL;
    char *buf = NULL;
    size_t len = 0, cap = 0, got;
    do {
        if (len + 65536 + 1 > cap) {
            cap = cap ? cap * 2 : 131072;
            buf = realloc(buf, cap);
            assert_non_null(buf);
        }
        got = fread(buf + len, 1, cap - len - 1, f);
        len += got;
    } while (got > 0);
    fclose(f);
    buf[len] = '\0';
    return buf;
}

static uint64_t splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* The oracle's F16 model of `arch`: the committed metadata, then each tensor of the fixture's list filled from the
 * model's seed (matrices: F16 multiples of 2^-(shift+6) in [-2047, 2047]; vectors: F32 (u % 257 - 128) / 1024, plus
 * one for norms). */
static char *build_tiny_f16(const cJSON *models, const char *arch) {
    const cJSON *model = cJSON_GetObjectItem(models, arch);
    assert_non_null(model);
    char rel[128], name[64], err[512];
    snprintf(rel, sizeof rel, "tests/fixtures/gguf/tiny-%s-meta.gguf", arch);
    char *meta = source_path(rel);
    sy_gguf *g = sy_gguf_open(meta, err, sizeof err);
    if (g == NULL) fail_msg("%s", err);
    free(meta);
    sy_gguf_writer *w = sy_gguf_writer_new(err, sizeof err);
    assert_non_null(w);
    for (uint64_t i = 0; i < sy_gguf_kv_count(g); i++)
        if (!sy_gguf_writer_copy_kv(w, g, i, err, sizeof err)) fail_msg("%s", err);
    sy_gguf_close(g);
    const cJSON *tensors = cJSON_GetObjectItem(model, "tensors");
    for (const cJSON *t = tensors->child; t != NULL; t = t->next) {
        uint64_t dims[4];
        uint32_t nd = 0;
        for (const cJSON *d = cJSON_GetObjectItem(t, "dims")->child; d != NULL && nd < 4; d = d->next)
            dims[nd++] = (uint64_t)d->valuedouble;
        bool matrix = strcmp(cJSON_GetObjectItem(t, "kind")->valuestring, "matrix") == 0;
        if (!sy_gguf_writer_add_tensor(w, cJSON_GetObjectItem(t, "name")->valuestring,
                                       matrix ? SY_DTYPE_F16 : SY_DTYPE_F32, nd, dims, err, sizeof err))
            fail_msg("%s", err);
    }
    snprintf(name, sizeof name, "tiny-%s-F16.gguf", arch);
    char *path = sy_path_join(env.dir, name);
    if (!sy_gguf_writer_open(w, path, err, sizeof err)) fail_msg("%s", err);
    uint64_t state = (uint64_t)cJSON_GetObjectItem(model, "seed")->valuedouble;
    for (const cJSON *t = tensors->child; t != NULL; t = t->next) {
        size_t n = 1;
        for (const cJSON *d = cJSON_GetObjectItem(t, "dims")->child; d != NULL; d = d->next)
            n *= (size_t)d->valuedouble;
        const char *kind = cJSON_GetObjectItem(t, "kind")->valuestring;
        int shift = (int)cJSON_GetObjectItem(t, "shift")->valuedouble;
        bool matrix = strcmp(kind, "matrix") == 0;
        uint8_t *buf = malloc(n * (matrix ? 2 : 4));
        assert_non_null(buf);
        for (size_t i = 0; i < n; i++) {
            uint64_t u = splitmix64(&state) >> 40;
            if (matrix) {
                uint16_t h = sy_f32_to_f16((float)((int)(u % 4095) - 2047) * ldexpf(1.0f, -(shift + 6)));
                buf[2 * i] = (uint8_t)h;
                buf[2 * i + 1] = (uint8_t)(h >> 8);
            } else {
                float v = (float)((int)(u % 257) - 128) / 1024.0f + (strcmp(kind, "norm") == 0 ? 1.0f : 0.0f);
                memcpy(buf + 4 * i, &v, 4);
            }
        }
        if (!sy_gguf_writer_write(w, buf, n * (matrix ? 2 : 4), err, sizeof err)) fail_msg("%s", err);
        free(buf);
    }
    if (!sy_gguf_writer_commit(w, err, sizeof err)) fail_msg("%s", err);
    sy_gguf_writer_free(w);
    return path;
}

static char *quantize(const char *in, const char *name, const char *type) {
    char *out = sy_path_join(env.dir, name);
    char *argv[] = {"quantize", "--no-progress", "--threads", "1", (char *)in, out, (char *)type, NULL};
    if (sy_quantize_main(7, argv) != 0) fail_msg("switchyard quantize %s %s %s failed", in, out, type);
    return out;
}

enum { STORIES, STORIES_Q8, LLAMA, QWEN2, QWEN3, QWEN3_Q4, LFM2_F32, LFM2_Q8, N_MODELS };
static char *paths[N_MODELS];
static sy_loaded_model models[N_MODELS];

static int group_setup(void **state) {
    (void)state;
    static const char *const plugins[] = {"gguf-quant", "spec-drafter"};
    return spec_env_open_plugins(&env, plugins, 2);
}

static int group_teardown(void **state) {
    (void)state;
    for (int i = 0; i < N_MODELS; i++) {
        if (models[i].model != NULL) sy_loaded_model_close(&models[i]);
        free(paths[i]);
    }
    spec_env_close(&env);
    return 0;
}

static char *tiny_f16(const char *arch) {
    char *json_path = source_path("tests/fixtures/gguf/tiny-models.json");
    char *text = read_text(json_path);
    if (text == NULL) fail_msg("cannot read %s", json_path);
    free(json_path);
    cJSON *fixture = cJSON_Parse(text);
    free(text);
    assert_non_null(fixture);
    char *path = build_tiny_f16(cJSON_GetObjectItem(fixture, "models"), arch);
    cJSON_Delete(fixture);
    return path;
}

/* The file of model i, made first where it is built from fixtures. */
static const char *path_of(int i) {
    if (paths[i] != NULL) return paths[i];
    switch (i) {
    case STORIES: paths[i] = source_path("tests/fixtures/stories260K/stories260K.gguf"); break;
    case STORIES_Q8: paths[i] = quantize(path_of(STORIES), "stories260K-Q8_0.gguf", "Q8_0"); break;
    case LLAMA: paths[i] = tiny_f16("llama"); break;
    case QWEN2: paths[i] = tiny_f16("qwen2"); break;
    case QWEN3: paths[i] = tiny_f16("qwen3"); break;
    case QWEN3_Q4: paths[i] = quantize(path_of(QWEN3), "tiny-qwen3-Q4_K_M.gguf", "Q4_K_M"); break;
    case LFM2_F32: paths[i] = source_path("tests/fixtures/lfm2/lfm2-f32.gguf"); break;
    case LFM2_Q8: paths[i] = source_path("tests/fixtures/lfm2/lfm2-q8_0.gguf"); break;
    default: fail_msg("no model %d", i);
    }
    return paths[i];
}

/* Loads model i once (one thread: these models are too small for two to pay; a context of 256: prompt and output
 * need at most 95). */
static const sy_loaded_model *model(int i) {
    if (models[i].model == NULL) {
        static const char *const opts[] = {"threads=1", "ctx_size=256"};
        spec_open_model_with(&env, "gguf-quant", path_of(i), opts, 2, &models[i]);
        assert_int_equal(models[i].info.n_vocab, 512);
    }
    return &models[i];
}

static void check(const char *label, int target, int other, bool recurrent) {
    se_model_case c = {label, model(target), other >= 0 ? model(other) : NULL, recurrent, se_prompt_count(N_PROMPTS),
                       MAX_TOKENS};
    se_check_model(&env, &c);
}

static void stories260K(void **state) {
    (void)state;
    check("stories260K F32", STORIES, STORIES_Q8, false);
}

static void tiny_llama(void **state) {
    (void)state;
    check("tiny llama F16", LLAMA, QWEN2, false);
}

static void tiny_qwen2(void **state) {
    (void)state;
    check("tiny qwen2 F16", QWEN2, QWEN3, false);
}

static void tiny_qwen3(void **state) {
    (void)state;
    check("tiny qwen3 F16", QWEN3, LLAMA, false);
}

static void tiny_qwen3_q4_k_m(void **state) {
    (void)state;
    check("tiny qwen3 Q4_K_M", QWEN3_Q4, QWEN3, false);
}

static void lfm2_f32(void **state) {
    (void)state;
    check("lfm2 F32", LFM2_F32, LFM2_Q8, true);
}

static void lfm2_q8_0(void **state) {
    (void)state;
    check("lfm2 Q8_0", LFM2_Q8, LFM2_F32, true);
}

/* The comparison can fail: a rule that accepts every proposal changes the output of most requests. */
static void wrong_rule_is_caught(void **state) {
    (void)state;
    const sy_loaded_model *lm = model(STORIES);
    se_workload w = se_make_workload(40, 17, lm->info.n_vocab, MAX_TOKENS);
    spec_batch *plain = se_run(lm, NULL, &w);
    sy_speculator *sp = se_open_spec_rule(&env, "ngram", NULL, lm->info.n_vocab, 8, 0.0,
                                          SY_SPEC_RULE_TEST_ALWAYS_ACCEPT);
    spec_batch *wrong = se_run(lm, sp, &w);
    size_t different = se_count_different(plain, wrong, w.n);
    printf("always accepting n-gram drafts changes %zu of %zu outputs\n", different, w.n);
    assert_true(different * 2 > w.n);
    spec_batch_free(wrong);
    sy_speculator_free(sp);
    spec_batch_free(plain);
    se_free_workload(&w);
}

/* argv[1]: a cmocka test-name pattern (one model per CTest test). */
int main(int argc, char **argv) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(stories260K), cmocka_unit_test(tiny_llama),        cmocka_unit_test(tiny_qwen2),
        cmocka_unit_test(tiny_qwen3),  cmocka_unit_test(tiny_qwen3_q4_k_m), cmocka_unit_test(lfm2_f32),
        cmocka_unit_test(lfm2_q8_0),   cmocka_unit_test(wrong_rule_is_caught),
    };
    if (argc > 1) cmocka_set_test_filter(argv[1]);
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
