/* Command-line options that the host passes through to engine plugins as key=value load options. */
#ifndef SY_HOST_ENGINE_OPTIONS_H
#define SY_HOST_ENGINE_OPTIONS_H

#include <getopt.h>
#include <stddef.h>
#include <stdio.h>
#include <switchyard/abi.h>

typedef struct sy_engine_options {
    sy_option *items; /* keys and values are malloc'd */
    size_t n_items;
} sy_engine_options;

void sy_engine_options_init(sy_engine_options *eo);
void sy_engine_options_free(sy_engine_options *eo);
/* Set key=value, replacing an earlier value of the same key. */
void sy_engine_options_set(sy_engine_options *eo, const char *key, const char *value);

/* Append the getopt_long entries of the engine options to `out` (room for `room`); returns how many. */
size_t sy_engine_options_getopt(struct option *out, size_t room);
/* Handle one getopt result: 1 handled, 0 not an engine option, -1 bad value (err set). */
int sy_engine_options_handle(sy_engine_options *eo, int code, const char *arg, char *err, size_t err_size);
void sy_engine_options_usage(FILE *out);

#endif
