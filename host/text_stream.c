#include "text_stream.h"

#include <string.h>

static const char replacement[] = "\xEF\xBF\xBD";

void sy_text_stream_init(sy_text_stream *ts) { memset(ts, 0, sizeof *ts); }

/* Length of the UTF-8 sequence a lead byte starts, or 0 if it cannot start one. */
static size_t sequence_length(unsigned char b) {
    if (b < 0x80) return 1;
    if (b >= 0xC2 && b <= 0xDF) return 2;
    if (b >= 0xE0 && b <= 0xEF) return 3;
    if (b >= 0xF0 && b <= 0xF4) return 4;
    return 0;
}

/* Is s[0..n) (n <= the sequence's length) a valid prefix of a UTF-8 sequence? Rejects overlongs and surrogates. */
static int valid_prefix(const unsigned char *s, size_t n) {
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
    }
    if (n >= 2) {
        if (s[0] == 0xE0 && s[1] < 0xA0) return 0;
        if (s[0] == 0xED && s[1] > 0x9F) return 0;
        if (s[0] == 0xF0 && s[1] < 0x90) return 0;
        if (s[0] == 0xF4 && s[1] > 0x8F) return 0;
    }
    return 1;
}

static void emit_byte(sy_text_stream *ts, unsigned char b, sy_text_sink sink, void *user) {
    for (;;) {
        if (ts->n_pending == 0) {
            size_t need = sequence_length(b);
            if (need == 0) {
                sink(user, replacement, 3);
                return;
            }
            if (need == 1) {
                char c = (char)b;
                sink(user, &c, 1);
                return;
            }
            ts->pending[ts->n_pending++] = b;
            return;
        }
        size_t need = sequence_length(ts->pending[0]);
        ts->pending[ts->n_pending] = b;
        if (!valid_prefix(ts->pending, ts->n_pending + 1)) {
            /* The held bytes can never complete: replace them and reconsider b on its own. */
            sink(user, replacement, 3);
            ts->n_pending = 0;
            continue;
        }
        ts->n_pending++;
        if (ts->n_pending == need) {
            sink(user, (const char *)ts->pending, need);
            ts->n_pending = 0;
        }
        return;
    }
}

void sy_text_stream_feed(sy_text_stream *ts, const char *bytes, size_t len, sy_text_sink sink, void *user) {
    for (size_t i = 0; i < len; i++) emit_byte(ts, (unsigned char)bytes[i], sink, user);
}

void sy_text_stream_flush(sy_text_stream *ts, sy_text_sink sink, void *user) {
    if (ts->n_pending > 0) sink(user, replacement, 3);
    ts->n_pending = 0;
}

static void file_sink(void *user, const char *text, size_t len) { fwrite(text, 1, len, (FILE *)user); }

void sy_text_stream_write(sy_text_stream *ts, const char *bytes, size_t len, FILE *out) {
    sy_text_stream_feed(ts, bytes, len, file_sink, out);
}

void sy_text_stream_finish(sy_text_stream *ts, FILE *out) { sy_text_stream_flush(ts, file_sink, out); }
