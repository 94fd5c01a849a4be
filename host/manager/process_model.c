/* Process models: see process_model.h. */
#include "manager/process_model.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "base/util.h"

extern char **environ;

/* ------------------------------------------------------------------------------------------------------------
 * Specs */

static char *dup_or_null(const char *s) { return s != NULL ? sy_strdup(s) : NULL; }

static char **dup_list(const sy_config_list *l, size_t *n) {
    *n = l->count;
    char **out = sy_xcalloc(l->count ? l->count : 1, sizeof *out);
    for (size_t i = 0; i < l->count; i++) out[i] = sy_strdup(l->items[i]);
    return out;
}

sy_process_spec *sy_process_spec_from_config(const sy_config_model *m) {
    if (m->cmd == NULL) return NULL;
    sy_process_spec *s = sy_xcalloc(1, sizeof *s);
    s->model = sy_strdup(m->name);
    s->cmd = sy_strdup(m->cmd);
    s->cmd_stop = dup_or_null(m->cmd_stop);
    s->env = dup_list(&m->env, &s->n_env);
    s->check_endpoint = sy_strdup(m->check_endpoint ? m->check_endpoint : "/health");
    s->proxy = sy_strdup(m->proxy ? m->proxy : "http://127.0.0.1");
    s->use_model_name = dup_or_null(m->use_model_name);
    s->strip_params = dup_list(&m->strip_params, &s->n_strip_params);
    s->set_params = dup_or_null(m->set_params);
    s->memory = m->memory;
    s->connect_timeout_s = m->connect_timeout_s;
    s->header_timeout_s = m->header_timeout_s;
    s->stop_grace_s = m->stop_grace_s;
    return s;
}

static void free_list(char **l, size_t n) {
    for (size_t i = 0; i < n; i++) free(l[i]);
    free(l);
}

void sy_process_spec_free(sy_process_spec *s) {
    if (s == NULL) return;
    free(s->model);
    free(s->cmd);
    free(s->cmd_stop);
    free_list(s->env, s->n_env);
    free(s->check_endpoint);
    free(s->proxy);
    free(s->use_model_name);
    free_list(s->strip_params, s->n_strip_params);
    free(s->set_params);
    free(s);
}

static bool same(const char *a, const char *b) { return (a == NULL || b == NULL) ? a == b : strcmp(a, b) == 0; }

static bool same_list(char **a, size_t na, char **b, size_t nb) {
    if (na != nb) return false;
    for (size_t i = 0; i < na; i++)
        if (strcmp(a[i], b[i]) != 0) return false;
    return true;
}

bool sy_process_spec_equal(const sy_process_spec *a, const sy_process_spec *b) {
    if (a == NULL || b == NULL) return a == b;
    return same(a->cmd, b->cmd) && same(a->cmd_stop, b->cmd_stop) && same_list(a->env, a->n_env, b->env, b->n_env) &&
           same(a->check_endpoint, b->check_endpoint) && same(a->proxy, b->proxy) &&
           same(a->use_model_name, b->use_model_name) &&
           same_list(a->strip_params, a->n_strip_params, b->strip_params, b->n_strip_params) &&
           same(a->set_params, b->set_params) && a->memory == b->memory &&
           a->connect_timeout_s == b->connect_timeout_s && a->header_timeout_s == b->header_timeout_s &&
           a->stop_grace_s == b->stop_grace_s;
}

/* ------------------------------------------------------------------------------------------------------------
 * Command words */

void sy_process_free_words(char **words, size_t n) { free_list(words, n); }

char **sy_process_split_command(const char *cmd, size_t *n_words, char *why, size_t why_size) {
    size_t cap = 8, n = 0;
    char **words = sy_xcalloc(cap, sizeof *words);
    sy_buf w;
    sy_buf_init(&w);
    const char *p = cmd;
    bool in_word = false;
    for (;;) {
        char ch = *p;
        if (ch == '\0' || ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r') {
            if (in_word) {
                if (n + 1 >= cap) {
                    cap *= 2;
                    words = sy_xrealloc(words, cap * sizeof *words);
                }
                sy_buf_append(&w, "", 1);
                words[n++] = sy_strdup(w.data);
                sy_buf_clear(&w);
                in_word = false;
            }
            if (ch == '\0') break;
            p++;
            continue;
        }
        if (ch == '\\') {
            char next = p[1];
            if (next == '\0' || next == '\n') { /* a line continuation */
                p += next == '\n' ? 2 : 1;
                continue;
            }
            sy_buf_append(&w, &next, 1);
            in_word = true;
            p += 2;
            continue;
        }
        if (ch == '\'') {
            const char *close = strchr(p + 1, '\'');
            if (close == NULL) {
                snprintf(why, why_size, "an unclosed ' in the command");
                goto fail;
            }
            sy_buf_append(&w, p + 1, (size_t)(close - p - 1));
            in_word = true;
            p = close + 1;
            continue;
        }
        if (ch == '"') {
            p++;
            while (*p != '"') {
                if (*p == '\0') {
                    snprintf(why, why_size, "an unclosed \" in the command");
                    goto fail;
                }
                if (*p == '\\' && p[1] != '\0' && strchr("\"\\$`", p[1]) != NULL) p++;
                sy_buf_append(&w, p, 1);
                p++;
            }
            in_word = true;
            p++;
            continue;
        }
        sy_buf_append(&w, p, 1);
        in_word = true;
        p++;
    }
    sy_buf_free(&w);
    if (n == 0) {
        snprintf(why, why_size, "the command is empty");
        free(words);
        return NULL;
    }
    words[n] = NULL;
    *n_words = n;
    return words;
fail:
    sy_buf_free(&w);
    free_list(words, n);
    return NULL;
}

/* ------------------------------------------------------------------------------------------------------------
 * The log ring: the last LOG_RING_BYTES of every line captured, each "[MODEL] text\n". */

#define LOG_RING_BYTES ((size_t)1 << 20)

static pthread_mutex_t ring_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ring_grew = PTHREAD_COND_INITIALIZER;
static char *ring;
static uint64_t ring_total; /* bytes ever appended */
static _Thread_local bool capturing; /* this thread logs a child's line: the log sink must not add it again */

static void ring_put(const char *data, size_t len) {
    if (ring == NULL) ring = sy_xmalloc(LOG_RING_BYTES);
    for (size_t i = 0; i < len; i++) ring[(ring_total + i) % LOG_RING_BYTES] = data[i];
    ring_total += len;
}

void sy_process_logs_append(const char *model, const char *line, size_t len) {
    pthread_mutex_lock(&ring_lock);
    ring_put("[", 1);
    ring_put(model, strlen(model));
    ring_put("] ", 2);
    ring_put(line, len);
    if (len == 0 || line[len - 1] != '\n') ring_put("\n", 1);
    pthread_cond_broadcast(&ring_grew);
    pthread_mutex_unlock(&ring_lock);
}

static void own_log_sink(const char *line) {
    if (!capturing) sy_process_logs_append("switchyard", line, strlen(line));
}

/* The ring's bytes from absolute offset `from` (clamped to what is kept) to the end. Lock held. */
static uint64_t ring_copy(uint64_t from, sy_buf *out) {
    uint64_t oldest = ring_total > LOG_RING_BYTES ? ring_total - LOG_RING_BYTES : 0;
    if (from < oldest) from = oldest;
    for (uint64_t i = from; i < ring_total; i++) sy_buf_append(out, &ring[i % LOG_RING_BYTES], 1);
    return ring_total;
}

void sy_process_logs(const char *model, sy_buf *out) {
    sy_buf all;
    sy_buf_init(&all);
    pthread_mutex_lock(&ring_lock);
    ring_copy(0, &all);
    pthread_mutex_unlock(&ring_lock);
    /* Whole lines only: the oldest one may have been cut by the ring. */
    size_t start = 0;
    if (ring_total > LOG_RING_BYTES) {
        const char *nl = all.len ? memchr(all.data, '\n', all.len) : NULL;
        start = nl ? (size_t)(nl - all.data) + 1 : all.len;
    }
    char prefix[SY_CONFIG_MAX_NAME_LEN + 4];
    size_t plen = model ? (size_t)snprintf(prefix, sizeof prefix, "[%s] ", model) : 0;
    for (size_t i = start; i < all.len;) {
        const char *nl = memchr(all.data + i, '\n', all.len - i);
        size_t end = nl ? (size_t)(nl - all.data) + 1 : all.len;
        if (model == NULL)
            sy_buf_append(out, all.data + i, end - i);
        else if (end - i >= plen && memcmp(all.data + i, prefix, plen) == 0)
            sy_buf_append(out, all.data + i + plen, end - i - plen);
        i = end;
    }
    sy_buf_free(&all);
}

void sy_process_logs_since(uint64_t *cursor, int wait_ms, sy_buf *out) {
    pthread_mutex_lock(&ring_lock);
    if (ring_total <= *cursor && wait_ms > 0) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += wait_ms / 1000;
        until.tv_nsec += (long)(wait_ms % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&ring_grew, &ring_lock, &until);
    }
    if (ring != NULL) *cursor = ring_copy(*cursor, out);
    pthread_mutex_unlock(&ring_lock);
}

/* ------------------------------------------------------------------------------------------------------------
 * The spawner thread: every fork happens on it, so PR_SET_PDEATHSIG ties the children to a thread that lives as
 * long as switchyard. */

typedef struct spawn_job {
    char **argv;
    char **envp;
    int out_fd; /* the child's stdout and stderr; -1: /dev/null */
    pid_t pid;  /* result: > 0, or -1 with err */
    int err;
    bool done;
    struct spawn_job *next;
} spawn_job;

static pthread_once_t spawner_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t spawn_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t spawn_cond = PTHREAD_COND_INITIALIZER;
static spawn_job *spawn_queue;
static bool spawner_ok;

/* In the child, between fork and exec: only async-signal-safe calls. */
static void child_exec(spawn_job *j, pid_t parent, int status_fd) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127); /* the parent died before the death signal was armed */
    setpgid(0, 0);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    signal(SIGPIPE, SIG_DFL);
    /* Should switchyard run with 0, 1 or 2 closed, the pipes may sit there: move them out of the way first. */
    if (status_fd < 3) status_fd = fcntl(status_fd, F_DUPFD_CLOEXEC, 3);
    if (j->out_fd >= 0 && j->out_fd < 3) j->out_fd = fcntl(j->out_fd, F_DUPFD, 3);
    int null_fd = open("/dev/null", O_RDWR);
    if (null_fd >= 0) dup2(null_fd, 0);
    int out = j->out_fd >= 0 ? j->out_fd : null_fd;
    if (out >= 0) {
        dup2(out, 1);
        dup2(out, 2);
    }
    /* Nothing of switchyard's (listening socket, model files) reaches the child. */
    if (status_fd > 3) close_range(3, (unsigned)status_fd - 1, 0);
    close_range((unsigned)status_fd + 1, ~0U, 0);
    execvpe(j->argv[0], j->argv, j->envp);
    int e = errno;
    ssize_t w = write(status_fd, &e, sizeof e);
    (void)w;
    _exit(127);
}

static void run_spawn(spawn_job *j) {
    int status_pipe[2];
    if (pipe2(status_pipe, O_CLOEXEC) != 0) {
        j->pid = -1;
        j->err = errno;
        return;
    }
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) child_exec(j, parent, status_pipe[1]);
    close(status_pipe[1]);
    if (pid < 0) {
        j->pid = -1;
        j->err = errno;
        close(status_pipe[0]);
        return;
    }
    /* Also from here, so a kill of the group never races the child's own setpgid. */
    setpgid(pid, pid);
    int e = 0;
    ssize_t n;
    do n = read(status_pipe[0], &e, sizeof e);
    while (n < 0 && errno == EINTR);
    close(status_pipe[0]);
    if (n == (ssize_t)sizeof e) {
        waitpid(pid, NULL, 0);
        j->pid = -1;
        j->err = e;
        return;
    }
    j->pid = pid;
}

static void *spawner_main(void *arg) {
    (void)arg;
    pthread_mutex_lock(&spawn_lock);
    for (;;) {
        while (spawn_queue == NULL) pthread_cond_wait(&spawn_cond, &spawn_lock);
        spawn_job *j = spawn_queue;
        spawn_queue = j->next;
        pthread_mutex_unlock(&spawn_lock);
        run_spawn(j);
        pthread_mutex_lock(&spawn_lock);
        j->done = true;
        pthread_cond_broadcast(&spawn_cond);
    }
    return NULL;
}

static void spawner_start(void) {
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    spawner_ok = pthread_create(&t, &attr, spawner_main, NULL) == 0;
    pthread_attr_destroy(&attr);
    sy_log_set_sink(own_log_sink);
}

static pid_t spawn(char **argv, char **envp, int out_fd, int *err) {
    pthread_once(&spawner_once, spawner_start);
    if (!spawner_ok) {
        *err = EAGAIN;
        return -1;
    }
    spawn_job j = {argv, envp, out_fd, 0, 0, false, NULL};
    pthread_mutex_lock(&spawn_lock);
    spawn_job **tail = &spawn_queue;
    while (*tail) tail = &(*tail)->next;
    *tail = &j;
    pthread_cond_broadcast(&spawn_cond);
    while (!j.done) pthread_cond_wait(&spawn_cond, &spawn_lock);
    pthread_mutex_unlock(&spawn_lock);
    *err = j.err;
    return j.pid;
}

/* switchyard's environment with the model's NAME=VALUE items over it. */
static char **child_environment(const sy_process_spec *s) {
    size_t n = 0;
    while (environ != NULL && environ[n] != NULL) n++;
    char **envp = sy_xcalloc(n + s->n_env + 1, sizeof *envp);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const char *eq = strchr(environ[i], '=');
        size_t name_len = eq ? (size_t)(eq - environ[i]) : strlen(environ[i]);
        bool overridden = false;
        for (size_t j = 0; j < s->n_env && !overridden; j++)
            overridden = strncmp(s->env[j], environ[i], name_len) == 0 && s->env[j][name_len] == '=';
        if (!overridden) envp[k++] = sy_strdup(environ[i]);
    }
    for (size_t j = 0; j < s->n_env; j++) envp[k++] = sy_strdup(s->env[j]);
    envp[k] = NULL;
    return envp;
}

/* ------------------------------------------------------------------------------------------------------------
 * A child */

struct sy_process {
    char *model;
    char *cmd_stop;
    uint32_t stop_grace_s;
    pid_t pid;
    pthread_mutex_t lock;
    bool exited;
    int status;
    int out_fd;         /* the read end of the child's output */
    pthread_t reader;
    bool reader_started;
    char last_lines[1024]; /* the tail of its output, for a start that fails */
};

static void *reader_main(void *arg) {
    sy_process *p = arg;
    capturing = true;
    char buf[4096];
    sy_buf line;
    sy_buf_init(&line);
    for (;;) {
        ssize_t n = read(p->out_fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        for (ssize_t i = 0; i < n; i++) {
            if (buf[i] != '\n' && line.len < 8192) {
                sy_buf_append(&line, &buf[i], 1);
                continue;
            }
            if (buf[i] != '\n') continue; /* an overlong line is cut */
            while (line.len > 0 && line.data[line.len - 1] == '\r') line.len--;
            sy_process_logs_append(p->model, line.data ? line.data : "", line.len);
            sy_buf_append(&line, "", 1);
            sy_log(SY_LOG_INFO, "[%s] %s", p->model, line.data);
            pthread_mutex_lock(&p->lock);
            size_t have = strlen(p->last_lines), add = line.len - 1;
            if (add > sizeof p->last_lines / 2) add = sizeof p->last_lines / 2;
            if (have + add + 2 > sizeof p->last_lines) {
                size_t drop = have + add + 2 - sizeof p->last_lines;
                memmove(p->last_lines, p->last_lines + drop, have - drop + 1);
                have -= drop;
            }
            memcpy(p->last_lines + have, line.data + (line.len - 1 - add), add);
            p->last_lines[have + add] = '\n';
            p->last_lines[have + add + 1] = '\0';
            pthread_mutex_unlock(&p->lock);
            sy_buf_clear(&line);
        }
    }
    sy_buf_free(&line);
    return NULL;
}

pid_t sy_process_pid(const sy_process *p) { return p->pid; }

/* Reaps the child if it has exited. Lock held. */
static bool reap(sy_process *p, int options) {
    if (p->exited) return true;
    int status;
    pid_t r;
    do r = waitpid(p->pid, &status, options);
    while (r < 0 && errno == EINTR);
    if (r == p->pid || (r < 0 && errno == ECHILD)) {
        p->exited = true;
        p->status = r == p->pid ? status : 0;
    }
    return p->exited;
}

bool sy_process_alive(sy_process *p) {
    if (p == NULL) return false;
    pthread_mutex_lock(&p->lock);
    bool gone = reap(p, WNOHANG);
    pthread_mutex_unlock(&p->lock);
    return !gone;
}

static void describe_exit(int status, char *buf, size_t size) {
    if (WIFEXITED(status))
        snprintf(buf, size, "exited with status %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(buf, size, "was killed by signal %d", WTERMSIG(status));
    else
        snprintf(buf, size, "ended");
}

static size_t discard(char *ptr, size_t size, size_t n, void *user) {
    (void)ptr, (void)user;
    return size * n;
}

/* One GET of the check endpoint: the HTTP status, or 0 when nothing answered. */
static long check_once(const char *url) {
    CURL *c = curl_easy_init();
    if (c == NULL) return 0;
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, discard);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, 1000L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 2000L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
    long code = 0;
    if (curl_easy_perform(c) == CURLE_OK) curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_cleanup(c);
    return code;
}

static void kill_group(sy_process *p, int sig) {
    if (kill(-p->pid, sig) != 0) kill(p->pid, sig);
}

/* Waits up to `seconds` for the child to exit. Lock not held. */
static bool wait_exit(sy_process *p, double seconds) {
    double until = sy_now_seconds() + seconds;
    for (;;) {
        pthread_mutex_lock(&p->lock);
        bool gone = reap(p, WNOHANG);
        pthread_mutex_unlock(&p->lock);
        if (gone) return true;
        if (sy_now_seconds() >= until) return false;
        struct timespec ts = {0, 20 * 1000000L};
        nanosleep(&ts, NULL);
    }
}

static void process_free(sy_process *p) {
    if (p->reader_started) pthread_join(p->reader, NULL);
    if (p->out_fd >= 0) close(p->out_fd);
    pthread_mutex_destroy(&p->lock);
    free(p->model);
    free(p->cmd_stop);
    free(p);
}

/* Runs cmd_stop (its ${PID} replaced) and waits for it within the grace period. */
static void run_cmd_stop(sy_process *p) {
    sy_buf cmd;
    sy_buf_init(&cmd);
    char pid[32];
    snprintf(pid, sizeof pid, "%d", (int)p->pid);
    for (const char *s = p->cmd_stop; *s;) {
        if (strncmp(s, "${PID}", 6) == 0) {
            sy_buf_puts(&cmd, pid);
            s += 6;
        } else {
            sy_buf_append(&cmd, s, 1);
            s++;
        }
    }
    sy_buf_append(&cmd, "", 1);
    char why[200];
    size_t n;
    char **argv = sy_process_split_command(cmd.data, &n, why, sizeof why);
    sy_buf_free(&cmd);
    if (argv == NULL) {
        sy_log(SY_LOG_WARN, "model %s: cmd_stop: %s; sending SIGTERM instead", p->model, why);
        kill_group(p, SIGTERM);
        return;
    }
    int err = 0;
    pid_t stopper = spawn(argv, environ, -1, &err);
    sy_process_free_words(argv, n);
    if (stopper < 0) {
        sy_log(SY_LOG_WARN, "model %s: cmd_stop did not start (%s); sending SIGTERM instead", p->model, strerror(err));
        kill_group(p, SIGTERM);
        return;
    }
    double until = sy_now_seconds() + (p->stop_grace_s ? p->stop_grace_s : 1);
    for (;;) {
        pid_t r = waitpid(stopper, NULL, WNOHANG);
        if (r == stopper || (r < 0 && errno != EINTR)) break;
        if (sy_now_seconds() >= until) {
            kill(-stopper, SIGKILL);
            waitpid(stopper, NULL, 0);
            break;
        }
        struct timespec ts = {0, 20 * 1000000L};
        nanosleep(&ts, NULL);
    }
}

void sy_process_stop(sy_process *p) {
    if (p == NULL) return;
    if (sy_process_alive(p)) {
        if (p->cmd_stop != NULL)
            run_cmd_stop(p);
        else
            kill_group(p, SIGTERM);
        if (!wait_exit(p, p->stop_grace_s)) {
            sy_log(SY_LOG_WARN, "model %s: process %d still runs %u s after it was asked to stop: SIGKILL", p->model,
                   (int)p->pid, (unsigned)p->stop_grace_s);
            kill_group(p, SIGKILL);
            wait_exit(p, 30);
        }
    }
    /* What it left running in its group goes too, so the output pipe closes and the reader ends. */
    kill(-p->pid, SIGKILL);
    char how[64];
    describe_exit(p->status, how, sizeof how);
    sy_log(SY_LOG_INFO, "model %s: process %d %s", p->model, (int)p->pid, how);
    process_free(p);
}

sy_process *sy_process_start(const sy_process_spec *spec, double deadline, char *err, size_t err_size) {
    char why[256];
    size_t n_words;
    char **argv = sy_process_split_command(spec->cmd, &n_words, why, sizeof why);
    if (argv == NULL) {
        snprintf(err, err_size, "cmd: %s", why);
        return NULL;
    }
    int out[2];
    if (pipe2(out, O_CLOEXEC) != 0) {
        snprintf(err, err_size, "cannot make a pipe for its output: %s", strerror(errno));
        sy_process_free_words(argv, n_words);
        return NULL;
    }
    char **envp = child_environment(spec);
    int spawn_err = 0;
    pid_t pid = spawn(argv, envp, out[1], &spawn_err);
    close(out[1]);
    for (size_t i = 0; envp[i] != NULL; i++) free(envp[i]);
    free(envp);
    if (pid < 0) {
        snprintf(err, err_size, "cannot run '%.200s': %s", argv[0], strerror(spawn_err));
        sy_process_free_words(argv, n_words);
        close(out[0]);
        return NULL;
    }
    sy_log(SY_LOG_INFO, "model %s: started process %d: %.300s", spec->model, (int)pid, spec->cmd);
    sy_process_free_words(argv, n_words);
    sy_process *p = sy_xcalloc(1, sizeof *p);
    p->model = sy_strdup(spec->model);
    p->cmd_stop = dup_or_null(spec->cmd_stop);
    p->stop_grace_s = spec->stop_grace_s;
    p->pid = pid;
    p->out_fd = out[0];
    pthread_mutex_init(&p->lock, NULL);
    p->reader_started = pthread_create(&p->reader, NULL, reader_main, p) == 0;

    if (strcmp(spec->check_endpoint, "none") == 0) return p;
    size_t base_len = strlen(spec->proxy);
    while (base_len > 0 && spec->proxy[base_len - 1] == '/') base_len--;
    char *url = sy_xmalloc(base_len + strlen(spec->check_endpoint) + 1);
    memcpy(url, spec->proxy, base_len);
    strcpy(url + base_len, spec->check_endpoint);
    long last = 0;
    for (;;) {
        if (!sy_process_alive(p)) {
            char how[64];
            describe_exit(p->status, how, sizeof how);
            if (p->reader_started) pthread_join(p->reader, NULL), p->reader_started = false;
            snprintf(err, err_size, "its process %s before %s answered; its last output:\n%s", how, url,
                     p->last_lines[0] ? p->last_lines : "(none)\n");
            free(url);
            sy_process_stop(p);
            return NULL;
        }
        last = check_once(url);
        if (last == 200) break;
        if (deadline != 0 && sy_now_seconds() >= deadline) {
            snprintf(err, err_size, "%s did not answer 200 before the load timeout (last: %s%ld)", url,
                     last ? "HTTP " : "no answer, ", last);
            free(url);
            sy_process_stop(p);
            return NULL;
        }
        struct timespec ts = {0, 100 * 1000000L};
        nanosleep(&ts, NULL);
    }
    free(url);
    return p;
}
