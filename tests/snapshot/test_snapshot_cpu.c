/*
 * Warm-KV snapshots of the bundled CPU engines (cpu_engine.c's "sy.engine.state/1"), through the host's snapshot
 * writer and reader: a prefilled sequence is saved, the model loaded afresh, the snapshot restored, and greedy
 * generation must equal the uninterrupted run token for token; a prompt sharing only the first part restores only
 * whole matching chunks. gguf-quant on stories260K (KV in RAM and in the disk cache) and on the lfm2 fixture
 * (conv state; chunk ends outside the kept history are refused and the host picks others), qwen-cpu-mmap on a
 * Hugging Face fixture. Each KV cache type (cache_type_k/v: f32, f16, q8_0, and K and V apart) round-trips in its
 * own layout, byte for byte, and a snapshot of one type is refused by a model of another, naming both layouts.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "snapshot_fixture.h"
#include "base/util.h"

static char dir[128];
static sy_plugin_registry reg;

static int group_setup(void **state) {
    (void)state;
    const char *build = getenv("SY_BUILD_DIR");
    if (build == NULL) return fprintf(stderr, "SY_BUILD_DIR is not set (run through ctest)\n"), -1;
    snprintf(dir, sizeof dir, "/tmp/sy-snapcpu-XXXXXX");
    if (mkdtemp(dir) == NULL) return -1;
    char plugins[256], link_path[300], target[4096], kv[256];
    snprintf(plugins, sizeof plugins, "%s/plugins", dir);
    snprintf(kv, sizeof kv, "%s/kv", dir);
    if (mkdir(plugins, 0700) != 0 || mkdir(kv, 0700) != 0) return -1;
    static const char *const names[] = {"gguf-quant", "qwen-cpu-mmap"};
    for (size_t i = 0; i < 2; i++) {
        snprintf(target, sizeof target, "%s/plugins/%s.so", build, names[i]);
        snprintf(link_path, sizeof link_path, "%s/%s.so", plugins, names[i]);
        if (symlink(target, link_path) != 0) return fprintf(stderr, "symlink %s: %s\n", target, strerror(errno)), -1;
    }
    char err[512];
    if (sy_plugin_registry_load_dir(&reg, plugins, err, sizeof err) != 0)
        return fprintf(stderr, "plugin registry: %s\n", err), -1;
    return 0;
}

static int group_teardown(void **state) {
    (void)state;
    sy_plugin_registry_close(&reg);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

typedef struct engine_case {
    const char *plugin;
    const char *model; /* relative to SY_SOURCE_DIR */
    bool disk_kv;
    bool recurrent; /* lfm2: only chunk ends within the kept conv history, so a prefix may restore nothing */
    const char *cache_type_k, *cache_type_v; /* NULL: the default (f16) */
    const char *layout;                      /* the state layout those types name */
} engine_case;

static void open_model(const engine_case *c, sy_loaded_model *lm) {
    char path[1024], kv[300], err[512];
    snprintf(path, sizeof path, "%s/%s", getenv("SY_SOURCE_DIR"), c->model);
    snprintf(kv, sizeof kv, "%s/kv", dir);
    sy_option opts[5] = {{"threads", "2"}, {"ctx_size", "512"}};
    size_t n_opts = 2;
    if (c->disk_kv) opts[n_opts++] = (sy_option){"kv_cache_dir", kv};
    if (c->cache_type_k) opts[n_opts++] = (sy_option){"cache_type_k", c->cache_type_k};
    if (c->cache_type_v) opts[n_opts++] = (sy_option){"cache_type_v", c->cache_type_v};
    if (sy_loaded_model_open(&reg, c->plugin, path, opts, n_opts, lm, err, sizeof err) != 0) {
        fprintf(stderr, "load: %s\n", err);
        fail();
    }
}

/* Prompt tokens inside every fixture's vocabulary: seeded, in [1, min(n_vocab, 256)). */
static int32_t *make_prompt(uint32_t seed, uint32_t n, uint32_t n_vocab) {
    int32_t *t = malloc(n * sizeof *t);
    assert_non_null(t);
    uint32_t span = (n_vocab < 256 ? n_vocab : 256) - 1, x = seed * 2654435761u + 1;
    for (uint32_t i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        t[i] = (int32_t)(1 + (x >> 8) % span);
    }
    return t;
}

/* Greedy continuation of `seq` after appending `next` (N_GEN tokens into out). */
enum { N_PROMPT = 300, N_SHARED = 260, N_GEN = 12 };

static void continue_greedy(const sy_loaded_model *lm, sy_seq *seq, int32_t next, int32_t *out) {
    float *logits = malloc(lm->info.n_vocab * sizeof *logits);
    assert_non_null(logits);
    snap_decode(lm, seq, &next, 1, logits);
    snap_greedy(lm, seq, logits, N_GEN, out);
    free(logits);
}

static sy_snapshot_error restore(const sy_loaded_model *lm, const char *path, const int32_t *want, uint32_t n_want,
                                 sy_seq **out, uint32_t *n_out, char *err, size_t err_size) {
    sy_snapshot *snap = NULL;
    sy_snapshot_error e = sy_snapshot_open_file(path, NULL, &snap, err, err_size);
    if (e != SY_SNAPSHOT_OK) return e;
    sy_snapshot_key key;
    snap_key(lm, &key);
    e = sy_snapshot_model_accepts(lm, sy_snapshot_get_key(snap), &key, err, err_size); /* as the store asks */
    if (e == SY_SNAPSHOT_OK)
        e = sy_snapshot_restore(snap, lm->engine, lm->plugin->engine_state, lm->model, want, n_want, 0, out, n_out, err,
                                err_size);
    sy_snapshot_close(snap);
    return e;
}

static void run_case(const engine_case *c) {
    char snap_path[300];
    snprintf(snap_path, sizeof snap_path, "%s/%s%s-%s-%s.sysnap", dir, strrchr(c->model, '/') + 1,
             c->disk_kv ? "-disk" : "", c->cache_type_k ? c->cache_type_k : "", c->cache_type_v ? c->cache_type_v : "");
    int32_t ref[N_GEN], got[N_GEN], ref_b[N_GEN], got_b[N_GEN];
    int32_t *prompt, *prompt_b;
    /* the uninterrupted runs: the full prompt, and one sharing only its first N_SHARED tokens */
    {
        sy_loaded_model lm;
        open_model(c, &lm);
        if (lm.plugin->engine_state == NULL) {
            sy_loaded_model_close(&lm);
            fprintf(stderr, "%s does not export sy.engine.state/1 (get_interface)\n", c->plugin);
            skip();
        }
        prompt = make_prompt(7, N_PROMPT + 1, lm.info.n_vocab);
        prompt_b = make_prompt(7, N_PROMPT + 1, lm.info.n_vocab);
        for (uint32_t i = N_SHARED; i <= N_PROMPT; i++) prompt_b[i] = 1 + (prompt[i] % 50);
        sy_seq *seq = snap_sequence(&lm, prompt, N_PROMPT);
        sy_snapshot_key key;
        snap_key(&lm, &key);
        if (c->layout) assert_string_equal(key.layout, c->layout);
        sy_snapshot_write_stats stats = {0};
        char err[512] = "";
        sy_snapshot_error e = sy_snapshot_write_file(snap_path, &key, lm.plugin->engine_state, lm.model, seq, prompt,
                                                     N_PROMPT, NULL, &stats, err, sizeof err);
        if (e != SY_SNAPSHOT_OK) fprintf(stderr, "write: %s\n", err);
        assert_int_equal(e, SY_SNAPSHOT_OK);
        assert_true(stats.n_chunks >= 1);
        continue_greedy(&lm, seq, prompt[N_PROMPT], ref);
        lm.engine->seq_free(lm.model, seq);
        seq = snap_sequence(&lm, prompt_b, N_PROMPT);
        continue_greedy(&lm, seq, prompt_b[N_PROMPT], ref_b);
        lm.engine->seq_free(lm.model, seq);
        sy_loaded_model_close(&lm);
    }
    /* after a fresh load: restore all, and restore the shared prefix then decode the rest of prompt_b */
    {
        sy_loaded_model lm;
        open_model(c, &lm);
        sy_seq *seq = NULL;
        uint32_t n = 0;
        char err[512] = "";
        sy_snapshot_error e = restore(&lm, snap_path, NULL, 0, &seq, &n, err, sizeof err);
        if (e != SY_SNAPSHOT_OK) fprintf(stderr, "restore: %s\n", err);
        assert_int_equal(e, SY_SNAPSHOT_OK);
        assert_int_equal(n, N_PROMPT);
        assert_int_equal(lm.engine->seq_length(lm.model, seq), N_PROMPT);
        continue_greedy(&lm, seq, prompt[N_PROMPT], got);
        assert_memory_equal(ref, got, sizeof ref);
        lm.engine->seq_free(lm.model, seq);

        seq = NULL;
        e = restore(&lm, snap_path, prompt_b, N_PROMPT, &seq, &n, err, sizeof err);
        if (e != SY_SNAPSHOT_OK) fprintf(stderr, "prefix restore: %s\n", err);
        assert_int_equal(e, SY_SNAPSHOT_OK);
        assert_true(n <= N_SHARED); /* whole chunks of the shared part only */
        if (!c->recurrent) assert_true(n > 0);
        if (seq == NULL) seq = snap_sequence(&lm, NULL, 0);
        assert_int_equal(lm.engine->seq_length(lm.model, seq), n);
        snap_decode(&lm, seq, prompt_b + n, N_PROMPT - n, NULL);
        continue_greedy(&lm, seq, prompt_b[N_PROMPT], got_b);
        assert_memory_equal(ref_b, got_b, sizeof ref_b);
        lm.engine->seq_free(lm.model, seq);
        sy_loaded_model_close(&lm);
    }
    free(prompt);
    free(prompt_b);
}

static const char stories[] = "tests/fixtures/stories260K/stories260K.gguf";

static void gguf_stories_ram(void **state) {
    (void)state;
    run_case(&(engine_case){"gguf-quant", stories, false, false, NULL, NULL, "sy-cpu-kv-f16-v1"});
}
static void gguf_stories_ram_f32(void **state) {
    (void)state;
    run_case(&(engine_case){"gguf-quant", stories, false, false, "f32", "f32", "sy-cpu-kv-f32-v1"});
}
static void gguf_stories_ram_q8_0(void **state) {
    (void)state;
    run_case(&(engine_case){"gguf-quant", stories, false, false, "q8_0", "q8_0", "sy-cpu-kv-q8_0-v1"});
}
static void gguf_stories_ram_k_f16_v_q8_0(void **state) {
    (void)state;
    run_case(&(engine_case){"gguf-quant", stories, false, false, "f16", "q8_0", "sy-cpu-kv-k-f16-v-q8_0-v1"});
}
static void gguf_stories_disk(void **state) {
    (void)state;
    run_case(&(engine_case){"gguf-quant", stories, true, false, NULL, NULL, "sy-cpu-kv-f16-v1"});
}
static void gguf_lfm2(void **state) {
    (void)state;
    run_case(&(engine_case){"gguf-quant", "tests/fixtures/lfm2/lfm2-f32.gguf", false, true, NULL, NULL,
                            "sy-cpu-kv-f16-conv-f32-v1"});
}
static void gguf_lfm2_q8_0(void **state) {
    (void)state;
    run_case(&(engine_case){"gguf-quant", "tests/fixtures/lfm2/lfm2-f32.gguf", false, true, "q8_0", "q8_0",
                            "sy-cpu-kv-q8_0-conv-f32-v1"});
}
static void qwen_cpu_mmap_qwen3(void **state) {
    (void)state;
    run_case(&(engine_case){"qwen-cpu-mmap", "tests/fixtures/hf/qwen3-f32", false, false, NULL, NULL, NULL});
}
static void qwen_cpu_mmap_qwen3_q8_0(void **state) {
    (void)state;
    run_case(&(engine_case){"qwen-cpu-mmap", "tests/fixtures/hf/qwen3-f32", false, false, "q8_0", "q8_0", NULL});
}
static void qwen_cpu_mmap_qwen3_disk(void **state) {
    (void)state;
    run_case(&(engine_case){"qwen-cpu-mmap", "tests/fixtures/hf/qwen3-f32", true, false, NULL, NULL, NULL});
}

/* A snapshot written by a cache of one type is not restored into a model of another: the key check names both
 * layouts, and the engine says it cannot read the other (its chunks' bytes are another size and meaning). */
static void other_cache_type_refused(void **state) {
    (void)state;
    static const char *const types[] = {"f32", "f16", "q8_0"};
    char snap_path[300];
    for (size_t w = 0; w < 3; w++) {
        engine_case writer = {"gguf-quant", stories, false, false, types[w], types[w], NULL};
        snprintf(snap_path, sizeof snap_path, "%s/cross-%s.sysnap", dir, types[w]);
        sy_loaded_model lm;
        open_model(&writer, &lm);
        int32_t *prompt = make_prompt(3, 40, lm.info.n_vocab);
        sy_seq *seq = snap_sequence(&lm, prompt, 40);
        sy_snapshot_key key;
        snap_key(&lm, &key);
        char err[512] = "";
        assert_int_equal(sy_snapshot_write_file(snap_path, &key, lm.plugin->engine_state, lm.model, seq, prompt, 40,
                                                NULL, NULL, err, sizeof err),
                         SY_SNAPSHOT_OK);
        lm.engine->seq_free(lm.model, seq);
        sy_loaded_model_close(&lm);
        free(prompt);
        for (size_t r = 0; r < 3; r++) {
            engine_case reader = {"gguf-quant", stories, false, false, types[r], types[r], NULL};
            open_model(&reader, &lm);
            sy_seq *got = NULL;
            uint32_t n = 0;
            err[0] = '\0';
            sy_snapshot_error e = restore(&lm, snap_path, NULL, 0, &got, &n, err, sizeof err);
            if (r == w) {
                assert_int_equal(e, SY_SNAPSHOT_OK);
                assert_int_equal(n, 40);
                lm.engine->seq_free(lm.model, got);
            } else {
                assert_int_equal(e, SY_SNAPSHOT_ERR_KEY);
                char want[64];
                snprintf(want, sizeof want, "sy-cpu-kv-%s-v1", types[w]);
                if (strstr(err, want) == NULL || strstr(err, "cannot read") == NULL)
                    fail_msg("writer %s, reader %s: '%s' does not name the layout and the refusal", types[w], types[r],
                             err);
                assert_null(got);
            }
            sy_loaded_model_close(&lm);
        }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(gguf_stories_ram),         cmocka_unit_test(gguf_stories_ram_f32),
        cmocka_unit_test(gguf_stories_ram_q8_0),    cmocka_unit_test(gguf_stories_ram_k_f16_v_q8_0),
        cmocka_unit_test(gguf_stories_disk),        cmocka_unit_test(gguf_lfm2),
        cmocka_unit_test(gguf_lfm2_q8_0),           cmocka_unit_test(qwen_cpu_mmap_qwen3),
        cmocka_unit_test(qwen_cpu_mmap_qwen3_q8_0), cmocka_unit_test(qwen_cpu_mmap_qwen3_disk),
        cmocka_unit_test(other_cache_type_refused),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
