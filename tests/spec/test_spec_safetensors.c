/*
 * Speculative decoding on the qwen-cpu-mmap engine: greedy output with n-gram drafting, with the model as its own
 * drafter and with another checkpoint of the same tokenizer as drafter is token for token the output without
 * speculation, 200 prompts per checkpoint of tests/fixtures/hf (random weights, one tokenizer.json for all):
 *
 *   qwen2-tied-f32 <-> qwen2-untied-bf16,  qwen3-f32 <-> qwen3-tied-bf16,  llama-gqa-f32-sharded <- qwen2-tied-f32
 *
 * (lfm2-f32 is not a model type of this engine.)
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "spec_engines.h"
#include "base/util.h"

#define N_PROMPTS 200
#define MAX_TOKENS 24

static spec_env env;

enum { QWEN2_TIED_F32, QWEN2_UNTIED_BF16, QWEN3_F32, QWEN3_TIED_BF16, LLAMA_GQA, N_MODELS };
static const char *const dirs[N_MODELS] = {"qwen2-tied-f32", "qwen2-untied-bf16", "qwen3-f32", "qwen3-tied-bf16",
                                           "llama-gqa-f32-sharded"};
static sy_loaded_model models[N_MODELS];

static int group_setup(void **state) {
    (void)state;
    static const char *const plugins[] = {"qwen-cpu-mmap", "spec-drafter"};
    return spec_env_open_plugins(&env, plugins, 2);
}

static int group_teardown(void **state) {
    (void)state;
    for (int i = 0; i < N_MODELS; i++)
        if (models[i].model != NULL) sy_loaded_model_close(&models[i]);
    spec_env_close(&env);
    return 0;
}

static const sy_loaded_model *model(int i) {
    if (models[i].model == NULL) {
        const char *src = getenv("SY_SOURCE_DIR");
        char path[1024];
        snprintf(path, sizeof path, "%s/tests/fixtures/hf/%s", src != NULL ? src : ".", dirs[i]);
        static const char *const opts[] = {"threads=1", "ctx_size=256"};
        spec_open_model_with(&env, "qwen-cpu-mmap", path, opts, 2, &models[i]);
        assert_int_equal(models[i].info.n_vocab, 512);
    }
    return &models[i];
}

static void check(int target, int other) {
    se_model_case c = {dirs[target], model(target), model(other), false, se_prompt_count(N_PROMPTS), MAX_TOKENS};
    se_check_model(&env, &c);
}

static void qwen2_tied_f32(void **state) {
    (void)state;
    check(QWEN2_TIED_F32, QWEN2_UNTIED_BF16);
}

static void qwen2_untied_bf16(void **state) {
    (void)state;
    check(QWEN2_UNTIED_BF16, QWEN2_TIED_F32);
}

static void qwen3_f32(void **state) {
    (void)state;
    check(QWEN3_F32, QWEN3_TIED_BF16);
}

static void qwen3_tied_bf16(void **state) {
    (void)state;
    check(QWEN3_TIED_BF16, QWEN3_F32);
}

static void llama_gqa_f32_sharded(void **state) {
    (void)state;
    check(LLAMA_GQA, QWEN2_TIED_F32);
}

/* argv[1]: a cmocka test-name pattern (one model per CTest test). */
int main(int argc, char **argv) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(qwen2_tied_f32), cmocka_unit_test(qwen2_untied_bf16), cmocka_unit_test(qwen3_f32),
        cmocka_unit_test(qwen3_tied_bf16), cmocka_unit_test(llama_gqa_f32_sharded),
    };
    if (argc > 1) cmocka_set_test_filter(argv[1]);
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
