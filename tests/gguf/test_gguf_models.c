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

/* FNV-1a 64 over each tensor's name, NUL, type, n_dims, dims and data, in file order (as the oracle hashes). */
static char *tensor_hash(const char *path, char out[17]) {
    char err[512];
    sy_gguf *g = sy_gguf_open(path, err, sizeof err);
    if (g == NULL) fail_msg("%s", err);
    uint64_t h = 0xcbf29ce484222325ull;
    for (uint64_t i = 0; i < sy_gguf_tensor_count(g); i++) {
        const sy_gguf_tensor *t = sy_gguf_tensor_at(g, i);
        uint8_t head[8 + 8 * SY_GGUF_MAX_DIMS];
        size_t n = 0;
        for (int b = 0; b < 4; b++) head[n++] = (uint8_t)(t->type >> (8 * b));
        for (int b = 0; b < 4; b++) head[n++] = (uint8_t)(t->n_dims >> (8 * b));
        for (uint32_t d = 0; d < t->n_dims; d++)
            for (int b = 0; b < 8; b++) head[n++] = (uint8_t)(t->dims[d] >> (8 * b));
        const uint8_t *name = (const uint8_t *)t->name;
        for (size_t k = 0; k <= strlen(t->name); k++) h = (h ^ name[k]) * 0x100000001b3ull; /* NUL included */
        for (size_t k = 0; k < n; k++) h = (h ^ head[k]) * 0x100000001b3ull;
        const uint8_t *p = t->data;
        for (uint64_t k = 0; k < t->n_bytes; k++) h = (h ^ p[k]) * 0x100000001b3ull;
    }
    sy_gguf_close(g);
    snprintf(out, 17, "%016llx", (unsigned long long)h);
    return out;
}

/* The F16 model: the committed metadata, then the generator's tensors (see the oracle's docstring). */
static void build_f16(const char *arch, const cJSON *model, const char *path) {
    char meta_rel[128], meta[1024], err[512];
    snprintf(meta_rel, sizeof meta_rel, "tests/fixtures/gguf/tiny-%s-meta.gguf", arch);
    sy_gguf *g = sy_gguf_open(gt_source_path(meta, sizeof meta, meta_rel), err, sizeof err);
    if (g == NULL) fail_msg("%s", err);
    sy_gguf_writer *w = sy_gguf_writer_new(err, sizeof err);
    assert_non_null(w);
    for (uint64_t i = 0; i < sy_gguf_kv_count(g); i++)
        if (!sy_gguf_writer_copy_kv(w, g, i, err, sizeof err)) fail_msg("%s", err);
    sy_gguf_close(g);
    const cJSON *tensors = cJSON_GetObjectItem(model, "tensors");
    for (const cJSON *t = tensors->child; t; t = t->next) {
        uint64_t dims[4];
        uint32_t nd = 0;
        for (const cJSON *d = cJSON_GetObjectItem(t, "dims")->child; d && nd < 4; d = d->next)
            dims[nd++] = (uint64_t)d->valuedouble;
        bool matrix = strcmp(cJSON_GetObjectItem(t, "kind")->valuestring, "matrix") == 0;
        if (!sy_gguf_writer_add_tensor(w, cJSON_GetObjectItem(t, "name")->valuestring,
                                       matrix ? SY_DTYPE_F16 : SY_DTYPE_F32, nd, dims, err, sizeof err))
            fail_msg("%s", err);
    }
    if (!sy_gguf_writer_open(w, path, err, sizeof err)) fail_msg("%s", err);
    uint64_t state = (uint64_t)cJSON_GetObjectItem(model, "seed")->valuedouble;
    for (const cJSON *t = tensors->child; t; t = t->next) {
        size_t n = 1;
        for (const cJSON *d = cJSON_GetObjectItem(t, "dims")->child; d; d = d->next) n *= (size_t)d->valuedouble;
        const char *kind = cJSON_GetObjectItem(t, "kind")->valuestring;
        int shift = (int)cJSON_GetObjectItem(t, "shift")->valuedouble;
        bool matrix = strcmp(kind, "matrix") == 0;
        uint8_t *buf = gt_xmalloc(n * (matrix ? 2 : 4));
        for (size_t i = 0; i < n; i++) {
            uint64_t u = gt_splitmix64(&state) >> 40;
            if (matrix) {
                float v = (float)((int)(u % 4095) - 2047) * ldexpf(1.0f, -(shift + 6));
                uint16_t h = sy_f32_to_f16(v);
                buf[2 * i] = (uint8_t)h;
                buf[2 * i + 1] = (uint8_t)(h >> 8);
            } else {
                float v = (float)((int)(u % 257) - 128) / 1024.0f;
                if (strcmp(kind, "norm") == 0) v += 1.0f;
                memcpy(buf + 4 * i, &v, 4);
            }
        }
        if (!sy_gguf_writer_write(w, buf, n * (matrix ? 2 : 4), err, sizeof err)) fail_msg("%s", err);
        free(buf);
    }
    if (!sy_gguf_writer_commit(w, err, sizeof err)) fail_msg("%s", err);
    sy_gguf_writer_free(w);
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
    build_f16(arch, model, f16);
    const cJSON *f16_rec = cJSON_GetObjectItem(files, "F16");
    assert_string_equal(tensor_hash(f16, hash), cJSON_GetObjectItem(f16_rec, "tensor_hash")->valuestring);
    static const char *const types[] = {"F16", "F32", "Q8_0", "Q4_K_M", "Q5_K_M", "Q6_K"};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        const cJSON *rec = cJSON_GetObjectItem(files, types[i]);
        char path[512];
        snprintf(path, sizeof path, "%s/tiny-%s-%s.gguf", tmpdir, arch, types[i]);
        if (i > 0) {
            run_quantize(f16, path, types[i]);
            const char *want = cJSON_GetObjectItem(rec, "tensor_hash")->valuestring;
            if (strcmp(tensor_hash(path, hash), want) != 0)
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
