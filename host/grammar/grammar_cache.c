/* Compiled grammars by their source text: a small LRU so the API compiles a schema once however many requests
 * send it. Keyed by a 64-bit FNV-1a hash of the kind, the options and the text; the text is stored and compared
 * too, so a collision costs a compile, never a wrong grammar. */
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "grammar_internal.h"

typedef struct centry {
    uint64_t hash;
    char *text; /* kind byte, options, then the source */
    size_t len;
    sy_grammar *g;
    uint64_t used;
} centry;

struct sy_grammar_cache {
    pthread_mutex_t mu;
    centry *e;
    size_t n, cap;
    uint64_t tick, hits, misses;
};

sy_grammar_cache *sy_grammar_cache_create(size_t capacity) {
    if (capacity == 0) capacity = 1;
    sy_grammar_cache *c = calloc(1, sizeof *c);
    if (c == NULL) return NULL;
    c->e = calloc(capacity, sizeof *c->e);
    if (c->e == NULL) {
        free(c);
        return NULL;
    }
    c->cap = capacity;
    pthread_mutex_init(&c->mu, NULL);
    return c;
}

void sy_grammar_cache_free(sy_grammar_cache *c) {
    if (c == NULL) return;
    for (size_t i = 0; i < c->n; i++) {
        free(c->e[i].text);
        sy_grammar_free(c->e[i].g);
    }
    free(c->e);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

void sy_grammar_cache_stats(sy_grammar_cache *c, uint64_t *hits, uint64_t *misses) {
    pthread_mutex_lock(&c->mu);
    if (hits) *hits = c->hits;
    if (misses) *misses = c->misses;
    pthread_mutex_unlock(&c->mu);
}

static uint64_t fnv1a(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    return h;
}

/* The key: kind, options, text. */
static char *make_key(char kind, const sy_schema_options *o, const char *text, size_t len, size_t *klen) {
    char head[8] = {kind, o ? (char)('0' + o->whitespace) : '-', o ? (o->additional_properties_default ? 'y' : 'n') : '-', ':'};
    char *k = malloc(len + 4);
    if (k == NULL) return NULL;
    memcpy(k, head, 4);
    if (len) memcpy(k + 4, text, len);
    *klen = len + 4;
    return k;
}

static sy_grammar *lookup_or_build(sy_grammar_cache *c, char kind, const sy_schema_options *o, const char *text,
                                   size_t len, char *err, size_t err_cap) {
    size_t klen;
    char *key = make_key(kind, o, text, len, &klen);
    if (key == NULL) {
        sy_gerr(err, err_cap, "out of memory");
        return NULL;
    }
    uint64_t h = fnv1a(key, klen);
    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; i < c->n; i++)
        if (c->e[i].hash == h && c->e[i].len == klen && memcmp(c->e[i].text, key, klen) == 0) {
            c->e[i].used = ++c->tick;
            c->hits++;
            sy_grammar *g = sy_grammar_ref(c->e[i].g);
            pthread_mutex_unlock(&c->mu);
            free(key);
            return g;
        }
    c->misses++;
    pthread_mutex_unlock(&c->mu);

    /* compile outside the lock: a slow schema does not stall the others */
    sy_grammar *g = NULL;
    if (kind == 'g') {
        g = sy_grammar_compile(text, len, NULL, err, err_cap);
    } else {
        char *gbnf = NULL;
        int rc;
        if (text == NULL || len == 0) {
            rc = sy_json_object_gbnf(o, &gbnf, err, err_cap);
        } else {
            cJSON *schema = cJSON_ParseWithLength(text, len);
            if (schema == NULL) {
                sy_gerr(err, err_cap, "schema is not valid JSON");
                free(key);
                return NULL;
            }
            rc = sy_json_schema_to_gbnf(schema, o, &gbnf, err, err_cap);
            cJSON_Delete(schema);
        }
        if (rc == 0) g = sy_grammar_compile(gbnf, strlen(gbnf), NULL, err, err_cap);
        free(gbnf);
    }
    if (g == NULL) {
        free(key);
        return NULL;
    }
    pthread_mutex_lock(&c->mu);
    size_t slot = c->n;
    if (c->n == c->cap) { /* evict the least recently used */
        slot = 0;
        for (size_t i = 1; i < c->n; i++)
            if (c->e[i].used < c->e[slot].used) slot = i;
        free(c->e[slot].text);
        sy_grammar_free(c->e[slot].g);
    } else {
        c->n++;
    }
    c->e[slot] = (centry){h, key, klen, sy_grammar_ref(g), ++c->tick};
    pthread_mutex_unlock(&c->mu);
    return g;
}

sy_grammar *sy_grammar_cache_schema(sy_grammar_cache *c, const char *schema, size_t len, const sy_schema_options *o,
                                    char *err, size_t err_cap) {
    sy_schema_options d = sy_schema_defaults();
    return lookup_or_build(c, 's', o ? o : &d, schema, schema ? len : 0, err, err_cap);
}

sy_grammar *sy_grammar_cache_gbnf(sy_grammar_cache *c, const char *gbnf, size_t len, char *err, size_t err_cap) {
    if (gbnf == NULL) {
        sy_gerr(err, err_cap, "no grammar text");
        return NULL;
    }
    return lookup_or_build(c, 'g', NULL, gbnf, len, err, err_cap);
}
