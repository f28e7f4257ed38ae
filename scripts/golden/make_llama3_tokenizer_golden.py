#!/usr/bin/env python3
"""Writes tests/golden/llama3_vocab.bin.zst and tests/golden/tokens_llama3.json: the real 128K
Llama 3 vocabulary and token ids Hugging Face `tokenizers` gives for it, the truth for
tests/tokenizer/test_llama3_tokenizer.cc (kvzip's `llama-bpe` tokenizer on the real vocabulary).

Python: the pyenv `python3` (3.11) with tokenizers and tiktoken; the `zstd` command line tool.
Source: Meta's tiktoken ranks file llama_models/llama3/tokenizer.model from the PyPI wheel
llama-models==0.3.0 (fetched with `pip download --no-deps llama-models==0.3.0`, or --wheel PATH),
and the 256 special tokens that package's llama3/tokenizer.py defines (ids 128000..128255).

From the ranks a Hugging Face tokenizer is built the way byte-level BPE tokenizers are derived from
tiktoken ranks: the vocabulary is every ranked byte string (byte-level spelled), and the merges are
every split (left, right) of a token whose two parts are tokens too, ordered by the rank of the
token they form (ties by the parts' ranks). Pre-tokenizer: Split(Llama 3 regex, Isolated) +
ByteLevel(no regex); ignore_merges. Before anything is written the script checks that this
tokenizer and Meta's own tiktoken encoder give identical ids on every case, so the golden ids are
Llama 3's. The C++ test rebuilds the same vocabulary and merges from the blob independently.

llama3_vocab.bin.zst (zstd of): magic "KVZL3VOC", u32 version 1, u32 n_base, n_base x (u8 len,
bytes) in rank order, u32 n_special, n_special x (u8 len, text).
"""
from __future__ import annotations

import argparse
import base64
import glob
import json
import os
import struct
import subprocess
import sys
import tempfile
import zipfile

import tiktoken
import tokenizers
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
GOLDEN = os.path.join(REPO, "tests", "golden")
PAT = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>", "<|reserved_special_token_1|>",
            "<|finetune_right_pad_id|>", "<|step_id|>", "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>",
            "<|eot_id|>", "<|python_tag|>", "<|image|>"]
SPECIALS += [f"<|reserved_special_token_{2 + i}|>" for i in range(256 - len(SPECIALS))]

EXTRA = [
    "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
    "Today Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWhat is 12345678 * 9?<|eot_id|>"
    "<|start_header_id|>assistant<|end_header_id|>\n\n",
    "I'M SURE HE'S RIGHT, WE'LL SEE. They'D've said it's 1,234,567.89 (approx.)",
    "1 12 123 1234 12345 123456 1234567 ١٢٣٤ ௧௨௩ 𝟙𝟚𝟛",
    "line one\r\nline two\r\n\r\n\ttabbed   spaced    \n   \n",
    "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n\nprint([fib(i) for i in range(10)])\n",
    "東京は日本の首都です。北京是中国的首都。서울은 한국의 수도입니다. Москва — столица России. القاهرة عاصمة مصر.",
    "emoji 🙂👍🏽👨‍👩‍👧 and symbols ∑∫√∞ ≠ ≤ ≥ → ← ©®™ §¶ … «quotes» „Anführungszeichen“",
    "<|eot_id|> written in a document stays text unless parse_special <|reserved_special_token_42|>",
    "Ġ ĠĠ ċ token-alphabet look-alikes and U+00A0\u00a0non-breaking\u2009thin space",
]


def load_ranks(wheel: str | None) -> dict[bytes, int]:
    if wheel is None:
        d = tempfile.mkdtemp()
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "llama-models==0.3.0", "-d", d],
                       check=True, stdout=subprocess.DEVNULL)
        wheel = glob.glob(os.path.join(d, "llama_models-*.whl"))[0]
    with zipfile.ZipFile(wheel) as z:
        text = z.read("llama_models/llama3/tokenizer.model").decode()
    ranks = {}
    for line in text.splitlines():
        tok, rank = line.split()
        ranks[base64.b64decode(tok)] = int(rank)
    assert sorted(ranks.values()) == list(range(len(ranks))) and len(ranks) == 128000
    return ranks


def byte_level_table() -> dict[int, str]:
    """GPT-2's byte -> printable character map (printable Latin-1 bytes map to themselves)."""
    keep = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def derive_merges(ranks: dict[bytes, int]) -> list[tuple[bytes, bytes]]:
    merges = []
    for tok in sorted(ranks, key=ranks.get):
        cands = [(ranks[tok[:i]], ranks[tok[i:]], tok[:i], tok[i:])
                 for i in range(1, len(tok)) if tok[:i] in ranks and tok[i:] in ranks]
        merges.extend((l, r) for _, _, l, r in sorted(cands))
    return merges


def build_hf(ranks: dict[bytes, int], byte_merges: list[tuple[bytes, bytes]]) -> Tokenizer:
    bl = byte_level_table()
    spell = lambda b: "".join(bl[x] for x in b)  # noqa: E731
    vocab = {spell(t): i for t, i in ranks.items()}
    merges = [(spell(l), spell(r)) for l, r in byte_merges]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PAT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in SPECIALS])
    return tok


def smollm_texts() -> list[str]:
    """The inputs of tests/golden/tokens_smollm2.txt (its encode lines), deduplicated."""
    out = []
    for line in open(os.path.join(GOLDEN, "tokens_smollm2.txt"), encoding="utf-8"):
        if line.startswith("encode "):
            t = json.loads(line[9:].rstrip("\n"))
            if t not in out:
                out.append(t)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--wheel", help="llama_models-0.3.0-py3-none-any.whl (default: pip download it)")
    args = ap.parse_args()
    ranks = load_ranks(args.wheel)
    byte_merges = derive_merges(ranks)
    hf = build_hf(ranks, byte_merges)
    meta = tiktoken.Encoding("llama3", pat_str=PAT, mergeable_ranks=ranks,
                             special_tokens={s: 128000 + i for i, s in enumerate(SPECIALS)})
    cases = []
    for text in smollm_texts() + EXTRA:
        for special in (False, True):
            hf.encode_special_tokens = not special  # False: control texts split out as their ids
            ids = hf.encode(text, add_special_tokens=False).ids
            want = meta.encode(text, allowed_special="all") if special else meta.encode_ordinary(text)
            if ids != want:
                sys.exit(f"HF tokenizer and tiktoken disagree on {text[:60]!r} (special={special})")
            cases.append({"parse_special": special, "text": text, "ids": ids})
    blob = b"KVZL3VOC" + struct.pack("<II", 1, len(ranks))
    for t in sorted(ranks, key=ranks.get):
        blob += struct.pack("<B", len(t)) + t
    blob += struct.pack("<I", len(SPECIALS))
    for s in SPECIALS:
        b = s.encode()
        blob += struct.pack("<B", len(b)) + b
    out = os.path.join(GOLDEN, "llama3_vocab.bin.zst")
    with tempfile.NamedTemporaryFile() as raw:  # from a file, so the frame records its size
        raw.write(blob)
        raw.flush()
        subprocess.run(["zstd", "-19", "-q", "-f", raw.name, "-o", out], check=True)
    with open(os.path.join(GOLDEN, "tokens_llama3.json"), "w", encoding="utf-8") as f:
        json.dump({"format": "kvzip-token-golden-json v1",
                   "generator": f"scripts/golden/make_llama3_tokenizer_golden.py, tokenizers {tokenizers.__version__}, "
                                f"tiktoken {tiktoken.__version__}, llama-models 0.3.0",
                   "n_merges": len(byte_merges),
                   "cases": cases}, f, ensure_ascii=False, indent=0)
    print(f"{len(cases)} cases, {len(byte_merges)} merges, vocab blob {os.path.getsize(out)} bytes")


if __name__ == "__main__":
    main()
