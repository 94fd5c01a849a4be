/* A model loaded through an engine plugin. */
#ifndef SY_HOST_LOADED_MODEL_H
#define SY_HOST_LOADED_MODEL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "plugins/host_api.h"
#include "plugins/plugin_loader.h"

typedef struct sy_loaded_model {
    const sy_plugin *plugin;
    const sy_engine_api *engine;
    sy_model *model;
    sy_model_info info;
    uint32_t max_token_bytes; /* the longest token's bytes; 0: unknown */
    /* The texts of the control tokens ("<|im_start|>"), which a message's content must not turn into tokens. */
    char **control_texts;
    size_t n_control_texts;
} sy_loaded_model;

/* Load `path` with `plugin_name`, or, when plugin_name is NULL, with the first engine plugin whose probe accepts
 * it. On failure returns -1 with one line in err naming the plugin and its reason. */
int sy_loaded_model_open(const sy_plugin_registry *reg, const char *plugin_name, const char *path,
                         const sy_option *options, size_t n_options, sy_loaded_model *out, char *err,
                         size_t err_size);
void sy_loaded_model_close(sy_loaded_model *lm);

/* What sy_loaded_model_open with the same arguments would take, from the engine's "sy.engine.resources/1" (the
 * plugin named, else the first whose probe accepts path), before loading. 0 with *out filled; -1 when that
 * plugin offers no estimate, none accepts the path, or the estimate fails (the caller then plans another way). */
int sy_loaded_model_estimate(const sy_plugin_registry *reg, const char *plugin_name, const char *path,
                             const sy_option *options, size_t n_options, sy_resource_estimate *out);

/* Tokenize with the plugin's buffer protocol; returns a malloc'd array (count in *n) or NULL with err set. */
/* The metadata of the model at path without loading it, through its plugin's "sy.engine.describe/1" (see
 * engine.h). 0, or -1 with err saying why (no such plugin, the plugin cannot describe, the file is malformed). */
int sy_loaded_model_describe(const sy_plugin_registry *reg, const char *plugin_name, const char *path,
                             const sy_metadata_sink *sink, char *err, size_t err_size);
int32_t *sy_loaded_model_tokenize(const sy_loaded_model *lm, const char *text, size_t len, uint32_t flags,
                                  size_t *n, char *err, size_t err_size);
/* A token's bytes into buf (grown as needed); returns the length or -1. */
long sy_loaded_model_token_bytes(const sy_loaded_model *lm, int32_t token, char **buf, size_t *cap);

/* Publish the model under name for drafters, in its plugin's host context (sy_host_publish_model); and take
 * the name back (-1 while a drafter holds it). */
int sy_loaded_model_publish(const char *name, const sy_loaded_model *lm);
int sy_loaded_model_unpublish(const char *name, const sy_loaded_model *lm);

#endif
