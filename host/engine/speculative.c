/* Speculative decoding: verification, acceptance rules and the adaptive draft length (see speculative.h). */
#include "engine/speculative.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/util.h"

#define SY_SPEC_DEFAULT_DRAFT_MAX 16u
/* Rows for verification are n_vocab floats each: keep one sequence's below this. */
#define SY_SPEC_MAX_ROWS_BYTES ((size_t)256 << 20)
/* Separates the speculation's random stream from the sampler's, both seeded by the request's seed. */
#define SY_SPEC_RNG_SALT 0x5be1c3a9d2f4e687ull
/* The plugin that makes the project's drafters (ngram, model:NAME, replay). */
#define SY_DRAFTER_PLUGIN "spec-drafter"
/* Every engine can roll back this many tokens (engine.h, seq_truncate). */
#define SY_SPEC_GUARANTEED_ROLLBACK 16u

/* The controller: acceptance counts decay by this per verification (about the last 7 steps dominate); before any
 * evidence the rate is taken as PRIOR_RATE with the weight of PRIOR_WEIGHT proposals. */
#define SY_SPEC_DECAY 0.85
#define SY_SPEC_PRIOR_RATE 0.5
#define SY_SPEC_PRIOR_WEIGHT 1.0
/* A k must promise this much more output per unit of work than plain decoding to be used. */
#define SY_SPEC_MIN_GAIN 0.02
/* While speculation does not pay, one proposal every probe_every steps, from 16 up to 1024. */
#define SY_SPEC_PROBE_FIRST 16u
#define SY_SPEC_PROBE_MAX 1024u

/* The cost model (sy_speculator_note_decode): the cost of a verified proposal is the median of what the last
 * PAIRS pairs of consecutive decode calls tell (so that timings disturbed by other processes cannot swing it),
 * padded with the prior PRIOR_COST (of a plain decode step) up to PRIOR_PAIRS figures: a few pairs cannot move
 * it far. A pair's figure is bounded to [0, PAIR_MAX] and forgotten after PAIR_LIFE calls, so that an estimate
 * that stopped speculation, and with it the pairs that could correct it, does not stand forever. The plain step
 * time decays by TIMING_DECAY per call. */
#define SY_SPEC_TIMING_DECAY 0.98
#define SY_SPEC_PRIOR_COST 0.1
#define SY_SPEC_PAIRS 15u
#define SY_SPEC_PRIOR_PAIRS 7u
#define SY_SPEC_PAIR_MAX 4.0
#define SY_SPEC_PAIR_LIFE 512u

/* ------------------------------------------------------------------------------------------------------------
 * The target distribution: host/sampler.c's chain, step for step (penalties, top-k, min-p prefilter, top-p,
 * min-p, temperature), so that p is exactly what the sampler draws from. */

typedef struct cand {
    int32_t id;
    float logit;
    double p;
} cand;

struct sy_spec_work {
    uint32_t n_vocab;
    cand *cands;
    uint32_t *counts;
    int32_t *ids;
    double *p;
};

sy_spec_work *sy_spec_work_create(uint32_t n_vocab) {
    sy_spec_work *w = sy_xcalloc(1, sizeof *w);
    w->n_vocab = n_vocab;
    w->cands = sy_xmalloc((size_t)n_vocab * sizeof *w->cands);
    w->counts = sy_xcalloc(n_vocab, sizeof *w->counts);
    w->ids = sy_xmalloc((size_t)n_vocab * sizeof *w->ids);
    w->p = sy_xmalloc((size_t)n_vocab * sizeof *w->p);
    return w;
}

void sy_spec_work_free(sy_spec_work *w) {
    if (w == NULL) return;
    free(w->cands);
    free(w->counts);
    free(w->ids);
    free(w->p);
    free(w);
}

static void apply_penalties(const sy_sampler_params *p, uint32_t n_vocab, uint32_t *counts, float *logits,
                            const int32_t *history, size_t n_history) {
    int repeat = p->repeat_penalty != 1.0f && p->repeat_penalty > 0.0f;
    if (!repeat && p->presence_penalty == 0.0f && p->frequency_penalty == 0.0f) return;
    size_t start = 0;
    if (p->penalty_last_n > 0 && n_history > p->penalty_last_n) start = n_history - p->penalty_last_n;
    for (size_t i = start; i < n_history; i++)
        if (history[i] >= 0 && (uint32_t)history[i] < n_vocab) counts[history[i]]++;
    for (size_t i = start; i < n_history; i++) {
        int32_t t = history[i];
        if (t < 0 || (uint32_t)t >= n_vocab || counts[t] == 0) continue;
        float l = logits[t];
        if (repeat) l = l > 0 ? l / p->repeat_penalty : l * p->repeat_penalty;
        l -= p->presence_penalty + p->frequency_penalty * (float)counts[t];
        logits[t] = l;
        counts[t] = 0;
    }
}

static int by_logit_desc(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
    return x->id < y->id ? -1 : (x->id > y->id);
}

/* The k best of c[0..n) into c[0..k) by a min-heap, in the same order of operations as the sampler's. */
static void select_top_k(cand *c, uint32_t n, uint32_t k) {
    for (uint32_t i = 0; i < n; i++) {
        cand x = c[i];
        uint32_t pos;
        if (i < k) {
            pos = i;
            while (pos > 0) {
                uint32_t parent = (pos - 1) / 2;
                if (by_logit_desc(&c[parent], &x) >= 0) break;
                c[pos] = c[parent];
                pos = parent;
            }
            c[pos] = x;
            continue;
        }
        if (by_logit_desc(&x, &c[0]) >= 0) continue;
        pos = 0;
        for (;;) {
            uint32_t l = 2 * pos + 1, r = l + 1, worst = pos;
            cand *w = &x;
            if (l < k && by_logit_desc(&c[l], w) > 0) worst = l, w = &c[l];
            if (r < k && by_logit_desc(&c[r], w) > 0) worst = r, w = &c[r];
            if (worst == pos) break;
            c[pos] = c[worst];
            pos = worst;
        }
        c[pos] = x;
    }
}

void sy_spec_target_dist(const sy_sampler_params *params, float *logits, const int32_t *history, size_t n_history,
                         sy_spec_work *w, sy_spec_dist *out) {
    const sy_sampler_params *p = params;
    uint32_t n = w->n_vocab;
    apply_penalties(p, n, w->counts, logits, history, n_history);
    if (sy_logits_sanitize(logits, n) == 0) {
        out->ids = w->ids;
        out->p = w->p;
        out->n = 0; /* nothing can be drawn: the verifier stops there */
        return;
    }
    float max = logits[sy_argmax(logits, n)];
    double z = 0;
    for (uint32_t i = 0; i < n; i++) z += exp((double)logits[i] - max);

    uint32_t kept = 0;
    double total;
    cand *c = w->cands;
    if (p->top_k > 0 && p->top_k < n) {
        for (uint32_t i = 0; i < n; i++) c[i] = (cand){(int32_t)i, logits[i], 0};
        select_top_k(c, n, p->top_k);
        kept = p->top_k;
        total = 0;
        for (uint32_t i = 0; i < kept; i++) total += exp((double)c[i].logit - max);
    } else {
        float floor_logit = p->min_p > 0.0f ? max + logf(p->min_p) : -INFINITY;
        for (uint32_t i = 0; i < n; i++)
            if (logits[i] >= floor_logit) c[kept++] = (cand){(int32_t)i, logits[i], 0};
        total = z;
    }
    qsort(c, kept, sizeof *c, by_logit_desc);
    for (uint32_t i = 0; i < kept; i++) c[i].p = exp((double)c[i].logit - max) / total;
    if (p->top_p < 1.0f) {
        double cum = 0;
        uint32_t k = 0;
        while (k < kept) {
            cum += c[k].p;
            k++;
            if (cum >= p->top_p) break;
        }
        kept = k;
    }
    if (p->min_p > 0.0f) {
        double floor_p = c[0].p * p->min_p;
        uint32_t k = 1;
        while (k < kept && c[k].p >= floor_p) k++;
        kept = k;
    }
    double sum = 0, top = c[0].logit;
    for (uint32_t i = 0; i < kept; i++) {
        w->ids[i] = c[i].id;
        w->p[i] = exp(((double)c[i].logit - top) / p->temperature);
        sum += w->p[i];
    }
    for (uint32_t i = 0; i < kept; i++) w->p[i] /= sum;
    out->ids = w->ids;
    out->p = w->p;
    out->n = kept;
}

double sy_spec_dist_prob(const sy_spec_dist *d, int32_t token) {
    for (uint32_t i = 0; i < d->n; i++)
        if (d->ids[i] == token) return d->p[i];
    return 0;
}

/* ------------------------------------------------------------------------------------------------------------
 * Acceptance */

bool sy_spec_accept_point(const sy_spec_dist *p, int32_t x, sy_rng *rng, sy_spec_rule rule, int32_t *replacement) {
    if (rule == SY_SPEC_RULE_TEST_ALWAYS_ACCEPT) return true;
    double px = sy_spec_dist_prob(p, x);
    if (sy_rng_uniform(rng) < px) return true;
    /* Rejected: the residual max(0, p - q) with q the point mass at x is p with x removed. */
    bool drop_x = rule != SY_SPEC_RULE_TEST_RESAMPLE_FULL_P;
    double total = 0;
    for (uint32_t i = 0; i < p->n; i++)
        if (!drop_x || p->ids[i] != x) total += p->p[i];
    if (!(total > 0)) return true; /* p is all on x: only rounding got here */
    double r = sy_rng_uniform(rng) * total, acc = 0;
    int32_t last = -1;
    for (uint32_t i = 0; i < p->n; i++) {
        if (drop_x && p->ids[i] == x) continue;
        acc += p->p[i];
        last = p->ids[i];
        if (r < acc) break;
    }
    *replacement = last;
    return false;
}

bool sy_spec_accept_general(const double *p, const double *q, uint32_t n, int32_t x, sy_rng *rng,
                            int32_t *replacement) {
    if (x < 0 || (uint32_t)x >= n) return false;
    double px = p[x], qx = q[x];
    double u = sy_rng_uniform(rng);
    if (qx > 0 ? u * qx < px : px > 0) return true; /* u < min(1, p/q) without dividing */
    double total = 0;
    for (uint32_t i = 0; i < n; i++) total += p[i] > q[i] ? p[i] - q[i] : 0;
    if (!(total > 0)) return true; /* p == q: a rejection is impossible but for rounding */
    double r = sy_rng_uniform(rng) * total, acc = 0;
    int32_t last = -1;
    for (uint32_t i = 0; i < n; i++) {
        double d = p[i] > q[i] ? p[i] - q[i] : 0;
        if (d <= 0) continue;
        acc += d;
        last = (int32_t)i;
        if (r < acc) break;
    }
    *replacement = last;
    return false;
}

/* ------------------------------------------------------------------------------------------------------------
 * Adaptive draft length */

void sy_spec_controller_init(sy_spec_controller *c, uint32_t k_max) {
    memset(c, 0, sizeof *c);
    c->k_max = k_max;
    c->probe_every = SY_SPEC_PROBE_FIRST;
}

double sy_spec_controller_rate(const sy_spec_controller *c) {
    return (c->accepted + SY_SPEC_PRIOR_RATE * SY_SPEC_PRIOR_WEIGHT) / (c->trials + SY_SPEC_PRIOR_WEIGHT);
}

/* With each proposal standing with probability a (independently), k proposals yield 1 + a + ... + a^k tokens
 * for 1 + cost*k units of work (one plain step = 1). */
uint32_t sy_spec_best_k(double rate, double cost_per_draft, uint32_t k_max) {
    double a = rate < 0 ? 0 : rate > 0.999 ? 0.999 : rate;
    double cost = cost_per_draft < 0 ? 0 : cost_per_draft;
    uint32_t best = 0;
    double best_gain = 1.0 + SY_SPEC_MIN_GAIN, expected = 1.0, a_pow = 1.0;
    for (uint32_t k = 1; k <= k_max; k++) {
        a_pow *= a;
        expected += a_pow;
        double gain = expected / (1.0 + cost * (double)k);
        if (gain > best_gain) {
            best_gain = gain;
            best = k;
        } else if (best != 0 && a_pow < 1e-9) {
            break; /* past the peak and nothing more to gain */
        }
    }
    return best;
}

uint32_t sy_spec_controller_next(sy_spec_controller *c, double cost_per_draft) {
    c->probing = false;
    uint32_t k = sy_spec_best_k(sy_spec_controller_rate(c), cost_per_draft, c->k_max);
    if (k > 0) {
        c->idle_steps = 0;
        return k;
    }
    /* When even proposals that always stand would not pay, probing is waste. */
    if (sy_spec_best_k(0.999, cost_per_draft, c->k_max) == 0) return 0;
    if (++c->idle_steps < c->probe_every || c->k_max == 0) return 0;
    c->idle_steps = 0;
    c->probing = true;
    return 1;
}

void sy_spec_controller_update(sy_spec_controller *c, uint32_t k, uint32_t accepted) {
    if (k == 0) return;
    if (accepted > k) accepted = k;
    /* Proposals after the first rejection were never put to the test. */
    double tested = (double)accepted + (accepted < k ? 1.0 : 0.0);
    c->accepted = c->accepted * SY_SPEC_DECAY + (double)accepted;
    c->trials = c->trials * SY_SPEC_DECAY + tested;
    if (c->probing) {
        if (accepted == 0) {
            c->probe_every = c->probe_every < SY_SPEC_PROBE_MAX / 2 ? c->probe_every * 2 : SY_SPEC_PROBE_MAX;
        } else {
            c->probe_every = SY_SPEC_PROBE_FIRST;
        }
        c->probing = false;
    }
}

/* ------------------------------------------------------------------------------------------------------------
 * Speculators */

struct sy_speculator {
    const sy_drafter_api *api;
    sy_drafter *drafter;
    char *label;
    sy_speculator_options opts;
    uint32_t n_seqs;
    uint32_t max_rollback; /* 0: no limit known; else the most proposals per step (reported, or learned from a
                              failure) */
    bool no_rollback;      /* the target cannot roll back at all: nothing to verify against */
    /* Decode timings of calls without prompt chunks. A call of m sequences and m + e tokens (e proposals) takes
     * u (1 + c' e), u the time of the same call without proposals, c = c' m the cost of a proposal relative to a
     * plain step of a sequence. Each pair of consecutive calls of the same m and different e tells c without u:
     * c' = (t2 - t1) / (t1 e2 - t2 e1). Consecutive calls run under the same load, so a machine that gets busier
     * or quieter over time cannot pass for a cost of tokens, as it does in a fit of seconds against tokens over
     * many calls; and the figures stand while calls carry no proposals (speculation stopped). */
    bool have_last;
    double last_t, last_e, last_m;
    double pair_cost[SY_SPEC_PAIRS];   /* ring of the last pairs' figures */
    uint64_t pair_call[SY_SPEC_PAIRS]; /* the call each came from */
    uint32_t n_pairs, next_pair;       /* figures in the ring (at most SY_SPEC_PAIRS); where the next goes */
    uint64_t calls;                    /* calls noted */
    /* Seconds of a plain step per sequence (each call less its proposals at the cost known then), decayed. */
    double step_w, step_seconds;
    /* The drafter's time per unit of its work (a context token to catch up on, or a proposal), decayed. */
    double draft_seconds, draft_units;
};

sy_speculator_options sy_speculator_defaults(void) {
    sy_speculator_options o;
    memset(&o, 0, sizeof o);
    o.draft_max = SY_SPEC_DEFAULT_DRAFT_MAX;
    o.draft_min = 0;
    o.draft_cost = -1;
    o.rule = SY_SPEC_RULE_EXACT;
    return o;
}

sy_speculator *sy_speculator_create(const sy_drafter_api *api, sy_drafter *drafter, const char *label,
                                    const sy_speculator_options *opts) {
    if (api == NULL || drafter == NULL) return NULL;
    sy_speculator *sp = sy_xcalloc(1, sizeof *sp);
    sp->api = api;
    sp->drafter = drafter;
    sp->label = sy_strdup(label != NULL ? label : "drafter");
    sp->opts = opts != NULL ? *opts : sy_speculator_defaults();
    if (sp->opts.draft_max == 0) sp->opts.draft_max = SY_SPEC_DEFAULT_DRAFT_MAX;
    if (sp->opts.draft_max > SY_SPEC_MAX_DRAFT) sp->opts.draft_max = SY_SPEC_MAX_DRAFT;
    if (sp->opts.draft_min > sp->opts.draft_max) sp->opts.draft_min = sp->opts.draft_max;
    if (!(sp->opts.draft_cost < 1e6)) sp->opts.draft_cost = -1; /* NaN or absurd: measure instead */
    return sp;
}

/* The first loaded drafter plugin that makes drafters of spec (NULL: none); *n_drafters counts the usable ones. */
static const sy_plugin *drafter_for(const sy_plugin_registry *reg, const char *spec, size_t *n_drafters) {
    *n_drafters = 0;
    size_t n = reg->n_plugins;
    for (size_t i = 0; i < n; i++) {
        const sy_plugin *pl = &reg->plugins[i];
        const sy_drafter_api *d_api = pl->drafter;
        if (d_api == NULL) continue;
        if (d_api->error_message == NULL || d_api->supports == NULL || d_api->create == NULL ||
            d_api->destroy == NULL || d_api->state_create == NULL || d_api->state_free == NULL ||
            d_api->propose == NULL || d_api->observe == NULL) {
            sy_log(SY_LOG_WARN, "plugin %s: its sy.drafter/1 table has empty entries; not used", pl->entry->name);
            continue;
        }
        (*n_drafters)++;
        if (d_api->supports(spec) == SY_OK) return pl;
    }
    return NULL;
}

const sy_plugin *sy_speculator_plugin_for(const sy_plugin_registry *reg, const char *spec) {
    if (reg == NULL || spec == NULL || spec[0] == '\0') return NULL;
    size_t n_drafters = 0;
    const sy_plugin *pl = drafter_for(reg, spec, &n_drafters);
    if (pl == NULL && sy_plugin_registry_is_lazy(reg)) {
        sy_plugin_registry_need(reg, SY_DRAFTER_PLUGIN);
        pl = drafter_for(reg, spec, &n_drafters);
        if (pl == NULL) {
            sy_plugin_registry_need_all(reg);
            pl = drafter_for(reg, spec, &n_drafters);
        }
    }
    return pl;
}

sy_speculator *sy_speculator_open(const sy_plugin_registry *reg, const char *spec, const char *target_name,
                                  uint32_t n_vocab, const sy_option *options, size_t n_options,
                                  const sy_speculator_options *opts, char *err, size_t err_size) {
    if (reg == NULL || spec == NULL || spec[0] == '\0') {
        snprintf(err, err_size, "no drafter spec given");
        return NULL;
    }
    size_t n_drafters = 0;
    const sy_plugin *pl = drafter_for(reg, spec, &n_drafters);
    if (pl == NULL && sy_plugin_registry_is_lazy(reg)) {
        /* the project's drafter plugin first, so that asking for ngram does not load every engine */
        sy_plugin_registry_need(reg, SY_DRAFTER_PLUGIN);
        pl = drafter_for(reg, spec, &n_drafters);
        if (pl == NULL) {
            sy_plugin_registry_need_all(reg);
            pl = drafter_for(reg, spec, &n_drafters);
        }
    }
    if (pl == NULL) {
        if (n_drafters == 0) snprintf(err, err_size, "no drafter plugin is loaded (spec-drafter) for '%s'", spec);
        else snprintf(err, err_size, "no loaded drafter plugin makes drafters of '%s' (ngram, model:NAME)", spec);
        return NULL;
    }
    sy_drafter *d = NULL;
    sy_status st = pl->drafter->create(spec, target_name, n_vocab, options, n_options, &d);
    if (st != SY_OK || d == NULL) {
        snprintf(err, err_size, "drafter '%s' of plugin %s refused: %s", spec, pl->entry->name,
                 pl->drafter->error_message());
        return NULL;
    }
    return sy_speculator_create(pl->drafter, d, spec, opts);
}

void sy_speculator_limit_rollback(sy_speculator *sp, uint32_t max_rollback) {
    if (sp == NULL || max_rollback == UINT32_MAX) return;
    if (max_rollback == 0) sp->no_rollback = true;
    else if (sp->max_rollback == 0 || max_rollback < sp->max_rollback) sp->max_rollback = max_rollback;
}

void sy_speculator_free(sy_speculator *sp) {
    if (sp == NULL) return;
    if (sp->n_seqs != 0)
        sy_log(SY_LOG_ERROR, "speculator %s freed with %u sequences still alive", sp->label, (unsigned)sp->n_seqs);
    sp->api->destroy(sp->drafter);
    free(sp->label);
    free(sp);
}

const char *sy_speculator_label(const sy_speculator *sp) { return sp->label; }
const sy_speculator_options *sy_speculator_get_options(const sy_speculator *sp) { return &sp->opts; }

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The cost of a verified proposal relative to a plain step of a sequence: the median of the pairs' figures (and of
 * the prior while they are few). */
static double verify_cost(const sy_speculator *sp) {
    double v[SY_SPEC_PAIRS + SY_SPEC_PRIOR_PAIRS];
    uint32_t n = 0;
    for (uint32_t i = 0; i < sp->n_pairs; i++)
        if (sp->calls - sp->pair_call[i] <= SY_SPEC_PAIR_LIFE) v[n++] = sp->pair_cost[i];
    while (n < SY_SPEC_PRIOR_PAIRS) v[n++] = SY_SPEC_PRIOR_COST;
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

void sy_speculator_note_decode(sy_speculator *sp, uint32_t n_tokens, uint32_t n_items, bool prefill,
                               double seconds) {
    if (sp == NULL || prefill || n_items == 0 || n_tokens < n_items || !(seconds > 0) || seconds > 60) return;
    double t = seconds, m = (double)n_items, e = (double)(n_tokens - n_items);
    sp->calls++;
    /* A pair tells the cost only when the proposals differ by a fair share: 7 against 8 drowns in the noise. */
    double lo = e < sp->last_e ? e : sp->last_e, hi = e < sp->last_e ? sp->last_e : e;
    if (sp->have_last && sp->last_m == m && hi - lo >= 1 && hi - lo >= hi / 4) {
        /* In the model den = u (e - last_e); the other sign means a time ratio beyond what any cost explains
         * (more than e / last_e): the most a pair may say. A negative figure (the longer call was faster) says 0. */
        double den = sp->last_t * e - t * sp->last_e, c = SY_SPEC_PAIR_MAX;
        if (den != 0 && (den > 0) == (e > sp->last_e)) c = m * (t - sp->last_t) / den;
        if (!(c > 0)) c = 0;
        if (c > SY_SPEC_PAIR_MAX) c = SY_SPEC_PAIR_MAX;
        sp->pair_cost[sp->next_pair] = c;
        sp->pair_call[sp->next_pair] = sp->calls;
        sp->next_pair = (sp->next_pair + 1) % SY_SPEC_PAIRS;
        if (sp->n_pairs < SY_SPEC_PAIRS) sp->n_pairs++;
    }
    sp->have_last = true;
    sp->last_t = t;
    sp->last_e = e;
    sp->last_m = m;
    double c = verify_cost(sp);
    if (c < 0) c = 0;
    sp->step_w = sp->step_w * SY_SPEC_TIMING_DECAY + 1;
    sp->step_seconds = sp->step_seconds * SY_SPEC_TIMING_DECAY + t / (m + c * e);
}

double sy_speculator_cost(sy_speculator *sp) {
    if (sp->opts.draft_cost >= 0) return sp->opts.draft_cost;
    double verify = verify_cost(sp);
    double per_seq = sp->step_w > 0 ? sp->step_seconds / sp->step_w : 0;
    double draft = sp->draft_units > 0 && per_seq > 0 ? (sp->draft_seconds / sp->draft_units) / per_seq : 0;
    double cost = verify + draft;
    if (cost < 0.001) cost = 0.001;
    if (cost > 10) cost = 10;
    return cost;
}

/* ------------------------------------------------------------------------------------------------------------
 * Sequences */

struct sy_spec_seq {
    sy_speculator *sp;
    sy_draft_state *state;
    sy_sampler_params params;
    uint32_t n_vocab;
    sy_rng rng;
    sy_spec_controller ctl;
    sy_spec_work *work; /* sampled requests only */
    float *rows;
    uint32_t rows_cap;  /* rows allocated */
    uint32_t k_cap;     /* most proposals the row budget allows */
    bool enabled;
    bool warned;        /* a drafter failure was logged */
    uint32_t last_n_history; /* the context length at the last proposal */
};

sy_spec_seq *sy_spec_seq_create(sy_speculator *sp, uint32_t n_vocab) {
    if (sp == NULL || n_vocab == 0) return NULL;
    sy_draft_state *state = NULL;
    if (sp->api->state_create(sp->drafter, &state) != SY_OK || state == NULL) {
        sy_log(SY_LOG_WARN, "drafter %s: no state for a new sequence (%s); decoding without speculation",
               sp->label, sp->api->error_message());
        return NULL;
    }
    sy_spec_seq *q = sy_xcalloc(1, sizeof *q);
    q->sp = sp;
    q->state = state;
    q->n_vocab = n_vocab;
    size_t row_bytes = (size_t)n_vocab * sizeof(float);
    size_t max_rows = SY_SPEC_MAX_ROWS_BYTES / row_bytes;
    q->k_cap = max_rows > 1 ? (uint32_t)(max_rows - 1 < sp->opts.draft_max ? max_rows - 1 : sp->opts.draft_max) : 0;
    q->enabled = false;
    sp->n_seqs++;
    return q;
}

void sy_spec_seq_begin(sy_spec_seq *q, const sy_sampler_params *sampling) {
    if (q == NULL || sampling == NULL) return;
    q->params = *sampling;
    sy_rng_seed(&q->rng, sampling->seed ^ SY_SPEC_RNG_SALT);
    sy_spec_controller_init(&q->ctl, q->sp->opts.draft_max);
    if (sampling->temperature > 0 && q->work == NULL) q->work = sy_spec_work_create(q->n_vocab);
    q->warned = false;
    q->enabled = q->k_cap > 0;
}

void sy_spec_seq_end(sy_spec_seq *q) {
    if (q != NULL) q->enabled = false;
}

void sy_spec_seq_free(sy_spec_seq *q) {
    if (q == NULL) return;
    q->sp->api->state_free(q->sp->drafter, q->state);
    q->sp->n_seqs--;
    sy_spec_work_free(q->work);
    free(q->rows);
    free(q);
}

void sy_spec_seq_disable(sy_spec_seq *q) {
    if (q != NULL) q->enabled = false;
}

bool sy_spec_seq_enabled(const sy_spec_seq *q) { return q != NULL && q->enabled; }

bool sy_spec_seq_rollback_failed(sy_spec_seq *q, uint32_t depth) {
    if (q == NULL) return false;
    q->enabled = false;
    uint32_t limit = depth > SY_SPEC_GUARANTEED_ROLLBACK ? SY_SPEC_GUARANTEED_ROLLBACK : depth - 1;
    if (limit == 0) limit = 1; /* an engine that cannot roll back one token fails again; each failure is survived */
    if (q->sp->max_rollback != 0 && q->sp->max_rollback <= limit) return false;
    q->sp->max_rollback = limit;
    return true;
}

static void drafter_trouble(sy_spec_seq *q, const char *what) {
    if (q->warned) return;
    q->warned = true;
    sy_log(SY_LOG_WARN, "drafter %s: %s (%s); further trouble of this sequence is not logged", q->sp->label, what,
           q->sp->api->error_message());
}

uint32_t sy_spec_seq_propose(sy_spec_seq *q, int32_t *history, uint32_t n_history, uint32_t k_limit) {
    if (q == NULL || !q->enabled || n_history == 0 || q->sp->no_rollback) return 0;
    const sy_speculator_options *o = &q->sp->opts;
    uint32_t cap = k_limit < q->k_cap ? k_limit : q->k_cap;
    if (q->sp->max_rollback != 0 && cap > q->sp->max_rollback) cap = q->sp->max_rollback;
    if (cap == 0 || cap < o->draft_min) return 0;
    uint32_t k = sy_spec_controller_next(&q->ctl, sy_speculator_cost(q->sp));
    if (k == 0) return 0;
    if (k < o->draft_min) k = o->draft_min;
    if (k > cap) k = cap;

    uint32_t got = 0;
    double t0 = sy_now_seconds();
    sy_status st = q->sp->api->propose(q->sp->drafter, q->state, history, n_history, k, history + n_history, &got);
    double seconds = sy_now_seconds() - t0;
    if (st != SY_OK) {
        drafter_trouble(q, "propose failed");
        return 0;
    }
    if (got > k) got = k; /* a plugin writing more than asked has overrun the buffer already; never trust it */
    for (uint32_t i = 0; i < got; i++) {
        int32_t t = history[n_history + i];
        if (t < 0 || (uint32_t)t >= q->n_vocab) {
            drafter_trouble(q, "proposed a token outside the vocabulary");
            got = i;
            break;
        }
    }
    /* Its work: the context that is new since its last proposal, and the proposals. */
    uint32_t fresh = n_history > q->last_n_history ? n_history - q->last_n_history : n_history;
    q->last_n_history = n_history;
    q->sp->draft_seconds = q->sp->draft_seconds * SY_SPEC_TIMING_DECAY + seconds;
    q->sp->draft_units = q->sp->draft_units * SY_SPEC_TIMING_DECAY + (double)fresh + (double)got;
    if (got == 0 || got < o->draft_min) return 0;
    if (got + 1 > q->rows_cap) {
        q->rows = sy_xrealloc(q->rows, (size_t)(got + 1) * q->n_vocab * sizeof *q->rows);
        q->rows_cap = got + 1;
    }
    return got;
}

float *sy_spec_seq_rows(sy_spec_seq *q) { return q->rows; }

const float *sy_spec_seq_row(const sy_spec_seq *q, uint32_t j) { return q->rows + (size_t)j * q->n_vocab; }

void sy_spec_seq_verify(sy_spec_seq *q, sy_sampler *sampler, const int32_t *history, uint32_t n_history,
                        uint32_t k, sy_spec_verdict *out) {
    sy_spec_seq_verify_masked(q, sampler, history, n_history, k, NULL, NULL, out);
}

void sy_spec_seq_verify_masked(sy_spec_seq *q, sy_sampler *sampler, const int32_t *history, uint32_t n_history,
                               uint32_t k, sy_spec_row_fn prepare, void *user, sy_spec_verdict *out) {
    bool greedy = q->params.temperature <= 0.0f;
    sy_spec_rule rule = q->sp->opts.rule;
    uint32_t accepted = 0;
    int32_t next = -1;
    for (uint32_t j = 0; j <= k; j++) {
        float *row = q->rows + (size_t)j * q->n_vocab;
        size_t n_seen = (size_t)n_history + j; /* the context this row follows */
        if (prepare != NULL) prepare(user, j, row);
        if (j == k) {
            next = sy_sampler_sample(sampler, row, history, n_seen);
            break;
        }
        int32_t x = history[n_history + j];
        if (rule == SY_SPEC_RULE_TEST_ALWAYS_ACCEPT) {
            accepted++;
            continue;
        }
        if (greedy) {
            int32_t t = sy_sampler_sample(sampler, row, history, n_seen);
            if (t == x) {
                accepted++;
                continue;
            }
            next = t;
            break;
        }
        sy_spec_dist d;
        sy_spec_target_dist(&q->params, row, history, n_seen, q->work, &d);
        if (d.n == 0) {
            next = SY_SAMPLER_NO_TOKEN;
            break;
        }
        int32_t replacement = -1;
        if (sy_spec_accept_point(&d, x, &q->rng, rule, &replacement)) {
            accepted++;
            continue;
        }
        next = replacement;
        break;
    }
    sy_spec_controller_update(&q->ctl, k, accepted);
    if (q->sp->api->observe(q->sp->drafter, q->state, k, accepted, history, n_history + accepted) != SY_OK)
        drafter_trouble(q, "observe failed");
    out->n_drafted = k;
    out->n_accepted = accepted;
    out->next = next;
}
