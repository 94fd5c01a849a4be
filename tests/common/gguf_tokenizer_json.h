/* A Hugging Face tokenizer.json (BPE) written as GGUF tokenizer metadata, as GGUF converters store it, for tests
 * that build GGUF files in memory (gguf_builder.h). Header-only, test use only. */
#ifndef SY_TEST_GGUF_TOKENIZER_JSON_H
#define SY_TEST_GGUF_TOKENIZER_JSON_H

#include <stdio.h>
#include <stdlib.h>

#include <cjson/cJSON.h>

#include "gguf_builder.h"

/* Five key-value pairs: tokenizer.ggml.model ("gpt2"), .pre, .tokens, .token_type and .merges; ids without a token
 * become "[PAD<id>]" of type 5 (unused), added tokens type 3 (special) or 4 (user-defined). */
static inline void gb_tokenizer_json_kvs(gguf_buf *b, const cJSON *tj, const char *pre) {
    const cJSON *model = cJSON_GetObjectItem(tj, "model");
    const cJSON *vocab = cJSON_GetObjectItem(model, "vocab");
    const cJSON *merges = cJSON_GetObjectItem(model, "merges");
    const cJSON *added = cJSON_GetObjectItem(tj, "added_tokens");
    int n = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, vocab) if (e->valueint + 1 > n) n = e->valueint + 1;
    cJSON_ArrayForEach(e, added) if (cJSON_GetObjectItem(e, "id")->valueint + 1 > n) n =
        cJSON_GetObjectItem(e, "id")->valueint + 1;
    const char **text = calloc((size_t)n, sizeof *text);
    int32_t *type = calloc((size_t)n, sizeof *type);
    if (text == NULL || type == NULL) abort();
    cJSON_ArrayForEach(e, vocab) {
        text[e->valueint] = e->string;
        type[e->valueint] = 1;
    }
    cJSON_ArrayForEach(e, added) {
        int id = cJSON_GetObjectItem(e, "id")->valueint;
        text[id] = cJSON_GetObjectItem(e, "content")->valuestring;
        type[id] = cJSON_IsTrue(cJSON_GetObjectItem(e, "special")) ? 3 : 4;
    }
    gb_kv_str(b, "tokenizer.ggml.model", "gpt2");
    gb_kv_str(b, "tokenizer.ggml.pre", pre);
    gb_kv_array(b, "tokenizer.ggml.tokens", 8, (uint64_t)n);
    for (int i = 0; i < n; i++) {
        char pad[32];
        snprintf(pad, sizeof pad, "[PAD%d]", i);
        gb_str(b, text[i] ? text[i] : pad);
    }
    gb_kv_array(b, "tokenizer.ggml.token_type", 5, (uint64_t)n);
    for (int i = 0; i < n; i++) gb_i32(b, type[i] ? type[i] : 5);
    gb_kv_array(b, "tokenizer.ggml.merges", 8, (uint64_t)cJSON_GetArraySize(merges));
    cJSON_ArrayForEach(e, merges) {
        char line[1024];
        if (cJSON_IsString(e)) snprintf(line, sizeof line, "%s", e->valuestring);
        else snprintf(line, sizeof line, "%s %s", cJSON_GetArrayItem(e, 0)->valuestring,
                      cJSON_GetArrayItem(e, 1)->valuestring);
        gb_str(b, line);
    }
    free(text);
    free(type);
}

#endif
