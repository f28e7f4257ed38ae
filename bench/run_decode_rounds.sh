#!/usr/bin/env bash
# run_decode_rounds.sh — decode at depth 0, kvzip against llama.cpp, each as a fraction of the
# machine's read bandwidth measured around it. Decode of a 1B+ model streams its weights once a
# token, so its speed is a share of the memory bandwidth; on machines whose bandwidth moves from
# minute to minute (shared hosts, guests) a ratio of two tools means little unless each run is set
# against the bandwidth of its own minute. Each round takes, per model: a bandwidth probe
# (`bench_decode --bandwidth-only 1`), `kvzip generate`, `llama-bench`, a second probe (the two
# tools' order alternates by round), and states each tool's tok/s as GB/s of weights read (the
# GGUF's tensor bytes a token: all of them, less the token embeddings where the file has a
# separate output matrix) and as a fraction of the mean of the two probes.
# Prints the rounds and a summary per model (medians; split at BW_SPLIT GB/s when given).
# Usage: bench/run_decode_rounds.sh KVZIP_BIN LLAMA_BIN_DIR THREADS ROUNDS MODEL:N [MODEL:N ...]
#   MODEL:N  a GGUF and the tokens to decode after the two-token prompt "Hello there"
# env BENCH_DECODE (default: bench_decode beside KVZIP_BIN), BW_SPLIT (GB/s; summary rows for the
#   rounds below and at or above it), BEFORE (another kvzip binary, run in the same rounds: its
#   tok/s and this one's ratio to it), OUT_DIR (raw logs; default a temporary folder).
# Needs the PyPI package gguf (for the tensor bytes).
set -euo pipefail
kz=${1:?kvzip binary}; llama=${2:?llama.cpp bin dir}; threads=${3:?threads}; rounds=${4:?rounds}; shift 4
[ $# -gt 0 ] || { echo "usage: $0 KVZIP_BIN LLAMA_BIN_DIR THREADS ROUNDS MODEL:N [MODEL:N ...]" >&2; exit 2; }
bd=${BENCH_DECODE:-$(dirname "$kz")/bench_decode}
[ -x "$bd" ] || { echo "no bench_decode at $bd (set BENCH_DECODE)" >&2; exit 2; }
[ -x "$llama/llama-bench" ] || { echo "no llama-bench in $llama" >&2; exit 2; }
python3 -c "import gguf" 2>/dev/null || { echo "needs the PyPI package gguf (pip install gguf)" >&2; exit 2; }
out=${OUT_DIR:-$(mktemp -d)}
mkdir -p "$out"
tsv=$out/rounds.tsv
: > "$tsv"

echo "CPU: $(lscpu | sed -n 's/^Model name:[[:space:]]*//p'); features used by kvzip's kernels:" \
     "$(grep -o -w -E 'avx2|fma|f16c|avx512f|avx512bw|avx512_vnni|avx512_bf16|amx_tile|amx_int8|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "kvzip: $kz; llama.cpp: $llama/llama-bench; threads: $threads; rounds: $rounds; load before: $(cut -d' ' -f1-3 /proc/loadavg); raw logs: $out"
echo

token_bytes() {  # the weight bytes one decode token reads
  python3 - "$1" <<'EOF'
import sys, gguf
r = gguf.GGUFReader(sys.argv[1])
sizes = {t.name: int(t.n_bytes) for t in r.tensors}
total = sum(sizes.values())
if "output.weight" in sizes and "token_embd.weight" in sizes:
    total -= sizes["token_embd.weight"]  # a lookup reads one row of it
print(total)
EOF
}
probe() { "$bd" --bandwidth-only 1 --rounds 2 --threads "$threads" 2>/dev/null | sed -n 's/^read bandwidth: median \([0-9.]*\) GB\/s.*/\1/p'; }
kvzip_tps() {  # model, N, log[, binary]
  "${4:-$kz}" generate -m "$1" -p "Hello there" -n "$2" -t "$threads" --stats > "$3" 2>&1 || true
  grep -o -E 'generated [0-9]+ tokens, [0-9.]+ tok/s' "$3" | grep -o -E '[0-9.]+ tok/s' | cut -d' ' -f1 || true
}
llama_tps() {  # model, N, log
  "$llama/llama-bench" -m "$1" -t "$threads" -r 1 -p 0 -n "$2" -o jsonl > "$3" 2>/dev/null || true
  python3 -c "import json,sys; print(round(json.loads(open(sys.argv[1]).readline())['avg_ts'],2))" "$3" 2>/dev/null || true
}

declare -A bytes
for spec in "$@"; do
  model=${spec%:*}
  [ -f "$model" ] || { echo "no model file $model" >&2; exit 2; }
  bytes[$model]=$(token_bytes "$model")
done

for r in $(seq "$rounds"); do
  for spec in "$@"; do
    model=${spec%:*}; N=${spec##*:}; name=$(basename "$model")
    b1=$(probe)
    o=nan
    if [ $((r % 2)) = 1 ]; then
      k=$(kvzip_tps "$model" "$N" "$out/kvzip_${name}_$r.log"); l=$(llama_tps "$model" "$N" "$out/llama_${name}_$r.jsonl")
      [ -n "${BEFORE:-}" ] && o=$(kvzip_tps "$model" "$N" "$out/before_${name}_$r.log" "$BEFORE")
    else
      [ -n "${BEFORE:-}" ] && o=$(kvzip_tps "$model" "$N" "$out/before_${name}_$r.log" "$BEFORE")
      l=$(llama_tps "$model" "$N" "$out/llama_${name}_$r.jsonl"); k=$(kvzip_tps "$model" "$N" "$out/kvzip_${name}_$r.log")
    fi
    b2=$(probe)
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$r" "${bytes[$model]}" "${b1:-nan}" "${b2:-nan}" "${k:-nan}" "${l:-nan}" "${o:-nan}" >> "$tsv"
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo

python3 - "$tsv" "${BW_SPLIT:-}" <<'EOF'
import sys, math, statistics as st
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
split = float(sys.argv[2]) if sys.argv[2] else None
def f(x): return float(x) if x not in ("", "nan") else math.nan
recs = []
for name, r, b, b1, b2, k, l, o in rows:
    bw = (f(b1) + f(b2)) / 2
    gb = float(b) / 1e9
    recs.append(dict(name=name, r=int(r), gb=gb, bw=bw, k=f(k), l=f(l), o=f(o), kg=f(k) * gb, lg=f(l) * gb))
before = any(not math.isnan(x["o"]) for x in recs)
ob = " before tok/s | × before |" if before else ""
print("| model | round | read bandwidth GB/s | kvzip tok/s | GB/s (of bandwidth) | llama.cpp tok/s | GB/s (of bandwidth) | × llama.cpp |" + ob)
print("|---|--:|--:|--:|--:|--:|--:|--:|" + ("--:|--:|" if before else ""))
for x in recs:
    extra = f" {x['o']:.1f} | {x['k']/x['o']:.2f}x |" if before else ""
    print(f"| {x['name']} | {x['r']} | {x['bw']:.1f} | {x['k']:.1f} | {x['kg']:.1f} ({100*x['kg']/x['bw']:.0f}%) | "
          f"{x['l']:.2f} | {x['lg']:.1f} ({100*x['lg']/x['bw']:.0f}%) | {x['k']/x['l']:.2f}x |" + extra)
print()
def med(v):
    v = [a for a in v if not math.isnan(a)]
    return st.median(v) if v else math.nan
print("| model | rounds | GB a token | read bandwidth GB/s | kvzip tok/s | of bandwidth | llama.cpp tok/s | of bandwidth | × llama.cpp |" + ob)
print("|---|---|--:|--:|--:|--:|--:|--:|--:|" + ("--:|--:|" if before else ""))
groups = [("all", lambda x: True)]
if split is not None:
    groups += [(f"bandwidth < {split:g}", lambda x: x["bw"] < split), (f"bandwidth ≥ {split:g}", lambda x: x["bw"] >= split)]
for name in dict.fromkeys(x["name"] for x in recs):
    for label, keep in groups:
        g = [x for x in recs if x["name"] == name and keep(x)]
        if not g: continue
        extra = f" {med([x['o'] for x in g]):.1f} | {med([x['k']/x['o'] for x in g]):.2f}x |" if before else ""
        print(f"| {name} | {label} ({len(g)}) | {g[0]['gb']:.3f} | {med([x['bw'] for x in g]):.1f} | {med([x['k'] for x in g]):.1f} | "
              f"{100*med([x['kg']/x['bw'] for x in g]):.0f}% | {med([x['l'] for x in g]):.2f} | {100*med([x['lg']/x['bw'] for x in g]):.0f}% | "
              f"{med([x['k']/x['l'] for x in g]):.2f}x |" + extra)
EOF
