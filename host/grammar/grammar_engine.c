/* Matching: vocabularies (a byte trie of the token texts), the per-grammar automaton memo, states, masks and
 * lazy triggers.
 *
 * A grammar position is a stack of element positions, llama.cpp's design: the top is the terminal (class or
 * token reference) to match next, the entries below are where to continue when the rule above ends. A state is
 * a set of such stacks plus a partial UTF-8 character (a token may end inside one). Stacks are interned as
 * linked nodes (position, parent) so equal stacks are one id, and sets of stacks are interned too; each set has
 * a 256-entry transition row filled in lazily, which makes the memo a byte automaton built on demand. A mask is
 * a walk of the vocabulary trie through that automaton (a dead transition skips the whole subtree), and the
 * mask of each set is cached: in a JSON string the state after most tokens is the set it started from, so most
 * steps are a copy. Everything is bounded: live stacks per code point, stack depth, expansion work per step,
 * interned sets and nodes (the memo is flushed and rebuilt from the states' own copies when it grows past its
 * soft limits; one step that would need more than the hard limits fails with SY_GRAMMAR_ELIMIT). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/utf8.h"
#include "grammar_internal.h"

#define NODE_SOFT (1u << 20)
#define NODE_HARD (1u << 22)
#define SET_SOFT 8192u
#define SET_HARD 32768u
#define EXPAND_WORK_MAX 200000u       /* expansion steps for one code point */
/* Expansion (and merging) steps for one call: a mask walks a code point per trie node, so the budget grows with
 * the vocabulary; it bounds the time one step can take on a grammar as ambiguous as stacked repetitions. */
#define CALL_WORK_BASE 4000000u
#define CALL_WORK_PER_TRIE_NODE 64u
#define MASK_CACHE_BYTES (32u << 20)  /* cached masks per memo */

#define TR_UNKNOWN (-2)
#define TR_DEAD (-1)

/* ---- vocabulary ------------------------------------------------------------------------------------------ */

struct sy_grammar_vocab {
    uint64_t uid;
    uint32_t n_tokens;
    size_t words;
    uint8_t *kind;
    uint32_t *off, *len; /* token bytes in `bytes` */
    uint8_t *bytes;
    uint32_t *sorted; /* token ids by bytes, then id */
    /* trie over the NORMAL non-empty tokens, nodes in preorder; node 0 is the root */
    uint32_t n_nodes;
    uint8_t *nbyte;
    uint16_t *ndepth;
    uint32_t *nend;   /* preorder index after the node's subtree */
    int32_t *ntok;    /* a token ending here, or -1 */
    int32_t *same;    /* per token: next token with the same bytes, or -1 */
    uint32_t max_len;
    uint32_t *normal_mask; /* NORMAL tokens (what a negated token reference allows) */
    uint32_t *eog_mask;
};

static atomic_uint_fast64_t vocab_uid_counter = 1;

static const sy_grammar_vocab *cmp_vocab; /* qsort context: set under the build, which is single-threaded per
                                             call; guarded by a mutex since two builds may run at once */
static pthread_mutex_t cmp_mu = PTHREAD_MUTEX_INITIALIZER;

static int cmp_tokens(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    const sy_grammar_vocab *v = cmp_vocab;
    uint32_t lx = v->len[x], ly = v->len[y], l = lx < ly ? lx : ly;
    int c = l ? memcmp(v->bytes + v->off[x], v->bytes + v->off[y], l) : 0;
    if (c) return c;
    if (lx != ly) return lx < ly ? -1 : 1;
    return x < y ? -1 : x > y;
}

void sy_grammar_vocab_free(sy_grammar_vocab *v) {
    if (v == NULL) return;
    free(v->kind);
    free(v->off);
    free(v->len);
    free(v->bytes);
    free(v->sorted);
    free(v->nbyte);
    free(v->ndepth);
    free(v->nend);
    free(v->ntok);
    free(v->same);
    free(v->normal_mask);
    free(v->eog_mask);
    free(v);
}

uint32_t sy_grammar_vocab_size(const sy_grammar_vocab *v) { return v->n_tokens; }
size_t sy_grammar_vocab_mask_words(const sy_grammar_vocab *v) { return v->words; }

sy_grammar_vocab *sy_grammar_vocab_create(uint32_t n_tokens, sy_grammar_token_fn fn, void *user, char *err,
                                          size_t err_cap) {
    if (fn == NULL || n_tokens == 0 || n_tokens > (uint32_t)INT32_MAX) {
        sy_gerr(err, err_cap, "vocabulary: need 1 to %d tokens and a token callback", INT32_MAX);
        return NULL;
    }
    sy_grammar_vocab *v = calloc(1, sizeof *v);
    if (v == NULL) goto oom;
    v->uid = atomic_fetch_add(&vocab_uid_counter, 1);
    v->n_tokens = n_tokens;
    v->words = ((size_t)n_tokens + 31) / 32;
    v->kind = malloc(n_tokens);
    v->off = malloc((size_t)n_tokens * sizeof *v->off);
    v->len = malloc((size_t)n_tokens * sizeof *v->len);
    v->same = malloc((size_t)n_tokens * sizeof *v->same);
    v->sorted = malloc((size_t)n_tokens * sizeof *v->sorted);
    v->normal_mask = calloc(v->words, sizeof *v->normal_mask);
    v->eog_mask = calloc(v->words, sizeof *v->eog_mask);
    if (!v->kind || !v->off || !v->len || !v->same || !v->sorted || !v->normal_mask || !v->eog_mask) goto oom;
    size_t cap = 1 << 16, used = 0;
    v->bytes = malloc(cap);
    if (v->bytes == NULL) goto oom;
    for (uint32_t i = 0; i < n_tokens; i++) {
        const uint8_t *b = NULL;
        size_t n = 0;
        uint32_t kind = 0;
        if (fn(user, i, &b, &n, &kind) != 0) {
            sy_gerr(err, err_cap, "vocabulary: token %u could not be read", i);
            goto fail;
        }
        if (kind > SY_GRAMMAR_TOKEN_EOG || (n > 0 && b == NULL) || n > 65535) {
            sy_gerr(err, err_cap, "vocabulary: token %u has a bad kind (%u) or length (%zu)", i, kind, n);
            goto fail;
        }
        if (used + n > UINT32_MAX) {
            sy_gerr(err, err_cap, "vocabulary: token texts exceed 4 GiB");
            goto fail;
        }
        if (used + n > cap) {
            while (used + n > cap) cap *= 2;
            uint8_t *nb = realloc(v->bytes, cap);
            if (nb == NULL) goto oom;
            v->bytes = nb;
        }
        if (n) memcpy(v->bytes + used, b, n);
        v->off[i] = (uint32_t)used;
        v->len[i] = (uint32_t)n;
        v->kind[i] = (uint8_t)kind;
        v->same[i] = -1;
        v->sorted[i] = i;
        used += n;
        if (kind == SY_GRAMMAR_TOKEN_NORMAL) v->normal_mask[i / 32] |= 1u << (i % 32);
        if (kind == SY_GRAMMAR_TOKEN_EOG) v->eog_mask[i / 32] |= 1u << (i % 32);
    }
    pthread_mutex_lock(&cmp_mu);
    cmp_vocab = v;
    qsort(v->sorted, n_tokens, sizeof *v->sorted, cmp_tokens);
    pthread_mutex_unlock(&cmp_mu);

    /* trie: at most one node per byte of the normal tokens, plus the root */
    size_t max_nodes = 1;
    for (uint32_t i = 0; i < n_tokens; i++)
        if (v->kind[i] == SY_GRAMMAR_TOKEN_NORMAL) max_nodes += v->len[i];
    if (max_nodes > UINT32_MAX) {
        sy_gerr(err, err_cap, "vocabulary: too many token bytes");
        goto fail;
    }
    v->nbyte = malloc(max_nodes);
    v->ndepth = malloc(max_nodes * sizeof *v->ndepth);
    v->nend = malloc(max_nodes * sizeof *v->nend);
    v->ntok = malloc(max_nodes * sizeof *v->ntok);
    uint32_t *path = malloc(65537 * sizeof *path);
    if (!v->nbyte || !v->ndepth || !v->nend || !v->ntok || !path) {
        free(path);
        goto oom;
    }
    uint32_t n = 1;
    v->nbyte[0] = 0;
    v->ndepth[0] = 0;
    v->ntok[0] = -1;
    path[0] = 0;
    int32_t prev = -1;
    for (uint32_t k = 0; k < n_tokens; k++) {
        uint32_t t = v->sorted[k];
        if (v->kind[t] != SY_GRAMMAR_TOKEN_NORMAL || v->len[t] == 0) continue;
        const uint8_t *tb = v->bytes + v->off[t];
        uint32_t lcp = 0;
        if (prev >= 0) {
            const uint8_t *pb = v->bytes + v->off[prev];
            uint32_t pl = v->len[prev];
            while (lcp < pl && lcp < v->len[t] && pb[lcp] == tb[lcp]) lcp++;
        }
        for (uint32_t d = lcp + 1; d <= v->len[t]; d++) {
            v->nbyte[n] = tb[d - 1];
            v->ndepth[n] = (uint16_t)d;
            v->ntok[n] = -1;
            path[d] = n++;
        }
        uint32_t node = path[v->len[t]];
        if (v->ntok[node] < 0) {
            v->ntok[node] = (int32_t)t;
        } else {
            int32_t x = v->ntok[node];
            while (v->same[x] >= 0) x = v->same[x];
            v->same[x] = (int32_t)t;
        }
        if (v->len[t] > v->max_len) v->max_len = v->len[t];
        prev = (int32_t)t;
    }
    /* subtree ends: a node's subtree ends at the next node that is not deeper */
    uint32_t sp = 0;
    for (uint32_t i = 0; i < n; i++) {
        while (sp > 0 && v->ndepth[path[sp - 1]] >= v->ndepth[i]) v->nend[path[--sp]] = i;
        path[sp++] = i;
    }
    while (sp > 0) v->nend[path[--sp]] = n;
    free(path);
    v->n_nodes = n;
    return v;
oom:
    sy_gerr(err, err_cap, "vocabulary: out of memory");
fail:
    sy_grammar_vocab_free(v);
    return NULL;
}

int32_t sy_grammar_vocab_find(const sy_grammar_vocab *v, const char *text, size_t len) {
    size_t lo = 0, hi = v->n_tokens;
    while (lo < hi) { /* first token whose bytes are >= text */
        size_t mid = lo + (hi - lo) / 2;
        uint32_t t = v->sorted[mid];
        uint32_t tl = v->len[t], l = tl < len ? tl : (uint32_t)len;
        int c = l ? memcmp(v->bytes + v->off[t], text, l) : 0;
        if (c == 0) c = tl < len ? -1 : tl > len;
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    if (lo < v->n_tokens) {
        uint32_t t = v->sorted[lo];
        if (v->len[t] == len && (len == 0 || memcmp(v->bytes + v->off[t], text, len) == 0)) return (int32_t)t;
    }
    return -1;
}

/* ---- memo ------------------------------------------------------------------------------------------------ */

typedef struct gnode {
    uint32_t pos, parent, depth;
} gnode;

typedef struct gset {
    uint32_t off, n; /* node ids in pool, sorted */
    uint32_t partial;
    uint8_t can_end, has_token_top;
} gset;

typedef struct u32vec {
    uint32_t *p;
    size_t n, cap;
} u32vec;

struct gmemo {
    atomic_uint refs;
    const sy_grammar *g;
    uint64_t vocab_uid;
    pthread_mutex_t mu;
    uint32_t epoch;
    int32_t *text_ids; /* g->n_tok_texts resolved ids */
    gnode *nodes;
    uint32_t n_nodes, cap_nodes;
    uint32_t *node_map, node_map_cap;
    gset *sets;
    uint32_t n_sets, cap_sets;
    uint32_t *set_map, set_map_cap;
    uint32_t *pool;
    size_t pool_n, pool_cap;
    int32_t *trans;
    uint32_t **masks;
    uint32_t *mask_count;
    size_t mask_bytes;
    u32vec out, work, tmp;
    uint32_t expand_work;
    uint64_t call_work;     /* over the current locked call, reset when the memo's lock is taken */
    uint64_t call_work_max; /* CALL_WORK_BASE + CALL_WORK_PER_TRIE_NODE per node of the vocabulary's trie */
    char err[256];
};

/* partial UTF-8: bits 0-20 accumulated value, 21-22 continuation bytes still expected, 23-25 sequence length */
#define P_VAL(p) ((p) & 0x1FFFFFu)
#define P_REM(p) (((p) >> 21) & 3u)
#define P_LEN(p) (((p) >> 23) & 7u)
#define P_MAKE(v, rem, len) ((v) | ((uint32_t)(rem) << 21) | ((uint32_t)(len) << 23))

static bool vec_push(u32vec *v, uint32_t x) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 64;
        uint32_t *p = realloc(v->p, cap * sizeof *p);
        if (p == NULL) return false;
        v->p = p;
        v->cap = cap;
    }
    v->p[v->n++] = x;
    return true;
}

static inline uint32_t mix(uint64_t h) {
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return (uint32_t)h;
}

static void memo_clear(struct gmemo *m) {
    for (uint32_t i = 0; i < m->n_sets; i++) free(m->masks[i]);
    m->mask_bytes = 0;
    m->n_nodes = 1;
    m->nodes[0] = (gnode){UINT32_MAX, 0, 0};
    memset(m->node_map, 0, m->node_map_cap * sizeof *m->node_map);
    m->n_sets = 0;
    memset(m->set_map, 0, m->set_map_cap * sizeof *m->set_map);
    m->pool_n = 0;
    m->epoch++;
}

static void memo_destroy(struct gmemo *m) {
    if (m->masks)
        for (uint32_t i = 0; i < m->n_sets; i++) free(m->masks[i]);
    free(m->masks);
    free(m->mask_count);
    free(m->text_ids);
    free(m->nodes);
    free(m->node_map);
    free(m->sets);
    free(m->set_map);
    free(m->pool);
    free(m->trans);
    free(m->out.p);
    free(m->work.p);
    free(m->tmp.p);
    pthread_mutex_destroy(&m->mu);
    free(m);
}

void sy_gmemo_release(struct gmemo *m) {
    if (m && atomic_fetch_sub(&m->refs, 1) == 1) memo_destroy(m);
}

static struct gmemo *memo_create(const sy_grammar *g, const sy_grammar_vocab *v, char *err, size_t cap) {
    struct gmemo *m = calloc(1, sizeof *m);
    if (m == NULL) goto oom;
    atomic_init(&m->refs, 1);
    pthread_mutex_init(&m->mu, NULL);
    m->g = g;
    m->vocab_uid = v->uid;
    m->call_work_max = CALL_WORK_BASE + (uint64_t)CALL_WORK_PER_TRIE_NODE * v->n_nodes;
    m->text_ids = malloc((g->n_tok_texts + 1) * sizeof *m->text_ids);
    m->cap_nodes = 4096;
    m->nodes = malloc(m->cap_nodes * sizeof *m->nodes);
    m->node_map_cap = 8192;
    m->node_map = calloc(m->node_map_cap, sizeof *m->node_map);
    m->cap_sets = 256;
    m->sets = malloc(m->cap_sets * sizeof *m->sets);
    m->masks = calloc(m->cap_sets, sizeof *m->masks);
    m->mask_count = calloc(m->cap_sets, sizeof *m->mask_count);
    m->trans = malloc((size_t)m->cap_sets * 256 * sizeof *m->trans);
    m->set_map_cap = 512;
    m->set_map = calloc(m->set_map_cap, sizeof *m->set_map);
    if (!m->text_ids || !m->nodes || !m->node_map || !m->sets || !m->masks || !m->mask_count || !m->trans ||
        !m->set_map)
        goto oom;
    for (uint32_t i = 0; i < g->n_tok_texts; i++) {
        int32_t id = sy_grammar_vocab_find(v, g->tok_texts[i], g->tok_text_lens[i]);
        if (id < 0) {
            sy_gerr(err, cap, "token reference %s names no single token of the vocabulary", g->tok_texts[i]);
            memo_destroy(m);
            return NULL;
        }
        m->text_ids[i] = id;
    }
    m->n_nodes = 1;
    m->nodes[0] = (gnode){UINT32_MAX, 0, 0};
    return m;
oom:
    sy_gerr(err, cap, "out of memory");
    if (m) memo_destroy(m);
    return NULL;
}

/* Step failures carry their message in m->err. */
static int fail_limit(struct gmemo *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail_limit(struct gmemo *m, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->err, sizeof m->err, fmt, ap);
    va_end(ap);
    return SY_GRAMMAR_ELIMIT;
}

static const char *rule_of_pos(const sy_grammar *g, uint32_t pos) {
    uint32_t lo = 0, hi = g->n_rules; /* last rule starting at or before pos */
    while (hi - lo > 1) {
        uint32_t mid = (lo + hi) / 2;
        if (g->rule_start[mid] <= pos) lo = mid;
        else hi = mid;
    }
    return g->rule_names[lo];
}

/* The node (pos, parent), interned. Negative on a limit or allocation failure. */
static int64_t node_get(struct gmemo *m, uint32_t pos, uint32_t parent) {
    uint32_t h = mix(((uint64_t)pos << 32) | parent);
    uint32_t mask = m->node_map_cap - 1, j = h & mask;
    while (m->node_map[j]) {
        gnode *n = &m->nodes[m->node_map[j]];
        if (n->pos == pos && n->parent == parent) return m->node_map[j];
        j = (j + 1) & mask;
    }
    uint32_t depth = m->nodes[parent].depth + 1;
    if (depth > SY_GRAMMAR_MAX_DEPTH)
        return fail_limit(m, "grammar nesting deeper than %u in rule '%s'", SY_GRAMMAR_MAX_DEPTH,
                          rule_of_pos(m->g, pos));
    if (m->n_nodes >= NODE_HARD) return fail_limit(m, "grammar automaton grew past %u stack nodes", NODE_HARD);
    if (m->n_nodes == m->cap_nodes) {
        gnode *nn = realloc(m->nodes, (size_t)m->cap_nodes * 2 * sizeof *nn);
        if (nn == NULL) return SY_GRAMMAR_ENOMEM;
        m->nodes = nn;
        m->cap_nodes *= 2;
    }
    uint32_t id = m->n_nodes++;
    m->nodes[id] = (gnode){pos, parent, depth};
    if ((uint64_t)m->n_nodes * 2 > m->node_map_cap) {
        uint32_t cap = m->node_map_cap * 2;
        uint32_t *map = calloc(cap, sizeof *map);
        if (map == NULL) return SY_GRAMMAR_ENOMEM;
        for (uint32_t i = 1; i < m->n_nodes; i++) {
            uint32_t k = mix(((uint64_t)m->nodes[i].pos << 32) | m->nodes[i].parent) & (cap - 1);
            while (map[k]) k = (k + 1) & (cap - 1);
            map[k] = i;
        }
        free(m->node_map);
        m->node_map = map;
        m->node_map_cap = cap;
    } else {
        m->node_map[j] = id;
    }
    return id;
}

static uint32_t set_hash(const uint32_t *ids, size_t n, uint32_t partial) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ partial;
    for (size_t i = 0; i < n; i++) h = (h ^ ids[i]) * 0x100000001B3ull + (h >> 29);
    return mix(h ^ n);
}

/* The set of the (sorted, unique) node ids with `partial`, interned. Negative on failure. */
static int64_t set_get(struct gmemo *m, const uint32_t *ids, size_t n, uint32_t partial) {
    uint32_t h = set_hash(ids, n, partial), mask = m->set_map_cap - 1, j = h & mask;
    while (m->set_map[j]) {
        gset *s = &m->sets[m->set_map[j] - 1];
        if (s->n == n && s->partial == partial && memcmp(m->pool + s->off, ids, n * sizeof *ids) == 0)
            return m->set_map[j] - 1;
        j = (j + 1) & mask;
    }
    if (m->n_sets >= SET_HARD) return fail_limit(m, "grammar automaton grew past %u states", SET_HARD);
    if (m->n_sets == m->cap_sets) {
        uint32_t cap = m->cap_sets * 2;
        gset *ns = realloc(m->sets, cap * sizeof *ns);
        if (ns == NULL) return SY_GRAMMAR_ENOMEM;
        m->sets = ns;
        uint32_t **nm = realloc(m->masks, cap * sizeof *nm);
        if (nm == NULL) return SY_GRAMMAR_ENOMEM;
        m->masks = nm;
        uint32_t *nc = realloc(m->mask_count, cap * sizeof *nc);
        if (nc == NULL) return SY_GRAMMAR_ENOMEM;
        m->mask_count = nc;
        int32_t *nt = realloc(m->trans, (size_t)cap * 256 * sizeof *nt);
        if (nt == NULL) return SY_GRAMMAR_ENOMEM;
        m->trans = nt;
        m->cap_sets = cap;
    }
    if (m->pool_n + n > m->pool_cap) {
        size_t cap = m->pool_cap ? m->pool_cap : 4096;
        while (cap < m->pool_n + n) cap *= 2;
        uint32_t *np = realloc(m->pool, cap * sizeof *np);
        if (np == NULL) return SY_GRAMMAR_ENOMEM;
        m->pool = np;
        m->pool_cap = cap;
    }
    uint32_t id = m->n_sets++;
    memcpy(m->pool + m->pool_n, ids, n * sizeof *ids);
    gset *s = &m->sets[id];
    s->off = (uint32_t)m->pool_n;
    s->n = (uint32_t)n;
    s->partial = partial;
    s->can_end = 0;
    s->has_token_top = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] == 0) s->can_end = partial == 0;
        else if (ge_is_token(m->g->elems[m->nodes[ids[i]].pos].type)) s->has_token_top = 1;
    }
    m->pool_n += n;
    m->masks[id] = NULL;
    for (int b = 0; b < 256; b++) m->trans[(size_t)id * 256 + b] = TR_UNKNOWN;
    if ((uint64_t)m->n_sets * 2 > m->set_map_cap) {
        uint32_t cap = m->set_map_cap * 2;
        uint32_t *map = calloc(cap, sizeof *map);
        if (map == NULL) return SY_GRAMMAR_ENOMEM;
        for (uint32_t i = 0; i < m->n_sets; i++) {
            gset *t = &m->sets[i];
            uint32_t k = set_hash(m->pool + t->off, t->n, t->partial) & (cap - 1);
            while (map[k]) k = (k + 1) & (cap - 1);
            map[k] = i + 1;
        }
        free(m->set_map);
        m->set_map = map;
        m->set_map_cap = cap;
    } else {
        m->set_map[j] = id + 1;
    }
    return id;
}

/* Expands node `start` into stacks whose tops are terminals (or the empty stack), appending them to m->out:
 * a rule reference on top is replaced by each of its alternatives, with the rest of the caller's sequence
 * pushed below unless the reference ends it (so right recursion does not grow the stack). */
static int expand(struct gmemo *m, uint32_t start) {
    const sy_grammar *g = m->g;
    m->work.n = 0;
    if (!vec_push(&m->work, start)) return SY_GRAMMAR_ENOMEM;
    while (m->work.n > 0) {
        uint32_t id = m->work.p[--m->work.n];
        if (++m->expand_work > EXPAND_WORK_MAX)
            return fail_limit(m, "grammar expansion exceeded %u steps for one character (rule '%s')",
                              EXPAND_WORK_MAX, id ? rule_of_pos(g, m->nodes[id].pos) : "root");
        if (++m->call_work > m->call_work_max)
            return fail_limit(m, "grammar step exceeded %llu expansion steps (rule '%s'): the grammar is too ambiguous "
                              "here (stacked repetitions?)", (unsigned long long)m->call_work_max,
                              id ? rule_of_pos(g, m->nodes[id].pos) : "root");
        gnode n = m->nodes[id];
        if (id == 0 || g->elems[n.pos].type != GE_REF) {
            if (!vec_push(&m->out, id)) return SY_GRAMMAR_ENOMEM;
            continue;
        }
        uint32_t r = g->elems[n.pos].value, cont = n.parent;
        if (!ge_is_end(&g->elems[n.pos + 1])) {
            int64_t c = node_get(m, n.pos + 1, n.parent);
            if (c < 0) return (int)c;
            cont = (uint32_t)c;
        }
        for (uint32_t a = g->alt_off[r]; a < g->alt_off[r + 1]; a++) {
            uint32_t at = g->alts[a];
            uint32_t push_id = cont;
            if (!ge_is_end(&g->elems[at])) {
                int64_t c = node_get(m, at, cont);
                if (c < 0) return (int)c;
                push_id = (uint32_t)c;
            }
            if (!vec_push(&m->work, push_id)) return SY_GRAMMAR_ENOMEM;
        }
    }
    return 0;
}

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* m->out sorted and deduplicated, interned with `partial`. TR_DEAD when empty. */
static int64_t out_to_set(struct gmemo *m, uint32_t partial) {
    if (m->out.n == 0) return TR_DEAD;
    /* Merging costs a sort of every stack the expansions produced: it counts against the call's budget too, or an
     * ambiguous grammar (stacked repetitions) spends seconds sorting duplicates. */
    m->call_work += (uint64_t)m->out.n * 16u;
    if (m->call_work > m->call_work_max)
        return fail_limit(m, "grammar step exceeded %llu expansion steps while merging %zu stacks: the grammar is "
                          "too ambiguous here (stacked repetitions?)", (unsigned long long)m->call_work_max, m->out.n);
    qsort(m->out.p, m->out.n, sizeof *m->out.p, cmp_u32);
    size_t k = 1;
    for (size_t i = 1; i < m->out.n; i++)
        if (m->out.p[i] != m->out.p[k - 1]) m->out.p[k++] = m->out.p[i];
    m->out.n = k;
    if (k > SY_GRAMMAR_MAX_STACKS)
        return fail_limit(m, "grammar state explosion: %zu live stacks (limit %u), e.g. in rule '%s'", k,
                          SY_GRAMMAR_MAX_STACKS,
                          m->out.p[k - 1] ? rule_of_pos(m->g, m->nodes[m->out.p[k - 1]].pos) : "root");
    return set_get(m, m->out.p, k, partial);
}

/* Continue stack `id` past its top symbol: pop when the symbol ended its sequence, then expand. */
static int advance_past_top(struct gmemo *m, uint32_t id) {
    gnode n = m->nodes[id];
    uint32_t nx = m->g->next[n.pos], base = n.parent;
    if (!ge_is_end(&m->g->elems[nx])) {
        int64_t c = node_get(m, nx, n.parent);
        if (c < 0) return (int)c;
        base = (uint32_t)c;
    }
    return expand(m, base);
}

/* The set after code point cp from set s. */
static int64_t advance_cp(struct gmemo *m, uint32_t s, uint32_t cp) {
    m->out.n = 0;
    m->expand_work = 0;
    gset set = m->sets[s];
    for (uint32_t i = 0; i < set.n; i++) {
        uint32_t id = m->pool[set.off + i];
        if (id == 0) continue;
        const gelem *e = &m->g->elems[m->nodes[id].pos];
        if (!ge_is_class(e->type) || !sy_gclass_match(e, cp)) continue;
        int rc = advance_past_top(m, id);
        if (rc < 0) return rc;
    }
    return out_to_set(m, 0);
}

/* The code points a partial character can still become: up to two ranges (surrogates cut out). */
static int partial_ranges(uint32_t partial, uint32_t lo_hi[4]) {
    uint32_t rem = P_REM(partial), len = P_LEN(partial);
    uint32_t lo = P_VAL(partial) << (6 * rem), hi = lo | ((1u << (6 * rem)) - 1);
    static const uint32_t vmin[5] = {0, 0, 0x80, 0x800, 0x10000}, vmax[5] = {0, 0x7F, 0x7FF, 0xFFFF, 0x10FFFF};
    if (lo < vmin[len]) lo = vmin[len];
    if (hi > vmax[len]) hi = vmax[len];
    int n = 0;
    if (lo <= hi && lo <= 0xD7FF) {
        lo_hi[n++] = lo;
        lo_hi[n++] = hi < 0xD7FF ? hi : 0xD7FF;
    }
    if (lo <= hi && hi >= 0xE000) {
        lo_hi[n++] = lo > 0xE000 ? lo : 0xE000;
        lo_hi[n++] = hi;
    }
    return n / 2;
}

/* Keep the stacks of s that could match some completion of `partial`. */
static int64_t prune_partial(struct gmemo *m, uint32_t s, uint32_t partial) {
    uint32_t r[4];
    int nr = partial_ranges(partial, r);
    if (nr == 0) return TR_DEAD;
    m->out.n = 0;
    gset set = m->sets[s];
    for (uint32_t i = 0; i < set.n; i++) {
        uint32_t id = m->pool[set.off + i];
        if (id == 0) continue;
        const gelem *e = &m->g->elems[m->nodes[id].pos];
        if (!ge_is_class(e->type)) continue;
        bool ok = false;
        for (int k = 0; k < nr && !ok; k++) ok = sy_gclass_match_range(e, r[2 * k], r[2 * k + 1]);
        if (ok && !vec_push(&m->out, id)) return SY_GRAMMAR_ENOMEM;
    }
    if (m->out.n == 0) return TR_DEAD;
    return set_get(m, m->out.p, m->out.n, partial); /* already sorted: a subset of a sorted set */
}

static int64_t compute_trans(struct gmemo *m, uint32_t s, uint8_t b) {
    uint32_t partial = m->sets[s].partial;
    if (partial) {
        if ((b & 0xC0) != 0x80) return TR_DEAD;
        uint32_t rem = P_REM(partial) - 1, v = (P_VAL(partial) << 6) | (b & 0x3Fu), len = P_LEN(partial);
        uint32_t np = P_MAKE(v, rem, len), r[4];
        if (partial_ranges(np, r) == 0) return TR_DEAD; /* overlong, surrogate or out of range */
        if (rem == 0) return advance_cp(m, s, v);
        return prune_partial(m, s, np);
    }
    if (b < 0x80) return advance_cp(m, s, b);
    /* a lead byte keeps 5, 4 or 3 value bits; a stray continuation, C0, C1 or F5..FF starts nothing */
    uint32_t len = (uint32_t)sy_utf8_lead_length(b);
    if (len < 2) return TR_DEAD;
    return prune_partial(m, s, P_MAKE(b & (0x7Fu >> len), len - 1, len));
}

static inline int64_t trans(struct gmemo *m, uint32_t s, uint8_t b) {
    int32_t t = m->trans[(size_t)s * 256 + b];
    if (t != TR_UNKNOWN) return t;
    int64_t r = compute_trans(m, s, b);
    if (r >= TR_DEAD) m->trans[(size_t)s * 256 + b] = (int32_t)r;
    return r;
}

static int64_t walk_bytes(struct gmemo *m, uint32_t s, const uint8_t *b, size_t n) {
    int64_t cur = s;
    for (size_t i = 0; i < n && cur >= 0; i++) cur = trans(m, (uint32_t)cur, b[i]);
    return cur;
}

static bool token_ref_matches(const struct gmemo *m, const sy_grammar_vocab *v, const gelem *e, int32_t tok) {
    uint32_t ref;
    bool neg;
    switch (e->type) {
    case GE_TOKEN: ref = e->value, neg = false; break;
    case GE_TOKEN_NOT: ref = e->value, neg = true; break;
    case GE_TOKEN_TEXT: ref = (uint32_t)m->text_ids[e->value], neg = false; break;
    case GE_TOKEN_TEXT_NOT: ref = (uint32_t)m->text_ids[e->value], neg = true; break;
    default: return false;
    }
    if (!neg) return (uint32_t)tok == ref;
    return (uint32_t)tok != ref && v->kind[tok] == SY_GRAMMAR_TOKEN_NORMAL;
}

/* The set after token `tok` as a whole from s (text and token references), TR_DEAD if rejected. */
static int64_t advance_token(struct gmemo *m, const sy_grammar_vocab *v, uint32_t s, int32_t tok) {
    int64_t by_text = TR_DEAD;
    if (v->kind[tok] == SY_GRAMMAR_TOKEN_NORMAL && v->len[tok] > 0) {
        by_text = walk_bytes(m, s, v->bytes + v->off[tok], v->len[tok]);
        if (by_text < TR_DEAD) return by_text;
    }
    if (!m->sets[s].has_token_top) return by_text;
    m->out.n = 0;
    m->expand_work = 0;
    gset set = m->sets[s];
    for (uint32_t i = 0; i < set.n; i++) {
        uint32_t id = m->pool[set.off + i];
        if (id == 0 || !token_ref_matches(m, v, &m->g->elems[m->nodes[id].pos], tok)) continue;
        int rc = advance_past_top(m, id);
        if (rc < 0) return rc;
    }
    if (m->out.n == 0) return by_text;
    /* Both: merge. The text path may end inside a character, the reference path never does; one set has one
     * partial character, so the reference wins then (the grammar named this token explicitly). */
    if (by_text >= 0 && m->sets[by_text].partial == 0) {
        gset t = m->sets[by_text];
        for (uint32_t i = 0; i < t.n; i++)
            if (!vec_push(&m->out, m->pool[t.off + i])) return SY_GRAMMAR_ENOMEM;
    }
    return out_to_set(m, 0);
}

/* ---- states ---------------------------------------------------------------------------------------------- */

struct sy_grammar_state {
    sy_grammar *g;
    const sy_grammar_vocab *v;
    struct gmemo *m;
    /* the stacks by value, so the state survives a memo flush: [n_stacks] then per stack [len, bottom..top] */
    uint32_t *flat;
    size_t flat_n, flat_cap;
    uint32_t partial;
    uint32_t epoch;
    uint32_t sid;
    bool finished;
    /* lazy */
    bool awaiting;
    char **words;
    size_t *word_lens;
    size_t n_words, max_word;
    int32_t *ttoks;
    size_t n_ttoks;
    uint8_t *tbuf;
    size_t tbuf_n;
    char err[256];
};

/* The state's set id in the memo, interning its stacks when the memo was flushed since. Under m->mu. */
static int64_t state_sid(sy_grammar_state *st) {
    struct gmemo *m = st->m;
    if (st->epoch == m->epoch) return st->sid;
    m->tmp.n = 0;
    size_t k = 1;
    uint32_t ns = st->flat[0];
    for (uint32_t i = 0; i < ns; i++) {
        uint32_t len = st->flat[k++], node = 0;
        for (uint32_t j = 0; j < len; j++) {
            int64_t c = node_get(m, st->flat[k++], node);
            if (c < 0) return c;
            node = (uint32_t)c;
        }
        if (!vec_push(&m->tmp, node)) return SY_GRAMMAR_ENOMEM;
    }
    qsort(m->tmp.p, m->tmp.n, sizeof *m->tmp.p, cmp_u32);
    int64_t s = set_get(m, m->tmp.p, m->tmp.n, st->partial);
    if (s >= 0) {
        st->sid = (uint32_t)s;
        st->epoch = m->epoch;
    }
    return s;
}

/* Copies set s into the state (by value). Under m->mu. */
static int state_store(sy_grammar_state *st, uint32_t s) {
    struct gmemo *m = st->m;
    gset set = m->sets[s];
    size_t need = 1;
    for (uint32_t i = 0; i < set.n; i++) need += 1 + m->nodes[m->pool[set.off + i]].depth;
    if (need > st->flat_cap) {
        uint32_t *f = realloc(st->flat, need * sizeof *f);
        if (f == NULL) return SY_GRAMMAR_ENOMEM;
        st->flat = f;
        st->flat_cap = need;
    }
    size_t k = 1;
    st->flat[0] = set.n;
    for (uint32_t i = 0; i < set.n; i++) {
        uint32_t id = m->pool[set.off + i], d = m->nodes[id].depth;
        st->flat[k] = d;
        for (uint32_t j = d; j > 0; j--, id = m->nodes[id].parent) st->flat[k + j] = m->nodes[id].pos;
        k += 1 + d;
    }
    st->flat_n = k;
    st->partial = set.partial;
    st->sid = s;
    st->epoch = m->epoch;
    return 0;
}

static void memo_maybe_flush(struct gmemo *m) {
    if (m->n_sets > SET_SOFT || m->n_nodes > NODE_SOFT) memo_clear(m);
}

static int set_state_error(sy_grammar_state *st, int rc, const char *fallback) {
    if (rc == SY_GRAMMAR_ELIMIT) snprintf(st->err, sizeof st->err, "%s", st->m->err);
    else if (rc == SY_GRAMMAR_ENOMEM) snprintf(st->err, sizeof st->err, "out of memory");
    else snprintf(st->err, sizeof st->err, "%s", fallback);
    return rc;
}

sy_grammar_state *sy_grammar_state_create(sy_grammar *g, const sy_grammar_vocab *v,
                                          const sy_grammar_triggers *trig, char *err, size_t err_cap) {
    if (g == NULL || v == NULL) {
        sy_gerr(err, err_cap, "grammar state: no grammar or vocabulary");
        return NULL;
    }
    for (uint32_t i = 0; i < g->n_elems; i++) {
        uint32_t t = g->elems[i].type;
        if ((t == GE_TOKEN || t == GE_TOKEN_NOT) && g->elems[i].value >= v->n_tokens) {
            sy_gerr(err, err_cap, "token reference <[%u]> in rule '%s' is past the vocabulary (%u tokens)",
                    g->elems[i].value, rule_of_pos(g, i), v->n_tokens);
            return NULL;
        }
    }
    sy_grammar_state *st = calloc(1, sizeof *st);
    if (st == NULL) goto oom;
    /* the memo of this vocabulary: the grammar keeps the most recent one */
    pthread_mutex_lock(&g->mu);
    struct gmemo *m = g->memo;
    if (m == NULL || m->vocab_uid != v->uid) {
        m = memo_create(g, v, err, err_cap);
        if (m == NULL) {
            pthread_mutex_unlock(&g->mu);
            free(st);
            return NULL;
        }
        if (g->memo) sy_gmemo_release(g->memo);
        g->memo = m;
    }
    atomic_fetch_add(&m->refs, 1);
    pthread_mutex_unlock(&g->mu);
    st->g = sy_grammar_ref(g);
    st->v = v;
    st->m = m;

    if (trig != NULL && (trig->n_words > 0 || trig->n_tokens > 0)) {
        st->awaiting = true;
        st->words = calloc(trig->n_words + 1, sizeof *st->words);
        st->word_lens = calloc(trig->n_words + 1, sizeof *st->word_lens);
        st->ttoks = malloc((trig->n_tokens + 1) * sizeof *st->ttoks);
        if (!st->words || !st->word_lens || !st->ttoks) goto oom_state;
        for (size_t i = 0; i < trig->n_words; i++) {
            const char *w = trig->words ? trig->words[i] : NULL;
            size_t n = w == NULL ? 0 : trig->word_lens ? trig->word_lens[i] : strlen(w);
            if (n == 0 || n > SY_GRAMMAR_MAX_TRIGGER_LEN) {
                sy_gerr(err, err_cap, "trigger word %zu is empty or longer than %u bytes", i,
                        SY_GRAMMAR_MAX_TRIGGER_LEN);
                sy_grammar_state_free(st);
                return NULL;
            }
            st->words[i] = malloc(n);
            if (st->words[i] == NULL) goto oom_state;
            memcpy(st->words[i], w, n);
            st->word_lens[i] = n;
            if (n > st->max_word) st->max_word = n;
            st->n_words++;
        }
        for (size_t i = 0; i < trig->n_tokens; i++) {
            if (trig->tokens[i] < 0 || (uint32_t)trig->tokens[i] >= v->n_tokens) {
                sy_gerr(err, err_cap, "trigger token %d is not in the vocabulary", trig->tokens[i]);
                sy_grammar_state_free(st);
                return NULL;
            }
            st->ttoks[st->n_ttoks++] = trig->tokens[i];
        }
        st->tbuf = malloc(SY_GRAMMAR_MAX_TRIGGER_LEN + 65536);
        if (st->tbuf == NULL) goto oom_state;
    }

    /* the start: root expanded */
    pthread_mutex_lock(&m->mu);
    m->call_work = 0;
    memo_maybe_flush(m);
    int rc = 0;
    {   /* the root rule's alternatives, expanded */
        m->out.n = 0;
        m->expand_work = 0;
        for (uint32_t a = g->alt_off[g->root]; a < g->alt_off[g->root + 1] && rc == 0; a++) {
            uint32_t at = g->alts[a];
            if (ge_is_end(&g->elems[at])) {
                rc = vec_push(&m->out, 0) ? 0 : SY_GRAMMAR_ENOMEM;
                continue;
            }
            int64_t nid = node_get(m, at, 0);
            rc = nid < 0 ? (int)nid : expand(m, (uint32_t)nid);
        }
        if (rc == 0) {
            int64_t s = out_to_set(m, 0);
            rc = s == TR_DEAD ? SY_GRAMMAR_EINVAL : s < 0 ? (int)s : state_store(st, (uint32_t)s);
        }
    }
    if (rc < 0) sy_gerr(err, err_cap, "grammar start: %s", rc == SY_GRAMMAR_ELIMIT ? m->err : "out of memory");
    pthread_mutex_unlock(&m->mu);
    if (rc < 0) {
        sy_grammar_state_free(st);
        return NULL;
    }
    return st;
oom_state:
    sy_grammar_state_free(st);
oom:
    sy_gerr(err, err_cap, "out of memory");
    return NULL;
}

void sy_grammar_state_free(sy_grammar_state *st) {
    if (st == NULL) return;
    if (st->m) sy_gmemo_release(st->m);
    sy_grammar_free(st->g);
    for (size_t i = 0; i < st->n_words; i++) free(st->words[i]);
    free(st->words);
    free(st->word_lens);
    free(st->ttoks);
    free(st->tbuf);
    free(st->flat);
    free(st);
}

sy_grammar_state *sy_grammar_state_clone(const sy_grammar_state *src) {
    sy_grammar_state *st = calloc(1, sizeof *st);
    if (st == NULL) return NULL;
    *st = *src;
    st->words = NULL;
    st->word_lens = NULL;
    st->ttoks = NULL;
    st->tbuf = NULL;
    st->n_words = 0;
    st->flat = malloc(src->flat_n * sizeof *st->flat);
    st->flat_cap = src->flat_n;
    atomic_fetch_add(&st->m->refs, 1);
    sy_grammar_ref(st->g);
    if (st->flat == NULL) goto fail;
    memcpy(st->flat, src->flat, src->flat_n * sizeof *st->flat);
    if (src->words) {
        st->words = calloc(src->n_words + 1, sizeof *st->words);
        st->word_lens = calloc(src->n_words + 1, sizeof *st->word_lens);
        st->ttoks = malloc((src->n_ttoks + 1) * sizeof *st->ttoks);
        st->tbuf = malloc(SY_GRAMMAR_MAX_TRIGGER_LEN + 65536);
        if (!st->words || !st->word_lens || !st->ttoks || !st->tbuf) goto fail;
        for (size_t i = 0; i < src->n_words; i++) {
            st->words[i] = malloc(src->word_lens[i]);
            if (st->words[i] == NULL) goto fail;
            memcpy(st->words[i], src->words[i], src->word_lens[i]);
            st->word_lens[i] = src->word_lens[i];
            st->n_words++;
        }
        memcpy(st->ttoks, src->ttoks, src->n_ttoks * sizeof *st->ttoks);
        memcpy(st->tbuf, src->tbuf, src->tbuf_n);
    }
    return st;
fail:
    sy_grammar_state_free(st);
    return NULL;
}

const char *sy_grammar_state_error(const sy_grammar_state *st) { return st->err; }
bool sy_grammar_state_awaiting_trigger(const sy_grammar_state *st) { return st->awaiting; }

/* Empty stack present and no partial character: the flat copy answers without the memo. */
bool sy_grammar_state_can_end(const sy_grammar_state *st) {
    if (st->awaiting) return true;
    if (st->finished || st->partial) return false;
    size_t k = 1;
    for (uint32_t i = 0; i < st->flat[0]; i++) {
        if (st->flat[k] == 0) return true;
        k += 1 + st->flat[k];
    }
    return false;
}

bool sy_grammar_state_is_final(const sy_grammar_state *st) {
    if (st->awaiting) return false;
    return st->finished || (st->flat[0] == 1 && st->flat[1] == 0 && st->partial == 0);
}

long sy_grammar_state_mask(sy_grammar_state *st, uint32_t *bits) {
    const sy_grammar_vocab *v = st->v;
    st->err[0] = '\0';
    if (st->finished) {
        memset(bits, 0, v->words * sizeof *bits);
        return 0;
    }
    if (st->awaiting) { /* before the trigger anything goes */
        memset(bits, 0xFF, v->words * sizeof *bits);
        if (v->n_tokens % 32) bits[v->words - 1] = (1u << (v->n_tokens % 32)) - 1;
        return v->n_tokens;
    }
    struct gmemo *m = st->m;
    pthread_mutex_lock(&m->mu);
    m->call_work = 0;
    memo_maybe_flush(m);
    long count = 0;
    int64_t s = state_sid(st);
    if (s < 0) {
        count = s;
        goto out;
    }
    if (m->masks[s]) {
        memcpy(bits, m->masks[s], v->words * sizeof *bits);
        count = m->mask_count[s];
        goto out;
    }
    memset(bits, 0, v->words * sizeof *bits);
    /* the trie walk: cur[d] is the set after the first d bytes of the current path */
    int64_t cur_stack[256];
    int64_t *cur = v->max_len < 255 ? cur_stack : malloc(((size_t)v->max_len + 1) * sizeof *cur);
    if (cur == NULL) {
        count = SY_GRAMMAR_ENOMEM;
        goto out;
    }
    cur[0] = s;
    const uint8_t *nbyte = v->nbyte;
    const uint16_t *ndepth = v->ndepth;
    const uint32_t *nend = v->nend;
    const int32_t *ntok = v->ntok;
    for (uint32_t i = 1; i < v->n_nodes;) {
        uint32_t d = ndepth[i];
        uint32_t from = (uint32_t)cur[d - 1];
        int32_t t = m->trans[(size_t)from * 256 + nbyte[i]];
        int64_t r = t != TR_UNKNOWN ? t : trans(m, from, nbyte[i]);
        if (r < 0) {
            if (r < TR_DEAD) {
                count = r;
                break;
            }
            i = nend[i];
            continue;
        }
        cur[d] = r;
        for (int32_t tk = ntok[i]; tk >= 0; tk = v->same[tk]) bits[tk / 32] |= 1u << (tk % 32);
        i++;
    }
    if (cur != cur_stack) free(cur);
    if (count < 0) goto out;
    gset set = m->sets[s];
    if (set.has_token_top) {
        for (uint32_t i = 0; i < set.n; i++) {
            uint32_t id = m->pool[set.off + i];
            if (id == 0) continue;
            const gelem *e = &m->g->elems[m->nodes[id].pos];
            if (!ge_is_token(e->type)) continue;
            uint32_t ref = (e->type == GE_TOKEN || e->type == GE_TOKEN_NOT) ? e->value
                                                                             : (uint32_t)m->text_ids[e->value];
            if (e->type == GE_TOKEN || e->type == GE_TOKEN_TEXT) {
                bits[ref / 32] |= 1u << (ref % 32);
            } else {
                for (size_t w = 0; w < v->words; w++) {
                    uint32_t add = v->normal_mask[w];
                    if (w == ref / 32) add &= ~(1u << (ref % 32));
                    bits[w] |= add;
                }
            }
        }
    }
    if (set.can_end)
        for (size_t w = 0; w < v->words; w++) bits[w] |= v->eog_mask[w];
    for (size_t w = 0; w < v->words; w++) count += __builtin_popcount(bits[w]);
    /* cache it; past the budget start over (the working set of a generation is small) */
    size_t bytes = v->words * sizeof *bits;
    if (m->mask_bytes + bytes > MASK_CACHE_BYTES) {
        for (uint32_t i = 0; i < m->n_sets; i++) {
            free(m->masks[i]);
            m->masks[i] = NULL;
        }
        m->mask_bytes = 0;
    }
    m->masks[s] = malloc(bytes);
    if (m->masks[s]) {
        memcpy(m->masks[s], bits, bytes);
        m->mask_count[s] = (uint32_t)count;
        m->mask_bytes += bytes;
    }
out:
    if (count < 0) set_state_error(st, (int)count, "mask failed");
    pthread_mutex_unlock(&m->mu);
    return count;
}

/* Advances the active grammar by one token, or only checks it. Under no lock (takes it). */
static int grammar_token(sy_grammar_state *st, int32_t tok, bool commit) {
    const sy_grammar_vocab *v = st->v;
    struct gmemo *m = st->m;
    if (v->kind[tok] == SY_GRAMMAR_TOKEN_EOG) {
        /* an end token ends the grammar where it is complete, unless a reference names it: then it is matched */
        pthread_mutex_lock(&m->mu);
        m->call_work = 0;
        memo_maybe_flush(m);
        int64_t s = state_sid(st);
        bool ref = s >= 0 && m->sets[s].has_token_top;
        if (ref) s = advance_token(m, v, (uint32_t)s, tok);
        int rc = 0;
        if (ref && s >= 0) {
            if (commit) rc = state_store(st, (uint32_t)s);
        } else if (ref && s < TR_DEAD) {
            rc = set_state_error(st, (int)s, "token failed");
        } else if (sy_grammar_state_can_end(st)) {
            if (commit) st->finished = true;
        } else {
            snprintf(st->err, sizeof st->err, "end of generation token %d before the grammar is complete", tok);
            rc = SY_GRAMMAR_EREJECT;
        }
        pthread_mutex_unlock(&m->mu);
        return rc;
    }
    pthread_mutex_lock(&m->mu);
    m->call_work = 0;
    memo_maybe_flush(m);
    int rc = 0;
    int64_t s = state_sid(st);
    if (s >= 0) s = advance_token(m, v, (uint32_t)s, tok);
    if (s == TR_DEAD) {
        snprintf(st->err, sizeof st->err, "token %d is not allowed by the grammar here", tok);
        rc = SY_GRAMMAR_EREJECT;
    } else if (s < 0) {
        rc = set_state_error(st, (int)s, "token failed");
    } else if (commit) {
        rc = state_store(st, (uint32_t)s);
        if (rc < 0) set_state_error(st, rc, "token failed");
    }
    pthread_mutex_unlock(&m->mu);
    return rc;
}

static int grammar_bytes(sy_grammar_state *st, const uint8_t *b, size_t n) {
    struct gmemo *m = st->m;
    pthread_mutex_lock(&m->mu);
    m->call_work = 0;
    memo_maybe_flush(m);
    int rc = 0;
    int64_t s = state_sid(st);
    if (s >= 0) s = walk_bytes(m, (uint32_t)s, b, n);
    if (s == TR_DEAD) {
        snprintf(st->err, sizeof st->err, "the grammar rejects the text");
        rc = SY_GRAMMAR_EREJECT;
    } else if (s < 0) {
        rc = set_state_error(st, (int)s, "text failed");
    } else {
        rc = state_store(st, (uint32_t)s);
    }
    pthread_mutex_unlock(&m->mu);
    return rc;
}

/* Before the trigger: keep the recent text (what a trigger could still start in: the last max_word - 1 bytes)
 * and start the grammar when a trigger word appears. n <= 65535. */
static int lazy_text(sy_grammar_state *st, const uint8_t *tb, size_t len) {
    if (st->n_words == 0) return 0;
    size_t keep = st->max_word - 1;
    if (st->tbuf_n > keep) {
        memmove(st->tbuf, st->tbuf + st->tbuf_n - keep, keep);
        st->tbuf_n = keep;
    }
    memcpy(st->tbuf + st->tbuf_n, tb, len);
    size_t n = st->tbuf_n + len;
    size_t best = SIZE_MAX;
    for (size_t w = 0; w < st->n_words; w++) {
        for (size_t at = 0; at + st->word_lens[w] <= n && at < best; at++)
            if (memcmp(st->tbuf + at, st->words[w], st->word_lens[w]) == 0) {
                best = at;
                break;
            }
    }
    if (best == SIZE_MAX) {
        st->tbuf_n = n;
        return 0;
    }
    /* the grammar matches from the start of the trigger word, like llama.cpp's trigger patterns */
    st->awaiting = false;
    int rc = grammar_bytes(st, st->tbuf + best, n - best);
    if (rc < 0) {
        st->awaiting = true;
        snprintf(st->err, sizeof st->err, "the grammar rejects the text from its trigger on");
        return rc;
    }
    st->tbuf_n = 0;
    return 0;
}

static int lazy_token(sy_grammar_state *st, int32_t tok) {
    const sy_grammar_vocab *v = st->v;
    for (size_t i = 0; i < st->n_ttoks; i++)
        if (st->ttoks[i] == tok) {
            /* a trigger token starts the grammar with itself: by a reference to it, else by its text (a
             * control token's text too, here only: the grammar was written to begin with it) */
            st->awaiting = false;
            int rc = grammar_token(st, tok, true);
            if (rc == SY_GRAMMAR_EREJECT && v->len[tok] > 0 && v->kind[tok] != SY_GRAMMAR_TOKEN_NORMAL)
                rc = grammar_bytes(st, v->bytes + v->off[tok], v->len[tok]);
            if (rc < 0) {
                st->awaiting = true;
                snprintf(st->err, sizeof st->err, "the grammar rejects its trigger token %d", tok);
            } else {
                st->tbuf_n = 0;
            }
            return rc;
        }
    if (v->kind[tok] == SY_GRAMMAR_TOKEN_EOG) {
        st->finished = true;
        return 0;
    }
    if (v->kind[tok] != SY_GRAMMAR_TOKEN_NORMAL) return 0;
    return lazy_text(st, v->bytes + v->off[tok], v->len[tok]);
}

int sy_grammar_state_accept_token(sy_grammar_state *st, int32_t tok) {
    st->err[0] = '\0';
    if (tok < 0 || (uint32_t)tok >= st->v->n_tokens) {
        snprintf(st->err, sizeof st->err, "token %d is not in the vocabulary", tok);
        return SY_GRAMMAR_EINVAL;
    }
    if (st->finished) {
        snprintf(st->err, sizeof st->err, "the grammar already ended");
        return SY_GRAMMAR_EDONE;
    }
    if (st->awaiting) return lazy_token(st, tok);
    return grammar_token(st, tok, true);
}

int sy_grammar_state_check_token(sy_grammar_state *st, int32_t tok) {
    st->err[0] = '\0';
    if (tok < 0 || (uint32_t)tok >= st->v->n_tokens) return SY_GRAMMAR_EINVAL;
    if (st->finished) return 0;
    if (st->awaiting) {
        /* a trigger inside this token starts the grammar: check on a copy */
        sy_grammar_state *c = sy_grammar_state_clone(st);
        if (c == NULL) return SY_GRAMMAR_ENOMEM;
        int rc = lazy_token(c, tok);
        sy_grammar_state_free(c);
        return rc == 0 ? 1 : rc == SY_GRAMMAR_EREJECT ? 0 : rc;
    }
    int rc = grammar_token(st, tok, false);
    return rc == 0 ? 1 : rc == SY_GRAMMAR_EREJECT ? 0 : rc;
}

int sy_grammar_state_accept_bytes(sy_grammar_state *st, const uint8_t *bytes, size_t len) {
    st->err[0] = '\0';
    if (st->finished) return SY_GRAMMAR_EDONE;
    if (len == 0) return 0;
    if (bytes == NULL) return SY_GRAMMAR_EINVAL;
    while (st->awaiting && len > 0) { /* through the trigger search, in pieces it can hold */
        size_t piece = len < 65535 ? len : 65535;
        int rc = lazy_text(st, bytes, piece);
        if (rc < 0) return rc;
        bytes += piece;
        len -= piece;
        if (!st->awaiting) return 0; /* lazy_text fed the rest of this piece to the grammar */
    }
    return len ? grammar_bytes(st, bytes, len) : 0;
}
