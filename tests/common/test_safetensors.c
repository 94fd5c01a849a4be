/* SafeTensors reader: valid files read back exactly (in memory, on disk, sharded, the committed fixtures), and
 * every kind of lying or truncated file refused with a message naming the file and the tensor. */
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

#include <xxhash.h>

#include "hf_config.h"
#include "safetensors.h"
#include "sy_dtype.h"

/* ---- building files ---- */

typedef struct file_bytes {
    uint8_t *data;
    size_t size;
} file_bytes;

/* 8-byte little-endian `declared` header length, the header text, then data_len bytes of the pattern i*7+1. */
static file_bytes make_file_declared(uint64_t declared, const char *header, size_t data_len) {
    size_t hlen = strlen(header);
    file_bytes f = {malloc(8 + hlen + data_len + 1), 8 + hlen + data_len};
    assert_non_null(f.data);
    for (int i = 0; i < 8; i++) f.data[i] = (uint8_t)(declared >> (8 * i));
    memcpy(f.data + 8, header, hlen);
    for (size_t i = 0; i < data_len; i++) f.data[8 + hlen + i] = (uint8_t)(i * 7 + 1);
    return f;
}

static file_bytes make_file(const char *header, size_t data_len) {
    return make_file_declared(strlen(header), header, data_len);
}

static char err[512];

/* Opening must fail and the message must contain `expect`. */
static void expect_refused(file_bytes f, const char *expect) {
    err[0] = '\0';
    sy_safetensors *st = sy_safetensors_open_memory(f.data, f.size, "m.safetensors", err, sizeof err);
    if (st != NULL || strstr(err, expect) == NULL) {
        print_error("expected refusal with \"%s\", got %s: \"%s\"\n", expect, st ? "success" : "failure", err);
        sy_safetensors_close(st);
        free(f.data);
        fail();
    }
    assert_true(strncmp(err, "m.safetensors: ", 15) == 0); /* every message names the file */
    free(f.data);
}

#define VALID_HEADER                                                                                            \
    "{\"__metadata__\":{\"format\":\"pt\",\"note\":\"x\"},"                                                     \
    "\"b.weight\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"                                   \
    "\"a.bias\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[24,32]},"                                     \
    "\"c\":{\"dtype\":\"F16\",\"shape\":[2,2],\"data_offsets\":[32,40]}}"

/* ---- valid files ---- */

static void test_valid_memory_file(void **state) {
    (void)state;
    file_bytes f = make_file(VALID_HEADER "    ", 40); /* writers pad the header with spaces */
    sy_safetensors *st = sy_safetensors_open_memory(f.data, f.size, "m.safetensors", err, sizeof err);
    assert_non_null(st);
    assert_int_equal(sy_safetensors_count(st), 3);
    /* name order */
    assert_string_equal(sy_safetensors_at(st, 0)->name, "a.bias");
    assert_string_equal(sy_safetensors_at(st, 1)->name, "b.weight");
    assert_string_equal(sy_safetensors_at(st, 2)->name, "c");
    assert_null(sy_safetensors_at(st, 3));

    size_t data_start = 8 + strlen(VALID_HEADER) + 4;
    const sy_safetensors_tensor *w = sy_safetensors_find(st, "b.weight");
    assert_non_null(w);
    assert_int_equal(w->dtype, SY_DTYPE_F32);
    assert_string_equal(w->dtype_name, "F32");
    assert_int_equal(w->n_dims, 2);
    assert_int_equal(w->shape[0], 2);
    assert_int_equal(w->shape[1], 3);
    assert_int_equal(w->n_elements, 6);
    assert_int_equal(w->n_bytes, 24);
    assert_int_equal(w->file_offset, data_start);
    assert_ptr_equal(w->data, f.data + data_start); /* in place, no copy */
    assert_int_equal(((const uint8_t *)w->data)[0], 1);

    const sy_safetensors_tensor *b = sy_safetensors_find(st, "a.bias");
    assert_int_equal(b->dtype, SY_DTYPE_BF16);
    assert_int_equal(b->n_bytes, 8);
    assert_ptr_equal(b->data, f.data + data_start + 24);
    assert_int_equal(((const uint8_t *)b->data)[0], (uint8_t)(24 * 7 + 1));
    const sy_safetensors_tensor *c = sy_safetensors_find(st, "c");
    assert_int_equal(c->dtype, SY_DTYPE_F16);
    assert_int_equal(c->n_elements, 4);
    assert_null(sy_safetensors_find(st, "d"));
    assert_null(sy_safetensors_find(st, "__metadata__"));

    /* alignment is a power of two dividing the address */
    for (size_t i = 0; i < 3; i++) {
        const sy_safetensors_tensor *t = sy_safetensors_at(st, i);
        assert_true(t->alignment >= 1 && t->alignment <= 4096 && (t->alignment & (t->alignment - 1)) == 0);
        assert_int_equal((uintptr_t)t->data % t->alignment, 0);
    }

    assert_string_equal(sy_safetensors_metadata(st, "format"), "pt");
    assert_string_equal(sy_safetensors_metadata(st, "note"), "x");
    assert_null(sy_safetensors_metadata(st, "absent"));
    assert_int_equal(sy_safetensors_shard_count(st), 1);
    size_t hlen;
    const void *h = sy_safetensors_shard_header(st, 0, &hlen);
    assert_ptr_equal(h, f.data + 8);
    assert_int_equal(hlen, strlen(VALID_HEADER) + 4);
    assert_int_equal(sy_safetensors_mapped_bytes(st), 0); /* caller's memory, nothing mapped */

    /* require / require_shape */
    assert_ptr_equal(sy_safetensors_require(st, "b.weight", err, sizeof err), w);
    uint64_t shape_ok[2] = {2, 3}, shape_bad[2] = {3, 2};
    assert_ptr_equal(sy_safetensors_require_shape(st, "b.weight", 2, shape_ok, err, sizeof err), w);
    assert_null(sy_safetensors_require_shape(st, "b.weight", 2, shape_bad, err, sizeof err));
    assert_string_equal(err, "m.safetensors: tensor b.weight: shape [2, 3], expected [3, 2]");
    assert_null(sy_safetensors_require_shape(st, "b.weight", 1, shape_ok, err, sizeof err));
    assert_null(sy_safetensors_require(st, "nope", err, sizeof err));
    assert_string_equal(err, "m.safetensors: no tensor named nope");

    /* fingerprint: xxh64 of header bytes then config bytes */
    XXH64_state_t *s = XXH64_createState();
    XXH64_reset(s, 0);
    XXH64_update(s, f.data + 8, hlen);
    XXH64_update(s, "{}", 2);
    assert_true(sy_safetensors_fingerprint(st, "{}", 2) == XXH64_digest(s));
    XXH64_freeState(s);
    assert_true(sy_safetensors_fingerprint(st, "{}", 2) != sy_safetensors_fingerprint(st, "{ }", 3));
    assert_true(sy_safetensors_fingerprint(st, NULL, 0) == XXH64(f.data + 8, hlen, 0));
    sy_safetensors_close(st);
    free(f.data);
}

static void test_unsupported_dtype_refused_when_used(void **state) {
    (void)state;
    file_bytes f = make_file("{\"ids\":{\"dtype\":\"I64\",\"shape\":[3],\"data_offsets\":[0,24]},"
                             "\"f4\":{\"dtype\":\"F4\",\"shape\":[4],\"data_offsets\":[24,26]}}",
                             26);
    sy_safetensors *st = sy_safetensors_open_memory(f.data, f.size, "m.safetensors", err, sizeof err);
    assert_non_null(st);
    const sy_safetensors_tensor *t = sy_safetensors_find(st, "ids");
    assert_non_null(t);
    assert_int_equal(t->dtype, SY_SAFETENSORS_DTYPE_UNSUPPORTED);
    assert_string_equal(t->dtype_name, "I64");
    assert_int_equal(sy_safetensors_find(st, "f4")->n_bytes, 2); /* 4 elements of 4 bits */
    assert_null(sy_safetensors_require(st, "ids", err, sizeof err));
    assert_string_equal(err, "m.safetensors: tensor ids: dtype I64 is not supported (F32, F16 and BF16 are)");
    sy_safetensors_close(st);
    free(f.data);
    assert_int_equal(sy_safetensors_dtype_from_name("BF16"), SY_DTYPE_BF16);
    assert_int_equal(sy_safetensors_dtype_from_name("F8_E4M3"), SY_SAFETENSORS_DTYPE_UNSUPPORTED);
    assert_int_equal(sy_safetensors_dtype_from_name("nonsense"), SY_SAFETENSORS_DTYPE_UNSUPPORTED);
}

static void test_scalar_empty_and_gaps(void **state) {
    (void)state;
    /* a scalar, an empty tensor sitting at another tensor's offset, a gap, and bytes after the last tensor */
    file_bytes f = make_file("{\"s\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]},"
                             "\"e\":{\"dtype\":\"F16\",\"shape\":[0,5],\"data_offsets\":[8,8]},"
                             "\"t\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[8,12]}}",
                             20);
    sy_safetensors *st = sy_safetensors_open_memory(f.data, f.size, "m.safetensors", err, sizeof err);
    assert_non_null(st);
    const sy_safetensors_tensor *s = sy_safetensors_find(st, "s");
    assert_int_equal(s->n_dims, 0);
    assert_int_equal(s->n_elements, 1);
    const sy_safetensors_tensor *e = sy_safetensors_find(st, "e");
    assert_int_equal(e->n_elements, 0);
    assert_int_equal(e->n_bytes, 0);
    sy_safetensors_close(st);
    free(f.data);

    /* a header with no tensors at all is a valid (empty) file */
    f = make_file("{}", 0);
    st = sy_safetensors_open_memory(f.data, f.size, NULL, err, sizeof err);
    assert_non_null(st);
    assert_int_equal(sy_safetensors_count(st), 0);
    sy_safetensors_close(st);
    free(f.data);
}

/* ---- lying and truncated files ---- */

static void test_refuses_bad_framing(void **state) {
    (void)state;
    file_bytes tiny = {malloc(5), 5};
    memset(tiny.data, 0, 5);
    expect_refused(tiny, "5 bytes is too short");
    expect_refused(make_file_declared(1000, "{}", 10), "header length 1000 runs past the end of the file (20 bytes)");
    expect_refused(make_file_declared(200000000ull, "{}", 0), "header length 200000000 is over the");
    expect_refused(make_file_declared(UINT64_MAX, "{}", 0), "is over the");
    expect_refused(make_file_declared(0, "", 0), "too short for a JSON object");
    expect_refused(make_file("{\"a\":", 0), "header is not valid JSON");
    expect_refused(make_file("{} x", 0), "header has bytes after its JSON object");
    expect_refused(make_file("[1,2]", 0), "header is not a JSON object");
    expect_refused(make_file("\"str\"", 0), "header is not a JSON object");
}

static void test_refuses_bad_tensor_entries(void **state) {
    (void)state;
    expect_refused(make_file("{\"w\":{\"dtype\":\"F99\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4),
                   "m.safetensors: tensor w: unknown dtype F99");
    expect_refused(make_file("{\"w\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4), "tensor w: missing or non-string");
    expect_refused(make_file("{\"w\":{\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,4]}}", 4), "\"dtype\"");
    expect_refused(make_file("{\"w\":[1,2]}", 4), "tensor w: entry is not an object");
    expect_refused(make_file("{\"w\":{\"dtype\":\"F32\",\"shape\":5,\"data_offsets\":[0,4]}}", 4),
                   "\"shape\"");
    expect_refused(
        make_file("{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4),
        "tensor w: rank 9 is more than 8");
    expect_refused(make_file("{\"w\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4),
                   "tensor w: shape[0] is not a non-negative integer");
    expect_refused(make_file("{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1.5],\"data_offsets\":[0,4]}}", 4),
                   "shape[1] is not a non-negative integer");
    expect_refused(make_file("{\"w\":{\"dtype\":\"F32\",\"shape\":[\"4\"],\"data_offsets\":[0,4]}}", 4),
                   "shape[0]");
    expect_refused(make_file("{\"w\":{\"dtype\":\"F32\",\"shape\":[1e300],\"data_offsets\":[0,4]}}", 4),
                   "shape[0]");
    /* 2^32 * 2^32 elements overflow 64 bits */
    expect_refused(
        make_file("{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,4]}}", 4),
        "tensor w: element count of the shape overflows 64 bits");
    /* 2^40 * 2^22 = 2^62 elements fit, their 32-bit sizes do not */
    expect_refused(
        make_file("{\"w\":{\"dtype\":\"F32\",\"shape\":[1099511627776,4194304],\"data_offsets\":[0,4]}}", 4),
                   "byte size of 4611686018427387904 F32 elements overflows 64 bits");
    expect_refused(make_file("{\"w\":{\"dtype\":\"F4\",\"shape\":[3],\"data_offsets\":[0,2]}}", 4),
                   "3 F4 elements do not fill whole bytes");
    expect_refused(make_file("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4),
                   "tensor w: \"data_offsets\" is not a pair");
    expect_refused(make_file("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", 8),
                   "\"data_offsets\" is not a pair");
    expect_refused(make_file("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}", 8),
                   "\"data_offsets\" is not a pair");
    expect_refused(make_file("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,1e17]}}", 8),
                   "\"data_offsets\" is not a pair");
    expect_refused(make_file("{\"\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4),
                   "a tensor has an empty name");
    expect_refused(make_file("{\"__metadata__\":{\"format\":1}}", 0), "__metadata__ value of format is not a string");
    expect_refused(make_file("{\"__metadata__\":[]}", 0), "__metadata__ is not an object");
}

static void test_refuses_lying_offsets(void **state) {
    (void)state;
    /* the message the engine's users will see, in full */
    expect_refused(make_file("{\"model.layers.3.mlp.up_proj.weight\":"
                             "{\"dtype\":\"F32\",\"shape\":[25],\"data_offsets\":[0,100]}}",
                             24),
                   "m.safetensors: tensor model.layers.3.mlp.up_proj.weight: data_offsets [0,100) past the end of "
                   "the data (24 bytes)");
    expect_refused(make_file("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}", 8),
                   "tensor w: data_offsets [8,4) begin after end");
    expect_refused(make_file("{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,20]}}", 24),
                   "tensor w: data_offsets [0,20) hold 20 bytes but 6 F32 elements need 24");
    expect_refused(make_file("{\"w\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[0,24]}}", 24),
                   "hold 24 bytes but 6 BF16 elements need 12");
    /* overlaps: partial, identical, one inside another */
    expect_refused(make_file("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                             "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
                             12),
                   "tensor b: data overlaps tensor a");
    expect_refused(make_file("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                             "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
                             8),
                   "overlaps");
    expect_refused(make_file("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
                             "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[12,16]},"
                             "\"c\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                             16),
                   "overlaps tensor a");
    expect_refused(make_file("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                             "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                             8),
                   "m.safetensors: tensor a appears twice");
    /* a control byte in a name does not break the one-line message */
    expect_refused(make_file("{\"bad\\nname\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,400]}}", 4),
                   "tensor bad?name: data_offsets [0,400) past the end");
}

/* Every prefix of a valid file is refused cleanly (truncated download). */
static void test_every_truncation_refused(void **state) {
    (void)state;
    file_bytes f = make_file(VALID_HEADER, 40);
    for (size_t n = 0; n < f.size; n++) {
        uint8_t *copy = malloc(n ? n : 1);
        memcpy(copy, f.data, n);
        sy_safetensors *st = sy_safetensors_open_memory(copy, n, "m.safetensors", err, sizeof err);
        assert_null(st);
        assert_true(strncmp(err, "m.safetensors: ", 15) == 0);
        free(copy);
    }
    free(f.data);
}

/* ---- files on disk ---- */

static char tmpdir[256];

static int make_tmpdir(void **state) {
    (void)state;
    const char *base = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/sy_st_XXXXXX", base && base[0] ? base : "/tmp");
    return mkdtemp(tmpdir) == NULL ? -1 : 0;
}

static int remove_tmpdir(void **state) {
    (void)state;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

static void write_path(const char *name, const void *data, size_t size) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    if (size) assert_int_equal(fwrite(data, 1, size, fp), size);
    fclose(fp);
}

static void write_text(const char *name, const char *text) { write_path(name, text, strlen(text)); }

static void write_st(const char *name, const char *header, size_t data_len) {
    file_bytes f = make_file(header, data_len);
    write_path(name, f.data, f.size);
    free(f.data);
}

static sy_safetensors *open_in_tmp(const char *name) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    err[0] = '\0';
    return sy_safetensors_open(path, err, sizeof err);
}

#define SHARD1 "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}"
#define SHARD2 "{\"b\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,4]}}"

static void test_single_file_on_disk(void **state) {
    (void)state;
    write_st("model.safetensors", VALID_HEADER, 40);
    sy_safetensors *st = open_in_tmp("model.safetensors");
    assert_non_null(st);
    assert_int_equal(sy_safetensors_count(st), 3);
    assert_int_equal(sy_safetensors_mapped_bytes(st), 8 + strlen(VALID_HEADER) + 40);
    const sy_safetensors_tensor *w = sy_safetensors_find(st, "b.weight");
    assert_int_equal(((const uint8_t *)w->data)[5], 5 * 7 + 1);
    /* a mapping starts on a page, so the address alignment is the file offset's */
    uint64_t low_bit = w->file_offset & (~w->file_offset + 1);
    assert_int_equal(w->alignment, low_bit < 4096 ? low_bit : 4096);
    sy_safetensors_close(st);

    st = open_in_tmp(""); /* the directory itself: finds model.safetensors */
    assert_non_null(st);
    sy_safetensors_close(st);

    /* truncated on disk: the message names the file path and the tensor */
    file_bytes f = make_file(VALID_HEADER, 40);
    write_path("model.safetensors", f.data, f.size - 10);
    free(f.data);
    st = open_in_tmp("model.safetensors");
    assert_null(st);
    assert_non_null(strstr(err, "/model.safetensors: tensor a.bias: data_offsets [24,32) past the end of the data "
                                "(30 bytes)"));

    write_path("model.safetensors", "", 0);
    assert_null(open_in_tmp("model.safetensors"));
    assert_non_null(strstr(err, "0 bytes is too short"));
}

static void test_directory_without_model(void **state) {
    (void)state;
    assert_null(open_in_tmp(""));
    assert_non_null(strstr(err, "holds neither model.safetensors.index.json nor model.safetensors"));
    assert_null(open_in_tmp("missing.safetensors"));
    assert_non_null(strstr(err, "missing.safetensors: No such file"));
    assert_null(sy_safetensors_open(NULL, err, sizeof err));
}

static void test_fifo_is_refused_not_waited_on(void **state) {
    (void)state;
    char path[512];
    snprintf(path, sizeof path, "%s/fifo.safetensors", tmpdir);
    assert_int_equal(mkfifo(path, 0600), 0);
    assert_null(sy_safetensors_open(path, err, sizeof err));
    assert_non_null(strstr(err, "not a regular file"));
}

static void test_sharded_set(void **state) {
    (void)state;
    write_st("s-1.safetensors", SHARD1, 8);
    write_st("s-2.safetensors", SHARD2, 4);
    write_text("model.safetensors.index.json", "{\"metadata\":{\"total_size\":12},\"weight_map\":"
                                               "{\"b\":\"s-2.safetensors\",\"a\":\"s-1.safetensors\"}}");
    sy_safetensors *st = open_in_tmp("");
    assert_non_null(st);
    assert_int_equal(sy_safetensors_count(st), 2);
    assert_int_equal(sy_safetensors_shard_count(st), 2);
    assert_non_null(strstr(sy_safetensors_shard_path(st, 0), "/s-1.safetensors"));
    assert_non_null(strstr(sy_safetensors_shard_path(st, 1), "/s-2.safetensors"));
    assert_null(sy_safetensors_shard_path(st, 2));
    assert_int_equal(sy_safetensors_find(st, "a")->shard, 0);
    assert_int_equal(sy_safetensors_find(st, "b")->shard, 1);
    assert_int_equal(sy_safetensors_find(st, "b")->dtype, SY_DTYPE_BF16);
    assert_int_equal(sy_safetensors_mapped_bytes(st), (8 + strlen(SHARD1) + 8) + (8 + strlen(SHARD2) + 4));
    /* fingerprint covers shard headers in shard order */
    char both[256];
    snprintf(both, sizeof both, "%s%s", SHARD1, SHARD2);
    assert_true(sy_safetensors_fingerprint(st, NULL, 0) == XXH64(both, strlen(both), 0));
    assert_null(sy_safetensors_require(st, "zzz", err, sizeof err));
    assert_string_equal(err, "checkpoint: no tensor named zzz");
    sy_safetensors_close(st);

    /* the index file can be named directly */
    st = open_in_tmp("model.safetensors.index.json");
    assert_non_null(st);
    sy_safetensors_close(st);
}

static void test_sharded_set_lies(void **state) {
    (void)state;
    write_st("s-1.safetensors", SHARD1, 8);
    write_st("s-2.safetensors", SHARD2, 4);
    struct {
        const char *index;
        const char *expect;
    } cases[] = {
        {"{\"weight_map\":{\"a\":\"../s-1.safetensors\"}}",
         "weight_map entry of tensor a is not a plain file name beside the index"},
        {"{\"weight_map\":{\"a\":\"/etc/passwd\"}}", "not a plain file name"},
        {"{\"weight_map\":{\"a\":\"..\"}}", "not a plain file name"},
        {"{\"weight_map\":{\"a\":\"\"}}", "not a plain file name"},
        {"{\"weight_map\":{\"a\":3}}", "not a plain file name"},
        {"{\"weight_map\":{\"a\":\"s-2.safetensors\",\"b\":\"s-2.safetensors\"}}",
         "weight_map names tensor a in s-2.safetensors, which does not hold it"},
        {"{\"weight_map\":{\"a\":\"s-1.safetensors\",\"b\":\"s-1.safetensors\",\"x\":\"s-2.safetensors\"}}",
         "weight_map names tensor b in s-1.safetensors, but it is in"},
        {"{\"weight_map\":{\"a\":\"s-1.safetensors\",\"b\":\"s-3.safetensors\"}}", "s-3.safetensors: cannot open"},
        {"{\"weight_map\":{}}", "\"weight_map\" is empty"},
        {"{\"weight_map\":[]}", "no \"weight_map\" object"},
        {"[]", "no \"weight_map\" object"},
        {"{\"weight_map\":", "not valid JSON"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_text("model.safetensors.index.json", cases[i].index);
        sy_safetensors *st = open_in_tmp("");
        if (st != NULL || strstr(err, cases[i].expect) == NULL) {
            print_error("case %zu: expected \"%s\", got \"%s\"\n", i, cases[i].expect, err);
            sy_safetensors_close(st);
            fail();
        }
    }
    /* one tensor in two shards */
    write_st("s-3.safetensors", SHARD1, 8);
    write_text("model.safetensors.index.json",
               "{\"weight_map\":{\"a\":\"s-1.safetensors\",\"b\":\"s-3.safetensors\"}}");
    assert_null(open_in_tmp(""));
    assert_non_null(strstr(err, "tensor a appears in"));
    /* a broken shard is named */
    write_st("s-3.safetensors", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4);
    assert_null(open_in_tmp(""));
    assert_non_null(strstr(err, "/s-3.safetensors: tensor a: data_offsets [0,8) past the end of the data (4 bytes)"));
}

/* ---- the committed fixtures ---- */

static const char *source_dir(void) {
    const char *s = getenv("SY_SOURCE_DIR");
    return s != NULL ? s : ".";
}

static uint64_t file_size(const char *path) {
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    return (uint64_t)sb.st_size;
}

/* Shapes in the checkpoint must be the ones config.json implies, tensor by tensor. */
static void check_fixture(const char *name, uint32_t expect_shards, uint32_t expect_dtype) {
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s/tests/fixtures/hf/%s", source_dir(), name);
    sy_safetensors *st = sy_safetensors_open(dir, err, sizeof err);
    if (st == NULL) print_error("%s\n", err);
    assert_non_null(st);
    sy_hf_config cfg;
    if (!sy_hf_config_load(dir, &cfg, NULL, err, sizeof err)) print_error("%s\n", err);
    assert_int_equal(sy_safetensors_shard_count(st), expect_shards);

    uint64_t total = 0;
    for (size_t s = 0; s < sy_safetensors_shard_count(st); s++) total += file_size(sy_safetensors_shard_path(st, s));
    assert_int_equal(sy_safetensors_mapped_bytes(st), total);

    uint64_t h = cfg.hidden_size, v = cfg.vocab_size, hd = cfg.head_dim;
    uint64_t embed[2] = {v, h};
    assert_non_null(sy_safetensors_require_shape(st, "model.embed_tokens.weight", 2, embed, err, sizeof err));
    assert_int_equal(sy_safetensors_find(st, "model.embed_tokens.weight")->dtype, expect_dtype);
    assert_true((sy_safetensors_find(st, "lm_head.weight") == NULL) == cfg.tie_word_embeddings);
    for (uint32_t l = 0; l < cfg.num_hidden_layers; l++) {
        char t[128];
        if (cfg.layer_types[l] == SY_HF_LAYER_CONV) {
            uint64_t in_proj[2] = {3 * h, h}, conv[3] = {h, 1, cfg.conv_l_cache};
            snprintf(t, sizeof t, "model.layers.%u.conv.in_proj.weight", l);
            assert_non_null(sy_safetensors_require_shape(st, t, 2, in_proj, err, sizeof err));
            snprintf(t, sizeof t, "model.layers.%u.conv.conv.weight", l);
            assert_non_null(sy_safetensors_require_shape(st, t, 3, conv, err, sizeof err));
        } else {
            uint64_t q[2] = {cfg.num_attention_heads * hd, h}, k[2] = {cfg.num_key_value_heads * hd, h};
            snprintf(t, sizeof t, "model.layers.%u.self_attn.q_proj.weight", l);
            assert_non_null(sy_safetensors_require_shape(st, t, 2, q, err, sizeof err));
            snprintf(t, sizeof t, "model.layers.%u.self_attn.k_proj.weight", l);
            assert_non_null(sy_safetensors_require_shape(st, t, 2, k, err, sizeof err));
            snprintf(t, sizeof t, "model.layers.%u.self_attn.q_proj.bias", l);
            assert_true((sy_safetensors_find(st, t) != NULL) == cfg.qkv_bias);
            snprintf(t, sizeof t, "model.layers.%u.self_attn.q_norm.weight", l);
            bool has_q_norm = sy_safetensors_find(st, t) != NULL;
            snprintf(t, sizeof t, "model.layers.%u.self_attn.q_layernorm.weight", l);
            has_q_norm = has_q_norm || sy_safetensors_find(st, t) != NULL;
            assert_true(has_q_norm == cfg.qk_norm);
        }
        uint64_t up[2] = {cfg.arch == SY_HF_ARCH_LFM2 ? cfg.lfm2_ff_dim : cfg.intermediate_size, h};
        snprintf(t, sizeof t, cfg.arch == SY_HF_ARCH_LFM2 ? "model.layers.%u.feed_forward.w1.weight"
                                                          : "model.layers.%u.mlp.up_proj.weight",
                 l);
        if (sy_safetensors_require_shape(st, t, 2, up, err, sizeof err) == NULL) print_error("%s\n", err);
        assert_non_null(sy_safetensors_find(st, t));
    }
    /* every tensor of a fixture is computable */
    for (size_t i = 0; i < sy_safetensors_count(st); i++) {
        const sy_safetensors_tensor *t = sy_safetensors_at(st, i);
        assert_ptr_equal(sy_safetensors_require(st, t->name, err, sizeof err), t);
    }

    /* the fingerprint is xxh64 over the shards' header bytes as stored, then config.json */
    snprintf(path, sizeof path, "%s/config.json", dir);
    size_t config_len;
    char *config = sy_hf_read_file(path, 1 << 20, &config_len, err, sizeof err);
    assert_non_null(config);
    XXH64_state_t *xs = XXH64_createState();
    XXH64_reset(xs, 0);
    for (size_t s = 0; s < sy_safetensors_shard_count(st); s++) {
        FILE *fp = fopen(sy_safetensors_shard_path(st, s), "rb");
        assert_non_null(fp);
        uint8_t len8[8];
        assert_int_equal(fread(len8, 1, 8, fp), 8);
        uint64_t n = 0;
        for (int i = 7; i >= 0; i--) n = (n << 8) | len8[i];
        char *hdr = malloc(n);
        assert_int_equal(fread(hdr, 1, n, fp), n);
        XXH64_update(xs, hdr, n);
        free(hdr);
        fclose(fp);
    }
    XXH64_update(xs, config, config_len);
    assert_true(sy_safetensors_fingerprint(st, config, config_len) == XXH64_digest(xs));
    XXH64_freeState(xs);
    free(config);
    sy_safetensors_close(st);
}

static void test_fixture_qwen2_tied_f32(void **state) {
    (void)state;
    check_fixture("qwen2-tied-f32", 1, SY_DTYPE_F32);
}
static void test_fixture_qwen2_untied_bf16(void **state) {
    (void)state;
    check_fixture("qwen2-untied-bf16", 1, SY_DTYPE_BF16);
}
static void test_fixture_qwen3_f32(void **state) {
    (void)state;
    check_fixture("qwen3-f32", 1, SY_DTYPE_F32);
}
static void test_fixture_qwen3_tied_bf16(void **state) {
    (void)state;
    check_fixture("qwen3-tied-bf16", 1, SY_DTYPE_BF16);
}
static void test_fixture_llama_sharded(void **state) {
    (void)state;
    check_fixture("llama-gqa-f32-sharded", 4, SY_DTYPE_F32);
}
static void test_fixture_lfm2(void **state) {
    (void)state;
    check_fixture("lfm2-f32", 1, SY_DTYPE_F32);
}

int main(void) {
    const struct CMUnitTest memory_tests[] = {
        cmocka_unit_test(test_valid_memory_file),
        cmocka_unit_test(test_unsupported_dtype_refused_when_used),
        cmocka_unit_test(test_scalar_empty_and_gaps),
        cmocka_unit_test(test_refuses_bad_framing),
        cmocka_unit_test(test_refuses_bad_tensor_entries),
        cmocka_unit_test(test_refuses_lying_offsets),
        cmocka_unit_test(test_every_truncation_refused),
        cmocka_unit_test(test_fixture_qwen2_tied_f32),
        cmocka_unit_test(test_fixture_qwen2_untied_bf16),
        cmocka_unit_test(test_fixture_qwen3_f32),
        cmocka_unit_test(test_fixture_qwen3_tied_bf16),
        cmocka_unit_test(test_fixture_llama_sharded),
        cmocka_unit_test(test_fixture_lfm2),
    };
    const struct CMUnitTest disk_tests[] = {
        cmocka_unit_test_setup_teardown(test_single_file_on_disk, make_tmpdir, remove_tmpdir),
        cmocka_unit_test_setup_teardown(test_directory_without_model, make_tmpdir, remove_tmpdir),
        cmocka_unit_test_setup_teardown(test_fifo_is_refused_not_waited_on, make_tmpdir, remove_tmpdir),
        cmocka_unit_test_setup_teardown(test_sharded_set, make_tmpdir, remove_tmpdir),
        cmocka_unit_test_setup_teardown(test_sharded_set_lies, make_tmpdir, remove_tmpdir),
    };
    int failed = cmocka_run_group_tests_name("safetensors (memory, fixtures)", memory_tests, NULL, NULL);
    failed += cmocka_run_group_tests_name("safetensors (files)", disk_tests, NULL, NULL);
    return failed ? 1 : 0;
}
