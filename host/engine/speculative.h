/*
 * Speculative decoding, the host's side: a drafter (plugin, "sy.drafter/1") proposes k tokens, the target model
 * decodes the last accepted token plus the k proposals in one call (k+1 logits rows), and the host decides what
 * stands, so that the output is exactly what the target alone would produce:
 *
 *   greedy requests   accept the longest prefix of proposals equal to the target's own greedy choice, then add the
 *                     target's choice at the first mismatch (or after the last proposal): token for token the
 *                     output without speculation (the choice goes through the request's own sampler).
 *   sampled requests  speculative sampling (Leviathan et al. 2023; Chen et al. 2023): accept a proposal x drawn
 *                     from q with probability min(1, p(x)/q(x)), on rejection draw from norm(max(0, p - q)) and
 *                     stop. Drafters through the ABI propose single tokens, a point mass q, so x is accepted with
 *                     probability p(x) and a rejection draws from p without x. p is the target's distribution after
 *                     the request's penalties, top-k, top-p, min-p and temperature exactly as host/sampler.c applies
 *                     them, so every output token has the distribution it has without speculation.
 *
 * How many tokens to propose adapts per sequence (sy_spec_controller): from the running acceptance rate and the
 * measured cost of a verified token it picks the k that maximises expected tokens per unit of work, and stops
 * proposing when no k pays (probing again now and then, less often after each failed probe).
 *
 * Threading: a speculator and its sequences are used by one thread at a time (the target's engine loop).
 */
#ifndef SY_HOST_SPECULATIVE_H
#define SY_HOST_SPECULATIVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <switchyard/switchyard.h>

#include "plugins/plugin_loader.h"
#include "engine/sampler.h"

/* Most tokens proposed in one step (the config's draft_max is at most 256). */
#define SY_SPEC_MAX_DRAFT 256u

/* ------------------------------------------------------------------------------------------------------------
 * The target's distribution after the request's sampling transforms (as host/sampler.c applies them). */

typedef struct sy_spec_dist {
    int32_t *ids;   /* the tokens that can be drawn, best first (logit descending, id ascending) */
    double *p;      /* their probabilities; sum to 1 */
    uint32_t n;
} sy_spec_dist;

typedef struct sy_spec_work sy_spec_work; /* scratch of n_vocab entries */
sy_spec_work *sy_spec_work_create(uint32_t n_vocab);
void sy_spec_work_free(sy_spec_work *w);

/* Applies the penalties of `params` to logits in place (over history[0..n_history), as the sampler does) and
 * fills *out (pointing into w) with the distribution the sampler draws from. params->temperature must be > 0. */
void sy_spec_target_dist(const sy_sampler_params *params, float *logits, const int32_t *history, size_t n_history,
                         sy_spec_work *w, sy_spec_dist *out);
/* p(token) in a distribution (0 when it cannot be drawn). */
double sy_spec_dist_prob(const sy_spec_dist *d, int32_t token);

/* ------------------------------------------------------------------------------------------------------------
 * Acceptance rules. */

typedef enum sy_spec_rule {
    SY_SPEC_RULE_EXACT = 0,            /* the rules above */
    /* Deliberately wrong rules, for tests that must catch them: */
    SY_SPEC_RULE_TEST_ALWAYS_ACCEPT,   /* every proposal stands */
    SY_SPEC_RULE_TEST_RESAMPLE_FULL_P  /* a rejection draws from p itself, not from the residual */
} sy_spec_rule;

/* A point-mass proposal x against p: true when accepted; otherwise *replacement is drawn from p without x. */
bool sy_spec_accept_point(const sy_spec_dist *p, int32_t x, sy_rng *rng, sy_spec_rule rule, int32_t *replacement);
/* The general rule with a drafter distribution q (dense, n entries each): accept x ~ q with min(1, p(x)/q(x)),
 * otherwise draw *replacement from norm(max(0, p - q)). */
bool sy_spec_accept_general(const double *p, const double *q, uint32_t n, int32_t x, sy_rng *rng,
                            int32_t *replacement);

/* ------------------------------------------------------------------------------------------------------------
 * Adaptive draft length. */

typedef struct sy_spec_controller {
    uint32_t k_max;       /* draft_max */
    double accepted;      /* decayed count of accepted proposals */
    double trials;        /* decayed count of proposals put to the test (up to and including the first rejection) */
    uint32_t idle_steps;  /* steps since speculation was last tried, while it does not pay */
    uint32_t probe_every; /* steps between probes while it does not pay (doubles after each failed probe) */
    bool probing;         /* the last proposal was a probe */
} sy_spec_controller;

void sy_spec_controller_init(sy_spec_controller *c, uint32_t k_max);
/* The acceptance rate estimate (the chance that one proposal stands). */
double sy_spec_controller_rate(const sy_spec_controller *c);
/* How many tokens to propose this step, given the cost of one proposal relative to one plain decode step of a
 * sequence (verification plus drafting). 0: decode plainly this step. */
uint32_t sy_spec_controller_next(sy_spec_controller *c, double cost_per_draft);
/* After verification: k proposed, `accepted` of them stood. */
void sy_spec_controller_update(sy_spec_controller *c, uint32_t k, uint32_t accepted);
/* The k in 1..k_max that maximises expected tokens per unit of work, or 0 when none beats plain decoding. */
uint32_t sy_spec_best_k(double rate, double cost_per_draft, uint32_t k_max);

/* ------------------------------------------------------------------------------------------------------------
 * A speculator: one drafter for one target model. */

typedef struct sy_speculator sy_speculator;

typedef struct sy_speculator_options {
    uint32_t draft_max;  /* most proposals per step (1..SY_SPEC_MAX_DRAFT); 0: 16 */
    uint32_t draft_min;  /* fewer proposals than this are not verified (0: any) */
    /* The cost of one proposal relative to one plain decode step, when >= 0; < 0: measured as it runs (from
     * decode timings reported with sy_speculator_note_decode and the drafter's own time). */
    double draft_cost;
    sy_spec_rule rule;   /* SY_SPEC_RULE_EXACT except in tests */
} sy_speculator_options;

sy_speculator_options sy_speculator_defaults(void);

/* Wraps a drafter made by `api` (the speculator destroys it). `label` names it in logs ("ngram"). */
sy_speculator *sy_speculator_create(const sy_drafter_api *api, sy_drafter *drafter, const char *label,
                                    const sy_speculator_options *opts);
/* The drafter plugin sy_speculator_open would use for `spec` (loading spec-drafter, then the rest, in a lazy
 * registry), or NULL when none makes it. */
const sy_plugin *sy_speculator_plugin_for(const sy_plugin_registry *reg, const char *spec);
/* Finds a drafter plugin in reg that supports `spec` and creates its drafter for the target `target_name`
 * (published with sy_host_publish_model for model drafters) with n_vocab tokens. NULL with err set when no plugin
 * supports the spec or the drafter refuses (e.g. a draft model with another tokenizer). */
/* The target's sy_model_info.max_rollback (UINT32_MAX: any): proposals per step never exceed what it can roll
 * back, so a rejected draft never fails the rollback. */
void sy_speculator_limit_rollback(sy_speculator *sp, uint32_t max_rollback);

sy_speculator *sy_speculator_open(const sy_plugin_registry *reg, const char *spec, const char *target_name,
                                  uint32_t n_vocab, const sy_option *options, size_t n_options,
                                  const sy_speculator_options *opts, char *err, size_t err_size);
/* Every sequence of the speculator must be freed first. */
void sy_speculator_free(sy_speculator *sp);
const char *sy_speculator_label(const sy_speculator *sp);
const sy_speculator_options *sy_speculator_get_options(const sy_speculator *sp);
/* One decode call of the target: its tokens, sequences, whether it carried prompt chunks, and its duration. Feeds
 * the measured cost of a verified token (only calls without prompt chunks count). */
void sy_speculator_note_decode(sy_speculator *sp, uint32_t n_tokens, uint32_t n_items, bool prefill,
                               double seconds);
/* The cost of one proposal relative to a plain decode step, as used now. */
double sy_speculator_cost(sy_speculator *sp);

/* ------------------------------------------------------------------------------------------------------------
 * One sequence's speculation: its drafter state, acceptance statistics, random stream and verification rows.
 * It outlives a generation: a scheduler slot keeps it, like its KV, so that a drafter with a sequence of its own
 * (a draft model) only catches up on what is new in the slot's next prompt. */

typedef struct sy_spec_seq sy_spec_seq;

/* NULL (logged) when the drafter cannot make a state; the sequence then decodes plainly. */
sy_spec_seq *sy_spec_seq_create(sy_speculator *sp, uint32_t n_vocab);
void sy_spec_seq_free(sy_spec_seq *q);
/* A generation starts: its sampling parameters (the seed seeds the acceptance draws), fresh acceptance statistics.
 * Speculation is on until sy_spec_seq_end (or a failed rollback). */
void sy_spec_seq_begin(sy_spec_seq *q, const sy_sampler_params *sampling);
void sy_spec_seq_end(sy_spec_seq *q);

/* Proposals for the step that decodes history[n_history-1] (history[0..n_history) is the whole context, the
 * token about to be decoded last). Writes k <= k_limit proposals to history[n_history..n_history+k) (the caller
 * has room) and returns k; 0: decode plainly this step. Afterwards sy_spec_seq_rows() has room for k+1 rows. */
uint32_t sy_spec_seq_propose(sy_spec_seq *q, int32_t *history, uint32_t n_history, uint32_t k_limit);
/* The logits rows for the verification decode: (k+1) * n_vocab floats. */
float *sy_spec_seq_rows(sy_spec_seq *q);
/* Row j after verification (penalties applied): the row token j of the result was chosen from. */
const float *sy_spec_seq_row(const sy_spec_seq *q, uint32_t j);

typedef struct sy_spec_verdict {
    uint32_t n_drafted;  /* k */
    uint32_t n_accepted; /* proposals that stand: history[n_history..n_history+n_accepted) */
    int32_t next;        /* the target's own token after them */
} sy_spec_verdict;

/* Verifies the k proposals at history[n_history..) against the k+1 rows the decode wrote to sy_spec_seq_rows().
 * `sampler` is the request's sampler (greedy choices and draws after a fully accepted run go through it). Tells
 * the controller and the drafter what happened. The caller then rolls the target's sequence back to
 * n_history + n_accepted tokens; the output tokens are the accepted proposals followed by `next`. */
void sy_spec_seq_verify(sy_spec_seq *q, sy_sampler *sampler, const int32_t *history, uint32_t n_history,
                        uint32_t k, sy_spec_verdict *out);
/* The same, with prepare(user, j, row) called on row j just before the rule reads it (rows in order, each at
 * most once, none past the first rejection): constrained decoding masks it there with the grammar state after
 * proposals 0..j-1, so that verification applies the rule to the constrained distribution. */
typedef void (*sy_spec_row_fn)(void *user, uint32_t j, float *row);
void sy_spec_seq_verify_masked(sy_spec_seq *q, sy_sampler *sampler, const int32_t *history, uint32_t n_history,
                               uint32_t k, sy_spec_row_fn prepare, void *user, sy_spec_verdict *out);
/* Stop speculating for this sequence. */
void sy_spec_seq_disable(sy_spec_seq *q);
/* The target could not roll `depth` tokens back (seq_truncate failed): this sequence stops speculating, and later
 * ones propose at most as many tokens as every engine must be able to roll back (16, see engine.h), or fewer when
 * even less failed. Returns true the first time the speculator learns a limit (worth a log line). */
bool sy_spec_seq_rollback_failed(sy_spec_seq *q, uint32_t depth);
bool sy_spec_seq_enabled(const sy_spec_seq *q);

#endif
