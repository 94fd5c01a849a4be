/*
 * Option schemas of plugins ("sy.plugin.options/1", abi.h): the well-formedness check the loader applies to a
 * plugin's table, lookups, and the check of one value against a declared option that the config and the
 * command line share, so both accept and refuse the same values.
 */
#ifndef SY_HOST_OPTION_SCHEMA_H
#define SY_HOST_OPTION_SCHEMA_H

#include <stddef.h>
#include <stdint.h>
#include <switchyard/abi.h>

/* The 1.2 spec, the smallest a plugin may declare: everything up to max. */
#define SY_OPTION_SPEC_MIN_SIZE (offsetof(sy_option_spec, max) + sizeof(double))
#define SY_OPTION_SCHEMA_MAX 256 /* options one plugin may declare */
#define SY_OPTION_KEY_MAX 64
#define SY_OPTION_HELP_MAX 200
#define SY_OPTION_NORM_MAX 32    /* room for a normalized bool or whole number */

/* The 1.3 choices of a STRING option (abi.h), or NULL: absent, or the plugin's spec is older than 1.3. */
static inline const char *sy_option_choices(const sy_option_spec *spec) {
    return SY_HAS_FIELD(spec, sy_option_spec, choices) ? spec->choices : NULL;
}

/* "bool", "uint", "number", "string", "path", "paths"; "?" for an unknown type. */
const char *sy_option_type_name(uint32_t type);

/* 0 when the table is well-formed: sizes, at most SY_OPTION_SCHEMA_MAX options, keys [a-z0-9_.] (1 to 64, first
 * a letter) and unique, known types, help and default present (printable, one line), numeric ranges finite with
 * min <= max (UINT: whole numbers from 0 to 2^64), and every non-empty default valid for its own option. Else -1
 * with why ("option 3 (threads): min 8 is above max 4"); since 1.3 a STRING option's choices, where given, are
 * comma-separated values without spaces. */
int sy_option_schema_check(const sy_plugin_options_api *api, char *why, size_t why_size);

/* The declared option `key`, or NULL (api NULL: NULL). The table must have passed sy_option_schema_check. */
const sy_option_spec *sy_option_schema_find(const sy_plugin_options_api *api, const char *key);

/* Checks `value` against `spec`. Returns what to hand to the plugin: for BOOL "1" or "0" (the CPU engines read
 * only lower-case words), for UINT the plain decimal, in `norm`; for the other types `value` itself (paths are not
 * resolved here: the caller knows what they are relative to). NULL when the value does not fit, with why ("'abc'
 * is not a whole number", "'0' is out of range (1..1024)", "'q4' is not one of f16,q8_0,f32"). */
const char *sy_option_value_check(const sy_option_spec *spec, const char *value, char norm[SY_OPTION_NORM_MAX],
                                  char *why, size_t why_size);

/* "1..1024" for UINT and NUMBER, the choices of a STRING option that has them ("f16,q8_0,f32"), else "". */
const char *sy_option_range_text(const sy_option_spec *spec, char *buf, size_t size);

/* The keys of a table, comma-separated, ending in ", ..." when they do not fit in buf. */
const char *sy_option_schema_keys(const sy_plugin_options_api *api, char *buf, size_t size);

#endif
