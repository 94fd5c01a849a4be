/*
 * llama-swap's YAML configuration turned into switchyard's INI (`switchyard import-config`), read with libyaml.
 * What carries over: startPort, healthCheckTimeout, logLevel, globalTTL, apiKeys, macros (a model's own macros are
 * expanded into its keys), models (cmd, cmdStop, env, proxy, checkEndpoint, ttl, useModelName, aliases, unlisted,
 * name, description, metadata, filters.stripParams / setParams, timeouts.connect / responseHeader, unloadTimeout),
 * groups (routing.settings.groups or the older top-level groups), hooks.on_startup.preload, peers (proxy, apiKey,
 * models). Everything else is listed in the report with the reason, one line each ("path.to.key: why").
 */
#ifndef SY_HOST_CONFIG_LLAMA_SWAP_IMPORT_H
#define SY_HOST_CONFIG_LLAMA_SWAP_IMPORT_H

#include <stdbool.h>
#include <stddef.h>

#include "base/buf.h"

#define SY_IMPORT_MAX_BYTES ((size_t)4 << 20)

/* Converts `len` bytes of YAML. 0 with the INI in ini and the report in report; -1 with err set when the text is
 * not YAML or not a llama-swap config (its top level is not a mapping). Bounded: documents, nodes and depth. */
int sy_llama_swap_import(const char *yaml, size_t len, const char *source, sy_buf *ini, sy_buf *report, char *err,
                         size_t err_size);

/* With native: a model whose cmd runs llama-server on a GGUF file (-m/--model) becomes a gguf-quant model of that
 * file with the command's context (-c/--ctx-size), threads (-t/--threads) and slots (-np/--parallel); its sampling
 * flags (--temp, --top-k, --top-p, --min-p, penalties, --seed, -n, ...) become the model's request defaults
 * (defaults.KEY), and every flag not carried is in the report. Other models import as processes. */
int sy_llama_swap_import_native(const char *yaml, size_t len, const char *source, bool native, sy_buf *ini,
                                sy_buf *report, char *err, size_t err_size);

#endif
