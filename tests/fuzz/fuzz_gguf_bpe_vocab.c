/* Fuzz target: the GGUF-to-tokenizer path of gguf-quant (gguf_vocab.c): a GGUF file's tokenizer metadata
 * (tokenizer.ggml.model gpt2 / llama, tokens, merges, token types, pre-tokenizer name, special ids) built into a
 * byte-level BPE or a SentencePiece tokenizer, which then tokenizes and decodes a little text. Ids out of range,
 * merges naming unknown tokens, huge counts and hostile token texts must fail with a message or work. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "gguf_vocab.h"

static volatile uint64_t sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[512];
    sy_gguf *g = sy_gguf_open_memory(data, size, err, sizeof err);
    if (g == NULL) return 0;
    uint32_t n_vocab = 0;
    uint64_t bytes = 0;
    sy_status st;
    bool estimated = gq_vocab_estimate(g, &n_vocab, &bytes, &st, err, sizeof err);
    gq_vocab *v = gq_vocab_from_gguf(g, &st, err, sizeof err);
    if (v == NULL) {
        if (err[0] == '\0') abort();
    } else {
        if (estimated && n_vocab != gq_vocab_size(v)) abort();
        static const char text[] = "Hello <|im_start|>w\xc3\xb6rld \xff\xfe 123 \xe2\x96\x81 <s>x</s>\n\n  ";
        int32_t ids[512];
        for (uint32_t flags = 0; flags < 4; flags++) {
            size_t n = 0;
            if (gq_vocab_tokenize(v, text, sizeof text - 1, flags, ids, 512, &n, err, sizeof err) != SY_OK) continue;
            for (size_t i = 0; i < n && i < 512; i++) {
                if (ids[i] < 0 || (uint32_t)ids[i] >= gq_vocab_size(v)) abort();
                char out[256];
                size_t got = 0;
                if (gq_vocab_token_bytes(v, ids[i], out, sizeof out, &got) == SY_OK) sink += got;
                sink += gq_vocab_token_flags(v, ids[i]);
            }
        }
        /* Every id's bytes and flags, and ids just out of range. */
        uint32_t size_v = gq_vocab_size(v);
        for (uint32_t id = 0; id < size_v && id < 4096; id++) {
            char out[64];
            size_t got = 0;
            sink += gq_vocab_token_bytes(v, (int32_t)id, out, sizeof out, &got) + gq_vocab_token_flags(v, (int32_t)id);
        }
        char out[8];
        size_t got = 0;
        if (gq_vocab_token_bytes(v, (int32_t)size_v, out, sizeof out, &got) == SY_OK) abort();
        if (gq_vocab_token_bytes(v, -1, out, sizeof out, &got) == SY_OK) abort();
        sink += gq_vocab_memory(v) + (uint64_t)gq_vocab_bos(v) + gq_vocab_add_bos(v);
        gq_vocab_free(v);
    }
    gq_vocab_drop_cached();
    sy_gguf_close(g);
    return 0;
}
