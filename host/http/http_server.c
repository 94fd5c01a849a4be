/* The HTTP server on libmicrohttpd: listening socket, routes, bodies, API keys, CORS, responses, stop. */
#include "http/http_server.h"

#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/log.h"
#include "base/utf8.h"
#include "base/util.h"
#include "http/http_access.h"
#include "http/http_guard.h"

/* How long a stop waits for cancelled generations to finish their responses. */
#define SY_SERVER_STOP_GRACE_S 5.0

/* ------------------------------------------------------------------------------------------------------------
 * Routes */

static bool route_matches_path(const sy_http_route *rt, const char *path, const char **param) {
    if (rt->prefix) {
        size_t n = strlen(rt->path);
        if (strncmp(path, rt->path, n) != 0 || path[n] == '\0') return false;
        *param = path + n;
        return true;
    }
    if (strcmp(path, rt->path) != 0) return false;
    *param = "";
    return true;
}

/* ------------------------------------------------------------------------------------------------------------
 * Server and request state */

typedef struct track_entry {
    uint64_t id;
    void (*cancel)(void *arg);
    void *arg;
    struct track_entry *next;
} track_entry;

struct sy_server {
    struct MHD_Daemon *daemon;
    int listen_fd;
    char url[320];
    uint16_t port;
    uint64_t max_body;
    unsigned idle_timeout_s;
    bool loopback; /* listening on a loopback address: the Host header is checked (DNS rebinding) */
    sy_http_guard *guard;
    sy_server_options opts; /* routes, app and hooks */
    pthread_mutex_t lock; /* tracked work */
    track_entry *tracked;
    uint64_t next_track;
    atomic_bool stopping;
    atomic_bool draining;       /* new work refused with 503 + Retry-After; what runs goes on */
    atomic_uint retry_after_s;
    atomic_uint in_handlers;    /* requests inside a route handler now (waiting for a model load, say) */
};

struct sy_http_request {
    sy_server *server;
    struct MHD_Connection *conn;
    char method[16];
    char *path;
    const sy_http_route *route;
    const char *path_param;
    sy_api_style style;
    sy_buf body;
    uint64_t max_body; /* the route's */
    bool body_too_large;
    char *cors_origin; /* the Access-Control-Allow-Origin of the answers; NULL: none */
    sy_http_guard_conn *guard;
    bool responded;
    int status;
    bool keep_open;
    bool streaming;
    double t_start;
    int fd;
};

/* ------------------------------------------------------------------------------------------------------------
 * Listening address */

int sy_parse_listen_address(const char *s, char *host, size_t host_size, uint16_t *port, char *err,
                            size_t err_size) {
    if (s == NULL || *s == '\0') {
        snprintf(err, err_size, "listen address is empty; expected HOST:PORT such as 127.0.0.1:8080");
        return -1;
    }
    const char *host_start, *host_end, *port_str;
    if (s[0] == '[') {
        host_start = s + 1;
        host_end = strchr(host_start, ']');
        if (host_end == NULL || host_end[1] != ':') {
            snprintf(err, err_size, "listen address '%.200s': expected [IPV6]:PORT", s);
            return -1;
        }
        port_str = host_end + 2;
    } else {
        const char *colon = strrchr(s, ':');
        if (colon == NULL) {
            snprintf(err, err_size, "listen address '%.200s': expected HOST:PORT such as 127.0.0.1:8080", s);
            return -1;
        }
        host_start = s;
        host_end = colon;
        if (memchr(host_start, ':', (size_t)(host_end - host_start)) != NULL) {
            snprintf(err, err_size, "listen address '%.200s': write an IPv6 address in brackets, [::1]:8080", s);
            return -1;
        }
        port_str = colon + 1;
    }
    size_t host_len = (size_t)(host_end - host_start);
    if (host_len == 0) {
        snprintf(err, err_size,
                 "listen address '%.200s': the host is missing (127.0.0.1 for this machine only, 0.0.0.0 for every "
                 "interface)",
                 s);
        return -1;
    }
    if (host_len >= host_size) {
        snprintf(err, err_size, "listen address '%.200s': the host is too long", s);
        return -1;
    }
    uint64_t p;
    bool digits = port_str[0] != '\0' && strspn(port_str, "0123456789") == strlen(port_str);
    if (!digits || sy_parse_u64(port_str, 65535, &p) != 0) {
        snprintf(err, err_size, "listen address '%.200s': the port must be a number from 0 to 65535", s);
        return -1;
    }
    memcpy(host, host_start, host_len);
    host[host_len] = '\0';
    *port = (uint16_t)p;
    return 0;
}

static int open_listen_socket(const char *host, uint16_t port, uint16_t *bound_port, bool *is_v6, char *err,
                              size_t err_size) {
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    char port_str[8];
    snprintf(port_str, sizeof port_str, "%u", (unsigned)port);
    int rc = getaddrinfo(host, port_str, &hints, &res);
    if (rc != 0) {
        snprintf(err, err_size, "cannot resolve listen host '%s': %s", host, gai_strerror(rc));
        return -1;
    }
    int fd = -1, last_errno = 0;
    for (struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
        if (fd < 0) {
            last_errno = errno;
            continue;
        }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 128) == 0) {
            *is_v6 = ai->ai_family == AF_INET6;
            break;
        }
        last_errno = errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0) {
        snprintf(err, err_size, "cannot listen on %s:%u: %s", host, (unsigned)port, strerror(last_errno));
        return -1;
    }
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0) {
        snprintf(err, err_size, "getsockname: %s", strerror(errno));
        close(fd);
        return -1;
    }
    if (ss.ss_family == AF_INET6) *bound_port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    else *bound_port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
    return fd;
}

/* ------------------------------------------------------------------------------------------------------------
 * Config snapshots and tracked work */

uint64_t sy_server_track(sy_server *s, void (*cancel)(void *arg), void *arg) {
    pthread_mutex_lock(&s->lock);
    if (atomic_load(&s->stopping)) {
        pthread_mutex_unlock(&s->lock);
        return 0;
    }
    track_entry *t = sy_xcalloc(1, sizeof *t);
    t->id = ++s->next_track;
    t->cancel = cancel;
    t->arg = arg;
    t->next = s->tracked;
    s->tracked = t;
    pthread_mutex_unlock(&s->lock);
    return t->id;
}

void sy_server_untrack(sy_server *s, uint64_t handle) {
    if (handle == 0) return;
    pthread_mutex_lock(&s->lock);
    for (track_entry **pp = &s->tracked; *pp; pp = &(*pp)->next) {
        if ((*pp)->id == handle) {
            track_entry *t = *pp;
            *pp = t->next;
            free(t);
            break;
        }
    }
    pthread_mutex_unlock(&s->lock);
}

bool sy_server_stopping(const sy_server *s) { return atomic_load(&((sy_server *)s)->stopping); }
bool sy_server_draining(const sy_server *s) { return atomic_load(&((sy_server *)s)->draining); }

void sy_server_drain(sy_server *s, unsigned retry_after_s) {
    atomic_store(&s->retry_after_s, retry_after_s);
    atomic_store(&s->draining, true);
}

unsigned sy_server_in_flight(sy_server *s) {
    pthread_mutex_lock(&s->lock);
    unsigned n = 0;
    for (const track_entry *t = s->tracked; t; t = t->next) n++;
    pthread_mutex_unlock(&s->lock);
    unsigned handlers = atomic_load(&s->in_handlers);
    return n > handlers ? n : handlers; /* a stream is tracked inside its handler: the larger, not the sum */
}
const char *sy_server_url(const sy_server *s) { return s->url; }
uint16_t sy_server_port(const sy_server *s) { return s->port; }

/* ------------------------------------------------------------------------------------------------------------
 * Request accessors */

sy_server *sy_http_server(const sy_http_request *r) { return r->server; }
void *sy_http_app(const sy_http_request *r) { return r->server->opts.app; }
const char *sy_http_method(const sy_http_request *r) { return r->method; }
const char *sy_http_path(const sy_http_request *r) { return r->path; }
const char *sy_http_path_param(const sy_http_request *r) { return r->path_param ? r->path_param : ""; }
sy_api_style sy_http_style(const sy_http_request *r) { return r->style; }
unsigned sy_http_route_flags(const sy_http_request *r) { return r->route ? r->route->flags : 0; }
double sy_http_start_time(const sy_http_request *r) { return r->t_start; }
int sy_http_client_fd(const sy_http_request *r) { return r->fd; }

const char *sy_http_body(const sy_http_request *r, size_t *len) {
    if (len) *len = r->body.len;
    return r->body.data ? r->body.data : "";
}

const char *sy_http_query(const sy_http_request *r, const char *key) {
    return MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, key);
}

const char *sy_http_header(const sy_http_request *r, const char *key) {
    return MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, key);
}

bool sy_http_client_gone(const sy_http_request *r) {
    if (r->fd < 0) return false;
    struct pollfd p = {.fd = r->fd, .events = POLLRDHUP};
    int n = poll(&p, 1, 0);
    if (n < 0) return errno != EINTR;
    return n > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

void sy_http_keep_open(sy_http_request *r) {
    if (r->keep_open) return;
    r->keep_open = true;
    MHD_set_connection_option(r->conn, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned int)0);
}

/* ------------------------------------------------------------------------------------------------------------
 * Responses */

const char *sy_http_status_text(int status) {
    switch (status) {
    case 200: return "OK";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 413: return "Content Too Large";
    case 429: return "Too Many Requests";
    case 499: return "Client Closed Request";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    default: return status >= 500 ? "Server Error" : status >= 400 ? "Client Error" : "OK";
    }
}

static int queue_response(sy_http_request *r, int status, struct MHD_Response *resp) {
    if (resp == NULL) {
        sy_log(SY_LOG_ERROR, "%s %s: could not create a response", r->method, r->path);
        return -1;
    }
#ifdef SY_VERSION
    MHD_add_response_header(resp, "X-Switchyard-Version", SY_VERSION); /* /api/version answers Ollama's level */
#endif
    if (r->cors_origin != NULL) {
        MHD_add_response_header(resp, "Access-Control-Allow-Origin", r->cors_origin);
        if (strcmp(r->cors_origin, "*") != 0) MHD_add_response_header(resp, "Vary", "Origin");
    }
    if (!r->streaming) sy_http_guard_set_phase(r->server->guard, r->guard, SY_GUARD_ANSWERING);
    enum MHD_Result ok = MHD_queue_response(r->conn, (unsigned int)status, resp);
    MHD_destroy_response(resp);
    r->responded = true;
    r->status = status;
    if (ok != MHD_YES) {
        sy_log(SY_LOG_WARN, "%s %s: could not queue the %d response", r->method, r->path, status);
        return -1;
    }
    return 0;
}

static bool already_responded(sy_http_request *r) {
    if (!r->responded) return false;
    sy_log(SY_LOG_ERROR, "%s %s: a second response was attempted (ignored)", r->method, r->path);
    return true;
}

int sy_http_respond(sy_http_request *r, int status, const char *content_type, const char *body, size_t len) {
    if (already_responded(r)) return -1;
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (resp && content_type) MHD_add_response_header(resp, "Content-Type", content_type);
    return queue_response(r, status, resp);
}

int sy_http_respond_json(sy_http_request *r, int status, cJSON *json) {
    char *text = json ? cJSON_PrintUnformatted(json) : NULL;
    cJSON_Delete(json);
    if (text == NULL) {
        static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\"}}";
        return sy_http_respond(r, 500, "application/json", oom, sizeof oom - 1);
    }
    int rc = sy_http_respond(r, status, "application/json", text, strlen(text));
    cJSON_free(text);
    return rc;
}

static const char *openai_error_type(int status) {
    if (status == 429) return "rate_limit_error";
    if (status >= 500) return "server_error";
    return "invalid_request_error";
}

/* The error body in a style (also used for errors raised before a route is known). */
static cJSON *error_json(sy_api_style style, int status, const char *code, const char *param, const char *message) {
    cJSON *json = cJSON_CreateObject();
    if (style == SY_API_STYLE_OLLAMA) {
        cJSON_AddStringToObject(json, "error", message);
        return json;
    }
    if (style == SY_API_STYLE_ANTHROPIC) {
        const char *type = status == 401 ? "authentication_error" : status == 403 ? "permission_error"
                         : status == 404 ? "not_found_error" : status == 413 ? "request_too_large"
                         : status == 429 ? "rate_limit_error" : status == 503 || status == 529 ? "overloaded_error"
                         : status >= 500 ? "api_error" : "invalid_request_error";
        cJSON_AddStringToObject(json, "type", "error");
        cJSON *err = cJSON_AddObjectToObject(json, "error");
        cJSON_AddStringToObject(err, "type", type);
        cJSON_AddStringToObject(err, "message", message);
        return json;
    }
    cJSON *err = cJSON_AddObjectToObject(json, "error");
    cJSON_AddStringToObject(err, "message", message);
    cJSON_AddStringToObject(err, "type", openai_error_type(status));
    if (param) cJSON_AddStringToObject(err, "param", param);
    else cJSON_AddNullToObject(err, "param");
    if (code) cJSON_AddStringToObject(err, "code", code);
    else cJSON_AddNullToObject(err, "code");
    return json;
}

static int respond_error_with_header(sy_http_request *r, int status, const char *code, const char *param,
                                     const char *header, const char *header_value, const char *message) {
    if (already_responded(r)) return -1;
    char safe[1100];
    sy_utf8_sanitize(safe, sizeof safe, message, strlen(message));
    char safe_param[64];
    if (param) sy_utf8_sanitize(safe_param, sizeof safe_param, param, strlen(param));
    cJSON *json = error_json(r->style, status, code, param ? safe_param : NULL, safe);
    char *text = cJSON_PrintUnformatted(json);
    cJSON_Delete(json);
    if (text == NULL) return sy_http_respond(r, 500, "text/plain", "out of memory", 13);
    struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_COPY);
    cJSON_free(text);
    if (resp) {
        MHD_add_response_header(resp, "Content-Type", "application/json");
        if (header) MHD_add_response_header(resp, header, header_value);
    }
    if (status >= 500) sy_log(SY_LOG_WARN, "%s %s: %d %s", r->method, r->path, status, safe);
    else sy_log(SY_LOG_DEBUG, "%s %s: %d %s", r->method, r->path, status, safe);
    return queue_response(r, status, resp);
}

int sy_http_respond_error(sy_http_request *r, int status, const char *code, const char *param, const char *fmt,
                          ...) {
    char message[1100];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    return respond_error_with_header(r, status, code, param, NULL, NULL, message);
}

typedef struct stream_adapter {
    sy_http_guard *guard;
    sy_http_guard_conn *conn;
    sy_http_reader reader;
    void *cls;
    void (*free_cls)(void *cls);
} stream_adapter;

static ssize_t stream_adapter_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    stream_adapter *a = cls;
    /* While the reader waits for the generation the client owes nothing; once it has bytes, the client must
     * take them within the stream timeout (the watchdog cuts it otherwise). */
    sy_http_guard_stream_waiting(a->guard, a->conn, true);
    ssize_t n = a->reader(a->cls, buf, max);
    sy_http_guard_stream_waiting(a->guard, a->conn, false);
    if (n == SY_HTTP_STREAM_END) return MHD_CONTENT_READER_END_OF_STREAM;
    if (n <= 0) return MHD_CONTENT_READER_END_WITH_ERROR;
    return n;
}

static void stream_adapter_free(void *cls) {
    stream_adapter *a = cls;
    if (a->free_cls) a->free_cls(a->cls);
    free(a);
}

int sy_http_respond_stream(sy_http_request *r, const char *content_type, sy_http_reader reader, void *cls,
                           void (*free_cls)(void *cls)) {
    return sy_http_respond_stream_status(r, 200, content_type, NULL, 0, reader, cls, free_cls);
}

typedef struct query_acc {
    sy_buf *out;
} query_acc;

static void append_encoded(sy_buf *out, const char *s) {
    static const char hex[] = "0123456789ABCDEF";
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || strchr("-._~", *p)) {
            sy_buf_append(out, p, 1);
        } else {
            char e[3] = {'%', hex[*p >> 4], hex[*p & 15]};
            sy_buf_append(out, e, 3);
        }
    }
}

static enum MHD_Result add_query_arg(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    (void)kind;
    query_acc *a = cls;
    if (a->out->len > 0) sy_buf_append(a->out, "&", 1);
    append_encoded(a->out, key ? key : "");
    if (value != NULL) {
        sy_buf_append(a->out, "=", 1);
        append_encoded(a->out, value);
    }
    return MHD_YES;
}

char *sy_http_query_string(const sy_http_request *r) {
    sy_buf out;
    sy_buf_init(&out);
    query_acc a = {&out};
    MHD_get_connection_values(r->conn, MHD_GET_ARGUMENT_KIND, add_query_arg, &a);
    sy_buf_append(&out, "", 1);
    return sy_buf_take(&out);
}

int sy_http_respond_stream_status(sy_http_request *r, int status, const char *content_type,
                                  const char *const *headers, size_t n_headers, sy_http_reader reader, void *cls,
                                  void (*free_cls)(void *cls)) {
    if (already_responded(r)) {
        if (free_cls) free_cls(cls);
        return -1;
    }
    stream_adapter *a = sy_xcalloc(1, sizeof *a);
    a->reader = reader;
    a->cls = cls;
    a->free_cls = free_cls;
    a->guard = r->server->guard;
    a->conn = r->guard;
    struct MHD_Response *resp =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_adapter_read, a, stream_adapter_free);
    if (resp == NULL) {
        stream_adapter_free(a);
        sy_log(SY_LOG_ERROR, "%s %s: could not create a streamed response", r->method, r->path);
        return -1;
    }
    MHD_add_response_header(resp, "Content-Type", content_type);
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
    MHD_add_response_header(resp, "X-Accel-Buffering", "no");
    for (size_t i = 0; i < n_headers; i++) {
        const char *colon = strchr(headers[i], ':');
        if (colon == NULL || colon == headers[i] || (size_t)(colon - headers[i]) >= 128) continue;
        char name[128];
        memcpy(name, headers[i], (size_t)(colon - headers[i]));
        name[colon - headers[i]] = '\0';
        const char *value = colon + 1;
        while (*value == ' ') value++;
        MHD_add_response_header(resp, name, value);
    }
    sy_http_keep_open(r);
    r->streaming = true;
    sy_http_guard_stream_waiting(r->server->guard, r->guard, false);
    return queue_response(r, status, resp);
}

/* ------------------------------------------------------------------------------------------------------------
 * Request handling */

/* The Access-Control-Request-Headers value if it is a plain list of header names, else a safe default. */
static const char *preflight_headers(const char *asked) {
    static const char fallback[] = "Authorization, Content-Type";
    if (asked == NULL || *asked == '\0' || strlen(asked) > 512) return fallback;
    for (const char *p = asked; *p; p++) {
        char c = *p;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
              c == ',' || c == ' '))
            return fallback;
    }
    return asked;
}

static void respond_preflight(sy_http_request *r) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (resp) {
        MHD_add_response_header(resp, "Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS");
        MHD_add_response_header(resp, "Access-Control-Allow-Headers",
                                preflight_headers(sy_http_header(r, "Access-Control-Request-Headers")));
        MHD_add_response_header(resp, "Access-Control-Max-Age", "86400");
    }
    queue_response(r, 204, resp);
}

/* OPTIONS without an Origin (not a browser's preflight): what the path allows, no CORS headers. */
static void respond_options(sy_http_request *r) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (resp) MHD_add_response_header(resp, "Allow", "GET, HEAD, POST, OPTIONS");
    queue_response(r, 204, resp);
}

static unsigned method_bit(const char *method) {
    if (strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0) return SY_HTTP_GET;
    if (strcmp(method, "POST") == 0) return SY_HTTP_POST;
    if (strcmp(method, "DELETE") == 0) return SY_HTTP_DELETE;
    return 0;
}

/* Origin and Host, before anything else: 0 to go on, else answered with 403. Sets the CORS origin of the
 * answers when the Origin is allowed. */
static int check_access(sy_http_request *r) {
    sy_server *s = r->server;
    if (s->loopback) {
        const char *host = sy_http_header(r, "Host");
        bool ok = host == NULL || sy_http_host_check(host, NULL, 0) ||
                  (s->opts.host_allowed != NULL && s->opts.host_allowed(s->opts.app, host));
        if (!ok) {
            char shown[80];
            sy_utf8_sanitize(shown, sizeof shown, host, strlen(host));
            sy_http_respond_error(r, 403, "host_not_allowed", NULL,
                                  "Host '%s' may not reach this loopback server (add it to allowed_hosts)", shown);
            return -1;
        }
    }
    const char *origin = sy_http_header(r, "Origin");
    if (origin == NULL) return 0;
    int verdict = s->opts.origin_policy ? s->opts.origin_policy(s->opts.app, origin) : SY_ORIGIN_REFUSED;
    if (verdict == SY_ORIGIN_REFUSED) {
        char shown[80];
        sy_utf8_sanitize(shown, sizeof shown, origin, strlen(origin));
        sy_http_respond_error(r, 403, "origin_not_allowed", NULL,
                              "requests from origin '%s' are not allowed (add it to cors_origins)", shown);
        return -1;
    }
    char normal[512];
    if (verdict == SY_ORIGIN_WILDCARD) r->cors_origin = sy_strdup("*");
    else if (sy_http_origin_normalize(origin, normal, sizeof normal) == 0) r->cors_origin = sy_strdup(origin);
    return 0;
}

/* Find the route; on failure answer 404 or 405 and return NULL. */
static const sy_http_route *find_route(sy_http_request *r) {
    unsigned bit = method_bit(r->method);
    unsigned allowed = 0;
    const sy_http_route *routes = r->server->opts.routes;
    for (size_t i = 0; i < r->server->opts.n_routes; i++) {
        const char *param;
        if (!route_matches_path(&routes[i], r->path, &param)) continue;
        if (routes[i].methods & bit) {
            r->path_param = param;
            r->style = routes[i].style;
            return &routes[i];
        }
        allowed |= routes[i].methods;
    }
    if (allowed != 0) {
        char allow[64];
        snprintf(allow, sizeof allow, "%s%s%sOPTIONS", (allowed & SY_HTTP_GET) ? "GET, HEAD, " : "",
                 (allowed & SY_HTTP_POST) ? "POST, " : "", (allowed & SY_HTTP_DELETE) ? "DELETE, " : "");
        char msg[400];
        char safe_method[20];
        sy_utf8_sanitize(safe_method, sizeof safe_method, r->method, strlen(r->method));
        snprintf(msg, sizeof msg, "method %s is not allowed on %.200s (allowed: %s)", safe_method, r->path, allow);
        respond_error_with_header(r, 405, "method_not_allowed", NULL, "Allow", allow, msg);
        return NULL;
    }
    sy_http_respond_error(r, 404, "not_found", NULL, "no such endpoint: %.200s", r->path);
    return NULL;
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                 const char *version, const char *upload_data, size_t *upload_data_size,
                                 void **con_cls) {
    (void)version;
    sy_server *s = cls;
    sy_http_request *r = *con_cls;
    if (r == NULL) {
        r = sy_xcalloc(1, sizeof *r);
        r->server = s;
        r->conn = conn;
        r->t_start = sy_now_seconds();
        snprintf(r->method, sizeof r->method, "%s", method ? method : "");
        r->path = sy_strdup(url ? url : "/");
        r->style = strncmp(r->path, "/api/", 5) == 0         ? SY_API_STYLE_OLLAMA
                   : strncmp(r->path, "/v1/messages", 12) == 0 ? SY_API_STYLE_ANTHROPIC
                                                               : SY_API_STYLE_OPENAI;
        sy_buf_init(&r->body);
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        r->fd = ci ? ci->connect_fd : -1;
        const union MHD_ConnectionInfo *sc = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        r->guard = sc ? (sy_http_guard_conn *)sc->socket_context : NULL;
        r->max_body = s->max_body;
        *con_cls = r;

        if (check_access(r) != 0) return MHD_YES;
        if (strcmp(r->method, "OPTIONS") == 0) {
            if (sy_http_header(r, "Origin") != NULL) respond_preflight(r);
            else respond_options(r);
            return MHD_YES;
        }
        r->route = find_route(r);
        if (r->route == NULL) return MHD_YES;
        if (r->route->max_body != 0 && r->route->max_body < r->max_body) r->max_body = r->route->max_body;
        if (atomic_load(&s->stopping)) {
            respond_error_with_header(r, 503, "server_stopping", NULL, "Retry-After", "1",
                                      "the server is shutting down");
            return MHD_YES;
        }
        /* Draining (a stop has begun): no new work, so every POST of a guarded route is refused and the client
         * retries elsewhere; reads (GET: /health, /metrics, /v1/models) are still answered. */
        if (atomic_load(&s->draining) && !r->route->open && strcmp(r->method, "POST") == 0) {
            char after[16];
            snprintf(after, sizeof after, "%u", atomic_load(&s->retry_after_s));
            respond_error_with_header(r, 503, "server_draining", NULL, "Retry-After", after,
                                      "the server is draining before a stop; retry on another replica");
            return MHD_YES;
        }
        char msg[200];
        if ((!r->route->open || (r->route->flags & SY_ROUTE_ADMIN)) && s->opts.authorize &&
            s->opts.authorize(s->opts.app, r, msg, sizeof msg) != 0) {
            respond_error_with_header(r, 401, "invalid_api_key", NULL, "WWW-Authenticate", "Bearer", msg);
            return MHD_YES;
        }
        const char *length = sy_http_header(r, "Content-Length");
        uint64_t declared;
        if (length != NULL && sy_parse_u64(length, UINT64_MAX, &declared) == 0) {
            if (declared > r->max_body) {
                sy_http_respond_error(r, 413, "request_too_large", NULL,
                                      "the request body has %llu bytes; %s accepts at most %llu",
                                      (unsigned long long)declared, r->route->label, (unsigned long long)r->max_body);
                return MHD_YES;
            }
            /* Exactly what was declared, so the buffer does not double past it (pages are touched only as the
             * body arrives). */
            if (declared > 0) {
                r->body.data = sy_xmalloc((size_t)declared + 1);
                r->body.cap = (size_t)declared + 1;
            }
        }
        return MHD_YES;
    }
    if (r->responded) {
        /* Answered early (error): the rest of the body is discarded. */
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (*upload_data_size > 0) {
        if (!r->body_too_large) {
            if (*upload_data_size > r->max_body - r->body.len) {
                r->body_too_large = true;
                sy_buf_free(&r->body);
            } else {
                sy_buf_append(&r->body, upload_data, *upload_data_size);
            }
        }
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (r->body_too_large) {
        sy_http_respond_error(r, 413, "request_too_large", NULL, "the request body is larger than %llu bytes",
                              (unsigned long long)r->max_body);
        return MHD_YES;
    }
    sy_http_guard_set_phase(s->guard, r->guard, SY_GUARD_HANDLING);
    atomic_fetch_add(&s->in_handlers, 1);
    if (s->opts.intercept == NULL || !s->opts.intercept(s->opts.app, r)) r->route->handler(r);
    atomic_fetch_sub(&s->in_handlers, 1);
    if (!r->responded) sy_http_respond_error(r, 500, "internal_error", NULL, "the handler gave no response");
    return MHD_YES;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    (void)toe;
    sy_server *s = cls;
    sy_http_request *r = *con_cls;
    if (r == NULL) return;
    if (r->responded && s->opts.on_done)
        s->opts.on_done(s->opts.app,
                        r->route ? r->route->label : strcmp(r->method, "OPTIONS") == 0 ? "preflight" : "other",
                        r->status);
    if (r->keep_open && s->idle_timeout_s > 0)
        MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned int)s->idle_timeout_s);
    sy_http_guard_request_done(s->guard, r->guard);
    sy_buf_free(&r->body);
    free(r->cors_origin);
    free(r->path);
    free(r);
    *con_cls = NULL;
}

/* The accept thread asks before a connection opens: the per-client cap and the reserve. */
static enum MHD_Result on_accept(void *cls, const struct sockaddr *addr, socklen_t addrlen) {
    sy_server *s = cls;
    return sy_http_guard_admit(s->guard, addr, addrlen) ? MHD_YES : MHD_NO;
}

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe) {
    sy_server *s = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *fd = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        const union MHD_ConnectionInfo *addr = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        const struct sockaddr *sa = addr ? addr->client_addr : NULL;
        socklen_t len = sa == NULL ? 0 : sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                                                    : sizeof(struct sockaddr_in);
        *socket_context = sy_http_guard_open(s->guard, fd ? fd->connect_fd : -1, sa, len);
    } else if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
        sy_http_guard_close(s->guard, *socket_context);
        *socket_context = NULL;
    }
}

static void mhd_log(void *cls, const char *fmt, va_list ap) {
    (void)cls;
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    size_t n = strlen(line);
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = '\0';
    sy_log(SY_LOG_DEBUG, "http: %s", line);
}

/* ------------------------------------------------------------------------------------------------------------
 * Start and stop */

sy_server *sy_server_start(const sy_server_options *opts, char *err, size_t err_size) {
    if (opts == NULL || opts->routes == NULL || opts->n_routes == 0) {
        snprintf(err, err_size, "the HTTP server needs a route table");
        return NULL;
    }
    const char *listen_addr = (opts->listen) ? opts->listen : SY_SERVER_DEFAULT_LISTEN;
    char host[256];
    uint16_t port;
    if (sy_parse_listen_address(listen_addr, host, sizeof host, &port, err, err_size) != 0) return NULL;
    uint16_t bound = 0;
    bool v6 = false;
    int fd = open_listen_socket(host, port, &bound, &v6, err, err_size);
    if (fd < 0) return NULL;

    sy_server *s = sy_xcalloc(1, sizeof *s);
    s->listen_fd = fd;
    s->port = bound;
    s->opts = *opts;
    s->max_body = (opts->max_request_body) ? opts->max_request_body : SY_SERVER_DEFAULT_MAX_BODY;
    s->idle_timeout_s = (opts->idle_timeout_s) ? opts->idle_timeout_s : SY_SERVER_DEFAULT_IDLE_TIMEOUT_S;
    unsigned max_conn = (opts->max_connections) ? opts->max_connections : SY_SERVER_DEFAULT_MAX_CONNECTIONS;
    s->loopback = sy_http_host_is_loopback(host);
    sy_http_guard_limits limits = {
        .max_connections = max_conn,
        .max_connections_per_client =
            opts->max_connections_per_client ? opts->max_connections_per_client : SY_SERVER_DEFAULT_MAX_PER_CLIENT,
        .connection_reserve = opts->connection_reserve ? opts->connection_reserve : SY_SERVER_DEFAULT_CONNECTION_RESERVE,
        .request_timeout_s = opts->request_timeout_s ? opts->request_timeout_s : SY_SERVER_DEFAULT_REQUEST_TIMEOUT_S,
        .idle_timeout_s = s->idle_timeout_s,
        .stream_timeout_s = opts->stream_timeout_s ? opts->stream_timeout_s : SY_SERVER_DEFAULT_STREAM_TIMEOUT_S,
    };
    s->guard = sy_http_guard_create(&limits);
    if (s->guard == NULL) {
        snprintf(err, err_size, "could not start the HTTP server's watchdog thread");
        close(fd);
        free(s);
        return NULL;
    }
    pthread_mutex_init(&s->lock, NULL);
    atomic_init(&s->stopping, false);
    atomic_init(&s->draining, false);
    atomic_init(&s->retry_after_s, 1);
    atomic_init(&s->in_handlers, 0);
    snprintf(s->url, sizeof s->url, v6 ? "http://[%s]:%u" : "http://%s:%u", host, (unsigned)bound);

    unsigned int flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ITC |
                         MHD_USE_POLL | MHD_USE_ERROR_LOG;
    if (v6) flags |= MHD_USE_IPv6;
    s->daemon = MHD_start_daemon(flags, 0, on_accept, s, on_access, s, MHD_OPTION_LISTEN_SOCKET, (MHD_socket)fd,
                                 MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)s->idle_timeout_s,
                                 MHD_OPTION_CONNECTION_LIMIT, (unsigned int)max_conn, MHD_OPTION_NOTIFY_COMPLETED,
                                 on_completed, s, MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
                                 MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL, MHD_OPTION_END);
    if (s->daemon == NULL) {
        snprintf(err, err_size, "libmicrohttpd could not start on %s", listen_addr);
        sy_http_guard_free(s->guard);
        close(fd);
        pthread_mutex_destroy(&s->lock);
        free(s);
        return NULL;
    }
    return s;
}

void sy_server_stop(sy_server *s) {
    if (s == NULL) return;
    pthread_mutex_lock(&s->lock);
    atomic_store(&s->stopping, true);
    /* Cancel under the lock so no entry can be freed meanwhile; generations then end with DONE "cancelled". */
    for (track_entry *t = s->tracked; t; t = t->next) t->cancel(t->arg);
    pthread_mutex_unlock(&s->lock);
    MHD_socket quiesced = MHD_quiesce_daemon(s->daemon);
    /* Let the cancelled generations end their responses properly (a final error event, a closing chunk)
     * before the connections are torn down; bounded, in case an engine step is slow. */
    double deadline = sy_now_seconds() + SY_SERVER_STOP_GRACE_S;
    for (;;) {
        pthread_mutex_lock(&s->lock);
        bool idle = s->tracked == NULL;
        pthread_mutex_unlock(&s->lock);
        if (idle || sy_now_seconds() > deadline) break;
        struct timespec ms20 = {0, 20 * 1000 * 1000};
        nanosleep(&ms20, NULL);
    }
    MHD_stop_daemon(s->daemon); /* waits for every connection's thread */
    if (quiesced != MHD_INVALID_SOCKET) close(quiesced);
    pthread_mutex_lock(&s->lock);
    track_entry *t = s->tracked;
    s->tracked = NULL;
    pthread_mutex_unlock(&s->lock);
    while (t) {
        track_entry *next = t->next;
        free(t);
        t = next;
    }
    pthread_mutex_destroy(&s->lock);
    sy_http_guard_free(s->guard);
    free(s);
}
