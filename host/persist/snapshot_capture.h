/*
 * A snapshot in two halves, so that compression and disk writes never run where the engine is needed: first the
 * sequence's state chunks are copied out of the engine (sy_snapshot_capture_take: the engine's serial calls,
 * memcpy speed), then, on any thread and even after the model is gone, they are compressed and written
 * (sy_snapshot_capture_write: the snapshot writer over a state extension that replays the copied chunks, cut
 * exactly where the engine cut them). The slot API saves this way off the engine loop; the model manager's
 * unloads hand their captures to the background writer (snapshot_writer.h).
 *
 * A capture owns everything it needs: its key's strings are copies, and the write never calls the engine.
 * Threading: one thread at a time per capture.
 */
#ifndef SY_HOST_PERSIST_SNAPSHOT_CAPTURE_H
#define SY_HOST_PERSIST_SNAPSHOT_CAPTURE_H

#include <stddef.h>
#include <stdint.h>

#include "persist/snapshot.h"

typedef struct sy_snapshot_capture sy_snapshot_capture;

/* The state of seq's n_tokens tokens, chunk by chunk (a serial call on the model). NULL with err on failure. */
sy_snapshot_capture *sy_snapshot_capture_take(const sy_snapshot_key *key, const sy_engine_state_api *state,
                                              sy_model *model, const sy_seq *seq, const int32_t *tokens,
                                              uint32_t n_tokens, char *err, size_t err_size);
/* Anywhere: the snapshot file at path (atomically, as sy_snapshot_write_file). */
sy_snapshot_error sy_snapshot_capture_write(const sy_snapshot_capture *c, const char *path,
                                            sy_snapshot_write_stats *stats, char *err, size_t err_size);
/* A state extension, model and sequence that replay the captured chunks to the snapshot writer (sy_snapshot_write_fd
 * and what is built on it), valid while c lives: for writers that take an engine, such as the store's save. */
void sy_snapshot_capture_replay(const sy_snapshot_capture *c, sy_engine_state_api *api, sy_model **model,
                                const sy_seq **seq);
/* The key (its own copies), the tokens, and the engine's state bytes held. */
const sy_snapshot_key *sy_snapshot_capture_key(const sy_snapshot_capture *c);
const int32_t *sy_snapshot_capture_tokens(const sy_snapshot_capture *c, uint32_t *n_tokens);
uint64_t sy_snapshot_capture_bytes(const sy_snapshot_capture *c);
void sy_snapshot_capture_free(sy_snapshot_capture *c);

#endif
