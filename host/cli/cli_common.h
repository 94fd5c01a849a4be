/* What every verb shares: the plugin directory and the registry loaded from it. */
#ifndef SY_HOST_CLI_COMMON_H
#define SY_HOST_CLI_COMMON_H

#include <stdio.h>

#include "plugins/engine_options.h"
#include "plugins/loaded_model.h"
#include "plugins/plugin_loader.h"

/* Resolve the plugin directory (explicit, else SY_PLUGIN_DIR, else beside the executable) and load it.
 * Returns 0, or prints one line to stderr and returns -1. */
int sy_cli_load_plugins(const char *explicit_dir, sy_plugin_registry *reg, char *dir_out, size_t dir_size);

/* The same directory as a lazy registry (sy_plugin_registry_open_lazy): nothing loads until asked for. */
int sy_cli_open_plugins_lazy(const char *explicit_dir, sy_plugin_registry *reg, char *dir_out, size_t dir_size);

/* The directory as a lazy registry for a verb that opens a model: with `--plugin NAME` (only) that plugin is loaded
 * at once, from NAME.so when that file provides it; other plugins load only when asked for (a drafter, or the probe
 * of a model given without a plugin, which loads the files in name order and stops at the first that accepts it),
 * so that a verb does not pay for plugins it does not use (the CUDA plugin's libraries take ~80 ms and ~170 MB of
 * resident memory to load even without a GPU). */
int sy_cli_load_plugin_named(const char *explicit_dir, const char *only, sy_plugin_registry *reg, char *dir_out,
                             size_t dir_size);

/* The getopt default case of a verb that passes engine options through: 0 when `code` was an engine option (now in
 * eo); otherwise the verb's exit status, after one message: 1 for a bad value, 2 (with usage on stderr) for an
 * unknown option. */
int sy_cli_engine_option(const char *verb, sy_engine_options *eo, int code, const char *arg, void (*usage)(FILE *));

/* Opens the model of a verb: with the plugin named, else the first engine whose probe accepts `path`. The engine
 * options are first checked against the options that plugin (and, with a drafter spec, the drafter's plugin)
 * declares, so a misspelt flag fails before any work. 0, or -1 after one message. */
int sy_cli_open_model(const char *verb, const sy_plugin_registry *reg, const char *plugin, const char *path,
                      const char *draft_spec, sy_engine_options *eo, sy_loaded_model *lm);

/* Print "switchyard <verb>: message" to stderr. */
/* The plugin's sy.plugin.runtime/1 line (e.g. its CPU kernel tier) into out, control characters as spaces and cut to
 * size - 1 bytes; NULL when the plugin offers none or says nothing. */
const char *sy_cli_plugin_runtime(const sy_plugin *p, char *out, size_t size);
void sy_cli_error(const char *verb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
