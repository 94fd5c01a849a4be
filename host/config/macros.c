/*
 * llama-swap's macros in the process keys of a model: ${NAME} from [macros] (a macro's value may use the macros
 * defined before it), ${env.NAME} from switchyard's environment, ${MODEL_ID} (the model's name) and ${PORT}
 * (a port of its own, counted up from [host] start_port in config order). ${PID} is left in cmd_stop for the
 * stop. An unknown or unclosed macro is an error naming it, never left in the command.
 */
#include "config/config.h"

#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/util.h"

#define MAX_EXPANSION_DEPTH 8

typedef struct expand_ctx {
    sy_config *cfg;
    sy_config_model *m;
    bool keep_pid;
    char *why;
    size_t why_size;
} expand_ctx;

static int assign_port(expand_ctx *x) {
    if (x->m->port != 0) return 0;
    uint32_t used = 0;
    for (size_t i = 0; i < x->cfg->n_models; i++) used += x->cfg->models[i].port != 0;
    uint64_t port = (uint64_t)x->cfg->host.start_port + used;
    if (port > 65535) {
        snprintf(x->why, x->why_size, "${PORT}: no port is left above start_port %u", (unsigned)x->cfg->host.start_port);
        return -1;
    }
    x->m->port = (uint32_t)port;
    return 0;
}

static int expand_into(expand_ctx *x, const char *text, sy_buf *out, int depth);

/* The value of one macro (name is NUL-terminated), appended to out. */
static int expand_macro(expand_ctx *x, const char *name, sy_buf *out, int depth) {
    if (strcmp(name, "PORT") == 0) {
        if (assign_port(x) != 0) return -1;
        sy_buf_printf(out, "%u", (unsigned)x->m->port);
        return 0;
    }
    if (strcmp(name, "MODEL_ID") == 0) {
        sy_buf_append(out, x->m->name, strlen(x->m->name));
        return 0;
    }
    if (strcmp(name, "PID") == 0) {
        if (!x->keep_pid) {
            snprintf(x->why, x->why_size, "${PID} is known only in cmd_stop");
            return -1;
        }
        sy_buf_append(out, "${PID}", 6);
        return 0;
    }
    if (strncmp(name, "env.", 4) == 0) {
        const char *v = getenv(name + 4);
        if (v == NULL) {
            snprintf(x->why, x->why_size, "${%.100s}: the environment variable %.100s is not set", name, name + 4);
            return -1;
        }
        sy_buf_append(out, v, strlen(v));
        return 0;
    }
    const sy_config_list *names = &x->cfg->macro_names;
    for (size_t i = names->count; i-- > 0;) {
        if (strcmp(names->items[i], name) != 0) continue;
        if (depth >= MAX_EXPANSION_DEPTH) {
            snprintf(x->why, x->why_size, "${%.100s}: macros nest deeper than %d (a cycle?)", name,
                     MAX_EXPANSION_DEPTH);
            return -1;
        }
        return expand_into(x, x->cfg->macro_values.items[i], out, depth + 1);
    }
    snprintf(x->why, x->why_size, "${%.100s} is not a macro (define it in [macros]; known: PORT, MODEL_ID, env.NAME)",
             name);
    return -1;
}

static int expand_into(expand_ctx *x, const char *text, sy_buf *out, int depth) {
    for (const char *p = text; *p != '\0';) {
        if (p[0] != '$' || p[1] != '{') {
            sy_buf_append(out, p, 1);
            p++;
            continue;
        }
        const char *close = strchr(p + 2, '}');
        size_t n = close != NULL ? (size_t)(close - p - 2) : 0;
        if (close == NULL || n == 0 || n > 128) {
            snprintf(x->why, x->why_size, "'%.40s': a ${ without a closing } (or an empty or overlong name)", p);
            return -1;
        }
        char name[130];
        memcpy(name, p + 2, n);
        name[n] = '\0';
        if (expand_macro(x, name, out, depth) != 0) return -1;
        if (out->len > SY_CONFIG_MAX_TEXT_LEN) {
            snprintf(x->why, x->why_size, "longer than %d bytes once the macros are expanded", SY_CONFIG_MAX_TEXT_LEN);
            return -1;
        }
        p = close + 1;
    }
    return 0;
}

/* Replaces *field by its expansion. */
static int expand_field(expand_ctx *x, const char *key, char **field, bool keep_pid) {
    if (*field == NULL) return 0;
    sy_buf out;
    sy_buf_init(&out);
    x->keep_pid = keep_pid;
    char inner[400] = "";
    char *saved_why = x->why;
    size_t saved_size = x->why_size;
    x->why = inner, x->why_size = sizeof inner;
    int rc = expand_into(x, *field, &out, 0);
    x->why = saved_why, x->why_size = saved_size;
    if (rc != 0) {
        snprintf(x->why, x->why_size, "%s: %s", key, inner);
        sy_buf_free(&out);
        return -1;
    }
    sy_buf_append(&out, "", 1);
    free(*field);
    *field = sy_strdup(out.data);
    sy_buf_free(&out);
    return 0;
}

int sy_config_expand_process(sy_config *cfg, sy_config_model *m, char *why, size_t why_size) {
    expand_ctx x = {cfg, m, false, why, why_size};
    if (m->proxy == NULL) m->proxy = sy_strdup("http://127.0.0.1:${PORT}");
    if (m->check_endpoint == NULL) m->check_endpoint = sy_strdup("/health");
    if (expand_field(&x, "cmd", &m->cmd, false) != 0 || expand_field(&x, "cmd_stop", &m->cmd_stop, true) != 0 ||
        expand_field(&x, "proxy", &m->proxy, false) != 0 ||
        expand_field(&x, "check_endpoint", &m->check_endpoint, false) != 0)
        return -1;
    for (size_t i = 0; i < m->env.count; i++) {
        char key[32];
        snprintf(key, sizeof key, "env item %zu", i + 1);
        if (expand_field(&x, key, &m->env.items[i], false) != 0) return -1;
    }
    if (strncmp(m->proxy, "http://", 7) != 0 && strncmp(m->proxy, "https://", 8) != 0) {
        snprintf(why, why_size, "proxy: '%.200s' is not an http:// or https:// URL", m->proxy);
        return -1;
    }
    if (strcmp(m->check_endpoint, "none") != 0 && m->check_endpoint[0] != '/') {
        snprintf(why, why_size, "check_endpoint: '%.200s' is neither a path starting with '/' nor 'none'",
                 m->check_endpoint);
        return -1;
    }
    return 0;
}
