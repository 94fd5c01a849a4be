/* Fuzz target: the slot API's file names and slot ids, which name files under slot_save_path: an accepted name is
 * a plain file name (no separator, no leading dot, no control character, valid UTF-8, at most 255 bytes), and an
 * accepted id is the decimal number it spells. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/slots.h"
#include "base/utf8.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 512) return 0;
    char *s = malloc(size + 1);
    memcpy(s, data, size);
    s[size] = '\0';
    size_t len = strlen(s);
    char err[256];
    if (sy_slot_filename_ok(s, err, sizeof err)) {
        if (len == 0 || len > SY_SLOT_MAX_FILENAME || s[0] == '.' || strchr(s, '/') || strchr(s, '\\') ||
            !sy_utf8_valid(s, len))
            abort();
        for (size_t i = 0; i < len; i++)
            if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f) abort();
    } else if (err[0] == '\0') {
        abort();
    }
    uint32_t id = 0;
    if (sy_slot_parse_id(s, &id)) {
        if (len == 0 || len > 9 || strspn(s, "0123456789") != len) abort();
        char back[16];
        snprintf(back, sizeof back, "%u", (unsigned)id);
        if (strtoul(s, NULL, 10) != id) abort();
    }
    free(s);
    return 0;
}
