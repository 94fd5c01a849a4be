/*
 * The engine alone, without the server: aggregate decode speed of one batched decode() call over B sequences
 * (B = 1, 2, 4, 8), to tell the scheduler's overhead from the engine's batching in tools/bench/serve_throughput.py.
 * Each sequence is prefilled with 8 tokens, then 32 steps decode one token of every sequence in one call (logits
 * of every item, as the scheduler asks for them). Not part of the build: compile it by hand against a build tree:
 *
 *   gcc -O2 -std=c11 -D_GNU_SOURCE -Ihost -Iabi tools/bench/engine_batch_decode.c build/host/libsy_host.a \
 *       -o /tmp/engine_batch_decode -lpthread -ldl -lm $(pkg-config --libs libcjson libpcre2-8 libutf8proc \
 *       libxxhash libzstd inih libmicrohttpd)
 *   /tmp/engine_batch_decode build/plugins MODEL.gguf [threads]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plugins/loaded_model.h"
#include "plugins/plugin_loader.h"
#include "base/util.h"

#define MAX_BATCH 8
#define PROMPT_TOKENS 8
#define STEPS 32

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s PLUGIN_DIR MODEL.gguf [threads]\n", argv[0]);
        return 2;
    }
    sy_plugin_registry reg;
    memset(&reg, 0, sizeof reg);
    char err[512];
    if (sy_plugin_registry_load_dir(&reg, argv[1], err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    sy_option opts[2] = {{"threads", argc > 3 ? argv[3] : "2"}, {"ctx_size", "1024"}};
    sy_loaded_model lm;
    if (sy_loaded_model_open(&reg, "gguf-quant", argv[2], opts, 2, &lm, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        sy_plugin_registry_close(&reg);
        return 1;
    }
    const uint32_t n_vocab = lm.info.n_vocab;
    const int levels[] = {1, 2, 4, 8};
    int rc = 0;
    for (size_t li = 0; li < sizeof levels / sizeof levels[0] && rc == 0; li++) {
        const int batch_size = levels[li];
        sy_seq *seqs[MAX_BATCH] = {0};
        float *logits[MAX_BATCH] = {0};
        sy_decode_item items[MAX_BATCH];
        int32_t next[MAX_BATCH];
        for (int b = 0; b < batch_size && rc == 0; b++) {
            int32_t prompt[PROMPT_TOKENS];
            for (int i = 0; i < PROMPT_TOKENS; i++) prompt[i] = (1000 + 37 * b + 11 * i) % (int32_t)n_vocab;
            logits[b] = sy_xmalloc((size_t)n_vocab * sizeof *logits[b]);
            if (lm.engine->seq_create(lm.model, &seqs[b]) != SY_OK) {
                fprintf(stderr, "seq_create: %s\n", lm.engine->error_message());
                rc = 1;
                break;
            }
            sy_decode_item item = {sizeof item, seqs[b], prompt, PROMPT_TOKENS, 1, logits[b], NULL};
            sy_decode_batch one = {sizeof one, 1, sizeof item, &item, NULL, NULL};
            if (lm.engine->decode(lm.model, &one) != SY_OK) {
                fprintf(stderr, "prefill: %s\n", lm.engine->error_message());
                rc = 1;
            }
            next[b] = (500 + b) % (int32_t)n_vocab;
        }
        double t0 = sy_now_seconds();
        for (int step = 0; step < STEPS && rc == 0; step++) {
            for (int b = 0; b < batch_size; b++)
                items[b] = (sy_decode_item){sizeof items[b], seqs[b], &next[b], 1, 1, logits[b], NULL};
            sy_decode_batch batch = {sizeof batch, (uint32_t)batch_size, sizeof items[0], items, NULL, NULL};
            if (lm.engine->decode(lm.model, &batch) != SY_OK) {
                fprintf(stderr, "decode: %s\n", lm.engine->error_message());
                rc = 1;
            }
            /* The next tokens need not be sampled: any valid ids cost the same. */
            for (int b = 0; b < batch_size; b++) next[b] = (int32_t)(((uint32_t)next[b] * 2654435761u) % n_vocab);
        }
        double seconds = sy_now_seconds() - t0;
        if (rc == 0)
            printf("batch %d: %.1f ms per step, %.1f tok/s aggregate\n", batch_size, seconds / STEPS * 1000,
                   batch_size * STEPS / seconds);
        for (int b = 0; b < batch_size; b++) {
            if (seqs[b] != NULL) lm.engine->seq_free(lm.model, seqs[b]);
            free(logits[b]);
        }
    }
    sy_loaded_model_close(&lm);
    sy_plugin_registry_close(&reg);
    return rc;
}
