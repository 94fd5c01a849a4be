/* One-line error messages into a caller's buffer, the convention of plugins/common ("char *err, size_t err_size"
 * parameters): err may be NULL or err_size 0 when the caller does not want the message. */
#ifndef SY_ERRMSG_H
#define SY_ERRMSG_H

#include <stddef.h>

void sy_errmsg(char *err, size_t err_size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* A short, printable rendering of input text (a token, a pattern) for such messages: in double quotes, with '"',
 * '\\' and control bytes escaped, cut after 40 bytes ("...") or where buf ends. Writes into buf (cap bytes; 128
 * are plenty) and returns it. */
const char *sy_errmsg_quote(char *buf, size_t cap, const char *s, size_t len);

#endif
