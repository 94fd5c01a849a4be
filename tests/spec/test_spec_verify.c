/*
 * The host's verification pieces: the target distribution equals what host/sampler.c draws from (for every
 * sampling transform), the acceptance rules give back exactly p (and deliberately broken rules are caught by the
 * same test), and the adaptive draft length (controller, best k, measured cost).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "spec_fixture.h"
#include "base/util.h"

#define V 40
#define DRAWS 20000

static void random_logits(uint64_t seed, float *logits, uint32_t n) {
    sy_rng rng;
    sy_rng_seed(&rng, seed);
    for (uint32_t i = 0; i < n; i++) logits[i] = (float)(sy_rng_uniform(&rng) * 6.0 - 3.0);
    /* Ties, which the sampler breaks by id. */
    logits[5] = logits[6];
}

static sy_sampler_params params_case(int c) {
    sy_sampler_params p = sy_sampler_defaults(); /* temperature 0.8, top-k 40, top-p 0.95, min-p 0.05 */
    switch (c) {
    case 0: break;
    case 1: p.temperature = 1.0f, p.top_k = 0, p.top_p = 1.0f, p.min_p = 0; break;
    case 2: p.temperature = 1.3f, p.top_k = 7, p.top_p = 1.0f, p.min_p = 0; break;
    case 3: p.temperature = 0.6f, p.top_k = 0, p.top_p = 0.8f, p.min_p = 0; break;
    case 4: p.temperature = 1.0f, p.top_k = 0, p.top_p = 1.0f, p.min_p = 0.2f; break;
    case 5: /* penalties over a history with repeats */
        p.temperature = 0.9f, p.top_k = 12, p.repeat_penalty = 1.4f, p.presence_penalty = 0.3f,
        p.frequency_penalty = 0.2f, p.penalty_last_n = 6;
        break;
    }
    return p;
}

static const int32_t history[] = {3, 5, 5, 9, 1, 1, 1, 7, 30, 5};
#define N_HISTORY (sizeof history / sizeof *history)

static void target_distribution_is_what_the_sampler_draws(void **state) {
    (void)state;
    sy_spec_work *w = sy_spec_work_create(V);
    float base[V], row[V];
    for (int c = 0; c < 6; c++) {
        sy_sampler_params p = params_case(c);
        random_logits(100 + (uint64_t)c, base, V);
        memcpy(row, base, sizeof row);
        sy_spec_dist d;
        sy_spec_target_dist(&p, row, history, N_HISTORY, w, &d);
        double probs[V] = {0}, sum = 0;
        for (uint32_t i = 0; i < d.n; i++) probs[d.ids[i]] = d.p[i], sum += d.p[i];
        assert_true(fabs(sum - 1) < 1e-9);
        assert_true(d.n >= 1 && d.n <= V);

        p.seed = 7 + (uint64_t)c;
        sy_sampler *s = sy_sampler_create(&p, V);
        uint64_t counts[V] = {0};
        for (int i = 0; i < DRAWS; i++) {
            memcpy(row, base, sizeof row);
            int32_t t = sy_sampler_sample(s, row, history, N_HISTORY);
            assert_true(t >= 0 && t < V);
            counts[t]++;
            if (i == 0) {
                /* The penalised row is the same as the sampler's. */
                float mine[V];
                memcpy(mine, base, sizeof mine);
                sy_spec_target_dist(&p, mine, history, N_HISTORY, w, &d);
                assert_memory_equal(mine, row, sizeof mine);
            }
        }
        sy_sampler_free(s);
        for (int t = 0; t < V; t++)
            if (probs[t] == 0) assert_int_equal(counts[t], 0); /* nothing outside the support */
        double chi2;
        int dof;
        double pv = spec_chi2_fit(counts, probs, V, &chi2, &dof);
        printf("params %d: %u candidates, chi2 %.1f (dof %d), p %.3f\n", c, (unsigned)d.n, chi2, dof, pv);
        assert_true(pv > 0.001);
    }
    sy_spec_work_free(w);
}

/* Draws n outputs of one verification position: proposal x (from q, or fixed), then accept or replace. */
static double acceptance_p_value(sy_spec_rule rule, bool general, int c) {
    sy_spec_work *w = sy_spec_work_create(V);
    float row[V];
    sy_sampler_params p = params_case(c);
    random_logits(200 + (uint64_t)c, row, V);
    sy_spec_dist d;
    sy_spec_target_dist(&p, row, history, N_HISTORY, w, &d);
    double probs[V] = {0}, q[V] = {0};
    for (uint32_t i = 0; i < d.n; i++) probs[d.ids[i]] = d.p[i];
    /* A drafter that likes the runner-up and also proposes tokens the target never draws. */
    int32_t point = d.n > 1 ? d.ids[1] : d.ids[0];
    double qs = 0;
    for (int i = 0; i < V; i++) q[i] = 0.2 + (i == point) * 5.0 + (i % 3 == 0), qs += q[i];
    for (int i = 0; i < V; i++) q[i] /= qs;
    sy_rng rng;
    sy_rng_seed(&rng, 99 + (uint64_t)c);
    uint64_t counts[V] = {0};
    for (int i = 0; i < DRAWS; i++) {
        int32_t x = point, out = -1;
        if (general) {
            double r = sy_rng_uniform(&rng), acc = 0;
            for (x = 0; x < V - 1; x++)
                if (r < (acc += q[x])) break;
            out = sy_spec_accept_general(probs, q, V, x, &rng, &out) ? x : out;
        } else {
            out = sy_spec_accept_point(&d, x, &rng, rule, &out) ? x : out;
        }
        assert_true(out >= 0 && out < V);
        counts[out]++;
    }
    double chi2;
    int dof;
    double pv = spec_chi2_fit(counts, probs, V, &chi2, &dof);
    sy_spec_work_free(w);
    return pv;
}

static void acceptance_rules_give_back_p(void **state) {
    (void)state;
    for (int c = 0; c < 6; c++) {
        double point = acceptance_p_value(SY_SPEC_RULE_EXACT, false, c);
        double general = acceptance_p_value(SY_SPEC_RULE_EXACT, true, c);
        printf("params %d: point-mass rule p %.3f, general rule p %.3f\n", c, point, general);
        assert_true(point > 0.001);
        assert_true(general > 0.001);
    }
}

static void broken_rules_are_caught(void **state) {
    (void)state;
    for (int c = 0; c < 6; c++) {
        double always = acceptance_p_value(SY_SPEC_RULE_TEST_ALWAYS_ACCEPT, false, c);
        double full_p = acceptance_p_value(SY_SPEC_RULE_TEST_RESAMPLE_FULL_P, false, c);
        printf("params %d: always-accept p %.3g, resample-from-p p %.3g\n", c, always, full_p);
        assert_true(always < 1e-6);
        assert_true(full_p < 1e-6);
    }
}

static void greedy_point_rule_edge_cases(void **state) {
    (void)state;
    /* p all on one token: always accepted when proposed; another proposal is replaced by it. */
    int32_t ids[1] = {4};
    double pr[1] = {1.0};
    sy_spec_dist d = {ids, pr, 1};
    sy_rng rng;
    sy_rng_seed(&rng, 1);
    int32_t out = -1;
    for (int i = 0; i < 100; i++) assert_true(sy_spec_accept_point(&d, 4, &rng, SY_SPEC_RULE_EXACT, &out));
    for (int i = 0; i < 100; i++) {
        assert_false(sy_spec_accept_point(&d, 7, &rng, SY_SPEC_RULE_EXACT, &out));
        assert_int_equal(out, 4);
    }
    /* The general rule with p == q never rejects; with q a point mass it is the point rule. */
    double p2[3] = {0.2, 0.5, 0.3};
    for (int i = 0; i < 100; i++) assert_true(sy_spec_accept_general(p2, p2, 3, i % 3, &rng, &out));
    assert_false(sy_spec_accept_general(p2, p2, 3, 5, &rng, &out)); /* out of range: never accepted */
}

/* ---- the adaptive draft length ---- */

static void best_k_weighs_acceptance_against_cost(void **state) {
    (void)state;
    assert_int_equal(sy_spec_best_k(0.0, 0.1, 16), 0);
    assert_int_equal(sy_spec_best_k(0.05, 0.1, 16), 0);
    assert_int_equal(sy_spec_best_k(0.5, 0.6, 16), 0); /* 1.5 tokens for 1.6 units of work */
    assert_int_equal(sy_spec_best_k(0.99, 0.0, 16), 16);
    uint32_t k_cheap = sy_spec_best_k(0.8, 0.02, 64), k_dear = sy_spec_best_k(0.8, 0.2, 64);
    assert_true(k_cheap > k_dear && k_dear >= 1);
    assert_true(sy_spec_best_k(0.9, 0.05, 64) > sy_spec_best_k(0.6, 0.05, 64));
    assert_int_equal(sy_spec_best_k(0.9, 0.05, 3), 3);
    /* Expected tokens per unit of work at the chosen k beat plain decoding and every other k. */
    double a = 0.7, c = 0.1;
    uint32_t k = sy_spec_best_k(a, c, 32);
    double best = (1 - pow(a, k + 1)) / (1 - a) / (1 + c * k);
    for (uint32_t j = 1; j <= 32; j++) assert_true((1 - pow(a, j + 1)) / (1 - a) / (1 + c * j) <= best + 1e-12);
}

static void controller_stops_when_it_does_not_pay_and_probes(void **state) {
    (void)state;
    sy_spec_controller c;
    sy_spec_controller_init(&c, 16);
    uint32_t k = sy_spec_controller_next(&c, 0.1);
    assert_true(k >= 1); /* optimistic at first */
    int steps = 0;
    while (k > 0 && steps < 100) {
        sy_spec_controller_update(&c, k, 0);
        k = sy_spec_controller_next(&c, 0.1);
        steps++;
    }
    assert_int_equal(k, 0);
    assert_true(steps <= 12); /* a few wasted steps, then plain decoding */
    /* Probes: one proposal every 16 steps (the step that stopped was the first), every 32 after a failed one. */
    int idle = 0;
    while ((k = sy_spec_controller_next(&c, 0.1)) == 0) idle++;
    assert_int_equal(idle, 14);
    assert_int_equal(k, 1);
    sy_spec_controller_update(&c, 1, 0);
    idle = 0;
    while ((k = sy_spec_controller_next(&c, 0.1)) == 0) idle++;
    assert_int_equal(idle, 31);
    /* A hit brings speculation back. */
    sy_spec_controller_update(&c, 1, 1);
    sy_spec_controller_update(&c, 1, 1);
    assert_true(sy_spec_controller_next(&c, 0.1) >= 1);
    /* When even certain acceptance would not pay for the cost, there are no probes at all. */
    sy_spec_controller_init(&c, 16);
    assert_int_equal(sy_spec_controller_next(&c, 1.5), 0);
    for (int i = 0; i < 5000; i++) assert_int_equal(sy_spec_controller_next(&c, 1.5), 0);
    /* Full acceptance drives k to the maximum. */
    sy_spec_controller_init(&c, 16);
    for (int i = 0; i < 30; i++) {
        k = sy_spec_controller_next(&c, 0.05);
        sy_spec_controller_update(&c, k, k);
    }
    assert_int_equal(sy_spec_controller_next(&c, 0.05), 16);
    assert_true(sy_spec_controller_rate(&c) > 0.95);
}

/* A drafter that proposes nothing, to make speculators with. */
static sy_status nd_create(const char *spec, const char *t, uint32_t n, const sy_option *o, size_t no,
                           sy_drafter **out) {
    *out = (sy_drafter *)malloc(1);
    return SY_OK;
}
static void nd_destroy(sy_drafter *d) { free(d); }
static const char *nd_error(void) { return "none"; }

static void measured_cost_follows_decode_timings(void **state) {
    (void)state;
    sy_drafter_api nd;
    memset(&nd, 0, sizeof nd);
    nd.struct_size = sizeof nd;
    nd.error_message = nd_error;
    nd.create = nd_create;
    nd.destroy = nd_destroy;
    sy_drafter *d1 = NULL, *d2 = NULL, *d3 = NULL;
    nd_create(NULL, NULL, 0, NULL, 0, &d1);
    nd_create(NULL, NULL, 0, NULL, 0, &d2);
    nd_create(NULL, NULL, 0, NULL, 0, &d3);
    sy_speculator *cheap = sy_speculator_create(&nd, d1, "cheap", NULL);
    sy_speculator *dear = sy_speculator_create(&nd, d2, "dear", NULL);
    sy_speculator_options fixed = sy_speculator_defaults();
    fixed.draft_cost = 0.25;
    sy_speculator *pinned = sy_speculator_create(&nd, d3, "pinned", &fixed);
    assert_true(fabs(sy_speculator_cost(cheap) - 0.1) < 1e-9); /* the prior before evidence */
    for (int i = 0; i < 200; i++) {
        uint32_t n = 1 + (uint32_t)(i % 5); /* one sequence, 0..4 proposals */
        /* Memory-bound: 10 ms a step plus 0.5 ms a token. Compute-bound: 10 ms a token. */
        sy_speculator_note_decode(cheap, n, 1, false, 0.010 + 0.0005 * n);
        sy_speculator_note_decode(dear, n, 1, false, 0.010 * n);
        sy_speculator_note_decode(cheap, 500, 1, true, 3.0); /* prompt chunks do not count */
        sy_speculator_note_decode(pinned, n, 1, false, 0.010 * n);
    }
    double c1 = sy_speculator_cost(cheap), c2 = sy_speculator_cost(dear);
    printf("cost per proposal: memory-bound %.3f, compute-bound %.3f\n", c1, c2);
    assert_true(c1 > 0.02 && c1 < 0.08);
    assert_true(c2 > 0.8 && c2 < 1.2);
    assert_true(fabs(sy_speculator_cost(pinned) - 0.25) < 1e-12);
    sy_speculator_free(cheap);
    sy_speculator_free(dear);
    sy_speculator_free(pinned);
}

/* The machine's load changes while the draft length does: the cost is told by consecutive calls, not by a fit over
 * a stretch in which long calls happened to come when the machine was busy. */
static void measured_cost_ignores_changes_in_load(void **state) {
    (void)state;
    sy_drafter_api nd;
    memset(&nd, 0, sizeof nd);
    nd.struct_size = sizeof nd;
    nd.error_message = nd_error;
    nd.create = nd_create;
    nd.destroy = nd_destroy;
    sy_drafter *d = NULL;
    nd_create(NULL, NULL, 0, NULL, 0, &d);
    sy_speculator *sp = sy_speculator_create(&nd, d, "drift", NULL);
    /* A plain step takes u seconds, each proposal 0.2 u more. First 60 calls of 8 proposals (mostly) while the
     * machine is busy (u = 30 ms), then 60 of 1 proposal (mostly) after it quietened down (u = 10 ms); every tenth
     * call has the other length, as a controller's choices vary. */
    for (int i = 0; i < 120; i++) {
        bool busy = i < 60;
        double u = busy ? 0.030 : 0.010;
        uint32_t e = (i % 10 == 9) ? (busy ? 1 : 8) : (busy ? 8 : 1);
        sy_speculator_note_decode(sp, 1 + e, 1, false, u * (1 + 0.2 * e));
    }
    double c = sy_speculator_cost(sp);
    printf("cost per proposal after a change in load: %.3f (true 0.2)\n", c);
    assert_true(c > 0.17 && c < 0.23);
    /* Speculation stops: calls of one token tell nothing about proposals, and the estimate stands for a while; then
     * the prior (0.1) comes back, so that a wrong estimate that stopped speculation cannot stop it for good. */
    for (int i = 0; i < 300; i++) sy_speculator_note_decode(sp, 1, 1, false, 0.010);
    assert_true(fabs(sy_speculator_cost(sp) - c) < 1e-12);
    for (int i = 0; i < 700; i++) sy_speculator_note_decode(sp, 1, 1, false, 0.010);
    assert_true(fabs(sy_speculator_cost(sp) - 0.1) < 1e-12);
    /* Seven proposals against eight tell nothing reliable: such pairs are not taken. */
    for (int i = 0; i < 100; i++)
        sy_speculator_note_decode(sp, 1 + 7 + (uint32_t)(i % 2), 1, false, 0.010 * (1 + i % 2));
    assert_true(fabs(sy_speculator_cost(sp) - 0.1) < 1e-12);
    /* Several sequences per call: the cost is still per sequence. */
    for (int i = 0; i < 200; i++) {
        uint32_t e = (uint32_t)(i % 3) * 4; /* 0, 4 or 8 proposals among 4 sequences */
        sy_speculator_note_decode(sp, 4 + e, 4, false, 4 * 0.010 * (1 + 0.25 * e / 4.0));
    }
    c = sy_speculator_cost(sp);
    printf("cost per proposal with 4 sequences a call: %.3f (true 0.25)\n", c);
    assert_true(c > 0.22 && c < 0.28);
    /* One call in five disturbed (three times as long, or a third): the figure holds. */
    uint64_t x = 12345;
    for (int i = 0; i < 300; i++) {
        uint32_t e = (uint32_t)(i % 2) * 7; /* 0 or 7 proposals, one sequence */
        double t = 0.020 * (1 + 0.3 * e);
        x ^= x << 13, x ^= x >> 7, x ^= x << 17; /* xorshift64 */
        if (x % 5 == 0) t *= (x >> 32) % 2 ? 3.0 : 1.0 / 3.0;
        sy_speculator_note_decode(sp, 1 + e, 1, false, t);
    }
    c = sy_speculator_cost(sp);
    printf("cost per proposal with one call in five disturbed: %.3f (true 0.3)\n", c);
    assert_true(c > 0.25 && c < 0.36);
    sy_speculator_free(sp);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(target_distribution_is_what_the_sampler_draws),
        cmocka_unit_test(acceptance_rules_give_back_p),
        cmocka_unit_test(broken_rules_are_caught),
        cmocka_unit_test(greedy_point_rule_edge_cases),
        cmocka_unit_test(best_k_weighs_acceptance_against_cost),
        cmocka_unit_test(controller_stops_when_it_does_not_pay_and_probes),
        cmocka_unit_test(measured_cost_follows_decode_timings),
        cmocka_unit_test(measured_cost_ignores_changes_in_load),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
