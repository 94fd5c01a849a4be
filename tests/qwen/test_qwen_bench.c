/* `switchyard bench` on a fixture checkpoint: the JSON it prints has every quantity, with values that make sense
 * for what was asked (token counts, positive rates, memory the process really holds), with the KV in RAM and on
 * disk; impossible requests are refused with a message and a failing exit status. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <cjson/cJSON.h>

#include "qwen_test_util.h"

/* Runs the command; returns its exit status, stdout in *out (caller frees). */
static int run(const char *cmd, char **out) {
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    size_t got;
    while ((got = fread(buf + n, 1, cap - 1 - n, p)) > 0) n += got;
    buf[n] = '\0';
    int status = pclose(p);
    *out = buf;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static double number(const cJSON *root, const char *key) {
    const cJSON *v = cJSON_GetObjectItem(root, key);
    if (!cJSON_IsNumber(v)) fail_msg("bench JSON: no number %s", key);
    return v->valuedouble;
}

static void bench_command(char *cmd, size_t size, const char *extra) {
    const char *build = getenv("SY_BUILD_DIR"), *src = getenv("SY_SOURCE_DIR");
    snprintf(cmd, size,
             "'%s/bin/switchyard' bench --plugin-dir '%s/plugins' --plugin qwen-cpu-mmap "
             "--model '%s/tests/fixtures/hf/qwen3-tied-bf16' --threads 1 %s",
             build ? build : ".", build ? build : ".", src ? src : ".", extra);
}

static void test_bench_json(void **state) {
    (void)state;
    char *dir = qt_temp_dir();
    for (int disk = 0; disk < 2; disk++) {
        char extra[1200], cmd[4096], *out;
        snprintf(extra, sizeof extra, "-p 40 -n 20 --json%s%s", disk ? " --kv-cache-dir " : "", disk ? dir : "");
        bench_command(cmd, sizeof cmd, extra);
        assert_int_equal(run(cmd, &out), 0);
        cJSON *r = cJSON_Parse(out);
        if (r == NULL) fail_msg("bench printed no JSON: %s", out);
        assert_string_equal(cJSON_GetObjectItem(r, "plugin")->valuestring, "qwen-cpu-mmap");
        assert_string_equal(cJSON_GetObjectItem(r, "weight_dtype")->valuestring, "bf16");
        assert_int_equal((int)number(r, "threads"), 1);
        assert_int_equal((int)number(r, "prompt_tokens"), 40);
        assert_int_equal((int)number(r, "gen_tokens"), 20);
        assert_true(number(r, "load_s") > 0 && number(r, "first_token_s") > 0);
        assert_true(number(r, "load_plus_first_token_s") >= number(r, "load_s"));
        assert_true(number(r, "prefill_tok_s") > 0 && number(r, "decode_tok_s") > 0);
        /* tokens / rate = seconds, as printed (to rounding) */
        double decode = number(r, "gen_tokens") / number(r, "decode_tok_s");
        assert_true(decode > 0.99 * number(r, "decode_s") - 1e-3 && decode < 1.01 * number(r, "decode_s") + 1e-3);
        assert_true(number(r, "peak_rss_mb") >= number(r, "rss_mb") && number(r, "rss_mb") > 0);
        assert_true(number(r, "anon_rss_mb") > 0 && number(r, "file_rss_mb") > 0);
        /* the fixture's mapped safetensors, and 60 positions of KV (in RAM or in a 64-position disk group) */
        assert_true(number(r, "mapped_mb") > 0.1);
        assert_true(number(r, "kv_mb") > 0);
        cJSON_Delete(r);
        free(out);
    }
    assert_int_equal(qt_count_entries(dir), 0); /* the disk KV files went with the model */
    qt_remove_tree(dir);
    free(dir);
}

static void test_bench_refuses_what_cannot_run(void **state) {
    (void)state;
    char cmd[4096], *out;
    bench_command(cmd, sizeof cmd, "-p 250 -n 20 2>&1"); /* the fixture's context is 256 tokens */
    assert_int_not_equal(run(cmd, &out), 0);
    assert_non_null(strstr(out, "do not fit the context"));
    free(out);
    bench_command(cmd, sizeof cmd, "-p 0 2>&1");
    assert_int_not_equal(run(cmd, &out), 0);
    assert_non_null(strstr(out, "-p"));
    free(out);
    bench_command(cmd, sizeof cmd, "--threads 0 2>&1");
    assert_int_not_equal(run(cmd, &out), 0);
    assert_non_null(strstr(out, "threads"));
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bench_json),
        cmocka_unit_test(test_bench_refuses_what_cannot_run),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
