/* GGUF writer (version 3, little-endian): metadata and tensor infos first, then tensor data streamed in tensor
 * order, the file written atomically.
 *
 *   sy_gguf_writer *w = sy_gguf_writer_new(err, err_size);
 *   sy_gguf_writer_set_string(w, "general.architecture", "llama", 5, ...);     ... metadata, in file order
 *   sy_gguf_writer_add_tensor(w, "token_embd.weight", SY_DTYPE_Q8_0, 2, dims, ...); ... tensor infos, in order
 *   sy_gguf_writer_open(w, "out.gguf", ...);      temp file "out.gguf.tmp-PID-N" beside it, header written
 *   sy_gguf_writer_write(w, bytes, n, ...);        tensor data, any chunking; padding is inserted by the writer
 *   sy_gguf_writer_commit(w, ...);                 fsync, rename over out.gguf, fsync the directory
 *   sy_gguf_writer_free(w);                        removes the temp file unless committed
 *
 * A reader never sees a half-written file at the destination: until commit it does not exist (or holds the old
 * file). Every name, count and size is checked (tensor names at most 63 bytes as ggml requires, 1-4 dimensions,
 * row lengths a multiple of the type's block, no overflow, unique keys and names); a failure leaves one line in
 * err. Setting a key that exists replaces its value and moves it to the end (llama.cpp's gguf_set_* do the same).
 * Alignment: 32, or the value of a "general.alignment" key (UINT32, a power of two) set before open.
 *
 * Not thread-safe: one writer per thread. */
#ifndef SY_GGUF_WRITER_H
#define SY_GGUF_WRITER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf.h"
#include "sy_dtype.h"

#define SY_GGUF_WRITER_MAX_NAME 63 /* bytes of a tensor name (ggml's GGML_MAX_NAME - 1) */

typedef struct sy_gguf_writer sy_gguf_writer;

sy_gguf_writer *sy_gguf_writer_new(char *err, size_t err_size);
/* Removes an uncommitted temp file. NULL is a no-op. */
void sy_gguf_writer_free(sy_gguf_writer *w);

/* ---- metadata (before open) ---- */

bool sy_gguf_writer_set_u32(sy_gguf_writer *w, const char *key, uint32_t v, char *err, size_t err_size);
bool sy_gguf_writer_set_i32(sy_gguf_writer *w, const char *key, int32_t v, char *err, size_t err_size);
bool sy_gguf_writer_set_u64(sy_gguf_writer *w, const char *key, uint64_t v, char *err, size_t err_size);
bool sy_gguf_writer_set_f32(sy_gguf_writer *w, const char *key, float v, char *err, size_t err_size);
bool sy_gguf_writer_set_bool(sy_gguf_writer *w, const char *key, bool v, char *err, size_t err_size);
bool sy_gguf_writer_set_string(sy_gguf_writer *w, const char *key, const char *s, size_t len, char *err,
                               size_t err_size);
/* An array of n numbers of a scalar type (not STRING/ARRAY), given as their little-endian bytes back to back. */
bool sy_gguf_writer_set_array(sy_gguf_writer *w, const char *key, sy_gguf_type elem_type, const void *elems,
                              uint64_t n, char *err, size_t err_size);
/* An array of n strings (strs[i] of lens[i] bytes). */
bool sy_gguf_writer_set_string_array(sy_gguf_writer *w, const char *key, const char *const *strs, const size_t *lens,
                                     uint64_t n, char *err, size_t err_size);
/* The kv-th metadata entry of an open GGUF file, with its key, type and value as stored. */
bool sy_gguf_writer_copy_kv(sy_gguf_writer *w, const sy_gguf *src, uint64_t kv, char *err, size_t err_size);
/* Drops a key; false when it was not set. */
bool sy_gguf_writer_remove(sy_gguf_writer *w, const char *key);
bool sy_gguf_writer_has_key(const sy_gguf_writer *w, const char *key);

/* ---- tensors (before open) ---- */

/* A tensor of `type` with dims[0] (the row length, a multiple of the type's block) fastest. Its data is the
 * next sy_dtype_row_bytes(type, dims[0]) * dims[1] * ... bytes written. */
bool sy_gguf_writer_add_tensor(sy_gguf_writer *w, const char *name, sy_dtype type, uint32_t n_dims,
                               const uint64_t *dims, char *err, size_t err_size);
uint64_t sy_gguf_writer_tensor_count(const sy_gguf_writer *w);
/* Bytes of the i-th tensor's data (0 when out of range). */
uint64_t sy_gguf_writer_tensor_bytes(const sy_gguf_writer *w, uint64_t i);
/* Size the whole file will have (header, padding and data). */
uint64_t sy_gguf_writer_file_size(const sy_gguf_writer *w);

/* ---- output ---- */

/* Creates the temp file beside `path` (mode 0666 less the umask) and writes the header. */
bool sy_gguf_writer_open(sy_gguf_writer *w, const char *path, char *err, size_t err_size);
/* Appends tensor data. Writing more than the tensors hold is an error. */
bool sy_gguf_writer_write(sy_gguf_writer *w, const void *data, size_t n, char *err, size_t err_size);
/* Checks that every tensor's data was written, flushes, fsyncs and renames the file into place. */
bool sy_gguf_writer_commit(sy_gguf_writer *w, char *err, size_t err_size);

#endif
