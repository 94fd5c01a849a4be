/* switchyard tokenize: text on stdin -> token ids on stdout, through the model's own tokenizer. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_common.h"
#include "cli/commands.h"
#include "plugins/engine_options.h"
#include "plugins/loaded_model.h"
#include "base/buf.h"
#include "base/util.h"

static void usage(FILE *out) {
    fprintf(out,
            "usage: switchyard tokenize --plugin P --model PATH [--ids] [--add-special] [--no-parse-special]\n\n"
            "Reads text from stdin and prints its tokens: one `id<TAB>piece` line per token, or with --ids the\n"
            "ids alone on one line, separated by spaces.\n\n"
            "  --plugin P            engine plugin (default: the first whose probe accepts the model)\n"
            "  --model PATH          model file or directory (--gguf FILE also works)\n"
            "  --plugin-dir DIR      where plugins are\n"
            "  --ids                 print only the ids\n"
            "  --add-special         add the model's beginning-of-sequence token as generation would\n"
            "  --no-parse-special    treat special-token text like \"<|im_start|>\" as plain text\n"
            "  -h, --help            this text\n");
}

enum { OPT_PLUGIN = 1000, OPT_MODEL, OPT_GGUF, OPT_PLUGIN_DIR, OPT_CONFIG, OPT_IDS, OPT_ADD, OPT_NO_PARSE };

int sy_cmd_tokenize(int argc, char **argv) {
    struct option options[32];
    static const struct option own[] = {
        {"plugin", required_argument, NULL, OPT_PLUGIN},   {"model", required_argument, NULL, OPT_MODEL},
        {"gguf", required_argument, NULL, OPT_GGUF},       {"plugin-dir", required_argument, NULL, OPT_PLUGIN_DIR},
        {"config", required_argument, NULL, OPT_CONFIG},   {"ids", no_argument, NULL, OPT_IDS},
        {"add-special", no_argument, NULL, OPT_ADD},       {"no-parse-special", no_argument, NULL, OPT_NO_PARSE},
        {"help", no_argument, NULL, 'h'},
    };
    size_t n_own = sizeof own / sizeof *own;
    memcpy(options, own, sizeof own);
    size_t n_all = n_own + sy_engine_options_getopt(options + n_own, sizeof options / sizeof *options - n_own - 1);
    memset(&options[n_all], 0, sizeof options[n_all]);

    const char *plugin = NULL, *model_path = NULL, *plugin_dir = NULL;
    int ids_only = 0, gguf_spelling = 0, status = 1;
    uint32_t flags = SY_TOKENIZE_PARSE_SPECIAL;
    sy_engine_options eo;
    sy_engine_options_init(&eo);
    int c;
    optind = 1;
    sy_engine_options_rewrite_aliases(argc, argv);
    while ((c = getopt_long(argc, argv, "o:h", options, NULL)) != -1) {
        switch (c) {
        case OPT_PLUGIN: plugin = optarg; break;
        case OPT_MODEL: model_path = optarg; break;
        case OPT_GGUF: model_path = optarg; gguf_spelling = 1; break;
        case OPT_PLUGIN_DIR: plugin_dir = optarg; break;
        case OPT_CONFIG: break;
        case OPT_IDS: ids_only = 1; break;
        case OPT_ADD: flags |= SY_TOKENIZE_ADD_SPECIAL; break;
        case OPT_NO_PARSE: flags &= ~(uint32_t)SY_TOKENIZE_PARSE_SPECIAL; break;
        case 'h': usage(stdout); status = 0; goto done;
        default: {
            int st = sy_cli_engine_option("tokenize", &eo, c, optarg, usage);
            if (st != 0) {
                status = st;
                goto done;
            }
        }
        }
    }
    if (model_path == NULL || optind < argc) {
        sy_cli_error("tokenize", model_path == NULL ? "--model PATH is required (see --help)"
                                                    : "unexpected argument; the text comes on stdin");
        status = 2;
        goto done;
    }
    if (gguf_spelling && plugin == NULL) plugin = "gguf-quant";

    sy_plugin_registry reg = {0};
    char dir[4096], err[1024];
    if (sy_cli_load_plugin_named(plugin_dir, plugin, &reg, dir, sizeof dir) != 0) goto done;
    sy_loaded_model lm;
    if (sy_cli_open_model("tokenize", &reg, plugin, model_path, NULL, &eo, &lm) != 0) {
        sy_plugin_registry_close(&reg);
        goto done;
    }
    size_t n = 0;
    sy_buf text;
    sy_buf_init(&text);
    const size_t max_text = (size_t)1 << 30; /* 1 GiB of text is past any sensible prompt */
    bool read_ok = sy_buf_read(&text, stdin, max_text);
    int32_t *ids = NULL;
    if (!read_ok)
        snprintf(err, sizeof err, "cannot read stdin: %s", strerror(errno));
    else if (text.len > max_text)
        snprintf(err, sizeof err, "the text on stdin is over %zu bytes", max_text);
    else
        ids = sy_loaded_model_tokenize(&lm, text.data, text.len, flags, &n, err, sizeof err);
    if (ids == NULL) {
        sy_cli_error("tokenize", "%s", err);
    } else {
        char *piece = NULL;
        size_t piece_cap = 0;
        for (size_t i = 0; i < n; i++) {
            if (ids_only) {
                printf(i ? " %d" : "%d", ids[i]);
                continue;
            }
            long pn = sy_loaded_model_token_bytes(&lm, ids[i], &piece, &piece_cap);
            printf("%d\t", ids[i]);
            /* Show the piece as a quoted C-style string so whitespace and partial UTF-8 stay visible. */
            putchar('\'');
            for (long k = 0; k < pn; k++) {
                unsigned char ch = (unsigned char)piece[k];
                if (ch == '\n') fputs("\\n", stdout);
                else if (ch == '\t') fputs("\\t", stdout);
                else if (ch == '\\' || ch == '\'') printf("\\%c", ch);
                else if (ch < 0x20 || ch == 0x7f) printf("\\x%02x", ch);
                else putchar(ch);
            }
            fputs("'\n", stdout);
        }
        if (ids_only) putchar('\n');
        free(piece);
        free(ids);
        status = 0;
    }
    sy_buf_free(&text);
    sy_loaded_model_close(&lm);
    sy_plugin_registry_close(&reg);
done:
    sy_engine_options_free(&eo);
    return status;
}
