/* GGUF reader: a valid file read back exactly, and hostile files (truncations, huge counts, bad types,
 * out-of-range / overlapping / misaligned offsets, duplicates) refused with a message naming the problem. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "gguf.h"
#include "gguf_builder.h"

/* The knobs of the reference file; defaults give a valid file. */
typedef struct spec {
    uint32_t version;
    uint32_t alignment; /* written as general.alignment; 0 leaves the key out (default 32) */
    uint32_t w_type;
    uint32_t w_n_dims;
    uint64_t w_dims[5];
    uint64_t w_offset;
    const char *q_name;
    uint64_t q_offset;
    size_t data_bytes; /* bytes of tensor data written after the padding */
} spec;

static spec valid_spec(void) {
    spec s = {3, 64, 0, 2, {4, 2, 1, 1, 1}, 0, "q", 64, 64 + 34};
    return s;
}

/* A file with 2 tensors and 7 metadata keys of most types. */
static void build(gguf_buf *b, const spec *s) {
    gb_header(b, s->version, 2, s->alignment ? 7 : 6);
    gb_kv_str(b, "general.architecture", "llama");
    if (s->alignment) gb_kv_u32(b, "general.alignment", s->alignment);
    gb_key(b, "test.i32", 5);
    gb_i32(b, -5);
    gb_key(b, "test.f64", 12);
    double d = 0.25;
    gb_bytes(b, &d, 8);
    gb_kv_bool(b, "test.bool", 1);
    gb_kv_array(b, "tokenizer.ggml.tokens", 8, 3);
    gb_str(b, "a");
    gb_str(b, "bb");
    gb_str(b, "ccc");
    gb_kv_array(b, "test.floats", 6, 3);
    gb_f32(b, 1.5f);
    gb_f32(b, -2.0f);
    gb_f32(b, 3.0f);
    gb_tensor_info(b, "w", s->w_n_dims, s->w_dims, s->w_type, s->w_offset);
    uint64_t qdims[1] = {32};
    gb_tensor_info(b, s->q_name, 1, qdims, 8 /* q8_0 */, s->q_offset);
    gb_pad(b, s->alignment ? s->alignment : 32);
    for (size_t i = 0; i < s->data_bytes; i++) gb_u8(b, (uint8_t)i);
}

static sy_gguf *open_spec(const spec *s, gguf_buf *b, char *err, size_t err_size) {
    build(b, s);
    return sy_gguf_open_memory(b->data, b->size, err, err_size);
}

/* Opening must fail and the message must contain `needle`. */
static void expect_error(const void *data, size_t size, const char *needle) {
    char err[256] = "";
    sy_gguf *g = sy_gguf_open_memory(data, size, err, sizeof err);
    if (g != NULL) {
        sy_gguf_close(g);
        fail_msg("opened a bad file (expected an error containing '%s')", needle);
    }
    if (strstr(err, needle) == NULL) fail_msg("error '%s' does not contain '%s'", err, needle);
    assert_null(strchr(err, '\n'));
}

static void expect_spec_error(const spec *s, const char *needle) {
    gguf_buf b = {0};
    build(&b, s);
    expect_error(b.data, b.size, needle);
    gb_free(&b);
}

static void test_valid_file_reads_back(void **state) {
    (void)state;
    spec s = valid_spec();
    gguf_buf b = {0};
    char err[256];
    sy_gguf *g = open_spec(&s, &b, err, sizeof err);
    if (g == NULL) fail_msg("%s", err);
    assert_int_equal(sy_gguf_version(g), 3);
    assert_int_equal(sy_gguf_alignment(g), 64);
    assert_int_equal(sy_gguf_kv_count(g), 7);
    assert_int_equal(sy_gguf_data_offset(g) % 64, 0);
    assert_true(sy_gguf_header_size(g) <= sy_gguf_data_offset(g));
    /* 2 tensor infos: "w" 2-D (8+1 + 4 + 16 + 4 + 8 bytes) and "q" 1-D (8+1 + 4 + 8 + 4 + 8) */
    assert_int_equal(sy_gguf_header_size(g) - sy_gguf_tensor_infos_offset(g), 41 + 33);

    const char *str;
    size_t len;
    assert_int_equal(sy_gguf_get_string(g, "general.architecture", &str, &len), 1);
    assert_int_equal(len, 5);
    assert_memory_equal(str, "llama", 5);
    char *dup = sy_gguf_dup_string(g, "general.architecture");
    assert_string_equal(dup, "llama");
    free(dup);

    int64_t i64;
    uint64_t u64;
    double f;
    bool flag;
    assert_int_equal(sy_gguf_get_int(g, "test.i32", &i64), 1);
    assert_int_equal(i64, -5);
    assert_int_equal(sy_gguf_get_uint(g, "test.i32", &u64), -1); /* negative: not an unsigned */
    assert_int_equal(sy_gguf_get_uint(g, "general.alignment", &u64), 1);
    assert_int_equal(u64, 64);
    assert_int_equal(sy_gguf_get_float(g, "test.f64", &f), 1);
    assert_true(f == 0.25);
    assert_int_equal(sy_gguf_get_float(g, "general.alignment", &f), -1);
    assert_int_equal(sy_gguf_get_bool(g, "test.bool", &flag), 1);
    assert_true(flag);
    assert_int_equal(sy_gguf_get_uint(g, "no.such.key", &u64), 0);
    assert_int_equal(sy_gguf_get_string(g, "test.bool", &str, &len), -1);
    assert_null(sy_gguf_dup_string(g, "test.bool"));

    int64_t kv = sy_gguf_find_key(g, "tokenizer.ggml.tokens");
    assert_true(kv >= 0);
    sy_gguf_type et;
    uint64_t count;
    assert_true(sy_gguf_kv_array(g, (uint64_t)kv, &et, &count));
    assert_int_equal(et, SY_GGUF_STRING);
    assert_int_equal(count, 3);
    assert_true(sy_gguf_array_string(g, (uint64_t)kv, 2, &str, &len));
    assert_int_equal(len, 3);
    assert_memory_equal(str, "ccc", 3);
    assert_false(sy_gguf_array_string(g, (uint64_t)kv, 3, &str, &len));
    assert_false(sy_gguf_array_float(g, (uint64_t)kv, 0, &f));

    kv = sy_gguf_find_key(g, "test.floats");
    assert_true(sy_gguf_array_float(g, (uint64_t)kv, 1, &f));
    assert_true(f == -2.0);
    assert_false(sy_gguf_array_float(g, (uint64_t)kv, 3, &f));
    assert_false(sy_gguf_array_uint(g, (uint64_t)kv, 0, &u64));
    assert_false(sy_gguf_kv_uint(g, (uint64_t)kv, &u64));

    assert_int_equal(sy_gguf_tensor_count(g), 2);
    const sy_gguf_tensor *w = sy_gguf_find_tensor(g, "w");
    assert_non_null(w);
    assert_int_equal(w->type, 0);
    assert_int_equal(w->n_dims, 2);
    assert_int_equal(w->dims[0], 4);
    assert_int_equal(w->dims[1], 2);
    assert_int_equal(w->dims[2], 1);
    assert_int_equal(w->n_elements, 8);
    assert_int_equal(w->n_bytes, 32);
    assert_int_equal(w->offset, sy_gguf_data_offset(g));
    assert_ptr_equal(w->data, b.data + w->offset);
    const sy_gguf_tensor *q = sy_gguf_find_tensor(g, "q");
    assert_non_null(q);
    assert_int_equal(q->n_bytes, 34);
    assert_int_equal(q->offset, sy_gguf_data_offset(g) + 64);
    assert_ptr_equal(sy_gguf_tensor_at(g, 1), q);
    assert_null(sy_gguf_tensor_at(g, 2));
    assert_null(sy_gguf_find_tensor(g, "nope"));
    assert_string_equal(sy_gguf_tensor_type_name(q->type), "q8_0");
    assert_string_equal(sy_gguf_tensor_type_name(16), "iq2_xxs");
    assert_null(sy_gguf_tensor_type_name(4));
    sy_gguf_close(g);
    gb_free(&b);
}

static void test_version_2_and_default_alignment(void **state) {
    (void)state;
    spec s = valid_spec();
    s.version = 2;
    s.alignment = 0;
    s.q_offset = 32;
    s.data_bytes = 32 + 34;
    gguf_buf b = {0};
    char err[256];
    sy_gguf *g = open_spec(&s, &b, err, sizeof err);
    if (g == NULL) fail_msg("%s", err);
    assert_int_equal(sy_gguf_version(g), 2);
    assert_int_equal(sy_gguf_alignment(g), 32);
    sy_gguf_close(g);
    gb_free(&b);
}

/* Every proper prefix of a valid file is refused cleanly (the sanitizers watch for stray reads). */
static void test_every_truncation_is_refused(void **state) {
    (void)state;
    spec s = valid_spec();
    gguf_buf b = {0};
    build(&b, &s);
    for (size_t n = 0; n < b.size; n++) {
        uint8_t *copy = malloc(n ? n : 1); /* exact size, so a read past the end is caught */
        memcpy(copy, b.data, n);
        char err[256] = "";
        sy_gguf *g = sy_gguf_open_memory(copy, n, err, sizeof err);
        if (g != NULL) fail_msg("prefix of %zu of %zu bytes opened", n, b.size);
        assert_true(err[0] != '\0');
        free(copy);
    }
    gb_free(&b);
}

/* Flipping any single byte never crashes; the reader either refuses or returns a consistent context. */
static void test_every_byte_mutation_is_safe(void **state) {
    (void)state;
    spec s = valid_spec();
    gguf_buf b = {0};
    build(&b, &s);
    static const uint8_t values[] = {0x00, 0xff, 0x7f, 0x80, 0x01};
    for (size_t i = 0; i < b.size; i++) {
        for (size_t v = 0; v < sizeof values; v++) {
            uint8_t *copy = malloc(b.size);
            memcpy(copy, b.data, b.size);
            copy[i] = values[v];
            char err[256];
            sy_gguf *g = sy_gguf_open_memory(copy, b.size, err, sizeof err);
            if (g != NULL) {
                for (uint64_t t = 0; t < sy_gguf_tensor_count(g); t++) {
                    const sy_gguf_tensor *ti = sy_gguf_tensor_at(g, t);
                    assert_true(ti->offset + ti->n_bytes <= b.size);
                    if (ti->n_bytes) {
                        volatile uint8_t last = ((const uint8_t *)ti->data)[ti->n_bytes - 1];
                        (void)last;
                    }
                }
                sy_gguf_close(g);
            }
            free(copy);
        }
    }
    gb_free(&b);
}

static void test_bad_header(void **state) {
    (void)state;
    spec s = valid_spec();
    s.version = 1;
    expect_spec_error(&s, "unsupported GGUF version 1");
    s.version = 4;
    expect_spec_error(&s, "unsupported GGUF version 4");
    s.version = 0x03000000u;
    expect_spec_error(&s, "big-endian");
    expect_error("GGUX\3\0\0\0", 8, "bad magic");
    expect_error("", 0, "bad magic");
}

static void test_huge_counts(void **state) {
    (void)state;
    gguf_buf b = {0};
    gb_header(&b, 3, 0, UINT64_MAX);
    expect_error(b.data, b.size, "metadata count");
    gb_free(&b);
    gb_header(&b, 3, (uint64_t)1 << 60, 0);
    expect_error(b.data, b.size, "tensor count");
    gb_free(&b);
    /* a key length past the end */
    gb_header(&b, 3, 0, 1);
    gb_u64(&b, UINT64_MAX - 3);
    gb_bytes(&b, "abcdefghijkl", 12);
    expect_error(b.data, b.size, "key runs past the end");
    gb_free(&b);
    /* a string value length past the end */
    gb_header(&b, 3, 0, 1);
    gb_key(&b, "k", 8);
    gb_u64(&b, 1000);
    gb_bytes(&b, "xy", 2);
    expect_error(b.data, b.size, "metadata key 'k': string runs past the end");
    gb_free(&b);
    /* huge array counts, numeric and strings: refused before anything is sized by them */
    gb_header(&b, 3, 0, 1);
    gb_kv_array(&b, "arr", 10 /* uint64 */, UINT64_MAX / 4);
    gb_u64(&b, 1);
    expect_error(b.data, b.size, "metadata key 'arr': array of");
    gb_free(&b);
    gb_header(&b, 3, 0, 1);
    gb_kv_array(&b, "strs", 8, (uint64_t)1 << 62);
    gb_str(&b, "a");
    expect_error(b.data, b.size, "metadata key 'strs': array of");
    gb_free(&b);
    /* a string array whose 2nd element runs past the end */
    gb_header(&b, 3, 0, 1);
    gb_kv_array(&b, "strs", 8, 2);
    gb_str(&b, "a");
    gb_u64(&b, 99);
    expect_error(b.data, b.size, "string 1 of the array runs past the end");
    gb_free(&b);
}

static void test_bad_value_types(void **state) {
    (void)state;
    gguf_buf b = {0};
    gb_header(&b, 3, 0, 1);
    gb_key(&b, "bad.type", 13);
    gb_u32(&b, 0);
    expect_error(b.data, b.size, "metadata key 'bad.type': invalid value type 13");
    gb_free(&b);
    gb_header(&b, 3, 0, 1);
    gb_kv_array(&b, "nested", 9, 1);
    gb_u32(&b, 4);
    gb_u64(&b, 0);
    expect_error(b.data, b.size, "metadata key 'nested': arrays of arrays");
    gb_free(&b);
    gb_header(&b, 3, 0, 1);
    gb_kv_array(&b, "elem", 77, 0);
    expect_error(b.data, b.size, "metadata key 'elem': invalid array element type 77");
    gb_free(&b);
    /* keys: empty, holding NUL, duplicated */
    gb_header(&b, 3, 0, 1);
    gb_u64(&b, 0);
    gb_u32(&b, 4);
    gb_u32(&b, 1);
    expect_error(b.data, b.size, "invalid key");
    gb_free(&b);
    gb_header(&b, 3, 0, 1);
    gb_u64(&b, 3);
    gb_bytes(&b, "a\0b", 3);
    gb_u32(&b, 4);
    gb_u32(&b, 1);
    expect_error(b.data, b.size, "invalid key 'a?b'");
    gb_free(&b);
    gb_header(&b, 3, 0, 2);
    gb_kv_u32(&b, "twice", 1);
    gb_kv_u32(&b, "twice", 2);
    expect_error(b.data, b.size, "metadata key 'twice' appears twice");
    gb_free(&b);
    /* a scalar cut off */
    gb_header(&b, 3, 0, 1);
    gb_key(&b, "cut", 10);
    gb_u32(&b, 0);
    expect_error(b.data, b.size, "metadata key 'cut': file ends inside its uint64 value");
    gb_free(&b);
}

static void test_bad_alignment(void **state) {
    (void)state;
    spec s = valid_spec();
    s.alignment = 48;
    expect_spec_error(&s, "'general.alignment': 48 is not a power of two");
    gguf_buf b = {0};
    gb_header(&b, 3, 0, 1);
    gb_kv_str(&b, "general.alignment", "32");
    expect_error(b.data, b.size, "'general.alignment': expected an unsigned integer, found string");
    gb_free(&b);
}

static void test_bad_tensor_infos(void **state) {
    (void)state;
    spec s = valid_spec();
    s.w_n_dims = 5;
    expect_spec_error(&s, "tensor 'w': 5 dimensions");

    s = valid_spec();
    s.w_type = 4; /* a removed ggml type */
    expect_spec_error(&s, "tensor 'w': unknown tensor type id 4");
    s.w_type = 1000;
    expect_spec_error(&s, "tensor 'w': unknown tensor type id 1000");

    s = valid_spec();
    s.w_dims[0] = (uint64_t)1 << 40;
    s.w_dims[1] = (uint64_t)1 << 40;
    expect_spec_error(&s, "tensor 'w': element count overflows");
    s.w_dims[0] = UINT64_MAX;
    s.w_dims[1] = 1;
    expect_spec_error(&s, "tensor 'w': element count overflows");

    s = valid_spec();
    s.w_type = 8; /* q8_0: rows must be whole blocks of 32 */
    s.w_dims[0] = 33;
    expect_spec_error(&s, "tensor 'w': row of 33 elements is not a whole number of q8_0 blocks");

    /* One row of 2^62 f32 (or i64, f64) elements: its bytes would wrap to 0 in 64 bits. */
    for (int k = 0; k < 3; k++) {
        s = valid_spec();
        s.w_type = k == 0 ? 0 : k == 1 ? 27 : 28;
        s.w_dims[0] = (uint64_t)1 << 62;
        s.w_dims[1] = 1;
        expect_spec_error(&s, "tensor 'w': the bytes of a row of 4611686018427387904");
    }

    s = valid_spec();
    s.w_dims[0] = (uint64_t)1 << 30; /* 4 GiB of f32: far past the end */
    expect_spec_error(&s, "tensor 'w': data extends past the end of the file");

    s = valid_spec();
    s.q_offset = UINT64_MAX - 63; /* aligned, but wraps when added */
    expect_spec_error(&s, "tensor 'q': data extends past the end of the file");

    s = valid_spec();
    s.q_offset = 66;
    expect_spec_error(&s, "tensor 'q': data offset 66 is not a multiple of the alignment 64");

    s = valid_spec();
    s.w_dims[0] = 32; /* w now takes 256 bytes and runs into q at 64 */
    s.data_bytes = 64 * 6;
    expect_spec_error(&s, "overlaps");

    s = valid_spec();
    s.q_name = "w";
    expect_spec_error(&s, "tensor 'w' appears twice");

    s = valid_spec();
    s.data_bytes = 64 + 33; /* q's last byte missing */
    expect_spec_error(&s, "tensor 'q': data extends past the end of the file");
}

static void test_hostile_names_are_printable(void **state) {
    (void)state;
    gguf_buf b = {0};
    uint64_t dims[1] = {1};
    gb_header(&b, 3, 1, 0);
    gb_tensor_info(&b, "bad\nname", 1, dims, 999, 0);
    char err[256];
    assert_null(sy_gguf_open_memory(b.data, b.size, err, sizeof err));
    assert_non_null(strstr(err, "tensor 'bad?name': unknown tensor type id 999"));
    gb_free(&b);
}

static void test_files_and_ollama_blob_names(void **state) {
    (void)state;
    spec s = valid_spec();
    gguf_buf b = {0};
    build(&b, &s);
    char dir[] = "/tmp/sy-gguf-test-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[256];
    snprintf(path, sizeof path, "%s/sha256-0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
             dir);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b.data, 1, b.size, f), b.size);
    fclose(f);
    char err[512];
    sy_gguf *g = sy_gguf_open(path, err, sizeof err);
    if (g == NULL) fail_msg("%s", err);
    assert_int_equal(sy_gguf_tensor_count(g), 2);
    const sy_gguf_tensor *q = sy_gguf_find_tensor(g, "q");
    assert_memory_equal(q->data, b.data + q->offset, 34);
    sy_gguf_close(g);
    unlink(path);

    /* errors from files name the file */
    assert_null(sy_gguf_open(path, err, sizeof err));
    assert_non_null(strstr(err, "cannot open"));
    assert_null(sy_gguf_open(dir, err, sizeof err));
    assert_non_null(strstr(err, "not a regular file"));
    rmdir(dir);
    gb_free(&b);
}

static void test_stories260k_fixture(void **state) {
    (void)state;
    const char *src = getenv("SY_SOURCE_DIR");
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/fixtures/stories260K/stories260K.gguf", src ? src : ".");
    char err[1200];
    sy_gguf *g = sy_gguf_open(path, err, sizeof err);
    if (g == NULL) fail_msg("%s", err);
    assert_int_equal(sy_gguf_version(g), 3);
    assert_int_equal(sy_gguf_tensor_count(g), 48);
    uint64_t v;
    assert_int_equal(sy_gguf_get_uint(g, "llama.block_count", &v), 1);
    assert_int_equal(v, 5);
    assert_int_equal(sy_gguf_get_uint(g, "llama.embedding_length", &v), 1);
    assert_int_equal(v, 64);
    const sy_gguf_tensor *t = sy_gguf_find_tensor(g, "blk.4.ffn_down.weight");
    assert_non_null(t);
    assert_int_equal(t->dims[0], 172);
    assert_int_equal(t->dims[1], 64);
    assert_int_equal(t->n_bytes, 172 * 64 * 4);
    int64_t kv = sy_gguf_find_key(g, "tokenizer.ggml.tokens");
    const char *s;
    size_t len;
    assert_true(sy_gguf_array_string(g, (uint64_t)kv, 1, &s, &len));
    assert_int_equal(len, 3);
    assert_memory_equal(s, "<s>", 3);
    sy_gguf_close(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_file_reads_back),
        cmocka_unit_test(test_version_2_and_default_alignment),
        cmocka_unit_test(test_every_truncation_is_refused),
        cmocka_unit_test(test_every_byte_mutation_is_safe),
        cmocka_unit_test(test_bad_header),
        cmocka_unit_test(test_huge_counts),
        cmocka_unit_test(test_bad_value_types),
        cmocka_unit_test(test_bad_alignment),
        cmocka_unit_test(test_bad_tensor_infos),
        cmocka_unit_test(test_hostile_names_are_printable),
        cmocka_unit_test(test_files_and_ollama_blob_names),
        cmocka_unit_test(test_stories260k_fixture),
    };
    return cmocka_run_group_tests_name("gguf", tests, NULL, NULL);
}
