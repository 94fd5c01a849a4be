/*
 * A model's own Jinja chat template applied to an OpenAI-style chat request, the way Hugging Face transformers'
 * apply_chat_template renders it (jinja2's ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks and
 * loopcontrols; tojson without ASCII escaping; raise_exception and strftime_now; the {% generation %} block).
 *
 * The request is a cJSON tree, passed into the template as transformers passes its Python objects:
 *   {
 *     "messages": [                                     -> messages (as given; no key is added or dropped)
 *       {"role": "system", "content": "..."},
 *       {"role": "user", "content": "..." | [{"type": "text", "text": "..."}, ...]},
 *       {"role": "assistant", "content": "..." | null, "reasoning_content": "...",
 *        "tool_calls": [{"id": "...", "type": "function",
 *                        "function": {"name": "...", "arguments": {...} | "..."}}]},
 *       {"role": "tool", "tool_call_id": "...", "name": "...", "content": "..."}
 *     ],
 *     "tools": [{"type": "function", "function": {"name", "description", "parameters"}}],   -> tools (none if absent)
 *     "documents": [...],                                -> documents (none if absent)
 *     "add_generation_prompt": true,                     -> add_generation_prompt (false if absent)
 *     "bos_token": "<s>", "eos_token": "</s>",           -> bos_token, eos_token (undefined if absent)
 *     "chat_template_kwargs": {"enable_thinking": false, "reasoning_effort": "low", ...}
 *                                                        -> each key a variable of its own (as **kwargs)
 *   }
 * Other top-level keys of the request (model, stream, temperature...) are not seen by the template.
 *
 * Message contents are data: the template prints them, they are never parsed as template text.
 *
 * Rendering is bounded (sy_chat_jinja_limits): output bytes, loop iterations, call depth, template size;
 * every failure, including a template's raise_exception("..."), comes back as one message, e.g.
 *   "chat template line 12: Conversation roles must alternate user/assistant/user/assistant/..."
 * and for raise_exception the text after "line N: " is exactly the template's message, as jinja2 reports it.
 */
#ifndef SY_HOST_CHAT_JINJA_H
#define SY_HOST_CHAT_JINJA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

/* A template compiled once (parsed to an AST); rendering it does not modify it, so one compiled template may be
 * rendered from several threads at once. */
typedef struct sy_chat_jinja sy_chat_jinja;

typedef struct sy_chat_jinja_limits {
    size_t max_output_bytes;     /* 0: SY_CHAT_JINJA_DEFAULT_MAX_OUTPUT */
    uint64_t max_steps;          /* loop iterations + calls + output writes; 0: SY_CHAT_JINJA_DEFAULT_MAX_STEPS */
    uint32_t max_depth;          /* nesting of macro calls, includes and recursion; 0: default */
} sy_chat_jinja_limits;

#define SY_CHAT_JINJA_DEFAULT_MAX_OUTPUT ((size_t)64 << 20)
#define SY_CHAT_JINJA_DEFAULT_MAX_STEPS ((uint64_t)50000000)
#define SY_CHAT_JINJA_DEFAULT_MAX_DEPTH 200u
/* Largest template source accepted by compile (bytes), and most AST nodes one template may have. */
#define SY_CHAT_JINJA_MAX_SOURCE ((size_t)1 << 20)
#define SY_CHAT_JINJA_MAX_NODES 1000000u

typedef struct sy_chat_jinja_options {
    sy_chat_jinja_limits limits;
    /* What strftime_now() formats: the current time when now_set is false, else now_unix (UTC). The environment
     * variable SY_CHAT_TEMPLATE_NOW (seconds since the epoch) overrides the current time too, for reproducible
     * renders (fixtures, tests). strftime_now formats local time as Python does; with now_set, UTC. */
    bool now_set;
    int64_t now_unix;
} sy_chat_jinja_options;

/* Compile a template (len bytes, need not be NUL-terminated). Returns NULL with err set ("chat template line N:
 * ...") for a syntax error or a template over the limits. */
sy_chat_jinja *sy_chat_jinja_compile(const char *source, size_t len, char *err, size_t err_size);
void sy_chat_jinja_free(sy_chat_jinja *t);

/*
 * Render a request (the object above) through a compiled template. options may be NULL (defaults). Returns the
 * malloc'd NUL-terminated text, *len its length (the text may hold no NUL: output is the template's literal text
 * and the request's strings, and JSON strings cannot carry one through cJSON), or NULL with err set.
 */
char *sy_chat_jinja_apply(const sy_chat_jinja *t, const cJSON *request, const sy_chat_jinja_options *options,
                          size_t *len, char *err, size_t err_size);

/* compile + apply + free, for one-off renders (the chat-template verb, tests). */
char *sy_chat_jinja_render(const char *source, size_t source_len, const cJSON *request,
                           const sy_chat_jinja_options *options, size_t *len, char *err, size_t err_size);

#endif
