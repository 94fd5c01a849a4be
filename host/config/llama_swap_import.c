/* llama-swap YAML -> switchyard INI: see llama_swap_import.h. */
#include "config/llama_swap_import.h"

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "base/util.h"

#define MAX_DEPTH 32
#define MAX_JSON_NODES 100000
#define INI_LINE_MAX 190 /* inih's line buffer (200) less room for the key; longer values go on continuation lines */

typedef struct imp {
    yaml_document_t *doc;
    sy_buf *ini, *report;
    const char *source;
    size_t json_budget;
    /* Model names written, for groups, preload and selectors. */
    char **models;
    size_t n_models;
    char **grouped; /* models already placed in a group */
    size_t n_grouped;
    yaml_node_t *preload; /* hooks.on_startup.preload */
    char **selectors;
    size_t n_selectors;
    bool native;
    yaml_node_t *global_macros;
    yaml_node_t *cur_macros; /* the model being imported: its macros and name, applied to metadata strings */
    const char *cur_model;
} imp;

static yaml_node_t *node(imp *x, int id) { return id ? yaml_document_get_node(x->doc, id) : NULL; }

static const char *scalar(yaml_node_t *n) {
    return n != NULL && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

static yaml_node_t *get(imp *x, yaml_node_t *map, const char *key) {
    if (map == NULL || map->type != YAML_MAPPING_NODE) return NULL;
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
        const char *k = scalar(node(x, p->key));
        if (k != NULL && strcmp(k, key) == 0) return node(x, p->value);
    }
    return NULL;
}

__attribute__((format(printf, 3, 4))) static void note(imp *x, const char *path, const char *fmt, ...) {
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    sy_buf_printf(x->report, "%s: %s: %s\n", x->source, path, msg);
}

/* A value as one INI-safe line: newlines become spaces, runs of blanks collapse; false for other control bytes. */
static bool one_line(const char *s, sy_buf *out) {
    bool blank = false;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        unsigned char c = *p;
        if (c == '\n' || c == '\r' || c == '\t' || c == ' ') {
            blank = out->len > 0;
            continue;
        }
        if (c < 0x20 || c == 0x7f) return false;
        if (blank) sy_buf_append(out, " ", 1);
        blank = false;
        sy_buf_append(out, p, 1);
    }
    sy_buf_append(out, "", 1);
    out->len--;
    return true;
}

static bool is_name(const char *s) {
    size_t n = 0;
    for (; s[n]; n++) {
        char c = s[n];
        bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
        if (!alnum && !(n > 0 && strchr("._-:/@+", c) != NULL)) return false;
    }
    return n > 0 && n <= 128;
}

/* "key = value", with values longer than a line split at blanks onto indented continuation lines (keys whose
 * continuation joins with a space: cmd, name, description). */
static bool put_text(imp *x, const char *key, const char *value) {
    size_t len = strlen(value), pos = 0;
    size_t room = INI_LINE_MAX - strlen(key) - 3;
    /* Every run without a blank must fit a line. */
    for (size_t i = 0, run = 0; i < len; i++) {
        run = value[i] == ' ' ? 0 : run + 1;
        if (run > room) return false;
    }
    bool first = true;
    while (pos < len || first) {
        size_t take = len - pos;
        if (take > room) {
            take = room;
            while (take > 0 && value[pos + take] != ' ') take--;
        }
        if (first)
            sy_buf_printf(x->ini, "%s = %.*s\n", key, (int)take, value + pos);
        else
            sy_buf_printf(x->ini, "  %.*s\n", (int)take, value + pos);
        first = false;
        pos += take;
        while (pos < len && value[pos] == ' ') pos++;
    }
    return true;
}

/* key = value from YAML: one line, no control characters, no ' ;' (an INI comment), each word short enough for a
 * line; else a note and nothing written. */
static void put_value(imp *x, const char *path, const char *key, const char *value) {
    sy_buf line;
    sy_buf_init(&line);
    if (!one_line(value, &line) || line.len == 0)
        note(x, path, "empty or holds control characters; dropped");
    else if (strstr(line.data, " ;") != NULL || line.data[0] == ';')
        note(x, path, "holds ';' after a blank, which starts an INI comment; dropped");
    else if (!put_text(x, key, line.data))
        note(x, path, "a word longer than an INI line holds; dropped");
    sy_buf_free(&line);
}

/* Replaces ${NAME} of a model's own macros in s. */
static char *apply_macros(imp *x, yaml_node_t *macros, const char *s) {
    sy_buf out;
    sy_buf_init(&out);
    for (const char *p = s; *p;) {
        if (p[0] == '$' && p[1] == '{' && macros != NULL) {
            const char *close = strchr(p + 2, '}');
            if (close != NULL) {
                char name[130];
                size_t n = (size_t)(close - p - 2);
                if (n < sizeof name) {
                    memcpy(name, p + 2, n);
                    name[n] = '\0';
                    const char *v = scalar(get(x, macros, name));
                    if (v != NULL) {
                        sy_buf_puts(&out, v);
                        p = close + 1;
                        continue;
                    }
                }
            }
        }
        sy_buf_append(&out, p, 1);
        p++;
    }
    sy_buf_append(&out, "", 1);
    return sy_buf_take(&out);
}

/* A cmd: comment lines dropped, the lines joined (a trailing \ removed), the model's macros applied. */
static char *command_text(imp *x, yaml_node_t *macros, const char *cmd) {
    sy_buf joined;
    sy_buf_init(&joined);
    const char *p = cmd;
    while (*p) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        size_t a = 0;
        while (a < n && (p[a] == ' ' || p[a] == '\t')) a++;
        size_t b = n;
        while (b > a && (p[b - 1] == ' ' || p[b - 1] == '\t' || p[b - 1] == '\r')) b--;
        if (b > a && p[b - 1] == '\\') b--;
        while (b > a && (p[b - 1] == ' ' || p[b - 1] == '\t')) b--;
        if (b > a && p[a] != '#') {
            if (joined.len) sy_buf_append(&joined, " ", 1);
            sy_buf_append(&joined, p + a, b - a);
        }
        p += n + (nl != NULL);
    }
    sy_buf_append(&joined, "", 1);
    char *expanded = apply_macros(x, macros, joined.data);
    sy_buf_free(&joined);
    return expanded;
}

static cJSON *to_json(imp *x, yaml_node_t *n, int depth) {
    if (n == NULL || depth > MAX_DEPTH || x->json_budget == 0) return cJSON_CreateNull();
    x->json_budget--;
    if (n->type == YAML_SCALAR_NODE) {
        const char *s = (const char *)n->data.scalar.value;
        if (n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE) {
            if (strcmp(s, "true") == 0) return cJSON_CreateTrue();
            if (strcmp(s, "false") == 0) return cJSON_CreateFalse();
            if (strcmp(s, "~") == 0 || strcmp(s, "null") == 0 || s[0] == '\0') return cJSON_CreateNull();
            char *end;
            double d = strtod(s, &end);
            if (end != s && *end == '\0' && strspn(s, "+-0123456789.eE") == strlen(s)) return cJSON_CreateNumber(d);
        }
        if (x->cur_model == NULL) return cJSON_CreateString(s);
        char *a = apply_macros(x, x->cur_macros, s);
        sy_buf b;
        sy_buf_init(&b);
        for (const char *p = a; *p;) {
            if (strncmp(p, "${MODEL_ID}", 11) == 0) {
                sy_buf_puts(&b, x->cur_model);
                p += 11;
            } else {
                sy_buf_append(&b, p, 1);
                p++;
            }
        }
        sy_buf_append(&b, "", 1);
        cJSON *out = cJSON_CreateString(b.data);
        sy_buf_free(&b);
        free(a);
        return out;
    }
    if (n->type == YAML_SEQUENCE_NODE) {
        cJSON *a = cJSON_CreateArray();
        for (yaml_node_item_t *i = n->data.sequence.items.start; i < n->data.sequence.items.top; i++)
            cJSON_AddItemToArray(a, to_json(x, node(x, *i), depth + 1));
        return a;
    }
    cJSON *o = cJSON_CreateObject();
    for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
        const char *k = scalar(node(x, p->key));
        if (k != NULL) cJSON_AddItemToObject(o, k, to_json(x, node(x, p->value), depth + 1));
    }
    return o;
}

/* A JSON object key = {...} on one line, or a note when it cannot be one. */
static void put_json(imp *x, const char *path, const char *key, yaml_node_t *n) {
    if (n == NULL || n->type != YAML_MAPPING_NODE) {
        note(x, path, "not a mapping; dropped");
        return;
    }
    cJSON *j = to_json(x, n, 0);
    /* Formatted, then on one line: blanks between the tokens are where a long value may go to the next line. */
    char *text = cJSON_Print(j);
    cJSON_Delete(j);
    sy_buf line;
    sy_buf_init(&line);
    if (!one_line(text, &line) || strstr(line.data ? line.data : "", " ;") != NULL)
        note(x, path, "holds control characters or ' ;' (an INI comment); dropped");
    else
        put_text(x, key, line.data);
    sy_buf_free(&line);
    free(text);
}

/* "${env.NAME}" resolved now (INI lists take no macros); NULL when it names an unset variable. */
static char *resolve_env(const char *s) {
    if (strncmp(s, "${env.", 6) == 0 && s[strlen(s) - 1] == '}') {
        char name[128];
        size_t n = strlen(s) - 7;
        if (n == 0 || n >= sizeof name) return NULL;
        memcpy(name, s + 6, n);
        name[n] = '\0';
        const char *v = getenv(name);
        return v != NULL ? sy_strdup(v) : NULL;
    }
    return sy_strdup(s);
}

static bool has_model(imp *x, const char *name) {
    for (size_t i = 0; i < x->n_models; i++)
        if (strcmp(x->models[i], name) == 0) return true;
    return false;
}

static const char *const model_keys_dropped[][2] = {
    {"concurrencyLimit", "switchyard queues a process model's requests only in the upstream itself"},
    {"sendLoadingState", "no loading messages are streamed"},
    {"compat", "no websocket or compatibility switches"},
    {"capabilities", "not reported"},
    {"filters.setParamsByID", "no per-alias parameters"},
};

/* Words of a command, quotes removed (enough to read llama-server's flags). */
static size_t command_words(const char *cmd, char words[][512], size_t max) {
    size_t n = 0;
    const char *p = cmd;
    while (*p && n < max) {
        while (*p == ' ') p++;
        if (!*p) break;
        size_t k = 0;
        char quote = 0;
        while (*p && (quote || *p != ' ')) {
            if (!quote && (*p == '\'' || *p == '"')) quote = *p;
            else if (quote && *p == quote) quote = 0;
            else if (k + 1 < 512) words[n][k++] = *p;
            p++;
        }
        words[n][k] = '\0';
        n++;
    }
    return n;
}

/* --native: true when the model was written as a gguf-quant model. */
static bool import_native(imp *x, const char *name, const char *path, const char *cmd) {
    /* The global macros too: the binary is often one (${latest-llama}). */
    char *full = apply_macros(x, x->global_macros, cmd);
    for (int pass = 0; pass < 4 && strstr(full, "${") != NULL; pass++) {
        char *again = apply_macros(x, x->global_macros, full);
        free(full);
        full = again;
    }
    static char words[256][512];
    size_t n = command_words(full, words, 256);
    free(full);
    if (n == 0) return false;
    const char *bin = strrchr(words[0], '/') ? strrchr(words[0], '/') + 1 : words[0];
    if (strncmp(bin, "llama-server", 12) != 0) return false;
    const char *model = NULL, *ctx = NULL, *threads = NULL, *parallel = NULL, *cache_type[2] = {NULL, NULL};
    static const char *const sampling_flags[][2] = {{"--temp", "temperature"}, {"--temperature", "temperature"},
                                                    {"--top-k", "top_k"}, {"--top-p", "top_p"},
                                                    {"--min-p", "min_p"}, {"--repeat-penalty", "repeat_penalty"},
                                                    {"--presence-penalty", "presence_penalty"},
                                                    {"--frequency-penalty", "frequency_penalty"}, {"--seed", "seed"},
                                                    {"-s", "seed"}, {"-n", "max_tokens"}, {"--n-predict", "max_tokens"},
                                                    {"--typical", "typical_p"}, {"--repeat-last-n", "repeat_last_n"},
                                                    {"--xtc-probability", "xtc_probability"},
                                                    {"--xtc-threshold", "xtc_threshold"},
                                                    {"--dry-multiplier", "dry_multiplier"},
                                                    {"--dry-base", "dry_base"},
                                                    {"--dry-allowed-length", "dry_allowed_length"},
                                                    {"--dry-penalty-last-n", "dry_penalty_last_n"}};
    /* the sampling flags found, as the model's request defaults (config/request_params.h) */
    const char *defaults[sizeof sampling_flags / sizeof *sampling_flags][2];
    size_t n_defaults = 0;
    static const char *const ignored_no_value[] = {"--jinja", "--no-webui", "--metrics", "--cont-batching",
                                                   "-cb", "--no-mmap", "--mlock", "--verbose", "-v"};
    char kp[320];
    snprintf(kp, sizeof kp, "%.300s.cmd", path);
    for (size_t i = 1; i < n; i++) {
        const char *w = words[i];
        const char *val = i + 1 < n ? words[i + 1] : NULL;
        if ((strcmp(w, "-m") == 0 || strcmp(w, "--model") == 0) && val) model = val, i++;
        else if ((strcmp(w, "-c") == 0 || strcmp(w, "--ctx-size") == 0) && val) ctx = val, i++;
        else if ((strcmp(w, "-t") == 0 || strcmp(w, "--threads") == 0) && val) threads = val, i++;
        else if ((strcmp(w, "-np") == 0 || strcmp(w, "--parallel") == 0) && val) parallel = val, i++;
        else if ((strcmp(w, "-ctk") == 0 || strcmp(w, "--cache-type-k") == 0 || strcmp(w, "-ctv") == 0 ||
                  strcmp(w, "--cache-type-v") == 0) && val) {
            /* the KV cache types gguf-quant stores; llama.cpp's others (bf16, q4_0, ...) it does not */
            if (strcmp(val, "f16") == 0 || strcmp(val, "q8_0") == 0 || strcmp(val, "f32") == 0)
                cache_type[w[strlen(w) - 1] == 'v'] = val;
            else
                note(x, kp, "%s %s: gguf-quant keeps its KV cache in f16, q8_0 or f32; dropped (f16)", w, val);
            i++;
        }
        else if ((strcmp(w, "--port") == 0 || strcmp(w, "--host") == 0 || strcmp(w, "--alias") == 0 ||
                  strcmp(w, "-a") == 0) && val) i++; /* switchyard serves it under the model's name */
        else {
            bool done = false;
            for (size_t k = 0; k < sizeof sampling_flags / sizeof *sampling_flags && !done; k++)
                if (strcmp(w, sampling_flags[k][0]) == 0 && val) {
                    i++;
                    done = true;
                    if (strcmp(sampling_flags[k][1], "max_tokens") == 0 && atoll(val) <= 0) {
                        /* llama-server's -n -1 (until the end of the context): the request default already */
                        note(x, kp, "%s %s: no limit, as without it; dropped", w, val);
                        continue;
                    }
                    size_t d = 0;
                    while (d < n_defaults && strcmp(defaults[d][0], sampling_flags[k][1]) != 0) d++;
                    defaults[d][0] = sampling_flags[k][1]; /* a flag given twice: the last one counts */
                    defaults[d][1] = val;
                    if (d == n_defaults) n_defaults++;
                }
            for (size_t k = 0; k < sizeof ignored_no_value / sizeof *ignored_no_value && !done; k++)
                if (strcmp(w, ignored_no_value[k]) == 0) {
                    note(x, kp, "%s: not needed by or not available in gguf-quant; dropped", w);
                    done = true;
                }
            if (!done) {
                bool has_value = val != NULL && val[0] != '-';
                note(x, kp, "%s%s%s: a llama-server flag gguf-quant has no counterpart for; dropped", w,
                     has_value ? " " : "", has_value ? val : "");
                if (has_value) i++;
            }
        }
    }
    if (model == NULL || strstr(model, ".gguf") == NULL || strstr(model, "${") != NULL) {
        note(x, kp, "--native: llama-server without a -m FILE.gguf this importer can resolve; kept as a process");
        return false;
    }
    sy_buf_puts(x->ini, "plugin = gguf-quant\n");
    put_value(x, kp, "path", model);
    if (ctx) put_value(x, kp, "ctx_size", ctx);
    if (threads) put_value(x, kp, "threads", threads);
    if (parallel) put_value(x, kp, "parallel", parallel);
    if (cache_type[0]) put_value(x, kp, "cache_type_k", cache_type[0]);
    if (cache_type[1]) put_value(x, kp, "cache_type_v", cache_type[1]);
    for (size_t d = 0; d < n_defaults; d++) {
        char key[64];
        snprintf(key, sizeof key, "defaults.%s", defaults[d][0]);
        put_value(x, kp, key, defaults[d][1]);
    }
    (void)name;
    return true;
}

static void import_model(imp *x, const char *name, yaml_node_t *m, const char *global_ttl) {
    char path[300];
    snprintf(path, sizeof path, "models.%s", name);
    if (!is_name(name)) {
        note(x, path, "'%s' is not a switchyard model name (letters, digits and . _ - : / @ +); dropped", name);
        return;
    }
    if (m == NULL || m->type != YAML_MAPPING_NODE) {
        note(x, path, "not a mapping; dropped");
        return;
    }
    const char *cmd = scalar(get(x, m, "cmd"));
    if (cmd == NULL) {
        note(x, path, "has no cmd; dropped (switchyard's models without a process are plugin models)");
        return;
    }
    yaml_node_t *macros = get(x, m, "macros");
    sy_buf_printf(x->ini, "[model.%s]\n", name);
    x->models = sy_xrealloc(x->models, (x->n_models + 1) * sizeof *x->models);
    x->models[x->n_models++] = sy_strdup(name);
    char *c = command_text(x, macros, cmd);
    bool native = x->native && import_native(x, name, path, c);
    char cp[320];
    snprintf(cp, sizeof cp, "%.300s.cmd", path);
    if (!native) put_value(x, cp, "cmd", c);
    free(c);
    static const char *const process_only[] = {"cmdStop", "env", "proxy", "checkEndpoint", "useModelName",
                                               "timeouts", "unloadTimeout"};
    for (yaml_node_pair_t *p = m->data.mapping.pairs.start; p < m->data.mapping.pairs.top; p++) {
        const char *k = scalar(node(x, p->key));
        yaml_node_t *v = node(x, p->value);
        const char *s = scalar(v);
        char kp[400];
        snprintf(kp, sizeof kp, "%s.%s", path, k ? k : "?");
        if (k == NULL || strcmp(k, "cmd") == 0 || strcmp(k, "macros") == 0) continue;
        bool skip = false;
        for (size_t i = 0; native && i < sizeof process_only / sizeof *process_only; i++)
            if (strcmp(k, process_only[i]) == 0) {
                note(x, kp, "a key of the llama-server process, which --native replaces by the gguf-quant engine; "
                            "dropped");
                skip = true;
            }
        if (skip) continue;
        if (strcmp(k, "cmdStop") == 0 && s) {
            char *t = command_text(x, macros, s);
            put_value(x, kp, "cmd_stop", t);
            free(t);
        } else if ((strcmp(k, "proxy") == 0 || strcmp(k, "checkEndpoint") == 0 || strcmp(k, "useModelName") == 0 ||
                    strcmp(k, "name") == 0 || strcmp(k, "description") == 0) && s) {
            const char *key = strcmp(k, "proxy") == 0 ? "proxy" : strcmp(k, "checkEndpoint") == 0 ? "check_endpoint"
                              : strcmp(k, "useModelName") == 0 ? "use_model_name" : k;
            char *t = apply_macros(x, macros, s);
            put_value(x, kp, key, t);
            free(t);
        } else if (strcmp(k, "ttl") == 0 && s) {
            put_value(x, kp, "ttl", s);
        } else if (strcmp(k, "unloadTimeout") == 0 && s) {
            put_value(x, kp, "stop_grace", s);
        } else if (strcmp(k, "unlisted") == 0 && s) {
            put_value(x, kp, "unlisted", s);
        } else if (strcmp(k, "env") == 0 && v && v->type == YAML_SEQUENCE_NODE) {
            bool firstline = true;
            for (yaml_node_item_t *i = v->data.sequence.items.start; i < v->data.sequence.items.top; i++) {
                const char *e = scalar(node(x, *i));
                bool ok = e != NULL && strchr(e, '=') != NULL && strlen(e) <= INI_LINE_MAX - 8 && strstr(e, " ;") == NULL;
                for (const char *q = e; ok && *q; q++) ok = (unsigned char)*q >= 0x20 && *q != 0x7f;
                if (!ok) {
                    note(x, kp, "an item that is not a one-line NAME=VALUE; dropped");
                    continue;
                }
                sy_buf_printf(x->ini, firstline ? "env = %s\n" : "  %s\n", e);
                firstline = false;
            }
        } else if (strcmp(k, "aliases") == 0 && v && v->type == YAML_SEQUENCE_NODE) {
            sy_buf list;
            sy_buf_init(&list);
            for (yaml_node_item_t *i = v->data.sequence.items.start; i < v->data.sequence.items.top; i++) {
                const char *a = scalar(node(x, *i));
                if (a == NULL || !is_name(a)) {
                    note(x, kp, "an alias that is not a switchyard name; dropped");
                    continue;
                }
                sy_buf_printf(&list, "%s%s", list.len ? ", " : "", a);
            }
            if (list.len) put_value(x, kp, "aliases", list.data);
            sy_buf_free(&list);
        } else if (strcmp(k, "metadata") == 0) {
            x->cur_macros = macros, x->cur_model = name;
            put_json(x, kp, "metadata", v);
            x->cur_macros = NULL, x->cur_model = NULL;
            if (strstr(kp, "") && v && v->type == YAML_MAPPING_NODE)
                note(x, kp, "kept as JSON with the model's macros and ${MODEL_ID} expanded; a ${PORT} in it stays as "
                            "written");
        } else if (strcmp(k, "filters") == 0 && v && v->type == YAML_MAPPING_NODE) {
            const char *strip = scalar(get(x, v, "stripParams"));
            if (strip) put_value(x, kp, "strip_params", strip);
            if (get(x, v, "setParams")) put_json(x, kp, "set_params", get(x, v, "setParams"));
            if (get(x, v, "setParamsByID")) note(x, kp, "setParamsByID: no per-alias parameters; dropped");
        } else if (strcmp(k, "timeouts") == 0 && v && v->type == YAML_MAPPING_NODE) {
            for (yaml_node_pair_t *q = v->data.mapping.pairs.start; q < v->data.mapping.pairs.top; q++) {
                const char *tk = scalar(node(x, q->key)), *tv = scalar(node(x, q->value));
                if (tk && tv && strcmp(tk, "connect") == 0 && strcmp(tv, "0") != 0)
                    put_value(x, kp, "connect_timeout", tv);
                else if (tk && tv && strcmp(tk, "responseHeader") == 0)
                    put_value(x, kp, "header_timeout", tv);
                else
                    note(x, kp, "%s: not a timeout switchyard sets (connect and responseHeader are); dropped",
                         tk ? tk : "?");
            }
        } else {
            const char *why = "not a llama-swap model key switchyard knows";
            for (size_t i = 0; i < sizeof model_keys_dropped / sizeof *model_keys_dropped; i++)
                if (strcmp(model_keys_dropped[i][0], k) == 0) why = model_keys_dropped[i][1];
            note(x, kp, "%s; dropped", why);
        }
    }
    yaml_node_t *pl = x->preload;
    for (yaml_node_item_t *i = pl && pl->type == YAML_SEQUENCE_NODE ? pl->data.sequence.items.start : NULL;
         i && i < pl->data.sequence.items.top; i++) {
        const char *want = scalar(node(x, *i));
        if (want && strcmp(want, name) == 0) {
            sy_buf_puts(x->ini, "preload = true\n");
            break;
        }
    }
    if (get(x, m, "ttl") == NULL && global_ttl != NULL && strcmp(global_ttl, "0") != 0)
        put_value(x, "globalTTL", "ttl", global_ttl);
    sy_buf_append(x->ini, "\n", 1);
}

static void import_groups(imp *x, yaml_node_t *groups, const char *path) {
    if (groups == NULL || groups->type != YAML_MAPPING_NODE) return;
    for (yaml_node_pair_t *p = groups->data.mapping.pairs.start; p < groups->data.mapping.pairs.top; p++) {
        const char *g = scalar(node(x, p->key));
        yaml_node_t *v = node(x, p->value);
        char gp[300];
        snprintf(gp, sizeof gp, "%s.%s", path, g ? g : "?");
        if (g == NULL || !is_name(g) || v == NULL || v->type != YAML_MAPPING_NODE) {
            note(x, gp, "not a group switchyard can name; dropped");
            continue;
        }
        sy_buf members;
        sy_buf_init(&members);
        yaml_node_t *ms = get(x, v, "members");
        for (yaml_node_item_t *i = ms && ms->type == YAML_SEQUENCE_NODE ? ms->data.sequence.items.start : NULL;
             i && i < ms->data.sequence.items.top; i++) {
            const char *m = scalar(node(x, *i));
            if (m == NULL || !has_model(x, m)) {
                note(x, gp, "member '%s' is not an imported model; left out", m ? m : "?");
                continue;
            }
            bool taken = false;
            for (size_t k = 0; k < x->n_grouped; k++) taken = taken || strcmp(x->grouped[k], m) == 0;
            if (taken) {
                note(x, gp, "member '%s' is already in another group (a model has one group here); left out", m);
                continue;
            }
            x->grouped = sy_xrealloc(x->grouped, (x->n_grouped + 1) * sizeof *x->grouped);
            x->grouped[x->n_grouped++] = sy_strdup(m);
            sy_buf_printf(&members, "%s%s", members.len ? ", " : "", m);
        }
        if (members.len == 0) {
            note(x, gp, "no member is an imported model; the group is dropped");
            sy_buf_free(&members);
            continue;
        }
        sy_buf_printf(x->ini, "[group.%s]\n", g);
        static const char *const flags[] = {"swap", "exclusive", "persistent"};
        for (size_t k = 0; k < 3; k++) {
            const char *f = scalar(get(x, v, flags[k]));
            if (f) put_value(x, gp, flags[k], f);
        }
        put_value(x, gp, "members", members.data);
        sy_buf_append(x->ini, "\n", 1);
        sy_buf_free(&members);
    }
}

static void import_peers(imp *x, yaml_node_t *peers) {
    if (peers == NULL || peers->type != YAML_MAPPING_NODE) return;
    for (yaml_node_pair_t *p = peers->data.mapping.pairs.start; p < peers->data.mapping.pairs.top; p++) {
        const char *name = scalar(node(x, p->key));
        yaml_node_t *v = node(x, p->value);
        char pp[300];
        snprintf(pp, sizeof pp, "peers.%s", name ? name : "?");
        const char *url = scalar(get(x, v, "proxy"));
        if (name == NULL || !is_name(name) || url == NULL) {
            note(x, pp, "no name switchyard can use or no proxy URL; dropped");
            continue;
        }
        sy_buf models;
        sy_buf_init(&models);
        yaml_node_t *ms = get(x, v, "models");
        for (yaml_node_item_t *i = ms && ms->type == YAML_SEQUENCE_NODE ? ms->data.sequence.items.start : NULL;
             i && i < ms->data.sequence.items.top; i++) {
            const char *m = scalar(node(x, *i));
            if (m == NULL || !is_name(m) || has_model(x, m)) {
                note(x, pp, "model '%s' is not a usable name or is already a model; left out", m ? m : "?");
                continue;
            }
            x->models = sy_xrealloc(x->models, (x->n_models + 1) * sizeof *x->models);
            x->models[x->n_models++] = sy_strdup(m);
            sy_buf_printf(&models, "%s%s", models.len ? ", " : "", m);
        }
        sy_buf_printf(x->ini, "[peer.%s]\n", name);
        put_value(x, pp, "url", url);
        const char *key = scalar(get(x, v, "apiKey"));
        if (key != NULL) {
            char *k = resolve_env(key);
            if (k == NULL)
                note(x, pp, "apiKey '%s' names an unset environment variable; set it and import again", key);
            else
                put_value(x, pp, "api_key", k);
            free(k);
        }
        if (models.len) put_value(x, pp, "models", models.data);
        yaml_node_t *filters = get(x, v, "filters");
        if (filters != NULL) {
            const char *strip = scalar(get(x, filters, "stripParams"));
            if (strip) put_value(x, pp, "strip_params", strip);
            char fp[340];
            snprintf(fp, sizeof fp, "%s.filters.setParams", pp);
            if (get(x, filters, "setParams")) put_json(x, fp, "set_params", get(x, filters, "setParams"));
        }
        sy_buf_append(x->ini, "\n", 1);
        sy_buf_free(&models);
        if (get(x, v, "timeouts")) note(x, pp, "timeouts: switchyard's defaults apply to peers; dropped");
    }
}

static void import_selectors(imp *x, yaml_node_t *sels) {
    if (sels == NULL || sels->type != YAML_MAPPING_NODE) return;
    for (yaml_node_pair_t *p = sels->data.mapping.pairs.start; p < sels->data.mapping.pairs.top; p++) {
        const char *name = scalar(node(x, p->key));
        yaml_node_t *v = node(x, p->value);
        char sp[300];
        snprintf(sp, sizeof sp, "selectors.%s", name ? name : "?");
        const char *strategy = scalar(get(x, v, "strategy"));
        if (name == NULL || !is_name(name) || has_model(x, name)) {
            note(x, sp, "not a name switchyard can use, or already a model's; dropped");
            continue;
        }
        if (strategy == NULL || (strcmp(strategy, "warm") != 0 && strcmp(strategy, "pin") != 0 &&
                                 strcmp(strategy, "spillover") != 0)) {
            note(x, sp, "strategy '%s' is not warm, pin or spillover; dropped", strategy ? strategy : "(none)");
            continue;
        }
        sy_buf targets;
        sy_buf_init(&targets);
        yaml_node_t *ts = get(x, v, "targets");
        for (yaml_node_item_t *i = ts && ts->type == YAML_SEQUENCE_NODE ? ts->data.sequence.items.start : NULL;
             i && i < ts->data.sequence.items.top; i++) {
            const char *t = scalar(node(x, *i));
            if (t == NULL || !has_model(x, t)) {
                note(x, sp, "target '%s' is not an imported model; left out", t ? t : "?");
                continue;
            }
            sy_buf_printf(&targets, "%s%s", targets.len ? ", " : "", t);
        }
        if (targets.len == 0) {
            note(x, sp, "no target is an imported model; dropped");
            sy_buf_free(&targets);
            continue;
        }
        x->selectors = sy_xrealloc(x->selectors, (x->n_selectors + 1) * sizeof *x->selectors);
        x->selectors[x->n_selectors] = sy_strdup(name);
        x->n_selectors++;
        sy_buf_printf(x->ini, "[selector.%s]\nstrategy = %s\n", name, strategy);
        put_value(x, sp, "targets", targets.data);
        const char *spill = scalar(get(x, get(x, v, "settings"), "spillover"));
        if (spill) put_value(x, sp, "spillover", spill);
        const char *dn = scalar(get(x, v, "name")), *desc = scalar(get(x, v, "description"));
        if (dn) put_value(x, sp, "name", dn);
        if (desc) put_value(x, sp, "description", desc);
        if (get(x, v, "metadata")) note(x, sp, "metadata: selectors carry none here; dropped");
        sy_buf_append(x->ini, "\n", 1);
        sy_buf_free(&targets);
    }
}

static const char *const top_dropped[][2] = {
    {"logTimeFormat", "switchyard's log has its own format"},
    {"logToStdout", "upstream output always goes to the log and /logs"},
    {"metricsMaxInMemory", "switchyard keeps counters (/metrics), not a history"},
    {"captureBuffer", "/logs keeps the last 1 MiB"},
    {"ui", "switchyard has no web UI"},
    {"performance", "no performance sampling"},
    {"sendLoadingState", "no loading messages are streamed"},
    {"includeAliasesInList", "/v1/models lists aliases inside each model"},
    {"unloadTimeout", "set per model as stop_grace (this global is not carried)"},
    {"upstream", "no ignorePaths: /upstream forwards every path"},
    {"profiles", "no profiles"},
};

int sy_llama_swap_import(const char *yaml, size_t len, const char *source, sy_buf *ini, sy_buf *report, char *err,
                         size_t err_size) {
    return sy_llama_swap_import_native(yaml, len, source, false, ini, report, err, err_size);
}

int sy_llama_swap_import_native(const char *yaml, size_t len, const char *source, bool native, sy_buf *ini,
                                sy_buf *report, char *err, size_t err_size) {
    if (len > SY_IMPORT_MAX_BYTES) {
        snprintf(err, err_size, "%s is %zu bytes; the limit is %zu", source, len, SY_IMPORT_MAX_BYTES);
        return -1;
    }
    yaml_parser_t parser;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&parser)) {
        snprintf(err, err_size, "cannot start the YAML reader");
        return -1;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)yaml, len);
    if (!yaml_parser_load(&parser, &doc)) {
        snprintf(err, err_size, "%s:%zu:%zu: not YAML: %s", source, parser.problem_mark.line + 1,
                 parser.problem_mark.column + 1, parser.problem ? parser.problem : "?");
        yaml_parser_delete(&parser);
        return -1;
    }
    yaml_parser_delete(&parser);
    imp x;
    memset(&x, 0, sizeof x);
    x.doc = &doc;
    x.ini = ini;
    x.report = report;
    x.source = source;
    x.json_budget = MAX_JSON_NODES;
    x.native = native;
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (root == NULL || root->type != YAML_MAPPING_NODE) {
        snprintf(err, err_size, "%s: the top level is not a mapping, so not a llama-swap config", source);
        yaml_document_delete(&doc);
        return -1;
    }
    sy_buf_puts(ini, "; imported by switchyard import-config (see docs/config.md)\n\n[host]\n");
    const char *v;
    if ((v = scalar(get(&x, root, "startPort")))) put_value(&x, "startPort", "start_port", v);
    if ((v = scalar(get(&x, root, "healthCheckTimeout")))) put_value(&x, "healthCheckTimeout", "load_timeout", v);
    if ((v = scalar(get(&x, root, "logLevel"))))
        sy_buf_printf(ini, "log_level = %s\n", strcmp(v, "warn") == 0 || strcmp(v, "error") == 0 || strcmp(v, "debug") == 0 ? v : "info");
    yaml_node_t *keys = get(&x, root, "apiKeys");
    if (keys && keys->type == YAML_SEQUENCE_NODE) {
        sy_buf list;
        sy_buf_init(&list);
        for (yaml_node_item_t *i = keys->data.sequence.items.start; i < keys->data.sequence.items.top; i++) {
            const char *k = scalar(node(&x, *i));
            char *r = k ? resolve_env(k) : NULL;
            if (r == NULL)
                note(&x, "apiKeys", "'%s' names an unset environment variable; left out", k ? k : "?");
            else if (strchr(r, ',') || strchr(r, ' ') || strlen(r) > 256)
                note(&x, "apiKeys", "a key with a comma or a space cannot be an INI list item; left out");
            else
                sy_buf_printf(&list, "%s%s", list.len ? ", " : "", r);
            free(r);
        }
        if (list.len) put_value(&x, "apiKeys", "api_keys", list.data);
        sy_buf_free(&list);
    }
    sy_buf_append(ini, "\n", 1);

    yaml_node_t *macros = get(&x, root, "macros");
    x.global_macros = macros;
    if (macros && macros->type == YAML_MAPPING_NODE) {
        sy_buf_puts(ini, "[macros]\n");
        for (yaml_node_pair_t *p = macros->data.mapping.pairs.start; p < macros->data.mapping.pairs.top; p++) {
            const char *k = scalar(node(&x, p->key)), *mv = scalar(node(&x, p->value));
            sy_buf line;
            sy_buf_init(&line);
            bool name_ok = k != NULL && k[0] != '\0' && strlen(k) <= 64;
            for (const char *q = k; name_ok && *q; q++)
                name_ok = (*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') || (*q >= '0' && *q <= '9') ||
                          *q == '_' || *q == '-';
            if (!name_ok || mv == NULL || !one_line(mv, &line) || line.len + strlen(k) + 3 > INI_LINE_MAX ||
                strstr(line.data ? line.data : "", " ;"))
                note(&x, "macros", "'%s' is not a one-line value an INI line holds; dropped", k ? k : "?");
            else
                sy_buf_printf(ini, "%s = %s\n", k, line.len ? line.data : "");
            sy_buf_free(&line);
        }
        sy_buf_append(ini, "\n", 1);
    }

    const char *global_ttl = scalar(get(&x, root, "globalTTL"));
    x.preload = get(&x, get(&x, get(&x, root, "hooks"), "on_startup"), "preload");
    yaml_node_t *models = get(&x, root, "models");
    if (models && models->type == YAML_MAPPING_NODE)
        for (yaml_node_pair_t *p = models->data.mapping.pairs.start; p < models->data.mapping.pairs.top; p++) {
            const char *name = scalar(node(&x, p->key));
            if (name) import_model(&x, name, node(&x, p->value), global_ttl);
        }
    import_peers(&x, get(&x, root, "peers"));
    import_selectors(&x, get(&x, root, "selectors"));
    yaml_node_t *routing = get(&x, root, "routing");
    /* routing.router.settings in current llama-swap; routing.settings in some examples. */
    yaml_node_t *settings = get(&x, get(&x, routing, "router"), "settings");
    if (settings == NULL) settings = get(&x, routing, "settings");
    import_groups(&x, get(&x, settings, "groups"), "routing.settings.groups");
    import_groups(&x, get(&x, root, "groups"), "groups");
    if (get(&x, settings, "matrix"))
        note(&x, "routing.settings.matrix",
             "matrix sets are not carried: a set that must run together is a group with swap = false (and "
             "exclusive = true); evict_costs have no counterpart (switchyard evicts the least recently used)");
    if (get(&x, routing, "scheduler")) note(&x, "routing.scheduler", "requests queue FIFO per model; dropped");
    const char *router = scalar(get(&x, get(&x, routing, "router"), "use"));
    if (router && strcmp(router, "group") != 0) note(&x, "routing.router.use", "'%s' is not carried (groups are)", router);

    yaml_node_t *preload = x.preload;
    for (yaml_node_item_t *i = preload && preload->type == YAML_SEQUENCE_NODE ? preload->data.sequence.items.start : NULL;
         i && i < preload->data.sequence.items.top; i++) {
        const char *m = scalar(node(&x, *i));
        bool selector = false;
        for (size_t k = 0; m && k < x.n_selectors; k++) selector = selector || strcmp(x.selectors[k], m) == 0;
        if (selector)
            note(&x, "hooks.on_startup.preload", "'%s' is a selector: preload is set on models; name its target",
                 m);
        else if (m == NULL || !has_model(&x, m))
            note(&x, "hooks.on_startup.preload", "'%s' is not an imported model; not preloaded", m ? m : "?");
    }
    for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top; p++) {
        const char *k = scalar(node(&x, p->key));
        if (k == NULL) continue;
        for (size_t i = 0; i < sizeof top_dropped / sizeof *top_dropped; i++)
            if (strcmp(k, top_dropped[i][0]) == 0) note(&x, k, "%s; dropped", top_dropped[i][1]);
        static const char *const known[] = {"startPort", "healthCheckTimeout", "logLevel", "apiKeys", "macros",
                                            "globalTTL", "models", "peers", "routing", "groups", "hooks",
                                            "selectors"};
        bool is_known = false;
        for (size_t i = 0; i < sizeof known / sizeof *known; i++) is_known = is_known || strcmp(k, known[i]) == 0;
        for (size_t i = 0; i < sizeof top_dropped / sizeof *top_dropped; i++)
            is_known = is_known || strcmp(k, top_dropped[i][0]) == 0;
        if (!is_known) note(&x, k, "not a llama-swap key switchyard knows; dropped");
    }
    for (size_t i = 0; i < x.n_models; i++) free(x.models[i]);
    free(x.models);
    for (size_t i = 0; i < x.n_grouped; i++) free(x.grouped[i]);
    for (size_t i = 0; i < x.n_selectors; i++) free(x.selectors[i]);
    free(x.selectors);
    free(x.grouped);
    yaml_document_delete(&doc);
    return 0;
}
