/* `switchyard quantize` (plugins/quantizer, linked in) and llama.cpp's per-tensor type rules.
 *
 * From SafeTensors (tests/fixtures/gguf/quantize-expected.json, tools/oracle/gguf_quantize_fixtures.py): each
 * checkpoint of tests/fixtures/hf quantized to a type must give
 *   - the same file, byte for byte, as when the oracle ran it (so llama.cpp's records below are about this file),
 *   - the same tensors (names, types, shapes, bytes) as llama.cpp's own convert_hf_to_gguf.py + llama-quantize,
 *   - prompts tokenized as the checkpoint's tokenizer.json does (its expected.json ids), and greedy / top-1 tokens
 *     as llama.cpp gives on this file (gt_compare_with_llama's rules).
 * Type rules: for a Qwen2.5-0.5B-shaped model (hidden 896, so K-quants fall back on most matrices), the types
 * llama.cpp chose for each tensor under 7 recipes, against sy_quant_choose_types. Plus the verb's behaviour on bad
 * input: refused with a message, nothing left at the destination (or the old file untouched).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "gguf.h"
#include "gguf_writer.h"
#include "quantize.h"
#include "quantizer.h"
#include "sy_kernels.h"

#include "gguf_engine_util.h"
#include "gguf_tiny_model.h" /* gt_tensor_hash: the oracles' tensor hash */

static cJSON *fixture;
static gt_engine engine;
static char tmpdir[256];

static int setup(void **state) {
    (void)state;
    return gt_suite_setup(&fixture, "tests/fixtures/gguf/quantize-expected.json", tmpdir, sizeof tmpdir, "gguf-quantize", &engine);
}

static int teardown(void **state) {
    (void)state;
    gt_suite_teardown(fixture, tmpdir, &engine);
    return 0;
}

static int quantize(const char *in, const char *out, const char *type, const char *extra) {
    char *argv[8];
    int argc = 0;
    argv[argc++] = "quantize";
    argv[argc++] = "--no-progress";
    if (extra) argv[argc++] = (char *)extra;
    argv[argc++] = (char *)in;
    argv[argc++] = (char *)out;
    argv[argc++] = (char *)type;
    argv[argc] = NULL;
    return sy_quantize_main(argc, argv);
}

static void file_fnv(const char *path, char out[17]) {
    size_t n = 0;
    char *data = gt_read_file(path, &n);
    assert_non_null(data);
    snprintf(out, 17, "%016llx", (unsigned long long)gt_fnv1a64(data, n));
    free(data);
}

static void test_safetensors_like_llama_cpp(void **state) {
    (void)state;
    int n_cases = 0;
    for (const cJSON *c = cJSON_GetObjectItem(fixture, "cases")->child; c; c = c->next) {
        const char *model = cJSON_GetObjectItem(c, "model")->valuestring;
        const char *type = cJSON_GetObjectItem(c, "type")->valuestring;
        char rel[256], src[1024], out[512], hash[17];
        snprintf(rel, sizeof rel, "tests/fixtures/hf/%s", model);
        gt_source_path(src, sizeof src, rel);
        snprintf(out, sizeof out, "%s/%s-%s.gguf", tmpdir, model, type);
        assert_int_equal(quantize(src, out, type, NULL), 0);
        gt_tensor_hash(out, hash);
        if (strcmp(hash, cJSON_GetObjectItem(c, "llama_cpp_tensor_hash")->valuestring) != 0)
            fail_msg("%s %s: tensors differ from llama.cpp's convert_hf_to_gguf + quantize", model, type);
        file_fnv(out, hash);
        if (strcmp(hash, cJSON_GetObjectItem(c, "file_fnv1a64")->valuestring) != 0)
            fail_msg("%s %s: the file differs from the one the oracle ran in llama.cpp", model, type);

        /* the prompts tokenize as the checkpoint's own tokenizer.json does */
        snprintf(rel, sizeof rel, "tests/fixtures/hf/%s/expected.json", model);
        cJSON *expected = gt_load_json(rel);
        assert_non_null(expected);
        sy_model *m = gt_load(&engine, out, "2");
        for (const cJSON *p = cJSON_GetObjectItem(expected, "prompts")->child; p; p = p->next) {
            const char *text = cJSON_GetObjectItem(p, "text")->valuestring;
            if (strcmp(text, "(single token)") == 0) continue; /* its ids are a token, not this text */
            size_t n_want, n_got;
            int32_t *want = gt_json_ints(cJSON_GetObjectItem(p, "ids"), &n_want);
            int32_t *got = gt_tokenize(&engine, m, text, &n_got, 0);
            if (n_got != n_want || memcmp(got, want, n_want * sizeof *want) != 0)
                fail_msg("%s %s: \"%s\" tokenizes differently from tokenizer.json", model, type, text);
            free(want);
            free(got);
        }
        cJSON_Delete(expected);
        char label[96];
        snprintf(label, sizeof label, "%-22s %-7s", model, type);
        gt_compare_with_llama(&engine, m, cJSON_GetObjectItem(c, "prompts"), strcmp(type, "F16") == 0, label);
        engine.api->unload(m);
        unlink(out);
        n_cases++;
    }
    assert_true(n_cases >= 8);
}

static sy_dtype dtype_by_name(const char *name) {
    for (uint32_t t = 0; t < SY_DTYPE_COUNT_; t++) {
        const sy_dtype_traits *tr = sy_dtype_get(t);
        if (tr && strcasecmp(tr->name, name) == 0) return (sy_dtype)t;
    }
    fail_msg("unknown type %s", name);
    return SY_DTYPE_COUNT_;
}

static int compare_plan(const void *a, const void *b) {
    return sy_quant_tensor_compare(((const sy_quant_tensor *)a)->name, ((const sy_quant_tensor *)b)->name);
}

/* llama.cpp's choices on Qwen2.5-0.5B's shapes: 24 layers, hidden 896, 14 heads, 2 KV heads, ff 4864, tied. */
static void test_type_choices_like_llama_cpp(void **state) {
    (void)state;
    const cJSON *bench = cJSON_GetObjectItem(fixture, "bench_choices");
    if (bench == NULL) {
        skip();
        return;
    }
    const cJSON *tensors = cJSON_GetObjectItem(bench, "tensors");
    size_t n = (size_t)cJSON_GetArraySize(tensors);
    sy_quant_tensor *plan = gt_xmalloc(n * sizeof *plan);
    sy_quant_model model = {24, 14, 2};
    for (const cJSON *r = cJSON_GetObjectItem(bench, "types")->child; r; r = r->next) {
        sy_quant_ftype ftype;
        assert_true(sy_quant_ftype_parse(r->string, &ftype));
        size_t i = 0;
        for (const cJSON *t = tensors->child; t; t = t->next, i++) {
            memset(&plan[i], 0, sizeof plan[i]);
            plan[i].name = cJSON_GetObjectItem(t, "name")->valuestring;
            for (const cJSON *d = cJSON_GetObjectItem(t, "dims")->child; d; d = d->next)
                plan[i].dims[plan[i].n_dims++] = (uint64_t)d->valuedouble;
            for (uint32_t k = plan[i].n_dims; k < 4; k++) plan[i].dims[k] = 1;
            plan[i].src_type = dtype_by_name(cJSON_GetObjectItem(t, "type")->valuestring);
        }
        qsort(plan, n, sizeof *plan, compare_plan);
        char err[256];
        assert_true(sy_quant_choose_types(ftype, &model, plan, n, err, sizeof err));
        size_t fallbacks = 0;
        for (i = 0; i < n; i++) {
            const cJSON *want = cJSON_GetObjectItem(r, plan[i].name);
            assert_non_null(want);
            if (plan[i].out_type != dtype_by_name(want->valuestring))
                fail_msg("%s %s: chose %s, llama.cpp %s", r->string, plan[i].name, sy_dtype_get(plan[i].out_type)->name,
                         want->valuestring);
            fallbacks += plan[i].fallback;
        }
        if (ftype == SY_FTYPE_Q4_K_M) assert_true(fallbacks > 100); /* hidden 896: most matrices fall back */
    }
    free(plan);
}

/* The recipes' distinctive choices on a shape K-quants fit: 8 layers, rows of 256. */
static void test_type_choices_rules(void **state) {
    (void)state;
    static const char *const kinds[] = {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"};
    enum { LAYERS = 8, PER = 7, N = LAYERS * PER + 3 };
    char names[N][48];
    sy_quant_tensor plan[N];
    size_t n = 0;
    for (int l = 0; l < LAYERS; l++)
        for (int k = 0; k < PER; k++, n++) {
            snprintf(names[n], sizeof names[n], "blk.%d.%s.weight", l, kinds[k]);
            plan[n] = (sy_quant_tensor){.name = names[n], .n_dims = 2, .dims = {256, 512, 1, 1},
                                        .src_type = SY_DTYPE_F16};
        }
    static const struct {
        const char *name;
        uint32_t n_dims;
        uint64_t rows;
        sy_dtype type;
    } others[] = {{"token_embd.weight", 2, 1000, SY_DTYPE_F16},
                  {"output_norm.weight", 1, 1, SY_DTYPE_F32},
                  {"blk.0.attn_norm.weight", 1, 1, SY_DTYPE_F32}};
    for (size_t i = 0; i < 3; i++, n++) {
        snprintf(names[n], sizeof names[n], "%s", others[i].name);
        plan[n] = (sy_quant_tensor){.name = names[n], .n_dims = others[i].n_dims, .dims = {256, others[i].rows, 1, 1},
                                    .src_type = others[i].type};
    }
    qsort(plan, n, sizeof *plan, compare_plan);
    sy_quant_model model = {LAYERS, 8, 2};
    char err[256];
    assert_true(sy_quant_choose_types(SY_FTYPE_Q4_K_M, &model, plan, n, err, sizeof err));
    for (size_t i = 0; i < n; i++) {
        const char *nm = plan[i].name;
        int layer = -1;
        sscanf(nm, "blk.%d.", &layer);
        sy_dtype want = SY_DTYPE_Q4_K;
        if (strstr(nm, "_norm")) want = SY_DTYPE_F32;
        else if (strcmp(nm, "token_embd.weight") == 0) want = SY_DTYPE_Q6_K; /* tied: it is the output too */
        else if (strstr(nm, "attn_v") || strstr(nm, "ffn_down"))
            /* use_more_bits for 8 layers: the first and last, and every third from the second */
            want = (layer == 0 || layer == 7 || (layer - 1) % 3 == 2) ? SY_DTYPE_Q6_K : SY_DTYPE_Q4_K;
        if (plan[i].out_type != want)
            fail_msg("Q4_K_M %s: %s, expected %s", nm, sy_dtype_get(plan[i].out_type)->name, sy_dtype_get(want)->name);
        assert_false(plan[i].fallback);
    }
    /* an already quantized tensor is not requantized */
    for (size_t i = 0; i < n; i++)
        if (strcmp(plan[i].name, "blk.3.ffn_up.weight") == 0) plan[i].src_type = SY_DTYPE_Q4_0;
    assert_false(sy_quant_choose_types(SY_FTYPE_Q8_0, &model, plan, n, err, sizeof err));
    assert_non_null(strstr(err, "requantiz"));
    assert_false(sy_quant_choose_types((sy_quant_ftype)99, &model, plan, n, err, sizeof err));

    sy_quant_ftype ft;
    assert_true(sy_quant_ftype_parse("q4_k_m", &ft) && ft == SY_FTYPE_Q4_K_M);
    assert_true(sy_quant_ftype_parse("BF16", &ft) && ft == SY_FTYPE_BF16);
    assert_false(sy_quant_ftype_parse("Q4_K", &ft));
    assert_false(sy_quant_ftype_parse("IQ2_XXS", &ft));
    assert_string_equal(sy_quant_ftype_name(SY_FTYPE_Q5_K_M), "Q5_K_M");
    assert_true(sy_quant_tensor_compare("output.weight", "blk.0.attn_q.weight") < 0);
    assert_true(sy_quant_tensor_compare("blk.9.ffn_up.weight", "blk.10.attn_k.weight") < 0);
    assert_true(sy_quant_tensor_compare("blk.2.attn_k.weight", "blk.2.attn_k.weight") == 0);
}

static bool exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

/* No temp file may be left beside the destination after any run. */
static void assert_no_temp_files(void) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "ls '%s' | grep -q '\\.tmp-'", tmpdir);
    assert_int_not_equal(system(cmd), 0);
}

/* A small F16 GGUF with one matrix holding `bad` at element 5 (0 = a clean one). */
static void write_small_gguf(const char *path, float bad, sy_dtype matrix_type) {
    char err[256];
    sy_gguf_writer *w = sy_gguf_writer_new(err, sizeof err);
    assert_true(sy_gguf_writer_set_string(w, "general.architecture", "llama", 5, err, sizeof err));
    assert_true(sy_gguf_writer_set_u32(w, "llama.block_count", 1, err, sizeof err));
    uint64_t dims[2] = {64, 4};
    assert_true(sy_gguf_writer_add_tensor(w, "blk.0.attn_q.weight", matrix_type, 2, dims, err, sizeof err));
    assert_true(sy_gguf_writer_open(w, path, err, sizeof err));
    size_t bytes = sy_gguf_writer_tensor_bytes(w, 0);
    uint8_t *data = calloc(1, bytes);
    if (matrix_type == SY_DTYPE_F16) {
        for (size_t i = 0; i < 256; i++) {
            uint16_t h = sy_f32_to_f16(i == 5 && bad != 0.0f ? bad : (float)i / 256.0f);
            data[2 * i] = (uint8_t)h;
            data[2 * i + 1] = (uint8_t)(h >> 8);
        }
    }
    assert_true(sy_gguf_writer_write(w, data, bytes, err, sizeof err));
    assert_true(sy_gguf_writer_commit(w, err, sizeof err));
    sy_gguf_writer_free(w);
    free(data);
}

static void test_verb_refuses_bad_input(void **state) {
    (void)state;
    char good[512], out[512], nan_file[512], quantized[512], text[512];
    snprintf(good, sizeof good, "%s/good.gguf", tmpdir);
    snprintf(out, sizeof out, "%s/out.gguf", tmpdir);
    snprintf(nan_file, sizeof nan_file, "%s/nan.gguf", tmpdir);
    snprintf(quantized, sizeof quantized, "%s/q4.gguf", tmpdir);
    snprintf(text, sizeof text, "%s/text.gguf", tmpdir);
    write_small_gguf(good, 0.0f, SY_DTYPE_F16);
    write_small_gguf(nan_file, NAN, SY_DTYPE_F16);
    write_small_gguf(quantized, 0.0f, SY_DTYPE_Q4_0);
    FILE *f = fopen(text, "w");
    fputs("not a model\n", f);
    fclose(f);

    /* usage errors: exit 2 */
    assert_int_equal(quantize(good, out, "Q9_9", NULL), 2);
    char *short_argv[] = {"quantize", good, out, NULL};
    assert_int_equal(sy_quantize_main(3, short_argv), 2);
    assert_int_equal(quantize(good, out, "Q8_0", "--threads=0"), 2);
    assert_false(exists(out));

    /* the plan alone */
    assert_int_equal(quantize(good, out, "Q8_0", "--dry-run"), 0);
    assert_false(exists(out));

    /* input problems: exit 1, nothing written */
    assert_int_equal(quantize(nan_file, out, "Q8_0", NULL), 1);       /* NaN weight */
    assert_int_equal(quantize(quantized, out, "Q8_0", NULL), 1);      /* requantizing */
    assert_int_equal(quantize(text, out, "Q8_0", NULL), 1);           /* not GGUF */
    assert_int_equal(quantize("/nonexistent/x.gguf", out, "Q8_0", NULL), 1);
    assert_int_equal(quantize(good, good, "Q8_0", NULL), 1);          /* would overwrite the input */
    assert_int_equal(quantize(good, "/nonexistent-dir/out.gguf", "Q8_0", NULL), 1);
    assert_false(exists(out));
    assert_no_temp_files();

    /* a failed run leaves an existing destination as it was; a good one replaces it whole */
    f = fopen(out, "w");
    fputs("old", f);
    fclose(f);
    assert_int_equal(quantize(nan_file, out, "Q8_0", NULL), 1);
    size_t n = 0;
    char *old = gt_read_file(out, &n);
    assert_int_equal(n, 3);
    free(old);
    assert_int_equal(quantize(good, out, "Q8_0", NULL), 0);
    char err[256];
    sy_gguf *g = sy_gguf_open(out, err, sizeof err);
    assert_non_null(g);
    assert_int_equal(sy_gguf_tensor_at(g, 0)->type, SY_DTYPE_Q8_0);
    uint64_t ft = 0;
    assert_int_equal(sy_gguf_get_uint(g, "general.file_type", &ft), 1);
    assert_int_equal(ft, SY_FTYPE_Q8_0);
    sy_gguf_close(g);
    assert_no_temp_files();
    unlink(out);
    /* SafeTensors checkpoints that cannot become a consistent GGUF: a vocabulary larger than the embedding, no
     * tokenizer.json, a SentencePiece tokenizer */
    char src[1024], copy[600], cmd[4096];
    gt_source_path(src, sizeof src, "tests/fixtures/hf/qwen2-tied-f32");
    snprintf(copy, sizeof copy, "%s/ckpt", tmpdir);
    snprintf(cmd, sizeof cmd,
             "cp -r '%s' '%s' && sed -i 's/\"vocab_size\": 512/\"vocab_size\": 501/' '%s/config.json'", src,
             copy, copy);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(quantize(copy, out, "Q8_0", NULL), 1);
    snprintf(cmd, sizeof cmd, "sed -i 's/\"vocab_size\": 501/\"vocab_size\": 512/' '%s/config.json' && "
             "mv '%s/tokenizer.json' '%s/tokenizer.model'", copy, copy, copy);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(quantize(copy, out, "Q8_0", NULL), 1);
    snprintf(cmd, sizeof cmd, "rm '%s/tokenizer.model'", copy);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(quantize(copy, out, "Q8_0", NULL), 1);
    assert_false(exists(out));
    /* an unsupported SafeTensors architecture is refused by name */
    char lfm2[1024];
    gt_source_path(lfm2, sizeof lfm2, "tests/fixtures/hf/lfm2-f32");
    assert_int_equal(quantize(lfm2, out, "Q8_0", NULL), 1);
    assert_false(exists(out));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_safetensors_like_llama_cpp),
        cmocka_unit_test(test_type_choices_like_llama_cpp),
        cmocka_unit_test(test_type_choices_rules),
        cmocka_unit_test(test_verb_refuses_bad_input),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
