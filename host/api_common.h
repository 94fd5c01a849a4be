/*
 * What the OpenAI and Ollama APIs share: a byte buffer, request errors, checked JSON field access, chat
 * messages, acquiring the requested model, rendering and tokenizing the prompt, and running one generation
 * whose events the scheduler's engine thread hands over to the connection's thread (streamed or collected).
 */
#ifndef SY_HOST_API_COMMON_H
#define SY_HOST_API_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "chat_template.h"
#include "http_server.h"
#include "model_manager.h"
#include "scheduler.h"

/* ------------------------------------------------------------------------------------------------------------
 * A growable byte buffer, always NUL-terminated after its bytes (aborts on out-of-memory, like sy_xmalloc). */
typedef struct sy_buf {
    char *data;
    size_t len;
    size_t cap;
} sy_buf;

void sy_buf_init(sy_buf *b);
void sy_buf_free(sy_buf *b);
void sy_buf_append(sy_buf *b, const void *data, size_t len);
void sy_buf_puts(sy_buf *b, const char *s);
void sy_buf_printf(sy_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Drop the first n bytes. */
void sy_buf_consume(sy_buf *b, size_t n);
/* The bytes as a malloc'd NUL-terminated string (never NULL); the buffer is left empty. */
char *sy_buf_take(sy_buf *b);

/* Copy src (src_len bytes) into dst as valid UTF-8 without control characters other than tab and newline:
 * invalid sequences become U+FFFD, others '?'. At most dst_size-1 bytes, cut on a character boundary (with
 * "..." when cut); returns the length written. */
size_t sy_utf8_sanitize(char *dst, size_t dst_size, const char *src, size_t src_len);
/* Like sy_utf8_sanitize but keeps every character (control characters are legal in JSON strings): invalid
 * sequences become U+FFFD. The result is appended to b. */
void sy_utf8_repair(sy_buf *b, const char *src, size_t src_len);

/* ------------------------------------------------------------------------------------------------------------
 * Request errors. */
typedef struct sy_api_error {
    int status;        /* HTTP status */
    char code[48];     /* OpenAI's error code ("model_not_found"); "" for none */
    char param[64];    /* the request field at fault; "" for none */
    char message[1024];
} sy_api_error;

/* Fill e; always returns -1 so that callers can `return sy_api_fail(...)`. */
int sy_api_fail(sy_api_error *e, int status, const char *code, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
int sy_api_respond_error(sy_http_request *r, const sy_api_error *e);

/* ------------------------------------------------------------------------------------------------------------
 * JSON. Each getter leaves *out alone when the key is absent (or JSON null), sets *present when given, and
 * fails with 400 naming `prefix key` when the value has the wrong type or range. */

/* The body as a JSON object: 400 for malformed JSON, a non-object, or a string holding \u0000. */
int sy_api_parse_body(sy_http_request *r, cJSON **out, sy_api_error *e);
int sy_json_get_string(const cJSON *obj, const char *prefix, const char *key, const char **out, bool *present,
                       sy_api_error *e);
int sy_json_get_bool(const cJSON *obj, const char *prefix, const char *key, bool *out, bool *present,
                     sy_api_error *e);
int sy_json_get_number(const cJSON *obj, const char *prefix, const char *key, double min, double max,
                       double *out, bool *present, sy_api_error *e);
int sy_json_get_integer(const cJSON *obj, const char *prefix, const char *key, int64_t min, int64_t max,
                        int64_t *out, bool *present, sy_api_error *e);
/* `stop`: a string or an array of strings (at most SY_GEN_MAX_STOP_STRINGS, none empty). The pointers stay
 * owned by obj. */
int sy_json_get_stop(const cJSON *obj, const char *prefix, const char *key, sy_gen_params *p, sy_api_error *e);
/* A seed: any integer (negative ones wrap, as two's complement) — JSON numbers beyond 2^53 lose precision. */
int sy_json_get_seed(const cJSON *obj, const char *prefix, const char *key, uint64_t *out, bool *present,
                     sy_api_error *e);

/* A fresh seed for requests that give none. */
uint64_t sy_api_random_seed(void);
/* "PREFIX" + 24 random hex digits, e.g. "chatcmpl-3f2a...". */
void sy_api_make_id(char *out, size_t size, const char *prefix);

/* ------------------------------------------------------------------------------------------------------------
 * Chat messages: [{"role": "...", "content": "..." | null | [{"type":"text","text":"..."}, ...]}, ...].
 * Non-text content (images, audio) is refused with 400. */
typedef struct sy_api_messages {
    sy_chat_message *items;
    size_t n;
    char **owned; /* joined content parts */
    size_t n_owned;
} sy_api_messages;

#define SY_API_MAX_MESSAGES 65536

int sy_api_parse_messages(const cJSON *messages, const char *key, sy_api_messages *out, sy_api_error *e);
void sy_api_messages_free(sy_api_messages *m);

/* ------------------------------------------------------------------------------------------------------------
 * The requested model. */
typedef struct sy_api_model {
    sy_model_lease *lease;    /* NULL once handed to a generation */
    const sy_loaded_model *lm;
    char name[SY_CONFIG_MAX_NAME_LEN + 1];      /* canonical */
    char requested[SY_CONFIG_MAX_NAME_LEN + 1]; /* as the client named it */
    double acquire_seconds;   /* waiting for the model (its load included) */
} sy_api_model;

/* Acquire a lease (loading the model if needed): 400 without a name, 404 unknown (naming the models offered),
 * 503 load failed or timed out, 429 queue full. Lifts the connection's idle timeout. */
int sy_api_acquire(sy_http_request *r, const char *requested, sy_api_model *m, sy_api_error *e);
/* Release the lease if still held. */
void sy_api_model_release(sy_api_model *m);

/* Render messages with the model's chat format (config override, chat_template_file, or detected from the
 * model's template). The text is malloc'd. */
int sy_api_render_chat(sy_http_request *r, const sy_api_model *m, const sy_chat_message *messages, size_t n,
                       bool add_generation_prompt, char **text, size_t *len, sy_api_error *e);
/* Tokenize a prompt with control-token text recognised. chat: the text came from a template, so BOS is added
 * only when the model wants one and the text does not already begin with it; otherwise the model's BOS rules
 * apply (SY_TOKENIZE_ADD_SPECIAL). Fails with 400 when the prompt leaves no room in the context. */
int32_t *sy_api_tokenize_prompt(const sy_api_model *m, const char *text, size_t len, bool chat, size_t *n,
                                sy_api_error *e);
/* 400 "context_length_exceeded" (naming param) when n_prompt tokens leave no room to generate in the model's
 * context. */
int sy_api_check_context(const sy_api_model *m, size_t n_prompt, const char *param, sy_api_error *e);
/* The text of a token as valid UTF-8 (NUL-terminated in buf); and its raw bytes in raw (may be NULL). */
void sy_api_token_text(const sy_loaded_model *lm, int32_t token, sy_buf *text, sy_buf *raw);

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

/* A streamed response of a generation: for every event, format() appends the bytes to send; the stream ends
 * after the DONE or ERROR event. free_state(state) runs when the response is done with. On success the
 * generation belongs to the stream. */
typedef struct sy_api_stream_ops {
    void (*format)(void *state, sy_api_gen *g, const sy_api_event *ev, sy_buf *out);
    void (*free_state)(void *state);
} sy_api_stream_ops;
int sy_api_respond_stream(sy_http_request *r, const char *content_type, sy_api_gen *g,
                          const sy_api_stream_ops *ops, void *state);

/* ------------------------------------------------------------------------------------------------------------
 * Handlers (routes in http_server.c). */
void sy_api_root(sy_http_request *r);
void sy_api_health(sy_http_request *r);
void sy_api_running(sy_http_request *r);
void sy_api_unload(sy_http_request *r);
void sy_api_metrics(sy_http_request *r);

void sy_api_openai_chat(sy_http_request *r);
void sy_api_openai_completions(sy_http_request *r);
void sy_api_openai_models(sy_http_request *r);
void sy_api_openai_model(sy_http_request *r);

void sy_api_ollama_chat(sy_http_request *r);
void sy_api_ollama_generate(sy_http_request *r);
void sy_api_ollama_tags(sy_http_request *r);
void sy_api_ollama_show(sy_http_request *r);
void sy_api_ollama_ps(sy_http_request *r);
void sy_api_ollama_version(sy_http_request *r);

#endif
