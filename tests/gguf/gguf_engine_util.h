/* The gguf-quant plugin through its ABI, for the model tests of tests/gguf: dlopen, load, tokenize, logits of every
 * position, greedy continuation. Header-only, test use only; failures abort the test through cmocka. */
#ifndef SY_GGUF_ENGINE_UTIL_H
#define SY_GGUF_ENGINE_UTIL_H

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <switchyard/engine.h>

#include "gguf_test_util.h"

typedef struct gt_engine {
    void *handle;
    const sy_plugin_entry *entry;
    const sy_engine_api *api;
} gt_engine;

static inline void gt_host_log(sy_log_level level, const char *plugin, const char *message) {
    if (level <= SY_LOG_WARN) fprintf(stderr, "[%s] %s\n", plugin, message);
}

static const sy_host_api gt_host_api = {
    .struct_size = sizeof(sy_host_api),
    .abi_major = SY_ABI_VERSION_MAJOR,
    .abi_minor = SY_ABI_VERSION_MINOR,
    .host_version = "test",
    .log = gt_host_log,
};

/* 0 on success; the plugin is build/plugins/gguf-quant.so. */
static inline int gt_engine_open(gt_engine *e) {
    char so[1024];
    gt_build_path(so, sizeof so, "plugins/gguf-quant.so");
    e->handle = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    if (e->handle == NULL) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return -1;
    }
    e->entry = dlsym(e->handle, SY_PLUGIN_ENTRY_SYMBOL);
    if (e->entry == NULL || e->entry->abi_major != SY_ABI_VERSION_MAJOR || e->entry->init(&gt_host_api) != SY_OK)
        return -1;
    e->api = e->entry->get_interface(SY_ENGINE_INTERFACE_ID);
    return e->api ? 0 : -1;
}

static inline void gt_engine_close(gt_engine *e) {
    if (e->entry) e->entry->deinit();
    if (e->handle) dlclose(e->handle);
}

/* A suite's setup: its oracle fixture (a path under the source tree), a fresh folder /tmp/sy-<name>-XXXXXX for the
 * files it writes, and the gguf-quant plugin. 0, or -1 when any of them fails. */
static inline int gt_suite_setup(cJSON **fixture, const char *fixture_path, char *tmpdir, size_t tmpdir_size,
                                 const char *name, gt_engine *engine) {
    *fixture = gt_load_json(fixture_path);
    snprintf(tmpdir, tmpdir_size, "/tmp/sy-%s-XXXXXX", name);
    if (*fixture == NULL || mkdtemp(tmpdir) == NULL) return -1;
    return gt_engine_open(engine);
}

/* Undoes gt_suite_setup: the fixture, the plugin and the folder with everything in it. */
static inline void gt_suite_teardown(cJSON *fixture, const char *tmpdir, gt_engine *engine) {
    cJSON_Delete(fixture);
    gt_engine_close(engine);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
}

static inline sy_model *gt_load(const gt_engine *e, const char *path, const char *threads) {
    sy_option opts[2] = {{"threads", threads}, {"ctx_size", "1024"}};
    sy_model *m = NULL;
    if (e->api->load(path, opts, 2, &m) != SY_OK) fail_msg("load %s: %s", path, e->api->error_message());
    return m;
}

static inline uint32_t gt_n_vocab(const gt_engine *e, const sy_model *m) {
    sy_model_info info = {.struct_size = sizeof info};
    assert_int_equal(e->api->model_info(m, &info), SY_OK);
    return info.n_vocab;
}

/* Token ids of a text (no BOS, special-token text not parsed); *n gets the count. Caller frees. */
static inline int32_t *gt_tokenize(const gt_engine *e, const sy_model *m, const char *text, size_t *n,
                                   uint32_t flags) {
    size_t cap = strlen(text) + 16;
    int32_t *ids = gt_xmalloc(cap * sizeof *ids);
    if (e->api->tokenize(m, text, strlen(text), flags, ids, cap, n) != SY_OK)
        fail_msg("tokenize: %s", e->api->error_message());
    return ids;
}

static inline uint32_t gt_argmax(const float *x, uint32_t n) {
    uint32_t best = 0;
    for (uint32_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* Logits of every position of tokens[0..n) in one decode (a fresh sequence). Caller frees. */
static inline float *gt_all_logits(const gt_engine *e, sy_model *m, const int32_t *tokens, uint32_t n,
                                   uint32_t n_vocab) {
    sy_seq *s;
    assert_int_equal(e->api->seq_create(m, &s), SY_OK);
    float *logits = gt_xmalloc((size_t)n * n_vocab * sizeof *logits);
    sy_decode_item item = {sizeof item, s, tokens, n, n, logits, NULL};
    sy_decode_batch batch = {sizeof batch, 1, sizeof item, &item, NULL, NULL};
    if (e->api->decode(m, &batch) != SY_OK) fail_msg("decode: %s", e->api->error_message());
    e->api->seq_free(m, s);
    return logits;
}

/* Greedy continuation of n_new tokens after the prompt (prefill in one call, then one token per call). */
static inline void gt_greedy(const gt_engine *e, sy_model *m, const int32_t *prompt, uint32_t n_prompt,
                             uint32_t n_vocab, uint32_t n_new, int32_t *out) {
    sy_seq *s;
    assert_int_equal(e->api->seq_create(m, &s), SY_OK);
    float *logits = gt_xmalloc(n_vocab * sizeof *logits);
    const int32_t *feed = prompt;
    uint32_t n_feed = n_prompt;
    for (uint32_t i = 0; i < n_new; i++) {
        sy_decode_item item = {sizeof item, s, feed, n_feed, 1, logits, NULL};
        sy_decode_batch batch = {sizeof batch, 1, sizeof item, &item, NULL, NULL};
        if (e->api->decode(m, &batch) != SY_OK) fail_msg("decode: %s", e->api->error_message());
        out[i] = (int32_t)gt_argmax(logits, n_vocab);
        feed = &out[i];
        n_feed = 1;
    }
    free(logits);
    e->api->seq_free(m, s);
}

/* Reads a JSON array of integers into a new int32 array. */
static inline int32_t *gt_json_ints(const cJSON *arr, size_t *n) {
    *n = (size_t)cJSON_GetArraySize(arr);
    int32_t *v = gt_xmalloc((*n ? *n : 1) * sizeof *v);
    size_t i = 0;
    for (const cJSON *x = arr ? arr->child : NULL; x; x = x->next) v[i++] = (int32_t)x->valuedouble;
    return v;
}

/* Logit noise between two engines on quantized files: both round activations to 8 bits per block before every
 * quantized product, and the last-bit differences of two f32 engines flip some of those roundings (then more, layer
 * by layer). On the random test models that moves logits by ~0.03 (Q8_0) to ~0.06 (K-quants) on average and by
 * up to ~0.35; their top-2 gaps are often smaller (a trained model's are mostly far larger). Positions where
 * llama.cpp's gap is below this are near-ties that either engine may break either way. */
#define QUANT_NOISE 0.4
/* The same for F32 and F16 files (no activation rounding here; llama.cpp keeps K/V and F16 products' activations
 * in f16): logits differ by ~0.001, at most ~0.008. */
#define FLOAT_NOISE 0.01

/* A model against llama.cpp's records for the same file: prompts is the oracle's list of {ids, greedy,
 * greedy_margins, top1, top1_margins[, text]}. exact: F32 and F16, whose logits agree with llama.cpp's to
 * ~0.001 (max ~0.008; the oracle chose seeds whose greedy gaps are all >= 0.01): greedy continuations must be
 * identical and the top-1 the same wherever llama.cpp's gap is not a near-tie for them. Quantized files: greedy
 * identical up to the first near-tie, and top-1 the same at >= 98% of the positions that are not near-ties. Raw
 * agreement over all positions is printed. */
static inline void gt_compare_with_llama(const gt_engine *engine, sy_model *m, const cJSON *prompts, bool exact,
                                         const char *label) {
    uint32_t n_vocab = gt_n_vocab(engine, m);
    const double noise = exact ? FLOAT_NOISE : QUANT_NOISE;
    size_t agree = 0, total = 0, decisive = 0, decisive_agree = 0, greedy_same = 0, greedy_total = 0;
    int prompt_index = 0;
    for (const cJSON *p = prompts ? prompts->child : NULL; p; p = p->next) {
        const cJSON *text = cJSON_GetObjectItem(p, "text");
        size_t n_ids, n_greedy, n_top1, n_got;
        int32_t *ids = gt_json_ints(cJSON_GetObjectItem(p, "ids"), &n_ids);
        int32_t *greedy = gt_json_ints(cJSON_GetObjectItem(p, "greedy"), &n_greedy);
        int32_t *top1 = gt_json_ints(cJSON_GetObjectItem(p, "top1"), &n_top1);
        const cJSON *gm = cJSON_GetObjectItem(p, "greedy_margins"), *tm = cJSON_GetObjectItem(p, "top1_margins");
        if (cJSON_IsString(text)) { /* the oracle tokenized it with llama.cpp */
            int32_t *got = gt_tokenize(engine, m, text->valuestring, &n_got, 0);
            if (n_got != n_ids || memcmp(got, ids, n_ids * sizeof *ids) != 0)
                fail_msg("%s: \"%s\" tokenizes differently from llama.cpp", label, text->valuestring);
            free(got);
        }

        int32_t *mine = gt_xmalloc(n_greedy * sizeof *mine);
        gt_greedy(engine, m, ids, (uint32_t)n_ids, n_vocab, (uint32_t)n_greedy, mine);
        size_t same = 0;
        while (same < n_greedy && mine[same] == greedy[same]) same++;
        greedy_same += same;
        greedy_total += n_greedy;
        if (same < n_greedy) {
            double margin = cJSON_GetArrayItem(gm, (int)same)->valuedouble;
            if (exact || margin >= QUANT_NOISE) {
                /* a quantized file may part ways only at a near-tie, or after one */
                bool tie_before = false;
                for (size_t k = 0; k < same && !exact; k++)
                    tie_before |= cJSON_GetArrayItem(gm, (int)k)->valuedouble < QUANT_NOISE;
                if (!tie_before)
                    fail_msg("%s: prompt %d: greedy token %zu is %d, llama.cpp's %d (its top-2 gap %.4f)", label,
                             prompt_index, same, mine[same], greedy[same], margin);
            }
        }

        /* teacher-forced: prompt + llama.cpp's continuation less its last token, every position's argmax */
        size_t n_seq = n_ids + n_greedy - 1;
        assert_int_equal(n_top1, n_seq);
        int32_t *seq = gt_xmalloc(n_seq * sizeof *seq);
        memcpy(seq, ids, n_ids * sizeof *seq);
        memcpy(seq + n_ids, greedy, (n_greedy - 1) * sizeof *seq);
        float *logits = gt_all_logits(engine, m, seq, (uint32_t)n_seq, n_vocab);
        for (size_t i = 0; i < n_seq; i++) {
            bool same_top = (int32_t)gt_argmax(logits + i * n_vocab, n_vocab) == top1[i];
            agree += same_top;
            if (cJSON_GetArrayItem(tm, (int)i)->valuedouble >= noise) {
                decisive++;
                decisive_agree += same_top;
            }
        }
        total += n_seq;
        free(logits);
        free(seq);
        free(mine);
        free(ids);
        free(greedy);
        free(top1);
        prompt_index++;
    }
    fprintf(stderr, "%s top-1 as llama.cpp at %zu/%zu positions (%.1f%%), at %zu/%zu with a gap >= %.2f; "
                    "greedy prefix %zu/%zu\n", label, agree, total, 100.0 * (double)agree / (double)total,
            decisive_agree, decisive, noise, greedy_same, greedy_total);
    if (decisive * 5 < total) /* a record of near-ties only would test nothing */
        fail_msg("%s: only %zu of %zu positions are not near-ties", label, decisive, total);
    if (exact && decisive_agree != decisive)
        fail_msg("%s: top-1 differs from llama.cpp at %zu positions that are not near-ties", label,
                 decisive - decisive_agree);
    if (decisive_agree * 100 < decisive * 98)
        fail_msg("%s: top-1 agrees with llama.cpp at %zu of %zu decisive positions (< 98%%)", label,
                 decisive_agree, decisive);
}

#endif
