/* See chat_output.h. */
#include "api/chat_output.h"

#include <stdlib.h>
#include <string.h>

#include "api/chat_tools.h"
#include "base/util.h"

static void on_delta(void *user, const sy_tool_delta *d) {
    sy_api_chat_output *o = user;
    switch (d->type) {
    case SY_TOOL_DELTA_CONTENT: sy_buf_append(&o->content, d->text, d->len); break;
    case SY_TOOL_DELTA_REASONING: sy_buf_append(&o->reasoning, d->text, d->len); break;
    case SY_TOOL_DELTA_CALL_START: {
        if (o->openai_calls == NULL) o->openai_calls = cJSON_CreateArray();
        cJSON *c = cJSON_CreateObject();
        cJSON_AddNumberToObject(c, "index", (double)d->index);
        cJSON_AddStringToObject(c, "id", d->id);
        cJSON_AddStringToObject(c, "type", "function");
        cJSON *fn = cJSON_AddObjectToObject(c, "function");
        cJSON_AddStringToObject(fn, "name", d->name);
        cJSON_AddStringToObject(fn, "arguments", "");
        cJSON_AddItemToArray(o->openai_calls, c);
        break;
    }
    case SY_TOOL_DELTA_CALL_ARGS: {
        if (o->openai_calls == NULL) o->openai_calls = cJSON_CreateArray();
        cJSON *last = cJSON_GetArrayItem(o->openai_calls, cJSON_GetArraySize(o->openai_calls) - 1);
        const cJSON *idx = cJSON_GetObjectItemCaseSensitive(last, "index");
        sy_buf frag;
        sy_buf_init(&frag);
        if (last != NULL && cJSON_IsNumber(idx) && (size_t)idx->valuedouble == d->index) {
            /* Same call as the entry before: its arguments grow. */
            cJSON *fn = cJSON_GetObjectItemCaseSensitive(last, "function");
            cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
            sy_buf_puts(&frag, cJSON_IsString(args) ? args->valuestring : "");
            sy_buf_append(&frag, d->text, d->len);
            cJSON_ReplaceItemInObjectCaseSensitive(fn, "arguments", cJSON_CreateString(frag.data));
        } else {
            sy_buf_append(&frag, d->text, d->len);
            cJSON *c = cJSON_CreateObject();
            cJSON_AddNumberToObject(c, "index", (double)d->index);
            cJSON *fn = cJSON_AddObjectToObject(c, "function");
            cJSON_AddStringToObject(fn, "arguments", frag.data);
            cJSON_AddItemToArray(o->openai_calls, c);
        }
        sy_buf_free(&frag);
        break;
    }
    }
}

void sy_api_chat_output_init(sy_api_chat_output *o, const sy_chat_parse_options *opts, uint64_t id_seed) {
    memset(o, 0, sizeof *o);
    sy_tool_stream_init(&o->stream, opts, id_seed);
    sy_buf_init(&o->content);
    sy_buf_init(&o->reasoning);
    o->started = true;
}

void sy_api_chat_output_free(sy_api_chat_output *o) {
    if (!o->started) return;
    sy_tool_stream_free(&o->stream);
    sy_buf_free(&o->content);
    sy_buf_free(&o->reasoning);
    cJSON_Delete(o->openai_calls);
    memset(o, 0, sizeof *o);
}

void sy_api_chat_output_feed(sy_api_chat_output *o, const char *text, size_t len) {
    sy_tool_stream_feed(&o->stream, text, len, on_delta, o);
}

void sy_api_chat_output_finish(sy_api_chat_output *o) { sy_tool_stream_finish(&o->stream, on_delta, o); }

const sy_chat_parse *sy_api_chat_output_result(const sy_api_chat_output *o) { return &o->stream.last; }

cJSON *sy_api_chat_output_openai_delta(sy_api_chat_output *o) {
    if (o->content.len == 0 && o->reasoning.len == 0 && o->openai_calls == NULL) return NULL;
    cJSON *d = cJSON_CreateObject();
    if (o->reasoning.len > 0) cJSON_AddStringToObject(d, "reasoning_content", o->reasoning.data);
    if (o->content.len > 0) cJSON_AddStringToObject(d, "content", o->content.data);
    if (o->openai_calls != NULL) cJSON_AddItemToObject(d, "tool_calls", o->openai_calls);
    o->openai_calls = NULL;
    sy_buf_clear(&o->content);
    sy_buf_clear(&o->reasoning);
    return d;
}

void sy_api_chat_output_openai_message(const sy_api_chat_output *o, cJSON *msg) {
    const sy_chat_parse *p = &o->stream.last;
    if (p->content.len > 0 || p->n_calls == 0) cJSON_AddStringToObject(msg, "content", p->content.data ? p->content.data : "");
    else cJSON_AddNullToObject(msg, "content");
    if (p->reasoning.len > 0) cJSON_AddStringToObject(msg, "reasoning_content", p->reasoning.data);
    if (p->n_calls > 0) {
        cJSON *arr = cJSON_AddArrayToObject(msg, "tool_calls");
        for (size_t i = 0; i < p->n_calls; i++) {
            cJSON *c = cJSON_CreateObject();
            cJSON_AddStringToObject(c, "id", p->calls[i].id ? p->calls[i].id : "");
            cJSON_AddStringToObject(c, "type", "function");
            cJSON *fn = cJSON_AddObjectToObject(c, "function");
            cJSON_AddStringToObject(fn, "name", p->calls[i].name);
            cJSON_AddStringToObject(fn, "arguments", p->calls[i].arguments.data ? p->calls[i].arguments.data : "{}");
            cJSON_AddItemToArray(arr, c);
        }
    }
}

cJSON *sy_api_chat_output_ollama_calls(sy_api_chat_output *o, bool at_end) {
    const sy_chat_parse *p = &o->stream.last;
    cJSON *arr = NULL;
    while (o->whole_calls < p->n_calls && (at_end || p->calls[o->whole_calls].complete)) {
        const sy_tool_call *call = &p->calls[o->whole_calls];
        if (arr == NULL) arr = cJSON_CreateArray();
        cJSON *c = cJSON_CreateObject();
        const char *id = sy_tool_stream_call_id(&o->stream, o->whole_calls);
        if (id != NULL) cJSON_AddStringToObject(c, "id", id);
        cJSON *fn = cJSON_AddObjectToObject(c, "function");
        cJSON_AddNumberToObject(fn, "index", (double)o->whole_calls);
        cJSON_AddStringToObject(fn, "name", call->name);
        cJSON_AddItemToObject(fn, "arguments", sy_api_tool_arguments(call));
        cJSON_AddItemToArray(arr, c);
        o->whole_calls++;
    }
    return arr;
}

bool sy_api_chat_output_has_calls(const sy_api_chat_output *o) { return o->started && o->stream.last.n_calls > 0; }
