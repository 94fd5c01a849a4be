/* The inside of the byte-level BPE tokenizer (tokenizer_bpe.h), shared by the files that implement it:
 *
 *   tokenizer_bpe.c   the object: freeing, accessors, decoding
 *   bpe_builder.c     building one from lists (the GGUF path), presets, finishing
 *   bpe_encode.c      encoding: added tokens, normalization, pre-tokenizer splits, merges
 *   bpe_tables.h      its hash tables (vocabulary, merges)
 *   bpe_cache.c/.h    its word cache
 *   regex_onig.c/.h   its pre-tokenizer regexes (Oniguruma syntax on PCRE2)
 *   tokenizer_json.c  loading a tokenizer.json (over json_reader.h) and reading tokenizer_config.json
 *
 * Nothing outside these files includes this header: the rest of the project sees only tokenizer_bpe.h.
 */
#ifndef SY_BPE_INTERNAL_H
#define SY_BPE_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifndef PCRE2_CODE_UNIT_WIDTH
#define PCRE2_CODE_UNIT_WIDTH 8
#endif
#include <pcre2.h>

#include "bpe_cache.h"
#include "bpe_tables.h"
#include "strbuf.h"
#include "tokenizer_bpe.h"
#include "utf8_util.h"

#define BPE_MAX_TEMPLATE 16 /* ids on each side of the post-processor's template */

/* The byte-level alphabet: each byte is written as one code point so that every token is printable text.
 * Printable Latin-1 bytes stand for themselves; the 68 others (controls, space, DEL, NBSP, soft hyphen) become
 * U+0100.. in byte order. */

#define BYTE_LEVEL_CP_LIMIT 0x144 /* 256 + 68: every alphabet code point is below this */

typedef struct byte_alphabet {
    uint16_t cp_of_byte[256];
    int16_t byte_of_cp[BYTE_LEVEL_CP_LIMIT];
} byte_alphabet;

static inline void byte_alphabet_init(byte_alphabet *a) {
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
static inline size_t byte_level_encode(const byte_alphabet *a, const unsigned char *s, size_t n, char *out) {
    size_t o = 0;
    for (size_t i = 0; i < n; i++)
        o += utf8_encode(a->cp_of_byte[s[i]], out + o);
    return o;
}

/* Raw bytes of byte-level text; false when some code point is outside the alphabet (the caller then uses the
 * text itself, as tokenizers' ByteLevel decoder does). out needs len bytes. */
static inline bool byte_level_decode(const byte_alphabet *a, const char *s, size_t len, char *out, size_t *out_len) {
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

typedef struct split_step {
    pcre2_code *re;
    sy_bpe_split_behavior behavior;
    bool invert;
} split_step;

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

    bpe_cache cache;
};

struct sy_bpe_builder {
    sy_bpe *t;
    strbuf scratch;
    int32_t last_merged; /* the token the previous merge made, -1 */
};

/* ---- shared between the files ------------------------------------------------------------------------------ */

/* Vocabulary entries texts[i] with ids[i] (or first_id + i when ids is NULL), in batches whose table slots are
 * prefetched together. utf8_checked: the caller (the JSON reader) already validated the texts. On failure
 * *failed is the index of the entry that failed; the ones before it were added. */
bool bpe_add_tokens_batched(sy_bpe_builder *b, const char *const *texts, const size_t *lens, const int32_t *ids,
                            int32_t first_id, size_t n, bool utf8_checked, size_t *failed, char *err,
                            size_t err_size);
/* Merges lefts[i] + rights[i] in order (ranks follow), batched the same way. On failure *failed is the index that
 * failed; the ones before it were added. */
bool bpe_add_merges_batched(sy_bpe_builder *b, const char *const *lefts, const size_t *left_lens,
                            const char *const *rights, const size_t *right_lens, size_t n, size_t *failed,
                            char *err, size_t err_size);
/* Splits "left right" at its one space; false when the line is not of that shape. */
bool bpe_split_merge_line(const char *line, size_t len, size_t *left_len);

/* The normalized form of s (NULL + *n_out 0 when unchanged or on error: *failed tells them apart). Used for the
 * text (bpe_encode.c) and for the added tokens matched in normalized text (bpe_builder.c). */
char *bpe_normalize(sy_bpe_normalization nf, const char *s, size_t n, size_t *n_out, bool *failed);

#endif
