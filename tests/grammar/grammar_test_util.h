/* Helpers of the grammar tests, the schema fixture generator and the benchmark: the Qwen3 vocabulary as token
 * bytes (byte-level BPE strings mapped back through the GPT-2 byte-to-unicode table), a 256-byte vocabulary,
 * file reading, a seeded generator, and random generation through masks. Header-only. */
#ifndef SY_TEST_GRAMMAR_UTIL_H
#define SY_TEST_GRAMMAR_UTIL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "qwen3_fixture.h"
#include "sy_grammar.h"

typedef struct gt_vocab {
    uint32_t n;
    uint8_t **bytes;
    size_t *lens;
    uint32_t *kinds;
    int32_t eog;
    sy_grammar_vocab *v;
} gt_vocab;

static int gt_token_fn(void *user, uint32_t id, const uint8_t **bytes, size_t *len, uint32_t *kind) {
    gt_vocab *g = user;
    *bytes = g->bytes[id];
    *len = g->lens[id];
    *kind = g->kinds[id];
    return 0;
}

static inline char *gt_read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *p = malloc(n > 0 ? (size_t)n + 1 : 1);
    if (p == NULL || (n > 0 && fread(p, 1, (size_t)n, f) != (size_t)n)) {
        free(p);
        fclose(f);
        return NULL;
    }
    fclose(f);
    p[n > 0 ? n : 0] = '\0';
    if (size) *size = n > 0 ? (size_t)n : 0;
    return p;
}

static inline void gt_source_path(char *out, size_t cap, const char *rel) {
    const char *src = getenv("SY_SOURCE_DIR");
    snprintf(out, cap, "%s/%s", src ? src : ".", rel);
}

static inline void gt_vocab_free(gt_vocab *g) {
    if (g == NULL) return;
    for (uint32_t i = 0; i < g->n; i++) free(g->bytes[i]);
    free(g->bytes);
    free(g->lens);
    free(g->kinds);
    sy_grammar_vocab_free(g->v);
    free(g);
}

static inline gt_vocab *gt_vocab_alloc(uint32_t n) {
    gt_vocab *g = calloc(1, sizeof *g);
    g->n = n;
    g->bytes = calloc(n, sizeof *g->bytes);
    g->lens = calloc(n, sizeof *g->lens);
    g->kinds = calloc(n, sizeof *g->kinds);
    g->eog = -1;
    return g;
}

static inline bool gt_vocab_build(gt_vocab *g) {
    char err[256];
    g->v = sy_grammar_vocab_create(g->n, gt_token_fn, g, err, sizeof err);
    if (g->v == NULL) fprintf(stderr, "vocab: %s\n", err);
    return g->v != NULL;
}

/* 256 single-byte tokens, then one end-of-generation token and one control token. */
static inline gt_vocab *gt_byte_vocab(void) {
    gt_vocab *g = gt_vocab_alloc(258);
    for (uint32_t i = 0; i < 256; i++) {
        g->bytes[i] = malloc(1);
        g->bytes[i][0] = (uint8_t)i;
        g->lens[i] = 1;
    }
    g->bytes[256] = (uint8_t *)strdup("</s>");
    g->lens[256] = 4;
    g->kinds[256] = SY_GRAMMAR_TOKEN_EOG;
    g->bytes[257] = (uint8_t *)strdup("<ctl>");
    g->lens[257] = 5;
    g->kinds[257] = SY_GRAMMAR_TOKEN_CONTROL;
    g->eog = 256;
    if (!gt_vocab_build(g)) {
        gt_vocab_free(g);
        return NULL;
    }
    return g;
}

/* GPT-2's byte-to-unicode table, inverted: code point -> byte, -1 if none. */
static inline void gt_gpt2_unicode_to_byte(int16_t *inv /* 512 */) {
    for (int i = 0; i < 512; i++) inv[i] = -1;
    int n = 0;
    for (int b = 0; b < 256; b++) {
        bool direct = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        int cp = direct ? b : 256 + n++;
        inv[cp] = (int16_t)b;
    }
}

/* The Qwen3 vocabulary of tests/fixtures/tokenizers/qwen3: model tokens decoded to bytes, added tokens as their
 * text; special added tokens are control tokens, <|endoftext|> and <|im_end|> end generation. */
static inline gt_vocab *gt_qwen3_vocab(void) {
    char *json = qwen3_fixture_read_zst("tokenizer.json.zst", NULL);
    if (json == NULL) return NULL;
    cJSON *root = cJSON_Parse(json);
    free(json);
    if (root == NULL) return NULL;
    cJSON *vocab = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "model"), "vocab");
    cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    uint32_t n = 0;
    cJSON *it;
    cJSON_ArrayForEach(it, vocab) if ((uint32_t)it->valueint + 1 > n) n = (uint32_t)it->valueint + 1;
    cJSON_ArrayForEach(it, added) {
        uint32_t id = (uint32_t)cJSON_GetObjectItemCaseSensitive(it, "id")->valueint;
        if (id + 1 > n) n = id + 1;
    }
    gt_vocab *g = gt_vocab_alloc(n);
    int16_t inv[512];
    gt_gpt2_unicode_to_byte(inv);
    cJSON_ArrayForEach(it, vocab) {
        uint32_t id = (uint32_t)it->valueint;
        const unsigned char *s = (const unsigned char *)it->string;
        size_t len = strlen(it->string), k = 0;
        uint8_t *out = malloc(len + 1);
        for (size_t i = 0; i < len;) { /* each code point of the token string is one byte */
            uint32_t cp = s[i];
            int extra = cp >= 0xF0 ? 3 : cp >= 0xE0 ? 2 : cp >= 0xC0 ? 1 : 0;
            cp &= extra == 0 ? 0x7F : extra == 1 ? 0x1F : extra == 2 ? 0x0F : 0x07;
            for (int j = 1; j <= extra && i + (size_t)j < len; j++) cp = (cp << 6) | (s[i + (size_t)j] & 0x3F);
            i += (size_t)extra + 1;
            out[k++] = cp < 512 && inv[cp] >= 0 ? (uint8_t)inv[cp] : '?';
        }
        g->bytes[id] = out;
        g->lens[id] = k;
    }
    cJSON_ArrayForEach(it, added) {
        uint32_t id = (uint32_t)cJSON_GetObjectItemCaseSensitive(it, "id")->valueint;
        const char *content = cJSON_GetObjectItemCaseSensitive(it, "content")->valuestring;
        free(g->bytes[id]);
        g->bytes[id] = (uint8_t *)strdup(content);
        g->lens[id] = strlen(content);
        g->kinds[id] = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(it, "special")) ? SY_GRAMMAR_TOKEN_CONTROL
                                                                                       : SY_GRAMMAR_TOKEN_NORMAL;
        if (strcmp(content, "<|endoftext|>") == 0 || strcmp(content, "<|im_end|>") == 0) {
            g->kinds[id] = SY_GRAMMAR_TOKEN_EOG;
            if (g->eog < 0) g->eog = (int32_t)id;
        }
    }
    for (uint32_t i = 0; i < n; i++)
        if (g->bytes[i] == NULL) { /* holes in the id space: control tokens with no text */
            g->bytes[i] = malloc(1);
            g->kinds[i] = SY_GRAMMAR_TOKEN_CONTROL;
        }
    cJSON_Delete(root);
    if (!gt_vocab_build(g)) {
        gt_vocab_free(g);
        return NULL;
    }
    return g;
}

/* splitmix64 */
static inline uint64_t gt_rand(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* The k-th set bit of the mask (k < count). */
static inline int32_t gt_nth_bit(const uint32_t *bits, size_t words, long k) {
    for (size_t w = 0; w < words; w++) {
        int c = __builtin_popcount(bits[w]);
        if (k < c) {
            uint32_t x = bits[w];
            while (k-- > 0) x &= x - 1;
            return (int32_t)(w * 32 + (size_t)__builtin_ctz(x));
        }
        k -= c;
    }
    return -1;
}

typedef struct gt_sample {
    char *text; /* generated bytes, NUL-terminated */
    size_t len;
    bool ended;  /* stopped by an end-of-generation token */
    int error;   /* nonzero: what failed (a mask or accept error, or an empty mask) */
    char msg[256];
} gt_sample;

/* One random generation: at each step a token uniformly among the allowed ones (an end token is taken with
 * probability p_end where the grammar can end, and forced after max_tokens where it can). Stops at an end
 * token, or unfinished after hard_max tokens. */
static inline gt_sample gt_generate(sy_grammar_state *st, const gt_vocab *gv, uint64_t *rng, int max_tokens,
                                    int hard_max, double p_end) {
    gt_sample s = {0};
    size_t words = sy_grammar_vocab_mask_words(gv->v), cap = 256;
    uint32_t *bits = malloc(words * sizeof *bits);
    s.text = malloc(cap);
    s.text[0] = '\0';
    for (int step = 0; step < hard_max; step++) {
        if (sy_grammar_state_can_end(st) && gv->eog >= 0 &&
            (step >= max_tokens || (double)(gt_rand(rng) >> 11) / 9007199254740992.0 < p_end)) {
            if (sy_grammar_state_accept_token(st, gv->eog) != 0) {
                s.error = 1;
                snprintf(s.msg, sizeof s.msg, "end token rejected: %s", sy_grammar_state_error(st));
            }
            s.ended = s.error == 0;
            break;
        }
        long n = sy_grammar_state_mask(st, bits);
        if (n <= 0) {
            s.error = 2;
            snprintf(s.msg, sizeof s.msg, "mask returned %ld: %s", n, sy_grammar_state_error(st));
            break;
        }
        int32_t tok = gt_nth_bit(bits, words, (long)(gt_rand(rng) % (uint64_t)n));
        if (gv->kinds[tok] == SY_GRAMMAR_TOKEN_EOG) {
            if (sy_grammar_state_accept_token(st, tok) != 0) {
                s.error = 3;
                snprintf(s.msg, sizeof s.msg, "allowed end token rejected");
            }
            s.ended = s.error == 0;
            break;
        }
        if (sy_grammar_state_accept_token(st, tok) != 0) {
            s.error = 4;
            snprintf(s.msg, sizeof s.msg, "allowed token %d rejected: %s", tok, sy_grammar_state_error(st));
            break;
        }
        while (s.len + gv->lens[tok] + 1 > cap) {
            cap *= 2;
            s.text = realloc(s.text, cap);
        }
        memcpy(s.text + s.len, gv->bytes[tok], gv->lens[tok]);
        s.len += gv->lens[tok];
        s.text[s.len] = '\0';
    }
    free(bits);
    return s;
}

#endif
