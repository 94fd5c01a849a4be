/*
 * The snapshot format on the test engine: a restored sequence continues exactly as the uninterrupted one did
 * (greedy, token for token), also after a restart of the model, for a prefix of the snapshot only, and for a
 * recurrent model (including chunk boundaries the engine refuses); every codec reads back the same bytes; and
 * truncated, bit-flipped, wrong-model and wrong-version files are refused with their reason.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <xxhash.h>

#include "snapshot_fixture.h"
#include "base/util.h"

static serve_env env;
static char *model_path, *model_other_path, *recurrent_path;

static int group_setup(void **state) {
    (void)state;
    if (serve_env_open(&env) != 0) return -1;
    model_path = serve_write_model(&env, "model.txt", "seed=11\nn_ctx=4096", 0);
    model_other_path = serve_write_model(&env, "other.txt", "seed=12\nn_ctx=4096", 0);
    recurrent_path = serve_write_model(&env, "recurrent.txt", "seed=11\nn_ctx=4096\nrecurrent=1", 0);
    return 0;
}

static int group_teardown(void **state) {
    (void)state;
    free(model_path);
    free(model_other_path);
    free(recurrent_path);
    serve_env_close(&env);
    return 0;
}

static char *temp_path(const char *name) { return sy_path_join(env.dir, name); }

/* Save seq (holding tokens) to path; asserts success. */
static sy_snapshot_write_stats save(const sy_loaded_model *lm, sy_seq *seq, const int32_t *tokens, uint32_t n,
                                    const char *path, const sy_snapshot_write_options *opts) {
    sy_snapshot_key key;
    snap_key(lm, &key);
    sy_snapshot_write_stats stats = {0};
    char err[512] = "";
    sy_snapshot_error e = sy_snapshot_write_file(path, &key, lm->plugin->engine_state, lm->model, seq, tokens, n,
                                                 opts, &stats, err, sizeof err);
    if (e != SY_SNAPSHOT_OK) fprintf(stderr, "write: %s\n", err);
    assert_int_equal(e, SY_SNAPSHOT_OK);
    return stats;
}

/* Open, check the key and restore (the longest prefix agreeing with want, or all). */
static sy_snapshot_error restore(const sy_loaded_model *lm, const char *path, const int32_t *want, uint32_t n_want,
                                 uint32_t max_tokens, sy_seq **out, uint32_t *n_out, char *err, size_t err_size) {
    sy_snapshot *snap = NULL;
    sy_snapshot_error e = sy_snapshot_open_file(path, NULL, &snap, err, err_size);
    if (e != SY_SNAPSHOT_OK) return e;
    sy_snapshot_key key;
    snap_key(lm, &key);
    e = sy_snapshot_key_check(sy_snapshot_get_key(snap), &key, err, err_size);
    if (e == SY_SNAPSHOT_OK)
        e = sy_snapshot_restore(snap, lm->engine, lm->plugin->engine_state, lm->model, want, n_want, max_tokens, out,
                                n_out, err, err_size);
    sy_snapshot_close(snap);
    return e;
}

/* ---- helpers ------------------------------------------------------------------------------------------------- */

static void shuffle_round_trip(void **state) {
    (void)state;
    uint8_t in[1031], planes[1031], back[1031];
    for (size_t i = 0; i < sizeof in; i++) in[i] = (uint8_t)(i * 7 + (i >> 3));
    for (uint32_t es = 1; es <= 8; es++) {
        sy_snapshot_shuffle(in, planes, sizeof in, es);
        sy_snapshot_unshuffle(planes, back, sizeof in, es);
        assert_memory_equal(in, back, sizeof in);
    }
    /* Two-byte elements: the low bytes first, then the high bytes; the odd byte at the end stays. */
    sy_snapshot_shuffle(in, planes, 5, 2);
    assert_int_equal(planes[0], in[0]);
    assert_int_equal(planes[1], in[2]);
    assert_int_equal(planes[2], in[1]);
    assert_int_equal(planes[3], in[3]);
    assert_int_equal(planes[4], in[4]);
}

/* ---- restore equality ---------------------------------------------------------------------------------------- */

/* Reference run: decode all but the last prompt token, snapshot that, then continue greedily. After "restarting"
 * the model (a fresh load), restore the snapshot, decode the last prompt token and continue: the same tokens. */
static void restore_continues_like_uninterrupted(const char *path_of_model, uint32_t n_prompt) {
    int32_t *prompt = snap_make_tokens(5, n_prompt);
    enum { N_GEN = 40 };
    int32_t ref[N_GEN], got[N_GEN];
    char *snap_path = temp_path("equal.sysnap");
    float *logits;
    {
        sy_loaded_model lm;
        serve_open_model(&env, path_of_model, NULL, 0, &lm);
        logits = malloc(lm.info.n_vocab * sizeof *logits);
        sy_seq *seq = snap_sequence(&lm, prompt, n_prompt - 1);
        sy_snapshot_write_stats st = save(&lm, seq, prompt, n_prompt - 1, snap_path, NULL);
        assert_int_equal(st.n_chunks, (n_prompt - 1 + 255) / 256);
        snap_decode(&lm, seq, prompt + n_prompt - 1, 1, logits);
        snap_greedy(&lm, seq, logits, N_GEN, ref);
        lm.engine->seq_free(lm.model, seq);
        sy_loaded_model_close(&lm);
    }
    {
        sy_loaded_model lm;
        serve_open_model(&env, path_of_model, NULL, 0, &lm);
        sy_seq *seq = NULL;
        uint32_t n = 0;
        char err[512] = "";
        sy_snapshot_error e = restore(&lm, snap_path, NULL, 0, 0, &seq, &n, err, sizeof err);
        if (e != SY_SNAPSHOT_OK) fprintf(stderr, "restore: %s\n", err);
        assert_int_equal(e, SY_SNAPSHOT_OK);
        assert_non_null(seq);
        assert_int_equal(n, n_prompt - 1);
        assert_int_equal(lm.engine->seq_length(lm.model, seq), n_prompt - 1);
        snap_decode(&lm, seq, prompt + n_prompt - 1, 1, logits);
        snap_greedy(&lm, seq, logits, N_GEN, got);
        assert_memory_equal(ref, got, sizeof ref);
        lm.engine->seq_free(lm.model, seq);
        sy_loaded_model_close(&lm);
    }
    free(logits);
    free(snap_path);
    free(prompt);
}

static void restore_equality(void **state) {
    (void)state;
    restore_continues_like_uninterrupted(model_path, 700);
    restore_continues_like_uninterrupted(model_path, 2); /* one token: a single short chunk */
    restore_continues_like_uninterrupted(model_path, 513);
}

static void restore_equality_recurrent(void **state) {
    (void)state;
    restore_continues_like_uninterrupted(recurrent_path, 700);
}

/* The restored bytes really drive the output (the equality above is not vacuous): the same chunks with one KV
 * value changed, loaded through the engine directly, give another continuation. */
typedef struct mem_reader {
    const uint8_t *data;
    size_t len, pos;
} mem_reader;

static sy_status mem_read(void *user, void *data, size_t len) {
    mem_reader *r = user;
    if (len > r->len - r->pos) return SY_ERR_FORMAT;
    memcpy(data, r->data + r->pos, len);
    r->pos += len;
    return SY_OK;
}

static void restored_state_is_used(void **state) {
    (void)state;
    sy_loaded_model lm;
    serve_open_model(&env, model_path, NULL, 0, &lm);
    float *logits = malloc(lm.info.n_vocab * sizeof *logits);
    int32_t *tokens = snap_make_tokens(21, 300);
    char *path = temp_path("used.sysnap");
    sy_seq *seq = snap_sequence(&lm, tokens, 300);
    save(&lm, seq, tokens, 300, path, NULL);
    int32_t next = 65, ref[20], got[20];
    snap_decode(&lm, seq, &next, 1, logits);
    snap_greedy(&lm, seq, logits, 20, ref);
    lm.engine->seq_free(lm.model, seq);

    for (int tamper = 0; tamper < 2; tamper++) {
        sy_snapshot *snap = NULL;
        char err[256];
        assert_int_equal(sy_snapshot_open_file(path, NULL, &snap, err, sizeof err), SY_SNAPSHOT_OK);
        sy_seq *restored = snap_sequence(&lm, NULL, 0);
        for (;;) {
            uint32_t b, e;
            const uint8_t *raw;
            size_t raw_len;
            bool done;
            assert_int_equal(sy_snapshot_next_chunk(snap, &b, &e, &raw, &raw_len, &done, err, sizeof err),
                             SY_SNAPSHOT_OK);
            if (done) break;
            uint8_t *copy = malloc(raw_len);
            memcpy(copy, raw, raw_len);
            if (tamper && b == 256) copy[raw_len - 3] ^= 0x40; /* a value of the last position's KV */
            mem_reader r = {copy, raw_len, 0};
            sy_state_reader reader = {sizeof reader, &r, mem_read};
            assert_int_equal(lm.plugin->engine_state->state_load_chunk(lm.model, restored, b, e, tokens + b, &reader),
                             SY_OK);
            free(copy);
        }
        sy_snapshot_close(snap);
        snap_decode(&lm, restored, &next, 1, logits);
        snap_greedy(&lm, restored, logits, 20, got);
        if (tamper) assert_true(memcmp(ref, got, sizeof ref) != 0);
        else assert_memory_equal(ref, got, sizeof ref);
        lm.engine->seq_free(lm.model, restored);
    }
    free(tokens);
    free(path);
    free(logits);
    sy_loaded_model_close(&lm);
}

/* ---- prefix restore ------------------------------------------------------------------------------------------ */

static void prefix_restore_on(const char *path_of_model) {
    sy_loaded_model lm;
    serve_open_model(&env, path_of_model, NULL, 0, &lm);
    float *logits = malloc(lm.info.n_vocab * sizeof *logits);
    int32_t *saved = snap_make_tokens(7, 1000);
    char *path = temp_path("prefix.sysnap");
    sy_seq *seq = snap_sequence(&lm, saved, 1000);
    save(&lm, seq, saved, 1000, path, NULL);
    lm.engine->seq_free(lm.model, seq);

    /* A request sharing the first 600 tokens, then going elsewhere. */
    int32_t want[800];
    memcpy(want, saved, 600 * sizeof *want);
    for (int i = 600; i < 800; i++) want[i] = (saved[i] + 1) % 256;
    sy_seq *restored = NULL;
    uint32_t n = 0;
    char err[256];
    assert_int_equal(restore(&lm, path, want, 800, 0, &restored, &n, err, sizeof err), SY_SNAPSHOT_OK);
    assert_int_equal(n, 512); /* whole chunks only: [0,256) and [256,512) */
    assert_int_equal(lm.engine->seq_length(lm.model, restored), 512);
    snap_decode(&lm, restored, want + 512, 800 - 512, logits);
    int32_t got[30], ref[30];
    snap_greedy(&lm, restored, logits, 30, got);
    sy_seq *cold = snap_sequence(&lm, NULL, 0);
    snap_decode(&lm, cold, want, 800, logits);
    snap_greedy(&lm, cold, logits, 30, ref);
    assert_memory_equal(ref, got, sizeof ref);
    lm.engine->seq_free(lm.model, restored);
    lm.engine->seq_free(lm.model, cold);

    /* Less than one chunk agrees: nothing is restored. */
    int32_t short_want[300];
    memcpy(short_want, saved, 100 * sizeof *short_want);
    for (int i = 100; i < 300; i++) short_want[i] = (saved[i] + 1) % 256;
    assert_int_equal(restore(&lm, path, short_want, 300, 0, &restored, &n, err, sizeof err), SY_SNAPSHOT_OK);
    assert_null(restored);
    assert_int_equal(n, 0);
    /* A cap (the model's context, say) also ends on a chunk boundary. */
    assert_int_equal(restore(&lm, path, NULL, 0, 300, &restored, &n, err, sizeof err), SY_SNAPSHOT_OK);
    assert_int_equal(n, 256);
    lm.engine->seq_free(lm.model, restored);
    /* The whole request agrees with the snapshot: everything comes back. */
    assert_int_equal(restore(&lm, path, saved, 1000, 0, &restored, &n, err, sizeof err), SY_SNAPSHOT_OK);
    assert_int_equal(n, 1000);
    lm.engine->seq_free(lm.model, restored);
    free(saved);
    free(path);
    free(logits);
    sy_loaded_model_close(&lm);
}

static void prefix_only_restore(void **state) {
    (void)state;
    prefix_restore_on(model_path);
}

static void prefix_only_restore_recurrent(void **state) {
    (void)state;
    prefix_restore_on(recurrent_path);
}

/* A recurrent sequence restored from chunks knows its state only at their ends: saving it again with other chunk
 * boundaries makes the engine refuse some cuts, and the writer moves on to longer chunks. */
static void recurrent_chunk_fallback(void **state) {
    (void)state;
    sy_loaded_model lm;
    serve_open_model(&env, recurrent_path, NULL, 0, &lm);
    float *logits = malloc(lm.info.n_vocab * sizeof *logits);
    int32_t *tokens = snap_make_tokens(9, 800);
    char *first = temp_path("rec1.sysnap"), *second = temp_path("rec2.sysnap");
    sy_seq *seq = snap_sequence(&lm, tokens, 699);
    save(&lm, seq, tokens, 699, first, NULL);
    lm.engine->seq_free(lm.model, seq);

    sy_seq *restored = NULL;
    uint32_t n = 0;
    char err[256];
    assert_int_equal(restore(&lm, first, NULL, 0, 0, &restored, &n, err, sizeof err), SY_SNAPSHOT_OK);
    assert_int_equal(n, 699);
    snap_decode(&lm, restored, tokens + 699, 101, NULL); /* known states: 256, 512, 699, then 700..800 */
    sy_snapshot_write_options opts = {.chunk_tokens = 100};
    sy_snapshot_write_stats st = save(&lm, restored, tokens, 800, second, &opts);
    assert_int_equal(st.n_chunks, 2); /* [0,700) (100..600 refused), then [700,800) */
    lm.engine->seq_free(lm.model, restored);

    assert_int_equal(restore(&lm, second, NULL, 0, 0, &restored, &n, err, sizeof err), SY_SNAPSHOT_OK);
    assert_int_equal(n, 800);
    int32_t next = 10, got[25], ref[25];
    snap_decode(&lm, restored, &next, 1, logits);
    snap_greedy(&lm, restored, logits, 25, got);
    sy_seq *cold = snap_sequence(&lm, tokens, 800);
    snap_decode(&lm, cold, &next, 1, logits);
    snap_greedy(&lm, cold, logits, 25, ref);
    assert_memory_equal(ref, got, sizeof ref);
    lm.engine->seq_free(lm.model, restored);
    lm.engine->seq_free(lm.model, cold);
    free(tokens);
    free(first);
    free(second);
    free(logits);
    sy_loaded_model_close(&lm);
}

/* ---- codecs -------------------------------------------------------------------------------------------------- */

/* Every chunk's decoded bytes, concatenated. */
static uint8_t *all_chunks(const char *path, size_t *len) {
    sy_snapshot *snap = NULL;
    char err[256];
    assert_int_equal(sy_snapshot_open_file(path, NULL, &snap, err, sizeof err), SY_SNAPSHOT_OK);
    uint8_t *out = NULL;
    size_t n = 0;
    for (;;) {
        uint32_t b, e;
        const uint8_t *raw;
        size_t raw_len;
        bool done;
        assert_int_equal(sy_snapshot_next_chunk(snap, &b, &e, &raw, &raw_len, &done, err, sizeof err),
                         SY_SNAPSHOT_OK);
        if (done) break;
        out = realloc(out, n + raw_len);
        memcpy(out + n, raw, raw_len);
        n += raw_len;
    }
    sy_snapshot_close(snap);
    *len = n;
    return out;
}

static void codecs_read_back_the_same(void **state) {
    (void)state;
    sy_loaded_model lm;
    serve_open_model(&env, model_path, NULL, 0, &lm);
    int32_t *tokens = snap_make_tokens(3, 600);
    sy_seq *seq = snap_sequence(&lm, tokens, 600);
    const sy_snapshot_codec codecs[3] = {SY_SNAPSHOT_CODEC_AUTO, SY_SNAPSHOT_CODEC_ZSTD_PLAIN,
                                         SY_SNAPSHOT_CODEC_NONE};
    uint8_t *bytes[3];
    size_t lens[3];
    for (int i = 0; i < 3; i++) {
        char name[32];
        snprintf(name, sizeof name, "codec%d.sysnap", i);
        char *path = temp_path(name);
        sy_snapshot_write_options opts = {.codec = codecs[i]};
        sy_snapshot_write_stats st = save(&lm, seq, tokens, 600, path, &opts);
        sy_snapshot_key key;
        snap_key(&lm, &key);
        assert_int_equal(st.raw_bytes, 600 * key.kv_bytes_per_token);
        bytes[i] = all_chunks(path, &lens[i]);
        free(path);
    }
    assert_int_equal(lens[0], lens[1]);
    assert_int_equal(lens[0], lens[2]);
    assert_memory_equal(bytes[0], bytes[1], lens[0]);
    assert_memory_equal(bytes[0], bytes[2], lens[0]);
    for (int i = 0; i < 3; i++) free(bytes[i]);
    lm.engine->seq_free(lm.model, seq);
    free(tokens);
    sy_loaded_model_close(&lm);
}

/* ---- hostile files ------------------------------------------------------------------------------------------- */

/* Open and restore everything; the error (OK when the file was accepted). */
static sy_snapshot_error try_bytes(const sy_loaded_model *lm, const uint8_t *data, size_t len, char *err,
                                   size_t err_size) {
    char *path = temp_path("hostile.sysnap");
    snap_write_bytes(path, data, len);
    sy_seq *seq = NULL;
    uint32_t n = 0;
    err[0] = '\0';
    sy_snapshot_error e = restore(lm, path, NULL, 0, 0, &seq, &n, err, err_size);
    if (seq != NULL) lm->engine->seq_free(lm->model, seq);
    /* The same through memory, which must agree. */
    sy_snapshot *snap = NULL;
    char err2[512];
    sy_snapshot_error e2 = sy_snapshot_open_memory(data, len, NULL, &snap, err2, sizeof err2);
    if (e2 == SY_SNAPSHOT_OK) {
        for (;;) {
            uint32_t b, en;
            const uint8_t *raw;
            size_t raw_len;
            bool done;
            e2 = sy_snapshot_next_chunk(snap, &b, &en, &raw, &raw_len, &done, err2, sizeof err2);
            if (e2 != SY_SNAPSHOT_OK || done) break;
        }
        sy_snapshot_close(snap);
    }
    if (e != SY_SNAPSHOT_ERR_KEY) assert_int_equal(e, e2);
    free(path);
    return e;
}

typedef struct good_file {
    uint8_t *data;
    size_t len;
    size_t header_end; /* offset of the first chunk record */
} good_file;

static good_file good_snapshot(const sy_loaded_model *lm) {
    int32_t *tokens = snap_make_tokens(13, 700);
    sy_seq *seq = snap_sequence(lm, tokens, 700);
    char *path = temp_path("good.sysnap");
    save(lm, seq, tokens, 700, path, NULL);
    good_file g;
    g.data = snap_read_file(path, &g.len);
    assert_non_null(g.data);
    g.header_end = 16 + (size_t)(g.data[12] | (g.data[13] << 8) | (g.data[14] << 16)) + 8;
    lm->engine->seq_free(lm->model, seq);
    free(tokens);
    free(path);
    return g;
}

static void truncated_files_refused(void **state) {
    (void)state;
    sy_loaded_model lm;
    serve_open_model(&env, model_path, NULL, 0, &lm);
    good_file g = good_snapshot(&lm);
    char err[512];
    assert_int_equal(try_bytes(&lm, g.data, g.len, err, sizeof err), SY_SNAPSHOT_OK);
    /* Too short to be anything. */
    assert_int_equal(try_bytes(&lm, g.data, 0, err, sizeof err), SY_SNAPSHOT_ERR_FORMAT);
    assert_int_equal(try_bytes(&lm, g.data, 10, err, sizeof err), SY_SNAPSHOT_ERR_FORMAT);
    /* Every other cut, from inside the header to one byte short, is a truncation. */
    size_t cuts[] = {16, 40, g.header_end - 1, g.header_end, g.header_end + 30, g.header_end + 100,
                     g.len / 2, g.len - 32, g.len - 31, g.len - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        sy_snapshot_error e = try_bytes(&lm, g.data, cuts[i], err, sizeof err);
        if (e != SY_SNAPSHOT_ERR_TRUNCATED) fprintf(stderr, "cut at %zu of %zu: %s: %s\n", cuts[i], g.len,
                                                    sy_snapshot_error_name(e), err);
        assert_int_equal(e, SY_SNAPSHOT_ERR_TRUNCATED);
        assert_non_null(strstr(err, "ends"));
    }
    /* Bytes after the end are refused too. */
    uint8_t *longer = malloc(g.len + 3);
    memcpy(longer, g.data, g.len);
    memcpy(longer + g.len, "xyz", 3);
    assert_int_equal(try_bytes(&lm, longer, g.len + 3, err, sizeof err), SY_SNAPSHOT_ERR_FORMAT);
    assert_non_null(strstr(err, "after the trailer"));
    free(longer);
    free(g.data);
    sy_loaded_model_close(&lm);
}

static void bit_flips_refused(void **state) {
    (void)state;
    sy_loaded_model lm;
    serve_open_model(&env, model_path, NULL, 0, &lm);
    good_file g = good_snapshot(&lm);
    char err[512];
    uint8_t *bad = malloc(g.len);
    size_t tried = 0, by_checksum = 0;
    /* Every byte of the header and trailer, and a spread of payload bytes: one flipped bit is never accepted. */
    for (size_t at = 0; at < g.len; at += (at < g.header_end + 64 || at + 64 > g.len) ? 1 : 37) {
        memcpy(bad, g.data, g.len);
        bad[at] ^= (uint8_t)(1u << (at % 8));
        sy_snapshot_error e = try_bytes(&lm, bad, g.len, err, sizeof err);
        if (e == SY_SNAPSHOT_OK) fprintf(stderr, "a flipped bit at %zu of %zu was accepted\n", at, g.len);
        assert_int_not_equal(e, SY_SNAPSHOT_OK);
        assert_true(err[0] != '\0');
        tried++;
        if (e == SY_SNAPSHOT_ERR_CHECKSUM) by_checksum++;
    }
    /* Most damage is caught by a checksum; a few fields are checked before theirs (magic, version, sizes). */
    assert_true(by_checksum * 10 > tried * 8);
    /* Specific places, specific reasons. */
    memcpy(bad, g.data, g.len);
    bad[g.header_end - 20] ^= 1; /* in the token ledger */
    assert_int_equal(try_bytes(&lm, bad, g.len, err, sizeof err), SY_SNAPSHOT_ERR_CHECKSUM);
    assert_non_null(strstr(err, "header checksum"));
    memcpy(bad, g.data, g.len);
    bad[g.header_end + 56 + 10] ^= 4; /* in the first chunk's payload */
    assert_int_equal(try_bytes(&lm, bad, g.len, err, sizeof err), SY_SNAPSHOT_ERR_CHECKSUM);
    assert_non_null(strstr(err, "chunk 0: payload checksum"));
    memcpy(bad, g.data, g.len);
    bad[0] ^= 0x20; /* the magic */
    assert_int_equal(try_bytes(&lm, bad, g.len, err, sizeof err), SY_SNAPSHOT_ERR_FORMAT);
    assert_non_null(strstr(err, "magic"));
    free(bad);
    free(g.data);
    sy_loaded_model_close(&lm);
}

static void wrong_model_refused(void **state) {
    (void)state;
    sy_loaded_model lm, other, rec;
    serve_open_model(&env, model_path, NULL, 0, &lm);
    good_file g = good_snapshot(&lm);
    char err[512];
    serve_open_model(&env, model_other_path, NULL, 0, &other);
    assert_int_equal(try_bytes(&other, g.data, g.len, err, sizeof err), SY_SNAPSHOT_ERR_KEY);
    assert_non_null(strstr(err, "model fingerprint differs"));
    serve_open_model(&env, recurrent_path, NULL, 0, &rec);
    assert_int_equal(try_bytes(&rec, g.data, g.len, err, sizeof err), SY_SNAPSHOT_ERR_KEY);
    assert_non_null(strstr(err, "differ"));
    /* Each field of the key counts on its own. */
    sy_snapshot_key mine, changed;
    snap_key(&lm, &mine);
    changed = mine;
    changed.plugin_version = "99.0.0";
    assert_int_equal(sy_snapshot_key_check(&mine, &changed, err, sizeof err), SY_SNAPSHOT_ERR_KEY);
    assert_non_null(strstr(err, "plugin version differs"));
    changed = mine;
    changed.layout = "kv-q8-v1";
    assert_int_equal(sy_snapshot_key_check(&mine, &changed, err, sizeof err), SY_SNAPSHOT_ERR_KEY);
    assert_non_null(strstr(err, "state layout differs"));
    changed = mine;
    changed.kv_bytes_per_token++;
    assert_int_equal(sy_snapshot_key_check(&mine, &changed, err, sizeof err), SY_SNAPSHOT_ERR_KEY);
    assert_non_null(strstr(err, "kv bytes per token"));
    changed = mine;
    changed.element_size = 4;
    assert_int_equal(sy_snapshot_key_check(&mine, &changed, err, sizeof err), SY_SNAPSHOT_ERR_KEY);
    assert_int_equal(sy_snapshot_key_check(&mine, &mine, err, sizeof err), SY_SNAPSHOT_OK);
    /* Another version of the same plugin (ABI 1.2 state_can_read): the test engine reads its layout from any 0.x
     * build, not from another major, and never another model's or another layout. */
    sy_snapshot_key older = mine;
    older.plugin_version = "0.0.7";
    assert_int_equal(sy_snapshot_model_accepts(&lm, &older, &mine, err, sizeof err), SY_SNAPSHOT_OK);
    older.plugin_version = "1.0.0";
    assert_int_equal(sy_snapshot_model_accepts(&lm, &older, &mine, err, sizeof err), SY_SNAPSHOT_ERR_KEY);
    assert_non_null(strstr(err, "cannot read it"));
    older = mine;
    older.plugin_version = "0.0.7";
    older.layout = "kv-q8-v1";
    assert_int_equal(sy_snapshot_model_accepts(&lm, &older, &mine, err, sizeof err), SY_SNAPSHOT_ERR_KEY);
    older = mine;
    older.plugin_version = "0.0.7";
    older.fingerprint = "another-model";
    assert_int_equal(sy_snapshot_model_accepts(&lm, &older, &mine, err, sizeof err), SY_SNAPSHOT_ERR_KEY);
    assert_non_null(strstr(err, "model fingerprint differs"));
    older = mine;
    older.plugin_version = "0.0.7";
    assert_int_equal(sy_snapshot_key_check(&older, &mine, err, sizeof err), SY_SNAPSHOT_ERR_KEY); /* strict */
    free(g.data);
    sy_loaded_model_close(&rec);
    sy_loaded_model_close(&other);
    sy_loaded_model_close(&lm);
}

/* Rewrite the header checksum after editing the preamble or header (to test what lies behind it). */
static void reseal_header(uint8_t *data, size_t header_end) {
    uint64_t h = XXH64(data, header_end - 8, 0);
    for (int i = 0; i < 8; i++) data[header_end - 8 + i] = (uint8_t)(h >> (8 * i));
}

static void wrong_version_refused(void **state) {
    (void)state;
    sy_loaded_model lm;
    serve_open_model(&env, model_path, NULL, 0, &lm);
    good_file g = good_snapshot(&lm);
    char err[512];
    uint8_t *bad = malloc(g.len);
    memcpy(bad, g.data, g.len);
    bad[8] = 2; /* major 2 */
    reseal_header(bad, g.header_end);
    assert_int_equal(try_bytes(&lm, bad, g.len, err, sizeof err), SY_SNAPSHOT_ERR_VERSION);
    assert_non_null(strstr(err, "format version 2.0"));
    memcpy(bad, g.data, g.len);
    bad[8] = 0; /* major 0 */
    assert_int_equal(try_bytes(&lm, bad, g.len, err, sizeof err), SY_SNAPSHOT_ERR_VERSION);
    /* A newer minor of the same major is read (minors only append). */
    memcpy(bad, g.data, g.len);
    bad[10] = 7;
    reseal_header(bad, g.header_end);
    assert_int_equal(try_bytes(&lm, bad, g.len, err, sizeof err), SY_SNAPSHOT_OK);
    /* A header field out of bounds, even with a valid checksum, is named. */
    memcpy(bad, g.data, g.len);
    bad[16] = 0; /* element size 0 */
    bad[17] = 0;
    reseal_header(bad, g.header_end);
    assert_int_equal(try_bytes(&lm, bad, g.len, err, sizeof err), SY_SNAPSHOT_ERR_FORMAT);
    assert_non_null(strstr(err, "element size 0"));
    memcpy(bad, g.data, g.len);
    bad[16 + 24 + 3] = 0x7f; /* token count 2^30-ish */
    reseal_header(bad, g.header_end);
    assert_int_equal(try_bytes(&lm, bad, g.len, err, sizeof err), SY_SNAPSHOT_ERR_FORMAT);
    assert_non_null(strstr(err, "token count"));
    /* A token id the model does not have (an engine may trust the ids it is handed): named before any restore. */
    memcpy(bad, g.data, g.len);
    bad[g.header_end - 8 - 4 * 10 + 1] = 0x03; /* the 690th token becomes >= 768 */
    reseal_header(bad, g.header_end);
    sy_snapshot *snap = NULL;
    assert_int_equal(sy_snapshot_open_memory(bad, g.len, NULL, &snap, err, sizeof err), SY_SNAPSHOT_OK);
    assert_int_equal(sy_snapshot_check_tokens(snap, lm.info.n_vocab, err, sizeof err), SY_SNAPSHOT_ERR_FORMAT);
    assert_non_null(strstr(err, "at 690 is outside the vocabulary"));
    sy_snapshot_close(snap);
    assert_int_equal(sy_snapshot_open_memory(g.data, g.len, NULL, &snap, err, sizeof err), SY_SNAPSHOT_OK);
    assert_int_equal(sy_snapshot_check_tokens(snap, lm.info.n_vocab, err, sizeof err), SY_SNAPSHOT_OK);
    sy_snapshot_close(snap);
    free(bad);
    free(g.data);
    sy_loaded_model_close(&lm);
}

static void writer_refuses_bad_input(void **state) {
    (void)state;
    sy_loaded_model lm;
    serve_open_model(&env, model_path, NULL, 0, &lm);
    int32_t tokens[40];
    for (int i = 0; i < 40; i++) tokens[i] = i + 40;
    sy_seq *seq = snap_sequence(&lm, tokens, 40);
    sy_snapshot_key key;
    snap_key(&lm, &key);
    char err[512];
    char *path = temp_path("refused.sysnap");
    const sy_engine_state_api *state_api = lm.plugin->engine_state;
    assert_int_equal(sy_snapshot_write_file(path, &key, state_api, lm.model, seq, tokens, 0, NULL, NULL, err,
                                            sizeof err),
                     SY_SNAPSHOT_ERR_ARGUMENT);
    tokens[3] = -5;
    assert_int_equal(sy_snapshot_write_file(path, &key, state_api, lm.model, seq, tokens, 40, NULL, NULL, err,
                                            sizeof err),
                     SY_SNAPSHOT_ERR_ARGUMENT);
    assert_non_null(strstr(err, "negative"));
    tokens[3] = 43;
    sy_snapshot_key bad = key;
    bad.fingerprint = NULL;
    assert_int_equal(sy_snapshot_write_file(path, &bad, state_api, lm.model, seq, tokens, 40, NULL, NULL, err,
                                            sizeof err),
                     SY_SNAPSHOT_ERR_ARGUMENT);
    /* A key that disagrees with the engine's own chunk size is an engine contract problem, caught before writing. */
    bad = key;
    bad.kv_bytes_per_token += 2;
    assert_int_equal(sy_snapshot_write_file(path, &bad, state_api, lm.model, seq, tokens, 40, NULL, NULL, err,
                                            sizeof err),
                     SY_SNAPSHOT_ERR_ENGINE);
    /* More tokens than the sequence holds: the engine refuses, nothing is left behind. */
    int32_t more[41];
    memcpy(more, tokens, sizeof tokens);
    more[40] = 1;
    assert_int_equal(sy_snapshot_write_file(path, &key, state_api, lm.model, seq, more, 41, NULL, NULL, err,
                                            sizeof err),
                     SY_SNAPSHOT_ERR_ENGINE);
    assert_int_equal(access(path, F_OK), -1);
    assert_int_equal(snap_count_entries(env.dir, ".refused"), 0);
    lm.engine->seq_free(lm.model, seq);
    free(path);
    sy_loaded_model_close(&lm);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(shuffle_round_trip),
        cmocka_unit_test(restore_equality),
        cmocka_unit_test(restore_equality_recurrent),
        cmocka_unit_test(restored_state_is_used),
        cmocka_unit_test(prefix_only_restore),
        cmocka_unit_test(prefix_only_restore_recurrent),
        cmocka_unit_test(recurrent_chunk_fallback),
        cmocka_unit_test(codecs_read_back_the_same),
        cmocka_unit_test(truncated_files_refused),
        cmocka_unit_test(bit_flips_refused),
        cmocka_unit_test(wrong_model_refused),
        cmocka_unit_test(wrong_version_refused),
        cmocka_unit_test(writer_refuses_bad_input),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
