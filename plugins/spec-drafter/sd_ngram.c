/*
 * spec-drafter: the n-gram index behind prompt lookup (and the replay drafter).
 *
 * Open addressing with linear probing over (hash of n tokens, n) -> next position. Each appended token t at
 * position p completes the n-grams ending at p-1 for every n, all mapped to p; a slot that already holds the same
 * n-gram is overwritten, so the index remembers the most recent occurrence only and its size stays proportional
 * to the context. Hash collisions are harmless: a hit is confirmed against the tokens themselves.
 */
#include <stdlib.h>
#include <string.h>

#include "sd_internal.h"

#define SD_MIN_SLOTS 256u
#define SD_TAIL_CHECK 32u /* tokens compared to decide that a context extends the indexed one */

void sd_ngram_init(sd_ngram_index *ix, uint32_t n_min, uint32_t n_max) {
    memset(ix, 0, sizeof *ix);
    ix->n_min = n_min < 1 ? 1 : n_min;
    ix->n_max = n_max < ix->n_min ? ix->n_min : n_max;
    if (ix->n_max > SD_MAX_NGRAM) ix->n_max = SD_MAX_NGRAM;
    if (ix->n_min > ix->n_max) ix->n_min = ix->n_max;
}

void sd_ngram_free(sd_ngram_index *ix) {
    free(ix->tokens);
    free(ix->slots);
    ix->tokens = NULL;
    ix->slots = NULL;
    ix->n_tokens = ix->cap_tokens = 0;
    ix->cap_slots = ix->used_slots = 0;
}

void sd_ngram_reset(sd_ngram_index *ix) {
    ix->n_tokens = 0;
    ix->used_slots = 0;
    if (ix->slots != NULL) memset(ix->slots, 0, ix->cap_slots * sizeof *ix->slots);
}

static uint64_t mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

static uint64_t gram_hash(const int32_t *gram, uint32_t n) {
    uint64_t h = 0x6a09e667f3bcc909ull ^ n;
    for (uint32_t i = 0; i < n; i++) h = mix64(h ^ (uint32_t)gram[i]) + 0x9e3779b97f4a7c15ull;
    return h;
}

/* The slot holding (hash, n) whose tokens equal gram, or the empty slot where it would go. */
static sd_ngram_slot *find_slot(sd_ngram_slot *slots, size_t cap, const int32_t *tokens, uint64_t h,
                                const int32_t *gram, uint32_t n) {
    size_t mask = cap - 1;
    for (size_t i = (size_t)h & mask;; i = (i + 1) & mask) {
        sd_ngram_slot *s = &slots[i];
        if (s->next == 0) return s;
        if (s->hash == h && s->n == n && memcmp(tokens + s->next - n, gram, (size_t)n * sizeof *gram) == 0)
            return s;
    }
}

static sy_status grow_slots(sd_ngram_index *ix, size_t want_used) {
    if (ix->cap_slots != 0 && want_used * 2 <= ix->cap_slots) return SY_OK;
    size_t cap = ix->cap_slots ? ix->cap_slots : SD_MIN_SLOTS;
    while (want_used * 2 > cap) {
        if (cap > ((size_t)1 << 40) / sizeof(sd_ngram_slot))
            return sd_fail(SY_ERR_OUT_OF_MEMORY, "n-gram index too large");
        cap *= 2;
    }
    sd_ngram_slot *slots = calloc(cap, sizeof *slots);
    if (slots == NULL) return sd_fail(SY_ERR_OUT_OF_MEMORY, "out of memory for an n-gram index of %zu slots", cap);
    for (size_t i = 0; i < ix->cap_slots; i++) {
        const sd_ngram_slot *old = &ix->slots[i];
        if (old->next == 0) continue;
        sd_ngram_slot *s = find_slot(slots, cap, ix->tokens, old->hash, ix->tokens + old->next - old->n, old->n);
        *s = *old;
    }
    free(ix->slots);
    ix->slots = slots;
    ix->cap_slots = cap;
    return SY_OK;
}

sy_status sd_ngram_append(sd_ngram_index *ix, const int32_t *tokens, uint32_t n) {
    if (n == 0) return SY_OK;
    if (n > SD_MAX_TOKENS || ix->n_tokens > SD_MAX_TOKENS - n)
        return sd_fail(SY_ERR_INVALID_ARGUMENT, "an n-gram index holds at most %u tokens", SD_MAX_TOKENS);
    uint32_t total = ix->n_tokens + n;
    if (total > ix->cap_tokens) {
        uint32_t cap = ix->cap_tokens ? ix->cap_tokens : 256;
        while (cap < total) cap = cap > SD_MAX_TOKENS / 2 ? SD_MAX_TOKENS : cap * 2;
        int32_t *grown = realloc(ix->tokens, (size_t)cap * sizeof *grown);
        if (grown == NULL) return sd_fail(SY_ERR_OUT_OF_MEMORY, "out of memory for %u context tokens", cap);
        ix->tokens = grown;
        ix->cap_tokens = cap;
    }
    /* At most one new slot per (position, n): reserve for all of them before touching anything. */
    uint32_t sizes = ix->n_max - ix->n_min + 1;
    sy_status st = grow_slots(ix, ix->used_slots + (size_t)n * sizes);
    if (st != SY_OK) return st;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t p = ix->n_tokens; /* the position of the new token */
        ix->tokens[p] = tokens[i];
        ix->n_tokens = p + 1;
        /* n-grams ending at p-1 now have a follower: position p. */
        for (uint32_t g = ix->n_min; g <= ix->n_max && g <= p; g++) {
            const int32_t *gram = ix->tokens + p - g;
            uint64_t h = gram_hash(gram, g);
            sd_ngram_slot *s = find_slot(ix->slots, ix->cap_slots, ix->tokens, h, gram, g);
            if (s->next == 0) ix->used_slots++;
            s->hash = h;
            s->n = g;
            s->next = p;
        }
    }
    return SY_OK;
}

sy_status sd_ngram_sync(sd_ngram_index *ix, const int32_t *context, uint32_t n) {
    uint32_t have = ix->n_tokens;
    bool extends = have <= n;
    if (extends && have > 0) {
        uint32_t check = have < SD_TAIL_CHECK ? have : SD_TAIL_CHECK;
        extends = memcmp(ix->tokens + have - check, context + have - check, (size_t)check * sizeof *context) == 0;
    }
    if (!extends) {
        sd_ngram_reset(ix);
        have = 0;
    }
    return sd_ngram_append(ix, context + have, n - have);
}

uint32_t sd_ngram_find(const sd_ngram_index *ix, const int32_t *query, uint32_t n) {
    if (ix->cap_slots == 0 || n == 0 || n > ix->n_max || n < ix->n_min) return 0;
    uint64_t h = gram_hash(query, n);
    const sd_ngram_slot *s = find_slot(ix->slots, ix->cap_slots, ix->tokens, h, query, n);
    return s->next;
}

uint32_t sd_ngram_propose(const sd_ngram_index *ix, const int32_t *query, uint32_t n_query, uint32_t k_max,
                          int32_t *out) {
    if (k_max == 0 || n_query == 0) return 0;
    for (uint32_t g = ix->n_max; g >= ix->n_min; g--) {
        if (g <= n_query) {
            uint32_t next = sd_ngram_find(ix, query + n_query - g, g);
            if (next != 0 && next < ix->n_tokens) {
                /* What followed; past the end of the index the proposal repeats with period n_tokens - next. */
                uint32_t period = ix->n_tokens - next, k = 0;
                for (; k < k_max; k++) out[k] = k < period ? ix->tokens[next + k] : out[k - period];
                return k;
            }
        }
        if (g == 1) break;
    }
    return 0;
}
