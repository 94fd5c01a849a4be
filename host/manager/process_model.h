/*
 * Models that are processes (llama-swap's `cmd`): a child started on demand, checked ready over HTTP, its output
 * captured into switchyard's log and a ring of recent lines per model (for /logs), stopped with SIGTERM (or
 * cmd_stop) then SIGKILL after a grace period.
 *
 * Every child runs in its own process group with PR_SET_PDEATHSIG(SIGKILL), forked from one long-lived spawner
 * thread (the death signal follows the thread that forked, not the process), so a crash of switchyard leaves no
 * orphan; signals blocked in switchyard's threads are unblocked in the child before exec.
 */
#ifndef SY_HOST_MANAGER_PROCESS_MODEL_H
#define SY_HOST_MANAGER_PROCESS_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/buf.h"
#include "config/config.h"

/* A process model's settings, copied from its config section (macros expanded). */
typedef struct sy_process_spec {
    char *model;          /* the model's name, for messages and logs */
    char *cmd, *cmd_stop; /* cmd_stop may be NULL */
    char **env;           /* NAME=VALUE */
    size_t n_env;
    char *check_endpoint; /* "none": no check */
    char *proxy;          /* base URL */
    char *use_model_name; /* NULL: the name the client sent */
    char **strip_params;
    size_t n_strip_params;
    char *set_params;     /* JSON object text, or NULL */
    uint64_t memory;
    uint32_t connect_timeout_s, header_timeout_s, stop_grace_s;
} sy_process_spec;

sy_process_spec *sy_process_spec_from_config(const sy_config_model *m);
void sy_process_spec_free(sy_process_spec *s);
bool sy_process_spec_equal(const sy_process_spec *a, const sy_process_spec *b);

typedef struct sy_process sy_process;

/* Splits a command line into words the way a shell would for a simple command (blanks separate words; '...'
 * is literal; "..." keeps blanks with \ escaping " \ $ and `; a \ outside quotes escapes the next character; a
 * lone \ before a blank, as left by a joined multi-line command, is dropped). NULL with why set on an unclosed
 * quote or an empty command. The array and its strings are malloc'd; free with sy_process_free_words. */
char **sy_process_split_command(const char *cmd, size_t *n_words, char *why, size_t why_size);
void sy_process_free_words(char **words, size_t n);

/* Starts the child and waits, until `deadline` (sy_now_seconds), for its check_endpoint to answer 200. NULL with
 * err set when it cannot start, exits meanwhile (with its last output lines) or the deadline passes. */
sy_process *sy_process_start(const sy_process_spec *spec, double deadline, char *err, size_t err_size);
/* Whether the child still runs (reaping it when it has exited). */
bool sy_process_alive(sy_process *p);
pid_t sy_process_pid(const sy_process *p);
/* Stops the child (cmd_stop, else SIGTERM to its group; SIGKILL after the grace period) and frees p. */
void sy_process_stop(sy_process *p);

/* Recent output lines of a model's processes ("" for none), or of every model with NULL, appended to out. */
void sy_process_logs(const char *model, sy_buf *out);
/* A cursor over the captured output for /logs/stream: the bytes appended since *cursor (0 at first), waiting up
 * to wait_ms for more; *cursor moves on. Lines of every model, each prefixed "[MODEL] ". */
void sy_process_logs_since(uint64_t *cursor, int wait_ms, sy_buf *out);
/* Switchyard's own log lines go into the same stream (base/log.c hands them here through a hook). */
void sy_process_logs_append(const char *model, const char *line, size_t len);

#endif
