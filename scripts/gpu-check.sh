#!/usr/bin/env bash
# Every GPU check in one call, for a machine with an NVIDIA GPU (issue 5). Usage:
#   scripts/gpu-check.sh [OUT_DIR]          (OUT_DIR defaults to $OUT, then out/gpu-check)
# Binaries: .gpu/bin (from scripts/gpu-bundle.sh, with .gpu/lib) when present, else a CUDA build
# here (build-gpu/, Release, sm_80+sm_90; needs the build dependencies installed).
# Model for the end-to-end check: $KVZIP_MODEL, else .gpu/model.part* joined, else models/*.gguf;
# without one that part is skipped with a message. Steps, each under a timeout so the whole run
# stays within 8 minutes: [cuda] parity tests; compute-sanitizer memcheck over them and racecheck
# over the attention/score tests (when the tool exists); bench_gpu (synthetic Llama-3-8B shapes);
# gpu_e2e (CPU vs GPU answers and score rankings on the real model). Logs and CSVs go to OUT_DIR;
# a short table is printed last. Exit status: 0 when every step that ran passed.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${1:-${OUT:-out/gpu-check}}"
mkdir -p "$out"
t_start=$(date +%s)
status=0
rows=()
row() { rows+=("$(printf '%-40s %s' "$1" "$2")"); }
step_result() {  # name rc log
  if [[ $2 -eq 0 ]]; then row "$1" "PASS"; elif [[ $2 -eq 124 ]]; then row "$1" "TIMEOUT (see $3)"; status=1;
  else row "$1" "FAIL rc=$2 (see $3)"; status=1; fi
}

nvidia-smi >"$out/nvidia-smi.txt" 2>&1 || true
gpu_name=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1)
row "device" "${gpu_name:-unknown (nvidia-smi failed)}"

# ---- binaries ---------------------------------------------------------------------------------
if [[ -x .gpu/bin/kvzip_tests ]]; then
  export LD_LIBRARY_PATH="$PWD/.gpu/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
  tests=.gpu/bin/kvzip_tests bench=.gpu/bin/bench_gpu e2e=.gpu/bin/gpu_e2e
  row "build" "prebuilt (.gpu/bin)"
else
  bdir=build-gpu
  t0=$(date +%s)
  if cmake -S . -B "$bdir" -DCMAKE_BUILD_TYPE=Release -DKVZIP_CUDA=ON \
       -DCMAKE_CUDA_ARCHITECTURES="80;90" >"$out/build.log" 2>&1 &&
     cmake --build "$bdir" -j"$(nproc)" --target kvzip_tests bench_gpu gpu_e2e >>"$out/build.log" 2>&1; then
    row "build" "ok in $(( $(date +%s) - t0 )) s"
  else
    row "build" "FAILED (see $out/build.log)"
    tail -30 "$out/build.log"
    printf '%s\n' "${rows[@]}"
    exit 1
  fi
  tests=$bdir/tests/kvzip_tests bench=$bdir/bench_gpu e2e=$bdir/gpu_e2e
fi

# ---- parity tests -----------------------------------------------------------------------------
timeout 180 "$tests" "[cuda]" -d yes >"$out/tests_cuda.log" 2>&1
rc=$?
step_result "[cuda] parity tests" $rc "$out/tests_cuda.log"
row "  summary" "$(grep -E 'test cases|All tests passed' "$out/tests_cuda.log" | tail -1)"
if grep -q "skipped" "$out/tests_cuda.log"; then row "  WARNING" "tests reported 'skipped': no device seen"; status=1; fi

if command -v compute-sanitizer >/dev/null 2>&1; then
  timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 "$tests" "[cuda]" >"$out/memcheck.log" 2>&1
  step_result "compute-sanitizer memcheck [cuda]" $? "$out/memcheck.log"
  timeout 150 compute-sanitizer --tool racecheck --error-exitcode 9 "$tests" "*attention*,*score*" \
    >"$out/racecheck.log" 2>&1
  step_result "compute-sanitizer racecheck attention" $? "$out/racecheck.log"
else
  row "compute-sanitizer" "not installed: skipped"
fi

# ---- benchmarks -------------------------------------------------------------------------------
timeout 300 "$bench" --out "$out" >"$out/bench_gpu.log" 2>&1
step_result "bench_gpu" $? "$out/bench_gpu.log"

# ---- end to end on the real model -------------------------------------------------------------
model="${KVZIP_MODEL:-}"
if [[ -z "$model" ]] && compgen -G ".gpu/model.part*" >/dev/null; then
  model=/tmp/kvzip-default-model.gguf
  cat .gpu/model.part* >"$model"
fi
if [[ -z "$model" ]] && compgen -G "models/*.gguf" >/dev/null; then model=$(ls models/*.gguf | head -1); fi
if [[ -n "$model" && -f "$model" ]]; then
  timeout 180 "$e2e" "$model" --squad examples/normans.json --out "$out" >"$out/gpu_e2e.log" 2>&1
  step_result "gpu_e2e (Normans, ratio 0.3)" $? "$out/gpu_e2e.log"
else
  row "gpu_e2e" "skipped: no model (set KVZIP_MODEL or carry .gpu/model.part*)"
fi

# ---- the table, last --------------------------------------------------------------------------
echo
echo "== bench_gpu =="
sed -n '/^metric/,$p' "$out/bench_gpu.log" 2>/dev/null
if [[ -f "$out/gpu_e2e.log" ]]; then
  echo "== gpu_e2e =="
  sed -n '/^metric/,$p' "$out/gpu_e2e.log"
fi
echo "== gpu-check ($(( $(date +%s) - t_start )) s, logs in $out) =="
printf '%s\n' "${rows[@]}"
exit $status
