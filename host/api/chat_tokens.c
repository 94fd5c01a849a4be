/*
 * A chat's prompt tokens with message contents kept as text: the template's own markers are parsed as control
 * tokens, but a user who writes "<|im_start|>system" in a message gets those characters, not the tokens.
 *
 * The common case costs nothing: when no content holds the text of a control token, the rendered prompt is
 * tokenized in one pass exactly as before. Otherwise the chat is rendered a second time with a unique
 * placeholder for each content, which splits the template's text into the pieces around the contents; each
 * content is then found in the real rendering between its neighbouring pieces (as is, or as the template
 * trimmed it), and the prompt is tokenized as runs: template text with control tokens parsed, the contents
 * that hold control-token text without (contents without any stay inside the parsed runs, so they tokenize as
 * in one pass). This works whatever renders the template, as long as it copies contents through (it may trim).
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

typedef sy_api_token_run run;

typedef struct runs {
    run *v;
    size_t n, cap;
} runs;

static void add_run(runs *rs, size_t at, size_t len, bool plain) {
    if (len == 0) return;
    if (rs->n > 0 && !plain && !rs->v[rs->n - 1].plain && rs->v[rs->n - 1].at + rs->v[rs->n - 1].len == at) {
        rs->v[rs->n - 1].len += len; /* template text and clean contents: one parsed run */
        return;
    }
    if (rs->n == rs->cap) {
        rs->cap = rs->cap ? rs->cap * 2 : 16;
        rs->v = sy_xrealloc(rs->v, rs->cap * sizeof *rs->v);
    }
    rs->v[rs->n++] = (run){at, len, plain};
}

/* The rendered text split around each message's content. Builds the runs over *prompt (the real rendering when
 * every content was found in it, else the pieces joined with the contents as given). -1 with e on failure. */
static int split_contents(sy_http_request *r, const sy_api_model *m, const sy_chat_message *messages, size_t n,
                          bool add_generation_prompt, sy_buf *prompt, runs *rs, sy_api_error *e) {
    char nonce[40];
    snprintf(nonce, sizeof nonce, "%016llx", (unsigned long long)sy_api_random_seed());
    sy_chat_message *marked = sy_xcalloc(n ? n : 1, sizeof *marked);
    char **marks = sy_xcalloc(n ? n : 1, sizeof *marks);
    for (size_t i = 0; i < n; i++) {
        marked[i] = messages[i];
        char mark[80];
        snprintf(mark, sizeof mark, "@@sy-content-%s-%zu@@", nonce, i);
        marks[i] = sy_strdup(mark);
        marked[i].content = marks[i];
        marked[i].content_len = strlen(mark);
    }
    char *layout = NULL;
    size_t layout_len = 0;
    int rc = sy_api_render_chat(r, m, marked, n, add_generation_prompt, &layout, &layout_len, e);
    /* Pieces of template text: piece[i] precedes content i, piece[n] follows the last. */
    size_t *piece_at = sy_xcalloc(n + 1, sizeof *piece_at), *piece_len = sy_xcalloc(n + 1, sizeof *piece_len);
    bool *present = sy_xcalloc(n ? n : 1, sizeof *present);
    if (rc == 0) {
        size_t at = 0;
        size_t last = 0; /* the piece being measured starts here */
        size_t k = 0;    /* the piece index */
        for (size_t i = 0; i < n; i++) {
            size_t ml = strlen(marks[i]);
            const char *hit = memmem(layout + at, layout_len - at, marks[i], ml);
            if (hit == NULL) continue; /* the template left this message out */
            size_t h = (size_t)(hit - layout);
            piece_at[k] = last;
            piece_len[k] = h - last;
            present[i] = true;
            k++;
            at = last = h + ml;
        }
        piece_at[k] = last;
        piece_len[k] = layout_len - last;
        /* Rebuild: find each present content in the real rendering between its pieces; fall back to the pieces
         * joined with the contents as given. */
        char *real = NULL;
        size_t real_len = 0;
        sy_api_error ignored;
        bool matched = sy_api_render_chat(r, m, messages, n, add_generation_prompt, &real, &real_len, &ignored) == 0;
        size_t pos = 0;
        runs found = {0};
        if (matched && (piece_len[0] > real_len || memcmp(real, layout + piece_at[0], piece_len[0]) != 0))
            matched = false;
        if (matched) {
            add_run(&found, 0, piece_len[0], false);
            pos = piece_len[0];
        }
        for (size_t i = 0, p = 1; matched && i < n; i++) {
            if (!present[i]) continue;
            const char *c = messages[i].content;
            size_t cl = messages[i].content_len;
            const char *after = layout + piece_at[p];
            size_t after_len = piece_len[p];
            /* The content as given, or trimmed at either end or both, as templates do. */
            bool ok = false;
            for (int form = 0; form < 4 && !ok; form++) {
                const char *s = c;
                size_t len = cl;
                if (form & 1)
                    while (len > 0 && is_space(*s)) s++, len--;
                if (form & 2)
                    while (len > 0 && is_space(s[len - 1])) len--;
                if (pos + len + after_len > real_len || memcmp(real + pos, s, len) != 0 ||
                    memcmp(real + pos + len, after, after_len) != 0)
                    continue;
                add_run(&found, pos, len, holds_control_text(m->lm, s, len));
                add_run(&found, pos + len, after_len, false);
                pos += len + after_len;
                ok = true;
            }
            if (!ok) matched = false;
            p++;
        }
        if (matched && pos == real_len) {
            sy_buf_append(prompt, real, real_len);
            *rs = found;
        } else {
            free(found.v);
            sy_buf_append(prompt, layout + piece_at[0], piece_len[0]);
            add_run(rs, 0, piece_len[0], false);
            for (size_t i = 0, p = 1; i < n; i++) {
                if (!present[i]) continue;
                size_t at0 = prompt->len;
                sy_buf_append(prompt, messages[i].content, messages[i].content_len);
                add_run(rs, at0, messages[i].content_len,
                        holds_control_text(m->lm, messages[i].content, messages[i].content_len));
                at0 = prompt->len;
                sy_buf_append(prompt, layout + piece_at[p], piece_len[p]);
                add_run(rs, at0, piece_len[p], false);
                p++;
            }
        }
        free(real);
    }
    for (size_t i = 0; i < n; i++) free(marks[i]);
    free(marks);
    free(marked);
    free(layout);
    free(piece_at);
    free(piece_len);
    free(present);
    return rc;
}

int32_t *sy_api_chat_tokens(sy_http_request *r, const sy_api_model *m, const sy_chat_message *messages, size_t n,
                            bool add_generation_prompt, size_t *n_tokens, sy_api_error *e) {
    bool dirty = false;
    for (size_t i = 0; i < n && !dirty; i++)
        dirty = holds_control_text(m->lm, messages[i].content, messages[i].content_len);
    if (!dirty) {
        char *text = NULL;
        size_t len = 0;
        if (sy_api_render_chat(r, m, messages, n, add_generation_prompt, &text, &len, e) != 0) return NULL;
        int32_t *tokens = sy_api_tokenize_prompt(m, text, len, true, n_tokens, e);
        free(text);
        return tokens;
    }
    sy_buf prompt;
    sy_buf_init(&prompt);
    runs rs = {0};
    if (split_contents(r, m, messages, n, add_generation_prompt, &prompt, &rs, e) != 0) {
        sy_buf_free(&prompt);
        free(rs.v);
        return NULL;
    }
    int32_t *tokens = sy_api_tokenize_runs(m, prompt.data ? prompt.data : "", prompt.len, rs.v, rs.n, n_tokens, e);
    sy_buf_free(&prompt);
    free(rs.v);
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
