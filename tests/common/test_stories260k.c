/* End to end through the plugin ABI: dlopen build/plugins/gguf-quant.so, load stories260K (a real trained
 * Llama, F32) and greedily decode from BOS. The text must equal the one the model's author documents
 * (expected-greedy-from-bos.txt), which only a correct forward pass produces. Then the engine contract around it:
 * batched prefill equals token-by-token decode, several sequences in one call, fork and truncate, context limit,
 * cancellation, bad inputs, unsupported files; and quantized / half-precision copies of the weights against F32
 * copies holding exactly the values those quantized weights stand for. */
#include <dlfcn.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include <switchyard/engine.h>

#include "gguf.h"
#include "gguf_builder.h"
#include "sy_kernels.h"
#include "hf_config.h"

#define N_VOCAB 512
#define BOS 1

static void *plugin_handle;
static const sy_plugin_entry *entry;
static const sy_engine_api *api;
static char model_path[1024];
static int cancel_requested;

static void host_log(sy_log_level level, const char *plugin, const char *message) {
    if (level <= SY_LOG_WARN) fprintf(stderr, "[%s] %s\n", plugin, message);
}
static int host_is_cancelled(const sy_host_call *call) { return call != NULL && cancel_requested; }

static const sy_host_api host_api = {
    .struct_size = sizeof(sy_host_api),
    .abi_major = SY_ABI_VERSION_MAJOR,
    .abi_minor = SY_ABI_VERSION_MINOR,
    .host_version = "test",
    .log = host_log,
    .is_cancelled = host_is_cancelled,
};

/* A whole fixture file, NUL-terminated; NULL when it cannot be read. */
static char *read_file(const char *path, size_t *size) { return sy_hf_read_file(path, SIZE_MAX - 1, size, NULL, 0); }

static int setup(void **state) {
    (void)state;
    const char *build = getenv("SY_BUILD_DIR"), *src = getenv("SY_SOURCE_DIR");
    char so[1024];
    snprintf(so, sizeof so, "%s/plugins/gguf-quant.so", build ? build : ".");
    snprintf(model_path, sizeof model_path, "%s/tests/fixtures/stories260K/stories260K.gguf", src ? src : ".");
    plugin_handle = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    if (plugin_handle == NULL) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return -1;
    }
    entry = dlsym(plugin_handle, SY_PLUGIN_ENTRY_SYMBOL);
    if (entry == NULL || entry->abi_major != SY_ABI_VERSION_MAJOR || strcmp(entry->name, "gguf-quant") != 0)
        return -1;
    if (entry->init(&host_api) != SY_OK) return -1;
    api = entry->get_interface(SY_ENGINE_INTERFACE_ID);
    return api == NULL ? -1 : 0;
}

static int teardown(void **state) {
    (void)state;
    entry->deinit();
    dlclose(plugin_handle);
    return 0;
}

static sy_model *load(const char *threads, const char *ctx) {
    sy_option opts[2] = {{"threads", threads}, {"ctx_size", ctx}};
    sy_model *m = NULL;
    sy_status st = api->load(model_path, opts, ctx ? 2 : 1, &m);
    if (st != SY_OK) fail_msg("load: %s", api->error_message());
    return m;
}

static int32_t argmax(const float *logits) {
    int32_t best = 0;
    for (int32_t i = 1; i < N_VOCAB; i++)
        if (logits[i] > logits[best]) best = i;
    return best;
}

static sy_status decode_one(sy_model *m, sy_seq *s, const int32_t *tokens, uint32_t n, uint32_t n_logits,
                            float *logits, const sy_host_call *call) {
    sy_decode_item item = {sizeof item, s, tokens, n, n_logits, logits, NULL};
    sy_decode_batch batch = {sizeof batch, 1, sizeof item, &item, call, NULL};
    return api->decode(m, &batch);
}

/* llama2.c's `run -t 0.0` with its default 256 steps: greedy from BOS, at most 256 forward passes (one sampled
 * token each), stopping early if the model emits BOS; pieces printed as they come (the space SentencePiece puts
 * before the first word after BOS dropped), then one newline. */
#define LLAMA2C_STEPS 256

static char *greedy_from_bos(sy_model *m, int *n_generated) {
    sy_seq *s;
    assert_int_equal(api->seq_create(m, &s), SY_OK);
    size_t cap = 4096, len = 0;
    char *text = calloc(1, cap);
    float logits[N_VOCAB];
    int32_t token = BOS;
    int generated = 0;
    while (generated < LLAMA2C_STEPS) {
        sy_status st = decode_one(m, s, &token, 1, 1, logits, NULL);
        if (st != SY_OK) fail_msg("decode: %s", api->error_message());
        int32_t next = argmax(logits);
        if (next == BOS) break;
        char piece[64];
        size_t n;
        assert_int_equal(api->token_to_bytes(m, next, piece, sizeof piece, &n), SY_OK);
        const char *p = piece;
        if (token == BOS && n > 0 && piece[0] == ' ') p++, n--;
        assert_true(len + n + 1 < cap);
        memcpy(text + len, p, n);
        len += n;
        token = next;
        generated++;
    }
    text[len] = '\n';
    assert_int_equal(api->seq_length(m, s), (uint32_t)generated + (generated < LLAMA2C_STEPS ? 1 : 0));
    api->seq_free(m, s);
    *n_generated = generated;
    return text;
}

static void test_greedy_from_bos_matches_reference(void **state) {
    (void)state;
    const char *src = getenv("SY_SOURCE_DIR");
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/fixtures/stories260K/expected-greedy-from-bos.txt", src ? src : ".");
    size_t size;
    char *expected = read_file(path, &size);
    assert_non_null(expected);

    sy_model *m = load("2", NULL);
    int generated;
    char *text = greedy_from_bos(m, &generated);
    if (strcmp(text, expected) != 0) fail_msg("greedy text differs:\n--- got ---\n%s--- want ---\n%s", text, expected);
    assert_int_equal(generated, LLAMA2C_STEPS); /* the reference run ends at the step limit */
    free(text);
    api->unload(m);

    m = load("1", NULL); /* one thread: the same text */
    text = greedy_from_bos(m, &generated);
    assert_string_equal(text, expected);
    free(text);
    api->unload(m);
    free(expected);
}

static void test_model_info_and_tokenizer(void **state) {
    (void)state;
    assert_int_equal(api->probe(model_path), SY_OK);
    sy_model *m = load("2", "64");
    sy_model_info info = {.struct_size = sizeof info};
    assert_int_equal(api->model_info(m, &info), SY_OK);
    assert_string_equal(info.architecture, "llama");
    assert_string_equal(info.weight_dtype, "f32");
    assert_int_equal(info.n_vocab, 512);
    assert_int_equal(info.n_layer, 5);
    assert_int_equal(info.n_embd, 64);
    assert_int_equal(info.n_ctx, 64);
    assert_int_equal(info.n_ctx_train, 2048);
    assert_int_equal(info.bos_token, 1);
    assert_int_equal(info.eos_token, 2);
    assert_int_equal(info.pad_token, -1);
    assert_true(info.add_bos);
    assert_int_equal(strlen(info.fingerprint), 32);
    assert_true(info.n_params > 250000 && info.n_params < 300000);
    char fp[33];
    snprintf(fp, sizeof fp, "%s", info.fingerprint);

    /* an older, shorter struct gets only what fits */
    sy_model_info small;
    memset(&small, 0x5a, sizeof small);
    small.struct_size = offsetof(sy_model_info, name);
    assert_int_equal(api->model_info(m, &small), SY_OK);
    assert_string_equal(small.architecture, "llama");
    assert_true(small.weight_dtype == (const char *)(uintptr_t)0x5a5a5a5a5a5a5a5aull);

    int32_t ids[16];
    size_t n;
    assert_int_equal(api->tokenize(m, "", 0, SY_TOKENIZE_ADD_SPECIAL, ids, 16, &n), SY_OK);
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], BOS);
    assert_int_equal(api->tokenize(m, "Once upon a time", 16, SY_TOKENIZE_ADD_SPECIAL, ids, 2, &n),
                     SY_ERR_BUFFER_TOO_SMALL);
    assert_int_equal(n, 5);
    assert_int_equal(api->tokenize(m, "<s>", 3, SY_TOKENIZE_PARSE_SPECIAL, ids, 16, &n), SY_OK);
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], BOS);
    assert_int_equal(api->token_flags(m, BOS), SY_TOKEN_CONTROL);
    assert_int_equal(api->token_flags(m, 2), SY_TOKEN_CONTROL | SY_TOKEN_END_OF_GENERATION);
    assert_int_equal(api->token_flags(m, 3 + '\n'), SY_TOKEN_BYTE);
    assert_int_equal(api->token_flags(m, 300), SY_TOKEN_NORMAL);
    assert_int_equal(api->token_flags(m, 512), SY_TOKEN_INVALID);
    char piece[8];
    assert_int_equal(api->token_to_bytes(m, 3 + '\n', piece, sizeof piece, &n), SY_OK);
    assert_int_equal(n, 1);
    assert_int_equal(piece[0], '\n');
    assert_int_equal(api->token_to_bytes(m, 2, piece, sizeof piece, &n), SY_OK);
    assert_memory_equal(piece, "</s>", 4);
    assert_int_equal(api->token_to_bytes(m, 600, piece, sizeof piece, &n), SY_ERR_INVALID_ARGUMENT);

    sy_memory_usage mu = {.struct_size = sizeof mu};
    assert_int_equal(api->memory_usage(m, &mu), SY_OK);
    assert_int_equal(mu.mapped_bytes, 1185376);
    assert_int_equal(mu.kv_bytes, 0);
    sy_seq *s;
    assert_int_equal(api->seq_create(m, &s), SY_OK);
    int32_t bos = BOS;
    assert_int_equal(decode_one(m, s, &bos, 1, 0, NULL, NULL), SY_OK);
    assert_int_equal(api->memory_usage(m, &mu), SY_OK);
    assert_true(mu.kv_bytes >= 5ull * 2 * 32 * sizeof(float)); /* 5 layers, K and V, 4 heads x 8 */
    assert_true(mu.resident_bytes > mu.kv_bytes);
    api->seq_free(m, s);
    api->unload(m);

    /* the same file gives the same fingerprint */
    m = load("1", NULL);
    assert_int_equal(api->model_info(m, &info), SY_OK);
    assert_string_equal(info.fingerprint, fp);
    api->unload(m);
}

static void expect_close(const float *a, const float *b, size_t n, float tol) {
    for (size_t i = 0; i < n; i++)
        if (fabsf(a[i] - b[i]) > tol) fail_msg("logit %zu: %f vs %f", i, (double)a[i], (double)b[i]);
}

/* All prompt tokens in one decode give the logits that feeding them one at a time gives, for each KV cache type:
 * within 1e-4 with the KV in f32 (batched products tile differently in their last bits); in f16 or q8_0 such a
 * last-bit difference can round a key or value to the neighbouring step of the type, so the bounds are the type's
 * (measured: f32 6.9e-6, f16 2.2e-3, q8_0 4.8e-6 on the AVX-512 tier; f16 4.3e-5 on AVX2; 0 on scalar, whose
 * products are batch-invariant to the bit). */
static void test_batched_prefill_equals_incremental(void **state) {
    (void)state;
    static const struct {
        const char *type;
        float tolerance;
    } types[] = {{"f32", 1e-4f}, {"f16", 1e-2f}, {"q8_0", 3e-2f}};
    for (size_t t = 0; t < sizeof types / sizeof *types; t++) {
        sy_option opts[] = {{"threads", "2"}, {"cache_type_k", types[t].type}, {"cache_type_v", types[t].type}};
        sy_model *m = NULL;
        if (api->load(model_path, opts, 3, &m) != SY_OK) fail_msg("load: %s", api->error_message());
        const char *prompt = "Once upon a time, there was a little girl named Lily. She loved to play";
        int32_t ids[64];
        size_t n;
        assert_int_equal(api->tokenize(m, prompt, strlen(prompt), SY_TOKENIZE_ADD_SPECIAL, ids, 64, &n), SY_OK);
        assert_true(n > 10);
        float *all = malloc(n * N_VOCAB * sizeof(float)), one[N_VOCAB];
        sy_seq *batched, *stepped;
        assert_int_equal(api->seq_create(m, &batched), SY_OK);
        assert_int_equal(api->seq_create(m, &stepped), SY_OK);
        assert_int_equal(decode_one(m, batched, ids, (uint32_t)n, (uint32_t)n, all, NULL), SY_OK);
        assert_int_equal(api->seq_length(m, batched), n);
        float worst = 0;
        for (size_t i = 0; i < n; i++) {
            assert_int_equal(decode_one(m, stepped, &ids[i], 1, 1, one, NULL), SY_OK);
            for (size_t v = 0; v < N_VOCAB; v++)
                if (fabsf(all[i * N_VOCAB + v] - one[v]) > worst) worst = fabsf(all[i * N_VOCAB + v] - one[v]);
        }
        fprintf(stderr, "KV %s: batched vs one at a time, max |logit diff| %g\n", types[t].type, (double)worst);
        if (!(worst <= types[t].tolerance))
            fail_msg("KV %s: batched and one-at-a-time logits differ by %g", types[t].type, (double)worst);
        free(all);
        api->seq_free(m, batched);
        api->seq_free(m, stepped);
        api->unload(m);
    }
}

/* Three sequences of different lengths in one call, each asking for its last 2 logits rows, equal the same
 * sequences decoded alone. */
static void test_several_sequences_in_one_call(void **state) {
    (void)state;
    sy_model *m = load("2", NULL);
    const char *prompts[3] = {"The cat", "Lily and Ben went to the park to play", "One day, a big dog"};
    int32_t ids[3][32];
    size_t n[3];
    sy_seq *together[3], *alone[3];
    float logits[3][2 * N_VOCAB], ref[2 * N_VOCAB];
    sy_decode_item items[3];
    for (int i = 0; i < 3; i++) {
        assert_int_equal(api->tokenize(m, prompts[i], strlen(prompts[i]), SY_TOKENIZE_ADD_SPECIAL, ids[i], 32, &n[i]),
                         SY_OK);
        assert_int_equal(api->seq_create(m, &together[i]), SY_OK);
        assert_int_equal(api->seq_create(m, &alone[i]), SY_OK);
        items[i] = (sy_decode_item){sizeof(sy_decode_item), together[i], ids[i], (uint32_t)n[i], 2, logits[i], NULL};
    }
    sy_decode_batch batch = {sizeof batch, 3, sizeof(sy_decode_item), items, NULL, NULL};
    assert_int_equal(api->decode(m, &batch), SY_OK);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(decode_one(m, alone[i], ids[i], (uint32_t)n[i], 2, ref, NULL), SY_OK);
        expect_close(logits[i], ref, 2 * N_VOCAB, 1e-4f);
    }
    /* then one decode step of all three together */
    int32_t next[3];
    for (int i = 0; i < 3; i++) {
        next[i] = argmax(logits[i] + N_VOCAB);
        items[i] = (sy_decode_item){sizeof(sy_decode_item), together[i], &next[i], 1, 1, logits[i], NULL};
    }
    assert_int_equal(api->decode(m, &batch), SY_OK);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(decode_one(m, alone[i], &next[i], 1, 1, ref, NULL), SY_OK);
        expect_close(logits[i], ref, N_VOCAB, 1e-4f);
        api->seq_free(m, together[i]);
        api->seq_free(m, alone[i]);
    }
    /* the same sequence twice in one batch is refused */
    sy_seq *s;
    assert_int_equal(api->seq_create(m, &s), SY_OK);
    int32_t bos = BOS;
    items[0] = (sy_decode_item){sizeof(sy_decode_item), s, &bos, 1, 0, NULL, NULL};
    items[1] = items[0];
    batch.n_items = 2;
    assert_int_equal(api->decode(m, &batch), SY_ERR_INVALID_ARGUMENT);
    assert_int_equal(api->seq_length(m, s), 0);
    api->seq_free(m, s);
    api->unload(m);
}

static void test_fork_truncate_limits_and_cancel(void **state) {
    (void)state;
    sy_model *m = load("2", "16");
    int32_t ids[16];
    size_t n;
    const char *prompt = "Tom had a red ball";
    assert_int_equal(api->tokenize(m, prompt, strlen(prompt), SY_TOKENIZE_ADD_SPECIAL, ids, 16, &n), SY_OK);
    sy_seq *a, *b;
    float la[N_VOCAB], lb[N_VOCAB];
    assert_int_equal(api->seq_create(m, &a), SY_OK);
    assert_int_equal(decode_one(m, a, ids, (uint32_t)n, 1, la, NULL), SY_OK);

    /* a fork of the first n-1 tokens fed the last one again gives the same logits */
    assert_int_equal(api->seq_fork(m, a, (uint32_t)n - 1, &b), SY_OK);
    assert_int_equal(api->seq_length(m, b), n - 1);
    assert_int_equal(decode_one(m, b, &ids[n - 1], 1, 1, lb, NULL), SY_OK);
    expect_close(la, lb, N_VOCAB, 1e-5f);
    assert_int_equal(api->seq_fork(m, a, (uint32_t)n + 1, &b), SY_ERR_INVALID_ARGUMENT);

    /* truncating and re-feeding also gives them */
    assert_int_equal(api->seq_truncate(m, a, 2), SY_OK);
    assert_int_equal(api->seq_length(m, a), 2);
    assert_int_equal(decode_one(m, a, ids + 2, (uint32_t)n - 2, 1, lb, NULL), SY_OK);
    expect_close(la, lb, N_VOCAB, 1e-4f);
    assert_int_equal(api->seq_truncate(m, a, 100), SY_ERR_INVALID_ARGUMENT);

    /* the context limit (16): nothing changes when a decode would pass it */
    uint32_t len = api->seq_length(m, a);
    int32_t many[16];
    for (int i = 0; i < 16; i++) many[i] = 300 + i;
    assert_int_equal(decode_one(m, a, many, 16 - len + 1, 1, la, NULL), SY_ERR_CONTEXT_FULL);
    assert_int_equal(api->seq_length(m, a), len);
    assert_non_null(strstr(api->error_message(), "context"));

    /* bad token ids and n_logits > n_tokens are refused, nothing changes */
    int32_t bad[2] = {5, 512};
    assert_int_equal(decode_one(m, a, bad, 2, 1, la, NULL), SY_ERR_INVALID_ARGUMENT);
    assert_int_equal(decode_one(m, a, bad, 1, 2, la, NULL), SY_ERR_INVALID_ARGUMENT);
    assert_int_equal(api->seq_length(m, a), len);

    /* cancellation leaves the sequence as it was, and it decodes fine afterwards */
    cancel_requested = 1;
    int dummy;
    assert_int_equal(decode_one(m, a, many, 2, 1, la, (const sy_host_call *)&dummy), SY_ERR_CANCELLED);
    assert_int_equal(api->seq_length(m, a), len);
    cancel_requested = 0;
    assert_int_equal(decode_one(m, a, many, 2, 1, la, (const sy_host_call *)&dummy), SY_OK);
    assert_int_equal(api->seq_length(m, a), len + 2);

    api->seq_free(m, a);
    api->seq_free(m, b);
    api->unload(m);
}

/* Copies the fixture with `patch` applied at the first occurrence of `find` (same length), to a temp file. */
static void write_patched(const char *out, const char *find, size_t find_len, const void *patch, size_t skip) {
    size_t size;
    char *data = read_file(model_path, &size);
    assert_non_null(data);
    char *at = memmem(data, size, find, find_len);
    assert_non_null(at);
    memcpy(at + skip, patch, find_len - skip);
    FILE *f = fopen(out, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, size, f), size);
    fclose(f);
    free(data);
}

static void test_refusals(void **state) {
    (void)state;
    char tmp[] = "/tmp/sy-gq-test-XXXXXX";
    assert_non_null(mkdtemp(tmp));
    char path[256];
    sy_model *m = NULL;

    /* not GGUF */
    snprintf(path, sizeof path, "%s/not.gguf", tmp);
    FILE *f = fopen(path, "wb");
    fputs("hello, I am not a model", f);
    fclose(f);
    assert_int_equal(api->probe(path), SY_ERR_UNSUPPORTED);

    /* truncated: refused with a message naming the tensor */
    size_t size;
    char *data = read_file(model_path, &size);
    snprintf(path, sizeof path, "%s/sha256-truncated", tmp);
    f = fopen(path, "wb");
    assert_int_equal(fwrite(data, 1, size - 1000, f), size - 1000);
    fclose(f);
    free(data);
    assert_int_equal(api->load(path, NULL, 0, &m), SY_ERR_FORMAT);
    assert_non_null(strstr(api->error_message(), "data extends past the end of the file"));

    /* another architecture: "gemma" in place of "llama" as general.architecture's value */
    snprintf(path, sizeof path, "%s/gemma.gguf", tmp);
    static const char arch_kv[] = "general.architecture\x08\x00\x00\x00\x05\x00\x00\x00\x00\x00\x00\x00llama";
    write_patched(path, arch_kv, sizeof arch_kv - 1, "gemma", sizeof arch_kv - 1 - 5);
    assert_int_equal(api->probe(path), SY_ERR_UNSUPPORTED);
    assert_non_null(strstr(api->error_message(), "architecture 'gemma'"));
    assert_int_equal(api->load(path, NULL, 0, &m), SY_ERR_UNSUPPORTED);
    assert_non_null(strstr(api->error_message(), "architecture 'gemma' is not supported"));

    /* a tensor type the kernels lack: blk.0.attn_q.weight as i32 (same byte size as f32) */
    snprintf(path, sizeof path, "%s/i32.gguf", tmp);
    static const char q_info[] = "blk.0.attn_q.weight\x02\x00\x00\x00\x40\x00\x00\x00\x00\x00\x00\x00"
                                 "\x40\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00";
    write_patched(path, q_info, sizeof q_info - 1, "\x1a\x00\x00\x00", sizeof q_info - 1 - 4);
    assert_int_equal(api->load(path, NULL, 0, &m), SY_ERR_UNSUPPORTED);
    assert_non_null(strstr(api->error_message(), "tensor blk.0.attn_q.weight: type i32 is not supported"));

    /* bad option values are named */
    sy_option bad = {"threads", "lots"};
    assert_int_equal(api->load(model_path, &bad, 1, &m), SY_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(api->error_message(), "threads"));
    sy_option unknown = {"kv-cache-dir", "/nowhere"};
    assert_int_equal(api->load(model_path, &unknown, 1, &m), SY_OK);
    api->unload(m);

    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    assert_int_equal(system(cmd), 0);
}

/* ---- quantized weights ---- */

typedef enum weight_form { FORM_F32 = 0, FORM_F16 = 1, FORM_Q4_0 = 2, FORM_Q8_0 = 8, FORM_BF16 = 30 } weight_form;

/* Rounds x to what `form` can store (per block of 32 for the quantized forms) and, when out is non-NULL, writes
 * the stored bytes. Returns the bytes written per row of n. `values` receives the decoded values. */
static size_t encode_row(weight_form form, const float *x, size_t n, uint8_t *out, float *values) {
    size_t bytes = 0;
    if (form == FORM_F16 || form == FORM_BF16) {
        for (size_t i = 0; i < n; i++) {
            uint16_t h = form == FORM_F16 ? sy_f32_to_f16(x[i]) : sy_f32_to_bf16(x[i]);
            values[i] = form == FORM_F16 ? sy_f16_to_f32(h) : sy_bf16_to_f32(h);
            if (out) memcpy(out + 2 * i, &h, 2);
        }
        return 2 * n;
    }
    for (size_t b = 0; b < n / 32; b++) {
        const float *xb = x + 32 * b;
        float amax = 0, signed_max = 0;
        for (int i = 0; i < 32; i++)
            if (fabsf(xb[i]) > amax) amax = fabsf(xb[i]), signed_max = xb[i];
        if (form == FORM_Q8_0) { /* d = amax/127, q = round(x/d): f16 d, 32 x int8 */
            uint16_t dh = sy_f32_to_f16(amax / 127.0f);
            float d = sy_f16_to_f32(dh), id = d != 0 ? 1.0f / d : 0;
            if (out) memcpy(out + bytes, &dh, 2);
            for (int i = 0; i < 32; i++) {
                int q = (int)lroundf(xb[i] * id);
                q = q > 127 ? 127 : q < -127 ? -127 : q;
                if (out) out[bytes + 2 + i] = (uint8_t)(int8_t)q;
                values[32 * b + i] = d * (float)q;
            }
            bytes += 34;
        } else { /* Q4_0: d = max/-8, q = x/d + 8 in [0, 15]; byte j holds q[j] (low) and q[j+16] (high) */
            uint16_t dh = sy_f32_to_f16(signed_max / -8.0f);
            float d = sy_f16_to_f32(dh), id = d != 0 ? 1.0f / d : 0;
            uint8_t q[32];
            for (int i = 0; i < 32; i++) {
                int v = (int)floorf(xb[i] * id + 8.5f);
                q[i] = (uint8_t)(v < 0 ? 0 : v > 15 ? 15 : v);
                values[32 * b + i] = d * (float)((int)q[i] - 8);
            }
            if (out) {
                memcpy(out + bytes, &dh, 2);
                for (int j = 0; j < 16; j++) out[bytes + 2 + j] = (uint8_t)(q[j] | (q[j + 16] << 4));
            }
            bytes += 18;
        }
    }
    return bytes;
}

/* Writes a copy of the fixture whose 2-D weights are stored as `form` (F16 where rows are not whole blocks), or,
 * with as_f32, as F32 holding exactly the values that form stands for. */
static void write_variant(const char *out_path, weight_form form, bool as_f32) {
    char err[256];
    sy_gguf *g = sy_gguf_open(model_path, err, sizeof err);
    if (g == NULL) fail_msg("%s", err);
    const uint8_t *file = sy_gguf_file_data(g);
    uint64_t n_tensors = sy_gguf_tensor_count(g);
    uint64_t kv_begin = 24, kv_end = sy_gguf_tensor_infos_offset(g);

    gguf_buf head = {0}, data = {0};
    gb_header(&head, 3, n_tensors, sy_gguf_kv_count(g));
    gb_bytes(&head, file + kv_begin, kv_end - kv_begin);
    for (uint64_t t = 0; t < n_tensors; t++) {
        const sy_gguf_tensor *ti = sy_gguf_tensor_at(g, t);
        assert_int_equal(ti->type, 0);
        size_t cols = ti->dims[0], rows = ti->n_elements / cols;
        weight_form f = ti->dims[1] == 1 ? FORM_F32 : (cols % 32 == 0 || form == FORM_F16 || form == FORM_BF16)
                                                          ? form
                                                          : FORM_F16;
        gb_pad(&data, 32);
        gb_tensor_info(&head, ti->name, ti->n_dims, ti->dims, as_f32 ? 0 : (uint32_t)f, data.size);
        const float *src = ti->data;
        float *values = malloc(cols * sizeof(float));
        uint8_t *bytes = malloc(cols * 4);
        for (size_t r = 0; r < rows; r++) {
            if (f == FORM_F32) {
                gb_bytes(&data, src + r * cols, cols * 4);
                continue;
            }
            size_t nb = encode_row(f, src + r * cols, cols, bytes, values);
            if (as_f32) gb_bytes(&data, values, cols * 4);
            else gb_bytes(&data, bytes, nb);
        }
        free(values);
        free(bytes);
    }
    gb_pad(&head, 32);
    FILE *fo = fopen(out_path, "wb");
    assert_non_null(fo);
    assert_int_equal(fwrite(head.data, 1, head.size, fo), head.size);
    assert_int_equal(fwrite(data.data, 1, data.size, fo), data.size);
    fclose(fo);
    gb_free(&head);
    gb_free(&data);
    sy_gguf_close(g);
}

/* All logits of a 64-token teacher-forced prefix of the reference story. */
static float *story_logits(const char *path, size_t *n_out, char *dtype, size_t dtype_size) {
    /* f32 KV: the weight paths sum in different orders (last-bit differences), which an f16 cache can round to
     * neighbouring values; this test is about the weights, so the cache must not amplify those bits. */
    sy_option opts[] = {{"threads", "2"}, {"cache_type_k", "f32"}, {"cache_type_v", "f32"}};
    sy_model *m = NULL;
    if (api->load(path, opts, 3, &m) != SY_OK) fail_msg("load %s: %s", path, api->error_message());
    sy_model_info info = {.struct_size = sizeof info};
    assert_int_equal(api->model_info(m, &info), SY_OK);
    snprintf(dtype, dtype_size, "%s", info.weight_dtype);
    const char *story = "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
                        "park. One day, she saw a big, red ball. She wanted to play with it, but it was too high.";
    int32_t ids[128];
    size_t n;
    assert_int_equal(api->tokenize(m, story, strlen(story), SY_TOKENIZE_ADD_SPECIAL, ids, 128, &n), SY_OK);
    if (n > 64) n = 64;
    float *logits = malloc(n * N_VOCAB * sizeof(float));
    sy_seq *s;
    assert_int_equal(api->seq_create(m, &s), SY_OK);
    assert_int_equal(decode_one(m, s, ids, (uint32_t)n, (uint32_t)n, logits, NULL), SY_OK);
    api->seq_free(m, s);
    api->unload(m);
    *n_out = n;
    return logits;
}

/* The plugin's F16, BF16, Q8_0 and Q4_0 paths against F32 files holding the same values: equal up to the
 * rounding of the activations (8-bit per block of 32 for the quantized types). A wrong block layout, scale or
 * nibble order would be far outside these bounds. */
static void test_quantized_weights_match_their_values(void **state) {
    (void)state;
    static const struct {
        weight_form form;
        const char *dtype;
        float max_abs_diff; /* logits are of magnitude ~10 */
        double max_rel_rms;
    } cases[] = {
        {FORM_F16, "f16", 1e-3f, 1e-5},
        {FORM_BF16, "bf16", 1e-3f, 1e-5},
        {FORM_Q8_0, "q8_0", 1.0f, 0.02},
        {FORM_Q4_0, "q4_0", 1.0f, 0.02},
    };
    char dir[] = "/tmp/sy-gq-quant-XXXXXX";
    assert_non_null(mkdtemp(dir));
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char quant_path[256], ref_path[256], dtype[32], ref_dtype[32];
        snprintf(quant_path, sizeof quant_path, "%s/%s.gguf", dir, cases[c].dtype);
        snprintf(ref_path, sizeof ref_path, "%s/%s-as-f32.gguf", dir, cases[c].dtype);
        write_variant(quant_path, cases[c].form, false);
        write_variant(ref_path, cases[c].form, true);
        size_t n, n_ref;
        float *got = story_logits(quant_path, &n, dtype, sizeof dtype);
        float *want = story_logits(ref_path, &n_ref, ref_dtype, sizeof ref_dtype);
        assert_int_equal(n, n_ref);
        assert_string_equal(dtype, cases[c].dtype);
        assert_string_equal(ref_dtype, "f32");
        float worst = 0;
        double sq_diff = 0, sq_logit = 0;
        size_t agree = 0;
        for (size_t i = 0; i < n; i++) {
            for (size_t v = 0; v < N_VOCAB; v++) {
                float d = fabsf(got[i * N_VOCAB + v] - want[i * N_VOCAB + v]);
                if (d > worst) worst = d;
                sq_diff += (double)d * d;
                sq_logit += (double)want[i * N_VOCAB + v] * want[i * N_VOCAB + v];
            }
            agree += argmax(got + i * N_VOCAB) == argmax(want + i * N_VOCAB);
        }
        double rel_rms = sqrt(sq_diff / sq_logit);
        fprintf(stderr, "%s: max |logit diff| %.5f, relative rms diff %.5f, argmax agrees at %zu of %zu\n",
                cases[c].dtype, (double)worst, rel_rms, agree, n);
        if (worst > cases[c].max_abs_diff || rel_rms > cases[c].max_rel_rms)
            fail_msg("%s: logits differ by up to %f (relative rms %f)", cases[c].dtype, (double)worst, rel_rms);
        assert_true(agree * 100 >= n * 95);
        free(got);
        free(want);
        unlink(quant_path);
        unlink(ref_path);
    }
    rmdir(dir);
}

/* ---- the architecture table against llama.cpp ---- */

/* The closed formulas of tools/oracle/arch_logits.py for the tensors the qwen variants add. */
static float arch_variant_bias(uint32_t layer, uint32_t i, uint32_t salt) {
    return (float)((int)((i * 7 + layer * 13 + salt) % 17) - 8) / 64.0f;
}
static float arch_variant_norm(uint32_t layer, uint32_t i, uint32_t salt) {
    return 1.0f + (float)((int)((i * 5 + layer * 3 + salt) % 9) - 4) / 16.0f;
}

/* Re-serializes one metadata value (the types stories260K uses). */
static void copy_value(gguf_buf *b, const sy_gguf *g, uint64_t kv) {
    const char *str;
    size_t len;
    uint64_t u;
    double f;
    sy_gguf_type et;
    uint64_t count;
    switch (sy_gguf_kv_type(g, kv)) {
    case SY_GGUF_UINT32: assert_true(sy_gguf_kv_uint(g, kv, &u)); gb_u32(b, (uint32_t)u); break;
    case SY_GGUF_FLOAT32: assert_true(sy_gguf_kv_float(g, kv, &f)); gb_f32(b, (float)f); break;
    case SY_GGUF_STRING:
        assert_true(sy_gguf_kv_string(g, kv, &str, &len));
        gb_u64(b, len);
        gb_bytes(b, str, len);
        break;
    case SY_GGUF_ARRAY:
        assert_true(sy_gguf_kv_array(g, kv, &et, &count));
        gb_u32(b, et);
        gb_u64(b, count);
        for (uint64_t i = 0; i < count; i++) {
            int64_t v;
            if (et == SY_GGUF_STRING) {
                assert_true(sy_gguf_array_string(g, kv, i, &str, &len));
                gb_u64(b, len);
                gb_bytes(b, str, len);
            } else if (et == SY_GGUF_FLOAT32) {
                assert_true(sy_gguf_array_float(g, kv, i, &f));
                gb_f32(b, (float)f);
            } else {
                assert_int_equal(et, SY_GGUF_INT32);
                assert_true(sy_gguf_array_int(g, kv, i, &v));
                gb_i32(b, (int32_t)v);
            }
        }
        break;
    default: fail_msg("unexpected metadata type of %s", sy_gguf_kv_key(g, kv));
    }
}

/* stories260K as `arch`: keys "llama.*" renamed "<arch>.*", plus q/k/v biases (qwen2) or q/k norms (qwen3). */
static void write_arch_variant(const char *out_path, const char *arch) {
    char err[256];
    sy_gguf *g = sy_gguf_open(model_path, err, sizeof err);
    if (g == NULL) fail_msg("%s", err);
    uint64_t n_layer;
    assert_int_equal(sy_gguf_get_uint(g, "llama.block_count", &n_layer), 1);
    bool qwen2 = strcmp(arch, "qwen2") == 0, qwen3 = strcmp(arch, "qwen3") == 0;
    uint64_t n_added = n_layer * (qwen2 ? 3 : qwen3 ? 2 : 0);

    gguf_buf head = {0}, data = {0};
    gb_header(&head, 3, sy_gguf_tensor_count(g) + n_added, sy_gguf_kv_count(g));
    for (uint64_t kv = 0; kv < sy_gguf_kv_count(g); kv++) {
        const char *key = sy_gguf_kv_key(g, kv);
        char renamed[256];
        if (strcmp(key, "general.architecture") == 0) {
            gb_kv_str(&head, key, arch);
            continue;
        }
        if (strncmp(key, "llama.", 6) == 0) snprintf(renamed, sizeof renamed, "%s.%s", arch, key + 6);
        else snprintf(renamed, sizeof renamed, "%s", key);
        gb_key(&head, renamed, sy_gguf_kv_type(g, kv));
        copy_value(&head, g, kv);
    }
    for (uint64_t t = 0; t < sy_gguf_tensor_count(g); t++) {
        const sy_gguf_tensor *ti = sy_gguf_tensor_at(g, t);
        gb_pad(&data, 32);
        gb_tensor_info(&head, ti->name, ti->n_dims, ti->dims, ti->type, data.size);
        gb_bytes(&data, ti->data, ti->n_bytes);
    }
    for (uint32_t l = 0; l < n_layer; l++) {
        for (uint32_t salt = 0; salt < (qwen2 ? 3u : qwen3 ? 2u : 0u); salt++) {
            char name[64], weight[64];
            snprintf(weight, sizeof weight, "blk.%u.attn_%c.weight", l, "qkv"[salt]);
            if (qwen2) snprintf(name, sizeof name, "blk.%u.attn_%c.bias", l, "qkv"[salt]);
            else snprintf(name, sizeof name, "blk.%u.attn_%c_norm.weight", l, "qk"[salt]);
            uint64_t n = qwen2 ? sy_gguf_find_tensor(g, weight)->dims[1] : 8 /* head_dim */;
            gb_pad(&data, 32);
            gb_tensor_info(&head, name, 1, &n, 0, data.size);
            for (uint32_t i = 0; i < n; i++)
                gb_f32(&data, qwen2 ? arch_variant_bias(l, i, salt) : arch_variant_norm(l, i, salt));
        }
    }
    gb_pad(&head, 32);
    FILE *fo = fopen(out_path, "wb");
    assert_non_null(fo);
    assert_int_equal(fwrite(head.data, 1, head.size, fo), head.size);
    assert_int_equal(fwrite(data.data, 1, data.size, fo), data.size);
    fclose(fo);
    gb_free(&head);
    gb_free(&data);
    sy_gguf_close(g);
}

/* llama (the file itself), qwen2 (neox RoPE + q/k/v biases) and qwen3 (neox RoPE + per-head q/k RMSNorm) give
 * llama.cpp's logits (arch-logits.json, from tools/oracle/arch_logits.py). */
static void test_architectures_match_llama_cpp(void **state) {
    (void)state;
    const char *src = getenv("SY_SOURCE_DIR");
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/fixtures/stories260K/arch-logits.json", src ? src : ".");
    size_t size;
    char *json = read_file(path, &size);
    assert_non_null(json);
    cJSON *doc = cJSON_Parse(json);
    free(json);
    assert_non_null(doc);
    const cJSON *jt = cJSON_GetObjectItem(doc, "tokens");
    int32_t tokens[64];
    uint32_t n = (uint32_t)cJSON_GetArraySize(jt);
    assert_true(n > 0 && n <= 64);
    for (uint32_t i = 0; i < n; i++) tokens[i] = cJSON_GetArrayItem(jt, (int)i)->valueint;

    char dir[] = "/tmp/sy-gq-arch-XXXXXX";
    assert_non_null(mkdtemp(dir));
    const cJSON *arch;
    int n_archs = 0;
    cJSON_ArrayForEach(arch, cJSON_GetObjectItem(doc, "archs")) {
        char file[1100];
        snprintf(file, sizeof file, "%s/%s.gguf", dir, arch->string);
        if (strcmp(arch->string, "llama") == 0) snprintf(file, sizeof file, "%s", model_path);
        else write_arch_variant(file, arch->string);
        /* the oracle's KV cache is F32 (arch_logits.py), so only summation order differs */
        sy_option opt[] = {{"threads", "2"}, {"cache_type_k", "f32"}, {"cache_type_v", "f32"}};
        sy_model *m = NULL;
        if (api->load(file, opt, 3, &m) != SY_OK) fail_msg("%s: %s", arch->string, api->error_message());
        sy_model_info info = {.struct_size = sizeof info};
        assert_int_equal(api->model_info(m, &info), SY_OK);
        assert_string_equal(info.architecture, arch->string);
        float *logits = malloc((size_t)n * N_VOCAB * sizeof(float));
        sy_seq *s;
        assert_int_equal(api->seq_create(m, &s), SY_OK);
        assert_int_equal(decode_one(m, s, tokens, n, n, logits, NULL), SY_OK);
        const cJSON *pos;
        float worst = 0;
        cJSON_ArrayForEach(pos, arch) {
            int p = atoi(pos->string);
            assert_true(p >= 0 && (uint32_t)p < n);
            assert_int_equal(cJSON_GetArraySize(pos), N_VOCAB);
            for (int v = 0; v < N_VOCAB; v++) {
                float want = (float)cJSON_GetArrayItem(pos, v)->valuedouble;
                float d = fabsf(logits[(size_t)p * N_VOCAB + v] - want);
                if (d > worst) worst = d;
            }
        }
        fprintf(stderr, "%s: max |logit - llama.cpp| %.6f\n", arch->string, (double)worst);
        if (worst > 5e-4f) fail_msg("%s: logits differ from llama.cpp's by %f", arch->string, (double)worst);
        free(logits);
        api->seq_free(m, s);
        api->unload(m);
        if (strcmp(arch->string, "llama") != 0) unlink(file);
        n_archs++;
    }
    assert_int_equal(n_archs, 3);
    rmdir(dir);
    cJSON_Delete(doc);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_from_bos_matches_reference),
        cmocka_unit_test(test_model_info_and_tokenizer),
        cmocka_unit_test(test_batched_prefill_equals_incremental),
        cmocka_unit_test(test_several_sequences_in_one_call),
        cmocka_unit_test(test_fork_truncate_limits_and_cancel),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_quantized_weights_match_their_values),
        cmocka_unit_test(test_architectures_match_llama_cpp),
    };
    return cmocka_run_group_tests_name("gguf-quant stories260K", tests, setup, teardown);
}
