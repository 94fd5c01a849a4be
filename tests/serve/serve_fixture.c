#include "serve_fixture.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/util.h"

int serve_env_open(serve_env *env) {
    memset(env, 0, sizeof *env);
    const char *build = getenv("SY_BUILD_DIR");
    if (build == NULL) {
        fprintf(stderr, "SY_BUILD_DIR is not set (run through ctest)\n");
        return -1;
    }
    snprintf(env->dir, sizeof env->dir, "/tmp/sy-serve-XXXXXX");
    if (mkdtemp(env->dir) == NULL) {
        fprintf(stderr, "mkdtemp: %s\n", strerror(errno));
        return -1;
    }
    char plugins[256], link_path[300], target[4096];
    snprintf(plugins, sizeof plugins, "%s/plugins", env->dir);
    if (mkdir(plugins, 0700) != 0) return -1;
    /* Only the test engine: other plugins in the build folder may be stale or mid-build. */
    snprintf(target, sizeof target, "%s/plugins/test-engine.so", build);
    snprintf(link_path, sizeof link_path, "%s/test-engine.so", plugins);
    if (symlink(target, link_path) != 0) {
        fprintf(stderr, "symlink %s: %s\n", target, strerror(errno));
        return -1;
    }
    char err[512];
    if (sy_plugin_registry_load_dir(&env->reg, plugins, err, sizeof err) != 0) {
        fprintf(stderr, "plugin registry: %s\n", err);
        return -1;
    }
    if (sy_plugin_registry_find(&env->reg, "test-engine") == NULL) {
        fprintf(stderr, "test-engine did not load from %s%s%s\n", target, env->reg.n_refused ? ": " : "",
                env->reg.n_refused ? env->reg.refused[0].reason : "");
        return -1;
    }
    return 0;
}

void serve_env_close(serve_env *env) {
    sy_plugin_registry_close(&env->reg);
    if (env->dir[0] == '\0') return;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", env->dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", env->dir);
}

char *serve_write_model(const serve_env *env, const char *name, const char *extra_lines, size_t pad) {
    char *path = sy_path_join(env->dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "switchyard-test-model\n");
    if (extra_lines != NULL) fprintf(f, "%s\n", extra_lines);
    if (pad > 0) {
        fputc('#', f);
        for (size_t i = 1; i + 1 < pad; i++) fputc('x', f);
        fputc('\n', f);
    }
    assert_int_equal(fclose(f), 0);
    return path;
}

void serve_open_model(const serve_env *env, const char *path, const char *const *options, size_t n_options,
                      sy_loaded_model *out) {
    sy_option opts[16];
    char keys[16][64], values[16][64];
    assert_true(n_options <= 16);
    for (size_t i = 0; i < n_options; i++) {
        const char *eq = strchr(options[i], '=');
        assert_non_null(eq);
        snprintf(keys[i], sizeof keys[i], "%.*s", (int)(eq - options[i]), options[i]);
        snprintf(values[i], sizeof values[i], "%s", eq + 1);
        opts[i].key = keys[i];
        opts[i].value = values[i];
    }
    char err[512];
    int rc = sy_loaded_model_open(&env->reg, "test-engine", path, opts, n_options, out, err, sizeof err);
    if (rc != 0) fprintf(stderr, "%s\n", err);
    assert_int_equal(rc, 0);
}

collector *collector_new(void) {
    collector *c = calloc(1, sizeof *c);
    assert_non_null(c);
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->cond, NULL);
    return c;
}

void collector_delete(collector *c) {
    if (c == NULL) return;
    /* Wait out a callback still unlocking after its last event. */
    pthread_mutex_lock(&c->lock);
    pthread_mutex_unlock(&c->lock);
    pthread_mutex_destroy(&c->lock);
    pthread_cond_destroy(&c->cond);
    free(c->text);
    free(c);
}

void collector_callback(void *user, const sy_gen_event *ev) {
    collector *c = user;
    pthread_mutex_lock(&c->lock);
    if (c->done) {
        c->events_after_end++;
        pthread_mutex_unlock(&c->lock);
        return;
    }
    switch (ev->type) {
    case SY_GEN_EVENT_TEXT:
        c->n_text_events++;
        if (c->text_len + ev->text_len + 1 > c->text_cap) {
            c->text_cap = (c->text_len + ev->text_len + 1) * 2;
            c->text = realloc(c->text, c->text_cap);
        }
        if (ev->text == NULL) c->null_texts++;
        else if (ev->text_len > 0) memcpy(c->text + c->text_len, ev->text, ev->text_len);
        c->text_len += ev->text_len;
        c->text[c->text_len] = '\0';
        if (ev->token >= 0 && c->n_tokens < SERVE_MAX_TOKENS) {
            size_t i = c->n_tokens++;
            c->tokens[i] = ev->token;
            c->logprobs[i] = ev->logprob;
            c->n_top[i] = ev->n_top < 3 ? ev->n_top : 3;
            for (uint32_t k = 0; k < c->n_top[i]; k++) c->top[i][k] = ev->top[k];
        }
        break;
    case SY_GEN_EVENT_DONE:
    case SY_GEN_EVENT_ERROR:
        c->done = true;
        c->end_type = ev->type;
        snprintf(c->finish_reason, sizeof c->finish_reason, "%s", ev->finish_reason ? ev->finish_reason : "");
        snprintf(c->message, sizeof c->message, "%s", ev->message ? ev->message : "");
        c->usage = ev->usage;
        break;
    }
    if (c->text == NULL) c->text = calloc(1, 1);
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->lock);
}

static void deadline_after(struct timespec *ts, double seconds) {
    clock_gettime(CLOCK_REALTIME, ts);
    long whole = (long)seconds;
    ts->tv_sec += whole;
    ts->tv_nsec += (long)((seconds - (double)whole) * 1e9);
    if (ts->tv_nsec >= 1000000000L) ts->tv_sec++, ts->tv_nsec -= 1000000000L;
}

bool collector_wait(collector *c, double timeout_s) {
    struct timespec until;
    deadline_after(&until, timeout_s);
    pthread_mutex_lock(&c->lock);
    int rc = 0;
    while (!c->done && rc == 0) rc = pthread_cond_timedwait(&c->cond, &c->lock, &until);
    bool done = c->done;
    pthread_mutex_unlock(&c->lock);
    return done;
}

bool collector_wait_events(collector *c, size_t n, double timeout_s) {
    struct timespec until;
    deadline_after(&until, timeout_s);
    pthread_mutex_lock(&c->lock);
    int rc = 0;
    while (c->n_text_events < n && !c->done && rc == 0) rc = pthread_cond_timedwait(&c->cond, &c->lock, &until);
    bool ok = c->n_text_events >= n;
    pthread_mutex_unlock(&c->lock);
    return ok;
}

int32_t *serve_tokenize(const sy_loaded_model *lm, const char *text, size_t *n) {
    char err[256];
    int32_t *ids = sy_loaded_model_tokenize(lm, text, strlen(text), 0, n, err, sizeof err);
    assert_non_null(ids);
    return ids;
}

void serve_generate(sy_scheduler *s, const int32_t *prompt, size_t n, const sy_gen_params *params, collector *c) {
    char err[256] = "";
    int status = 0;
    sy_gen *g = sy_scheduler_submit(s, prompt, n, params, collector_callback, c, err, sizeof err, &status);
    if (g == NULL) fprintf(stderr, "submit refused (%d): %s\n", status, err);
    assert_non_null(g);
    assert_true(collector_wait(c, 30));
    sy_gen_release(g);
    assert_int_equal(c->null_texts, 0);
    assert_int_equal(c->events_after_end, 0);
}

sy_gen_params serve_greedy(uint32_t max_tokens) {
    sy_gen_params p = sy_gen_params_defaults();
    p.sampling.temperature = 0;
    p.max_tokens = max_tokens;
    p.ignore_eos = true;
    return p;
}
