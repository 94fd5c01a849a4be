/* See prompt_budget.h. */
#include "api/prompt_budget.h"

#include <pthread.h>
#include <time.h>

#include "base/util.h"
#include <stdint.h>

int sy_api_check_prompt_bytes(const sy_loaded_model *lm, const char *model_name, uint64_t len, const char *param,
                              sy_api_error *e) {
    uint64_t longest = lm->max_token_bytes, n_ctx = lm->info.n_ctx;
    if (longest == 0 || n_ctx == 0) return 0; /* unknown: the token count decides */
    uint64_t most = n_ctx * longest;
    if (len <= most) return 0;
    return sy_api_fail(e, 400, "context_length_exceeded", param,
                       "the prompt has %llu bytes, more than model %s can hold in its context of %llu tokens (its "
                       "longest token has %llu bytes, so at most %llu bytes fit)",
                       (unsigned long long)len, model_name, (unsigned long long)n_ctx, (unsigned long long)longest,
                       (unsigned long long)most);
}

int sy_api_check_messages_bytes(const sy_loaded_model *lm, const char *model_name, const sy_chat_message *messages,
                                size_t n, sy_api_error *e) {
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++) total += messages[i].content_len;
    return sy_api_check_prompt_bytes(lm, model_name, total, "messages", e);
}

static pthread_mutex_t budget_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t budget_freed = PTHREAD_COND_INITIALIZER;
static uint64_t budget_in_use, budget_total;

void sy_api_tokenize_set_budget(uint64_t bytes) {
    pthread_mutex_lock(&budget_lock);
    budget_total = bytes;
    pthread_cond_broadcast(&budget_freed);
    pthread_mutex_unlock(&budget_lock);
}

static uint64_t cost_of(uint64_t len) {
    return len > UINT64_MAX / SY_API_TOKENIZE_COST_PER_BYTE ? UINT64_MAX : len * SY_API_TOKENIZE_COST_PER_BYTE;
}

int sy_api_tokenize_reserve(uint64_t len, sy_api_error *e) {
    pthread_mutex_lock(&budget_lock);
    uint64_t budget = budget_total;
    pthread_mutex_unlock(&budget_lock);
    if (budget == 0) return 0;
    uint64_t cost = cost_of(len);
    if (cost > budget)
        return sy_api_fail(e, 413, "request_too_large", "prompt",
                           "the prompt has %llu bytes; tokenizing it would take more than tokenize_memory (%llu bytes, "
                           "%u per prompt byte)",
                           (unsigned long long)len, (unsigned long long)budget, SY_API_TOKENIZE_COST_PER_BYTE);
    double deadline = sy_now_seconds() + SY_API_TOKENIZE_WAIT_S;
    pthread_mutex_lock(&budget_lock);
    while (budget_total != 0 && budget_in_use + cost > budget_total) {
        if (sy_now_seconds() >= deadline) {
            pthread_mutex_unlock(&budget_lock);
            return sy_api_fail(e, 503, "server_busy", NULL,
                               "the server is tokenizing other prompts (tokenize_memory is in use); try again");
        }
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += 100 * 1000 * 1000;
        if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&budget_freed, &budget_lock, &until);
    }
    budget_in_use += cost;
    pthread_mutex_unlock(&budget_lock);
    return 0;
}

void sy_api_tokenize_release(uint64_t len) {
    uint64_t cost = cost_of(len);
    pthread_mutex_lock(&budget_lock);
    budget_in_use = cost > budget_in_use ? 0 : budget_in_use - cost;
    pthread_cond_broadcast(&budget_freed);
    pthread_mutex_unlock(&budget_lock);
}

uint64_t sy_api_tokenize_in_use(void) {
    pthread_mutex_lock(&budget_lock);
    uint64_t n = budget_in_use;
    pthread_mutex_unlock(&budget_lock);
    return n;
}
