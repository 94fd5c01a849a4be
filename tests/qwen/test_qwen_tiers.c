/* The greedy continuations of every fixture prompt under the CPU tier SY_CPU_TIER forces (CTest runs this once
 * per tier): each tier must give the oracle's tokens, hence the same tokens as every other tier. The plugin picks
 * its kernels from the same variable, once per process, as this test's copy of the kernels does. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qwen_test_util.h"
#include "sy_kernels.h"

static void test_forced_tier_is_active(void **state) {
    (void)state;
    const char *forced = getenv("SY_CPU_TIER");
    if (forced == NULL) return;
    sy_cpu_tier wanted;
    assert_true(sy_cpu_tier_from_name(forced, &wanted));
    if (!sy_cpu_tier_supported(wanted)) skip(); /* this CPU lacks the tier */
    assert_int_equal(sy_kernels_active()->tier, wanted);
}

static void test_greedy_tokens(void **state) {
    (void)state;
    const char *forced = getenv("SY_CPU_TIER");
    sy_cpu_tier wanted;
    if (forced && sy_cpu_tier_from_name(forced, &wanted) && !sy_cpu_tier_supported(wanted)) skip();
    for (size_t i = 0; i <= qt_n_fixtures; i++) { /* and lfm2-f32, whose conv layers use the same kernels */
        qt_fixture f;
        qt_fixture_load(i < qt_n_fixtures ? qt_fixtures[i] : "lfm2-f32", &f);
        sy_model *m = qt_load(f.dir, "threads", "2", NULL);
        for (size_t p = 0; p < f.n_prompts; p++) {
            const qt_prompt *q = &f.prompts[p];
            int32_t got[QT_GREEDY];
            qt_greedy(m, q->ids, q->n_ids, QT_GREEDY, got, NULL);
            float tol = 1e-3f * qt_range(q->last_logits, f.n_vocab);
            for (size_t t = 0; t < QT_GREEDY; t++) {
                if (got[t] == q->greedy[t]) continue;
                if (q->margins[t] < tol) break; /* a near tie */
                fail_msg("%s (%s tier) prompt %zu: greedy token %zu is %d, oracle %d", f.name,
                         sy_kernels_active()->name, p, t, got[t], q->greedy[t]);
            }
        }
        qt_api->unload(m);
        qt_fixture_free(&f);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forced_tier_is_active),
        cmocka_unit_test(test_greedy_tokens),
    };
    return cmocka_run_group_tests(tests, qt_plugin_open, qt_plugin_close);
}
