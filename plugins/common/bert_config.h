/* What a BERT-family checkpoint directory says about its model, and what sentence-transformers adds:
 *   - config.json of model_type "bert" (BertModel, BertForSequenceClassification): shapes, layer_norm_eps,
 *     hidden_act "gelu" (exact), position_embedding_type "absolute"; anything else is refused by name;
 *   - the sentence-transformers modules (modules.json, its Pooling folder's config.json, Normalize,
 *     sentence_bert_config.json's max_seq_length): the pooling, normalization and the longest input. A directory
 *     without modules.json pools as sentence-transformers pools a bare Hugging Face model (mean, not normalized).
 * Every number bounds-checked; errors are one line naming the file and field. */
#ifndef SY_BERT_CONFIG_H
#define SY_BERT_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <switchyard/engine.h>

typedef struct sy_bert_config {
    char architecture[64]; /* "BertModel", "BertForSequenceClassification" */
    bool classifier;       /* BertForSequenceClassification: pooler + classifier, one score per pair */
    uint32_t n_labels;
    uint32_t vocab_size, hidden_size, intermediate_size, num_hidden_layers, num_attention_heads;
    uint32_t max_position_embeddings, type_vocab_size;
    double layer_norm_eps;
    int64_t pad_token_id; /* -1 when absent */
} sy_bert_config;

/* Pooling as sentence-transformers configures it (also read for decoder embedding models). */
typedef struct sy_st_pooling {
    bool present;         /* modules.json was there */
    sy_pooling pooling;   /* MEAN, CLS or LAST */
    bool normalize;       /* a Normalize module follows */
    uint32_t max_seq_length; /* 0 when not given */
} sy_st_pooling;

/* Whether DIR/config.json says model_type "bert" (a cheap look; false when unreadable). */
bool sy_bert_is_bert_dir(const char *dir);
bool sy_bert_config_load(const char *dir, sy_bert_config *out, char *err, size_t err_size);
bool sy_bert_config_parse(const char *json, size_t len, sy_bert_config *out, char *err, size_t err_size);
/* dflt: the pooling without modules.json. */
bool sy_st_pooling_load(const char *dir, sy_pooling dflt, sy_st_pooling *out, char *err, size_t err_size);

#endif
