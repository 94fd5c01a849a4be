/* The BPE tokenizer's word cache: the ids of words it merged before. Internal to the bpe_*.c files.
 *
 * Why: merging a word costs a priority queue over its symbols and a table lookup per candidate pair, and text
 * repeats its words. A tokenizer is shared by every thread that tokenizes with it (sy_bpe is immutable to its
 * users), so the cache is the one mutable part: it is split into shards, each with its own lock, by the
 * word's hash, so that concurrent tokenize calls rarely wait on each other. A full shard is emptied rather
 * than evicted entry by entry: simple, and a working set that fits keeps hitting.
 *
 * Words longer than BPE_CACHE_MAX_WORD bytes are not cached (they rarely repeat). A word's ids are at most
 * 2 * BPE_CACHE_MAX_WORD (byte fallback gives up to two ids per byte); the cache stores no more than that.
 */
#ifndef SY_BPE_CACHE_H
#define SY_BPE_CACHE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define BPE_CACHE_SHARDS 16
#define BPE_CACHE_SHARD_SLOTS 4096 /* power of two */
#define BPE_CACHE_MAX_WORD 64      /* longer words are merged every time: they rarely repeat */

typedef struct bpe_cache_entry {
    uint64_t hash;
    uint32_t len;
    uint32_t n_ids;
    int32_t ids[]; /* n_ids ids, then len bytes of the word */
} bpe_cache_entry;

typedef struct bpe_cache_shard {
    pthread_mutex_t lock;
    bpe_cache_entry **slots; /* BPE_CACHE_SHARD_SLOTS, allocated on first insert */
    size_t count;
} bpe_cache_shard;

typedef struct bpe_cache {
    bpe_cache_shard shards[BPE_CACHE_SHARDS];
    bool ready; /* initialized (a zeroed cache is not, and destroying it does nothing) */
} bpe_cache;

void bpe_cache_init(bpe_cache *c);
void bpe_cache_destroy(bpe_cache *c);
/* Copies the cached ids of word w[0..n) (hash h) into out (capacity 2 * BPE_CACHE_MAX_WORD); returns their count,
 * or -1 when the word is not cached. */
int bpe_cache_get(const bpe_cache *c, const unsigned char *w, size_t n, uint64_t h, int32_t *out);
/* Caches the ids of a word. Best effort: out of memory, it caches nothing. const because a tokenizer that is
 * const to its users still caches (the shard locks make that safe). */
void bpe_cache_put(const bpe_cache *c, const unsigned char *w, size_t n, uint64_t h, const int32_t *ids,
                   size_t n_ids);

#endif
