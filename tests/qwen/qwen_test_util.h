/* Helpers of the qwen-cpu-mmap tests: the plugin through its ABI (dlopen of build/plugins/qwen-cpu-mmap.so), the
 * transformers oracle fixtures of tests/fixtures/hf (tools/oracle/README.md), greedy decoding, and scratch
 * directories. Failures inside a helper fail the calling cmocka test. */
#ifndef QWEN_TEST_UTIL_H
#define QWEN_TEST_UTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <switchyard/engine.h>

#define QT_MAX_PROMPTS 8
#define QT_GREEDY 32

/* The fixtures of the shared checks (lfm2-f32 has its own, test_qwen_lfm2.c: no reference backend for it). */
extern const char *const qt_fixtures[];
extern const size_t qt_n_fixtures;

typedef struct qt_prompt {
    char *text;
    int32_t *ids;
    size_t n_ids;
    float *last_logits;   /* [n_vocab] */
    int32_t greedy[QT_GREEDY];
    float margins[QT_GREEDY];
    float *all_logits;    /* [n_ids][n_vocab], or NULL */
    int32_t (*all_top5)[5];
} qt_prompt;

typedef struct qt_fixture {
    char name[64];
    char dir[1024];
    bool bf16;
    uint32_t n_vocab;
    qt_prompt prompts[QT_MAX_PROMPTS];
    size_t n_prompts;
} qt_fixture;

/* Reads tests/fixtures/hf/<name>/expected.json; fails the test when it cannot. */
void qt_fixture_load(const char *name, qt_fixture *f);
void qt_fixture_free(qt_fixture *f);
/* The prompt that has all_logits. */
const qt_prompt *qt_all_logits_prompt(const qt_fixture *f);

/* The plugin, dlopened once per process. */
extern const sy_engine_api *qt_api;
extern const sy_plugin_entry *qt_entry;
int qt_plugin_open(void **state);
int qt_plugin_close(void **state);
/* Non-zero makes the host's is_cancelled() say yes for calls with a non-NULL call handle. */
extern int qt_cancel_requested;

/* Load with key, value, key, value, ..., NULL; the test fails (with the plugin's message) on error. */
sy_model *qt_load(const char *dir, ...);
/* Same, returning the status; *message gets a copy of the error message (caller frees) when not NULL. */
sy_status qt_try_load(const char *dir, sy_model **out, char **message, ...);
/* A load of dir (with one option k = v, or none when k is NULL) must fail with status `want` and a message that
 * contains `needle`. */
void qt_expect_refusal(const char *dir, sy_status want, const char *needle, const char *k, const char *v);
/* Replaces the first `from` in the file at path with `to` (the test fails when there is none). */
void qt_replace_text(const char *path, const char *from, const char *to);

sy_status qt_decode(sy_model *m, sy_seq *s, const int32_t *tokens, uint32_t n, uint32_t n_logits, float *logits);
int32_t qt_argmax(const float *logits, uint32_t n);
/* Prefill `prompt` into a new sequence (logits of its last position into first_logits when not NULL), then
 * n_new greedy tokens into out. */
void qt_greedy(sy_model *m, const int32_t *prompt, size_t n_prompt, size_t n_new, int32_t *out, float *first_logits);

/* Largest |a - b| over n values, and max - min of ref. */
float qt_max_abs_diff(const float *a, const float *b, size_t n);
float qt_range(const float *ref, size_t n);

/* A fresh directory under $TMPDIR (or /tmp); caller frees the string and removes the tree. */
char *qt_temp_dir(void);
/* Copies the regular files of src into the existing directory dst. */
void qt_copy_dir(const char *src, const char *dst);
void qt_remove_tree(const char *dir);
/* Number of entries (files or directories, not . and ..) under dir, recursively. */
size_t qt_count_entries(const char *dir);
/* Writes a whole file. */
void qt_write_file(const char *path, const void *data, size_t len);
/* Reads a whole file (NUL-terminated); caller frees. NULL when it cannot be read. */
char *qt_read_file(const char *path, size_t *len);

#endif
