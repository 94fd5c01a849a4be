/*
 * test-engine: "sy.engine.sampling/1", sampling on the engine side.
 *
 * The algorithm, for one item with params p (documented so tests and hosts can reproduce it):
 *   - temperature <= 0: greedy, the highest logit, the lowest id on ties. The generator is not advanced.
 *   - otherwise:
 *       1. order the tokens by logit, highest first, lower id first on ties;
 *       2. top_k > 0: keep the first top_k;
 *       3. weights w_i = exp((logit_i - logit_max) / temperature), in double;
 *       4. top_p < 1: keep the shortest prefix whose weights sum to at least top_p of the kept total
 *          (at least one token);
 *       5. min_p > 0: keep the tokens with w_i >= min_p * w_max (w_max = 1);
 *       6. draw u in [0, 1) from one step of the generator and pick the first token whose running weight sum
 *          exceeds u times the kept total (the last kept token if rounding leaves none).
 *   The generator is SplitMix64 over the host's *rng_state: state += 0x9e3779b97f4a7c15; z = state;
 *   z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9; z = (z ^ (z >> 27)) * 0x94d049bb133111eb; z ^= z >> 31;
 *   u = (z >> 11) * 2^-53. It advances exactly once per sampled token when temperature > 0.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "te_internal.h"

static uint64_t te_splitmix64_next(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

typedef struct te_candidate {
    float logit;
    int32_t token;
    double weight;
} te_candidate;

static int te_candidate_order(const void *a, const void *b) {
    const te_candidate *x = a, *y = b;
    if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
    return (x->token > y->token) - (x->token < y->token);
}

static int32_t te_greedy(const float *logits, uint32_t n_vocab) {
    uint32_t best = 0;
    for (uint32_t v = 1; v < n_vocab; v++)
        if (logits[v] > logits[best]) best = v;
    return (int32_t)best;
}

/* Samples one token; `cands` has room for n_vocab entries. */
static int32_t te_sample_one(const float *logits, uint32_t n_vocab, const sy_sampling_params *p, te_candidate *cands) {
    if (!(p->temperature > 0.0f)) return te_greedy(logits, n_vocab);
    for (uint32_t v = 0; v < n_vocab; v++) cands[v] = (te_candidate){logits[v], (int32_t)v, 0.0};
    qsort(cands, n_vocab, sizeof *cands, te_candidate_order);
    size_t n = n_vocab;
    if (p->top_k > 0 && p->top_k < n) n = p->top_k;
    double total = 0.0;
    for (size_t i = 0; i < n; i++) {
        cands[i].weight = exp(((double)cands[i].logit - (double)cands[0].logit) / (double)p->temperature);
        total += cands[i].weight;
    }
    if (p->top_p < 1.0f) {
        double need = (double)p->top_p * total, sum = 0.0;
        size_t keep = 0;
        while (keep < n) {
            sum += cands[keep++].weight;
            if (sum >= need) break;
        }
        n = keep;
        total = sum;
    }
    if (p->min_p > 0.0f) {
        size_t keep = 1;
        while (keep < n && cands[keep].weight >= (double)p->min_p * cands[0].weight) keep++;
        total = 0.0;
        for (size_t i = 0; i < keep; i++) total += cands[i].weight;
        n = keep;
    }
    double u = (double)(te_splitmix64_next(p->rng_state) >> 11) * (1.0 / 9007199254740992.0);
    double target = u * total, sum = 0.0;
    for (size_t i = 0; i < n; i++) {
        sum += cands[i].weight;
        if (sum > target) return cands[i].token;
    }
    return cands[n - 1].token;
}

static sy_status te_decode_sample(sy_model *model, const sy_decode_batch *batch, const sy_sampling_params *params,
                                  int32_t *tokens_out) {
    sy_status st = te_decode_checked(model, batch, 1);
    if (st != SY_OK || batch->n_items == 0) return st;
    if (params == NULL || tokens_out == NULL)
        return te_fail(SY_ERR_INVALID_ARGUMENT, "decode_sample: params or tokens_out is NULL");
    /* The header gives no stride for params[]; each element is the host's struct, so its struct_size is the
     * stride (every element is filled by the same host). */
    const size_t stride = params->struct_size;
    if (stride < offsetof(sy_sampling_params, rng_state) + sizeof(uint64_t *) || stride % sizeof(void *) != 0)
        return te_fail(SY_ERR_INVALID_ARGUMENT, "decode_sample: params struct_size %u is not a valid size",
                       (unsigned)stride);
    const uint32_t n_items = batch->n_items, n_vocab = model->cfg.n_vocab;
    for (uint32_t i = 0; i < n_items; i++) {
        const sy_sampling_params *p = (const sy_sampling_params *)(const void *)((const char *)params + i * stride);
        if (p->struct_size != stride)
            return te_fail(SY_ERR_INVALID_ARGUMENT, "decode_sample: params[%u].struct_size differs from params[0]",
                           (unsigned)i);
        if (isnan(p->temperature) || isnan(p->top_p) || isnan(p->min_p) || isinf(p->temperature))
            return te_fail(SY_ERR_INVALID_ARGUMENT, "decode_sample: params[%u] holds NaN or infinity", (unsigned)i);
        if (p->temperature > 0.0f && p->rng_state == NULL)
            return te_fail(SY_ERR_INVALID_ARGUMENT, "decode_sample: params[%u].rng_state is NULL", (unsigned)i);
    }

    size_t need = (size_t)n_items * n_vocab;
    if (model->sample_logits_count < need) {
        float *grown = realloc(model->sample_logits, need * sizeof *grown);
        if (grown == NULL) return te_fail(SY_ERR_OUT_OF_MEMORY, "decode_sample: out of memory for logits");
        model->sample_logits = grown;
        model->sample_logits_count = need;
    }
    float **rows = malloc((size_t)n_items * sizeof *rows);
    te_candidate *cands = malloc((size_t)n_vocab * sizeof *cands);
    if (rows == NULL || cands == NULL) {
        free(rows);
        free(cands);
        return te_fail(SY_ERR_OUT_OF_MEMORY, "decode_sample: out of memory");
    }
    for (uint32_t i = 0; i < n_items; i++) rows[i] = model->sample_logits + (size_t)i * n_vocab;
    st = te_decode_run(model, batch, rows);
    if (st == SY_OK)
        for (uint32_t i = 0; i < n_items; i++) {
            const sy_sampling_params *p = (const sy_sampling_params *)(const void *)((const char *)params + i * stride);
            tokens_out[i] = te_sample_one(rows[i], n_vocab, p, cands);
        }
    free(rows);
    free(cands);
    return st;
}

const sy_engine_sampling_api te_sampling_api = {
    .struct_size = sizeof(sy_engine_sampling_api),
    .decode_sample = te_decode_sample,
};
