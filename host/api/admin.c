/* Management endpoints: /, /health, /running, /unload, /metrics. */
#include "api/admin.h"

#include <errno.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include "api/context.h"
#include "base/utf8.h"
#include "base/util.h"

/* ------------------------------------------------------------------------------------------------------------
 * Management endpoints: /, /health, /running, /unload, /metrics */

void sy_api_root(sy_http_request *r) {
    static const char text[] = "switchyard is running\n";
    sy_http_respond(r, 200, "text/plain; charset=utf-8", text, sizeof text - 1);
}

/* The answers a Kubernetes readiness probe reads (docs/deploy.md): 200 "ok" once the preload models are ready;
 * 503 while they load ("loading"), when one failed ("error"), as soon as a stop begins ("draining", then
 * "stopping"). Loads after the start (swaps) do not change it: the server answers meanwhile. */
void sy_api_health(sy_http_request *r) {
    sy_api_context *srv = sy_api_ctx(r);
    cJSON *json = cJSON_CreateObject();
    int status = 503;
    const char *state = "ok";
    sy_server *server = sy_http_server(r);
    sy_preload_state preload = sy_model_manager_preload_state(sy_api_manager(srv));
    if (sy_api_stopping(srv)) state = "stopping";
    else if (sy_server_draining(server)) state = "draining";
    else if (preload == SY_PRELOAD_PENDING) state = "loading";
    else if (preload == SY_PRELOAD_FAILED) state = "error";
    else status = 200;
    cJSON_AddStringToObject(json, "status", state);
    if (preload == SY_PRELOAD_FAILED && status == 503 && strcmp(state, "error") == 0)
        cJSON_AddStringToObject(json, "error", "a preload model failed to load (see the server's log)");
    sy_http_respond_json(r, status, json);
}

/* The manager's status of every configured model (malloc'd, *n entries). */
static sy_model_status *model_statuses(sy_model_manager *mm, size_t *n) {
    size_t cap = 16;
    for (;;) {
        sy_model_status *st = sy_xcalloc(cap, sizeof *st);
        size_t total = sy_model_manager_status(mm, st, cap);
        if (total <= cap) {
            *n = total;
            return st;
        }
        free(st);
        cap = total; /* a reload may have grown the list meanwhile: try again */
    }
}

static const char *model_state_name(sy_model_state s) {
    switch (s) {
    case SY_MODEL_UNLOADED: return "stopped";
    case SY_MODEL_LOADING: return "starting";
    case SY_MODEL_READY: return "ready";
    case SY_MODEL_UNLOADING: return "stopping";
    }
    return "unknown";
}

void sy_api_running(sy_http_request *r) {
    size_t n = 0;
    sy_model_status *st = model_statuses(sy_api_manager(sy_api_ctx(r)), &n);
    cJSON *json = cJSON_CreateObject();
    cJSON *running = cJSON_AddArrayToObject(json, "running");
    for (size_t i = 0; i < n; i++) {
        if (st[i].state == SY_MODEL_UNLOADED) continue;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "model", st[i].name ? st[i].name : "");
        cJSON_AddStringToObject(o, "state", model_state_name(st[i].state));
        cJSON_AddStringToObject(o, "plugin", st[i].plugin ? st[i].plugin : "");
        cJSON_AddStringToObject(o, "path", st[i].path ? st[i].path : "");
        cJSON_AddNumberToObject(o, "ttl", (double)st[i].ttl_in_effect_s); /* a keep_alive's, else the config's */
        cJSON_AddNumberToObject(o, "idle_seconds", st[i].idle_seconds);
        cJSON_AddNumberToObject(o, "memory_bytes", (double)st[i].memory_bytes);
        cJSON_AddNumberToObject(o, "device_bytes", (double)st[i].device_bytes);
        cJSON_AddNumberToObject(o, "slots_busy", st[i].sched.slots_busy);
        cJSON_AddNumberToObject(o, "queue_depth", st[i].sched.queue_depth);
        if (st[i].pid != 0) { /* a process model: its child, and the requests it is serving */
            cJSON_AddNumberToObject(o, "pid", st[i].pid);
            cJSON_AddNumberToObject(o, "in_flight", st[i].in_flight);
        }
        cJSON_AddItemToArray(running, o);
    }
    free(st);
    sy_http_respond_json(r, 200, json);
}

void sy_api_unload(sy_http_request *r) {
    const char *name = sy_http_path_param(r);
    if (name == NULL || name[0] == '\0') name = sy_http_query(r, "model");
    if (name != NULL && name[0] == '\0') name = NULL;
    int n = sy_model_manager_unload(sy_api_manager(sy_api_ctx(r)), name);
    if (n < 0) {
        char shown[160];
        sy_utf8_sanitize(shown, sizeof shown, name, strlen(name));
        sy_http_respond_error(r, 404, "model_not_found", "model", "model '%s' is not configured", shown);
        return;
    }
    cJSON *json = cJSON_CreateObject();
    cJSON_AddStringToObject(json, "status", "ok");
    cJSON_AddNumberToObject(json, "unloaded", n);
    sy_http_respond_json(r, 200, json);
}

void sy_api_reload(sy_http_request *r) {
    char msg[600] = "";
    int rc = sy_api_reload_config(sy_api_ctx(r), msg, sizeof msg);
    if (rc == 1) {
        sy_http_respond_error(r, 501, "not_supported", NULL, "this server has no configuration file to reload");
        return;
    }
    if (rc != 0) {
        sy_http_respond_error(r, 400, "reload_failed", NULL, "%s", msg[0] ? msg : "the reload failed");
        return;
    }
    cJSON *json = cJSON_CreateObject();
    cJSON_AddStringToObject(json, "status", "ok");
    sy_http_respond_json(r, 200, json);
}

void sy_api_metrics(sy_http_request *r) {
    sy_api_context *srv = sy_api_ctx(r);
    sy_model_manager *mm = sy_api_manager(srv);
    size_t n = 0;
    sy_model_status *st = model_statuses(mm, &n);
    sy_model_manager_counters counters;
    memset(&counters, 0, sizeof counters);
    sy_model_manager_get_counters(mm, &counters);
    size_t len = 0;
    char *text = sy_metrics_render(sy_api_context_metrics(srv), st, n, &counters, &len);
    free(st);
    sy_http_respond(r, 200, "text/plain; version=0.0.4; charset=utf-8", text, len);
    free(text);
}
