/* The disk KV store (plugins/common/kv_cache.h) on its own: what a reader sees is what was written, rounded to
 * F16, whether it comes from the tile buffer or is widened on the fly; groups are shared by forks and copied on
 * write; truncation and free give groups back; the files grow one group at a time and are removed at the end. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "kv_cache.h"
#include "sy_kernels.h"

#define LAYERS 3
#define KV_DIM 24
#define THREADS 2

static char dir[256];

static int setup(void **state) {
    (void)state;
    snprintf(dir, sizeof dir, "%s/sy-kv-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    return rmdir(dir);
}

/* The value written for (layer, position, column, K or V) by a writer with this salt. */
static float value(uint32_t l, uint32_t p, uint32_t c, int kind, uint32_t salt) {
    return (float)((l * 7 + p * 3 + c * 5 + (unsigned)kind + salt * 11) % 97) / 13.0f - 3.3f;
}

static void write_positions(const sy_tf_kv_store_ops *ops, sy_kv_cache *c, void *s, uint32_t from, uint32_t to,
                            uint32_t salt) {
    char err[256];
    assert_true(ops->reserve(c, s, from, to, err, sizeof err));
    float k[KV_DIM], v[KV_DIM];
    for (uint32_t p = from; p < to; p++) {
        for (uint32_t l = 0; l < LAYERS; l++) {
            for (uint32_t i = 0; i < KV_DIM; i++) k[i] = value(l, p, i, 0, salt), v[i] = value(l, p, i, 1, salt);
            ops->write(c, s, l, p, k, v);
        }
    }
}

/* Every position below n equals the written values rounded to F16 (salt 0 below `split`, `salt` from there). */
static void check_positions(const sy_tf_kv_store_ops *ops, sy_kv_cache *c, void *s, uint32_t n, uint32_t col,
                            uint32_t n_cols, uint32_t split, uint32_t salt) {
    for (uint32_t l = 0; l < LAYERS; l++) {
        if (ops->prepare) {
            void *kvs[1] = {s};
            ops->prepare(c, l, kvs, &n, 1);
        }
        for (uint32_t p0 = 0; p0 < n;) {
            sy_tf_kv_view view;
            ops->read(c, s, l, p0, n - p0, col, n_cols, p0 % THREADS, &view);
            assert_true(view.n >= 1 && view.n <= n - p0 && view.n <= SY_KV_GROUP);
            for (uint32_t i = 0; i < view.n; i++)
                for (uint32_t j = 0; j < n_cols; j++) {
                    uint32_t sl = p0 + i < split ? 0 : salt;
                    float wk = sy_f16_to_f32(sy_f32_to_f16(value(l, p0 + i, col + j, 0, sl)));
                    float wv = sy_f16_to_f32(sy_f32_to_f16(value(l, p0 + i, col + j, 1, sl)));
                    assert_true(view.k[i * view.stride + j] == wk);
                    assert_true(view.v[i * view.stride + j] == wv);
                }
            p0 += view.n;
        }
    }
}

static void run_store(uint32_t buffer_mb) {
    char err[256];
    sy_kv_cache_options o = {dir, 4 * SY_KV_GROUP, buffer_mb, false};
    sy_kv_cache *c = sy_kv_cache_create(&o, LAYERS, KV_DIM, THREADS, err, sizeof err);
    if (c == NULL) fail_msg("%s", err);
    const sy_tf_kv_store_ops *ops = sy_kv_cache_ops();
    void *a = ops->seq_create(c);
    write_positions(ops, c, a, 0, 100, 0);
    check_positions(ops, c, a, 100, 0, KV_DIM, 100, 0);
    check_positions(ops, c, a, 100, 8, 8, 100, 0);
    sy_kv_cache_stats st;
    sy_kv_cache_stats_get(c, &st);
    assert_int_equal(st.groups_in_use, 2);
    assert_int_equal(st.groups_in_files, 2);
    if (buffer_mb) assert_true(st.tile_hits > 0);
    else assert_int_equal(st.tile_hits, 0);
    struct stat sb;
    assert_int_equal(stat(sy_kv_cache_file_path(c, 2, 1), &sb), 0);
    assert_int_equal(sb.st_size, 2 * SY_KV_GROUP * KV_DIM * 2);

    /* a fork shares both groups; writing into the second copies it, and a's positions stay as they were */
    void *b = ops->seq_create(c);
    assert_true(ops->copy_prefix(c, b, a, 70, err, sizeof err));
    sy_kv_cache_stats_get(c, &st);
    assert_int_equal(st.groups_in_use, 2);
    write_positions(ops, c, b, 70, 80, 1);
    sy_kv_cache_stats_get(c, &st);
    assert_int_equal(st.groups_in_use, 3);
    check_positions(ops, c, b, 80, 0, KV_DIM, 70, 1);
    check_positions(ops, c, a, 100, 0, KV_DIM, 100, 0);

    /* truncation and free give groups back; then the cache is full at 4 groups */
    ops->truncate(c, a, 10);
    sy_kv_cache_stats_get(c, &st);
    assert_int_equal(st.groups_in_use, 2); /* a keeps the shared first group, b its copy of the second */
    ops->seq_free(c, b);
    sy_kv_cache_stats_get(c, &st);
    assert_int_equal(st.groups_in_use, 1);
    write_positions(ops, c, a, 10, 4 * SY_KV_GROUP, 2);
    check_positions(ops, c, a, 4 * SY_KV_GROUP, 0, KV_DIM, 10, 2);
    assert_false(ops->reserve(c, a, 4 * SY_KV_GROUP, 4 * SY_KV_GROUP + 1, err, sizeof err));
    assert_non_null(strstr(err, "full"));
    sy_tf_memory_info mem = {0};
    sy_kv_cache_memory(c, &mem);
    assert_int_equal(mem.kv_bytes, 4ull * SY_KV_GROUP * KV_DIM * 2 * 2 * LAYERS);
    assert_int_equal(mem.mapped_bytes, mem.kv_bytes);
    ops->seq_free(c, a);
    sy_kv_cache_destroy(c);
    /* nothing left behind */
    assert_int_equal(rmdir(dir), 0);
    assert_int_equal(mkdir(dir, 0700), 0);
}

static void test_with_tile_buffer(void **state) {
    (void)state;
    run_store(1);
}

static void test_without_tile_buffer(void **state) {
    (void)state;
    run_store(0);
}

static void test_bad_options(void **state) {
    (void)state;
    char err[256];
    sy_kv_cache_options o = {"/nonexistent-dir", 64, 0, false};
    assert_null(sy_kv_cache_create(&o, LAYERS, KV_DIM, THREADS, err, sizeof err));
    assert_non_null(strstr(err, "/nonexistent-dir"));
    o.dirs = ",";
    assert_null(sy_kv_cache_create(&o, LAYERS, KV_DIM, THREADS, err, sizeof err));
    o.dirs = dir;
    o.max_tokens = 0;
    assert_null(sy_kv_cache_create(&o, LAYERS, KV_DIM, THREADS, err, sizeof err));
    assert_non_null(strstr(err, "kv_max_tokens"));
    o.max_tokens = SY_KV_MAX_TOKENS;
    assert_null(sy_kv_cache_create(&o, 4096, 1u << 20, THREADS, err, sizeof err)); /* too much to map */
    /* keep_files leaves the directory and files */
    o.max_tokens = 64;
    o.keep_files = true;
    sy_kv_cache *c = sy_kv_cache_create(&o, LAYERS, KV_DIM, THREADS, err, sizeof err);
    assert_non_null(c);
    char kept[512];
    snprintf(kept, sizeof kept, "%s", sy_kv_cache_file_path(c, 0, 0));
    sy_kv_cache_destroy(c);
    struct stat sb;
    assert_int_equal(stat(kept, &sb), 0);
    /* clean up by hand: the files of every layer, then their directory */
    char *slash = strrchr(kept, '/');
    *slash = '\0';
    for (int l = 0; l < LAYERS; l++)
        for (int k = 0; k < 2; k++) {
            char f[600];
            snprintf(f, sizeof f, "%s/layer-%03d.%c.f16", kept, l, k ? 'v' : 'k');
            assert_int_equal(unlink(f), 0);
        }
    assert_int_equal(rmdir(kept), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_with_tile_buffer),
        cmocka_unit_test(test_without_tile_buffer),
        cmocka_unit_test(test_bad_options),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
