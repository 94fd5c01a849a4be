/* The host's byte buffer (base/buf.h): reading a stream into it, with the limit that says "too long". */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "base/buf.h"

/* A temporary file holding n bytes of a pattern, rewound. */
static FILE *file_of(size_t n) {
    FILE *f = tmpfile();
    assert_non_null(f);
    for (size_t i = 0; i < n; i++) fputc('a' + (int)(i % 26), f);
    rewind(f);
    return f;
}

static void reads_a_whole_stream(void **state) {
    (void)state;
    const size_t sizes[] = {0, 1, 65535, 65536, 65537, 200000};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        FILE *f = file_of(sizes[k]);
        sy_buf b;
        sy_buf_init(&b);
        sy_buf_puts(&b, "<"); /* appends after what is there */
        assert_true(sy_buf_read(&b, f, 1 << 20));
        fclose(f);
        assert_int_equal(b.len, sizes[k] + 1);
        assert_int_equal(b.data[b.len], '\0');
        for (size_t i = 0; i < sizes[k]; i++) assert_int_equal(b.data[1 + i], 'a' + (int)(i % 26));
        sy_buf_free(&b);
    }
}

static void stops_one_byte_past_the_limit(void **state) {
    (void)state;
    const size_t max = 70000;
    const size_t sizes[] = {max - 1, max, max + 1, max + 2, 3 * max};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        FILE *f = file_of(sizes[k]);
        sy_buf b;
        sy_buf_init(&b);
        assert_true(sy_buf_read(&b, f, max));
        fclose(f);
        assert_int_equal(b.len, sizes[k] <= max ? sizes[k] : max + 1);
        sy_buf_free(&b);
    }
    /* an empty stream still leaves a NUL-terminated (empty) text */
    FILE *f = file_of(0);
    sy_buf b;
    sy_buf_init(&b);
    assert_true(sy_buf_read(&b, f, 0));
    fclose(f);
    assert_non_null(b.data);
    assert_string_equal(b.data, "");
    sy_buf_free(&b);
}

static void a_read_error_is_reported(void **state) {
    (void)state;
    FILE *f = fopen("/dev/null", "w"); /* reading a write-only stream sets its error indicator */
    assert_non_null(f);
    sy_buf b;
    sy_buf_init(&b);
    assert_false(sy_buf_read(&b, f, 100));
    fclose(f);
    assert_int_equal(b.len, 0);
    sy_buf_free(&b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(reads_a_whole_stream),
        cmocka_unit_test(stops_one_byte_past_the_limit),
        cmocka_unit_test(a_read_error_is_reported),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
