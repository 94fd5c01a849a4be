/* Prometheus metrics: counters and histograms behind one mutex, rendered in the text exposition format. */
#include "api/metrics.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "persist/snapshot.h"
#include "persist/snapshot_store.h"
#include "base/util.h"

/* Upper bounds (seconds) of the histogram buckets; +Inf is implicit. */
static const double ttft_bounds[] = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120};
static const double token_bounds[] = {0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5};
#define TTFT_BUCKETS (sizeof ttft_bounds / sizeof *ttft_bounds)
#define TOKEN_BUCKETS (sizeof token_bounds / sizeof *token_bounds)
#define MAX_HIST_BUCKETS 16

typedef struct histogram {
    const double *bounds;
    size_t n_bounds;
    uint64_t counts[MAX_HIST_BUCKETS]; /* per bucket, not cumulative; [n_bounds] is +Inf */
    uint64_t total;
    double sum;
} histogram;

typedef struct request_series {
    char endpoint[64];
    int status;
    uint64_t count;
} request_series;

typedef struct model_tokens {
    char model[SY_CONFIG_MAX_NAME_LEN + 1];
    uint64_t prompt, cached, generated;
    uint64_t drafted, accepted; /* speculative decoding */
} model_tokens;

struct sy_metrics {
    pthread_mutex_t lock;
    request_series requests[SY_METRICS_MAX_REQUEST_SERIES];
    size_t n_requests;
    model_tokens tokens[SY_METRICS_MAX_MODELS];
    size_t n_tokens;
    histogram ttft;
    histogram token_latency;
};

sy_metrics *sy_metrics_create(void) {
    sy_metrics *m = sy_xcalloc(1, sizeof *m);
    pthread_mutex_init(&m->lock, NULL);
    m->ttft.bounds = ttft_bounds;
    m->ttft.n_bounds = TTFT_BUCKETS;
    m->token_latency.bounds = token_bounds;
    m->token_latency.n_bounds = TOKEN_BUCKETS;
    return m;
}

void sy_metrics_free(sy_metrics *m) {
    if (m == NULL) return;
    pthread_mutex_destroy(&m->lock);
    free(m);
}

void sy_metrics_request(sy_metrics *m, const char *endpoint, int status) {
    if (m == NULL) return;
    if (endpoint == NULL || strlen(endpoint) >= sizeof m->requests[0].endpoint) endpoint = "other";
    pthread_mutex_lock(&m->lock);
    size_t i;
    for (i = 0; i < m->n_requests; i++)
        if (m->requests[i].status == status && strcmp(m->requests[i].endpoint, endpoint) == 0) break;
    if (i == m->n_requests) {
        if (m->n_requests == SY_METRICS_MAX_REQUEST_SERIES) {
            /* Full: count into the last series rather than lose the request. */
            i = m->n_requests - 1;
            snprintf(m->requests[i].endpoint, sizeof m->requests[i].endpoint, "other");
            m->requests[i].status = 0;
        } else {
            snprintf(m->requests[i].endpoint, sizeof m->requests[i].endpoint, "%s", endpoint);
            m->requests[i].status = status;
            m->n_requests++;
        }
    }
    m->requests[i].count++;
    pthread_mutex_unlock(&m->lock);
}

/* The token counters of a model, made when new (the last one is "other" once the table is full). Lock held. */
static model_tokens *tokens_of(sy_metrics *m, const char *model) {
    if (model == NULL || strlen(model) >= sizeof m->tokens[0].model) model = "other";
    size_t i;
    for (i = 0; i < m->n_tokens; i++)
        if (strcmp(m->tokens[i].model, model) == 0) break;
    if (i == m->n_tokens) {
        if (m->n_tokens == SY_METRICS_MAX_MODELS) {
            i = m->n_tokens - 1;
            snprintf(m->tokens[i].model, sizeof m->tokens[i].model, "other");
        } else {
            snprintf(m->tokens[i].model, sizeof m->tokens[i].model, "%s", model);
            m->n_tokens++;
        }
    }
    return &m->tokens[i];
}

void sy_metrics_tokens(sy_metrics *m, const char *model, uint64_t prompt, uint64_t cached, uint64_t generated) {
    if (m == NULL) return;
    pthread_mutex_lock(&m->lock);
    model_tokens *t = tokens_of(m, model);
    t->prompt += prompt;
    t->cached += cached;
    t->generated += generated;
    pthread_mutex_unlock(&m->lock);
}

void sy_metrics_draft_tokens(sy_metrics *m, const char *model, uint64_t drafted, uint64_t accepted) {
    if (m == NULL) return;
    pthread_mutex_lock(&m->lock);
    model_tokens *t = tokens_of(m, model);
    t->drafted += drafted;
    t->accepted += accepted;
    pthread_mutex_unlock(&m->lock);
}

static void observe(histogram *h, double v) {
    if (!isfinite(v) || v < 0) return;
    size_t b = 0;
    while (b < h->n_bounds && v > h->bounds[b]) b++;
    h->counts[b]++;
    h->total++;
    h->sum += v;
}

void sy_metrics_time_to_first_token(sy_metrics *m, double seconds) {
    if (m == NULL) return;
    pthread_mutex_lock(&m->lock);
    observe(&m->ttft, seconds);
    pthread_mutex_unlock(&m->lock);
}

void sy_metrics_token_latency(sy_metrics *m, double seconds) {
    if (m == NULL) return;
    pthread_mutex_lock(&m->lock);
    observe(&m->token_latency, seconds);
    pthread_mutex_unlock(&m->lock);
}

/* A label value with \, " and newlines escaped as the exposition format requires. */
static void put_label(sy_buf *b, const char *s) {
    for (; *s; s++) {
        if (*s == '\\') sy_buf_puts(b, "\\\\");
        else if (*s == '"') sy_buf_puts(b, "\\\"");
        else if (*s == '\n') sy_buf_puts(b, "\\n");
        else sy_buf_append(b, s, 1);
    }
}

static void header(sy_buf *b, const char *name, const char *type, const char *help) {
    sy_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void render_histogram(sy_buf *b, const char *name, const char *help, const histogram *h) {
    header(b, name, "histogram", help);
    uint64_t cumulative = 0;
    for (size_t i = 0; i < h->n_bounds; i++) {
        cumulative += h->counts[i];
        sy_buf_printf(b, "%s_bucket{le=\"%g\"} %llu\n", name, h->bounds[i], (unsigned long long)cumulative);
    }
    cumulative += h->counts[h->n_bounds];
    sy_buf_printf(b, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)cumulative);
    sy_buf_printf(b, "%s_sum %.9g\n%s_count %llu\n", name, h->sum, name, (unsigned long long)h->total);
}

static const char *state_name(sy_model_state s) {
    switch (s) {
    case SY_MODEL_UNLOADED: return "unloaded";
    case SY_MODEL_LOADING: return "loading";
    case SY_MODEL_READY: return "ready";
    case SY_MODEL_UNLOADING: return "unloading";
    }
    return "unknown";
}

typedef uint64_t (*model_value_fn)(const sy_model_status *st);
static uint64_t v_memory(const sy_model_status *st) { return st->memory_bytes; }
static uint64_t v_device_memory(const sy_model_status *st) { return st->device_bytes; }
static uint64_t v_slots(const sy_model_status *st) { return st->sched.slots_busy; }
static uint64_t v_queue(const sy_model_status *st) { return st->sched.queue_depth; }
static uint64_t v_parked_sequences(const sy_model_status *st) { return st->sched.parked_sequences; }
static uint64_t v_parked_tokens(const sy_model_status *st) { return st->sched.parked_tokens; }
static uint64_t v_constrained_tokens(const sy_model_status *st) { return st->sched.constrained_tokens; }
static uint64_t v_constraint_us(const sy_model_status *st) { return st->sched.constraint_ns / 1000; }

static void render_model_gauge(sy_buf *b, const char *name, const char *help, const sy_model_status *models,
                               size_t n, model_value_fn value) {
    header(b, name, "gauge", help);
    for (size_t i = 0; i < n; i++) {
        sy_buf_printf(b, "%s{model=\"", name);
        put_label(b, models[i].name ? models[i].name : "");
        sy_buf_printf(b, "\"} %llu\n", (unsigned long long)value(&models[i]));
    }
}

static double kv_ratio(uint64_t used, uint64_t capacity) {
    if (capacity == 0) return 0.0;
    double r = (double)used / (double)capacity;
    return r > 1.0 ? 1.0 : r;
}

/* The load signals of the whole server under the names the Gateway API Inference Extension's endpoint picker
 * reads by default (its model server protocol: queued requests, running requests, KV-cache utilization, named
 * as vLLM names them). One series each, for the pod: the picker scores endpoints, not models. */
static void render_load_signals(sy_buf *b, const sy_model_status *models, size_t n) {
    uint64_t waiting = 0, running = 0, kv = 0, capacity = 0;
    for (size_t i = 0; i < n; i++) {
        waiting += models[i].sched.queue_depth;
        running += models[i].sched.slots_busy;
        kv += models[i].sched.kv_tokens;
        capacity += models[i].sched.kv_capacity_tokens;
    }
    header(b, "vllm:num_requests_waiting", "gauge", "Requests waiting for a free slot, over every model.");
    sy_buf_printf(b, "vllm:num_requests_waiting %llu\n", (unsigned long long)waiting);
    header(b, "vllm:num_requests_running", "gauge", "Requests generating now, over every model.");
    sy_buf_printf(b, "vllm:num_requests_running %llu\n", (unsigned long long)running);
    static const char *const kv_names[] = {"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"};
    for (size_t k = 0; k < sizeof kv_names / sizeof *kv_names; k++) {
        header(b, kv_names[k], "gauge",
               "Fraction (0..1) of the loaded models' KV capacity that running generations hold (1 = full).");
        sy_buf_printf(b, "%s %.6f\n", kv_names[k], kv_ratio(kv, capacity));
    }
}

/* The KV snapshot counters are the process's (snapshot_store.h), not one sy_metrics object's. */
static void render_snapshot_counters(sy_buf *b) {
    sy_snapshot_counters c;
    sy_snapshot_get_counters(&c);
    static const struct {
        const char *name, *help;
        size_t offset;
    } kinds[] = {
        {"switchyard_snapshots_written_total", "KV snapshot files written (unload, shutdown, slot save).",
         offsetof(sy_snapshot_counters, written)},
        {"switchyard_snapshot_write_failures_total", "KV snapshot writes that failed (full disk, engine refused).",
         offsetof(sy_snapshot_counters, write_failures)},
        {"switchyard_snapshot_written_bytes_total", "Bytes of KV snapshot files written.",
         offsetof(sy_snapshot_counters, bytes_written)},
        {"switchyard_snapshots_restored_total", "Sequences restored from KV snapshots.",
         offsetof(sy_snapshot_counters, restored)},
        {"switchyard_snapshot_restored_tokens_total", "Tokens whose prefill a snapshot restore saved.",
         offsetof(sy_snapshot_counters, restored_tokens)},
    };
    for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
        uint64_t v;
        memcpy(&v, (const char *)&c + kinds[k].offset, sizeof v);
        header(b, kinds[k].name, "counter", kinds[k].help);
        sy_buf_printf(b, "%s %llu\n", kinds[k].name, (unsigned long long)v);
    }
    header(b, "switchyard_snapshots_rejected_total", "counter",
           "KV snapshots skipped at restore, by reason (key: another model or layout; checksum: damaged; ...).");
    for (int e = SY_SNAPSHOT_OK + 1; e < SY_SNAPSHOT_N_ERRORS; e++)
        sy_buf_printf(b, "switchyard_snapshots_rejected_total{reason=\"%s\"} %llu\n",
                      sy_snapshot_error_name((sy_snapshot_error)e), (unsigned long long)c.rejected_by[e]);
}

char *sy_metrics_render(sy_metrics *m, const sy_model_status *models, size_t n_models,
                        const sy_model_manager_counters *counters, size_t *len) {
    sy_buf b;
    sy_buf_init(&b);
    pthread_mutex_lock(&m->lock);

    header(&b, "switchyard_requests_total", "counter", "HTTP requests answered, by endpoint and status.");
    for (size_t i = 0; i < m->n_requests; i++) {
        sy_buf_puts(&b, "switchyard_requests_total{endpoint=\"");
        put_label(&b, m->requests[i].endpoint);
        sy_buf_printf(&b, "\",status=\"%d\"} %llu\n", m->requests[i].status,
                      (unsigned long long)m->requests[i].count);
    }
    static const struct {
        const char *name, *help;
        size_t offset;
    } token_kinds[] = {
        {"switchyard_prompt_tokens_total", "Prompt tokens of finished generations.", offsetof(model_tokens, prompt)},
        {"switchyard_cached_tokens_total", "Prompt tokens whose KV was reused instead of prefilled.",
         offsetof(model_tokens, cached)},
        {"switchyard_generated_tokens_total", "Tokens generated.", offsetof(model_tokens, generated)},
        {"switchyard_draft_tokens_total", "Tokens drafted for speculative decoding and verified by the model.",
         offsetof(model_tokens, drafted)},
        {"switchyard_draft_accepted_tokens_total", "Drafted tokens the model accepted.",
         offsetof(model_tokens, accepted)},
    };
    for (size_t k = 0; k < sizeof token_kinds / sizeof *token_kinds; k++) {
        header(&b, token_kinds[k].name, "counter", token_kinds[k].help);
        for (size_t i = 0; i < m->n_tokens; i++) {
            uint64_t v;
            memcpy(&v, (const char *)&m->tokens[i] + token_kinds[k].offset, sizeof v);
            sy_buf_printf(&b, "%s{model=\"", token_kinds[k].name);
            put_label(&b, m->tokens[i].model);
            sy_buf_printf(&b, "\"} %llu\n", (unsigned long long)v);
        }
    }
    /* The same totals under llama-server's names (all models together, as one llama-server has one), so that
     * dashboards built for it work. */
    uint64_t all_prompt = 0, all_generated = 0;
    for (size_t i = 0; i < m->n_tokens; i++) all_prompt += m->tokens[i].prompt, all_generated += m->tokens[i].generated;
    header(&b, "llamacpp:prompt_tokens_total", "counter", "Number of prompt tokens processed.");
    sy_buf_printf(&b, "llamacpp:prompt_tokens_total %llu\n", (unsigned long long)all_prompt);
    header(&b, "llamacpp:tokens_predicted_total", "counter", "Number of generation tokens processed.");
    sy_buf_printf(&b, "llamacpp:tokens_predicted_total %llu\n", (unsigned long long)all_generated);
    render_histogram(&b, "switchyard_time_to_first_token_seconds",
                     "Seconds from a request's arrival to its first output token.", &m->ttft);
    render_histogram(&b, "switchyard_token_latency_seconds", "Seconds between consecutive output tokens.",
                     &m->token_latency);
    pthread_mutex_unlock(&m->lock);

    if (counters != NULL) {
        header(&b, "switchyard_model_loads_total", "counter", "Model loads that succeeded.");
        sy_buf_printf(&b, "switchyard_model_loads_total %llu\n", (unsigned long long)counters->loads);
        header(&b, "switchyard_model_load_failures_total", "counter", "Model loads that failed.");
        sy_buf_printf(&b, "switchyard_model_load_failures_total %llu\n",
                      (unsigned long long)counters->load_failures);
        header(&b, "switchyard_model_swaps_total", "counter", "Models unloaded to make room for another.");
        sy_buf_printf(&b, "switchyard_model_swaps_total %llu\n", (unsigned long long)counters->swaps);
        header(&b, "switchyard_model_unloads_total", "counter", "Model unloads of every cause.");
        sy_buf_printf(&b, "switchyard_model_unloads_total %llu\n", (unsigned long long)counters->unloads);
        header(&b, "switchyard_model_load_seconds_total", "counter", "Seconds spent loading models.");
        sy_buf_printf(&b, "switchyard_model_load_seconds_total %.6f\n", counters->load_seconds_total);
    }
    if (models != NULL) {
        header(&b, "switchyard_model_state", "gauge", "1 for the state each configured model is in.");
        for (size_t i = 0; i < n_models; i++) {
            for (int s = SY_MODEL_UNLOADED; s <= SY_MODEL_UNLOADING; s++) {
                sy_buf_puts(&b, "switchyard_model_state{model=\"");
                put_label(&b, models[i].name ? models[i].name : "");
                sy_buf_printf(&b, "\",state=\"%s\"} %d\n", state_name((sy_model_state)s),
                              models[i].state == (sy_model_state)s);
            }
        }
        render_model_gauge(&b, "switchyard_model_memory_bytes", "Memory a loaded model holds (0 when unloaded).",
                           models, n_models, v_memory);
        render_model_gauge(&b, "switchyard_model_device_memory_bytes",
                           "Accelerator memory a loaded model holds (0 when unloaded or on the CPU).", models, n_models,
                           v_device_memory);
        render_model_gauge(&b, "switchyard_slots_busy", "Slots generating now.", models, n_models, v_slots);
        render_model_gauge(&b, "switchyard_queue_depth", "Requests waiting for a free slot.", models, n_models,
                           v_queue);
        render_model_gauge(&b, "switchyard_prefix_cache_sequences", "Sequences parked in the host prefix cache.",
                           models, n_models, v_parked_sequences);
        render_model_gauge(&b, "switchyard_prefix_cache_tokens",
                           "Tokens of the sequences parked in the host prefix cache (prefix_cache_tokens bounds it).",
                           models, n_models, v_parked_tokens);
        render_model_gauge(&b, "switchyard_constrained_tokens",
                           "Tokens chosen under a grammar (response_format, format, grammar) since the model loaded.",
                           models, n_models, v_constrained_tokens);
        render_model_gauge(&b, "switchyard_constraint_microseconds",
                           "Engine-loop time spent on grammars (masks, masked rows, accepts) since the model loaded.",
                           models, n_models, v_constraint_us);
        header(&b, "switchyard_kv_cache_usage_ratio", "gauge",
               "Fraction (0..1) of a model's KV capacity (slots x context) that its running generations hold.");
        for (size_t i = 0; i < n_models; i++) {
            sy_buf_puts(&b, "switchyard_kv_cache_usage_ratio{model=\"");
            put_label(&b, models[i].name ? models[i].name : "");
            sy_buf_printf(&b, "\"} %.6f\n", kv_ratio(models[i].sched.kv_tokens, models[i].sched.kv_capacity_tokens));
        }
        render_load_signals(&b, models, n_models);
    }
    if (models != NULL) {
        uint64_t busy = 0, queued = 0;
        for (size_t i = 0; i < n_models; i++) busy += models[i].sched.slots_busy, queued += models[i].sched.queue_depth;
        header(&b, "llamacpp:requests_processing", "gauge", "Number of requests processing.");
        sy_buf_printf(&b, "llamacpp:requests_processing %llu\n", (unsigned long long)busy);
        header(&b, "llamacpp:requests_deferred", "gauge", "Number of requests deferred.");
        sy_buf_printf(&b, "llamacpp:requests_deferred %llu\n", (unsigned long long)queued);
    }
    render_snapshot_counters(&b);
    if (len != NULL) *len = b.len;
    return sy_buf_take(&b);
}
