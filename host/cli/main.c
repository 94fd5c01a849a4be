/* switchyard: one process that runs local LLMs through engine plugins. This file only dispatches verbs. */
#include <stdio.h>
#include <string.h>

#include <switchyard/abi.h>

#include "cli/commands.h"

#ifndef SY_VERSION
#define SY_VERSION "0.0.0"
#endif

typedef struct verb {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} verb;

static const verb verbs[] = {
    {"plugins", sy_cmd_plugins, "list plugins, their ABI versions and interfaces, and refused files with reasons"},
    {"generate", sy_cmd_generate, "one-shot generation from a prompt, streamed to stdout"},
    {"tokenize", sy_cmd_tokenize, "text on stdin -> token ids on stdout"},
    {"bench", sy_cmd_bench, "load time, first-token latency, prefill and decode tokens/s, memory"},
    {"quantize", sy_cmd_quantize, "write a GGUF file of a quantization type (Q4_K_M, Q8_0, ...) from GGUF or SafeTensors"},
    {"chat-template", sy_cmd_chat_template, "a chat request (JSON on stdin) rendered through a Jinja chat template file"},
    {"serve", sy_cmd_serve, "HTTP server with the OpenAI and Ollama APIs over the configured models"},
};

static void usage(FILE *out) {
    fprintf(out, "usage: switchyard <verb> [options]\n\nverbs:\n");
    for (size_t i = 0; i < sizeof verbs / sizeof *verbs; i++)
        fprintf(out, "  %-13s %s\n", verbs[i].name, verbs[i].summary);
    fprintf(out, "\n`switchyard <verb> --help` describes a verb's options. `switchyard --version` prints the version.\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "version") == 0) {
        printf("switchyard %s (plugin ABI %d.%d)\n", SY_VERSION, SY_ABI_VERSION_MAJOR, SY_ABI_VERSION_MINOR);
        return 0;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof verbs / sizeof *verbs; i++) {
        if (strcmp(argv[1], verbs[i].name) == 0) return verbs[i].run(argc - 1, argv + 1);
    }
    fprintf(stderr, "switchyard: unknown verb '%s' (`switchyard --help` lists them)\n", argv[1]);
    return 2;
}
