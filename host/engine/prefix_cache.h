/*
 * The host prefix cache's index: a radix tree over token sequences. Each entry is a token sequence with an opaque
 * value (for the scheduler: a parked engine sequence holding that KV). Given a prompt, it finds an entry sharing
 * the longest common prefix with it, so a new request can fork that KV instead of prefilling it.
 *
 * Edges carry runs of tokens (a compressed trie), split where sequences diverge; every node counts the entries in
 * its subtree, so a lookup stops at the deepest point the prompt reaches and takes any entry below it.
 *
 * Not thread-safe: the owner (one scheduler's engine loop) serialises every call.
 */
#ifndef SY_HOST_PREFIX_CACHE_H
#define SY_HOST_PREFIX_CACHE_H

#include <stddef.h>
#include <stdint.h>

typedef struct sy_prefix_cache sy_prefix_cache;
typedef struct sy_prefix_entry sy_prefix_entry;

sy_prefix_cache *sy_prefix_cache_create(void);
/* Frees the index (not the values: the owner frees those, e.g. after walking its own list). */
void sy_prefix_cache_free(sy_prefix_cache *pc);

/* Adds an entry for tokens[0..n) (copied) with `value`. Equal token sequences may be added more than once. */
sy_prefix_entry *sy_prefix_cache_insert(sy_prefix_cache *pc, const int32_t *tokens, uint32_t n, void *value);
void sy_prefix_cache_remove(sy_prefix_cache *pc, sy_prefix_entry *entry);

/* The length of the longest common prefix between tokens[0..n) and any entry, and (in *entry, may be NULL) one
 * entry that shares it; 0 and NULL when the cache is empty. Among entries sharing the same prefix it prefers the
 * shortest path down the tree (the least KV to copy past the match). */
uint32_t sy_prefix_cache_longest(const sy_prefix_cache *pc, const int32_t *tokens, uint32_t n,
                                 sy_prefix_entry **entry);

void *sy_prefix_entry_value(const sy_prefix_entry *entry);
uint32_t sy_prefix_entry_length(const sy_prefix_entry *entry);
/* The entry's tokens (owned by the cache, valid until it is removed). */
const int32_t *sy_prefix_entry_tokens(const sy_prefix_entry *entry);

size_t sy_prefix_cache_count(const sy_prefix_cache *pc);

#endif
