/*
 * Who may talk to the server, read from the request's Origin and Host headers (pure functions; the policy's
 * lists come from the caller). Browsers send Origin on every cross-origin request, so a page of another site
 * that the user visits is told apart from curl and the SDKs, which send none; and a Host that is not a loopback
 * name reaching a loopback listener is what DNS rebinding looks like (a hostile name re-pointed at 127.0.0.1).
 */
#ifndef SY_HOST_HTTP_ACCESS_H
#define SY_HOST_HTTP_ACCESS_H

#include <stdbool.h>
#include <stddef.h>

/* An Origin ("scheme://host[:port]", or "null") lowercased into out; -1 when it is not one (too long, a path,
 * characters an origin cannot hold). */
int sy_http_origin_normalize(const char *origin, char *out, size_t out_size);
/* The host of a Host header ("example.com:8080" -> "example.com", "[::1]:80" -> "::1"), lowercased; -1 when
 * malformed. */
int sy_http_host_name(const char *host_header, char *out, size_t out_size);
/* localhost, a name under .localhost, 127.0.0.0/8, ::1 (a host as sy_http_host_name returns it). */
bool sy_http_host_is_loopback(const char *host);

/* How a request's Origin stands against a list of allowed origins (each an origin or "*"). */
typedef enum sy_http_origin_verdict {
    SY_ORIGIN_REFUSED = 0,
    SY_ORIGIN_ALLOWED,  /* answered with the origin itself in Access-Control-Allow-Origin */
    SY_ORIGIN_WILDCARD, /* the list holds "*": answered with "*" */
} sy_http_origin_verdict;
sy_http_origin_verdict sy_http_origin_check(const char *origin, const char *const *allowed, size_t n_allowed);
/* Whether a Host header may reach a loopback listener: a loopback name, or a name in the list ("*": any). */
bool sy_http_host_check(const char *host_header, const char *const *allowed, size_t n_allowed);

#endif
