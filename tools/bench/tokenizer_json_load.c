/*
 * Loading a tokenizer.json, cold: parse + build + finish of a byte-level BPE tokenizer from a document already in
 * memory, with two JSON readers, for docs/benchmarks.md ("tokenizer.json loading").
 *
 *   scanner  sy_bpe_load_json_buffer, the loader of plugins/common: the streaming reader (json_reader.h) walks
 *            the document once, the vocab and merges go from it straight into the builder
 *   cjson    cJSON_ParseWithLength of the whole document, then the vocab, merges and added tokens taken from the
 *            tree into the same builder calls (batched, as the loader does; UTF-8 checked by the builder, as cJSON
 *            does not), the pre-tokenizer set with sy_bpe_builder_use_preset("qwen2") (the same regex and NFC:
 *            what parsing those few hundred bytes would give), then the same finish
 *   tree     the same as cjson with the JSON reader's own tree (sy_json_parse) in place of cJSON's: what the
 *            loader would cost if the reader had only its tree API
 *
 * Each run builds a new tokenizer with nothing cached (the tokenizer cache of tokenizer_cache.c is a layer above
 * these calls and is not used); the two alternate run by run so that a change in the machine's load hits both.
 * Reported: median, min and max of the wall time and of the thread's CPU time (which a busy machine distorts
 * less), in ms, plus the parse alone (cJSON_ParseWithLength + cJSON_Delete; sy_json_parse + sy_json_doc_free; the
 * scanner's validation of the whole document, sy_json_skip). The tokenizers are checked to agree (vocabulary,
 * merges, ids of a text).
 *
 * Not part of the build: compile it by hand against a release build tree:
 *
 *   cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release && cmake --build build
 *   gcc -O3 -std=c11 -D_GNU_SOURCE -Iplugins/common -Iabi tools/bench/tokenizer_json_load.c \
 *       build/plugins/common/libsy_common.a -o /tmp/tokenizer_json_load \
 *       $(pkg-config --cflags --libs libcjson libpcre2-8 libutf8proc libxxhash) -lpthread -lm
 *   /tmp/tokenizer_json_load [--runs N] /work/shared/tokenizers/qwen3/tokenizer.json
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tokenizer_bpe_internal.h"
#include "json_reader.h"
#include "switchyard/engine.h"

#define MAX_RUNS 101
#define BATCH 64

static double now(clockid_t clock) {
    struct timespec t;
    clock_gettime(clock, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void report(const char *what, double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, compare_doubles);
    printf("  %-34s median %8.2f   min %8.2f   max %8.2f\n", what, v[n / 2] * 1e3, v[0] * 1e3, v[n - 1] * 1e3);
}

/* ---- the cJSON variant ---- */

/* utf8_checked: the JSON reader validated the texts (cJSON does not: the builder checks them then). */
static bool flush_tokens(sy_bpe_builder *b, const char **texts, size_t *lens, int32_t *ids, size_t *n,
                         bool utf8_checked, char *err, size_t err_size) {
    size_t failed;
    bool ok = bpe_add_tokens_batched(b, texts, lens, ids, 0, *n, utf8_checked, &failed, err, err_size);
    *n = 0;
    return ok;
}

static bool flush_merges(sy_bpe_builder *b, const char **l, size_t *ll, const char **r, size_t *rl, size_t *n,
                         char *err, size_t err_size) {
    size_t failed;
    bool ok = bpe_add_merges_batched(b, l, ll, r, rl, *n, &failed, err, err_size);
    *n = 0;
    return ok;
}

static sy_bpe *load_with_cjson(const char *json, size_t len, char *err, size_t err_size) {
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (root == NULL) {
        snprintf(err, err_size, "cJSON: cannot parse");
        return NULL;
    }
    sy_bpe_builder *b = sy_bpe_builder_new(err, err_size);
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    bool ok = b != NULL && cJSON_IsObject(vocab) && cJSON_IsArray(merges) && cJSON_IsArray(added);
    if (b != NULL && !ok)
        snprintf(err, err_size, "cJSON: no model.vocab, model.merges or added_tokens");
    size_t guess = len / 80;
    ok = ok && sy_bpe_builder_reserve(b, guess, guess, err, err_size);

    const char *texts[BATCH], *rights[BATCH];
    size_t lens[BATCH], right_lens[BATCH], n = 0;
    int32_t ids[BATCH];
    for (const cJSON *e = ok ? vocab->child : NULL; ok && e != NULL; e = e->next) {
        if (!cJSON_IsNumber(e)) {
            snprintf(err, err_size, "cJSON: a vocab id is not a number");
            ok = false;
            break;
        }
        texts[n] = e->string;
        lens[n] = strlen(e->string);
        ids[n] = (int32_t)e->valuedouble;
        if (++n == BATCH)
            ok = flush_tokens(b, texts, lens, ids, &n, false, err, err_size);
    }
    ok = ok && flush_tokens(b, texts, lens, ids, &n, false, err, err_size);
    for (const cJSON *e = ok ? merges->child : NULL; ok && e != NULL; e = e->next) {
        if (cJSON_IsString(e)) {
            size_t split, line = strlen(e->valuestring);
            ok = bpe_split_merge_line(e->valuestring, line, &split);
            texts[n] = e->valuestring;
            lens[n] = split;
            rights[n] = e->valuestring + split + 1;
            right_lens[n] = line - split - 1;
        } else {
            ok = cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2 && cJSON_IsString(e->child) &&
                 cJSON_IsString(e->child->next);
            if (ok) {
                texts[n] = e->child->valuestring;
                lens[n] = strlen(texts[n]);
                rights[n] = e->child->next->valuestring;
                right_lens[n] = strlen(rights[n]);
            }
        }
        if (!ok) {
            snprintf(err, err_size, "cJSON: a merge is neither \"a b\" nor [\"a\", \"b\"]");
            break;
        }
        if (++n == BATCH)
            ok = flush_merges(b, texts, lens, rights, right_lens, &n, err, err_size);
    }
    ok = ok && flush_merges(b, texts, lens, rights, right_lens, &n, err, err_size);
    for (const cJSON *e = ok ? added->child : NULL; ok && e != NULL; e = e->next) {
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(e, "content");
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id");
        if (!cJSON_IsString(content) || !cJSON_IsNumber(id)) {
            snprintf(err, err_size, "cJSON: an added token without content or id");
            ok = false;
            break;
        }
        sy_bpe_added_token tok = {.content = content->valuestring,
                                  .content_len = strlen(content->valuestring),
                                  .id = (int32_t)id->valuedouble,
                                  .special = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "special")),
                                  .lstrip = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "lstrip")),
                                  .rstrip = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "rstrip")),
                                  .normalized = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "normalized")),
                                  .single_word = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "single_word"))};
        ok = sy_bpe_builder_add_added_token(b, &tok, err, err_size);
    }
    ok = ok && sy_bpe_builder_use_preset(b, "qwen2", err, err_size);
    cJSON_Delete(root);
    if (!ok) {
        sy_bpe_builder_free(b);
        return NULL;
    }
    return sy_bpe_builder_finish(b, err, err_size);
}

/* ---- the tree variant: as cjson, over sy_json_parse ---- */

static sy_bpe *load_with_tree(const char *json, size_t len, char *err, size_t err_size) {
    sy_json_doc doc;
    sy_json_error je;
    if (!sy_json_parse(&doc, json, len, NULL, &je)) {
        snprintf(err, err_size, "tree: invalid JSON at byte %zu: %s", je.at, je.what);
        return NULL;
    }
    sy_bpe_builder *b = sy_bpe_builder_new(err, err_size);
    const sy_json *model = sy_json_get(doc.root, "model");
    const sy_json *vocab = sy_json_get(model, "vocab");
    const sy_json *merges = sy_json_get(model, "merges");
    const sy_json *added = sy_json_get(doc.root, "added_tokens");
    bool ok = b != NULL && sy_json_is_object(vocab) && sy_json_is_array(merges) && sy_json_is_array(added);
    if (b != NULL && !ok)
        snprintf(err, err_size, "tree: no model.vocab, model.merges or added_tokens");
    size_t guess = len / 80;
    ok = ok && sy_bpe_builder_reserve(b, guess, guess, err, err_size);

    const char *texts[BATCH], *rights[BATCH];
    size_t lens[BATCH], right_lens[BATCH], n = 0;
    int32_t ids[BATCH];
    for (const sy_json *e = ok ? vocab->child : NULL; ok && e != NULL; e = e->next) {
        if (!sy_json_is_number(e)) {
            snprintf(err, err_size, "tree: a vocab id is not a number");
            ok = false;
            break;
        }
        texts[n] = e->key;
        lens[n] = e->key_len;
        ids[n] = (int32_t)e->num;
        if (++n == BATCH)
            ok = flush_tokens(b, texts, lens, ids, &n, true, err, err_size);
    }
    ok = ok && flush_tokens(b, texts, lens, ids, &n, true, err, err_size);
    for (const sy_json *e = ok ? merges->child : NULL; ok && e != NULL; e = e->next) {
        if (sy_json_is_string(e)) {
            size_t split;
            ok = bpe_split_merge_line(e->str, e->len, &split);
            texts[n] = e->str;
            lens[n] = split;
            rights[n] = e->str + split + 1;
            right_lens[n] = e->len - split - 1;
        } else {
            ok = sy_json_size(e) == 2 && sy_json_is_string(e->child) && sy_json_is_string(e->child->next);
            if (ok) {
                texts[n] = e->child->str;
                lens[n] = e->child->len;
                rights[n] = e->child->next->str;
                right_lens[n] = e->child->next->len;
            }
        }
        if (!ok) {
            snprintf(err, err_size, "tree: a merge is neither \"a b\" nor [\"a\", \"b\"]");
            break;
        }
        if (++n == BATCH)
            ok = flush_merges(b, texts, lens, rights, right_lens, &n, err, err_size);
    }
    ok = ok && flush_merges(b, texts, lens, rights, right_lens, &n, err, err_size);
    for (const sy_json *e = ok ? added->child : NULL; ok && e != NULL; e = e->next) {
        const sy_json *content = sy_json_get(e, "content");
        const sy_json *id = sy_json_get(e, "id");
        if (!sy_json_is_string(content) || !sy_json_is_number(id)) {
            snprintf(err, err_size, "tree: an added token without content or id");
            ok = false;
            break;
        }
        sy_bpe_added_token tok = {.content = content->str,
                                  .content_len = content->len,
                                  .id = (int32_t)id->num,
                                  .special = sy_json_is_true(sy_json_get(e, "special")),
                                  .lstrip = sy_json_is_true(sy_json_get(e, "lstrip")),
                                  .rstrip = sy_json_is_true(sy_json_get(e, "rstrip")),
                                  .normalized = sy_json_is_true(sy_json_get(e, "normalized")),
                                  .single_word = sy_json_is_true(sy_json_get(e, "single_word"))};
        ok = sy_bpe_builder_add_added_token(b, &tok, err, err_size);
    }
    ok = ok && sy_bpe_builder_use_preset(b, "qwen2", err, err_size);
    sy_json_doc_free(&doc);
    if (!ok) {
        sy_bpe_builder_free(b);
        return NULL;
    }
    return sy_bpe_builder_finish(b, err, err_size);
}

/* ---- checks ---- */

static bool same_tokenizer(const sy_bpe *a, const sy_bpe *b) {
    static const char text[] = "Hello world! It's 2026: caf\xc3\xa9, \xe6\x97\xa5\xe6\x9c\xac <|im_start|>user\n"
                               "    def f(x):\n        return x ** 2\n";
    if (sy_bpe_n_vocab(a) != sy_bpe_n_vocab(b) || sy_bpe_n_merges(a) != sy_bpe_n_merges(b))
        return false;
    for (size_t r = 0; r < sy_bpe_n_merges(a); r++) {
        int32_t al, ar, bl, br;
        if (!sy_bpe_merge_at(a, r, &al, &ar) || !sy_bpe_merge_at(b, r, &bl, &br) || al != bl || ar != br)
            return false;
    }
    sy_bpe_ids ia = {0}, ib = {0};
    bool same = sy_bpe_tokenize(a, text, sizeof text - 1, SY_TOKENIZE_PARSE_SPECIAL, &ia, NULL, 0) &&
                sy_bpe_tokenize(b, text, sizeof text - 1, SY_TOKENIZE_PARSE_SPECIAL, &ib, NULL, 0) && ia.n == ib.n &&
                memcmp(ia.ids, ib.ids, ia.n * sizeof *ia.ids) == 0;
    sy_bpe_ids_free(&ia);
    sy_bpe_ids_free(&ib);
    return same;
}

int main(int argc, char **argv) {
    int runs = 11;
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc)
            runs = atoi(argv[++i]);
        else
            path = argv[i];
    }
    if (path == NULL || runs < 1 || runs > MAX_RUNS) {
        fprintf(stderr, "usage: %s [--runs 1..%d] tokenizer.json\n", argv[0], MAX_RUNS);
        return 2;
    }
    char err[512];
    char *json;
    size_t len;
    if (!sy_json_read_file(path, (size_t)1 << 30, &json, &len, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    sy_bpe *ref = sy_bpe_load_json_buffer(json, len, err, sizeof err);
    if (ref == NULL) {
        fprintf(stderr, "scanner: %s\n", err);
        return 1;
    }
    for (int which = 0; which < 2; which++) {
        sy_bpe *other = (which == 0 ? load_with_cjson : load_with_tree)(json, len, err, sizeof err);
        if (other == NULL) {
            fprintf(stderr, "%s\n", err);
            return 1;
        }
        if (!same_tokenizer(ref, other)) {
            fprintf(stderr, "the %s loader built a different tokenizer\n", which == 0 ? "cjson" : "tree");
            return 1;
        }
        sy_bpe_free(other);
    }
    printf("%s: %zu bytes, %u ids, %zu merges; %d runs of each, alternating\n", path, len, sy_bpe_n_vocab(ref),
           sy_bpe_n_merges(ref), runs);
    sy_bpe_free(ref);

    enum { N_MODES = 6 };
    static double wall[N_MODES][MAX_RUNS], cpu[N_MODES][MAX_RUNS];
    for (int r = 0; r < runs; r++) {
        for (int mode = 0; mode < N_MODES; mode++) {
            double w0 = now(CLOCK_MONOTONIC), c0 = now(CLOCK_THREAD_CPUTIME_ID);
            sy_bpe *t = NULL;
            bool ok = true;
            if (mode == 0) {
                ok = (t = sy_bpe_load_json_buffer(json, len, err, sizeof err)) != NULL;
            } else if (mode == 1) {
                ok = (t = load_with_cjson(json, len, err, sizeof err)) != NULL;
            } else if (mode == 2) {
                ok = (t = load_with_tree(json, len, err, sizeof err)) != NULL;
            } else if (mode == 3) {
                sy_json_scan j = {.base = json, .p = json, .end = json + len, .err = err, .err_size = sizeof err};
                ok = sy_json_skip(&j);
            } else if (mode == 4) {
                cJSON *root = cJSON_ParseWithLength(json, len);
                ok = root != NULL;
                cJSON_Delete(root);
            } else {
                sy_json_doc doc;
                ok = sy_json_parse(&doc, json, len, NULL, NULL);
                sy_json_doc_free(&doc);
            }
            wall[mode][r] = now(CLOCK_MONOTONIC) - w0;
            cpu[mode][r] = now(CLOCK_THREAD_CPUTIME_ID) - c0;
            if (!ok) {
                fprintf(stderr, "run %d, mode %d: %s\n", r, mode, err);
                return 1;
            }
            sy_bpe_free(t);
        }
    }
    static const char *const names[N_MODES] = {"scanner: parse + build",  "cjson: parse + build",
                                                "tree: parse + build",     "scanner: validate only",
                                                "cjson: parse + free only", "tree: parse + free only"};
    printf("wall time (ms)\n");
    for (int mode = 0; mode < N_MODES; mode++)
        report(names[mode], wall[mode], runs);
    printf("thread CPU time (ms)\n");
    for (int mode = 0; mode < N_MODES; mode++)
        report(names[mode], cpu[mode], runs);
    free(json);
    return 0;
}
