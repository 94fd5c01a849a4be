#!/usr/bin/env python3
"""Writes the seed corpus of the fuzz_gguf target (tests/fuzz/corpus/gguf/): small GGUF files that reach every
part of the reader and of the SPM tokenizer built from GGUF metadata. Plain struct packing, no dependencies.

    python3 tools/oracle/gguf_fuzz_seeds.py --stories tests/fixtures/stories260K/stories260K.gguf \
        --out tests/fuzz/corpus/gguf
"""
import argparse
import os
import struct

U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)


def s(text):
    b = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(b)) + b


def kv(key, vtype, payload):
    return s(key) + struct.pack("<I", vtype) + payload


def arr(elem_type, items, fmt=None):
    body = b"".join(s(x) for x in items) if elem_type == STR else b"".join(struct.pack(fmt, x) for x in items)
    return struct.pack("<IQ", elem_type, len(items)) + body


def tensor_info(name, dims, ggml_type, offset):
    return s(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims) + \
        struct.pack("<IQ", ggml_type, offset)


def gguf(version, kvs, tensors, data, alignment=32):
    head = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs)) + b"".join(kvs) + b"".join(tensors)
    pad = (-len(head)) % alignment
    return head + b"\0" * pad + data


def small_vocab():
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + \
        ["\u2581", "a", "b", "ab", "\u2581a", "\u2581ab", "\u2581Hello", "lo", "Hel", "\u2581wor", "ld"]
    types = [2, 3, 3] + [6] * 256 + [1] * 11
    scores = [0.0, 0.0, 0.0] + [0.0] * 256 + [-float(i) for i in range(11)]
    return [
        kv("tokenizer.ggml.model", STR, s("llama")),
        kv("tokenizer.ggml.tokens", ARR, arr(STR, tokens)),
        kv("tokenizer.ggml.scores", ARR, arr(F32, scores, "<f")),
        kv("tokenizer.ggml.token_type", ARR, arr(I32, types, "<i")),
        kv("tokenizer.ggml.bos_token_id", U32, struct.pack("<I", 1)),
        kv("tokenizer.ggml.eos_token_id", U32, struct.pack("<I", 2)),
        kv("tokenizer.ggml.add_bos_token", BOOL, b"\x01"),
    ]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stories", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    seeds = {}

    # Every metadata value type, two tensors (f32 and q8_0), alignment 64.
    kvs = [
        kv("general.architecture", STR, s("llama")),
        kv("general.alignment", U32, struct.pack("<I", 64)),
        kv("t.u8", U8, b"\x07"), kv("t.i8", I8, b"\xf9"), kv("t.u16", U16, struct.pack("<H", 700)),
        kv("t.i16", I16, struct.pack("<h", -700)), kv("t.i32", I32, struct.pack("<i", -5)),
        kv("t.f32", F32, struct.pack("<f", 0.5)), kv("t.bool", BOOL, b"\x00"),
        kv("t.u64", U64, struct.pack("<Q", 1 << 40)), kv("t.i64", I64, struct.pack("<q", -(1 << 40))),
        kv("t.f64", F64, struct.pack("<d", 0.25)),
        kv("t.strs", ARR, arr(STR, ["a", "bb", ""])), kv("t.u16s", ARR, arr(U16, [1, 2, 3], "<H")),
    ]
    tensors = [tensor_info("w", [4, 2], 0, 0), tensor_info("q", [32], 8, 64)]
    data = struct.pack("<8f", *range(8)) + b"\0" * 32 + bytes(range(34))
    seeds["all-types-v3.gguf"] = gguf(3, kvs, tensors, data, alignment=64)

    # Version 2, default alignment, an empty tensor, a 4-D tensor.
    tensors = [tensor_info("empty", [0, 4], 0, 0), tensor_info("four", [2, 1, 2, 2], 1, 0)]
    seeds["v2-shapes.gguf"] = gguf(2, [kv("general.architecture", STR, s("qwen2"))], tensors, b"\1" * 32)

    # A vocabulary-only file with byte tokens, for the tokenizer.
    seeds["spm-vocab.gguf"] = gguf(3, small_vocab(), [], b"")

    # The stories260K metadata (real 512-token SPM vocabulary and hyper-parameters), without tensors.
    with open(args.stories, "rb") as f:
        blob = f.read()
    n_tensors, n_kv = struct.unpack_from("<QQ", blob, 8)
    pos = 24
    for _ in range(n_kv):  # walk the kvs to find where the tensor infos start
        (klen,) = struct.unpack_from("<Q", blob, pos)
        pos += 8 + klen
        (vtype,) = struct.unpack_from("<I", blob, pos)
        pos += 4
        pos = skip_value(blob, pos, vtype)
    seeds["stories260K-metadata.gguf"] = blob[:8] + struct.pack("<QQ", 0, n_kv) + blob[24:pos]

    # Malformed: truncated inside a string array, and a wrong alignment.
    seeds["truncated-vocab.gguf"] = seeds["spm-vocab.gguf"][:700]
    seeds["bad-alignment.gguf"] = gguf(3, [kv("general.alignment", U32, struct.pack("<I", 48))], [], b"")

    for name, content in seeds.items():
        with open(os.path.join(args.out, name), "wb") as f:
            f.write(content)
        print(f"{name}: {len(content)} bytes")


SIZES = {U8: 1, I8: 1, U16: 2, I16: 2, U32: 4, I32: 4, F32: 4, BOOL: 1, U64: 8, I64: 8, F64: 8}


def skip_value(blob, pos, vtype):
    if vtype == STR:
        (n,) = struct.unpack_from("<Q", blob, pos)
        return pos + 8 + n
    if vtype == ARR:
        et, count = struct.unpack_from("<IQ", blob, pos)
        pos += 12
        for _ in range(count):
            pos = skip_value(blob, pos, et)
        return pos
    return pos + SIZES[vtype]


if __name__ == "__main__":
    main()
