/* switchyard serve: the HTTP server with the OpenAI and Ollama APIs over the configured models.
 *
 * Signals are blocked in every thread and taken by the main thread with sigtimedwait, which also paces the once-a-
 * second chores (idle unloading, --watch-config). SIGHUP reloads the config. SIGINT/SIGTERM stop cleanly, in the
 * order a Kubernetes pod needs (docs/deploy.md): drain (/health says "draining", new work gets 503 with
 * Retry-After, what runs finishes, for up to drain_timeout; a second signal cuts it short), cut what is left,
 * write the KV snapshots, exit. A signal during the last part kills at once. */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cli/cli_common.h"
#include "cli/commands.h"
#include "cli/serve_discover.h"
#include "config/config.h"
#include "api/context.h"
#include "api/serve.h"
#include "http/http_server.h"
#include "base/log.h"
#include "api/metrics.h"
#include "manager/config_check.h"
#include "manager/model_manager.h"
#include "base/util.h"

/* What a client refused while draining is told to wait before it retries (it lands on another replica). */
#define SY_SERVE_RETRY_AFTER_S 1u

static void usage(FILE *out) {
    fprintf(out,
            "usage: switchyard serve --config FILE [options]\n"
            "       switchyard serve [options] MODEL... | --models-dir DIR\n\n"
            "Serves the models of FILE over HTTP: the OpenAI API (/v1/chat/completions, /v1/completions,\n"
            "/v1/models), the Ollama API (/api/chat, /api/generate, /api/tags, /api/show, /api/ps,\n"
            "/api/version) and llama-swap's management endpoints (/health, /running, /unload, /metrics).\n"
            "Models load on their first request and swap by their groups' rules. See docs/api.md.\n\n"
            "options:\n"
            "  --config FILE           the configuration (INI; see docs/config.md)\n"
            "  MODEL...                GGUF files (or Ollama blobs) and Hugging Face model folders to serve, each\n"
            "                          named after its file or folder (the GGUF's general.name as an alias)\n"
            "  --models-dir DIR        serve every model in DIR: GGUF files, folders of them, Hugging Face\n"
            "                          folders, or an Ollama models folder (manifests/ and blobs/: NAME:TAG);\n"
            "                          with --config, the file adds models and overrides found ones by name\n"
            "  --listen ADDR           HOST:PORT or [V6]:PORT to listen on, overriding [host] listen\n"
            "                          (default 127.0.0.1:8080; port 0 picks a free port, logged at start)\n"
            "  --plugin-dir DIR        where plugins are (default: [host] plugin_dir, else beside the executable)\n"
            "  --watch-config          reload the config when its file changes (checked once a second);\n"
            "                          SIGHUP always reloads it\n"
            "  --log-level LEVEL       error, warn, info or debug (default: [host] log_level, else info)\n"
            "  --drain-timeout SECONDS at SIGTERM/SIGINT, let work in flight finish for up to this long while new\n"
            "                          work gets 503 + Retry-After, then cut it (default: [host] drain_timeout, 0)\n"
            "  --check-config          read and check the config (engine keys against the plugins), print its\n"
            "                          warnings and errors, and exit: 0 when it can be served, 1 otherwise\n"
            "KV snapshots (warm slots are saved to the resume path at unload and shutdown; see\n"
            "docs/snapshot-format.md):\n"
            "  --resume                restore the warm KV snapshots in the resume path when models load\n"
            "  --resume-path DIR       where snapshots are kept (default: [host] resume_path)\n"
            "  --resume-no-host-cache  restore into the slots only, not into the host prefix cache\n"
            "  -h, --help              this text\n");
}

enum {
    OPT_CONFIG = 1000, OPT_LISTEN, OPT_PLUGIN_DIR, OPT_WATCH, OPT_RESUME, OPT_RESUME_PATH, OPT_RESUME_NO_HOST_CACHE,
    OPT_LOG_LEVEL, OPT_DRAIN_TIMEOUT, OPT_CHECK_CONFIG, OPT_MODELS_DIR
};

typedef struct serve_state {
    const char *config_path;
    sy_serve_sources sources;  /* MODEL... and --models-dir: models found rather than configured */
    bool discover;
    const char *listen_override;
    const char *resume_path_override;
    bool resume;
    bool resume_no_host_cache;
    bool log_level_given;
    long drain_timeout_override; /* -1: the config's */
    char listen[300];          /* the address in effect */
    sy_model_manager *mm;
    sy_api_context *api;
    const sy_plugin_registry *reg; /* the engine keys of a reloaded config are checked against its plugins */
    struct stat config_stat;   /* for --watch-config */
    bool config_stat_ok;
} serve_state;

/* Command-line values win over the file's. */
static void apply_overrides(const serve_state *st, sy_config *cfg) {
    if (st->resume) cfg->host.resume = true;
    if (st->resume_no_host_cache) cfg->host.resume_no_host_cache = true;
    if (st->resume_path_override) {
        free(cfg->host.resume_path);
        cfg->host.resume_path = sy_strdup(st->resume_path_override);
    }
    if (!st->log_level_given && cfg->host.log_level_set) sy_log_set_level(cfg->host.log_level);
    if (st->drain_timeout_override >= 0) cfg->host.drain_timeout_s = (uint32_t)st->drain_timeout_override;
}

static bool stat_changed(const struct stat *a, const struct stat *b) {
    return a->st_mtim.tv_sec != b->st_mtim.tv_sec || a->st_mtim.tv_nsec != b->st_mtim.tv_nsec ||
           a->st_size != b->st_size || a->st_ino != b->st_ino || a->st_dev != b->st_dev;
}

/* The config file, or (MODEL..., --models-dir) the models found plus the file's. */
static sy_config *load_config(const serve_state *st) {
    if (!st->discover) return sy_config_load_file(st->config_path);
    return sy_serve_discover_config(st->config_path, &st->sources, st->reg);
}

/* 0 when the new config is in effect; else -1 with why in msg (the running one stays). Serialized by the caller. */
static int reload_config_locked(serve_state *st, const char *why, char *msg, size_t msg_size) {
    const char *what = st->config_path ? st->config_path : "the models found";
    sy_log(SY_LOG_INFO, "reloading %s (%s)", what, why);
    if (st->config_path) st->config_stat_ok = stat(st->config_path, &st->config_stat) == 0;
    sy_config *cfg = load_config(st);
    if (cfg == NULL) {
        sy_log(SY_LOG_ERROR, "the models could not be found again; the running configuration stays in effect");
        snprintf(msg, msg_size, "the models could not be found again; the running configuration stays in effect");
        return -1;
    }
    if (sy_config_ok(cfg)) sy_config_check_plugin_options(cfg, st->reg);
    sy_config_print_diagnostics(cfg, stderr);
    if (!sy_config_ok(cfg)) {
        sy_log(SY_LOG_ERROR, "%s has errors; the running configuration stays in effect", what);
        snprintf(msg, msg_size, "%s has errors (see the server's log); the running configuration stays in effect",
                 what);
        sy_config_free(cfg);
        return -1;
    }
    apply_overrides(st, cfg);
    const char *listen = st->listen_override ? st->listen_override
                                             : (cfg->host.listen ? cfg->host.listen : SY_SERVER_DEFAULT_LISTEN);
    if (strcmp(listen, st->listen) != 0)
        sy_log(SY_LOG_WARN, "listen changed to %s: restart switchyard to move the server (it stays on %s)", listen,
               st->listen);
    if (sy_model_manager_reload(st->mm, cfg) != 0) {
        sy_log(SY_LOG_ERROR, "the model manager refused the new configuration; the running one stays in effect");
        snprintf(msg, msg_size, "the model manager refused the new configuration; the running one stays in effect");
        sy_config_free(cfg);
        return -1;
    }
    sy_api_replace_config(st->api, cfg);
    sy_log(SY_LOG_INFO, "configuration reloaded from %s", what);
    return 0;
}

/* SIGHUP and --watch-config on the main thread, POST /reload on a connection's: one at a time. */
static pthread_mutex_t reload_lock = PTHREAD_MUTEX_INITIALIZER;

static int reload_config(serve_state *st, const char *why, char *msg, size_t msg_size) {
    pthread_mutex_lock(&reload_lock);
    int rc = reload_config_locked(st, why, msg, msg_size);
    pthread_mutex_unlock(&reload_lock);
    return rc;
}

static int reload_from_http(void *arg, char *msg, size_t msg_size) {
    return reload_config(arg, "POST /reload", msg, msg_size);
}

static void *preload_thread(void *arg) {
    sy_model_manager *mm = arg;
    int failed = sy_model_manager_preload(mm);
    if (failed > 0) sy_log(SY_LOG_ERROR, "%d preloaded model(s) failed to load (see above)", failed);
    return NULL;
}

int sy_cmd_serve(int argc, char **argv) {
    static const struct option options[] = {
        {"config", required_argument, NULL, OPT_CONFIG},
        {"listen", required_argument, NULL, OPT_LISTEN},
        {"plugin-dir", required_argument, NULL, OPT_PLUGIN_DIR},
        {"watch-config", no_argument, NULL, OPT_WATCH},
        {"resume", no_argument, NULL, OPT_RESUME},
        {"resume-path", required_argument, NULL, OPT_RESUME_PATH},
        {"resume-no-host-cache", no_argument, NULL, OPT_RESUME_NO_HOST_CACHE},
        {"log-level", required_argument, NULL, OPT_LOG_LEVEL},
        {"drain-timeout", required_argument, NULL, OPT_DRAIN_TIMEOUT},
        {"check-config", no_argument, NULL, OPT_CHECK_CONFIG},
        {"models-dir", required_argument, NULL, OPT_MODELS_DIR},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    serve_state st;
    memset(&st, 0, sizeof st);
    st.drain_timeout_override = -1;
    const char *plugin_dir = NULL;
    bool watch = false, check_only = false;
    sy_log_level level = SY_LOG_INFO;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", options, NULL)) != -1) {
        switch (c) {
        case OPT_CONFIG: st.config_path = optarg; break;
        case OPT_LISTEN: st.listen_override = optarg; break;
        case OPT_PLUGIN_DIR: plugin_dir = optarg; break;
        case OPT_WATCH: watch = true; break;
        case OPT_CHECK_CONFIG: check_only = true; break;
        case OPT_RESUME: st.resume = true; break;
        case OPT_RESUME_PATH: st.resume_path_override = optarg; break;
        case OPT_RESUME_NO_HOST_CACHE: st.resume_no_host_cache = true; break;
        case OPT_MODELS_DIR: st.sources.models_dir = optarg; break;
        case OPT_LOG_LEVEL:
            if (sy_log_parse_level(optarg, &level) != 0) {
                sy_cli_error("serve", "--log-level: '%s' is not one of error, warn, info, debug", optarg);
                return 2;
            }
            st.log_level_given = true;
            break;
        case OPT_DRAIN_TIMEOUT: {
            uint64_t v;
            if (sy_parse_u64(optarg, 3600, &v) != 0) {
                sy_cli_error("serve", "--drain-timeout: '%s' is not a number of seconds from 0 to 3600", optarg);
                return 2;
            }
            st.drain_timeout_override = (long)v;
            break;
        }
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    /* the arguments left are model files and folders */
    st.sources.models = (const char *const *)(argv + optind);
    st.sources.n_models = (size_t)(argc - optind);
    st.discover = st.sources.n_models > 0 || st.sources.models_dir != NULL;
    if (st.config_path == NULL && !st.discover) {
        sy_cli_error("serve", "name the models: --config FILE, model files or folders, or --models-dir DIR "
                              "(see --help)");
        return 2;
    }
    if (watch && st.config_path == NULL) {
        sy_cli_error("serve", "--watch-config needs --config FILE");
        return 2;
    }
    /* serve talks more than the one-shot verbs: info unless told otherwise (SY_LOG_LEVEL, the config). */
    if (st.log_level_given || getenv("SY_LOG_LEVEL") == NULL) sy_log_set_level(level);

    /* Block the signals before any thread exists, so that every thread inherits the mask and only sigtimedwait
     * below receives them. */
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGINT);
    sigaddset(&signals, SIGTERM);
    sigaddset(&signals, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &signals, NULL);
    signal(SIGPIPE, SIG_IGN);

    const char *what = st.config_path ? st.config_path : "the models found";
    if (st.config_path) st.config_stat_ok = stat(st.config_path, &st.config_stat) == 0;
    sy_config *cfg = st.config_path ? sy_config_load_file(st.config_path) : sy_config_load_string("", 0, what, NULL);
    if (!sy_config_ok(cfg)) {
        sy_config_print_diagnostics(cfg, stderr);
        sy_cli_error("serve", "%s has errors (above); nothing was started", what);
        sy_config_free(cfg);
        return 1;
    }
    apply_overrides(&st, cfg);
    snprintf(st.listen, sizeof st.listen, "%s",
             st.listen_override ? st.listen_override
                                : (cfg->host.listen ? cfg->host.listen : SY_SERVER_DEFAULT_LISTEN));

    /* Plugins load when a model first needs them: one that no model names costs nothing. */
    sy_plugin_registry reg;
    memset(&reg, 0, sizeof reg);
    char dir[4096];
    if (sy_cli_open_plugins_lazy(plugin_dir ? plugin_dir : cfg->host.plugin_dir, &reg, dir, sizeof dir) != 0) {
        sy_config_free(cfg);
        return 1;
    }
    st.reg = &reg;
    if (st.discover) { /* now that the plugins can describe files (the GGUF's general.name as an alias) */
        sy_config *found = load_config(&st);
        if (found == NULL) {
            sy_cli_error("serve", "some of the models named are not models (above); nothing was started");
            sy_config_free(cfg);
            sy_plugin_registry_close(&reg);
            return 1;
        }
        sy_config_free(cfg);
        cfg = found;
        apply_overrides(&st, cfg);
        if (cfg->n_models == 0) sy_log(SY_LOG_WARN, "serve: no models were found");
    }
    /* Only models with engine keys ask their plugins, so this loads just the plugins those name. */
    sy_config_check_plugin_options(cfg, &reg);
    sy_config_print_diagnostics(cfg, stderr);
    if (!sy_config_ok(cfg)) {
        sy_cli_error("serve", "%s has errors (above); nothing was started", what);
        sy_config_free(cfg);
        sy_plugin_registry_close(&reg);
        return 1;
    }
    if (check_only) {
        fprintf(stderr, "switchyard: %s: ok (%zu models, %zu groups, %zu peers)\n", st.config_path, cfg->n_models,
                cfg->n_groups, cfg->n_peers);
        sy_config_free(cfg);
        sy_plugin_registry_close(&reg);
        return 0;
    }

    st.mm = sy_model_manager_create(cfg, &reg);
    if (st.mm == NULL) {
        sy_cli_error("serve", "the model manager could not be created");
        sy_config_free(cfg);
        sy_plugin_registry_close(&reg);
        return 1;
    }
    sy_metrics *metrics = sy_metrics_create();
    sy_server_options so;
    memset(&so, 0, sizeof so);
    so.listen = st.listen;
    so.max_request_body = cfg->host.max_request_body;
    so.max_connections = cfg->host.max_connections;
    so.max_connections_per_client = cfg->host.max_connections_per_client;
    so.connection_reserve = cfg->host.connection_reserve;
    so.request_timeout_s = cfg->host.request_timeout_s;
    so.stream_timeout_s = cfg->host.stream_timeout_s;
    char err[1024];
    st.api = sy_api_serve(&so, cfg, st.mm, metrics, err, sizeof err); /* cfg now belongs to the API context */
    if (st.api == NULL) {
        sy_cli_error("serve", "%s", err);
        sy_model_manager_destroy(st.mm);
        sy_metrics_free(metrics);
        sy_plugin_registry_close(&reg);
        return 1;
    }
    sy_api_set_reload(st.api, reload_from_http, &st);
    fprintf(stderr, "switchyard: listening on %s (plugins from %s)\n", sy_server_url(sy_api_server(st.api)), dir);
    fflush(stderr);

    pthread_t preloader;
    bool preloading = pthread_create(&preloader, NULL, preload_thread, st.mm) == 0;
    if (!preloading) sy_log(SY_LOG_ERROR, "could not start the preload thread; models load on first use");

    int stop_signal = 0;
    while (stop_signal == 0) {
        struct timespec one_second = {1, 0};
        int sig = sigtimedwait(&signals, NULL, &one_second);
        if (sig == SIGINT || sig == SIGTERM) {
            stop_signal = sig;
        } else if (sig == SIGHUP) {
            char msg[512];
            reload_config(&st, "SIGHUP", msg, sizeof msg);
        } else if (sig < 0 && errno != EAGAIN && errno != EINTR) {
            sy_log(SY_LOG_ERROR, "sigtimedwait: %s", strerror(errno));
            stop_signal = SIGTERM;
        }
        sy_model_manager_tick(st.mm);
        if (watch) {
            struct stat now;
            bool ok = stat(st.config_path, &now) == 0;
            char msg[512];
            if (ok && (!st.config_stat_ok || stat_changed(&now, &st.config_stat)))
                reload_config(&st, "file changed", msg, sizeof msg);
            else if (!ok && st.config_stat_ok) {
                sy_log(SY_LOG_WARN, "%s: %s (watching for it to come back)", st.config_path, strerror(errno));
                st.config_stat_ok = false;
            }
        }
    }

    /* The stop, timed for docs/deploy.md: drain, cut, snapshots. */
    const char *signame = stop_signal == SIGINT ? "SIGINT" : "SIGTERM";
    double t_stop = sy_now_seconds();
    const sy_config *running = sy_api_config_acquire(st.api);
    uint32_t drain_s = running->host.drain_timeout_s;
    sy_api_config_release(st.api, running);
    unsigned in_flight = sy_api_in_flight(st.api);
    if (drain_s > 0) {
        sy_api_drain(st.api, SY_SERVE_RETRY_AFTER_S);
        fprintf(stderr, "switchyard: %s: draining (%u request(s) in flight, up to %u s; new work gets 503)\n",
                signame, in_flight, (unsigned)drain_s);
        fflush(stderr);
        double deadline = t_stop + drain_s;
        while ((in_flight = sy_api_in_flight(st.api)) > 0 && sy_now_seconds() < deadline) {
            struct timespec tick = {0, 50 * 1000 * 1000};
            int sig = sigtimedwait(&signals, NULL, &tick);
            if (sig == SIGINT || sig == SIGTERM) {
                fprintf(stderr, "switchyard: a second signal: the drain is cut short\n");
                break;
            }
        }
        in_flight = sy_api_in_flight(st.api);
        fprintf(stderr, "switchyard: drained in %.2f s (%u request(s) left to cut)\n", sy_now_seconds() - t_stop,
                in_flight);
    }
    fprintf(stderr, "switchyard: %s: stopping (%u request(s) in flight are cut; KV snapshots are written)\n",
            signame, in_flight);
    /* From here a signal ends the process at once, should the clean stop hang. */
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    sigset_t stop_set;
    sigemptyset(&stop_set);
    sigaddset(&stop_set, SIGINT);
    sigaddset(&stop_set, SIGTERM);
    pthread_sigmask(SIG_UNBLOCK, &stop_set, NULL);
    sy_api_stop(st.api);
    double t_cut = sy_now_seconds();
    if (preloading) pthread_join(preloader, NULL);
    sy_model_manager_destroy(st.mm); /* saves every loaded model's warm KV */
    double t_saved = sy_now_seconds();
    sy_metrics_free(metrics);
    sy_plugin_registry_close(&reg);
    fprintf(stderr, "switchyard: stopped in %.2f s (drain and cut %.2f s, snapshots and unload %.2f s)\n",
            sy_now_seconds() - t_stop, t_cut - t_stop, t_saved - t_cut);
    return 0;
}
