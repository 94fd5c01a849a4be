/* See serve.h. The route labels are what /metrics reports per endpoint. */
#include "api/serve.h"
#include "api/admin.h"
#include "api/llama_server.h"
#include "api/anthropic.h"
#include "api/apply_template.h"
#include "api/embeddings.h"
#include "api/ollama.h"
#include "api/openai.h"
#include "api/proxy.h"
#include "api/slots.h"

enum { GET = SY_HTTP_GET, POST = SY_HTTP_POST, DELETE = SY_HTTP_DELETE };
/* Management routes need an admin key (docs/security.md); bodies they take are small. State changes are POST
 * only, so that an <img> or a link cannot cause one. */
#define ADMIN SY_ROUTE_ADMIN, SMALL_BODY
#define SMALL_BODY ((uint64_t)64 << 10)
#define OPENAI SY_API_STYLE_OPENAI
#define OLLAMA SY_API_STYLE_OLLAMA
#define ANTHROPIC SY_API_STYLE_ANTHROPIC

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
    {POST, "/v1/messages", false, "/v1/messages", ANTHROPIC, false, sy_api_anthropic_messages},
    {POST, "/v1/messages/count_tokens", false, "/v1/messages/count_tokens", ANTHROPIC, false,
     sy_api_anthropic_count_tokens},
    {POST, "/apply-template", false, "/apply-template", OPENAI, false, sy_api_apply_template},
    {POST, "/v1/embeddings", false, "/v1/embeddings", OPENAI, false, sy_api_openai_embeddings},
    {POST, "/rerank", false, "/rerank", OPENAI, false, sy_api_rerank},
    {POST, "/v1/rerank", false, "/v1/rerank", OPENAI, false, sy_api_rerank},
    {POST, "/api/embed", false, "/api/embed", OLLAMA, false, sy_api_ollama_embed},
    {POST, "/api/embeddings", false, "/api/embeddings", OLLAMA, false, sy_api_ollama_embeddings},
    {POST, "/api/chat", false, "/api/chat", OLLAMA, false, sy_api_ollama_chat},
    {POST, "/api/generate", false, "/api/generate", OLLAMA, false, sy_api_ollama_generate},
    {GET, "/api/tags", false, "/api/tags", OLLAMA, false, sy_api_ollama_tags},
    {POST, "/api/show", false, "/api/show", OLLAMA, false, sy_api_ollama_show, 0, SMALL_BODY},
    {GET, "/api/ps", false, "/api/ps", OLLAMA, false, sy_api_ollama_ps},
    {GET, "/api/version", false, "/api/version", OLLAMA, false, sy_api_ollama_version},
    {POST, "/api/pull", false, "/api/pull", OLLAMA, false, sy_api_ollama_pull},
    {POST, "/api/push", false, "/api/push", OLLAMA, false, sy_api_ollama_push},
    {POST, "/api/create", false, "/api/create", OLLAMA, false, sy_api_ollama_create},
    {POST, "/api/copy", false, "/api/copy", OLLAMA, false, sy_api_ollama_copy},
    {DELETE | POST, "/api/delete", false, "/api/delete", OLLAMA, false, sy_api_ollama_delete},
    {POST, "/tokenize", false, "/tokenize", OPENAI, false, sy_api_llama_tokenize},
    {POST, "/detokenize", false, "/detokenize", OPENAI, false, sy_api_llama_detokenize},
    {GET, "/props", false, "/props", OPENAI, false, sy_api_llama_props},
    {POST, "/infill", false, "/infill", OPENAI, false, sy_api_llama_infill},
    {GET, "/slots", false, "/slots", OPENAI, false, sy_api_slots, ADMIN},
    {POST, "/slots/", true, "/slots/{id}", OPENAI, false, sy_api_slots, ADMIN},
    /* llama-swap's: a process or peer model's own server, and the captured logs. */
    {GET | POST, "/upstream/", true, "/upstream/{model}", OPENAI, false, sy_api_upstream},
    {GET, "/logs", false, "/logs", OPENAI, false, sy_api_logs},
    {GET, "/logs/stream", false, "/logs/stream", OPENAI, false, sy_api_logs_stream},
    /* OpenAI routes only upstreams answer here (the intercept forwards them; embeddings and rerank, which our own
     * engines answer too, are above). */
    {POST, "/v1/audio/", true, "/v1/audio/{op}", OPENAI, false, sy_api_proxy_only},
    {POST, "/v1/responses", false, "/v1/responses", OPENAI, false, sy_api_proxy_only},
    {POST, "/v1/images/generations", false, "/v1/images/generations", OPENAI, false, sy_api_proxy_only},
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
    o.intercept = sy_api_proxy_intercept; /* models that are processes or peers */
    sy_server *server = sy_server_start(&o, err, err_size);
    if (server == NULL) {
        sy_api_context_free(c);
        return NULL;
    }
    sy_api_context_attach(c, server);
    return c;
}

void sy_api_drain(sy_api_context *c, unsigned retry_after_s) {
    if (c != NULL && sy_api_server(c) != NULL) sy_server_drain(sy_api_server(c), retry_after_s);
}

unsigned sy_api_in_flight(sy_api_context *c) {
    return c != NULL && sy_api_server(c) != NULL ? sy_server_in_flight(sy_api_server(c)) : 0;
}

void sy_api_stop(sy_api_context *c) {
    if (c == NULL) return;
    sy_server_stop(sy_api_server(c));
    sy_api_context_attach(c, NULL);
    sy_api_context_free(c);
}
