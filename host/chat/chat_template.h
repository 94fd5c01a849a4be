/*
 * The built-in chat formats: a list of chat messages -> the prompt text, for models that carry no Jinja template
 * (models that do are rendered by their own template, chat_jinja.h). A template's format is recognised by the
 * markers in its text, and rendered in C:
 *   chatml  <|im_start|>ROLE\nCONTENT<|im_end|>\n ... <|im_start|>assistant\n      (Qwen, LFM2, SmolLM2)
 *   llama3  <|begin_of_text|><|start_header_id|>ROLE<|end_header_id|>\n\nCONTENT<|eot_id|> ...
 *   llama2  <s>[INST] <<SYS>>\nSYSTEM\n<</SYS>>\n\nUSER [/INST] ASSISTANT </s>
 *   raw     the contents joined by blank lines, no markers (models without a template)
 * A per-model override (config `chat_template = chatml|llama3|llama2|raw`) replaces the detection.
 */
#ifndef SY_HOST_CHAT_TEMPLATE_H
#define SY_HOST_CHAT_TEMPLATE_H

#include <stdbool.h>
#include <stddef.h>

typedef enum sy_chat_format {
    SY_CHAT_FORMAT_RAW = 0,
    SY_CHAT_FORMAT_CHATML,
    SY_CHAT_FORMAT_LLAMA3,
    SY_CHAT_FORMAT_LLAMA2
} sy_chat_format;

/* One message. content need not be NUL-terminated; role must be. */
typedef struct sy_chat_message {
    const char *role; /* "system", "user", "assistant", "tool", ... */
    const char *content;
    size_t content_len;
} sy_chat_message;

/* Longest role name accepted; roles are [a-z_] only so that no marker can be smuggled in through one. */
#define SY_CHAT_MAX_ROLE_LEN 32

/* A format with what it needs from the model's own template. */
typedef struct sy_chat_template {
    sy_chat_format format;
    /* chatml: the system prompt the model's template inserts when the conversation has none (Qwen 2/2.5,
     * SmolLM2); NULL when the template inserts none. */
    char *default_system;
    /* llama3: Llama 3.1+ templates always open with a system turn carrying "Cutting Knowledge Date" and
     * "Today Date" lines; date is the text after "Today Date: ". */
    bool llama3_date_header;
    char date[32];
    /* The model's BOS and EOS texts (llama3: "<|begin_of_text|>"; llama2: "<s>", "</s>"). */
    char *bos_text;
    char *eos_text;
} sy_chat_template;

/* "chatml", "llama3", "llama2", "raw" -> format; returns 0, or -1 for another name. */
int sy_chat_format_from_name(const char *name, sy_chat_format *out);
const char *sy_chat_format_name(sy_chat_format format);

/* The format a Jinja template implements, recognised by its markers; RAW for NULL, "" or an unknown one. */
sy_chat_format sy_chat_format_detect(const char *jinja);

/* The default system prompt a ChatML template inserts when the conversation has none (a literal
 * '<|im_start|>system\n...<|im_end|>' string in the template), malloc'd; NULL when there is none. */
char *sy_chat_template_default_system(const char *jinja);

/*
 * Set up a template: the format is override_name when given (an unknown name is an error), else detected from
 * jinja. bos_text / eos_text are the model's token texts (NULL: the format's usual ones). Returns 0, or -1 with
 * err set. The date of a llama3 date header is today's (UTC) when the template computes it with strftime_now,
 * else the templates' fixed "26 Jul 2024".
 */
int sy_chat_template_init(sy_chat_template *t, const char *override_name, const char *jinja, const char *bos_text,
                          const char *eos_text, char *err, size_t err_size);
void sy_chat_template_free(sy_chat_template *t);

/*
 * Render messages. With add_generation_prompt the text ends where the assistant's reply begins. Returns the
 * malloc'd NUL-terminated text (*len its length), or NULL with err set: a role that is not [a-z_]{1,32}, or a
 * conversation llama2 cannot express (roles must alternate user/assistant after an optional system message).
 */
char *sy_chat_render(const sy_chat_template *t, const sy_chat_message *messages, size_t n_messages,
                     bool add_generation_prompt, size_t *len, char *err, size_t err_size);

#endif
