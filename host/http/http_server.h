/*
 * The HTTP transport of `switchyard serve`, on libmicrohttpd: one thread per connection (a handler may block
 * while its model loads or its generation streams), bounded request bodies per route (413), an idle timeout for
 * connections between requests, the limits of http_guard.h (connections per client address, a reserve of slots,
 * a deadline for receiving a whole request, stalled streams cut), origins and hosts (http_access.h: a request
 * whose Origin is not allowed gets 403 and no response carries CORS headers unless its origin is allowed; on a
 * loopback listener a Host that is not a loopback name gets 403), and a clean stop that first drains (new work
 * refused with 503 + Retry-After while what runs finishes), then stops accepting, cancels the work still in
 * flight and waits for its connections to finish.
 *
 * It knows nothing of models or APIs: the caller gives it a route table, an opaque app pointer that handlers
 * read back (sy_http_app), an authorisation hook for routes that are not open, and a hook that sees every
 * finished request (metrics). A handler answers through exactly one of the sy_http_respond* calls.
 */
#ifndef SY_HOST_HTTP_SERVER_H
#define SY_HOST_HTTP_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <cjson/cJSON.h>


#define SY_SERVER_DEFAULT_LISTEN "127.0.0.1:8080"
#define SY_SERVER_DEFAULT_MAX_BODY ((uint64_t)16 << 20)
#define SY_SERVER_DEFAULT_IDLE_TIMEOUT_S 60u
#define SY_SERVER_DEFAULT_MAX_CONNECTIONS 256u
#define SY_SERVER_DEFAULT_REQUEST_TIMEOUT_S 30u
#define SY_SERVER_DEFAULT_STREAM_TIMEOUT_S 60u
#define SY_SERVER_DEFAULT_MAX_PER_CLIENT 64u
#define SY_SERVER_DEFAULT_CONNECTION_RESERVE 16u

typedef struct sy_server sy_server;
typedef struct sy_http_request sy_http_request;

/* How errors are shaped for the clients of a route. */
typedef enum sy_api_style {
    SY_API_STYLE_OPENAI = 0, /* errors as {"error":{"message","type","param","code"}} */
    SY_API_STYLE_OLLAMA,     /* errors as {"error":"message"} */
    SY_API_STYLE_ANTHROPIC   /* errors as {"type":"error","error":{"type","message"}} */
} sy_api_style;

enum { SY_HTTP_GET = 1, SY_HTTP_POST = 2, SY_HTTP_DELETE = 4 }; /* route method bits; HEAD counts as GET */
enum { SY_ROUTE_ADMIN = 1 }; /* route flags: management (the authorisation hook asks for an admin key) */

typedef struct sy_http_route {
    unsigned methods;  /* SY_HTTP_* bits */
    const char *path;  /* exact, or a prefix (ending with '/') when prefix is set */
    bool prefix;
    const char *label; /* the route as metrics name it ("/v1/models/{id}") */
    sy_api_style style;
    bool open;         /* answered without asking the authorisation hook */
    void (*handler)(sy_http_request *r);
    unsigned flags;    /* SY_ROUTE_* */
    uint64_t max_body; /* bytes; 0: the server's max_request_body (a route's limit never exceeds it) */
} sy_http_route;

typedef struct sy_server_options {
    const char *listen;       /* "HOST:PORT" or "[V6]:PORT"; port 0 picks a free one; NULL: the default */
    uint64_t max_request_body; /* bytes; 0: SY_SERVER_DEFAULT_MAX_BODY */
    unsigned idle_timeout_s;   /* a connection idle this long is closed (not while generating); 0: default */
    unsigned max_connections;  /* 0: default */
    unsigned max_connections_per_client; /* one client address (an IPv6 /64); 0: default */
    unsigned connection_reserve; /* slots kept for addresses holding at most one connection; 0: default */
    unsigned request_timeout_s;  /* a whole request (headers and body) must arrive within this; 0: default */
    unsigned stream_timeout_s;   /* a client must take what it is sent within this; 0: default */
    const sy_http_route *routes; /* borrowed; must outlive the server */
    size_t n_routes;
    void *app; /* handed back to handlers by sy_http_app */
    /* For routes that are not open: 0 lets the request through; else msg says why, and it gets a 401. NULL:
     * every route is open. */
    int (*authorize)(void *app, sy_http_request *r, char *msg, size_t msg_size);
    /* The request's Origin header against the allowed origins: a sy_http_origin_verdict (http_access.h). NULL:
     * every origin is refused (requests without Origin are always served). */
    int (*origin_policy)(void *app, const char *origin);
    /* On a loopback listener, whether a Host header that is not a loopback name is allowed. NULL: never. */
    bool (*host_allowed)(void *app, const char *host);
    /* Every answered request, once done: its route label ("preflight", "other" without a route) and status. */
    void (*on_done)(void *app, const char *label, int status);
    /* Runs before the route's handler, once authorised and with the body read: true when it answered the
     * request itself (the proxy takes the requests for models served elsewhere this way). NULL: none. */
    bool (*intercept)(void *app, sy_http_request *r);
} sy_server_options;

/* Split "HOST:PORT" / "[V6]:PORT" into host and port. Returns 0, or -1 with err naming what is wrong. */
int sy_parse_listen_address(const char *s, char *host, size_t host_size, uint16_t *port, char *err,
                            size_t err_size);

/* Bind and start serving. NULL with err set when the address cannot be bound. */
sy_server *sy_server_start(const sy_server_options *opts, char *err, size_t err_size);
/* "http://127.0.0.1:8080" (the bound port when 0 was asked for). */
const char *sy_server_url(const sy_server *s);
uint16_t sy_server_port(const sy_server *s);
/* Stop accepting, cancel the generations in flight, wait for every connection to end, free. */
void sy_server_stop(sy_server *s);

/* Begin draining, the first part of a stop: the server goes on listening and answering, the work in flight goes
 * on, but every new POST to a guarded route gets 503 "server_draining" with Retry-After: retry_after_s. */
void sy_server_drain(sy_server *s, unsigned retry_after_s);
bool sy_server_draining(const sy_server *s);
/* Requests in flight: inside a handler (a model load, say) or streaming tracked work; 0 once drained. */
unsigned sy_server_in_flight(sy_server *s);

/* For handlers. */
bool sy_server_stopping(const sy_server *s);
/* Work in flight that a stop must cancel: cancel(arg) is called once, from the stopping thread, for every
 * entry still registered. Registration returns a handle for unregistering (0 when already stopping: the caller
 * must then give up at once). */
uint64_t sy_server_track(sy_server *s, void (*cancel)(void *arg), void *arg);
void sy_server_untrack(sy_server *s, uint64_t handle);

/* The request. */
sy_server *sy_http_server(const sy_http_request *r);
/* The app pointer of the server's options. */
void *sy_http_app(const sy_http_request *r);
const char *sy_http_method(const sy_http_request *r);
const char *sy_http_path(const sy_http_request *r);
/* The path after a prefix route ("/v1/models/ID" -> "ID"); "" for exact routes. */
const char *sy_http_path_param(const sy_http_request *r);
/* The request body (NUL-terminated, *len bytes, may contain NULs); "" when there is none. */
const char *sy_http_body(const sy_http_request *r, size_t *len);
/* A query-string argument or a header, or NULL. */
const char *sy_http_query(const sy_http_request *r, const char *key);
const char *sy_http_header(const sy_http_request *r, const char *key);
sy_api_style sy_http_style(const sy_http_request *r);
/* The matched route's SY_ROUTE_* flags (0 before routing). */
unsigned sy_http_route_flags(const sy_http_request *r);
/* When the request arrived (sy_now_seconds). */
double sy_http_start_time(const sy_http_request *r);
/* The client's socket, for noticing that the client went away (-1 if unknown). */
int sy_http_client_fd(const sy_http_request *r);
/* True when the client closed its connection (or it broke). */
bool sy_http_client_gone(const sy_http_request *r);
/* Lift the idle timeout of this connection while a model loads or a generation runs; it is restored when the
 * request completes. */
void sy_http_keep_open(sy_http_request *r);

/* Answers. Each returns 0, or -1 when the response could not be queued (the connection is then closed). */
int sy_http_respond(sy_http_request *r, int status, const char *content_type, const char *body, size_t len);
/* Serialises and frees json. */
int sy_http_respond_json(sy_http_request *r, int status, cJSON *json);
/* An error in the request's API style; code and param may be NULL. The message is made safe to send (valid
 * UTF-8, bounded length). */
int sy_http_respond_error(sy_http_request *r, int status, const char *code, const char *param, const char *fmt,
                          ...) __attribute__((format(printf, 5, 6)));
/*
 * A streamed body (chunked transfer). reader(cls, buf, max) runs on this connection's thread and may block until
 * it has data; it returns the byte count (> 0), SY_HTTP_STREAM_END at the end, or SY_HTTP_STREAM_ABORT to
 * break the connection. free_cls(cls) runs exactly once when the response is done with (including when the
 * client went away or the response could not be queued).
 */
#define SY_HTTP_STREAM_END ((ssize_t)-1)
#define SY_HTTP_STREAM_ABORT ((ssize_t)-2)
typedef ssize_t (*sy_http_reader)(void *cls, char *buf, size_t max);
int sy_http_respond_stream(sy_http_request *r, const char *content_type, sy_http_reader reader, void *cls,
                           void (*free_cls)(void *cls));

/* The same with the status and extra headers of another server's answer (the proxy); headers: "Name: value"
 * strings, n_headers of them. */
int sy_http_respond_stream_status(sy_http_request *r, int status, const char *content_type,
                                  const char *const *headers, size_t n_headers, sy_http_reader reader, void *cls,
                                  void (*free_cls)(void *cls));
/* The query string as the client could have sent it ("a=1&b=x%20y", re-encoded from the parsed arguments),
 * malloc'd; "" when there is none. */
char *sy_http_query_string(const sy_http_request *r);

/* The HTTP status text for logs and error types ("Not Found"). */
const char *sy_http_status_text(int status);

#endif
