/*
 * Constrained decoding through the scheduler, on the test engine (a byte vocabulary) and on stories260K (512
 * SentencePiece tokens): sampled at temperature 1 under json_object, JSON schemas of the corpus and the GBNF
 * fixtures, every output is what the grammar accepts (a complete document when it ended with "stop", a prefix of
 * one when max_tokens cut it with "length"); batched requests give what they give alone; n-gram speculation
 * gives the greedy output of plain decoding; unusable constraints are refused with 400.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "engine/constrain.h"
#include "grammar/sy_grammar.h"
#include "spec_fixture.h"
#include "base/buf.h"
#include "base/util.h"

static spec_env env;
static char *te_path;
static sy_loaded_model te, stories;
static sy_grammar_cache *cache;

static const char *source_dir(void) {
    const char *s = getenv("SY_SOURCE_DIR");
    return s != NULL ? s : ".";
}

static char *read_source(const char *rel) {
    char *path = sy_path_join(source_dir(), rel);
    FILE *f = fopen(path, "rb");
    if (f == NULL) fail_msg("cannot open %s", path);
    free(path);
    char *buf = malloc(1 << 20);
    assert_non_null(buf);
    size_t n = fread(buf, 1, (1 << 20) - 1, f);
    fclose(f);
    buf[n] = '\0';
    return buf;
}

static int group_setup(void **state) {
    (void)state;
    static const char *const plugins[] = {"test-engine", "gguf-quant", "spec-drafter"};
    if (spec_env_open_plugins(&env, plugins, 3) != 0) return -1;
    te_path = spec_write_model(&env, "te.txt", "name=te\nseed=5\nn_ctx=2048");
    cache = sy_grammar_cache_create(16);
    return cache != NULL ? 0 : -1;
}

static int group_teardown(void **state) {
    (void)state;
    if (te.model != NULL) sy_loaded_model_close(&te);
    if (stories.model != NULL) sy_loaded_model_close(&stories);
    free(te_path);
    sy_grammar_cache_free(cache);
    spec_env_close(&env);
    return 0;
}

static const sy_loaded_model *te_model(void) {
    if (te.model == NULL) spec_open_model(&env, te_path, NULL, 0, &te);
    return &te;
}

static const sy_loaded_model *stories_model(void) {
    if (stories.model == NULL) {
        static const char *const opts[] = {"threads=1", "ctx_size=1024"};
        char *path = sy_path_join(source_dir(), "tests/fixtures/stories260K/stories260K.gguf");
        spec_open_model_with(&env, "gguf-quant", path, opts, 2, &stories);
        free(path);
    }
    return &stories;
}

/* ---- grammars ---- */

static sy_grammar *json_object_grammar(void) {
    char err[256] = "";
    sy_schema_options o = sy_schema_defaults();
    sy_grammar *g = sy_grammar_cache_schema(cache, NULL, 0, &o, err, sizeof err);
    if (g == NULL) fail_msg("json_object: %s", err);
    return g;
}

/* The "schema" of a corpus file. */
static sy_grammar *schema_grammar(const char *file) {
    char rel[256];
    snprintf(rel, sizeof rel, "tests/fixtures/json-schemas/%s", file);
    char *text = read_source(rel);
    cJSON *doc = cJSON_Parse(text);
    free(text);
    assert_non_null(doc);
    char *schema = cJSON_PrintUnformatted(cJSON_GetObjectItem(doc, "schema"));
    cJSON_Delete(doc);
    char err[256] = "";
    sy_schema_options o = sy_schema_defaults();
    sy_grammar *g = sy_grammar_cache_schema(cache, schema, strlen(schema), &o, err, sizeof err);
    free(schema);
    if (g == NULL) fail_msg("%s: %s", file, err);
    return g;
}

static sy_grammar *gbnf_grammar(const char *file) {
    char rel[256];
    snprintf(rel, sizeof rel, "tests/fixtures/grammars/%s", file);
    char *text = read_source(rel);
    char err[256] = "";
    sy_grammar *g = sy_grammar_cache_gbnf(cache, text, strlen(text), err, sizeof err);
    free(text);
    if (g == NULL) fail_msg("%s: %s", file, err);
    return g;
}

/* ---- running and checking ---- */

static sy_scheduler *make_sched(const sy_loaded_model *lm, uint32_t parallel, sy_speculator *sp) {
    sy_scheduler_options so;
    memset(&so, 0, sizeof so);
    so.parallel = parallel;
    so.max_queue = 512;
    so.prefill_chunk = 64;
    so.speculator = sp;
    sy_scheduler *s = sy_scheduler_create(lm, &so);
    assert_non_null(s);
    return s;
}

/* The output text of a result (logprobs on: every token but a final end-of-generation one has its event). */
static char *result_text(const sy_loaded_model *lm, const spec_result *r, size_t *len) {
    sy_buf b;
    sy_buf_init(&b);
    char *piece = NULL;
    size_t cap = 0;
    for (uint32_t i = 0; i < r->n_tokens; i++) {
        uint32_t flags = lm->engine->token_flags(lm->model, r->tokens[i]);
        if (flags & (SY_TOKEN_CONTROL | SY_TOKEN_END_OF_GENERATION))
            fail_msg("control or end token %d inside constrained output", r->tokens[i]);
        long n = sy_loaded_model_token_bytes(lm, r->tokens[i], &piece, &cap);
        assert_true(n >= 0);
        sy_buf_append(&b, piece, (size_t)n);
    }
    free(piece);
    *len = b.len;
    sy_buf_append(&b, "", 1);
    return sy_buf_take(&b);
}

typedef struct verdicts {
    unsigned complete, cut;
} verdicts;

/* The output must be what the grammar accepts: complete ("stop"), or a prefix cut at max_tokens ("length"). */
static void check_output(const sy_loaded_model *lm, const sy_grammar_vocab *v, sy_grammar *g, const spec_result *r,
                         uint32_t max_tokens, bool json, const char *what, size_t i, verdicts *out) {
    if (r->error || !r->done) fail_msg("%s #%zu: failed", what, i);
    size_t len = 0;
    char *text = result_text(lm, r, &len);
    char err[256] = "";
    sy_grammar_state *st = sy_grammar_state_create(g, v, NULL, err, sizeof err);
    assert_non_null(st);
    if (sy_grammar_state_accept_bytes(st, (const uint8_t *)text, len) != 0)
        fail_msg("%s #%zu: the grammar rejects the output '%s'", what, i, text);
    if (strcmp(r->finish_reason, "stop") == 0) {
        if (!sy_grammar_state_can_end(st)) fail_msg("%s #%zu: ended before the grammar was complete: '%s'", what, i, text);
        if (json) {
            cJSON *doc = cJSON_ParseWithLength(text, len);
            if (doc == NULL) fail_msg("%s #%zu: not JSON: '%s'", what, i, text);
            cJSON_Delete(doc);
        }
        out->complete++;
    } else {
        if (strcmp(r->finish_reason, "length") != 0) fail_msg("%s #%zu: finish_reason %s", what, i, r->finish_reason);
        assert_int_equal(r->usage.completion_tokens, max_tokens);
        out->cut++;
    }
    sy_grammar_state_free(st);
    free(text);
}

static sy_grammar_vocab *vocab_of(const sy_loaded_model *lm) {
    int32_t *eog = NULL;
    uint32_t n_eog = 0;
    char err[256] = "";
    sy_grammar_vocab *v = sy_constrain_vocab_create(lm, &eog, &n_eog, err, sizeof err);
    if (v == NULL) fail_msg("vocab: %s", err);
    assert_true(n_eog > 0);
    free(eog);
    return v;
}

static int32_t *prompt_of(const sy_loaded_model *lm, const char *text, size_t *n) {
    char err[256] = "";
    int32_t *ids = sy_loaded_model_tokenize(lm, text, strlen(text), 0, n, err, sizeof err);
    if (ids == NULL || *n == 0) fail_msg("tokenize: %s", err);
    return ids;
}

/* n generations at temperature 1 (seeds 1..n) under g, all at once on a scheduler of 4 slots. */
static verdicts sample_many(const sy_loaded_model *lm, sy_grammar *g, size_t n, uint32_t max_tokens, bool json,
                            const char *what) {
    sy_grammar_vocab *v = vocab_of(lm);
    sy_scheduler *s = make_sched(lm, 4, NULL);
    size_t n_prompt = 0;
    int32_t *prompt = prompt_of(lm, "Once upon a time, the answer was", &n_prompt);
    spec_batch *b = spec_batch_new(n);
    for (size_t i = 0; i < n; i++) {
        sy_gen_params p = sy_gen_params_defaults();
        p.sampling.temperature = 1.0f;
        p.sampling.top_k = 0;
        p.sampling.top_p = 1.0f;
        p.sampling.min_p = 0.0f;
        p.sampling.seed = 1 + (uint64_t)i;
        p.max_tokens = max_tokens;
        p.logprobs = true;
        p.constraint.grammar = g;
        spec_batch_submit(b, i, s, prompt, n_prompt, &p);
    }
    assert_true(spec_batch_wait(b, 300));
    verdicts out = {0, 0};
    uint64_t tokens = 0;
    for (size_t i = 0; i < n; i++) {
        check_output(lm, v, g, &b->results[i], max_tokens, json, what, i, &out);
        tokens += b->results[i].usage.completion_tokens;
    }
    sy_scheduler_stats st;
    sy_scheduler_get_stats(s, &st);
    assert_int_equal(st.constrained_tokens, tokens); /* every one of them was chosen under the grammar */
    assert_true(st.constraint_ns > 0);
    printf("%s: %u complete, %u cut at %u tokens\n", what, out.complete, out.cut, (unsigned)max_tokens);
    spec_batch_free(b);
    sy_scheduler_destroy(s);
    sy_grammar_vocab_free(v);
    free(prompt);
    return out;
}

/* Schemas whose documents are short: at temperature 1 nearly every generation completes. */
static const char *const short_schemas[] = {"209-object-enum-values.json", "106-enum-integers.json",
                                            "000-int-range-0-9.json", "183-boolean.json",
                                            "125-array-count-2-2.json", "013-int-range-18-65.json"};
#define N_SHORT (sizeof short_schemas / sizeof *short_schemas)

static void sampled_outputs_follow_the_grammar(const sy_loaded_model *lm, const char *name) {
    char what[128];
    for (size_t k = 0; k < N_SHORT; k++) {
        sy_grammar *g = schema_grammar(short_schemas[k]);
        snprintf(what, sizeof what, "%s %s", name, short_schemas[k]);
        verdicts r = sample_many(lm, g, 48, 200, true, what);
        assert_true(r.complete >= 44); /* enums and small ranges end within a few tokens */
        sy_grammar_free(g);
    }
    /* Open-ended ones: strings and nesting may run past max_tokens, which must then be "length". */
    sy_grammar *g = json_object_grammar();
    snprintf(what, sizeof what, "%s json_object", name);
    sample_many(lm, g, 64, 400, true, what);
    sy_grammar_free(g);
    static const char *const open_schemas[] = {"107-object-closed.json", "171-pydantic-user.json",
                                               "155-ref-recursive-tree.json"};
    for (size_t k = 0; k < 3; k++) {
        g = schema_grammar(open_schemas[k]);
        snprintf(what, sizeof what, "%s %s", name, open_schemas[k]);
        sample_many(lm, g, 16, 120, true, what);
        sy_grammar_free(g);
    }
    g = gbnf_grammar("json.gbnf");
    snprintf(what, sizeof what, "%s json.gbnf", name);
    sample_many(lm, g, 16, 120, true, what);
    sy_grammar_free(g);
    g = gbnf_grammar("arithmetic.gbnf");
    snprintf(what, sizeof what, "%s arithmetic.gbnf", name);
    sample_many(lm, g, 16, 120, false, what);
    sy_grammar_free(g);
}

static void test_engine_samples(void **state) {
    (void)state;
    sampled_outputs_follow_the_grammar(te_model(), "test-engine");
}

static void stories260K_samples(void **state) {
    (void)state;
    sampled_outputs_follow_the_grammar(stories_model(), "stories260K");
}

/* A cut by max_tokens is "length", and what was emitted is still a prefix the grammar accepts. */
static void max_tokens_cut_is_length(void **state) {
    (void)state;
    const sy_loaded_model *lm = te_model();
    sy_grammar *g = schema_grammar("107-object-closed.json");
    verdicts r = sample_many(lm, g, 8, 3, true, "max_tokens 3");
    assert_int_equal(r.cut, 8); /* {"name":"..","age":N} needs more than 3 bytes */
    sy_grammar_free(g);
}

/* ---- batching and speculation ---- */

#define N_MIXED 8

static void make_mixed(const sy_loaded_model *lm, sy_grammar *const *grammars, sy_gen_params *p, int32_t **prompts,
                       size_t *n_prompt) {
    static const char *const texts[N_MIXED] = {
        "{\"a\":1,\"b\":2} {\"a\":1,\"b\":2} {\"a\":1,\"b\":2} {\"a\":1,",
        "switch yard switch yard switch yard",
        "{\"status\":\"open\",\"code\":404} {\"status\":\"open\",\"code\":404}",
        "the model decodes the batch",
        "[1,2,3] [1,2,3] [1,2,3] [1,2,",
        "1+2= 3\n4*5= 20\n1+2= 3\n4*5= ",
        "{\"name\":\"Ann\",\"age\":30} {\"name\":\"Ann\",\"age\":30}",
        "prefix cache queue slot",
    };
    for (int i = 0; i < N_MIXED; i++) {
        prompts[i] = prompt_of(lm, texts[i], &n_prompt[i]);
        p[i] = sy_gen_params_defaults();
        p[i].sampling.temperature = 0;
        p[i].max_tokens = 60;
        p[i].logprobs = true;
        p[i].constraint.grammar = grammars[i];
    }
}

static void assert_same(const spec_batch *a, const spec_batch *b, size_t n, const char *what) {
    for (size_t i = 0; i < n; i++) {
        const spec_result *x = &a->results[i], *y = &b->results[i];
        assert_false(x->error);
        assert_false(y->error);
        if (x->n_tokens != y->n_tokens || memcmp(x->tokens, y->tokens, x->n_tokens * sizeof *x->tokens) != 0)
            fail_msg("%s: request %zu: %u tokens vs %u; they differ", what, i, (unsigned)x->n_tokens,
                     (unsigned)y->n_tokens);
        assert_string_equal(x->finish_reason, y->finish_reason);
    }
}

static void mixed_grammars(sy_grammar **g) {
    sy_grammar *json = json_object_grammar();
    sy_grammar *enums = schema_grammar("209-object-enum-values.json");
    sy_grammar *arith = gbnf_grammar("arithmetic.gbnf");
    sy_grammar *closed = schema_grammar("107-object-closed.json");
    sy_grammar *list[N_MIXED] = {json, NULL, enums, NULL, gbnf_grammar("json_arr.gbnf"), arith, closed, json};
    for (int i = 0; i < N_MIXED; i++) g[i] = list[i];
}

static void free_mixed(sy_grammar **g) {
    /* json appears twice but was created once */
    sy_grammar_free(g[0]);
    sy_grammar_free(g[2]);
    sy_grammar_free(g[4]);
    sy_grammar_free(g[5]);
    sy_grammar_free(g[6]);
}

static void batched_equals_alone_on(const sy_loaded_model *lm, const char *name) {
    sy_grammar *g[N_MIXED];
    mixed_grammars(g);
    sy_gen_params p[N_MIXED];
    int32_t *prompts[N_MIXED];
    size_t n_prompt[N_MIXED];
    make_mixed(lm, g, p, prompts, n_prompt);
    spec_batch *alone = spec_batch_new(N_MIXED);
    for (int i = 0; i < N_MIXED; i++) {
        sy_scheduler *s = make_sched(lm, 1, NULL);
        spec_batch_submit(alone, (size_t)i, s, prompts[i], n_prompt[i], &p[i]);
        assert_true(spec_batch_wait_count(alone, (size_t)i + 1, 60));
        sy_scheduler_destroy(s);
    }
    sy_scheduler *s = make_sched(lm, 4, NULL);
    spec_batch *together = spec_batch_new(N_MIXED);
    for (int i = 0; i < N_MIXED; i++) spec_batch_submit(together, (size_t)i, s, prompts[i], n_prompt[i], &p[i]);
    assert_true(spec_batch_wait(together, 60));
    sy_scheduler_stats st;
    sy_scheduler_get_stats(s, &st);
    assert_true(st.max_batch_items > 1);
    sy_scheduler_destroy(s);
    assert_same(alone, together, N_MIXED, name);
    /* The constrained ones are what their grammar accepts. */
    sy_grammar_vocab *v = vocab_of(lm);
    verdicts vd = {0, 0};
    for (int i = 0; i < N_MIXED; i++)
        if (g[i] != NULL) check_output(lm, v, g[i], &together->results[i], 60, false, name, (size_t)i, &vd);
    sy_grammar_vocab_free(v);
    spec_batch_free(alone);
    spec_batch_free(together);
    for (int i = 0; i < N_MIXED; i++) free(prompts[i]);
    free_mixed(g);
}

static void batched_equals_alone(void **state) {
    (void)state;
    batched_equals_alone_on(te_model(), "test-engine batched");
    batched_equals_alone_on(stories_model(), "stories260K batched");
}

static sy_speculator *ngram(uint32_t n_vocab) {
    sy_speculator_options o = sy_speculator_defaults();
    o.draft_max = 8;
    o.draft_cost = 0.0; /* always draft: the constrained verification path runs every step it can */
    char err[512] = "";
    sy_speculator *sp = sy_speculator_open(&env.reg, "ngram", NULL, n_vocab, NULL, 0, &o, err, sizeof err);
    if (sp == NULL) fail_msg("ngram: %s", err);
    return sp;
}

static void speculative_equals_plain_on(const sy_loaded_model *lm, const char *name) {
    sy_grammar *g[N_MIXED];
    mixed_grammars(g);
    sy_gen_params p[N_MIXED];
    int32_t *prompts[N_MIXED];
    size_t n_prompt[N_MIXED];
    make_mixed(lm, g, p, prompts, n_prompt);
    spec_batch *runs[2];
    uint64_t drafted = 0, accepted = 0;
    for (int r = 0; r < 2; r++) {
        sy_speculator *sp = r == 1 ? ngram(lm->info.n_vocab) : NULL;
        sy_scheduler *s = make_sched(lm, 4, sp);
        runs[r] = spec_batch_new(N_MIXED);
        for (int i = 0; i < N_MIXED; i++) spec_batch_submit(runs[r], (size_t)i, s, prompts[i], n_prompt[i], &p[i]);
        assert_true(spec_batch_wait(runs[r], 60));
        sy_scheduler_stats st;
        sy_scheduler_get_stats(s, &st);
        sy_scheduler_destroy(s);
        sy_speculator_free(sp);
        if (r == 1) drafted = st.drafted_tokens, accepted = st.accepted_tokens;
    }
    printf("%s: ngram drafted %llu, accepted %llu\n", name, (unsigned long long)drafted,
           (unsigned long long)accepted);
    assert_same(runs[0], runs[1], N_MIXED, name);
    uint64_t constrained_drafts = 0;
    for (int i = 0; i < N_MIXED; i++)
        if (g[i] != NULL) constrained_drafts += runs[1]->results[i].usage.drafted_tokens;
    assert_true(constrained_drafts > 0); /* the constrained verification ran */
    spec_batch_free(runs[0]);
    spec_batch_free(runs[1]);
    for (int i = 0; i < N_MIXED; i++) free(prompts[i]);
    free_mixed(g);
}

static void speculative_equals_plain(void **state) {
    (void)state;
    speculative_equals_plain_on(te_model(), "test-engine ngram");
    speculative_equals_plain_on(stories_model(), "stories260K ngram");
}

/* Sampled speculation under a grammar: every output still follows it. */
static void speculative_sampled_follows_grammar(void **state) {
    (void)state;
    const sy_loaded_model *lm = te_model();
    sy_grammar *g = schema_grammar("209-object-enum-values.json");
    sy_grammar_vocab *v = vocab_of(lm);
    sy_speculator *sp = ngram(lm->info.n_vocab);
    sy_scheduler *s = make_sched(lm, 4, sp);
    size_t n_prompt = 0;
    int32_t *prompt = prompt_of(lm, "{\"status\":\"open\",\"code\":404} {\"status\":\"closed\",\"code\":200} ", &n_prompt);
    spec_batch *b = spec_batch_new(32);
    for (size_t i = 0; i < 32; i++) {
        sy_gen_params p = sy_gen_params_defaults();
        p.sampling.temperature = 1.0f;
        p.sampling.seed = 100 + (uint64_t)i;
        p.max_tokens = 100;
        p.logprobs = true;
        p.constraint.grammar = g;
        spec_batch_submit(b, i, s, prompt, n_prompt, &p);
    }
    assert_true(spec_batch_wait(b, 60));
    verdicts vd = {0, 0};
    uint64_t drafted = 0;
    for (size_t i = 0; i < 32; i++) {
        check_output(lm, v, g, &b->results[i], 100, true, "speculative sampled", i, &vd);
        drafted += b->results[i].usage.drafted_tokens;
    }
    assert_int_equal(vd.complete, 32);
    assert_true(drafted > 0);
    spec_batch_free(b);
    sy_scheduler_destroy(s);
    sy_speculator_free(sp);
    sy_grammar_vocab_free(v);
    sy_grammar_free(g);
    free(prompt);
}

/* ---- refusals and lazy grammars ---- */

static void ignore_event(void *user, const sy_gen_event *ev) {
    (void)user;
    (void)ev;
}

static void unusable_constraints_are_refused(void **state) {
    (void)state;
    const sy_loaded_model *lm = te_model();
    sy_scheduler *s = make_sched(lm, 1, NULL);
    int32_t prompt[] = {'h', 'i'};
    char err[256] = "";
    int status = 0;
    /* A token reference the vocabulary has no single token for. */
    const char *text = "root ::= <no-such-token> \"x\"";
    sy_grammar *g = sy_grammar_compile(text, strlen(text), NULL, err, sizeof err);
    assert_non_null(g);
    sy_gen_params p = sy_gen_params_defaults();
    p.constraint.grammar = g;
    assert_null(sy_scheduler_submit(s, prompt, 2, &p, ignore_event, NULL,
                                    err, sizeof err, &status));
    assert_int_equal(status, 400);
    assert_non_null(strstr(err, "grammar"));
    /* Triggers without a grammar, and an out-of-range trigger token. */
    sy_gen_params q = sy_gen_params_defaults();
    q.constraint.n_trigger_tokens = 1;
    q.constraint.trigger_tokens[0] = 5;
    assert_null(sy_scheduler_submit(s, prompt, 2, &q, ignore_event, NULL, err, sizeof err, &status));
    assert_int_equal(status, 400);
    p.constraint.n_trigger_tokens = 1;
    p.constraint.trigger_tokens[0] = 1 << 30;
    assert_null(sy_scheduler_submit(s, prompt, 2, &p, ignore_event, NULL, err, sizeof err, &status));
    assert_int_equal(status, 400);
    assert_non_null(strstr(err, "trigger"));
    sy_grammar_free(g);
    sy_scheduler_destroy(s);
}

/* A lazy grammar: free text until the trigger word, the grammar's text from it on (and then the end). */
static void lazy_grammar_constrains_after_its_trigger(void **state) {
    (void)state;
    const sy_loaded_model *lm = te_model();
    const char *text = "root ::= \"e\" [0-9] [0-9] \".\"";
    char err[256] = "";
    sy_grammar *g = sy_grammar_compile(text, strlen(text), NULL, err, sizeof err);
    assert_non_null(g);
    sy_scheduler *s = make_sched(lm, 4, NULL);
    size_t n_prompt = 0;
    int32_t *prompt = prompt_of(lm, "the engine decodes the queue", &n_prompt);
    enum { N = 32 };
    spec_batch *b = spec_batch_new(N);
    for (size_t i = 0; i < N; i++) {
        sy_gen_params p = sy_gen_params_defaults();
        p.sampling.temperature = 1.0f;
        p.sampling.top_k = 0;
        p.sampling.top_p = 1.0f;
        p.sampling.min_p = 0.0f;
        p.sampling.seed = 7 + (uint64_t)i;
        p.max_tokens = 400;
        p.logprobs = true;
        p.constraint.grammar = g;
        p.constraint.trigger_words[0] = "e";
        p.constraint.n_trigger_words = 1;
        spec_batch_submit(b, i, s, prompt, n_prompt, &p);
    }
    assert_true(spec_batch_wait(b, 60));
    unsigned triggered = 0;
    for (size_t i = 0; i < N; i++) {
        const spec_result *r = &b->results[i];
        assert_false(r->error);
        size_t len = 0;
        char *out = result_text(lm, r, &len);
        const char *at = strchr(out, 'e');
        if (at != NULL) {
            size_t rest = len - (size_t)(at - out);
            if (strcmp(r->finish_reason, "stop") == 0 && rest == 4) {
                assert_true(at[1] >= '0' && at[1] <= '9' && at[2] >= '0' && at[2] <= '9' && at[3] == '.');
                triggered++;
            } else if (strcmp(r->finish_reason, "length") != 0 || rest > 4) {
                fail_msg("#%zu: after the trigger: '%s' (%s)", i, at, r->finish_reason);
            }
        }
        free(out);
    }
    printf("lazy: %u of %d generations met the trigger\n", triggered, N);
    assert_true(triggered >= N / 2);
    spec_batch_free(b);
    sy_scheduler_destroy(s);
    sy_grammar_free(g);
    free(prompt);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(unusable_constraints_are_refused),
        cmocka_unit_test(max_tokens_cut_is_length),
        cmocka_unit_test(test_engine_samples),
        cmocka_unit_test(stories260K_samples),
        cmocka_unit_test(batched_equals_alone),
        cmocka_unit_test(speculative_equals_plain),
        cmocka_unit_test(speculative_sampled_follows_grammar),
        cmocka_unit_test(lazy_grammar_constrains_after_its_trigger),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
