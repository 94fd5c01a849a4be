/* Option schemas ("sy.plugin.options/1"): the schema checker on crafted tables; every bundled plugin's schema
 * well-formed and in step with what its load() (or drafter create()) accepts; the config and the command line
 * checked through the real registry; plugins of older ABIs, which declare nothing, passed through. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/option_schema.h"
#include "config/config.h"
#include "manager/config_check.h"
#include "plugins/engine_options.h"
#include "plugins/plugin_loader.h"

static sy_plugin_registry reg;    /* the bundled plugins */
static sy_plugin_registry legacy; /* the fixtures of ABI 1.0 and 1.1 */

static const char *build_dir(void) {
    const char *b = getenv("SY_BUILD_DIR");
    return b ? b : "build";
}

static const char *source_dir(void) {
    const char *s = getenv("SY_SOURCE_DIR");
    return s ? s : ".";
}

static int setup(void **state) {
    (void)state;
    char dir[4096], err[512];
    snprintf(dir, sizeof dir, "%s/plugins", build_dir());
    if (sy_plugin_registry_load_dir(&reg, dir, err, sizeof err) != 0) return -1;
    snprintf(dir, sizeof dir, "%s/tests/plugin-fixtures", build_dir());
    if (sy_plugin_registry_load_file(&legacy, dir, "old-minor.so") != 0) return -1;
    if (sy_plugin_registry_load_file(&legacy, dir, "old-minor-1.so") != 0) return -1;
    return 0;
}

static int teardown(void **state) {
    (void)state;
    sy_plugin_registry_close(&reg);
    sy_plugin_registry_close(&legacy);
    return 0;
}

/* ---- the checker --------------------------------------------------------------------------------------------- */

static sy_option_spec spec(const char *key, uint32_t type, const char *def, double min, double max) {
    return (sy_option_spec){sizeof(sy_option_spec), key, type, def, "help", min, max, NULL};
}

static void expect_bad(const sy_option_spec *specs, uint32_t n, const char *needle) {
    sy_plugin_options_api api = {sizeof api, n, sizeof(sy_option_spec), specs};
    char why[320] = "";
    if (sy_option_schema_check(&api, why, sizeof why) == 0 || strstr(why, needle) == NULL)
        fail_msg("expected a refusal containing \"%s\", got \"%s\"", needle, why);
}

static void the_checker_refuses_malformed_tables(void **state) {
    (void)state;
    sy_option_spec s[3];
    s[0] = spec("threads", SY_OPTION_UINT, "4", 1, 8);
    s[1] = spec("keep", SY_OPTION_BOOL, "off", 0, 0);
    sy_plugin_options_api api = {sizeof api, 2, sizeof(sy_option_spec), s};
    char why[320];
    assert_int_equal(sy_option_schema_check(&api, why, sizeof why), 0);

    s[1] = spec("threads", SY_OPTION_BOOL, "", 0, 0);
    expect_bad(s, 2, "option 1 (threads): declared twice (also option 0)");
    s[1] = spec("Threads", SY_OPTION_UINT, "", 0, 1);
    expect_bad(s, 2, "option 1: the key is not [a-z0-9_.]");
    s[1] = spec("", SY_OPTION_UINT, "", 0, 1);
    expect_bad(s, 2, "option 1: the key");
    s[1] = spec("x", 9, "", 0, 0);
    expect_bad(s, 2, "option 1 (x): unknown type 9");
    s[1] = spec("x", SY_OPTION_UINT, "", 5, 4);
    expect_bad(s, 2, "option 1 (x): min 5 is above max 4");
    s[1] = spec("x", SY_OPTION_UINT, "", -1, 4);
    expect_bad(s, 2, "whole numbers");
    s[1] = spec("x", SY_OPTION_UINT, "", 0.5, 4);
    expect_bad(s, 2, "whole numbers");
    s[1] = spec("x", SY_OPTION_NUMBER, "", 0, 1.0 / 0.0);
    expect_bad(s, 2, "not finite");
    s[1] = spec("x", SY_OPTION_UINT, "9", 0, 4);
    expect_bad(s, 2, "option 1 (x): the default '9' is out of range (0..4)");
    s[1] = spec("x", SY_OPTION_BOOL, "maybe", 0, 0);
    expect_bad(s, 2, "the default 'maybe' is not true or false");
    s[1] = spec("x", SY_OPTION_NUMBER, "1e", 0, 4);
    expect_bad(s, 2, "the default '1e' is not a number");
    s[1] = spec("x", SY_OPTION_STRING, NULL, 0, 0);
    expect_bad(s, 2, "the default is missing");
    s[1] = spec("x", SY_OPTION_STRING, "", 0, 0);
    s[1].help = "two\nlines";
    expect_bad(s, 2, "the help is missing or not one printable line");
    s[1] = spec("x", SY_OPTION_STRING, "", 0, 0);
    s[1].struct_size = 8;
    expect_bad(s, 2, "option 1: struct_size 8");
    /* 1.3 choices: for strings only, comma-separated words, the default among them */
    s[1] = spec("x", SY_OPTION_UINT, "", 0, 4);
    s[1].choices = "a,b";
    expect_bad(s, 2, "option 1 (x): choices are for string options only");
    static const char *const bad_choices[] = {"", "a,,b", ",a", "a,", "a, b", "a\nb"};
    for (size_t i = 0; i < sizeof bad_choices / sizeof *bad_choices; i++) {
        s[1] = spec("x", SY_OPTION_STRING, "", 0, 0);
        s[1].choices = bad_choices[i];
        expect_bad(s, 2, "option 1 (x): the choices are not one line of comma-separated values");
    }
    s[1] = spec("x", SY_OPTION_STRING, "q4_0", 0, 0);
    s[1].choices = "f16,q8_0,f32";
    expect_bad(s, 2, "option 1 (x): the default 'q4_0' is not one of f16,q8_0,f32");
    s[1].default_value = "q8_0";
    assert_int_equal(sy_option_schema_check(&api, why, sizeof why), 0);

    /* The table itself. */
    s[1] = spec("x", SY_OPTION_STRING, "", 0, 0);
    sy_plugin_options_api t = {sizeof t, 2, sizeof(sy_option_spec) - 4, s};
    assert_int_equal(sy_option_schema_check(&t, why, sizeof why), -1);
    assert_non_null(strstr(why, "spec_size"));
    t = (sy_plugin_options_api){sizeof t, 2, sizeof(sy_option_spec), NULL};
    assert_int_equal(sy_option_schema_check(&t, why, sizeof why), -1);
    t = (sy_plugin_options_api){sizeof t, SY_OPTION_SCHEMA_MAX + 1, sizeof(sy_option_spec), s};
    assert_int_equal(sy_option_schema_check(&t, why, sizeof why), -1);
    t = (sy_plugin_options_api){8, 2, sizeof(sy_option_spec), s};
    assert_int_equal(sy_option_schema_check(&t, why, sizeof why), -1);
    t = (sy_plugin_options_api){sizeof t, 0, 0, NULL}; /* declares that it takes no options */
    assert_int_equal(sy_option_schema_check(&t, why, sizeof why), 0);
    assert_int_equal(sy_option_schema_check(NULL, why, sizeof why), -1);
}

static void values_are_checked_and_normalized(void **state) {
    (void)state;
    char norm[SY_OPTION_NORM_MAX], why[320];
    sy_option_spec u = spec("n", SY_OPTION_UINT, "", 1, 1024), b = spec("b", SY_OPTION_BOOL, "", 0, 0),
                   d = spec("d", SY_OPTION_NUMBER, "", -1, 1), big = spec("s", SY_OPTION_UINT, "", 0, (double)UINT64_MAX);
    assert_string_equal(sy_option_value_check(&u, "0012", norm, why, sizeof why), "12");
    assert_null(sy_option_value_check(&u, "0", norm, why, sizeof why));
    assert_string_equal(why, "'0' is out of range (1..1024)");
    static const char *const bad_whole[] = {"", " 1", "+1", "-1", "1x", "1.0", "0x10"};
    for (size_t i = 0; i < sizeof bad_whole / sizeof *bad_whole; i++)
        assert_null(sy_option_value_check(&u, bad_whole[i], norm, why, sizeof why));
    assert_string_equal(sy_option_value_check(&big, "18446744073709551615", norm, why, sizeof why),
                        "18446744073709551615");
    assert_null(sy_option_value_check(&big, "18446744073709551616", norm, why, sizeof why)); /* overflow */
    assert_string_equal(sy_option_value_check(&b, "YES", norm, why, sizeof why), "1");
    assert_string_equal(sy_option_value_check(&b, "off", norm, why, sizeof why), "0");
    assert_null(sy_option_value_check(&b, "2", norm, why, sizeof why));
    assert_string_equal(sy_option_value_check(&d, "-0.25", norm, why, sizeof why), "-0.25");
    assert_string_equal(sy_option_value_check(&d, "1e-3", norm, why, sizeof why), "1e-3");
    static const char *const bad_number[] = {"inf", "nan", ".", "-", "0x1", " 1", "2", "1e999"};
    for (size_t i = 0; i < sizeof bad_number / sizeof *bad_number; i++)
        assert_null(sy_option_value_check(&d, bad_number[i], norm, why, sizeof why));
    /* a string with choices (1.3) takes exactly one of them; a 1.2 spec (no room for choices) takes any text */
    sy_option_spec c = spec("cache_type_k", SY_OPTION_STRING, "f16", 0, 0);
    c.choices = "f16,q8_0,f32";
    static const char *const good[] = {"f16", "q8_0", "f32"};
    for (size_t i = 0; i < 3; i++) assert_string_equal(sy_option_value_check(&c, good[i], norm, why, sizeof why), good[i]);
    static const char *const bad_choice[] = {"", "F16", "q8", "q8_0,f32", "f16 ", "q4_0", "f1"};
    for (size_t i = 0; i < sizeof bad_choice / sizeof *bad_choice; i++)
        assert_null(sy_option_value_check(&c, bad_choice[i], norm, why, sizeof why));
    assert_null(sy_option_value_check(&c, "q4_0", norm, why, sizeof why));
    assert_string_equal(why, "'q4_0' is not one of f16,q8_0,f32");
    char range[96];
    assert_string_equal(sy_option_range_text(&c, range, sizeof range), "f16,q8_0,f32");
    c.struct_size = (uint32_t)SY_OPTION_SPEC_MIN_SIZE;
    assert_string_equal(sy_option_value_check(&c, "q4_0", norm, why, sizeof why), "q4_0");
}

/* ---- the bundled plugins --------------------------------------------------------------------------------------- */

typedef struct bundled {
    const char *name;
    const char *model; /* under tests/fixtures; NULL: a drafter */
    bool device;       /* needs a GPU to load: only the refusals of bad values are checked */
} bundled;

static const bundled BUNDLED[] = {
    {"gguf-quant", "stories260K/stories260K.gguf", false},
    {"qwen-cpu-mmap", "hf/qwen3-f32", false},
    {"test-engine", "test-engine/alpha.model", false},
    {"lfm2-cuda", "hf/lfm2-f32", true},
    {"spec-drafter", NULL, false},
};

static char replay_path[4096];

/* load() (or a replay drafter's create(), which reads every drafter key) with options; the status. */
static sy_status try_load(const sy_plugin *p, const bundled *b, const sy_option *o, size_t n) {
    if (b->model == NULL) {
        sy_drafter *d = NULL;
        char spec[4200];
        snprintf(spec, sizeof spec, "replay:%s", replay_path);
        sy_status st = p->drafter->create(spec, "target", 300, o, n, &d);
        if (st == SY_OK) p->drafter->destroy(d);
        return st;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/fixtures/%s", source_dir(), b->model);
    sy_model *m = NULL;
    sy_status st = p->engine->load(path, o, n, &m);
    if (st == SY_OK) p->engine->unload(m);
    return st;
}

static void every_bundled_schema_matches_its_load(void **state) {
    (void)state;
    snprintf(replay_path, sizeof replay_path, "%s/replay-XXXXXX", P_tmpdir);
    int fd = mkstemp(replay_path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "1 2 3 4 5 6\n", 12), 12);
    close(fd);
    size_t checked = 0;
    for (size_t i = 0; i < sizeof BUNDLED / sizeof *BUNDLED; i++) {
        const bundled *b = &BUNDLED[i];
        const sy_plugin *p = sy_plugin_registry_find(&reg, b->name);
        if (p == NULL && b->device) continue; /* built only where the CUDA toolkit is */
        if (p == NULL) fail_msg("plugin %s did not load", b->name);
        const sy_plugin_options_api *o = p->options;
        if (o == NULL) fail_msg("plugin %s offers no " SY_PLUGIN_OPTIONS_INTERFACE_ID, b->name);
        char why[320] = "";
        if (sy_option_schema_check(o, why, sizeof why) != 0) fail_msg("%s: %s", b->name, why);
        assert_true(o->n_options > 0);

        /* Every key at its default, all at once: accepted (a GPU plugin may then lack its device). */
        sy_option all[SY_OPTION_SCHEMA_MAX];
        size_t n_all = 0;
        for (uint32_t k = 0; k < o->n_options; k++) {
            const sy_option_spec *s = sy_plugin_option(o, k);
            if (s->default_value[0] != '\0') all[n_all++] = (sy_option){s->key, s->default_value};
        }
        sy_status st = try_load(p, b, all, n_all);
        if (b->device ? st == SY_ERR_INVALID_ARGUMENT : st != SY_OK)
            fail_msg("%s: a load with every default failed (%d)", b->name, (int)st);

        /* Each whole-number key: its minimum is accepted, one past either end refused, as the schema says. */
        for (uint32_t k = 0; k < o->n_options; k++) {
            const sy_option_spec *s = sy_plugin_option(o, k);
            if (s->type != SY_OPTION_UINT) continue;
            char text[32];
            snprintf(text, sizeof text, "%.0f", s->min);
            sy_option one = {s->key, text};
            st = try_load(p, b, &one, 1);
            if (b->device ? st == SY_ERR_INVALID_ARGUMENT : st != SY_OK)
                fail_msg("%s: %s=%s (its minimum) was refused (%d)", b->name, s->key, text, (int)st);
            if (s->min > 0) {
                snprintf(text, sizeof text, "%.0f", s->min - 1);
                if (try_load(p, b, &one, 1) != SY_ERR_INVALID_ARGUMENT)
                    fail_msg("%s: %s=%s (below its range) was accepted", b->name, s->key, text);
            }
            if (s->max < 9007199254740992.0) {
                snprintf(text, sizeof text, "%.0f", s->max + 1);
                if (try_load(p, b, &one, 1) != SY_ERR_INVALID_ARGUMENT)
                    fail_msg("%s: %s=%s (above its range) was accepted", b->name, s->key, text);
            }
        }
        /* Each string key with choices: every choice loads, anything else is refused by the load itself (a host
         * older than 1.3 would pass it on). */
        for (uint32_t k = 0; k < o->n_options && !b->device; k++) {
            const sy_option_spec *s = sy_plugin_option(o, k);
            const char *choices = sy_option_choices(s);
            if (choices == NULL) continue;
            char word[64];
            for (const char *c = choices; *c;) {
                size_t len = strcspn(c, ",");
                snprintf(word, sizeof word, "%.*s", (int)len, c);
                sy_option one = {s->key, word};
                st = try_load(p, b, &one, 1);
                if (st != SY_OK) fail_msg("%s: %s=%s (one of its choices) was refused (%d)", b->name, s->key, word, (int)st);
                c += len + (c[len] == ',');
            }
            sy_option other = {s->key, "q4_0"};
            if (try_load(p, b, &other, 1) != SY_ERR_INVALID_ARGUMENT)
                fail_msg("%s: %s=q4_0 (not a choice) was accepted", b->name, s->key);
        }
        /* Every whole-number key at its maximum together (a pair like draft_ngram_min <= draft_ngram_max holds
         * then), but for the keys whose maximum costs real work (1024 threads, 2^24 tokens). */
        if (!b->device) {
            static char texts[SY_OPTION_SCHEMA_MAX][32];
            size_t n_max = 0;
            for (uint32_t k = 0; k < o->n_options; k++) {
                const sy_option_spec *s = sy_plugin_option(o, k);
                if (s->type != SY_OPTION_UINT || strcmp(s->key, "threads") == 0 || strcmp(s->key, "ctx_size") == 0)
                    continue;
                if (s->max >= 18446744073709551615.0)
                    snprintf(texts[n_max], sizeof texts[n_max], "%llu", (unsigned long long)UINT64_MAX);
                else
                    snprintf(texts[n_max], sizeof texts[n_max], "%.0f", s->max);
                all[n_max] = (sy_option){s->key, texts[n_max]};
                n_max++;
            }
            st = try_load(p, b, all, n_max);
            if (st != SY_OK) fail_msg("%s: a load with every key at its maximum failed (%d)", b->name, (int)st);
        }
        checked++;
    }
    unlink(replay_path);
    assert_true(checked >= 4);
}

/* ---- the config, through the real plugins ---------------------------------------------------------------------- */

static sy_config *checked_config(const char *text, const sy_plugin_registry *r) {
    sy_config *cfg = sy_config_load_string(text, strlen(text), "demo.ini", "/base");
    assert_true(sy_config_ok(cfg));
    sy_config_check_plugin_options(cfg, r);
    return cfg;
}

static void config_keys_are_checked_against_the_plugin(void **state) {
    (void)state;
    sy_config *cfg = checked_config("[model.qwen]\nplugin = gguf-quant\npath = q.gguf\nthread = 4\n"
                                    "kv_cache_dir = kv\nkeep_kv_cache = yes\n",
                                    &reg);
    assert_false(sy_config_ok(cfg));
    assert_int_equal(cfg->n_errors, 1);
    assert_string_equal(cfg->errors[0], "demo.ini:4: [model.qwen] thread: not a model key, nor an option of plugin "
                                        "gguf-quant (its options: threads, ctx_size, backend, kv_cache_dir, "
                                        "kv_max_tokens, kv_buffer_mb, keep_kv_cache, cache_type_k, cache_type_v)");
    assert_string_equal(sy_config_model_option(&cfg->models[0], "kv_cache_dir"), "/base/kv");
    assert_string_equal(sy_config_model_option(&cfg->models[0], "keep_kv_cache"), "1");
    sy_config_free(cfg);

    /* The KV cache types: llama.cpp's keys; a value this engine does not store is refused with the choices. */
    cfg = checked_config("[model.qwen]\nplugin = gguf-quant\npath = q.gguf\ncache_type_k = q8_0\ncache_type_v = q4_0\n",
                         &reg);
    assert_int_equal(cfg->n_errors, 1);
    assert_string_equal(cfg->errors[0], "demo.ini:5: [model.qwen] cache_type_v: 'q4_0' is not one of f16,q8_0,f32");
    assert_string_equal(sy_config_model_option(&cfg->models[0], "cache_type_k"), "q8_0");
    sy_config_free(cfg);

    /* Values against the declared range; a key of another plugin is no key of this one. */
    cfg = checked_config("[model.te]\nplugin = test-engine\npath = a.model\nn_ctx = 0\nthreads = 2\n", &reg);
    assert_int_equal(cfg->n_errors, 2);
    assert_string_equal(cfg->errors[0], "demo.ini:4: [model.te] n_ctx: '0' is out of range (1..1048576)");
    assert_non_null(strstr(cfg->errors[1], "demo.ini:5: [model.te] threads: not a model key, nor an option of plugin "
                                           "test-engine (its options: n_ctx, "));
    sy_config_free(cfg);

    /* A drafting model may also take its drafter's keys. */
    cfg = checked_config("[model.te]\nplugin = test-engine\npath = a.model\ndraft = ngram\ndraft_ngram_max = 3\n"
                         "draft_ngram = 3\n",
                         &reg);
    assert_int_equal(cfg->n_errors, 1);
    assert_non_null(strstr(cfg->errors[0], "demo.ini:6: [model.te] draft_ngram: not a model key, nor an option of "
                                           "plugins test-engine, spec-drafter (their options: "));
    assert_string_equal(sy_config_model_option(&cfg->models[0], "draft_ngram_max"), "3");
    sy_config_free(cfg);
    cfg = checked_config("[model.te]\nplugin = test-engine\npath = a.model\ndraft_ngram_max = 3\n", &reg);
    assert_int_equal(cfg->n_errors, 1); /* not without a drafter */
    sy_config_free(cfg);

    /* A plugin that is not there cannot be asked: the model's load will fail and say so. */
    cfg = checked_config("[model.x]\nplugin = no-such-plugin\npath = x\nthreads = 2\n", &reg);
    assert_true(sy_config_ok(cfg));
    assert_int_equal(cfg->n_warnings, 1);
    assert_non_null(strstr(cfg->warnings[0], "plugin 'no-such-plugin' did not load"));
    sy_config_free(cfg);
}

/* Plugins of ABI 1.0 and 1.1 still load; they cannot declare options, so their models' keys pass, with a
 * warning each, and so do the command line's. */
static void older_plugins_get_their_keys_unchecked(void **state) {
    (void)state;
    for (const char *name = "fixture-old-minor\0fixture-old-minor-1\0"; *name; name += strlen(name) + 1) {
        const sy_plugin *p = sy_plugin_registry_find(&legacy, name);
        assert_non_null(p);
        assert_true(p->entry->abi_minor < 2);
        assert_null(p->options);
        char text[256];
        snprintf(text, sizeof text, "[model.old]\nplugin = %s\npath = m\nfancy_knob = On\n", name);
        sy_config *cfg = checked_config(text, &legacy);
        assert_true(sy_config_ok(cfg));
        assert_int_equal(cfg->n_warnings, 1);
        char want[256];
        snprintf(want, sizeof want, "demo.ini:4: [model.old] fancy_knob: passed to the plugin unchecked: plugin %s "
                 "(ABI 1.%u) declares no options", name, (unsigned)p->entry->abi_minor);
        assert_string_equal(cfg->warnings[0], want);
        assert_string_equal(sy_config_model_option(&cfg->models[0], "fancy_knob"), "On"); /* verbatim */
        sy_config_free(cfg);

        sy_engine_options eo;
        sy_engine_options_init(&eo);
        sy_engine_options_set(&eo, "fancy_knob", "On", "-o/--option");
        char err[512] = "";
        assert_int_equal(sy_engine_options_check(&eo, p, NULL, err, sizeof err), 0);
        assert_string_equal(eo.items[0].value, "On");
        sy_engine_options_free(&eo);
    }
}

/* The example configs hold only keys their plugins declare. */
static void example_configs_pass_the_plugins(void **state) {
    (void)state;
    for (const char *f = "configs/demo.ini\0configs/llama-swap-style.ini\0"; *f; f += strlen(f) + 1) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", source_dir(), f);
        sy_config *cfg = sy_config_load_file(path);
        sy_config_check_plugin_options(cfg, &reg);
        if (!sy_config_ok(cfg) || cfg->n_warnings != 0) {
            sy_config_print_diagnostics(cfg, stderr);
            fail_msg("%s", f);
        }
        sy_config_free(cfg);
    }
}

/* ---- the command line ------------------------------------------------------------------------------------------- */

static void command_line_options_are_checked(void **state) {
    (void)state;
    const sy_plugin *te = sy_plugin_registry_find(&reg, "test-engine"), *gq = sy_plugin_registry_find(&reg, "gguf-quant"),
                    *sd = sy_plugin_registry_find(&reg, "spec-drafter");
    assert_non_null(te);
    assert_non_null(gq);
    assert_non_null(sd);
    char err[512];
    struct option longopts[16];
    size_t n = sy_engine_options_getopt(longopts, 16);
    int threads_code = -1, keep_code = -1, ctk_code = -1;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(longopts[i].name, "threads") == 0) threads_code = longopts[i].val;
        if (strcmp(longopts[i].name, "keep-kv-cache") == 0) keep_code = longopts[i].val;
        if (strcmp(longopts[i].name, "cache-type-k") == 0) ctk_code = longopts[i].val;
    }

    /* llama.cpp's -ctk / -ctv become the long flags before getopt; "--" ends the options */
    char a0[] = "generate", a1[] = "-ctk", a2[] = "q8_0", a3[] = "-ctv", a4[] = "--", a5[] = "-ctk";
    char *argv[] = {a0, a1, a2, a3, a4, a5};
    sy_engine_options_rewrite_aliases(6, argv);
    assert_string_equal(argv[1], "--cache-type-k");
    assert_string_equal(argv[2], "q8_0");
    assert_string_equal(argv[3], "--cache-type-v");
    assert_string_equal(argv[5], "-ctk");
    sy_engine_options eo_kv;
    sy_engine_options_init(&eo_kv);
    assert_int_equal(sy_engine_options_handle(&eo_kv, ctk_code, "q8_0", err, sizeof err), 1);
    assert_string_equal(eo_kv.items[0].key, "cache_type_k");
    assert_int_equal(sy_engine_options_check(&eo_kv, gq, NULL, err, sizeof err), 0);
    assert_int_equal(sy_engine_options_handle(&eo_kv, ctk_code, "bf16", err, sizeof err), 1);
    assert_int_equal(sy_engine_options_check(&eo_kv, gq, NULL, err, sizeof err), -1);
    assert_string_equal(err, "--cache-type-k: 'bf16' is not one of f16,q8_0,f32");
    sy_engine_options_free(&eo_kv);

    sy_engine_options eo;
    sy_engine_options_init(&eo);
    assert_int_equal(sy_engine_options_handle(&eo, threads_code, "4", err, sizeof err), 1);
    assert_int_equal(sy_engine_options_handle(&eo, keep_code, NULL, err, sizeof err), 1);
    assert_int_equal(sy_engine_options_check(&eo, gq, NULL, err, sizeof err), 0);
    /* The documented flag, but not an option of this plugin. */
    assert_int_equal(sy_engine_options_check(&eo, te, NULL, err, sizeof err), -1);
    assert_non_null(strstr(err, "--threads: plugin test-engine has no option 'threads' (its options: n_ctx, "));
    sy_engine_options_free(&eo);

    sy_engine_options_init(&eo);
    assert_int_equal(sy_engine_options_handle(&eo, 'o', "keep_kv_cache=TRUE", err, sizeof err), 1);
    assert_int_equal(sy_engine_options_handle(&eo, 'o', "=x", err, sizeof err), -1);
    assert_int_equal(sy_engine_options_check(&eo, gq, NULL, err, sizeof err), 0);
    assert_string_equal(eo.items[0].value, "1"); /* normalized: the CPU engines read lower-case words only */
    assert_int_equal(sy_engine_options_handle(&eo, 'o', "kv_buffer_mb=lots", err, sizeof err), 1);
    assert_int_equal(sy_engine_options_check(&eo, gq, NULL, err, sizeof err), -1);
    assert_string_equal(err, "-o kv_buffer_mb: 'lots' is not a whole number");
    sy_engine_options_free(&eo);

    /* With a drafter, its keys count too. */
    sy_engine_options_init(&eo);
    assert_int_equal(sy_engine_options_handle(&eo, 'o', "draft_ngram_max=3", err, sizeof err), 1);
    assert_int_equal(sy_engine_options_check(&eo, te, NULL, err, sizeof err), -1);
    assert_int_equal(sy_engine_options_check(&eo, te, sd, err, sizeof err), 0);
    assert_int_equal(sy_engine_options_handle(&eo, 'o', "draft_ngram_max=99", err, sizeof err), 1);
    assert_int_equal(sy_engine_options_check(&eo, te, sd, err, sizeof err), -1);
    assert_string_equal(err, "-o draft_ngram_max: '99' is out of range (1..32)");
    sy_engine_options_free(&eo);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(the_checker_refuses_malformed_tables),
        cmocka_unit_test(values_are_checked_and_normalized),
        cmocka_unit_test(every_bundled_schema_matches_its_load),
        cmocka_unit_test(config_keys_are_checked_against_the_plugin),
        cmocka_unit_test(older_plugins_get_their_keys_unchecked),
        cmocka_unit_test(example_configs_pass_the_plugins),
        cmocka_unit_test(command_line_options_are_checked),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
