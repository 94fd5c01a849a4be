/* The tiny random models of tests/fixtures/gguf/tiny-models.json (tools/oracle/gguf_model_fixtures.py), rebuilt
 * from their committed metadata and the oracle's weight generator, and the tensor hash the oracles record.
 * Header-only, test use only; failures abort the test through cmocka. */
#ifndef SY_GGUF_TINY_MODEL_H
#define SY_GGUF_TINY_MODEL_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "gguf_writer.h"
#include "quantize.h"
#include "sy_kernels.h"

#include "gguf_test_util.h"

/* FNV-1a 64 over each tensor's name, NUL, type, n_dims, dims and data, in file order (as the oracles hash). */
static inline char *gt_tensor_hash(const char *path, char out[17]) {
    char err[512];
    sy_gguf *g = sy_gguf_open(path, err, sizeof err);
    if (g == NULL) fail_msg("%s", err);
    uint64_t h = 0xcbf29ce484222325ull;
    for (uint64_t i = 0; i < sy_gguf_tensor_count(g); i++) {
        const sy_gguf_tensor *t = sy_gguf_tensor_at(g, i);
        uint8_t head[8 + 8 * SY_GGUF_MAX_DIMS];
        size_t n = 0;
        for (int b = 0; b < 4; b++) head[n++] = (uint8_t)(t->type >> (8 * b));
        for (int b = 0; b < 4; b++) head[n++] = (uint8_t)(t->n_dims >> (8 * b));
        for (uint32_t d = 0; d < t->n_dims; d++)
            for (int b = 0; b < 8; b++) head[n++] = (uint8_t)(t->dims[d] >> (8 * b));
        const uint8_t *name = (const uint8_t *)t->name;
        for (size_t k = 0; k <= strlen(t->name); k++) h = (h ^ name[k]) * 0x100000001b3ull; /* NUL included */
        for (size_t k = 0; k < n; k++) h = (h ^ head[k]) * 0x100000001b3ull;
        const uint8_t *p = t->data;
        for (uint64_t k = 0; k < t->n_bytes; k++) h = (h ^ p[k]) * 0x100000001b3ull;
    }
    sy_gguf_close(g);
    snprintf(out, 17, "%016llx", (unsigned long long)h);
    return out;
}

/* The model of tiny-models.json's models.<arch> at path: the committed metadata (tiny-<arch>-meta.gguf), then the
 * generator's tensors in its order (see the oracle's docstring), vectors F32 and matrices in matrix_type: F16 holds
 * the generator's numbers exactly; a quantized type gets them through sy_quantize_rows, which is bit for bit
 * llama.cpp's quantizer (as `llama-quantize --pure` writes every matrix). */
static inline void gt_build_tiny(const char *arch, const cJSON *model, const char *path, sy_dtype matrix_type) {
    char meta_rel[128], meta[1024], err[512];
    snprintf(meta_rel, sizeof meta_rel, "tests/fixtures/gguf/tiny-%s-meta.gguf", arch);
    sy_gguf *g = sy_gguf_open(gt_source_path(meta, sizeof meta, meta_rel), err, sizeof err);
    if (g == NULL) fail_msg("%s", err);
    sy_gguf_writer *w = sy_gguf_writer_new(err, sizeof err);
    assert_non_null(w);
    for (uint64_t i = 0; i < sy_gguf_kv_count(g); i++)
        if (!sy_gguf_writer_copy_kv(w, g, i, err, sizeof err)) fail_msg("%s", err);
    sy_gguf_close(g);
    const cJSON *tensors = cJSON_GetObjectItem(model, "tensors");
    for (const cJSON *t = tensors->child; t; t = t->next) {
        uint64_t dims[4];
        uint32_t nd = 0;
        for (const cJSON *d = cJSON_GetObjectItem(t, "dims")->child; d && nd < 4; d = d->next)
            dims[nd++] = (uint64_t)d->valuedouble;
        bool matrix = strcmp(cJSON_GetObjectItem(t, "kind")->valuestring, "matrix") == 0;
        if (!sy_gguf_writer_add_tensor(w, cJSON_GetObjectItem(t, "name")->valuestring,
                                       matrix ? matrix_type : SY_DTYPE_F32, nd, dims, err, sizeof err))
            fail_msg("%s", err);
    }
    if (!sy_gguf_writer_open(w, path, err, sizeof err)) fail_msg("%s", err);
    uint64_t state = (uint64_t)cJSON_GetObjectItem(model, "seed")->valuedouble;
    for (const cJSON *t = tensors->child; t; t = t->next) {
        size_t n = 1;
        const cJSON *dims = cJSON_GetObjectItem(t, "dims");
        for (const cJSON *d = dims->child; d; d = d->next) n *= (size_t)d->valuedouble;
        size_t row = (size_t)dims->child->valuedouble;
        const char *kind = cJSON_GetObjectItem(t, "kind")->valuestring;
        int shift = (int)cJSON_GetObjectItem(t, "shift")->valuedouble;
        bool matrix = strcmp(kind, "matrix") == 0;
        float *v = gt_xmalloc(n * sizeof *v);
        for (size_t i = 0; i < n; i++) {
            uint64_t u = gt_splitmix64(&state) >> 40;
            if (matrix) {
                v[i] = (float)((int)(u % 4095) - 2047) * ldexpf(1.0f, -(shift + 6)); /* exact in f16 */
            } else {
                v[i] = (float)((int)(u % 257) - 128) / 1024.0f;
                if (strcmp(kind, "norm") == 0) v[i] += 1.0f;
            }
        }
        sy_dtype type = matrix ? matrix_type : SY_DTYPE_F32;
        size_t bytes = sy_dtype_row_bytes(type, row) * (n / row);
        uint8_t *buf = gt_xmalloc(bytes);
        if (type == SY_DTYPE_F16) {
            for (size_t i = 0; i < n; i++) {
                uint16_t h = sy_f32_to_f16(v[i]);
                buf[2 * i] = (uint8_t)h;
                buf[2 * i + 1] = (uint8_t)(h >> 8);
            }
        } else if (sy_quantize_rows(type, v, n / row, row, buf, bytes) != bytes) {
            fail_msg("%s: cannot quantize %zu x %zu to type %d", cJSON_GetObjectItem(t, "name")->valuestring,
                     n / row, row, (int)type);
        }
        if (!sy_gguf_writer_write(w, buf, bytes, err, sizeof err)) fail_msg("%s", err);
        free(buf);
        free(v);
    }
    if (!sy_gguf_writer_commit(w, err, sizeof err)) fail_msg("%s", err);
    sy_gguf_writer_free(w);
}

#endif
