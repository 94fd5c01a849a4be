/* The tokenizer cache (plugins/common/tokenizer_cache) and its users:
 *   - the cache itself with a stand-in tokenizer: sharing, reference counts, the bound on unused entries, failed
 *     builds, one build for concurrent acquires of a key;
 *   - the keys: GGUF tokenizer metadata and byte buffers;
 *   - gguf-quant's gq_vocab on the real Qwen3 vocabulary (tests/fixtures/tokenizers/qwen3) written into GGUF
 *     metadata: a second load shares the first one's tokenizer and encodes identically (its load time is
 *     printed next to the cold one), per-model EOS / BOS stay per model, another vocabulary gets its own entry,
 *     concurrent loads from two threads build once; a small SentencePiece vocabulary shares the same way;
 *   - qwen-cpu-mmap's qm_vocab over a tokenizer.json directory: shared, with per-model end-of-generation ids. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <cmocka.h>
#include <zstd.h>

#include "gguf.h"
#include "gguf_builder.h"
#include "gguf_tokenizer_json.h"
#include "gguf_vocab.h"
#include "hf_vocab.h"
#include "tokenizer_bpe.h"
#include "tokenizer_cache.h"
#include "qwen3_fixture.h"

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* ==== the cache with a stand-in tokenizer ==== */

typedef struct fake_tokenizer {
    int id;
} fake_tokenizer;

typedef struct fake_source {
    int id;
    bool fail;
    unsigned build_ms; /* a slow build, so that concurrent acquires overlap it */
} fake_source;

static atomic_int fake_builds, fake_frees;

static void *fake_build(void *ctx, char *err, size_t err_size) {
    const fake_source *src = ctx;
    atomic_fetch_add(&fake_builds, 1);
    if (src->build_ms) {
        struct timespec ts = {0, (long)src->build_ms * 1000000L};
        nanosleep(&ts, NULL);
    }
    if (src->fail) {
        snprintf(err, err_size, "fake tokenizer %d refused", src->id);
        return NULL;
    }
    fake_tokenizer *t = malloc(sizeof *t);
    if (t) t->id = src->id;
    return t;
}

static void fake_free(void *t) {
    atomic_fetch_add(&fake_frees, 1);
    free(t);
}

/* Same object layout, another kind: entries must not mix kinds with equal keys. */
static void other_free(void *t) { fake_free(t); }

static sy_tok_key fake_key(int id) { return sy_tok_key_bytes("test fake", &id, sizeof id); }

/* Acquires the fake tokenizer `id`: returns the reference, *hit tells whether it was shared. */
static sy_tok_ref *fake_acquire(sy_tok_cache *c, int id, bool *hit) {
    fake_source src = {.id = id};
    sy_tok_key key = fake_key(id);
    char err[128];
    sy_tok_ref *r = sy_tok_cache_acquire(c, &key, fake_build, fake_free, &src, hit, err, sizeof err);
    assert_non_null(r);
    assert_int_equal(((fake_tokenizer *)sy_tok_ref_get(r))->id, id);
    return r;
}

static void reset_counters(void) {
    atomic_store(&fake_builds, 0);
    atomic_store(&fake_frees, 0);
}

static void test_cache_shares_and_counts_references(void **state) {
    (void)state;
    reset_counters();
    sy_tok_cache *c = sy_tok_cache_new(2);
    assert_non_null(c);
    bool hit;
    sy_tok_ref *a = fake_acquire(c, 1, &hit);
    assert_false(hit);
    sy_tok_ref *b = fake_acquire(c, 1, &hit);
    assert_true(hit);
    void *shared = sy_tok_ref_get(a);
    assert_ptr_equal(sy_tok_ref_get(b), shared);
    assert_int_equal(atomic_load(&fake_builds), 1);
    sy_tok_cache_stats s = sy_tok_cache_get_stats(c);
    assert_int_equal(s.entries, 1);
    assert_int_equal(s.unused, 0);
    assert_int_equal(s.builds, 1);
    assert_int_equal(s.hits, 1);

    sy_tok_cache_release(a);
    assert_int_equal(sy_tok_cache_get_stats(c).unused, 0); /* b still holds it */
    sy_tok_cache_release(b);
    s = sy_tok_cache_get_stats(c);
    assert_int_equal(s.entries, 1); /* kept after its last holder let go */
    assert_int_equal(s.unused, 1);
    assert_int_equal(atomic_load(&fake_frees), 0);

    /* a later load finds the same object */
    sy_tok_ref *again = fake_acquire(c, 1, &hit);
    assert_true(hit);
    assert_ptr_equal(sy_tok_ref_get(again), shared);
    assert_int_equal(atomic_load(&fake_builds), 1);

    /* another key, and the same key with another kind of object, are other entries */
    sy_tok_ref *other = fake_acquire(c, 2, &hit);
    assert_false(hit);
    assert_ptr_not_equal(sy_tok_ref_get(other), shared);
    fake_source src = {.id = 1};
    sy_tok_key k1 = fake_key(1);
    sy_tok_ref *other_kind = sy_tok_cache_acquire(c, &k1, fake_build, other_free, &src, &hit, NULL, 0);
    assert_non_null(other_kind);
    assert_false(hit);
    assert_ptr_not_equal(sy_tok_ref_get(other_kind), shared);
    assert_int_equal(atomic_load(&fake_builds), 3);

    sy_tok_cache_release(again);
    sy_tok_cache_release(other);
    sy_tok_cache_release(other_kind);
    sy_tok_cache_release(NULL);
    assert_int_equal(sy_tok_cache_get_stats(c).unused, 2); /* the bound: the oldest of three went */
    assert_int_equal(atomic_load(&fake_frees), 1);
    sy_tok_cache_free(c);
    assert_int_equal(atomic_load(&fake_frees), 3);
}

static void test_cache_bounds_unused_entries(void **state) {
    (void)state;
    reset_counters();
    sy_tok_cache *c = sy_tok_cache_new(2);
    bool hit;
    /* load and unload five vocabularies in turn: at most two stay, the two most recently used */
    for (int id = 0; id < 5; id++) {
        sy_tok_cache_release(fake_acquire(c, id, &hit));
        sy_tok_cache_stats s = sy_tok_cache_get_stats(c);
        assert_true(s.unused <= 2);
        assert_int_equal(s.entries, s.unused);
    }
    assert_int_equal(atomic_load(&fake_frees), 3);
    sy_tok_cache_release(fake_acquire(c, 4, &hit));
    assert_true(hit);
    sy_tok_cache_release(fake_acquire(c, 3, &hit));
    assert_true(hit);
    sy_tok_cache_release(fake_acquire(c, 0, &hit));
    assert_false(hit); /* evicted, built again; 4 is now the oldest unused and went */
    sy_tok_cache_release(fake_acquire(c, 4, &hit));
    assert_false(hit);

    /* entries in use are never evicted, whatever the bound */
    sy_tok_ref *held[5];
    for (int id = 10; id < 15; id++) held[id - 10] = fake_acquire(c, id, &hit);
    sy_tok_cache_stats s = sy_tok_cache_get_stats(c);
    assert_int_equal(s.entries, 7);
    assert_int_equal(s.unused, 2);
    for (int i = 0; i < 5; i++) sy_tok_cache_release(held[i]);
    s = sy_tok_cache_get_stats(c);
    assert_int_equal(s.entries, 2);
    sy_tok_cache_release(fake_acquire(c, 14, &hit));
    assert_true(hit);
    sy_tok_cache_release(fake_acquire(c, 13, &hit));
    assert_true(hit);

    /* a tighter bound applies at once; dropping frees every unused entry */
    sy_tok_cache_set_keep(c, 1);
    assert_int_equal(sy_tok_cache_get_stats(c).entries, 1);
    sy_tok_ref *r = fake_acquire(c, 13, &hit);
    assert_true(hit);
    sy_tok_cache_drop_unused(c);
    assert_int_equal(sy_tok_cache_get_stats(c).entries, 1); /* held */
    sy_tok_cache_release(r);
    sy_tok_cache_drop_unused(c);
    assert_int_equal(sy_tok_cache_get_stats(c).entries, 0);
    assert_int_equal(atomic_load(&fake_frees), atomic_load(&fake_builds));
    sy_tok_cache_free(c);
}

static void test_cache_failed_build_is_not_kept(void **state) {
    (void)state;
    reset_counters();
    sy_tok_cache *c = sy_tok_cache_new(2);
    fake_source bad = {.id = 7, .fail = true};
    sy_tok_key key = fake_key(7);
    char err[128] = "";
    bool hit = true;
    assert_null(sy_tok_cache_acquire(c, &key, fake_build, fake_free, &bad, &hit, err, sizeof err));
    assert_false(hit);
    assert_string_equal(err, "fake tokenizer 7 refused");
    assert_int_equal(sy_tok_cache_get_stats(c).entries, 0);
    /* the next load tries again */
    fake_source good = {.id = 7};
    sy_tok_ref *r = sy_tok_cache_acquire(c, &key, fake_build, fake_free, &good, &hit, err, sizeof err);
    assert_non_null(r);
    assert_false(hit);
    assert_int_equal(atomic_load(&fake_builds), 2);
    sy_tok_cache_release(r);
    sy_tok_cache_free(c);
    assert_int_equal(atomic_load(&fake_frees), 1);
}

typedef struct racer {
    sy_tok_cache *cache;
    pthread_barrier_t *start;
    fake_source src;
    sy_tok_ref *ref;
    bool hit;
} racer;

static void *race_acquire(void *arg) {
    racer *r = arg;
    sy_tok_key key = fake_key(r->src.id);
    pthread_barrier_wait(r->start);
    r->ref = sy_tok_cache_acquire(r->cache, &key, fake_build, fake_free, &r->src, &r->hit, NULL, 0);
    return NULL;
}

static void test_cache_concurrent_acquires_build_once(void **state) {
    (void)state;
    reset_counters();
    enum { N = 4 };
    sy_tok_cache *c = sy_tok_cache_new(2);
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, N);
    racer r[N];
    pthread_t th[N];
    for (int i = 0; i < N; i++) {
        r[i] = (racer){.cache = c, .start = &start, .src = {.id = 42, .build_ms = 50}};
        assert_int_equal(pthread_create(&th[i], NULL, race_acquire, &r[i]), 0);
    }
    int hits = 0;
    for (int i = 0; i < N; i++) {
        pthread_join(th[i], NULL);
        assert_non_null(r[i].ref);
        assert_ptr_equal(sy_tok_ref_get(r[i].ref), sy_tok_ref_get(r[0].ref));
        hits += r[i].hit;
    }
    assert_int_equal(atomic_load(&fake_builds), 1);
    assert_int_equal(hits, N - 1);
    for (int i = 0; i < N; i++) sy_tok_cache_release(r[i].ref);
    assert_int_equal(sy_tok_cache_get_stats(c).unused, 1);
    pthread_barrier_destroy(&start);
    sy_tok_cache_free(c);
    assert_int_equal(atomic_load(&fake_frees), 1);
}

/* ==== keys ==== */

/* A small BPE vocabulary's metadata; `name` goes to general.name (not a tokenizer key), `mid_token` replaces
 * token 2, `eos` is tokenizer.ggml.eos_token_id. */
static void small_bpe_gguf(gguf_buf *b, const char *name, const char *mid_token, uint32_t eos) {
    gb_header(b, 3, 0, 7);
    gb_kv_str(b, "general.name", name);
    gb_kv_str(b, "tokenizer.ggml.model", "gpt2");
    gb_kv_str(b, "tokenizer.ggml.pre", "qwen2");
    const char *tokens[] = {"a", "b", mid_token, "ab", "abc"};
    gb_kv_array(b, "tokenizer.ggml.tokens", 8, 5);
    for (int i = 0; i < 5; i++) gb_str(b, tokens[i]);
    gb_kv_array(b, "tokenizer.ggml.token_type", 5, 5);
    for (int i = 0; i < 5; i++) gb_i32(b, 1);
    gb_kv_array(b, "tokenizer.ggml.merges", 8, 2);
    gb_str(b, "a b");
    gb_str(b, "ab c");
    gb_kv_u32(b, "tokenizer.ggml.eos_token_id", eos);
}

static sy_tok_key gguf_key(const gguf_buf *b, const char *const *skip, size_t n_skip) {
    char err[256];
    sy_gguf *g = sy_gguf_open_memory(b->data, b->size, err, sizeof err);
    if (g == NULL) fail_msg("%s", err);
    sy_tok_key k;
    assert_true(sy_tok_key_gguf(g, "test", skip, n_skip, &k));
    sy_gguf_close(g);
    return k;
}

static bool same_key(sy_tok_key a, sy_tok_key b) { return a.lo == b.lo && a.hi == b.hi; }

static void test_keys(void **state) {
    (void)state;
    static const char *const skip_eos[] = {"tokenizer.ggml.eos_token_id"};
    gguf_buf a = {0}, b = {0}, c = {0}, d = {0}, e = {0};
    small_bpe_gguf(&a, "model a", "c", 4);
    small_bpe_gguf(&b, "model b, another name", "c", 4); /* other metadata, other offsets */
    small_bpe_gguf(&c, "model a", "d", 4);               /* one token differs, same length */
    small_bpe_gguf(&d, "model a", "c", 3);               /* another EOS */
    small_bpe_gguf(&e, "model a", "cc", 4);              /* one token one byte longer */
    sy_tok_key ka = gguf_key(&a, NULL, 0);
    assert_true(same_key(ka, gguf_key(&b, NULL, 0)));
    assert_false(same_key(ka, gguf_key(&c, NULL, 0)));
    assert_false(same_key(ka, gguf_key(&d, NULL, 0)));
    assert_false(same_key(ka, gguf_key(&e, NULL, 0)));
    assert_true(same_key(gguf_key(&a, skip_eos, 1), gguf_key(&d, skip_eos, 1)));
    /* token_type values count */
    gb_free(&c);
    small_bpe_gguf(&c, "model a", "c", 4);
    size_t types_at = 0;
    for (size_t i = 0; i + 25 < c.size; i++)
        if (memcmp(c.data + i, "tokenizer.ggml.token_type", 25) == 0) types_at = i + 25 + 4 + 4 + 8;
    assert_true(types_at > 0);
    c.data[types_at + 4 * 2] = 4; /* token 2 becomes user-defined */
    assert_false(same_key(ka, gguf_key(&c, NULL, 0)));
    /* the domain separates kinds */
    assert_false(same_key(sy_tok_key_bytes("x", "abc", 3), sy_tok_key_bytes("y", "abc", 3)));
    assert_true(same_key(sy_tok_key_bytes("x", "abc", 3), sy_tok_key_bytes("x", "abc", 3)));
    assert_false(same_key(sy_tok_key_bytes("x", "abc", 3), sy_tok_key_bytes("x", "abd", 3)));
    gb_free(&a);
    gb_free(&b);
    gb_free(&c);
    gb_free(&d);
    gb_free(&e);
}

/* ==== gguf-quant's vocabulary on the Qwen3 tokenizer ==== */

/* What differs between the GGUF files of one vocabulary. */
typedef struct variant {
    const char *name; /* general.name */
    const char *pre;
    uint32_t eos;
    bool add_bos;
} variant;

/* tokenizer.json -> GGUF metadata (no tensors), as GGUF converters store it. */
static void qwen_gguf(gguf_buf *b, const cJSON *tj, variant v) {
    gb_header(b, 3, 0, 10);
    gb_kv_str(b, "general.name", v.name);
    gb_tokenizer_json_kvs(b, tj, v.pre);
    gb_kv_u32(b, "tokenizer.ggml.bos_token_id", 151643);
    gb_kv_u32(b, "tokenizer.ggml.eos_token_id", v.eos);
    gb_kv_bool(b, "tokenizer.ggml.add_bos_token", v.add_bos);
    gb_kv_str(b, "tokenizer.chat_template", v.name); /* not a tokenizer.ggml key: ignored by the key */
}

typedef struct qwen_fixture {
    cJSON *tokenizer_json;
    char *json_text;
    size_t json_len;
    gguf_buf a, a_copy, instruct, gpt2_pre;
} qwen_fixture;

static qwen_fixture qf;

static const variant VARIANT_A = {"qwen a", "qwen2", 151645, false};
/* a "fine-tune": another name, another EOS, BOS added; same vocabulary */
static const variant VARIANT_INSTRUCT = {"qwen instruct", "qwen2", 151643, true};
/* another tokenizer: the same lists with GPT-2's pre-tokenizer */
static const variant VARIANT_GPT2_PRE = {"qwen a", "gpt-2", 151645, false};

static int setup_qwen(void **state) {
    (void)state;
    qf.json_text = qwen3_fixture_read_zst("tokenizer.json.zst", &qf.json_len);
    if (qf.json_text == NULL) return -1;
    qf.tokenizer_json = cJSON_Parse(qf.json_text);
    if (qf.tokenizer_json == NULL) return -1;
    qwen_gguf(&qf.a, qf.tokenizer_json, VARIANT_A);
    qwen_gguf(&qf.a_copy, qf.tokenizer_json, VARIANT_A);
    qwen_gguf(&qf.instruct, qf.tokenizer_json, VARIANT_INSTRUCT);
    qwen_gguf(&qf.gpt2_pre, qf.tokenizer_json, VARIANT_GPT2_PRE);
    return 0;
}

static int teardown_qwen(void **state) {
    (void)state;
    cJSON_Delete(qf.tokenizer_json);
    free(qf.json_text);
    gb_free(&qf.a);
    gb_free(&qf.a_copy);
    gb_free(&qf.instruct);
    gb_free(&qf.gpt2_pre);
    sy_tok_cache_drop_unused(sy_tok_cache_default());
    return 0;
}

typedef struct loaded {
    sy_gguf *gguf;
    gq_vocab *vocab;
} loaded;

static double last_vocab_ms; /* time of the last load's gq_vocab_from_gguf */

static loaded load(const gguf_buf *b) {
    char err[256];
    loaded l = {0};
    l.gguf = sy_gguf_open_memory(b->data, b->size, err, sizeof err);
    if (l.gguf == NULL) fail_msg("%s", err);
    sy_status st;
    double t0 = now_ms();
    l.vocab = gq_vocab_from_gguf(l.gguf, &st, err, sizeof err);
    last_vocab_ms = now_ms() - t0;
    if (l.vocab == NULL) fail_msg("%s", err);
    return l;
}

static void unload(loaded *l) {
    gq_vocab_free(l->vocab);
    sy_gguf_close(l->gguf);
}

static const char *const TEXTS[] = {
    "Hello world, this is a test.",
    "<|im_start|>user\nWhat is 12345 + 678?<|im_end|>\n",
    "  leading spaces and unicode: café, naïve, 日本語のテキスト, emoji 🙂🙂",
    "def f(x):\n    return x ** 2  # squares\n",
    "",
};
#define N_TEXTS (sizeof TEXTS / sizeof TEXTS[0])

/* ids of a text, into out (capacity 512); returns the count. */
static size_t encode(const gq_vocab *v, const char *text, uint32_t flags, int32_t *out) {
    size_t n = 0;
    char err[256];
    sy_status st = gq_vocab_tokenize(v, text, strlen(text), flags, out, 512, &n, err, sizeof err);
    if (st != SY_OK) fail_msg("tokenize: %s", err);
    return n;
}

static void assert_same_encodings(const gq_vocab *x, const gq_vocab *y) {
    int32_t ix[512], iy[512];
    for (size_t i = 0; i < N_TEXTS; i++) {
        size_t nx = encode(x, TEXTS[i], SY_TOKENIZE_PARSE_SPECIAL, ix);
        size_t ny = encode(y, TEXTS[i], SY_TOKENIZE_PARSE_SPECIAL, iy);
        assert_int_equal(nx, ny);
        assert_memory_equal(ix, iy, nx * sizeof *ix);
    }
}

static void test_gguf_second_load_shares(void **state) {
    (void)state;
    sy_tok_cache *cache = sy_tok_cache_default();
    sy_tok_cache_drop_unused(cache);
    sy_tok_cache_stats before = sy_tok_cache_get_stats(cache);

    loaded a = load(&qf.a);
    double cold = last_vocab_ms;
    loaded again = load(&qf.a_copy); /* another file with the same contents */
    fprintf(stderr, "qwen3 vocabulary (151669 tokens) from GGUF metadata: cold %.1f ms, second load %.2f ms\n", cold,
            last_vocab_ms);
    sy_tok_cache_stats s = sy_tok_cache_get_stats(cache);
    assert_int_equal(s.builds - before.builds, 1);
    assert_int_equal(s.hits - before.hits, 1);
    assert_int_equal(s.entries, 1);
    assert_same_encodings(a.vocab, again.vocab);

    /* unloaded and loaded again: still cached */
    unload(&again);
    assert_int_equal(sy_tok_cache_get_stats(cache).entries, 1);
    unload(&a);
    s = sy_tok_cache_get_stats(cache);
    assert_int_equal(s.entries, 1);
    assert_int_equal(s.unused, 1);
    a = load(&qf.a);
    fprintf(stderr, "after unloading every model of the vocabulary: %.2f ms\n", last_vocab_ms);
    assert_int_equal(sy_tok_cache_get_stats(cache).builds - before.builds, 1);

    /* the tokenizer matches one that bypassed the cache: sy_bpe_load_json over the fixture's tokenizer.json */
    char err[256];
    sy_bpe *direct = sy_bpe_load_json_buffer(qf.json_text, qf.json_len, err, sizeof err);
    if (direct == NULL) fail_msg("%s", err);
    int32_t ids[512];
    for (size_t i = 0; i < N_TEXTS; i++) {
        sy_bpe_ids want = {0};
        assert_true(sy_bpe_tokenize(direct, TEXTS[i], strlen(TEXTS[i]), SY_TOKENIZE_PARSE_SPECIAL, &want, err,
                                    sizeof err));
        size_t n = encode(a.vocab, TEXTS[i], SY_TOKENIZE_PARSE_SPECIAL, ids);
        assert_int_equal(n, want.n);
        assert_memory_equal(ids, want.ids, n * sizeof *ids);
        sy_bpe_ids_free(&want);
    }
    sy_bpe_free(direct);
    unload(&a);
}

static void test_gguf_fine_tune_keeps_its_own_specials(void **state) {
    (void)state;
    sy_tok_cache *cache = sy_tok_cache_default();
    sy_tok_cache_stats before = sy_tok_cache_get_stats(cache);
    loaded base = load(&qf.a);
    loaded instruct = load(&qf.instruct);
    sy_tok_cache_stats s = sy_tok_cache_get_stats(cache);
    assert_int_equal(s.entries, 1); /* one tokenizer for both */
    assert_true(s.builds - before.builds <= 1);
    assert_same_encodings(base.vocab, instruct.vocab);

    /* EOS: <|im_end|> ends generation for one, <|endoftext|> for the other */
    assert_true(gq_vocab_token_flags(base.vocab, 151645) & SY_TOKEN_END_OF_GENERATION);
    assert_false(gq_vocab_token_flags(base.vocab, 151643) & SY_TOKEN_END_OF_GENERATION);
    assert_true(gq_vocab_token_flags(instruct.vocab, 151643) & SY_TOKEN_END_OF_GENERATION);
    assert_false(gq_vocab_token_flags(instruct.vocab, 151645) & SY_TOKEN_END_OF_GENERATION);
    assert_true(gq_vocab_token_flags(instruct.vocab, 151645) & SY_TOKEN_CONTROL);
    assert_int_equal(gq_vocab_eos(base.vocab), 151645);
    assert_int_equal(gq_vocab_eos(instruct.vocab), 151643);

    /* BOS is added for the one that asks for it */
    int32_t ids[512], plain[512];
    size_t n_plain = encode(base.vocab, "Hi there", SY_TOKENIZE_ADD_SPECIAL, plain);
    size_t n = encode(instruct.vocab, "Hi there", SY_TOKENIZE_ADD_SPECIAL, ids);
    assert_false(gq_vocab_add_bos(base.vocab));
    assert_true(gq_vocab_add_bos(instruct.vocab));
    assert_int_equal(n, n_plain + 1);
    assert_int_equal(ids[0], 151643);
    assert_memory_equal(ids + 1, plain, n_plain * sizeof *ids);
    assert_int_equal(encode(instruct.vocab, "Hi there", 0, ids), n_plain); /* only with ADD_SPECIAL */
    unload(&base);
    unload(&instruct);
}

static void test_gguf_other_vocabulary_gets_its_own(void **state) {
    (void)state;
    sy_tok_cache *cache = sy_tok_cache_default();
    loaded a = load(&qf.a);
    sy_tok_cache_stats before = sy_tok_cache_get_stats(cache);
    loaded gpt2 = load(&qf.gpt2_pre);
    sy_tok_cache_stats s = sy_tok_cache_get_stats(cache);
    assert_int_equal(s.builds - before.builds, 1);
    assert_int_equal(s.entries, 2);
    /* Qwen's pre-tokenizer keeps a run of newlines together ("\n\n" is one token), GPT-2's splits it */
    int32_t x[512], y[512];
    size_t nx = encode(a.vocab, "Hello\n\nworld", 0, x), ny = encode(gpt2.vocab, "Hello\n\nworld", 0, y);
    assert_int_equal(nx, 3);
    assert_int_equal(ny, 4);
    unload(&a);
    unload(&gpt2);
    /* both stay cached (the default bound keeps two unused) */
    s = sy_tok_cache_get_stats(cache);
    assert_int_equal(s.entries, 2);
    assert_int_equal(s.unused, 2);
}

typedef struct loader {
    pthread_barrier_t *start;
    const gguf_buf *file;
    int32_t ids[N_TEXTS][512];
    size_t n[N_TEXTS];
    bool ok;
} loader;

static void *load_and_encode(void *arg) {
    loader *l = arg;
    char err[256];
    pthread_barrier_wait(l->start);
    sy_gguf *g = sy_gguf_open_memory(l->file->data, l->file->size, err, sizeof err);
    sy_status st;
    gq_vocab *v = g ? gq_vocab_from_gguf(g, &st, err, sizeof err) : NULL;
    l->ok = v != NULL;
    /* both threads encode through the one shared tokenizer at the same time (its word cache is locked) */
    for (int round = 0; l->ok && round < 20; round++)
        for (size_t i = 0; l->ok && i < N_TEXTS; i++)
            l->ok = gq_vocab_tokenize(v, TEXTS[i], strlen(TEXTS[i]), SY_TOKENIZE_PARSE_SPECIAL, l->ids[i], 512,
                                      &l->n[i], err, sizeof err) == SY_OK;
    gq_vocab_free(v);
    sy_gguf_close(g);
    return NULL;
}

static void test_gguf_concurrent_loads(void **state) {
    (void)state;
    sy_tok_cache *cache = sy_tok_cache_default();
    sy_tok_cache_drop_unused(cache); /* so that both threads race on the build */
    sy_tok_cache_stats before = sy_tok_cache_get_stats(cache);
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, 2);
    static loader l[2];
    l[0] = (loader){.start = &start, .file = &qf.a};
    l[1] = (loader){.start = &start, .file = &qf.a_copy};
    pthread_t th[2];
    for (int i = 0; i < 2; i++) assert_int_equal(pthread_create(&th[i], NULL, load_and_encode, &l[i]), 0);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    pthread_barrier_destroy(&start);
    assert_true(l[0].ok);
    assert_true(l[1].ok);
    sy_tok_cache_stats s = sy_tok_cache_get_stats(cache);
    assert_int_equal(s.builds - before.builds, 1);
    assert_int_equal(s.hits - before.hits, 1);
    assert_int_equal(s.entries, 1);
    assert_int_equal(s.unused, 1);
    /* same ids in both threads, and the same as a load on this thread */
    loaded ref = load(&qf.a);
    int32_t ids[512];
    for (size_t i = 0; i < N_TEXTS; i++) {
        size_t n = encode(ref.vocab, TEXTS[i], SY_TOKENIZE_PARSE_SPECIAL, ids);
        for (int t = 0; t < 2; t++) {
            assert_int_equal(l[t].n[i], n);
            assert_memory_equal(l[t].ids[i], ids, n * sizeof *ids);
        }
    }
    unload(&ref);
}

/* ---- SentencePiece ---- */

static void small_spm_gguf(gguf_buf *b, const char *name, uint32_t eos) {
    /* "\342\226\201" is U+2581, SentencePiece's space */
    const char *tokens[] = {"<unk>", "<s>", "</s>", "\342\226\201", "a", "b", "\342\226\201a", "ab"};
    const int32_t types[] = {2, 3, 3, 1, 1, 1, 1, 1};
    gb_header(b, 3, 0, 6);
    gb_kv_str(b, "general.name", name);
    gb_kv_str(b, "tokenizer.ggml.model", "llama");
    gb_kv_array(b, "tokenizer.ggml.tokens", 8, 8);
    for (int i = 0; i < 8; i++) gb_str(b, tokens[i]);
    gb_kv_array(b, "tokenizer.ggml.scores", 6, 8);
    for (int i = 0; i < 8; i++) gb_f32(b, (float)-i);
    gb_kv_array(b, "tokenizer.ggml.token_type", 5, 8);
    for (int i = 0; i < 8; i++) gb_i32(b, types[i]);
    gb_kv_u32(b, "tokenizer.ggml.eos_token_id", eos);
}

static void test_gguf_spm_shares(void **state) {
    (void)state;
    sy_tok_cache *cache = sy_tok_cache_default();
    gguf_buf x = {0}, y = {0}, z = {0};
    small_spm_gguf(&x, "tiny", 2);
    small_spm_gguf(&y, "tiny, again", 2);
    small_spm_gguf(&z, "tiny", 1); /* SentencePiece keeps its specials inside: another entry */
    sy_tok_cache_stats before = sy_tok_cache_get_stats(cache);
    loaded lx = load(&x), ly = load(&y);
    sy_tok_cache_stats s = sy_tok_cache_get_stats(cache);
    assert_int_equal(s.builds - before.builds, 1);
    assert_int_equal(s.hits - before.hits, 1);
    assert_string_equal(gq_vocab_kind(ly.vocab), "spm");
    int32_t ix[512], iy[512];
    size_t nx = encode(lx.vocab, "ab a", SY_TOKENIZE_ADD_SPECIAL, ix);
    size_t ny = encode(ly.vocab, "ab a", SY_TOKENIZE_ADD_SPECIAL, iy);
    assert_int_equal(nx, ny);
    assert_true(nx >= 2);
    assert_int_equal(ix[0], 1); /* BOS */
    assert_memory_equal(ix, iy, nx * sizeof *ix);
    loaded lz = load(&z);
    assert_int_equal(sy_tok_cache_get_stats(cache).builds - before.builds, 2);
    assert_true(gq_vocab_token_flags(lx.vocab, 2) & SY_TOKEN_END_OF_GENERATION);
    assert_true(gq_vocab_token_flags(lz.vocab, 1) & SY_TOKEN_END_OF_GENERATION);
    unload(&lx);
    unload(&ly);
    unload(&lz);
    gb_free(&x);
    gb_free(&y);
    gb_free(&z);
}

/* ==== qwen-cpu-mmap's vocabulary over tokenizer.json ==== */

static char *write_dir(const char *json, size_t len) {
    char tmpl[] = "/tmp/sy-tokcache-XXXXXX";
    char *dir = mkdtemp(tmpl);
    assert_non_null(dir);
    dir = strdup(dir);
    char path[512];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(json, 1, len, f), len);
    fclose(f);
    return dir;
}

static void remove_dir(char *dir) {
    char path[512];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    unlink(path);
    rmdir(dir);
    free(dir);
}

static qm_vocab *hf_load(const char *dir, int64_t eos, qm_vocab_facts *facts) {
    sy_hf_config cfg;
    sy_hf_generation_config gen;
    memset(&cfg, 0, sizeof cfg);
    memset(&gen, 0, sizeof gen);
    cfg.vocab_size = 151936;
    cfg.bos_token_id = cfg.pad_token_id = SY_HF_NO_TOKEN;
    gen.bos_token_id = gen.pad_token_id = SY_HF_NO_TOKEN;
    cfg.n_eos = 1;
    cfg.eos_token_ids[0] = eos;
    sy_status st;
    char err[512];
    qm_vocab *v = qm_vocab_load(dir, &cfg, &gen, facts, &st, err, sizeof err);
    if (v == NULL) fail_msg("%s", err);
    return v;
}

static void test_hf_vocab_shares(void **state) {
    (void)state;
    sy_tok_cache *cache = sy_tok_cache_default();
    char *d1 = write_dir(qf.json_text, qf.json_len), *d2 = write_dir(qf.json_text, qf.json_len);
    sy_tok_cache_stats before = sy_tok_cache_get_stats(cache);
    qm_vocab_facts f1, f2;
    double t0 = now_ms();
    qm_vocab *v1 = hf_load(d1, 151645, &f1);
    double t1 = now_ms();
    qm_vocab *v2 = hf_load(d2, 151643, &f2);
    double t2 = now_ms();
    fprintf(stderr, "qwen3 tokenizer.json: cold load %.1f ms, second load %.2f ms\n", t1 - t0, t2 - t1);
    sy_tok_cache_stats s = sy_tok_cache_get_stats(cache);
    assert_int_equal(s.builds - before.builds, 1);
    assert_int_equal(s.hits - before.hits, 1);

    int32_t x[512], y[512];
    for (size_t i = 0; i < N_TEXTS; i++) {
        size_t nx = 0, ny = 0;
        char err[256];
        assert_int_equal(qm_vocab_ops.tokenize(v1, TEXTS[i], strlen(TEXTS[i]), SY_TOKENIZE_PARSE_SPECIAL, x, 512,
                                               &nx, err, sizeof err),
                         SY_OK);
        assert_int_equal(qm_vocab_ops.tokenize(v2, TEXTS[i], strlen(TEXTS[i]), SY_TOKENIZE_PARSE_SPECIAL, y, 512,
                                               &ny, err, sizeof err),
                         SY_OK);
        assert_int_equal(nx, ny);
        assert_memory_equal(x, y, nx * sizeof *x);
    }
    /* each checkpoint's config decides what ends generation */
    assert_true(qm_vocab_ops.token_flags(v1, 151645) & SY_TOKEN_END_OF_GENERATION);
    assert_false(qm_vocab_ops.token_flags(v1, 151643) & SY_TOKEN_END_OF_GENERATION);
    assert_true(qm_vocab_ops.token_flags(v2, 151643) & SY_TOKEN_END_OF_GENERATION);
    assert_false(qm_vocab_ops.token_flags(v2, 151645) & SY_TOKEN_END_OF_GENERATION);
    assert_int_equal(qm_vocab_ops.token_flags(v2, 151700), SY_TOKEN_UNUSED); /* embedding padding */

    /* a tokenizer.json whose bytes differ (here only in layout: a space became a tab) is built on its own */
    char *changed = malloc(qf.json_len);
    assert_non_null(changed);
    memcpy(changed, qf.json_text, qf.json_len);
    char *at = strstr(changed, "\"version\": ");
    assert_non_null(at);
    at[10] = '\t';
    char *d3 = write_dir(changed, qf.json_len);
    sy_tok_cache_stats mid = sy_tok_cache_get_stats(cache);
    qm_vocab_facts f3;
    qm_vocab *v3 = hf_load(d3, 151645, &f3);
    s = sy_tok_cache_get_stats(cache);
    assert_int_equal(s.hits, mid.hits);
    assert_int_equal(s.builds - mid.builds, 1);
    qm_vocab_ops.free(v3);
    free(changed);
    free(f1.chat_template);
    free(f2.chat_template);
    free(f3.chat_template);
    qm_vocab_ops.free(v1);
    qm_vocab_ops.free(v2);
    remove_dir(d1);
    remove_dir(d2);
    remove_dir(d3);
    sy_tok_cache_drop_unused(cache);
    assert_int_equal(sy_tok_cache_get_stats(cache).entries, 0);
}

int main(void) {
    const struct CMUnitTest cache[] = {
        cmocka_unit_test(test_cache_shares_and_counts_references),
        cmocka_unit_test(test_cache_bounds_unused_entries),
        cmocka_unit_test(test_cache_failed_build_is_not_kept),
        cmocka_unit_test(test_cache_concurrent_acquires_build_once),
        cmocka_unit_test(test_keys),
    };
    const struct CMUnitTest vocabularies[] = {
        cmocka_unit_test(test_gguf_second_load_shares),
        cmocka_unit_test(test_gguf_fine_tune_keeps_its_own_specials),
        cmocka_unit_test(test_gguf_other_vocabulary_gets_its_own),
        cmocka_unit_test(test_gguf_concurrent_loads),
        cmocka_unit_test(test_gguf_spm_shares),
        cmocka_unit_test(test_hf_vocab_shares),
    };
    int failed = cmocka_run_group_tests_name("tokenizer cache", cache, NULL, NULL);
    failed += cmocka_run_group_tests_name("tokenizer cache users (qwen3 vocabulary)", vocabularies, setup_qwen,
                                          teardown_qwen);
    return failed;
}
