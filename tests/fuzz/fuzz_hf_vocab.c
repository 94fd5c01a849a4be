/* Fuzz target: qwen-cpu-mmap's Hugging Face tokenizer (hf_vocab.c): tokenizer.json, tokenizer_config.json,
 * config.json and generation_config.json of a checkpoint folder, together (special tokens, EOS ids, BOS rules,
 * chat template, the model's vocabulary size). The input is the four files separated by "\n--8<--\n"; they are
 * written to a private folder and loaded as the plugin loads them, then the tokenizer runs on a little text. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hf_config.h"
#include "hf_vocab.h"

static const char sep[] = "\n--8<--\n";
static char dir[256];
static volatile uint64_t sink;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(dir, sizeof dir, "%s/sy-fuzz-hf-vocab-%ld", base, (long)getpid());
    char cmd[300];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
    if (system(cmd) != 0) abort();
    return 0;
}

static void write_file(const char *name, const char *data, size_t len) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (data == NULL) {
        unlink(path);
        return;
    }
    FILE *f = fopen(path, "wb");
    if (f == NULL) abort();
    if (len > 0 && fwrite(data, 1, len, f) != len) abort();
    fclose(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (dir[0] == '\0') LLVMFuzzerInitialize(NULL, NULL);
    static const char *const names[] = {"tokenizer.json", "tokenizer_config.json", "config.json",
                                        "generation_config.json"};
    const char *p = (const char *)data, *end = p + size;
    const char *part[4] = {NULL, NULL, NULL, NULL};
    size_t part_len[4] = {0, 0, 0, 0};
    for (int i = 0; i < 4 && p <= end; i++) {
        const char *cut = memmem(p, (size_t)(end - p), sep, sizeof sep - 1);
        part[i] = p;
        part_len[i] = cut ? (size_t)(cut - p) : (size_t)(end - p);
        p = cut ? cut + sizeof sep - 1 : end + 1;
    }
    for (int i = 0; i < 4; i++) write_file(names[i], part[i], part_len[i]);
    char err[512];
    sy_hf_config cfg;
    sy_hf_generation_config gen;
    memset(&cfg, 0, sizeof cfg);
    memset(&gen, 0, sizeof gen);
    if (!sy_hf_config_load(dir, &cfg, &gen, err, sizeof err)) return 0;
    qm_vocab_facts facts;
    memset(&facts, 0, sizeof facts);
    sy_status st;
    qm_vocab *v = qm_vocab_load(dir, &cfg, &gen, &facts, &st, err, sizeof err);
    if (v == NULL) {
        if (err[0] == '\0') abort();
    } else {
        static const char text[] = "Hello <|im_start|>w\xc3\xb6rld \xff 123\n\n  x";
        int32_t ids[256];
        for (uint32_t flags = 0; flags < 4; flags++) {
            size_t n = 0;
            if (qm_vocab_ops.tokenize(v, text, sizeof text - 1, flags, ids, 256, &n, err, sizeof err) != SY_OK)
                continue;
            for (size_t i = 0; i < n && i < 256; i++) {
                char out[128];
                size_t got = 0;
                sink += qm_vocab_ops.token_bytes(v, ids[i], out, sizeof out, &got) + qm_vocab_ops.token_flags(v, ids[i]);
            }
        }
        sink += qm_vocab_ops.memory(v) + (uint64_t)facts.bos + (uint64_t)facts.eos;
        qm_vocab_ops.free(v);
    }
    free(facts.chat_template);
    qm_vocab_drop_cached();
    return 0;
}
