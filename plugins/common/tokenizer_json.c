/* Hugging Face tokenizer files: tokenizer.json -> a byte-level BPE tokenizer (sy_bpe_load_json*), and the few
 * settings of tokenizer_config.json the engines use (sy_tokenizer_config_*).
 *
 * A tokenizer.json is read in one pass of the streaming JSON reader (json_reader.h): the 151k-entry vocab and
 * merges go from the document straight into the builder (bpe_builder.c) in batches, without a copy of each
 * string where it has no escapes; every other section is validated while it is skipped and its extent recorded,
 * then parsed on its own as a tree (sy_json_parse: small, and easier to read that way). The loader is a thin
 * layer over the builder: the tokenizer's own checks happen there.
 */
#include "tokenizer_bpe_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errmsg.h"
#include "json_reader.h"

#define BPE_MAX_JSON_BYTES ((size_t)1 << 30) /* a tokenizer.json beyond 1 GiB is not a tokenizer */

/* Where the sections of a tokenizer.json lie, and the model's small options. */
typedef struct json_doc {
    sy_json_span version, added_tokens, normalizer, pre_tokenizer, post_processor, decoder;
    sy_json_span type, dropout, unk_token, prefix, suffix, fuse_unk, byte_fallback, ignore_merges;
    sy_json_span merges;
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

/* Keeps a string returned by sy_json_string_view until the batch is flushed. */
static bool batch_keep(load_batch *lb, const sy_json_scan *j, text_ref *r, const char *s, size_t len) {
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

static bool flush_vocab(load_batch *lb, sy_bpe_builder *b, sy_json_scan *j) {
    const char *texts[LOAD_BATCH];
    size_t lens[LOAD_BATCH], failed;
    char inner[256];
    for (size_t i = 0; i < lb->n; i++) {
        texts[i] = batch_text(lb, &lb->left[i]);
        lens[i] = lb->left[i].len;
    }
    if (!bpe_add_tokens_batched(b, texts, lens, lb->ids, 0, lb->n, true, &failed, inner, sizeof inner)) {
        sy_errmsg(j->err, j->err_size, "model.vocab: %s", inner);
        return false;
    }
    lb->first_index += lb->n;
    lb->n = 0;
    lb->arena.len = 0;
    return true;
}

static bool flush_merges(load_batch *lb, sy_bpe_builder *b, sy_json_scan *j) {
    const char *lefts[LOAD_BATCH], *rights[LOAD_BATCH];
    size_t left_lens[LOAD_BATCH], right_lens[LOAD_BATCH], failed;
    char inner[400];
    for (size_t i = 0; i < lb->n; i++) {
        lefts[i] = batch_text(lb, &lb->left[i]);
        left_lens[i] = lb->left[i].len;
        rights[i] = batch_text(lb, &lb->right[i]);
        right_lens[i] = lb->right[i].len;
    }
    if (!bpe_add_merges_batched(b, lefts, left_lens, rights, right_lens, lb->n, &failed, inner, sizeof inner)) {
        sy_errmsg(j->err, j->err_size, "model.merges[%zu]: %s", lb->first_index + failed, inner);
        return false;
    }
    lb->first_index += lb->n;
    lb->n = 0;
    lb->arena.len = 0;
    return true;
}

static bool parse_vocab(sy_json_scan *j, sy_bpe_builder *b) {
    strbuf key = {0};
    load_batch *lb = calloc(1, sizeof *lb);
    bool first = true, failed = false, ok = lb != NULL;
    const char *k;
    size_t kn;
    if (!ok)
        sy_errmsg(j->err, j->err_size, "out of memory");
    while (ok && sy_json_next_member(j, &first, &key, &k, &kn, &failed)) {
        bool is_uint;
        uint64_t id;
        char shown[128];
        if (!(sy_json_peek(j, '-') || (j->p < j->end && sy_json_is_digit(*j->p)))) {
            sy_errmsg(j->err, j->err_size, "model.vocab: the id of %s is not a number",
                    sy_errmsg_quote(shown, sizeof shown, k, kn));
            ok = false;
            break;
        }
        if (!sy_json_number(j, &is_uint, &id)) {
            ok = false;
            break;
        }
        if (!is_uint || id >= SY_BPE_MAX_TOKENS) {
            sy_errmsg(j->err, j->err_size, "model.vocab: the id of %s is not an integer in 0..%u",
                    sy_errmsg_quote(shown, sizeof shown, k, kn), SY_BPE_MAX_TOKENS - 1);
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

static bool parse_merges(sy_json_scan *j, sy_bpe_builder *b) {
    strbuf left_buf = {0}, right_buf = {0};
    load_batch *lb = calloc(1, sizeof *lb);
    if (lb == NULL) {
        sy_errmsg(j->err, j->err_size, "out of memory");
        return false;
    }
    bool ok = sy_json_expect(j, '[', "model.merges: expected an array");
    sy_json_ws(j);
    if (ok && sy_json_peek(j, ']')) {
        j->p++;
        free(lb);
        return true;
    }
    while (ok) {
        sy_json_ws(j);
        const char *left = NULL, *right = NULL;
        size_t left_len = 0, right_len = 0;
        size_t index = lb->first_index + lb->n;
        if (sy_json_peek(j, '"')) {
            size_t split;
            ok = sy_json_string_view(j, &left_buf, &left, &left_len);
            if (ok && !bpe_split_merge_line(left, left_len, &split)) {
                char shown[128];
                ok = flush_merges(lb, b, j); /* an earlier entry's error comes first */
                if (ok)
                    sy_errmsg(j->err, j->err_size, "model.merges[%zu]: %s is not two tokens separated by one space",
                            index, sy_errmsg_quote(shown, sizeof shown, left, left_len));
                ok = false;
                break;
            }
            if (ok) {
                right = left + split + 1;
                right_len = left_len - split - 1;
                left_len = split;
            }
        } else if (sy_json_peek(j, '[')) {
            j->p++;
            sy_json_ws(j);
            ok = sy_json_string_view(j, &left_buf, &left, &left_len) &&
                 sy_json_expect(j, ',', "model.merges: expected ',' inside a pair");
            if (ok) {
                sy_json_ws(j);
                ok = sy_json_string_view(j, &right_buf, &right, &right_len) &&
                     sy_json_expect(j, ']', "model.merges: a pair has more than two entries");
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
        sy_json_ws(j);
        if (sy_json_peek(j, ',')) {
            j->p++;
            continue;
        }
        ok = sy_json_expect(j, ']', "model.merges: expected ',' or ']'") && flush_merges(lb, b, j);
        break;
    }
    sb_free(&left_buf);
    sb_free(&right_buf);
    sb_free(&lb->arena);
    free(lb);
    return ok;
}

static bool parse_model(sy_json_scan *j, sy_bpe_builder *b, json_doc *d) {
    strbuf key = {0};
    bool first = true, failed = false, ok = true;
    const char *k;
    size_t kn;
    if (!sy_json_peek(j, '{')) {
        if (j->p >= j->end)
            return sy_json_fail(j, "unexpected end of input");
        sy_errmsg(j->err, j->err_size, "model: expected an object");
        return false;
    }
    while (ok && sy_json_next_member(j, &first, &key, &k, &kn, &failed)) {
        sy_json_span *dst = NULL;
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
                ok = sy_json_skip_span(j, &d->merges);
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
        sy_json_span ignored;
        ok = sy_json_skip_span(j, dst ? dst : &ignored);
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
        sy_json_scan sub = *j;
        sub.p = d->merges.p;
        sub.end = d->merges.p + d->merges.len;
        if (!parse_merges(&sub, b))
            return false;
    }
    return true;
}

/* ---- the small sections, as trees ---- */

/* A recorded section as a tree. The scanner has validated it: only memory can fail here. */
static bool parse_span(const sy_json_span *s, const char *what, sy_json_doc *doc, char *err, size_t err_size) {
    if (s->saw_nul) {
        sy_errmsg(err, err_size, "%s: strings containing U+0000 are not supported here", what);
        return false;
    }
    if (!sy_json_parse(doc, s->p, s->len, NULL, NULL)) {
        sy_errmsg(err, err_size, "%s: cannot be parsed (out of memory?)", what);
        return false;
    }
    return true;
}

static bool unique_keys(const sy_json *obj, const char *ctx, char *err, size_t err_size) {
    for (const sy_json *a = obj->child; a != NULL; a = a->next)
        for (const sy_json *c = a->next; c != NULL; c = c->next)
            if (a->key_len == c->key_len && memcmp(a->key, c->key, a->key_len) == 0) {
                sy_errmsg(err, err_size, "%s: key \"%s\" appears twice", ctx, a->key);
                return false;
            }
    return true;
}

static bool want_object(const sy_json *v, const char *ctx, char *err, size_t err_size) {
    if (!sy_json_is_object(v)) {
        sy_errmsg(err, err_size, "%s: expected an object", ctx);
        return false;
    }
    return unique_keys(v, ctx, err, err_size);
}

static bool get_bool(const sy_json *obj, const char *key, bool dflt, bool *out, const char *ctx, char *err,
                     size_t err_size) {
    const sy_json *v = sy_json_get(obj, key);
    if (v == NULL || sy_json_is_null(v)) {
        *out = dflt;
        return true;
    }
    if (!sy_json_is_bool(v)) {
        sy_errmsg(err, err_size, "%s.%s: expected true or false", ctx, key);
        return false;
    }
    *out = sy_json_is_true(v);
    return true;
}

/* A string member (NULL when absent or null). */
static bool get_string(const sy_json *obj, const char *key, const char **out, const char *ctx, char *err,
                       size_t err_size) {
    const sy_json *v = sy_json_get(obj, key);
    *out = NULL;
    if (v == NULL || sy_json_is_null(v))
        return true;
    if (!sy_json_is_string(v)) {
        sy_errmsg(err, err_size, "%s.%s: expected a string", ctx, key);
        return false;
    }
    *out = v->str;
    return true;
}

static bool get_type(const sy_json *obj, const char **type, const char *ctx, char *err, size_t err_size) {
    if (!want_object(obj, ctx, err, err_size) || !get_string(obj, "type", type, ctx, err, err_size))
        return false;
    if (*type == NULL) {
        sy_errmsg(err, err_size, "%s.type is missing", ctx);
        return false;
    }
    return true;
}

static bool get_id(const sy_json *v, int32_t *id, const char *ctx, char *err, size_t err_size) {
    if (!sy_json_is_number(v) || !(v->num >= 0) || v->num >= SY_BPE_MAX_TOKENS ||
        v->num != floor(v->num)) {
        sy_errmsg(err, err_size, "%s: expected an integer id in 0..%u", ctx, SY_BPE_MAX_TOKENS - 1);
        return false;
    }
    *id = (int32_t)v->num;
    return true;
}

static bool load_model_options(sy_bpe_builder *b, const json_doc *d, char *err, size_t err_size) {
    bool ok = true;
    sy_json_doc doc;
    const sy_json *v;
    if (!d->type.present) {
        sy_errmsg(err, err_size, "model.type is missing (expected \"BPE\")");
        return false;
    }
    if (!parse_span(&d->type, "model.type", &doc, err, err_size))
        return false;
    v = doc.root;
    if (!sy_json_is_string(v) || strcmp(v->str, "BPE") != 0) {
        bool str = sy_json_is_string(v);
        sy_errmsg(err, err_size, "model.type is %s%s%s; only \"BPE\" is supported here", str ? "\"" : "",
                str ? v->str : "not a string", str ? "\"" : "");
        ok = false;
    }
    sy_json_doc_free(&doc);
    if (ok && d->dropout.present) {
        if (!parse_span(&d->dropout, "model.dropout", &doc, err, err_size))
            return false;
        v = doc.root;
        if (!sy_json_is_null(v) && !(sy_json_is_number(v) && v->num == 0.0)) {
            sy_errmsg(err, err_size, "model.dropout: BPE dropout (a training option) is not supported");
            ok = false;
        }
        sy_json_doc_free(&doc);
    }
    const sy_json_span *affixes[2] = {&d->prefix, &d->suffix};
    const char *affix_names[2] = {"model.continuing_subword_prefix", "model.end_of_word_suffix"};
    for (int i = 0; ok && i < 2; i++) {
        if (!affixes[i]->present)
            continue;
        if (!parse_span(affixes[i], affix_names[i], &doc, err, err_size))
            return false;
        v = doc.root;
        if (!sy_json_is_null(v) && !(sy_json_is_string(v) && v->str[0] == '\0')) {
            sy_errmsg(err, err_size, "%s: only null or \"\" is supported for a byte-level BPE", affix_names[i]);
            ok = false;
        }
        sy_json_doc_free(&doc);
    }
    const sy_json_span *flags[3] = {&d->fuse_unk, &d->byte_fallback, &d->ignore_merges};
    const char *flag_names[3] = {"model.fuse_unk", "model.byte_fallback", "model.ignore_merges"};
    bool values[3] = {false, false, false};
    for (int i = 0; ok && i < 3; i++) {
        if (!flags[i]->present)
            continue;
        if (!parse_span(flags[i], flag_names[i], &doc, err, err_size))
            return false;
        v = doc.root;
        if (sy_json_is_bool(v)) {
            values[i] = sy_json_is_true(v);
        } else if (!sy_json_is_null(v)) {
            sy_errmsg(err, err_size, "%s: expected true or false", flag_names[i]);
            ok = false;
        }
        sy_json_doc_free(&doc);
    }
    if (!ok)
        return false;
    sy_bpe_builder_set_byte_fallback(b, values[1]);
    sy_bpe_builder_set_ignore_merges(b, values[2]);
    if (d->unk_token.present) {
        if (!parse_span(&d->unk_token, "model.unk_token", &doc, err, err_size))
            return false;
        v = doc.root;
        if (sy_json_is_string(v)) {
            char inner[256];
            if (!sy_bpe_builder_set_unknown(b, v->str, strlen(v->str), values[0], inner,
                                            sizeof inner)) {
                sy_errmsg(err, err_size, "model.unk_token: %s", inner);
                ok = false;
            }
        } else if (!sy_json_is_null(v)) {
            sy_errmsg(err, err_size, "model.unk_token: expected a string or null");
            ok = false;
        }
        sy_json_doc_free(&doc);
    }
    return ok;
}

static bool load_added_tokens(sy_bpe_builder *b, const sy_json *arr, char *err, size_t err_size) {
    if (sy_json_is_null(arr))
        return true;
    if (!sy_json_is_array(arr)) {
        sy_errmsg(err, err_size, "added_tokens: expected an array");
        return false;
    }
    size_t index = 0;
    for (const sy_json *it = arr->child; it != NULL; it = it->next, index++) {
        char ctx[48];
        snprintf(ctx, sizeof ctx, "added_tokens[%zu]", index);
        if (!want_object(it, ctx, err, err_size))
            return false;
        sy_bpe_added_token tok = {0};
        const char *content;
        char idctx[64];
        snprintf(idctx, sizeof idctx, "%s.id", ctx);
        const sy_json *idv = sy_json_get(it, "id");
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
static bool load_normalizer(const sy_json *n, int depth, bool *any, bool *compat, bool *compose, const char *ctx,
                            char *err, size_t err_size) {
    const char *type;
    if (sy_json_is_null(n))
        return true;
    if (depth > 8) {
        sy_errmsg(err, err_size, "%s: Sequence nested too deeply", ctx);
        return false;
    }
    if (!get_type(n, &type, ctx, err, err_size))
        return false;
    if (strcmp(type, "Sequence") == 0) {
        const sy_json *list = sy_json_get(n, "normalizers");
        if (!sy_json_is_array(list)) {
            sy_errmsg(err, err_size, "%s.normalizers: expected an array", ctx);
            return false;
        }
        size_t i = 0;
        for (const sy_json *it = list->child; it != NULL; it = it->next, i++) {
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

static bool load_pre_tokenizer(sy_bpe_builder *b, const sy_json *pt, int depth, bool *saw_byte_level, const char *ctx,
                               char *err, size_t err_size) {
    const char *type;
    if (depth > 8) {
        sy_errmsg(err, err_size, "%s: Sequence nested too deeply", ctx);
        return false;
    }
    if (!get_type(pt, &type, ctx, err, err_size))
        return false;
    if (strcmp(type, "Sequence") == 0) {
        const sy_json *list = sy_json_get(pt, "pretokenizers");
        if (!sy_json_is_array(list)) {
            sy_errmsg(err, err_size, "%s.pretokenizers: expected an array", ctx);
            return false;
        }
        size_t i = 0;
        for (const sy_json *it = list->child; it != NULL; it = it->next, i++) {
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
        const sy_json *pattern = sy_json_get(pt, "pattern");
        char pctx[112];
        snprintf(pctx, sizeof pctx, "%s.pattern", ctx);
        if (!want_object(pattern, pctx, err, err_size))
            return false;
        const char *regex, *literal, *behavior;
        if (!get_string(pattern, "Regex", &regex, pctx, err, err_size) ||
            !get_string(pattern, "String", &literal, pctx, err, err_size) ||
            !get_string(pt, "behavior", &behavior, ctx, err, err_size))
            return false;
        if ((regex == NULL) == (literal == NULL) || sy_json_size(pattern) != 1) {
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

static bool load_decoder(const sy_json *d, int depth, bool *saw_byte_level, const char *ctx, char *err,
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
        const sy_json *list = sy_json_get(d, "decoders");
        if (!sy_json_is_array(list)) {
            sy_errmsg(err, err_size, "%s.decoders: expected an array", ctx);
            return false;
        }
        size_t i = 0;
        for (const sy_json *it = list->child; it != NULL; it = it->next, i++) {
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
static bool template_pair(const sy_json *pt, const char *key, int32_t *id, const char *ctx, char *err,
                          size_t err_size) {
    const sy_json *pair = sy_json_get(pt, key);
    char sub[112];
    snprintf(sub, sizeof sub, "%s.%s", ctx, key);
    if (!sy_json_is_array(pair) || sy_json_size(pair) != 2 || !sy_json_is_string(pair->child)) {
        sy_errmsg(err, err_size, "%s: expected [\"token\", id]", sub);
        return false;
    }
    return get_id(pair->child->next, id, sub, err, err_size);
}

static bool load_post_processor(const sy_json *pp, int depth, template_ids *tp, const char *ctx, char *err,
                                size_t err_size) {
    const char *type;
    if (sy_json_is_null(pp))
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
        const sy_json *list = sy_json_get(pp, "processors");
        if (!sy_json_is_array(list)) {
            sy_errmsg(err, err_size, "%s.processors: expected an array", ctx);
            return false;
        }
        size_t i = 0;
        for (const sy_json *it = list->child; it != NULL; it = it->next, i++) {
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
    const sy_json *single = sy_json_get(pp, "single");
    const sy_json *specials = sy_json_get(pp, "special_tokens");
    if (!sy_json_is_array(single)) {
        sy_errmsg(err, err_size, "%s.single: expected an array", ctx);
        return false;
    }
    if (specials != NULL && !sy_json_is_null(specials) && !want_object(specials, ctx, err, err_size))
        return false;
    bool after = false, saw_sequence = false;
    size_t i = 0;
    for (const sy_json *it = single->child; it != NULL; it = it->next, i++) {
        char sub[112];
        snprintf(sub, sizeof sub, "%s.single[%zu]", ctx, i);
        if (!want_object(it, sub, err, err_size))
            return false;
        const sy_json *seq = sy_json_get(it, "Sequence");
        const sy_json *spec = sy_json_get(it, "SpecialToken");
        if ((seq == NULL) == (spec == NULL) || sy_json_size(it) != 1) {
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
        const sy_json *entry = name && specials ? sy_json_get(specials, name) : NULL;
        const sy_json *ids = entry ? sy_json_get(entry, "ids") : NULL;
        if (!sy_json_is_array(ids)) {
            sy_errmsg(err, err_size, "%s: special token %s%s%s has no ids in special_tokens", sub, name ? "\"" : "",
                    name ? name : "(unnamed)", name ? "\"" : "");
            return false;
        }
        for (const sy_json *idv = ids->child; idv != NULL; idv = idv->next) {
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

/* Parses a recorded section (doc->root stays NULL when the section is absent). */
static bool with_section(const sy_json_span *s, const char *name, char *err, size_t err_size, sy_json_doc *doc) {
    memset(doc, 0, sizeof *doc);
    if (!s->present)
        return true;
    return parse_span(s, name, doc, err, err_size);
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
    sy_json_scan j = {.base = json, .p = json, .end = json + len, .err = err, .err_size = err_size};
    json_doc d;
    memset(&d, 0, sizeof d);
    strbuf key = {0};
    bool first = true, failed = false, ok = true;
    sy_json_doc section = {0};

    sy_json_ws(&j);
    if (!sy_json_peek(&j, '{')) {
        sy_json_fail(&j, "a tokenizer.json is an object");
        goto fail;
    }
    const char *k;
    size_t kn;
    while (ok && sy_json_next_member(&j, &first, &key, &k, &kn, &failed)) {
        sy_json_span *dst = NULL;
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
        sy_json_span ignored; /* truncation, padding and unknown keys: validated, unused */
        ok = sy_json_skip_span(&j, dst ? dst : &ignored);
    }
    if (!ok || failed)
        goto fail;
    sy_json_ws(&j);
    if (j.p != j.end) {
        sy_json_fail(&j, "trailing data after the document");
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
    if (section.root != NULL && !(sy_json_is_string(section.root) && strcmp(section.root->str, "1.0") == 0)) {
        sy_errmsg(err, err_size, "version: only \"1.0\" is known");
        goto fail;
    }
    sy_json_doc_free(&section);

    if (!with_section(&d.added_tokens, "added_tokens", err, err_size, &section) ||
        (section.root != NULL && !load_added_tokens(b, section.root, err, err_size)))
        goto fail;
    sy_json_doc_free(&section);

    bool any = false, compat = false, compose = false;
    if (!with_section(&d.normalizer, "normalizer", err, err_size, &section) ||
        (section.root != NULL &&
         !load_normalizer(section.root, 0, &any, &compat, &compose, "normalizer", err, err_size)))
        goto fail;
    sy_json_doc_free(&section);
    sy_bpe_builder_set_normalization(b, !any ? SY_BPE_NORM_NONE
                                        : compat ? (compose ? SY_BPE_NORM_NFKC : SY_BPE_NORM_NFKD)
                                                 : (compose ? SY_BPE_NORM_NFC : SY_BPE_NORM_NFD));

    bool saw_byte_level = false;
    if (!with_section(&d.pre_tokenizer, "pre_tokenizer", err, err_size, &section))
        goto fail;
    if (section.root == NULL || sy_json_is_null(section.root)) {
        sy_errmsg(err, err_size, "pre_tokenizer is missing: a byte-level BPE needs a ByteLevel pre-tokenizer");
        goto fail;
    }
    if (!load_pre_tokenizer(b, section.root, 0, &saw_byte_level, "pre_tokenizer", err, err_size))
        goto fail;
    sy_json_doc_free(&section);
    if (!saw_byte_level) {
        sy_errmsg(err, err_size, "pre_tokenizer has no ByteLevel step: only byte-level BPE is supported here");
        goto fail;
    }

    saw_byte_level = false;
    if (!with_section(&d.decoder, "decoder", err, err_size, &section))
        goto fail;
    if (section.root == NULL || sy_json_is_null(section.root)) {
        sy_errmsg(err, err_size, "decoder is missing: a byte-level BPE needs the ByteLevel decoder");
        goto fail;
    }
    if (!load_decoder(section.root, 0, &saw_byte_level, "decoder", err, err_size))
        goto fail;
    sy_json_doc_free(&section);
    if (!saw_byte_level) {
        sy_errmsg(err, err_size, "decoder has no ByteLevel step");
        goto fail;
    }

    template_ids tp;
    memset(&tp, 0, sizeof tp);
    if (!with_section(&d.post_processor, "post_processor", err, err_size, &section) ||
        (section.root != NULL && !load_post_processor(section.root, 0, &tp, "post_processor", err, err_size)))
        goto fail;
    sy_json_doc_free(&section);
    if (!sy_bpe_builder_set_template(b, tp.prefix, tp.n_prefix, tp.suffix, tp.n_suffix, err, err_size))
        goto fail;

    sb_free(&key);
    return sy_bpe_builder_finish(b, err, err_size);
fail:
    sy_json_doc_free(&section);
    sb_free(&key);
    sy_bpe_builder_free(b);
    return NULL;
}

sy_bpe *sy_bpe_load_json(const char *path, char *err, size_t err_size) {
    char *data;
    size_t len;
    if (!sy_json_read_file(path, BPE_MAX_JSON_BYTES, &data, &len, err, err_size))
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
    for (size_t i = 0; i < c->n_templates; i++) {
        free(c->template_names[i]);
        free(c->template_texts[i]);
    }
    free(c->template_names);
    free(c->template_texts);
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
static bool config_token(const sy_json *root, const char *key, char **out, char *err, size_t err_size) {
    const sy_json *v = sy_json_get(root, key);
    if (v == NULL || sy_json_is_null(v))
        return true;
    if (sy_json_is_string(v))
        return dup_string(v->str, out, err, err_size);
    if (sy_json_is_object(v)) {
        const sy_json *content = sy_json_get(v, "content");
        if (sy_json_is_string(content))
            return dup_string(content->str, out, err, err_size);
    }
    sy_errmsg(err, err_size, "%s: expected a string, an object with \"content\", or null", key);
    return false;
}

static bool config_flag(const sy_json *root, const char *key, int *out, char *err, size_t err_size) {
    const sy_json *v = sy_json_get(root, key);
    if (v == NULL || sy_json_is_null(v))
        return true;
    if (!sy_json_is_bool(v)) {
        sy_errmsg(err, err_size, "%s: expected true or false", key);
        return false;
    }
    *out = sy_json_is_true(v) ? 1 : 0;
    return true;
}

bool sy_tokenizer_config_parse(const char *json, size_t len, sy_tokenizer_config *out, char *err, size_t err_size) {
    memset(out, 0, sizeof *out);
    out->add_bos_token = out->add_eos_token = -1;
    if (json == NULL || len > BPE_MAX_JSON_BYTES) {
        sy_errmsg(err, err_size, "tokenizer_config.json: missing or too large");
        return false;
    }
    sy_json_doc doc;
    sy_json_error je;
    if (!sy_json_parse(&doc, json, len, NULL, &je)) {
        sy_errmsg(err, err_size, "invalid JSON at byte %zu: %s", je.at, je.what);
        return false;
    }
    if (doc.saw_nul) {
        sy_errmsg(err, err_size, "strings containing U+0000 are not supported");
        sy_json_doc_free(&doc);
        return false;
    }
    const sy_json *root = doc.root;
    bool ok = want_object(root, "tokenizer_config", err, err_size) &&
              config_token(root, "bos_token", &out->bos_token, err, err_size) &&
              config_token(root, "eos_token", &out->eos_token, err, err_size) &&
              config_token(root, "pad_token", &out->pad_token, err, err_size) &&
              config_token(root, "unk_token", &out->unk_token, err, err_size) &&
              config_flag(root, "add_bos_token", &out->add_bos_token, err, err_size) &&
              config_flag(root, "add_eos_token", &out->add_eos_token, err, err_size);
    const sy_json *tpl = ok ? sy_json_get(root, "chat_template") : NULL;
    if (ok && tpl != NULL && !sy_json_is_null(tpl)) {
        if (sy_json_is_string(tpl)) {
            ok = dup_string(tpl->str, &out->chat_template, err, err_size);
        } else if (sy_json_is_array(tpl)) {
            const char *first = NULL, *named_default = NULL;
            for (const sy_json *it = tpl->child; it != NULL; it = it->next) {
                const sy_json *name = sy_json_get(it, "name");
                const sy_json *text = sy_json_get(it, "template");
                if (!sy_json_is_object(it) || !sy_json_is_string(name) || !sy_json_is_string(text)) {
                    sy_errmsg(err, err_size, "chat_template: list entries need a \"name\" and a \"template\" string");
                    ok = false;
                    break;
                }
                if (first == NULL)
                    first = text->str;
                if (named_default == NULL && strcmp(name->str, "default") == 0)
                    named_default = text->str;
            }
            size_t count = 0;
            for (const sy_json *it = tpl->child; ok && it != NULL; it = it->next) count++;
            if (ok && count > 0 && count <= 64) {
                out->template_names = calloc(count, sizeof *out->template_names);
                out->template_texts = calloc(count, sizeof *out->template_texts);
                ok = out->template_names != NULL && out->template_texts != NULL;
                for (const sy_json *it = tpl->child; ok && it != NULL; it = it->next) {
                    ok = dup_string(sy_json_get(it, "name")->str, &out->template_names[out->n_templates], err,
                                    err_size) &&
                         dup_string(sy_json_get(it, "template")->str, &out->template_texts[out->n_templates], err,
                                    err_size);
                    if (ok) out->n_templates++;
                }
            } else if (ok && count > 64) {
                sy_errmsg(err, err_size, "chat_template: a list of %zu named templates; at most 64 are accepted", count);
                ok = false;
            }
            const char *chosen = named_default ? named_default : first;
            if (ok && chosen != NULL)
                ok = dup_string(chosen, &out->chat_template, err, err_size);
        } else {
            sy_errmsg(err, err_size, "chat_template: expected a string or a list of named templates");
            ok = false;
        }
    }
    sy_json_doc_free(&doc);
    if (!ok)
        sy_tokenizer_config_free(out);
    return ok;
}

bool sy_tokenizer_config_load(const char *path, sy_tokenizer_config *out, char *err, size_t err_size) {
    char *data;
    size_t len;
    memset(out, 0, sizeof *out);
    out->add_bos_token = out->add_eos_token = -1;
    if (!sy_json_read_file(path, BPE_MAX_JSON_BYTES, &data, &len, err, err_size))
        return false;
    char inner[512];
    bool ok = sy_tokenizer_config_parse(data, len, out, inner, sizeof inner);
    free(data);
    if (!ok)
        sy_errmsg(err, err_size, "%s: %s", path, inner);
    return ok;
}
