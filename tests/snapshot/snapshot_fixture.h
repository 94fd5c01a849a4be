/* Shared by the snapshot tests: the test engine driven directly (decode, greedy continuation), snapshot keys and
 * small file helpers. Built on tests/serve/serve_fixture (the registry holding only the test engine). */
#ifndef SY_TEST_SNAPSHOT_FIXTURE_H
#define SY_TEST_SNAPSHOT_FIXTURE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "serve_fixture.h"
#include "persist/snapshot.h"
#include "persist/snapshot_store.h"

/* Deterministic pseudo-random byte tokens (0..255). malloc'd. */
int32_t *snap_make_tokens(uint32_t seed, uint32_t n);

/* Append tokens to seq with one decode; the logits of the last one go to logits (n_vocab floats) if not NULL. */
void snap_decode(const sy_loaded_model *lm, sy_seq *seq, const int32_t *tokens, uint32_t n, float *logits);

/* Greedy continuation: from the logits of the last decoded token, n tokens (each decoded) into out. */
void snap_greedy(const sy_loaded_model *lm, sy_seq *seq, float *logits, uint32_t n, int32_t *out);

/* The model's snapshot key; asserts it has one. */
void snap_key(const sy_loaded_model *lm, sy_snapshot_key *key);

/* A new sequence holding tokens (decoded from scratch). */
sy_seq *snap_sequence(const sy_loaded_model *lm, const int32_t *tokens, uint32_t n);

/* Whole file into memory (malloc'd, *len bytes); NULL if it cannot be read. */
uint8_t *snap_read_file(const char *path, size_t *len);
/* Write bytes to a file; asserts success. */
void snap_write_bytes(const char *path, const void *data, size_t len);
/* Number of directory entries (other than . and ..) whose name starts with prefix ("" for all). */
size_t snap_count_entries(const char *dir, const char *prefix);

#endif
