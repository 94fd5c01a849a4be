/* The machine's DRAM read rate, the ceiling of decode: a STREAM-like streaming read of 1 GiB (by default) with
 * 512-bit loads summed into four accumulators (so the sum cannot be optimised away), split into equal contiguous
 * parts over 1 and then 2 threads, best of 5 passes each after a pass that faults the pages in. Prints GB/s
 * (10^9 bytes), which docs/benchmarks.md divides decode's weight bytes per second by. Also prints which CPU tiers
 * the kernels offer here and why any is unavailable. Not part of the build:
 *   gcc -O2 -std=c11 -D_GNU_SOURCE -mavx512f -Ikernels/cpu tools/bench/stream_read.c \
 *       build/kernels/cpu/libsy_kernels_cpu.a -lm -lmvec -lpthread -o /tmp/stream_read
 *   /tmp/stream_read [MiB, default 1024] [max threads, default 2] */
#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sy_kernels.h"

typedef struct part {
    const uint8_t *p;
    size_t bytes;
    double sum;
} part;

static void *read_part(void *arg) {
    part *pt = arg;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t off = 0; off + 256 <= pt->bytes; off += 256) {
        const float *f = (const float *)(const void *)(pt->p + off);
        a0 = _mm512_add_ps(a0, _mm512_load_ps(f));
        a1 = _mm512_add_ps(a1, _mm512_load_ps(f + 16));
        a2 = _mm512_add_ps(a2, _mm512_load_ps(f + 32));
        a3 = _mm512_add_ps(a3, _mm512_load_ps(f + 48));
    }
    pt->sum = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
    return NULL;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    size_t mib = argc > 1 ? strtoull(argv[1], NULL, 10) : 1024;
    int max_threads = argc > 2 ? atoi(argv[2]) : 2;
    if (mib == 0 || mib > 65536 || max_threads < 1 || max_threads > 64) {
        fprintf(stderr, "usage: stream_read [MiB 1..65536] [threads 1..64]\n");
        return 2;
    }
    for (int t = 0; t < SY_CPU_TIER_COUNT_; t++) {
        const char *why = sy_cpu_tier_unavailable_reason((sy_cpu_tier)t);
        printf("tier %-7s %s%s\n", sy_cpu_tier_name((sy_cpu_tier)t), why ? "unavailable: " : "available",
               why ? why : "");
    }
    size_t bytes = mib << 20;
    uint8_t *buf = aligned_alloc(4096, bytes);
    if (buf == NULL) {
        fprintf(stderr, "stream_read: cannot allocate %zu MiB\n", mib);
        return 1;
    }
    for (size_t i = 0; i < bytes; i += 4096) memset(buf + i, 1, 4096); /* fault every page in (no zero page) */
    for (int threads = 1; threads <= max_threads; threads++) {
        double best = 0.0, check = 0.0;
        for (int pass = 0; pass < 6; pass++) {
            part parts[64];
            pthread_t ids[64];
            size_t each = bytes / (size_t)threads / 256 * 256;
            double t0 = now();
            for (int t = 0; t < threads; t++) {
                parts[t] = (part){buf + (size_t)t * each, each, 0.0};
                pthread_create(&ids[t], NULL, read_part, &parts[t]);
            }
            for (int t = 0; t < threads; t++) pthread_join(ids[t], NULL);
            double dt = now() - t0, rate = (double)(each * (size_t)threads) / dt / 1e9;
            for (int t = 0; t < threads; t++) check += parts[t].sum;
            if (pass > 0 && rate > best) best = rate;
        }
        printf("threads %d: %.1f GB/s (best of 5 reads of %zu MiB; checksum %g)\n", threads, best, mib, check);
    }
    free(buf);
    return 0;
}
