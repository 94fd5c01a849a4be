/* The tokenizer a GGUF file describes, whichever kind it is:
 *   tokenizer.ggml.model "llama": SentencePiece (plugins/common/tokenizer_spm);
 *   tokenizer.ggml.model "gpt2":  byte-level BPE (plugins/common/tokenizer_bpe) with the pre-tokenizer named by
 *                                 tokenizer.ggml.pre ("qwen2", "llama-bpe", "gpt-2", "smollm"), merges from
 *                                 tokenizer.ggml.merges, control tokens as special added tokens and user-defined
 *                                 tokens as normal added tokens, BOS/EOS around the text when add_bos_token /
 *                                 add_eos_token say so.
 * Other models are refused, naming them. Built once at load; every call below may run concurrently.
 *
 * The built tokenizer comes from the plugin's tokenizer cache (tokenizer_cache.h), keyed by a hash of the
 * tokenizer.ggml.* metadata: models sharing a vocabulary share one tokenizer, and loading one whose tokenizer is
 * cached skips the build. For BPE the special ids and add_bos / add_eos are applied here, per model, so they do
 * not split the cache. gq_vocab_free releases the reference. */
#ifndef GQ_GGUF_VOCAB_H
#define GQ_GGUF_VOCAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <switchyard/engine.h>

#include "gguf.h"

typedef struct gq_vocab gq_vocab;

/* NULL on failure, with *status (SY_ERR_UNSUPPORTED or SY_ERR_FORMAT) and one line in err. */
gq_vocab *gq_vocab_from_gguf(const sy_gguf *g, sy_status *status, char *err, size_t err_size);
void gq_vocab_free(gq_vocab *v);
/* Frees the cached tokenizers no vocabulary holds any more (the plugin's deinit). */
void gq_vocab_drop_cached(void);

const char *gq_vocab_kind(const gq_vocab *v); /* "spm" or "bpe" */
uint32_t gq_vocab_size(const gq_vocab *v);
int32_t gq_vocab_bos(const gq_vocab *v); /* -1 when absent */
int32_t gq_vocab_eos(const gq_vocab *v);
int32_t gq_vocab_pad(const gq_vocab *v);
bool gq_vocab_add_bos(const gq_vocab *v);
uint64_t gq_vocab_memory(const gq_vocab *v); /* rough bytes held */
/* Without building it: the vocabulary's size and what gq_vocab_memory will say once built. false with *status
 * and err as gq_vocab_from_gguf for a tokenizer it would refuse outright. */
bool gq_vocab_estimate(const sy_gguf *g, uint32_t *n_vocab, uint64_t *bytes, sy_status *status, char *err,
                       size_t err_size);

/* The engine ABI's tokenize / token_to_bytes / token_flags (same buffer protocol and flags). */
sy_status gq_vocab_tokenize(const gq_vocab *v, const char *text, size_t len, uint32_t flags, int32_t *out,
                            size_t capacity, size_t *n_out, char *err, size_t err_size);
sy_status gq_vocab_token_bytes(const gq_vocab *v, int32_t id, char *out, size_t capacity, size_t *n_out);
uint32_t gq_vocab_token_flags(const gq_vocab *v, int32_t id);

#endif
