#!/usr/bin/env python3
"""Second opinion on tests/fixtures/hf: recompute every expected.json with an independent float64 numpy
forward pass (no transformers), straight from the safetensors and config.json.

It agrees with transformers to ~1e-5 on the logits and reproduces every greedy continuation by teacher forcing,
so the fixtures do not just echo one library. It is also a compact statement of the math switchyard's CPU engine
implements: RMSNorm, rotate-half RoPE (the first half of each head's features pairs with the second half), GQA
by repeating KV heads, SwiGLU, and LFM2's gated short convolution.

Usage: python3 tools/oracle/check_hf_fixtures.py [tests/fixtures/hf/NAME ...]
"""

import glob
import json
import os
import sys

import numpy as np
from safetensors import safe_open

TOLERANCE = 1e-3


def load(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    weights = {}
    for path in sorted(glob.glob(os.path.join(model_dir, "*.safetensors"))):
        with safe_open(path, "pt") as st:  # "pt": numpy has no bfloat16
            for name in st.keys():
                weights[name] = st.get_tensor(name).double().numpy()
    return cfg, weights


class Model:
    def __init__(self, cfg, weights):
        self.cfg, self.w = cfg, weights
        self.kind = cfg["model_type"]
        self.hidden = cfg["hidden_size"]
        self.heads = cfg["num_attention_heads"]
        self.kv_heads = cfg.get("num_key_value_heads") or self.heads
        self.head_dim = cfg.get("head_dim") or self.hidden // self.heads
        self.eps = cfg.get("norm_eps" if self.kind == "lfm2" else "rms_norm_eps")
        rope = cfg.get("rope_parameters") or {}
        self.theta = rope.get("rope_theta", cfg.get("rope_theta"))
        if self.kind == "lfm2":
            self.layer_types = cfg["layer_types"]
        else:
            self.layer_types = ["full_attention"] * cfg["num_hidden_layers"]

    def rms(self, x, weight):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + self.eps) * weight

    def linear(self, x, name):
        y = x @ self.w[name + ".weight"].T
        return y + self.w[name + ".bias"] if name + ".bias" in self.w else y

    def rope(self, x, positions):  # x: [T, heads, head_dim]
        half = self.head_dim // 2
        inv_freq = 1.0 / self.theta ** (np.arange(0, self.head_dim, 2) / self.head_dim)
        angles = positions[:, None] * inv_freq[None, :]
        cos, sin = np.cos(angles)[:, None, :], np.sin(angles)[:, None, :]
        x1, x2 = x[..., :half], x[..., half:]
        return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)

    def attention(self, h, prefix):
        T = h.shape[0]
        proj_out = prefix + ("out_proj" if self.kind == "lfm2" else "o_proj")
        q = self.linear(h, prefix + "q_proj").reshape(T, self.heads, self.head_dim)
        k = self.linear(h, prefix + "k_proj").reshape(T, self.kv_heads, self.head_dim)
        v = self.linear(h, prefix + "v_proj").reshape(T, self.kv_heads, self.head_dim)
        if self.kind == "qwen3":
            q, k = self.rms(q, self.w[prefix + "q_norm.weight"]), self.rms(k, self.w[prefix + "k_norm.weight"])
        if self.kind == "lfm2":
            q = self.rms(q, self.w[prefix + "q_layernorm.weight"])
            k = self.rms(k, self.w[prefix + "k_layernorm.weight"])
        positions = np.arange(T, dtype=np.float64)
        q, k = self.rope(q, positions), self.rope(k, positions)
        group = self.heads // self.kv_heads  # query head i reads KV head i // group
        k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
        scores = np.einsum("thd,shd->hts", q, k) / np.sqrt(self.head_dim)
        scores = scores + np.triu(np.full((T, T), -np.inf), 1)[None]
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        scores /= scores.sum(-1, keepdims=True)
        out = np.einsum("hts,shd->thd", scores, v).reshape(T, self.heads * self.head_dim)
        return self.linear(out, proj_out)

    def short_conv(self, h, prefix):
        """LFM2: in_proj -> (B, C, x); y = C * causal_depthwise_conv(B * x); out_proj."""
        T = h.shape[0]
        b, c, x = np.split(self.linear(h, prefix + "in_proj"), 3, axis=-1)
        bx = b * x  # [T, hidden]
        kernel = self.w[prefix + "conv.weight"][:, 0, :]  # [hidden, L]; tap L-1 is the current position
        L = kernel.shape[1]
        padded = np.concatenate([np.zeros((L - 1, bx.shape[1])), bx], 0)
        conv = sum(padded[j:j + T] * kernel[:, j] for j in range(L))
        if prefix + "conv.bias" in self.w:
            conv = conv + self.w[prefix + "conv.bias"]
        return self.linear(c * conv, prefix + "out_proj")

    def mlp(self, h, prefix):
        if self.kind == "lfm2":
            gate, up, down = prefix + "feed_forward.w1", prefix + "feed_forward.w3", prefix + "feed_forward.w2"
        else:
            gate, up, down = prefix + "mlp.gate_proj", prefix + "mlp.up_proj", prefix + "mlp.down_proj"
        g = self.linear(h, gate)
        return self.linear(g / (1.0 + np.exp(-g)) * self.linear(h, up), down)

    def forward(self, ids):
        x = self.w["model.embed_tokens.weight"][ids]
        for layer, kind in enumerate(self.layer_types):
            p = f"model.layers.{layer}."
            if self.kind == "lfm2":
                h = self.rms(x, self.w[p + "operator_norm.weight"])
                if kind == "full_attention":
                    x = x + self.attention(h, p + "self_attn.")
                else:
                    x = x + self.short_conv(h, p + "conv.")
                x = x + self.mlp(self.rms(x, self.w[p + "ffn_norm.weight"]), p)
            else:
                x = x + self.attention(self.rms(x, self.w[p + "input_layernorm.weight"]), p + "self_attn.")
                x = x + self.mlp(self.rms(x, self.w[p + "post_attention_layernorm.weight"]), p)
        x = self.rms(x, self.w["model.embedding_norm.weight" if self.kind == "lfm2" else "model.norm.weight"])
        head = self.w.get("lm_head.weight", self.w["model.embed_tokens.weight"])
        return x @ head.T


def check(model_dir):
    cfg, weights = load(model_dir)
    model = Model(cfg, weights)
    with open(os.path.join(model_dir, "expected.json")) as f:
        exp = json.load(f)
    worst = 0.0
    for prompt in exp["prompts"]:
        ids = prompt["ids"]
        greedy = prompt["greedy"]["tokens"]
        logits = model.forward(ids + greedy)  # one causal pass covers the prompt and every greedy step
        worst = max(worst, float(np.abs(logits[len(ids) - 1] - prompt["last_logits"]).max()))
        if "all_logits" in prompt:
            worst = max(worst, float(np.abs(logits[:len(ids)] - np.array(prompt["all_logits"])).max()))
        chosen = logits[len(ids) - 1:-1].argmax(-1).tolist()
        if chosen != greedy:
            step = next(i for i, (a, b) in enumerate(zip(chosen, greedy)) if a != b)
            raise SystemExit(f"{model_dir}: greedy token {step} is {chosen[step]} here, "
                             f"{greedy[step]} in expected.json")
    status = "ok" if worst < TOLERANCE else "MISMATCH"
    print(f"{model_dir}: {status}, largest logit difference {worst:.2e}, greedy continuations reproduced")
    return worst < TOLERANCE


def main():
    dirs = sys.argv[1:] or sorted(glob.glob(os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures",
                                                         "hf", "*")))
    ok = all([check(os.path.normpath(d)) for d in dirs])
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
