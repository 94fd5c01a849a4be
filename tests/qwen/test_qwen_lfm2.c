/* qwen-cpu-mmap on an lfm2 checkpoint (tests/fixtures/hf/lfm2-f32: a tiny random Lfm2ForCausalLM saved by
 * transformers, conv and attention layers alternating) against transformers' logits and greedy continuations;
 * then what the conv layers' recurrent state adds to the engine contract: truncate and fork roll it back up to
 * SY_LFM2_ROLLBACK (16) tokens and re-decoding gives the oracle's logits again, deeper cuts are refused without
 * changing anything; and lfm2 checkpoints whose config and tensors disagree, each refused naming what is wrong. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "qwen_test_util.h"

#define FIXTURE "lfm2-f32"
#define REL_TOL 1e-3f  /* of the logit range: F32 compute against transformers' F32 compute */
#define ROLLBACK 16    /* tokens truncate must always be able to drop (the engine ABI's minimum) */
#define V 512u

static float tolerance(const float *expected) { return REL_TOL * qt_range(expected, V); }

static void expect_close(const float *got, const float *want, const char *what, size_t at) {
    float err = qt_max_abs_diff(got, want, V), tol = tolerance(want);
    if (!(err <= tol)) fail_msg("%s %zu: logits differ by %g (tolerance %g)", what, at, err, tol);
    assert_int_equal(qt_argmax(got, V), qt_argmax(want, V));
}

/* Every position of every prompt (the last against last_logits, all of them against all_logits where given). */
static void check_logits(sy_model *m, const qt_fixture *f) {
    for (size_t p = 0; p < f->n_prompts; p++) {
        const qt_prompt *q = &f->prompts[p];
        float *logits = malloc(q->n_ids * V * sizeof *logits);
        assert_non_null(logits);
        sy_seq *s;
        assert_int_equal(qt_api->seq_create(m, &s), SY_OK);
        if (qt_decode(m, s, q->ids, (uint32_t)q->n_ids, (uint32_t)q->n_ids, logits) != SY_OK)
            fail_msg("%s", qt_api->error_message());
        expect_close(logits + (q->n_ids - 1) * V, q->last_logits, "last logits of prompt", p);
        for (size_t i = 0; q->all_logits && i < q->n_ids; i++)
            expect_close(logits + i * V, q->all_logits + i * V, "all_logits position", i);
        qt_api->seq_free(m, s);
        free(logits);
    }
}

/* The greedy continuations token for token (the fixture's margins are far above the tolerance). */
static void check_greedy(sy_model *m, const qt_fixture *f) {
    for (size_t p = 0; p < f->n_prompts; p++) {
        const qt_prompt *q = &f->prompts[p];
        int32_t got[QT_GREEDY];
        qt_greedy(m, q->ids, q->n_ids, QT_GREEDY, got, NULL);
        for (size_t i = 0; i < QT_GREEDY; i++)
            if (got[i] != q->greedy[i])
                fail_msg("prompt %zu: greedy token %zu is %d, oracle %d (margin %g)", p, i, got[i], q->greedy[i],
                         q->margins[i]);
    }
}

static void test_oracle_logits(void **state) {
    (void)state;
    qt_fixture f;
    qt_fixture_load(FIXTURE, &f);
    assert_non_null(qt_all_logits_prompt(&f));
    sy_model *m = qt_load(f.dir, "threads", "2", NULL);
    check_logits(m, &f);
    qt_api->unload(m);
    qt_fixture_free(&f);
}

static void test_oracle_greedy(void **state) {
    (void)state;
    qt_fixture f;
    qt_fixture_load(FIXTURE, &f);
    char *dir = qt_temp_dir();
    /* threads 2 and 1, KV in RAM and on disk: the same tokens */
    const char *options[][4] = {{"threads", "2", NULL, NULL},
                                {"threads", "1", NULL, NULL},
                                {"threads", "2", "kv_cache_dir", dir}};
    for (size_t v = 0; v < 3; v++) {
        sy_model *m = qt_load(f.dir, options[v][0], options[v][1], options[v][2], options[v][3], NULL);
        check_greedy(m, &f);
        qt_api->unload(m);
    }
    assert_int_equal(qt_count_entries(dir), 0);
    qt_remove_tree(dir);
    free(dir);
    qt_fixture_free(&f);
}

static void test_model_info_and_tokenizer(void **state) {
    (void)state;
    qt_fixture f;
    qt_fixture_load(FIXTURE, &f);
    assert_int_equal(qt_api->probe(f.dir), SY_OK);
    sy_model *m = qt_load(f.dir, "ctx_size", "200", NULL);
    sy_model_info info = {.struct_size = sizeof info};
    assert_int_equal(qt_api->model_info(m, &info), SY_OK);
    assert_string_equal(info.architecture, "lfm2");
    assert_string_equal(info.weight_dtype, "f32");
    assert_string_equal(info.name, FIXTURE);
    assert_int_equal(info.n_vocab, V);
    assert_int_equal(info.n_embd, 64);
    assert_int_equal(info.n_layer, 4);
    assert_int_equal(info.n_ctx_train, 256);
    assert_int_equal(info.n_ctx, 200);
    assert_int_equal(info.eos_token, 502);
    assert_true(qt_api->token_flags(m, 502) & SY_TOKEN_END_OF_GENERATION);
    assert_true(qt_api->token_flags(m, 500) & SY_TOKEN_END_OF_GENERATION);
    assert_int_equal(strlen(info.fingerprint), 32);
    for (size_t p = 0; p < f.n_prompts; p++) {
        const qt_prompt *q = &f.prompts[p];
        if (strcmp(q->text, "(single token)") == 0) continue;
        int32_t ids[256];
        size_t n;
        assert_int_equal(qt_api->tokenize(m, q->text, strlen(q->text), 0, ids, 256, &n), SY_OK);
        assert_int_equal(n, q->n_ids);
        assert_memory_equal(ids, q->ids, n * sizeof *ids);
    }
    qt_api->unload(m);
    qt_fixture_free(&f);
}

/* Decodes ids[from..n) into s with logits of every position, and checks them against the oracle's rows. */
static void redecode_and_check(sy_model *m, sy_seq *s, const qt_prompt *q, size_t from) {
    size_t n = q->n_ids - from;
    float *logits = malloc(n * V * sizeof *logits);
    assert_non_null(logits);
    if (qt_decode(m, s, q->ids + from, (uint32_t)n, (uint32_t)n, logits) != SY_OK)
        fail_msg("%s", qt_api->error_message());
    for (size_t i = 0; i < n; i++) expect_close(logits + i * V, q->all_logits + (from + i) * V, "position", from + i);
    assert_int_equal(qt_api->seq_length(m, s), q->n_ids);
    free(logits);
}

static void test_truncate_fork_redecode(void **state) {
    (void)state;
    qt_fixture f;
    qt_fixture_load(FIXTURE, &f);
    const qt_prompt *q = qt_all_logits_prompt(&f);
    assert_non_null(q);
    const uint32_t n = (uint32_t)q->n_ids;
    assert_true(n > ROLLBACK + 4);
    char *dir = qt_temp_dir();
    for (int disk = 0; disk < 2; disk++) {
        sy_model *m = disk ? qt_load(f.dir, "kv_cache_dir", dir, NULL) : qt_load(f.dir, NULL);
        sy_seq *s;
        assert_int_equal(qt_api->seq_create(m, &s), SY_OK);
        float *last = malloc(V * sizeof *last);
        assert_int_equal(qt_decode(m, s, q->ids, n, 1, last), SY_OK);
        /* every depth up to the rollback, one token at a time and all at once */
        for (uint32_t back = 1; back <= ROLLBACK; back++) {
            assert_int_equal(qt_api->seq_truncate(m, s, n - back), SY_OK);
            assert_int_equal(qt_api->seq_length(m, s), n - back);
            redecode_and_check(m, s, q, n - back);
        }
        /* one token deeper is refused and changes nothing: the next token still gives the oracle's logits */
        assert_int_equal(qt_api->seq_truncate(m, s, n - ROLLBACK - 1), SY_ERR_UNSUPPORTED);
        assert_non_null(qt_api->error_message());
        assert_int_equal(qt_api->seq_length(m, s), n);
        sy_seq *fork = NULL;
        assert_int_equal(qt_api->seq_fork(m, s, n - ROLLBACK - 1, &fork), SY_ERR_UNSUPPORTED);
        assert_null(fork);
        /* a fork 16 back continues like the original, and leaves the original untouched */
        assert_int_equal(qt_api->seq_fork(m, s, n - ROLLBACK, &fork), SY_OK);
        assert_int_equal(qt_api->seq_length(m, fork), n - ROLLBACK);
        redecode_and_check(m, fork, q, n - ROLLBACK);
        assert_int_equal(qt_api->seq_truncate(m, s, n - 5), SY_OK);
        redecode_and_check(m, s, q, n - 5);
        /* to length 0 needs no history: the whole prompt again */
        assert_int_equal(qt_api->seq_truncate(m, s, 0), SY_OK);
        redecode_and_check(m, s, q, 0);

        /* generation, then rollback and regenerate: the same greedy tokens */
        const qt_prompt *g = &f.prompts[0];
        sy_seq *gs;
        assert_int_equal(qt_api->seq_create(m, &gs), SY_OK);
        assert_int_equal(qt_decode(m, gs, g->ids, (uint32_t)g->n_ids, 1, last), SY_OK);
        bool rolled_back = false;
        for (size_t i = 0; i < QT_GREEDY; i++) {
            int32_t t = qt_argmax(last, V);
            assert_int_equal(t, g->greedy[i]);
            assert_int_equal(qt_decode(m, gs, &t, 1, 1, last), SY_OK);
            if (i == 20 && !rolled_back) { /* keep the prompt and greedy[0..9], then regenerate from greedy[10] */
                assert_int_equal(qt_api->seq_truncate(m, gs, (uint32_t)(g->n_ids + 10)), SY_OK);
                assert_int_equal(qt_decode(m, gs, &g->greedy[10], 1, 1, last), SY_OK);
                rolled_back = true;
                i = 10;
            }
        }
        assert_true(rolled_back);
        assert_int_equal(qt_api->seq_length(m, gs), g->n_ids + QT_GREEDY);
        qt_api->seq_free(m, gs);
        qt_api->seq_free(m, fork);
        qt_api->seq_free(m, s);
        free(last);
        qt_api->unload(m);
    }
    assert_int_equal(qt_count_entries(dir), 0);
    qt_remove_tree(dir);
    free(dir);
    qt_fixture_free(&f);
}

/* ---- hostile lfm2 checkpoints ---- */

static void test_hostile_checkpoints(void **state) {
    (void)state;
    qt_fixture f;
    qt_fixture_load(FIXTURE, &f);
    const struct {
        const char *from, *to;
        sy_status want;
        const char *needle;
    } cases[] = {
        /* layer kinds swapped: layer 0 has no attention tensors */
        {"\"conv\",\n    \"full_attention\",\n    \"conv\"", "\"full_attention\",\n    \"conv\",\n    \"conv\"",
         SY_ERR_FORMAT, "model.layers.0.self_attn.q_proj.weight"},
        /* conv biases promised but absent */
        {"\"conv_bias\": false", "\"conv_bias\": true", SY_ERR_FORMAT, "model.layers.0.conv.in_proj.bias"},
        /* another kernel width than the conv weights have, and one the core cannot run */
        {"\"conv_L_cache\": 3", "\"conv_L_cache\": 4", SY_ERR_FORMAT, "model.layers.0.conv.conv.weight"},
        {"\"conv_L_cache\": 3", "\"conv_L_cache\": 1", SY_ERR_UNSUPPORTED, "conv_L_cache"},
        /* a feed-forward width (intermediate_size -> lfm2_ff_dim) the tensors do not have */
        {"\"intermediate_size\": 128", "\"intermediate_size\": 256", SY_ERR_FORMAT,
         "model.layers.0.feed_forward.w1.weight"},
        /* untied: lm_head.weight is missing */
        {"\"tie_word_embeddings\": true", "\"tie_word_embeddings\": false", SY_ERR_FORMAT, "lm_head.weight"},
        {"\"num_key_value_heads\": 2", "\"num_key_value_heads\": 4", SY_ERR_FORMAT,
         "model.layers.1.self_attn.k_proj.weight"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *dir = qt_temp_dir(), path[2048];
        qt_copy_dir(f.dir, dir);
        snprintf(path, sizeof path, "%s/config.json", dir);
        qt_replace_text(path, cases[i].from, cases[i].to);
        qt_expect_refusal(dir, cases[i].want, cases[i].needle, NULL, NULL);
        qt_remove_tree(dir);
        free(dir);
    }
    /* the tensors cut short */
    char *dir = qt_temp_dir(), path[2048];
    qt_copy_dir(f.dir, dir);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    assert_int_equal(truncate(path, 4000), 0);
    qt_expect_refusal(dir, SY_ERR_FORMAT, "model.safetensors", NULL, NULL);
    qt_remove_tree(dir);
    free(dir);
    /* the double-precision reference backend has no short convolution */
    qt_expect_refusal(f.dir, SY_ERR_UNSUPPORTED, "reference", "backend", "reference");
    qt_fixture_free(&f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_oracle_logits),
        cmocka_unit_test(test_oracle_greedy),
        cmocka_unit_test(test_model_info_and_tokenizer),
        cmocka_unit_test(test_truncate_fork_redecode),
        cmocka_unit_test(test_hostile_checkpoints),
    };
    return cmocka_run_group_tests(tests, qt_plugin_open, qt_plugin_close);
}
