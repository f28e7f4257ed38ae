#!/usr/bin/env bash
# Prepares, on a development machine with nvcc (no GPU needed), everything scripts/gpu-check.sh
# needs on a bare GPU machine that cannot install packages or reach the network:
#   .gpu/bin/   kvzip_tests, bench_gpu, gpu_e2e, kvzip (CUDA build, sm_80 + sm_90, no -march=native)
#   .gpu/lib/   the shared libraries they need beyond glibc, libstdc++ and the CUDA toolkit's own
#   .gpu/model.partNN  the default model split in pieces small enough to travel (optional)
# Usage: scripts/gpu-bundle.sh [BUILD_DIR=build-cuda] [MODEL=$KVZIP_MODEL]
# The pieces are joined on the GPU machine by gpu-check.sh (cat .gpu/model.part* > model).
set -euo pipefail
cd "$(dirname "$0")/.."
bdir="${1:-build-cuda}"
model="${2:-${KVZIP_MODEL:-}}"
cmake -S . -B "$bdir" -DCMAKE_BUILD_TYPE=Release -DKVZIP_CUDA=ON -DKVZIP_NATIVE=OFF \
  -DCMAKE_CUDA_ARCHITECTURES="80;90" >/dev/null
cmake --build "$bdir" -j"$(nproc)" --target kvzip_tests bench_gpu gpu_e2e kvzip
rm -rf .gpu/bin .gpu/lib
mkdir -p .gpu/bin .gpu/lib
cp "$bdir/tests/kvzip_tests" "$bdir/bench_gpu" "$bdir/gpu_e2e" "$bdir/kvzip" .gpu/bin/
strip .gpu/bin/*
# Libraries the binaries load, except those every Linux and every CUDA machine has.
ldd .gpu/bin/* | awk '/=> \// {print $3}' | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|libstdc++.so*|libgcc_s.so*) ;;
    libcuda.so*|libcudart.so*|libcublas.so*|libcublasLt.so*) ;;
    *) cp -L "$lib" .gpu/lib/ ;;
  esac
done
if [[ -n "$model" && -f "$model" ]]; then
  rm -f .gpu/model.part*
  split -b 40M -d "$model" .gpu/model.part
fi
du -sh .gpu/bin .gpu/lib
ls -la .gpu
