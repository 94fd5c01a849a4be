#include "qwen_test_util.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

const char *const qt_fixtures[] = {"qwen2-tied-f32", "qwen2-untied-bf16", "qwen3-f32", "qwen3-tied-bf16",
                                   "llama-gqa-f32-sharded"};
const size_t qt_n_fixtures = sizeof qt_fixtures / sizeof qt_fixtures[0];

const sy_engine_api *qt_api;
const sy_plugin_entry *qt_entry;
int qt_cancel_requested;
static void *plugin_handle;

static void host_log(sy_log_level level, const char *plugin, const char *message) {
    if (level <= SY_LOG_WARN) fprintf(stderr, "[%s] %s\n", plugin, message);
}
static int host_is_cancelled(const sy_host_call *call) { return call != NULL && qt_cancel_requested; }

static const sy_host_api host_api = {
    .struct_size = sizeof(sy_host_api),
    .abi_major = SY_ABI_VERSION_MAJOR,
    .abi_minor = SY_ABI_VERSION_MINOR,
    .host_version = "qwen test",
    .log = host_log,
    .is_cancelled = host_is_cancelled,
};

int qt_plugin_open(void **state) {
    (void)state;
    const char *build = getenv("SY_BUILD_DIR");
    char so[1024];
    snprintf(so, sizeof so, "%s/plugins/qwen-cpu-mmap.so", build ? build : ".");
    plugin_handle = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    if (plugin_handle == NULL) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return -1;
    }
    qt_entry = dlsym(plugin_handle, SY_PLUGIN_ENTRY_SYMBOL);
    if (qt_entry == NULL || qt_entry->abi_major != SY_ABI_VERSION_MAJOR ||
        strcmp(qt_entry->name, "qwen-cpu-mmap") != 0 || qt_entry->init(&host_api) != SY_OK)
        return -1;
    qt_api = qt_entry->get_interface(SY_ENGINE_INTERFACE_ID);
    return qt_api == NULL ? -1 : 0;
}

int qt_plugin_close(void **state) {
    (void)state;
    qt_entry->deinit();
    dlclose(plugin_handle);
    return 0;
}

/* ---- fixtures ---- */

char *qt_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) buf[n] = '\0';
    if (len) *len = buf ? (size_t)n : 0;
    return buf;
}

static int32_t *int_array(const cJSON *a, size_t *n) {
    assert_true(cJSON_IsArray(a));
    *n = (size_t)cJSON_GetArraySize(a);
    int32_t *out = calloc(*n ? *n : 1, sizeof *out);
    size_t i = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, a) out[i++] = (int32_t)v->valuedouble;
    return out;
}

static void float_array(const cJSON *a, float *out, size_t n) {
    assert_true(cJSON_IsArray(a));
    assert_int_equal((size_t)cJSON_GetArraySize(a), n);
    size_t i = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, a) out[i++] = (float)v->valuedouble;
}

void qt_fixture_load(const char *name, qt_fixture *f) {
    memset(f, 0, sizeof *f);
    const char *src = getenv("SY_SOURCE_DIR");
    snprintf(f->name, sizeof f->name, "%s", name);
    snprintf(f->dir, sizeof f->dir, "%s/tests/fixtures/hf/%s", src ? src : ".", name);
    char path[1200];
    snprintf(path, sizeof path, "%s/expected.json", f->dir);
    size_t len;
    char *text = qt_read_file(path, &len);
    if (text == NULL) fail_msg("cannot read %s", path);
    cJSON *root = cJSON_ParseWithLength(text, len);
    free(text);
    assert_non_null(root);
    f->n_vocab = (uint32_t)cJSON_GetObjectItem(root, "vocab_size")->valuedouble;
    f->bf16 = strcmp(cJSON_GetObjectItem(root, "weights_dtype")->valuestring, "bfloat16") == 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, cJSON_GetObjectItem(root, "prompts")) {
        assert_true(f->n_prompts < QT_MAX_PROMPTS);
        qt_prompt *q = &f->prompts[f->n_prompts++];
        q->text = strdup(cJSON_GetObjectItem(p, "text")->valuestring);
        q->ids = int_array(cJSON_GetObjectItem(p, "ids"), &q->n_ids);
        q->last_logits = malloc(f->n_vocab * sizeof(float));
        float_array(cJSON_GetObjectItem(p, "last_logits"), q->last_logits, f->n_vocab);
        const cJSON *g = cJSON_GetObjectItem(p, "greedy");
        size_t n;
        int32_t *tokens = int_array(cJSON_GetObjectItem(g, "tokens"), &n);
        assert_int_equal(n, QT_GREEDY);
        memcpy(q->greedy, tokens, sizeof q->greedy);
        free(tokens);
        float_array(cJSON_GetObjectItem(g, "top1_margins"), q->margins, QT_GREEDY);
        const cJSON *all = cJSON_GetObjectItem(p, "all_logits");
        if (all != NULL) {
            assert_int_equal((size_t)cJSON_GetArraySize(all), q->n_ids);
            q->all_logits = malloc(q->n_ids * f->n_vocab * sizeof(float));
            q->all_top5 = malloc(q->n_ids * sizeof *q->all_top5);
            size_t i = 0;
            const cJSON *row;
            cJSON_ArrayForEach(row, all) float_array(row, q->all_logits + i++ * f->n_vocab, f->n_vocab);
            i = 0;
            cJSON_ArrayForEach(row, cJSON_GetObjectItem(p, "all_top5")) {
                size_t k;
                int32_t *top = int_array(row, &k);
                assert_int_equal(k, 5);
                memcpy(q->all_top5[i++], top, sizeof q->all_top5[0]);
                free(top);
            }
        }
    }
    cJSON_Delete(root);
    assert_true(f->n_prompts >= 1);
}

void qt_fixture_free(qt_fixture *f) {
    for (size_t i = 0; i < f->n_prompts; i++) {
        free(f->prompts[i].text);
        free(f->prompts[i].ids);
        free(f->prompts[i].last_logits);
        free(f->prompts[i].all_logits);
        free(f->prompts[i].all_top5);
    }
    memset(f, 0, sizeof *f);
}

const qt_prompt *qt_all_logits_prompt(const qt_fixture *f) {
    for (size_t i = 0; i < f->n_prompts; i++)
        if (f->prompts[i].all_logits) return &f->prompts[i];
    fail_msg("%s: no prompt with all_logits", f->name);
    return NULL;
}

/* ---- the engine ---- */

static sy_status load_va(const char *dir, sy_model **out, va_list ap) {
    sy_option opts[16];
    size_t n = 0;
    for (const char *k; (k = va_arg(ap, const char *)) != NULL;) {
        assert_true(n < 16);
        opts[n].key = k;
        opts[n].value = va_arg(ap, const char *);
        n++;
    }
    *out = NULL;
    return qt_api->load(dir, opts, n, out);
}

sy_model *qt_load(const char *dir, ...) {
    va_list ap;
    va_start(ap, dir);
    sy_model *m;
    sy_status st = load_va(dir, &m, ap);
    va_end(ap);
    if (st != SY_OK) fail_msg("load %s: %s", dir, qt_api->error_message());
    assert_non_null(m);
    return m;
}

sy_status qt_try_load(const char *dir, sy_model **out, char **message, ...) {
    va_list ap;
    va_start(ap, message);
    sy_status st = load_va(dir, out, ap);
    va_end(ap);
    if (message) *message = strdup(st == SY_OK ? "" : qt_api->error_message());
    return st;
}

sy_status qt_decode(sy_model *m, sy_seq *s, const int32_t *tokens, uint32_t n, uint32_t n_logits, float *logits) {
    sy_decode_item item = {sizeof item, s, tokens, n, n_logits, logits, NULL};
    sy_decode_batch batch = {sizeof batch, 1, sizeof item, &item, NULL, NULL};
    return qt_api->decode(m, &batch);
}

int32_t qt_argmax(const float *logits, uint32_t n) {
    int32_t best = 0;
    for (uint32_t i = 1; i < n; i++)
        if (logits[i] > logits[best]) best = (int32_t)i;
    return best;
}

void qt_greedy(sy_model *m, const int32_t *prompt, size_t n_prompt, size_t n_new, int32_t *out, float *first_logits) {
    sy_model_info info = {.struct_size = sizeof info};
    assert_int_equal(qt_api->model_info(m, &info), SY_OK);
    float *logits = malloc(info.n_vocab * sizeof *logits);
    sy_seq *s;
    assert_int_equal(qt_api->seq_create(m, &s), SY_OK);
    if (qt_decode(m, s, prompt, (uint32_t)n_prompt, 1, logits) != SY_OK)
        fail_msg("prefill: %s", qt_api->error_message());
    if (first_logits) memcpy(first_logits, logits, info.n_vocab * sizeof *logits);
    for (size_t i = 0; i < n_new; i++) {
        out[i] = qt_argmax(logits, info.n_vocab);
        if (i + 1 < n_new && qt_decode(m, s, &out[i], 1, 1, logits) != SY_OK)
            fail_msg("decode: %s", qt_api->error_message());
    }
    assert_int_equal(qt_api->seq_length(m, s), n_prompt + (n_new ? n_new - 1 : 0));
    qt_api->seq_free(m, s);
    free(logits);
}

float qt_max_abs_diff(const float *a, const float *b, size_t n) {
    float worst = 0.0f;
    for (size_t i = 0; i < n; i++) {
        float d = fabsf(a[i] - b[i]);
        if (!(d <= worst)) worst = d; /* NaN counts as worst */
    }
    return worst;
}

float qt_range(const float *ref, size_t n) {
    float lo = ref[0], hi = ref[0];
    for (size_t i = 1; i < n; i++) {
        if (ref[i] < lo) lo = ref[i];
        if (ref[i] > hi) hi = ref[i];
    }
    return hi - lo;
}

/* ---- files ---- */

char *qt_temp_dir(void) {
    const char *tmp = getenv("TMPDIR");
    char *path = malloc(1024);
    snprintf(path, 1024, "%s/sy-qwen-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (mkdtemp(path) == NULL) fail_msg("mkdtemp %s: %s", path, strerror(errno));
    return path;
}

void qt_write_file(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    if (f == NULL) fail_msg("cannot write %s", path);
    assert_int_equal(fwrite(data, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

void qt_copy_dir(const char *src, const char *dst) {
    DIR *d = opendir(src);
    if (d == NULL) fail_msg("cannot open %s", src);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char from[2048], to[2048];
        snprintf(from, sizeof from, "%s/%s", src, e->d_name);
        snprintf(to, sizeof to, "%s/%s", dst, e->d_name);
        struct stat st;
        if (stat(from, &st) != 0 || !S_ISREG(st.st_mode)) continue;
        size_t len;
        char *data = qt_read_file(from, &len);
        assert_non_null(data);
        qt_write_file(to, data, len);
        free(data);
    }
    closedir(d);
}

static size_t walk(const char *dir, bool remove_all) {
    DIR *d = opendir(dir);
    if (d == NULL) return 0;
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat st;
        if (lstat(path, &st) != 0) continue;
        n++;
        if (S_ISDIR(st.st_mode)) n += walk(path, remove_all);
        if (remove_all) S_ISDIR(st.st_mode) ? rmdir(path) : unlink(path);
    }
    closedir(d);
    return n;
}

void qt_remove_tree(const char *dir) {
    walk(dir, true);
    rmdir(dir);
}

size_t qt_count_entries(const char *dir) { return walk(dir, false); }

void qt_replace_text(const char *path, const char *from, const char *to) {
    size_t len;
    char *text = qt_read_file(path, &len);
    char *at = text ? strstr(text, from) : NULL;
    if (at == NULL) fail_msg("%s has no '%s'", path, from);
    size_t head = (size_t)(at - text), out_len = len - strlen(from) + strlen(to);
    char *out = malloc(out_len + 1);
    memcpy(out, text, head);
    memcpy(out + head, to, strlen(to));
    strcpy(out + head + strlen(to), at + strlen(from));
    qt_write_file(path, out, out_len);
    free(out);
    free(text);
}

void qt_expect_refusal(const char *dir, sy_status want, const char *needle, const char *k, const char *v) {
    sy_model *m = NULL;
    char *message;
    sy_status st = qt_try_load(dir, &m, &message, k, v, NULL);
    if (st != want || strstr(message, needle) == NULL)
        fail_msg("load %s: status %d, message '%s'; wanted %d and '%s'", dir, st, message, want, needle);
    assert_null(m);
    free(message);
}
