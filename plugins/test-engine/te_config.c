/* test-engine: the model file and load options (key=value), with strict range checks. */
#include <stdio.h>
#include <string.h>

#include "te_internal.h"

typedef enum te_key_scope {
    TE_KEY_FILE_ONLY, /* part of the model's identity: only the file may set it */
    TE_KEY_LOADABLE   /* also accepted as a load option */
} te_key_scope;

typedef struct te_key_spec {
    const char *key;
    te_key_scope scope;
    uint64_t min;
    uint64_t max;
    size_t offset; /* of the uint32_t (or, for "seed", uint64_t) field in te_config */
} te_key_spec;

static const te_key_spec te_keys[] = {
    {"seed", TE_KEY_FILE_ONLY, 0, UINT64_MAX, offsetof(te_config, seed)},
    {"n_vocab", TE_KEY_FILE_ONLY, TE_MIN_VOCAB, 65536, offsetof(te_config, n_vocab)},
    {"n_layer", TE_KEY_FILE_ONLY, 1, 64, offsetof(te_config, n_layer)},
    {"n_ctx_train", TE_KEY_FILE_ONLY, 1, 1048576, offsetof(te_config, n_ctx_train)},
    {"add_bos", TE_KEY_FILE_ONLY, 0, 1, offsetof(te_config, add_bos)},
    {"load_delay_ms", TE_KEY_FILE_ONLY, 0, 60000, offsetof(te_config, load_delay_ms)},
    {"n_ctx", TE_KEY_LOADABLE, 1, 1048576, offsetof(te_config, n_ctx)},
    {"recurrent", TE_KEY_LOADABLE, 0, 1, offsetof(te_config, recurrent)},
    {"history", TE_KEY_LOADABLE, 16, 65536, offsetof(te_config, history)},
    {"delay_us", TE_KEY_LOADABLE, 0, 1000000, offsetof(te_config, delay_us)},
    {"eos_one_in", TE_KEY_LOADABLE, 0, 1000000000, offsetof(te_config, eos_one_in)},
    {"max_sequences", TE_KEY_LOADABLE, 0, 65536, offsetof(te_config, max_sequences)},
    {"max_decode_tokens", TE_KEY_LOADABLE, 0, 1048576, offsetof(te_config, max_decode_tokens)},
    {"device_mb", TE_KEY_LOADABLE, 0, 1048576, offsetof(te_config, device_mb)},
};

static void te_config_defaults(te_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    strcpy(cfg->name, "test-model");
    cfg->n_ctx = 4096;
    cfg->n_vocab = 264;
    cfg->n_layer = 2;
    cfg->history = 16;
    cfg->eos_one_in = 100;
    cfg->add_bos = 1;
}

/* Plain decimal, no sign, no spaces, no overflow. */
static int te_parse_u64(const char *s, size_t len, uint64_t *out) {
    if (len == 0 || len > 20) return -1;
    uint64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        uint64_t digit = (uint64_t)(s[i] - '0');
        if (v > (UINT64_MAX - digit) / 10) return -1;
        v = v * 10 + digit;
    }
    *out = v;
    return 0;
}

static const te_key_spec *te_find_key(const char *key, size_t key_len) {
    for (size_t i = 0; i < sizeof te_keys / sizeof te_keys[0]; i++)
        if (strlen(te_keys[i].key) == key_len && memcmp(te_keys[i].key, key, key_len) == 0) return &te_keys[i];
    return NULL;
}

static void te_store(te_config *cfg, const te_key_spec *spec, uint64_t v) {
    char *field = (char *)cfg + spec->offset;
    if (spec->offset == offsetof(te_config, seed)) {
        memcpy(field, &v, sizeof v);
    } else {
        uint32_t v32 = (uint32_t)v; /* range-checked against spec->max <= UINT32_MAX */
        memcpy(field, &v32, sizeof v32);
    }
}

/* Value check shared by file lines and options; `where` prefixes the message ("line 3: " or "option "). */
static sy_status te_set_value(te_config *cfg, const te_key_spec *spec, const char *key_given, const char *value,
                              size_t value_len, sy_status err, const char *where) {
    uint64_t v;
    if (te_parse_u64(value, value_len, &v) != 0)
        return te_fail(err, "%s%s: '%.*s' is not a decimal number", where, key_given,
                       (int)(value_len > 40 ? 40 : value_len), value);
    if (v < spec->min || v > spec->max)
        return te_fail(err, "%s%s: %llu is out of range %llu..%llu", where, key_given, (unsigned long long)v,
                       (unsigned long long)spec->min, (unsigned long long)spec->max);
    te_store(cfg, spec, v);
    return SY_OK;
}

static int te_is_space(char c) { return c == ' ' || c == '\t' || c == '\r'; }

static void te_trim(const char **s, size_t *len) {
    while (*len > 0 && te_is_space(**s)) (*s)++, (*len)--;
    while (*len > 0 && te_is_space((*s)[*len - 1])) (*len)--;
}

static int te_name_char_ok(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
           c == '.';
}

sy_status te_config_parse_file(const char *text, size_t len, te_config *cfg) {
    te_config_defaults(cfg);
    if (memchr(text, '\0', len) != NULL) return te_fail(SY_ERR_FORMAT, "model file contains a NUL byte");
    uint64_t seen = 0; /* bit i: te_keys[i] given; 63: name */
    size_t pos = 0;
    uint32_t line_no = 0;
    while (pos < len) {
        const char *line = text + pos;
        const char *nl = memchr(line, '\n', len - pos);
        size_t line_len = nl ? (size_t)(nl - line) : len - pos;
        pos += line_len + (nl ? 1 : 0);
        line_no++;
        if (line_no == 1) {
            while (line_len > 0 && line[line_len - 1] == '\r') line_len--;
            if (line_len != strlen(TE_MAGIC_LINE) || memcmp(line, TE_MAGIC_LINE, line_len) != 0)
                return te_fail(SY_ERR_UNSUPPORTED, "first line is not '" TE_MAGIC_LINE "'");
            continue;
        }
        te_trim(&line, &line_len);
        if (line_len == 0 || line[0] == '#') continue;
        const char *eq = memchr(line, '=', line_len);
        if (eq == NULL) return te_fail(SY_ERR_FORMAT, "line %u: expected key=value", line_no);
        const char *key = line;
        size_t key_len = (size_t)(eq - line);
        const char *value = eq + 1;
        size_t value_len = line_len - key_len - 1;
        te_trim(&key, &key_len);
        te_trim(&value, &value_len);
        if (key_len == 4 && memcmp(key, "name", 4) == 0) {
            if (seen & (1ull << 63)) return te_fail(SY_ERR_FORMAT, "line %u: name given twice", line_no);
            seen |= 1ull << 63;
            if (value_len == 0 || value_len >= sizeof cfg->name)
                return te_fail(SY_ERR_FORMAT, "line %u: name must be 1..%zu characters", line_no,
                               sizeof cfg->name - 1);
            for (size_t i = 0; i < value_len; i++)
                if (!te_name_char_ok(value[i]))
                    return te_fail(SY_ERR_FORMAT, "line %u: name may hold only [A-Za-z0-9._-]", line_no);
            memcpy(cfg->name, value, value_len);
            cfg->name[value_len] = '\0';
            continue;
        }
        const te_key_spec *spec = te_find_key(key, key_len);
        if (spec == NULL)
            return te_fail(SY_ERR_FORMAT, "line %u: unknown key '%.*s'", line_no, (int)(key_len > 40 ? 40 : key_len),
                           key);
        unsigned bit = (unsigned)(spec - te_keys);
        if (seen & (1ull << bit)) return te_fail(SY_ERR_FORMAT, "line %u: %s given twice", line_no, spec->key);
        seen |= 1ull << bit;
        char where[32];
        snprintf(where, sizeof where, "line %u: ", line_no);
        sy_status st = te_set_value(cfg, spec, spec->key, value, value_len, SY_ERR_FORMAT, where);
        if (st != SY_OK) return st;
    }
    if (line_no == 0) return te_fail(SY_ERR_UNSUPPORTED, "empty file, not a " TE_MAGIC_LINE);
    if (cfg->n_ctx_train == 0) cfg->n_ctx_train = cfg->n_ctx;
    return SY_OK;
}

sy_status te_config_apply_option(te_config *cfg, const char *key, const char *value, int *known) {
    *known = 0;
    /* The host's general spelling of the context length (switchyard --ctx-size). */
    const te_key_spec *spec = strcmp(key, "ctx_size") == 0 ? te_find_key("n_ctx", 5) : te_find_key(key, strlen(key));
    if (spec == NULL) return SY_OK;
    if (spec->scope != TE_KEY_LOADABLE) return SY_OK; /* identity keys belong to the file; not an option */
    *known = 1;
    return te_set_value(cfg, spec, key, value, strlen(value), SY_ERR_INVALID_ARGUMENT, "option ");
}

/* The loadable keys of te_keys, plus ctx_size; the model file may set each of them too, so the defaults are the
 * file's (the help names the built-in one). Kept in step with te_keys: tests/plugins/test_plugin_options.c loads
 * each key at both ends of its range and just outside. */
/* Designated, so the table compiles for the 1.1 headers too (test-engine-abi11), which lack 1.3's choices. */
#define TE_UINT_SPEC(key_, type_, default_, help_, min_, max_) \
    {.struct_size = sizeof(sy_option_spec), .key = key_, .type = type_, .default_value = default_, .help = help_, \
     .min = min_, .max = max_}
static const sy_option_spec te_option_specs[] = {
    TE_UINT_SPEC("n_ctx", SY_OPTION_UINT, "", "context length (default: the model file's, else 4096)", 1,
     1048576),
    TE_UINT_SPEC("ctx_size", SY_OPTION_UINT, "", "the host's spelling of n_ctx", 1, 1048576),
    TE_UINT_SPEC("recurrent", SY_OPTION_UINT, "", "1 adds a recurrent state (default: the file's, else 0)", 0, 1),
    TE_UINT_SPEC("history", SY_OPTION_UINT, "", "how far a recurrent sequence can roll back (default: the file's, else 16)", 16, 65536),
    TE_UINT_SPEC("delay_us", SY_OPTION_UINT, "", "microseconds of sleep per decoded token (default: the file's, else 0)", 0, 1000000),
    TE_UINT_SPEC("eos_one_in", SY_OPTION_UINT, "",
     "greedy output ends with probability 1/N per position; 0: never (default: the file's, else 100)", 0, 1000000000),
    TE_UINT_SPEC("max_sequences", SY_OPTION_UINT, "", "most live sequences; 0: no limit (default: the file's, else 0)", 0, 65536),
    TE_UINT_SPEC("max_decode_tokens", SY_OPTION_UINT, "",
     "most tokens of one decode call, reported in the model info; 0: no limit (default: the file's, else 0)", 0,
     1048576),
    TE_UINT_SPEC("device_mb", SY_OPTION_UINT, "",
     "accelerator memory it claims to hold (nothing is allocated), for the host's budgets (default: 0)", 0, 1048576),
};

const sy_plugin_options_api te_options_api = {sizeof(sy_plugin_options_api),
                                              sizeof te_option_specs / sizeof te_option_specs[0],
                                              sizeof(sy_option_spec), te_option_specs};
