/* Choosing the next token from a logits row: greedy, or seeded temperature / top-k / top-p / min-p sampling with
 * repetition penalties. Deterministic for a given seed on every machine (own PRNG, no libc rand). */
#ifndef SY_HOST_SAMPLER_H
#define SY_HOST_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

/* One entry of OpenAI's logit_bias: added to the token's logit, as llama.cpp adds it (-100 leaves the token a
 * weight of e^-100: never chosen); -INFINITY (llama.cpp's `false`) removes it. */
typedef struct sy_logit_bias {
    int32_t token;
    float bias;
} sy_logit_bias;
#define SY_MAX_LOGIT_BIAS 1024

/* DRY's sequence breakers as token sequences (llama.cpp's "restart sequences"): a head token and the tokens that
 * must follow it, tail_len of them from tails[tail_offset]. A head with an empty tail is a token whose text holds a
 * whole breaker; a longer one is a token ending with a breaker's beginning followed by the tokenized rest. Built
 * from breaker strings with a vocabulary by sy_dry_breakers_build (engine/dry_breakers.h). */
typedef struct sy_dry_sequence {
    int32_t head;
    uint32_t tail_offset, tail_len;
} sy_dry_sequence;
typedef struct sy_dry_breakers {
    sy_dry_sequence *sequences; /* sorted by head */
    uint32_t n_sequences;
    int32_t *tails;
    uint32_t n_tails;
} sy_dry_breakers;
#define SY_DRY_MAX_TAIL 20 /* llama.cpp's MAX_SEQ_LEN: tails are cut there, which keeps the scan linear */

typedef struct sy_sampler_params {
    float temperature;       /* <= 0: greedy */
    uint32_t top_k;          /* 0: off */
    float top_p;             /* >= 1: off */
    float min_p;             /* <= 0: off */
    float repeat_penalty;    /* 1: off (llama.cpp's: divide positive logits, multiply negative ones) */
    float presence_penalty;  /* 0: off (OpenAI's) */
    float frequency_penalty; /* 0: off (OpenAI's) */
    uint32_t penalty_last_n; /* how many recent tokens the penalties look at; 0: all given */
    uint64_t seed;
    /* llama.cpp's samplers beyond the basic chain, with its names and semantics (llama-sampler.cpp) */
    float typical_p;         /* locally typical sampling; <= 0 or >= 1: off */
    float xtc_probability;   /* exclude top choices: the chance per token; <= 0: off */
    float xtc_threshold;     /* ... of removing every candidate above this probability but the least likely; > 0.5: off */
    const sy_logit_bias *logit_bias; /* n_logit_bias entries (at most SY_MAX_LOGIT_BIAS); the caller keeps them */
    uint32_t n_logit_bias;
    /* DRY ("don't repeat yourself", llama.cpp's): a token that would extend a repetition of at least
     * dry_allowed_length tokens found in the last dry_penalty_last_n loses dry_multiplier * dry_base ^ (length -
     * dry_allowed_length) from its logit; repetitions do not reach back across a sequence breaker. */
    float dry_multiplier;       /* 0: off */
    float dry_base;             /* below 1: off */
    int32_t dry_allowed_length;
    int32_t dry_penalty_last_n; /* -1: the whole context; 0: off */
    const sy_dry_breakers *dry_breakers; /* NULL: none; the sampler copies them */
} sy_sampler_params;

/* Whether the parameters need more than temperature, top-k, top-p and min-p (which engines may sample alone). */
int sy_sampler_needs_host(const sy_sampler_params *p);

/* llama.cpp's defaults: temperature 0.8, top-k 40, top-p 0.95, min-p 0.05, typical-p 1, XTC off (threshold 0.1),
 * DRY off (base 1.75, allowed length 2, last 64 tokens), no penalties. */
sy_sampler_params sy_sampler_defaults(void);

typedef struct sy_sampler sy_sampler;

sy_sampler *sy_sampler_create(const sy_sampler_params *params, uint32_t n_vocab);
void sy_sampler_free(sy_sampler *s);

/* What sy_sampler_sample returns when the row has no usable logit (all NaN or -inf), and the message for it. */
#define SY_SAMPLER_NO_TOKEN ((int32_t)-1)
#define SY_SAMPLER_NO_TOKEN_MESSAGE "the model produced no usable logits (every one NaN or -inf); generation stopped"

/* The next token, or SY_SAMPLER_NO_TOKEN. `logits` (n_vocab floats) may be modified. `history` are the tokens
 * so far (for penalties). NaN logits count as -inf; +inf ones share all the mass. */
int32_t sy_sampler_sample(sy_sampler *s, float *logits, const int32_t *history, size_t n_history);

/* The distribution sy_sampler_sample draws from for this row, without drawing: the candidates that survive the
 * chain (best first) and their probabilities after temperature (summing to 1). Writes at most cap; returns the
 * count. It consumes randomness as sampling does (XTC's coin), so it is for tests and diagnostics. */
size_t sy_sampler_distribution(sy_sampler *s, float *logits, const int32_t *history, size_t n_history,
                               int32_t *ids, double *probs, size_t cap);
/* Make a row of logits safe to sample: NaN becomes -inf; when any logit is +inf, those become 0 and every other
 * -inf (they hold all the mass). Returns how many finite logits the row has then (0: nothing can be drawn). */
uint32_t sy_logits_sanitize(float *logits, uint32_t n);

/* The probability the sampler's distribution gave each token of its last call: for logprobs. Returns the
 * log-probability of `token` under the softmax of the (penalised) logits at temperature 1. One pass over the
 * vocabulary per call (sampling itself does not compute the softmax when it is greedy). */
double sy_sampler_last_logprob(const sy_sampler *s, int32_t token);

/* Copy and free a breaker set (the copy of NULL or an empty set is an empty set). */
void sy_dry_breakers_copy(sy_dry_breakers *dst, const sy_dry_breakers *src);
void sy_dry_breakers_free(sy_dry_breakers *b);
/* Whether DRY is on with these parameters (llama.cpp: multiplier not 0, base at least 1, last_n not 0). */
int sy_sampler_dry_enabled(const sy_sampler_params *p);

/* Greedy choice: the highest logit, the lowest id on ties. */
int32_t sy_argmax(const float *logits, uint32_t n);

/* xoshiro256** seeded through splitmix64: the generator behind sampling. */
typedef struct sy_rng {
    uint64_t s[4];
} sy_rng;
void sy_rng_seed(sy_rng *rng, uint64_t seed);
uint64_t sy_rng_next(sy_rng *rng);
/* Uniform in [0, 1) with 53 bits. */
double sy_rng_uniform(sy_rng *rng);

#endif
