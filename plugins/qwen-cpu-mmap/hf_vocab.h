/* The tokenizer of a Hugging Face checkpoint directory: tokenizer.json (byte-level BPE, tokenizer_bpe.h) plus what
 * tokenizer_config.json, config.json and generation_config.json say about special tokens:
 *   - END_OF_GENERATION on every EOS id of config.json and generation_config.json and on tokenizer_config's
 *     eos_token (Qwen's "<|im_end|>", the end of a chat turn);
 *   - bos / eos / pad ids for model_info (tokenizer_config's tokens first, then the configs');
 *   - add_bos when the tokenizer's post-processor puts tokens before the text (what ADD_SPECIAL really does);
 *   - the chat template: tokenizer_config's chat_template, else the file chat_template.jinja.
 * Rows of the embedding past the tokenizer's ids (Qwen pads its vocabulary to a multiple of 128) are UNUSED
 * tokens with no bytes. Immutable after loading; every call may run on any thread.
 *
 * The BPE itself comes from the plugin's tokenizer cache (tokenizer_cache.h), keyed by a hash of tokenizer.json:
 * checkpoints with the same tokenizer.json share one, and a load whose tokenizer is cached skips the build. */
#ifndef QM_HF_VOCAB_H
#define QM_HF_VOCAB_H

#include "cpu_engine.h"
#include "hf_config.h"

typedef struct qm_vocab qm_vocab;

typedef struct qm_vocab_facts {
    int32_t bos, eos, pad; /* -1 when absent */
    bool add_bos;
    char *chat_template;   /* malloc'd, or NULL */
    char **template_names, **template_texts; /* tokenizer_config's named templates, n_templates malloc'd pairs */
    size_t n_templates;
} qm_vocab_facts;

/* n_model_vocab: rows of the embedding (config.json vocab_size); the tokenizer's ids must fit. NULL with a
 * status and one line in err (naming the file) on failure. */
qm_vocab *qm_vocab_load(const char *dir, const sy_hf_config *cfg, const sy_hf_generation_config *gen,
                        qm_vocab_facts *facts, sy_status *status, char *err, size_t err_size);

extern const sy_cpu_vocab_ops qm_vocab_ops;

/* Frees the cached tokenizers no vocabulary holds any more (the plugin's deinit). */
void qm_vocab_drop_cached(void);

/* "dir/name", malloc'd; NULL when out of memory. */
char *qm_path_in(const char *dir, const char *name);

#endif
