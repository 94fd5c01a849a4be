/* BERT config.json and sentence-transformers pooling (bert_config.h), over the tree JSON reader. */
#include "bert_config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "errmsg.h"
#include "hf_config.h"
#include "json_reader.h"

#define ST_MAX_BYTES (1u << 20)

static char *path_in(const char *dir, const char *a, const char *b) {
    size_t n = strlen(dir) + strlen(a) + (b ? strlen(b) : 0) + 3;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s%s%s", dir, a, b ? "/" : "", b ? b : "");
    return p;
}

/* The parsed document of a file; false with err (a missing file too, unless missing_ok: then *absent is set). */
static bool read_doc(const char *path, bool missing_ok, bool *absent, sy_json_doc *doc, char *err, size_t err_size) {
    struct stat st;
    if (absent) *absent = false;
    if (path == NULL) {
        sy_errmsg(err, err_size, "out of memory");
        return false;
    }
    if (stat(path, &st) != 0 && missing_ok) {
        *absent = true;
        return true;
    }
    size_t len = 0;
    char *text = sy_hf_read_file(path, ST_MAX_BYTES, &len, err, err_size);
    if (text == NULL) return false;
    sy_json_error je;
    bool ok = sy_json_parse(doc, text, len, NULL, &je);
    if (!ok) sy_errmsg(err, err_size, "%s: invalid JSON at byte %zu: %s", path, je.at, je.what);
    free(text);
    return ok;
}

static bool get_u32(const sy_json *root, const char *key, uint32_t min, uint32_t max, bool required, uint32_t dflt,
                    uint32_t *out, char *err, size_t err_size) {
    const sy_json *v = sy_json_get(root, key);
    if (v == NULL || sy_json_is_null(v)) {
        if (required) {
            sy_errmsg(err, err_size, "config.json: %s is missing", key);
            return false;
        }
        *out = dflt;
        return true;
    }
    if (!sy_json_is_number(v) || !(v->num >= min && v->num <= max) || v->num != (double)(uint32_t)v->num) {
        sy_errmsg(err, err_size, "config.json: %s must be a whole number from %u to %u", key, min, max);
        return false;
    }
    *out = (uint32_t)v->num;
    return true;
}

bool sy_bert_config_parse(const char *json, size_t len, sy_bert_config *c, char *err, size_t err_size) {
    memset(c, 0, sizeof *c);
    sy_json_doc doc;
    sy_json_error je;
    if (!sy_json_parse(&doc, json, len, NULL, &je)) {
        sy_errmsg(err, err_size, "config.json: invalid JSON at byte %zu: %s", je.at, je.what);
        return false;
    }
    const sy_json *r = doc.root;
    bool ok = sy_json_is_object(r);
    if (!ok) sy_errmsg(err, err_size, "config.json: not an object");
    const sy_json *mt = sy_json_get(r, "model_type");
    if (ok && (!sy_json_is_string(mt) || strcmp(mt->str, "bert") != 0)) {
        sy_errmsg(err, err_size, "config.json: model_type is not bert");
        ok = false;
    }
    const sy_json *arch = sy_json_at(sy_json_get(r, "architectures"), 0);
    const char *a = sy_json_is_string(arch) ? arch->str : "BertModel";
    if (ok && strcmp(a, "BertModel") != 0 && strcmp(a, "BertForSequenceClassification") != 0 &&
        strcmp(a, "BertForMaskedLM") != 0 && strcmp(a, "BertForPreTraining") != 0) {
        sy_errmsg(err, err_size, "config.json: architecture %.60s is not supported (BertModel and "
                  "BertForSequenceClassification are)", a);
        ok = false;
    }
    if (ok) {
        snprintf(c->architecture, sizeof c->architecture, "%s", a);
        c->classifier = strcmp(a, "BertForSequenceClassification") == 0;
    }
    const uint32_t big = 1u << 20;
    ok = ok && get_u32(r, "vocab_size", 1, 1u << 24, true, 0, &c->vocab_size, err, err_size) &&
         get_u32(r, "hidden_size", 1, big, true, 0, &c->hidden_size, err, err_size) &&
         get_u32(r, "intermediate_size", 1, big, true, 0, &c->intermediate_size, err, err_size) &&
         get_u32(r, "num_hidden_layers", 1, 1024, true, 0, &c->num_hidden_layers, err, err_size) &&
         get_u32(r, "num_attention_heads", 1, 4096, true, 0, &c->num_attention_heads, err, err_size) &&
         get_u32(r, "max_position_embeddings", 1, big, false, 512, &c->max_position_embeddings, err, err_size) &&
         get_u32(r, "type_vocab_size", 0, 1024, false, 2, &c->type_vocab_size, err, err_size);
    if (ok && c->hidden_size % c->num_attention_heads != 0) {
        sy_errmsg(err, err_size, "config.json: hidden_size %u is not a multiple of num_attention_heads %u",
                  c->hidden_size, c->num_attention_heads);
        ok = false;
    }
    const sy_json *eps = sy_json_get(r, "layer_norm_eps");
    c->layer_norm_eps = 1e-12;
    if (ok && eps) {
        if (!sy_json_is_number(eps) || !(eps->num > 0 && eps->num < 1)) {
            sy_errmsg(err, err_size, "config.json: layer_norm_eps must be a number between 0 and 1");
            ok = false;
        } else {
            c->layer_norm_eps = eps->num;
        }
    }
    const sy_json *act = sy_json_get(r, "hidden_act"), *pos = sy_json_get(r, "position_embedding_type");
    if (ok && act && (!sy_json_is_string(act) || strcmp(act->str, "gelu") != 0)) {
        sy_errmsg(err, err_size, "config.json: hidden_act %.40s is not supported (gelu is)",
                  sy_json_is_string(act) ? act->str : "(not a string)");
        ok = false;
    }
    if (ok && pos && !sy_json_is_null(pos) && (!sy_json_is_string(pos) || strcmp(pos->str, "absolute") != 0)) {
        sy_errmsg(err, err_size, "config.json: position_embedding_type %.40s is not supported (absolute is)",
                  sy_json_is_string(pos) ? pos->str : "(not a string)");
        ok = false;
    }
    const sy_json *pad = sy_json_get(r, "pad_token_id");
    c->pad_token_id = sy_json_is_number(pad) && pad->num >= 0 && pad->num < c->vocab_size ? (int64_t)pad->num : -1;
    if (ok && c->classifier) {
        const sy_json *labels = sy_json_get(r, "id2label");
        uint32_t n = sy_json_is_object(labels) ? (uint32_t)sy_json_size(labels) : 0;
        if (n == 0 && !get_u32(r, "num_labels", 1, 1024, false, 2, &n, err, err_size)) ok = false;
        if (ok && (n == 0 || n > 1024)) {
            sy_errmsg(err, err_size, "config.json: id2label must have 1 to 1024 labels");
            ok = false;
        }
        c->n_labels = n;
    }
    sy_json_doc_free(&doc);
    return ok;
}

bool sy_bert_config_load(const char *dir, sy_bert_config *out, char *err, size_t err_size) {
    char *path = path_in(dir, "config.json", NULL);
    size_t len = 0;
    char *text = path ? sy_hf_read_file(path, SY_HF_MAX_CONFIG_BYTES, &len, err, err_size) : NULL;
    free(path);
    if (text == NULL) return false;
    bool ok = sy_bert_config_parse(text, len, out, err, err_size);
    free(text);
    return ok;
}

bool sy_bert_is_bert_dir(const char *dir) {
    char *path = path_in(dir, "config.json", NULL);
    char err[200];
    sy_json_doc doc;
    bool absent = false, is = false;
    if (read_doc(path, true, &absent, &doc, err, sizeof err) && !absent) {
        const sy_json *mt = sy_json_get(doc.root, "model_type");
        is = sy_json_is_string(mt) && strcmp(mt->str, "bert") == 0;
        sy_json_doc_free(&doc);
    }
    free(path);
    return is;
}

/* The Pooling module's config.json: exactly one of the modes sentence-transformers can combine. */
static bool read_pooling(const char *path, sy_st_pooling *out, char *err, size_t err_size) {
    sy_json_doc doc;
    if (!read_doc(path, false, NULL, &doc, err, err_size)) return false;
    static const struct {
        const char *key;
        sy_pooling pooling;
    } modes[] = {{"pooling_mode_mean_tokens", SY_POOLING_MEAN},      {"pooling_mode_cls_token", SY_POOLING_CLS},
                 {"pooling_mode_lasttoken", SY_POOLING_LAST},        {"pooling_mode_max_tokens", SY_POOLING_NONE},
                 {"pooling_mode_mean_sqrt_len_tokens", SY_POOLING_NONE}, {"pooling_mode_weightedmean_tokens", SY_POOLING_NONE}};
    int n_on = 0;
    bool ok = true;
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        const sy_json *v = sy_json_get(doc.root, modes[i].key);
        if (v == NULL || !sy_json_is_true(v)) continue;
        n_on++;
        if (modes[i].pooling == SY_POOLING_NONE) {
            sy_errmsg(err, err_size, "%s: %s is not supported (mean, cls and lasttoken pooling are)", path, modes[i].key);
            ok = false;
        }
        out->pooling = modes[i].pooling;
    }
    const sy_json *mode = sy_json_get(doc.root, "pooling_mode"); /* newer spelling: "mean", "cls", "lasttoken" */
    if (ok && n_on == 0 && sy_json_is_string(mode)) {
        n_on = 1;
        if (strcmp(mode->str, "mean") == 0) out->pooling = SY_POOLING_MEAN;
        else if (strcmp(mode->str, "cls") == 0) out->pooling = SY_POOLING_CLS;
        else if (strcmp(mode->str, "lasttoken") == 0) out->pooling = SY_POOLING_LAST;
        else {
            sy_errmsg(err, err_size, "%s: pooling_mode %.40s is not supported", path, mode->str);
            ok = false;
        }
    }
    if (ok && n_on != 1) {
        sy_errmsg(err, err_size, "%s: exactly one pooling mode must be on (%d are)", path, n_on);
        ok = false;
    }
    const sy_json *tail = sy_json_get(doc.root, "include_prompt");
    if (ok && tail && sy_json_is_bool(tail) && !sy_json_is_true(tail)) {
        sy_errmsg(err, err_size, "%s: include_prompt false is not supported", path);
        ok = false;
    }
    sy_json_doc_free(&doc);
    return ok;
}

bool sy_st_pooling_load(const char *dir, sy_pooling dflt, sy_st_pooling *out, char *err, size_t err_size) {
    memset(out, 0, sizeof *out);
    out->pooling = dflt;
    char *path = path_in(dir, "modules.json", NULL);
    sy_json_doc doc;
    bool absent = false;
    if (!read_doc(path, true, &absent, &doc, err, err_size)) {
        free(path);
        return false;
    }
    free(path);
    if (absent) return true;
    out->present = true;
    bool ok = sy_json_is_array(doc.root), pooled = false;
    if (!ok) sy_errmsg(err, err_size, "modules.json: not an array");
    for (const sy_json *m = ok ? doc.root->child : NULL; ok && m; m = m->next) {
        const sy_json *type = sy_json_get(m, "type"), *mpath = sy_json_get(m, "path");
        if (!sy_json_is_string(type) || (mpath && !sy_json_is_string(mpath))) {
            sy_errmsg(err, err_size, "modules.json: a module without type or path");
            ok = false;
            break;
        }
        const char *t = type->str, *short_t = strrchr(t, '.') ? strrchr(t, '.') + 1 : t;
        if (strcmp(short_t, "Transformer") == 0) continue;
        if (strcmp(short_t, "Normalize") == 0) {
            out->normalize = true;
            continue;
        }
        if (strcmp(short_t, "Pooling") == 0 && mpath && !pooled && !strstr(mpath->str, "..") && mpath->str[0] != '/') {
            char *pp = path_in(dir, mpath->str, "config.json");
            ok = read_pooling(pp, out, err, err_size);
            free(pp);
            pooled = true;
            continue;
        }
        sy_errmsg(err, err_size, "modules.json: module %.60s is not supported (Transformer, Pooling, Normalize are)", t);
        ok = false;
    }
    sy_json_doc_free(&doc);
    if (!ok) return false;
    char *sb = path_in(dir, "sentence_bert_config.json", NULL);
    if (!read_doc(sb, true, &absent, &doc, err, err_size)) {
        free(sb);
        return false;
    }
    free(sb);
    if (!absent) {
        const sy_json *mx = sy_json_get(doc.root, "max_seq_length");
        if (mx && !sy_json_is_null(mx)) {
            if (!sy_json_is_number(mx) || !(mx->num >= 1 && mx->num <= (1u << 20))) {
                sy_errmsg(err, err_size, "sentence_bert_config.json: max_seq_length must be a whole number from 1");
                ok = false;
            } else {
                out->max_seq_length = (uint32_t)mx->num;
            }
        }
        sy_json_doc_free(&doc);
    }
    return ok;
}
