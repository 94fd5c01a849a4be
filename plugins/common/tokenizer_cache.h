/* A cache of built tokenizers, shared by the models of one plugin.
 *
 * Building a 150k-token BPE tokenizer takes tens of milliseconds, most of a model's load time, yet the models a
 * host swaps between usually share one vocabulary (quantizations or fine-tunes of one base, or the same model
 * unloaded and loaded again). A load therefore hashes what determines its tokenizer (a few hundred
 * microseconds: XXH3-128 over the metadata or file bytes) and takes the built one from here when it exists.
 *
 * Entries are reference counted. One that no model holds any more stays cached, up to `keep_unused` of them
 * (the most recently released), so that a swap back finds it. Failed builds are not cached.
 *
 * What is cached must be immutable once built, as every holder uses it concurrently: model-specific touches
 * (end-of-generation ids, BOS/EOS templates from a model's own config) belong in the holder's own layer.
 *
 * Threading: every function may run on any thread. Concurrent acquires of one key build it once; the others wait
 * for that build. Builds of different keys run in parallel (the lock is not held while building or freeing).
 *
 * Each plugin .so links its own copy of this file (sy_common is a static library with hidden symbols), so
 * sy_tok_cache_default() is per plugin. */
#ifndef SY_TOKENIZER_CACHE_H
#define SY_TOKENIZER_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf.h"

/* Unused entries the default cache keeps. */
#define SY_TOK_CACHE_DEFAULT_KEEP 2

/* A 128-bit content hash naming a tokenizer. */
typedef struct sy_tok_key {
    uint64_t lo, hi;
} sy_tok_key;

typedef struct sy_tok_cache sy_tok_cache;
/* One holder's reference to a cached tokenizer. */
typedef struct sy_tok_ref sy_tok_ref;

/* Builds the tokenizer on a miss: NULL with one line in err on failure. */
typedef void *(*sy_tok_build_fn)(void *ctx, char *err, size_t err_size);
typedef void (*sy_tok_free_fn)(void *tokenizer);

/* A cache keeping at most keep_unused entries that nobody holds. NULL when out of memory. */
sy_tok_cache *sy_tok_cache_new(size_t keep_unused);
/* Frees the cache and its unused entries. Every reference must have been released. */
void sy_tok_cache_free(sy_tok_cache *c);
/* The plugin-wide cache (SY_TOK_CACHE_DEFAULT_KEEP unused entries); never freed, see sy_tok_cache_drop_unused. */
sy_tok_cache *sy_tok_cache_default(void);
/* Changes the bound; entries beyond it are freed now. */
void sy_tok_cache_set_keep(sy_tok_cache *c, size_t keep_unused);
/* Frees every entry nobody holds (a plugin's deinit calls this so that nothing outlives the plugin). */
void sy_tok_cache_drop_unused(sy_tok_cache *c);

/* The tokenizer of `key`: the cached one, or build(ctx) on a miss. Entries match on key and free_fn (the kind
 * of object). *hit (may be NULL) says whether the tokenizer was shared rather than built by this call. NULL with
 * one line in err when the build fails or memory runs out. */
sy_tok_ref *sy_tok_cache_acquire(sy_tok_cache *c, const sy_tok_key *key, sy_tok_build_fn build,
                                 sy_tok_free_fn free_fn, void *ctx, bool *hit, char *err, size_t err_size);
/* The tokenizer a reference holds (what build returned). */
void *sy_tok_ref_get(const sy_tok_ref *r);
/* Gives a reference back; NULL is ignored. The entry stays cached while the bound allows. */
void sy_tok_cache_release(sy_tok_ref *r);

typedef struct sy_tok_cache_stats {
    size_t entries; /* built entries, held or not */
    size_t unused;  /* of which nobody holds */
    uint64_t builds;
    uint64_t hits;
} sy_tok_cache_stats;
sy_tok_cache_stats sy_tok_cache_get_stats(sy_tok_cache *c);

/* ---- keys ---- */

/* Hash of `domain` (what kind of tokenizer, and its format version) and the bytes. */
sy_tok_key sy_tok_key_bytes(const char *domain, const void *data, size_t len);

/* Hash of `domain` and every GGUF metadata entry whose key starts with "tokenizer.ggml." (key, type and value,
 * in file order), except the keys listed in skip (exact names; the caller applies those itself). Scores, token
 * types and the like are hashed by value; string arrays as the bytes the file stores them in. False when some
 * value cannot be hashed (an array of arrays): the caller then builds without the cache. */
bool sy_tok_key_gguf(const sy_gguf *g, const char *domain, const char *const *skip, size_t n_skip, sy_tok_key *out);

/* Maps a whole regular file (at most max_bytes) read-only, for hashing it and, on a miss, building from it
 * without a copy. False with "path: reason" in err. Unmap with sy_tok_unmap_file. */
bool sy_tok_map_file(const char *path, size_t max_bytes, const char **data, size_t *len, char *err,
                     size_t err_size);
void sy_tok_unmap_file(const char *data, size_t len);

#endif
