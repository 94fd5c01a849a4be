/* Embedding models in qwen-cpu-mmap through "sy.engine.embed/1": all-MiniLM-L6-v2 (SY_MINILM_DIR; skipped without
 * it) against sentence-transformers on 128 sentences (tests/fixtures/embeddings/minilm-st.json.zst, written by
 * tools/oracle/embedding_fixtures.py): the tokens it fed after its truncation, and a cosine similarity of at
 * least 0.9999 for every vector, in one batch and one at a time; under the tier SY_CPU_TIER forces (CTest runs it
 * once per tier). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <zstd.h>

#include "qwen_test_util.h"
#include "sy_kernels.h"

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
    for (i = 0; i < n_cases; i++) free(ids[i]);
    free(ids), free(inputs), free(want), free(got);
    cJSON_Delete(doc);
    qt_api->unload(m);
}

static int setup(void **state) {
    if (qt_plugin_open(state) != 0) return -1;
    embed_api = qt_entry->get_interface(SY_ENGINE_EMBED_INTERFACE_ID);
    return embed_api ? 0 : -1;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_minilm_against_sentence_transformers),
    };
    return cmocka_run_group_tests(tests, setup, qt_plugin_close);
}
