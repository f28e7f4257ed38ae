#!/usr/bin/env bash
# The Python package's test command: a cached virtual environment
# (${XDG_CACHE_HOME:-~/.cache}/kvzip/venv; KVZIP_VENV overrides), the packages the tests need from
# PyPI (installed once; a stamp file records the list), the package built and installed from this
# checkout (`pip install .`, reusing build/python-* and ccache, or the CMake build folder
# $KVZIP_PY_BUILD_DIR), the default model, then pytest on
# tests/python. torch is installed as scripts/golden/README.md documents: the wheel without its
# dependencies, the four small NVIDIA libraries its import needs and its pure-Python
# dependencies (the default wheel would pull in GBs of CUDA libraries); accelerate (which
# transformers needs to load a GGUF) goes without dependencies too, or it would pull torch in.
# Everything runs on the CPU.
# Extra arguments go to pytest. Ends with pytest's closing line.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${KVZIP_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/kvzip/venv}"
py="${PYTHON:-python3}"

base=(pip numpy pytest h5py "scikit-build-core>=0.10" "nanobind>=2.0" gguf tokenizers safetensors
      "transformers>=4.56" psutil pyyaml filelock sympy networkx jinja2 fsspec typing-extensions setuptools)
torch=(torch accelerate nvidia-cufile==1.17.1.22.* nvidia-cusparselt-cu13==0.8.1 nvidia-nvshmem-cu13==3.7.2
       nvidia-nccl-cu13==2.30.7)
stamp="$venv/.kvzip-packages"
want="${base[*]} | ${torch[*]}"
if [ ! -x "$venv/bin/python" ]; then
  echo "== virtual environment $venv ==" >&2
  "$py" -m venv "$venv"
fi
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "== packages from PyPI ==" >&2
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade "${base[@]}"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps "${torch[@]}"
  echo "$want" > "$stamp"
fi

echo "== pip install . ==" >&2
if [ -n "${KVZIP_PY_BUILD_DIR:-}" ]; then
  # A configured CMake build folder to build in (scripts/test.sh passes its Release build): with
  # its own settings kept, scikit-build-core compiles only the extension and nanobind in it
  # instead of every library again.
  cache="$KVZIP_PY_BUILD_DIR/CMakeCache.txt"
  [ -f "$cache" ] || { echo "test-python.sh: $KVZIP_PY_BUILD_DIR has no CMakeCache.txt" >&2; exit 2; }
  setting() { sed -n "s/^$1:[A-Z]*=//p" "$cache"; }
  cfg=(-Cbuild-dir="$KVZIP_PY_BUILD_DIR" -Ccmake.define.KVZIP_CUDA="$(setting KVZIP_CUDA)"
       -Ccmake.define.KVZIP_TESTS="$(setting KVZIP_TESTS)")
  CMAKE_GENERATOR="$(setting CMAKE_GENERATOR)"
  export CMAKE_GENERATOR
else
  # Its own build folder (pyproject.toml): the package's tests run on the CPU, so the CUDA
  # backend is left out (nvcc is most of a fresh build's time).
  cfg=(-Ccmake.define.KVZIP_CUDA=OFF)
  if command -v ccache >/dev/null; then
    cfg+=(-Ccmake.define.CMAKE_C_COMPILER_LAUNCHER=ccache -Ccmake.define.CMAKE_CXX_COMPILER_LAUNCHER=ccache)
  fi
fi
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-build-isolation --no-deps "${cfg[@]}" .

KVZIP_MODEL="${KVZIP_MODEL:-$(bash scripts/fetch-model.sh)}"
export KVZIP_MODEL
echo "== pytest tests/python ==" >&2
cd tests/python  # so that `import kvzip` is the installed package, not ./python/kvzip
exec "$venv/bin/python" -m pytest -q -p no:cacheprovider "$@" .
