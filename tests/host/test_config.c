/* Tests of the configuration reader (host/config.c): good configs, every error class and its message,
 * warnings, aliases and groups, units, paths, and hostile input. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "config/config.h"
#include "config/request_params.h"

/* What the plugins declare, as the manager's schema callback would hand it over: the CPU engines' keys (with their
 * ranges) plus one of each other type, for every plugin but "legacy", which stands for a plugin of ABI 1.1 that
 * declares nothing. */
static const sy_option_spec test_specs[] = {
    {sizeof(sy_option_spec), "threads", SY_OPTION_UINT, "", "threads", 1, 1024, NULL},
    {sizeof(sy_option_spec), "ctx_size", SY_OPTION_UINT, "0", "context", 0, 1 << 24, NULL},
    {sizeof(sy_option_spec), "kv_cache_dir", SY_OPTION_PATH_LIST, "", "folders", 0, 0, NULL},
    {sizeof(sy_option_spec), "kv_max_tokens", SY_OPTION_UINT, "", "tokens", 1, 1 << 26, NULL},
    {sizeof(sy_option_spec), "kv_buffer_mb", SY_OPTION_UINT, "32", "MiB", 0, 1 << 20, NULL},
    {sizeof(sy_option_spec), "keep_kv_cache", SY_OPTION_BOOL, "false", "keep", 0, 0, NULL},
    {sizeof(sy_option_spec), "backend", SY_OPTION_STRING, "core", "backend", 0, 0, NULL},
    {sizeof(sy_option_spec), "rope_scale", SY_OPTION_STRING, "", "scaling", 0, 0, NULL},
    {sizeof(sy_option_spec), "temperature", SY_OPTION_NUMBER, "1", "a number", -1, 2.5, NULL},
    {sizeof(sy_option_spec), "synthetic", SY_OPTION_PATH, "", "a file", 0, 0, NULL},
    {sizeof(sy_option_spec), "parallel", SY_OPTION_UINT, "", "named like a model key", 1, 64, NULL},
};

static unsigned schema_calls;

static void test_schema(void *user, const sy_config_model *m, sy_config_option_schema *out) {
    (void)user;
    schema_calls++;
    if (strcmp(m->plugin, "legacy") == 0) {
        snprintf(out->unchecked, sizeof out->unchecked, "plugin legacy (ABI 1.1) declares no options");
        return;
    }
    snprintf(out->asked, sizeof out->asked, "plugin %s", m->plugin);
    for (size_t i = 0; i < sizeof test_specs / sizeof *test_specs; i++) out->specs[out->n_specs++] = &test_specs[i];
}

/* Parse `text` as "cfg.ini" in the folder /base, engine keys checked against test_schema. */
static sy_config *parse(const char *text) {
    sy_config *cfg = sy_config_load_string(text, strlen(text), "cfg.ini", "/base");
    sy_config_check_options(cfg, test_schema, NULL);
    return cfg;
}

static size_t count_matching(char **list, size_t n, const char *needle) {
    size_t hits = 0;
    for (size_t i = 0; i < n; i++)
        if (strstr(list[i], needle) != NULL) hits++;
    return hits;
}

static void dump(const sy_config *cfg) { sy_config_print_diagnostics(cfg, stderr); }

/* The config has exactly one error, and it is `expected` word for word. */
static void assert_single_error(const sy_config *cfg, const char *expected) {
    if (cfg->n_errors != 1 || strcmp(cfg->errors[0], expected) != 0) {
        fprintf(stderr, "expected the single error: %s\n", expected);
        dump(cfg);
        fail();
    }
}

static void assert_error_containing(const sy_config *cfg, const char *needle) {
    if (count_matching(cfg->errors, cfg->n_errors, needle) == 0) {
        fprintf(stderr, "expected an error containing: %s\n", needle);
        dump(cfg);
        fail();
    }
}

static void assert_warning_containing(const sy_config *cfg, const char *needle) {
    if (count_matching(cfg->warnings, cfg->n_warnings, needle) == 0) {
        fprintf(stderr, "expected a warning containing: %s\n", needle);
        dump(cfg);
        fail();
    }
}

static void assert_clean(const sy_config *cfg) {
    if (!sy_config_ok(cfg) || cfg->n_warnings != 0) {
        dump(cfg);
        fail();
    }
}

#define MODEL_HEAD(name) "[model." name "]\nplugin = test-engine\npath = m.txt\n"

/* ------------------------------------------------------------------------------------------------------------ */

static void test_full_config(void **state) {
    (void)state;
    setenv("HOME", "/home/u", 1);
    sy_config *cfg = parse("; a comment\n"
                           "# another\n"
                           "[host]\n"
                           "listen = 0.0.0.0:9000\n"
                           "plugin_dir = plugins\n"
                           "resume_path = ~/resume\n"
                           "resume = yes\n"
                           "resume_no_host_cache = on\n"
                           "slot_save_path = /var/slots\n"
                           "max_memory = 8G\n"
                           "api_keys = key-one, key-two\n"
                           "log_level = debug\n"
                           "max_connections = 16\n"
                           "max_request_body = 1M\n"
                           "resume_max_bytes = 512M\n"
                           "load_timeout = 2m\n"
                           "\n"
                           "[model.qwen-0.5b]\n"
                           "plugin = gguf-quant\n"
                           "path = models/qwen.gguf   ; inline comment\n"
                           "aliases = gpt-4o-mini, qwen\n"
                           "group = cpu\n"
                           "ttl = 300\n"
                           "parallel = 4\n"
                           "draft = model:tiny-alias\n"
                           "draft_max = 8\n"
                           "draft_min = 2\n"
                           "chat_template = chatml\n"
                           "chat_template_file = t.jinja\n"
                           "preload = true\n"
                           "persist_on_unload = false\n"
                           "max_queue = 10\n"
                           "queue_timeout = 30s\n"
                           "prefix_cache_tokens = 4096\n"
                           "threads = 8\n"
                           "ctx_size = 4096\n"
                           "kv_cache_dir = ~/kv, /fast/kv\n"
                           "kv_max_tokens = 100000\n"
                           "kv_buffer_mb = 256\n"
                           "keep_kv_cache = yes\n"
                           "backend = avx2\n"
                           "engine.rope_scale = 2.0 linear\n"
                           "\n"
                           "[model.tiny]\n"
                           "plugin = gguf-quant\n"
                           "path = /models/tiny.gguf\n"
                           "aliases = tiny-alias\n"
                           "group = cpu\n"
                           "\n"
                           "[group.cpu]\n"
                           "swap = true\n"
                           "exclusive = false\n"
                           "persistent = true\n");
    assert_clean(cfg);

    const sy_config_host *h = &cfg->host;
    assert_string_equal(h->listen, "0.0.0.0:9000");
    assert_string_equal(h->plugin_dir, "/base/plugins");
    assert_string_equal(h->resume_path, "/home/u/resume");
    assert_true(h->resume);
    assert_true(h->resume_no_host_cache);
    assert_string_equal(h->slot_save_path, "/var/slots");
    assert_int_equal(h->max_memory, (uint64_t)8 << 30);
    assert_int_equal(h->api_keys.count, 2);
    assert_string_equal(h->api_keys.items[0], "key-one");
    assert_string_equal(h->api_keys.items[1], "key-two");
    assert_true(h->log_level_set);
    assert_int_equal(h->log_level, SY_LOG_DEBUG);
    assert_int_equal(h->max_connections, 16);
    assert_int_equal(h->http_threads, 4); /* not given: the deprecated key's default */
    assert_int_equal(h->max_request_body, 1 << 20);
    assert_int_equal(h->resume_max_bytes, (uint64_t)512 << 20);
    assert_int_equal(h->load_timeout_s, 120);
    assert_int_equal(h->line, 3);

    assert_int_equal(cfg->n_models, 2);
    const sy_config_model *m = &cfg->models[0];
    assert_string_equal(m->name, "qwen-0.5b");
    assert_int_equal(m->line, 18);
    assert_string_equal(m->plugin, "gguf-quant");
    assert_string_equal(m->path, "/base/models/qwen.gguf");
    assert_int_equal(m->aliases.count, 2);
    assert_string_equal(m->aliases.items[0], "gpt-4o-mini");
    assert_string_equal(m->aliases.items[1], "qwen");
    assert_int_equal(m->aliases.lines[1], 21);
    assert_string_equal(m->group, "cpu");
    assert_int_equal(m->ttl_s, 300);
    assert_int_equal(m->parallel, 4);
    assert_int_equal(m->draft, SY_CONFIG_DRAFT_MODEL);
    assert_string_equal(m->draft_model, "tiny"); /* the alias resolved to the canonical name */
    assert_int_equal(m->draft_max, 8);
    assert_int_equal(m->draft_min, 2);
    assert_string_equal(m->chat_template, "chatml");
    assert_string_equal(m->chat_template_file, "/base/t.jinja");
    assert_true(m->preload);
    assert_false(m->persist_on_unload);
    assert_int_equal(m->max_queue, 10);
    assert_int_equal(m->queue_timeout_s, 30);
    assert_int_equal(m->prefix_cache_tokens, 4096);

    assert_int_equal(m->n_options, 8);
    assert_string_equal(sy_config_model_option(m, "threads"), "8");
    assert_string_equal(sy_config_model_option(m, "ctx_size"), "4096");
    assert_string_equal(sy_config_model_option(m, "kv_cache_dir"), "/home/u/kv,/fast/kv");
    assert_string_equal(sy_config_model_option(m, "kv_max_tokens"), "100000");
    assert_string_equal(sy_config_model_option(m, "kv_buffer_mb"), "256");
    assert_string_equal(sy_config_model_option(m, "keep_kv_cache"), "1");
    assert_string_equal(sy_config_model_option(m, "backend"), "avx2");
    assert_string_equal(sy_config_model_option(m, "rope_scale"), "2.0 linear");
    assert_null(sy_config_model_option(m, "engine.rope_scale"));
    assert_null(sy_config_model_option(m, "missing"));
    /* Options come in config order. */
    assert_string_equal(m->options[0].key, "threads");
    assert_string_equal(m->options[7].key, "rope_scale");

    assert_int_equal(cfg->n_groups, 1);
    const sy_config_group *g = sy_config_find_group(cfg, "cpu");
    assert_non_null(g);
    assert_true(g->swap);
    assert_false(g->exclusive);
    assert_true(g->persistent);
    assert_false(g->implicit);
    assert_int_equal(g->members.count, 2);
    assert_string_equal(g->members.items[0], "qwen-0.5b");
    assert_string_equal(g->members.items[1], "tiny");
    sy_config_free(cfg);
}

static void test_defaults(void **state) {
    (void)state;
    setenv("HOME", "/home/u", 1);
    sy_config *cfg = parse(MODEL_HEAD("a"));
    assert_clean(cfg);
    assert_string_equal(cfg->host.listen, "127.0.0.1:8080");
    assert_null(cfg->host.plugin_dir);
    assert_string_equal(cfg->host.resume_path, "/home/u/.local/state/switchyard/resume");
    assert_false(cfg->host.resume);
    assert_false(cfg->host.log_level_set);
    assert_int_equal(cfg->host.max_memory, 0);
    assert_int_equal(cfg->host.max_device_memory, 0);
    assert_int_equal(cfg->host.api_keys.count, 0);
    assert_int_equal(cfg->host.http_threads, 4);
    assert_int_equal(cfg->host.max_connections, 256);
    assert_int_equal(cfg->host.max_request_body, 16 << 20);
    assert_int_equal(cfg->host.resume_max_bytes, (uint64_t)4 << 30);
    assert_int_equal(cfg->host.load_timeout_s, 600);
    assert_int_equal(cfg->host.line, 0);

    const sy_config_model *m = &cfg->models[0];
    assert_string_equal(m->path, "/base/m.txt");
    assert_int_equal(m->aliases.count, 0);
    assert_int_equal(m->ttl_s, 0);
    assert_int_equal(m->parallel, 1);
    assert_int_equal(m->draft, SY_CONFIG_DRAFT_NONE);
    assert_null(m->draft_model);
    assert_int_equal(m->draft_max, 16);
    assert_int_equal(m->draft_min, 0);
    assert_null(m->chat_template);
    assert_false(m->preload);
    assert_true(m->persist_on_unload);
    assert_int_equal(m->max_queue, 64);
    assert_int_equal(m->queue_timeout_s, 600);
    assert_int_equal(m->prefix_cache_tokens, 8192);
    assert_int_equal(m->n_options, 0);

    /* A model without a group lands in the implicit default group, which swaps and is exclusive. */
    assert_string_equal(m->group, SY_CONFIG_DEFAULT_GROUP);
    const sy_config_group *g = sy_config_find_group(cfg, SY_CONFIG_DEFAULT_GROUP);
    assert_non_null(g);
    assert_true(g->implicit);
    assert_true(g->swap);
    assert_true(g->exclusive);
    assert_false(g->persistent);
    assert_int_equal(g->members.count, 1);
    sy_config_free(cfg);

    /* Without HOME there is no default resume path, and that is not an error. */
    unsetenv("HOME");
    cfg = parse("");
    assert_clean(cfg);
    assert_null(cfg->host.resume_path);
    assert_int_equal(cfg->n_models, 0);
    sy_config_free(cfg);
    setenv("HOME", "/home/u", 1);
}

static void test_units(void **state) {
    (void)state;
    uint64_t v = 0;
    assert_int_equal(sy_config_parse_size("512", &v), 0);
    assert_int_equal(v, 512);
    assert_int_equal(sy_config_parse_size("512M", &v), 0);
    assert_int_equal(v, (uint64_t)512 << 20);
    assert_int_equal(sy_config_parse_size("8G", &v), 0);
    assert_int_equal(v, (uint64_t)8 << 30);
    assert_int_equal(sy_config_parse_size("8g", &v), 0);
    assert_int_equal(v, (uint64_t)8 << 30);
    assert_int_equal(sy_config_parse_size("8GiB", &v), 0);
    assert_int_equal(v, (uint64_t)8 << 30);
    assert_int_equal(sy_config_parse_size("8GB", &v), 0);
    assert_int_equal(v, (uint64_t)8 << 30);
    assert_int_equal(sy_config_parse_size("64k", &v), 0);
    assert_int_equal(v, 65536);
    assert_int_equal(sy_config_parse_size("2T", &v), 0);
    assert_int_equal(v, (uint64_t)2 << 40);
    assert_int_equal(sy_config_parse_size("100B", &v), 0);
    assert_int_equal(v, 100);
    v = 7;
    const char *bad_sizes[] = {"", "G", "1.5G", "-1", "+1", " 8G", "8G ", "8X", "8GiBB", "8iB", "0x10",
                               "16777216T", "99999999999999999999", "18446744073709551615K"};
    for (size_t i = 0; i < sizeof bad_sizes / sizeof *bad_sizes; i++) {
        if (sy_config_parse_size(bad_sizes[i], &v) == 0) fail_msg("size '%s' was accepted", bad_sizes[i]);
    }
    assert_int_equal(v, 7); /* left alone on failure */
    assert_int_equal(sy_config_parse_size("18446744073709551615", &v), 0);
    assert_true(v == UINT64_MAX);

    assert_int_equal(sy_config_parse_seconds("300", &v), 0);
    assert_int_equal(v, 300);
    assert_int_equal(sy_config_parse_seconds("45s", &v), 0);
    assert_int_equal(v, 45);
    assert_int_equal(sy_config_parse_seconds("5m", &v), 0);
    assert_int_equal(v, 300);
    assert_int_equal(sy_config_parse_seconds("2h", &v), 0);
    assert_int_equal(v, 7200);
    assert_int_equal(sy_config_parse_seconds("1d", &v), 0);
    assert_int_equal(v, 86400);
    const char *bad_seconds[] = {"", "abc", "5 m", "5M", "1.5h", "-5", "5ms", "h", "999999999999999999d"};
    for (size_t i = 0; i < sizeof bad_seconds / sizeof *bad_seconds; i++) {
        if (sy_config_parse_seconds(bad_seconds[i], &v) == 0) fail_msg("duration '%s' was accepted", bad_seconds[i]);
    }

    bool b = false;
    const char *yes[] = {"true", "TRUE", "Yes", "on", "1"};
    const char *no[] = {"false", "No", "OFF", "0"};
    for (size_t i = 0; i < 5; i++) {
        b = false;
        assert_int_equal(sy_config_parse_bool(yes[i], &b), 0);
        assert_true(b);
    }
    for (size_t i = 0; i < 4; i++) {
        b = true;
        assert_int_equal(sy_config_parse_bool(no[i], &b), 0);
        assert_false(b);
    }
    assert_int_equal(sy_config_parse_bool("2", &b), -1);
    assert_int_equal(sy_config_parse_bool("truee", &b), -1);
    assert_int_equal(sy_config_parse_bool("", &b), -1);

    /* The units through the config, with their bounds. */
    sy_config *cfg = parse("[host]\nmax_memory = 1P\n");
    assert_single_error(cfg, "cfg.ini:2: [host] max_memory: '1P' is not a size (a whole number with an optional "
                             "K, M, G or T suffix)");
    sy_config_free(cfg);
    cfg = parse("[host]\nmax_request_body = 100\n");
    assert_single_error(cfg, "cfg.ini:2: [host] max_request_body: '100' is out of range (1K..1G bytes)");
    sy_config_free(cfg);
    cfg = parse("[host]\nmax_device_memory = 80G\n");
    assert_true(sy_config_ok(cfg));
    assert_int_equal(cfg->host.max_device_memory, (uint64_t)80 << 30);
    assert_int_equal(cfg->host.max_memory, 0); /* a budget of its own */
    sy_config_free(cfg);
    cfg = parse("[host]\nmax_device_memory = 2048T\n");
    assert_single_error(cfg, "cfg.ini:2: [host] max_device_memory: '2048T' is out of range (0..1024T bytes)");
    sy_config_free(cfg);
    cfg = parse("[host]\nmax_memory = 2048T\n");
    assert_single_error(cfg, "cfg.ini:2: [host] max_memory: '2048T' is out of range (0..1024T bytes)");
    sy_config_free(cfg);
    cfg = parse("[host]\nresume_max_bytes = 64K\n");
    assert_single_error(cfg, "cfg.ini:2: [host] resume_max_bytes: '64K' is out of range (1M..1024T bytes)");
    sy_config_free(cfg);
    cfg = parse("[host]\nmax_connections = 0\n");
    assert_single_error(cfg, "cfg.ini:2: [host] max_connections: '0' is out of range (1..65536)");
    sy_config_free(cfg);
}

/* The message format of the brief, word for word. */
static void test_error_message_format(void **state) {
    (void)state;
    sy_config *cfg = parse("[model.qwen]\nplugin = gguf-quant\npath = q.gguf\nttl = abc\n");
    assert_false(sy_config_ok(cfg));
    assert_single_error(cfg, "cfg.ini:4: [model.qwen] ttl: 'abc' is not a number of seconds");
    sy_config_free(cfg);
}

static void test_bad_values(void **state) {
    (void)state;
    static const struct {
        const char *line;
        const char *error;
    } cases[] = {
        {"parallel = 0", "cfg.ini:4: [model.a] parallel: '0' is out of range (1..256)"},
        {"parallel = 257", "cfg.ini:4: [model.a] parallel: '257' is out of range (1..256)"},
        {"parallel = 99999999999999999999999999", "cfg.ini:4: [model.a] parallel: '99999999999999999999999999' is not a whole number"},
        {"parallel = -1", "cfg.ini:4: [model.a] parallel: '-1' is not a whole number"},
        {"parallel = 4 slots", "cfg.ini:4: [model.a] parallel: '4 slots' is not a whole number"},
        {"ttl = 2y", "cfg.ini:4: [model.a] ttl: '2y' is not a number of seconds"},
        {"ttl = 400d", "cfg.ini:4: [model.a] ttl: '400d' is out of range (0..31536000 seconds)"},
        {"preload = maybe", "cfg.ini:4: [model.a] preload: 'maybe' is not true or false"},
        {"draft = eagle", "cfg.ini:4: [model.a] draft: 'eagle' is not a drafter (none, ngram or model:NAME)"},
        {"draft = model:", "cfg.ini:4: [model.a] draft: 'model:' is not a drafter (none, ngram or model:NAME)"},
        {"draft_max = 0", "cfg.ini:4: [model.a] draft_max: '0' is out of range (1..256)"},
        {"threads = 0", "cfg.ini:4: [model.a] threads: '0' is out of range (1..1024)"},
        {"ctx_size = 99999999", "cfg.ini:4: [model.a] ctx_size: '99999999' is out of range (0..16777216)"},
        {"keep_kv_cache = 2", "cfg.ini:4: [model.a] keep_kv_cache: '2' is not true or false"},
        {"kv_max_tokens = 0", "cfg.ini:4: [model.a] kv_max_tokens: '0' is out of range (1..67108864)"},
        {"temperature = 3", "cfg.ini:4: [model.a] temperature: '3' is out of range (-1..2.5)"},
        {"temperature = 1.5x", "cfg.ini:4: [model.a] temperature: '1.5x' is not a number"},
        {"temperature = nan", "cfg.ini:4: [model.a] temperature: 'nan' is not a number"},
        {"synthetic = ~bob/c.json", "cfg.ini:4: [model.a] synthetic: '~bob/c.json': '~user' paths are not supported; write the full path"},
        {"kv_cache_dir = ,", "cfg.ini:4: [model.a] kv_cache_dir: the list of paths is empty"},
        {"thread = 4", "cfg.ini:4: [model.a] thread: not a model key, nor an option of plugin test-engine (its options: threads, ctx_size, kv_cache_dir, kv_max_tokens, kv_buffer_mb, keep_kv_cache, backend, rope_scale, temperature, synthetic, parallel)"},
        {"aliases = ok, not ok", "cfg.ini:4: [model.a] aliases: 'not ok' is not a name (letters, digits and . _ - : / @ +, starting with a letter or digit, at most 128)"},
        {"aliases = -dash", "cfg.ini:4: [model.a] aliases: '-dash' is not a name (letters, digits and . _ - : / @ +, starting with a letter or digit, at most 128)"},
        {"group = a b", "cfg.ini:4: [model.a] group: 'a b' is not a name (letters, digits and . _ - : / @ +, starting with a letter or digit, at most 128)"},
        {"chat_template_file = ~bob/t", "cfg.ini:4: [model.a] chat_template_file: '~bob/t': '~user' paths are not supported; write the full path"},
        {"prefix_cache_tokens = 16777217", "cfg.ini:4: [model.a] prefix_cache_tokens: '16777217' is out of range (0..16777216)"},
        {"prefix_cache_tokens = lots", "cfg.ini:4: [model.a] prefix_cache_tokens: 'lots' is not a whole number"},
        {"engine.bad key = 1", "cfg.ini:4: [model.a] engine.bad key: 'bad key' is not an option name (1 to 64 letters, digits, '.', '_' or '-')"},
        {"bad key = 1", "cfg.ini:4: [model.a] bad key: 'bad key' is not an option name (1 to 64 letters, digits, '.', '_' or '-')"},
        {"engine.threads = x", "cfg.ini:4: [model.a] engine.threads: 'x' is not a whole number"},
        {"= 5", "cfg.ini:4: [model.a]: a key name is missing before '='"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char text[512];
        snprintf(text, sizeof text, MODEL_HEAD("a") "%s\n", cases[i].line);
        sy_config *cfg = parse(text);
        assert_single_error(cfg, cases[i].error);
        sy_config_free(cfg);
    }
}

static void test_listen(void **state) {
    (void)state;
    const char *good[] = {"127.0.0.1:8080", "localhost:1", "[::1]:8080", "[::]:65535", "my-host.lan:443"};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        char text[128];
        snprintf(text, sizeof text, "[host]\nlisten = %s\n", good[i]);
        sy_config *cfg = parse(text);
        assert_clean(cfg);
        assert_string_equal(cfg->host.listen, good[i]);
        sy_config_free(cfg);
    }
    static const struct {
        const char *value, *why;
    } bad[] = {
        {"8080", "is not HOST:PORT"},
        {"host:0", "has no port in 1..65535"},
        {"host:65536", "has no port in 1..65535"},
        {"host:http", "has no port in 1..65535"},
        {":8080", "has no host"},
        {"::1:8080", "has an IPv6 address without brackets"},
        {"[::1:8080", "has an unclosed '['"},
        {"[zz]:80", "has an invalid IPv6 address"},
        {"a/b:80", "has an invalid host name"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char text[128], expected[256];
        snprintf(text, sizeof text, "[host]\nlisten = %s\n", bad[i].value);
        snprintf(expected, sizeof expected, "cfg.ini:2: [host] listen: '%s' %s", bad[i].value, bad[i].why);
        sy_config *cfg = parse(text);
        assert_int_equal(cfg->n_errors, 1);
        if (strncmp(cfg->errors[0], expected, strlen(expected)) != 0) fail_msg("got: %s", cfg->errors[0]);
        assert_string_equal(cfg->host.listen, "127.0.0.1:8080"); /* the default stays */
        sy_config_free(cfg);
    }
}

/* [host] drain_timeout: the stop's drain (docs/deploy.md); 0, the default, cuts at once. */
static void test_drain_timeout(void **state) {
    (void)state;
    sy_config *cfg = parse("[host]\ndrain_timeout = 45s\n");
    assert_clean(cfg);
    assert_int_equal(cfg->host.drain_timeout_s, 45);
    sy_config_free(cfg);
    cfg = parse("[host]\ndrain_timeout = 1h\n");
    assert_clean(cfg);
    assert_int_equal(cfg->host.drain_timeout_s, 3600);
    sy_config_free(cfg);
    cfg = parse("[host]\nlisten = 127.0.0.1:1\n");
    assert_int_equal(cfg->host.drain_timeout_s, 0);
    sy_config_free(cfg);
    cfg = parse("[host]\ndrain_timeout = 2h\n");
    assert_single_error(cfg, "cfg.ini:2: [host] drain_timeout: '2h' is out of range (0..3600 seconds)");
    sy_config_free(cfg);
    cfg = parse("[host]\ndrain_timeout = soon\n");
    assert_single_error(cfg, "cfg.ini:2: [host] drain_timeout: 'soon' is not a number of seconds");
    sy_config_free(cfg);
}

static void test_log_level(void **state) {
    (void)state;
    sy_config *cfg = parse("[host]\nlog_level = loud\n");
    assert_single_error(cfg, "cfg.ini:2: [host] log_level: 'loud' is not a log level (error, warn, info or debug)");
    assert_false(cfg->host.log_level_set);
    sy_config_free(cfg);
}

static void test_missing_required_keys(void **state) {
    (void)state;
    sy_config *cfg = parse("[host]\n\n[model.a]\npath = x\n\n[model.b]\nplugin = p\n\n[model.c]\n");
    assert_int_equal(cfg->n_errors, 4);
    assert_string_equal(cfg->errors[0], "cfg.ini:3: [model.a]: missing required key 'plugin' (or 'cmd' for a process model)");
    assert_string_equal(cfg->errors[1], "cfg.ini:6: [model.b]: missing required key 'path'");
    /* An empty section is still seen (inih does not report it; the reader does). */
    assert_string_equal(cfg->errors[2], "cfg.ini:9: [model.c]: missing required key 'plugin' (or 'cmd' for a process model)");
    assert_string_equal(cfg->errors[3], "cfg.ini:9: [model.c]: missing required key 'path'");
    sy_config_free(cfg);

    /* A required key with a bad value is reported once, for its value. */
    cfg = parse("[model.a]\nplugin = bad plugin\npath = x\n");
    assert_int_equal(cfg->n_errors, 1);
    assert_error_containing(cfg, "cfg.ini:2: [model.a] plugin: 'bad plugin' is not a name");
    sy_config_free(cfg);
}

static void test_duplicates(void **state) {
    (void)state;
    sy_config *cfg = parse(MODEL_HEAD("a") "\n" MODEL_HEAD("a"));
    assert_single_error(cfg, "cfg.ini:5: [model.a]: model 'a' is defined twice (first at line 1)");
    assert_int_equal(cfg->n_models, 1);
    sy_config_free(cfg);

    cfg = parse(MODEL_HEAD("a") "ttl = 5\nttl = 6\n");
    assert_single_error(cfg, "cfg.ini:5: [model.a] ttl: given twice (first at line 4)");
    assert_int_equal(cfg->models[0].ttl_s, 5);
    sy_config_free(cfg);

    cfg = parse("[host]\nresume = true\n[host]\nresume = false\n");
    assert_single_error(cfg, "cfg.ini:3: [host]: the section appears twice (first at line 1)");
    assert_true(cfg->host.resume);
    sy_config_free(cfg);

    cfg = parse("[group.g]\n[group.g]\n");
    assert_error_containing(cfg, "cfg.ini:2: [group.g]: group 'g' is defined twice (first at line 1)");
    sy_config_free(cfg);

    cfg = parse(MODEL_HEAD("a") "threads = 4\nengine.threads = 8\n");
    assert_single_error(cfg, "cfg.ini:5: [model.a] engine.threads: the engine option 'threads' is given twice (first "
                             "at line 4, as 'threads')");
    sy_config_free(cfg);

    cfg = parse(MODEL_HEAD("a") "threads = 4\nthreads = 8\n");
    assert_single_error(cfg, "cfg.ini:5: [model.a] threads: given twice (first at line 4)");
    sy_config_free(cfg);
}

static void test_alias_resolution(void **state) {
    (void)state;
    sy_config *cfg = parse(MODEL_HEAD("qwen") "aliases = gpt-4o-mini, qwen2.5:0.5b, library/qwen:latest\n"
                           "\n" MODEL_HEAD("llama") "aliases = gpt-4o\n");
    assert_clean(cfg);
    const sy_config_model *q = sy_config_find_model(cfg, "qwen");
    assert_non_null(q);
    assert_string_equal(q->name, "qwen");
    assert_ptr_equal(sy_config_find_model(cfg, "gpt-4o-mini"), q);
    assert_ptr_equal(sy_config_find_model(cfg, "qwen2.5:0.5b"), q);
    assert_ptr_equal(sy_config_find_model(cfg, "library/qwen:latest"), q);
    const sy_config_model *l = sy_config_find_model(cfg, "gpt-4o");
    assert_non_null(l);
    assert_string_equal(l->name, "llama");
    assert_null(sy_config_find_model(cfg, "gpt-4"));
    assert_null(sy_config_find_model(cfg, "QWEN")); /* exact, case-sensitive */
    assert_null(sy_config_find_model(cfg, ""));
    assert_null(sy_config_find_model(cfg, NULL));
    sy_config_free(cfg);
}

static void test_alias_collisions(void **state) {
    (void)state;
    /* An alias naming another model. */
    sy_config *cfg = parse(MODEL_HEAD("a") "\n" MODEL_HEAD("b") "aliases = a\n");
    assert_single_error(cfg, "cfg.ini:8: [model.b] aliases: 'a' is already the name of model 'a' (line 1)");
    sy_config_free(cfg);

    /* Two models with the same alias. */
    cfg = parse(MODEL_HEAD("a") "aliases = x, y\n\n" MODEL_HEAD("b") "aliases = z, y\n");
    assert_single_error(cfg, "cfg.ini:9: [model.b] aliases: 'y' is already an alias of model 'a' (line 4)");
    sy_config_free(cfg);

    /* A model named like an earlier model's alias. */
    cfg = parse(MODEL_HEAD("a") "aliases = b\n\n" MODEL_HEAD("b"));
    assert_single_error(cfg, "cfg.ini:6: [model.b]: the name 'b' is already an alias of model 'a' (line 4)");
    sy_config_free(cfg);

    /* Within one model: harmless, a warning. */
    cfg = parse(MODEL_HEAD("a") "aliases = x, x, a\n");
    assert_true(sy_config_ok(cfg));
    assert_int_equal(cfg->n_warnings, 2);
    assert_warning_containing(cfg, "cfg.ini:4: [model.a] aliases: 'x' is listed twice");
    assert_warning_containing(cfg, "cfg.ini:4: [model.a] aliases: 'a' is the model's own name");
    sy_config_free(cfg);
}

static void test_draft(void **state) {
    (void)state;
    sy_config *cfg = parse(MODEL_HEAD("a") "draft = model:nope\n");
    assert_single_error(cfg, "cfg.ini:4: [model.a] draft: 'model:nope' names no configured model");
    sy_config_free(cfg);

    cfg = parse(MODEL_HEAD("a") "aliases = self\ndraft = model:self\n");
    assert_single_error(cfg, "cfg.ini:5: [model.a] draft: a model cannot draft for itself");
    sy_config_free(cfg);

    /* A draft model defined later in the file resolves. */
    cfg = parse(MODEL_HEAD("big") "draft = model:small\n\n" MODEL_HEAD("small"));
    assert_clean(cfg);
    assert_string_equal(cfg->models[0].draft_model, "small");
    sy_config_free(cfg);

    cfg = parse(MODEL_HEAD("a") "draft = ngram\n");
    assert_clean(cfg);
    assert_int_equal(cfg->models[0].draft, SY_CONFIG_DRAFT_NGRAM);
    sy_config_free(cfg);

    cfg = parse(MODEL_HEAD("a") "draft_max = 4\ndraft_min = 5\n");
    assert_single_error(cfg, "cfg.ini:5: [model.a] draft_min: 5 is more than draft_max (4)");
    sy_config_free(cfg);
}

static void test_groups(void **state) {
    (void)state;
    /* A group named only by models is implicit, with the defaults. */
    sy_config *cfg = parse(MODEL_HEAD("a") "group = gpu\n\n" MODEL_HEAD("b") "group = gpu\n\n" MODEL_HEAD("c"));
    assert_clean(cfg);
    const sy_config_group *gpu = sy_config_find_group(cfg, "gpu");
    assert_non_null(gpu);
    assert_true(gpu->implicit);
    assert_true(gpu->swap);
    assert_int_equal(gpu->members.count, 2);
    assert_string_equal(gpu->members.items[0], "a");
    assert_string_equal(gpu->members.items[1], "b");
    const sy_config_group *def = sy_config_find_group(cfg, "default");
    assert_non_null(def);
    assert_int_equal(def->members.count, 1);
    assert_string_equal(def->members.items[0], "c");
    assert_null(sy_config_find_group(cfg, "nope"));
    sy_config_free(cfg);

    /* members places models that name no group; an alias works too. */
    cfg = parse(MODEL_HEAD("a") "aliases = alpha\n\n" MODEL_HEAD("b") "\n[group.pair]\nswap = false\nmembers = alpha,\n  b\n");
    assert_clean(cfg);
    assert_string_equal(cfg->models[0].group, "pair");
    assert_string_equal(cfg->models[1].group, "pair");
    const sy_config_group *pair = sy_config_find_group(cfg, "pair");
    assert_false(pair->swap);
    assert_int_equal(pair->members.count, 2);
    assert_null(sy_config_find_group(cfg, "default")); /* nobody is in it */
    sy_config_free(cfg);

    cfg = parse(MODEL_HEAD("a") "\n[group.g]\nmembers = a, ghost\n");
    assert_single_error(cfg, "cfg.ini:6: [group.g] members: 'ghost' names no configured model");
    sy_config_free(cfg);

    cfg = parse(MODEL_HEAD("a") "group = x\n\n[group.g]\nmembers = a\n");
    assert_single_error(cfg, "cfg.ini:7: [group.g] members: model 'a' names group 'x' (line 4)");
    sy_config_free(cfg);

    cfg = parse(MODEL_HEAD("a") "\n[group.g]\nmembers = a\n[group.h]\nmembers = a\n");
    assert_single_error(cfg, "cfg.ini:8: [group.h] members: model 'a' is already a member of group 'g' (line 6)");
    sy_config_free(cfg);

    cfg = parse(MODEL_HEAD("a") "group = g\n\n[group.g]\nmembers = a, a\n[group.empty]\n");
    assert_true(sy_config_ok(cfg));
    assert_warning_containing(cfg, "cfg.ini:7: [group.g] members: model 'a' is listed twice");
    assert_warning_containing(cfg, "cfg.ini:8: group 'empty' has no models");
    sy_config_free(cfg);

    cfg = parse("[group.g]\nswap = sometimes\n");
    assert_error_containing(cfg, "cfg.ini:2: [group.g] swap: 'sometimes' is not true or false");
    sy_config_free(cfg);

    cfg = parse("[group.]\n[group.a b]\n[model.]\n[model.x y]\n");
    assert_int_equal(cfg->n_errors, 4);
    assert_error_containing(cfg, "cfg.ini:1: [group.]: '' is not a group name");
    assert_error_containing(cfg, "cfg.ini:2: [group.a b]: 'a b' is not a group name");
    assert_error_containing(cfg, "cfg.ini:3: [model.]: '' is not a model name");
    assert_error_containing(cfg, "cfg.ini:4: [model.x y]: 'x y' is not a model name");
    sy_config_free(cfg);
}

static void test_warnings(void **state) {
    (void)state;
    sy_config *cfg = parse("stray = 1\n"
                           "[host]\n"
                           "colour = blue\n"
                           "[extras]\n"
                           "anything = 1\n"
                           "\n" MODEL_HEAD("a") "ttl = 30\n");
    assert_true(sy_config_ok(cfg));
    assert_int_equal(cfg->n_warnings, 3);
    assert_string_equal(cfg->warnings[0], "cfg.ini:1: 'stray' is outside of any section and is ignored");
    assert_string_equal(cfg->warnings[1], "cfg.ini:3: [host] colour: unknown key is ignored");
    assert_string_equal(cfg->warnings[2],
                        "cfg.ini:4: unknown section [extras] is ignored (known: [host], [model.NAME], [group.NAME], [peer.NAME], "
        "[selector.NAME], [macros])");
    sy_config_free(cfg);

    /* A model key misspelt is no option of the plugin either: an error naming its line. */
    cfg = parse(MODEL_HEAD("a") "ttl = 30\ntll = 30\n");
    assert_int_equal(cfg->n_errors, 1);
    assert_error_containing(cfg, "cfg.ini:5: [model.a] tll: not a model key, nor an option of plugin test-engine "
                                 "(its options: threads, ");
    sy_config_free(cfg);

    /* http_threads is still read (an old config keeps working) but does nothing: said once, as a warning. */
    cfg = parse("[host]\nhttp_threads = 8\nmax_connections = 32\n" MODEL_HEAD("a"));
    assert_true(sy_config_ok(cfg));
    assert_int_equal(cfg->n_warnings, 1);
    assert_string_equal(cfg->warnings[0], "cfg.ini:2: [host] http_threads: is deprecated and ignored (the server runs "
                                          "one thread per connection); max_connections bounds the connections");
    assert_int_equal(cfg->host.max_connections, 32);
    sy_config_free(cfg);
}

static void test_continuation_lines(void **state) {
    (void)state;
    /* Lists continue on indented lines; empty items are skipped. */
    sy_config *cfg = parse(MODEL_HEAD("a") "aliases =\n    one,\n    two, three,\n\tfour\nttl = 9\n");
    assert_clean(cfg);
    const sy_config_model *m = &cfg->models[0];
    assert_int_equal(m->aliases.count, 4);
    assert_string_equal(m->aliases.items[3], "four");
    assert_int_equal(m->aliases.lines[0], 5);
    assert_int_equal(m->aliases.lines[3], 7);
    assert_int_equal(m->ttl_s, 9);
    sy_config_free(cfg);

    /* Indented keys right under a header are keys; the second one is a continuation in inih's eyes. */
    cfg = parse("[model.a]\n  plugin = p\n  path = x\n");
    assert_int_equal(cfg->n_errors, 2);
    assert_string_equal(cfg->errors[0],
                        "cfg.ini:3: [model.a] plugin: this indented line continues the value of 'plugin', which "
                        "takes a single value (remove the indentation to start a new key)");
    assert_string_equal(cfg->errors[1], "cfg.ini:1: [model.a]: missing required key 'path'");
    sy_config_free(cfg);

    /* An indented key after a list key. */
    cfg = parse(MODEL_HEAD("a") "aliases = x\n  ttl = 5\n");
    assert_single_error(cfg, "cfg.ini:5: [model.a] aliases: 'ttl = 5' is not a name; this indented line continues "
                             "'aliases' (remove the indentation to start a new key)");
    sy_config_free(cfg);

    /* Continuations of unknown keys are skipped with the key. */
    cfg = parse("[host]\ncolour = red\n   green\n" MODEL_HEAD("a"));
    assert_true(sy_config_ok(cfg));
    assert_int_equal(cfg->n_warnings, 1);
    sy_config_free(cfg);

    /* An engine key continues only when its plugin says it takes a list; a plugin that declares nothing gets the
     * lines comma-joined, as written. */
    cfg = parse(MODEL_HEAD("a") "threads = 4\n  5\n");
    assert_single_error(cfg, "cfg.ini:5: [model.a] threads: this indented line continues the value of 'threads', "
                             "which takes a single value (remove the indentation to start a new key)");
    sy_config_free(cfg);
    cfg = parse("[model.a]\nplugin = legacy\npath = m.txt\ncolour = red\n   green\n");
    assert_true(sy_config_ok(cfg));
    assert_string_equal(sy_config_model_option(&cfg->models[0], "colour"), "red,green");
    sy_config_free(cfg);

    /* kv_cache_dir grows over lines. */
    cfg = parse(MODEL_HEAD("a") "kv_cache_dir = /a\n  b\n");
    assert_clean(cfg);
    assert_string_equal(sy_config_model_option(&cfg->models[0], "kv_cache_dir"), "/a,/base/b");
    sy_config_free(cfg);
}

static void test_engine_keys(void **state) {
    (void)state;
    static const char text[] = MODEL_HEAD("a") "keep_kv_cache = ON\nthreads = 007\ntemperature = -0.5\n"
                               "synthetic = cfg/c.json\nparallel = 3\nengine.parallel = 9\n"
                               "\n" MODEL_HEAD("b") "ttl = 5\n";
    /* Before the check the keys wait as written, with their lines; options are empty. */
    sy_config *cfg = sy_config_load_string(text, strlen(text), "cfg.ini", "/base");
    assert_true(sy_config_ok(cfg));
    assert_true(cfg->options_unchecked);
    const sy_config_model *m = &cfg->models[0];
    assert_int_equal(m->n_options, 0);
    assert_int_equal(m->n_raw_options, 5);
    assert_string_equal(m->raw_options[4].written, "engine.parallel");
    assert_string_equal(m->raw_options[4].key, "parallel");
    assert_int_equal(m->raw_options[4].line, 9);

    schema_calls = 0;
    sy_config_check_options(cfg, test_schema, NULL);
    assert_clean(cfg);
    assert_false(cfg->options_unchecked);
    assert_int_equal(schema_calls, 1); /* model b has no engine keys: its plugin is not asked */
    assert_int_equal(m->n_options, 5);
    assert_string_equal(sy_config_model_option(m, "keep_kv_cache"), "1");
    assert_string_equal(sy_config_model_option(m, "threads"), "7");
    assert_string_equal(sy_config_model_option(m, "temperature"), "-0.5");
    assert_string_equal(sy_config_model_option(m, "synthetic"), "/base/cfg/c.json");
    assert_string_equal(sy_config_model_option(m, "parallel"), "9"); /* engine.parallel */
    assert_int_equal(m->parallel, 3);                                  /* the model key */
    /* Once only: a second call asks nobody and adds nothing. */
    sy_config_check_options(cfg, test_schema, NULL);
    assert_int_equal(schema_calls, 1);
    assert_int_equal(m->n_options, 5);
    sy_config_free(cfg);

    /* A plugin that declares nothing gets the keys verbatim, each with a warning. */
    cfg = parse("[model.a]\nplugin = legacy\npath = m.txt\nkeep_kv_cache = ON\nengine.x = 1\n");
    assert_true(sy_config_ok(cfg));
    assert_int_equal(cfg->n_warnings, 2);
    assert_string_equal(cfg->warnings[0], "cfg.ini:4: [model.a] keep_kv_cache: passed to the plugin unchecked: "
                                          "plugin legacy (ABI 1.1) declares no options");
    assert_string_equal(sy_config_model_option(&cfg->models[0], "keep_kv_cache"), "ON");
    assert_string_equal(sy_config_model_option(&cfg->models[0], "x"), "1");
    sy_config_free(cfg);

    /* No callback (or an empty answer): every engine key is an error. */
    cfg = sy_config_load_string(MODEL_HEAD("a") "threads = 2\n", strlen(MODEL_HEAD("a") "threads = 2\n"), "cfg.ini",
                                "/base");
    sy_config_check_options(cfg, NULL, NULL);
    assert_single_error(cfg, "cfg.ini:4: [model.a] threads: not a model key, nor an option of test-engine (it "
                             "declares none)");
    assert_int_equal(cfg->models[0].n_options, 0);
    sy_config_free(cfg);

    /* Errors of several keys and models are all reported, each on its own line. */
    cfg = parse(MODEL_HEAD("a") "threads = 0\nctx = 5\n\n" MODEL_HEAD("b") "keep_kv_cache = perhaps\n");
    assert_int_equal(cfg->n_errors, 3);
    assert_error_containing(cfg, "cfg.ini:4: [model.a] threads: '0' is out of range (1..1024)");
    assert_error_containing(cfg, "cfg.ini:5: [model.a] ctx: not a model key");
    assert_error_containing(cfg, "cfg.ini:10: [model.b] keep_kv_cache: 'perhaps' is not true or false");
    sy_config_free(cfg);

    /* A long list continues over lines, up to the list limit. */
    char big[16384];
    size_t n = (size_t)snprintf(big, sizeof big, MODEL_HEAD("a") "kv_cache_dir = /d0");
    for (int i = 1; i <= SY_CONFIG_MAX_LIST_ITEMS; i++) n += (size_t)snprintf(big + n, sizeof big - n, "\n  /d%d", i);
    cfg = parse(big);
    assert_error_containing(cfg, "kv_cache_dir: more than 256 items");
    sy_config_free(cfg);
}

static void test_paths(void **state) {
    (void)state;
    setenv("HOME", "/home/me/", 1);
    sy_config *cfg = parse(MODEL_HEAD("a") "chat_template_file = ~\n"
                           "kv_cache_dir = ~/x, ../y\n");
    assert_clean(cfg);
    assert_string_equal(cfg->models[0].chat_template_file, "/home/me");
    assert_string_equal(sy_config_model_option(&cfg->models[0], "kv_cache_dir"), "/home/me/x,/base/../y");
    sy_config_free(cfg);

    setenv("HOME", "/", 1);
    cfg = parse(MODEL_HEAD("a") "chat_template_file = ~/t\n");
    assert_clean(cfg);
    assert_string_equal(cfg->models[0].chat_template_file, "/t");
    sy_config_free(cfg);

    unsetenv("HOME");
    cfg = parse("[model.a]\nplugin = p\npath = ~/m.gguf\n");
    assert_single_error(cfg, "cfg.ini:3: [model.a] path: '~/m.gguf': cannot expand '~' because HOME is not set "
                             "to an absolute path");
    sy_config_free(cfg);
    setenv("HOME", "/home/u", 1);

    /* Without a base folder, relative paths stay relative. */
    const char *text = MODEL_HEAD("a");
    cfg = sy_config_load_string(text, strlen(text), NULL, NULL);
    assert_clean(cfg);
    assert_string_equal(cfg->source, "<string>");
    assert_string_equal(cfg->models[0].path, "m.txt");
    sy_config_free(cfg);

    cfg = parse("[model.a]\nplugin = p\npath =\n");
    assert_single_error(cfg, "cfg.ini:3: [model.a] path: the path is empty");
    sy_config_free(cfg);
}

static void test_syntax_errors(void **state) {
    (void)state;
    sy_config *cfg = parse("[host\nlisten 8080\n[model.a] ; trailing comment\nplugin=p\npath=x\n");
    assert_int_equal(cfg->n_errors, 2);
    assert_string_equal(cfg->errors[0], "cfg.ini:1: '[' opens a section name that no ']' closes");
    assert_string_equal(cfg->errors[1], "cfg.ini:2: expected 'key = value', a [section] header or a ; comment");
    assert_int_equal(cfg->n_models, 1);
    sy_config_free(cfg);

    /* ':' separates like '=' (inih's Python-configparser concession), but a value may hold ':' after '='. */
    cfg = parse("[host]\nlisten: 10.0.0.1:80\n[model.a]\nplugin=p\npath=x\ndraft = model:a2\n[model.a2]\nplugin:p\npath:y\n");
    assert_clean(cfg);
    assert_string_equal(cfg->host.listen, "10.0.0.1:80");
    sy_config_free(cfg);
}

static void test_bom_and_crlf(void **state) {
    (void)state;
    const char text[] = "\xEF\xBB\xBF[model.a]\r\nplugin = p\r\npath = x\r\nttl = 7\r\n";
    sy_config *cfg = parse(text);
    assert_clean(cfg);
    assert_int_equal(cfg->models[0].ttl_s, 7);
    assert_string_equal(cfg->models[0].path, "/base/x");
    sy_config_free(cfg);
}

static void test_hostile_input(void **state) {
    (void)state;
    /* An embedded NUL is an error on its line, not the end of the text. */
    const char with_nul[] = "[model.a]\nplugin = p\npath = x\0hidden\nttl = abc\n";
    sy_config *cfg = sy_config_load_string(with_nul, sizeof with_nul - 1, "cfg.ini", "/base");
    /* No "missing required key 'path'" after it: the path was on the refused line. */
    assert_int_equal(cfg->n_errors, 2);
    assert_string_equal(cfg->errors[0],
                        "cfg.ini:3: byte 0x00 at column 9 is a control character; a config file is text");
    assert_string_equal(cfg->errors[1], "cfg.ini:4: [model.a] ttl: 'abc' is not a number of seconds");
    sy_config_free(cfg);

    cfg = parse("[host]\nlisten = a\x1b[31m:80\n");
    assert_single_error(cfg, "cfg.ini:2: byte 0x1b at column 11 is a control character; a config file is text");
    sy_config_free(cfg);

    /* A line longer than inih's buffer is refused whole (inih would cut it into separate lines). */
    char *text = malloc(20000);
    int n = snprintf(text, 20000, "[model.a]\nplugin = p\npath = ");
    memset(text + n, 'x', 10000);
    strcpy(text + n + 10000, "\nttl = 5\n");
    cfg = parse(text);
    assert_int_equal(cfg->n_errors, 1);
    assert_error_containing(cfg, "cfg.ini:3: the line is 10007 bytes long; the limit is ");
    assert_int_equal(cfg->models[0].ttl_s, 5); /* the next line is still line 4 and still read */
    sy_config_free(cfg);

    /* A long value that fits is kept whole and quoted short in messages. */
    n = snprintf(text, 20000, "[model.a]\nplugin = p\npath = x\nttl = ");
    memset(text + n, '9', 150);
    text[n + 150] = '\0';
    cfg = parse(text);
    assert_int_equal(cfg->n_errors, 1);
    assert_error_containing(cfg, "ttl: '999999999999999999999999999999999999999999999999999999999999...' is not a "
                                 "number of seconds");
    sy_config_free(cfg);

    /* Many bad lines: bounded diagnostics, and reading stops. */
    size_t pos = 0;
    for (int i = 0; i < 1000; i++) pos += (size_t)snprintf(text + pos, 20000 - pos, "junk%d\n", i);
    cfg = parse(text);
    assert_int_equal(cfg->n_errors, SY_CONFIG_MAX_DIAGNOSTICS);
    assert_false(sy_config_ok(cfg));
    assert_string_equal(cfg->errors[SY_CONFIG_MAX_DIAGNOSTICS - 1],
                        "cfg.ini:99: too many errors; the rest of the file is not read");
    sy_config_free(cfg);

    /* Too many list items. */
    pos = (size_t)snprintf(text, 20000, MODEL_HEAD("a") "aliases = ");
    for (int i = 0; i < 300; i++) pos += (size_t)snprintf(text + pos, 20000 - pos, "\n  a%d", i);
    cfg = parse(text);
    assert_int_equal(cfg->n_errors, 1);
    assert_error_containing(cfg, "[model.a] aliases: more than 256 items");
    assert_int_equal(cfg->models[0].aliases.count, 256);
    sy_config_free(cfg);

    /* Too big as a whole. */
    cfg = sy_config_load_string(text, SY_CONFIG_MAX_BYTES + 1, "cfg.ini", NULL); /* length checked before reading */
    assert_single_error(cfg, "cfg.ini: the file is 4194305 bytes; the limit is 4194304");
    sy_config_free(cfg);
    free(text);

    /* NULL text is an empty config. */
    cfg = sy_config_load_string(NULL, 5, "cfg.ini", NULL);
    assert_clean(cfg);
    sy_config_free(cfg);
}

/* Names longer than inih's 49-byte section and key buffers are kept whole, and continuation still works. */
static void test_long_names(void **state) {
    (void)state;
    char name[129], text[1024];
    memset(name, 'n', 128);
    name[128] = '\0';
    snprintf(text, sizeof text,
             "[model.%s]\nplugin = legacy\npath = x\naliases = a,\n  b\n"
             "an_unknown_key_that_is_longer_than_forty_nine_bytes_by_far = 1\n  more\n",
             name);
    sy_config *cfg = parse(text);
    assert_true(sy_config_ok(cfg));
    assert_int_equal(cfg->n_warnings, 1);
    assert_warning_containing(cfg, "an_unknown_key_that_is_longer_than_forty_nine_bytes_by_far: passed to the plugin");
    assert_string_equal(sy_config_model_option(&cfg->models[0],
                                               "an_unknown_key_that_is_longer_than_forty_nine_bytes_by_far"),
                        "1,more");
    assert_string_equal(cfg->models[0].name, name);
    assert_int_equal(cfg->models[0].aliases.count, 2);
    assert_ptr_equal(sy_config_find_model(cfg, "b"), &cfg->models[0]);
    sy_config_free(cfg);

    /* 129 bytes is one too many. */
    snprintf(text, sizeof text, "[model.%sx]\nplugin = p\npath = x\n", name);
    cfg = parse(text);
    assert_int_equal(cfg->n_errors, 1);
    assert_error_containing(cfg, "is not a model name");
    assert_int_equal(cfg->n_models, 0);
    sy_config_free(cfg);
}

static void test_api_keys_not_echoed(void **state) {
    (void)state;
    sy_config *cfg = parse("[host]\napi_keys = good-key, bad key secret\n");
    assert_single_error(cfg, "cfg.ini:2: [host] api_keys: item 2 is not an API key (1 to 256 printable "
                             "characters, no spaces)");
    sy_config_free(cfg);
}

/* ------------------------------------------------------------------------------------------------------------
 * Files
 */

static char tmp_dir[256];

static int make_tmp_dir(void **state) {
    (void)state;
    snprintf(tmp_dir, sizeof tmp_dir, "/tmp/sy-test-config-XXXXXX");
    return mkdtemp(tmp_dir) == NULL ? -1 : 0;
}

static int remove_tmp_dir(void **state) {
    (void)state;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_dir);
    return system(cmd) == 0 ? 0 : -1;
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void test_load_file(void **state) {
    (void)state;
    char path[512];
    snprintf(path, sizeof path, "%s/sub", tmp_dir);
    mkdir(path, 0700);
    snprintf(path, sizeof path, "%s/sub/demo.ini", tmp_dir);
    write_file(path, "[model.a]\nplugin = p\npath = ../models/a.gguf\nttl = abc\n");
    sy_config *cfg = sy_config_load_file(path);
    char expected[1024];
    snprintf(expected, sizeof expected, "%s/sub/../models/a.gguf", tmp_dir);
    assert_string_equal(cfg->models[0].path, expected);
    snprintf(expected, sizeof expected, "%s:4: [model.a] ttl: 'abc' is not a number of seconds", path);
    assert_single_error(cfg, expected);
    sy_config_free(cfg);

    /* A relative config path resolves against the working directory. */
    char cwd[4096];
    assert_non_null(getcwd(cwd, sizeof cwd));
    assert_int_equal(chdir(tmp_dir), 0);
    cfg = sy_config_load_file("sub/demo.ini");
    snprintf(expected, sizeof expected, "%s/sub/../models/a.gguf", tmp_dir);
    assert_string_equal(cfg->models[0].path, expected);
    assert_string_equal(cfg->errors[0], "sub/demo.ini:4: [model.a] ttl: 'abc' is not a number of seconds");
    sy_config_free(cfg);
    assert_int_equal(chdir(cwd), 0);

    snprintf(path, sizeof path, "%s/absent.ini", tmp_dir);
    cfg = sy_config_load_file(path);
    snprintf(expected, sizeof expected, "%s: cannot open: No such file or directory", path);
    assert_single_error(cfg, expected);
    sy_config_free(cfg);

    cfg = sy_config_load_file(tmp_dir); /* a folder */
    assert_int_equal(cfg->n_errors, 1);
    assert_non_null(strstr(cfg->errors[0], "cannot read"));
    sy_config_free(cfg);
}

/* defaults.KEY, set_params.KEY and strip_params: kept in order, checked with file:line, never engine options. */
static void test_request_params(void **state) {
    (void)state;
    sy_config *cfg = parse(MODEL_HEAD("a") "defaults.temperature = 0.7\ndefaults.stop = [\"</s>\", \"x\"]\n"
                                           "defaults.system_prompt = Be brief; really.\nset_params.top_k = 20\n"
                                           "strip_params = presence_penalty, top_p\n");
    assert_clean(cfg);
    const sy_config_model *m = &cfg->models[0];
    assert_int_equal(m->n_request_params, 6);
    assert_int_equal(m->n_options, 0);
    assert_int_equal(m->request_params[0].kind, SY_REQUEST_PARAM_DEFAULT);
    assert_string_equal(m->request_params[0].key, "temperature");
    assert_string_equal(m->request_params[0].value, "0.7");
    assert_string_equal(m->request_params[2].value, "Be brief; really."); /* ';' without a blank before it */
    assert_int_equal(m->request_params[3].kind, SY_REQUEST_PARAM_SET);
    assert_int_equal(m->request_params[4].kind, SY_REQUEST_PARAM_STRIP);
    assert_string_equal(m->request_params[5].key, "top_p");
    sy_config_free(cfg);

    cfg = parse(MODEL_HEAD("a") "defaults.temperature = hot\n");
    assert_single_error(cfg, "cfg.ini:4: [model.a] defaults.temperature: temperature must be a number from 0 to 100");
    sy_config_free(cfg);
    cfg = parse(MODEL_HEAD("a") "set_params.top_k = 1.5\n");
    assert_error_containing(cfg, "top_k must be a whole number");
    sy_config_free(cfg);
    cfg = parse(MODEL_HEAD("a") "defaults.bogus = 1\n");
    assert_error_containing(cfg, "'bogus' is not a request setting");
    sy_config_free(cfg);
    cfg = parse(MODEL_HEAD("a") "strip_params = temperature, nope\n");
    assert_error_containing(cfg, "'nope' is not a request setting");
    sy_config_free(cfg);
    cfg = parse(MODEL_HEAD("a") "defaults.stop = [1]\n");
    assert_error_containing(cfg, "stop must be one string or a JSON array");
    sy_config_free(cfg);
    cfg = parse(MODEL_HEAD("a") "defaults.dry_multiplier = 0.8\ndefaults.dry_sequence_breakers = [\"\\n\", \"User:\"]\n"
                                "set_params.dry_penalty_last_n = -1\n");
    assert_non_null(cfg);
    assert_int_equal(cfg->n_errors, 0);
    assert_string_equal(sy_config_find_model(cfg, "a")->request_params[1].key, "dry_sequence_breakers");
    sy_config_free(cfg);
    cfg = parse(MODEL_HEAD("a") "defaults.dry_sequence_breakers = []\n");
    assert_error_containing(cfg, "dry_sequence_breakers must be a JSON array of 1 to 64 strings of 1 to 40 bytes");
    sy_config_free(cfg);
    cfg = parse(MODEL_HEAD("a") "defaults.dry_sequence_breakers = [\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"]\n");
    assert_error_containing(cfg, "dry_sequence_breakers must be");
    sy_config_free(cfg);
    cfg = parse(MODEL_HEAD("a") "set_params.dry_allowed_length = -1\n");
    assert_error_containing(cfg, "dry_allowed_length must be a whole number from 0");
    sy_config_free(cfg);
    cfg = parse(MODEL_HEAD("a") "defaults.top_p = 0.5\ndefaults.top_p = 0.6\n");
    assert_error_containing(cfg, "given twice (first at line 4)");
    sy_config_free(cfg);
}

/* The example configs in configs/ are valid. */
static void test_example_configs(void **state) {
    (void)state;
    const char *src = getenv("SY_SOURCE_DIR");
    if (src == NULL) src = SY_TEST_SOURCE_DIR;
    const char *files[] = {"configs/demo.ini", "configs/llama-swap-style.ini"};
    for (size_t i = 0; i < 2; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", src, files[i]);
        sy_config *cfg = sy_config_load_file(path);
        assert_clean(cfg);
        assert_true(cfg->n_models >= 2);
        sy_config_free(cfg);
    }
}

static void test_diagnostics_printing(void **state) {
    (void)state;
    sy_config *cfg = parse("[x]\n[model.a]\nttl=q\n");
    char buf[4096] = "";
    FILE *f = fmemopen(buf, sizeof buf, "w");
    assert_non_null(f);
    sy_config_print_diagnostics(cfg, f);
    fclose(f);
    assert_non_null(strstr(buf, "warning: cfg.ini:1: unknown section [x]"));
    assert_non_null(strstr(buf, "error: cfg.ini:3: [model.a] ttl: 'q' is not a number of seconds\n"));
    assert_true(strstr(buf, "warning:") < strstr(buf, "error:"));
    sy_config_free(cfg);
    sy_config_free(NULL);
}

/* The [host] keys of docs/security.md: their defaults, values and refusals. */
static void test_security_keys(void **state) {
    (void)state;
    sy_config *cfg = parse(MODEL_HEAD("m"));
    assert_clean(cfg);
    const sy_config_host *h = &cfg->host;
    assert_int_equal(h->admin_api_keys.count, 0);
    assert_int_equal(h->cors_origins.count, 0);
    assert_int_equal(h->allowed_hosts.count, 0);
    assert_int_equal(h->request_timeout_s, 30);
    assert_int_equal(h->stream_timeout_s, 60);
    assert_int_equal(h->max_connections_per_client, 64);
    assert_int_equal(h->connection_reserve, 16);
    assert_int_equal(h->tokenize_memory, (uint64_t)256 << 20);
    assert_int_equal(h->slot_save_max_bytes, (uint64_t)4 << 30);
    sy_config_free(cfg);

    cfg = parse("[host]\nadmin_api_keys = root-key\ncors_origins = http://localhost:3000, https://APP.example, "
                "http://[::1]:8080, *\nallowed_hosts = myhost.lan, *\nrequest_timeout = 5s\nstream_timeout = 2m\n"
                "max_connections_per_client = 8\nconnection_reserve = 2\ntokenize_memory = 64M\n"
                "slot_save_max_bytes = 0\n\n" MODEL_HEAD("m"));
    assert_clean(cfg);
    h = &cfg->host;
    assert_int_equal(h->admin_api_keys.count, 1);
    assert_string_equal(h->admin_api_keys.items[0], "root-key");
    assert_int_equal(h->cors_origins.count, 4);
    assert_string_equal(h->cors_origins.items[1], "https://APP.example");
    assert_int_equal(h->allowed_hosts.count, 2);
    assert_int_equal(h->request_timeout_s, 5);
    assert_int_equal(h->stream_timeout_s, 120);
    assert_int_equal(h->max_connections_per_client, 8);
    assert_int_equal(h->connection_reserve, 2);
    assert_int_equal(h->tokenize_memory, (uint64_t)64 << 20);
    assert_int_equal(h->slot_save_max_bytes, 0);
    sy_config_free(cfg);

    static const char *const bad_origins[] = {"localhost:3000", "http://", "http://a.example/path", "ftp//x",
                                              "http://a b", "http://[zz]:1", "http://a:123456"};
    for (size_t i = 0; i < sizeof bad_origins / sizeof *bad_origins; i++) {
        char text[512];
        snprintf(text, sizeof text, "[host]\ncors_origins = %s\n\n" MODEL_HEAD("m"), bad_origins[i]);
        cfg = parse(text);
        assert_error_containing(cfg, "is not an origin");
        sy_config_free(cfg);
    }
    cfg = parse("[host]\nallowed_hosts = my host\n\n" MODEL_HEAD("m"));
    assert_error_containing(cfg, "is not a host name");
    sy_config_free(cfg);
    cfg = parse("[host]\nrequest_timeout = 0\n\n" MODEL_HEAD("m"));
    assert_error_containing(cfg, "request_timeout");
    sy_config_free(cfg);
    cfg = parse("[host]\nadmin_api_keys = has space\n\n" MODEL_HEAD("m"));
    assert_error_containing(cfg, "is not an API key");
    sy_config_free(cfg);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_full_config),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_units),
        cmocka_unit_test(test_error_message_format),
        cmocka_unit_test(test_bad_values),
        cmocka_unit_test(test_listen),
        cmocka_unit_test(test_log_level),
        cmocka_unit_test(test_drain_timeout),
        cmocka_unit_test(test_missing_required_keys),
        cmocka_unit_test(test_duplicates),
        cmocka_unit_test(test_alias_resolution),
        cmocka_unit_test(test_alias_collisions),
        cmocka_unit_test(test_draft),
        cmocka_unit_test(test_groups),
        cmocka_unit_test(test_warnings),
        cmocka_unit_test(test_continuation_lines),
        cmocka_unit_test(test_paths),
        cmocka_unit_test(test_syntax_errors),
        cmocka_unit_test(test_bom_and_crlf),
        cmocka_unit_test(test_hostile_input),
        cmocka_unit_test(test_long_names),
        cmocka_unit_test(test_api_keys_not_echoed),
        cmocka_unit_test_setup_teardown(test_load_file, make_tmp_dir, remove_tmp_dir),
        cmocka_unit_test(test_example_configs),
        cmocka_unit_test(test_request_params),
        cmocka_unit_test(test_diagnostics_printing),
        cmocka_unit_test(test_engine_keys),
        cmocka_unit_test(test_security_keys),
    };
    return cmocka_run_group_tests_name("config", tests, NULL, NULL);
}
