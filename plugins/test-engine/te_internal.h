/*
 * test-engine: a tiny deterministic engine behind the real plugin ABI, for host tests.
 *
 * The "model" is a small text file:
 *
 *     switchyard-test-model
 *     # comments and blank lines are allowed
 *     n_ctx=4096
 *     seed=7
 *     recurrent=1
 *
 * Keys, all decimal. The model's identity, from the file only:
 *   name=test-model   seed=0   n_vocab=264 (261..65536; ids from 261 are unused fillers)
 *   n_layer=2 (KV rows per position, 1..64)   n_ctx_train=n_ctx (reported only)   add_bos=1
 *   load_delay_ms=0 (0..60000: a load sleeps this long, as a big model's would; for probe and readiness tests)
 * From the file, overridable by load options ("ctx_size", the host's spelling, is accepted for n_ctx):
 *   n_ctx=4096         most tokens per sequence (1..1048576)
 *   recurrent=0        1 adds a recurrent state
 *   history=16         how far a recurrent sequence can roll back (16..65536)
 *   delay_us=0         sleep per decoded token (0..1000000), to imitate a slow engine
 *   eos_one_in=100     greedy output ends with probability 1/N per position (0: never)
 *   max_sequences=0    most live sequences (0: no limit); one more is SY_ERR_OUT_OF_MEMORY
 *   max_decode_tokens=0  most tokens of one decode call (0: no limit), reported in the model info; more is an error
 *   device_mb=0        accelerator memory memory_usage and the estimate report (0..1048576; nothing is allocated):
 *                      a host test's stand-in for a GPU engine's device_bytes
 * It offers "sy.engine.resources/1": the estimate is exact (the tables it allocates are a function of n_vocab).
 * Tokens: 0..255 bytes, 256 <|bos|>, 257 <|endoftext|> (EOS), 258 <|im_start|>, 259 <|im_end|>, 260 <|pad|>,
 * then <|unused_N|>. EOS and <|im_end|> end generation. The fingerprint hashes the file and the settings that
 * change the math (recurrent, eos_one_in).
 *
 * Recurrent sequences keep the state after every decoded position (so any chunk can be saved) but roll back
 * at most `history` tokens behind the furthest length reached, and a restored chunk brings only the state at its
 * end: truncating or saving at a position whose state is unknown is SY_ERR_UNSUPPORTED, as with a real
 * recurrent engine.
 *
 * Its math is fake but honest: every position stores a KV row per layer (8 F16 values) computed from the token,
 * the position, the previous row and (recurrent=1) a rolling recurrent state, and the logits of a position are a
 * pure function of the stored rows and state. A restored or corrupted state therefore shows in the output, just as
 * with a real transformer. All of it is integer hashing (xxHash), so results are bit-identical everywhere.
 */
#ifndef SY_TE_INTERNAL_H
#define SY_TE_INTERNAL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <switchyard/switchyard.h>

#ifndef TE_PLUGIN_NAME
#define TE_PLUGIN_NAME "test-engine" /* a fixture builds it again as "test-engine-abi11" against the 1.1 headers */
#endif
#define TE_MAGIC_LINE "switchyard-test-model"
#define TE_MAX_FILE_BYTES 65536u

/* Token ids: 0..255 are bytes, then these, then unused fillers up to n_vocab. */
enum {
    TE_TOKEN_BOS = 256,
    TE_TOKEN_EOS = 257,      /* "<|endoftext|>" */
    TE_TOKEN_IM_START = 258,
    TE_TOKEN_IM_END = 259,
    TE_TOKEN_PAD = 260,
    TE_FIRST_UNUSED = 261,
    TE_MIN_VOCAB = TE_FIRST_UNUSED
};

/* Each KV row holds 8 F16 values (layer 0: 4 key values that depend on the token only, 4 chained values). */
#define TE_ROW_VALUES 8u
#define TE_ROW_BYTES (TE_ROW_VALUES * 2u)
/* The recurrent state: 16 F16 values. */
#define TE_RECURRENT_BYTES 32u

typedef struct te_config {
    char name[64];
    uint64_t seed;
    uint32_t n_ctx;
    uint32_t n_ctx_train;
    uint32_t n_vocab;
    uint32_t n_layer;
    uint32_t recurrent;     /* 0 or 1 */
    uint32_t history;       /* recurrent only: how many tokens a sequence can roll back */
    uint32_t delay_us;      /* sleep per decoded token, to imitate a slow engine */
    uint32_t eos_one_in;    /* greedy output ends with probability 1/eos_one_in per position; 0 = never */
    uint32_t max_sequences; /* 0 = no limit */
    uint32_t max_decode_tokens; /* 0 = no limit */
    uint32_t add_bos;       /* 0 or 1 */
    uint32_t device_mb;     /* accelerator memory it claims to hold (none is allocated), for the host's budgets */
    uint32_t load_delay_ms; /* sleep in load, to imitate the weights of a big model coming off a volume */
} te_config;

/* Defaults, then the file's key=value lines. Returns SY_OK or an error with te_fail()'s message. */
sy_status te_config_parse_file(const char *text, size_t len, te_config *cfg);
/* Apply one load option; unknown keys set *known = 0 and succeed. */
sy_status te_config_apply_option(te_config *cfg, const char *key, const char *value, int *known);
/* "sy.plugin.options/1": the load options te_config_apply_option takes. */
extern const sy_plugin_options_api te_options_api;

struct sy_model {
    uint32_t magic;
    te_config cfg;
    char fingerprint[33];
    char *chat_template;
    uint32_t kv_bytes_per_token; /* n_layer * TE_ROW_BYTES */
    uint8_t recurrent_init[TE_RECURRENT_BYTES];
    /* Layer-0 key of every token (8 little-endian bytes as one integer), and the same sorted for lookup. */
    uint64_t *token_keys;
    struct te_key_entry *keys_sorted;
    /* Scratch for decode_sample's logits rows (serial calls only). */
    float *sample_logits;
    size_t sample_logits_count;
    /* Live sequences, freed with the model if the host did not. */
    struct sy_seq *seqs;
    /* Marks sequences seen while checking one batch (duplicate detection). */
    uint64_t batch_epoch;
    /* Counters read by the any-thread memory_usage. */
    _Atomic uint64_t resident_bytes;
    _Atomic uint64_t kv_bytes;
    _Atomic uint32_t n_seqs;
};

typedef struct te_key_entry {
    uint64_t key;
    int32_t token;
} te_key_entry;

struct sy_seq {
    uint32_t magic;
    struct sy_model *model;
    uint32_t len; /* tokens held */
    uint32_t cap; /* positions allocated */
    int32_t *tokens;
    uint8_t *kv;  /* cap rows of kv_bytes_per_token: position-major, layer, 8 little-endian F16 */
    /* Recurrent state after L tokens for L = 0..cap (cap+1 entries), and whether that entry is known
     * (restored chunks only bring the state at their end). */
    uint8_t *rec;
    uint8_t *rec_known;
    /* The shortest length this sequence may still roll back to (bounded history, like a real recurrent model). */
    uint32_t rec_floor;
    uint64_t batch_epoch;
    struct sy_seq *prev, *next;
};

/* Error message of the calling thread (engine error_message()). */
const char *te_error_message(void);
/* Set the calling thread's message (printf-style) and return st. */
sy_status te_fail(sy_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Log through the host, if it gave us a log function. */
void te_log(sy_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Non-zero when the host asked the call to stop. */
int te_cancelled(const sy_host_call *call);

/* Sequences and decode (te_engine.c). */
int te_model_ok(const sy_model *model);
int te_seq_ok(const sy_model *model, const sy_seq *seq);
/* Room for n_positions (rows, tokens, recurrent states); the length does not change. */
sy_status te_seq_reserve(sy_model *model, sy_seq *seq, uint32_t n_positions);
/* Commit a new length (growing or shrinking) and keep the counters and the recurrent history floor in step. */
void te_seq_set_length(sy_model *model, sy_seq *seq, uint32_t len);
/* Check a batch completely and reserve room; nothing of any sequence changes. sampling: decode_sample's rules. */
sy_status te_decode_checked(sy_model *model, const sy_decode_batch *batch, int sampling);
/* Run a checked batch and commit it; on cancellation nothing is committed. logits_rows, when not NULL, replaces
 * each item's logits pointer. */
sy_status te_decode_run(sy_model *model, const sy_decode_batch *batch, float *const *logits_rows);

/* The extensions (te_state.c, te_sampling.c). */
extern const sy_engine_state_api te_state_api;
extern const sy_engine_sampling_api te_sampling_api;

/* Tokenizer (te_tokenizer.c). */
sy_status te_tokenize(const sy_model *model, const char *text, size_t text_len, uint32_t flags, int32_t *out,
                      size_t capacity, size_t *n_out);
sy_status te_token_to_bytes(const sy_model *model, int32_t token, char *out, size_t capacity, size_t *n_out);
uint32_t te_token_flags(const sy_model *model, int32_t token);

/* Math (te_math.c). */
/* Fill the model's key tables and initial recurrent state; SY_OK or SY_ERR_OUT_OF_MEMORY. */
sy_status te_math_init(sy_model *model);
void te_math_free(sy_model *model);
/* Compute the KV rows of position `pos` (holding `token`) into seq->kv, from the rows of pos-1 and the recurrent
 * state after pos tokens; with recurrent=1 also the state after pos+1 tokens. The buffers must have room. */
void te_compute_position(const sy_model *model, sy_seq *seq, uint32_t pos, int32_t token);
/* The logits row of position `pos` (n_vocab floats), from the rows 0..pos and the recurrent state after pos+1. */
void te_compute_logits(const sy_model *model, const sy_seq *seq, uint32_t pos, float *logits);

#endif
