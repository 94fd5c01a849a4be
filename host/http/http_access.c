/* See http_access.h. */
#include "http/http_access.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#define SY_MAX_ORIGIN 512

static char lower(char c) { return (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c; }

static bool host_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_';
}

/* host[:port] or [v6][:port], lowercased host into out. */
static int split_host_port(const char *s, size_t len, char *out, size_t out_size) {
    if (len == 0 || len >= out_size || len > 300) return -1;
    const char *host = s, *end = s + len, *port = NULL;
    size_t host_len;
    if (s[0] == '[') {
        const char *close = memchr(s, ']', len);
        if (close == NULL) return -1;
        host = s + 1;
        host_len = (size_t)(close - host);
        if (close + 1 < end) {
            if (close[1] != ':') return -1;
            port = close + 2;
        }
        if (host_len == 0) return -1;
        for (size_t i = 0; i < host_len; i++) {
            char c = lower(host[i]);
            if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || c == ':' || c == '.')) return -1;
            out[i] = c;
        }
    } else {
        const char *colon = memchr(s, ':', len);
        host_len = colon ? (size_t)(colon - s) : len;
        if (colon) port = colon + 1;
        if (host_len == 0) return -1;
        for (size_t i = 0; i < host_len; i++) {
            char c = lower(host[i]);
            if (!host_char(c)) return -1;
            out[i] = c;
        }
    }
    if (port != NULL) {
        if (port >= end || (size_t)(end - port) > 5) return -1;
        for (const char *p = port; p < end; p++)
            if (*p < '0' || *p > '9') return -1;
    }
    out[host_len] = '\0';
    return 0;
}

int sy_http_host_name(const char *host_header, char *out, size_t out_size) {
    if (host_header == NULL) return -1;
    size_t len = strlen(host_header);
    while (len > 0 && (host_header[len - 1] == ' ' || host_header[len - 1] == '\t')) len--;
    while (len > 0 && (*host_header == ' ' || *host_header == '\t')) host_header++, len--;
    if (split_host_port(host_header, len, out, out_size) != 0) return -1;
    size_t n = strlen(out);
    if (n > 1 && out[n - 1] == '.') out[n - 1] = '\0'; /* "localhost." is localhost */
    return 0;
}

bool sy_http_host_is_loopback(const char *host) {
    if (host == NULL) return false;
    if (strcmp(host, "localhost") == 0) return true;
    size_t n = strlen(host);
    if (n > 10 && strcmp(host + n - 10, ".localhost") == 0) return true;
    struct in_addr a4;
    if (inet_pton(AF_INET, host, &a4) == 1) return (ntohl(a4.s_addr) >> 24) == 127;
    struct in6_addr a6;
    if (inet_pton(AF_INET6, host, &a6) == 1) {
        static const unsigned char one[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
        if (memcmp(a6.s6_addr, one, 16) == 0) return true;
        static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        return memcmp(a6.s6_addr, mapped, 12) == 0 && a6.s6_addr[12] == 127;
    }
    return false;
}

int sy_http_origin_normalize(const char *origin, char *out, size_t out_size) {
    if (origin == NULL) return -1;
    size_t len = strlen(origin);
    if (len == 0 || len >= SY_MAX_ORIGIN || len >= out_size) return -1;
    if (strcmp(origin, "null") == 0) {
        snprintf(out, out_size, "null");
        return 0;
    }
    const char *sep = strstr(origin, "://");
    if (sep == NULL || sep == origin) return -1;
    size_t scheme_len = (size_t)(sep - origin);
    for (size_t i = 0; i < scheme_len; i++) {
        char c = lower(origin[i]);
        if (!((c >= 'a' && c <= 'z') || (i > 0 && ((c >= '0' && c <= '9') || c == '+' || c == '-' || c == '.'))))
            return -1;
        out[i] = c;
    }
    memcpy(out + scheme_len, "://", 3);
    const char *authority = sep + 3;
    size_t auth_len = strlen(authority);
    if (auth_len > 0 && authority[auth_len - 1] == '/') auth_len--; /* a trailing slash some write in configs */
    char host[SY_MAX_ORIGIN];
    if (split_host_port(authority, auth_len, host, sizeof host) != 0) return -1;
    /* Keep the authority as written but lowercased (the port stays part of the origin). */
    for (size_t i = 0; i < auth_len; i++) out[scheme_len + 3 + i] = lower(authority[i]);
    out[scheme_len + 3 + auth_len] = '\0';
    return 0;
}

sy_http_origin_verdict sy_http_origin_check(const char *origin, const char *const *allowed, size_t n_allowed) {
    char want[SY_MAX_ORIGIN];
    bool valid = sy_http_origin_normalize(origin, want, sizeof want) == 0;
    bool wildcard = false;
    for (size_t i = 0; i < n_allowed; i++) {
        if (strcmp(allowed[i], "*") == 0) {
            wildcard = true;
            continue;
        }
        char have[SY_MAX_ORIGIN];
        if (valid && sy_http_origin_normalize(allowed[i], have, sizeof have) == 0 && strcmp(have, want) == 0)
            return SY_ORIGIN_ALLOWED;
    }
    return wildcard ? SY_ORIGIN_WILDCARD : SY_ORIGIN_REFUSED;
}

bool sy_http_host_check(const char *host_header, const char *const *allowed, size_t n_allowed) {
    char host[320];
    if (sy_http_host_name(host_header, host, sizeof host) != 0) {
        for (size_t i = 0; i < n_allowed; i++)
            if (strcmp(allowed[i], "*") == 0) return true;
        return false;
    }
    if (sy_http_host_is_loopback(host)) return true;
    for (size_t i = 0; i < n_allowed; i++) {
        if (strcmp(allowed[i], "*") == 0) return true;
        char name[320];
        if (sy_http_host_name(allowed[i], name, sizeof name) == 0 && strcmp(name, host) == 0) return true;
    }
    return false;
}
