/* Plugin discovery and checks: every refusal is one line naming the reason, and the host keeps running. */
#include "plugins/plugin_loader.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"
#include "base/option_schema.h"
#include "plugins/host_api.h"
#include "base/util.h"

#ifndef SY_INSTALL_PLUGINDIR
#define SY_INSTALL_PLUGINDIR "lib/switchyard/plugins"
#endif

/* The smallest entry any 1.x plugin can have: everything up to get_interface was in 1.0. */
#define SY_ENTRY_MIN_SIZE (offsetof(sy_plugin_entry, get_interface) + sizeof(void *))

static void refuse(sy_plugin_registry *reg, const char *path, const char *fmt, ...) {
    char reason[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof reason, fmt, ap);
    va_end(ap);
    sy_refused_plugin *grown = realloc(reg->refused, (reg->n_refused + 1) * sizeof *grown);
    if (grown == NULL) return;
    reg->refused = grown;
    grown[reg->n_refused].path = sy_strdup(path);
    grown[reg->n_refused].reason = sy_strdup(reason);
    reg->n_refused++;
    sy_log(SY_LOG_DEBUG, "plugin %s refused: %s", path, reason);
}

static int valid_plugin_name(const char *name) {
    size_t n = 0;
    for (const char *p = name; *p; p++, n++) {
        if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-')) return 0;
    }
    return n > 0 && n <= 63;
}

/* The size of a table's 1.0 part: up to and including its last 1.0 member. */
#define SY_TABLE_MIN(type, last_member) (offsetof(type, last_member) + sizeof(((type *)0)->last_member))

/* An interface table is usable when it is present and its struct_size covers at least the 1.0 part. */
static const void *lookup_interface(const sy_plugin_entry *entry, const char *id, size_t min_size) {
    const uint32_t *table = entry->get_interface(id);
    if (table == NULL || *table < min_size) return NULL;
    return table;
}

static void load_one(sy_plugin_registry *reg, const char *path) {
    dlerror();
    void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (handle == NULL) {
        const char *why = dlerror();
        refuse(reg, path, "not a loadable shared object: %s", why ? why : "dlopen failed");
        return;
    }
    const sy_plugin_entry *entry = dlsym(handle, SY_PLUGIN_ENTRY_SYMBOL);
    if (entry == NULL) {
        refuse(reg, path, "no " SY_PLUGIN_ENTRY_SYMBOL " symbol: not a switchyard plugin");
        dlclose(handle);
        return;
    }
    if (entry->struct_size < SY_ENTRY_MIN_SIZE) {
        refuse(reg, path, "entry struct_size %u is smaller than the ABI 1.0 entry (%zu bytes)",
               (unsigned)entry->struct_size, (size_t)SY_ENTRY_MIN_SIZE);
        dlclose(handle);
        return;
    }
    if (entry->abi_major != SY_ABI_VERSION_MAJOR) {
        refuse(reg, path, "built for ABI major %u, this host speaks ABI major %u", (unsigned)entry->abi_major,
               (unsigned)SY_ABI_VERSION_MAJOR);
        dlclose(handle);
        return;
    }
    if (entry->abi_minor > SY_ABI_VERSION_MINOR) {
        refuse(reg, path, "built for ABI %u.%u, newer than this host's %u.%u (minor too new)",
               (unsigned)entry->abi_major, (unsigned)entry->abi_minor, (unsigned)SY_ABI_VERSION_MAJOR,
               (unsigned)SY_ABI_VERSION_MINOR);
        dlclose(handle);
        return;
    }
    if (entry->name == NULL || !valid_plugin_name(entry->name) || entry->init == NULL ||
        entry->get_interface == NULL) {
        refuse(reg, path, "entry is incomplete (name must be [a-z0-9-]{1,63}; init and get_interface are required)");
        dlclose(handle);
        return;
    }
    const sy_plugin *existing = sy_plugin_registry_find(reg, entry->name);
    if (existing != NULL) {
        refuse(reg, path, "duplicate plugin name '%s' (already loaded from %s)", entry->name, existing->path);
        dlclose(handle);
        return;
    }
    if (reg->host == NULL) reg->host = sy_host_context_create();
    sy_plugin_host *lent = sy_plugin_host_create(reg->host, path);
    sy_plugin_host_set_name(lent, entry->name);
    sy_status st = entry->init(sy_plugin_host_api(lent));
    if (st != SY_OK) {
        refuse(reg, path, "init failed with status %d (%s)", (int)st, sy_status_name(st));
        sy_plugin_host_free(lent);
        dlclose(handle);
        return;
    }

    sy_plugin plugin = {0};
    plugin.path = sy_strdup(path);
    plugin.handle = handle;
    plugin.entry = entry;
    plugin.host = reg->host;
    plugin.lent = lent;
    /* Each table is taken when it holds its 1.0 part: a minor that appends to a table must not drop the
     * extensions of every plugin built before it. */
    plugin.engine = lookup_interface(entry, SY_ENGINE_INTERFACE_ID, SY_TABLE_MIN(sy_engine_api, decode));
    plugin.engine_state =
        lookup_interface(entry, SY_ENGINE_STATE_INTERFACE_ID, SY_TABLE_MIN(sy_engine_state_api, state_load_chunk));
    plugin.engine_sampling =
        lookup_interface(entry, SY_ENGINE_SAMPLING_INTERFACE_ID, SY_TABLE_MIN(sy_engine_sampling_api, decode_sample));
    plugin.engine_resources =
        lookup_interface(entry, SY_ENGINE_RESOURCES_INTERFACE_ID, SY_TABLE_MIN(sy_engine_resources_api, estimate));
    plugin.engine_embed =
        lookup_interface(entry, SY_ENGINE_EMBED_INTERFACE_ID, SY_TABLE_MIN(sy_engine_embed_api, tokenize_pair));
    plugin.drafter = lookup_interface(entry, SY_DRAFTER_INTERFACE_ID, SY_TABLE_MIN(sy_drafter_api, observe));
    plugin.runtime =
        lookup_interface(entry, SY_PLUGIN_RUNTIME_INTERFACE_ID, SY_TABLE_MIN(sy_plugin_runtime_api, describe));
    if (plugin.engine == NULL && plugin.drafter == NULL) {
        if (entry->deinit) entry->deinit();
        free(plugin.path);
        sy_plugin_host_free(lent);
        refuse(reg, path, "offers neither %s nor %s (or its table is too small)", SY_ENGINE_INTERFACE_ID,
               SY_DRAFTER_INTERFACE_ID);
        dlclose(handle);
        return;
    }
    /* A 1.1 plugin cannot know the id. A malformed schema refuses the plugin: the host would misread its keys. */
    if (entry->abi_minor >= 2) {
        char why[320];
        plugin.options = entry->get_interface(SY_PLUGIN_OPTIONS_INTERFACE_ID);
        if (plugin.options != NULL && sy_option_schema_check(plugin.options, why, sizeof why) != 0) {
            if (entry->deinit) entry->deinit();
            free(plugin.path);
            sy_plugin_host_free(lent);
            refuse(reg, path, "%s: %s", SY_PLUGIN_OPTIONS_INTERFACE_ID, why);
            dlclose(handle);
            return;
        }
    }
    size_t n = atomic_load_explicit(&reg->n_plugins, memory_order_relaxed); /* the only writer */
    if (reg->plugins == NULL) reg->plugins = calloc(SY_PLUGIN_MAX, sizeof *reg->plugins);
    if (reg->plugins == NULL || n == SY_PLUGIN_MAX) {
        if (entry->deinit) entry->deinit();
        free(plugin.path);
        sy_plugin_host_free(lent);
        if (reg->plugins != NULL) refuse(reg, path, "more than %d plugins", SY_PLUGIN_MAX);
        dlclose(handle);
        return;
    }
    reg->plugins[n] = plugin;
    atomic_store_explicit(&reg->n_plugins, n + 1, memory_order_release); /* readers see the entry whole */
}

/* Whether path was loaded or refused already. */
static bool tried(const sy_plugin_registry *reg, const char *path) {
    size_t n = atomic_load_explicit(&reg->n_plugins, memory_order_acquire);
    for (size_t i = 0; i < n; i++)
        if (strcmp(reg->plugins[i].path, path) == 0) return true;
    for (size_t i = 0; i < reg->n_refused; i++)
        if (strcmp(reg->refused[i].path, path) == 0) return true;
    return false;
}

static int compare_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Tries the directory's files in name order that were not tried yet, at most `limit` of them; returns how many it
 * tried, or -1 with `err` set when the directory cannot be read. */
static long load_untried(sy_plugin_registry *reg, const char *dir, size_t limit, char *err, size_t err_size) {
    DIR *d = opendir(dir);
    if (d == NULL) {
        snprintf(err, err_size, "cannot read plugin directory %s: %s", dir, strerror(errno));
        return -1;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        size_t len = strlen(de->d_name);
        if (len < 4 || strcmp(de->d_name + len - 3, ".so") != 0 || de->d_name[0] == '.') continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            char **grown = realloc(names, cap * sizeof *grown);
            if (grown == NULL) break;
            names = grown;
        }
        names[n++] = sy_strdup(de->d_name);
    }
    closedir(d);
    if (n > 1) qsort(names, n, sizeof *names, compare_names);
    long done = 0;
    for (size_t i = 0; i < n; i++) {
        char *path = sy_path_join(dir, names[i]);
        struct stat st;
        if (path == NULL || tried(reg, path) || (size_t)done == limit) {
            /* loaded or refused before (a lazy registry's second look), or past the limit */
        } else if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) {
            refuse(reg, path, "not a regular file");
            done++;
        } else {
            load_one(reg, path);
            done++;
        }
        free(path);
        free(names[i]);
    }
    free(names);
    return done;
}

int sy_plugin_registry_load_dir(sy_plugin_registry *reg, const char *dir, char *err, size_t err_size) {
    return load_untried(reg, dir, SIZE_MAX, err, err_size) < 0 ? -1 : 0;
}

int sy_plugin_registry_load_file(sy_plugin_registry *reg, const char *dir, const char *file) {
    if (strchr(file, '/') != NULL) return -1;
    char *path = sy_path_join(dir, file);
    struct stat st;
    int rc = -1;
    if (path != NULL && stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
        if (!tried(reg, path)) load_one(reg, path);
        rc = 0;
    }
    free(path);
    return rc;
}

const sy_plugin *sy_plugin_registry_find(const sy_plugin_registry *reg, const char *name) {
    size_t n = atomic_load_explicit(&reg->n_plugins, memory_order_acquire);
    for (size_t i = 0; i < n; i++) {
        if (strcmp(reg->plugins[i].entry->name, name) == 0) return &reg->plugins[i];
    }
    return NULL;
}

struct sy_plugin_lazy {
    char *dir;
    pthread_mutex_t lock; /* held while loading */
};

int sy_plugin_registry_open_lazy(sy_plugin_registry *reg, const char *dir, char *err, size_t err_size) {
    DIR *d = opendir(dir);
    if (d == NULL) {
        snprintf(err, err_size, "cannot read plugin directory %s: %s", dir, strerror(errno));
        return -1;
    }
    closedir(d);
    struct sy_plugin_lazy *lazy = calloc(1, sizeof *lazy);
    if (lazy == NULL || (lazy->dir = sy_strdup(dir)) == NULL || pthread_mutex_init(&lazy->lock, NULL) != 0) {
        if (lazy != NULL) free(lazy->dir);
        free(lazy);
        snprintf(err, err_size, "out of memory");
        return -1;
    }
    reg->lazy = lazy;
    return 0;
}

bool sy_plugin_registry_is_lazy(const sy_plugin_registry *reg) { return reg->lazy != NULL; }

/* Logs the refusals from index `from` on (a lazy load has no caller that lists them). */
static void log_refusals(const sy_plugin_registry *reg, size_t from) {
    for (size_t i = from; i < reg->n_refused; i++)
        sy_log(SY_LOG_WARN, "plugin %s refused: %s", reg->refused[i].path, reg->refused[i].reason);
}

/* With the lock held: every file of the directory not tried yet. */
static void load_rest_locked(sy_plugin_registry *reg) {
    char err[512];
    if (sy_plugin_registry_load_dir(reg, reg->lazy->dir, err, sizeof err) != 0) sy_log(SY_LOG_WARN, "%s", err);
}

/* The registry a lazy load grows: registries are never defined const, so the cast is sound (see the header). */
static sy_plugin_registry *growable(const sy_plugin_registry *reg) { return (sy_plugin_registry *)(uintptr_t)reg; }

const sy_plugin *sy_plugin_registry_need(const sy_plugin_registry *creg, const char *name) {
    const sy_plugin *p = sy_plugin_registry_find(creg, name);
    if (p != NULL || creg->lazy == NULL || name == NULL) return p;
    sy_plugin_registry *reg = growable(creg);
    pthread_mutex_lock(&reg->lazy->lock);
    size_t refused_before = reg->n_refused;
    p = sy_plugin_registry_find(reg, name); /* another thread may have loaded it meanwhile */
    if (p == NULL && valid_plugin_name(name)) {
        char file[80];
        snprintf(file, sizeof file, "%s.so", name);
        sy_plugin_registry_load_file(reg, reg->lazy->dir, file);
        p = sy_plugin_registry_find(reg, name);
    }
    if (p == NULL) { /* not a file of that name, or another plugin inside it */
        load_rest_locked(reg);
        p = sy_plugin_registry_find(reg, name);
    }
    log_refusals(reg, refused_before);
    pthread_mutex_unlock(&reg->lazy->lock);
    return p;
}

bool sy_plugin_registry_load_next(const sy_plugin_registry *creg) {
    if (creg->lazy == NULL) return false;
    sy_plugin_registry *reg = growable(creg);
    pthread_mutex_lock(&reg->lazy->lock);
    size_t refused_before = reg->n_refused;
    char err[512];
    long tried_now = load_untried(reg, reg->lazy->dir, 1, err, sizeof err);
    if (tried_now < 0) sy_log(SY_LOG_WARN, "%s", err);
    log_refusals(reg, refused_before);
    pthread_mutex_unlock(&reg->lazy->lock);
    return tried_now > 0;
}

void sy_plugin_registry_need_all(const sy_plugin_registry *creg) {
    if (creg->lazy == NULL) return;
    sy_plugin_registry *reg = growable(creg);
    pthread_mutex_lock(&reg->lazy->lock);
    size_t refused_before = reg->n_refused;
    load_rest_locked(reg);
    log_refusals(reg, refused_before);
    pthread_mutex_unlock(&reg->lazy->lock);
}

void sy_plugin_registry_close(sy_plugin_registry *reg) {
    for (size_t i = reg->n_plugins; i-- > 0;) {
        sy_plugin *p = &reg->plugins[i];
        if (p->entry->deinit) p->entry->deinit();
        /* Sanitizer builds keep the code mapped so leak reports can still symbolize plugin frames. */
        if (getenv("SY_KEEP_PLUGINS_MAPPED") == NULL) dlclose(p->handle);
        free(p->path);
        sy_plugin_host_free(p->lent);
    }
    sy_host_context_free(reg->host);
    for (size_t i = 0; i < reg->n_refused; i++) {
        free(reg->refused[i].path);
        free(reg->refused[i].reason);
    }
    free(reg->plugins);
    free(reg->refused);
    if (reg->lazy != NULL) {
        pthread_mutex_destroy(&reg->lazy->lock);
        free(reg->lazy->dir);
        free(reg->lazy);
    }
    memset(reg, 0, sizeof *reg);
}

const char *sy_default_plugin_dir(char *buf, size_t size) {
    char exe[PATH_MAX];
    if (sy_exe_dir(exe, sizeof exe) == NULL) return NULL;
    static const char installed[] = "../" SY_INSTALL_PLUGINDIR; /* <prefix>/bin -> <prefix>/lib/... */
    const char *candidates[] = {"../plugins", installed, "plugins"};
    for (size_t i = 0; i < sizeof candidates / sizeof *candidates; i++) {
        snprintf(buf, size, "%s/%s", exe, candidates[i]);
        struct stat st;
        if (stat(buf, &st) == 0 && S_ISDIR(st.st_mode)) {
            char real[PATH_MAX];
            if (realpath(buf, real) != NULL && strlen(real) < size) strcpy(buf, real);
            return buf;
        }
    }
    return NULL;
}
