/*
 * The scheduler of one loaded model: `parallel` slots, one engine-loop thread, continuous batching.
 *
 * Each step of the engine loop builds ONE sy_decode_batch holding the next token of every decoding slot plus a
 * chunk of pending prompt (prefill) of slots that are still reading their prompt, calls decode once, then samples
 * for every slot that produced logits and emits events. A new request takes the free slot whose cached tokens
 * share the longest prefix with its prompt (the slot's KV stays warm after a request ends), so a second chat turn
 * only prefills what is new. Requests beyond the free slots wait in a bounded FIFO queue.
 *
 * Threading: submit/cancel/release may be called from any thread (HTTP worker threads). Event callbacks run on
 * the engine-loop thread: they must be quick (copy the text into the connection's queue and return).
 */
#ifndef SY_HOST_SCHEDULER_H
#define SY_HOST_SCHEDULER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "plugins/loaded_model.h"
#include "engine/dry_breakers.h"
#include "engine/sampler.h"

#define SY_GEN_MAX_STOP_STRINGS 16
#define SY_GEN_MAX_TOP_LOGPROBS 20
#define SY_GEN_MAX_TRIGGERS 16 /* trigger words, and trigger tokens, of a lazy constraint */

struct sy_grammar;

typedef struct sy_scheduler sy_scheduler;
typedef struct sy_gen sy_gen; /* one submitted generation */

/* Constrained decoding (host/grammar): every output token is one the grammar allows, and an end-of-generation
 * token comes only where the grammar is complete. With trigger words or tokens the grammar is lazy: the output
 * is free until a trigger appears, and constrained from the trigger on (sy_grammar_triggers). */
typedef struct sy_gen_constraint {
    struct sy_grammar *grammar; /* NULL: unconstrained. The scheduler takes its own reference at submit */
    const char *trigger_words[SY_GEN_MAX_TRIGGERS]; /* copied at submit */
    size_t n_trigger_words;
    int32_t trigger_tokens[SY_GEN_MAX_TRIGGERS];
    size_t n_trigger_tokens;
} sy_gen_constraint;

typedef struct sy_gen_params {
    sy_sampler_params sampling;
    uint32_t max_tokens;              /* 0: until the context is full */
    const char *stop[SY_GEN_MAX_STOP_STRINGS]; /* stop strings (copied at submit); the text stops before them */
    size_t n_stop;
    bool ignore_eos;                  /* do not stop at end-of-generation tokens */
    uint32_t top_logprobs;            /* 0..SY_GEN_MAX_TOP_LOGPROBS alternatives per token */
    bool logprobs;                    /* report the chosen token's log-probability */
    bool speculative;                 /* allow the model's drafter (when configured); default true */
    bool special_text;                /* control tokens' text is output too (tool-call and channel markers that
                                         are special tokens: gpt-oss, Kimi K2, DeepSeek); end tokens never are */
    /* Output constrained by a grammar. Such a generation is always sampled by the host. It ends with "stop" once
     * the grammar can take nothing more (or at an end-of-generation token where the grammar is complete), with
     * "length" at max_tokens, and with ERROR when a grammar step hits a resource limit. */
    sy_gen_constraint constraint;
    /* DRY's sequence breakers (sampling.dry_*), tokenized over the model's vocabulary at submit; none given: llama.cpp's
     * defaults "\n", ":", "\"", "*". At most SY_DRY_MAX_BREAKERS of 1 to SY_DRY_MAX_BREAKER_BYTES bytes. */
    const char *dry_breakers[SY_DRY_MAX_BREAKERS];
    size_t n_dry_breakers;
} sy_gen_params;

sy_gen_params sy_gen_params_defaults(void);

typedef enum sy_gen_event_type {
    SY_GEN_EVENT_TEXT,  /* a piece of output text (valid UTF-8, never part of a stop string) */
    SY_GEN_EVENT_DONE,  /* the end: finish_reason and usage are set; no event follows */
    SY_GEN_EVENT_ERROR  /* the end, failed: message is set; no event follows */
} sy_gen_event_type;

typedef struct sy_gen_logprob {
    int32_t token;
    double logprob;
} sy_gen_logprob;

typedef struct sy_gen_usage {
    uint32_t prompt_tokens;
    uint32_t cached_tokens;     /* prompt tokens whose KV was reused instead of prefilled */
    uint32_t completion_tokens;
    double queue_seconds;       /* waiting for a slot */
    double prompt_seconds;      /* submit (after queueing) to first token */
    double generation_seconds;  /* first token to the end */
    uint32_t drafted_tokens;
    uint32_t accepted_tokens;
} sy_gen_usage;

/* Events of one generation, in order: TEXT pieces, then exactly one DONE or ERROR.
 * Without logprobs a TEXT event comes only when there is text to send. With logprobs (or top_logprobs) every
 * generated token gets exactly one TEXT event carrying its logprob, even when its text is empty (control tokens,
 * or text held back because it may begin a stop string); held text released later (or at the end) comes in an
 * event with token -1 and no logprob. An end-of-generation token that stops the generation gets no event. */
typedef struct sy_gen_event {
    sy_gen_event_type type;
    const char *text;           /* TEXT: the piece (not NUL-terminated); valid only during the callback */
    size_t text_len;
    int32_t token;              /* TEXT: the token that completed this piece (-1 when the piece is held text) */
    double logprob;             /* TEXT with logprobs */
    const sy_gen_logprob *top;  /* TEXT with top_logprobs: n_top alternatives, best first */
    uint32_t n_top;
    const char *finish_reason;  /* DONE: "stop" (end token or stop string), "length", "cancelled" */
    sy_gen_usage usage;         /* DONE and ERROR */
    const char *message;        /* ERROR */
    int stop_index;             /* DONE: the stop string that ended it (its index among the non-empty ones), or -1 */
} sy_gen_event;

typedef void (*sy_gen_callback)(void *user, const sy_gen_event *event);

typedef struct sy_scheduler_options {
    uint32_t parallel;          /* slots; >= 1 */
    uint32_t max_queue;         /* waiting requests beyond the slots; more are refused */
    uint32_t prefill_chunk;     /* most prompt tokens of one slot per step (keeps decode latency low); 0: 512 */
    uint32_t batch_tokens;      /* most tokens in one decode call; 0: 2048 */
    uint32_t queue_timeout_s;   /* a queued request waiting longer ends with ERROR; 0: no limit */
    /* The host prefix cache: when a slot moves on to an unrelated prompt, its sequence (at least 32 tokens that
     * would be dropped) is parked instead, up to this many tokens over all parked sequences (least recently used
     * go first), and a later prompt sharing its prefix forks it. Costs the engine's KV memory for those tokens.
     * 0: off (slots still reuse their own and each other's prefixes). */
    uint32_t cache_tokens;
    /* Speculative decoding (speculative.h): the model's drafter, borrowed (it must outlive the scheduler); NULL:
     * none. Requests with `speculative` set draft through it. */
    struct sy_speculator *speculator;
    /* The host samples every token even where the engine offers sy.engine.sampling/1 (which it otherwise uses
     * for requests without penalties, logprobs or drafts). */
    bool host_sampling;
} sy_scheduler_options;

/* Start the engine loop for a loaded model (the scheduler borrows lm; it must outlive the scheduler). */
sy_scheduler *sy_scheduler_create(const sy_loaded_model *lm, const sy_scheduler_options *opts);
/* Cancel everything queued or running (each gets DONE with "cancelled"), stop the loop, free the slots. */
void sy_scheduler_destroy(sy_scheduler *s);

/* Submit a prompt (tokens are copied). Returns NULL with `err` and *http_status set when refused: 429 when the
 * queue is full, 400 when the prompt does not fit the context or the constraint is unusable (a trigger or token
 * reference this model's vocabulary cannot match); the first constrained submit builds the model's grammar
 * vocabulary (once, a pass over every token). The callback receives every event; the last one
 * is DONE or ERROR. The caller must sy_gen_release() the handle after it has seen the last event (or after
 * cancelling, once the last event has come). Release may also come earlier, even from inside a callback: the
 * handle lives on until both the caller and the loop are done with it. 503 when the scheduler is shutting down. */
sy_gen *sy_scheduler_submit(sy_scheduler *s, const int32_t *prompt, size_t n_prompt, const sy_gen_params *params,
                            sy_gen_callback callback, void *user, char *err, size_t err_size, int *http_status);
/* Ask a generation to stop (client gone): it ends at the next step with DONE "cancelled". */
void sy_gen_cancel(sy_gen *g);
void sy_gen_release(sy_gen *g);

/* Counters for /metrics and /health. */
typedef struct sy_scheduler_stats {
    uint32_t slots_busy;
    uint32_t queue_depth;
    uint64_t tokens_generated;
    uint64_t tokens_prefilled;
    uint64_t tokens_cached;
    uint64_t requests_done;
    uint64_t decode_calls;       /* engine decode calls (batched steps) */
    uint64_t device_sampled_tokens; /* tokens the engine sampled itself (sy.engine.sampling/1) */
    uint64_t cancelled_steps;    /* of those, cancelled as a whole (shutdown, or a client left where the engine
                                    cannot cancel items alone) */
    uint32_t max_batch_items;    /* the most sequences one decode call has carried */
    uint32_t parked_sequences;   /* held by the host prefix cache */
    uint64_t parked_tokens;
    uint64_t drafted_tokens;     /* speculative decoding: tokens proposed and verified */
    uint64_t accepted_tokens;    /* of those, accepted */
    uint64_t constrained_tokens; /* tokens chosen under a grammar */
    uint64_t constraint_ns;      /* engine-loop time spent on grammars: masks, masking rows, accepts, draft checks */
    uint64_t kv_tokens;          /* tokens the busy slots hold in the KV (as of the last step; 0 when none is busy) */
    uint64_t kv_capacity_tokens; /* slots x context: what kv_tokens is a fraction of */
} sy_scheduler_stats;
void sy_scheduler_get_stats(sy_scheduler *s, sy_scheduler_stats *out);
/* True when no slot is busy and nothing is queued. */
bool sy_scheduler_idle(sy_scheduler *s);
/* True when a submit now would be refused with 429 (every slot busy and the queue full). */
bool sy_scheduler_full(sy_scheduler *s);
/* True on the scheduler's own engine-loop thread (inside an event callback): sy_scheduler_destroy must not be
 * called from there. */
bool sy_scheduler_on_loop_thread(const sy_scheduler *s);

/* ---- KV snapshots (host/snapshot_store.c, host/api_slots.c) ------------------------------------------------
 * The sequences of the slots and of the host prefix cache may be read and replaced only where the engine loop
 * cannot run at the same time: inside a task given to sy_scheduler_run_task (it runs on the loop thread between
 * two steps), after sy_scheduler_stop, or before the first submit. */

typedef struct sy_sched_sequence {
    int32_t slot;          /* the slot's index, or -1 for a sequence parked in the host prefix cache */
    bool busy;             /* a generation runs in the slot: its sequence must not be touched */
    sy_seq *seq;           /* NULL when the slot holds none */
    const int32_t *tokens; /* the tokens seq holds; valid until the scheduler changes the sequence */
    uint32_t n_tokens;
    double last_used;      /* sy_now_seconds() of its last use */
} sy_sched_sequence;

/* Stop the engine loop as destroy does (queued and running generations end "cancelled") but keep the sequences,
 * so they can be saved; sy_scheduler_destroy must follow. Idempotent. Not from the loop thread. */
void sy_scheduler_stop(sy_scheduler *s);
/* Run fn(s, user) on the engine-loop thread between two steps and wait until it has run. Returns 0, or -1
 * (fn did not run) when the scheduler is stopping or when called from the loop thread. */
int sy_scheduler_run_task(sy_scheduler *s, void (*fn)(sy_scheduler *s, void *user), void *user);
/* The batching queue of an embedding or reranking model's requests (engine/embed_queue.h); NULL for other models. */
struct sy_embed_queue *sy_scheduler_embed_queue(sy_scheduler *s);
uint32_t sy_scheduler_slot_count(const sy_scheduler *s);
/* A slot's sequence; false when there is no such slot. */
bool sy_scheduler_get_slot(sy_scheduler *s, uint32_t slot, sy_sched_sequence *out);
/* The parked sequences (up to cap of them into out); returns how many there are. */
size_t sy_scheduler_get_parked(sy_scheduler *s, sy_sched_sequence *out, size_t cap);
/* Hand the scheduler a sequence holding exactly `tokens` (copied): into slot `slot` when it is not busy (its
 * previous sequence is freed), or with slot -1 into the host prefix cache when the cache is on and the sequence
 * fits its budget (least recently used parked sequences make room). 0: the scheduler owns seq now; -1: refused,
 * the caller still owns it. */
int sy_scheduler_adopt_sequence(sy_scheduler *s, int32_t slot, sy_seq *seq, const int32_t *tokens,
                                uint32_t n_tokens);
/* Free the sequence of a slot that is not busy. Returns the tokens it held, or -1 (busy, or no such slot). */
long sy_scheduler_erase_slot(sy_scheduler *s, uint32_t slot);

#endif
