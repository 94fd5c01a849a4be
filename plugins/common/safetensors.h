/* SafeTensors reader: one `model.safetensors` or a sharded set named by `model.safetensors.index.json`, each file
 * mapped read-only (MAP_PRIVATE, PROT_READ) and read in place: tensor data is never copied.
 *
 * File layout: 8 bytes little-endian header length N, N bytes of JSON header (an object: tensor name ->
 * {"dtype", "shape", "data_offsets": [begin, end)}, plus an optional "__metadata__" object of string -> string),
 * then the data section; offsets count from the start of the data section.
 *
 * Every header field is checked before use: the header length against the file and a 100 MB cap, every dtype
 * name (unknown ones refused; known ones without a kernel are kept and refused when a tensor is required),
 * rank <= 8, each dimension and the element count overflow-checked, data_offsets inside the data section with
 * begin <= end and end - begin equal to the element count times the element size, and no two tensors sharing a
 * byte. A bad file gets one error line naming the file and the tensor, e.g.
 *   model.safetensors: tensor model.layers.3.mlp.up_proj.weight: data_offsets [a,b) past the end of the data
 *   (c bytes)
 *
 * After a successful open every accessor is a plain read of immutable data and may be called from any thread.
 * The mappings stay valid until sy_safetensors_close; a file truncated by someone else while mapped faults on
 * access (SIGBUS), which no reader of a mapping can prevent.
 */
#ifndef SY_SAFETENSORS_H
#define SY_SAFETENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SY_SAFETENSORS_MAX_DIMS 8
/* Largest JSON header accepted. Real checkpoints have headers of tens to hundreds of KB. */
#define SY_SAFETENSORS_MAX_HEADER_BYTES (100u * 1000u * 1000u)
/* Value of sy_safetensors_tensor.dtype for a dtype the reader knows but no switchyard kernel handles (I64, F8...). */
#define SY_SAFETENSORS_DTYPE_UNSUPPORTED UINT32_MAX

typedef struct sy_safetensors sy_safetensors;

/* One tensor. `shape` is row-major as in PyTorch: shape[n_dims-1] varies fastest; a weight of nn.Linear(in, out)
 * has shape {out, in}. A scalar has n_dims 0 and one element. */
typedef struct sy_safetensors_tensor {
    const char *name;       /* NUL-terminated, owned by the context */
    const char *dtype_name; /* the file's spelling: "F32", "BF16", "I64", ... */
    uint32_t dtype;         /* sy_dtype id (SY_DTYPE_F32/F16/BF16) or SY_SAFETENSORS_DTYPE_UNSUPPORTED */
    uint32_t n_dims;
    uint64_t shape[SY_SAFETENSORS_MAX_DIMS]; /* unused entries are 0 */
    uint64_t n_elements;
    uint64_t n_bytes;
    const void *data;     /* inside the read-only mapping of its shard; never NULL (not to be read when n_bytes is 0) */
    uint32_t shard;       /* index into the shard list */
    uint64_t file_offset; /* from the start of the shard file */
    /* Largest power of two (at most 4096) that divides the data's address. Data of an element type of size s is
     * safe to read through a pointer of that type only when alignment >= s. */
    uint32_t alignment;
} sy_safetensors_tensor;

/* Open a checkpoint. `path` is a directory (holding model.safetensors.index.json, else model.safetensors), a
 * `.safetensors` file, or an index `.json` file whose weight_map names shard files in the same directory.
 * On failure returns NULL and writes one line to err (if err_size > 0). */
sy_safetensors *sy_safetensors_open(const char *path, char *err, size_t err_size);
/* Parse one file's bytes that the caller keeps alive and unchanged until close (tests, fuzzing); `name` is used
 * in messages. Nothing is copied. */
sy_safetensors *sy_safetensors_open_memory(const void *data, size_t size, const char *name, char *err,
                                           size_t err_size);
void sy_safetensors_close(sy_safetensors *st);

/* ---- tensors ---- */

size_t sy_safetensors_count(const sy_safetensors *st);
/* The i-th tensor in name order (so iteration is deterministic), NULL when out of range. */
const sy_safetensors_tensor *sy_safetensors_at(const sy_safetensors *st, size_t i);
/* A tensor by name, NULL when absent. O(log n). */
const sy_safetensors_tensor *sy_safetensors_find(const sy_safetensors *st, const char *name);
/* A tensor the caller is about to compute with: NULL with a message naming the file and tensor when it is absent
 * or its dtype is not one of F32, F16, BF16. */
const sy_safetensors_tensor *sy_safetensors_require(const sy_safetensors *st, const char *name, char *err,
                                                    size_t err_size);
/* As sy_safetensors_require, and the shape must be exactly {shape[0], ..., shape[n_dims-1]}. */
const sy_safetensors_tensor *sy_safetensors_require_shape(const sy_safetensors *st, const char *name,
                                                          uint32_t n_dims, const uint64_t *shape, char *err,
                                                          size_t err_size);

/* ---- files ---- */

size_t sy_safetensors_shard_count(const sy_safetensors *st);
/* Path of a shard as opened (directory + file name), NULL when out of range. */
const char *sy_safetensors_shard_path(const sy_safetensors *st, size_t shard);
/* A shard's JSON header bytes exactly as in the file (not NUL-terminated). */
const void *sy_safetensors_shard_header(const sy_safetensors *st, size_t shard, size_t *len);
/* Bytes of all mappings together (for memory accounting). */
uint64_t sy_safetensors_mapped_bytes(const sy_safetensors *st);
/* Value of a "__metadata__" entry (first shard that has it), NULL when absent. */
const char *sy_safetensors_metadata(const sy_safetensors *st, const char *key);

/* Stable identity of a checkpoint: xxHash64 (seed 0) over each shard's header bytes in shard order, then the
 * config bytes (config.json as read; may be NULL/0). Equal files give equal values across runs and machines. */
uint64_t sy_safetensors_fingerprint(const sy_safetensors *st, const void *config_json, size_t config_len);

/* "F32" -> SY_DTYPE_F32 etc.; SY_SAFETENSORS_DTYPE_UNSUPPORTED for any other name. */
uint32_t sy_safetensors_dtype_from_name(const char *name);

#endif
