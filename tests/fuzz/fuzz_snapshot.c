/*
 * Fuzz target: the KV snapshot reader (host/snapshot.c) on arbitrary bytes. Opens the input as a snapshot, checks
 * its key against a fixed one, reads every chunk and then restores it (whole, and a prefix agreeing with a token
 * list derived from the input) into a fake engine that checks what it is handed. Any accepted chunk must cover
 * the positions the header promises with exactly the bytes the key implies.
 *
 * Checksums would stop almost every mutation at the door, so each input also runs "resealed": its checksums
 * recomputed wherever its own sizes say they are, which lets mutated fields, zstd frames and counts reach the
 * checks behind the checksums.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>
#include <zstd.h>

#include "persist/snapshot.h"

#define CHECK(cond)                                                                                                  \
    do {                                                                                                             \
        if (!(cond)) {                                                                                               \
            fprintf(stderr, "fuzz_snapshot: check failed: %s (line %d)\n", #cond, __LINE__);                       \
            abort();                                                                                                 \
        }                                                                                                            \
    } while (0)

/* ---- a fake engine: one sequence, which only counts what it is given -------------------------------------- */

typedef struct fake_model {
    uint64_t bytes_per_token, recurrent;
    uint32_t length;
    int live;
} fake_model;

static fake_model fake;
static char fake_seq_storage;

static const char *fake_error(void) { return "fake engine error"; }
static sy_status fake_seq_create(sy_model *model, sy_seq **out) {
    (void)model;
    CHECK(!fake.live);
    fake.live = 1;
    fake.length = 0;
    *out = (sy_seq *)(void *)&fake_seq_storage;
    return SY_OK;
}
static void fake_seq_free(sy_model *model, sy_seq *seq) {
    (void)model;
    CHECK(seq == (sy_seq *)(void *)&fake_seq_storage && fake.live);
    fake.live = 0;
}
static uint32_t fake_seq_length(const sy_model *model, const sy_seq *seq) {
    (void)model, (void)seq;
    return fake.length;
}
static uint64_t fake_chunk_bytes(const sy_model *model, uint32_t n) {
    (void)model;
    return (uint64_t)n * fake.bytes_per_token + fake.recurrent;
}
static sy_status fake_load(sy_model *model, sy_seq *seq, uint32_t begin, uint32_t end, const int32_t *tokens,
                           const sy_state_reader *reader) {
    (void)model, (void)seq;
    CHECK(begin == fake.length && end > begin && tokens != NULL);
    uint64_t left = fake_chunk_bytes(NULL, end - begin);
    uint8_t buf[4096];
    while (left > 0) {
        size_t n = left < sizeof buf ? (size_t)left : sizeof buf;
        if (reader->read(reader->user, buf, n) != SY_OK) return SY_ERR_FORMAT;
        left -= n;
    }
    for (uint32_t i = 0; i < end - begin; i++) CHECK(tokens[i] >= 0);
    fake.length = end;
    return SY_OK;
}

static sy_engine_api fake_engine;
static const sy_engine_state_api fake_state = {sizeof(sy_engine_state_api), NULL, fake_chunk_bytes, NULL,
                                               fake_load, NULL};

static uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static uint64_t rd64(const uint8_t *p) { return (uint64_t)rd32(p) | ((uint64_t)rd32(p + 4) << 32); }
static void wr64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* Recompute every checksum the bytes' own sizes point at (best effort; stops where the layout stops making sense). */
static void reseal(uint8_t *d, size_t size) {
    if (size < 20) return;
    uint64_t h = rd32(d + 12);
    if (16 + h + 8 > size || h < 4) return;
    wr64(d + 16 + h, XXH64(d, 16 + h, 0));
    uint32_t element_size = rd32(d + 16);
    size_t pos = 16 + h + 8;
    XXH64_state_t *chain = XXH64_createState();
    XXH64_reset(chain, 0);
    while (pos + 4 <= size) {
        uint32_t tag = rd32(d + pos);
        if (tag == 0x4b4e4843u && pos + 56 <= size) {
            uint32_t codec = rd32(d + pos + 4);
            uint64_t raw_len = rd64(d + pos + 16), stored = rd64(d + pos + 24);
            const uint8_t *payload = d + pos + 56;
            if (stored > size - pos - 56) stored = size - pos - 56;
            wr64(d + pos + 40, XXH64(payload, stored, 0));
            if ((codec & 0xff) == 0) {
                wr64(d + pos + 32, XXH64(payload, stored, 0));
            } else if (raw_len <= (1u << 16)) {
                uint8_t *planes = malloc(raw_len ? raw_len : 1), *raw = malloc(raw_len ? raw_len : 1);
                size_t n = ZSTD_decompress(planes, raw_len, payload, stored);
                if (!ZSTD_isError(n) && n == raw_len) {
                    if ((codec & 0x100) && element_size >= 1 && element_size <= SY_SNAPSHOT_MAX_ELEMENT_SIZE)
                        sy_snapshot_unshuffle(planes, raw, raw_len, element_size);
                    else memcpy(raw, planes, raw_len);
                    wr64(d + pos + 32, XXH64(raw, raw_len, 0));
                }
                free(planes);
                free(raw);
            }
            wr64(d + pos + 48, XXH64(d + pos, 48, 0));
            XXH64_update(chain, d + pos, 56);
            pos += 56 + stored;
        } else if (tag == 0x444e4554u && pos + 32 <= size) {
            wr64(d + pos + 16, XXH64_digest(chain));
            wr64(d + pos + 24, XXH64(d + pos, 24, 0));
            break;
        } else {
            break;
        }
    }
    XXH64_freeState(chain);
}

static void run_one(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    run_one(data, size);
    uint8_t *copy = malloc(size ? size : 1);
    if (copy == NULL) return 0;
    if (size) memcpy(copy, data, size);
    reseal(copy, size);
    run_one(copy, size);
    free(copy);
    return 0;
}

static void run_one(const uint8_t *data, size_t size) {
    fake_engine.struct_size = sizeof fake_engine;
    fake_engine.error_message = fake_error;
    fake_engine.seq_create = fake_seq_create;
    fake_engine.seq_free = fake_seq_free;
    fake_engine.seq_length = fake_seq_length;
    const sy_snapshot_limits limits = {1u << 20, 1u << 16};
    char err[512];
    sy_snapshot *snap = NULL;
    if (sy_snapshot_open_memory(data, size, &limits, &snap, err, sizeof err) != SY_SNAPSHOT_OK) {
        CHECK(snap == NULL && err[0] != '\0');
        return;
    }
    const sy_snapshot_key *key = sy_snapshot_get_key(snap);
    uint32_t n_tokens = 0;
    const int32_t *tokens = sy_snapshot_tokens(snap, &n_tokens);
    CHECK(n_tokens >= 1 && n_tokens <= limits.max_tokens);
    CHECK(key->fingerprint && key->plugin_name && key->plugin_version && key->layout);
    sy_snapshot_key other = {"fp", "plugin", "1", "layout", 2, 16, 0};
    sy_snapshot_error e = sy_snapshot_key_check(key, &other, err, sizeof err);
    CHECK(e == SY_SNAPSHOT_OK || e == SY_SNAPSHOT_ERR_KEY);
    CHECK(sy_snapshot_key_check(key, key, err, sizeof err) == SY_SNAPSHOT_OK);

    /* Every chunk, in order. */
    uint32_t next = 0;
    for (;;) {
        uint32_t begin, end;
        const uint8_t *raw;
        size_t len;
        bool done;
        e = sy_snapshot_next_chunk(snap, &begin, &end, &raw, &len, &done, err, sizeof err);
        if (e != SY_SNAPSHOT_OK) {
            CHECK(err[0] != '\0');
            /* A reader that failed stays failed. */
            CHECK(sy_snapshot_next_chunk(snap, &begin, &end, &raw, &len, &done, err, sizeof err) != SY_SNAPSHOT_OK);
            break;
        }
        if (done) {
            CHECK(next == n_tokens);
            break;
        }
        CHECK(begin == next && end > begin && end <= n_tokens);
        CHECK(len == (size_t)(end - begin) * key->kv_bytes_per_token + key->recurrent_bytes);
        CHECK(len <= limits.max_chunk_bytes);
        volatile uint8_t sink = 0;
        for (size_t i = 0; i < len; i += 997) sink ^= raw[i]; /* the bytes are really there */
        (void)sink;
        next = end;
    }
    sy_snapshot_close(snap);

    /* Restores through the fake engine: everything, then the prefix agreeing with a damaged copy of the ledger. */
    fake.bytes_per_token = 0;
    for (int pass = 0; pass < 2; pass++) {
        if (sy_snapshot_open_memory(data, size, &limits, &snap, err, sizeof err) != SY_SNAPSHOT_OK) abort();
        key = sy_snapshot_get_key(snap);
        tokens = sy_snapshot_tokens(snap, &n_tokens);
        fake.bytes_per_token = key->kv_bytes_per_token;
        fake.recurrent = key->recurrent_bytes;
        int32_t *want = NULL;
        uint32_t n_want = 0;
        if (pass == 1) {
            n_want = n_tokens;
            want = malloc((size_t)n_want * sizeof *want);
            CHECK(want != NULL);
            memcpy(want, tokens, (size_t)n_want * sizeof *want);
            want[(size > 0 ? data[size - 1] : 0) % n_want] ^= 1;
        }
        sy_seq *seq = NULL;
        uint32_t restored = 0;
        e = sy_snapshot_restore(snap, &fake_engine, &fake_state, (sy_model *)(void *)&fake, want, n_want, 0, &seq,
                                &restored, err, sizeof err);
        if (e == SY_SNAPSHOT_OK) {
            CHECK(restored <= n_tokens && (seq != NULL) == (restored > 0));
            CHECK(restored == 0 || fake.length == restored);
            if (pass == 0) CHECK(restored == n_tokens);
            if (seq != NULL) fake_seq_free(NULL, seq);
        } else {
            CHECK(seq == NULL && !fake.live && err[0] != '\0');
        }
        free(want);
        sy_snapshot_close(snap);
    }
}
