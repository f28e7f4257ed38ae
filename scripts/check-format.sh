#!/usr/bin/env bash
# Checks that every C++ and CUDA file in the repository is formatted with its .clang-format
# (exit 1 with the files that are not). With --fix, formats them in place instead.
# The formatter is Debian 12's clang-format 14: another major version breaks some lines
# differently, so the check insists on 14 (scripts/install-deps.sh installs it).
# Usage: scripts/check-format.sh [--fix]
set -euo pipefail
cd "$(dirname "$0")/.."
fmt=$(command -v clang-format-14 || true)
if [[ -z $fmt ]]; then
  echo "check-format: clang-format-14 not found (Debian package clang-format-14;" \
    "scripts/install-deps.sh installs it)" >&2
  exit 1
fi
mapfile -t files < <(git ls-files '*.h' '*.cc' '*.cu' '*.cuh' '*.cpp' '*.hpp')
if [[ ${1:-} == --fix ]]; then
  "$fmt" -i "${files[@]}"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  "$fmt" --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if ((${#bad[@]})); then
  echo "check-format: ${#bad[@]} file(s) differ from .clang-format" \
    "(scripts/check-format.sh --fix formats them):" >&2
  printf '  %s\n' "${bad[@]}" >&2
  exit 1
fi
echo "check-format: ${#files[@]} files formatted"
