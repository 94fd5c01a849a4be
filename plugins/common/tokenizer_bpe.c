/* Byte-level BPE tokenizer: see tokenizer_bpe.h for what it does and in which order.
 *
 * Layout of this file:
 *   1. helpers: errors, growable buffers, UTF-8, Unicode classes used by added-token matching
 *   2. the byte-level alphabet
 *   3. hash tables: vocabulary text -> id, merge pair -> (rank, result)
 *   4. the tokenizer struct, the builder, finishing (tries for added tokens, regex compilation)
 *   5. the word cache
 *   6. encoding: added-token split, normalization, pre-tokenizer splits, BPE merges
 *   7. accessors and decoding
 *   8. a strict streaming JSON scanner (the 151k-entry vocab and merges are read with it: cJSON would spend
 *      over 100 ms allocating ~450k nodes), cJSON for the small sections
 *   9. the tokenizer.json loader and the tokenizer_config.json reader
 */
#include "tokenizer_bpe.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pcre2.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>
#define XXH_INLINE_ALL /* the hash runs ~1M times while loading: let it inline */
#include <xxhash.h>

#include "switchyard/engine.h"
#include "errmsg.h"

/* ============================================================================================================
 * 1. Helpers
 * ========================================================================================================== */

#define BPE_MAX_JSON_BYTES ((size_t)1 << 30) /* a tokenizer.json beyond 1 GiB is not a tokenizer */
#define BPE_JSON_MAX_DEPTH 256
#define BPE_CACHE_SHARDS 16
#define BPE_CACHE_SHARD_SLOTS 4096 /* power of two */
#define BPE_CACHE_MAX_WORD 64      /* longer words are merged every time: they rarely repeat */
#define BPE_MAX_TEMPLATE 16

/* Writes a short, printable rendering of token text for error messages: quotes, escapes, cut at 40 bytes. */
static const char *show_text(char *buf, size_t cap, const char *s, size_t len) {
    size_t o = 0;
    if (cap < 8) {
        if (cap > 0)
            buf[0] = '\0';
        return buf;
    }
    buf[o++] = '"';
    for (size_t i = 0; i < len && o + 6 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        if (i >= 40) {
            buf[o++] = '.';
            buf[o++] = '.';
            buf[o++] = '.';
            break;
        }
        if (c == '"' || c == '\\') {
            buf[o++] = '\\';
            buf[o++] = (char)c;
        } else if (c < 0x20 || c == 0x7f) {
            o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", c);
        } else {
            buf[o++] = (char)c;
        }
    }
    buf[o++] = '"';
    buf[o] = '\0';
    return buf;
}

/* Grows *p (elements of `size` bytes, capacity *cap) to hold at least `need` elements. */
static bool grow_array(void **p, size_t *cap, size_t need, size_t size) {
    if (need <= *cap)
        return true;
    size_t n = *cap ? *cap : 16;
    while (n < need) {
        if (n > SIZE_MAX / 2)
            return false;
        n *= 2;
    }
    if (n > SIZE_MAX / size)
        return false;
    void *q = realloc(*p, n * size);
    if (q == NULL)
        return false;
    *p = q;
    *cap = n;
    return true;
}

typedef struct strbuf {
    char *data;
    size_t len;
    size_t cap;
} strbuf;

static bool sb_reserve(strbuf *b, size_t extra) {
    if (extra > SIZE_MAX - b->len - 1)
        return false;
    return grow_array((void **)&b->data, &b->cap, b->len + extra + 1, 1);
}

static bool sb_append(strbuf *b, const void *s, size_t n) {
    if (!sb_reserve(b, n))
        return false;
    if (n > 0)
        memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
    return true;
}

static bool sb_append_str(strbuf *b, const char *s) {
    return sb_append(b, s, strlen(s));
}

static void sb_free(strbuf *b) {
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

/* Length of the valid UTF-8 sequence at s[0..n), or 0 when it is invalid or truncated. Rejects overlong forms,
 * surrogates and code points above U+10FFFF. */
static inline size_t utf8_seq_len(const unsigned char *s, size_t n, uint32_t *cp) {
    unsigned char c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    if (c < 0xC2)
        return 0;
    if (c < 0xE0) {
        if (n < 2 || (s[1] & 0xC0) != 0x80)
            return 0;
        *cp = ((uint32_t)(c & 0x1F) << 6) | (s[1] & 0x3F);
        return 2;
    }
    if (c < 0xF0) {
        if (n < 3 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80)
            return 0;
        uint32_t v = ((uint32_t)(c & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
        if (v < 0x800 || (v >= 0xD800 && v <= 0xDFFF))
            return 0;
        *cp = v;
        return 3;
    }
    if (c < 0xF5) {
        if (n < 4 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80 || (s[3] & 0xC0) != 0x80)
            return 0;
        uint32_t v = ((uint32_t)(c & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) |
                     ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
        if (v < 0x10000 || v > 0x10FFFF)
            return 0;
        *cp = v;
        return 4;
    }
    return 0;
}

/* Offset of the first invalid byte, or len when s is valid UTF-8. */
static size_t utf8_invalid_offset(const char *s, size_t len) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < len) {
        if (u[i] < 0x80) {
            i++;
            continue;
        }
        uint32_t cp;
        size_t k = utf8_seq_len(u + i, len - i, &cp);
        if (k == 0)
            return i;
        i += k;
    }
    return len;
}

static size_t utf8_encode(uint32_t cp, char *out) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* The code point that ends at s[len-1] (s is valid UTF-8, len > 0). */
static uint32_t utf8_last_cp(const char *s, size_t len) {
    size_t i = len - 1;
    while (i > 0 && ((unsigned char)s[i] & 0xC0) == 0x80)
        i--;
    uint32_t cp = 0;
    if (utf8_seq_len((const unsigned char *)s + i, len - i, &cp) == 0)
        return 0xFFFD;
    return cp;
}

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

/* ============================================================================================================
 * 2. The byte-level alphabet: each byte is written as one code point so that every token is printable text.
 *    Printable Latin-1 bytes stand for themselves; the 68 others (controls, space, DEL, NBSP, soft hyphen)
 *    become U+0100.. in byte order.
 * ========================================================================================================== */

#define BYTE_LEVEL_CP_LIMIT 0x144 /* 256 + 68: every alphabet code point is below this */

typedef struct byte_alphabet {
    uint16_t cp_of_byte[256];
    int16_t byte_of_cp[BYTE_LEVEL_CP_LIMIT];
} byte_alphabet;

static void byte_alphabet_init(byte_alphabet *a) {
    uint32_t next = 256;
    for (int i = 0; i < BYTE_LEVEL_CP_LIMIT; i++)
        a->byte_of_cp[i] = -1;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        uint32_t cp = printable ? (uint32_t)b : next++;
        a->cp_of_byte[b] = (uint16_t)cp;
        a->byte_of_cp[cp] = (int16_t)b;
    }
}

/* Byte-level text of raw bytes (each byte -> 1 or 2 UTF-8 bytes) into out (capacity >= 2 * n). */
static size_t byte_level_encode(const byte_alphabet *a, const unsigned char *s, size_t n, char *out) {
    size_t o = 0;
    for (size_t i = 0; i < n; i++)
        o += utf8_encode(a->cp_of_byte[s[i]], out + o);
    return o;
}

/* Raw bytes of byte-level text; false when some code point is outside the alphabet (the caller then uses the
 * text itself, as tokenizers' ByteLevel decoder does). out needs len bytes. */
static bool byte_level_decode(const byte_alphabet *a, const char *s, size_t len, char *out, size_t *out_len) {
    size_t o = 0;
    size_t i = 0;
    while (i < len) {
        uint32_t cp;
        size_t k = utf8_seq_len((const unsigned char *)s + i, len - i, &cp);
        if (k == 0 || cp >= BYTE_LEVEL_CP_LIMIT || a->byte_of_cp[cp] < 0)
            return false;
        out[o++] = (char)a->byte_of_cp[cp];
        i += k;
    }
    *out_len = o;
    return true;
}

/* ============================================================================================================
 * 3. Hash tables
 * ========================================================================================================== */

static uint64_t hash_bytes(const void *s, size_t n) {
    return XXH3_64bits(s, n);
}

/* Text -> id over texts stored in a text_store. Open addressing, linear probing. A slot keeps 32 bits of the
 * hash (its home index and a quick filter: growing never rehashes text) and where the text lies, so that a
 * lookup touches the slot and the text only. */
typedef struct id_slot {
    uint32_t id_plus1; /* 0 = empty */
    uint32_t hash;
    uint32_t off;
    uint32_t len;
} id_slot;

typedef struct id_table {
    id_slot *slots;
    size_t mask; /* capacity - 1 */
    size_t count;
} id_table;

typedef struct text_store {
    char *arena;
    size_t arena_len;
    size_t arena_cap;
    uint32_t *off; /* per id */
    uint32_t *len; /* per id; UINT32_MAX = no text */
} text_store;

static inline const char *store_text(const text_store *s, uint32_t id, size_t *len) {
    *len = s->len[id];
    return s->arena + s->off[id];
}

/* Tokens are short: a byte loop beats a memcmp call for them. */
static inline bool bytes_equal(const char *a, const char *b, size_t n) {
    if (n > 16)
        return memcmp(a, b, n) == 0;
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i])
            return false;
    return true;
}

static inline void id_table_prefetch(const id_table *t, uint64_t h) {
    __builtin_prefetch(&t->slots[(uint32_t)h & t->mask]);
}

static bool id_table_init(id_table *t, size_t cap_pow2) {
    t->slots = calloc(cap_pow2, sizeof(id_slot));
    if (t->slots == NULL)
        return false;
    t->mask = cap_pow2 - 1;
    t->count = 0;
    return true;
}

static int32_t id_table_find_h(const id_table *t, const text_store *s, const char *text, size_t len, uint64_t h) {
    if (t->slots == NULL)
        return -1;
    uint32_t h32 = (uint32_t)h;
    for (size_t i = h32 & t->mask;; i = (i + 1) & t->mask) {
        const id_slot *sl = &t->slots[i];
        if (sl->id_plus1 == 0)
            return -1;
        if (sl->hash == h32 && sl->len == len && bytes_equal(s->arena + sl->off, text, len))
            return (int32_t)(sl->id_plus1 - 1);
    }
}

static int32_t id_table_find(const id_table *t, const text_store *s, const char *text, size_t len) {
    return id_table_find_h(t, s, text, len, hash_bytes(text, len));
}

static bool id_table_grow(id_table *t) {
    size_t cap = (t->mask + 1) * 2;
    if (cap > ((size_t)1 << 31))
        return false;
    id_slot *slots = calloc(cap, sizeof(id_slot));
    if (slots == NULL)
        return false;
    for (size_t i = 0; i <= t->mask; i++) {
        if (t->slots[i].id_plus1 == 0)
            continue;
        size_t j = t->slots[i].hash & (cap - 1);
        while (slots[j].id_plus1 != 0)
            j = (j + 1) & (cap - 1);
        slots[j] = t->slots[i];
    }
    free(t->slots);
    t->slots = slots;
    t->mask = cap - 1;
    return true;
}

/* Inserts id (whose text is already in the store); the caller checked that the text is not present. */
static bool id_table_insert(id_table *t, const text_store *s, uint32_t id, uint64_t h) {
    if ((t->count + 1) * 4 > (t->mask + 1) * 3 && !id_table_grow(t))
        return false;
    uint32_t h32 = (uint32_t)h;
    size_t i = h32 & t->mask;
    while (t->slots[i].id_plus1 != 0)
        i = (i + 1) & t->mask;
    t->slots[i] = (id_slot){.id_plus1 = id + 1, .hash = h32, .off = s->off[id], .len = s->len[id]};
    t->count++;
    return true;
}

/* Merge pair (left id, right id) -> (rank, merged id). */
typedef struct merge_slot {
    uint64_t key; /* MERGE_EMPTY when free */
    uint32_t rank;
    int32_t merged;
} merge_slot;

#define MERGE_EMPTY UINT64_MAX

typedef struct merge_table {
    merge_slot *slots;
    size_t mask;
    size_t count;
} merge_table;

static inline uint64_t merge_key(int32_t a, int32_t b) {
    return ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
}

static inline size_t merge_hash(uint64_t key) {
    key ^= key >> 29;
    key *= 0xBF58476D1CE4E5B9ull;
    key ^= key >> 32;
    return (size_t)key;
}

static bool merge_table_alloc(merge_table *t, size_t cap) {
    t->slots = malloc(cap * sizeof(merge_slot));
    if (t->slots == NULL)
        return false;
    for (size_t i = 0; i < cap; i++)
        t->slots[i].key = MERGE_EMPTY;
    t->mask = cap - 1;
    t->count = 0;
    return true;
}

static inline const merge_slot *merge_find(const merge_table *t, int32_t a, int32_t b) {
    if (t->count == 0)
        return NULL;
    uint64_t key = merge_key(a, b);
    for (size_t i = merge_hash(key) & t->mask;; i = (i + 1) & t->mask) {
        const merge_slot *s = &t->slots[i];
        if (s->key == key)
            return s;
        if (s->key == MERGE_EMPTY)
            return NULL;
    }
}

static bool merge_put(merge_table *t, int32_t a, int32_t b, uint32_t rank, int32_t merged) {
    if ((t->count + 1) * 4 > (t->mask + 1) * 3) {
        merge_table bigger;
        if (!merge_table_alloc(&bigger, (t->mask + 1) * 2))
            return false;
        for (size_t i = 0; i <= t->mask; i++) {
            if (t->slots[i].key == MERGE_EMPTY)
                continue;
            size_t j = merge_hash(t->slots[i].key) & bigger.mask;
            while (bigger.slots[j].key != MERGE_EMPTY)
                j = (j + 1) & bigger.mask;
            bigger.slots[j] = t->slots[i];
        }
        bigger.count = t->count;
        free(t->slots);
        *t = bigger;
    }
    uint64_t key = merge_key(a, b);
    size_t i = merge_hash(key) & t->mask;
    while (t->slots[i].key != MERGE_EMPTY && t->slots[i].key != key)
        i = (i + 1) & t->mask;
    if (t->slots[i].key == MERGE_EMPTY)
        t->count++;
    t->slots[i].key = key; /* a repeated pair keeps the later rank, like a Rust HashMap collect */
    t->slots[i].rank = rank;
    t->slots[i].merged = merged;
    return true;
}

/* ============================================================================================================
 * 4. The tokenizer, the builder, finishing
 * ========================================================================================================== */

enum { KIND_VOCAB = 1u << 0, KIND_ADDED = 1u << 1 };

typedef struct added_token {
    int32_t id;
    bool special, lstrip, rstrip, normalized, single_word;
} added_token;

/* A byte trie over added-token texts, walked at each text position for the longest match there. */
typedef struct trie_node {
    int32_t first_child;
    int32_t next_sibling;
    int32_t added; /* index into sy_bpe.added, or -1 */
    unsigned char byte;
} trie_node;

typedef struct added_trie {
    trie_node *nodes;
    size_t n_nodes;
    size_t cap;
    int32_t root[256]; /* node of each first byte, -1 */
    int only_first_byte; /* the first byte every pattern shares (scanned for with memchr), or -1 */
    bool empty;
} added_trie;

static void trie_reset(added_trie *tr) {
    for (int i = 0; i < 256; i++)
        tr->root[i] = -1;
    tr->only_first_byte = -1;
    tr->empty = true;
}

typedef struct split_step {
    pcre2_code *re;
    sy_bpe_split_behavior behavior;
    bool invert;
} split_step;

typedef struct cache_entry {
    uint64_t hash;
    uint32_t len;
    uint32_t n_ids;
    int32_t ids[]; /* n_ids ids, then len bytes of the word */
} cache_entry;

typedef struct cache_shard {
    pthread_mutex_t lock;
    cache_entry **slots; /* BPE_CACHE_SHARD_SLOTS */
    size_t count;
} cache_shard;

struct sy_bpe {
    uint32_t n_vocab; /* largest id + 1 */
    size_t ids_cap;   /* allocated length of the per-id arrays */
    text_store text;  /* token text: byte-level form for vocabulary entries, content for added tokens */
    uint8_t *kind;    /* KIND_* bits per id; 0 = unused id */
    uint32_t *flags;  /* SY_TOKEN_* bits per id */
    char *bytes;      /* decoded bytes of every token, id after id */
    uint32_t *bytes_off; /* n_vocab + 1 offsets into bytes */

    id_table vocab;    /* byte-level text -> id of vocabulary entries */
    id_table added_ix; /* content -> id of added tokens */
    merge_table merges;
    int32_t *merge_list; /* 2 ids per rank */
    size_t n_merges;
    size_t merge_list_cap;

    byte_alphabet alphabet;
    int32_t byte_id[256];          /* vocabulary id of each byte's one-character token, -1 */
    int32_t fallback_id[256][2];   /* "<0xXX>" ids for the UTF-8 of each byte's character (byte_fallback) */
    uint8_t fallback_n[256];       /* 0 when some "<0xXX>" token is missing */

    added_token *added;
    size_t n_added;
    size_t added_cap;
    added_trie raw_trie;  /* added tokens matched in the raw text */
    added_trie norm_trie; /* added tokens matched in the normalized text */

    split_step splits[SY_BPE_MAX_SPLITS];
    size_t n_splits;
    bool add_prefix_space;
    bool use_regex;
    pcre2_code *byte_level_re; /* the GPT-2 regex when use_regex */
    sy_bpe_normalization normalization;
    bool ignore_merges;
    bool byte_fallback;
    bool fuse_unk;
    int32_t unk_id;

    int32_t prefix[BPE_MAX_TEMPLATE];
    int32_t suffix[BPE_MAX_TEMPLATE];
    size_t n_prefix;
    size_t n_suffix;

    cache_shard cache[BPE_CACHE_SHARDS];
    bool cache_ready;
};

struct sy_bpe_builder {
    sy_bpe *t;
    strbuf scratch;
    int32_t last_merged; /* the token the previous merge made, -1 */
};

/* Oniguruma (the engine tokenizers uses) and PCRE2 disagree on a few classes: PCRE2's \s also matches U+180E,
 * and tokenizers' Unicode tables (16.0) know letters and digits that the PCRE2 build may not (Debian 12 has
 * Unicode 14). \s and \p{L} / \p{N} are therefore rewritten to explicit classes. The ranges below are the code
 * points that Unicode 15.0 and 16.0 added to L and N (harmless where PCRE2 already knows them). */
#define ONIG_WHITE_SPACE \
    "\\t-\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
#define UNICODE16_EXTRA_L \
    "\\x{1C89}-\\x{1C8A}\\x{A7CB}-\\x{A7CD}\\x{A7DA}-\\x{A7DC}\\x{105C0}-\\x{105F3}\\x{10D4A}-\\x{10D65}" \
    "\\x{10D6F}-\\x{10D85}\\x{10EC2}-\\x{10EC4}\\x{1123F}-\\x{11240}\\x{11380}-\\x{11389}\\x{1138B}\\x{1138E}" \
    "\\x{11390}-\\x{113B5}\\x{113B7}\\x{113D1}\\x{113D3}\\x{11BC0}-\\x{11BE0}\\x{11F02}\\x{11F04}-\\x{11F10}" \
    "\\x{11F12}-\\x{11F33}\\x{1342F}\\x{13441}-\\x{13446}\\x{13460}-\\x{143FA}\\x{16100}-\\x{1611D}" \
    "\\x{16D40}-\\x{16D6C}\\x{18CFF}\\x{1B132}\\x{1B155}\\x{1DF25}-\\x{1DF2A}\\x{1E030}-\\x{1E06D}" \
    "\\x{1E4D0}-\\x{1E4EB}\\x{1E5D0}-\\x{1E5ED}\\x{1E5F0}\\x{2B739}\\x{2EBF0}-\\x{2EE5D}\\x{31350}-\\x{323AF}"
#define UNICODE16_EXTRA_N \
    "\\x{10D40}-\\x{10D49}\\x{116D0}-\\x{116E3}\\x{11BF0}-\\x{11BF9}\\x{11F50}-\\x{11F59}\\x{16130}-\\x{16139}" \
    "\\x{16D70}-\\x{16D79}\\x{1CCF0}-\\x{1CCF9}\\x{1D2C0}-\\x{1D2D3}\\x{1E4F0}-\\x{1E4F9}\\x{1E5F1}-\\x{1E5FA}"

/* The regex of tokenizers' ByteLevel pre-tokenizer (use_regex), GPT-2's. */
static const char GPT2_REGEX[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
static const char QWEN2_REGEX[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
                                  "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char SMOLLM_DIGITS_REGEX[] = "\\p{N}";
static const char LLAMA3_REGEX[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
                                   "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/* Rewrites \s, \S, \p{L}, \P{L}, \p{N}, \P{N} as described above; everything else is copied. Inside a
 * character class only the positive forms can be widened (a negated item cannot be unioned), so \S and \P{..}
 * stay as PCRE2 reads them there. */
static bool translate_regex(const char *pat, size_t len, strbuf *out) {
    bool in_class = false;
    size_t class_start = 0;
    size_t i = 0;
    while (i < len) {
        char c = pat[i];
        if (c == '\\' && i + 1 < len) {
            char n = pat[i + 1];
            if (n == 's') {
                if (!sb_append_str(out, in_class ? ONIG_WHITE_SPACE : "[" ONIG_WHITE_SPACE "]"))
                    return false;
                i += 2;
                continue;
            }
            if (n == 'S' && !in_class) {
                if (!sb_append_str(out, "[^" ONIG_WHITE_SPACE "]"))
                    return false;
                i += 2;
                continue;
            }
            if ((n == 'p' || n == 'P') && i + 2 < len) {
                /* \pL, \p{L}, \p{^L} */
                char prop = 0;
                bool negated = (n == 'P');
                size_t used = 0;
                if (pat[i + 2] == 'L' || pat[i + 2] == 'N') {
                    prop = pat[i + 2];
                    used = 3;
                } else if (pat[i + 2] == '{') {
                    size_t j = i + 3;
                    bool caret = false;
                    if (j < len && pat[j] == '^') {
                        caret = true;
                        j++;
                    }
                    if (j + 1 < len && (pat[j] == 'L' || pat[j] == 'N') && pat[j + 1] == '}') {
                        prop = pat[j];
                        negated = negated != caret;
                        used = j + 2 - i;
                    }
                }
                if (prop != 0 && !(negated && in_class)) {
                    const char *extra = prop == 'L' ? UNICODE16_EXTRA_L : UNICODE16_EXTRA_N;
                    const char *base = prop == 'L' ? "\\p{L}" : "\\p{N}";
                    bool ok = true;
                    if (!in_class)
                        ok = sb_append_str(out, negated ? "[^" : "[");
                    ok = ok && sb_append_str(out, base) && sb_append_str(out, extra);
                    if (!in_class)
                        ok = ok && sb_append_str(out, "]");
                    if (!ok)
                        return false;
                    i += used;
                    continue;
                }
            }
            if (n == 'Q') { /* \Q...\E is literal text: copy it through untouched */
                const char *e = NULL;
                for (size_t j = i + 2; j + 1 < len; j++) {
                    if (pat[j] == '\\' && pat[j + 1] == 'E') {
                        e = pat + j;
                        break;
                    }
                }
                size_t upto = e ? (size_t)(e - pat) + 2 : len;
                if (!sb_append(out, pat + i, upto - i))
                    return false;
                i = upto;
                continue;
            }
            if (!sb_append(out, pat + i, 2))
                return false;
            i += 2;
            continue;
        }
        if (!in_class && c == '[') {
            in_class = true;
            if (!sb_append(out, pat + i, 1))
                return false;
            i++;
            if (i < len && pat[i] == '^') {
                if (!sb_append(out, pat + i, 1))
                    return false;
                i++;
            }
            class_start = i;
            if (i < len && pat[i] == ']') { /* a ']' first in a class is literal */
                if (!sb_append(out, pat + i, 1))
                    return false;
                i++;
            }
            continue;
        }
        if (in_class && c == '[' && i + 1 < len && pat[i + 1] == ':') { /* [:alpha:] */
            const char *e = NULL;
            for (size_t j = i + 2; j + 1 < len; j++) {
                if (pat[j] == ':' && pat[j + 1] == ']') {
                    e = pat + j;
                    break;
                }
            }
            size_t upto = e ? (size_t)(e - pat) + 2 : i + 1;
            if (!sb_append(out, pat + i, upto - i))
                return false;
            i = upto;
            continue;
        }
        if (in_class && c == ']' && i > class_start)
            in_class = false;
        if (!sb_append(out, pat + i, 1))
            return false;
        i++;
    }
    return true;
}

static pcre2_code *compile_pattern(const char *pattern, size_t len, bool is_regex, char *err, size_t err_size) {
    char shown[128];
    if (len == 0) {
        sy_errmsg(err, err_size, "empty split pattern");
        return NULL;
    }
    if (utf8_invalid_offset(pattern, len) != len) {
        sy_errmsg(err, err_size, "split pattern %s is not valid UTF-8", show_text(shown, sizeof shown, pattern, len));
        return NULL;
    }
    strbuf tr = {0};
    const char *src = pattern;
    size_t src_len = len;
    uint32_t options = PCRE2_UTF;
    if (is_regex) {
        if (!translate_regex(pattern, len, &tr)) {
            sb_free(&tr);
            sy_errmsg(err, err_size, "out of memory");
            return NULL;
        }
        src = tr.data;
        src_len = tr.len;
        options |= PCRE2_UCP | PCRE2_NEVER_BACKSLASH_C;
    } else {
        options |= PCRE2_LITERAL;
    }
    int code = 0;
    PCRE2_SIZE where = 0;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)src, src_len, options, &code, &where, NULL);
    sb_free(&tr);
    if (re == NULL) {
        PCRE2_UCHAR msg[160];
        if (pcre2_get_error_message(code, msg, sizeof msg) < 0)
            snprintf((char *)msg, sizeof msg, "error %d", code);
        sy_errmsg(err, err_size, "split regex %s does not compile: %s", show_text(shown, sizeof shown, pattern, len),
                (const char *)msg);
        return NULL;
    }
    (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* without JIT the interpreter runs it */
    return re;
}

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

static void trie_free(added_trie *tr) {
    free(tr->nodes);
    tr->nodes = NULL;
}

static void cache_destroy(sy_bpe *t);

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
    cache_destroy(t);
    free(t);
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

/* Grows an id table to hold n entries without rehashing later: one allocation of the final size. */
static bool id_table_reserve(id_table *t, size_t n) {
    size_t cap = t->mask + 1;
    while (n * 4 > cap * 3) {
        if (cap > ((size_t)1 << 30))
            return false;
        cap *= 2;
    }
    if (cap == t->mask + 1)
        return true;
    if (t->count > 0) {
        while (t->mask + 1 < cap)
            if (!id_table_grow(t))
                return false;
        return true;
    }
    id_slot *slots = calloc(cap, sizeof(id_slot));
    if (slots == NULL)
        return false;
    free(t->slots);
    t->slots = slots;
    t->mask = cap - 1;
    return true;
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
        sy_errmsg(err, err_size, "token %s has id %d, outside 0..%u", show_text(shown, sizeof shown, text, len), id,
                SY_BPE_MAX_TOKENS - 1);
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
        sy_errmsg(err, err_size, "id %d is given to both %s and %s", id, show_text(other, sizeof other, o, ol),
                show_text(shown, sizeof shown, text, len));
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
                    show_text(shown, sizeof shown, text, len), sl->id_plus1 - 1, id);
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
                a < 0 ? show_text(shown, sizeof shown, left, left_len)
                      : show_text(shown, sizeof shown, right, right_len));
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
                show_text(shown, sizeof shown, left, left_len), show_text(shown2, sizeof shown2, right, right_len),
                show_text(shown3, sizeof shown3, b->scratch.data, b->scratch.len));
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

/* Splits "left right" at its one space; false when the line is not of that shape. */
static bool split_merge_line(const char *line, size_t len, size_t *left_len) {
    const char *sp = memchr(line, ' ', len);
    if (sp == NULL || sp == line || sp + 1 == line + len || memchr(sp + 1, ' ', len - (size_t)(sp + 1 - line)))
        return false;
    *left_len = (size_t)(sp - line);
    return true;
}

bool sy_bpe_builder_add_merge_line(sy_bpe_builder *b, const char *line, size_t len, char *err, size_t err_size) {
    size_t left_len;
    char shown[128];
    if (!split_merge_line(line, len, &left_len)) {
        sy_errmsg(err, err_size, "merge %s is not two tokens separated by one space",
                show_text(shown, sizeof shown, line, len));
        return false;
    }
    return sy_bpe_builder_add_merge(b, line, left_len, line + left_len + 1, len - left_len - 1, err, err_size);
}

/* The bulk adders work in batches: the hash-table slots of a whole batch are prefetched before any is probed, so
 * the cache misses of a 150k-entry table overlap instead of queueing one after another. */
#define ADD_BATCH 64

/* Vocabulary entries texts[i] with ids[i] (or first_id + i when ids is NULL). utf8_checked as for add_token. On
 * failure *failed is the index of the entry that failed; the ones before it were added. */
static bool add_tokens_batched(sy_bpe_builder *b, const char *const *texts, const size_t *lens, const int32_t *ids,
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

/* Merges lefts[i] + rights[i] in order (ranks follow). On failure *failed is the index that failed; the ones
 * before it were added. */
static bool add_merges_batched(sy_bpe_builder *b, const char *const *lefts, const size_t *left_lens,
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
    return add_tokens_batched(b, texts, lens, NULL, first_id, n, false, &failed, err, err_size);
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
            if (!split_merge_line(line, len, &split))
                break;
            lefts[good] = line;
            left_lens[good] = split;
            rights[good] = line + split + 1;
            right_lens[good] = len - split - 1;
        }
        /* the lines before a malformed one are added first, so that an earlier error is the one reported */
        if (!add_merges_batched(b, lefts, left_lens, rights, right_lens, good, &failed_at, err, err_size)) {
            if (failed)
                *failed = start + failed_at;
            return false;
        }
        if (good < m) {
            if (failed)
                *failed = start + good;
            sy_errmsg(err, err_size, "merge %s is not two tokens separated by one space",
                    show_text(shown, sizeof shown, lines[start + good], lens[start + good]));
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
    show_text(shown, sizeof shown, text, len);
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
                    show_text(other, sizeof other, o, ol));
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
    pcre2_code *re = compile_pattern(pattern, len, is_regex, err, err_size);
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
                show_text(shown, sizeof shown, unk_text, len));
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

/* The normalized form of s (NULL + *n_out 0 when unchanged or on error: *failed tells them apart).
 *
 * Only the non-ASCII runs go through utf8proc, each with the ASCII character before it: an ASCII character has
 * combining class 0, never decomposes and is never the second half of a composition, so the normal form of a
 * text is the concatenation of the normal forms of the pieces cut just before ASCII characters. Mostly-ASCII
 * text (English, code) then costs a copy instead of a decomposition of every character. */
static char *normalize_text(sy_bpe_normalization nf, const char *s, size_t n, size_t *n_out, bool *failed) {
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

static void cache_init(sy_bpe *t);

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
                char *norm = normalize_text(t->normalization, s, len, &nlen, &failed);
                if (failed) {
                    sy_errmsg(err, err_size, "added token %s cannot be normalized",
                            show_text(shown, sizeof shown, s, len));
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
        t->byte_level_re = compile_pattern(GPT2_REGEX, strlen(GPT2_REGEX), true, err, err_size);
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
    cache_init(t);
    return t;
fail:
    sy_bpe_free(t);
    return NULL;
}

/* ============================================================================================================
 * 5. The word cache: word bytes -> ids, sharded so that concurrent tokenize calls rarely wait on each other.
 *    A full shard is emptied: simple, and a working set that fits keeps hitting.
 * ========================================================================================================== */

static void cache_init(sy_bpe *t) {
    for (int i = 0; i < BPE_CACHE_SHARDS; i++) {
        pthread_mutex_init(&t->cache[i].lock, NULL);
        t->cache[i].slots = NULL; /* allocated on first insert */
        t->cache[i].count = 0;
    }
    t->cache_ready = true;
}

static void cache_shard_clear(cache_shard *s) {
    if (s->slots == NULL)
        return;
    for (size_t i = 0; i < BPE_CACHE_SHARD_SLOTS; i++) {
        free(s->slots[i]);
        s->slots[i] = NULL;
    }
    s->count = 0;
}

static void cache_destroy(sy_bpe *t) {
    if (!t->cache_ready)
        return;
    for (int i = 0; i < BPE_CACHE_SHARDS; i++) {
        cache_shard_clear(&t->cache[i]);
        free(t->cache[i].slots);
        pthread_mutex_destroy(&t->cache[i].lock);
    }
    t->cache_ready = false;
}

/* Copies the cached ids of a word into out (capacity BPE_CACHE_MAX_WORD); returns their count or -1. */
static int cache_get(const sy_bpe *t, const unsigned char *w, size_t n, uint64_t h, int32_t *out) {
    cache_shard *s = (cache_shard *)&t->cache[h % BPE_CACHE_SHARDS];
    int found = -1;
    pthread_mutex_lock(&s->lock);
    if (s->slots != NULL) {
        for (size_t i = (size_t)(h >> 8) & (BPE_CACHE_SHARD_SLOTS - 1);; i = (i + 1) & (BPE_CACHE_SHARD_SLOTS - 1)) {
            const cache_entry *e = s->slots[i];
            if (e == NULL)
                break;
            if (e->hash == h && e->len == n && memcmp((const char *)(e->ids + e->n_ids), w, n) == 0) {
                memcpy(out, e->ids, e->n_ids * sizeof(int32_t));
                found = (int)e->n_ids;
                break;
            }
        }
    }
    pthread_mutex_unlock(&s->lock);
    return found;
}

static void cache_put(const sy_bpe *t, const unsigned char *w, size_t n, uint64_t h, const int32_t *ids,
                      size_t n_ids) {
    cache_shard *s = (cache_shard *)&t->cache[h % BPE_CACHE_SHARDS];
    cache_entry *e = malloc(sizeof *e + n_ids * sizeof(int32_t) + n);
    if (e == NULL)
        return; /* the cache is an optimisation: skip it */
    e->hash = h;
    e->len = (uint32_t)n;
    e->n_ids = (uint32_t)n_ids;
    memcpy(e->ids, ids, n_ids * sizeof(int32_t));
    memcpy((char *)(e->ids + n_ids), w, n);
    pthread_mutex_lock(&s->lock);
    if (s->slots == NULL)
        s->slots = calloc(BPE_CACHE_SHARD_SLOTS, sizeof *s->slots);
    if (s->slots == NULL) {
        pthread_mutex_unlock(&s->lock);
        free(e);
        return;
    }
    if (s->count + 1 > BPE_CACHE_SHARD_SLOTS * 3 / 4)
        cache_shard_clear(s);
    size_t i = (size_t)(h >> 8) & (BPE_CACHE_SHARD_SLOTS - 1);
    for (;; i = (i + 1) & (BPE_CACHE_SHARD_SLOTS - 1)) {
        cache_entry *o = s->slots[i];
        if (o == NULL)
            break;
        if (o->hash == h && o->len == n && memcmp((const char *)(o->ids + o->n_ids), w, n) == 0) {
            free(e); /* another thread put it meanwhile */
            e = NULL;
            break;
        }
    }
    if (e != NULL) {
        s->slots[i] = e;
        s->count++;
    }
    pthread_mutex_unlock(&s->lock);
}

/* ============================================================================================================
 * 6. Encoding
 * ========================================================================================================== */

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
        int got = cache_get(t, w, n, h, cached);
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
        cache_put(t, w, n, h, e->word_ids, k);
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
    char *norm = normalize_text(t->normalization, s, n, &norm_len, &failed);
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

/* ============================================================================================================
 * 7. Accessors and decoding
 * ========================================================================================================== */

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

/* ============================================================================================================
 * 8. A strict JSON scanner (RFC 8259; strings must be valid UTF-8 without lone surrogates, as serde_json
 *    requires). It reads the big vocab and merges directly and validates everything else while skipping it,
 *    recording where each section lies so that cJSON can parse just that section.
 * ========================================================================================================== */

typedef struct jscan {
    const char *base; /* start of the whole document: offsets in messages count from here */
    const char *p;
    const char *end;
    char *err;
    size_t err_size;
    bool saw_nul; /* some string held U+0000 (cJSON would cut it short there) */
} jscan;

typedef struct json_span {
    const char *p;
    size_t len;
    bool present;
    bool saw_nul;
} json_span;

static bool jfail(jscan *j, const char *what) {
    sy_errmsg(j->err, j->err_size, "invalid JSON at byte %zu: %s", (size_t)(j->p - j->base), what);
    return false;
}

static inline bool is_json_space(char c) {
    /* one compare rejects every byte above ' ', which is nearly every non-space byte */
    return (unsigned char)c <= ' ' && (c == ' ' || c == '\n' || c == '\r' || c == '\t');
}

static inline void jws(jscan *j) {
    const char *p = j->p, *end = j->end;
    while (p < end && is_json_space(*p))
        p++;
    j->p = p;
}

static bool jpeek(const jscan *j, char c) {
    return j->p < j->end && *j->p == c;
}

static bool jexpect(jscan *j, char c, const char *what) {
    jws(j);
    if (!jpeek(j, c))
        return jfail(j, what);
    j->p++;
    return true;
}

static int hex_digit(char c) {
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static bool jhex4(jscan *j, uint32_t *v) {
    if (j->end - j->p < 4)
        return jfail(j, "truncated \\u escape");
    uint32_t x = 0;
    for (int i = 0; i < 4; i++) {
        int d = hex_digit(j->p[i]);
        if (d < 0)
            return jfail(j, "bad hex digit in a \\u escape");
        x = (x << 4) | (uint32_t)d;
    }
    j->p += 4;
    *v = x;
    return true;
}

/* A string at j->p; its decoded UTF-8 is appended to out (NULL: validate only). */
static bool jstring(jscan *j, strbuf *out) {
    if (!jpeek(j, '"'))
        return jfail(j, "expected a string");
    j->p++;
    for (;;) {
        const char *run = j->p;
        while (j->p < j->end) {
            unsigned char c = (unsigned char)*j->p;
            if (c == '"' || c == '\\' || c < 0x20 || c >= 0x80)
                break;
            j->p++;
        }
        if (out != NULL && j->p > run && !sb_append(out, run, (size_t)(j->p - run)))
            return jfail(j, "out of memory");
        if (j->p >= j->end)
            return jfail(j, "unterminated string");
        unsigned char c = (unsigned char)*j->p;
        if (c == '"') {
            j->p++;
            return true;
        }
        if (c < 0x20)
            return jfail(j, "control character inside a string");
        if (c >= 0x80) {
            uint32_t cp;
            size_t k = utf8_seq_len((const unsigned char *)j->p, (size_t)(j->end - j->p), &cp);
            if (k == 0)
                return jfail(j, "invalid UTF-8 inside a string");
            if (out != NULL && !sb_append(out, j->p, k))
                return jfail(j, "out of memory");
            j->p += k;
            continue;
        }
        /* an escape */
        if (j->end - j->p < 2)
            return jfail(j, "unterminated escape");
        char esc = j->p[1];
        char ch;
        switch (esc) {
        case '"': ch = '"'; break;
        case '\\': ch = '\\'; break;
        case '/': ch = '/'; break;
        case 'b': ch = '\b'; break;
        case 'f': ch = '\f'; break;
        case 'n': ch = '\n'; break;
        case 'r': ch = '\r'; break;
        case 't': ch = '\t'; break;
        case 'u': {
            j->p += 2;
            uint32_t cp;
            if (!jhex4(j, &cp))
                return false;
            if (cp >= 0xDC00 && cp <= 0xDFFF)
                return jfail(j, "lone low surrogate in a \\u escape");
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                uint32_t lo;
                if (j->end - j->p < 2 || j->p[0] != '\\' || j->p[1] != 'u')
                    return jfail(j, "lone high surrogate in a \\u escape");
                j->p += 2;
                if (!jhex4(j, &lo))
                    return false;
                if (lo < 0xDC00 || lo > 0xDFFF)
                    return jfail(j, "high surrogate not followed by a low one");
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            if (cp == 0)
                j->saw_nul = true;
            char u8[4];
            size_t k = utf8_encode(cp, u8);
            if (out != NULL && !sb_append(out, u8, k))
                return jfail(j, "out of memory");
            continue;
        }
        default:
            return jfail(j, "unknown escape in a string");
        }
        if (out != NULL && !sb_append(out, &ch, 1))
            return jfail(j, "out of memory");
        j->p += 2;
    }
}

/* Bytes that end a plain run inside a string: the quote, the backslash, controls, and non-ASCII (checked as
 * UTF-8). One table load per byte instead of four compares. */
static const unsigned char json_string_stop[256] = {
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
};

/* A string at j->p without copying when it has no escapes: *s points into the document then, else into buf
 * (which holds the decoded text). Valid until the next use of buf. */
static bool jstring_view(jscan *j, strbuf *buf, const char **s, size_t *n) {
    if (!jpeek(j, '"'))
        return jfail(j, "expected a string");
    const char *start = j->p + 1;
    const char *p = start;
    const char *end = j->end;
    for (;;) {
        while (p < end && !json_string_stop[(unsigned char)*p])
            p++;
        if (p >= end || (unsigned char)*p < 0x20 || *p == '\\')
            break; /* errors and escapes: the decoding reader handles (and reports) them */
        if (*p == '"') {
            *s = start;
            *n = (size_t)(p - start);
            j->p = p + 1;
            return true;
        }
        /* two-byte characters (the byte-level alphabet's "Ġ", "Ċ", ...) are most of the non-ASCII */
        unsigned char c0 = (unsigned char)p[0];
        if (c0 >= 0xC2 && c0 <= 0xDF && end - p >= 2 && ((unsigned char)p[1] & 0xC0) == 0x80) {
            p += 2;
            continue;
        }
        uint32_t cp;
        size_t k = utf8_seq_len((const unsigned char *)p, (size_t)(end - p), &cp);
        if (k == 0)
            break;
        p += k;
    }
    buf->len = 0;
    if (!jstring(j, buf))
        return false;
    *s = buf->data ? buf->data : "";
    *n = buf->len;
    return true;
}

static bool is_digit(char c) {
    return c >= '0' && c <= '9';
}

/* A number at j->p. *uint_value is set when it is a plain non-negative integer (no sign, fraction or
 * exponent) that fits below 2^53; otherwise *is_uint is false. */
static bool jnumber(jscan *j, bool *is_uint, uint64_t *uint_value) {
    bool plain = true;
    uint64_t v = 0;
    if (jpeek(j, '-')) {
        plain = false;
        j->p++;
    }
    if (jpeek(j, '0')) {
        j->p++;
    } else if (j->p < j->end && *j->p >= '1' && *j->p <= '9') {
        while (j->p < j->end && is_digit(*j->p)) {
            if (v > ((uint64_t)1 << 53))
                plain = false;
            else
                v = v * 10 + (uint64_t)(*j->p - '0');
            j->p++;
        }
    } else {
        return jfail(j, "invalid number");
    }
    if (jpeek(j, '.')) {
        plain = false;
        j->p++;
        if (j->p >= j->end || !is_digit(*j->p))
            return jfail(j, "invalid number: no digit after '.'");
        while (j->p < j->end && is_digit(*j->p))
            j->p++;
    }
    if (j->p < j->end && (*j->p == 'e' || *j->p == 'E')) {
        plain = false;
        j->p++;
        if (j->p < j->end && (*j->p == '+' || *j->p == '-'))
            j->p++;
        if (j->p >= j->end || !is_digit(*j->p))
            return jfail(j, "invalid number: no digit in the exponent");
        while (j->p < j->end && is_digit(*j->p))
            j->p++;
    }
    if (j->p < j->end && (is_digit(*j->p) || *j->p == '.' || *j->p == 'e' || *j->p == 'E'))
        return jfail(j, "invalid number");
    *is_uint = plain && v <= ((uint64_t)1 << 53);
    *uint_value = v;
    return true;
}

static bool jliteral(jscan *j) {
    static const char *const words[] = {"true", "false", "null"};
    for (int i = 0; i < 3; i++) {
        size_t n = strlen(words[i]);
        if ((size_t)(j->end - j->p) >= n && memcmp(j->p, words[i], n) == 0) {
            j->p += n;
            if (j->p < j->end && ((*j->p >= 'a' && *j->p <= 'z') || (*j->p >= 'A' && *j->p <= 'Z')))
                return jfail(j, "unexpected characters after a literal");
            return true;
        }
    }
    return jfail(j, "unexpected character");
}

/* Skips one value (validating it), without recursion. */
static bool jskip(jscan *j) {
    char stack[BPE_JSON_MAX_DEPTH];
    size_t depth = 0;
    for (;;) {
        /* a value is expected here */
        jws(j);
        if (j->p >= j->end)
            return jfail(j, "unexpected end of input");
        char c = *j->p;
        if (c == '{' || c == '[') {
            if (depth >= BPE_JSON_MAX_DEPTH)
                return jfail(j, "nesting deeper than 256 levels");
            stack[depth++] = c;
            j->p++;
            jws(j);
            if (jpeek(j, c == '{' ? '}' : ']')) { /* empty: it is a complete value */
                j->p++;
                depth--;
            } else if (c == '{') {
                if (!jstring(j, NULL) || !jexpect(j, ':', "expected ':' after an object key"))
                    return false;
                continue;
            } else {
                continue;
            }
        } else if (c == '"') {
            if (!jstring(j, NULL))
                return false;
        } else if (c == '-' || is_digit(c)) {
            bool u;
            uint64_t v;
            if (!jnumber(j, &u, &v))
                return false;
        } else if (!jliteral(j)) {
            return false;
        }
        /* after a value: close containers or move to the next element */
        for (;;) {
            if (depth == 0)
                return true;
            jws(j);
            if (j->p >= j->end)
                return jfail(j, "unexpected end of input");
            char top = stack[depth - 1];
            if (*j->p == ',') {
                j->p++;
                if (top == '{') {
                    jws(j);
                    if (!jstring(j, NULL) || !jexpect(j, ':', "expected ':' after an object key"))
                        return false;
                }
                break;
            }
            if (*j->p == (top == '{' ? '}' : ']')) {
                j->p++;
                depth--;
                continue;
            }
            return jfail(j, top == '{' ? "expected ',' or '}'" : "expected ',' or ']'");
        }
    }
}

/* Records the extent of the value at j->p (skipping it). */
static bool jspan(jscan *j, json_span *s) {
    jws(j);
    bool nul_before = j->saw_nul;
    j->saw_nul = false;
    const char *start = j->p;
    if (!jskip(j))
        return false;
    s->p = start;
    s->len = (size_t)(j->p - start);
    s->present = true;
    s->saw_nul = j->saw_nul;
    j->saw_nul = nul_before || j->saw_nul;
    return true;
}

/* Iterates the members of an object: call with *first true; returns false at the closing brace (or on error,
 * with *failed set), true with the key in (*key, *key_len) (see jstring_view) and j->p at the value. */
static bool jnext_member(jscan *j, bool *first, strbuf *buf, const char **key, size_t *key_len, bool *failed) {
    *failed = false;
    jws(j);
    if (*first) {
        *first = false;
        if (!jpeek(j, '{')) {
            *failed = true;
            return jfail(j, "expected an object");
        }
        j->p++;
        jws(j);
        if (jpeek(j, '}')) {
            j->p++;
            return false;
        }
    } else {
        if (jpeek(j, '}')) {
            j->p++;
            return false;
        }
        if (!jpeek(j, ',')) {
            *failed = true;
            return jfail(j, "expected ',' or '}'");
        }
        j->p++;
        jws(j);
    }
    if (!jstring_view(j, buf, key, key_len) || !jexpect(j, ':', "expected ':' after an object key")) {
        *failed = true;
        return false;
    }
    jws(j);
    return true;
}

/* ============================================================================================================
 * 9. tokenizer.json and tokenizer_config.json
 * ========================================================================================================== */

static bool read_whole_file(const char *path, char **data, size_t *len, char *err, size_t err_size) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        sy_errmsg(err, err_size, "%s: cannot open: %s", path, strerror(errno));
        return false;
    }
    strbuf b = {0};
    bool ok = true;
    /* size the buffer once from the file size (a pipe or a growing file still works: the loop appends) */
    if (fseek(f, 0, SEEK_END) == 0) {
        long size = ftell(f);
        if (size > 0 && (unsigned long)size <= BPE_MAX_JSON_BYTES && !sb_reserve(&b, (size_t)size + 1))
            ok = false;
        rewind(f);
    }
    while (ok) {
        if (!sb_reserve(&b, 65536)) {
            ok = false;
            break;
        }
        size_t n = fread(b.data + b.len, 1, b.cap - b.len - 1, f);
        if (n == 0)
            break;
        b.len += n;
        if (b.len > BPE_MAX_JSON_BYTES) {
            sy_errmsg(err, err_size, "%s: larger than %zu bytes", path, BPE_MAX_JSON_BYTES);
            fclose(f);
            sb_free(&b);
            return false;
        }
    }
    if (!ok)
        sy_errmsg(err, err_size, "%s: out of memory", path);
    else if (ferror(f)) {
        sy_errmsg(err, err_size, "%s: read error", path);
        ok = false;
    }
    fclose(f);
    if (!ok) {
        sb_free(&b);
        return false;
    }
    *data = b.data;
    *len = b.len;
    return true;
}

/* Where the sections of a tokenizer.json lie, and the model's small options. */
typedef struct json_doc {
    json_span version, added_tokens, normalizer, pre_tokenizer, post_processor, decoder;
    json_span type, dropout, unk_token, prefix, suffix, fuse_unk, byte_fallback, ignore_merges;
    json_span merges;
    bool have_model, have_vocab;
} json_doc;

static bool key_is(const char *key, size_t len, const char *name) {
    return len == strlen(name) && memcmp(key, name, len) == 0;
}

/* The vocab and merges are added in batches: the hash-table slots of a whole batch are prefetched before any is
 * probed, so the cache misses of a 150k-entry table overlap instead of queueing one after another. */
#define LOAD_BATCH 64

typedef struct text_ref {
    const char *p;    /* into the document, or NULL when the text is in the batch arena */
    size_t arena_off;
    size_t len;
} text_ref;

typedef struct load_batch {
    text_ref left[LOAD_BATCH], right[LOAD_BATCH];
    int32_t ids[LOAD_BATCH];
    size_t n;
    size_t first_index; /* position of left[0] in the JSON array or object */
    strbuf arena;       /* decoded copies of strings that had escapes */
} load_batch;

/* Keeps a string returned by jstring_view until the batch is flushed. */
static bool batch_keep(load_batch *lb, const jscan *j, text_ref *r, const char *s, size_t len) {
    r->len = len;
    if (s >= j->base && s < j->end) {
        r->p = s;
        return true;
    }
    r->p = NULL;
    r->arena_off = lb->arena.len;
    return sb_append(&lb->arena, s, len);
}

static const char *batch_text(const load_batch *lb, const text_ref *r) {
    return r->p ? r->p : lb->arena.data + r->arena_off;
}

static bool flush_vocab(load_batch *lb, sy_bpe_builder *b, jscan *j) {
    const char *texts[LOAD_BATCH];
    size_t lens[LOAD_BATCH], failed;
    char inner[256];
    for (size_t i = 0; i < lb->n; i++) {
        texts[i] = batch_text(lb, &lb->left[i]);
        lens[i] = lb->left[i].len;
    }
    if (!add_tokens_batched(b, texts, lens, lb->ids, 0, lb->n, true, &failed, inner, sizeof inner)) {
        sy_errmsg(j->err, j->err_size, "model.vocab: %s", inner);
        return false;
    }
    lb->first_index += lb->n;
    lb->n = 0;
    lb->arena.len = 0;
    return true;
}

static bool flush_merges(load_batch *lb, sy_bpe_builder *b, jscan *j) {
    const char *lefts[LOAD_BATCH], *rights[LOAD_BATCH];
    size_t left_lens[LOAD_BATCH], right_lens[LOAD_BATCH], failed;
    char inner[400];
    for (size_t i = 0; i < lb->n; i++) {
        lefts[i] = batch_text(lb, &lb->left[i]);
        left_lens[i] = lb->left[i].len;
        rights[i] = batch_text(lb, &lb->right[i]);
        right_lens[i] = lb->right[i].len;
    }
    if (!add_merges_batched(b, lefts, left_lens, rights, right_lens, lb->n, &failed, inner, sizeof inner)) {
        sy_errmsg(j->err, j->err_size, "model.merges[%zu]: %s", lb->first_index + failed, inner);
        return false;
    }
    lb->first_index += lb->n;
    lb->n = 0;
    lb->arena.len = 0;
    return true;
}

static bool parse_vocab(jscan *j, sy_bpe_builder *b) {
    strbuf key = {0};
    load_batch *lb = calloc(1, sizeof *lb);
    bool first = true, failed = false, ok = lb != NULL;
    const char *k;
    size_t kn;
    if (!ok)
        sy_errmsg(j->err, j->err_size, "out of memory");
    while (ok && jnext_member(j, &first, &key, &k, &kn, &failed)) {
        bool is_uint;
        uint64_t id;
        char shown[128];
        if (!(jpeek(j, '-') || (j->p < j->end && is_digit(*j->p)))) {
            sy_errmsg(j->err, j->err_size, "model.vocab: the id of %s is not a number",
                    show_text(shown, sizeof shown, k, kn));
            ok = false;
            break;
        }
        if (!jnumber(j, &is_uint, &id)) {
            ok = false;
            break;
        }
        if (!is_uint || id >= SY_BPE_MAX_TOKENS) {
            sy_errmsg(j->err, j->err_size, "model.vocab: the id of %s is not an integer in 0..%u",
                    show_text(shown, sizeof shown, k, kn), SY_BPE_MAX_TOKENS - 1);
            ok = false;
            break;
        }
        lb->ids[lb->n] = (int32_t)id;
        if (!batch_keep(lb, j, &lb->left[lb->n], k, kn)) {
            sy_errmsg(j->err, j->err_size, "out of memory");
            ok = false;
            break;
        }
        if (++lb->n == LOAD_BATCH)
            ok = flush_vocab(lb, b, j);
    }
    ok = ok && !failed && flush_vocab(lb, b, j);
    if (lb != NULL)
        sb_free(&lb->arena);
    free(lb);
    sb_free(&key);
    return ok;
}

static bool parse_merges(jscan *j, sy_bpe_builder *b) {
    strbuf left_buf = {0}, right_buf = {0};
    load_batch *lb = calloc(1, sizeof *lb);
    if (lb == NULL) {
        sy_errmsg(j->err, j->err_size, "out of memory");
        return false;
    }
    bool ok = jexpect(j, '[', "model.merges: expected an array");
    jws(j);
    if (ok && jpeek(j, ']')) {
        j->p++;
        free(lb);
        return true;
    }
    while (ok) {
        jws(j);
        const char *left = NULL, *right = NULL;
        size_t left_len = 0, right_len = 0;
        size_t index = lb->first_index + lb->n;
        if (jpeek(j, '"')) {
            size_t split;
            ok = jstring_view(j, &left_buf, &left, &left_len);
            if (ok && !split_merge_line(left, left_len, &split)) {
                char shown[128];
                ok = flush_merges(lb, b, j); /* an earlier entry's error comes first */
                if (ok)
                    sy_errmsg(j->err, j->err_size, "model.merges[%zu]: %s is not two tokens separated by one space",
                            index, show_text(shown, sizeof shown, left, left_len));
                ok = false;
                break;
            }
            if (ok) {
                right = left + split + 1;
                right_len = left_len - split - 1;
                left_len = split;
            }
        } else if (jpeek(j, '[')) {
            j->p++;
            jws(j);
            ok = jstring_view(j, &left_buf, &left, &left_len) &&
                 jexpect(j, ',', "model.merges: expected ',' inside a pair");
            if (ok) {
                jws(j);
                ok = jstring_view(j, &right_buf, &right, &right_len) &&
                     jexpect(j, ']', "model.merges: a pair has more than two entries");
            }
        } else {
            if (flush_merges(lb, b, j))
                sy_errmsg(j->err, j->err_size, "model.merges[%zu]: expected a string or a pair of strings", index);
            ok = false;
            break;
        }
        if (!ok)
            break;
        if (!batch_keep(lb, j, &lb->left[lb->n], left, left_len) ||
            !batch_keep(lb, j, &lb->right[lb->n], right, right_len)) {
            sy_errmsg(j->err, j->err_size, "out of memory");
            ok = false;
            break;
        }
        if (++lb->n == LOAD_BATCH && !flush_merges(lb, b, j)) {
            ok = false;
            break;
        }
        jws(j);
        if (jpeek(j, ',')) {
            j->p++;
            continue;
        }
        ok = jexpect(j, ']', "model.merges: expected ',' or ']'") && flush_merges(lb, b, j);
        break;
    }
    sb_free(&left_buf);
    sb_free(&right_buf);
    sb_free(&lb->arena);
    free(lb);
    return ok;
}

static bool parse_model(jscan *j, sy_bpe_builder *b, json_doc *d) {
    strbuf key = {0};
    bool first = true, failed = false, ok = true;
    const char *k;
    size_t kn;
    if (!jpeek(j, '{')) {
        if (j->p >= j->end)
            return jfail(j, "unexpected end of input");
        sy_errmsg(j->err, j->err_size, "model: expected an object");
        return false;
    }
    while (ok && jnext_member(j, &first, &key, &k, &kn, &failed)) {
        json_span *dst = NULL;
        if (key_is(k, kn, "vocab")) {
            if (d->have_vocab) {
                sy_errmsg(j->err, j->err_size, "model.vocab appears twice");
                ok = false;
                break;
            }
            ok = parse_vocab(j, b);
            d->have_vocab = true;
            continue;
        }
        if (key_is(k, kn, "merges")) {
            if (d->merges.present) {
                sy_errmsg(j->err, j->err_size, "model.merges appears twice");
                ok = false;
                break;
            }
            if (d->have_vocab) { /* the usual order: read them right away */
                ok = parse_merges(j, b);
                d->merges.present = true;
                d->merges.p = NULL;
            } else {
                ok = jspan(j, &d->merges);
            }
            continue;
        }
        if (key_is(k, kn, "type"))
            dst = &d->type;
        else if (key_is(k, kn, "dropout"))
            dst = &d->dropout;
        else if (key_is(k, kn, "unk_token"))
            dst = &d->unk_token;
        else if (key_is(k, kn, "continuing_subword_prefix"))
            dst = &d->prefix;
        else if (key_is(k, kn, "end_of_word_suffix"))
            dst = &d->suffix;
        else if (key_is(k, kn, "fuse_unk"))
            dst = &d->fuse_unk;
        else if (key_is(k, kn, "byte_fallback"))
            dst = &d->byte_fallback;
        else if (key_is(k, kn, "ignore_merges"))
            dst = &d->ignore_merges;
        if (dst != NULL && dst->present) {
            sy_errmsg(j->err, j->err_size, "model.%.*s appears twice", (int)kn, k);
            ok = false;
            break;
        }
        json_span ignored;
        ok = jspan(j, dst ? dst : &ignored);
    }
    sb_free(&key);
    if (!ok || failed)
        return false;
    if (!d->have_vocab) {
        sy_errmsg(j->err, j->err_size, "model.vocab is missing");
        return false;
    }
    if (!d->merges.present) {
        sy_errmsg(j->err, j->err_size, "model.merges is missing");
        return false;
    }
    if (d->merges.p != NULL) { /* merges came before the vocab: read them now */
        jscan sub = *j;
        sub.p = d->merges.p;
        sub.end = d->merges.p + d->merges.len;
        if (!parse_merges(&sub, b))
            return false;
    }
    return true;
}

/* ---- the small sections, through cJSON ---- */

static cJSON *parse_span(const json_span *s, const char *what, char *err, size_t err_size) {
    if (s->saw_nul) {
        sy_errmsg(err, err_size, "%s: strings containing U+0000 are not supported here", what);
        return NULL;
    }
    cJSON *v = cJSON_ParseWithLength(s->p, s->len);
    if (v == NULL)
        sy_errmsg(err, err_size, "%s: cannot be parsed (out of memory?)", what);
    return v;
}

static bool unique_keys(const cJSON *obj, const char *ctx, char *err, size_t err_size) {
    for (const cJSON *a = obj->child; a != NULL; a = a->next)
        for (const cJSON *c = a->next; c != NULL; c = c->next)
            if (strcmp(a->string, c->string) == 0) {
                sy_errmsg(err, err_size, "%s: key \"%s\" appears twice", ctx, a->string);
                return false;
            }
    return true;
}

static bool want_object(const cJSON *v, const char *ctx, char *err, size_t err_size) {
    if (!cJSON_IsObject(v)) {
        sy_errmsg(err, err_size, "%s: expected an object", ctx);
        return false;
    }
    return unique_keys(v, ctx, err, err_size);
}

static bool get_bool(const cJSON *obj, const char *key, bool dflt, bool *out, const char *ctx, char *err,
                     size_t err_size) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (v == NULL || cJSON_IsNull(v)) {
        *out = dflt;
        return true;
    }
    if (!cJSON_IsBool(v)) {
        sy_errmsg(err, err_size, "%s.%s: expected true or false", ctx, key);
        return false;
    }
    *out = cJSON_IsTrue(v);
    return true;
}

/* A string member (NULL when absent or null). */
static bool get_string(const cJSON *obj, const char *key, const char **out, const char *ctx, char *err,
                       size_t err_size) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    *out = NULL;
    if (v == NULL || cJSON_IsNull(v))
        return true;
    if (!cJSON_IsString(v)) {
        sy_errmsg(err, err_size, "%s.%s: expected a string", ctx, key);
        return false;
    }
    *out = v->valuestring;
    return true;
}

static bool get_type(const cJSON *obj, const char **type, const char *ctx, char *err, size_t err_size) {
    if (!want_object(obj, ctx, err, err_size) || !get_string(obj, "type", type, ctx, err, err_size))
        return false;
    if (*type == NULL) {
        sy_errmsg(err, err_size, "%s.type is missing", ctx);
        return false;
    }
    return true;
}

static bool get_id(const cJSON *v, int32_t *id, const char *ctx, char *err, size_t err_size) {
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0) || v->valuedouble >= SY_BPE_MAX_TOKENS ||
        v->valuedouble != floor(v->valuedouble)) {
        sy_errmsg(err, err_size, "%s: expected an integer id in 0..%u", ctx, SY_BPE_MAX_TOKENS - 1);
        return false;
    }
    *id = (int32_t)v->valuedouble;
    return true;
}

static bool load_model_options(sy_bpe_builder *b, const json_doc *d, char *err, size_t err_size) {
    bool ok = true;
    cJSON *v;
    if (!d->type.present) {
        sy_errmsg(err, err_size, "model.type is missing (expected \"BPE\")");
        return false;
    }
    v = parse_span(&d->type, "model.type", err, err_size);
    if (v == NULL)
        return false;
    if (!cJSON_IsString(v) || strcmp(v->valuestring, "BPE") != 0) {
        sy_errmsg(err, err_size, "model.type is %s%s%s; only \"BPE\" is supported here", cJSON_IsString(v) ? "\"" : "",
                cJSON_IsString(v) ? v->valuestring : "not a string", cJSON_IsString(v) ? "\"" : "");
        ok = false;
    }
    cJSON_Delete(v);
    if (ok && d->dropout.present) {
        v = parse_span(&d->dropout, "model.dropout", err, err_size);
        if (v == NULL)
            return false;
        if (!cJSON_IsNull(v) && !(cJSON_IsNumber(v) && v->valuedouble == 0.0)) {
            sy_errmsg(err, err_size, "model.dropout: BPE dropout (a training option) is not supported");
            ok = false;
        }
        cJSON_Delete(v);
    }
    const json_span *affixes[2] = {&d->prefix, &d->suffix};
    const char *affix_names[2] = {"model.continuing_subword_prefix", "model.end_of_word_suffix"};
    for (int i = 0; ok && i < 2; i++) {
        if (!affixes[i]->present)
            continue;
        v = parse_span(affixes[i], affix_names[i], err, err_size);
        if (v == NULL)
            return false;
        if (!cJSON_IsNull(v) && !(cJSON_IsString(v) && v->valuestring[0] == '\0')) {
            sy_errmsg(err, err_size, "%s: only null or \"\" is supported for a byte-level BPE", affix_names[i]);
            ok = false;
        }
        cJSON_Delete(v);
    }
    const json_span *flags[3] = {&d->fuse_unk, &d->byte_fallback, &d->ignore_merges};
    const char *flag_names[3] = {"model.fuse_unk", "model.byte_fallback", "model.ignore_merges"};
    bool values[3] = {false, false, false};
    for (int i = 0; ok && i < 3; i++) {
        if (!flags[i]->present)
            continue;
        v = parse_span(flags[i], flag_names[i], err, err_size);
        if (v == NULL)
            return false;
        if (cJSON_IsBool(v)) {
            values[i] = cJSON_IsTrue(v);
        } else if (!cJSON_IsNull(v)) {
            sy_errmsg(err, err_size, "%s: expected true or false", flag_names[i]);
            ok = false;
        }
        cJSON_Delete(v);
    }
    if (!ok)
        return false;
    sy_bpe_builder_set_byte_fallback(b, values[1]);
    sy_bpe_builder_set_ignore_merges(b, values[2]);
    if (d->unk_token.present) {
        v = parse_span(&d->unk_token, "model.unk_token", err, err_size);
        if (v == NULL)
            return false;
        if (cJSON_IsString(v)) {
            char inner[256];
            if (!sy_bpe_builder_set_unknown(b, v->valuestring, strlen(v->valuestring), values[0], inner,
                                            sizeof inner)) {
                sy_errmsg(err, err_size, "model.unk_token: %s", inner);
                ok = false;
            }
        } else if (!cJSON_IsNull(v)) {
            sy_errmsg(err, err_size, "model.unk_token: expected a string or null");
            ok = false;
        }
        cJSON_Delete(v);
    }
    return ok;
}

static bool load_added_tokens(sy_bpe_builder *b, const cJSON *arr, char *err, size_t err_size) {
    if (cJSON_IsNull(arr))
        return true;
    if (!cJSON_IsArray(arr)) {
        sy_errmsg(err, err_size, "added_tokens: expected an array");
        return false;
    }
    size_t index = 0;
    for (const cJSON *it = arr->child; it != NULL; it = it->next, index++) {
        char ctx[48];
        snprintf(ctx, sizeof ctx, "added_tokens[%zu]", index);
        if (!want_object(it, ctx, err, err_size))
            return false;
        sy_bpe_added_token tok = {0};
        const char *content;
        char idctx[64];
        snprintf(idctx, sizeof idctx, "%s.id", ctx);
        const cJSON *idv = cJSON_GetObjectItemCaseSensitive(it, "id");
        if (idv == NULL) {
            sy_errmsg(err, err_size, "%s.id is missing", ctx);
            return false;
        }
        if (!get_id(idv, &tok.id, idctx, err, err_size) || !get_string(it, "content", &content, ctx, err, err_size))
            return false;
        if (content == NULL) {
            sy_errmsg(err, err_size, "%s.content is missing", ctx);
            return false;
        }
        tok.content = content;
        tok.content_len = strlen(content);
        if (!get_bool(it, "special", false, &tok.special, ctx, err, err_size) ||
            !get_bool(it, "single_word", false, &tok.single_word, ctx, err, err_size) ||
            !get_bool(it, "lstrip", false, &tok.lstrip, ctx, err, err_size) ||
            !get_bool(it, "rstrip", false, &tok.rstrip, ctx, err, err_size) ||
            !get_bool(it, "normalized", !tok.special, &tok.normalized, ctx, err, err_size))
            return false;
        char inner[300];
        if (!sy_bpe_builder_add_added_token(b, &tok, inner, sizeof inner)) {
            sy_errmsg(err, err_size, "%s: %s", ctx, inner);
            return false;
        }
    }
    return true;
}

/* Folds a normalizer (or Sequence of them) into one normal form: compatibility if any step has it, composed
 * if the last step composes. */
static bool load_normalizer(const cJSON *n, int depth, bool *any, bool *compat, bool *compose, const char *ctx,
                            char *err, size_t err_size) {
    const char *type;
    if (cJSON_IsNull(n))
        return true;
    if (depth > 8) {
        sy_errmsg(err, err_size, "%s: Sequence nested too deeply", ctx);
        return false;
    }
    if (!get_type(n, &type, ctx, err, err_size))
        return false;
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(n, "normalizers");
        if (!cJSON_IsArray(list)) {
            sy_errmsg(err, err_size, "%s.normalizers: expected an array", ctx);
            return false;
        }
        size_t i = 0;
        for (const cJSON *it = list->child; it != NULL; it = it->next, i++) {
            char sub[96];
            snprintf(sub, sizeof sub, "%s.normalizers[%zu]", ctx, i);
            if (!load_normalizer(it, depth + 1, any, compat, compose, sub, err, err_size))
                return false;
        }
        return true;
    }
    if (strcmp(type, "NFC") == 0 || strcmp(type, "NFD") == 0 || strcmp(type, "NFKC") == 0 ||
        strcmp(type, "NFKD") == 0) {
        *any = true;
        *compat = *compat || type[2] == 'K';
        *compose = type[strlen(type) - 1] == 'C';
        return true;
    }
    sy_errmsg(err, err_size, "%s: type \"%s\" is not supported (NFC, NFD, NFKC, NFKD or a Sequence of them)", ctx,
            type);
    return false;
}

static bool load_pre_tokenizer(sy_bpe_builder *b, const cJSON *pt, int depth, bool *saw_byte_level, const char *ctx,
                               char *err, size_t err_size) {
    const char *type;
    if (depth > 8) {
        sy_errmsg(err, err_size, "%s: Sequence nested too deeply", ctx);
        return false;
    }
    if (!get_type(pt, &type, ctx, err, err_size))
        return false;
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(pt, "pretokenizers");
        if (!cJSON_IsArray(list)) {
            sy_errmsg(err, err_size, "%s.pretokenizers: expected an array", ctx);
            return false;
        }
        size_t i = 0;
        for (const cJSON *it = list->child; it != NULL; it = it->next, i++) {
            char sub[96];
            snprintf(sub, sizeof sub, "%s.pretokenizers[%zu]", ctx, i);
            if (!load_pre_tokenizer(b, it, depth + 1, saw_byte_level, sub, err, err_size))
                return false;
        }
        return true;
    }
    if (strcmp(type, "ByteLevel") == 0) {
        bool add_prefix_space, use_regex, trim_offsets;
        if (*saw_byte_level) {
            sy_errmsg(err, err_size, "%s: a second ByteLevel step", ctx);
            return false;
        }
        if (!get_bool(pt, "add_prefix_space", true, &add_prefix_space, ctx, err, err_size) ||
            !get_bool(pt, "use_regex", true, &use_regex, ctx, err, err_size) ||
            !get_bool(pt, "trim_offsets", true, &trim_offsets, ctx, err, err_size))
            return false;
        sy_bpe_builder_set_byte_level(b, add_prefix_space, use_regex);
        *saw_byte_level = true;
        return true;
    }
    if (strcmp(type, "Split") == 0) {
        if (*saw_byte_level) {
            sy_errmsg(err, err_size, "%s: a Split after the ByteLevel step is not supported (ByteLevel must come last)",
                    ctx);
            return false;
        }
        const cJSON *pattern = cJSON_GetObjectItemCaseSensitive(pt, "pattern");
        char pctx[112];
        snprintf(pctx, sizeof pctx, "%s.pattern", ctx);
        if (!want_object(pattern, pctx, err, err_size))
            return false;
        const char *regex, *literal, *behavior;
        if (!get_string(pattern, "Regex", &regex, pctx, err, err_size) ||
            !get_string(pattern, "String", &literal, pctx, err, err_size) ||
            !get_string(pt, "behavior", &behavior, ctx, err, err_size))
            return false;
        if ((regex == NULL) == (literal == NULL) || cJSON_GetArraySize(pattern) != 1) {
            sy_errmsg(err, err_size, "%s: expected exactly one of \"Regex\" or \"String\"", pctx);
            return false;
        }
        static const char *const names[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext",
                                            "Contiguous"};
        int which = -1;
        for (int i = 0; behavior != NULL && i < 5; i++)
            if (strcmp(behavior, names[i]) == 0)
                which = i;
        if (which < 0) {
            sy_errmsg(err, err_size,
                    "%s.behavior: expected one of Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous",
                    ctx);
            return false;
        }
        bool invert;
        if (!get_bool(pt, "invert", false, &invert, ctx, err, err_size))
            return false;
        const char *pat = regex ? regex : literal;
        char inner[400];
        if (!sy_bpe_builder_add_split(b, pat, strlen(pat), regex != NULL, (sy_bpe_split_behavior)which, invert, inner,
                                      sizeof inner)) {
            sy_errmsg(err, err_size, "%s: %s", ctx, inner);
            return false;
        }
        return true;
    }
    sy_errmsg(err, err_size, "%s: type \"%s\" is not supported (Split, ByteLevel or a Sequence of them)", ctx, type);
    return false;
}

static bool load_decoder(const cJSON *d, int depth, bool *saw_byte_level, const char *ctx, char *err,
                         size_t err_size) {
    const char *type;
    if (depth > 8) {
        sy_errmsg(err, err_size, "%s: Sequence nested too deeply", ctx);
        return false;
    }
    if (!get_type(d, &type, ctx, err, err_size))
        return false;
    if (strcmp(type, "ByteLevel") == 0) {
        *saw_byte_level = true;
        return true;
    }
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(d, "decoders");
        if (!cJSON_IsArray(list)) {
            sy_errmsg(err, err_size, "%s.decoders: expected an array", ctx);
            return false;
        }
        size_t i = 0;
        for (const cJSON *it = list->child; it != NULL; it = it->next, i++) {
            char sub[96];
            snprintf(sub, sizeof sub, "%s.decoders[%zu]", ctx, i);
            if (!load_decoder(it, depth + 1, saw_byte_level, sub, err, err_size))
                return false;
        }
        return true;
    }
    sy_errmsg(err, err_size, "%s: type \"%s\" is not supported (a byte-level BPE decodes with ByteLevel)", ctx, type);
    return false;
}

typedef struct template_ids {
    int32_t prefix[BPE_MAX_TEMPLATE], suffix[BPE_MAX_TEMPLATE];
    size_t n_prefix, n_suffix;
    bool set;
} template_ids;

static bool template_add(template_ids *tp, bool after, int32_t id, const char *ctx, char *err, size_t err_size) {
    size_t *n = after ? &tp->n_suffix : &tp->n_prefix;
    if (*n >= BPE_MAX_TEMPLATE) {
        sy_errmsg(err, err_size, "%s: more than %d template tokens on one side", ctx, BPE_MAX_TEMPLATE);
        return false;
    }
    (after ? tp->suffix : tp->prefix)[(*n)++] = id;
    return true;
}

/* A ["<s>", 0] pair of RobertaProcessing / BertProcessing. */
static bool template_pair(const cJSON *pt, const char *key, int32_t *id, const char *ctx, char *err,
                          size_t err_size) {
    const cJSON *pair = cJSON_GetObjectItemCaseSensitive(pt, key);
    char sub[112];
    snprintf(sub, sizeof sub, "%s.%s", ctx, key);
    if (!cJSON_IsArray(pair) || cJSON_GetArraySize(pair) != 2 || !cJSON_IsString(pair->child)) {
        sy_errmsg(err, err_size, "%s: expected [\"token\", id]", sub);
        return false;
    }
    return get_id(pair->child->next, id, sub, err, err_size);
}

static bool load_post_processor(const cJSON *pp, int depth, template_ids *tp, const char *ctx, char *err,
                                size_t err_size) {
    const char *type;
    if (cJSON_IsNull(pp))
        return true;
    if (depth > 8) {
        sy_errmsg(err, err_size, "%s: Sequence nested too deeply", ctx);
        return false;
    }
    if (!get_type(pp, &type, ctx, err, err_size))
        return false;
    if (strcmp(type, "ByteLevel") == 0)
        return true; /* only adjusts offsets */
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(pp, "processors");
        if (!cJSON_IsArray(list)) {
            sy_errmsg(err, err_size, "%s.processors: expected an array", ctx);
            return false;
        }
        size_t i = 0;
        for (const cJSON *it = list->child; it != NULL; it = it->next, i++) {
            char sub[96];
            snprintf(sub, sizeof sub, "%s.processors[%zu]", ctx, i);
            if (!load_post_processor(it, depth + 1, tp, sub, err, err_size))
                return false;
        }
        return true;
    }
    bool is_template = strcmp(type, "TemplateProcessing") == 0;
    bool is_pair = strcmp(type, "RobertaProcessing") == 0 || strcmp(type, "BertProcessing") == 0;
    if (!is_template && !is_pair) {
        sy_errmsg(err, err_size, "%s: type \"%s\" is not supported", ctx, type);
        return false;
    }
    if (tp->set) {
        sy_errmsg(err, err_size, "%s: a second template post-processor", ctx);
        return false;
    }
    tp->set = true;
    if (is_pair) {
        int32_t cls, sep;
        return template_pair(pp, "cls", &cls, ctx, err, err_size) &&
               template_pair(pp, "sep", &sep, ctx, err, err_size) && template_add(tp, false, cls, ctx, err, err_size) &&
               template_add(tp, true, sep, ctx, err, err_size);
    }
    const cJSON *single = cJSON_GetObjectItemCaseSensitive(pp, "single");
    const cJSON *specials = cJSON_GetObjectItemCaseSensitive(pp, "special_tokens");
    if (!cJSON_IsArray(single)) {
        sy_errmsg(err, err_size, "%s.single: expected an array", ctx);
        return false;
    }
    if (specials != NULL && !cJSON_IsNull(specials) && !want_object(specials, ctx, err, err_size))
        return false;
    bool after = false, saw_sequence = false;
    size_t i = 0;
    for (const cJSON *it = single->child; it != NULL; it = it->next, i++) {
        char sub[112];
        snprintf(sub, sizeof sub, "%s.single[%zu]", ctx, i);
        if (!want_object(it, sub, err, err_size))
            return false;
        const cJSON *seq = cJSON_GetObjectItemCaseSensitive(it, "Sequence");
        const cJSON *spec = cJSON_GetObjectItemCaseSensitive(it, "SpecialToken");
        if ((seq == NULL) == (spec == NULL) || cJSON_GetArraySize(it) != 1) {
            sy_errmsg(err, err_size, "%s: expected {\"Sequence\": ...} or {\"SpecialToken\": ...}", sub);
            return false;
        }
        if (seq != NULL) {
            if (saw_sequence) {
                sy_errmsg(err, err_size, "%s: a second sequence in a single-sequence template", sub);
                return false;
            }
            saw_sequence = after = true;
            continue;
        }
        const char *name;
        if (!want_object(spec, sub, err, err_size) || !get_string(spec, "id", &name, sub, err, err_size))
            return false;
        const cJSON *entry = name && specials ? cJSON_GetObjectItemCaseSensitive(specials, name) : NULL;
        const cJSON *ids = entry ? cJSON_GetObjectItemCaseSensitive(entry, "ids") : NULL;
        if (!cJSON_IsArray(ids)) {
            sy_errmsg(err, err_size, "%s: special token %s%s%s has no ids in special_tokens", sub, name ? "\"" : "",
                    name ? name : "(unnamed)", name ? "\"" : "");
            return false;
        }
        for (const cJSON *idv = ids->child; idv != NULL; idv = idv->next) {
            int32_t id;
            if (!get_id(idv, &id, sub, err, err_size) || !template_add(tp, after, id, sub, err, err_size))
                return false;
        }
    }
    if (!saw_sequence) {
        sy_errmsg(err, err_size, "%s.single: the template has no sequence", ctx);
        return false;
    }
    return true;
}

/* Parses a recorded section with cJSON (*out stays NULL when the section is absent). */
static bool with_section(const json_span *s, const char *name, char *err, size_t err_size, cJSON **out) {
    *out = NULL;
    if (!s->present)
        return true;
    *out = parse_span(s, name, err, err_size);
    return *out != NULL;
}

sy_bpe *sy_bpe_load_json_buffer(const char *json, size_t len, char *err, size_t err_size) {
    if (json == NULL || len > BPE_MAX_JSON_BYTES) {
        sy_errmsg(err, err_size, "tokenizer.json: missing or larger than %zu bytes", BPE_MAX_JSON_BYTES);
        return NULL;
    }
    sy_bpe_builder *b = sy_bpe_builder_new(err, err_size);
    if (b == NULL)
        return NULL;
    /* Size the tables once from the file size (a real tokenizer.json spends ~40 bytes per vocabulary entry
     * and merge): growing a 150k-entry table step by step costs more than the guess can waste. */
    size_t guess = len / 80;
    if (guess > 1024 && !sy_bpe_builder_reserve(b, guess, guess, err, err_size)) {
        sy_bpe_builder_free(b);
        return NULL;
    }
    jscan j = {.base = json, .p = json, .end = json + len, .err = err, .err_size = err_size};
    json_doc d;
    memset(&d, 0, sizeof d);
    strbuf key = {0};
    bool first = true, failed = false, ok = true;
    cJSON *section = NULL;

    jws(&j);
    if (!jpeek(&j, '{')) {
        jfail(&j, "a tokenizer.json is an object");
        goto fail;
    }
    const char *k;
    size_t kn;
    while (ok && jnext_member(&j, &first, &key, &k, &kn, &failed)) {
        json_span *dst = NULL;
        if (key_is(k, kn, "model")) {
            if (d.have_model) {
                sy_errmsg(err, err_size, "the key \"model\" appears twice");
                ok = false;
                break;
            }
            d.have_model = true;
            ok = parse_model(&j, b, &d);
            continue;
        }
        if (key_is(k, kn, "version"))
            dst = &d.version;
        else if (key_is(k, kn, "added_tokens"))
            dst = &d.added_tokens;
        else if (key_is(k, kn, "normalizer"))
            dst = &d.normalizer;
        else if (key_is(k, kn, "pre_tokenizer"))
            dst = &d.pre_tokenizer;
        else if (key_is(k, kn, "post_processor"))
            dst = &d.post_processor;
        else if (key_is(k, kn, "decoder"))
            dst = &d.decoder;
        if (dst != NULL && dst->present) {
            sy_errmsg(err, err_size, "the key \"%.*s\" appears twice", (int)kn, k);
            ok = false;
            break;
        }
        json_span ignored; /* truncation, padding and unknown keys: validated, unused */
        ok = jspan(&j, dst ? dst : &ignored);
    }
    if (!ok || failed)
        goto fail;
    jws(&j);
    if (j.p != j.end) {
        jfail(&j, "trailing data after the document");
        goto fail;
    }
    if (!d.have_model) {
        sy_errmsg(err, err_size, "the \"model\" section is missing");
        goto fail;
    }
    if (!load_model_options(b, &d, err, err_size))
        goto fail;

    if (!with_section(&d.version, "version", err, err_size, &section))
        goto fail;
    if (section != NULL && !(cJSON_IsString(section) && strcmp(section->valuestring, "1.0") == 0)) {
        sy_errmsg(err, err_size, "version: only \"1.0\" is known");
        goto fail;
    }
    cJSON_Delete(section);
    section = NULL;

    if (!with_section(&d.added_tokens, "added_tokens", err, err_size, &section) ||
        (section != NULL && !load_added_tokens(b, section, err, err_size)))
        goto fail;
    cJSON_Delete(section);
    section = NULL;

    bool any = false, compat = false, compose = false;
    if (!with_section(&d.normalizer, "normalizer", err, err_size, &section) ||
        (section != NULL && !load_normalizer(section, 0, &any, &compat, &compose, "normalizer", err, err_size)))
        goto fail;
    cJSON_Delete(section);
    section = NULL;
    sy_bpe_builder_set_normalization(b, !any ? SY_BPE_NORM_NONE
                                        : compat ? (compose ? SY_BPE_NORM_NFKC : SY_BPE_NORM_NFKD)
                                                 : (compose ? SY_BPE_NORM_NFC : SY_BPE_NORM_NFD));

    bool saw_byte_level = false;
    if (!with_section(&d.pre_tokenizer, "pre_tokenizer", err, err_size, &section))
        goto fail;
    if (section == NULL || cJSON_IsNull(section)) {
        sy_errmsg(err, err_size, "pre_tokenizer is missing: a byte-level BPE needs a ByteLevel pre-tokenizer");
        goto fail;
    }
    if (!load_pre_tokenizer(b, section, 0, &saw_byte_level, "pre_tokenizer", err, err_size))
        goto fail;
    cJSON_Delete(section);
    section = NULL;
    if (!saw_byte_level) {
        sy_errmsg(err, err_size, "pre_tokenizer has no ByteLevel step: only byte-level BPE is supported here");
        goto fail;
    }

    saw_byte_level = false;
    if (!with_section(&d.decoder, "decoder", err, err_size, &section))
        goto fail;
    if (section == NULL || cJSON_IsNull(section)) {
        sy_errmsg(err, err_size, "decoder is missing: a byte-level BPE needs the ByteLevel decoder");
        goto fail;
    }
    if (!load_decoder(section, 0, &saw_byte_level, "decoder", err, err_size))
        goto fail;
    cJSON_Delete(section);
    section = NULL;
    if (!saw_byte_level) {
        sy_errmsg(err, err_size, "decoder has no ByteLevel step");
        goto fail;
    }

    template_ids tp;
    memset(&tp, 0, sizeof tp);
    if (!with_section(&d.post_processor, "post_processor", err, err_size, &section) ||
        (section != NULL && !load_post_processor(section, 0, &tp, "post_processor", err, err_size)))
        goto fail;
    cJSON_Delete(section);
    section = NULL;
    if (!sy_bpe_builder_set_template(b, tp.prefix, tp.n_prefix, tp.suffix, tp.n_suffix, err, err_size))
        goto fail;

    sb_free(&key);
    return sy_bpe_builder_finish(b, err, err_size);
fail:
    cJSON_Delete(section);
    section = NULL;
    sb_free(&key);
    sy_bpe_builder_free(b);
    return NULL;
}

sy_bpe *sy_bpe_load_json(const char *path, char *err, size_t err_size) {
    char *data;
    size_t len;
    if (!read_whole_file(path, &data, &len, err, err_size))
        return NULL;
    char inner[512];
    sy_bpe *t = sy_bpe_load_json_buffer(data, len, inner, sizeof inner);
    free(data);
    if (t == NULL)
        sy_errmsg(err, err_size, "%s: %s", path, inner);
    return t;
}

/* ---- tokenizer_config.json ---- */

void sy_tokenizer_config_free(sy_tokenizer_config *c) {
    if (c == NULL)
        return;
    free(c->bos_token);
    free(c->eos_token);
    free(c->pad_token);
    free(c->unk_token);
    free(c->chat_template);
    memset(c, 0, sizeof *c);
    c->add_bos_token = c->add_eos_token = -1;
}

static bool dup_string(const char *s, char **out, char *err, size_t err_size) {
    *out = strdup(s);
    if (*out == NULL) {
        sy_errmsg(err, err_size, "out of memory");
        return false;
    }
    return true;
}

/* bos_token and friends: a string, an AddedToken object with "content", or null. */
static bool config_token(const cJSON *root, const char *key, char **out, char *err, size_t err_size) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (v == NULL || cJSON_IsNull(v))
        return true;
    if (cJSON_IsString(v))
        return dup_string(v->valuestring, out, err, err_size);
    if (cJSON_IsObject(v)) {
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(v, "content");
        if (cJSON_IsString(content))
            return dup_string(content->valuestring, out, err, err_size);
    }
    sy_errmsg(err, err_size, "%s: expected a string, an object with \"content\", or null", key);
    return false;
}

static bool config_flag(const cJSON *root, const char *key, int *out, char *err, size_t err_size) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (v == NULL || cJSON_IsNull(v))
        return true;
    if (!cJSON_IsBool(v)) {
        sy_errmsg(err, err_size, "%s: expected true or false", key);
        return false;
    }
    *out = cJSON_IsTrue(v) ? 1 : 0;
    return true;
}

bool sy_tokenizer_config_parse(const char *json, size_t len, sy_tokenizer_config *out, char *err, size_t err_size) {
    memset(out, 0, sizeof *out);
    out->add_bos_token = out->add_eos_token = -1;
    if (json == NULL || len > BPE_MAX_JSON_BYTES) {
        sy_errmsg(err, err_size, "tokenizer_config.json: missing or too large");
        return false;
    }
    jscan j = {.base = json, .p = json, .end = json + len, .err = err, .err_size = err_size};
    if (!jskip(&j))
        return false;
    jws(&j);
    if (j.p != j.end)
        return jfail(&j, "trailing data after the document");
    if (j.saw_nul) {
        sy_errmsg(err, err_size, "strings containing U+0000 are not supported");
        return false;
    }
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (root == NULL) {
        sy_errmsg(err, err_size, "cannot be parsed (out of memory?)");
        return false;
    }
    bool ok = want_object(root, "tokenizer_config", err, err_size) &&
              config_token(root, "bos_token", &out->bos_token, err, err_size) &&
              config_token(root, "eos_token", &out->eos_token, err, err_size) &&
              config_token(root, "pad_token", &out->pad_token, err, err_size) &&
              config_token(root, "unk_token", &out->unk_token, err, err_size) &&
              config_flag(root, "add_bos_token", &out->add_bos_token, err, err_size) &&
              config_flag(root, "add_eos_token", &out->add_eos_token, err, err_size);
    const cJSON *tpl = ok ? cJSON_GetObjectItemCaseSensitive(root, "chat_template") : NULL;
    if (ok && tpl != NULL && !cJSON_IsNull(tpl)) {
        if (cJSON_IsString(tpl)) {
            ok = dup_string(tpl->valuestring, &out->chat_template, err, err_size);
        } else if (cJSON_IsArray(tpl)) {
            const char *first = NULL, *named_default = NULL;
            for (const cJSON *it = tpl->child; it != NULL; it = it->next) {
                const cJSON *name = cJSON_GetObjectItemCaseSensitive(it, "name");
                const cJSON *text = cJSON_GetObjectItemCaseSensitive(it, "template");
                if (!cJSON_IsObject(it) || !cJSON_IsString(name) || !cJSON_IsString(text)) {
                    sy_errmsg(err, err_size, "chat_template: list entries need a \"name\" and a \"template\" string");
                    ok = false;
                    break;
                }
                if (first == NULL)
                    first = text->valuestring;
                if (named_default == NULL && strcmp(name->valuestring, "default") == 0)
                    named_default = text->valuestring;
            }
            const char *chosen = named_default ? named_default : first;
            if (ok && chosen != NULL)
                ok = dup_string(chosen, &out->chat_template, err, err_size);
        } else {
            sy_errmsg(err, err_size, "chat_template: expected a string or a list of named templates");
            ok = false;
        }
    }
    cJSON_Delete(root);
    if (!ok)
        sy_tokenizer_config_free(out);
    return ok;
}

bool sy_tokenizer_config_load(const char *path, sy_tokenizer_config *out, char *err, size_t err_size) {
    char *data;
    size_t len;
    memset(out, 0, sizeof *out);
    out->add_bos_token = out->add_eos_token = -1;
    if (!read_whole_file(path, &data, &len, err, err_size))
        return false;
    char inner[512];
    bool ok = sy_tokenizer_config_parse(data, len, out, inner, sizeof inner);
    free(data);
    if (!ok)
        sy_errmsg(err, err_size, "%s: %s", path, inner);
    return ok;
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
