/* GGUF reader: see gguf.h. Layout (all little-endian):
 *
 *   u32 magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv
 *   n_kv x      { string key | u32 value_type | value }
 *   n_tensors x { string name | u32 n_dims | u64 dims[n_dims] | u32 ggml_type | u64 offset }
 *   padding to general.alignment (default 32) | tensor data (offsets relative to here)
 *
 *   string = u64 length | bytes;  array = u32 elem_type | u64 count | elements
 *
 * The parser walks the header with a bounds-checked cursor; nothing is allocated before the count that sizes it
 * has been checked against the bytes that are left (every record has a minimum size). */
#include "gguf.h"
#include "errmsg.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define GGUF_MAGIC_BYTES "GGUF"
#define MAX_KEY_BYTES 65535u    /* the specification's limit */
#define MAX_NAME_BYTES 255u     /* ggml allows 63; leave room, still bounded */
#define MAX_ALIGNMENT (1u << 20) /* far above any real file; keeps padding arithmetic trivial */

/* Every ggml tensor type with its block geometry, so that sizes of any tensor can be bounds-checked and
 * unsupported types named. Ids absent here (removed types) are unknown. */
typedef struct ggml_type_info {
    const char *name;
    uint32_t block_elems;
    uint32_t block_bytes;
} ggml_type_info;

static const ggml_type_info ggml_types[] = {
    [0] = {"f32", 1, 4},        [1] = {"f16", 1, 2},         [2] = {"q4_0", 32, 18},
    [3] = {"q4_1", 32, 20},     [6] = {"q5_0", 32, 22},      [7] = {"q5_1", 32, 24},
    [8] = {"q8_0", 32, 34},     [9] = {"q8_1", 32, 36},      [10] = {"q2_k", 256, 84},
    [11] = {"q3_k", 256, 110},  [12] = {"q4_k", 256, 144},   [13] = {"q5_k", 256, 176},
    [14] = {"q6_k", 256, 210},  [15] = {"q8_k", 256, 292},   [16] = {"iq2_xxs", 256, 66},
    [17] = {"iq2_xs", 256, 74}, [18] = {"iq3_xxs", 256, 98}, [19] = {"iq1_s", 256, 50},
    [20] = {"iq4_nl", 32, 18},  [21] = {"iq3_s", 256, 110},  [22] = {"iq2_s", 256, 82},
    [23] = {"iq4_xs", 256, 136}, [24] = {"i8", 1, 1},        [25] = {"i16", 1, 2},
    [26] = {"i32", 1, 4},       [27] = {"i64", 1, 8},        [28] = {"f64", 1, 8},
    [29] = {"iq1_m", 256, 56},  [30] = {"bf16", 1, 2},       [34] = {"tq1_0", 256, 54},
    [35] = {"tq2_0", 256, 66},  [39] = {"mxfp4", 32, 17},    [40] = {"nvfp4", 64, 36},
    [41] = {"q1_0", 128, 18},
};
#define N_GGML_TYPES (sizeof ggml_types / sizeof ggml_types[0])

static const ggml_type_info *ggml_type_get(uint32_t id) {
    if (id >= N_GGML_TYPES || ggml_types[id].name == NULL) return NULL;
    return &ggml_types[id];
}

const char *sy_gguf_tensor_type_name(uint32_t type) {
    const ggml_type_info *t = ggml_type_get(type);
    return t ? t->name : NULL;
}

static const char *const value_type_names[SY_GGUF_TYPE_COUNT_] = {
    "uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
    "bool", "string", "array", "uint64", "int64", "float64",
};

const char *sy_gguf_type_name(uint32_t type) {
    return type < SY_GGUF_TYPE_COUNT_ ? value_type_names[type] : "invalid";
}

/* Bytes of a fixed-size value type; 0 for string, array and invalid ids. */
static uint32_t scalar_size(uint32_t type) {
    switch (type) {
    case SY_GGUF_UINT8: case SY_GGUF_INT8: case SY_GGUF_BOOL: return 1;
    case SY_GGUF_UINT16: case SY_GGUF_INT16: return 2;
    case SY_GGUF_UINT32: case SY_GGUF_INT32: case SY_GGUF_FLOAT32: return 4;
    case SY_GGUF_UINT64: case SY_GGUF_INT64: case SY_GGUF_FLOAT64: return 8;
    default: return 0;
    }
}

typedef struct kv_entry {
    const char *key;     /* in the arena (fixed up after parsing) */
    size_t key_at;       /* offset of the key in the arena while parsing */
    sy_gguf_type type;
    sy_gguf_type elem_type; /* arrays */
    uint64_t count;         /* arrays: elements; strings: bytes */
    uint64_t value_at;      /* file offset: scalar bytes, string bytes, or first array element */
    uint64_t first_string;  /* arrays of strings: index into string_at */
} kv_entry;

struct sy_gguf {
    const uint8_t *base;
    uint64_t size;
    void *mapping; /* non-NULL when we mmap'ed (unmap on close) */
    uint32_t version;
    uint32_t alignment;
    uint64_t infos_offset;
    uint64_t header_size;
    uint64_t data_offset;

    uint64_t n_kv;
    kv_entry *kv;
    uint64_t *kv_by_key; /* kv indices sorted by key */

    uint64_t n_tensors;
    sy_gguf_tensor *tensors;
    size_t *tensor_name_at;    /* arena offsets while parsing */
    uint64_t *tensors_by_name; /* tensor indices sorted by name */

    uint64_t n_strings; /* elements of all string arrays */
    uint64_t *string_at; /* file offset of each element's u64 length */

    char *arena;
    size_t arena_used, arena_cap;
};

/* ---- errors ---- */

typedef struct parser {
    sy_gguf *g;
    uint64_t pos;
    char *err;
    size_t err_size;
} parser;

/* A file-provided name made safe for a one-line message: printable ASCII, at most 80 chars. */
static const char *printable(const char *s, size_t len, char buf[96]) {
    size_t n = 0;
    for (size_t i = 0; i < len && n < 80; i++) {
        unsigned char c = (unsigned char)s[i];
        buf[n++] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
    }
    if (len > 80) {
        memcpy(buf + n, "...", 3);
        n += 3;
    }
    buf[n] = '\0';
    return buf;
}

/* ---- bounds-checked cursor ---- */

static uint64_t remaining(const parser *p) { return p->g->size - p->pos; }

static uint64_t load_u64(const uint8_t *b) {
    uint64_t v;
    memcpy(&v, b, 8);
    return v; /* the build targets little-endian hosts, like GGUF itself */
}
static uint32_t load_u32(const uint8_t *b) {
    uint32_t v;
    memcpy(&v, b, 4);
    return v;
}

static bool read_u32(parser *p, uint32_t *out) {
    if (remaining(p) < 4) return false;
    *out = load_u32(p->g->base + p->pos);
    p->pos += 4;
    return true;
}

static bool read_u64(parser *p, uint64_t *out) {
    if (remaining(p) < 8) return false;
    *out = load_u64(p->g->base + p->pos);
    p->pos += 8;
    return true;
}

/* Reads a string header; leaves *at at the first byte and skips the bytes. */
static bool read_string(parser *p, uint64_t *at, uint64_t *len) {
    if (!read_u64(p, len)) return false;
    if (*len > remaining(p)) return false;
    *at = p->pos;
    p->pos += *len;
    return true;
}

/* Copies bytes into the arena with a NUL; returns the arena offset or SIZE_MAX on allocation failure. */
static size_t arena_add(sy_gguf *g, const uint8_t *bytes, size_t len) {
    if (len >= SIZE_MAX - g->arena_used - 1) return SIZE_MAX;
    size_t need = g->arena_used + len + 1;
    if (need > g->arena_cap) {
        size_t cap = g->arena_cap ? g->arena_cap : 1024;
        while (cap < need) cap = cap > SIZE_MAX / 2 ? need : cap * 2;
        char *a = realloc(g->arena, cap);
        if (a == NULL) return SIZE_MAX;
        g->arena = a;
        g->arena_cap = cap;
    }
    size_t at = g->arena_used;
    memcpy(g->arena + at, bytes, len);
    g->arena[at + len] = '\0';
    g->arena_used = need;
    return at;
}

/* ---- metadata ---- */

static bool parse_value(parser *p, kv_entry *e, const char *what) {
    char nb[96];
    const char *key = printable(p->g->arena + e->key_at, strlen(p->g->arena + e->key_at), nb);
    uint32_t type;
    if (!read_u32(p, &type)) {
        sy_errmsg(p->err, p->err_size, "%s '%s': file ends inside its value type", what, key);
        return false;
    }
    if (type >= SY_GGUF_TYPE_COUNT_) {
        sy_errmsg(p->err, p->err_size, "%s '%s': invalid value type %u", what, key, type);
        return false;
    }
    e->type = (sy_gguf_type)type;
    if (type == SY_GGUF_STRING) {
        if (!read_string(p, &e->value_at, &e->count)) {
            sy_errmsg(p->err, p->err_size, "%s '%s': string runs past the end of the file", what, key);
            return false;
        }
        return true;
    }
    if (type != SY_GGUF_ARRAY) {
        uint32_t sz = scalar_size(type);
        if (remaining(p) < sz) {
            sy_errmsg(p->err, p->err_size, "%s '%s': file ends inside its %s value", what, key,
                      sy_gguf_type_name(type));
            return false;
        }
        e->value_at = p->pos;
        p->pos += sz;
        return true;
    }
    uint32_t elem;
    uint64_t count;
    if (!read_u32(p, &elem) || !read_u64(p, &count)) {
        sy_errmsg(p->err, p->err_size, "%s '%s': file ends inside its array header", what, key);
        return false;
    }
    if (elem == SY_GGUF_ARRAY) {
        sy_errmsg(p->err, p->err_size, "%s '%s': arrays of arrays are not supported", what, key);
        return false;
    }
    if (elem >= SY_GGUF_TYPE_COUNT_) {
        sy_errmsg(p->err, p->err_size, "%s '%s': invalid array element type %u", what, key, elem);
        return false;
    }
    e->elem_type = (sy_gguf_type)elem;
    e->count = count;
    e->value_at = p->pos;
    if (elem != SY_GGUF_STRING) {
        uint32_t sz = scalar_size(elem);
        if (count > remaining(p) / sz) {
            sy_errmsg(p->err, p->err_size, "%s '%s': array of %llu %s runs past the end of the file", what, key,
                      (unsigned long long)count, sy_gguf_type_name(elem));
            return false;
        }
        p->pos += count * sz;
        return true;
    }
    /* Each string takes at least its 8-byte length, which bounds the count before we size anything by it. */
    if (count > remaining(p) / 8) {
        sy_errmsg(p->err, p->err_size, "%s '%s': array of %llu strings runs past the end of the file", what, key,
                  (unsigned long long)count);
        return false;
    }
    sy_gguf *g = p->g;
    uint64_t total = g->n_strings + count;
    if (count > 0) {
        if (total > SIZE_MAX / sizeof(uint64_t)) {
            sy_errmsg(p->err, p->err_size, "%s '%s': too many strings", what, key);
            return false;
        }
        uint64_t *s = realloc(g->string_at, (size_t)total * sizeof(uint64_t));
        if (s == NULL) {
            sy_errmsg(p->err, p->err_size, "%s '%s': out of memory for %llu strings", what, key,
                      (unsigned long long)count);
            return false;
        }
        g->string_at = s;
    }
    e->first_string = g->n_strings;
    for (uint64_t i = 0; i < count; i++) {
        uint64_t at, len;
        g->string_at[g->n_strings + i] = p->pos;
        if (!read_string(p, &at, &len)) {
            sy_errmsg(p->err, p->err_size, "%s '%s': string %llu of the array runs past the end of the file",
                      what, key, (unsigned long long)i);
            return false;
        }
    }
    g->n_strings = total;
    return true;
}

/* ---- sorting helpers (qsort has no context argument in C11, so sort index arrays with a tiny merge) ---- */

typedef int (*index_cmp)(const sy_gguf *g, uint64_t a, uint64_t b);

static void merge_sort(const sy_gguf *g, uint64_t *idx, uint64_t *tmp, uint64_t n, index_cmp cmp) {
    if (n < 2) return;
    uint64_t h = n / 2;
    merge_sort(g, idx, tmp, h, cmp);
    merge_sort(g, idx + h, tmp, n - h, cmp);
    uint64_t i = 0, j = h, k = 0;
    while (i < h && j < n) tmp[k++] = cmp(g, idx[j], idx[i]) < 0 ? idx[j++] : idx[i++];
    while (i < h) tmp[k++] = idx[i++];
    while (j < n) tmp[k++] = idx[j++];
    memcpy(idx, tmp, n * sizeof *idx);
}

static int cmp_key(const sy_gguf *g, uint64_t a, uint64_t b) { return strcmp(g->kv[a].key, g->kv[b].key); }
static int cmp_name(const sy_gguf *g, uint64_t a, uint64_t b) {
    return strcmp(g->tensors[a].name, g->tensors[b].name);
}
static int cmp_offset(const sy_gguf *g, uint64_t a, uint64_t b) {
    const sy_gguf_tensor *x = &g->tensors[a], *y = &g->tensors[b];
    return x->offset < y->offset ? -1 : x->offset > y->offset ? 1 : 0;
}

/* Sorted identity permutation of n; NULL on allocation failure (n == 0 gives a valid 1-element buffer). */
static uint64_t *sorted_index(const sy_gguf *g, uint64_t n, index_cmp cmp) {
    uint64_t *idx = malloc((size_t)(n ? n : 1) * sizeof *idx);
    uint64_t *tmp = malloc((size_t)(n ? n : 1) * sizeof *tmp);
    if (idx == NULL || tmp == NULL) {
        free(idx);
        free(tmp);
        return NULL;
    }
    for (uint64_t i = 0; i < n; i++) idx[i] = i;
    merge_sort(g, idx, tmp, n, cmp);
    free(tmp);
    return idx;
}

/* ---- the parse ---- */

static bool parse_header(parser *p) {
    sy_gguf *g = p->g;
    if (g->size < 4 || memcmp(g->base, GGUF_MAGIC_BYTES, 4) != 0) {
        sy_errmsg(p->err, p->err_size, "not a GGUF file (bad magic)");
        return false;
    }
    p->pos = 4;
    uint32_t version;
    if (!read_u32(p, &version)) {
        sy_errmsg(p->err, p->err_size, "file ends inside the GGUF header (version)");
        return false;
    }
    if (version == 0x02000000u || version == 0x03000000u) {
        sy_errmsg(p->err, p->err_size, "big-endian GGUF files are not supported");
        return false;
    }
    if (version != 2 && version != 3) {
        sy_errmsg(p->err, p->err_size, "unsupported GGUF version %u (2 and 3 are supported)", version);
        return false;
    }
    g->version = version;
    uint64_t n_tensors, n_kv;
    if (!read_u64(p, &n_tensors) || !read_u64(p, &n_kv)) {
        sy_errmsg(p->err, p->err_size, "file ends inside the GGUF header (counts)");
        return false;
    }
    /* Minimum record sizes: a kv is key length (8) + type (4) + at least one value byte; a tensor info is name
     * length (8) + n_dims (4) + type (4) + offset (8). */
    if (n_kv > remaining(p) / 13) {
        sy_errmsg(p->err, p->err_size, "metadata count %llu is more than the file can hold",
                  (unsigned long long)n_kv);
        return false;
    }
    if (n_tensors > remaining(p) / 24) {
        sy_errmsg(p->err, p->err_size, "tensor count %llu is more than the file can hold",
                  (unsigned long long)n_tensors);
        return false;
    }
    g->n_kv = n_kv;
    g->n_tensors = n_tensors;
    return true;
}

static bool parse_kvs(parser *p) {
    sy_gguf *g = p->g;
    g->kv = calloc((size_t)(g->n_kv ? g->n_kv : 1), sizeof *g->kv);
    if (g->kv == NULL) {
        sy_errmsg(p->err, p->err_size, "out of memory for %llu metadata entries", (unsigned long long)g->n_kv);
        return false;
    }
    for (uint64_t i = 0; i < g->n_kv; i++) {
        kv_entry *e = &g->kv[i];
        uint64_t at, len;
        if (!read_string(p, &at, &len)) {
            sy_errmsg(p->err, p->err_size, "metadata entry %llu: key runs past the end of the file",
                      (unsigned long long)i);
            return false;
        }
        char nb[96];
        if (len == 0 || len > MAX_KEY_BYTES || memchr(g->base + at, '\0', (size_t)len) != NULL) {
            sy_errmsg(p->err, p->err_size, "metadata entry %llu: invalid key '%s' (empty, too long or holding NUL)",
                      (unsigned long long)i, printable((const char *)g->base + at, (size_t)len, nb));
            return false;
        }
        e->key_at = arena_add(g, g->base + at, (size_t)len);
        if (e->key_at == SIZE_MAX) {
            sy_errmsg(p->err, p->err_size, "out of memory for metadata keys");
            return false;
        }
        if (!parse_value(p, e, "metadata key")) return false;
    }
    return true;
}

static bool parse_tensor_infos(parser *p) {
    sy_gguf *g = p->g;
    g->infos_offset = p->pos;
    g->tensors = calloc((size_t)(g->n_tensors ? g->n_tensors : 1), sizeof *g->tensors);
    g->tensor_name_at = calloc((size_t)(g->n_tensors ? g->n_tensors : 1), sizeof *g->tensor_name_at);
    if (g->tensors == NULL || g->tensor_name_at == NULL) {
        sy_errmsg(p->err, p->err_size, "out of memory for %llu tensor infos", (unsigned long long)g->n_tensors);
        return false;
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        sy_gguf_tensor *t = &g->tensors[i];
        uint64_t at, len;
        char nb[96];
        if (!read_string(p, &at, &len)) {
            sy_errmsg(p->err, p->err_size, "tensor info %llu: name runs past the end of the file",
                      (unsigned long long)i);
            return false;
        }
        const char *name = printable((const char *)g->base + at, (size_t)len, nb);
        if (len == 0 || len > MAX_NAME_BYTES || memchr(g->base + at, '\0', (size_t)len) != NULL) {
            sy_errmsg(p->err, p->err_size, "tensor info %llu: invalid name '%s' (empty, too long or holding NUL)",
                      (unsigned long long)i, name);
            return false;
        }
        g->tensor_name_at[i] = arena_add(g, g->base + at, (size_t)len);
        if (g->tensor_name_at[i] == SIZE_MAX) {
            sy_errmsg(p->err, p->err_size, "out of memory for tensor names");
            return false;
        }
        if (!read_u32(p, &t->n_dims)) {
            sy_errmsg(p->err, p->err_size, "tensor '%s': file ends inside its info", name);
            return false;
        }
        if (t->n_dims > SY_GGUF_MAX_DIMS) {
            sy_errmsg(p->err, p->err_size, "tensor '%s': %u dimensions (at most %d)", name, t->n_dims,
                      SY_GGUF_MAX_DIMS);
            return false;
        }
        uint64_t n_elements = 1;
        for (uint32_t d = 0; d < SY_GGUF_MAX_DIMS; d++) {
            t->dims[d] = 1;
            if (d >= t->n_dims) continue;
            if (!read_u64(p, &t->dims[d])) {
                sy_errmsg(p->err, p->err_size, "tensor '%s': file ends inside its dimensions", name);
                return false;
            }
            if (t->dims[d] > (uint64_t)INT64_MAX ||
                (t->dims[d] != 0 && n_elements > (uint64_t)INT64_MAX / t->dims[d])) {
                sy_errmsg(p->err, p->err_size, "tensor '%s': element count overflows", name);
                return false;
            }
            n_elements *= t->dims[d];
        }
        t->n_elements = n_elements;
        if (!read_u32(p, &t->type) || !read_u64(p, &t->offset)) {
            sy_errmsg(p->err, p->err_size, "tensor '%s': file ends inside its info", name);
            return false;
        }
        const ggml_type_info *ti = ggml_type_get(t->type);
        if (ti == NULL) {
            sy_errmsg(p->err, p->err_size, "tensor '%s': unknown tensor type id %u", name, t->type);
            return false;
        }
        if (t->dims[0] % ti->block_elems != 0) {
            sy_errmsg(p->err, p->err_size, "tensor '%s': row of %llu elements is not a whole number of %s blocks",
                      name, (unsigned long long)t->dims[0], ti->name);
            return false;
        }
        /* bytes = blocks per row * block bytes * rows; rows = n_elements / dims[0] (0 rows when empty) */
        uint64_t rows = t->dims[0] ? n_elements / t->dims[0] : 0;
        /* A row of INT64_MAX f32 or f64 elements would wrap: blocks times block bytes is checked too. */
        uint64_t blocks = t->dims[0] / ti->block_elems;
        if (blocks > UINT64_MAX / ti->block_bytes) {
            sy_errmsg(p->err, p->err_size, "tensor '%s': the bytes of a row of %llu %s elements overflow", name,
                      (unsigned long long)t->dims[0], ti->name);
            return false;
        }
        uint64_t row_bytes = blocks * ti->block_bytes;
        t->row_bytes = row_bytes;
        if (rows != 0 && row_bytes > UINT64_MAX / rows) {
            sy_errmsg(p->err, p->err_size, "tensor '%s': byte size overflows", name);
            return false;
        }
        t->n_bytes = row_bytes * rows;
    }
    return true;
}

static bool apply_alignment(parser *p) {
    sy_gguf *g = p->g;
    g->alignment = SY_GGUF_DEFAULT_ALIGNMENT;
    int64_t kv = sy_gguf_find_key(g, "general.alignment");
    if (kv >= 0) {
        uint64_t a;
        if (!sy_gguf_kv_uint(g, (uint64_t)kv, &a)) {
            sy_errmsg(p->err, p->err_size, "metadata key 'general.alignment': expected an unsigned integer, found %s",
                      sy_gguf_type_name(g->kv[kv].type));
            return false;
        }
        if (a == 0 || (a & (a - 1)) != 0 || a > MAX_ALIGNMENT) {
            sy_errmsg(p->err, p->err_size,
                      "metadata key 'general.alignment': %llu is not a power of two between 1 and %u",
                      (unsigned long long)a, MAX_ALIGNMENT);
            return false;
        }
        g->alignment = (uint32_t)a;
    }
    g->header_size = p->pos;
    if (p->pos > UINT64_MAX - MAX_ALIGNMENT) {
        sy_errmsg(p->err, p->err_size, "header too large");
        return false;
    }
    g->data_offset = (p->pos + g->alignment - 1) & ~(uint64_t)(g->alignment - 1);
    return true;
}

static bool check_tensor_data(parser *p) {
    sy_gguf *g = p->g;
    char nb[96];
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        sy_gguf_tensor *t = &g->tensors[i];
        const char *name = printable(t->name, strlen(t->name), nb);
        if (t->offset % g->alignment != 0) {
            sy_errmsg(p->err, p->err_size, "tensor '%s': data offset %llu is not a multiple of the alignment %u",
                      name, (unsigned long long)t->offset, g->alignment);
            return false;
        }
        if (g->data_offset > g->size || t->offset > g->size - g->data_offset ||
            t->n_bytes > g->size - g->data_offset - t->offset) {
            sy_errmsg(p->err, p->err_size, "tensor '%s': data extends past the end of the file", name);
            return false;
        }
        t->offset += g->data_offset;
        t->data = g->base + t->offset;
    }
    uint64_t *by_offset = sorted_index(g, g->n_tensors, cmp_offset);
    if (by_offset == NULL) {
        sy_errmsg(p->err, p->err_size, "out of memory sorting tensors");
        return false;
    }
    for (uint64_t i = 1; i < g->n_tensors; i++) {
        const sy_gguf_tensor *a = &g->tensors[by_offset[i - 1]], *b = &g->tensors[by_offset[i]];
        if (a->offset + a->n_bytes > b->offset && a->n_bytes != 0 && b->n_bytes != 0) {
            char nb2[96];
            sy_errmsg(p->err, p->err_size, "tensor '%s': data overlaps tensor '%s'",
                      printable(b->name, strlen(b->name), nb), printable(a->name, strlen(a->name), nb2));
            free(by_offset);
            return false;
        }
    }
    free(by_offset);
    return true;
}

static bool build_indexes(parser *p) {
    sy_gguf *g = p->g;
    char nb[96];
    for (uint64_t i = 0; i < g->n_kv; i++) g->kv[i].key = g->arena + g->kv[i].key_at;
    for (uint64_t i = 0; i < g->n_tensors; i++) g->tensors[i].name = g->arena + g->tensor_name_at[i];
    g->kv_by_key = sorted_index(g, g->n_kv, cmp_key);
    g->tensors_by_name = sorted_index(g, g->n_tensors, cmp_name);
    if (g->kv_by_key == NULL || g->tensors_by_name == NULL) {
        sy_errmsg(p->err, p->err_size, "out of memory indexing the header");
        return false;
    }
    for (uint64_t i = 1; i < g->n_kv; i++) {
        const char *k = g->kv[g->kv_by_key[i]].key;
        if (strcmp(g->kv[g->kv_by_key[i - 1]].key, k) == 0) {
            sy_errmsg(p->err, p->err_size, "metadata key '%s' appears twice", printable(k, strlen(k), nb));
            return false;
        }
    }
    for (uint64_t i = 1; i < g->n_tensors; i++) {
        const char *n = g->tensors[g->tensors_by_name[i]].name;
        if (strcmp(g->tensors[g->tensors_by_name[i - 1]].name, n) == 0) {
            sy_errmsg(p->err, p->err_size, "tensor '%s' appears twice", printable(n, strlen(n), nb));
            return false;
        }
    }
    return true;
}

static sy_gguf *parse(sy_gguf *g, char *err, size_t err_size) {
    parser p = {g, 0, err, err_size};
    if (parse_header(&p) && parse_kvs(&p) && parse_tensor_infos(&p) && build_indexes(&p) &&
        apply_alignment(&p) && check_tensor_data(&p)) {
        free(g->tensor_name_at);
        g->tensor_name_at = NULL;
        return g;
    }
    sy_gguf_close(g);
    return NULL;
}

sy_gguf *sy_gguf_open_memory(const void *data, size_t size, char *err, size_t err_size) {
    if (data == NULL && size != 0) {
        sy_errmsg(err, err_size, "no data");
        return NULL;
    }
    sy_gguf *g = calloc(1, sizeof *g);
    if (g == NULL) {
        sy_errmsg(err, err_size, "out of memory");
        return NULL;
    }
    g->base = data ? data : (const uint8_t *)"";
    g->size = size;
    return parse(g, err, err_size);
}

sy_gguf *sy_gguf_open(const char *path, char *err, size_t err_size) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        sy_errmsg(err, err_size, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        sy_errmsg(err, err_size, "%s: cannot stat: %s", path, strerror(errno));
        close(fd);
        return NULL;
    }
    if (!S_ISREG(st.st_mode)) {
        sy_errmsg(err, err_size, "%s: not a regular file", path);
        close(fd);
        return NULL;
    }
    if (st.st_size < 24) {
        close(fd);
        sy_errmsg(err, err_size, "%s: too small to be a GGUF file (%lld bytes)", path, (long long)st.st_size);
        return NULL;
    }
    if ((uint64_t)st.st_size > SIZE_MAX) {
        close(fd);
        sy_errmsg(err, err_size, "%s: too large to map", path);
        return NULL;
    }
    void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int map_errno = errno;
    close(fd);
    if (m == MAP_FAILED) {
        sy_errmsg(err, err_size, "%s: cannot map: %s", path, strerror(map_errno));
        return NULL;
    }
    sy_gguf *g = calloc(1, sizeof *g);
    if (g == NULL) {
        munmap(m, (size_t)st.st_size);
        sy_errmsg(err, err_size, "out of memory");
        return NULL;
    }
    g->base = m;
    g->size = (uint64_t)st.st_size;
    g->mapping = m;
    char inner[256];
    sy_gguf *r = parse(g, inner, sizeof inner);
    if (r == NULL) sy_errmsg(err, err_size, "%s: %s", path, inner);
    return r;
}

void sy_gguf_close(sy_gguf *g) {
    if (g == NULL) return;
    if (g->mapping) munmap(g->mapping, (size_t)g->size);
    free(g->kv);
    free(g->kv_by_key);
    free(g->tensors);
    free(g->tensor_name_at);
    free(g->tensors_by_name);
    free(g->string_at);
    free(g->arena);
    free(g);
}

bool sy_gguf_has_magic(const void *head, size_t n) { return n >= 4 && memcmp(head, GGUF_MAGIC_BYTES, 4) == 0; }

uint32_t sy_gguf_version(const sy_gguf *g) { return g->version; }
uint32_t sy_gguf_alignment(const sy_gguf *g) { return g->alignment; }
uint64_t sy_gguf_file_size(const sy_gguf *g) { return g->size; }
const void *sy_gguf_file_data(const sy_gguf *g) { return g->base; }
uint64_t sy_gguf_tensor_infos_offset(const sy_gguf *g) { return g->infos_offset; }
uint64_t sy_gguf_header_size(const sy_gguf *g) { return g->header_size; }
uint64_t sy_gguf_data_offset(const sy_gguf *g) { return g->data_offset; }

/* ---- metadata accessors ---- */

uint64_t sy_gguf_kv_count(const sy_gguf *g) { return g->n_kv; }

int64_t sy_gguf_find_key(const sy_gguf *g, const char *key) {
    uint64_t lo = 0, hi = g->n_kv;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        int c = strcmp(g->kv[g->kv_by_key[mid]].key, key);
        if (c == 0) return (int64_t)g->kv_by_key[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return -1;
}

const char *sy_gguf_kv_key(const sy_gguf *g, uint64_t kv) { return kv < g->n_kv ? g->kv[kv].key : NULL; }

sy_gguf_type sy_gguf_kv_type(const sy_gguf *g, uint64_t kv) {
    return kv < g->n_kv ? g->kv[kv].type : SY_GGUF_TYPE_COUNT_;
}

/* Reads one fixed-size value of `type` at file offset `at` as the requested family. */
static bool value_uint(const uint8_t *b, sy_gguf_type type, uint64_t *out) {
    switch (type) {
    case SY_GGUF_UINT8: *out = b[0]; return true;
    case SY_GGUF_UINT16: { uint16_t v; memcpy(&v, b, 2); *out = v; return true; }
    case SY_GGUF_UINT32: *out = load_u32(b); return true;
    case SY_GGUF_UINT64: *out = load_u64(b); return true;
    case SY_GGUF_INT8: { int8_t v; memcpy(&v, b, 1); if (v < 0) return false; *out = (uint64_t)v; return true; }
    case SY_GGUF_INT16: { int16_t v; memcpy(&v, b, 2); if (v < 0) return false; *out = (uint64_t)v; return true; }
    case SY_GGUF_INT32: { int32_t v; memcpy(&v, b, 4); if (v < 0) return false; *out = (uint64_t)v; return true; }
    case SY_GGUF_INT64: { int64_t v; memcpy(&v, b, 8); if (v < 0) return false; *out = (uint64_t)v; return true; }
    default: return false;
    }
}

static bool value_int(const uint8_t *b, sy_gguf_type type, int64_t *out) {
    switch (type) {
    case SY_GGUF_INT8: { int8_t v; memcpy(&v, b, 1); *out = v; return true; }
    case SY_GGUF_INT16: { int16_t v; memcpy(&v, b, 2); *out = v; return true; }
    case SY_GGUF_INT32: { int32_t v; memcpy(&v, b, 4); *out = v; return true; }
    case SY_GGUF_INT64: { int64_t v; memcpy(&v, b, 8); *out = v; return true; }
    default: {
        uint64_t u;
        if (!value_uint(b, type, &u) || u > (uint64_t)INT64_MAX) return false;
        *out = (int64_t)u;
        return true;
    }
    }
}

static bool value_float(const uint8_t *b, sy_gguf_type type, double *out) {
    if (type == SY_GGUF_FLOAT32) {
        float v;
        memcpy(&v, b, 4);
        *out = v;
        return true;
    }
    if (type == SY_GGUF_FLOAT64) {
        memcpy(out, b, 8);
        return true;
    }
    return false;
}

static bool value_bool(const uint8_t *b, sy_gguf_type type, bool *out) {
    if (type != SY_GGUF_BOOL) return false;
    *out = b[0] != 0;
    return true;
}

static const kv_entry *scalar_entry(const sy_gguf *g, uint64_t kv) {
    if (kv >= g->n_kv || g->kv[kv].type == SY_GGUF_ARRAY || g->kv[kv].type == SY_GGUF_STRING) return NULL;
    return &g->kv[kv];
}

bool sy_gguf_kv_uint(const sy_gguf *g, uint64_t kv, uint64_t *out) {
    const kv_entry *e = scalar_entry(g, kv);
    return e && value_uint(g->base + e->value_at, e->type, out);
}
bool sy_gguf_kv_int(const sy_gguf *g, uint64_t kv, int64_t *out) {
    const kv_entry *e = scalar_entry(g, kv);
    return e && value_int(g->base + e->value_at, e->type, out);
}
bool sy_gguf_kv_float(const sy_gguf *g, uint64_t kv, double *out) {
    const kv_entry *e = scalar_entry(g, kv);
    return e && value_float(g->base + e->value_at, e->type, out);
}
bool sy_gguf_kv_bool(const sy_gguf *g, uint64_t kv, bool *out) {
    const kv_entry *e = scalar_entry(g, kv);
    return e && value_bool(g->base + e->value_at, e->type, out);
}
bool sy_gguf_kv_string(const sy_gguf *g, uint64_t kv, const char **s, size_t *len) {
    if (kv >= g->n_kv || g->kv[kv].type != SY_GGUF_STRING) return false;
    *s = (const char *)g->base + g->kv[kv].value_at;
    *len = (size_t)g->kv[kv].count;
    return true;
}

bool sy_gguf_kv_array(const sy_gguf *g, uint64_t kv, sy_gguf_type *elem_type, uint64_t *count) {
    if (kv >= g->n_kv || g->kv[kv].type != SY_GGUF_ARRAY) return false;
    if (elem_type) *elem_type = g->kv[kv].elem_type;
    if (count) *count = g->kv[kv].count;
    return true;
}

/* Address of the i-th fixed-size element, NULL when kv is not such an array or i is out of range. */
static const uint8_t *array_elem(const sy_gguf *g, uint64_t kv, uint64_t i, sy_gguf_type *type) {
    if (kv >= g->n_kv || g->kv[kv].type != SY_GGUF_ARRAY || i >= g->kv[kv].count) return NULL;
    uint32_t sz = scalar_size(g->kv[kv].elem_type);
    if (sz == 0) return NULL;
    *type = g->kv[kv].elem_type;
    return g->base + g->kv[kv].value_at + i * sz;
}

bool sy_gguf_array_uint(const sy_gguf *g, uint64_t kv, uint64_t i, uint64_t *out) {
    sy_gguf_type t;
    const uint8_t *b = array_elem(g, kv, i, &t);
    return b && value_uint(b, t, out);
}
bool sy_gguf_array_int(const sy_gguf *g, uint64_t kv, uint64_t i, int64_t *out) {
    sy_gguf_type t;
    const uint8_t *b = array_elem(g, kv, i, &t);
    return b && value_int(b, t, out);
}
bool sy_gguf_array_float(const sy_gguf *g, uint64_t kv, uint64_t i, double *out) {
    sy_gguf_type t;
    const uint8_t *b = array_elem(g, kv, i, &t);
    return b && value_float(b, t, out);
}
bool sy_gguf_array_bool(const sy_gguf *g, uint64_t kv, uint64_t i, bool *out) {
    sy_gguf_type t;
    const uint8_t *b = array_elem(g, kv, i, &t);
    return b && value_bool(b, t, out);
}
bool sy_gguf_array_string(const sy_gguf *g, uint64_t kv, uint64_t i, const char **s, size_t *len) {
    if (kv >= g->n_kv || g->kv[kv].type != SY_GGUF_ARRAY || g->kv[kv].elem_type != SY_GGUF_STRING ||
        i >= g->kv[kv].count)
        return false;
    uint64_t at = g->string_at[g->kv[kv].first_string + i];
    *len = (size_t)load_u64(g->base + at);
    *s = (const char *)g->base + at + 8;
    return true;
}

static int get_by_key(const sy_gguf *g, const char *key, int64_t *kv) {
    *kv = sy_gguf_find_key(g, key);
    return *kv >= 0;
}

int sy_gguf_get_uint(const sy_gguf *g, const char *key, uint64_t *out) {
    int64_t kv;
    if (!get_by_key(g, key, &kv)) return 0;
    return sy_gguf_kv_uint(g, (uint64_t)kv, out) ? 1 : -1;
}
int sy_gguf_get_int(const sy_gguf *g, const char *key, int64_t *out) {
    int64_t kv;
    if (!get_by_key(g, key, &kv)) return 0;
    return sy_gguf_kv_int(g, (uint64_t)kv, out) ? 1 : -1;
}
int sy_gguf_get_float(const sy_gguf *g, const char *key, double *out) {
    int64_t kv;
    if (!get_by_key(g, key, &kv)) return 0;
    return sy_gguf_kv_float(g, (uint64_t)kv, out) ? 1 : -1;
}
int sy_gguf_get_bool(const sy_gguf *g, const char *key, bool *out) {
    int64_t kv;
    if (!get_by_key(g, key, &kv)) return 0;
    return sy_gguf_kv_bool(g, (uint64_t)kv, out) ? 1 : -1;
}
int sy_gguf_get_string(const sy_gguf *g, const char *key, const char **s, size_t *len) {
    int64_t kv;
    if (!get_by_key(g, key, &kv)) return 0;
    return sy_gguf_kv_string(g, (uint64_t)kv, s, len) ? 1 : -1;
}

char *sy_gguf_dup_string(const sy_gguf *g, const char *key) {
    const char *s;
    size_t len;
    if (sy_gguf_get_string(g, key, &s, &len) != 1 || memchr(s, '\0', len) != NULL || len == SIZE_MAX) return NULL;
    char *d = malloc(len + 1);
    if (d == NULL) return NULL;
    memcpy(d, s, len);
    d[len] = '\0';
    return d;
}

/* ---- tensors ---- */

uint64_t sy_gguf_tensor_count(const sy_gguf *g) { return g->n_tensors; }

const sy_gguf_tensor *sy_gguf_tensor_at(const sy_gguf *g, uint64_t i) {
    return i < g->n_tensors ? &g->tensors[i] : NULL;
}

const sy_gguf_tensor *sy_gguf_find_tensor(const sy_gguf *g, const char *name) {
    uint64_t lo = 0, hi = g->n_tensors;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        int c = strcmp(g->tensors[g->tensors_by_name[mid]].name, name);
        if (c == 0) return &g->tensors[g->tensors_by_name[mid]];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}
