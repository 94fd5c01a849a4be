/* qwen-cpu-mmap's BERT-family encoders (model_type bert): BertModel embedding models with sentence-transformers'
 * pooling and Normalize (all-MiniLM-L6-v2, bge-small), and BertForSequenceClassification rerankers, on the encoder
 * core (encoder.h) over the mapped SafeTensors, with the WordPiece tokenizer of tokenizer.json. */
#ifndef QM_BERT_H
#define QM_BERT_H

#include "bert_config.h"
#include "cpu_engine.h"
#include "safetensors.h"

sy_status qm_bert_probe(const char *path);
sy_status qm_bert_load(const char *path, const sy_cpu_options *opt, sy_model **out);
sy_status qm_bert_estimate(const char *path, const sy_cpu_options *opt, sy_resource_estimate *out);

/* from qwen_cpu_mmap.c */
void qm_describe_weights(sy_model *m, const sy_safetensors *st, const char *config_json, size_t config_len);
char *qm_dir_name(const char *path);

#endif
