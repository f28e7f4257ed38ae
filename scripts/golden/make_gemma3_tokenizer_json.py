#!/usr/bin/env python3
"""Writes the Gemma 3 tokenizer.json that transformers converts from the Gemma 3 270M GGUF (BPE with
byte_fallback, normalizer Replace(" " -> "▁"), 262,144 tokens, ~515K merges; about 33 MB, so it is
not committed) and checks, before writing, that Hugging Face `tokenizers` gives the ids of
tests/golden/tokens_gemma3.json with it. tests/tokenizer/test_spm_tokenizer_json.cc [realmodel] then
reads it through kvzip's Hugging Face loader and compares kvzip's ids with the same goldens.

  python3 scripts/golden/make_gemma3_tokenizer_json.py [--model GGUF] [--out PATH]

Default output: ${XDG_CACHE_HOME:-~/.cache}/kvzip/models/gemma-3-270m-tokenizer.json (the test's
default; $KVZIP_GEMMA_TOKENIZER_JSON names another). The conversion takes about a minute and a half.
Python: transformers, tokenizers, gguf, numpy.
"""
from __future__ import annotations

import argparse
import json
import os

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MODELS = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "kvzip", "models")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=os.environ.get("KVZIP_GEMMA_MODEL",
                                                      os.path.join(MODELS, "gemma-3-270m-q4_k_m.gguf")))
    ap.add_argument("--out", default=os.environ.get("KVZIP_GEMMA_TOKENIZER_JSON",
                                                    os.path.join(MODELS, "gemma-3-270m-tokenizer.json")))
    args = ap.parse_args()
    from transformers.integrations.gguf.gguf_tokenizer_mapping import convert_gguf_tokenizer, get_gguf_tokenizer

    arch, tok_dict, _ = get_gguf_tokenizer(args.model)
    tok, _ = convert_gguf_tokenizer(arch, tok_dict)
    with open(os.path.join(REPO, "tests", "golden", "tokens_gemma3.json"), encoding="utf-8") as f:
        golden = json.load(f)
    for c in golden["cases"]:
        got = tok.encode(c["text"], add_special_tokens=False).ids
        assert got == c["ids"], ("tokenizers disagrees with tokens_gemma3.json", c["text"][:60])
    tmp = args.out + ".tmp"
    tok.save(tmp)
    os.replace(tmp, args.out)
    print(f"wrote {args.out} ({os.path.getsize(args.out)} bytes); {len(golden['cases'])} golden cases agree")


if __name__ == "__main__":
    main()
