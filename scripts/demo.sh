#!/usr/bin/env bash
# The main job end to end on the default model: installs the build dependencies, builds kvzip,
# fetches SmolLM2-135M-Instruct (Q4_1 GGUF), compresses the example document, and answers
# questions from the compressed file. Until compression lands, it generates an answer instead.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh build
KVZIP_MODEL=$(bash scripts/fetch-model.sh); export KVZIP_MODEL
kz=./build/kvzip
echo "== generate (greedy) =="
$kz generate -p "The capital of France is" -n 8
echo
echo "== generate (chat) =="
$kz generate --chat -p "Name three primary colours." -n 48
