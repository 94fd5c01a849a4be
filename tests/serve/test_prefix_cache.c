/* The prefix cache's radix tree against a brute-force oracle: random inserts and removals over a small alphabet
 * (so sequences share long prefixes and edges split and merge), checking every lookup's length and entry. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine/prefix_cache.h"

static void basic_matches(void **state) {
    (void)state;
    sy_prefix_cache *pc = sy_prefix_cache_create();
    int32_t a[] = {1, 2, 3, 4, 5}, b[] = {1, 2, 9}, q[] = {1, 2, 3, 7};
    sy_prefix_entry *e = NULL;
    assert_int_equal(sy_prefix_cache_longest(pc, q, 4, &e), 0);
    assert_null(e);
    int va = 1, vb = 2;
    sy_prefix_entry *ea = sy_prefix_cache_insert(pc, a, 5, &va);
    sy_prefix_entry *eb = sy_prefix_cache_insert(pc, b, 3, &vb);
    assert_int_equal(sy_prefix_cache_count(pc), 2);
    assert_int_equal(sy_prefix_cache_longest(pc, q, 4, &e), 3); /* ends inside a's edge */
    assert_ptr_equal(e, ea);
    assert_ptr_equal(sy_prefix_entry_value(e), &va);
    assert_int_equal(sy_prefix_entry_length(e), 5);
    assert_memory_equal(sy_prefix_entry_tokens(e), a, sizeof a);
    assert_int_equal(sy_prefix_cache_longest(pc, q, 2, &e), 2); /* both share [1,2]: the shorter is taken */
    assert_ptr_equal(e, eb);
    int32_t other[] = {5, 1};
    assert_int_equal(sy_prefix_cache_longest(pc, other, 2, &e), 0);
    assert_null(e);
    sy_prefix_cache_remove(pc, ea);
    assert_int_equal(sy_prefix_cache_longest(pc, q, 4, &e), 2);
    assert_ptr_equal(e, eb);
    sy_prefix_cache_remove(pc, eb);
    assert_int_equal(sy_prefix_cache_count(pc), 0);
    assert_int_equal(sy_prefix_cache_longest(pc, q, 4, &e), 0);
    /* Entries are independent of each other even when equal. */
    sy_prefix_entry *d1 = sy_prefix_cache_insert(pc, a, 5, NULL);
    sy_prefix_entry *d2 = sy_prefix_cache_insert(pc, a, 5, NULL);
    sy_prefix_cache_remove(pc, d1);
    assert_int_equal(sy_prefix_cache_longest(pc, a, 5, &e), 5);
    assert_ptr_equal(e, d2);
    sy_prefix_cache_free(pc); /* frees d2 with it */
}

#define N_LIVE 64
#define MAX_LEN 24

static uint32_t rng_state = 12345;
static uint32_t next_rand(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 17;
    rng_state ^= rng_state << 5;
    return rng_state;
}

static void random_against_oracle(void **state) {
    (void)state;
    sy_prefix_cache *pc = sy_prefix_cache_create();
    int32_t seqs[N_LIVE][MAX_LEN];
    uint32_t lens[N_LIVE];
    sy_prefix_entry *entries[N_LIVE] = {0};
    for (int round = 0; round < 20000; round++) {
        int slot = (int)(next_rand() % N_LIVE);
        if (entries[slot] != NULL && next_rand() % 2) {
            sy_prefix_cache_remove(pc, entries[slot]);
            entries[slot] = NULL;
        } else if (entries[slot] == NULL) {
            lens[slot] = next_rand() % MAX_LEN;
            /* Often a copy of another live sequence's beginning, so prefixes are shared. */
            int from = (int)(next_rand() % N_LIVE);
            uint32_t copy = entries[from] ? next_rand() % (lens[from] + 1) : 0;
            if (copy > lens[slot]) copy = lens[slot];
            for (uint32_t i = 0; i < lens[slot]; i++)
                seqs[slot][i] = i < copy ? seqs[from][i] : (int32_t)(next_rand() % 3);
            entries[slot] = sy_prefix_cache_insert(pc, seqs[slot], lens[slot], &seqs[slot]);
        }
        int32_t q[MAX_LEN];
        uint32_t qn = next_rand() % MAX_LEN;
        int base = (int)(next_rand() % N_LIVE);
        for (uint32_t i = 0; i < qn; i++)
            q[i] = entries[base] && i < lens[base] && next_rand() % 8 ? seqs[base][i] : (int32_t)(next_rand() % 3);
        uint32_t best = 0;
        size_t live = 0;
        for (int k = 0; k < N_LIVE; k++) {
            if (entries[k] == NULL) continue;
            live++;
            uint32_t m = 0;
            while (m < qn && m < lens[k] && seqs[k][m] == q[m]) m++;
            if (m > best) best = m;
        }
        assert_int_equal(sy_prefix_cache_count(pc), live);
        sy_prefix_entry *e = NULL;
        uint32_t got = sy_prefix_cache_longest(pc, q, qn, &e);
        assert_int_equal(got, best);
        if (best == 0) {
            assert_null(e);
            continue;
        }
        assert_non_null(e);
        /* The entry returned really shares that prefix. */
        const int32_t *t = sy_prefix_entry_tokens(e);
        assert_true(sy_prefix_entry_length(e) >= got);
        assert_memory_equal(t, q, got * sizeof *q);
        int32_t(*value)[MAX_LEN] = sy_prefix_entry_value(e);
        assert_memory_equal(*value, t, sy_prefix_entry_length(e) * sizeof *t);
    }
    for (int k = 0; k < N_LIVE; k++)
        if (entries[k]) sy_prefix_cache_remove(pc, entries[k]);
    assert_int_equal(sy_prefix_cache_count(pc), 0);
    sy_prefix_cache_free(pc);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(basic_matches),
        cmocka_unit_test(random_against_oracle),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
