/* switchyard plugins: what is loadable from the plugin directory, and why the rest is not. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "base/option_schema.h"
#include "cli/cli_common.h"
#include "cli/commands.h"

static void usage(FILE *out) {
    fprintf(out,
            "usage: switchyard plugins [--plugin-dir DIR] [--options NAME]\n\n"
            "Lists the plugins in DIR (default: the plugins beside the executable) with their version, ABI and\n"
            "interfaces, then every file that was refused and why. Exits 0 unless DIR cannot be read.\n"
            "With --options NAME: the load options plugin NAME declares (the keys a [model.X] section and -o take),\n"
            "as a table of key, type, default, range and help; exits 1 when no plugin NAME loads.\n\n"
            "  --plugin-dir DIR   where to look for *.so plugins\n"
            "  --options NAME     the option schema of plugin NAME\n"
            "  --config FILE      accepted for symmetry with the other verbs; its [host] plugin_dir is not read here\n"
            "  -h, --help         this text\n");
}

/* The schema of one plugin as a table; the widths follow the longest key and default. */
static int print_options(const sy_plugin_registry *reg, const char *name) {
    const sy_plugin *p = sy_plugin_registry_find(reg, name);
    if (p == NULL) {
        for (size_t i = 0; i < reg->n_refused; i++) {
            const char *base = strrchr(reg->refused[i].path, '/');
            base = base ? base + 1 : reg->refused[i].path;
            if (strncmp(base, name, strlen(name)) == 0 && strcmp(base + strlen(name), ".so") == 0) {
                sy_cli_error("plugins", "plugin %s was refused: %s", name, reg->refused[i].reason);
                return 1;
            }
        }
        sy_cli_error("plugins", "no plugin named '%s' loads from the plugin directory (see `switchyard plugins`)",
                     name);
        return 1;
    }
    const sy_plugin_options_api *o = p->options;
    if (o == NULL) {
        printf("plugin %s (ABI %u.%u) does not declare its options (%s): the keys of its models are passed to it\n"
               "unchecked, with a warning\n",
               p->entry->name, (unsigned)p->entry->abi_major, (unsigned)p->entry->abi_minor,
               SY_PLUGIN_OPTIONS_INTERFACE_ID);
        return 0;
    }
    int w_key = 3, w_default = 7, w_range = 5;
    char range[96];
    for (uint32_t i = 0; i < o->n_options; i++) {
        const sy_option_spec *s = sy_plugin_option(o, i);
        int k = (int)strlen(s->key), d = (int)strlen(s->default_value[0] ? s->default_value : "-"),
            r = (int)strlen(sy_option_range_text(s, range, sizeof range));
        if (k > w_key) w_key = k;
        if (d > w_default) w_default = d > 24 ? 24 : d;
        if (r > w_range) w_range = r;
    }
    printf("plugin %s: %u options (%s)\n\n", p->entry->name, (unsigned)o->n_options, SY_PLUGIN_OPTIONS_INTERFACE_ID);
    printf("%-*s  %-6s  %-*s  %-*s  %s\n", w_key, "key", "type", w_default, "default", w_range, "range", "help");
    for (uint32_t i = 0; i < o->n_options; i++) {
        const sy_option_spec *s = sy_plugin_option(o, i);
        printf("%-*s  %-6s  %-*s  %-*s  %s\n", w_key, s->key, sy_option_type_name(s->type), w_default,
               s->default_value[0] ? s->default_value : "-", w_range, sy_option_range_text(s, range, sizeof range),
               s->help);
    }
    return 0;
}

int sy_cmd_plugins(int argc, char **argv) {
    static const struct option options[] = {
        {"plugin-dir", required_argument, NULL, 'd'},
        {"config", required_argument, NULL, 'c'},
        {"options", required_argument, NULL, 'o'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *plugin_dir = NULL, *options_of = NULL;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", options, NULL)) != -1) {
        switch (c) {
        case 'd': plugin_dir = optarg; break;
        case 'c': break;
        case 'o': options_of = optarg; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        sy_cli_error("plugins", "unexpected argument '%s'", argv[optind]);
        return 2;
    }
    sy_plugin_registry reg = {0};
    char dir[4096];
    if (options_of != NULL) {
        /* Only the plugin asked about loads (NAME.so first), as serve would load it. */
        if (sy_cli_load_plugin_named(plugin_dir, options_of, &reg, dir, sizeof dir) != 0) return 1;
        int st = print_options(&reg, options_of);
        sy_plugin_registry_close(&reg);
        return st;
    }
    if (sy_cli_load_plugins(plugin_dir, &reg, dir, sizeof dir) != 0) return 1;

    printf("plugin directory: %s\n", dir);
    printf("%zu loaded, %zu refused\n\n", reg.n_plugins, reg.n_refused);
    for (size_t i = 0; i < reg.n_plugins; i++) {
        const sy_plugin *p = &reg.plugins[i];
        printf("loaded   %-16s %-8s ABI %u.%u  ", p->entry->name, p->entry->version ? p->entry->version : "?",
               (unsigned)p->entry->abi_major, (unsigned)p->entry->abi_minor);
        const char *sep = "";
        if (p->engine) { printf("%s%s", sep, SY_ENGINE_INTERFACE_ID); sep = ", "; }
        if (p->engine_state) { printf("%s%s", sep, SY_ENGINE_STATE_INTERFACE_ID); sep = ", "; }
        if (p->engine_sampling) { printf("%s%s", sep, SY_ENGINE_SAMPLING_INTERFACE_ID); sep = ", "; }
        if (p->engine_embed) { printf("%s%s", sep, SY_ENGINE_EMBED_INTERFACE_ID); sep = ", "; }
        if (p->drafter) { printf("%s%s", sep, SY_DRAFTER_INTERFACE_ID); sep = ", "; }
        if (p->runtime) { printf("%s%s", sep, SY_PLUGIN_RUNTIME_INTERFACE_ID); sep = ", "; }
        if (p->options) printf("%s%s (%u options)", sep, SY_PLUGIN_OPTIONS_INTERFACE_ID, (unsigned)p->options->n_options);
        printf("\n         %s\n", p->entry->description ? p->entry->description : "");
        char runtime[256];
        if (sy_cli_plugin_runtime(p, runtime, sizeof runtime) != NULL) printf("         %s\n", runtime);
        printf("         %s\n", p->path);
    }
    for (size_t i = 0; i < reg.n_refused; i++) {
        printf("refused  %s\n         %s\n", reg.refused[i].path, reg.refused[i].reason);
    }
    sy_plugin_registry_close(&reg);
    return 0;
}
