/*
 * Request errors in the shape of the route's API, the request body as JSON, checked access to its fields,
 * ids and seeds.
 */
#ifndef SY_HOST_API_REQUEST_H
#define SY_HOST_API_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "base/buf.h"
#include "base/utf8.h"
#include "engine/scheduler.h"
#include "http/http_server.h"

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

/* The most values (numbers, strings, ... each array item counts) a request body may hold: a parsed value takes
 * about 64 bytes, so this bounds a body's tree at about 64 MiB whatever its bytes. */
#define SY_API_MAX_JSON_VALUES (1u << 20)
/* The body as a JSON object: 400 for malformed JSON, a non-object, or a string holding \u0000; 413 for more
 * than SY_API_MAX_JSON_VALUES values. */
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

#endif
