/* The KV cache types (cache_type_k/v: f32, f16, q8_0) of a CPU engine, measured through the plugin ABI as
 * `switchyard serve` loads a model: per type, the KV bytes per token (the engine's state_info), a snapshot of the
 * text's KV on disk (the host's writer: shuffled zstd), perplexity on the text, greedy agreement with f32 over
 * fixed prompts (the free-running run until its first divergence, and the top-1 choice with f32's tokens fed in),
 * and with --depth, decode tok/s at that depth. Prints a markdown table (docs/benchmarks.md, "KV cache types").
 *
 *   build/tests/kv_types_bench --plugin-dir build/plugins --model M.gguf --text docs/benchmarks/kv-types-text.txt
 *       [--plugin gguf-quant] [--threads 2] [--gen 256] [--depth 4096] [--decode 32] [--types f32,f16,q8_0]
 *
 * Prompts: the first sentence-sized pieces of the text (--prompts N of them, 4 by default). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "persist/snapshot.h"
#include "persist/snapshot_store.h"
#include "plugins/loaded_model.h"
#include "plugins/plugin_loader.h"

#define MAX_TYPES 3
#define MAX_PROMPTS 8
#define LOGIT_CHUNK 64 /* positions whose logits one decode call returns (perplexity, teacher forcing) */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char *what, const char *why) {
    fprintf(stderr, "kv_types_bench: %s: %s\n", what, why);
    exit(1);
}

static void decode(const sy_loaded_model *lm, sy_seq *seq, const int32_t *tokens, uint32_t n, uint32_t n_logits,
                   float *logits) {
    sy_decode_item item = {0};
    item.struct_size = sizeof item;
    item.seq = seq;
    item.tokens = tokens;
    item.n_tokens = n;
    item.n_logits = n_logits;
    item.logits = logits;
    sy_decode_batch batch = {0};
    batch.struct_size = sizeof batch;
    batch.n_items = 1;
    batch.item_size = sizeof item;
    batch.items = &item;
    if (lm->engine->decode(lm->model, &batch) != SY_OK) die("decode", lm->engine->error_message());
}

static int32_t argmax(const float *v, uint32_t n) {
    uint32_t best = 0;
    for (uint32_t i = 1; i < n; i++)
        if (v[i] > v[best]) best = i;
    return (int32_t)best;
}

static sy_seq *new_seq(const sy_loaded_model *lm) {
    sy_seq *seq = NULL;
    if (lm->engine->seq_create(lm->model, &seq) != SY_OK) die("seq_create", lm->engine->error_message());
    return seq;
}

/* Greedy: the prompt, then n tokens into out. */
static void greedy(const sy_loaded_model *lm, const int32_t *prompt, uint32_t n_prompt, uint32_t n, int32_t *out) {
    float *logits = malloc(lm->info.n_vocab * sizeof *logits);
    sy_seq *seq = new_seq(lm);
    decode(lm, seq, prompt, n_prompt, 1, logits);
    for (uint32_t i = 0; i < n; i++) {
        out[i] = argmax(logits, lm->info.n_vocab);
        decode(lm, seq, &out[i], 1, 1, logits);
    }
    lm->engine->seq_free(lm->model, seq);
    free(logits);
}

/* With the prompt and ref (n tokens) fed in: how many of ref this model also picks first (top-1). */
static uint32_t teacher_forced_agreement(const sy_loaded_model *lm, const int32_t *prompt, uint32_t n_prompt,
                                         const int32_t *ref, uint32_t n) {
    const uint32_t V = lm->info.n_vocab;
    float *logits = malloc((size_t)LOGIT_CHUNK * V * sizeof *logits);
    sy_seq *seq = new_seq(lm);
    decode(lm, seq, prompt, n_prompt, 1, logits);
    uint32_t agree = argmax(logits, V) == ref[0];
    for (uint32_t i = 0; i + 1 < n;) { /* feed ref[i..i+c), the logits of each predict ref[i+1..] */
        uint32_t c = n - 1 - i < LOGIT_CHUNK ? n - 1 - i : LOGIT_CHUNK;
        decode(lm, seq, ref + i, c, c, logits);
        for (uint32_t j = 0; j < c; j++) agree += argmax(logits + (size_t)j * V, V) == ref[i + j + 1];
        i += c;
    }
    lm->engine->seq_free(lm->model, seq);
    free(logits);
    return agree;
}

/* exp(mean negative log-likelihood) of tokens[1..n) given the ones before. */
static double perplexity(const sy_loaded_model *lm, const int32_t *tokens, uint32_t n) {
    const uint32_t V = lm->info.n_vocab;
    float *logits = malloc((size_t)LOGIT_CHUNK * V * sizeof *logits);
    sy_seq *seq = new_seq(lm);
    double nll = 0.0;
    for (uint32_t i = 0; i + 1 < n;) {
        uint32_t c = n - 1 - i < LOGIT_CHUNK ? n - 1 - i : LOGIT_CHUNK;
        decode(lm, seq, tokens + i, c, c, logits);
        for (uint32_t j = 0; j < c; j++) {
            const float *row = logits + (size_t)j * V;
            double mx = row[0], sum = 0.0;
            for (uint32_t v = 1; v < V; v++)
                if (row[v] > mx) mx = row[v];
            for (uint32_t v = 0; v < V; v++) sum += exp((double)row[v] - mx);
            nll += mx + log(sum) - (double)row[tokens[i + j + 1]];
        }
        i += c;
    }
    lm->engine->seq_free(lm->model, seq);
    free(logits);
    return exp(nll / (double)(n - 1));
}

static char *read_text(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) die(path, "cannot open");
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *t = malloc((size_t)n + 1);
    if (n <= 0 || fread(t, 1, (size_t)n, f) != (size_t)n) die(path, "cannot read");
    fclose(f);
    t[n] = '\0';
    *len = (size_t)n;
    return t;
}

typedef struct result {
    const char *type;
    uint64_t kv_bytes_per_token, state_bytes, snapshot_bytes;
    double ppl;
    uint32_t prefix_sum, agree_sum; /* over the prompts */
    double decode_tps;
} result;

int main(int argc, char **argv) {
    const char *plugin_dir = "build/plugins", *plugin = NULL, *model = NULL, *text_path = NULL;
    const char *threads = "2", *types_arg = "f32,f16,q8_0";
    uint32_t n_gen = 256, depth = 0, n_decode = 32, n_prompts = 4;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (v == NULL) die(a, "wants a value");
        if (strcmp(a, "--plugin-dir") == 0) plugin_dir = v;
        else if (strcmp(a, "--plugin") == 0) plugin = v;
        else if (strcmp(a, "--model") == 0) model = v;
        else if (strcmp(a, "--text") == 0) text_path = v;
        else if (strcmp(a, "--threads") == 0) threads = v;
        else if (strcmp(a, "--types") == 0) types_arg = v;
        else if (strcmp(a, "--gen") == 0) n_gen = (uint32_t)strtoul(v, NULL, 10);
        else if (strcmp(a, "--depth") == 0) depth = (uint32_t)strtoul(v, NULL, 10);
        else if (strcmp(a, "--decode") == 0) n_decode = (uint32_t)strtoul(v, NULL, 10);
        else if (strcmp(a, "--prompts") == 0) n_prompts = (uint32_t)strtoul(v, NULL, 10);
        else die(a, "unknown flag");
        i++;
    }
    if (model == NULL || text_path == NULL) die("usage", "--model PATH --text FILE are needed");
    if (n_gen == 0 || n_gen > 4096 || n_prompts == 0 || n_prompts > MAX_PROMPTS || n_decode == 0) die("usage", "bad counts");
    char types_buf[64];
    snprintf(types_buf, sizeof types_buf, "%s", types_arg);
    const char *types[MAX_TYPES];
    size_t n_types = 0;
    for (char *t = strtok(types_buf, ","); t && n_types < MAX_TYPES; t = strtok(NULL, ",")) types[n_types++] = t;
    if (n_types == 0 || strcmp(types[0], "f32") != 0) die("--types", "must start with f32 (the reference)");

    static sy_plugin_registry reg; /* zeroed, as the registry wants */
    char err[512];
    if (sy_plugin_registry_load_dir(&reg, plugin_dir, err, sizeof err) != 0) die("plugins", err);
    size_t text_len;
    char *text = read_text(text_path, &text_len);

    char ctx[16];
    snprintf(ctx, sizeof ctx, "%u", depth + n_decode + 16 > 4096 ? depth + n_decode + 16 : 4096);
    result res[MAX_TYPES] = {{0}};
    int32_t *ref_gen[MAX_PROMPTS] = {0};
    int32_t *prompt_tokens[MAX_PROMPTS] = {0};
    uint32_t prompt_len[MAX_PROMPTS] = {0};
    uint32_t n_text = 0;
    for (size_t t = 0; t < n_types; t++) {
        sy_option opts[] = {{"threads", threads}, {"ctx_size", ctx}, {"cache_type_k", types[t]},
                            {"cache_type_v", types[t]}};
        sy_loaded_model lm;
        if (sy_loaded_model_open(&reg, plugin, model, opts, 4, &lm, err, sizeof err) != 0) die("load", err);
        result *r = &res[t];
        r->type = types[t];
        sy_state_info si = {.struct_size = sizeof si};
        if (lm.plugin->engine_state == NULL || lm.plugin->engine_state->state_info(lm.model, &si) != SY_OK)
            die("state_info", "the plugin reports no state");
        r->kv_bytes_per_token = si.kv_bytes_per_token;

        size_t n_tok = 0;
        int32_t *tokens = sy_loaded_model_tokenize(&lm, text, text_len, SY_TOKENIZE_ADD_SPECIAL, &n_tok, err, sizeof err);
        if (tokens == NULL) die("tokenize", err);
        /* within the context the model was trained for (stories260K: 512) */
        uint32_t cap = lm.info.n_ctx_train && lm.info.n_ctx_train < 4000 ? lm.info.n_ctx_train : 4000;
        if (n_tok > cap) n_tok = cap;
        n_text = (uint32_t)n_tok;
        r->ppl = perplexity(&lm, tokens, n_text);

        /* the text's KV as a snapshot file */
        char snap_path[] = "/tmp/kv-types-bench-XXXXXX";
        int fd = mkstemp(snap_path);
        if (fd < 0) die("mkstemp", "failed");
        close(fd);
        sy_seq *seq = new_seq(&lm);
        decode(&lm, seq, tokens, n_text, 0, NULL);
        sy_snapshot_key key;
        if (sy_snapshot_model_key(&lm, &key, err, sizeof err) != 0) die("key", err);
        sy_snapshot_write_stats stats = {0};
        if (sy_snapshot_write_file(snap_path, &key, lm.plugin->engine_state, lm.model, seq, tokens, n_text, NULL,
                                   &stats, err, sizeof err) != SY_SNAPSHOT_OK)
            die("snapshot", err);
        struct stat sb;
        if (stat(snap_path, &sb) != 0) die(snap_path, "stat failed");
        r->snapshot_bytes = (uint64_t)sb.st_size;
        r->state_bytes = (uint64_t)n_text * si.kv_bytes_per_token;
        unlink(snap_path);
        lm.engine->seq_free(lm.model, seq);

        /* prompts: pieces of 24 tokens of the text, spread over it */
        for (uint32_t p = 0; p < n_prompts; p++) {
            if (t == 0) {
                prompt_len[p] = n_text > 24 ? 24 : n_text;
                size_t at = n_text > 24 ? (size_t)(n_text - 24) * p / n_prompts : 0;
                prompt_tokens[p] = malloc(prompt_len[p] * sizeof(int32_t));
                memcpy(prompt_tokens[p], tokens + at, prompt_len[p] * sizeof(int32_t));
                if (at > 0 && lm.info.bos_token >= 0) prompt_tokens[p][0] = lm.info.bos_token;
                ref_gen[p] = malloc(n_gen * sizeof(int32_t));
                greedy(&lm, prompt_tokens[p], prompt_len[p], n_gen, ref_gen[p]);
                r->prefix_sum += n_gen;
                r->agree_sum += n_gen;
                continue;
            }
            int32_t *gen = malloc(n_gen * sizeof(int32_t));
            greedy(&lm, prompt_tokens[p], prompt_len[p], n_gen, gen);
            uint32_t same = 0;
            while (same < n_gen && gen[same] == ref_gen[p][same]) same++;
            r->prefix_sum += same;
            r->agree_sum += teacher_forced_agreement(&lm, prompt_tokens[p], prompt_len[p], ref_gen[p], n_gen);
            free(gen);
        }

        if (depth > 0) { /* the text's tokens over and over up to the depth, then n_decode single tokens timed */
            int32_t *deep = malloc(depth * sizeof(int32_t));
            for (uint32_t i = 0; i < depth; i++) deep[i] = tokens[i % n_text];
            float *logits = malloc(lm.info.n_vocab * sizeof *logits);
            seq = new_seq(&lm);
            for (uint32_t i = 0; i < depth; i += 512) decode(&lm, seq, deep + i, depth - i < 512 ? depth - i : 512, 0, NULL);
            int32_t next = tokens[0];
            decode(&lm, seq, &next, 1, 1, logits); /* warm */
            double t0 = now_s();
            for (uint32_t i = 0; i < n_decode; i++) {
                next = argmax(logits, lm.info.n_vocab);
                decode(&lm, seq, &next, 1, 1, logits);
            }
            r->decode_tps = n_decode / (now_s() - t0);
            lm.engine->seq_free(lm.model, seq);
            free(logits);
            free(deep);
        }
        free(tokens);
        sy_loaded_model_close(&lm);
        fprintf(stderr, "kv_types_bench: %s done\n", types[t]);
    }

    printf("model: %s, text: %s (%u tokens), %u prompts x %u greedy tokens, %s threads\n\n", model, text_path, n_text,
           n_prompts, n_gen, threads);
    printf("| cache type | KV bytes/token | snapshot of %u tokens | snapshot / raw | perplexity | vs f32 | greedy "
           "tokens equal to f32 before the first divergence | top-1 agreement with f32's tokens fed in |%s\n",
           n_text, depth ? " decode tok/s at depth |" : "");
    printf("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |%s\n", depth ? " ---: |" : "");
    for (size_t t = 0; t < n_types; t++) {
        const result *r = &res[t];
        char deep[48] = "";
        if (depth) snprintf(deep, sizeof deep, " %.2f (%.2fx f32) |", r->decode_tps, r->decode_tps / res[0].decode_tps);
        printf("| %s | %llu | %llu B (%.0f B/token) | 1/%.2f | %.4f | %+.3f%% | %u / %u (%.1f%%) | %u / %u (%.1f%%) |%s\n",
               r->type, (unsigned long long)r->kv_bytes_per_token, (unsigned long long)r->snapshot_bytes,
               (double)r->snapshot_bytes / n_text, (double)r->state_bytes / (double)r->snapshot_bytes, r->ppl,
               100.0 * (r->ppl / res[0].ppl - 1.0), r->prefix_sum, n_prompts * n_gen,
               100.0 * r->prefix_sum / (n_prompts * n_gen), r->agree_sum, n_prompts * n_gen,
               100.0 * r->agree_sum / (n_prompts * n_gen), deep);
    }
    fflush(stdout);
    for (uint32_t p = 0; p < n_prompts; p++) free(ref_gen[p]), free(prompt_tokens[p]);
    free(text);
    sy_plugin_registry_close(&reg);
    return 0;
}
