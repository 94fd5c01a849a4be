/* config.json / generation_config.json: the committed fixtures and real-world shapes read right, every
 * unsupported or out-of-range field refused with a message naming the file and the field. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <cjson/cJSON.h>

#include "hf_config.h"
#include "sy_dtype.h"

static char err[512];

static bool parse(const char *json, sy_hf_config *cfg) {
    err[0] = '\0';
    return sy_hf_config_parse(json, strlen(json), "cfg.json", cfg, err, sizeof err);
}

/* Qwen2.5-0.5B-Instruct's config.json as published (older transformers spelling). */
static const char *qwen25_config =
    "{\"architectures\":[\"Qwen2ForCausalLM\"],\"attention_dropout\":0.0,\"bos_token_id\":151643,"
    "\"eos_token_id\":151645,\"hidden_act\":\"silu\",\"hidden_size\":896,\"initializer_range\":0.02,"
    "\"intermediate_size\":4864,\"max_position_embeddings\":32768,\"max_window_layers\":21,\"model_type\":\"qwen2\","
    "\"num_attention_heads\":14,\"num_hidden_layers\":24,\"num_key_value_heads\":2,\"rms_norm_eps\":1e-06,"
    "\"rope_theta\":1000000.0,\"sliding_window\":32768,\"tie_word_embeddings\":true,\"torch_dtype\":\"bfloat16\","
    "\"transformers_version\":\"4.43.1\",\"use_cache\":true,\"use_sliding_window\":false,\"vocab_size\":151936,"
    "\"rope_scaling\":null}";

static void test_qwen25_config(void **state) {
    (void)state;
    sy_hf_config c;
    assert_true(parse(qwen25_config, &c));
    assert_int_equal(c.arch, SY_HF_ARCH_QWEN2);
    assert_string_equal(c.model_type, "qwen2");
    assert_string_equal(c.architecture, "Qwen2ForCausalLM");
    assert_int_equal(c.hidden_size, 896);
    assert_int_equal(c.intermediate_size, 4864);
    assert_int_equal(c.num_hidden_layers, 24);
    assert_int_equal(c.num_attention_heads, 14);
    assert_int_equal(c.num_key_value_heads, 2);
    assert_int_equal(c.head_dim, 64);
    assert_int_equal(c.vocab_size, 151936);
    assert_int_equal(c.max_position_embeddings, 32768);
    assert_true(c.rms_norm_eps == 1e-6);
    assert_int_equal(c.rope.type, SY_HF_ROPE_DEFAULT);
    assert_true(c.rope.theta == 1000000.0);
    assert_true(c.tie_word_embeddings);
    assert_true(c.qkv_bias);
    assert_false(c.o_bias);
    assert_false(c.qk_norm);
    assert_int_equal(c.torch_dtype, SY_DTYPE_BF16);
    assert_int_equal(c.bos_token_id, 151643);
    assert_int_equal(c.n_eos, 1);
    assert_int_equal(c.eos_token_ids[0], 151645);
    assert_int_equal(c.pad_token_id, SY_HF_NO_TOKEN);
    for (uint32_t l = 0; l < c.num_hidden_layers; l++) assert_int_equal(c.layer_types[l], SY_HF_LAYER_ATTENTION);
    assert_string_equal(sy_hf_arch_name(c.arch), "qwen2");
}

static void test_llama31_rope_and_eos_list(void **state) {
    (void)state;
    sy_hf_config c;
    assert_true(parse("{\"architectures\":[\"LlamaForCausalLM\"],\"model_type\":\"llama\",\"hidden_size\":2048,"
                      "\"intermediate_size\":8192,\"num_hidden_layers\":16,\"num_attention_heads\":32,"
                      "\"num_key_value_heads\":8,\"vocab_size\":128256,\"max_position_embeddings\":131072,"
                      "\"rms_norm_eps\":1e-05,\"rope_theta\":500000.0,\"attention_bias\":false,\"mlp_bias\":false,"
                      "\"rope_scaling\":{\"factor\":32.0,\"high_freq_factor\":4.0,\"low_freq_factor\":1.0,"
                      "\"original_max_position_embeddings\":8192,\"rope_type\":\"llama3\"},"
                      "\"bos_token_id\":128000,\"eos_token_id\":[128001,128008,128009],\"torch_dtype\":\"bfloat16\","
                      "\"tie_word_embeddings\":true,\"head_dim\":64}",
                      &c));
    assert_int_equal(c.arch, SY_HF_ARCH_LLAMA);
    assert_int_equal(c.head_dim, 64);
    assert_int_equal(c.rope.type, SY_HF_ROPE_LLAMA3);
    assert_true(c.rope.theta == 500000.0);
    assert_true(c.rope.factor == 32.0);
    assert_true(c.rope.low_freq_factor == 1.0);
    assert_true(c.rope.high_freq_factor == 4.0);
    assert_int_equal(c.rope.original_max_position_embeddings, 8192);
    assert_int_equal(c.n_eos, 3);
    assert_int_equal(c.eos_token_ids[2], 128009);
    assert_false(c.qkv_bias);
    assert_false(c.mlp_bias);

    /* attention_bias puts biases on q, k, v and o; yarn and linear scaling in the older "type" spelling */
    assert_true(parse("{\"model_type\":\"llama\",\"hidden_size\":64,\"intermediate_size\":128,"
                      "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"vocab_size\":100,\"attention_bias\":true,"
                      "\"mlp_bias\":true,\"rope_scaling\":{\"type\":\"linear\",\"factor\":2.0}}",
                      &c));
    assert_true(c.qkv_bias && c.o_bias && c.mlp_bias);
    assert_int_equal(c.num_key_value_heads, 4); /* defaults to the head count */
    assert_int_equal(c.head_dim, 16);
    assert_int_equal(c.rope.type, SY_HF_ROPE_LINEAR);
    assert_true(c.rope.factor == 2.0);
    assert_int_equal(c.max_position_embeddings, 2048); /* LlamaConfig's default */
    assert_int_equal(c.torch_dtype, -1);
    assert_int_equal(c.n_eos, 0);
    assert_int_equal(c.bos_token_id, SY_HF_NO_TOKEN);
}

static void test_qwen3_defaults_and_yarn(void **state) {
    (void)state;
    sy_hf_config c;
    /* Qwen3Config's head_dim default is 128, not hidden/heads; transformers 5 spelling of rope and dtype */
    assert_true(parse("{\"architectures\":[\"Qwen3ForCausalLM\"],\"model_type\":\"qwen3\",\"hidden_size\":1024,"
                      "\"intermediate_size\":3072,\"num_hidden_layers\":28,\"num_attention_heads\":16,"
                      "\"num_key_value_heads\":8,\"vocab_size\":151936,\"dtype\":\"float16\","
                      "\"rope_parameters\":{\"rope_type\":\"yarn\",\"rope_theta\":1000000.0,\"factor\":4.0,"
                      "\"original_max_position_embeddings\":32768},\"use_sliding_window\":false,"
                      "\"sliding_window\":null,\"layer_types\":" /* 28 layers */
                      "[\"full_attention\",\"full_attention\",\"full_attention\",\"full_attention\","
                      "\"full_attention\",\"full_attention\",\"full_attention\",\"full_attention\","
                      "\"full_attention\",\"full_attention\",\"full_attention\",\"full_attention\","
                      "\"full_attention\",\"full_attention\",\"full_attention\",\"full_attention\","
                      "\"full_attention\",\"full_attention\",\"full_attention\",\"full_attention\","
                      "\"full_attention\",\"full_attention\",\"full_attention\",\"full_attention\","
                      "\"full_attention\",\"full_attention\",\"full_attention\",\"full_attention\"]}",
                      &c));
    assert_int_equal(c.head_dim, 128);
    assert_true(c.qk_norm);
    assert_false(c.qkv_bias);
    assert_int_equal(c.torch_dtype, SY_DTYPE_F16);
    assert_int_equal(c.rope.type, SY_HF_ROPE_YARN);
    assert_true(c.rope.theta == 1000000.0);
    assert_true(c.rope.factor == 4.0);
    assert_int_equal(c.rope.original_max_position_embeddings, 32768);
    assert_true(c.rope.beta_fast == 32.0 && c.rope.beta_slow == 1.0);
    assert_true(c.rms_norm_eps == 1e-6);
    assert_int_equal(c.max_position_embeddings, 32768);
}

static void test_lfm2_layers_and_ff_dim(void **state) {
    (void)state;
    sy_hf_config c;
    /* LFM2-350M's shape: full_attn_idxs instead of layer_types, ff 6656 -> int(2*6656/3)=4437 -> 4608 */
    assert_true(parse("{\"architectures\":[\"Lfm2ForCausalLM\"],\"model_type\":\"lfm2\",\"block_dim\":1024,"
                      "\"block_ff_dim\":6656,\"block_auto_adjust_ff_dim\":true,\"block_ffn_dim_multiplier\":1.0,"
                      "\"block_multiple_of\":256,\"conv_L_cache\":3,\"conv_bias\":false,\"hidden_size\":1024,"
                      "\"intermediate_size\":6656,\"num_hidden_layers\":16,\"num_attention_heads\":16,"
                      "\"num_key_value_heads\":8,\"vocab_size\":65536,\"norm_eps\":1e-05,\"rope_theta\":1000000.0,"
                      "\"full_attn_idxs\":[2,5,8,10,12,14],\"bos_token_id\":1,\"eos_token_id\":7,\"pad_token_id\":0,"
                      "\"max_position_embeddings\":128000,\"torch_dtype\":\"bfloat16\"}",
                      &c));
    assert_int_equal(c.arch, SY_HF_ARCH_LFM2);
    assert_int_equal(c.lfm2_ff_dim, 4608);
    assert_int_equal(c.conv_l_cache, 3);
    assert_false(c.conv_bias);
    assert_true(c.tie_word_embeddings); /* Lfm2Config's default */
    assert_true(c.qk_norm);
    assert_true(c.rms_norm_eps == 1e-5);
    assert_int_equal(c.head_dim, 64);
    const uint8_t attention_at[] = {2, 5, 8, 10, 12, 14};
    size_t k = 0;
    for (uint32_t l = 0; l < 16; l++) {
        bool attn = k < sizeof attention_at && attention_at[k] == l;
        if (attn) k++;
        assert_int_equal(c.layer_types[l], attn ? SY_HF_LAYER_ATTENTION : SY_HF_LAYER_CONV);
    }
    assert_int_equal(c.pad_token_id, 0);

    /* layer_types wins over full_attn_idxs; a null multiplier skips rounding; no auto-adjust keeps the width */
    assert_true(parse("{\"model_type\":\"lfm2\",\"hidden_size\":64,\"intermediate_size\":128,\"num_hidden_layers\":2,"
                      "\"num_attention_heads\":4,\"vocab_size\":100,\"layer_types\":[\"conv\",\"full_attention\"],"
                      "\"full_attn_idxs\":[0],\"block_ffn_dim_multiplier\":null}",
                      &c));
    assert_int_equal(c.layer_types[0], SY_HF_LAYER_CONV);
    assert_int_equal(c.layer_types[1], SY_HF_LAYER_ATTENTION);
    assert_int_equal(c.lfm2_ff_dim, 85);
    assert_true(parse("{\"model_type\":\"lfm2\",\"hidden_size\":64,\"intermediate_size\":128,\"num_hidden_layers\":2,"
                      "\"num_attention_heads\":4,\"vocab_size\":100,\"block_auto_adjust_ff_dim\":false}",
                      &c));
    assert_int_equal(c.lfm2_ff_dim, 128);
    assert_int_equal(c.layer_types[0], SY_HF_LAYER_ATTENTION); /* neither list: all attention */
}

#define MINIMAL "\"model_type\":\"qwen2\",\"hidden_size\":64,\"intermediate_size\":128,\"num_hidden_layers\":2," \
                "\"num_attention_heads\":4,\"vocab_size\":100"

static void test_refusals(void **state) {
    (void)state;
    struct {
        const char *json;
        const char *expect;
    } cases[] = {
        {"{\"model_type\":\"mistral\"}",
         "cfg.json: model_type mistral is not supported (qwen2, qwen3, llama and lfm2 are)"},
        {"{\"hidden_size\":64}", "cfg.json: model_type is missing"},
        {"{\"model_type\":7}", "cfg.json: model_type is not a string"},
        {"{" MINIMAL ",\"architectures\":[\"Qwen2ForSequenceClassification\"]}",
         "cfg.json: architecture Qwen2ForSequenceClassification is not supported (Qwen2ForCausalLM is, for "
         "model_type qwen2)"},
        {"{" MINIMAL ",\"architectures\":\"Qwen2ForCausalLM\"}", "architectures is not a list of one class name"},
        {"{" MINIMAL ",\"use_sliding_window\":true}", "cfg.json: use_sliding_window true is not supported"},
        {"{" MINIMAL ",\"rope_scaling\":{\"type\":\"dynamic\",\"factor\":2.0}}",
         "cfg.json: rope_scaling type dynamic is not supported (default, linear, llama3 and yarn are)"},
        {"{" MINIMAL ",\"rope_parameters\":{\"rope_type\":\"longrope\"}}", "rope_parameters type longrope is not"},
        {"{" MINIMAL ",\"rope_scaling\":{\"type\":\"linear\"}}", "rope_scaling of type linear has no factor"},
        {"{" MINIMAL ",\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8.0}}",
         "llama3 needs low_freq_factor"},
        {"{" MINIMAL ",\"rope_scaling\":5}", "rope_scaling is not an object"},
        {"{" MINIMAL ",\"rope_theta\":1e300}", "cfg.json: rope_theta 1e+300 is outside (0, 1e+12]"},
        {"{" MINIMAL ",\"rope_theta\":-1}", "rope_theta -1 is outside"},
        {"{" MINIMAL ",\"hidden_act\":\"gelu\"}", "cfg.json: hidden_act gelu is not supported (silu is)"},
        {"{" MINIMAL ",\"quantization_config\":{\"quant_method\":\"awq\"}}", "quantization_config is not supported"},
        {"{\"model_type\":\"qwen2\",\"hidden_size\":0,\"intermediate_size\":128,\"num_hidden_layers\":2,"
         "\"num_attention_heads\":4,\"vocab_size\":100}",
         "cfg.json: hidden_size 0 is outside [1, 65536]"},
        {"{\"model_type\":\"qwen2\",\"hidden_size\":64.5,\"intermediate_size\":128,\"num_hidden_layers\":2,"
         "\"num_attention_heads\":4,\"vocab_size\":100}",
         "cfg.json: hidden_size is not an integer"},
        {"{\"model_type\":\"qwen2\",\"hidden_size\":\"64\",\"intermediate_size\":128,\"num_hidden_layers\":2,"
         "\"num_attention_heads\":4,\"vocab_size\":100}",
         "hidden_size is not an integer"},
        {"{\"model_type\":\"qwen2\",\"hidden_size\":64,\"intermediate_size\":128,\"num_hidden_layers\":2,"
         "\"num_attention_heads\":4}",
         "cfg.json: vocab_size is missing"},
        {"{\"model_type\":\"qwen2\",\"hidden_size\":64,\"intermediate_size\":128,\"num_hidden_layers\":100000,"
         "\"num_attention_heads\":4,\"vocab_size\":100}",
         "num_hidden_layers 100000 is outside [1, 512]"},
        {"{\"model_type\":\"qwen2\",\"hidden_size\":64,\"intermediate_size\":128,\"num_hidden_layers\":2,"
         "\"num_attention_heads\":4,\"vocab_size\":1e20}",
         "vocab_size is not an integer"},
        {"{" MINIMAL ",\"num_key_value_heads\":3}", "num_key_value_heads 3 does not divide num_attention_heads 4"},
        {"{" MINIMAL ",\"num_key_value_heads\":0}", "num_key_value_heads 0 is outside"},
        {"{" MINIMAL ",\"head_dim\":15}", "head_dim 15 is odd"},
        {"{\"model_type\":\"qwen2\",\"hidden_size\":66,\"intermediate_size\":128,\"num_hidden_layers\":2,"
         "\"num_attention_heads\":4,\"vocab_size\":100}",
         "num_attention_heads 4 does not divide hidden_size 66 and there is no head_dim"},
        {"{" MINIMAL ",\"rms_norm_eps\":0}", "rms_norm_eps 0 is outside (0, 0.1]"},
        {"{" MINIMAL ",\"eos_token_id\":100}", "eos_token_id 100 is outside [0, 99]"},
        {"{" MINIMAL ",\"eos_token_id\":[1,2,300]}", "eos_token_id[2] is not a token id below 100"},
        {"{" MINIMAL ",\"eos_token_id\":[1,2.5]}", "eos_token_id[1] is not a token id"},
        {"{" MINIMAL ",\"eos_token_id\":[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16]}", "lists 17 ids, more than 16"},
        {"{" MINIMAL ",\"eos_token_id\":\"</s>\"}", "eos_token_id is neither an id nor a list of ids"},
        {"{" MINIMAL ",\"bos_token_id\":-1}", "bos_token_id -1 is outside"},
        {"{" MINIMAL ",\"torch_dtype\":\"float8_e4m3fn\"}", "cfg.json: torch_dtype float8_e4m3fn is not supported"},
        {"{" MINIMAL ",\"dtype\":\"int8\"}", "cfg.json: dtype int8 is not supported"},
        {"{" MINIMAL ",\"tie_word_embeddings\":1}", "tie_word_embeddings is not true or false"},
        {"{" MINIMAL ",\"layer_types\":[\"full_attention\",\"sliding_attention\"]}",
         "cfg.json: layer_types[1] sliding_attention is not supported"},
        {"{" MINIMAL ",\"layer_types\":[\"full_attention\"]}", "layer_types is not a list of 2 layer kinds"},
        {"{" MINIMAL ",\"layer_types\":[\"conv\",\"full_attention\"]}", "layer_types[0] conv is not supported"},
        {"{" MINIMAL ",\"partial_rotary_factor\":0.5}", "partial_rotary_factor 0.5 is not supported"},
        {"{\"model_type\":\"lfm2\",\"hidden_size\":64,\"intermediate_size\":128,\"num_hidden_layers\":2,"
         "\"num_attention_heads\":4,\"vocab_size\":100,\"full_attn_idxs\":[2]}",
         "full_attn_idxs[0] is not a layer index below 2"},
        {"{\"model_type\":\"lfm2\",\"hidden_size\":64,\"intermediate_size\":128,\"num_hidden_layers\":2,"
         "\"num_attention_heads\":4,\"vocab_size\":100,\"block_dim\":32}",
         "block_dim 32 differs from hidden_size 64"},
        {"{\"model_type\":\"lfm2\",\"hidden_size\":64,\"intermediate_size\":128,\"num_hidden_layers\":2,"
         "\"num_attention_heads\":4,\"vocab_size\":100,\"conv_L_cache\":0}",
         "conv_L_cache 0 is outside [1, 64]"},
        {"{\"model_type\":\"lfm2\",\"hidden_size\":64,\"intermediate_size\":1,\"num_hidden_layers\":2,"
         "\"num_attention_heads\":4,\"vocab_size\":100,\"block_ffn_dim_multiplier\":null}",
         "lfm2 MLP width 0 derived from intermediate_size"},
        {"[1]", "cfg.json: not a JSON object"},
        {"{\"model_type\":", "cfg.json: not valid JSON"},
        {"", "cfg.json: not valid JSON"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sy_hf_config c;
        if (parse(cases[i].json, &c) || strstr(err, cases[i].expect) == NULL) {
            print_error("case %zu: expected \"%s\", got \"%s\"\n", i, cases[i].expect, err);
            fail();
        }
    }
    /* a control byte from the file does not break the one-line message */
    sy_hf_config c;
    assert_false(parse("{\"model_type\":\"a\\nb\"}", &c));
    assert_string_equal(err, "cfg.json: model_type a?b is not supported (qwen2, qwen3, llama and lfm2 are)");
    /* the parse does not read past len: a valid object cut short is invalid */
    const char *full = "{" MINIMAL "}";
    assert_false(sy_hf_config_parse(full, strlen(full) - 1, "cfg.json", &c, err, sizeof err));
    assert_true(sy_hf_config_parse(full, strlen(full), "cfg.json", &c, err, sizeof err));
}

static void test_generation_config(void **state) {
    (void)state;
    sy_hf_generation_config g;
    const char *qwen = "{\"bos_token_id\":151643,\"pad_token_id\":151643,\"do_sample\":true,"
                       "\"eos_token_id\":[151645,151643],\"repetition_penalty\":1.1,\"temperature\":0.7,"
                       "\"top_p\":0.8,\"top_k\":20,\"transformers_version\":\"4.37.0\"}";
    assert_true(sy_hf_generation_config_parse(qwen, strlen(qwen), "gen.json", 151936, &g, err, sizeof err));
    assert_int_equal(g.n_eos, 2);
    assert_int_equal(g.eos_token_ids[0], 151645);
    assert_int_equal(g.eos_token_ids[1], 151643);
    assert_int_equal(g.bos_token_id, 151643);
    assert_true(g.has_do_sample && g.do_sample);
    assert_true(g.has_temperature && g.temperature == 0.7);
    assert_true(g.has_top_p && g.top_p == 0.8);
    assert_true(g.has_top_k && g.top_k == 20);
    assert_true(g.has_repetition_penalty && g.repetition_penalty == 1.1);
    assert_false(g.has_max_new_tokens);

    const char *empty = "{}";
    assert_true(sy_hf_generation_config_parse(empty, 2, "gen.json", 100, &g, err, sizeof err));
    assert_int_equal(g.n_eos, 0);
    assert_false(g.has_temperature);
    assert_int_equal(g.bos_token_id, SY_HF_NO_TOKEN);

    struct {
        const char *json;
        const char *expect;
    } bad[] = {
        {"{\"temperature\":-1}", "gen.json: temperature -1 is outside [0, 100]"},
        {"{\"top_p\":1.5}", "top_p 1.5 is outside [0, 1]"},
        {"{\"top_k\":-3}", "top_k -3 is outside"},
        {"{\"repetition_penalty\":0}", "repetition_penalty 0 is outside (0, 100]"},
        {"{\"eos_token_id\":[100]}", "eos_token_id[0] is not a token id below 100"},
        {"{\"do_sample\":\"yes\"}", "do_sample is not true or false"},
        {"[]", "gen.json: not a JSON object"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        if (sy_hf_generation_config_parse(bad[i].json, strlen(bad[i].json), "gen.json", 100, &g, err, sizeof err) ||
            strstr(err, bad[i].expect) == NULL) {
            print_error("case %zu: expected \"%s\", got \"%s\"\n", i, bad[i].expect, err);
            fail();
        }
    }
}

/* ---- the committed fixtures ---- */

static void load_fixture(const char *name, sy_hf_config *c, sy_hf_generation_config *g) {
    char dir[512];
    const char *src = getenv("SY_SOURCE_DIR");
    snprintf(dir, sizeof dir, "%s/tests/fixtures/hf/%s", src ? src : ".", name);
    if (!sy_hf_config_load(dir, c, g, err, sizeof err)) {
        print_error("%s\n", err);
        fail();
    }
    /* every fixture: 64 wide, vocab 512, ChatML end of turn and end of text as stop tokens */
    assert_int_equal(c->hidden_size, 64);
    assert_int_equal(c->vocab_size, 512);
    assert_int_equal(c->num_attention_heads, 4);
    assert_int_equal(c->num_key_value_heads, 2);
    assert_int_equal(c->max_position_embeddings, 256);
    assert_int_equal(c->bos_token_id, 500);
    assert_int_equal(c->n_eos, 1);
    assert_int_equal(c->eos_token_ids[0], 500);
    assert_int_equal(g->n_eos, 2);
    assert_int_equal(g->eos_token_ids[0], 502);
    assert_int_equal(g->eos_token_ids[1], 500);
    assert_true(g->has_top_k && g->top_k == 20);
    assert_true(g->has_temperature && fabs(g->temperature - 0.7) < 1e-12);
}

static void test_fixtures(void **state) {
    (void)state;
    sy_hf_config c;
    sy_hf_generation_config g;
    load_fixture("qwen2-tied-f32", &c, &g);
    assert_int_equal(c.arch, SY_HF_ARCH_QWEN2);
    assert_true(c.tie_word_embeddings);
    assert_int_equal(c.torch_dtype, SY_DTYPE_F32);
    assert_int_equal(c.head_dim, 16);
    assert_true(c.rope.theta == 10000.0);
    load_fixture("qwen2-untied-bf16", &c, &g);
    assert_false(c.tie_word_embeddings);
    assert_int_equal(c.torch_dtype, SY_DTYPE_BF16);
    load_fixture("qwen3-f32", &c, &g);
    assert_int_equal(c.arch, SY_HF_ARCH_QWEN3);
    assert_int_equal(c.head_dim, 32);
    load_fixture("qwen3-tied-bf16", &c, &g);
    assert_true(c.tie_word_embeddings);
    load_fixture("llama-gqa-f32-sharded", &c, &g);
    assert_int_equal(c.arch, SY_HF_ARCH_LLAMA);
    assert_int_equal(c.num_hidden_layers, 3);
    load_fixture("lfm2-f32", &c, &g);
    assert_int_equal(c.arch, SY_HF_ARCH_LFM2);
    assert_int_equal(c.lfm2_ff_dim, 96); /* int(2*128/3) = 85, rounded up to block_multiple_of 32 */
    assert_true(c.rope.theta == 1000000.0);
    const uint8_t kinds[4] = {SY_HF_LAYER_CONV, SY_HF_LAYER_ATTENTION, SY_HF_LAYER_CONV, SY_HF_LAYER_ATTENTION};
    assert_memory_equal(c.layer_types, kinds, 4);

    assert_false(sy_hf_config_load("/nonexistent-dir", &c, &g, err, sizeof err));
    assert_non_null(strstr(err, "/nonexistent-dir/config.json: cannot open"));
}

/* expected.json of every fixture agrees with itself and with config.json: the schema the forward-pass tests rely
 * on (tools/oracle/README.md). */
static const double *logit_row(const cJSON *row, uint32_t vocab, double *buf) {
    assert_true(cJSON_IsArray(row));
    assert_int_equal(cJSON_GetArraySize(row), vocab);
    uint32_t i = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, row) {
        assert_true(cJSON_IsNumber(v) && isfinite(v->valuedouble));
        buf[i++] = v->valuedouble;
    }
    return buf;
}

static void check_top5(const double *logits, uint32_t vocab, const cJSON *top5) {
    assert_int_equal(cJSON_GetArraySize(top5), 5);
    double previous = INFINITY;
    const cJSON *id;
    cJSON_ArrayForEach(id, top5) {
        int t = id->valueint;
        assert_true(t >= 0 && (uint32_t)t < vocab);
        assert_true(logits[t] <= previous);
        previous = logits[t];
    }
    uint32_t above = 0; /* no token outside the top 5 beats the fifth */
    for (uint32_t i = 0; i < vocab; i++) above += logits[i] > previous;
    assert_true(above <= 4);
}

static void check_expectations_of(const char *name) {
    char dir[512], path[600];
    const char *src = getenv("SY_SOURCE_DIR");
    snprintf(dir, sizeof dir, "%s/tests/fixtures/hf/%s", src ? src : ".", name);
    sy_hf_config c;
    assert_true(sy_hf_config_load(dir, &c, NULL, err, sizeof err));
    snprintf(path, sizeof path, "%s/expected.json", dir);
    size_t len;
    char *text = sy_hf_read_file(path, 64u << 20, &len, err, sizeof err);
    assert_non_null(text);
    cJSON *root = cJSON_ParseWithLength(text, len);
    free(text);
    assert_non_null(root);
    assert_int_equal(cJSON_GetObjectItem(root, "format")->valueint, 1);
    assert_string_equal(cJSON_GetObjectItem(root, "model")->valuestring, name);
    assert_string_equal(cJSON_GetObjectItem(root, "architecture")->valuestring, c.architecture);
    assert_string_equal(cJSON_GetObjectItem(root, "compute_dtype")->valuestring, "float32");
    uint32_t vocab = (uint32_t)cJSON_GetObjectItem(root, "vocab_size")->valueint;
    assert_int_equal(vocab, c.vocab_size);
    double *last = malloc(vocab * sizeof *last), *row = malloc(vocab * sizeof *row);
    const cJSON *prompts = cJSON_GetObjectItem(root, "prompts");
    assert_int_equal(cJSON_GetArraySize(prompts), 4);
    int with_all = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, prompts) {
        const cJSON *ids = cJSON_GetObjectItem(p, "ids");
        int n_ids = cJSON_GetArraySize(ids);
        assert_true(n_ids >= 1 && (uint32_t)n_ids <= c.max_position_embeddings - 32);
        const cJSON *id;
        cJSON_ArrayForEach(id, ids) assert_true(id->valueint >= 0 && (uint32_t)id->valueint < vocab);
        logit_row(cJSON_GetObjectItem(p, "last_logits"), vocab, last);
        check_top5(last, vocab, cJSON_GetObjectItem(p, "last_top5"));
        const cJSON *greedy = cJSON_GetObjectItem(p, "greedy");
        const cJSON *tokens = cJSON_GetObjectItem(greedy, "tokens");
        const cJSON *margins = cJSON_GetObjectItem(greedy, "top1_margins");
        assert_int_equal(cJSON_GetArraySize(tokens), 32);
        assert_int_equal(cJSON_GetArraySize(margins), 32);
        /* the first greedy token is the argmax of the last prompt position, by the recorded margin */
        int first = cJSON_GetArrayItem(tokens, 0)->valueint;
        double first_margin = cJSON_GetArrayItem(margins, 0)->valuedouble;
        for (uint32_t i = 0; i < vocab; i++) {
            if ((int)i != first) assert_true(last[first] - last[i] >= first_margin - 1e-4);
        }
        const cJSON *m;
        cJSON_ArrayForEach(m, margins) assert_true(m->valuedouble >= 1e-3);
        const cJSON *all = cJSON_GetObjectItem(p, "all_logits");
        if (all != NULL) {
            with_all++;
            assert_int_equal(cJSON_GetArraySize(all), n_ids);
            const cJSON *all_top5 = cJSON_GetObjectItem(p, "all_top5");
            assert_int_equal(cJSON_GetArraySize(all_top5), n_ids);
            for (int t = 0; t < n_ids; t++) {
                logit_row(cJSON_GetArrayItem(all, t), vocab, row);
                check_top5(row, vocab, cJSON_GetArrayItem(all_top5, t));
            }
            assert_memory_equal(row, last, vocab * sizeof *row); /* the last row is last_logits */
        }
    }
    assert_int_equal(with_all, 1);
    free(last);
    free(row);
    cJSON_Delete(root);
}

static void test_fixture_expectations(void **state) {
    (void)state;
    const char *names[] = {"qwen2-tied-f32", "qwen2-untied-bf16", "qwen3-f32", "qwen3-tied-bf16",
                           "llama-gqa-f32-sharded", "lfm2-f32"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) check_expectations_of(names[i]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qwen25_config),
        cmocka_unit_test(test_llama31_rope_and_eos_list),
        cmocka_unit_test(test_qwen3_defaults_and_yarn),
        cmocka_unit_test(test_lfm2_layers_and_ff_dim),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_generation_config),
        cmocka_unit_test(test_fixtures),
        cmocka_unit_test(test_fixture_expectations),
    };
    return cmocka_run_group_tests_name("hf_config", tests, NULL, NULL);
}
