/*
 * Connection limits of the HTTP server, kept apart from the transport: how many connections one client address
 * may hold, the reserve of slots that an address already holding several cannot take, and a watchdog thread
 * that cuts (shutdown(2)) connections past their deadline:
 *   receiving  the whole request (headers and body) must arrive within request_timeout of the connection's
 *              opening, or of its previous answer plus the idle timeout: a deadline, not an idle timer that
 *              every byte resets, so a client trickling a byte a second is cut all the same;
 *   handling   the handler runs (a model loads, a generation is collected): no deadline;
 *   streaming  a streamed answer: while the stream's reader waits for the generation there is no deadline;
 *              once it has handed bytes over, the client must take them within stream_timeout;
 *   answering  a buffered answer must be taken within stream_timeout.
 * Cutting a connection wakes its thread (the poll sees the hang-up) and the request ends as if the client left.
 */
#ifndef SY_HOST_HTTP_GUARD_H
#define SY_HOST_HTTP_GUARD_H

#include <stdbool.h>
#include <sys/socket.h>

typedef struct sy_http_guard sy_http_guard;
typedef struct sy_http_guard_conn sy_http_guard_conn;

typedef struct sy_http_guard_limits {
    unsigned max_connections;            /* the server's total */
    unsigned max_connections_per_client; /* one address (IPv4, or an IPv6 /64) */
    unsigned connection_reserve;         /* the last slots: only for addresses holding at most one connection */
    unsigned request_timeout_s;
    unsigned idle_timeout_s;
    unsigned stream_timeout_s;
} sy_http_guard_limits;

typedef enum sy_http_guard_phase {
    SY_GUARD_RECEIVING = 0,
    SY_GUARD_HANDLING,
    SY_GUARD_STREAMING,
    SY_GUARD_ANSWERING,
} sy_http_guard_phase;

/* Starts the watchdog thread; NULL if it cannot. */
sy_http_guard *sy_http_guard_create(const sy_http_guard_limits *limits);
/* Stops the watchdog; every connection must be closed already. */
void sy_http_guard_free(sy_http_guard *g);

/* Whether a new connection from addr may be accepted now (the accept thread asks, before opening it). */
bool sy_http_guard_admit(sy_http_guard *g, const struct sockaddr *addr, socklen_t len);
/* A connection opened (fd stays valid until sy_http_guard_close) and is receiving its first request. */
sy_http_guard_conn *sy_http_guard_open(sy_http_guard *g, int fd, const struct sockaddr *addr, socklen_t len);
void sy_http_guard_close(sy_http_guard *g, sy_http_guard_conn *c);

/* Phases of the connection's current request. */
void sy_http_guard_set_phase(sy_http_guard *g, sy_http_guard_conn *c, sy_http_guard_phase phase);
/* A request ended: the connection waits (idle timeout plus request timeout) for the next one. */
void sy_http_guard_request_done(sy_http_guard *g, sy_http_guard_conn *c);
/* Streaming: the reader is waiting for the generation (true), or has handed bytes over (false: the client's
 * turn, timed from now). */
void sy_http_guard_stream_waiting(sy_http_guard *g, sy_http_guard_conn *c, bool waiting);

/* The key of an address for the per-client count ("127.0.0.1", "2001:db8::/64"); for logs and tests. */
void sy_http_guard_address_key(const struct sockaddr *addr, socklen_t len, char *out, size_t out_size);

#endif
