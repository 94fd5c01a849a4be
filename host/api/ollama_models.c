/* Ollama's model management (/api/pull, /api/push, /api/create, /api/copy, /api/delete). Models come from the
 * configuration here, so these answer in Ollama's error shape saying so, except a pull of a configured name: that
 * is what a client does before using a model (Open WebUI, Continue), and it succeeds as a no-op with the
 * progress lines Ollama streams. */
#include "api/ollama.h"

#include <stdio.h>
#include <string.h>

#include "api/context.h"
#include "api/request.h"
#include "base/buf.h"
#include "base/utf8.h"

/* The model a management request names ("model", or the older "name"); NULL after answering 400. */
static const char *named_model(sy_http_request *r, cJSON **body, const char *key) {
    sy_api_error e;
    memset(&e, 0, sizeof e);
    const char *name = NULL;
    if (sy_api_parse_body(r, body, &e) != 0 || sy_json_get_string(*body, NULL, key, &name, NULL, &e) != 0 ||
        (name == NULL && strcmp(key, "model") == 0 && sy_json_get_string(*body, NULL, "name", &name, NULL, &e) != 0)) {
        sy_api_respond_error(r, &e);
        return NULL;
    }
    if (name == NULL || name[0] == '\0') {
        sy_http_respond_error(r, 400, "missing_model", key, "%s is required", key);
        return NULL;
    }
    return name;
}

static const char *config_source(const sy_config *cfg) { return cfg && cfg->source ? cfg->source : "the config file"; }

void sy_api_ollama_pull(sy_http_request *r) {
    cJSON *body = NULL;
    const char *name = named_model(r, &body, "model");
    if (name == NULL) {
        cJSON_Delete(body);
        return;
    }
    bool stream = true;
    sy_api_error e;
    memset(&e, 0, sizeof e);
    if (sy_json_get_bool(body, NULL, "stream", &stream, NULL, &e) != 0) {
        cJSON_Delete(body);
        sy_api_respond_error(r, &e);
        return;
    }
    sy_api_context *srv = sy_api_ctx(r);
    const sy_config *cfg = sy_api_config_acquire(srv);
    const sy_config_model *cm = cfg ? sy_config_find_model(cfg, name) : NULL;
    char shown[160];
    sy_utf8_sanitize(shown, sizeof shown, name, strlen(name));
    if (cm == NULL) {
        sy_http_respond_error(r, 404, "model_not_found", "model",
                              "model '%s' is not configured: switchyard serves the models of its configuration and "
                              "downloads nothing; add a [model.%s] section with its plugin and path to %s",
                              shown, shown, config_source(cfg));
    } else if (!stream) {
        sy_http_respond(r, 200, "application/json", "{\"status\":\"success\"}", 20);
    } else {
        static const char lines[] = "{\"status\":\"pulling manifest\"}\n"
                                    "{\"status\":\"verifying sha256 digest\"}\n"
                                    "{\"status\":\"writing manifest\"}\n"
                                    "{\"status\":\"success\"}\n";
        sy_http_respond(r, 200, "application/x-ndjson", lines, sizeof lines - 1);
    }
    sy_api_config_release(srv, cfg);
    cJSON_Delete(body);
}

/* create, copy, push, delete: what the request would do, and where to do it instead. */
static void refuse(sy_http_request *r, const char *key, const char *what, const char *instead) {
    cJSON *body = NULL;
    const char *name = named_model(r, &body, key);
    if (name == NULL) {
        cJSON_Delete(body);
        return;
    }
    sy_api_context *srv = sy_api_ctx(r);
    const sy_config *cfg = sy_api_config_acquire(srv);
    char shown[160];
    sy_utf8_sanitize(shown, sizeof shown, name, strlen(name));
    bool known = cfg && sy_config_find_model(cfg, name) != NULL;
    if (!known && (strcmp(what, "delete") == 0 || strcmp(what, "copy") == 0 || strcmp(what, "push") == 0))
        sy_http_respond_error(r, 404, "model_not_found", key, "model '%s' not found", shown);
    else
        sy_http_respond_error(r, 400, "not_supported", key,
                              "%s '%s': models come from the configuration (%s), not from the API; %s", what, shown,
                              config_source(cfg), instead);
    sy_api_config_release(srv, cfg);
    cJSON_Delete(body);
}

void sy_api_ollama_create(sy_http_request *r) {
    refuse(r, "model", "create", "add a [model.NAME] section with its plugin, path and settings");
}
void sy_api_ollama_copy(sy_http_request *r) {
    refuse(r, "source", "copy", "give the model another name with its aliases key");
}
void sy_api_ollama_push(sy_http_request *r) { refuse(r, "model", "push", "switchyard publishes no models"); }
void sy_api_ollama_delete(sy_http_request *r) {
    refuse(r, "model", "delete", "remove its [model.NAME] section (and the file) to delete it");
}
