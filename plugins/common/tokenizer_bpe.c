/* The byte-level BPE tokenizer (tokenizer_bpe.h): the built object's lifetime, accessors and decoding.
 *
 * The tokenizer is in several files, by what each part does (tokenizer_bpe_internal.h lists them): this one
 * holds what a user of a built tokenizer calls besides sy_bpe_tokenize (bpe_encode.c); building is
 * bpe_builder.c, loading a tokenizer.json is tokenizer_json.c.
 */
#include "tokenizer_bpe_internal.h"

#include <stdlib.h>
#include <string.h>

#include "errmsg.h"
#include "switchyard/engine.h"

static void trie_free(added_trie *tr) {
    free(tr->nodes);
    tr->nodes = NULL;
}

void sy_bpe_free(sy_bpe *t) {
    if (t == NULL)
        return;
    free(t->text.arena);
    free(t->text.off);
    free(t->text.len);
    free(t->kind);
    free(t->flags);
    free(t->bytes);
    free(t->bytes_off);
    free(t->vocab.slots);
    free(t->added_ix.slots);
    free(t->merges.slots);
    free(t->merge_list);
    free(t->added);
    trie_free(&t->raw_trie);
    trie_free(&t->norm_trie);
    for (size_t i = 0; i < t->n_splits; i++)
        pcre2_code_free(t->splits[i].re);
    pcre2_code_free(t->byte_level_re);
    bpe_cache_destroy(&t->cache);
    free(t);
}

uint32_t sy_bpe_n_vocab(const sy_bpe *t) {
    return t->n_vocab;
}

const char *sy_bpe_token_bytes(const sy_bpe *t, int32_t id, size_t *len) {
    if (id < 0 || (uint32_t)id >= t->n_vocab || t->kind[id] == 0) {
        *len = 0;
        return NULL;
    }
    *len = t->bytes_off[id + 1] - t->bytes_off[id];
    return t->bytes + t->bytes_off[id];
}

const char *sy_bpe_token_text(const sy_bpe *t, int32_t id, size_t *len) {
    if (id < 0 || (uint32_t)id >= t->n_vocab || t->kind[id] == 0) {
        *len = 0;
        return NULL;
    }
    return store_text(&t->text, (uint32_t)id, len);
}

uint32_t sy_bpe_token_flags(const sy_bpe *t, int32_t id) {
    if (id < 0 || (uint32_t)id >= t->n_vocab)
        return 0;
    return t->flags[id];
}

bool sy_bpe_set_token_flags(sy_bpe *t, int32_t id, uint32_t flags) {
    if (id < 0 || (uint32_t)id >= t->n_vocab || t->kind[id] == 0)
        return false;
    t->flags[id] |= flags;
    return true;
}

int32_t sy_bpe_find_token(const sy_bpe *t, const char *text, size_t len) {
    int32_t id = id_table_find(&t->added_ix, &t->text, text, len);
    return id >= 0 ? id : id_table_find(&t->vocab, &t->text, text, len);
}

bool sy_bpe_decode(const sy_bpe *t, const int32_t *ids, size_t n, bool skip_special, char **out, size_t *len,
                   size_t *cap, char *err, size_t err_size) {
    for (size_t i = 0; i < n; i++) {
        size_t bl;
        const char *b = sy_bpe_token_bytes(t, ids[i], &bl);
        if (b == NULL) {
            sy_errmsg(err, err_size, "id %d at position %zu is not a token", ids[i], i);
            return false;
        }
        if (skip_special && (t->flags[ids[i]] & SY_TOKEN_CONTROL))
            continue;
        if (bl > SIZE_MAX - *len - 1 || !grow_array((void **)out, cap, *len + bl + 1, 1)) {
            sy_errmsg(err, err_size, "out of memory");
            return false;
        }
        memcpy(*out + *len, b, bl);
        *len += bl;
        (*out)[*len] = '\0';
    }
    return true;
}

size_t sy_bpe_n_merges(const sy_bpe *t) {
    return t->n_merges;
}

bool sy_bpe_merge_at(const sy_bpe *t, size_t rank, int32_t *left, int32_t *right) {
    if (rank >= t->n_merges)
        return false;
    *left = t->merge_list[2 * rank];
    *right = t->merge_list[2 * rank + 1];
    return true;
}

void sy_bpe_template(const sy_bpe *t, const int32_t **prefix, size_t *n_prefix, const int32_t **suffix,
                     size_t *n_suffix) {
    *prefix = t->prefix;
    *n_prefix = t->n_prefix;
    *suffix = t->suffix;
    *n_suffix = t->n_suffix;
}

/* ---- memory, for the engines' budgets ---- */

uint64_t sy_bpe_memory(const sy_bpe *t) {
    if (t == NULL)
        return 0;
    uint64_t b = sizeof *t;
    b += (uint64_t)(t->vocab.mask + 1 + t->added_ix.mask + 1) * sizeof(id_slot);
    b += (uint64_t)(t->merges.mask + 1) * sizeof(merge_slot);
    b += (uint64_t)t->ids_cap * (sizeof *t->kind + sizeof *t->flags + sizeof *t->text.off + sizeof *t->text.len);
    b += t->text.arena_cap + ((uint64_t)t->n_vocab + 1) * sizeof *t->bytes_off;
    if (t->bytes != NULL)
        b += t->bytes_off[t->n_vocab];
    b += (uint64_t)t->merge_list_cap * 2 * sizeof(int32_t);
    return b;
}

/* The capacity id_table_reserve / merge tables reach for n entries from the builder's first size. */
static uint64_t table_capacity(uint64_t n) {
    uint64_t cap = 1u << 16;
    while (n * 4 > cap * 3 && cap <= ((uint64_t)1 << 30))
        cap *= 2;
    return cap;
}

uint64_t sy_bpe_memory_estimate(uint64_t n_vocab, uint64_t n_merges, uint64_t text_bytes) {
    /* what sy_bpe_memory will count: the hash tables dominate small tokenizers, the per-id arrays and the two
     * copies of the token text (byte-level and decoded) large ones */
    return sizeof(sy_bpe) + (table_capacity(n_vocab) + 64) * sizeof(id_slot) +
           table_capacity(n_merges) * sizeof(merge_slot) + n_vocab * (1 + 4 + 4 + 4 + 4) + 2 * text_bytes +
           n_merges * 2 * sizeof(int32_t);
}
