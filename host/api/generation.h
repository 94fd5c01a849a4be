/*
 * One generation: its events, which the scheduler's engine thread hands over to the connection's thread, and
 * streaming them as a response.
 */
#ifndef SY_HOST_API_GENERATION_H
#define SY_HOST_API_GENERATION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "api/lease.h"
#include "api/request.h"
#include "engine/scheduler.h"

/* ------------------------------------------------------------------------------------------------------------
 * One generation. */
typedef struct sy_api_event {
    sy_gen_event_type type;
    char *text; /* TEXT: the piece (NUL-terminated, text_len bytes) */
    size_t text_len;
    int32_t token;
    double logprob;
    sy_gen_logprob top[SY_GEN_MAX_TOP_LOGPROBS];
    uint32_t n_top;
    char finish_reason[16]; /* DONE */
    int stop_index;         /* DONE: the stop string that ended it (sy_gen_params.stop index), or -1 */
    sy_gen_usage usage;     /* DONE and ERROR */
    char *message;          /* ERROR */
    double time;            /* when the engine thread emitted it (sy_now_seconds) */
    struct sy_api_event *next;
} sy_api_event;

typedef struct sy_api_gen sy_api_gen;

/* Submit a tokenized prompt. On success the lease moves from m into the generation (m->lease becomes NULL). On
 * failure (429 queue full, 400 prompt too long, 503 stopping) the caller keeps it. */
sy_api_gen *sy_api_gen_start(sy_http_request *r, sy_api_model *m, const int32_t *prompt, size_t n_prompt,
                             const sy_gen_params *params, sy_api_error *e);
/* The next event, waiting for it. NULL when the client went away or the server is stopping (the generation is
 * then cancelled). The caller frees the event. After the DONE or ERROR event no more come. */
sy_api_event *sy_api_gen_next(sy_api_gen *g);
void sy_api_event_free(sy_api_event *ev);
/* Cancel if still running, wait for the end, release the generation and the lease, free. */
void sy_api_gen_finish(sy_api_gen *g);
const sy_loaded_model *sy_api_gen_model(const sy_api_gen *g);
const char *sy_api_gen_model_name(const sy_api_gen *g);
/* Unload the model once this generation ends (Ollama's keep_alive 0). */
void sy_api_gen_unload_after(sy_api_gen *g);
/* True when the generation was cancelled because the server is stopping. */
bool sy_api_gen_server_stopping(const sy_api_gen *g);
/* Whether EV, the generation's last event (DONE or ERROR), ends it in failure rather than with its finish: the
 * engine's error (*status 500) or the server's stop (*status 503: cancelled without the client asking). The
 * message goes to MSG as valid UTF-8 cut to MSG_SIZE, ready for a JSON string. Every API answers these two
 * alike; only the shape of its error differs. */
bool sy_api_gen_failed(const sy_api_gen *g, const sy_api_event *ev, int *status, char *msg, size_t msg_size);

/* A streamed response of a generation: for every event, format() appends the bytes to send; the stream ends
 * after the DONE or ERROR event. free_state(state) runs when the response is done with. On success the
 * generation belongs to the stream. */
typedef struct sy_api_stream_ops {
    void (*format)(void *state, sy_api_gen *g, const sy_api_event *ev, sy_buf *out);
    void (*free_state)(void *state);
} sy_api_stream_ops;
int sy_api_respond_stream(sy_http_request *r, const char *content_type, sy_api_gen *g,
                          const sy_api_stream_ops *ops, void *state);
/* One event of a stream appended to OUT: BEFORE, JSON on one line, AFTER ("data: " and "\n\n" for server-sent
 * events, "" and "\n" for NDJSON). Takes JSON (deleted here); appends nothing when it cannot be printed. */
void sy_api_stream_json(sy_buf *out, const char *before, cJSON *json, const char *after);

/* ------------------------------------------------------------------------------------------------------------
 * Generations streamed together (OpenAI's n > 1): their events interleaved as they come. */
#define SY_API_GEN_GROUP_MAX 16
typedef struct sy_api_gen_group sy_api_gen_group;
sy_api_gen_group *sy_api_gen_group_new(void);
/* sy_api_gen_start, the generation joining grp (at most SY_API_GEN_GROUP_MAX); the group owns it: do not finish
 * it alone. */
sy_api_gen *sy_api_gen_start_in(sy_api_gen_group *grp, sy_http_request *r, sy_api_model *m, const int32_t *prompt,
                                size_t n_prompt, const sy_gen_params *params, sy_api_error *e);
uint32_t sy_api_gen_group_size(const sy_api_gen_group *grp);
sy_api_gen *sy_api_gen_group_member(const sy_api_gen_group *grp, uint32_t i);
/* The next event of any member (*index says whose), waiting for one; members take turns when several have
 * events. NULL when the client went away or every member's end was taken. */
sy_api_event *sy_api_gen_group_next(sy_api_gen_group *grp, uint32_t *index);
/* Cancel the members still running, finish them all, free the group. */
void sy_api_gen_group_free(sy_api_gen_group *grp);

/* A group's streamed response: format() gets every event with its member's index and returns true when the
 * stream is over (an error); done() appends what follows the last member's end. first: an event already taken
 * from member first_index (or NULL), sent first. On success the group belongs to the stream. */
typedef struct sy_api_group_stream_ops {
    bool (*format)(void *state, sy_api_gen *g, uint32_t index, const sy_api_event *ev, sy_buf *out);
    void (*done)(void *state, sy_buf *out);
    void (*free_state)(void *state);
} sy_api_group_stream_ops;
int sy_api_respond_group_stream(sy_http_request *r, const char *content_type, sy_api_gen_group *grp,
                                sy_api_event *first, uint32_t first_index, const sy_api_group_stream_ops *ops,
                                void *state);

#endif
