/*
 * `switchyard serve MODEL...` and `--models-dir DIR` without a config: every GGUF file, Ollama manifest (an
 * Ollama models folder's manifests/ with its blobs/) and Hugging Face model folder found becomes a [model.NAME]
 * section (named after its file or folder, NAME:TAG for Ollama; the GGUF's general.name as an alias), written as
 * config text so that the config reader checks it like any other. A config file given too adds models and
 * overrides discovered ones of the same name.
 */
#ifndef SY_HOST_CLI_SERVE_DISCOVER_H
#define SY_HOST_CLI_SERVE_DISCOVER_H

#include <stdbool.h>
#include <stddef.h>

#include "config/config.h"
#include "plugins/plugin_loader.h"

typedef struct sy_serve_sources {
    const char *const *models; /* paths named on the command line */
    size_t n_models;
    const char *models_dir;    /* NULL: none */
} sy_serve_sources;

/* The config in effect: the file (may be NULL) plus the discovered models it does not name. reg gives the GGUF
 * aliases (general.name, read without loading). NULL, with the reasons logged, when a path named on the
 * command line is no model; otherwise a config whose diagnostics say what is wrong. */
sy_config *sy_serve_discover_config(const char *config_path, const sy_serve_sources *src,
                                    const sy_plugin_registry *reg);

#endif
