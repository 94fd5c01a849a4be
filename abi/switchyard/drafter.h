/*
 * switchyard plugin ABI — drafters for speculative decoding: interface "sy.drafter/1".
 *
 * A drafter proposes up to k tokens that may follow a sequence's context; the host has the target model verify
 * them in one batched decode and tells the drafter what was accepted. The host owns verification, so a drafter
 * can never change the output of greedy decoding, only its speed.
 *
 * Threading: create/destroy may run on any thread. All calls on one sy_draft_state are serial (the host calls
 * them from the target model's engine loop); calls on different states may run concurrently.
 */
#ifndef SWITCHYARD_DRAFTER_H
#define SWITCHYARD_DRAFTER_H

#include "abi.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SY_DRAFTER_INTERFACE_ID "sy.drafter/1"

typedef struct sy_drafter sy_drafter;         /* one configured drafter, owned by the plugin */
typedef struct sy_draft_state sy_draft_state; /* a drafter's state for one sequence, owned by the plugin */

typedef struct sy_drafter_api {
    uint32_t struct_size;
    /* The message of the last failed call on this thread; never NULL. */
    const char *(*error_message)(void);
    /* Does this plugin make drafters of this spec ("ngram", "model:NAME", ...)? SY_OK or SY_ERR_UNSUPPORTED. */
    sy_status (*supports)(const char *spec);
    /* Make a drafter for a target whose vocabulary has n_vocab entries. Options as for engines
     * (draft_ngram_min, draft_ngram_max, ...). A model drafter checks here that its model's tokenizer matches
     * the target's and refuses with SY_ERR_UNSUPPORTED naming the difference if not; `target_model_name` names
     * the target for host->acquire_engine. */
    sy_status (*create)(const char *spec, const char *target_model_name, uint32_t n_vocab,
                        const sy_option *options, size_t n_options, sy_drafter **out);
    void (*destroy)(sy_drafter *drafter);

    sy_status (*state_create)(sy_drafter *drafter, sy_draft_state **out);
    void (*state_free)(sy_drafter *drafter, sy_draft_state *state);

    /* Propose up to k_max tokens to follow context[0..n_context) (the sequence's whole token history: prompt
     * and accepted output). Writes *n_out <= k_max tokens to out (host-owned). Proposing none is fine. */
    sy_status (*propose)(sy_drafter *drafter, sy_draft_state *state, const int32_t *context, uint32_t n_context,
                         uint32_t k_max, int32_t *out, uint32_t *n_out);

    /* After verification: n_accepted of the n_proposed tokens were accepted; the sequence's history is now
     * context[0..n_context). Drafters that keep their own sequence roll it back here. */
    sy_status (*observe)(sy_drafter *drafter, sy_draft_state *state, uint32_t n_proposed, uint32_t n_accepted,
                         const int32_t *context, uint32_t n_context);
} sy_drafter_api;

#ifdef __cplusplus
}
#endif

#endif /* SWITCHYARD_DRAFTER_H */
