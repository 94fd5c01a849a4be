/* lfm2-cuda benchmark on synthetic BF16 weights of a config's shapes (default: LFM2-1.2B), through the plugin ABI:
 *
 *   decode at batch 1: ms per token, against the memory-bandwidth floor = weight bytes / measured device-to-device
 *   copy bandwidth (every weight is read once per decode step);
 *   aggregate decode tok/s at batch 1, 8 and 64 (each sequence one token per step, greedy on the device);
 *   prefill tok/s for prompts of 512 and 4096 tokens.
 *
 *   lfm2-cuda-bench [--config CONFIG.json] [--plugin-dir DIR]
 *
 * Prints a short table last. Exit status 77 (with the reason) when there is no usable GPU. */
#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include <switchyard/engine.h>

static const sy_engine_api *api;
static const sy_engine_sampling_api *sampling;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char *what) {
    fprintf(stderr, "lfm2-cuda-bench: %s: %s\n", what, api ? api->error_message() : "");
    exit(1);
}

/* Device-to-device copy bandwidth in bytes/s, counting the bytes read and the bytes written. */
static double copy_bandwidth(void) {
    const size_t bytes = 1ull << 30;
    void *a = NULL, *b = NULL;
    if (cudaMalloc(&a, bytes) != cudaSuccess || cudaMalloc(&b, bytes) != cudaSuccess) die("cudaMalloc");
    cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice); /* warm up */
    cudaDeviceSynchronize();
    const int reps = 10;
    double t0 = now_s();
    for (int i = 0; i < reps; i++) cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice);
    if (cudaDeviceSynchronize() != cudaSuccess) die("cudaMemcpy");
    double t = now_s() - t0;
    cudaFree(a);
    cudaFree(b);
    return 2.0 * (double)bytes * reps / t;
}

static uint32_t rng = 99;
static int32_t random_token(uint32_t vocab) {
    rng = rng * 1664525u + 1013904223u;
    return (int32_t)((rng >> 8) % vocab);
}

/* Greedy steps of `batch` sequences, each prefilled with 32 tokens; returns seconds per step. */
static double decode_steps(sy_model *m, uint32_t vocab, int batch, int steps) {
    sy_seq **seqs = calloc((size_t)batch, sizeof *seqs);
    sy_decode_item *items = calloc((size_t)batch, sizeof *items);
    sy_sampling_params *params = calloc((size_t)batch, sizeof *params);
    int32_t *next = calloc((size_t)batch, sizeof *next), prompt[32];
    uint64_t *rngs = calloc((size_t)batch, sizeof *rngs);
    for (int i = 0; i < batch; i++) {
        if (api->seq_create(m, &seqs[i]) != SY_OK) die("seq_create");
        for (int t = 0; t < 32; t++) prompt[t] = random_token(vocab);
        sy_decode_item it = {sizeof it, seqs[i], prompt, 32, 1, NULL, NULL};
        sy_decode_batch one = {sizeof one, 1, sizeof it, &it, NULL, NULL};
        sy_sampling_params p = {sizeof p, 0.0f, 0, 1.0f, 0.0f, &rngs[i]};
        if (sampling->decode_sample(m, &one, &p, &next[i]) != SY_OK) die("prefill");
        params[i] = p;
    }
    sy_decode_batch b = {sizeof b, (uint32_t)batch, sizeof(sy_decode_item), items, NULL, NULL};
    double t0 = 0;
    for (int s = -4; s < steps; s++) { /* 4 warm-up steps */
        if (s == 0) t0 = now_s();
        for (int i = 0; i < batch; i++)
            items[i] = (sy_decode_item){sizeof(sy_decode_item), seqs[i], &next[i], 1, 1, NULL, NULL};
        int32_t *out = calloc((size_t)batch, sizeof *out);
        if (sampling->decode_sample(m, &b, params, out) != SY_OK) die("decode_sample");
        memcpy(next, out, (size_t)batch * sizeof *out);
        free(out);
    }
    double per_step = (now_s() - t0) / steps;
    for (int i = 0; i < batch; i++) api->seq_free(m, seqs[i]);
    free(seqs), free(items), free(params), free(next), free(rngs);
    return per_step;
}

/* Seconds to prefill n tokens into a fresh sequence (after one warm-up run of the same size). */
static double prefill(sy_model *m, uint32_t vocab, uint32_t n) {
    int32_t *toks = malloc(n * sizeof *toks);
    for (uint32_t i = 0; i < n; i++) toks[i] = random_token(vocab);
    double best = 1e30;
    for (int rep = 0; rep < 3; rep++) {
        sy_seq *s;
        if (api->seq_create(m, &s) != SY_OK) die("seq_create");
        int32_t tok;
        uint64_t r = 1;
        sy_decode_item it = {sizeof it, s, toks, n, 1, NULL, NULL};
        sy_decode_batch b = {sizeof b, 1, sizeof it, &it, NULL, NULL};
        sy_sampling_params p = {sizeof p, 0.0f, 0, 1.0f, 0.0f, &r};
        double t0 = now_s();
        if (sampling->decode_sample(m, &b, &p, &tok) != SY_OK) die("prefill");
        double t = now_s() - t0;
        if (rep > 0 && t < best) best = t;
        api->seq_free(m, s);
    }
    free(toks);
    return best;
}

int main(int argc, char **argv) {
    const char *src = getenv("SY_SOURCE_DIR"), *build = getenv("SY_BUILD_DIR");
    char config[1024], so[1024];
    snprintf(config, sizeof config, "%s/tests/fixtures/lfm2/lfm2-1.2b-config.json", src ? src : ".");
    snprintf(so, sizeof so, "%s/plugins/lfm2-cuda.so", build ? build : ".");
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--config") == 0 && i + 1 < argc) snprintf(config, sizeof config, "%s", argv[++i]);
        else if (strcmp(argv[i], "--plugin-dir") == 0 && i + 1 < argc)
            snprintf(so, sizeof so, "%s/lfm2-cuda.so", argv[++i]);
        else {
            fprintf(stderr, "usage: lfm2-cuda-bench [--config CONFIG.json] [--plugin-dir DIR]\n");
            return 2;
        }
    }
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        printf("skipped: no CUDA device\n");
        return 77;
    }
    struct cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, 0);
    double bw = copy_bandwidth();

    void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        fprintf(stderr, "dlopen %s: %s\n", so, dlerror());
        return 1;
    }
    const sy_plugin_entry *entry = dlsym(h, SY_PLUGIN_ENTRY_SYMBOL);
    static const sy_host_api host = {sizeof(sy_host_api), SY_ABI_VERSION_MAJOR, SY_ABI_VERSION_MINOR, "bench",
                                     NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    if (entry == NULL || entry->init(&host) != SY_OK) die("plugin init");
    api = entry->get_interface(SY_ENGINE_INTERFACE_ID);
    sampling = entry->get_interface(SY_ENGINE_SAMPLING_INTERFACE_ID);
    sy_option opts[4] = {{"ctx_size", "8192"}, {"max_sequences", "64"}, {"max_batch_tokens", "4096"},
                         {"seed", "1"}};
    sy_model *m = NULL;
    double t0 = now_s();
    if (api->load(config, opts, 4, &m) != SY_OK) die("load");
    double load_s = now_s() - t0;
    sy_model_info info = {.struct_size = sizeof info};
    api->model_info(m, &info);
    double weight_bytes = 2.0 * (double)info.n_params;
    double floor_ms = weight_bytes / bw * 1e3;

    double b1 = decode_steps(m, info.n_vocab, 1, 64);
    double b8 = decode_steps(m, info.n_vocab, 8, 32);
    double b64 = decode_steps(m, info.n_vocab, 64, 16);
    double p512 = prefill(m, info.n_vocab, 512);
    double p4096 = prefill(m, info.n_vocab, 4096);
    api->unload(m);
    entry->deinit();

    printf("\nlfm2-cuda on %s, synthetic BF16 weights of %s\n", prop.name, config);
    printf("  %-38s %10.2f GB\n", "weights", weight_bytes / 1e9);
    printf("  %-38s %10.1f GB/s\n", "device copy bandwidth (read + write)", bw / 1e9);
    printf("  %-38s %10.2f s\n", "load (synthetic)", load_s);
    printf("  %-38s %10.3f ms   (floor %.3f ms, %.0f%% of it)\n", "decode, batch 1, per token", b1 * 1e3, floor_ms,
           100.0 * floor_ms / (b1 * 1e3));
    printf("  %-38s %10.0f tok/s\n", "decode, batch 1", 1.0 / b1);
    printf("  %-38s %10.0f tok/s\n", "decode, batch 8", 8.0 / b8);
    printf("  %-38s %10.0f tok/s\n", "decode, batch 64", 64.0 / b64);
    printf("  %-38s %10.0f tok/s\n", "prefill, 512 tokens", 512.0 / p512);
    printf("  %-38s %10.0f tok/s\n", "prefill, 4096 tokens", 4096.0 / p4096);
    return 0;
}
