#include "engine/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

typedef struct candidate {
    int32_t id;
    float logit;
    double p;
} candidate;

struct sy_sampler {
    sy_sampler_params params;
    uint32_t n_vocab;
    sy_rng rng;
    candidate *cands;   /* n_vocab entries */
    uint32_t *counts;   /* per-token counts for the penalties */
    float *last_logits; /* the last penalised logits (for logprobs; their log-sum-exp is computed when asked) */
};

sy_sampler_params sy_sampler_defaults(void) {
    sy_sampler_params p = {0};
    p.temperature = 0.8f;
    p.top_k = 40;
    p.top_p = 0.95f;
    p.min_p = 0.05f;
    p.repeat_penalty = 1.0f;
    p.penalty_last_n = 64;
    p.seed = 0;
    return p;
}

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void sy_rng_seed(sy_rng *rng, uint64_t seed) {
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) rng->s[i] = splitmix64(&x);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t sy_rng_next(sy_rng *rng) {
    uint64_t *s = rng->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double sy_rng_uniform(sy_rng *rng) { return (double)(sy_rng_next(rng) >> 11) * 0x1.0p-53; }

sy_sampler *sy_sampler_create(const sy_sampler_params *params, uint32_t n_vocab) {
    sy_sampler *s = sy_xcalloc(1, sizeof *s);
    s->params = *params;
    s->n_vocab = n_vocab;
    sy_rng_seed(&s->rng, params->seed);
    s->cands = sy_xmalloc((size_t)n_vocab * sizeof *s->cands);
    s->counts = sy_xcalloc(n_vocab, sizeof *s->counts);
    s->last_logits = sy_xmalloc((size_t)n_vocab * sizeof *s->last_logits);
    return s;
}

void sy_sampler_free(sy_sampler *s) {
    if (s == NULL) return;
    free(s->cands);
    free(s->counts);
    free(s->last_logits);
    free(s);
}

int32_t sy_argmax(const float *logits, uint32_t n) {
    uint32_t best = 0;
    for (uint32_t i = 1; i < n; i++) {
        if (logits[i] > logits[best]) best = i;
    }
    return (int32_t)best;
}

static void apply_penalties(sy_sampler *s, float *logits, const int32_t *history, size_t n_history) {
    const sy_sampler_params *p = &s->params;
    int repeat = p->repeat_penalty != 1.0f && p->repeat_penalty > 0.0f;
    if (!repeat && p->presence_penalty == 0.0f && p->frequency_penalty == 0.0f) return;
    size_t start = 0;
    if (p->penalty_last_n > 0 && n_history > p->penalty_last_n) start = n_history - p->penalty_last_n;
    for (size_t i = start; i < n_history; i++) {
        if (history[i] >= 0 && (uint32_t)history[i] < s->n_vocab) s->counts[history[i]]++;
    }
    for (size_t i = start; i < n_history; i++) {
        int32_t t = history[i];
        if (t < 0 || (uint32_t)t >= s->n_vocab || s->counts[t] == 0) continue;
        float l = logits[t];
        if (repeat) l = l > 0 ? l / p->repeat_penalty : l * p->repeat_penalty;
        l -= p->presence_penalty + p->frequency_penalty * (float)s->counts[t];
        logits[t] = l;
        s->counts[t] = 0; /* each distinct token once; also resets the counts for the next call */
    }
}

static int by_logit_desc(const void *a, const void *b) {
    const candidate *x = a, *y = b;
    if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
    return x->id < y->id ? -1 : (x->id > y->id);
}

/* Keep the k best of cands[0..n) in cands[0..k) through a min-heap (worst kept candidate on top): O(n log k). */
static void select_top_k(candidate *c, uint32_t n, uint32_t k) {
    for (uint32_t i = 0; i < n; i++) {
        candidate x = c[i];
        uint32_t pos;
        if (i < k) {
            pos = i; /* sift up */
            while (pos > 0) {
                uint32_t parent = (pos - 1) / 2;
                if (by_logit_desc(&c[parent], &x) >= 0) break;
                c[pos] = c[parent];
                pos = parent;
            }
            c[pos] = x;
            continue;
        }
        if (by_logit_desc(&x, &c[0]) >= 0) continue; /* not better than the worst kept */
        pos = 0; /* replace the root and sift down */
        for (;;) {
            uint32_t l = 2 * pos + 1, r = l + 1, worst = pos;
            candidate *w = &x;
            if (l < k && by_logit_desc(&c[l], w) > 0) { worst = l; w = &c[l]; }
            if (r < k && by_logit_desc(&c[r], w) > 0) { worst = r; w = &c[r]; }
            if (worst == pos) break;
            c[pos] = c[worst];
            pos = worst;
        }
        c[pos] = x;
    }
}

/* The filters follow llama.cpp's chain: top-k, then top-p and min-p on the untempered softmax of what is left,
 * then temperature over the survivors, then one draw. */
int32_t sy_sampler_sample(sy_sampler *s, float *logits, const int32_t *history, size_t n_history) {
    const sy_sampler_params *p = &s->params;
    uint32_t n = s->n_vocab;
    apply_penalties(s, logits, history, n_history);
    memcpy(s->last_logits, logits, (size_t)n * sizeof *logits);
    /* Greedy needs no softmax: one pass over the row, which matters with a vocabulary of 150k and several slots
     * sampled one after another on the engine loop between two decodes. */
    if (p->temperature <= 0.0f) return sy_argmax(logits, n);
    float max = logits[sy_argmax(logits, n)];

    uint32_t kept = 0;
    double total; /* untempered mass of the candidates after top-k */
    if (p->top_k > 0 && p->top_k < n) {
        for (uint32_t i = 0; i < n; i++) s->cands[i] = (candidate){(int32_t)i, logits[i], 0};
        select_top_k(s->cands, n, p->top_k);
        kept = p->top_k;
        total = 0;
        for (uint32_t i = 0; i < kept; i++) total += exp((double)s->cands[i].logit - max);
    } else {
        /* min-p removes every logit below max + ln(min_p) whatever top-p does, so those never need sorting; nor do
         * tokens a grammar masked to -inf (probability exactly 0: leaving them out draws the same token). */
        float floor_logit = p->min_p > 0.0f ? max + logf(p->min_p) : -INFINITY;
        total = 0;
        for (uint32_t i = 0; i < n; i++) {
            if (logits[i] == -INFINITY) continue;
            total += exp((double)logits[i] - max);
            if (logits[i] >= floor_logit) s->cands[kept++] = (candidate){(int32_t)i, logits[i], 0};
        }
        if (kept == 0) return sy_argmax(logits, n);
    }
    qsort(s->cands, kept, sizeof *s->cands, by_logit_desc);
    for (uint32_t i = 0; i < kept; i++) s->cands[i].p = exp((double)s->cands[i].logit - max) / total;
    if (p->top_p < 1.0f) {
        double cum = 0;
        uint32_t k = 0;
        while (k < kept) {
            cum += s->cands[k].p;
            k++;
            if (cum >= p->top_p) break;
        }
        kept = k;
    }
    if (p->min_p > 0.0f) {
        double floor_p = s->cands[0].p * p->min_p;
        uint32_t k = 1;
        while (k < kept && s->cands[k].p >= floor_p) k++;
        kept = k;
    }
    double sum = 0, top = s->cands[0].logit;
    for (uint32_t i = 0; i < kept; i++) {
        s->cands[i].p = exp(((double)s->cands[i].logit - top) / p->temperature);
        sum += s->cands[i].p;
    }
    double r = sy_rng_uniform(&s->rng) * sum, acc = 0;
    for (uint32_t i = 0; i < kept; i++) {
        acc += s->cands[i].p;
        if (r < acc) return s->cands[i].id;
    }
    return s->cands[kept - 1].id;
}

double sy_sampler_last_logprob(const sy_sampler *s, int32_t token) {
    if (token < 0 || (uint32_t)token >= s->n_vocab) return -INFINITY;
    const float *l = s->last_logits;
    float max = l[sy_argmax(l, s->n_vocab)];
    double z = 0;
    for (uint32_t i = 0; i < s->n_vocab; i++) z += exp((double)l[i] - max);
    return (double)l[token] - (max + log(z));
}
