/* The disk-backed KV store: see kv_cache.h. */
#include "kv_cache.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "errmsg.h"
#include "sy_kernels.h"

#define NO_TILE (-1)
/* Address space all mappings of one cache may reserve (the x86-64 user space is 128 TiB). */
#define MAX_RESERVED_BYTES (1ull << 45)

typedef struct kv_file {
    char *path;
    int fd;
    uint8_t *map; /* reserved for max_groups groups; backed up to groups_in_files */
} kv_file;

typedef struct kv_seq {
    uint32_t *groups; /* page table: the group holding positions [i*64, (i+1)*64) */
    uint32_t n_groups, cap_groups;
} kv_seq;

typedef struct tile {
    uint32_t layer, group; /* group UINT32_MAX: empty slot */
    uint64_t valid;        /* bit i: row i holds the file's values */
    uint64_t stamp;        /* clock of the last prepare that used it */
    float *k, *v;          /* [SY_KV_GROUP][kv_dim] */
} tile;

struct sy_kv_cache {
    uint32_t n_layer, kv_dim, n_threads;
    size_t row_bytes, group_bytes; /* of one file */
    bool keep_files;

    char **made_dirs; /* subdirectories created, removed on destroy */
    uint32_t n_made_dirs;
    kv_file *files; /* [n_layer][2]: K, V */

    uint32_t max_groups, groups_in_files;
    uint32_t table_cap;  /* groups the three tables below have room for */
    uint32_t *refs;      /* [groups_in_files] sequences holding each group */
    uint32_t *free_list; /* groups with refs 0 */
    uint32_t n_free;
    int32_t *tile_of;    /* [groups_in_files][n_layer] -> tile slot or NO_TILE */

    tile *tiles;
    uint32_t n_tiles, n_tiles_used;
    float *tile_memory;
    uint64_t clock;
    float *scratch; /* [n_threads][2][SY_KV_GROUP * kv_dim] */

    _Atomic uint64_t groups_in_use, groups_in_files_shown, tiles_used_shown, table_bytes, tile_hits, tile_misses;
};

static uint64_t all_layers_group_bytes(const sy_kv_cache *c) { return 2ull * c->n_layer * c->group_bytes; }

/* ---- files ---- */

static void close_file(kv_file *f, size_t reserved, bool remove_it) {
    if (f->map != NULL && f->map != MAP_FAILED) munmap(f->map, reserved);
    if (f->fd >= 0) close(f->fd);
    if (remove_it && f->path) unlink(f->path);
    free(f->path);
    f->path = NULL;
    f->fd = -1;
    f->map = NULL;
}

/* Splits the comma list, makes one subdirectory in each directory a layer goes to, and opens and maps the files. */
static bool open_files(sy_kv_cache *c, const char *dirs, size_t reserved, char *err, size_t err_size) {
    char *list = strdup(dirs ? dirs : "");
    char *names[SY_KV_MAX_DIRS];
    uint32_t n_dirs = 0;
    if (list == NULL) {
        sy_errmsg(err, err_size, "out of memory");
        return false;
    }
    for (char *save = NULL, *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (n_dirs == SY_KV_MAX_DIRS) {
            sy_errmsg(err, err_size, "kv_cache_dir: more than %u directories", SY_KV_MAX_DIRS);
            free(list);
            return false;
        }
        names[n_dirs++] = tok;
    }
    if (n_dirs == 0) {
        sy_errmsg(err, err_size, "kv_cache_dir: no directory given");
        free(list);
        return false;
    }
    uint32_t used = n_dirs < c->n_layer ? n_dirs : c->n_layer;
    c->made_dirs = calloc(used, sizeof *c->made_dirs);
    bool ok = c->made_dirs != NULL;
    if (!ok) sy_errmsg(err, err_size, "out of memory");
    for (uint32_t d = 0; ok && d < used; d++) {
        struct stat st;
        if (stat(names[d], &st) != 0 || !S_ISDIR(st.st_mode)) {
            sy_errmsg(err, err_size, "kv_cache_dir %s: not a directory", names[d]);
            ok = false;
            break;
        }
        size_t len = strlen(names[d]) + sizeof "/switchyard-kv-XXXXXX";
        char *tmpl = malloc(len);
        if (tmpl == NULL) {
            sy_errmsg(err, err_size, "out of memory");
            ok = false;
            break;
        }
        snprintf(tmpl, len, "%s/switchyard-kv-XXXXXX", names[d]);
        if (mkdtemp(tmpl) == NULL) {
            sy_errmsg(err, err_size, "kv_cache_dir %s: cannot create a directory in it: %s", names[d],
                      strerror(errno));
            free(tmpl);
            ok = false;
            break;
        }
        c->made_dirs[c->n_made_dirs++] = tmpl;
    }
    for (uint32_t l = 0; ok && l < c->n_layer; l++) {
        for (int kind = 0; kind < 2; kind++) {
            kv_file *f = &c->files[2 * l + (uint32_t)kind];
            const char *dir = c->made_dirs[l % used];
            size_t len = strlen(dir) + 32;
            f->path = malloc(len);
            if (f->path == NULL) {
                sy_errmsg(err, err_size, "out of memory");
                ok = false;
                break;
            }
            snprintf(f->path, len, "%s/layer-%03u.%c.f16", dir, l, kind ? 'v' : 'k');
            f->fd = open(f->path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
            if (f->fd < 0) {
                sy_errmsg(err, err_size, "%s: cannot create: %s", f->path, strerror(errno));
                ok = false;
                break;
            }
            /* The whole capacity is reserved now; only the part below the allocated file size is ever touched. */
            f->map = mmap(NULL, reserved, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, f->fd, 0);
            if (f->map == MAP_FAILED) {
                f->map = NULL;
                sy_errmsg(err, err_size, "%s: cannot map %zu bytes: %s", f->path, reserved, strerror(errno));
                ok = false;
                break;
            }
        }
    }
    free(list);
    return ok;
}

/* One more group at the end of every file. false with err (the disk is full, ...): every file keeps its size. */
static bool grow_files(sy_kv_cache *c, char *err, size_t err_size) {
    if (c->groups_in_files == c->max_groups) {
        sy_errmsg(err, err_size, "the disk KV cache is full (kv_max_tokens = %llu positions in use)",
                  (unsigned long long)c->max_groups * SY_KV_GROUP);
        return false;
    }
    uint32_t g = c->groups_in_files;
    if (g == c->table_cap) { /* bookkeeping first, so that a failure below leaves nothing half-grown */
        uint32_t cap = c->table_cap < 8 ? 16 : 2 * c->table_cap;
        if (cap > c->max_groups) cap = c->max_groups;
        uint32_t *refs = realloc(c->refs, (size_t)cap * sizeof *refs);
        if (refs) c->refs = refs;
        uint32_t *free_list = refs ? realloc(c->free_list, (size_t)cap * sizeof *free_list) : NULL;
        if (free_list) c->free_list = free_list;
        int32_t *tile_of = free_list ? realloc(c->tile_of, (size_t)cap * c->n_layer * sizeof *tile_of) : NULL;
        if (tile_of == NULL) {
            sy_errmsg(err, err_size, "out of memory for the KV page tables");
            return false;
        }
        c->tile_of = tile_of;
        c->table_cap = cap;
        atomic_store(&c->table_bytes, (uint64_t)cap * (2 * sizeof(uint32_t) + c->n_layer * sizeof(int32_t)));
    }
    off_t old_size = (off_t)((uint64_t)g * c->group_bytes);
    for (uint32_t i = 0; i < 2 * c->n_layer; i++) {
        int r = posix_fallocate(c->files[i].fd, old_size, (off_t)c->group_bytes);
        if (r != 0) {
            sy_errmsg(err, err_size, "%s: cannot grow to %llu bytes: %s", c->files[i].path,
                      (unsigned long long)old_size + c->group_bytes, strerror(r));
            for (uint32_t j = 0; j <= i; j++) {
                int undone = ftruncate(c->files[j].fd, old_size); /* if not, an extra group never touched */
                (void)undone;
            }
            return false;
        }
    }
    c->refs[g] = 0;
    for (uint32_t l = 0; l < c->n_layer; l++) c->tile_of[(size_t)g * c->n_layer + l] = NO_TILE;
    c->free_list[c->n_free++] = g;
    c->groups_in_files = g + 1;
    atomic_store(&c->groups_in_files_shown, g + 1);
    return true;
}

/* ---- groups ---- */

static bool alloc_group(sy_kv_cache *c, uint32_t *out, char *err, size_t err_size) {
    if (c->n_free == 0 && !grow_files(c, err, err_size)) return false;
    uint32_t g = c->free_list[--c->n_free];
    c->refs[g] = 1;
    atomic_fetch_add(&c->groups_in_use, 1);
    *out = g;
    return true;
}

static void drop_tile(sy_kv_cache *c, uint32_t slot) {
    tile *t = &c->tiles[slot];
    if (t->group == UINT32_MAX) return;
    c->tile_of[(size_t)t->group * c->n_layer + t->layer] = NO_TILE;
    t->group = UINT32_MAX;
    t->valid = 0;
}

static void release_group(sy_kv_cache *c, uint32_t g) {
    if (--c->refs[g] > 0) return;
    for (uint32_t l = 0; l < c->n_layer; l++) {
        int32_t slot = c->tile_of[(size_t)g * c->n_layer + l];
        if (slot != NO_TILE) drop_tile(c, (uint32_t)slot);
    }
    c->free_list[c->n_free++] = g;
    atomic_fetch_sub(&c->groups_in_use, 1);
}

static uint8_t *group_row(const sy_kv_cache *c, uint32_t layer, int kind, uint32_t group, uint32_t row) {
    return c->files[2 * layer + (uint32_t)kind].map + (size_t)group * c->group_bytes + (size_t)row * c->row_bytes;
}

/* ---- tiles ---- */

/* A slot for (layer, group): a free one, else the least recently used one not used since `clock` began. */
static int32_t take_tile(sy_kv_cache *c, uint32_t layer, uint32_t group, bool may_evict) {
    uint32_t slot = UINT32_MAX;
    if (c->n_tiles_used < c->n_tiles) {
        slot = c->n_tiles_used++;
        atomic_store(&c->tiles_used_shown, c->n_tiles_used);
    } else {
        for (uint32_t i = 0; i < c->n_tiles; i++) {
            if (c->tiles[i].group == UINT32_MAX) {
                slot = i;
                break;
            }
        }
        if (slot == UINT32_MAX && may_evict) {
            uint64_t oldest = c->clock;
            for (uint32_t i = 0; i < c->n_tiles; i++) {
                if (c->tiles[i].stamp < oldest) {
                    oldest = c->tiles[i].stamp;
                    slot = i;
                }
            }
        }
        if (slot == UINT32_MAX) return NO_TILE;
        drop_tile(c, slot);
    }
    tile *t = &c->tiles[slot];
    t->layer = layer;
    t->group = group;
    t->valid = 0;
    t->stamp = c->clock;
    c->tile_of[(size_t)group * c->n_layer + layer] = (int32_t)slot;
    return (int32_t)slot;
}

static void widen_row(const sy_kv_cache *c, const uint8_t *src, uint32_t col, uint32_t n_cols, float *dst) {
    (void)c;
    uint16_t h[512];
    for (uint32_t done = 0; done < n_cols;) {
        uint32_t n = n_cols - done < 512 ? n_cols - done : 512;
        memcpy(h, src + 2 * ((size_t)col + done), 2 * (size_t)n);
        sy_f16_to_f32_row(h, dst + done, n);
        done += n;
    }
}

/* Rows of `want` (bit mask) that the tile lacks, read from the files. */
static void fill_tile(sy_kv_cache *c, tile *t, uint64_t want) {
    uint64_t missing = want & ~t->valid;
    for (uint32_t row = 0; missing != 0; row++, missing >>= 1) {
        if (!(missing & 1)) continue;
        widen_row(c, group_row(c, t->layer, 0, t->group, row), 0, c->kv_dim, t->k + (size_t)row * c->kv_dim);
        widen_row(c, group_row(c, t->layer, 1, t->group, row), 0, c->kv_dim, t->v + (size_t)row * c->kv_dim);
    }
    t->valid |= want;
}

static uint64_t rows_mask(uint32_t n) { return n >= 64 ? ~0ull : ((1ull << n) - 1); }

/* ---- the store operations ---- */

static void *kv_seq_create(void *store) {
    (void)store;
    return calloc(1, sizeof(kv_seq));
}

static void kv_seq_free(void *store, void *kv) {
    sy_kv_cache *c = store;
    kv_seq *s = kv;
    for (uint32_t i = 0; i < s->n_groups; i++) release_group(c, s->groups[i]);
    free(s->groups);
    free(s);
}

static bool table_room(kv_seq *s, uint32_t n_groups) {
    if (n_groups <= s->cap_groups) return true;
    uint32_t cap = s->cap_groups ? s->cap_groups * 2 : 4;
    if (cap < n_groups) cap = n_groups;
    uint32_t *g = realloc(s->groups, (size_t)cap * sizeof *g);
    if (g == NULL) return false;
    s->groups = g;
    s->cap_groups = cap;
    return true;
}

static bool kv_reserve(void *store, void *kv, uint32_t keep, uint32_t need, char *err, size_t err_size) {
    sy_kv_cache *c = store;
    kv_seq *s = kv;
    if (need <= keep) return true;
    uint32_t first = keep / SY_KV_GROUP, end = (uint32_t)(((uint64_t)need + SY_KV_GROUP - 1) / SY_KV_GROUP);
    if (!table_room(s, end)) {
        sy_errmsg(err, err_size, "out of memory for a KV page table");
        return false;
    }
    for (uint32_t i = first; i < end; i++) {
        if (i < s->n_groups) {
            uint32_t g = s->groups[i];
            if (c->refs[g] == 1) continue;
            /* shared with a fork: this sequence gets its own copy before writing into it */
            uint32_t copy;
            if (!alloc_group(c, &copy, err, err_size)) return false;
            for (uint32_t l = 0; l < c->n_layer; l++)
                for (int kind = 0; kind < 2; kind++)
                    memcpy(group_row(c, l, kind, copy, 0), group_row(c, l, kind, g, 0), c->group_bytes);
            release_group(c, g);
            s->groups[i] = copy;
        } else {
            if (!alloc_group(c, &s->groups[i], err, err_size)) return false;
            s->n_groups = i + 1;
        }
    }
    return true;
}

static void kv_write(void *store, void *kv, uint32_t layer, uint32_t pos, const float *k, const float *v) {
    sy_kv_cache *c = store;
    kv_seq *s = kv;
    uint32_t g = s->groups[pos / SY_KV_GROUP], row = pos % SY_KV_GROUP;
    uint16_t *dk = (uint16_t *)(void *)group_row(c, layer, 0, g, row);
    uint16_t *dv = (uint16_t *)(void *)group_row(c, layer, 1, g, row);
    sy_f32_to_f16_row(k, dk, c->kv_dim);
    sy_f32_to_f16_row(v, dv, c->kv_dim);
    /* a tile of this group gets the row too, as the file holds it (rounded to F16) */
    int32_t slot = c->tile_of[(size_t)g * c->n_layer + layer];
    if (slot == NO_TILE && c->n_tiles_used < c->n_tiles) slot = take_tile(c, layer, g, false);
    if (slot != NO_TILE) {
        tile *t = &c->tiles[slot];
        sy_f16_to_f32_row(dk, t->k + (size_t)row * c->kv_dim, c->kv_dim);
        sy_f16_to_f32_row(dv, t->v + (size_t)row * c->kv_dim, c->kv_dim);
        t->valid |= 1ull << row;
    }
}

static void kv_prepare(void *store, uint32_t layer, void *const *kvs, const uint32_t *n_pos, size_t n_kvs) {
    sy_kv_cache *c = store;
    if (c->n_tiles == 0) return;
    c->clock++;
    for (size_t i = 0; i < n_kvs; i++) {
        const kv_seq *s = kvs[i];
        for (uint32_t gi = 0; (uint64_t)gi * SY_KV_GROUP < n_pos[i]; gi++) {
            uint32_t g = s->groups[gi];
            uint32_t rows = n_pos[i] - gi * SY_KV_GROUP;
            int32_t slot = c->tile_of[(size_t)g * c->n_layer + layer];
            if (slot == NO_TILE) slot = take_tile(c, layer, g, true);
            if (slot == NO_TILE) continue; /* the buffer holds this layer's other tiles: widened on the fly */
            c->tiles[slot].stamp = c->clock;
            fill_tile(c, &c->tiles[slot], rows_mask(rows));
        }
    }
}

static void kv_read(void *store, const void *kv, uint32_t layer, uint32_t p0, uint32_t n, uint32_t col,
                    uint32_t n_cols, size_t thread_index, sy_tf_kv_view *out) {
    sy_kv_cache *c = store;
    const kv_seq *s = kv;
    uint32_t g = s->groups[p0 / SY_KV_GROUP], row = p0 % SY_KV_GROUP;
    if (n > SY_KV_GROUP - row) n = SY_KV_GROUP - row;
    int32_t slot = c->tile_of[(size_t)g * c->n_layer + layer];
    uint64_t want = rows_mask(row + n) & ~rows_mask(row);
    if (slot != NO_TILE && (c->tiles[slot].valid & want) == want) {
        const tile *t = &c->tiles[slot];
        size_t at = (size_t)row * c->kv_dim + col;
        *out = (sy_tf_kv_view){t->k + at, t->v + at, c->kv_dim, n};
        atomic_fetch_add_explicit(&c->tile_hits, 1, memory_order_relaxed);
        return;
    }
    atomic_fetch_add_explicit(&c->tile_misses, 1, memory_order_relaxed);
    if (thread_index >= c->n_threads) thread_index = 0; /* cannot happen with a pool of n_threads */
    float *k = c->scratch + thread_index * 2 * (size_t)SY_KV_GROUP * c->kv_dim, *v = k + SY_KV_GROUP * c->kv_dim;
    for (uint32_t i = 0; i < n; i++) {
        widen_row(c, group_row(c, layer, 0, g, row + i), col, n_cols, k + (size_t)i * n_cols);
        widen_row(c, group_row(c, layer, 1, g, row + i), col, n_cols, v + (size_t)i * n_cols);
    }
    *out = (sy_tf_kv_view){k, v, n_cols, n};
}

static bool kv_copy_prefix(void *store, void *dst, const void *src, uint32_t n, char *err, size_t err_size) {
    sy_kv_cache *c = store;
    kv_seq *d = dst;
    const kv_seq *s = src;
    uint32_t n_groups = (uint32_t)(((uint64_t)n + SY_KV_GROUP - 1) / SY_KV_GROUP);
    if (!table_room(d, n_groups)) {
        sy_errmsg(err, err_size, "out of memory for a KV page table");
        return false;
    }
    /* shared, not copied: the first write into a shared group copies it (kv_reserve) */
    for (uint32_t i = 0; i < n_groups; i++) {
        d->groups[i] = s->groups[i];
        c->refs[s->groups[i]]++;
    }
    d->n_groups = n_groups;
    return true;
}

static void kv_truncate(void *store, void *kv, uint32_t n) {
    sy_kv_cache *c = store;
    kv_seq *s = kv;
    uint32_t keep = (uint32_t)(((uint64_t)n + SY_KV_GROUP - 1) / SY_KV_GROUP);
    while (s->n_groups > keep) release_group(c, s->groups[--s->n_groups]);
}

static void kv_memory(const void *store, sy_tf_memory_info *out) { sy_kv_cache_memory(store, out); }

static const sy_tf_kv_store_ops kv_cache_ops = {
    .seq_create = kv_seq_create,
    .seq_free = kv_seq_free,
    .reserve = kv_reserve,
    .write = kv_write,
    .prepare = kv_prepare,
    .read = kv_read,
    .copy_prefix = kv_copy_prefix,
    .truncate = kv_truncate,
    .memory = kv_memory,
};

const sy_tf_kv_store_ops *sy_kv_cache_ops(void) { return &kv_cache_ops; }

/* ---- create, destroy, facts ---- */

sy_kv_cache *sy_kv_cache_create(const sy_kv_cache_options *opt, uint32_t n_layer, uint32_t kv_dim,
                                uint32_t n_threads, char *err, size_t err_size) {
    if (opt == NULL || n_layer == 0 || n_layer > 4096 || kv_dim == 0 || kv_dim > (1u << 20) || n_threads == 0 ||
        n_threads > 4096) {
        sy_errmsg(err, err_size, "disk KV cache: bad dimensions (%u layers, %u values per position)", n_layer,
                  kv_dim);
        return NULL;
    }
    if (opt->max_tokens == 0 || opt->max_tokens > SY_KV_MAX_TOKENS) {
        sy_errmsg(err, err_size, "kv_max_tokens %u out of range (1 .. %u)", opt->max_tokens, SY_KV_MAX_TOKENS);
        return NULL;
    }
    sy_kv_cache *c = calloc(1, sizeof *c);
    if (c == NULL) {
        sy_errmsg(err, err_size, "out of memory");
        return NULL;
    }
    c->n_layer = n_layer;
    c->kv_dim = kv_dim;
    c->n_threads = n_threads;
    c->keep_files = opt->keep_files;
    c->row_bytes = (size_t)kv_dim * sizeof(uint16_t);
    c->group_bytes = SY_KV_GROUP * c->row_bytes;
    c->max_groups = (uint32_t)(((uint64_t)opt->max_tokens + SY_KV_GROUP - 1) / SY_KV_GROUP);
    uint64_t reserved = (uint64_t)c->max_groups * c->group_bytes;
    if (reserved * 2 * n_layer > MAX_RESERVED_BYTES) {
        sy_errmsg(err, err_size, "kv_max_tokens %u: %llu bytes of KV files exceed what can be mapped",
                  opt->max_tokens, (unsigned long long)(reserved * 2 * n_layer));
        free(c);
        return NULL;
    }
    c->files = calloc(2 * (size_t)n_layer, sizeof *c->files);
    if (c->files == NULL) {
        sy_errmsg(err, err_size, "out of memory");
        free(c);
        return NULL;
    }
    for (uint32_t i = 0; i < 2 * n_layer; i++) c->files[i].fd = -1;

    size_t tile_floats = 2 * (size_t)SY_KV_GROUP * kv_dim;
    uint64_t buffer = (uint64_t)opt->buffer_mb << 20;
    c->n_tiles = (uint32_t)(buffer / (tile_floats * sizeof(float)) < UINT32_MAX / 2
                                ? buffer / (tile_floats * sizeof(float))
                                : UINT32_MAX / 2);
    c->scratch = calloc((size_t)n_threads * tile_floats, sizeof(float));
    /* calloc of this size maps fresh zero pages, so tiles never used cost no resident memory (nor are counted) */
    c->tile_memory = c->n_tiles ? calloc((size_t)c->n_tiles * tile_floats, sizeof(float)) : NULL;
    c->tiles = c->n_tiles ? calloc(c->n_tiles, sizeof *c->tiles) : NULL;
    if (c->scratch == NULL || (c->n_tiles && (c->tile_memory == NULL || c->tiles == NULL))) {
        sy_errmsg(err, err_size, "out of memory for a KV tile buffer of %u MB", opt->buffer_mb);
        sy_kv_cache_destroy(c);
        return NULL;
    }
    for (uint32_t i = 0; i < c->n_tiles; i++) {
        c->tiles[i].group = UINT32_MAX;
        c->tiles[i].k = c->tile_memory + (size_t)i * tile_floats;
        c->tiles[i].v = c->tiles[i].k + SY_KV_GROUP * (size_t)kv_dim;
    }
    if (!open_files(c, opt->dirs, (size_t)reserved, err, err_size)) {
        c->keep_files = false; /* a failed create leaves nothing behind */
        sy_kv_cache_destroy(c);
        return NULL;
    }
    return c;
}

void sy_kv_cache_destroy(sy_kv_cache *c) {
    if (c == NULL) return;
    size_t reserved = (size_t)c->max_groups * c->group_bytes;
    if (c->files)
        for (uint32_t i = 0; i < 2 * c->n_layer; i++) close_file(&c->files[i], reserved, !c->keep_files);
    for (uint32_t d = 0; d < c->n_made_dirs; d++) {
        if (!c->keep_files) rmdir(c->made_dirs[d]);
        free(c->made_dirs[d]);
    }
    free(c->made_dirs);
    free(c->files);
    free(c->refs);
    free(c->free_list);
    free(c->tile_of);
    free(c->tiles);
    free(c->tile_memory);
    free(c->scratch);
    free(c);
}

void sy_kv_cache_memory(const sy_kv_cache *c, sy_tf_memory_info *out) {
    sy_kv_cache *m = (sy_kv_cache *)c;
    uint64_t per_group = all_layers_group_bytes(c);
    out->kv_bytes += atomic_load(&m->groups_in_use) * per_group;
    out->mapped_bytes += atomic_load(&m->groups_in_files_shown) * per_group;
    size_t tile_floats = 2 * (size_t)SY_KV_GROUP * c->kv_dim;
    out->resident_bytes += (atomic_load(&m->tiles_used_shown) + c->n_threads) * tile_floats * sizeof(float) +
                           atomic_load(&m->table_bytes);
}

uint64_t sy_kv_cache_resident_at_create(uint32_t kv_dim, uint32_t n_threads) {
    return (uint64_t)n_threads * 2 * SY_KV_GROUP * kv_dim * sizeof(float); /* as sy_kv_cache_memory counts it */
}

void sy_kv_cache_stats_get(const sy_kv_cache *c, sy_kv_cache_stats *out) {
    sy_kv_cache *m = (sy_kv_cache *)c;
    out->groups_in_use = (uint32_t)atomic_load(&m->groups_in_use);
    out->groups_in_files = (uint32_t)atomic_load(&m->groups_in_files_shown);
    out->max_groups = c->max_groups;
    out->tiles = c->n_tiles;
    out->tile_hits = atomic_load(&m->tile_hits);
    out->tile_misses = atomic_load(&m->tile_misses);
}

const char *sy_kv_cache_file_path(const sy_kv_cache *c, uint32_t layer, int kind) {
    if (c == NULL || layer >= c->n_layer || kind < 0 || kind > 1) return NULL;
    return c->files[2 * layer + (uint32_t)kind].path;
}
