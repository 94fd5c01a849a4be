/* Chat templates: recognise the model's format by its template's markers and render it in C. */
#include "chat/chat_template.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/buf.h"
#include "base/util.h"

static const char *const format_names[] = {
    [SY_CHAT_FORMAT_RAW] = "raw",
    [SY_CHAT_FORMAT_CHATML] = "chatml",
    [SY_CHAT_FORMAT_LLAMA3] = "llama3",
    [SY_CHAT_FORMAT_LLAMA2] = "llama2",
};

int sy_chat_format_from_name(const char *name, sy_chat_format *out) {
    if (name == NULL) return -1;
    for (size_t i = 0; i < sizeof format_names / sizeof *format_names; i++) {
        if (strcmp(name, format_names[i]) == 0) {
            *out = (sy_chat_format)i;
            return 0;
        }
    }
    return -1;
}

const char *sy_chat_format_name(sy_chat_format format) {
    if ((size_t)format < sizeof format_names / sizeof *format_names) return format_names[format];
    return "unknown";
}

sy_chat_format sy_chat_format_detect(const char *jinja) {
    if (jinja == NULL || *jinja == '\0') return SY_CHAT_FORMAT_RAW;
    if (strstr(jinja, "<|im_start|>") != NULL) return SY_CHAT_FORMAT_CHATML;
    if (strstr(jinja, "<|start_header_id|>") != NULL) return SY_CHAT_FORMAT_LLAMA3;
    if (strstr(jinja, "[INST]") != NULL) return SY_CHAT_FORMAT_LLAMA2;
    return SY_CHAT_FORMAT_RAW;
}

/* Decode the escapes of a Jinja string literal body (src[0..len)) into a new string; NULL on a malformed one. */
static char *unescape_literal(const char *src, size_t len) {
    char *out = sy_xmalloc(len + 1);
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        char c = src[i];
        if (c != '\\') {
            out[n++] = c;
            continue;
        }
        if (++i >= len) {
            free(out);
            return NULL;
        }
        switch (src[i]) {
        case 'n': out[n++] = '\n'; break;
        case 't': out[n++] = '\t'; break;
        case 'r': out[n++] = '\r'; break;
        case '\\': out[n++] = '\\'; break;
        case '\'': out[n++] = '\''; break;
        case '"': out[n++] = '"'; break;
        default: free(out); return NULL;
        }
    }
    out[n] = '\0';
    return out;
}

char *sy_chat_template_default_system(const char *jinja) {
    if (jinja == NULL) return NULL;
    /* A template that inserts a fixed system turn spells it as one literal: the opening marker, "system", an
     * escaped newline, the prompt, and the closing marker, all inside the same quotes. A marker followed by a
     * closing quote instead ('<|im_start|>system\n' + messages[0].content) is the user's system turn. */
    static const char opener[] = "<|im_start|>system";
    static const char closer[] = "<|im_end|>";
    const char *p = jinja;
    while ((p = strstr(p, opener)) != NULL) {
        if (p == jinja) { /* the literal must sit inside quotes */
            p += sizeof opener - 1;
            continue;
        }
        char quote = p[-1];
        const char *body = p + sizeof opener - 1;
        p = body;
        /* The newline after "system" is escaped in most templates; some GGUF files carry it as a real one. */
        if (body[0] == '\\' && body[1] == 'n') body += 2;
        else if (body[0] == '\n') body += 1;
        else continue;
        if (quote != '\'' && quote != '"') continue;
        const char *end = strstr(body, closer);
        if (end == NULL || end == body) continue;
        /* The prompt must not leave the literal: no unescaped quote of the same kind before the closer. */
        int leaves = 0;
        for (const char *q = body; q < end; q++) {
            if (*q == '\\') {
                if (q + 1 < end) q++;
                continue;
            }
            if (*q == quote) {
                leaves = 1;
                break;
            }
        }
        if (leaves) continue;
        char *text = unescape_literal(body, (size_t)(end - body));
        if (text != NULL) return text;
    }
    return NULL;
}

static int set_text(char **dst, const char *given, const char *fallback) {
    const char *s = (given != NULL && *given != '\0') ? given : fallback;
    *dst = s != NULL ? sy_strdup(s) : NULL;
    return 0;
}

int sy_chat_template_init(sy_chat_template *t, const char *override_name, const char *jinja, const char *bos_text,
                          const char *eos_text, char *err, size_t err_size) {
    memset(t, 0, sizeof *t);
    if (override_name != NULL && *override_name != '\0') {
        if (sy_chat_format_from_name(override_name, &t->format) != 0) {
            snprintf(err, err_size, "chat_template '%.64s' is not one of chatml, llama3, llama2, raw", override_name);
            return -1;
        }
    } else {
        t->format = sy_chat_format_detect(jinja);
    }
    switch (t->format) {
    case SY_CHAT_FORMAT_CHATML:
        t->default_system = sy_chat_template_default_system(jinja);
        break;
    case SY_CHAT_FORMAT_LLAMA3:
        set_text(&t->bos_text, bos_text, "<|begin_of_text|>");
        if (jinja != NULL && strstr(jinja, "Cutting Knowledge Date") != NULL) {
            t->llama3_date_header = true;
            /* Llama 3.2 templates date the turn with strftime_now when the renderer offers it; 3.1 uses the
             * fixed date below. */
            snprintf(t->date, sizeof t->date, "26 Jul 2024");
            if (strstr(jinja, "strftime_now") != NULL) {
                time_t now = time(NULL);
                struct tm tm;
                static const char *const months[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                                     "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
                if (gmtime_r(&now, &tm) != NULL && tm.tm_mon >= 0 && tm.tm_mon < 12)
                    snprintf(t->date, sizeof t->date, "%02d %s %04d", tm.tm_mday, months[tm.tm_mon],
                             tm.tm_year + 1900);
            }
        }
        break;
    case SY_CHAT_FORMAT_LLAMA2:
        set_text(&t->bos_text, bos_text, "<s>");
        set_text(&t->eos_text, eos_text, "</s>");
        break;
    case SY_CHAT_FORMAT_RAW: break;
    }
    return 0;
}

void sy_chat_template_free(sy_chat_template *t) {
    if (t == NULL) return;
    free(t->default_system);
    free(t->bos_text);
    free(t->eos_text);
    memset(t, 0, sizeof *t);
}

static int role_ok(const char *role) {
    if (role == NULL) return 0;
    size_t n = strlen(role);
    if (n == 0 || n > SY_CHAT_MAX_ROLE_LEN) return 0;
    for (size_t i = 0; i < n; i++)
        if (!((role[i] >= 'a' && role[i] <= 'z') || role[i] == '_')) return 0;
    return 1;
}

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

/* Jinja's trim / Python's strip() on ASCII whitespace. */
static void strip(const char **s, size_t *len) {
    while (*len > 0 && is_space(**s)) (*s)++, (*len)--;
    while (*len > 0 && is_space((*s)[*len - 1])) (*len)--;
}

static void append_stripped(sy_buf *b, const char *s, size_t len) {
    strip(&s, &len);
    sy_buf_append(b, s, len);
}

static void render_chatml(const sy_chat_template *t, const sy_chat_message *m, size_t n, bool gen, sy_buf *b) {
    if (t->default_system != NULL && (n == 0 || strcmp(m[0].role, "system") != 0)) {
        sy_buf_puts(b, "<|im_start|>system\n");
        sy_buf_puts(b, t->default_system);
        sy_buf_puts(b, "<|im_end|>\n");
    }
    for (size_t i = 0; i < n; i++) {
        sy_buf_puts(b, "<|im_start|>");
        sy_buf_puts(b, m[i].role);
        sy_buf_puts(b, "\n");
        sy_buf_append(b, m[i].content, m[i].content_len);
        sy_buf_puts(b, "<|im_end|>\n");
    }
    if (gen) sy_buf_puts(b, "<|im_start|>assistant\n");
}

static void llama3_turn(sy_buf *b, const char *role, const char *content, size_t len) {
    sy_buf_puts(b, "<|start_header_id|>");
    sy_buf_puts(b, role);
    sy_buf_puts(b, "<|end_header_id|>\n\n");
    append_stripped(b, content, len);
    sy_buf_puts(b, "<|eot_id|>");
}

static void render_llama3(const sy_chat_template *t, const sy_chat_message *m, size_t n, bool gen, sy_buf *b) {
    sy_buf_puts(b, t->bos_text != NULL ? t->bos_text : "<|begin_of_text|>");
    size_t first = 0;
    if (t->llama3_date_header) {
        /* Llama 3.1+: the system turn always comes first and carries the date lines. */
        const char *sys = "";
        size_t sys_len = 0;
        if (n > 0 && strcmp(m[0].role, "system") == 0) {
            sys = m[0].content;
            sys_len = m[0].content_len;
            first = 1;
        }
        sy_buf_puts(b, "<|start_header_id|>system<|end_header_id|>\n\n");
        sy_buf_puts(b, "Cutting Knowledge Date: December 2023\nToday Date: ");
        sy_buf_puts(b, t->date);
        sy_buf_puts(b, "\n\n");
        append_stripped(b, sys, sys_len);
        sy_buf_puts(b, "<|eot_id|>");
    }
    for (size_t i = first; i < n; i++) {
        /* 3.1+ templates name tool results "ipython". */
        const char *role = (t->llama3_date_header && strcmp(m[i].role, "tool") == 0) ? "ipython" : m[i].role;
        llama3_turn(b, role, m[i].content, m[i].content_len);
    }
    if (gen) sy_buf_puts(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

static int render_llama2(const sy_chat_template *t, const sy_chat_message *m, size_t n, sy_buf *b, char *err,
                         size_t err_size) {
    size_t first = 0;
    const sy_chat_message *sys = NULL;
    if (n > 0 && strcmp(m[0].role, "system") == 0) {
        sys = &m[0];
        first = 1;
    }
    for (size_t i = first; i < n; i++) {
        size_t k = i - first;
        const char *want = (k % 2 == 0) ? "user" : "assistant";
        if (strcmp(m[i].role, want) != 0) {
            snprintf(err, err_size,
                     "messages[%zu]: role '%s' where '%s' was expected: this model's chat format (llama2) needs an "
                     "optional system message, then user and assistant messages alternating",
                     i, m[i].role, want);
            return -1;
        }
        if (k % 2 == 0) {
            /* The system prompt is folded into the first user turn; the whole turn is then stripped. */
            sy_buf content;
            sy_buf_init(&content);
            if (k == 0 && sys != NULL) {
                sy_buf_puts(&content, "<<SYS>>\n");
                sy_buf_append(&content, sys->content, sys->content_len);
                sy_buf_puts(&content, "\n<</SYS>>\n\n");
            }
            sy_buf_append(&content, m[i].content, m[i].content_len);
            sy_buf_puts(b, t->bos_text != NULL ? t->bos_text : "<s>");
            sy_buf_puts(b, "[INST] ");
            append_stripped(b, content.data, content.len);
            sy_buf_puts(b, " [/INST]");
            sy_buf_free(&content);
        } else {
            sy_buf_puts(b, " ");
            append_stripped(b, m[i].content, m[i].content_len);
            sy_buf_puts(b, " ");
            sy_buf_puts(b, t->eos_text != NULL ? t->eos_text : "</s>");
        }
    }
    return 0;
}

static void render_raw(const sy_chat_message *m, size_t n, sy_buf *b) {
    for (size_t i = 0; i < n; i++) {
        if (i > 0) sy_buf_puts(b, "\n\n");
        sy_buf_append(b, m[i].content, m[i].content_len);
    }
}

char *sy_chat_render(const sy_chat_template *t, const sy_chat_message *messages, size_t n_messages,
                     bool add_generation_prompt, size_t *len, char *err, size_t err_size) {
    for (size_t i = 0; i < n_messages; i++) {
        if (!role_ok(messages[i].role)) {
            snprintf(err, err_size, "messages[%zu]: role must be 1 to %d characters of a-z and _", i,
                     SY_CHAT_MAX_ROLE_LEN);
            return NULL;
        }
        if (messages[i].content == NULL && messages[i].content_len > 0) {
            snprintf(err, err_size, "messages[%zu]: content is missing", i);
            return NULL;
        }
    }
    sy_buf b;
    sy_buf_init(&b);
    switch (t->format) {
    case SY_CHAT_FORMAT_CHATML: render_chatml(t, messages, n_messages, add_generation_prompt, &b); break;
    case SY_CHAT_FORMAT_LLAMA3: render_llama3(t, messages, n_messages, add_generation_prompt, &b); break;
    case SY_CHAT_FORMAT_LLAMA2:
        if (render_llama2(t, messages, n_messages, &b, err, err_size) != 0) {
            sy_buf_free(&b);
            return NULL;
        }
        break;
    case SY_CHAT_FORMAT_RAW: render_raw(messages, n_messages, &b); break;
    }
    if (len != NULL) *len = b.len;
    return sy_buf_take(&b);
}
