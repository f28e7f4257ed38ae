#!/usr/bin/env bash
# Storage types side by side: the Normans article compressed once with KVzip at ratio 1.0 (f32,
# with scores), then pruned to 1.0 / 0.5 / 0.3 in every storage type with `kvzip prune --kv-dtype`
# (the same global selection compress uses, then quantization), and bench_kvq on every file:
# bytes, load time, decode tok/s. Accuracy is `kvzip eval --kv-dtypes` (see BENCHMARKS.md).
# Usage: bench/run_kvq.sh [--out DIR] [THREADS]   (needs build/kvzip and build/bench_kvq)
#   --out DIR  where the document and the .kvz files go (default /tmp/kvzip-kvq: outside the tree)
set -euo pipefail
cd "$(dirname "$0")/.."
out=/tmp/kvzip-kvq
if [[ "${1:-}" == "--out" ]]; then out="${2:?--out needs a directory}"; shift 2; fi
threads="${1:-2}"
mkdir -p "$out"
python3 scripts/squad_doc.py examples/normans.json "$out/normans.txt" "$out/questions.txt" 8
./build/kvzip compress "$out/normans.txt" -o "$out/full_f32.kvz" --ratio 1.0 --kv-dtype f32 -f -q -t "$threads"
files=()
for r in 1.0 0.5 0.3; do
  for t in f32 f16 q8 q4; do
    ./build/kvzip prune "$out/full_f32.kvz" --ratio "$r" --kv-dtype "$t" -o "$out/${t}_${r}.kvz" -f >/dev/null
    files+=("$out/${t}_${r}.kvz")
  done
  ./build/kvzip prune "$out/full_f32.kvz" --ratio "$r" --kv-dtype q4 --zstd 3 -o "$out/q4z3_${r}.kvz" -f >/dev/null
  files+=("$out/q4z3_${r}.kvz")
done
./build/bench_kvq "${files[@]}" --threads "$threads" --reps 3 --decode 64
