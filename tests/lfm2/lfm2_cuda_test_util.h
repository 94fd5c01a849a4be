/* Shared by the lfm2-cuda tests: dlopen build/plugins/lfm2-cuda.so with a small host API, read files and JSON. */
#ifndef LFM2_CUDA_TEST_UTIL_H
#define LFM2_CUDA_TEST_UTIL_H

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include <switchyard/engine.h>

static void *lct_handle;
static const sy_plugin_entry *lct_entry;
static const sy_engine_api *lct_api;
static int lct_cancel_countdown = -1; /* is_cancelled says yes when this reaches 0; -1: never */

static void lct_log(sy_log_level level, const char *plugin, const char *message) {
    if (level <= SY_LOG_INFO) fprintf(stderr, "[%s] %s\n", plugin, message);
}
static int lct_is_cancelled(const sy_host_call *call) {
    if (call == NULL || lct_cancel_countdown < 0) return 0;
    return lct_cancel_countdown-- == 0;
}
static const sy_host_api lct_host = {
    .struct_size = sizeof(sy_host_api),
    .abi_major = SY_ABI_VERSION_MAJOR,
    .abi_minor = SY_ABI_VERSION_MINOR,
    .host_version = "test",
    .log = lct_log,
    .is_cancelled = lct_is_cancelled,
};

/* Opens the plugin and runs its init; 0 on success, else a message on stderr. */
static inline int lct_open(void) {
    const char *build = getenv("SY_BUILD_DIR");
    char so[1024];
    snprintf(so, sizeof so, "%s/plugins/lfm2-cuda.so", build ? build : ".");
    lct_handle = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    if (lct_handle == NULL) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return -1;
    }
    lct_entry = dlsym(lct_handle, SY_PLUGIN_ENTRY_SYMBOL);
    if (lct_entry == NULL || lct_entry->abi_major != SY_ABI_VERSION_MAJOR || strcmp(lct_entry->name, "lfm2-cuda") != 0)
        return -1;
    if (lct_entry->init(&lct_host) != SY_OK) return -1;
    lct_api = lct_entry->get_interface(SY_ENGINE_INTERFACE_ID);
    return lct_api == NULL ? -1 : 0;
}

static inline void lct_close(void) {
    lct_entry->deinit();
    dlclose(lct_handle);
}

/* The exit status CTest reads as "skipped" (SKIP_RETURN_CODE). */
#define LCT_SKIP 77

/* Opens the plugin and loads `fixture` once (ctx_size 256) to see that a CUDA device takes it: 0 when it does (the
 * plugin stays open), LCT_SKIP when there is no device (the plugin is closed again, a line says why), 1 on any
 * other failure (a line says which). */
static inline int lct_open_on_device(const char *fixture) {
    if (lct_open() != 0) return 1;
    sy_model *probe = NULL;
    sy_option ctx = {"ctx_size", "256"};
    sy_status st = lct_api->load(fixture, &ctx, 1, &probe);
    if (st == SY_ERR_NO_DEVICE) {
        printf("skipped: %s\n", lct_api->error_message());
        lct_close();
        return LCT_SKIP;
    }
    if (st != SY_OK) {
        printf("load failed: %s\n", lct_api->error_message());
        return 1;
    }
    lct_api->unload(probe);
    return 0;
}

/* SY_SOURCE_DIR/rel */
static inline const char *lct_source_path(const char *rel) {
    static char path[4][1024];
    static int turn;
    const char *src = getenv("SY_SOURCE_DIR");
    turn = (turn + 1) % 4;
    snprintf(path[turn], sizeof path[turn], "%s/%s", src ? src : ".", rel);
    return path[turn];
}

static inline cJSON *lct_read_json(const char *path) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    size_t got = buf ? fread(buf, 1, (size_t)n, f) : 0;
    fclose(f);
    cJSON *j = got == (size_t)n ? cJSON_ParseWithLength(buf, (size_t)n) : NULL;
    free(buf);
    return j;
}

#endif
