/* Mask cost of the grammar engine at the Qwen3 vocabulary (151,669 tokens): per-step mask time (median, p99,
 * max, in microseconds) along seeded random generations for any JSON object (response_format json_object), a
 * 10-property schema and llama.cpp's json.gbnf; accept time; schema compile time; vocabulary build time.
 * Built with the tests (it reads the tokenizer fixture), not run by CTest:
 *   SY_SOURCE_DIR=. build/bin/grammar_bench [generations per grammar, default 40] [VOCAB]
 * VOCAB: another model's vocabulary, as `build/tests/constrained_corpus vocab PLUGIN MODEL > VOCAB` writes it
 * (e.g. SmolLM2's 49,152 tokens). */
#include <time.h>

#include <math.h>

#include "engine/constrain.h"
#include "grammar_test_util.h"

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct stats {
    double *v;
    size_t n, cap;
} stats;

static void add(stats *s, double x) {
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 1024;
        s->v = realloc(s->v, s->cap * sizeof *s->v);
    }
    s->v[s->n++] = x;
}

static void report(const char *what, stats *s) {
    if (s->n == 0) return;
    qsort(s->v, s->n, sizeof *s->v, cmp_double);
    double sum = 0;
    for (size_t i = 0; i < s->n; i++) sum += s->v[i];
    printf("  %-22s n=%-6zu median %8.1f us  p99 %8.1f us  max %8.1f us  mean %8.1f us\n", what, s->n,
           s->v[s->n / 2], s->v[(size_t)((double)s->n * 0.99)], s->v[s->n - 1], sum / (double)s->n);
    free(s->v);
    *s = (stats){0};
}

static const char *schema10 =
    "{\"type\":\"object\",\"properties\":{"
    "\"id\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":1000000},"
    "\"name\":{\"type\":\"string\",\"maxLength\":64},"
    "\"email\":{\"type\":\"string\"},"
    "\"active\":{\"type\":\"boolean\"},"
    "\"score\":{\"type\":\"number\"},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"maxItems\":8},"
    "\"role\":{\"enum\":[\"admin\",\"user\",\"guest\"]},"
    "\"created\":{\"type\":\"string\",\"format\":\"date-time\"},"
    "\"address\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},\"zip\":{\"type\":\"string\","
    "\"pattern\":\"^[0-9]{5}$\"}},\"required\":[\"city\",\"zip\"],\"additionalProperties\":false},"
    "\"note\":{\"type\":[\"string\",\"null\"]}},"
    "\"required\":[\"id\",\"name\",\"email\",\"active\",\"score\",\"tags\",\"role\",\"created\",\"address\",\"note\"],"
    "\"additionalProperties\":false}";

static void bench(const char *name, const char *gbnf, gt_vocab *v, int gens) {
    char err[256];
    sy_grammar *g = sy_grammar_compile(gbnf, strlen(gbnf), NULL, err, sizeof err);
    if (g == NULL) {
        printf("%s: %s\n", name, err);
        return;
    }
    size_t words = sy_grammar_vocab_mask_words(v->v);
    uint32_t *bits = malloc(words * sizeof *bits);
    float *row = malloc(v->n * sizeof *row);
    int32_t eog = v->eog;
    stats mask = {0}, first = {0}, acc = {0}, step_cost = {0};
    uint64_t rng = 12345;
    long steps = 0;
    for (int k = 0; k < gens; k++) {
        sy_grammar_state *st = sy_grammar_state_create(g, v->v, NULL, err, sizeof err);
        for (int step = 0; step < 400; step++) {
            if (sy_grammar_state_can_end(st) && (step > 150 || gt_rand(&rng) % 4 == 0)) break;
            double t0 = now_us();
            long n = sy_grammar_state_mask(st, bits);
            double t1 = now_us();
            if (n <= 0) break;
            add(k == 0 && step == 0 ? &first : &mask, t1 - t0);
            /* What the scheduler does per constrained token: the mask (again: now from the cache) and the logits
             * row masked with it (host/engine/constrain.c). Reported with the mask's own time added. */
            for (uint32_t i = 0; i < v->n; i++) row[i] = 0.0f;
            char msg[256];
            double t2 = now_us();
            if (sy_constrain_row(st, bits, row, v->n, &eog, eog >= 0 ? 1 : 0, false, msg, sizeof msg) != 0) break;
            double t3 = now_us();
            add(&step_cost, (t1 - t0) + (t3 - t2));
            int32_t tok = gt_nth_bit(bits, words, (long)(gt_rand(&rng) % (uint64_t)n));
            if (v->kinds[tok] == SY_GRAMMAR_TOKEN_EOG) break;
            t0 = now_us();
            sy_grammar_state_accept_token(st, tok);
            add(&acc, now_us() - t0);
            steps++;
        }
        sy_grammar_state_free(st);
    }
    printf("%s (%d generations, %ld tokens)\n", name, gens, steps);
    report("first mask (cold)", &first);
    report("mask", &mask);
    report("mask + logits row", &step_cost);
    report("accept_token", &acc);
    free(bits);
    free(row);
    sy_grammar_free(g);
}

/* A vocabulary written by `build/tests/constrained_corpus vocab PLUGIN MODEL`: per id "N|C|E HEX". */
static gt_vocab *vocab_from_dump(const char *path) {
    size_t size = 0;
    char *text = gt_read_file(path, &size);
    if (text == NULL) return NULL;
    uint32_t n = 0;
    for (size_t i = 0; i < size; i++) n += text[i] == '\n';
    gt_vocab *g = gt_vocab_alloc(n);
    char *line = text;
    for (uint32_t id = 0; id < n; id++) {
        char *end = strchr(line, '\n');
        *end = '\0';
        g->kinds[id] = line[0] == 'E' ? SY_GRAMMAR_TOKEN_EOG : line[0] == 'C' ? SY_GRAMMAR_TOKEN_CONTROL
                                                                              : SY_GRAMMAR_TOKEN_NORMAL;
        if (g->kinds[id] == SY_GRAMMAR_TOKEN_EOG && g->eog < 0) g->eog = (int32_t)id;
        size_t len = strlen(line) > 2 ? (strlen(line) - 2) / 2 : 0;
        g->bytes[id] = malloc(len + 1);
        for (size_t k = 0; k < len; k++) {
            unsigned b = 0;
            sscanf(line + 2 + 2 * k, "%2x", &b);
            g->bytes[id][k] = (uint8_t)b;
        }
        g->lens[id] = len;
        line = end + 1;
    }
    free(text);
    if (!gt_vocab_build(g)) {
        gt_vocab_free(g);
        return NULL;
    }
    return g;
}

int main(int argc, char **argv) {
    int gens = argc > 1 ? atoi(argv[1]) : 40;
    const char *dump = argc > 2 ? argv[2] : NULL;
    double t0 = now_us();
    gt_vocab *v = dump != NULL ? vocab_from_dump(dump) : gt_qwen3_vocab();
    if (v == NULL) {
        fprintf(stderr, "cannot load the vocabulary (%s)\n", dump ? dump : "the Qwen3 fixture: set SY_SOURCE_DIR");
        return 1;
    }
    printf("%s vocabulary: %u tokens, loaded and trie built in %.1f ms\n", dump ? dump : "Qwen3", v->n,
           (now_us() - t0) / 1e3);
    char err[256];
    char *obj = NULL, *sch = NULL;
    sy_schema_options o = sy_schema_defaults();
    if (sy_json_object_gbnf(&o, &obj, err, sizeof err) != 0) printf("json_object: %s\n", err);
    cJSON *schema = cJSON_Parse(schema10);
    if (sy_json_schema_to_gbnf(schema, &o, &sch, err, sizeof err) != 0) printf("schema: %s\n", err);
    /* compile time: schema to GBNF, and GBNF to the compiled grammar */
    stats conv = {0}, comp = {0};
    for (int i = 0; i < 200 && sch; i++) {
        char *gb = NULL;
        double a = now_us();
        sy_json_schema_to_gbnf(schema, &o, &gb, err, sizeof err);
        double b = now_us();
        sy_grammar *g = sy_grammar_compile(gb, strlen(gb), NULL, err, sizeof err);
        double c = now_us();
        add(&conv, b - a);
        add(&comp, c - b);
        sy_grammar_free(g);
        free(gb);
    }
    printf("10-property schema compile (%zu bytes of GBNF)\n", sch ? strlen(sch) : 0);
    report("schema to GBNF", &conv);
    report("GBNF compile", &comp);
    char path[1024];
    gt_source_path(path, sizeof path, "tests/fixtures/grammars/json.gbnf");
    char *json_gbnf = gt_read_file(path, NULL);
    if (obj) bench("json_object", obj, v, gens);
    if (sch) bench("10-property schema", sch, v, gens);
    if (json_gbnf) bench("json.gbnf", json_gbnf, v, gens);
    free(obj);
    free(sch);
    free(json_gbnf);
    cJSON_Delete(schema);
    gt_vocab_free(v);
    return 0;
}
