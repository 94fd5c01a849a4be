/*
 * The switchyard configuration: an INI file read with inih, checked into the structs of config.h.
 *
 * inih hands us key/value pairs but (as Debian builds it) no line numbers, no section headers of empty
 * sections, a line buffer of about 200 bytes that would split longer lines into pieces, and NUL-terminated
 * strings. So the text reaches inih through our own line reader, which
 *   - counts lines (every message names its line),
 *   - refuses lines with control characters or NULs, and lines inih cannot hold whole, by handing inih a
 *     comment in their place (after recording the error),
 *   - classifies each line the way inih will (comment, section header, key, continuation of the previous key)
 *     so that headers open sections here, continuation lines are known as such, and the two stay in step
 *     (checked: a mismatch is reported as an internal error rather than misreading a file).
 */
#include "config/config.h"

#include "base/buf.h"
#include "base/log.h"
#include "base/option_schema.h"
#include "base/util.h"
#include "config/request_params.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <ini.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------------------------------------------------------
 * Key tables
 */

typedef enum value_type {
    V_BOOL,
    V_U32,       /* whole number */
    V_SECONDS,   /* whole number of seconds, optional s/m/h/d suffix; stored as uint32_t */
    V_SIZE,      /* bytes with optional K/M/G/T suffix; stored as uint64_t */
    V_IDENT,     /* plugin, backend, template names: [A-Za-z0-9._-] */
    V_NAME,      /* a model or group name */
    V_PATH,
    V_LISTEN,
    V_LOG_LEVEL,
    V_DRAFT,
    V_NAME_LIST, /* aliases, members */
    V_KEY_LIST,  /* api_keys, admin_api_keys */
    V_ORIGIN_LIST, /* cors_origins: "*" or scheme://host[:port] */
    V_HOST_LIST,   /* allowed_hosts: "*" or host names */
    V_TEXT,      /* free text (cmd, proxy, ...): indented lines continue it, joined with a space */
    V_ENV_LIST,  /* NAME=VALUE items: a comma starts a new item only before NAME= (values may hold commas) */
    V_JSON_OBJECT, /* a JSON object (set_params, metadata); indented lines continue it */
    V_STRATEGY    /* a selector's strategy */
} value_type;

typedef struct key_spec {
    const char *name;
    value_type type;
    size_t offset; /* of the field in the section's struct */
    uint64_t min, max;
} key_spec;

#define HOST_FIELD(f) offsetof(sy_config_host, f)
#define MODEL_FIELD(f) offsetof(sy_config_model, f)
#define GROUP_FIELD(f) offsetof(sy_config_group, f)
#define ONE_YEAR_S 31536000u

static const key_spec host_keys[] = {
    {"listen", V_LISTEN, HOST_FIELD(listen), 0, 0},
    {"plugin_dir", V_PATH, HOST_FIELD(plugin_dir), 0, 0},
    {"resume_path", V_PATH, HOST_FIELD(resume_path), 0, 0},
    {"resume", V_BOOL, HOST_FIELD(resume), 0, 0},
    {"resume_no_host_cache", V_BOOL, HOST_FIELD(resume_no_host_cache), 0, 0},
    {"drain_timeout", V_SECONDS, HOST_FIELD(drain_timeout_s), 0, 3600},
    {"slot_save_path", V_PATH, HOST_FIELD(slot_save_path), 0, 0},
    {"slot_save_max_bytes", V_SIZE, HOST_FIELD(slot_save_max_bytes), 0, (uint64_t)1 << 50},
    {"max_memory", V_SIZE, HOST_FIELD(max_memory), 0, (uint64_t)1 << 50},
    {"max_device_memory", V_SIZE, HOST_FIELD(max_device_memory), 0, (uint64_t)1 << 50},
    {"api_keys", V_KEY_LIST, HOST_FIELD(api_keys), 0, 0},
    {"admin_api_keys", V_KEY_LIST, HOST_FIELD(admin_api_keys), 0, 0},
    {"cors_origins", V_ORIGIN_LIST, HOST_FIELD(cors_origins), 0, 0},
    {"allowed_hosts", V_HOST_LIST, HOST_FIELD(allowed_hosts), 0, 0},
    {"request_timeout", V_SECONDS, HOST_FIELD(request_timeout_s), 1, 3600},
    {"stream_timeout", V_SECONDS, HOST_FIELD(stream_timeout_s), 1, 86400},
    {"max_connections_per_client", V_U32, HOST_FIELD(max_connections_per_client), 1, 65536},
    {"connection_reserve", V_U32, HOST_FIELD(connection_reserve), 1, 65535},
    {"tokenize_memory", V_SIZE, HOST_FIELD(tokenize_memory), (uint64_t)1 << 20, (uint64_t)1 << 40},
    {"log_level", V_LOG_LEVEL, HOST_FIELD(log_level), 0, 0},
    {"http_threads", V_U32, HOST_FIELD(http_threads), 1, 256}, /* deprecated: warned about, ignored */
    {"max_connections", V_U32, HOST_FIELD(max_connections), 1, 65536},
    {"max_request_body", V_SIZE, HOST_FIELD(max_request_body), 1024, (uint64_t)1 << 30},
    {"resume_max_bytes", V_SIZE, HOST_FIELD(resume_max_bytes), (uint64_t)1 << 20, (uint64_t)1 << 50},
    {"load_timeout", V_SECONDS, HOST_FIELD(load_timeout_s), 1, 86400},
    {"start_port", V_U32, HOST_FIELD(start_port), 1, 65535},
};

static const key_spec model_keys[] = {
    {"plugin", V_IDENT, MODEL_FIELD(plugin), 0, 0},
    {"path", V_PATH, MODEL_FIELD(path), 0, 0},
    {"aliases", V_NAME_LIST, MODEL_FIELD(aliases), 0, 0},
    {"group", V_NAME, MODEL_FIELD(group), 0, 0},
    {"ttl", V_SECONDS, MODEL_FIELD(ttl_s), 0, ONE_YEAR_S},
    {"parallel", V_U32, MODEL_FIELD(parallel), 1, 256},
    {"draft", V_DRAFT, MODEL_FIELD(draft), 0, 0},
    {"draft_max", V_U32, MODEL_FIELD(draft_max), 1, 256},
    {"draft_min", V_U32, MODEL_FIELD(draft_min), 0, 256},
    {"chat_template", V_IDENT, MODEL_FIELD(chat_template), 0, 0},
    {"chat_template_file", V_PATH, MODEL_FIELD(chat_template_file), 0, 0},
    {"preload", V_BOOL, MODEL_FIELD(preload), 0, 0},
    {"persist_on_unload", V_BOOL, MODEL_FIELD(persist_on_unload), 0, 0},
    {"max_queue", V_U32, MODEL_FIELD(max_queue), 0, 65536},
    {"queue_timeout", V_SECONDS, MODEL_FIELD(queue_timeout_s), 0, 86400},
    {"prefix_cache_tokens", V_U32, MODEL_FIELD(prefix_cache_tokens), 0, (uint64_t)1 << 24},
    /* Process models (llama-swap's cmd, cmdStop, env, checkEndpoint, proxy, useModelName, filters). */
    {"cmd", V_TEXT, MODEL_FIELD(cmd), 0, 0},
    {"cmd_stop", V_TEXT, MODEL_FIELD(cmd_stop), 0, 0},
    {"env", V_ENV_LIST, MODEL_FIELD(env), 0, 0},
    {"check_endpoint", V_TEXT, MODEL_FIELD(check_endpoint), 0, 0},
    {"proxy", V_TEXT, MODEL_FIELD(proxy), 0, 0},
    {"use_model_name", V_TEXT, MODEL_FIELD(use_model_name), 0, 0},
    {"memory", V_SIZE, MODEL_FIELD(memory), 0, (uint64_t)1 << 50},
    {"connect_timeout", V_SECONDS, MODEL_FIELD(connect_timeout_s), 1, 3600},
    {"header_timeout", V_SECONDS, MODEL_FIELD(header_timeout_s), 0, 86400},
    {"stop_grace", V_SECONDS, MODEL_FIELD(stop_grace_s), 0, 3600},
    {"strip_params", V_NAME_LIST, MODEL_FIELD(strip_params), 0, 0},
    {"set_params", V_JSON_OBJECT, MODEL_FIELD(set_params), 0, 0},
    {"unlisted", V_BOOL, MODEL_FIELD(unlisted), 0, 0},
    {"name", V_TEXT, MODEL_FIELD(display_name), 0, 0},
    {"description", V_TEXT, MODEL_FIELD(description), 0, 0},
    {"metadata", V_JSON_OBJECT, MODEL_FIELD(metadata), 0, 0},
    /* Every other key is a load option of the model's plugin, checked against what the plugin declares
     * ("sy.plugin.options/1") by sy_config_check_options. */
};

static const key_spec group_keys[] = {
    {"swap", V_BOOL, GROUP_FIELD(swap), 0, 0},
    {"exclusive", V_BOOL, GROUP_FIELD(exclusive), 0, 0},
    {"persistent", V_BOOL, GROUP_FIELD(persistent), 0, 0},
    {"members", V_NAME_LIST, GROUP_FIELD(members), 0, 0},
};

#define PEER_FIELD(f) offsetof(sy_config_peer, f)
static const key_spec peer_keys[] = {
    {"url", V_TEXT, PEER_FIELD(url), 0, 0},
    {"api_key", V_TEXT, PEER_FIELD(api_key), 0, 0},
    {"models", V_NAME_LIST, PEER_FIELD(models), 0, 0},
    {"strip_params", V_NAME_LIST, PEER_FIELD(strip_params), 0, 0},
    {"set_params", V_JSON_OBJECT, PEER_FIELD(set_params), 0, 0},
};

#define SELECTOR_FIELD(f) offsetof(sy_config_selector, f)
static const key_spec selector_keys[] = {
    {"strategy", V_STRATEGY, SELECTOR_FIELD(strategy), 0, 0},
    {"targets", V_NAME_LIST, SELECTOR_FIELD(targets), 0, 0},
    {"spillover", V_U32, SELECTOR_FIELD(spillover), 1, 65536},
    {"name", V_TEXT, SELECTOR_FIELD(display_name), 0, 0},
    {"description", V_TEXT, SELECTOR_FIELD(description), 0, 0},
};

#define COUNT_OF(a) (sizeof(a) / sizeof((a)[0]))
#define MAX_SECTION_KEYS 48
_Static_assert(COUNT_OF(host_keys) <= MAX_SECTION_KEYS, "seen[] too small");
_Static_assert(COUNT_OF(model_keys) <= MAX_SECTION_KEYS, "seen[] too small");
_Static_assert(COUNT_OF(group_keys) <= MAX_SECTION_KEYS, "seen[] too small");

/* engine.KEY is the load option KEY: for configs written before plugins declared their options, and for an
 * option named like a model key (lfm2-cuda's "parallel"). */
#define ENGINE_PREFIX "engine."

/* ------------------------------------------------------------------------------------------------------------
 * Parse state
 */

typedef enum section_kind {
    SEC_NONE,    /* before the first header */
    SEC_HOST,
    SEC_MODEL,
    SEC_GROUP,
    SEC_PEER,
    SEC_SELECTOR,
    SEC_MACROS,
    SEC_UNKNOWN, /* warned about at its header; its keys are skipped */
    SEC_IGNORED  /* a header with an error; its keys are skipped */
} section_kind;

/* Parse-time facts about a model or group that the checks at the end need. */
typedef struct section_meta {
    unsigned seen[MAX_SECTION_KEYS]; /* line of each key of the table, 0 if absent */
    bool dropped_line;               /* a line of the section was refused: missing keys may be on it */
    sy_config_list listed;           /* groups: the raw members list */
} section_meta;

typedef enum line_kind { LINE_OTHER, LINE_KEY, LINE_CONTINUATION } line_kind;

typedef struct parse_ctx {
    sy_config *cfg;
    const char *text;
    size_t len, pos;
    unsigned lineno;          /* of the line last handed to inih */
    bool stopped;             /* too many errors: reading stopped */

    /* What the reader predicts inih does with the current line. */
    bool had_key;             /* inih's prev_name is not empty: an indented line continues it */
    line_kind kind;
    bool handler_expected;    /* the current line should reach the handler exactly once */
    char last_key[256];       /* the key an indented line continues (inih truncates its copy) */
    char raw_section[256];    /* the current header's text as inih takes it (untrimmed; inih keeps 49 bytes) */

    /* The section being read. */
    section_kind section;
    char section_label[96];   /* "model.qwen", for messages */
    size_t index;             /* into models / groups */
    unsigned *seen;           /* the section's key lines, or NULL */
    unsigned host_seen[MAX_SECTION_KEYS];
    section_meta *model_meta; /* parallel to cfg->models */
    section_meta *group_meta; /* parallel to cfg->groups */
    unsigned peer_seen[SY_CONFIG_MAX_PEERS][COUNT_OF(peer_keys)]; /* each peer's key lines */
    unsigned selector_seen[SY_CONFIG_MAX_PEERS][COUNT_OF(selector_keys)];
    size_t n_group_meta;      /* groups with a section (implicit ones are added at the end) */
    size_t n_names;           /* model names + aliases so far */

    /* The key an indented line would continue; NULL when continuation lines are to be skipped. */
    const key_spec *last_spec;
    size_t last_raw; /* or the engine key of the model (an index into raw_options); SIZE_MAX when none */
} parse_ctx;

/* ------------------------------------------------------------------------------------------------------------
 * Diagnostics
 */

static void push_message(char ***list, size_t *count, size_t *dropped, char *message) {
    if (*count >= SY_CONFIG_MAX_DIAGNOSTICS) {
        (*dropped)++;
        free(message);
        return;
    }
    *list = sy_xrealloc(*list, (*count + 1) * sizeof **list);
    (*list)[(*count)++] = message;
}

/* "SOURCE:LINE: [SECTION] KEY: message"; LINE, SECTION and KEY are left out when 0 / NULL. */
static void vdiag(parse_ctx *c, bool is_error, unsigned line, const char *section, const char *key,
                  const char *fmt, va_list ap) {
    char text[640];
    vsnprintf(text, sizeof text, fmt, ap);
    char where[32] = "";
    if (line != 0) snprintf(where, sizeof where, ":%u", line);
    char buf[1280];
    if (section && key)
        snprintf(buf, sizeof buf, "%.400s%s: [%s] %.64s: %s", c->cfg->source, where, section, key, text);
    else if (section)
        snprintf(buf, sizeof buf, "%.400s%s: [%s]: %s", c->cfg->source, where, section, text);
    else
        snprintf(buf, sizeof buf, "%.400s%s: %s", c->cfg->source, where, text);
    sy_config *cfg = c->cfg;
    if (is_error)
        push_message(&cfg->errors, &cfg->n_errors, &cfg->n_errors_dropped, sy_strdup(buf));
    else
        push_message(&cfg->warnings, &cfg->n_warnings, &cfg->n_warnings_dropped, sy_strdup(buf));
}

__attribute__((format(printf, 6, 7))) static void diag(parse_ctx *c, bool is_error, unsigned line,
                                                       const char *section, const char *key,
                                                       const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vdiag(c, is_error, line, section, key, fmt, ap);
    va_end(ap);
}

/* An error or warning about `key` of the current section, on the current line. */
__attribute__((format(printf, 3, 4))) static void key_error(parse_ctx *c, const char *key, const char *fmt,
                                                            ...) {
    va_list ap;
    va_start(ap, fmt);
    vdiag(c, true, c->lineno, c->section == SEC_NONE ? NULL : c->section_label, key, fmt, ap);
    va_end(ap);
}

__attribute__((format(printf, 3, 4))) static void key_warning(parse_ctx *c, const char *key, const char *fmt,
                                                              ...) {
    va_list ap;
    va_start(ap, fmt);
    vdiag(c, false, c->lineno, c->section == SEC_NONE ? NULL : c->section_label, key, fmt, ap);
    va_end(ap);
}

/* `s` quoted for a message: at most 60 bytes, tabs shown as \t. Control characters never get this far. */
static const char *quoted(const char *s, char *buf, size_t size) {
    size_t o = 0, i = 0;
    buf[o++] = '\'';
    while (s[i] != '\0' && o + 6 < size && i < 60) {
        if (s[i] == '\t') {
            buf[o++] = '\\';
            buf[o++] = 't';
        } else {
            buf[o++] = s[i];
        }
        i++;
    }
    if (s[i] != '\0') {
        memcpy(buf + o, "...", 3);
        o += 3;
    }
    buf[o++] = '\'';
    buf[o] = '\0';
    return buf;
}
#define QUOTE_BUF 80

/* ------------------------------------------------------------------------------------------------------------
 * Value parsers
 */

static bool is_blank(char ch) { return ch == ' ' || ch == '\t'; }
static bool is_alnum(char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
}
static char lower(char ch) { return (ch >= 'A' && ch <= 'Z') ? (char)(ch - 'A' + 'a') : ch; }

static bool equal_nocase(const char *a, const char *b) {
    while (*a && *b && lower(*a) == lower(*b)) a++, b++;
    return *a == '\0' && *b == '\0';
}

/* Leading digits of s as a number; *end past them. -1 on no digits or overflow. */
static int parse_digits(const char *s, uint64_t *out, const char **end) {
    uint64_t v = 0;
    const char *p = s;
    while (*p >= '0' && *p <= '9') {
        unsigned d = (unsigned)(*p - '0');
        if (v > (UINT64_MAX - d) / 10) return -1;
        v = v * 10 + d;
        p++;
    }
    if (p == s) return -1;
    *out = v;
    *end = p;
    return 0;
}

static int parse_whole(const char *s, uint64_t *out) {
    const char *end;
    uint64_t v;
    if (parse_digits(s, &v, &end) != 0 || *end != '\0') return -1;
    *out = v;
    return 0;
}

int sy_config_parse_bool(const char *s, bool *out) {
    static const char *const yes[] = {"true", "yes", "on", "1"};
    static const char *const no[] = {"false", "no", "off", "0"};
    for (size_t i = 0; i < COUNT_OF(yes); i++) {
        if (equal_nocase(s, yes[i])) {
            *out = true;
            return 0;
        }
        if (equal_nocase(s, no[i])) {
            *out = false;
            return 0;
        }
    }
    return -1;
}

/* v * factor, or -1 when it overflows. */
static int scale(uint64_t v, uint64_t factor, uint64_t *out) {
    if (factor != 0 && v > UINT64_MAX / factor) return -1;
    *out = v * factor;
    return 0;
}

int sy_config_parse_size(const char *s, uint64_t *out) {
    const char *p;
    uint64_t v;
    if (parse_digits(s, &v, &p) != 0) return -1;
    unsigned shift = 0;
    switch (lower(*p)) {
    case 'k': shift = 10; p++; break;
    case 'm': shift = 20; p++; break;
    case 'g': shift = 30; p++; break;
    case 't': shift = 40; p++; break;
    default: break;
    }
    /* Units are binary whichever spelling: 8G = 8GB = 8GiB. */
    if (shift != 0 && lower(p[0]) == 'i' && lower(p[1]) == 'b')
        p += 2;
    else if (lower(p[0]) == 'b')
        p++;
    if (*p != '\0') return -1;
    return scale(v, (uint64_t)1 << shift, out);
}

int sy_config_parse_seconds(const char *s, uint64_t *out) {
    const char *p;
    uint64_t v;
    if (parse_digits(s, &v, &p) != 0) return -1;
    uint64_t factor = 1;
    switch (*p) {
    case '\0': break;
    case 's': p++; break;
    case 'm': factor = 60; p++; break;
    case 'h': factor = 3600; p++; break;
    case 'd': factor = 86400; p++; break;
    default: return -1;
    }
    if (*p != '\0') return -1;
    return scale(v, factor, out);
}

/* "1G" for 1<<30 and the like, else the plain number of bytes. */
static const char *size_text(uint64_t v, char *buf, size_t size) {
    static const char units[] = "KMGT";
    unsigned u = 0;
    uint64_t x = v;
    while (x != 0 && (x & 1023) == 0 && u < 4) {
        x >>= 10;
        u++;
    }
    if (u == 0)
        snprintf(buf, size, "%llu", (unsigned long long)v);
    else
        snprintf(buf, size, "%llu%c", (unsigned long long)x, units[u - 1]);
    return buf;
}

static bool is_ident(const char *s) {
    size_t n = 0;
    for (; s[n]; n++)
        if (!is_alnum(s[n]) && s[n] != '.' && s[n] != '_' && s[n] != '-') return false;
    return n > 0 && n <= 64;
}

/* Model, alias and group names: what OpenAI and Ollama clients send ("gpt-4o-mini", "qwen2.5:0.5b",
 * "library/llama3:latest"), starting with a letter or digit. */
static bool is_name(const char *s) {
    size_t n = 0;
    for (; s[n]; n++) {
        char ch = s[n];
        if (!is_alnum(ch) && !(n > 0 && strchr("._-:/@+", ch) != NULL)) return false;
    }
    return n > 0 && n <= SY_CONFIG_MAX_NAME_LEN;
}

static bool is_api_key(const char *s) {
    size_t n = 0;
    for (; s[n]; n++)
        if ((unsigned char)s[n] <= 0x20 || (unsigned char)s[n] >= 0x7f || s[n] == ',') return false;
    return n > 0 && n <= 256;
}

static bool is_host_name(const char *s, size_t n) {
    if (n == 0 || n > 253) return false;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (!is_alnum(ch) && ch != '-' && ch != '.' && ch != '_') return false;
    }
    return true;
}

/* "*", or an origin as browsers send it: scheme://host[:port] (an IPv6 host in brackets), nothing after. */
static bool is_origin(const char *s) {
    if (strcmp(s, "*") == 0) return true;
    const char *sep = strstr(s, "://");
    if (sep == NULL || sep == s || strlen(s) > 300) return false;
    for (const char *p = s; p < sep; p++)
        if (!is_alnum(*p) && *p != '+' && *p != '-' && *p != '.') return false;
    const char *host = sep + 3, *end = host + strlen(host);
    if (end > host && end[-1] == '/') end--;
    const char *port = NULL;
    if (*host == '[') {
        const char *close = memchr(host, ']', (size_t)(end - host));
        if (close == NULL || close == host + 1) return false;
        for (const char *p = host + 1; p < close; p++)
            if (!isxdigit((unsigned char)*p) && *p != ':' && *p != '.') return false;
        if (close + 1 < end && close[1] != ':') return false;
        if (close + 1 < end) port = close + 2;
    } else {
        const char *colon = memchr(host, ':', (size_t)(end - host));
        if (!is_host_name(host, (size_t)((colon ? colon : end) - host))) return false;
        if (colon) port = colon + 1;
    }
    if (port != NULL) {
        if (port >= end || end - port > 5) return false;
        for (const char *p = port; p < end; p++)
            if (*p < '0' || *p > '9') return false;
    }
    return true;
}

/* HOST:PORT where HOST is a host name, an IPv4 address or a bracketed IPv6 address. Returns NULL when fine,
 * else what is wrong. */
static const char *check_listen(const char *s) {
    const char *colon = strrchr(s, ':');
    if (colon == NULL) return "is not HOST:PORT";
    uint64_t port;
    if (parse_whole(colon + 1, &port) != 0 || port < 1 || port > 65535) return "has no port in 1..65535";
    size_t host_len = (size_t)(colon - s);
    if (host_len == 0) return "has no host (0.0.0.0:PORT listens on every interface)";
    if (s[0] == '[') {
        if (host_len < 3 || s[host_len - 1] != ']') return "has an unclosed '[' around an IPv6 address";
        for (size_t i = 1; i + 1 < host_len; i++) {
            char ch = lower(s[i]);
            if (!((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f') || ch == ':' || ch == '.'))
                return "has an invalid IPv6 address";
        }
        return NULL;
    }
    for (size_t i = 0; i < host_len; i++) {
        if (s[i] == ':') return "has an IPv6 address without brackets (write [::1]:8080)";
        if (!is_alnum(s[i]) && s[i] != '.' && s[i] != '-' && s[i] != '_') return "has an invalid host name";
    }
    return NULL;
}

/* ~ expansion, then resolution against the config's folder. Returns a malloc'd path, or NULL with the error
 * reported. */
static char *resolve_path(parse_ctx *c, const char *key, const char *value) {
    char q[QUOTE_BUF];
    if (value[0] == '\0') {
        key_error(c, key, "the path is empty");
        return NULL;
    }
    char *path;
    if (value[0] == '~') {
        if (value[1] != '\0' && value[1] != '/') {
            key_error(c, key, "%s: '~user' paths are not supported; write the full path", quoted(value, q, sizeof q));
            return NULL;
        }
        const char *home = getenv("HOME");
        if (home == NULL || home[0] != '/') {
            key_error(c, key, "%s: cannot expand '~' because HOME is not set to an absolute path",
                      quoted(value, q, sizeof q));
            return NULL;
        }
        size_t a = strlen(home), b = strlen(value + 1);
        while (a > 1 && home[a - 1] == '/') a--;
        if (a == 1 && b > 0) a = 0; /* HOME=/ : "~/x" is "/x" */
        path = sy_xmalloc(a + b + 1);
        memcpy(path, home, a);
        memcpy(path + a, value + 1, b + 1);
    } else if (value[0] == '/' || c->cfg->base_dir == NULL) {
        path = sy_strdup(value);
    } else {
        path = sy_path_join(c->cfg->base_dir, value);
    }
    if (strlen(path) > SY_CONFIG_MAX_PATH_LEN) {
        key_error(c, key, "the path is longer than %d bytes", SY_CONFIG_MAX_PATH_LEN);
        free(path);
        return NULL;
    }
    return path;
}

/* ------------------------------------------------------------------------------------------------------------
 * Storing values
 */

static void list_append(sy_config_list *list, const char *item, unsigned line) {
    list->items = sy_xrealloc(list->items, (list->count + 1) * sizeof *list->items);
    list->lines = sy_xrealloc(list->lines, (list->count + 1) * sizeof *list->lines);
    list->items[list->count] = sy_strdup(item);
    list->lines[list->count] = line;
    list->count++;
}

static void list_free(sy_config_list *list) {
    for (size_t i = 0; i < list->count; i++) free(list->items[i]);
    free(list->items);
    free(list->lines);
    memset(list, 0, sizeof *list);
}

static void set_string(char **field, char *value) {
    free(*field);
    *field = value;
}

static sy_option *find_option(sy_config_model *m, const char *key) {
    for (size_t i = 0; i < m->n_options; i++)
        if (strcmp(m->options[i].key, key) == 0) return &m->options[i];
    return NULL;
}

static bool add_option(parse_ctx *c, sy_config_model *m, const char *key, const char *value) {
    if (find_option(m, key) != NULL) {
        key_error(c, key, "the engine option '%s' is given twice", key);
        return false;
    }
    if (m->n_options >= SY_CONFIG_MAX_OPTIONS) {
        key_error(c, key, "more than %d engine options", SY_CONFIG_MAX_OPTIONS);
        return false;
    }
    m->options = sy_xrealloc(m->options, (m->n_options + 1) * sizeof *m->options);
    m->options[m->n_options].key = sy_strdup(key);
    m->options[m->n_options].value = sy_strdup(value);
    m->n_options++;
    return true;
}

/* defaults.KEY and set_params.KEY: true when key is one of them (handled, or reported); strip_params is a model
 * field, checked in check_models. */
static bool add_request_param(parse_ctx *c, sy_config_model *m, const char *key, const char *value) {
    sy_request_param_kind kind;
    const char *name;
    if (strncmp(key, SY_CONFIG_DEFAULTS_PREFIX, strlen(SY_CONFIG_DEFAULTS_PREFIX)) == 0)
        kind = SY_REQUEST_PARAM_DEFAULT, name = key + strlen(SY_CONFIG_DEFAULTS_PREFIX);
    else if (strncmp(key, SY_CONFIG_SET_PARAMS_PREFIX, strlen(SY_CONFIG_SET_PARAMS_PREFIX)) == 0)
        kind = SY_REQUEST_PARAM_SET, name = key + strlen(SY_CONFIG_SET_PARAMS_PREFIX);
    else
        return false;
    char why[512];
    if (!sy_request_param_check(name, value, why, sizeof why)) {
        key_error(c, key, "%s", why);
        return true;
    }
    for (size_t i = 0; i < m->n_request_params; i++) {
        const sy_config_request_param *rp = &m->request_params[i];
        if (rp->kind == kind && strcmp(rp->key, name) == 0) {
            key_error(c, key, "given twice (first at line %u)", rp->line);
            return true;
        }
    }
    m->request_params = sy_xrealloc(m->request_params, (m->n_request_params + 1) * sizeof *m->request_params);
    m->request_params[m->n_request_params++] =
        (sy_config_request_param){kind, sy_strdup(name), sy_strdup(value), c->lineno};
    return true;
}

/* An engine key of a model, kept as written until its plugin's options are known (sy_config_check_options). */
static void add_raw_option(parse_ctx *c, sy_config_model *m, const char *written, const char *key, const char *value) {
    for (size_t i = 0; i < m->n_raw_options; i++) {
        const sy_config_raw_option *r = &m->raw_options[i];
        if (strcmp(r->key, key) != 0) continue;
        if (strcmp(r->written, written) == 0)
            key_error(c, written, "given twice (first at line %u)", r->line);
        else
            key_error(c, written, "the engine option '%s' is given twice (first at line %u, as '%s')", key, r->line,
                      r->written);
        return;
    }
    if (m->n_raw_options >= SY_CONFIG_MAX_OPTIONS) {
        key_error(c, written, "more than %d engine options", SY_CONFIG_MAX_OPTIONS);
        return;
    }
    m->raw_options = sy_xrealloc(m->raw_options, (m->n_raw_options + 1) * sizeof *m->raw_options);
    sy_config_raw_option *r = &m->raw_options[m->n_raw_options];
    r->written = sy_strdup(written);
    r->key = sy_strdup(key);
    r->value = sy_strdup(value);
    r->line = c->lineno;
    r->continued = 0;
    r->n_items = 1;
    for (const char *p = value; *p; p++) r->n_items += *p == ',';
    c->last_raw = m->n_raw_options++;
    c->cfg->options_unchecked = true;
}

/* The struct the current section's keys go to. */
static void *section_object(parse_ctx *c) {
    switch (c->section) {
    case SEC_HOST: return &c->cfg->host;
    case SEC_MODEL: return &c->cfg->models[c->index];
    case SEC_GROUP: return &c->cfg->groups[c->index];
    case SEC_PEER: return &c->cfg->peers[c->index];
    case SEC_SELECTOR: return &c->cfg->selectors[c->index];
    default: return NULL;
    }
}

/* One item of a list value: checked, then appended to the list. */
static void add_list_item(parse_ctx *c, const key_spec *spec, void *obj, const char *item) {
    char q[QUOTE_BUF];
    sy_config_list *list = (sy_config_list *)((char *)obj + spec->offset);
    if (spec->type == V_KEY_LIST) {
        if (!is_api_key(item)) {
            /* The key itself is a secret: say what is wrong without echoing it. */
            key_error(c, spec->name, "item %zu is not an API key (1 to 256 printable characters, no spaces)",
                      list->count + 1);
            return;
        }
    } else if (spec->type == V_ORIGIN_LIST) {
        if (!is_origin(item)) {
            key_error(c, spec->name, "%s is not an origin (* or scheme://host[:port], such as http://localhost:3000)",
                      quoted(item, q, sizeof q));
            return;
        }
    } else if (spec->type == V_HOST_LIST) {
        if (strcmp(item, "*") != 0 && !is_host_name(item, strlen(item))) {
            key_error(c, spec->name, "%s is not a host name (* for any, or a name such as myhost.lan)",
                      quoted(item, q, sizeof q));
            return;
        }
    } else if (!is_name(item)) {
        if (strchr(item, '=') != NULL)
            key_error(c, spec->name,
                      "%s is not a name; this indented line continues '%s' (remove the indentation to start a "
                      "new key)",
                      quoted(item, q, sizeof q), spec->name);
        else
            key_error(c, spec->name,
                      "%s is not a name (letters, digits and . _ - : / @ +, starting with a letter or digit, "
                      "at most %d)",
                      quoted(item, q, sizeof q), SY_CONFIG_MAX_NAME_LEN);
        return;
    }
    if (spec->offset == MODEL_FIELD(aliases) && c->section == SEC_MODEL) {
        if (c->n_names >= SY_CONFIG_MAX_NAMES) {
            key_error(c, spec->name, "more than %d model names and aliases in one config", SY_CONFIG_MAX_NAMES);
            return;
        }
        c->n_names++;
    }
    list_append(list, item, c->lineno);
}

/* Items a list key holds so far. */
static size_t list_item_count(const key_spec *spec, void *obj) {
    return ((sy_config_list *)((char *)obj + spec->offset))->count;
}

static void set_list(parse_ctx *c, const key_spec *spec, void *obj, const char *value) {
    size_t len = strlen(value);
    char *copy = sy_xmalloc(len + 1);
    memcpy(copy, value, len + 1);
    char *p = copy;
    while (p != NULL) {
        char *comma = strchr(p, ',');
        if (comma != NULL) *comma = '\0';
        char *start = p, *end = p + strlen(p);
        while (is_blank(*start)) start++;
        while (end > start && is_blank(end[-1])) *--end = '\0';
        if (*start != '\0') { /* empty items ("a,,b", a trailing comma) are skipped */
            size_t count = list_item_count(spec, obj);
            if (count >= SY_CONFIG_MAX_LIST_ITEMS) {
                key_error(c, spec->name, "more than %d items", SY_CONFIG_MAX_LIST_ITEMS);
                c->last_spec = NULL; /* its further continuation lines are skipped: one message is enough */
                break;
            }
            add_list_item(c, spec, obj, start);
        }
        p = comma != NULL ? comma + 1 : NULL;
    }
    free(copy);
}

/* NAME=VALUE items, for env: a comma followed by NAME= starts the next item, so values may hold commas
 * (CUDA_VISIBLE_DEVICES=0,1). */
static bool env_name_at(const char *p, size_t *len) {
    size_t n = 0;
    while (is_blank(*p)) p++, n++;
    size_t start = n;
    if (!((p[0] >= 'A' && p[0] <= 'Z') || (p[0] >= 'a' && p[0] <= 'z') || p[0] == '_')) return false;
    while (is_alnum(p[n - start]) || p[n - start] == '_') n++;
    if (p[n - start] != '=') return false;
    *len = n;
    return true;
}

static void set_env_list(parse_ctx *c, const key_spec *spec, void *obj, const char *value) {
    char q[QUOTE_BUF];
    sy_config_list *list = (sy_config_list *)((char *)obj + spec->offset);
    const char *p = value;
    while (*p != '\0') {
        size_t name_len;
        if (!env_name_at(p, &name_len)) {
            key_error(c, spec->name, "%s is not NAME=VALUE", quoted(p, q, sizeof q));
            return;
        }
        const char *end = p + name_len;
        for (;;) {
            const char *comma = strchr(end, ',');
            size_t next;
            if (comma == NULL) {
                end += strlen(end);
                break;
            }
            if (env_name_at(comma + 1, &next)) {
                end = comma;
                break;
            }
            end = comma + 1;
        }
        while (is_blank(*p)) p++;
        size_t n = (size_t)(end - p);
        while (n > 0 && is_blank(p[n - 1])) n--;
        if (list->count >= SY_CONFIG_MAX_LIST_ITEMS) {
            key_error(c, spec->name, "more than %d items", SY_CONFIG_MAX_LIST_ITEMS);
            return;
        }
        char *item = sy_xmalloc(n + 1);
        memcpy(item, p, n);
        item[n] = '\0';
        list_append(list, item, c->lineno);
        free(item);
        p = *end == ',' ? end + 1 : end;
    }
}

static void set_number(parse_ctx *c, const key_spec *spec, void *obj, const char *value) {
    char q[QUOTE_BUF], lo[32], hi[32];
    uint64_t v;
    int rc;
    const char *what;
    switch (spec->type) {
    case V_SECONDS:
        rc = sy_config_parse_seconds(value, &v);
        what = "is not a number of seconds";
        break;
    case V_SIZE:
        rc = sy_config_parse_size(value, &v);
        what = "is not a size (a whole number with an optional K, M, G or T suffix)";
        break;
    default:
        rc = parse_whole(value, &v);
        what = "is not a whole number";
        break;
    }
    if (rc != 0) {
        key_error(c, spec->name, "%s %s", quoted(value, q, sizeof q), what);
        return;
    }
    if (v < spec->min || v > spec->max) {
        if (spec->type == V_SIZE)
            key_error(c, spec->name, "%s is out of range (%s..%s bytes)", quoted(value, q, sizeof q),
                      size_text(spec->min, lo, sizeof lo), size_text(spec->max, hi, sizeof hi));
        else
            key_error(c, spec->name, "%s is out of range (%llu..%llu%s)", quoted(value, q, sizeof q),
                      (unsigned long long)spec->min, (unsigned long long)spec->max,
                      spec->type == V_SECONDS ? " seconds" : "");
        return;
    }
    if (spec->type == V_SIZE) {
        *(uint64_t *)((char *)obj + spec->offset) = v;
    } else {
        *(uint32_t *)((char *)obj + spec->offset) = (uint32_t)v;
    }
}

static void set_value(parse_ctx *c, const key_spec *spec, void *obj, const char *value) {
    char q[QUOTE_BUF];
    char *field_addr = (char *)obj + spec->offset;
    switch (spec->type) {
    case V_BOOL: {
        bool b;
        if (sy_config_parse_bool(value, &b) != 0) {
            key_error(c, spec->name, "%s is not true or false", quoted(value, q, sizeof q));
            return;
        }
        *(bool *)field_addr = b;
        return;
    }
    case V_U32:
    case V_SECONDS:
    case V_SIZE: set_number(c, spec, obj, value); return;
    case V_IDENT:
        if (!is_ident(value)) {
            key_error(c, spec->name, "%s is not a name (1 to 64 letters, digits, '.', '_' or '-')",
                      quoted(value, q, sizeof q));
            return;
        }
        set_string((char **)field_addr, sy_strdup(value));
        return;
    case V_NAME:
        if (!is_name(value)) {
            key_error(c, spec->name,
                      "%s is not a name (letters, digits and . _ - : / @ +, starting with a letter or digit, "
                      "at most %d)",
                      quoted(value, q, sizeof q), SY_CONFIG_MAX_NAME_LEN);
            return;
        }
        set_string((char **)field_addr, sy_strdup(value));
        return;
    case V_PATH: {
        char *path = resolve_path(c, spec->name, value);
        if (path != NULL) set_string((char **)field_addr, path);
        return;
    }
    case V_LISTEN: {
        const char *why = check_listen(value);
        if (why != NULL) {
            key_error(c, spec->name, "%s %s", quoted(value, q, sizeof q), why);
            return;
        }
        set_string((char **)field_addr, sy_strdup(value));
        return;
    }
    case V_LOG_LEVEL: {
        sy_log_level level;
        if (sy_log_parse_level(value, &level) != 0) {
            key_error(c, spec->name, "%s is not a log level (error, warn, info or debug)",
                      quoted(value, q, sizeof q));
            return;
        }
        c->cfg->host.log_level = level;
        c->cfg->host.log_level_set = true;
        return;
    }
    case V_DRAFT: {
        sy_config_model *m = obj;
        if (strcmp(value, "none") == 0) {
            m->draft = SY_CONFIG_DRAFT_NONE;
        } else if (strcmp(value, "ngram") == 0) {
            m->draft = SY_CONFIG_DRAFT_NGRAM;
        } else if (strncmp(value, "model:", 6) == 0 && is_name(value + 6)) {
            m->draft = SY_CONFIG_DRAFT_MODEL;
            set_string(&m->draft_model, sy_strdup(value + 6)); /* resolved once every model is known */
        } else {
            key_error(c, spec->name, "%s is not a drafter (none, ngram or model:NAME)", quoted(value, q, sizeof q));
        }
        return;
    }
    case V_NAME_LIST:
    case V_KEY_LIST:
    case V_ORIGIN_LIST:
    case V_HOST_LIST: set_list(c, spec, obj, value); return;
    case V_TEXT:
        if (value[0] == '\0') {
            key_error(c, spec->name, "the value is empty");
            return;
        }
        set_string((char **)field_addr, sy_strdup(value));
        return;
    case V_ENV_LIST: set_env_list(c, spec, obj, value); return;
    case V_STRATEGY: {
        sy_config_selector *sel = obj;
        if (strcmp(value, "warm") == 0) sel->strategy = SY_SELECT_WARM;
        else if (strcmp(value, "pin") == 0) sel->strategy = SY_SELECT_PIN;
        else if (strcmp(value, "spillover") == 0) sel->strategy = SY_SELECT_SPILLOVER;
        else key_error(c, spec->name, "%s is not a strategy (warm, pin or spillover)", quoted(value, q, sizeof q));
        return;
    }
    case V_JSON_OBJECT: /* may continue on indented lines: checked once the section is read (check_models) */
        set_string((char **)field_addr, sy_strdup(value));
        return;
    }
}

/* ------------------------------------------------------------------------------------------------------------
 * Sections
 */

static void model_defaults(sy_config_model *m) {
    memset(m, 0, sizeof *m);
    m->parallel = 1;
    m->draft_max = 16;
    m->draft_min = 0;
    m->persist_on_unload = true;
    m->max_queue = 64;
    m->queue_timeout_s = 600;
    m->prefix_cache_tokens = SY_CONFIG_DEFAULT_PREFIX_CACHE_TOKENS;
    m->connect_timeout_s = 10;
    m->header_timeout_s = 600;
    m->stop_grace_s = 5;
}

static void group_defaults(sy_config_group *g) {
    memset(g, 0, sizeof *g);
    g->swap = true;
    g->exclusive = true;
    g->persistent = false;
}

static size_t find_group_index(const sy_config *cfg, const char *name) {
    for (size_t i = 0; i < cfg->n_groups; i++)
        if (strcmp(cfg->groups[i].name, name) == 0) return i;
    return SIZE_MAX;
}

static void begin_section(parse_ctx *c, const char *raw, size_t raw_len) {
    sy_config *cfg = c->cfg;
    char name[256];
    while (raw_len > 0 && is_blank(*raw)) raw++, raw_len--;
    while (raw_len > 0 && is_blank(raw[raw_len - 1])) raw_len--;
    if (raw_len >= sizeof name) raw_len = sizeof name - 1; /* lines are shorter than this anyway */
    memcpy(name, raw, raw_len);
    name[raw_len] = '\0';

    c->section = SEC_IGNORED;
    c->seen = NULL;
    c->last_spec = NULL;
    c->last_raw = SIZE_MAX;
    snprintf(c->section_label, sizeof c->section_label, "%.80s%s", name, raw_len > 80 ? "..." : "");
    const unsigned line = c->lineno;
    char q[QUOTE_BUF];

    if (strcmp(name, "host") == 0) {
        if (cfg->host.line != 0) {
            diag(c, true, line, c->section_label, NULL, "the section appears twice (first at line %u)",
                 cfg->host.line);
            return;
        }
        cfg->host.line = line;
        c->section = SEC_HOST;
        c->seen = c->host_seen;
        return;
    }
    if (strncmp(name, "model.", 6) == 0) {
        const char *model = name + 6;
        if (!is_name(model)) {
            diag(c, true, line, c->section_label, NULL,
                 "%s is not a model name (letters, digits and . _ - : / @ +, starting with a letter or digit, "
                 "at most %d)",
                 quoted(model, q, sizeof q), SY_CONFIG_MAX_NAME_LEN);
            return;
        }
        for (size_t i = 0; i < cfg->n_models; i++) {
            if (strcmp(cfg->models[i].name, model) == 0) {
                diag(c, true, line, c->section_label, NULL, "model '%s' is defined twice (first at line %u)",
                     model, cfg->models[i].line);
                return;
            }
        }
        if (cfg->n_models >= SY_CONFIG_MAX_MODELS) {
            diag(c, true, line, c->section_label, NULL, "more than %d models", SY_CONFIG_MAX_MODELS);
            return;
        }
        if (c->n_names >= SY_CONFIG_MAX_NAMES) {
            diag(c, true, line, c->section_label, NULL, "more than %d model names and aliases in one config",
                 SY_CONFIG_MAX_NAMES);
            return;
        }
        c->n_names++;
        cfg->models = sy_xrealloc(cfg->models, (cfg->n_models + 1) * sizeof *cfg->models);
        c->model_meta = sy_xrealloc(c->model_meta, (cfg->n_models + 1) * sizeof *c->model_meta);
        sy_config_model *m = &cfg->models[cfg->n_models];
        model_defaults(m);
        m->name = sy_strdup(model);
        m->line = line;
        memset(&c->model_meta[cfg->n_models], 0, sizeof *c->model_meta);
        c->index = cfg->n_models++;
        c->section = SEC_MODEL;
        c->seen = c->model_meta[c->index].seen;
        return;
    }
    if (strncmp(name, "group.", 6) == 0) {
        const char *group = name + 6;
        if (!is_name(group)) {
            diag(c, true, line, c->section_label, NULL,
                 "%s is not a group name (letters, digits and . _ - : / @ +, starting with a letter or digit, "
                 "at most %d)",
                 quoted(group, q, sizeof q), SY_CONFIG_MAX_NAME_LEN);
            return;
        }
        size_t existing = find_group_index(cfg, group);
        if (existing != SIZE_MAX) {
            diag(c, true, line, c->section_label, NULL, "group '%s' is defined twice (first at line %u)", group,
                 cfg->groups[existing].line);
            return;
        }
        if (cfg->n_groups >= SY_CONFIG_MAX_GROUPS) {
            diag(c, true, line, c->section_label, NULL, "more than %d groups", SY_CONFIG_MAX_GROUPS);
            return;
        }
        cfg->groups = sy_xrealloc(cfg->groups, (cfg->n_groups + 1) * sizeof *cfg->groups);
        c->group_meta = sy_xrealloc(c->group_meta, (cfg->n_groups + 1) * sizeof *c->group_meta);
        sy_config_group *g = &cfg->groups[cfg->n_groups];
        group_defaults(g);
        g->name = sy_strdup(group);
        g->line = line;
        memset(&c->group_meta[cfg->n_groups], 0, sizeof *c->group_meta);
        c->index = cfg->n_groups++;
        c->n_group_meta = cfg->n_groups;
        c->section = SEC_GROUP;
        c->seen = c->group_meta[c->index].seen;
        return;
    }
    if (strcmp(name, "macros") == 0) {
        c->section = SEC_MACROS;
        return;
    }
    if (strncmp(name, "peer.", 5) == 0) {
        const char *peer = name + 5;
        if (!is_name(peer)) {
            diag(c, true, line, c->section_label, NULL, "%s is not a peer name", quoted(peer, q, sizeof q));
            return;
        }
        for (size_t i = 0; i < cfg->n_peers; i++)
            if (strcmp(cfg->peers[i].name, peer) == 0) {
                diag(c, true, line, c->section_label, NULL, "peer '%s' is defined twice (first at line %u)", peer,
                     cfg->peers[i].line);
                return;
            }
        if (cfg->n_peers >= SY_CONFIG_MAX_PEERS) {
            diag(c, true, line, c->section_label, NULL, "more than %d peers", SY_CONFIG_MAX_PEERS);
            return;
        }
        cfg->peers = sy_xrealloc(cfg->peers, (cfg->n_peers + 1) * sizeof *cfg->peers);
        sy_config_peer *p = &cfg->peers[cfg->n_peers];
        memset(p, 0, sizeof *p);
        p->name = sy_strdup(peer);
        p->line = line;
        memset(c->peer_seen[cfg->n_peers], 0, sizeof c->peer_seen[cfg->n_peers]);
        c->index = cfg->n_peers++;
        c->section = SEC_PEER;
        c->seen = c->peer_seen[c->index];
        return;
    }
    if (strncmp(name, "selector.", 9) == 0) {
        const char *sname = name + 9;
        if (!is_name(sname)) {
            diag(c, true, line, c->section_label, NULL, "%s is not a selector name", quoted(sname, q, sizeof q));
            return;
        }
        for (size_t i = 0; i < cfg->n_selectors; i++)
            if (strcmp(cfg->selectors[i].name, sname) == 0) {
                diag(c, true, line, c->section_label, NULL, "selector '%s' is defined twice (first at line %u)",
                     sname, cfg->selectors[i].line);
                return;
            }
        if (cfg->n_selectors >= SY_CONFIG_MAX_PEERS) {
            diag(c, true, line, c->section_label, NULL, "more than %d selectors", SY_CONFIG_MAX_PEERS);
            return;
        }
        cfg->selectors = sy_xrealloc(cfg->selectors, (cfg->n_selectors + 1) * sizeof *cfg->selectors);
        sy_config_selector *sel = &cfg->selectors[cfg->n_selectors];
        memset(sel, 0, sizeof *sel);
        sel->name = sy_strdup(sname);
        sel->spillover = 1;
        sel->line = line;
        memset(c->selector_seen[cfg->n_selectors], 0, sizeof c->selector_seen[cfg->n_selectors]);
        c->index = cfg->n_selectors++;
        c->section = SEC_SELECTOR;
        c->seen = c->selector_seen[c->index];
        return;
    }
    diag(c, false, line, NULL, NULL,
         "unknown section [%s] is ignored (known: [host], [model.NAME], [group.NAME], [peer.NAME], "
         "[selector.NAME], [macros])",
         c->section_label);
    c->section = SEC_UNKNOWN;
}

/* A "key = value" line of the current section. */
static void on_key(parse_ctx *c, const char *key, const char *value) {
    char q[QUOTE_BUF];
    c->last_spec = NULL;
    c->last_raw = SIZE_MAX;
    if (key[0] == '\0') {
        key_error(c, NULL, "a key name is missing before '='");
        return;
    }
    const key_spec *specs;
    size_t n_specs;
    switch (c->section) {
    case SEC_NONE:
        key_warning(c, NULL, "%s is outside of any section and is ignored", quoted(key, q, sizeof q));
        return;
    case SEC_UNKNOWN:
    case SEC_IGNORED: return;
    case SEC_HOST: specs = host_keys, n_specs = COUNT_OF(host_keys); break;
    case SEC_MODEL: specs = model_keys, n_specs = COUNT_OF(model_keys); break;
    case SEC_GROUP: specs = group_keys, n_specs = COUNT_OF(group_keys); break;
    case SEC_PEER: specs = peer_keys, n_specs = COUNT_OF(peer_keys); break;
    case SEC_SELECTOR: specs = selector_keys, n_specs = COUNT_OF(selector_keys); break;
    case SEC_MACROS: {
        if (!is_ident(key) || strchr(key, '.') != NULL) {
            key_error(c, key, "%s is not a macro name (letters, digits, '_' or '-')", quoted(key, q, sizeof q));
            return;
        }
        static const char *const reserved[] = {"PORT", "MODEL_ID", "PID"};
        for (size_t i = 0; i < COUNT_OF(reserved); i++)
            if (strcmp(key, reserved[i]) == 0) {
                key_error(c, key, "${%s} is set by switchyard; choose another name", key);
                return;
            }
        for (size_t i = 0; i < c->cfg->macro_names.count; i++)
            if (strcmp(c->cfg->macro_names.items[i], key) == 0) {
                key_error(c, key, "given twice (first at line %u)", c->cfg->macro_names.lines[i]);
                return;
            }
        if (c->cfg->macro_names.count >= SY_CONFIG_MAX_LIST_ITEMS) {
            key_error(c, key, "more than %d macros", SY_CONFIG_MAX_LIST_ITEMS);
            return;
        }
        list_append(&c->cfg->macro_names, key, c->lineno);
        list_append(&c->cfg->macro_values, value, c->lineno);
        return;
    }
    default: return;
    }
    void *obj = section_object(c);
    for (size_t i = 0; i < n_specs; i++) {
        if (strcmp(specs[i].name, key) != 0) continue;
        if (c->seen[i] != 0) {
            key_error(c, key, "given twice (first at line %u)", c->seen[i]);
            return; /* and its continuation lines are skipped */
        }
        c->seen[i] = c->lineno;
        c->last_spec = &specs[i];
        set_value(c, &specs[i], obj, value);
        /* The HTTP server runs one thread per connection: a thread count has nothing to set. */
        if (c->section == SEC_HOST && strcmp(key, "http_threads") == 0)
            key_warning(c, key, "is deprecated and ignored (the server runs one thread per connection); "
                                "max_connections bounds the connections");
        return;
    }
    if (c->section == SEC_MODEL && add_request_param(c, obj, key, value)) return;
    if (c->section == SEC_MODEL) {
        const bool prefixed = strncmp(key, ENGINE_PREFIX, strlen(ENGINE_PREFIX)) == 0;
        const char *option = prefixed ? key + strlen(ENGINE_PREFIX) : key;
        if (!is_ident(option)) {
            key_error(c, key, "%s is not an option name (1 to 64 letters, digits, '.', '_' or '-')",
                      quoted(option, q, sizeof q));
            return;
        }
        add_raw_option(c, obj, key, option, value);
        return;
    }
    key_warning(c, key, "unknown key is ignored");
}

/* An indented line after a key: more of that key's value. */
static void on_continuation(parse_ctx *c, const char *value) {
    const key_spec *spec = c->last_spec;
    if (spec == NULL && c->last_raw != SIZE_MAX) {
        /* Whether the option takes a list is known once its plugin is asked: kept, checked then. */
        sy_config_raw_option *r = &c->cfg->models[c->index].raw_options[c->last_raw];
        if (*value == '\0') return;
        size_t a = strlen(r->value), b = strlen(value), items = 1;
        for (const char *p = value; *p; p++) items += *p == ',';
        if (r->n_items + items > SY_CONFIG_MAX_LIST_ITEMS) {
            key_error(c, r->written, "more than %d items", SY_CONFIG_MAX_LIST_ITEMS);
            c->last_raw = SIZE_MAX; /* one message is enough */
            return;
        }
        char *joined = sy_xmalloc(a + b + 2);
        memcpy(joined, r->value, a);
        joined[a] = ',';
        memcpy(joined + a + 1, value, b + 1);
        free(r->value);
        r->value = joined;
        r->n_items += items;
        if (r->continued == 0) r->continued = c->lineno;
        return;
    }
    if (spec == NULL) return; /* the key was unknown, repeated or in a skipped section: already reported */
    if (spec->type == V_NAME_LIST || spec->type == V_KEY_LIST || spec->type == V_ORIGIN_LIST ||
        spec->type == V_HOST_LIST) {
        set_list(c, spec, section_object(c), value);
        return;
    }
    if (spec->type == V_ENV_LIST) {
        set_env_list(c, spec, section_object(c), value);
        return;
    }
    if (spec->type == V_TEXT || spec->type == V_JSON_OBJECT) {
        char **field = (char **)((char *)section_object(c) + spec->offset);
        if (*field == NULL || *value == '\0') return; /* the first line was refused: reported there */
        size_t a = strlen(*field), b = strlen(value);
        /* A shell-style line continuation: the lines are joined anyway. */
        while (a > 0 && ((*field)[a - 1] == '\\' || is_blank((*field)[a - 1]))) (*field)[--a] = '\0';
        if (a + b + 1 > SY_CONFIG_MAX_TEXT_LEN) {
            key_error(c, spec->name, "the value is longer than %d bytes", SY_CONFIG_MAX_TEXT_LEN);
            c->last_spec = NULL;
            return;
        }
        char *joined = sy_xmalloc(a + b + 2);
        memcpy(joined, *field, a);
        joined[a] = ' ';
        memcpy(joined + a + 1, value, b + 1);
        set_string(field, joined);
        return;
    }
    key_error(c, spec->name,
              "this indented line continues the value of '%s', which takes a single value (remove the "
              "indentation to start a new key)",
              spec->name);
    c->last_spec = NULL; /* one message is enough */
}

/* ------------------------------------------------------------------------------------------------------------
 * The line reader and inih's handler
 */

/* inih's scan for one of `chars` or an inline comment (';' after whitespace); returns the stop position. */
static const char *find_chars_or_comment(const char *s, const char *end, const char *chars) {
    bool was_space = false;
    while (s < end && strchr(chars, *s) == NULL && !(was_space && *s == ';')) {
        was_space = is_blank(*s);
        s++;
    }
    return s;
}

/* Predict what inih does with the line buf[0..n), and act on section headers. Mirrors inih's rules: a UTF-8
 * BOM on line 1 is skipped; ';' or '#' first starts a comment; an indented non-empty line after a key with a
 * name continues that key; '[' starts a header closed by ']'; anything else must hold '=' or ':'. */
static void classify_line(parse_ctx *c, const char *buf, size_t n) {
    const char *end = buf + n;
    const char *start = buf;
    if (c->lineno == 1 && n >= 3 && (unsigned char)buf[0] == 0xEF && (unsigned char)buf[1] == 0xBB &&
        (unsigned char)buf[2] == 0xBF)
        start += 3;
    while (start < end && is_blank(*start)) start++;
    while (end > start && is_blank(end[-1])) end--;
    c->kind = LINE_OTHER;
    if (start == end || *start == ';' || *start == '#') return;
    if (c->had_key && start > buf) {
        c->kind = LINE_CONTINUATION;
        return;
    }
    if (*start == '[') {
        const char *close = find_chars_or_comment(start + 1, end, "]");
        if (close < end && *close == ']') {
            size_t raw_len = (size_t)(close - start - 1);
            if (raw_len >= sizeof c->raw_section) raw_len = sizeof c->raw_section - 1;
            memcpy(c->raw_section, start + 1, raw_len);
            c->raw_section[raw_len] = '\0';
            begin_section(c, start + 1, (size_t)(close - start - 1));
            c->had_key = false;
        } else {
            diag(c, true, c->lineno, NULL, NULL, "'[' opens a section name that no ']' closes");
        }
        return;
    }
    const char *sep = find_chars_or_comment(start, end, "=:");
    if (sep < end && (*sep == '=' || *sep == ':')) {
        const char *key_end = sep;
        while (key_end > start && is_blank(key_end[-1])) key_end--;
        size_t key_len = (size_t)(key_end - start);
        if (key_len >= sizeof c->last_key) key_len = sizeof c->last_key - 1;
        memcpy(c->last_key, start, key_len);
        c->last_key[key_len] = '\0';
        c->had_key = key_len > 0;
        c->kind = LINE_KEY;
        return;
    }
    diag(c, true, c->lineno, NULL, NULL, "expected 'key = value', a [section] header or a ; comment");
}

/* A line refused before inih sees it: the error is reported, inih gets a comment in its place. */
static char *drop_line(parse_ctx *c, char *buf) {
    if (c->section == SEC_MODEL) c->model_meta[c->index].dropped_line = true;
    memcpy(buf, ";\n", 3);
    return buf;
}

/* inih's fgets: hands out one line of the text at a time. */
static char *read_line(char *buf, int size, void *stream) {
    parse_ctx *c = stream;
    if (c->handler_expected) {
        /* The previous line was predicted to reach the handler and did not: inih reads differently than
         * classify_line assumes. */
        diag(c, true, c->lineno, NULL, NULL, "internal error: the INI reader is out of step with inih");
        c->handler_expected = false;
    }
    if (c->pos >= c->len || c->stopped || size < 4) return NULL;
    if (c->cfg->n_errors >= SY_CONFIG_MAX_DIAGNOSTICS - 1) {
        diag(c, true, c->lineno, NULL, NULL, "too many errors; the rest of the file is not read");
        c->stopped = true;
        return NULL;
    }
    const char *line = c->text + c->pos;
    size_t avail = c->len - c->pos;
    const char *nl = memchr(line, '\n', avail);
    size_t n = nl != NULL ? (size_t)(nl - line) : avail;
    c->pos += n + (nl != NULL);
    c->lineno++;
    c->kind = LINE_OTHER;
    if (n > 0 && line[n - 1] == '\r') n--;

    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)line[i];
        if ((ch < 0x20 && ch != '\t') || ch == 0x7f) {
            diag(c, true, c->lineno, NULL, NULL,
                 "byte 0x%02x at column %zu is a control character; a config file is text", ch, i + 1);
            return drop_line(c, buf);
        }
    }
    /* Room for the line, its '\n' and the NUL. Longer lines inih would split into separate lines. */
    size_t room = (size_t)size - 2;
    if (n > room) {
        diag(c, true, c->lineno, NULL, NULL,
             "the line is %zu bytes long; the limit is %zu (a list can continue on indented lines)", n, room);
        return drop_line(c, buf);
    }
    memcpy(buf, line, n);
    buf[n] = '\n';
    buf[n + 1] = '\0';
    classify_line(c, buf, n);
    c->handler_expected = c->kind != LINE_OTHER;
    return buf;
}

/* Whether inih's view of the line (its section, and the key it reports) is what classify_line predicted.
 * inih keeps the first 49 bytes of section names and of the key it continues. */
static bool agrees_with_inih(const parse_ctx *c, const char *section, const char *name) {
    const size_t kept = 49;
    size_t raw_len = strlen(c->raw_section);
    size_t want = raw_len < kept ? raw_len : kept;
    if (strlen(section) != want || memcmp(section, c->raw_section, want) != 0) return false;
    if (c->kind == LINE_KEY) return strlen(c->last_key) == sizeof c->last_key - 1 || strcmp(name, c->last_key) == 0;
    size_t key_len = strlen(c->last_key);
    want = key_len < kept ? key_len : kept;
    return want > 0 && strlen(name) == want && memcmp(name, c->last_key, want) == 0;
}

static int on_pair(void *user, const char *section, const char *name, const char *value) {
    parse_ctx *c = user;
    /* Sections and keys are taken from classify_line (inih truncates them); inih's are only compared. */
    if (!c->handler_expected || !agrees_with_inih(c, section, name)) {
        diag(c, true, c->lineno, NULL, NULL, "internal error: the INI reader is out of step with inih");
        c->handler_expected = false;
        return 1;
    }
    c->handler_expected = false;
    if (c->kind == LINE_CONTINUATION)
        on_continuation(c, value);
    else
        on_key(c, name, value);
    return 1; /* errors are collected here; inih's own count would only repeat them */
}

/* ------------------------------------------------------------------------------------------------------------
 * Whole-config checks, once every section is read
 */

typedef struct name_entry {
    const char *name;
    size_t model;
    unsigned line;
    bool is_alias;
    size_t order;
} name_entry;

static int compare_names(const void *pa, const void *pb) {
    const name_entry *a = pa, *b = pb;
    int d = strcmp(a->name, b->name);
    if (d != 0) return d;
    if (a->line != b->line) return a->line < b->line ? -1 : 1;
    return a->order < b->order ? -1 : (a->order > b->order ? 1 : 0);
}

/* Every model name and alias must name one model. */
static void check_names(parse_ctx *c) {
    sy_config *cfg = c->cfg;
    size_t total = cfg->n_models;
    for (size_t i = 0; i < cfg->n_models; i++) total += cfg->models[i].aliases.count;
    if (total == 0) return;
    name_entry *entries = sy_xmalloc(total * sizeof *entries);
    size_t n = 0;
    for (size_t i = 0; i < cfg->n_models; i++) {
        const sy_config_model *m = &cfg->models[i];
        entries[n] = (name_entry){m->name, i, m->line, false, n};
        n++;
        for (size_t j = 0; j < m->aliases.count; j++) {
            entries[n] = (name_entry){m->aliases.items[j], i, m->aliases.lines[j], true, n};
            n++;
        }
    }
    qsort(entries, n, sizeof *entries, compare_names);
    for (size_t i = 1; i < n; i++) {
        const name_entry *later = &entries[i];
        if (strcmp(later->name, entries[i - 1].name) != 0) continue;
        size_t first_i = i - 1;
        while (first_i > 0 && strcmp(entries[first_i - 1].name, later->name) == 0) first_i--;
        const name_entry *first = &entries[first_i];
        const sy_config_model *later_m = &cfg->models[later->model];
        const sy_config_model *first_m = &cfg->models[first->model];
        char label[160];
        snprintf(label, sizeof label, "model.%s", later_m->name);
        if (later->model == first->model) {
            /* Harmless: the name leads to the same model. */
            diag(c, false, later->line, label, "aliases", "'%s' is %s", later->name,
                 first->is_alias ? "listed twice" : "the model's own name");
            continue;
        }
        if (later->is_alias)
            diag(c, true, later->line, label, "aliases", "'%s' is already %s of model '%s' (line %u)", later->name,
                 first->is_alias ? "an alias" : "the name", first_m->name, first->line);
        else
            diag(c, true, later->line, label, NULL, "the name '%s' is already an alias of model '%s' (line %u)",
                 later->name, first_m->name, first->line);
    }
    free(entries);
}

static size_t find_model_index(const sy_config *cfg, const char *name_or_alias) {
    for (size_t i = 0; i < cfg->n_models; i++)
        if (strcmp(cfg->models[i].name, name_or_alias) == 0) return i;
    for (size_t i = 0; i < cfg->n_models; i++) {
        const sy_config_list *a = &cfg->models[i].aliases;
        for (size_t j = 0; j < a->count; j++)
            if (strcmp(a->items[j], name_or_alias) == 0) return i;
    }
    return SIZE_MAX;
}

/* find_model_index, then as Ollama names models ("NAME" == "NAME:latest"). */
static size_t find_model_index_loose(const sy_config *cfg, const char *name_or_alias) {
    size_t i = find_model_index(cfg, name_or_alias);
    if (i != SIZE_MAX) return i;
    for (i = 0; i < cfg->n_models; i++) {
        if (sy_model_name_equal(cfg->models[i].name, name_or_alias)) return i;
        const sy_config_list *a = &cfg->models[i].aliases;
        for (size_t j = 0; j < a->count; j++)
            if (sy_model_name_equal(a->items[j], name_or_alias)) return i;
    }
    return SIZE_MAX;
}

static size_t key_index(const key_spec *specs, size_t n, const char *name) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(specs[i].name, name) == 0) return i;
    return SIZE_MAX;
}

#define MODEL_KEY_LINE(meta, key) ((meta)->seen[key_index(model_keys, COUNT_OF(model_keys), key)])

static void check_models(parse_ctx *c) {
    sy_config *cfg = c->cfg;
    for (size_t i = 0; i < cfg->n_models; i++) {
        sy_config_model *m = &cfg->models[i];
        const section_meta *meta = &c->model_meta[i];
        char label[160];
        snprintf(label, sizeof label, "model.%s", m->name);
        /* A key given with a bad value, or perhaps on a refused line, has its error already. */
        const char *json_keys[2] = {"set_params", "metadata"};
        char **json_values[2] = {&m->set_params, &m->metadata};
        for (int k = 0; k < 2; k++) {
            if (*json_values[k] == NULL) continue;
            cJSON *j = cJSON_Parse(*json_values[k]);
            bool object = j != NULL && cJSON_IsObject(j);
            cJSON_Delete(j);
            if (!object) {
                char q[QUOTE_BUF];
                diag(c, true, MODEL_KEY_LINE(meta, json_keys[k]), label, json_keys[k], "%s is not a JSON object",
                     quoted(*json_values[k], q, sizeof q));
            }
        }
        bool process = m->cmd != NULL || MODEL_KEY_LINE(meta, "cmd") != 0;
        if ((m->peer != NULL || process) && m->n_raw_options > 0) {
            const sy_config_raw_option *r = &m->raw_options[0];
            diag(c, true, r->line, label, r->written,
                 "not a key of a process model (engine options belong to plugin models; a process takes its "
                 "options in cmd)");
        }
        /* strip_params is one list for both kinds: a process or peer model's proxy strips any field named, a
         * plugin model's requests lose the request settings named (config/request_params.h), so there each name
         * must be one. */
        if (m->peer == NULL && !process) {
            for (size_t j = 0; j < m->strip_params.count; j++) {
                const char *item = m->strip_params.items[j];
                if (!sy_request_param_type_of(item, NULL)) {
                    diag(c, true, m->strip_params.lines[j], label, "strip_params",
                         "'%.64s' is not a request setting (%s)", item, sy_request_param_names());
                    continue;
                }
                m->request_params =
                    sy_xrealloc(m->request_params, (m->n_request_params + 1) * sizeof *m->request_params);
                m->request_params[m->n_request_params++] = (sy_config_request_param){
                    SY_REQUEST_PARAM_STRIP, sy_strdup(item), NULL, m->strip_params.lines[j]};
            }
        }
        if (m->peer != NULL) {
        } else if (process) {
            if (m->plugin != NULL || m->path != NULL)
                diag(c, true, MODEL_KEY_LINE(meta, m->plugin != NULL ? "plugin" : "path"), label,
                     m->plugin != NULL ? "plugin" : "path",
                     "a model with 'cmd' is a process: it takes no plugin or path (make two models)");
        } else {
            if (m->plugin == NULL && MODEL_KEY_LINE(meta, "plugin") == 0 && !meta->dropped_line)
                diag(c, true, m->line, label, NULL, "missing required key 'plugin' (or 'cmd' for a process model)");
            if (m->path == NULL && MODEL_KEY_LINE(meta, "path") == 0 && !meta->dropped_line)
                diag(c, true, m->line, label, NULL, "missing required key 'path'");
            static const char *const process_only[] = {"cmd_stop", "env", "check_endpoint", "proxy", "memory",
                                                       "use_model_name", "connect_timeout", "header_timeout",
                                                       "stop_grace"};
            for (size_t k = 0; k < COUNT_OF(process_only); k++) {
                unsigned line = MODEL_KEY_LINE(meta, process_only[k]);
                if (line != 0) diag(c, true, line, label, process_only[k], "only a model with 'cmd' takes this key");
            }
        }
        if (m->draft_min > m->draft_max) {
            unsigned line = MODEL_KEY_LINE(meta, "draft_min");
            diag(c, true, line ? line : m->line, label, "draft_min", "%u is more than draft_max (%u)", m->draft_min,
                 m->draft_max);
        }
        if (m->draft == SY_CONFIG_DRAFT_MODEL) {
            unsigned line = MODEL_KEY_LINE(meta, "draft");
            size_t d = find_model_index(cfg, m->draft_model);
            if (d == SIZE_MAX) {
                diag(c, true, line, label, "draft", "'model:%s' names no configured model", m->draft_model);
            } else if (d == i) {
                diag(c, true, line, label, "draft", "a model cannot draft for itself");
            } else {
                set_string(&m->draft_model, sy_strdup(cfg->models[d].name)); /* alias -> canonical name */
            }
        }
    }
}

/* Every model a peer lists becomes a model served there. Names clash with models and aliases as usual. */
static void add_peer_models(parse_ctx *c) {
    sy_config *cfg = c->cfg;
    for (size_t i = 0; i < cfg->n_peers; i++) {
        sy_config_peer *p = &cfg->peers[i];
        char label[160];
        snprintf(label, sizeof label, "peer.%s", p->name);
        if (p->url == NULL) {
            diag(c, true, p->line, label, NULL, "missing required key 'url'");
            continue;
        }
        if (strncmp(p->url, "http://", 7) != 0 && strncmp(p->url, "https://", 8) != 0)
            diag(c, true, c->peer_seen[i][0], label, "url", "'%.200s' is not an http:// or https:// URL", p->url);
        if (p->models.count == 0) diag(c, false, p->line, label, NULL, "the peer lists no models");
        for (size_t k = 0; k < p->models.count; k++) {
            if (cfg->n_models >= SY_CONFIG_MAX_MODELS) {
                diag(c, true, p->models.lines[k], label, "models", "more than %d models", SY_CONFIG_MAX_MODELS);
                return;
            }
            cfg->models = sy_xrealloc(cfg->models, (cfg->n_models + 1) * sizeof *cfg->models);
            c->model_meta = sy_xrealloc(c->model_meta, (cfg->n_models + 1) * sizeof *c->model_meta);
            sy_config_model *m = &cfg->models[cfg->n_models];
            model_defaults(m);
            m->name = sy_strdup(p->models.items[k]);
            m->line = p->models.lines[k];
            m->peer = sy_strdup(p->name);
            for (size_t j = 0; j < p->strip_params.count; j++)
                list_append(&m->strip_params, p->strip_params.items[j], p->strip_params.lines[j]);
            if (p->set_params != NULL) m->set_params = sy_strdup(p->set_params);
            /* Their own group: a peer's models never swap ours out. */
            size_t len = strlen(p->name) + 6;
            m->group = sy_xmalloc(len);
            snprintf(m->group, len, "peer.%s", p->name);
            memset(&c->model_meta[cfg->n_models], 0, sizeof *c->model_meta);
            for (size_t j = 0; j < cfg->n_models; j++)
                if (strcmp(cfg->models[j].name, m->name) == 0)
                    diag(c, true, m->line, label, "models", "'%s' is already a model (line %u)", m->name,
                         cfg->models[j].line);
            cfg->n_models++;
        }
    }
}

/* Targets name models (aliases become canonical names); a selector's name is no model's name or alias. */
static void check_selectors(parse_ctx *c) {
    sy_config *cfg = c->cfg;
    for (size_t i = 0; i < cfg->n_selectors; i++) {
        sy_config_selector *sel = &cfg->selectors[i];
        char label[160];
        snprintf(label, sizeof label, "selector.%s", sel->name);
        const sy_config_model *clash = sy_config_find_model(cfg, sel->name);
        if (clash != NULL)
            diag(c, true, sel->line, label, NULL, "'%s' already names model '%s' (line %u)", sel->name, clash->name,
                 clash->line);
        if (sel->targets.count == 0) diag(c, true, sel->line, label, NULL, "missing required key 'targets'");
        for (size_t k = 0; k < sel->targets.count; k++) {
            const sy_config_model *m = sy_config_find_model(cfg, sel->targets.items[k]);
            if (m == NULL) {
                diag(c, true, sel->targets.lines[k], label, "targets", "'%s' names no configured model",
                     sel->targets.items[k]);
                continue;
            }
            free(sel->targets.items[k]);
            sel->targets.items[k] = sy_strdup(m->name);
        }
    }
}

static size_t add_implicit_group(sy_config *cfg, const char *name) {
    cfg->groups = sy_xrealloc(cfg->groups, (cfg->n_groups + 1) * sizeof *cfg->groups);
    sy_config_group *g = &cfg->groups[cfg->n_groups];
    group_defaults(g);
    g->name = sy_strdup(name);
    g->implicit = true;
    return cfg->n_groups++;
}

/* Place every model in one group: the group it names, else the group whose members list it, else the
 * default group. Then fill each group's member list. */
static void check_groups(parse_ctx *c) {
    sy_config *cfg = c->cfg;
    const size_t n_explicit = cfg->n_groups;
    /* Which explicit group's members list placed each model, and on which line. */
    size_t *listed_by = sy_xmalloc((cfg->n_models ? cfg->n_models : 1) * sizeof *listed_by);
    unsigned *listed_line = sy_xcalloc(cfg->n_models ? cfg->n_models : 1, sizeof *listed_line);
    for (size_t i = 0; i < cfg->n_models; i++) listed_by[i] = SIZE_MAX;

    for (size_t g = 0; g < n_explicit; g++) {
        /* Members were parsed into the group's own list; move them aside, it is refilled below. */
        c->group_meta[g].listed = cfg->groups[g].members;
        memset(&cfg->groups[g].members, 0, sizeof cfg->groups[g].members);
        const sy_config_list *listed = &c->group_meta[g].listed;
        char label[160];
        snprintf(label, sizeof label, "group.%s", cfg->groups[g].name);
        for (size_t j = 0; j < listed->count; j++) {
            const char *member = listed->items[j];
            unsigned line = listed->lines[j];
            size_t mi = find_model_index(cfg, member);
            if (mi == SIZE_MAX) {
                diag(c, true, line, label, "members", "'%s' names no configured model", member);
                continue;
            }
            sy_config_model *m = &cfg->models[mi];
            if (listed_by[mi] == g) {
                diag(c, false, line, label, "members", "model '%s' is listed twice", m->name);
                continue;
            }
            if (listed_by[mi] != SIZE_MAX) {
                diag(c, true, line, label, "members", "model '%s' is already a member of group '%s' (line %u)",
                     m->name, cfg->groups[listed_by[mi]].name, listed_line[mi]);
                continue;
            }
            if (m->group != NULL && strcmp(m->group, cfg->groups[g].name) != 0) {
                diag(c, true, line, label, "members", "model '%s' names group '%s' (line %u)", m->name, m->group,
                     MODEL_KEY_LINE(&c->model_meta[mi], "group"));
                continue;
            }
            listed_by[mi] = g;
            listed_line[mi] = line;
        }
    }

    for (size_t i = 0; i < cfg->n_models; i++) {
        sy_config_model *m = &cfg->models[i];
        if (m->group == NULL)
            m->group = sy_strdup(listed_by[i] != SIZE_MAX ? cfg->groups[listed_by[i]].name : SY_CONFIG_DEFAULT_GROUP);
        size_t g = find_group_index(cfg, m->group);
        if (g == SIZE_MAX) g = add_implicit_group(cfg, m->group); /* a group without a section: the defaults */
        list_append(&cfg->groups[g].members, m->name, m->line);
    }

    for (size_t g = 0; g < n_explicit; g++) {
        if (cfg->groups[g].members.count == 0)
            diag(c, false, cfg->groups[g].line, NULL, NULL, "group '%s' has no models", cfg->groups[g].name);
    }
    free(listed_by);
    free(listed_line);
}

static void finish(parse_ctx *c) {
    sy_config *cfg = c->cfg;
    add_peer_models(c);
    check_models(c);
    check_names(c);
    check_groups(c);
    check_selectors(c);
    for (size_t i = 0; i < cfg->n_models; i++) {
        sy_config_model *m = &cfg->models[i];
        if (m->cmd == NULL) continue;
        char label[160];
        snprintf(label, sizeof label, "model.%s", m->name);
        char why[512];
        if (sy_config_expand_process(cfg, m, why, sizeof why) != 0)
            diag(c, true, MODEL_KEY_LINE(&c->model_meta[i], "cmd"), label, NULL, "%s", why);
    }
    if (cfg->host.resume_path == NULL) {
        const char *home = getenv("HOME");
        if (home != NULL && home[0] == '/' && strlen(home) < SY_CONFIG_MAX_PATH_LEN - 64)
            cfg->host.resume_path = sy_path_join(home, ".local/state/switchyard/resume");
    }
}

/* ------------------------------------------------------------------------------------------------------------
 * Public functions
 */

static sy_config *new_config(const char *source, const char *base_dir) {
    sy_config *cfg = sy_xcalloc(1, sizeof *cfg);
    cfg->source = sy_strdup(source != NULL ? source : "<string>");
    cfg->base_dir = base_dir != NULL ? sy_strdup(base_dir) : NULL;
    cfg->host.listen = sy_strdup("127.0.0.1:8080");
    cfg->host.log_level = SY_LOG_WARN;
    cfg->host.http_threads = 4;
    cfg->host.max_connections = SY_CONFIG_DEFAULT_MAX_CONNECTIONS;
    cfg->host.max_request_body = (uint64_t)16 << 20;
    cfg->host.resume_max_bytes = SY_CONFIG_DEFAULT_RESUME_MAX_BYTES;
    cfg->host.load_timeout_s = 600;
    cfg->host.start_port = 5800;
    cfg->host.request_timeout_s = SY_CONFIG_DEFAULT_REQUEST_TIMEOUT_S;
    cfg->host.stream_timeout_s = SY_CONFIG_DEFAULT_STREAM_TIMEOUT_S;
    cfg->host.max_connections_per_client = SY_CONFIG_DEFAULT_MAX_PER_CLIENT;
    cfg->host.connection_reserve = SY_CONFIG_DEFAULT_CONNECTION_RESERVE;
    cfg->host.tokenize_memory = SY_CONFIG_DEFAULT_TOKENIZE_MEMORY;
    cfg->host.slot_save_max_bytes = SY_CONFIG_DEFAULT_RESUME_MAX_BYTES;
    return cfg;
}

static void parse_text(sy_config *cfg, const char *text, size_t len) {
    parse_ctx c;
    memset(&c, 0, sizeof c);
    c.cfg = cfg;
    c.text = text;
    c.len = len;
    c.section = SEC_NONE;
    c.last_raw = SIZE_MAX;
    if (len > SY_CONFIG_MAX_BYTES) {
        diag(&c, true, 0, NULL, NULL, "the file is %zu bytes; the limit is %zu", len, SY_CONFIG_MAX_BYTES);
        return;
    }
    /* inih's return (the first line it found wrong) adds nothing: every such line was reported above. */
    (void)ini_parse_stream(read_line, &c, on_pair, &c);
    if (c.handler_expected) diag(&c, true, c.lineno, NULL, NULL, "internal error: the INI reader is out of step with inih");
    if (!c.stopped) finish(&c);
    for (size_t i = 0; i < c.n_group_meta; i++) list_free(&c.group_meta[i].listed);
    free(c.model_meta);
    free(c.group_meta);
}

sy_config *sy_config_load_string(const char *text, size_t len, const char *source, const char *base_dir) {
    sy_config *cfg = new_config(source, base_dir);
    parse_text(cfg, text != NULL ? text : "", text != NULL ? len : 0);
    return cfg;
}

/* The folder relative paths of a config file resolve against, absolute when the working directory is known. */
static char *config_folder(const char *path) {
    const char *slash = strrchr(path, '/');
    char *dir;
    if (slash == NULL) {
        dir = sy_strdup(".");
    } else {
        size_t n = slash == path ? 1 : (size_t)(slash - path);
        dir = sy_xmalloc(n + 1);
        memcpy(dir, path, n);
        dir[n] = '\0';
    }
    if (dir[0] == '/') return dir;
    char cwd[4096];
    if (getcwd(cwd, sizeof cwd) == NULL) return dir;
    char *abs = strcmp(dir, ".") == 0 ? sy_strdup(cwd) : sy_path_join(cwd, dir);
    free(dir);
    return abs;
}

sy_config *sy_config_load_file(const char *path) {
    char *folder = config_folder(path);
    sy_config *cfg = new_config(path, folder);
    free(folder);
    parse_ctx c; /* only for diag() */
    memset(&c, 0, sizeof c);
    c.cfg = cfg;

    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        diag(&c, true, 0, NULL, NULL, "cannot open: %s", strerror(errno));
        return cfg;
    }
    sy_buf text;
    sy_buf_init(&text);
    bool read_ok = sy_buf_read(&text, f, SY_CONFIG_MAX_BYTES);
    int saved_errno = errno;
    fclose(f);
    if (!read_ok) {
        diag(&c, true, 0, NULL, NULL, "cannot read: %s", strerror(saved_errno));
    } else if (text.len > SY_CONFIG_MAX_BYTES) {
        diag(&c, true, 0, NULL, NULL, "the file is larger than %zu bytes", SY_CONFIG_MAX_BYTES);
    } else {
        parse_text(cfg, text.data, text.len);
    }
    sy_buf_free(&text);
    return cfg;
}

void sy_config_free(sy_config *cfg) {
    if (cfg == NULL) return;
    sy_config_host *h = &cfg->host;
    free(h->listen);
    free(h->plugin_dir);
    free(h->resume_path);
    free(h->slot_save_path);
    list_free(&h->api_keys);
    list_free(&h->admin_api_keys);
    list_free(&h->cors_origins);
    list_free(&h->allowed_hosts);
    for (size_t i = 0; i < cfg->n_models; i++) {
        sy_config_model *m = &cfg->models[i];
        free(m->name);
        free(m->plugin);
        free(m->path);
        list_free(&m->aliases);
        free(m->group);
        free(m->draft_model);
        free(m->chat_template);
        free(m->chat_template_file);
        for (size_t j = 0; j < m->n_request_params; j++) {
            free(m->request_params[j].key);
            free(m->request_params[j].value);
        }
        free(m->request_params);
        for (size_t j = 0; j < m->n_options; j++) {
            free((void *)m->options[j].key);
            free((void *)m->options[j].value);
        }
        free(m->options);
        for (size_t j = 0; j < m->n_raw_options; j++) {
            free(m->raw_options[j].written);
            free(m->raw_options[j].key);
            free(m->raw_options[j].value);
        }
        free(m->raw_options);
        free(m->cmd);
        free(m->cmd_stop);
        list_free(&m->env);
        free(m->check_endpoint);
        free(m->proxy);
        free(m->use_model_name);
        list_free(&m->strip_params);
        free(m->set_params);
        free(m->display_name);
        free(m->description);
        free(m->metadata);
        free(m->peer);
    }
    free(cfg->models);
    for (size_t i = 0; i < cfg->n_peers; i++) {
        free(cfg->peers[i].name);
        free(cfg->peers[i].url);
        free(cfg->peers[i].api_key);
        list_free(&cfg->peers[i].models);
        list_free(&cfg->peers[i].strip_params);
        free(cfg->peers[i].set_params);
    }
    free(cfg->peers);
    for (size_t i = 0; i < cfg->n_selectors; i++) {
        free(cfg->selectors[i].name);
        list_free(&cfg->selectors[i].targets);
        free(cfg->selectors[i].display_name);
        free(cfg->selectors[i].description);
    }
    free(cfg->selectors);
    list_free(&cfg->macro_names);
    list_free(&cfg->macro_values);
    for (size_t i = 0; i < cfg->n_groups; i++) {
        free(cfg->groups[i].name);
        list_free(&cfg->groups[i].members);
    }
    free(cfg->groups);
    for (size_t i = 0; i < cfg->n_errors; i++) free(cfg->errors[i]);
    free(cfg->errors);
    for (size_t i = 0; i < cfg->n_warnings; i++) free(cfg->warnings[i]);
    free(cfg->warnings);
    free(cfg->source);
    free(cfg->base_dir);
    free(cfg);
}

void sy_config_print_diagnostics(const sy_config *cfg, FILE *out) {
    for (size_t i = 0; i < cfg->n_warnings; i++) fprintf(out, "warning: %s\n", cfg->warnings[i]);
    if (cfg->n_warnings_dropped)
        fprintf(out, "warning: %s: %zu more warnings not shown\n", cfg->source, cfg->n_warnings_dropped);
    for (size_t i = 0; i < cfg->n_errors; i++) fprintf(out, "error: %s\n", cfg->errors[i]);
    if (cfg->n_errors_dropped)
        fprintf(out, "error: %s: %zu more errors not shown\n", cfg->source, cfg->n_errors_dropped);
}

const sy_config_model *sy_config_find_model(const sy_config *cfg, const char *name_or_alias) {
    if (cfg == NULL || name_or_alias == NULL) return NULL;
    size_t i = find_model_index_loose(cfg, name_or_alias);
    return i == SIZE_MAX ? NULL : &cfg->models[i];
}

const sy_config_group *sy_config_find_group(const sy_config *cfg, const char *name) {
    if (cfg == NULL || name == NULL) return NULL;
    size_t i = find_group_index(cfg, name);
    return i == SIZE_MAX ? NULL : &cfg->groups[i];
}

const char *sy_config_model_option(const sy_config_model *model, const char *key) {
    if (model == NULL || key == NULL) return NULL;
    for (size_t i = 0; i < model->n_options; i++)
        if (strcmp(model->options[i].key, key) == 0) return model->options[i].value;
    return NULL;
}

/* ------------------------------------------------------------------------------------------------------------
 * Engine keys against the options the plugins declare
 */

/* A path list: comma-separated, blanks around items dropped, empty items skipped, each resolved; comma-joined. */
static char *resolve_path_list(parse_ctx *c, const char *key, const char *value) {
    char *copy = sy_strdup(value);
    sy_buf joined;
    sy_buf_init(&joined);
    size_t items = 0;
    bool ok = true;
    for (char *p = copy; ok && p != NULL;) {
        char *comma = strchr(p, ',');
        if (comma != NULL) *comma = '\0';
        char *start = p, *end = p + strlen(p);
        while (is_blank(*start)) start++;
        while (end > start && is_blank(end[-1])) *--end = '\0';
        if (*start != '\0') {
            char *path = items < SY_CONFIG_MAX_LIST_ITEMS ? resolve_path(c, key, start) : NULL;
            if (items >= SY_CONFIG_MAX_LIST_ITEMS) key_error(c, key, "more than %d items", SY_CONFIG_MAX_LIST_ITEMS);
            if (path == NULL) {
                ok = false;
            } else {
                if (joined.len > 0) sy_buf_append(&joined, ",", 1);
                sy_buf_puts(&joined, path);
                items++;
                free(path);
            }
        }
        p = comma != NULL ? comma + 1 : NULL;
    }
    free(copy);
    if (ok && items == 0) {
        key_error(c, key, "the list of paths is empty");
        ok = false;
    }
    if (!ok) {
        sy_buf_free(&joined);
        return NULL;
    }
    return sy_buf_take(&joined);
}

static void check_raw_option(parse_ctx *c, sy_config_model *m, const sy_config_raw_option *r,
                             const sy_option_spec *spec) {
    if (r->continued != 0 && spec->type != SY_OPTION_PATH_LIST) {
        c->lineno = r->continued;
        key_error(c, r->written,
                  "this indented line continues the value of '%s', which takes a single value (remove the "
                  "indentation to start a new key)",
                  r->written);
        return;
    }
    char *resolved = NULL;
    const char *value = NULL;
    char norm[SY_OPTION_NORM_MAX], why[320];
    if (spec->type == SY_OPTION_PATH)
        value = resolved = resolve_path(c, r->written, r->value);
    else if (spec->type == SY_OPTION_PATH_LIST)
        value = resolved = resolve_path_list(c, r->written, r->value);
    else if ((value = sy_option_value_check(spec, r->value, norm, why, sizeof why)) == NULL)
        key_error(c, r->written, "%s", why);
    if (value != NULL) add_option(c, m, r->key, value);
    free(resolved);
}

void sy_config_check_options(sy_config *cfg, sy_config_schema_fn schema_of, void *user) {
    if (cfg == NULL || !cfg->options_unchecked) return;
    cfg->options_unchecked = false;
    parse_ctx c;
    memset(&c, 0, sizeof c);
    c.cfg = cfg;
    c.section = SEC_MODEL;
    sy_config_option_schema *schema = sy_xmalloc(sizeof *schema);
    for (size_t i = 0; i < cfg->n_models; i++) {
        sy_config_model *m = &cfg->models[i];
        /* A model without a plugin has its error already: there is no one to ask. */
        if (m->n_raw_options == 0 || m->plugin == NULL) continue;
        memset(schema, 0, sizeof *schema);
        if (schema_of != NULL) schema_of(user, m, schema);
        if (schema->n_specs > SY_CONFIG_MAX_SCHEMA) schema->n_specs = SY_CONFIG_MAX_SCHEMA;
        schema->asked[sizeof schema->asked - 1] = '\0';
        schema->unchecked[sizeof schema->unchecked - 1] = '\0';
        snprintf(c.section_label, sizeof c.section_label, "model.%.80s", m->name);
        for (size_t j = 0; j < m->n_raw_options; j++) {
            const sy_config_raw_option *r = &m->raw_options[j];
            c.lineno = r->line;
            const sy_option_spec *spec = NULL;
            for (size_t k = 0; k < schema->n_specs && spec == NULL; k++)
                if (schema->specs[k] != NULL && strcmp(schema->specs[k]->key, r->key) == 0) spec = schema->specs[k];
            if (spec != NULL) {
                check_raw_option(&c, m, r, spec);
            } else if (schema->unchecked[0] != '\0') {
                /* Nothing to check it against: the plugin reads it or ignores it, as before 1.2. */
                key_warning(&c, r->written, "passed to the plugin unchecked: %s", schema->unchecked);
                add_option(&c, m, r->key, r->value);
            } else {
                char keys[360];
                size_t used = 0;
                keys[0] = '\0';
                for (size_t k = 0; k < schema->n_specs; k++) {
                    const char *key = schema->specs[k] ? schema->specs[k]->key : "";
                    if (used + strlen(key) + 8 >= sizeof keys) {
                        snprintf(keys + used, sizeof keys - used, ", ...");
                        break;
                    }
                    used += (size_t)snprintf(keys + used, sizeof keys - used, "%s%s", k ? ", " : "", key);
                }
                const char *asked = schema->asked[0] ? schema->asked : m->plugin;
                bool several = strncmp(asked, "plugins ", 8) == 0;
                if (schema->n_specs == 0)
                    key_error(&c, r->written, "not a model key, nor an option of %s (it declares none)", asked);
                else
                    key_error(&c, r->written, "not a model key, nor an option of %s (%s options: %s)", asked,
                              several ? "their" : "its", keys);
            }
        }
    }
    free(schema);
}
