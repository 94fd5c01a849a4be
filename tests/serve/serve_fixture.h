/* Shared by the serve tests: a plugin registry holding only the test engine, model files in a temp folder, and
 * an event collector that turns a generation's callbacks into something a test can wait on and compare. */
#ifndef SY_TEST_SERVE_FIXTURE_H
#define SY_TEST_SERVE_FIXTURE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "plugins/loaded_model.h"
#include "plugins/plugin_loader.h"
#include "engine/scheduler.h"

typedef struct serve_env {
    char dir[128];             /* temp folder: plugins/ and model files */
    sy_plugin_registry reg;
} serve_env;

/* Creates the temp folder, links the built test engine into <dir>/plugins and loads that registry.
 * 0, or -1 (printing why). */
int serve_env_open(serve_env *env);
void serve_env_close(serve_env *env);

/* Writes <dir>/<name> as a test-engine model file with the given extra key=value lines (may be NULL) and
 * `pad` bytes of comment; returns the malloc'd path. */
char *serve_write_model(const serve_env *env, const char *name, const char *extra_lines, size_t pad);

/* Opens a model file with the test engine and options ("key=value" strings). Aborts the test on failure. */
void serve_open_model(const serve_env *env, const char *path, const char *const *options, size_t n_options,
                      sy_loaded_model *out);

#define SERVE_MAX_TOKENS 4096

typedef struct collector {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    char *text;                /* every TEXT piece joined */
    size_t text_len, text_cap;
    int32_t tokens[SERVE_MAX_TOKENS]; /* the token of every TEXT event with token >= 0 */
    double logprobs[SERVE_MAX_TOKENS];
    sy_gen_logprob top[SERVE_MAX_TOKENS][3];
    uint32_t n_top[SERVE_MAX_TOKENS];
    size_t n_tokens;
    size_t n_text_events;
    bool done;
    sy_gen_event_type end_type;
    char finish_reason[32];
    char message[512];
    sy_gen_usage usage;
    int events_after_end;      /* must stay 0 */
    int null_texts;            /* TEXT events with a NULL text: must stay 0 */
} collector;

/* Collectors are large (per-token arrays): they live on the heap. */
collector *collector_new(void);
void collector_delete(collector *c);
void collector_callback(void *user, const sy_gen_event *ev);
/* Waits for the last event; false after timeout_s. */
bool collector_wait(collector *c, double timeout_s);
/* Waits until at least n TEXT events came; false after timeout_s. */
bool collector_wait_events(collector *c, size_t n, double timeout_s);

/* Tokens of text (no special parsing, no BOS) through the model. Returns the count; ids malloc'd. */
int32_t *serve_tokenize(const sy_loaded_model *lm, const char *text, size_t *n);

/* Submits and waits for the end; the collector holds the result. Asserts the submit was accepted. */
void serve_generate(sy_scheduler *s, const int32_t *prompt, size_t n, const sy_gen_params *params,
                    collector *c);

/* Greedy parameters: temperature 0, max_tokens given, EOS ignored unless said otherwise. */
sy_gen_params serve_greedy(uint32_t max_tokens);

#endif
