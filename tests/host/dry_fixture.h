/* One case of tests/fixtures/sampler/llama-dry.json (tools/oracle/sampler_fixtures.py) checked against the host
 * sampler: the candidates' logits after llama.cpp's DRY, as probabilities at temperature 1 with no other filter,
 * must be the host's. Shared by tests/host/test_sampler.c (token breakers) and tests/gguf/test_smollm2.c (text
 * breakers built over SmolLM2's vocabulary). */
#ifndef SY_TESTS_DRY_FIXTURE_H
#define SY_TESTS_DRY_FIXTURE_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <cjson/cJSON.h>

#include "engine/sampler.h"

/* 0 when the host agrees; otherwise prints what differs and returns 1. */
static inline int dry_fixture_check(const cJSON *c, const sy_dry_breakers *breakers, uint32_t n_vocab, int index) {
    const cJSON *p = cJSON_GetObjectItem(c, "params"), *hist = cJSON_GetObjectItem(c, "history");
    const cJSON *ids = cJSON_GetObjectItem(c, "ids"), *logits = cJSON_GetObjectItem(c, "logits"),
                *want = cJSON_GetObjectItem(c, "want");
    sy_sampler_params sp = sy_sampler_defaults();
    sp.temperature = 1.0f;
    sp.top_k = 0;
    sp.top_p = 1.0f;
    sp.min_p = 0.0f;
    sp.dry_multiplier = (float)cJSON_GetObjectItem(p, "dry_multiplier")->valuedouble;
    sp.dry_base = (float)cJSON_GetObjectItem(p, "dry_base")->valuedouble;
    sp.dry_allowed_length = (int32_t)cJSON_GetObjectItem(p, "dry_allowed_length")->valuedouble;
    sp.dry_penalty_last_n = (int32_t)cJSON_GetObjectItem(p, "dry_penalty_last_n")->valuedouble;
    sp.dry_breakers = breakers;
    size_t n_hist = (size_t)cJSON_GetArraySize(hist), k = (size_t)cJSON_GetArraySize(ids);
    int32_t *h = malloc((n_hist ? n_hist : 1) * sizeof *h);
    for (size_t i = 0; i < n_hist; i++) h[i] = (int32_t)cJSON_GetArrayItem(hist, (int)i)->valuedouble;
    float *row = malloc(n_vocab * sizeof *row);
    for (uint32_t i = 0; i < n_vocab; i++) row[i] = -INFINITY;
    double top = -INFINITY, z = 0;
    for (size_t i = 0; i < k; i++) {
        row[(int32_t)cJSON_GetArrayItem(ids, (int)i)->valuedouble] = (float)cJSON_GetArrayItem(logits, (int)i)->valuedouble;
        double w = cJSON_GetArrayItem(want, (int)i)->valuedouble;
        if (w > top) top = w;
    }
    for (size_t i = 0; i < k; i++) z += exp(cJSON_GetArrayItem(want, (int)i)->valuedouble - top);
    sy_sampler *s = sy_sampler_create(&sp, n_vocab);
    int32_t *got_ids = malloc(k * sizeof *got_ids);
    double *got_p = malloc(k * sizeof *got_p);
    size_t got = sy_sampler_distribution(s, row, h, n_hist, got_ids, got_p, k);
    int bad = got != k;
    if (bad) fprintf(stderr, "DRY case %d: %zu candidates, llama.cpp has %zu\n", index, got, k);
    for (size_t j = 0; j < got && !bad; j++) {
        size_t i = 0; /* the fixture lists by id, the sampler best first */
        while (i < k && (int32_t)cJSON_GetArrayItem(ids, (int)i)->valuedouble != got_ids[j]) i++;
        double expect = i < k ? exp(cJSON_GetArrayItem(want, (int)i)->valuedouble - top) / z : -1;
        if (!(fabs(expect - got_p[j]) <= 1e-6 + 1e-5 * expect)) {
            fprintf(stderr, "DRY case %d: token %d has p %.9g, llama.cpp's %.9g\n", index, got_ids[j], got_p[j],
                    expect);
            bad = 1;
        }
    }
    sy_sampler_free(s);
    free(got_ids);
    free(got_p);
    free(row);
    free(h);
    return bad;
}

#endif
