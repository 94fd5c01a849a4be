/* SentencePiece (llama.cpp "SPM") tokenizer: see tokenizer_spm.h for the algorithm. */
#include "tokenizer_spm.h"
#include "errmsg.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define SPACE_MARK "\xe2\x96\x81" /* U+2581, SentencePiece's visible space */
#define SPACE_MARK_LEN 3

struct sy_spm {
    uint32_t n_vocab;
    char *arena;        /* all token texts, back to back */
    size_t *text_at;    /* [n_vocab] offset in arena */
    uint32_t *text_len; /* [n_vocab] */
    float *score;       /* [n_vocab] */
    uint8_t *type;      /* [n_vocab] sy_spm_token_type */
    int16_t *byte_value; /* [n_vocab] the byte of a "<0xXX>" byte token, else -1 */

    /* text -> id, open addressing; -1 marks an empty slot */
    int32_t *slots;
    size_t slot_mask;

    /* control, unknown and user-defined tokens, longest text first (ties: lower id first) */
    int32_t *specials;
    uint32_t n_specials;

    int32_t bos, eos, unk, pad, eot;
    bool add_bos, add_eos, add_space_prefix;
};

/* ---- vocabulary lookup ---- */

static size_t hash_text(const char *s, size_t len) { return (size_t)XXH3_64bits(s, len); }

int32_t sy_spm_find(const sy_spm *t, const char *text, size_t len) {
    for (size_t i = hash_text(text, len) & t->slot_mask;; i = (i + 1) & t->slot_mask) {
        int32_t id = t->slots[i];
        if (id < 0) return -1;
        if (t->text_len[id] == len && memcmp(t->arena + t->text_at[id], text, len) == 0) return id;
    }
}

/* Later duplicates replace earlier ones, as in llama.cpp's token_to_id map. */
static void index_token(sy_spm *t, int32_t id) {
    const char *s = t->arena + t->text_at[id];
    size_t len = t->text_len[id];
    for (size_t i = hash_text(s, len) & t->slot_mask;; i = (i + 1) & t->slot_mask) {
        int32_t other = t->slots[i];
        if (other < 0 || (t->text_len[other] == len && memcmp(t->arena + t->text_at[other], s, len) == 0)) {
            t->slots[i] = id;
            return;
        }
    }
}

static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* The byte of "<0xXX>", or -1. */
static int parse_byte_token(const char *s, size_t len) {
    if (len != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return -1;
    int hi = hex_digit(s[3]), lo = hex_digit(s[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

typedef struct special_key {
    uint32_t len;
    int32_t id;
} special_key;

static int cmp_special(const void *a, const void *b) {
    const special_key *x = a, *y = b;
    if (x->len != y->len) return x->len > y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* Orders the special tokens longest text first (ties: lower id first). */
static bool sort_specials(sy_spm *t) {
    special_key *keys = malloc((t->n_specials ? t->n_specials : 1) * sizeof *keys);
    if (keys == NULL) return false;
    for (uint32_t i = 0; i < t->n_specials; i++) keys[i] = (special_key){t->text_len[t->specials[i]], t->specials[i]};
    qsort(keys, t->n_specials, sizeof *keys, cmp_special);
    for (uint32_t i = 0; i < t->n_specials; i++) t->specials[i] = keys[i].id;
    free(keys);
    return true;
}

/* ---- building from GGUF ---- */

/* Reads an optional token id key: absent -> default; out of range -> -1 (llama.cpp warns and ignores too). */
static bool read_token_id(const sy_gguf *g, const char *key, int32_t dflt, uint32_t n_vocab, int32_t *out,
                          char *err, size_t err_size) {
    uint64_t v;
    int r = sy_gguf_get_uint(g, key, &v);
    if (r < 0) {
        int64_t s;
        if (sy_gguf_get_int(g, key, &s) == 1) { /* a negative id means "none" */
            *out = -1;
            return true;
        }
        sy_errmsg(err, err_size, "metadata key '%s': expected an integer token id", key);
        return false;
    }
    if (r == 0) v = dflt < 0 ? UINT64_MAX : (uint64_t)dflt;
    *out = v < n_vocab ? (int32_t)v : -1;
    return true;
}

static bool read_flag(const sy_gguf *g, const char *key, bool dflt, bool *out, char *err, size_t err_size) {
    int r = sy_gguf_get_bool(g, key, out);
    if (r == 0) *out = dflt;
    if (r < 0) {
        sy_errmsg(err, err_size, "metadata key '%s': expected a bool", key);
        return false;
    }
    return true;
}

sy_spm *sy_spm_from_gguf(const sy_gguf *g, char *err, size_t err_size) {
    int64_t k_tokens = sy_gguf_find_key(g, "tokenizer.ggml.tokens");
    sy_gguf_type et;
    uint64_t n;
    if (k_tokens < 0 || !sy_gguf_kv_array(g, (uint64_t)k_tokens, &et, &n) || et != SY_GGUF_STRING) {
        sy_errmsg(err, err_size, "metadata key 'tokenizer.ggml.tokens': missing or not an array of strings");
        return NULL;
    }
    if (n == 0 || n > (uint64_t)INT32_MAX / 4) {
        sy_errmsg(err, err_size, "metadata key 'tokenizer.ggml.tokens': vocabulary of %llu tokens",
                  (unsigned long long)n);
        return NULL;
    }
    int64_t k_scores = sy_gguf_find_key(g, "tokenizer.ggml.scores");
    int64_t k_types = sy_gguf_find_key(g, "tokenizer.ggml.token_type");
    uint64_t count;
    if (k_scores >= 0 && (!sy_gguf_kv_array(g, (uint64_t)k_scores, &et, &count) || count != n ||
                          (et != SY_GGUF_FLOAT32 && et != SY_GGUF_FLOAT64))) {
        sy_errmsg(err, err_size, "metadata key 'tokenizer.ggml.scores': expected %llu floats",
                  (unsigned long long)n);
        return NULL;
    }
    if (k_types >= 0 && (!sy_gguf_kv_array(g, (uint64_t)k_types, &et, &count) || count != n ||
                         et == SY_GGUF_STRING || et == SY_GGUF_FLOAT32 || et == SY_GGUF_FLOAT64 ||
                         et == SY_GGUF_BOOL)) {
        sy_errmsg(err, err_size, "metadata key 'tokenizer.ggml.token_type': expected %llu integers",
                  (unsigned long long)n);
        return NULL;
    }

    sy_spm *t = calloc(1, sizeof *t);
    if (t == NULL) goto oom;
    t->n_vocab = (uint32_t)n;
    size_t slots = 16;
    while (slots < 2 * (size_t)n) slots *= 2;
    t->slot_mask = slots - 1;
    t->text_at = malloc(n * sizeof *t->text_at);
    t->text_len = malloc(n * sizeof *t->text_len);
    t->score = malloc(n * sizeof *t->score);
    t->type = malloc(n);
    t->byte_value = malloc(n * sizeof *t->byte_value);
    t->slots = malloc(slots * sizeof *t->slots);
    t->specials = malloc(n * sizeof *t->specials);
    if (!t->text_at || !t->text_len || !t->score || !t->type || !t->byte_value || !t->slots || !t->specials)
        goto oom;
    memset(t->slots, 0xff, slots * sizeof *t->slots);

    /* The texts lie inside the file, so their total is bounded by its size. */
    size_t total = 0;
    for (uint64_t i = 0; i < n; i++) {
        const char *s;
        size_t len;
        sy_gguf_array_string(g, (uint64_t)k_tokens, i, &s, &len);
        if (len > UINT32_MAX) {
            sy_errmsg(err, err_size, "tokenizer.ggml.tokens[%llu]: text too long", (unsigned long long)i);
            sy_spm_free(t);
            return NULL;
        }
        total += len;
    }
    t->arena = malloc(total ? total : 1);
    if (t->arena == NULL) goto oom;
    size_t at = 0;
    for (uint32_t i = 0; i < t->n_vocab; i++) {
        const char *s;
        size_t len;
        sy_gguf_array_string(g, (uint64_t)k_tokens, i, &s, &len);
        memcpy(t->arena + at, s, len);
        t->text_at[i] = at;
        t->text_len[i] = (uint32_t)len;
        at += len;

        double score = 0.0;
        if (k_scores >= 0) sy_gguf_array_float(g, (uint64_t)k_scores, i, &score);
        t->score[i] = (float)score;

        int64_t type = SY_SPM_TOKEN_NORMAL;
        if (k_types >= 0 && !sy_gguf_array_int(g, (uint64_t)k_types, i, &type)) type = -1;
        if (type == 0) type = SY_SPM_TOKEN_NORMAL; /* "undefined" in llama.cpp: treated as normal text */
        if (type < SY_SPM_TOKEN_NORMAL || type > SY_SPM_TOKEN_BYTE) {
            sy_errmsg(err, err_size, "tokenizer.ggml.token_type[%u]: invalid token type", i);
            sy_spm_free(t);
            return NULL;
        }
        t->type[i] = (uint8_t)type;
        t->byte_value[i] = (int16_t)(type == SY_SPM_TOKEN_BYTE ? parse_byte_token(s, len) : -1);
        index_token(t, (int32_t)i);
        if ((type == SY_SPM_TOKEN_CONTROL || type == SY_SPM_TOKEN_UNKNOWN || type == SY_SPM_TOKEN_USER_DEFINED) &&
            len > 0)
            t->specials[t->n_specials++] = (int32_t)i;
    }
    if (!sort_specials(t)) goto oom;

    if (!read_token_id(g, "tokenizer.ggml.bos_token_id", 1, t->n_vocab, &t->bos, err, err_size) ||
        !read_token_id(g, "tokenizer.ggml.eos_token_id", 2, t->n_vocab, &t->eos, err, err_size) ||
        !read_token_id(g, "tokenizer.ggml.unknown_token_id", 0, t->n_vocab, &t->unk, err, err_size) ||
        !read_token_id(g, "tokenizer.ggml.padding_token_id", -1, t->n_vocab, &t->pad, err, err_size) ||
        !read_token_id(g, "tokenizer.ggml.eot_token_id", -1, t->n_vocab, &t->eot, err, err_size) ||
        !read_flag(g, "tokenizer.ggml.add_bos_token", true, &t->add_bos, err, err_size) ||
        !read_flag(g, "tokenizer.ggml.add_eos_token", false, &t->add_eos, err, err_size) ||
        !read_flag(g, "tokenizer.ggml.add_space_prefix", true, &t->add_space_prefix, err, err_size)) {
        sy_spm_free(t);
        return NULL;
    }
    if (t->add_bos && t->bos < 0) t->add_bos = false;
    if (t->add_eos && t->eos < 0) t->add_eos = false;
    return t;

oom:
    sy_errmsg(err, err_size, "out of memory for a vocabulary of %llu tokens", (unsigned long long)n);
    sy_spm_free(t);
    return NULL;
}

void sy_spm_free(sy_spm *t) {
    if (t == NULL) return;
    free(t->arena);
    free(t->text_at);
    free(t->text_len);
    free(t->score);
    free(t->type);
    free(t->byte_value);
    free(t->slots);
    free(t->specials);
    free(t);
}

uint32_t sy_spm_vocab_size(const sy_spm *t) { return t->n_vocab; }
int32_t sy_spm_bos(const sy_spm *t) { return t->bos; }
int32_t sy_spm_eos(const sy_spm *t) { return t->eos; }
int32_t sy_spm_unk(const sy_spm *t) { return t->unk; }
int32_t sy_spm_pad(const sy_spm *t) { return t->pad; }
int32_t sy_spm_eot(const sy_spm *t) { return t->eot; }
bool sy_spm_add_bos(const sy_spm *t) { return t->add_bos; }
bool sy_spm_add_eos(const sy_spm *t) { return t->add_eos; }

static bool valid_id(const sy_spm *t, int32_t id) { return id >= 0 && (uint32_t)id < t->n_vocab; }

uint32_t sy_spm_token_type(const sy_spm *t, int32_t id) { return valid_id(t, id) ? t->type[id] : 0; }

const char *sy_spm_token_text(const sy_spm *t, int32_t id, size_t *len) {
    if (!valid_id(t, id)) return NULL;
    *len = t->text_len[id];
    return t->arena + t->text_at[id];
}

float sy_spm_token_score(const sy_spm *t, int32_t id) { return valid_id(t, id) ? t->score[id] : 0.0f; }

/* ---- encoding ---- */

typedef struct id_vec {
    int32_t *v;
    size_t n, cap;
    bool oom;
} id_vec;

static void push_id(id_vec *o, int32_t id) {
    if (o->oom) return;
    if (o->n == o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 64;
        int32_t *v = realloc(o->v, cap * sizeof *v);
        if (v == NULL) {
            o->oom = true;
            return;
        }
        o->v = v;
        o->cap = cap;
    }
    o->v[o->n++] = id;
}

/* One symbol of the merge: a run of bytes of the fragment, linked to its neighbours. n == 0 once merged away. */
typedef struct symbol {
    uint32_t at, n; /* 32-bit: a fragment is at most SPM_MAX_FRAGMENT bytes, and the merge state of a long */
    int32_t prev, next; /* prompt takes 16 bytes per character here and 16 per queued pair, not twice that */
} symbol;

typedef struct bigram {
    float score;
    int32_t left, right;
    uint32_t size; /* bytes of the merged text when queued; a changed size marks a stale entry */
} bigram;

#define SPM_MAX_FRAGMENT ((size_t)INT32_MAX)

typedef struct merge_state {
    const sy_spm *t;
    const char *text;
    symbol *sym;
    bigram *heap;
    size_t heap_n, heap_cap;
    bool oom;
} merge_state;

/* Heap order: higher score first, then the leftmost pair. */
static bool bigram_before(const bigram *a, const bigram *b) {
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static void heap_push(merge_state *m, bigram b) {
    if (m->heap_n == m->heap_cap) {
        size_t cap = m->heap_cap ? m->heap_cap * 2 : 64;
        bigram *h = realloc(m->heap, cap * sizeof *h);
        if (h == NULL) {
            m->oom = true;
            return;
        }
        m->heap = h;
        m->heap_cap = cap;
    }
    size_t i = m->heap_n++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!bigram_before(&b, &m->heap[parent])) break;
        m->heap[i] = m->heap[parent];
        i = parent;
    }
    m->heap[i] = b;
}

static bigram heap_pop(merge_state *m) {
    bigram top = m->heap[0];
    bigram last = m->heap[--m->heap_n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= m->heap_n) break;
        if (c + 1 < m->heap_n && bigram_before(&m->heap[c + 1], &m->heap[c])) c++;
        if (!bigram_before(&m->heap[c], &last)) break;
        m->heap[i] = m->heap[c];
        i = c;
    }
    if (m->heap_n > 0) m->heap[i] = last;
    return top;
}

static void try_add_bigram(merge_state *m, int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    uint32_t size = m->sym[left].n + m->sym[right].n;
    int32_t id = sy_spm_find(m->t, m->text + m->sym[left].at, size);
    if (id < 0) return;
    heap_push(m, (bigram){m->t->score[id], left, right, size});
}

/* UTF-8 sequence length from the lead byte's high nibble (continuation bytes count as 1, like llama.cpp). */
static size_t utf8_len(unsigned char c) {
    static const uint8_t len_by_high_nibble[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return len_by_high_nibble[c >> 4];
}

static void emit_piece(const sy_spm *t, const char *s, size_t n, id_vec *out) {
    int32_t id = sy_spm_find(t, s, n);
    if (id >= 0) {
        push_id(out, id);
        return;
    }
    for (size_t i = 0; i < n; i++) { /* byte fallback */
        char name[7];
        snprintf(name, sizeof name, "<0x%02X>", (unsigned char)s[i]);
        int32_t b = sy_spm_find(t, name, 6);
        if (b < 0) b = sy_spm_find(t, s + i, 1);
        if (b < 0) b = t->unk;
        if (b >= 0) push_id(out, b);
    }
}

/* Merges one escaped fragment (spaces already "▁") and appends its tokens. */
static bool merge_fragment(const sy_spm *t, const char *text, size_t len, id_vec *out) {
    if (len == 0) return true;
    if (len > SPM_MAX_FRAGMENT) return false;
    /* One symbol per character (counted first), and room for the first pairs, so nothing doubles past them. */
    size_t n_chars = 0;
    for (size_t at = 0; at < len; n_chars++) {
        size_t n = utf8_len((unsigned char)text[at]);
        at += n > len - at ? len - at : n;
    }
    merge_state m = {t, text, malloc(n_chars * sizeof(symbol)), NULL, 0, 0, false};
    if (m.sym == NULL) return false;
    m.heap_cap = n_chars > 1 ? n_chars - 1 : 1;
    m.heap = malloc(m.heap_cap * sizeof *m.heap);
    if (m.heap == NULL) {
        free(m.sym);
        return false;
    }
    int32_t n_sym = 0;
    for (size_t at = 0; at < len;) {
        size_t n = utf8_len((unsigned char)text[at]);
        if (n > len - at) n = len - at;
        m.sym[n_sym] = (symbol){(uint32_t)at, (uint32_t)n, n_sym - 1, at + n < len ? n_sym + 1 : -1};
        n_sym++;
        at += n;
    }
    for (int32_t i = 1; i < n_sym; i++) try_add_bigram(&m, i - 1, i);
    while (m.heap_n > 0 && !m.oom) {
        bigram b = heap_pop(&m);
        symbol *l = &m.sym[b.left], *r = &m.sym[b.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size) continue; /* stale */
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) m.sym[r->next].prev = b.left;
        try_add_bigram(&m, l->prev, b.left);
        try_add_bigram(&m, b.left, l->next);
    }
    bool ok = !m.oom;
    for (int32_t i = 0; ok && i >= 0; i = m.sym[i].next) emit_piece(t, text + m.sym[i].at, m.sym[i].n, out);
    free(m.sym);
    free(m.heap);
    return ok;
}

/* A piece of the input: raw text [at, at+len) or an already matched special token. */
typedef struct fragment {
    int32_t token; /* -1 for raw text */
    size_t at, len;
} fragment;

typedef struct frag_vec {
    fragment *v;
    size_t n, cap;
} frag_vec;

static bool push_frag(frag_vec *f, fragment x) {
    if (f->n == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 16;
        fragment *v = realloc(f->v, cap * sizeof *v);
        if (v == NULL) return false;
        f->v = v;
        f->cap = cap;
    }
    f->v[f->n++] = x;
    return true;
}

/* Cuts every occurrence of special tokens out of the raw fragments, longest token text first. */
static bool split_specials(const sy_spm *t, const char *text, bool parse_special, frag_vec *frags) {
    for (uint32_t s = 0; s < t->n_specials; s++) {
        int32_t id = t->specials[s];
        if (!parse_special && t->type[id] != SY_SPM_TOKEN_USER_DEFINED) continue;
        const char *needle = t->arena + t->text_at[id];
        size_t nlen = t->text_len[id];
        frag_vec next = {0};
        for (size_t i = 0; i < frags->n; i++) {
            fragment f = frags->v[i];
            if (f.token >= 0 || f.len < nlen) {
                if (!push_frag(&next, f)) goto oom;
                continue;
            }
            size_t at = f.at, end = f.at + f.len;
            for (;;) {
                const char *hit = memmem(text + at, end - at, needle, nlen);
                if (hit == NULL) break;
                size_t h = (size_t)(hit - text);
                if (h > at && !push_frag(&next, (fragment){-1, at, h - at})) goto oom;
                if (!push_frag(&next, (fragment){id, h, nlen})) goto oom;
                at = h + nlen;
            }
            if (at < end && !push_frag(&next, (fragment){-1, at, end - at})) goto oom;
        }
        free(frags->v);
        *frags = next;
        continue;
    oom:
        free(next.v);
        return false;
    }
    return true;
}

int sy_spm_encode(const sy_spm *t, const char *text, size_t len, bool add_special, bool parse_special,
                  int32_t *out, size_t capacity, size_t *n_out) {
    id_vec ids = {0};
    frag_vec frags = {0};
    char *buf = NULL;
    bool ok = true;
    if (add_special && t->add_bos) push_id(&ids, t->bos);
    if (len > 0) ok = push_frag(&frags, (fragment){-1, 0, len}) && split_specials(t, text, parse_special, &frags);

    /* Escaped fragment: an optional leading space plus the text, each space as 3 bytes. */
    bool prev_special = true; /* the start of the input counts as after a special token */
    for (size_t i = 0; ok && i < frags.n; i++) {
        fragment f = frags.v[i];
        if (f.token >= 0) {
            push_id(&ids, f.token);
            prev_special = true;
            continue;
        }
        if (f.len > (SIZE_MAX - SPACE_MARK_LEN) / SPACE_MARK_LEN) {
            ok = false;
            break;
        }
        /* The escaped text's exact size: each space grows by the mark's extra bytes. */
        size_t spaces = 0;
        for (size_t j = 0; j < f.len; j++) spaces += text[f.at + j] == ' ';
        char *b = realloc(buf, f.len + (spaces + 1) * SPACE_MARK_LEN);
        if (b == NULL) {
            ok = false;
            break;
        }
        buf = b;
        size_t n = 0;
        if (t->add_space_prefix && prev_special) {
            memcpy(buf + n, SPACE_MARK, SPACE_MARK_LEN);
            n += SPACE_MARK_LEN;
        }
        for (size_t j = 0; j < f.len; j++) {
            if (text[f.at + j] == ' ') {
                memcpy(buf + n, SPACE_MARK, SPACE_MARK_LEN);
                n += SPACE_MARK_LEN;
            } else {
                buf[n++] = text[f.at + j];
            }
        }
        ok = merge_fragment(t, buf, n, &ids);
        prev_special = false;
    }
    if (add_special && t->add_eos) push_id(&ids, t->eos);
    free(buf);
    free(frags.v);
    if (!ok || ids.oom) {
        free(ids.v);
        return -1;
    }
    *n_out = ids.n;
    size_t copy = ids.n < capacity ? ids.n : capacity;
    if (copy > 0) memcpy(out, ids.v, copy * sizeof *out);
    free(ids.v);
    return ids.n > capacity ? 1 : 0;
}

/* ---- decoding ---- */

int sy_spm_decode_token(const sy_spm *t, int32_t id, char *out, size_t capacity, size_t *n_out) {
    if (!valid_id(t, id)) return -1;
    if (t->byte_value[id] >= 0) {
        *n_out = 1;
        if (capacity < 1) return 1;
        out[0] = (char)t->byte_value[id];
        return 0;
    }
    const char *s = t->arena + t->text_at[id];
    size_t len = t->text_len[id];
    if (t->type[id] != SY_SPM_TOKEN_NORMAL) { /* control, unknown, user-defined, unused: the text as is */
        *n_out = len;
        if (capacity < len) return 1;
        if (len) memcpy(out, s, len);
        return 0;
    }
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        bool mark = len - i >= SPACE_MARK_LEN && memcmp(s + i, SPACE_MARK, SPACE_MARK_LEN) == 0;
        if (n < capacity) out[n] = mark ? ' ' : s[i];
        n++;
        i += mark ? SPACE_MARK_LEN : 1;
    }
    *n_out = n;
    return n > capacity ? 1 : 0;
}
