/* The GGUF writer (plugins/common/gguf_writer.h), read back by the GGUF reader: every metadata type, tensors of
 * several types and ranks written in odd chunks, alignment, copying all metadata of a real file, and refusals:
 * bad names, shapes, types and keys, too much or too little data, an unusable alignment. A file only appears at
 * its destination when committed; an abandoned writer leaves nothing behind. */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "gguf.h"
#include "gguf_test_util.h"
#include "gguf_writer.h"

static char tmpdir[256];
static char err[512];

static int setup(void **state) {
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/sy-gguf-writer-XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

static size_t files_in_tmpdir(void) {
    DIR *d = opendir(tmpdir);
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n;
}

static bool exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

static void test_roundtrip(void **state) {
    (void)state;
    char path[512];
    snprintf(path, sizeof path, "%s/roundtrip.gguf", tmpdir);
    sy_gguf_writer *w = sy_gguf_writer_new(err, sizeof err);
    assert_non_null(w);
    assert_true(sy_gguf_writer_set_u32(w, "a.u32", 4000000000u, err, sizeof err));
    assert_true(sy_gguf_writer_set_i32(w, "a.i32", -7, err, sizeof err));
    assert_true(sy_gguf_writer_set_u64(w, "a.u64", 0xfedcba9876543210ull, err, sizeof err));
    assert_true(sy_gguf_writer_set_f32(w, "a.f32", 0.1f, err, sizeof err));
    assert_true(sy_gguf_writer_set_bool(w, "a.bool", true, err, sizeof err));
    assert_true(sy_gguf_writer_set_string(w, "a.str", "nul\0inside", 10, err, sizeof err));
    assert_true(sy_gguf_writer_set_string(w, "a.empty", "", 0, err, sizeof err));
    int32_t ints[3] = {-1, 0, 2147483647};
    assert_true(sy_gguf_writer_set_array(w, "a.ints", SY_GGUF_INT32, ints, 3, err, sizeof err));
    uint8_t bytes[2] = {0, 255};
    assert_true(sy_gguf_writer_set_array(w, "a.u8s", SY_GGUF_UINT8, bytes, 2, err, sizeof err));
    double dbl[2] = {1e300, -0.5};
    assert_true(sy_gguf_writer_set_array(w, "a.f64s", SY_GGUF_FLOAT64, dbl, 2, err, sizeof err));
    assert_true(sy_gguf_writer_set_array(w, "a.none", SY_GGUF_FLOAT32, NULL, 0, err, sizeof err));
    const char *strs[3] = {"x", "", "Ġthe"};
    size_t lens[3] = {1, 0, strlen("Ġthe")};
    assert_true(sy_gguf_writer_set_string_array(w, "a.strs", strs, lens, 3, err, sizeof err));
    /* replacing moves the key to the end; removing drops it */
    assert_true(sy_gguf_writer_set_u32(w, "a.u32", 5, err, sizeof err));
    assert_true(sy_gguf_writer_set_u32(w, "a.gone", 1, err, sizeof err));
    assert_true(sy_gguf_writer_remove(w, "a.gone"));
    assert_false(sy_gguf_writer_remove(w, "a.gone"));
    assert_true(sy_gguf_writer_set_u32(w, "general.alignment", 64, err, sizeof err));

    static const struct {
        const char *name;
        sy_dtype type;
        uint32_t n_dims;
        uint64_t dims[3];
    } tensors[] = {
        {"vec", SY_DTYPE_F32, 1, {5}},
        {"mat.f16", SY_DTYPE_F16, 2, {3, 7}},
        {"mat.q8_0", SY_DTYPE_Q8_0, 2, {64, 3}},
        {"cube.q4_k", SY_DTYPE_Q4_K, 3, {256, 2, 2}},
        {"a_name_of_exactly_sixty_three_bytes_for_the_ggml_limit_12345678", SY_DTYPE_BF16, 1, {1}},
    };
    size_t total = 0;
    for (size_t i = 0; i < 5; i++) {
        assert_true(strlen(tensors[i].name) <= SY_GGUF_WRITER_MAX_NAME);
        assert_true(sy_gguf_writer_add_tensor(w, tensors[i].name, tensors[i].type, tensors[i].n_dims, tensors[i].dims,
                                              err, sizeof err));
        total += sy_gguf_writer_tensor_bytes(w, i);
    }
    assert_int_equal(sy_gguf_writer_tensor_count(w), 5);
    assert_int_equal(sy_gguf_writer_tensor_bytes(w, 3), 4 * 144);
    uint64_t planned = sy_gguf_writer_file_size(w);
    assert_true(sy_gguf_writer_open(w, path, err, sizeof err));
    uint8_t *data = gt_xmalloc(total);
    for (size_t i = 0; i < total; i++) data[i] = (uint8_t)(i * 31 + 7);
    /* odd chunks: byte by byte, then the rest */
    for (size_t i = 0; i < 11; i++) assert_true(sy_gguf_writer_write(w, data + i, 1, err, sizeof err));
    assert_true(sy_gguf_writer_write(w, data + 11, total - 11, err, sizeof err));
    assert_false(exists(path)); /* not before commit */
    assert_true(sy_gguf_writer_commit(w, err, sizeof err));
    sy_gguf_writer_free(w);
    assert_int_equal(files_in_tmpdir(), 1);

    sy_gguf *g = sy_gguf_open(path, err, sizeof err);
    if (g == NULL) fail_msg("%s", err);
    assert_int_equal(sy_gguf_version(g), 3);
    assert_int_equal(sy_gguf_alignment(g), 64);
    assert_int_equal(sy_gguf_file_size(g), planned);
    uint64_t u;
    int64_t s;
    double d;
    bool b;
    const char *str;
    size_t len;
    assert_int_equal(sy_gguf_get_uint(g, "a.u32", &u), 1);
    assert_int_equal(u, 5);
    assert_int_equal(sy_gguf_kv_type(g, (uint64_t)sy_gguf_find_key(g, "a.u32")), SY_GGUF_UINT32);
    assert_string_equal(sy_gguf_kv_key(g, sy_gguf_kv_count(g) - 2), "a.u32"); /* moved to the end */
    assert_int_equal(sy_gguf_get_int(g, "a.i32", &s), 1);
    assert_int_equal(s, -7);
    assert_int_equal(sy_gguf_get_uint(g, "a.u64", &u), 1);
    assert_true(u == 0xfedcba9876543210ull);
    assert_int_equal(sy_gguf_get_float(g, "a.f32", &d), 1);
    assert_true((float)d == 0.1f);
    assert_int_equal(sy_gguf_get_bool(g, "a.bool", &b), 1);
    assert_true(b);
    assert_int_equal(sy_gguf_get_string(g, "a.str", &str, &len), 1);
    assert_int_equal(len, 10);
    assert_memory_equal(str, "nul\0inside", 10);
    assert_int_equal(sy_gguf_get_string(g, "a.empty", &str, &len), 1);
    assert_int_equal(len, 0);
    assert_int_equal(sy_gguf_find_key(g, "a.gone"), -1);
    sy_gguf_type et;
    uint64_t count;
    int64_t kv = sy_gguf_find_key(g, "a.ints");
    assert_true(sy_gguf_kv_array(g, (uint64_t)kv, &et, &count) && et == SY_GGUF_INT32 && count == 3);
    for (uint64_t i = 0; i < 3; i++) assert_true(sy_gguf_array_int(g, (uint64_t)kv, i, &s) && s == ints[i]);
    kv = sy_gguf_find_key(g, "a.u8s");
    assert_true(sy_gguf_kv_array(g, (uint64_t)kv, &et, &count) && et == SY_GGUF_UINT8 && count == 2);
    assert_true(sy_gguf_array_uint(g, (uint64_t)kv, 1, &u) && u == 255);
    kv = sy_gguf_find_key(g, "a.f64s");
    assert_true(sy_gguf_array_float(g, (uint64_t)kv, 0, &d) && d == 1e300);
    kv = sy_gguf_find_key(g, "a.none");
    assert_true(sy_gguf_kv_array(g, (uint64_t)kv, &et, &count) && et == SY_GGUF_FLOAT32 && count == 0);
    kv = sy_gguf_find_key(g, "a.strs");
    for (uint64_t i = 0; i < 3; i++) {
        assert_true(sy_gguf_array_string(g, (uint64_t)kv, i, &str, &len));
        assert_int_equal(len, lens[i]);
        assert_memory_equal(str, strs[i], len);
    }
    size_t at = 0;
    for (size_t i = 0; i < 5; i++) {
        const sy_gguf_tensor *t = sy_gguf_tensor_at(g, i);
        assert_string_equal(t->name, tensors[i].name);
        assert_int_equal(t->type, tensors[i].type);
        assert_int_equal(t->n_dims, tensors[i].n_dims);
        for (uint32_t k = 0; k < t->n_dims; k++) assert_int_equal(t->dims[k], tensors[i].dims[k]);
        assert_int_equal(t->offset % 64, 0);
        assert_memory_equal(t->data, data + at, t->n_bytes);
        at += t->n_bytes;
    }
    sy_gguf_close(g);
    free(data);
    unlink(path);
}

/* Every metadata entry of a real model (strings, string arrays, floats, ints) survives a copy. */
static void test_copy_all_metadata(void **state) {
    (void)state;
    char src[1024], path[512];
    sy_gguf *g = sy_gguf_open(gt_source_path(src, sizeof src, "tests/fixtures/stories260K/stories260K.gguf"), err,
                              sizeof err);
    assert_non_null(g);
    snprintf(path, sizeof path, "%s/copy.gguf", tmpdir);
    sy_gguf_writer *w = sy_gguf_writer_new(err, sizeof err);
    for (uint64_t i = 0; i < sy_gguf_kv_count(g); i++) assert_true(sy_gguf_writer_copy_kv(w, g, i, err, sizeof err));
    assert_false(sy_gguf_writer_copy_kv(w, g, sy_gguf_kv_count(g), err, sizeof err));
    assert_true(sy_gguf_writer_open(w, path, err, sizeof err));
    assert_true(sy_gguf_writer_commit(w, err, sizeof err));
    sy_gguf_writer_free(w);
    sy_gguf *c = sy_gguf_open(path, err, sizeof err);
    assert_non_null(c);
    assert_int_equal(sy_gguf_kv_count(c), sy_gguf_kv_count(g));
    assert_int_equal(sy_gguf_tensor_count(c), 0);
    /* the metadata bytes are the same bytes */
    uint64_t a0 = 24, a1 = sy_gguf_tensor_infos_offset(g), b1 = sy_gguf_tensor_infos_offset(c);
    assert_int_equal(a1 - a0, b1 - a0);
    assert_memory_equal((const uint8_t *)sy_gguf_file_data(g) + a0, (const uint8_t *)sy_gguf_file_data(c) + a0,
                        a1 - a0);
    sy_gguf_close(c);
    sy_gguf_close(g);
    unlink(path);
}

static void test_refusals(void **state) {
    (void)state;
    char path[512];
    snprintf(path, sizeof path, "%s/refused.gguf", tmpdir);
    sy_gguf_writer *w = sy_gguf_writer_new(err, sizeof err);
    uint64_t dims[5] = {256, 2, 1, 1, 1};
    char long_name[80];
    memset(long_name, 'x', 64);
    long_name[64] = '\0';
    assert_false(sy_gguf_writer_add_tensor(w, long_name, SY_DTYPE_F32, 1, dims, err, sizeof err));
    assert_non_null(strstr(err, "bytes"));
    assert_false(sy_gguf_writer_add_tensor(w, "", SY_DTYPE_F32, 1, dims, err, sizeof err));
    assert_false(sy_gguf_writer_add_tensor(w, NULL, SY_DTYPE_F32, 1, dims, err, sizeof err));
    assert_false(sy_gguf_writer_add_tensor(w, "t", (sy_dtype)99, 1, dims, err, sizeof err));
    assert_false(sy_gguf_writer_add_tensor(w, "t", SY_DTYPE_F32, 0, dims, err, sizeof err));
    assert_false(sy_gguf_writer_add_tensor(w, "t", SY_DTYPE_F32, 5, dims, err, sizeof err));
    uint64_t zero[2] = {256, 0};
    assert_false(sy_gguf_writer_add_tensor(w, "t", SY_DTYPE_F32, 2, zero, err, sizeof err));
    uint64_t odd[2] = {128, 2};
    assert_false(sy_gguf_writer_add_tensor(w, "t", SY_DTYPE_Q4_K, 2, odd, err, sizeof err));
    assert_non_null(strstr(err, "block"));
    uint64_t huge[4] = {1ull << 40, 1ull << 40, 1ull << 40, 1};
    assert_false(sy_gguf_writer_add_tensor(w, "t", SY_DTYPE_F32, 3, huge, err, sizeof err));
    assert_true(sy_gguf_writer_add_tensor(w, "t", SY_DTYPE_F32, 2, dims, err, sizeof err));
    assert_false(sy_gguf_writer_add_tensor(w, "t", SY_DTYPE_F32, 2, dims, err, sizeof err)); /* twice */
    assert_false(sy_gguf_writer_set_u32(w, "", 1, err, sizeof err));
    assert_false(sy_gguf_writer_set_array(w, "k", SY_GGUF_STRING, NULL, 0, err, sizeof err));
    assert_false(sy_gguf_writer_write(w, "x", 1, err, sizeof err)); /* not open */
    assert_false(sy_gguf_writer_commit(w, err, sizeof err));
    /* an unusable alignment stops open */
    assert_true(sy_gguf_writer_set_u32(w, "general.alignment", 48, err, sizeof err));
    assert_false(sy_gguf_writer_open(w, path, err, sizeof err));
    assert_non_null(strstr(err, "alignment"));
    sy_gguf_writer_free(w);

    /* too much data, too little data: refused, and nothing appears */
    w = sy_gguf_writer_new(err, sizeof err);
    assert_true(sy_gguf_writer_add_tensor(w, "t", SY_DTYPE_F32, 2, dims, err, sizeof err));
    assert_true(sy_gguf_writer_open(w, path, err, sizeof err));
    assert_false(sy_gguf_writer_set_u32(w, "late", 1, err, sizeof err));
    assert_false(sy_gguf_writer_add_tensor(w, "late", SY_DTYPE_F32, 1, dims, err, sizeof err));
    assert_false(sy_gguf_writer_open(w, path, err, sizeof err));
    float buf[600] = {0};
    assert_true(sy_gguf_writer_write(w, buf, 100 * sizeof(float), err, sizeof err));
    assert_false(sy_gguf_writer_commit(w, err, sizeof err)); /* 412 floats missing */
    assert_non_null(strstr(err, "bytes written"));
    assert_false(sy_gguf_writer_write(w, buf, 500 * sizeof(float), err, sizeof err)); /* 88 too many */
    assert_false(exists(path));
    sy_gguf_writer_free(w); /* abandons the temp file */
    assert_int_equal(files_in_tmpdir(), 0);

    /* no directory to write into */
    w = sy_gguf_writer_new(err, sizeof err);
    assert_false(sy_gguf_writer_open(w, "/nonexistent-dir/x.gguf", err, sizeof err));
    assert_non_null(strstr(err, "/nonexistent-dir/x.gguf"));
    sy_gguf_writer_free(w);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_copy_all_metadata),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
