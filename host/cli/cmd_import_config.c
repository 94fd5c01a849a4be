/* switchyard import-config: a llama-swap YAML config printed as switchyard's INI (config/llama_swap_import.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "cli/cli_common.h"
#include "cli/commands.h"
#include "config/llama_swap_import.h"

static void usage(FILE *out) {
    fprintf(out,
            "usage: switchyard import-config [--native] LLAMA-SWAP.yaml > switchyard.ini\n\n"
            "Prints the switchyard INI equivalent of a llama-swap config on stdout: models (cmd, cmdStop, env,\n"
            "proxy, checkEndpoint, ttl, useModelName, aliases, unlisted, name, description, metadata, filters,\n"
            "timeouts), macros, groups, hooks.on_startup.preload, apiKeys and peers. Every option it cannot\n"
            "carry is listed on stderr with the reason. Check the result with `switchyard serve --config FILE\n"
            "--check-config`.\n\n"
            "  --native   a model whose cmd runs llama-server on a GGUF file becomes a gguf-quant model of that\n"
            "             file (context, threads and slots from its flags) instead of a process\n");
}

int sy_cmd_import_config(int argc, char **argv) {
    if (argc == 2 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
        usage(stdout);
        return 0;
    }
    bool native = argc == 3 && strcmp(argv[1], "--native") == 0;
    if (argc != 2 && !native) {
        usage(stderr);
        return 2;
    }
    const char *path = argv[argc - 1];
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        sy_cli_error("import-config", "cannot open %s", path);
        return 1;
    }
    sy_buf text, ini, report;
    sy_buf_init(&text);
    sy_buf_init(&ini);
    sy_buf_init(&report);
    bool ok = sy_buf_read(&text, f, SY_IMPORT_MAX_BYTES + 1);
    fclose(f);
    char err[600];
    int rc = 1;
    if (!ok) {
        sy_cli_error("import-config", "cannot read %s", path);
    } else if (sy_llama_swap_import_native(text.data ? text.data : "", text.len, path, native, &ini, &report, err,
                                           sizeof err) != 0) {
        sy_cli_error("import-config", "%s", err);
    } else {
        fwrite(ini.data ? ini.data : "", 1, ini.len, stdout);
        if (report.len) {
            fprintf(stderr, "switchyard import-config: not carried over:\n");
            fwrite(report.data, 1, report.len, stderr);
        }
        rc = fflush(stdout) == 0 ? 0 : 1;
    }
    sy_buf_free(&text);
    sy_buf_free(&ini);
    sy_buf_free(&report);
    return rc;
}
