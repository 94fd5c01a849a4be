/* Tool-call parsers: outputs written the way each model family emits them, parsed whole and streamed (split at
 * every byte boundary, and one byte at a time); the stream's deltas must add up to the whole parse, and the
 * whole parse must be the expected content, reasoning and calls (arguments compared as JSON). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/buf.h"
#include "chat/tool_call.h"

typedef struct expected_call {
    const char *name;
    const char *args; /* JSON */
    const char *id;   /* NULL: generated */
} expected_call;

typedef struct parser_case {
    const char *label;
    sy_tool_format format;
    bool split_reasoning;
    bool reasoning_open;
    const char *think_open, *think_close;
    const char *text;
    const char *content;
    const char *reasoning;
    expected_call calls[4];
} parser_case;

#define DS(x) "<\xef\xbd\x9c" x "\xef\xbd\x9c>"

static const parser_case CASES[] = {
    {"hermes: text only", SY_TOOL_FORMAT_HERMES, true, false, NULL, NULL, "Hello there!\n", "Hello there!\n", "", {{0}}},
    {"hermes: qwen2.5 call", SY_TOOL_FORMAT_HERMES, true, false, NULL, NULL,
     "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}}\n</tool_call>",
     "", "", {{"get_weather", "{\"city\":\"Paris\",\"unit\":\"c\"}", NULL}}},
    {"hermes: qwen3 thinking, text, two calls", SY_TOOL_FORMAT_HERMES, true, false, NULL, NULL,
     "<think>\nThe user wants weather and time.\n</think>\n\nLet me check.\n<tool_call>\n{\"name\": \"get_weather\", "
     "\"arguments\": {\"city\": \"K\xc3\xb6ln\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": "
     "{\"tz\": \"Europe/Berlin\", \"nested\": {\"a\": [1, 2, {\"b\": \"}\"}]}}}\n</tool_call>",
     "Let me check.", "The user wants weather and time.",
     {{"get_weather", "{\"city\":\"K\xc3\xb6ln\"}", NULL},
      {"get_time", "{\"tz\":\"Europe/Berlin\",\"nested\":{\"a\":[1,2,{\"b\":\"}\"}]}}", NULL}}},
    {"hermes: qwen3 thinking opened by the prompt", SY_TOOL_FORMAT_HERMES, true, true, NULL, NULL,
     "Okay, think.\n</think>\n\nThe answer is 4.", "The answer is 4.", "Okay, think.", {{0}}},
    {"hermes: reasoning_format none keeps the block", SY_TOOL_FORMAT_HERMES, false, false, NULL, NULL,
     "<think>hm</think>Yes", "<think>hm</think>Yes", "", {{0}}},
    {"hermes: arguments key order reversed", SY_TOOL_FORMAT_HERMES, true, false, NULL, NULL,
     "<tool_call>{\"arguments\": {\"q\": \"x\"}, \"name\": \"search\"}</tool_call>", "", "",
     {{"search", "{\"q\":\"x\"}", NULL}}},
    {"hermes: not a call", SY_TOOL_FORMAT_HERMES, true, false, NULL, NULL, "Use <tool_call> tags like <tool_call>x",
     "Use <tool_call> tags like <tool_call>x", "", {{0}}},
    {"qwen3-coder: xml parameters", SY_TOOL_FORMAT_QWEN3_CODER, true, false, NULL, NULL,
     "I'll look.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nNew York\n</parameter>\n<parameter=days>\n3\n"
     "</parameter>\n</function>\n</tool_call>",
     "I'll look.", "", {{"get_weather", "{\"city\":\"New York\",\"days\":3}", NULL}}},
    {"llama3: json call", SY_TOOL_FORMAT_LLAMA3, true, false, NULL, NULL,
     "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Tokyo\"}}", "", "",
     {{"get_weather", "{\"city\":\"Tokyo\"}", NULL}}},
    {"llama3: json answer that is no call", SY_TOOL_FORMAT_LLAMA3, true, false, NULL, NULL, "{\"answer\": 42}",
     "{\"answer\": 42}", "", {{0}}},
    {"llama3: python_tag builtin", SY_TOOL_FORMAT_LLAMA3, true, false, NULL, NULL,
     "<|python_tag|>brave_search.call(query=\"weather in Paris\")", "", "",
     {{"brave_search", "{\"query\":\"weather in Paris\"}", NULL}}},
    {"mistral nemo: array with ids", SY_TOOL_FORMAT_MISTRAL, true, false, NULL, NULL,
     "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}, \"id\": \"abc123XYZ\"}]", "", "",
     {{"get_weather", "{\"city\":\"Rome\"}", NULL}}}, /* its id comes after the arguments: ours is used */
    {"mistral small 3.2 / devstral: name[ARGS]", SY_TOOL_FORMAT_MISTRAL, true, false, NULL, NULL,
     "Sure.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Oslo\"}[TOOL_CALLS]get_time[ARGS]{}", "Sure.", "",
     {{"get_weather", "{\"city\":\"Oslo\"}", NULL}, {"get_time", "{}", NULL}}},
    {"deepseek r1", SY_TOOL_FORMAT_DEEPSEEK, true, true, NULL, NULL,
     "Need the weather.\n</think>\n\n" DS("tool\xe2\x96\x81" "calls\xe2\x96\x81" "begin") DS("tool\xe2\x96\x81" "call\xe2\x96\x81" "begin")
     "function" DS("tool\xe2\x96\x81" "sep") "get_weather\n```json\n{\"city\": \"Lima\"}\n```" DS("tool\xe2\x96\x81" "call\xe2\x96\x81" "end")
     DS("tool\xe2\x96\x81" "calls\xe2\x96\x81" "end"),
     "", "Need the weather.", {{"get_weather", "{\"city\":\"Lima\"}", NULL}}},
    {"deepseek v3.1", SY_TOOL_FORMAT_DEEPSEEK, true, false, NULL, NULL,
     "Checking." DS("tool\xe2\x96\x81" "calls\xe2\x96\x81" "begin") DS("tool\xe2\x96\x81" "call\xe2\x96\x81" "begin") "get_weather"
     DS("tool\xe2\x96\x81" "sep") "{\"city\": \"Quito\"}" DS("tool\xe2\x96\x81" "call\xe2\x96\x81" "end") DS("tool\xe2\x96\x81" "call\xe2\x96\x81" "begin")
     "get_time" DS("tool\xe2\x96\x81" "sep") "{}" DS("tool\xe2\x96\x81" "call\xe2\x96\x81" "end") DS("tool\xe2\x96\x81" "calls\xe2\x96\x81" "end"),
     "Checking.", "", {{"get_weather", "{\"city\":\"Quito\"}", NULL}, {"get_time", "{}", NULL}}},
    {"gpt-oss: analysis then call", SY_TOOL_FORMAT_GPT_OSS, true, false, NULL, NULL,
     "<|channel|>analysis<|message|>User asks weather. Call tool.<|end|><|start|>assistant<|channel|>commentary "
     "to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Berlin\"}<|call|>",
     "", "User asks weather. Call tool.", {{"get_weather", "{\"city\":\"Berlin\"}", NULL}}},
    {"gpt-oss: analysis then final", SY_TOOL_FORMAT_GPT_OSS, true, false, NULL, NULL,
     "<|channel|>analysis<|message|>Simple.<|end|><|start|>assistant<|channel|>final<|message|>It is 4.", "It is 4.",
     "Simple.", {{0}}},
    {"lfm2: pythonic list", SY_TOOL_FORMAT_LFM2, true, false, NULL, NULL,
     "<|tool_call_start|>[get_weather(city=\"Paris\", days=2), get_time(tz='UTC', dst=False, tags=[\"a\", 'b'])]"
     "<|tool_call_end|>Checking both.",
     "Checking both.", "",
     {{"get_weather", "{\"city\":\"Paris\",\"days\":2}", NULL},
      {"get_time", "{\"tz\":\"UTC\",\"dst\":false,\"tags\":[\"a\",\"b\"]}", NULL}}},
    {"granite 3.3: thinking and call list", SY_TOOL_FORMAT_GRANITE, true, false, NULL, NULL,
     "<think>plan</think><|tool_call|>[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Bern\"}}]", "", "plan",
     {{"get_weather", "{\"city\":\"Bern\"}", NULL}}},
    {"command r7b: thinking, action", SY_TOOL_FORMAT_COMMAND_R, true, false, "<|START_THINKING|>", "<|END_THINKING|>",
     "<|START_THINKING|>I will search.<|END_THINKING|><|START_ACTION|>[\n    {\"tool_call_id\": \"0\", \"tool_name\": "
     "\"search\", \"parameters\": {\"query\": \"cats\"}}\n]<|END_ACTION|>",
     "", "I will search.", {{"search", "{\"query\":\"cats\"}", NULL}}},
    {"command r7b: response markers", SY_TOOL_FORMAT_COMMAND_R, true, false, "<|START_THINKING|>", "<|END_THINKING|>",
     "<|START_RESPONSE|>Hello!<|END_RESPONSE|>", "Hello!", "", {{0}}},
    {"functionary v3.1", SY_TOOL_FORMAT_FUNCTIONARY_3_1, true, false, NULL, NULL,
     "<function=get_weather>{\"city\": \"Cairo\"}</function>", "", "", {{"get_weather", "{\"city\":\"Cairo\"}", NULL}}},
    {"functionary v3.2: text then call", SY_TOOL_FORMAT_FUNCTIONARY_3_2, true, false, NULL, NULL,
     "all\nLet me check.>>>get_weather\n{\"city\": \"Delhi\"}", "Let me check.", "",
     {{"get_weather", "{\"city\":\"Delhi\"}", NULL}}},
    {"kimi k2", SY_TOOL_FORMAT_KIMI_K2, true, false, NULL, NULL,
     "Sure.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>"
     "{\"city\": \"Seoul\"}<|tool_call_end|><|tool_calls_section_end|>",
     "Sure.", "", {{"get_weather", "{\"city\":\"Seoul\"}", "functions.get_weather:0"}}},
    {"glm 4.6", SY_TOOL_FORMAT_GLM4, true, false, NULL, NULL,
     "<think>ok</think>\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Beijing</arg_value>\n"
     "<arg_key>days</arg_key>\n<arg_value>5</arg_value>\n</tool_call>",
     "", "ok", {{"get_weather", "{\"city\":\"Beijing\",\"days\":5}", NULL}}},
    {"minimax m1", SY_TOOL_FORMAT_MINIMAX_M1, true, false, NULL, NULL,
     "<think>x</think>\n<tool_calls>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Doha\"}}\n"
     "{\"name\": \"get_time\", \"arguments\": {}}\n</tool_calls>",
     "", "x", {{"get_weather", "{\"city\":\"Doha\"}", NULL}, {"get_time", "{}", NULL}}},
    {"apriel: tool_calls array", SY_TOOL_FORMAT_MINIMAX_M1, true, false, NULL, NULL,
     "<tool_calls>[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Riga\"}}]</tool_calls>", "", "",
     {{"get_weather", "{\"city\":\"Riga\"}", NULL}}},
    {"minimax m2", SY_TOOL_FORMAT_MINIMAX_M2, true, false, NULL, NULL,
     "<think>go</think>\n<minimax:tool_call>\n<invoke name=\"get_weather\">\n<parameter name=\"city\">Lagos</parameter>\n"
     "</invoke>\n</minimax:tool_call>",
     "", "go", {{"get_weather", "{\"city\":\"Lagos\"}", NULL}}},
    {"smollm3: hermes with thinking", SY_TOOL_FORMAT_HERMES, true, false, NULL, NULL,
     "<think>\nI should call.\n</think>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Lyon\"}}\n"
     "</tool_call>",
     "", "I should call.", {{"get_weather", "{\"city\":\"Lyon\"}", NULL}}},
    {"phi-4-mini", SY_TOOL_FORMAT_PHI4, true, false, NULL, NULL,
     "<|tool_call|>[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Nice\"}}]<|/tool_call|>", "", "",
     {{"get_weather", "{\"city\":\"Nice\"}", NULL}}},
    {"generic: parallel calls", SY_TOOL_FORMAT_GENERIC, true, false, NULL, NULL,
     "{\"tool_calls\":[{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}},{\"name\":\"get_time\","
     "\"arguments\":{\"tz\":\"CET\"}}]}",
     "", "", {{"get_weather", "{\"city\":\"Paris\"}", NULL}, {"get_time", "{\"tz\":\"CET\"}", NULL}}},
    {"generic: one call", SY_TOOL_FORMAT_GENERIC, true, false, NULL, NULL,
     "{\"tool_call\": {\"name\": \"get_time\", \"arguments\": {}}}", "", "", {{"get_time", "{}", NULL}}},
    {"generic: response", SY_TOOL_FORMAT_GENERIC, true, false, NULL, NULL,
     "{\"response\": \"It is sunny \\u00e9\\n\\\"ok\\\" \\ud83d\\ude00\"}", "It is sunny \xc3\xa9\n\"ok\" \xf0\x9f\x98\x80", "",
     {{0}}},
    {"generic: other JSON is the answer", SY_TOOL_FORMAT_GENERIC, true, false, NULL, NULL, "{\"x\": 1}", "{\"x\": 1}",
     "", {{0}}},
};

static size_t n_expected(const parser_case *c) {
    size_t n = 0;
    while (n < 4 && c->calls[n].name != NULL) n++;
    return n;
}

static sy_chat_parse_options options_of(const parser_case *c) {
    sy_chat_parse_options o = {.format = c->format, .parse_tools = true, .split_reasoning = c->split_reasoning,
                               .reasoning_open = c->reasoning_open, .think_open = c->think_open,
                               .think_close = c->think_close};
    return o;
}

static void check_json_equal(const char *label, const char *got, const char *want) {
    cJSON *a = cJSON_Parse(got), *b = cJSON_Parse(want);
    if (a == NULL || b == NULL || !cJSON_Compare(a, b, true)) fail_msg("%s: arguments %s, expected %s", label, got, want);
    cJSON_Delete(a);
    cJSON_Delete(b);
}

static void check_whole(const parser_case *c, const sy_chat_parse *p) {
    const char *content = p->content.data ? p->content.data : "";
    const char *reasoning = p->reasoning.data ? p->reasoning.data : "";
    if (strcmp(content, c->content) != 0) fail_msg("%s: content [%s], expected [%s]", c->label, content, c->content);
    if (strcmp(reasoning, c->reasoning) != 0)
        fail_msg("%s: reasoning [%s], expected [%s]", c->label, reasoning, c->reasoning);
    size_t n = n_expected(c);
    if (p->n_calls != n) fail_msg("%s: %zu calls, expected %zu", c->label, p->n_calls, n);
    for (size_t i = 0; i < n; i++) {
        if (strcmp(p->calls[i].name, c->calls[i].name) != 0)
            fail_msg("%s: call %zu is %s, expected %s", c->label, i, p->calls[i].name, c->calls[i].name);
        check_json_equal(c->label, p->calls[i].arguments.data ? p->calls[i].arguments.data : "", c->calls[i].args);
        if (c->calls[i].id != NULL && (p->calls[i].id == NULL || strcmp(p->calls[i].id, c->calls[i].id) != 0))
            fail_msg("%s: call %zu id %s, expected %s", c->label, i, p->calls[i].id ? p->calls[i].id : "(none)",
                     c->calls[i].id);
    }
}

typedef struct collected {
    sy_buf content, reasoning;
    sy_buf args[SY_TOOL_MAX_CALLS];
    char *names[SY_TOOL_MAX_CALLS];
    char *ids[SY_TOOL_MAX_CALLS];
    size_t n_calls;
    bool bad_order;
} collected;

static void collect(void *user, const sy_tool_delta *d) {
    collected *k = user;
    switch (d->type) {
    case SY_TOOL_DELTA_CONTENT: sy_buf_append(&k->content, d->text, d->len); break;
    case SY_TOOL_DELTA_REASONING: sy_buf_append(&k->reasoning, d->text, d->len); break;
    case SY_TOOL_DELTA_CALL_START:
        if (d->index != k->n_calls) k->bad_order = true;
        if (d->index < SY_TOOL_MAX_CALLS) {
            k->names[d->index] = strdup(d->name);
            k->ids[d->index] = strdup(d->id);
            sy_buf_init(&k->args[d->index]);
        }
        k->n_calls++;
        break;
    case SY_TOOL_DELTA_CALL_ARGS:
        if (d->index >= k->n_calls) k->bad_order = true;
        else sy_buf_append(&k->args[d->index], d->text, d->len);
        break;
    }
}

static void collected_free(collected *k) {
    sy_buf_free(&k->content);
    sy_buf_free(&k->reasoning);
    for (size_t i = 0; i < k->n_calls && i < SY_TOOL_MAX_CALLS; i++) {
        sy_buf_free(&k->args[i]);
        free(k->names[i]);
        free(k->ids[i]);
    }
}

static const char *str(const sy_buf *b) { return b->data ? b->data : ""; }

/* Feeds text in the pieces cut at `cuts` (ascending offsets) and checks the deltas add up to the whole parse. */
static void check_stream(const parser_case *c, const sy_chat_parse *whole, const size_t *cuts, size_t n_cuts,
                         const char *how) {
    sy_chat_parse_options o = options_of(c);
    sy_tool_stream s;
    sy_tool_stream_init(&s, &o, 42);
    collected k;
    memset(&k, 0, sizeof k);
    size_t len = strlen(c->text), at = 0;
    for (size_t i = 0; i <= n_cuts; i++) {
        size_t to = i < n_cuts ? cuts[i] : len;
        sy_tool_stream_feed(&s, c->text + at, to - at, collect, &k);
        at = to;
    }
    sy_tool_stream_finish(&s, collect, &k);
    if (s.violations != 0) fail_msg("%s (%s): %u parses did not extend the previous one", c->label, how, s.violations);
    if (k.bad_order) fail_msg("%s (%s): deltas out of order", c->label, how);
    if (strcmp(str(&k.content), str(&whole->content)) != 0)
        fail_msg("%s (%s): streamed content [%s] != [%s]", c->label, how, str(&k.content), str(&whole->content));
    if (strcmp(str(&k.reasoning), str(&whole->reasoning)) != 0)
        fail_msg("%s (%s): streamed reasoning [%s] != [%s]", c->label, how, str(&k.reasoning), str(&whole->reasoning));
    if (k.n_calls != whole->n_calls) fail_msg("%s (%s): %zu streamed calls != %zu", c->label, how, k.n_calls, whole->n_calls);
    for (size_t i = 0; i < k.n_calls; i++) {
        if (strcmp(k.names[i], whole->calls[i].name) != 0) fail_msg("%s (%s): name %zu", c->label, how, i);
        if (strcmp(str(&k.args[i]), str(&whole->calls[i].arguments)) != 0)
            fail_msg("%s (%s): streamed args %zu [%s] != [%s]", c->label, how, i, str(&k.args[i]),
                     str(&whole->calls[i].arguments));
        if (strcmp(k.ids[i], s.last.calls[i].id) != 0) fail_msg("%s (%s): id %zu differs", c->label, how, i);
        if (c->calls[i].id != NULL && strcmp(k.ids[i], c->calls[i].id) != 0)
            fail_msg("%s (%s): the model's id %zu was not kept", c->label, how, i);
    }
    collected_free(&k);
    sy_tool_stream_free(&s);
}

static void test_cases(void **state) {
    (void)state;
    for (size_t ci = 0; ci < sizeof CASES / sizeof CASES[0]; ci++) {
        const parser_case *c = &CASES[ci];
        sy_chat_parse_options o = options_of(c);
        sy_chat_parse whole;
        sy_chat_parse_init(&whole);
        size_t len = strlen(c->text);
        sy_chat_parse_text(&o, c->text, len, true, &whole);
        check_whole(c, &whole);
        for (size_t cut = 1; cut < len; cut++) check_stream(c, &whole, &cut, 1, "split");
        size_t *every = malloc(len * sizeof *every);
        for (size_t i = 0; i + 1 < len; i++) every[i] = i + 1;
        check_stream(c, &whole, every, len > 0 ? len - 1 : 0, "bytewise");
        free(every);
        sy_chat_parse_free(&whole);
    }
}

/* The streamed arguments arrive in fragments, id and name first: an OpenAI client's view. */
static void test_stream_order(void **state) {
    (void)state;
    const char *text = "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": \"xyz\", \"b\": 2}}\n</tool_call>";
    sy_chat_parse_options o = {.format = SY_TOOL_FORMAT_HERMES, .parse_tools = true, .split_reasoning = true};
    sy_tool_stream s;
    sy_tool_stream_init(&s, &o, 7);
    collected k;
    memset(&k, 0, sizeof k);
    size_t len = strlen(text), fragments = 0, before = 0;
    for (size_t i = 0; i < len; i++) {
        sy_tool_stream_feed(&s, text + i, 1, collect, &k);
        if (k.n_calls == 1 && k.args[0].len != before) fragments++, before = k.args[0].len;
    }
    sy_tool_stream_finish(&s, collect, &k);
    assert_int_equal(k.n_calls, 1);
    assert_true(fragments > 5);
    assert_string_equal(k.ids[0], s.last.calls[0].id);
    assert_true(strncmp(k.ids[0], "call_", 5) == 0);
    assert_int_equal(k.content.len, 0);
    collected_free(&k);
    sy_tool_stream_free(&s);
}

/* Tools not offered: markup stays content. */
static void test_no_tools(void **state) {
    (void)state;
    const char *text = "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>";
    sy_chat_parse_options o = {.format = SY_TOOL_FORMAT_HERMES, .parse_tools = false, .split_reasoning = true};
    sy_chat_parse p;
    sy_chat_parse_init(&p);
    sy_chat_parse_text(&o, text, strlen(text), true, &p);
    assert_int_equal(p.n_calls, 0);
    assert_string_equal(p.content.data, text);
    sy_chat_parse_free(&p);
}

/* Typed XML parameters follow the tool's schema: a string stays a string even when it reads as a number. */
static void test_xml_types(void **state) {
    (void)state;
    cJSON *tools = cJSON_Parse("[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\","
                               "\"properties\":{\"zip\":{\"type\":\"string\"},\"n\":{\"type\":\"integer\"}}}}}]");
    const char *text = "<tool_call>\n<function=f>\n<parameter=zip>\n01234\n</parameter>\n<parameter=n>\n7\n</parameter>\n"
                       "</function>\n</tool_call>";
    sy_chat_parse_options o = {.format = SY_TOOL_FORMAT_QWEN3_CODER, .parse_tools = true, .tools = tools};
    sy_chat_parse p;
    sy_chat_parse_init(&p);
    sy_chat_parse_text(&o, text, strlen(text), true, &p);
    assert_int_equal(p.n_calls, 1);
    assert_string_equal(p.calls[0].arguments.data, "{\"zip\":\"01234\",\"n\":7}");
    sy_chat_parse_free(&p);
    cJSON_Delete(tools);
}

/* Formats detected from the real templates (tests/fixtures/chat-templates/templates). */
static void test_detect(void **state) {
    (void)state;
    static const struct {
        const char *file;
        sy_tool_format format;
        bool thinking;
    } T[] = {
        {"Qwen-Qwen2.5-7B-Instruct.jinja", SY_TOOL_FORMAT_HERMES, false},
        {"Qwen-Qwen3-0.6B.jinja", SY_TOOL_FORMAT_HERMES, true},
        {"Qwen3-Coder.jinja", SY_TOOL_FORMAT_QWEN3_CODER, false},
        {"meta-llama-Llama-3.1-8B-Instruct.jinja", SY_TOOL_FORMAT_LLAMA3, false},
        {"meta-llama-Llama-3.2-3B-Instruct.jinja", SY_TOOL_FORMAT_LLAMA3, false},
        {"mistralai-Mistral-Nemo-Instruct-2407.jinja", SY_TOOL_FORMAT_MISTRAL, false},
        {"Mistral-Small-3.2-24B-Instruct-2506.jinja", SY_TOOL_FORMAT_MISTRAL, false},
        {"deepseek-ai-DeepSeek-V3.1.jinja", SY_TOOL_FORMAT_DEEPSEEK, true},
        {"llama-cpp-deepseek-r1.jinja", SY_TOOL_FORMAT_DEEPSEEK, true},
        {"openai-gpt-oss-120b.jinja", SY_TOOL_FORMAT_GPT_OSS, true},
        {"LFM2.5-Instruct.jinja", SY_TOOL_FORMAT_LFM2, true},
        {"ibm-granite-granite-3.3-2B-Instruct.jinja", SY_TOOL_FORMAT_GRANITE, true},
        {"CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja", SY_TOOL_FORMAT_COMMAND_R, true},
        {"meetkai-functionary-medium-v3.1.jinja", SY_TOOL_FORMAT_FUNCTIONARY_3_1, false},
        {"meetkai-functionary-medium-v3.2.jinja", SY_TOOL_FORMAT_FUNCTIONARY_3_2, false},
        {"moonshotai-Kimi-K2.jinja", SY_TOOL_FORMAT_KIMI_K2, false},
        {"GLM-4.6.jinja", SY_TOOL_FORMAT_GLM4, true},
        {"MiniMax-M1.jinja", SY_TOOL_FORMAT_MINIMAX_M1, false},
        {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", SY_TOOL_FORMAT_HERMES, false},
        {"microsoft-Phi-3.5-mini-instruct.jinja", SY_TOOL_FORMAT_GENERIC, false},
        {"google-gemma-2-2b-it.jinja", SY_TOOL_FORMAT_GENERIC, false},
    };
    const char *src = getenv("SY_SOURCE_DIR");
    char path[1024];
    for (size_t i = 0; i < sizeof T / sizeof T[0]; i++) {
        snprintf(path, sizeof path, "%s/tests/fixtures/chat-templates/templates/%s", src ? src : ".", T[i].file);
        FILE *f = fopen(path, "rb");
        if (f == NULL) fail_msg("%s: missing", path);
        sy_buf b;
        sy_buf_init(&b);
        sy_buf_read(&b, f, 1 << 20);
        fclose(f);
        sy_template_traits tr;
        sy_template_traits_detect(b.data, &tr);
        if (tr.tool_format != T[i].format)
            fail_msg("%s: detected %s, expected %s", T[i].file, sy_tool_format_name(tr.tool_format),
                     sy_tool_format_name(T[i].format));
        if (tr.thinking != T[i].thinking) fail_msg("%s: thinking %d", T[i].file, tr.thinking);
        sy_buf_free(&b);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cases),   cmocka_unit_test(test_stream_order), cmocka_unit_test(test_no_tools),
        cmocka_unit_test(test_xml_types), cmocka_unit_test(test_detect),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
