#!/usr/bin/env bash
# run_depth_table.sh — one table, one run: kvzip against llama.cpp on the same GGUF files and
# threads, prefill and decode at depth 0 and at document depths D, decode from the full cache and
# from a KVzip-compressed one, each row beside the machine's read bandwidth in its own minute.
#
# Usage: bench/run_depth_table.sh BUILD_DIR LLAMA_BIN_DIR THREADS MODEL:N[:D,D...] [...]
#   BUILD_DIR      a build with kvzip, bench_decode and bench_query (scripts/build.sh)
#   MODEL:N        a GGUF and the tokens to decode (e.g. llama8b-q4_0.gguf:16); a third field
#                  gives that model its own depths
# env DEPTHS="2000 7600"  document lengths in tokens (the article, twice over, cut to D); a
#                         compress needs D + 536 tokens (prefix, question room) within the
#                         model's context: 7,600 fits the 8,192 of SmolLM2 and the shape GGUFs
# env RATIO=0.3           the compressed cache's ratio (KVzip)
# env PROMPT=512          the prompt whose prefill the depth-0 row times
# env OUT_DIR=...         raw logs and caches (default: a temporary folder)
#
# A row per model and depth:
#   depth 0: `kvzip generate` of a PROMPT-token prompt (prefill) and of "Hello there" (decode),
#            `llama-bench -p PROMPT -n 0` and `-p 0 -n N`;
#   depth D: `kvzip compress` of the D-token document at ratio 1 (KVzip scores kept: its prefill
#            and "compress / prefill", the whole KVzip pass against the prefill), `kvzip prune` to
#            RATIO, `bench_query --fresh 0` (decode of N tokens from the full and the pruned file,
#            stop tokens ignored), `llama-bench -p D -n 0` and `-p 0 -n N -d D`.
# "read GB/s" is `bench_decode --bandwidth-only 1` (all threads streaming a 1 GiB buffer) just
# before and just after the row's decodes, their mean: decode of a 1B+ model reads its weights once
# a token, so on machines whose bandwidth moves the row's ratios are read against it.
set -euo pipefail
build=${1:?build dir}; llama=${2:?llama.cpp bin dir}; threads=${3:?threads}; shift 3
kz=$build/kvzip; bd=$build/bench_decode; bq=$build/bench_query
for b in "$kz" "$bd" "$bq" "$llama/llama-bench"; do [ -x "$b" ] || { echo "missing $b" >&2; exit 2; }; done
depths=${DEPTHS:-2000 7600}; ratio=${RATIO:-0.3}; P=${PROMPT:-512}
out=${OUT_DIR:-$(mktemp -d)}
mkdir -p "$out"
here=$(cd "$(dirname "$0")/.." && pwd)
python3 "$here/scripts/squad_doc.py" "$here/examples/normans.json" "$out/article.txt" "$out/qs.txt" 2 >/dev/null

echo "CPU: $(lscpu | sed -n 's/^Model name:[[:space:]]*//p') (family $(lscpu | sed -n 's/^CPU family:[[:space:]]*//p')," \
     "model $(lscpu | sed -n 's/^Model:[[:space:]]*//p')); features used by kvzip's kernels:" \
     "$(grep -o -w -E 'avx2|fma|f16c|avx512f|avx512bw|avx512_vnni|avx512_bf16|amx_tile|amx_int8|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "kvzip: $kz ($(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo '?')); threads: $threads;" \
     "depths: 0 $depths; ratio $ratio; load before: $(cut -d' ' -f1-3 /proc/loadavg); raw logs: $out"
echo

probe() { "$bd" --bandwidth-only 1 --rounds 2 --threads "$threads" 2>/dev/null | sed -n 's/^read bandwidth: median \([0-9.]*\) GB\/s.*/\1/p'; }
mean() { python3 -c "import sys; v=[float(x) for x in sys.argv[1:] if x]; print(f'{sum(v)/len(v):.1f}' if v else 'n/a')" "$@"; }
ratio_of() { python3 -c "import sys; a,b=sys.argv[1:]; print(f'{float(a)/float(b):.2f}x' if 'n/a' not in (a,b) and float(b) > 0 else 'n/a')" "$1" "$2"; }
llama_ts() {  # log -> tokens/s of its one test
  python3 -c "import json,sys; print(round(json.loads(open(sys.argv[1]).readline())['avg_ts'],2))" "$1" 2>/dev/null || echo n/a
}
llama_bench() {  # log, args...
  local log=$1; shift
  "$llama/llama-bench" -t "$threads" -r 1 -o jsonl "$@" > "$log" 2>/dev/null || true
  llama_ts "$log"
}
prompt_of() {  # model, tokens, file: the article twice over, cut to that many of the model's tokens
  local ids
  ids=$("$kz" tokenize -m "$1" "$(cat "$out/article.txt" "$out/article.txt")" 2>/dev/null | tr -s ' \n' ' ' | sed 's/^ //' | cut -d' ' -f1-"$2")
  "$kz" tokenize -m "$1" --decode "$ids" > "$3" 2>/dev/null
}

echo "| model | depth | read GB/s | kvzip prefill tok/s | llama.cpp prefill tok/s | compress / prefill | kvzip decode, full cache | kvzip decode, ratio $ratio | llama.cpp decode tok/s |"
echo "|---|--:|--:|--:|--:|--:|--:|--:|--:|"
for spec in "$@"; do
  IFS=: read -r model N own <<<"$spec"
  model_depths=${own:+${own//,/ }}
  name=$(basename "$model" .gguf)
  # Depth 0.
  prompt_of "$model" "$P" "$out/prompt_$P.txt"
  "$kz" generate -m "$model" -f "$out/prompt_$P.txt" -n 1 -t "$threads" --stats > "$out/${name}_pp.log" 2>&1 || true
  kp=$(sed -n 's/.*prompt [0-9]* tokens in [0-9.]* s (\([0-9.]*\) tok\/s).*/\1/p' "$out/${name}_pp.log" | head -1)
  lp=$(llama_bench "$out/${name}_lpp.jsonl" -m "$model" -p "$P" -n 0)
  b1=$(probe)
  "$kz" generate -m "$model" -p "Hello there" -n "$N" -t "$threads" --stats > "$out/${name}_tg.log" 2>&1 || true
  kd=$(sed -n 's/.*generated [0-9]* tokens, \([0-9.]*\) tok\/s.*/\1/p' "$out/${name}_tg.log" | head -1)
  ld=$(llama_bench "$out/${name}_ltg.jsonl" -m "$model" -p 0 -n "$N")
  b2=$(probe)
  echo "| $name | 0 ($P-token prompt) | $(mean "$b1" "$b2") | ${kp:-n/a} ($(ratio_of "${kp:-n/a}" "$lp")) | $lp | – | ${kd:-n/a} ($(ratio_of "${kd:-n/a}" "$ld")) | – | $ld |"
  for D in ${model_depths:-$depths}; do
    doc=$out/doc_$D.txt; full=$out/${name}_$D.kvz; small=$out/${name}_${D}_$ratio.kvz
    prompt_of "$model" "$D" "$doc"
    "$kz" compress "$doc" -o "$full" -f -m "$model" -t "$threads" --ratio 1 > "$out/${name}_${D}_compress.log" 2>&1 || true
    kp=$(sed -n 's/^prefill [0-9.]* s (\([0-9.]*\) tok\/s).*/\1/p' "$out/${name}_${D}_compress.log" | head -1)
    cr=$(sed -n 's/.*compress \([0-9.]*\)x prefill.*/\1/p' "$out/${name}_${D}_compress.log" | head -1)
    "$kz" prune "$full" --ratio "$ratio" -o "$small" -f > "$out/${name}_${D}_prune.log" 2>&1 || true
    lp=$(llama_bench "$out/${name}_${D}_lpp.jsonl" -m "$model" -p "$D" -n 0)
    b1=$(probe)
    KVZIP_MODEL=$model "$bq" "$full" "$small" --threads "$threads" --reps 1 --decode "$N" --fresh 0 > "$out/${name}_${D}_query.log" 2>&1 || true
    kf=$(grep -F "decode from $full " "$out/${name}_${D}_query.log" | sed -n 's/.*: *\([0-9.]*\) tok\/s.*/\1/p' || true)
    ks=$(grep -F "decode from $small " "$out/${name}_${D}_query.log" | sed -n 's/.*: *\([0-9.]*\) tok\/s.*/\1/p' || true)
    # A step that failed leaves its cell n/a; its log says why.
    [ -n "$kp" ] || echo "compress failed: $(tail -1 "$out/${name}_${D}_compress.log")" >&2
    ld=$(llama_bench "$out/${name}_${D}_ltg.jsonl" -m "$model" -p 0 -n "$N" -d "$D")
    b2=$(probe)
    echo "| $name | $D | $(mean "$b1" "$b2") | ${kp:-n/a} ($(ratio_of "${kp:-n/a}" "$lp")) | $lp | ${cr:-n/a}x | ${kf:-n/a} ($(ratio_of "${kf:-n/a}" "$ld")) | ${ks:-n/a} ($(ratio_of "${ks:-n/a}" "$ld")) | $ld |"
    rm -f "$full" "$small"  # an 8B model's full cache at 8K tokens is 2 GB
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
