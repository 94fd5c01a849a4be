/*
 * Fuzz target: the SafeTensors reader (plugins/common/safetensors.c) and the config.json /
 * generation_config.json parser (plugins/common/hf_config.c) on arbitrary bytes. Every input goes to all three;
 * a SafeTensors seed fails fast as JSON and a config seed fails fast as SafeTensors, so one corpus serves both.
 *
 * Beyond "no crash, no leak, no undefined behaviour" it checks the promises of the readers: a refusal is one line
 * naming the file; an accepted file's tensors lie inside the input, are as large as dtype and shape say, share
 * no byte, come in strict name order and are found by name; an accepted config is internally consistent.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hf_config.h"
#include "safetensors.h"
#include "sy_dtype.h"

#define CHECK(cond)                                                                                      \
    do {                                                                                                 \
        if (!(cond)) {                                                                                   \
            fprintf(stderr, "fuzz_safetensors: %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);  \
            abort();                                                                                     \
        }                                                                                                \
    } while (0)

static void check_message(const char *err, const char *prefix) {
    CHECK(strncmp(err, prefix, strlen(prefix)) == 0);
    CHECK(strlen(err) > strlen(prefix));
    CHECK(strchr(err, '\n') == NULL);
}

static int compare_offsets(const void *a, const void *b) {
    const sy_safetensors_tensor *x = *(const sy_safetensors_tensor *const *)a;
    const sy_safetensors_tensor *y = *(const sy_safetensors_tensor *const *)b;
    return x->file_offset < y->file_offset ? -1 : x->file_offset > y->file_offset;
}

static void fuzz_safetensors(const uint8_t *data, size_t size) {
    char err[256] = "";
    sy_safetensors *st = sy_safetensors_open_memory(data, size, "fuzz.safetensors", err, sizeof err);
    if (st == NULL) {
        check_message(err, "fuzz.safetensors: ");
        return;
    }
    size_t n = sy_safetensors_count(st);
    const sy_safetensors_tensor **by_offset = malloc((n ? n : 1) * sizeof *by_offset);
    CHECK(by_offset != NULL);
    volatile uint8_t sink = 0;
    for (size_t i = 0; i < n; i++) {
        const sy_safetensors_tensor *t = sy_safetensors_at(st, i);
        CHECK(t != NULL && t->name[0] != '\0');
        if (i > 0) CHECK(strcmp(sy_safetensors_at(st, i - 1)->name, t->name) < 0);
        CHECK(sy_safetensors_find(st, t->name) == t);
        CHECK(t->n_dims <= SY_SAFETENSORS_MAX_DIMS);
        uint64_t elements = 1;
        for (uint32_t d = 0; d < t->n_dims; d++) elements *= t->shape[d];
        CHECK(elements == t->n_elements);
        const uint8_t *p = t->data;
        CHECK(p >= data && t->file_offset <= size && t->n_bytes <= size - t->file_offset);
        CHECK(p == data + t->file_offset);
        CHECK(t->alignment >= 1 && (uintptr_t)p % t->alignment == 0);
        if (t->dtype != SY_SAFETENSORS_DTYPE_UNSUPPORTED) {
            CHECK(sy_dtype_row_bytes(t->dtype, t->n_elements) == t->n_bytes);
            CHECK(sy_safetensors_require(st, t->name, err, sizeof err) == t);
        } else {
            CHECK(sy_safetensors_require(st, t->name, err, sizeof err) == NULL);
            check_message(err, "fuzz.safetensors: ");
        }
        if (t->n_bytes > 0) sink ^= p[0] ^ p[t->n_bytes - 1]; /* the sanitizers see any read past the input */
        by_offset[i] = t;
    }
    qsort(by_offset, n, sizeof *by_offset, compare_offsets);
    uint64_t reach = 0;
    for (size_t i = 0; i < n; i++) {
        if (by_offset[i]->n_bytes == 0) continue;
        CHECK(by_offset[i]->file_offset >= reach);
        reach = by_offset[i]->file_offset + by_offset[i]->n_bytes;
    }
    free(by_offset);
    (void)sink;
    size_t hlen;
    const uint8_t *header = sy_safetensors_shard_header(st, 0, &hlen);
    CHECK(header == data + 8 && hlen <= size - 8);
    (void)sy_safetensors_fingerprint(st, data, size);
    (void)sy_safetensors_metadata(st, "format");
    sy_safetensors_close(st);
}

static void fuzz_config(const uint8_t *data, size_t size) {
    char err[256] = "";
    sy_hf_config c;
    if (!sy_hf_config_parse((const char *)data, size, "fuzz.json", &c, err, sizeof err)) {
        check_message(err, "fuzz.json: ");
    } else {
        CHECK(c.hidden_size >= 1 && c.vocab_size >= 1 && c.num_hidden_layers <= SY_HF_MAX_LAYERS);
        CHECK(c.num_key_value_heads >= 1 && c.num_attention_heads % c.num_key_value_heads == 0);
        CHECK(c.head_dim >= 2 && c.head_dim % 2 == 0);
        CHECK(c.rms_norm_eps > 0.0 && c.rope.theta > 0.0);
        CHECK(c.n_eos <= SY_HF_MAX_EOS);
        for (uint32_t i = 0; i < c.n_eos; i++) CHECK(c.eos_token_ids[i] >= 0 && c.eos_token_ids[i] < c.vocab_size);
        CHECK(c.bos_token_id == SY_HF_NO_TOKEN || (c.bos_token_id >= 0 && c.bos_token_id < c.vocab_size));
        CHECK(c.pad_token_id == SY_HF_NO_TOKEN || (c.pad_token_id >= 0 && c.pad_token_id < c.vocab_size));
        for (uint32_t l = 0; l < c.num_hidden_layers; l++) {
            CHECK(c.layer_types[l] == SY_HF_LAYER_ATTENTION ||
                  (c.arch == SY_HF_ARCH_LFM2 && c.layer_types[l] == SY_HF_LAYER_CONV));
        }
        if (c.arch == SY_HF_ARCH_LFM2) CHECK(c.lfm2_ff_dim >= 1 && c.conv_l_cache >= 1);
    }
    sy_hf_generation_config g;
    err[0] = '\0';
    if (!sy_hf_generation_config_parse((const char *)data, size, "fuzz.json", 1000, &g, err, sizeof err)) {
        check_message(err, "fuzz.json: ");
    } else {
        CHECK(g.n_eos <= SY_HF_MAX_EOS);
        for (uint32_t i = 0; i < g.n_eos; i++) CHECK(g.eos_token_ids[i] >= 0 && g.eos_token_ids[i] < 1000);
        CHECK(!g.has_top_p || (g.top_p >= 0.0 && g.top_p <= 1.0));
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_safetensors(data, size);
    fuzz_config(data, size);
    return 0;
}
