/* The config's engine keys against the plugins' option schemas: see config_check.h. */
#include "manager/config_check.h"

#include <stdio.h>
#include <string.h>

#include "engine/speculative.h"

/* Adds p's declared options to out, or says why they cannot be checked. */
static void add_plugin(sy_config_option_schema *out, const sy_plugin *p) {
    size_t used = strlen(out->asked);
    snprintf(out->asked + used, sizeof out->asked - used, "%s%s", used ? ", " : "", p->entry->name);
    if (p->options == NULL) {
        if (out->unchecked[0] == '\0')
            snprintf(out->unchecked, sizeof out->unchecked, "plugin %s (ABI %u.%u) declares no options",
                     p->entry->name, (unsigned)p->entry->abi_major, (unsigned)p->entry->abi_minor);
        return;
    }
    for (uint32_t i = 0; i < p->options->n_options && out->n_specs < SY_CONFIG_MAX_SCHEMA; i++)
        out->specs[out->n_specs++] = sy_plugin_option(p->options, i);
}

static void schema_of(void *user, const sy_config_model *m, sy_config_option_schema *out) {
    const sy_plugin_registry *reg = user;
    const sy_plugin *p = sy_plugin_registry_need(reg, m->plugin);
    if (p == NULL) {
        snprintf(out->unchecked, sizeof out->unchecked, "plugin '%.64s' did not load (see `switchyard plugins`)",
                 m->plugin);
        return;
    }
    add_plugin(out, p);
    const sy_plugin *d = NULL;
    if (m->draft == SY_CONFIG_DRAFT_NGRAM) {
        d = sy_speculator_plugin_for(reg, "ngram");
    } else if (m->draft == SY_CONFIG_DRAFT_MODEL && m->draft_model != NULL) {
        char spec[160];
        snprintf(spec, sizeof spec, "model:%.140s", m->draft_model);
        d = sy_speculator_plugin_for(reg, spec);
    }
    if (d != NULL && d != p) add_plugin(out, d);
    /* "plugin a" or "plugins a, b", for the messages */
    char names[sizeof out->asked];
    memcpy(names, out->asked, sizeof names);
    snprintf(out->asked, sizeof out->asked, "%s %.140s", strchr(names, ',') ? "plugins" : "plugin", names);
}

bool sy_config_check_plugin_options(sy_config *cfg, const sy_plugin_registry *reg) {
    sy_config_check_options(cfg, schema_of, (void *)reg);
    return sy_config_ok(cfg);
}
