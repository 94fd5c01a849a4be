/* lfm2-cuda on any machine (CI has no GPU): the plugin loads and initializes without touching CUDA, offers its
 * interfaces, probes from the files alone, checks its options before anything else, and a model load on a machine
 * without a usable GPU refuses with SY_ERR_NO_DEVICE and "no CUDA device". (Where a GPU is present the load must
 * succeed instead; the gpu-labelled tests cover what it then does.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "lfm2_cuda_test_util.h"

static int setup(void **state) {
    (void)state;
    return lct_open();
}

static int teardown(void **state) {
    (void)state;
    lct_close();
    return 0;
}

static void test_entry_and_interfaces(void **state) {
    (void)state;
    assert_string_equal(lct_entry->name, "lfm2-cuda");
    assert_non_null(lct_entry->get_interface(SY_ENGINE_SAMPLING_INTERFACE_ID));
    const sy_engine_state_api *state_api = lct_entry->get_interface(SY_ENGINE_STATE_INTERFACE_ID);
    assert_non_null(state_api);
    assert_true(SY_HAS_FIELD(state_api, sy_engine_state_api, state_load_chunk) && state_api->state_info &&
                state_api->state_chunk_bytes && state_api->state_save_chunk && state_api->state_load_chunk);
    assert_null(lct_entry->get_interface("sy.engine/2"));
    assert_true(lct_api->struct_size >= offsetof(sy_engine_api, memory_usage) + sizeof(void *));
}

static void test_probe(void **state) {
    (void)state;
    assert_int_equal(lct_api->probe(lct_source_path("tests/fixtures/hf/lfm2-f32")), SY_OK);
    assert_int_equal(lct_api->probe(lct_source_path("tests/fixtures/hf/lfm2-f32/config.json")), SY_OK);
    assert_int_equal(lct_api->probe(lct_source_path("tests/fixtures/hf/qwen3-f32")), SY_ERR_UNSUPPORTED);
    assert_non_null(strstr(lct_api->error_message(), "not lfm2"));
    assert_int_equal(lct_api->probe(lct_source_path("tests/fixtures/lfm2/lfm2-f32.gguf")), SY_ERR_UNSUPPORTED);
    assert_int_equal(lct_api->probe("/nonexistent/dir"), SY_ERR_UNSUPPORTED);
}

static void test_options_are_checked_first(void **state) {
    (void)state;
    const char *dir = lct_source_path("tests/fixtures/hf/lfm2-f32");
    const sy_option bad[][1] = {{{"ctx_size", "-3"}},         {{"max_sequences", "0"}},
                                {{"max_batch_tokens", "x"}},  {{"kv_cache_mb", "99999999999"}},
                                {{"synthetic", ""}},          {{"seed", "1.5"}}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sy_model *m = NULL;
        assert_int_equal(lct_api->load(dir, bad[i], 1, &m), SY_ERR_INVALID_ARGUMENT);
        assert_null(m);
        assert_non_null(strstr(lct_api->error_message(), bad[i][0].key));
    }
    /* unknown keys are ignored (the host passes its general options to every engine) */
    sy_option unknown = {"threads", "4"};
    sy_model *m = NULL;
    sy_status st = lct_api->load(dir, &unknown, 1, &m);
    assert_true(st == SY_OK || st == SY_ERR_NO_DEVICE);
    if (m) lct_api->unload(m);
}

static void test_load_refuses_without_a_gpu(void **state) {
    (void)state;
    const char *paths[2] = {lct_source_path("tests/fixtures/hf/lfm2-f32"),
                            lct_source_path("tests/fixtures/lfm2/lfm2-1.2b-config.json")};
    for (int i = 0; i < 2; i++) {
        sy_model *m = NULL;
        sy_option opts[1] = {{"ctx_size", "256"}};
        sy_status st = lct_api->load(paths[i], opts, 1, &m);
        if (st == SY_OK) { /* a GPU machine: the model runs, covered by the gpu tests */
            printf("a CUDA device is present: %s loaded\n", paths[i]);
            lct_api->unload(m);
            continue;
        }
        if (st != SY_ERR_NO_DEVICE) fail_msg("load: status %d: %s", st, lct_api->error_message());
        assert_null(m);
        assert_non_null(strstr(lct_api->error_message(), "no CUDA device"));
        printf("refused as expected: %s\n", lct_api->error_message());
    }
    /* a malformed checkpoint is reported as such before the device is looked for */
    sy_model *m = NULL;
    assert_int_equal(lct_api->load(lct_source_path("tests/fixtures/hf/qwen3-f32"), NULL, 0, &m), SY_ERR_UNSUPPORTED);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_entry_and_interfaces),
        cmocka_unit_test(test_probe),
        cmocka_unit_test(test_options_are_checked_first),
        cmocka_unit_test(test_load_refuses_without_a_gpu),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
