/*
 * llama-server's slot API over KV snapshots:
 *
 *   GET  /slots[?model=NAME]                                   the slots of a model: id, n_ctx, is_processing, ...
 *   POST /slots/{id}?action=save|restore|erase[&model=NAME]    body {"filename": "NAME"} for save and restore
 *
 * Save writes the slot's tokens and KV as a snapshot file slot_save_path/NAME (atomically; the same format as the
 * resume snapshots, docs/snapshot-format.md); restore reads one back into the slot (refused, with the reason,
 * when it was written for another model); erase drops the slot's KV. The POST actions are on only when [host]
 * slot_save_path is set (501 otherwise). File names are plain names: no path separators, no dot files. With one
 * configured model ?model= may be left out.
 *
 * The operations run on the model's engine-loop thread between two steps (sy_scheduler_run_task), so they never
 * race a decode; a slot that is generating answers 409.
 */
#ifndef SY_HOST_API_SLOTS_H
#define SY_HOST_API_SLOTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "http/http_server.h"
#include "plugins/loaded_model.h"
#include "engine/scheduler.h"

#define SY_SLOT_MAX_FILENAME 255

/* The HTTP handler of both routes. */
void sy_api_slots(sy_http_request *r);

/* ---- the operations, without HTTP (each returns an HTTP status: 200, or 400/404/409/500 with err set) ---- */

typedef struct sy_slot_result {
    uint32_t n_tokens; /* saved, restored or erased */
    uint64_t bytes;    /* written or read */
    double ms;
} sy_slot_result;

/* A plain file name: 1..255 bytes of valid UTF-8, no '/', '\\' or control characters, not starting with '.'. */
bool sy_slot_filename_ok(const char *name, char *err, size_t err_size);
/* A slot id in a path: "0".."999999999". */
bool sy_slot_parse_id(const char *s, uint32_t *out);

/* Save never replaces an existing file (409) unless overwrite is set, and keeps the folder's files within
 * max_bytes (0: no limit; 507 when the new file would pass it, which is then not kept). sy_slot_save: neither. */
typedef struct sy_slot_save_options {
    bool overwrite;
    uint64_t max_bytes;
} sy_slot_save_options;
int sy_slot_save_with(sy_scheduler *s, const sy_loaded_model *lm, uint32_t slot, const char *dir,
                      const char *filename, const sy_slot_save_options *opts, sy_slot_result *res, char *err,
                      size_t err_size);
int sy_slot_save(sy_scheduler *s, const sy_loaded_model *lm, uint32_t slot, const char *dir, const char *filename,
                 sy_slot_result *res, char *err, size_t err_size);
int sy_slot_restore(sy_scheduler *s, const sy_loaded_model *lm, uint32_t slot, const char *dir,
                    const char *filename, sy_slot_result *res, char *err, size_t err_size);
int sy_slot_erase(sy_scheduler *s, uint32_t slot, sy_slot_result *res, char *err, size_t err_size);

typedef struct sy_slot_info {
    uint32_t id;
    bool busy;
    uint32_t n_tokens; /* tokens whose KV the slot holds */
} sy_slot_info;

/* Up to cap slots into out; returns the number of slots (0 when the scheduler is stopping). */
size_t sy_slot_list(sy_scheduler *s, sy_slot_info *out, size_t cap);

#endif
