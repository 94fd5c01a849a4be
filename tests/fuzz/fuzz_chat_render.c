/* Fuzz target: chat rendering with hostile message contents and roles. The input is NUL-separated fields: a
 * format override ("" to detect it from the template), a Jinja template to detect a format from, then role and
 * content pairs. Contents may hold anything, control-token text included; a render either succeeds with every
 * content the template keeps copied in, or fails with a message. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat_template.h"

#define MAX_MESSAGES 16

static const char *field(const char **p, const char *end, size_t *len) {
    if (*p >= end) return NULL;
    const char *start = *p;
    const char *nul = memchr(start, '\0', (size_t)(end - start));
    const char *stop = nul ? nul : end;
    *len = (size_t)(stop - start);
    *p = nul ? nul + 1 : end;
    return start;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* A private copy that ends with a NUL, so each field is a C string as the API gives them. */
    char *copy = malloc(size + 1);
    memcpy(copy, data, size);
    copy[size] = '\0';
    const char *p = copy, *end = copy + size;
    size_t len;
    const char *override = field(&p, end, &len);
    const char *jinja = field(&p, end, &len);
    sy_chat_message messages[MAX_MESSAGES];
    size_t n = 0;
    while (n < MAX_MESSAGES) {
        size_t role_len, content_len;
        const char *role = field(&p, end, &role_len);
        const char *content = field(&p, end, &content_len);
        if (role == NULL || content == NULL) break;
        messages[n++] = (sy_chat_message){role, content, content_len};
    }
    static const char *const formats[] = {NULL, "chatml", "llama3", "llama2", "raw"};
    for (size_t f = 0; f < sizeof formats / sizeof *formats; f++) {
        const char *name = f == 0 ? (override && override[0] ? override : NULL) : formats[f];
        sy_chat_template t;
        char err[512];
        if (sy_chat_template_init(&t, name, jinja, "<s>", "</s>", err, sizeof err) != 0) {
            if (err[0] == '\0') abort();
            continue;
        }
        for (int gen = 0; gen < 2; gen++) {
            size_t out_len = 0;
            err[0] = '\0';
            char *text = sy_chat_render(&t, messages, n, gen != 0, &out_len, err, sizeof err);
            if (text == NULL) {
                if (err[0] == '\0') abort();
                continue;
            }
            if (strlen(text) > out_len) abort(); /* the length covers the text (contents may hold NULs: none here) */
            free(text);
        }
        sy_chat_template_free(&t);
    }
    free(copy);
    return 0;
}
