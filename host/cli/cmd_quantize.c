/* switchyard quantize: runs the switchyard-quantize program (plugins/quantizer) with the verb's arguments, in this
 * process's place, so its output and exit status are the verb's. It is a program of its own because it needs the
 * model-format code (GGUF, SafeTensors, tokenizers) that the host does not link; engines bring theirs as plugins.
 *
 * The program is SY_QUANTIZE_BIN when that is set, else the first that exists of <bin>/switchyard-quantize (the
 * build tree's bin, or an install that puts it beside the executable) and <bin>/../libexec/switchyard/
 * switchyard-quantize (the installed layout), <bin> being the executable's folder, as for the plugin folder. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"
#include "cli/cli_common.h"
#include "cli/commands.h"

#define VERB "quantize"
#define PROGRAM "switchyard-quantize"

/* The program's path into path; false (with the places looked at in looked) when there is none. */
static bool find_program(char *path, size_t size, char *looked, size_t looked_size) {
    const char *env = getenv("SY_QUANTIZE_BIN");
    if (env != NULL && env[0] != '\0') {
        snprintf(looked, looked_size, "%s (SY_QUANTIZE_BIN)", env);
        if (strlen(env) >= size || access(env, X_OK) != 0) return false;
        strcpy(path, env);
        return true;
    }
    char dir[PATH_MAX];
    if (sy_exe_dir(dir, sizeof dir) == NULL) {
        snprintf(looked, looked_size, "beside this executable, whose path /proc/self/exe does not give; set "
                                      "SY_QUANTIZE_BIN");
        return false;
    }
    static const char *const candidates[] = {PROGRAM, "../" SY_INSTALL_LIBEXECDIR "/" PROGRAM};
    looked[0] = '\0';
    for (size_t i = 0; i < sizeof candidates / sizeof *candidates; i++) {
        int n = snprintf(path, size, "%s/%s", dir, candidates[i]);
        if (n > 0 && (size_t)n < size && access(path, X_OK) == 0) return true;
        size_t used = strlen(looked);
        snprintf(looked + used, looked_size - used, "%s%s/%s", i ? " and " : "", dir, candidates[i]);
    }
    return false;
}

int sy_cmd_quantize(int argc, char **argv) {
    char path[PATH_MAX], looked[2 * PATH_MAX + 64];
    if (!find_program(path, sizeof path, looked, sizeof looked)) {
        sy_cli_error(VERB, "the quantizer program " PROGRAM " is missing: looked for %s", looked);
        return 1;
    }
    /* the same argv, verb first, so that getopt's messages ("quantize: unrecognized option") stay the verb's */
    char **args = sy_xcalloc((size_t)(argc > 1 ? argc : 1) + 1, sizeof *args);
    args[0] = argc > 0 ? argv[0] : VERB;
    for (int i = 1; i < argc; i++) args[i] = argv[i];
    fflush(NULL); /* nothing written so far may be lost or doubled by the exec */
    execv(path, args);
    int e = errno;
    free(args);
    sy_cli_error(VERB, "cannot run %s: %s", path, strerror(e));
    return 1;
}
