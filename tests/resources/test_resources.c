/* "sy.engine.resources/1" of every bundled engine against what its load then holds: the estimate must be within
 * 10% of memory_usage() right after the load and of the process's own growth, read from /proc: file-backed
 * mappings of the model's files for mapped_bytes (mapped weights count in RSS only once touched), anonymous RSS
 * (RssAnon, after malloc_trim on both sides) for resident_bytes. The models are random-weight checkpoints of
 * Qwen3 shape written here (24 MB of BF16 SafeTensors, and the same as a Q8_0 GGUF by `switchyard quantize`), big
 * enough that the model's own scratch, not the allocator's slack, is what is measured. `engine-resources
 * lfm2-cuda` checks lfm2-cuda alone (synthetic weights); it exits 77 (skipped) without the plugin or a GPU. */
#include <dlfcn.h>
#include <ftw.h>
#include <malloc.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include <switchyard/engine.h>

#include "quantizer.h"

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#ifndef UNDER_ASAN
#define UNDER_ASAN 0 /* shadow memory and quarantine make RSS say nothing about the engine there */
#endif

/* The checkpoint: Qwen3, 4 layers of 512 (8 heads of 64, 2 KV heads), FFN 1536, the 512-token tokenizer of the
 * qwen3-f32 fixture. */
enum { EMBD = 512, FF = 1536, LAYERS = 4, HEADS = 8, KV_HEADS = 2, HEAD_DIM = 64, VOCAB = 512 };

static char tmpdir[512], hf_dir[600], gguf_path[600], te_path[600];
static int skipped_engines;

/* ---- plugins ---- */

static void host_log(sy_log_level level, const char *plugin, const char *message) {
    if (level <= SY_LOG_WARN) fprintf(stderr, "[%s] %s\n", plugin, message);
}

static const sy_host_api host_api = {
    .struct_size = sizeof(sy_host_api),
    .abi_major = SY_ABI_VERSION_MAJOR,
    .abi_minor = SY_ABI_VERSION_MINOR,
    .host_version = "test",
    .log = host_log,
};

typedef struct plugin {
    void *handle;
    const sy_plugin_entry *entry;
    const sy_engine_api *api;
    const sy_engine_resources_api *res;
} plugin;

/* false when build/plugins/<name>.so is not there (not built); the test fails on any other problem. */
static bool plugin_open(const char *name, plugin *p) {
    memset(p, 0, sizeof *p);
    const char *b = getenv("SY_BUILD_DIR");
    char so[1024];
    snprintf(so, sizeof so, "%s/plugins/%s.so", b ? b : ".", name);
    if (access(so, R_OK) != 0) return false;
    p->handle = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    if (p->handle == NULL) fail_msg("dlopen %s: %s", so, dlerror());
    p->entry = dlsym(p->handle, SY_PLUGIN_ENTRY_SYMBOL);
    assert_non_null(p->entry);
    assert_int_equal(p->entry->init(&host_api), SY_OK);
    p->api = p->entry->get_interface(SY_ENGINE_INTERFACE_ID);
    p->res = p->entry->get_interface(SY_ENGINE_RESOURCES_INTERFACE_ID);
    assert_non_null(p->api);
    if (p->res == NULL) fail_msg("%s does not offer " SY_ENGINE_RESOURCES_INTERFACE_ID, name);
    assert_true(p->res->struct_size >= offsetof(sy_engine_resources_api, estimate) + sizeof p->res->estimate);
    return true;
}

static void plugin_close(plugin *p) {
    if (p->entry) p->entry->deinit();
    if (p->handle) dlclose(p->handle);
}

/* ---- the process, from /proc ---- */

/* RssAnon of /proc/self/status in bytes, after giving freed heap back so only live memory counts. */
static uint64_t rss_anon(void) {
    malloc_trim(0);
    FILE *f = fopen("/proc/self/status", "r");
    assert_non_null(f);
    char line[256];
    unsigned long long kb = 0;
    bool found = false;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "RssAnon: %llu kB", &kb) == 1) {
            found = true;
            break;
        }
    fclose(f);
    assert_true(found);
    return (uint64_t)kb * 1024;
}

/* Bytes of the mappings of files whose path starts with `prefix` (the model file, or the checkpoint folder). */
static uint64_t mapped_under(const char *prefix) {
    FILE *f = fopen("/proc/self/maps", "r");
    assert_non_null(f);
    char line[4096];
    uint64_t total = 0;
    size_t plen = strlen(prefix);
    while (fgets(line, sizeof line, f)) {
        unsigned long long lo, hi;
        int off = 0;
        if (sscanf(line, "%llx-%llx %*s %*s %*s %*s %n", &lo, &hi, &off) < 2 || off == 0) continue;
        char *path = line + off;
        path[strcspn(path, "\n")] = '\0';
        if (strncmp(path, prefix, plen) == 0) total += hi - lo;
    }
    fclose(f);
    return total;
}

/* ---- the comparison ---- */

static bool within_10pct(uint64_t a, uint64_t b) {
    uint64_t hi = a > b ? a : b, lo = a > b ? b : a;
    return (double)(hi - lo) <= 0.10 * (double)hi;
}

static void expect_close(const char *engine, const char *what, uint64_t estimate, uint64_t actual) {
    printf("  %-14s %-28s estimate %11llu  actual %11llu  (%+.1f%%)\n", engine, what, (unsigned long long)estimate,
           (unsigned long long)actual, actual ? 100.0 * ((double)estimate - (double)actual) / (double)actual : 0.0);
    if (!within_10pct(estimate, actual))
        fail_msg("%s: %s: the estimate %llu is not within 10%% of %llu", engine, what, (unsigned long long)estimate,
                 (unsigned long long)actual);
}

/* Estimate, then load with the same options and compare; `files` is the prefix of the model's files in /proc's
 * maps (NULL: the engine maps nothing). */
static void check_engine(const char *name, const char *path, const char *files, const sy_option *opts, size_t n_opts,
                         bool check_process) {
    plugin p;
    if (!plugin_open(name, &p)) fail_msg("build/plugins/%s.so is missing", name);
    sy_resource_estimate est = {.struct_size = sizeof est};
    if (p.res->estimate(path, opts, n_opts, &est) != SY_OK)
        fail_msg("%s: estimate of %s: %s", name, path, p.api->error_message());

    uint64_t rss0 = rss_anon(), map0 = files ? mapped_under(files) : 0;
    sy_model *m = NULL;
    if (p.api->load(path, opts, n_opts, &m) != SY_OK) fail_msg("%s: load %s: %s", name, path, p.api->error_message());
    uint64_t rss1 = rss_anon(), map1 = files ? mapped_under(files) : 0;
    sy_memory_usage u = {.struct_size = sizeof u};
    assert_int_equal(p.api->memory_usage(m, &u), SY_OK);

    printf("%s (%s):\n", name, path);
    expect_close(name, "mapped vs memory_usage", est.mapped_bytes, u.mapped_bytes);
    expect_close(name, "resident vs memory_usage", est.resident_bytes, u.resident_bytes);
    expect_close(name, "device vs memory_usage", est.device_bytes, u.device_bytes);
    if (check_process) {
        expect_close(name, "mapped vs file mappings", est.mapped_bytes, map1 - map0);
        if (!UNDER_ASAN) expect_close(name, "resident vs RssAnon growth", est.resident_bytes, rss1 > rss0 ? rss1 - rss0 : 0);
    }
    p.api->unload(m);
    plugin_close(&p);
}

/* ---- fixtures ---- */

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint16_t random_bf16(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    float v = ((float)(rng >> 40) / (float)(1u << 24) - 0.5f) * 0.1f;
    uint32_t bits;
    memcpy(&bits, &v, 4);
    return (uint16_t)(bits >> 16);
}

typedef struct tensor_spec {
    char name[96];
    uint64_t rows, cols; /* cols 0: a vector of rows */
} tensor_spec;

static size_t qwen3_tensors(tensor_spec *t) {
    size_t n = 0;
#define ADD(r, c, ...) (snprintf(t[n].name, sizeof t[n].name, __VA_ARGS__), t[n].rows = (r), t[n].cols = (c), n++)
    ADD(VOCAB, EMBD, "model.embed_tokens.weight");
    ADD(VOCAB, EMBD, "lm_head.weight");
    ADD(EMBD, 0, "model.norm.weight");
    for (int l = 0; l < LAYERS; l++) {
        ADD(EMBD, 0, "model.layers.%d.input_layernorm.weight", l);
        ADD(EMBD, 0, "model.layers.%d.post_attention_layernorm.weight", l);
        ADD(HEAD_DIM, 0, "model.layers.%d.self_attn.q_norm.weight", l);
        ADD(HEAD_DIM, 0, "model.layers.%d.self_attn.k_norm.weight", l);
        ADD(HEADS * HEAD_DIM, EMBD, "model.layers.%d.self_attn.q_proj.weight", l);
        ADD(KV_HEADS * HEAD_DIM, EMBD, "model.layers.%d.self_attn.k_proj.weight", l);
        ADD(KV_HEADS * HEAD_DIM, EMBD, "model.layers.%d.self_attn.v_proj.weight", l);
        ADD(EMBD, HEADS * HEAD_DIM, "model.layers.%d.self_attn.o_proj.weight", l);
        ADD(FF, EMBD, "model.layers.%d.mlp.gate_proj.weight", l);
        ADD(FF, EMBD, "model.layers.%d.mlp.up_proj.weight", l);
        ADD(EMBD, FF, "model.layers.%d.mlp.down_proj.weight", l);
    }
#undef ADD
    return n;
}

static void copy_file(const char *from, const char *to) {
    FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
    assert_non_null(a);
    assert_non_null(b);
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, a)) > 0) assert_int_equal(fwrite(buf, 1, n, b), n);
    fclose(a);
    assert_int_equal(fclose(b), 0);
}

static void write_checkpoint(const char *dir) {
    const char *src = getenv("SY_SOURCE_DIR");
    static const char *const copied[] = {"tokenizer.json", "tokenizer_config.json", "generation_config.json"};
    for (size_t i = 0; i < 3; i++) {
        char a[1024], b[1024];
        snprintf(a, sizeof a, "%s/tests/fixtures/hf/qwen3-f32/%s", src ? src : ".", copied[i]);
        snprintf(b, sizeof b, "%s/%s", dir, copied[i]);
        copy_file(a, b);
    }
    char path[1024];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f,
            "{\"architectures\": [\"Qwen3ForCausalLM\"], \"model_type\": \"qwen3\", \"attention_bias\": false,\n"
            " \"bos_token_id\": 500, \"eos_token_id\": 500, \"pad_token_id\": 500, \"head_dim\": %d,\n"
            " \"hidden_act\": \"silu\", \"hidden_size\": %d, \"intermediate_size\": %d,\n"
            " \"max_position_embeddings\": 2048, \"num_attention_heads\": %d, \"num_hidden_layers\": %d,\n"
            " \"num_key_value_heads\": %d, \"rms_norm_eps\": 1e-06, \"rope_theta\": 10000.0,\n"
            " \"tie_word_embeddings\": false, \"torch_dtype\": \"bfloat16\", \"vocab_size\": %d}\n",
            HEAD_DIM, EMBD, FF, HEADS, LAYERS, KV_HEADS, VOCAB);
    assert_int_equal(fclose(f), 0);

    tensor_spec t[3 + 11 * LAYERS];
    size_t n = qwen3_tensors(t);
    char *header = malloc(1 << 16);
    assert_non_null(header);
    size_t h = 0;
    uint64_t off = 0;
    h += (size_t)snprintf(header + h, (1 << 16) - h, "{");
    for (size_t i = 0; i < n; i++) {
        uint64_t bytes = t[i].rows * (t[i].cols ? t[i].cols : 1) * 2;
        if (t[i].cols)
            h += (size_t)snprintf(header + h, (1 << 16) - h, "%s\"%s\":{\"dtype\":\"BF16\",\"shape\":[%llu,%llu],"
                                  "\"data_offsets\":[%llu,%llu]}", i ? "," : "", t[i].name,
                                  (unsigned long long)t[i].rows, (unsigned long long)t[i].cols,
                                  (unsigned long long)off, (unsigned long long)(off + bytes));
        else
            h += (size_t)snprintf(header + h, (1 << 16) - h, "%s\"%s\":{\"dtype\":\"BF16\",\"shape\":[%llu],"
                                  "\"data_offsets\":[%llu,%llu]}", i ? "," : "", t[i].name,
                                  (unsigned long long)t[i].rows, (unsigned long long)off,
                                  (unsigned long long)(off + bytes));
        off += bytes;
    }
    h += (size_t)snprintf(header + h, (1 << 16) - h, "}");
    while (h % 8 != 0) header[h++] = ' ';
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    f = fopen(path, "wb");
    assert_non_null(f);
    uint64_t hlen = h;
    assert_int_equal(fwrite(&hlen, 8, 1, f), 1);
    assert_int_equal(fwrite(header, 1, h, f), h);
    free(header);
    uint16_t *row = malloc(FF * 2 > EMBD * 2 ? FF * 2 : EMBD * 2);
    assert_non_null(row);
    for (size_t i = 0; i < n; i++) {
        uint64_t rows = t[i].cols ? t[i].rows : 1, cols = t[i].cols ? t[i].cols : t[i].rows;
        for (uint64_t r = 0; r < rows; r++) {
            for (uint64_t c = 0; c < cols; c++) row[c] = t[i].cols ? random_bf16() : 0x3f80; /* norms: 1.0 */
            assert_int_equal(fwrite(row, 2, cols, f), cols);
        }
    }
    free(row);
    assert_int_equal(fclose(f), 0);
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

static int setup(void **state) {
    (void)state;
    const char *t = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/sy-resources-XXXXXX", t && *t ? t : "/tmp");
    if (mkdtemp(tmpdir) == NULL) return -1;
    snprintf(hf_dir, sizeof hf_dir, "%s/qwen3-random", tmpdir);
    snprintf(gguf_path, sizeof gguf_path, "%s/qwen3-random-q8_0.gguf", tmpdir);
    snprintf(te_path, sizeof te_path, "%s/test-model.txt", tmpdir);
    if (mkdir(hf_dir, 0755) != 0) return -1;
    write_checkpoint(hf_dir);
    char *argv[] = {"quantize", "--no-progress", hf_dir, gguf_path, "Q8_0", NULL};
    if (sy_quantize_main(5, argv) != 0) return -1;
    FILE *f = fopen(te_path, "w");
    if (f == NULL) return -1;
    fprintf(f, "switchyard-test-model\nn_vocab=65536\nn_layer=4\n");
    return fclose(f);
}

static int teardown(void **state) {
    (void)state;
    return nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* ---- tests ---- */

static const sy_option cpu_opts[] = {{"threads", "2"}, {"ctx_size", "1024"}};

static void test_qwen_cpu_mmap(void **state) {
    (void)state;
    check_engine("qwen-cpu-mmap", hf_dir, hf_dir, cpu_opts, 2, true);
}

static void test_gguf_quant(void **state) {
    (void)state;
    check_engine("gguf-quant", gguf_path, gguf_path, cpu_opts, 2, true);
}

/* The reference backend and the disk KV cache: other allocations, the same contract (memory_usage only: the disk
 * cache leaves its per-thread scratch unwritten until the first read). */
static void test_cpu_other_backends(void **state) {
    (void)state;
    const sy_option ref[] = {{"threads", "1"}, {"backend", "reference"}, {"ctx_size", "1024"}};
    check_engine("qwen-cpu-mmap", hf_dir, NULL, ref, 3, false);
    char kv_dir[700];
    snprintf(kv_dir, sizeof kv_dir, "%s/kv", tmpdir);
    assert_int_equal(mkdir(kv_dir, 0755), 0);
    const sy_option disk[] = {{"threads", "2"}, {"kv_cache_dir", kv_dir}, {"ctx_size", "1024"}};
    check_engine("gguf-quant", gguf_path, NULL, disk, 3, false);
}

static void test_test_engine(void **state) {
    (void)state;
    const sy_option opts[] = {{"device_mb", "96"}};
    check_engine("test-engine", te_path, NULL, opts, 1, true);
}

/* Bad input to estimate: what load refuses, estimate refuses. */
static void test_estimate_refusals(void **state) {
    (void)state;
    static const char *const names[] = {"qwen-cpu-mmap", "gguf-quant", "test-engine"};
    const char *paths[] = {hf_dir, gguf_path, te_path};
    for (int i = 0; i < 3; i++) {
        plugin p;
        if (!plugin_open(names[i], &p)) fail_msg("build/plugins/%s.so is missing", names[i]);
        sy_resource_estimate est = {.struct_size = sizeof est};
        char missing[700];
        snprintf(missing, sizeof missing, "%s/none", tmpdir);
        assert_int_not_equal(p.res->estimate(missing, NULL, 0, &est), SY_OK);
        const sy_option bad[] = {{i == 2 ? "n_ctx" : "ctx_size", "-1"}};
        assert_int_equal(p.res->estimate(paths[i], bad, 1, &est), SY_ERR_INVALID_ARGUMENT);
        assert_int_not_equal(p.res->estimate(paths[i], NULL, 0, NULL), SY_OK);
        /* a struct of the first field only is filled no further */
        sy_resource_estimate small = {.struct_size = sizeof(uint32_t), .mapped_bytes = 7};
        assert_int_equal(p.res->estimate(paths[i], NULL, 0, &small), SY_OK);
        assert_int_equal(small.mapped_bytes, 7);
        plugin_close(&p);
    }
    /* a GGUF whose header lies: cut off mid tensor table */
    char cut[700];
    snprintf(cut, sizeof cut, "%s/cut.gguf", tmpdir);
    FILE *a = fopen(gguf_path, "rb"), *b = fopen(cut, "wb");
    assert_non_null(a);
    assert_non_null(b);
    char buf[4096];
    assert_int_equal(fread(buf, 1, sizeof buf, a), sizeof buf);
    assert_int_equal(fwrite(buf, 1, sizeof buf, b), sizeof buf);
    fclose(a);
    fclose(b);
    plugin p;
    assert_true(plugin_open("gguf-quant", &p));
    sy_resource_estimate est = {.struct_size = sizeof est};
    assert_int_equal(p.res->estimate(cut, NULL, 0, &est), SY_ERR_FORMAT);
    plugin_close(&p);
}

/* lfm2-cuda: its synthetic weights of the LFM2-1.2B config; skipped without the plugin or a GPU. */
static void test_lfm2_cuda(void **state) {
    (void)state;
    plugin p;
    if (!plugin_open("lfm2-cuda", &p)) {
        skipped_engines++;
        skip();
    }
    const char *src = getenv("SY_SOURCE_DIR");
    char cfg[1024];
    snprintf(cfg, sizeof cfg, "%s/tests/fixtures/lfm2/lfm2-1.2b-config.json", src ? src : ".");
    const sy_option opts[] = {{"ctx_size", "2048"}, {"max_sequences", "4"}};
    sy_resource_estimate est = {.struct_size = sizeof est};
    sy_status st = p.res->estimate(cfg, opts, 2, &est);
    if (st == SY_ERR_NO_DEVICE) {
        printf("lfm2-cuda: %s: skipped\n", p.api->error_message());
        plugin_close(&p);
        skipped_engines++;
        skip();
    }
    plugin_close(&p);
    assert_int_equal(st, SY_OK);
    check_engine("lfm2-cuda", cfg, NULL, opts, 2, false);
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "lfm2-cuda") == 0) {
        const struct CMUnitTest gpu[] = {cmocka_unit_test(test_lfm2_cuda)};
        int failed = cmocka_run_group_tests(gpu, NULL, NULL);
        return failed == 0 && skipped_engines > 0 ? 77 : failed;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qwen_cpu_mmap),      cmocka_unit_test(test_gguf_quant),
        cmocka_unit_test(test_cpu_other_backends), cmocka_unit_test(test_test_engine),
        cmocka_unit_test(test_estimate_refusals),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
