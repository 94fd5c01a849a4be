/* llama-server's POST /apply-template: a chat request rendered through the named model's template, not run. */
#include "api/apply_template.h"

#include <stdlib.h>
#include <string.h>

#include "api/chat_prompt.h"
#include "api/lease.h"
#include "api/messages.h"
#include "api/request.h"

void sy_api_apply_template(sy_http_request *r) {
    sy_api_error e;
    memset(&e, 0, sizeof e);
    cJSON *body = NULL;
    sy_api_messages messages;
    memset(&messages, 0, sizeof messages);
    sy_api_model m;
    memset(&m, 0, sizeof m);
    const char *model_name = NULL;
    char *prompt = NULL;
    bool add_generation_prompt = true;
    if (sy_api_parse_body(r, &body, &e) != 0) goto fail;
    if (sy_json_get_string(body, NULL, "model", &model_name, NULL, &e) != 0) goto fail;
    if (sy_json_get_bool(body, NULL, "add_generation_prompt", &add_generation_prompt, NULL, &e) != 0) goto fail;
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(body, "messages");
    if (msgs == NULL) {
        sy_api_fail(&e, 400, "missing_messages", "messages", "messages is required");
        goto fail;
    }
    if (sy_api_parse_messages(msgs, "messages", &messages, &e) != 0) goto fail;
    const cJSON *kwargs = cJSON_GetObjectItemCaseSensitive(body, "chat_template_kwargs");
    if (kwargs != NULL && !cJSON_IsNull(kwargs) && !cJSON_IsObject(kwargs)) {
        sy_api_fail(&e, 400, "invalid_type", "chat_template_kwargs", "chat_template_kwargs must be an object");
        goto fail;
    }
    if (sy_api_acquire(r, model_name, &m, &e) != 0) goto fail;
    sy_api_chat_request q = {
        .items = messages.items,
        .n_items = messages.n,
        .messages = msgs,
        .tools = cJSON_GetObjectItemCaseSensitive(body, "tools"),
        .chat_template_kwargs = kwargs,
        .reasoning_effort = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(body, "reasoning_effort")),
        .add_generation_prompt = add_generation_prompt};
    size_t len = 0;
    if (sy_api_render_chat_request(r, &m, &q, &prompt, &len, &e) != 0) goto fail;
    sy_api_model_release(&m);
    cJSON *out = cJSON_CreateObject();
    cJSON_AddStringToObject(out, "prompt", prompt);
    free(prompt);
    sy_api_messages_free(&messages);
    cJSON_Delete(body);
    sy_http_respond_json(r, 200, out);
    return;
fail:
    sy_api_model_release(&m);
    free(prompt);
    sy_api_messages_free(&messages);
    cJSON_Delete(body);
    sy_api_respond_error(r, &e);
}
