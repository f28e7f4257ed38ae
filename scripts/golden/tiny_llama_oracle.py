#!/usr/bin/env python3
"""Independent GPU oracle: a tiny random Llama made, saved and run by transformers.

On a GPU machine with PyTorch and transformers (no network needed) this builds a seeded random
LlamaForCausalLM (D = 64, GQA 4/2, untied head), saves it with save_pretrained and loads it back,
writes the same weights as an F32 GGUF (the writer below: llama.cpp's Q/K row order, a byte-level
vocab just rich enough for kvzip to load), runs bench/gpu_oracle (kvzip's CPU and CUDA paths:
long prefill, a 20-token block on the split-K path, 4 decodes) and compares every position's
logits with PyTorch's fp32 forward (TF32 off). It shares no code with kvzip.

Tolerances: kvzip CPU is fp32 throughout (max |dlogit| <= 1e-3 of the largest logit, same argmax
everywhere); the CUDA path rounds weights and GEMM inputs to bf16, so 3e-2 and argmax agreement
on >= 95% of positions (near-ties may flip).

Usage:
  python3 scripts/golden/tiny_llama_oracle.py --oracle BIN --out DIR        (GPU machine: the check)
  python3 scripts/golden/tiny_llama_oracle.py --selftest-gguf FILE.gguf     (no torch needed: random
      weights from Python's own PRNG, to check on a CPU machine that kvzip loads what this writes)
Exit status 0 when every comparison passed, 1 when one failed, 77 when torch/transformers are missing.
"""
from __future__ import annotations

import argparse
import array
import os
import random
import struct
import subprocess
import sys

# The model: small, but with the head dim the CUDA kernels take and a real GQA group.
V, E, L, HQ, HKV, D, F = 384, 256, 2, 4, 2, 64, 512
ROPE_BASE, RMS_EPS, N_IDS, SEED = 10000.0, 1e-5, 300, 1234

# ---- GGUF v3 writer (only what this file needs: scalars, strings, arrays, F32 tensors) ----------
T_U32, T_I32, T_F32, T_BOOL, T_STR, T_ARR = 4, 5, 6, 7, 8, 9
ALIGN = 32


def _str(s: str) -> bytes:
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def _kv(key: str, typ: int, value) -> bytes:
    out = _str(key) + struct.pack("<I", typ)
    if typ == T_U32:
        return out + struct.pack("<I", value)
    if typ == T_F32:
        return out + struct.pack("<f", value)
    if typ == T_BOOL:
        return out + struct.pack("<B", 1 if value else 0)
    if typ == T_STR:
        return out + _str(value)
    elem, items = value  # arrays: (element type, list)
    out += struct.pack("<IQ", elem, len(items))
    if elem == T_STR:
        return out + b"".join(_str(x) for x in items)
    return out + b"".join(struct.pack("<i", x) for x in items)  # T_I32


def write_gguf(path: str, kvs: list[bytes], tensors: list[tuple[str, tuple[int, ...], bytes]]) -> None:
    """tensors: (name, shape in PyTorch order (rows, cols) or (n,), row-major float32 bytes)."""
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs)) + b"".join(kvs)
    infos, offset = b"", 0
    for name, shape, data in tensors:
        ne = list(reversed(shape))  # GGUF: ne[0] is the contiguous dimension
        infos += _str(name) + struct.pack("<I", len(ne)) + struct.pack(f"<{len(ne)}Q", *ne)
        infos += struct.pack("<IQ", 0, offset)  # type 0 = F32
        offset += (len(data) + ALIGN - 1) // ALIGN * ALIGN
    with open(path, "wb") as f:
        f.write(head + infos)
        f.write(b"\0" * (-f.tell() % ALIGN))
        for _, _, data in tensors:
            f.write(data)
            f.write(b"\0" * (-len(data) % ALIGN))


def gguf_row_order(rows: int, n_head: int) -> list[int]:
    """HF row feeding each GGUF row of a Q/K matrix: llama GGUFs store each head's rows as pairs
    (i, i + D/2) interleaved, for RoPE on adjacent elements."""
    d = rows // n_head
    return [h * d + (j % 2) * (d // 2) + j // 2 for h in range(n_head) for j in range(d)]


def permute_rows(data: bytes, rows: int, n_head: int) -> bytes:
    width = len(data) // rows
    return b"".join(data[r * width:(r + 1) * width] for r in gguf_row_order(rows, n_head))


def byte_chars() -> list[str]:
    """The byte-level BPE alphabet: printable bytes map to themselves, the rest to U+0100.."""
    keep = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    extra = [b for b in range(256) if b not in keep]
    return [chr(b) for b in keep] + [chr(256 + i) for i in range(len(extra))]


CHATML = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
          "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
          "Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
          "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
          "{{ '<|im_start|>assistant\n' }}{% endif %}")


def metadata() -> list[bytes]:
    space = chr(0x120)  # "Ġ": the space byte (0x20) in the byte-level alphabet
    tokens = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"] + byte_chars() + [space + "t"]
    types = [3, 3, 3] + [1] * (len(tokens) - 3)
    while len(tokens) < V:
        types.append(5)
        tokens.append(f"<pad_{len(tokens)}>")
    p = "llama."
    return [
        _kv("general.architecture", T_STR, "llama"),
        _kv("general.name", T_STR, "tiny-random-llama-oracle"),
        _kv(p + "block_count", T_U32, L),
        _kv(p + "context_length", T_U32, 1024),
        _kv(p + "embedding_length", T_U32, E),
        _kv(p + "feed_forward_length", T_U32, F),
        _kv(p + "attention.head_count", T_U32, HQ),
        _kv(p + "attention.head_count_kv", T_U32, HKV),
        _kv(p + "rope.freq_base", T_F32, ROPE_BASE),
        _kv(p + "rope.dimension_count", T_U32, D),
        _kv(p + "attention.layer_norm_rms_epsilon", T_F32, RMS_EPS),
        _kv(p + "vocab_size", T_U32, V),
        _kv("general.file_type", T_U32, 0),
        _kv("tokenizer.ggml.model", T_STR, "gpt2"),
        _kv("tokenizer.ggml.pre", T_STR, "smollm"),
        _kv("tokenizer.ggml.add_bos_token", T_BOOL, False),
        _kv("tokenizer.ggml.add_space_prefix", T_BOOL, False),
        _kv("tokenizer.ggml.tokens", T_ARR, (T_STR, tokens)),
        _kv("tokenizer.ggml.token_type", T_ARR, (T_I32, types)),
        _kv("tokenizer.ggml.merges", T_ARR, (T_STR, [space + " t"])),
        _kv("tokenizer.ggml.bos_token_id", T_U32, 1),
        _kv("tokenizer.ggml.eos_token_id", T_U32, 2),
        _kv("tokenizer.ggml.unknown_token_id", T_U32, 0),
        _kv("tokenizer.ggml.padding_token_id", T_U32, 2),
        _kv("tokenizer.chat_template", T_STR, CHATML),
    ]


def gguf_tensors(get) -> list[tuple[str, tuple[int, ...], bytes]]:
    """get(hf_name) -> (shape, float32 bytes). Names and Q/K order as llama GGUFs have them."""
    out = []

    def add(gname, hname, n_head=0):
        shape, data = get(hname)
        if n_head:
            data = permute_rows(data, shape[0], n_head)
        out.append((gname, shape, data))

    add("token_embd.weight", "model.embed_tokens.weight")
    for l in range(L):
        b, h = f"blk.{l}.", f"model.layers.{l}."
        add(b + "attn_norm.weight", h + "input_layernorm.weight")
        add(b + "attn_q.weight", h + "self_attn.q_proj.weight", HQ)
        add(b + "attn_k.weight", h + "self_attn.k_proj.weight", HKV)
        add(b + "attn_v.weight", h + "self_attn.v_proj.weight")
        add(b + "attn_output.weight", h + "self_attn.o_proj.weight")
        add(b + "ffn_norm.weight", h + "post_attention_layernorm.weight")
        add(b + "ffn_gate.weight", h + "mlp.gate_proj.weight")
        add(b + "ffn_up.weight", h + "mlp.up_proj.weight")
        add(b + "ffn_down.weight", h + "mlp.down_proj.weight")
    add("output_norm.weight", "model.norm.weight")
    add("output.weight", "lm_head.weight")
    return out


HF_SHAPES = {"model.embed_tokens.weight": (V, E), "model.norm.weight": (E,), "lm_head.weight": (V, E)}
for _l in range(L):
    _h = f"model.layers.{_l}."
    HF_SHAPES.update({
        _h + "input_layernorm.weight": (E,), _h + "post_attention_layernorm.weight": (E,),
        _h + "self_attn.q_proj.weight": (HQ * D, E), _h + "self_attn.k_proj.weight": (HKV * D, E),
        _h + "self_attn.v_proj.weight": (HKV * D, E), _h + "self_attn.o_proj.weight": (E, HQ * D),
        _h + "mlp.gate_proj.weight": (F, E), _h + "mlp.up_proj.weight": (F, E),
        _h + "mlp.down_proj.weight": (E, F)})


def selftest_gguf(path: str) -> int:
    rng = random.Random(SEED)

    def get(name):
        shape = HF_SHAPES[name]
        n = 1
        for s in shape:
            n *= s
        centre = 1.0 if len(shape) == 1 else 0.0
        vals = array.array("f", (centre + rng.uniform(-0.1, 0.1) for _ in range(n)))
        return shape, vals.tobytes()

    write_gguf(path, metadata(), gguf_tensors(get))
    print(f"wrote {path}: {os.path.getsize(path)} bytes")
    return 0


def compare(name: str, got, ref, tol: float, min_agree: float) -> bool:
    scale = ref.abs().max().item()
    err = (got - ref).abs().max().item() / scale
    agree = (got.argmax(-1) == ref.argmax(-1)).float().mean().item()
    ok = err <= tol and agree >= min_agree
    print(f"{name:<12} max|dlogit|/max|logit| = {err:.2e} (<= {tol:.0e})  argmax agree "
          f"{agree * 100:.1f}% (>= {min_agree * 100:.0f}%)  {'PASS' if ok else 'FAIL'}")
    return ok


def oracle(binary: str, out: str) -> int:
    try:
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM
    except ImportError as e:
        print(f"SKIPPED: {e} (scripts/gpu-check.sh runs this where torch and transformers are installed)")
        return 77
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(SEED)
    cfg = LlamaConfig(vocab_size=V, hidden_size=E, intermediate_size=F, num_hidden_layers=L,
                      num_attention_heads=HQ, num_key_value_heads=HKV, head_dim=D,
                      max_position_embeddings=1024, rms_norm_eps=RMS_EPS, rope_theta=ROPE_BASE,
                      tie_word_embeddings=False, initializer_range=0.08)
    model = LlamaForCausalLM(cfg).float()
    with torch.no_grad():  # norms away from 1, so a norm applied wrongly shows
        for n, p in model.named_parameters():
            if n.endswith("norm.weight"):
                p.uniform_(0.7, 1.3)
    hf_dir = os.path.join(out, "tiny_llama_hf")
    model.save_pretrained(hf_dir)
    model = LlamaForCausalLM.from_pretrained(hf_dir, torch_dtype=torch.float32,
                                             attn_implementation="eager").eval()
    state = model.state_dict()

    def get(name):
        t = state[name].detach().to(torch.float32).contiguous().cpu()
        return tuple(t.shape), t.numpy().tobytes()

    gguf = os.path.join(out, "tiny_llama.gguf")
    write_gguf(gguf, metadata(), gguf_tensors(get))
    ids = random.Random(SEED).choices(range(3, V), k=N_IDS)  # no special tokens
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    with torch.no_grad():
        ref = model.to(dev)(torch.tensor([ids], device=dev)).logits[0].float().cpu()
    run = subprocess.run([binary, gguf, out] + [str(i) for i in ids], capture_output=True, text=True)
    print(run.stdout + run.stderr, end="")
    if run.returncode != 0:
        print(f"FAIL: gpu_oracle exited {run.returncode}")
        return 1
    ok = True
    for name, tol, agree in (("kvzip_cpu", 1e-3, 1.0), ("kvzip_cuda", 3e-2, 0.95)):
        path = os.path.join(out, name + ".f32")
        if not os.path.exists(path):
            print(f"{name:<12} SKIPPED: not written (no device for gpu_oracle)")
            continue
        got = torch.frombuffer(bytearray(open(path, "rb").read()), dtype=torch.float32)
        ok &= compare(name, got.reshape(len(ids), V), ref, tol, agree)
    print(f"oracle: torch {torch.__version__} on {dev}, {len(ids)} positions "
          f"(prefill {len(ids) - 24}, split-K block 20, 4 decodes)")
    return 0 if ok else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--oracle", help="path of the gpu_oracle binary")
    ap.add_argument("--out", default="out/oracle")
    ap.add_argument("--selftest-gguf", help="write a random-weight GGUF here (no torch) and stop")
    a = ap.parse_args()
    if a.selftest_gguf:
        return selftest_gguf(a.selftest_gguf)
    if not a.oracle:
        ap.error("--oracle BIN is required")
    os.makedirs(a.out, exist_ok=True)
    return oracle(a.oracle, a.out)


if __name__ == "__main__":
    sys.exit(main())
