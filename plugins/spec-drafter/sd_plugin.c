/* spec-drafter: the plugin entry, the "sy.drafter/1" table and the dispatch to the three kinds of drafter. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sd_internal.h"

#define SD_DRAFTER_MAGIC 0x53444446u /* "SDDF" */
#define SD_STATE_MAGIC 0x53445354u   /* "SDST" */
#define SD_DEFAULT_NGRAM_MIN 1u
#define SD_DEFAULT_NGRAM_MAX 4u

static _Thread_local char sd_error_buf[512];
static const sy_host_api *sd_host_api;

const char *sd_error_message(void) { return sd_error_buf[0] ? sd_error_buf : "no error"; }

sy_status sd_fail(sy_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(sd_error_buf, sizeof sd_error_buf, fmt, ap);
    va_end(ap);
    return st;
}

void sd_log(sy_log_level level, const char *fmt, ...) {
    if (sd_host_api == NULL || sd_host_api->log == NULL) return;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    sd_host_api->log(level, SD_PLUGIN_NAME, line);
}

const sy_host_api *sd_host(void) { return sd_host_api; }

sy_status sd_option_u32(const sy_option *options, size_t n_options, const char *key, uint32_t min, uint32_t max,
                        uint32_t *out) {
    for (size_t i = 0; i < n_options; i++) {
        if (options[i].key == NULL || strcmp(options[i].key, key) != 0) continue;
        const char *v = options[i].value != NULL ? options[i].value : "";
        uint64_t x = 0;
        size_t len = strlen(v);
        bool ok = len > 0 && len <= 10;
        for (size_t k = 0; ok && k < len; k++) {
            if (v[k] < '0' || v[k] > '9') ok = false;
            else x = x * 10 + (uint64_t)(v[k] - '0');
        }
        if (!ok || x < min || x > max)
            return sd_fail(SY_ERR_INVALID_ARGUMENT, "option %s: '%.40s' is not a whole number from %u to %u", key, v,
                           (unsigned)min, (unsigned)max);
        *out = (uint32_t)x;
    }
    return SY_OK;
}

static bool has_prefix(const char *s, const char *prefix) { return strncmp(s, prefix, strlen(prefix)) == 0; }

static sy_status sd_supports(const char *spec) {
    if (spec == NULL) return sd_fail(SY_ERR_INVALID_ARGUMENT, "no drafter spec given");
    if (strcmp(spec, "ngram") == 0) return SY_OK;
    if (has_prefix(spec, "model:") && spec[6] != '\0') return SY_OK;
    if (has_prefix(spec, "replay:") && spec[7] != '\0') return SY_OK;
    return sd_fail(SY_ERR_UNSUPPORTED, "'%.80s' is not a drafter of " SD_PLUGIN_NAME " (ngram, model:NAME, replay:FILE)",
                   spec);
}

static sy_status sd_create(const char *spec, const char *target_model_name, uint32_t n_vocab,
                           const sy_option *options, size_t n_options, sy_drafter **out) {
    if (out == NULL) return sd_fail(SY_ERR_INVALID_ARGUMENT, "create: no place for the drafter");
    *out = NULL;
    if (options == NULL && n_options > 0) return sd_fail(SY_ERR_INVALID_ARGUMENT, "create: options missing");
    sy_status st = sd_supports(spec);
    if (st != SY_OK) return st;
    if (n_vocab == 0) return sd_fail(SY_ERR_INVALID_ARGUMENT, "create: the target's vocabulary is empty");
    uint32_t n_min = SD_DEFAULT_NGRAM_MIN, n_max = SD_DEFAULT_NGRAM_MAX;
    if ((st = sd_option_u32(options, n_options, "draft_ngram_min", 1, SD_MAX_NGRAM, &n_min)) != SY_OK) return st;
    if ((st = sd_option_u32(options, n_options, "draft_ngram_max", 1, SD_MAX_NGRAM, &n_max)) != SY_OK) return st;
    if (n_min > n_max)
        return sd_fail(SY_ERR_INVALID_ARGUMENT, "draft_ngram_min (%u) is more than draft_ngram_max (%u)",
                       (unsigned)n_min, (unsigned)n_max);

    sy_drafter *d = calloc(1, sizeof *d);
    if (d == NULL) return sd_fail(SY_ERR_OUT_OF_MEMORY, "out of memory for a drafter");
    d->magic = SD_DRAFTER_MAGIC;
    d->n_vocab = n_vocab;
    d->ngram_min = n_min;
    d->ngram_max = n_max;
    if (strcmp(spec, "ngram") == 0) {
        d->kind = SD_KIND_NGRAM;
    } else if (has_prefix(spec, "model:")) {
        d->kind = SD_KIND_MODEL;
        st = sd_model_create(spec + 6, target_model_name, n_vocab, &d->model);
    } else {
        d->kind = SD_KIND_REPLAY;
        st = sd_replay_create(spec + 7, n_vocab, options, n_options, &d->replay);
    }
    if (st != SY_OK) {
        free(d);
        return st;
    }
    *out = d;
    return SY_OK;
}

static bool drafter_ok(const sy_drafter *d) { return d != NULL && d->magic == SD_DRAFTER_MAGIC; }

static void sd_destroy(sy_drafter *d) {
    if (!drafter_ok(d)) return;
    if (d->model != NULL) sd_model_destroy(d->model);
    if (d->replay != NULL) sd_replay_destroy(d->replay);
    d->magic = 0;
    free(d);
}

static sy_status sd_state_create(sy_drafter *d, sy_draft_state **out) {
    if (out == NULL) return sd_fail(SY_ERR_INVALID_ARGUMENT, "state_create: no place for the state");
    *out = NULL;
    if (!drafter_ok(d)) return sd_fail(SY_ERR_INVALID_ARGUMENT, "state_create: not a drafter of " SD_PLUGIN_NAME);
    sy_draft_state *s = calloc(1, sizeof *s);
    if (s == NULL) return sd_fail(SY_ERR_OUT_OF_MEMORY, "out of memory for a draft state");
    s->magic = SD_STATE_MAGIC;
    s->owner = d;
    sd_ngram_init(&s->ngram, d->ngram_min, d->ngram_max);
    if (d->kind == SD_KIND_MODEL) {
        sy_status st = sd_model_state_create(d->model, &s->model);
        if (st != SY_OK) {
            free(s);
            return st;
        }
    }
    *out = s;
    return SY_OK;
}

static bool state_ok(const sy_drafter *d, const sy_draft_state *s) {
    return drafter_ok(d) && s != NULL && s->magic == SD_STATE_MAGIC && s->owner == d;
}

static void sd_state_free(sy_drafter *d, sy_draft_state *s) {
    if (!state_ok(d, s)) return;
    if (s->model != NULL) sd_model_state_free(d->model, s->model);
    sd_ngram_free(&s->ngram);
    s->magic = 0;
    free(s);
}

static sy_status sd_propose(sy_drafter *d, sy_draft_state *s, const int32_t *context, uint32_t n_context,
                            uint32_t k_max, int32_t *out, uint32_t *n_out) {
    if (n_out == NULL) return sd_fail(SY_ERR_INVALID_ARGUMENT, "propose: no place for the count");
    *n_out = 0;
    if (!state_ok(d, s)) return sd_fail(SY_ERR_INVALID_ARGUMENT, "propose: not a state of this drafter");
    if ((context == NULL && n_context > 0) || (out == NULL && k_max > 0))
        return sd_fail(SY_ERR_INVALID_ARGUMENT, "propose: missing context or output buffer");
    if (k_max == 0 || n_context == 0) return SY_OK;
    switch (d->kind) {
    case SD_KIND_NGRAM: {
        sy_status st = sd_ngram_sync(&s->ngram, context, n_context);
        if (st != SY_OK) return st;
        *n_out = sd_ngram_propose(&s->ngram, s->ngram.tokens, s->ngram.n_tokens, k_max, out);
        return SY_OK;
    }
    case SD_KIND_REPLAY:
        *n_out = sd_replay_propose(d->replay, context, n_context, k_max, out);
        return SY_OK;
    case SD_KIND_MODEL:
        return sd_model_propose(d->model, s->model, context, n_context, k_max, out, n_out);
    }
    return sd_fail(SY_ERR_INTERNAL, "propose: unknown drafter kind");
}

static sy_status sd_observe(sy_drafter *d, sy_draft_state *s, uint32_t n_proposed, uint32_t n_accepted,
                            const int32_t *context, uint32_t n_context) {
    if (!state_ok(d, s)) return sd_fail(SY_ERR_INVALID_ARGUMENT, "observe: not a state of this drafter");
    if (n_accepted > n_proposed)
        return sd_fail(SY_ERR_INVALID_ARGUMENT, "observe: %u accepted of %u proposed", (unsigned)n_accepted,
                       (unsigned)n_proposed);
    if (context == NULL && n_context > 0) return sd_fail(SY_ERR_INVALID_ARGUMENT, "observe: missing context");
    /* Each kind follows the context at its next propose (its own sequence is synced there), so that a proposal
     * the host dropped unverified (a cancelled step) never leaves a drafter out of step. Indexing the accepted
     * tokens now keeps the next proposal short for n-gram drafting. */
    if (d->kind == SD_KIND_NGRAM) return sd_ngram_sync(&s->ngram, context, n_context);
    return SY_OK;
}

static const sy_drafter_api sd_api = {
    .struct_size = sizeof(sy_drafter_api),
    .error_message = sd_error_message,
    .supports = sd_supports,
    .create = sd_create,
    .destroy = sd_destroy,
    .state_create = sd_state_create,
    .state_free = sd_state_free,
    .propose = sd_propose,
    .observe = sd_observe,
};

static sy_status sd_init(const sy_host_api *host) {
    if (host == NULL) return sd_fail(SY_ERR_INVALID_ARGUMENT, "init: no host API");
    sd_host_api = host;
    return SY_OK;
}

static void sd_deinit(void) { sd_host_api = NULL; }

/* The options sd_create and sd_replay_create read (through sd_option_u32), with the same ranges. */
static const sy_option_spec sd_option_specs[] = {
    {sizeof(sy_option_spec), "draft_ngram_min", SY_OPTION_UINT, "1", "shortest n-gram the prompt lookup matches", 1,
     SD_MAX_NGRAM, NULL},
    {sizeof(sy_option_spec), "draft_ngram_max", SY_OPTION_UINT, "4", "longest n-gram the prompt lookup matches", 1,
     SD_MAX_NGRAM, NULL},
    {sizeof(sy_option_spec), "draft_replay_corrupt", SY_OPTION_UINT, "0",
     "replay drafter: percent of proposals corrupted (a :PCT in the spec wins)", 0, 100, NULL},
    {sizeof(sy_option_spec), "draft_replay_seed", SY_OPTION_UINT, "0", "replay drafter: seed of the corruption", 0,
     UINT32_MAX, NULL},
};

static const sy_plugin_options_api sd_options_api = {
    sizeof(sy_plugin_options_api), sizeof sd_option_specs / sizeof sd_option_specs[0], sizeof(sy_option_spec),
    sd_option_specs};

static const void *sd_get_interface(const char *id) {
    if (id != NULL && strcmp(id, SY_DRAFTER_INTERFACE_ID) == 0) return &sd_api;
    if (id != NULL && strcmp(id, SY_PLUGIN_OPTIONS_INTERFACE_ID) == 0) return &sd_options_api;
    return NULL;
}

SY_DEFINE_PLUGIN_ENTRY(SD_PLUGIN_NAME, "0.1.0", "speculative decoding drafters: n-gram prompt lookup, draft model",
                       sd_init, sd_deinit, sd_get_interface);
