/* Tests of process models, peers, selectors and macros in the config (host/config/config.c, macros.c), of the
 * command splitter of process models (host/manager/process_model.c), and of the llama-swap importer on small
 * inputs (host/config/llama_swap_import.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "config/config.h"
#include "config/llama_swap_import.h"
#include "manager/process_model.h"

static sy_config *load(const char *text) { return sy_config_load_string(text, strlen(text), "p.ini", "/base"); }

static bool has_error(const sy_config *cfg, const char *needle) {
    for (size_t i = 0; i < cfg->n_errors; i++)
        if (strstr(cfg->errors[i], needle) != NULL) return true;
    return false;
}

static void test_macros_and_ports(void **state) {
    (void)state;
    setenv("SY_TEST_DIR", "/opt/m", 1);
    sy_config *cfg = load("[host]\nstart_port = 7000\n"
                          "[macros]\nSRV = /bin/server --dir ${env.SY_TEST_DIR}\nARGS = --port ${PORT} -m ${MODEL_ID}\n"
                          "[model.a]\ncmd = ${SRV} ${ARGS} \\\n  --ctx 4096\n"
                          "[model.b]\ncmd = /bin/b --listen ${PORT}\ncmd_stop = kill -INT ${PID}\n"
                          "proxy = http://127.0.0.1:${PORT}/base\ncheck_endpoint = none\n"
                          "[model.c]\ncmd = /bin/c\nproxy = http://10.0.0.1:9\n");
    sy_config_print_diagnostics(cfg, stderr);
    assert_true(sy_config_ok(cfg));
    const sy_config_model *a = sy_config_find_model(cfg, "a"), *b = sy_config_find_model(cfg, "b");
    const sy_config_model *c = sy_config_find_model(cfg, "c");
    assert_string_equal(a->cmd, "/bin/server --dir /opt/m --port 7000 -m a --ctx 4096");
    assert_int_equal(a->port, 7000);
    assert_string_equal(a->proxy, "http://127.0.0.1:7000");
    assert_string_equal(a->check_endpoint, "/health");
    assert_string_equal(b->cmd, "/bin/b --listen 7001");
    assert_string_equal(b->cmd_stop, "kill -INT ${PID}");
    assert_string_equal(b->proxy, "http://127.0.0.1:7001/base");
    assert_string_equal(b->check_endpoint, "none");
    assert_int_equal(c->port, 0); /* uses no ${PORT}: none taken */
    assert_null(a->plugin);
    sy_config_free(cfg);
}

static void test_process_errors(void **state) {
    (void)state;
    unsetenv("SY_TEST_UNSET");
    const struct {
        const char *text, *error;
    } cases[] = {
        {"[model.a]\ncmd = x ${NOPE}\n", "p.ini:2: [model.a]: cmd: ${NOPE} is not a macro"},
        {"[model.a]\ncmd = x ${env.SY_TEST_UNSET}\n", "the environment variable SY_TEST_UNSET is not set"},
        {"[model.a]\ncmd = x ${PID}\n", "${PID} is known only in cmd_stop"},
        {"[model.a]\ncmd = x ${PORT\n", "without a closing }"},
        {"[macros]\nA = ${B}\nB = ${A}\n[model.a]\ncmd = ${A}\n", "nest deeper"},
        {"[macros]\nPORT = 1\n", "${PORT} is set by switchyard"},
        {"[model.a]\ncmd = x\npath = /m\n", "takes no plugin or path"},
        {"[model.a]\ncmd = x\nthreads = 4\n", "not a key of a process model"},
        {"[model.a]\ncmd = x\nproxy = ftp://h\n", "is not an http:// or https:// URL"},
        {"[model.a]\ncmd = x\nset_params = [1]\n", "is not a JSON object"},
        {"[model.a]\ncmd = x\nenv = =x\n", "is not NAME=VALUE"},
        {"[model.a]\nplugin = p\npath = /m\nmemory = 1G\n", "only a model with 'cmd' takes this key"},
        {"[host]\nstart_port = 65535\n[model.a]\ncmd = ${PORT}\n[model.b]\ncmd = ${PORT}\n", "no port is left"},
        {"[peer.p]\nurl = h\nmodels = a\n", "is not an http:// or https:// URL"},
        {"[model.a]\ncmd = x\n[peer.p]\nurl = http://h\nmodels = a\n", "'a' is already a model"},
        {"[model.a]\ncmd = x\n[selector.s]\nstrategy = best\ntargets = a\n", "is not a strategy"},
        {"[model.a]\ncmd = x\n[selector.s]\ntargets = a, b\n", "'b' names no configured model"},
        {"[model.a]\ncmd = x\n[selector.a]\ntargets = a\n", "'a' already names model 'a'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        sy_config *cfg = load(cases[i].text);
        if (!has_error(cfg, cases[i].error)) {
            sy_config_print_diagnostics(cfg, stderr);
            fail_msg("case %zu: no error containing \"%s\"", i, cases[i].error);
        }
        sy_config_free(cfg);
    }
}

static void test_env_lists(void **state) {
    (void)state;
    sy_config *cfg = load("[model.a]\ncmd = x\nenv = CUDA_VISIBLE_DEVICES=0,1, HF_HOME=/h,  X_Y=a=b\n  LAST=1,2,3\n");
    assert_true(sy_config_ok(cfg));
    const sy_config_model *a = sy_config_find_model(cfg, "a");
    assert_int_equal(a->env.count, 4);
    assert_string_equal(a->env.items[0], "CUDA_VISIBLE_DEVICES=0,1");
    assert_string_equal(a->env.items[1], "HF_HOME=/h");
    assert_string_equal(a->env.items[2], "X_Y=a=b");
    assert_string_equal(a->env.items[3], "LAST=1,2,3");
    sy_config_free(cfg);
}

static void test_peers_and_selectors(void **state) {
    (void)state;
    sy_config *cfg = load("[peer.remote]\nurl = https://api.example/v1/\napi_key = k\nmodels = r1, org/r2\n"
                          "strip_params = temperature\n"
                          "[model.local]\ncmd = x\nunlisted = true\nname = Local\nmetadata = {\"a\": 1,\n  \"b\": [2]}\n"
                          "[selector.pick]\nstrategy = spillover\ntargets = local, org/r2\nspillover = 3\n");
    sy_config_print_diagnostics(cfg, stderr);
    assert_true(sy_config_ok(cfg));
    const sy_config_model *r2 = sy_config_find_model(cfg, "org/r2");
    assert_non_null(r2);
    assert_string_equal(r2->peer, "remote");
    assert_int_equal(r2->strip_params.count, 1);
    assert_string_equal(sy_config_find_model(cfg, "local")->metadata, "{\"a\": 1, \"b\": [2]}");
    assert_int_equal(cfg->n_selectors, 1);
    assert_int_equal(cfg->selectors[0].strategy, SY_SELECT_SPILLOVER);
    assert_int_equal(cfg->selectors[0].spillover, 3);
    assert_string_equal(cfg->selectors[0].targets.items[1], "org/r2");
    /* A peer's models are in a group of their own: they never swap ours out. */
    assert_string_equal(r2->group, "peer.remote");
    sy_config_free(cfg);
}

static void split_is(const char *cmd, const char *const *want, size_t n) {
    char why[200];
    size_t got = 0;
    char **w = sy_process_split_command(cmd, &got, why, sizeof why);
    assert_non_null(w);
    assert_int_equal(got, n);
    for (size_t i = 0; i < n; i++) assert_string_equal(w[i], want[i]);
    assert_null(w[n]);
    sy_process_free_words(w, got);
}

static void test_command_split(void **state) {
    (void)state;
    split_is("a b\tc", (const char *const[]){"a", "b", "c"}, 3);
    split_is("srv --model '/m/x y.gguf' --ctx 4\\", (const char *const[]){"srv", "--model", "/m/x y.gguf", "--ctx", "4"}, 5);
    split_is("x \"a \\\"q\\\" $ b\" c\\ d", (const char *const[]){"x", "a \"q\" $ b", "c d"}, 3);
    split_is("x ''", (const char *const[]){"x", ""}, 2);
    char why[200];
    size_t n;
    assert_null(sy_process_split_command("x 'open", &n, why, sizeof why));
    assert_non_null(strstr(why, "unclosed '"));
    assert_null(sy_process_split_command("x \"open", &n, why, sizeof why));
    assert_null(sy_process_split_command("   ", &n, why, sizeof why));
    assert_non_null(strstr(why, "empty"));
}

static void test_import_small(void **state) {
    (void)state;
    const char *yaml = "startPort: 9000\nglobalTTL: 300\nmacros:\n  srv: /bin/llama-server --port ${PORT}\n"
                       "models:\n  m1:\n    macros: {ctx: 8192}\n    cmd: |\n      ${srv}\n      # a comment\n"
                       "      --ctx-size ${ctx} \\\n      -ngl 99\n    aliases: [one]\n    env: [\"A=1,2\"]\n"
                       "  'bad name':\n    cmd: x\n"
                       "groups:\n  g: {swap: false, members: [m1, ghost]}\n"
                       "hooks: {on_startup: {preload: [m1]}}\nnewThing: 1\n";
    sy_buf ini, report;
    sy_buf_init(&ini);
    sy_buf_init(&report);
    char err[300];
    assert_int_equal(sy_llama_swap_import(yaml, strlen(yaml), "s.yaml", &ini, &report, err, sizeof err), 0);
    sy_buf_append(&ini, "", 1);
    sy_buf_append(&report, "", 1);
    assert_non_null(strstr(ini.data, "[model.m1]\ncmd = ${srv} --ctx-size 8192 -ngl 99\n"));
    assert_non_null(strstr(ini.data, "preload = true\n"));
    assert_non_null(strstr(ini.data, "ttl = 300\n"));
    assert_non_null(strstr(ini.data, "[group.g]\nswap = false\nmembers = m1\n"));
    assert_non_null(strstr(report.data, "s.yaml: models.bad name: 'bad name' is not a switchyard model name"));
    assert_non_null(strstr(report.data, "member 'ghost' is not an imported model"));
    assert_non_null(strstr(report.data, "s.yaml: newThing: not a llama-swap key switchyard knows; dropped"));
    sy_config *cfg = sy_config_load_string(ini.data, ini.len - 1, "i.ini", "/base");
    sy_config_print_diagnostics(cfg, stderr);
    assert_true(sy_config_ok(cfg));
    assert_string_equal(sy_config_find_model(cfg, "one")->cmd, "/bin/llama-server --port 9000 --ctx-size 8192 -ngl 99");
    sy_config_free(cfg);
    sy_buf_free(&ini);
    sy_buf_free(&report);
    sy_buf_init(&ini);
    sy_buf_init(&report);
    assert_int_equal(sy_llama_swap_import("- a\n- b\n", 8, "l.yaml", &ini, &report, err, sizeof err), -1);
    assert_non_null(strstr(err, "not a mapping"));
    assert_int_equal(sy_llama_swap_import("a: [\n", 5, "l.yaml", &ini, &report, err, sizeof err), -1);
    assert_non_null(strstr(err, "l.yaml:"));
    sy_buf_free(&ini);
    sy_buf_free(&report);
}

/* --native: llama-server's context, threads and sampling flags become the gguf-quant model's keys and request
 * defaults, and the result loads. */
static void test_import_native(void **state) {
    (void)state;
    const char *yaml = "models:\n  q:\n    cmd: /opt/llama-server --port ${PORT} -m /m/q.gguf -c 4096 -t 2 "
                       "--temp 0.6 --top-k 20 --top-p 0.95 --temp 0.7 -n -1 --seed 7 --jinja\n";
    sy_buf ini, report;
    sy_buf_init(&ini);
    sy_buf_init(&report);
    char err[300];
    assert_int_equal(sy_llama_swap_import_native(yaml, strlen(yaml), "n.yaml", true, &ini, &report, err, sizeof err), 0);
    sy_buf_append(&ini, "", 1);
    sy_buf_append(&report, "", 1);
    assert_non_null(strstr(ini.data, "plugin = gguf-quant\n"));
    assert_non_null(strstr(ini.data, "ctx_size = 4096\n"));
    assert_non_null(strstr(ini.data, "defaults.temperature = 0.7\n")); /* the last of two */
    assert_non_null(strstr(ini.data, "defaults.top_k = 20\n"));
    assert_non_null(strstr(ini.data, "defaults.top_p = 0.95\n"));
    assert_non_null(strstr(ini.data, "defaults.seed = 7\n"));
    assert_null(strstr(ini.data, "max_tokens"));
    assert_non_null(strstr(report.data, "-n -1: no limit"));
    sy_config *cfg = sy_config_load_string(ini.data, ini.len - 1, "n.ini", "/base");
    sy_config_print_diagnostics(cfg, stderr);
    assert_true(sy_config_ok(cfg));
    assert_int_equal(sy_config_find_model(cfg, "q")->n_request_params, 4);
    sy_config_free(cfg);
    sy_buf_free(&ini);
    sy_buf_free(&report);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_macros_and_ports),    cmocka_unit_test(test_process_errors),
        cmocka_unit_test(test_env_lists),           cmocka_unit_test(test_peers_and_selectors),
        cmocka_unit_test(test_command_split),       cmocka_unit_test(test_import_small),
        cmocka_unit_test(test_import_native),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
