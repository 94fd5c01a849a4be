/* A cache of built tokenizers: see tokenizer_cache.h. */
#include "tokenizer_cache.h"
#include "errmsg.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

struct sy_tok_ref {
    sy_tok_cache *cache;
    struct sy_tok_ref *next;
    sy_tok_key key;
    sy_tok_free_fn free_fn;
    void *tokenizer; /* NULL while building */
    size_t refs;
    uint64_t released_at; /* cache tick of the last release: the oldest unused entry goes first */
};

struct sy_tok_cache {
    pthread_mutex_t lock;
    pthread_cond_t built; /* signalled when a build ends, either way */
    struct sy_tok_ref *entries;
    size_t keep_unused;
    uint64_t tick;
    uint64_t builds, hits;
};

static sy_tok_cache default_cache = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .built = PTHREAD_COND_INITIALIZER,
    .keep_unused = SY_TOK_CACHE_DEFAULT_KEEP,
};

sy_tok_cache *sy_tok_cache_new(size_t keep_unused) {
    sy_tok_cache *c = calloc(1, sizeof *c);
    if (c == NULL) return NULL;
    if (pthread_mutex_init(&c->lock, NULL) != 0) {
        free(c);
        return NULL;
    }
    if (pthread_cond_init(&c->built, NULL) != 0) {
        pthread_mutex_destroy(&c->lock);
        free(c);
        return NULL;
    }
    c->keep_unused = keep_unused;
    return c;
}

sy_tok_cache *sy_tok_cache_default(void) { return &default_cache; }

/* Unlinks unused entries beyond `keep` (oldest release first) into *victims. Called with the lock held. */
static void evict_locked(sy_tok_cache *c, size_t keep, struct sy_tok_ref **victims) {
    for (;;) {
        size_t unused = 0;
        struct sy_tok_ref **oldest = NULL;
        for (struct sy_tok_ref **p = &c->entries; *p != NULL; p = &(*p)->next) {
            if ((*p)->refs != 0 || (*p)->tokenizer == NULL) continue;
            unused++;
            if (oldest == NULL || (*p)->released_at < (*oldest)->released_at) oldest = p;
        }
        if (unused <= keep || oldest == NULL) return;
        struct sy_tok_ref *e = *oldest;
        *oldest = e->next;
        e->next = *victims;
        *victims = e;
    }
}

/* Frees evicted entries; outside the lock, as freeing a large tokenizer takes a while. */
static void free_victims(struct sy_tok_ref *victims) {
    while (victims != NULL) {
        struct sy_tok_ref *next = victims->next;
        victims->free_fn(victims->tokenizer);
        free(victims);
        victims = next;
    }
}

static void trim(sy_tok_cache *c, size_t keep, bool set_bound) {
    struct sy_tok_ref *victims = NULL;
    pthread_mutex_lock(&c->lock);
    if (set_bound) c->keep_unused = keep;
    evict_locked(c, keep, &victims);
    pthread_mutex_unlock(&c->lock);
    free_victims(victims);
}

void sy_tok_cache_set_keep(sy_tok_cache *c, size_t keep_unused) { trim(c, keep_unused, true); }

void sy_tok_cache_drop_unused(sy_tok_cache *c) { trim(c, 0, false); }

void sy_tok_cache_free(sy_tok_cache *c) {
    if (c == NULL || c == &default_cache) return;
    sy_tok_cache_drop_unused(c);
    /* held entries would be a caller's bug: they are left to their holders rather than freed under them */
    pthread_cond_destroy(&c->built);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

static struct sy_tok_ref *find_locked(sy_tok_cache *c, const sy_tok_key *key, sy_tok_free_fn free_fn) {
    for (struct sy_tok_ref *e = c->entries; e != NULL; e = e->next)
        if (e->key.lo == key->lo && e->key.hi == key->hi && e->free_fn == free_fn) return e;
    return NULL;
}

sy_tok_ref *sy_tok_cache_acquire(sy_tok_cache *c, const sy_tok_key *key, sy_tok_build_fn build,
                                 sy_tok_free_fn free_fn, void *ctx, bool *hit, char *err, size_t err_size) {
    if (hit) *hit = false;
    pthread_mutex_lock(&c->lock);
    struct sy_tok_ref *e;
    /* a build in progress: wait for it, then look again (a failed build leaves no entry, so we build) */
    while ((e = find_locked(c, key, free_fn)) != NULL && e->tokenizer == NULL) pthread_cond_wait(&c->built, &c->lock);
    if (e != NULL) {
        e->refs++;
        c->hits++;
        pthread_mutex_unlock(&c->lock);
        if (hit) *hit = true;
        return e;
    }
    e = calloc(1, sizeof *e);
    if (e == NULL) {
        pthread_mutex_unlock(&c->lock);
        sy_errmsg(err, err_size, "out of memory");
        return NULL;
    }
    e->cache = c;
    e->key = *key;
    e->free_fn = free_fn;
    e->refs = 1;
    e->next = c->entries;
    c->entries = e; /* a placeholder: same-key acquires wait on it */
    pthread_mutex_unlock(&c->lock);

    void *tokenizer = build(ctx, err, err_size);

    pthread_mutex_lock(&c->lock);
    if (tokenizer == NULL) {
        for (struct sy_tok_ref **p = &c->entries; *p != NULL; p = &(*p)->next)
            if (*p == e) {
                *p = e->next;
                break;
            }
        free(e);
        e = NULL;
    } else {
        e->tokenizer = tokenizer;
        c->builds++;
    }
    pthread_cond_broadcast(&c->built);
    pthread_mutex_unlock(&c->lock);
    return e;
}

void *sy_tok_ref_get(const sy_tok_ref *r) { return r->tokenizer; }

void sy_tok_cache_release(sy_tok_ref *r) {
    if (r == NULL) return;
    sy_tok_cache *c = r->cache;
    struct sy_tok_ref *victims = NULL;
    pthread_mutex_lock(&c->lock);
    if (r->refs > 0 && --r->refs == 0) {
        r->released_at = ++c->tick;
        evict_locked(c, c->keep_unused, &victims);
    }
    pthread_mutex_unlock(&c->lock);
    free_victims(victims);
}

sy_tok_cache_stats sy_tok_cache_get_stats(sy_tok_cache *c) {
    sy_tok_cache_stats s = {0};
    pthread_mutex_lock(&c->lock);
    for (const struct sy_tok_ref *e = c->entries; e != NULL; e = e->next) {
        if (e->tokenizer == NULL) continue;
        s.entries++;
        if (e->refs == 0) s.unused++;
    }
    s.builds = c->builds;
    s.hits = c->hits;
    pthread_mutex_unlock(&c->lock);
    return s;
}

/* ---- keys ---- */

static sy_tok_key digest(XXH3_state_t *st) {
    XXH128_hash_t h = XXH3_128bits_digest(st);
    return (sy_tok_key){.lo = h.low64, .hi = h.high64};
}

static void hash_u64(XXH3_state_t *st, uint64_t v) { XXH3_128bits_update(st, &v, sizeof v); }

/* Length first, so that consecutive strings cannot run into each other. */
static void hash_text(XXH3_state_t *st, const void *s, size_t len) {
    hash_u64(st, (uint64_t)len);
    XXH3_128bits_update(st, s, len);
}

sy_tok_key sy_tok_key_bytes(const char *domain, const void *data, size_t len) {
    XXH3_state_t st;
    XXH3_128bits_reset(&st);
    hash_text(&st, domain, strlen(domain));
    hash_text(&st, data, len);
    return digest(&st);
}

/* A string array. GGUF stores one as consecutive records (u64 length, bytes) and the reader hands out pointers
 * into the file, so the range from the first record's length to the last record's end holds every length and
 * every byte: hashing it at once is ~50x faster than a hash update per string. The element-wise form covers a
 * reader that copies (the range would then not lie in the file). */
static void hash_string_array(XXH3_state_t *st, const sy_gguf *g, uint64_t kv, uint64_t count) {
    const char *first, *last;
    size_t first_len, last_len;
    if (count == 0 || !sy_gguf_array_string(g, kv, 0, &first, &first_len) ||
        !sy_gguf_array_string(g, kv, count - 1, &last, &last_len))
        return;
    uintptr_t base = (uintptr_t)sy_gguf_file_data(g), end = base + (uintptr_t)sy_gguf_file_size(g);
    uintptr_t lo = (uintptr_t)first - 8, hi = (uintptr_t)last + last_len;
    if (base != 0 && (uintptr_t)first >= base + 8 && (uintptr_t)last >= (uintptr_t)first && hi <= end &&
        (hi - lo) / 8 >= count) {
        XXH3_128bits_update(st, (const void *)lo, hi - lo);
        return;
    }
    for (uint64_t i = 0; i < count; i++) {
        const char *s;
        size_t len;
        if (sy_gguf_array_string(g, kv, i, &s, &len)) hash_text(st, s, len);
    }
}

/* A fixed-size element array, element by element as 64-bit values (the reader gives no raw access to them; for
 * a 150k-entry token_type array this is about half of a key's cost, ~0.5 ms). */
static bool hash_value_array(XXH3_state_t *st, const sy_gguf *g, uint64_t kv, sy_gguf_type type, uint64_t count) {
    uint64_t buf[1024];
    bool is_float = type == SY_GGUF_FLOAT32 || type == SY_GGUF_FLOAT64, is_bool = type == SY_GGUF_BOOL;
    for (uint64_t at = 0; at < count;) {
        size_t n = count - at < 1024 ? (size_t)(count - at) : 1024;
        bool ok = true;
        if (is_float) {
            for (size_t i = 0; i < n && ok; i++) {
                double d;
                ok = sy_gguf_array_float(g, kv, at + i, &d);
                memcpy(&buf[i], &d, sizeof d);
            }
        } else if (is_bool) {
            for (size_t i = 0; i < n && ok; i++) {
                bool b;
                ok = sy_gguf_array_bool(g, kv, at + i, &b);
                buf[i] = b;
            }
        } else {
            for (size_t i = 0; i < n && ok; i++) {
                int64_t v;
                if (sy_gguf_array_int(g, kv, at + i, &v)) buf[i] = (uint64_t)v;
                else ok = sy_gguf_array_uint(g, kv, at + i, &buf[i]); /* a uint64 above INT64_MAX */
            }
        }
        if (!ok) return false;
        XXH3_128bits_update(st, buf, n * sizeof buf[0]);
        at += n;
    }
    return true;
}

static bool hash_kv(XXH3_state_t *st, const sy_gguf *g, uint64_t kv) {
    sy_gguf_type type = sy_gguf_kv_type(g, kv);
    hash_u64(st, (uint64_t)type);
    switch (type) {
    case SY_GGUF_STRING: {
        const char *s;
        size_t len;
        if (!sy_gguf_kv_string(g, kv, &s, &len)) return false;
        hash_text(st, s, len);
        return true;
    }
    case SY_GGUF_ARRAY: {
        sy_gguf_type elem;
        uint64_t count;
        if (!sy_gguf_kv_array(g, kv, &elem, &count)) return false;
        hash_u64(st, (uint64_t)elem);
        hash_u64(st, count);
        if (elem == SY_GGUF_STRING) {
            hash_string_array(st, g, kv, count);
            return true;
        }
        return elem != SY_GGUF_ARRAY && hash_value_array(st, g, kv, elem, count);
    }
    case SY_GGUF_FLOAT32:
    case SY_GGUF_FLOAT64: {
        double d;
        uint64_t v;
        if (!sy_gguf_kv_float(g, kv, &d)) return false;
        memcpy(&v, &d, sizeof v);
        hash_u64(st, v);
        return true;
    }
    case SY_GGUF_BOOL: {
        bool b;
        if (!sy_gguf_kv_bool(g, kv, &b)) return false;
        hash_u64(st, b);
        return true;
    }
    default: {
        int64_t s;
        uint64_t v;
        if (sy_gguf_kv_int(g, kv, &s)) v = (uint64_t)s;
        else if (!sy_gguf_kv_uint(g, kv, &v)) return false;
        hash_u64(st, v);
        return true;
    }
    }
}

bool sy_tok_key_gguf(const sy_gguf *g, const char *domain, const char *const *skip, size_t n_skip, sy_tok_key *out) {
    static const char prefix[] = "tokenizer.ggml.";
    XXH3_state_t st;
    XXH3_128bits_reset(&st);
    hash_text(&st, domain, strlen(domain));
    uint64_t n_kv = sy_gguf_kv_count(g);
    for (uint64_t kv = 0; kv < n_kv; kv++) {
        const char *key = sy_gguf_kv_key(g, kv);
        if (key == NULL || strncmp(key, prefix, sizeof prefix - 1) != 0) continue;
        bool skipped = false;
        for (size_t i = 0; i < n_skip && !skipped; i++) skipped = strcmp(key, skip[i]) == 0;
        if (skipped) continue;
        hash_text(&st, key, strlen(key));
        if (!hash_kv(&st, g, kv)) return false;
    }
    *out = digest(&st);
    return true;
}

bool sy_tok_map_file(const char *path, size_t max_bytes, const char **data, size_t *len, char *err,
                     size_t err_size) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        sy_errmsg(err, err_size, "%s: cannot open: %s", path, strerror(errno));
        return false;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        sy_errmsg(err, err_size, "%s: not a regular file", path);
        close(fd);
        return false;
    }
    if ((uint64_t)st.st_size > max_bytes) {
        sy_errmsg(err, err_size, "%s: larger than %zu bytes", path, max_bytes);
        close(fd);
        return false;
    }
    *len = (size_t)st.st_size;
    if (*len == 0) { /* mmap refuses an empty range */
        *data = "";
        close(fd);
        return true;
    }
    void *m = mmap(NULL, *len, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        sy_errmsg(err, err_size, "%s: cannot map: %s", path, strerror(errno));
        return false;
    }
    *data = m;
    return true;
}

void sy_tok_unmap_file(const char *data, size_t len) {
    if (len > 0) munmap((void *)(uintptr_t)data, len);
}
