/* See model_describe.h. */
#include "model_describe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>


const char *const sy_fim_kind_names[SY_FIM_KINDS] = {"pre", "suf", "mid", "pad", "rep", "sep"};

/* The token texts llama.cpp's vocabulary loader takes for each FIM kind when the file names no id. */
static const char *const fim_texts[SY_FIM_KINDS][10] = {
    [SY_FIM_PRE] = {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<\xef\xbd\x9c" "fim\xe2\x96\x81" "begin\xef\xbd\x9c>",
                    "<PRE>", "\xe2\x96\x81<PRE>", "<|code_prefix|>", "<|prefix|>", NULL},
    [SY_FIM_SUF] = {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<\xef\xbd\x9c" "fim\xe2\x96\x81" "hole\xef\xbd\x9c>",
                    "<SUF>", "\xe2\x96\x81<SUF>", "<|code_suffix|>", "<|suffix|>", NULL},
    [SY_FIM_MID] = {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<\xef\xbd\x9c" "fim\xe2\x96\x81" "end\xef\xbd\x9c>",
                    "<MID>", "\xe2\x96\x81<MID>", "<|code_middle|>", "<|middle|>", NULL},
    [SY_FIM_PAD] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]", NULL},
    [SY_FIM_REP] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>", NULL},
    [SY_FIM_SEP] = {"<|file_sep|>", NULL},
};

int sy_fim_kind_of_text(const char *text, size_t len) {
    for (int k = 0; k < SY_FIM_KINDS; k++)
        for (int i = 0; fim_texts[k][i] != NULL; i++)
            if (strlen(fim_texts[k][i]) == len && memcmp(fim_texts[k][i], text, len) == 0) return k;
    return -1;
}

typedef struct emitter {
    const sy_metadata_sink *sink;
    int stopped;
} emitter;

static void put(emitter *e, const char *key, uint32_t type, const char *s, size_t len, int64_t i, double f) {
    if (e->stopped) return;
    sy_metadata_value v = {sizeof v, type, s, len, i, f};
    if (e->sink->put(e->sink->user, key, &v) != 0) e->stopped = 1;
}

static void put_int(emitter *e, const char *key, int64_t i) { put(e, key, SY_META_INT, NULL, 0, i, 0); }
static void put_str(emitter *e, const char *key, const char *s) { put(e, key, SY_META_STRING, s, strlen(s), 0, 0); }

static void put_kv(emitter *e, const sy_gguf *g, uint64_t kv) {
    const char *key = sy_gguf_kv_key(g, kv);
    uint64_t u;
    int64_t i;
    double f;
    bool b;
    const char *s;
    size_t len;
    sy_gguf_type et;
    switch (sy_gguf_kv_type(g, kv)) {
    case SY_GGUF_UINT8: case SY_GGUF_UINT16: case SY_GGUF_UINT32: case SY_GGUF_UINT64:
        if (sy_gguf_kv_uint(g, kv, &u)) put_int(e, key, u > INT64_MAX ? INT64_MAX : (int64_t)u);
        break;
    case SY_GGUF_INT8: case SY_GGUF_INT16: case SY_GGUF_INT32: case SY_GGUF_INT64:
        if (sy_gguf_kv_int(g, kv, &i)) put_int(e, key, i);
        break;
    case SY_GGUF_FLOAT32: case SY_GGUF_FLOAT64:
        if (sy_gguf_kv_float(g, kv, &f)) put(e, key, SY_META_FLOAT, NULL, 0, 0, f);
        break;
    case SY_GGUF_BOOL:
        if (sy_gguf_kv_bool(g, kv, &b)) put(e, key, SY_META_BOOL, NULL, 0, b, 0);
        break;
    case SY_GGUF_STRING:
        if (sy_gguf_kv_string(g, kv, &s, &len)) put(e, key, SY_META_STRING, s, len, 0, 0);
        break;
    case SY_GGUF_ARRAY:
        if (sy_gguf_kv_array(g, kv, &et, &u)) put(e, key, SY_META_ARRAY, NULL, 0, u > INT64_MAX ? INT64_MAX : (int64_t)u, 0);
        break;
    default:
        break;
    }
}

/* llama.cpp's llama_ftype names, as general.file_type numbers them (Ollama shows them as quantization_level). */
static const char *ftype_name(uint64_t ft) {
    static const struct {
        uint32_t id;
        const char *name;
    } names[] = {{0, "F32"}, {1, "F16"}, {2, "Q4_0"}, {3, "Q4_1"}, {7, "Q8_0"}, {8, "Q5_0"}, {9, "Q5_1"},
                 {10, "Q2_K"}, {11, "Q3_K_S"}, {12, "Q3_K_M"}, {13, "Q3_K_L"}, {14, "Q4_K_S"}, {15, "Q4_K_M"},
                 {16, "Q5_K_S"}, {17, "Q5_K_M"}, {18, "Q6_K"}, {19, "IQ2_XXS"}, {20, "IQ2_XS"}, {21, "Q2_K_S"},
                 {22, "IQ3_XS"}, {23, "IQ3_XXS"}, {24, "IQ1_S"}, {25, "IQ4_NL"}, {26, "IQ3_S"}, {27, "IQ3_M"},
                 {28, "IQ2_S"}, {29, "IQ2_M"}, {30, "IQ4_XS"}, {31, "IQ1_M"}, {32, "BF16"}, {36, "TQ1_0"},
                 {37, "TQ2_0"}, {38, "MXFP4"}};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (names[i].id == ft) return names[i].name;
    return NULL;
}

/* The file type from general.file_type, or else from the type holding most bytes of 2-D tensors. */
static const char *file_type_name(const sy_gguf *g, int64_t *ftype) {
    uint64_t ft;
    if (sy_gguf_get_uint(g, "general.file_type", &ft) == 1 && ft <= INT32_MAX) {
        const char *name = ftype_name(ft);
        if (name) {
            *ftype = (int64_t)ft;
            return name;
        }
    }
    *ftype = -1;
    uint64_t bytes[64] = {0};
    for (uint64_t i = 0; i < sy_gguf_tensor_count(g); i++) {
        const sy_gguf_tensor *t = sy_gguf_tensor_at(g, i);
        if (t->type < 64 && t->dims[1] > 1) bytes[t->type] += t->n_bytes;
    }
    uint32_t best = 0;
    for (uint32_t t = 1; t < 64; t++)
        if (bytes[t] > bytes[best]) best = t;
    const char *name = sy_gguf_tensor_type_name(best);
    return name ? name : "unknown";
}

sy_status sy_gguf_describe(const sy_gguf *g, const sy_metadata_sink *sink) {
    emitter e = {sink, 0};
    for (uint64_t kv = 0; kv < sy_gguf_kv_count(g) && !e.stopped; kv++) put_kv(&e, g, kv);
    if (sy_gguf_find_key(g, "general.parameter_count") < 0) {
        uint64_t n = 0;
        for (uint64_t i = 0; i < sy_gguf_tensor_count(g); i++) n += sy_gguf_tensor_at(g, i)->n_elements;
        put_int(&e, "general.parameter_count", n > INT64_MAX ? INT64_MAX : (int64_t)n);
    }
    int64_t ftype;
    const char *ft_name = file_type_name(g, &ftype);
    if (sy_gguf_find_key(g, "general.file_type") < 0 && ftype >= 0) put_int(&e, "general.file_type", ftype);
    put_str(&e, "general.file_type_name", ft_name);

    /* FIM ids: the file's own keys (and the deprecated prefix/suffix/middle ones), else by token text. */
    int64_t fim[SY_FIM_KINDS];
    static const char *const deprecated[SY_FIM_KINDS] = {"tokenizer.ggml.prefix_token_id",
                                                         "tokenizer.ggml.suffix_token_id",
                                                         "tokenizer.ggml.middle_token_id", NULL, NULL, NULL};
    bool missing = false, own[SY_FIM_KINDS] = {false};
    for (int k = 0; k < SY_FIM_KINDS; k++) {
        char key[64];
        snprintf(key, sizeof key, "tokenizer.ggml.fim_%s_token_id", sy_fim_kind_names[k]);
        uint64_t id;
        fim[k] = -1;
        if (sy_gguf_get_uint(g, key, &id) == 1 && id <= INT32_MAX) fim[k] = (int64_t)id, own[k] = true;
        else if (deprecated[k] && sy_gguf_get_uint(g, deprecated[k], &id) == 1 && id <= INT32_MAX) fim[k] = (int64_t)id;
        if (fim[k] == -1) missing = true;
    }
    int64_t tokens_kv = sy_gguf_find_key(g, "tokenizer.ggml.tokens");
    sy_gguf_type et;
    uint64_t n_tokens = 0;
    if (missing && tokens_kv >= 0 && sy_gguf_kv_array(g, (uint64_t)tokens_kv, &et, &n_tokens) && et == SY_GGUF_STRING) {
        for (uint64_t i = 0; i < n_tokens && i <= INT32_MAX; i++) {
            const char *s;
            size_t len;
            /* every candidate is between 5 and 20 bytes: skip the rest without comparing */
            if (!sy_gguf_array_string(g, (uint64_t)tokens_kv, i, &s, &len) || len < 5 || len > 20 || s[0] == 'G')
                continue;
            int k = sy_fim_kind_of_text(s, len);
            if (k >= 0 && fim[k] == -1) fim[k] = (int64_t)i;
        }
    }
    for (int k = 0; k < SY_FIM_KINDS; k++) {
        if (fim[k] < 0 || own[k]) continue; /* absent, or the file's own key (reported above) */
        char key[64];
        snprintf(key, sizeof key, "tokenizer.ggml.fim_%s_token_id", sy_fim_kind_names[k]);
        put_int(&e, key, fim[k]);
    }
    return SY_OK;
}

