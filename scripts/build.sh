#!/usr/bin/env bash
# Configures and builds kvzip. Usage: scripts/build.sh [BUILD_DIR] [extra cmake args...]
# Default BUILD_DIR is build/. CUDA is enabled automatically when nvcc is found.
set -euo pipefail
cd "$(dirname "$0")/.."
bdir="${1:-build}"; shift || true
cmake -S . -B "$bdir" -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build "$bdir" -j"$(nproc)"
