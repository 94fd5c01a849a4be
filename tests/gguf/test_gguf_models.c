/* Tiny llama / qwen2 / qwen3 models (widths multiples of 256) against llama.cpp on the same files
 * (tests/fixtures/gguf/tiny-models.json, written by tools/oracle/gguf_model_fixtures.py).
 *
 * For each architecture:
 *   1. the F16 model is rebuilt from its committed metadata (tiny-<arch>-meta.gguf) and the oracle's weight
 *      generator, with the GGUF writer; its tensors must hash to the oracle's;
 *   2. `switchyard quantize` turns it into F32, Q8_0, Q4_K_M, Q5_K_M and Q6_K files whose tensors must hash to those
 *      of llama.cpp's llama_model_quantize output: the same types per tensor, the same bytes;
 *   3. each of the six files runs through the gguf-quant plugin: the prompts tokenize to llama.cpp's ids; F32, F16
 *      and Q8_0 continue greedily with llama.cpp's 32 tokens exactly (the oracle chose seeds whose greedy margins
 *      are all >= 0.02); every file agrees with llama.cpp's top-1 token at >= 98% of the positions of
 *      prompt + continuation (teacher-forced, all logits of one batch).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "gguf.h"
#include "gguf_writer.h"
#include "quantizer.h"
#include "sy_kernels.h"

#include "gguf_engine_util.h"
#include "gguf_tiny_model.h"

static cJSON *fixture;
static gt_engine engine;
static char tmpdir[256];

static int setup(void **state) {
    (void)state;
    return gt_suite_setup(&fixture, "tests/fixtures/gguf/tiny-models.json", tmpdir, sizeof tmpdir, "gguf-models", &engine);
}

static int teardown(void **state) {
    (void)state;
    gt_suite_teardown(fixture, tmpdir, &engine);
    return 0;
}

static void run_quantize(const char *in, const char *out, const char *type) {
    char *argv[] = {"quantize", "--no-progress", "--threads", "2", (char *)in, (char *)out, (char *)type, NULL};
    int rc = sy_quantize_main(7, argv);
    if (rc != 0) fail_msg("switchyard quantize %s %s %s: exit %d", in, out, type, rc);
}

/* Runs one file against the oracle's records for it (see gt_compare_with_llama). */
static void check_file(const char *arch, const char *type, const char *path, const cJSON *rec, bool exact) {
    sy_model *m = gt_load(&engine, path, "2");
    char label[64];
    snprintf(label, sizeof label, "%-6s %-7s", arch, type);
    gt_compare_with_llama(&engine, m, cJSON_GetObjectItem(rec, "prompts"), exact, label);
    engine.api->unload(m);
}

static void check_arch(const char *arch) {
    const cJSON *model = cJSON_GetObjectItem(cJSON_GetObjectItem(fixture, "models"), arch);
    assert_non_null(model);
    const cJSON *files = cJSON_GetObjectItem(model, "files");
    char f16[512], hash[17];
    snprintf(f16, sizeof f16, "%s/tiny-%s-F16.gguf", tmpdir, arch);
    gt_build_tiny(arch, model, f16, SY_DTYPE_F16);
    const cJSON *f16_rec = cJSON_GetObjectItem(files, "F16");
    assert_string_equal(gt_tensor_hash(f16, hash), cJSON_GetObjectItem(f16_rec, "tensor_hash")->valuestring);
    static const char *const types[] = {"F16", "F32", "Q8_0", "Q4_K_M", "Q5_K_M", "Q6_K"};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        const cJSON *rec = cJSON_GetObjectItem(files, types[i]);
        char path[512];
        snprintf(path, sizeof path, "%s/tiny-%s-%s.gguf", tmpdir, arch, types[i]);
        if (i > 0) {
            run_quantize(f16, path, types[i]);
            const char *want = cJSON_GetObjectItem(rec, "tensor_hash")->valuestring;
            if (strcmp(gt_tensor_hash(path, hash), want) != 0)
                fail_msg("%s %s: switchyard quantize's tensors hash to %s, llama.cpp's to %s", arch, types[i], hash,
                         want);
        }
        bool exact = i < 2; /* F16, F32 */
        check_file(arch, types[i], path, rec, exact);
        if (i > 0) unlink(path);
    }
    unlink(f16);
}

static void test_tiny_llama(void **state) {
    (void)state;
    check_arch("llama");
}

static void test_tiny_qwen2(void **state) {
    (void)state;
    check_arch("qwen2");
}

static void test_tiny_qwen3(void **state) {
    (void)state;
    check_arch("qwen3");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tiny_llama),
        cmocka_unit_test(test_tiny_qwen2),
        cmocka_unit_test(test_tiny_qwen3),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
