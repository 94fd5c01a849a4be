/* Streaming token bytes to text: incomplete UTF-8 is held back, invalid bytes become U+FFFD. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "engine/text_stream.h"

typedef struct sink_buf {
    char text[256];
    size_t len;
    int calls;
} sink_buf;

static void collect(void *user, const char *text, size_t len) {
    sink_buf *b = user;
    assert_true(b->len + len < sizeof b->text);
    memcpy(b->text + b->len, text, len);
    b->len += len;
    b->text[b->len] = '\0';
    b->calls++;
}

static void ascii_passes_through(void **state) {
    (void)state;
    sy_text_stream ts;
    sy_text_stream_init(&ts);
    sink_buf b = {0};
    sy_text_stream_feed(&ts, "Hello, world", 12, collect, &b);
    sy_text_stream_flush(&ts, collect, &b);
    assert_string_equal(b.text, "Hello, world");
}

static void emoji_split_over_tokens_comes_out_whole(void **state) {
    (void)state;
    const char *emoji = "\xF0\x9F\x98\x80"; /* U+1F600 */
    sy_text_stream ts;
    sy_text_stream_init(&ts);
    sink_buf b = {0};
    for (int i = 0; i < 3; i++) {
        sy_text_stream_feed(&ts, emoji + i, 1, collect, &b);
        assert_int_equal(b.len, 0); /* nothing printed while incomplete */
    }
    sy_text_stream_feed(&ts, emoji + 3, 1, collect, &b);
    assert_string_equal(b.text, emoji);
    /* CJK split 2 + 1 */
    sy_text_stream_feed(&ts, "\xE4\xB8", 2, collect, &b);
    sy_text_stream_feed(&ts, "\xAD!", 2, collect, &b);
    assert_string_equal(b.text, "\xF0\x9F\x98\x80\xE4\xB8\xAD!");
}

static void invalid_bytes_become_replacement_characters(void **state) {
    (void)state;
    sy_text_stream ts;
    sy_text_stream_init(&ts);
    sink_buf b = {0};
    sy_text_stream_feed(&ts, "a\xFF" "b", 3, collect, &b);      /* never valid */
    sy_text_stream_feed(&ts, "\xE0\x80" "c", 3, collect, &b);   /* overlong lead */
    sy_text_stream_feed(&ts, "\xC3" "d", 2, collect, &b);       /* lead without continuation */
    sy_text_stream_feed(&ts, "\xED\xA0\x80", 3, collect, &b);   /* surrogate */
    sy_text_stream_feed(&ts, "\xE2\x82", 2, collect, &b);       /* cut off at the end */
    sy_text_stream_flush(&ts, collect, &b);
    assert_string_equal(b.text, "a\xEF\xBF\xBD" "b"
                                "\xEF\xBF\xBD\xEF\xBF\xBD" "c"
                                "\xEF\xBF\xBD" "d"
                                "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"
                                "\xEF\xBF\xBD");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(ascii_passes_through),
        cmocka_unit_test(emoji_split_over_tokens_comes_out_whole),
        cmocka_unit_test(invalid_bytes_become_replacement_characters),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
