/*
 * UTF-8 for the whole host: one validator (the well-formed sequences of Unicode 15, table 3-7), and what is
 * built on it: repairing and sanitising text for JSON and logs, and streaming token bytes out as text.
 */
#ifndef SY_HOST_BASE_UTF8_H
#define SY_HOST_BASE_UTF8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"

/* Length of the well-formed UTF-8 character at s[0..avail), or 0 when the bytes there are not one (a stray
 * continuation, an overlong form, a surrogate, a value above U+10FFFF, or a sequence cut short). */
size_t sy_utf8_char_len(const unsigned char *s, size_t avail);

/* The well-formed UTF-8 character at s[0..avail): its code point in *cp and its length, or 0 (and *cp
 * untouched) exactly when sy_utf8_char_len says 0. */
size_t sy_utf8_decode(const unsigned char *s, size_t avail, uint32_t *cp);

/* UTF-8 of cp into out (no NUL): its length 1..4, or 0 for a surrogate or a value above U+10FFFF. */
size_t sy_utf8_encode(uint32_t cp, char out[4]);

/* The length a lead byte announces: 1 for ASCII, 2..4 for C2..F4, 0 for a continuation byte or a byte that
 * never starts a well-formed character (C0, C1, F5..FF). For byte-at-a-time matchers that keep their own
 * state (the grammar engine); everyone else decodes with the functions above. */
size_t sy_utf8_lead_length(unsigned char c);

/* Whether all len bytes are well-formed UTF-8. */
bool sy_utf8_valid(const char *s, size_t len);

/* Copy src (src_len bytes) into dst as valid UTF-8 without control characters other than tab and newline:
 * invalid sequences become U+FFFD, others '?'. At most dst_size-1 bytes, cut on a character boundary (with
 * "..." when cut); returns the length written. */
size_t sy_utf8_sanitize(char *dst, size_t dst_size, const char *src, size_t src_len);
/* Like sy_utf8_sanitize but keeps every character (control characters are legal in JSON strings): invalid
 * sequences become U+FFFD. The result is appended to b. */
void sy_utf8_repair(sy_buf *b, const char *src, size_t src_len);

/*
 * Streaming token bytes out as text, one token at a time.
 *
 * A byte-level BPE token (or a SentencePiece byte-fallback token) may end in the middle of a multi-byte UTF-8
 * character: "😀" is often two or three tokens. Feeding each token's bytes here gives back only complete UTF-8
 * sequences and holds an incomplete tail until the next token completes it.
 *
 * Ill-formed bytes are replaced by U+FFFD, one per maximal ill-formed subpart as Unicode recommends, or passed
 * through unchanged when the stream was made with replace_invalid false. At the end of the stream
 * sy_utf8_stream_finish flushes a tail that never completed (as U+FFFD, or raw).
 *
 * The state is a small value: one per sequence being streamed, no allocation, not thread-safe by itself.
 */
typedef struct sy_utf8_stream {
    unsigned char pending[4]; /* an incomplete but so far valid sequence (at most 3 bytes) */
    uint8_t n_pending;
    bool replace_invalid;
} sy_utf8_stream;

/* Output capacity that always suffices for feeding n bytes (each byte can become one 3-byte U+FFFD, and the
 * held-back tail joins them). Also enough for sy_utf8_stream_finish with n = 0. */
#define SY_UTF8_STREAM_MAX_OUT(n) (3 * (size_t)(n) + 12)

void sy_utf8_stream_init(sy_utf8_stream *s, bool replace_invalid);

/* Feeds n bytes; writes the text that is now complete to out (capacity >= SY_UTF8_STREAM_MAX_OUT(n), or
 * n + 3 when replace_invalid is false) and returns how many bytes it wrote. */
size_t sy_utf8_stream_feed(sy_utf8_stream *s, const void *bytes, size_t n, char *out);

/* Ends the stream: writes what is still held back (U+FFFD or the raw bytes) and resets the state. out needs
 * SY_UTF8_STREAM_MAX_OUT(0) bytes. Returns the bytes written. */
size_t sy_utf8_stream_finish(sy_utf8_stream *s, char *out);

/* Bytes currently held back. */
size_t sy_utf8_stream_pending(const sy_utf8_stream *s);

#endif
