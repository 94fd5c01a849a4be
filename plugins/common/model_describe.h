/* A model's metadata for "sy.engine.describe/1" (abi/switchyard/engine.h) without loading it: the keys of a GGUF
 * file, or a Hugging Face folder's config.json under GGUF's names, with the parameter count, the file type and
 * the FIM tokens worked out where the file leaves them implicit. */
#ifndef SY_COMMON_MODEL_DESCRIBE_H
#define SY_COMMON_MODEL_DESCRIBE_H

#include <stddef.h>
#include <stdint.h>

#include <switchyard/engine.h>

#include "gguf.h"

/* The FIM kinds in GGUF's key order: tokenizer.ggml.fim_<name>_token_id. */
enum { SY_FIM_PRE, SY_FIM_SUF, SY_FIM_MID, SY_FIM_PAD, SY_FIM_REP, SY_FIM_SEP, SY_FIM_KINDS };
extern const char *const sy_fim_kind_names[SY_FIM_KINDS];

/* The FIM kind a token's text stands for by the conventions llama.cpp recognises (Qwen2.5-Coder, StarCoder,
 * CodeLlama, DeepSeek-Coder, Granite, ...), or -1. */
int sy_fim_kind_of_text(const char *text, size_t len);

/* Every key of g (arrays by their count), then the derived ones. SY_OK, or what the sink's stop returned as
 * SY_OK too (a stop is not an error). */
sy_status sy_gguf_describe(const sy_gguf *g, const sy_metadata_sink *sink);

/* A Hugging Face model folder (config.json, and tokenizer.json's added tokens for FIM): SY_ERR_FORMAT with err
 * when config.json is unreadable. */
sy_status sy_hf_describe(const char *dir, const sy_metadata_sink *sink, char *err, size_t err_size);

#endif
