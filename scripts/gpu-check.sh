#!/usr/bin/env bash
# Every GPU check for a machine with an NVIDIA GPU, in one command: the [cuda] parity tests, the GPU
# benchmarks, the CPU-vs-GPU end-to-end check on the default model, an independent PyTorch oracle
# and compute-sanitizer, then one summary table. What each step checks and what to expect:
# docs/gpu.md.
# Usage: scripts/gpu-check.sh [--budget SECONDS] [--dry-run] [--only e2e] [OUT_DIR]
#   OUT_DIR          logs and tables (default out/gpu-check)
#   --budget S       finish within S seconds in all: each step gets a ceiling, its share of S
#                    (setup 30, tests 90, bench 120, e2e 100, oracle 45, memcheck 40, racecheck 40,
#                    reserve 15 parts of 480), clamped to what is left, so a slow step cannot push
#                    the total past S. Without it nothing is timed out.
#   --dry-run        print the plan (the table, with the ceilings when --budget is given); run nothing
#   --only e2e       the end-to-end check alone (e.g. once the model has been copied over)
# The summary table is printed by an EXIT trap: it appears even when a step times out or the
# script is stopped (SIGTERM/SIGINT; a SIGKILL cannot be trapped, so a --budget below an outer
# limit is the way to be sure of the table).
#
# Steps: [cuda] parity tests (fresh random inputs, KVZIP_REQUIRE_GPU=1 so a test that cannot see
# the device fails instead of skipping); bench_gpu (synthetic Llama-3-8B shapes); gpu_e2e (CPU vs
# GPU answers and KVzip rankings on the real model); the independent oracle (a tiny random Llama
# from transformers, its logits in PyTorch against kvzip's CPU and CUDA paths:
# scripts/golden/tiny_llama_oracle.py; skipped where torch is missing); compute-sanitizer
# memcheck and racecheck on the small kernel-level tests only ("[cuda][sanitize]": the forward
# tests and long decodes are too slow under racecheck). A device compute-sanitizer refuses
# ("Device not supported", then error 999) is reported SKIPPED, not FAIL: the kernels were not
# checked, and the row says so. Without a GPU (nvidia-smi lists none), or with --dry-run, nothing
# runs: the table is printed with every GPU row SKIPPED.
#
# Binaries: .gpu/bundle.tar.xz from scripts/gpu-bundle.sh (unpacked to .gpu/bin, .gpu/lib) when
# present, for a GPU machine without a compiler; else a CUDA build here (build-gpu/). Model for
# gpu_e2e: $KVZIP_MODEL, else .gpu/model.gguf, else .gpu/model.part* joined and checked against
# .gpu/model.sha256 (gpu-bundle.sh --split), else the default model's cache path
# (scripts/fetch-model.sh), else models/*.gguf; without a complete one that step is skipped,
# saying why.
# Files in OUT_DIR (8): device.txt, tests_cuda.log, bench_gpu.log, bench_gpu.csv, gpu_e2e.log,
# gpu_e2e_answers.txt, oracle.log, sanitizer.log (the oracle's models stay in /tmp).
# Exit status: 0 when every step that ran passed (skips included), 1 when one failed, timed out or
# was cut, 2 for a bad option, 77 when there is no GPU (nothing ran).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

budget=0 dry=0 only=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --budget) budget="${2:-}"; shift 2 ;;
    --dry-run) dry=1; shift ;;
    --only) only="${2:-}"; shift 2 ;;
    -h|--help) sed -n '2,16p' "$0" | cut -c3-; exit 0 ;;
    -*) echo "gpu-check: unknown option '$1' (see --help)" >&2; exit 2 ;;
    *) break ;;
  esac
done
[[ "$budget" =~ ^[0-9]+$ ]] || { echo "gpu-check: --budget takes whole seconds, got '$budget'" >&2; exit 2; }
[[ -z "$only" || "$only" == "e2e" ]] || { echo "gpu-check: --only takes 'e2e', got '$only'" >&2; exit 2; }
out="${1:-out/gpu-check}"
mkdir -p "$out"
t_start=$(date +%s)
status=0

# Step ceilings in seconds: each step's share of the budget (0 everywhere without one: no limit).
declare -A weight=([binaries]=30 [tests]=90 [bench]=120 [e2e]=100 [oracle]=45 [memcheck]=40
                   [racecheck]=40)
readonly W_RESERVE=15 W_TOTAL=480
declare -A ceiling=()
for k in "${!weight[@]}"; do ceiling[$k]=$(( budget * weight[$k] / W_TOTAL )); done
[[ "$only" == "e2e" ]] && ceiling[e2e]=$(( budget * (W_TOTAL - W_RESERVE) / W_TOTAL ))
reserve=$(( budget * W_RESERVE / W_TOTAL ))

# ---- the table: fixed rows, filled as steps finish, printed on exit whatever happens ----------
keys=(device binaries tests bench e2e oracle memcheck racecheck)
declare -A label=(
  [device]="device" [binaries]="binaries"
  [tests]="[cuda] parity tests" [bench]="bench_gpu (Llama-3-8B shapes)"
  [e2e]="gpu_e2e (Normans, ratio 0.3)" [oracle]="oracle (tiny Llama vs torch)"
  [memcheck]="memcheck [cuda][sanitize]" [racecheck]="racecheck [cuda][sanitize]")
declare -A res=()
for k in "${keys[@]}"; do res[$k]="NOT RUN (the check ended before this step)"; done
[[ "$only" == "e2e" ]] && for k in tests bench oracle memcheck racecheck; do res[$k]="not part of --only e2e"; done
notes=()
cur_key="" cur_pid=""

elapsed() { echo $(( $(date +%s) - t_start )); }

print_table() {
  trap - EXIT
  echo
  if [[ -f "$out/bench_gpu.log" ]]; then echo "== bench_gpu =="; sed -n '/^metric/,$p' "$out/bench_gpu.log"; fi
  if [[ -f "$out/gpu_e2e.log" ]]; then echo "== gpu_e2e =="; sed -n '/^metric/,$p' "$out/gpu_e2e.log"; fi
  if (( budget > 0 )); then
    echo "== gpu-check: $(elapsed) s of the $budget s budget, logs in $out =="
  else
    echo "== gpu-check: $(elapsed) s (no budget), logs in $out =="
  fi
  for k in "${keys[@]}"; do
    local c=""
    (( budget > 0 )) && [[ -n "${ceiling[$k]:-}" && "${res[$k]}" != "not part of"* ]] && c="<=${ceiling[$k]} s"
    printf '%-30s %-9s %s\n' "${label[$k]}" "$c" "${res[$k]}"
  done
  if (( budget > 0 )); then
    echo "budget $budget s: each step its share (setup 30, tests 90, bench 120, e2e 100, oracle 45," \
      "memcheck 40, racecheck 40, reserve 15 of 480), also clamped to what is left"
  fi
  for n in "${notes[@]}"; do echo "  note: $n"; done
  echo "exit status $status"
}

on_signal() {
  if [[ -n "$cur_pid" ]]; then kill -TERM "$cur_pid" 2>/dev/null; fi
  if [[ -n "$cur_key" ]]; then res[$cur_key]="CUT at $(elapsed) s (signal): see its log"; fi
  status=1
  exit 1  # the EXIT trap prints the table
}
trap print_table EXIT
trap on_signal TERM INT HUP

# Seconds of the budget left for steps (the reserve is kept for the table).
budget_left() { echo $(( t_start + budget - reserve - $(date +%s) )); }

# run_step KEY LOG CMD...: runs CMD in the background (so a signal reaches this script at once)
# under the step's ceiling clamped to the budget left (no limit without --budget), appending to
# LOG; sets rc and step_s. rc 98: less than 10 s of budget left, nothing run.
run_step() {
  local key=$1 log=$2; shift 2
  local left limit=0 c=${ceiling[$key]}
  if (( budget > 0 )); then
    left=$(budget_left)
    if (( left < 10 )); then rc=98; step_s=0; return; fi
    limit=$(( c < left ? c : left ))
  fi
  cur_key=$key
  local t0
  t0=$(date +%s)
  timeout -k 5 "$limit" "$@" >>"$log" 2>&1 &
  cur_pid=$!
  wait "$cur_pid"
  rc=$?
  cur_pid="" cur_key=""
  step_s=$(( $(date +%s) - t0 ))
  step_limit_used=$limit
}

# The usual reading of rc for a step.
verdict() {  # key log
  case $rc in
    0) res[$1]="PASS in ${step_s} s" ;;
    98) res[$1]="SKIPPED: the time budget was spent"; status=1 ;;
    77) res[$1]="SKIPPED by the test binary: a test could not run (see $2)"; status=1 ;;
    124|137) res[$1]="TIMEOUT after ${step_limit_used} s (see $2)"; status=1 ;;
    *) res[$1]="FAIL rc=$rc in ${step_s} s (see $2)"; status=1 ;;
  esac
}

# ---- no GPU, or a dry run: the plan, nothing run ------------------------------------------------
gpu_list=$(nvidia-smi -L 2>/dev/null | grep '^GPU ' || true)
if [[ $dry -eq 1 || -z "$gpu_list" ]]; then
  if [[ $dry -eq 1 ]]; then why="dry run"; else why="no GPU here (nvidia-smi lists none)"; fi
  res[device]="${gpu_list:-none}"
  res[binaries]="SKIPPED: $why"
  for k in tests bench e2e oracle memcheck racecheck; do
    [[ "${res[$k]}" == "not part of --only e2e" ]] || res[$k]="SKIPPED: $why"
  done
  [[ $dry -eq 1 ]] || status=77
  exit $status
fi

nvidia-smi >"$out/device.txt" 2>&1
res[device]=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1)

# ---- binaries -----------------------------------------------------------------------------------
cur_key=binaries
if [[ -f .gpu/bundle.tar.xz && ( ! -x .gpu/bin/kvzip_tests || .gpu/bundle.tar.xz -nt .gpu/bin/kvzip_tests ) ]]; then
  rm -rf .gpu/bin .gpu/lib
  timeout 30 tar -C .gpu -xJf .gpu/bundle.tar.xz 2>>"$out/device.txt" ||
    timeout 30 python3 -c 'import tarfile,sys; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' .gpu/bundle.tar.xz .gpu
  touch .gpu/bin/* 2>/dev/null
fi
if [[ -x .gpu/bin/kvzip_tests ]]; then
  cublas_dir=$(python3 -c 'import nvidia.cublas, os; print(os.path.join(os.path.dirname(nvidia.cublas.__file__), "lib"))' 2>/dev/null || true)
  export LD_LIBRARY_PATH="$PWD/.gpu/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:${cublas_dir}:${LD_LIBRARY_PATH:-}:/usr/local/nvidia/lib64:/usr/local/nvidia/lib"
  tests=.gpu/bin/kvzip_tests bench=.gpu/bin/bench_gpu e2e=.gpu/bin/gpu_e2e oracle_bin=.gpu/bin/gpu_oracle
  ldd .gpu/bin/* >"$out/ldd.tmp" 2>&1
  cat "$out/ldd.tmp" >>"$out/device.txt"
  missing=$(grep '=> not found' "$out/ldd.tmp" | awk '{print $1}' | sort -u | tr '\n' ' ')
  rm -f "$out/ldd.tmp"
  res[binaries]="prebuilt (.gpu/bin from the bundle)${missing:+; MISSING libraries: $missing}"
  [[ -n "$missing" ]] && status=1
else
  bdir=build-gpu
  targets="kvzip_tests bench_gpu gpu_e2e gpu_oracle"
  [[ "$only" == "e2e" ]] && targets=gpu_e2e
  run_step binaries "$out/device.txt" bash -c "cmake -S . -B $bdir -DCMAKE_BUILD_TYPE=Release \
    -DKVZIP_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES='80;90' && cmake --build $bdir -j$(nproc) \
    --target $targets"
  if [[ $rc -ne 0 ]]; then verdict binaries "$out/device.txt"; exit 1; fi
  res[binaries]="built here in ${step_s} s (no bundle)"
  tests=$bdir/tests/kvzip_tests bench=$bdir/bench_gpu e2e=$bdir/gpu_e2e oracle_bin=$bdir/gpu_oracle
fi
cur_key=""

run_e2e() {
  local model="${KVZIP_MODEL:-}"
  [[ -z "$model" && -f .gpu/model.gguf ]] && model=.gpu/model.gguf
  if [[ -z "$model" ]] && compgen -G ".gpu/model.part*" >/dev/null; then
    model=/tmp/kvzip-default-model.gguf
    cat .gpu/model.part* >"$model"
    if [[ -f .gpu/model.sha256 ]] && [[ "$(sha256sum "$model" | awk '{print $1}')" != "$(cat .gpu/model.sha256)" ]]; then
      res[e2e]="SKIPPED: model pieces incomplete here ($(ls .gpu/model.part* | tr '\n' ' ')); copy the rest of .gpu/model.part* and run again with --only e2e"
      return
    fi
  fi
  local cached="${XDG_CACHE_HOME:-$HOME/.cache}/kvzip/models/SmolLM2-135M-Instruct.Q4_1.gguf"
  [[ -z "$model" && -s "$cached" ]] && model=$cached
  if [[ -z "$model" ]] && compgen -G "models/*.gguf" >/dev/null; then model=$(ls models/*.gguf | head -1); fi
  if [[ -n "$model" && -f "$model" ]]; then
    : >"$out/gpu_e2e.log"
    run_step e2e "$out/gpu_e2e.log" "$e2e" "$model" --squad examples/normans.json --out "$out"
    verdict e2e "$out/gpu_e2e.log"
  else
    res[e2e]="SKIPPED: no model (set KVZIP_MODEL, run scripts/fetch-model.sh, or copy .gpu/model.gguf)"
  fi
}

# compute-sanitizer over the small kernel tests; a device it does not support is a skip.
run_sanitizer() {  # key tool
  local log="$out/sanitizer.log"
  echo "==== compute-sanitizer --tool $2 ====" >>"$log"
  local before
  before=$(wc -l <"$log")
  run_step "$1" "$log" "$sanitizer" --tool "$2" --error-exitcode 9 "$tests" "[cuda][sanitize]"
  if [[ $rc -ne 0 && $rc -ne 98 && $rc -ne 124 && $rc -ne 137 ]] &&
     tail -n +"$before" "$log" | grep -qiE 'device not supported|not supported on this device|error 999|\(999\)|cudaErrorUnknown|CUDA_ERROR_UNKNOWN'; then
    res[$1]="SKIPPED: compute-sanitizer does not support this device ('Device not supported' / error 999): kernels NOT sanitizer-checked"
    notes+=("the $2 skip is the tool's refusal of this GPU, not a kvzip failure; the plain [cuda] run above is the check that counts")
    return
  fi
  verdict "$1" "$log"
}

if [[ "$only" == "e2e" ]]; then
  run_e2e
  exit $status
fi

# ---- parity tests: fresh inputs each run (Catch prints the seed) --------------------------------
: >"$out/tests_cuda.log"
run_step tests "$out/tests_cuda.log" env KVZIP_REQUIRE_GPU=1 "$tests" "[cuda]" -d yes --rng-seed time
verdict tests "$out/tests_cuda.log"
summary=$(grep -E 'test cases|All tests passed' "$out/tests_cuda.log" | tail -1)
[[ -n "$summary" ]] && res[tests]+=" — $summary"

# ---- benchmarks ---------------------------------------------------------------------------------
: >"$out/bench_gpu.log"
run_step bench "$out/bench_gpu.log" "$bench" --out "$out"
verdict bench "$out/bench_gpu.log"

run_e2e

# ---- independent oracle: PyTorch on a tiny random Llama vs kvzip cpu and cuda ------------------
: >"$out/oracle.log"
if [[ ! -x "$oracle_bin" ]]; then
  res[oracle]="SKIPPED: no gpu_oracle binary (an older bundle?)"
else
  run_step oracle "$out/oracle.log" python3 scripts/golden/tiny_llama_oracle.py \
    --oracle "$oracle_bin" --out /tmp/kvzip-oracle
  if [[ $rc -eq 77 ]]; then
    res[oracle]="SKIPPED: $(grep -m1 SKIPPED "$out/oracle.log" | cut -c10-)"
  else
    verdict oracle "$out/oracle.log"
    [[ $rc -eq 0 ]] && res[oracle]+=" — $(grep -E '^kvzip_cuda' "$out/oracle.log" | tr -s ' ' | cut -c1-90)"
  fi
fi

# ---- memory and race checking on the kernel-level tests -----------------------------------------
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer \
  /usr/local/cuda/compute-sanitizer/compute-sanitizer 2>/dev/null | head -1)
: >"$out/sanitizer.log"
if [[ -n "$sanitizer" ]]; then
  run_sanitizer memcheck memcheck
  run_sanitizer racecheck racecheck
else
  res[memcheck]="SKIPPED: compute-sanitizer not installed"
  res[racecheck]="SKIPPED: compute-sanitizer not installed"
fi
exit $status
