/* What the API request fuzz targets share: a failed check must say why, with a 4xx/5xx status; a passed one must
 * leave sampling parameters a sampler can use. */
#ifndef SY_FUZZ_API_REQUEST_H
#define SY_FUZZ_API_REQUEST_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "api/request.h"

static inline void check_outcome(int rc, const sy_api_error *e, const sy_gen_params *p) {
    if (rc != 0) {
        if (e->status < 400 || e->status > 599 || e->message[0] == '\0') abort();
        return;
    }
    const sy_sampler_params *s = &p->sampling;
    if (isnan(s->temperature) || isnan(s->top_p) || isnan(s->min_p) || isnan(s->repeat_penalty) ||
        isnan(s->presence_penalty) || isnan(s->frequency_penalty))
        abort();
    if (p->top_logprobs > SY_GEN_MAX_TOP_LOGPROBS) abort();
}

#endif
