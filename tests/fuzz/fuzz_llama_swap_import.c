/*
 * Fuzz target: the llama-swap YAML importer (host/config/llama_swap_import.c, on libyaml) on arbitrary bytes.
 *
 * Beyond "no crash, no leak, no undefined behaviour": what it prints is text the INI reader takes line by line
 * (no NUL or control bytes, no line longer than inih holds), and reading it never puts the reader out of step.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "config/llama_swap_import.h"

#define CHECK(cond)                                                                                      \
    do {                                                                                                 \
        if (!(cond)) {                                                                                   \
            fprintf(stderr, "fuzz_llama_swap_import: %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            abort();                                                                                     \
        }                                                                                                \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    sy_buf ini, report;
    sy_buf_init(&ini);
    sy_buf_init(&report);
    char err[600];
    if (sy_llama_swap_import((const char *)data, size, "fuzz.yaml", &ini, &report, err, sizeof err) == 0) {
        size_t line = 0;
        for (size_t i = 0; i < ini.len; i++) {
            unsigned char c = (unsigned char)ini.data[i];
            CHECK(c != 0 && (c >= 0x20 || c == '\n' || c == '\t') && c != 0x7f);
            line = c == '\n' ? 0 : line + 1;
            CHECK(line < 200);
        }
        sy_config *cfg = sy_config_load_string(ini.data ? ini.data : "", ini.len, "import.ini", "/base");
        /* The reader's own out-of-step report is "import.ini:LINE: internal error..."; user text is echoed only
         * after a section and key, so it cannot forge one. */
        for (size_t i = 0; i < cfg->n_errors; i++) {
            const char *p = cfg->errors[i];
            CHECK(strncmp(p, "import.ini:", 11) == 0);
            p += 11;
            while (*p >= '0' && *p <= '9') p++;
            if (*p == ':') p++;
            if (*p == ' ') p++;
            CHECK(strncmp(p, "internal error", 14) != 0);
        }
        sy_config_free(cfg);
    } else {
        CHECK(err[0] != '\0');
    }
    sy_buf_free(&ini);
    sy_buf_free(&report);
    return 0;
}
