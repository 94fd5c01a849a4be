/* Encoding text with a byte-level BPE tokenizer (sy_bpe_tokenize), in the stages tokenizer_bpe.h lists:
 *
 *   1. added tokens matched in the raw text are cut out (a byte trie, leftmost-longest);
 *   2. each remaining piece is normalized, then added tokens matched in normalized text are cut out;
 *   3. the pre-tokenizer's split steps cut each piece with their regexes (PCRE2, see regex_onig.h), then the
 *      ByteLevel step optionally adds a prefix space and splits with the GPT-2 regex;
 *   4. each word is merged pairwise, lowest rank first, through the merge table, or taken from the word cache.
 *
 * Everything mutable lives in a per-call encoder on the caller's stack: the tokenizer is only read (its word
 * cache has its own locks), so any number of threads may encode with one tokenizer at once.
 */
#include "tokenizer_bpe_internal.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "errmsg.h"
#include "switchyard/engine.h"

/* Unicode White_Space: what Rust's char::is_whitespace and regex \s match (tokenizers uses them for the
 * lstrip / rstrip of added tokens). */
static bool is_white_space(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
           c == 0x3000;
}

/* Rust regex \w (Alphabetic, marks, decimal digits, connector punctuation, join controls) as used for the
 * single_word flag. Alphabetic is approximated by the letter categories, letter numbers and the circled
 * letters: the few other Other_Alphabetic code points are marks, which are included anyway. */
static bool is_word_char(uint32_t c) {
    if (c < 0x80)
        return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
    if (c == 0x200C || c == 0x200D || (c >= 0x24B6 && c <= 0x24E9))
        return true;
    switch (utf8proc_category((utf8proc_int32_t)c)) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_PC:
        return true;
    default:
        return false;
    }
}

/* See tokenizer_bpe_internal.h.
 *
 * Only the non-ASCII runs go through utf8proc, each with the ASCII character before it: an ASCII character has
 * combining class 0, never decomposes and is never the second half of a composition, so the normal form of a
 * text is the concatenation of the normal forms of the pieces cut just before ASCII characters. Mostly-ASCII
 * text (English, code) then costs a copy instead of a decomposition of every character. */
char *bpe_normalize(sy_bpe_normalization nf, const char *s, size_t n, size_t *n_out, bool *failed) {
    *failed = false;
    *n_out = 0;
    if (nf == SY_BPE_NORM_NONE)
        return NULL;
    size_t i = 0;
    while (i < n && (unsigned char)s[i] < 0x80)
        i++;
    if (i == n) /* ASCII is in every normal form */
        return NULL;
    if (n > (size_t)SSIZE_MAX / 8) {
        *failed = true;
        return NULL;
    }
    int options = UTF8PROC_STABLE;
    switch (nf) {
    case SY_BPE_NORM_NFC:
        options |= UTF8PROC_COMPOSE;
        break;
    case SY_BPE_NORM_NFD:
        options |= UTF8PROC_DECOMPOSE;
        break;
    case SY_BPE_NORM_NFKC:
        options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
        break;
    case SY_BPE_NORM_NFKD:
        options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
        break;
    default:
        break;
    }
    strbuf out = {0};
    if (!sb_reserve(&out, n + n / 4)) {
        *failed = true;
        return NULL;
    }
    size_t pos = 0;
    while (pos < n) {
        /* i: the next non-ASCII byte at or after pos */
        while (i < n && (unsigned char)s[i] < 0x80)
            i++;
        if (i == n) {
            if (!sb_append(&out, s + pos, n - pos))
                goto fail;
            break;
        }
        size_t run_start = i > pos ? i - 1 : i; /* the ASCII character before may compose with a mark */
        size_t run_end = i;
        while (run_end < n && (unsigned char)s[run_end] >= 0x80)
            run_end++;
        if (!sb_append(&out, s + pos, run_start - pos))
            goto fail;
        utf8proc_uint8_t *dst = NULL;
        utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)s + run_start,
                                          (utf8proc_ssize_t)(run_end - run_start), &dst, (utf8proc_option_t)options);
        if (r < 0)
            goto fail;
        bool ok = sb_append(&out, dst, (size_t)r);
        free(dst);
        if (!ok)
            goto fail;
        pos = i = run_end;
    }
    *n_out = out.len;
    return out.data;
fail:
    sb_free(&out);
    *failed = true;
    return NULL;
}


typedef struct piece {
    size_t off;
    size_t len;
} piece;

typedef struct segment {
    size_t off;
    size_t len;
    bool is_match;
} segment;

typedef struct bpe_symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
    bool alive;
} bpe_symbol;

typedef struct heap_item {
    uint32_t rank;
    uint32_t pos;
    int32_t merged;
} heap_item;

/* Per-call scratch: nothing here is shared between threads. */
typedef struct encoder {
    const sy_bpe *t;
    bool parse_special;
    sy_bpe_ids *out;
    char *err;
    size_t err_size;
    piece *pieces[2];
    size_t pieces_cap[2];
    segment *segs;
    size_t segs_cap;
    strbuf word;      /* a piece with its ByteLevel prefix space */
    strbuf byte_text; /* a word in the byte-level alphabet (ignore_merges lookups) */
    bpe_symbol *sym;
    size_t sym_cap;
    heap_item *heap;
    size_t heap_cap;
    int32_t *word_ids;
    size_t word_ids_cap;
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    pcre2_jit_stack *jit_stack;
} encoder;

static bool enc_oom(encoder *e) {
    sy_errmsg(e->err, e->err_size, "out of memory");
    return false;
}

static bool emit_id(encoder *e, int32_t id) {
    sy_bpe_ids *o = e->out;
    if (o->n == o->cap && !grow_array((void **)&o->ids, &o->cap, o->n + 1, sizeof(int32_t)))
        return enc_oom(e);
    o->ids[o->n++] = id;
    return true;
}

static bool emit_ids(encoder *e, const int32_t *ids, size_t n) {
    sy_bpe_ids *o = e->out;
    if (n == 0)
        return true;
    if (n > SIZE_MAX - o->n || !grow_array((void **)&o->ids, &o->cap, o->n + n, sizeof(int32_t)))
        return enc_oom(e);
    memcpy(o->ids + o->n, ids, n * sizeof(int32_t));
    o->n += n;
    return true;
}

/* --- added tokens ------------------------------------------------------------------------------------------ */

/* Leftmost match at or after `from`, longest at that position (an Aho-Corasick LeftmostLongest search). */
static bool trie_find(const added_trie *tr, const char *s, size_t n, size_t from, size_t *ms, size_t *me,
                      int32_t *added_index) {
    const unsigned char *u = (const unsigned char *)s;
    for (size_t p = from; p < n; p++) {
        if (tr->only_first_byte >= 0) {
            const unsigned char *hit = memchr(u + p, tr->only_first_byte, n - p);
            if (hit == NULL)
                return false;
            p = (size_t)(hit - u);
        }
        int32_t node = tr->root[u[p]];
        int32_t best = -1;
        size_t best_end = 0;
        size_t q = p;
        while (node >= 0) {
            q++;
            if (tr->nodes[node].added >= 0) {
                best = tr->nodes[node].added;
                best_end = q;
            }
            if (q >= n)
                break;
            int32_t child = tr->nodes[node].first_child;
            while (child >= 0 && tr->nodes[child].byte != u[q])
                child = tr->nodes[child].next_sibling;
            node = child;
        }
        if (best >= 0) {
            *ms = p;
            *me = best_end;
            *added_index = best;
            return true;
        }
    }
    return false;
}

/* The next added token to cut out of s, with tokenizers' rules: special tokens only when parsing specials,
 * single_word needs non-word characters (or the ends) on both sides, lstrip/rstrip widen the cut over
 * whitespace (lstrip never past `cursor`, the end of the previous cut). Skipped matches still consume their
 * text, as the automaton's iterator does. */
static bool next_added(const encoder *e, const added_trie *tr, const char *s, size_t n, size_t *scan, size_t cursor,
                       size_t *cut_start, size_t *cut_end, int32_t *id) {
    const sy_bpe *t = e->t;
    if (tr->empty)
        return false;
    while (*scan < n) {
        size_t ms, me;
        int32_t ai;
        if (!trie_find(tr, s, n, *scan, &ms, &me, &ai)) {
            *scan = n;
            return false;
        }
        *scan = me;
        const added_token *a = &t->added[ai];
        if (a->special && !e->parse_special)
            continue;
        if (a->single_word) {
            uint32_t after = 0;
            if (me < n)
                (void)utf8_seq_len((const unsigned char *)s + me, n - me, &after);
            bool start_ok = ms == 0 || !is_word_char(utf8_last_cp(s, ms));
            bool stop_ok = me == n || !is_word_char(after);
            if (!start_ok || !stop_ok)
                continue;
        }
        if (a->lstrip) {
            size_t ns = ms;
            while (ns > cursor) { /* the cut never starts before the previous one ended */
                size_t k = ns - 1;
                while (k > 0 && ((unsigned char)s[k] & 0xC0) == 0x80)
                    k--;
                uint32_t cp = 0;
                (void)utf8_seq_len((const unsigned char *)s + k, ns - k, &cp);
                if (!is_white_space(cp))
                    break;
                ns = k;
            }
            ms = ns > cursor ? ns : cursor;
        }
        if (a->rstrip) {
            while (me < n) {
                uint32_t cp = 0;
                size_t k = utf8_seq_len((const unsigned char *)s + me, n - me, &cp);
                if (k == 0 || !is_white_space(cp))
                    break;
                me += k;
            }
        }
        *cut_start = ms;
        *cut_end = me;
        *id = a->id;
        return true;
    }
    return false;
}

/* --- regex splitting --------------------------------------------------------------------------------------- */

static int regex_match(encoder *e, const pcre2_code *re, const char *s, size_t n, size_t from) {
    int rc = pcre2_match(re, (PCRE2_SPTR)s, n, from, PCRE2_NO_UTF_CHECK, e->md, e->mctx);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT && e->jit_stack == NULL) {
        /* long pieces can outgrow the default 32 KiB JIT stack: retry with a private one that can grow */
        if (e->mctx == NULL)
            e->mctx = pcre2_match_context_create(NULL);
        if (e->mctx != NULL)
            e->jit_stack = pcre2_jit_stack_create(64 * 1024, 64 * 1024 * 1024, NULL);
        if (e->jit_stack == NULL)
            return rc;
        pcre2_jit_stack_assign(e->mctx, NULL, e->jit_stack);
        rc = pcre2_match(re, (PCRE2_SPTR)s, n, from, PCRE2_NO_UTF_CHECK, e->md, e->mctx);
    }
    return rc;
}

static bool push_segment(encoder *e, size_t *count, size_t off, size_t len, bool is_match) {
    if (!grow_array((void **)&e->segs, &e->segs_cap, *count + 1, sizeof(segment)))
        return enc_oom(e);
    e->segs[(*count)++] = (segment){.off = off, .len = len, .is_match = is_match};
    return true;
}

/* Cuts s[0..n) into the regex matches and the gaps between them (offsets relative to s), like tokenizers'
 * Pattern::find_matches. */
static bool regex_segments(encoder *e, const pcre2_code *re, const char *s, size_t n, size_t *n_segs) {
    size_t count = 0, prev = 0, from = 0;
    while (from <= n) {
        int rc = regex_match(e, re, s, n, from);
        if (rc == PCRE2_ERROR_NOMATCH)
            break;
        if (rc < 0) {
            PCRE2_UCHAR msg[160];
            if (pcre2_get_error_message(rc, msg, sizeof msg) < 0)
                snprintf((char *)msg, sizeof msg, "error %d", rc);
            sy_errmsg(e->err, e->err_size, "pre-tokenizer regex failed on a piece of %zu bytes: %s", n,
                    (const char *)msg);
            return false;
        }
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(e->md);
        size_t ms = ov[0], me = ov[1];
        if (ms < from || me < ms || me > n) { /* only \K tricks can do this */
            sy_errmsg(e->err, e->err_size, "pre-tokenizer regex reported a match outside the text");
            return false;
        }
        if (prev < ms && !push_segment(e, &count, prev, ms - prev, false))
            return false;
        if (!push_segment(e, &count, ms, me - ms, true))
            return false;
        prev = me;
        if (me == ms) { /* empty match: step over one character so the search moves on */
            if (me >= n)
                break;
            uint32_t cp;
            size_t k = utf8_seq_len((const unsigned char *)s + me, n - me, &cp);
            from = me + (k ? k : 1);
        } else {
            from = me;
        }
    }
    if (prev < n && !push_segment(e, &count, prev, n - prev, false))
        return false;
    *n_segs = count;
    return true;
}

static bool push_piece(encoder *e, int which, size_t *count, size_t off, size_t len) {
    if (!grow_array((void **)&e->pieces[which], &e->pieces_cap[which], *count + 1, sizeof(piece)))
        return enc_oom(e);
    e->pieces[which][(*count)++] = (piece){.off = off, .len = len};
    return true;
}

/* One split step on one piece (at `base` in the text), appending the resulting pieces to list `which`, with
 * the merge rules of tokenizers' SplitDelimiterBehavior; empty pieces are dropped afterwards, as there. */
static bool split_piece(encoder *e, const split_step *st, const char *text, piece in, int which, size_t *count) {
    size_t n_segs;
    if (!regex_segments(e, st->re, text + in.off, in.len, &n_segs))
        return false;
    if (st->invert)
        for (size_t i = 0; i < n_segs; i++)
            e->segs[i].is_match = !e->segs[i].is_match;
    size_t first = *count;
    bool prev_match = false;
    switch (st->behavior) {
    case SY_BPE_SPLIT_ISOLATED:
    case SY_BPE_SPLIT_REMOVED:
        for (size_t i = 0; i < n_segs; i++) {
            if (st->behavior == SY_BPE_SPLIT_REMOVED && e->segs[i].is_match)
                continue;
            if (!push_piece(e, which, count, in.off + e->segs[i].off, e->segs[i].len))
                return false;
        }
        break;
    case SY_BPE_SPLIT_CONTIGUOUS:
    case SY_BPE_SPLIT_MERGED_WITH_PREVIOUS:
        for (size_t i = 0; i < n_segs; i++) {
            const segment *sg = &e->segs[i];
            bool join = st->behavior == SY_BPE_SPLIT_CONTIGUOUS ? sg->is_match == prev_match
                                                                 : sg->is_match && !prev_match;
            if (join && *count > first) {
                piece *last = &e->pieces[which][*count - 1];
                last->len = in.off + sg->off + sg->len - last->off;
            } else if (!push_piece(e, which, count, in.off + sg->off, sg->len)) {
                return false;
            }
            prev_match = sg->is_match;
        }
        break;
    case SY_BPE_SPLIT_MERGED_WITH_NEXT:
        for (size_t i = n_segs; i-- > 0;) {
            const segment *sg = &e->segs[i];
            if (sg->is_match && !prev_match && *count > first) {
                piece *last = &e->pieces[which][*count - 1];
                last->len = last->off + last->len - (in.off + sg->off);
                last->off = in.off + sg->off;
            } else if (!push_piece(e, which, count, in.off + sg->off, sg->len)) {
                return false;
            }
            prev_match = sg->is_match;
        }
        for (size_t i = first, j = *count; i + 1 < j; i++, j--) {
            piece tmp = e->pieces[which][i];
            e->pieces[which][i] = e->pieces[which][j - 1];
            e->pieces[which][j - 1] = tmp;
        }
        break;
    }
    size_t kept = first;
    for (size_t i = first; i < *count; i++)
        if (e->pieces[which][i].len > 0)
            e->pieces[which][kept++] = e->pieces[which][i];
    *count = kept;
    return true;
}

/* --- BPE --------------------------------------------------------------------------------------------------- */

static inline bool heap_less(const heap_item *a, const heap_item *b) {
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static bool heap_push(encoder *e, size_t *n, heap_item it) {
    if (!grow_array((void **)&e->heap, &e->heap_cap, *n + 1, sizeof(heap_item)))
        return enc_oom(e);
    heap_item *h = e->heap;
    size_t i = (*n)++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!heap_less(&it, &h[parent]))
            break;
        h[i] = h[parent];
        i = parent;
    }
    h[i] = it;
    return true;
}

static heap_item heap_pop(encoder *e, size_t *n) {
    heap_item *h = e->heap;
    heap_item top = h[0];
    heap_item last = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n)
            break;
        if (c + 1 < *n && heap_less(&h[c + 1], &h[c]))
            c++;
        if (!heap_less(&h[c], &last))
            break;
        h[i] = h[c];
        i = c;
    }
    if (*n > 0)
        h[i] = last;
    return top;
}

static bool push_symbol(encoder *e, size_t *n, int32_t id) {
    if (*n >= (size_t)INT32_MAX || !grow_array((void **)&e->sym, &e->sym_cap, *n + 1, sizeof(bpe_symbol)))
        return enc_oom(e);
    e->sym[*n] = (bpe_symbol){.id = id, .prev = (int32_t)*n - 1, .next = -1, .alive = true};
    if (*n > 0)
        e->sym[*n - 1].next = (int32_t)*n;
    (*n)++;
    return true;
}

/* Merges one pre-tokenized word (raw bytes) and emits its ids. The merge order is tokenizers' Word::merge_all:
 * a priority queue of (rank, position); a popped entry is applied only if the pair at that position still
 * merges into the same token. */
static bool bpe_word(encoder *e, const unsigned char *w, size_t n) {
    const sy_bpe *t = e->t;
    if (n == 0)
        return true;
    if (t->ignore_merges) {
        if (n > SIZE_MAX / 2 - 1)
            return enc_oom(e);
        e->byte_text.len = 0;
        if (!sb_reserve(&e->byte_text, 2 * n))
            return enc_oom(e);
        e->byte_text.len = byte_level_encode(&t->alphabet, w, n, e->byte_text.data);
        int32_t id = id_table_find(&t->vocab, &t->text, e->byte_text.data, e->byte_text.len);
        if (id >= 0)
            return emit_id(e, id);
    }
    if (n == 1 && t->byte_id[w[0]] >= 0)
        return emit_id(e, t->byte_id[w[0]]);

    uint64_t h = 0;
    bool cacheable = n <= BPE_CACHE_MAX_WORD;
    if (cacheable) {
        int32_t cached[BPE_CACHE_MAX_WORD * 2];
        h = hash_bytes(w, n);
        int got = bpe_cache_get(&t->cache, w, n, h, cached);
        if (got >= 0)
            return emit_ids(e, cached, (size_t)got);
    }

    size_t n_sym = 0;
    bool pending_unk = false;
    for (size_t i = 0; i < n; i++) {
        int32_t id = t->byte_id[w[i]];
        if (id >= 0) {
            pending_unk = false;
            if (!push_symbol(e, &n_sym, id))
                return false;
            continue;
        }
        if (t->byte_fallback && t->fallback_n[w[i]] > 0) {
            pending_unk = false;
            for (size_t k = 0; k < t->fallback_n[w[i]]; k++)
                if (!push_symbol(e, &n_sym, t->fallback_id[w[i]][k]))
                    return false;
            continue;
        }
        if (t->unk_id >= 0) {
            if (!(pending_unk && t->fuse_unk) && !push_symbol(e, &n_sym, t->unk_id))
                return false;
            pending_unk = true;
        }
        /* no unknown token: the byte is dropped, as tokenizers does */
    }

    size_t n_heap = 0;
    for (size_t i = 0; i + 1 < n_sym; i++) {
        const merge_slot *m = merge_find(&t->merges, e->sym[i].id, e->sym[i + 1].id);
        if (m != NULL && !heap_push(e, &n_heap, (heap_item){.rank = m->rank, .pos = (uint32_t)i, .merged = m->merged}))
            return false;
    }
    while (n_heap > 0) {
        heap_item top = heap_pop(e, &n_heap);
        bpe_symbol *cur = &e->sym[top.pos];
        if (!cur->alive || cur->next < 0)
            continue;
        bpe_symbol *right = &e->sym[cur->next];
        const merge_slot *m = merge_find(&t->merges, cur->id, right->id);
        if (m == NULL || m->merged != top.merged)
            continue;
        cur->id = top.merged;
        right->alive = false;
        cur->next = right->next;
        if (right->next >= 0)
            e->sym[right->next].prev = (int32_t)top.pos;
        if (cur->prev >= 0) {
            const merge_slot *pm = merge_find(&t->merges, e->sym[cur->prev].id, cur->id);
            heap_item item = {.rank = pm ? pm->rank : 0, .pos = (uint32_t)cur->prev, .merged = pm ? pm->merged : 0};
            if (pm != NULL && !heap_push(e, &n_heap, item))
                return false;
        }
        if (cur->next >= 0) {
            const merge_slot *nm = merge_find(&t->merges, cur->id, e->sym[cur->next].id);
            heap_item item = {.rank = nm ? nm->rank : 0, .pos = top.pos, .merged = nm ? nm->merged : 0};
            if (nm != NULL && !heap_push(e, &n_heap, item))
                return false;
        }
    }

    if (!grow_array((void **)&e->word_ids, &e->word_ids_cap, n_sym + 1, sizeof(int32_t)))
        return enc_oom(e);
    size_t k = 0;
    for (size_t i = 0; i < n_sym; i++)
        if (e->sym[i].alive)
            e->word_ids[k++] = e->sym[i].id;
    if (cacheable && k <= BPE_CACHE_MAX_WORD * 2)
        bpe_cache_put(&t->cache, w, n, h, e->word_ids, k);
    return emit_ids(e, e->word_ids, k);
}

/* The ByteLevel step on one piece: the optional prefix space, the optional GPT-2 split, then BPE. */
static bool byte_level_piece(encoder *e, const char *s, size_t n) {
    const sy_bpe *t = e->t;
    const char *w = s;
    size_t wn = n;
    if (t->add_prefix_space && s[0] != ' ') {
        e->word.len = 0;
        if (!sb_append(&e->word, " ", 1) || !sb_append(&e->word, s, n))
            return enc_oom(e);
        w = e->word.data;
        wn = e->word.len;
    }
    if (t->byte_level_re == NULL)
        return bpe_word(e, (const unsigned char *)w, wn);
    size_t n_segs;
    if (!regex_segments(e, t->byte_level_re, w, wn, &n_segs))
        return false;
    /* bpe_word does not touch segs, so the list stays valid while we walk it */
    for (size_t i = 0; i < n_segs; i++) {
        segment sg = e->segs[i];
        if (sg.len > 0 && !bpe_word(e, (const unsigned char *)w + sg.off, sg.len))
            return false;
    }
    return true;
}

/* Pre-tokenizer splits, then ByteLevel and BPE, on one normalized piece with no added tokens in it. */
static bool encode_plain(encoder *e, const char *s, size_t n) {
    const sy_bpe *t = e->t;
    if (n == 0)
        return true;
    int cur = 0;
    size_t count = 0;
    if (!push_piece(e, cur, &count, 0, n))
        return false;
    for (size_t k = 0; k < t->n_splits; k++) {
        int next = 1 - cur;
        size_t next_count = 0;
        for (size_t i = 0; i < count; i++)
            if (!split_piece(e, &t->splits[k], s, e->pieces[cur][i], next, &next_count))
                return false;
        cur = next;
        count = next_count;
    }
    for (size_t i = 0; i < count; i++) {
        piece p = e->pieces[cur][i];
        if (!byte_level_piece(e, s + p.off, p.len))
            return false;
    }
    return true;
}

/* A piece of raw text between added tokens: normalize it, cut out normalized added tokens, encode the rest. */
static bool encode_gap(encoder *e, const char *s, size_t n) {
    const sy_bpe *t = e->t;
    if (n == 0)
        return true;
    size_t norm_len;
    bool failed;
    char *norm = bpe_normalize(t->normalization, s, n, &norm_len, &failed);
    if (failed) {
        sy_errmsg(e->err, e->err_size, "text normalization failed (out of memory?)");
        return false;
    }
    const char *x = norm ? norm : s;
    size_t xn = norm ? norm_len : n;
    bool ok = true;
    size_t cursor = 0, scan = 0, cs, ce;
    int32_t id;
    while (ok && next_added(e, &t->norm_trie, x, xn, &scan, cursor, &cs, &ce, &id)) {
        if (cursor < cs)
            ok = encode_plain(e, x + cursor, cs - cursor);
        ok = ok && emit_id(e, id);
        cursor = ce;
    }
    if (ok && cursor < xn)
        ok = encode_plain(e, x + cursor, xn - cursor);
    free(norm);
    return ok;
}

void sy_bpe_ids_free(sy_bpe_ids *ids) {
    if (ids == NULL)
        return;
    free(ids->ids);
    ids->ids = NULL;
    ids->n = ids->cap = 0;
}

bool sy_bpe_tokenize(const sy_bpe *t, const char *text, size_t len, uint32_t flags, sy_bpe_ids *out, char *err,
                     size_t err_size) {
    if (t == NULL || out == NULL || (text == NULL && len > 0)) {
        sy_errmsg(err, err_size, "tokenize: missing argument");
        return false;
    }
    size_t bad = utf8_invalid_offset(text, len);
    if (bad != len) {
        sy_errmsg(err, err_size, "text is not valid UTF-8 at byte %zu", bad);
        return false;
    }
    size_t start_n = out->n;
    encoder e = {.t = t, .parse_special = (flags & SY_TOKENIZE_PARSE_SPECIAL) != 0, .out = out, .err = err,
                 .err_size = err_size};
    e.md = pcre2_match_data_create(1, NULL);
    bool ok = e.md != NULL || enc_oom(&e);
    if (ok && (flags & SY_TOKENIZE_ADD_SPECIAL))
        ok = emit_ids(&e, t->prefix, t->n_prefix);
    size_t cursor = 0, scan = 0, cs, ce;
    int32_t id;
    while (ok && next_added(&e, &t->raw_trie, text, len, &scan, cursor, &cs, &ce, &id)) {
        if (cursor < cs)
            ok = encode_gap(&e, text + cursor, cs - cursor);
        ok = ok && emit_id(&e, id);
        cursor = ce;
    }
    if (ok && cursor < len)
        ok = encode_gap(&e, text + cursor, len - cursor);
    if (ok && (flags & SY_TOKENIZE_ADD_SPECIAL))
        ok = emit_ids(&e, t->suffix, t->n_suffix);
    free(e.pieces[0]);
    free(e.pieces[1]);
    free(e.segs);
    sb_free(&e.word);
    sb_free(&e.byte_text);
    free(e.sym);
    free(e.heap);
    free(e.word_ids);
    pcre2_match_data_free(e.md);
    pcre2_match_context_free(e.mctx);
    pcre2_jit_stack_free(e.jit_stack);
    if (!ok)
        out->n = start_n;
    return ok;
}

