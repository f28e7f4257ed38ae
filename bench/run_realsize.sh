#!/usr/bin/env bash
# run_realsize.sh — issue 10's side-by-side: kvzip vs llama.cpp on the same GGUF files and threads,
# in one run (prefill tokens/s of a P-token prompt, decode tokens/s after it), and kvzip's peak RSS
# per command against the file size. Prints Markdown tables; raw logs go to $OUT_DIR.
# Usage: bench/run_realsize.sh KVZIP_BIN LLAMA_BIN_DIR THREADS MODEL:P:N [MODEL:P:N ...]
#   MODEL:P:N  a GGUF, the prompt length P and the tokens N to decode (e.g. llama8b.gguf:256:16)
# env RSS_MODELS="A.gguf B.gguf" adds the peak-RSS table for those files (generate, compress,
# query on a 500-token document; eval on 2 questions).
set -euo pipefail
kz=${1:?kvzip binary}; llama=${2:?llama.cpp bin dir}; threads=${3:?threads}; shift 3
out=${OUT_DIR:-$(mktemp -d)}
here=$(cd "$(dirname "$0")/.." && pwd)
doc=$out/doc.txt
python3 "$here/scripts/squad_doc.py" "$here/examples/normans.json" "$out/article.txt" "$out/qs.txt" 2 >/dev/null

echo "CPU: $(lscpu | sed -n 's/^Model name:[[:space:]]*//p'); features used by kvzip's kernels:" \
     "$(grep -o -w -E 'avx2|fma|f16c|avx512f|avx512bw|avx512_vnni|avx512_bf16|amx_tile|amx_int8|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "threads: $threads; load before: $(cut -d' ' -f1-3 /proc/loadavg); raw logs: $out"
echo
echo "| model | file GB | prompt | kvzip prefill tok/s | llama.cpp prefill tok/s | kvzip decode tok/s | llama.cpp decode tok/s |"
echo "|---|---|---|---|---|---|---|"
for spec in "$@"; do
  IFS=: read -r model P N <<<"$spec"
  # A prompt of exactly P tokens for both: kvzip tokenizes the article and keeps P ids.
  ids=$("$kz" tokenize -m "$model" "$(cat "$out/article.txt")" 2>/dev/null | tr -s ' \n' ' ' | sed 's/^ //' | cut -d' ' -f1-"$P")
  "$kz" tokenize -m "$model" --decode "$ids" > "$out/prompt_$P.txt" 2>/dev/null
  "$kz" generate -m "$model" -f "$out/prompt_$P.txt" -n "$N" -t "$threads" --stats \
    > "$out/kvzip_$(basename "$model").log" 2>&1 || true
  kp=$(grep -o -E 'prompt [0-9]+ tokens in [0-9.]+ s \(([0-9.]+) tok/s\)' "$out/kvzip_$(basename "$model").log" | grep -o -E '\(([0-9.]+)' | tr -d '(')
  kd=$(grep -o -E 'generated [0-9]+ tokens, [0-9.]+ tok/s' "$out/kvzip_$(basename "$model").log" | grep -o -E '[0-9.]+ tok/s' | cut -d' ' -f1)
  "$llama/llama-bench" -m "$model" -t "$threads" -r 1 -p "$P" -n 0 -o jsonl > "$out/lc_pp_$(basename "$model").jsonl" 2>/dev/null || true
  "$llama/llama-bench" -m "$model" -t "$threads" -r 1 -p 0 -n "$N" -d "$P" -o jsonl > "$out/lc_tg_$(basename "$model").jsonl" 2>/dev/null || true
  lp=$(python3 -c "import json,sys; print(round(json.loads(open(sys.argv[1]).readline())['avg_ts'],1))" "$out/lc_pp_$(basename "$model").jsonl" 2>/dev/null || echo n/a)
  ld=$(python3 -c "import json,sys; print(round(json.loads(open(sys.argv[1]).readline())['avg_ts'],2))" "$out/lc_tg_$(basename "$model").jsonl" 2>/dev/null || echo n/a)
  gb=$(python3 -c "import os,sys; print(f'{os.path.getsize(sys.argv[1])/1e9:.2f}')" "$model")
  echo "| $(basename "$model") | $gb | $P | ${kp:-n/a} | $lp | ${kd:-n/a} | $ld |"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"

[ -n "${RSS_MODELS:-}" ] || exit 0
echo
head -c 3000 "$out/article.txt" > "$doc"
echo "| model | file GB | command | peak RSS GB | RSS / file |"
echo "|---|---|---|---|---|"
rss() {  # label, command...
  local label=$1; shift
  /usr/bin/time -f '%M' -o "$out/rss.txt" "$@" > "$out/rss_cmd.log" 2>&1 || echo "($label failed: see $out/rss_cmd.log)" >&2
  python3 -c "import sys; kb=int(open(sys.argv[1]).read().split()[-1]); f=float(sys.argv[2]); print(f'| {sys.argv[3]} | {f/1e9:.2f} | {sys.argv[4]} | {kb*1024/1e9:.2f} | {kb*1024/f:.2f} |')" \
    "$out/rss.txt" "$(stat -c %s "$model")" "$(basename "$model")" "$label"
}
for model in $RSS_MODELS; do
  rss "generate -n 8" "$kz" generate -m "$model" -p "The capital of France is" -n 8 -t "$threads"
  rss "compress (KVzip, 0.3)" "$kz" compress "$doc" -o "$out/rss.kvz" -f -q -m "$model" -t "$threads"
  rss "query -n 8" "$kz" query "$out/rss.kvz" "Who were the Normans?" -n 8 -m "$model" -t "$threads"
done
