/*
 * The model manager on the test engine: aliases, unknown models, swap and exclusive groups, ttl through tick,
 * concurrent acquires of a loading model, unload waiting for leases (also when the last lease ends inside a
 * generation's callback), the memory budget with LRU eviction, reload (add, change, remove, keep), preload and
 * load failures, keep_alive overrides of the ttl, the host prefix cache budget and the snapshot folder budget.
 *
 * Every config sets resume_path inside the test folder: the snapshots written at unload never reach $HOME.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>

#include <cmocka.h>

#include "config/config.h"
#include "manager/config_check.h"
#include "manager/model_manager.h"
#include "serve_fixture.h"
#include "persist/snapshot_store.h"
#include "base/util.h"

static serve_env env;

static int group_setup(void **state) {
    (void)state;
    if (serve_env_open(&env) != 0) return -1;
    static const char *const names[] = {"a.txt", "b.txt", "c.txt", "w.txt", "x.txt", "y.txt", "z.txt"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) free(serve_write_model(&env, names[i], NULL, 0));
    FILE *f = fopen("/dev/null", "r"); /* keep the C library's stdio initialised before threads start */
    if (f) fclose(f);
    char path[256];
    snprintf(path, sizeof path, "%s/bad.txt", env.dir);
    f = fopen(path, "w");
    if (f == NULL) return -1;
    fputs("not a model\n", f);
    fclose(f);
    return 0;
}

static int group_teardown(void **state) {
    (void)state;
    serve_env_close(&env);
    return 0;
}

/* A config from text; relative model paths resolve in the test folder. */
static sy_config *config_of(const char *text) {
    sy_config *cfg = sy_config_load_string(text, strlen(text), "test.ini", env.dir);
    sy_config_check_plugin_options(cfg, &env.reg);
    if (!sy_config_ok(cfg)) sy_config_print_diagnostics(cfg, stderr);
    assert_true(sy_config_ok(cfg));
    return cfg;
}

static sy_model_manager *manager_of(const char *text) {
    sy_config *cfg = config_of(text);
    sy_model_manager *mm = sy_model_manager_create(cfg, &env.reg);
    sy_config_free(cfg); /* the manager keeps copies */
    assert_non_null(mm);
    return mm;
}

static sy_model_lease *acquire_ok(sy_model_manager *mm, const char *name) {
    char err[1024] = "";
    int status = 0;
    sy_model_lease *lease = sy_model_manager_acquire(mm, name, err, sizeof err, &status);
    if (lease == NULL) fprintf(stderr, "acquire %s: %d %s\n", name, status, err);
    assert_non_null(lease);
    return lease;
}

static sy_model_state state_of(sy_model_manager *mm, const char *name) {
    sy_model_status st[16];
    size_t n = sy_model_manager_status(mm, st, 16);
    for (size_t i = 0; i < n && i < 16; i++)
        if (strcmp(st[i].name, name) == 0) return st[i].state;
    fail_msg("model %s not in the status", name);
    return SY_MODEL_UNLOADED;
}

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* A few greedy tokens through a lease's scheduler: the model really works. */
static void generate_through(sy_model_lease *lease, uint32_t max_tokens) {
    sy_scheduler *s = sy_model_lease_scheduler(lease);
    assert_non_null(s);
    int32_t prompt[4] = {'h', 'e', 'y', ' '};
    sy_gen_params p = serve_greedy(max_tokens);
    collector *c = collector_new();
    serve_generate(s, prompt, 4, &p, c);
    assert_int_equal(c->end_type, SY_GEN_EVENT_DONE);
    assert_int_equal(c->usage.completion_tokens, max_tokens);
    collector_delete(c);
}

/* resume_path is relative: it resolves in the test folder (config_of's base). */
#define HOST "[host]\nload_timeout = 20\nresume_path = resume\n"
#define MODEL(name, file) "[model." name "]\nplugin = test-engine\npath = " file "\n"

/* ---- names ------------------------------------------------------------------------------------------------- */

static void aliases_and_unknown_models(void **state) {
    (void)state;
    sy_model_manager *mm = manager_of(HOST MODEL("a", "a.txt") "aliases = alpha, first\n" MODEL("b", "b.txt"));
    sy_model_lease *l1 = acquire_ok(mm, "alpha");
    assert_string_equal(sy_model_lease_name(l1), "a");
    assert_int_equal(sy_model_lease_model(l1)->info.n_vocab, 264);
    assert_null(sy_model_lease_chat_template(l1));
    sy_model_lease *l2 = acquire_ok(mm, "first");
    assert_ptr_equal(sy_model_lease_model(l1), sy_model_lease_model(l2));
    generate_through(l2, 5);
    sy_model_lease_release(l1);
    sy_model_lease_release(l2);

    char err[1024];
    int status = 0;
    assert_null(sy_model_manager_acquire(mm, "zeta", err, sizeof err, &status));
    assert_int_equal(status, 404);
    assert_non_null(strstr(err, "'zeta'"));
    assert_non_null(strstr(err, "a, b"));
    assert_int_equal(sy_model_manager_unload(mm, "nope"), -1);
    assert_int_equal(sy_model_manager_unload(mm, "alpha"), 1);
    assert_int_equal(state_of(mm, "a"), SY_MODEL_UNLOADED);
    assert_int_equal(sy_model_manager_unload(mm, "a"), 0); /* nothing loaded */
    sy_model_manager_counters c;
    sy_model_manager_get_counters(mm, &c);
    assert_int_equal(c.loads, 1);
    assert_int_equal(c.unloads, 1);
    assert_int_equal(c.swaps, 0);
    sy_model_manager_destroy(mm);
}

/* ---- groups ------------------------------------------------------------------------------------------------ */

static void swap_in_group(void **state) {
    (void)state;
    /* No group sections: the implicit default group swaps. */
    sy_model_manager *mm = manager_of(HOST MODEL("a", "a.txt") MODEL("b", "b.txt"));
    sy_model_lease_release(acquire_ok(mm, "a"));
    assert_int_equal(state_of(mm, "a"), SY_MODEL_READY);
    assert_int_equal(state_of(mm, "b"), SY_MODEL_UNLOADED);
    sy_model_lease *b = acquire_ok(mm, "b");
    assert_int_equal(state_of(mm, "a"), SY_MODEL_UNLOADED);
    assert_int_equal(state_of(mm, "b"), SY_MODEL_READY);
    sy_model_manager_counters c;
    sy_model_manager_get_counters(mm, &c);
    assert_int_equal(c.loads, 2);
    assert_int_equal(c.swaps, 1);
    assert_int_equal(c.unloads, 1);
    assert_int_equal(c.load_failures, 0);
    assert_true(c.load_seconds_total >= 0);
    sy_model_lease_release(b);
    sy_model_manager_destroy(mm);
}

static void exclusive_and_persistent_groups(void **state) {
    (void)state;
    sy_model_manager *mm = manager_of(HOST MODEL("x", "x.txt") "group = ex\n" MODEL("y", "y.txt") "group = free\n"
                                          MODEL("w", "w.txt") "group = free\n" MODEL("z", "z.txt") "group = keep\n"
                                      "[group.ex]\nexclusive = true\nswap = true\n"
                                      "[group.free]\nexclusive = false\nswap = false\n"
                                      "[group.keep]\nexclusive = false\npersistent = true\n");
    sy_model_lease_release(acquire_ok(mm, "y"));
    sy_model_lease_release(acquire_ok(mm, "w"));
    sy_model_lease_release(acquire_ok(mm, "z"));
    /* A group without swap keeps its members together; a non-exclusive load leaves other groups alone. */
    assert_int_equal(state_of(mm, "y"), SY_MODEL_READY);
    assert_int_equal(state_of(mm, "w"), SY_MODEL_READY);
    assert_int_equal(state_of(mm, "z"), SY_MODEL_READY);
    /* An exclusive group's load unloads the other groups, but not the persistent one. */
    sy_model_lease_release(acquire_ok(mm, "x"));
    assert_int_equal(state_of(mm, "x"), SY_MODEL_READY);
    assert_int_equal(state_of(mm, "y"), SY_MODEL_UNLOADED);
    assert_int_equal(state_of(mm, "w"), SY_MODEL_UNLOADED);
    assert_int_equal(state_of(mm, "z"), SY_MODEL_READY);
    sy_model_manager_counters c;
    sy_model_manager_get_counters(mm, &c);
    assert_int_equal(c.swaps, 2);
    /* Loading into a non-exclusive group leaves the exclusive one loaded. */
    sy_model_lease_release(acquire_ok(mm, "y"));
    assert_int_equal(state_of(mm, "x"), SY_MODEL_READY);
    assert_int_equal(state_of(mm, "y"), SY_MODEL_READY);
    sy_model_manager_destroy(mm);
}

/* ---- ttl --------------------------------------------------------------------------------------------------- */

static void ttl_unloads_through_tick(void **state) {
    (void)state;
    sy_model_manager *mm = manager_of(HOST MODEL("a", "a.txt") "ttl = 1\n");
    sy_model_lease *lease = acquire_ok(mm, "a");
    sleep_ms(1100);
    sy_model_manager_tick(mm);
    assert_int_equal(state_of(mm, "a"), SY_MODEL_READY); /* in use: never idle */
    sy_model_lease_release(lease);
    sy_model_manager_tick(mm);
    assert_int_equal(state_of(mm, "a"), SY_MODEL_READY); /* idle only since now */
    sleep_ms(1100);
    sy_model_manager_tick(mm);
    assert_int_equal(state_of(mm, "a"), SY_MODEL_UNLOADED);
    sy_model_manager_counters c;
    sy_model_manager_get_counters(mm, &c);
    assert_int_equal(c.unloads, 1);
    assert_int_equal(c.swaps, 0);
    /* Asked for again, it loads again. */
    sy_model_lease_release(acquire_ok(mm, "a"));
    sy_model_manager_get_counters(mm, &c);
    assert_int_equal(c.loads, 2);
    sy_model_manager_destroy(mm);
}

/* ---- concurrency ------------------------------------------------------------------------------------------- */

typedef struct acquirer {
    sy_model_manager *mm;
    const char *name;
    sy_model_lease *lease;
    atomic_int done;
    int rc;
} acquirer;

static void *acquire_thread(void *arg) {
    acquirer *a = arg;
    char err[512];
    int status = 0;
    a->lease = sy_model_manager_acquire(a->mm, a->name, err, sizeof err, &status);
    atomic_store(&a->done, 1);
    return NULL;
}

static void *unload_thread(void *arg) {
    acquirer *a = arg;
    a->rc = sy_model_manager_unload(a->mm, a->name);
    atomic_store(&a->done, 1);
    return NULL;
}

#define N_THREADS 6

static void concurrent_acquires_share_one_load(void **state) {
    (void)state;
    sy_model_manager *mm = manager_of(HOST MODEL("a", "a.txt") MODEL("b", "b.txt"));
    /* While a lease on a is held, b cannot swap it out: every acquire of b waits, one of them as the loader. */
    sy_model_lease *held = acquire_ok(mm, "a");
    acquirer acq[N_THREADS];
    pthread_t th[N_THREADS];
    for (int i = 0; i < N_THREADS; i++) {
        memset(&acq[i], 0, sizeof acq[i]);
        acq[i].mm = mm;
        acq[i].name = "b";
        assert_int_equal(pthread_create(&th[i], NULL, acquire_thread, &acq[i]), 0);
    }
    for (int i = 0; i < 200 && !sy_model_manager_loading(mm); i++) sleep_ms(5);
    assert_true(sy_model_manager_loading(mm));
    sleep_ms(50);
    for (int i = 0; i < N_THREADS; i++) assert_int_equal(atomic_load(&acq[i].done), 0);
    assert_int_equal(state_of(mm, "a"), SY_MODEL_UNLOADING); /* takes no new leases */
    assert_int_equal(state_of(mm, "b"), SY_MODEL_LOADING);
    sy_model_lease_release(held);
    for (int i = 0; i < N_THREADS; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < N_THREADS; i++) {
        assert_non_null(acq[i].lease);
        assert_ptr_equal(sy_model_lease_model(acq[i].lease), sy_model_lease_model(acq[0].lease));
        assert_ptr_equal(sy_model_lease_scheduler(acq[i].lease), sy_model_lease_scheduler(acq[0].lease));
    }
    sy_model_manager_counters c;
    sy_model_manager_get_counters(mm, &c);
    assert_int_equal(c.loads, 2);
    assert_int_equal(c.swaps, 1);
    assert_false(sy_model_manager_loading(mm));
    for (int i = 0; i < N_THREADS; i++) sy_model_lease_release(acq[i].lease);
    sy_model_manager_destroy(mm);
}

static void unload_waits_for_lease(void **state) {
    (void)state;
    sy_model_manager *mm = manager_of(HOST MODEL("a", "a.txt"));
    sy_model_lease *held = acquire_ok(mm, "a");
    acquirer un = {.mm = mm, .name = "a"}, again = {.mm = mm, .name = "a"};
    pthread_t tu, ta;
    assert_int_equal(pthread_create(&tu, NULL, unload_thread, &un), 0);
    for (int i = 0; i < 1000 && state_of(mm, "a") != SY_MODEL_UNLOADING; i++) sleep_ms(5);
    assert_int_equal(state_of(mm, "a"), SY_MODEL_UNLOADING);
    sleep_ms(20);
    assert_int_equal(atomic_load(&un.done), 0); /* the lease holds it */
    /* A new request for it waits until it is gone, then loads it again. */
    assert_int_equal(pthread_create(&ta, NULL, acquire_thread, &again), 0);
    sleep_ms(50);
    assert_int_equal(atomic_load(&again.done), 0);
    generate_through(held, 3); /* the in-flight request is served to its end */
    sy_model_lease_release(held);
    pthread_join(tu, NULL);
    pthread_join(ta, NULL);
    assert_int_equal(un.rc, 1);
    assert_non_null(again.lease);
    generate_through(again.lease, 3);
    sy_model_manager_counters c;
    sy_model_manager_get_counters(mm, &c);
    assert_int_equal(c.loads, 2);
    assert_int_equal(c.unloads, 1);
    sy_model_lease_release(again.lease);
    sy_model_manager_destroy(mm);
}

/* The last lease may end inside a generation's callback, on the model's own engine loop. */
typedef struct releasing_collector {
    sy_model_lease *lease;
    atomic_int done;
} releasing_collector;

static void release_on_done(void *user, const sy_gen_event *ev) {
    releasing_collector *r = user;
    if (ev->type == SY_GEN_EVENT_TEXT) return;
    sy_model_lease_release(r->lease);
    atomic_store(&r->done, 1);
}

static void last_lease_released_in_callback(void **state) {
    (void)state;
    sy_model_manager *mm = manager_of(HOST MODEL("a", "a.txt") "engine.delay_us = 1000\n");
    releasing_collector r = {.lease = acquire_ok(mm, "a")};
    int32_t prompt[3] = {'a', 'b', 'c'};
    sy_gen_params p = serve_greedy(30);
    char err[256];
    int status;
    sy_gen *g = sy_scheduler_submit(sy_model_lease_scheduler(r.lease), prompt, 3, &p, release_on_done, &r, err,
                                    sizeof err, &status);
    assert_non_null(g);
    acquirer un = {.mm = mm, .name = "a"};
    pthread_t tu;
    assert_int_equal(pthread_create(&tu, NULL, unload_thread, &un), 0);
    pthread_join(tu, NULL); /* returns once the callback released the lease and the unload was done */
    assert_int_equal(un.rc, 1);
    assert_int_equal(atomic_load(&r.done), 1);
    assert_int_equal(state_of(mm, "a"), SY_MODEL_UNLOADED);
    sy_gen_release(g);
    sy_model_manager_destroy(mm);
}

/* ---- memory budget ----------------------------------------------------------------------------------------- */

static void memory_budget_evicts_lru(void **state) {
    (void)state;
#define FREE_GROUP "[group.free]\nexclusive = false\nswap = false\n"
    /* Measure one model first. */
    sy_model_manager *mm = manager_of(HOST MODEL("a", "a.txt") "group = free\n" FREE_GROUP);
    sy_model_lease_release(acquire_ok(mm, "a"));
    sy_model_status st[4];
    assert_int_equal(sy_model_manager_status(mm, st, 4), 1);
    uint64_t one = st[0].memory_bytes;
    assert_true(one > 1000);
    sy_model_manager_destroy(mm);

    /* The engine estimates c before loading it as large as a loaded a; d's vocabulary needs more than the budget. */
    free(serve_write_model(&env, "c-sized.txt", NULL, 0));
    free(serve_write_model(&env, "d-huge.txt", "n_vocab=65536", 0));
    char text[1024];
    snprintf(text, sizeof text,
             "[host]\nload_timeout = 20\nresume_path = resume\nmax_memory = %llu\n" MODEL("a", "a.txt") "group = free\n" MODEL(
                 "b", "b.txt") "group = free\n" MODEL("c", "c-sized.txt") "group = free\n" MODEL("d", "d-huge.txt")
                 "group = free\n" FREE_GROUP,
             (unsigned long long)(one * 2 + one / 2));
    mm = manager_of(text);
    sy_model_lease_release(acquire_ok(mm, "a"));
    sleep_ms(2);
    sy_model_lease_release(acquire_ok(mm, "b"));
    sleep_ms(2);
    sy_model_lease_release(acquire_ok(mm, "a")); /* a is now the most recently used */
    sleep_ms(2);
    sy_model_lease *c = acquire_ok(mm, "c");
    assert_int_equal(state_of(mm, "a"), SY_MODEL_READY);
    assert_int_equal(state_of(mm, "b"), SY_MODEL_UNLOADED);
    assert_int_equal(state_of(mm, "c"), SY_MODEL_READY);
    sy_model_manager_counters cnt;
    sy_model_manager_get_counters(mm, &cnt);
    assert_int_equal(cnt.swaps, 1);
    assert_int_equal(cnt.budget_unloads, 1); /* b went before c loaded */
    /* A model larger than the whole budget is refused. */
    char err[512];
    int status = 0;
    assert_null(sy_model_manager_acquire(mm, "d", err, sizeof err, &status));
    assert_int_equal(status, 503);
    assert_non_null(strstr(err, "max_memory"));
    assert_int_equal(state_of(mm, "a"), SY_MODEL_READY); /* nothing was unloaded for it */
    sy_model_lease_release(c);
    sy_model_manager_destroy(mm);
#undef FREE_GROUP
}

/* A model never loaded is sized by the engine's estimate ("sy.engine.resources/1"), not by its file: with room for
 * one model and not two, loading b unloads a before b loads. Sized by b's file (a few bytes), a would go only
 * after b's load, and budget_unloads would stay 0. */
static void memory_budget_uses_the_estimate(void **state) {
    (void)state;
#define FREE_GROUP "[group.free]\nexclusive = false\nswap = false\n"
    sy_model_manager *mm = manager_of(HOST MODEL("a", "a.txt") "group = free\n" FREE_GROUP);
    sy_model_lease_release(acquire_ok(mm, "a"));
    sy_model_status st[4];
    assert_int_equal(sy_model_manager_status(mm, st, 4), 1);
    uint64_t one = st[0].memory_bytes;
    sy_model_manager_destroy(mm);
    char text[1024];
    snprintf(text, sizeof text, HOST "max_memory = %llu\n" MODEL("a", "a.txt") "group = free\n" MODEL("b", "b.txt")
                                     "group = free\n" FREE_GROUP,
             (unsigned long long)(one + one / 2));
    mm = manager_of(text);
    sy_model_lease_release(acquire_ok(mm, "a"));
    sy_model_lease_release(acquire_ok(mm, "b"));
    assert_int_equal(state_of(mm, "a"), SY_MODEL_UNLOADED);
    assert_int_equal(state_of(mm, "b"), SY_MODEL_READY);
    sy_model_manager_counters cnt;
    sy_model_manager_get_counters(mm, &cnt);
    assert_int_equal(cnt.estimated_loads, 2);
    assert_int_equal(cnt.budget_unloads, 1);
    assert_int_equal(cnt.swaps, 1);
    sy_model_manager_destroy(mm);
#undef FREE_GROUP
}

/* max_device_memory counts device bytes only (test-engine's device_mb fakes them) and max_memory host bytes only:
 * two 64 MB models do not fit 100 MB of device memory, while 128 MB of device bytes never count against a
 * max_memory of a few host-sized models. */
static void device_memory_budget(void **state) {
    (void)state;
#define FREE_GROUP "[group.free]\nexclusive = false\nswap = false\n"
#define GPU "group = free\nengine.device_mb = 64\n"
    sy_model_manager *mm = manager_of(HOST "max_device_memory = 100M\nmax_memory = 1M\n" MODEL("g1", "a.txt") GPU
                                          MODEL("g2", "b.txt") GPU MODEL("cpu", "c.txt") "group = free\n"
                                          MODEL("big", "w.txt") "group = free\nengine.device_mb = 200\n" FREE_GROUP);
    sy_model_lease_release(acquire_ok(mm, "g1"));
    sy_model_lease_release(acquire_ok(mm, "cpu"));
    sy_model_lease_release(acquire_ok(mm, "g2"));
    assert_int_equal(state_of(mm, "g1"), SY_MODEL_UNLOADED); /* the device budget's victim */
    assert_int_equal(state_of(mm, "cpu"), SY_MODEL_READY);   /* holds no device memory: no use unloading it */
    assert_int_equal(state_of(mm, "g2"), SY_MODEL_READY);
    sy_model_manager_counters cnt;
    sy_model_manager_get_counters(mm, &cnt);
    assert_int_equal(cnt.budget_unloads, 1);
    sy_model_status st[4];
    assert_int_equal(sy_model_manager_status(mm, st, 4), 4);
    assert_int_equal(st[1].device_bytes, 64u << 20);
    assert_true(st[1].memory_bytes > 0 && st[1].memory_bytes < (1u << 20)); /* host bytes apart */
    char err[512];
    int status = 0;
    assert_null(sy_model_manager_acquire(mm, "big", err, sizeof err, &status));
    assert_int_equal(status, 503);
    assert_non_null(strstr(err, "max_device_memory"));
    assert_int_equal(state_of(mm, "g2"), SY_MODEL_READY); /* nothing was unloaded for it */
    sy_model_manager_destroy(mm);

    /* Without a device budget, device bytes do not count against max_memory: both stay loaded. */
    mm = manager_of(HOST "max_memory = 1M\n" MODEL("g1", "a.txt") GPU MODEL("g2", "b.txt") GPU FREE_GROUP);
    sy_model_lease_release(acquire_ok(mm, "g1"));
    sy_model_lease_release(acquire_ok(mm, "g2"));
    assert_int_equal(state_of(mm, "g1"), SY_MODEL_READY);
    assert_int_equal(state_of(mm, "g2"), SY_MODEL_READY);
    sy_model_manager_destroy(mm);
#undef GPU
#undef FREE_GROUP
}

/* ---- reload ------------------------------------------------------------------------------------------------ */

#define RELOAD_GROUP "[group.g]\nexclusive = false\nswap = false\n"

static void reload_adds_changes_removes(void **state) {
    (void)state;
    sy_model_manager *mm = manager_of(HOST MODEL("a", "a.txt") "group = g\n" MODEL("b", "b.txt") "group = g\n"
                                          MODEL("k", "z.txt") "group = g\nttl = 100\n" RELOAD_GROUP);
    sy_model_lease *old_a = acquire_ok(mm, "a");
    sy_model_lease_release(acquire_ok(mm, "b"));
    sy_model_lease_release(acquire_ok(mm, "k"));
    const sy_loaded_model *old_model = sy_model_lease_model(old_a);

    /* a changes (an engine option), b goes, c comes, k only changes its ttl and alias. */
    sy_config *next = config_of(HOST MODEL("a", "a.txt") "group = g\nengine.delay_us = 10\n"
                                    MODEL("c", "c.txt") "group = g\n"
                                    MODEL("k", "z.txt") "group = g\nttl = 200\naliases = kay\n" RELOAD_GROUP);
    assert_int_equal(sy_model_manager_reload(mm, next), 0);
    sy_config_free(next);

    sy_model_status st[8];
    assert_int_equal(sy_model_manager_status(mm, st, 8), 3);
    assert_string_equal(st[0].name, "a");
    assert_string_equal(st[1].name, "c");
    assert_string_equal(st[2].name, "k");
    assert_int_equal(st[0].state, SY_MODEL_UNLOADED); /* the new a; the old one still serves its lease */
    assert_int_equal(st[2].state, SY_MODEL_READY);    /* kept loaded */
    assert_int_equal(st[2].ttl_s, 200);
    sy_model_manager_counters cnt;
    sy_model_manager_get_counters(mm, &cnt);
    assert_int_equal(cnt.loads, 3);
    assert_int_equal(cnt.unloads, 1); /* b, which had no lease */

    /* The in-flight request on the old a goes on. */
    generate_through(old_a, 4);
    char err[512];
    int status = 0;
    assert_null(sy_model_manager_acquire(mm, "b", err, sizeof err, &status));
    assert_int_equal(status, 404);
    sy_model_lease *kay = acquire_ok(mm, "kay");
    assert_string_equal(sy_model_lease_name(kay), "k");
    sy_model_lease_release(kay);

    sy_model_lease *new_a = acquire_ok(mm, "a");
    assert_ptr_not_equal(sy_model_lease_model(new_a), old_model);
    generate_through(new_a, 4);
    sy_model_lease_release(old_a); /* the old a goes with its last lease */
    sy_model_manager_get_counters(mm, &cnt);
    assert_int_equal(cnt.loads, 4);
    assert_int_equal(cnt.unloads, 2);
    sy_model_lease_release(acquire_ok(mm, "c"));

    /* A config with errors changes nothing. */
    const char *broken = "[model.a]\nplugin = test-engine\n"; /* no path */
    sy_config *bad = sy_config_load_string(broken, strlen(broken), "bad.ini", env.dir);
    assert_false(sy_config_ok(bad));
    assert_int_equal(sy_model_manager_reload(mm, bad), -1);
    sy_config_free(bad);
    /* Nor does one whose engine key the plugin does not declare (serve's reload checks, then reloads), nor one
     * whose engine keys were never checked. */
    const char *typo = "[model.a]\nplugin = test-engine\npath = a.txt\nengine.delay_ms = 10\n";
    bad = sy_config_load_string(typo, strlen(typo), "typo.ini", env.dir);
    assert_true(sy_config_ok(bad));
    assert_int_equal(sy_model_manager_reload(mm, bad), -1); /* unchecked */
    assert_false(sy_config_check_plugin_options(bad, &env.reg));
    assert_int_equal(bad->n_errors, 1);
    assert_non_null(strstr(bad->errors[0], "typo.ini:4: [model.a] engine.delay_ms: not a model key, nor an option "
                                           "of plugin test-engine (its options: n_ctx, ctx_size, recurrent, "));
    assert_int_equal(sy_model_manager_reload(mm, bad), -1);
    sy_config_free(bad);
    assert_int_equal(sy_model_manager_status(mm, st, 8), 3);
    assert_int_equal(state_of(mm, "a"), SY_MODEL_READY);
    sy_model_lease_release(new_a);
    sy_model_manager_destroy(mm);
}

/* ---- preload, failures ------------------------------------------------------------------------------------- */

static void preload_and_load_failure(void **state) {
    (void)state;
    sy_model_manager *mm = manager_of(HOST MODEL("p", "a.txt") "preload = true\ngroup = g\n"
                                          MODEL("bad", "bad.txt") "group = g\n" RELOAD_GROUP);
    assert_int_equal(sy_model_manager_preload_state(mm), SY_PRELOAD_PENDING); /* /health: not ready yet */
    assert_int_equal(sy_model_manager_preload(mm), 0);
    assert_int_equal(sy_model_manager_preload_state(mm), SY_PRELOAD_DONE);
    assert_int_equal(state_of(mm, "p"), SY_MODEL_READY);
    for (int attempt = 1; attempt <= 2; attempt++) {
        char err[512] = "";
        int status = 0;
        assert_null(sy_model_manager_acquire(mm, "bad", err, sizeof err, &status));
        assert_int_equal(status, 503);
        assert_non_null(strstr(err, "test-engine"));
        assert_int_equal(state_of(mm, "bad"), SY_MODEL_UNLOADED);
        sy_model_manager_counters cnt;
        sy_model_manager_get_counters(mm, &cnt);
        assert_int_equal(cnt.load_failures, (uint64_t)attempt);
    }
    assert_int_equal(state_of(mm, "p"), SY_MODEL_READY);
    assert_int_equal(sy_model_manager_preload_state(mm), SY_PRELOAD_DONE); /* later failures do not change it */
    sy_model_manager_destroy(mm);

    /* A preload model that fails keeps the server unready; one without preload models is ready at once. */
    mm = manager_of(HOST MODEL("bad", "bad.txt") "preload = true\n");
    assert_int_equal(sy_model_manager_preload(mm), 1);
    assert_int_equal(sy_model_manager_preload_state(mm), SY_PRELOAD_FAILED);
    sy_model_manager_destroy(mm);
    mm = manager_of(HOST MODEL("p", "a.txt"));
    assert_int_equal(sy_model_manager_preload_state(mm), SY_PRELOAD_DONE);
    sy_model_manager_destroy(mm);
}

/* ---- keep_alive: ttl overrides ----------------------------------------------------------------------------- */

static int64_t ttl_in_effect(sy_model_manager *mm, const char *name) {
    sy_model_status st[16];
    size_t n = sy_model_manager_status(mm, st, 16);
    for (size_t i = 0; i < n && i < 16; i++)
        if (strcmp(st[i].name, name) == 0) return st[i].ttl_in_effect_s;
    fail_msg("model %s not in the status", name);
    return 0;
}

static void keep_alive_overrides_the_ttl(void **state) {
    (void)state;
    sy_model_manager *mm = manager_of(HOST MODEL("a", "a.txt") "ttl = 1\naliases = alpha\n");
    assert_int_equal(sy_model_manager_set_ttl(mm, "nobody", 5), -1);
    sy_model_lease *lease = acquire_ok(mm, "a");
    assert_int_equal(ttl_in_effect(mm, "a"), 1);
    /* Forever (any negative): idle past the configured ttl, it stays. */
    assert_int_equal(sy_model_manager_set_ttl(mm, "alpha", -5), 0);
    assert_int_equal(ttl_in_effect(mm, "a"), SY_MODEL_TTL_FOREVER);
    sy_model_lease_release(lease);
    sleep_ms(1100);
    sy_model_manager_tick(mm);
    assert_int_equal(state_of(mm, "a"), SY_MODEL_READY);
    /* Back to the configured ttl: the idle clock restarts, then the ttl applies. */
    assert_int_equal(sy_model_manager_set_ttl(mm, "a", SY_MODEL_TTL_CONFIGURED), 0);
    assert_int_equal(ttl_in_effect(mm, "a"), 1);
    sy_model_manager_tick(mm);
    assert_int_equal(state_of(mm, "a"), SY_MODEL_READY);
    sleep_ms(1100);
    sy_model_manager_tick(mm);
    assert_int_equal(state_of(mm, "a"), SY_MODEL_UNLOADED);

    /* 0: unloaded as soon as it is idle, never while a request holds it. */
    lease = acquire_ok(mm, "a");
    assert_int_equal(sy_model_manager_set_ttl(mm, "a", 0), 0);
    sy_model_manager_tick(mm);
    assert_int_equal(state_of(mm, "a"), SY_MODEL_READY);
    generate_through(lease, 2);
    sy_model_lease_release(lease);
    sy_model_manager_tick(mm);
    assert_int_equal(state_of(mm, "a"), SY_MODEL_UNLOADED);

    /* An unload ends the override: the next load has the configured ttl again. */
    sy_model_lease_release(acquire_ok(mm, "a"));
    assert_int_equal(ttl_in_effect(mm, "a"), 1);
    assert_int_equal(sy_model_manager_set_ttl(mm, "a", 3600), 0);
    assert_int_equal(ttl_in_effect(mm, "a"), 3600);
    assert_int_equal(sy_model_manager_unload(mm, "a"), 1);
    sy_model_lease_release(acquire_ok(mm, "a"));
    assert_int_equal(ttl_in_effect(mm, "a"), 1);
    sy_model_manager_destroy(mm);

    /* A model configured never to expire (ttl 0) gets a finite keep_alive. */
    mm = manager_of(HOST MODEL("b", "b.txt"));
    sy_model_lease_release(acquire_ok(mm, "b"));
    assert_int_equal(ttl_in_effect(mm, "b"), SY_MODEL_TTL_FOREVER);
    sleep_ms(1100);
    sy_model_manager_tick(mm);
    assert_int_equal(state_of(mm, "b"), SY_MODEL_READY);
    assert_int_equal(sy_model_manager_set_ttl(mm, "b", 1), 0);
    sy_model_manager_tick(mm);
    assert_int_equal(state_of(mm, "b"), SY_MODEL_READY); /* idle only since the override */
    sleep_ms(1100);
    sy_model_manager_tick(mm);
    assert_int_equal(state_of(mm, "b"), SY_MODEL_UNLOADED);
    sy_model_manager_destroy(mm);
}

/* ---- the host prefix cache budget reaches the scheduler ---------------------------------------------------- */

/* Parked sequences of a model after one prompt and then an unrelated one in its single slot. */
static uint32_t parked_after_two_prompts(sy_model_manager *mm, const char *name) {
    sy_model_lease *lease = acquire_ok(mm, name);
    sy_scheduler *s = sy_model_lease_scheduler(lease);
    int32_t first[48], second[48];
    for (int i = 0; i < 48; i++) first[i] = 'a' + i % 7, second[i] = 'z' - i % 5;
    sy_gen_params p = serve_greedy(4);
    collector *c = collector_new();
    serve_generate(s, first, 48, &p, c);
    collector_delete(c);
    c = collector_new();
    serve_generate(s, second, 48, &p, c);
    collector_delete(c);
    sy_model_lease_release(lease);
    sy_model_status st[8];
    size_t n = sy_model_manager_status(mm, st, 8);
    for (size_t i = 0; i < n && i < 8; i++)
        if (strcmp(st[i].name, name) == 0) return st[i].sched.parked_sequences;
    fail_msg("model %s not in the status", name);
    return 0;
}

static void prefix_cache_budget_from_the_config(void **state) {
    (void)state;
    sy_model_manager *mm = manager_of(HOST MODEL("default-cache", "a.txt") "group = g\n"
                                          MODEL("no-cache", "b.txt") "group = g\nprefix_cache_tokens = 0\n"
                                          MODEL("tiny-cache", "c.txt") "group = g\nprefix_cache_tokens = 40\n"
                                      RELOAD_GROUP);
    /* On by default: the first prompt's sequence (about 50 tokens) is parked when the slot moves on. */
    assert_int_equal(parked_after_two_prompts(mm, "default-cache"), 1);
    /* 0 turns it off; a budget smaller than the sequence cannot hold it. */
    assert_int_equal(parked_after_two_prompts(mm, "no-cache"), 0);
    assert_int_equal(parked_after_two_prompts(mm, "tiny-cache"), 0);
    sy_model_manager_destroy(mm);
}

/* ---- resume_max_bytes bounds each model's snapshot folder ---------------------------------------------------- */

/* Runs model "a" once with resume_path = <test dir>/<resume> and the given [host] line, after putting an old
 * 1.5 MiB file with a snapshot's name into its folder. True when that file is still there after the unload. */
static bool old_snapshot_survives_unload(const char *resume, const char *host_line) {
    char *resume_dir = sy_path_join(env.dir, resume);
    char *model_dir = sy_snapshot_model_dir(resume_dir, "a");
    assert_int_equal(mkdir(resume_dir, 0700), 0);
    assert_int_equal(mkdir(model_dir, 0700), 0);
    char *old = sy_path_join(model_dir, "0123456789abcdef.sysnap");
    FILE *f = fopen(old, "w");
    assert_non_null(f);
    static char block[64 * 1024];
    memset(block, 'x', sizeof block);
    for (int i = 0; i < 24; i++) assert_int_equal(fwrite(block, 1, sizeof block, f), sizeof block);
    assert_int_equal(fclose(f), 0);
    struct timeval hour_ago[2];
    gettimeofday(&hour_ago[0], NULL);
    hour_ago[0].tv_sec -= 3600;
    hour_ago[1] = hour_ago[0];
    assert_int_equal(utimes(old, hour_ago), 0);

    char text[1024];
    snprintf(text, sizeof text, "[host]\nload_timeout = 20\nresume_path = %s\n%s\n" MODEL("a", "a.txt"), resume,
             host_line);
    sy_model_manager *mm = manager_of(text);
    sy_model_lease *lease = acquire_ok(mm, "a");
    generate_through(lease, 8);
    sy_model_lease_release(lease);
    assert_int_equal(sy_model_manager_unload(mm, "a"), 1); /* persist_on_unload: the warm slot is saved */
    sy_model_manager_destroy(mm);

    /* The new snapshot is there either way. */
    sy_snapshot_store *st = sy_snapshot_store_open(model_dir, 0, NULL, 0);
    assert_non_null(st);
    sy_snapshot_file *files = NULL;
    size_t n = sy_snapshot_store_list(st, &files);
    bool have_old = false, have_new = false;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(files[i].path, old) == 0) have_old = true;
        else have_new = true;
    }
    sy_snapshot_files_free(files, n);
    sy_snapshot_store_close(st);
    assert_true(have_new);
    free(old);
    free(model_dir);
    free(resume_dir);
    return have_old;
}

static void resume_max_bytes_bounds_the_snapshot_folder(void **state) {
    (void)state;
    assert_true(old_snapshot_survives_unload("resume-default-budget", ""));
    assert_false(old_snapshot_survives_unload("resume-small-budget", "resume_max_bytes = 1M"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(aliases_and_unknown_models),
        cmocka_unit_test(swap_in_group),
        cmocka_unit_test(exclusive_and_persistent_groups),
        cmocka_unit_test(ttl_unloads_through_tick),
        cmocka_unit_test(concurrent_acquires_share_one_load),
        cmocka_unit_test(unload_waits_for_lease),
        cmocka_unit_test(last_lease_released_in_callback),
        cmocka_unit_test(memory_budget_evicts_lru),
        cmocka_unit_test(memory_budget_uses_the_estimate),
        cmocka_unit_test(device_memory_budget),
        cmocka_unit_test(reload_adds_changes_removes),
        cmocka_unit_test(preload_and_load_failure),
        cmocka_unit_test(keep_alive_overrides_the_ttl),
        cmocka_unit_test(prefix_cache_budget_from_the_config),
        cmocka_unit_test(resume_max_bytes_bounds_the_snapshot_folder),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
