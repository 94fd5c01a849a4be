/* Finding, checking and loading plugin shared objects. */
#ifndef SY_HOST_PLUGIN_LOADER_H
#define SY_HOST_PLUGIN_LOADER_H

#include <stddef.h>
#include <switchyard/switchyard.h>

typedef struct sy_plugin {
    char *path;
    void *handle; /* dlopen handle */
    const sy_plugin_entry *entry;
    /* Interface tables the plugin offers (NULL when it does not). */
    const sy_engine_api *engine;
    const sy_engine_state_api *engine_state;
    const sy_engine_sampling_api *engine_sampling;
    const sy_drafter_api *drafter;
} sy_plugin;

typedef struct sy_refused_plugin {
    char *path;
    char *reason; /* one line */
} sy_refused_plugin;

typedef struct sy_plugin_registry {
    sy_plugin *plugins;
    size_t n_plugins;
    sy_refused_plugin *refused;
    size_t n_refused;
} sy_plugin_registry;

/* The host API lent to every plugin. */
const sy_host_api *sy_host_api_get(void);

/* Load every "*.so" in dir (sorted by file name). Files that fail a check are recorded in reg->refused with
 * their reason and skipped. Returns 0, or -1 with `err` set when the directory cannot be read. */
int sy_plugin_registry_load_dir(sy_plugin_registry *reg, const char *dir, char *err, size_t err_size);

/* Load dir/file alone (file: a name in dir, no separators), with the same checks. Returns 0 when it was a regular
 * file that was tried (loaded, or recorded in reg->refused), -1 when there is no such regular file. */
int sy_plugin_registry_load_file(sy_plugin_registry *reg, const char *dir, const char *file);

/* The loaded plugin of that name, or NULL. */
const sy_plugin *sy_plugin_registry_find(const sy_plugin_registry *reg, const char *name);

/* deinit and dlclose every plugin; free everything. The registry is empty afterwards. */
void sy_plugin_registry_close(sy_plugin_registry *reg);

/* The default plugin directory: beside the executable (build tree: <bin>/../plugins; installed:
 * <prefix>/lib/switchyard/plugins). Writes into buf; returns buf, or NULL if none exists. */
const char *sy_default_plugin_dir(char *buf, size_t size);

#endif
