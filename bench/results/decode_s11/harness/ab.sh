#!/bin/bash
# ab.sh TYPE OUT IN THR REPS ROUNDS : alternate dec_old / dec, print best GB/s of each
ty=$1; out=$2; in=$3; thr=$4; reps=${5:-40}; rounds=${6:-5}
bo=0; bn=0
for i in $(seq $rounds); do
  o=$(nice -n -5 /tmp/dec/dec_old $ty $out $in $thr $reps | awk '{print $(NF-3)}')
  n=$(nice -n -5 /tmp/dec/dec $ty $out $in $thr $reps | awk '{print $(NF-3)}')
  bo=$(python3 -c "print(max($bo,$o))"); bn=$(python3 -c "print(max($bn,$n))")
done
echo "$ty ${out}x${in} thr $thr: old $bo new $bn GB/s  ratio $(python3 -c "print(round($bn/$bo,3))")"
