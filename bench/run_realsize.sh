#!/usr/bin/env bash
# run_realsize.sh — side by side: kvzip vs llama.cpp on the same GGUF files and threads,
# in one run (prefill tokens/s of a P-token prompt, decode tokens/s after it), and kvzip's peak RSS
# per command against the file size. Prints Markdown tables; raw logs go to $OUT_DIR.
# Usage: bench/run_realsize.sh KVZIP_BIN LLAMA_BIN_DIR THREADS MODEL:P:N [MODEL:P:N ...]
#   MODEL:P:N  a GGUF, the prompt length P and the tokens N to decode (e.g. llama8b.gguf:256:16)
# env BEFORE=OTHER_KVZIP_BIN adds that binary's columns (e.g. main's build) measured in the same
#   run, interleaved with the others; ratios in the table are kvzip / llama.cpp and kvzip / before.
# env REPEAT=R (default 1) runs every measurement R times, interleaved, and keeps each tool's best
#   (the machine is shared: the best run is the one least disturbed by other jobs).
# env COMPRESS=1 adds, per model, `kvzip compress` (KVzip, ratio 0.3) of a document of P tokens and
#   its "compress / prefill" time ratio for kvzip (and BEFORE).
# env LLAMA_ARGS="..." adds arguments to every llama-bench run (e.g. "--repack 0": llama.cpp's
#   repacked AMX path (llama.cpp 0c1e570) crashed with SIGSEGV on the AMX machines measured).
# env RSS_MODELS="A.gguf B.gguf" adds the peak-RSS table for those files (generate, compress,
#   query on a 500-token document).
set -euo pipefail
kz=${1:?kvzip binary}; llama=${2:?llama.cpp bin dir}; threads=${3:?threads}; shift 3
before=${BEFORE:-}; repeat=${REPEAT:-1}
out=${OUT_DIR:-$(mktemp -d)}
mkdir -p "$out"
here=$(cd "$(dirname "$0")/.." && pwd)
doc=$out/doc.txt
python3 "$here/scripts/squad_doc.py" "$here/examples/normans.json" "$out/article.txt" "$out/qs.txt" 2 >/dev/null

echo "CPU: $(lscpu | sed -n 's/^Model name:[[:space:]]*//p'); features used by kvzip's kernels:" \
     "$(grep -o -w -E 'avx2|fma|f16c|avx512f|avx512bw|avx512_vnni|avx512_bf16|amx_tile|amx_int8|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "kvzip: $kz (matmul: $("$kz" generate -m "${1%%:*}" -p x -n 1 -t "$threads" --stats 2>&1 | sed -n 's/^matmul //p'))"
[ -n "$before" ] && echo "before: $before"
echo "llama-bench extra arguments: ${LLAMA_ARGS:-none}"
echo "threads: $threads; best of $repeat; load before: $(cut -d' ' -f1-3 /proc/loadavg); raw logs: $out"
echo

best() { python3 -c "import sys; v=[float(x) for x in sys.argv[1:] if x not in ('', 'n/a')]; print(max(v) if v else 'n/a')" "$@"; }
ratio() { python3 -c "import sys; a,b=sys.argv[1:]; print(f'{float(a)/float(b):.2f}x' if 'n/a' not in (a,b) else 'n/a')" "$1" "$2"; }
kvzip_run() {  # binary, model, prompt file, N, log -> "prefill decode"
  "$1" generate -m "$2" -f "$3" -n "$4" -t "$threads" --stats > "$5" 2>&1 || true
  local p d
  p=$(grep -o -E 'prompt [0-9]+ tokens in [0-9.]+ s \(([0-9.]+) tok/s\)' "$5" | grep -o -E '\(([0-9.]+)' | tr -d '(')
  d=$(grep -o -E 'generated [0-9]+ tokens, [0-9.]+ tok/s' "$5" | grep -o -E '[0-9.]+ tok/s' | cut -d' ' -f1)
  echo "${p:-n/a} ${d:-n/a}"
}
compress_ratio() {  # binary, model, doc, log -> compress time / prefill time
  "$1" compress "$3" -o "$out/c.kvz" -f -m "$2" -t "$threads" > "$4" 2>&1 || true
  grep -o -E 'compress [0-9.]+x prefill' "$4" | grep -o -E '[0-9.]+' | head -1 || echo n/a
}

hdr="| model | file GB | prompt | kvzip prefill tok/s | llama.cpp prefill tok/s | kvzip decode tok/s | llama.cpp decode tok/s |"
sep="|---|---|---|---|---|---|---|"
if [ -n "$before" ]; then
  hdr="$hdr kvzip before prefill | kvzip before decode |"; sep="$sep---|---|"
fi
[ "${COMPRESS:-0}" = 1 ] && { hdr="$hdr compress / prefill |"; sep="$sep---|"; }
echo "$hdr"; echo "$sep"
for spec in "$@"; do
  IFS=: read -r model P N <<<"$spec"
  name=$(basename "$model")
  # A prompt of exactly P tokens for all: kvzip tokenizes the article (twice over, for P beyond
  # its ~5.6K tokens) and keeps P ids.
  ids=$("$kz" tokenize -m "$model" "$(cat "$out/article.txt" "$out/article.txt")" 2>/dev/null | tr -s ' \n' ' ' | sed 's/^ //' | cut -d' ' -f1-"$P")
  "$kz" tokenize -m "$model" --decode "$ids" > "$out/prompt_$P.txt" 2>/dev/null
  kp=(); kd=(); bp=(); bd=(); lp=(); ld=(); kc=(); bc=()
  for r in $(seq "$repeat"); do
    read -r p d < <(kvzip_run "$kz" "$model" "$out/prompt_$P.txt" "$N" "$out/kvzip_${name}_$r.log"); kp+=("$p"); kd+=("$d")
    if [ -n "$before" ]; then
      read -r p d < <(kvzip_run "$before" "$model" "$out/prompt_$P.txt" "$N" "$out/before_${name}_$r.log"); bp+=("$p"); bd+=("$d")
    fi
    "$llama/llama-bench" -m "$model" -t "$threads" -r 1 -p "$P" -n 0 ${LLAMA_ARGS:-} -o jsonl > "$out/lc_pp_${name}_$r.jsonl" 2>/dev/null || true
    "$llama/llama-bench" -m "$model" -t "$threads" -r 1 -p 0 -n "$N" -d "$P" ${LLAMA_ARGS:-} -o jsonl > "$out/lc_tg_${name}_$r.jsonl" 2>/dev/null || true
    lp+=("$(python3 -c "import json,sys; print(round(json.loads(open(sys.argv[1]).readline())['avg_ts'],2))" "$out/lc_pp_${name}_$r.jsonl" 2>/dev/null || echo n/a)")
    ld+=("$(python3 -c "import json,sys; print(round(json.loads(open(sys.argv[1]).readline())['avg_ts'],2))" "$out/lc_tg_${name}_$r.jsonl" 2>/dev/null || echo n/a)")
    if [ "${COMPRESS:-0}" = 1 ]; then
      kc+=("$(compress_ratio "$kz" "$model" "$out/prompt_$P.txt" "$out/compress_${name}_$r.log")")
      [ -n "$before" ] && bc+=("$(compress_ratio "$before" "$model" "$out/prompt_$P.txt" "$out/compress_before_${name}_$r.log")")
    fi
  done
  KP=$(best "${kp[@]}"); KD=$(best "${kd[@]}"); LP=$(best "${lp[@]}"); LD=$(best "${ld[@]}")
  gb=$(python3 -c "import os,sys; print(f'{os.path.getsize(sys.argv[1])/1e9:.2f}')" "$model")
  row="| $name | $gb | $P | $KP ($(ratio "$KP" "$LP")) | $LP | $KD ($(ratio "$KD" "$LD")) | $LD |"
  if [ -n "$before" ]; then
    BP=$(best "${bp[@]}"); BD=$(best "${bd[@]}")
    row="$row $BP (now $(ratio "$KP" "$BP")) | $BD (now $(ratio "$KD" "$BD")) |"
  fi
  if [ "${COMPRESS:-0}" = 1 ]; then
    # the lowest ratio of the runs (same reasoning as best-of for speeds)
    KC=$(python3 -c "import sys; v=[float(x) for x in sys.argv[1:] if x not in ('', 'n/a')]; print(min(v) if v else 'n/a')" "${kc[@]}")
    cell="${KC}x"
    if [ -n "$before" ]; then
      BC=$(python3 -c "import sys; v=[float(x) for x in sys.argv[1:] if x not in ('', 'n/a')]; print(min(v) if v else 'n/a')" "${bc[@]}")
      cell="$cell (before ${BC}x)"
    fi
    row="$row $cell |"
  fi
  echo "$row"
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
