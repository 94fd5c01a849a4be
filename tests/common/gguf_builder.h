/* Builds GGUF files in memory for tests: a growable byte buffer with writers for each GGUF field, so a test can
 * write a valid file and then break exactly one thing in it. Header-only, test use only. */
#ifndef SY_TEST_GGUF_BUILDER_H
#define SY_TEST_GGUF_BUILDER_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct gguf_buf {
    uint8_t *data;
    size_t size, cap;
} gguf_buf;

static inline void gb_bytes(gguf_buf *b, const void *p, size_t n) {
    if (b->size + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->size + n) cap *= 2;
        b->data = realloc(b->data, cap);
        if (b->data == NULL) abort();
        b->cap = cap;
    }
    if (n) memcpy(b->data + b->size, p, n);
    b->size += n;
}
static inline void gb_u8(gguf_buf *b, uint8_t v) { gb_bytes(b, &v, 1); }
static inline void gb_u32(gguf_buf *b, uint32_t v) { gb_bytes(b, &v, 4); }
static inline void gb_i32(gguf_buf *b, int32_t v) { gb_bytes(b, &v, 4); }
static inline void gb_u64(gguf_buf *b, uint64_t v) { gb_bytes(b, &v, 8); }
static inline void gb_f32(gguf_buf *b, float v) { gb_bytes(b, &v, 4); }
static inline void gb_str(gguf_buf *b, const char *s) {
    gb_u64(b, strlen(s));
    gb_bytes(b, s, strlen(s));
}
static inline void gb_header(gguf_buf *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    gb_bytes(b, "GGUF", 4);
    gb_u32(b, version);
    gb_u64(b, n_tensors);
    gb_u64(b, n_kv);
}
/* key + type; the caller writes the value */
static inline void gb_key(gguf_buf *b, const char *key, uint32_t type) {
    gb_str(b, key);
    gb_u32(b, type);
}
static inline void gb_kv_u32(gguf_buf *b, const char *key, uint32_t v) {
    gb_key(b, key, 4);
    gb_u32(b, v);
}
static inline void gb_kv_f32(gguf_buf *b, const char *key, float v) {
    gb_key(b, key, 6);
    gb_f32(b, v);
}
static inline void gb_kv_bool(gguf_buf *b, const char *key, int v) {
    gb_key(b, key, 7);
    gb_u8(b, (uint8_t)(v != 0));
}
static inline void gb_kv_str(gguf_buf *b, const char *key, const char *v) {
    gb_key(b, key, 8);
    gb_str(b, v);
}
/* array header: elem type + count; the caller writes the elements */
static inline void gb_kv_array(gguf_buf *b, const char *key, uint32_t elem_type, uint64_t count) {
    gb_key(b, key, 9);
    gb_u32(b, elem_type);
    gb_u64(b, count);
}
static inline void gb_tensor_info(gguf_buf *b, const char *name, uint32_t n_dims, const uint64_t *dims,
                                  uint32_t type, uint64_t offset) {
    gb_str(b, name);
    gb_u32(b, n_dims);
    for (uint32_t i = 0; i < n_dims; i++) gb_u64(b, dims[i]);
    gb_u32(b, type);
    gb_u64(b, offset);
}
static inline void gb_pad(gguf_buf *b, size_t alignment) {
    while (b->size % alignment) gb_u8(b, 0);
}
static inline void gb_free(gguf_buf *b) {
    free(b->data);
    b->data = NULL;
    b->size = b->cap = 0;
}

#endif
