#!/usr/bin/env bash
# Prepares, on a development machine with nvcc (no GPU needed), what scripts/gpu-check.sh needs
# on a bare GPU machine that cannot install packages or reach the network, in sizes that fit a
# 64 MiB transfer each:
#   .gpu/bundle.tar.xz   bin/{kvzip_tests,bench_gpu,gpu_e2e,gpu_oracle,kvzip} (CUDA build, sm_80 + sm_90, no
#                        -march=native) and lib/ (the shared libraries they load beyond glibc,
#                        libstdc++ and the CUDA toolkit's own); about 16 MB. gpu_oracle serves
#                        scripts/golden/tiny_llama_oracle.py, which travels with the tree
#   .gpu/model.part00 (40 MiB), .gpu/model.part01 (the rest), .gpu/model.sha256: the default model
#                        in two pieces, joined and verified by gpu-check.sh
# Usage: scripts/gpu-bundle.sh [BUILD_DIR=build-cuda] [MODEL=$KVZIP_MODEL]
set -euo pipefail
cd "$(dirname "$0")/.."
bdir="${1:-build-cuda}"
model="${2:-${KVZIP_MODEL:-}}"
cmake -S . -B "$bdir" -DCMAKE_BUILD_TYPE=Release -DKVZIP_CUDA=ON -DKVZIP_NATIVE=OFF \
  -DCMAKE_CUDA_ARCHITECTURES="80;90" >/dev/null
cmake --build "$bdir" -j"$(nproc)" --target kvzip_tests bench_gpu gpu_e2e gpu_oracle kvzip
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib" .gpu
cp "$bdir/tests/kvzip_tests" "$bdir/bench_gpu" "$bdir/gpu_e2e" "$bdir/gpu_oracle" "$bdir/kvzip" "$stage/bin/"
strip "$stage"/bin/*
ldd "$stage"/bin/* | awk '/=> \// {print $3}' | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|libresolv.so*|ld-linux*) ;;  # glibc: the host's
    libstdc++.so*|libgcc_s.so*) ;;
    libcuda.so*|libcudart.so*|libcublas.so*|libcublasLt.so*) ;;
    *) cp -L "$lib" "$stage/lib/" ;;
  esac
done
tar -C "$stage" -cJf .gpu/bundle.tar.xz bin lib
if [[ -n "$model" && -f "$model" ]]; then
  rm -f .gpu/model.part*
  # 40 MiB first (it travels with the ~14 MB bundle), the rest second: each call stays < 64 MiB.
  head -c 41943040 "$model" >.gpu/model.part00
  tail -c +41943041 "$model" >.gpu/model.part01
  (cd "$(dirname "$model")" && sha256sum "$(basename "$model")") | awk '{print $1}' >.gpu/model.sha256
fi
ls -la .gpu
