/*
 * Compression of KV snapshots: byte-shuffled zstd (what snapshots use) against plain zstd and no compression,
 * on the real KV cache of a trained model (stories260K, 256 positions, computed by data/make_kv_fixture.py and
 * checked against the model's documented greedy text) in F16, BF16 and F32, and on random bytes (the worst case:
 * a chunk zstd cannot shrink is stored as is). Writes go through the real snapshot writer, reads through the real
 * reader; the table goes to stdout (docs/snapshot-format.md quotes it).
 *
 * usage: snapshot_bench KV_F16_FILE [repeats]
 * Exit status 1 when shuffling does not beat plain zstd on real KV, or a codec does not read back exactly.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "persist/snapshot.h"

/* ---- a fake engine that serves a KV image from memory through the state extension ---------------------------- */

typedef struct image {
    const uint8_t *data;
    uint64_t bytes_per_token;
    uint32_t n_tokens;
} image;

static uint64_t image_chunk_bytes(const sy_model *model, uint32_t n) {
    return (uint64_t)n * ((const image *)(const void *)model)->bytes_per_token;
}

static sy_status image_save(sy_model *model, const sy_seq *seq, uint32_t begin, uint32_t end,
                            const sy_state_writer *writer) {
    (void)seq;
    const image *im = (const image *)(const void *)model;
    if (end > im->n_tokens || begin >= end) return SY_ERR_INVALID_ARGUMENT;
    /* In two pieces, as engines stream layer by layer. */
    size_t total = (size_t)(end - begin) * im->bytes_per_token, half = total / 2;
    const uint8_t *p = im->data + (size_t)begin * im->bytes_per_token;
    sy_status st = writer->write(writer->user, p, half);
    return st == SY_OK ? writer->write(writer->user, p + half, total - half) : st;
}

static sy_status image_info(const sy_model *model, sy_state_info *out) {
    (void)model;
    (void)out;
    return SY_OK;
}

static sy_status image_load(sy_model *model, sy_seq *seq, uint32_t begin, uint32_t end, const int32_t *tokens,
                            const sy_state_reader *reader) {
    (void)model, (void)seq, (void)begin, (void)end, (void)tokens, (void)reader;
    return SY_ERR_UNSUPPORTED;
}

static const sy_engine_state_api image_api = {sizeof(sy_engine_state_api), image_info, image_chunk_bytes,
                                              image_save, image_load, NULL};

/* ---- conversions --------------------------------------------------------------------------------------------- */

static float half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15), exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    float v;
    if (exp == 0) v = ldexpf((float)mant, -24);
    else if (exp == 31) v = mant ? NAN : INFINITY;
    else v = ldexpf((float)(mant | 0x400), (int)exp - 25);
    return sign ? -v : v;
}

static uint16_t float_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fff + ((u >> 16) & 1); /* round to nearest even */
    return (uint16_t)(u >> 16);
}

static double seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- one measurement ----------------------------------------------------------------------------------------- */

typedef struct result {
    double ratio;      /* raw bytes / stored bytes */
    double write_mbps; /* raw MB/s through the writer */
    double read_mbps;  /* raw MB/s through the reader (checksums, decompression, unshuffle) */
    uint64_t stored;
    int ok;
} result;

static result measure(const image *im, uint32_t element_size, sy_snapshot_codec codec, int level, int repeats) {
    result r = {0};
    sy_snapshot_key key = {"bench", "bench", "0", "bench-kv", element_size, im->bytes_per_token, 0};
    int32_t *tokens = calloc(im->n_tokens, sizeof *tokens);
    char path[] = "/tmp/sy-snapshot-bench-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0 || tokens == NULL) return r;
    unlink(path);
    sy_snapshot_write_options opts = {0, level, codec};
    sy_snapshot_write_stats stats = {0};
    char err[512];
    double t_write = 0, t_read = 0;
    uint8_t *file = NULL;
    for (int rep = 0; rep < repeats; rep++) {
        if (ftruncate(fd, 0) != 0 || lseek(fd, 0, SEEK_SET) != 0) break;
        double t0 = seconds();
        sy_snapshot_error e = sy_snapshot_write_fd(fd, &key, &image_api, (sy_model *)(void *)im,
                                                   (const sy_seq *)(const void *)im, tokens, im->n_tokens, &opts,
                                                   &stats, err, sizeof err);
        t_write += seconds() - t0;
        if (e != SY_SNAPSHOT_OK) {
            fprintf(stderr, "write: %s\n", err);
            goto out;
        }
    }
    file = malloc(stats.file_bytes);
    if (file == NULL || pread(fd, file, stats.file_bytes, 0) != (ssize_t)stats.file_bytes) goto out;
    for (int rep = 0; rep < repeats; rep++) {
        double t0 = seconds();
        sy_snapshot *snap = NULL;
        if (sy_snapshot_open_memory(file, stats.file_bytes, NULL, &snap, err, sizeof err) != SY_SNAPSHOT_OK) {
            fprintf(stderr, "open: %s\n", err);
            goto out;
        }
        size_t at = 0;
        int same = 1;
        for (;;) {
            uint32_t b, e;
            const uint8_t *raw;
            size_t len;
            bool done;
            if (sy_snapshot_next_chunk(snap, &b, &e, &raw, &len, &done, err, sizeof err) != SY_SNAPSHOT_OK) {
                fprintf(stderr, "read: %s\n", err);
                same = 0;
                break;
            }
            if (done) break;
            same = same && memcmp(raw, im->data + at, len) == 0;
            at += len;
        }
        sy_snapshot_close(snap);
        t_read += seconds() - t0;
        if (!same || at != (size_t)im->n_tokens * im->bytes_per_token) {
            fprintf(stderr, "the snapshot did not read back exactly\n");
            goto out;
        }
    }
    r.stored = stats.stored_bytes;
    r.ratio = (double)stats.raw_bytes / (double)stats.stored_bytes;
    r.write_mbps = (double)stats.raw_bytes * repeats / t_write / 1e6;
    r.read_mbps = (double)stats.raw_bytes * repeats / t_read / 1e6;
    r.ok = 1;
out:
    free(file);
    free(tokens);
    close(fd);
    return r;
}

static int report(const char *name, const image *im, uint32_t element_size, int repeats, double *shuffled_ratio,
                  double *plain_ratio) {
    struct {
        const char *label;
        sy_snapshot_codec codec;
        int level;
    } rows[] = {
        {"shuffled zstd -1 (default)", SY_SNAPSHOT_CODEC_AUTO, 1},
        {"shuffled zstd -3", SY_SNAPSHOT_CODEC_AUTO, 3},
        {"shuffled zstd -9", SY_SNAPSHOT_CODEC_AUTO, 9},
        {"plain zstd -1", SY_SNAPSHOT_CODEC_ZSTD_PLAIN, 1},
        {"plain zstd -3", SY_SNAPSHOT_CODEC_ZSTD_PLAIN, 3},
        {"none", SY_SNAPSHOT_CODEC_NONE, 1},
    };
    printf("\n%s: %u positions x %llu bytes = %llu bytes\n", name, (unsigned)im->n_tokens,
           (unsigned long long)im->bytes_per_token, (unsigned long long)im->n_tokens * im->bytes_per_token);
    printf("| codec | stored bytes | ratio | write MB/s | read MB/s |\n|---|---:|---:|---:|---:|\n");
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        result r = measure(im, element_size, rows[i].codec, rows[i].level, repeats);
        if (!r.ok) return -1;
        printf("| %s | %llu | %.3f | %.0f | %.0f |\n", rows[i].label, (unsigned long long)r.stored, r.ratio,
               r.write_mbps, r.read_mbps);
        if (i == 0 && shuffled_ratio) *shuffled_ratio = r.ratio;
        if (rows[i].codec == SY_SNAPSHOT_CODEC_ZSTD_PLAIN && rows[i].level == 1 && plain_ratio) *plain_ratio = r.ratio;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: snapshot_bench KV_F16_FILE [repeats]\n");
        return 2;
    }
    int repeats = argc > 2 ? atoi(argv[2]) : 20;
    if (repeats < 1) repeats = 1;
    FILE *f = fopen(argv[1], "rb");
    if (f == NULL) {
        perror(argv[1]);
        return 2;
    }
    static uint8_t f16[1 << 20];
    size_t n = fread(f16, 1, sizeof f16, f);
    fclose(f);
    const uint64_t per_token = 5 * 2 * 32 * 2; /* 5 layers, K and V, 4 heads x 8, F16 */
    if (n == 0 || n % per_token != 0) {
        fprintf(stderr, "%s: %zu bytes is not a whole number of %llu-byte positions\n", argv[1], n,
                (unsigned long long)per_token);
        return 2;
    }
    uint32_t positions = (uint32_t)(n / per_token);
    size_t values = n / 2;
    uint8_t *bf16 = malloc(n), *f32 = malloc(values * 4), *noise = malloc(n);
    for (size_t i = 0; i < values; i++) {
        uint16_t h = (uint16_t)(f16[2 * i] | (f16[2 * i + 1] << 8));
        float v = half_to_float(h);
        uint16_t b = float_to_bf16(v);
        bf16[2 * i] = (uint8_t)b;
        bf16[2 * i + 1] = (uint8_t)(b >> 8);
        memcpy(f32 + 4 * i, &v, 4); /* little-endian hosts only, as the bench runs here */
    }
    uint32_t x = 2463534242u;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        noise[i] = (uint8_t)x;
    }
    printf("KV snapshot compression (chunks of %u positions; ratio = state bytes / stored payload bytes)\n",
           SY_SNAPSHOT_DEFAULT_CHUNK_TOKENS);
    double s16 = 0, p16 = 0, sb = 0, pb = 0, sn = 0, pn = 0;
    image im16 = {f16, per_token, positions}, imb = {bf16, per_token, positions};
    image im32 = {f32, per_token * 2, positions}, imn = {noise, per_token, positions};
    int rc = 0;
    rc |= report("stories260K KV, F16 (real, from a trained model)", &im16, 2, repeats, &s16, &p16);
    rc |= report("stories260K KV, BF16", &imb, 2, repeats, &sb, &pb);
    rc |= report("stories260K KV, F32", &im32, 4, repeats, NULL, NULL);
    rc |= report("random bytes (incompressible)", &imn, 2, repeats, &sn, &pn);
    free(bf16);
    free(f32);
    free(noise);
    if (rc != 0) return 1;
    printf("\nshuffled vs plain zstd (-1): F16 %.3f vs %.3f, BF16 %.3f vs %.3f\n", s16, p16, sb, pb);
    /* What the format is built on: shuffling pays on real KV, and nothing grows on noise. */
    if (!(s16 > p16 && sb > pb && sn >= 0.999)) {
        fprintf(stderr, "unexpected: shuffled zstd should beat plain zstd on real KV and never expand noise\n");
        return 1;
    }
    return 0;
}
