/* The JSON Schema corpus of tests/fixtures/json-schemas and the samples the grammar generates for each schema:
 * shared by the corpus test (test_grammar_schema.c) and the sample writer the oracle reads
 * (schema_samples.c, tools/oracle/json_schema_fixtures.py). Same seeds, same vocabulary, same samples. */
#ifndef SY_TEST_SCHEMA_CORPUS_H
#define SY_TEST_SCHEMA_CORPUS_H

#include <dirent.h>

#include "grammar_test_util.h"

#define SCHEMA_SAMPLES 6 /* complete documents per schema */

static int sc_cmp_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The fixture file names (NNN-name.json), sorted; NULL-terminated. */
static inline char **sc_list(const char *dir, size_t *n) {
    DIR *d = opendir(dir);
    size_t cap = 256, k = 0;
    char **names = malloc(cap * sizeof *names);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        size_t l = strlen(e->d_name);
        if (l < 9 || strcmp(e->d_name + l - 5, ".json") != 0 || e->d_name[0] < '0' || e->d_name[0] > '9') continue;
        if (k + 1 >= cap) names = realloc(names, (cap *= 2) * sizeof *names);
        names[k++] = strdup(e->d_name);
    }
    if (d) closedir(d);
    qsort(names, k, sizeof *names, sc_cmp_names);
    names[k] = NULL;
    *n = k;
    return names;
}

static inline uint64_t sc_fnv(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    return h;
}

/* Up to SCHEMA_SAMPLES complete documents of grammar g through the byte vocabulary, from seeds derived from the
 * schema's name. Returns how many (incomplete generations are retried with the next seed, 8 tries each). */
static inline int sc_samples(sy_grammar *g, const gt_vocab *v, const char *name, gt_sample *out, char *err,
                             size_t err_cap) {
    int got = 0;
    uint64_t seed = sc_fnv(name, strlen(name));
    for (int attempt = 0; attempt < SCHEMA_SAMPLES * 8 && got < SCHEMA_SAMPLES; attempt++) {
        sy_grammar_state *st = sy_grammar_state_create(g, v->v, NULL, err, err_cap);
        if (st == NULL) return -1;
        uint64_t rng = seed + (uint64_t)attempt * 7919;
        gt_sample s = gt_generate(st, v, &rng, 1500, 3000, 1.0);
        sy_grammar_state_free(st);
        if (s.error) {
            snprintf(err, err_cap, "%s", s.msg);
            free(s.text);
            return -1;
        }
        if (!s.ended) {
            free(s.text);
            continue;
        }
        out[got++] = s;
    }
    return got;
}

#endif
