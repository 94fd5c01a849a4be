/* The BPE tokenizer's word cache; see bpe_cache.h. */
#include "bpe_cache.h"

#include <stdlib.h>
#include <string.h>

void bpe_cache_init(bpe_cache *c) {
    for (int i = 0; i < BPE_CACHE_SHARDS; i++) {
        pthread_mutex_init(&c->shards[i].lock, NULL);
        c->shards[i].slots = NULL; /* allocated on first insert */
        c->shards[i].count = 0;
    }
    c->ready = true;
}

static void cache_shard_clear(bpe_cache_shard *s) {
    if (s->slots == NULL)
        return;
    for (size_t i = 0; i < BPE_CACHE_SHARD_SLOTS; i++) {
        free(s->slots[i]);
        s->slots[i] = NULL;
    }
    s->count = 0;
}

void bpe_cache_destroy(bpe_cache *c) {
    if (!c->ready)
        return;
    for (int i = 0; i < BPE_CACHE_SHARDS; i++) {
        cache_shard_clear(&c->shards[i]);
        free(c->shards[i].slots);
        pthread_mutex_destroy(&c->shards[i].lock);
    }
    c->ready = false;
}

int bpe_cache_get(const bpe_cache *c, const unsigned char *w, size_t n, uint64_t h, int32_t *out) {
    bpe_cache_shard *s = (bpe_cache_shard *)&c->shards[h % BPE_CACHE_SHARDS];
    int found = -1;
    pthread_mutex_lock(&s->lock);
    if (s->slots != NULL) {
        for (size_t i = (size_t)(h >> 8) & (BPE_CACHE_SHARD_SLOTS - 1);; i = (i + 1) & (BPE_CACHE_SHARD_SLOTS - 1)) {
            const bpe_cache_entry *e = s->slots[i];
            if (e == NULL)
                break;
            if (e->hash == h && e->len == n && memcmp((const char *)(e->ids + e->n_ids), w, n) == 0) {
                memcpy(out, e->ids, e->n_ids * sizeof(int32_t));
                found = (int)e->n_ids;
                break;
            }
        }
    }
    pthread_mutex_unlock(&s->lock);
    return found;
}

void bpe_cache_put(const bpe_cache *c, const unsigned char *w, size_t n, uint64_t h, const int32_t *ids,
                   size_t n_ids) {
    bpe_cache_shard *s = (bpe_cache_shard *)&c->shards[h % BPE_CACHE_SHARDS];
    bpe_cache_entry *e = malloc(sizeof *e + n_ids * sizeof(int32_t) + n);
    if (e == NULL)
        return; /* the cache is an optimisation: skip it */
    e->hash = h;
    e->len = (uint32_t)n;
    e->n_ids = (uint32_t)n_ids;
    memcpy(e->ids, ids, n_ids * sizeof(int32_t));
    memcpy((char *)(e->ids + n_ids), w, n);
    pthread_mutex_lock(&s->lock);
    if (s->slots == NULL)
        s->slots = calloc(BPE_CACHE_SHARD_SLOTS, sizeof *s->slots);
    if (s->slots == NULL) {
        pthread_mutex_unlock(&s->lock);
        free(e);
        return;
    }
    if (s->count + 1 > BPE_CACHE_SHARD_SLOTS * 3 / 4)
        cache_shard_clear(s);
    size_t i = (size_t)(h >> 8) & (BPE_CACHE_SHARD_SLOTS - 1);
    for (;; i = (i + 1) & (BPE_CACHE_SHARD_SLOTS - 1)) {
        bpe_cache_entry *o = s->slots[i];
        if (o == NULL)
            break;
        if (o->hash == h && o->len == n && memcmp((const char *)(o->ids + o->n_ids), w, n) == 0) {
            free(e); /* another thread put it meanwhile */
            e = NULL;
            break;
        }
    }
    if (e != NULL) {
        s->slots[i] = e;
        s->count++;
    }
    pthread_mutex_unlock(&s->lock);
}

