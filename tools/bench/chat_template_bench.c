/* Rendering time of a chat request through a real template: the Qwen3 template (tests/fixtures/chat-templates)
 * with two tools and a 20-message history (system, user and assistant turns, reasoning, tool calls and their
 * results). Prints the compile time and the per-request render time (median, p99, in microseconds) of
 * sy_chat_jinja_apply on the compiled template (what a request costs: the serving path caches compiled
 * templates), and compile+render together. Built with the tests, not run by CTest:
 *   SY_SOURCE_DIR=. build/bin/chat_template_bench [renders, default 2000] [template file] [request.json to write]
 * (the request written out lets the reference render the same one: see docs/benchmarks.md) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "base/buf.h"
#include "chat/chat_jinja.h"

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static cJSON *tool(const char *name, const char *desc, const char *param, const char *ptype) {
    cJSON *t = cJSON_CreateObject();
    cJSON_AddStringToObject(t, "type", "function");
    cJSON *f = cJSON_AddObjectToObject(t, "function");
    cJSON_AddStringToObject(f, "name", name);
    cJSON_AddStringToObject(f, "description", desc);
    cJSON *p = cJSON_AddObjectToObject(f, "parameters");
    cJSON_AddStringToObject(p, "type", "object");
    cJSON *props = cJSON_AddObjectToObject(p, "properties");
    cJSON *a = cJSON_AddObjectToObject(props, param);
    cJSON_AddStringToObject(a, "type", ptype);
    cJSON_AddStringToObject(a, "description", "what the tool needs");
    cJSON *req = cJSON_AddArrayToObject(p, "required");
    cJSON_AddItemToArray(req, cJSON_CreateString(param));
    return t;
}

static cJSON *message(const char *role, const char *content) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", role);
    cJSON_AddStringToObject(m, "content", content);
    return m;
}

/* 20 messages: system, then 19 turns of users, assistants (some with reasoning or a tool call) and tool results */
static cJSON *build_request(void) {
    cJSON *req = cJSON_CreateObject();
    cJSON *tools = cJSON_AddArrayToObject(req, "tools");
    cJSON_AddItemToArray(tools, tool("get_weather", "Get the current weather in a city.", "city", "string"));
    cJSON_AddItemToArray(tools, tool("search_web", "Search the web and return the top results.", "query", "string"));
    cJSON *msgs = cJSON_AddArrayToObject(req, "messages");
    cJSON_AddItemToArray(msgs, message("system", "You are a helpful assistant. Answer briefly and use tools when useful."));
    int n = 1, turn = 0;
    while (n < 20) {
        char text[256];
        snprintf(text, sizeof text, "Question %d: what should I know about topic number %d today?", turn, turn);
        cJSON_AddItemToArray(msgs, message("user", text));
        n++;
        if (n >= 20) break;
        if (turn % 3 == 1 && n + 2 < 20) {
            cJSON *a = message("assistant", "");
            cJSON *calls = cJSON_AddArrayToObject(a, "tool_calls");
            cJSON *c = cJSON_CreateObject();
            snprintf(text, sizeof text, "call_%d", turn);
            cJSON_AddStringToObject(c, "id", text);
            cJSON_AddStringToObject(c, "type", "function");
            cJSON *f = cJSON_AddObjectToObject(c, "function");
            cJSON_AddStringToObject(f, "name", "get_weather");
            cJSON *args = cJSON_AddObjectToObject(f, "arguments");
            cJSON_AddStringToObject(args, "city", "Paris");
            cJSON_AddItemToArray(calls, c);
            cJSON_AddItemToArray(msgs, a);
            cJSON *t = message("tool", "{\"temp\": 18, \"sky\": \"clear\"}");
            cJSON_AddStringToObject(t, "tool_call_id", text);
            cJSON_AddItemToArray(msgs, t);
            n += 2;
            if (n >= 20) break;
        }
        snprintf(text, sizeof text, "Here is a short answer about topic %d, with a few details that matter.", turn);
        cJSON *a = message("assistant", text);
        if (turn % 2 == 0) cJSON_AddStringToObject(a, "reasoning_content", "The user asks about a topic; be brief.");
        cJSON_AddItemToArray(msgs, a);
        n++;
        turn++;
    }
    cJSON_AddBoolToObject(req, "add_generation_prompt", true);
    return req;
}

int main(int argc, char **argv) {
    int renders = argc > 1 ? atoi(argv[1]) : 2000;
    if (renders < 10) renders = 10;
    char path[2048];
    const char *src_dir = getenv("SY_SOURCE_DIR");
    if (argc > 2) snprintf(path, sizeof path, "%s", argv[2]);
    else snprintf(path, sizeof path, "%s/tests/fixtures/chat-templates/templates/Qwen-Qwen3-0.6B.jinja", src_dir ? src_dir : ".");
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "chat_template_bench: %s: cannot open\n", path);
        return 1;
    }
    sy_buf src;
    sy_buf_init(&src);
    sy_buf_read(&src, f, (size_t)1 << 20);
    fclose(f);
    cJSON *req = build_request();
    if (argc > 3) {
        char *json = cJSON_Print(req);
        FILE *o = fopen(argv[3], "wb");
        if (o == NULL || fputs(json, o) < 0 || fclose(o) != 0) {
            fprintf(stderr, "chat_template_bench: cannot write %s\n", argv[3]);
            return 1;
        }
        free(json);
    }
    char err[1024];
    size_t len = 0;
    double *t_apply = calloc((size_t)renders, sizeof *t_apply), *t_both = calloc((size_t)renders, sizeof *t_both);
    double c0 = now_us();
    sy_chat_jinja *t = sy_chat_jinja_compile(src.data, src.len, err, sizeof err);
    double compile_us = now_us() - c0;
    if (t == NULL) {
        fprintf(stderr, "chat_template_bench: %s\n", err);
        return 1;
    }
    for (int i = 0; i < renders; i++) {
        double a = now_us();
        char *out = sy_chat_jinja_apply(t, req, NULL, &len, err, sizeof err);
        t_apply[i] = now_us() - a;
        if (out == NULL) {
            fprintf(stderr, "chat_template_bench: %s\n", err);
            return 1;
        }
        free(out);
        a = now_us();
        out = sy_chat_jinja_render(src.data, src.len, req, NULL, &len, err, sizeof err);
        t_both[i] = now_us() - a;
        free(out);
    }
    qsort(t_apply, (size_t)renders, sizeof *t_apply, cmp_double);
    qsort(t_both, (size_t)renders, sizeof *t_both, cmp_double);
    size_t p99 = (size_t)((double)renders * 0.99);
    printf("template %s (%zu bytes), %d messages, 2 tools, prompt %zu bytes, %d renders\n", path, src.len,
           cJSON_GetArraySize(cJSON_GetObjectItem(req, "messages")), len, renders);
    printf("compile once: %.1f us\n", compile_us);
    printf("render (compiled): median %.1f us, p99 %.1f us\n", t_apply[renders / 2], t_apply[p99]);
    printf("compile + render: median %.1f us, p99 %.1f us\n", t_both[renders / 2], t_both[p99]);
    free(t_apply);
    free(t_both);
    sy_chat_jinja_free(t);
    cJSON_Delete(req);
    sy_buf_free(&src);
    return 0;
}
