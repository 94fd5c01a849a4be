/* test-engine: the toy byte tokenizer. Tokens 0..255 are bytes; then named control tokens; then unused fillers. */
#include <stdio.h>
#include <string.h>

#include "te_internal.h"

static const char *const te_special_text[] = {
    [TE_TOKEN_BOS - 256] = "<|bos|>",
    [TE_TOKEN_EOS - 256] = "<|endoftext|>",
    [TE_TOKEN_IM_START - 256] = "<|im_start|>",
    [TE_TOKEN_IM_END - 256] = "<|im_end|>",
    [TE_TOKEN_PAD - 256] = "<|pad|>",
};
#define TE_N_NAMED_SPECIAL (sizeof te_special_text / sizeof te_special_text[0])

static int te_token_valid(const sy_model *model, int32_t token) {
    return token >= 0 && (uint32_t)token < model->cfg.n_vocab;
}

/* Writes the text of a control token into buf (at least 32 bytes); returns its length. */
static size_t te_special_to_text(int32_t token, char *buf, size_t size) {
    if (token < TE_FIRST_UNUSED) {
        size_t n = strlen(te_special_text[token - 256]);
        memcpy(buf, te_special_text[token - 256], n + 1);
        return n;
    }
    int n = snprintf(buf, size, "<|unused_%d|>", (int)(token - TE_FIRST_UNUSED));
    return n < 0 ? 0 : (size_t)n;
}

/* Length of the control token whose text starts at text[0..avail), writing its id; 0 when none matches. */
static size_t te_match_special(const sy_model *model, const char *text, size_t avail, int32_t *token) {
    if (avail < 2 || text[0] != '<' || text[1] != '|') return 0;
    for (size_t i = 0; i < TE_N_NAMED_SPECIAL; i++) {
        size_t n = strlen(te_special_text[i]);
        if (n <= avail && memcmp(text, te_special_text[i], n) == 0) {
            *token = (int32_t)(256 + i);
            return n;
        }
    }
    static const char unused_prefix[] = "<|unused_";
    size_t p = sizeof unused_prefix - 1;
    if (avail <= p || memcmp(text, unused_prefix, p) != 0) return 0;
    /* Digits without a leading zero (the canonical text), then "|>". */
    uint32_t k = 0;
    size_t digits = 0;
    while (p < avail && text[p] >= '0' && text[p] <= '9' && digits < 6) {
        if (digits == 1 && k == 0) return 0;
        k = k * 10 + (uint32_t)(text[p] - '0');
        p++, digits++;
    }
    if (digits == 0 || p + 2 > avail || text[p] != '|' || text[p + 1] != '>') return 0;
    if ((uint64_t)TE_FIRST_UNUSED + k >= model->cfg.n_vocab) return 0;
    *token = (int32_t)(TE_FIRST_UNUSED + k);
    return p + 2;
}

sy_status te_tokenize(const sy_model *model, const char *text, size_t text_len, uint32_t flags, int32_t *out,
                      size_t capacity, size_t *n_out) {
    if (model == NULL || n_out == NULL) return te_fail(SY_ERR_INVALID_ARGUMENT, "tokenize: model or n_out is NULL");
    if (text == NULL && text_len > 0) return te_fail(SY_ERR_INVALID_ARGUMENT, "tokenize: text is NULL");
    if (out == NULL && capacity > 0) return te_fail(SY_ERR_INVALID_ARGUMENT, "tokenize: out is NULL");
    if (flags & ~(uint32_t)(SY_TOKENIZE_ADD_SPECIAL | SY_TOKENIZE_PARSE_SPECIAL))
        return te_fail(SY_ERR_INVALID_ARGUMENT, "tokenize: unknown flags 0x%x", (unsigned)flags);
    size_t n = 0;
    if ((flags & SY_TOKENIZE_ADD_SPECIAL) && model->cfg.add_bos) {
        if (n < capacity) out[n] = TE_TOKEN_BOS;
        n++;
    }
    size_t i = 0;
    while (i < text_len) {
        int32_t token = (unsigned char)text[i];
        size_t used = 1;
        if (flags & SY_TOKENIZE_PARSE_SPECIAL) {
            int32_t special;
            size_t m = te_match_special(model, text + i, text_len - i, &special);
            if (m > 0) token = special, used = m;
        }
        if (n < capacity) out[n] = token;
        n++;
        i += used;
    }
    *n_out = n;
    if (n > capacity)
        return te_fail(SY_ERR_BUFFER_TOO_SMALL, "tokenize: %zu tokens do not fit in %zu", n, capacity);
    return SY_OK;
}

sy_status te_token_to_bytes(const sy_model *model, int32_t token, char *out, size_t capacity, size_t *n_out) {
    if (model == NULL || n_out == NULL)
        return te_fail(SY_ERR_INVALID_ARGUMENT, "token_to_bytes: model or n_out is NULL");
    if (out == NULL && capacity > 0) return te_fail(SY_ERR_INVALID_ARGUMENT, "token_to_bytes: out is NULL");
    if (!te_token_valid(model, token))
        return te_fail(SY_ERR_INVALID_ARGUMENT, "token %ld is outside the vocabulary of %u", (long)token,
                       (unsigned)model->cfg.n_vocab);
    char buf[32];
    size_t n;
    if (token < 256) {
        buf[0] = (char)token;
        n = 1;
    } else {
        n = te_special_to_text(token, buf, sizeof buf);
    }
    *n_out = n;
    if (n > capacity)
        return te_fail(SY_ERR_BUFFER_TOO_SMALL, "token_to_bytes: %zu bytes do not fit in %zu", n, capacity);
    memcpy(out, buf, n);
    return SY_OK;
}

uint32_t te_token_flags(const sy_model *model, int32_t token) {
    if (model == NULL) return 0;
#if SY_ABI_TARGET_MINOR >= 2
    if (!te_token_valid(model, token)) return SY_TOKEN_INVALID;
#else
    if (!te_token_valid(model, token)) return 0;
#endif
    if (token < 256) return SY_TOKEN_NORMAL;
    if (token == TE_TOKEN_EOS || token == TE_TOKEN_IM_END) return SY_TOKEN_CONTROL | SY_TOKEN_END_OF_GENERATION;
    if (token >= TE_FIRST_UNUSED) return SY_TOKEN_CONTROL | SY_TOKEN_UNUSED;
    return SY_TOKEN_CONTROL;
}
