/*
 * A slot save in two halves, so that compression never runs on the model's engine loop: on the loop the slot's
 * state chunks are copied out of the engine (sy_slot_capture_take: the engine's serial calls, memcpy speed), and
 * on the connection's thread they are compressed and written (sy_slot_capture_write: the snapshot writer over a
 * state extension that replays the copied chunks, cut exactly where the engine cut them).
 */
#ifndef SY_HOST_API_SLOT_CAPTURE_H
#define SY_HOST_API_SLOT_CAPTURE_H

#include <stddef.h>
#include <stdint.h>

#include "persist/snapshot.h"

typedef struct sy_slot_capture sy_slot_capture;

/* On the engine loop: the state of seq's n_tokens tokens, chunk by chunk. NULL with err on failure. */
sy_slot_capture *sy_slot_capture_take(const sy_snapshot_key *key, const sy_engine_state_api *state, sy_model *model,
                                      const sy_seq *seq, const int32_t *tokens, uint32_t n_tokens, char *err,
                                      size_t err_size);
/* Anywhere: the snapshot file at path (atomically, as sy_snapshot_write_file). */
sy_snapshot_error sy_slot_capture_write(const sy_slot_capture *c, const char *path, sy_snapshot_write_stats *stats,
                                        char *err, size_t err_size);
uint64_t sy_slot_capture_bytes(const sy_slot_capture *c);
void sy_slot_capture_free(sy_slot_capture *c);

#endif
