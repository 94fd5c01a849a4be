/*
 * spec-drafter: a small model drafts greedily.
 *
 * The model is borrowed from the host by name (acquire_engine) for the drafter's lifetime. Each draft state owns
 * one sequence of that model and a mirror of its tokens. A proposal first brings the sequence in line with the
 * target's context (truncating what the target rejected, decoding what it accepted since), then decodes its own
 * greedy choices one at a time. Engine calls happen only inside propose/state_create/state_free, which the host
 * makes on the target's engine loop; the host lends this model to nobody else at the same time.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sd_internal.h"

#define SD_CATCHUP_CHUNK 512u   /* most context tokens decoded per call when catching up */
#define SD_SAMPLE_IDS 512u      /* the first ids compared at create (bytes, specials), plus spread ones */
#define SD_SAMPLE_SPREAD 256u
#define SD_MAX_TOKEN_BYTES 65536u

struct sd_model_drafter {
    char *name;
    const sy_engine_api *engine;
    sy_model *model;
    sy_engine_ref *ref;
    uint32_t n_vocab;
    uint32_t n_ctx;
};

struct sd_model_state {
    sy_seq *seq;
    int32_t *tokens; /* what seq holds */
    uint32_t n_tokens, cap_tokens;
    float *logits;   /* one row */
};

/* ---- create: borrow the model, compare the tokenizers ---- */

/* A token's bytes into *buf (grown as needed). Returns the length, or -1. */
static long token_bytes(const sy_engine_api *e, const sy_model *m, int32_t token, char **buf, size_t *cap) {
    for (int attempt = 0; attempt < 2; attempt++) {
        size_t got = 0;
        sy_status st = e->token_to_bytes(m, token, *buf, *cap, &got);
        if (st == SY_OK && got <= *cap) return (long)got;
        if (st != SY_ERR_BUFFER_TOO_SMALL || got <= *cap || got > SD_MAX_TOKEN_BYTES) return -1;
        char *grown = realloc(*buf, got);
        if (grown == NULL) return -1;
        *buf = grown;
        *cap = got;
    }
    return -1;
}

/* Printable form of a token's bytes for messages: "\xNN" for anything outside ASCII graphics. */
static void show_bytes(const char *b, long n, char *out, size_t size) {
    size_t w = 0;
    if (n < 0) {
        snprintf(out, size, "(no bytes)");
        return;
    }
    out[w++] = '"';
    for (long i = 0; i < n && w + 6 < size; i++) {
        unsigned char c = (unsigned char)b[i];
        if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') out[w++] = (char)c;
        else w += (size_t)snprintf(out + w, size - w, "\\x%02x", c);
    }
    if (w + 1 < size) out[w++] = '"';
    out[w < size ? w : size - 1] = '\0';
}

/* Compares token_to_bytes of a sample of ids. SY_OK, or SY_ERR_UNSUPPORTED naming the first difference. */
static sy_status compare_tokenizers(const char *draft_name, const sy_engine_api *de, const sy_model *dm,
                                    const char *target_name, const sy_engine_api *te, const sy_model *tm,
                                    uint32_t n_vocab) {
    size_t cap_a = 256, cap_b = 256;
    char *a = malloc(cap_a), *b = malloc(cap_b);
    sy_status st = SY_OK;
    if (a == NULL || b == NULL) {
        st = sd_fail(SY_ERR_OUT_OF_MEMORY, "out of memory comparing tokenizers");
        goto out;
    }
    uint32_t n_first = n_vocab < SD_SAMPLE_IDS ? n_vocab : SD_SAMPLE_IDS;
    uint32_t n_checks = n_first + SD_SAMPLE_SPREAD + 1;
    for (uint32_t i = 0; i < n_checks; i++) {
        uint32_t id;
        if (i < n_first) id = i;
        else if (i < n_first + SD_SAMPLE_SPREAD) id = (uint32_t)((uint64_t)(i - n_first) * n_vocab / SD_SAMPLE_SPREAD);
        else id = n_vocab - 1;
        long na = token_bytes(de, dm, (int32_t)id, &a, &cap_a);
        long nb = token_bytes(te, tm, (int32_t)id, &b, &cap_b);
        if (na == nb && (na <= 0 || memcmp(a, b, (size_t)na) == 0)) continue;
        char show_a[96], show_b[96];
        show_bytes(a, na, show_a, sizeof show_a);
        show_bytes(b, nb, show_b, sizeof show_b);
        st = sd_fail(SY_ERR_UNSUPPORTED,
                     "draft model '%.64s' has another tokenizer than '%.64s': token %u is %s in the draft model but "
                     "%s in the target",
                     draft_name, target_name, (unsigned)id, show_a, show_b);
        goto out;
    }
out:
    free(a);
    free(b);
    return st;
}

/* Borrowing through the host: the 1.2 callbacks look in this plugin's own host, the 1.0 ones in every host of
 * the process. */
static sy_status borrow(const sy_host_api *host, const char *name, const sy_engine_api **engine, sy_model **model,
                        sy_engine_ref **ref) {
    if (SY_HAS_FIELD(host, sy_host_api, release_engine_ctx) && host->acquire_engine_ctx && host->release_engine_ctx)
        return host->acquire_engine_ctx(host->context, name, engine, model, ref);
    return host->acquire_engine(name, engine, model, ref);
}

static void give_back(const sy_host_api *host, sy_engine_ref *ref) {
    if (SY_HAS_FIELD(host, sy_host_api, release_engine_ctx) && host->acquire_engine_ctx && host->release_engine_ctx)
        host->release_engine_ctx(host->context, ref);
    else
        host->release_engine(ref);
}

sy_status sd_model_create(const char *name, const char *target_name, uint32_t n_vocab, sd_model_drafter **out) {
    *out = NULL;
    const sy_host_api *host = sd_host();
    if (host == NULL || !SY_HAS_FIELD(host, sy_host_api, release_engine) || host->acquire_engine == NULL ||
        host->release_engine == NULL)
        return sd_fail(SY_ERR_UNSUPPORTED, "model drafter: the host lends no engines (acquire_engine)");
    if (target_name == NULL || target_name[0] == '\0')
        return sd_fail(SY_ERR_INVALID_ARGUMENT,
                       "model drafter: the target model's name is needed to compare the tokenizers");
    sd_model_drafter *m = calloc(1, sizeof *m);
    if (m == NULL || (m->name = strdup(name)) == NULL) {
        free(m);
        return sd_fail(SY_ERR_OUT_OF_MEMORY, "out of memory for a model drafter");
    }
    sy_status st = borrow(host, name, &m->engine, &m->model, &m->ref);
    if (st != SY_OK || m->engine == NULL || m->model == NULL) {
        free(m->name);
        free(m);
        return sd_fail(SY_ERR_UNSUPPORTED, "draft model '%.64s' is not available from the host (not loaded?)", name);
    }
    sy_model_info info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    st = m->engine->model_info(m->model, &info);
    if (st != SY_OK) {
        st = sd_fail(SY_ERR_UNSUPPORTED, "draft model '%.64s': no model info: %s", name, m->engine->error_message());
        goto fail;
    }
    if (info.n_vocab != n_vocab) {
        st = sd_fail(SY_ERR_UNSUPPORTED,
                     "draft model '%.64s' has a vocabulary of %u tokens, the target '%.64s' one of %u: they cannot "
                     "share token ids",
                     name, (unsigned)info.n_vocab, target_name, (unsigned)n_vocab);
        goto fail;
    }
    m->n_vocab = info.n_vocab;
    m->n_ctx = info.n_ctx;

    const sy_engine_api *te = NULL;
    sy_model *tm = NULL;
    sy_engine_ref *tref = NULL;
    if (borrow(host, target_name, &te, &tm, &tref) != SY_OK || te == NULL || tm == NULL) {
        st = sd_fail(SY_ERR_UNSUPPORTED, "model drafter: the target '%.64s' is not available to compare tokenizers",
                     target_name);
        goto fail;
    }
    st = compare_tokenizers(name, m->engine, m->model, target_name, te, tm, n_vocab);
    give_back(host, tref);
    if (st != SY_OK) goto fail;
    *out = m;
    return SY_OK;
fail:
    give_back(host, m->ref);
    free(m->name);
    free(m);
    return st;
}

void sd_model_destroy(sd_model_drafter *m) {
    if (m == NULL) return;
    const sy_host_api *host = sd_host();
    if (host != NULL) give_back(host, m->ref);
    free(m->name);
    free(m);
}

/* ---- states ---- */

sy_status sd_model_state_create(sd_model_drafter *m, sd_model_state **out) {
    *out = NULL;
    sd_model_state *st = calloc(1, sizeof *st);
    if (st == NULL || (st->logits = malloc((size_t)m->n_vocab * sizeof *st->logits)) == NULL) {
        free(st);
        return sd_fail(SY_ERR_OUT_OF_MEMORY, "out of memory for a model draft state");
    }
    if (m->engine->seq_create(m->model, &st->seq) != SY_OK || st->seq == NULL) {
        sy_status s = sd_fail(SY_ERR_OUT_OF_MEMORY, "draft model '%.64s': no sequence: %s", m->name,
                              m->engine->error_message());
        free(st->logits);
        free(st);
        return s;
    }
    *out = st;
    return SY_OK;
}

void sd_model_state_free(sd_model_drafter *m, sd_model_state *st) {
    if (st == NULL) return;
    if (st->seq != NULL) m->engine->seq_free(m->model, st->seq);
    free(st->tokens);
    free(st->logits);
    free(st);
}

static sy_status mirror_reserve(sd_model_state *st, uint32_t n) {
    if (n <= st->cap_tokens) return SY_OK;
    uint32_t cap = st->cap_tokens ? st->cap_tokens : 256;
    while (cap < n) cap = cap > UINT32_MAX / 2 ? n : cap * 2;
    int32_t *grown = realloc(st->tokens, (size_t)cap * sizeof *grown);
    if (grown == NULL) return sd_fail(SY_ERR_OUT_OF_MEMORY, "out of memory for %u draft tokens", cap);
    st->tokens = grown;
    st->cap_tokens = cap;
    return SY_OK;
}

/* Appends tokens to the draft sequence; logits of the last one into st->logits when want_logits. */
static sy_status decode_tokens(sd_model_drafter *m, sd_model_state *st, const int32_t *tokens, uint32_t n,
                               bool want_logits) {
    sy_status s = mirror_reserve(st, st->n_tokens + n);
    if (s != SY_OK) return s;
    sy_decode_item item;
    memset(&item, 0, sizeof item);
    item.struct_size = sizeof item;
    item.seq = st->seq;
    item.tokens = tokens;
    item.n_tokens = n;
    item.n_logits = want_logits ? 1 : 0;
    item.logits = want_logits ? st->logits : NULL;
    sy_decode_batch batch;
    memset(&batch, 0, sizeof batch);
    batch.struct_size = sizeof batch;
    batch.n_items = 1;
    batch.item_size = sizeof item;
    batch.items = &item;
    s = m->engine->decode(m->model, &batch);
    if (s != SY_OK)
        return sd_fail(s, "draft model '%.64s': decode failed: %s", m->name, m->engine->error_message());
    memmove(st->tokens + st->n_tokens, tokens, (size_t)n * sizeof *tokens);
    st->n_tokens += n;
    return SY_OK;
}

/* Drops the sequence's tokens from `keep` on; a model that cannot roll back that far starts over empty. */
static sy_status rollback(sd_model_drafter *m, sd_model_state *st, uint32_t keep) {
    if (keep >= st->n_tokens) return SY_OK;
    if (m->engine->seq_truncate(m->model, st->seq, keep) == SY_OK) {
        st->n_tokens = keep;
        return SY_OK;
    }
    m->engine->seq_free(m->model, st->seq);
    st->seq = NULL;
    st->n_tokens = 0;
    if (m->engine->seq_create(m->model, &st->seq) != SY_OK || st->seq == NULL) {
        st->seq = NULL;
        return sd_fail(SY_ERR_INTERNAL, "draft model '%.64s': no sequence: %s", m->name, m->engine->error_message());
    }
    return SY_OK;
}

static int32_t argmax(const float *v, uint32_t n) {
    uint32_t best = 0;
    for (uint32_t i = 1; i < n; i++)
        if (v[i] > v[best]) best = i;
    return (int32_t)best;
}

sy_status sd_model_propose(sd_model_drafter *m, sd_model_state *st, const int32_t *context, uint32_t n_context,
                           uint32_t k_max, int32_t *out, uint32_t *n_out) {
    *n_out = 0;
    if (st->seq == NULL) return sd_fail(SY_ERR_INTERNAL, "draft model '%.64s': the state lost its sequence", m->name);
    /* The draft model's context must hold the target's and the proposals but the last (never decoded). */
    if (n_context >= m->n_ctx) return SY_OK;
    if (k_max > m->n_ctx - n_context) k_max = m->n_ctx - n_context;

    /* Hold context[0..n_context-1): the last context token is decoded below for the logits that follow it. */
    uint32_t common = 0, limit = st->n_tokens < n_context - 1 ? st->n_tokens : n_context - 1;
    while (common < limit && st->tokens[common] == context[common]) common++;
    /* Only what reaches the engine needs checking: the tokens held already were checked when they came. */
    for (uint32_t i = common; i < n_context; i++)
        if (context[i] < 0 || (uint32_t)context[i] >= m->n_vocab)
            return sd_fail(SY_ERR_INVALID_ARGUMENT, "propose: context token %ld at %u is outside the vocabulary",
                           (long)context[i], (unsigned)i);
    sy_status s = rollback(m, st, common);
    if (s != SY_OK) return s;
    while (st->n_tokens < n_context) {
        uint32_t left = n_context - st->n_tokens;
        uint32_t chunk = left < SD_CATCHUP_CHUNK ? left : SD_CATCHUP_CHUNK;
        s = decode_tokens(m, st, context + st->n_tokens, chunk, chunk == left);
        if (s == SY_ERR_CONTEXT_FULL) return SY_OK;
        if (s != SY_OK) return s;
    }
    for (uint32_t k = 0; k < k_max; k++) {
        int32_t t = argmax(st->logits, m->n_vocab);
        out[k] = t;
        *n_out = k + 1;
        if (k + 1 == k_max) break;
        s = decode_tokens(m, st, &t, 1, true);
        if (s == SY_ERR_CONTEXT_FULL) break;
        if (s != SY_OK) return SY_OK; /* the proposals so far stand; the next propose resyncs */
    }
    return SY_OK;
}
