/*
 * Snapshot stores in use: the byte budget with LRU eviction and what a folder listing takes for a snapshot; the
 * model manager saving warm slots at shutdown and swap and restoring them on load (a restarted server continues
 * exactly like a cold one, with the restored prefix counted in cached_tokens), also for a recurrent model;
 * damaged and foreign snapshots skipped with one log line and counted; the host prefix cache saved and restored;
 * and the slot API (save, erase, restore, list, file names, refusals). The background writer of swaps: a swap
 * goes on while the outgoing model's snapshot is still being written, the model requested again waits for that
 * write and restores what it wrote, and a writer killed at any moment of a background write leaves the old or
 * the new snapshot, whole, never a torn one.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "api/slots.h"
#include "config/config.h"
#include "manager/config_check.h"
#include "manager/model_manager.h"
#include "snapshot_fixture.h"
#include "base/util.h"

static serve_env env;
static char *model_path, *other_path, *recurrent_path, *slow_path;

static int group_setup(void **state) {
    (void)state;
    if (serve_env_open(&env) != 0) return -1;
    model_path = serve_write_model(&env, "m.txt", "seed=11\nn_ctx=4096", 0);
    other_path = serve_write_model(&env, "other.txt", "seed=12\nn_ctx=4096", 0);
    recurrent_path = serve_write_model(&env, "rec.txt", "seed=11\nn_ctx=4096\nrecurrent=1", 0);
    slow_path = serve_write_model(&env, "slow.txt", "seed=11\nn_ctx=4096\ndelay_us=3000", 0);
    return 0;
}

static int group_teardown(void **state) {
    (void)state;
    free(model_path);
    free(other_path);
    free(recurrent_path);
    free(slow_path);
    serve_env_close(&env);
    return 0;
}

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* A fresh folder under the test folder; malloc'd path. */
static char *fresh_dir(const char *name) {
    char *dir = sy_path_join(env.dir, name);
    assert_int_equal(mkdir(dir, 0755), 0);
    return dir;
}

/* ---- the store ----------------------------------------------------------------------------------------------- */

static void store_budget_and_listing(void **state) {
    (void)state;
    sy_loaded_model lm;
    serve_open_model(&env, model_path, NULL, 0, &lm);
    sy_snapshot_key key;
    snap_key(&lm, &key);
    const sy_engine_state_api *api = lm.plugin->engine_state;
    int32_t *t[3];
    sy_seq *seq[3];
    for (int i = 0; i < 3; i++) {
        t[i] = snap_make_tokens(40 + (uint32_t)i, 500);
        seq[i] = snap_sequence(&lm, t[i], 500);
    }
    char err[512];
    /* Sizes first, in a roomy store. */
    char *roomy = fresh_dir("roomy");
    sy_snapshot_store *st = sy_snapshot_store_open(roomy, 0, err, sizeof err);
    assert_non_null(st);
    uint64_t size[3];
    for (int i = 0; i < 3; i++) {
        sy_snapshot_write_stats ws;
        assert_int_equal(sy_snapshot_store_save(st, &key, api, lm.model, seq[i], t[i], 500, NULL, &ws, err,
                                                sizeof err),
                         SY_SNAPSHOT_OK);
        size[i] = ws.file_bytes;
    }
    sy_snapshot_store_close(st);

    /* Room for two: the least recently used goes when the third arrives. */
    char *tight = fresh_dir("tight");
    st = sy_snapshot_store_open(tight, size[0] + size[1] + size[2] - 1, err, sizeof err);
    assert_non_null(st);
    char *paths[3];
    for (int i = 0; i < 3; i++) {
        assert_int_equal(sy_snapshot_store_save(st, &key, api, lm.model, seq[i], t[i], 500, &paths[i], NULL, err,
                                                sizeof err),
                         SY_SNAPSHOT_OK);
        sleep_ms(15); /* distinct modification times */
    }
    assert_int_equal(access(paths[0], F_OK), -1);
    assert_int_equal(access(paths[1], F_OK), 0);
    assert_int_equal(access(paths[2], F_OK), 0);
    /* Using one (a restore touches it) makes the other the oldest. */
    assert_int_equal(utimensat(AT_FDCWD, paths[1], NULL, 0), 0);
    sleep_ms(15);
    assert_int_equal(sy_snapshot_store_save(st, &key, api, lm.model, seq[0], t[0], 500, NULL, NULL, err, sizeof err),
                     SY_SNAPSHOT_OK);
    assert_int_equal(access(paths[0], F_OK), 0);
    assert_int_equal(access(paths[1], F_OK), 0);
    assert_int_equal(access(paths[2], F_OK), -1);
    sy_snapshot_file *files = NULL;
    size_t n = sy_snapshot_store_list(st, &files);
    assert_int_equal(n, 2);
    assert_string_equal(files[0].path, paths[0]); /* most recently used first */
    assert_string_equal(files[1].path, paths[1]);
    sy_snapshot_files_free(files, n);
    sy_snapshot_store_close(st);

    /* One snapshot larger than the whole budget is not kept. */
    char *tiny = fresh_dir("tiny");
    st = sy_snapshot_store_open(tiny, size[0] / 2, err, sizeof err);
    assert_int_equal(sy_snapshot_store_save(st, &key, api, lm.model, seq[0], t[0], 500, NULL, NULL, err, sizeof err),
                     SY_SNAPSHOT_ERR_IO);
    assert_non_null(strstr(err, "budget"));
    assert_int_equal(snap_count_entries(tiny, ""), 0);
    sy_snapshot_store_close(st);

    /* Only "<16 hex>.sysnap" regular files are snapshots; dead writers' temp files are removed on open, live
     * writers' (this process) are left alone. */
    const char *foreign[] = {"README", "0123.sysnap", "ZZZZZZZZZZZZZZZZ.sysnap", "0123456789abcdef.sysnap.old",
                             "0123456789ABCDEF.sysnap"};
    for (size_t i = 0; i < sizeof foreign / sizeof foreign[0]; i++) {
        char *p = sy_path_join(tight, foreign[i]);
        snap_write_bytes(p, "x", 1);
        free(p);
    }
    char *subdir = sy_path_join(tight, "fedcba9876543210.sysnap");
    assert_int_equal(mkdir(subdir, 0755), 0);
    pid_t child = fork();
    if (child == 0) _exit(0);
    waitpid(child, NULL, 0); /* a pid that is surely gone */
    char dead[128], alive[128];
    snprintf(dead, sizeof dead, ".0123456789abcdef.sysnap.tmp.%ld.0", (long)child);
    snprintf(alive, sizeof alive, ".0123456789abcdef.sysnap.tmp.%ld.0", (long)getpid());
    char *dead_path = sy_path_join(tight, dead), *alive_path = sy_path_join(tight, alive);
    snap_write_bytes(dead_path, "partial", 7);
    snap_write_bytes(alive_path, "partial", 7);
    st = sy_snapshot_store_open(tight, 0, err, sizeof err);
    assert_int_equal(access(dead_path, F_OK), -1);
    assert_int_equal(access(alive_path, F_OK), 0);
    n = sy_snapshot_store_list(st, &files);
    assert_int_equal(n, 2);
    sy_snapshot_files_free(files, n);
    sy_snapshot_store_close(st);

    /* Model names become one folder each, whatever characters they hold. */
    char *d = sy_snapshot_model_dir("/r", "qwen2.5:0.5b");
    assert_string_equal(d, "/r/qwen2.5%3A0.5b");
    free(d);
    d = sy_snapshot_model_dir("/r/", "library/llama3@latest");
    assert_string_equal(d, "/r/library%2Fllama3%40latest");
    free(d);
    d = sy_snapshot_model_dir("/r", "..");
    assert_string_equal(d, "/r/%2E.");
    free(d);

    for (int i = 0; i < 3; i++) {
        lm.engine->seq_free(lm.model, seq[i]);
        free(t[i]);
        free(paths[i]);
    }
    free(dead_path);
    free(alive_path);
    free(subdir);
    free(roomy);
    free(tight);
    free(tiny);
    sy_loaded_model_close(&lm);
}

/* ---- the model manager: shutdown, restart, swap -------------------------------------------------------------- */

static sy_model_manager *manager(const char *resume_dir, bool resume, const char *models) {
    char text[4096];
    snprintf(text, sizeof text, "[host]\nload_timeout = 20\nresume_path = %s\nresume = %s\n%s", resume_dir,
             resume ? "true" : "false", models);
    sy_config *cfg = sy_config_load_string(text, strlen(text), "test.ini", env.dir);
    sy_config_check_plugin_options(cfg, &env.reg);
    if (!sy_config_ok(cfg)) sy_config_print_diagnostics(cfg, stderr);
    assert_true(sy_config_ok(cfg));
    sy_model_manager *mm = sy_model_manager_create(cfg, &env.reg);
    sy_config_free(cfg);
    assert_non_null(mm);
    return mm;
}

/* Generate greedily through the manager; the generated tokens into out (n of them), the usage into *usage. */
static void generate(sy_model_manager *mm, const char *name, const int32_t *prompt, uint32_t n_prompt, uint32_t n,
                     int32_t *out, sy_gen_usage *usage) {
    char err[512];
    int status = 0;
    sy_model_lease *lease = sy_model_manager_acquire(mm, name, err, sizeof err, &status);
    if (lease == NULL) fprintf(stderr, "acquire %s: %s\n", name, err);
    assert_non_null(lease);
    collector *c = collector_new();
    sy_gen_params p = serve_greedy(n);
    p.logprobs = true; /* every token gets an event, control tokens too */
    serve_generate(sy_model_lease_scheduler(lease), prompt, n_prompt, &p, c);
    assert_int_equal(c->end_type, SY_GEN_EVENT_DONE);
    assert_int_equal(c->n_tokens, n);
    memcpy(out, c->tokens, n * sizeof *out);
    if (usage != NULL) *usage = c->usage;
    collector_delete(c);
    sy_model_lease_release(lease);
}

static void restart_continues_like_cold(const char *model_file) {
    char *resume = sy_path_join(env.dir, model_file == recurrent_path ? "resume-rec" : "resume-plain");
    char models[512];
    snprintf(models, sizeof models, "[model.m]\nplugin = test-engine\npath = %s\n", model_file);
    enum { N_PROMPT = 600, N_FIRST = 24, N_EXTRA = 50, N_SECOND = 20 };
    int32_t *prompt = snap_make_tokens(77, N_PROMPT + N_FIRST + N_EXTRA);
    int32_t first[N_FIRST], warm[N_SECOND], cold[N_SECOND];
    sy_gen_usage u_first, u_warm, u_cold;

    /* First server: a chat turn, then a clean shutdown saves the slot. */
    sy_model_manager *mm = manager(resume, false, models);
    generate(mm, "m", prompt, N_PROMPT, N_FIRST, first, &u_first);
    assert_int_equal(u_first.cached_tokens, 0);
    sy_model_manager_destroy(mm);
    char *dir = sy_snapshot_model_dir(resume, "m");
    assert_int_equal(snap_count_entries(dir, ""), 1);

    /* The next turn: the prompt so far plus what the model said plus more. */
    memcpy(prompt + N_PROMPT, first, sizeof first);
    uint32_t n2 = N_PROMPT + N_FIRST + N_EXTRA;
    sy_snapshot_counters before, after;
    sy_snapshot_get_counters(&before);
    mm = manager(resume, true, models);
    generate(mm, "m", prompt, n2, N_SECOND, warm, &u_warm);
    sy_model_manager_destroy(mm);
    sy_snapshot_get_counters(&after);
    assert_int_equal(after.restored, before.restored + 1);
    /* The slot held the prompt and every generated token but the last (sampled, never decoded). */
    assert_int_equal(u_warm.cached_tokens, N_PROMPT + N_FIRST - 1);

    char *empty = sy_path_join(env.dir, model_file == recurrent_path ? "resume-rec-cold" : "resume-plain-cold");
    mm = manager(empty, false, models);
    generate(mm, "m", prompt, n2, N_SECOND, cold, &u_cold);
    sy_model_manager_destroy(mm);
    assert_int_equal(u_cold.cached_tokens, 0);
    assert_memory_equal(warm, cold, sizeof warm);

    free(prompt);
    free(dir);
    free(resume);
    free(empty);
}

static void restart_restores_warm_slots(void **state) {
    (void)state;
    restart_continues_like_cold(model_path);
}

static void restart_restores_recurrent(void **state) {
    (void)state;
    restart_continues_like_cold(recurrent_path);
}

static void swap_keeps_kv_warm(void **state) {
    (void)state;
    int32_t *prompt = snap_make_tokens(91, 400);
    int32_t out[8], other[8];
    sy_gen_usage u;
    for (int persist = 1; persist >= 0; persist--) {
        char name[32];
        snprintf(name, sizeof name, "resume-swap-%d", persist);
        char *resume = sy_path_join(env.dir, name);
        char models[1024];
        snprintf(models, sizeof models,
                 "[model.a]\nplugin = test-engine\npath = %s\npersist_on_unload = %s\n"
                 "[model.b]\nplugin = test-engine\npath = %s\n",
                 model_path, persist ? "true" : "false", other_path);
        sy_model_manager *mm = manager(resume, false, models); /* no --resume: swaps alone */
        generate(mm, "a", prompt, 300, 8, out, &u);
        generate(mm, "b", prompt, 10, 8, other, &u); /* swaps a out */
        generate(mm, "a", prompt, 400, 8, out, &u);  /* swaps a back in */
        if (persist) assert_int_equal(u.cached_tokens, 300);
        else assert_int_equal(u.cached_tokens, 0);
        sy_model_manager_destroy(mm);
        free(resume);
    }
    free(prompt);
}


/* ---- the background writer of swaps --------------------------------------------------------------------------- */

typedef struct swap_back_run {
    sy_model_manager *mm;
    const int32_t *prompt;
    sy_gen_usage usage;
    atomic_bool done;
} swap_back_run;

static void *swap_back_thread(void *arg) {
    swap_back_run *r = arg;
    int32_t out[8];
    generate(r->mm, "a", r->prompt, 400, 8, out, &r->usage);
    atomic_store(&r->done, true);
    return NULL;
}

static void swap_during_inflight_snapshot_write(void **state) {
    (void)state;
    int32_t *prompt = snap_make_tokens(93, 400);
    int32_t out[8], other[8];
    sy_gen_usage u;
    char *resume = sy_path_join(env.dir, "resume-inflight");
    char models[1024];
    snprintf(models, sizeof models,
             "[model.a]\nplugin = test-engine\npath = %s\n[model.b]\nplugin = test-engine\npath = %s\n", model_path,
             other_path);
    sy_model_manager *mm = manager(resume, false, models);
    generate(mm, "a", prompt, 300, 8, out, &u);
    /* The worker holds: a's snapshot is captured at the swap but stays unwritten, and b serves meanwhile. */
    sy_model_manager_hold_background(mm, true);
    generate(mm, "b", prompt, 10, 8, other, &u);
    char *dir_a = sy_snapshot_model_dir(resume, "a");
    assert_int_equal(snap_count_entries(dir_a, ""), 0); /* not even the folder's files: nothing written yet */
    /* a again, while its write is in flight: its load waits for the write and then restores it. */
    swap_back_run r = {mm, prompt, {0}, false};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, swap_back_thread, &r), 0);
    sleep_ms(200);
    assert_false(atomic_load(&r.done)); /* it waits, rather than loading a without its snapshot */
    sy_model_manager_hold_background(mm, false);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_true(atomic_load(&r.done));
    assert_int_equal(r.usage.cached_tokens, 300); /* what a wrote, restored: the prompt they share */
    assert_int_equal(snap_count_entries(dir_a, ""), 1);
    sy_model_manager_destroy(mm);
    free(dir_a);
    free(resume);
    free(prompt);
}

/* Every snapshot listed in dir opens and every chunk's checksums hold; returns how many there are, the shortest
 * and the longest ledger. */
static size_t check_whole_snapshots(const char *dir, uint32_t *shortest, uint32_t *longest) {
    char err[512];
    sy_snapshot_store *st = sy_snapshot_store_open(dir, 0, err, sizeof err); /* removes the dead writer's temp */
    assert_non_null(st);
    sy_snapshot_file *files = NULL;
    size_t n = sy_snapshot_store_list(st, &files);
    *shortest = UINT32_MAX, *longest = 0;
    for (size_t f = 0; f < n; f++) {
        sy_snapshot *snap = NULL;
        assert_int_equal(sy_snapshot_open_file(files[f].path, NULL, &snap, err, sizeof err), SY_SNAPSHOT_OK);
        uint32_t n_ledger = 0;
        sy_snapshot_tokens(snap, &n_ledger);
        if (n_ledger < *shortest) *shortest = n_ledger;
        if (n_ledger > *longest) *longest = n_ledger;
        for (bool done = false; !done;) {
            uint32_t begin, end;
            const uint8_t *raw;
            size_t len;
            assert_int_equal(sy_snapshot_next_chunk(snap, &begin, &end, &raw, &len, &done, err, sizeof err),
                             SY_SNAPSHOT_OK);
        }
        sy_snapshot_close(snap);
    }
    sy_snapshot_files_free(files, n);
    sy_snapshot_store_close(st);
    assert_int_equal(snap_count_entries(dir, "."), 0); /* the temp file of a killed write is gone */
    return n;
}

static void background_write_killed_leaves_old_or_new(void **state) {
    (void)state;
    int32_t *prompt = snap_make_tokens(94, 3000);
    char models[512];
    snprintf(models, sizeof models, "[model.a]\nplugin = test-engine\npath = %s\n", model_path);
    unsigned seed = 20261202;
    size_t saw_old = 0, saw_new = 0;
    for (int round = 0; round < 16; round++) {
        char name[64];
        snprintf(name, sizeof name, "resume-kill-%d", round);
        char *resume = sy_path_join(env.dir, name);
        int ready[2];
        assert_int_equal(pipe(ready), 0);
        fflush(NULL);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            close(ready[0]);
            int32_t out[4];
            sy_model_manager *mm = manager(resume, false, models);
            generate(mm, "a", prompt, 1000, 4, out, NULL);
            sy_model_manager_unload(mm, "a"); /* the old snapshot, on disk once this returns */
            generate(mm, "a", prompt, 3000, 4, out, NULL);
            ssize_t w = write(ready[1], "x", 1);
            (void)w;
            sy_model_manager_unload(mm, "a"); /* the new one, from the background writer, superseding the old */
            _exit(0);
        }
        close(ready[1]);
        char c;
        assert_int_equal(read(ready[0], &c, 1), 1);
        close(ready[0]);
        sleep_ms((long)(rand_r(&seed) % 40u)); /* anywhere in the write, the rename, or the old one's removal */
        kill(pid, SIGKILL);
        int status;
        assert_int_equal(waitpid(pid, &status, 0), pid);
        char *dir = sy_snapshot_model_dir(resume, "a");
        uint32_t shortest, longest;
        size_t n = check_whole_snapshots(dir, &shortest, &longest);
        assert_true(n >= 1); /* never neither: the old one goes only after the new one is whole on disk */
        assert_true(shortest >= 1000);
        if (shortest < 3000) saw_old++;
        if (longest >= 3000) saw_new++;
        free(dir);
        free(resume);
    }
    fprintf(stderr, "background writes killed: the old snapshot survived %zu times, the new one was whole %zu times\n",
            saw_old, saw_new);
    free(prompt);
}

/* Run fn with stderr going into a file; returns what was written there (malloc'd). */
static char *capture_stderr(void (*fn)(void *), void *arg) {
    char *path = sy_path_join(env.dir, "stderr.txt");
    fflush(stderr);
    int saved = dup(2);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(saved >= 0 && fd >= 0);
    dup2(fd, 2);
    close(fd);
    fn(arg);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    size_t len = 0;
    uint8_t *text = snap_read_file(path, &len);
    char *s = malloc(len + 1);
    memcpy(s, text, len);
    s[len] = '\0';
    free(text);
    free(path);
    return s;
}

typedef struct resume_run {
    const char *resume, *models;
    const int32_t *prompt;
    uint32_t n_prompt;
    sy_gen_usage usage;
} resume_run;

static void run_resumed(void *arg) {
    resume_run *r = arg;
    int32_t out[4];
    sy_model_manager *mm = manager(r->resume, true, r->models);
    generate(mm, "m", r->prompt, r->n_prompt, 4, out, &r->usage);
    sy_model_manager_destroy(mm);
}

static size_t count_lines_with(const char *text, const char *needle) {
    size_t n = 0;
    for (const char *p = text; (p = strstr(p, needle)) != NULL; p++) n++;
    return n;
}

static void damaged_and_foreign_snapshots_skipped(void **state) {
    (void)state;
    char *resume = sy_path_join(env.dir, "resume-damaged");
    char models[512];
    snprintf(models, sizeof models, "[model.m]\nplugin = test-engine\npath = %s\n", model_path);
    int32_t *prompt = snap_make_tokens(55, 500);
    int32_t out[4];
    sy_model_manager *mm = manager(resume, false, models);
    generate(mm, "m", prompt, 400, 4, out, NULL);
    sy_model_manager_destroy(mm);
    char *dir = sy_snapshot_model_dir(resume, "m");
    sy_snapshot_store *st = sy_snapshot_store_open(dir, 0, NULL, 0);
    sy_snapshot_file *files = NULL;
    assert_int_equal(sy_snapshot_store_list(st, &files), 1);
    char *snap_path = sy_strdup(files[0].path);
    sy_snapshot_files_free(files, 1);
    sy_snapshot_store_close(st);

    /* One flipped bit in the KV: refused by its checksum, the model starts cold, one line says why. */
    size_t len = 0;
    uint8_t *bytes = snap_read_file(snap_path, &len);
    uint8_t *bad = malloc(len);
    memcpy(bad, bytes, len);
    bad[len - 200] ^= 0x10;
    snap_write_bytes(snap_path, bad, len);
    sy_snapshot_counters before, after;
    sy_snapshot_get_counters(&before);
    resume_run run = {resume, models, prompt, 500, {0}};
    char *log = capture_stderr(run_resumed, &run);
    sy_snapshot_get_counters(&after);
    assert_int_equal(run.usage.cached_tokens, 0);
    assert_int_equal(after.rejected_by[SY_SNAPSHOT_ERR_CHECKSUM], before.rejected_by[SY_SNAPSHOT_ERR_CHECKSUM] + 1);
    assert_int_equal(after.rejected, before.rejected + 1);
    assert_int_equal(count_lines_with(log, "skipped (checksum)"), 1);
    free(log);

    /* The intact file, but the model behind the name changed: refused by its key. (The run above saved the
     * cold slot of its own; remove everything but the original.) */
    sy_snapshot_store *clean = sy_snapshot_store_open(dir, 0, NULL, 0);
    size_t n = sy_snapshot_store_list(clean, &files);
    for (size_t i = 0; i < n; i++) unlink(files[i].path);
    sy_snapshot_files_free(files, n);
    sy_snapshot_store_close(clean);
    snap_write_bytes(snap_path, bytes, len);
    char other_models[512];
    snprintf(other_models, sizeof other_models, "[model.m]\nplugin = test-engine\npath = %s\n", other_path);
    run.models = other_models;
    sy_snapshot_get_counters(&before);
    log = capture_stderr(run_resumed, &run);
    sy_snapshot_get_counters(&after);
    assert_int_equal(run.usage.cached_tokens, 0);
    assert_int_equal(after.rejected_by[SY_SNAPSHOT_ERR_KEY], before.rejected_by[SY_SNAPSHOT_ERR_KEY] + 1);
    assert_int_equal(count_lines_with(log, "skipped (key): model fingerprint differs"), 1);
    free(log);

    /* And the right model takes it again. */
    n = 0;
    clean = sy_snapshot_store_open(dir, 0, NULL, 0);
    n = sy_snapshot_store_list(clean, &files);
    for (size_t i = 0; i < n; i++)
        if (strcmp(files[i].path, snap_path) != 0) unlink(files[i].path);
    sy_snapshot_files_free(files, n);
    sy_snapshot_store_close(clean);
    run.models = models;
    run_resumed(&run);
    assert_int_equal(run.usage.cached_tokens, 400);

    free(bytes);
    free(bad);
    free(snap_path);
    free(dir);
    free(resume);
    free(prompt);
}

/* ---- the host prefix cache ----------------------------------------------------------------------------------- */

static sy_scheduler *cached_scheduler(sy_loaded_model *lm) {
    serve_open_model(&env, model_path, NULL, 0, lm);
    sy_scheduler_options so = {0};
    so.parallel = 1;
    so.max_queue = 4;
    so.cache_tokens = 4096;
    sy_scheduler *s = sy_scheduler_create(lm, &so);
    assert_non_null(s);
    return s;
}

static void host_cache_saved_and_restored(void **state) {
    (void)state;
    char *resume = sy_path_join(env.dir, "resume-cache");
    int32_t *p1 = snap_make_tokens(61, 320), *p2 = snap_make_tokens(62, 300);
    sy_gen_params params = serve_greedy(5);
    params.logprobs = true; /* every token gets an event */
    sy_loaded_model lm;
    sy_scheduler *s = cached_scheduler(&lm);
    collector *c = collector_new();
    serve_generate(s, p1, 300, &params, c);
    /* The follow-up prompt: p1, the four tokens the sequence holds of the answer, then more. */
    memcpy(p1 + 300, c->tokens, 4 * sizeof *p1);
    for (int i = 304; i < 320; i++) p1[i] = 'z';
    collector_delete(c);
    c = collector_new();
    serve_generate(s, p2, 300, &params, c); /* unrelated: p1's sequence is parked */
    collector_delete(c);
    sy_scheduler_stats stats;
    sy_scheduler_get_stats(s, &stats);
    assert_int_equal(stats.parked_sequences, 1);
    sy_scheduler_stop(s);
    assert_int_equal(sy_snapshot_persist_model(resume, "m", &lm, s, false, 0), 1);
    assert_int_equal(sy_snapshot_persist_model(resume, "m", &lm, s, true, 0), 2);
    sy_scheduler_destroy(s);
    sy_loaded_model_close(&lm);

    for (int into_cache = 1; into_cache >= 0; into_cache--) {
        s = cached_scheduler(&lm);
        assert_int_equal(sy_snapshot_resume_model(resume, "m", &lm, s, into_cache, 0), into_cache ? 2 : 1);
        sy_scheduler_get_stats(s, &stats);
        assert_int_equal(stats.parked_sequences, into_cache ? 1u : 0u);
        c = collector_new();
        serve_generate(s, p1, 320, &params, c); /* p1 went to the cache (p2 is the slot's, more recent) */
        assert_int_equal(c->usage.cached_tokens, into_cache ? 304u : 0u);
        collector_delete(c);
        sy_scheduler_destroy(s);
        sy_loaded_model_close(&lm);
    }
    free(p1);
    free(p2);
    free(resume);
}

/* ---- the slot API -------------------------------------------------------------------------------------------- */

static void slot_filenames(void **state) {
    (void)state;
    char err[256];
    const char *bad[] = {"", ".hidden", "..", "../etc", "a/b", "a\\b", "x\x01y", "\xff\xfe", "\xc0\xaf",
                         "tab\there"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        assert_false(sy_slot_filename_ok(bad[i], err, sizeof err));
        assert_true(err[0] != '\0');
    }
    char longer[300];
    memset(longer, 'a', sizeof longer - 1);
    longer[sizeof longer - 1] = '\0';
    assert_false(sy_slot_filename_ok(longer, err, sizeof err));
    assert_true(sy_slot_filename_ok("chat-1.bin", err, sizeof err));
    assert_true(sy_slot_filename_ok("caf\xc3\xa9 \xe2\x98\x95.slot", err, sizeof err));
    assert_true(sy_slot_filename_ok("a..b", err, sizeof err));
}

static uint32_t slot_with_tokens(sy_scheduler *s) {
    sy_slot_info info[4];
    size_t n = sy_slot_list(s, info, 4);
    for (size_t i = 0; i < n; i++)
        if (info[i].n_tokens > 0) return info[i].id;
    fail_msg("no slot holds tokens");
    return 0;
}

static void slot_save_erase_restore(void **state) {
    (void)state;
    char *dir = fresh_dir("slots");
    sy_loaded_model lm;
    serve_open_model(&env, model_path, NULL, 0, &lm);
    sy_scheduler_options so = {0};
    so.parallel = 2;
    so.max_queue = 4;
    sy_scheduler *s = sy_scheduler_create(&lm, &so);
    int32_t *prompt = snap_make_tokens(71, 400);
    sy_gen_params params = serve_greedy(6);
    params.logprobs = true; /* every token gets an event */
    collector *c = collector_new();
    serve_generate(s, prompt, 300, &params, c);
    int32_t first[6];
    memcpy(first, c->tokens, sizeof first);
    collector_delete(c);

    uint32_t id = slot_with_tokens(s);
    sy_slot_info info[2];
    assert_int_equal(sy_slot_list(s, info, 2), 2);
    assert_int_equal(info[id].n_tokens, 305);
    assert_false(info[id].busy);
    sy_slot_result res;
    char err[1024];
    assert_int_equal(sy_slot_save(s, &lm, id, dir, "turn1.slot", &res, err, sizeof err), 200);
    assert_int_equal(res.n_tokens, 305);
    assert_true(res.bytes > 0);
    /* A second save of the name is refused unless asked to overwrite; a budget too small keeps nothing. */
    uint64_t first_bytes = res.bytes;
    assert_int_equal(sy_slot_save(s, &lm, id, dir, "turn1.slot", &res, err, sizeof err), 409);
    assert_non_null(strstr(err, "overwrite"));
    sy_slot_save_options replace = {true, 0};
    assert_int_equal(sy_slot_save_with(s, &lm, id, dir, "turn1.slot", &replace, &res, err, sizeof err), 200);
    sy_slot_save_options tight = {false, first_bytes + first_bytes / 2};
    assert_int_equal(sy_slot_save_with(s, &lm, id, dir, "turn2.slot", &tight, &res, err, sizeof err), 507);
    assert_non_null(strstr(err, "slot_save_max_bytes"));
    char *refused = sy_path_join(dir, "turn2.slot");
    struct stat refused_st;
    assert_int_not_equal(stat(refused, &refused_st), 0);
    free(refused);
    sy_slot_save_options roomy = {false, 3 * first_bytes};
    assert_int_equal(sy_slot_save_with(s, &lm, id, dir, "turn2.slot", &roomy, &res, err, sizeof err), 200);
    assert_int_equal(sy_slot_erase(s, id, &res, err, sizeof err), 200);
    assert_int_equal(res.n_tokens, 305);
    sy_slot_list(s, info, 2);
    assert_int_equal(info[0].n_tokens + info[1].n_tokens, 0);
    /* Restore into the other slot, then continue the chat: the restored prefix is reused. */
    uint32_t other = 1 - id;
    assert_int_equal(sy_slot_restore(s, &lm, other, dir, "turn1.slot", &res, err, sizeof err), 200);
    assert_int_equal(res.n_tokens, 305);
    sy_slot_list(s, info, 2);
    assert_int_equal(info[other].n_tokens, 305);
    int32_t next[310];
    memcpy(next, prompt, 300 * sizeof *next);
    memcpy(next + 300, first, 5 * sizeof *next);
    next[305] = 'x';
    c = collector_new();
    serve_generate(s, next, 306, &params, c);
    assert_int_equal(c->usage.cached_tokens, 305);
    collector_delete(c);

    /* Refusals. */
    assert_int_equal(sy_slot_restore(s, &lm, 0, dir, "missing.slot", &res, err, sizeof err), 404);
    assert_int_equal(sy_slot_save(s, &lm, 7, dir, "x.slot", &res, err, sizeof err), 404);
    assert_int_equal(sy_slot_save(s, &lm, 0, dir, "../x.slot", &res, err, sizeof err), 400);
    assert_int_equal(sy_slot_save(s, &lm, 0, dir, ".x", &res, err, sizeof err), 400);
    assert_int_equal(sy_slot_save(s, &lm, 0, NULL, "x.slot", &res, err, sizeof err), 501);
    assert_int_equal(sy_slot_erase(s, 9, &res, err, sizeof err), 404);
    /* A file that is not a snapshot, and one of another model. */
    char *junk = sy_path_join(dir, "junk.slot");
    snap_write_bytes(junk, "not a snapshot at all", 21);
    assert_int_equal(sy_slot_restore(s, &lm, 0, dir, "junk.slot", &res, err, sizeof err), 400);
    assert_non_null(strstr(err, "magic"));
    {
        sy_loaded_model olm;
        serve_open_model(&env, other_path, NULL, 0, &olm);
        sy_scheduler *os = sy_scheduler_create(&olm, &so);
        c = collector_new();
        serve_generate(os, prompt, 50, &params, c);
        collector_delete(c);
        assert_int_equal(sy_slot_save(os, &olm, slot_with_tokens(os), dir, "other.slot", &res, err, sizeof err),
                         200);
        sy_scheduler_destroy(os);
        sy_loaded_model_close(&olm);
    }
    assert_int_equal(sy_slot_restore(s, &lm, 0, dir, "other.slot", &res, err, sizeof err), 400);
    assert_non_null(strstr(err, "fingerprint"));
    free(junk);
    sy_scheduler_destroy(s);
    sy_loaded_model_close(&lm);
    free(prompt);

    /* A slot that is generating answers 409 and is left alone. */
    serve_open_model(&env, slow_path, NULL, 0, &lm);
    s = sy_scheduler_create(&lm, &so);
    int32_t short_prompt[4] = {'a', 'b', 'c', 'd'};
    sy_gen_params long_params = serve_greedy(400);
    c = collector_new();
    char gerr[256];
    int status = 0;
    sy_gen *g = sy_scheduler_submit(s, short_prompt, 4, &long_params, collector_callback, c, gerr, sizeof gerr,
                                    &status);
    assert_non_null(g);
    assert_true(collector_wait_events(c, 2, 10));
    sy_slot_list(s, info, 2);
    uint32_t busy = info[0].busy ? 0 : 1;
    assert_true(info[busy].busy);
    assert_int_equal(sy_slot_save(s, &lm, busy, dir, "busy.slot", &res, err, sizeof err), 409);
    assert_int_equal(sy_slot_erase(s, busy, &res, err, sizeof err), 409);
    assert_int_equal(sy_slot_restore(s, &lm, busy, dir, "turn1.slot", &res, err, sizeof err), 409);
    sy_gen_cancel(g);
    assert_true(collector_wait(c, 10));
    sy_gen_release(g);
    collector_delete(c);
    sy_scheduler_destroy(s);
    sy_loaded_model_close(&lm);
    free(dir);
}

static void tasks_after_stop_refused(void **state) {
    (void)state;
    sy_loaded_model lm;
    serve_open_model(&env, model_path, NULL, 0, &lm);
    sy_scheduler_options so = {0};
    so.parallel = 1;
    sy_scheduler *s = sy_scheduler_create(&lm, &so);
    sy_slot_info info[1];
    assert_int_equal(sy_slot_list(s, info, 1), 1);
    sy_scheduler_stop(s);
    sy_scheduler_stop(s); /* idempotent */
    assert_int_equal(sy_slot_list(s, info, 1), 0);
    sy_slot_result res;
    char err[256];
    assert_int_equal(sy_slot_erase(s, 0, &res, err, sizeof err), 503);
    sy_scheduler_destroy(s);
    sy_loaded_model_close(&lm);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(store_budget_and_listing),
        cmocka_unit_test(restart_restores_warm_slots),
        cmocka_unit_test(restart_restores_recurrent),
        cmocka_unit_test(swap_keeps_kv_warm),
        cmocka_unit_test(swap_during_inflight_snapshot_write),
        cmocka_unit_test(background_write_killed_leaves_old_or_new),
        cmocka_unit_test(damaged_and_foreign_snapshots_skipped),
        cmocka_unit_test(host_cache_saved_and_restored),
        cmocka_unit_test(slot_filenames),
        cmocka_unit_test(slot_save_erase_restore),
        cmocka_unit_test(tasks_after_stop_refused),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
