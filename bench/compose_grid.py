#!/usr/bin/env python3
"""Needle grid for composed caches on text no default was tuned on (docs/composing.md).

Documents are the project's own essays (bench/data/essays, ~450-510 words each). For each model,
K in --ks and each needle placement (the first, second, a middle and the last document), the
needle sentence goes into the middle of that document; every document is compressed alone (kvzip
at --ratio), and the question is asked over:
  - the joint prefill: one full cache of all K documents joined by the composition's separator;
  - the K caches composed (a+b+...), for each rule x recompute fraction (fraction 0 is one run:
    no rule applies).
A cell is found when the answer holds the password. Results go to WORK/results.jsonl (a rerun
skips the cells already there) and a markdown table to stdout: per model, rule and fraction,
"found / joint-found" counts per K, and how many of the joint's finds the composition kept.
With --ttft BENCH_COMPOSE it also times the first token at K = 2, 4, 8, 16 (bench_compose, the
default rule and fraction against the joint prefill) on the first model, documents of
--ttft-tokens tokens cut from the essays.

Usage: bench/compose_grid.py --model M.gguf [--model N.gguf] [--kvzip build/kvzip] [--ks 4,8]
         [--ratio 0.5] [--fractions 0,0.1,0.3,0.5] [--rules deviation,sink,sink-deviation]
         [--threads 1] [--work DIR] [--ttft build/bench_compose] [--ttft-tokens 400]
"""
import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ESSAYS = ROOT / "bench" / "data" / "essays"
NEEDLE = "The secret password for the archive room is BLUE-HERON-42."
QUESTION = "What is the secret password for the archive room?"
SEPARATOR = "\n\n"  # loader::ComposeOptions::separator: the joint text joins documents the same way


def found(answer: str) -> bool:
    a = answer.upper()
    return "HERON" in a and "42" in a


def essays():
    return [p.read_text().strip() for p in sorted(ESSAYS.glob("*.txt"))]


def with_needle(text: str) -> str:
    paras = text.split("\n\n")
    mid = len(paras) // 2
    return "\n\n".join(paras[:mid] + [NEEDLE] + paras[mid:])


def placements(k: int):
    return sorted({0, 1, k // 2, k - 1})


class Runner:
    def __init__(self, args, model: str):
        self.a, self.model = args, model
        self.dir = Path(args.work) / Path(model).stem
        self.dir.mkdir(parents=True, exist_ok=True)
        self.base = [args.kvzip]
        self.common = ["-m", model, "-t", str(args.threads)]

    def run(self, argv):
        r = subprocess.run(self.base + argv + self.common, capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"failed ({r.returncode}): {' '.join(argv)}\n{r.stderr}")
        return r.stdout

    def compress(self, name: str, text: str, method_args):
        out = self.dir / f"{name}.kvz"
        if not out.exists():
            src = self.dir / f"{name}.txt"
            src.write_text(text)
            self.run(["compress", str(src), "-o", str(out), "-f", "-q"] + method_args)
        return str(out)

    def ask(self, cache: str, extra):
        t0 = time.monotonic()
        out = self.run(["query", cache, QUESTION, "-n", "24", "--json", "-q"] + extra)
        answer = json.loads(out.strip().splitlines()[-1])["answer"]
        return found(answer), answer, time.monotonic() - t0


def grid(args, model: str, done: dict, sink):
    r = Runner(args, model)
    docs = essays()
    ratio = ["--ratio", str(args.ratio)]
    for k in args.ks:
        if k > len(docs):
            sys.exit(f"--ks {k}: only {len(docs)} essays")
        for p in placements(k):
            cell = lambda setting, rule, f: (Path(model).stem, k, p, setting, rule, f)
            texts = [with_needle(d) if i == p else d for i, d in enumerate(docs[:k])]
            key = cell("joint", "", 1.0)
            if key not in done:
                joint = r.compress(f"joint{k}_n{p}", SEPARATOR.join(texts), ["--method", "full"])
                sink(key, *r.ask(joint, []))
            todo = [(rule, f) for f in args.fractions for rule in (args.rules if f > 0 else ["-"])
                    if cell("composed", rule, f) not in done]
            if not todo:
                continue
            caches = [r.compress(f"d{i}_n" if i == p else f"d{i}", t, ratio)
                      for i, t in enumerate(texts)]
            for rule, f in todo:
                extra = ["--blend", str(f)] + (["--blend-rule", rule] if f > 0 else [])
                sink(cell("composed", rule, f), *r.ask("+".join(caches), extra))


def table(args, rows):
    models = sorted({k[0] for k in rows})
    out = []
    head = "| model | rule | fraction |" + "".join(f" K = {k} |" for k in args.ks)
    out += [head + " all: found / joint-found | kept of the joint's finds |",
            "|---|---|---|" + "---|" * len(args.ks) + "---|---|"]
    for m in models:
        joint = {(k, p): rows[(m, k, p, "joint", "", 1.0)][0] for k in args.ks for p in placements(k)
                 if (m, k, p, "joint", "", 1.0) in rows}
        for f in args.fractions:
            for rule in (args.rules if f > 0 else ["-"]):
                cells, tot, tj, kept = [], 0, 0, 0
                for k in args.ks:
                    c = j = 0
                    for p in placements(k):
                        key = (m, k, p, "composed", rule, f)
                        if key not in rows or (k, p) not in joint:
                            continue
                        hit = rows[key][0]
                        c += hit
                        j += joint[(k, p)]
                        kept += hit and joint[(k, p)]
                    cells.append(f"{c} / {j}")
                    tot, tj = tot + c, tj + j
                out.append(f"| {m} | {rule} | {f:g} |" + "".join(f" {c} |" for c in cells) +
                           f" {tot} / {tj} | {kept} / {tj} |")
    return "\n".join(out)


def placements_table(args, rows):
    """Per placement: Y/N of the joint and of every setting, for reading the misses."""
    out = ["| model | K | needle in | joint |" + "".join(
        f" {r if f > 0 else '-'} {f:g} |" for f in args.fractions
        for r in (args.rules if f > 0 else ["-"])), "|---" * (4 + sum(
            len(args.rules) if f > 0 else 1 for f in args.fractions)) + "|"]
    for m in sorted({k[0] for k in rows}):
        for k in args.ks:
            for p in placements(k):
                yn = lambda key: ("Y" if rows[key][0] else "n") if key in rows else "?"
                line = f"| {m} | {k} | {p + 1} | {yn((m, k, p, 'joint', '', 1.0))} |"
                for f in args.fractions:
                    for rule in (args.rules if f > 0 else ["-"]):
                        line += f" {yn((m, k, p, 'composed', rule, f))} |"
                out.append(line)
    return "\n".join(out)


def ttft(args):
    text = Path(args.work) / "essays.txt"
    text.write_text("\n\n".join(essays()))
    env = dict(os.environ, KVZIP_MODEL=args.model[0])
    r = subprocess.run([args.ttft, str(text), "--tokens", str(args.ttft_tokens), "--ks", "2,4,8,16", "--ratio",
                        str(args.ratio), "--blends", "0,0.3", "--threads", str(args.threads),
                        "--reps", "1"], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit(f"bench_compose failed ({r.returncode}):\n{r.stderr}")
    return r.stdout + r.stderr


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", action="append", required=True)
    ap.add_argument("--kvzip", default=str(ROOT / "build" / "kvzip"))
    ap.add_argument("--ks", default="4,8")
    ap.add_argument("--ratio", type=float, default=0.5)
    ap.add_argument("--fractions", default="0,0.1,0.3,0.5")
    ap.add_argument("--rules", default="deviation,sink,sink-deviation")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--work", default="compose_grid_work")
    ap.add_argument("--ttft", default="")
    ap.add_argument("--ttft-tokens", type=int, default=400,
                    help="tokens per document of the timing (16 of 400 fit SmolLM2's 8,192)")
    args = ap.parse_args()
    args.ks = [int(x) for x in args.ks.split(",")]
    args.fractions = [float(x) for x in args.fractions.split(",")]
    args.rules = args.rules.split(",")
    Path(args.work).mkdir(parents=True, exist_ok=True)
    log = Path(args.work) / "results.jsonl"
    rows = {}
    if log.exists():
        for line in log.read_text().splitlines():
            d = json.loads(line)
            rows[tuple(d["key"])] = (d["found"], d["answer"], d["s"])

    def sink(key, hit, answer, s):
        rows[key] = (hit, answer, s)
        with log.open("a") as fh:
            fh.write(json.dumps({"key": list(key), "found": hit, "answer": answer, "s": s}) + "\n")
        print(f"{key}: {'found' if hit else 'missed'} ({s:.1f} s) {answer[:60]!r}", file=sys.stderr)

    for m in args.model:
        grid(args, m, rows, sink)
    print(f"Needle grid: essays compressed alone with kvzip at {args.ratio}; "
          f"needle placements {', '.join(str(placements(k)) for k in args.ks)} (0-based).\n")
    print(table(args, rows) + "\n")
    print(placements_table(args, rows) + "\n")
    if args.ttft:
        print(ttft(args))


if __name__ == "__main__":
    main()
