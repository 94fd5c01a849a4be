/*
 * The proxy (proxy.h): requests for models that are processes or peers, forwarded with libcurl's multi interface
 * driven from the connection's own thread, so bytes reach the client as the upstream sends them (SSE unbuffered).
 * The body goes out unchanged unless the model's use_model_name, strip_params or set_params say otherwise.
 */
#include "api/proxy.h"

#include <curl/curl.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/context.h"
#include "api/request.h"
#include "base/buf.h"
#include "base/log.h"
#include "base/utf8.h"
#include "base/util.h"
#include "manager/process_model.h"

/* Where a request goes and how. */
typedef struct upstream_target {
    const char *base;        /* URL without a trailing slash */
    const char *api_key;     /* peers: Bearer and x-api-key; NULL */
    const char *send_model;  /* the model field to send; NULL: unchanged */
    char *const *strip;
    size_t n_strip;
    const char *set_params;  /* JSON object text; NULL */
    uint32_t connect_timeout_s, header_timeout_s;
} upstream_target;

typedef struct upstream_call {
    CURLM *multi;
    CURL *easy;
    struct curl_slist *headers;
    char *body;
    size_t body_len;
    sy_buf pending;          /* received, not yet given to the client */
    size_t pending_off;
    long status;
    char content_type[256];
    bool header_done, done, error_sent;
    CURLcode result;
    char error[CURL_ERROR_SIZE];
    sy_model_lease *lease;   /* process models: held until the response is done */
    char model[SY_CONFIG_MAX_NAME_LEN + 1];
    int client_fd;
    sy_api_context *ctx;
} upstream_call;

static size_t on_header(char *data, size_t size, size_t n, void *user) {
    upstream_call *c = user;
    size_t len = size * n;
    if (len >= 5 && memcmp(data, "HTTP/", 5) == 0) {
        const char *sp = memchr(data, ' ', len);
        c->status = sp ? strtol(sp + 1, NULL, 10) : 0;
        c->content_type[0] = '\0';
    } else if (len >= 13 && strncasecmp(data, "content-type:", 13) == 0) {
        size_t i = 13;
        while (i < len && data[i] == ' ') i++;
        size_t end = len;
        while (end > i && (data[end - 1] == '\r' || data[end - 1] == '\n' || data[end - 1] == ' ')) end--;
        size_t m = end - i < sizeof c->content_type - 1 ? end - i : sizeof c->content_type - 1;
        memcpy(c->content_type, data + i, m);
        c->content_type[m] = '\0';
    } else if ((len == 2 && data[0] == '\r') || (len == 1 && data[0] == '\n')) {
        if (c->status >= 200) c->header_done = true; /* not after a 100 Continue */
    }
    return len;
}

static size_t on_body(char *data, size_t size, size_t n, void *user) {
    upstream_call *c = user;
    c->header_done = true;
    sy_buf_append(&c->pending, data, size * n);
    return size * n;
}

/* Runs the transfer for up to wait_ms. */
static void pump(upstream_call *c, int wait_ms) {
    int running = 0;
    curl_multi_perform(c->multi, &running);
    if (running && c->pending.len == c->pending_off) {
        curl_multi_poll(c->multi, NULL, 0, wait_ms, NULL);
        curl_multi_perform(c->multi, &running);
    }
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(c->multi, &left)) != NULL)
        if (msg->msg == CURLMSG_DONE) {
            c->done = true;
            c->result = msg->data.result;
        }
}

static bool client_gone(int fd) {
    if (fd < 0) return false;
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    int n = poll(&p, 1, 0);
    return n > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

static void call_free(void *cls) {
    upstream_call *c = cls;
    if (c->multi && c->easy) curl_multi_remove_handle(c->multi, c->easy); /* closes the upstream request */
    if (c->easy) curl_easy_cleanup(c->easy);
    if (c->multi) curl_multi_cleanup(c->multi);
    curl_slist_free_all(c->headers);
    free(c->body);
    sy_buf_free(&c->pending);
    sy_model_lease_release(c->lease);
    free(c);
}

static bool is_sse(const upstream_call *c) { return strncasecmp(c->content_type, "text/event-stream", 17) == 0; }

static void upstream_broke(upstream_call *c) {
    if (c->lease != NULL && sy_model_lease_upstream_failed(c->lease))
        snprintf(c->error, sizeof c->error, "the process of model %s died", c->model);
}

static ssize_t call_read(void *cls, char *buf, size_t max) {
    upstream_call *c = cls;
    for (;;) {
        if (c->pending.len > c->pending_off) {
            size_t n = c->pending.len - c->pending_off;
            if (n > max) n = max;
            memcpy(buf, c->pending.data + c->pending_off, n);
            c->pending_off += n;
            if (c->pending_off == c->pending.len) {
                sy_buf_clear(&c->pending);
                c->pending_off = 0;
            }
            return (ssize_t)n;
        }
        if (c->done) {
            if (c->result == CURLE_OK || c->error_sent) return SY_HTTP_STREAM_END;
            if (c->error[0] == '\0') snprintf(c->error, sizeof c->error, "%s", curl_easy_strerror(c->result));
            upstream_broke(c);
            sy_log(SY_LOG_WARN, "model %s: the upstream response broke off: %s", c->model, c->error);
            if (!is_sse(c)) return SY_HTTP_STREAM_ABORT;
            /* A clean end for SSE clients: one error event, then the end of the stream. */
            cJSON *o = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(o, "error");
            char msg[600];
            snprintf(msg, sizeof msg, "the upstream of model %s broke off mid-stream: %s", c->model, c->error);
            cJSON_AddStringToObject(e, "message", msg);
            cJSON_AddStringToObject(e, "type", "upstream_error");
            cJSON_AddStringToObject(e, "code", "upstream_disconnected");
            char *text = cJSON_PrintUnformatted(o);
            cJSON_Delete(o);
            sy_buf_printf(&c->pending, "data: %s\n\n", text);
            free(text);
            c->error_sent = true;
            continue;
        }
        if (client_gone(c->client_fd) || sy_api_stopping(c->ctx)) return SY_HTTP_STREAM_ABORT;
        pump(c, 200);
    }
}

/* The body to send: as received unless the target rewrites fields. NULL with *status/err on a bad body. */
static char *rewrite_body(const char *body, size_t len, const upstream_target *t, size_t *out_len, char *err,
                          size_t err_size) {
    bool rewrite = t->send_model != NULL || t->n_strip > 0 || t->set_params != NULL;
    if (!rewrite || len == 0) {
        char *copy = sy_xmalloc(len + 1);
        memcpy(copy, body, len);
        copy[len] = '\0';
        *out_len = len;
        return copy;
    }
    cJSON *o = cJSON_ParseWithLength(body, len);
    if (o == NULL || !cJSON_IsObject(o)) {
        cJSON_Delete(o);
        snprintf(err, err_size, "the request body is not a JSON object");
        return NULL;
    }
    for (size_t i = 0; i < t->n_strip; i++)
        if (strcmp(t->strip[i], "model") != 0) cJSON_DeleteItemFromObjectCaseSensitive(o, t->strip[i]);
    if (t->set_params != NULL) {
        cJSON *set = cJSON_Parse(t->set_params);
        for (cJSON *it = set ? set->child : NULL; it != NULL; it = it->next) {
            if (strcmp(it->string, "model") == 0) continue;
            cJSON_DeleteItemFromObjectCaseSensitive(o, it->string);
            cJSON_AddItemToObject(o, it->string, cJSON_Duplicate(it, true));
        }
        cJSON_Delete(set);
    }
    if (t->send_model != NULL) {
        cJSON_DeleteItemFromObjectCaseSensitive(o, "model");
        cJSON_AddStringToObject(o, "model", t->send_model);
    }
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    *out_len = strlen(text);
    return text;
}

/* Forwards r to t->base + path (with the query string), answering it. Takes the lease (may be NULL). */
static void forward(sy_http_request *r, const upstream_target *t, const char *path, const char *model,
                    sy_model_lease *lease) {
    upstream_call *c = sy_xcalloc(1, sizeof *c);
    sy_buf_init(&c->pending);
    c->lease = lease;
    c->ctx = sy_api_ctx(r);
    c->client_fd = sy_http_client_fd(r);
    snprintf(c->model, sizeof c->model, "%s", model);
    size_t in_len = 0;
    const char *in = sy_http_body(r, &in_len);
    char why[256];
    /* Multipart forms (audio) go as they came: the filters apply to JSON bodies. */
    const char *in_type = sy_http_header(r, "Content-Type");
    upstream_target as_is = *t;
    if (in_type != NULL && strncasecmp(in_type, "multipart/", 10) == 0) {
        as_is.send_model = NULL, as_is.n_strip = 0, as_is.set_params = NULL;
        t = &as_is;
    }
    c->body = rewrite_body(in, in_len, t, &c->body_len, why, sizeof why);
    if (c->body == NULL) {
        call_free(c);
        sy_http_respond_error(r, 400, "invalid_request", NULL, "%s", why);
        return;
    }
    sy_buf url;
    sy_buf_init(&url);
    sy_buf_puts(&url, t->base);
    sy_buf_puts(&url, path);
    char *query = sy_http_query_string(r);
    if (query[0] != '\0') sy_buf_printf(&url, "?%s", query);
    free(query);
    sy_buf_append(&url, "", 1);

    c->multi = curl_multi_init();
    c->easy = curl_easy_init();
    if (c->multi == NULL || c->easy == NULL) {
        sy_buf_free(&url);
        call_free(c);
        sy_http_respond_error(r, 500, "internal_error", NULL, "could not start the upstream request");
        return;
    }
    CURL *e = c->easy;
    curl_easy_setopt(e, CURLOPT_URL, url.data);
    sy_buf_free(&url);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_NOPROXY, "*");
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, c->error);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, c);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, c);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT, (long)(t->connect_timeout_s ? t->connect_timeout_s : 10));
    curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
    /* Bytes as they come: no decoding of what the upstream compressed, nothing held back. */
    curl_easy_setopt(e, CURLOPT_HTTP_CONTENT_DECODING, 0L);
    const char *method = sy_http_method(r);
    if (strcmp(method, "POST") == 0) {
        curl_easy_setopt(e, CURLOPT_POST, 1L);
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, c->body);
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)c->body_len);
    } else if (strcmp(method, "HEAD") == 0) {
        curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
    }
    static const char *const passed[] = {"Content-Type", "Accept", "Accept-Encoding", "User-Agent"};
    for (size_t i = 0; i < sizeof passed / sizeof *passed; i++) {
        const char *v = sy_http_header(r, passed[i]);
        if (v == NULL || strlen(v) > 1024) continue;
        char h[1200];
        snprintf(h, sizeof h, "%s: %s", passed[i], v);
        c->headers = curl_slist_append(c->headers, h);
    }
    if (t->api_key != NULL) {
        char h[600];
        snprintf(h, sizeof h, "Authorization: Bearer %s", t->api_key);
        c->headers = curl_slist_append(c->headers, h);
        snprintf(h, sizeof h, "x-api-key: %s", t->api_key);
        c->headers = curl_slist_append(c->headers, h);
    }
    c->headers = curl_slist_append(c->headers, "Expect:");
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, c->headers);
    curl_multi_add_handle(c->multi, e);

    double deadline = t->header_timeout_s ? sy_now_seconds() + t->header_timeout_s : 0;
    sy_http_keep_open(r);
    while (!c->header_done && !c->done) {
        if (client_gone(c->client_fd) || sy_api_stopping(c->ctx)) {
            call_free(c);
            sy_http_respond_error(r, 499, "client_gone", NULL, "the client went away");
            return;
        }
        if (deadline != 0 && sy_now_seconds() >= deadline) {
            sy_log(SY_LOG_WARN, "model %s: no response header within %u s", model, (unsigned)t->header_timeout_s);
            call_free(c);
            sy_http_respond_error(r, 504, "upstream_timeout", NULL,
                                  "the upstream of model %s sent no response header within %u s", model,
                                  (unsigned)t->header_timeout_s);
            return;
        }
        pump(c, 200);
    }
    if (!c->header_done) { /* done before any answer: it refused or broke */
        char msg[600];
        snprintf(msg, sizeof msg, "%s", c->error[0] ? c->error : curl_easy_strerror(c->result));
        upstream_broke(c);
        sy_log(SY_LOG_WARN, "model %s: upstream request failed: %s", model, msg);
        call_free(c);
        sy_http_respond_error(r, 502, "upstream_error", NULL, "the upstream of model %s did not answer: %s", model,
                              msg);
        return;
    }
    if (c->status < 200 || c->status > 599) {
        long bad = c->status;
        call_free(c);
        sy_http_respond_error(r, 502, "upstream_error", NULL, "the upstream of model %s answered with status %ld", model,
                              bad);
        return;
    }
    char type[256];
    snprintf(type, sizeof type, "%s", c->content_type[0] ? c->content_type : "application/octet-stream");
    sy_http_respond_stream_status(r, (int)c->status, type, NULL, 0, call_read, c, call_free);
}

/* ------------------------------------------------------------------------------------------------------------
 * Which requests go where */

/* The `model` of a JSON body, or of a multipart form (audio transcriptions); into out. */
static bool requested_model(sy_http_request *r, char *out, size_t size) {
    size_t len = 0;
    const char *body = sy_http_body(r, &len);
    const char *type = sy_http_header(r, "Content-Type");
    if (type != NULL && strncasecmp(type, "multipart/form-data", 19) == 0) {
        static const char field[] = "name=\"model\"";
        const char *end = body + len;
        for (const char *p = body; p + sizeof field < end; p++) {
            if (memcmp(p, field, sizeof field - 1) != 0) continue;
            const char *v = memmem(p, (size_t)(end - p), "\r\n\r\n", 4);
            if (v == NULL) return false;
            v += 4;
            const char *ve = memmem(v, (size_t)(end - v), "\r\n", 2);
            if (ve == NULL || (size_t)(ve - v) >= size) return false;
            memcpy(out, v, (size_t)(ve - v));
            out[ve - v] = '\0';
            return true;
        }
        return false;
    }
    /* bounded as every handler's parse is (api/request.h): a body the handler would refuse is not parsed here */
    cJSON *o = NULL;
    sy_api_error ignored;
    if (sy_api_parse_body(r, &o, &ignored) != 0) return false;
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(o, "model");
    bool ok = cJSON_IsString(m) && strlen(m->valuestring) < size;
    if (ok) snprintf(out, size, "%s", m->valuestring);
    cJSON_Delete(o);
    return ok;
}

static const sy_config_peer *find_peer(const sy_config *cfg, const char *name) {
    for (size_t i = 0; i < cfg->n_peers; i++)
        if (strcmp(cfg->peers[i].name, name) == 0) return &cfg->peers[i];
    return NULL;
}

static char *trimmed_base(const char *url) {
    char *b = sy_strdup(url);
    size_t n = strlen(b);
    while (n > 0 && b[n - 1] == '/') b[--n] = '\0';
    return b;
}

/* Forwards a request for model cm (a process or a peer) to `path` there. */
static void forward_model(sy_http_request *r, const sy_config *cfg, const sy_config_model *cm, const char *requested,
                          const char *path, bool rewrite) {
    upstream_target t;
    memset(&t, 0, sizeof t);
    if (cm->peer != NULL) {
        const sy_config_peer *p = find_peer(cfg, cm->peer);
        char *base = trimmed_base(p->url);
        t.base = base;
        t.api_key = p->api_key;
        if (rewrite) {
            t.strip = cm->strip_params.items;
            t.n_strip = cm->strip_params.count;
            t.set_params = cm->set_params;
        }
        t.connect_timeout_s = cm->connect_timeout_s;
        t.header_timeout_s = cm->header_timeout_s;
        forward(r, &t, path, cm->name, NULL);
        free(base);
        return;
    }
    sy_api_error e;
    sy_http_keep_open(r);
    char err[900] = "";
    int status = 0;
    sy_model_lease *lease = sy_model_manager_acquire(sy_api_manager(sy_api_ctx(r)), requested, err, sizeof err, &status);
    if (lease == NULL) {
        if (status < 400 || status > 599) status = 503;
        sy_api_fail(&e, status, status == 404 ? "model_not_found" : "model_unavailable", NULL, "%s", err);
        sy_api_respond_error(r, &e);
        return;
    }
    const sy_process_spec *spec = sy_model_lease_process(lease);
    if (spec == NULL) { /* a reload made it a plugin model meanwhile */
        sy_model_lease_release(lease);
        sy_http_respond_error(r, 503, "model_unavailable", NULL, "model %s changed; try again", requested);
        return;
    }
    char *base = trimmed_base(spec->proxy);
    t.base = base;
    if (rewrite) {
        t.send_model = spec->use_model_name;
        t.strip = spec->strip_params;
        t.n_strip = spec->n_strip_params;
        t.set_params = spec->set_params;
    }
    t.connect_timeout_s = spec->connect_timeout_s;
    t.header_timeout_s = spec->header_timeout_s;
    forward(r, &t, path, sy_model_lease_name(lease), lease);
    free(base);
}

/* The OpenAI routes forwarded to a process or peer model (llama-swap forwards the same, and llama-server's). */
static bool forwarded_path(const char *path) {
    static const char *const exact[] = {"/v1/chat/completions", "/v1/completions", "/v1/embeddings",
                                        "/v1/rerank", "/v1/reranking", "/rerank", "/reranking", "/v1/responses",
                                        "/v1/messages", "/infill", "/completion", "/v1/images/generations"};
    for (size_t i = 0; i < sizeof exact / sizeof *exact; i++)
        if (strcmp(path, exact[i]) == 0) return true;
    return strncmp(path, "/v1/audio/", 10) == 0;
}

/* Whether the config has models served by other servers: processes, peers, or selectors over them. */
static bool serves_elsewhere(sy_api_context *ctx) {
    const sy_config *cfg = sy_api_config_acquire(ctx);
    bool any = cfg != NULL && (cfg->n_peers > 0 || cfg->n_selectors > 0);
    for (size_t i = 0; cfg != NULL && !any && i < cfg->n_models; i++)
        any = cfg->models[i].cmd != NULL || cfg->models[i].peer != NULL;
    sy_api_config_release(ctx, cfg);
    return any;
}

bool sy_api_proxy_intercept(void *app, sy_http_request *r) {
    (void)app;
    if (strcmp(sy_http_method(r), "POST") != 0) return false;
    const char *path = sy_http_path(r);
    bool ollama = strncmp(path, "/api/", 5) == 0;
    if (!forwarded_path(path) && !ollama) return false;
    sy_api_context *ctx = sy_api_ctx(r);
    if (!serves_elsewhere(ctx)) return false; /* the common case: no body parsed twice */
    char model[SY_CONFIG_MAX_NAME_LEN + 1];
    if (!requested_model(r, model, sizeof model)) return false; /* the route's handler explains */
    char chosen[SY_CONFIG_MAX_NAME_LEN + 1];
    if (sy_model_manager_resolve(sy_api_manager(ctx), model, chosen, sizeof chosen))
        snprintf(model, sizeof model, "%s", chosen);
    const sy_config *cfg = sy_api_config_acquire(ctx);
    const sy_config_model *cm = sy_config_find_model(cfg, model);
    bool handled = cm != NULL && (cm->cmd != NULL || cm->peer != NULL) && !ollama;
    if (handled) forward_model(r, cfg, cm, model, path, true);
    sy_api_config_release(ctx, cfg);
    return handled; /* Ollama routes: sy_api_acquire refuses upstream models, naming why */
}

void sy_api_proxy_only(sy_http_request *r) {
    char model[SY_CONFIG_MAX_NAME_LEN + 1];
    if (!requested_model(r, model, sizeof model)) {
        sy_http_respond_error(r, 400, "missing_model", "model", "model is required: name a process or peer model");
        return;
    }
    char shown[160];
    sy_utf8_sanitize(shown, sizeof shown, model, strlen(model));
    sy_api_context *ctx = sy_api_ctx(r);
    const sy_config *cfg = sy_api_config_acquire(ctx);
    bool known = sy_config_find_model(cfg, model) != NULL;
    sy_api_config_release(ctx, cfg);
    if (!known)
        sy_http_respond_error(r, 404, "model_not_found", "model", "model '%s' is not configured", shown);
    else
        sy_http_respond_error(r, 400, "model_not_supported", "model",
                              "%s is forwarded to process and peer models only; model '%s' runs on switchyard's own "
                              "engines, which do not serve it",
                              sy_http_path(r), shown);
}

/* /upstream/{model}/{rest}: anything of the model's own server, unchanged (its UI, /props, /slots, ...). */
void sy_api_upstream(sy_http_request *r) {
    const char *param = sy_http_path_param(r);
    sy_api_context *ctx = sy_api_ctx(r);
    const sy_config *cfg = sy_api_config_acquire(ctx);
    const sy_config_model *best = NULL;
    size_t best_len = 0;
    for (size_t i = 0; i < cfg->n_models; i++) {
        const sy_config_model *m = &cfg->models[i];
        const char *names[1 + SY_CONFIG_MAX_LIST_ITEMS];
        size_t n = 0;
        names[n++] = m->name;
        for (size_t k = 0; k < m->aliases.count && n < sizeof names / sizeof *names; k++) names[n++] = m->aliases.items[k];
        for (size_t k = 0; k < n; k++) {
            size_t l = strlen(names[k]);
            if (strncmp(param, names[k], l) == 0 && (param[l] == '\0' || param[l] == '/') && l > best_len)
                best = m, best_len = l;
        }
    }
    if (best == NULL) {
        char shown[160];
        sy_utf8_sanitize(shown, sizeof shown, param, strlen(param));
        sy_http_respond_error(r, 404, "model_not_found", NULL, "/upstream/%s names no configured model", shown);
    } else if (best->cmd == NULL && best->peer == NULL) {
        sy_http_respond_error(r, 400, "model_not_supported", NULL,
                              "model %s runs in switchyard itself: it has no upstream server", best->name);
    } else {
        char requested[SY_CONFIG_MAX_NAME_LEN + 1];
        snprintf(requested, sizeof requested, "%.*s", (int)best_len, param);
        const char *rest = param[best_len] == '/' ? param + best_len : "/";
        forward_model(r, cfg, best, requested, rest, false);
    }
    sy_api_config_release(ctx, cfg);
}

/* ------------------------------------------------------------------------------------------------------------
 * Logs */

void sy_api_logs(sy_http_request *r) {
    const char *model = sy_http_query(r, "model");
    sy_buf out;
    sy_buf_init(&out);
    sy_process_logs(model, &out);
    sy_http_respond(r, 200, "text/plain; charset=utf-8", out.data ? out.data : "", out.len);
    sy_buf_free(&out);
}

typedef struct log_stream {
    uint64_t cursor;
    sy_buf chunk;
    size_t off;
    int client_fd;
    sy_api_context *ctx;
} log_stream;

static ssize_t log_stream_read(void *cls, char *buf, size_t max) {
    log_stream *s = cls;
    for (;;) {
        if (s->chunk.len > s->off) {
            size_t n = s->chunk.len - s->off < max ? s->chunk.len - s->off : max;
            memcpy(buf, s->chunk.data + s->off, n);
            s->off += n;
            if (s->off == s->chunk.len) sy_buf_clear(&s->chunk), s->off = 0;
            return (ssize_t)n;
        }
        if (client_gone(s->client_fd) || sy_api_stopping(s->ctx)) return SY_HTTP_STREAM_END;
        sy_process_logs_since(&s->cursor, 500, &s->chunk);
    }
}

static void log_stream_free(void *cls) {
    log_stream *s = cls;
    sy_buf_free(&s->chunk);
    free(s);
}

void sy_api_logs_stream(sy_http_request *r) {
    log_stream *s = sy_xcalloc(1, sizeof *s);
    sy_buf_init(&s->chunk);
    s->client_fd = sy_http_client_fd(r);
    s->ctx = sy_api_ctx(r);
    /* What is kept so far, then what comes (llama-swap's /logs/stream does the same). */
    sy_process_logs_since(&s->cursor, 0, &s->chunk);
    sy_http_respond_stream(r, "text/plain; charset=utf-8", log_stream_read, s, log_stream_free);
}
