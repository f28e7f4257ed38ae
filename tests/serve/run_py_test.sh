#!/usr/bin/env bash
# CTest entries `serve_openai` and `serve_failover` (label realmodel): runs a tests/serve/*.py
# integration test with the official `openai` Python client, pinned below, installed from PyPI
# into a venv in the build folder (BUILD_DIR/serve-venv, made once with the `python3` on PATH).
# Exit 77 (CTest: skipped) without $KVZIP_MODEL, unless KVZIP_REQUIRE_MODEL=1 asks for a failure
# instead; the script itself may skip the same way for what else it needs (nginx).
# Usage: run_py_test.sh SCRIPT KVZIP_BINARY SOURCE_DIR BUILD_DIR
set -euo pipefail
script=$1 kvzip=$2 src=$3 build=$4
OPENAI_VERSION=3.51.0
if [ -z "${KVZIP_MODEL:-}" ] || [ ! -f "$KVZIP_MODEL" ]; then
  echo "skipped: set KVZIP_MODEL to SmolLM2-135M-Instruct.Q4_1.gguf to run the serve integration tests"
  [ "${KVZIP_REQUIRE_MODEL:-0}" = 1 ] && exit 1
  exit 77
fi
venv="$build/serve-venv"
# One venv for both tests, which CTest may start at once: the first to get the lock installs.
exec 9>"$build/serve-venv.lock"
flock 9
if ! "$venv/bin/python" -c "import openai, sys; sys.exit(openai.__version__ != '$OPENAI_VERSION')" 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q "openai==$OPENAI_VERSION"
fi
flock -u 9
name=$(basename "$script" .py)
exec "$venv/bin/python" "$src/tests/serve/$script" "$kvzip" "$src" "$build/$name-scratch"
