/*
 * Speculative decoding through the scheduler on the test engine: greedy output with a drafter is token for token
 * the output without one (n-gram drafting over 200 prompts, a draft model of another seed, the model as its own
 * drafter, a recurrent engine that cannot roll back far, the replay drafter), with acceptance where drafting can
 * work; per-request `speculative: false`; the model manager starting drafters from a config.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "manager/config_check.h"
#include "manager/model_manager.h"
#include "spec_fixture.h"
#include "base/util.h"

static spec_env env;
static char *target_path, *other_path, *recurrent_path;

static int group_setup(void **state) {
    (void)state;
    if (spec_env_open(&env) != 0) return -1;
    target_path = spec_write_model(&env, "target.txt", "name=target\nseed=11\nn_ctx=1024");
    other_path = spec_write_model(&env, "other.txt", "name=other\nseed=202\nn_ctx=1024");
    recurrent_path = spec_write_model(&env, "recurrent.txt", "name=recurrent\nseed=11\nn_ctx=1024\nrecurrent=1");
    return 0;
}

static int group_teardown(void **state) {
    (void)state;
    free(target_path);
    free(other_path);
    free(recurrent_path);
    spec_env_close(&env);
    return 0;
}

typedef struct workload {
    size_t n;
    int32_t **prompts;
    size_t *n_prompt;
    bool *repetitive;
    sy_gen_params *params;
} workload;

static workload make_workload(size_t n, unsigned seed, uint32_t max_tokens) {
    workload w = {n, calloc(n, sizeof(int32_t *)), calloc(n, sizeof(size_t)), calloc(n, sizeof(bool)),
                  calloc(n, sizeof(sy_gen_params))};
    for (size_t i = 0; i < n; i++) {
        w.repetitive[i] = i % 3 == 0;
        w.prompts[i] = spec_make_prompt(seed + (unsigned)i, w.repetitive[i], &w.n_prompt[i]);
        w.params[i] = sy_gen_params_defaults();
        w.params[i].sampling.temperature = 0;
        w.params[i].max_tokens = max_tokens;
        w.params[i].ignore_eos = i % 2 == 0; /* odd ones may end at an end token */
        w.params[i].logprobs = true;         /* an event for every token, with the logprob of its row */
    }
    return w;
}

static void free_workload(workload *w) {
    for (size_t i = 0; i < w->n; i++) free(w->prompts[i]);
    free(w->prompts);
    free(w->n_prompt);
    free(w->repetitive);
    free(w->params);
}

/* Runs every request of w on a new scheduler of lm (4 slots, so speculation meets continuous batching). */
static spec_batch *run(const sy_loaded_model *lm, sy_speculator *sp, const workload *w, sy_scheduler_stats *stats) {
    sy_scheduler_options so;
    memset(&so, 0, sizeof so);
    so.parallel = 4;
    so.max_queue = (uint32_t)w->n;
    so.prefill_chunk = 96;
    so.speculator = sp;
    sy_scheduler *s = sy_scheduler_create(lm, &so);
    assert_non_null(s);
    spec_batch *b = spec_batch_new(w->n);
    for (size_t i = 0; i < w->n; i++) spec_batch_submit(b, i, s, w->prompts[i], w->n_prompt[i], &w->params[i]);
    assert_true(spec_batch_wait(b, 120));
    if (stats != NULL) sy_scheduler_get_stats(s, stats);
    sy_scheduler_destroy(s);
    return b;
}

static void assert_same_output(const spec_batch *plain, const spec_batch *spec, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const spec_result *a = &plain->results[i], *b = &spec->results[i];
        assert_false(a->error);
        assert_false(b->error);
        if (a->n_tokens != b->n_tokens || memcmp(a->tokens, b->tokens, a->n_tokens * sizeof *a->tokens) != 0)
            fail_msg("request %zu: %u tokens without speculation, %u with; they differ", i, (unsigned)a->n_tokens,
                     (unsigned)b->n_tokens);
        for (uint32_t t = 0; t < a->n_tokens; t++)
            if (a->logprobs[t] != b->logprobs[t])
                fail_msg("request %zu token %u: logprob %.17g without speculation, %.17g with", i, (unsigned)t,
                         a->logprobs[t], b->logprobs[t]);
        assert_string_equal(a->finish_reason, b->finish_reason);
        assert_int_equal(a->usage.completion_tokens, b->usage.completion_tokens);
        assert_int_equal(a->usage.drafted_tokens, 0);
        assert_true(b->usage.accepted_tokens <= b->usage.drafted_tokens);
    }
}

static sy_speculator *open_spec(const char *spec, const char *target, uint32_t n_vocab, uint32_t draft_max,
                                double cost) {
    sy_speculator_options o = sy_speculator_defaults();
    o.draft_max = draft_max;
    o.draft_cost = cost; /* fixed, so the draft lengths (not only the output) are the same on every run */
    char err[512] = "";
    sy_speculator *sp = sy_speculator_open(&env.reg, spec, target, n_vocab, NULL, 0, &o, err, sizeof err);
    if (sp == NULL) fprintf(stderr, "%s\n", err);
    assert_non_null(sp);
    return sp;
}

static void ngram_greedy_equals_plain_over_200_prompts(void **state) {
    (void)state;
    sy_loaded_model lm;
    spec_open_model(&env, target_path, NULL, 0, &lm);
    workload w = make_workload(200, 1, 48);
    /* Some requests turn speculation off. */
    for (size_t i = 5; i < w.n; i += 10) w.params[i].speculative = false;
    spec_batch *plain = run(&lm, NULL, &w, NULL);
    sy_speculator *sp = open_spec("ngram", NULL, lm.info.n_vocab, 8, 0.05);
    sy_scheduler_stats stats;
    spec_batch *spec = run(&lm, sp, &w, &stats);
    assert_same_output(plain, spec, w.n);

    uint64_t drafted = 0, accepted = 0, rep_drafted = 0, rep_accepted = 0, plain_tokens = 0, rep_tokens = 0;
    double plain_work = 0, rep_work = 0;
    size_t rep = 0, rep_hit = 0;
    for (size_t i = 0; i < w.n; i++) {
        const sy_gen_usage *u = &spec->results[i].usage;
        drafted += u->drafted_tokens;
        accepted += u->accepted_tokens;
        if (!w.params[i].speculative) assert_int_equal(u->drafted_tokens, 0);
        /* The decoding work under the cost the speculator was given: one unit per step (each step yields one
         * token of the target's own after the accepted proposals) and 0.05 per proposal verified. */
        double work = (double)(u->completion_tokens - u->accepted_tokens) + 0.05 * (double)u->drafted_tokens;
        assert_true(work <= 1.06 * (double)u->completion_tokens + 0.5);
        if (!w.repetitive[i]) {
            plain_work += work;
            plain_tokens += u->completion_tokens;
        } else {
            rep_work += work;
            rep_tokens += u->completion_tokens;
        }
        if (w.repetitive[i] && w.params[i].speculative) {
            rep++;
            rep_hit += u->accepted_tokens > 0;
            rep_drafted += u->drafted_tokens;
            rep_accepted += u->accepted_tokens;
        }
    }
    printf("ngram: drafted %llu, accepted %llu; repetitive prompts: %zu of %zu with accepted drafts, %.0f%% "
           "acceptance\n", (unsigned long long)drafted, (unsigned long long)accepted, rep_hit, rep,
           rep_drafted ? 100.0 * (double)rep_accepted / (double)rep_drafted : 0.0);
    assert_true(rep_hit * 10 >= rep * 9); /* repeated text gets hits (the engine copies half the time) */
    /* The adaptive draft length keeps speculation from costing more than it saves: on text that does not repeat
     * the work stays within 2% of plain decoding, on repeated text it shrinks. */
    printf("work relative to plain decoding: %.3f on varied text, %.3f on repeated text\n",
           plain_work / (double)plain_tokens, rep_work / (double)rep_tokens);
    assert_true(plain_work <= 1.02 * (double)plain_tokens);
    assert_true(rep_work < 0.95 * (double)rep_tokens);
    assert_true(rep_accepted > 0);
    /* The scheduler's counters are the sum of the usages. */
    assert_int_equal(stats.drafted_tokens, drafted);
    assert_int_equal(stats.accepted_tokens, accepted);
    spec_batch_free(plain);
    spec_batch_free(spec);
    sy_speculator_free(sp);
    free_workload(&w);
    sy_loaded_model_close(&lm);
}

static void model_drafter_greedy_equals_plain(void **state) {
    (void)state;
    sy_loaded_model lm, other;
    spec_open_model(&env, target_path, NULL, 0, &lm);
    spec_open_model(&env, other_path, NULL, 0, &other);
    assert_int_equal(sy_loaded_model_publish("g:target", &lm), 0);
    assert_int_equal(sy_loaded_model_publish("g:other", &other), 0);
    workload w = make_workload(60, 500, 40);
    spec_batch *plain = run(&lm, NULL, &w, NULL);

    /* Another model of the same tokenizer: outputs equal, some drafts accepted (the engines share the copying). */
    sy_speculator *sp = open_spec("model:g:other", "g:target", lm.info.n_vocab, 6, 0.05);
    spec_batch *spec = run(&lm, sp, &w, NULL);
    assert_same_output(plain, spec, w.n);
    uint64_t drafted = 0, accepted = 0;
    for (size_t i = 0; i < w.n; i++) {
        drafted += spec->results[i].usage.drafted_tokens;
        accepted += spec->results[i].usage.accepted_tokens;
    }
    printf("draft model of another seed: drafted %llu, accepted %llu\n", (unsigned long long)drafted,
           (unsigned long long)accepted);
    assert_true(drafted > 0);
    spec_batch_free(spec);
    sy_speculator_free(sp);

    /* The model as its own drafter: every greedy proposal is the target's own choice. */
    sp = open_spec("model:g:target", "g:target", lm.info.n_vocab, 6, 0.05);
    spec = run(&lm, sp, &w, NULL);
    assert_same_output(plain, spec, w.n);
    drafted = accepted = 0;
    for (size_t i = 0; i < w.n; i++) {
        drafted += spec->results[i].usage.drafted_tokens;
        accepted += spec->results[i].usage.accepted_tokens;
    }
    printf("the model as its own drafter: drafted %llu, accepted %llu\n", (unsigned long long)drafted,
           (unsigned long long)accepted);
    assert_true(drafted > (uint64_t)w.n * 20);
    assert_true(accepted * 100 >= drafted * 99);
    spec_batch_free(spec);
    sy_speculator_free(sp);

    assert_int_equal(sy_loaded_model_unpublish("g:target", &lm), 0);
    assert_int_equal(sy_loaded_model_unpublish("g:other", &other), 0);
    spec_batch_free(plain);
    free_workload(&w);
    sy_loaded_model_close(&other);
    sy_loaded_model_close(&lm);
}

static void recurrent_engine_that_cannot_roll_back_far(void **state) {
    (void)state;
    /* The recurrent test engine rolls back at most 16 tokens; 32 proposals, mostly rejected, go further. */
    sy_loaded_model lm;
    spec_open_model(&env, recurrent_path, NULL, 0, &lm);
    workload w = make_workload(24, 900, 60);
    spec_batch *plain = run(&lm, NULL, &w, NULL);
    sy_speculator *sp = open_spec("ngram", NULL, lm.info.n_vocab, 32, 0.0);
    spec_batch *spec = run(&lm, sp, &w, NULL);
    assert_same_output(plain, spec, w.n);
    spec_batch_free(plain);
    spec_batch_free(spec);
    sy_speculator_free(sp);
    free_workload(&w);
    sy_loaded_model_close(&lm);
}

static void replay_drafter_acceptance_follows_corruption(void **state) {
    (void)state;
    sy_loaded_model lm;
    spec_open_model(&env, target_path, NULL, 0, &lm);
    workload w = make_workload(1, 77, 200);
    w.params[0].ignore_eos = true;
    spec_batch *plain = run(&lm, NULL, &w, NULL);
    /* The known continuation: prompt and greedy output as token ids. */
    char *text = malloc(16 * (w.n_prompt[0] + 200) + 1);
    size_t len = 0;
    for (size_t i = 0; i < w.n_prompt[0]; i++) len += (size_t)sprintf(text + len, "%d ", w.prompts[0][i]);
    for (uint32_t i = 0; i < plain->results[0].n_tokens; i++)
        len += (size_t)sprintf(text + len, "%d\n", plain->results[0].tokens[i]);
    char *path = spec_write_file(&env, "replay-ids.txt", text);
    free(text);
    static const int pct[] = {0, 50};
    for (int c = 0; c < 2; c++) {
        char spec_text[600];
        snprintf(spec_text, sizeof spec_text, "replay:%s:%d", path, pct[c]);
        sy_speculator *sp = open_spec(spec_text, NULL, lm.info.n_vocab, 8, 0.0);
        spec_batch *spec = run(&lm, sp, &w, NULL);
        assert_same_output(plain, spec, 1);
        const sy_gen_usage *u = &spec->results[0].usage;
        printf("replay %d%% corrupted: drafted %u, accepted %u\n", pct[c], (unsigned)u->drafted_tokens,
               (unsigned)u->accepted_tokens);
        if (pct[c] == 0) {
            assert_int_equal(u->accepted_tokens, u->drafted_tokens);
            assert_true(u->drafted_tokens >= 170); /* 200 tokens, each step up to 8 drafted and 1 own */
        } else {
            assert_true(u->accepted_tokens > 0 && u->accepted_tokens * 10 < u->drafted_tokens * 8);
        }
        spec_batch_free(spec);
        sy_speculator_free(sp);
    }
    free(path);
    spec_batch_free(plain);
    free_workload(&w);
    sy_loaded_model_close(&lm);
}

/* ---- the model manager starts drafters from the config ---- */

static void generate_through_lease(sy_model_manager *mm, const char *name, const workload *w, spec_batch **out) {
    char err[1024] = "";
    int status = 0;
    sy_model_lease *lease = sy_model_manager_acquire(mm, name, err, sizeof err, &status);
    if (lease == NULL) fprintf(stderr, "acquire %s: %d %s\n", name, status, err);
    assert_non_null(lease);
    spec_batch *b = spec_batch_new(w->n);
    for (size_t i = 0; i < w->n; i++)
        spec_batch_submit(b, i, sy_model_lease_scheduler(lease), w->prompts[i], w->n_prompt[i], &w->params[i]);
    assert_true(spec_batch_wait(b, 60));
    sy_model_lease_release(lease);
    *out = b;
}

static void model_manager_starts_drafters_from_the_config(void **state) {
    (void)state;
    char *wide_path = spec_write_model(&env, "wide.txt", "name=wide\nseed=11\nn_ctx=1024\nn_vocab=300");
    char cfg_text[4096];
    /* Snapshots (saved at unload) go to the temp folder, not the user's resume path. */
    snprintf(cfg_text, sizeof cfg_text,
             "[host]\nresume_path = %s/resume\n\n"
             "[model.small]\nplugin = test-engine\npath = %s\n\n"
             "[model.looked-up]\nplugin = test-engine\npath = %s\ndraft = ngram\ndraft_max = 8\n"
             "engine.draft_ngram_max = 3\n\n"
             "[model.drafted]\nplugin = test-engine\npath = %s\ndraft = model:small\ndraft_max = 4\n\n"
             "[model.wide]\nplugin = test-engine\npath = %s\ndraft = model:small\n",
             env.dir, other_path, target_path, target_path, wide_path);
    sy_config *cfg = sy_config_load_string(cfg_text, strlen(cfg_text), "spec.ini", NULL);
    /* engine.draft_ngram_max is the drafter's option: declared by spec-drafter, not by the engine */
    sy_config_check_plugin_options(cfg, &env.reg);
    if (!sy_config_ok(cfg)) sy_config_print_diagnostics(cfg, stderr);
    assert_true(sy_config_ok(cfg));
    sy_model_manager *mm = sy_model_manager_create(cfg, &env.reg);
    assert_non_null(mm);

    sy_loaded_model lm;
    spec_open_model(&env, target_path, NULL, 0, &lm);
    workload w = make_workload(12, 3000, 32);
    spec_batch *plain = run(&lm, NULL, &w, NULL);

    spec_batch *looked_up = NULL, *drafted = NULL, *wide = NULL;
    generate_through_lease(mm, "looked-up", &w, &looked_up);
    generate_through_lease(mm, "drafted", &w, &drafted); /* swaps looked-up out (one group) */
    assert_same_output(plain, looked_up, w.n);
    assert_same_output(plain, drafted, w.n);
    uint64_t d1 = 0, d2 = 0;
    for (size_t i = 0; i < w.n; i++) {
        d1 += looked_up->results[i].usage.drafted_tokens;
        d2 += drafted->results[i].usage.drafted_tokens;
    }
    assert_true(d1 > 0);
    assert_true(d2 > 0);
    /* Another vocabulary cannot draft: the model serves without speculation. */
    generate_through_lease(mm, "wide", &w, &wide);
    for (size_t i = 0; i < w.n; i++) {
        assert_false(wide->results[i].error);
        assert_int_equal(wide->results[i].usage.drafted_tokens, 0);
    }
    sy_model_manager_destroy(mm);
    /* Every name lent to a drafter was taken back. */
    assert_int_equal(sy_loaded_model_publish("drafted#1", &lm), 0);
    assert_int_equal(sy_loaded_model_unpublish("drafted#1", &lm), 0);
    spec_batch_free(plain);
    spec_batch_free(looked_up);
    spec_batch_free(drafted);
    spec_batch_free(wide);
    free_workload(&w);
    sy_loaded_model_close(&lm);
    sy_config_free(cfg);
    free(wide_path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(ngram_greedy_equals_plain_over_200_prompts),
        cmocka_unit_test(model_drafter_greedy_equals_plain),
        cmocka_unit_test(recurrent_engine_that_cannot_roll_back_far),
        cmocka_unit_test(replay_drafter_acceptance_follows_corruption),
        cmocka_unit_test(model_manager_starts_drafters_from_the_config),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
