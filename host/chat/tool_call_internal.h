/* What the tool-call parsers (tool_call_*.c) share: scanning helpers and each format's body parser. */
#ifndef SY_HOST_CHAT_TOOL_CALL_INTERNAL_H
#define SY_HOST_CHAT_TOOL_CALL_INTERNAL_H

#include "chat/tool_call.h"

/* The body parser of one format: text[pos..len) after the reasoning block. Appends content and calls. */
typedef void (*tc_body_fn)(const sy_chat_parse_options *o, const char *t, size_t len, size_t pos, bool final,
                           sy_chat_parse *out);

void tc_body_generic(const sy_chat_parse_options *o, const char *t, size_t len, size_t pos, bool final,
                     sy_chat_parse *out);
void tc_body_hermes(const sy_chat_parse_options *o, const char *t, size_t len, size_t pos, bool final,
                    sy_chat_parse *out);
void tc_body_llama3(const sy_chat_parse_options *o, const char *t, size_t len, size_t pos, bool final,
                    sy_chat_parse *out);
void tc_body_mistral(const sy_chat_parse_options *o, const char *t, size_t len, size_t pos, bool final,
                     sy_chat_parse *out);
void tc_body_deepseek(const sy_chat_parse_options *o, const char *t, size_t len, size_t pos, bool final,
                      sy_chat_parse *out);
void tc_body_granite(const sy_chat_parse_options *o, const char *t, size_t len, size_t pos, bool final,
                     sy_chat_parse *out);
void tc_body_phi4(const sy_chat_parse_options *o, const char *t, size_t len, size_t pos, bool final,
                  sy_chat_parse *out);
void tc_body_command_r(const sy_chat_parse_options *o, const char *t, size_t len, size_t pos, bool final,
                       sy_chat_parse *out);
void tc_body_functionary31(const sy_chat_parse_options *o, const char *t, size_t len, size_t pos, bool final,
                           sy_chat_parse *out);
void tc_body_functionary32(const sy_chat_parse_options *o, const char *t, size_t len, size_t pos, bool final,
                           sy_chat_parse *out);
void tc_body_kimi(const sy_chat_parse_options *o, const char *t, size_t len, size_t pos, bool final,
                  sy_chat_parse *out);
void tc_body_minimax_m1(const sy_chat_parse_options *o, const char *t, size_t len, size_t pos, bool final,
                        sy_chat_parse *out);
void tc_body_qwen3_coder(const sy_chat_parse_options *o, const char *t, size_t len, size_t pos, bool final,
                         sy_chat_parse *out);
void tc_body_glm4(const sy_chat_parse_options *o, const char *t, size_t len, size_t pos, bool final,
                  sy_chat_parse *out);
void tc_body_minimax_m2(const sy_chat_parse_options *o, const char *t, size_t len, size_t pos, bool final,
                        sy_chat_parse *out);
void tc_body_lfm2(const sy_chat_parse_options *o, const char *t, size_t len, size_t pos, bool final,
                  sy_chat_parse *out);
/* gpt-oss does its own reasoning (the analysis channel). */
void tc_parse_harmony(const sy_chat_parse_options *o, const char *t, size_t len, bool final, sy_chat_parse *out);

/* ---- helpers ------------------------------------------------------------------------------------------- */

/* The first occurrence of marker in t[from..len), or (size_t)-1. */
size_t tc_find(const char *t, size_t len, size_t from, const char *marker);
/* The length of the longest suffix of t[from..len) that is a proper prefix of marker. */
size_t tc_partial(const char *t, size_t len, size_t from, const char *marker);
bool tc_starts(const char *t, size_t len, size_t pos, const char *marker);
size_t tc_skip_ws(const char *t, size_t len, size_t pos);

/* Content up to the first of the openers: appends t[pos..opener) and returns the opener's position and index
 * (*which); or, none found, appends the rest (less a suffix that may begin an opener, unless final) and
 * returns (size_t)-1. */
size_t tc_content_until(const char *t, size_t len, size_t pos, const char *const *openers, size_t n_openers,
                        bool final, sy_chat_parse *out, size_t *which);

/* JSON scanning. Results: 1 complete (*end just past it), 0 the text ends inside it, -1 not JSON. */
int tc_json_value_end(const char *t, size_t len, size_t pos, size_t *end);
/* A JSON string at pos, decoded into dec (NULL: not decoded). Partial: dec holds the complete characters. */
int tc_json_string(const char *t, size_t len, size_t pos, size_t *end, sy_buf *dec);

/* A call object {"name": ..., "arguments": {...}} at pos (keys: name|tool_name|function, arguments|parameters,
 * other keys skipped). Adds the call once its name is known. 1 complete, 0 partial, -1 invalid. */
int tc_call_object(const char *t, size_t len, size_t pos, bool final, sy_chat_parse *out, size_t *end);
/* A JSON array of call objects. */
int tc_call_array(const char *t, size_t len, size_t pos, bool final, sy_chat_parse *out, size_t *end);
/* Arguments given as JSON after the name is known: adds a call with name and the arguments so far. */
int tc_call_json_args(const char *name, size_t name_len, const char *t, size_t len, size_t pos, bool final,
                      sy_chat_parse *out, size_t *end);

/* Adds a call; NULL when SY_TOOL_MAX_CALLS are there (truncated_calls is set). */
sy_tool_call *tc_add_call(sy_chat_parse *out, const char *name, size_t name_len);
/* A parameter's value text as JSON: per the tool's schema type when known ("string" keeps it a string), else
 * JSON when it parses as JSON, else a string. Appends `"key":value` (with a leading comma unless first). */
void tc_append_param(const sy_chat_parse_options *o, const char *tool, sy_buf *args, const char *key, size_t key_len,
                     const char *value, size_t value_len);
/* Appends s as a JSON string. */
void tc_json_quote(sy_buf *b, const char *s, size_t len);

#endif
