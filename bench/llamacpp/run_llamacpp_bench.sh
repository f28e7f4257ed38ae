#!/usr/bin/env bash
# run_llamacpp_bench.sh — llama.cpp's CPU throughput on the same model, as kvzip's side-by-side baseline.
# Runs llama-bench twice: prefill of 2,048 tokens (pp2048, empty cache) and decode of 128 tokens after
# a 2,048-token context (tg128 @ d2048, via --n-depth). llama.cpp is built outside the repo
# (bench/README.md says how). Prints tokens/s; the raw JSONL goes to $OUT_DIR for the record.
# Usage: run_llamacpp_bench.sh [LLAMA_BIN_DIR] [MODEL] [THREADS]   (env REPS: repetitions, default 3)
# Needs: bash, python3 (any 3.x, only to summarise JSON).
set -euo pipefail

LLAMA_BIN_DIR=${1:-${LLAMA_BIN_DIR:-/work/ext/llama-build/bin}}
MODEL=${2:-${KVZIP_MODEL:-/root/.cache/kvzip/models/SmolLM2-135M-Instruct.Q4_1.gguf}}
THREADS=${3:-2}
REPS=${REPS:-3}
OUT_DIR=${OUT_DIR:-$(mktemp -d)}

bench="$LLAMA_BIN_DIR/llama-bench"
[[ -x "$bench" ]] || { echo "error: $bench not found or not executable; set LLAMA_BIN_DIR" >&2; exit 1; }
[[ -f "$MODEL" ]] || { echo "error: model $MODEL not found; pass it or set KVZIP_MODEL" >&2; exit 1; }
[[ "$THREADS" =~ ^[0-9]+$ && "$THREADS" -ge 1 ]] || { echo "error: THREADS must be a positive integer, got '$THREADS'" >&2; exit 1; }

echo "llama-bench: $bench"
"$bench" --version 2>&1 | head -n 2 || true
echo "model: $MODEL  threads: $THREADS  reps: $REPS  raw: $OUT_DIR"
# Other jobs on the cores distort llama.cpp's spinning thread pool badly; the load shows that.
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"

# -p/-n/-d values are crossed by llama-bench, so prefill and decode-at-depth are two separate runs.
"$bench" -m "$MODEL" -t "$THREADS" -r "$REPS" -p 2048 -n 0 -o jsonl > "$OUT_DIR/prefill.jsonl"
"$bench" -m "$MODEL" -t "$THREADS" -r "$REPS" -p 0 -n 128 -d 2048 -o jsonl > "$OUT_DIR/decode_d2048.jsonl"

echo "load average after:  $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$OUT_DIR/prefill.jsonl" "$OUT_DIR/decode_d2048.jsonl" <<'EOF'
import json, sys
for path in sys.argv[1:]:
    for line in open(path):
        r = json.loads(line)
        kind = f"prefill pp{r['n_prompt']}" if r["n_prompt"] else f"decode tg{r['n_gen']}"
        print(f"{kind:<16} depth={r['n_depth']:<5} threads={r['n_threads']} batch={r['n_batch']}/{r['n_ubatch']} "
              f"flash_attn={r.get('flash_attn')}  {r['avg_ts']:9.2f} tok/s  (sd {r['stddev_ts']:.2f}, "
              f"{len(r.get('samples_ts', []))} reps)  build={r.get('build_commit')}")
EOF
