#!/usr/bin/env python3
"""Markdown tables of a RULER run from its kvpress-layout CSV (`kvzip eval --ruler ...
--kvpress-csv FILE`): per (setting, context length), one table with a row per method and a
column per compression ratio (the fraction removed), each cell the score averaged over the tasks
± its standard error, then one table per task. Standard library only.

The error of a task's cell is the CSV's score_se (the standard error over that task's samples);
the error of the mean over T tasks is sqrt(sum of the tasks' se^2) / T, the tasks' samples being
drawn independently. A cell is averaged only over the tasks it has every one of; a method missing
a task there is marked with the count it has.

    python3 bench/ruler_table.py run-kvpress.csv [--header notes.md] > table.md
"""
import argparse
import csv
import math
import sys

FULL = "no_press"


def read_rows(path):
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    need = {"method", "compression_ratio", "task", "score", "setting", "context_length"}
    if not rows:
        sys.exit(f"{path}: no rows")
    missing = need - set(rows[0])
    if missing:
        sys.exit(f"{path}: missing columns {', '.join(sorted(missing))}")
    for r in rows:
        r["compression_ratio"] = float(r["compression_ratio"])
        r["score"] = float(r["score"])
        r["score_se"] = float(r.get("score_se") or 0.0)
        r["samples"] = int(r.get("samples") or 0)
    return rows


def mean_se(cells):
    """Mean of the tasks' scores and the standard error of that mean."""
    n = len(cells)
    mean = sum(c["score"] for c in cells) / n
    se = math.sqrt(sum(c["score_se"] ** 2 for c in cells)) / n
    return mean, se


def cell_text(mean, se, samples):
    text = f"{mean:.1f} ± {se:.1f}" if samples > 1 else f"{mean:.1f}"
    return text


def ordered(values, key=None):
    seen = []
    for v in values:
        if v not in seen:
            seen.append(v)
    return sorted(seen, key=key) if key else seen


def methods_of(rows):
    methods = ordered(r["method"] for r in rows)
    return ([FULL] if FULL in methods else []) + [m for m in methods if m != FULL]


def group_table(rows):
    """Rows: method; columns: compression ratio; cells: mean over the tasks ± se."""
    tasks = ordered(r["task"] for r in rows)
    ratios = ordered((r["compression_ratio"] for r in rows), key=float)
    by = {(r["method"], r["compression_ratio"], r["task"]): r for r in rows}
    head = "| method | " + " | ".join(f"{x:g}" for x in ratios) + " |"
    out = [head, "|---|" + "--:|" * len(ratios)]
    for m in methods_of(rows):
        cells = []
        for x in ratios:
            have = [by[(m, x, t)] for t in tasks if (m, x, t) in by]
            if not have:
                cells.append("–")
                continue
            mean, se = mean_se(have)
            text = cell_text(mean, se, min(c["samples"] for c in have))
            if len(have) < len(tasks):
                text += f" ({len(have)}/{len(tasks)} tasks)"
            cells.append(text)
        out.append(f"| {m} | " + " | ".join(cells) + " |")
    return out, tasks


def task_table(rows, tasks):
    """Rows: (method, compression ratio); columns: tasks; cells: mean ± se over the samples."""
    by = {(r["method"], r["compression_ratio"], r["task"]): r for r in rows}
    keys = ordered((r["method"], r["compression_ratio"]) for r in rows)
    order = methods_of(rows)
    keys.sort(key=lambda k: (order.index(k[0]), k[1]))
    out = ["| method | removed | " + " | ".join(tasks) + " | samples |",
           "|---|--:|" + "--:|" * (len(tasks) + 1)]
    for m, x in keys:
        cells, samples = [], set()
        for t in tasks:
            r = by.get((m, x, t))
            if r is None:
                cells.append("–")
                continue
            cells.append(cell_text(r["score"], r["score_se"], r["samples"]))
            samples.add(r["samples"])
        n = "/".join(str(s) for s in sorted(samples))
        out.append(f"| {m} | {x:g} | " + " | ".join(cells) + f" | {n} |")
    return out


def render(rows):
    out = []
    groups = ordered((r["setting"], int(r["context_length"])) for r in rows)
    for setting, length in groups:
        g = [r for r in rows if r["setting"] == setting and int(r["context_length"]) == length]
        samples = sorted({r["samples"] for r in g})
        table, tasks = group_table(g)
        out.append(f"### {setting}, {length} tokens: mean over {len(tasks)} tasks")
        out.append("")
        out.append(f"Compression ratio = fraction of the context's KV rows removed; "
                   f"score = RULER string-match recall (0-100) ± standard error; "
                   f"{'/'.join(map(str, samples))} samples per task.")
        out.append("")
        out += table
        out.append("")
        out.append(f"### {setting}, {length} tokens: per task")
        out.append("")
        out += task_table(g, tasks)
        out.append("")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", help="kvpress-layout CSV of kvzip eval --ruler (--kvpress-csv)")
    ap.add_argument("--header", help="a Markdown file printed first (title, stamp, command)")
    a = ap.parse_args()
    if a.header:
        with open(a.header, encoding="utf-8") as f:
            sys.stdout.write(f.read().rstrip("\n") + "\n\n")
    sys.stdout.write(render(read_rows(a.csv)))


if __name__ == "__main__":
    main()
