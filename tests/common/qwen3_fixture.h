/* The Qwen3 tokenizer fixtures of tests/fixtures/tokenizers/qwen3 (tokenizer.json and the oracle's cases, stored
 * zstd-compressed), for the tokenizer tests. Header-only: each test compiles its own copy. */
#ifndef SY_TEST_QWEN3_FIXTURE_H
#define SY_TEST_QWEN3_FIXTURE_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include <zstd.h>

/* The path of fixture `name` under $SY_SOURCE_DIR (else the current folder). */
static inline void qwen3_fixture_path(char *out, size_t cap, const char *name) {
    const char *src = getenv("SY_SOURCE_DIR");
    snprintf(out, cap, "%s/tests/fixtures/tokenizers/qwen3/%s", src ? src : ".", name);
}

/* Fixture `name` (a .zst file) decompressed and NUL-terminated (for cJSON); its length in *size when size is not
 * NULL. NULL, after one line on stderr, when it is missing, corrupt or truncated. */
static inline char *qwen3_fixture_read_zst(const char *name, size_t *size) {
    char path[1024];
    qwen3_fixture_path(path, sizeof path, name);
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "cannot read %s\n", path);
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    long packed_size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *packed = packed_size > 0 ? malloc((size_t)packed_size) : NULL;
    bool ok = packed != NULL && fread(packed, 1, (size_t)packed_size, f) == (size_t)packed_size;
    fclose(f);
    /* streamed: a frame written from a pipe does not record its size */
    ZSTD_DCtx *dctx = ZSTD_createDCtx();
    size_t cap = (size_t)(packed_size > 0 ? packed_size : 0) * 4 + 1024, n = 0;
    char *out = malloc(cap + 1);
    ZSTD_inBuffer in = {packed, ok ? (size_t)packed_size : 0, 0};
    ok = ok && dctx != NULL && out != NULL;
    while (ok) {
        if (cap - n < 65536) {
            char *bigger = realloc(out, cap * 2 + 1);
            ok = bigger != NULL;
            if (!ok) break;
            out = bigger;
            cap *= 2;
        }
        ZSTD_outBuffer ob = {out + n, cap - n, 0};
        size_t r = ZSTD_decompressStream(dctx, &ob, &in);
        n += ob.pos;
        if (ZSTD_isError(r)) {
            fprintf(stderr, "%s: %s\n", path, ZSTD_getErrorName(r));
            ok = false;
        } else if (r == 0 && in.pos == in.size) {
            break;
        } else if (ob.pos == 0 && in.pos == in.size) {
            fprintf(stderr, "%s: truncated\n", path);
            ok = false;
        }
    }
    ZSTD_freeDCtx(dctx);
    free(packed);
    if (!ok) {
        free(out);
        return NULL;
    }
    out[n] = '\0';
    if (size != NULL) *size = n;
    return out;
}

#endif
