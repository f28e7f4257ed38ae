#!/usr/bin/env bash
# Runs every CPU benchmark that BENCHMARKS.md quotes, in one go, on the default model, and keeps
# the raw output in OUT (default out/bench). Run it on an otherwise idle machine: figures are
# reported as ratios against baselines measured in the same run.
# Needs: build/ (scripts/build.sh), $KVZIP_MODEL or the default model, and optionally llama.cpp
# built outside the repo (LLAMA_BIN_DIR, see bench/README.md) for the side-by-side rows.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-out/bench}
threads=${THREADS:-2}
mkdir -p "$out"
KVZIP_MODEL=${KVZIP_MODEL:-$(bash scripts/fetch-model.sh)}; export KVZIP_MODEL
{ echo "date: $(date -u +%FT%TZ)"; echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)";
  echo "cores: $(nproc)"; echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"; } | tee "$out/machine.txt"

echo "== sgemm peak" ; ./build/sgemm_peak --reps 5 --threads "$threads" | tee "$out/sgemm_peak.txt"
echo "== kvzip kernels, prefill 2048, decode at 2K"
./build/bench_kernels --threads "$threads" --ctx 2048 --decode 32 | tee "$out/bench_kernels.txt"
if [ -x "${LLAMA_BIN_DIR:-/work/ext/llama-build/bin}/llama-bench" ]; then
  echo "== llama.cpp, same GGUF, same threads"
  mkdir -p "$out/llamacpp"
  REPS=${REPS:-2} OUT_DIR="$(realpath "$out")/llamacpp" bash bench/llamacpp/run_llamacpp_bench.sh \
    "${LLAMA_BIN_DIR:-/work/ext/llama-build/bin}" "$KVZIP_MODEL" "$threads" | tee "$out/llamacpp.txt"
fi
echo "== compress the Normans article: full cache and KVzip at 0.3"
python3 scripts/squad_doc.py examples/normans.json "$out/normans.txt" "$out/questions.txt" 8
./build/kvzip compress "$out/normans.txt" -o "$out/full.kvz" --method full -f -t "$threads" 2>&1 | tail -3 | tee "$out/compress_full.txt"
./build/kvzip compress "$out/normans.txt" -o "$out/kvzip03.kvz" --ratio 0.3 -f -t "$threads" 2>&1 | tail -3 | tee "$out/compress_kvzip03.txt"
echo "== answering from the .kvz vs a fresh prefill; decode from 0.3 vs full"
./build/bench_query "$out/full.kvz" "$out/kvzip03.kvz" --threads "$threads" --reps 3 --decode 64 | tee "$out/bench_query.txt"
echo "== .kvz write/read vs memcpy, zstd"
./build/bench_format | tee "$out/bench_format.txt"
echo "== zstd on a real cache (KVzip 0.3 of the Normans article), re-encoded by kvzip prune"
raw=$(stat -c %s "$out/kvzip03.kvz")
for level in 1 3 9 19; do
  t0=$(date +%s.%N)
  ./build/kvzip prune "$out/kvzip03.kvz" --ratio 0.3 --zstd "$level" -o "$out/z$level.kvz" -f >/dev/null
  t1=$(date +%s.%N)
  t2=$(date +%s.%N); ./build/kvzip inspect --verify "$out/z$level.kvz" >/dev/null; t3=$(date +%s.%N)
  python3 -c "import sys; raw,z,w,r=int(sys.argv[1]),int(sys.argv[2]),float(sys.argv[3]),float(sys.argv[4]); print(f'zstd {sys.argv[5]:>2}: {raw/1e6:.1f} MB -> {z/1e6:.1f} MB, ratio {raw/z:.3f}, prune+write {w:.2f} s, verify-read {r:.2f} s')" \
    "$raw" "$(stat -c %s "$out/z$level.kvz")" "$(echo "$t1 - $t0" | bc)" "$(echo "$t3 - $t2" | bc)" "$level" | tee -a "$out/zstd_real.txt"
done
