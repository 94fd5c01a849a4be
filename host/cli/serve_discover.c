/* See serve_discover.h. */
#include "cli/serve_discover.h"

#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "base/buf.h"
#include "base/log.h"
#include "base/util.h"
#include "plugins/loaded_model.h"

#define GGUF_PLUGIN "gguf-quant"
#define HF_PLUGIN "qwen-cpu-mmap"
#define MAX_MANIFEST_BYTES (1u << 20)
#define MAX_DISCOVERED 4096

typedef struct found {
    char name[SY_CONFIG_MAX_NAME_LEN + 1];
    char alias[SY_CONFIG_MAX_NAME_LEN + 1];
    char *path;
    const char *plugin;
} found;

typedef struct discovery {
    found *items;
    size_t n;
    const sy_config *file; /* names it holds win */
    const sy_plugin_registry *reg;
    sy_buf errors; /* lines of what was named but is no model */
} discovery;

static bool is_gguf_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) return false;
    char magic[4];
    bool ok = fread(magic, 1, 4, f) == 4 && memcmp(magic, "GGUF", 4) == 0;
    fclose(f);
    return ok;
}

static bool has_file(const char *dir, const char *name) {
    char *p = sy_path_join(dir, name);
    struct stat st;
    bool ok = stat(p, &st) == 0 && S_ISREG(st.st_mode);
    free(p);
    return ok;
}

static bool ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* A model name from a file or folder name: the config's name characters, others as '-'. */
static void make_name(const char *base, char *out, size_t size) {
    size_t n = 0;
    for (const char *p = base; *p && n + 1 < size && n < SY_CONFIG_MAX_NAME_LEN; p++) {
        char ch = *p;
        bool alnum = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
        if (n == 0 && !alnum) continue; /* a name starts with a letter or digit */
        out[n++] = alnum || strchr("._-:/@+", ch) ? ch : '-';
    }
    out[n] = '\0';
}

static bool name_taken(const discovery *d, const char *name) {
    if (d->file && sy_config_find_model(d->file, name) != NULL) return true;
    for (size_t i = 0; i < d->n; i++)
        if (strcmp(d->items[i].name, name) == 0 || strcmp(d->items[i].alias, name) == 0) return true;
    return false;
}

/* Paths go into config text: refuse what the INI reader would read otherwise. */
static bool ini_safe(const char *path) {
    for (const char *p = path; *p; p++)
        if (*p == '\n' || *p == '\r' || *p == ';' || *p == '#' || *p == '[' || *p == ']') return false;
    return path[0] != '\0' && path[0] != ' ' && path[strlen(path) - 1] != ' ';
}

typedef struct alias_sink {
    char name[SY_CONFIG_MAX_NAME_LEN + 1];
} alias_sink;

static int take_general_name(void *user, const char *key, const sy_metadata_value *v) {
    alias_sink *a = user;
    if (strcmp(key, "general.name") != 0 || v->type != SY_META_STRING || v->string == NULL) return 0;
    char raw[SY_CONFIG_MAX_NAME_LEN + 1];
    size_t n = v->len < sizeof raw - 1 ? v->len : sizeof raw - 1;
    memcpy(raw, v->string, n);
    raw[n] = '\0';
    for (size_t i = 0; i < n; i++)
        if (raw[i] == ' ') raw[i] = '-';
    make_name(raw, a->name, sizeof a->name);
    return 1; /* found: stop */
}

static void add(discovery *d, const char *base_name, const char *path, const char *plugin) {
    if (d->n >= MAX_DISCOVERED) return;
    char real[PATH_MAX];
    if (realpath(path, real) == NULL || !ini_safe(real)) {
        sy_log(SY_LOG_WARN, "serve: %s: skipped (its path cannot be written in a config)", path);
        return;
    }
    found f;
    memset(&f, 0, sizeof f);
    make_name(base_name, f.name, sizeof f.name);
    if (f.name[0] == '\0') snprintf(f.name, sizeof f.name, "model");
    if (d->file && sy_config_find_model(d->file, f.name) != NULL) {
        sy_log(SY_LOG_INFO, "serve: %s: the config's [model.%s] is used instead", path, f.name);
        return;
    }
    if (name_taken(d, f.name)) { /* two files of one name: number the later ones */
        char base[SY_CONFIG_MAX_NAME_LEN + 1];
        snprintf(base, sizeof base, "%.*s", SY_CONFIG_MAX_NAME_LEN - 8, f.name);
        for (int i = 2; i < 1000 && name_taken(d, f.name); i++)
            if (snprintf(f.name, sizeof f.name, "%s-%d", base, i) >= (int)sizeof f.name) break;
    }
    if (strcmp(plugin, GGUF_PLUGIN) == 0 && d->reg != NULL) {
        alias_sink a = {""};
        sy_metadata_sink sink = {sizeof sink, &a, take_general_name};
        char err[256];
        if (sy_loaded_model_describe(d->reg, plugin, real, &sink, err, sizeof err) == 0 && a.name[0] &&
            strcmp(a.name, f.name) != 0 && !name_taken(d, a.name))
            snprintf(f.alias, sizeof f.alias, "%s", a.name);
    }
    f.path = sy_strdup(real);
    f.plugin = plugin;
    d->items = sy_xrealloc(d->items, (d->n + 1) * sizeof *d->items);
    d->items[d->n++] = f;
}

static void note_error(discovery *d, const char *fmt, const char *path) {
    sy_buf_printf(&d->errors, fmt, path);
    sy_buf_puts(&d->errors, "\n");
}

/* The file name without its folder and (for GGUF) its extension. */
static void stem(const char *path, char *out, size_t size) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    snprintf(out, size, "%s", base);
    size_t n = strlen(out);
    while (n > 1 && out[n - 1] == '/') out[--n] = '\0';
    if (ends_with(out, ".gguf")) out[strlen(out) - 5] = '\0';
}

/* A folder holding GGUF files (llama-server's router layout): the first of them, multimodal projectors aside. */
static char *first_gguf_in(const char *dir) {
    struct dirent **list = NULL;
    int n = scandir(dir, &list, NULL, alphasort);
    char *pick = NULL;
    for (int i = 0; i < n; i++) {
        const char *nm = list[i]->d_name;
        if (pick == NULL && nm[0] != '.' && ends_with(nm, ".gguf") && strncmp(nm, "mmproj", 6) != 0) {
            char *p = sy_path_join(dir, nm);
            if (is_gguf_file(p)) pick = p;
            else free(p);
        }
        free(list[i]);
    }
    free(list);
    return pick;
}

static void add_path(discovery *d, const char *path, bool named) {
    struct stat st;
    char name[PATH_MAX];
    stem(path, name, sizeof name);
    if (stat(path, &st) != 0) {
        if (named) note_error(d, "%s: no such file or folder", path);
        return;
    }
    if (S_ISREG(st.st_mode)) {
        if (is_gguf_file(path)) add(d, name, path, GGUF_PLUGIN);
        else if (named) note_error(d, "%s: not a GGUF file (nor an Ollama blob)", path);
        return;
    }
    if (!S_ISDIR(st.st_mode)) return;
    if (has_file(path, "config.json")) {
        add(d, name, path, HF_PLUGIN);
        return;
    }
    char *gguf = first_gguf_in(path);
    if (gguf) {
        add(d, name, gguf, GGUF_PLUGIN);
        free(gguf);
    } else if (named) {
        note_error(d, "%s: a folder with neither a config.json (Hugging Face) nor a GGUF file", path);
    }
}

/* Ollama's models folder: manifests/HOST/NAMESPACE/MODEL/TAG, each naming its model layer in blobs/. */
static void add_ollama_manifest(discovery *d, const char *root, const char *file, const char *host,
                                const char *ns, const char *model, const char *tag) {
    char *text = NULL;
    FILE *f = fopen(file, "rb");
    if (f == NULL) return;
    sy_buf b;
    sy_buf_init(&b);
    bool ok = sy_buf_read(&b, f, MAX_MANIFEST_BYTES) && b.len <= MAX_MANIFEST_BYTES;
    fclose(f);
    text = ok ? b.data : NULL;
    cJSON *j = text ? cJSON_ParseWithLength(text, b.len) : NULL;
    sy_buf_free(&b);
    const cJSON *layers = cJSON_GetObjectItemCaseSensitive(j, "layers");
    const cJSON *layer;
    cJSON_ArrayForEach(layer, layers) {
        const cJSON *mt = cJSON_GetObjectItemCaseSensitive(layer, "mediaType");
        const cJSON *dg = cJSON_GetObjectItemCaseSensitive(layer, "digest");
        if (!cJSON_IsString(mt) || strcmp(mt->valuestring, "application/vnd.ollama.image.model") != 0 ||
            !cJSON_IsString(dg) || strncmp(dg->valuestring, "sha256:", 7) != 0)
            continue;
        const char *hex = dg->valuestring + 7;
        bool hex_ok = strlen(hex) == 64;
        for (const char *p = hex; *p && hex_ok; p++) hex_ok = (*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f');
        if (!hex_ok) break;
        char blob[PATH_MAX];
        snprintf(blob, sizeof blob, "%s/blobs/sha256-%s", root, hex);
        char name[SY_CONFIG_MAX_NAME_LEN * 2 + 8];
        bool library = strcmp(host, "registry.ollama.ai") == 0 && strcmp(ns, "library") == 0;
        int w = library ? snprintf(name, sizeof name, "%s:%s", model, tag)
                        : snprintf(name, sizeof name, "%s/%s:%s", ns, model, tag);
        if (w > 0 && w < (int)sizeof name && is_gguf_file(blob)) add(d, name, blob, GGUF_PLUGIN);
        break;
    }
    cJSON_Delete(j);
}

/* The entries of dir in name order, folders or files only, hidden ones skipped; free with free_list. */
static int list_dir(const char *dir, struct dirent ***out) { return scandir(dir, out, NULL, alphasort); }
static void free_list(struct dirent **list, int n) {
    for (int i = 0; i < n; i++) free(list[i]);
    free(list);
}

static void walk_ollama(discovery *d, const char *root) {
    char *manifests = sy_path_join(root, "manifests");
    struct dirent **hosts = NULL;
    int nh = list_dir(manifests, &hosts);
    for (int a = 0; a < nh; a++) {
        if (hosts[a]->d_name[0] == '.') continue;
        char *hdir = sy_path_join(manifests, hosts[a]->d_name);
        struct dirent **nss = NULL;
        int nn = list_dir(hdir, &nss);
        for (int b = 0; b < nn; b++) {
            if (nss[b]->d_name[0] == '.') continue;
            char *ndir = sy_path_join(hdir, nss[b]->d_name);
            struct dirent **models = NULL;
            int nm = list_dir(ndir, &models);
            for (int c = 0; c < nm; c++) {
                if (models[c]->d_name[0] == '.') continue;
                char *mdir = sy_path_join(ndir, models[c]->d_name);
                struct dirent **tags = NULL;
                int nt = list_dir(mdir, &tags);
                for (int t = 0; t < nt; t++) {
                    if (tags[t]->d_name[0] == '.') continue;
                    char *file = sy_path_join(mdir, tags[t]->d_name);
                    add_ollama_manifest(d, root, file, hosts[a]->d_name, nss[b]->d_name, models[c]->d_name,
                                        tags[t]->d_name);
                    free(file);
                }
                if (nt >= 0) free_list(tags, nt);
                free(mdir);
            }
            if (nm >= 0) free_list(models, nm);
            free(ndir);
        }
        if (nn >= 0) free_list(nss, nn);
        free(hdir);
    }
    if (nh >= 0) free_list(hosts, nh);
    free(manifests);
}

static void walk_models_dir(discovery *d, const char *dir) {
    char *m = sy_path_join(dir, "manifests"), *b = sy_path_join(dir, "blobs");
    struct stat st1, st2;
    bool ollama = stat(m, &st1) == 0 && S_ISDIR(st1.st_mode) && stat(b, &st2) == 0 && S_ISDIR(st2.st_mode);
    free(m);
    free(b);
    if (ollama) {
        walk_ollama(d, dir);
        return;
    }
    struct dirent **list = NULL;
    int n = list_dir(dir, &list);
    if (n < 0) {
        note_error(d, "--models-dir %s: cannot read the folder", dir);
        return;
    }
    for (int i = 0; i < n; i++) {
        const char *nm = list[i]->d_name;
        if (nm[0] == '.' || strncmp(nm, "mmproj", 6) == 0) continue;
        char *p = sy_path_join(dir, nm);
        struct stat st;
        if (stat(p, &st) == 0 && (S_ISDIR(st.st_mode) || ends_with(nm, ".gguf"))) add_path(d, p, false);
        free(p);
    }
    free_list(list, n);
}

static char *read_text(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) return NULL;
    sy_buf b;
    sy_buf_init(&b);
    bool ok = sy_buf_read(&b, f, SY_CONFIG_MAX_BYTES);
    fclose(f);
    if (!ok) {
        sy_buf_free(&b);
        return NULL;
    }
    *len = b.len;
    return b.data ? b.data : sy_strdup("");
}

sy_config *sy_serve_discover_config(const char *config_path, const sy_serve_sources *src,
                                    const sy_plugin_registry *reg) {
    sy_config *file = config_path ? sy_config_load_file(config_path) : NULL;
    if (file && !sy_config_ok(file)) return file;
    discovery d;
    memset(&d, 0, sizeof d);
    d.file = file;
    d.reg = reg;
    sy_buf_init(&d.errors);
    for (size_t i = 0; i < src->n_models; i++) add_path(&d, src->models[i], true);
    if (src->models_dir) walk_models_dir(&d, src->models_dir);

    if (d.errors.len > 0) { /* a path named on the command line is no model: nothing starts */
        for (char *line = d.errors.data; line && *line;) {
            char *nl = strchr(line, '\n');
            if (nl) *nl = '\0';
            sy_log(SY_LOG_ERROR, "serve: %s", line);
            line = nl ? nl + 1 : NULL;
        }
        for (size_t i = 0; i < d.n; i++) free(d.items[i].path);
        free(d.items);
        sy_buf_free(&d.errors);
        sy_config_free(file);
        return NULL;
    }
    sy_buf text;
    sy_buf_init(&text);
    size_t file_len = 0;
    char *file_text = config_path ? read_text(config_path, &file_len) : NULL;
    if (file_text) {
        sy_buf_append(&text, file_text, file_len);
        sy_buf_puts(&text, "\n");
    }
    free(file_text);
    for (size_t i = 0; i < d.n; i++) {
        sy_buf_printf(&text, "\n[model.%s]\nplugin = %s\npath = %s\n", d.items[i].name, d.items[i].plugin,
                      d.items[i].path);
        if (d.items[i].alias[0]) sy_buf_printf(&text, "aliases = %s\n", d.items[i].alias);
        sy_log(SY_LOG_INFO, "serve: model %s%s%s%s: %s", d.items[i].name, d.items[i].alias[0] ? " (alias " : "",
               d.items[i].alias, d.items[i].alias[0] ? ")" : "", d.items[i].path);
        free(d.items[i].path);
    }
    free(d.items);
    sy_buf_free(&d.errors);
    char cwd[PATH_MAX];
    char base[PATH_MAX];
    const char *base_dir = getcwd(cwd, sizeof cwd);
    if (config_path) {
        char *copy = sy_strdup(config_path);
        char *slash = strrchr(copy, '/');
        if (slash) *slash = '\0';
        if (realpath(slash ? copy : ".", base) != NULL) base_dir = base;
        free(copy);
    }
    sy_config *cfg = sy_config_load_string(text.data ? text.data : "", text.len,
                                           config_path ? config_path : "(serve's models)", base_dir);
    sy_buf_free(&text);
    sy_config_free(file);
    return cfg;
}
