#!/usr/bin/env python3
"""kvzip against llama.cpp on one GGUF: token ids, perplexity and greedy continuations.

  python3 bench/llamacpp/compare_llamacpp.py [--kvzip build/kvzip] [--llama-bin DIR] [--model GGUF]
                                             [--ctx 512,2048] [--threads 2]
                                             [--tokens-only | --greedy-only | --ppl-only]
                                             [--matmul fast|exact]

1. Token ids: `kvzip tokenize` and `llama-tokenize --ids --no-bos --no-parse-special` over the
   Normans article (examples/normans.json, paragraphs joined by blank lines) and the plain-text cases
   of tests/golden/tokens_gemma3.json (mixed scripts, digits, whitespace runs, emoji, rare bytes); the
   golden file's ids are checked against llama-tokenize too, since the tests compare kvzip with it.
2. Perplexity of the article: `kvzip perplexity --second-half` and `llama-perplexity` on the same
   file and context (both add BOS, cut windows of the same tokens, score each window's second half);
   llama.cpp as shipped is checked, and its run on an f32 cache without flash attention (`-fa off
   -ctk f32 -ctv f32`) printed beside it. `--matmul exact` scores kvzip's fp32 path, a reference
   both can be held to (docs/models.md).
3. Greedy continuations of 32 tokens: `kvzip generate --temp 0` and `llama-simple` on three prompts.
   They part at small margins (llama.cpp rounds activations to Q8 blocks on quantized weights);
   scripts/golden/make_gemma3_greedy_golden.py checks both against an fp32 transformers reference,
   which `--matmul exact` equals (docs/models.md).

Standard library only. Prints one line per check and a summary; exits 1 when a check fails
(perplexity: relative difference above --ppl-tol, default 0.5 %).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DEFAULT_MODEL = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")),
                             "kvzip", "models", "gemma-3-270m-q4_k_m.gguf")
PROMPTS = [
    "The capital of France is",
    "The Normans were the people who",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
]


def normans_document() -> str:
    with open(os.path.join(REPO, "examples", "normans.json"), encoding="utf-8") as f:
        article = json.load(f)["data"][0]
    return "\n\n".join(p["context"] for p in article["paragraphs"]) + "\n"


def run(cmd: list[str], **kw) -> str:
    r = subprocess.run(cmd, capture_output=True, **kw)
    if r.returncode != 0:
        sys.exit(f"failed ({r.returncode}): {' '.join(cmd[:4])} ...\n{r.stderr.decode(errors='replace')[-2000:]}")
    return r.stdout.decode("utf-8", errors="replace")


def llama_ids(args, path: str) -> list[int]:
    out = run([os.path.join(args.llama_bin, "llama-tokenize"), "-m", args.model, "-f", path, "--ids",
               "--no-bos", "--no-parse-special", "--no-escape", "--log-disable"])
    m = re.search(r"\[([\d, ]*)\]", out)
    if not m:
        sys.exit(f"llama-tokenize printed no id list: {out[:200]!r}")
    return [int(x) for x in m.group(1).split(",") if x.strip()]


def kvzip_ids(args, text: str) -> list[int]:
    out = run([args.kvzip, "tokenize", "-m", args.model, text])
    return [int(x) for x in out.split()]


def first_diff(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def check_tokens(args, tmp: str) -> bool:
    with open(os.path.join(REPO, "tests", "golden", "tokens_gemma3.json"), encoding="utf-8") as f:
        golden = json.load(f)
    golden_model = golden["model"] == os.path.basename(args.model)
    cases = [("normans", normans_document(), None)]
    for i, c in enumerate(golden["cases"]):
        if not c["parse_special"]:
            cases.append((f"golden[{i}]", c["text"], c["ids"] if golden_model else None))
    ok = True
    for name, text, gold in cases:
        path = os.path.join(tmp, "text.txt")
        with open(path, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        ref, got = llama_ids(args, path), kvzip_ids(args, text)
        line = f"tokens {name:11s} {len(ref):5d} ids: kvzip {'==' if got == ref else '!='} llama-tokenize"
        if got != ref:
            i = first_diff(got, ref)
            line += f" (first difference at {i}: {got[i:i + 5]} vs {ref[i:i + 5]})"
            ok = False
        if gold is not None:
            line += f"; golden {'==' if gold == ref else '!='} llama-tokenize"
            ok &= gold == ref
        print(line, flush=True)
    return ok


def check_perplexity(args, tmp: str) -> bool:
    # llama.cpp's -f drops one trailing newline: give both the text without it.
    path = os.path.join(tmp, "normans.txt")
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write(normans_document().rstrip("\n"))
    ok = True
    for ctx in args.ctx:
        k = run([args.kvzip, "perplexity", "-m", args.model, "-f", path, "-c", str(ctx), "--second-half",
                 "-t", str(args.threads), "--matmul", args.matmul])
        kp = float(re.search(r"perplexity ([\d.]+)", k).group(1))
        kn = int(re.search(r"\((\d+) tokens scored", k).group(1))
        # Checked: llama.cpp as shipped. Printed beside it: llama.cpp on an f32 cache without flash
        # attention (whose CPU path rounds queries and value sums to f16), as kvzip's perplexity
        # computes attention.
        lp = llama_perplexity(args, path, ctx, [])
        f32 = llama_perplexity(args, path, ctx, ["-fa", "off", "-ctk", "f32", "-ctv", "f32"])
        rel = abs(kp - lp) / lp
        good = rel <= args.ppl_tol
        ok &= good
        print(f"perplexity ctx {ctx}: kvzip {kp:.4f} ({kn} tokens scored, --matmul {args.matmul}), "
              f"llama-perplexity {lp:.4f} (f32 cache, no flash attention: {f32:.4f}), "
              f"difference {100 * rel:.3f} % ({'ok' if good else 'above'} {100 * args.ppl_tol:.2f} %)", flush=True)
    return ok


def llama_perplexity(args, path: str, ctx: int, extra: list[str]) -> float:
    r = subprocess.run([os.path.join(args.llama_bin, "llama-perplexity"), "-m", args.model, "-f", path,
                        "-c", str(ctx), "-b", str(ctx), "-t", str(args.threads)] + extra, capture_output=True)
    log = r.stdout.decode(errors="replace") + r.stderr.decode(errors="replace")
    m = re.search(r"Final estimate: PPL = ([\d.]+)", log)
    if r.returncode != 0 or not m:
        sys.exit(f"llama-perplexity failed (rc {r.returncode}):\n{log[-2000:]}")
    return float(m.group(1))


def check_greedy(args) -> bool:
    ok = True
    for p in PROMPTS:
        k = run([args.kvzip, "generate", "-m", args.model, "-p", p, "-n", str(args.n), "--temp", "0",
                 "-t", str(args.threads), "--matmul", args.matmul])
        l = run([os.path.join(args.llama_bin, "llama-simple"), "-m", args.model, "-n", str(args.n), p])
        if not k.startswith(p):
            sys.exit(f"kvzip generate did not echo the prompt: {k[:80]!r}")
        kc = k[len(p):-1] if k.endswith("\n") else k[len(p):]  # both print a newline at the end
        lc = l[len("<bos>") + len(p):] if l.startswith("<bos>" + p) else None
        if lc is None:
            sys.exit(f"llama-simple printed an unexpected prompt: {l[:80]!r}")
        lc = lc[:-1] if lc.endswith("\n") else lc  # the newline llama-simple prints at the end
        same = kc == lc
        ok &= same
        print(f"greedy {args.n} tokens after {p[:32]!r}: {'equal' if same else 'DIFFERENT'}: {kc!r}"
              + ("" if same else f" vs llama-simple {lc!r}"), flush=True)
    return ok


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kvzip", default=os.path.join(REPO, "build", "kvzip"))
    ap.add_argument("--llama-bin", default="/work/ext/llama-build/bin")
    ap.add_argument("--model", default=os.environ.get("KVZIP_GEMMA_MODEL", DEFAULT_MODEL))
    ap.add_argument("--ctx", default="512,2048", type=lambda s: [int(x) for x in s.split(",")])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("-n", type=int, default=32, help="greedy tokens per prompt")
    ap.add_argument("--ppl-tol", type=float, default=0.005)
    ap.add_argument("--tokens-only", action="store_true")
    ap.add_argument("--greedy-only", action="store_true")
    ap.add_argument("--ppl-only", action="store_true")
    ap.add_argument("--matmul", default="fast", choices=["fast", "exact"], help="kvzip generate's products")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ok = True
        if not args.greedy_only and not args.ppl_only:
            ok &= check_tokens(args, tmp)
        if not args.tokens_only and not args.greedy_only:
            ok &= check_perplexity(args, tmp)
        if not args.tokens_only and not args.ppl_only:
            ok &= check_greedy(args)
    print("all equal" if ok else "MISMATCH")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
