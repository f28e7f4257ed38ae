#!/usr/bin/env bash
# CTest entry `serve_openai` (label realmodel): runs tests/serve/serve_openai_test.py with the
# official `openai` Python client, pinned below, installed from PyPI into a venv in the build
# folder (BUILD_DIR/serve-venv, made once with the `python3` on PATH). Exit 77 (CTest: skipped)
# without $KVZIP_MODEL, unless KVZIP_REQUIRE_MODEL=1 asks for a failure instead.
# Usage: run_openai_test.sh KVZIP_BINARY SOURCE_DIR BUILD_DIR
set -euo pipefail
kvzip=$1 src=$2 build=$3
OPENAI_VERSION=3.51.0
if [ -z "${KVZIP_MODEL:-}" ] || [ ! -f "$KVZIP_MODEL" ]; then
  echo "skipped: set KVZIP_MODEL to SmolLM2-135M-Instruct.Q4_1.gguf to run the serve integration test"
  [ "${KVZIP_REQUIRE_MODEL:-0}" = 1 ] && exit 1
  exit 77
fi
venv="$build/serve-venv"
if ! "$venv/bin/python" -c "import openai, sys; sys.exit(openai.__version__ != '$OPENAI_VERSION')" 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q "openai==$OPENAI_VERSION"
fi
exec "$venv/bin/python" "$src/tests/serve/serve_openai_test.py" "$kvzip" "$src" "$build/serve-it"
