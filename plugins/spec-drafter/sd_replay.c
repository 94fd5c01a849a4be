/*
 * spec-drafter: the replay drafter, for benchmarks only.
 *
 * "replay:FILE:PCT" reads FILE, token ids (decimal, separated by white space or commas) of a known output, e.g. a
 * greedy run's prompt and continuation. It proposes what follows the context in that file, with PCT percent of
 * the proposed file positions corrupted (replaced by another id, chosen by a hash of the position, so a run is
 * reproducible). Greedy verification then accepts about the uncorrupted share, which lets a benchmark measure the
 * cost of drafting and verification at a chosen acceptance rate independently of any real drafter's quality.
 *
 * The context is located in the file by position first (the file begins with the same prompt), else by its last
 * tokens (up to 8) through an n-gram index of the file.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sd_internal.h"

#define SD_REPLAY_MAX_BYTES ((size_t)256 << 20)
#define SD_REPLAY_ALIGN_CHECK 16u
#define SD_REPLAY_NGRAM_MAX 8u

struct sd_replay {
    sd_ngram_index index; /* the file's tokens and their n-grams */
    uint32_t n_vocab;
    uint32_t corrupt_per_10000;
    uint64_t seed;
};

static uint64_t mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

/* "12" or "12.5" (one decimal) percent, 0..100, into hundredths of a percent; -1 if not such a number. */
static long parse_percent(const char *s) {
    long whole = 0, frac = 0;
    size_t i = 0, digits = 0;
    for (; s[i] >= '0' && s[i] <= '9' && digits < 4; i++, digits++) whole = whole * 10 + (s[i] - '0');
    if (digits == 0) return -1;
    if (s[i] == '.') {
        i++;
        size_t f = 0;
        for (; s[i] >= '0' && s[i] <= '9' && f < 2; i++, f++) frac = frac * 10 + (s[i] - '0');
        if (f == 0) return -1;
        if (f == 1) frac *= 10;
    }
    if (s[i] != '\0') return -1;
    long v = whole * 100 + frac;
    return v <= 10000 ? v : -1;
}

static sy_status read_tokens(const char *path, uint32_t n_vocab, sd_ngram_index *ix) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) return sd_fail(SY_ERR_IO, "replay file %.200s: %s", path, strerror(errno));
    char *text = NULL;
    size_t len = 0, cap = 0;
    sy_status st = SY_OK;
    for (;;) {
        if (len + 65536 + 1 > cap) {
            if (cap >= SD_REPLAY_MAX_BYTES) {
                st = sd_fail(SY_ERR_FORMAT, "replay file %.200s is larger than %zu MiB", path,
                             SD_REPLAY_MAX_BYTES >> 20);
                break;
            }
            cap = cap ? cap * 2 : 65536 * 2;
            char *grown = realloc(text, cap);
            if (grown == NULL) {
                st = sd_fail(SY_ERR_OUT_OF_MEMORY, "out of memory reading %.200s", path);
                break;
            }
            text = grown;
        }
        size_t got = fread(text + len, 1, cap - len - 1, f);
        len += got;
        if (got == 0) {
            if (ferror(f)) st = sd_fail(SY_ERR_IO, "replay file %.200s: read error", path);
            break;
        }
    }
    fclose(f);
    if (st != SY_OK) {
        free(text);
        return st;
    }
    int32_t chunk[1024];
    uint32_t n_chunk = 0, count = 0;
    size_t i = 0;
    while (st == SY_OK && i < len) {
        char c = text[i];
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == ',') {
            i++;
            continue;
        }
        if (c < '0' || c > '9') {
            st = sd_fail(SY_ERR_FORMAT, "replay file %.200s: byte %zu is '%c', expected a token id", path, i,
                         (c >= 0x20 && c < 0x7f) ? c : '?');
            break;
        }
        uint64_t v = 0;
        while (i < len && text[i] >= '0' && text[i] <= '9' && v < n_vocab) v = v * 10 + (uint64_t)(text[i++] - '0');
        if (v >= n_vocab) {
            st = sd_fail(SY_ERR_FORMAT, "replay file %.200s: token %u is outside the vocabulary of %u", path,
                         (unsigned)count, (unsigned)n_vocab);
            break;
        }
        chunk[n_chunk++] = (int32_t)v;
        count++;
        if (n_chunk == sizeof chunk / sizeof *chunk) {
            st = sd_ngram_append(ix, chunk, n_chunk);
            n_chunk = 0;
        }
    }
    if (st == SY_OK) st = sd_ngram_append(ix, chunk, n_chunk);
    free(text);
    if (st == SY_OK && count == 0) st = sd_fail(SY_ERR_FORMAT, "replay file %.200s holds no token ids", path);
    return st;
}

sy_status sd_replay_create(const char *arg, uint32_t n_vocab, const sy_option *options, size_t n_options,
                           sd_replay **out) {
    *out = NULL;
    uint32_t corrupt = 0, seed = 0;
    sy_status st = sd_option_u32(options, n_options, "draft_replay_corrupt", 0, 100, &corrupt);
    if (st != SY_OK) return st;
    if ((st = sd_option_u32(options, n_options, "draft_replay_seed", 0, UINT32_MAX, &seed)) != SY_OK) return st;
    long per_10000 = (long)corrupt * 100;
    char *path = strdup(arg);
    if (path == NULL) return sd_fail(SY_ERR_OUT_OF_MEMORY, "out of memory");
    char *colon = strrchr(path, ':');
    if (colon != NULL) {
        long pct = parse_percent(colon + 1);
        if (pct >= 0) {
            per_10000 = pct;
            *colon = '\0';
        }
    }
    if (path[0] == '\0') {
        free(path);
        return sd_fail(SY_ERR_INVALID_ARGUMENT, "replay: no file named (replay:FILE:CORRUPT_PERCENT)");
    }
    sd_replay *r = calloc(1, sizeof *r);
    if (r == NULL) {
        free(path);
        return sd_fail(SY_ERR_OUT_OF_MEMORY, "out of memory");
    }
    sd_ngram_init(&r->index, 1, SD_REPLAY_NGRAM_MAX);
    r->n_vocab = n_vocab;
    r->corrupt_per_10000 = (uint32_t)per_10000;
    r->seed = seed;
    st = read_tokens(path, n_vocab, &r->index);
    if (st != SY_OK) {
        sd_ngram_free(&r->index);
        free(r);
        free(path);
        return st;
    }
    sd_log(SY_LOG_INFO, "replay drafter: %u tokens from %s, %.2f%% of proposals corrupted",
           (unsigned)r->index.n_tokens, path, r->corrupt_per_10000 / 100.0);
    free(path);
    *out = r;
    return SY_OK;
}

void sd_replay_destroy(sd_replay *r) {
    if (r == NULL) return;
    sd_ngram_free(&r->index);
    free(r);
}

uint32_t sd_replay_propose(const sd_replay *r, const int32_t *context, uint32_t n_context, uint32_t k_max,
                           int32_t *out) {
    const sd_ngram_index *ix = &r->index;
    uint32_t next = 0;
    if (n_context < ix->n_tokens) {
        uint32_t m = n_context < SD_REPLAY_ALIGN_CHECK ? n_context : SD_REPLAY_ALIGN_CHECK;
        if (memcmp(ix->tokens + n_context - m, context + n_context - m, (size_t)m * sizeof *context) == 0)
            next = n_context;
    }
    for (uint32_t g = ix->n_max; next == 0 && g >= ix->n_min && g >= 1; g--) {
        if (g <= n_context) next = sd_ngram_find(ix, context + n_context - g, g);
        if (g == 1) break;
    }
    if (next == 0 || next >= ix->n_tokens) return 0;
    uint32_t k = ix->n_tokens - next < k_max ? ix->n_tokens - next : k_max;
    for (uint32_t i = 0; i < k; i++) {
        uint64_t pos = next + i;
        int32_t t = ix->tokens[pos];
        uint64_t h = mix64(r->seed ^ (pos * 0x9e3779b97f4a7c15ull));
        if (r->n_vocab > 1 && h % 10000 < r->corrupt_per_10000)
            t = (int32_t)(((uint64_t)t + 1 + (h >> 20) % (r->n_vocab - 1)) % r->n_vocab);
        out[i] = t;
    }
    return k;
}
