/*
 * Fuzz target: the Jinja chat-template engine (host/chat/chat_jinja.c and jinja_*.c).
 *
 * The input is a template, optionally followed by a NUL byte and a chat request (JSON). The template is compiled;
 * when it compiles it is rendered, with small limits, against the request (or a conversation with tools, tool
 * calls and reasoning when there is none). Beyond "no crash, no leak, no undefined behaviour, no hang": a render
 * either gives text within the output limit or one error message naming a line; the same compiled template
 * renders the same twice (it is not modified by rendering).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "chat/chat_jinja.h"

#define CHECK(cond)                                                                                      \
    do {                                                                                                 \
        if (!(cond)) {                                                                                   \
            fprintf(stderr, "fuzz_chat_template: %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            abort();                                                                                     \
        }                                                                                                \
    } while (0)

static const char DEFAULT_REQUEST[] =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": \"Hi é\"},"
    "{\"role\": \"assistant\", \"content\": null, \"reasoning_content\": \"think\", \"tool_calls\": [{\"id\": \"c1\","
    "\"type\": \"function\", \"function\": {\"name\": \"f\", \"arguments\": {\"a\": 1}}}]},"
    "{\"role\": \"tool\", \"tool_call_id\": \"c1\", \"name\": \"f\", \"content\": \"ok\"},"
    "{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"more\"}]}],"
    "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"description\": \"d\", \"parameters\":"
    "{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\"}}, \"required\": [\"a\"]}}}],"
    "\"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\","
    "\"chat_template_kwargs\": {\"enable_thinking\": false, \"reasoning_effort\": \"low\"}}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *src = (const char *)data;
    size_t src_len = size;
    const void *nul = memchr(data, '\0', size);
    cJSON *request = NULL;
    if (nul != NULL) {
        src_len = (size_t)((const uint8_t *)nul - data);
        request = cJSON_ParseWithLength(src + src_len + 1, size - src_len - 1);
    }
    if (request == NULL) request = cJSON_Parse(DEFAULT_REQUEST);
    CHECK(request != NULL);
    char err[512] = "";
    sy_chat_jinja *t = sy_chat_jinja_compile(src, src_len, err, sizeof err);
    if (t == NULL) {
        CHECK(strncmp(err, "chat template", 13) == 0);
    } else {
        sy_chat_jinja_options opt = {.now_set = true, .now_unix = 1772874300,
                                     .limits = {.max_output_bytes = 1 << 20, .max_steps = 200000, .max_depth = 40}};
        size_t len1 = 0, len2 = 0;
        char err2[512] = "";
        char *a = sy_chat_jinja_apply(t, request, &opt, &len1, err, sizeof err);
        char *b = sy_chat_jinja_apply(t, request, &opt, &len2, err2, sizeof err2);
        CHECK((a == NULL) == (b == NULL));
        if (a != NULL) {
            CHECK(len1 <= opt.limits.max_output_bytes && len1 == len2 && memcmp(a, b, len1) == 0);
            CHECK(strlen(a) == len1);
        } else {
            CHECK(strncmp(err, "chat template", 13) == 0 && strcmp(err, err2) == 0);
        }
        free(a);
        free(b);
        sy_chat_jinja_free(t);
    }
    cJSON_Delete(request);
    return 0;
}
