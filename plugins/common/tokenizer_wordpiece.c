/* WordPiece (tokenizer_wordpiece.h): tokenizer.json read as a tree, the vocabulary in an open-addressing hash
 * table over one text arena, and the encode pipeline of Hugging Face tokenizers' BertNormalizer, BertPreTokenizer,
 * WordPiece and TemplateProcessing, over code points. */
#include "tokenizer_wordpiece.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>
#include <xxhash.h>

#include "errmsg.h"
#include "json_reader.h"
#include "wordpiece_unicode.h"

#define WP_MAX_VOCAB (1u << 22)
#define WP_MAX_TOKEN_BYTES 1024
#define WP_MAX_ADDED 4096
#define WP_MAX_JSON_BYTES (64u * 1024u * 1024u)

typedef struct wp_added {
    char *text;
    size_t len;
    int32_t id;
    bool special;
} wp_added;

/* One piece of a template: a special token (id, type) or the sequence A / B (type). */
typedef struct wp_piece {
    int32_t id; /* -1: sequence A, -2: sequence B */
    int32_t type_id;
} wp_piece;

#define WP_MAX_TEMPLATE 8

struct sy_wordpiece {
    /* vocabulary: token id -> text at arena + offset[id] (len[id] bytes; offset UINT32_MAX: no token) */
    char *arena;
    size_t arena_len;
    uint32_t *offset, *length;
    uint32_t n_vocab;
    uint32_t *table; /* hash slots holding id + 1, 0 empty */
    uint32_t table_mask;
    uint8_t *special; /* per id */

    wp_added *added;
    size_t n_added;

    bool clean_text, chinese, strip_accents, lowercase, has_normalizer, bert_pre;
    char prefix[16];
    size_t prefix_len;
    uint32_t max_chars;
    int32_t unk, cls, sep, pad;

    wp_piece single[WP_MAX_TEMPLATE], pair[WP_MAX_TEMPLATE];
    size_t n_single, n_pair;
    uint64_t memory;
};

/* ---- the vocabulary table ---- */

static uint32_t hash_bytes(const char *s, size_t n) { return (uint32_t)XXH3_64bits(s, n); }

static int32_t vocab_find(const sy_wordpiece *wp, const char *s, size_t n) {
    for (uint32_t h = hash_bytes(s, n) & wp->table_mask;; h = (h + 1) & wp->table_mask) {
        uint32_t e = wp->table[h];
        if (e == 0) return -1;
        uint32_t id = e - 1;
        if (wp->length[id] == n && memcmp(wp->arena + wp->offset[id], s, n) == 0) return (int32_t)id;
    }
}

static bool vocab_insert(sy_wordpiece *wp, uint32_t id) {
    const char *s = wp->arena + wp->offset[id];
    size_t n = wp->length[id];
    for (uint32_t h = hash_bytes(s, n) & wp->table_mask;; h = (h + 1) & wp->table_mask) {
        uint32_t e = wp->table[h];
        if (e == 0) {
            wp->table[h] = id + 1;
            return true;
        }
        if (wp->length[e - 1] == n && memcmp(wp->arena + wp->offset[e - 1], s, n) == 0) return false;
    }
}

/* ---- Unicode classes, as Rust's char methods and the tokenizers crate define them ---- */

static bool is_whitespace(int32_t c) { /* White_Space */
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

static bool in_ranges(const uint32_t (*r)[2], size_t n, int32_t c) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if ((uint32_t)c < r[mid][0]) hi = mid;
        else if ((uint32_t)c > r[mid][1]) lo = mid + 1;
        else return true;
    }
    return false;
}

/* clean_text's control characters: ASCII controls but \t \n \r, and the oracle's table (wordpiece_unicode.h) */
static bool is_control(int32_t c) {
    if (c < 0x80) return (c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7F;
    return in_ranges(wp_control_ranges, sizeof wp_control_ranges / sizeof wp_control_ranges[0], c);
}

static bool is_chinese(int32_t c) {
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
           (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

/* ASCII punctuation, or punctuation by the oracle's table */
static bool is_punctuation(int32_t c) {
    if (c < 0x80) return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) ||
                         (c >= 0x7B && c <= 0x7E);
    return in_ranges(wp_punct_ranges, sizeof wp_punct_ranges / sizeof wp_punct_ranges[0], c);
}

/* ---- code point buffers ---- */

typedef struct cpbuf {
    int32_t *v;
    size_t n, cap;
} cpbuf;

static bool cp_push(cpbuf *b, int32_t c) {
    if (b->n == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 64;
        int32_t *v = realloc(b->v, cap * sizeof *v);
        if (v == NULL) return false;
        b->v = v;
        b->cap = cap;
    }
    b->v[b->n++] = c;
    return true;
}

/* ---- ids out ---- */

typedef struct id_out {
    int32_t *ids, *types;
    size_t cap, n;
} id_out;

static void emit(id_out *o, int32_t id, int32_t type) {
    if (o->n < o->cap) {
        o->ids[o->n] = id;
        if (o->types) o->types[o->n] = type;
    }
    o->n++;
}

/* ---- encoding one segment of plain text ---- */

/* WordPiece over one pre-tokenized word (code points w[0..n)). */
static bool encode_word(const sy_wordpiece *wp, const int32_t *w, size_t n, int32_t type, id_out *o) {
    if (n > wp->max_chars) {
        emit(o, wp->unk, type);
        return true;
    }
    /* UTF-8 of the word, with the byte offset where each code point starts */
    size_t bytes_cap = n * 4 + wp->prefix_len + 1;
    char *buf = malloc(bytes_cap + wp->prefix_len);
    size_t *at = malloc((n + 1) * sizeof *at);
    int32_t *ids = malloc(n * sizeof *ids);
    if (buf == NULL || at == NULL || ids == NULL) {
        free(buf), free(at), free(ids);
        return false;
    }
    char *utf8 = buf + wp->prefix_len; /* room for the prefix before any start */
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        at[i] = len;
        len += (size_t)utf8proc_encode_char(w[i], (utf8proc_uint8_t *)utf8 + len);
    }
    at[n] = len;
    size_t n_ids = 0, start = 0;
    bool bad = false;
    while (start < n) {
        int32_t found = -1;
        size_t end = n;
        for (; end > start; end--) {
            const char *s = utf8 + at[start];
            size_t sl = at[end] - at[start];
            if (start > 0) { /* "##" + piece, written just before it (the bytes there are already consumed) */
                char saved[16];
                memcpy(saved, s - wp->prefix_len, wp->prefix_len);
                memcpy((char *)s - wp->prefix_len, wp->prefix, wp->prefix_len);
                found = vocab_find(wp, s - wp->prefix_len, sl + wp->prefix_len);
                memcpy((char *)s - wp->prefix_len, saved, wp->prefix_len);
            } else {
                found = vocab_find(wp, s, sl);
            }
            if (found >= 0) break;
        }
        if (found < 0) {
            bad = true;
            break;
        }
        ids[n_ids++] = found;
        start = end;
    }
    if (bad) {
        emit(o, wp->unk, type);
    } else {
        for (size_t i = 0; i < n_ids; i++) emit(o, ids[i], type);
    }
    free(buf), free(at), free(ids);
    return true;
}

/* Normalizer, pre-tokenizer and model over text[0..len) (valid UTF-8, checked by the caller). */
static bool encode_plain(const sy_wordpiece *wp, const char *text, size_t len, int32_t type, id_out *o) {
    cpbuf norm = {0};
    bool ok = true;
    const utf8proc_uint8_t *p = (const utf8proc_uint8_t *)text;
    size_t i = 0;
    while (ok && i < len) {
        utf8proc_int32_t c;
        utf8proc_ssize_t k = utf8proc_iterate(p + i, (utf8proc_ssize_t)(len - i), &c);
        i += (size_t)k;
        if (wp->clean_text) {
            if (c == 0 || c == 0xFFFD || is_control(c)) continue;
            if (is_whitespace(c)) c = ' ';
        }
        bool cjk = wp->chinese && is_chinese(c);
        if (cjk) ok = cp_push(&norm, ' ');
        /* strip_accents: NFD, nonspacing marks dropped; lowercase after it (Rust's full lower-case mapping) */
        utf8proc_int32_t dec[32];
        utf8proc_ssize_t nd = 1;
        dec[0] = c;
        if (wp->strip_accents) {
            int last = 0;
            nd = utf8proc_decompose_char(c, dec, 32, UTF8PROC_DECOMPOSE, &last);
            if (nd < 0 || nd > 32) {
                dec[0] = c;
                nd = 1;
            }
        }
        for (utf8proc_ssize_t d = 0; ok && d < nd; d++) {
            int32_t x = dec[d];
            if (wp->strip_accents && utf8proc_category(x) == UTF8PROC_CATEGORY_MN) continue;
            if (wp->lowercase) {
                if (x == 0x130) {
                    ok = cp_push(&norm, 'i') && cp_push(&norm, 0x307);
                    continue;
                }
                x = utf8proc_tolower(x);
            }
            ok = cp_push(&norm, x);
        }
        if (ok && cjk) ok = cp_push(&norm, ' ');
    }
    /* BertPreTokenizer: whitespace separates words, each punctuation character is a word */
    size_t w0 = 0;
    for (size_t j = 0; ok && j <= norm.n; j++) {
        bool end = j == norm.n;
        bool ws = !end && wp->bert_pre && is_whitespace(norm.v[j]);
        bool punct = !end && wp->bert_pre && is_punctuation(norm.v[j]);
        if (end || ws || punct) {
            if (j > w0) ok = encode_word(wp, norm.v + w0, j - w0, type, o);
            if (ok && punct) ok = encode_word(wp, norm.v + j, 1, type, o);
            w0 = j + 1;
        }
    }
    free(norm.v);
    return ok;
}

/* Added tokens first (leftmost, then longest), the text between them through encode_plain. */
static bool encode_segmented(const sy_wordpiece *wp, const char *text, size_t len, bool parse_special, int32_t type,
                             id_out *o) {
    size_t pos = 0, plain = 0;
    while (pos < len) {
        const wp_added *best = NULL;
        for (size_t a = 0; a < wp->n_added; a++) {
            const wp_added *t = &wp->added[a];
            if ((t->special && !parse_special) || t->len == 0 || t->len > len - pos) continue;
            if (memcmp(text + pos, t->text, t->len) == 0 && (best == NULL || t->len > best->len)) best = t;
        }
        if (best == NULL) {
            pos++;
            continue;
        }
        if (pos > plain && !encode_plain(wp, text + plain, pos - plain, type, o)) return false;
        emit(o, best->id, type);
        pos += best->len;
        plain = pos;
    }
    return plain >= len || encode_plain(wp, text + plain, len - plain, type, o);
}

static sy_status check_utf8(const char *text, size_t len, char *err, size_t err_size) {
    if (len > 0 && text == NULL) {
        sy_errmsg(err, err_size, "no text");
        return SY_ERR_INVALID_ARGUMENT;
    }
    const utf8proc_uint8_t *p = (const utf8proc_uint8_t *)text;
    for (size_t i = 0; i < len;) {
        utf8proc_int32_t c;
        utf8proc_ssize_t k = utf8proc_iterate(p + i, (utf8proc_ssize_t)(len - i), &c);
        if (k <= 0 || c < 0) {
            sy_errmsg(err, err_size, "text is not valid UTF-8 at byte %zu", i);
            return SY_ERR_INVALID_ARGUMENT;
        }
        i += (size_t)k;
    }
    return SY_OK;
}

static sy_status run_template(const sy_wordpiece *wp, const wp_piece *tpl, size_t n_tpl, const char *a, size_t a_len,
                              const char *b, size_t b_len, bool parse_special, id_out *o, char *err,
                              size_t err_size) {
    sy_status st = check_utf8(a, a_len, err, err_size);
    if (st == SY_OK && b) st = check_utf8(b, b_len, err, err_size);
    if (st != SY_OK) return st;
    for (size_t i = 0; i < n_tpl; i++) {
        const wp_piece *pc = &tpl[i];
        bool ok = true;
        if (pc->id == -1)
            ok = encode_segmented(wp, a, a_len, parse_special, pc->type_id, o);
        else if (pc->id == -2)
            ok = encode_segmented(wp, b, b_len, parse_special, pc->type_id, o);
        else
            emit(o, pc->id, pc->type_id);
        if (!ok) {
            sy_errmsg(err, err_size, "out of memory");
            return SY_ERR_OUT_OF_MEMORY;
        }
    }
    return SY_OK;
}

static sy_status finish(const id_out *o, size_t *n_out, char *err, size_t err_size) {
    *n_out = o->n;
    if (o->n > o->cap) {
        sy_errmsg(err, err_size, "%zu tokens do not fit in %zu", o->n, o->cap);
        return SY_ERR_BUFFER_TOO_SMALL;
    }
    return SY_OK;
}

sy_status sy_wordpiece_encode(const sy_wordpiece *wp, const char *text, size_t len, uint32_t flags, int32_t *out,
                              size_t capacity, size_t *n_out, char *err, size_t err_size) {
    id_out o = {out, NULL, out ? capacity : 0, 0};
    static const wp_piece plain_tpl[] = {{-1, 0}};
    bool add = (flags & SY_TOKENIZE_ADD_SPECIAL) && wp->n_single > 0;
    sy_status st = run_template(wp, add ? wp->single : plain_tpl, add ? wp->n_single : 1, text, len, NULL, 0,
                                (flags & SY_TOKENIZE_PARSE_SPECIAL) != 0, &o, err, err_size);
    return st != SY_OK ? st : finish(&o, n_out, err, err_size);
}

sy_status sy_wordpiece_encode_pair(const sy_wordpiece *wp, const char *a, size_t a_len, const char *b, size_t b_len,
                                   int32_t *out, int32_t *types, size_t capacity, size_t *n_out, char *err,
                                   size_t err_size) {
    if (wp->n_pair == 0) {
        sy_errmsg(err, err_size, "the tokenizer has no pair template");
        return SY_ERR_UNSUPPORTED;
    }
    id_out o = {out, types, out ? capacity : 0, 0};
    sy_status st = run_template(wp, wp->pair, wp->n_pair, a, a_len, b ? b : "", b ? b_len : 0, true, &o, err,
                                err_size);
    return st != SY_OK ? st : finish(&o, n_out, err, err_size);
}

/* ---- accessors ---- */

uint32_t sy_wordpiece_vocab_size(const sy_wordpiece *wp) { return wp->n_vocab; }

const char *sy_wordpiece_token_text(const sy_wordpiece *wp, int32_t id, size_t *len) {
    if (id < 0 || (uint32_t)id >= wp->n_vocab || wp->offset[id] == UINT32_MAX) return NULL;
    if (len) *len = wp->length[id];
    return wp->arena + wp->offset[id];
}

bool sy_wordpiece_is_special(const sy_wordpiece *wp, int32_t id) {
    return id >= 0 && (uint32_t)id < wp->n_vocab && wp->special[id];
}
int32_t sy_wordpiece_cls(const sy_wordpiece *wp) { return wp->cls; }
int32_t sy_wordpiece_sep(const sy_wordpiece *wp) { return wp->sep; }
int32_t sy_wordpiece_pad(const sy_wordpiece *wp) { return wp->pad; }
int32_t sy_wordpiece_unk(const sy_wordpiece *wp) { return wp->unk; }
uint64_t sy_wordpiece_memory(const sy_wordpiece *wp) { return wp->memory; }

void sy_wordpiece_free(sy_wordpiece *wp) {
    if (wp == NULL) return;
    for (size_t i = 0; i < wp->n_added; i++) free(wp->added[i].text);
    free(wp->added);
    free(wp->arena), free(wp->offset), free(wp->length), free(wp->table), free(wp->special);
    free(wp);
}

/* ---- reading tokenizer.json ---- */

bool sy_wordpiece_is_wordpiece_json(const char *json, size_t len) {
    /* good enough for choosing a reader; sy_wordpiece_from_json checks properly */
    const char *needle = "\"WordPiece\"";
    size_t nl = strlen(needle);
    for (size_t i = 0; i + nl <= len && i < len; i++)
        if (json[i] == '"' && memcmp(json + i, needle, nl) == 0) return true;
    return false;
}

static bool json_bool(const sy_json *v, bool dflt, bool *out) {
    if (v == NULL) {
        *out = dflt;
        return true;
    }
    if (!sy_json_is_bool(v)) return false;
    *out = sy_json_is_true(v);
    return true;
}

static bool read_normalizer(sy_wordpiece *wp, const sy_json *n, char *err, size_t err_size) {
    if (n == NULL || sy_json_is_null(n)) return true;
    const sy_json *type = sy_json_get(n, "type");
    if (!sy_json_is_string(type) || strcmp(type->str, "BertNormalizer") != 0) {
        sy_errmsg(err, err_size, "tokenizer.json: normalizer %s is not supported with WordPiece (BertNormalizer is)",
                  sy_json_is_string(type) ? type->str : "(no type)");
        return false;
    }
    wp->has_normalizer = true;
    const sy_json *sa = sy_json_get(n, "strip_accents");
    if (!json_bool(sy_json_get(n, "clean_text"), true, &wp->clean_text) ||
        !json_bool(sy_json_get(n, "handle_chinese_chars"), true, &wp->chinese) ||
        !json_bool(sy_json_get(n, "lowercase"), true, &wp->lowercase) ||
        (sa && !sy_json_is_null(sa) && !sy_json_is_bool(sa))) {
        sy_errmsg(err, err_size, "tokenizer.json: BertNormalizer options must be true or false");
        return false;
    }
    wp->strip_accents = sa == NULL || sy_json_is_null(sa) ? wp->lowercase : sy_json_is_true(sa);
    return true;
}

static bool read_pre_tokenizer(sy_wordpiece *wp, const sy_json *p, char *err, size_t err_size) {
    const sy_json *type = sy_json_get(p, "type");
    if (!sy_json_is_string(type) || strcmp(type->str, "BertPreTokenizer") != 0) {
        sy_errmsg(err, err_size, "tokenizer.json: pre_tokenizer %s is not supported with WordPiece (BertPreTokenizer is)",
                  sy_json_is_string(type) ? type->str : "(none)");
        return false;
    }
    wp->bert_pre = true;
    return true;
}

/* The vocabulary from n entries (text, length, id), ids below n_vocab; false with err for duplicates. */
static bool vocab_init(sy_wordpiece *wp, uint32_t n_vocab, size_t n, const char *const *texts, const size_t *lens,
                       const uint32_t *ids, char *err, size_t err_size) {
    size_t text = 0;
    for (size_t i = 0; i < n; i++) text += lens[i] + 1;
    wp->n_vocab = n_vocab;
    uint32_t slots = 1;
    while (slots < 2 * wp->n_vocab) slots <<= 1;
    wp->table_mask = slots - 1;
    wp->arena = malloc(text ? text : 1);
    wp->offset = malloc(wp->n_vocab * sizeof *wp->offset);
    wp->length = calloc(wp->n_vocab, sizeof *wp->length);
    wp->table = calloc(slots, sizeof *wp->table);
    wp->special = calloc(wp->n_vocab, 1);
    if (!wp->arena || !wp->offset || !wp->length || !wp->table || !wp->special) {
        sy_errmsg(err, err_size, "out of memory for the vocabulary");
        return false;
    }
    wp->memory = text + wp->n_vocab * 9ull + slots * 4ull;
    memset(wp->offset, 0xFF, wp->n_vocab * sizeof *wp->offset);
    for (size_t i = 0; i < n; i++) {
        uint32_t id = ids[i];
        if (wp->offset[id] != UINT32_MAX) {
            sy_errmsg(err, err_size, "vocabulary id %u is given twice", id);
            return false;
        }
        wp->offset[id] = (uint32_t)wp->arena_len;
        wp->length[id] = (uint32_t)lens[i];
        memcpy(wp->arena + wp->arena_len, texts[i], lens[i]);
        wp->arena[wp->arena_len + lens[i]] = '\0';
        wp->arena_len += lens[i] + 1;
        if (!vocab_insert(wp, id)) {
            sy_errmsg(err, err_size, "vocabulary token \"%.40s\" is given twice", texts[i]);
            return false;
        }
    }
    return true;
}

static bool read_model(sy_wordpiece *wp, const sy_json *m, char *err, size_t err_size) {
    const sy_json *type = sy_json_get(m, "type"), *vocab = sy_json_get(m, "vocab");
    if (!sy_json_is_string(type) || strcmp(type->str, "WordPiece") != 0) {
        sy_errmsg(err, err_size, "tokenizer.json: model type is not WordPiece");
        return false;
    }
    if (!sy_json_is_object(vocab) || vocab->count == 0 || vocab->count > WP_MAX_VOCAB) {
        sy_errmsg(err, err_size, "tokenizer.json: model.vocab must be an object of 1 to %u tokens", WP_MAX_VOCAB);
        return false;
    }
    const sy_json *prefix = sy_json_get(m, "continuing_subword_prefix");
    const char *pfx = sy_json_is_string(prefix) ? prefix->str : "##";
    size_t pl = sy_json_is_string(prefix) ? prefix->len : 2;
    if (prefix && !sy_json_is_string(prefix) && !sy_json_is_null(prefix)) pl = SIZE_MAX;
    if (pl >= sizeof wp->prefix) {
        sy_errmsg(err, err_size, "tokenizer.json: continuing_subword_prefix must be a string of at most 15 bytes");
        return false;
    }
    memcpy(wp->prefix, pfx, pl);
    wp->prefix_len = pl;
    const sy_json *mx = sy_json_get(m, "max_input_chars_per_word");
    wp->max_chars = 100;
    if (mx) {
        if (!sy_json_is_number(mx) || !(mx->num >= 1 && mx->num <= 1e6) || mx->num != (double)(uint32_t)mx->num) {
            sy_errmsg(err, err_size, "tokenizer.json: max_input_chars_per_word must be a whole number from 1 to 1000000");
            return false;
        }
        wp->max_chars = (uint32_t)mx->num;
    }
    /* ids: each below the count of entries times a margin, so tables stay proportional to the file */
    uint64_t max_id = 0;
    for (const sy_json *e = vocab->child; e; e = e->next) {
        if (!sy_json_is_number(e) || !(e->num >= 0 && e->num < WP_MAX_VOCAB) || e->num != (double)(uint32_t)e->num ||
            e->key_len == 0 || e->key_len > WP_MAX_TOKEN_BYTES || memchr(e->key, 0, e->key_len)) {
            sy_errmsg(err, err_size, "tokenizer.json: vocab entry \"%.40s\": id must be a whole number below %u and the "
                      "token 1 to %u bytes without U+0000", e->key, WP_MAX_VOCAB, WP_MAX_TOKEN_BYTES);
            return false;
        }
        if ((uint64_t)e->num + 1 > max_id) max_id = (uint64_t)e->num + 1;
    }
    if (max_id > 2 * (uint64_t)vocab->count + 1024) {
        sy_errmsg(err, err_size, "tokenizer.json: vocab ids reach %llu for %zu tokens", (unsigned long long)max_id,
                  vocab->count);
        return false;
    }
    const char **texts = malloc(vocab->count * sizeof *texts);
    size_t *lens = malloc(vocab->count * sizeof *lens);
    uint32_t *ids = malloc(vocab->count * sizeof *ids);
    bool ok = texts && lens && ids;
    size_t i = 0;
    for (const sy_json *e = vocab->child; ok && e; e = e->next, i++) {
        texts[i] = e->key;
        lens[i] = e->key_len;
        ids[i] = (uint32_t)e->num;
    }
    ok = ok ? vocab_init(wp, (uint32_t)max_id, vocab->count, texts, lens, ids, err, err_size)
            : (sy_errmsg(err, err_size, "out of memory"), false);
    free(texts), free(lens), free(ids);
    if (!ok) return false;
    const sy_json *unk = sy_json_get(m, "unk_token");
    wp->unk = sy_json_is_string(unk) ? vocab_find(wp, unk->str, unk->len) : -1;
    if (wp->unk < 0) {
        sy_errmsg(err, err_size, "tokenizer.json: unk_token is missing or not in the vocabulary");
        return false;
    }
    return true;
}

static bool read_added(sy_wordpiece *wp, const sy_json *added, char *err, size_t err_size) {
    if (added == NULL || sy_json_is_null(added)) return true;
    if (!sy_json_is_array(added) || added->count > WP_MAX_ADDED) {
        sy_errmsg(err, err_size, "tokenizer.json: added_tokens must be an array of at most %u", WP_MAX_ADDED);
        return false;
    }
    wp->added = calloc(added->count ? added->count : 1, sizeof *wp->added);
    if (wp->added == NULL) {
        sy_errmsg(err, err_size, "out of memory");
        return false;
    }
    for (const sy_json *t = added->child; t; t = t->next) {
        const sy_json *id = sy_json_get(t, "id"), *content = sy_json_get(t, "content");
        bool special = false, lstrip = false, rstrip = false, single = false, normalized = false;
        if (!sy_json_is_number(id) || !(id->num >= 0 && id->num < wp->n_vocab) || id->num != (double)(uint32_t)id->num ||
            !sy_json_is_string(content) || content->len == 0 || content->len > WP_MAX_TOKEN_BYTES ||
            !json_bool(sy_json_get(t, "special"), false, &special) ||
            !json_bool(sy_json_get(t, "lstrip"), false, &lstrip) ||
            !json_bool(sy_json_get(t, "rstrip"), false, &rstrip) ||
            !json_bool(sy_json_get(t, "single_word"), false, &single) ||
            !json_bool(sy_json_get(t, "normalized"), false, &normalized)) {
            sy_errmsg(err, err_size, "tokenizer.json: added_tokens entry %zu is malformed (id within the vocabulary, "
                      "content, booleans)", wp->n_added);
            return false;
        }
        if (lstrip || rstrip || single || normalized) {
            sy_errmsg(err, err_size, "tokenizer.json: added token \"%.40s\": lstrip, rstrip, single_word and "
                      "normalized are not supported with WordPiece", content->str);
            return false;
        }
        int32_t in_vocab = vocab_find(wp, content->str, content->len);
        if (in_vocab != (int32_t)id->num) {
            sy_errmsg(err, err_size, "tokenizer.json: added token \"%.40s\" is not vocab id %u", content->str,
                      (unsigned)id->num);
            return false;
        }
        wp_added *a = &wp->added[wp->n_added++];
        a->text = strndup(content->str, content->len);
        a->len = content->len;
        a->id = (int32_t)id->num;
        a->special = special;
        if (a->text == NULL) {
            sy_errmsg(err, err_size, "out of memory");
            return false;
        }
        if (special) wp->special[a->id] = 1;
    }
    return true;
}

/* One side of a TemplateProcessing: {"SpecialToken": {"id": "[CLS]", "type_id": 0}} or {"Sequence": {"id": "A", ...}}. */
static bool read_template(sy_wordpiece *wp, const sy_json *tpl, const sy_json *specials, wp_piece *out, size_t *n,
                          const char *which, char *err, size_t err_size) {
    if (!sy_json_is_array(tpl) || tpl->count > WP_MAX_TEMPLATE) {
        sy_errmsg(err, err_size, "tokenizer.json: post_processor.%s must be an array of at most %d pieces", which,
                  WP_MAX_TEMPLATE);
        return false;
    }
    for (const sy_json *p = tpl->child; p; p = p->next) {
        const sy_json *sp = sy_json_get(p, "SpecialToken"), *sq = sy_json_get(p, "Sequence");
        const sy_json *body = sp ? sp : sq;
        const sy_json *id = sy_json_get(body, "id"), *type = sy_json_get(body, "type_id");
        if (!sy_json_is_string(id) || !sy_json_is_number(type) || !(type->num >= 0 && type->num <= 255) ||
            type->num != (double)(int)type->num) {
            sy_errmsg(err, err_size, "tokenizer.json: post_processor.%s: a piece is malformed", which);
            return false;
        }
        wp_piece *pc = &out[(*n)++];
        pc->type_id = (int32_t)type->num;
        if (sq) {
            if (strcmp(id->str, "A") != 0 && strcmp(id->str, "B") != 0) {
                sy_errmsg(err, err_size, "tokenizer.json: post_processor.%s: sequence %s", which, id->str);
                return false;
            }
            pc->id = id->str[0] == 'A' ? -1 : -2;
            continue;
        }
        const sy_json *ids = sy_json_get(sy_json_get(specials, id->str), "ids");
        const sy_json *first = sy_json_at(ids, 0);
        if (sy_json_size(ids) != 1 || !sy_json_is_number(first) || !(first->num >= 0 && first->num < wp->n_vocab) ||
            first->num != (double)(uint32_t)first->num || wp->offset[(uint32_t)first->num] == UINT32_MAX) {
            sy_errmsg(err, err_size, "tokenizer.json: post_processor: special token %s must have one id in the vocabulary",
                      id->str);
            return false;
        }
        pc->id = (int32_t)first->num;
    }
    return true;
}

static bool read_post(sy_wordpiece *wp, const sy_json *p, char *err, size_t err_size) {
    if (p == NULL || sy_json_is_null(p)) return true;
    const sy_json *type = sy_json_get(p, "type");
    if (sy_json_is_string(type) && strcmp(type->str, "BertProcessing") == 0) {
        const sy_json *cls = sy_json_at(sy_json_get(p, "cls"), 1), *sep = sy_json_at(sy_json_get(p, "sep"), 1);
        if (!sy_json_is_number(cls) || !sy_json_is_number(sep) || !(cls->num >= 0 && cls->num < wp->n_vocab) ||
            !(sep->num >= 0 && sep->num < wp->n_vocab) || wp->offset[(uint32_t)cls->num] == UINT32_MAX ||
            wp->offset[(uint32_t)sep->num] == UINT32_MAX) {
            sy_errmsg(err, err_size, "tokenizer.json: BertProcessing needs cls and sep ids in the vocabulary");
            return false;
        }
        int32_t c = (int32_t)cls->num, s = (int32_t)sep->num;
        wp_piece single[] = {{c, 0}, {-1, 0}, {s, 0}}, pair[] = {{c, 0}, {-1, 0}, {s, 0}, {-2, 1}, {s, 1}};
        memcpy(wp->single, single, sizeof single);
        memcpy(wp->pair, pair, sizeof pair);
        wp->n_single = 3;
        wp->n_pair = 5;
        return true;
    }
    if (!sy_json_is_string(type) || strcmp(type->str, "TemplateProcessing") != 0) {
        sy_errmsg(err, err_size, "tokenizer.json: post_processor %s is not supported with WordPiece",
                  sy_json_is_string(type) ? type->str : "(no type)");
        return false;
    }
    const sy_json *specials = sy_json_get(p, "special_tokens");
    return read_template(wp, sy_json_get(p, "single"), specials, wp->single, &wp->n_single, "single", err, err_size) &&
           read_template(wp, sy_json_get(p, "pair"), specials, wp->pair, &wp->n_pair, "pair", err, err_size);
}

sy_wordpiece *sy_wordpiece_from_json(const char *json, size_t len, char *err, size_t err_size) {
    if (len > WP_MAX_JSON_BYTES) {
        sy_errmsg(err, err_size, "tokenizer.json: larger than %u bytes", WP_MAX_JSON_BYTES);
        return NULL;
    }
    sy_json_doc doc;
    sy_json_error je;
    if (!sy_json_parse(&doc, json, len, NULL, &je)) {
        sy_errmsg(err, err_size, "tokenizer.json: invalid JSON at byte %zu: %s", je.at, je.what);
        return NULL;
    }
    sy_wordpiece *wp = calloc(1, sizeof *wp);
    bool ok = wp != NULL;
    if (!ok) sy_errmsg(err, err_size, "out of memory");
    if (ok && doc.saw_nul) {
        sy_errmsg(err, err_size, "tokenizer.json: a string holds U+0000");
        ok = false;
    }
    const sy_json *root = doc.root;
    ok = ok && read_model(wp, sy_json_get(root, "model"), err, err_size) &&
         read_normalizer(wp, sy_json_get(root, "normalizer"), err, err_size) &&
         read_pre_tokenizer(wp, sy_json_get(root, "pre_tokenizer"), err, err_size) &&
         read_added(wp, sy_json_get(root, "added_tokens"), err, err_size) &&
         read_post(wp, sy_json_get(root, "post_processor"), err, err_size);
    if (ok) {
        wp->cls = vocab_find(wp, "[CLS]", 5);
        wp->sep = vocab_find(wp, "[SEP]", 5);
        wp->pad = vocab_find(wp, "[PAD]", 5);
        for (size_t i = 0; i < wp->n_single; i++) /* the template's own tokens where they are named otherwise */
            if (wp->single[i].id >= 0) {
                if (i == 0) wp->cls = wp->single[i].id;
                else wp->sep = wp->single[i].id;
            }
        const sy_json *pad = sy_json_get(sy_json_get(root, "padding"), "pad_id");
        if (sy_json_is_number(pad) && pad->num >= 0 && pad->num < wp->n_vocab) wp->pad = (int32_t)pad->num;
    }
    sy_json_doc_free(&doc);
    if (!ok) {
        sy_wordpiece_free(wp);
        return NULL;
    }
    return wp;
}

sy_wordpiece *sy_wordpiece_from_list(const char *const *tokens, const size_t *lens, uint32_t n, const uint8_t *special,
                                     int32_t unk, int32_t cls, int32_t sep, int32_t pad, bool lowercase, char *err,
                                     size_t err_size) {
    if (n == 0 || n > WP_MAX_VOCAB || unk < 0 || (uint32_t)unk >= n) {
        sy_errmsg(err, err_size, "a vocabulary of %u tokens with unknown-token id %d", n, unk);
        return NULL;
    }
    for (uint32_t i = 0; i < n; i++)
        if (lens[i] == 0 || lens[i] > WP_MAX_TOKEN_BYTES || memchr(tokens[i], 0, lens[i]) ||
            check_utf8(tokens[i], lens[i], err, err_size) != SY_OK) {
            sy_errmsg(err, err_size, "token %u: 1 to %u bytes of UTF-8 without U+0000", i, WP_MAX_TOKEN_BYTES);
            return NULL;
        }
    sy_wordpiece *wp = calloc(1, sizeof *wp);
    uint32_t *ids = malloc(n * sizeof *ids);
    bool ok = wp && ids;
    for (uint32_t i = 0; ok && i < n; i++) ids[i] = i;
    if (ok) ok = vocab_init(wp, n, n, tokens, lens, ids, err, err_size);
    free(ids);
    if (ok) {
        wp->has_normalizer = wp->clean_text = wp->chinese = true;
        wp->lowercase = wp->strip_accents = lowercase;
        wp->bert_pre = true;
        memcpy(wp->prefix, "##", 2);
        wp->prefix_len = 2;
        wp->max_chars = 100;
        wp->unk = unk;
        wp->cls = cls >= 0 && (uint32_t)cls < n ? cls : -1;
        wp->sep = sep >= 0 && (uint32_t)sep < n ? sep : -1;
        wp->pad = pad >= 0 && (uint32_t)pad < n ? pad : -1;
        size_t n_special = 0;
        for (uint32_t i = 0; i < n; i++) n_special += special && special[i];
        wp->added = calloc(n_special ? n_special : 1, sizeof *wp->added);
        ok = wp->added != NULL;
        for (uint32_t i = 0; ok && i < n; i++) {
            if (!special || !special[i]) continue;
            wp_added *a = &wp->added[wp->n_added++];
            a->text = strndup(tokens[i], lens[i]);
            a->len = lens[i];
            a->id = (int32_t)i;
            a->special = true;
            wp->special[i] = 1;
            ok = a->text != NULL;
        }
        if (wp->cls >= 0 && wp->sep >= 0) {
            wp_piece single[] = {{wp->cls, 0}, {-1, 0}, {wp->sep, 0}};
            wp_piece pair[] = {{wp->cls, 0}, {-1, 0}, {wp->sep, 0}, {-2, 1}, {wp->sep, 1}};
            memcpy(wp->single, single, sizeof single);
            memcpy(wp->pair, pair, sizeof pair);
            wp->n_single = 3;
            wp->n_pair = 5;
        }
        if (!ok) sy_errmsg(err, err_size, "out of memory");
    }
    if (!ok) {
        sy_wordpiece_free(wp);
        return NULL;
    }
    return wp;
}
