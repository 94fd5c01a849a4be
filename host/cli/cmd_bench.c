/* switchyard bench: load one model and measure what a user waits for and what the process holds:
 *   load      seconds until load() returns (plugin probe included)
 *   first     one token decoded right after load, alone in a fresh sequence (the first touch of the weights)
 *   prefill   -p tokens in one decode call, logits for the last one only
 *   decode    -n tokens one at a time after that prefill, each picked greedily from the previous logits
 *   memory    peak and current RSS, anonymous and file-backed RSS (/proc/self/status, smaps_rollup), and what the
 *             plugin reports (mapped weights, KV, its own resident bytes)
 * The prompt is deterministic pseudo-random token ids (the same formula as tools/bench/llama_cpp_bench.py), so
 * the measurement does not depend on a tokenizer or on text. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_common.h"
#include "cli/commands.h"
#include "plugins/engine_options.h"
#include "plugins/loaded_model.h"
#include "base/util.h"

static void usage(FILE *out) {
    fprintf(out,
            "usage: switchyard bench --plugin P --model PATH [-p N] [-n N] [--threads N] [--json] [options]\n\n"
            "Loads the model, decodes one token, prefills N prompt tokens, then decodes N tokens greedily, and\n"
            "prints load time, first-token latency, prefill and decode tokens/s and memory.\n\n"
            "  --plugin P            engine plugin (default: the first whose probe accepts the model)\n"
            "  --model PATH          model file or directory (--gguf FILE also works)\n"
            "  --plugin-dir DIR      where plugins are\n"
            "  -p, --prompt N        prompt tokens to prefill (default 512)\n"
            "  -n, --gen N           tokens to decode after the prompt (default 128)\n"
            "  --json                one JSON object on stdout instead of text\n"
            "engine options (passed to the plugin):\n");
    sy_engine_options_usage(out);
    fprintf(out, "  -h, --help            this text\n");
}

enum { OPT_PLUGIN = 1000, OPT_MODEL, OPT_GGUF, OPT_PLUGIN_DIR, OPT_CONFIG, OPT_JSON };

/* Token ids of the benchmark prompt: an LCG over the lower half of the vocabulary (ordinary tokens, not the
 * special ones at the end). */
static int32_t bench_token(uint32_t i, uint32_t n_vocab) {
    uint32_t range = n_vocab > 2 ? n_vocab / 2 : 1;
    return (int32_t)((i * 1103515245u + 12345u) % range);
}

typedef struct proc_memory {
    long peak_rss_kb, rss_kb, anon_kb, file_kb, smaps_anon_kb;
} proc_memory;

/* "Key:   123 kB" lines of a /proc file; -1 where absent. */
static long proc_kb(const char *path, const char *key) {
    FILE *f = fopen(path, "r");
    if (f == NULL) return -1;
    char line[256];
    long v = -1;
    size_t klen = strlen(key);
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, key, klen) == 0 && line[klen] == ':') {
            v = strtol(line + klen + 1, NULL, 10);
            break;
        }
    }
    fclose(f);
    return v;
}

static void read_memory(proc_memory *m) {
    m->rss_kb = proc_kb("/proc/self/status", "VmRSS");
    /* Read after VmRSS (RSS can grow between two reads of the file), and never below it. */
    m->peak_rss_kb = proc_kb("/proc/self/status", "VmHWM");
    if (m->peak_rss_kb < m->rss_kb) m->peak_rss_kb = m->rss_kb;
    m->anon_kb = proc_kb("/proc/self/status", "RssAnon");
    m->file_kb = proc_kb("/proc/self/status", "RssFile");
    m->smaps_anon_kb = proc_kb("/proc/self/smaps_rollup", "Anonymous");
}

static int32_t argmax(const float *logits, uint32_t n) {
    int32_t best = 0;
    for (uint32_t i = 1; i < n; i++)
        if (logits[i] > logits[best]) best = (int32_t)i;
    return best;
}

static sy_status decode_one(const sy_loaded_model *lm, sy_seq *s, const int32_t *tokens, uint32_t n, float *logits) {
    sy_decode_item item = {sizeof item, s, tokens, n, 1, logits, NULL};
    sy_decode_batch batch = {sizeof batch, 1, sizeof item, &item, NULL, NULL};
    return lm->engine->decode(lm->model, &batch);
}

typedef struct bench_result {
    double load_s, first_s, prefill_s, decode_s;
    uint32_t n_prompt, n_gen;
    proc_memory mem;
    sy_memory_usage usage;
    int has_usage;
} bench_result;

static int run_bench(const sy_loaded_model *lm, uint32_t n_prompt, uint32_t n_gen, bench_result *r) {
    uint32_t n_vocab = lm->info.n_vocab;
    if ((uint64_t)n_prompt + n_gen > lm->info.n_ctx || n_prompt == 0) {
        sy_cli_error("bench", "-p %u + -n %u do not fit the context of %u tokens (and -p must be at least 1)",
                     n_prompt, n_gen, lm->info.n_ctx);
        return 1;
    }
    float *logits = sy_xmalloc((size_t)n_vocab * sizeof *logits);
    int32_t *prompt = sy_xmalloc((size_t)n_prompt * sizeof *prompt);
    for (uint32_t i = 0; i < n_prompt; i++) prompt[i] = bench_token(i, n_vocab);
    int status = 1;
    sy_seq *first = NULL, *s = NULL;

    /* the first token right after load */
    double t = sy_now_seconds();
    if (lm->engine->seq_create(lm->model, &first) != SY_OK || decode_one(lm, first, prompt, 1, logits) != SY_OK) {
        sy_cli_error("bench", "first token: %s", lm->engine->error_message());
        goto out;
    }
    r->first_s = sy_now_seconds() - t;
    lm->engine->seq_free(lm->model, first);

    if (lm->engine->seq_create(lm->model, &s) != SY_OK) {
        sy_cli_error("bench", "seq_create: %s", lm->engine->error_message());
        goto out;
    }
    t = sy_now_seconds();
    if (decode_one(lm, s, prompt, n_prompt, logits) != SY_OK) {
        sy_cli_error("bench", "prefill: %s", lm->engine->error_message());
        goto out;
    }
    r->prefill_s = sy_now_seconds() - t;
    t = sy_now_seconds();
    for (uint32_t i = 0; i < n_gen; i++) {
        int32_t token = argmax(logits, n_vocab);
        if (decode_one(lm, s, &token, 1, logits) != SY_OK) {
            sy_cli_error("bench", "decode: %s", lm->engine->error_message());
            goto out;
        }
    }
    r->decode_s = sy_now_seconds() - t;
    r->n_prompt = n_prompt;
    r->n_gen = n_gen;
    read_memory(&r->mem);
    r->usage.struct_size = sizeof r->usage;
    r->has_usage = SY_HAS_FIELD(lm->engine, sy_engine_api, memory_usage) && lm->engine->memory_usage &&
                   lm->engine->memory_usage(lm->model, &r->usage) == SY_OK;
    status = 0;
out:
    if (s) lm->engine->seq_free(lm->model, s);
    free(prompt);
    free(logits);
    return status;
}

static double rate(uint32_t n, double s) { return s > 0 ? n / s : 0.0; }
static double mb(uint64_t bytes) { return (double)bytes / (1024.0 * 1024.0); }
static double kb_mb(long kb) { return kb < 0 ? -1.0 : kb / 1024.0; }

static void print_text(const sy_loaded_model *lm, const char *path, const bench_result *r) {
    printf("model      %s (%s, %s, %s)\n", path, lm->plugin->entry->name, lm->info.architecture,
           lm->info.weight_dtype);
    char runtime[256];
    if (sy_cli_plugin_runtime(lm->plugin, runtime, sizeof runtime) != NULL) printf("runtime    %s\n", runtime);
    printf("load       %.3f s\n", r->load_s);
    printf("first      %.3f s (one token right after load; load + first %.3f s)\n", r->first_s,
           r->load_s + r->first_s);
    printf("prefill    %u tokens in %.3f s: %.1f tok/s\n", r->n_prompt, r->prefill_s, rate(r->n_prompt, r->prefill_s));
    printf("decode     %u tokens in %.3f s: %.1f tok/s\n", r->n_gen, r->decode_s, rate(r->n_gen, r->decode_s));
    printf("memory     peak RSS %.1f MB, RSS %.1f MB (anonymous %.1f MB, file %.1f MB; smaps anonymous %.1f MB)\n",
           kb_mb(r->mem.peak_rss_kb), kb_mb(r->mem.rss_kb), kb_mb(r->mem.anon_kb), kb_mb(r->mem.file_kb),
           kb_mb(r->mem.smaps_anon_kb));
    if (r->has_usage)
        printf("plugin     mapped %.1f MB, KV %.1f MB, resident %.1f MB\n", mb(r->usage.mapped_bytes),
               mb(r->usage.kv_bytes), mb(r->usage.resident_bytes));
}

static void print_json(const sy_loaded_model *lm, const char *path, const bench_result *r, uint32_t threads) {
    printf("{\"model\": \"");
    for (const char *p = path; *p; p++) {
        if (*p == '"' || *p == '\\') putchar('\\');
        if ((unsigned char)*p >= 0x20) putchar(*p);
    }
    printf("\", \"plugin\": \"%s\", \"architecture\": \"%s\", \"weight_dtype\": \"%s\", \"threads\": %u,"
           " \"load_s\": %.6f, \"first_token_s\": %.6f, \"load_plus_first_token_s\": %.6f,"
           " \"prompt_tokens\": %u, \"prefill_s\": %.4f, \"prefill_tok_s\": %.2f,"
           " \"gen_tokens\": %u, \"decode_s\": %.4f, \"decode_tok_s\": %.2f,"
           " \"peak_rss_mb\": %.1f, \"rss_mb\": %.1f, \"anon_rss_mb\": %.1f, \"file_rss_mb\": %.1f,"
           " \"smaps_anon_mb\": %.1f",
           lm->plugin->entry->name, lm->info.architecture, lm->info.weight_dtype, threads, r->load_s, r->first_s,
           r->load_s + r->first_s, r->n_prompt, r->prefill_s, rate(r->n_prompt, r->prefill_s), r->n_gen,
           r->decode_s, rate(r->n_gen, r->decode_s), kb_mb(r->mem.peak_rss_kb), kb_mb(r->mem.rss_kb),
           kb_mb(r->mem.anon_kb), kb_mb(r->mem.file_kb), kb_mb(r->mem.smaps_anon_kb));
    char runtime[256];
    if (sy_cli_plugin_runtime(lm->plugin, runtime, sizeof runtime) != NULL) {
        printf(", \"runtime\": \"");
        for (const char *p = runtime; *p; p++) {
            if (*p == '"' || *p == '\\') putchar('\\');
            putchar(*p);
        }
        putchar('"');
    }
    if (r->has_usage)
        printf(", \"mapped_mb\": %.3f, \"kv_mb\": %.3f, \"plugin_resident_mb\": %.3f", mb(r->usage.mapped_bytes),
               mb(r->usage.kv_bytes), mb(r->usage.resident_bytes));
    printf("}\n");
}

int sy_cmd_bench(int argc, char **argv) {
    struct option options[48];
    static const struct option own[] = {
        {"plugin", required_argument, NULL, OPT_PLUGIN},   {"model", required_argument, NULL, OPT_MODEL},
        {"gguf", required_argument, NULL, OPT_GGUF},       {"plugin-dir", required_argument, NULL, OPT_PLUGIN_DIR},
        {"config", required_argument, NULL, OPT_CONFIG},   {"prompt", required_argument, NULL, 'p'},
        {"gen", required_argument, NULL, 'n'},             {"json", no_argument, NULL, OPT_JSON},
        {"help", no_argument, NULL, 'h'},
    };
    size_t n_own = sizeof own / sizeof *own;
    memcpy(options, own, sizeof own);
    size_t n_all = n_own + sy_engine_options_getopt(options + n_own, sizeof options / sizeof *options - n_own - 1);
    memset(&options[n_all], 0, sizeof options[n_all]);

    const char *plugin = NULL, *model_path = NULL, *plugin_dir = NULL;
    int json = 0, gguf_spelling = 0, status = 1;
    int64_t n_prompt = 512, n_gen = 128;
    sy_engine_options eo;
    sy_engine_options_init(&eo);
    int c;
    optind = 1;
    sy_engine_options_rewrite_aliases(argc, argv);
    while ((c = getopt_long(argc, argv, "p:n:o:h", options, NULL)) != -1) {
        switch (c) {
        case OPT_PLUGIN: plugin = optarg; break;
        case OPT_MODEL: model_path = optarg; break;
        case OPT_GGUF: model_path = optarg; gguf_spelling = 1; break;
        case OPT_PLUGIN_DIR: plugin_dir = optarg; break;
        case OPT_CONFIG: break;
        case OPT_JSON: json = 1; break;
        case 'p':
        case 'n':
            if (sy_parse_i64(optarg, c == 'p' ? 1 : 0, 1 << 20, c == 'p' ? &n_prompt : &n_gen) != 0) {
                sy_cli_error("bench", "-%c: '%s' is not a token count from %d to 1048576", c, optarg, c == 'p');
                goto done;
            }
            break;
        case 'h': usage(stdout); status = 0; goto done;
        default: {
            int st = sy_cli_engine_option("bench", &eo, c, optarg, usage);
            if (st != 0) {
                status = st;
                goto done;
            }
        }
        }
    }
    if (model_path == NULL || optind < argc) {
        sy_cli_error("bench", model_path == NULL ? "--model PATH is required (see --help)" : "unexpected argument");
        status = 2;
        goto done;
    }
    if (gguf_spelling && plugin == NULL) plugin = "gguf-quant";
    uint32_t threads = 0;
    for (size_t i = 0; i < eo.n_items; i++)
        if (strcmp(eo.items[i].key, "threads") == 0) threads = (uint32_t)strtoul(eo.items[i].value, NULL, 10);

    sy_plugin_registry reg = {0};
    char dir[4096];
    if (sy_cli_load_plugin_named(plugin_dir, plugin, &reg, dir, sizeof dir) != 0) goto done;
    sy_loaded_model lm;
    bench_result r;
    memset(&r, 0, sizeof r);
    double t = sy_now_seconds();
    if (sy_cli_open_model("bench", &reg, plugin, model_path, NULL, &eo, &lm) != 0) {
        sy_plugin_registry_close(&reg);
        goto done;
    }
    r.load_s = sy_now_seconds() - t;
    status = run_bench(&lm, (uint32_t)n_prompt, (uint32_t)n_gen, &r);
    if (status == 0) {
        if (json) print_json(&lm, model_path, &r, threads);
        else print_text(&lm, model_path, &r);
    }
    sy_loaded_model_close(&lm);
    sy_plugin_registry_close(&reg);
done:
    sy_engine_options_free(&eo);
    return status;
}
