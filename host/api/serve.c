/* See serve.h. The route labels are what /metrics reports per endpoint. */
#include "api/serve.h"
#include "api/admin.h"
#include "api/embeddings.h"
#include "api/ollama.h"
#include "api/openai.h"
#include "api/slots.h"

enum { GET = SY_HTTP_GET, POST = SY_HTTP_POST };
#define OPENAI SY_API_STYLE_OPENAI
#define OLLAMA SY_API_STYLE_OLLAMA

static const sy_http_route routes[] = {
    {GET, "/", false, "/", OPENAI, true, sy_api_root},
    {GET, "/health", false, "/health", OPENAI, true, sy_api_health},
    {GET, "/running", false, "/running", OPENAI, false, sy_api_running},
    {GET | POST, "/unload", false, "/unload", OPENAI, false, sy_api_unload},
    {GET | POST, "/unload/", true, "/unload/{model}", OPENAI, false, sy_api_unload},
    {GET, "/metrics", false, "/metrics", OPENAI, false, sy_api_metrics},
    {GET, "/v1/models", false, "/v1/models", OPENAI, false, sy_api_openai_models},
    {GET, "/v1/models/", true, "/v1/models/{id}", OPENAI, false, sy_api_openai_model},
    {POST, "/v1/chat/completions", false, "/v1/chat/completions", OPENAI, false, sy_api_openai_chat},
    {POST, "/v1/completions", false, "/v1/completions", OPENAI, false, sy_api_openai_completions},
    {POST, "/v1/embeddings", false, "/v1/embeddings", OPENAI, false, sy_api_openai_embeddings},
    {POST, "/rerank", false, "/rerank", OPENAI, false, sy_api_rerank},
    {POST, "/v1/rerank", false, "/v1/rerank", OPENAI, false, sy_api_rerank},
    {POST, "/api/embed", false, "/api/embed", OLLAMA, false, sy_api_ollama_embed},
    {POST, "/api/embeddings", false, "/api/embeddings", OLLAMA, false, sy_api_ollama_embeddings},
    {POST, "/api/chat", false, "/api/chat", OLLAMA, false, sy_api_ollama_chat},
    {POST, "/api/generate", false, "/api/generate", OLLAMA, false, sy_api_ollama_generate},
    {GET, "/api/tags", false, "/api/tags", OLLAMA, false, sy_api_ollama_tags},
    {POST, "/api/show", false, "/api/show", OLLAMA, false, sy_api_ollama_show},
    {GET, "/api/ps", false, "/api/ps", OLLAMA, false, sy_api_ollama_ps},
    {GET, "/api/version", false, "/api/version", OLLAMA, false, sy_api_ollama_version},
    {GET, "/slots", false, "/slots", OPENAI, false, sy_api_slots},
    {POST, "/slots/", true, "/slots/{id}", OPENAI, false, sy_api_slots},
};

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
