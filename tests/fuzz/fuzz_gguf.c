/* Fuzz target: the GGUF reader and, on what it accepts, the SPM tokenizer built from its metadata. Every value
 * the reader hands out is read back (metadata, array elements, the first and last byte of each tensor), so an
 * offset or length the reader failed to check shows up as an out-of-bounds read under the sanitizers. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "model_describe.h"
#include "tokenizer_spm.h"

static volatile uint64_t sink;

static void touch_bytes(const char *s, size_t len) {
    if (len > 0) sink += (unsigned char)s[0] + (unsigned char)s[len - 1];
}

static void read_everything(const sy_gguf *g) {
    for (uint64_t kv = 0; kv < sy_gguf_kv_count(g); kv++) {
        const char *key = sy_gguf_kv_key(g, kv);
        sink += strlen(key);
        if (sy_gguf_find_key(g, key) != (int64_t)kv) abort(); /* keys are unique: lookup finds this entry */
        uint64_t u;
        int64_t i;
        double f;
        bool b;
        const char *s;
        size_t len;
        if (sy_gguf_kv_uint(g, kv, &u)) sink += u;
        if (sy_gguf_kv_int(g, kv, &i)) sink += (uint64_t)i;
        if (sy_gguf_kv_float(g, kv, &f)) sink += (uint64_t)(f == f);
        if (sy_gguf_kv_bool(g, kv, &b)) sink += b;
        if (sy_gguf_kv_string(g, kv, &s, &len)) touch_bytes(s, len);
        sy_gguf_type et;
        uint64_t count;
        if (!sy_gguf_kv_array(g, kv, &et, &count)) continue;
        for (uint64_t e = 0; e < count && e < 4096; e++) {
            if (sy_gguf_array_uint(g, kv, e, &u)) sink += u;
            if (sy_gguf_array_int(g, kv, e, &i)) sink += (uint64_t)i;
            if (sy_gguf_array_float(g, kv, e, &f)) sink += (uint64_t)(f == f);
            if (sy_gguf_array_bool(g, kv, e, &b)) sink += b;
            if (sy_gguf_array_string(g, kv, e, &s, &len)) touch_bytes(s, len);
        }
        if (count > 0 && sy_gguf_array_string(g, kv, count - 1, &s, &len)) touch_bytes(s, len);
    }
    for (uint64_t t = 0; t < sy_gguf_tensor_count(g); t++) {
        const sy_gguf_tensor *ti = sy_gguf_tensor_at(g, t);
        if (sy_gguf_find_tensor(g, ti->name) != ti) abort();
        if (ti->offset + ti->n_bytes > sy_gguf_file_size(g)) abort();
        touch_bytes(ti->data, (size_t)ti->n_bytes);
    }
}

/* What "sy.engine.describe/1" reports of the file: every key and value checked by the sink. */
static int check_value(void *user, const char *key, const sy_metadata_value *v) {
    (void)user;
    sink += strlen(key);
    if (v->type == SY_META_STRING) touch_bytes(v->string, v->len);
    else if (v->type > SY_META_ARRAY) abort();
    return 0;
}

static void describe(const sy_gguf *g) {
    sy_metadata_sink s = {sizeof s, NULL, check_value};
    if (sy_gguf_describe(g, &s) != SY_OK) abort();
}

static void tokenize_with(const sy_gguf *g) {
    sy_spm *tok = sy_spm_from_gguf(g, NULL, 0);
    if (tok == NULL) return;
    static const char text[] = " Hello <s>wor\xe2\x96\x81ld\xff\xc3 </s>  x";
    int32_t ids[256];
    size_t n;
    for (int flags = 0; flags < 4; flags++) {
        if (sy_spm_encode(tok, text, sizeof text - 1, flags & 1, flags & 2, ids, 256, &n) != 0) continue;
        for (size_t i = 0; i < n; i++) {
            if (ids[i] < 0 || (uint32_t)ids[i] >= sy_spm_vocab_size(tok)) abort();
            char piece[64];
            size_t pn;
            sy_spm_decode_token(tok, ids[i], piece, sizeof piece, &pn);
        }
    }
    sy_spm_free(tok);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    sy_gguf *g = sy_gguf_open_memory(data, size, NULL, 0);
    if (g == NULL) return 0;
    read_everything(g);
    describe(g);
    tokenize_with(g);
    sy_gguf_close(g);
    return 0;
}
