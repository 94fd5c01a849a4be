/* The GBNF engine: the llama.cpp example grammars compile, random generation through token masks (a byte
 * vocabulary and the Qwen3 vocabulary) yields text the engine accepts again byte by byte and that ends only where
 * the grammar is complete; masks agree with per-token checks; the syntax features; partial UTF-8; token
 * references; lazy triggers; the pathological grammars fail with a message naming the rule. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "grammar_test_util.h"

static const char *const fixtures[] = {"arithmetic", "c", "chess", "english", "japanese", "json", "json_arr", "list"};
#define N_FIXTURES (sizeof fixtures / sizeof fixtures[0])

static gt_vocab *bytes_v, *qwen_v;

static char *fixture_text(const char *name) {
    char rel[256], path[1024];
    snprintf(rel, sizeof rel, "tests/fixtures/grammars/%s.gbnf", name);
    gt_source_path(path, sizeof path, rel);
    char *t = gt_read_file(path, NULL);
    if (t == NULL) fail_msg("cannot read %s", path);
    return t;
}

static sy_grammar *compile_ok(const char *text) {
    char err[256] = "";
    sy_grammar *g = sy_grammar_compile(text, strlen(text), NULL, err, sizeof err);
    if (g == NULL) fail_msg("compile failed: %s\n--\n%s", err, text);
    return g;
}

/* Compiling must fail with a message containing `want`. */
static void compile_fails(const char *text, const char *want) {
    char err[256] = "";
    sy_grammar *g = sy_grammar_compile(text, strlen(text), NULL, err, sizeof err);
    if (g != NULL) fail_msg("compiled, expected an error with \"%s\":\n%s", want, text);
    if (strstr(err, want) == NULL) fail_msg("error \"%s\" lacks \"%s\"", err, want);
}

static sy_grammar_state *state_of(sy_grammar *g, const gt_vocab *v) {
    char err[256] = "";
    sy_grammar_state *st = sy_grammar_state_create(g, v->v, NULL, err, sizeof err);
    if (st == NULL) fail_msg("state: %s", err);
    return st;
}

/* Whole-text verdict: accepted and complete. */
static bool text_matches(sy_grammar *g, const char *text, size_t len) {
    sy_grammar_state *st = state_of(g, bytes_v);
    bool ok = sy_grammar_state_accept_bytes(st, (const uint8_t *)text, len) == 0 && sy_grammar_state_can_end(st);
    sy_grammar_state_free(st);
    return ok;
}

static int setup(void **state) {
    (void)state;
    bytes_v = gt_byte_vocab();
    qwen_v = gt_qwen3_vocab();
    return bytes_v && qwen_v ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    gt_vocab_free(bytes_v);
    gt_vocab_free(qwen_v);
    return 0;
}

static void fixtures_compile(void **state) {
    (void)state;
    for (size_t i = 0; i < N_FIXTURES; i++) {
        char *t = fixture_text(fixtures[i]);
        sy_grammar *g = compile_ok(t);
        char *dump = sy_grammar_dump(g);
        assert_non_null(dump);
        assert_non_null(strstr(dump, "root ::="));
        free(dump);
        sy_grammar_free(g);
        free(t);
    }
}

/* Random generation through masks, then the same text fed back byte by byte into a fresh state. */
static void generate_and_recheck(const gt_vocab *v, int samples, int max_tokens, uint64_t seed) {
    for (size_t i = 0; i < N_FIXTURES; i++) {
        char *t = fixture_text(fixtures[i]);
        sy_grammar *g = compile_ok(t);
        uint64_t rng = seed + i;
        int ended = 0;
        for (int k = 0; k < samples; k++) {
            sy_grammar_state *st = state_of(g, v);
            gt_sample s = gt_generate(st, v, &rng, max_tokens, max_tokens * 4, 0.25);
            if (s.error) fail_msg("%s sample %d: %s after \"%s\"", fixtures[i], k, s.msg, s.text);
            sy_grammar_state_free(st);
            sy_grammar_state *re = state_of(g, bytes_v);
            int rc = sy_grammar_state_accept_bytes(re, (const uint8_t *)s.text, s.len);
            if (rc != 0) fail_msg("%s: generated text rejected on replay (%s): \"%s\"", fixtures[i],
                                  sy_grammar_state_error(re), s.text);
            if (s.ended) {
                ended++;
                if (!sy_grammar_state_can_end(re))
                    fail_msg("%s: generation ended where the grammar is not complete: \"%s\"", fixtures[i], s.text);
                if (strncmp(fixtures[i], "json", 4) == 0) {
                    cJSON *j = cJSON_ParseWithLength(s.text, s.len);
                    if (j == NULL) fail_msg("%s: not JSON: \"%s\"", fixtures[i], s.text);
                    cJSON_Delete(j);
                }
            }
            sy_grammar_state_free(re);
            free(s.text);
        }
        if (ended < samples / 10) fail_msg("%s: only %d of %d samples ended", fixtures[i], ended, samples);
        sy_grammar_free(g);
        free(t);
    }
}

static void fixtures_generate_bytes(void **state) {
    (void)state;
    generate_and_recheck(bytes_v, 40, 200, 1000);
}

static void fixtures_generate_qwen(void **state) {
    (void)state;
    generate_and_recheck(qwen_v, 30, 80, 2000);
}

/* The mask bit of every token (byte vocabulary) or of a sample of tokens plus every allowed one (Qwen3) must
 * equal check_token, along random generations. */
static void masks_agree_with_checks(void **state) {
    (void)state;
    const gt_vocab *vs[2] = {bytes_v, qwen_v};
    for (int vi = 0; vi < 2; vi++) {
        const gt_vocab *v = vs[vi];
        size_t words = sy_grammar_vocab_mask_words(v->v);
        uint32_t *bits = malloc(words * sizeof *bits);
        for (size_t i = 0; i < N_FIXTURES; i++) {
            char *t = fixture_text(fixtures[i]);
            sy_grammar *g = compile_ok(t);
            sy_grammar_state *st = state_of(g, v);
            uint64_t rng = 77 + i;
            for (int step = 0; step < 25; step++) {
                long n = sy_grammar_state_mask(st, bits);
                assert_true(n > 0);
                long counted = 0;
                for (uint32_t tok = 0; tok < v->n; tok++) {
                    bool bit = (bits[tok / 32] >> (tok % 32)) & 1;
                    counted += bit;
                    if (!bit && vi == 1 && gt_rand(&rng) % 40 != 0) continue; /* Qwen3: a sample of the rest */
                    int c = sy_grammar_state_check_token(st, (int32_t)tok);
                    if (c != (int)bit)
                        fail_msg("%s step %d: token %u mask %d check %d", fixtures[i], step, tok, bit, c);
                }
                assert_int_equal(counted, n);
                int32_t tok;
                do { /* advance by a random non-end token */
                    tok = gt_nth_bit(bits, words, (long)(gt_rand(&rng) % (uint64_t)n));
                } while (v->kinds[tok] == SY_GRAMMAR_TOKEN_EOG && n > 1);
                if (v->kinds[tok] == SY_GRAMMAR_TOKEN_EOG) break;
                assert_int_equal(sy_grammar_state_accept_token(st, tok), 0);
            }
            sy_grammar_state_free(st);
            sy_grammar_free(g);
            free(t);
        }
        free(bits);
    }
}

/* Known documents of each grammar, and near misses. */
static void fixtures_accept_and_reject(void **state) {
    (void)state;
    static const struct {
        const char *grammar, *text;
        bool ok;
    } cases[] = {
        {"json", "{\"a\": [1, 2.5, -3e4, true, null, \"x\\n\\u00e9\"]}", true},
        {"json", "{}", true},
        {"json", "{\n  \"k\": {\"n\": {}}}", true},
        {"json", "[1]", false}, /* root is an object */
        {"json", "{\"a\":}", false},
        {"json", "{\"a\":1,}", false},
        {"json", "{\"a\":01}", false},
        {"json", "{\"a\":\"\x01\"}", false},
        {"json", "{\"a\":\"\\q\"}", false},
        {"json", "{\"a\":1", false},
        {"json_arr", "[\n{\"a\": 1},\n\"x\"]", true},
        {"json_arr", "[\n]", true},
        {"json_arr", "[1]", false},
        {"arithmetic", "1+2=3\n", true},
        {"arithmetic", "(a *b) = c\n", true},
        {"arithmetic", "(a * b) = c\n", false}, /* no space before a term */
        {"arithmetic", "1+=3\n", false},
        {"arithmetic", "1+2=3", false},
        {"chess", "1. e4 e5\n2. Nf3 Nc6\n", true},
        {"chess", "1. O-O-O Qxd8#\n2. e8=Q a1\n", true},
        {"chess", "1. e4 e5\n", false},
        {"chess", "1. e9 e5\n2. a1 a2\n", false},
        {"c", "int main(){return 0;}", true},
        {"c", "int f(int x){while(x<10){x = x+1;}}", true},
        {"c", "int main(){return 0}", false},
        {"english", "Hello, world!", true},
        {"english", "Hello  world", false},
        {"japanese", "こんにちは 世界", true},
        {"japanese", "hello", false},
        {"list", "- one\n- two\n", true},
        {"list", "- one\n-two\n", false},
        {"list", "- a\xe2\x80\xa8z\n", false}, /* U+2028 excluded */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *t = fixture_text(cases[i].grammar);
        sy_grammar *g = compile_ok(t);
        bool got = text_matches(g, cases[i].text, strlen(cases[i].text));
        if (got != cases[i].ok)
            fail_msg("%s: \"%s\" expected %s", cases[i].grammar, cases[i].text, cases[i].ok ? "match" : "reject");
        sy_grammar_free(g);
        free(t);
    }
}

static void syntax_features(void **state) {
    (void)state;
    static const struct {
        const char *gbnf, *text;
        bool ok;
    } cases[] = {
        {"root ::= \"\\x41\\u00e9\\U0001F600\\t\\\\\\\"\"", "A\xc3\xa9\xf0\x9f\x98\x80\t\\\"", true},
        {"root ::= [^a-z0-9]+", "AB-!", true},
        {"root ::= [^a-z0-9]+", "Ab", false},
        {"root ::= . . .", "a\xc3\xa9z", true},
        {"root ::= . . .", "ab", false},
        {"root ::= \"ab\"{3}", "ababab", true},
        {"root ::= \"ab\"{3}", "abab", false},
        {"root ::= [x]{2,}", "xx", true},
        {"root ::= [x]{2,}", "x", false},
        {"root ::= [x]{2,}", "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", true},
        {"root ::= [x]{1,3} \"y\"", "xxxy", true},
        {"root ::= [x]{1,3} \"y\"", "xxxxy", false},
        {"root ::= [x]{0,2}", "", true},
        {"root ::= [x] { 0 , 2 }", "xx", true},
        {"root ::= \"a\"? \"b\"* \"c\"+", "bbbc", true},
        {"root ::= \"a\"? \"b\"* \"c\"+", "aab", false},
        {"# comment\nroot ::= ( # inside\n  \"a\" |\n  \"b\" # more\n) x\nx ::= \"!\" # end", "b!", true},
        {"root ::= \"a\" |\n  \"b\"", "b", true},
        {"root ::= foo-bar\nfoo-bar ::= [-] Caps9\nCaps9 ::= \"z\"", "-z", true},
        {"root ::= [\\]\\[]+", "][", true},
        {"root ::= [a-]", "-", true},
        {"root ::= \"\"", "", true},
        {"root ::= (\"a\" \"b\")* | \"c\"", "abab", true},
        {"root ::= [\\u0400-\\u04FF]+", "\xd0\x96\xd0\xb0", true},
        {"root ::= [\\u0400-\\u04FF]+", "\xc3\xa9", false},
        {"root ::= \"x\"\r\nroot2 ::= \"y\"\r\n", "x", true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sy_grammar *g = compile_ok(cases[i].gbnf);
        bool got = text_matches(g, cases[i].text, strlen(cases[i].text));
        if (got != cases[i].ok)
            fail_msg("case %zu: %s on \"%s\": expected %s", i, cases[i].gbnf, cases[i].text,
                     cases[i].ok ? "match" : "reject");
        sy_grammar_free(g);
    }
}

static void syntax_errors(void **state) {
    (void)state;
    compile_fails("", "no rule 'root'");
    compile_fails("roo ::= \"a\"", "no rule 'root'");
    compile_fails("root ::= x", "undefined rule 'x'");
    compile_fails("root ::= \"a", "unterminated string");
    compile_fails("root ::= [a", "unterminated character class");
    compile_fails("root ::= (\"a\"", "expecting ')'");
    compile_fails("root ::= \"\\q\"", "unknown escape");
    compile_fails("root ::= \"\\x4\"", "hex digits");
    compile_fails("root ::= \"\\UFFFFFFFF\"", "U+10FFFF");
    compile_fails("root ::= [z-a]", "empty range");
    compile_fails("root ::= * \"a\"", "expecting an item");
    compile_fails("root ::= \"a\"{3,1}", "max < min");
    compile_fails("root ::= \"a\"{x}", "expecting an integer");
    compile_fails("root = \"a\"", "expecting ::=");
    compile_fails("root ::= \"a\"\nroot ::= \"b\"", "defined twice");
    compile_fails("root ::= \"a\" )", "expecting newline");
    compile_fails("root ::= \"\xff\"", "invalid UTF-8");
    compile_fails("root ::= <[99999999999]>", "token id out of range");
    compile_fails("root ::= <>", "expecting <token-text>");
    char nul[] = "root ::= \"a\"\0";
    char err[128];
    assert_null(sy_grammar_compile(nul, sizeof nul - 1, NULL, err, sizeof err));
    assert_non_null(strstr(err, "NUL"));
    /* another root by name */
    sy_grammar *g = sy_grammar_compile("a ::= \"x\"", 9, "a", err, sizeof err);
    assert_non_null(g);
    sy_grammar_free(g);
}

static void pathological(void **state) {
    (void)state;
    compile_fails("root ::= root \"x\" | \"y\"", "left recursion in rule 'root'");
    compile_fails("root ::= a\na ::= b \"x\"\nb ::= c | \"q\"\nc ::= a", "left recursion");
    compile_fails("root ::= e? root \"x\" | \"y\"\ne ::= \"\"", "left recursion in rule 'root'");
    compile_fails("root ::= (\"a\"?)*", "left recursion in rule 'root_");
    compile_fails("root ::= item*\nitem ::= \"\" | \"x\"", "left recursion in rule 'root_");
    compile_fails("root ::= \"a\"{0,1000000}", "repetition count over");
    compile_fails("root ::= \"a\"{99999999999999999999}", "repetition count over");
    char big[1024];
    size_t bn = (size_t)snprintf(big, sizeof big, "root ::=");
    for (int i = 0; i < 12; i++) bn += (size_t)snprintf(big + bn, sizeof big - bn, " \"abcdefghijklmnopqrstuvwxyz0123456789\"{10000}");
    compile_fails(big, "expands past");
    /* nesting */
    char deep[2048];
    size_t k = (size_t)snprintf(deep, sizeof deep, "root ::= ");
    for (int i = 0; i < 300; i++) deep[k++] = '(';
    deep[k++] = '"', deep[k++] = 'a', deep[k++] = '"';
    for (int i = 0; i < 300; i++) deep[k++] = ')';
    deep[k] = '\0';
    compile_fails(deep, "nested deeper than");
    /* huge alternation */
    size_t cap = 70000 * 6 + 64, n = 0;
    char *alts = malloc(cap);
    n += (size_t)snprintf(alts, cap, "root ::= \"a\"");
    for (int i = 0; i < 70000; i++) n += (size_t)snprintf(alts + n, cap - n, " | \"b\"");
    compile_fails(alts, "more than 65536 alternatives");
    free(alts);

    /* run time: each "a" doubles the pending continuations (b or c), past the live-stack limit */
    sy_grammar *g = compile_ok("root ::= e\ne ::= \"a\" e \"b\" | \"a\" e \"c\" | \"\"");
    sy_grammar_state *st = state_of(g, bytes_v);
    int rc = 0, i;
    for (i = 0; i < 30 && rc == 0; i++) rc = sy_grammar_state_accept_bytes(st, (const uint8_t *)"a", 1);
    assert_int_equal(rc, SY_GRAMMAR_ELIMIT);
    assert_true(i > 10);
    assert_non_null(strstr(sy_grammar_state_error(st), "state explosion"));
    assert_non_null(strstr(sy_grammar_state_error(st), "rule 'e"));
    /* the state is unchanged and still usable */
    assert_int_equal(sy_grammar_state_accept_bytes(st, (const uint8_t *)"c", 1), 0);
    sy_grammar_state_free(st);
    sy_grammar_free(g);

    /* run time: nesting depth of the text */
    g = compile_ok("root ::= \"(\" root \")\" | \"x\"");
    st = state_of(g, bytes_v);
    rc = 0;
    for (i = 0; i < 20000 && rc == 0; i++) rc = sy_grammar_state_accept_bytes(st, (const uint8_t *)"(", 1);
    assert_int_equal(rc, SY_GRAMMAR_ELIMIT);
    assert_non_null(strstr(sy_grammar_state_error(st), "nesting deeper"));
    assert_non_null(strstr(sy_grammar_state_error(st), "rule 'root"));
    sy_grammar_state_free(st);
    sy_grammar_free(g);
}

/* A token may end inside a character: the rest must follow, and only valid UTF-8 is ever allowed. */
static void partial_utf8(void **state) {
    (void)state;
    size_t words = sy_grammar_vocab_mask_words(bytes_v->v);
    uint32_t bits[16];
    assert_true(words <= 16);
    sy_grammar *g = compile_ok("root ::= \"\\u00e9\" [x]");
    sy_grammar_state *st = state_of(g, bytes_v);
    assert_int_equal(sy_grammar_state_mask(st, bits), 1);
    assert_true(bits[0xC3 / 32] >> (0xC3 % 32) & 1);
    assert_int_equal(sy_grammar_state_accept_token(st, 0xC3), 0);
    assert_false(sy_grammar_state_can_end(st));
    assert_int_equal(sy_grammar_state_mask(st, bits), 1);
    assert_true(bits[0xA9 / 32] >> (0xA9 % 32) & 1);
    assert_int_equal(sy_grammar_state_accept_token(st, 0xA8), SY_GRAMMAR_EREJECT);
    assert_int_equal(sy_grammar_state_accept_token(st, 0xA9), 0);
    assert_int_equal(sy_grammar_state_accept_token(st, 'x'), 0);
    assert_true(sy_grammar_state_can_end(st));
    assert_true(sy_grammar_state_is_final(st));
    sy_grammar_state_free(st);
    sy_grammar_free(g);

    /* any character: after E0 only A0..BF (no overlong forms), after ED only 80..9F (no surrogates) */
    g = compile_ok("root ::= .");
    st = state_of(g, bytes_v);
    long n = sy_grammar_state_mask(st, bits);
    assert_int_equal(n, 128 + (0xDF - 0xC2 + 1) + 16 + 5); /* ASCII, C2..DF, E0..EF, F0..F4 */
    assert_int_equal(sy_grammar_state_accept_token(st, 0xC0), SY_GRAMMAR_EREJECT);
    assert_int_equal(sy_grammar_state_accept_token(st, 0x80), SY_GRAMMAR_EREJECT);
    sy_grammar_state *e0 = sy_grammar_state_clone(st);
    assert_int_equal(sy_grammar_state_accept_token(e0, 0xE0), 0);
    assert_int_equal(sy_grammar_state_mask(e0, bits), 0xBF - 0xA0 + 1);
    assert_int_equal(sy_grammar_state_accept_token(st, 0xED), 0);
    assert_int_equal(sy_grammar_state_mask(st, bits), 0x9F - 0x80 + 1);
    assert_int_equal(sy_grammar_state_check_token(st, 0xA0), 0);
    sy_grammar_state_free(e0);
    sy_grammar_state_free(st);
    sy_grammar_free(g);

    /* a class reachable only through a multi-byte prefix prunes at the lead byte */
    g = compile_ok("root ::= [\\u4e00-\\u4e01]");
    st = state_of(g, bytes_v);
    assert_int_equal(sy_grammar_state_mask(st, bits), 1);
    assert_true(bits[0xE4 / 32] >> (0xE4 % 32) & 1);
    assert_int_equal(sy_grammar_state_accept_token(st, 0xE4), 0);
    assert_int_equal(sy_grammar_state_mask(st, bits), 1); /* only B8 */
    assert_int_equal(sy_grammar_state_accept_token(st, 0xB8), 0);
    assert_int_equal(sy_grammar_state_mask(st, bits), 2); /* 80, 81 */
    sy_grammar_state_free(st);
    sy_grammar_free(g);

    /* Qwen3 tokens that end inside a CJK character are allowed where the character may follow */
    char jp[] = "root ::= [一-鿿]+";
    g = compile_ok(jp);
    st = state_of(g, qwen_v);
    size_t qw = sy_grammar_vocab_mask_words(qwen_v->v);
    uint32_t *qb = malloc(qw * sizeof *qb);
    assert_true(sy_grammar_state_mask(st, qb) > 1000);
    int32_t partial_tok = -1;
    for (uint32_t t = 0; t < qwen_v->n && partial_tok < 0; t++)
        if (qwen_v->lens[t] == 1 && qwen_v->bytes[t][0] == 0xE4) partial_tok = (int32_t)t;
    assert_true(partial_tok >= 0);
    assert_true(qb[partial_tok / 32] >> (partial_tok % 32) & 1);
    free(qb);
    sy_grammar_state_free(st);
    sy_grammar_free(g);
}

static void token_references(void **state) {
    (void)state;
    size_t words = sy_grammar_vocab_mask_words(bytes_v->v);
    uint32_t bits[16];
    /* the control token only through a reference; never by text */
    sy_grammar *g = compile_ok("root ::= <[257]> \"a\" | \"<ctl>\"");
    sy_grammar_state *st = state_of(g, bytes_v);
    long n = sy_grammar_state_mask(st, bits);
    assert_int_equal(n, 2); /* <ctl> token, '<' byte */
    assert_true(bits[257 / 32] >> (257 % 32) & 1);
    sy_grammar_state *c = sy_grammar_state_clone(st);
    assert_int_equal(sy_grammar_state_accept_token(c, 257), 0);
    assert_int_equal(sy_grammar_state_accept_token(c, 'a'), 0);
    assert_true(sy_grammar_state_can_end(c));
    sy_grammar_state_free(c);
    assert_int_equal(sy_grammar_state_accept_bytes(st, (const uint8_t *)"<ctl>", 5), 0);
    assert_true(sy_grammar_state_can_end(st));
    sy_grammar_state_free(st);
    sy_grammar_free(g);

    /* by text, and negated: anything but 'q' (normal tokens only), then the end token */
    g = compile_ok("root ::= <ctl> !<[113]>* \"!\"");
    st = state_of(g, bytes_v);
    assert_int_equal(sy_grammar_state_accept_token(st, 257), 0);
    n = sy_grammar_state_mask(st, bits);
    assert_int_equal(n, 255); /* 256 bytes minus 'q' */
    assert_false(bits['q' / 32] >> ('q' % 32) & 1);
    assert_false(bits[257 / 32] >> (257 % 32) & 1);
    assert_int_equal(sy_grammar_state_accept_token(st, 'q'), SY_GRAMMAR_EREJECT);
    assert_int_equal(sy_grammar_state_accept_token(st, 'z'), 0);
    assert_int_equal(sy_grammar_state_accept_token(st, '!'), 0); /* '!' by the negation or the literal */
    assert_true(sy_grammar_state_can_end(st));
    assert_int_equal(sy_grammar_state_accept_token(st, 256), 0);
    assert_int_equal(sy_grammar_state_accept_token(st, 'a'), SY_GRAMMAR_EDONE);
    sy_grammar_state_free(st);
    sy_grammar_free(g);

    /* an end token named by a reference is matched, not an end */
    g = compile_ok("root ::= \"a\" <[256]> \"b\"");
    st = state_of(g, bytes_v);
    assert_int_equal(sy_grammar_state_accept_token(st, 256), SY_GRAMMAR_EREJECT);
    assert_int_equal(sy_grammar_state_accept_token(st, 'a'), 0);
    assert_int_equal(sy_grammar_state_mask(st, bits), 1);
    assert_int_equal(sy_grammar_state_accept_token(st, 256), 0);
    assert_false(sy_grammar_state_is_final(st));
    assert_int_equal(sy_grammar_state_accept_token(st, 'b'), 0);
    assert_true(sy_grammar_state_can_end(st));
    sy_grammar_state_free(st);
    sy_grammar_free(g);

    /* a text reference that is no single token fails at state creation; an id past the vocabulary too */
    char err[256];
    g = compile_ok("root ::= <nothing-like-this>");
    assert_null(sy_grammar_state_create(g, bytes_v->v, NULL, err, sizeof err));
    assert_non_null(strstr(err, "<nothing-like-this>"));
    sy_grammar_free(g);
    g = compile_ok("root ::= <[9999]>");
    assert_null(sy_grammar_state_create(g, bytes_v->v, NULL, err, sizeof err));
    assert_non_null(strstr(err, "9999"));
    sy_grammar_free(g);

    /* Qwen3: <think> ... </think> by token text */
    (void)words;
    g = compile_ok("root ::= <think> thinking </think> \"ok\"\nthinking ::= !</think>*");
    st = state_of(g, qwen_v);
    int32_t think = sy_grammar_vocab_find(qwen_v->v, "<think>", 7), end = sy_grammar_vocab_find(qwen_v->v, "</think>", 8);
    assert_true(think > 0 && end > 0);
    assert_int_equal(sy_grammar_state_check_token(st, end), 0);
    assert_int_equal(sy_grammar_state_accept_token(st, think), 0);
    assert_int_equal(sy_grammar_state_accept_bytes(st, (const uint8_t *)"hmm", 3), SY_GRAMMAR_EREJECT);
    assert_int_equal(sy_grammar_state_accept_token(st, (int32_t)sy_grammar_vocab_find(qwen_v->v, "hm", 2)), 0);
    assert_int_equal(sy_grammar_state_accept_token(st, end), 0);
    assert_int_equal(sy_grammar_state_accept_bytes(st, (const uint8_t *)"ok", 2), 0);
    assert_true(sy_grammar_state_can_end(st));
    sy_grammar_state_free(st);
    sy_grammar_free(g);
}

static void end_of_generation(void **state) {
    (void)state;
    uint32_t bits[16];
    sy_grammar *g = compile_ok("root ::= \"ab\" \"c\"?");
    sy_grammar_state *st = state_of(g, bytes_v);
    assert_int_equal(sy_grammar_state_accept_token(st, 256), SY_GRAMMAR_EREJECT);
    sy_grammar_state_mask(st, bits);
    assert_false(bits[256 / 32] >> (256 % 32) & 1);
    assert_false(bits[257 / 32] >> (257 % 32) & 1); /* control: never */
    assert_int_equal(sy_grammar_state_accept_bytes(st, (const uint8_t *)"ab", 2), 0);
    assert_int_equal(sy_grammar_state_mask(st, bits), 2); /* 'c' and the end */
    assert_true(bits[256 / 32] >> (256 % 32) & 1);
    assert_false(sy_grammar_state_is_final(st));
    sy_grammar_state *c = sy_grammar_state_clone(st);
    assert_int_equal(sy_grammar_state_accept_token(c, 'c'), 0);
    assert_int_equal(sy_grammar_state_mask(c, bits), 1); /* only the end */
    assert_true(sy_grammar_state_is_final(c));
    assert_int_equal(sy_grammar_state_accept_token(st, 256), 0);
    assert_int_equal(sy_grammar_state_mask(st, bits), 0);
    assert_int_equal(sy_grammar_state_accept_token(st, 'c'), SY_GRAMMAR_EDONE);
    assert_int_equal(sy_grammar_state_accept_token(c, -1), SY_GRAMMAR_EINVAL);
    assert_int_equal(sy_grammar_state_accept_token(c, 100000), SY_GRAMMAR_EINVAL);
    sy_grammar_state_free(c);
    sy_grammar_state_free(st);
    sy_grammar_free(g);
}

static void lazy_triggers(void **state) {
    (void)state;
    uint32_t bits[16];
    char err[256];
    sy_grammar *g = compile_ok("root ::= \"<tool_call>\" [a-z]+ \"</tool_call>\"");
    const char *words[] = {"<tool_call>"};
    sy_grammar_triggers trig = {.words = words, .n_words = 1};
    sy_grammar_state *st = sy_grammar_state_create(g, bytes_v->v, &trig, err, sizeof err);
    assert_non_null(st);
    assert_true(sy_grammar_state_awaiting_trigger(st));
    assert_int_equal(sy_grammar_state_mask(st, bits), 258); /* anything goes, the end and control too */
    const char *free_text = "I will call it: <tool";
    for (const char *p = free_text; *p; p++) assert_int_equal(sy_grammar_state_accept_token(st, (uint8_t)*p), 0);
    assert_true(sy_grammar_state_awaiting_trigger(st));
    sy_grammar_state *early = sy_grammar_state_clone(st);
    const char *rest = "_call>ab";
    for (const char *p = rest; *p; p++) assert_int_equal(sy_grammar_state_accept_token(st, (uint8_t)*p), 0);
    assert_false(sy_grammar_state_awaiting_trigger(st));
    /* from the trigger on, the grammar holds: letters or the closing tag */
    assert_int_equal(sy_grammar_state_mask(st, bits), 27);
    assert_int_equal(sy_grammar_state_accept_token(st, '1'), SY_GRAMMAR_EREJECT);
    assert_int_equal(sy_grammar_state_accept_bytes(st, (const uint8_t *)"c</tool_call>", 13), 0);
    assert_true(sy_grammar_state_can_end(st));
    /* the clone taken before the trigger is independent: bytes in one go, trigger split inside */
    assert_true(sy_grammar_state_awaiting_trigger(early));
    assert_int_equal(sy_grammar_state_accept_bytes(early, (const uint8_t *)"_call>9", 7), SY_GRAMMAR_EREJECT);
    assert_int_equal(sy_grammar_state_check_token(early, '_'), 1);
    assert_int_equal(sy_grammar_state_accept_bytes(early, (const uint8_t *)"_call>z", 7), 0);
    assert_false(sy_grammar_state_can_end(early));
    sy_grammar_state_free(early);
    sy_grammar_state_free(st);

    /* a trigger token: the control token starts the grammar by its text (the grammar begins with it) */
    sy_grammar *g2 = compile_ok("root ::= \"<ctl>\" [0-9]");
    int32_t ttok[] = {257};
    sy_grammar_triggers tt = {.tokens = ttok, .n_tokens = 1};
    st = sy_grammar_state_create(g2, bytes_v->v, &tt, err, sizeof err);
    assert_non_null(st);
    assert_int_equal(sy_grammar_state_accept_bytes(st, (const uint8_t *)"<ctl>", 5), 0); /* text: no trigger */
    assert_true(sy_grammar_state_awaiting_trigger(st));
    assert_int_equal(sy_grammar_state_accept_token(st, 257), 0);
    assert_false(sy_grammar_state_awaiting_trigger(st));
    assert_int_equal(sy_grammar_state_mask(st, bits), 10);
    sy_grammar_state_free(st);
    sy_grammar_free(g2);

    /* bad triggers */
    int32_t bad[] = {5000};
    sy_grammar_triggers tb = {.tokens = bad, .n_tokens = 1};
    assert_null(sy_grammar_state_create(g, bytes_v->v, &tb, err, sizeof err));
    const char *empty[] = {""};
    sy_grammar_triggers te = {.words = empty, .n_words = 1};
    assert_null(sy_grammar_state_create(g, bytes_v->v, &te, err, sizeof err));
    sy_grammar_free(g);
}

/* Clones are independent; check_token does not move the state; the grammar outlives its creator's reference. */
static void clones_and_checks(void **state) {
    (void)state;
    char *t = fixture_text("json");
    sy_grammar *g = compile_ok(t);
    free(t);
    sy_grammar_state *st = state_of(g, qwen_v);
    sy_grammar_free(g); /* the state holds its own reference */
    int32_t brace = sy_grammar_vocab_find(qwen_v->v, "{\"", 2);
    int32_t x = sy_grammar_vocab_find(qwen_v->v, "x", 1);
    assert_true(brace >= 0 && x >= 0);
    assert_int_equal(sy_grammar_state_check_token(st, x), 0);
    assert_int_equal(sy_grammar_state_check_token(st, brace), 1);
    assert_int_equal(sy_grammar_state_check_token(st, brace), 1); /* unchanged */
    sy_grammar_state *a = sy_grammar_state_clone(st);
    assert_int_equal(sy_grammar_state_accept_token(a, brace), 0);
    assert_int_equal(sy_grammar_state_check_token(a, x), 1);
    assert_int_equal(sy_grammar_state_check_token(st, x), 0);
    sy_grammar_state_free(st);
    assert_int_equal(sy_grammar_state_accept_token(a, x), 0);
    sy_grammar_state_free(a);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(fixtures_compile),
        cmocka_unit_test(fixtures_accept_and_reject),
        cmocka_unit_test(syntax_features),
        cmocka_unit_test(syntax_errors),
        cmocka_unit_test(pathological),
        cmocka_unit_test(partial_utf8),
        cmocka_unit_test(token_references),
        cmocka_unit_test(end_of_generation),
        cmocka_unit_test(lazy_triggers),
        cmocka_unit_test(clones_and_checks),
        cmocka_unit_test(fixtures_generate_bytes),
        cmocka_unit_test(fixtures_generate_qwen),
        cmocka_unit_test(masks_agree_with_checks),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
