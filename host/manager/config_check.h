/* The config's engine keys checked against the options the plugins declare ("sy.plugin.options/1"): the bridge
 * between the config layer, which knows no plugins, and the plugin registry. */
#ifndef SY_HOST_CONFIG_CHECK_H
#define SY_HOST_CONFIG_CHECK_H

#include <stdbool.h>

#include "config/config.h"
#include "plugins/plugin_loader.h"

/* sy_config_check_options with the schemas of reg: a model's keys are checked against its plugin's options and,
 * when it drafts, its drafter plugin's (the model's load options reach both). Only models with engine keys ask,
 * so a lazy registry loads just the plugins they name (and spec-drafter for a drafting one). A plugin that
 * declares no options (ABI 1.1 and older) lets its models' keys through with a warning; so does one that does
 * not load (the model's load then fails and says why). Errors and warnings go to cfg; returns sy_config_ok(cfg). */
bool sy_config_check_plugin_options(sy_config *cfg, const sy_plugin_registry *reg);

#endif
