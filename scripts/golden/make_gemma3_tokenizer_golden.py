#!/usr/bin/env python3
"""Writes tests/golden/tokens_gemma3.json: the token ids Hugging Face `tokenizers` gives, for a
tokenizer built from the Gemma 3 270M GGUF's vocabulary, on a set of texts. It is the truth for
tests/tokenizer/test_gemma3_tokenizer.cc (kvzip's SentencePiece-style tokenizer on the real
vocabulary, [realmodel]: the test reads the vocabulary from the GGUF; the model is not committed).

Python: transformers, tokenizers, gguf and numpy.
Model: scripts/fetch-model.sh gemma3-270m (or --model PATH).

The tokenizer is transformers' own GGUF conversion (integrations/gguf: BPE with byte fallback,
merges rebuilt from the vocabulary, user-defined tokens added whole, control tokens special), which
shares no code with kvzip. Before anything is written the script checks it against llama.cpp's
`llama-tokenize` on one sentence (the vector below, BOS dropped). Cases whose text holds control
tokens (`<start_of_turn>`) are parse_special only: Hugging Face always matches special tokens,
llama.cpp (and kvzip) only when asked.
"""
from __future__ import annotations

import argparse
import json
import os

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DEFAULT_MODEL = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")),
                             "kvzip", "models", "gemma-3-270m-q4_k_m.gguf")
SENTENCE = "Hello world! The Normans were the people who in the 10th century"
LLAMA_TOKENIZE = [2, 9259, 1902, 236888, 669, 17509, 743, 964, 506, 1331, 1015, 528, 506, 236743, 236770,
                  236771, 594, 7691]

MIXED = [
    "Mixed scripts: 東京は日本の首都です。北京是中国的首都。서울은 한국의 수도. Москва — столица России. "
    "القاهرة عاصمة مصر. हिन्दी भाषा. Ελληνικά.",
    "Digits 0 1 12 123 1234 12345 3.14159 -42 1,234,567.89 ١٢٣ ௧௨௩ 𝟙𝟚𝟛 2024-12-04T22:50Z",
    "Whitespace:  two   three    four\ttab\t\ttabs\n\nnewlines\n\n\n\nfour\r\nCRLF   \n   trailing   ",
    " leading space, and  \u00a0non-breaking\u2009thin\u3000ideographic spaces",
    "Emoji 🙂👍🏽👨‍👩‍👧 🇫🇷 and symbols ∑∫√∞ ≠ ≤ → ©®™ … «quotes» „Anführungszeichen“ \U0001F9EC",
    "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n\nprint([fib(i) for i in range(10)])\n",
    "Rare bytes \u0001\u0007\u001b[0m and private use \ue000\U000F0000 and combining e\u0301 a\u0308",
    "<start_of_turn> written in a document stays text unless parse_special; [multimodal] is user-defined",
]
CHAT = "<start_of_turn>user\nIn what country is Normandy located?<end_of_turn>\n<start_of_turn>model\n"


def normans_document() -> str:
    with open(os.path.join(REPO, "examples", "normans.json"), encoding="utf-8") as f:
        article = json.load(f)["data"][0]
    return "\n\n".join(p["context"] for p in article["paragraphs"]) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=os.environ.get("KVZIP_GEMMA_MODEL", DEFAULT_MODEL))
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "golden", "tokens_gemma3.json"))
    args = ap.parse_args()
    import tokenizers
    import transformers
    from transformers.integrations.gguf.gguf_tokenizer_mapping import (convert_gguf_tokenizer,
                                                                       get_gguf_tokenizer)
    arch, tok_dict, _ = get_gguf_tokenizer(args.model)
    tok, _ = convert_gguf_tokenizer(arch, tok_dict)
    got = tok.encode(SENTENCE, add_special_tokens=False).ids
    assert got == LLAMA_TOKENIZE[1:], ("tokenizers disagrees with llama-tokenize", got)

    cases = [(SENTENCE, False), (normans_document(), False)] + [(t, False) for t in MIXED[:-1]]
    cases += [(MIXED[-1].replace("<start_of_turn> ", ""), False), (CHAT, True), (MIXED[-1], True)]
    out = []
    for text, special in cases:
        if not special:
            assert "<start_of_turn>" not in text and "<end_of_turn>" not in text
        out.append({"parse_special": special, "text": text, "ids": tok.encode(text, add_special_tokens=False).ids})
    doc = {"format": "kvzip-token-golden-json v1",
           "generator": f"scripts/golden/make_gemma3_tokenizer_golden.py, transformers {transformers.__version__}, "
                        f"tokenizers {tokenizers.__version__}",
           "model": os.path.basename(args.model), "vocab_size": len(tok_dict["tokens"]), "cases": out}
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=0)
        f.write("\n")
    print(f"wrote {args.out}: {len(out)} cases, {sum(len(c['ids']) for c in out)} ids")


if __name__ == "__main__":
    main()
