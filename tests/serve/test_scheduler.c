/*
 * The scheduler on the test engine: continuous batching gives the same greedy (and seeded) output as running
 * alone, stop strings, max_tokens, end-of-generation, context full, cancellation, the queue limit, prefix reuse
 * within a slot and across slots, logprobs, and refused submits.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "serve_fixture.h"
#include "base/util.h"

static serve_env env;
static char *model_path;

static int group_setup(void **state) {
    (void)state;
    if (serve_env_open(&env) != 0) return -1;
    model_path = serve_write_model(&env, "model.txt", "seed=11", 0);
    return 0;
}

static int group_teardown(void **state) {
    (void)state;
    free(model_path);
    serve_env_close(&env);
    return 0;
}

/* A prompt of about `len` bytes: words picked by a fixed recipe from `seed`. */
static char *make_prompt(unsigned seed, size_t len) {
    static const char *const words[] = {"switch", "yard", "model", "token", "batch", "slot", "cache", "queue",
                                        "the", "a", "of", "prefix", "decode", "stream", "engine", "host"};
    char *s = malloc(len + 16);
    size_t n = 0;
    uint32_t x = seed * 2654435761u + 12345u;
    while (n < len) {
        x = x * 1103515245u + 12345u;
        const char *w = words[(x >> 16) % 16];
        size_t wl = strlen(w);
        if (n + wl + 1 > len + 8) break;
        memcpy(s + n, w, wl);
        n += wl;
        s[n++] = ' ';
    }
    s[n] = '\0';
    return s;
}

typedef struct open_model {
    sy_loaded_model lm;
    sy_scheduler *sched;
} open_model;

static void open_sched(open_model *om, const char *const *options, size_t n_options, uint32_t parallel,
                       uint32_t max_queue, uint32_t prefill_chunk) {
    serve_open_model(&env, model_path, options, n_options, &om->lm);
    sy_scheduler_options so = {0};
    so.parallel = parallel;
    so.max_queue = max_queue;
    so.prefill_chunk = prefill_chunk;
    om->sched = sy_scheduler_create(&om->lm, &so);
    assert_non_null(om->sched);
}

static void close_sched(open_model *om) {
    sy_scheduler_destroy(om->sched);
    sy_loaded_model_close(&om->lm);
}

/* ---- batching ---------------------------------------------------------------------------------------------- */

#define N_REQ 6

static void batched_output_equals_alone(void **state) {
    (void)state;
    static const size_t prompt_len[N_REQ] = {5, 40, 300, 700, 90, 1200};
    static const uint32_t max_tokens[N_REQ] = {30, 12, 50, 25, 60, 40};
    char *texts[N_REQ];
    int32_t *prompts[N_REQ];
    size_t n_prompt[N_REQ];
    sy_gen_params params[N_REQ];
    collector *alone[N_REQ];

    /* Alone: each on a fresh model and scheduler of one slot. */
    for (int i = 0; i < N_REQ; i++) {
        texts[i] = make_prompt((unsigned)i + 1, prompt_len[i]);
        open_model om;
        open_sched(&om, NULL, 0, 1, 4, 0);
        prompts[i] = serve_tokenize(&om.lm, texts[i], &n_prompt[i]);
        params[i] = serve_greedy(max_tokens[i]);
        params[i].ignore_eos = (i % 2) == 0; /* odd ones may end at an end token */
        if (i == 4 || i == 5) {
            /* Seeded sampling must be batch-independent too. */
            params[i].sampling = sy_sampler_defaults();
            params[i].sampling.seed = 1000 + (uint64_t)i;
        }
        alone[i] = collector_new();
        serve_generate(om.sched, prompts[i], n_prompt[i], &params[i], alone[i]);
        assert_int_equal(alone[i]->end_type, SY_GEN_EVENT_DONE);
        assert_true(alone[i]->usage.completion_tokens > 0);
        close_sched(&om);
    }

    /* Together: four slots, small prefill chunks so prompts and decodes share steps; a slow engine so all
     * requests overlap. */
    open_model om;
    static const char *const slow[] = {"delay_us=100"};
    open_sched(&om, slow, 1, 4, N_REQ, 64);
    sy_gen *gens[N_REQ];
    collector *together[N_REQ];
    for (int i = 0; i < N_REQ; i++) {
        together[i] = collector_new();
        char err[256];
        int status = 0;
        gens[i] = sy_scheduler_submit(om.sched, prompts[i], n_prompt[i], &params[i], collector_callback,
                                      together[i], err, sizeof err, &status);
        assert_non_null(gens[i]);
    }
    for (int i = 0; i < N_REQ; i++) {
        assert_true(collector_wait(together[i], 30));
        sy_gen_release(gens[i]);
        assert_int_equal(together[i]->end_type, SY_GEN_EVENT_DONE);
        assert_string_equal(together[i]->finish_reason, alone[i]->finish_reason);
        assert_int_equal(together[i]->usage.completion_tokens, alone[i]->usage.completion_tokens);
        assert_int_equal(together[i]->usage.prompt_tokens, n_prompt[i]);
        assert_int_equal(together[i]->text_len, alone[i]->text_len);
        assert_memory_equal(together[i]->text, alone[i]->text, alone[i]->text_len);
        assert_int_equal(together[i]->events_after_end, 0);
    }
    sy_scheduler_stats st;
    sy_scheduler_get_stats(om.sched, &st);
    assert_true(st.max_batch_items >= 2); /* batching did happen */
    assert_int_equal(st.requests_done, N_REQ);
    assert_int_equal(st.slots_busy, 0);
    assert_int_equal(st.queue_depth, 0);
    assert_true(sy_scheduler_idle(om.sched));
    close_sched(&om);
    for (int i = 0; i < N_REQ; i++) {
        collector_delete(alone[i]);
        collector_delete(together[i]);
        free(prompts[i]);
        free(texts[i]);
    }
}

/* ---- stopping ---------------------------------------------------------------------------------------------- */

static void stop_strings(void **state) {
    (void)state;
    open_model om;
    open_sched(&om, NULL, 0, 1, 4, 0);
    char *text = make_prompt(42, 120);
    size_t n;
    int32_t *prompt = serve_tokenize(&om.lm, text, &n);

    collector *full = collector_new();
    sy_gen_params p = serve_greedy(60);
    serve_generate(om.sched, prompt, n, &p, full);
    assert_string_equal(full->finish_reason, "length");
    assert_true(full->text_len >= 40);

    /* A stop string from the middle of the output, spanning several tokens (one byte per token here). */
    char stop[8];
    memcpy(stop, full->text + 20, 4);
    stop[4] = '\0';
    const char *first = strstr(full->text, stop);
    size_t expect = (size_t)(first - full->text);
    collector *c = collector_new();
    p.stop[0] = "\x01never";
    p.stop[1] = stop;
    p.n_stop = 2;
    serve_generate(om.sched, prompt, n, &p, c);
    assert_int_equal(c->end_type, SY_GEN_EVENT_DONE);
    assert_string_equal(c->finish_reason, "stop");
    assert_int_equal(c->text_len, expect);
    assert_memory_equal(c->text, full->text, expect);
    /* No piece of the stop string was ever sent: the text is exactly the part before it. */
    assert_null(strstr(c->text, stop));

    /* A stop string whose beginning ends the output is held, then released at the end. */
    char tail_stop[4] = {full->text[full->text_len - 1], '\x02', 0, 0};
    collector *d = collector_new();
    p.stop[0] = tail_stop;
    p.n_stop = 1;
    serve_generate(om.sched, prompt, n, &p, d);
    assert_string_equal(d->finish_reason, "length");
    assert_int_equal(d->text_len, full->text_len);
    assert_memory_equal(d->text, full->text, full->text_len);

    collector_delete(full);
    collector_delete(c);
    collector_delete(d);
    free(prompt);
    free(text);
    close_sched(&om);
}

static void max_tokens_and_end_of_generation(void **state) {
    (void)state;
    /* eos_one_in=4: greedy output soon meets an end token. */
    static const char *const eos[] = {"eos_one_in=4"};
    open_model om;
    open_sched(&om, eos, 1, 1, 4, 0);
    size_t n;
    int32_t *prompt = serve_tokenize(&om.lm, "hello there", &n);

    collector *a = collector_new();
    sy_gen_params p = serve_greedy(200);
    p.ignore_eos = false;
    serve_generate(om.sched, prompt, n, &p, a);
    assert_string_equal(a->finish_reason, "stop");
    assert_true(a->usage.completion_tokens < 200);
    assert_true(a->usage.completion_tokens >= 1);
    /* The end token is not text, and counts as generated. */
    assert_int_equal(a->text_len, a->usage.completion_tokens - 1);
    assert_null(strstr(a->text, "<|"));

    collector *b = collector_new();
    p.ignore_eos = true;
    p.max_tokens = 25;
    serve_generate(om.sched, prompt, n, &p, b);
    assert_string_equal(b->finish_reason, "length");
    assert_int_equal(b->usage.completion_tokens, 25);
    /* Same beginning as the run that stopped. */
    assert_memory_equal(b->text, a->text, a->text_len);

    collector_delete(a);
    collector_delete(b);
    free(prompt);
    close_sched(&om);
}

static void context_full_ends_with_length(void **state) {
    (void)state;
    static const char *const small[] = {"n_ctx=64"};
    open_model om;
    open_sched(&om, small, 1, 1, 4, 0);
    char *text = make_prompt(5, 50);
    size_t n;
    int32_t *prompt = serve_tokenize(&om.lm, text, &n);
    assert_true(n < 64);
    collector *c = collector_new();
    sy_gen_params p = serve_greedy(0);
    serve_generate(om.sched, prompt, n, &p, c);
    assert_int_equal(c->end_type, SY_GEN_EVENT_DONE);
    assert_string_equal(c->finish_reason, "length");
    /* Sampled after each of positions n-1 .. 63: the last one is not decoded. */
    assert_int_equal(c->usage.completion_tokens, 64 - n + 1);

    /* A prompt longer than the context is refused. */
    int32_t big[65] = {0};
    char err[256];
    int status = 0;
    assert_null(sy_scheduler_submit(om.sched, big, 65, &p, collector_callback, c, err, sizeof err, &status));
    assert_int_equal(status, 400);
    assert_non_null(strstr(err, "context"));
    collector_delete(c);
    free(prompt);
    free(text);
    close_sched(&om);
}

static void refused_submits(void **state) {
    (void)state;
    open_model om;
    open_sched(&om, NULL, 0, 1, 4, 0);
    collector *c = collector_new();
    char err[256];
    int status = 0;
    sy_gen_params p = serve_greedy(5);
    int32_t ok[2] = {65, 66};
    assert_null(sy_scheduler_submit(om.sched, ok, 0, &p, collector_callback, c, err, sizeof err, &status));
    assert_int_equal(status, 400);
    int32_t bad[2] = {65, 99999};
    status = 0;
    assert_null(sy_scheduler_submit(om.sched, bad, 2, &p, collector_callback, c, err, sizeof err, &status));
    assert_int_equal(status, 400);
    assert_non_null(strstr(err, "vocabulary"));
    p.n_stop = SY_GEN_MAX_STOP_STRINGS + 1;
    status = 0;
    assert_null(sy_scheduler_submit(om.sched, ok, 2, &p, collector_callback, c, err, sizeof err, &status));
    assert_int_equal(status, 400);
    p = serve_greedy(5);
    p.top_logprobs = SY_GEN_MAX_TOP_LOGPROBS + 1;
    assert_null(sy_scheduler_submit(om.sched, ok, 2, &p, collector_callback, c, err, sizeof err, &status));
    p = serve_greedy(5);
    p.sampling.temperature = NAN;
    assert_null(sy_scheduler_submit(om.sched, ok, 2, &p, collector_callback, c, err, sizeof err, &status));
    assert_false(c->done);
    assert_int_equal(c->n_text_events, 0);
    collector_delete(c);
    close_sched(&om);
}

/* ---- cancellation and the queue --------------------------------------------------------------------------- */

static void cancel_mid_generation(void **state) {
    (void)state;
    static const char *const slow[] = {"delay_us=2000"};
    open_model om;
    open_sched(&om, slow, 1, 1, 4, 0);
    size_t n;
    int32_t *prompt = serve_tokenize(&om.lm, "cancel me", &n);
    sy_gen_params p = serve_greedy(0);
    collector *running = collector_new(), *queued = collector_new();
    char err[256];
    int status = 0;
    sy_gen *g = sy_scheduler_submit(om.sched, prompt, n, &p, collector_callback, running, err, sizeof err, &status);
    sy_gen *q = sy_scheduler_submit(om.sched, prompt, n, &p, collector_callback, queued, err, sizeof err, &status);
    assert_non_null(g);
    assert_non_null(q);
    assert_true(collector_wait_events(running, 3, 10));
    sy_scheduler_stats st;
    sy_scheduler_get_stats(om.sched, &st);
    assert_int_equal(st.slots_busy, 1);
    assert_int_equal(st.queue_depth, 1);
    sy_gen_cancel(q); /* still waiting for the slot */
    assert_true(collector_wait(queued, 10));
    assert_string_equal(queued->finish_reason, "cancelled");
    assert_int_equal(queued->usage.completion_tokens, 0);
    sy_gen_cancel(g);
    assert_true(collector_wait(running, 10));
    assert_int_equal(running->end_type, SY_GEN_EVENT_DONE);
    assert_string_equal(running->finish_reason, "cancelled");
    assert_true(running->usage.completion_tokens >= 3);
    assert_true(running->usage.completion_tokens < 1000);
    sy_gen_release(g);
    sy_gen_release(q);
    sy_gen_cancel(NULL); /* a no-op */
    assert_true(sy_scheduler_idle(om.sched));
    collector_delete(running);
    collector_delete(queued);
    free(prompt);
    close_sched(&om);
}

/* A client leaving mid-step cancels its own item only (the test engine cancels items alone): the other
 * generation's step runs on, no step is cancelled as a whole, and its output is what it gives alone. */
static void one_client_leaving_cancels_only_its_item(void **state) {
    (void)state;
    static const char *const slow[] = {"delay_us=3000"};
    size_t n;
    sy_gen_params p = serve_greedy(30);
    p.ignore_eos = true;
    collector *alone = collector_new();
    open_model om;
    open_sched(&om, slow, 1, 1, 4, 0);
    int32_t *prompt = serve_tokenize(&om.lm, "the other one stays", &n);
    serve_generate(om.sched, prompt, n, &p, alone);
    close_sched(&om);

    open_sched(&om, slow, 1, 2, 4, 0);
    collector *leaving = collector_new(), *staying = collector_new();
    char err[256];
    int status = 0;
    sy_gen_params long_p = serve_greedy(500);
    long_p.ignore_eos = true;
    sy_gen *g = sy_scheduler_submit(om.sched, prompt, n, &long_p, collector_callback, leaving, err, sizeof err,
                                    &status);
    sy_gen *h = sy_scheduler_submit(om.sched, prompt, n, &p, collector_callback, staying, err, sizeof err, &status);
    assert_non_null(g);
    assert_non_null(h);
    assert_true(collector_wait_events(leaving, 3, 10));
    assert_true(collector_wait_events(staying, 3, 10));
    sy_gen_cancel(g); /* while both are in the step being decoded */
    assert_true(collector_wait(leaving, 10));
    assert_string_equal(leaving->finish_reason, "cancelled");
    assert_true(collector_wait(staying, 10));
    assert_string_equal(staying->finish_reason, "length");
    assert_int_equal(staying->n_tokens, alone->n_tokens);
    assert_memory_equal(staying->tokens, alone->tokens, alone->n_tokens * sizeof *alone->tokens);
    sy_scheduler_stats st;
    sy_scheduler_get_stats(om.sched, &st);
    assert_int_equal(st.cancelled_steps, 0);
    sy_gen_release(g);
    sy_gen_release(h);
    collector_delete(alone);
    collector_delete(leaving);
    collector_delete(staying);
    free(prompt);
    close_sched(&om);
}

/* An engine that takes at most 8 tokens a call (max_decode_tokens in its model info): steps and prefill chunks stay
 * within it (the test engine refuses more), and the output is the unbounded engine's. */
static void max_decode_tokens_bounds_each_step(void **state) {
    (void)state;
    static const char *const bounded[] = {"max_decode_tokens=8"};
    char *text = make_prompt(7, 200);
    sy_gen_params p = serve_greedy(20);
    p.ignore_eos = true;
    collector *free_run = collector_new(), *bounded_run = collector_new();
    open_model om;
    size_t n;
    open_sched(&om, NULL, 0, 1, 4, 0);
    int32_t *prompt = serve_tokenize(&om.lm, text, &n);
    serve_generate(om.sched, prompt, n, &p, free_run);
    close_sched(&om);
    assert_true(n > 8);
    open_sched(&om, bounded, 1, 16, 4, 0); /* 16 slots asked: 8 at most fit a call */
    assert_int_equal(om.lm.info.max_decode_tokens, 8);
    serve_generate(om.sched, prompt, n, &p, bounded_run);
    assert_int_equal(bounded_run->end_type, SY_GEN_EVENT_DONE);
    assert_string_equal(bounded_run->finish_reason, "length");
    assert_int_equal(bounded_run->n_tokens, free_run->n_tokens);
    assert_memory_equal(bounded_run->tokens, free_run->tokens, free_run->n_tokens * sizeof *free_run->tokens);
    close_sched(&om);
    collector_delete(free_run);
    collector_delete(bounded_run);
    free(prompt);
    free(text);
}

/* The test engine offers sy.engine.sampling/1: greedy requests without logprobs or penalties are sampled by the
 * engine (the same tokens as the host's argmax), and mixed steps (another slot's prompt chunk) split into a plain
 * decode and a sampled one. A request with logprobs, or a scheduler told to, samples on the host. */
static void engine_samples_where_it_can(void **state) {
    (void)state;
    char *text = make_prompt(9, 300);
    sy_gen_params p = serve_greedy(25);
    p.ignore_eos = true;
    collector *host = collector_new(), *device = collector_new(), *with_logprobs = collector_new();
    size_t n;
    open_model om;
    serve_open_model(&env, model_path, NULL, 0, &om.lm);
    assert_non_null(om.lm.plugin->engine_sampling);
    sy_scheduler_options so = {.parallel = 2, .max_queue = 4, .prefill_chunk = 32, .host_sampling = true};
    om.sched = sy_scheduler_create(&om.lm, &so);
    int32_t *prompt = serve_tokenize(&om.lm, text, &n);
    serve_generate(om.sched, prompt, n, &p, host);
    sy_scheduler_stats st;
    sy_scheduler_get_stats(om.sched, &st);
    assert_int_equal(st.device_sampled_tokens, 0);
    sy_scheduler_destroy(om.sched);

    so.host_sampling = false;
    om.sched = sy_scheduler_create(&om.lm, &so);
    /* A second request prefills in 32-token chunks while the first decodes: mixed steps. */
    char err[256];
    int status = 0;
    collector *other = collector_new();
    sy_gen *g = sy_scheduler_submit(om.sched, prompt, n, &p, collector_callback, device, err, sizeof err, &status);
    assert_true(collector_wait_events(device, 2, 10));
    int32_t *other_prompt = serve_tokenize(&om.lm, "another prompt entirely, long enough to take a few chunks of "
                                           "thirty-two tokens while the first one decodes its answer", &n);
    sy_gen *h = sy_scheduler_submit(om.sched, other_prompt, n, &p, collector_callback, other, err, sizeof err,
                                    &status);
    assert_true(collector_wait(device, 10));
    assert_true(collector_wait(other, 10));
    sy_gen_release(g);
    sy_gen_release(h);
    assert_int_equal(device->n_tokens, host->n_tokens);
    assert_memory_equal(device->tokens, host->tokens, host->n_tokens * sizeof *host->tokens);
    sy_scheduler_get_stats(om.sched, &st);
    assert_int_equal(st.device_sampled_tokens, 50);

    sy_gen_params lp = p;
    lp.logprobs = true;
    size_t n_first;
    int32_t *first = serve_tokenize(&om.lm, text, &n_first);
    serve_generate(om.sched, first, n_first, &lp, with_logprobs);
    sy_scheduler_get_stats(om.sched, &st);
    assert_int_equal(st.device_sampled_tokens, 50); /* logprobs need the rows: the host sampled */
    assert_memory_equal(with_logprobs->tokens, host->tokens, host->n_tokens * sizeof *host->tokens);
    close_sched(&om);
    collector_delete(host);
    collector_delete(device);
    collector_delete(other);
    collector_delete(with_logprobs);
    free(prompt);
    free(other_prompt);
    free(first);
    free(text);
}

static void queue_full_is_429(void **state) {
    (void)state;
    static const char *const slow[] = {"delay_us=2000"};
    open_model om;
    open_sched(&om, slow, 1, 1, 1, 0);
    int32_t prompt[3] = {'a', 'b', 'c'};
    sy_gen_params p = serve_greedy(0);
    collector *c[3] = {collector_new(), collector_new(), collector_new()};
    char err[256];
    int status = 0;
    sy_gen *a = sy_scheduler_submit(om.sched, prompt, 3, &p, collector_callback, c[0], err, sizeof err, &status);
    sy_gen *b = sy_scheduler_submit(om.sched, prompt, 3, &p, collector_callback, c[1], err, sizeof err, &status);
    assert_non_null(a);
    assert_non_null(b);
    assert_true(sy_scheduler_full(om.sched));
    sy_gen *refused = sy_scheduler_submit(om.sched, prompt, 3, &p, collector_callback, c[2], err, sizeof err, &status);
    assert_null(refused);
    assert_int_equal(status, 429);
    sy_gen_cancel(a);
    sy_gen_cancel(b);
    assert_true(collector_wait(c[0], 10));
    assert_true(collector_wait(c[1], 10));
    sy_gen_release(a);
    sy_gen_release(b);
    assert_false(sy_scheduler_full(om.sched));
    for (int i = 0; i < 3; i++) collector_delete(c[i]);
    close_sched(&om);
}

/* Destroying a scheduler ends what still runs or waits with "cancelled". */
static void destroy_cancels_everything(void **state) {
    (void)state;
    static const char *const slow[] = {"delay_us=1000"};
    open_model om;
    open_sched(&om, slow, 1, 1, 4, 0);
    int32_t prompt[3] = {'x', 'y', 'z'};
    sy_gen_params p = serve_greedy(0);
    collector *a = collector_new(), *b = collector_new();
    char err[256];
    int status;
    sy_gen *ga = sy_scheduler_submit(om.sched, prompt, 3, &p, collector_callback, a, err, sizeof err, &status);
    sy_gen *gb = sy_scheduler_submit(om.sched, prompt, 3, &p, collector_callback, b, err, sizeof err, &status);
    assert_true(collector_wait_events(a, 2, 10));
    close_sched(&om);
    assert_true(a->done && b->done);
    assert_string_equal(a->finish_reason, "cancelled");
    assert_string_equal(b->finish_reason, "cancelled");
    sy_gen_cancel(ga); /* after the end: harmless even with the scheduler gone */
    sy_gen_release(ga);
    sy_gen_release(gb);
    collector_delete(a);
    collector_delete(b);
}

/* ---- prefix reuse ------------------------------------------------------------------------------------------ */

static void cold_run(const int32_t *prompt, size_t n, const sy_gen_params *p, collector *c) {
    open_model om;
    open_sched(&om, NULL, 0, 1, 4, 0);
    serve_generate(om.sched, prompt, n, p, c);
    close_sched(&om);
}

static void prefix_reuse_in_slot(void **state) {
    (void)state;
    open_model om;
    open_sched(&om, NULL, 0, 1, 4, 0);
    char *text = make_prompt(77, 300);
    size_t n;
    int32_t *prompt = serve_tokenize(&om.lm, text, &n);
    sy_gen_params p = serve_greedy(20);

    collector *first = collector_new();
    serve_generate(om.sched, prompt, n, &p, first);
    assert_int_equal(first->usage.cached_tokens, 0);
    assert_int_equal(first->n_tokens, first->usage.completion_tokens); /* one text event per token */

    /* The same prompt again: everything but the last token is cached; same output. */
    collector *again = collector_new();
    serve_generate(om.sched, prompt, n, &p, again);
    assert_int_equal(again->usage.cached_tokens, n - 1);
    assert_string_equal(again->text, first->text);

    /* A second turn: prompt + answer + more. The slot holds prompt + all but the last answer token. */
    size_t n2 = n + first->n_tokens + 10;
    int32_t *turn = malloc(n2 * sizeof *turn);
    memcpy(turn, prompt, n * sizeof *turn);
    memcpy(turn + n, first->tokens, first->n_tokens * sizeof *turn);
    for (size_t i = 0; i < 10; i++) turn[n + first->n_tokens + i] = 'a' + (int32_t)i;
    collector *second = collector_new(), *cold = collector_new();
    serve_generate(om.sched, turn, n2, &p, second);
    assert_int_equal(second->usage.cached_tokens, n + first->n_tokens - 1);
    cold_run(turn, n2, &p, cold);
    assert_int_equal(cold->usage.cached_tokens, 0);
    assert_string_equal(second->text, cold->text);

    /* A different prompt sharing only the first half. */
    int32_t *half = malloc(n * sizeof *half);
    memcpy(half, prompt, n * sizeof *half);
    for (size_t i = n / 2; i < n; i++) half[i] = '~';
    collector *h = collector_new(), *hcold = collector_new();
    serve_generate(om.sched, half, n, &p, h);
    assert_int_equal(h->usage.cached_tokens, n / 2);
    cold_run(half, n, &p, hcold);
    assert_string_equal(h->text, hcold->text);

    sy_scheduler_stats st;
    sy_scheduler_get_stats(om.sched, &st);
    assert_int_equal(st.tokens_cached, (n - 1) + (n + first->n_tokens - 1) + n / 2);

    collector_delete(first);
    collector_delete(again);
    collector_delete(second);
    collector_delete(cold);
    collector_delete(h);
    collector_delete(hcold);
    free(turn);
    free(half);
    free(prompt);
    free(text);
    close_sched(&om);
}

/* A request whose prefix sits in another (busy) slot forks that slot's sequence instead of prefilling. */
static void prefix_reuse_across_slots(void **state) {
    (void)state;
    static const char *const slow[] = {"delay_us=500"};
    open_model om;
    open_sched(&om, slow, 1, 2, 4, 0);
    char *text = make_prompt(91, 200);
    size_t n;
    int32_t *prompt = serve_tokenize(&om.lm, text, &n);
    sy_gen_params long_run = serve_greedy(0);
    collector *busy = collector_new();
    char err[256];
    int status;
    sy_gen *g = sy_scheduler_submit(om.sched, prompt, n, &long_run, collector_callback, busy, err, sizeof err,
                                    &status);
    assert_non_null(g);
    assert_true(collector_wait_events(busy, 2, 10)); /* its prompt is in its slot now */

    size_t shared = 150;
    int32_t *other = malloc((shared + 20) * sizeof *other);
    memcpy(other, prompt, shared * sizeof *other);
    for (size_t i = 0; i < 20; i++) other[shared + i] = '~';
    sy_gen_params p = serve_greedy(15);
    collector *forked = collector_new(), *cold = collector_new();
    serve_generate(om.sched, other, shared + 20, &p, forked);
    assert_int_equal(forked->usage.cached_tokens, shared);
    sy_gen_cancel(g);
    assert_true(collector_wait(busy, 10));
    sy_gen_release(g);
    cold_run(other, shared + 20, &p, cold);
    assert_string_equal(forked->text, cold->text);

    collector_delete(busy);
    collector_delete(forked);
    collector_delete(cold);
    free(other);
    free(prompt);
    free(text);
    close_sched(&om);
}

/* The host prefix cache: a conversation whose slot was taken by another prompt comes back and forks its parked
 * sequence; without the cache it would be prefilled again. */
static void parked_sequences_serve_returning_prompts(void **state) {
    (void)state;
    for (int with_cache = 0; with_cache <= 1; with_cache++) {
        sy_loaded_model lm;
        serve_open_model(&env, model_path, NULL, 0, &lm);
        sy_scheduler_options so = {.parallel = 1, .max_queue = 4, .cache_tokens = with_cache ? 2000 : 0};
        sy_scheduler *s = sy_scheduler_create(&lm, &so);
        assert_non_null(s);
        char *ptext = make_prompt(201, 300), *qtext = make_prompt(202, 100);
        size_t np, nq;
        int32_t *p = serve_tokenize(&lm, ptext, &np), *q = serve_tokenize(&lm, qtext, &nq);
        q[0] = '~'; /* nothing in common with p */
        sy_gen_params params = serve_greedy(10);
        collector *a = collector_new(), *b = collector_new(), *c = collector_new(), *b2 = collector_new(),
                  *cold = collector_new();
        serve_generate(s, p, np, &params, a);
        serve_generate(s, q, nq, &params, b); /* takes the only slot: p's sequence is parked */
        sy_scheduler_stats st;
        sy_scheduler_get_stats(s, &st);
        assert_int_equal(st.parked_sequences, with_cache ? 1 : 0);
        assert_int_equal(st.parked_tokens, with_cache ? np + 9 : 0);

        size_t nc = np + a->n_tokens + 5;
        int32_t *turn = malloc(nc * sizeof *turn);
        memcpy(turn, p, np * sizeof *turn);
        memcpy(turn + np, a->tokens, a->n_tokens * sizeof *turn);
        for (size_t i = 0; i < 5; i++) turn[np + a->n_tokens + i] = 'A' + (int32_t)i;
        serve_generate(s, turn, nc, &params, c);
        assert_int_equal(c->usage.cached_tokens, with_cache ? np + 9 : 0);
        cold_run(turn, nc, &params, cold);
        assert_string_equal(c->text, cold->text);
        /* And q's conversation was parked in turn. */
        serve_generate(s, q, nq, &params, b2);
        assert_int_equal(b2->usage.cached_tokens, with_cache ? nq - 1 : 0);
        assert_string_equal(b2->text, b->text);
        sy_scheduler_get_stats(s, &st);
        assert_int_equal(st.parked_sequences, with_cache ? 2 : 0);

        sy_scheduler_destroy(s);
        sy_loaded_model_close(&lm);
        collector_delete(a);
        collector_delete(b);
        collector_delete(c);
        collector_delete(b2);
        collector_delete(cold);
        free(turn);
        free(p);
        free(q);
        free(ptext);
        free(qtext);
    }
}

/* The budget: the least recently used parked sequence goes when a new one needs room. */
static void parked_sequences_respect_budget(void **state) {
    (void)state;
    sy_loaded_model lm;
    serve_open_model(&env, model_path, NULL, 0, &lm);
    sy_scheduler_options so = {.parallel = 1, .max_queue = 4, .cache_tokens = 250};
    sy_scheduler *s = sy_scheduler_create(&lm, &so);
    sy_gen_params params = serve_greedy(3);
    int32_t prompts[4][100];
    for (int k = 0; k < 4; k++)
        for (int i = 0; i < 100; i++) prompts[k][i] = 'a' + k + (i % 7);
    collector *c[5];
    for (int k = 0; k < 4; k++) {
        c[k] = collector_new();
        serve_generate(s, prompts[k], 100, &params, c[k]);
        assert_int_equal(c[k]->usage.cached_tokens, 0);
    }
    /* Three were parked (102 tokens each); the budget holds two: the first went. */
    sy_scheduler_stats st;
    sy_scheduler_get_stats(s, &st);
    assert_int_equal(st.parked_sequences, 2);
    assert_int_equal(st.parked_tokens, 204);
    c[4] = collector_new();
    serve_generate(s, prompts[1], 100, &params, c[4]);
    assert_int_equal(c[4]->usage.cached_tokens, 99);
    assert_string_equal(c[4]->text, c[1]->text);
    collector *again0 = collector_new();
    serve_generate(s, prompts[0], 100, &params, again0);
    assert_int_equal(again0->usage.cached_tokens, 0);
    assert_string_equal(again0->text, c[0]->text);
    sy_scheduler_destroy(s);
    sy_loaded_model_close(&lm);
    for (int k = 0; k < 5; k++) collector_delete(c[k]);
    collector_delete(again0);
}

/* A recurrent engine cannot roll back far: reuse falls back to a fresh prefill and the output stays right. */
static void prefix_reuse_recurrent_fallback(void **state) {
    (void)state;
    static const char *const recurrent[] = {"recurrent=1", "history=16"};
    open_model om;
    open_sched(&om, recurrent, 2, 1, 4, 0);
    char *text = make_prompt(13, 200);
    size_t n;
    int32_t *prompt = serve_tokenize(&om.lm, text, &n);
    sy_gen_params p = serve_greedy(10);
    collector *a = collector_new(), *b = collector_new(), *c = collector_new();
    serve_generate(om.sched, prompt, n, &p, a);
    /* Same prompt: roll back by the answer plus one token, within the kept history. */
    serve_generate(om.sched, prompt, n, &p, b);
    assert_int_equal(b->usage.cached_tokens, n - 1);
    assert_string_equal(a->text, b->text);
    /* Half the prompt: too deep to roll back; prefilled from the start, same output as cold. */
    for (size_t i = n / 2; i < n; i++) prompt[i] = '~';
    serve_generate(om.sched, prompt, n, &p, c);
    assert_int_equal(c->usage.cached_tokens, 0);
    collector *cold = collector_new();
    open_model om2;
    open_sched(&om2, recurrent, 2, 1, 4, 0);
    serve_generate(om2.sched, prompt, n, &p, cold);
    close_sched(&om2);
    assert_string_equal(c->text, cold->text);
    collector_delete(a);
    collector_delete(b);
    collector_delete(c);
    collector_delete(cold);
    free(prompt);
    free(text);
    close_sched(&om);
}

/* ---- engine errors ----------------------------------------------------------------------------------------- */

/* The test engine's table with a decode that fails whenever a batch carries the poison token, so one bad request
 * can be put into a batch with good ones. */
#define POISON 7
static const sy_engine_api *real_engine;
static _Thread_local int faulty_failed_last;

static const char *faulty_error_message(void) {
    return faulty_failed_last ? "poisoned batch" : real_engine->error_message();
}

static sy_status faulty_decode(sy_model *model, const sy_decode_batch *batch) {
    for (uint32_t i = 0; i < batch->n_items; i++) {
        const sy_decode_item *item = sy_decode_batch_item(batch, i);
        for (uint32_t k = 0; k < item->n_tokens; k++) {
            if (item->tokens[k] == POISON) {
                faulty_failed_last = 1;
                return SY_ERR_INTERNAL;
            }
        }
    }
    faulty_failed_last = 0;
    return real_engine->decode(model, batch);
}

static void engine_error_ends_only_its_request(void **state) {
    (void)state;
    static const char *const slow[] = {"delay_us=300"};
    open_model om;
    serve_open_model(&env, model_path, slow, 1, &om.lm);
    real_engine = om.lm.engine;
    sy_engine_api faulty = *real_engine;
    faulty.decode = faulty_decode;
    faulty.error_message = faulty_error_message;
    om.lm.engine = &faulty;
    /* The faults are in decode: the host samples, so every token passes through it. */
    sy_scheduler_options so = {.parallel = 2, .max_queue = 4, .host_sampling = true};
    om.sched = sy_scheduler_create(&om.lm, &so);
    assert_non_null(om.sched);

    char *text = make_prompt(3, 60);
    size_t n;
    int32_t *good = serve_tokenize(&om.lm, text, &n);
    int32_t *bad = malloc(n * sizeof *bad);
    memcpy(bad, good, n * sizeof *bad);
    bad[n - 3] = POISON;
    sy_gen_params p = serve_greedy(40);
    collector *ok = collector_new(), *failed = collector_new(), *after = collector_new(), *cold = collector_new();
    char err[256];
    int status;
    sy_gen *g_ok = sy_scheduler_submit(om.sched, good, n, &p, collector_callback, ok, err, sizeof err, &status);
    assert_true(collector_wait_events(ok, 1, 10)); /* decoding: the bad prompt joins its batches */
    sy_gen *g_bad = sy_scheduler_submit(om.sched, bad, n, &p, collector_callback, failed, err, sizeof err, &status);
    assert_true(collector_wait(failed, 10));
    assert_int_equal(failed->end_type, SY_GEN_EVENT_ERROR);
    assert_non_null(strstr(failed->message, "poisoned batch"));
    assert_true(collector_wait(ok, 10));
    assert_int_equal(ok->end_type, SY_GEN_EVENT_DONE);
    sy_gen_release(g_ok);
    sy_gen_release(g_bad);
    /* The loop goes on, and the failed slot works again. */
    serve_generate(om.sched, good, n, &p, after);
    assert_int_equal(after->end_type, SY_GEN_EVENT_DONE);
    assert_string_equal(after->text, ok->text);
    sy_scheduler_stats st;
    sy_scheduler_get_stats(om.sched, &st);
    assert_int_equal(st.requests_done, 3);
    close_sched(&om);
    cold_run(good, n, &p, cold);
    assert_string_equal(ok->text, cold->text);
    collector_delete(ok);
    collector_delete(failed);
    collector_delete(after);
    collector_delete(cold);
    free(good);
    free(bad);
    free(text);
}

/* The test engine's table with a KV pool that holds one sequence: a decode while more sequences exist fails with
 * SY_ERR_OUT_OF_MEMORY, as an engine whose KV memory is full does. */
static atomic_int live_sequences;
static _Thread_local int pool_failed_last;

static const char *pool_error_message(void) {
    return pool_failed_last ? "KV pool full" : real_engine->error_message();
}

static sy_status pool_seq_create(sy_model *model, sy_seq **out) {
    pool_failed_last = 0;
    sy_status st = real_engine->seq_create(model, out);
    if (st == SY_OK) atomic_fetch_add(&live_sequences, 1);
    return st;
}

static sy_status pool_seq_fork(sy_model *model, const sy_seq *src, uint32_t n_tokens, sy_seq **out) {
    pool_failed_last = 0;
    sy_status st = real_engine->seq_fork(model, src, n_tokens, out);
    if (st == SY_OK) atomic_fetch_add(&live_sequences, 1);
    return st;
}

static void pool_seq_free(sy_model *model, sy_seq *seq) {
    if (seq != NULL) atomic_fetch_sub(&live_sequences, 1);
    real_engine->seq_free(model, seq);
}

static sy_status pool_decode(sy_model *model, const sy_decode_batch *batch) {
    if (atomic_load(&live_sequences) > 1) {
        pool_failed_last = 1;
        return SY_ERR_OUT_OF_MEMORY;
    }
    pool_failed_last = 0;
    return real_engine->decode(model, batch);
}

/* Parked sequences hold engine memory only to save prefill: when the engine runs out, they go and the request
 * is served (rather than failing). */
static void parked_sequences_give_way_when_memory_runs_out(void **state) {
    (void)state;
    open_model om;
    serve_open_model(&env, model_path, NULL, 0, &om.lm);
    real_engine = om.lm.engine;
    sy_engine_api pool = *real_engine;
    pool.seq_create = pool_seq_create;
    pool.seq_fork = pool_seq_fork;
    pool.seq_free = pool_seq_free;
    pool.decode = pool_decode;
    pool.error_message = pool_error_message;
    om.lm.engine = &pool;
    atomic_store(&live_sequences, 0);
    sy_scheduler_options so = {.parallel = 1, .max_queue = 4, .cache_tokens = 4000, .host_sampling = true};
    om.sched = sy_scheduler_create(&om.lm, &so);
    assert_non_null(om.sched);

    char *ptext = make_prompt(31, 120), *qtext = make_prompt(32, 80);
    size_t np, nq;
    int32_t *p = serve_tokenize(&om.lm, ptext, &np), *q = serve_tokenize(&om.lm, qtext, &nq);
    q[0] = '~'; /* nothing in common with p */
    sy_gen_params params = serve_greedy(12);
    collector *a = collector_new(), *b = collector_new(), *cold = collector_new();
    serve_generate(om.sched, p, np, &params, a);
    assert_int_equal(a->end_type, SY_GEN_EVENT_DONE);
    /* q takes the only slot: p's sequence is parked, a second one is made for q, and the pool refuses q's
     * decode until the parked one is gone. */
    serve_generate(om.sched, q, nq, &params, b);
    if (b->end_type != SY_GEN_EVENT_DONE) fail_msg("q failed: %s", b->message);
    sy_scheduler_stats st;
    sy_scheduler_get_stats(om.sched, &st);
    assert_int_equal(st.parked_sequences, 0);
    assert_int_equal(st.parked_tokens, 0);
    assert_int_equal(atomic_load(&live_sequences), 1);
    close_sched(&om);
    assert_int_equal(atomic_load(&live_sequences), 0);
    cold_run(q, nq, &params, cold);
    assert_string_equal(b->text, cold->text);
    collector_delete(a);
    collector_delete(b);
    collector_delete(cold);
    free(p);
    free(q);
    free(ptext);
    free(qtext);
}

/* ---- logprobs ---------------------------------------------------------------------------------------------- */

static void logprobs_are_log_softmax(void **state) {
    (void)state;
    open_model om;
    open_sched(&om, NULL, 0, 1, 4, 0);
    size_t n;
    int32_t *prompt = serve_tokenize(&om.lm, "logprobs please", &n);
    sy_gen_params p = serve_greedy(12);
    p.logprobs = true;
    p.top_logprobs = 3;
    collector *c = collector_new(), *plain = collector_new();
    serve_generate(om.sched, prompt, n, &p, c);
    assert_int_equal(c->n_tokens, 12); /* one event per generated token */
    for (size_t i = 0; i < c->n_tokens; i++) {
        assert_true(c->logprobs[i] <= 0);
        assert_true(c->logprobs[i] > -50);
        assert_int_equal(c->n_top[i], 3);
        /* Greedy: the chosen token is the best alternative. */
        assert_int_equal(c->top[i][0].token, c->tokens[i]);
        assert_true(fabs(c->top[i][0].logprob - c->logprobs[i]) < 1e-12);
        assert_true(c->top[i][0].logprob >= c->top[i][1].logprob);
        assert_true(c->top[i][1].logprob >= c->top[i][2].logprob);
        assert_true(c->top[i][0].token != c->top[i][1].token);
    }
    /* Same text without logprobs. */
    p.logprobs = false;
    p.top_logprobs = 0;
    serve_generate(om.sched, prompt, n, &p, plain);
    assert_string_equal(plain->text, c->text);
    collector_delete(c);
    collector_delete(plain);
    free(prompt);
    close_sched(&om);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(batched_output_equals_alone),
        cmocka_unit_test(stop_strings),
        cmocka_unit_test(max_tokens_and_end_of_generation),
        cmocka_unit_test(context_full_ends_with_length),
        cmocka_unit_test(refused_submits),
        cmocka_unit_test(cancel_mid_generation),
        cmocka_unit_test(one_client_leaving_cancels_only_its_item),
        cmocka_unit_test(max_decode_tokens_bounds_each_step),
        cmocka_unit_test(engine_samples_where_it_can),
        cmocka_unit_test(queue_full_is_429),
        cmocka_unit_test(destroy_cancels_everything),
        cmocka_unit_test(prefix_reuse_in_slot),
        cmocka_unit_test(prefix_reuse_across_slots),
        cmocka_unit_test(parked_sequences_serve_returning_prompts),
        cmocka_unit_test(parked_sequences_respect_budget),
        cmocka_unit_test(prefix_reuse_recurrent_fallback),
        cmocka_unit_test(engine_error_ends_only_its_request),
        cmocka_unit_test(parked_sequences_give_way_when_memory_runs_out),
        cmocka_unit_test(logprobs_are_log_softmax),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
