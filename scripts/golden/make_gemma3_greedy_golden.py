#!/usr/bin/env python3
"""Greedy continuations of Gemma 3 270M from an fp32 reference that shares no code with kvzip.

Checks that kvzip's forward pass on the real Gemma 3 270M GGUF chooses the same greedy tokens as
transformers' Gemma3ForCausalLM run in float32 on the same weights, on the three prompts of
bench/llamacpp/compare_llamacpp.py, and writes the reference's token ids to
tests/golden/greedy_gemma3.json (the truth for the [realmodel] test in
tests/model/test_gemma3_greedy.cc).

The reference: every tensor of the GGUF dequantized by `gguf.quants.dequantize` (exact values),
renamed to transformers' names, norms stored by llama.cpp's converter as 1 + w given back as w,
the configuration built from the GGUF's metadata plus what llama.cpp fixes for Gemma 3 (local RoPE
base 10000, query scale 1/sqrt(head_dim), five sliding layers for each global one), tied
embeddings; eager attention, no KV cache (every step recomputes the whole sequence), BOS first.
It runs twice, in float32 and in float64: a step where the two choose differently, or where the
top-1/top-2 gap is below --tie (default 1e-3 nats), is reported as a tie that no fp32
implementation can be expected to resolve the same way; the golden stores the float32 choice and
every step's gap.

  python scripts/golden/make_gemma3_greedy_golden.py [--model GGUF] [--out JSON] [-n 32]
      [--kvzip build/kvzip]           # also run `kvzip generate --matmul exact|fast` and compare
      [--llama-bin DIR [--llama-f32-model F32.gguf]]   # also llama.cpp's llama-simple (greedy)

Needs torch, transformers 5 (Gemma3ForCausalLM, and its GGUF tokenizer conversion for the ids),
gguf, numpy. About 7 minutes on two loaded cores, most of it the float64 run.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys

import numpy as np
import torch
from gguf import GGUFReader
from gguf.quants import dequantize
from transformers import AutoTokenizer, Gemma3ForCausalLM, Gemma3TextConfig

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DEFAULT_MODEL = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")),
                             "kvzip", "models", "gemma-3-270m-q4_k_m.gguf")
PROMPTS = [  # bench/llamacpp/compare_llamacpp.py's
    "The capital of France is",
    "The Normans were the people who",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
]
NAMES = {  # GGUF (llama.cpp's Gemma 3 converter) -> transformers, per layer
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
    "attn_norm": "input_layernorm", "post_attention_norm": "post_attention_layernorm",
    "ffn_norm": "pre_feedforward_layernorm", "post_ffw_norm": "post_feedforward_layernorm",
    "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
}


def field(r: GGUFReader, key: str):
    return r.fields[key].contents()


def load_reference(path: str) -> tuple[Gemma3TextConfig, dict[str, torch.Tensor]]:
    r = GGUFReader(path)
    if field(r, "general.architecture") != "gemma3":
        sys.exit(f"{path}: not a gemma3 GGUF")
    a = "gemma3."
    layers = int(field(r, a + "block_count"))
    cfg = Gemma3TextConfig(
        vocab_size=len(r.fields["tokenizer.ggml.tokens"].data), hidden_size=int(field(r, a + "embedding_length")),
        intermediate_size=int(field(r, a + "feed_forward_length")), num_hidden_layers=layers,
        num_attention_heads=int(field(r, a + "attention.head_count")),
        num_key_value_heads=int(field(r, a + "attention.head_count_kv")),
        head_dim=int(field(r, a + "attention.key_length")),
        sliding_window=int(field(r, a + "attention.sliding_window")),
        max_position_embeddings=int(field(r, a + "context_length")),
        rms_norm_eps=float(field(r, a + "attention.layer_norm_rms_epsilon")),
        query_pre_attn_scalar=int(field(r, a + "attention.key_length")),
        tie_word_embeddings=True, hidden_activation="gelu_pytorch_tanh",
        layer_types=["full_attention" if (l + 1) % 6 == 0 else "sliding_attention" for l in range(layers)],
        rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": float(field(r, a + "rope.freq_base"))},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}},
        bos_token_id=int(field(r, "tokenizer.ggml.bos_token_id")),
        eos_token_id=int(field(r, "tokenizer.ggml.eos_token_id")),
        pad_token_id=int(field(r, "tokenizer.ggml.padding_token_id")))
    sd: dict[str, torch.Tensor] = {}
    for t in r.tensors:
        w = np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float32)
        w = w.reshape([int(x) for x in reversed(t.shape)])  # ggml lists dims innermost first
        norm = t.name.endswith("norm.weight")
        if norm:
            w = w.astype(np.float64) - 1.0  # kept in float64: exact, and 1 + w gives the stored value back
        if t.name == "token_embd.weight":
            name = "model.embed_tokens.weight"
        elif t.name == "output_norm.weight":
            name = "model.norm.weight"
        else:
            m = re.fullmatch(r"blk\.(\d+)\.(\w+)\.weight", t.name)
            if not m or m.group(2) not in NAMES:
                sys.exit(f"unexpected tensor {t.name}")
            name = f"model.layers.{m.group(1)}.{NAMES[m.group(2)]}.weight"
        sd[name] = torch.from_numpy(np.ascontiguousarray(w))
    return cfg, sd


def build(cfg: Gemma3TextConfig, sd: dict[str, torch.Tensor], dtype: torch.dtype) -> Gemma3ForCausalLM:
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)  # the initial weights are all overwritten; only the buffers stay
    model = Gemma3ForCausalLM(cfg).to(dtype)
    missing, unexpected = model.load_state_dict({k: v.to(dtype) for k, v in sd.items()}, strict=False)
    missing = [k for k in missing if k != "lm_head.weight"]  # tied to the embeddings
    if missing or unexpected:
        sys.exit(f"state dict mismatch: missing {missing[:4]}, unexpected {unexpected[:4]}")
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    return model.eval()


@torch.no_grad()
def last_logits(model: Gemma3ForCausalLM, ids: list[int]) -> np.ndarray:
    out = model(input_ids=torch.tensor([ids]), use_cache=False, logits_to_keep=1)
    return out.logits[0, -1].double().numpy()


def top2(lg: np.ndarray) -> tuple[int, int, float]:
    i = np.argpartition(-lg, 2)[:2]
    a, b = (int(i[0]), int(i[1])) if lg[i[0]] >= lg[i[1]] else (int(i[1]), int(i[0]))
    return a, b, float(lg[a] - lg[b])


@torch.no_grad()
def greedy(model: Gemma3ForCausalLM, prompt: list[int], n: int) -> list[tuple[int, int, float]]:
    ids, steps = list(prompt), []
    for _ in range(n):
        a, b, gap = top2(last_logits(model, ids))
        steps.append((a, b, gap))
        ids.append(a)
    return steps


def run(cmd: list[str]) -> str:
    r = subprocess.run(cmd, capture_output=True)
    if r.returncode != 0:
        sys.exit(f"failed ({r.returncode}): {' '.join(cmd[:4])} ...\n{r.stderr.decode(errors='replace')[-2000:]}")
    return r.stdout.decode("utf-8", errors="replace")


def parting_token(tok, ids: list[int], text: str) -> int | None:
    """Index of the first reference token whose text the other continuation does not carry on with."""
    for i in range(len(ids)):
        if not text.startswith(tok.decode(ids[:i + 1])):
            return i
    return None


def write_golden(path: str, doc: dict) -> None:
    """JSON with one line per field of a case (ids, second choices, gaps: one list each)."""
    def dumps(v) -> str:
        return json.dumps(v, ensure_ascii=False)
    lines = [f' {dumps(k)}: {dumps(v)},' for k, v in doc.items() if k != "cases"]
    cases = []
    for c in doc["cases"]:
        cases.append("  {\n" + ",\n".join(f"   {dumps(k)}: {dumps(v)}" for k, v in c.items()) + "\n  }")
    with open(path, "w", encoding="utf-8") as f:
        f.write("{\n" + "\n".join(lines) + '\n "cases": [\n' + ",\n".join(cases) + "\n ]\n}\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=os.environ.get("KVZIP_GEMMA_MODEL", DEFAULT_MODEL))
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "golden", "greedy_gemma3.json"))
    ap.add_argument("-n", type=int, default=32)
    ap.add_argument("--tie", type=float, default=1e-3, help="top-1/top-2 gap (nats) below which a step is a tie")
    ap.add_argument("--kvzip", help="kvzip binary to compare (generate --matmul exact and fast)")
    ap.add_argument("--llama-bin", help="llama.cpp bin folder: compare llama-simple's greedy text on --model")
    ap.add_argument("--llama-f32-model", help="also llama-simple on this GGUF (llama-quantize --allow-requantize M F32)")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True)

    tok = AutoTokenizer.from_pretrained(os.path.dirname(args.model), gguf_file=os.path.basename(args.model))
    cfg, sd = load_reference(args.model)
    cases = []
    for dtype in (torch.float32, torch.float64):
        model = build(cfg, sd, dtype)
        for i, p in enumerate(PROMPTS):
            ids = [cfg.bos_token_id] + tok(p, add_special_tokens=False)["input_ids"]
            steps = greedy(model, ids, args.n)
            if dtype == torch.float32:
                cases.append({"prompt": p, "prompt_ids": ids, "ids": [s[0] for s in steps],
                              "second": [s[1] for s in steps], "gap": [round(s[2], 5) for s in steps]})
            else:
                cases[i]["f64_ids"] = [s[0] for s in steps]
                cases[i]["f64_gap"] = [round(s[2], 5) for s in steps]
        del model

    ok = True
    for c in cases:
        same = c["ids"] == c["f64_ids"]
        low = [j for j, g in enumerate(c["gap"]) if g < args.tie]
        ok &= same and not low
        c["text"] = tok.decode(c["ids"])
        print(f"{c['prompt'][:32]!r}: {c['text']!r}\n  float32 {'==' if same else '!='} float64; "
              f"smallest gap {min(c['gap']):.4f} nats at token {int(np.argmin(c['gap']))}"
              + (f"; TIES (< {args.tie}) at {low}" if low else ""), flush=True)

    if args.kvzip:
        for matmul in ("exact", "fast"):
            for c in cases:
                k = run([args.kvzip, "generate", "-m", args.model, "-p", c["prompt"], "-n", str(args.n), "--temp", "0",
                         "-t", str(args.threads), "--matmul", matmul])
                k = k[len(c["prompt"]):]
                i = parting_token(tok, c["ids"], k)
                print(f"kvzip --matmul {matmul} {c['prompt'][:24]!r}: "
                      + ("equal" if i is None else f"parts at token {i} (reference gap there {c['gap'][i]:.4f} nats): {k!r}"),
                      flush=True)
                if matmul == "exact":
                    ok &= i is None
    if args.llama_bin:
        models = [args.model] + ([args.llama_f32_model] if args.llama_f32_model else [])
        for model in models:
            for c in cases:
                out = run([os.path.join(args.llama_bin, "llama-simple"), "-m", model, "-n", str(args.n), c["prompt"]])
                head = "<bos>" + c["prompt"]
                if not out.startswith(head):
                    sys.exit(f"llama-simple printed an unexpected prompt: {out[:80]!r}")
                out = out[len(head):]
                i = parting_token(tok, c["ids"], out)
                print(f"llama-simple {os.path.basename(model)} {c['prompt'][:24]!r}: "
                      + ("equal" if i is None else f"parts at token {i} (reference gap there {c['gap'][i]:.4f} nats, "
                                                   f"its second choice {c['second'][i]}): {out!r}"), flush=True)

    write_golden(args.out, {"model": os.path.basename(args.model), "n": args.n,
                            "reference": "transformers Gemma3ForCausalLM, float32, GGUF weights dequantized by gguf.quants",
                            "cases": cases})
    print(f"wrote {args.out}; {'all steps clear' if ok else 'NOT all clear'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
