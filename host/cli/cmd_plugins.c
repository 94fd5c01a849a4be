/* switchyard plugins: what is loadable from the plugin directory, and why the rest is not. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli_common.h"
#include "cli/commands.h"

static void usage(FILE *out) {
    fprintf(out,
            "usage: switchyard plugins [--plugin-dir DIR]\n\n"
            "Lists the plugins in DIR (default: the plugins beside the executable) with their version, ABI and\n"
            "interfaces, then every file that was refused and why. Exits 0 unless DIR cannot be read.\n\n"
            "  --plugin-dir DIR   where to look for *.so plugins\n"
            "  --config FILE      accepted for symmetry with the other verbs; its [host] plugin_dir is not read here\n"
            "  -h, --help         this text\n");
}

int sy_cmd_plugins(int argc, char **argv) {
    static const struct option options[] = {
        {"plugin-dir", required_argument, NULL, 'd'},
        {"config", required_argument, NULL, 'c'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *plugin_dir = NULL;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", options, NULL)) != -1) {
        switch (c) {
        case 'd': plugin_dir = optarg; break;
        case 'c': break;
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
        if (p->drafter) { printf("%s%s", sep, SY_DRAFTER_INTERFACE_ID); sep = ", "; }
        printf("\n         %s\n", p->entry->description ? p->entry->description : "");
        printf("         %s\n", p->path);
    }
    for (size_t i = 0; i < reg.n_refused; i++) {
        printf("refused  %s\n         %s\n", reg.refused[i].path, reg.refused[i].reason);
    }
    sy_plugin_registry_close(&reg);
    return 0;
}
