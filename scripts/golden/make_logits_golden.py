#!/usr/bin/env python3
"""Writes tests/golden/logits_smollm2.bin (+ .txt): reference logits for SmolLM2-135M-Instruct Q4_1.

Python: the pyenv `python3` (3.11) with numpy, gguf and tokenizers (Hugging Face). Logits come from
reference_forward.py (float64 compute, stored as float32). Token ids come from a Hugging Face
`tokenizers` BPE built from the GGUF's own vocab and merges, never from kvzip's C++ tokenizer, and are
checked against known id vectors first. Binary layout: scripts/golden/README.md. Deterministic: the
same model file gives byte-identical output.
"""
from __future__ import annotations

import argparse
import json
import os
import struct
import sys

import numpy as np
from gguf import GGUFReader
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference_forward as ref  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SQUAD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "normans.json")
MAGIC = b"KVZLOGIT"
VERSION = 1

# Third-party id vectors (published for SmolLM2's tokenizer, not made by kvzip); the tokenizer
# must reproduce them exactly.
KNOWN_IDS = {
    "Hello, we can use": [19556, 28, 392, 416, 722],
    "The capital of France is": ref.FRANCE_IDS,
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face":
        [2683, 359, 253, 5356, 5646, 11173, 3365, 3511, 308, 34519, 28, 7018, 411, 407, 19712, 8182],
    "\n": [198],
}

CHATML = ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
          "<|im_start|>user\nWhich river flows through Paris, and how long is it?<|im_end|>\n"
          "<|im_start|>assistant\n")
CODE = ("def area(r):\n    return 3.14159 * r ** 2\n\n"
        "print(area(12), 2024 - 1066, 0x1F)  # 452.389\n")


def build_tokenizer(gguf_path: str) -> Tokenizer:
    """Byte-level BPE from tokenizer.ggml.{tokens,merges}, SmolLM pre-tokenizer, control tokens as specials."""
    reader = GGUFReader(gguf_path)
    f = reader.fields
    tokens = [str(bytes(f["tokenizer.ggml.tokens"].parts[j]), "utf-8") for j in f["tokenizer.ggml.tokens"].data]
    types = [int(f["tokenizer.ggml.token_type"].parts[j][0]) for j in f["tokenizer.ggml.token_type"].data]
    merges = []
    for j in f["tokenizer.ggml.merges"].data:
        m = str(bytes(f["tokenizer.ggml.merges"].parts[j]), "utf-8")
        cut = m.find(" ", 1)  # llama.cpp splits at the first space after index 0
        merges.append((m[:cut], m[cut + 1:]))
    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t, ty in zip(tokens, types) if ty == 3])  # 3 = control
    return tok


def encode(tok: Tokenizer, text: str) -> list[int]:
    return tok.encode(text, add_special_tokens=False).ids


def squad_passage(tok: Tokenizer, target: int = 300) -> str:
    """The 'Normans' paragraph closest to `target` tokens (deterministic)."""
    with open(SQUAD, encoding="utf-8") as fh:
        paras = [p["context"] for p in json.load(fh)["data"][0]["paragraphs"]]
    return min(paras, key=lambda p: (abs(len(encode(tok, p)) - target), p))


def make_cases(tok: Tokenizer) -> list[dict]:
    """Each case: name, text, ids, stored positions. 9 stored positions keep the file at ~1.8 MB."""
    squad = squad_passage(tok)
    cases = [
        {"name": "france", "text": "The capital of France is"},
        {"name": "chatml", "text": CHATML},
        {"name": "squad_normans", "text": squad},
        {"name": "digits_code", "text": CODE},
    ]
    for c in cases:
        c["ids"] = encode(tok, c["text"])
        n = len(c["ids"])
        c["positions"] = {"france": list(range(n)), "squad_normans": [n - 2, n - 1]}.get(c["name"], [n - 1])
    return cases


def write_bin(path: str, cases: list[dict], logits: list[np.ndarray], n_vocab: int) -> None:
    out = bytearray(MAGIC + struct.pack("<II", VERSION, len(cases)))
    for c, lg in zip(cases, logits):
        out += struct.pack("<I", len(c["ids"])) + np.asarray(c["ids"], dtype="<i4").tobytes()
        out += struct.pack("<I", len(c["positions"]))
        for pos, row in zip(c["positions"], lg):
            assert row.shape == (n_vocab,)
            out += struct.pack("<I", pos) + row.astype("<f4").tobytes()
    with open(path + ".tmp", "wb") as fh:
        fh.write(out)
    os.replace(path + ".tmp", path)


def write_txt(path: str, model: ref.Model, tok: Tokenizer, cases, logits, greedy_ids) -> None:
    lines = ["# Companion of logits_smollm2.bin, written by scripts/golden/make_logits_golden.py.",
             "# Model: SmolLM2-135M-Instruct.Q4_1.gguf; reference: scripts/golden/reference_forward.py (float64).",
             f"france.greedy8 {' '.join(map(str, greedy_ids))}",
             f"france.greedy8_text {json.dumps(tok.decode(greedy_ids, skip_special_tokens=False))}"]
    for c, lg in zip(cases, logits):
        lines.append(f"case {c['name']} n_tokens={len(c['ids'])} positions={','.join(map(str, c['positions']))}")
        lines.append(f"  text {json.dumps(c['text'])}")
        lines.append(f"  ids {' '.join(map(str, c['ids']))}")
        for pos, row in zip(c["positions"], lg):
            top = np.argsort(-row, kind="stable")[:5]
            lines.append(f"  pos {pos} top5 " + " ".join(f"{int(i)}:{row[i]:.4f}" for i in top))
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("\n".join(lines) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=os.environ.get("KVZIP_MODEL", ref.DEFAULT_MODEL))
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "golden", "logits_smollm2.bin"))
    args = ap.parse_args()

    tok = build_tokenizer(args.model)
    for text, want in KNOWN_IDS.items():
        got = encode(tok, text)
        if got != want:
            raise SystemExit(f"tokenizer check failed for {text!r}: got {got}, expected {want}")
    cases = make_cases(tok)
    model = ref.load_model(args.model)
    logits = [ref.forward(model, c["ids"], c["positions"]).astype(np.float32) for c in cases]
    greedy_ids = ref.greedy(model, ref.FRANCE_IDS, 8)
    text = tok.decode(greedy_ids)
    if " Paris" not in text:
        raise SystemExit(f"greedy continuation {greedy_ids} = {text!r} lacks ' Paris'")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    write_bin(args.out, cases, logits, model.config.n_vocab)
    write_txt(os.path.splitext(args.out)[0] + ".txt", model, tok, cases, logits, greedy_ids)
    for c in cases:
        print(f"{c['name']}: {len(c['ids'])} tokens, positions {c['positions']}")
    print(f"greedy8 {greedy_ids} {text!r}; wrote {args.out} ({os.path.getsize(args.out)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
