/* The real Qwen tokenizer (tests/fixtures/tokenizers/qwen3: Qwen3's tokenizer.json and tokenizer_config.json)
 * in a tiny Qwen2-shaped checkpoint with Qwen's 151,936 embedding rows, written here: every case of
 * bpe_cases.json.zst (Hugging Face tokenizers' encodings) through the engine's tokenize, the special-token facts
 * of model_info / token_flags, and `switchyard tokenize --model DIR` on a few texts. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <zstd.h>

#include "qwen_test_util.h"

#define QWEN_VOCAB 151936u
#define WIDTH 8u

static char *model_dir;
static cJSON *cases_root;

/* A whole .zst file (with or without its size in the frame header), NUL-terminated. */
static char *decompress(const char *path, size_t *len) {
    size_t packed_len;
    char *packed = qt_read_file(path, &packed_len);
    if (packed == NULL) return NULL;
    ZSTD_DStream *z = ZSTD_createDStream();
    size_t cap = 1 << 20, n = 0;
    char *out = malloc(cap + 1);
    ZSTD_inBuffer in = {packed, packed_len, 0};
    bool ok = z != NULL && !ZSTD_isError(ZSTD_initDStream(z));
    while (ok) {
        if (n == cap) {
            cap *= 2;
            out = realloc(out, cap + 1);
        }
        ZSTD_outBuffer o = {out + n, cap - n, 0};
        size_t r = ZSTD_decompressStream(z, &o, &in);
        n += o.pos;
        if (ZSTD_isError(r)) ok = false;
        else if (r == 0 && in.pos == in.size) break;
        else if (in.pos == in.size && o.pos == 0) ok = false; /* truncated */
    }
    ZSTD_freeDStream(z);
    free(packed);
    if (!ok) {
        free(out);
        return NULL;
    }
    out[n] = '\0';
    *len = n;
    return out;
}

/* ---- a tiny safetensors checkpoint ---- */

typedef struct tensor_spec {
    const char *name;
    const char *dtype; /* "BF16" or "F32" */
    uint64_t rows, cols; /* cols 0: a vector of rows */
} tensor_spec;

static uint32_t lcg = 12345;
static float next_value(void) {
    lcg = lcg * 1664525u + 1013904223u;
    return ((float)(lcg >> 8) / 16777216.0f - 0.5f) * 0.5f;
}

static void write_checkpoint(const char *dir) {
    const tensor_spec specs[] = {
        {"model.embed_tokens.weight", "BF16", QWEN_VOCAB, WIDTH},
        {"model.norm.weight", "F32", WIDTH, 0},
        {"model.layers.0.input_layernorm.weight", "F32", WIDTH, 0},
        {"model.layers.0.post_attention_layernorm.weight", "F32", WIDTH, 0},
        {"model.layers.0.self_attn.q_proj.weight", "F32", WIDTH, WIDTH},
        {"model.layers.0.self_attn.k_proj.weight", "F32", WIDTH, WIDTH},
        {"model.layers.0.self_attn.v_proj.weight", "F32", WIDTH, WIDTH},
        {"model.layers.0.self_attn.o_proj.weight", "F32", WIDTH, WIDTH},
        {"model.layers.0.self_attn.q_proj.bias", "F32", WIDTH, 0},
        {"model.layers.0.self_attn.k_proj.bias", "F32", WIDTH, 0},
        {"model.layers.0.self_attn.v_proj.bias", "F32", WIDTH, 0},
        {"model.layers.0.mlp.gate_proj.weight", "F32", WIDTH, WIDTH},
        {"model.layers.0.mlp.up_proj.weight", "F32", WIDTH, WIDTH},
        {"model.layers.0.mlp.down_proj.weight", "F32", WIDTH, WIDTH},
    };
    size_t n = sizeof specs / sizeof specs[0];
    char header[8192];
    size_t hl = (size_t)snprintf(header, sizeof header, "{");
    uint64_t offset = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t count = specs[i].rows * (specs[i].cols ? specs[i].cols : 1);
        uint64_t bytes = count * (strcmp(specs[i].dtype, "BF16") == 0 ? 2 : 4);
        char shape[64];
        if (specs[i].cols) snprintf(shape, sizeof shape, "[%llu, %llu]", (unsigned long long)specs[i].rows,
                                    (unsigned long long)specs[i].cols);
        else snprintf(shape, sizeof shape, "[%llu]", (unsigned long long)specs[i].rows);
        hl += (size_t)snprintf(header + hl, sizeof header - hl,
                               "%s\"%s\": {\"dtype\": \"%s\", \"shape\": %s, \"data_offsets\": [%llu, %llu]}",
                               i ? ", " : "", specs[i].name, specs[i].dtype, shape, (unsigned long long)offset,
                               (unsigned long long)(offset + bytes));
        offset += bytes;
    }
    hl += (size_t)snprintf(header + hl, sizeof header - hl, "}");
    while (hl % 8) header[hl++] = ' ';
    size_t total = 8 + hl + (size_t)offset;
    unsigned char *file = calloc(1, total), *data = file + 8 + hl;
    for (int b = 0; b < 8; b++) file[b] = (unsigned char)((uint64_t)hl >> (8 * b));
    memcpy(file + 8, header, hl);
    for (size_t i = 0; i < n; i++) {
        uint64_t count = specs[i].rows * (specs[i].cols ? specs[i].cols : 1);
        bool norm = strstr(specs[i].name, "norm") != NULL;
        for (uint64_t k = 0; k < count; k++) {
            float v = norm ? 1.0f + next_value() : next_value();
            uint32_t bits;
            memcpy(&bits, &v, 4);
            if (strcmp(specs[i].dtype, "BF16") == 0) {
                uint16_t h = (uint16_t)(bits >> 16);
                memcpy(data, &h, 2);
                data += 2;
            } else {
                memcpy(data, &v, 4);
                data += 4;
            }
        }
    }
    char path[2048];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    qt_write_file(path, file, total);
    free(file);
    const char *config =
        "{\"architectures\": [\"Qwen2ForCausalLM\"], \"model_type\": \"qwen2\", \"hidden_size\": 8,"
        " \"intermediate_size\": 8, \"num_hidden_layers\": 1, \"num_attention_heads\": 1, \"num_key_value_heads\": 1,"
        " \"vocab_size\": 151936, \"max_position_embeddings\": 128, \"rms_norm_eps\": 1e-06, \"rope_theta\": 10000.0,"
        " \"tie_word_embeddings\": true, \"hidden_act\": \"silu\", \"torch_dtype\": \"bfloat16\","
        " \"bos_token_id\": 151643, \"eos_token_id\": 151643}";
    snprintf(path, sizeof path, "%s/config.json", dir);
    qt_write_file(path, config, strlen(config));
    const char *gen = "{\"bos_token_id\": 151643, \"eos_token_id\": [151645, 151643], \"pad_token_id\": 151643}";
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    qt_write_file(path, gen, strlen(gen));
}

static int setup(void **state) {
    if (qt_plugin_open(state) != 0) return -1;
    const char *src = getenv("SY_SOURCE_DIR");
    char path[2048];
    model_dir = qt_temp_dir();
    write_checkpoint(model_dir);
    size_t len;
    snprintf(path, sizeof path, "%s/tests/fixtures/tokenizers/qwen3/tokenizer.json.zst", src ? src : ".");
    char *json = decompress(path, &len);
    if (json == NULL) return -1;
    snprintf(path, sizeof path, "%s/tokenizer.json", model_dir);
    qt_write_file(path, json, len);
    free(json);
    snprintf(path, sizeof path, "%s/tests/fixtures/tokenizers/qwen3/tokenizer_config.json", src ? src : ".");
    json = qt_read_file(path, &len);
    if (json == NULL) return -1;
    snprintf(path, sizeof path, "%s/tokenizer_config.json", model_dir);
    qt_write_file(path, json, len);
    free(json);
    snprintf(path, sizeof path, "%s/tests/fixtures/tokenizers/qwen3/bpe_cases.json.zst", src ? src : ".");
    json = decompress(path, &len);
    if (json == NULL) return -1;
    cases_root = cJSON_ParseWithLength(json, len);
    free(json);
    return cases_root ? 0 : -1;
}

static int teardown(void **state) {
    cJSON_Delete(cases_root);
    qt_remove_tree(model_dir);
    free(model_dir);
    return qt_plugin_close(state);
}

static char *unhex(const char *hex, size_t *len) {
    size_t n = strlen(hex) / 2;
    char *out = malloc(n + 1);
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        sscanf(hex + 2 * i, "%2x", &v);
        out[i] = (char)v;
    }
    out[n] = '\0';
    *len = n;
    return out;
}

static const cJSON *qwen3_cases(void) {
    const cJSON *v;
    cJSON_ArrayForEach(v, cJSON_GetObjectItem(cases_root, "variants")) {
        if (strcmp(cJSON_GetObjectItem(v, "name")->valuestring, "qwen3") == 0) return cJSON_GetObjectItem(v, "cases");
    }
    fail_msg("bpe_cases.json has no qwen3 variant");
    return NULL;
}

static size_t json_ids(const cJSON *a, int32_t *out, size_t cap) {
    size_t n = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, a) {
        assert_true(n < cap);
        out[n++] = (int32_t)v->valuedouble;
    }
    return n;
}

static void test_every_case_through_the_engine(void **state) {
    (void)state;
    sy_model *m = qt_load(model_dir, "threads", "1", NULL);
    size_t cap = 1 << 16, checked = 0;
    int32_t *want = malloc(cap * sizeof *want), *got = malloc(cap * sizeof *got);
    const cJSON *c;
    cJSON_ArrayForEach(c, qwen3_cases()) {
        size_t len, n;
        char *text = unhex(cJSON_GetObjectItem(c, "hex")->valuestring, &len);
        size_t n_want = json_ids(cJSON_GetObjectItem(c, "ids"), want, cap);
        sy_status st = qt_api->tokenize(m, text, len, SY_TOKENIZE_PARSE_SPECIAL, got, cap, &n);
        if (st != SY_OK || n != n_want || memcmp(got, want, n * sizeof *got) != 0)
            fail_msg("case %s: status %d, %zu ids (oracle %zu)", cJSON_GetObjectItem(c, "hex")->valuestring, st, n,
                     n_want);
        free(text);
        checked++;
    }
    assert_true(checked > 1000);
    free(want);
    free(got);
    qt_api->unload(m);
}

static void test_special_tokens(void **state) {
    (void)state;
    sy_model *m = qt_load(model_dir, NULL);
    sy_model_info info = {.struct_size = sizeof info};
    assert_int_equal(qt_api->model_info(m, &info), SY_OK);
    assert_int_equal(info.n_vocab, QWEN_VOCAB);
    assert_string_equal(info.weight_dtype, "bf16");
    assert_int_equal(info.eos_token, 151645); /* tokenizer_config: <|im_end|> */
    assert_int_equal(info.bos_token, 151643);
    assert_false(info.add_bos);
    assert_non_null(info.chat_template);
    assert_non_null(strstr(info.chat_template, "<|im_start|>"));
    assert_true(qt_api->token_flags(m, 151645) & SY_TOKEN_END_OF_GENERATION); /* <|im_end|> */
    assert_true(qt_api->token_flags(m, 151643) & SY_TOKEN_END_OF_GENERATION); /* <|endoftext|> */
    assert_true(qt_api->token_flags(m, 151644) & SY_TOKEN_CONTROL);           /* <|im_start|> */
    assert_false(qt_api->token_flags(m, 151644) & SY_TOKEN_END_OF_GENERATION);
    assert_int_equal(qt_api->token_flags(m, 151800), SY_TOKEN_UNUSED); /* embedding padding */
    int32_t ids[16];
    size_t n;
    const char *chat = "<|im_start|>user\nHi<|im_end|>";
    assert_int_equal(qt_api->tokenize(m, chat, strlen(chat), SY_TOKENIZE_PARSE_SPECIAL, ids, 16, &n), SY_OK);
    assert_int_equal(n, 5);
    assert_int_equal(ids[0], 151644);
    assert_int_equal(ids[4], 151645);
    /* and the tiny model runs */
    float *logits = malloc(QWEN_VOCAB * sizeof *logits);
    sy_seq *s;
    assert_int_equal(qt_api->seq_create(m, &s), SY_OK);
    assert_int_equal(qt_decode(m, s, ids, (uint32_t)n, 1, logits), SY_OK);
    for (uint32_t i = 0; i < QWEN_VOCAB; i++) assert_true(isfinite(logits[i]));
    qt_api->seq_free(m, s);
    free(logits);
    qt_api->unload(m);
}

/* `switchyard tokenize --ids` on text written to a file, as the user would run it. */
static size_t cli_tokenize(const char *text, size_t len, int32_t *out, size_t cap) {
    const char *build = getenv("SY_BUILD_DIR");
    char input[2048], cmd[8192];
    snprintf(input, sizeof input, "%s/input.txt", model_dir);
    qt_write_file(input, text, len);
    snprintf(cmd, sizeof cmd,
             "'%s/bin/switchyard' tokenize --plugin-dir '%s/plugins' --plugin qwen-cpu-mmap --model '%s' --ids < '%s'",
             build ? build : ".", build ? build : ".", model_dir, input);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = 0;
    int v;
    while (fscanf(p, "%d", &v) == 1) {
        assert_true(n < cap);
        out[n++] = v;
    }
    int status = pclose(p);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    return n;
}

static void test_tokenize_verb(void **state) {
    (void)state;
    int32_t got[4096], want[4096];
    size_t done = 0;
    const cJSON *c;
    /* a handful of the oracle's cases, spread over the list */
    int index = 0;
    cJSON_ArrayForEach(c, qwen3_cases()) {
        if (index++ % 400 != 1) continue;
        size_t len;
        char *text = unhex(cJSON_GetObjectItem(c, "hex")->valuestring, &len);
        size_t n_want = json_ids(cJSON_GetObjectItem(c, "ids"), want, 4096);
        size_t n = cli_tokenize(text, len, got, 4096);
        assert_int_equal(n, n_want);
        assert_memory_equal(got, want, n * sizeof *got);
        free(text);
        done++;
    }
    assert_true(done >= 4);
    const char *chat = "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHello, world!<|im_end|>\n";
    size_t n = cli_tokenize(chat, strlen(chat), got, 4096);
    assert_true(n > 8);
    assert_int_equal(got[0], 151644);
    assert_int_equal(got[n - 2], 151645);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_case_through_the_engine),
        cmocka_unit_test(test_special_tokens),
        cmocka_unit_test(test_tokenize_verb),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
