#!/usr/bin/env python3
"""Writes tests/golden/tokens_spm_json.json: a small SentencePiece-style tokenizer.json (BPE with
byte_fallback, spaces as U+2581) trained by Hugging Face `tokenizers` on the Normans article, and
the ids `tokenizers` gives on a set of texts for each of the three layouts converters write:

  gemma     normalizer Replace(" " -> "▁"), pre_tokenizer Split(" ", MergedWithPrevious)
  llama2    normalizer Sequence[Prepend("▁"), Replace(" " -> "▁")], no pre_tokenizer
  metaspace no normalizer, pre_tokenizer Metaspace("▁", prepend_scheme first, split true)

It is the truth for tests/tokenizer/test_spm_tokenizer_json.cc (kvzip's tokenizer.json loader and its
ranked-merge loop; tokenizer/detail/spm.h). The vocabulary is small (a few hundred merges) so the file
stays small; the 256 <0xXX> byte tokens make every character encodable, and the texts hold
characters the vocabulary lacks (byte fallback), runs of spaces, an added user-defined token
("\\n\\n") and a special one ("<start_of_turn>", parsed: Hugging Face always matches specials).

Python: tokenizers (/work/.venv-hf or any environment with it).
"""
from __future__ import annotations

import argparse
import json
import os

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>"]
TEXTS = [
    "The Normans were the people who in the 10th and 11th centuries gave their name to Normandy.",
    " leading space,  two   three    four spaces and trailing  ",
    "Mixed scripts: 東京 Москва القاهرة, digits 1234567 and emoji 🙂👍🏽 ∑∫√∞",
    "paragraph one\n\nparagraph two\n\n\nthree newlines\ttab",
    "<start_of_turn>user\nWho was Rollo?<start_of_turn>model\n",
    "Rare bytes \u0001\u001b[0m, private use \ue000, combining e\u0301",
    "▁ a literal lower block ▁▁ and Normandy's dukes",
]


def normans_text() -> str:
    with open(os.path.join(REPO, "examples", "normans.json"), encoding="utf-8") as f:
        article = json.load(f)["data"][0]
    return "\n\n".join(p["context"] for p in article["paragraphs"]) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "golden", "tokens_spm_json.json"))
    ap.add_argument("--vocab", type=int, default=700)
    args = ap.parse_args()
    import tokenizers
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Replace(" ", "▁")
    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    trainer = trainers.BpeTrainer(vocab_size=args.vocab, special_tokens=SPECIALS + byte_tokens,
                                  limit_alphabet=80, show_progress=False)
    tok.train_from_iterator([normans_text()], trainer=trainer)
    tok.add_tokens([AddedToken("\n\n", normalized=False, special=False)])
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    base = json.loads(tok.to_str())
    # The byte tokens are vocabulary entries (as in Gemma), not added tokens.
    base["added_tokens"] = [a for a in base["added_tokens"] if a["content"] not in byte_tokens]

    layouts = {
        "gemma": (base["normalizer"],
                  {"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious", "invert": False}),
        "llama2": ({"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"},
                                                        {"type": "Replace", "pattern": {"String": " "},
                                                         "content": "▁"}]}, None),
        "metaspace": (None, {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": True}),
    }
    out_layouts = {}
    for name, (norm, pre) in layouts.items():
        j = dict(base, normalizer=norm, pre_tokenizer=pre)
        t = Tokenizer.from_str(json.dumps(j))
        cases = [{"text": text, "ids": t.encode(text, add_special_tokens=False).ids} for text in TEXTS]
        out_layouts[name] = {"normalizer": norm, "pre_tokenizer": pre, "cases": cases}
    doc = {"format": "kvzip-spm-tokenizer-json-golden v1",
           "generator": f"scripts/golden/make_spm_tokenizer_json_golden.py, tokenizers {tokenizers.__version__}",
           "tokenizer": base, "layouts": out_layouts}
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    n = sum(len(c["ids"]) for l in out_layouts.values() for c in l["cases"])
    print(f"wrote {args.out}: vocab {len(base['model']['vocab'])}, {len(base['model']['merges'])} merges, {n} ids")


if __name__ == "__main__":
    main()
