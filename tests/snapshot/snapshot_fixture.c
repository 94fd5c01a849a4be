#include "snapshot_fixture.h"

#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

int32_t *snap_make_tokens(uint32_t seed, uint32_t n) {
    int32_t *t = malloc((size_t)(n ? n : 1) * sizeof *t);
    assert_non_null(t);
    uint32_t x = seed * 2654435761u + 0x9e3779b9u;
    for (uint32_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        t[i] = (int32_t)(x % 256u);
    }
    return t;
}

void snap_decode(const sy_loaded_model *lm, sy_seq *seq, const int32_t *tokens, uint32_t n, float *logits) {
    sy_decode_item item;
    memset(&item, 0, sizeof item);
    item.struct_size = sizeof item;
    item.seq = seq;
    item.tokens = tokens;
    item.n_tokens = n;
    item.n_logits = logits != NULL ? 1 : 0;
    item.logits = logits;
    sy_decode_batch batch;
    memset(&batch, 0, sizeof batch);
    batch.struct_size = sizeof batch;
    batch.n_items = 1;
    batch.item_size = sizeof item;
    batch.items = &item;
    sy_status st = lm->engine->decode(lm->model, &batch);
    if (st != SY_OK) fprintf(stderr, "decode: %s\n", lm->engine->error_message());
    assert_int_equal(st, SY_OK);
}

static int32_t argmax(const float *v, uint32_t n) {
    uint32_t best = 0;
    for (uint32_t i = 1; i < n; i++)
        if (v[i] > v[best]) best = i;
    return (int32_t)best;
}

void snap_greedy(const sy_loaded_model *lm, sy_seq *seq, float *logits, uint32_t n, int32_t *out) {
    for (uint32_t i = 0; i < n; i++) {
        out[i] = argmax(logits, lm->info.n_vocab);
        snap_decode(lm, seq, &out[i], 1, logits);
    }
}

void snap_key(const sy_loaded_model *lm, sy_snapshot_key *key) {
    char err[512];
    int rc = sy_snapshot_model_key(lm, key, err, sizeof err);
    if (rc != 0) fprintf(stderr, "%s\n", err);
    assert_int_equal(rc, 0);
}

sy_seq *snap_sequence(const sy_loaded_model *lm, const int32_t *tokens, uint32_t n) {
    sy_seq *seq = NULL;
    assert_int_equal(lm->engine->seq_create(lm->model, &seq), SY_OK);
    if (n > 0) snap_decode(lm, seq, tokens, n, NULL);
    return seq;
}

uint8_t *snap_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *data = malloc(n > 0 ? (size_t)n : 1);
    if (data == NULL || fread(data, 1, (size_t)n, f) != (size_t)n) {
        free(data);
        fclose(f);
        return NULL;
    }
    fclose(f);
    *len = (size_t)n;
    return data;
}

void snap_write_bytes(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

size_t snap_count_entries(const char *dir, const char *prefix) {
    DIR *d = opendir(dir);
    if (d == NULL) return 0;
    size_t n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) continue;
        if (strncmp(de->d_name, prefix, strlen(prefix)) == 0) n++;
    }
    closedir(d);
    return n;
}
