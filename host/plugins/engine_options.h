/* Command-line options that the host passes through to engine plugins as key=value load options: the documented
 * flags (--threads, --ctx-size, ...) and -o/--option KEY=VALUE for any key, all checked against what the chosen
 * plugin declares ("sy.plugin.options/1") before a load. */
#ifndef SY_HOST_ENGINE_OPTIONS_H
#define SY_HOST_ENGINE_OPTIONS_H

#include <getopt.h>
#include <stddef.h>
#include <stdio.h>
#include <switchyard/abi.h>

#include "plugins/plugin_loader.h"

typedef struct sy_engine_options {
    sy_option *items; /* keys and values are malloc'd */
    const char **flags; /* how each was given, for messages ("--threads", "-o"); static strings */
    size_t n_items;
} sy_engine_options;

void sy_engine_options_init(sy_engine_options *eo);
void sy_engine_options_free(sy_engine_options *eo);
/* Set key=value, replacing an earlier value of the same key; `flag` (static, or NULL) names how it was given. */
void sy_engine_options_set(sy_engine_options *eo, const char *key, const char *value, const char *flag);

/* Append the getopt_long entries of the engine options to `out` (room for `room`); returns how many. */
size_t sy_engine_options_getopt(struct option *out, size_t room);
/* Rewrites llama.cpp's multi-letter short flags (-ctk, -ctv) in argv to their long names, before getopt runs
 * (up to a "--"). The strings are static. */
void sy_engine_options_rewrite_aliases(int argc, char **argv);
/* Handle one getopt result: 1 handled, 0 not an engine option, -1 bad value (err set). */
int sy_engine_options_handle(sy_engine_options *eo, int code, const char *arg, char *err, size_t err_size);
void sy_engine_options_usage(FILE *out);

/* Checks every option against what `engine` and, when one drafts, `drafter` declare (either may be NULL), and
 * normalizes the values in place (bools "1"/"0"). A key neither declares, or a value that does not fit its type
 * and range, is an error naming the flag ("--threads: plugin test-engine has no option 'threads' (its options:
 * n_ctx, ...)"). A plugin that declares nothing (ABI 1.1 and older) lets keys through, with a warning logged.
 * Returns 0, or -1 with err. */
int sy_engine_options_check(sy_engine_options *eo, const sy_plugin *engine, const sy_plugin *drafter, char *err,
                            size_t err_size);

#endif
