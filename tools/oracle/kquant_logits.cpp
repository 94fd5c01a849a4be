// Dev-time oracle for the K-quant agreement fixtures (tools/oracle/kquant_fixtures.py): llama.cpp's own quantizer
// and its teacher-forced logits, through the native build's static libraries.
//
//   kquant_logits quantize IN.gguf OUT.gguf FTYPE PURE     llama_model_quantize (no imatrix); PURE 1: every matrix
//                                                          gets FTYPE's type (llama-quantize --pure)
//   kquant_logits logits MODEL.gguf THREADS OUT.f32        token ids on stdin (whitespace-separated); all of them in
//                                                          one batch, every position's logits written to OUT.f32 as
//                                                          n_tokens x n_vocab little-endian floats
//
// The context is llama.cpp's default one (F16 K/V, flash attention on its automatic setting), as llama-server runs.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "llama.h"

static void quiet(ggml_log_level level, const char *text, void *) {
    if (level >= GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

static int quantize(const char *in, const char *out, int ftype, bool pure) {
    llama_model_quantize_params p = llama_model_quantize_default_params();
    p.ftype = (llama_ftype)ftype;
    p.nthread = 2;
    p.pure = pure;
    uint32_t rc = llama_model_quantize(in, out, &p);
    if (rc != 0) fprintf(stderr, "llama_model_quantize %s -> %s: %u\n", in, out, rc);
    return rc == 0 ? 0 : 1;
}

static int logits(const char *path, int threads, const char *out_path) {
    std::vector<llama_token> tokens;
    int id;
    while (scanf("%d", &id) == 1) tokens.push_back(id);
    if (tokens.empty()) {
        fprintf(stderr, "no tokens on stdin\n");
        return 1;
    }
    llama_model_params mp = llama_model_default_params();
    llama_model *model = llama_model_load_from_file(path, mp);
    if (model == NULL) {
        fprintf(stderr, "cannot load %s\n", path);
        return 1;
    }
    const int n = (int)tokens.size();
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t)n;
    cp.n_batch = (uint32_t)n;
    cp.n_ubatch = (uint32_t)n;
    cp.n_threads = threads;
    cp.n_threads_batch = threads;
    llama_context *ctx = llama_init_from_model(model, cp);
    if (ctx == NULL) {
        fprintf(stderr, "cannot create a context of %d tokens\n", n);
        return 1;
    }
    llama_batch batch = llama_batch_init(n, 0, 1);
    for (int i = 0; i < n; i++) {
        batch.token[i] = tokens[i];
        batch.pos[i] = i;
        batch.n_seq_id[i] = 1;
        batch.seq_id[i][0] = 0;
        batch.logits[i] = 1;
    }
    batch.n_tokens = n;
    if (llama_decode(ctx, batch) != 0) {
        fprintf(stderr, "llama_decode failed\n");
        return 1;
    }
    FILE *f = fopen(out_path, "wb");
    if (f == NULL) {
        perror(out_path);
        return 1;
    }
    for (int i = 0; i < n; i++) {
        const float *row = llama_get_logits_ith(ctx, i);
        if (row == NULL || fwrite(row, sizeof(float), (size_t)n_vocab, f) != (size_t)n_vocab) {
            fprintf(stderr, "no logits for position %d\n", i);
            return 1;
        }
    }
    fclose(f);
    llama_batch_free(batch);
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}

int main(int argc, char **argv) {
    llama_log_set(quiet, NULL);
    llama_backend_init();
    int rc = 2;
    if (argc == 6 && strcmp(argv[1], "quantize") == 0)
        rc = quantize(argv[2], argv[3], atoi(argv[4]), atoi(argv[5]) != 0);
    else if (argc == 5 && strcmp(argv[1], "logits") == 0)
        rc = logits(argv[2], atoi(argv[3]), argv[4]);
    else
        fprintf(stderr, "usage: %s quantize IN OUT FTYPE PURE | logits MODEL THREADS OUT.f32 < tokens\n", argv[0]);
    llama_backend_free();
    return rc;
}
