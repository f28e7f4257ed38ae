#!/usr/bin/env bash
# Keeps BENCHMARKS.md a results page: fails (exit 1, a message per problem) when it has more than
# 300 lines, when a table's header row has a "before" column (an A/B against an older build
# belongs in git and docs/, not on the page), or when it names a `BEFORE=` build; and keeps the
# library's messages free of command-line flags.
# Usage: scripts/check-house.sh [FILE]  (FILE relative to the repository root; default BENCHMARKS.md)
set -euo pipefail
cd "$(dirname "$0")/.."
file=${1:-BENCHMARKS.md}
max_lines=300
status=0

if [[ ! -f $file ]]; then
  echo "check-house: $file not found" >&2
  exit 1
fi

lines=$(wc -l <"$file")
if ((lines > max_lines)); then
  echo "check-house: $file has $lines lines, more than $max_lines: keep one current table per" \
    "area and move explanation to docs/" >&2
  status=1
fi

# A header row is a table row directly followed by its |---| separator row.
before_headers=$(awk '
  /^[[:space:]]*\|/ {
    if (prev != "" && $0 ~ /^[[:space:]]*\|[[:space:]:|-]*-[[:space:]:|-]*$/ &&
        tolower(prev) ~ /(^|[^a-z])before([^a-z]|$)/)
      printf "%d: %s\n", prev_nr, prev
    prev = $0; prev_nr = NR; next
  }
  { prev = "" }
' "$file")
if [[ -n $before_headers ]]; then
  echo "check-house: $file has a table with a \"before\" column (keep current results only):" >&2
  echo "$before_headers" >&2
  status=1
fi

before_builds=$(grep -n 'BEFORE=' "$file" || true)
if [[ -n $before_builds ]]; then
  echo "check-house: $file names a BEFORE= build (keep current results only):" >&2
  echo "$before_builds" >&2
  status=1
fi

# The library's messages name options in its own words ("option force"); the command line shows
# them as its flags (cli::with_flag_names). Front ends (cli/, serve/, python/) may name flags.
lib_dirs=()
for d in */; do
  case ${d%/} in
    cli | serve | python | tests | bench | fuzz | spec | docs | scripts | examples | build*) ;;
    *) compgen -G "${d}*.cc" >/dev/null || compgen -G "${d}*/*.cc" >/dev/null && lib_dirs+=("${d%/}") ;;
  esac
done
flag_lines=$(grep -rnE --include='*.cc' --include='*.h' '"[^"]*(^|[ (`])--[a-z]' "${lib_dirs[@]}" |
  grep -vE '^[^:]+:[0-9]+:[[:space:]]*//' || true)
if [[ -n $flag_lines ]]; then
  echo "check-house: library messages name command-line flags (write \"option FIELD\" and map it in" \
    "cli::with_flag_names):" >&2
  echo "$flag_lines" >&2
  status=1
fi

exit $status
