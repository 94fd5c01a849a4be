/* Streaming token bytes out as text, one token at a time.
 *
 * A byte-level BPE token (or a SentencePiece byte-fallback token) may end in the middle of a multi-byte UTF-8
 * character: "😀" is often two or three tokens. Feeding each token's bytes here gives back only complete UTF-8
 * sequences and holds an incomplete tail until the next token completes it.
 *
 * Ill-formed bytes (a stray continuation byte, a lead byte not followed by enough continuations, overlong
 * forms, surrogates, code points above U+10FFFF) are replaced by U+FFFD, one per maximal ill-formed subpart as
 * Unicode recommends, or passed through unchanged when the stream was made with replace_invalid false. At the
 * end of the stream sy_utf8_stream_finish flushes a tail that never completed (as U+FFFD, or raw).
 *
 * The state is a small value: one per sequence being streamed, no allocation, not thread-safe by itself.
 */
#ifndef SY_UTF8_STREAM_H
#define SY_UTF8_STREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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
