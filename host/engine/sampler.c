#include "engine/sampler.h"

#include <math.h>
#include <stdbool.h>
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
    sy_logit_bias *bias; /* a copy of params.logit_bias */
    sy_dry_breakers dry; /* a copy of params.dry_breakers */
    int32_t *dry_z;      /* DRY scratch, window entries: Z-function of the reversed window, then repeat lengths */
    size_t dry_z_cap;
    int32_t *dry_max_repeat; /* n_vocab entries, -1: the longest repetition each token would extend */
    int32_t *dry_touched;    /* the tokens set in dry_max_repeat, to reset them */
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
    p.typical_p = 1.0f;
    p.xtc_probability = 0.0f;
    p.xtc_threshold = 0.1f;
    p.dry_multiplier = 0.0f;
    p.dry_base = 1.75f;
    p.dry_allowed_length = 2;
    p.dry_penalty_last_n = 64;
    return p;
}

int sy_sampler_dry_enabled(const sy_sampler_params *p) {
    return p->dry_multiplier != 0.0f && p->dry_base >= 1.0f && p->dry_penalty_last_n != 0;
}

int sy_sampler_needs_host(const sy_sampler_params *p) {
    return (p->typical_p > 0.0f && p->typical_p < 1.0f) || p->xtc_probability > 0.0f || p->n_logit_bias > 0 ||
           sy_sampler_dry_enabled(p);
}

void sy_dry_breakers_copy(sy_dry_breakers *dst, const sy_dry_breakers *src) {
    memset(dst, 0, sizeof *dst);
    if (src == NULL || src->n_sequences == 0) return;
    dst->sequences = sy_xmalloc(src->n_sequences * sizeof *dst->sequences);
    memcpy(dst->sequences, src->sequences, src->n_sequences * sizeof *dst->sequences);
    dst->n_sequences = src->n_sequences;
    if (src->n_tails > 0) {
        dst->tails = sy_xmalloc(src->n_tails * sizeof *dst->tails);
        memcpy(dst->tails, src->tails, src->n_tails * sizeof *dst->tails);
    }
    dst->n_tails = src->n_tails;
}

void sy_dry_breakers_free(sy_dry_breakers *b) {
    if (b == NULL) return;
    free(b->sequences);
    free(b->tails);
    memset(b, 0, sizeof *b);
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
    uint32_t nb = params->logit_bias && params->n_logit_bias <= SY_MAX_LOGIT_BIAS ? params->n_logit_bias : 0;
    s->params.n_logit_bias = nb;
    if (nb > 0) {
        s->bias = sy_xmalloc(nb * sizeof *s->bias);
        memcpy(s->bias, params->logit_bias, nb * sizeof *s->bias);
    }
    s->params.logit_bias = s->bias;
    sy_dry_breakers_copy(&s->dry, params->dry_breakers);
    s->params.dry_breakers = &s->dry;
    if (sy_sampler_dry_enabled(params)) {
        s->dry_max_repeat = sy_xmalloc((size_t)n_vocab * sizeof *s->dry_max_repeat);
        for (uint32_t i = 0; i < n_vocab; i++) s->dry_max_repeat[i] = -1;
        s->dry_touched = sy_xmalloc((size_t)n_vocab * sizeof *s->dry_touched);
    }
    return s;
}

void sy_sampler_free(sy_sampler *s) {
    if (s == NULL) return;
    free(s->cands);
    free(s->counts);
    free(s->last_logits);
    free(s->bias);
    sy_dry_breakers_free(&s->dry);
    free(s->dry_z);
    free(s->dry_max_repeat);
    free(s->dry_touched);
    free(s);
}

int32_t sy_argmax(const float *logits, uint32_t n) {
    uint32_t best = 0;
    for (uint32_t i = 1; i < n; i++) {
        if (logits[i] > logits[best] || (isnan(logits[best]) && !isnan(logits[i]))) best = i;
    }
    return (int32_t)best;
}

uint32_t sy_logits_sanitize(float *logits, uint32_t n) {
    uint32_t finite = 0, infinite = 0;
    for (uint32_t i = 0; i < n; i++) {
        float l = logits[i];
        if (isnan(l)) logits[i] = -INFINITY;
        else if (isinf(l)) infinite += l > 0;
        else finite++;
    }
    if (infinite == 0) return finite;
    for (uint32_t i = 0; i < n; i++) logits[i] = logits[i] == INFINITY ? 0.0f : -INFINITY;
    return infinite;
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

/* The range of breaker sequences whose head is token: [*first, return). */
static uint32_t dry_heads(const sy_dry_breakers *b, int32_t token, uint32_t *first) {
    uint32_t lo = 0, hi = b->n_sequences;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (b->sequences[mid].head < token) lo = mid + 1;
        else hi = mid;
    }
    *first = lo;
    while (hi < b->n_sequences && b->sequences[hi].head == token) hi++;
    return hi;
}

/* llama.cpp's DRY over the last tokens of history (the window). With r the window reversed (r[0] the last token):
 * 1. the repetition limit: the distance back to the nearest complete breaker sequence (its head found at r[i],
 *    its tail before it in the text), so a repetition never spans a breaker;
 * 2. for every k, how many tokens r[k..] shares with r[0..] (the Z-function of r), capped at the limit: the text
 *    ending k tokens back repeats the end of the window for that many tokens;
 * 3. the token that followed that earlier occurrence (r[k-1]) would extend the repetition: each token keeps the
 *    longest such length that reaches dry_allowed_length;
 * 4. those tokens, but for single-token breakers, lose multiplier * base ^ (length - allowed_length), the exponent
 *    capped where a float would overflow. */
static void apply_dry(sy_sampler *s, float *logits, const int32_t *history, size_t n_history) {
    const sy_sampler_params *p = &s->params;
    if (!sy_sampler_dry_enabled(p) || s->dry_max_repeat == NULL) return;
    size_t window = n_history;
    if (p->dry_penalty_last_n > 0 && window > (size_t)p->dry_penalty_last_n) window = (size_t)p->dry_penalty_last_n;
    if (window > INT32_MAX) window = INT32_MAX;
    int32_t allowed = p->dry_allowed_length < 0 ? 0 : p->dry_allowed_length;
    if (window <= (size_t)allowed) return;
    const int32_t *h = history + (n_history - window);
    int32_t w = (int32_t)window;
#define DRY_R(i) h[w - 1 - (i)]
    const sy_dry_breakers *b = &s->dry;
    int32_t limit = w;
    for (int32_t i = 0; i < w && b->n_sequences > 0; i++) {
        uint32_t first, end = dry_heads(b, DRY_R(i), &first);
        int32_t longest = -1;
        for (uint32_t q = first; q < end; q++) {
            const sy_dry_sequence *seq = &b->sequences[q];
            int32_t len = (int32_t)seq->tail_len;
            if (len <= longest || len > i) continue;
            bool match = true;
            for (int32_t j = 0; j < len && match; j++) match = b->tails[seq->tail_offset + (uint32_t)j] == DRY_R(i - j - 1);
            if (match) longest = len;
        }
        if (longest >= 0) {
            limit = i - longest;
            break;
        }
    }
    if (limit < allowed) return;
    if (s->dry_z_cap < window) {
        free(s->dry_z);
        s->dry_z = sy_xmalloc(window * sizeof *s->dry_z);
        s->dry_z_cap = window;
    }
    int32_t *z = s->dry_z;
    z[0] = 0; /* the whole window matches itself: not a repetition */
    for (int32_t k = 1, lt = 0, rt = 0; k < w; k++) { /* rt: one past the rightmost match box [lt, rt) */
        int32_t n = 0;
        if (k < rt) n = z[k - lt] < rt - k ? z[k - lt] : rt - k;
        while (k + n < w && DRY_R(n) == DRY_R(k + n)) n++;
        z[k] = n;
        if (k + n > rt) lt = k, rt = k + n;
    }
    uint32_t n_touched = 0;
    for (int32_t k = 1; k < w; k++) {
        int32_t len = z[k] < limit ? z[k] : limit;
        if (len < allowed) continue;
        int32_t t = DRY_R(k - 1);
        if (t < 0 || (uint32_t)t >= s->n_vocab) continue;
        if (s->dry_max_repeat[t] < 0) s->dry_touched[n_touched++] = t;
        if (s->dry_max_repeat[t] < len) s->dry_max_repeat[t] = len;
    }
#undef DRY_R
    int max_exponent = 0;
    if (p->dry_base > 1.000001f) max_exponent = (int)(88.7228391f / logf(p->dry_base));
    for (uint32_t i = 0; i < n_touched; i++) {
        int32_t t = s->dry_touched[i];
        int32_t len = s->dry_max_repeat[t];
        s->dry_max_repeat[t] = -1;
        uint32_t first, end = dry_heads(b, t, &first);
        bool single_token_breaker = false;
        for (uint32_t q = first; q < end && !single_token_breaker; q++) single_token_breaker = b->sequences[q].tail_len == 0;
        if (single_token_breaker) continue;
        int exponent = len - allowed;
        if (max_exponent > 0 && exponent > max_exponent) exponent = max_exponent;
        /* as llama.cpp computes it: std::pow(float, int) is a double */
        float penalty = (float)((double)p->dry_multiplier * pow((double)p->dry_base, exponent));
        logits[t] -= penalty;
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
/* llama.cpp's typical sampler over cands[0..kept) (their p summing to 1): keep the tokens whose surprise is
 * closest to the entropy until their mass passes typical_p; the survivors come back sorted by logit. */
static uint32_t apply_typical(candidate *c, uint32_t kept, float typical_p) {
    double entropy = 0;
    for (uint32_t i = 0; i < kept; i++)
        if (c[i].p > 0) entropy -= c[i].p * log(c[i].p);
    /* sort by |-log p - entropy| (stable by the current logit order), keep a prefix */
    double *score = sy_xmalloc((kept ? kept : 1) * sizeof *score);
    uint32_t *order = sy_xmalloc((kept ? kept : 1) * sizeof *order);
    for (uint32_t i = 0; i < kept; i++) {
        score[i] = c[i].p > 0 ? fabs(-log(c[i].p) - entropy) : INFINITY;
        order[i] = i;
    }
    for (uint32_t i = 1; i < kept; i++) { /* insertion sort is fine: kept is small after top-k; stable */
        uint32_t x = order[i], j = i;
        while (j > 0 && score[order[j - 1]] > score[x]) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = x;
    }
    double cum = 0;
    uint32_t last = kept;
    for (uint32_t i = 0; i < kept; i++) {
        cum += c[order[i]].p;
        if (cum > typical_p) {
            last = i + 1;
            break;
        }
    }
    candidate *keep = sy_xmalloc((last ? last : 1) * sizeof *keep);
    for (uint32_t i = 0; i < last; i++) keep[i] = c[order[i]];
    memcpy(c, keep, last * sizeof *keep);
    free(keep);
    free(score);
    free(order);
    qsort(c, last, sizeof *c, by_logit_desc);
    return last;
}

/* p of cands[0..kept) as the softmax of their logits (untempered), as llama.cpp renormalises between filters. */
static void renormalise(candidate *c, uint32_t kept) {
    if (kept == 0) return;
    double top = c[0].logit, sum = 0;
    for (uint32_t i = 0; i < kept; i++) sum += (c[i].p = exp((double)c[i].logit - top));
    for (uint32_t i = 0; i < kept; i++) c[i].p /= sum;
}

/* The chain up to the draw: a token when the choice is made already (greedy, everything banned), else -1 with
 * cands[0..*kept) weighted by their tempered p (summing to *sum). */
/* run_chain's answer when the token is to be drawn from the kept candidates (a token id, or SY_SAMPLER_NO_TOKEN,
 * otherwise). */
#define SY_SAMPLER_DRAW ((int32_t)-2)

static int32_t run_chain(sy_sampler *s, float *logits, const int32_t *history, size_t n_history, uint32_t *kept_out,
                         double *sum_out) {
    const sy_sampler_params *p = &s->params;
    uint32_t n = s->n_vocab;
    /* llama.cpp's chain: logit bias, penalties, top-k, typical-p, top-p, min-p, XTC, temperature, the draw */
    for (uint32_t i = 0; i < p->n_logit_bias; i++) {
        int32_t t = p->logit_bias[i].token;
        if (t < 0 || (uint32_t)t >= n) continue;
        logits[t] += p->logit_bias[i].bias; /* -INFINITY removes it; -100, as in llama.cpp, all but does */
    }
    apply_penalties(s, logits, history, n_history);
    apply_dry(s, logits, history, n_history);
    /* After the penalties, which may push a huge logit to infinity. */
    if (sy_logits_sanitize(logits, n) == 0) {
        memcpy(s->last_logits, logits, (size_t)n * sizeof *logits);
        return SY_SAMPLER_NO_TOKEN;
    }
    memcpy(s->last_logits, logits, (size_t)n * sizeof *logits);
    /* Greedy needs no softmax: one pass over the row, which matters with a vocabulary of 150k and several slots
     * sampled one after another on the engine loop between two decodes. */
    if (p->temperature <= 0.0f) return sy_argmax(logits, n);
    float max = logits[sy_argmax(logits, n)];
    if (!isfinite(max)) return sy_argmax(logits, n); /* everything banned: nothing to sample from */

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
        bool typical = p->typical_p > 0.0f && p->typical_p < 1.0f; /* it needs every candidate before min-p */
        float floor_logit = p->min_p > 0.0f && !typical ? max + logf(p->min_p) : -INFINITY;
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
    if (p->typical_p > 0.0f && p->typical_p < 1.0f && kept > 1) {
        renormalise(s->cands, kept); /* over what top-k kept (min-p's pre-cut removed only what it would) */
        kept = apply_typical(s->cands, kept, p->typical_p);
        renormalise(s->cands, kept);
    }
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
    if (p->xtc_probability > 0.0f && p->xtc_threshold <= 0.5f && kept >= 2 &&
        sy_rng_uniform(&s->rng) <= p->xtc_probability) {
        /* drop every candidate at or above the threshold but the last of them */
        renormalise(s->cands, kept);
        uint32_t pos_last = 0;
        for (uint32_t i = 0; i < kept && s->cands[i].p >= p->xtc_threshold; i++) pos_last = i;
        if (kept - pos_last >= 1 && pos_last > 0) {
            memmove(s->cands, s->cands + pos_last, (kept - pos_last) * sizeof *s->cands);
            kept -= pos_last;
        }
    }
    double sum = 0, top = s->cands[0].logit;
    for (uint32_t i = 0; i < kept; i++) {
        s->cands[i].p = exp(((double)s->cands[i].logit - top) / p->temperature);
        sum += s->cands[i].p;
    }
    *kept_out = kept;
    *sum_out = sum;
    return SY_SAMPLER_DRAW;
}

int32_t sy_sampler_sample(sy_sampler *s, float *logits, const int32_t *history, size_t n_history) {
    uint32_t kept = 0;
    double sum = 0;
    int32_t chosen = run_chain(s, logits, history, n_history, &kept, &sum);
    if (chosen != SY_SAMPLER_DRAW) return chosen;
    double r = sy_rng_uniform(&s->rng) * sum, acc = 0;
    for (uint32_t i = 0; i < kept; i++) {
        acc += s->cands[i].p;
        if (r < acc) return s->cands[i].id;
    }
    return s->cands[kept - 1].id;
}

size_t sy_sampler_distribution(sy_sampler *s, float *logits, const int32_t *history, size_t n_history,
                               int32_t *ids, double *probs, size_t cap) {
    uint32_t kept = 0;
    double sum = 0;
    int32_t chosen = run_chain(s, logits, history, n_history, &kept, &sum);
    if (chosen == SY_SAMPLER_NO_TOKEN) return 0;
    if (chosen != SY_SAMPLER_DRAW) {
        if (cap > 0) ids[0] = chosen, probs[0] = 1.0;
        return 1;
    }
    for (uint32_t i = 0; i < kept && i < cap; i++) {
        ids[i] = s->cands[i].id;
        probs[i] = s->cands[i].p / sum;
    }
    return kept;
}

double sy_sampler_last_logprob(const sy_sampler *s, int32_t token) {
    if (token < 0 || (uint32_t)token >= s->n_vocab) return -INFINITY;
    const float *l = s->last_logits;
    float max = l[sy_argmax(l, s->n_vocab)];
    double z = 0;
    for (uint32_t i = 0; i < s->n_vocab; i++) z += exp((double)l[i] - max);
    return (double)l[token] - (max + log(z));
}
