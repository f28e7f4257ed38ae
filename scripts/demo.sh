#!/usr/bin/env bash
# The main job end to end on the default model: installs the build dependencies, builds kvzip,
# fetches SmolLM2-135M-Instruct (Q4_1 GGUF), compresses an example document (the SQuAD "Normans"
# article) with KVzip at ratio 0.3, inspects the .kvz, and answers several questions from it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
# Only the executable the demo runs (the tests, benchmarks and CUDA emulator are the test
# command's): configure as scripts/build.sh does, build the one target.
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target kvzip
KVZIP_MODEL=$(bash scripts/fetch-model.sh); export KVZIP_MODEL
kz=./build/kvzip
out=${KVZIP_DEMO_DIR:-out/demo}
mkdir -p "$out"
doc="$out/normans.txt"
python3 scripts/squad_doc.py examples/normans.json "$doc" "$out/questions.txt" 6

echo "== compress (KVzip, keep 30% of the document's KV pairs) =="
$kz compress "$doc" -o "$out/normans.kvz" --ratio 0.3 -f
echo "== inspect =="
$kz inspect "$out/normans.kvz" > "$out/inspect.txt"
head -n 16 "$out/inspect.txt"
echo "== query (every question answered from the same compressed file) =="
$kz query "$out/normans.kvz" --questions "$out/questions.txt" -n 32
