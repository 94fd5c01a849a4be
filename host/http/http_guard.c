/* See http_guard.h: per-client connection caps, the reserve, and the watchdog of request and stream deadlines. */
#include "http/http_guard.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "base/log.h"
#include "base/util.h"

/* How often the watchdog looks at the deadlines. */
#define SY_GUARD_TICK_MS 200

typedef struct addr_key {
    uint8_t family; /* 4 or 6 */
    uint8_t bytes[8]; /* IPv4: 4 bytes; IPv6: the /64 prefix, which one client holds whole */
} addr_key;

struct sy_http_guard_conn {
    int fd;
    addr_key key;
    sy_http_guard_phase phase;
    bool stream_waiting;
    bool cut;
    double deadline; /* sy_now_seconds; 0: none */
    sy_http_guard_conn *prev, *next;
};

struct sy_http_guard {
    sy_http_guard_limits limits;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    pthread_t thread;
    bool stop;
    unsigned n_open;
    sy_http_guard_conn *conns;
};

static addr_key key_of(const struct sockaddr *addr, socklen_t len) {
    addr_key k;
    memset(&k, 0, sizeof k);
    if (addr == NULL) return k;
    if (addr->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)addr;
        k.family = 4;
        memcpy(k.bytes, &a->sin_addr, 4);
    } else if (addr->sa_family == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6)) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)addr;
        const uint8_t *b = a->sin6_addr.s6_addr;
        static const uint8_t v4_mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        if (memcmp(b, v4_mapped, 12) == 0) {
            k.family = 4;
            memcpy(k.bytes, b + 12, 4);
        } else {
            k.family = 6;
            memcpy(k.bytes, b, 8);
        }
    }
    return k;
}

static bool same_key(const addr_key *a, const addr_key *b) {
    return a->family == b->family && memcmp(a->bytes, b->bytes, sizeof a->bytes) == 0;
}

void sy_http_guard_address_key(const struct sockaddr *addr, socklen_t len, char *out, size_t out_size) {
    addr_key k = key_of(addr, len);
    char text[INET6_ADDRSTRLEN];
    if (k.family == 4) {
        inet_ntop(AF_INET, k.bytes, text, sizeof text);
        snprintf(out, out_size, "%s", text);
    } else if (k.family == 6) {
        uint8_t full[16] = {0};
        memcpy(full, k.bytes, 8);
        inet_ntop(AF_INET6, full, text, sizeof text);
        snprintf(out, out_size, "%s/64", text);
    } else {
        snprintf(out, out_size, "unknown");
    }
}

static unsigned count_of(const sy_http_guard *g, const addr_key *k) {
    unsigned n = 0;
    for (const sy_http_guard_conn *c = g->conns; c; c = c->next)
        if (same_key(&c->key, k)) n++;
    return n;
}

static void *watchdog(void *arg) {
    sy_http_guard *g = arg;
    pthread_mutex_lock(&g->lock);
    while (!g->stop) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += SY_GUARD_TICK_MS * 1000L * 1000L;
        if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&g->wake, &g->lock, &until);
        double now = sy_now_seconds();
        for (sy_http_guard_conn *c = g->conns; c; c = c->next) {
            if (c->cut || c->deadline == 0 || now < c->deadline) continue;
            c->cut = true;
            /* The fd stays open until sy_http_guard_close (under this lock), so it is still this connection's. */
            shutdown(c->fd, SHUT_RDWR);
            const char *why = c->phase == SY_GUARD_RECEIVING   ? "its request did not arrive in time"
                              : c->phase == SY_GUARD_STREAMING ? "the client stopped reading its stream"
                                                               : "the client did not take its answer";
            sy_log(SY_LOG_INFO, "http: closing a connection: %s", why);
        }
    }
    pthread_mutex_unlock(&g->lock);
    return NULL;
}

sy_http_guard *sy_http_guard_create(const sy_http_guard_limits *limits) {
    sy_http_guard *g = sy_xcalloc(1, sizeof *g);
    g->limits = *limits;
    pthread_mutex_init(&g->lock, NULL);
    pthread_cond_init(&g->wake, NULL);
    if (pthread_create(&g->thread, NULL, watchdog, g) != 0) {
        pthread_cond_destroy(&g->wake);
        pthread_mutex_destroy(&g->lock);
        free(g);
        return NULL;
    }
    return g;
}

void sy_http_guard_free(sy_http_guard *g) {
    if (g == NULL) return;
    pthread_mutex_lock(&g->lock);
    g->stop = true;
    pthread_cond_signal(&g->wake);
    pthread_mutex_unlock(&g->lock);
    pthread_join(g->thread, NULL);
    while (g->conns) {
        sy_http_guard_conn *next = g->conns->next;
        free(g->conns);
        g->conns = next;
    }
    pthread_cond_destroy(&g->wake);
    pthread_mutex_destroy(&g->lock);
    free(g);
}

bool sy_http_guard_admit(sy_http_guard *g, const struct sockaddr *addr, socklen_t len) {
    addr_key k = key_of(addr, len);
    pthread_mutex_lock(&g->lock);
    unsigned held = count_of(g, &k);
    unsigned max = g->limits.max_connections;
    unsigned reserve = g->limits.connection_reserve < max ? g->limits.connection_reserve : 0;
    bool ok = held < g->limits.max_connections_per_client;
    /* The last `reserve` slots go only to addresses that hold at most one connection, so one address cannot take
     * the whole server however it is configured. */
    if (ok && g->n_open + reserve >= max && held > 1) ok = false;
    pthread_mutex_unlock(&g->lock);
    if (!ok) {
        char shown[64];
        sy_http_guard_address_key(addr, len, shown, sizeof shown);
        sy_log(SY_LOG_INFO, "http: refusing a connection from %s: it holds %u (at most %u per client; %u of %u "
               "slots in use)", shown, held, g->limits.max_connections_per_client, g->n_open, max);
    }
    return ok;
}

sy_http_guard_conn *sy_http_guard_open(sy_http_guard *g, int fd, const struct sockaddr *addr, socklen_t len) {
    sy_http_guard_conn *c = sy_xcalloc(1, sizeof *c);
    c->fd = fd;
    c->key = key_of(addr, len);
    c->phase = SY_GUARD_RECEIVING;
    c->deadline = sy_now_seconds() + g->limits.request_timeout_s;
    pthread_mutex_lock(&g->lock);
    c->next = g->conns;
    if (g->conns) g->conns->prev = c;
    g->conns = c;
    g->n_open++;
    pthread_mutex_unlock(&g->lock);
    return c;
}

void sy_http_guard_close(sy_http_guard *g, sy_http_guard_conn *c) {
    if (c == NULL) return;
    pthread_mutex_lock(&g->lock);
    if (c->prev) c->prev->next = c->next;
    else g->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    if (g->n_open > 0) g->n_open--;
    pthread_mutex_unlock(&g->lock);
    free(c);
}

/* Lock held. */
static void set_deadline(sy_http_guard *g, sy_http_guard_conn *c) {
    double now = sy_now_seconds();
    switch (c->phase) {
    case SY_GUARD_RECEIVING: break; /* set when the wait began */
    case SY_GUARD_HANDLING: c->deadline = 0; break;
    case SY_GUARD_STREAMING: c->deadline = c->stream_waiting ? 0 : now + g->limits.stream_timeout_s; break;
    case SY_GUARD_ANSWERING: c->deadline = now + g->limits.stream_timeout_s; break;
    }
}

void sy_http_guard_set_phase(sy_http_guard *g, sy_http_guard_conn *c, sy_http_guard_phase phase) {
    if (c == NULL) return;
    pthread_mutex_lock(&g->lock);
    if (c->phase != phase) {
        c->phase = phase;
        c->stream_waiting = false;
        set_deadline(g, c);
    }
    pthread_mutex_unlock(&g->lock);
}

void sy_http_guard_request_done(sy_http_guard *g, sy_http_guard_conn *c) {
    if (c == NULL) return;
    pthread_mutex_lock(&g->lock);
    c->phase = SY_GUARD_RECEIVING;
    c->stream_waiting = false;
    c->deadline = sy_now_seconds() + (double)g->limits.idle_timeout_s + (double)g->limits.request_timeout_s;
    pthread_mutex_unlock(&g->lock);
}

void sy_http_guard_stream_waiting(sy_http_guard *g, sy_http_guard_conn *c, bool waiting) {
    if (c == NULL) return;
    pthread_mutex_lock(&g->lock);
    c->phase = SY_GUARD_STREAMING;
    c->stream_waiting = waiting;
    set_deadline(g, c);
    pthread_mutex_unlock(&g->lock);
}
