#!/usr/bin/env bash
# End-to-end test of corpus mode on a real scheduler: brings up a one-node Slurm cluster on this
# machine (munge + slurmctld + slurmd from Debian's slurm-wlm, private config and state in a temp
# folder), submits scripts/slurm/compress-array.sbatch as a 4-task array over a small manifest,
# waits, checks every cache with `kvzip inspect --verify` and the task summaries, submits again
# and checks that everything is skipped, then stops every daemon it started.
#
#   scripts/slurm/test-slurm.sh KVZIP_BINARY [MODEL]     (MODEL default: $KVZIP_MODEL)
#
# Exit 0: passed; 77: skipped (no slurm-wlm/munge, not root); anything else: failed.
# KVZIP_REQUIRE_SLURM=1 turns a skip into a failure (CI installs the packages and sets it).
set -euo pipefail
kvzip=$(readlink -f "${1:?usage: test-slurm.sh KVZIP_BINARY [MODEL]}")
model=${2:-${KVZIP_MODEL:-}}
here=$(cd "$(dirname "$0")" && pwd)

skip() {
  echo "SKIPPED: $*"
  if [ "${KVZIP_REQUIRE_SLURM:-0}" = 1 ]; then echo "KVZIP_REQUIRE_SLURM=1: a skip is a failure"; exit 1; fi
  exit 77
}
for b in slurmctld slurmd sbatch squeue munged; do
  command -v "$b" >/dev/null || [ -x "/usr/sbin/$b" ] || skip "$b not installed (apt-get install slurm-wlm munge)"
done
[ "$(id -u)" = 0 ] || skip "needs root to run slurmd"
[ -n "$model" ] && [ -f "$model" ] || skip "no model: give MODEL or set KVZIP_MODEL"
model=$(readlink -f "$model")
export PATH="$PATH:/usr/sbin"

work=$(mktemp -d /tmp/kvzip-slurm.XXXXXX)
pids=()
cleanup() {
  set +e
  [ -n "${SLURM_CONF:-}" ] && scancel --quiet --user=root >/dev/null 2>&1
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
  [ -f "$work/munge/munged.pid" ] && kill "$(cat "$work/munge/munged.pid")" 2>/dev/null  # it daemonizes
  rm -rf "$work"
}
trap cleanup EXIT

# munge: a private key and socket, so a system munged (if any) is left alone.
mkdir -p "$work/munge" "$work/state" "$work/spool" "$work/out" "$work/docs"
chmod 700 "$work/munge"
dd if=/dev/urandom of="$work/munge/munge.key" bs=1024 count=1 status=none
chmod 400 "$work/munge/munge.key"
munged --force --key-file="$work/munge/munge.key" --socket="$work/munge/socket" \
  --pid-file="$work/munge/munged.pid" --log-file="$work/munge/munged.log" --seed-file="$work/munge/seed"
sleep 0.5
export MUNGE_SOCKET="$work/munge/socket"

host=$(hostname -s)
cpus=$(nproc)
port=$(( 20000 + RANDOM % 20000 ))
cat > "$work/slurm.conf" <<CONF
ClusterName=kvzip-test
SlurmctldHost=$host
SlurmctldPort=$port
SlurmdPort=$(( port + 1 ))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$work/munge/socket
CredType=cred/munge
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/slurmctld.log
SlurmdLogFile=$work/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
MpiDefault=none
NodeName=$host CPUs=$cpus State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF="$work/slurm.conf"
slurmctld -D -f "$SLURM_CONF" >"$work/slurmctld.out" 2>&1 & pids+=($!)
slurmd -D -f "$SLURM_CONF" >"$work/slurmd.out" 2>&1 & pids+=($!)
for _ in $(seq 100); do
  sinfo -h -o %T 2>/dev/null | grep -qE '^(idle|mixed|allocated)' && break
  sleep 0.2
done
if ! sinfo -h -o %T | grep -qE '^(idle|mixed|allocated)'; then
  echo "FAIL: the one-node cluster did not come up"; for f in "$work"/slurm*.log "$work"/*.out; do echo "== $f"; tail -n 20 "$f"; done; exit 1
fi

# A manifest of 8 short documents (a paragraph each) plus one bad line that must fail alone.
for i in $(seq 0 7); do
  printf 'Paragraph %d. In the year %d the duke of region %d built a castle by the river, and the town that grew around it traded wool and salt for three centuries.\n' \
    "$i" $((900 + 37 * i)) "$i" > "$work/docs/d$i.txt"
  printf '{"id": "d%d", "path": "docs/d%d.txt"}\n' "$i" "$i" >> "$work/manifest.jsonl"
done
printf '{"id": "bad", "path": "docs/missing.txt"}\n' >> "$work/manifest.jsonl"

submit() {  # waits for the array to finish; prints the job id
  local id
  id=$(KVZIP="$kvzip" KVZIP_MODEL="$model" sbatch --parsable --array=0-3 --cpus-per-task=1 \
       --output="$work/task-%a.log" --chdir="$work" \
       "$here/compress-array.sbatch" "$work/manifest.jsonl" "$work/out" --ratio 0.3 -m "$model")
  for _ in $(seq 1500); do
    [ -z "$(squeue -h -j "$id" 2>/dev/null)" ] && break
    sleep 0.2
  done
  if [ -n "$(squeue -h -j "$id" 2>/dev/null)" ]; then echo "FAIL: array $id did not finish"; exit 1; fi
  echo "$id"
}

summaries() {  # sums one field over the four task summaries
  python3 - "$work/out" "$1" <<'PY'
import json, sys, glob
total = 0
files = sorted(glob.glob(sys.argv[1] + "/summary-*-of-4.json"))
assert len(files) == 4, files
for f in files:
    total += json.load(open(f))[sys.argv[2]]
print(total)
PY
}

submit >/dev/null
ls "$work/out"
[ "$(summaries done)" = 8 ] || { echo "FAIL: first run: done $(summaries done), want 8"; cat "$work"/task-*.log; exit 1; }
[ "$(summaries failed)" = 1 ] || { echo "FAIL: first run: failed $(summaries failed), want 1 (the missing file)"; exit 1; }
for i in $(seq 0 7); do
  "$kvzip" inspect --verify "$work/out/d$i.kvz" >/dev/null || { echo "FAIL: d$i.kvz does not verify"; exit 1; }
done
n=$(ls "$work/out" | grep -c '\.kvz$')
[ "$n" = 8 ] || { echo "FAIL: $n caches in the output folder, want 8"; exit 1; }

submit >/dev/null
[ "$(summaries skipped)" = 8 ] || { echo "FAIL: second run: skipped $(summaries skipped), want 8"; exit 1; }
[ "$(summaries done)" = 0 ] || { echo "FAIL: second run compressed again"; exit 1; }
echo "PASS: 4-task Slurm array compressed 8 documents (1 bad line failed alone); a resubmission skipped all 8"
