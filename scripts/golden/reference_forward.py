#!/usr/bin/env python3
"""Independent reference forward pass for SmolLM2-135M (llama architecture) read from a GGUF file.

Python: the pyenv `python3` (3.11) with numpy and gguf (gguf-py) only; shares no code with kvzip's C++.
Precision: weights are dequantized once with gguf.quants.dequantize (their exact float32 values), then
every activation, matmul and softmax runs in float64, so this is an fp32-weight, float64-accumulate oracle.
Layout: GGUF Q/K rows are un-permuted to Hugging Face order (GGUF row pair (2i, 2i+1) of a head holds
HF rows (i, i+D/2)) and RoPE is HF's half-split rotate_half; the self-check (run this file) also computes
the interleaved-RoPE-on-GGUF-rows formulation, which must agree, and checks a greedy " Paris".
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

DEFAULT_MODEL = "/root/.cache/kvzip/models/SmolLM2-135M-Instruct.Q4_1.gguf"
FRANCE_IDS = [504, 3575, 282, 4649, 314]  # "The capital of France is"


@dataclasses.dataclass
class Config:
    n_layer: int  # L
    n_embd: int  # E
    n_head: int  # Hq
    n_head_kv: int  # Hkv
    head_dim: int  # D
    n_ff: int  # F
    n_vocab: int  # V
    rope_base: float
    rms_eps: float


@dataclasses.dataclass
class Layer:
    attn_norm: np.ndarray  # (E,)
    wq: np.ndarray  # (Hq*D, E)  HF row order
    wk: np.ndarray  # (Hkv*D, E) HF row order
    wq_gguf: np.ndarray  # (Hq*D, E)  GGUF (permuted) row order, for the self-check only
    wk_gguf: np.ndarray  # (Hkv*D, E) GGUF (permuted) row order
    wv: np.ndarray  # (Hkv*D, E)
    wo: np.ndarray  # (E, Hq*D)
    ffn_norm: np.ndarray  # (E,)
    w_gate: np.ndarray  # (F, E)
    w_up: np.ndarray  # (F, E)
    w_down: np.ndarray  # (E, F)


@dataclasses.dataclass
class Model:
    config: Config
    token_embd: np.ndarray  # (V, E); also the tied LM head
    output_norm: np.ndarray  # (E,)
    layers: list[Layer]
    tokens: list[str]  # byte-level BPE token strings, for decoding only


def _field_value(reader: GGUFReader, key: str):
    field = reader.fields.get(key)
    if field is None:
        raise KeyError(f"GGUF metadata key {key!r} is missing")
    return field.contents()


def _tensor(reader_tensors: dict, name: str) -> np.ndarray:
    """Dequantizes one tensor to float32 with numpy shape (ne[1], ne[0]) = (rows, cols)."""
    t = reader_tensors[name]
    data = dequantize(t.data, t.tensor_type)
    shape = tuple(int(x) for x in reversed(t.shape))  # GGUF ne is fastest-first; numpy is slowest-first
    return np.asarray(data, dtype=np.float32).reshape(shape)


def unpermute_qk(w_gguf: np.ndarray, n_head: int) -> np.ndarray:
    """GGUF row h*D + 2i + p holds HF row h*D + p*D/2 + i; returns the HF row order. (n_head*D, E)"""
    rows, cols = w_gguf.shape
    d = rows // n_head
    return w_gguf.reshape(n_head, d // 2, 2, cols).transpose(0, 2, 1, 3).reshape(rows, cols)


def load_model(path: str = DEFAULT_MODEL) -> Model:
    reader = GGUFReader(path)
    arch = _field_value(reader, "general.architecture")
    if arch != "llama":
        raise ValueError(f"{path}: general.architecture is {arch!r}, expected 'llama'")
    n_embd = int(_field_value(reader, "llama.embedding_length"))
    n_head = int(_field_value(reader, "llama.attention.head_count"))
    cfg = Config(
        n_layer=int(_field_value(reader, "llama.block_count")),
        n_embd=n_embd,
        n_head=n_head,
        n_head_kv=int(_field_value(reader, "llama.attention.head_count_kv")),
        head_dim=int(_field_value(reader, "llama.rope.dimension_count")),
        n_ff=int(_field_value(reader, "llama.feed_forward_length")),
        n_vocab=len(reader.fields["tokenizer.ggml.tokens"].data),
        rope_base=float(_field_value(reader, "llama.rope.freq_base")),
        # The file stores 1e-5 as float32 (9.99999975e-06); HF's config says 1e-5. Use HF's value.
        rms_eps=1e-5,
    )
    assert cfg.head_dim * cfg.n_head == cfg.n_embd, "head_dim * n_head must equal n_embd"
    f32_eps = float(_field_value(reader, "llama.attention.layer_norm_rms_epsilon"))
    assert abs(f32_eps - 1e-5) < 1e-11, f"unexpected rms eps {f32_eps}"

    tensors = {t.name: t for t in reader.tensors}
    if "output.weight" in tensors:
        raise ValueError("this reference assumes tied embeddings (no output.weight)")
    f64 = lambda name: _tensor(tensors, name).astype(np.float64)  # noqa: E731
    layers = []
    for i in range(cfg.n_layer):
        p = f"blk.{i}."
        wq_g = f64(p + "attn_q.weight")
        wk_g = f64(p + "attn_k.weight")
        layers.append(Layer(
            attn_norm=f64(p + "attn_norm.weight"),
            wq=unpermute_qk(wq_g, cfg.n_head), wk=unpermute_qk(wk_g, cfg.n_head_kv),
            wq_gguf=wq_g, wk_gguf=wk_g,
            wv=f64(p + "attn_v.weight"), wo=f64(p + "attn_output.weight"),
            ffn_norm=f64(p + "ffn_norm.weight"),
            w_gate=f64(p + "ffn_gate.weight"), w_up=f64(p + "ffn_up.weight"),
            w_down=f64(p + "ffn_down.weight"),
        ))
    tokens = [str(bytes(reader.fields["tokenizer.ggml.tokens"].parts[j]), "utf-8")
              for j in reader.fields["tokenizer.ggml.tokens"].data]
    return Model(cfg, f64("token_embd.weight"), f64("output_norm.weight"), layers, tokens)


def rms_norm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    """x: (T, E), w: (E,) -> (T, E)"""
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope_angles(positions: np.ndarray, head_dim: int, base: float) -> np.ndarray:
    """(T,) -> (T, D/2) angles pos * base^(-2i/D)."""
    inv_freq = base ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    return positions.astype(np.float64)[:, None] * inv_freq[None, :]


def rope_half_split(x: np.ndarray, ang: np.ndarray) -> np.ndarray:
    """HF rotate_half pairing (i, i+D/2). x: (T, H, D), ang: (T, D/2)."""
    half = x.shape[-1] // 2
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    x1, x2 = x[..., :half], x[..., half:]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def rope_interleaved(x: np.ndarray, ang: np.ndarray) -> np.ndarray:
    """ggml NORM pairing (2i, 2i+1), valid on GGUF-permuted Q/K rows. x: (T, H, D), ang: (T, D/2)."""
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    x0, x1 = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = x0 * cos - x1 * sin
    out[..., 1::2] = x0 * sin + x1 * cos
    return out


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, group: int) -> np.ndarray:
    """Causal GQA. q: (T, Hq, D), k/v: (T, Hkv, D) -> (T, Hq*D); query head h reads KV head h // group."""
    t, n_head, d = q.shape
    k = np.repeat(k, group, axis=1)  # (T, Hq, D)
    v = np.repeat(v, group, axis=1)
    scores = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(d)  # (Hq, T, T)
    scores = scores + np.triu(np.full((t, t), -np.inf), k=1)[None]
    scores = scores - scores.max(axis=-1, keepdims=True)
    probs = np.exp(scores)
    probs /= probs.sum(axis=-1, keepdims=True)
    return np.einsum("hqk,khd->qhd", probs, v).reshape(t, n_head * d)


def forward(model: Model, ids: list[int], logit_positions=None, rope: str = "half") -> np.ndarray:
    """Logits (len(logit_positions), V) in float64; positions default to all. rope: 'half' | 'interleaved'."""
    cfg = model.config
    # (HF rows?, pairing). 'neox_on_gguf' is the known-wrong mix, kept as the self-check's negative control.
    modes = {"half": (True, rope_half_split), "interleaved": (False, rope_interleaved),
             "neox_on_gguf": (False, rope_half_split)}
    if rope not in modes:
        raise ValueError(f"rope must be one of {sorted(modes)}, got {rope!r}")
    hf_rows, rope_fn = modes[rope]
    t = len(ids)
    positions = np.arange(t)
    ang = rope_angles(positions, cfg.head_dim, cfg.rope_base)
    x = model.token_embd[np.asarray(ids)]  # (T, E)
    for layer in model.layers:
        h = rms_norm(x, layer.attn_norm, cfg.rms_eps)
        wq, wk = (layer.wq, layer.wk) if hf_rows else (layer.wq_gguf, layer.wk_gguf)
        q = (h @ wq.T).reshape(t, cfg.n_head, cfg.head_dim)
        k = (h @ wk.T).reshape(t, cfg.n_head_kv, cfg.head_dim)
        q, k = rope_fn(q, ang), rope_fn(k, ang)
        v = (h @ layer.wv.T).reshape(t, cfg.n_head_kv, cfg.head_dim)
        x = x + attention(q, k, v, cfg.n_head // cfg.n_head_kv) @ layer.wo.T
        h = rms_norm(x, layer.ffn_norm, cfg.rms_eps)
        gate = h @ layer.w_gate.T  # (T, F)
        x = x + ((gate / (1.0 + np.exp(-gate))) * (h @ layer.w_up.T)) @ layer.w_down.T
    sel = positions if logit_positions is None else np.asarray(logit_positions)
    return rms_norm(x[sel], model.output_norm, cfg.rms_eps) @ model.token_embd.T


def greedy(model: Model, ids: list[int], n_new: int) -> list[int]:
    """Greedy continuation; recomputes the whole prefix per step (short prompts only)."""
    out = list(ids)
    for _ in range(n_new):
        out.append(int(np.argmax(forward(model, out, [len(out) - 1])[0])))
    return out[len(ids):]


def _byte_decoder() -> dict[str, int]:
    """Inverse of the GPT-2 byte-level alphabet: printable bytes map to themselves, the rest to U+0100+n."""
    printable = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[chr(b)] = b
        else:
            table[chr(0x100 + extra)] = b
            extra += 1
    return table


def detokenize(model: Model, ids: list[int]) -> str:
    dec = _byte_decoder()
    raw = bytearray()
    for i in ids:
        tok = model.tokens[i]
        if all(c in dec for c in tok):
            raw.extend(dec[c] for c in tok)
        else:  # special tokens such as <|im_end|> are stored verbatim
            raw.extend(tok.encode("utf-8"))
    return raw.decode("utf-8", errors="replace")


def _check_q4_1_block(path: str, model: Model) -> float:
    """Hand-decodes the first Q4_1 block of blk.0.attn_q per the ggml layout and compares with gguf-py."""
    t = next(x for x in GGUFReader(path).tensors if x.name == "blk.0.attn_q.weight")
    blk = np.asarray(t.data[0, :20], dtype=np.uint8)
    d, m = blk[0:2].view(np.float16)[0], blk[2:4].view(np.float16)[0]
    qs = blk[4:20]
    mine = np.concatenate([(qs & 0x0F) * np.float32(d) + np.float32(m),
                           (qs >> 4) * np.float32(d) + np.float32(m)]).astype(np.float32)
    return float(np.max(np.abs(mine - model.layers[0].wq_gguf[0, :32])))


def self_check(path: str) -> int:
    model = load_model(path)
    print(f"config: {model.config}")
    q_err = _check_q4_1_block(path, model)
    print(f"Q4_1 hand-decoded block vs gguf.quants: max |diff| = {q_err:.3g}")
    rng = np.random.default_rng(0)
    ids = FRANCE_IDS + [int(x) for x in rng.integers(17, model.config.n_vocab, 40)]
    a = forward(model, ids, rope="half")
    b = forward(model, ids, rope="interleaved")
    rope_err = float(np.max(np.abs(a - b)))
    print(f"half-split (HF rows) vs interleaved (GGUF rows), {len(ids)} tokens: max |dlogit| = {rope_err:.3g}")
    wrong_err = float(np.max(np.abs(a - forward(model, ids, rope="neox_on_gguf"))))
    print(f"negative control, half-split on GGUF rows: max |dlogit| = {wrong_err:.3g} (must be large)")
    gen = greedy(model, FRANCE_IDS, 8)
    text = detokenize(model, gen)
    print(f"greedy after 'The capital of France is': {gen} -> {text!r}")
    ok = q_err == 0.0 and rope_err < 1e-5 and wrong_err > 1e-2 and " Paris" in text
    print("SELF-CHECK", "PASSED" if ok else "FAILED")
    return 0 if ok else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=os.environ.get("KVZIP_MODEL", DEFAULT_MODEL))
    ap.add_argument("--ids", help="comma-separated token ids: print greedy continuation and top-5")
    ap.add_argument("--n", type=int, default=8, help="tokens to generate with --ids")
    args = ap.parse_args()
    if not args.ids:
        return self_check(args.model)
    model = load_model(args.model)
    ids = [int(x) for x in args.ids.split(",")]
    logits = forward(model, ids, [len(ids) - 1])[0]
    top = np.argsort(-logits)[:5]
    print("top-5 next:", [(int(i), model.tokens[i], round(float(logits[i]), 4)) for i in top])
    gen = greedy(model, ids, args.n)
    print("greedy:", gen, repr(detokenize(model, gen)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
