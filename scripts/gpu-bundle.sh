#!/usr/bin/env bash
# Prepares, on a machine with nvcc (no GPU needed), what scripts/gpu-check.sh needs on a GPU
# machine that has no compiler, no build dependencies or no network:
#   .gpu/bundle.tar.xz   bin/{kvzip_tests,bench_gpu,gpu_e2e,gpu_oracle,kvzip} (CUDA build, sm_80 + sm_90, no
#                        -march=native) and lib/ (the shared libraries they load beyond glibc,
#                        libstdc++ and the CUDA toolkit's own); about 16 MB. gpu_oracle serves
#                        scripts/golden/tiny_llama_oracle.py, which travels with the tree
#   .gpu/model.gguf      the model for gpu_e2e (default: $KVZIP_MODEL), and .gpu/model.sha256
#   or, with --split MIB, .gpu/model.part00, .part01, ... of at most MIB MiB each instead of
#                        model.gguf, for a copy with a per-transfer size limit; gpu-check.sh joins
#                        them and checks the sum (copy the bundle and the first piece, run the
#                        check, then the other pieces and `gpu-check.sh --only e2e`)
# Usage: scripts/gpu-bundle.sh [--split MIB] [BUILD_DIR=build-cuda] [MODEL=$KVZIP_MODEL]
# Copy the repository with .gpu/ to the GPU machine and run scripts/gpu-check.sh there (docs/gpu.md).
set -euo pipefail
cd "$(dirname "$0")/.."
split=0
if [[ "${1:-}" == "--split" ]]; then split="${2:?--split needs a size in MiB}"; shift 2; fi
[[ "$split" =~ ^[0-9]+$ ]] || { echo "gpu-bundle: --split takes whole MiB, got '$split'" >&2; exit 2; }
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
  rm -f .gpu/model.part* .gpu/model.gguf
  if (( split > 0 )); then
    split -d -a 2 -b "${split}M" "$model" .gpu/model.part
  else
    cp "$model" .gpu/model.gguf
  fi
  (cd "$(dirname "$model")" && sha256sum "$(basename "$model")") | awk '{print $1}' >.gpu/model.sha256
fi
ls -la .gpu
