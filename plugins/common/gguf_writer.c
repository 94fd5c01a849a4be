/* GGUF writer: see gguf_writer.h. Metadata values are kept serialized (the bytes that follow the value type in
 * the file), so writing the header is a concatenation. */
#include "gguf_writer.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define GGUF_VERSION 3
#define DEFAULT_ALIGNMENT 32
#define MAX_KEY_BYTES 65535u
#define OUT_BUFFER_BYTES (1u << 20)

typedef struct kv_entry {
    char *key;
    uint32_t type;
    uint8_t *value; /* serialized */
    size_t value_len;
} kv_entry;

typedef struct tensor_entry {
    char *name;
    uint32_t type;
    uint32_t n_dims;
    uint64_t dims[SY_GGUF_MAX_DIMS];
    uint64_t bytes;
    uint64_t offset; /* in the data section */
} tensor_entry;

struct sy_gguf_writer {
    kv_entry *kv;
    size_t n_kv, cap_kv;
    tensor_entry *tensors;
    size_t n_tensors, cap_tensors;
    uint32_t alignment;
    /* output */
    int fd;
    char *path, *tmp_path;
    uint8_t *buf;
    size_t buf_len;
    uint64_t data_written; /* bytes of data section written, padding included */
    uint64_t data_size;    /* bytes of the data section */
    size_t cur_tensor;     /* the tensor being written */
    uint64_t cur_written;  /* of its bytes */
    bool committed;
};

static bool fail(char *err, size_t err_size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool fail(char *err, size_t err_size, const char *fmt, ...) {
    if (err != NULL && err_size > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, err_size, fmt, ap);
        va_end(ap);
    }
    return false;
}

sy_gguf_writer *sy_gguf_writer_new(char *err, size_t err_size) {
    sy_gguf_writer *w = calloc(1, sizeof *w);
    if (w == NULL) {
        fail(err, err_size, "out of memory");
        return NULL;
    }
    w->fd = -1;
    w->alignment = DEFAULT_ALIGNMENT;
    return w;
}

void sy_gguf_writer_free(sy_gguf_writer *w) {
    if (w == NULL) return;
    if (w->fd >= 0) close(w->fd);
    if (w->tmp_path != NULL && !w->committed) unlink(w->tmp_path);
    for (size_t i = 0; i < w->n_kv; i++) {
        free(w->kv[i].key);
        free(w->kv[i].value);
    }
    for (size_t i = 0; i < w->n_tensors; i++) free(w->tensors[i].name);
    free(w->kv);
    free(w->tensors);
    free(w->path);
    free(w->tmp_path);
    free(w->buf);
    free(w);
}

/* ---- metadata ---- */

static ssize_t find_key(const sy_gguf_writer *w, const char *key) {
    for (size_t i = 0; i < w->n_kv; i++)
        if (strcmp(w->kv[i].key, key) == 0) return (ssize_t)i;
    return -1;
}

bool sy_gguf_writer_has_key(const sy_gguf_writer *w, const char *key) { return find_key(w, key) >= 0; }

bool sy_gguf_writer_remove(sy_gguf_writer *w, const char *key) {
    ssize_t i = find_key(w, key);
    if (i < 0) return false;
    free(w->kv[i].key);
    free(w->kv[i].value);
    memmove(&w->kv[i], &w->kv[i + 1], (w->n_kv - (size_t)i - 1) * sizeof *w->kv);
    w->n_kv--;
    return true;
}

/* Takes ownership of value (freed on failure too). */
static bool put_kv(sy_gguf_writer *w, const char *key, uint32_t type, uint8_t *value, size_t len, char *err,
                   size_t err_size) {
    size_t key_len = key ? strlen(key) : 0;
    if (w->fd >= 0 || w->committed) {
        free(value);
        return fail(err, err_size, "metadata key '%s' set after the file was opened", key ? key : "");
    }
    if (key_len == 0 || key_len > MAX_KEY_BYTES) {
        free(value);
        return fail(err, err_size, "metadata key of %zu bytes: keys must have 1 to %u bytes", key_len, MAX_KEY_BYTES);
    }
    sy_gguf_writer_remove(w, key);
    if (w->n_kv == w->cap_kv) {
        size_t cap = w->cap_kv ? w->cap_kv * 2 : 32;
        kv_entry *grown = realloc(w->kv, cap * sizeof *grown);
        if (grown == NULL) {
            free(value);
            return fail(err, err_size, "out of memory");
        }
        w->kv = grown;
        w->cap_kv = cap;
    }
    char *k = strdup(key);
    if (k == NULL) {
        free(value);
        return fail(err, err_size, "out of memory");
    }
    w->kv[w->n_kv++] = (kv_entry){k, type, value, len};
    return true;
}

static bool put_scalar(sy_gguf_writer *w, const char *key, uint32_t type, const void *le, size_t n, char *err,
                       size_t err_size) {
    uint8_t *v = malloc(n);
    if (v == NULL) return fail(err, err_size, "out of memory");
    memcpy(v, le, n);
    return put_kv(w, key, type, v, n, err, err_size);
}

static void le_bytes(uint8_t *p, uint64_t v, size_t n) {
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(v >> (8 * i));
}

bool sy_gguf_writer_set_u32(sy_gguf_writer *w, const char *key, uint32_t v, char *err, size_t err_size) {
    uint8_t b[4];
    le_bytes(b, v, 4);
    return put_scalar(w, key, SY_GGUF_UINT32, b, 4, err, err_size);
}

bool sy_gguf_writer_set_i32(sy_gguf_writer *w, const char *key, int32_t v, char *err, size_t err_size) {
    uint8_t b[4];
    le_bytes(b, (uint32_t)v, 4);
    return put_scalar(w, key, SY_GGUF_INT32, b, 4, err, err_size);
}

bool sy_gguf_writer_set_u64(sy_gguf_writer *w, const char *key, uint64_t v, char *err, size_t err_size) {
    uint8_t b[8];
    le_bytes(b, v, 8);
    return put_scalar(w, key, SY_GGUF_UINT64, b, 8, err, err_size);
}

bool sy_gguf_writer_set_f32(sy_gguf_writer *w, const char *key, float v, char *err, size_t err_size) {
    uint32_t bits;
    memcpy(&bits, &v, 4);
    uint8_t b[4];
    le_bytes(b, bits, 4);
    return put_scalar(w, key, SY_GGUF_FLOAT32, b, 4, err, err_size);
}

bool sy_gguf_writer_set_bool(sy_gguf_writer *w, const char *key, bool v, char *err, size_t err_size) {
    uint8_t b = v ? 1 : 0;
    return put_scalar(w, key, SY_GGUF_BOOL, &b, 1, err, err_size);
}

bool sy_gguf_writer_set_string(sy_gguf_writer *w, const char *key, const char *s, size_t len, char *err,
                               size_t err_size) {
    if (s == NULL && len > 0) return fail(err, err_size, "metadata key '%s': NULL string", key ? key : "");
    if (len > SIZE_MAX - 8) return fail(err, err_size, "metadata key '%s': string too long", key ? key : "");
    uint8_t *v = malloc(8 + len);
    if (v == NULL) return fail(err, err_size, "out of memory");
    le_bytes(v, len, 8);
    if (len) memcpy(v + 8, s, len);
    return put_kv(w, key, SY_GGUF_STRING, v, 8 + len, err, err_size);
}

static size_t scalar_bytes(sy_gguf_type t) {
    switch (t) {
    case SY_GGUF_UINT8: case SY_GGUF_INT8: case SY_GGUF_BOOL: return 1;
    case SY_GGUF_UINT16: case SY_GGUF_INT16: return 2;
    case SY_GGUF_UINT32: case SY_GGUF_INT32: case SY_GGUF_FLOAT32: return 4;
    case SY_GGUF_UINT64: case SY_GGUF_INT64: case SY_GGUF_FLOAT64: return 8;
    default: return 0;
    }
}

bool sy_gguf_writer_set_array(sy_gguf_writer *w, const char *key, sy_gguf_type elem_type, const void *elems,
                              uint64_t n, char *err, size_t err_size) {
    size_t es = scalar_bytes(elem_type);
    if (es == 0) return fail(err, err_size, "metadata key '%s': arrays of %s need their own setter", key ? key : "",
                             sy_gguf_type_name(elem_type));
    if ((elems == NULL && n > 0) || n > (SIZE_MAX - 12) / es)
        return fail(err, err_size, "metadata key '%s': bad array of %llu elements", key ? key : "",
                    (unsigned long long)n);
    size_t len = 12 + (size_t)n * es;
    uint8_t *v = malloc(len);
    if (v == NULL) return fail(err, err_size, "out of memory");
    le_bytes(v, (uint32_t)elem_type, 4);
    le_bytes(v + 4, n, 8);
    if (n) memcpy(v + 12, elems, (size_t)n * es);
    return put_kv(w, key, SY_GGUF_ARRAY, v, len, err, err_size);
}

bool sy_gguf_writer_set_string_array(sy_gguf_writer *w, const char *key, const char *const *strs, const size_t *lens,
                                     uint64_t n, char *err, size_t err_size) {
    if (n > 0 && (strs == NULL || lens == NULL))
        return fail(err, err_size, "metadata key '%s': NULL string array", key ? key : "");
    size_t len = 12;
    for (uint64_t i = 0; i < n; i++) {
        if ((strs[i] == NULL && lens[i] > 0) || lens[i] > SIZE_MAX - 8 - len)
            return fail(err, err_size, "metadata key '%s': string %llu is invalid or too long", key ? key : "",
                        (unsigned long long)i);
        len += 8 + lens[i];
    }
    uint8_t *v = malloc(len);
    if (v == NULL) return fail(err, err_size, "out of memory");
    le_bytes(v, SY_GGUF_STRING, 4);
    le_bytes(v + 4, n, 8);
    size_t at = 12;
    for (uint64_t i = 0; i < n; i++) {
        le_bytes(v + at, lens[i], 8);
        if (lens[i]) memcpy(v + at + 8, strs[i], lens[i]);
        at += 8 + lens[i];
    }
    return put_kv(w, key, SY_GGUF_ARRAY, v, len, err, err_size);
}

/* One scalar of type t read through the reader's accessors, as little-endian bytes. */
static bool scalar_from(const sy_gguf *g, uint64_t kv, bool array, uint64_t i, sy_gguf_type t, uint8_t *out) {
    uint64_t u;
    int64_t s;
    double d;
    bool b;
    switch (t) {
    case SY_GGUF_UINT8: case SY_GGUF_UINT16: case SY_GGUF_UINT32: case SY_GGUF_UINT64:
        if (!(array ? sy_gguf_array_uint(g, kv, i, &u) : sy_gguf_kv_uint(g, kv, &u))) return false;
        le_bytes(out, u, scalar_bytes(t));
        return true;
    case SY_GGUF_INT8: case SY_GGUF_INT16: case SY_GGUF_INT32: case SY_GGUF_INT64:
        if (!(array ? sy_gguf_array_int(g, kv, i, &s) : sy_gguf_kv_int(g, kv, &s))) return false;
        le_bytes(out, (uint64_t)s, scalar_bytes(t));
        return true;
    case SY_GGUF_FLOAT32: {
        if (!(array ? sy_gguf_array_float(g, kv, i, &d) : sy_gguf_kv_float(g, kv, &d))) return false;
        float f = (float)d; /* the value was a float: the round trip through double is exact */
        uint32_t bits;
        memcpy(&bits, &f, 4);
        le_bytes(out, bits, 4);
        return true;
    }
    case SY_GGUF_FLOAT64: {
        if (!(array ? sy_gguf_array_float(g, kv, i, &d) : sy_gguf_kv_float(g, kv, &d))) return false;
        uint64_t bits;
        memcpy(&bits, &d, 8);
        le_bytes(out, bits, 8);
        return true;
    }
    case SY_GGUF_BOOL:
        if (!(array ? sy_gguf_array_bool(g, kv, i, &b) : sy_gguf_kv_bool(g, kv, &b))) return false;
        out[0] = b ? 1 : 0;
        return true;
    default: return false;
    }
}

bool sy_gguf_writer_copy_kv(sy_gguf_writer *w, const sy_gguf *src, uint64_t kv, char *err, size_t err_size) {
    if (src == NULL || kv >= sy_gguf_kv_count(src)) return fail(err, err_size, "metadata entry %llu does not exist",
                                                                (unsigned long long)kv);
    const char *key = sy_gguf_kv_key(src, kv);
    sy_gguf_type type = sy_gguf_kv_type(src, kv);
    if (type == SY_GGUF_STRING) {
        const char *s;
        size_t len;
        sy_gguf_kv_string(src, kv, &s, &len);
        return sy_gguf_writer_set_string(w, key, s, len, err, err_size);
    }
    if (type != SY_GGUF_ARRAY) {
        uint8_t b[8];
        if (!scalar_from(src, kv, false, 0, type, b))
            return fail(err, err_size, "metadata key '%s': cannot read its %s value", key, sy_gguf_type_name(type));
        return put_scalar(w, key, type, b, scalar_bytes(type), err, err_size);
    }
    sy_gguf_type et;
    uint64_t n;
    sy_gguf_kv_array(src, kv, &et, &n);
    if (et == SY_GGUF_STRING) {
        /* the strings are in the source's mapping: point at them */
        if (n > SIZE_MAX / sizeof(char *)) return fail(err, err_size, "metadata key '%s': array too long", key);
        const char **strs = malloc((n ? n : 1) * sizeof *strs);
        size_t *lens = malloc((n ? n : 1) * sizeof *lens);
        bool ok = strs != NULL && lens != NULL;
        for (uint64_t i = 0; ok && i < n; i++) ok = sy_gguf_array_string(src, kv, i, &strs[i], &lens[i]);
        ok = ok ? sy_gguf_writer_set_string_array(w, key, strs, lens, n, err, err_size)
                : fail(err, err_size, "metadata key '%s': cannot read its strings", key);
        free(strs);
        free(lens);
        return ok;
    }
    size_t es = scalar_bytes(et);
    if (es == 0 || n > SIZE_MAX / es) return fail(err, err_size, "metadata key '%s': bad array", key);
    uint8_t *elems = malloc(n ? (size_t)n * es : 1);
    if (elems == NULL) return fail(err, err_size, "out of memory");
    for (uint64_t i = 0; i < n; i++) {
        if (!scalar_from(src, kv, true, i, et, elems + i * es)) {
            free(elems);
            return fail(err, err_size, "metadata key '%s': cannot read element %llu", key, (unsigned long long)i);
        }
    }
    bool ok = sy_gguf_writer_set_array(w, key, et, elems, n, err, err_size);
    free(elems);
    return ok;
}

/* ---- tensors ---- */

static uint64_t pad_to(uint64_t v, uint64_t align) { return (v + align - 1) / align * align; }

bool sy_gguf_writer_add_tensor(sy_gguf_writer *w, const char *name, sy_dtype type, uint32_t n_dims,
                               const uint64_t *dims, char *err, size_t err_size) {
    if (w->fd >= 0 || w->committed) return fail(err, err_size, "tensor added after the file was opened");
    size_t len = name ? strlen(name) : 0;
    if (len == 0 || len > SY_GGUF_WRITER_MAX_NAME)
        return fail(err, err_size, "tensor name '%.80s' has %zu bytes: 1 to %d allowed", name ? name : "", len,
                    SY_GGUF_WRITER_MAX_NAME);
    const sy_dtype_traits *tr = sy_dtype_get(type);
    if (tr == NULL) return fail(err, err_size, "tensor %s: type %u is not a supported type", name, (unsigned)type);
    if (n_dims < 1 || n_dims > SY_GGUF_MAX_DIMS || dims == NULL)
        return fail(err, err_size, "tensor %s: %u dimensions (1 to %d allowed)", name, n_dims, SY_GGUF_MAX_DIMS);
    uint64_t rows = 1;
    for (uint32_t i = 0; i < n_dims; i++) {
        if (dims[i] == 0 || dims[i] > INT64_MAX) return fail(err, err_size, "tensor %s: dimension %u is %llu", name,
                                                             i, (unsigned long long)dims[i]);
        if (i > 0) {
            if (rows > INT64_MAX / dims[i]) return fail(err, err_size, "tensor %s: too many elements", name);
            rows *= dims[i];
        }
    }
    uint64_t row_bytes = sy_dtype_row_bytes(type, dims[0]);
    if (row_bytes == 0)
        return fail(err, err_size, "tensor %s: row of %llu elements is not a multiple of %s's block of %u", name,
                    (unsigned long long)dims[0], tr->name, tr->block_elems);
    if (row_bytes > (UINT64_MAX / 2) / rows) return fail(err, err_size, "tensor %s: too large", name);
    for (size_t i = 0; i < w->n_tensors; i++)
        if (strcmp(w->tensors[i].name, name) == 0) return fail(err, err_size, "tensor %s added twice", name);
    if (w->n_tensors == w->cap_tensors) {
        size_t cap = w->cap_tensors ? w->cap_tensors * 2 : 64;
        tensor_entry *grown = realloc(w->tensors, cap * sizeof *grown);
        if (grown == NULL) return fail(err, err_size, "out of memory");
        w->tensors = grown;
        w->cap_tensors = cap;
    }
    tensor_entry *t = &w->tensors[w->n_tensors];
    memset(t, 0, sizeof *t);
    t->name = strdup(name);
    if (t->name == NULL) return fail(err, err_size, "out of memory");
    t->type = type;
    t->n_dims = n_dims;
    for (uint32_t i = 0; i < SY_GGUF_MAX_DIMS; i++) t->dims[i] = i < n_dims ? dims[i] : 1;
    t->bytes = row_bytes * rows;
    w->n_tensors++;
    return true;
}

uint64_t sy_gguf_writer_tensor_count(const sy_gguf_writer *w) { return w->n_tensors; }

uint64_t sy_gguf_writer_tensor_bytes(const sy_gguf_writer *w, uint64_t i) {
    return i < w->n_tensors ? w->tensors[i].bytes : 0;
}

/* Alignment from general.alignment when set; false when that value is unusable. */
static bool resolve_alignment(sy_gguf_writer *w, char *err, size_t err_size) {
    ssize_t i = find_key(w, "general.alignment");
    w->alignment = DEFAULT_ALIGNMENT;
    if (i < 0) return true;
    const kv_entry *e = &w->kv[i];
    if (e->type != SY_GGUF_UINT32)
        return fail(err, err_size, "general.alignment must be a UINT32, not %s", sy_gguf_type_name(e->type));
    uint32_t a = (uint32_t)e->value[0] | (uint32_t)e->value[1] << 8 | (uint32_t)e->value[2] << 16 |
                 (uint32_t)e->value[3] << 24;
    if (a == 0 || (a & (a - 1)) != 0 || a > (1u << 20))
        return fail(err, err_size, "general.alignment %u is not a power of two up to 1 MiB", a);
    w->alignment = a;
    return true;
}

static uint64_t header_bytes(const sy_gguf_writer *w) {
    uint64_t n = 4 + 4 + 8 + 8;
    for (size_t i = 0; i < w->n_kv; i++) n += 8 + strlen(w->kv[i].key) + 4 + w->kv[i].value_len;
    for (size_t i = 0; i < w->n_tensors; i++) /* name, n_dims, dims, type, offset */
        n += 8 + strlen(w->tensors[i].name) + 4 + 8ull * w->tensors[i].n_dims + 4 + 8;
    return n;
}

/* Lays out the data section: each tensor at an aligned offset, the section padded to the alignment. */
static void layout(sy_gguf_writer *w) {
    uint64_t at = 0;
    for (size_t i = 0; i < w->n_tensors; i++) {
        w->tensors[i].offset = at;
        at = pad_to(at + w->tensors[i].bytes, w->alignment);
    }
    w->data_size = at;
}

uint64_t sy_gguf_writer_file_size(const sy_gguf_writer *w) {
    sy_gguf_writer copy = *w;
    if (!resolve_alignment(&copy, NULL, 0)) copy.alignment = DEFAULT_ALIGNMENT;
    uint64_t at = 0;
    for (size_t i = 0; i < w->n_tensors; i++) at = pad_to(at + w->tensors[i].bytes, copy.alignment);
    return pad_to(header_bytes(w), copy.alignment) + at;
}

/* ---- output ---- */

static bool flush_buffer(sy_gguf_writer *w, char *err, size_t err_size) {
    size_t done = 0;
    while (done < w->buf_len) {
        ssize_t n = write(w->fd, w->buf + done, w->buf_len - done);
        if (n < 0) {
            if (errno == EINTR) continue;
            return fail(err, err_size, "%s: write failed: %s", w->tmp_path, strerror(errno));
        }
        done += (size_t)n;
    }
    w->buf_len = 0;
    return true;
}

static bool out_bytes(sy_gguf_writer *w, const void *data, size_t n, char *err, size_t err_size) {
    const uint8_t *p = data;
    while (n > 0) {
        size_t room = OUT_BUFFER_BYTES - w->buf_len, take = n < room ? n : room;
        if (p != NULL) memcpy(w->buf + w->buf_len, p, take);
        else memset(w->buf + w->buf_len, 0, take); /* NULL: zeros (padding) */
        w->buf_len += take;
        if (p != NULL) p += take;
        n -= take;
        if (w->buf_len == OUT_BUFFER_BYTES && !flush_buffer(w, err, err_size)) return false;
    }
    return true;
}

static bool out_u32(sy_gguf_writer *w, uint32_t v, char *err, size_t err_size) {
    uint8_t b[4];
    le_bytes(b, v, 4);
    return out_bytes(w, b, 4, err, err_size);
}

static bool out_u64(sy_gguf_writer *w, uint64_t v, char *err, size_t err_size) {
    uint8_t b[8];
    le_bytes(b, v, 8);
    return out_bytes(w, b, 8, err, err_size);
}

static bool out_string(sy_gguf_writer *w, const char *s, char *err, size_t err_size) {
    size_t n = strlen(s);
    return out_u64(w, n, err, err_size) && out_bytes(w, s, n, err, err_size);
}

bool sy_gguf_writer_open(sy_gguf_writer *w, const char *path, char *err, size_t err_size) {
    if (w->fd >= 0 || w->committed || w->path != NULL) return fail(err, err_size, "the writer was opened already");
    if (path == NULL || *path == '\0') return fail(err, err_size, "no output path");
    if (!resolve_alignment(w, err, err_size)) return false;
    size_t len = strlen(path);
    w->path = strdup(path);
    w->tmp_path = malloc(len + 32);
    w->buf = malloc(OUT_BUFFER_BYTES);
    if (w->path == NULL || w->tmp_path == NULL || w->buf == NULL) return fail(err, err_size, "out of memory");
    /* O_EXCL with the permissions of any new file (0666 less the umask, unlike mkstemp's 0600) */
    static atomic_uint counter;
    for (int attempt = 0; attempt < 100 && w->fd < 0; attempt++) {
        snprintf(w->tmp_path, len + 32, "%s.tmp-%ld-%u", path, (long)getpid(), atomic_fetch_add(&counter, 1));
        w->fd = open(w->tmp_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (w->fd < 0 && errno != EEXIST) break;
    }
    if (w->fd < 0) {
        int e = errno;
        free(w->tmp_path);
        w->tmp_path = NULL;
        return fail(err, err_size, "%s: cannot create a file beside it: %s", path, strerror(e));
    }
    layout(w);
    bool ok = out_bytes(w, "GGUF", 4, err, err_size) && out_u32(w, GGUF_VERSION, err, err_size) &&
              out_u64(w, w->n_tensors, err, err_size) && out_u64(w, w->n_kv, err, err_size);
    for (size_t i = 0; ok && i < w->n_kv; i++)
        ok = out_string(w, w->kv[i].key, err, err_size) && out_u32(w, w->kv[i].type, err, err_size) &&
             out_bytes(w, w->kv[i].value, w->kv[i].value_len, err, err_size);
    for (size_t i = 0; ok && i < w->n_tensors; i++) {
        const tensor_entry *t = &w->tensors[i];
        ok = out_string(w, t->name, err, err_size) && out_u32(w, t->n_dims, err, err_size);
        for (uint32_t d = 0; ok && d < t->n_dims; d++) ok = out_u64(w, t->dims[d], err, err_size);
        ok = ok && out_u32(w, t->type, err, err_size) && out_u64(w, t->offset, err, err_size);
    }
    uint64_t hdr = header_bytes(w);
    ok = ok && out_bytes(w, NULL, (size_t)(pad_to(hdr, w->alignment) - hdr), err, err_size);
    w->cur_tensor = 0;
    w->cur_written = 0;
    w->data_written = 0;
    return ok;
}

bool sy_gguf_writer_write(sy_gguf_writer *w, const void *data, size_t n, char *err, size_t err_size) {
    if (w->fd < 0 || w->committed) return fail(err, err_size, "the writer is not open");
    if (data == NULL && n > 0) return fail(err, err_size, "NULL tensor data");
    const uint8_t *p = data;
    while (n > 0) {
        if (w->cur_tensor >= w->n_tensors)
            return fail(err, err_size, "%zu bytes of tensor data beyond the last tensor", n);
        const tensor_entry *t = &w->tensors[w->cur_tensor];
        uint64_t left = t->bytes - w->cur_written;
        size_t take = n < left ? n : (size_t)left;
        if (!out_bytes(w, p, take, err, err_size)) return false;
        p += take;
        n -= take;
        w->cur_written += take;
        if (w->cur_written == t->bytes) {
            uint64_t end = t->offset + t->bytes, padded = pad_to(end, w->alignment);
            if (!out_bytes(w, NULL, (size_t)(padded - end), err, err_size)) return false;
            w->cur_tensor++;
            w->cur_written = 0;
        }
    }
    return true;
}

bool sy_gguf_writer_commit(sy_gguf_writer *w, char *err, size_t err_size) {
    if (w->fd < 0 || w->committed) return fail(err, err_size, "the writer is not open");
    /* zero-byte tensors cannot exist (dims >= 1), so every tensor must have been completed */
    if (w->cur_tensor < w->n_tensors)
        return fail(err, err_size, "tensor %s: %llu of %llu bytes written", w->tensors[w->cur_tensor].name,
                    (unsigned long long)w->cur_written, (unsigned long long)w->tensors[w->cur_tensor].bytes);
    if (!flush_buffer(w, err, err_size)) return false;
    if (fsync(w->fd) != 0) return fail(err, err_size, "%s: fsync failed: %s", w->tmp_path, strerror(errno));
    if (close(w->fd) != 0) {
        w->fd = -1;
        return fail(err, err_size, "%s: close failed: %s", w->tmp_path, strerror(errno));
    }
    w->fd = -1;
    if (rename(w->tmp_path, w->path) != 0)
        return fail(err, err_size, "cannot rename %s to %s: %s", w->tmp_path, w->path, strerror(errno));
    w->committed = true;
    /* make the rename itself durable */
    char *dir_copy = strdup(w->path);
    if (dir_copy != NULL) {
        int dfd = open(dirname(dir_copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) {
            fsync(dfd);
            close(dfd);
        }
        free(dir_copy);
    }
    return true;
}
