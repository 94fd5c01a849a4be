/* Tool-call formats whose calls are JSON, and the scanning helpers all formats share. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "chat/tool_call_internal.h"

#define TC_MAX_DEPTH 512

/* ---- scanning ----------------------------------------------------------------------------------------------- */

size_t tc_find(const char *t, size_t len, size_t from, const char *marker) {
    size_t m = strlen(marker);
    if (m == 0 || from > len || len - from < m) return (size_t)-1;
    const char *p = memmem(t + from, len - from, marker, m);
    return p ? (size_t)(p - t) : (size_t)-1;
}

size_t tc_partial(const char *t, size_t len, size_t from, const char *marker) {
    size_t m = strlen(marker);
    size_t avail = len - from;
    size_t k = m - 1 < avail ? m - 1 : avail;
    for (; k > 0; k--)
        if (memcmp(t + len - k, marker, k) == 0) return k;
    return 0;
}

bool tc_starts(const char *t, size_t len, size_t pos, const char *marker) {
    size_t m = strlen(marker);
    return pos <= len && len - pos >= m && memcmp(t + pos, marker, m) == 0;
}

/* True when t[pos..len) is a proper prefix of marker (the text may still become it). */
static bool tc_maybe(const char *t, size_t len, size_t pos, const char *marker) {
    size_t m = strlen(marker);
    return pos <= len && len - pos < m && memcmp(t + pos, marker, len - pos) == 0;
}

size_t tc_skip_ws(const char *t, size_t len, size_t pos) {
    while (pos < len && (t[pos] == ' ' || t[pos] == '\n' || t[pos] == '\r' || t[pos] == '\t')) pos++;
    return pos;
}

size_t tc_content_until(const char *t, size_t len, size_t pos, const char *const *openers, size_t n_openers,
                        bool final, sy_chat_parse *out, size_t *which) {
    size_t best = (size_t)-1, best_i = 0;
    for (size_t k = 0; k < n_openers; k++) {
        size_t at = tc_find(t, len, pos, openers[k]);
        if (at < best) best = at, best_i = k;
    }
    if (best != (size_t)-1) {
        sy_buf_append(&out->content, t + pos, best - pos);
        if (which) *which = best_i;
        return best;
    }
    size_t hold = 0;
    if (!final)
        for (size_t k = 0; k < n_openers; k++) {
            size_t h = tc_partial(t, len, pos, openers[k]);
            if (h > hold) hold = h;
        }
    sy_buf_append(&out->content, t + pos, len - pos - hold);
    return (size_t)-1;
}

static bool prim_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '+' || c == '-' ||
           c == '.';
}

static int scan_string(const char *t, size_t len, size_t i, size_t *end) {
    i++;
    while (i < len) {
        unsigned char c = (unsigned char)t[i];
        if (c == '\\') {
            if (i + 1 >= len) return 0;
            i += 2;
            continue;
        }
        if (c == '"') {
            *end = i + 1;
            return 1;
        }
        if (c < 0x20) {
            *end = i;
            return -1;
        }
        i++;
    }
    return 0;
}

static bool valid_primitive(const char *s, size_t n) {
    if ((n == 4 && memcmp(s, "true", 4) == 0) || (n == 5 && memcmp(s, "false", 5) == 0) ||
        (n == 4 && memcmp(s, "null", 4) == 0))
        return true;
    size_t i = 0;
    if (i < n && s[i] == '-') i++;
    if (i >= n || !(s[i] >= '0' && s[i] <= '9')) return false;
    for (; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || s[i] == '.' || s[i] == 'e' || s[i] == 'E' || s[i] == '+' ||
              s[i] == '-'))
            return false;
    return true;
}

int tc_json_value_end(const char *t, size_t len, size_t pos, size_t *end) {
    char stack[TC_MAX_DEPTH];
    size_t depth = 0;
    size_t i = tc_skip_ws(t, len, pos);
    if (i >= len) return 0;
    /* On -1, *end is where the text stopped being JSON: never before what a shorter text reported as partial. */
    for (;;) {
        if (i >= len) return 0;
        char c = t[i];
        bool value_done = false;
        if (c == '"') {
            int r = scan_string(t, len, i, &i);
            if (r < 0) *end = i;
            if (r <= 0) return r;
            value_done = true;
        } else if (c == '{' || c == '[') {
            if (depth >= TC_MAX_DEPTH) {
                *end = i;
                return -1;
            }
            stack[depth++] = c == '{' ? '}' : ']';
            i++;
        } else if (c == '}' || c == ']') {
            if (depth == 0 || stack[depth - 1] != c) {
                *end = i;
                return -1;
            }
            depth--;
            i++;
            value_done = true;
        } else if (prim_char(c)) {
            size_t s = i;
            while (i < len && prim_char(t[i])) i++;
            if (i >= len) return 0;
            if (!valid_primitive(t + s, i - s)) {
                *end = i;
                return -1;
            }
            value_done = true;
        } else if (depth > 0 && (c == ',' || c == ':' || c == ' ' || c == '\n' || c == '\r' || c == '\t')) {
            i++;
        } else {
            *end = i;
            return -1;
        }
        if (value_done && depth == 0) {
            *end = i;
            return 1;
        }
    }
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static void put_utf8(sy_buf *b, uint32_t cp) {
    char u[4];
    size_t n;
    if (cp < 0x80) u[0] = (char)cp, n = 1;
    else if (cp < 0x800) u[0] = (char)(0xC0 | (cp >> 6)), u[1] = (char)(0x80 | (cp & 0x3F)), n = 2;
    else if (cp < 0x10000)
        u[0] = (char)(0xE0 | (cp >> 12)), u[1] = (char)(0x80 | ((cp >> 6) & 0x3F)), u[2] = (char)(0x80 | (cp & 0x3F)),
        n = 3;
    else
        u[0] = (char)(0xF0 | (cp >> 18)), u[1] = (char)(0x80 | ((cp >> 12) & 0x3F)),
        u[2] = (char)(0x80 | ((cp >> 6) & 0x3F)), u[3] = (char)(0x80 | (cp & 0x3F)), n = 4;
    sy_buf_append(b, u, n);
}

static int read_u4(const char *t, size_t len, size_t i, uint32_t *v) {
    if (i + 4 > len) return 0;
    uint32_t x = 0;
    for (int k = 0; k < 4; k++) {
        int h = hexval(t[i + (size_t)k]);
        if (h < 0) return -1;
        x = x * 16 + (uint32_t)h;
    }
    *v = x;
    return 1;
}

int tc_json_string(const char *t, size_t len, size_t pos, size_t *end, sy_buf *dec) {
    if (pos >= len) return 0;
    if (t[pos] != '"') return -1;
    size_t i = pos + 1;
    while (i < len) {
        unsigned char c = (unsigned char)t[i];
        if (c == '"') {
            *end = i + 1;
            return 1;
        }
        if (c < 0x20) return -1;
        if (c != '\\') {
            size_t s = i;
            while (i < len && t[i] != '"' && t[i] != '\\' && (unsigned char)t[i] >= 0x20) i++;
            if (dec) sy_buf_append(dec, t + s, i - s);
            continue;
        }
        if (i + 1 >= len) return 0;
        char e = t[i + 1];
        const char *simple = strchr("\"\\/bfnrt", e);
        if (e != '\0' && simple != NULL) {
            static const char map[] = "\"\\/\b\f\n\r\t";
            if (dec) sy_buf_append(dec, &map[simple - "\"\\/bfnrt"], 1);
            i += 2;
            continue;
        }
        if (e != 'u') return -1;
        uint32_t cp;
        int r = read_u4(t, len, i + 2, &cp);
        if (r <= 0) return r;
        i += 6;
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (i + 2 > len) return 0;
            if (t[i] != '\\' || t[i + 1] != 'u') return -1;
            uint32_t lo;
            r = read_u4(t, len, i + 2, &lo);
            if (r <= 0) return r;
            if (lo < 0xDC00 || lo > 0xDFFF) return -1;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            i += 6;
        } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            return -1;
        }
        if (dec) put_utf8(dec, cp);
    }
    return 0;
}

void tc_json_quote(sy_buf *b, const char *s, size_t len) {
    sy_buf_puts(b, "\"");
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        switch (c) {
        case '"': sy_buf_puts(b, "\\\""); break;
        case '\\': sy_buf_puts(b, "\\\\"); break;
        case '\n': sy_buf_puts(b, "\\n"); break;
        case '\r': sy_buf_puts(b, "\\r"); break;
        case '\t': sy_buf_puts(b, "\\t"); break;
        default:
            if (c < 0x20) sy_buf_printf(b, "\\u%04x", c);
            else sy_buf_append(b, s + i, 1);
        }
    }
    sy_buf_puts(b, "\"");
}

sy_tool_call *tc_add_call(sy_chat_parse *out, const char *name, size_t name_len) {
    if (out->n_calls >= SY_TOOL_MAX_CALLS) {
        out->truncated_calls = true;
        return NULL;
    }
    sy_tool_call *c = &out->calls[out->n_calls++];
    memset(c, 0, sizeof *c);
    c->name = sy_xmalloc(name_len + 1);
    memcpy(c->name, name, name_len);
    c->name[name_len] = '\0';
    sy_buf_init(&c->arguments);
    return c;
}

/* ---- call objects ------------------------------------------------------------------------------------------ */

static bool key_is(const sy_buf *k, const char *name) { return k->len == strlen(name) && memcmp(k->data, name, k->len) == 0; }

int tc_call_object(const char *t, size_t len, size_t pos, bool final, sy_chat_parse *out, size_t *end) {
    (void)final;
    size_t i = tc_skip_ws(t, len, pos);
    if (i >= len) return 0;
    if (t[i] != '{') return -1;
    i++;
    /* Ids inside call objects (Mistral Nemo's come after the arguments, Command R's are indices) are not kept:
     * the stream names a call before they come, and they repeat across turns. */
    sy_buf name, key;
    sy_buf_init(&name);
    sy_buf_init(&key);
    bool have_name = false;
    int args_state = -2;
    size_t args_s = 0, args_e = 0, fail_at = 0;
    int result;
    for (;;) {
        i = tc_skip_ws(t, len, i);
        if (i >= len) {
            result = 0;
            break;
        }
        if (t[i] == '}') {
            i++;
            result = 1;
            break;
        }
        if (t[i] == ',') {
            i++;
            continue;
        }
        sy_buf_clear(&key);
        size_t ke;
        int r = tc_json_string(t, len, i, &ke, &key);
        if (r <= 0) {
            result = r;
            break;
        }
        i = tc_skip_ws(t, len, ke);
        if (i >= len) {
            result = 0;
            break;
        }
        if (t[i] != ':') {
            result = -1;
            break;
        }
        i = tc_skip_ws(t, len, i + 1);
        if (i >= len) {
            result = 0;
            break;
        }
        size_t ve;
        if ((key_is(&key, "name") || key_is(&key, "tool_name") || key_is(&key, "function")) && t[i] == '"' &&
            !have_name) {
            r = tc_json_string(t, len, i, &ve, &name);
            if (r <= 0) {
                sy_buf_clear(&name);
                result = r;
                break;
            }
            have_name = true;
        } else if ((key_is(&key, "arguments") || key_is(&key, "parameters")) && args_state == -2) {
            args_s = i;
            r = tc_json_value_end(t, len, i, &ve);
            args_state = r;
            if (r <= 0) {
                if (r < 0) fail_at = ve;
                result = r;
                break;
            }
            args_e = ve;
        } else {
            r = tc_json_value_end(t, len, i, &ve);
            if (r <= 0) {
                result = r;
                break;
            }
        }
        i = ve;
    }
    if (result < 0 && fail_at < i) fail_at = i;
    /* A call whose name was seen stays a call when the text breaks later (the stream already sent it): its
     * arguments are what was read before the break, and the text from the break on is not part of it. */
    if (have_name) {
        sy_tool_call *c = tc_add_call(out, name.data ? name.data : "", name.len);
        if (c != NULL) {
            if (args_state == -1) {
                sy_buf_append(&c->arguments, t + args_s, fail_at - args_s);
            } else if (args_state == 1 && t[args_s] == '"') {
                size_t se;
                tc_json_string(t, len, args_s, &se, &c->arguments); /* arguments sent as a JSON string */
            } else if (args_state == 1) {
                sy_buf_append(&c->arguments, t + args_s, args_e - args_s);
            } else if (args_state == 0 && (t[args_s] == '{' || t[args_s] == '[')) {
                sy_buf_append(&c->arguments, t + args_s, len - args_s);
            } else if (args_state == -2 && result == 1) {
                sy_buf_puts(&c->arguments, "{}");
            }
            c->complete = result != 0;
        }
    }
    sy_buf_free(&name);
    sy_buf_free(&key);
    *end = result < 0 ? fail_at : i;
    return result;
}

int tc_call_array(const char *t, size_t len, size_t pos, bool final, sy_chat_parse *out, size_t *end) {
    size_t i = tc_skip_ws(t, len, pos);
    if (i >= len) return 0;
    if (t[i] != '[') return -1;
    i++;
    for (;;) {
        i = tc_skip_ws(t, len, i);
        if (i >= len) return 0;
        if (t[i] == ']') {
            *end = i + 1;
            return 1;
        }
        if (t[i] == ',') {
            i++;
            continue;
        }
        size_t e = i;
        int r = tc_call_object(t, len, i, final, out, &e);
        if (r < 0) *end = e;
        if (r <= 0) return r;
        i = e;
    }
}

int tc_call_json_args(const char *name, size_t name_len, const char *t, size_t len, size_t pos, bool final,
                      sy_chat_parse *out, size_t *end) {
    (void)final;
    size_t i = tc_skip_ws(t, len, pos);
    if (i >= len) {
        tc_add_call(out, name, name_len);
        return 0;
    }
    size_t e = i;
    int r = t[i] == '{' ? tc_json_value_end(t, len, i, &e) : -1;
    sy_tool_call *c = tc_add_call(out, name, name_len);
    if (c == NULL) return r;
    /* Broken arguments: the call keeps what was read before the break ({} when nothing was). */
    if (r < 0 && e == i) sy_buf_puts(&c->arguments, "{}");
    else sy_buf_append(&c->arguments, t + i, (r == 0 ? len : e) - i);
    c->complete = r != 0;
    if (r != 0) *end = e;
    return r;
}

/* Text that looked like a call but is not one, from `from` on, is content. */
static void rest_is_content(const char *t, size_t len, size_t from, sy_chat_parse *out) {
    if (from < len) sy_buf_append(&out->content, t + from, len - from);
}

/* After a call that broke at `at`: a call was made (the rest is content, parsing ends: true), or none was. */
static bool broke_after_call(const char *t, size_t len, size_t at, size_t calls_before, sy_chat_parse *out) {
    if (out->n_calls <= calls_before) return false;
    rest_is_content(t, len, at, out);
    return true;
}

/* ---- generic ------------------------------------------------------------------------------------------------- */

void tc_body_generic(const sy_chat_parse_options *o, const char *t, size_t len, size_t pos, bool final,
                     sy_chat_parse *out) {
    (void)o;
    size_t i = tc_skip_ws(t, len, pos);
    if (i >= len) return;
    if (t[i] != '{') {
        rest_is_content(t, len, pos, out);
        return;
    }
    size_t start = i;
    i++;
    sy_buf key;
    sy_buf_init(&key);
    bool known = false;
    for (;;) {
        i = tc_skip_ws(t, len, i);
        if (i >= len) break;
        if (t[i] == '}' || t[i] == ',') {
            i++;
            continue;
        }
        sy_buf_clear(&key);
        size_t ke, ve;
        int r = tc_json_string(t, len, i, &ke, &key);
        if (r == 0) break;
        bool is_call = r > 0 && key_is(&key, "tool_call"), is_calls = r > 0 && key_is(&key, "tool_calls"),
             is_resp = r > 0 && key_is(&key, "response");
        if (!is_call && !is_calls && !is_resp) {
            /* Not this format's object: the whole text is the answer. */
            if (!known) {
                sy_buf_clear(&out->content);
                rest_is_content(t, len, start, out);
            }
            break;
        }
        known = true;
        i = tc_skip_ws(t, len, ke);
        if (i >= len) break;
        if (t[i] != ':') break;
        i = tc_skip_ws(t, len, i + 1);
        if (i >= len) break;
        if (is_resp) {
            r = tc_json_string(t, len, i, &ve, &out->content);
            if (r <= 0) break;
        } else {
            size_t before = out->n_calls;
            ve = i;
            r = is_call ? tc_call_object(t, len, i, final, out, &ve) : tc_call_array(t, len, i, final, out, &ve);
            if (r < 0) broke_after_call(t, len, ve, before, out);
            if (r <= 0) break;
        }
        i = ve;
    }
    sy_buf_free(&key);
}

/* ---- <tool_call> JSON (Hermes, Qwen 2.5 / 3, SmolLM3) ---------------------------------------------------------- */

/* Content, then calls each between an opener and a closer, repeated. parse_call reads one call's body. */
typedef int (*call_body_fn)(const sy_chat_parse_options *o, const char *t, size_t len, size_t pos, bool final,
                            sy_chat_parse *out, size_t *end);

static void wrapped_calls(const sy_chat_parse_options *o, const char *t, size_t len, size_t pos, bool final,
                          sy_chat_parse *out, const char *const *openers, const char *const *closers, size_t n,
                          call_body_fn body) {
    for (;;) {
        size_t which = 0;
        size_t at = tc_content_until(t, len, pos, openers, n, final, out, &which);
        if (at == (size_t)-1) return;
        size_t i = at + strlen(openers[which]);
        size_t e = 0;
        size_t calls_before = out->n_calls;
        int r = body(o, t, len, i, final, out, &e);
        if (r == 0) return;
        if (r < 0) {
            if (broke_after_call(t, len, e, calls_before, out)) return;
            sy_buf_append(&out->content, t + at, i - at);
            pos = i;
            continue;
        }
        i = tc_skip_ws(t, len, e);
        if (closers[which] != NULL) {
            if (tc_starts(t, len, i, closers[which])) i += strlen(closers[which]);
            else if (!final && tc_maybe(t, len, i, closers[which])) return;
        }
        pos = i;
    }
}

static int body_call_object(const sy_chat_parse_options *o, const char *t, size_t len, size_t pos, bool final,
                            sy_chat_parse *out, size_t *end) {
    (void)o;
    return tc_call_object(t, len, pos, final, out, end);
}

static int body_array_or_object(const sy_chat_parse_options *o, const char *t, size_t len, size_t pos, bool final,
                                sy_chat_parse *out, size_t *end) {
    (void)o;
    size_t i = tc_skip_ws(t, len, pos);
    if (i >= len) return 0;
    if (t[i] == '[') return tc_call_array(t, len, i, final, out, end);
    return tc_call_object(t, len, i, final, out, end);
}

void tc_body_hermes(const sy_chat_parse_options *o, const char *t, size_t len, size_t pos, bool final,
                    sy_chat_parse *out) {
    static const char *const open[] = {"<tool_call>"}, *const close[] = {"</tool_call>"};
    wrapped_calls(o, t, len, pos, final, out, open, close, 1, body_call_object);
}

void tc_body_granite(const sy_chat_parse_options *o, const char *t, size_t len, size_t pos, bool final,
                     sy_chat_parse *out) {
    static const char *const open[] = {"<|tool_call|>"}, *const close[] = {NULL};
    wrapped_calls(o, t, len, pos, final, out, open, close, 1, body_array_or_object);
}

void tc_body_phi4(const sy_chat_parse_options *o, const char *t, size_t len, size_t pos, bool final,
                  sy_chat_parse *out) {
    static const char *const open[] = {"<|tool_call|>"}, *const close[] = {"<|/tool_call|>"};
    wrapped_calls(o, t, len, pos, final, out, open, close, 1, body_array_or_object);
}

void tc_body_command_r(const sy_chat_parse_options *o, const char *t, size_t len, size_t pos, bool final,
                       sy_chat_parse *out) {
    /* Command R7B wraps its answer in <|START_RESPONSE|>...<|END_RESPONSE|>: the markers are not content. */
    static const char *const open[] = {"<|START_ACTION|>", "<|START_RESPONSE|>", "<|END_RESPONSE|>"};
    for (;;) {
        size_t which = 0;
        size_t at = tc_content_until(t, len, pos, open, 3, final, out, &which);
        if (at == (size_t)-1) return;
        size_t i = at + strlen(open[which]);
        if (which > 0) {
            pos = i;
            continue;
        }
        size_t e = i, before = out->n_calls;
        int r = body_array_or_object(o, t, len, i, final, out, &e);
        if (r == 0) return;
        if (r < 0) {
            if (broke_after_call(t, len, e, before, out)) return;
            sy_buf_append(&out->content, t + at, i - at);
            pos = i;
            continue;
        }
        i = tc_skip_ws(t, len, e);
        if (tc_starts(t, len, i, "<|END_ACTION|>")) i += strlen("<|END_ACTION|>");
        else if (!final && tc_maybe(t, len, i, "<|END_ACTION|>")) return;
        pos = i;
    }
}

void tc_body_minimax_m1(const sy_chat_parse_options *o, const char *t, size_t len, size_t pos, bool final,
                        sy_chat_parse *out) {
    (void)o;
    for (;;) {
        static const char *const open[] = {"<tool_calls>"};
        size_t at = tc_content_until(t, len, pos, open, 1, final, out, NULL);
        if (at == (size_t)-1) return;
        size_t i = at + strlen(open[0]);
        for (;;) {
            i = tc_skip_ws(t, len, i);
            if (i >= len) return;
            if (tc_starts(t, len, i, "</tool_calls>")) {
                i += strlen("</tool_calls>");
                break;
            }
            if (!final && tc_maybe(t, len, i, "</tool_calls>")) return;
            size_t e = i, before = out->n_calls;
            int r = t[i] == '[' ? tc_call_array(t, len, i, final, out, &e) : tc_call_object(t, len, i, final, out, &e);
            if (r < 0 && !broke_after_call(t, len, e, before, out)) rest_is_content(t, len, i, out);
            if (r <= 0) return;
            i = e;
        }
        pos = i;
    }
}

/* ---- Llama 3.x ---------------------------------------------------------------------------------------------- */

int tc_python_call(const char *t, size_t len, size_t pos, bool final, sy_chat_parse *out, size_t *end,
                   bool strip_dot_call);

void tc_body_llama3(const sy_chat_parse_options *o, const char *t, size_t len, size_t pos, bool final,
                    sy_chat_parse *out) {
    (void)o;
    size_t i = tc_skip_ws(t, len, pos);
    if (i >= len) return;
    if (!final && tc_maybe(t, len, i, "<|python_tag|>")) return;
    if (tc_starts(t, len, i, "<|python_tag|>")) {
        i = tc_skip_ws(t, len, i + strlen("<|python_tag|>"));
        if (i >= len) return;
        size_t e = i;
        int r = t[i] == '{' ? tc_call_object(t, len, i, final, out, &e) : tc_python_call(t, len, i, final, out, &e, true);
        if (r < 0 && out->n_calls == 0) rest_is_content(t, len, pos, out);
        else if (r < 0) rest_is_content(t, len, e, out);
        else if (r == 1) rest_is_content(t, len, tc_skip_ws(t, len, e), out);
        return;
    }
    if (t[i] != '{') {
        rest_is_content(t, len, pos, out);
        return;
    }
    /* JSON calls, one after another (separated by whitespace or ';'); JSON that names no function is text. */
    for (;;) {
        size_t e = i;
        size_t before = out->n_calls;
        int r = tc_call_object(t, len, i, final, out, &e);
        if (out->n_calls == before) {
            if (r == 0 && !final) return;
            rest_is_content(t, len, before == 0 ? pos : i, out);
            return;
        }
        if (r < 0) rest_is_content(t, len, e, out);
        if (r <= 0) return;
        i = tc_skip_ws(t, len, e);
        if (i < len && t[i] == ';') i = tc_skip_ws(t, len, i + 1);
        if (i >= len) return;
        if (t[i] != '{') {
            rest_is_content(t, len, i, out);
            return;
        }
    }
}

/* ---- Mistral ------------------------------------------------------------------------------------------------ */

void tc_body_mistral(const sy_chat_parse_options *o, const char *t, size_t len, size_t pos, bool final,
                     sy_chat_parse *out) {
    (void)o;
    static const char *const open[] = {"[TOOL_CALLS]"};
    for (;;) {
        size_t at = tc_content_until(t, len, pos, open, 1, final, out, NULL);
        if (at == (size_t)-1) return;
        size_t i = tc_skip_ws(t, len, at + strlen(open[0]));
        if (i >= len) return;
        size_t e;
        if (t[i] == '[') {
            e = i;
            size_t before = out->n_calls;
            int r = tc_call_array(t, len, i, final, out, &e);
            if (r < 0) broke_after_call(t, len, e, before, out);
            if (r <= 0) return;
            pos = e;
            continue;
        }
        /* name[ARGS]{...} or name[CALL_ID]id[ARGS]{...} */
        size_t args = tc_find(t, len, i, "[ARGS]");
        size_t cid = tc_find(t, len, i, "[CALL_ID]");
        if (args == (size_t)-1) return; /* the name is not complete yet (or the call is broken) */
        size_t name_end = cid < args ? cid : args;
        size_t ne = name_end;
        while (ne > i && (t[ne - 1] == ' ' || t[ne - 1] == '\n')) ne--;
        size_t before = out->n_calls;
        e = len;
        int r = tc_call_json_args(t + i, ne - i, t, len, args + strlen("[ARGS]"), final, out, &e);
        if (cid < args && out->n_calls > before) {
            size_t s = cid + strlen("[CALL_ID]");
            sy_tool_call *c = &out->calls[out->n_calls - 1];
            size_t n = args - s;
            c->id = sy_xmalloc(n + 1);
            memcpy(c->id, t + s, n);
            c->id[n] = '\0';
        }
        if (r < 0) rest_is_content(t, len, e, out);
        if (r <= 0) return;
        pos = e;
    }
}

/* ---- DeepSeek R1 and V3.1 ----------------------------------------------------------------------------------- */

#define DS_CALLS_BEGIN "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "begin\xef\xbd\x9c>"
#define DS_CALLS_END "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "end\xef\xbd\x9c>"
#define DS_CALL_BEGIN "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "begin\xef\xbd\x9c>"
#define DS_CALL_END "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "end\xef\xbd\x9c>"
#define DS_SEP "<\xef\xbd\x9ctool\xe2\x96\x81" "sep\xef\xbd\x9c>"

void tc_body_deepseek(const sy_chat_parse_options *o, const char *t, size_t len, size_t pos, bool final,
                      sy_chat_parse *out) {
    (void)o;
    static const char *const open[] = {DS_CALLS_BEGIN, DS_CALL_BEGIN};
    size_t which = 0;
    size_t at = tc_content_until(t, len, pos, open, 2, final, out, &which);
    if (at == (size_t)-1) return;
    size_t i = which == 0 ? at + strlen(DS_CALLS_BEGIN) : at;
    for (;;) {
        i = tc_skip_ws(t, len, i);
        if (i >= len) return;
        if (tc_starts(t, len, i, DS_CALLS_END)) {
            tc_content_until(t, len, i + strlen(DS_CALLS_END), NULL, 0, final, out, NULL);
            return;
        }
        if (!tc_starts(t, len, i, DS_CALL_BEGIN)) {
            if (!final && (tc_maybe(t, len, i, DS_CALL_BEGIN) || tc_maybe(t, len, i, DS_CALLS_END))) return;
            rest_is_content(t, len, i, out);
            return;
        }
        i += strlen(DS_CALL_BEGIN);
        size_t sep = tc_find(t, len, i, DS_SEP);
        if (sep == (size_t)-1) return;
        size_t a = sep + strlen(DS_SEP);
        const char *name = t + i;
        size_t name_len = sep - i;
        bool fenced = false;
        if (name_len == 8 && memcmp(name, "function", 8) == 0) {
            /* R1: function<｜tool▁sep｜>NAME\n```json\n{...}\n``` */
            size_t nl = tc_find(t, len, a, "\n");
            if (nl == (size_t)-1) return;
            name = t + a;
            name_len = nl - a;
            a = tc_skip_ws(t, len, nl);
            if (tc_starts(t, len, a, "```json")) a += 7, fenced = true;
            else if (!final && tc_maybe(t, len, a, "```json")) return;
        }
        while (name_len > 0 && (name[name_len - 1] == ' ' || name[name_len - 1] == '\r')) name_len--;
        size_t e = len;
        int r = tc_call_json_args(name, name_len, t, len, a, final, out, &e);
        if (r < 0) rest_is_content(t, len, e, out);
        if (r <= 0) return;
        i = tc_skip_ws(t, len, e);
        if (fenced) {
            if (tc_starts(t, len, i, "```")) i = tc_skip_ws(t, len, i + 3);
            else if (!final && tc_maybe(t, len, i, "```")) return;
        }
        if (tc_starts(t, len, i, DS_CALL_END)) i += strlen(DS_CALL_END);
        else if (!final && tc_maybe(t, len, i, DS_CALL_END)) return;
    }
}

/* ---- Functionary v3.1 and v3.2 ------------------------------------------------------------------------------ */

/* Code after <|python_tag|> (or to python): {"code": "..."} streamed as far as it goes. */
static void python_code_call(const char *t, size_t len, size_t pos, size_t stop, bool final, sy_chat_parse *out) {
    sy_tool_call *c = tc_add_call(out, "python", 6);
    if (c == NULL) return;
    sy_buf_puts(&c->arguments, "{\"code\": ");
    sy_buf q;
    sy_buf_init(&q);
    tc_json_quote(&q, t + pos, stop - pos);
    /* Without the closing quote until the end, so each parse extends the last. */
    sy_buf_append(&c->arguments, q.data, q.len - 1);
    sy_buf_free(&q);
    if (final) {
        sy_buf_puts(&c->arguments, "\"}");
        c->complete = true;
    }
}

void tc_body_functionary31(const sy_chat_parse_options *o, const char *t, size_t len, size_t pos, bool final,
                           sy_chat_parse *out) {
    (void)o;
    static const char *const open[] = {"<function=", "<|python_tag|>"};
    for (;;) {
        size_t which = 0;
        size_t at = tc_content_until(t, len, pos, open, 2, final, out, &which);
        if (at == (size_t)-1) return;
        size_t i = at + strlen(open[which]);
        if (which == 1) {
            python_code_call(t, len, i, len, final, out);
            return;
        }
        size_t gt = tc_find(t, len, i, ">");
        if (gt == (size_t)-1) return;
        size_t e = len;
        int r = tc_call_json_args(t + i, gt - i, t, len, gt + 1, final, out, &e);
        if (r < 0) rest_is_content(t, len, e, out);
        if (r <= 0) return;
        i = tc_skip_ws(t, len, e);
        if (tc_starts(t, len, i, "</function>")) i += strlen("</function>");
        else if (!final && tc_maybe(t, len, i, "</function>")) return;
        pos = i;
    }
}

void tc_body_functionary32(const sy_chat_parse_options *o, const char *t, size_t len, size_t pos, bool final,
                           sy_chat_parse *out) {
    (void)o;
    /* The generation prompt ends with ">>>": the output starts with a recipient line, "all" for text. */
    size_t i = pos;
    if (tc_starts(t, len, i, ">>>")) i += 3;
    for (;;) {
        size_t nl = tc_find(t, len, i, "\n");
        if (nl == (size_t)-1) {
            if (final) rest_is_content(t, len, i, out);
            return;
        }
        const char *name = t + i;
        size_t name_len = nl - i;
        i = nl + 1;
        static const char *const next[] = {">>>"};
        if (name_len == 3 && memcmp(name, "all", 3) == 0) {
            size_t at = tc_content_until(t, len, i, next, 1, final, out, NULL);
            if (at == (size_t)-1) return;
            i = at + 3;
            continue;
        }
        if (name_len == 6 && memcmp(name, "python", 6) == 0) {
            size_t at = tc_find(t, len, i, ">>>");
            python_code_call(t, len, i, at == (size_t)-1 ? len - (final ? 0 : tc_partial(t, len, i, ">>>")) : at,
                             final || at != (size_t)-1, out);
            if (at == (size_t)-1) return;
            i = at + 3;
            continue;
        }
        size_t e = len;
        int r = tc_call_json_args(name, name_len, t, len, i, final, out, &e);
        if (r < 0) rest_is_content(t, len, e, out);
        if (r <= 0) return;
        i = tc_skip_ws(t, len, e);
        if (!tc_starts(t, len, i, ">>>")) {
            if (final) rest_is_content(t, len, i, out);
            return;
        }
        i += 3;
    }
}

/* ---- Kimi K2 ------------------------------------------------------------------------------------------------ */

void tc_body_kimi(const sy_chat_parse_options *o, const char *t, size_t len, size_t pos, bool final,
                  sy_chat_parse *out) {
    (void)o;
    static const char *const open[] = {"<|tool_calls_section_begin|>"};
    size_t at = tc_content_until(t, len, pos, open, 1, final, out, NULL);
    if (at == (size_t)-1) return;
    size_t i = at + strlen(open[0]);
    for (;;) {
        i = tc_skip_ws(t, len, i);
        if (i >= len) return;
        if (tc_starts(t, len, i, "<|tool_calls_section_end|>")) {
            tc_content_until(t, len, i + strlen("<|tool_calls_section_end|>"), NULL, 0, final, out, NULL);
            return;
        }
        if (!tc_starts(t, len, i, "<|tool_call_begin|>")) {
            if (!final && (tc_maybe(t, len, i, "<|tool_call_begin|>") || tc_maybe(t, len, i, "<|tool_calls_section_end|>")))
                return;
            rest_is_content(t, len, i, out);
            return;
        }
        i += strlen("<|tool_call_begin|>");
        size_t ab = tc_find(t, len, i, "<|tool_call_argument_begin|>");
        if (ab == (size_t)-1) return;
        /* The id is functions.NAME:INDEX. */
        size_t id_s = tc_skip_ws(t, len, i), id_e = ab;
        while (id_e > id_s && (t[id_e - 1] == ' ' || t[id_e - 1] == '\n')) id_e--;
        size_t ns = id_s, ne = id_e;
        if (ne - ns > 10 && memcmp(t + ns, "functions.", 10) == 0) ns += 10;
        for (size_t k = ne; k > ns; k--)
            if (t[k - 1] == ':') {
                ne = k - 1;
                break;
            }
        size_t before = out->n_calls, e = len;
        int r = tc_call_json_args(t + ns, ne - ns, t, len, ab + strlen("<|tool_call_argument_begin|>"), final, out, &e);
        if (out->n_calls > before) {
            sy_tool_call *c = &out->calls[out->n_calls - 1];
            c->id = sy_xmalloc(id_e - id_s + 1);
            memcpy(c->id, t + id_s, id_e - id_s);
            c->id[id_e - id_s] = '\0';
        }
        if (r < 0) rest_is_content(t, len, e, out);
        if (r <= 0) return;
        i = tc_skip_ws(t, len, e);
        if (tc_starts(t, len, i, "<|tool_call_end|>")) i += strlen("<|tool_call_end|>");
        else if (!final && tc_maybe(t, len, i, "<|tool_call_end|>")) return;
    }
}
