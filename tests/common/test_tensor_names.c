/* tensor_names.c: the names llama.cpp and transformers give each tensor, both ways; every tensor of the committed
 * checkpoints has a role in its family; hostile names and small buffers refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "hf_config.h"
#include "safetensors.h"
#include "tensor_names.h"

static const char *name_of(sy_tensor_scheme s, sy_tensor_role r, uint32_t layer) {
    static char buf[128];
    const char *n = sy_tensor_name(s, r, layer, buf, sizeof buf);
    return n ? n : "(none)";
}

/* What llama.cpp's convert_hf_to_gguf.py maps, spelled out. */
static void test_known_names(void **state) {
    (void)state;
    assert_string_equal(name_of(SY_TENSORS_GGUF, SY_TENSOR_ATTN_Q, 3), "blk.3.attn_q.weight");
    assert_string_equal(name_of(SY_TENSORS_HF_LLAMA, SY_TENSOR_ATTN_Q, 3), "model.layers.3.self_attn.q_proj.weight");
    assert_string_equal(name_of(SY_TENSORS_GGUF, SY_TENSOR_TOKEN_EMBD, 9), "token_embd.weight");
    assert_string_equal(name_of(SY_TENSORS_HF_LLAMA, SY_TENSOR_OUTPUT, 0), "lm_head.weight");
    assert_string_equal(name_of(SY_TENSORS_HF_LLAMA, SY_TENSOR_OUTPUT_NORM, 0), "model.norm.weight");
    assert_string_equal(name_of(SY_TENSORS_HF_LLAMA, SY_TENSOR_FFN_NORM, 12),
                        "model.layers.12.post_attention_layernorm.weight");
    assert_string_equal(name_of(SY_TENSORS_HF_LLAMA, SY_TENSOR_ATTN_OUTPUT_BIAS, 0),
                        "model.layers.0.self_attn.o_proj.bias");
    assert_string_equal(name_of(SY_TENSORS_HF_LFM2, SY_TENSOR_ATTN_OUTPUT, 1),
                        "model.layers.1.self_attn.out_proj.weight");
    assert_string_equal(name_of(SY_TENSORS_HF_LFM2, SY_TENSOR_FFN_UP, 2), "model.layers.2.feed_forward.w3.weight");
    assert_string_equal(name_of(SY_TENSORS_HF_LFM2, SY_TENSOR_CONV_KERNEL, 0), "model.layers.0.conv.conv.weight");
    assert_string_equal(name_of(SY_TENSORS_GGUF, SY_TENSOR_CONV_KERNEL, 0), "blk.0.shortconv.conv.weight");
    assert_string_equal(name_of(SY_TENSORS_HF_LFM2, SY_TENSOR_TOKEN_EMBD_NORM, 0), "model.embedding_norm.weight");
    assert_string_equal(name_of(SY_TENSORS_GGUF, SY_TENSOR_TOKEN_EMBD_NORM, 0), "token_embd_norm.weight");
    assert_string_equal(name_of(SY_TENSORS_GGUF, SY_TENSOR_ATTN_K_NORM, UINT32_MAX),
                        "blk.4294967295.attn_k_norm.weight");
    /* what a family lacks has no name */
    assert_string_equal(name_of(SY_TENSORS_HF_LFM2, SY_TENSOR_ATTN_Q_BIAS, 0), "(none)");
    assert_string_equal(name_of(SY_TENSORS_HF_LLAMA, SY_TENSOR_CONV_IN, 0), "(none)");
    assert_string_equal(name_of(SY_TENSORS_HF_LLAMA, SY_TENSOR_ROPE_FREQS, 0), "(none)");
    assert_string_equal(name_of(SY_TENSORS_HF_LLAMA, SY_TENSOR_TOKEN_EMBD_NORM, 0), "(none)");
    assert_int_equal(sy_tensor_scheme_of_hf(SY_HF_ARCH_QWEN3), SY_TENSORS_HF_LLAMA);
    assert_int_equal(sy_tensor_scheme_of_hf(SY_HF_ARCH_LLAMA), SY_TENSORS_HF_LLAMA);
    assert_int_equal(sy_tensor_scheme_of_hf(SY_HF_ARCH_LFM2), SY_TENSORS_HF_LFM2);
}

/* Every name of every scheme reads back as its role and layer, and no two roles share a name. */
static void test_round_trip_and_unique(void **state) {
    (void)state;
    static const uint32_t layers[] = {0, 7, 1234567, UINT32_MAX};
    for (int s = 0; s < SY_TENSORS_SCHEME_COUNT_; s++) {
        int named = 0;
        for (int r = 0; r < SY_TENSOR_ROLE_COUNT_; r++) {
            for (size_t li = 0; li < sizeof layers / sizeof *layers; li++) {
                char a[128];
                if (sy_tensor_name((sy_tensor_scheme)s, (sy_tensor_role)r, layers[li], a, sizeof a) == NULL) {
                    assert_string_equal(a, "");
                    continue;
                }
                named += li == 0;
                sy_tensor_role role;
                uint32_t layer = 99;
                if (!sy_tensor_role_of((sy_tensor_scheme)s, a, &role, &layer)) fail_msg("%s does not read back", a);
                assert_int_equal(role, r);
                assert_int_equal(layer, sy_tensor_role_per_layer(role) ? layers[li] : 0);
                for (int r2 = 0; r2 < r; r2++) {
                    char b[128];
                    if (sy_tensor_name((sy_tensor_scheme)s, (sy_tensor_role)r2, layers[li], b, sizeof b))
                        assert_string_not_equal(a, b);
                }
            }
        }
        assert_true(named >= 14); /* a scheme names most roles */
    }
}

/* Only the names themselves: no signs, spaces, overflowing or missing layer numbers, no extra text. */
static void test_hostile_names(void **state) {
    (void)state;
    static const char *const bad[] = {
        "",
        "model.layers.-1.self_attn.q_proj.weight",
        "model.layers.+1.self_attn.q_proj.weight",
        "model.layers. 1.self_attn.q_proj.weight",
        "model.layers.4294967296.self_attn.q_proj.weight",
        "model.layers.99999999999999999999999.self_attn.q_proj.weight",
        "model.layers..self_attn.q_proj.weight",
        "model.layers.1self_attn.q_proj.weight",
        "model.layers.1.self_attn.q_proj.weightx",
        "model.layers.1.self_attn.q_proj",
        "model.layers.%u.self_attn.q_proj.weight",
        "blk.1.attn_q.weight", /* GGUF's, not Hugging Face's */
        "model.layers.1.conv.conv.weight", /* lfm2's */
        "model.embed_tokens.weight ",
        "lm_head",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        sy_tensor_role role = SY_TENSOR_ROLE_COUNT_;
        if (sy_tensor_role_of(SY_TENSORS_HF_LLAMA, bad[i], &role, NULL)) fail_msg("'%s' was read as %d", bad[i], role);
    }
    sy_tensor_role role;
    uint32_t layer;
    assert_false(sy_tensor_role_of(SY_TENSORS_HF_LLAMA, NULL, &role, &layer));
    assert_false(sy_tensor_role_of(SY_TENSORS_SCHEME_COUNT_, "token_embd.weight", &role, &layer));
    assert_false(sy_tensor_role_of(SY_TENSORS_GGUF, "blk.4294967296.attn_q.weight", &role, &layer));
    assert_true(sy_tensor_role_of(SY_TENSORS_GGUF, "blk.4294967295.attn_q.weight", &role, &layer));
    assert_int_equal(layer, UINT32_MAX);
    /* leading zeros are the same number, as Python's int() reads them */
    assert_true(sy_tensor_role_of(SY_TENSORS_HF_LLAMA, "model.layers.007.mlp.up_proj.weight", &role, &layer));
    assert_int_equal(role, SY_TENSOR_FFN_UP);
    assert_int_equal(layer, 7);

    /* buffers too small, arguments out of range: no name, and nothing past the buffer */
    char buf[20];
    memset(buf, 'x', sizeof buf);
    assert_null(sy_tensor_name(SY_TENSORS_GGUF, SY_TENSOR_ATTN_Q, 3, buf, 19)); /* needs 20 */
    assert_string_equal(buf, "");
    assert_int_equal(buf[19], 'x');
    assert_non_null(sy_tensor_name(SY_TENSORS_GGUF, SY_TENSOR_ATTN_Q, 3, buf, 20));
    assert_null(sy_tensor_name(SY_TENSORS_GGUF, SY_TENSOR_ATTN_Q, 3, buf, 0));
    assert_null(sy_tensor_name(SY_TENSORS_GGUF, SY_TENSOR_ROLE_COUNT_, 0, buf, sizeof buf));
    assert_null(sy_tensor_name((sy_tensor_scheme)-1, SY_TENSOR_ATTN_Q, 0, buf, sizeof buf));
    assert_string_equal(buf, "");

    assert_true(sy_tensor_hf_ignored("model.layers.0.self_attn.rotary_emb.inv_freq"));
    assert_false(sy_tensor_hf_ignored("model.layers.0.self_attn.rotary_emb.inv_freq.x"));
    assert_false(sy_tensor_hf_ignored("inv_freq"));
    assert_false(sy_tensor_hf_ignored(NULL));
}

/* Every tensor of the committed transformers checkpoints has a role in its family, within its layers. */
static void test_fixture_checkpoints(void **state) {
    (void)state;
    static const char *const dirs[] = {"qwen2-tied-f32", "qwen2-untied-bf16", "qwen3-f32", "qwen3-tied-bf16",
                                       "llama-gqa-f32-sharded", "lfm2-f32"};
    const char *src = getenv("SY_SOURCE_DIR");
    for (size_t d = 0; d < sizeof dirs / sizeof *dirs; d++) {
        char dir[512], err[512];
        snprintf(dir, sizeof dir, "%s/tests/fixtures/hf/%s", src ? src : ".", dirs[d]);
        sy_hf_config cfg;
        if (!sy_hf_config_load(dir, &cfg, NULL, err, sizeof err)) fail_msg("%s", err);
        sy_safetensors *st = sy_safetensors_open(dir, err, sizeof err);
        if (st == NULL) fail_msg("%s", err);
        sy_tensor_scheme scheme = sy_tensor_scheme_of_hf(cfg.arch);
        bool seen[SY_TENSOR_ROLE_COUNT_] = {false};
        for (size_t i = 0; i < sy_safetensors_count(st); i++) {
            const char *name = sy_safetensors_at(st, i)->name;
            sy_tensor_role role;
            uint32_t layer;
            if (sy_tensor_hf_ignored(name)) continue;
            if (!sy_tensor_role_of(scheme, name, &role, &layer)) fail_msg("%s: %s has no role", dirs[d], name);
            if (sy_tensor_role_per_layer(role)) assert_true(layer < cfg.num_hidden_layers);
            seen[role] = true;
        }
        assert_true(seen[SY_TENSOR_TOKEN_EMBD] && seen[SY_TENSOR_ATTN_Q] && seen[SY_TENSOR_FFN_DOWN]);
        assert_true(seen[cfg.arch == SY_HF_ARCH_LFM2 ? SY_TENSOR_TOKEN_EMBD_NORM : SY_TENSOR_OUTPUT_NORM]);
        if (cfg.arch == SY_HF_ARCH_LFM2) assert_true(seen[SY_TENSOR_CONV_KERNEL]);
        sy_safetensors_close(st);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_known_names),
        cmocka_unit_test(test_round_trip_and_unique),
        cmocka_unit_test(test_hostile_names),
        cmocka_unit_test(test_fixture_checkpoints),
    };
    return cmocka_run_group_tests_name("tensor_names", tests, NULL, NULL);
}
