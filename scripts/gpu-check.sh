#!/usr/bin/env bash
# Every GPU check for a machine with an NVIDIA GPU (issue 5). Usage:
#   scripts/gpu-check.sh [--only e2e] [OUT_DIR]     (OUT_DIR: default $OUT, then out/gpu-check)
# Binaries: .gpu/bundle.tar.xz from scripts/gpu-bundle.sh (unpacked to .gpu/bin, .gpu/lib) when
# present, else a CUDA build here (build-gpu/, Release, sm_80+sm_90; needs the build deps).
# Model for the end-to-end check: $KVZIP_MODEL, else .gpu/model.part* joined and checked against
# .gpu/model.sha256, else models/*.gguf; without a complete one that step is skipped, saying why.
# Steps, each under a timeout so one call stays within 8 minutes: [cuda] parity tests; bench_gpu
# (synthetic Llama-3-8B shapes); gpu_e2e (CPU vs GPU answers and KVzip rankings on the real
# model); compute-sanitizer memcheck and racecheck over the [cuda] tests (when the tool exists).
# --only e2e runs the end-to-end step alone (a second call that brings the model's other half).
# Logs and CSVs go to OUT_DIR, at most 7 files (device.txt, tests_cuda.log, bench_gpu.log,
# bench_gpu.csv, gpu_e2e.log, gpu_e2e_answers.txt, sanitizer.log); a short table is printed last.
# Exit status 0 when every step that ran passed.
set -uo pipefail
cd "$(dirname "$0")/.."
only=""
if [[ "${1:-}" == "--only" ]]; then only="${2:-}"; shift 2; fi
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

nvidia-smi >"$out/device.txt" 2>&1 || true
gpu_name=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1)
row "device" "${gpu_name:-unknown (nvidia-smi failed)}"

# ---- binaries ---------------------------------------------------------------------------------
if [[ -f .gpu/bundle.tar.xz && ( ! -x .gpu/bin/kvzip_tests || .gpu/bundle.tar.xz -nt .gpu/bin/kvzip_tests ) ]]; then
  rm -rf .gpu/bin .gpu/lib
  tar -C .gpu -xJf .gpu/bundle.tar.xz 2>/tmp/kvzip-unpack.log ||
    python3 -c 'import tarfile,sys; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' .gpu/bundle.tar.xz .gpu
  touch .gpu/bin/*
fi
if [[ -x .gpu/bin/kvzip_tests ]]; then
  cublas_dir=$(python3 -c 'import nvidia.cublas, os; print(os.path.join(os.path.dirname(nvidia.cublas.__file__), "lib"))' 2>/dev/null || true)
  export LD_LIBRARY_PATH="$PWD/.gpu/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:${cublas_dir}:${LD_LIBRARY_PATH:-}:/usr/local/nvidia/lib64:/usr/local/nvidia/lib"
  tests=.gpu/bin/kvzip_tests bench=.gpu/bin/bench_gpu e2e=.gpu/bin/gpu_e2e
  ldd .gpu/bin/* >/tmp/kvzip-ldd.txt 2>&1
  cat /tmp/kvzip-ldd.txt >>"$out/device.txt"
  if grep -q "=> not found" /tmp/kvzip-ldd.txt; then
    row "libraries" "MISSING: $(grep '=> not found' /tmp/kvzip-ldd.txt | awk '{print $1}' | sort -u | tr '\n' ' ')"
  fi
  row "build" "prebuilt (.gpu/bundle.tar.xz)"
elif [[ "$only" == "e2e" ]]; then
  row "gpu_e2e" "FAILED: no .gpu/bin here (a fresh machine?): run the full check with the bundle first"
  printf '%s\n' "${rows[@]}"
  exit 1
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

run_e2e() {
  local model="${KVZIP_MODEL:-}"
  if [[ -z "$model" ]] && compgen -G ".gpu/model.part*" >/dev/null; then
    model=/tmp/kvzip-default-model.gguf
    cat .gpu/model.part* >"$model"
    if [[ -f .gpu/model.sha256 ]] && [[ "$(sha256sum "$model" | awk '{print $1}')" != "$(cat .gpu/model.sha256)" ]]; then
      row "gpu_e2e" "skipped: model pieces incomplete here ($(ls .gpu/model.part* | tr '\n' ' ')); bring the other one in a call while this machine is warm"
      return
    fi
  fi
  if [[ -z "$model" ]] && compgen -G "models/*.gguf" >/dev/null; then model=$(ls models/*.gguf | head -1); fi
  if [[ -n "$model" && -f "$model" ]]; then
    timeout 180 "$e2e" "$model" --squad examples/normans.json --out "$out" >"$out/gpu_e2e.log" 2>&1
    step_result "gpu_e2e (Normans, ratio 0.3)" $? "$out/gpu_e2e.log"
  else
    row "gpu_e2e" "skipped: no model (set KVZIP_MODEL or carry .gpu/model.part*)"
  fi
}

if [[ "$only" == "e2e" ]]; then
  run_e2e
else
  # ---- parity tests ---------------------------------------------------------------------------
  timeout 180 "$tests" "[cuda]" -d yes --rng-seed time >"$out/tests_cuda.log" 2>&1  # fresh inputs
  step_result "[cuda] parity tests" $? "$out/tests_cuda.log"
  row "  summary" "$(grep -E 'test cases|All tests passed' "$out/tests_cuda.log" | tail -1)"
  if grep -q "skipped" "$out/tests_cuda.log"; then row "  WARNING" "tests reported 'skipped': no device seen"; status=1; fi
  # ---- benchmarks -----------------------------------------------------------------------------
  timeout 200 "$bench" --out "$out" >"$out/bench_gpu.log" 2>&1
  step_result "bench_gpu" $? "$out/bench_gpu.log"
  run_e2e
  # ---- memory and race checking ---------------------------------------------------------------
  sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda/compute-sanitizer/compute-sanitizer 2>/dev/null | head -1)
  if [[ -n "$sanitizer" ]]; then
    timeout 100 "$sanitizer" --tool memcheck --error-exitcode 9 "$tests" "[cuda]" >"$out/sanitizer.log" 2>&1
    step_result "compute-sanitizer memcheck [cuda]" $? "$out/sanitizer.log"
    timeout 120 "$sanitizer" --tool racecheck --error-exitcode 9 "$tests" "[cuda]" \
      >>"$out/sanitizer.log" 2>&1
    step_result "compute-sanitizer racecheck [cuda]" $? "$out/sanitizer.log"
  else
    row "compute-sanitizer" "not installed: skipped"
  fi
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
