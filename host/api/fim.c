/* See fim.h. */
#include "api/fim.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/context.h"
#include "api/model_facts.h"
#include "base/util.h"
#include "plugins/loaded_model.h"

typedef struct tokens {
    int32_t *v;
    size_t n, cap;
} tokens;

static void push(tokens *t, const int32_t *ids, size_t n) {
    if (n == 0) return;
    if (t->n + n > t->cap) {
        size_t cap = t->cap ? t->cap : 64;
        while (cap < t->n + n) cap *= 2;
        t->v = sy_xrealloc(t->v, cap * sizeof *t->v);
        t->cap = cap;
    }
    memcpy(t->v + t->n, ids, n * sizeof *ids);
    t->n += n;
}

static void push1(tokens *t, int32_t id) { push(t, &id, 1); }

/* The last n of src (none when src is empty). */
static void push_tail(tokens *t, const tokens *src, size_t n) {
    if (n > 0) push(t, src->v + (src->n - n), n);
}

/* Text as plain text (no special tokens recognised, nothing added), as llama-server tokenizes FIM parts. */
static bool push_text(tokens *t, const sy_api_model *m, const char *text, uint32_t flags, sy_api_error *e,
                      const char *what) {
    if (text == NULL || text[0] == '\0') return true;
    char err[256] = "";
    size_t n = 0;
    int32_t *ids = sy_loaded_model_tokenize(m->lm, text, strlen(text), flags, &n, err, sizeof err);
    if (ids == NULL) {
        sy_api_fail(e, 400, "tokenize_failed", what, "%s could not be tokenized: %s", what, err);
        return false;
    }
    push(t, ids, n);
    free(ids);
    return true;
}

int32_t *sy_api_fim_prompt(sy_http_request *r, const sy_api_model *m, const sy_api_fim_input *in, size_t *n_out,
                           sy_api_error *e) {
    sy_api_context *srv = sy_api_ctx(r);
    const sy_config *cfg = sy_api_config_acquire(srv);
    const sy_config_model *cm = cfg ? sy_config_find_model(cfg, m->name) : NULL;
    char err[256] = "";
    cJSON *meta = cm ? sy_api_model_metadata(srv, cm, err, sizeof err) : NULL;
    sy_api_config_release(srv, cfg);
    sy_api_fim_tokens fim;
    sy_api_fim_tokens_of(meta, &fim);
    cJSON_Delete(meta);
    if (!sy_api_fim_supported(&fim)) {
        sy_api_fail(e, 400, "fim_not_supported", in->repo_header ? "input_suffix" : "suffix",
                    "model %s has no fill-in-the-middle tokens (prefix, suffix and middle): it cannot complete "
                    "between a prefix and a suffix%s%s",
                    m->name, err[0] ? "; " : "", err);
        return NULL;
    }
    uint32_t vocab = m->lm->info.n_vocab;
    if ((uint32_t)fim.pre >= vocab || (uint32_t)fim.suf >= vocab || (uint32_t)fim.mid >= vocab) {
        sy_api_fail(e, 400, "fim_not_supported", NULL, "model %s names FIM tokens outside its vocabulary", m->name);
        return NULL;
    }
    if (fim.rep >= 0 && (uint32_t)fim.rep >= vocab) fim.rep = -1;
    if (fim.sep >= 0 && (uint32_t)fim.sep >= vocab) fim.sep = -1;

    tokens prefix = {0}, suffix = {0}, prompt = {0}, extra = {0}, out = {0};
    bool ok = push_text(&prefix, m, in->prefix, 0, e, in->repo_header ? "input_prefix" : "prompt") &&
              push_text(&suffix, m, in->suffix, 0, e, in->repo_header ? "input_suffix" : "suffix") &&
              push_text(&prompt, m, in->prompt, SY_TOKENIZE_PARSE_SPECIAL, e, "prompt");
    if (ok && in->repo_header) {
        if (fim.rep >= 0) {
            push1(&extra, fim.rep);
            ok = push_text(&extra, m, "myproject\n", 0, e, "input_extra");
        }
        for (size_t i = 0; ok && i < in->n_extra; i++) {
            if (fim.sep >= 0) {
                const char *name = in->extra[i].filename ? in->extra[i].filename : "tmp";
                size_t len = strlen(name);
                char *line = sy_xmalloc(len + 2);
                memcpy(line, name, len);
                memcpy(line + len, "\n", 2);
                push1(&extra, fim.sep);
                ok = push_text(&extra, m, line, 0, e, "input_extra");
                free(line);
            } else {
                ok = push_text(&extra, m, "\n\n--- snippet ---\n\n", 0, e, "input_extra");
            }
            ok = ok && push_text(&extra, m, in->extra[i].text, 0, e, "input_extra");
        }
        if (ok && fim.sep >= 0) {
            push1(&extra, fim.sep);
            ok = push_text(&extra, m, "filename\n", 0, e, "input_extra");
        }
    }
    if (ok) {
        /* llama-server's budget: the prefix gets 3/4 of a batch (its end kept), the suffix what is left of the
         * last quarter (its start kept), the other files what the context has beyond a batch and twice n_predict */
        size_t n_prefix = prefix.n < 3 * (SY_FIM_BATCH / 4) ? prefix.n : 3 * (SY_FIM_BATCH / 4);
        long room = (long)(SY_FIM_BATCH / 4) - (long)(2 + prompt.n);
        size_t n_suffix = room <= 0 ? 0 : suffix.n < (size_t)room ? suffix.n : (size_t)room;
        long long extra_room = (long long)m->lm->info.n_ctx - SY_FIM_BATCH - 2 * (long long)in->n_predict;
        size_t n_extra = extra_room <= 0 ? 0 : extra.n < (unsigned long long)extra_room ? extra.n : (size_t)extra_room;
        push_tail(&out, &extra, n_extra);
        if (m->lm->info.add_bos && m->lm->info.bos_token >= 0) {
            /* BOS goes before the FIM prefix, after the extra context, as llama-server puts it */
            push1(&out, m->lm->info.bos_token);
        }
        push1(&out, fim.pre);
        push_tail(&out, &prefix, n_prefix);
        push(&out, prompt.v, prompt.n);
        push1(&out, fim.suf);
        push(&out, suffix.v, n_suffix);
        push1(&out, fim.mid);
        if (sy_api_check_context(m, out.n, in->repo_header ? "input_prefix" : "prompt", e) != 0) ok = false;
    }
    free(prefix.v);
    free(suffix.v);
    free(prompt.v);
    free(extra.v);
    if (!ok) {
        free(out.v);
        return NULL;
    }
    *n_out = out.n;
    return out.v;
}
