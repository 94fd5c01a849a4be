/* Building a byte-level BPE tokenizer (tokenizer_bpe.h): the sy_bpe_builder_* calls, the pre-tokenizer presets
 * of GGUF files, and finishing (the byte-level tables, the added-token tries, the GPT-2 regex).
 *
 * Both ways of making a tokenizer end here: the GGUF path calls the builder directly, and tokenizer_json.c is a
 * reader of tokenizer.json over the same calls, so the checks below (ids, duplicates, merges whose parts or
 * result are not in the vocabulary) hold for every tokenizer, whatever file it came from.
 */
#include "tokenizer_bpe_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errmsg.h"
#include "regex_onig.h"
#include "switchyard/engine.h"

/* The pre-tokenizer regexes of the presets (Oniguruma syntax, as tokenizer.json stores them). GPT2_REGEX is also
 * the ByteLevel step's own split (use_regex). */
static const char GPT2_REGEX[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
static const char QWEN2_REGEX[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
                                  "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char SMOLLM_DIGITS_REGEX[] = "\\p{N}";
static const char LLAMA3_REGEX[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
                                   "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static bool ensure_ids(sy_bpe *t, uint32_t id) {
    if (id < t->ids_cap)
        return true;
    size_t old = t->ids_cap;
    size_t cap = old ? old : 1024;
    while (cap <= id)
        cap *= 2;
    if (cap > SY_BPE_MAX_TOKENS)
        cap = SY_BPE_MAX_TOKENS;
    uint32_t *off = realloc(t->text.off, cap * sizeof *off);
    if (off == NULL)
        return false;
    t->text.off = off;
    uint32_t *len = realloc(t->text.len, cap * sizeof *len);
    if (len == NULL)
        return false;
    t->text.len = len;
    uint8_t *kind = realloc(t->kind, cap);
    if (kind == NULL)
        return false;
    t->kind = kind;
    uint32_t *flags = realloc(t->flags, cap * sizeof *flags);
    if (flags == NULL)
        return false;
    t->flags = flags;
    for (size_t i = old; i < cap; i++) {
        t->text.off[i] = 0;
        t->text.len[i] = UINT32_MAX;
        t->kind[i] = 0;
        t->flags[i] = 0;
    }
    t->ids_cap = cap;
    return true;
}

static bool store_token_text(sy_bpe *t, uint32_t id, const char *text, size_t len) {
    if (t->text.arena_len + len > UINT32_MAX)
        return false;
    if (!grow_array((void **)&t->text.arena, &t->text.arena_cap, t->text.arena_len + len + 1, 1))
        return false;
    memcpy(t->text.arena + t->text.arena_len, text, len);
    t->text.off[id] = (uint32_t)t->text.arena_len;
    t->text.len[id] = (uint32_t)len;
    t->text.arena_len += len;
    return true;
}


static void trie_reset(added_trie *tr) {
    for (int i = 0; i < 256; i++)
        tr->root[i] = -1;
    tr->only_first_byte = -1;
    tr->empty = true;
}

sy_bpe_builder *sy_bpe_builder_new(char *err, size_t err_size) {
    sy_bpe_builder *b = calloc(1, sizeof *b);
    sy_bpe *t = calloc(1, sizeof *t);
    if (b == NULL || t == NULL || !id_table_init(&t->vocab, 1u << 16) || !id_table_init(&t->added_ix, 64) ||
        !merge_table_alloc(&t->merges, 1u << 16)) {
        if (t != NULL) {
            free(t->vocab.slots);
            free(t->added_ix.slots);
        }
        free(t);
        free(b);
        sy_errmsg(err, err_size, "out of memory");
        return NULL;
    }
    b->t = t;
    b->last_merged = -1;
    t->unk_id = -1;
    trie_reset(&t->raw_trie);
    trie_reset(&t->norm_trie);
    byte_alphabet_init(&t->alphabet);
    return b;
}

void sy_bpe_builder_free(sy_bpe_builder *b) {
    if (b == NULL)
        return;
    sy_bpe_free(b->t);
    sb_free(&b->scratch);
    free(b);
}


bool sy_bpe_builder_reserve(sy_bpe_builder *b, size_t n_tokens, size_t n_merges, char *err, size_t err_size) {
    sy_bpe *t = b->t;
    if (n_tokens > SY_BPE_MAX_TOKENS)
        n_tokens = SY_BPE_MAX_TOKENS;
    if (n_merges > SY_BPE_MAX_TOKENS * (size_t)4)
        n_merges = SY_BPE_MAX_TOKENS * (size_t)4;
    bool ok = id_table_reserve(&t->vocab, n_tokens) && (n_tokens == 0 || ensure_ids(t, (uint32_t)n_tokens - 1)) &&
              grow_array((void **)&t->merge_list, &t->merge_list_cap, n_merges * 2, sizeof(int32_t)) &&
              grow_array((void **)&t->text.arena, &t->text.arena_cap, n_tokens * 8, 1);
    size_t cap = t->merges.mask + 1;
    while (ok && n_merges * 4 > cap * 3)
        cap *= 2;
    if (ok && cap != t->merges.mask + 1 && t->merges.count == 0) {
        merge_table bigger;
        ok = merge_table_alloc(&bigger, cap);
        if (ok) {
            free(t->merges.slots);
            t->merges = bigger;
        }
    }
    if (!ok)
        sy_errmsg(err, err_size, "out of memory");
    return ok;
}

static bool add_token(sy_bpe_builder *b, const char *text, size_t len, int32_t id, bool utf8_checked,
                      uint64_t hash, char *err, size_t err_size);

bool sy_bpe_builder_add_token(sy_bpe_builder *b, const char *text, size_t len, int32_t id, char *err,
                              size_t err_size) {
    return add_token(b, text, len, id, false, hash_bytes(text, len), err, err_size);
}

/* utf8_checked: the JSON reader already validated the text; hash: hash_bytes(text, len). */
static bool add_token(sy_bpe_builder *b, const char *text, size_t len, int32_t id, bool utf8_checked,
                      uint64_t hash, char *err, size_t err_size) {
    sy_bpe *t = b->t;
    char shown[128];
    if (len == 0) {
        sy_errmsg(err, err_size, "token %d has empty text", id);
        return false;
    }
    if (len > SY_BPE_MAX_TOKEN_BYTES) {
        sy_errmsg(err, err_size, "token %d is %zu bytes long (at most %u)", id, len, SY_BPE_MAX_TOKEN_BYTES);
        return false;
    }
    if (id < 0 || (uint32_t)id >= SY_BPE_MAX_TOKENS) {
        sy_errmsg(err, err_size, "token %s has id %d, outside 0..%u", sy_errmsg_quote(shown, sizeof shown, text, len),
                id, SY_BPE_MAX_TOKENS - 1);
        return false;
    }
    if (!utf8_checked && utf8_invalid_offset(text, len) != len) {
        sy_errmsg(err, err_size, "token %d is not valid UTF-8", id);
        return false;
    }
    if (!ensure_ids(t, (uint32_t)id)) {
        sy_errmsg(err, err_size, "out of memory");
        return false;
    }
    if (t->kind[id] != 0) {
        char other[128];
        size_t ol;
        const char *o = store_text(&t->text, (uint32_t)id, &ol);
        sy_errmsg(err, err_size, "id %d is given to both %s and %s", id, sy_errmsg_quote(other, sizeof other, o, ol),
                sy_errmsg_quote(shown, sizeof shown, text, len));
        return false;
    }
    /* one probe finds a twin or the free slot (the table grows first, so the slot stays valid) */
    id_table *vt = &t->vocab;
    if ((vt->count + 1) * 4 > (vt->mask + 1) * 3 && !id_table_grow(vt)) {
        sy_errmsg(err, err_size, "out of memory");
        return false;
    }
    uint32_t h32 = (uint32_t)hash;
    size_t slot = h32 & vt->mask;
    for (; vt->slots[slot].id_plus1 != 0; slot = (slot + 1) & vt->mask) {
        const id_slot *sl = &vt->slots[slot];
        if (sl->hash == h32 && sl->len == len && bytes_equal(t->text.arena + sl->off, text, len)) {
            sy_errmsg(err, err_size, "token %s appears twice (ids %u and %d)",
                    sy_errmsg_quote(shown, sizeof shown, text, len), sl->id_plus1 - 1, id);
            return false;
        }
    }
    if (!store_token_text(t, (uint32_t)id, text, len)) {
        sy_errmsg(err, err_size, "out of memory");
        return false;
    }
    vt->slots[slot] = (id_slot){.id_plus1 = (uint32_t)id + 1, .hash = h32, .off = t->text.off[id],
                                .len = t->text.len[id]};
    vt->count++;
    t->kind[id] = KIND_VOCAB;
    if ((uint32_t)id >= t->n_vocab)
        t->n_vocab = (uint32_t)id + 1;
    return true;
}

/* The second half of adding a merge, once the ids of both sides were looked up (-1: not in the vocabulary). */
static bool merge_commit(sy_bpe_builder *b, const char *left, size_t left_len, const char *right, size_t right_len,
                         int32_t a, int32_t c, char *err, size_t err_size) {
    sy_bpe *t = b->t;
    char shown[128], shown2[128], shown3[128];
    if (a < 0 || c < 0) {
        sy_errmsg(err, err_size, "merge token %s is not in the vocabulary",
                a < 0 ? sy_errmsg_quote(shown, sizeof shown, left, left_len)
                      : sy_errmsg_quote(shown, sizeof shown, right, right_len));
        return false;
    }
    /* Vocabularies trained by BPE number their tokens in merge order, so the merged token is usually the id
     * after the previous merge's result: checking that first keeps these lookups sequential instead of a cache
     * miss each (and needs no joined copy). The hash table decides whenever the guess is wrong. */
    int32_t m = -1;
    int32_t guess = b->last_merged + 1;
    if (b->last_merged >= 0 && (uint32_t)guess < t->n_vocab && (t->kind[guess] & KIND_VOCAB) &&
        t->text.len[guess] == left_len + right_len) {
        const char *g = t->text.arena + t->text.off[guess];
        if (bytes_equal(g, left, left_len) && bytes_equal(g + left_len, right, right_len))
            m = guess;
    }
    b->scratch.len = 0;
    if (m < 0 && (!sb_append(&b->scratch, left, left_len) || !sb_append(&b->scratch, right, right_len))) {
        sy_errmsg(err, err_size, "out of memory");
        return false;
    }
    if (m < 0)
        m = id_table_find(&t->vocab, &t->text, b->scratch.data, b->scratch.len);
    if (m < 0) {
        sy_errmsg(err, err_size, "merge of %s and %s gives %s, which is not in the vocabulary",
                sy_errmsg_quote(shown, sizeof shown, left, left_len),
                sy_errmsg_quote(shown2, sizeof shown2, right, right_len),
                sy_errmsg_quote(shown3, sizeof shown3, b->scratch.data, b->scratch.len));
        return false;
    }
    if (t->n_merges >= UINT32_MAX - 1) {
        sy_errmsg(err, err_size, "too many merges");
        return false;
    }
    if (!grow_array((void **)&t->merge_list, &t->merge_list_cap, (t->n_merges + 1) * 2, sizeof(int32_t)) ||
        !merge_put(&t->merges, a, c, (uint32_t)t->n_merges, m)) {
        sy_errmsg(err, err_size, "out of memory");
        return false;
    }
    b->last_merged = m;
    t->merge_list[2 * t->n_merges] = a;
    t->merge_list[2 * t->n_merges + 1] = c;
    t->n_merges++;
    return true;
}

bool sy_bpe_builder_add_merge(sy_bpe_builder *b, const char *left, size_t left_len, const char *right,
                              size_t right_len, char *err, size_t err_size) {
    const sy_bpe *t = b->t;
    int32_t a = id_table_find(&t->vocab, &t->text, left, left_len);
    int32_t c = id_table_find(&t->vocab, &t->text, right, right_len);
    return merge_commit(b, left, left_len, right, right_len, a, c, err, err_size);
}

/* See tokenizer_bpe_internal.h. */
bool bpe_split_merge_line(const char *line, size_t len, size_t *left_len) {
    const char *sp = memchr(line, ' ', len);
    if (sp == NULL || sp == line || sp + 1 == line + len || memchr(sp + 1, ' ', len - (size_t)(sp + 1 - line)))
        return false;
    *left_len = (size_t)(sp - line);
    return true;
}

bool sy_bpe_builder_add_merge_line(sy_bpe_builder *b, const char *line, size_t len, char *err, size_t err_size) {
    size_t left_len;
    char shown[128];
    if (!bpe_split_merge_line(line, len, &left_len)) {
        sy_errmsg(err, err_size, "merge %s is not two tokens separated by one space",
                sy_errmsg_quote(shown, sizeof shown, line, len));
        return false;
    }
    return sy_bpe_builder_add_merge(b, line, left_len, line + left_len + 1, len - left_len - 1, err, err_size);
}

/* The bulk adders work in batches: the hash-table slots of a whole batch are prefetched before any is probed, so
 * the cache misses of a 150k-entry table overlap instead of queueing one after another. */
#define ADD_BATCH 64

/* See tokenizer_bpe_internal.h. */
bool bpe_add_tokens_batched(sy_bpe_builder *b, const char *const *texts, const size_t *lens, const int32_t *ids,
                            int32_t first_id, size_t n, bool utf8_checked, size_t *failed, char *err,
                            size_t err_size) {
    uint64_t h[ADD_BATCH];
    for (size_t start = 0; start < n; start += ADD_BATCH) {
        size_t m = n - start < ADD_BATCH ? n - start : ADD_BATCH;
        for (size_t i = 0; i < m; i++) {
            h[i] = hash_bytes(texts[start + i], lens[start + i]);
            id_table_prefetch(&b->t->vocab, h[i]);
        }
        for (size_t i = 0; i < m; i++) {
            size_t k = start + i;
            int64_t id = ids ? ids[k] : (int64_t)first_id + (int64_t)k;
            if (id > INT32_MAX)
                id = INT32_MAX; /* refused by add_token as out of range */
            if (!add_token(b, texts[k], lens[k], (int32_t)id, utf8_checked, h[i], err, err_size)) {
                *failed = k;
                return false;
            }
        }
    }
    return true;
}

/* See tokenizer_bpe_internal.h. */
bool bpe_add_merges_batched(sy_bpe_builder *b, const char *const *lefts, const size_t *left_lens,
                            const char *const *rights, const size_t *right_lens, size_t n, size_t *failed,
                            char *err, size_t err_size) {
    const sy_bpe *t = b->t;
    uint64_t hl[ADD_BATCH], hr[ADD_BATCH];
    int32_t a[ADD_BATCH], c[ADD_BATCH];
    for (size_t start = 0; start < n; start += ADD_BATCH) {
        size_t m = n - start < ADD_BATCH ? n - start : ADD_BATCH;
        for (size_t i = 0; i < m; i++) {
            hl[i] = hash_bytes(lefts[start + i], left_lens[start + i]);
            hr[i] = hash_bytes(rights[start + i], right_lens[start + i]);
            id_table_prefetch(&t->vocab, hl[i]);
            id_table_prefetch(&t->vocab, hr[i]);
        }
        for (size_t i = 0; i < m; i++) {
            a[i] = id_table_find_h(&t->vocab, &t->text, lefts[start + i], left_lens[start + i], hl[i]);
            c[i] = id_table_find_h(&t->vocab, &t->text, rights[start + i], right_lens[start + i], hr[i]);
            if (a[i] >= 0 && c[i] >= 0)
                __builtin_prefetch(&t->merges.slots[merge_hash(merge_key(a[i], c[i])) & t->merges.mask]);
        }
        for (size_t i = 0; i < m; i++) {
            size_t k = start + i;
            if (!merge_commit(b, lefts[k], left_lens[k], rights[k], right_lens[k], a[i], c[i], err, err_size)) {
                *failed = k;
                return false;
            }
        }
    }
    return true;
}

bool sy_bpe_builder_add_tokens(sy_bpe_builder *b, const char *const *texts, const size_t *lens, int32_t first_id,
                               size_t n, char *err, size_t err_size) {
    size_t failed;
    return bpe_add_tokens_batched(b, texts, lens, NULL, first_id, n, false, &failed, err, err_size);
}

bool sy_bpe_builder_add_merge_lines(sy_bpe_builder *b, const char *const *lines, const size_t *lens, size_t n,
                                    size_t *failed, char *err, size_t err_size) {
    const char *lefts[ADD_BATCH], *rights[ADD_BATCH];
    size_t left_lens[ADD_BATCH], right_lens[ADD_BATCH];
    size_t failed_at = 0;
    char shown[128];
    for (size_t start = 0; start < n; start += ADD_BATCH) {
        size_t m = n - start < ADD_BATCH ? n - start : ADD_BATCH, good = 0;
        for (; good < m; good++) {
            const char *line = lines[start + good];
            size_t split, len = lens[start + good];
            if (!bpe_split_merge_line(line, len, &split))
                break;
            lefts[good] = line;
            left_lens[good] = split;
            rights[good] = line + split + 1;
            right_lens[good] = len - split - 1;
        }
        /* the lines before a malformed one are added first, so that an earlier error is the one reported */
        if (!bpe_add_merges_batched(b, lefts, left_lens, rights, right_lens, good, &failed_at, err, err_size)) {
            if (failed)
                *failed = start + failed_at;
            return false;
        }
        if (good < m) {
            if (failed)
                *failed = start + good;
            sy_errmsg(err, err_size, "merge %s is not two tokens separated by one space",
                    sy_errmsg_quote(shown, sizeof shown, lines[start + good], lens[start + good]));
            return false;
        }
    }
    return true;
}

bool sy_bpe_builder_add_added_token(sy_bpe_builder *b, const sy_bpe_added_token *tok, char *err, size_t err_size) {
    sy_bpe *t = b->t;
    char shown[128];
    const char *text = tok->content;
    size_t len = tok->content_len;
    int32_t id = tok->id;
    if (len == 0 || text == NULL) {
        sy_errmsg(err, err_size, "added token %d has empty content", id);
        return false;
    }
    if (len > SY_BPE_MAX_TOKEN_BYTES) {
        sy_errmsg(err, err_size, "added token %d is %zu bytes long (at most %u)", id, len, SY_BPE_MAX_TOKEN_BYTES);
        return false;
    }
    sy_errmsg_quote(shown, sizeof shown, text, len);
    if (id < 0 || (uint32_t)id >= SY_BPE_MAX_TOKENS) {
        sy_errmsg(err, err_size, "added token %s has id %d, outside 0..%u", shown, id, SY_BPE_MAX_TOKENS - 1);
        return false;
    }
    if (utf8_invalid_offset(text, len) != len) {
        sy_errmsg(err, err_size, "added token %d is not valid UTF-8", id);
        return false;
    }
    if (!ensure_ids(t, (uint32_t)id)) {
        sy_errmsg(err, err_size, "out of memory");
        return false;
    }
    uint64_t h = hash_bytes(text, len);
    int32_t twin = id_table_find_h(&t->added_ix, &t->text, text, len, h);
    if (twin >= 0) {
        sy_errmsg(err, err_size, "added token %s appears twice (ids %d and %d)", shown, twin, id);
        return false;
    }
    if (t->kind[id] & KIND_ADDED) {
        sy_errmsg(err, err_size, "added token %s reuses id %d of another added token", shown, id);
        return false;
    }
    if (t->kind[id] & KIND_VOCAB) {
        size_t ol;
        const char *o = store_text(&t->text, (uint32_t)id, &ol);
        if (ol != len || memcmp(o, text, len) != 0) {
            char other[128];
            sy_errmsg(err, err_size, "added token %s has id %d, which the vocabulary gives to %s", shown, id,
                    sy_errmsg_quote(other, sizeof other, o, ol));
            return false;
        }
    } else {
        int32_t in_vocab = id_table_find_h(&t->vocab, &t->text, text, len, h);
        if (in_vocab >= 0) {
            sy_errmsg(err, err_size, "added token %s has id %d but the vocabulary has it as id %d", shown, id,
                    in_vocab);
            return false;
        }
        if (!store_token_text(t, (uint32_t)id, text, len)) {
            sy_errmsg(err, err_size, "out of memory");
            return false;
        }
    }
    if (!id_table_insert(&t->added_ix, &t->text, (uint32_t)id, h) ||
        !grow_array((void **)&t->added, &t->added_cap, t->n_added + 1, sizeof(added_token))) {
        sy_errmsg(err, err_size, "out of memory");
        return false;
    }
    t->added[t->n_added++] = (added_token){.id = id,
                                           .special = tok->special,
                                           .lstrip = tok->lstrip,
                                           .rstrip = tok->rstrip,
                                           .normalized = tok->normalized,
                                           .single_word = tok->single_word};
    t->kind[id] |= KIND_ADDED;
    if (tok->special)
        t->flags[id] |= SY_TOKEN_CONTROL;
    if ((uint32_t)id >= t->n_vocab)
        t->n_vocab = (uint32_t)id + 1;
    return true;
}

bool sy_bpe_builder_add_split(sy_bpe_builder *b, const char *pattern, size_t len, bool is_regex,
                              sy_bpe_split_behavior behavior, bool invert, char *err, size_t err_size) {
    sy_bpe *t = b->t;
    if (t->n_splits >= SY_BPE_MAX_SPLITS) {
        sy_errmsg(err, err_size, "more than %u pre-tokenizer split steps", SY_BPE_MAX_SPLITS);
        return false;
    }
    if ((unsigned)behavior > SY_BPE_SPLIT_CONTIGUOUS) {
        sy_errmsg(err, err_size, "unknown split behavior %u", (unsigned)behavior);
        return false;
    }
    pcre2_code *re = sy_onig_compile(pattern, len, is_regex, err, err_size);
    if (re == NULL)
        return false;
    t->splits[t->n_splits++] = (split_step){.re = re, .behavior = behavior, .invert = invert};
    return true;
}

void sy_bpe_builder_set_byte_level(sy_bpe_builder *b, bool add_prefix_space, bool use_regex) {
    b->t->add_prefix_space = add_prefix_space;
    b->t->use_regex = use_regex;
}

void sy_bpe_builder_set_normalization(sy_bpe_builder *b, sy_bpe_normalization n) {
    b->t->normalization = n;
}

void sy_bpe_builder_set_ignore_merges(sy_bpe_builder *b, bool ignore_merges) {
    b->t->ignore_merges = ignore_merges;
}

void sy_bpe_builder_set_byte_fallback(sy_bpe_builder *b, bool byte_fallback) {
    b->t->byte_fallback = byte_fallback;
}

bool sy_bpe_builder_set_unknown(sy_bpe_builder *b, const char *unk_text, size_t len, bool fuse_unk, char *err,
                                size_t err_size) {
    char shown[128];
    int32_t id = id_table_find(&b->t->vocab, &b->t->text, unk_text, len);
    if (id < 0) {
        sy_errmsg(err, err_size, "unknown token %s is not in the vocabulary",
                sy_errmsg_quote(shown, sizeof shown, unk_text, len));
        return false;
    }
    b->t->unk_id = id;
    b->t->fuse_unk = fuse_unk;
    return true;
}

bool sy_bpe_builder_set_template(sy_bpe_builder *b, const int32_t *prefix, size_t n_prefix, const int32_t *suffix,
                                 size_t n_suffix, char *err, size_t err_size) {
    if (n_prefix > BPE_MAX_TEMPLATE || n_suffix > BPE_MAX_TEMPLATE) {
        sy_errmsg(err, err_size, "post-processor template has more than %d tokens on one side", BPE_MAX_TEMPLATE);
        return false;
    }
    if (n_prefix)
        memcpy(b->t->prefix, prefix, n_prefix * sizeof *prefix);
    if (n_suffix)
        memcpy(b->t->suffix, suffix, n_suffix * sizeof *suffix);
    b->t->n_prefix = n_prefix;
    b->t->n_suffix = n_suffix;
    return true;
}

bool sy_bpe_builder_use_preset(sy_bpe_builder *b, const char *name, char *err, size_t err_size) {
    const char *regex = NULL;
    bool use_regex = false;
    sy_bpe_normalization norm = SY_BPE_NORM_NONE;
    bool ignore_merges = false;
    if (strcmp(name, "qwen2") == 0) {
        regex = QWEN2_REGEX;
        norm = SY_BPE_NORM_NFC; /* Qwen's tokenizer.json normalizes to NFC */
    } else if (strcmp(name, "llama-bpe") == 0 || strcmp(name, "llama3") == 0 || strcmp(name, "lfm2") == 0) {
        /* llama.cpp maps tokenizer.ggml.pre "lfm2" to its llama3 pre-tokenizer (same regex, merges ignored) */
        regex = LLAMA3_REGEX;
        ignore_merges = true;
    } else if (strcmp(name, "gpt-2") == 0 || strcmp(name, "gpt2") == 0) {
        use_regex = true;
    } else if (strcmp(name, "smollm") == 0) {
        /* SmolLM's tokenizer.json: Digits(individual_digits) then ByteLevel with the GPT-2 regex */
        regex = SMOLLM_DIGITS_REGEX;
        use_regex = true;
    } else {
        sy_errmsg(err, err_size, "unknown pre-tokenizer \"%s\" (known: qwen2, llama-bpe, lfm2, gpt-2, smollm)", name);
        return false;
    }
    if (b->t->n_splits != 0) {
        sy_errmsg(err, err_size, "pre-tokenizer preset \"%s\" given after split steps", name);
        return false;
    }
    if (regex != NULL &&
        !sy_bpe_builder_add_split(b, regex, strlen(regex), true, SY_BPE_SPLIT_ISOLATED, false, err, err_size))
        return false;
    sy_bpe_builder_set_byte_level(b, false, use_regex);
    sy_bpe_builder_set_normalization(b, norm);
    sy_bpe_builder_set_ignore_merges(b, ignore_merges);
    return true;
}

static bool trie_insert(added_trie *tr, const char *pattern, size_t len, int32_t added_index) {
    const unsigned char *p = (const unsigned char *)pattern;
    int32_t parent = -1; /* -1: the root, whose children are indexed by byte */
    int32_t node = -1;
    for (size_t i = 0; i < len; i++) {
        int32_t cur = parent < 0 ? tr->root[p[i]] : tr->nodes[parent].first_child;
        while (cur >= 0 && tr->nodes[cur].byte != p[i])
            cur = tr->nodes[cur].next_sibling;
        if (cur < 0) {
            if (tr->n_nodes >= (size_t)INT32_MAX ||
                !grow_array((void **)&tr->nodes, &tr->cap, tr->n_nodes + 1, sizeof(trie_node)))
                return false;
            cur = (int32_t)tr->n_nodes++;
            tr->nodes[cur] = (trie_node){.first_child = -1, .next_sibling = -1, .added = -1, .byte = p[i]};
            if (parent < 0) {
                tr->root[p[i]] = cur;
            } else {
                tr->nodes[cur].next_sibling = tr->nodes[parent].first_child;
                tr->nodes[parent].first_child = cur;
            }
        }
        node = parent = cur;
    }
    if (tr->nodes[node].added < 0) /* equal patterns: the first one wins, like the automaton's lower index */
        tr->nodes[node].added = added_index;
    if (tr->empty) {
        tr->empty = false;
        tr->only_first_byte = p[0];
    } else if (tr->only_first_byte != p[0]) {
        tr->only_first_byte = -1;
    }
    return true;
}

sy_bpe *sy_bpe_builder_finish(sy_bpe_builder *b, char *err, size_t err_size) {
    sy_bpe *t = b->t;
    char shown[128];
    b->t = NULL;
    sb_free(&b->scratch);
    free(b);

    if (t->n_vocab == 0) {
        sy_errmsg(err, err_size, "the vocabulary is empty");
        goto fail;
    }
    /* Initial symbols: the one-character token of every byte. */
    for (int byte = 0; byte < 256; byte++) {
        char ch[4];
        size_t n = utf8_encode(t->alphabet.cp_of_byte[byte], ch);
        t->byte_id[byte] = id_table_find(&t->vocab, &t->text, ch, n);
        t->fallback_n[byte] = 0;
        if (t->byte_fallback) {
            size_t k;
            for (k = 0; k < n; k++) {
                char name[8];
                snprintf(name, sizeof name, "<0x%02X>", (unsigned char)ch[k]);
                int32_t id = id_table_find(&t->vocab, &t->text, name, strlen(name));
                if (id < 0)
                    break;
                t->fallback_id[byte][k] = id;
            }
            if (k == n)
                t->fallback_n[byte] = (uint8_t)n;
        }
    }
    /* Decoded bytes of every token. */
    t->bytes_off = malloc(((size_t)t->n_vocab + 1) * sizeof *t->bytes_off);
    t->bytes = malloc(t->text.arena_len + 1);
    if (t->bytes_off == NULL || t->bytes == NULL) {
        sy_errmsg(err, err_size, "out of memory");
        goto fail;
    }
    size_t pos = 0;
    for (uint32_t id = 0; id < t->n_vocab; id++) {
        t->bytes_off[id] = (uint32_t)pos;
        if (t->kind[id] == 0) {
            t->flags[id] |= SY_TOKEN_UNUSED;
            continue;
        }
        size_t len, out_len;
        const char *s = store_text(&t->text, id, &len);
        if (!byte_level_decode(&t->alphabet, s, len, t->bytes + pos, &out_len)) {
            memcpy(t->bytes + pos, s, len);
            out_len = len;
        }
        pos += out_len;
    }
    t->bytes_off[t->n_vocab] = (uint32_t)pos;

    /* Added-token tries: special tokens first, then the others, each in the order given. */
    trie_reset(&t->raw_trie);
    trie_reset(&t->norm_trie);
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i < t->n_added; i++) {
            const added_token *a = &t->added[i];
            if (a->special != (pass == 0))
                continue;
            size_t len;
            const char *s = store_text(&t->text, (uint32_t)a->id, &len);
            bool ok;
            if (a->normalized) {
                size_t nlen;
                bool failed;
                char *norm = bpe_normalize(t->normalization, s, len, &nlen, &failed);
                if (failed) {
                    sy_errmsg(err, err_size, "added token %s cannot be normalized",
                            sy_errmsg_quote(shown, sizeof shown, s, len));
                    goto fail;
                }
                /* a token that normalizes to nothing would match everywhere: it is left out */
                ok = norm ? (nlen == 0 || trie_insert(&t->norm_trie, norm, nlen, (int32_t)i))
                          : trie_insert(&t->norm_trie, s, len, (int32_t)i);
                free(norm);
            } else {
                ok = trie_insert(&t->raw_trie, s, len, (int32_t)i);
            }
            if (!ok) {
                sy_errmsg(err, err_size, "out of memory");
                goto fail;
            }
        }
    }
    if (t->use_regex) {
        t->byte_level_re = sy_onig_compile(GPT2_REGEX, strlen(GPT2_REGEX), true, err, err_size);
        if (t->byte_level_re == NULL)
            goto fail;
    }
    for (size_t i = 0; i < t->n_prefix + t->n_suffix; i++) {
        int32_t id = i < t->n_prefix ? t->prefix[i] : t->suffix[i - t->n_prefix];
        if (id < 0 || (uint32_t)id >= t->n_vocab || t->kind[id] == 0) {
            sy_errmsg(err, err_size, "post-processor template names id %d, which is not a token", id);
            goto fail;
        }
    }
    bpe_cache_init(&t->cache);
    return t;
fail:
    sy_bpe_free(t);
    return NULL;
}

