#!/usr/bin/env bash
# The test command (README): checks the house rules and the formatting, installs what the tests need
# (Debian packages, the models), builds, runs the whole suite with CTest, then runs the unit tests
# again in an ASan+UBSan build, fuzzes the .kvz reader, runs the Python package's tests
# (scripts/test-python.sh), and reads the Gemma 3 tokenizer.json that transformers converts from the
# GGUF through the C++ loader. Each stage prints its time. Tests tagged [realmodel] use the real
# models; they find them through $KVZIP_MODEL (and $KVZIP_GEMMA_MODEL, $KVZIP_QWEN_MODEL). Here the
# models are fetched, so KVZIP_REQUIRE_MODEL=1 (and KVZIP_REQUIRE_GEMMA=1, KVZIP_REQUIRE_QWEN=1)
# turn a [realmodel] skip (model missing) into a failure; [cuda] tests without a GPU are reported by
# CTest as skipped (tests/support/skip.h). The Slurm test brings up its own one-node cluster;
# KVZIP_REQUIRE_SLURM=1 makes its skip a failure. The serve failover test runs its own nginx;
# KVZIP_REQUIRE_NGINX=1 makes its skip a failure. Time: the test builds compile CUDA for one
# architecture (sm_90: compiling is what is checked here; scripts/build.sh builds both for use), and
# the sanitizer build compiles the test executable only (no benchmarks).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
t_start=$(date +%s)
t_stage=$t_start
stage() {  # closes the previous stage with its time, opens the next
  local now; now=$(date +%s)
  [ -n "${stage_name:-}" ] && echo "-- ${stage_name}: $((now - t_stage)) s"
  stage_name="$1"; t_stage=$now
  [ -n "$1" ] && echo "== $1 =="
  return 0
}

stage "house rules (BENCHMARKS.md a results page)"
bash scripts/check-house.sh

stage "install (Debian packages, models)"
bash scripts/install-deps.sh --test
KVZIP_MODEL=$(bash scripts/fetch-model.sh)
KVZIP_GEMMA_MODEL=$(bash scripts/fetch-model.sh gemma3-270m)
KVZIP_QWEN_MODEL=$(bash scripts/fetch-model.sh qwen2.5-0.5b)
export KVZIP_MODEL KVZIP_GEMMA_MODEL KVZIP_QWEN_MODEL KVZIP_REQUIRE_MODEL=1 KVZIP_REQUIRE_GEMMA=1 \
  KVZIP_REQUIRE_QWEN=1 KVZIP_REQUIRE_SLURM=1 KVZIP_REQUIRE_NGINX=1

stage "format (.clang-format over every C++ and CUDA file)"
bash scripts/check-format.sh

stage "build (Release)"
bash scripts/build.sh build -DCMAKE_CUDA_ARCHITECTURES=90 -DKVZIP_WERROR=ON
stage "tests (Release)"
ctest --test-dir build --output-on-failure -j"$jobs"

stage "build (ASan+UBSan, CPU only)"
# -O1 with line tables only (-g1): half the compile time of RelWithDebInfo's -O2 -g, and the
# reports still name file and line.
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
  -DKVZIP_SANITIZE=ON -DKVZIP_CUDA=OFF >/dev/null
cmake --build build-asan --target kvzip_tests -j"$jobs"
stage "unit tests (ASan+UBSan)"
# A CPU-only build: the [cuda] tests would only skip (exit status 77), so they are left out; so
# are the [memory] tests, which measure the process's resident memory (run by CTest above), and
# the hidden ([.]) cases, run only by name (the golden generators rewrite committed files).
ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
  ./build-asan/tests/kvzip_tests "~[realmodel]" "~[cuda]" "~[memory]" "~[.]"

stage "fuzz the .kvz reader for 60 s (libFuzzer, ASan+UBSan)"
bash fuzz/run.sh 60

stage "Python package (pip install . in build/, pytest; torch and transformers in a cached venv)"
KVZIP_PY_BUILD_DIR=build bash scripts/test-python.sh

stage "Gemma 3 tokenizer.json (transformers' conversion of the GGUF) through the C++ loader"
tokjson="${XDG_CACHE_HOME:-$HOME/.cache}/kvzip/models/gemma-3-270m-tokenizer.json"
[ -f "$tokjson" ] || "${KVZIP_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/kvzip/venv}/bin/python" \
  scripts/golden/make_gemma3_tokenizer_json.py --model "$KVZIP_GEMMA_MODEL" --out "$tokjson"
KVZIP_GEMMA_TOKENIZER_JSON="$tokjson" KVZIP_REQUIRE_GEMMA_TOKENIZER_JSON=1 \
  ./build/tests/kvzip_tests "[gemma_tokenizer_json]"

stage ""
echo "== all stages: $(( $(date +%s) - t_start )) s =="
