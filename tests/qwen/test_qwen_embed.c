/* Embedding models in qwen-cpu-mmap through "sy.engine.embed/1": all-MiniLM-L6-v2 (SY_MINILM_DIR; skipped without
 * it) against sentence-transformers on 128 sentences (tests/fixtures/embeddings/minilm-st.json.zst, written by
 * tools/oracle/embedding_fixtures.py): the tokens it fed after its truncation, and a cosine similarity of at
 * least 0.9999 for every vector, in one batch and one at a time; the same model as GGUF written by `switchyard
 * quantize` from SY_MINILM_DIR (F32, F16, Q8_0; or the file SY_MINILM_GGUF names) within its type's error on the
 * same tokens; random-weight BERT models made by transformers (tests/fixtures/hf/bert-tiny-embed: CLS pooling +
 * Normalize, bert-tiny-rerank: BertForSequenceClassification), as SafeTensors, as GGUF (gguf-quant) written by the
 * gguf package and as GGUF written by `switchyard quantize`, within 1e-4 relative of transformers, tokens included; a random Qwen3Model with lasttoken pooling (tests/fixtures/hf/qwen3-tiny-embed) likewise; under
 * the tier SY_CPU_TIER forces (CTest runs it once per tier). */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <zstd.h>

#include "quantizer.h"
#include "qwen_test_util.h"
#include "sy_kernels.h"

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_SANITIZER 1
#endif
#endif
#ifndef UNDER_SANITIZER
#define UNDER_SANITIZER 0
#endif

static const sy_engine_embed_api *embed_api;

static char *read_zst(const char *path) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *packed = malloc((size_t)n);
    bool ok = packed && fread(packed, 1, (size_t)n, f) == (size_t)n;
    fclose(f);
    unsigned long long size = ok ? ZSTD_getFrameContentSize(packed, (size_t)n) : ZSTD_CONTENTSIZE_ERROR;
    char *out = size < (1ull << 30) ? malloc((size_t)size + 1) : NULL;
    if (out == NULL || ZSTD_isError(ZSTD_decompress(out, (size_t)size, packed, (size_t)n))) {
        free(out);
        out = NULL;
    } else {
        out[size] = '\0';
    }
    free(packed);
    return out;
}

static cJSON *fixture(const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/fixtures/embeddings/%s", getenv("SY_SOURCE_DIR"), name);
    char *text = read_zst(path);
    assert_non_null(text);
    cJSON *doc = cJSON_Parse(text);
    free(text);
    assert_non_null(doc);
    return doc;
}

static double cosine(const float *a, const double *b, size_t n) {
    double ab = 0, aa = 0, bb = 0;
    for (size_t i = 0; i < n; i++) ab += a[i] * b[i], aa += (double)a[i] * a[i], bb += b[i] * b[i];
    return ab / sqrt(aa * bb);
}

/* The host's truncation (api/embeddings.c): the first n_ctx - 1 tokens and the last, when it is a control token. */
static size_t truncate_ids(sy_model *m, int32_t *ids, size_t n, size_t n_ctx) {
    if (n <= n_ctx) return n;
    if (qt_api->token_flags(m, ids[n - 1]) & SY_TOKEN_CONTROL) {
        ids[n_ctx - 1] = ids[n - 1];
        return n_ctx;
    }
    return n_ctx;
}

static bool tier_skipped(void) {
    const char *forced = getenv("SY_CPU_TIER");
    sy_cpu_tier wanted;
    return forced && sy_cpu_tier_from_name(forced, &wanted) && !sy_cpu_tier_supported(wanted);
}

static void test_minilm_against_sentence_transformers(void **state) {
    (void)state;
    const char *dir = getenv("SY_MINILM_DIR");
    if (dir == NULL || *dir == '\0' || tier_skipped()) skip();
    sy_model *m = qt_load(dir, "threads", "2", NULL);
    sy_model_info info = {.struct_size = sizeof info};
    assert_int_equal(qt_api->model_info(m, &info), SY_OK);
    assert_string_equal(info.architecture, "bert");
    assert_int_equal(info.pooling, SY_POOLING_MEAN);
    assert_int_equal(info.n_embd_out, 384);
    assert_true(info.embd_normalized);
    assert_int_equal(info.n_ctx, 256);
    assert_true(info.capabilities & SY_CAP_EMBED);
    assert_true(info.capabilities & SY_CAP_NO_GENERATE);
    sy_seq *seq = NULL;
    assert_int_equal(qt_api->seq_create(m, &seq), SY_ERR_UNSUPPORTED);
    assert_non_null(strstr(qt_api->error_message(), "embedding model"));

    cJSON *doc = fixture("minilm-st.json.zst");
    const cJSON *cases = cJSON_GetObjectItem(doc, "cases"), *c;
    size_t n_cases = (size_t)cJSON_GetArraySize(cases), dim = 384;
    assert_true(n_cases >= 100);
    int32_t **ids = calloc(n_cases, sizeof *ids);
    sy_embed_input *inputs = calloc(n_cases, sizeof *inputs);
    double *want = calloc(n_cases * dim, sizeof *want);
    size_t i = 0, long_ones = 0;
    cJSON_ArrayForEach(c, cases) {
        const char *text = cJSON_GetObjectItem(c, "text")->valuestring;
        size_t n = 0;
        ids[i] = malloc(4096 * sizeof(int32_t));
        assert_int_equal(qt_api->tokenize(m, text, strlen(text), SY_TOKENIZE_ADD_SPECIAL | SY_TOKENIZE_PARSE_SPECIAL,
                                          ids[i], 4096, &n), SY_OK);
        if (n > info.n_ctx) long_ones++;
        n = truncate_ids(m, ids[i], n, info.n_ctx);
        const cJSON *oracle_ids = cJSON_GetObjectItem(c, "ids");
        assert_int_equal(n, (size_t)cJSON_GetArraySize(oracle_ids));
        for (size_t t = 0; t < n; t++) assert_int_equal(ids[i][t], cJSON_GetArrayItem(oracle_ids, (int)t)->valueint);
        inputs[i] = (sy_embed_input){sizeof(sy_embed_input), ids[i], (uint32_t)n, NULL};
        const cJSON *v = cJSON_GetObjectItem(c, "vector");
        assert_int_equal(cJSON_GetArraySize(v), (int)dim);
        for (size_t d = 0; d < dim; d++) want[i * dim + d] = cJSON_GetArrayItem(v, (int)d)->valuedouble;
        i++;
    }
    assert_true(long_ones >= 8);
    const size_t n_tokenized = n_cases;
    if (UNDER_SANITIZER) {
        /* Every 4th sentence (long ones among them): the sanitizers look for memory errors, which the same code
         * paths show on fewer inputs, and the scalar tier over all 128 takes over ten minutes under them. The
         * release suite checks every sentence on every tier. */
        size_t kept = 0;
        for (size_t k = 0; k < n_cases; k += 4, kept++) {
            inputs[kept] = inputs[k];
            memmove(want + kept * dim, want + k * dim, dim * sizeof *want);
        }
        n_cases = kept;
    }
    float *got = calloc(n_cases * dim, sizeof *got);
    sy_embed_batch batch = {sizeof batch, (uint32_t)n_cases, sizeof(sy_embed_input), inputs, got, NULL};
    assert_int_equal(embed_api->embed(m, &batch), SY_OK);
    double worst = 1;
    for (i = 0; i < n_cases; i++) {
        double cs = cosine(got + i * dim, want + i * dim, dim);
        if (cs < worst) worst = cs;
        if (cs < 0.9999) fail_msg("sentence %zu: cosine %.6f against sentence-transformers", i, cs);
    }
    fprintf(stderr, "minilm (%s tier): %zu sentences, worst cosine %.7f\n", sy_kernels_active()->name, n_cases, worst);
    /* one at a time: the same vectors (within float rounding) as in the batch */
    for (i = 0; i < n_cases; i += 13) {
        float one[384];
        sy_embed_batch b1 = {sizeof b1, 1, sizeof(sy_embed_input), &inputs[i], one, NULL};
        assert_int_equal(embed_api->embed(m, &b1), SY_OK);
        assert_true(cosine(one, want + i * dim, dim) >= 0.9999);
        for (size_t d = 0; d < dim; d++) assert_true(fabsf(one[d] - got[i * dim + d]) < 1e-5f);
    }
    /* refusals: too long, bad ids, not a reranker */
    int32_t many[300] = {0};
    sy_embed_input too_long = {sizeof too_long, many, 300, NULL};
    sy_embed_batch bl = {sizeof bl, 1, sizeof(sy_embed_input), &too_long, got, NULL};
    assert_int_equal(embed_api->embed(m, &bl), SY_ERR_CONTEXT_FULL);
    int32_t bad_id = 999999;
    sy_embed_input bad = {sizeof bad, &bad_id, 1, NULL};
    sy_embed_batch bb = {sizeof bb, 1, sizeof(sy_embed_input), &bad, got, NULL};
    assert_int_equal(embed_api->embed(m, &bb), SY_ERR_INVALID_ARGUMENT);
    assert_int_equal(embed_api->score(m, &batch), SY_ERR_UNSUPPORTED);
    for (i = 0; i < n_tokenized; i++) free(ids[i]);
    free(ids), free(inputs), free(want), free(got);
    cJSON_Delete(doc);
    qt_api->unload(m);
}

/* gguf-quant, dlopened beside qwen-cpu-mmap. */
static void *gq_handle;
static const sy_plugin_entry *gq_entry;
static const sy_engine_api *gq_api;
static const sy_engine_embed_api *gq_embed;

static void gq_log(sy_log_level level, const char *plugin, const char *message) {
    if (level <= SY_LOG_WARN) fprintf(stderr, "[%s] %s\n", plugin, message);
}
static const sy_host_api gq_host = {
    .struct_size = sizeof(sy_host_api), .abi_major = SY_ABI_VERSION_MAJOR, .abi_minor = SY_ABI_VERSION_MINOR,
    .host_version = "embed test", .log = gq_log};

static bool open_gguf_plugin(void) {
    if (gq_api) return true;
    char so[1024];
    snprintf(so, sizeof so, "%s/plugins/gguf-quant.so", getenv("SY_BUILD_DIR"));
    gq_handle = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    if (gq_handle == NULL) return false;
    gq_entry = dlsym(gq_handle, SY_PLUGIN_ENTRY_SYMBOL);
    if (gq_entry == NULL || gq_entry->init(&gq_host) != SY_OK) return false;
    gq_api = gq_entry->get_interface(SY_ENGINE_INTERFACE_ID);
    gq_embed = gq_entry->get_interface(SY_ENGINE_EMBED_INTERFACE_ID);
    return gq_api && gq_embed;
}

static sy_model *load_with(const sy_engine_api *api, const char *path) {
    sy_option opts[] = {{"threads", "2"}};
    sy_model *m = NULL;
    sy_status st = api->load(path, opts, 1, &m);
    if (st != SY_OK) fail_msg("load %s: %s", path, api->error_message());
    return m;
}

static cJSON *json_file(const char *path) {
    size_t n = 0;
    char *text = qt_read_file(path, &n);
    assert_non_null(text);
    cJSON *doc = cJSON_Parse(text);
    free(text);
    assert_non_null(doc);
    return doc;
}

/* max |a - b| over max |b|: the relative error of a vector */
static double rel_error(const float *a, const cJSON *b, size_t n) {
    double worst = 0, scale = 0;
    for (size_t i = 0; i < n; i++) {
        double w = cJSON_GetArrayItem(b, (int)i)->valuedouble;
        if (fabs(a[i] - w) > worst) worst = fabs(a[i] - w);
        if (fabs(w) > scale) scale = fabs(w);
    }
    return worst / scale;
}

/* A scratch folder for converted files, under the build tree (one per test process: the tiers run in parallel). */
static char scratch_dir[1024];

static const char *scratch(void) {
    if (scratch_dir[0] == '\0') {
        snprintf(scratch_dir, sizeof scratch_dir, "%s/embed-gguf-XXXXXX", getenv("SY_BUILD_DIR"));
        assert_non_null(mkdtemp(scratch_dir));
    }
    return scratch_dir;
}

/* `switchyard quantize IN OUT TYPE` in-process, OUT in the scratch folder; returns OUT. */
static const char *quantize_to(const char *in, const char *name, const char *type, char *out, size_t out_size) {
    snprintf(out, out_size, "%s/%s", scratch(), name);
    char *argv[] = {"quantize", "--threads", "2", "--no-progress", (char *)in, out, (char *)type, NULL};
    int rc = sy_quantize_main(7, argv);
    if (rc != 0) fail_msg("switchyard quantize %s %s %s: exit %d", in, out, type, rc);
    return out;
}

static void check_tiny_embed(const sy_engine_api *api, const sy_engine_embed_api *emb, const char *path,
                             const cJSON *doc, bool tokens_too) {
    sy_model *m = load_with(api, path);
    sy_model_info info = {.struct_size = sizeof info};
    assert_int_equal(api->model_info(m, &info), SY_OK);
    assert_int_equal(info.pooling, SY_POOLING_CLS);
    assert_int_equal(info.n_embd_out, 32);
    assert_true(info.embd_normalized);
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(doc, "cases")) {
        const char *text = cJSON_GetObjectItem(c, "text")->valuestring;
        const cJSON *ids = cJSON_GetObjectItem(c, "ids");
        int32_t toks[256];
        size_t n = (size_t)cJSON_GetArraySize(ids);
        for (size_t t = 0; t < n; t++) toks[t] = cJSON_GetArrayItem(ids, (int)t)->valueint;
        if (tokens_too) {
            int32_t mine[256];
            size_t nm = 0;
            assert_int_equal(api->tokenize(m, text, strlen(text), SY_TOKENIZE_ADD_SPECIAL | SY_TOKENIZE_PARSE_SPECIAL,
                                           mine, 256, &nm), SY_OK);
            assert_int_equal(nm, n);
            for (size_t t = 0; t < n; t++) assert_int_equal(mine[t], toks[t]);
        }
        float v[32];
        sy_embed_input in = {sizeof in, toks, (uint32_t)n, NULL};
        sy_embed_batch b = {sizeof b, 1, sizeof in, &in, v, NULL};
        assert_int_equal(emb->embed(m, &b), SY_OK);
        double e = rel_error(v, cJSON_GetObjectItem(c, "vector"), 32);
        if (e > 1e-4) fail_msg("%s %s: relative error %g", path, text, e);
    }
    api->unload(m);
}

static void check_tiny_rerank(const sy_engine_api *api, const sy_engine_embed_api *emb, const char *path,
                              const cJSON *doc) {
    sy_model *m = load_with(api, path);
    sy_model_info info = {.struct_size = sizeof info};
    assert_int_equal(api->model_info(m, &info), SY_OK);
    assert_int_equal(info.pooling, SY_POOLING_RANK);
    assert_true(info.capabilities & SY_CAP_RERANK);
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(doc, "cases")) {
        const char *q = cJSON_GetObjectItem(c, "query")->valuestring, *d = cJSON_GetObjectItem(c, "document")->valuestring;
        const cJSON *ids = cJSON_GetObjectItem(c, "ids"), *types = cJSON_GetObjectItem(c, "types");
        int32_t toks[256], tys[256];
        size_t n = 0;
        assert_int_equal(emb->tokenize_pair(m, q, strlen(q), d, strlen(d), toks, tys, 256, &n), SY_OK);
        assert_int_equal(n, (size_t)cJSON_GetArraySize(ids));
        for (size_t t = 0; t < n; t++) {
            assert_int_equal(toks[t], cJSON_GetArrayItem(ids, (int)t)->valueint);
            assert_int_equal(tys[t], cJSON_GetArrayItem(types, (int)t)->valueint);
        }
        float score;
        sy_embed_input in = {sizeof in, toks, (uint32_t)n, tys};
        sy_embed_batch b = {sizeof b, 1, sizeof in, &in, &score, NULL};
        assert_int_equal(emb->score(m, &b), SY_OK);
        double want = cJSON_GetObjectItem(c, "score")->valuedouble;
        if (fabs(score - want) > 1e-4 * fabs(want)) fail_msg("%s: score %.7f, transformers %.7f", path, score, want);
        assert_int_equal(emb->embed(m, &b), SY_ERR_UNSUPPORTED);
    }
    api->unload(m);
}

static void test_tiny_bert_models(void **state) {
    (void)state;
    if (tier_skipped()) skip();
    char dir[1024], path[1100];
    snprintf(dir, sizeof dir, "%s/tests/fixtures/hf/bert-tiny-embed", getenv("SY_SOURCE_DIR"));
    snprintf(path, sizeof path, "%s/expected.json", dir);
    cJSON *doc = json_file(path);
    check_tiny_embed(qt_api, embed_api, dir, doc, true);
    assert_true(open_gguf_plugin());
    snprintf(path, sizeof path, "%s/model-f32.gguf", dir);
    check_tiny_embed(gq_api, gq_embed, path, doc, true);
    char ours[1200];
    check_tiny_embed(gq_api, gq_embed, quantize_to(dir, "tiny-embed-f32.gguf", "F32", ours, sizeof ours), doc, true);
    unlink(ours);
    cJSON_Delete(doc);
    snprintf(dir, sizeof dir, "%s/tests/fixtures/hf/bert-tiny-rerank", getenv("SY_SOURCE_DIR"));
    snprintf(path, sizeof path, "%s/expected.json", dir);
    doc = json_file(path);
    check_tiny_rerank(qt_api, embed_api, dir, doc);
    snprintf(path, sizeof path, "%s/model-f32.gguf", dir);
    check_tiny_rerank(gq_api, gq_embed, path, doc);
    check_tiny_rerank(gq_api, gq_embed, quantize_to(dir, "tiny-rerank-f32.gguf", "F32", ours, sizeof ours), doc);
    unlink(ours);
    cJSON_Delete(doc);
}

/* A decoder embedding model (Qwen3Model, lasttoken pooling, Normalize) through the transformer core. */
static void test_qwen3_embedding_model(void **state) {
    (void)state;
    if (tier_skipped()) skip();
    char dir[1024], path[1100];
    snprintf(dir, sizeof dir, "%s/tests/fixtures/hf/qwen3-tiny-embed", getenv("SY_SOURCE_DIR"));
    snprintf(path, sizeof path, "%s/expected.json", dir);
    cJSON *doc = json_file(path);
    sy_model *m = load_with(qt_api, dir);
    sy_model_info info = {.struct_size = sizeof info};
    assert_int_equal(qt_api->model_info(m, &info), SY_OK);
    assert_int_equal(info.pooling, SY_POOLING_LAST);
    assert_int_equal(info.n_embd_out, 64);
    assert_true(info.embd_normalized);
    assert_int_equal(info.n_ctx, 128);
    assert_true((info.capabilities & (SY_CAP_EMBED | SY_CAP_NO_GENERATE)) == (SY_CAP_EMBED | SY_CAP_NO_GENERATE));
    sy_seq *seq = NULL;
    assert_int_equal(qt_api->seq_create(m, &seq), SY_ERR_UNSUPPORTED);
    const cJSON *c;
    int32_t all[8][128];
    sy_embed_input inputs[8];
    uint32_t n_in = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(doc, "cases")) {
        const char *text = cJSON_GetObjectItem(c, "text")->valuestring;
        const cJSON *ids = cJSON_GetObjectItem(c, "ids");
        size_t n = 0;
        assert_int_equal(qt_api->tokenize(m, text, strlen(text), SY_TOKENIZE_ADD_SPECIAL | SY_TOKENIZE_PARSE_SPECIAL,
                                          all[n_in], 128, &n), SY_OK);
        assert_int_equal(n, (size_t)cJSON_GetArraySize(ids));
        for (size_t t = 0; t < n; t++) assert_int_equal(all[n_in][t], cJSON_GetArrayItem(ids, (int)t)->valueint);
        inputs[n_in] = (sy_embed_input){sizeof(sy_embed_input), all[n_in], (uint32_t)n, NULL};
        n_in++;
    }
    float out[8 * 64];
    sy_embed_batch b = {sizeof b, n_in, sizeof(sy_embed_input), inputs, out, NULL};
    assert_int_equal(embed_api->embed(m, &b), SY_OK);
    uint32_t i = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(doc, "cases")) {
        double e = rel_error(out + i * 64, cJSON_GetObjectItem(c, "vector"), 64);
        if (e > 1e-4) fail_msg("qwen3 case %u: relative error %g", i, e);
        i++;
    }
    qt_api->unload(m);
    cJSON_Delete(doc);
}

/* A MiniLM GGUF on the tokens sentence-transformers fed: every cosine at least min_cosine; returns the worst. */
static double check_minilm_gguf(const char *path, const char *what, double min_cosine) {
    sy_model *m = load_with(gq_api, path);
    sy_model_info info = {.struct_size = sizeof info};
    assert_int_equal(gq_api->model_info(m, &info), SY_OK);
    assert_string_equal(info.architecture, "bert");
    assert_int_equal(info.pooling, SY_POOLING_MEAN);
    assert_int_equal(info.n_embd_out, 384);
    cJSON *doc = fixture("minilm-st.json.zst");
    const cJSON *c;
    double worst = 1;
    size_t i = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(doc, "cases")) {
        const cJSON *ids = cJSON_GetObjectItem(c, "ids"), *vec = cJSON_GetObjectItem(c, "vector");
        int32_t toks[512];
        size_t n = (size_t)cJSON_GetArraySize(ids);
        assert_true(n <= 512);
        for (size_t t = 0; t < n; t++) toks[t] = cJSON_GetArrayItem(ids, (int)t)->valueint;
        /* the GGUF's own tokenizer (from tokenizer.ggml.*) gives sentence-transformers' tokens where it did not cut */
        const char *text = cJSON_GetObjectItem(c, "text")->valuestring;
        int32_t mine[4096];
        size_t nm = 0;
        assert_int_equal(gq_api->tokenize(m, text, strlen(text), SY_TOKENIZE_ADD_SPECIAL | SY_TOKENIZE_PARSE_SPECIAL,
                                          mine, 4096, &nm), SY_OK);
        if (nm <= 256) {
            if (nm != n) fail_msg("%s: sentence %zu: %zu tokens, sentence-transformers fed %zu", what, i, nm, n);
            for (size_t t = 0; t < n; t++) assert_int_equal(mine[t], toks[t]);
        }
        float v[384];
        double want[384];
        for (size_t d = 0; d < 384; d++) want[d] = cJSON_GetArrayItem(vec, (int)d)->valuedouble;
        sy_embed_input in = {sizeof in, toks, (uint32_t)n, NULL};
        sy_embed_batch b = {sizeof b, 1, sizeof in, &in, v, NULL};
        assert_int_equal(gq_embed->embed(m, &b), SY_OK);
        double cs = cosine(v, want, 384);
        if (cs < worst) worst = cs;
        if (cs < min_cosine) fail_msg("%s: sentence %zu: cosine %.6f against sentence-transformers", what, i, cs);
        i++;
    }
    assert_true(i >= 100);
    fprintf(stderr, "minilm %s (%s tier): %zu sentences, worst cosine %.7f\n", what, sy_kernels_active()->name, i,
            worst);
    cJSON_Delete(doc);
    gq_api->unload(m);
    return worst;
}

/* MiniLM converted by `switchyard quantize` from SY_MINILM_DIR (or the GGUF SY_MINILM_GGUF names): F32 and F16
 * within F16 error of sentence-transformers, Q8_0 within 8-bit error (weights and activations in 8 bits: llama-server
 * on the same Q8_0 file reaches a worst cosine of 0.99805 on these sentences, switchyard 0.9978). */
static void test_minilm_gguf(void **state) {
    (void)state;
    const char *path = getenv("SY_MINILM_GGUF"), *dir = getenv("SY_MINILM_DIR");
    bool have_file = path != NULL && *path != '\0', have_dir = dir != NULL && *dir != '\0';
    if ((!have_file && !have_dir) || tier_skipped()) skip();
    /* The tier runs leave the GGUF files to the untiered one: a GGUF model runs the same kernels per tier as the
     * SafeTensors check above, and three conversions of MiniLM per tier cost minutes under the sanitizers. */
    const char *forced = getenv("SY_CPU_TIER");
    if (forced != NULL && *forced != '\0') skip();
    assert_true(open_gguf_plugin());
    if (have_file) check_minilm_gguf(path, "GGUF (SY_MINILM_GGUF)", 0.9999);
    if (!have_dir) return;
    static const struct {
        const char *type, *file;
        double min_cosine;
    } kinds[] = {{"F32", "minilm-f32.gguf", 0.9999}, {"F16", "minilm-f16.gguf", 0.9999},
                 {"Q8_0", "minilm-q8_0.gguf", 0.997}};
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        char out[1200], what[64];
        quantize_to(dir, kinds[k].file, kinds[k].type, out, sizeof out);
        snprintf(what, sizeof what, "GGUF %s (switchyard quantize)", kinds[k].type);
        check_minilm_gguf(out, what, kinds[k].min_cosine);
        unlink(out);
    }
}

static int setup(void **state) {
    if (qt_plugin_open(state) != 0) return -1;
    embed_api = qt_entry->get_interface(SY_ENGINE_EMBED_INTERFACE_ID);
    return embed_api ? 0 : -1;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_minilm_against_sentence_transformers),
        cmocka_unit_test(test_tiny_bert_models),
        cmocka_unit_test(test_minilm_gguf),
        cmocka_unit_test(test_qwen3_embedding_model),
    };
    int rc = cmocka_run_group_tests(tests, setup, qt_plugin_close);
    if (scratch_dir[0] != '\0') rmdir(scratch_dir);
    if (gq_entry) gq_entry->deinit();
    if (gq_handle) dlclose(gq_handle);
    return rc;
}
