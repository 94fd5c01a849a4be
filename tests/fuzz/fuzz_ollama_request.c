/* Fuzz target: an Ollama /api/chat or /api/generate body (the first byte picks which) from JSON to generation
 * parameters, keep_alive and messages, as the handlers check them before a model is chosen. */
#include <stdint.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "api/ollama.h"
#include "api/sampling_fields.h"
#include "fuzz_api_request.h"
#include "manager/model_manager.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    bool chat = (data[0] & 1) != 0;
    cJSON *body = cJSON_ParseWithLength((const char *)data + 1, size - 1);
    if (body == NULL) return 0;
    if (cJSON_IsObject(body)) {
        sy_gen_params p = sy_gen_params_defaults();
        sy_api_error e;
        memset(&e, 0, sizeof e);
        int64_t keep_alive = 0;
        int rc = sy_api_ollama_parse_request(body, chat, &p, &keep_alive, &e);
        check_outcome(rc, &e, &p);
        sy_api_sampling_fields_free(&p); /* logit_bias, as the handlers free it */
        /* The ttl is the configured one, forever, or whole seconds a model manager takes. */
        if (rc == 0 && keep_alive != SY_MODEL_TTL_CONFIGURED && keep_alive != SY_MODEL_TTL_FOREVER &&
            (keep_alive < 0 || keep_alive > INT32_MAX))
            abort();
    }
    cJSON_Delete(body);
    return 0;
}
