/*
 * A chat's prompt tokens with message contents kept as text: the template's own markers are parsed as control
 * tokens, but a user who writes "<|im_start|>system" in a message gets those characters, not the tokens.
 *
 * The common case costs nothing: when no content holds the text of a control token, the rendered prompt is
 * tokenized in one pass exactly as before. Otherwise each such content is found in the rendering (templates
 * copy contents through, perhaps trimmed at either end; messages are searched in order, from where the previous
 * one was found, and from the start where a template reordered them), and the prompt is tokenized as runs: the
 * template's text with control tokens parsed, those contents without. A content the rendering does not hold (a
 * template that dropped or rewrote it) leaves nothing to protect.
 */
#include "api/chat_tokens.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/prompt_budget.h"
#include "base/buf.h"
#include "base/util.h"
#include "plugins/loaded_model.h"

static bool holds_control_text(const sy_loaded_model *lm, const char *s, size_t len) {
    for (size_t i = 0; i < lm->n_control_texts; i++) {
        const char *needle = lm->control_texts[i];
        size_t n = strlen(needle);
        if (n > 0 && n <= len && memmem(s, len, needle, n) != NULL) return true;
    }
    return false;
}

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

typedef struct span {
    size_t at, len;
} span;

static int by_start(const void *a, const void *b) {
    const span *x = a, *y = b;
    return x->at < y->at ? -1 : x->at > y->at;
}

/* Where content (as given, else trimmed) occurs in text at or after from; false when it does not. */
static bool find_content(const char *text, size_t len, size_t from, const char *c, size_t cl, span *out) {
    for (int form = 0; form < 4; form++) {
        const char *s = c;
        size_t n = cl;
        if (form & 1)
            while (n > 0 && is_space(*s)) s++, n--;
        if (form & 2)
            while (n > 0 && is_space(s[n - 1])) n--;
        if (n == 0 || from > len) continue;
        const char *hit = memmem(text + from, len - from, s, n);
        if (hit != NULL) {
            *out = (span){(size_t)(hit - text), n};
            return true;
        }
    }
    return false;
}

int32_t *sy_api_chat_prompt_tokens(const sy_api_model *m, const char *text, size_t len,
                                   const sy_chat_message *messages, size_t n, size_t *n_tokens, sy_api_error *e) {
    span *plain = sy_xcalloc(n ? n : 1, sizeof *plain);
    size_t n_plain = 0, from = 0;
    for (size_t i = 0; i < n; i++) {
        if (!holds_control_text(m->lm, messages[i].content, messages[i].content_len)) continue;
        span at;
        if (!find_content(text, len, from, messages[i].content, messages[i].content_len, &at) &&
            !find_content(text, len, 0, messages[i].content, messages[i].content_len, &at))
            continue;
        plain[n_plain++] = at;
        from = at.at + at.len;
    }
    if (n_plain == 0) {
        free(plain);
        return sy_api_tokenize_prompt(m, text, len, true, n_tokens, e);
    }
    qsort(plain, n_plain, sizeof *plain, by_start);
    sy_api_token_run *runs = sy_xcalloc(2 * n_plain + 1, sizeof *runs);
    size_t n_runs = 0, pos = 0;
    for (size_t i = 0; i < n_plain; i++) {
        if (plain[i].at < pos) continue; /* overlaps one already taken (the same text twice) */
        if (plain[i].at > pos) runs[n_runs++] = (sy_api_token_run){pos, plain[i].at - pos, false};
        runs[n_runs++] = (sy_api_token_run){plain[i].at, plain[i].len, true};
        pos = plain[i].at + plain[i].len;
    }
    if (pos < len) runs[n_runs++] = (sy_api_token_run){pos, len - pos, false};
    int32_t *tokens = sy_api_tokenize_runs(m, text, len, runs, n_runs, n_tokens, e);
    free(runs);
    free(plain);
    return tokens;
}

int32_t *sy_api_chat_prompt_tokens_json(const sy_api_model *m, const char *text, size_t len, const cJSON *messages,
                                        size_t *n_tokens, sy_api_error *e) {
    /* every text a message carries: a string content, or the text of each of its parts */
    size_t cap = 0, n = 0;
    const cJSON *msg, *part;
    cJSON_ArrayForEach(msg, messages) {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(msg, "content");
        cap += cJSON_IsArray(c) ? (size_t)cJSON_GetArraySize(c) : 1;
    }
    sy_chat_message *items = sy_xcalloc(cap ? cap : 1, sizeof *items);
    cJSON_ArrayForEach(msg, messages) {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(msg, "content");
        if (cJSON_IsString(c)) {
            items[n++] = (sy_chat_message){"", c->valuestring, strlen(c->valuestring)};
        } else if (cJSON_IsArray(c)) {
            cJSON_ArrayForEach(part, c) {
                const cJSON *t = cJSON_GetObjectItemCaseSensitive(part, "text");
                if (cJSON_IsString(t) && n < cap) items[n++] = (sy_chat_message){"", t->valuestring, strlen(t->valuestring)};
            }
        }
    }
    int32_t *tokens = sy_api_chat_prompt_tokens(m, text, len, items, n, n_tokens, e);
    free(items);
    return tokens;
}

int32_t *sy_api_tokenize_runs(const sy_api_model *m, const char *text, size_t len, const sy_api_token_run *v,
                              size_t n_runs, size_t *n_tokens, sy_api_error *e) {
    if (sy_api_check_prompt_bytes(m->lm, m->name, len, "messages", e) != 0) return NULL;
    if (sy_api_tokenize_reserve(len, e) != 0) return NULL;
    int32_t *all = NULL;
    size_t count = 0;
    for (size_t i = 0; i < n_runs; i++) {
        char err[512] = "";
        size_t got = 0;
        uint32_t flags = v[i].plain ? 0u : (uint32_t)SY_TOKENIZE_PARSE_SPECIAL;
        int32_t *part = sy_loaded_model_tokenize(m->lm, text + v[i].at, v[i].len, flags, &got, err, sizeof err);
        if (part == NULL) {
            free(all);
            sy_api_tokenize_release(len);
            sy_api_fail(e, 400, "tokenize_failed", NULL, "the prompt could not be tokenized: %s", err);
            return NULL;
        }
        all = sy_xrealloc(all, (count + got + 1) * sizeof *all);
        memcpy(all + count, part, got * sizeof *part);
        count += got;
        free(part);
    }
    sy_api_tokenize_release(len);
    int32_t bos = m->lm->info.bos_token;
    if (m->lm->info.add_bos && bos >= 0 && (count == 0 || all[0] != bos)) {
        all = sy_xrealloc(all, (count + 1) * sizeof *all);
        memmove(all + 1, all, count * sizeof *all);
        all[0] = bos;
        count++;
    }
    if (count == 0) {
        free(all);
        sy_api_fail(e, 400, "empty_prompt", "messages", "the prompt is empty (and this model adds no BOS token)");
        return NULL;
    }
    if (sy_api_check_context(m, count, "messages", e) != 0) {
        free(all);
        return NULL;
    }
    *n_tokens = count;
    return all;
}
