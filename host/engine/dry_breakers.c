/* See dry_breakers.h. */
#include "engine/dry_breakers.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

const char *const sy_dry_default_breakers[4] = {"\n", ":", "\"", "*"};

typedef struct builder {
    sy_dry_sequence *seq;
    size_t n_seq, cap_seq;
    int32_t *tails;
    size_t n_tails, cap_tails;
} builder;

static bool same_tail(const builder *b, const sy_dry_sequence *s, const int32_t *tail, uint32_t len) {
    return s->tail_len == len && (len == 0 || memcmp(b->tails + s->tail_offset, tail, len * sizeof *tail) == 0);
}

/* Adds (head, tail) unless this head already has that tail from this breaker (llama.cpp keeps one of each).
 * first_of_head: where this breaker's sequences of this head begin (they are appended together). */
static void add(builder *b, int32_t head, const int32_t *tail, uint32_t len, size_t first_of_head) {
    for (size_t i = first_of_head; i < b->n_seq; i++)
        if (b->seq[i].head == head && same_tail(b, &b->seq[i], tail, len)) return;
    if (b->n_seq == b->cap_seq) {
        b->cap_seq = b->cap_seq ? 2 * b->cap_seq : 64;
        b->seq = sy_xrealloc(b->seq, b->cap_seq * sizeof *b->seq);
    }
    if (b->n_tails + len > b->cap_tails) {
        while (b->n_tails + len > b->cap_tails) b->cap_tails = b->cap_tails ? 2 * b->cap_tails : 64;
        b->tails = sy_xrealloc(b->tails, b->cap_tails * sizeof *b->tails);
    }
    b->seq[b->n_seq++] = (sy_dry_sequence){head, (uint32_t)b->n_tails, len};
    if (len > 0) memcpy(b->tails + b->n_tails, tail, len * sizeof *tail);
    b->n_tails += len;
}

static int by_head(const void *x, const void *y) {
    const sy_dry_sequence *a = x, *c = y;
    if (a->head != c->head) return a->head < c->head ? -1 : 1;
    return a->tail_offset < c->tail_offset ? -1 : (a->tail_offset > c->tail_offset); /* stable: insertion order */
}

static const char *find_bytes(const char *hay, size_t hay_len, const char *needle, size_t needle_len) {
    for (size_t i = 0; needle_len <= hay_len && i <= hay_len - needle_len; i++)
        if (hay[i] == needle[0] && memcmp(hay + i, needle, needle_len) == 0) return hay + i;
    return NULL;
}

int sy_dry_breakers_build(const sy_dry_vocab *v, const char *const *breakers, size_t n_breakers, sy_dry_breakers *out,
                          char *err, size_t err_size) {
    memset(out, 0, sizeof *out);
    if (n_breakers > SY_DRY_MAX_BREAKERS) {
        snprintf(err, err_size, "%zu sequence breakers, more than %d", n_breakers, SY_DRY_MAX_BREAKERS);
        return -1;
    }
    for (size_t k = 0; k < n_breakers; k++) {
        size_t len = breakers[k] ? strlen(breakers[k]) : 0;
        if (len == 0 || len > SY_DRY_MAX_BREAKER_BYTES) {
            snprintf(err, err_size, "sequence breaker %zu must be 1 to %d bytes", k, SY_DRY_MAX_BREAKER_BYTES);
            return -1;
        }
    }
    builder b;
    memset(&b, 0, sizeof b);
    char *word = NULL;
    size_t word_cap = 0;
    int rc = 0;
    for (size_t k = 0; k < n_breakers && rc == 0; k++) {
        const char *str = breakers[k];
        size_t str_len = strlen(str);
        /* the tokenized rest of the breaker after its first i bytes, the same for every token: computed once */
        int32_t *rest[SY_DRY_MAX_BREAKER_BYTES + 1] = {0};
        size_t rest_n[SY_DRY_MAX_BREAKER_BYTES + 1] = {0};
        for (uint32_t id = 0; id < v->n_vocab && rc == 0; id++) {
            long wl = v->token_text(v->user, (int32_t)id, &word, &word_cap);
            if (wl <= 0) continue;
            size_t word_len = (size_t)wl;
            size_t first_of_head = b.n_seq;
            if (find_bytes(word, word_len, str, str_len) != NULL) {
                add(&b, (int32_t)id, NULL, 0, first_of_head);
                continue;
            }
            /* every place the word ends with the breaker's beginning */
            for (size_t pos = 0; pos < word_len; pos++) {
                if (word[pos] != str[0]) continue;
                size_t i = 1;
                while (i < str_len && pos + i < word_len && word[pos + i] == str[i]) i++;
                if (pos + i < word_len) continue; /* a mismatch before the word's end */
                if (rest[i] == NULL) {
                    rest[i] = v->tokenize(v->user, str + i, str_len - i, &rest_n[i]);
                    if (rest[i] == NULL) {
                        snprintf(err, err_size, "sequence breaker %zu: its end (from byte %zu) could not be tokenized",
                                 k, i);
                        rc = -1;
                        break;
                    }
                    if (rest_n[i] > SY_DRY_MAX_TAIL) rest_n[i] = SY_DRY_MAX_TAIL;
                }
                add(&b, (int32_t)id, rest[i], (uint32_t)rest_n[i], first_of_head);
            }
        }
        for (size_t i = 0; i <= SY_DRY_MAX_BREAKER_BYTES; i++) free(rest[i]);
    }
    free(word);
    if (rc != 0 || b.n_seq > UINT32_MAX || b.n_tails > UINT32_MAX) {
        if (rc == 0) snprintf(err, err_size, "the sequence breakers match too many tokens");
        free(b.seq);
        free(b.tails);
        return -1;
    }
    if (b.n_seq > 1) qsort(b.seq, b.n_seq, sizeof *b.seq, by_head);
    out->sequences = b.seq;
    out->n_sequences = (uint32_t)b.n_seq;
    out->tails = b.tails;
    out->n_tails = (uint32_t)b.n_tails;
    return 0;
}
