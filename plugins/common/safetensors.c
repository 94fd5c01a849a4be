/* SafeTensors reader over read-only mappings; see safetensors.h for the format and the checks. */
#include "safetensors.h"

#include "hf_config.h"
#include "json_reader.h"
#include "sy_dtype.h"
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

#define XXH_STATIC_LINKING_ONLY /* XXH64_state_t on the stack */
#include <xxhash.h>

#define MAX_TENSOR_NAME_BYTES 1024
#define MAX_SHARD_NAME_BYTES 255
#define MAX_SHARDS 4096
#define MAX_INDEX_BYTES (64u * 1000u * 1000u)
/* JSON numbers arrive as doubles: integers below 2^53 are exact, anything larger is refused. */
#define MAX_EXACT_JSON_INTEGER 9007199254740992.0

typedef struct shard {
    char *path; /* as used in messages */
    const uint8_t *bytes;
    size_t size;
    bool mapped; /* false for sy_safetensors_open_memory: the caller owns the bytes */
    const uint8_t *header;
    size_t header_len;
    uint64_t data_start;
    uint64_t data_len;
    char **meta_keys;
    char **meta_values;
    size_t meta_count;
} shard;

struct sy_safetensors {
    shard *shards;
    size_t shard_count;
    sy_safetensors_tensor *tensors;
    size_t tensor_count;
    size_t tensor_cap;
    uint64_t mapped_bytes;
};

/* ---- messages ---- */

/* A name from a hostile file made fit for a one-line message: control bytes become '?', long names are cut. */
typedef struct printable {
    char text[160];
} printable;

static printable printable_name(const char *name) {
    printable p;
    size_t n = 0;
    for (; name[n] != '\0' && n < sizeof p.text - 4; n++) {
        unsigned char c = (unsigned char)name[n];
        p.text[n] = (c < 0x20 || c == 0x7f) ? '?' : (char)c;
    }
    if (name[n] != '\0') {
        memcpy(p.text + n, "...", 3);
        n += 3;
    }
    p.text[n] = '\0';
    return p;
}

#define PN(s) (printable_name(s).text)

/* ---- dtypes ---- */

typedef struct dtype_info {
    const char *name;
    uint32_t bits;
    uint32_t sy; /* sy_dtype id or SY_SAFETENSORS_DTYPE_UNSUPPORTED */
} dtype_info;

/* Every dtype of the SafeTensors format, so that a file using one is read (and its sizes checked) even when no
 * kernel can compute with it; only F32, F16 and BF16 map onto sy_dtype. */
static const dtype_info dtype_table[] = {
    {"F32", 32, SY_DTYPE_F32},
    {"F16", 16, SY_DTYPE_F16},
    {"BF16", 16, SY_DTYPE_BF16},
    {"F64", 64, SY_SAFETENSORS_DTYPE_UNSUPPORTED},
    {"I64", 64, SY_SAFETENSORS_DTYPE_UNSUPPORTED},
    {"U64", 64, SY_SAFETENSORS_DTYPE_UNSUPPORTED},
    {"I32", 32, SY_SAFETENSORS_DTYPE_UNSUPPORTED},
    {"U32", 32, SY_SAFETENSORS_DTYPE_UNSUPPORTED},
    {"I16", 16, SY_SAFETENSORS_DTYPE_UNSUPPORTED},
    {"U16", 16, SY_SAFETENSORS_DTYPE_UNSUPPORTED},
    {"I8", 8, SY_SAFETENSORS_DTYPE_UNSUPPORTED},
    {"U8", 8, SY_SAFETENSORS_DTYPE_UNSUPPORTED},
    {"BOOL", 8, SY_SAFETENSORS_DTYPE_UNSUPPORTED},
    {"F8_E4M3", 8, SY_SAFETENSORS_DTYPE_UNSUPPORTED},
    {"F8_E5M2", 8, SY_SAFETENSORS_DTYPE_UNSUPPORTED},
    {"F8_E8M0", 8, SY_SAFETENSORS_DTYPE_UNSUPPORTED},
    {"F6_E2M3", 6, SY_SAFETENSORS_DTYPE_UNSUPPORTED},
    {"F6_E3M2", 6, SY_SAFETENSORS_DTYPE_UNSUPPORTED},
    {"F4", 4, SY_SAFETENSORS_DTYPE_UNSUPPORTED},
    {"C64", 64, SY_SAFETENSORS_DTYPE_UNSUPPORTED},
};

static const dtype_info *dtype_lookup(const char *name) {
    for (size_t i = 0; i < sizeof dtype_table / sizeof dtype_table[0]; i++) {
        if (strcmp(dtype_table[i].name, name) == 0) return &dtype_table[i];
    }
    return NULL;
}

uint32_t sy_safetensors_dtype_from_name(const char *name) {
    const dtype_info *d = name != NULL ? dtype_lookup(name) : NULL;
    return d != NULL ? d->sy : SY_SAFETENSORS_DTYPE_UNSUPPORTED;
}

/* ---- small helpers ---- */

static uint64_t read_le64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

/* A JSON number that is a non-negative integer small enough to be exact. */
static bool json_uint(const sy_json *item, uint64_t *out) {
    if (!sy_json_is_number(item)) return false;
    double d = item->num;
    if (!(d >= 0.0 && d < MAX_EXACT_JSON_INTEGER)) return false; /* also refuses NaN */
    uint64_t v = (uint64_t)d;
    if ((double)v != d) return false;
    *out = v;
    return true;
}

static uint32_t address_alignment(const void *p) {
    uintptr_t a = (uintptr_t)p;
    uint32_t align = 1;
    while (align < 4096 && (a & align) == 0) align <<= 1;
    return align;
}

static char *dup_string(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d != NULL) memcpy(d, s, n);
    return d;
}

static char *join_path(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    char *p = malloc(a + b + 2);
    if (p == NULL) return NULL;
    memcpy(p, dir, a);
    size_t n = a;
    if (a > 0 && dir[a - 1] != '/') p[n++] = '/';
    memcpy(p + n, name, b + 1);
    return p;
}

/* Directory part of a path ("." when there is none), newly allocated. */
static char *dir_of(const char *path) {
    const char *slash = strrchr(path, '/');
    if (slash == NULL) return dup_string(".");
    if (slash == path) return dup_string("/");
    size_t n = (size_t)(slash - path);
    char *d = malloc(n + 1);
    if (d == NULL) return NULL;
    memcpy(d, path, n);
    d[n] = '\0';
    return d;
}

static bool ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* Open a regular file without blocking (a FIFO would otherwise wait for a writer). */
static int open_regular(const char *path, struct stat *st, char *err, size_t err_size) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        sy_errmsg(err, err_size, "%s: cannot open: %s", PN(path), strerror(errno));
        return -1;
    }
    if (fstat(fd, st) != 0) {
        sy_errmsg(err, err_size, "%s: cannot stat: %s", PN(path), strerror(errno));
        close(fd);
        return -1;
    }
    if (!S_ISREG(st->st_mode)) {
        sy_errmsg(err, err_size, "%s: not a regular file", PN(path));
        close(fd);
        return -1;
    }
    return fd;
}

/* ---- one shard ---- */

static bool push_tensor(sy_safetensors *st, const sy_safetensors_tensor *t) {
    if (st->tensor_count == st->tensor_cap) {
        size_t cap = st->tensor_cap ? st->tensor_cap * 2 : 64;
        sy_safetensors_tensor *grown = realloc(st->tensors, cap * sizeof *grown);
        if (grown == NULL) return false;
        st->tensors = grown;
        st->tensor_cap = cap;
    }
    st->tensors[st->tensor_count++] = *t;
    return true;
}

static bool parse_metadata(shard *sh, const sy_json *meta, char *err, size_t err_size) {
    if (!sy_json_is_object(meta)) {
        sy_errmsg(err, err_size, "%s: __metadata__ is not an object", PN(sh->path));
        return false;
    }
    size_t n = sy_json_size(meta);
    if (n == 0) return true;
    sh->meta_keys = calloc(n, sizeof *sh->meta_keys);
    sh->meta_values = calloc(n, sizeof *sh->meta_values);
    if (sh->meta_keys == NULL || sh->meta_values == NULL) {
        sy_errmsg(err, err_size, "%s: out of memory", PN(sh->path));
        return false;
    }
    for (const sy_json *item = meta->child; item != NULL; item = item->next) {
        if (!sy_json_is_string(item)) {
            sy_errmsg(err, err_size, "%s: __metadata__ value of %s is not a string", PN(sh->path), PN(item->key));
            return false;
        }
        char *k = dup_string(item->key), *v = dup_string(item->str);
        if (k == NULL || v == NULL) {
            free(k);
            free(v);
            sy_errmsg(err, err_size, "%s: out of memory", PN(sh->path));
            return false;
        }
        sh->meta_keys[sh->meta_count] = k;
        sh->meta_values[sh->meta_count] = v;
        sh->meta_count++;
    }
    return true;
}

/* Parse one tensor entry of a header into *t (name not yet owned). */
static bool parse_tensor_entry(const shard *sh, uint32_t shard_index, const sy_json *entry,
                               sy_safetensors_tensor *t, char *err, size_t err_size) {
    const char *name = entry->key;
    const char *file = sh->path;
    size_t name_len = strlen(name);
    if (name_len == 0) {
        sy_errmsg(err, err_size, "%s: a tensor has an empty name", PN(file));
        return false;
    }
    if (name_len > MAX_TENSOR_NAME_BYTES) {
        sy_errmsg(err, err_size, "%s: tensor %s: name of %zu bytes is longer than %d", PN(file), PN(name), name_len,
                MAX_TENSOR_NAME_BYTES);
        return false;
    }
    if (!sy_json_is_object(entry)) {
        sy_errmsg(err, err_size, "%s: tensor %s: entry is not an object", PN(file), PN(name));
        return false;
    }
    memset(t, 0, sizeof *t);

    const sy_json *dtype = sy_json_get(entry, "dtype");
    if (!sy_json_is_string(dtype)) {
        sy_errmsg(err, err_size, "%s: tensor %s: missing or non-string \"dtype\"", PN(file), PN(name));
        return false;
    }
    const dtype_info *info = dtype_lookup(dtype->str);
    if (info == NULL) {
        sy_errmsg(err, err_size, "%s: tensor %s: unknown dtype %s", PN(file), PN(name), PN(dtype->str));
        return false;
    }
    t->dtype_name = info->name;
    t->dtype = info->sy;

    const sy_json *shape = sy_json_get(entry, "shape");
    if (!sy_json_is_array(shape)) {
        sy_errmsg(err, err_size, "%s: tensor %s: missing or non-array \"shape\"", PN(file), PN(name));
        return false;
    }
    size_t rank = sy_json_size(shape);
    if (rank > SY_SAFETENSORS_MAX_DIMS) {
        sy_errmsg(err, err_size, "%s: tensor %s: rank %zu is more than %d", PN(file), PN(name), rank,
                SY_SAFETENSORS_MAX_DIMS);
        return false;
    }
    t->n_dims = (uint32_t)rank;
    uint64_t elements = 1;
    uint32_t d = 0;
    for (const sy_json *dim = shape->child; dim != NULL; dim = dim->next) {
        uint64_t v;
        if (!json_uint(dim, &v)) {
            sy_errmsg(err, err_size, "%s: tensor %s: shape[%u] is not a non-negative integer below 2^53", PN(file),
                    PN(name), d);
            return false;
        }
        t->shape[d++] = v;
        if (__builtin_mul_overflow(elements, v, &elements)) {
            sy_errmsg(err, err_size, "%s: tensor %s: element count of the shape overflows 64 bits", PN(file),
                    PN(name));
            return false;
        }
    }
    t->n_elements = elements;
    uint64_t bits;
    if (__builtin_mul_overflow(elements, (uint64_t)info->bits, &bits)) {
        sy_errmsg(err, err_size, "%s: tensor %s: byte size of %llu %s elements overflows 64 bits", PN(file), PN(name),
                (unsigned long long)elements, info->name);
        return false;
    }
    if (bits % 8 != 0) {
        sy_errmsg(err, err_size, "%s: tensor %s: %llu %s elements do not fill whole bytes", PN(file), PN(name),
                (unsigned long long)elements, info->name);
        return false;
    }
    uint64_t need = bits / 8;

    const sy_json *offsets = sy_json_get(entry, "data_offsets");
    uint64_t begin, end;
    if (!sy_json_is_array(offsets) || sy_json_size(offsets) != 2 ||
        !json_uint(sy_json_at(offsets, 0), &begin) || !json_uint(sy_json_at(offsets, 1), &end)) {
        sy_errmsg(err, err_size, "%s: tensor %s: \"data_offsets\" is not a pair of non-negative integers", PN(file),
                PN(name));
        return false;
    }
    if (begin > end) {
        sy_errmsg(err, err_size, "%s: tensor %s: data_offsets [%llu,%llu) begin after end", PN(file), PN(name),
                (unsigned long long)begin, (unsigned long long)end);
        return false;
    }
    if (end > sh->data_len) {
        sy_errmsg(err, err_size, "%s: tensor %s: data_offsets [%llu,%llu) past the end of the data (%llu bytes)",
                PN(file), PN(name), (unsigned long long)begin, (unsigned long long)end,
                (unsigned long long)sh->data_len);
        return false;
    }
    if (end - begin != need) {
        sy_errmsg(err, err_size,
                "%s: tensor %s: data_offsets [%llu,%llu) hold %llu bytes but %llu %s elements need %llu", PN(file),
                PN(name), (unsigned long long)begin, (unsigned long long)end, (unsigned long long)(end - begin),
                (unsigned long long)elements, info->name, (unsigned long long)need);
        return false;
    }
    t->n_bytes = need;
    t->file_offset = sh->data_start + begin;
    t->data = sh->bytes + t->file_offset;
    t->shard = shard_index;
    t->alignment = address_alignment(t->data);
    return true;
}

static int compare_by_offset(const void *a, const void *b) {
    const sy_safetensors_tensor *x = a, *y = b;
    if (x->file_offset != y->file_offset) return x->file_offset < y->file_offset ? -1 : 1;
    if (x->n_bytes != y->n_bytes) return x->n_bytes < y->n_bytes ? -1 : 1;
    return 0;
}

/* Refuse two tensors of one shard sharing a byte; tensors [first, st->tensor_count) belong to the shard. */
static bool check_overlaps(sy_safetensors *st, size_t first, const char *file, char *err, size_t err_size) {
    size_t n = st->tensor_count - first;
    if (n < 2) return true;
    sy_safetensors_tensor *ts = st->tensors + first;
    qsort(ts, n, sizeof *ts, compare_by_offset);
    const sy_safetensors_tensor *reach = NULL; /* the non-empty tensor ending furthest so far */
    for (size_t i = 0; i < n; i++) {
        if (ts[i].n_bytes == 0) continue;
        if (reach != NULL && ts[i].file_offset < reach->file_offset + reach->n_bytes) {
            sy_errmsg(err, err_size, "%s: tensor %s: data overlaps tensor %s", PN(file), PN(ts[i].name),
                    PN(reach->name));
            return false;
        }
        if (reach == NULL || ts[i].file_offset + ts[i].n_bytes > reach->file_offset + reach->n_bytes) reach = &ts[i];
    }
    return true;
}

/* Validate a shard's bytes and append its tensors to st. */
static bool parse_shard(sy_safetensors *st, uint32_t shard_index, char *err, size_t err_size) {
    shard *sh = &st->shards[shard_index];
    const char *file = sh->path;
    if (sh->size < 8) {
        sy_errmsg(err, err_size, "%s: %zu bytes is too short for a SafeTensors file (8-byte header length missing)",
                PN(file), sh->size);
        return false;
    }
    uint64_t header_len = read_le64(sh->bytes);
    if (header_len > SY_SAFETENSORS_MAX_HEADER_BYTES) {
        sy_errmsg(err, err_size, "%s: header length %llu is over the %u-byte limit", PN(file),
                (unsigned long long)header_len, SY_SAFETENSORS_MAX_HEADER_BYTES);
        return false;
    }
    if (header_len > sh->size - 8) {
        sy_errmsg(err, err_size, "%s: header length %llu runs past the end of the file (%zu bytes)", PN(file),
                (unsigned long long)header_len, sh->size);
        return false;
    }
    if (header_len < 2) {
        sy_errmsg(err, err_size, "%s: header length %llu is too short for a JSON object", PN(file),
                (unsigned long long)header_len);
        return false;
    }
    sh->header = sh->bytes + 8;
    sh->header_len = (size_t)header_len;
    sh->data_start = 8 + header_len;
    sh->data_len = sh->size - sh->data_start;

    /* The reader stays within the header's bytes: no copy is needed to keep it from the tensor data. */
    sy_json_doc doc;
    sy_json_error je;
    size_t parse_end = 0;
    if (!sy_json_parse(&doc, (const char *)sh->header, sh->header_len, &parse_end, &je)) {
        sy_errmsg(err, err_size, "%s: header is not valid JSON (near byte %zu of %zu: %s)", PN(file), je.at,
                sh->header_len, je.what);
        return false;
    }
    /* Writers pad the header with spaces; anything else after the object is not ours to ignore. */
    for (size_t at = parse_end; at < sh->header_len; at++) {
        char c = (char)sh->header[at];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') {
            sy_errmsg(err, err_size, "%s: header has bytes after its JSON object (at byte %zu)", PN(file), at);
            sy_json_doc_free(&doc);
            return false;
        }
    }
    if (doc.saw_nul) {
        sy_errmsg(err, err_size, "%s: header strings containing U+0000 are not supported", PN(file));
        sy_json_doc_free(&doc);
        return false;
    }
    const sy_json *root = doc.root;
    if (!sy_json_is_object(root)) {
        sy_errmsg(err, err_size, "%s: header is not a JSON object", PN(file));
        sy_json_doc_free(&doc);
        return false;
    }

    bool ok = true;
    bool seen_metadata = false;
    size_t first = st->tensor_count;
    for (const sy_json *entry = root->child; entry != NULL; entry = entry->next) {
        if (strcmp(entry->key, "__metadata__") == 0) {
            if (seen_metadata) {
                sy_errmsg(err, err_size, "%s: __metadata__ appears twice", PN(file));
                ok = false;
                break;
            }
            seen_metadata = true;
            if (!parse_metadata(sh, entry, err, err_size)) {
                ok = false;
                break;
            }
            continue;
        }
        sy_safetensors_tensor t;
        if (!parse_tensor_entry(sh, shard_index, entry, &t, err, err_size)) {
            ok = false;
            break;
        }
        t.name = dup_string(entry->key);
        if (t.name == NULL || !push_tensor(st, &t)) {
            free((char *)t.name);
            sy_errmsg(err, err_size, "%s: out of memory", PN(file));
            ok = false;
            break;
        }
    }
    sy_json_doc_free(&doc);
    return ok && check_overlaps(st, first, file, err, err_size);
}

/* ---- the context ---- */

static int compare_by_name(const void *a, const void *b) {
    const sy_safetensors_tensor *x = a, *y = b;
    return strcmp(x->name, y->name);
}

/* Sort by name and refuse duplicates (the JSON reader keeps repeated keys; shards may repeat each other). */
static bool finish(sy_safetensors *st, char *err, size_t err_size) {
    if (st->tensor_count > 1) qsort(st->tensors, st->tensor_count, sizeof *st->tensors, compare_by_name);
    for (size_t i = 1; i < st->tensor_count; i++) {
        if (strcmp(st->tensors[i - 1].name, st->tensors[i].name) == 0) {
            const sy_safetensors_tensor *a = &st->tensors[i - 1], *b = &st->tensors[i];
            if (a->shard == b->shard) {
                sy_errmsg(err, err_size, "%s: tensor %s appears twice", PN(st->shards[a->shard].path), PN(a->name));
            } else {
                char first_file[160];
                snprintf(first_file, sizeof first_file, "%s", PN(st->shards[a->shard].path));
                sy_errmsg(err, err_size, "%s: tensor %s appears in %s too", PN(st->shards[b->shard].path), PN(a->name),
                        first_file);
            }
            return false;
        }
    }
    return true;
}

void sy_safetensors_close(sy_safetensors *st) {
    if (st == NULL) return;
    for (size_t i = 0; i < st->tensor_count; i++) free((char *)st->tensors[i].name);
    free(st->tensors);
    for (size_t s = 0; s < st->shard_count; s++) {
        shard *sh = &st->shards[s];
        if (sh->mapped && sh->bytes != NULL) munmap((void *)sh->bytes, sh->size);
        for (size_t m = 0; m < sh->meta_count; m++) {
            free(sh->meta_keys[m]);
            free(sh->meta_values[m]);
        }
        free(sh->meta_keys);
        free(sh->meta_values);
        free(sh->path);
    }
    free(st->shards);
    free(st);
}

static sy_safetensors *new_context(size_t shard_count) {
    sy_safetensors *st = calloc(1, sizeof *st);
    if (st == NULL) return NULL;
    st->shards = calloc(shard_count, sizeof *st->shards);
    if (st->shards == NULL) {
        free(st);
        return NULL;
    }
    st->shard_count = shard_count;
    return st;
}

sy_safetensors *sy_safetensors_open_memory(const void *data, size_t size, const char *name, char *err,
                                           size_t err_size) {
    if (name == NULL) name = "model.safetensors";
    if (data == NULL && size > 0) {
        sy_errmsg(err, err_size, "%s: no data", PN(name));
        return NULL;
    }
    sy_safetensors *st = new_context(1);
    if (st == NULL || (st->shards[0].path = dup_string(name)) == NULL) {
        sy_errmsg(err, err_size, "%s: out of memory", PN(name));
        sy_safetensors_close(st);
        return NULL;
    }
    st->shards[0].bytes = data;
    st->shards[0].size = size;
    if (!parse_shard(st, 0, err, err_size) || !finish(st, err, err_size)) {
        sy_safetensors_close(st);
        return NULL;
    }
    return st;
}

static bool map_shard(sy_safetensors *st, shard *sh, char *err, size_t err_size) {
    struct stat sb;
    int fd = open_regular(sh->path, &sb, err, err_size);
    if (fd < 0) return false;
    if (sb.st_size < 8) {
        sy_errmsg(err, err_size, "%s: %lld bytes is too short for a SafeTensors file (8-byte header length missing)",
                PN(sh->path), (long long)sb.st_size);
        close(fd);
        return false;
    }
    if ((uint64_t)sb.st_size > SIZE_MAX) {
        sy_errmsg(err, err_size, "%s: too large to map", PN(sh->path));
        close(fd);
        return false;
    }
    size_t size = (size_t)sb.st_size;
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int map_errno = errno;
    close(fd);
    if (map == MAP_FAILED) {
        sy_errmsg(err, err_size, "%s: cannot map %zu bytes: %s", PN(sh->path), size, strerror(map_errno));
        return false;
    }
    sh->bytes = map;
    sh->size = size;
    sh->mapped = true;
    st->mapped_bytes += size;
    return true;
}

static sy_safetensors *open_single(const char *path, char *err, size_t err_size) {
    sy_safetensors *st = new_context(1);
    if (st == NULL || (st->shards[0].path = dup_string(path)) == NULL) {
        sy_errmsg(err, err_size, "%s: out of memory", PN(path));
        sy_safetensors_close(st);
        return NULL;
    }
    if (!map_shard(st, &st->shards[0], err, err_size) || !parse_shard(st, 0, err, err_size) ||
        !finish(st, err, err_size)) {
        sy_safetensors_close(st);
        return NULL;
    }
    return st;
}

/* A shard name from an index must be a plain file name beside the index: no directories, no way out. */
static bool valid_shard_name(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > MAX_SHARD_NAME_BYTES) return false;
    if (strcmp(s, ".") == 0 || strcmp(s, "..") == 0) return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '/' || c == '\\' || c < 0x20 || c == 0x7f) return false;
    }
    return true;
}

static int compare_strings(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static sy_safetensors *open_index(const char *index_path, char *err, size_t err_size) {
    size_t len = 0;
    char *text = sy_hf_read_file(index_path, MAX_INDEX_BYTES, &len, err, err_size);
    if (text == NULL) return NULL;
    sy_json_doc doc;
    sy_json_error je;
    bool parsed = sy_json_parse(&doc, text, len, NULL, &je);
    free(text);
    if (!parsed) {
        sy_errmsg(err, err_size, "%s: not valid JSON (at byte %zu: %s)", PN(index_path), je.at, je.what);
        return NULL;
    }
    if (doc.saw_nul) {
        sy_errmsg(err, err_size, "%s: strings containing U+0000 are not supported", PN(index_path));
        sy_json_doc_free(&doc);
        return NULL;
    }
    const sy_json *root = doc.root;
    sy_safetensors *st = NULL;
    const char **names = NULL;
    char *dir = NULL;
    const sy_json *map = sy_json_get(root, "weight_map");
    if (!sy_json_is_object(root) || !sy_json_is_object(map)) {
        sy_errmsg(err, err_size, "%s: no \"weight_map\" object", PN(index_path));
        goto fail;
    }
    size_t entries = sy_json_size(map);
    if (entries == 0) {
        sy_errmsg(err, err_size, "%s: \"weight_map\" is empty", PN(index_path));
        goto fail;
    }
    names = calloc(entries, sizeof *names);
    if (names == NULL) {
        sy_errmsg(err, err_size, "%s: out of memory", PN(index_path));
        goto fail;
    }
    size_t n = 0;
    for (const sy_json *item = map->child; item != NULL; item = item->next) {
        if (!sy_json_is_string(item) || !valid_shard_name(item->str)) {
            sy_errmsg(err, err_size, "%s: weight_map entry of tensor %s is not a plain file name beside the index",
                    PN(index_path), PN(item->key));
            goto fail;
        }
        names[n++] = item->str;
    }
    qsort(names, n, sizeof *names, compare_strings);
    size_t unique = 0;
    for (size_t i = 0; i < n; i++) {
        if (unique == 0 || strcmp(names[unique - 1], names[i]) != 0) names[unique++] = names[i];
    }
    if (unique > MAX_SHARDS) {
        sy_errmsg(err, err_size, "%s: %zu shard files are more than %d", PN(index_path), unique, MAX_SHARDS);
        goto fail;
    }
    dir = dir_of(index_path);
    st = dir != NULL ? new_context(unique) : NULL;
    if (st == NULL) {
        sy_errmsg(err, err_size, "%s: out of memory", PN(index_path));
        goto fail;
    }
    for (size_t s = 0; s < unique; s++) {
        st->shards[s].path = join_path(dir, names[s]);
        if (st->shards[s].path == NULL) {
            sy_errmsg(err, err_size, "%s: out of memory", PN(index_path));
            goto fail;
        }
        if (!map_shard(st, &st->shards[s], err, err_size) || !parse_shard(st, (uint32_t)s, err, err_size)) goto fail;
    }
    if (!finish(st, err, err_size)) goto fail;
    /* The index must tell the truth about where each tensor lives. */
    for (const sy_json *item = map->child; item != NULL; item = item->next) {
        const sy_safetensors_tensor *t = sy_safetensors_find(st, item->key);
        const char *expected = item->str;
        if (t == NULL) {
            sy_errmsg(err, err_size, "%s: weight_map names tensor %s in %s, which does not hold it", PN(index_path),
                    PN(item->key), PN(expected));
            goto fail;
        }
        const char *actual = st->shards[t->shard].path;
        size_t a = strlen(actual), e = strlen(expected);
        if (!(a >= e && strcmp(actual + a - e, expected) == 0 && (a == e || actual[a - e - 1] == '/'))) {
            sy_errmsg(err, err_size, "%s: weight_map names tensor %s in %s, but it is in %s", PN(index_path),
                    PN(item->key), PN(expected), PN(actual));
            goto fail;
        }
    }
    free(dir);
    free(names);
    sy_json_doc_free(&doc);
    return st;
fail:
    sy_safetensors_close(st);
    free(dir);
    free(names);
    sy_json_doc_free(&doc);
    return NULL;
}

sy_safetensors *sy_safetensors_open(const char *path, char *err, size_t err_size) {
    if (path == NULL || path[0] == '\0') {
        sy_errmsg(err, err_size, "no SafeTensors path given");
        return NULL;
    }
    struct stat sb;
    if (stat(path, &sb) != 0) {
        sy_errmsg(err, err_size, "%s: %s", PN(path), strerror(errno));
        return NULL;
    }
    if (S_ISDIR(sb.st_mode)) {
        char *index = join_path(path, "model.safetensors.index.json");
        char *single = join_path(path, "model.safetensors");
        sy_safetensors *st = NULL;
        if (index == NULL || single == NULL) {
            sy_errmsg(err, err_size, "%s: out of memory", PN(path));
        } else if (stat(index, &sb) == 0) {
            st = open_index(index, err, err_size);
        } else if (stat(single, &sb) == 0) {
            st = open_single(single, err, err_size);
        } else {
            sy_errmsg(err, err_size, "%s: holds neither model.safetensors.index.json nor model.safetensors", PN(path));
        }
        free(index);
        free(single);
        return st;
    }
    if (ends_with(path, ".json")) return open_index(path, err, err_size);
    return open_single(path, err, err_size);
}

/* ---- accessors ---- */

size_t sy_safetensors_count(const sy_safetensors *st) { return st->tensor_count; }

const sy_safetensors_tensor *sy_safetensors_at(const sy_safetensors *st, size_t i) {
    return i < st->tensor_count ? &st->tensors[i] : NULL;
}

const sy_safetensors_tensor *sy_safetensors_find(const sy_safetensors *st, const char *name) {
    if (name == NULL) return NULL;
    size_t lo = 0, hi = st->tensor_count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(st->tensors[mid].name, name);
        if (c == 0) return &st->tensors[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

/* The file name to blame for a missing tensor: the only shard, or the set. */
static const char *checkpoint_name(const sy_safetensors *st) {
    return st->shard_count == 1 ? st->shards[0].path : "checkpoint";
}

const sy_safetensors_tensor *sy_safetensors_require(const sy_safetensors *st, const char *name, char *err,
                                                    size_t err_size) {
    const sy_safetensors_tensor *t = sy_safetensors_find(st, name);
    if (t == NULL) {
        sy_errmsg(err, err_size, "%s: no tensor named %s", PN(checkpoint_name(st)), PN(name != NULL ? name : ""));
        return NULL;
    }
    if (t->dtype == SY_SAFETENSORS_DTYPE_UNSUPPORTED) {
        sy_errmsg(err, err_size, "%s: tensor %s: dtype %s is not supported (F32, F16 and BF16 are)",
                PN(st->shards[t->shard].path), PN(t->name), t->dtype_name);
        return NULL;
    }
    return t;
}

static void format_shape(char *buf, size_t size, uint32_t n_dims, const uint64_t *shape) {
    size_t used = 0;
    buf[0] = '\0';
    for (uint32_t i = 0; i < n_dims && used < size; i++) {
        int w = snprintf(buf + used, size - used, "%s%llu", i ? ", " : "", (unsigned long long)shape[i]);
        if (w < 0) break;
        used += (size_t)w;
    }
}

const sy_safetensors_tensor *sy_safetensors_require_shape(const sy_safetensors *st, const char *name,
                                                          uint32_t n_dims, const uint64_t *shape, char *err,
                                                          size_t err_size) {
    const sy_safetensors_tensor *t = sy_safetensors_require(st, name, err, err_size);
    if (t == NULL) return NULL;
    bool same = t->n_dims == n_dims;
    for (uint32_t i = 0; same && i < n_dims; i++) same = t->shape[i] == shape[i];
    if (!same) {
        char want[200], have[200];
        format_shape(want, sizeof want, n_dims <= SY_SAFETENSORS_MAX_DIMS ? n_dims : SY_SAFETENSORS_MAX_DIMS, shape);
        format_shape(have, sizeof have, t->n_dims, t->shape);
        sy_errmsg(err, err_size, "%s: tensor %s: shape [%s], expected [%s]", PN(st->shards[t->shard].path),
                PN(t->name), have, want);
        return NULL;
    }
    return t;
}

size_t sy_safetensors_shard_count(const sy_safetensors *st) { return st->shard_count; }

const char *sy_safetensors_shard_path(const sy_safetensors *st, size_t shard_index) {
    return shard_index < st->shard_count ? st->shards[shard_index].path : NULL;
}

const void *sy_safetensors_shard_header(const sy_safetensors *st, size_t shard_index, size_t *len) {
    if (shard_index >= st->shard_count) {
        if (len != NULL) *len = 0;
        return NULL;
    }
    if (len != NULL) *len = st->shards[shard_index].header_len;
    return st->shards[shard_index].header;
}

uint64_t sy_safetensors_mapped_bytes(const sy_safetensors *st) { return st->mapped_bytes; }

const char *sy_safetensors_metadata(const sy_safetensors *st, const char *key) {
    if (key == NULL) return NULL;
    for (size_t s = 0; s < st->shard_count; s++) {
        const shard *sh = &st->shards[s];
        for (size_t m = 0; m < sh->meta_count; m++) {
            if (strcmp(sh->meta_keys[m], key) == 0) return sh->meta_values[m];
        }
    }
    return NULL;
}

uint64_t sy_safetensors_fingerprint(const sy_safetensors *st, const void *config_json, size_t config_len) {
    XXH64_state_t state;
    XXH64_reset(&state, 0);
    for (size_t s = 0; s < st->shard_count; s++) {
        XXH64_update(&state, st->shards[s].header, st->shards[s].header_len);
    }
    if (config_json != NULL && config_len > 0) XXH64_update(&state, config_json, config_len);
    return XXH64_digest(&state);
}
