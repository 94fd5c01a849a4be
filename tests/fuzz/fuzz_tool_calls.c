/*
 * Fuzz target: the tool-call and reasoning parsers (host/chat/tool_call*.c), every format.
 *
 * The first byte picks the format (low 5 bits, modulo the count) and the options (bit 5: split reasoning, bit 6:
 * the prompt opened the thinking block, bit 7: tools not offered); the rest is the model's output. Beyond "no
 * crash, no leak, no hang, no undefined behaviour": the output streamed in pieces (sizes taken from the input)
 * gives deltas that add up exactly to the parse of the whole, and no parse of a prefix contradicts an earlier
 * one.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/tool_call.h"

#define CHECK(cond)                                                                            \
    do {                                                                                       \
        if (!(cond)) {                                                                         \
            fprintf(stderr, "check failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__);          \
            abort();                                                                           \
        }                                                                                      \
    } while (0)

typedef struct sums {
    sy_buf content, reasoning;
    sy_buf args[SY_TOOL_MAX_CALLS];
    size_t n_calls;
} sums;

static void on_delta(void *user, const sy_tool_delta *d) {
    sums *s = user;
    switch (d->type) {
    case SY_TOOL_DELTA_CONTENT: sy_buf_append(&s->content, d->text, d->len); break;
    case SY_TOOL_DELTA_REASONING: sy_buf_append(&s->reasoning, d->text, d->len); break;
    case SY_TOOL_DELTA_CALL_START:
        CHECK(d->index == s->n_calls && d->name != NULL && d->id != NULL);
        sy_buf_init(&s->args[s->n_calls++]);
        break;
    case SY_TOOL_DELTA_CALL_ARGS:
        CHECK(d->index < s->n_calls);
        sy_buf_append(&s->args[d->index], d->text, d->len);
        break;
    }
}

static bool same(const sy_buf *a, const sy_buf *b) {
    return a->len == b->len && (a->len == 0 || memcmp(a->data, b->data, a->len) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    sy_chat_parse_options o;
    memset(&o, 0, sizeof o);
    o.format = (sy_tool_format)((data[0] & 31) % SY_TOOL_FORMAT_COUNT);
    o.split_reasoning = (data[0] & 32) != 0;
    o.reasoning_open = (data[0] & 64) != 0;
    o.parse_tools = (data[0] & 128) == 0;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;

    sy_chat_parse whole;
    sy_chat_parse_init(&whole);
    sy_chat_parse_text(&o, text, len, true, &whole);

    sy_tool_stream st;
    sy_tool_stream_init(&st, &o, 1);
    sums s;
    memset(&s, 0, sizeof s);
    /* Piece sizes from the bytes themselves: 1..8 bytes. */
    size_t at = 0, k = 0;
    while (at < len) {
        size_t n = 1 + ((unsigned char)text[k++ % len] & 7);
        if (n > len - at) n = len - at;
        sy_tool_stream_feed(&st, text + at, n, on_delta, &s);
        at += n;
    }
    sy_tool_stream_finish(&st, on_delta, &s);
    CHECK(st.violations == 0);
    CHECK(same(&s.content, &whole.content));
    CHECK(same(&s.reasoning, &whole.reasoning));
    CHECK(s.n_calls == whole.n_calls);
    for (size_t i = 0; i < s.n_calls; i++) {
        CHECK(strcmp(st.last.calls[i].name, whole.calls[i].name) == 0);
        CHECK(same(&s.args[i], &whole.calls[i].arguments));
        sy_buf_free(&s.args[i]);
    }
    sy_buf_free(&s.content);
    sy_buf_free(&s.reasoning);
    sy_tool_stream_free(&st);
    sy_chat_parse_free(&whole);
    return 0;
}
