#include "spec_fixture.h"

#include <errno.h>
#include <math.h>
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

int spec_env_open(spec_env *env) {
    static const char *const names[] = {"test-engine", "spec-drafter"};
    return spec_env_open_plugins(env, names, 2);
}

int spec_env_open_plugins(spec_env *env, const char *const *names, size_t n_names) {
    memset(env, 0, sizeof *env);
    const char *build = getenv("SY_BUILD_DIR");
    if (build == NULL) {
        fprintf(stderr, "SY_BUILD_DIR is not set (run through ctest)\n");
        return -1;
    }
    snprintf(env->dir, sizeof env->dir, "/tmp/sy-spec-XXXXXX");
    if (mkdtemp(env->dir) == NULL) {
        fprintf(stderr, "mkdtemp: %s\n", strerror(errno));
        return -1;
    }
    char plugins[256];
    snprintf(plugins, sizeof plugins, "%s/plugins", env->dir);
    if (mkdir(plugins, 0700) != 0) return -1;
    /* Only the plugins named: others in the build folder may be stale or mid-build. */
    for (size_t i = 0; i < n_names; i++) {
        char target[4096], link_path[400];
        snprintf(target, sizeof target, "%s/plugins/%s.so", build, names[i]);
        snprintf(link_path, sizeof link_path, "%s/%s.so", plugins, names[i]);
        if (symlink(target, link_path) != 0) {
            fprintf(stderr, "symlink %s: %s\n", target, strerror(errno));
            return -1;
        }
    }
    char err[512];
    if (sy_plugin_registry_load_dir(&env->reg, plugins, err, sizeof err) != 0) {
        fprintf(stderr, "plugin registry: %s\n", err);
        return -1;
    }
    for (size_t i = 0; i < n_names; i++) {
        if (sy_plugin_registry_find(&env->reg, names[i]) == NULL) {
            fprintf(stderr, "%s did not load%s%s\n", names[i], env->reg.n_refused ? ": " : "",
                    env->reg.n_refused ? env->reg.refused[0].reason : "");
            return -1;
        }
    }
    return 0;
}

void spec_env_close(spec_env *env) {
    sy_plugin_registry_close(&env->reg);
    if (env->dir[0] == '\0') return;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", env->dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", env->dir);
}

char *spec_write_file(const spec_env *env, const char *name, const char *text) {
    char *path = sy_path_join(env->dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
    return path;
}

char *spec_write_model(const spec_env *env, const char *name, const char *lines) {
    char text[1024];
    snprintf(text, sizeof text, "switchyard-test-model\n%s\n", lines != NULL ? lines : "");
    return spec_write_file(env, name, text);
}

void spec_open_model(const spec_env *env, const char *path, const char *const *options, size_t n_options,
                     sy_loaded_model *out) {
    spec_open_model_with(env, "test-engine", path, options, n_options, out);
}

void spec_open_model_with(const spec_env *env, const char *plugin, const char *path, const char *const *options,
                          size_t n_options, sy_loaded_model *out) {
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
    int rc = sy_loaded_model_open(&env->reg, plugin, path, opts, n_options, out, err, sizeof err);
    if (rc != 0) fprintf(stderr, "%s: %s\n", path, err);
    assert_int_equal(rc, 0);
}

/* ---- generations ---- */

typedef struct batch_ref {
    spec_batch *b;
    size_t i;
} batch_ref;

static void batch_callback(void *user, const sy_gen_event *ev) {
    batch_ref *ref = user;
    spec_batch *b = ref->b;
    spec_result *r = &b->results[ref->i];
    pthread_mutex_lock(&b->lock);
    if (ev->type == SY_GEN_EVENT_TEXT) {
        if (ev->token >= 0 && r->n_tokens < SPEC_MAX_OUT) {
            r->logprobs[r->n_tokens] = ev->logprob;
            r->tokens[r->n_tokens++] = ev->token;
        }
    } else {
        r->done = true;
        r->error = ev->type == SY_GEN_EVENT_ERROR;
        snprintf(r->finish_reason, sizeof r->finish_reason, "%s",
                 ev->finish_reason ? ev->finish_reason : (ev->message ? "error" : ""));
        if (r->error) fprintf(stderr, "generation %zu failed: %s\n", ref->i, ev->message ? ev->message : "");
        r->usage = ev->usage;
        b->n_done++;
        pthread_cond_broadcast(&b->cond);
    }
    pthread_mutex_unlock(&b->lock);
    if (ev->type != SY_GEN_EVENT_TEXT) free(ref);
}

spec_batch *spec_batch_new(size_t n) {
    spec_batch *b = calloc(1, sizeof *b);
    assert_non_null(b);
    pthread_mutex_init(&b->lock, NULL);
    pthread_cond_init(&b->cond, NULL);
    b->n = n;
    b->results = calloc(n ? n : 1, sizeof *b->results);
    b->gens = calloc(n ? n : 1, sizeof *b->gens);
    assert_non_null(b->results);
    assert_non_null(b->gens);
    return b;
}

void spec_batch_free(spec_batch *b) {
    if (b == NULL) return;
    for (size_t i = 0; i < b->n; i++) sy_gen_release(b->gens[i]);
    pthread_mutex_lock(&b->lock);
    pthread_mutex_unlock(&b->lock);
    pthread_mutex_destroy(&b->lock);
    pthread_cond_destroy(&b->cond);
    free(b->results);
    free(b->gens);
    free(b);
}

void spec_batch_submit(spec_batch *b, size_t i, sy_scheduler *s, const int32_t *prompt, size_t n_prompt,
                       const sy_gen_params *params) {
    batch_ref *ref = malloc(sizeof *ref);
    assert_non_null(ref);
    ref->b = b;
    ref->i = i;
    char err[256] = "";
    int status = 0;
    b->gens[i] = sy_scheduler_submit(s, prompt, n_prompt, params, batch_callback, ref, err, sizeof err, &status);
    if (b->gens[i] == NULL) {
        fprintf(stderr, "submit %zu refused (%d): %s\n", i, status, err);
        free(ref);
    }
    assert_non_null(b->gens[i]);
}

bool spec_batch_wait_count(spec_batch *b, size_t n, double timeout_s) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += (time_t)timeout_s;
    pthread_mutex_lock(&b->lock);
    int rc = 0;
    while (b->n_done < n && rc == 0) rc = pthread_cond_timedwait(&b->cond, &b->lock, &until);
    bool ok = b->n_done >= n;
    pthread_mutex_unlock(&b->lock);
    return ok;
}

bool spec_batch_wait(spec_batch *b, double timeout_s) {
    size_t submitted = 0;
    for (size_t i = 0; i < b->n; i++) submitted += b->gens[i] != NULL;
    return spec_batch_wait_count(b, submitted, timeout_s);
}

int32_t *spec_make_prompt(unsigned seed, bool repetitive, size_t *n) {
    static const char *const words[] = {"switch", "yard", "model", "token", "batch", "slot", "cache", "queue",
                                        "the", "a", "of", "prefix", "decode", "stream", "engine", "host"};
    char text[1200];
    size_t len = 0;
    uint32_t x = seed * 2654435761u + 977u;
    size_t target = 20 + (seed * 37u) % 400;
    if (repetitive) {
        /* A phrase of 2..5 words said again and again. */
        char phrase[64];
        size_t plen = 0, n_words = 2 + seed % 4;
        for (size_t w = 0; w < n_words; w++) {
            x = x * 1103515245u + 12345u;
            plen += (size_t)snprintf(phrase + plen, sizeof phrase - plen, "%s ", words[(x >> 16) % 16]);
        }
        while (len + plen < target && len + plen < sizeof text - 1) {
            memcpy(text + len, phrase, plen);
            len += plen;
        }
    } else {
        while (len < target) {
            x = x * 1103515245u + 12345u;
            const char *w = words[(x >> 16) % 16];
            size_t wl = strlen(w);
            if (len + wl + 2 >= sizeof text) break;
            memcpy(text + len, w, wl);
            len += wl;
            /* Punctuation and case now and then, so no two prompts are alike. */
            x = x * 1103515245u + 12345u;
            text[len++] = (x >> 16) % 7 == 0 ? ',' : ' ';
            if ((x >> 20) % 11 == 0) text[len - wl - 1] = (char)(text[len - wl - 1] - 'a' + 'A');
        }
    }
    if (len == 0) text[len++] = 'x';
    int32_t *ids = malloc(len * sizeof *ids);
    assert_non_null(ids);
    for (size_t i = 0; i < len; i++) ids[i] = (unsigned char)text[i];
    *n = len;
    return ids;
}

/* ---- chi-square ---- */

/* The regularized upper incomplete gamma function Q(a, x): a series below a + 1, a continued fraction above. */
static double gamma_q(double a, double x) {
    if (x <= 0) return 1.0;
    double log_front = -x + a * log(x) - lgamma(a);
    if (x < a + 1) {
        double term = 1.0 / a, sum = term;
        for (int n = 1; n < 10000; n++) {
            term *= x / (a + n);
            sum += term;
            if (fabs(term) < fabs(sum) * 1e-15) break;
        }
        return 1.0 - sum * exp(log_front);
    }
    /* Lentz's method for the continued fraction of Q. */
    const double tiny = 1e-300;
    double b = x + 1 - a, c = 1 / tiny, d = 1 / b, h = d;
    for (int i = 1; i < 10000; i++) {
        double an = -i * (i - a);
        b += 2;
        d = an * d + b;
        if (fabs(d) < tiny) d = tiny;
        c = b + an / c;
        if (fabs(c) < tiny) c = tiny;
        d = 1 / d;
        double delta = d * c;
        h *= delta;
        if (fabs(delta - 1) < 1e-15) break;
    }
    return exp(log_front) * h;
}

double spec_chi2_homogeneity(const uint64_t *a, const uint64_t *b, size_t n_cells, double *chi2, int *dof) {
    double na = 0, nb = 0;
    for (size_t i = 0; i < n_cells; i++) na += (double)a[i], nb += (double)b[i];
    double n = na + nb, stat = 0, pool_a = 0, pool_b = 0;
    int cells = 0;
    for (size_t i = 0; i < n_cells; i++) {
        double total = (double)a[i] + (double)b[i];
        if (total * (na < nb ? na : nb) / n < 5) {
            pool_a += (double)a[i];
            pool_b += (double)b[i];
            continue;
        }
        double ea = total * na / n, eb = total * nb / n;
        stat += (a[i] - ea) * (a[i] - ea) / ea + (b[i] - eb) * (b[i] - eb) / eb;
        cells++;
    }
    double pool = pool_a + pool_b;
    if (pool > 0) {
        double ea = pool * na / n, eb = pool * nb / n;
        stat += (pool_a - ea) * (pool_a - ea) / ea + (pool_b - eb) * (pool_b - eb) / eb;
        cells++;
    }
    *chi2 = stat;
    *dof = cells > 1 ? cells - 1 : 1;
    return gamma_q(*dof / 2.0, stat / 2.0);
}

double spec_chi2_fit(const uint64_t *observed, const double *p, size_t n_cells, double *chi2, int *dof) {
    double n = 0;
    for (size_t i = 0; i < n_cells; i++) n += (double)observed[i];
    double stat = 0, pool_o = 0, pool_e = 0;
    int cells = 0;
    for (size_t i = 0; i < n_cells; i++) {
        double e = p[i] * n;
        if (e < 5) {
            pool_o += (double)observed[i];
            pool_e += e;
            continue;
        }
        stat += (observed[i] - e) * (observed[i] - e) / e;
        cells++;
    }
    if (pool_e > 0) {
        stat += (pool_o - pool_e) * (pool_o - pool_e) / pool_e;
        cells++;
    } else if (pool_o > 0) {
        stat = INFINITY; /* something was drawn that cannot be */
    }
    *chi2 = stat;
    *dof = cells > 1 ? cells - 1 : 1;
    return gamma_q(*dof / 2.0, stat / 2.0);
}
