/* The BPE tokenizer's hash tables: vocabulary text -> id (id_table over a text_store) and merge pair -> (rank,
 * merged id) (merge_table). Internal to the bpe_*.c files and tokenizer_json.c.
 *
 * Why tables of our own: loading a 150k-token vocabulary inserts 150k texts and looks up 300k (both sides of
 * each merge), and encoding looks up a merge for every adjacent pair of every word. The tables are open
 * addressing with linear probing, sized to powers of two, and keep in each slot what a lookup needs to decide
 * (32 bits of the hash, where the text lies), so that a probe touches one slot and, on a hash match, the text.
 * Header-only and static inline so that these loops compile as one piece with their callers (they did when all
 * of this was one file, and the load time depends on it).
 */
#ifndef SY_BPE_TABLES_H
#define SY_BPE_TABLES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL /* the hash runs ~1M times while loading: let it inline */
#include <xxhash.h>

static inline uint64_t hash_bytes(const void *s, size_t n) {
    return XXH3_64bits(s, n);
}

/* Text -> id over texts stored in a text_store. Open addressing, linear probing. A slot keeps 32 bits of the
 * hash (its home index and a quick filter: growing never rehashes text) and where the text lies, so that a
 * lookup touches the slot and the text only. */
typedef struct id_slot {
    uint32_t id_plus1; /* 0 = empty */
    uint32_t hash;
    uint32_t off;
    uint32_t len;
} id_slot;

typedef struct id_table {
    id_slot *slots;
    size_t mask; /* capacity - 1 */
    size_t count;
} id_table;

typedef struct text_store {
    char *arena;
    size_t arena_len;
    size_t arena_cap;
    uint32_t *off; /* per id */
    uint32_t *len; /* per id; UINT32_MAX = no text */
} text_store;

static inline const char *store_text(const text_store *s, uint32_t id, size_t *len) {
    *len = s->len[id];
    return s->arena + s->off[id];
}

/* Tokens are short: a byte loop beats a memcmp call for them. */
static inline bool bytes_equal(const char *a, const char *b, size_t n) {
    if (n > 16)
        return memcmp(a, b, n) == 0;
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i])
            return false;
    return true;
}

static inline void id_table_prefetch(const id_table *t, uint64_t h) {
    __builtin_prefetch(&t->slots[(uint32_t)h & t->mask]);
}

static inline bool id_table_init(id_table *t, size_t cap_pow2) {
    t->slots = calloc(cap_pow2, sizeof(id_slot));
    if (t->slots == NULL)
        return false;
    t->mask = cap_pow2 - 1;
    t->count = 0;
    return true;
}

static inline int32_t id_table_find_h(const id_table *t, const text_store *s, const char *text, size_t len,
                                      uint64_t h) {
    if (t->slots == NULL)
        return -1;
    uint32_t h32 = (uint32_t)h;
    for (size_t i = h32 & t->mask;; i = (i + 1) & t->mask) {
        const id_slot *sl = &t->slots[i];
        if (sl->id_plus1 == 0)
            return -1;
        if (sl->hash == h32 && sl->len == len && bytes_equal(s->arena + sl->off, text, len))
            return (int32_t)(sl->id_plus1 - 1);
    }
}

static inline int32_t id_table_find(const id_table *t, const text_store *s, const char *text, size_t len) {
    return id_table_find_h(t, s, text, len, hash_bytes(text, len));
}

static inline bool id_table_grow(id_table *t) {
    size_t cap = (t->mask + 1) * 2;
    if (cap > ((size_t)1 << 31))
        return false;
    id_slot *slots = calloc(cap, sizeof(id_slot));
    if (slots == NULL)
        return false;
    for (size_t i = 0; i <= t->mask; i++) {
        if (t->slots[i].id_plus1 == 0)
            continue;
        size_t j = t->slots[i].hash & (cap - 1);
        while (slots[j].id_plus1 != 0)
            j = (j + 1) & (cap - 1);
        slots[j] = t->slots[i];
    }
    free(t->slots);
    t->slots = slots;
    t->mask = cap - 1;
    return true;
}

/* Inserts id (whose text is already in the store); the caller checked that the text is not present. */
static inline bool id_table_insert(id_table *t, const text_store *s, uint32_t id, uint64_t h) {
    if ((t->count + 1) * 4 > (t->mask + 1) * 3 && !id_table_grow(t))
        return false;
    uint32_t h32 = (uint32_t)h;
    size_t i = h32 & t->mask;
    while (t->slots[i].id_plus1 != 0)
        i = (i + 1) & t->mask;
    t->slots[i] = (id_slot){.id_plus1 = id + 1, .hash = h32, .off = s->off[id], .len = s->len[id]};
    t->count++;
    return true;
}

/* Merge pair (left id, right id) -> (rank, merged id). */
typedef struct merge_slot {
    uint64_t key; /* MERGE_EMPTY when free */
    uint32_t rank;
    int32_t merged;
} merge_slot;

#define MERGE_EMPTY UINT64_MAX

typedef struct merge_table {
    merge_slot *slots;
    size_t mask;
    size_t count;
} merge_table;

static inline uint64_t merge_key(int32_t a, int32_t b) {
    return ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
}

static inline size_t merge_hash(uint64_t key) {
    key ^= key >> 29;
    key *= 0xBF58476D1CE4E5B9ull;
    key ^= key >> 32;
    return (size_t)key;
}

static inline bool merge_table_alloc(merge_table *t, size_t cap) {
    t->slots = malloc(cap * sizeof(merge_slot));
    if (t->slots == NULL)
        return false;
    for (size_t i = 0; i < cap; i++)
        t->slots[i].key = MERGE_EMPTY;
    t->mask = cap - 1;
    t->count = 0;
    return true;
}

static inline const merge_slot *merge_find(const merge_table *t, int32_t a, int32_t b) {
    if (t->count == 0)
        return NULL;
    uint64_t key = merge_key(a, b);
    for (size_t i = merge_hash(key) & t->mask;; i = (i + 1) & t->mask) {
        const merge_slot *s = &t->slots[i];
        if (s->key == key)
            return s;
        if (s->key == MERGE_EMPTY)
            return NULL;
    }
}

static inline bool merge_put(merge_table *t, int32_t a, int32_t b, uint32_t rank, int32_t merged) {
    if ((t->count + 1) * 4 > (t->mask + 1) * 3) {
        merge_table bigger;
        if (!merge_table_alloc(&bigger, (t->mask + 1) * 2))
            return false;
        for (size_t i = 0; i <= t->mask; i++) {
            if (t->slots[i].key == MERGE_EMPTY)
                continue;
            size_t j = merge_hash(t->slots[i].key) & bigger.mask;
            while (bigger.slots[j].key != MERGE_EMPTY)
                j = (j + 1) & bigger.mask;
            bigger.slots[j] = t->slots[i];
        }
        bigger.count = t->count;
        free(t->slots);
        *t = bigger;
    }
    uint64_t key = merge_key(a, b);
    size_t i = merge_hash(key) & t->mask;
    while (t->slots[i].key != MERGE_EMPTY && t->slots[i].key != key)
        i = (i + 1) & t->mask;
    if (t->slots[i].key == MERGE_EMPTY)
        t->count++;
    t->slots[i].key = key; /* a repeated pair keeps the later rank, like a Rust HashMap collect */
    t->slots[i].rank = rank;
    t->slots[i].merged = merged;
    return true;
}

/* Grows an id table to hold n entries without rehashing later: one allocation of the final size. */
static inline bool id_table_reserve(id_table *t, size_t n) {
    size_t cap = t->mask + 1;
    while (n * 4 > cap * 3) {
        if (cap > ((size_t)1 << 30))
            return false;
        cap *= 2;
    }
    if (cap == t->mask + 1)
        return true;
    if (t->count > 0) {
        while (t->mask + 1 < cap)
            if (!id_table_grow(t))
                return false;
        return true;
    }
    id_slot *slots = calloc(cap, sizeof(id_slot));
    if (slots == NULL)
        return false;
    free(t->slots);
    t->slots = slots;
    t->mask = cap - 1;
    return true;
}

#endif
