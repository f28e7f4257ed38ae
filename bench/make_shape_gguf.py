#!/usr/bin/env python3
"""Writes a random-weight GGUF of a real model's shape, for memory and speed benchmarks.

The weights are noise (random Q4_0/Q8_0/Q4_K... blocks, or F16 values, with a scale that keeps activations O(1));
only the shapes and block types matter for memory and speed. The tokenizer (vocabulary, merges,
chat template) is copied from a real GGUF (default: the SmolLM2 model kvzip fetches) and padded
with "<pad_N>" tokens up to the shape's vocabulary size, so kvzip and llama.cpp both load the file.

Runs with the pyenv `python3` and needs the PyPI packages `gguf` and `numpy`.

  python3 bench/make_shape_gguf.py --shape llama-8b --type Q4_0 -o /work/ext/llama8b-q4_0.gguf
  python3 bench/make_shape_gguf.py --shape smollm2-135m --type Q4_1 --context 32768 -o smol-32k.gguf
    (SmolLM2's shape with a longer context: time to first token over 16K-token compositions)
"""
import argparse
import os
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q

SHAPES = {
    # L, E, Hq, Hkv, F, V, tied, rope base
    "smollm2-135m": dict(L=30, E=576, Hq=9, Hkv=3, F=1536, V=49152, tied=True, base=100000.0),
    "llama-1b": dict(L=16, E=2048, Hq=32, Hkv=8, F=8192, V=128256, tied=True, base=500000.0),
    "llama-3b": dict(L=28, E=3072, Hq=24, Hkv=8, F=8192, V=128256, tied=True, base=500000.0),
    "llama-8b": dict(L=32, E=4096, Hq=32, Hkv=8, F=14336, V=128256, tied=False, base=500000.0),
}

# bytes per block, elements per block, spread of the integer code (for the scale)
BLOCKS = {
    "Q4_0": (Q.Q4_0, 18, 32),
    "Q8_0": (Q.Q8_0, 34, 32),
    "Q4_1": (Q.Q4_1, 20, 32),
    "Q4_K": (Q.Q4_K, 144, 256),
    "Q6_K": (Q.Q6_K, 210, 256),
    "F16": (Q.F16, 2, 1),
}


def random_blocks(rng, rows, cols, qtype):
    """Random blocks whose dequantized values have roughly std 1/sqrt(cols)."""
    qt, bb, be = BLOCKS[qtype]
    nb = cols // be
    if qtype == "F16":  # plain half floats of std 1/sqrt(cols)
        v = (rng.standard_normal((rows, cols), dtype=np.float32) / np.sqrt(cols)).astype(np.float16)
        return v.view(np.uint8).reshape(rows, cols * 2), qt
    raw = rng.integers(0, 256, size=(rows, nb, bb), dtype=np.uint8)
    target = 1.0 / np.sqrt(cols)
    if qtype == "Q4_0":
        d = np.float16(target / 4.6)
        raw[:, :, 0:2] = np.frombuffer(np.array([d], np.float16).tobytes(), np.uint8)
    elif qtype == "Q4_1":
        d, m = np.float16(target / 4.6), np.float16(-7.5 * target / 4.6)
        raw[:, :, 0:4] = np.frombuffer(np.array([d, m], np.float16).tobytes(), np.uint8)
    elif qtype == "Q8_0":
        d = np.float16(target / 74.0)
        raw[:, :, 0:2] = np.frombuffer(np.array([d], np.float16).tobytes(), np.uint8)
    elif qtype == "Q4_K":
        d, dmin = np.float16(target / 4.6 / 32), np.float16(7.5 * target / 4.6 / 32)
        raw[:, :, 0:4] = np.frombuffer(np.array([d, dmin], np.float16).tobytes(), np.uint8)
        raw[:, :, 4:16] = 32  # 6-bit scales and mins of 32
    elif qtype == "Q6_K":
        raw[:, :, 192:208] = 16  # int8 scales
        d = np.float16(target / 18.0 / 16)
        raw[:, :, 208:210] = np.frombuffer(np.array([d], np.float16).tobytes(), np.uint8)
    return raw.reshape(rows, nb * bb), qt


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", choices=sorted(SHAPES), required=True)
    ap.add_argument("--type", choices=sorted(BLOCKS), default="Q4_0", help="matrix block type")
    ap.add_argument("--tokenizer-from", default=os.environ.get(
        "KVZIP_MODEL", os.path.expanduser("~/.cache/kvzip/models/SmolLM2-135M-Instruct.Q4_1.gguf")))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--context", type=int, default=8192, help="context length the file declares")
    ap.add_argument("-o", "--out", required=True)
    a = ap.parse_args()
    s = SHAPES[a.shape]
    L, E, Hq, Hkv, F, V = s["L"], s["E"], s["Hq"], s["Hkv"], s["F"], s["V"]
    D = E // Hq
    rng = np.random.default_rng(a.seed)

    src = gguf.GGUFReader(a.tokenizer_from)

    def field(name):
        f = src.fields[name]
        if f.types[0] == gguf.GGUFValueType.ARRAY:
            if f.types[1] == gguf.GGUFValueType.STRING:
                return [bytes(f.parts[i]).decode("utf-8") for i in f.data]
            return [f.parts[i][0].item() for i in f.data]
        if f.types[0] == gguf.GGUFValueType.STRING:
            return bytes(f.parts[f.data[0]]).decode("utf-8")
        return f.parts[f.data[0]][0].item()

    tokens = field("tokenizer.ggml.tokens")
    types = field("tokenizer.ggml.token_type")
    if len(tokens) > V:
        sys.exit(f"tokenizer has {len(tokens)} tokens, more than the shape's vocabulary {V}")
    tokens += [f"<pad_{i}>" for i in range(V - len(tokens))]
    types += [5] * (V - len(types))

    w = gguf.GGUFWriter(a.out, "llama")
    w.add_name(f"random-{a.shape}-{a.type}")
    w.add_block_count(L)
    w.add_context_length(a.context)
    w.add_embedding_length(E)
    w.add_feed_forward_length(F)
    w.add_head_count(Hq)
    w.add_head_count_kv(Hkv)
    w.add_rope_freq_base(s["base"])
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(V)
    w.add_rope_dimension_count(D)
    w.add_tokenizer_model(field("tokenizer.ggml.model"))
    w.add_tokenizer_pre(field("tokenizer.ggml.pre"))
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(field("tokenizer.ggml.merges"))
    for key, fn in [("tokenizer.ggml.bos_token_id", w.add_bos_token_id),
                    ("tokenizer.ggml.eos_token_id", w.add_eos_token_id),
                    ("tokenizer.ggml.padding_token_id", w.add_pad_token_id)]:
        if key in src.fields:
            fn(field(key))
    w.add_chat_template(field("tokenizer.chat_template"))

    def matrix(name, rows, cols, qtype=a.type):
        data, qt = random_blocks(rng, rows, cols, qtype)
        w.add_tensor(name, data, raw_shape=(rows, data.shape[1]), raw_dtype=qt)

    def norm(name):
        w.add_tensor(name, np.ones(E, dtype=np.float32))

    matrix("token_embd.weight", V, E)
    norm("output_norm.weight")
    if not s["tied"]:
        matrix("output.weight", V, E)
    for l in range(L):
        b = f"blk.{l}."
        norm(b + "attn_norm.weight")
        matrix(b + "attn_q.weight", Hq * D, E)
        matrix(b + "attn_k.weight", Hkv * D, E)
        matrix(b + "attn_v.weight", Hkv * D, E)
        matrix(b + "attn_output.weight", E, Hq * D)
        norm(b + "ffn_norm.weight")
        matrix(b + "ffn_gate.weight", F, E)
        matrix(b + "ffn_up.weight", F, E)
        matrix(b + "ffn_down.weight", E, F)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"{a.out}: {os.path.getsize(a.out) / 1e9:.2f} GB")


if __name__ == "__main__":
    main()
