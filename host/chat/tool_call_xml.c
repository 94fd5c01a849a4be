/* Tool-call formats with XML-like parameters (Qwen3-Coder, GLM 4.x, MiniMax M2), pythonic calls (LFM2, Llama's
 * built-in tools) and gpt-oss's harmony channels. Arguments are built as JSON one complete parameter at a time,
 * so every parse of a prefix extends the last. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "chat/tool_call_internal.h"

/* The schema type of a tool's parameter, from the request's tools; NULL when unknown. */
static const char *param_type(const sy_chat_parse_options *o, const char *tool, const char *key, size_t key_len) {
    if (o == NULL || o->tools == NULL || tool == NULL) return NULL;
    const cJSON *t;
    cJSON_ArrayForEach(t, o->tools) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
        if (!cJSON_IsString(name) || strcmp(name->valuestring, tool) != 0) continue;
        const cJSON *props = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(fn, "parameters"),
                                                              "properties");
        const cJSON *p;
        cJSON_ArrayForEach(p, props) {
            if (p->string != NULL && strlen(p->string) == key_len && memcmp(p->string, key, key_len) == 0) {
                const cJSON *type = cJSON_GetObjectItemCaseSensitive(p, "type");
                return cJSON_IsString(type) ? type->valuestring : NULL;
            }
        }
    }
    return NULL;
}

void tc_append_param(const sy_chat_parse_options *o, const char *tool, sy_buf *args, const char *key, size_t key_len,
                     const char *value, size_t value_len) {
    if (args->len > 1) sy_buf_puts(args, ",");
    tc_json_quote(args, key, key_len);
    sy_buf_puts(args, ":");
    const char *type = param_type(o, tool, key, key_len);
    bool is_string = type != NULL && strcmp(type, "string") == 0;
    /* A string parameter keeps its text, unless the text is a JSON string (constrained by a pattern or format). */
    if (!is_string || (value_len >= 2 && value[0] == '"')) {
        cJSON *v = cJSON_ParseWithLength(value, value_len);
        if (v != NULL && is_string && !cJSON_IsString(v)) {
            cJSON_Delete(v);
            v = NULL;
        }
        if (v != NULL) {
            char *s = cJSON_PrintUnformatted(v);
            cJSON_Delete(v);
            if (s != NULL) {
                sy_buf_puts(args, s);
                cJSON_free(s);
                return;
            }
        }
    }
    tc_json_quote(args, value, value_len);
}

/* A value between tags loses one newline on each side (the templates put it on its own line). */
static void trim_newlines(const char *t, size_t *s, size_t *e) {
    if (*s < *e && t[*s] == '\n') (*s)++;
    if (*e > *s && t[*e - 1] == '\n') (*e)--;
}

static bool maybe(const char *t, size_t len, size_t pos, const char *marker) {
    size_t m = strlen(marker);
    return pos <= len && len - pos < m && memcmp(t + pos, marker, len - pos) == 0;
}

/* ---- Qwen3-Coder: <tool_call><function=N><parameter=P>V</parameter></function></tool_call> ------------------- */

static void xml_function_calls(const sy_chat_parse_options *o, const char *t, size_t len, size_t pos, bool final,
                               sy_chat_parse *out, const char *const *open, const char *const *close, size_t n_open) {
    for (;;) {
        size_t which = 0;
        size_t at = tc_content_until(t, len, pos, open, n_open, final, out, &which);
        if (at == (size_t)-1) return;
        size_t i = at + strlen(open[which]);
        if (strcmp(open[which], "<function=") != 0) {
            i = tc_skip_ws(t, len, i);
            if (i >= len || maybe(t, len, i, "<function=")) return;
            if (!tc_starts(t, len, i, "<function=")) {
                sy_buf_append(&out->content, t + at, i - at);
                pos = i;
                continue;
            }
            i += strlen("<function=");
        }
        size_t gt = tc_find(t, len, i, ">");
        if (gt == (size_t)-1) return;
        sy_tool_call *c = tc_add_call(out, t + i, gt - i);
        if (c == NULL) return;
        sy_buf_puts(&c->arguments, "{");
        i = gt + 1;
        for (;;) {
            i = tc_skip_ws(t, len, i);
            if (i >= len) return;
            if (tc_starts(t, len, i, "</function>")) {
                sy_buf_puts(&c->arguments, "}");
                c->complete = true;
                i += strlen("</function>");
                break;
            }
            if (!tc_starts(t, len, i, "<parameter=")) {
                if (!final && (maybe(t, len, i, "</function>") || maybe(t, len, i, "<parameter="))) return;
                if (final) {
                    sy_buf_puts(&c->arguments, "}");
                    c->complete = true;
                }
                return;
            }
            size_t ks = i + strlen("<parameter=");
            size_t kgt = tc_find(t, len, ks, ">");
            if (kgt == (size_t)-1) return;
            size_t vend = tc_find(t, len, kgt + 1, "</parameter>");
            if (vend == (size_t)-1) return;
            size_t vs = kgt + 1, ve = vend;
            trim_newlines(t, &vs, &ve);
            tc_append_param(o, c->name, &c->arguments, t + ks, kgt - ks, t + vs, ve - vs);
            i = vend + strlen("</parameter>");
        }
        i = tc_skip_ws(t, len, i);
        if (close[which] != NULL) {
            if (tc_starts(t, len, i, close[which])) i += strlen(close[which]);
            else if (!final && maybe(t, len, i, close[which])) return;
        }
        pos = i;
    }
}

void tc_body_qwen3_coder(const sy_chat_parse_options *o, const char *t, size_t len, size_t pos, bool final,
                         sy_chat_parse *out) {
    static const char *const open[] = {"<tool_call>", "<seed:tool_call>", "<function="};
    static const char *const close[] = {"</tool_call>", "</seed:tool_call>", NULL};
    xml_function_calls(o, t, len, pos, final, out, open, close, 3);
}

/* ---- GLM 4.5 / 4.6: <tool_call>N\n<arg_key>k</arg_key>\n<arg_value>v</arg_value>\n</tool_call> ---------------- */

void tc_body_glm4(const sy_chat_parse_options *o, const char *t, size_t len, size_t pos, bool final,
                  sy_chat_parse *out) {
    static const char *const open[] = {"<tool_call>"};
    for (;;) {
        size_t at = tc_content_until(t, len, pos, open, 1, final, out, NULL);
        if (at == (size_t)-1) return;
        size_t i = at + strlen(open[0]);
        /* The name runs to the first newline or tag. */
        size_t ne = i;
        while (ne < len && t[ne] != '\n' && t[ne] != '<') ne++;
        if (ne >= len) return;
        size_t ns = i, nend = ne;
        while (ns < ne && (t[ns] == ' ' || t[ns] == '\t' || t[ns] == '\r')) ns++;
        while (nend > ns && t[nend - 1] == ' ') nend--;
        sy_tool_call *c = tc_add_call(out, t + ns, nend - ns);
        if (c == NULL) return;
        sy_buf_puts(&c->arguments, "{");
        i = ne;
        for (;;) {
            i = tc_skip_ws(t, len, i);
            if (i >= len) return;
            if (tc_starts(t, len, i, "</tool_call>")) {
                sy_buf_puts(&c->arguments, "}");
                c->complete = true;
                i += strlen("</tool_call>");
                break;
            }
            if (!tc_starts(t, len, i, "<arg_key>")) {
                if (!final && (maybe(t, len, i, "</tool_call>") || maybe(t, len, i, "<arg_key>"))) return;
                if (final) {
                    sy_buf_puts(&c->arguments, "}");
                    c->complete = true;
                }
                return;
            }
            size_t ks = i + strlen("<arg_key>");
            size_t ke = tc_find(t, len, ks, "</arg_key>");
            if (ke == (size_t)-1) return;
            size_t vo = tc_skip_ws(t, len, ke + strlen("</arg_key>"));
            if (vo >= len || maybe(t, len, vo, "<arg_value>")) return;
            if (!tc_starts(t, len, vo, "<arg_value>")) {
                if (final) {
                    sy_buf_puts(&c->arguments, "}");
                    c->complete = true;
                }
                return;
            }
            size_t vs = vo + strlen("<arg_value>");
            size_t ve = tc_find(t, len, vs, "</arg_value>");
            if (ve == (size_t)-1) return;
            tc_append_param(o, c->name, &c->arguments, t + ks, ke - ks, t + vs, ve - vs);
            i = ve + strlen("</arg_value>");
        }
        pos = i;
    }
}

/* ---- MiniMax M2: <minimax:tool_call><invoke name="N"><parameter name="k">v</parameter></invoke>... ----------- */

void tc_body_minimax_m2(const sy_chat_parse_options *o, const char *t, size_t len, size_t pos, bool final,
                        sy_chat_parse *out) {
    static const char *const open[] = {"<minimax:tool_call>"};
    for (;;) {
        size_t at = tc_content_until(t, len, pos, open, 1, final, out, NULL);
        if (at == (size_t)-1) return;
        size_t i = at + strlen(open[0]);
        for (;;) {
            i = tc_skip_ws(t, len, i);
            if (i >= len) return;
            if (tc_starts(t, len, i, "</minimax:tool_call>")) {
                i += strlen("</minimax:tool_call>");
                break;
            }
            if (!tc_starts(t, len, i, "<invoke name=\"")) {
                if (!final && (maybe(t, len, i, "<invoke name=\"") || maybe(t, len, i, "</minimax:tool_call>"))) return;
                if (final) sy_buf_append(&out->content, t + i, len - i);
                return;
            }
            size_t ns = i + strlen("<invoke name=\"");
            size_t ne = tc_find(t, len, ns, "\">");
            if (ne == (size_t)-1) return;
            sy_tool_call *c = tc_add_call(out, t + ns, ne - ns);
            if (c == NULL) return;
            sy_buf_puts(&c->arguments, "{");
            i = ne + 2;
            for (;;) {
                i = tc_skip_ws(t, len, i);
                if (i >= len) return;
                if (tc_starts(t, len, i, "</invoke>")) {
                    sy_buf_puts(&c->arguments, "}");
                    c->complete = true;
                    i += strlen("</invoke>");
                    break;
                }
                if (!tc_starts(t, len, i, "<parameter name=\"")) {
                    if (!final && (maybe(t, len, i, "</invoke>") || maybe(t, len, i, "<parameter name=\""))) return;
                    if (final) {
                        sy_buf_puts(&c->arguments, "}");
                        c->complete = true;
                    }
                    return;
                }
                size_t ks = i + strlen("<parameter name=\"");
                size_t ke = tc_find(t, len, ks, "\">");
                if (ke == (size_t)-1) return;
                size_t vend = tc_find(t, len, ke + 2, "</parameter>");
                if (vend == (size_t)-1) return;
                size_t vs = ke + 2, ve = vend;
                trim_newlines(t, &vs, &ve);
                tc_append_param(o, c->name, &c->arguments, t + ks, ke - ks, t + vs, ve - vs);
                i = vend + strlen("</parameter>");
            }
        }
        pos = i;
    }
}

/* ---- pythonic calls: name(k=v, ...) ------------------------------------------------------------------------- */

#define PY_MAX_DEPTH 64

static bool ident_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
           c == '-';
}

/* A Python literal at pos as JSON into js: strings, numbers, True/False/None, lists, tuples, dicts. */
static int py_value(const char *t, size_t len, size_t pos, size_t *end, sy_buf *js, int depth) {
    if (depth > PY_MAX_DEPTH) return -1;
    size_t i = tc_skip_ws(t, len, pos);
    if (i >= len) return 0;
    char c = t[i];
    if (c == '"' || c == '\'') {
        sy_buf s;
        sy_buf_init(&s);
        size_t k = i + 1;
        for (;;) {
            if (k >= len) {
                sy_buf_free(&s);
                return 0;
            }
            if (t[k] == c) break;
            if (t[k] == '\\') {
                if (k + 1 >= len) {
                    sy_buf_free(&s);
                    return 0;
                }
                char e = t[k + 1];
                if (e == 'u') {
                    /* A JSON \uXXXX (the grammar writes JSON strings): decoded by the JSON reader. */
                    size_t je;
                    sy_buf one;
                    sy_buf_init(&one);
                    char tmp[16] = "\"\\u";
                    if (k + 6 > len) {
                        sy_buf_free(&one);
                        sy_buf_free(&s);
                        return 0;
                    }
                    memcpy(tmp + 3, t + k + 2, 4);
                    tmp[7] = '"';
                    if (tc_json_string(tmp, 8, 0, &je, &one) == 1) sy_buf_append(&s, one.data, one.len);
                    sy_buf_free(&one);
                    k += 6;
                    continue;
                }
                char m = e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e;
                sy_buf_append(&s, &m, 1);
                k += 2;
                continue;
            }
            sy_buf_append(&s, t + k, 1);
            k++;
        }
        tc_json_quote(js, s.data ? s.data : "", s.len);
        sy_buf_free(&s);
        *end = k + 1;
        return 1;
    }
    if (c == '[' || c == '(' || c == '{') {
        char close = c == '[' ? ']' : c == '(' ? ')' : '}';
        sy_buf_puts(js, c == '{' ? "{" : "[");
        size_t k = i + 1;
        bool first = true;
        for (;;) {
            k = tc_skip_ws(t, len, k);
            if (k >= len) return 0;
            if (t[k] == close) {
                sy_buf_puts(js, c == '{' ? "}" : "]");
                *end = k + 1;
                return 1;
            }
            if (t[k] == ',') {
                k++;
                continue;
            }
            if (!first) sy_buf_puts(js, ",");
            first = false;
            size_t e;
            if (c == '{') {
                sy_buf key;
                sy_buf_init(&key);
                int r = py_value(t, len, k, &e, &key, depth + 1);
                if (r <= 0 || key.len == 0 || key.data[0] != '"') {
                    sy_buf_free(&key);
                    return r <= 0 ? r : -1;
                }
                sy_buf_append(js, key.data, key.len);
                sy_buf_free(&key);
                k = tc_skip_ws(t, len, e);
                if (k >= len) return 0;
                if (t[k] != ':') return -1;
                sy_buf_puts(js, ":");
                k++;
            }
            int r = py_value(t, len, k, &e, js, depth + 1);
            if (r <= 0) return r;
            k = e;
        }
    }
    size_t s = i;
    while (i < len && ident_char(t[i])) i++;
    if (i >= len) return 0;
    size_t n = i - s;
    if ((n == 4 && memcmp(t + s, "True", 4) == 0) || (n == 4 && memcmp(t + s, "true", 4) == 0)) sy_buf_puts(js, "true");
    else if ((n == 5 && memcmp(t + s, "False", 5) == 0) || (n == 5 && memcmp(t + s, "false", 5) == 0))
        sy_buf_puts(js, "false");
    else if ((n == 4 && memcmp(t + s, "None", 4) == 0) || (n == 4 && memcmp(t + s, "null", 4) == 0))
        sy_buf_puts(js, "null");
    else {
        cJSON *v = cJSON_ParseWithLength(t + s, n);
        bool num = v != NULL && cJSON_IsNumber(v);
        cJSON_Delete(v);
        if (!num) return -1;
        sy_buf_append(js, t + s, n);
    }
    *end = i;
    return 1;
}

int tc_python_call(const char *t, size_t len, size_t pos, bool final, sy_chat_parse *out, size_t *end,
                   bool strip_dot_call);

int tc_python_call(const char *t, size_t len, size_t pos, bool final, sy_chat_parse *out, size_t *end,
                   bool strip_dot_call) {
    (void)final;
    size_t i = tc_skip_ws(t, len, pos);
    size_t ns = i;
    while (i < len && ident_char(t[i])) i++;
    if (i >= len) return 0;
    if (t[i] != '(' || i == ns) return -1;
    size_t ne = i;
    if (strip_dot_call && ne - ns > 5 && memcmp(t + ne - 5, ".call", 5) == 0) ne -= 5;
    sy_tool_call *c = tc_add_call(out, t + ns, ne - ns);
    if (c == NULL) return -1;
    sy_buf_puts(&c->arguments, "{");
    i++;
    for (;;) {
        i = tc_skip_ws(t, len, i);
        if (i >= len) return 0;
        if (t[i] == ')') {
            sy_buf_puts(&c->arguments, "}");
            c->complete = true;
            *end = i + 1;
            return 1;
        }
        if (t[i] == ',') {
            i++;
            continue;
        }
        size_t ks = i;
        while (i < len && ident_char(t[i])) i++;
        size_t ke = i;
        i = tc_skip_ws(t, len, i);
        if (i >= len) return 0;
        if (t[i] != '=' || ke == ks) goto broken;
        sy_buf v;
        sy_buf_init(&v);
        size_t e;
        int r = py_value(t, len, i + 1, &e, &v, 0);
        if (r == 1) {
            /* Complete only once the next character shows the value ended (a number may go on). */
            size_t k = tc_skip_ws(t, len, e);
            if (k >= len) r = 0;
        }
        if (r <= 0) {
            sy_buf_free(&v);
            if (r < 0) goto broken;
            return r;
        }
        if (c->arguments.len > 1) sy_buf_puts(&c->arguments, ",");
        tc_json_quote(&c->arguments, t + ks, ke - ks);
        sy_buf_puts(&c->arguments, ":");
        sy_buf_append(&c->arguments, v.data, v.len);
        sy_buf_free(&v);
        i = e;
    }
broken:
    /* The call was announced: it ends here with the parameters read so far; the rest is not part of it. */
    sy_buf_puts(&c->arguments, "}");
    c->complete = true;
    *end = i;
    return -1;
}

void tc_body_lfm2(const sy_chat_parse_options *o, const char *t, size_t len, size_t pos, bool final,
                  sy_chat_parse *out) {
    (void)o;
    static const char *const open[] = {"<|tool_call_start|>"};
    for (;;) {
        size_t at = tc_content_until(t, len, pos, open, 1, final, out, NULL);
        if (at == (size_t)-1) return;
        size_t i = tc_skip_ws(t, len, at + strlen(open[0]));
        if (i >= len) return;
        bool list = t[i] == '[';
        if (list) i++;
        for (;;) {
            i = tc_skip_ws(t, len, i);
            if (i >= len) return;
            if (list && t[i] == ']') {
                i++;
                break;
            }
            if (t[i] == ',') {
                i++;
                continue;
            }
            size_t e = i;
            int r = tc_python_call(t, len, i, final, out, &e, false);
            if (r < 0 && e < len) sy_buf_append(&out->content, t + e, len - e);
            if (r <= 0) return;
            i = e;
            if (!list) break;
        }
        i = tc_skip_ws(t, len, i);
        if (tc_starts(t, len, i, "<|tool_call_end|>")) i += strlen("<|tool_call_end|>");
        else if (!final && maybe(t, len, i, "<|tool_call_end|>")) return;
        pos = i;
    }
}

/* ---- gpt-oss (harmony) -------------------------------------------------------------------------------------- */

/* Messages: [<|start|>assistant][ to=functions.N]<|channel|>C[ to=functions.N][ <|constrain|>json]<|message|>BODY
 * ending at <|end|>, <|call|>, <|return|> or the next <|start|>. analysis is reasoning, a message to a function
 * is a call, the rest is content. */
void tc_parse_harmony(const sy_chat_parse_options *o, const char *t, size_t len, bool final, sy_chat_parse *out) {
    size_t i = 0;
    static const char *const ends[] = {"<|end|>", "<|call|>", "<|return|>", "<|start|>"};
    for (;;) {
        i = tc_skip_ws(t, len, i);
        if (i >= len) return;
        if (tc_starts(t, len, i, "<|start|>")) i += strlen("<|start|>");
        else if (!final && maybe(t, len, i, "<|start|>")) return;
        if (tc_starts(t, len, i, "assistant")) i += strlen("assistant");
        else if (!final && maybe(t, len, i, "assistant")) return;
        /* A header begins with the channel or the recipient; anything else is plain text to the end. */
        bool header = tc_starts(t, len, i, "<|channel|>") || tc_starts(t, len, i, " to=") ||
                      tc_starts(t, len, i, "to=");
        if (!header) {
            if (!final && (maybe(t, len, i, "<|channel|>") || maybe(t, len, i, " to=") || maybe(t, len, i, "to=")))
                return;
            sy_buf_append(&out->content, t + i, len - i);
            return;
        }
        size_t msg = tc_find(t, len, i, "<|message|>");
        if (msg == (size_t)-1) {
            /* The header is still coming; at the end, a header without a message is text. */
            if (final) sy_buf_append(&out->content, t + i, len - i);
            return;
        }
        const char *h = t + i;
        size_t hl = msg - i;
        bool analysis = false, to_fn = false;
        const char *fn = NULL;
        size_t fn_len = 0;
        for (size_t k = 0; k + 13 <= hl; k++)
            if (memcmp(h + k, "to=functions.", 13) == 0) {
                fn = h + k + 13;
                size_t e = k + 13;
                while (e < hl && h[e] != ' ' && h[e] != '<' && h[e] != '\n') e++;
                fn_len = (size_t)(h + e - fn);
                to_fn = fn_len > 0;
                break;
            }
        for (size_t k = 0; k + 19 <= hl; k++)
            if (memcmp(h + k, "<|channel|>analysis", 19) == 0) analysis = true;
        size_t bs = msg + strlen("<|message|>");
        size_t which = 0, be = (size_t)-1;
        for (size_t k = 0; k < 4; k++) {
            size_t at = tc_find(t, len, bs, ends[k]);
            if (at < be) be = at, which = k;
        }
        bool ended = be != (size_t)-1;
        size_t stop = ended ? be : len;
        if (!ended && !final) {
            size_t hold = 0;
            for (size_t k = 0; k < 4; k++) {
                size_t hh = tc_partial(t, len, bs, ends[k]);
                if (hh > hold) hold = hh;
            }
            stop = len - hold;
        }
        if (to_fn) {
            sy_tool_call *c = tc_add_call(out, fn, fn_len);
            if (c == NULL) return;
            size_t s = tc_skip_ws(t, len, bs);
            if (s < stop) sy_buf_append(&c->arguments, t + s, stop - s);
            c->complete = ended || final;
        } else if (analysis && o->split_reasoning) {
            sy_buf_append(&out->reasoning, t + bs, stop - bs);
        } else {
            sy_buf_append(&out->content, t + bs, stop - bs);
        }
        if (!ended) return;
        i = be + (which == 3 ? 0 : strlen(ends[which]));
    }
}
