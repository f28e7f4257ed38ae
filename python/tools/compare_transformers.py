"""Agreement of kvzip.transformers with the C++ engine on a whole SQuAD article: compresses the
article with kvzip (ratio 0.3 by default), answers every answerable question with
`kvzip.query(matmul="exact")` and with kvzip.transformers.generate (the model loaded by
transformers from the GGUF, fp32, CPU), and prints the share of equal answers and the largest
first-token logit difference relative to the largest logit.

  python python/tools/compare_transformers.py [--squad examples/normans.json] [--ratio 0.3]
      [--max-tokens 64] [--model M.gguf] [--limit N] [--threads 1]
"""
import argparse
import json
import os
import pathlib
import sys
import tempfile
import time

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import kvzip
import kvzip.transformers as kt

ROOT = pathlib.Path(__file__).resolve().parents[2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--squad", default=str(ROOT / "examples" / "normans.json"))
    ap.add_argument("--ratio", type=float, default=0.3)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--limit", type=int, default=0, help="first N questions only")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1: fastest on a busy machine)")
    ap.add_argument("--model", default=os.environ.get("KVZIP_MODEL",
                                                      str(pathlib.Path.home() / ".cache/kvzip/models/"
                                                          "SmolLM2-135M-Instruct.Q4_1.gguf")))
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    d = json.load(open(a.squad))["data"][0]
    text = "\n\n".join(p["context"] for p in d["paragraphs"])
    qs = [q["question"] for p in d["paragraphs"] for q in p["qas"] if not q.get("is_impossible")]
    if a.limit:
        qs = qs[:a.limit]
    mp = pathlib.Path(a.model)
    tok = AutoTokenizer.from_pretrained(mp.parent, gguf_file=mp.name)
    model = AutoModelForCausalLM.from_pretrained(mp.parent, gguf_file=mp.name, dtype=torch.float32).eval()
    stops = list(kvzip.model(mp)._m.stop_tokens())
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.time()
        c = kvzip.compress(text, pathlib.Path(tmp) / "doc.kvz", model=mp, ratio=a.ratio)
        print(f"compressed {len(c.document_tokens)} tokens at ratio {c.achieved_ratio:.3f} in {time.time() - t0:.0f} s",
              file=sys.stderr)
        t0 = time.time()
        ref = kvzip.query(c, qs, model=mp, matmul="exact", max_tokens=a.max_tokens)
        t_ref = time.time() - t0
        past = kt.load(c, model, source=mp)
        same, worst, t0 = 0, 0.0, time.time()
        for i, (q, r) in enumerate(zip(qs, ref)):
            out = kt.generate(model, tok, c, q, past_key_values=past, max_new_tokens=a.max_tokens,
                              eos_token_id=stops, return_dict=True)
            eq = out["tokens"] == r.tokens
            same += eq
            rel = float(np.abs(out["first_logits"] - r.first_logits).max() / np.abs(r.first_logits).max())
            worst = max(worst, rel)
            if not eq:
                print(f"differs [{i}] {q!r}\n  kvzip: {r.text!r}\n  hf:    {out['text']!r}", file=sys.stderr)
        t_hf = time.time() - t0
    print(f"{same}/{len(qs)} answers equal ({100.0 * same / len(qs):.1f}%), worst first-token logit "
          f"difference {worst:.2e} of the largest; kvzip query {t_ref:.0f} s, transformers {t_hf:.0f} s "
          f"(ratio {a.ratio}, max tokens {a.max_tokens})")


if __name__ == "__main__":
    main()
