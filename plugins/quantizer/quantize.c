/* switchyard quantize IN OUT TYPE (the program switchyard-quantize, which the verb runs): writes a GGUF file of
 * type TYPE (Q4_K_M, Q8_0, ...) from
 *   - a GGUF file with F32 / F16 / BF16 weights: metadata copied, tensors converted; or
 *   - a Hugging Face SafeTensors checkpoint directory (qwen2, qwen3, llama; bert with its sentence-transformers
 *     files): config.json and tokenizer.json turned into the metadata llama.cpp's convert_hf_to_gguf.py writes,
 *     tensors renamed to llama.cpp's names (llama's q/k rows reordered into GGUF's interleaved RoPE pairs), vectors
 *     stored as F32.
 *
 * Per-tensor types follow llama.cpp's rules for the recipe (plugins/common/quantize.h), and the quantized bytes
 * equal llama.cpp's, so a file written here matches `llama-quantize` tensor for tensor (GGUF input) and loads in
 * llama.cpp. Tensors are written in llama.cpp's order. The output appears atomically (temp file, fsync, rename):
 * a failed run removes its temp file, a killed one leaves the destination untouched (and the temp file beside it).
 *
 * Work is streamed: a few MB of rows at a time are converted to f32, checked for NaN/Inf and quantized by the
 * thread pool, then written, so memory stays small whatever the model size. */
#include <errno.h>
#include <getopt.h>
#include <libgen.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <switchyard/engine.h>

#include "bert_config.h"
#include "gguf.h"
#include "gguf_writer.h"
#include "hf_config.h"
#include "quantize.h"
#include "quantizer.h"
#include "safetensors.h"
#include "sy_kernels.h"
#include "tensor_names.h"
#include "threadpool.h"
#include "tokenizer_bpe.h"

#define VERB "quantize"
#define CHUNK_ELEMENTS ((size_t)4 << 20) /* floats converted per step: 16 MB of f32 */
#define TASK_ELEMENTS ((size_t)1 << 16)  /* floats per thread-pool task */
#define MAX_TOKENIZER_JSON ((size_t)256 << 20)

/* GGUF token types (tokenizer.ggml.token_type). */
enum { TOKEN_NORMAL = 1, TOKEN_CONTROL = 3, TOKEN_USER_DEFINED = 4, TOKEN_UNUSED = 5 };

typedef struct qtensor {
    char *name; /* the GGUF name */
    const void *data;
    sy_dtype src_type;
    uint32_t n_dims;
    uint64_t dims[4];
    uint32_t permute_heads; /* llama q/k from Hugging Face: row groups of this many heads to interleave */
    sy_quant_tensor plan;
} qtensor;

typedef struct run {
    const char *in, *out;
    sy_quant_ftype ftype;
    size_t threads;
    bool dry_run, progress;
    sy_gguf *gguf;
    sy_safetensors *st;
    sy_gguf_writer *w;
    qtensor *t;
    size_t n, cap;
    sy_quant_model model;
    char err[1024];
} run;

/* One line on stderr, worded as the `switchyard quantize` verb's messages. */
static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("switchyard " VERB ": ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static bool failf(run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool failf(run *r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err, sizeof r->err, fmt, ap);
    va_end(ap);
    return false;
}

/* Monotonic seconds, for the summary line. */
static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* --threads N: decimal digits only, 1 to SY_THREADPOOL_MAX_THREADS. */
static bool parse_threads(const char *s, size_t *out) {
    if (*s == '\0' || *s == '-' || *s == '+') return false;
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v == 0 || v > SY_THREADPOOL_MAX_THREADS) return false;
    *out = (size_t)v;
    return true;
}

static void usage(FILE *out) {
    fprintf(out,
            "usage: switchyard quantize [options] IN OUT TYPE\n\n"
            "Writes OUT, a GGUF file of TYPE, from IN: a GGUF file with F32/F16/BF16 weights, or a Hugging Face\n"
            "SafeTensors checkpoint directory (qwen2, qwen3, llama, bert; config.json + tokenizer.json). Tensor types\n"
            "follow llama.cpp's choices for TYPE (e.g. Q4_K_M keeps output.weight and some attn_v/ffn_down layers\n"
            "in Q6_K; rows that 256 does not divide fall back to Q5_0/Q5_1/Q8_0). OUT appears only when complete.\n\n"
            "TYPE: %s\n\n"
            "  --threads N        quantization threads (default: the CPUs this process may use)\n"
            "  --dry-run          print each tensor's type choice and write nothing\n"
            "  --no-progress      no progress line (it is shown only on a terminal anyway)\n"
            "  --plugin-dir DIR   accepted for symmetry with the other verbs; unused\n"
            "  -h, --help         this text\n",
            sy_quant_ftype_list());
}

/* A SafeTensors tensor the writer can take: F32, F16 or BF16, a vector or a matrix. */
static bool source_tensor_ok(run *r, const sy_safetensors_tensor *st) {
    if (st->dtype != SY_DTYPE_F32 && st->dtype != SY_DTYPE_F16 && st->dtype != SY_DTYPE_BF16)
        return failf(r, "%s: tensor %s has dtype %s (F32, F16 and BF16 are supported)", r->in, st->name,
                     st->dtype_name);
    if (st->n_dims < 1 || st->n_dims > 2)
        return failf(r, "%s: tensor %s has %u dimensions", r->in, st->name, st->n_dims);
    return true;
}

static bool add_tensor(run *r, const char *name, const void *data, sy_dtype type, uint32_t n_dims,
                       const uint64_t *dims) {
    if (r->n == r->cap) {
        size_t cap = r->cap ? 2 * r->cap : 256;
        qtensor *grown = realloc(r->t, cap * sizeof *grown);
        if (grown == NULL) return failf(r, "out of memory");
        r->t = grown;
        r->cap = cap;
    }
    char *copy = strdup(name);
    if (copy == NULL) return failf(r, "out of memory");
    qtensor *t = &r->t[r->n++];
    memset(t, 0, sizeof *t);
    t->name = copy;
    t->data = data;
    t->src_type = type;
    t->n_dims = n_dims;
    for (uint32_t i = 0; i < 4; i++) t->dims[i] = i < n_dims ? dims[i] : 1;
    return true;
}

/* ---- GGUF input ---- */

static bool arch_uint(const sy_gguf *g, const char *arch, const char *suffix, uint64_t *out) {
    char key[160];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    int64_t kv = sy_gguf_find_key(g, key);
    if (kv < 0) return false;
    sy_gguf_type et;
    uint64_t n;
    if (sy_gguf_kv_array(g, (uint64_t)kv, &et, &n)) { /* per-layer values (hybrid models): the largest */
        uint64_t best = 0, v;
        for (uint64_t i = 0; i < n; i++)
            if (sy_gguf_array_uint(g, (uint64_t)kv, i, &v) && v > best) best = v;
        *out = best;
        return n > 0;
    }
    return sy_gguf_kv_uint(g, (uint64_t)kv, out);
}

static bool load_gguf(run *r) {
    r->gguf = sy_gguf_open(r->in, r->err, sizeof r->err);
    if (r->gguf == NULL) return false;
    const sy_gguf *g = r->gguf;
    char *arch = sy_gguf_dup_string(g, "general.architecture");
    if (arch == NULL) return failf(r, "%s: no general.architecture", r->in);
    uint64_t v;
    r->model.n_layer = arch_uint(g, arch, "block_count", &v) && v <= UINT32_MAX ? (uint32_t)v : 0;
    r->model.n_head = arch_uint(g, arch, "attention.head_count", &v) && v <= UINT32_MAX ? (uint32_t)v : 0;
    r->model.n_head_kv = arch_uint(g, arch, "attention.head_count_kv", &v) && v <= UINT32_MAX ? (uint32_t)v : 0;
    free(arch);
    /* metadata as it is, then the two keys llama.cpp rewrites (which moves them to the end, as there) */
    for (uint64_t i = 0; i < sy_gguf_kv_count(g); i++)
        if (!sy_gguf_writer_copy_kv(r->w, g, i, r->err, sizeof r->err)) return false;
    for (uint64_t i = 0; i < sy_gguf_tensor_count(g); i++) {
        const sy_gguf_tensor *t = sy_gguf_tensor_at(g, i);
        if (sy_dtype_get(t->type) == NULL) {
            const char *tn = sy_gguf_tensor_type_name(t->type);
            return failf(r, "%s: tensor %s has type %s, which switchyard cannot read", r->in, t->name,
                         tn ? tn : "unknown");
        }
        if (!add_tensor(r, t->name, t->data, (sy_dtype)t->type, t->n_dims, t->dims)) return false;
    }
    return true;
}

/* ---- SafeTensors input ---- */

/* The GGUF name of a Hugging Face tensor (tensor_names.h): 1 mapped, 0 to skip, -1 unknown. */
static int gguf_name(const char *hf, const sy_hf_config *cfg, char *out, size_t size, sy_tensor_role *role) {
    if (sy_tensor_hf_ignored(hf)) return 0;
    uint32_t layer;
    if (!sy_tensor_role_of(sy_tensor_scheme_of_hf(cfg->arch), hf, role, &layer) ||
        (sy_tensor_role_per_layer(*role) && layer >= cfg->num_hidden_layers))
        return -1;
    if (*role == SY_TENSOR_OUTPUT && cfg->tie_word_embeddings) return 0; /* the embedding is the output */
    return sy_tensor_name(SY_TENSORS_GGUF, *role, layer, out, size) ? 1 : -1;
}

/* Check text for telling pre-tokenizers apart, as llama.cpp's converter does: digits runs, contractions, mixed
 * scripts, whitespace runs, emoji, NFD text. */
static const char CHECK_TEXT[] =
    "\n \n\n \n\n\n \t \t\t \t\n  \n   \n    \n     \n\xf0\x9f\x9a\x80 (normal) 3 33 333 3333 33333 333333 3.3 "
    "3..3 ?\xe6\x88\x91\xe6\x83\xb3\xe5\x9c\xa8" "apple\xe5\xb7\xa5\xe4\xbd\x9c" "1314151\xe5\xa4\xa9 ------======= "
    "\xd0\xbd\xd0\xb5\xd1\x89\xd0\xbe I've been 'told he's there, 'RE you sure? 'M not sure I'll make it, 'D you "
    "like some tea? We'Ve a'lL cafe\xcc\x81 Caf\xc3\xa9 HELLO hello\tworld  x   y";

typedef struct hf_vocab {
    cJSON *json;
    uint32_t n;             /* token ids: max(config vocab_size, largest id + 1) */
    const char **text;      /* per id, NULL when unused */
    int *type;              /* TOKEN_* */
    char **merges;          /* "left right" */
    size_t n_merges;
} hf_vocab;

static void hf_vocab_free(hf_vocab *v) {
    for (size_t i = 0; i < v->n_merges; i++) free(v->merges[i]);
    free(v->merges);
    free(v->text);
    free(v->type);
    cJSON_Delete(v->json);
}

static bool looks_special(const char *s) {
    size_t n = strlen(s);
    return strcmp(s, "<pad>") == 0 || strcmp(s, "<mask>") == 0 ||
           (n >= 4 && strncmp(s, "<|", 2) == 0 && strcmp(s + n - 2, "|>") == 0);
}

/* The pre-tokenizer preset whose GGUF tokenizer gives the tokenizer.json's ids on the check text. */
static const char *detect_pre(run *r, const hf_vocab *v, const char *json, size_t json_len) {
    sy_bpe *ref = sy_bpe_load_json_buffer(json, json_len, r->err, sizeof r->err);
    if (ref == NULL) return NULL;
    sy_bpe_ids want = {0};
    if (!sy_bpe_tokenize(ref, CHECK_TEXT, sizeof CHECK_TEXT - 1, 0, &want, r->err, sizeof r->err)) {
        sy_bpe_free(ref);
        return NULL;
    }
    static const char *const presets[] = {"qwen2", "llama-bpe", "smollm", "gpt-2"};
    const char *found = NULL;
    for (size_t p = 0; p < sizeof presets / sizeof presets[0] && found == NULL; p++) {
        char e[256];
        sy_bpe_builder *b = sy_bpe_builder_new(e, sizeof e);
        bool ok = b != NULL;
        for (uint32_t id = 0; ok && id < v->n; id++)
            if (v->type[id] == TOKEN_NORMAL)
                ok = sy_bpe_builder_add_token(b, v->text[id], strlen(v->text[id]), (int32_t)id, e, sizeof e);
        for (size_t m = 0; ok && m < v->n_merges; m++)
            ok = sy_bpe_builder_add_merge_line(b, v->merges[m], strlen(v->merges[m]), e, sizeof e);
        ok = ok && sy_bpe_builder_use_preset(b, presets[p], e, sizeof e);
        sy_bpe *probe = ok ? sy_bpe_builder_finish(b, e, sizeof e) : NULL;
        if (!ok && b) sy_bpe_builder_free(b);
        sy_bpe_ids got = {0};
        if (probe && sy_bpe_tokenize(probe, CHECK_TEXT, sizeof CHECK_TEXT - 1, 0, &got, e, sizeof e) &&
            got.n == want.n && memcmp(got.ids, want.ids, want.n * sizeof *want.ids) == 0)
            found = presets[p];
        sy_bpe_ids_free(&got);
        sy_bpe_free(probe);
    }
    sy_bpe_ids_free(&want);
    sy_bpe_free(ref);
    if (found == NULL)
        failf(r, "%s/tokenizer.json: its pre-tokenizer matches none that llama.cpp knows by name (qwen2, llama-bpe, "
                 "smollm, gpt-2)", r->in);
    return found;
}

static int32_t token_by_text(const hf_vocab *v, const char *s) {
    if (s == NULL) return -1;
    for (uint32_t i = 0; i < v->n; i++) /* added tokens first, as tokenizers resolves them */
        if (v->text[i] && (v->type[i] == TOKEN_CONTROL || v->type[i] == TOKEN_USER_DEFINED) &&
            strcmp(v->text[i], s) == 0)
            return (int32_t)i;
    for (uint32_t i = 0; i < v->n; i++)
        if (v->text[i] && strcmp(v->text[i], s) == 0) return (int32_t)i;
    return -1;
}

static bool set_u32(run *r, const char *key, uint32_t v) {
    return sy_gguf_writer_set_u32(r->w, key, v, r->err, sizeof r->err);
}

static bool set_f32(run *r, const char *key, float v) {
    return sy_gguf_writer_set_f32(r->w, key, v, r->err, sizeof r->err);
}

static bool set_bool(run *r, const char *key, bool v) {
    return sy_gguf_writer_set_bool(r->w, key, v, r->err, sizeof r->err);
}
static bool set_str(run *r, const char *key, const char *s) {
    return sy_gguf_writer_set_string(r->w, key, s, strlen(s), r->err, sizeof r->err);
}

static bool arch_key_u32(run *r, const char *arch, const char *suffix, uint32_t v) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    return set_u32(r, key, v);
}

static bool arch_key_f32(run *r, const char *arch, const char *suffix, float v) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    return set_f32(r, key, v);
}

/* tokenizer.json (byte-level BPE) + tokenizer_config.json -> tokenizer.ggml.* */
static bool tokenizer_metadata(run *r, const sy_hf_config *cfg) {
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer.json", r->in);
    size_t len;
    char *json = sy_hf_read_file(path, MAX_TOKENIZER_JSON, &len, r->err, sizeof r->err);
    if (json == NULL) {
        snprintf(path, sizeof path, "%s/tokenizer.model", r->in);
        if (access(path, F_OK) == 0)
            return failf(r, "%s: SentencePiece tokenizers (tokenizer.model) are not supported by quantize; convert "
                            "with llama.cpp's convert_hf_to_gguf.py, then quantize the GGUF", r->in);
        return false;
    }
    hf_vocab v = {0};
    bool ok = false;
    v.json = cJSON_ParseWithLength(json, len);
    const cJSON *model = cJSON_GetObjectItem(v.json, "model");
    const cJSON *vocab = cJSON_GetObjectItem(model, "vocab"), *merges = cJSON_GetObjectItem(model, "merges");
    const cJSON *added = cJSON_GetObjectItem(v.json, "added_tokens");
    const cJSON *mtype = cJSON_GetObjectItem(model, "type");
    bool bpe = mtype == NULL || (cJSON_IsString(mtype) && strcmp(mtype->valuestring, "BPE") == 0);
    if (!cJSON_IsObject(vocab) || !cJSON_IsArray(merges) || !bpe) {
        failf(r, "%s: not a BPE tokenizer.json (model.vocab / model.merges missing)", path);
        goto done;
    }
    uint64_t n = cfg->vocab_size;
    for (const cJSON *e = vocab->child; e; e = e->next) {
        if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble >= SY_BPE_MAX_TOKENS) {
            failf(r, "%s: vocabulary entry '%.40s' has a bad id", path, e->string);
            goto done;
        }
        if ((uint64_t)e->valuedouble + 1 > n) n = (uint64_t)e->valuedouble + 1;
    }
    for (const cJSON *e = added ? added->child : NULL; e; e = e->next) {
        const cJSON *id = cJSON_GetObjectItem(e, "id");
        if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble >= SY_BPE_MAX_TOKENS ||
            !cJSON_IsString(cJSON_GetObjectItem(e, "content"))) {
            failf(r, "%s: an added token has no valid id or content", path);
            goto done;
        }
        if ((uint64_t)id->valuedouble + 1 > n) n = (uint64_t)id->valuedouble + 1;
    }
    if (cfg->vocab_size != 0 && n > cfg->vocab_size) { /* the embedding would lack rows for some tokens */
        failf(r, "%s: token ids reach %llu but config.json has vocab_size %u", path, (unsigned long long)n - 1,
              cfg->vocab_size);
        goto done;
    }
    v.n = (uint32_t)n;
    v.text = calloc(n ? n : 1, sizeof *v.text);
    v.type = calloc(n ? n : 1, sizeof *v.type);
    if (v.text == NULL || v.type == NULL) {
        failf(r, "out of memory");
        goto done;
    }
    for (const cJSON *e = vocab->child; e; e = e->next) {
        v.text[(uint32_t)e->valuedouble] = e->string;
        v.type[(uint32_t)e->valuedouble] = TOKEN_NORMAL;
    }
    for (const cJSON *e = added ? added->child : NULL; e; e = e->next) {
        uint32_t id = (uint32_t)cJSON_GetObjectItem(e, "id")->valuedouble;
        const char *content = cJSON_GetObjectItem(e, "content")->valuestring;
        v.text[id] = content;
        v.type[id] = cJSON_IsTrue(cJSON_GetObjectItem(e, "special")) || looks_special(content) ? TOKEN_CONTROL
                                                                                              : TOKEN_USER_DEFINED;
    }
    v.n_merges = (size_t)cJSON_GetArraySize(merges);
    v.merges = calloc(v.n_merges ? v.n_merges : 1, sizeof *v.merges);
    if (v.merges == NULL) {
        v.n_merges = 0;
        failf(r, "out of memory");
        goto done;
    }
    size_t mi = 0;
    for (const cJSON *e = merges->child; e; e = e->next, mi++) {
        if (cJSON_IsString(e)) {
            v.merges[mi] = strdup(e->valuestring);
        } else if (cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2 && cJSON_IsString(e->child) &&
                   cJSON_IsString(e->child->next)) {
            size_t a = strlen(e->child->valuestring), b = strlen(e->child->next->valuestring);
            v.merges[mi] = malloc(a + b + 2);
            if (v.merges[mi] != NULL) {
                memcpy(v.merges[mi], e->child->valuestring, a);
                v.merges[mi][a] = ' ';
                memcpy(v.merges[mi] + a + 1, e->child->next->valuestring, b + 1);
            }
        } else {
            failf(r, "%s: merge %zu is neither \"a b\" nor [\"a\", \"b\"]", path, mi);
            goto done;
        }
        if (v.merges[mi] == NULL) {
            failf(r, "out of memory");
            goto done;
        }
    }
    const char *pre = detect_pre(r, &v, json, len);
    if (pre == NULL) goto done;

    /* ids of the special tokens: tokenizer_config.json names them, config.json numbers them */
    sy_tokenizer_config tc;
    memset(&tc, 0, sizeof tc);
    tc.add_bos_token = tc.add_eos_token = -1;
    snprintf(path, sizeof path, "%s/tokenizer_config.json", r->in);
    if (access(path, F_OK) == 0 && !sy_tokenizer_config_load(path, &tc, r->err, sizeof r->err)) goto done;
    int32_t bos = token_by_text(&v, tc.bos_token), eos = token_by_text(&v, tc.eos_token),
            pad = token_by_text(&v, tc.pad_token);
    if (bos < 0 && cfg->bos_token_id >= 0 && (uint64_t)cfg->bos_token_id < n) bos = (int32_t)cfg->bos_token_id;
    if (eos < 0 && cfg->n_eos > 0 && cfg->eos_token_ids[0] >= 0 && (uint64_t)cfg->eos_token_ids[0] < n)
        eos = (int32_t)cfg->eos_token_ids[0];
    if (pad < 0 && cfg->pad_token_id >= 0 && (uint64_t)cfg->pad_token_id < n) pad = (int32_t)cfg->pad_token_id;
    int add_bos = tc.add_bos_token;
    if (add_bos < 0) { /* a post-processor that puts BOS first (Llama 3) means add_bos */
        sy_bpe *ref = sy_bpe_load_json_buffer(json, len, NULL, 0);
        const int32_t *prefix, *suffix;
        size_t n_prefix = 0, n_suffix = 0;
        if (ref) sy_bpe_template(ref, &prefix, &n_prefix, &suffix, &n_suffix);
        if (n_prefix > 0) {
            add_bos = 1;
            if (bos < 0) bos = prefix[0];
        }
        sy_bpe_free(ref);
    }

    const size_t n_alloc = n ? (size_t)n : 1;
    const char **texts = malloc(n_alloc * sizeof *texts);
    size_t *lens = malloc(n_alloc * sizeof *lens);
    int32_t *types = malloc(n_alloc * sizeof *types);
    char (*pads)[24] = malloc(n_alloc * sizeof *pads);
    size_t *merge_lens = malloc((v.n_merges ? v.n_merges : 1) * sizeof *merge_lens);
    const bool have = texts != NULL && lens != NULL && types != NULL && pads != NULL && merge_lens != NULL;
    if (!have) failf(r, "out of memory");
    for (uint32_t i = 0; have && i < n; i++) {
        if (v.text[i] == NULL) {
            snprintf(pads[i], sizeof pads[i], "[PAD%u]", i);
            texts[i] = pads[i];
            types[i] = TOKEN_UNUSED;
        } else {
            texts[i] = v.text[i];
            types[i] = v.type[i];
        }
        lens[i] = strlen(texts[i]);
    }
    for (size_t i = 0; have && i < v.n_merges; i++) merge_lens[i] = strlen(v.merges[i]);
    ok = have && set_str(r, "tokenizer.ggml.model", "gpt2") && set_str(r, "tokenizer.ggml.pre", pre) &&
         sy_gguf_writer_set_string_array(r->w, "tokenizer.ggml.tokens", texts, lens, n, r->err, sizeof r->err) &&
         sy_gguf_writer_set_array(r->w, "tokenizer.ggml.token_type", SY_GGUF_INT32, types, n, r->err, sizeof r->err) &&
         sy_gguf_writer_set_string_array(r->w, "tokenizer.ggml.merges", (const char *const *)v.merges, merge_lens,
                                         v.n_merges, r->err, sizeof r->err) &&
         (eos < 0 || set_u32(r, "tokenizer.ggml.eos_token_id", (uint32_t)eos)) &&
         (pad < 0 || set_u32(r, "tokenizer.ggml.padding_token_id", (uint32_t)pad)) &&
         (bos < 0 || set_u32(r, "tokenizer.ggml.bos_token_id", (uint32_t)bos)) &&
         (add_bos < 0 || set_bool(r, "tokenizer.ggml.add_bos_token", add_bos > 0)) &&
         /* llama.cpp's converter writes add_eos (false unless said) whenever it writes add_bos */
         ((tc.add_eos_token < 0 && add_bos < 0) || set_bool(r, "tokenizer.ggml.add_eos_token", tc.add_eos_token > 0)) &&
         (tc.chat_template == NULL || set_str(r, "tokenizer.chat_template", tc.chat_template));
    free(texts);
    free(lens);
    free(types);
    free(pads);
    free(merge_lens);
    sy_tokenizer_config_free(&tc);
done:
    hf_vocab_free(&v);
    free(json);
    return ok;
}

/* ---- BERT SafeTensors input ----
 *
 * A BertModel (or BertForSequenceClassification) directory, as llama.cpp's converter writes it as architecture
 * "bert": the hyperparameters under bert.*, the pooling sentence-transformers configures (modules.json; mean for a
 * bare model, as sentence-transformers pools one; rank for a classifier), and the WordPiece vocabulary in its
 * "phantom space" spelling (a word start "x" becomes "▁x", a continuation "##x" becomes "x", control tokens stay
 * as they are), the special tokens named by tokenizer_config.json and the add_* flags its post-processor implies. */

#define BERT_MAX_VOCAB (1u << 22)

/* A tokenizer_config.json token entry: a string or {"content": ...}. */
static const char *config_token(const cJSON *tc, const char *key) {
    const cJSON *e = cJSON_GetObjectItem(tc, key);
    if (cJSON_IsString(e)) return e->valuestring;
    const cJSON *content = cJSON_GetObjectItem(e, "content");
    return cJSON_IsString(content) ? content->valuestring : NULL;
}

/* The id of an added token of this text (the first), or -1. */
static int64_t added_token_id(const cJSON *added, const char *text) {
    const cJSON *e;
    if (text == NULL) return -1;
    cJSON_ArrayForEach(e, added) {
        const cJSON *content = cJSON_GetObjectItem(e, "content"), *id = cJSON_GetObjectItem(e, "id");
        if (cJSON_IsString(content) && cJSON_IsNumber(id) && strcmp(content->valuestring, text) == 0)
            return (int64_t)id->valuedouble;
    }
    return -1;
}

/* The normalizer's lowercase / strip_accents flags (-1: not said), through Sequence normalizers. */
static void normalizer_flags(const cJSON *n, int *lowercase, int *strip_accents) {
    const cJSON *type = cJSON_GetObjectItem(n, "type");
    if (!cJSON_IsString(type)) return;
    if (strcmp(type->valuestring, "Lowercase") == 0) *lowercase = 1;
    else if (strcmp(type->valuestring, "StripAccents") == 0) *strip_accents = 1;
    else if (strcmp(type->valuestring, "BertNormalizer") == 0) {
        const cJSON *l = cJSON_GetObjectItem(n, "lowercase"), *s = cJSON_GetObjectItem(n, "strip_accents");
        if (cJSON_IsBool(l)) *lowercase = cJSON_IsTrue(l);
        if (cJSON_IsBool(s)) *strip_accents = cJSON_IsTrue(s); /* null: follows lowercase, and is not written */
    } else if (strcmp(type->valuestring, "Sequence") == 0) {
        const cJSON *e;
        cJSON_ArrayForEach(e, cJSON_GetObjectItem(n, "normalizers")) normalizer_flags(e, lowercase, strip_accents);
    }
}

static const char *template_special(const cJSON *item) {
    const cJSON *id = cJSON_GetObjectItem(cJSON_GetObjectItem(item, "SpecialToken"), "id");
    return cJSON_IsString(id) ? id->valuestring : NULL;
}

static bool same_text(const char *a, const char *b) { return a && b && strcmp(a, b) == 0; }

/* add_bos / add_eos / add_sep (-1: not said) from a TemplateProcessing post-processor: a leading special token that
 * is the BOS (or CLS) means add_bos, a trailing one that is the EOS add_eos, and a separator between A and B of the
 * pair template add_sep when the single template has no trailing token (BERT's "[CLS] A [SEP] B [SEP]" is thus
 * add_bos and add_eos, not add_sep), as llama.cpp's converter reads it. */
static void template_flags(const cJSON *post, const char *bos, const char *cls, const char *eos, const char *sep,
                           int *add_bos, int *add_eos, int *add_sep) {
    const cJSON *type = cJSON_GetObjectItem(post, "type");
    if (!cJSON_IsString(type)) return;
    if (strcmp(type->valuestring, "Sequence") == 0) {
        const cJSON *e;
        cJSON_ArrayForEach(e, cJSON_GetObjectItem(post, "processors"))
            template_flags(e, bos, cls, eos, sep, add_bos, add_eos, add_sep);
        return;
    }
    if (strcmp(type->valuestring, "TemplateProcessing") != 0) return;
    const cJSON *single = cJSON_GetObjectItem(post, "single"), *pair = cJSON_GetObjectItem(post, "pair");
    int n_single = cJSON_GetArraySize(single), n_pair = cJSON_GetArraySize(pair);
    const char *first = NULL, *last = NULL;
    if (n_single > 1) {
        first = template_special(cJSON_GetArrayItem(single, 0));
        last = template_special(cJSON_GetArrayItem(single, n_single - 1));
        if (first) *add_bos = same_text(first, bos) || same_text(first, cls);
        if (last) *add_eos = same_text(last, eos);
    }
    /* the pair template less the single one's leading and trailing tokens: A, its separators, B */
    int lo = first && n_pair > 0 && same_text(template_special(cJSON_GetArrayItem(pair, 0)), first) ? 1 : 0;
    int hi = last && n_pair > 0 && same_text(template_special(cJSON_GetArrayItem(pair, n_pair - 1)), last) ? n_pair - 1
                                                                                                          : n_pair;
    if (hi - lo < 3) return;
    const cJSON *a = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetArrayItem(pair, lo), "Sequence"), "id");
    const cJSON *b = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetArrayItem(pair, hi - 1), "Sequence"), "id");
    if (!cJSON_IsString(a) || !cJSON_IsString(b) || strcmp(a->valuestring, "A") != 0 || strcmp(b->valuestring, "B") != 0)
        return;
    bool add = false;
    for (int i = lo + 1; i < hi - 1 && i < lo + 3; i++) {
        const char *s = template_special(cJSON_GetArrayItem(pair, i));
        bool is_sep = same_text(s, sep) || same_text(s, eos);
        if (is_sep && (i > lo + 1 || last == NULL)) add = true;
    }
    *add_sep = add;
}

/* tokenizer.json (WordPiece) + tokenizer_config.json -> tokenizer.ggml.* */
static bool bert_tokenizer_metadata(run *r, const sy_bert_config *b) {
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer.json", r->in);
    size_t len = 0;
    char *json = sy_hf_read_file(path, MAX_TOKENIZER_JSON, &len, r->err, sizeof r->err);
    if (json == NULL) return false;
    cJSON *doc = cJSON_ParseWithLength(json, len), *tc = NULL;
    free(json);
    const char **texts = NULL;
    char **owned = NULL;
    size_t *lens = NULL;
    int32_t *types = NULL;
    bool ok = false;
    const uint32_t n = b->vocab_size;
    const cJSON *model = cJSON_GetObjectItem(doc, "model"), *vocab = cJSON_GetObjectItem(model, "vocab");
    const cJSON *mtype = cJSON_GetObjectItem(model, "type"), *added = cJSON_GetObjectItem(doc, "added_tokens"), *e;
    if (doc == NULL || !cJSON_IsObject(vocab) || !cJSON_IsString(mtype) || strcmp(mtype->valuestring, "WordPiece") != 0) {
        failf(r, "%s: not a WordPiece tokenizer.json (model.type WordPiece with model.vocab)", path);
        goto done;
    }
    if (n == 0 || n > BERT_MAX_VOCAB) {
        failf(r, "%s/config.json: vocab_size %u is not 1 to %u", r->in, n, BERT_MAX_VOCAB);
        goto done;
    }
    texts = calloc(n, sizeof *texts);
    owned = calloc(n, sizeof *owned);
    lens = calloc(n, sizeof *lens);
    types = calloc(n, sizeof *types);
    if (!texts || !owned || !lens || !types) {
        failf(r, "out of memory");
        goto done;
    }
    cJSON_ArrayForEach(e, vocab) {
        if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble >= n || e->valuedouble != (double)(int64_t)e->valuedouble) {
            failf(r, "%s: token '%.40s' has id %g, outside config.json's vocab_size %u", path, e->string,
                  cJSON_IsNumber(e) ? e->valuedouble : -1.0, n);
            goto done;
        }
        texts[(uint32_t)e->valuedouble] = e->string;
        types[(uint32_t)e->valuedouble] = TOKEN_NORMAL;
    }
    cJSON_ArrayForEach(e, added) {
        const cJSON *id = cJSON_GetObjectItem(e, "id"), *content = cJSON_GetObjectItem(e, "content");
        if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble >= n || !cJSON_IsString(content)) {
            failf(r, "%s: an added token has no id below vocab_size %u or no content", path, n);
            goto done;
        }
        uint32_t i = (uint32_t)id->valuedouble;
        texts[i] = content->valuestring;
        types[i] = cJSON_IsTrue(cJSON_GetObjectItem(e, "special")) || looks_special(content->valuestring)
                       ? TOKEN_CONTROL : TOKEN_USER_DEFINED;
    }
    /* the phantom-space spelling; ids no token has become "[PADi]" (UNUSED), spelled as words */
    for (uint32_t i = 0; i < n; i++) {
        char pad[24];
        const char *t = texts[i];
        if (t == NULL) {
            snprintf(pad, sizeof pad, "[PAD%u]", i);
            t = pad;
            types[i] = TOKEN_UNUSED;
        }
        size_t tl = strlen(t);
        if (types[i] == TOKEN_CONTROL) { /* as it is (a control token always has its text) */
            lens[i] = tl;
            continue;
        }
        bool continuation = tl >= 2 && t[0] == '#' && t[1] == '#';
        owned[i] = malloc(tl + 4);
        if (owned[i] == NULL) {
            failf(r, "out of memory");
            goto done;
        }
        if (continuation) {
            memcpy(owned[i], t + 2, tl - 2);
            lens[i] = tl - 2;
        } else {
            memcpy(owned[i], "\xE2\x96\x81", 3);
            memcpy(owned[i] + 3, t, tl);
            lens[i] = tl + 3;
        }
        owned[i][lens[i]] = '\0';
        texts[i] = owned[i];
    }

    /* special tokens: named in tokenizer_config.json (BOS defaults to CLS, EOS to SEP), found among the added
     * tokens; config.json's pad_token_id where none is named */
    snprintf(path, sizeof path, "%s/tokenizer_config.json", r->in);
    if (access(path, F_OK) == 0) {
        char *tcj = sy_hf_read_file(path, MAX_TOKENIZER_JSON, &len, r->err, sizeof r->err);
        if (tcj == NULL) goto done;
        tc = cJSON_ParseWithLength(tcj, len);
        free(tcj);
        if (!cJSON_IsObject(tc)) {
            failf(r, "%s: not a JSON object", path);
            goto done;
        }
    }
    const char *cls = config_token(tc, "cls_token"), *sep = config_token(tc, "sep_token");
    const char *bos = config_token(tc, "bos_token"), *eos = config_token(tc, "eos_token");
    if (bos == NULL) bos = cls;
    if (eos == NULL) eos = sep;
    static const char *const kinds[] = {"bos", "eos", "unk", "sep", "pad", "cls", "mask"};
    static const char *const keys[] = {"bos_token_id", "eos_token_id", "unknown_token_id", "seperator_token_id",
                                       "padding_token_id", "cls_token_id", "mask_token_id"};
    int64_t ids[7];
    for (int k = 0; k < 7; k++) {
        char key[32];
        snprintf(key, sizeof key, "%s_token", kinds[k]);
        const char *text = k == 0 ? bos : k == 1 ? eos : config_token(tc, key);
        ids[k] = added_token_id(added, text);
    }
    if (ids[4] < 0 && b->pad_token_id >= 0 && b->pad_token_id < (int64_t)n) ids[4] = b->pad_token_id;
    int add_bos = -1, add_eos = -1, add_sep = -1, lowercase = -1, strip_accents = -1;
    template_flags(cJSON_GetObjectItem(doc, "post_processor"), bos, cls, eos, sep, &add_bos, &add_eos, &add_sep);
    int *adds[3] = {&add_bos, &add_eos, &add_sep};
    static const char *const add_keys[3] = {"add_bos_token", "add_eos_token", "add_sep_token"};
    for (int k = 0; k < 3; k++) { /* the post-processor wins where both say */
        const cJSON *v = cJSON_GetObjectItem(tc, add_keys[k]);
        if (*adds[k] < 0 && cJSON_IsBool(v)) *adds[k] = cJSON_IsTrue(v);
    }
    normalizer_flags(cJSON_GetObjectItem(doc, "normalizer"), &lowercase, &strip_accents);

    /* llama.cpp reads no pre-tokenizer for WordPiece; its converter names bert-base-uncased's vocabulary (MiniLM,
     * bge-small) "jina-v2-en" by the hash of its tokens */
    ok = set_u32(r, "tokenizer.ggml.token_type_count", b->type_vocab_size ? b->type_vocab_size : 1) &&
         set_str(r, "tokenizer.ggml.model", "bert") &&
         set_str(r, "tokenizer.ggml.pre", lowercase == 1 ? "jina-v2-en" : "default") &&
         sy_gguf_writer_set_string_array(r->w, "tokenizer.ggml.tokens", texts, lens, n, r->err, sizeof r->err) &&
         sy_gguf_writer_set_array(r->w, "tokenizer.ggml.token_type", SY_GGUF_INT32, types, n, r->err, sizeof r->err);
    for (int k = 0; ok && k < 7; k++) {
        char key[64];
        snprintf(key, sizeof key, "tokenizer.ggml.%s", keys[k]);
        if (ids[k] >= 0 && ids[k] < (int64_t)n) ok = set_u32(r, key, (uint32_t)ids[k]);
    }
    for (int k = 0; ok && k < 3; k++) {
        char key[64];
        snprintf(key, sizeof key, "tokenizer.ggml.%s", add_keys[k]);
        if (*adds[k] >= 0) ok = set_bool(r, key, *adds[k] > 0);
    }
    if (ok && lowercase >= 0) ok = set_bool(r, "tokenizer.ggml.normalizer.lowercase", lowercase > 0);
    if (ok && strip_accents >= 0) ok = set_bool(r, "tokenizer.ggml.normalizer.strip_accents", strip_accents > 0);
done:
    for (uint32_t i = 0; owned && i < n; i++) free(owned[i]);
    free(owned), free(texts), free(lens), free(types);
    cJSON_Delete(tc);
    cJSON_Delete(doc);
    return ok;
}

/* The classifier's label names (bert.classifier.output_labels), from config.json's id2label, when it has more than
 * one label (llama.cpp sizes the classifier by their count; one output needs none). */
static bool bert_labels(run *r, const sy_bert_config *b) {
    if (!b->classifier || b->n_labels <= 1) return true;
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", r->in);
    size_t len = 0;
    char *json = sy_hf_read_file(path, SY_HF_MAX_CONFIG_BYTES, &len, r->err, sizeof r->err);
    if (json == NULL) return false;
    cJSON *doc = cJSON_ParseWithLength(json, len);
    free(json);
    const cJSON *id2label = cJSON_GetObjectItem(doc, "id2label");
    const char **names = calloc(b->n_labels, sizeof *names);
    size_t *lens = calloc(b->n_labels, sizeof *lens);
    bool ok = names && lens;
    if (!ok) failf(r, "out of memory");
    for (uint32_t i = 0; ok && i < b->n_labels; i++) {
        char key[16];
        snprintf(key, sizeof key, "%u", i);
        const cJSON *v = cJSON_GetObjectItem(id2label, key);
        if (!cJSON_IsString(v)) {
            ok = failf(r, "%s: id2label has no name for label %u of %u", path, i, b->n_labels);
            break;
        }
        names[i] = v->valuestring;
        lens[i] = strlen(v->valuestring);
    }
    ok = ok && sy_gguf_writer_set_string_array(r->w, "bert.classifier.output_labels", names, lens, b->n_labels, r->err,
                                               sizeof r->err);
    free(names), free(lens);
    cJSON_Delete(doc);
    return ok;
}

/* The GGUF name of a checkpoint tensor: 1 mapped, 0 skipped (what the converter drops), -1 unknown. */
static int bert_gguf_name(const char *hf, const sy_bert_config *b, char *out, size_t size) {
    char name[192];
    if (strncmp(hf, "bert.", 5) == 0) hf += 5;
    size_t n = strlen(hf);
    if (n >= sizeof name) return -1;
    memcpy(name, hf, n + 1);
    /* old checkpoints call LayerNorm's weight and bias gamma and beta */
    if (n > 6 && strcmp(name + n - 6, ".gamma") == 0) snprintf(name + n - 6, sizeof name - (n - 6), ".weight");
    else if (n > 5 && strcmp(name + n - 5, ".beta") == 0) snprintf(name + n - 5, sizeof name - (n - 5), ".bias");
    if (strcmp(name, "embeddings.position_ids") == 0 || strncmp(name, "cls.predictions", 15) == 0 ||
        strncmp(name, "cls.seq_relationship", 20) == 0)
        return 0;
    sy_tensor_role role;
    uint32_t layer = 0;
    if (!sy_tensor_role_of(SY_TENSORS_HF_BERT, name, &role, &layer)) return -1;
    if (sy_tensor_role_per_layer(role) && layer >= b->num_hidden_layers) return -1;
    /* an embedding model's pooler is not used (sentence-transformers pools the last hidden state) */
    if (!b->classifier && (role == SY_TENSOR_CLS || role == SY_TENSOR_CLS_BIAS)) return 0;
    return sy_tensor_name(SY_TENSORS_GGUF, role, layer, out, size) ? 1 : -1;
}

static bool load_bert_safetensors(run *r) {
    sy_bert_config b;
    sy_st_pooling p;
    if (!sy_bert_config_load(r->in, &b, r->err, sizeof r->err) ||
        !sy_st_pooling_load(r->in, SY_POOLING_MEAN, &p, r->err, sizeof r->err))
        return false;
    if (!b.classifier && p.pooling == SY_POOLING_LAST)
        return failf(r, "%s: last-token pooling of a BERT encoder is not supported", r->in);
    r->st = sy_safetensors_open(r->in, r->err, sizeof r->err);
    if (r->st == NULL) return false;
    r->model = (sy_quant_model){b.num_hidden_layers, b.num_attention_heads, b.num_attention_heads};
    /* llama.cpp's enum llama_pooling_type: 1 mean, 2 cls, 4 rank */
    uint32_t pooling = b.classifier ? 4 : p.pooling == SY_POOLING_CLS ? 2 : 1;
    char *dir_copy = strdup(r->in);
    if (dir_copy == NULL) return failf(r, "out of memory");
    size_t dl = strlen(dir_copy);
    while (dl > 1 && dir_copy[dl - 1] == '/') dir_copy[--dl] = '\0';
    bool ok = set_str(r, "general.architecture", "bert") && set_str(r, "general.type", "model") &&
              set_str(r, "general.name", basename(dir_copy)) &&
              set_u32(r, "bert.block_count", b.num_hidden_layers) &&
              set_u32(r, "bert.context_length", b.max_position_embeddings) &&
              set_u32(r, "bert.embedding_length", b.hidden_size) &&
              set_u32(r, "bert.feed_forward_length", b.intermediate_size) &&
              set_u32(r, "bert.attention.head_count", b.num_attention_heads) &&
              set_f32(r, "bert.attention.layer_norm_epsilon", (float)b.layer_norm_eps) &&
              set_bool(r, "bert.attention.causal", false) && set_u32(r, "bert.pooling_type", pooling) &&
              bert_labels(r, &b) && bert_tokenizer_metadata(r, &b);
    free(dir_copy);
    if (!ok) return false;
    bool have_embd = false;
    for (size_t i = 0; i < sy_safetensors_count(r->st); i++) {
        const sy_safetensors_tensor *st = sy_safetensors_at(r->st, i);
        char name[SY_GGUF_WRITER_MAX_NAME + 1];
        int m = bert_gguf_name(st->name, &b, name, sizeof name);
        if (m < 0) return failf(r, "%s: tensor %s has no llama.cpp name in a bert model", r->in, st->name);
        if (m == 0) continue;
        if (!source_tensor_ok(r, st)) return false;
        for (size_t k = 0; k < r->n; k++)
            if (strcmp(r->t[k].name, name) == 0)
                return failf(r, "%s: two tensors map to %s (one with and one without the bert. prefix?)", r->in, name);
        uint64_t dims[2] = {st->shape[st->n_dims - 1], st->n_dims == 2 ? st->shape[0] : 1};
        if (!add_tensor(r, name, st->data, (sy_dtype)st->dtype, st->n_dims, dims)) return false;
        if (strcmp(name, "token_embd.weight") == 0) have_embd = true;
    }
    if (!have_embd) return failf(r, "%s: no word embedding (embeddings.word_embeddings.weight)", r->in);
    return true;
}

static bool load_safetensors(run *r) {
    if (sy_bert_is_bert_dir(r->in)) return load_bert_safetensors(r);
    sy_hf_config cfg;
    if (!sy_hf_config_load(r->in, &cfg, NULL, r->err, sizeof r->err)) return false;
    const char *arch = cfg.arch == SY_HF_ARCH_QWEN2 ? "qwen2" : cfg.arch == SY_HF_ARCH_QWEN3 ? "qwen3"
                       : cfg.arch == SY_HF_ARCH_LLAMA ? "llama" : NULL;
    if (arch == NULL)
        return failf(r, "%s: architecture %s is not supported by quantize (qwen2, qwen3, llama and bert are)", r->in,
                     sy_hf_arch_name(cfg.arch));
    if (cfg.rope.type != SY_HF_ROPE_DEFAULT && cfg.rope.type != SY_HF_ROPE_LINEAR)
        return failf(r, "%s: only default and linear RoPE scaling are supported by quantize", r->in);
    r->st = sy_safetensors_open(r->in, r->err, sizeof r->err);
    if (r->st == NULL) return false;
    r->model = (sy_quant_model){cfg.num_hidden_layers, cfg.num_attention_heads, cfg.num_key_value_heads};

    char *dir_copy = strdup(r->in);
    if (dir_copy == NULL) return failf(r, "out of memory");
    size_t dl = strlen(dir_copy);
    while (dl > 1 && dir_copy[dl - 1] == '/') dir_copy[--dl] = '\0';
    bool ok = set_str(r, "general.architecture", arch) && set_str(r, "general.type", "model") &&
              set_str(r, "general.name", basename(dir_copy)) &&
              arch_key_u32(r, arch, "block_count", cfg.num_hidden_layers) &&
              arch_key_u32(r, arch, "context_length", cfg.max_position_embeddings) &&
              arch_key_u32(r, arch, "embedding_length", cfg.hidden_size) &&
              arch_key_u32(r, arch, "feed_forward_length", cfg.intermediate_size) &&
              arch_key_u32(r, arch, "attention.head_count", cfg.num_attention_heads) &&
              arch_key_u32(r, arch, "attention.head_count_kv", cfg.num_key_value_heads) &&
              arch_key_f32(r, arch, "rope.freq_base", (float)cfg.rope.theta) &&
              arch_key_f32(r, arch, "attention.layer_norm_rms_epsilon", (float)cfg.rms_norm_eps);
    free(dir_copy);
    if (ok && (cfg.arch != SY_HF_ARCH_QWEN2 || cfg.head_dim * cfg.num_attention_heads != cfg.hidden_size))
        ok = arch_key_u32(r, arch, "attention.key_length", cfg.head_dim) &&
             arch_key_u32(r, arch, "attention.value_length", cfg.head_dim);
    if (ok && cfg.arch == SY_HF_ARCH_LLAMA)
        ok = arch_key_u32(r, arch, "vocab_size", cfg.vocab_size) &&
             arch_key_u32(r, arch, "rope.dimension_count", cfg.head_dim);
    if (ok && cfg.rope.type == SY_HF_ROPE_LINEAR) {
        char key[128];
        snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
        ok = set_str(r, key, "linear") && arch_key_f32(r, arch, "rope.scaling.factor", (float)cfg.rope.factor);
    }
    if (!ok || !tokenizer_metadata(r, &cfg)) return false;

    for (size_t i = 0; i < sy_safetensors_count(r->st); i++) {
        const sy_safetensors_tensor *st = sy_safetensors_at(r->st, i);
        char name[160];
        sy_tensor_role role;
        int m = gguf_name(st->name, &cfg, name, sizeof name, &role);
        if (m < 0) return failf(r, "%s: tensor %s has no llama.cpp name (unexpected for %s)", r->in, st->name, arch);
        if (m == 0) continue;
        if (!source_tensor_ok(r, st)) return false;
        uint64_t dims[2] = {st->shape[st->n_dims - 1], st->n_dims == 2 ? st->shape[0] : 1};
        if (!add_tensor(r, name, st->data, (sy_dtype)st->dtype, st->n_dims, dims)) return false;
        bool q = role == SY_TENSOR_ATTN_Q || role == SY_TENSOR_ATTN_Q_BIAS;
        if (cfg.arch == SY_HF_ARCH_LLAMA && (q || role == SY_TENSOR_ATTN_K || role == SY_TENSOR_ATTN_K_BIAS)) {
            uint32_t heads = q ? cfg.num_attention_heads : cfg.num_key_value_heads;
            uint64_t rows = st->n_dims == 2 ? dims[1] : dims[0];
            if (heads == 0 || rows % heads != 0 || (rows / heads) % 2 != 0)
                return failf(r, "%s: tensor %s: %llu rows do not split into %u heads of pairs", r->in, st->name,
                             (unsigned long long)rows, heads);
            r->t[r->n - 1].permute_heads = heads;
        }
    }
    return true;
}

/* ---- conversion ---- */

/* Source row of output row o of a llama q/k matrix: GGUF pairs dimension i of a head with i + head_dim/2. */
static uint64_t permuted_row(uint64_t o, uint64_t rows, uint32_t heads) {
    if (heads == 0) return o;
    uint64_t hd = rows / heads, h = o / hd, k = o % hd;
    return h * hd + (k % 2) * (hd / 2) + k / 2;
}

typedef struct convert_job {
    const qtensor *t;
    uint64_t row0, n_rows, n_per_row, total_rows;
    size_t src_row_bytes, dst_row_bytes;
    float *f32;
    float *scratch; /* beside f32, row for row: the unpermuted elements of 1-D q/k biases (NULL otherwise) */
    uint8_t *dst;
    size_t rows_per_task;
    atomic_ullong bad_row; /* first row holding NaN/Inf (UINT64_MAX: none) */
    atomic_ullong bad_col;
} convert_job;

static void convert_task(void *ctx, size_t task, size_t thread_index) {
    (void)thread_index;
    convert_job *j = ctx;
    const qtensor *t = j->t;
    uint64_t first = task * j->rows_per_task, end = first + j->rows_per_task;
    if (end > j->n_rows) end = j->n_rows;
    for (uint64_t i = first; i < end; i++) {
        uint64_t row = j->row0 + i;
        uint64_t src = t->n_dims >= 2 ? permuted_row(row, j->total_rows, t->permute_heads) : row;
        float *x = j->f32 + i * j->n_per_row;
        sy_dequantize_row(t->src_type, (const uint8_t *)t->data + src * j->src_row_bytes, j->src_row_bytes, x,
                          j->n_per_row);
        if (t->n_dims < 2 && t->permute_heads) { /* a 1-D bias: permute its elements */
            float *tmp = j->scratch + i * j->n_per_row;
            memcpy(tmp, x, j->n_per_row * sizeof *tmp);
            for (uint64_t e = 0; e < j->n_per_row; e++) x[e] = tmp[permuted_row(e, j->n_per_row, t->permute_heads)];
        }
        size_t bad = sy_quantize_find_nonfinite(x, j->n_per_row);
        if (bad < j->n_per_row) {
            unsigned long long cur = atomic_load(&j->bad_row);
            while (row < cur && !atomic_compare_exchange_weak(&j->bad_row, &cur, row)) {
            }
            if (atomic_load(&j->bad_row) == row) atomic_store(&j->bad_col, bad);
        }
    }
    if (end > first)
        sy_quantize_rows(t->plan.out_type, j->f32 + first * j->n_per_row, end - first, j->n_per_row,
                         j->dst + first * j->dst_row_bytes, (end - first) * j->dst_row_bytes);
}

typedef struct progress {
    bool on;
    uint64_t done, total;
    size_t index, count;
    double last;
} progress;

static void progress_show(progress *p, const qtensor *t, bool force) {
    if (!p->on) return;
    double now = now_seconds();
    if (!force && now - p->last < 0.1) return;
    p->last = now;
    const sy_dtype_traits *a = sy_dtype_get(t->src_type), *b = sy_dtype_get(t->plan.out_type);
    fprintf(stderr, "\r\033[Kquantize: [%4zu/%zu] %3d%%  %-36s %s -> %s", p->index + 1, p->count,
            p->total ? (int)(100.0 * (double)p->done / (double)p->total) : 100, t->name, a ? a->name : "?",
            b ? b->name : "?");
    fflush(stderr);
}

static bool write_tensor(run *r, sy_threadpool *pool, qtensor *t, progress *pg) {
    const uint64_t n_per_row = t->dims[0];
    const uint64_t total_rows = t->dims[1] * t->dims[2] * t->dims[3];
    const size_t src_row_bytes = sy_dtype_row_bytes(t->src_type, n_per_row);
    const size_t dst_row_bytes = sy_dtype_row_bytes(t->plan.out_type, n_per_row);
    if (src_row_bytes == 0 || dst_row_bytes == 0)
        return failf(r, "tensor %s: rows of %llu elements do not fit its types", t->name,
                     (unsigned long long)n_per_row);
    if (t->plan.out_type == t->src_type && t->permute_heads == 0) { /* copied as it is */
        const uint8_t *p = t->data;
        uint64_t left = (uint64_t)src_row_bytes * total_rows;
        while (left > 0) {
            size_t step = left < ((size_t)64 << 20) ? (size_t)left : ((size_t)64 << 20);
            if (!sy_gguf_writer_write(r->w, p, step, r->err, sizeof r->err)) return false;
            p += step;
            left -= step;
            pg->done += step;
            progress_show(pg, t, false);
        }
        return true;
    }
    uint64_t chunk_rows = CHUNK_ELEMENTS / n_per_row;
    if (chunk_rows == 0) chunk_rows = 1;
    if (chunk_rows > total_rows) chunk_rows = total_rows;
    convert_job j = {.t = t, .n_per_row = n_per_row, .total_rows = total_rows, .src_row_bytes = src_row_bytes,
                     .dst_row_bytes = dst_row_bytes};
    const size_t chunk_floats = (size_t)(chunk_rows * n_per_row);
    j.f32 = malloc(chunk_floats * sizeof(float));
    j.dst = malloc((size_t)chunk_rows * dst_row_bytes);
    if (t->n_dims < 2 && t->permute_heads) j.scratch = malloc(chunk_floats * sizeof(float));
    if (j.f32 == NULL || j.dst == NULL || (t->n_dims < 2 && t->permute_heads && j.scratch == NULL)) {
        free(j.f32);
        free(j.dst);
        free(j.scratch);
        return failf(r, "out of memory");
    }
    j.rows_per_task = TASK_ELEMENTS / n_per_row ? TASK_ELEMENTS / n_per_row : 1;
    bool ok = true;
    for (uint64_t row0 = 0; ok && row0 < total_rows; row0 += chunk_rows) {
        j.row0 = row0;
        j.n_rows = total_rows - row0 < chunk_rows ? total_rows - row0 : chunk_rows;
        atomic_store(&j.bad_row, UINT64_MAX);
        atomic_store(&j.bad_col, 0);
        size_t n_tasks = (size_t)((j.n_rows + j.rows_per_task - 1) / j.rows_per_task);
        sy_threadpool_parallel_for(pool, n_tasks, convert_task, &j);
        unsigned long long bad = atomic_load(&j.bad_row);
        if (bad != UINT64_MAX) {
            ok = failf(r, "tensor %s: row %llu holds NaN or infinity (column %llu); refusing to quantize it", t->name,
                       bad, (unsigned long long)atomic_load(&j.bad_col));
            break;
        }
        ok = sy_gguf_writer_write(r->w, j.dst, (size_t)j.n_rows * dst_row_bytes, r->err, sizeof r->err);
        pg->done += (uint64_t)j.n_rows * src_row_bytes;
        progress_show(pg, t, false);
    }
    free(j.f32);
    free(j.dst);
    free(j.scratch);
    return ok;
}

static int compare_tensors(const void *a, const void *b) {
    return sy_quant_tensor_compare(((const qtensor *)a)->name, ((const qtensor *)b)->name);
}

static bool same_file(const char *a, const char *b) {
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

static bool quantize(run *r) {
    struct stat st;
    if (stat(r->in, &st) != 0) return failf(r, "%s: %s", r->in, strerror(errno));
    if (same_file(r->in, r->out)) return failf(r, "%s: the output would overwrite the input", r->out);
    r->w = sy_gguf_writer_new(r->err, sizeof r->err);
    if (r->w == NULL) return false;
    if (S_ISDIR(st.st_mode)) {
        if (!load_safetensors(r)) return false;
    } else {
        FILE *f = fopen(r->in, "rb");
        unsigned char head[4] = {0};
        size_t got = f ? fread(head, 1, 4, f) : 0;
        if (f) fclose(f);
        if (got != 4 || !sy_gguf_has_magic(head, 4))
            return failf(r, "%s: neither a GGUF file nor a SafeTensors checkpoint directory", r->in);
        if (!load_gguf(r)) return false;
    }
    if (!set_u32(r, "general.quantization_version", 2) || !set_u32(r, "general.file_type", (uint32_t)r->ftype))
        return false;

    qsort(r->t, r->n, sizeof *r->t, compare_tensors);
    sy_quant_tensor *plan = calloc(r->n ? r->n : 1, sizeof *plan);
    if (plan == NULL) return failf(r, "out of memory");
    for (size_t i = 0; i < r->n; i++) {
        plan[i] = (sy_quant_tensor){.name = r->t[i].name, .n_dims = r->t[i].n_dims, .src_type = r->t[i].src_type};
        memcpy(plan[i].dims, r->t[i].dims, sizeof plan[i].dims);
        /* vectors from SafeTensors are stored as F32, as llama.cpp's converter does */
        if (r->st != NULL && r->t[i].n_dims < 2) plan[i].src_type = SY_DTYPE_F32;
    }
    bool ok = sy_quant_choose_types(r->ftype, &r->model, plan, r->n, r->err, sizeof r->err);
    uint64_t bytes_in = 0, bytes_out = 0, elements = 0;
    size_t n_fallback = 0;
    for (size_t i = 0; ok && i < r->n; i++) {
        qtensor *t = &r->t[i];
        t->plan = plan[i];
        t->plan.name = t->name;
        n_fallback += t->plan.fallback;
        ok = sy_gguf_writer_add_tensor(r->w, t->name, t->plan.out_type, t->n_dims, t->dims, r->err, sizeof r->err);
        bytes_in += sy_dtype_row_bytes(t->src_type, t->dims[0]) * t->dims[1] * t->dims[2] * t->dims[3];
        bytes_out += sy_gguf_writer_tensor_bytes(r->w, i);
        elements += t->dims[0] * t->dims[1] * t->dims[2] * t->dims[3];
        if (ok && r->dry_run) {
            printf("%-40s %6s -> %-6s [%llu, %llu]%s\n", t->name, sy_dtype_get(t->src_type)->name,
                   sy_dtype_get(t->plan.out_type)->name, (unsigned long long)t->dims[0], (unsigned long long)t->dims[1],
                   t->plan.fallback ? "  (fallback: row length)" : "");
        }
    }
    free(plan);
    if (!ok || r->dry_run) return ok;

    double t0 = now_seconds();
    sy_threadpool *pool = sy_threadpool_create(r->threads);
    if (pool == NULL) return failf(r, "cannot start %zu threads", r->threads);
    ok = sy_gguf_writer_open(r->w, r->out, r->err, sizeof r->err);
    progress pg = {.on = r->progress, .total = bytes_in, .count = r->n};
    for (size_t i = 0; ok && i < r->n; i++) {
        pg.index = i;
        progress_show(&pg, &r->t[i], true);
        ok = write_tensor(r, pool, &r->t[i], &pg);
    }
    if (pg.on) fprintf(stderr, "\r\033[K");
    sy_threadpool_destroy(pool);
    ok = ok && sy_gguf_writer_commit(r->w, r->err, sizeof r->err);
    if (!ok) return false;
    fprintf(stderr, "quantize: wrote %s (%s): %zu tensors, %.1f MiB -> %.1f MiB, %.2f bits per weight, %.1f s\n",
            r->out, sy_quant_ftype_name(r->ftype), r->n, (double)bytes_in / 1048576.0, (double)bytes_out / 1048576.0,
            elements ? 8.0 * (double)bytes_out / (double)elements : 0.0, now_seconds() - t0);
    if (n_fallback > 0)
        fprintf(stderr, "quantize: %zu tensors got a fallback type: their rows are not a multiple of the recipe's "
                        "block (256 for K-quants)\n", n_fallback);
    return true;
}

enum { OPT_THREADS = 1000, OPT_DRY_RUN, OPT_NO_PROGRESS, OPT_PLUGIN_DIR, OPT_CONFIG };

int sy_quantize_main(int argc, char **argv) {
    static const struct option options[] = {
        {"threads", required_argument, NULL, OPT_THREADS}, {"dry-run", no_argument, NULL, OPT_DRY_RUN},
        {"no-progress", no_argument, NULL, OPT_NO_PROGRESS}, {"plugin-dir", required_argument, NULL, OPT_PLUGIN_DIR},
        {"config", required_argument, NULL, OPT_CONFIG},  {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    run r;
    memset(&r, 0, sizeof r);
    r.threads = sy_threadpool_default_threads();
    r.progress = isatty(STDERR_FILENO) != 0;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", options, NULL)) != -1) {
        switch (c) {
        case OPT_THREADS:
            if (!parse_threads(optarg, &r.threads)) {
                say("--threads %s: expected 1 to %d", optarg, SY_THREADPOOL_MAX_THREADS);
                return 2;
            }
            break;
        case OPT_DRY_RUN: r.dry_run = true; break;
        case OPT_NO_PROGRESS: r.progress = false; break;
        case OPT_PLUGIN_DIR: case OPT_CONFIG: break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (argc - optind != 3) {
        usage(stderr);
        return 2;
    }
    r.in = argv[optind];
    r.out = argv[optind + 1];
    if (!sy_quant_ftype_parse(argv[optind + 2], &r.ftype)) {
        say("unknown type '%s' (known: %s)", argv[optind + 2], sy_quant_ftype_list());
        return 2;
    }
    bool ok = quantize(&r);
    if (!ok) say("%s", r.err);
    sy_gguf_writer_free(r.w);
    for (size_t i = 0; i < r.n; i++) free(r.t[i].name);
    free(r.t);
    sy_safetensors_close(r.st);
    sy_gguf_close(r.gguf);
    return ok ? 0 : 1;
}
