/* A disk-backed KV store for the CPU transformer core (transformer.h's sy_tf_kv_store_ops): keys and values live
 * in F16 files, one K file and one V file per layer, placed round-robin over the directories given (layer l in
 * dirs[l % n]), each in a fresh subdirectory "switchyard-kv-XXXXXX" made for this cache.
 *
 * Layout: positions come in groups of SY_KV_GROUP (64) tokens. A group is a slot of every layer file at the same
 * offset (group g, position i of it: row g * 64 + i, kv_dim F16 values). Sequences own groups through a page
 * table, so a fork shares its source's groups (copy on write when either side writes into a shared one), and
 * truncation returns whole groups to a free list. The files grow one group at a time with posix_fallocate, whose
 * result is checked, so a full disk is an error message from decode ("No space left on device"), never a SIGBUS
 * from touching an unbacked page; the mappings (MAP_SHARED, read-write) reserve the address space of
 * max_tokens positions up front and are only touched below the files' allocated size.
 *
 * The attention reads F32: groups are widened into a resident tile buffer (buffer_mb, shared by all layers,
 * least recently used tiles evicted) when a layer's reads are prepared, and rows written by decode go into their
 * tile at once; a group without a tile (the buffer full of the current layer's tiles) is widened on the fly into
 * a per-thread scratch. Either way a reader sees exactly the F16 values the files hold.
 *
 * Threading: as sy_tf_kv_store_ops says (reads concurrent, the rest serial); sy_kv_cache_memory and
 * sy_kv_cache_stats may run on any thread.
 */
#ifndef SY_KV_CACHE_H
#define SY_KV_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "transformer.h"

#define SY_KV_GROUP 64u         /* positions per group: the unit of file growth and sharing */
#define SY_KV_MAX_DIRS 64u
#define SY_KV_MAX_TOKENS (1u << 26) /* most positions one cache may hold, all sequences together */

typedef struct sy_kv_cache sy_kv_cache;

typedef struct sy_kv_cache_options {
    const char *dirs;    /* comma-separated directories (each must exist and be writable) */
    uint32_t max_tokens; /* positions of all sequences together (rounded up to whole groups) */
    uint32_t buffer_mb;  /* resident F32 tile buffer; 0: widen every read on the fly */
    bool keep_files;     /* leave the files (and their directories) behind on destroy */
} sy_kv_cache_options;

/* A cache for n_layer layers of kv_dim values per position, read from up to n_threads threads. NULL with one
 * line in err (naming the directory or file) on failure. */
sy_kv_cache *sy_kv_cache_create(const sy_kv_cache_options *opt, uint32_t n_layer, uint32_t kv_dim,
                                uint32_t n_threads, char *err, size_t err_size);
/* Unmaps and closes; removes the files and directories unless keep_files. Every sequence must be freed. */
void sy_kv_cache_destroy(sy_kv_cache *c);

/* The store's operations, for sy_tf_set_kv_store(model, sy_kv_cache_ops(), cache). */
const sy_tf_kv_store_ops *sy_kv_cache_ops(void);

/* Adds to *out: kv_bytes (groups held by sequences, K and V of every layer), mapped_bytes (the files' allocated
 * size) and resident_bytes (tile buffer, scratch, page tables). any-thread. */
void sy_kv_cache_memory(const sy_kv_cache *c, sy_tf_memory_info *out);
/* What sy_kv_cache_memory reports for a cache just created with these dimensions (no group in a file yet, no
 * tile used): the per-thread scratch. For estimates before a load. */
uint64_t sy_kv_cache_resident_at_create(uint32_t kv_dim, uint32_t n_threads);

typedef struct sy_kv_cache_stats {
    uint32_t groups_in_use; /* held by at least one sequence */
    uint32_t groups_in_files;
    uint32_t max_groups;
    uint32_t tiles;         /* slots of the tile buffer */
    uint64_t tile_hits, tile_misses; /* reads served from the buffer / widened on the fly */
} sy_kv_cache_stats;
void sy_kv_cache_stats_get(const sy_kv_cache *c, sy_kv_cache_stats *out);

/* Path of a layer's K (kind 0) or V (kind 1) file; NULL when out of range. Valid until destroy. */
const char *sy_kv_cache_file_path(const sy_kv_cache *c, uint32_t layer, int kind);

#endif
