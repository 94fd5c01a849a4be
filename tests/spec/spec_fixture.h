/* Shared by the speculative decoding tests: a plugin registry with the test engine and the spec-drafter, test
 * model files in a temp folder, generations collected token by token, and a chi-square homogeneity test. */
#ifndef SY_TEST_SPEC_FIXTURE_H
#define SY_TEST_SPEC_FIXTURE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "plugins/loaded_model.h"
#include "plugins/plugin_loader.h"
#include "engine/scheduler.h"
#include "engine/speculative.h"

typedef struct spec_env {
    char dir[128]; /* temp folder: plugins/ and model files */
    sy_plugin_registry reg;
} spec_env;

/* Creates the temp folder, links the built test-engine and spec-drafter into <dir>/plugins and loads them.
 * 0, or -1 (printing why). */
int spec_env_open(spec_env *env);
/* The same with the plugins named (build/plugins/<name>.so each). */
int spec_env_open_plugins(spec_env *env, const char *const *names, size_t n_names);
void spec_env_close(spec_env *env);

/* Writes <dir>/<name> as a test-engine model with the given key=value lines; returns the malloc'd path. */
char *spec_write_model(const spec_env *env, const char *name, const char *lines);
/* Writes <dir>/<name> with `text` as is; returns the malloc'd path. */
char *spec_write_file(const spec_env *env, const char *name, const char *text);
/* Opens a model with the test engine ("key=value" options); asserts success. */
void spec_open_model(const spec_env *env, const char *path, const char *const *options, size_t n_options,
                     sy_loaded_model *out);
/* The same with another plugin. */
void spec_open_model_with(const spec_env *env, const char *plugin, const char *path, const char *const *options,
                          size_t n_options, sy_loaded_model *out);

/* One generation's result. */
#define SPEC_MAX_OUT 512
typedef struct spec_result {
    int32_t tokens[SPEC_MAX_OUT]; /* tokens of TEXT events: every token when logprobs are asked for */
    double logprobs[SPEC_MAX_OUT];
    uint32_t n_tokens;
    bool done;
    bool error;
    char finish_reason[16];
    sy_gen_usage usage;
} spec_result;

/* Many generations in flight at once, each into its own result; wait for all of them. */
typedef struct spec_batch {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    size_t n, n_done;
    spec_result *results;
    sy_gen **gens;
} spec_batch;

spec_batch *spec_batch_new(size_t n);
void spec_batch_free(spec_batch *b);
/* Submits request i (asserts it is accepted). */
void spec_batch_submit(spec_batch *b, size_t i, sy_scheduler *s, const int32_t *prompt, size_t n_prompt,
                       const sy_gen_params *params);
/* Waits for every submitted request; false after timeout_s. */
bool spec_batch_wait(spec_batch *b, double timeout_s);
/* Waits until at least n requests have ended; false after timeout_s. (Keeps the scheduler's queue short when
 * thousands of requests are submitted: it walks its queue every step.) */
bool spec_batch_wait_count(spec_batch *b, size_t n, double timeout_s);

/* A prompt of test-engine tokens (bytes): `repetitive` ones repeat a short phrase, others are varied words. */
int32_t *spec_make_prompt(unsigned seed, bool repetitive, size_t *n);

/* Two-sample chi-square homogeneity test over `n_cells` categories (cells with small expected counts are pooled).
 * Returns the p-value; *chi2 and *dof receive the statistic. */
double spec_chi2_homogeneity(const uint64_t *a, const uint64_t *b, size_t n_cells, double *chi2, int *dof);
/* The same against expected probabilities (goodness of fit). */
double spec_chi2_fit(const uint64_t *observed, const double *p, size_t n_cells, double *chi2, int *dof);

#endif
