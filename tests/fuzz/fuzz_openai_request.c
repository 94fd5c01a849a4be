/* Fuzz target: an OpenAI chat or completions body (the first byte picks which) from JSON to generation
 * parameters, prompt and messages, as the handlers check them before a model is chosen. */
#include <stdint.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "api/openai.h"
#include "api/sampling_fields.h"
#include "fuzz_api_request.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    bool chat = (data[0] & 1) != 0;
    cJSON *body = cJSON_ParseWithLength((const char *)data + 1, size - 1);
    if (body == NULL) return 0;
    if (cJSON_IsObject(body)) {
        sy_gen_params p = sy_gen_params_defaults();
        sy_api_error e;
        memset(&e, 0, sizeof e);
        int rc = sy_api_openai_parse_request(body, chat, &p, &e);
        check_outcome(rc, &e, &p);
        sy_api_sampling_fields_free(&p); /* logit_bias, as the handlers free it */
    }
    cJSON_Delete(body);
    return 0;
}
