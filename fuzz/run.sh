#!/usr/bin/env bash
# Builds fuzz_reader with clang (build dir build-fuzz/) and fuzzes the .kvz reader for a fixed
# time, seeded with the golden and bad files of tests/golden/. Usage: fuzz/run.sh [SECONDS]
# (default 60). Exit status is non-zero when libFuzzer finds a crash, leak or sanitizer report;
# the reproducer is left in build-fuzz/ (crash-*, leak-*, timeout-*).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
cmake -S . -B build-fuzz -DKVZIP_FUZZ=ON -DKVZIP_TESTS=OFF -DKVZIP_CUDA=OFF -DKVZIP_NATIVE=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ >/dev/null
cmake --build build-fuzz --target fuzz_reader -j"$(nproc)"
corpus=build-fuzz/corpus
mkdir -p "$corpus"
cp tests/golden/kvz/*.kvz tests/golden/bad/*.kvz "$corpus"/
cd build-fuzz
./fuzz/fuzz_reader -max_total_time="$seconds" -max_len=65536 -rss_limit_mb=2048 -timeout=10 \
  -print_final_stats=1 corpus
