/*
 * test-engine: the fake model math. Integers and xxHash only, so every machine computes the same bits.
 *
 * Per position p holding token t, for each layer l, a KV row of 8 F16 values (little-endian):
 *   layer 0: values 0..3 = the token's key (depends on t only, like an attention key without position),
 *            values 4..7 = hash(t, p, layer-0 row of p-1, recurrent state before p)
 *   layer l: values 0..7 = hash(l, p, row l-1 of p, row l of p-1)
 * With recurrent=1 the state after p = hash(state before p, all rows of p).
 *
 * Logits of position p come only from stored data:
 *   D = hash(every KV row of positions 0..p [, recurrent state after p])
 *   q[v] = base[v] + 22 bits of mix(D, v)                      (fixed point, 2^20 = 1.0)
 *   with probability 1/eos_one_in (decided by D) an end token gets the clear maximum;
 *   otherwise, with probability 1/2, "induction": when the keys of p-1, p occurred earlier as a pair, the token
 *   whose key followed them gets the maximum (so repeated text tends to repeat, giving n-gram drafters real hits).
 * Lower-case letters and space are favoured, so greedy text is varied printable ASCII.
 */
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "te_internal.h"

#define TE_FIXED_ONE (1 << 20)

/* Domain-separation constants, so no two hashes of the engine ever share an input. */
enum {
    TE_TAG_KEY = 0x4b455931,
    TE_TAG_VALUE = 0x56414c30,
    TE_TAG_LAYER = 0x4c415952,
    TE_TAG_RECURRENT = 0x52454352,
    TE_TAG_INIT = 0x494e4954
};
#define TE_SALT_DIGEST 0x9d1c3a7e5b2f4861ull
#define TE_SALT_RECURRENT_B 0x3c6ef372fe94f82bull
#define TE_SALT_EOS 0xa54ff53a5f1d36f1ull
#define TE_SALT_EOS_PICK 0x510e527fade682d1ull
#define TE_SALT_COPY 0x1f83d9abfb41bd6bull

static void te_put_u32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static void te_put_u64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t te_get_u64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

/* 16 random bits -> a finite F16 of magnitude 2^-4..2^4 (what real activations look like to a compressor). */
static uint16_t te_f16_from_bits(uint32_t r) {
    uint32_t sign = r & 1u;
    uint32_t exponent = 11u + ((r >> 1) & 7u);
    uint32_t mantissa = (r >> 4) & 0x3ffu;
    return (uint16_t)((sign << 15) | (exponent << 10) | mantissa);
}

/* Four F16 values from 64 hash bits, written little-endian. */
static void te_put_f16x4(uint8_t *out, uint64_t h) {
    for (int i = 0; i < 4; i++) {
        uint16_t v = te_f16_from_bits((uint32_t)(h >> (16 * i)) & 0xffffu);
        out[2 * i] = (uint8_t)v;
        out[2 * i + 1] = (uint8_t)(v >> 8);
    }
}

static void te_put_f16x8(uint8_t *out, XXH128_hash_t h) {
    te_put_f16x4(out, h.low64);
    te_put_f16x4(out + 8, h.high64);
}

/* splitmix64's finalizer: a cheap, well-mixed integer hash. */
static uint64_t te_mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

static int te_key_compare(const void *a, const void *b) {
    const te_key_entry *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    return (x->token > y->token) - (x->token < y->token);
}

sy_status te_math_init(sy_model *model) {
    uint32_t n = model->cfg.n_vocab;
    model->token_keys = calloc(n, sizeof *model->token_keys);
    model->keys_sorted = calloc(n, sizeof *model->keys_sorted);
    if (model->token_keys == NULL || model->keys_sorted == NULL) {
        te_math_free(model);
        return te_fail(SY_ERR_OUT_OF_MEMORY, "out of memory for the token key table");
    }
    for (uint32_t t = 0; t < n; t++) {
        uint8_t in[8], key[8];
        te_put_u32(in, TE_TAG_KEY);
        te_put_u32(in + 4, t);
        te_put_f16x4(key, XXH3_64bits_withSeed(in, sizeof in, model->cfg.seed));
        model->token_keys[t] = te_get_u64(key);
        model->keys_sorted[t].key = model->token_keys[t];
        model->keys_sorted[t].token = (int32_t)t;
    }
    qsort(model->keys_sorted, n, sizeof *model->keys_sorted, te_key_compare);

    uint8_t in[4];
    te_put_u32(in, TE_TAG_INIT);
    te_put_f16x8(model->recurrent_init, XXH3_128bits_withSeed(in, sizeof in, model->cfg.seed));
    te_put_f16x8(model->recurrent_init + 16,
                 XXH3_128bits_withSeed(in, sizeof in, model->cfg.seed ^ TE_SALT_RECURRENT_B));
    return SY_OK;
}

void te_math_free(sy_model *model) {
    free(model->token_keys);
    free(model->keys_sorted);
    model->token_keys = NULL;
    model->keys_sorted = NULL;
}

/* The token whose key is `key` (lowest id if several), or -1 (a corrupted key matches nothing). */
static int32_t te_token_of_key(const sy_model *model, uint64_t key) {
    size_t lo = 0, hi = model->cfg.n_vocab;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (model->keys_sorted[mid].key < key) lo = mid + 1;
        else hi = mid;
    }
    if (lo < model->cfg.n_vocab && model->keys_sorted[lo].key == key) return model->keys_sorted[lo].token;
    return -1;
}

void te_compute_position(const sy_model *model, sy_seq *seq, uint32_t pos, int32_t token) {
    const uint32_t row_stride = model->kv_bytes_per_token;
    const uint64_t seed = model->cfg.seed;
    uint8_t *rows = seq->kv + (size_t)pos * row_stride;
    const uint8_t *prev = pos > 0 ? rows - row_stride : NULL;
    static const uint8_t zero_row[TE_ROW_BYTES];
    /* Largest hash input: the recurrent update over 32 state bytes and 64 layers of rows. */
    uint8_t in[TE_RECURRENT_BYTES + 64 * TE_ROW_BYTES];

    /* Layer 0: key, then the chained value. */
    te_put_u64(rows, model->token_keys[token]);
    size_t n = 0;
    te_put_u32(in + n, TE_TAG_VALUE), n += 4;
    te_put_u32(in + n, (uint32_t)token), n += 4;
    te_put_u32(in + n, pos), n += 4;
    memcpy(in + n, prev ? prev : zero_row, TE_ROW_BYTES), n += TE_ROW_BYTES;
    if (model->cfg.recurrent)
        memcpy(in + n, seq->rec + (size_t)pos * TE_RECURRENT_BYTES, TE_RECURRENT_BYTES), n += TE_RECURRENT_BYTES;
    te_put_f16x4(rows + 8, XXH3_64bits_withSeed(in, n, seed));

    for (uint32_t l = 1; l < model->cfg.n_layer; l++) {
        n = 0;
        te_put_u32(in + n, TE_TAG_LAYER), n += 4;
        te_put_u32(in + n, l), n += 4;
        te_put_u32(in + n, pos), n += 4;
        memcpy(in + n, rows + (size_t)(l - 1) * TE_ROW_BYTES, TE_ROW_BYTES), n += TE_ROW_BYTES;
        memcpy(in + n, prev ? prev + (size_t)l * TE_ROW_BYTES : zero_row, TE_ROW_BYTES), n += TE_ROW_BYTES;
        te_put_f16x8(rows + (size_t)l * TE_ROW_BYTES, XXH3_128bits_withSeed(in, n, seed));
    }

    if (model->cfg.recurrent) {
        const uint8_t *state = seq->rec + (size_t)pos * TE_RECURRENT_BYTES;
        uint8_t *next = seq->rec + (size_t)(pos + 1) * TE_RECURRENT_BYTES;
        n = 0;
        te_put_u32(in + n, TE_TAG_RECURRENT), n += 4;
        memcpy(in + n, state, TE_RECURRENT_BYTES), n += TE_RECURRENT_BYTES;
        memcpy(in + n, rows, row_stride), n += row_stride;
        te_put_f16x8(next, XXH3_128bits_withSeed(in, n, seed));
        te_put_f16x8(next + 16, XXH3_128bits_withSeed(in, n, seed ^ TE_SALT_RECURRENT_B));
        seq->rec_known[pos + 1] = 1;
    }
}

/* The prior of a token, in fixed point. */
static int32_t te_base_logit(int32_t v) {
    if (v == ' ') return 5 * TE_FIXED_ONE;
    if ((v >= 'a' && v <= 'z')) return 4 * TE_FIXED_ONE;
    if ((v >= 33 && v <= 126) || v == '\n') return 5 * TE_FIXED_ONE / 2;
    if (v < 256) return -2 * TE_FIXED_ONE;
    if (v == TE_TOKEN_EOS || v == TE_TOKEN_IM_END) return -3 * TE_FIXED_ONE;
    return -8 * TE_FIXED_ONE;
}

/* Induction: the token predicted by an earlier occurrence of the key pair (p-1, p), or -1. */
static int32_t te_induction_candidate(const sy_model *model, const sy_seq *seq, uint32_t pos) {
    if (pos < 2) return -1;
    const uint32_t stride = model->kv_bytes_per_token;
    const uint64_t key_now = te_get_u64(seq->kv + (size_t)pos * stride);
    const uint64_t key_before = te_get_u64(seq->kv + (size_t)(pos - 1) * stride);
    for (uint32_t j = pos - 1; j >= 1; j--) {
        if (te_get_u64(seq->kv + (size_t)j * stride) == key_now &&
            te_get_u64(seq->kv + (size_t)(j - 1) * stride) == key_before)
            return te_token_of_key(model, te_get_u64(seq->kv + (size_t)(j + 1) * stride));
    }
    return -1;
}

void te_compute_logits(const sy_model *model, const sy_seq *seq, uint32_t pos, float *logits) {
    const uint32_t n_vocab = model->cfg.n_vocab;
    uint64_t digest = XXH3_64bits_withSeed(seq->kv, (size_t)(pos + 1) * model->kv_bytes_per_token,
                                           model->cfg.seed ^ TE_SALT_DIGEST);
    if (model->cfg.recurrent) {
        uint8_t in[8 + TE_RECURRENT_BYTES];
        te_put_u64(in, digest);
        memcpy(in + 8, seq->rec + (size_t)(pos + 1) * TE_RECURRENT_BYTES, TE_RECURRENT_BYTES);
        digest = XXH3_64bits_withSeed(in, sizeof in, model->cfg.seed ^ TE_SALT_DIGEST);
    }

    int32_t max_q = INT32_MIN;
    for (uint32_t v = 0; v < n_vocab; v++) {
        int32_t q = te_base_logit((int32_t)v) + (int32_t)(te_mix64(digest ^ (v * 0x9e3779b97f4a7c15ull)) >> 42);
        if (q > max_q) max_q = q;
        logits[v] = (float)q; /* |q| < 2^24: exact */
    }

    int32_t favoured = -1, boost = 0;
    if (model->cfg.eos_one_in != 0 && te_mix64(digest ^ TE_SALT_EOS) % model->cfg.eos_one_in == 0) {
        favoured = (te_mix64(digest ^ TE_SALT_EOS_PICK) & 1) ? TE_TOKEN_EOS : TE_TOKEN_IM_END;
        boost = TE_FIXED_ONE;
    } else if (te_mix64(digest ^ TE_SALT_COPY) & 1) {
        favoured = te_induction_candidate(model, seq, pos);
        boost = TE_FIXED_ONE / 2;
    }
    if (favoured >= 0 && (uint32_t)favoured < n_vocab) logits[favoured] = (float)(max_q + boost);

    const float scale = 1.0f / (float)TE_FIXED_ONE; /* a power of two: scaling stays exact */
    for (uint32_t v = 0; v < n_vocab; v++) logits[v] *= scale;
}
