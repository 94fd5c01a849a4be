/* Chat templates: detection by markers, default system prompts, and the exact text of every format. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "chat/chat_template.h"

/* Template texts written for these tests in the style of the models' own Jinja templates: only their markers
 * and literals matter to the host. */
static const char chatml_plain[] =
    "{%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- endif %}";

/* Qwen 2.5 style: a tools branch opening the system turn without a literal prompt, then the fallback system
 * prompt as one literal in the plain branch. */
static const char chatml_qwen_default[] =
    "{%- if tools %}{{- '<|im_start|>system\\n' }}{%- if messages[0]['role'] == 'system' %}"
    "{{- messages[0]['content'] }}{%- else %}{{- 'You are Qwen, a helpful assistant.' }}{%- endif %}"
    "{%- else %}{%- if messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>system\\nYou are Qwen, a helpful assistant.<|im_end|>\\n' }}{%- endif %}"
    "{%- endif %}";

/* Qwen 3 style: the system turn only when the conversation has one. */
static const char chatml_no_default[] =
    "{%- if messages[0].role == 'system' %}{{- '<|im_start|>system\\n' + messages[0].content + "
    "'<|im_end|>\\n' }}{%- endif %}{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' }}"
    "{%- endfor %}";

/* SmolLM2 style, with double quotes and an escaped quote inside the prompt. */
static const char chatml_double_quoted[] =
    "{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ \"<|im_start|>system\\nYou are \\\"Smol\\\", a small model<|im_end|>\\n\" }}{% endif %}";

static const char llama3_template[] =
    "{% for message in messages %}{% set content = '<|start_header_id|>' + message['role'] + "
    "'<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}";

static const char llama31_template[] =
    "{{- bos_token }}{%- if not date_string is defined %}{%- set date_string = \"26 Jul 2024\" %}{%- endif %}"
    "{{- \"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}{{- \"Cutting Knowledge Date: December 2023\\n\" }}"
    "{{- \"Today Date: \" + date_string + \"\\n\\n\" }}";

static const char llama2_template[] =
    "{% for message in messages %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + "
    "content.strip() + ' [/INST]' }}{% endif %}{% endfor %}";

static char *render(const sy_chat_template *t, const sy_chat_message *m, size_t n, bool gen) {
    char err[256] = "";
    size_t len = 0;
    char *text = sy_chat_render(t, m, n, gen, &len, err, sizeof err);
    if (text == NULL) fail_msg("render failed: %s", err);
    assert_int_equal(len, strlen(text));
    return text;
}

static void init_ok(sy_chat_template *t, const char *override, const char *jinja, const char *bos, const char *eos) {
    char err[256] = "";
    if (sy_chat_template_init(t, override, jinja, bos, eos, err, sizeof err) != 0) fail_msg("init failed: %s", err);
}

#define MSG(role, text) {(role), (text), sizeof(text) - 1}

static void test_detect(void **state) {
    (void)state;
    assert_int_equal(sy_chat_format_detect(chatml_plain), SY_CHAT_FORMAT_CHATML);
    assert_int_equal(sy_chat_format_detect(llama3_template), SY_CHAT_FORMAT_LLAMA3);
    assert_int_equal(sy_chat_format_detect(llama31_template), SY_CHAT_FORMAT_LLAMA3);
    assert_int_equal(sy_chat_format_detect(llama2_template), SY_CHAT_FORMAT_LLAMA2);
    assert_int_equal(sy_chat_format_detect(NULL), SY_CHAT_FORMAT_RAW);
    assert_int_equal(sy_chat_format_detect(""), SY_CHAT_FORMAT_RAW);
    assert_int_equal(sy_chat_format_detect("{{ messages[0].content }}<start_of_turn>"), SY_CHAT_FORMAT_RAW);

    sy_chat_format f;
    assert_int_equal(sy_chat_format_from_name("chatml", &f), 0);
    assert_int_equal(f, SY_CHAT_FORMAT_CHATML);
    assert_int_equal(sy_chat_format_from_name("llama3", &f), 0);
    assert_int_equal(f, SY_CHAT_FORMAT_LLAMA3);
    assert_int_equal(sy_chat_format_from_name("llama2", &f), 0);
    assert_int_equal(f, SY_CHAT_FORMAT_LLAMA2);
    assert_int_equal(sy_chat_format_from_name("raw", &f), 0);
    assert_int_equal(f, SY_CHAT_FORMAT_RAW);
    assert_int_equal(sy_chat_format_from_name("ChatML", &f), -1);
    assert_int_equal(sy_chat_format_from_name("jinja", &f), -1);
    assert_string_equal(sy_chat_format_name(SY_CHAT_FORMAT_LLAMA2), "llama2");
}

static void test_default_system(void **state) {
    (void)state;
    char *s = sy_chat_template_default_system(chatml_qwen_default);
    assert_non_null(s);
    assert_string_equal(s, "You are Qwen, a helpful assistant.");
    free(s);
    assert_null(sy_chat_template_default_system(chatml_no_default));
    assert_null(sy_chat_template_default_system(chatml_plain));
    assert_null(sy_chat_template_default_system(NULL));
    /* SmolLM2's GGUF carries the newline after "system" as a real one inside the literal. */
    s = sy_chat_template_default_system("{{ '<|im_start|>system\nYou are SmolLM.<|im_end|>\n' }}");
    assert_non_null(s);
    assert_string_equal(s, "You are SmolLM.");
    free(s);
    s = sy_chat_template_default_system(chatml_double_quoted);
    assert_non_null(s);
    assert_string_equal(s, "You are \"Smol\", a small model");
    free(s);
    /* A marker at the very start is not inside quotes: no literal. */
    assert_null(sy_chat_template_default_system("<|im_start|>system\\nX<|im_end|>"));
    /* Escapes other than the known ones make the literal unusable rather than guessed at. */
    assert_null(sy_chat_template_default_system("'<|im_start|>system\\nA\\qB<|im_end|>'"));
}

static void test_chatml(void **state) {
    (void)state;
    sy_chat_template t;
    init_ok(&t, NULL, chatml_plain, NULL, NULL);
    assert_int_equal(t.format, SY_CHAT_FORMAT_CHATML);
    sy_chat_message m[] = {MSG("system", "Be brief."), MSG("user", "Hi!"), MSG("assistant", " Hello. "),
                           MSG("user", "2+2?")};
    char *text = render(&t, m, 4, true);
    assert_string_equal(text, "<|im_start|>system\nBe brief.<|im_end|>\n"
                              "<|im_start|>user\nHi!<|im_end|>\n"
                              "<|im_start|>assistant\n Hello. <|im_end|>\n"
                              "<|im_start|>user\n2+2?<|im_end|>\n"
                              "<|im_start|>assistant\n");
    free(text);
    text = render(&t, m + 1, 1, false);
    assert_string_equal(text, "<|im_start|>user\nHi!<|im_end|>\n");
    free(text);
    sy_chat_template_free(&t);
}

static void test_chatml_default_system(void **state) {
    (void)state;
    sy_chat_template t;
    init_ok(&t, NULL, chatml_qwen_default, NULL, NULL);
    sy_chat_message user[] = {MSG("user", "Hi")};
    char *text = render(&t, user, 1, true);
    assert_string_equal(text, "<|im_start|>system\nYou are Qwen, a helpful assistant.<|im_end|>\n"
                              "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    free(text);
    /* The conversation's own system prompt replaces the default. */
    sy_chat_message with_system[] = {MSG("system", "Mine."), MSG("user", "Hi")};
    text = render(&t, with_system, 2, true);
    assert_string_equal(text, "<|im_start|>system\nMine.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                              "<|im_start|>assistant\n");
    free(text);
    sy_chat_template_free(&t);

    init_ok(&t, NULL, chatml_no_default, NULL, NULL);
    text = render(&t, user, 1, true);
    assert_string_equal(text, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    free(text);
    sy_chat_template_free(&t);
}

static void test_llama3(void **state) {
    (void)state;
    sy_chat_template t;
    init_ok(&t, NULL, llama3_template, NULL, NULL);
    assert_int_equal(t.format, SY_CHAT_FORMAT_LLAMA3);
    assert_false(t.llama3_date_header);
    sy_chat_message m[] = {MSG("system", "  Be brief.\n"), MSG("user", "Hi!"), MSG("assistant", "Hello."),
                           MSG("user", "\t2+2? ")};
    char *text = render(&t, m, 4, true);
    assert_string_equal(text, "<|begin_of_text|>"
                              "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
                              "<|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>"
                              "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
                              "<|start_header_id|>user<|end_header_id|>\n\n2+2?<|eot_id|>"
                              "<|start_header_id|>assistant<|end_header_id|>\n\n");
    free(text);
    sy_chat_template_free(&t);
}

static void test_llama31_date_header(void **state) {
    (void)state;
    sy_chat_template t;
    init_ok(&t, NULL, llama31_template, "<|begin_of_text|>", "<|eot_id|>");
    assert_true(t.llama3_date_header);
    assert_string_equal(t.date, "26 Jul 2024");
    sy_chat_message m[] = {MSG("user", "Hi"), MSG("tool", "{\"x\":1}")};
    char *text = render(&t, m, 2, true);
    assert_string_equal(text, "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
                              "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|>"
                              "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                              "<|start_header_id|>ipython<|end_header_id|>\n\n{\"x\":1}<|eot_id|>"
                              "<|start_header_id|>assistant<|end_header_id|>\n\n");
    free(text);
    sy_chat_message s[] = {MSG("system", "Be kind."), MSG("user", "Hi")};
    text = render(&t, s, 2, false);
    assert_string_equal(text, "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
                              "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\nBe kind.<|eot_id|>"
                              "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>");
    free(text);
    sy_chat_template_free(&t);
}

static void test_llama2(void **state) {
    (void)state;
    sy_chat_template t;
    init_ok(&t, NULL, llama2_template, NULL, NULL);
    assert_int_equal(t.format, SY_CHAT_FORMAT_LLAMA2);
    sy_chat_message m[] = {MSG("system", "Be brief."), MSG("user", " Hi! "), MSG("assistant", " Hello. "),
                           MSG("user", "2+2?")};
    char *text = render(&t, m, 4, true);
    /* As the model's template does: the system block and the first user message are joined, then the whole turn
     * is stripped, so the message's own leading space stays after the block. */
    assert_string_equal(text, "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\n Hi! [/INST] Hello. </s>"
                              "<s>[INST] 2+2? [/INST]");
    free(text);
    text = render(&t, m + 1, 1, true);
    assert_string_equal(text, "<s>[INST] Hi! [/INST]");
    free(text);

    /* Roles must alternate. */
    sy_chat_message bad[] = {MSG("user", "a"), MSG("user", "b")};
    char err[256] = "";
    assert_null(sy_chat_render(&t, bad, 2, true, NULL, err, sizeof err));
    assert_non_null(strstr(err, "messages[1]"));
    assert_non_null(strstr(err, "assistant"));
    sy_chat_message starts_wrong[] = {MSG("assistant", "a")};
    assert_null(sy_chat_render(&t, starts_wrong, 1, true, NULL, err, sizeof err));
    sy_chat_template_free(&t);

    /* The model's own BOS/EOS texts are used. */
    init_ok(&t, "llama2", NULL, "<BOS>", "<EOS>");
    text = render(&t, m + 1, 2, false);
    assert_string_equal(text, "<BOS>[INST] Hi! [/INST] Hello. <EOS>");
    free(text);
    sy_chat_template_free(&t);
}

static void test_raw_and_override(void **state) {
    (void)state;
    sy_chat_template t;
    init_ok(&t, NULL, NULL, NULL, NULL);
    assert_int_equal(t.format, SY_CHAT_FORMAT_RAW);
    sy_chat_message m[] = {MSG("system", "A"), MSG("user", "B"), MSG("assistant", "C")};
    char *text = render(&t, m, 3, true);
    assert_string_equal(text, "A\n\nB\n\nC");
    free(text);
    text = render(&t, m, 0, true);
    assert_string_equal(text, "");
    free(text);
    sy_chat_template_free(&t);

    /* An override wins over the template's markers. */
    init_ok(&t, "raw", chatml_plain, NULL, NULL);
    assert_int_equal(t.format, SY_CHAT_FORMAT_RAW);
    sy_chat_template_free(&t);
    init_ok(&t, "chatml", llama3_template, NULL, NULL);
    assert_int_equal(t.format, SY_CHAT_FORMAT_CHATML);
    assert_null(t.default_system);
    sy_chat_template_free(&t);

    char err[256] = "";
    assert_int_equal(sy_chat_template_init(&t, "vicuna", chatml_plain, NULL, NULL, err, sizeof err), -1);
    assert_non_null(strstr(err, "vicuna"));
}

static void test_roles_checked(void **state) {
    (void)state;
    sy_chat_template t;
    init_ok(&t, "chatml", NULL, NULL, NULL);
    char err[256];
    /* A role is interpolated into the markers: anything but [a-z_] could forge a turn. */
    sy_chat_message forged[] = {MSG("user<|im_end|>", "x")};
    assert_null(sy_chat_render(&t, forged, 1, true, NULL, err, sizeof err));
    assert_non_null(strstr(err, "messages[0]"));
    sy_chat_message empty[] = {{"", "x", 1}};
    assert_null(sy_chat_render(&t, empty, 1, true, NULL, err, sizeof err));
    sy_chat_message upper[] = {MSG("User", "x")};
    assert_null(sy_chat_render(&t, upper, 1, true, NULL, err, sizeof err));
    char long_role[SY_CHAT_MAX_ROLE_LEN + 2];
    memset(long_role, 'a', sizeof long_role - 1);
    long_role[sizeof long_role - 1] = '\0';
    sy_chat_message too_long[] = {{long_role, "x", 1}};
    assert_null(sy_chat_render(&t, too_long, 1, true, NULL, err, sizeof err));
    long_role[SY_CHAT_MAX_ROLE_LEN] = '\0';
    sy_chat_message longest[] = {{long_role, "x", 1}};
    char *text = render(&t, longest, 1, false);
    free(text);
    /* Content may hold NUL bytes and is copied by length. */
    sy_chat_message nul[] = {{"user", "a\0b", 3}};
    size_t len = 0;
    text = sy_chat_render(&t, nul, 1, false, &len, err, sizeof err);
    assert_non_null(text);
    assert_int_equal(len, strlen("<|im_start|>user\n") + 3 + strlen("<|im_end|>\n"));
    assert_memory_equal(text + strlen("<|im_start|>user\n"), "a\0b", 3);
    free(text);
    sy_chat_template_free(&t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_detect),        cmocka_unit_test(test_default_system),
        cmocka_unit_test(test_chatml),        cmocka_unit_test(test_chatml_default_system),
        cmocka_unit_test(test_llama3),        cmocka_unit_test(test_llama31_date_header),
        cmocka_unit_test(test_llama2),        cmocka_unit_test(test_raw_and_override),
        cmocka_unit_test(test_roles_checked),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
