#include "errmsg.h"

#include <stdarg.h>
#include <stdio.h>

void sy_errmsg(char *err, size_t err_size, const char *fmt, ...) {
    if (err == NULL || err_size == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_size, fmt, ap);
    va_end(ap);
}

/* See errmsg.h. (Moved here from the BPE tokenizer: its builder, regex compiler and JSON loader all use it.) */
const char *sy_errmsg_quote(char *buf, size_t cap, const char *s, size_t len) {
    size_t o = 0;
    if (cap < 8) {
        if (cap > 0)
            buf[0] = '\0';
        return buf;
    }
    buf[o++] = '"';
    for (size_t i = 0; i < len && o + 6 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        if (i >= 40) {
            buf[o++] = '.';
            buf[o++] = '.';
            buf[o++] = '.';
            break;
        }
        if (c == '"' || c == '\\') {
            buf[o++] = '\\';
            buf[o++] = (char)c;
        } else if (c < 0x20 || c == 0x7f) {
            o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", c);
        } else {
            buf[o++] = (char)c;
        }
    }
    buf[o++] = '"';
    buf[o] = '\0';
    return buf;
}
