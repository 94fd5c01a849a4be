/*
 * switchyard chat-template FILE: an OpenAI-style chat request on stdin (messages, tools, add_generation_prompt,
 * bos_token, eos_token, chat_template_kwargs) rendered through the Jinja template in FILE; the prompt goes to
 * stdout exactly, nothing added. A template error or its raise_exception goes to stderr, exit status 1.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "base/buf.h"
#include "chat/chat_jinja.h"
#include "cli/commands.h"

#define MAX_REQUEST_BYTES ((size_t)64 << 20)

static void usage(FILE *out) {
    fprintf(out,
            "usage: switchyard chat-template FILE < request.json\n\n"
            "Renders the chat request on stdin (an OpenAI-style JSON object: messages, tools, add_generation_prompt,\n"
            "bos_token, eos_token, chat_template_kwargs) through the Jinja chat template in FILE, as transformers'\n"
            "apply_chat_template does, and prints the prompt exactly. SY_CHAT_TEMPLATE_NOW (seconds since the\n"
            "epoch, UTC) fixes what strftime_now() sees.\n");
}

int sy_cmd_chat_template(int argc, char **argv) {
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        usage(stdout);
        return 0;
    }
    if (argc != 2) {
        usage(stderr);
        return 2;
    }
    FILE *f = fopen(argv[1], "rb");
    if (f == NULL) {
        fprintf(stderr, "switchyard chat-template: %s: %s\n", argv[1], strerror(errno));
        return 1;
    }
    sy_buf tpl, req;
    sy_buf_init(&tpl);
    sy_buf_init(&req);
    bool ok = sy_buf_read(&tpl, f, SY_CHAT_JINJA_MAX_SOURCE);
    fclose(f);
    if (!ok || tpl.len > SY_CHAT_JINJA_MAX_SOURCE) {
        fprintf(stderr, "switchyard chat-template: %s: %s\n", argv[1],
                ok ? "larger than the 1 MiB a template may have" : strerror(errno));
        sy_buf_free(&tpl);
        return 1;
    }
    ok = sy_buf_read(&req, stdin, MAX_REQUEST_BYTES);
    if (!ok || req.len > MAX_REQUEST_BYTES) {
        fprintf(stderr, "switchyard chat-template: stdin: %s\n", ok ? "the request is larger than 64 MiB" : strerror(errno));
        sy_buf_free(&tpl);
        sy_buf_free(&req);
        return 1;
    }
    const char *end = NULL;
    cJSON *request = cJSON_ParseWithLengthOpts(req.data ? req.data : "", req.len, &end, 0);
    if (request == NULL || !cJSON_IsObject(request)) {
        size_t at = end && req.data ? (size_t)(end - req.data) : 0;
        fprintf(stderr, "switchyard chat-template: stdin is not a JSON object (%s at byte %zu)\n",
                request ? "not an object" : "syntax error", at);
        cJSON_Delete(request);
        sy_buf_free(&tpl);
        sy_buf_free(&req);
        return 1;
    }
    char err[1024] = "";
    size_t len = 0;
    char *text = sy_chat_jinja_render(tpl.data ? tpl.data : "", tpl.len, request, NULL, &len, err, sizeof err);
    cJSON_Delete(request);
    sy_buf_free(&tpl);
    sy_buf_free(&req);
    if (text == NULL) {
        fprintf(stderr, "switchyard chat-template: %s: %s\n", argv[1], err);
        return 1;
    }
    size_t w = fwrite(text, 1, len, stdout);
    free(text);
    if (w != len || fflush(stdout) != 0) {
        fprintf(stderr, "switchyard chat-template: writing stdout: %s\n", strerror(errno));
        return 1;
    }
    return 0;
}
