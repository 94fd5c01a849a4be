#!/usr/bin/env python3
"""Records the meaning of GGUF tensor blocks and llama.cpp's quantizers as fixtures for tests/gguf.

Two oracles, dev-time only (the suite reads the JSON):
  - dequantization: the `gguf` package (gguf.quants.dequantize, numpy) on random blocks, for F16, BF16, Q4_0,
    Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K and Q6_K;
  - quantization: llama.cpp's own ggml_quantize_chunk (libggml-base from llama-cpp-python, called through ctypes,
    no importance matrix: what llama-quantize does without --imatrix) on a deterministic input that the C test
    regenerates bit for bit, so the fixture holds only a hash of each type's output plus the first rows in full.

    python3 tools/oracle/gguf_dequant_fixtures.py --out tests/fixtures/gguf/quant-blocks.json

Random blocks: random bytes, with every f16 scale field replaced by a random finite f16 (any exponent:
subnormals, tiny and huge scales included). F16 / BF16: random 16-bit patterns plus the special values (zeros,
subnormals, infinities, NaNs), as stored.

The quantizer input (regenerated in C by tests/gguf/test_gguf_quant.c): ROWS rows of N_PER_ROW floats, element
(r, c) from splitmix64 (seed SEED, one stream, row-major): three 21-bit uniforms u = next() >> 43 summed,
centered, v = (u1 + u2 + u3 - 3 * 2^20) * 2^-(20 + r % 8) (exact in f32), then: c % 61 == 7 -> v * 32 (outliers);
r % 5 == 3 and 64 <= c < 96 -> 0 (an all-zero block); r % 5 == 4 and 128 <= c < 160 -> 0.25 (a constant block).
The hash is FNV-1a 64 over the quantized rows.

JSON:
  {"format": 1, "oracle": {...versions...},
   "dequant": {"q4_0": {"n": elements, "blocks": hex, "values": hex of little-endian f32}, ...},
   "quantize": {"rows": ROWS, "n_per_row": N_PER_ROW, "seed": SEED, "head_rows": HEAD,
                "types": {"q4_0": {"fnv1a64": "16 hex digits", "head": hex of the first HEAD rows}, ...}}}
"""
import argparse
import ctypes
import glob
import importlib.metadata
import json
import os

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T

TYPES = {  # name: (ggml type, elements per block, byte offsets of f16 scale fields)
    "q4_0": (T.Q4_0, 32, [0]),
    "q4_1": (T.Q4_1, 32, [0, 2]),
    "q5_0": (T.Q5_0, 32, [0]),
    "q5_1": (T.Q5_1, 32, [0, 2]),
    "q8_0": (T.Q8_0, 32, [0]),
    "q2_k": (T.Q2_K, 256, [80, 82]),
    "q3_k": (T.Q3_K, 256, [108]),
    "q4_k": (T.Q4_K, 256, [0, 2]),
    "q5_k": (T.Q5_K, 256, [0, 2]),
    "q6_k": (T.Q6_K, 256, [208]),
}
QUANT_TYPES = ["f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k"]
GGML_TYPE_IDS = {"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8, "q2_k": 10, "q3_k": 11,
                 "q4_k": 12, "q5_k": 13, "q6_k": 14, "bf16": 30}
ROWS, N_PER_ROW, SEED, HEAD = 512, 512, 20240607, 4
MASK64 = (1 << 64) - 1


def random_finite_f16(rng):
    while True:
        h = int(rng.integers(0, 1 << 16))
        if (h >> 10) & 31 != 31:
            return h


def dequant_case(name, rng):
    if name in ("f16", "bf16"):
        special = [0x0000, 0x8000, 0x0001, 0x8001, 0x03ff, 0x0400, 0x7bff, 0x7c00, 0xfc00, 0x7e00, 0x7c01, 0xfe01,
                   0x3c00, 0xbc00] if name == "f16" else \
                  [0x0000, 0x8000, 0x0001, 0x007f, 0x0080, 0x7f7f, 0x7f80, 0xff80, 0x7fc0, 0x7f81, 0xffc1, 0x3f80,
                   0xbf80, 0x4049]
        raw = np.array(special + [int(v) for v in rng.integers(0, 1 << 16, 256 - len(special))], dtype=np.uint16)
        if name == "f16":
            values = raw.view(np.float16).astype(np.float32)
        else:
            values = (raw.astype(np.uint32) << 16).view(np.float32)
        return {"n": int(raw.size), "blocks": raw.astype("<u2").tobytes().hex(),
                "values": values.astype("<f4").tobytes().hex()}
    qtype, block, scale_offsets = TYPES[name]
    block_bytes = gguf.GGML_QUANT_SIZES[qtype][1]
    n_blocks = 16 if block == 32 else 6
    data = bytearray(rng.integers(0, 256, n_blocks * block_bytes, dtype=np.uint8).tobytes())
    for b in range(n_blocks):
        for off in scale_offsets:
            h = random_finite_f16(rng)
            if b == 0:
                h = 0x2e66  # a plain ~0.1 scale in the first block, so one block reads as ordinary numbers
            data[b * block_bytes + off:b * block_bytes + off + 2] = h.to_bytes(2, "little")
    values = gguf.quants.dequantize(np.frombuffer(bytes(data), dtype=np.uint8), qtype).astype(np.float32)
    assert values.size == n_blocks * block
    return {"n": int(values.size), "blocks": bytes(data).hex(), "values": values.astype("<f4").tobytes().hex()}


def splitmix64(state):
    state = (state + 0x9E3779B97F4A7C15) & MASK64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return state, z ^ (z >> 31)


def quant_input():
    state = SEED
    out = np.empty((ROWS, N_PER_ROW), dtype=np.float32)
    for r in range(ROWS):
        scale = np.float32(2.0 ** -(20 + r % 8))
        for c in range(N_PER_ROW):
            s = 0
            for _ in range(3):
                state, z = splitmix64(state)
                s += z >> 43
            v = np.float32(s - 3 * (1 << 20)) * scale
            if c % 61 == 7:
                v = v * np.float32(32.0)
            if r % 5 == 3 and 64 <= c < 96:
                v = np.float32(0.0)
            if r % 5 == 4 and 128 <= c < 160:
                v = np.float32(0.25)
            out[r, c] = v
    return out


def fnv1a64(data):
    h = 0xcbf29ce484222325
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & MASK64
    return f"{h:016x}"


def load_ggml_base():
    import llama_cpp
    libdir = os.path.join(os.path.dirname(llama_cpp.__file__), "lib")
    path = sorted(glob.glob(os.path.join(libdir, "libggml-base.so*")))[0]
    lib = ctypes.CDLL(path)
    lib.ggml_quantize_chunk.restype = ctypes.c_size_t
    lib.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                                        ctypes.c_int64, ctypes.c_void_p]
    lib.ggml_row_size.restype = ctypes.c_size_t
    lib.ggml_row_size.argtypes = [ctypes.c_int, ctypes.c_int64]
    return lib, path


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="tests/fixtures/gguf/quant-blocks.json")
    args = ap.parse_args()
    import llama_cpp
    rng = np.random.default_rng(7)
    dequant = {name: dequant_case(name, rng) for name in ["f16", "bf16"] + list(TYPES)}

    lib, libpath = load_ggml_base()
    x = np.ascontiguousarray(quant_input())
    quant = {}
    for name in QUANT_TYPES:
        tid = GGML_TYPE_IDS[name]
        row = lib.ggml_row_size(tid, N_PER_ROW)
        buf = ctypes.create_string_buffer(row * ROWS)
        got = lib.ggml_quantize_chunk(tid, x.ctypes.data, buf, 0, ROWS, N_PER_ROW, None)
        assert got == row * ROWS, (name, got, row * ROWS)
        raw = buf.raw
        quant[name] = {"fnv1a64": fnv1a64(raw), "head": raw[:row * HEAD].hex()}
        print(f"{name}: {row} bytes/row, fnv1a64 {quant[name]['fnv1a64']}")
    doc = {
        "format": 1,
        "oracle": {"dequant": f"gguf {importlib.metadata.version('gguf')} (gguf.quants.dequantize)",
                   "quantize": f"llama-cpp-python {llama_cpp.__version__}: ggml_quantize_chunk in "
                               f"{os.path.basename(libpath)}, no imatrix",
                   "numpy": np.__version__},
        "dequant": dequant,
        "quantize": {"rows": ROWS, "n_per_row": N_PER_ROW, "seed": SEED, "head_rows": HEAD, "types": quant},
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
