/* Chat output -> content, reasoning, tool calls: the formats' dispatch, the reasoning block, the stream. */
#include "chat/tool_call.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "chat/tool_call_internal.h"

static const char *const FORMAT_NAMES[SY_TOOL_FORMAT_COUNT] = {
    "none", "generic", "hermes", "qwen3-coder", "llama3", "mistral", "deepseek", "gpt-oss", "lfm2", "granite",
    "command-r", "functionary-v3.1", "functionary-v3.2", "kimi-k2", "glm4", "minimax-m1", "minimax-m2", "phi4",
};

const char *sy_tool_format_name(sy_tool_format f) {
    return (unsigned)f < SY_TOOL_FORMAT_COUNT ? FORMAT_NAMES[f] : "none";
}

int sy_tool_format_from_name(const char *name, sy_tool_format *out) {
    for (int i = 0; i < SY_TOOL_FORMAT_COUNT; i++)
        if (strcmp(name, FORMAT_NAMES[i]) == 0) {
            *out = (sy_tool_format)i;
            return 0;
        }
    return -1;
}

static bool has(const char *s, const char *needle) { return strstr(s, needle) != NULL; }

void sy_template_traits_detect(const char *j, sy_template_traits *t) {
    memset(t, 0, sizeof *t);
    t->tool_format = SY_TOOL_FORMAT_GENERIC;
    t->think_open = "<think>";
    t->think_close = "</think>";
    if (j == NULL || j[0] == '\0') return;
    /* The most specific markers first: several formats share <tool_call>. */
    sy_tool_format f = SY_TOOL_FORMAT_GENERIC;
    if (has(j, "<|channel|>")) f = SY_TOOL_FORMAT_GPT_OSS;
    else if (has(j, "<|tool_calls_section_begin|>")) f = SY_TOOL_FORMAT_KIMI_K2;
    else if (has(j, "tool\xe2\x96\x81" "calls\xe2\x96\x81" "begin")) f = SY_TOOL_FORMAT_DEEPSEEK;
    else if (has(j, "<minimax:tool_call>")) f = SY_TOOL_FORMAT_MINIMAX_M2;
    else if (has(j, "]<]minimax[>[")) f = SY_TOOL_FORMAT_GENERIC; /* MiniMax M3's nested XML: not parsed */
    else if (has(j, "<arg_key>")) f = SY_TOOL_FORMAT_GLM4;
    else if (has(j, "<function=") && has(j, "<parameter=")) f = SY_TOOL_FORMAT_QWEN3_CODER;
    else if (has(j, "<tool_call>")) f = SY_TOOL_FORMAT_HERMES;
    else if (has(j, "<tool_calls>")) f = SY_TOOL_FORMAT_MINIMAX_M1;
    else if (has(j, "[TOOL_CALLS]")) f = SY_TOOL_FORMAT_MISTRAL;
    else if (has(j, "<|START_ACTION|>") || (has(j, "Action:") && has(j, "tool_name"))) f = SY_TOOL_FORMAT_COMMAND_R;
    else if (has(j, "<|tool_call_start|>") || has(j, "<|tool_list_start|>") || has(j, "List of tools: [")) f = SY_TOOL_FORMAT_LFM2;
    else if (has(j, "<|/tool_call|>")) f = SY_TOOL_FORMAT_PHI4;
    else if (has(j, "<|tool_call|>")) f = SY_TOOL_FORMAT_GRANITE;
    else if (has(j, ">>>all")) f = SY_TOOL_FORMAT_FUNCTIONARY_3_2;
    else if (has(j, "<function=") && has(j, "<|start_header_id|>")) f = SY_TOOL_FORMAT_FUNCTIONARY_3_1;
    else if (has(j, "<|start_header_id|>") && has(j, "tools")) f = SY_TOOL_FORMAT_LLAMA3;
    t->tool_format = f;
    t->mistral_args = f == SY_TOOL_FORMAT_MISTRAL && has(j, "[ARGS]");
    t->deepseek_r1 = f == SY_TOOL_FORMAT_DEEPSEEK && has(j, "```json");
    /* A template renders tools when it reads the variable (not just mentions the word in prose). */
    t->supports_tools = f != SY_TOOL_FORMAT_GENERIC &&
                        (has(j, "tools") || has(j, "tool_calls"));
    if (has(j, "<|START_THINKING|>")) {
        t->think_open = "<|START_THINKING|>";
        t->think_close = "<|END_THINKING|>";
        t->thinking = true;
    } else if (has(j, "<seed:think>")) {
        t->think_open = "<seed:think>";
        t->think_close = "</seed:think>";
        t->thinking = true;
    } else if (has(j, "[THINK]")) {
        t->think_open = "[THINK]";
        t->think_close = "[/THINK]";
        t->thinking = true;
    } else if (has(j, "</think>")) {
        t->thinking = true;
    }
    if (f == SY_TOOL_FORMAT_GPT_OSS) {
        t->thinking = true;
        t->thinking_levels = has(j, "reasoning_effort");
    }
}

void sy_chat_parse_init(sy_chat_parse *p) { memset(p, 0, sizeof *p); }

static void parse_clear(sy_chat_parse *p) {
    sy_buf_clear(&p->content);
    sy_buf_clear(&p->reasoning);
    for (size_t i = 0; i < p->n_calls; i++) {
        free(p->calls[i].name);
        free(p->calls[i].id);
        sy_buf_free(&p->calls[i].arguments);
    }
    memset(p->calls, 0, sizeof p->calls);
    p->n_calls = 0;
    p->truncated_calls = false;
}

void sy_chat_parse_free(sy_chat_parse *p) {
    parse_clear(p);
    sy_buf_free(&p->content);
    sy_buf_free(&p->reasoning);
}

static bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

/* Leading whitespace never counts; trailing whitespace is held while streaming (it may end the text) and
 * dropped at the end from reasoning, and from content that calls follow. */
static void trim(sy_buf *b, bool right) {
    size_t start = 0;
    while (start < b->len && is_ws(b->data[start])) start++;
    if (start > 0) {
        memmove(b->data, b->data + start, b->len - start);
        b->len -= start;
    }
    if (right)
        while (b->len > 0 && is_ws(b->data[b->len - 1])) b->len--;
    if (b->data != NULL) b->data[b->len] = '\0';
}

static const tc_body_fn BODIES[SY_TOOL_FORMAT_COUNT] = {
    [SY_TOOL_FORMAT_GENERIC] = tc_body_generic,
    [SY_TOOL_FORMAT_HERMES] = tc_body_hermes,
    [SY_TOOL_FORMAT_QWEN3_CODER] = tc_body_qwen3_coder,
    [SY_TOOL_FORMAT_LLAMA3] = tc_body_llama3,
    [SY_TOOL_FORMAT_MISTRAL] = tc_body_mistral,
    [SY_TOOL_FORMAT_DEEPSEEK] = tc_body_deepseek,
    [SY_TOOL_FORMAT_LFM2] = tc_body_lfm2,
    [SY_TOOL_FORMAT_GRANITE] = tc_body_granite,
    [SY_TOOL_FORMAT_COMMAND_R] = tc_body_command_r,
    [SY_TOOL_FORMAT_FUNCTIONARY_3_1] = tc_body_functionary31,
    [SY_TOOL_FORMAT_FUNCTIONARY_3_2] = tc_body_functionary32,
    [SY_TOOL_FORMAT_KIMI_K2] = tc_body_kimi,
    [SY_TOOL_FORMAT_GLM4] = tc_body_glm4,
    [SY_TOOL_FORMAT_MINIMAX_M1] = tc_body_minimax_m1,
    [SY_TOOL_FORMAT_MINIMAX_M2] = tc_body_minimax_m2,
    [SY_TOOL_FORMAT_PHI4] = tc_body_phi4,
};

/* The thinking block at the start of the output (or the one the prompt opened). Returns where the rest
 * begins, or len when the text ends inside it. */
static size_t split_reasoning(const sy_chat_parse_options *o, const char *t, size_t len, bool final,
                              sy_chat_parse *out) {
    const char *open = o->think_open ? o->think_open : "<think>";
    const char *close = o->think_close ? o->think_close : "</think>";
    size_t pos = tc_skip_ws(t, len, 0);
    bool inside = o->reasoning_open;
    if (inside && tc_starts(t, len, pos, open)) pos += strlen(open); /* a model that opens it again */
    else if (inside && !final && len - pos < strlen(open) && memcmp(t + pos, open, len - pos) == 0) return len;
    if (!inside) {
        if (tc_starts(t, len, pos, open)) {
            inside = true;
            pos += strlen(open);
        } else if (!final && len - pos < strlen(open) && memcmp(t + pos, open, len - pos) == 0) {
            return len; /* may still become the opener */
        } else {
            return 0;
        }
    }
    size_t end = tc_find(t, len, pos, close);
    if (end == (size_t)-1) {
        size_t keep = final ? len : len - tc_partial(t, len, pos, close);
        sy_buf_append(&out->reasoning, t + pos, keep - pos);
        return len;
    }
    sy_buf_append(&out->reasoning, t + pos, end - pos);
    return end + strlen(close);
}

void sy_chat_parse_text(const sy_chat_parse_options *o, const char *t, size_t len, bool final, sy_chat_parse *out) {
    parse_clear(out);
    if (o->format == SY_TOOL_FORMAT_GPT_OSS) {
        tc_parse_harmony(o, t, len, final, out);
    } else {
        size_t pos = o->split_reasoning ? split_reasoning(o, t, len, final, out) : 0;
        tc_body_fn body = o->parse_tools ? BODIES[o->format] : NULL;
        if (pos < len || (pos == len && body != NULL && final)) {
            if (body != NULL) body(o, t, len, pos, final, out);
            else tc_content_until(t, len, pos, NULL, 0, final, out, NULL);
        }
    }
    trim(&out->reasoning, true);
    trim(&out->content, !final || out->n_calls > 0);
}

/* ---- streaming ------------------------------------------------------------------------------------------ */

void sy_tool_stream_init(sy_tool_stream *s, const sy_chat_parse_options *o, uint64_t id_seed) {
    memset(s, 0, sizeof *s);
    s->opts = *o;
    s->id_seed = id_seed;
    sy_buf_init(&s->text);
    sy_chat_parse_init(&s->last);
}

void sy_tool_stream_free(sy_tool_stream *s) {
    sy_buf_free(&s->text);
    for (size_t i = 0; i < SY_TOOL_MAX_CALLS; i++) free(s->ids[i]);
    sy_chat_parse_free(&s->last);
}

static uint64_t mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static void emit_piece(sy_tool_delta_type type, const sy_buf *now, size_t *sent, unsigned *violations,
                       sy_tool_delta_fn fn, void *user) {
    if (now->len < *sent) {
        (*violations)++;
        return;
    }
    if (now->len == *sent) return;
    sy_tool_delta d = {.type = type, .text = now->data + *sent, .len = now->len - *sent};
    *sent = now->len;
    fn(user, &d);
}

static void stream_diff(sy_tool_stream *s, sy_tool_delta_fn fn, void *user) {
    sy_chat_parse *p = &s->last;
    emit_piece(SY_TOOL_DELTA_REASONING, &p->reasoning, &s->sent_reasoning, &s->violations, fn, user);
    emit_piece(SY_TOOL_DELTA_CONTENT, &p->content, &s->sent_content, &s->violations, fn, user);
    if (p->n_calls < s->sent_calls) s->violations++;
    for (size_t i = 0; i < p->n_calls; i++) {
        sy_tool_call *c = &p->calls[i];
        if (i >= s->sent_calls) {
            bool taken = false;
            for (size_t k = 0; c->id != NULL && k < i; k++)
                if (s->ids[k] != NULL && strcmp(s->ids[k], c->id) == 0) taken = true;
            if (c->id != NULL && !taken) {
                s->ids[i] = sy_strdup(c->id);
            } else if (s->opts.format == SY_TOOL_FORMAT_MISTRAL) {
                /* Mistral's templates take ids of 9 letters and digits only. */
                static const char alnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
                uint64_t h = mix64(s->id_seed + 2 * i + 1);
                char id[10];
                for (int k = 0; k < 9; k++, h /= 62) id[k] = alnum[h % 62];
                id[9] = '\0';
                s->ids[i] = sy_strdup(id);
            } else {
                char id[40];
                uint64_t a = mix64(s->id_seed + 2 * i + 1), b = mix64(s->id_seed ^ (0x9e3779b97f4a7c15ull * (i + 1)));
                snprintf(id, sizeof id, "call_%016llx%08llx", (unsigned long long)a,
                         (unsigned long long)(b & 0xffffffffull));
                s->ids[i] = sy_strdup(id);
            }
            sy_tool_delta d = {.type = SY_TOOL_DELTA_CALL_START, .index = i, .id = s->ids[i], .name = c->name};
            fn(user, &d);
            s->sent_calls = i + 1;
        }
        if (c->arguments.len < s->sent_args[i]) {
            s->violations++;
            continue;
        }
        if (c->arguments.len > s->sent_args[i]) {
            sy_tool_delta d = {.type = SY_TOOL_DELTA_CALL_ARGS, .index = i, .text = c->arguments.data + s->sent_args[i],
                               .len = c->arguments.len - s->sent_args[i]};
            s->sent_args[i] = c->arguments.len;
            fn(user, &d);
        }
    }
}

static void noop_delta(void *user, const sy_tool_delta *d) {
    (void)user;
    (void)d;
}

void sy_tool_stream_feed(sy_tool_stream *s, const char *text, size_t len, sy_tool_delta_fn fn, void *user) {
    if (len == 0) return;
    sy_buf_append(&s->text, text, len);
    sy_chat_parse_text(&s->opts, s->text.data, s->text.len, false, &s->last);
    stream_diff(s, fn ? fn : noop_delta, user);
}

void sy_tool_stream_finish(sy_tool_stream *s, sy_tool_delta_fn fn, void *user) {
    sy_chat_parse_text(&s->opts, s->text.data ? s->text.data : "", s->text.len, true, &s->last);
    stream_diff(s, fn ? fn : noop_delta, user);
    for (size_t i = 0; i < s->last.n_calls && i < s->sent_calls; i++) {
        free(s->last.calls[i].id);
        s->last.calls[i].id = sy_strdup(s->ids[i]);
    }
}

const char *sy_tool_stream_call_id(const sy_tool_stream *s, size_t i) {
    return i < SY_TOOL_MAX_CALLS ? s->ids[i] : NULL;
}
