/* Helpers shared by the tests of tests/gguf: fixture files, hex, hashes, the deterministic quantizer input.
 * Header-only, test use only (every function aborts on allocation failure). */
#ifndef SY_GGUF_TEST_UTIL_H
#define SY_GGUF_TEST_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

static inline void *gt_xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (p == NULL) abort();
    return p;
}

/* SY_SOURCE_DIR/rel (or ./rel) into buf. */
static inline const char *gt_source_path(char *buf, size_t size, const char *rel) {
    const char *src = getenv("SY_SOURCE_DIR");
    snprintf(buf, size, "%s/%s", src ? src : ".", rel);
    return buf;
}

static inline const char *gt_build_path(char *buf, size_t size, const char *rel) {
    const char *b = getenv("SY_BUILD_DIR");
    snprintf(buf, size, "%s/%s", b ? b : ".", rel);
    return buf;
}

/* Whole file, NUL-terminated; NULL when it cannot be read. */
static inline char *gt_read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) return NULL;
    if (fseek(f, 0, SEEK_END) != 0) {
        fclose(f);
        return NULL;
    }
    long n = ftell(f);
    if (n < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return NULL;
    }
    char *buf = gt_xmalloc((size_t)n + 1);
    if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) buf[n] = '\0';
    if (size) *size = (size_t)n;
    return buf;
}

static inline cJSON *gt_load_json(const char *rel) {
    char path[1024];
    size_t n;
    char *text = gt_read_file(gt_source_path(path, sizeof path, rel), &n);
    if (text == NULL) {
        fprintf(stderr, "cannot read %s\n", path);
        return NULL;
    }
    cJSON *j = cJSON_ParseWithLength(text, n);
    free(text);
    if (j == NULL) fprintf(stderr, "%s: not valid JSON\n", path);
    return j;
}

static inline int gt_hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Hex string -> new buffer; NULL on a bad digit or odd length. */
static inline uint8_t *gt_unhex(const char *hex, size_t *n) {
    size_t len = strlen(hex);
    if (len % 2) return NULL;
    uint8_t *out = gt_xmalloc(len / 2);
    for (size_t i = 0; i < len / 2; i++) {
        int hi = gt_hex_digit(hex[2 * i]), lo = gt_hex_digit(hex[2 * i + 1]);
        if (hi < 0 || lo < 0) {
            free(out);
            return NULL;
        }
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    *n = len / 2;
    return out;
}

static inline uint64_t gt_fnv1a64(const void *data, size_t n) {
    const uint8_t *p = data;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

static inline uint64_t gt_splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* The quantizer input of tools/oracle/gguf_dequant_fixtures.py (see its docstring), exactly. */
static inline float *gt_quant_input(size_t rows, size_t n_per_row, uint64_t seed) {
    float *x = gt_xmalloc(rows * n_per_row * sizeof *x);
    uint64_t state = seed;
    for (size_t r = 0; r < rows; r++) {
        float scale = 1.0f;
        for (size_t k = 0; k < 20 + r % 8; k++) scale *= 0.5f;
        for (size_t c = 0; c < n_per_row; c++) {
            int64_t s = 0;
            for (int i = 0; i < 3; i++) s += (int64_t)(gt_splitmix64(&state) >> 43);
            float v = (float)(s - 3 * (1 << 20)) * scale;
            if (c % 61 == 7) v *= 32.0f;
            if (r % 5 == 3 && c >= 64 && c < 96) v = 0.0f;
            if (r % 5 == 4 && c >= 128 && c < 160) v = 0.25f;
            x[r * n_per_row + c] = v;
        }
    }
    return x;
}

#endif
