/*
 * Snapshots survive crashes and full disks:
 *   - a child process writing a snapshot over an existing one is killed with SIGKILL at random moments, 50 times:
 *     afterwards the file holds either the old or the new snapshot, complete and restorable, and the temp files
 *     the dead writers left are never listed as snapshots (and are cleaned up when the store is opened);
 *   - a write that runs out of space fails with the system's error, leaves no partial or temp file, keeps the
 *     older snapshot intact, and the store keeps working. The full disk is real: a 256 KiB tmpfs mounted in a
 *     private mount namespace when this runs as root with CAP_SYS_ADMIN (ENOSPC), otherwise a file size limit
 *     (setrlimit RLIMIT_FSIZE with SIGXFSZ ignored, which gives EFBIG). The test prints which one it used.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "snapshot_fixture.h"
#include "base/util.h"

static serve_env env;
static char *model_path;

#define BIG_TOKENS 60000u

static int group_setup(void **state) {
    (void)state;
    if (serve_env_open(&env) != 0) return -1;
    model_path = serve_write_model(&env, "model.txt", "seed=11\nn_ctx=65536", 0);
    return 0;
}

static int group_teardown(void **state) {
    (void)state;
    free(model_path);
    serve_env_close(&env);
    return 0;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_s(double s) {
    if (s <= 0) return;
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* Which of the candidates the snapshot at path holds, completely and restorably: its index, or -1. */
static int snapshot_holds(const sy_loaded_model *lm, const char *path, int32_t *const *candidates, uint32_t n) {
    sy_snapshot *snap = NULL;
    char err[512];
    if (sy_snapshot_open_file(path, NULL, &snap, err, sizeof err) != SY_SNAPSHOT_OK) {
        fprintf(stderr, "%s: %s\n", path, err);
        return -1;
    }
    uint32_t have = 0;
    const int32_t *ledger = sy_snapshot_tokens(snap, &have);
    int which = -1;
    for (int i = 0; i < 2 && which < 0; i++)
        if (have == n && memcmp(ledger, candidates[i], (size_t)n * sizeof *ledger) == 0) which = i;
    sy_seq *seq = NULL;
    uint32_t restored = 0;
    sy_snapshot_error e = sy_snapshot_restore(snap, lm->engine, lm->plugin->engine_state, lm->model, NULL, 0, 0,
                                              &seq, &restored, err, sizeof err);
    if (e != SY_SNAPSHOT_OK || restored != n) {
        fprintf(stderr, "%s: restore: %s\n", path, err);
        which = -1;
    }
    if (seq != NULL) lm->engine->seq_free(lm->model, seq);
    sy_snapshot_close(snap);
    return which;
}

static void sigkill_during_writes(void **state) {
    (void)state;
    sy_loaded_model lm;
    serve_open_model(&env, model_path, NULL, 0, &lm);
    sy_snapshot_key key;
    snap_key(&lm, &key);
    int32_t *content[2] = {snap_make_tokens(1, BIG_TOKENS), snap_make_tokens(2, BIG_TOKENS)};
    sy_seq *seqs[2] = {snap_sequence(&lm, content[0], BIG_TOKENS), snap_sequence(&lm, content[1], BIG_TOKENS)};
    char *dir = sy_path_join(env.dir, "kill");
    assert_int_equal(mkdir(dir, 0755), 0);
    char *path = sy_path_join(dir, "00000000000000aa.sysnap");
    char err[512];
    assert_int_equal(sy_snapshot_write_file(path, &key, lm.plugin->engine_state, lm.model, seqs[0], content[0],
                                            BIG_TOKENS, NULL, NULL, err, sizeof err),
                     SY_SNAPSHOT_OK);

    /* How long one child takes from fork to exit, so the kills spread over the whole write (the quickest of three:
     * a busy machine must not stretch the window so far that every kill comes after the end). */
    double write_s = 1e9;
    int status = 0;
    for (int i = 0; i < 3; i++) {
        double t0 = now_s();
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            char e2[512];
            _exit(sy_snapshot_write_file(path, &key, lm.plugin->engine_state, lm.model, seqs[0], content[0],
                                         BIG_TOKENS, NULL, NULL, e2, sizeof e2) == SY_SNAPSHOT_OK ? 0 : 1);
        }
        assert_int_equal(waitpid(pid, &status, 0), pid);
        assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        if (now_s() - t0 < write_s) write_s = now_s() - t0;
    }

    sy_snapshot_store *lister = sy_snapshot_store_open(dir, 0, err, sizeof err);
    assert_non_null(lister);
    int current = 0, killed = 0, finished = 0, temp_left = 0;
    size_t dots_before = 0;
    uint32_t rng = 12345;
    for (int round = 0; round < 50; round++) {
        int next = 1 - current;
        rng = rng * 1103515245u + 12345u;
        double delay = write_s * 1.3 * (double)((rng >> 8) % 10000u) / 10000.0;
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            char e2[512];
            _exit(sy_snapshot_write_file(path, &key, lm.plugin->engine_state, lm.model, seqs[next], content[next],
                                         BIG_TOKENS, NULL, NULL, e2, sizeof e2) == SY_SNAPSHOT_OK ? 0 : 1);
        }
        sleep_s(delay);
        kill(pid, SIGKILL);
        assert_int_equal(waitpid(pid, &status, 0), pid);
        if (WIFSIGNALED(status)) killed++;
        else {
            assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
            finished++;
        }
        /* Old or new, complete either way; a finished writer means new. */
        int holds = snapshot_holds(&lm, path, content, BIG_TOKENS);
        if (holds < 0) fprintf(stderr, "round %d (kill after %.1f ms): the snapshot is damaged\n", round, delay * 1e3);
        assert_true(holds == current || holds == next);
        if (WIFEXITED(status)) assert_int_equal(holds, next);
        current = holds;
        /* Only real snapshots are listed, whatever temp files the dead writers left. */
        size_t dots = snap_count_entries(dir, ".");
        if (dots > dots_before) temp_left++;
        dots_before = dots;
        sy_snapshot_file *files = NULL;
        size_t n = sy_snapshot_store_list(lister, &files);
        assert_int_equal(n, 1);
        assert_string_equal(files[0].path, path);
        sy_snapshot_files_free(files, n);
        /* Opening a store removes the dead writers' temp files (every tenth round, so leftovers pile up). */
        if (round % 10 == 9) {
            sy_snapshot_store *st = sy_snapshot_store_open(dir, 0, err, sizeof err);
            assert_non_null(st);
            assert_int_equal(snap_count_entries(dir, "."), 0);
            dots_before = 0;
            sy_snapshot_store_close(st);
        }
        assert_int_equal(snap_count_entries(dir, ""), 1 + snap_count_entries(dir, "."));
    }
    printf("SIGKILL x50 over a %.1f ms write (%u tokens): %d killed (%d left a temp file), %d finished; the "
           "snapshot was complete and restorable after every one\n",
           write_s * 1e3, BIG_TOKENS, killed, temp_left, finished);
    assert_true(killed >= 5);
    sy_snapshot_store_close(lister);
    for (int i = 0; i < 2; i++) {
        lm.engine->seq_free(lm.model, seqs[i]);
        free(content[i]);
    }
    free(path);
    free(dir);
    sy_loaded_model_close(&lm);
}

/* ---- a full disk --------------------------------------------------------------------------------------------- */

#define CHECK(cond, ...)                                                                                             \
    do {                                                                                                             \
        if (!(cond)) {                                                                                               \
            fflush(stdout);                                                                                          \
            fprintf(stderr, "full disk: " __VA_ARGS__);                                                              \
            fputc('\n', stderr);                                                                                     \
            _exit(1);                                                                                                \
        }                                                                                                            \
    } while (0)

/* A private tmpfs of 256 KiB over dir; false when not permitted. */
static bool mount_small_tmpfs(const char *dir) {
    if (unshare(CLONE_NEWNS) != 0) return false;
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) return false;
    return mount("tmpfs", dir, "tmpfs", MS_NOSUID | MS_NODEV, "size=256k,mode=0755") == 0;
}

/* Prepared by the parent (cmocka's asserts must not run in the child). */
typedef struct full_disk_case {
    sy_loaded_model lm;
    sy_snapshot_key key;
    int32_t *small, *big, *other;
    sy_seq *small_seq, *big_seq, *other_seq;
} full_disk_case;

static void full_disk_child(const char *dir, full_disk_case *c) {
    const char *how;
    const char *expected;
    if (mount_small_tmpfs(dir)) {
        how = "a 256 KiB tmpfs in a private mount namespace (ENOSPC)";
        expected = strerror(ENOSPC);
    } else {
        struct rlimit lim = {256 * 1024, 256 * 1024};
        CHECK(setrlimit(RLIMIT_FSIZE, &lim) == 0, "setrlimit: %s", strerror(errno));
        signal(SIGXFSZ, SIG_IGN);
        how = "RLIMIT_FSIZE of 256 KiB with SIGXFSZ ignored (EFBIG; mounting a tmpfs was not permitted)";
        expected = strerror(EFBIG);
    }
    printf("full disk reproduced with %s\n", how);
    fflush(stdout);
    const sy_engine_state_api *state = c->lm.plugin->engine_state;
    char err[1024];
    sy_snapshot_store *st = sy_snapshot_store_open(dir, 0, err, sizeof err);
    CHECK(st != NULL, "store: %s", err);
    char *small_path = NULL;
    sy_snapshot_error e = sy_snapshot_store_save(st, &c->key, state, c->lm.model, c->small_seq, c->small, 1000,
                                                 &small_path, NULL, err, sizeof err);
    CHECK(e == SY_SNAPSHOT_OK, "the small snapshot: %s", err);
    sy_snapshot_counters before, after;
    sy_snapshot_get_counters(&before);

    e = sy_snapshot_store_save(st, &c->key, state, c->lm.model, c->big_seq, c->big, BIG_TOKENS, NULL, NULL, err,
                               sizeof err);
    printf("the big write failed as it must: %s\n", err);
    CHECK(e == SY_SNAPSHOT_ERR_IO, "the big write gave %s: %s", sy_snapshot_error_name(e), err);
    CHECK(strstr(err, expected) != NULL, "the message does not carry '%s': %s", expected, err);
    sy_snapshot_get_counters(&after);
    CHECK(after.write_failures == before.write_failures + 1, "the failure was not counted");
    /* Nothing partial, no temp file: only the small snapshot. */
    CHECK(snap_count_entries(dir, "") == 1, "%zu entries after the failed write", snap_count_entries(dir, ""));
    int32_t *cands[2] = {c->small, c->small};
    CHECK(snapshot_holds(&c->lm, small_path, cands, 1000) == 0, "the older snapshot is damaged");
    /* The store goes on working once there is room. */
    e = sy_snapshot_store_save(st, &c->key, state, c->lm.model, c->other_seq, c->other, 700, NULL, NULL, err,
                               sizeof err);
    CHECK(e == SY_SNAPSHOT_OK, "a small write after the failure: %s", err);
    CHECK(snap_count_entries(dir, "") == 2, "%zu entries after the last write", snap_count_entries(dir, ""));
    free(small_path);
    sy_snapshot_store_close(st);
    fflush(stdout);
    _exit(0);
}

static void full_disk_fails_cleanly(void **state) {
    (void)state;
    char *dir = sy_path_join(env.dir, "full");
    assert_int_equal(mkdir(dir, 0755), 0);
    full_disk_case c;
    serve_open_model(&env, model_path, NULL, 0, &c.lm);
    snap_key(&c.lm, &c.key);
    c.small = snap_make_tokens(3, 1000);
    c.big = snap_make_tokens(4, BIG_TOKENS);
    c.other = snap_make_tokens(5, 700);
    c.small_seq = snap_sequence(&c.lm, c.small, 1000);
    c.big_seq = snap_sequence(&c.lm, c.big, BIG_TOKENS);
    c.other_seq = snap_sequence(&c.lm, c.other, 700);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) full_disk_child(dir, &c);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    c.lm.engine->seq_free(c.lm.model, c.small_seq);
    c.lm.engine->seq_free(c.lm.model, c.big_seq);
    c.lm.engine->seq_free(c.lm.model, c.other_seq);
    free(c.small);
    free(c.big);
    free(c.other);
    sy_loaded_model_close(&c.lm);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(sigkill_during_writes),
        cmocka_unit_test(full_disk_fails_cleanly),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
