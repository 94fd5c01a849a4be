/* POST /apply-template (llama-server): {"model", "messages", "tools", "chat_template_kwargs",
 * "add_generation_prompt" (default true)} -> {"prompt": the text the model's chat template renders}. The model is
 * loaded if it is not (its template and token texts come from it); nothing is generated. */
#ifndef SY_HOST_API_APPLY_TEMPLATE_H
#define SY_HOST_API_APPLY_TEMPLATE_H

#include "http/http_server.h"

void sy_api_apply_template(sy_http_request *r);

#endif
