/*
 * The host's plugin loader against the fixtures of tests/plugins/CMakeLists.txt: each broken plugin is refused
 * with a reason that names the problem, the rest keep loading, and a plugin built for the older minor 1.0 loads
 * with its shorter tables. Then the real build/plugins folder: test-engine loads with all its interfaces. Last, lazy
 * registries (serve's): a plugin loads when first named, by its file name first, and threads may look it up while
 * others load.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <pthread.h>

#include <cmocka.h>

#include "plugins/loaded_model.h"
#include "plugins/plugin_loader.h"

static const char *build_dir(void) {
    const char *b = getenv("SY_BUILD_DIR");
    return b ? b : "build";
}

static const char *base_name(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

static const sy_refused_plugin *refused_file(const sy_plugin_registry *reg, const char *file) {
    for (size_t i = 0; i < reg->n_refused; i++)
        if (strcmp(base_name(reg->refused[i].path), file) == 0) return &reg->refused[i];
    return NULL;
}

static void expect_refused(const sy_plugin_registry *reg, const char *file, const char *const *reasons) {
    const sy_refused_plugin *r = refused_file(reg, file);
    if (r == NULL) fail_msg("%s was not refused", file);
    assert_non_null(r->reason);
    assert_null(strchr(r->reason, '\n')); /* one line */
    for (const char *const *want = reasons; *want; want++)
        if (strstr(r->reason, *want) != NULL) return;
    fail_msg("%s refused for \"%s\", which names none of the expected reasons (first: \"%s\")", file, r->reason,
             reasons[0]);
}

static void load_fixtures(sy_plugin_registry *reg) {
    char dir[4096], err[512] = "";
    snprintf(dir, sizeof dir, "%s/tests/plugin-fixtures", build_dir());
    if (sy_plugin_registry_load_dir(reg, dir, err, sizeof err) != 0) fail_msg("load_dir %s: %s", dir, err);
}

static void each_broken_plugin_is_refused_with_its_reason(void **state) {
    (void)state;
    sy_plugin_registry reg = {0};
    load_fixtures(&reg);

    expect_refused(&reg, "not-elf.so",
                   (const char *const[]){"not a shared object", "shared object", "ELF", "too short", NULL});
    expect_refused(&reg, "no-entry.so", (const char *const[]){"no " SY_PLUGIN_ENTRY_SYMBOL " symbol", NULL});
    expect_refused(&reg, "abi-major-2.so", (const char *const[]){"ABI major 2", NULL});
    expect_refused(&reg, "abi-minor-newer.so", (const char *const[]){"minor", NULL});
    expect_refused(&reg, "entry-too-small.so", (const char *const[]){"struct_size", NULL});
    expect_refused(&reg, "dup-b.so", (const char *const[]){"duplicate plugin name", NULL});
    expect_refused(&reg, "init-fails.so", (const char *const[]){"init failed", NULL});
    expect_refused(&reg, "bad-options.so",
                   (const char *const[]){SY_PLUGIN_OPTIONS_INTERFACE_ID ": option 1 (depth): declared twice", NULL});
    assert_int_equal(reg.n_refused, 8);

    /* Loaded: the first of the duplicates (files load in name order), the 1.0 and the 1.1 plugin. */
    assert_int_equal(reg.n_plugins, 3);
    assert_null(refused_file(&reg, "dup-a.so"));
    assert_null(refused_file(&reg, "old-minor.so"));
    const sy_plugin *dup = sy_plugin_registry_find(&reg, "fixture-dup");
    assert_non_null(dup);
    assert_string_equal(base_name(dup->path), "dup-a.so");
    for (const char *name = "fixture-major\0fixture-minor\0fixture-small\0fixture-init\0"; *name;
         name += strlen(name) + 1)
        assert_null(sy_plugin_registry_find(&reg, name));
    sy_plugin_registry_close(&reg);
    assert_int_equal(reg.n_plugins, 0);
    assert_int_equal(reg.n_refused, 0);
}

static void older_minor_loads_with_its_shorter_tables(void **state) {
    (void)state;
    sy_plugin_registry reg = {0};
    load_fixtures(&reg);
    const sy_plugin *old = sy_plugin_registry_find(&reg, "fixture-old-minor");
    assert_non_null(old);
    assert_int_equal(old->entry->abi_major, SY_ABI_VERSION_MAJOR);
    assert_int_equal(old->entry->abi_minor, 0);
    assert_non_null(old->engine);
    /* The 1.0 table ends with decode: memory_usage (1.1) lies outside it and must read as absent. */
    assert_int_equal(old->engine->struct_size, offsetof(sy_engine_api, decode) + sizeof(void *));
    assert_false(SY_HAS_FIELD(old->engine, sy_engine_api, memory_usage));
    assert_true(SY_HAS_FIELD(old->engine, sy_engine_api, decode));
    assert_null(old->engine_state);
    assert_null(old->engine_sampling);
    assert_null(old->drafter);
    /* Its calls work through the table the host sees. */
    assert_int_equal(old->engine->probe("/nonexistent"), SY_ERR_UNSUPPORTED);
    assert_non_null(old->engine->error_message());
    sy_plugin_registry_close(&reg);
}

static void unreadable_directory_is_an_error(void **state) {
    (void)state;
    sy_plugin_registry reg = {0};
    char err[512] = "";
    assert_int_equal(sy_plugin_registry_load_dir(&reg, "/nonexistent/plugins", err, sizeof err), -1);
    assert_non_null(strstr(err, "/nonexistent/plugins"));
    sy_plugin_registry_close(&reg);
}

static void host_api_is_complete(void **state) {
    (void)state;
    sy_host_context *ctx = sy_host_context_create();
    sy_plugin_host *lent = sy_plugin_host_create(ctx, "/plugins/x.so");
    sy_plugin_host_set_name(lent, "x");
    const sy_host_api *host = sy_plugin_host_api(lent);
    assert_non_null(host);
    assert_int_equal(host->struct_size, sizeof(sy_host_api));
    assert_int_equal(host->abi_major, SY_ABI_VERSION_MAJOR);
    assert_int_equal(host->abi_minor, SY_ABI_VERSION_MINOR);
    assert_non_null(host->host_version);
    assert_non_null(host->log);
    assert_non_null(host->is_cancelled);
    assert_int_equal(host->is_cancelled(NULL), 0);
    /* 1.2: the plugin's own context and path, and context-taking callbacks. */
    assert_ptr_not_equal(host->context, NULL);
    assert_string_equal(host->plugin_path, "/plugins/x.so");
    assert_non_null(host->log_ctx);
    assert_non_null(host->acquire_engine_ctx);
    assert_non_null(host->release_engine_ctx);
    assert_int_equal(host->is_cancelled_ctx(host->context, NULL), 0);
    sy_host_call call;
    sy_host_call_init(&call);
    assert_int_equal(host->is_cancelled_ctx(host->context, &call), 0);
    sy_host_call_cancel(&call);
    assert_int_not_equal(host->is_cancelled_ctx(host->context, &call), 0);
    sy_plugin_host_free(lent);
    sy_host_context_free(ctx);
}

/* Two host contexts in one process: a name published in one is not seen through the other's plugins, while the
 * context-less 1.0 callback still finds it (it searches every live context). */
static void host_contexts_are_separate(void **state) {
    (void)state;
    sy_host_context *a = sy_host_context_create(), *b = sy_host_context_create();
    sy_plugin_host *pa = sy_plugin_host_create(a, "a.so"), *pb = sy_plugin_host_create(b, "b.so");
    const sy_host_api *ha = sy_plugin_host_api(pa), *hb = sy_plugin_host_api(pb);
    static const sy_engine_api fake_engine = {.struct_size = sizeof fake_engine};
    sy_model *fake_model = (sy_model *)&fake_engine;
    assert_int_equal(sy_host_publish_model(a, "only-in-a", &fake_engine, fake_model), 0);
    assert_int_equal(sy_host_publish_model(a, "only-in-a", &fake_engine, fake_model), -1); /* taken */
    assert_int_equal(sy_host_publish_model(b, "only-in-a", &fake_engine, fake_model), 0);  /* b is apart */
    assert_int_equal(sy_host_unpublish_model(b, "only-in-a"), 0);
    const sy_engine_api *e = NULL;
    sy_model *m = NULL;
    sy_engine_ref *ref = NULL;
    assert_int_equal(hb->acquire_engine_ctx(hb->context, "only-in-a", &e, &m, &ref), SY_ERR_UNSUPPORTED);
    assert_int_equal(ha->acquire_engine_ctx(ha->context, "only-in-a", &e, &m, &ref), SY_OK);
    assert_ptr_equal(e, &fake_engine);
    assert_ptr_equal(m, fake_model);
    assert_int_equal(sy_host_unpublish_model(a, "only-in-a"), -1); /* borrowed */
    ha->release_engine_ctx(ha->context, ref);
    assert_int_equal(hb->acquire_engine("only-in-a", &e, &m, &ref), SY_OK); /* 1.0: any live context */
    hb->release_engine(ref);
    assert_int_equal(sy_host_unpublish_model(a, "only-in-a"), 0);
    assert_int_equal(hb->acquire_engine("only-in-a", &e, &m, &ref), SY_ERR_UNSUPPORTED);
    sy_plugin_host_free(pa);
    sy_plugin_host_free(pb);
    sy_host_context_free(a);
    sy_host_context_free(b);
}

static void bundled_test_engine_loads(void **state) {
    (void)state;
    sy_plugin_registry reg = {0};
    char dir[4096], err[512] = "";
    snprintf(dir, sizeof dir, "%s/plugins", build_dir());
    if (sy_plugin_registry_load_dir(&reg, dir, err, sizeof err) != 0) fail_msg("load_dir %s: %s", dir, err);
    const sy_refused_plugin *r = refused_file(&reg, "test-engine.so");
    if (r != NULL) fail_msg("test-engine.so refused: %s", r->reason);
    const sy_plugin *te = sy_plugin_registry_find(&reg, "test-engine");
    assert_non_null(te);
    assert_string_equal(base_name(te->path), "test-engine.so");
    assert_int_equal(te->entry->abi_major, SY_ABI_VERSION_MAJOR);
    assert_int_equal(te->entry->abi_minor, SY_ABI_VERSION_MINOR);
    assert_non_null(te->engine);
    assert_true(SY_HAS_FIELD(te->engine, sy_engine_api, memory_usage));
    assert_non_null(te->engine_state);
    assert_non_null(te->engine_sampling);
    assert_null(te->drafter);
    assert_int_equal(te->engine->probe("/nonexistent"), SY_ERR_UNSUPPORTED);
    sy_plugin_registry_close(&reg);
}

/* A new folder (dir, 64 bytes) of symbolic links: links[i][0] is the link's name, links[i][1] its target under the
 * build tree; NULL ends the list. */
static void make_link_dir(char *dir, const char *const (*links)[2]) {
    snprintf(dir, 64, "/tmp/sy-plugins-XXXXXX");
    if (mkdtemp(dir) == NULL) fail_msg("mkdtemp failed");
    for (; (*links)[0] != NULL; links++) {
        char target[4096], link[4096];
        snprintf(target, sizeof target, "%s/%s", build_dir(), (*links)[1]);
        snprintf(link, sizeof link, "%s/%s", dir, (*links)[0]);
        if (symlink(target, link) != 0) fail_msg("symlink %s", link);
    }
}

/* Removes a folder make_link_dir made, with its links. */
static void remove_link_dir(const char *dir, const char *const (*links)[2]) {
    for (; (*links)[0] != NULL; links++) {
        char link[4096];
        snprintf(link, sizeof link, "%s/%s", dir, (*links)[0]);
        unlink(link);
    }
    if (rmdir(dir) != 0) fail_msg("rmdir %s", dir);
}

/* test-engine.so, two fixture plugins under other file names, and a file that is no plugin. */
static const char *const LAZY_LINKS[][2] = {{"test-engine.so", "plugins/test-engine.so"},
                                            {"dup-a.so", "tests/plugin-fixtures/dup-a.so"},
                                            {"old-minor.so", "tests/plugin-fixtures/old-minor.so"},
                                            {"not-elf.so", "tests/plugin-fixtures/not-elf.so"},
                                            {NULL, NULL}};

/* The LAZY_LINKS folder, opened lazily into reg. */
static void open_lazy_dir(char *dir, sy_plugin_registry *reg) {
    make_link_dir(dir, LAZY_LINKS);
    char err[512] = "";
    memset(reg, 0, sizeof *reg);
    if (sy_plugin_registry_open_lazy(reg, dir, err, sizeof err) != 0) fail_msg("open_lazy %s: %s", dir, err);
}

static void lazy_registry_loads_a_plugin_when_first_named(void **state) {
    (void)state;
    char dir[64], err[512] = "";
    sy_plugin_registry reg;
    open_lazy_dir(dir, &reg);
    assert_true(sy_plugin_registry_is_lazy(&reg));
    assert_int_equal(reg.n_plugins, 0); /* nothing up front */

    /* Named after its file: that file alone loads. */
    const sy_plugin *te = sy_plugin_registry_need(&reg, "test-engine");
    assert_non_null(te);
    assert_string_equal(base_name(te->path), "test-engine.so");
    assert_int_equal(reg.n_plugins, 1);
    assert_int_equal(reg.n_refused, 0);
    assert_ptr_equal(sy_plugin_registry_need(&reg, "test-engine"), te);

    /* In a file of another name: the rest of the folder loads, the broken file is refused, nothing twice. */
    const sy_plugin *dup = sy_plugin_registry_need(&reg, "fixture-dup");
    assert_non_null(dup);
    assert_string_equal(base_name(dup->path), "dup-a.so");
    assert_int_equal(reg.n_plugins, 3);
    assert_int_equal(reg.n_refused, 1);
    assert_non_null(refused_file(&reg, "not-elf.so"));
    assert_ptr_equal(sy_plugin_registry_find(&reg, "test-engine"), te); /* entries do not move */

    /* Nothing of that name: every file was tried already, so nothing changes. */
    assert_null(sy_plugin_registry_need(&reg, "no-such-plugin"));
    sy_plugin_registry_need_all(&reg);
    assert_int_equal(reg.n_plugins, 3);
    assert_int_equal(reg.n_refused, 1);
    assert_non_null(sy_plugin_registry_find(&reg, "fixture-old-minor"));
    sy_plugin_registry_close(&reg);
    assert_false(sy_plugin_registry_is_lazy(&reg));

    /* A folder that cannot be read is an error at once, naming it. */
    assert_int_equal(sy_plugin_registry_open_lazy(&reg, "/nonexistent/plugins", err, sizeof err), -1);
    assert_non_null(strstr(err, "/nonexistent/plugins"));
    /* An eager registry only looks. */
    sy_plugin_registry eager = {0};
    assert_null(sy_plugin_registry_need(&eager, "test-engine"));
    sy_plugin_registry_need_all(&eager);
    assert_int_equal(eager.n_plugins, 0);
    remove_link_dir(dir, LAZY_LINKS);
}

typedef struct lazy_worker {
    const sy_plugin_registry *reg;
    const char *name; /* NULL: need_all */
    const sy_plugin *found[50];
} lazy_worker;

static void *lazy_worker_main(void *arg) {
    lazy_worker *w = arg;
    for (int i = 0; i < 50; i++) {
        if (w->name == NULL) {
            sy_plugin_registry_need_all(w->reg);
            w->found[i] = NULL;
        } else {
            w->found[i] = sy_plugin_registry_need(w->reg, w->name);
        }
    }
    return NULL;
}

static void lazy_registry_serves_threads_while_loading(void **state) {
    (void)state;
    char dir[64];
    sy_plugin_registry reg;
    open_lazy_dir(dir, &reg);
    const char *names[] = {"test-engine", "fixture-dup", "fixture-old-minor", NULL};
    lazy_worker workers[4];
    pthread_t threads[4];
    for (int i = 0; i < 4; i++) {
        workers[i].reg = &reg;
        workers[i].name = names[i];
        assert_int_equal(pthread_create(&threads[i], NULL, lazy_worker_main, &workers[i]), 0);
    }
    for (int i = 0; i < 4; i++) assert_int_equal(pthread_join(threads[i], NULL), 0);
    /* every file loaded or refused exactly once, and every look found the one entry */
    assert_int_equal(reg.n_plugins, 3);
    assert_int_equal(reg.n_refused, 1);
    for (int i = 0; i < 3; i++) {
        const sy_plugin *p = sy_plugin_registry_find(&reg, names[i]);
        assert_non_null(p);
        for (int k = 0; k < 50; k++) assert_ptr_equal(workers[i].found[k], p);
    }
    sy_plugin_registry_close(&reg);
    remove_link_dir(dir, LAZY_LINKS);
}

/* A model given without a plugin: a lazy registry loads the folder's files in name order and stops at the first
 * engine that accepts it, so the ones after it are never loaded. */
static void lazy_probe_stops_at_the_first_engine_that_accepts(void **state) {
    (void)state;
    static const char *const links[][2] = {{"a-test-engine.so", "plugins/test-engine.so"},
                                           {"b-dup.so", "tests/plugin-fixtures/dup-a.so"},
                                           {"c-not-elf.so", "tests/plugin-fixtures/not-elf.so"},
                                           {NULL, NULL}};
    char dir[64], err[1024] = "", model[4096];
    make_link_dir(dir, links);
    const char *src = getenv("SY_SOURCE_DIR");
    snprintf(model, sizeof model, "%s/tests/fixtures/test-engine/alpha.model", src ? src : ".");
    sy_plugin_registry reg = {0};
    assert_int_equal(sy_plugin_registry_open_lazy(&reg, dir, err, sizeof err), 0);
    sy_loaded_model lm;
    if (sy_loaded_model_open(&reg, NULL, model, NULL, 0, &lm, err, sizeof err) != 0) fail_msg("open: %s", err);
    assert_int_equal(reg.n_plugins, 1); /* a-test-engine.so accepted: the others were not loaded */
    assert_int_equal(reg.n_refused, 0);
    sy_loaded_model_close(&lm);
    /* nothing accepts this file: every file is tried, and the message names each engine's refusal */
    assert_int_not_equal(sy_loaded_model_open(&reg, NULL, dir, NULL, 0, &lm, err, sizeof err), 0);
    assert_int_equal(reg.n_plugins, 2);
    assert_int_equal(reg.n_refused, 1);
    assert_non_null(strstr(err, "test-engine"));
    assert_non_null(strstr(err, "fixture-dup"));
    sy_plugin_registry_close(&reg);
    remove_link_dir(dir, links);
}

/* Decodes a few tokens of alpha.model with the plugin of that name and returns the last logits row's first value
 * and its argmax, through the host's loaded-model layer. */
static void decode_alpha(const sy_plugin_registry *reg, const char *plugin, float *first, int32_t *best) {
    char model[4096], err[1024] = "";
    const char *src = getenv("SY_SOURCE_DIR");
    snprintf(model, sizeof model, "%s/tests/fixtures/test-engine/alpha.model", src ? src : ".");
    sy_loaded_model lm;
    if (sy_loaded_model_open(reg, plugin, model, NULL, 0, &lm, err, sizeof err) != 0) fail_msg("open: %s", err);
    sy_seq *seq = NULL;
    assert_int_equal(lm.engine->seq_create(lm.model, &seq), SY_OK);
    static const int32_t tokens[] = {1, 5, 9, 2};
    float *logits = calloc(lm.info.n_vocab, sizeof *logits);
    assert_non_null(logits);
    sy_decode_item item = {sizeof item, seq, tokens, 4, 1, logits, NULL};
    sy_decode_batch batch = {sizeof batch, 1, sizeof item, &item, NULL, NULL};
    assert_int_equal(lm.engine->decode(lm.model, &batch), SY_OK);
    assert_int_equal(lm.engine->seq_length(lm.model, seq), 4);
    *first = logits[0];
    *best = 0;
    for (uint32_t i = 1; i < lm.info.n_vocab; i++)
        if (logits[i] > logits[*best]) *best = (int32_t)i;
    free(logits);
    lm.engine->seq_free(lm.model, seq);
    sy_loaded_model_close(&lm);
}

/* A plugin built against the 1.1 headers: its state and sampling tables are shorter than this host's (1.2 appended
 * to them), and it still loads with both extensions, sees a host table it can read, and decodes exactly as the
 * same engine built against 1.2. */
static void plugin_built_for_1_1_loads_and_decodes(void **state) {
    (void)state;
    sy_plugin_registry reg = {0};
    char dir[4096], err[512] = "";
    snprintf(dir, sizeof dir, "%s/tests/plugin-fixtures/abi11", build_dir());
    if (sy_plugin_registry_load_dir(&reg, dir, err, sizeof err) != 0) fail_msg("load_dir %s: %s", dir, err);
    if (reg.n_refused > 0) fail_msg("%s refused: %s", reg.refused[0].path, reg.refused[0].reason);
    const sy_plugin *old = sy_plugin_registry_find(&reg, "test-engine-abi11");
    assert_non_null(old);
    assert_int_equal(old->entry->abi_minor, 1);
    assert_non_null(old->engine);
    assert_non_null(old->engine_state);
    assert_true(old->engine_state->struct_size < sizeof(sy_engine_state_api));
    assert_false(SY_HAS_FIELD(old->engine_state, sy_engine_state_api, state_can_read));
    assert_non_null(old->engine_sampling);
    float first_old, first_new;
    int32_t best_old, best_new;
    decode_alpha(&reg, "test-engine-abi11", &first_old, &best_old);

    sy_plugin_registry now = {0};
    snprintf(dir, sizeof dir, "%s/plugins", build_dir());
    if (sy_plugin_registry_load_dir(&now, dir, err, sizeof err) != 0) fail_msg("load_dir %s: %s", dir, err);
    decode_alpha(&now, "test-engine", &first_new, &best_new);
    assert_true(first_old == first_new);
    assert_int_equal(best_old, best_new);
    sy_plugin_registry_close(&now);
    sy_plugin_registry_close(&reg);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(plugin_built_for_1_1_loads_and_decodes),
        cmocka_unit_test(each_broken_plugin_is_refused_with_its_reason),
        cmocka_unit_test(older_minor_loads_with_its_shorter_tables),
        cmocka_unit_test(unreadable_directory_is_an_error),
        cmocka_unit_test(host_api_is_complete),
        cmocka_unit_test(host_contexts_are_separate),
        cmocka_unit_test(bundled_test_engine_loads),
        cmocka_unit_test(lazy_registry_loads_a_plugin_when_first_named),
        cmocka_unit_test(lazy_registry_serves_threads_while_loading),
        cmocka_unit_test(lazy_probe_stops_at_the_first_engine_that_accepts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
