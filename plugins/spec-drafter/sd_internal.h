/*
 * spec-drafter: drafters for speculative decoding behind "sy.drafter/1".
 *
 *   ngram            prompt lookup: the last n tokens (n from draft_ngram_max down to draft_ngram_min) are looked
 *                    up among the sequence's own earlier tokens, most recent occurrence first, and what followed
 *                    them is proposed. The n-grams sit in a hash map that grows with the context, so a proposal
 *                    costs a few hash probes, not a scan.
 *   model:NAME       a small model with the target's tokenizer, borrowed through host->acquire_engine, drafts
 *                    greedily with a sequence of its own that follows the target's accepted context.
 *   replay:FILE:PCT  benchmarks only: proposes a known continuation (FILE: token ids) with PCT percent of the
 *                    proposed positions corrupted, to measure the mechanics at a chosen acceptance rate.
 *
 * Options (key=value, from the model's engine options): draft_ngram_min (1), draft_ngram_max (4),
 * draft_replay_corrupt (percent, for "replay:FILE"), draft_replay_seed.
 */
#ifndef SY_SD_INTERNAL_H
#define SY_SD_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <switchyard/switchyard.h>

#define SD_PLUGIN_NAME "spec-drafter"
#define SD_MAX_NGRAM 32u            /* the longest n-gram an index may use */
#define SD_MAX_TOKENS (1u << 28)    /* the most tokens an index holds (a context or a replay file) */

/* The calling thread's last error (error_message()). */
const char *sd_error_message(void);
sy_status sd_fail(sy_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sd_log(sy_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The host API given to init (NULL before). */
const sy_host_api *sd_host(void);

/* ---- the n-gram index (sd_ngram.c) ------------------------------------------------------------------------ */

typedef struct sd_ngram_slot {
    uint64_t hash;
    uint32_t next; /* the position after the n-gram's last token; 0 marks an empty slot */
    uint32_t n;
} sd_ngram_slot;

/* Every n-gram (n_min <= n <= n_max) of a token sequence that has a following token, mapped to the position of
 * that token; a later occurrence replaces an earlier one, so a lookup finds the most recent. */
typedef struct sd_ngram_index {
    uint32_t n_min, n_max;
    int32_t *tokens; /* the indexed sequence (a copy) */
    uint32_t n_tokens, cap_tokens;
    sd_ngram_slot *slots;
    size_t cap_slots, used_slots; /* cap_slots: a power of two */
} sd_ngram_index;

void sd_ngram_init(sd_ngram_index *ix, uint32_t n_min, uint32_t n_max);
void sd_ngram_free(sd_ngram_index *ix);
void sd_ngram_reset(sd_ngram_index *ix);
/* Append tokens and index the n-grams they complete. SY_ERR_OUT_OF_MEMORY or SY_ERR_INVALID_ARGUMENT (too many
 * tokens) leave the index as it was. */
sy_status sd_ngram_append(sd_ngram_index *ix, const int32_t *tokens, uint32_t n);
/* Make the index hold exactly context[0..n): appends when the context extends what is indexed (checked on its
 * last tokens), rebuilds otherwise. */
sy_status sd_ngram_sync(sd_ngram_index *ix, const int32_t *context, uint32_t n);
/* The most recent position that followed the n tokens query[0..n) in the indexed sequence, or 0 if none. */
uint32_t sd_ngram_find(const sd_ngram_index *ix, const int32_t *query, uint32_t n);
/* Prompt lookup in the index's own sequence: looks up the tail of query[0..n_query) (the indexed tokens) from the
 * longest n down and writes up to k_max tokens that followed its most recent earlier occurrence. A continuation
 * that runs into the end of the sequence repeats itself (the tail is periodic). Returns the count (0: no match). */
uint32_t sd_ngram_propose(const sd_ngram_index *ix, const int32_t *query, uint32_t n_query, uint32_t k_max,
                          int32_t *out);

/* ---- the drafters ------------------------------------------------------------------------------------------ */

typedef enum sd_kind { SD_KIND_NGRAM = 1, SD_KIND_MODEL, SD_KIND_REPLAY } sd_kind;

typedef struct sd_model_drafter sd_model_drafter;
typedef struct sd_model_state sd_model_state;
typedef struct sd_replay sd_replay;

struct sy_drafter {
    uint32_t magic;
    sd_kind kind;
    uint32_t n_vocab;
    uint32_t ngram_min, ngram_max;
    sd_model_drafter *model;   /* SD_KIND_MODEL */
    sd_replay *replay;         /* SD_KIND_REPLAY */
};

struct sy_draft_state {
    uint32_t magic;
    sy_drafter *owner;
    sd_ngram_index ngram;      /* SD_KIND_NGRAM */
    sd_model_state *model;     /* SD_KIND_MODEL */
};

/* sd_model.c */
sy_status sd_model_create(const char *name, const char *target_name, uint32_t n_vocab, sd_model_drafter **out);
void sd_model_destroy(sd_model_drafter *m);
sy_status sd_model_state_create(sd_model_drafter *m, sd_model_state **out);
void sd_model_state_free(sd_model_drafter *m, sd_model_state *st);
sy_status sd_model_propose(sd_model_drafter *m, sd_model_state *st, const int32_t *context, uint32_t n_context,
                           uint32_t k_max, int32_t *out, uint32_t *n_out);

/* sd_replay.c */
sy_status sd_replay_create(const char *arg, uint32_t n_vocab, const sy_option *options, size_t n_options,
                           sd_replay **out);
void sd_replay_destroy(sd_replay *r);
uint32_t sd_replay_propose(const sd_replay *r, const int32_t *context, uint32_t n_context, uint32_t k_max,
                           int32_t *out);

/* Options: the value of `key` parsed as an unsigned decimal in [min, max]; absent leaves *out alone. */
sy_status sd_option_u32(const sy_option *options, size_t n_options, const char *key, uint32_t min, uint32_t max,
                        uint32_t *out);

#endif
