/* Fuzz target: keep_alive's Go-duration parser ("5m", "1h30m", "300ms", "-1m", "1.5e3s"): never reads past the
 * string, and what it accepts is a number (never NaN) whose sign follows the leading '-'. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/ollama.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 256) return 0;
    char *s = malloc(size + 1);
    memcpy(s, data, size);
    s[size] = '\0';
    double seconds = 12345;
    if (sy_api_ollama_parse_duration(s, &seconds) == 0) {
        if (isnan(seconds)) abort();
        if (s[0] == '-' ? seconds > 0 : seconds < 0) abort();
    }
    free(s);
    return 0;
}
