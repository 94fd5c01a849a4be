/*
 * Fuzz target: the config reader (host/config.c) on arbitrary bytes.
 *
 * Beyond "no crash, no leak, no undefined behaviour" it checks the reader's promises: every diagnostic names
 * the file, the reader never falls out of step with inih, and a config without errors is complete and
 * consistent (every model has its plugin, path and group; every name and alias finds its model; every draft
 * model exists; every group's members point back to it).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"

#define CHECK(cond)                                                                                      \
    do {                                                                                                 \
        if (!(cond)) {                                                                                   \
            fprintf(stderr, "fuzz_config: %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);       \
            abort();                                                                                     \
        }                                                                                                \
    } while (0)

/* A schema with every type, so the engine-key check runs on fuzzed keys and values too; a model of plugin
 * "legacy" stands for one that declares nothing. */
static const sy_option_spec fuzz_specs[] = {
    {sizeof(sy_option_spec), "threads", SY_OPTION_UINT, "", "h", 1, 1024, NULL},
    {sizeof(sy_option_spec), "keep_kv_cache", SY_OPTION_BOOL, "false", "h", 0, 0, NULL},
    {sizeof(sy_option_spec), "scale", SY_OPTION_NUMBER, "1", "h", -2, 2, NULL},
    {sizeof(sy_option_spec), "backend", SY_OPTION_STRING, "core", "h", 0, 0, NULL},
    {sizeof(sy_option_spec), "synthetic", SY_OPTION_PATH, "", "h", 0, 0, NULL},
    {sizeof(sy_option_spec), "kv_cache_dir", SY_OPTION_PATH_LIST, "", "h", 0, 0, NULL},
};

static void fuzz_schema(void *user, const sy_config_model *m, sy_config_option_schema *out) {
    (void)user;
    if (m->plugin == NULL) return;
    if (strcmp(m->plugin, "legacy") == 0) {
        snprintf(out->unchecked, sizeof out->unchecked, "plugin legacy declares no options");
        return;
    }
    snprintf(out->asked, sizeof out->asked, "plugin %.64s", m->plugin);
    for (size_t i = 0; i < sizeof fuzz_specs / sizeof fuzz_specs[0]; i++) out->specs[out->n_specs++] = &fuzz_specs[i];
}

static void check_messages(char **list, size_t n) {
    CHECK(n <= SY_CONFIG_MAX_DIAGNOSTICS);
    for (size_t i = 0; i < n; i++) {
        CHECK(strncmp(list[i], "fuzz.ini:", 9) == 0);
        /* After "fuzz.ini:LINE: " no message of the reader starts so, except its own out-of-step report (user
         * text is echoed only further on, so it cannot forge one). */
        const char *p = list[i] + 9;
        while (*p >= '0' && *p <= '9') p++;
        if (*p == ':') p++;
        if (*p == ' ') p++;
        CHECK(strncmp(p, "internal error", 14) != 0);
    }
}

static bool list_has(const sy_config_list *list, const char *item) {
    for (size_t i = 0; i < list->count; i++)
        if (strcmp(list->items[i], item) == 0) return true;
    return false;
}

static void check_consistent(const sy_config *cfg) {
    CHECK(cfg->host.listen != NULL);
    CHECK(cfg->host.http_threads >= 1 && cfg->host.http_threads <= 256);
    size_t placed = 0;
    for (size_t i = 0; i < cfg->n_models; i++) {
        const sy_config_model *m = &cfg->models[i];
        CHECK(m->name != NULL && m->group != NULL);
        if (m->cmd != NULL) { /* a process model: expanded, with its defaults */
            CHECK(m->plugin == NULL && m->path == NULL && m->proxy != NULL && m->check_endpoint != NULL);
            CHECK(strstr(m->cmd, "${") == NULL || strstr(m->cmd, "${PID}") == NULL);
        } else if (m->peer == NULL) {
            CHECK(m->plugin != NULL && m->path != NULL);
            CHECK(m->path[0] == '/'); /* the base folder and HOME are absolute */
        }
        CHECK(sy_config_find_model(cfg, m->name) == m);
        for (size_t j = 0; j < m->aliases.count; j++) CHECK(sy_config_find_model(cfg, m->aliases.items[j]) == m);
        CHECK(m->parallel >= 1 && m->parallel <= 256);
        CHECK(m->draft_min <= m->draft_max);
        if (m->draft == SY_CONFIG_DRAFT_MODEL) {
            const sy_config_model *d = sy_config_find_model(cfg, m->draft_model);
            CHECK(d != NULL && d != m && strcmp(d->name, m->draft_model) == 0);
        } else {
            CHECK(m->draft_model == NULL);
        }
        CHECK(m->n_options <= SY_CONFIG_MAX_OPTIONS);
        for (size_t j = 0; j < m->n_options; j++) {
            CHECK(m->options[j].key != NULL && m->options[j].value != NULL);
            CHECK(sy_config_model_option(m, m->options[j].key) == m->options[j].value); /* keys are unique */
        }
        const sy_config_group *g = sy_config_find_group(cfg, m->group);
        CHECK(g != NULL && list_has(&g->members, m->name));
    }
    for (size_t i = 0; i < cfg->n_groups; i++) {
        const sy_config_group *g = &cfg->groups[i];
        CHECK(sy_config_find_group(cfg, g->name) == g);
        CHECK(g->implicit == (g->line == 0));
        for (size_t j = 0; j < g->members.count; j++) {
            const sy_config_model *m = sy_config_find_model(cfg, g->members.items[j]);
            CHECK(m != NULL && strcmp(m->group, g->name) == 0);
        }
        placed += g->members.count;
    }
    CHECK(placed == cfg->n_models); /* each model in exactly one group */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static FILE *sink;
    if (sink == NULL) {
        setenv("HOME", "/home/fuzz", 1); /* '~' expands the same way on every machine */
        sink = fopen("/dev/null", "w");
    }
    sy_config *cfg = sy_config_load_string((const char *)data, size, "fuzz.ini", "/base");
    CHECK(cfg != NULL);
    sy_config_check_options(cfg, fuzz_schema, NULL);
    CHECK(!cfg->options_unchecked);
    check_messages(cfg->errors, cfg->n_errors);
    check_messages(cfg->warnings, cfg->n_warnings);
    if (sy_config_ok(cfg)) check_consistent(cfg);
    if (sink != NULL) sy_config_print_diagnostics(cfg, sink);
    sy_config_free(cfg);
    return 0;
}
