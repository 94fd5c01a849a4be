/* qwen-cpu-mmap through its ABI against the transformers oracle fixtures (tests/fixtures/hf, see
 * tools/oracle/README.md): logits, greedy continuations, the tokenizer's ids; then the same checks for the disk KV
 * cache and the reference backend, the engine contract (batches, fork, truncate, cancel, memory), and hostile
 * checkpoints and options, each of which must be refused with a message naming what is wrong. */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "qwen_test_util.h"

#define REL_TOL 1e-3f /* of the logit range, for F32 compute against transformers' F32 compute */

static float tolerance(const float *expected, uint32_t n) { return REL_TOL * qt_range(expected, n); }

/* Logits of every position of `ids` (n_logits = all) through a fresh sequence. */
static float *all_positions(sy_model *m, const int32_t *ids, size_t n, uint32_t n_vocab) {
    float *logits = malloc(n * n_vocab * sizeof *logits);
    sy_seq *s;
    assert_int_equal(qt_api->seq_create(m, &s), SY_OK);
    if (qt_decode(m, s, ids, (uint32_t)n, (uint32_t)n, logits) != SY_OK) fail_msg("%s", qt_api->error_message());
    qt_api->seq_free(m, s);
    return logits;
}

static int top5_overlap(const float *logits, uint32_t n_vocab, const int32_t *expected_top5) {
    int32_t top[5];
    for (int k = 0; k < 5; k++) {
        int32_t best = -1;
        for (uint32_t i = 0; i < n_vocab; i++) {
            bool taken = false;
            for (int j = 0; j < k; j++) taken |= top[j] == (int32_t)i;
            if (!taken && (best < 0 || logits[i] > logits[best])) best = (int32_t)i;
        }
        top[k] = best;
    }
    int overlap = 0;
    for (int a = 0; a < 5; a++)
        for (int b = 0; b < 5; b++) overlap += top[a] == expected_top5[b];
    return overlap;
}

/* The oracle checks of one model (core or reference backend) on one fixture. */
static void check_logits(sy_model *m, const qt_fixture *f) {
    const uint32_t V = f->n_vocab;
    for (size_t p = 0; p < f->n_prompts; p++) {
        const qt_prompt *q = &f->prompts[p];
        float *logits = all_positions(m, q->ids, q->n_ids, V);
        const float *last = logits + (q->n_ids - 1) * V;
        float err = qt_max_abs_diff(last, q->last_logits, V), tol = tolerance(q->last_logits, V);
        if (!(err <= tol)) fail_msg("%s prompt %zu: last logits differ by %g (tolerance %g)", f->name, p, err, tol);
        assert_int_equal(qt_argmax(last, V), qt_argmax(q->last_logits, V));
        for (size_t i = 0; q->all_logits && i < q->n_ids; i++) {
            const float *row = logits + i * V, *want = q->all_logits + i * V;
            /* BF16 checkpoints: the argmax at every position and top-5 overlap of at least 4 */
            if (qt_argmax(row, V) != q->all_top5[i][0])
                fail_msg("%s position %zu: argmax %d, oracle %d", f->name, i, qt_argmax(row, V), q->all_top5[i][0]);
            int overlap = top5_overlap(row, V, q->all_top5[i]);
            if (overlap < 4) fail_msg("%s position %zu: top-5 overlap %d", f->name, i, overlap);
            /* F32 compute on upcast weights either way, so the F32 tolerance holds for BF16 too */
            err = qt_max_abs_diff(row, want, V);
            tol = tolerance(want, V);
            if (!(err <= tol)) fail_msg("%s position %zu: logits differ by %g (tolerance %g)", f->name, i, err, tol);
        }
        free(logits);
    }
}

/* Greedy continuations equal the oracle's, except after a step whose margin is under the logit tolerance. */
static void check_greedy(sy_model *m, const qt_fixture *f, size_t n_prompts) {
    for (size_t p = 0; p < n_prompts && p < f->n_prompts; p++) {
        const qt_prompt *q = &f->prompts[p];
        int32_t got[QT_GREEDY];
        qt_greedy(m, q->ids, q->n_ids, QT_GREEDY, got, NULL);
        float tol = tolerance(q->last_logits, f->n_vocab);
        for (size_t i = 0; i < QT_GREEDY; i++) {
            if (got[i] == q->greedy[i]) continue;
            if (q->margins[i] < tol) break; /* a near tie: the rest is not comparable */
            fail_msg("%s prompt %zu: greedy token %zu is %d, oracle %d (margin %g)", f->name, p, i, got[i],
                     q->greedy[i], q->margins[i]);
        }
    }
}

static void test_oracle_logits(void **state) {
    (void)state;
    for (size_t i = 0; i < qt_n_fixtures; i++) {
        qt_fixture f;
        qt_fixture_load(qt_fixtures[i], &f);
        sy_model *m = qt_load(f.dir, "threads", "2", NULL);
        check_logits(m, &f);
        qt_api->unload(m);
        qt_fixture_free(&f);
    }
}

static void test_oracle_greedy(void **state) {
    (void)state;
    for (size_t i = 0; i < qt_n_fixtures; i++) {
        qt_fixture f;
        qt_fixture_load(qt_fixtures[i], &f);
        sy_model *m = qt_load(f.dir, "threads", "2", NULL);
        check_greedy(m, &f, f.n_prompts);
        qt_api->unload(m);
        m = qt_load(f.dir, "threads", "1", NULL); /* one thread: the same tokens */
        check_greedy(m, &f, 1);
        qt_api->unload(m);
        qt_fixture_free(&f);
    }
}

static void test_tokenizer_gives_fixture_ids(void **state) {
    (void)state;
    for (size_t i = 0; i < qt_n_fixtures; i++) {
        qt_fixture f;
        qt_fixture_load(qt_fixtures[i], &f);
        sy_model *m = qt_load(f.dir, NULL);
        for (size_t p = 0; p < f.n_prompts; p++) {
            const qt_prompt *q = &f.prompts[p];
            if (strcmp(q->text, "(single token)") == 0) continue;
            int32_t ids[256];
            size_t n;
            assert_int_equal(qt_api->tokenize(m, q->text, strlen(q->text), 0, ids, 256, &n), SY_OK);
            assert_int_equal(n, q->n_ids);
            assert_memory_equal(ids, q->ids, n * sizeof *ids);
            /* too small a buffer: the count, and a retry works */
            assert_int_equal(qt_api->tokenize(m, q->text, strlen(q->text), 0, ids, 2, &n), SY_ERR_BUFFER_TOO_SMALL);
            assert_int_equal(n, q->n_ids);
        }
        /* special tokens are text unless PARSE_SPECIAL */
        int32_t ids[64];
        size_t n;
        assert_int_equal(qt_api->tokenize(m, "<|im_start|>", 12, SY_TOKENIZE_PARSE_SPECIAL, ids, 64, &n), SY_OK);
        assert_int_equal(n, 1);
        assert_int_equal(ids[0], 501);
        assert_int_equal(qt_api->tokenize(m, "<|im_start|>", 12, 0, ids, 64, &n), SY_OK);
        assert_true(n > 1);
        char bytes[64];
        assert_int_equal(qt_api->token_to_bytes(m, 502, bytes, sizeof bytes, &n), SY_OK);
        assert_int_equal(n, 10);
        assert_memory_equal(bytes, "<|im_end|>", 10);
        assert_int_equal(qt_api->token_to_bytes(m, 507, bytes, sizeof bytes, &n), SY_OK); /* unused row */
        assert_int_equal(n, 0);
        assert_int_equal(qt_api->token_to_bytes(m, 512, bytes, sizeof bytes, &n), SY_ERR_INVALID_ARGUMENT);
        assert_int_equal(qt_api->token_to_bytes(m, 502, bytes, 3, &n), SY_ERR_BUFFER_TOO_SMALL);
        assert_int_equal(n, 10);
        qt_api->unload(m);
        qt_fixture_free(&f);
    }
}

static void test_model_info(void **state) {
    (void)state;
    char fingerprints[8][33];
    for (size_t i = 0; i < qt_n_fixtures; i++) {
        qt_fixture f;
        qt_fixture_load(qt_fixtures[i], &f);
        assert_int_equal(qt_api->probe(f.dir), SY_OK);
        sy_model *m = qt_load(f.dir, "ctx_size", "200", NULL);
        sy_model_info info = {.struct_size = sizeof info};
        assert_int_equal(qt_api->model_info(m, &info), SY_OK);
        assert_string_equal(info.architecture, strncmp(f.name, "llama", 5) == 0 ? "llama"
                                               : strncmp(f.name, "qwen2", 5) == 0 ? "qwen2"
                                                                                  : "qwen3");
        assert_string_equal(info.weight_dtype, f.bf16 ? "bf16" : "f32");
        assert_string_equal(info.name, f.name);
        assert_int_equal(info.n_vocab, 512);
        assert_int_equal(info.n_embd, 64);
        assert_int_equal(info.n_layer, strncmp(f.name, "llama", 5) == 0 ? 3 : 2);
        assert_int_equal(info.n_ctx_train, 256);
        assert_int_equal(info.n_ctx, 200);
        assert_int_equal(info.eos_token, 502); /* tokenizer_config's eos_token, <|im_end|> */
        assert_int_equal(info.bos_token, 500);
        assert_int_equal(info.pad_token, 500);
        assert_false(info.add_bos);
        assert_non_null(info.chat_template);
        assert_non_null(strstr(info.chat_template, "<|im_start|>"));
        assert_true(info.n_params > 50000);
        assert_int_equal(strlen(info.fingerprint), 32);
        snprintf(fingerprints[i], sizeof fingerprints[i], "%s", info.fingerprint);
        for (size_t j = 0; j < i; j++) assert_string_not_equal(fingerprints[i], fingerprints[j]);
        /* EOS of generation_config (502, 500) and tokenizer_config end generation; unused rows are flagged */
        assert_true(qt_api->token_flags(m, 502) & SY_TOKEN_END_OF_GENERATION);
        assert_true(qt_api->token_flags(m, 500) & SY_TOKEN_END_OF_GENERATION);
        assert_true(qt_api->token_flags(m, 501) & SY_TOKEN_CONTROL);
        assert_false(qt_api->token_flags(m, 501) & SY_TOKEN_END_OF_GENERATION);
        assert_int_equal(qt_api->token_flags(m, 100), SY_TOKEN_NORMAL);
        assert_int_equal(qt_api->token_flags(m, 510), SY_TOKEN_UNUSED);
        assert_int_equal(qt_api->token_flags(m, 512), SY_TOKEN_INVALID);
        assert_int_equal(qt_api->token_flags(m, -1), SY_TOKEN_INVALID);
        /* an older, shorter struct gets only what fits */
        sy_model_info small;
        memset(&small, 0xAB, sizeof small);
        small.struct_size = offsetof(sy_model_info, name);
        assert_int_equal(qt_api->model_info(m, &small), SY_OK);
        assert_string_equal(small.architecture, info.architecture);
        assert_int_equal(((unsigned char *)&small)[offsetof(sy_model_info, weight_dtype)], 0xAB);
        qt_api->unload(m);
        /* the same checkpoint again: the same fingerprint */
        m = qt_load(f.dir, NULL);
        assert_int_equal(qt_api->model_info(m, &info), SY_OK);
        assert_string_equal(info.fingerprint, fingerprints[i]);
        assert_int_equal(info.n_ctx, 256);
        qt_api->unload(m);
        qt_fixture_free(&f);
    }
}

static void test_memory_usage(void **state) {
    (void)state;
    qt_fixture f;
    qt_fixture_load("llama-gqa-f32-sharded", &f);
    sy_model *m = qt_load(f.dir, NULL);
    sy_memory_usage u = {.struct_size = sizeof u};
    assert_int_equal(qt_api->memory_usage(m, &u), SY_OK);
    /* four shards of F32 weights, mapped, none copied */
    uint64_t shard_bytes = 0;
    for (int i = 1; i <= 4; i++) {
        char path[1200];
        snprintf(path, sizeof path, "%s/model-0000%d-of-00004.safetensors", f.dir, i);
        struct stat st;
        assert_int_equal(stat(path, &st), 0);
        shard_bytes += (uint64_t)st.st_size;
    }
    assert_true(u.mapped_bytes >= shard_bytes);
    assert_int_equal(u.kv_bytes, 0);
    assert_int_equal(u.device_bytes, 0);
    uint64_t idle = u.resident_bytes;
    sy_seq *s;
    assert_int_equal(qt_api->seq_create(m, &s), SY_OK);
    const qt_prompt *q = qt_all_logits_prompt(&f);
    float *logits = malloc(512 * sizeof *logits);
    assert_int_equal(qt_decode(m, s, q->ids, (uint32_t)q->n_ids, 1, logits), SY_OK);
    assert_int_equal(qt_api->memory_usage(m, &u), SY_OK);
    /* 3 layers x K,V x 32 values x 4 bytes per position, for at least the 38 positions */
    assert_true(u.kv_bytes >= 38ull * 3 * 2 * 32 * 4);
    assert_true(u.resident_bytes >= idle + u.kv_bytes);
    qt_api->seq_free(m, s);
    assert_int_equal(qt_api->memory_usage(m, &u), SY_OK);
    assert_int_equal(u.kv_bytes, 0);
    free(logits);
    qt_api->unload(m);
    qt_fixture_free(&f);
}

/* ---- the engine contract ---- */

static void test_batch_fork_truncate_cancel(void **state) {
    (void)state;
    qt_fixture f;
    qt_fixture_load("qwen3-f32", &f);
    const char *variants[][2] = {{NULL, NULL}, {"kv_cache_dir", NULL}};
    char *dir = qt_temp_dir();
    variants[1][1] = dir;
    const qt_prompt *a = &f.prompts[0], *b = qt_all_logits_prompt(&f);
    const uint32_t V = 512;
    for (size_t v = 0; v < 2; v++) {
        sy_model *m = variants[v][0] ? qt_load(f.dir, variants[v][0], variants[v][1], "kv_max_tokens", "1024", NULL)
                                     : qt_load(f.dir, NULL);
        /* two sequences in one call give what each gives alone */
        sy_seq *s1, *s2;
        assert_int_equal(qt_api->seq_create(m, &s1), SY_OK);
        assert_int_equal(qt_api->seq_create(m, &s2), SY_OK);
        float *la = malloc(2 * V * sizeof(float)), *lb = malloc(V * sizeof(float));
        sy_decode_item items[2] = {{sizeof(sy_decode_item), s1, a->ids, (uint32_t)a->n_ids, 2, la, NULL},
                                   {sizeof(sy_decode_item), s2, b->ids, (uint32_t)b->n_ids, 1, lb, NULL}};
        sy_decode_batch batch = {sizeof batch, 2, sizeof(sy_decode_item), items, NULL, NULL};
        assert_int_equal(qt_api->decode(m, &batch), SY_OK);
        assert_true(qt_max_abs_diff(la + V, a->last_logits, V) <= tolerance(a->last_logits, V));
        assert_true(qt_max_abs_diff(lb, b->last_logits, V) <= tolerance(b->last_logits, V));
        assert_int_equal(qt_api->seq_length(m, s1), a->n_ids);
        assert_int_equal(qt_api->seq_length(m, s2), b->n_ids);

        /* a sequence twice in a batch is refused and changes nothing */
        items[1].seq = s1;
        assert_int_equal(qt_api->decode(m, &batch), SY_ERR_INVALID_ARGUMENT);
        assert_int_equal(qt_api->seq_length(m, s1), a->n_ids);

        /* fork s2 at 20 tokens, truncate s2 to 25, then both continue with b's tokens 20.. and 25..: the last
         * logits equal b's own (the fork shares s2's positions on disk, so this checks copy-on-write too) */
        sy_seq *fork;
        assert_int_equal(qt_api->seq_fork(m, s2, 20, &fork), SY_OK);
        assert_int_equal(qt_api->seq_length(m, fork), 20);
        assert_int_equal(qt_api->seq_truncate(m, s2, 25), SY_OK);
        assert_int_equal(qt_api->seq_truncate(m, s2, 30), SY_ERR_INVALID_ARGUMENT);
        assert_int_equal(qt_decode(m, fork, b->ids + 20, (uint32_t)b->n_ids - 20, 1, lb), SY_OK);
        assert_true(qt_max_abs_diff(lb, b->last_logits, V) <= tolerance(b->last_logits, V));
        assert_int_equal(qt_decode(m, s2, b->ids + 25, (uint32_t)b->n_ids - 25, 1, lb), SY_OK);
        assert_true(qt_max_abs_diff(lb, b->last_logits, V) <= tolerance(b->last_logits, V));
        sy_seq *bad;
        assert_int_equal(qt_api->seq_fork(m, s2, 1000, &bad), SY_ERR_INVALID_ARGUMENT);

        /* cancelled: SY_ERR_CANCELLED, the sequence as it was */
        sy_host_call *call = (sy_host_call *)(void *)&qt_cancel_requested; /* any non-NULL handle */
        sy_decode_item item = {sizeof item, fork, a->ids, (uint32_t)a->n_ids, 1, lb, NULL};
        sy_decode_batch one = {sizeof one, 1, sizeof item, &item, call, NULL};
        qt_cancel_requested = 1;
        assert_int_equal(qt_api->decode(m, &one), SY_ERR_CANCELLED);
        qt_cancel_requested = 0;
        assert_int_equal(qt_api->seq_length(m, fork), b->n_ids);
        /* bad token ids and the context limit are refused, changing nothing */
        int32_t bad_token = 512;
        assert_int_equal(qt_decode(m, fork, &bad_token, 1, 1, lb), SY_ERR_INVALID_ARGUMENT);
        assert_non_null(strstr(qt_api->error_message(), "token id 512"));
        assert_int_equal(qt_api->seq_length(m, fork), b->n_ids);
        int32_t *many = calloc(300, sizeof *many);
        assert_int_equal(qt_decode(m, fork, many, 300, 1, lb), SY_ERR_CONTEXT_FULL);
        free(many);
        assert_int_equal(qt_api->seq_length(m, fork), b->n_ids);

        qt_api->seq_free(m, fork);
        qt_api->seq_free(m, s1);
        qt_api->seq_free(m, s2);
        free(la);
        free(lb);
        qt_api->unload(m);
    }
    assert_int_equal(qt_count_entries(dir), 0);
    qt_remove_tree(dir);
    free(dir);
    qt_fixture_free(&f);
}

/* ---- the disk KV cache ---- */

static void test_disk_kv_same_tokens_as_ram(void **state) {
    (void)state;
    char *d1 = qt_temp_dir(), *d2 = qt_temp_dir();
    char dirs[2100];
    snprintf(dirs, sizeof dirs, "%s,%s", d1, d2);
    for (size_t i = 0; i < qt_n_fixtures; i++) {
        qt_fixture f;
        qt_fixture_load(qt_fixtures[i], &f);
        sy_model *ram = qt_load(f.dir, NULL);
        sy_model *disk = qt_load(f.dir, "kv_cache_dir", dirs, NULL);
        sy_model *unbuffered = qt_load(f.dir, "kv_cache_dir", d1, "kv_buffer_mb", "0", NULL);
        /* layers alternate between the two directories: one subdirectory each, holding that many files */
        size_t n_layer = strncmp(f.name, "llama", 5) == 0 ? 3 : 2;
        assert_int_equal(qt_count_entries(d1), 1 + 2 * ((n_layer + 1) / 2) + 1 + 2 * n_layer);
        assert_int_equal(qt_count_entries(d2), 1 + 2 * (n_layer / 2));
        for (size_t p = 0; p < f.n_prompts; p++) {
            const qt_prompt *q = &f.prompts[p];
            int32_t want[QT_GREEDY], got[QT_GREEDY], got_unbuffered[QT_GREEDY];
            float *l_ram = malloc(f.n_vocab * sizeof(float)), *l_disk = malloc(f.n_vocab * sizeof(float)),
                  *l_unbuf = malloc(f.n_vocab * sizeof(float));
            qt_greedy(ram, q->ids, q->n_ids, QT_GREEDY, want, l_ram);
            qt_greedy(disk, q->ids, q->n_ids, QT_GREEDY, got, l_disk);
            qt_greedy(unbuffered, q->ids, q->n_ids, QT_GREEDY, got_unbuffered, l_unbuf);
            assert_memory_equal(got, want, sizeof want);
            assert_memory_equal(got_unbuffered, want, sizeof want);
            /* F16 keys and values against F32 ones: close; buffered or not: exactly the same values */
            assert_true(qt_max_abs_diff(l_disk, l_ram, f.n_vocab) <= tolerance(l_ram, f.n_vocab));
            assert_memory_equal(l_disk, l_unbuf, f.n_vocab * sizeof(float));
            free(l_ram), free(l_disk), free(l_unbuf);
        }
        sy_memory_usage u = {.struct_size = sizeof u}, r = {.struct_size = sizeof u};
        sy_seq *s;
        assert_int_equal(qt_api->seq_create(disk, &s), SY_OK);
        float *logits = malloc(f.n_vocab * sizeof *logits);
        assert_int_equal(qt_decode(disk, s, f.prompts[0].ids, (uint32_t)f.prompts[0].n_ids, 1, logits), SY_OK);
        assert_int_equal(qt_api->memory_usage(disk, &u), SY_OK);
        assert_int_equal(qt_api->memory_usage(ram, &r), SY_OK);
        /* one group of 64 positions, F16, K and V, every layer: 64 * kv_dim * 2 bytes * 2 * layers */
        uint64_t kv_dim = strncmp(f.name, "qwen3", 5) == 0 ? 2 * 32 : 2 * 16;
        assert_int_equal(u.kv_bytes, 64ull * kv_dim * 2 * 2 * n_layer);
        assert_true(u.mapped_bytes >= r.mapped_bytes + u.kv_bytes);
        qt_api->seq_free(disk, s);
        free(logits);
        qt_api->unload(ram);
        qt_api->unload(disk);
        qt_api->unload(unbuffered);
        /* the files are gone with the model */
        assert_int_equal(qt_count_entries(d1), 0);
        assert_int_equal(qt_count_entries(d2), 0);
        qt_fixture_free(&f);
    }
    qt_remove_tree(d1);
    qt_remove_tree(d2);
    free(d1);
    free(d2);
}

static void test_disk_kv_keep_files(void **state) {
    (void)state;
    qt_fixture f;
    qt_fixture_load("qwen2-tied-f32", &f);
    char *dir = qt_temp_dir();
    sy_model *m = qt_load(f.dir, "kv_cache_dir", dir, "keep_kv_cache", "true", NULL);
    int32_t tokens[QT_GREEDY];
    qt_greedy(m, f.prompts[1].ids, f.prompts[1].n_ids, QT_GREEDY, tokens, NULL);
    qt_api->unload(m);
    /* kept: one directory with a K and a V file per layer, one 64-position group of F16 each (38 + 31 < 128) */
    assert_int_equal(qt_count_entries(dir), 1 + 4);
    qt_remove_tree(dir);
    free(dir);
    qt_fixture_free(&f);
}

static void test_disk_kv_limits(void **state) {
    (void)state;
    qt_fixture f;
    qt_fixture_load("qwen2-tied-f32", &f);
    char *dir = qt_temp_dir();
    const qt_prompt *q = qt_all_logits_prompt(&f); /* 38 tokens */
    float *logits = malloc(512 * sizeof *logits);

    /* kv_max_tokens 64: one group; a second sequence's own group does not fit */
    sy_model *m = qt_load(f.dir, "kv_cache_dir", dir, "kv_max_tokens", "64", NULL);
    sy_seq *s, *fork;
    assert_int_equal(qt_api->seq_create(m, &s), SY_OK);
    assert_int_equal(qt_decode(m, s, q->ids, (uint32_t)q->n_ids, 1, logits), SY_OK);
    assert_int_equal(qt_api->seq_fork(m, s, 10, &fork), SY_OK); /* shares the group */
    assert_int_equal(qt_decode(m, fork, q->ids, 5, 1, logits), SY_ERR_OUT_OF_MEMORY); /* copy on write: full */
    assert_non_null(strstr(qt_api->error_message(), "full"));
    assert_int_equal(qt_api->seq_length(m, fork), 10);
    qt_api->seq_free(m, fork);
    assert_int_equal(qt_decode(m, s, q->ids, 27, 1, logits), SY_ERR_OUT_OF_MEMORY); /* 64 + 1 positions */
    assert_int_equal(qt_api->seq_length(m, s), q->n_ids);
    assert_int_equal(qt_api->seq_truncate(m, s, 0), SY_OK);
    assert_int_equal(qt_decode(m, s, q->ids, (uint32_t)q->n_ids, 1, logits), SY_OK); /* room again */
    qt_api->seq_free(m, s);
    qt_api->unload(m);

    /* out of disk space (a file size limit stands in for a full disk): an error message, never a SIGBUS */
    m = qt_load(f.dir, "kv_cache_dir", dir, NULL);
    struct rlimit old, lim;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim = old;
    lim.rlim_cur = 64 * 32 * 2; /* one group of one file */
    void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    assert_int_equal(qt_api->seq_create(m, &s), SY_OK);
    assert_int_equal(qt_decode(m, s, q->ids, (uint32_t)q->n_ids, 1, logits), SY_OK);
    assert_int_equal(qt_decode(m, s, q->ids, (uint32_t)q->n_ids, 1, logits), SY_ERR_OUT_OF_MEMORY);
    const char *msg = qt_api->error_message();
    assert_non_null(strstr(msg, "cannot grow"));
    assert_non_null(strstr(msg, strerror(EFBIG)));
    assert_int_equal(qt_api->seq_length(m, s), q->n_ids);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, old_handler);
    /* and with room again, decoding goes on and gives the oracle's greedy token */
    int32_t next = f.prompts[1].greedy[0];
    assert_int_equal(qt_decode(m, s, &next, 1, 1, logits), SY_OK);
    assert_int_equal(qt_argmax(logits, 512), f.prompts[1].greedy[1]);
    qt_api->seq_free(m, s);
    qt_api->unload(m);

    /* a directory that does not exist */
    char *message;
    sy_model *none;
    assert_int_equal(qt_try_load(f.dir, &none, &message, "kv_cache_dir", "/nonexistent/kv", NULL), SY_ERR_IO);
    assert_non_null(strstr(message, "/nonexistent/kv"));
    free(message);
    assert_int_equal(qt_count_entries(dir), 0);
    qt_remove_tree(dir);
    free(dir);
    free(logits);
    qt_fixture_free(&f);
}

/* ---- the reference backend ---- */

static void test_reference_backend(void **state) {
    (void)state;
    for (size_t i = 0; i < qt_n_fixtures; i++) {
        qt_fixture f;
        qt_fixture_load(qt_fixtures[i], &f);
        sy_model *ref = qt_load(f.dir, "backend", "reference", NULL);
        check_logits(ref, &f);
        check_greedy(ref, &f, 1);
        /* and the core agrees with it within the same tolerance, at every position */
        sy_model *core = qt_load(f.dir, NULL);
        const qt_prompt *q = qt_all_logits_prompt(&f);
        float *a = all_positions(core, q->ids, q->n_ids, f.n_vocab);
        float *b = all_positions(ref, q->ids, q->n_ids, f.n_vocab);
        for (size_t p = 0; p < q->n_ids; p++)
            assert_true(qt_max_abs_diff(a + p * f.n_vocab, b + p * f.n_vocab, f.n_vocab) <=
                        tolerance(b + p * f.n_vocab, f.n_vocab));
        free(a), free(b);
        qt_api->unload(core);
        qt_api->unload(ref);
        qt_fixture_free(&f);
    }
}

/* ---- hostile checkpoints and options ---- */

/* One hostile variant of a fixture: config.json text replaced, and/or a file of the copy cut, removed or replaced
 * by another fixture's; loading it must fail with `want` and a message holding `needle`. */
typedef struct hostile_case {
    const char *config_from, *config_to;
    const char *file;       /* the file to change, or NULL */
    long cut_to;            /* >= 0: truncate the file to this many bytes; -1: remove it; -2: replace it */
    const char *replacement; /* with cut_to -2: the same file of this fixture */
    sy_status want;
    const char *needle;
} hostile_case;

static void run_hostile_case(const char *fixture_dir, const hostile_case *c) {
    char *dir = qt_temp_dir(), path[2048];
    qt_copy_dir(fixture_dir, dir);
    if (c->config_from) {
        snprintf(path, sizeof path, "%s/config.json", dir);
        qt_replace_text(path, c->config_from, c->config_to);
    }
    if (c->file) {
        snprintf(path, sizeof path, "%s/%s", dir, c->file);
        if (c->cut_to >= 0) {
            assert_int_equal(truncate(path, c->cut_to), 0);
        } else if (c->cut_to == -1) {
            assert_int_equal(unlink(path), 0);
        } else {
            const char *src = getenv("SY_SOURCE_DIR");
            char from[2048];
            snprintf(from, sizeof from, "%s/tests/fixtures/hf/%s/%s", src ? src : ".", c->replacement, c->file);
            size_t len;
            char *data = qt_read_file(from, &len);
            assert_non_null(data);
            qt_write_file(path, data, len);
            free(data);
        }
    }
    qt_expect_refusal(dir, c->want, c->needle, NULL, NULL);
    if (c->want == SY_ERR_UNSUPPORTED) { /* probe says the same */
        assert_int_equal(qt_api->probe(dir), SY_ERR_UNSUPPORTED);
        assert_non_null(strstr(qt_api->error_message(), c->needle));
    }
    qt_remove_tree(dir);
    free(dir);
}

static void test_hostile_inputs(void **state) {
    (void)state;
    qt_fixture f;
    qt_fixture_load("qwen2-untied-bf16", &f);
    const hostile_case cases[] = {
        /* a truncated safetensors file: cut in its data, and before its header length */
        {NULL, NULL, "model.safetensors", 100000, NULL, SY_ERR_FORMAT, "model.safetensors"},
        {NULL, NULL, "model.safetensors", 5, NULL, SY_ERR_FORMAT, "model.safetensors"},
        /* the config disagrees with the tensors: the first that does not fit is named */
        {"\"intermediate_size\": 128", "\"intermediate_size\": 96", NULL, 0, NULL, SY_ERR_FORMAT,
         "model.layers.0.mlp.gate_proj.weight"},
        {"\"vocab_size\": 512", "\"vocab_size\": 600", NULL, 0, NULL, SY_ERR_FORMAT, "model.embed_tokens.weight"},
        /* untied, but the tensors of the tied fixture: no lm_head.weight */
        {NULL, NULL, "model.safetensors", -2, "qwen2-tied-f32", SY_ERR_FORMAT, "lm_head.weight"},
        /* an architecture or a field this engine does not run */
        {"\"model_type\": \"qwen2\"", "\"model_type\": \"gpt2\"", NULL, 0, NULL, SY_ERR_UNSUPPORTED, "gpt2"},
        {"\"hidden_act\": \"silu\"", "\"hidden_act\": \"gelu\"", NULL, 0, NULL, SY_ERR_UNSUPPORTED, "hidden_act"},
        {"\"rope_type\": \"default\"", "\"rope_type\": \"yarn\", \"factor\": 4.0", NULL, 0, NULL, SY_ERR_UNSUPPORTED,
         "yarn"},
        /* no tokenizer */
        {NULL, NULL, "tokenizer.json", -1, NULL, SY_ERR_FORMAT, "tokenizer.json"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_hostile_case(f.dir, &cases[i]);

    /* not a checkpoint at all */
    char path[2048];
    assert_int_equal(qt_api->probe("/nonexistent"), SY_ERR_IO);
    snprintf(path, sizeof path, "%s/config.json", f.dir);
    assert_int_equal(qt_api->probe(path), SY_ERR_UNSUPPORTED);

    /* bad option values name the key */
    const char *bad_options[][2] = {{"threads", "0"},        {"threads", "two"},      {"kv_buffer_mb", "-1"},
                                    {"kv_max_tokens", "0"},  {"backend", "gpu"},      {"keep_kv_cache", "maybe"},
                                    {"ctx_size", "99999999999"}};
    for (size_t i = 0; i < sizeof bad_options / sizeof bad_options[0]; i++)
        qt_expect_refusal(f.dir, SY_ERR_INVALID_ARGUMENT, bad_options[i][0], bad_options[i][0], bad_options[i][1]);
    /* unknown keys are ignored */
    sy_model *m = qt_load(f.dir, "some_other_engines_option", "x", NULL);
    qt_api->unload(m);
    qt_fixture_free(&f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_oracle_logits),
        cmocka_unit_test(test_oracle_greedy),
        cmocka_unit_test(test_tokenizer_gives_fixture_ids),
        cmocka_unit_test(test_model_info),
        cmocka_unit_test(test_memory_usage),
        cmocka_unit_test(test_batch_fork_truncate_cancel),
        cmocka_unit_test(test_disk_kv_same_tokens_as_ram),
        cmocka_unit_test(test_disk_kv_keep_files),
        cmocka_unit_test(test_disk_kv_limits),
        cmocka_unit_test(test_reference_backend),
        cmocka_unit_test(test_hostile_inputs),
    };
    return cmocka_run_group_tests(tests, qt_plugin_open, qt_plugin_close);
}
