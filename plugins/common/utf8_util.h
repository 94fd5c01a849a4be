/* UTF-8 decoding and encoding for the parsers of plugins/common (the JSON reader, the regex rewriter, the BPE
 * tokenizer), strict in the way Rust's str and serde_json are: overlong forms, surrogates and code points above
 * U+10FFFF are invalid.
 *
 * Header-only, static inline: utf8_seq_len runs for every non-ASCII character of an 11 MB tokenizer.json and of
 * every text that is tokenized. (Streaming token bytes out as text is the host's job: host/base/utf8.h.)
 */
#ifndef SY_UTF8_UTIL_H
#define SY_UTF8_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* Length of the valid UTF-8 sequence at s[0..n), or 0 when it is invalid or truncated. Rejects overlong forms,
 * surrogates and code points above U+10FFFF. */
static inline size_t utf8_seq_len(const unsigned char *s, size_t n, uint32_t *cp) {
    unsigned char c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    if (c < 0xC2)
        return 0;
    if (c < 0xE0) {
        if (n < 2 || (s[1] & 0xC0) != 0x80)
            return 0;
        *cp = ((uint32_t)(c & 0x1F) << 6) | (s[1] & 0x3F);
        return 2;
    }
    if (c < 0xF0) {
        if (n < 3 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80)
            return 0;
        uint32_t v = ((uint32_t)(c & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
        if (v < 0x800 || (v >= 0xD800 && v <= 0xDFFF))
            return 0;
        *cp = v;
        return 3;
    }
    if (c < 0xF5) {
        if (n < 4 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80 || (s[3] & 0xC0) != 0x80)
            return 0;
        uint32_t v = ((uint32_t)(c & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) |
                     ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
        if (v < 0x10000 || v > 0x10FFFF)
            return 0;
        *cp = v;
        return 4;
    }
    return 0;
}

/* Offset of the first invalid byte, or len when s is valid UTF-8. */
static inline size_t utf8_invalid_offset(const char *s, size_t len) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < len) {
        if (u[i] < 0x80) {
            i++;
            continue;
        }
        uint32_t cp;
        size_t k = utf8_seq_len(u + i, len - i, &cp);
        if (k == 0)
            return i;
        i += k;
    }
    return len;
}

static inline size_t utf8_encode(uint32_t cp, char *out) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* The code point that ends at s[len-1] (s is valid UTF-8, len > 0). */
static inline uint32_t utf8_last_cp(const char *s, size_t len) {
    size_t i = len - 1;
    while (i > 0 && ((unsigned char)s[i] & 0xC0) == 0x80)
        i--;
    uint32_t cp = 0;
    if (utf8_seq_len((const unsigned char *)s + i, len - i, &cp) == 0)
        return 0xFFFD;
    return cp;
}


#endif
