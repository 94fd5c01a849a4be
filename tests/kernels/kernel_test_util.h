/* What the kernel suites share: a seeded xorshift generator, a checked malloc, and the tiers to test. Include after
 * cmocka.h and sy_kernels.h, with KERNEL_TEST_RNG_SEED defined (each suite keeps its own sequence). */
#ifndef KERNEL_TEST_UTIL_H
#define KERNEL_TEST_UTIL_H

#include <stdint.h>
#include <stdlib.h>

#ifndef KERNEL_TEST_RNG_SEED
#error "define KERNEL_TEST_RNG_SEED before including kernel_test_util.h"
#endif

static uint64_t rng_state = KERNEL_TEST_RNG_SEED;

static uint64_t rng_next(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* uniform in [-1, 1) */
static float rng_float(void) { return (float)((double)(rng_next() >> 11) * 0x1p-53 * 2.0 - 1.0); }

static void *xmalloc(size_t n) {
    void *p = malloc(n == 0 ? 1 : n);
    assert_non_null(p);
    return p;
}

/* Tiers under test: the one SY_CPU_TIER forces (the test is skipped when this CPU lacks it), or every supported
 * one. */
static int tiers_under_test(const sy_kernels **out) {
    const char *forced = getenv("SY_CPU_TIER");
    int n = 0;
    sy_cpu_tier wanted;
    if (forced != NULL && sy_cpu_tier_from_name(forced, &wanted)) {
        if (!sy_cpu_tier_supported(wanted)) skip(); /* this CPU lacks the forced tier */
        out[n++] = sy_kernels_for_tier(wanted);
        return n;
    }
    for (int t = 0; t < SY_CPU_TIER_COUNT_; t++) {
        const sy_kernels *k = sy_kernels_for_tier((sy_cpu_tier)t);
        if (k != NULL) out[n++] = k;
    }
    return n;
}

#endif
