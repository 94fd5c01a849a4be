#!/usr/bin/env python3
"""Dev-time generator of stories260K-kv.f16: the real KV cache of a trained model, for the compression benchmark.

A plain numpy forward pass of llama2.c's stories260K (shared/models/stories260K/stories260K.bin, llama2.c v0
checkpoint) runs greedily from BOS for 256 positions; the text it produces is checked against the model author's
documented output (expected-greedy-from-bos.txt), so the KV is what a correct engine holds. The output is the K and
V of every position, position-major (for each position, for each layer: 32 K values then 32 V values), as
little-endian IEEE F16: 256 * 5 * 2 * 32 * 2 = 163840 bytes.

usage: make_kv_fixture.py MODEL_DIR OUT_FILE      (needs numpy)
"""
import struct
import sys

import numpy as np

N_POS = 256


def main():
    model_dir, out_path = sys.argv[1], sys.argv[2]
    raw = open(f"{model_dir}/stories260K.bin", "rb").read()
    dim, hidden, n_layers, n_heads, n_kv_heads, vocab, seq_len = struct.unpack("<7i", raw[:28])
    shared = vocab > 0
    vocab = abs(vocab)
    w = np.frombuffer(raw, dtype="<f4", offset=28)
    head = dim // n_heads
    kv_dim = head * n_kv_heads

    def take(n, shape):
        nonlocal w
        t, w = w[:n].reshape(shape), w[n:]
        return t

    emb = take(vocab * dim, (vocab, dim))
    rms_att = take(n_layers * dim, (n_layers, dim))
    wq = take(n_layers * dim * dim, (n_layers, dim, dim))
    wk = take(n_layers * kv_dim * dim, (n_layers, kv_dim, dim))
    wv = take(n_layers * kv_dim * dim, (n_layers, kv_dim, dim))
    wo = take(n_layers * dim * dim, (n_layers, dim, dim))
    rms_ffn = take(n_layers * dim, (n_layers, dim))
    w1 = take(n_layers * hidden * dim, (n_layers, hidden, dim))
    w2 = take(n_layers * dim * hidden, (n_layers, dim, hidden))
    w3 = take(n_layers * hidden * dim, (n_layers, hidden, dim))
    rms_final = take(dim, (dim,))
    take(seq_len * head // 2, (seq_len, head // 2))  # freq_cis_real (recomputed below)
    take(seq_len * head // 2, (seq_len, head // 2))  # freq_cis_imag
    wcls = emb if shared else take(vocab * dim, (vocab, dim))

    def rmsnorm(x, g):
        return g * (x / np.sqrt(np.mean(x * x) + 1e-5))

    def rope(v, pos, n):
        v = v.copy()
        for i in range(0, n, 2):
            freq = 1.0 / (10000.0 ** ((i % head) / head))
            c, s = np.cos(pos * freq), np.sin(pos * freq)
            a, b = v[i], v[i + 1]
            v[i], v[i + 1] = a * c - b * s, a * s + b * c
        return v

    keys = np.zeros((n_layers, N_POS, kv_dim), np.float32)
    values = np.zeros((n_layers, N_POS, kv_dim), np.float32)
    vocab_pieces = read_vocab(f"{model_dir}/tok512.bin", vocab)
    token, text = 1, ""
    for pos in range(N_POS):
        x = emb[token].astype(np.float32)
        for l in range(n_layers):
            xb = rmsnorm(x, rms_att[l])
            q = rope(wq[l] @ xb, pos, dim)
            keys[l, pos] = rope(wk[l] @ xb, pos, kv_dim)
            values[l, pos] = wv[l] @ xb
            out = np.zeros(dim, np.float32)
            for h in range(n_heads):
                kh = h // (n_heads // n_kv_heads)
                qh = q[h * head:(h + 1) * head]
                k = keys[l, :pos + 1, kh * head:(kh + 1) * head]
                att = k @ qh / np.sqrt(head)
                att = np.exp(att - att.max())
                att /= att.sum()
                out[h * head:(h + 1) * head] = att @ values[l, :pos + 1, kh * head:(kh + 1) * head]
            x = x + wo[l] @ out
            xb = rmsnorm(x, rms_ffn[l])
            h1 = w1[l] @ xb
            x = x + w2[l] @ ((h1 / (1 + np.exp(-h1))) * (w3[l] @ xb))
        logits = wcls @ rmsnorm(x, rms_final)
        nxt = int(np.argmax(logits))
        piece = vocab_pieces[nxt]
        if token == 1 and piece.startswith(" "):
            piece = piece[1:]
        text += piece
        token = nxt
    expected = open(f"{model_dir}/expected-greedy-from-bos.txt").read()
    if not expected.startswith(text[:200]):
        sys.exit(f"the forward pass does not reproduce the documented text:\n{text[:200]!r}\n{expected[:200]!r}")
    kv = np.stack([keys, values], axis=2)  # layer, pos, k/v, kv_dim
    kv = kv.transpose(1, 0, 2, 3)  # pos, layer, k/v, kv_dim
    kv.astype("<f2").tofile(out_path)
    print(f"{out_path}: {N_POS} positions, {kv.size * 2} bytes; text checked: {text[:60]!r}...")


def read_vocab(path, vocab):
    raw = open(path, "rb").read()
    off, pieces = 4, []
    for _ in range(vocab):
        _, n = struct.unpack_from("<fi", raw, off)
        pieces.append(raw[off + 8:off + 8 + n].decode("utf-8", "replace"))
        off += 8 + n
    return [p.replace("<0x0A>", "\n") for p in pieces]


if __name__ == "__main__":
    main()
