/* GGUF reader (versions 2 and 3, little-endian) over a read-only mapping.
 *
 * sy_gguf_open maps a file (a `.gguf`, or an Ollama blob `sha256-...`: the name does not matter) and parses the
 * header, every metadata value and every tensor info. Every count, length, offset and size is checked against the
 * file size before use, so a hostile file gets one error line naming what is wrong and never an out-of-bounds
 * read or an allocation larger than the file justifies. After a successful open every accessor is a plain,
 * thread-safe read of immutable data.
 *
 * Nothing of the file is copied except keys and tensor names (into one NUL-terminated string arena); metadata
 * values and tensor data are read in place. Multi-byte values inside the mapping may be unaligned, so values are
 * read through the accessors below, never by casting pointers (tensor data excepted: its offsets are aligned).
 */
#ifndef SY_GGUF_H
#define SY_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SY_GGUF_MAX_DIMS 4
#define SY_GGUF_DEFAULT_ALIGNMENT 32

/* Metadata value types, numbered as in the GGUF specification. */
typedef enum sy_gguf_type {
    SY_GGUF_UINT8 = 0,
    SY_GGUF_INT8 = 1,
    SY_GGUF_UINT16 = 2,
    SY_GGUF_INT16 = 3,
    SY_GGUF_UINT32 = 4,
    SY_GGUF_INT32 = 5,
    SY_GGUF_FLOAT32 = 6,
    SY_GGUF_BOOL = 7,
    SY_GGUF_STRING = 8,
    SY_GGUF_ARRAY = 9,
    SY_GGUF_UINT64 = 10,
    SY_GGUF_INT64 = 11,
    SY_GGUF_FLOAT64 = 12,
    SY_GGUF_TYPE_COUNT_
} sy_gguf_type;

typedef struct sy_gguf sy_gguf;

/* One tensor as the file describes it. `name` is NUL-terminated and owned by the context; `data` points into the
 * mapping (aligned to the file's alignment) and holds `n_bytes` bytes. dims[0] is the fastest-varying (row)
 * dimension, as in ggml; unused dims are 1. */
typedef struct sy_gguf_tensor {
    const char *name;
    uint32_t type; /* ggml type id (= sy_dtype for the supported ones) */
    uint32_t n_dims;
    uint64_t dims[SY_GGUF_MAX_DIMS];
    uint64_t n_elements;
    uint64_t offset; /* from the start of the file */
    uint64_t n_bytes;
    uint64_t row_bytes; /* the bytes of one row of dims[0] elements (checked: no overflow for any type) */
    const void *data;
} sy_gguf_tensor;

/* Map and parse a file. On failure returns NULL and writes one line to err (if err_size > 0). */
sy_gguf *sy_gguf_open(const char *path, char *err, size_t err_size);
/* Parse a buffer the caller keeps alive and unchanged until close (tests, fuzzing). Nothing is copied. */
sy_gguf *sy_gguf_open_memory(const void *data, size_t size, char *err, size_t err_size);
void sy_gguf_close(sy_gguf *g);

/* Whether the first bytes are the GGUF magic ("GGUF"). */
bool sy_gguf_has_magic(const void *head, size_t n);

uint32_t sy_gguf_version(const sy_gguf *g);
uint32_t sy_gguf_alignment(const sy_gguf *g);
uint64_t sy_gguf_file_size(const sy_gguf *g);
const void *sy_gguf_file_data(const sy_gguf *g); /* the whole mapping */
/* Bytes from the start of the file to the end of the tensor infos: the header with all metadata. */
uint64_t sy_gguf_header_size(const sy_gguf *g);
/* Offset of the first tensor info: the metadata entries are the bytes [24, this) (for writers that copy them). */
uint64_t sy_gguf_tensor_infos_offset(const sy_gguf *g);
/* Offset of the tensor data section. */
uint64_t sy_gguf_data_offset(const sy_gguf *g);

/* "uint8", ..., "array"; "invalid" for an unknown id. */
const char *sy_gguf_type_name(uint32_t type);
/* Name of a ggml tensor type id ("f32", "q4_k", "iq2_xxs", ...), or NULL for an unknown id. Knows every ggml
 * type, including ones no switchyard kernel supports, so errors can name them. */
const char *sy_gguf_tensor_type_name(uint32_t type);

/* ---- metadata ---- */

uint64_t sy_gguf_kv_count(const sy_gguf *g);
/* Index of a key, or -1. */
int64_t sy_gguf_find_key(const sy_gguf *g, const char *key);
const char *sy_gguf_kv_key(const sy_gguf *g, uint64_t kv);
sy_gguf_type sy_gguf_kv_type(const sy_gguf *g, uint64_t kv);

/* Scalar reads of the kv-th value. They return false when the value's type does not fit the request:
 * _uint takes any integer type with a non-negative value, _int any integer type that fits int64,
 * _float FLOAT32 or FLOAT64, _bool BOOL, _string STRING (bytes not NUL-terminated, may hold any byte). */
bool sy_gguf_kv_uint(const sy_gguf *g, uint64_t kv, uint64_t *out);
bool sy_gguf_kv_int(const sy_gguf *g, uint64_t kv, int64_t *out);
bool sy_gguf_kv_float(const sy_gguf *g, uint64_t kv, double *out);
bool sy_gguf_kv_bool(const sy_gguf *g, uint64_t kv, bool *out);
bool sy_gguf_kv_string(const sy_gguf *g, uint64_t kv, const char **s, size_t *len);

/* Arrays: false unless the kv-th value is an array. Elements are read with the same type rules as scalars. */
bool sy_gguf_kv_array(const sy_gguf *g, uint64_t kv, sy_gguf_type *elem_type, uint64_t *count);
bool sy_gguf_array_uint(const sy_gguf *g, uint64_t kv, uint64_t i, uint64_t *out);
bool sy_gguf_array_int(const sy_gguf *g, uint64_t kv, uint64_t i, int64_t *out);
bool sy_gguf_array_float(const sy_gguf *g, uint64_t kv, uint64_t i, double *out);
bool sy_gguf_array_bool(const sy_gguf *g, uint64_t kv, uint64_t i, bool *out);
bool sy_gguf_array_string(const sy_gguf *g, uint64_t kv, uint64_t i, const char **s, size_t *len);

/* By key: 1 found and read, 0 absent, -1 present with a type that does not fit (see the rules above). */
int sy_gguf_get_uint(const sy_gguf *g, const char *key, uint64_t *out);
int sy_gguf_get_int(const sy_gguf *g, const char *key, int64_t *out);
int sy_gguf_get_float(const sy_gguf *g, const char *key, double *out);
int sy_gguf_get_bool(const sy_gguf *g, const char *key, bool *out);
int sy_gguf_get_string(const sy_gguf *g, const char *key, const char **s, size_t *len);
/* A string value as a new NUL-terminated copy (caller frees), NULL when absent, not a string, or holding a NUL
 * byte. */
char *sy_gguf_dup_string(const sy_gguf *g, const char *key);

/* ---- tensors ---- */

uint64_t sy_gguf_tensor_count(const sy_gguf *g);
/* The i-th tensor in file order, NULL when out of range. */
const sy_gguf_tensor *sy_gguf_tensor_at(const sy_gguf *g, uint64_t i);
/* A tensor by name, NULL when absent. O(log n). */
const sy_gguf_tensor *sy_gguf_find_tensor(const sy_gguf *g, const char *name);

#endif
