/* See utf8.h. Every check goes through lead_length, which follows the well-formed byte sequences of Unicode 15,
 * table 3-7: after a lead byte the allowed range of the second byte depends on the lead (E0: A0..BF,
 * ED: 80..9F, F0: 90..BF, F4: 80..8F), which rules out overlong forms, surrogates and values above U+10FFFF
 * without decoding. */
#include "base/utf8.h"

#include <string.h>

static const char REPLACEMENT[3] = {(char)0xEF, (char)0xBF, (char)0xBD};

void sy_utf8_stream_init(sy_utf8_stream *s, bool replace_invalid) {
    memset(s, 0, sizeof *s);
    s->replace_invalid = replace_invalid;
}

size_t sy_utf8_stream_pending(const sy_utf8_stream *s) {
    return s->n_pending;
}

/* Length a lead byte announces (0: not a lead byte) and the range of the byte after it. */
static int lead_length(unsigned char c, unsigned char *lo, unsigned char *hi) {
    *lo = 0x80;
    *hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF)
        return 2;
    if (c >= 0xE0 && c <= 0xEF) {
        if (c == 0xE0)
            *lo = 0xA0;
        else if (c == 0xED)
            *hi = 0x9F;
        return 3;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        if (c == 0xF0)
            *lo = 0x90;
        else if (c == 0xF4)
            *hi = 0x8F;
        return 4;
    }
    return 0;
}

size_t sy_utf8_char_len(const unsigned char *s, size_t avail) {
    if (avail == 0) return 0;
    if (s[0] < 0x80) return 1;
    unsigned char lo, hi;
    int n = lead_length(s[0], &lo, &hi);
    if (n == 0 || avail < (size_t)n || s[1] < lo || s[1] > hi) return 0;
    for (int i = 2; i < n; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    return (size_t)n;
}

size_t sy_utf8_lead_length(unsigned char c) {
    if (c < 0x80) return 1;
    unsigned char lo, hi;
    return (size_t)lead_length(c, &lo, &hi);
}

size_t sy_utf8_decode(const unsigned char *s, size_t avail, uint32_t *cp) {
    size_t n = sy_utf8_char_len(s, avail);
    if (n == 0) return 0;
    /* well-formed: the lead keeps 7, 5, 4 or 3 value bits, each continuation 6 */
    uint32_t v = n == 1 ? s[0] : s[0] & (0x7Fu >> n);
    for (size_t i = 1; i < n; i++) v = (v << 6) | (s[i] & 0x3Fu);
    *cp = v;
    return n;
}

size_t sy_utf8_encode(uint32_t cp, char out[4]) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp >= 0xD800 && cp <= 0xDFFF) return 0;
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    if (cp > 0x10FFFF) return 0;
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

bool sy_utf8_valid(const char *s, size_t len) {
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < len;) {
        size_t n = sy_utf8_char_len(u + i, len - i);
        if (n == 0) return false;
        i += n;
    }
    return true;
}

/* Writes an ill-formed subpart: U+FFFD once, or its raw bytes. */
static size_t emit_invalid(const sy_utf8_stream *s, const unsigned char *bytes, size_t n, char *out) {
    if (s->replace_invalid) {
        memcpy(out, REPLACEMENT, sizeof REPLACEMENT);
        return sizeof REPLACEMENT;
    }
    memcpy(out, bytes, n);
    return n;
}

size_t sy_utf8_stream_feed(sy_utf8_stream *s, const void *bytes, size_t n, char *out) {
    const unsigned char *in = bytes;
    size_t total = s->n_pending + n; /* the held-back bytes come first, then the new ones */
    unsigned char held[4];
    size_t n_held = s->n_pending;
    memcpy(held, s->pending, n_held);
    s->n_pending = 0;
#define AT(k) ((k) < n_held ? held[(k)] : in[(k) - n_held])
    size_t o = 0;
    size_t i = 0;
    while (i < total) {
        unsigned char c = AT(i);
        if (c < 0x80) {
            out[o++] = (char)c;
            i++;
            continue;
        }
        unsigned char lo, hi;
        int len = lead_length(c, &lo, &hi);
        if (len == 0) {
            unsigned char one = c;
            o += emit_invalid(s, &one, 1, out + o);
            i++;
            continue;
        }
        /* how many bytes after the lead continue it correctly */
        size_t good = 1;
        while (good < (size_t)len && i + good < total) {
            unsigned char d = AT(i + good);
            unsigned char min = good == 1 ? lo : 0x80, max = good == 1 ? hi : 0xBF;
            if (d < min || d > max)
                break;
            good++;
        }
        if (good == (size_t)len) {
            for (size_t k = 0; k < good; k++)
                out[o++] = (char)AT(i + k);
            i += good;
        } else if (i + good == total) {
            /* valid so far but cut short by the end of the input: hold it for the next token */
            for (size_t k = 0; k < good; k++)
                s->pending[k] = AT(i + k);
            s->n_pending = (uint8_t)good;
            i += good;
        } else {
            unsigned char part[4];
            for (size_t k = 0; k < good; k++)
                part[k] = AT(i + k);
            o += emit_invalid(s, part, good, out + o);
            i += good; /* the offending byte starts over */
        }
    }
#undef AT
    return o;
}

size_t sy_utf8_stream_finish(sy_utf8_stream *s, char *out) {
    size_t o = 0;
    if (s->n_pending > 0)
        o = emit_invalid(s, s->pending, s->n_pending, out);
    s->n_pending = 0;
    return o;
}

size_t sy_utf8_sanitize(char *dst, size_t dst_size, const char *src, size_t src_len) {
    if (dst_size == 0) return 0;
    static const char replacement[] = "\xEF\xBF\xBD";
    const unsigned char *s = (const unsigned char *)src;
    size_t out = 0, i = 0;
    size_t limit = dst_size - 1;
    while (i < src_len) {
        size_t n = sy_utf8_char_len(s + i, src_len - i);
        const char *piece;
        size_t piece_len;
        char one;
        if (n == 0) {
            piece = replacement, piece_len = 3, n = 1;
        } else if (n == 1 && (s[i] < 0x20 || s[i] == 0x7F) && s[i] != '\t' && s[i] != '\n') {
            one = '?', piece = &one, piece_len = 1;
        } else {
            piece = (const char *)s + i, piece_len = n;
        }
        if (out + piece_len > limit) {
            /* Cut: make room for "..." on a character boundary. */
            while (out > 0 && out + 3 > limit) {
                out--;
                while (out > 0 && ((unsigned char)dst[out] & 0xC0) == 0x80) out--;
            }
            if (out + 3 <= limit) memcpy(dst + out, "...", 3), out += 3;
            break;
        }
        memcpy(dst + out, piece, piece_len);
        out += piece_len;
        i += n;
    }
    dst[out] = '\0';
    return out;
}

void sy_utf8_repair(sy_buf *b, const char *src, size_t src_len) {
    const unsigned char *s = (const unsigned char *)src;
    size_t i = 0, run = 0; /* run: start of the current stretch of valid bytes */
    while (i < src_len) {
        size_t n = sy_utf8_char_len(s + i, src_len - i);
        if (n == 0) {
            sy_buf_append(b, src + run, i - run);
            sy_buf_append(b, "\xEF\xBF\xBD", 3);
            i++;
            run = i;
        } else {
            i += n;
        }
    }
    sy_buf_append(b, src + run, i - run);
}
