#!/usr/bin/env bash
# Needle test for composed caches: the Normans article (examples/normans.json) cut into K chunks of
# as many whole paragraphs each, a needle sentence put into one chunk at a time; each chunk compressed on its
# own (kvzip at RATIO, and full), then the needle's question asked over the K caches composed
# (a+b+c+d) with each recompute fraction, and over one cache of the whole joined text (the joint
# prefill). Prints one row per needle position: whether each answer contains the needle's word.
# Usage: bench/compose_needle.sh [KVZIP] [K] [RATIO] [BLENDS] [PARAS]
#   (defaults: build/kvzip 4 0.3 "0 0.1 0.2 0.3 0.5" 16: the article's first 16 paragraphs, about
#   2,600 tokens, so that the joint prefill itself finds the needle on the small default model)
set -euo pipefail
cd "$(dirname "$0")/.."
kvzip=${1:-build/kvzip}; K=${2:-4}; ratio=${3:-0.3}; blends=${4:-"0 0.1 0.2 0.3 0.5"}; paras=${5:-16}
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
needle="The keeper of the archive at Rouen chose the word sapphire as the secret password."
question="What word did the keeper of the archive at Rouen choose as the secret password?"
python3 - "$dir" "$K" "$needle" "$paras" <<'PY'
import json, sys
out, k, needle, n = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
paras = [p["context"] for p in json.load(open("examples/normans.json"))["data"][0]["paragraphs"]][:n]
chunks = [paras[i * len(paras) // k:(i + 1) * len(paras) // k] for i in range(k)]
for pos in range(k):
    for i, c in enumerate(chunks):
        c2 = list(c)
        if i == pos: c2.insert(len(c2) // 2, needle)
        open(f"{out}/n{pos}_c{i}.txt", "w").write("\n\n".join(c2))
    open(f"{out}/n{pos}_joint.txt", "w").write("\n\n".join("\n\n".join(c2) for c2 in
        [list(c) if i != pos else c[:len(c)//2] + [needle] + c[len(c)//2:] for i, c in enumerate(chunks)]))
PY
printf "| needle in chunk | joint (full) |"; for b in $blends; do printf " composed full, blend %s | composed %s, blend %s |" "$b" "$ratio" "$b"; done; echo
for ((pos = 0; pos < K; ++pos)); do
  "$kvzip" compress "$dir/n${pos}_joint.txt" -o "$dir/j.kvz" --method full -f -q
  ans=$("$kvzip" query "$dir/j.kvz" "$question" -n 24 --json -q)
  hit() { grep -qi sapphire <<<"$1" && echo yes || echo no; }
  row="| $((pos + 1)) | $(hit "$ans") |"
  full=""; small=""
  for ((i = 0; i < K; ++i)); do
    "$kvzip" compress "$dir/n${pos}_c$i.txt" -o "$dir/f$i.kvz" --method full -f -q
    "$kvzip" compress "$dir/n${pos}_c$i.txt" -o "$dir/s$i.kvz" --ratio "$ratio" -f -q
    full+="${full:++}$dir/f$i.kvz"; small+="${small:++}$dir/s$i.kvz"
  done
  for b in $blends; do
    a1=$("$kvzip" query "$full" "$question" -n 24 --json -q --blend "$b")
    a2=$("$kvzip" query "$small" "$question" -n 24 --json -q --blend "$b")
    row+=" $(hit "$a1") | $(hit "$a2") |"
  done
  echo "$row"
done
