/* See serve.h. The route labels are what /metrics reports per endpoint. */
#include "api/serve.h"
#include "api/admin.h"
#include "api/ollama.h"
#include "api/openai.h"
#include "api/slots.h"

enum { GET = SY_HTTP_GET, POST = SY_HTTP_POST };
/* Management routes need an admin key (docs/security.md); bodies they take are small. State changes are POST
 * only, so that an <img> or a link cannot cause one. */
#define ADMIN SY_ROUTE_ADMIN, SMALL_BODY
#define SMALL_BODY ((uint64_t)64 << 10)
#define OPENAI SY_API_STYLE_OPENAI
#define OLLAMA SY_API_STYLE_OLLAMA

/* Rows may leave the trailing fields (flags, max_body) out: zero, the defaults. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
static const sy_http_route routes[] = {
    {GET, "/", false, "/", OPENAI, true, sy_api_root},
    {GET, "/health", false, "/health", OPENAI, true, sy_api_health},
    {GET, "/running", false, "/running", OPENAI, false, sy_api_running, ADMIN},
    {POST, "/unload", false, "/unload", OPENAI, false, sy_api_unload, ADMIN},
    {POST, "/unload/", true, "/unload/{model}", OPENAI, false, sy_api_unload, ADMIN},
    {GET, "/metrics", false, "/metrics", OPENAI, false, sy_api_metrics, ADMIN},
    {POST, "/reload", false, "/reload", OPENAI, false, sy_api_reload, ADMIN},
    {GET, "/v1/models", false, "/v1/models", OPENAI, false, sy_api_openai_models},
    {GET, "/v1/models/", true, "/v1/models/{id}", OPENAI, false, sy_api_openai_model},
    {POST, "/v1/chat/completions", false, "/v1/chat/completions", OPENAI, false, sy_api_openai_chat},
    {POST, "/v1/completions", false, "/v1/completions", OPENAI, false, sy_api_openai_completions},
    {POST, "/api/chat", false, "/api/chat", OLLAMA, false, sy_api_ollama_chat},
    {POST, "/api/generate", false, "/api/generate", OLLAMA, false, sy_api_ollama_generate},
    {GET, "/api/tags", false, "/api/tags", OLLAMA, false, sy_api_ollama_tags},
    {POST, "/api/show", false, "/api/show", OLLAMA, false, sy_api_ollama_show, 0, SMALL_BODY},
    {GET, "/api/ps", false, "/api/ps", OLLAMA, false, sy_api_ollama_ps},
    {GET, "/api/version", false, "/api/version", OLLAMA, false, sy_api_ollama_version},
    {GET, "/slots", false, "/slots", OPENAI, false, sy_api_slots, ADMIN},
    {POST, "/slots/", true, "/slots/{id}", OPENAI, false, sy_api_slots, ADMIN},
};
#pragma GCC diagnostic pop

const sy_http_route *sy_api_routes(size_t *n) {
    *n = sizeof routes / sizeof *routes;
    return routes;
}

sy_api_context *sy_api_serve(const sy_server_options *opts, sy_config *cfg, sy_model_manager *mm,
                             sy_metrics *metrics, char *err, size_t err_size) {
    sy_api_context *c = sy_api_context_create(cfg, mm, metrics);
    sy_server_options o = opts ? *opts : (sy_server_options){0};
    o.routes = sy_api_routes(&o.n_routes);
    o.app = c;
    o.authorize = sy_api_check_key;
    o.origin_policy = sy_api_origin_policy;
    o.host_allowed = sy_api_host_allowed;
    o.on_done = sy_api_request_done;
    sy_server *server = sy_server_start(&o, err, err_size);
    if (server == NULL) {
        sy_api_context_free(c);
        return NULL;
    }
    sy_api_context_attach(c, server);
    return c;
}

void sy_api_stop(sy_api_context *c) {
    if (c == NULL) return;
    sy_server_stop(sy_api_server(c));
    sy_api_context_attach(c, NULL);
    sy_api_context_free(c);
}
