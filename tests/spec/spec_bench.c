/*
 * spec-bench: measurements behind docs/benchmarks.md's speculative decoding section (driven by
 * tools/bench/spec_bench.py). Not a test.
 *
 *   spec-bench decode MODEL [options]      decode tokens/s without speculation and with the replay drafter at
 *                                          several corruption rates (or with --draft SPEC), in one process: the
 *                                          generations take turns step by step, so that other processes' load
 *                                          falls on all alike; every speculative output is checked against the
 *                                          plain one
 *   spec-bench verify-cost MODEL [options] seconds of one decode call of 1..K+1 tokens (what verifying K
 *                                          proposals costs relative to a plain step)
 *   spec-bench ngram-cost [options]        the n-gram drafter's time per proposal on a long context, through its
 *                                          plugin ABI
 *
 * The decode loop is the one of `switchyard generate` (host/cmd_generate.c): prefill in one call, then one decode
 * call per step carrying the last token and the proposals, host-side verification, seq_truncate of the rejected
 * rows. Output is JSON, one object per line.
 */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli_common.h"
#include "plugins/loaded_model.h"
#include "plugins/plugin_loader.h"
#include "engine/sampler.h"
#include "engine/speculative.h"
#include "base/util.h"

typedef struct bench_opts {
    const char *plugin;
    const char *plugin_dir;
    const char *model;
    const char *threads;
    const char *prompt;      /* text; NULL: pseudo-random ids */
    uint32_t n_prompt;       /* pseudo-random prompt ids */
    uint32_t n_new;
    uint32_t draft_max;
    uint32_t reps;
    const char *pcts;        /* corruption percentages */
    const char *draft;       /* another drafter than replay (decode measures it alone) */
    double draft_cost;       /* < 0: measured */
    const char *replay_path; /* where the replay file goes */
    uint32_t context;        /* ngram-cost */
    uint32_t n_vocab;        /* ngram-cost */
    uint32_t steps;          /* ngram-cost */
} bench_opts;

static void die(const char *fmt, const char *arg) {
    fprintf(stderr, "spec-bench: ");
    fprintf(stderr, fmt, arg);
    fputc('\n', stderr);
    exit(1);
}

static uint32_t parse_count(const char *s, const char *what) {
    uint64_t v;
    if (sy_parse_u64(s, 1u << 30, &v) != 0) die("%s: not a count", what);
    return (uint32_t)v;
}

/* ---- the model and the decode loop ---- */

static void open_model(const bench_opts *o, sy_plugin_registry *reg, sy_loaded_model *lm) {
    char dir[4096], err[1024];
    if (sy_cli_load_plugins(o->plugin_dir, reg, dir, sizeof dir) != 0) exit(1);
    sy_option opts[2] = {{"threads", o->threads}, {"ctx_size", "4096"}};
    if (sy_loaded_model_open(reg, o->plugin, o->model, opts, 2, lm, err, sizeof err) != 0) die("%s", err);
}

static int32_t *make_prompt(const bench_opts *o, const sy_loaded_model *lm, size_t *n) {
    if (o->prompt != NULL) {
        char err[512];
        int32_t *ids = sy_loaded_model_tokenize(lm, o->prompt, strlen(o->prompt),
                                                SY_TOKENIZE_PARSE_SPECIAL | SY_TOKENIZE_ADD_SPECIAL, n, err,
                                                sizeof err);
        if (ids == NULL || *n == 0) die("tokenize: %s", err);
        return ids;
    }
    /* As `switchyard bench` does: an LCG over the lower half of the vocabulary (ordinary tokens). */
    int32_t *ids = sy_xmalloc(o->n_prompt * sizeof *ids);
    uint32_t range = lm->info.n_vocab > 2 ? lm->info.n_vocab / 2 : 1;
    for (uint32_t i = 0; i < o->n_prompt; i++) ids[i] = (int32_t)((i * 1103515245u + 12345u) % range);
    *n = o->n_prompt;
    return ids;
}

typedef struct run_result {
    double decode_seconds; /* the steps' time: from the first sampled token to the last */
    double engine_seconds; /* of which in the engine's decode calls */
    uint32_t generated;
    uint64_t drafted, accepted, steps, spec_steps;
    uint64_t rejecting_steps;                /* verifying steps that rejected a proposal */
    uint32_t k_hist[SY_SPEC_MAX_DRAFT + 1];  /* decode steps by proposals verified */
    int32_t *ids;                            /* the output, generated tokens */
} run_result;

static sy_status decode_run(const sy_loaded_model *lm, sy_seq *seq, const int32_t *tokens, uint32_t n,
                            uint32_t n_logits, float *logits) {
    sy_decode_item item = {sizeof item, seq, tokens, n, n_logits, logits, NULL};
    sy_decode_batch batch = {sizeof batch, 1, sizeof item, &item, NULL, NULL};
    return lm->engine->decode(lm->model, &batch);
}

/* One greedy generation of n_new tokens after the prompt, with proposals from spec when given, advanced a step at
 * a time (so that several can take turns and share whatever the machine's load does meanwhile). */
typedef struct gen_state {
    const sy_loaded_model *lm;
    sy_speculator *spec;
    sy_sampler *sampler;
    sy_spec_seq *q;
    sy_seq *seq;
    float *logits;
    int32_t *history;
    uint32_t n_prompt, n_history, n_new, generated, draft_room;
    int32_t token;
    bool done;
    run_result r;
} gen_state;

/* Prefills the prompt (not timed) and takes the first token. */
static void gen_start(gen_state *g, const sy_loaded_model *lm, const int32_t *prompt, uint32_t n_prompt,
                      uint32_t n_new, sy_speculator *spec) {
    memset(g, 0, sizeof *g);
    g->lm = lm;
    g->spec = spec;
    g->n_prompt = n_prompt;
    g->n_new = n_new;
    uint32_t n_vocab = lm->info.n_vocab;
    g->draft_room = spec != NULL ? sy_speculator_get_options(spec)->draft_max : 0;
    sy_sampler_params sp = sy_sampler_defaults();
    sp.temperature = 0;
    g->sampler = sy_sampler_create(&sp, n_vocab);
    g->logits = sy_xmalloc((size_t)n_vocab * sizeof *g->logits);
    g->history = sy_xmalloc((n_prompt + n_new + 1 + g->draft_room) * sizeof *g->history);
    memcpy(g->history, prompt, n_prompt * sizeof *g->history);
    g->n_history = n_prompt;
    g->q = spec != NULL ? sy_spec_seq_create(spec, n_vocab) : NULL;
    sy_spec_seq_begin(g->q, &sp);
    if (lm->engine->seq_create(lm->model, &g->seq) != SY_OK) die("%s", lm->engine->error_message());
    if (decode_run(lm, g->seq, prompt, n_prompt, 1, g->logits) != SY_OK)
        die("prefill: %s", lm->engine->error_message());
    double t0 = sy_now_seconds();
    g->token = sy_sampler_sample(g->sampler, g->logits, g->history, g->n_history);
    g->r.decode_seconds = sy_now_seconds() - t0;
    g->done = n_new == 0;
}

/* One step of `switchyard generate`'s loop: the token just chosen joins the history; it is decoded with the
 * drafter's proposals after it; the verdict takes the accepted ones and the target's own next token. */
static void gen_step(gen_state *g) {
    const sy_loaded_model *lm = g->lm;
    run_result *r = &g->r;
    double t0 = sy_now_seconds();
    g->history[g->n_history++] = g->token;
    if (++g->generated == g->n_new) {
        g->done = true;
        r->decode_seconds += sy_now_seconds() - t0;
        return;
    }
    uint32_t left = g->n_new - g->generated - 1;
    uint32_t limit = left < g->draft_room ? left : g->draft_room;
    uint32_t k = g->q != NULL && limit > 0 ? sy_spec_seq_propose(g->q, g->history, g->n_history, limit) : 0;
    double td = sy_now_seconds();
    if (decode_run(lm, g->seq, &g->history[g->n_history - 1], 1 + k, 1 + k, k ? sy_spec_seq_rows(g->q) : g->logits) !=
        SY_OK)
        die("decode: %s", lm->engine->error_message());
    double engine = sy_now_seconds() - td;
    r->engine_seconds += engine;
    if (g->spec != NULL) sy_speculator_note_decode(g->spec, 1 + k, 1, false, engine);
    r->steps++;
    r->k_hist[k]++;
    if (k == 0) {
        g->token = sy_sampler_sample(g->sampler, g->logits, g->history, g->n_history);
        r->decode_seconds += sy_now_seconds() - t0;
        return;
    }
    r->spec_steps++;
    sy_spec_verdict v;
    sy_spec_seq_verify(g->q, g->sampler, g->history, g->n_history, k, &v);
    r->drafted += v.n_drafted;
    r->accepted += v.n_accepted;
    r->rejecting_steps += v.n_accepted < k;
    if (v.n_accepted < k && lm->engine->seq_truncate(lm->model, g->seq, g->n_history + v.n_accepted) != SY_OK)
        die("seq_truncate: %s (the benchmark does not rebuild sequences)", lm->engine->error_message());
    uint32_t take = v.n_accepted; /* k <= left: the accepted ones and the next token fit */
    g->n_history += take;
    g->generated += take;
    g->token = v.next;
    r->decode_seconds += sy_now_seconds() - t0;
}

/* The output into g->r.ids; frees the rest. */
static void gen_finish(gen_state *g) {
    run_result *r = &g->r;
    r->generated = g->generated;
    r->ids = sy_xmalloc((g->generated ? g->generated : 1) * sizeof *r->ids);
    memcpy(r->ids, g->history + g->n_prompt, g->generated * sizeof *r->ids);
    g->lm->engine->seq_free(g->lm->model, g->seq);
    sy_spec_seq_free(g->q);
    sy_sampler_free(g->sampler);
    free(g->history);
    free(g->logits);
}

static void generate(const sy_loaded_model *lm, const int32_t *prompt, uint32_t n_prompt, uint32_t n_new,
                     sy_speculator *spec, run_result *r) {
    gen_state g;
    gen_start(&g, lm, prompt, n_prompt, n_new, spec);
    while (!g.done) gen_step(&g);
    gen_finish(&g);
    *r = g.r;
}

static void print_run(const char *mode, int pct, uint32_t rep, const run_result *r, const run_result *plain,
                      double cost) {
    bool same = plain == NULL || (r->generated == plain->generated &&
                                  memcmp(r->ids, plain->ids, r->generated * sizeof *r->ids) == 0);
    printf("{\"kind\": \"decode\", \"mode\": \"%s\", \"corrupt_pct\": %d, \"rep\": %u, \"tokens\": %u, "
           "\"seconds\": %.6f, \"engine_seconds\": %.6f, \"tok_s\": %.4f, \"steps\": %llu, \"spec_steps\": %llu, \"drafted\": %llu, "
           "\"accepted\": %llu, \"rejecting_steps\": %llu, \"acceptance\": %.4f, \"per_proposal\": %.4f, "
           "\"cost_per_draft\": %.4f, \"same_as_plain\": %s, \"k_hist\": [",
           mode, pct, (unsigned)rep, (unsigned)r->generated, r->decode_seconds, r->engine_seconds,
           r->decode_seconds > 0 ? r->generated / r->decode_seconds : 0.0, (unsigned long long)r->steps,
           (unsigned long long)r->spec_steps, (unsigned long long)r->drafted, (unsigned long long)r->accepted,
           (unsigned long long)r->rejecting_steps, r->drafted ? (double)r->accepted / (double)r->drafted : 0.0,
           r->accepted + r->rejecting_steps ? (double)r->accepted / (double)(r->accepted + r->rejecting_steps) : 0.0,
           cost, same ? "true" : "false");
    uint32_t last = 0;
    for (uint32_t k = 0; k <= SY_SPEC_MAX_DRAFT; k++)
        if (r->k_hist[k] != 0) last = k;
    for (uint32_t k = 0; k <= last; k++) printf("%s%u", k ? ", " : "", (unsigned)r->k_hist[k]);
    printf("]}\n");
    fflush(stdout);
    if (!same) {
        fprintf(stderr, "spec-bench: the %s output (corruption %d%%) differs from the plain one\n", mode, pct);
        exit(1);
    }
}

static int cmd_decode(const bench_opts *o) {
    sy_plugin_registry reg = {0};
    sy_loaded_model lm;
    open_model(o, &reg, &lm);
    size_t n_prompt;
    int32_t *prompt = make_prompt(o, &lm, &n_prompt);
    /* The known continuation: a plain greedy run, written as the replay file (prompt ids, then output ids). */
    run_result plain;
    generate(&lm, prompt, (uint32_t)n_prompt, o->n_new, NULL, &plain);
    FILE *f = fopen(o->replay_path, "w");
    if (f == NULL) die("cannot write %s", o->replay_path);
    for (size_t i = 0; i < n_prompt; i++) fprintf(f, "%d ", prompt[i]);
    fputc('\n', f);
    for (uint32_t i = 0; i < plain.generated; i++) fprintf(f, "%d\n", plain.ids[i]);
    if (fclose(f) != 0) die("cannot write %s", o->replay_path);
    printf("{\"kind\": \"setup\", \"model\": \"%s\", \"n_vocab\": %u, \"prompt_tokens\": %zu, \"new_tokens\": %u, "
           "\"threads\": \"%s\", \"draft_max\": %u, \"replay_file\": \"%s\"}\n",
           o->model, (unsigned)lm.info.n_vocab, n_prompt, (unsigned)o->n_new, o->threads, (unsigned)o->draft_max,
           o->replay_path);

    int pcts[16];
    size_t n_pcts = 0;
    char *list = sy_strdup(o->pcts), *save = NULL;
    for (char *t = strtok_r(list, ",", &save); t != NULL && n_pcts < 16; t = strtok_r(NULL, ",", &save))
    {
        uint64_t v;
        if (sy_parse_u64(t, 100, &v) != 0) die("--pcts: '%s' is not a percentage from 0 to 100", t);
        pcts[n_pcts++] = (int)v;
    }
    free(list);
    if (o->draft != NULL) {
        pcts[0] = -1;
        n_pcts = 1;
    }
    /* One speculator per rate for the whole run, as a server keeps one per model: its cost model carries over. */
    sy_speculator *specs[16];
    for (size_t i = 0; i < n_pcts; i++) {
        char spec_text[4200], err[1024];
        if (o->draft != NULL) snprintf(spec_text, sizeof spec_text, "%s", o->draft);
        else snprintf(spec_text, sizeof spec_text, "replay:%s:%d", o->replay_path, pcts[i]);
        sy_speculator_options so = sy_speculator_defaults();
        so.draft_max = o->draft_max;
        so.draft_cost = o->draft_cost;
        specs[i] = sy_speculator_open(&reg, spec_text, NULL, lm.info.n_vocab, NULL, 0, &so, err, sizeof err);
        if (specs[i] == NULL) die("%s", err);
    }
    /* Each repetition runs the plain generation and one per rate side by side: the next step is always the one of
     * the generation furthest behind (by share of its tokens done), so that all of them progress together and the
     * load of other processes falls on all alike; each one's time is the sum of its own steps. */
    for (uint32_t rep = 0; rep < o->reps; rep++) {
        gen_state g[17];
        size_t n_g = n_pcts + 1;
        gen_start(&g[0], &lm, prompt, (uint32_t)n_prompt, o->n_new, NULL);
        for (size_t i = 0; i < n_pcts; i++) gen_start(&g[i + 1], &lm, prompt, (uint32_t)n_prompt, o->n_new, specs[i]);
        for (;;) {
            size_t next = n_g;
            for (size_t i = 0; i < n_g; i++)
                if (!g[i].done && (next == n_g || g[i].generated < g[next].generated)) next = i;
            if (next == n_g) break;
            gen_step(&g[next]);
        }
        for (size_t i = 0; i < n_g; i++) {
            gen_finish(&g[i]);
            if (i == 0) print_run("plain", -1, rep, &g[i].r, &plain, 0);
            else print_run(o->draft != NULL ? o->draft : "replay", pcts[i - 1], rep, &g[i].r, &plain,
                           sy_speculator_cost(specs[i - 1]));
            free(g[i].r.ids);
        }
    }
    for (size_t i = 0; i < n_pcts; i++) sy_speculator_free(specs[i]);
    free(plain.ids);
    free(prompt);
    sy_loaded_model_close(&lm);
    sy_plugin_registry_close(&reg);
    return 0;
}

/* ---- verification cost ---- */

static int cmd_verify_cost(const bench_opts *o) {
    sy_plugin_registry reg = {0};
    sy_loaded_model lm;
    open_model(o, &reg, &lm);
    size_t n_prompt;
    int32_t *prompt = make_prompt(o, &lm, &n_prompt);
    uint32_t n_vocab = lm.info.n_vocab, k_max = o->draft_max;
    float *rows = sy_xmalloc((size_t)(k_max + 1) * n_vocab * sizeof *rows);
    sy_seq *seq = NULL;
    if (lm.engine->seq_create(lm.model, &seq) != SY_OK) die("%s", lm.engine->error_message());
    if (decode_run(&lm, seq, prompt, (uint32_t)n_prompt, 1, rows) != SY_OK) die("%s", lm.engine->error_message());
    int32_t batch[SY_SPEC_MAX_DRAFT + 1];
    for (uint32_t i = 0; i <= k_max && i <= SY_SPEC_MAX_DRAFT; i++) batch[i] = prompt[i % n_prompt];
    double plain = 0;
    for (uint32_t rep = 0; rep < o->reps; rep++) {
        /* Each call decodes 1 + k tokens at the end of the prompt, then rolls them back, as a rejected
         * verification does; k goes up and down so that drift in the machine's load spreads over all k. */
        for (uint32_t j = 0; j <= 2 * k_max + 1; j++) {
            uint32_t k = j <= k_max ? j : 2 * k_max + 1 - j;
            double best = INFINITY;
            for (int inner = 0; inner < 3; inner++) {
                double t0 = sy_now_seconds();
                if (decode_run(&lm, seq, batch, 1 + k, 1 + k, rows) != SY_OK) die("%s", lm.engine->error_message());
                double dt = sy_now_seconds() - t0;
                if (lm.engine->seq_truncate(lm.model, seq, (uint32_t)n_prompt) != SY_OK)
                    die("%s", lm.engine->error_message());
                if (dt < best) best = dt;
            }
            if (k == 0) plain = best;
            printf("{\"kind\": \"verify\", \"k\": %u, \"tokens\": %u, \"rep\": %u, \"seconds\": %.6f, "
                   "\"relative\": %.4f}\n",
                   (unsigned)k, (unsigned)(k + 1), (unsigned)rep, best, plain > 0 ? best / plain : 0.0);
            fflush(stdout);
        }
    }
    lm.engine->seq_free(lm.model, seq);
    free(rows);
    free(prompt);
    sy_loaded_model_close(&lm);
    sy_plugin_registry_close(&reg);
    return 0;
}

/* ---- the n-gram drafter's own cost ---- */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int cmd_ngram_cost(const bench_opts *o) {
    sy_plugin_registry reg = {0};
    char dir[4096];
    if (sy_cli_load_plugins(o->plugin_dir, &reg, dir, sizeof dir) != 0) return 1;
    const sy_drafter_api *api = NULL;
    for (size_t i = 0; i < reg.n_plugins && api == NULL; i++)
        if (reg.plugins[i].drafter != NULL && reg.plugins[i].drafter->supports("ngram") == SY_OK)
            api = reg.plugins[i].drafter;
    if (api == NULL) die("%s", "no drafter plugin makes ngram drafters");
    sy_drafter *d = NULL;
    if (api->create("ngram", NULL, o->n_vocab, NULL, 0, &d) != SY_OK) die("%s", api->error_message());

    /* A context like text that quotes itself now and then: pseudo-random ids, with a span of 8..40 tokens copied
     * from earlier every 60 tokens or so. */
    uint32_t total = o->context + 64 + o->steps * 10, n = 0;
    int32_t *ctx = sy_xmalloc(total * sizeof *ctx);
    uint64_t x = 88172645463325252ull;
    while (n < total) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        if (n > 100 && x % 60 == 0) {
            uint32_t len = 8 + (uint32_t)(x >> 20) % 33, from = (uint32_t)(x >> 40) % (n - 50);
            for (uint32_t i = 0; i < len && n < total; i++) ctx[n++] = ctx[from + i];
        } else {
            ctx[n++] = (int32_t)(x % o->n_vocab);
        }
    }
    int32_t out[SY_SPEC_MAX_DRAFT];
    uint32_t k = o->draft_max, got = 0, hits = 0, rounds = o->reps, len = 0;
    double first_sum = 0, first_max = 0;
    double *t = sy_xmalloc((size_t)rounds * o->steps * sizeof *t);
    size_t n_t = 0;
    for (uint32_t round = 0; round < rounds; round++) {
        /* A new request: the first proposal indexes the whole context at once. */
        sy_draft_state *rs = NULL;
        if (api->state_create(d, &rs) != SY_OK) die("%s", api->error_message());
        uint32_t start = o->context + round % 64; /* another tail each round */
        double t0 = sy_now_seconds();
        if (api->propose(d, rs, ctx, start, k, out, &got) != SY_OK) die("%s", api->error_message());
        double first = sy_now_seconds() - t0;
        first_sum += first;
        if (first > first_max) first_max = first;
        /* Then step by step as generation goes: 1..9 new tokens per step (an accepted run plus one), a proposal,
         * and the verdict. */
        len = start;
        for (uint32_t step = 0; step < o->steps; step++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            len += 1 + (uint32_t)(x % 9);
            double a = sy_now_seconds();
            if (api->propose(d, rs, ctx, len, k, out, &got) != SY_OK) die("%s", api->error_message());
            t[n_t++] = sy_now_seconds() - a;
            hits += got > 0;
            if (api->observe(d, rs, got, 0, ctx, len) != SY_OK) die("%s", api->error_message());
        }
        api->state_free(d, rs);
    }
    double sum = 0;
    for (size_t i = 0; i < n_t; i++) sum += t[i];
    qsort(t, n_t, sizeof *t, cmp_double);
    printf("{\"kind\": \"ngram\", \"context\": %u, \"n_vocab\": %u, \"k\": %u, \"rounds\": %u, "
           "\"first_propose_mean_us\": %.2f, \"first_propose_max_us\": %.2f, \"steps_per_round\": %u, "
           "\"last_context\": %u, \"mean_us\": %.3f, \"median_us\": %.3f, \"p99_us\": %.3f, \"max_us\": %.3f, "
           "\"proposals_made\": %u, \"proposals_asked\": %zu}\n",
           (unsigned)o->context, (unsigned)o->n_vocab, (unsigned)k, (unsigned)rounds, first_sum / rounds * 1e6,
           first_max * 1e6, (unsigned)o->steps, (unsigned)len, sum / (double)n_t * 1e6, t[n_t / 2] * 1e6,
           t[(size_t)((double)n_t * 0.99)] * 1e6, t[n_t - 1] * 1e6, (unsigned)hits, n_t);
    free(t);
    free(ctx);
    api->destroy(d);
    sy_plugin_registry_close(&reg);
    return 0;
}

static void usage(void) {
    fprintf(stderr,
            "usage: spec-bench decode|verify-cost MODEL [options]\n"
            "       spec-bench ngram-cost [options]\n\n"
            "  --plugin P          engine plugin (default: the first that accepts the model)\n"
            "  --plugin-dir DIR    where plugins are (default: beside switchyard, ../plugins)\n"
            "  --threads N         engine threads (default 2)\n"
            "  --prompt TEXT       prompt text (default: -p pseudo-random ids)\n"
            "  -p N                pseudo-random prompt ids (default 32)\n"
            "  -n N                tokens to generate (default 128)\n"
            "  --draft-max K       most proposals per step (default 8)\n"
            "  --draft-cost C      fix the cost of a proposal relative to a plain step (default: measured)\n"
            "  --pcts LIST         corruption percentages of the replay drafter (default 0,20,50,80,100)\n"
            "  --draft SPEC        decode: measure this drafter (ngram, ...) instead of replay\n"
            "  --reps N            repetitions (default 3)\n"
            "  --replay-file PATH  where decode writes the known continuation (default /tmp/spec-bench-replay.txt)\n"
            "  --context N         ngram-cost: context tokens (default 4000)\n"
            "  --vocab N           ngram-cost: vocabulary (default 151936)\n"
            "  --steps N           ngram-cost: proposals timed per round (default 100; --reps rounds)\n");
}

int main(int argc, char **argv) {
    bench_opts o = {.threads = "2", .n_prompt = 32, .n_new = 128, .draft_max = 8, .reps = 3,
                    .pcts = "0,20,50,80,100", .draft_cost = -1, .replay_path = "/tmp/spec-bench-replay.txt",
                    .context = 4000, .n_vocab = 151936, .steps = 100};
    enum { O_PLUGIN = 1000, O_DIR, O_THREADS, O_PROMPT, O_DRAFT_MAX, O_COST, O_PCTS, O_REPS, O_REPLAY, O_CONTEXT,
           O_VOCAB, O_STEPS, O_DRAFT };
    static const struct option longs[] = {
        {"plugin", required_argument, NULL, O_PLUGIN},       {"plugin-dir", required_argument, NULL, O_DIR},
        {"threads", required_argument, NULL, O_THREADS},     {"prompt", required_argument, NULL, O_PROMPT},
        {"draft-max", required_argument, NULL, O_DRAFT_MAX}, {"draft-cost", required_argument, NULL, O_COST},
        {"pcts", required_argument, NULL, O_PCTS},           {"reps", required_argument, NULL, O_REPS},
        {"replay-file", required_argument, NULL, O_REPLAY},  {"context", required_argument, NULL, O_CONTEXT},
        {"vocab", required_argument, NULL, O_VOCAB},         {"steps", required_argument, NULL, O_STEPS},
        {"draft", required_argument, NULL, O_DRAFT},         {NULL, 0, NULL, 0}};
    if (argc < 2) {
        usage();
        return 2;
    }
    const char *cmd = argv[1];
    optind = 2;
    int c;
    while ((c = getopt_long(argc, argv, "p:n:", longs, NULL)) != -1) {
        switch (c) {
        case O_PLUGIN: o.plugin = optarg; break;
        case O_DIR: o.plugin_dir = optarg; break;
        case O_THREADS: o.threads = optarg; break;
        case O_PROMPT: o.prompt = optarg; break;
        case 'p': o.n_prompt = parse_count(optarg, "-p"); break;
        case 'n': o.n_new = parse_count(optarg, "-n"); break;
        case O_DRAFT_MAX:
            o.draft_max = parse_count(optarg, "--draft-max");
            if (o.draft_max > SY_SPEC_MAX_DRAFT) die("%s: too many", "--draft-max");
            break;
        case O_COST:
            if (sy_parse_double(optarg, 0, 100, &o.draft_cost) != 0) die("%s: not a number", "--draft-cost");
            break;
        case O_PCTS: o.pcts = optarg; break;
        case O_DRAFT: o.draft = optarg; break;
        case O_REPS: o.reps = parse_count(optarg, "--reps"); break;
        case O_REPLAY: o.replay_path = optarg; break;
        case O_CONTEXT: o.context = parse_count(optarg, "--context"); break;
        case O_VOCAB: o.n_vocab = parse_count(optarg, "--vocab"); break;
        case O_STEPS: o.steps = parse_count(optarg, "--steps"); break;
        default: usage(); return 2;
        }
    }
    if (strcmp(cmd, "ngram-cost") == 0) return cmd_ngram_cost(&o);
    if (optind >= argc) {
        usage();
        return 2;
    }
    o.model = argv[optind];
    if (strcmp(cmd, "decode") == 0) return cmd_decode(&o);
    if (strcmp(cmd, "verify-cost") == 0) return cmd_verify_cost(&o);
    usage();
    return 2;
}
