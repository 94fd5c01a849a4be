/* See model_facts.h. */
#include "api/model_facts.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/utf8.h"
#include "base/util.h"
#include "plugins/loaded_model.h"

typedef struct meta_sink_state {
    cJSON *obj;
    size_t n;
} meta_sink_state;

static int meta_put(void *user, const char *key, const sy_metadata_value *v) {
    meta_sink_state *s = user;
    if (key == NULL || v == NULL || s->n >= SY_API_META_MAX_KEYS) return s->n >= SY_API_META_MAX_KEYS;
    size_t key_len = strnlen(key, 257);
    if (key_len == 0 || key_len > 256 || !sy_utf8_valid(key, key_len)) return 0; /* not a key a client can use */
    if (cJSON_GetObjectItemCaseSensitive(s->obj, key) != NULL) return 0;    /* the first one stands */
    cJSON *item = NULL;
    switch (v->type) {
    case SY_META_STRING: {
        if (v->string == NULL && v->len > 0) return 0;
        size_t len = v->len < SY_API_META_MAX_STRING ? v->len : SY_API_META_MAX_STRING;
        sy_buf safe;
        sy_buf_init(&safe);
        sy_utf8_repair(&safe, v->string ? v->string : "", len);
        /* a NUL inside would cut the JSON string short: stop there, as a C string would */
        item = cJSON_CreateString(safe.data ? safe.data : "");
        sy_buf_free(&safe);
        break;
    }
    case SY_META_INT: item = cJSON_CreateNumber((double)v->i); break;
    case SY_META_FLOAT: item = cJSON_CreateNumber(isfinite(v->f) ? v->f : 0); break;
    case SY_META_BOOL: item = cJSON_CreateBool(v->i != 0); break;
    case SY_META_ARRAY: item = cJSON_CreateNull(); break;
    default: return 0;
    }
    if (item == NULL) return 1;
    cJSON_AddItemToObject(s->obj, key, item);
    s->n++;
    return 0;
}

cJSON *sy_api_model_metadata(sy_api_context *c, const sy_config_model *cm, char *err, size_t err_size) {
    if (cm == NULL || cm->path == NULL) {
        snprintf(err, err_size, "the model has no path");
        return NULL;
    }
    meta_sink_state st = {cJSON_CreateObject(), 0};
    sy_metadata_sink sink = {sizeof sink, &st, meta_put};
    const sy_plugin_registry *reg = sy_model_manager_registry(sy_api_manager(c));
    if (sy_loaded_model_describe(reg, cm->plugin, cm->path, &sink, err, err_size) != 0) {
        cJSON_Delete(st.obj);
        return NULL;
    }
    return st.obj;
}

bool sy_api_meta_int(const cJSON *meta, const char *key, int64_t *out) {
    const cJSON *v = meta ? cJSON_GetObjectItemCaseSensitive(meta, key) : NULL;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) return false;
    double d = v->valuedouble;
    if (d < -9.2e18 || d > 9.2e18) return false;
    *out = (int64_t)d;
    return true;
}

const char *sy_api_meta_string(const cJSON *meta, const char *key) {
    const cJSON *v = meta ? cJSON_GetObjectItemCaseSensitive(meta, key) : NULL;
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

void sy_api_human_number(uint64_t n, char *out, size_t size) {
    static const struct {
        double scale;
        const char *unit;
    } units[] = {{1e12, "T"}, {1e9, "B"}, {1e6, "M"}, {1e3, "K"}};
    for (size_t i = 0; i < sizeof units / sizeof *units; i++) {
        if ((double)n < units[i].scale) continue;
        double v = (double)n / units[i].scale;
        /* Ollama's DecimalPlace: whole numbers plain, else two places under 10, one under 100, none above */
        if (v == floor(v)) snprintf(out, size, "%.0f%s", v, units[i].unit);
        else if (v >= 100) snprintf(out, size, "%.0f%s", v, units[i].unit);
        else if (v >= 10) snprintf(out, size, "%.1f%s", v, units[i].unit);
        else snprintf(out, size, "%.2f%s", v, units[i].unit);
        return;
    }
    snprintf(out, size, "%llu", (unsigned long long)n);
}

cJSON *sy_api_model_details(const sy_config_model *cm, const cJSON *meta) {
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "parent_model", "");
    /* the file's format: a folder is a Hugging Face checkpoint; a GGUF (an Ollama blob too) starts "GGUF" */
    const char *path = cm && cm->path ? cm->path : "";
    const char *format = cm && cm->plugin ? cm->plugin : "";
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        format = "safetensors";
    } else {
        FILE *f = fopen(path, "rb");
        char magic[4] = {0};
        if (f != NULL) {
            if (fread(magic, 1, 4, f) == 4 && memcmp(magic, "GGUF", 4) == 0) format = "gguf";
            fclose(f);
        }
    }
    cJSON_AddStringToObject(d, "format", format);
    const char *arch = sy_api_meta_string(meta, "general.architecture");
    cJSON_AddStringToObject(d, "family", arch ? arch : "");
    cJSON *families = cJSON_AddArrayToObject(d, "families");
    if (arch && arch[0]) cJSON_AddItemToArray(families, cJSON_CreateString(arch));
    char params[32] = "";
    const char *label = sy_api_meta_string(meta, "general.size_label");
    int64_t count = 0;
    if (sy_api_meta_int(meta, "general.parameter_count", &count) && count > 0)
        sy_api_human_number((uint64_t)count, params, sizeof params);
    else if (label) snprintf(params, sizeof params, "%.30s", label);
    cJSON_AddStringToObject(d, "parameter_size", params);
    const char *q = sy_api_meta_string(meta, "general.file_type_name");
    cJSON_AddStringToObject(d, "quantization_level", q ? q : "");
    return d;
}

static int32_t fim_id(const cJSON *meta, const char *kind) {
    char key[64];
    snprintf(key, sizeof key, "tokenizer.ggml.fim_%s_token_id", kind);
    int64_t v;
    return sy_api_meta_int(meta, key, &v) && v >= 0 && v <= INT32_MAX ? (int32_t)v : -1;
}

void sy_api_fim_tokens_of(const cJSON *meta, sy_api_fim_tokens *out) {
    out->pre = fim_id(meta, "pre");
    out->suf = fim_id(meta, "suf");
    out->mid = fim_id(meta, "mid");
    out->pad = fim_id(meta, "pad");
    out->rep = fim_id(meta, "rep");
    out->sep = fim_id(meta, "sep");
}

bool sy_api_fim_supported(const sy_api_fim_tokens *t) { return t->pre >= 0 && t->suf >= 0 && t->mid >= 0; }

void sy_api_model_capabilities(const sy_config_model *cm, const cJSON *meta, cJSON *caps) {
    (void)cm;
    cJSON_AddItemToArray(caps, cJSON_CreateString("completion"));
    sy_api_fim_tokens fim;
    sy_api_fim_tokens_of(meta, &fim);
    if (sy_api_fim_supported(&fim)) cJSON_AddItemToArray(caps, cJSON_CreateString("insert"));
}
