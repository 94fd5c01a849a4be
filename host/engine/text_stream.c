#include "engine/text_stream.h"

void sy_text_stream_init(sy_text_stream *ts) { sy_utf8_stream_init(&ts->utf8, true); }

void sy_text_stream_feed(sy_text_stream *ts, const char *bytes, size_t len, sy_text_sink sink, void *user) {
    /* Feed in slices so the output buffer stays on the stack whatever the piece's length. */
    char out[SY_UTF8_STREAM_MAX_OUT(256)];
    while (len > 0) {
        size_t n = len < 256 ? len : 256;
        size_t w = sy_utf8_stream_feed(&ts->utf8, bytes, n, out);
        if (w > 0) sink(user, out, w);
        bytes += n;
        len -= n;
    }
}

void sy_text_stream_flush(sy_text_stream *ts, sy_text_sink sink, void *user) {
    char out[SY_UTF8_STREAM_MAX_OUT(0)];
    size_t w = sy_utf8_stream_finish(&ts->utf8, out);
    if (w > 0) sink(user, out, w);
}

static void file_sink(void *user, const char *text, size_t len) { fwrite(text, 1, len, (FILE *)user); }

void sy_text_stream_write(sy_text_stream *ts, const char *bytes, size_t len, FILE *out) {
    sy_text_stream_feed(ts, bytes, len, file_sink, out);
}

void sy_text_stream_finish(sy_text_stream *ts, FILE *out) { sy_text_stream_flush(ts, file_sink, out); }
