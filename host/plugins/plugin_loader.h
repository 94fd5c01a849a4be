/* Finding, checking and loading plugin shared objects. */
#ifndef SY_HOST_PLUGIN_LOADER_H
#define SY_HOST_PLUGIN_LOADER_H

#include <stdbool.h>
#include <stddef.h>
#include <switchyard/switchyard.h>

typedef struct sy_plugin {
    char *path;
    void *handle; /* dlopen handle */
    const sy_plugin_entry *entry;
    struct sy_host_context *host; /* the registry's: where its models are published */
    struct sy_plugin_host *lent;  /* the host API table this plugin was given */
    /* Interface tables the plugin offers (NULL when it does not). A table is read only as far as its
     * struct_size goes (SY_HAS_FIELD). */
    const sy_engine_api *engine;
    const sy_engine_state_api *engine_state;
    const sy_engine_sampling_api *engine_sampling;
    const sy_engine_resources_api *engine_resources;
    const sy_engine_embed_api *engine_embed; /* (1.2) embeddings and reranking */
    const sy_drafter_api *drafter;
    /* (1.2) The load options it declares, checked well-formed at load; NULL when it declares none (an older ABI). */
    const sy_plugin_options_api *options;
    /* What it chose on this machine (sy.plugin.runtime/1, optional), e.g. a CPU engine's kernel tier. */
    const sy_plugin_runtime_api *runtime;
} sy_plugin;

typedef struct sy_refused_plugin {
    char *path;
    char *reason; /* one line */
} sy_refused_plugin;

/* At most this many plugins load into one registry: the entries never move once written, so threads can read a
 * lazy registry (below) while another one adds to it. */
#define SY_PLUGIN_MAX 64

struct sy_plugin_lazy;

typedef struct sy_plugin_registry {
    sy_plugin *plugins;        /* room for SY_PLUGIN_MAX once the first plugin is loaded */
    _Atomic size_t n_plugins;  /* published after the entry is written */
    sy_refused_plugin *refused; /* grows while loading; read it only where no other thread loads */
    size_t n_refused;
    struct sy_plugin_lazy *lazy; /* NULL unless opened by sy_plugin_registry_open_lazy */
    struct sy_host_context *host; /* published models; made with the first plugin loaded */
} sy_plugin_registry;

/* Load every "*.so" in dir (sorted by file name). Files that fail a check are recorded in reg->refused with
 * their reason and skipped. Returns 0, or -1 with `err` set when the directory cannot be read. */
int sy_plugin_registry_load_dir(sy_plugin_registry *reg, const char *dir, char *err, size_t err_size);

/* Load dir/file alone (file: a name in dir, no separators), with the same checks. Returns 0 when it was a regular
 * file that was tried (loaded, or recorded in reg->refused), -1 when there is no such regular file. */
int sy_plugin_registry_load_file(sy_plugin_registry *reg, const char *dir, const char *file);

/* The loaded plugin of that name, or NULL. */
const sy_plugin *sy_plugin_registry_find(const sy_plugin_registry *reg, const char *name);

/* A lazy registry (what serve uses): nothing loads up front, so a plugin no model names costs nothing (the CUDA
 * plugin's libraries alone take some 200 MB of memory on a machine without a GPU). Returns -1 with `err` set when
 * dir cannot be read. Loads are serialized by a lock; lookups need none. */
int sy_plugin_registry_open_lazy(sy_plugin_registry *reg, const char *dir, char *err, size_t err_size);

/* The plugin of that name, loading it if need be: in a lazy registry dir/<name>.so first, then, if that file does
 * not provide it, every file of the directory not tried yet. NULL when no plugin of that name loads. An eager
 * registry only looks. Refusals are logged as warnings as they happen. A lazy registry loads even through a const
 * pointer, as a cache fills: what it holds only grows, and no entry moves. */
const sy_plugin *sy_plugin_registry_need(const sy_plugin_registry *reg, const char *name);

/* Loads every file of a lazy registry's directory not tried yet (for lookups by what plugins offer rather than by
 * name); nothing for an eager one. */
void sy_plugin_registry_need_all(const sy_plugin_registry *reg);

/* Loads the first file of a lazy registry's directory, in name order, not tried yet (for a search that stops at
 * the first plugin that will do); false when every file was tried, or the registry is eager. */
bool sy_plugin_registry_load_next(const sy_plugin_registry *reg);

/* Whether the registry is lazy and may still load more. */
bool sy_plugin_registry_is_lazy(const sy_plugin_registry *reg);

/* deinit and dlclose every plugin; free everything. The registry is empty afterwards. */
void sy_plugin_registry_close(sy_plugin_registry *reg);

/* The default plugin directory: beside the executable (build tree: <bin>/../plugins; installed:
 * <prefix>/lib/switchyard/plugins). Writes into buf; returns buf, or NULL if none exists. */
const char *sy_default_plugin_dir(char *buf, size_t size);

#endif
