/*
 * A model's chat output -> content, reasoning and tool calls, in the format its chat template teaches.
 *
 * Each format is a parser of the whole output text so far (tool_call_*.c). A parse of a prefix of the output
 * (final = false) reports only what can no longer change: content without a trailing piece that could still
 * begin a marker (or that is only whitespace), a tool call only once its name is complete, its arguments as
 * the JSON text known so far. So the parse of any prefix is a prefix of the parse of the whole, which is what
 * the stream (sy_tool_stream) relies on to turn successive parses into deltas: content and reasoning pieces,
 * then per call its index, id and name once, and its arguments in fragments. The tests feed every output split
 * at every byte boundary and require the same result as one parse of the whole.
 *
 * Arguments are always a JSON object's text: verbatim where the model writes JSON, built from the parameters
 * for the XML and pythonic formats (one parameter at a time, once it is complete).
 */
#ifndef SY_HOST_CHAT_TOOL_CALL_H
#define SY_HOST_CHAT_TOOL_CALL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "base/buf.h"

typedef enum sy_tool_format {
    SY_TOOL_FORMAT_NONE = 0,     /* plain text: no tool calls recognised (reasoning still split) */
    SY_TOOL_FORMAT_GENERIC,      /* templates without tools: {"tool_calls":[{"name","arguments"}]} | {"response"} */
    SY_TOOL_FORMAT_HERMES,       /* <tool_call>{"name","arguments"}</tool_call>: Hermes, Qwen2.5, Qwen3, SmolLM3 */
    SY_TOOL_FORMAT_QWEN3_CODER,  /* <tool_call><function=N><parameter=P>V</parameter></function></tool_call> */
    SY_TOOL_FORMAT_LLAMA3,       /* {"name","parameters"} or <|python_tag|>: Llama 3.1, 3.2, 3.3 */
    SY_TOOL_FORMAT_MISTRAL,      /* [TOOL_CALLS][{...}] (Nemo) or [TOOL_CALLS]name[ARGS]{...} (Small 3.2, Devstral) */
    SY_TOOL_FORMAT_DEEPSEEK,     /* <｜tool▁calls▁begin｜>...: R1 (function<｜tool▁sep｜>name ```json) and V3.1 */
    SY_TOOL_FORMAT_GPT_OSS,      /* harmony channels: analysis, commentary to=functions.N, final */
    SY_TOOL_FORMAT_LFM2,         /* <|tool_call_start|>[f(a=1), g(b="x")]<|tool_call_end|> (pythonic) */
    SY_TOOL_FORMAT_GRANITE,      /* <|tool_call|>[{"name","arguments"}] (Granite 3.x) */
    SY_TOOL_FORMAT_COMMAND_R,    /* <|START_ACTION|>[{"tool_name","parameters"}]<|END_ACTION|> */
    SY_TOOL_FORMAT_FUNCTIONARY_3_1, /* <function=N>{...}</function> */
    SY_TOOL_FORMAT_FUNCTIONARY_3_2, /* >>>all\ntext >>>N\n{...} */
    SY_TOOL_FORMAT_KIMI_K2,      /* <|tool_calls_section_begin|><|tool_call_begin|>functions.N:0<|tool_call_argument_begin|>{} */
    SY_TOOL_FORMAT_GLM4,         /* <tool_call>N\n<arg_key>k</arg_key><arg_value>v</arg_value></tool_call> */
    SY_TOOL_FORMAT_MINIMAX_M1,   /* <tool_calls>\n{"name","arguments"}\n...</tool_calls> (also a JSON array: Apriel) */
    SY_TOOL_FORMAT_MINIMAX_M2,   /* <minimax:tool_call><invoke name="N"><parameter name="k">v</parameter></invoke> */
    SY_TOOL_FORMAT_PHI4,         /* <|tool_call|>[{"name","arguments"}]<|/tool_call|> */
    SY_TOOL_FORMAT_COUNT
} sy_tool_format;

const char *sy_tool_format_name(sy_tool_format f);
/* "hermes", ... -> format; -1 for an unknown name. */
int sy_tool_format_from_name(const char *name, sy_tool_format *out);

/* What a chat template teaches, read from its text (NULL or "" -> nothing). */
typedef struct sy_template_traits {
    sy_tool_format tool_format;  /* GENERIC when the template renders no tools */
    bool supports_tools;         /* the template renders `tools` itself */
    bool thinking;               /* the template has thinking blocks */
    bool thinking_levels;        /* reasoning effort levels (gpt-oss: low, medium, high) */
    const char *think_open, *think_close; /* the markers of a thinking block ("<think>", "</think>") */
    bool mistral_args;           /* Mistral: name[ARGS]{...} (Small 3.2, Devstral) rather than a JSON list */
    bool deepseek_r1;            /* DeepSeek: function<｜tool▁sep｜>name + a ```json block (R1) */
} sy_template_traits;

void sy_template_traits_detect(const char *jinja, sy_template_traits *out);

/* One tool call. */
typedef struct sy_tool_call {
    char *name;
    char *id;            /* given by the model (Kimi K2, Mistral, Command R), else NULL */
    sy_buf arguments;    /* JSON object text; while streaming, a prefix of it */
    bool complete;       /* the call's end was seen */
} sy_tool_call;

#define SY_TOOL_MAX_CALLS 128

typedef struct sy_chat_parse {
    sy_buf content;
    sy_buf reasoning;
    sy_tool_call calls[SY_TOOL_MAX_CALLS];
    size_t n_calls;
    bool truncated_calls;  /* more calls than SY_TOOL_MAX_CALLS: the rest were dropped */
} sy_chat_parse;

typedef struct sy_chat_parse_options {
    sy_tool_format format;
    bool parse_tools;        /* false: tool markup stays content (no tools were offered) */
    bool split_reasoning;    /* reasoning_format != none */
    bool reasoning_open;     /* the prompt ended inside a thinking block (the template opened it) */
    const char *think_open, *think_close; /* NULL: "<think>", "</think>" */
    const cJSON *tools;      /* the request's tools (OpenAI shape), for parameter types of XML formats; may be NULL */
} sy_chat_parse_options;

void sy_chat_parse_init(sy_chat_parse *p);
void sy_chat_parse_free(sy_chat_parse *p);
/* Parses text[0..len). final: this is the whole output. Never fails: what is not a call is content. */
void sy_chat_parse_text(const sy_chat_parse_options *o, const char *text, size_t len, bool final,
                        sy_chat_parse *out);

/* ---- streaming ------------------------------------------------------------------------------------------ */

typedef enum sy_tool_delta_type {
    SY_TOOL_DELTA_CONTENT,
    SY_TOOL_DELTA_REASONING,
    SY_TOOL_DELTA_CALL_START, /* index, id, name */
    SY_TOOL_DELTA_CALL_ARGS,  /* index, text: a fragment of the arguments */
} sy_tool_delta_type;

typedef struct sy_tool_delta {
    sy_tool_delta_type type;
    size_t index;
    const char *id, *name;
    const char *text;
    size_t len;
} sy_tool_delta;

typedef void (*sy_tool_delta_fn)(void *user, const sy_tool_delta *d);

typedef struct sy_tool_stream {
    sy_chat_parse_options opts;
    sy_buf text;             /* the output so far */
    size_t sent_content, sent_reasoning;
    size_t sent_calls;       /* calls whose start went out */
    size_t sent_args[SY_TOOL_MAX_CALLS];
    char *ids[SY_TOOL_MAX_CALLS];
    uint64_t id_seed;        /* call ids: "call_" + 24 hex digits from this seed and the index */
    unsigned violations;     /* a parse that did not extend the previous one (a parser bug; counted for tests) */
    sy_chat_parse last;
} sy_tool_stream;

void sy_tool_stream_init(sy_tool_stream *s, const sy_chat_parse_options *o, uint64_t id_seed);
void sy_tool_stream_free(sy_tool_stream *s);
/* Appends output text and reports what is new. */
void sy_tool_stream_feed(sy_tool_stream *s, const char *text, size_t len, sy_tool_delta_fn fn, void *user);
/* The end of the output: reports the rest; s->last then holds the final parse, with ids filled in. */
void sy_tool_stream_finish(sy_tool_stream *s, sy_tool_delta_fn fn, void *user);
/* The id of call i (after it started). */
const char *sy_tool_stream_call_id(const sy_tool_stream *s, size_t i);

#endif
