/* lfm2-cuda's "sy.engine.state/1" on a GPU, on the transformers fixture tests/fixtures/hf/lfm2-f32 (2 conv and 2
 * attention layers, conv width 3, KV blocks of 16 positions):
 *  - state_info and state_chunk_bytes follow the config; a whole-sequence chunk is the concatenation of the KV of
 *    its sub-chunks plus the conv state of the last; chunks end only where the conv state is still held;
 *  - a prompt saved in chunks (starting and ending inside KV blocks) and loaded into a fresh sequence, whole or only
 *    a prefix, then decoded greedily, gives the tokens (and logits) of the original sequence decoded the same way
 *    (its fork: the same state, bit for bit); a loaded chunk saves back to the same bytes;
 *  - loading into a fork whose last, partly filled KV block is shared copies the block first (the source keeps its
 *    own positions);
 *  - a chunk that does not start at the sequence's length, a reader that runs short (in the KV or the conv part, or
 *    because the chunk claims more positions than its bytes hold), non-finite values, foreign token ids, a chunk past
 *    the context, a full KV cache and a failing writer are errors, and leave the sequence as it was;
 *  - the host's snapshot writer and reader (host/snapshot.c) round-trip a sequence through a file: refused chunk
 *    ends are lengthened, and a prompt agreeing with only part of the snapshot restores whole chunks of it.
 * Label gpu. Without a usable GPU the test prints why and exits 77 (skipped). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>

#include <cmocka.h>

#include "lfm2_cuda_test_util.h"
#include "persist/snapshot.h"

#define V 512
#define N_GEN 12

/* The fixture's shapes: 2 attention layers x 2 KV heads x head_dim 16 in BF16 (K and V), 2 conv layers x (3 - 1)
 * inputs of 64 F32. */
#define KV_BYTES_PER_TOKEN (2u * 2u * 2u * 16u * 2u)
#define RECURRENT_BYTES (2u * 2u * 64u * 4u)

static const sy_engine_state_api *state_api;
static const char *fixture;

/* P: the prompt; Q: the same first 30 tokens, then others */
enum { NP = 45, SHARED = 30 };
static int32_t P[NP], Q[NP];

static sy_model *load(const char *ctx, const char *kv_mb) {
    sy_option opts[3] = {{"ctx_size", ctx}, {"max_sequences", "40"}, {"kv_cache_mb", kv_mb}};
    sy_model *m = NULL;
    if (lct_api->load(fixture, opts, kv_mb ? 3 : 2, &m) != SY_OK) fail_msg("load: %s", lct_api->error_message());
    return m;
}

static void decode1(sy_model *m, sy_seq *s, const int32_t *t, uint32_t n, uint32_t n_logits, float *logits) {
    sy_decode_item item = {sizeof item, s, t, n, n_logits, logits, NULL};
    sy_decode_batch batch = {sizeof batch, 1, sizeof item, &item, NULL, NULL};
    if (lct_api->decode(m, &batch) != SY_OK) fail_msg("decode: %s", lct_api->error_message());
}

static int32_t argmax(const float *x) {
    int32_t b = 0;
    for (int32_t i = 1; i < V; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

static sy_seq *new_seq(sy_model *m) {
    sy_seq *s = NULL;
    if (lct_api->seq_create(m, &s) != SY_OK) fail_msg("seq_create: %s", lct_api->error_message());
    return s;
}

static sy_seq *prefilled(sy_model *m, const int32_t *prompt, uint32_t n) {
    sy_seq *s = new_seq(m);
    float last[V];
    decode1(m, s, prompt, n, 1, last);
    return s;
}

static sy_seq *fork_of(sy_model *m, const sy_seq *src, uint32_t n) {
    sy_seq *f = NULL;
    if (lct_api->seq_fork(m, src, n, &f) != SY_OK) fail_msg("seq_fork(%u): %s", n, lct_api->error_message());
    return f;
}

/* A greedy continuation: `first` fed, then N_GEN argmax tokens (each fed back); their logits rows too. */
typedef struct run {
    int32_t tokens[N_GEN];
    float logits[N_GEN][V];
} run;

static void greedy(sy_model *m, sy_seq *s, int32_t first, run *out) {
    int32_t t = first;
    for (int i = 0; i < N_GEN; i++) {
        decode1(m, s, &t, 1, 1, out->logits[i]);
        t = out->tokens[i] = argmax(out->logits[i]);
    }
}

/* One logits row equal to another up to rounding (see expect_same_run). */
static void expect_close_row(const float *got, const float *want, const char *what) {
    float lo = want[0], hi = lo;
    double worst = 0;
    for (int k = 0; k < V; k++) {
        lo = fminf(lo, want[k]), hi = fmaxf(hi, want[k]);
        worst = isfinite(got[k]) ? fmax(worst, fabs((double)got[k] - want[k])) : INFINITY;
    }
    if (!(worst <= 1e-3 * (hi - lo))) fail_msg("%s: logits differ by %g", what, worst);
}

/* Same tokens; logits equal up to rounding (the same state gives the same bits; the margin only guards against
 * a kernel that is not bitwise reproducible). */
static void expect_same_run(const run *got, const run *want, const char *what) {
    for (int i = 0; i < N_GEN; i++) {
        float lo = want->logits[i][0], hi = lo;
        double worst = 0;
        for (int k = 0; k < V; k++) {
            lo = fminf(lo, want->logits[i][k]), hi = fmaxf(hi, want->logits[i][k]);
            if (!isfinite(got->logits[i][k])) fail_msg("%s: step %d logit %d is %g", what, i, k, (double)got->logits[i][k]);
            worst = fmax(worst, fabs((double)got->logits[i][k] - want->logits[i][k]));
        }
        if (got->tokens[i] != want->tokens[i])
            fail_msg("%s: step %d gave token %d, expected %d", what, i, got->tokens[i], want->tokens[i]);
        if (!(worst <= 1e-3 * (hi - lo))) fail_msg("%s: step %d logits differ by %g", what, i, worst);
    }
}

/* ---- chunks in memory ---- */

typedef struct chunk {
    uint32_t begin, end;
    uint8_t *bytes;
    size_t len;
    size_t cap; /* a writer fails (SY_ERR_IO) past it */
} chunk;

static sy_status chunk_write(void *user, const void *data, size_t len) {
    chunk *c = user;
    if (len > c->cap - c->len) return SY_ERR_IO;
    memcpy(c->bytes + c->len, data, len);
    c->len += len;
    return SY_OK;
}

typedef struct source {
    const uint8_t *bytes;
    size_t len, pos;
} source;

static sy_status source_read(void *user, void *data, size_t len) {
    source *s = user;
    if (len > s->len - s->pos) return SY_ERR_FORMAT;
    memcpy(data, s->bytes + s->pos, len);
    s->pos += len;
    return SY_OK;
}

static sy_status save(sy_model *m, const sy_seq *s, uint32_t begin, uint32_t end, chunk *c) {
    uint64_t bytes = state_api->state_chunk_bytes(m, end > begin ? end - begin : 0);
    *c = (chunk){begin, end, malloc((size_t)bytes + 1), 0, (size_t)bytes};
    assert_non_null(c->bytes);
    sy_state_writer w = {sizeof w, c, chunk_write};
    sy_status st = state_api->state_save_chunk(m, s, begin, end, &w);
    if (st == SY_OK) assert_int_equal(c->len, bytes);
    return st;
}

static chunk saved(sy_model *m, const sy_seq *s, uint32_t begin, uint32_t end) {
    chunk c;
    sy_status st = save(m, s, begin, end, &c);
    if (st != SY_OK) fail_msg("save [%u, %u): %s", begin, end, lct_api->error_message());
    return c;
}

/* Load `len` bytes of c (all of it when len is SIZE_MAX) as the chunk [begin, end). */
static sy_status load_as(sy_model *m, sy_seq *s, const chunk *c, uint32_t begin, uint32_t end, const int32_t *tokens,
                         size_t len) {
    source src = {c->bytes, len == SIZE_MAX ? c->len : len, 0};
    sy_state_reader r = {sizeof r, &src, source_read};
    sy_status st = state_api->state_load_chunk(m, s, begin, end, tokens + begin, &r);
    if (st == SY_OK) assert_int_equal(src.pos, src.len); /* every byte consumed */
    return st;
}

static void load_ok(sy_model *m, sy_seq *s, const chunk *c, const int32_t *tokens) {
    if (load_as(m, s, c, c->begin, c->end, tokens, SIZE_MAX) != SY_OK)
        fail_msg("load [%u, %u): %s", c->begin, c->end, lct_api->error_message());
    assert_int_equal(lct_api->seq_length(m, s), c->end);
}

/* Runs every shape the tests decode (45- and 8-row prefills, 1-row steps) once, so the GEMM algorithms are chosen
 * and the decode-step graph is captured before any run that is compared. */
static void warm_up(sy_model *m) {
    sy_seq *s = prefilled(m, P, NP);
    float l[V];
    decode1(m, s, Q + 37, 8, 1, l);
    decode1(m, s, P, 13, 1, l);
    for (int i = 0; i < 4; i++) decode1(m, s, &P[i], 1, 1, l);
    lct_api->seq_free(m, s);
}

/* ---- tests ---- */

static void test_info_and_chunk_shapes(void **state) {
    (void)state;
    assert_non_null(state_api);
    sy_model *m = load("256", NULL);
    sy_state_info info = {.struct_size = sizeof info};
    assert_int_equal(state_api->state_info(m, &info), SY_OK);
    assert_string_equal(info.layout, "lfm2-cuda-kv-bf16-conv-f32-v1");
    assert_int_equal(info.element_size, 2);
    assert_int_equal(info.kv_bytes_per_token, KV_BYTES_PER_TOKEN);
    assert_int_equal(info.recurrent_bytes, RECURRENT_BYTES);
    assert_int_equal(state_api->state_chunk_bytes(m, 7), 7u * KV_BYTES_PER_TOKEN + RECURRENT_BYTES);
    assert_int_equal(state_api->state_info(m, NULL), SY_ERR_INVALID_ARGUMENT);

    sy_seq *a = prefilled(m, P, NP);
    chunk c1 = saved(m, a, 0, SHARED), c2 = saved(m, a, SHARED, 37), c3 = saved(m, a, 37, NP), all = saved(m, a, 0, NP);
    /* the whole chunk: the sub-chunks' KV in order, then the conv state after the last position */
    size_t kv1 = SHARED * KV_BYTES_PER_TOKEN, kv2 = 7 * KV_BYTES_PER_TOKEN, kv3 = 8 * KV_BYTES_PER_TOKEN;
    assert_memory_equal(all.bytes, c1.bytes, kv1);
    assert_memory_equal(all.bytes + kv1, c2.bytes, kv2);
    assert_memory_equal(all.bytes + kv1 + kv2, c3.bytes, kv3);
    assert_memory_equal(all.bytes + kv1 + kv2 + kv3, c3.bytes + kv3, RECURRENT_BYTES);
    /* conv states differ between chunk ends, and the KV is not all zeros */
    assert_memory_not_equal(c1.bytes + kv1, c2.bytes + kv2, RECURRENT_BYTES);
    size_t nonzero = 0;
    for (size_t i = 0; i < kv1; i++) nonzero += c1.bytes[i] != 0;
    assert_true(nonzero > kv1 / 2);
    /* the conv state after position 19 is gone (a sequence keeps the last 16 + 2 inputs); bad ranges */
    chunk bad;
    assert_int_equal(save(m, a, 0, 20, &bad), SY_ERR_UNSUPPORTED);
    assert_non_null(strstr(lct_api->error_message(), "no longer held"));
    free(bad.bytes);
    assert_int_equal(save(m, a, 0, NP + 1, &bad), SY_ERR_INVALID_ARGUMENT);
    free(bad.bytes);
    assert_int_equal(save(m, a, 5, 5, &bad), SY_ERR_INVALID_ARGUMENT);
    free(bad.bytes);
    /* a writer that fails passes its status back */
    chunk small = {0, 0, malloc(100), 0, 100};
    sy_state_writer w = {sizeof w, &small, chunk_write};
    assert_int_equal(state_api->state_save_chunk(m, a, 0, SHARED, &w), SY_ERR_IO);
    free(small.bytes);

    free(c1.bytes), free(c2.bytes), free(c3.bytes), free(all.bytes);
    lct_api->seq_free(m, a);
    lct_api->unload(m);
}

static void test_restore_whole_and_prefix(void **state) {
    (void)state;
    sy_model *m = load("256", NULL);
    warm_up(m);
    sy_seq *a = prefilled(m, P, NP);
    chunk c1 = saved(m, a, 0, SHARED), c2 = saved(m, a, SHARED, 37), c3 = saved(m, a, 37, NP), all = saved(m, a, 0, NP);
    const int32_t first = 7;
    run want, got;

    /* whole: three chunks, or one */
    sy_seq *ref = fork_of(m, a, NP);
    greedy(m, ref, first, &want);
    sy_seq *r = new_seq(m);
    load_ok(m, r, &c1, P);
    load_ok(m, r, &c2, P);
    load_ok(m, r, &c3, P);
    greedy(m, r, first, &got);
    expect_same_run(&got, &want, "restored in three chunks");
    sy_seq *r1 = new_seq(m);
    load_ok(m, r1, &all, P);
    greedy(m, r1, first, &got);
    expect_same_run(&got, &want, "restored in one chunk");

    /* a prefix: [0, 37), then the rest of the prompt decoded, against the original forked at 37 */
    sy_seq *ref37 = fork_of(m, a, 37), *r2 = new_seq(m);
    load_ok(m, r2, &c1, P);
    load_ok(m, r2, &c2, P);
    /* restored: the conv state is known only at 37, so it cannot roll back; it saves back to the same bytes */
    assert_int_equal(lct_api->seq_truncate(m, r2, 36), SY_ERR_UNSUPPORTED);
    assert_int_equal(lct_api->seq_length(m, r2), 37);
    chunk again = saved(m, r2, SHARED, 37), again_all = saved(m, r2, 0, 37);
    assert_int_equal(again.len, c2.len);
    assert_memory_equal(again.bytes, c2.bytes, c2.len);
    assert_memory_equal(again_all.bytes, c1.bytes, SHARED * KV_BYTES_PER_TOKEN);
    assert_memory_equal(again_all.bytes + SHARED * KV_BYTES_PER_TOKEN, c2.bytes, c2.len);
    chunk refused;
    assert_int_equal(save(m, r2, 0, SHARED, &refused), SY_ERR_UNSUPPORTED);
    free(refused.bytes);
    float lr[V], lw[V];
    decode1(m, ref37, P + 37, NP - 37, 1, lw);
    decode1(m, r2, P + 37, NP - 37, 1, lr);
    expect_close_row(lr, lw, "the rest of the prompt after a restored prefix");
    greedy(m, ref37, argmax(lw), &want);
    greedy(m, r2, argmax(lr), &got);
    expect_same_run(&got, &want, "prefix restored, the rest decoded");

    free(c1.bytes), free(c2.bytes), free(c3.bytes), free(all.bytes), free(again.bytes), free(again_all.bytes);
    sy_seq *seqs[] = {a, ref, r, r1, ref37, r2};
    for (size_t i = 0; i < sizeof seqs / sizeof *seqs; i++) lct_api->seq_free(m, seqs[i]);
    lct_api->unload(m);
}

static void test_load_into_shared_block(void **state) {
    (void)state;
    sy_model *m = load("256", NULL);
    warm_up(m);
    const int32_t first = 11;
    sy_seq *a = prefilled(m, P, NP), *b = prefilled(m, Q, NP);
    run want_a, want_b, got;
    sy_seq *ra = fork_of(m, a, NP), *rb = fork_of(m, b, 37);
    greedy(m, ra, first, &want_a);
    greedy(m, rb, first, &want_b);
    chunk cb = saved(m, b, SHARED, 37);
    /* the fork shares a's blocks 0 and 1; block 1 holds a's positions 16..31, and the chunk writes 30..36 */
    sy_seq *f = fork_of(m, a, SHARED);
    load_ok(m, f, &cb, Q);
    greedy(m, f, first, &got);
    expect_same_run(&got, &want_b, "a's first 30 positions, then b's chunk");
    sy_seq *a2 = fork_of(m, a, NP);
    greedy(m, a2, first, &got);
    expect_same_run(&got, &want_a, "the source after a load into its fork");
    free(cb.bytes);
    sy_seq *seqs[] = {a, b, ra, rb, f, a2};
    for (size_t i = 0; i < sizeof seqs / sizeof *seqs; i++) lct_api->seq_free(m, seqs[i]);
    lct_api->unload(m);
}

static void test_bad_chunks_leave_the_sequence(void **state) {
    (void)state;
    sy_model *m = load("256", NULL);
    warm_up(m);
    sy_seq *a = prefilled(m, P, NP);
    chunk c1 = saved(m, a, 0, SHARED), c2 = saved(m, a, SHARED, 37), c3 = saved(m, a, 37, NP);
    sy_seq *r = new_seq(m);
    load_ok(m, r, &c1, P);
    const size_t kv2 = 7 * KV_BYTES_PER_TOKEN;
    struct {
        const char *what;
        uint32_t begin, end;
        size_t len;
        sy_status want;
    } cases[] = {
        {"a chunk not at the sequence's end", SHARED + 1, 37, SIZE_MAX, SY_ERR_INVALID_ARGUMENT},
        {"an empty chunk", SHARED, SHARED, SIZE_MAX, SY_ERR_INVALID_ARGUMENT},
        {"a reader short in the KV", SHARED, 37, kv2 / 2, SY_ERR_FORMAT},
        {"a reader short in the conv state", SHARED, 37, kv2 + RECURRENT_BYTES / 2, SY_ERR_FORMAT},
        {"a chunk past the context", SHARED, 300, SIZE_MAX, SY_ERR_CONTEXT_FULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        static int32_t ids[300];
        memcpy(ids, P, sizeof P);
        sy_status st = load_as(m, r, &c2, cases[i].begin, cases[i].end, ids, cases[i].len);
        if (st != cases[i].want)
            fail_msg("%s: status %d, expected %d (%s)", cases[i].what, (int)st, (int)cases[i].want,
                     lct_api->error_message());
        assert_int_equal(lct_api->seq_length(m, r), SHARED);
    }
    assert_non_null(strstr(lct_api->error_message(), "context"));
    /* the chunk claims 8 positions but holds 7: the reader runs out (or the conv floats read as KV are refused) */
    assert_int_not_equal(load_as(m, r, &c2, SHARED, 38, P, SIZE_MAX), SY_OK);
    assert_int_equal(lct_api->seq_length(m, r), SHARED);
    /* non-finite values, foreign ids, no ids */
    chunk bad = {SHARED, 37, malloc(c2.len), c2.len, c2.len};
    assert_non_null(bad.bytes);
    memcpy(bad.bytes, c2.bytes, c2.len);
    float nan_value = NAN;
    memcpy(bad.bytes + kv2 + 8, &nan_value, sizeof nan_value);
    assert_int_equal(load_as(m, r, &bad, SHARED, 37, P, SIZE_MAX), SY_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(lct_api->error_message(), "not finite"));
    memcpy(bad.bytes, c2.bytes, c2.len);
    const uint16_t inf_bf16 = 0x7F80;
    memcpy(bad.bytes + 3 * KV_BYTES_PER_TOKEN + 10, &inf_bf16, sizeof inf_bf16);
    assert_int_equal(load_as(m, r, &bad, SHARED, 37, P, SIZE_MAX), SY_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(lct_api->error_message(), "position 33"));
    int32_t foreign[NP];
    memcpy(foreign, P, sizeof P);
    foreign[33] = V;
    assert_int_equal(load_as(m, r, &c2, SHARED, 37, foreign, SIZE_MAX), SY_ERR_INVALID_ARGUMENT);
    source src = {c2.bytes, c2.len, 0};
    sy_state_reader reader = {sizeof reader, &src, source_read};
    assert_int_equal(state_api->state_load_chunk(m, r, SHARED, 37, NULL, &reader), SY_ERR_INVALID_ARGUMENT);
    assert_int_equal(lct_api->seq_length(m, r), SHARED);
    free(bad.bytes);

    /* after all that, the good chunks still give the original's continuation */
    load_ok(m, r, &c2, P);
    load_ok(m, r, &c3, P);
    run want, got;
    sy_seq *ref = fork_of(m, a, NP);
    greedy(m, ref, 5, &want);
    greedy(m, r, 5, &got);
    expect_same_run(&got, &want, "restored after failed loads");
    lct_api->seq_free(m, ref);
    lct_api->seq_free(m, r);

    /* a full KV cache: 1 MB is 256 blocks of 16 positions, all taken by 16 sequences of 256 tokens */
    sy_model *tiny = load("256", "1");
    static int32_t toks[256];
    for (int i = 0; i < 256; i++) toks[i] = (int32_t)((i * 37) % V);
    sy_seq *full[16];
    for (int i = 0; i < 16; i++) {
        full[i] = new_seq(tiny);
        decode1(tiny, full[i], toks, 256, 0, NULL);
    }
    sy_seq *t = new_seq(tiny);
    assert_int_equal(load_as(tiny, t, &c1, 0, SHARED, P, SIZE_MAX), SY_ERR_OUT_OF_MEMORY);
    assert_non_null(strstr(lct_api->error_message(), "KV cache is full"));
    assert_int_equal(lct_api->seq_length(tiny, t), 0);
    lct_api->seq_free(tiny, full[0]);
    load_ok(tiny, t, &c1, P);
    for (int i = 1; i < 16; i++) lct_api->seq_free(tiny, full[i]);
    lct_api->seq_free(tiny, t);
    lct_api->unload(tiny);

    free(c1.bytes), free(c2.bytes), free(c3.bytes);
    lct_api->seq_free(m, a);
    lct_api->unload(m);
}

/* ---- through the host's snapshot files ---- */

static sy_snapshot_key key_of(sy_model *m, sy_model_info *info, sy_state_info *si) {
    *info = (sy_model_info){.struct_size = sizeof *info};
    *si = (sy_state_info){.struct_size = sizeof *si};
    assert_int_equal(lct_api->model_info(m, info), SY_OK);
    assert_int_equal(state_api->state_info(m, si), SY_OK);
    return (sy_snapshot_key){info->fingerprint, lct_entry->name,        lct_entry->version,
                             si->layout,        si->element_size,       si->kv_bytes_per_token,
                             si->recurrent_bytes};
}

static void test_host_snapshot_file(void **state) {
    (void)state;
    sy_model *m = load("256", NULL);
    warm_up(m);
    sy_model_info info;
    sy_state_info si;
    sy_snapshot_key key = key_of(m, &info, &si);
    sy_seq *a = prefilled(m, P, NP);
    /* chunks of 16: [0, 16) is refused (its conv state is gone), so the writer takes [0, 32), then [32, 45) */
    FILE *f = tmpfile();
    assert_non_null(f);
    const int fd = fileno(f);
    char err[512] = "";
    sy_snapshot_write_options opts = {.chunk_tokens = 16};
    sy_snapshot_write_stats stats = {0};
    sy_snapshot_error e = sy_snapshot_write_fd(fd, &key, state_api, m, a, P, NP, &opts, &stats, err, sizeof err);
    if (e != SY_SNAPSHOT_OK) fail_msg("snapshot write: %s", err);
    assert_int_equal(stats.n_chunks, 2);
    assert_int_equal(stats.raw_bytes, 2 * RECURRENT_BYTES + NP * KV_BYTES_PER_TOKEN);
    assert_true(lseek(fd, 0, SEEK_END) == (off_t)stats.file_bytes);
    const size_t size = (size_t)stats.file_bytes;
    uint8_t *file = malloc(size);
    assert_non_null(file);
    for (size_t got_bytes = 0; got_bytes < size;) {
        ssize_t n_read = pread(fd, file + got_bytes, size - got_bytes, (off_t)got_bytes);
        assert_true(n_read > 0);
        got_bytes += (size_t)n_read;
    }
    fclose(f);

    const int32_t first = 3;
    run want, got;
    sy_seq *ref = fork_of(m, a, NP);
    greedy(m, ref, first, &want);
    /* all of it */
    sy_snapshot *snap = NULL;
    assert_int_equal(sy_snapshot_open_memory(file, size, NULL, &snap, err, sizeof err), SY_SNAPSHOT_OK);
    assert_int_equal(sy_snapshot_key_check(sy_snapshot_get_key(snap), &key, err, sizeof err), SY_SNAPSHOT_OK);
    sy_seq *r = NULL;
    uint32_t n = 0;
    e = sy_snapshot_restore(snap, lct_api, state_api, m, NULL, 0, 0, &r, &n, err, sizeof err);
    if (e != SY_SNAPSHOT_OK) fail_msg("restore: %s", err);
    sy_snapshot_close(snap);
    assert_int_equal(n, NP);
    greedy(m, r, first, &got);
    expect_same_run(&got, &want, "restored from a snapshot file");
    /* a prompt agreeing on 40 tokens: the chunk [0, 32) only, then the rest decoded, against the original at 32 */
    int32_t prompt[NP];
    memcpy(prompt, P, sizeof P);
    for (int i = 40; i < NP; i++) prompt[i] = (P[i] + 1) % V;
    assert_int_equal(sy_snapshot_open_memory(file, size, NULL, &snap, err, sizeof err), SY_SNAPSHOT_OK);
    sy_seq *r2 = NULL;
    e = sy_snapshot_restore(snap, lct_api, state_api, m, prompt, NP, 0, &r2, &n, err, sizeof err);
    if (e != SY_SNAPSHOT_OK) fail_msg("prefix restore: %s", err);
    sy_snapshot_close(snap);
    assert_int_equal(n, 32);
    sy_seq *ref32 = fork_of(m, a, 32);
    float lw[V], lr[V];
    decode1(m, ref32, prompt + 32, NP - 32, 1, lw);
    decode1(m, r2, prompt + 32, NP - 32, 1, lr);
    expect_close_row(lr, lw, "the rest of the prompt after a prefix restored from a file");
    greedy(m, ref32, argmax(lw), &want);
    greedy(m, r2, argmax(lr), &got);
    expect_same_run(&got, &want, "a prefix restored from a snapshot file");

    free(file);
    sy_seq *seqs[] = {a, ref, r, r2, ref32};
    for (size_t i = 0; i < sizeof seqs / sizeof *seqs; i++) lct_api->seq_free(m, seqs[i]);
    lct_api->unload(m);
}

int main(void) {
    fixture = lct_source_path("tests/fixtures/hf/lfm2-f32");
    int ready = lct_open_on_device(fixture);
    if (ready != 0) return ready;
    state_api = lct_entry->get_interface(SY_ENGINE_STATE_INTERFACE_ID);
    uint32_t seed = 11;
    for (int i = 0; i < NP; i++) {
        seed = seed * 1664525u + 1013904223u;
        P[i] = (int32_t)((seed >> 8) % 500);
        Q[i] = i < SHARED ? P[i] : (P[i] + 1 + i) % 500;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_info_and_chunk_shapes),     cmocka_unit_test(test_restore_whole_and_prefix),
        cmocka_unit_test(test_load_into_shared_block),    cmocka_unit_test(test_bad_chunks_leave_the_sequence),
        cmocka_unit_test(test_host_snapshot_file),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    lct_close();
    return rc;
}
