/* Byte-level BPE tokenizer: token-exact with Hugging Face `tokenizers` on the Qwen3 tokenizer.json and 16
 * variants of it (fixture recorded by tools/oracle/bpe_fixtures.py), decode(encode(s)), the in-memory builder
 * (the GGUF path), concurrency, refusal of malformed tokenizer.json files, tokenizer_config.json, and the UTF-8
 * streaming helper. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>
#include <cmocka.h>
#include <pthread.h>
#include <zstd.h>

#include "switchyard/engine.h"
#include "qwen3_fixture.h"
#include "tokenizer_bpe.h"
#include "base/utf8.h"

/* ---- helpers ------------------------------------------------------------------------------------------------ */

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int hex_value(char c) {
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* Hex string -> bytes (malloc'd, NUL-terminated). */
static char *unhex(const char *hex, size_t *len) {
    size_t n = strlen(hex) / 2;
    char *out = malloc(n + 1);
    assert_non_null(out);
    for (size_t i = 0; i < n; i++) {
        int hi = hex_value(hex[2 * i]), lo = hex_value(hex[2 * i + 1]);
        assert_true(hi >= 0 && lo >= 0);
        out[i] = (char)(hi * 16 + lo);
    }
    out[n] = '\0';
    *len = n;
    return out;
}

static size_t json_ids(const cJSON *arr, int32_t **ids) {
    size_t n = (size_t)cJSON_GetArraySize(arr);
    *ids = malloc((n + 1) * sizeof **ids);
    assert_non_null(*ids);
    size_t i = 0;
    for (const cJSON *it = arr->child; it != NULL; it = it->next)
        (*ids)[i++] = (int32_t)it->valuedouble;
    return n;
}

static void print_ids(const char *label, const int32_t *ids, size_t n) {
    fprintf(stderr, "    %s:", label);
    for (size_t i = 0; i < n && i < 40; i++)
        fprintf(stderr, " %d", ids[i]);
    fprintf(stderr, n > 40 ? " ... (%zu)\n" : "\n", n);
}

/* ---- shared state: the Qwen3 tokenizer and the oracle cases ------------------------------------------------ */

typedef struct shared {
    char *json; /* the Qwen3 tokenizer.json text */
    size_t json_len;
    sy_bpe *tok;
    cJSON *root;  /* the same, parsed with cJSON (variants are made from it) */
    cJSON *cases; /* the fixture document */
} shared;

static shared g;

static int setup_all(void **state) {
    (void)state;
    g.json = qwen3_fixture_read_zst("tokenizer.json.zst", &g.json_len);
    if (g.json == NULL)
        return -1;
    char err[512];
    double t0 = now_ms();
    g.tok = sy_bpe_load_json_buffer(g.json, g.json_len, err, sizeof err);
    double t1 = now_ms();
    if (g.tok == NULL) {
        fprintf(stderr, "load failed: %s\n", err);
        return -1;
    }
    fprintf(stderr, "[ info ] Qwen3 tokenizer.json (%zu bytes, %u ids, %zu merges) loaded in %.1f ms\n",
            g.json_len, sy_bpe_n_vocab(g.tok), sy_bpe_n_merges(g.tok), t1 - t0);
    size_t n;
    char *doc = qwen3_fixture_read_zst("bpe_cases.json.zst", &n);
    if (doc == NULL)
        return -1;
    g.cases = cJSON_ParseWithLength(doc, n);
    free(doc);
    g.root = cJSON_ParseWithLength(g.json, g.json_len);
    return g.cases != NULL && g.root != NULL ? 0 : -1;
}

static int teardown_all(void **state) {
    (void)state;
    sy_bpe_free(g.tok);
    cJSON_Delete(g.cases);
    cJSON_Delete(g.root);
    free(g.json);
    return 0;
}

static const cJSON *variant(int index) {
    const cJSON *vs = cJSON_GetObjectItemCaseSensitive(g.cases, "variants");
    return cJSON_GetArrayItem(vs, index);
}

/* Swaps key in obj for a copy of value, returning what was there (NULL if nothing) so it can be put back. */
static cJSON *swap_in(cJSON *obj, const char *key, const cJSON *value) {
    cJSON *orig = cJSON_DetachItemFromObjectCaseSensitive(obj, key);
    cJSON_AddItemToObject(obj, key, cJSON_Duplicate(value, 1));
    return orig;
}

static void swap_back(cJSON *obj, const char *key, cJSON *orig) {
    cJSON_DeleteItemFromObjectCaseSensitive(obj, key);
    if (orig != NULL)
        cJSON_AddItemToObject(obj, key, orig);
}

/* Builds a variant's tokenizer.json the way the oracle script did: top-level keys replaced, model keys set. The
 * parsed original (g.root) is patched in place and restored afterwards. */
static sy_bpe *load_variant(const cJSON *v) {
    enum { MAX_KEYS = 16 };
    cJSON *saved_top[MAX_KEYS], *saved_model[MAX_KEYS];
    const cJSON *replace = cJSON_GetObjectItemCaseSensitive(v, "replace");
    const cJSON *patch = cJSON_GetObjectItemCaseSensitive(v, "model_patch");
    cJSON *model = cJSON_GetObjectItemCaseSensitive(g.root, "model");
    assert_true(cJSON_GetArraySize(replace) <= MAX_KEYS && cJSON_GetArraySize(patch) <= MAX_KEYS);
    int n = 0;
    for (const cJSON *it = replace->child; it != NULL; it = it->next)
        saved_top[n++] = swap_in(g.root, it->string, it);
    n = 0;
    for (const cJSON *it = patch->child; it != NULL; it = it->next)
        saved_model[n++] = swap_in(model, it->string, it);
    char *text = cJSON_PrintUnformatted(g.root);
    n = 0;
    for (const cJSON *it = patch->child; it != NULL; it = it->next)
        swap_back(model, it->string, saved_model[n++]);
    n = 0;
    for (const cJSON *it = replace->child; it != NULL; it = it->next)
        swap_back(g.root, it->string, saved_top[n++]);
    assert_non_null(text);
    char err[512];
    sy_bpe *t = sy_bpe_load_json_buffer(text, strlen(text), err, sizeof err);
    free(text);
    if (t == NULL)
        fail_msg("variant %s does not load: %s", cJSON_GetObjectItemCaseSensitive(v, "name")->valuestring, err);
    return t;
}

/* Runs every case of one variant through tok; returns the number of mismatches (the first few are printed). */
static size_t check_cases(const sy_bpe *tok, const cJSON *v, size_t max_cases, size_t *n_checked, double *bytes) {
    const char *name = cJSON_GetObjectItemCaseSensitive(v, "name")->valuestring;
    uint32_t extra = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(v, "add_special")) ? SY_TOKENIZE_ADD_SPECIAL : 0;
    const cJSON *cases = cJSON_GetObjectItemCaseSensitive(v, "cases");
    size_t bad = 0, count = 0;
    for (const cJSON *c = cases->child; c != NULL && count < max_cases; c = c->next, count++) {
        size_t len;
        char *text = unhex(cJSON_GetObjectItemCaseSensitive(c, "hex")->valuestring, &len);
        *bytes += (double)len;
        for (int plain = 0; plain < 2; plain++) {
            const cJSON *want_json = cJSON_GetObjectItemCaseSensitive(c, plain ? "ids_plain" : "ids");
            if (want_json == NULL)
                want_json = cJSON_GetObjectItemCaseSensitive(c, "ids");
            int32_t *want;
            size_t n_want = json_ids(want_json, &want);
            sy_bpe_ids got = {0};
            char err[256];
            uint32_t flags = extra | (plain ? 0 : SY_TOKENIZE_PARSE_SPECIAL);
            bool ok = sy_bpe_tokenize(tok, text, len, flags, &got, err, sizeof err);
            if (!ok || got.n != n_want || (n_want > 0 && memcmp(got.ids, want, n_want * sizeof *want) != 0)) {
                if (bad < 8) {
                    fprintf(stderr, "  [%s] case %zu (%s) mismatch%s%s: text %s\n", name, count,
                            plain ? "plain" : "parse special", ok ? "" : ": ", ok ? "" : err,
                            cJSON_GetObjectItemCaseSensitive(c, "hex")->valuestring);
                    print_ids("want", want, n_want);
                    print_ids("got ", got.ids, got.n);
                }
                bad++;
            } else if (!plain) {
                /* decode(encode(s)): the text itself, or what tokenizers decodes (normalized, prefixed) */
                const cJSON *dec = cJSON_GetObjectItemCaseSensitive(c, "decoded_hex");
                size_t want_len = len;
                char *want_text = dec ? unhex(dec->valuestring, &want_len) : NULL;
                char *raw = NULL;
                size_t raw_len = 0, raw_cap = 0;
                assert_true(sy_bpe_decode(tok, got.ids, got.n, false, &raw, &raw_len, &raw_cap, err, sizeof err));
                /* tokenizers ends decoding with String::from_utf8_lossy: U+FFFD per ill-formed subpart */
                char *out = malloc(SY_UTF8_STREAM_MAX_OUT(raw_len));
                assert_non_null(out);
                sy_utf8_stream lossy;
                sy_utf8_stream_init(&lossy, true);
                size_t out_len = sy_utf8_stream_feed(&lossy, raw, raw_len, out);
                out_len += sy_utf8_stream_finish(&lossy, out + out_len);
                free(raw);
                const char *expect = want_text ? want_text : text;
                if (out_len != want_len || (want_len > 0 && memcmp(out, expect, want_len) != 0)) {
                    if (bad < 8)
                        fprintf(stderr, "  [%s] case %zu: decode(encode(s)) differs (%zu bytes, want %zu)\n", name,
                                count, out_len, want_len);
                    bad++;
                }
                free(out);
                free(want_text);
            }
            sy_bpe_ids_free(&got);
            free(want);
        }
        free(text);
    }
    *n_checked += count;
    return bad;
}

/* ---- token-exact against the oracle ------------------------------------------------------------------------ */

static void test_qwen3_matches_oracle(void **state) {
    (void)state;
    const cJSON *v = variant(0);
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(v, "name")->valuestring, "qwen3");
    size_t n = 0;
    double bytes = 0;
    double t0 = now_ms();
    size_t bad = check_cases(g.tok, v, SIZE_MAX, &n, &bytes);
    double t1 = now_ms();
    fprintf(stderr, "[ info ] %zu strings (%.0f bytes) x2 encodings + decode in %.1f ms\n", n, bytes, t1 - t0);
    assert_true(n >= 2000);
    if (bad)
        fail_msg("%zu of %zu Qwen3 cases differ from tokenizers", bad, n);
}

static void test_variants_match_oracle(void **state) {
    (void)state;
    const cJSON *vs = cJSON_GetObjectItemCaseSensitive(g.cases, "variants");
    int n_variants = cJSON_GetArraySize(vs);
    assert_true(n_variants >= 10);
    size_t total_bad = 0, total = 0;
    for (int i = 1; i < n_variants; i++) {
        const cJSON *v = variant(i);
        sy_bpe *t = load_variant(v);
        double bytes = 0;
        size_t bad = check_cases(t, v, SIZE_MAX, &total, &bytes);
        if (bad)
            fprintf(stderr, "  variant %s: %zu mismatches\n", cJSON_GetObjectItemCaseSensitive(v, "name")->valuestring,
                    bad);
        total_bad += bad;
        sy_bpe_free(t);
    }
    if (total_bad)
        fail_msg("%zu of %zu variant cases differ from tokenizers", total_bad, total);
}

/* The builder path (what a GGUF loader does): the same vocabulary, merges and added tokens as lists, the
 * pre-tokenizer by its GGUF name. It must agree with the tokenizer.json load on the whole corpus. */
static void test_builder_matches_json(void **state) {
    (void)state;
    char err[512];
    sy_bpe_builder *b = sy_bpe_builder_new(err, sizeof err);
    assert_non_null(b);
    uint32_t n_vocab = sy_bpe_n_vocab(g.tok);
    assert_true(sy_bpe_builder_reserve(b, n_vocab, sy_bpe_n_merges(g.tok), err, sizeof err));
    for (uint32_t id = 0; id < n_vocab; id++) {
        size_t len;
        const char *text = sy_bpe_token_text(g.tok, (int32_t)id, &len);
        if (text == NULL || (sy_bpe_token_flags(g.tok, (int32_t)id) & SY_TOKEN_CONTROL) || id >= 151643)
            continue; /* added tokens come below */
        assert_true(sy_bpe_builder_add_token(b, text, len, (int32_t)id, err, sizeof err));
    }
    for (size_t r = 0; r < sy_bpe_n_merges(g.tok); r++) {
        int32_t a, c;
        assert_true(sy_bpe_merge_at(g.tok, r, &a, &c));
        size_t la, lc;
        const char *ta = sy_bpe_token_text(g.tok, a, &la), *tc = sy_bpe_token_text(g.tok, c, &lc);
        /* half of them as GGUF's "left right" lines, half as pairs */
        if (r % 2 == 0) {
            char line[512];
            assert_true(la + lc + 1 < sizeof line);
            memcpy(line, ta, la);
            line[la] = ' ';
            memcpy(line + la + 1, tc, lc);
            assert_true(sy_bpe_builder_add_merge_line(b, line, la + lc + 1, err, sizeof err));
        } else {
            assert_true(sy_bpe_builder_add_merge(b, ta, la, tc, lc, err, sizeof err));
        }
    }
    for (uint32_t id = 151643; id < n_vocab; id++) {
        size_t len;
        const char *text = sy_bpe_token_text(g.tok, (int32_t)id, &len);
        sy_bpe_added_token t = {.content = text, .content_len = len, .id = (int32_t)id,
                                .special = (sy_bpe_token_flags(g.tok, (int32_t)id) & SY_TOKEN_CONTROL) != 0};
        if (!sy_bpe_builder_add_added_token(b, &t, err, sizeof err))
            fail_msg("%s", err);
    }
    assert_false(sy_bpe_builder_use_preset(b, "no-such-pre", err, sizeof err));
    assert_non_null(strstr(err, "qwen2"));
    assert_true(sy_bpe_builder_use_preset(b, "qwen2", err, sizeof err));
    sy_bpe *t = sy_bpe_builder_finish(b, err, sizeof err);
    if (t == NULL)
        fail_msg("%s", err);
    assert_int_equal(sy_bpe_n_vocab(t), n_vocab);
    for (uint32_t id = 0; id < n_vocab; id += 97) {
        size_t l1, l2;
        const char *b1 = sy_bpe_token_bytes(g.tok, (int32_t)id, &l1), *b2 = sy_bpe_token_bytes(t, (int32_t)id, &l2);
        assert_int_equal(l1, l2);
        assert_memory_equal(b1, b2, l1);
    }
    size_t n = 0;
    double bytes = 0;
    size_t bad = check_cases(t, variant(0), SIZE_MAX, &n, &bytes);
    sy_bpe_free(t);
    if (bad)
        fail_msg("builder-made tokenizer: %zu of %zu cases differ", bad, n);
}

/* Several threads tokenizing with one tokenizer (the word cache is shared) get the oracle's answers. */
typedef struct thread_job {
    const cJSON *v;
    size_t bad;
    size_t n;
} thread_job;

static void *thread_main(void *arg) {
    thread_job *job = arg;
    double bytes = 0;
    job->bad = check_cases(g.tok, job->v, SIZE_MAX, &job->n, &bytes);
    return NULL;
}

static void test_concurrent_tokenize(void **state) {
    (void)state;
    enum { N_THREADS = 4 };
    pthread_t th[N_THREADS];
    thread_job jobs[N_THREADS];
    for (int i = 0; i < N_THREADS; i++) {
        jobs[i] = (thread_job){.v = variant(0)};
        assert_int_equal(pthread_create(&th[i], NULL, thread_main, &jobs[i]), 0);
    }
    int joined = 0;
    for (int i = 0; i < N_THREADS; i++)
        joined += pthread_join(th[i], NULL) == 0;
    assert_int_equal(joined, N_THREADS); /* all joined before any assertion can leave this frame */
    for (int i = 0; i < N_THREADS; i++) {
        assert_int_equal(jobs[i].bad, 0);
        assert_true(jobs[i].n >= 2000);
    }
}

/* ---- behaviour on specific inputs ------------------------------------------------------------------------------ */

static void expect_ids(const sy_bpe *t, const char *text, uint32_t flags, const int32_t *want, size_t n_want) {
    sy_bpe_ids got = {0};
    char err[256];
    if (!sy_bpe_tokenize(t, text, strlen(text), flags, &got, err, sizeof err))
        fail_msg("tokenize(%s): %s", text, err);
    if (got.n != n_want || (n_want > 0 && memcmp(got.ids, want, n_want * sizeof *want) != 0)) {
        print_ids("want", want, n_want);
        print_ids("got ", got.ids, got.n);
        fail_msg("tokenize(%s) differs", text);
    }
    sy_bpe_ids_free(&got);
}

static void test_special_tokens_and_lookups(void **state) {
    (void)state;
    const sy_bpe *t = g.tok;
    /* "<|im_start|>user\nHi<|im_end|>" with and without parsing specials */
    const int32_t with[] = {151644, 872, 198, 13048, 151645};
    expect_ids(t, "<|im_start|>user\nHi<|im_end|>", SY_TOKENIZE_PARSE_SPECIAL, with, 5);
    sy_bpe_ids plain = {0};
    char err[256];
    assert_true(sy_bpe_tokenize(t, "<|im_end|>", 10, 0, &plain, err, sizeof err));
    assert_true(plain.n > 1);
    for (size_t i = 0; i < plain.n; i++)
        assert_int_not_equal(plain.ids[i], 151645);
    sy_bpe_ids_free(&plain);
    /* <think> is an added token that is not special: matched even without parsing specials */
    const int32_t think[] = {151667};
    expect_ids(t, "<think>", 0, think, 1);

    assert_int_equal(sy_bpe_find_token(t, "<|im_end|>", 10), 151645);
    assert_int_equal(sy_bpe_find_token(t, "\xc4\xa0the", 5), 279); /* "Ġthe" */
    assert_int_equal(sy_bpe_find_token(t, "no such token here", 18), -1);
    assert_true(sy_bpe_token_flags(t, 151645) & SY_TOKEN_CONTROL);
    assert_false(sy_bpe_token_flags(t, 151657) & SY_TOKEN_CONTROL); /* <tool_call> is not special */
    assert_int_equal(sy_bpe_token_flags(t, 279), 0);
    assert_int_equal(sy_bpe_token_flags(t, -1), 0);
    assert_int_equal(sy_bpe_token_flags(t, (int32_t)sy_bpe_n_vocab(t)), 0);
    size_t len;
    const char *bytes = sy_bpe_token_bytes(t, 279, &len);
    assert_int_equal(len, 4);
    assert_memory_equal(bytes, " the", 4);
    bytes = sy_bpe_token_bytes(t, 151645, &len);
    assert_int_equal(len, 10);
    assert_memory_equal(bytes, "<|im_end|>", 10);
    assert_null(sy_bpe_token_bytes(t, 999999, &len));
    assert_int_equal(len, 0);

    /* skip_special drops control tokens when decoding */
    char *out = NULL;
    size_t out_len = 0, out_cap = 0;
    assert_true(sy_bpe_decode(t, with, 5, true, &out, &out_len, &out_cap, err, sizeof err));
    assert_int_equal(out_len, 7);
    assert_memory_equal(out, "user\nHi", 7);
    const int32_t invalid[] = {279, 999999};
    assert_false(sy_bpe_decode(t, invalid, 2, false, &out, &out_len, &out_cap, err, sizeof err));
    assert_non_null(strstr(err, "999999"));
    free(out);

    /* Qwen has no post-processor template: ADD_SPECIAL adds nothing */
    const int32_t hello[] = {9707};
    expect_ids(t, "Hello", SY_TOKENIZE_ADD_SPECIAL, hello, 1);
}

static void test_invalid_utf8_refused(void **state) {
    (void)state;
    const char *bad[] = {"abc\xff", "\xc3", "ok \xe2\x82", "\xed\xa0\x80", "\xc0\xaf", "\xf4\x90\x80\x80"};
    const size_t at[] = {3, 0, 3, 0, 0, 0};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        sy_bpe_ids ids = {0};
        char err[256];
        assert_false(sy_bpe_tokenize(g.tok, bad[i], strlen(bad[i]), 0, &ids, err, sizeof err));
        char want[64];
        snprintf(want, sizeof want, "at byte %zu", at[i]);
        assert_non_null(strstr(err, want));
        assert_int_equal(ids.n, 0);
        sy_bpe_ids_free(&ids);
    }
    /* a failure keeps what the list held */
    sy_bpe_ids ids = {0};
    char err[256];
    assert_true(sy_bpe_tokenize(g.tok, "Hello", 5, 0, &ids, err, sizeof err));
    assert_false(sy_bpe_tokenize(g.tok, "x\xff", 2, 0, &ids, err, sizeof err));
    assert_int_equal(ids.n, 1);
    assert_int_equal(ids.ids[0], 9707);
    sy_bpe_ids_free(&ids);
}

/* Long runs that are a single regex match or many tiny ones: they finish and round-trip. */
static void test_long_inputs(void **state) {
    (void)state;
    const char *units[] = {" ", "a", "7", "\n", "!", "\xe6\x97\xa5", "ab ", "\xf0\x9f\x98\x80", " \t"};
    const char *names[] = {"space", "a", "7", "newline", "!", "CJK", "ab+space", "emoji", "space+tab"};
    for (size_t u = 0; u < sizeof units / sizeof *units; u++) {
        size_t ul = strlen(units[u]);
        size_t reps = (256 * 1024) / ul;
        char *text = malloc(reps * ul);
        assert_non_null(text);
        for (size_t i = 0; i < reps; i++)
            memcpy(text + i * ul, units[u], ul);
        sy_bpe_ids ids = {0};
        char err[256];
        double t0 = now_ms();
        if (!sy_bpe_tokenize(g.tok, text, reps * ul, 0, &ids, err, sizeof err))
            fail_msg("long input %zu: %s", u, err);
        double t1 = now_ms();
        char *out = NULL;
        size_t out_len = 0, out_cap = 0;
        assert_true(sy_bpe_decode(g.tok, ids.ids, ids.n, false, &out, &out_len, &out_cap, err, sizeof err));
        assert_int_equal(out_len, reps * ul);
        assert_memory_equal(out, text, out_len);
        fprintf(stderr, "[ info ] 256 KiB of %s: %zu tokens in %.1f ms\n", names[u], ids.n, t1 - t0);
        free(out);
        free(text);
        sy_bpe_ids_free(&ids);
    }
}

/* ---- malformed tokenizer.json files --------------------------------------------------------------------------- */

/* A small valid tokenizer.json; the cases below each break one thing in it. */
#define MINI_ADDED "[{\"id\":6,\"content\":\"<|e|>\",\"special\":true,\"lstrip\":false,\"rstrip\":false," \
                   "\"normalized\":false,\"single_word\":false}]"
#define MINI_PRE "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":true}"
#define MINI_VOCAB "{\"a\":0,\"b\":1,\"ab\":2,\"\xc4\xa0\":3,\"\xc4\xa0" "ab\":4,\"c\":5}"
#define MINI_MERGES "[\"a b\",\"\xc4\xa0 ab\"]"
#define MINI_MODEL(vocab, merges) "{\"type\":\"BPE\",\"dropout\":null,\"unk_token\":null,\"vocab\":" vocab \
                                  ",\"merges\":" merges "}"
#define MINI(added, norm, pre, post, dec, model) \
    "{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,\"added_tokens\":" added ",\"normalizer\":" norm \
    ",\"pre_tokenizer\":" pre ",\"post_processor\":" post ",\"decoder\":" dec ",\"model\":" model "}"
#define MINI_OK MINI(MINI_ADDED, "null", MINI_PRE, "null", "{\"type\":\"ByteLevel\"}", \
                     MINI_MODEL(MINI_VOCAB, MINI_MERGES))

static void test_mini_tokenizer(void **state) {
    (void)state;
    char err[512];
    const char *json = MINI_OK;
    sy_bpe *t = sy_bpe_load_json_buffer(json, strlen(json), err, sizeof err);
    if (t == NULL)
        fail_msg("%s", err);
    const int32_t want[] = {2, 4, 3, 5, 6, 0};
    expect_ids(t, "ab ab c<|e|>a", SY_TOKENIZE_PARSE_SPECIAL, want, 6);
    /* "d" has no byte token and there is no unknown token: dropped, as tokenizers does, so "a" and "b" meet */
    const int32_t dropped[] = {2};
    expect_ids(t, "adb", 0, dropped, 1);
    sy_bpe_free(t);

    /* merges listed before the vocabulary, and as [a, b] pairs */
    const char *reordered = "{\"model\":{\"merges\":[[\"a\",\"b\"],[\"\xc4\xa0\",\"ab\"]],\"type\":\"BPE\","
                            "\"vocab\":" MINI_VOCAB "},\"pre_tokenizer\":" MINI_PRE
                            ",\"decoder\":{\"type\":\"ByteLevel\"}}";
    t = sy_bpe_load_json_buffer(reordered, strlen(reordered), err, sizeof err);
    if (t == NULL)
        fail_msg("%s", err);
    const int32_t want2[] = {2, 4};
    expect_ids(t, "ab ab", 0, want2, 2);
    sy_bpe_free(t);

    /* a TemplateProcessing post-processor supplies the ids of ADD_SPECIAL */
    const char *templ = MINI(MINI_ADDED, "null", MINI_PRE,
                             "{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<|e|>\","
                             "\"type_id\":0}},{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],\"special_tokens\":{"
                             "\"<|e|>\":{\"id\":\"<|e|>\",\"ids\":[6],\"tokens\":[\"<|e|>\"]}}}",
                             "{\"type\":\"ByteLevel\"}", MINI_MODEL(MINI_VOCAB, MINI_MERGES));
    t = sy_bpe_load_json_buffer(templ, strlen(templ), err, sizeof err);
    if (t == NULL)
        fail_msg("%s", err);
    const int32_t with_bos[] = {6, 2};
    expect_ids(t, "ab", SY_TOKENIZE_ADD_SPECIAL, with_bos, 2);
    const int32_t without[] = {2};
    expect_ids(t, "ab", 0, without, 1);
    sy_bpe_free(t);
}

/* Unknown bytes: the unknown token (fused or not) and "<0xXX>" byte fallback; expectations from tokenizers. */
static void test_unknown_and_byte_fallback(void **state) {
    (void)state;
#define UNK_VOCAB "{\"a\":0,\"b\":1,\"ab\":2,\"\xc4\xa0\":3,\"\xc4\xa0" "ab\":4,\"c\":5,\"<unk>\":6,\"<0x64>\":7," \
                  "\"<0xC4>\":8,\"<0xA0>\":9}"
    static const char *const options[] = {
        "\"unk_token\":\"<unk>\"",
        "\"unk_token\":\"<unk>\",\"fuse_unk\":true",
        "\"byte_fallback\":true",
        "\"byte_fallback\":true,\"unk_token\":\"<unk>\"",
    };
    static const char *const texts[] = {"adddb", "xyz a", "dd"};
    static const int32_t want[4][3][5] = {
        {{0, 6, 6, 6, 1}, {6, 6, 6, 3, 0}, {6, 6}},
        {{0, 6, 1}, {6, 3, 0}, {6}},
        {{0, 7, 7, 7, 1}, {3, 0}, {7, 7}},
        {{0, 7, 7, 7, 1}, {6, 6, 6, 3, 0}, {7, 7}},
    };
    static const size_t n_want[4][3] = {{5, 5, 2}, {3, 3, 1}, {5, 2, 2}, {5, 5, 2}};
    for (size_t o = 0; o < 4; o++) {
        char json[2048], err[512];
        snprintf(json, sizeof json,
                 "{\"pre_tokenizer\":" MINI_PRE ",\"decoder\":{\"type\":\"ByteLevel\"},\"model\":{\"type\":\"BPE\","
                 "%s,\"vocab\":" UNK_VOCAB ",\"merges\":[\"a b\",\"\xc4\xa0 ab\"]}}",
                 options[o]);
        sy_bpe *t = sy_bpe_load_json_buffer(json, strlen(json), err, sizeof err);
        if (t == NULL)
            fail_msg("%s", err);
        for (size_t i = 0; i < 3; i++)
            expect_ids(t, texts[i], 0, want[o][i], n_want[o][i]);
        sy_bpe_free(t);
    }
#undef UNK_VOCAB
}

typedef struct bad_case {
    const char *json;
    const char *message; /* a part of the expected error */
} bad_case;

static char *deep_nesting(void) {
    static char buf[2048];
    strcpy(buf, "{\"padding\":");
    for (int i = 0; i < 300; i++)
        strcat(buf, "[");
    for (int i = 0; i < 300; i++)
        strcat(buf, "]");
    strcat(buf, "}");
    return buf;
}

static void test_malformed_refused(void **state) {
    (void)state;
    const bad_case cases[] = {
        {"", "invalid JSON at byte 0"},
        {"[]", "is an object"},
        {"{\"model\":", "unexpected end of input"},
        {MINI_OK " x", "trailing data"},
        {"{\"version\":\"1.0\"}", "\"model\" section is missing"},
        {"{\"model\":[]}", "model: expected an object"},
        {"{\"model\":{\"type\":\"BPE\",\"merges\":[]}}", "model.vocab is missing"},
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0}}}", "model.merges is missing"},
        {MINI(MINI_ADDED, "null", MINI_PRE, "null", "{\"type\":\"ByteLevel\"}",
              "{\"type\":\"WordPiece\",\"vocab\":{\"a\":0},\"merges\":[]}"), "only \"BPE\""},
        {MINI("[]", "null", MINI_PRE, "null", "{\"type\":\"ByteLevel\"}", "{\"vocab\":{\"a\":0},\"merges\":[]}"),
         "model.type is missing"},
        {MINI("[]", "null", MINI_PRE, "null", "{\"type\":\"ByteLevel\"}", MINI_MODEL("{}", "[]")),
         "vocabulary is empty"},
        {MINI("[]", "null", MINI_PRE, "null", "null", MINI_MODEL("{\"a\":-1}", "[]")), "not an integer"},
        {MINI("[]", "null", MINI_PRE, "null", "null", MINI_MODEL("{\"a\":1.5}", "[]")), "not an integer"},
        {MINI("[]", "null", MINI_PRE, "null", "null", MINI_MODEL("{\"a\":\"0\"}", "[]")), "is not a number"},
        {MINI("[]", "null", MINI_PRE, "null", "null", MINI_MODEL("{\"a\":99999999}", "[]")), "0..4194303"},
        {MINI("[]", "null", MINI_PRE, "null", "null", MINI_MODEL("{\"a\":0,\"b\":0}", "[]")), "id 0 is given to both"},
        {MINI("[]", "null", MINI_PRE, "null", "null", MINI_MODEL("{\"a\":0,\"a\":1}", "[]")), "appears twice"},
        {MINI("[]", "null", MINI_PRE, "null", "null", MINI_MODEL("{\"\":0}", "[]")), "empty text"},
        {MINI("[]", "null", MINI_PRE, "null", "null", MINI_MODEL(MINI_VOCAB, "[\"a b c\"]")),
         "merges[0]: \"a b c\" is not two tokens"},
        {MINI("[]", "null", MINI_PRE, "null", "null", MINI_MODEL(MINI_VOCAB, "[\"a b\",\"a z\"]")),
         "merges[1]: merge token \"z\" is not in the vocabulary"},
        {MINI("[]", "null", MINI_PRE, "null", "null", MINI_MODEL(MINI_VOCAB, "[\"b a\"]")),
         "gives \"ba\", which is not in the vocabulary"},
        {MINI("[]", "null", MINI_PRE, "null", "null", MINI_MODEL(MINI_VOCAB, "[[\"a\"]]")),
         "expected ',' inside a pair"},
        {MINI("[]", "null", MINI_PRE, "null", "null", MINI_MODEL(MINI_VOCAB, "[[\"a\",\"b\",\"c\"]]")),
         "more than two entries"},
        {MINI("[]", "null", MINI_PRE, "null", "null", MINI_MODEL(MINI_VOCAB, "[1]")),
         "merges[0]: expected a string or a pair"},
        {MINI("[]", "null", MINI_PRE, "null", "null", MINI_MODEL(MINI_VOCAB, "{}")), "expected an array"},
        {MINI("[]", "null",
              "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(unclosed\"},"
              "\"behavior\":\"Isolated\",\"invert\":false}," MINI_PRE "]}",
              "null", "{\"type\":\"ByteLevel\"}", MINI_MODEL(MINI_VOCAB, MINI_MERGES)),
         "pre_tokenizer.pretokenizers[0]: split regex \"(unclosed\" does not compile"},
        {MINI("[]", "null",
              "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":\"a\"},"
              "\"behavior\":\"Sideways\"}," MINI_PRE "]}",
              "null", "{\"type\":\"ByteLevel\"}", MINI_MODEL(MINI_VOCAB, MINI_MERGES)),
         "behavior: expected one of"},
        {MINI("[]", "null",
              "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":\"a\","
              "\"String\":\"b\"},\"behavior\":\"Isolated\"}," MINI_PRE "]}",
              "null", "{\"type\":\"ByteLevel\"}", MINI_MODEL(MINI_VOCAB, MINI_MERGES)),
         "exactly one of \"Regex\" or \"String\""},
        {MINI("[]", "null", "{\"type\":\"Whitespace\"}", "null", "{\"type\":\"ByteLevel\"}",
              MINI_MODEL(MINI_VOCAB, MINI_MERGES)),
         "type \"Whitespace\" is not supported"},
        {MINI("[]", "null",
              "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"a\"},\"behavior\":\"Isolated\",\"invert\":false}", "null",
              "{\"type\":\"ByteLevel\"}", MINI_MODEL(MINI_VOCAB, MINI_MERGES)),
         "no ByteLevel step"},
        {MINI("[]", "null",
              "{\"type\":\"Sequence\",\"pretokenizers\":[" MINI_PRE ",{\"type\":\"Split\",\"pattern\":{\"Regex\":"
              "\"a\"},\"behavior\":\"Isolated\"}]}",
              "null", "{\"type\":\"ByteLevel\"}", MINI_MODEL(MINI_VOCAB, MINI_MERGES)),
         "ByteLevel must come last"},
        {MINI("[]", "null", "null", "null", "{\"type\":\"ByteLevel\"}", MINI_MODEL(MINI_VOCAB, MINI_MERGES)),
         "pre_tokenizer is missing"},
        {MINI("[]", "null", "{\"type\":\"ByteLevel\",\"use_regex\":1}", "null", "{\"type\":\"ByteLevel\"}",
              MINI_MODEL(MINI_VOCAB, MINI_MERGES)),
         "pre_tokenizer.use_regex: expected true or false"},
        {MINI("[]", "null", MINI_PRE, "null", "{\"type\":\"WordPiece\"}", MINI_MODEL(MINI_VOCAB, MINI_MERGES)),
         "decoder: type \"WordPiece\" is not supported"},
        {MINI("[]", "null", MINI_PRE, "null", "null", MINI_MODEL(MINI_VOCAB, MINI_MERGES)), "decoder is missing"},
        {MINI("[]", "{\"type\":\"Lowercase\"}", MINI_PRE, "null", "{\"type\":\"ByteLevel\"}",
              MINI_MODEL(MINI_VOCAB, MINI_MERGES)),
         "normalizer: type \"Lowercase\" is not supported"},
        {MINI("[]", "{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"NFC\"},{\"type\":\"Strip\"}]}", MINI_PRE,
              "null", "{\"type\":\"ByteLevel\"}", MINI_MODEL(MINI_VOCAB, MINI_MERGES)),
         "normalizer.normalizers[1]: type \"Strip\""},
        {MINI("[{\"id\":0,\"content\":\"zz\",\"special\":true}]", "null", MINI_PRE, "null",
              "{\"type\":\"ByteLevel\"}", MINI_MODEL(MINI_VOCAB, MINI_MERGES)),
         "added_tokens[0]: added token \"zz\" has id 0, which the vocabulary gives to \"a\""},
        {MINI("[{\"id\":7,\"content\":\"a\",\"special\":true}]", "null", MINI_PRE, "null", "{\"type\":\"ByteLevel\"}",
              MINI_MODEL(MINI_VOCAB, MINI_MERGES)),
         "but the vocabulary has it as id 0"},
        {MINI("[{\"id\":7,\"content\":\"x\"},{\"id\":8,\"content\":\"x\"}]", "null", MINI_PRE, "null",
              "{\"type\":\"ByteLevel\"}", MINI_MODEL(MINI_VOCAB, MINI_MERGES)),
         "added_tokens[1]: added token \"x\" appears twice"},
        {MINI("[{\"id\":7}]", "null", MINI_PRE, "null", "{\"type\":\"ByteLevel\"}",
              MINI_MODEL(MINI_VOCAB, MINI_MERGES)),
         "added_tokens[0].content is missing"},
        {MINI("[{\"id\":7,\"content\":\"x\",\"special\":\"yes\"}]", "null", MINI_PRE, "null",
              "{\"type\":\"ByteLevel\"}", MINI_MODEL(MINI_VOCAB, MINI_MERGES)),
         "added_tokens[0].special: expected true or false"},
        {MINI("[{\"id\":-3,\"content\":\"x\"}]", "null", MINI_PRE, "null", "{\"type\":\"ByteLevel\"}",
              MINI_MODEL(MINI_VOCAB, MINI_MERGES)),
         "added_tokens[0].id: expected an integer id"},
        {MINI("[{\"id\":7,\"content\":\"x\\u0000y\"}]", "null", MINI_PRE, "null", "{\"type\":\"ByteLevel\"}",
              MINI_MODEL(MINI_VOCAB, MINI_MERGES)),
         "U+0000"},
        {MINI("[{\"id\":7,\"content\":\"x\",\"id\":8}]", "null", MINI_PRE, "null", "{\"type\":\"ByteLevel\"}",
              MINI_MODEL(MINI_VOCAB, MINI_MERGES)),
         "key \"id\" appears twice"},
        {MINI("{}", "null", MINI_PRE, "null", "{\"type\":\"ByteLevel\"}", MINI_MODEL(MINI_VOCAB, MINI_MERGES)),
         "added_tokens: expected an array"},
        {MINI("[]", "null", MINI_PRE, "null", "{\"type\":\"ByteLevel\"}", MINI_MODEL("{\"a\xff\":0}", "[]")),
         "invalid UTF-8 inside a string"},
        {MINI("[]", "null", MINI_PRE, "null", "{\"type\":\"ByteLevel\"}", MINI_MODEL("{\"\\ud800\":0}", "[]")),
         "lone high surrogate"},
        {MINI("[]", "null", MINI_PRE, "null", "{\"type\":\"ByteLevel\"}", MINI_MODEL("{\"\\udc00\":0}", "[]")),
         "lone low surrogate"},
        {MINI("[]", "null", MINI_PRE, "null", "{\"type\":\"ByteLevel\"}", MINI_MODEL("{\"a\tb\":0}", "[]")),
         "control character"},
        {MINI("[]", "null", MINI_PRE, "null", "{\"type\":\"ByteLevel\"}", MINI_MODEL("{\"a\\qb\":0}", "[]")),
         "unknown escape"},
        {MINI("[]", "null", MINI_PRE, "null", "{\"type\":\"ByteLevel\"}", MINI_MODEL("{\"a\":01}", "[]")),
         "invalid number"},
        {deep_nesting(), "nesting deeper than 256"},
        {"{\"decoder\":null,\"decoder\":null}", "the key \"decoder\" appears twice"},
        {"{\"version\":\"2.0\",\"model\":" MINI_MODEL(MINI_VOCAB, MINI_MERGES) "}", "version: only \"1.0\""},
        {MINI("[]", "null", MINI_PRE, "null", "{\"type\":\"ByteLevel\"}",
              "{\"type\":\"BPE\",\"dropout\":0.1,\"vocab\":" MINI_VOCAB ",\"merges\":[]}"),
         "dropout"},
        {MINI("[]", "null", MINI_PRE, "null", "{\"type\":\"ByteLevel\"}",
              "{\"type\":\"BPE\",\"continuing_subword_prefix\":\"##\",\"vocab\":" MINI_VOCAB ",\"merges\":[]}"),
         "continuing_subword_prefix: only null"},
        {MINI("[]", "null", MINI_PRE, "null", "{\"type\":\"ByteLevel\"}",
              "{\"type\":\"BPE\",\"unk_token\":\"<unk>\",\"vocab\":" MINI_VOCAB ",\"merges\":[]}"),
         "model.unk_token: unknown token \"<unk>\" is not in the vocabulary"},
        {MINI("[]", "null", MINI_PRE, "null", "{\"type\":\"ByteLevel\"}",
              "{\"type\":\"BPE\",\"ignore_merges\":\"no\",\"vocab\":" MINI_VOCAB ",\"merges\":[]}"),
         "model.ignore_merges: expected true or false"},
        {MINI("[]", "null", MINI_PRE,
              "{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\",\"type_id\":0}},"
              "{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],\"special_tokens\":{}}",
              "{\"type\":\"ByteLevel\"}", MINI_MODEL(MINI_VOCAB, MINI_MERGES)),
         "special token \"<s>\" has no ids"},
        {MINI("[]", "null", MINI_PRE,
              "{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\",\"type_id\":0}},"
              "{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],\"special_tokens\":{\"<s>\":{\"id\":\"<s>\","
              "\"ids\":[999],\"tokens\":[\"<s>\"]}}}",
              "{\"type\":\"ByteLevel\"}", MINI_MODEL(MINI_VOCAB, MINI_MERGES)),
         "template names id 999"},
        {MINI("[]", "null", MINI_PRE, "{\"type\":\"BertProcessing\",\"sep\":[\"</s>\"],\"cls\":[\"<s>\",0]}",
              "{\"type\":\"ByteLevel\"}", MINI_MODEL(MINI_VOCAB, MINI_MERGES)),
         "post_processor.sep: expected [\"token\", id]"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char err[512] = "";
        sy_bpe *t = sy_bpe_load_json_buffer(cases[i].json, strlen(cases[i].json), err, sizeof err);
        if (t != NULL) {
            sy_bpe_free(t);
            fail_msg("case %zu was accepted (expected: %s)", i, cases[i].message);
        }
        if (strstr(err, cases[i].message) == NULL)
            fail_msg("case %zu: error \"%s\" does not say \"%s\"", i, err, cases[i].message);
        assert_null(strchr(err, '\n'));
    }
    /* truncating the valid file anywhere is refused, never accepted or crashing */
    const char *ok = MINI_OK;
    size_t n = strlen(ok);
    for (size_t cut = 0; cut < n; cut++) {
        char err[512];
        sy_bpe *t = sy_bpe_load_json_buffer(ok, cut, err, sizeof err);
        if (t != NULL)
            fail_msg("the file cut at %zu bytes was accepted", cut);
        assert_true(err[0] != '\0');
    }
    /* a missing file names the path */
    char err[512];
    assert_null(sy_bpe_load_json("/nonexistent/tokenizer.json", err, sizeof err));
    assert_non_null(strstr(err, "/nonexistent/tokenizer.json"));
}

/* The builder refuses bad lists too (the GGUF path has no JSON layer to catch them). */
static void test_builder_refuses(void **state) {
    (void)state;
    char err[512];
    sy_bpe_builder *b = sy_bpe_builder_new(err, sizeof err);
    assert_non_null(b);
    assert_true(sy_bpe_builder_add_token(b, "a", 1, 0, err, sizeof err));
    assert_true(sy_bpe_builder_add_token(b, "b", 1, 1, err, sizeof err));
    assert_false(sy_bpe_builder_add_token(b, "c", 1, -2, err, sizeof err));
    assert_non_null(strstr(err, "outside"));
    assert_false(sy_bpe_builder_add_token(b, "\xff", 1, 2, err, sizeof err));
    assert_non_null(strstr(err, "not valid UTF-8"));
    assert_false(sy_bpe_builder_add_merge_line(b, "ab", 2, err, sizeof err));
    assert_non_null(strstr(err, "one space"));
    assert_false(sy_bpe_builder_add_merge(b, "a", 1, "b", 1, err, sizeof err));
    assert_non_null(strstr(err, "\"ab\", which is not in the vocabulary"));
    assert_false(sy_bpe_builder_add_split(b, "[", 1, true, SY_BPE_SPLIT_ISOLATED, false, err, sizeof err));
    assert_non_null(strstr(err, "does not compile"));
    assert_false(sy_bpe_builder_add_split(b, "x", 1, true, (sy_bpe_split_behavior)9, false, err, sizeof err));
    assert_non_null(strstr(err, "behavior"));
    sy_bpe_added_token tok = {.content = "", .content_len = 0, .id = 5};
    assert_false(sy_bpe_builder_add_added_token(b, &tok, err, sizeof err));
    assert_non_null(strstr(err, "empty"));
    assert_false(sy_bpe_builder_set_unknown(b, "<unk>", 5, false, err, sizeof err));
    sy_bpe_builder_free(b);

    b = sy_bpe_builder_new(err, sizeof err);
    assert_null(sy_bpe_builder_finish(b, err, sizeof err));
    assert_non_null(strstr(err, "vocabulary is empty"));
}

/* ---- tokenizer_config.json ------------------------------------------------------------------------------------- */

static void test_tokenizer_config(void **state) {
    (void)state;
    char path[1024], err[512];
    qwen3_fixture_path(path, sizeof path, "tokenizer_config.json");
    sy_tokenizer_config c;
    if (!sy_tokenizer_config_load(path, &c, err, sizeof err))
        fail_msg("%s", err);
    assert_null(c.bos_token);
    assert_string_equal(c.eos_token, "<|im_end|>");
    assert_string_equal(c.pad_token, "<|endoftext|>");
    assert_null(c.unk_token);
    assert_int_equal(c.add_bos_token, 0);
    assert_int_equal(c.add_eos_token, -1);
    assert_non_null(c.chat_template);
    assert_true(strncmp(c.chat_template, "{%- if tools %}", 15) == 0);
    assert_int_equal(sy_bpe_find_token(g.tok, c.eos_token, strlen(c.eos_token)), 151645);
    sy_tokenizer_config_free(&c);

    const char *objects = "{\"bos_token\":{\"__type\":\"AddedToken\",\"content\":\"<s>\",\"lstrip\":false},"
                          "\"add_bos_token\":true,\"chat_template\":[{\"name\":\"tool_use\",\"template\":\"T\"},"
                          "{\"name\":\"default\",\"template\":\"D\"}]}";
    assert_true(sy_tokenizer_config_parse(objects, strlen(objects), &c, err, sizeof err));
    assert_string_equal(c.bos_token, "<s>");
    assert_int_equal(c.add_bos_token, 1);
    assert_string_equal(c.chat_template, "D");
    /* every named template is kept, for the host to choose (tool_use for requests with tools) */
    assert_int_equal(c.n_templates, 2);
    assert_string_equal(c.template_names[0], "tool_use");
    assert_string_equal(c.template_texts[0], "T");
    assert_string_equal(c.template_names[1], "default");
    assert_string_equal(c.template_texts[1], "D");
    sy_tokenizer_config_free(&c);

    const char *bad[] = {"{\"add_bos_token\":\"yes\"}", "{\"eos_token\":5}", "{\"chat_template\":7}",
                         "{\"chat_template\":[{\"name\":\"x\"}]}", "[1]", "{\"a\":",
                         "{\"chat_template\":\"a\\u0000\"}"};
    const char *why[] = {"add_bos_token", "eos_token", "chat_template", "chat_template", "expected an object",
                         "invalid JSON", "U+0000"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        assert_false(sy_tokenizer_config_parse(bad[i], strlen(bad[i]), &c, err, sizeof err));
        if (strstr(err, why[i]) == NULL)
            fail_msg("config case %zu: \"%s\" does not say \"%s\"", i, err, why[i]);
        assert_null(c.chat_template);
    }
}

/* ---- the UTF-8 stream ------------------------------------------------------------------------------------------ */

/* Feeds bytes (one chunk per entry of `cuts`) and returns everything written, finish included. */
static size_t stream_all(bool replace, const char *bytes, const size_t *cuts, size_t n_cuts, char *out) {
    sy_utf8_stream s;
    sy_utf8_stream_init(&s, replace);
    size_t o = 0, at = 0;
    for (size_t i = 0; i < n_cuts; i++) {
        o += sy_utf8_stream_feed(&s, bytes + at, cuts[i], out + o);
        at += cuts[i];
    }
    o += sy_utf8_stream_finish(&s, out + o);
    out[o] = '\0';
    return o;
}

static void test_utf8_stream_splits(void **state) {
    (void)state;
    sy_utf8_stream s;
    char out[64];
    const char *emoji = "\xf0\x9f\x98\x80"; /* U+1F600 */
    sy_utf8_stream_init(&s, true);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(sy_utf8_stream_feed(&s, emoji + i, 1, out), 0);
        assert_int_equal(sy_utf8_stream_pending(&s), (size_t)i + 1);
    }
    assert_int_equal(sy_utf8_stream_feed(&s, emoji + 3, 1, out), 4);
    assert_memory_equal(out, emoji, 4);
    assert_int_equal(sy_utf8_stream_pending(&s), 0);
    assert_int_equal(sy_utf8_stream_finish(&s, out), 0);

    /* a CJK character cut after its first byte, followed by ASCII in the same chunk */
    sy_utf8_stream_init(&s, true);
    assert_int_equal(sy_utf8_stream_feed(&s, "ab\xe6", 3, out), 2);
    assert_memory_equal(out, "ab", 2);
    assert_int_equal(sy_utf8_stream_feed(&s, "\x97\xa5" "cd", 4, out), 5);
    assert_memory_equal(out, "\xe6\x97\xa5" "cd", 5);

    /* ill-formed input: one U+FFFD per maximal subpart */
    struct {
        const char *in;
        size_t len;
        const char *want;
    } bad[] = {
        {"\xff", 1, "\xef\xbf\xbd"},
        {"a\x80" "b", 3, "a\xef\xbf\xbd" "b"},
        {"\xe6\x97" "A", 3, "\xef\xbf\xbd" "A"},
        {"\xc0\xaf", 2, "\xef\xbf\xbd\xef\xbf\xbd"},
        {"\xed\xa0\x80", 3, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},
        {"\xf4\x90\x80\x80", 4, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},
        {"\xf0\x9f\x98", 3, "\xef\xbf\xbd"}, /* truncated at the end of the stream */
        {"\xe6\x97\xa5\xe6", 4, "\xe6\x97\xa5\xef\xbf\xbd"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        size_t one = bad[i].len;
        size_t n = stream_all(true, bad[i].in, &one, 1, out);
        assert_int_equal(n, strlen(bad[i].want));
        assert_memory_equal(out, bad[i].want, n);
        /* byte by byte gives the same */
        size_t ones[8] = {1, 1, 1, 1, 1, 1, 1, 1};
        n = stream_all(true, bad[i].in, ones, bad[i].len, out);
        assert_int_equal(n, strlen(bad[i].want));
        assert_memory_equal(out, bad[i].want, n);
        /* raw mode passes the bytes through */
        n = stream_all(false, bad[i].in, &one, 1, out);
        assert_int_equal(n, bad[i].len);
        assert_memory_equal(out, bad[i].in, n);
    }
}

/* Streaming real tokens of the Qwen tokenizer: every emitted chunk is valid UTF-8, nothing is lost. */
static void test_utf8_stream_real_tokens(void **state) {
    (void)state;
    const char *text = "日本語の文章😀👍🏽 👨‍👩‍👧‍👦 Ελληνικά नमस्ते ภาษาไทย 한국어 ok";
    sy_bpe_ids ids = {0};
    char err[256];
    assert_true(sy_bpe_tokenize(g.tok, text, strlen(text), 0, &ids, err, sizeof err));
    sy_utf8_stream s;
    sy_utf8_stream_init(&s, true);
    char all[1024];
    size_t o = 0;
    size_t held_back = 0;
    for (size_t i = 0; i < ids.n; i++) {
        size_t len;
        const char *bytes = sy_bpe_token_bytes(g.tok, ids.ids[i], &len);
        char chunk[256];
        assert_true(SY_UTF8_STREAM_MAX_OUT(len) <= sizeof chunk);
        size_t n = sy_utf8_stream_feed(&s, bytes, len, chunk);
        /* the chunk is complete UTF-8: check with the tokenizer's own validation */
        sy_bpe_ids tmp = {0};
        assert_true(sy_bpe_tokenize(g.tok, chunk, n, 0, &tmp, err, sizeof err));
        sy_bpe_ids_free(&tmp);
        if (sy_utf8_stream_pending(&s) > 0)
            held_back++;
        memcpy(all + o, chunk, n);
        o += n;
    }
    o += sy_utf8_stream_finish(&s, all + o);
    assert_true(held_back > 0); /* the test text does split characters across tokens */
    assert_int_equal(o, strlen(text));
    assert_memory_equal(all, text, o);
    sy_bpe_ids_free(&ids);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qwen3_matches_oracle),
        cmocka_unit_test(test_variants_match_oracle),
        cmocka_unit_test(test_builder_matches_json),
        cmocka_unit_test(test_concurrent_tokenize),
        cmocka_unit_test(test_special_tokens_and_lookups),
        cmocka_unit_test(test_invalid_utf8_refused),
        cmocka_unit_test(test_long_inputs),
        cmocka_unit_test(test_mini_tokenizer),
        cmocka_unit_test(test_unknown_and_byte_fallback),
        cmocka_unit_test(test_malformed_refused),
        cmocka_unit_test(test_builder_refuses),
        cmocka_unit_test(test_tokenizer_config),
        cmocka_unit_test(test_utf8_stream_splits),
        cmocka_unit_test(test_utf8_stream_real_tokens),
    };
    return cmocka_run_group_tests(tests, setup_all, teardown_all);
}
