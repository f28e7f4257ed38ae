#!/usr/bin/env python3
"""Retrieval quality and time to first token of `kvzip ask` on a SQuAD-style file: every
paragraph compressed into its own cache (FOLDER/p<i>.kvz), the folder indexed, then for every
answerable question recall@K (the question's own paragraph among the top K caches of
`kvzip search`), and for the first --ttft questions the time to the first answer token of
`kvzip ask` (load + composition + question) against a joint prefill of the same paragraphs and
the question (`kvzip generate -n 1`).

  scripts/library_recall.py build/kvzip MODEL.gguf examples/normans.json /tmp/normans-lib --threads 1
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile


def run(args):
    r = subprocess.run([str(a) for a in args], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(map(str, args))}: exit {r.returncode}\n{r.stderr}")
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kvzip")
    ap.add_argument("model")
    ap.add_argument("squad")
    ap.add_argument("folder")
    ap.add_argument("--ratio", default="0.5")
    ap.add_argument("--threads", default="1")
    ap.add_argument("--ks", default="1,4,8")
    ap.add_argument("--ttft", type=int, default=5, help="questions timed (0: none)")
    ap.add_argument("--top-k", default="4", help="caches ask composes in the timing")
    ap.add_argument("--blend", default="0.3", help="ask's --blend in the timing")
    o = ap.parse_args()
    ks = [int(k) for k in o.ks.split(",")]
    data = json.load(open(o.squad))
    paragraphs = [p for art in data["data"] for p in art["paragraphs"]]
    os.makedirs(o.folder, exist_ok=True)
    for i, p in enumerate(paragraphs):
        out = os.path.join(o.folder, f"p{i}.kvz")
        if os.path.exists(out):
            continue
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
            f.write(p["context"])
        run([o.kvzip, "compress", f.name, "-o", out, "-m", o.model, "--ratio", o.ratio, "-t", o.threads, "-q"])
        os.unlink(f.name)
    run([o.kvzip, "index", o.folder, "-q"])
    qs = [(q["question"], i) for i, p in enumerate(paragraphs) for q in p["qas"] if not q.get("is_impossible")]
    hits = {k: 0 for k in ks}
    for question, i in qs:
        r = run([o.kvzip, "search", o.folder, question, "-k", str(max(ks)), "--json", "--no-refresh"])
        ranked = [s["id"] for s in json.loads(r.stdout)["sources"]]
        for k in ks:
            hits[k] += f"p{i}" in ranked[:k]
    print(f"{len(paragraphs)} caches, {len(qs)} questions")
    for k in ks:
        print(f"recall@{k}: {hits[k] / len(qs):.3f} ({hits[k]}/{len(qs)})")
    for question, _ in qs[:o.ttft]:
        r = run([o.kvzip, "ask", o.folder, question, "-m", o.model, "-k", o.top_k, "-n", "1", "-t", o.threads,
                 "--blend", o.blend, "--json", "-q", "--no-refresh"])
        a = json.loads(r.stdout)
        ids = [s["id"] for s in a["sources"]]
        joint = "\n\n".join(paragraphs[int(i[1:])]["context"] for i in ids) + "\n\nQuestion: " + question
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
            f.write(joint)
        g = run([o.kvzip, "generate", "-f", f.name, "-m", o.model, "-n", "1", "-t", o.threads, "--stats"])
        os.unlink(f.name)
        m = re.search(r"prompt (\d+) tokens in ([0-9.]+) s", g.stderr)
        ask_ms = a["load_ms"] + a["compose_ms"] + a["first_token_ms"]
        print(f"ttft {len(ids)} caches: ask {ask_ms:.0f} ms (load {a['load_ms']:.0f} + compose {a['compose_ms']:.0f}"
              f" + question {a['first_token_ms']:.0f}); joint prefill of {m.group(1)} tokens "
              f"{float(m.group(2)) * 1000:.0f} ms")


if __name__ == "__main__":
    main()
