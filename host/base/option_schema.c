/* Option schemas of plugins: see option_schema.h. A plugin's table is input like any other: every field is
 * checked before the host prints or trusts it. */
#include "base/option_schema.h"

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* 2^64 as a double: UINT ranges reach UINT64_MAX, which a double rounds up to this. */
#define TWO_POW_64 18446744073709551616.0

const char *sy_option_type_name(uint32_t type) {
    switch (type) {
    case SY_OPTION_BOOL: return "bool";
    case SY_OPTION_UINT: return "uint";
    case SY_OPTION_NUMBER: return "number";
    case SY_OPTION_STRING: return "string";
    case SY_OPTION_PATH: return "path";
    case SY_OPTION_PATH_LIST: return "paths";
    default: return "?";
    }
}

static char lower(char ch) { return (ch >= 'A' && ch <= 'Z') ? (char)(ch - 'A' + 'a') : ch; }

static bool equal_nocase(const char *a, const char *b) {
    while (*a && *b && lower(*a) == lower(*b)) a++, b++;
    return *a == '\0' && *b == '\0';
}

/* Printable one-line text of at most max bytes (UTF-8 bytes above 0x7f pass; control characters do not). */
static bool is_line(const char *s, size_t max) {
    size_t n = 0;
    for (; s[n]; n++)
        if ((unsigned char)s[n] < 0x20 || s[n] == 0x7f) return false;
    return n <= max;
}

static bool is_key(const char *s) {
    if (!(s[0] >= 'a' && s[0] <= 'z')) return false;
    size_t n = 0;
    for (; s[n]; n++)
        if (!((s[n] >= 'a' && s[n] <= 'z') || (s[n] >= '0' && s[n] <= '9') || s[n] == '_' || s[n] == '.'))
            return false;
    return n <= SY_OPTION_KEY_MAX;
}

/* The whole string as a plain decimal (no sign, no spaces); -1 when it is not one or overflows. */
static int parse_whole(const char *s, uint64_t *out) {
    uint64_t v = 0;
    const char *p = s;
    for (; *p >= '0' && *p <= '9'; p++) {
        unsigned d = (unsigned)(*p - '0');
        if (v > (UINT64_MAX - d) / 10) return -1;
        v = v * 10 + d;
    }
    if (p == s || *p != '\0') return -1;
    *out = v;
    return 0;
}

/* [-]digits[.digits][(e|E)[+-]digits], finite: what strtod reads minus hex, inf, nan and spaces. */
static int parse_number(const char *s, double *out) {
    const char *p = s;
    if (*p == '-') p++;
    const char *digits = p;
    while (*p >= '0' && *p <= '9') p++;
    bool whole = p > digits;
    if (*p == '.') {
        const char *frac = ++p;
        while (*p >= '0' && *p <= '9') p++;
        if (!whole && p == frac) return -1;
    } else if (!whole) {
        return -1;
    }
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-') p++;
        const char *exp = p;
        while (*p >= '0' && *p <= '9') p++;
        if (p == exp) return -1;
    }
    if (*p != '\0') return -1;
    double v = strtod(s, NULL);
    if (!isfinite(v)) return -1;
    *out = v;
    return 0;
}

static uint64_t as_u64(double d) { return d >= TWO_POW_64 ? UINT64_MAX : (uint64_t)d; }

const char *sy_option_range_text(const sy_option_spec *spec, char *buf, size_t size) {
    if (spec->type == SY_OPTION_UINT)
        snprintf(buf, size, "%llu..%llu", (unsigned long long)as_u64(spec->min), (unsigned long long)as_u64(spec->max));
    else if (spec->type == SY_OPTION_NUMBER)
        snprintf(buf, size, "%g..%g", spec->min, spec->max);
    else if (sy_option_choices(spec) != NULL)
        snprintf(buf, size, "%s", sy_option_choices(spec));
    else if (size > 0)
        buf[0] = '\0';
    return buf;
}

/* The value quoted for a message, cut at 60 bytes. */
static void say(char *why, size_t why_size, const char *value, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void say(char *why, size_t why_size, const char *value, const char *fmt, ...) {
    char rest[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rest, sizeof rest, fmt, ap);
    va_end(ap);
    snprintf(why, why_size, "'%.60s%s' %s", value, strlen(value) > 60 ? "..." : "", rest);
}

const char *sy_option_value_check(const sy_option_spec *spec, const char *value, char norm[SY_OPTION_NORM_MAX],
                                  char *why, size_t why_size) {
    char range[96];
    if (value == NULL) value = "";
    switch (spec->type) {
    case SY_OPTION_BOOL: {
        static const char *const yes[] = {"true", "yes", "on", "1"}, *const no[] = {"false", "no", "off", "0"};
        for (size_t i = 0; i < 4; i++) {
            if (equal_nocase(value, yes[i])) return strcpy(norm, "1");
            if (equal_nocase(value, no[i])) return strcpy(norm, "0");
        }
        say(why, why_size, value, "is not true or false");
        return NULL;
    }
    case SY_OPTION_UINT: {
        uint64_t v;
        if (parse_whole(value, &v) != 0) {
            say(why, why_size, value, "is not a whole number");
            return NULL;
        }
        /* Compared as doubles: ranges are doubles, and exact up to 2^53, beyond any count an option holds. */
        if ((double)v < spec->min || (double)v > spec->max) {
            say(why, why_size, value, "is out of range (%s)", sy_option_range_text(spec, range, sizeof range));
            return NULL;
        }
        snprintf(norm, SY_OPTION_NORM_MAX, "%llu", (unsigned long long)v);
        return norm;
    }
    case SY_OPTION_NUMBER: {
        double v;
        if (parse_number(value, &v) != 0) {
            say(why, why_size, value, "is not a number");
            return NULL;
        }
        if (v < spec->min || v > spec->max) {
            say(why, why_size, value, "is out of range (%s)", sy_option_range_text(spec, range, sizeof range));
            return NULL;
        }
        return value;
    }
    case SY_OPTION_PATH:
    case SY_OPTION_PATH_LIST:
        if (value[0] == '\0') {
            snprintf(why, why_size, "the path is empty");
            return NULL;
        }
        return value;
    case SY_OPTION_STRING: {
        const char *choices = sy_option_choices(spec);
        if (choices == NULL) return value;
        for (const char *c = choices; *c;) {
            size_t n = strcspn(c, ",");
            if (strlen(value) == n && strncmp(c, value, n) == 0) return value;
            c += n + (c[n] == ',');
        }
        say(why, why_size, value, "is not one of %.100s", choices);
        return NULL;
    }
    default:
        snprintf(why, why_size, "the option has an unknown type %u", (unsigned)spec->type);
        return NULL;
    }
}

/* Formats "option I (KEY): ..." into why; returns -1. */
static int bad(char *why, size_t why_size, uint32_t i, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int bad(char *why, size_t why_size, uint32_t i, const char *key, const char *fmt, ...) {
    char rest[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rest, sizeof rest, fmt, ap);
    va_end(ap);
    if (key != NULL && is_key(key))
        snprintf(why, why_size, "option %u (%s): %s", (unsigned)i, key, rest);
    else
        snprintf(why, why_size, "option %u: %s", (unsigned)i, rest);
    return -1;
}

int sy_option_schema_check(const sy_plugin_options_api *api, char *why, size_t why_size) {
    if (api == NULL) return snprintf(why, why_size, "no table"), -1;
    if (api->struct_size < offsetof(sy_plugin_options_api, options) + sizeof api->options)
        return snprintf(why, why_size, "struct_size %u is smaller than the 1.2 table", (unsigned)api->struct_size), -1;
    if (api->n_options > SY_OPTION_SCHEMA_MAX)
        return snprintf(why, why_size, "%u options; at most %d", (unsigned)api->n_options, SY_OPTION_SCHEMA_MAX), -1;
    if (api->n_options == 0) return 0;
    if (api->options == NULL) return snprintf(why, why_size, "%u options but no array", (unsigned)api->n_options), -1;
    /* The stride must keep every spec aligned (the host reads them in place) and within reason. */
    if (api->spec_size < SY_OPTION_SPEC_MIN_SIZE || api->spec_size > 4096 ||
        api->spec_size % _Alignof(sy_option_spec) != 0)
        return snprintf(why, why_size, "spec_size %u is not a stride of sy_option_spec (at least %zu, aligned)",
                        (unsigned)api->spec_size, (size_t)SY_OPTION_SPEC_MIN_SIZE), -1;
    if (((uintptr_t)api->options) % _Alignof(sy_option_spec) != 0)
        return snprintf(why, why_size, "the options array is misaligned"), -1;
    for (uint32_t i = 0; i < api->n_options; i++) {
        const sy_option_spec *s = sy_plugin_option(api, i);
        if (s->struct_size < SY_OPTION_SPEC_MIN_SIZE || s->struct_size > api->spec_size)
            return bad(why, why_size, i, NULL, "struct_size %u does not fit the stride %u", (unsigned)s->struct_size,
                       (unsigned)api->spec_size);
        if (s->key == NULL || !is_key(s->key))
            return bad(why, why_size, i, NULL, "the key is not [a-z0-9_.] (1 to %d, starting with a letter)",
                       SY_OPTION_KEY_MAX);
        for (uint32_t j = 0; j < i; j++)
            if (strcmp(sy_plugin_option(api, j)->key, s->key) == 0)
                return bad(why, why_size, i, s->key, "declared twice (also option %u)", (unsigned)j);
        if (s->type > SY_OPTION_PATH_LIST) return bad(why, why_size, i, s->key, "unknown type %u", (unsigned)s->type);
        if (s->help == NULL || s->help[0] == '\0' || !is_line(s->help, SY_OPTION_HELP_MAX))
            return bad(why, why_size, i, s->key, "the help is missing or not one printable line of at most %d bytes",
                       SY_OPTION_HELP_MAX);
        if (s->default_value == NULL || !is_line(s->default_value, SY_OPTION_HELP_MAX))
            return bad(why, why_size, i, s->key, "the default is missing (\"\" when computed) or not printable");
        if (s->type == SY_OPTION_UINT || s->type == SY_OPTION_NUMBER) {
            if (!isfinite(s->min) || !isfinite(s->max))
                return bad(why, why_size, i, s->key, "the range is not finite");
            if (s->min > s->max) return bad(why, why_size, i, s->key, "min %g is above max %g", s->min, s->max);
            if (s->type == SY_OPTION_UINT &&
                (s->min < 0 || s->max > TWO_POW_64 || floor(s->min) != s->min || floor(s->max) != s->max))
                return bad(why, why_size, i, s->key, "a uint range must be whole numbers from 0 to 2^64");
        }
        const char *choices = sy_option_choices(s);
        if (choices != NULL) {
            if (s->type != SY_OPTION_STRING)
                return bad(why, why_size, i, s->key, "choices are for string options only");
            if (!is_line(choices, SY_OPTION_HELP_MAX) || choices[0] == '\0' || choices[0] == ',' ||
                choices[strlen(choices) - 1] == ',' || strstr(choices, ",,") != NULL || strchr(choices, ' ') != NULL)
                return bad(why, why_size, i, s->key,
                           "the choices are not one line of comma-separated values (no spaces, none empty)");
        }
        if (s->default_value[0] != '\0') {
            char norm[SY_OPTION_NORM_MAX], reason[256];
            if (sy_option_value_check(s, s->default_value, norm, reason, sizeof reason) == NULL)
                return bad(why, why_size, i, s->key, "the default %s", reason);
        }
    }
    return 0;
}

const sy_option_spec *sy_option_schema_find(const sy_plugin_options_api *api, const char *key) {
    if (api == NULL || key == NULL) return NULL;
    for (uint32_t i = 0; i < api->n_options; i++) {
        const sy_option_spec *s = sy_plugin_option(api, i);
        if (strcmp(s->key, key) == 0) return s;
    }
    return NULL;
}

const char *sy_option_schema_keys(const sy_plugin_options_api *api, char *buf, size_t size) {
    if (size == 0) return buf;
    buf[0] = '\0';
    size_t used = 0;
    for (uint32_t i = 0; api != NULL && i < api->n_options; i++) {
        const char *key = sy_plugin_option(api, i)->key;
        size_t need = strlen(key) + (i ? 2 : 0);
        if (used + need + 6 >= size) { /* room for ", ..." and the NUL */
            snprintf(buf + used, size - used, "%s...", i ? ", " : "");
            return buf;
        }
        used += (size_t)snprintf(buf + used, size - used, "%s%s", i ? ", " : "", key);
    }
    return buf;
}
