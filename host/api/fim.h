/*
 * Fill-in-the-middle: the prompt of a code completion between a prefix and a suffix, laid out as llama-server's
 * /infill lays it out (its format_prompt_infill: the repository-level pattern of Qwen2.5-Coder), with the
 * model's FIM tokens (GGUF tokenizer.ggml.fim_* or the token conventions the plugin recognises, see
 * api/model_facts.h). Used by /infill, and by `suffix` on /v1/completions and /api/generate.
 */
#ifndef SY_HOST_API_FIM_H
#define SY_HOST_API_FIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "api/lease.h"

/* llama-server's default batch, which its FIM layout sizes the prefix and suffix by. */
#define SY_FIM_BATCH 2048

typedef struct sy_api_fim_chunk {
    const char *filename; /* NULL: "tmp" */
    const char *text;
} sy_api_fim_chunk;

typedef struct sy_api_fim_input {
    const char *prefix;
    const char *suffix;
    const char *prompt;             /* text after the prefix, before the cursor (special tokens parsed); may be NULL */
    const sy_api_fim_chunk *extra;  /* other files for context */
    size_t n_extra;
    bool repo_header;               /* the repository and file-separator lines (/infill); not for `suffix` */
    int64_t n_predict;              /* -1: unlimited (llama-server's default) */
} sy_api_fim_input;

/* The prompt's tokens (malloc'd, count in *n), or NULL with e set: 400 when the model has no FIM tokens (saying
 * so) or the prompt does not fit the context. */
int32_t *sy_api_fim_prompt(sy_http_request *r, const sy_api_model *m, const sy_api_fim_input *in, size_t *n,
                           sy_api_error *e);

#endif
