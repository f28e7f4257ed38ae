#!/usr/bin/env bash
# The test command (README): installs what the tests need (Debian packages, the default model),
# builds, runs the whole suite with CTest, then runs the unit tests again in an ASan+UBSan build.
# Tests tagged [realmodel] use the real model; they find it through $KVZIP_MODEL. Here the model
# is fetched, so KVZIP_REQUIRE_MODEL=1 turns a [realmodel] skip (model missing) into a failure;
# [cuda] tests without a GPU are reported by CTest as skipped (tests/support/skip.h). The Slurm
# test brings up its own one-node cluster; KVZIP_REQUIRE_SLURM=1 makes its skip a failure. The
# serve failover test runs its own nginx; KVZIP_REQUIRE_NGINX=1 makes its skip a failure.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
bash scripts/install-deps.sh --test
KVZIP_MODEL=$(bash scripts/fetch-model.sh)
export KVZIP_MODEL KVZIP_REQUIRE_MODEL=1 KVZIP_REQUIRE_SLURM=1 KVZIP_REQUIRE_NGINX=1

echo "== build (Release) =="
bash scripts/build.sh build
echo "== tests (Release) =="
ctest --test-dir build --output-on-failure -j"$jobs"

echo "== build (ASan+UBSan, CPU only) =="
bash scripts/build.sh build-asan -DKVZIP_SANITIZE=ON -DKVZIP_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo
echo "== unit tests (ASan+UBSan) =="
# A CPU-only build: the [cuda] tests would only skip (exit status 77), so they are left out.
ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
  ./build-asan/tests/kvzip_tests "~[realmodel]" "~[slow]" "~[cuda]"

echo "== fuzz the .kvz reader for 60 s (libFuzzer, ASan+UBSan) =="
bash fuzz/run.sh 60
