/* The host's UTF-8 decoder and encoder (base/utf8.h): every code point round-trips, and each class of ill-formed
 * input is refused. A reference decoder written the other way (decode the bits, then check shortest form and the
 * scalar range, as the grammar's own decoders did) must agree with the table-driven one. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "base/utf8.h"

/* Bits first, rules after: 0 when s[0..avail) does not start with a well-formed character. */
static size_t reference_decode(const unsigned char *s, size_t avail, uint32_t *cp) {
    if (avail == 0) return 0;
    if (s[0] < 0x80) {
        *cp = s[0];
        return 1;
    }
    size_t n;
    uint32_t v, min;
    if ((s[0] & 0xE0) == 0xC0) n = 2, v = s[0] & 0x1Fu, min = 0x80;
    else if ((s[0] & 0xF0) == 0xE0) n = 3, v = s[0] & 0x0Fu, min = 0x800;
    else if ((s[0] & 0xF8) == 0xF0) n = 4, v = s[0] & 0x07u, min = 0x10000;
    else return 0;
    if (avail < n) return 0;
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        v = (v << 6) | (s[i] & 0x3Fu);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
    *cp = v;
    return n;
}

static void check_against_reference(const unsigned char *s, size_t avail) {
    uint32_t got = 0xFFFFFFFF, want = 0xFFFFFFFF;
    size_t n = sy_utf8_decode(s, avail, &got);
    size_t m = reference_decode(s, avail, &want);
    if (n != m || got != want) {
        print_error("bytes %02X %02X %02X %02X (avail %zu): decode %zu U+%04X, reference %zu U+%04X\n", s[0],
                    avail > 1 ? s[1] : 0, avail > 2 ? s[2] : 0, avail > 3 ? s[3] : 0, avail, n, (unsigned)got, m,
                    (unsigned)want);
        fail();
    }
    assert_int_equal(sy_utf8_char_len(s, avail), n);
}

static size_t expected_length(uint32_t cp) {
    return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
}

static void every_code_point_round_trips(void **state) {
    (void)state;
    for (uint32_t cp = 0; cp <= 0x10FFFF; cp++) {
        if (cp == 0xD800) cp = 0xE000; /* surrogates: encode_refuses_what_is_not_a_scalar_value */
        char out[4];
        size_t n = sy_utf8_encode(cp, out);
        if (n != expected_length(cp)) {
            print_error("U+%04X encodes to %zu bytes\n", (unsigned)cp, n);
            fail();
        }
        const unsigned char *u = (const unsigned char *)out;
        uint32_t back = 0xFFFFFFFF;
        if (sy_utf8_decode(u, n, &back) != n || back != cp) {
            print_error("U+%04X does not decode back (got U+%04X)\n", (unsigned)cp, (unsigned)back);
            fail();
        }
        assert_true(sy_utf8_valid(out, n));
        assert_int_equal(sy_utf8_lead_length(u[0]), n);
        /* every proper prefix is a truncated character */
        for (size_t k = 0; k < n; k++) assert_int_equal(sy_utf8_decode(u, k, &back), 0);
    }
}

static void encode_refuses_what_is_not_a_scalar_value(void **state) {
    (void)state;
    char out[4] = {'x', 'x', 'x', 'x'};
    for (uint32_t cp = 0xD800; cp <= 0xDFFF; cp++) assert_int_equal(sy_utf8_encode(cp, out), 0);
    const uint32_t above[] = {0x110000, 0x110001, 0x1FFFFF, 0x200000, 0x7FFFFFFF, 0xFFFFFFFF};
    for (size_t i = 0; i < sizeof above / sizeof above[0]; i++) assert_int_equal(sy_utf8_encode(above[i], out), 0);
    assert_memory_equal(out, "xxxx", 4); /* nothing written */
}

static void ill_formed_classes_are_refused(void **state) {
    (void)state;
    static const struct {
        const char *what;
        const char *bytes;
        size_t len;
    } bad[] = {
        {"overlong 2-byte NUL", "\xC0\x80", 2},
        {"overlong 2-byte U+007F", "\xC1\xBF", 2},
        {"overlong 3-byte NUL", "\xE0\x80\x80", 3},
        {"overlong 3-byte U+07FF", "\xE0\x9F\xBF", 3},
        {"overlong 4-byte NUL", "\xF0\x80\x80\x80", 4},
        {"overlong 4-byte U+FFFF", "\xF0\x8F\xBF\xBF", 4},
        {"surrogate U+D800", "\xED\xA0\x80", 3},
        {"surrogate U+DBFF", "\xED\xAF\xBF", 3},
        {"surrogate U+DC00", "\xED\xB0\x80", 3},
        {"surrogate U+DFFF", "\xED\xBF\xBF", 3},
        {"U+110000", "\xF4\x90\x80\x80", 4},
        {"lead F5", "\xF5\x80\x80\x80", 4},
        {"lead F7 (U+1FFFFF)", "\xF7\xBF\xBF\xBF", 4},
        {"lead F8", "\xF8\x88\x80\x80", 4},
        {"lead FF", "\xFF", 1},
        {"truncated 2-byte", "\xC3", 1},
        {"truncated 3-byte", "\xE2\x82", 2},
        {"truncated 4-byte", "\xF0\x9F\x98", 3},
        {"nothing", "", 0},
        {"stray continuation 80", "\x80", 1},
        {"stray continuation BF", "\xBF\x41", 2},
        {"lead then ASCII", "\xC3\x41", 2},
        {"lead then lead", "\xE2\xE2\x82\xAC", 4},
        {"bad third byte", "\xE2\x82\x41", 3},
        {"bad fourth byte", "\xF0\x9F\x98\xC0", 4},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint32_t cp = 0x12345;
        if (sy_utf8_decode((const unsigned char *)bad[i].bytes, bad[i].len, &cp) != 0 || cp != 0x12345) {
            print_error("%s was decoded\n", bad[i].what);
            fail();
        }
        assert_int_equal(sy_utf8_char_len((const unsigned char *)bad[i].bytes, bad[i].len), 0);
        if (bad[i].len > 0) assert_false(sy_utf8_valid(bad[i].bytes, bad[i].len));
    }
    /* a truncated character is refused even when the bytes that would complete it are there but not offered */
    uint32_t cp;
    assert_int_equal(sy_utf8_decode((const unsigned char *)"\xE2\x82\xAC", 2, &cp), 0);
    assert_int_equal(sy_utf8_decode((const unsigned char *)"\xE2\x82\xAC", 3, &cp), 3);
    assert_int_equal(cp, 0x20AC);
}

static void lead_lengths(void **state) {
    (void)state;
    for (unsigned c = 0; c < 256; c++) {
        size_t want = c < 0x80 ? 1 : c < 0xC2 ? 0 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : c < 0xF5 ? 4 : 0;
        assert_int_equal(sy_utf8_lead_length((unsigned char)c), want);
    }
}

/* Every 1- and 2-byte input and every 3-byte one with an E lead, exhaustively; 4-byte ones with every lead from F0
 * to F7 and every second byte, the last two from the bytes around the continuation range. */
static void decode_agrees_with_the_reference(void **state) {
    (void)state;
    unsigned char s[4];
    for (unsigned a = 0; a < 256; a++) {
        s[0] = (unsigned char)a;
        check_against_reference(s, 1);
        for (unsigned b = 0; b < 256; b++) {
            s[1] = (unsigned char)b;
            check_against_reference(s, 2);
        }
    }
    for (unsigned a = 0xE0; a <= 0xEF; a++)
        for (unsigned b = 0; b < 256; b++)
            for (unsigned c = 0; c < 256; c++) {
                s[0] = (unsigned char)a, s[1] = (unsigned char)b, s[2] = (unsigned char)c;
                check_against_reference(s, 3);
            }
    static const unsigned char edge[] = {0x00, 0x7F, 0x80, 0x81, 0x9F, 0xA0, 0xBF, 0xC0, 0xFF};
    for (unsigned a = 0xF0; a <= 0xF7; a++)
        for (unsigned b = 0; b < 256; b++)
            for (size_t c = 0; c < sizeof edge; c++)
                for (size_t d = 0; d < sizeof edge; d++) {
                    s[0] = (unsigned char)a, s[1] = (unsigned char)b, s[2] = edge[c], s[3] = edge[d];
                    check_against_reference(s, 4);
                    check_against_reference(s, 3);
                }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_code_point_round_trips),
        cmocka_unit_test(encode_refuses_what_is_not_a_scalar_value),
        cmocka_unit_test(ill_formed_classes_are_refused),
        cmocka_unit_test(lead_lengths),
        cmocka_unit_test(decode_agrees_with_the_reference),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
