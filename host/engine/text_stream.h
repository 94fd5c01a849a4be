/* Streaming token bytes out as text: a token may end inside a multi-byte UTF-8 character (byte-fallback and
 * byte-level BPE tokens do), so an incomplete tail is held back until the next token completes it. Invalid
 * bytes and a tail still incomplete at the end become U+FFFD, so the output is always valid UTF-8. */
#ifndef SY_HOST_TEXT_STREAM_H
#define SY_HOST_TEXT_STREAM_H

#include <stddef.h>
#include <stdio.h>

#include "base/utf8.h"

/* A sy_utf8_stream (base/utf8.h) that replaces ill-formed bytes, with sink-style output. */
typedef struct sy_text_stream {
    sy_utf8_stream utf8;
} sy_text_stream;

/* Where complete text goes: a FILE, or a caller's sink. */
typedef void (*sy_text_sink)(void *user, const char *text, size_t len);

void sy_text_stream_init(sy_text_stream *ts);
void sy_text_stream_feed(sy_text_stream *ts, const char *bytes, size_t len, sy_text_sink sink, void *user);
void sy_text_stream_flush(sy_text_stream *ts, sy_text_sink sink, void *user);

/* FILE convenience wrappers. */
void sy_text_stream_write(sy_text_stream *ts, const char *bytes, size_t len, FILE *out);
void sy_text_stream_finish(sy_text_stream *ts, FILE *out);

#endif
