/* The server's pure parts: listen addresses, UTF-8 repair, JSON field checks, chat messages, metrics text. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "api/messages.h"
#include "api/request.h"
#include "base/buf.h"
#include "base/utf8.h"
#include "http/http_access.h"
#include "http/http_server.h"
#include "api/metrics.h"
#include "persist/snapshot_store.h"

static void test_listen_address(void **state) {
    (void)state;
    char host[64], err[256];
    uint16_t port = 1;
    assert_int_equal(sy_parse_listen_address("127.0.0.1:8080", host, sizeof host, &port, err, sizeof err), 0);
    assert_string_equal(host, "127.0.0.1");
    assert_int_equal(port, 8080);
    assert_int_equal(sy_parse_listen_address("[::1]:0", host, sizeof host, &port, err, sizeof err), 0);
    assert_string_equal(host, "::1");
    assert_int_equal(port, 0);
    assert_int_equal(sy_parse_listen_address("localhost:65535", host, sizeof host, &port, err, sizeof err), 0);
    assert_string_equal(host, "localhost");
    assert_int_equal(port, 65535);

    static const char *const bad[] = {"", "8080", "127.0.0.1", "127.0.0.1:", "127.0.0.1:65536", "127.0.0.1:-1",
                                      "127.0.0.1:80x", ":8080", "::1:8080", "[::1]8080", "[::1", "[]:80",
                                      "127.0.0.1: 80"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        err[0] = '\0';
        if (sy_parse_listen_address(bad[i], host, sizeof host, &port, err, sizeof err) == 0)
            fail_msg("'%s' was accepted", bad[i]);
        assert_true(strlen(err) > 0);
    }
    char tiny[4];
    assert_int_equal(sy_parse_listen_address("localhost:80", tiny, sizeof tiny, &port, err, sizeof err), -1);
    assert_int_equal(sy_parse_listen_address(NULL, host, sizeof host, &port, err, sizeof err), -1);
}

static void test_utf8_sanitize(void **state) {
    (void)state;
    char out[32];
    assert_int_equal(sy_utf8_sanitize(out, sizeof out, "plain", 5), 5);
    assert_string_equal(out, "plain");
    /* Control characters become '?', tab and newline stay, invalid bytes become U+FFFD. */
    sy_utf8_sanitize(out, sizeof out, "a\x01\tb\nc\x7f", 7);
    assert_string_equal(out, "a?\tb\nc?");
    sy_utf8_sanitize(out, sizeof out, "x\xff" "y\xc3", 4);
    assert_string_equal(out, "x\xEF\xBF\xBDy\xEF\xBF\xBD");
    /* Overlong forms and surrogates are invalid. */
    sy_utf8_sanitize(out, sizeof out, "\xc0\xaf\xed\xa0\x80", 5);
    assert_string_equal(out, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
    /* Valid multi-byte characters pass. */
    sy_utf8_sanitize(out, sizeof out, "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", 9);
    assert_string_equal(out, "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80");
    /* Cutting: on a character boundary, with "...". */
    char small[8];
    sy_utf8_sanitize(small, sizeof small, "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9", 8);
    assert_string_equal(small, "\xc3\xa9\xc3\xa9...");
    sy_utf8_sanitize(small, sizeof small, "abcdefghij", 10);
    assert_string_equal(small, "abcd...");
    sy_utf8_sanitize(small, 1, "abc", 3);
    assert_string_equal(small, "");
    /* Embedded NULs are control characters, not terminators. */
    sy_utf8_sanitize(out, sizeof out, "a\0b", 3);
    assert_string_equal(out, "a?b");

    sy_buf b;
    sy_buf_init(&b);
    sy_utf8_repair(&b, "ok\x01\xff\xe2\x82", 6);
    /* ff is invalid; e2 82 is a character cut short: each byte of it is replaced. */
    assert_int_equal(b.len, 3 + 3 * 3);
    assert_memory_equal(b.data, "ok\x01\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD", 12);
    sy_buf_free(&b);
}

static void test_buf(void **state) {
    (void)state;
    sy_buf b;
    sy_buf_init(&b);
    char *empty = sy_buf_take(&b);
    assert_string_equal(empty, "");
    free(empty);
    for (int i = 0; i < 1000; i++) sy_buf_printf(&b, "%d,", i);
    assert_int_equal(b.len, strlen(b.data));
    sy_buf_consume(&b, 2);
    assert_memory_equal(b.data, "1,2,", 4);
    char long_text[600];
    memset(long_text, 'z', sizeof long_text - 1);
    long_text[sizeof long_text - 1] = '\0';
    size_t before = b.len;
    sy_buf_printf(&b, "[%s]", long_text);
    assert_int_equal(b.len, before + 601);
    assert_int_equal(b.data[b.len - 1], ']');
    sy_buf_consume(&b, b.len + 5);
    assert_int_equal(b.len, 0);
    assert_string_equal(b.data, "");
    sy_buf_free(&b);
}

static void test_json_getters(void **state) {
    (void)state;
    cJSON *o = cJSON_Parse("{\"s\":\"x\",\"n\":1.5,\"i\":7,\"neg\":-3,\"b\":true,\"nul\":null,\"big\":1e300,"
                           "\"frac\":2.5,\"stop1\":\"END\",\"stops\":[\"a\",\"\",\"b\"],\"badstops\":[1],"
                           "\"seed\":-1,\"seedbig\":18446744073709551615}");
    assert_non_null(o);
    sy_api_error e;
    const char *s = NULL;
    bool present = false;
    assert_int_equal(sy_json_get_string(o, NULL, "s", &s, &present, &e), 0);
    assert_true(present);
    assert_string_equal(s, "x");
    assert_int_equal(sy_json_get_string(o, NULL, "missing", &s, &present, &e), 0);
    assert_false(present);
    assert_int_equal(sy_json_get_string(o, NULL, "nul", &s, &present, &e), 0);
    assert_false(present);
    assert_int_equal(sy_json_get_string(o, "options.", "n", &s, &present, &e), -1);
    assert_int_equal(e.status, 400);
    assert_string_equal(e.param, "options.n");

    double d = 0;
    assert_int_equal(sy_json_get_number(o, NULL, "n", 0, 2, &d, &present, &e), 0);
    assert_true(d == 1.5);
    assert_int_equal(sy_json_get_number(o, NULL, "n", 0, 1, &d, &present, &e), -1);
    assert_string_equal(e.param, "n");
    assert_non_null(strstr(e.message, "from 0 to 1"));
    assert_int_equal(sy_json_get_number(o, NULL, "s", 0, 1, &d, &present, &e), -1);
    assert_int_equal(sy_json_get_number(o, NULL, "big", 0, 1e308, &d, &present, &e), 0);

    int64_t i = 0;
    assert_int_equal(sy_json_get_integer(o, NULL, "i", 1, 10, &i, &present, &e), 0);
    assert_int_equal(i, 7);
    assert_int_equal(sy_json_get_integer(o, NULL, "frac", 0, 10, &i, &present, &e), -1);
    assert_int_equal(sy_json_get_integer(o, NULL, "neg", 0, 10, &i, &present, &e), -1);
    assert_int_equal(sy_json_get_integer(o, NULL, "big", INT64_MIN, INT64_MAX, &i, &present, &e), -1);

    bool b = false;
    assert_int_equal(sy_json_get_bool(o, NULL, "b", &b, &present, &e), 0);
    assert_true(b);
    assert_int_equal(sy_json_get_bool(o, NULL, "i", &b, &present, &e), -1);

    uint64_t seed = 0;
    assert_int_equal(sy_json_get_seed(o, NULL, "seed", &seed, &present, &e), 0);
    assert_true(seed == UINT64_MAX);
    assert_int_equal(sy_json_get_seed(o, NULL, "seedbig", &seed, &present, &e), -1); /* rounds to 2^64 */
    assert_int_equal(sy_json_get_seed(o, NULL, "frac", &seed, &present, &e), -1);

    sy_gen_params p;
    memset(&p, 0, sizeof p);
    assert_int_equal(sy_json_get_stop(o, NULL, "stop1", &p, &e), 0);
    assert_int_equal(p.n_stop, 1);
    assert_string_equal(p.stop[0], "END");
    assert_int_equal(sy_json_get_stop(o, NULL, "stops", &p, &e), 0);
    assert_int_equal(p.n_stop, 2); /* "" stops nothing */
    assert_string_equal(p.stop[1], "b");
    assert_int_equal(sy_json_get_stop(o, NULL, "badstops", &p, &e), -1);
    assert_int_equal(sy_json_get_stop(o, NULL, "i", &p, &e), -1);
    cJSON_Delete(o);

    cJSON *many = cJSON_CreateObject();
    cJSON *arr = cJSON_AddArrayToObject(many, "stop");
    for (int k = 0; k <= SY_GEN_MAX_STOP_STRINGS; k++) cJSON_AddItemToArray(arr, cJSON_CreateString("s"));
    assert_int_equal(sy_json_get_stop(many, NULL, "stop", &p, &e), -1);
    assert_non_null(strstr(e.message, "at most"));
    cJSON_Delete(many);
}

static void test_messages(void **state) {
    (void)state;
    cJSON *o = cJSON_Parse("[{\"role\":\"developer\",\"content\":\"sys\"},"
                           "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},"
                           "{\"type\":\"text\",\"text\":\"b\"}]},"
                           "{\"role\":\"assistant\",\"content\":null}]");
    sy_api_messages m;
    sy_api_error e;
    assert_int_equal(sy_api_parse_messages(o, "messages", &m, &e), 0);
    assert_int_equal(m.n, 3);
    assert_string_equal(m.items[0].role, "system");
    assert_string_equal(m.items[1].role, "user");
    assert_int_equal(m.items[1].content_len, 2);
    assert_memory_equal(m.items[1].content, "ab", 2);
    assert_int_equal(m.items[2].content_len, 0);
    sy_api_messages_free(&m);
    cJSON_Delete(o);

    static const struct {
        const char *json;
        const char *param;
    } bad[] = {
        {"{}", "messages"},
        {"[1]", "messages[0]"},
        {"[{\"content\":\"x\"}]", "messages[0].role"},
        {"[{\"role\":\"User\",\"content\":\"x\"}]", "messages[0].role"},
        {"[{\"role\":\"user\",\"content\":5}]", "messages[0].content"},
        {"[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{}}]}]", "messages[0].content"},
        {"[{\"role\":\"user\",\"content\":[{\"type\":\"text\"}]}]", "messages[0].content"},
        {"[{\"role\":\"user\",\"content\":\"x\",\"images\":[\"AAAA\"]}]", "messages[0].images"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        o = cJSON_Parse(bad[i].json);
        assert_non_null(o);
        memset(&e, 0, sizeof e);
        if (sy_api_parse_messages(o, "messages", &m, &e) == 0) fail_msg("accepted %s", bad[i].json);
        assert_int_equal(e.status, 400);
        assert_string_equal(e.param, bad[i].param);
        cJSON_Delete(o);
    }
}

static void test_metrics_text(void **state) {
    (void)state;
    sy_metrics *m = sy_metrics_create();
    sy_metrics_request(m, "/v1/chat/completions", 200);
    sy_metrics_request(m, "/v1/chat/completions", 200);
    sy_metrics_request(m, "/v1/chat/completions", 404);
    sy_metrics_tokens(m, "qwen", 10, 4, 7);
    sy_metrics_tokens(m, "qwen", 1, 0, 2);
    sy_metrics_draft_tokens(m, "qwen", 12, 9);
    sy_metrics_draft_tokens(m, "qwen", 4, 0);
    /* The snapshot counters are the process's: this test process has written and restored nothing. */
    sy_snapshot_count_rejected(SY_SNAPSHOT_ERR_CHECKSUM);
    sy_snapshot_count_rejected(SY_SNAPSHOT_ERR_CHECKSUM);
    sy_snapshot_count_rejected(SY_SNAPSHOT_ERR_KEY);
    sy_metrics_time_to_first_token(m, 0.2);
    sy_metrics_time_to_first_token(m, 500);
    sy_metrics_token_latency(m, 0.004);
    sy_metrics_token_latency(m, -1); /* ignored */

    sy_model_status models[2];
    memset(models, 0, sizeof models);
    models[0].name = "qwen";
    models[0].state = SY_MODEL_READY;
    models[0].memory_bytes = 123456;
    models[0].device_bytes = 654321;
    models[0].sched.slots_busy = 2;
    models[0].sched.queue_depth = 3;
    models[0].sched.parked_sequences = 2;
    models[0].sched.parked_tokens = 777;
    models[1].name = "we\"ird";
    models[1].state = SY_MODEL_UNLOADED;
    sy_model_manager_counters c = {.loads = 5, .load_failures = 1, .swaps = 2, .unloads = 3,
                                   .load_seconds_total = 1.5};
    size_t len = 0;
    char *text = sy_metrics_render(m, models, 2, &c, &len);
    assert_int_equal(len, strlen(text));
    static const char *const lines[] = {
        "# TYPE switchyard_requests_total counter\n",
        "switchyard_requests_total{endpoint=\"/v1/chat/completions\",status=\"200\"} 2\n",
        "switchyard_requests_total{endpoint=\"/v1/chat/completions\",status=\"404\"} 1\n",
        "switchyard_prompt_tokens_total{model=\"qwen\"} 11\n",
        "switchyard_cached_tokens_total{model=\"qwen\"} 4\n",
        "switchyard_generated_tokens_total{model=\"qwen\"} 9\n",
        "switchyard_time_to_first_token_seconds_bucket{le=\"0.1\"} 0\n",
        "switchyard_time_to_first_token_seconds_bucket{le=\"0.25\"} 1\n",
        "switchyard_time_to_first_token_seconds_bucket{le=\"120\"} 1\n",
        "switchyard_time_to_first_token_seconds_bucket{le=\"+Inf\"} 2\n",
        "switchyard_time_to_first_token_seconds_count 2\n",
        "switchyard_token_latency_seconds_bucket{le=\"0.005\"} 1\n",
        "switchyard_token_latency_seconds_count 1\n",
        "switchyard_model_loads_total 5\n",
        "switchyard_model_swaps_total 2\n",
        "switchyard_model_load_seconds_total 1.500000\n",
        "switchyard_model_state{model=\"qwen\",state=\"ready\"} 1\n",
        "switchyard_model_state{model=\"qwen\",state=\"loading\"} 0\n",
        "switchyard_model_state{model=\"we\\\"ird\",state=\"unloaded\"} 1\n",
        "switchyard_model_memory_bytes{model=\"qwen\"} 123456\n",
        "switchyard_model_device_memory_bytes{model=\"qwen\"} 654321\n",
        "switchyard_slots_busy{model=\"qwen\"} 2\n",
        "switchyard_queue_depth{model=\"qwen\"} 3\n",
        "switchyard_prefix_cache_sequences{model=\"qwen\"} 2\n",
        "switchyard_prefix_cache_tokens{model=\"qwen\"} 777\n",
        "switchyard_prefix_cache_tokens{model=\"we\\\"ird\"} 0\n",
        "# TYPE switchyard_draft_tokens_total counter\n",
        "switchyard_draft_tokens_total{model=\"qwen\"} 16\n",
        "switchyard_draft_accepted_tokens_total{model=\"qwen\"} 9\n",
        "# TYPE switchyard_snapshots_written_total counter\n",
        "switchyard_snapshots_written_total 0\n",
        "switchyard_snapshot_write_failures_total 0\n",
        "switchyard_snapshot_written_bytes_total 0\n",
        "switchyard_snapshots_restored_total 0\n",
        "switchyard_snapshot_restored_tokens_total 0\n",
        "switchyard_snapshots_rejected_total{reason=\"checksum\"} 2\n",
        "switchyard_snapshots_rejected_total{reason=\"key\"} 1\n",
        "switchyard_snapshots_rejected_total{reason=\"version\"} 0\n",
        "switchyard_snapshots_rejected_total{reason=\"io\"} 0\n",
    };
    for (size_t i = 0; i < sizeof lines / sizeof *lines; i++)
        if (strstr(text, lines[i]) == NULL) fail_msg("missing line: %s\n--- in:\n%s", lines[i], text);
    free(text);

    /* Without the manager's parts. */
    text = sy_metrics_render(m, NULL, 0, NULL, NULL);
    assert_null(strstr(text, "switchyard_model_loads_total"));
    assert_null(strstr(text, "reason=\"ok\"")); /* no such rejection */
    assert_non_null(strstr(text, "switchyard_snapshots_rejected_total{reason=\"checksum\"} 2\n"));
    assert_non_null(strstr(text, "switchyard_requests_total"));
    free(text);

    /* The series table is bounded: the overflow is counted under "other", not lost. */
    char endpoint[32];
    for (int i = 0; i < SY_METRICS_MAX_REQUEST_SERIES + 10; i++) {
        snprintf(endpoint, sizeof endpoint, "/e%d", i);
        sy_metrics_request(m, endpoint, 200);
    }
    text = sy_metrics_render(m, NULL, 0, NULL, NULL);
    assert_non_null(strstr(text, "endpoint=\"other\""));
    free(text);
    sy_metrics_free(m);
}

/* The load signals the Gateway API Inference Extension's endpoint picker reads: one series each for the pod, summed
 * over the models; KV-cache utilization is the running generations' tokens over every loaded model's capacity. */
static void test_metrics_load_signals(void **state) {
    (void)state;
    sy_metrics *m = sy_metrics_create();
    sy_model_status models[3];
    memset(models, 0, sizeof models);
    models[0].name = "a";
    models[0].state = SY_MODEL_READY;
    models[0].sched.queue_depth = 3;
    models[0].sched.slots_busy = 2;
    models[0].sched.kv_tokens = 1000;
    models[0].sched.kv_capacity_tokens = 4000;
    models[1].name = "b";
    models[1].state = SY_MODEL_READY;
    models[1].sched.queue_depth = 1;
    models[1].sched.slots_busy = 1;
    models[1].sched.kv_tokens = 0;
    models[1].sched.kv_capacity_tokens = 4000;
    models[2].name = "c"; /* unloaded: no capacity, no load */
    char *text = sy_metrics_render(m, models, 3, NULL, NULL);
    static const char *const lines[] = {
        "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 4\n",
        "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 3\n",
        "# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc 0.125000\n",
        "# TYPE vllm:gpu_cache_usage_perc gauge\nvllm:gpu_cache_usage_perc 0.125000\n",
        "switchyard_kv_cache_usage_ratio{model=\"a\"} 0.250000\n",
        "switchyard_kv_cache_usage_ratio{model=\"b\"} 0.000000\n",
        "switchyard_kv_cache_usage_ratio{model=\"c\"} 0.000000\n",
    };
    for (size_t i = 0; i < sizeof lines / sizeof *lines; i++)
        if (strstr(text, lines[i]) == NULL) fail_msg("missing: %s\n--- in:\n%s", lines[i], text);
    free(text);
    /* Nothing loaded: 0, not a division by zero. */
    text = sy_metrics_render(m, models + 2, 1, NULL, NULL);
    assert_non_null(strstr(text, "vllm:kv_cache_usage_perc 0.000000\n"));
    assert_non_null(strstr(text, "vllm:num_requests_waiting 0\n"));
    free(text);
    sy_metrics_free(m);
}

/* Origins and Host headers (http/http_access.h): what a browser or a rebinding attack sends. */
static void test_origins_and_hosts(void **state) {
    (void)state;
    char out[512];
    assert_int_equal(sy_http_origin_normalize("HTTP://LocalHost:3000", out, sizeof out), 0);
    assert_string_equal(out, "http://localhost:3000");
    assert_int_equal(sy_http_origin_normalize("null", out, sizeof out), 0);
    static const char *const bad[] = {"", "localhost", "http://", "http://a/b", "http://a b", "://x", "http://a:99x"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        assert_int_equal(sy_http_origin_normalize(bad[i], out, sizeof out), -1);
    const char *allowed[] = {"http://localhost:3000", "https://app.example/"};
    assert_int_equal(sy_http_origin_check("http://LOCALHOST:3000", allowed, 2), SY_ORIGIN_ALLOWED);
    assert_int_equal(sy_http_origin_check("https://app.example", allowed, 2), SY_ORIGIN_ALLOWED);
    assert_int_equal(sy_http_origin_check("http://localhost:3001", allowed, 2), SY_ORIGIN_REFUSED);
    assert_int_equal(sy_http_origin_check("http://evil.example", allowed, 2), SY_ORIGIN_REFUSED);
    assert_int_equal(sy_http_origin_check("null", allowed, 2), SY_ORIGIN_REFUSED);
    assert_int_equal(sy_http_origin_check("http://evil.example", NULL, 0), SY_ORIGIN_REFUSED);
    const char *any[] = {"*"};
    assert_int_equal(sy_http_origin_check("http://evil.example", any, 1), SY_ORIGIN_WILDCARD);

    static const char *const loopback[] = {"localhost", "LOCALHOST:8080", "localhost.", "127.0.0.1", "127.8.9.10:1",
                                           "[::1]", "[::1]:8080", "app.localhost", "[::ffff:127.0.0.1]:80"};
    for (size_t i = 0; i < sizeof loopback / sizeof *loopback; i++) assert_true(sy_http_host_check(loopback[i], NULL, 0));
    static const char *const foreign[] = {"evil.example", "evil.example:8080", "localhost.evil.example",
                                          "128.0.0.1", "0.0.0.0", "[::2]", "192.168.1.2:8080", "", "a:b:c",
                                          "127.0.0.1.evil.example", "[::1", "localhost:99999x"};
    for (size_t i = 0; i < sizeof foreign / sizeof *foreign; i++) assert_false(sy_http_host_check(foreign[i], NULL, 0));
    const char *lan[] = {"myhost.lan"};
    assert_true(sy_http_host_check("MyHost.lan:8080", lan, 1));
    assert_false(sy_http_host_check("other.lan", lan, 1));
    assert_true(sy_http_host_check("anything.example", any, 1));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_metrics_load_signals),
        cmocka_unit_test(test_listen_address), cmocka_unit_test(test_utf8_sanitize),
        cmocka_unit_test(test_buf),            cmocka_unit_test(test_json_getters),
        cmocka_unit_test(test_messages),       cmocka_unit_test(test_metrics_text),
        cmocka_unit_test(test_origins_and_hosts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
