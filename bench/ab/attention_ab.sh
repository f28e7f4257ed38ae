#!/usr/bin/env bash
# In-process A/B of the CPU attention kernel (attention_ab.cc): variant A is
# kernels/cpu/attention.cc at git revision REV, variant B the working tree's, both compiled with
# BUILD's flags for the kernel library and linked against BUILD's libraries. Meant for changes
# inside attention.cc: both variants read the working tree's headers. WIDE=1 compares the 16-lane
# AVX-512 builds of the kernel (on a CPU with AVX-512 F/BW). Arguments after REV go to the
# program (--tokens, --len, --threads, --rounds, --heads, --bf16); several shapes: separate runs.
#   bash bench/ab/attention_ab.sh build-rel HEAD --tokens 512 --len 2048 --threads 1 --rounds 30
set -euo pipefail
[ $# -ge 2 ] || { sed -n 2,9p "$0" >&2; exit 2; }
build=$(cd "$1" && pwd); rev=$2; shift 2
here=$(cd "$(dirname "$0")/../.." && pwd)
flags_file="$build/CMakeFiles/kvzip_kernels.dir/flags.make"
[ -f "$flags_file" ] || { echo "attention_ab: $build is not a kvzip build tree (no $flags_file)" >&2; exit 1; }
for lib in kvzip_kernels kvzip_common; do
  [ -f "$build/lib$lib.a" ] || { echo "attention_ab: $build/lib$lib.a missing; build the project first" >&2; exit 1; }
done
wide=${WIDE:-0}
if [ "$wide" = 1 ] && ! grep -qw avx512bw /proc/cpuinfo; then
  echo "attention_ab: WIDE=1 needs a CPU with AVX-512 F/BW" >&2; exit 1
fi
cxx=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$build/CMakeCache.txt")
read -r -a flags <<< "$(sed -n 's/^CXX_FLAGS = //p' "$flags_file")"
read -r -a defines <<< "$(sed -n 's/^CXX_DEFINES = //p' "$flags_file" | tr -d '\\')"
read -r -a includes <<< "$(sed -n 's/^CXX_INCLUDES = //p' "$flags_file")"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
git -C "$here" show "$rev:kernels/cpu/attention.cc" > "$work/attention_a.cc"
cp "$here/kernels/cpu/attention.cc" "$work/attention_b.cc"
for v in a b; do
  "$cxx" "${flags[@]}" "${defines[@]}" -I"$here" "${includes[@]}" -DAB_NS=v$v -DAB_WIDE="$wide" \
    -DAB_SRC="\"$work/attention_$v.cc\"" -c "$here/bench/ab/variant.cc" -o "$work/v$v.o" &
done
wait
"$cxx" "${flags[@]}" -I"$here" "${includes[@]}" -DAB_WIDE="$wide" "$here/bench/ab/attention_ab.cc" "$work/va.o" "$work/vb.o" \
  "$build/libkvzip_kernels.a" "$build/libkvzip_common.a" -lopenblas -lpthread -o "$work/attention_ab"
echo "A = $rev ($(git -C "$here" rev-parse --short "$rev")), B = the working tree; $([ "$wide" = 1 ] && echo "16-lane" || echo "the build's") kernel"
"$work/attention_ab" "$@"
