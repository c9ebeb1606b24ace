#!/usr/bin/env bash
# Installs everything Plexus needs on a fresh Debian machine (run as root): the Debian packages the daemon,
# the shim build and the tests use, then the npm packages from the lockfile, then builds. Safe to re-run.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  iproute2                     # ip netns for tests and the demo (product code talks rtnetlink itself)
  iputils-ping                 # the demo and tests ping between pods
  containernetworking-plugins  # CNI plugins 1.1.1 in /usr/lib/cni: test nodes' networks (bench and delegation: 1.9.1, ../shared)
  musl-tools                   # musl-gcc: builds plexus-cni as a small static binary
  gcc make libc6-dev           # fallback compiler and the ASan build of plexus-cni
  valgrind                     # the shim's memory tests
  time                         # /usr/bin/time: the benchmark reads the shim's peak RSS
  containerd runc              # a real runtime (Debian's containerd 1.6) for the runtime tests
  util-linux                   # nsenter: tests look inside a container's network namespace
  clang libclang-rt-14-dev     # libFuzzer: the shim's parsers are fuzzed in the test suite
  etcd-server openssl xz-utils # a real kube-apiserver (../shared/k8s) for the Kubernetes tests, with its etcd and certs
  busybox-static               # the image's shell and tools (scripts/image.sh)
  openvswitch-switch-dpdk      # a userspace switch (OVS-DPDK) for the memif tests, started privately by each test
  librte-net-memif23 librte-mempool-ring23  # DPDK's memif driver and mempool for that switch and its clients
  dpdk-dev                     # dpdk-testpmd: the memif clients of the data-plane test and benchmark
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # Packages must not start services on this machine (openvswitch-switch would start a host switch): tests start
  # their own. policy-rc.d answers "not now" to every service start during the install, then goes.
  own_policy=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d && own_policy=1
  fi
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null || { [ -n "$own_policy" ] && rm -f /usr/sbin/policy-rc.d; exit 1; }
  [ -n "$own_policy" ] && rm -f /usr/sbin/policy-rc.d
fi

if [ ! -d node_modules ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  echo "setup: installing npm packages from package-lock.json"
  npm ci --no-audit --no-fund --loglevel=error
fi

npm run --silent build
echo "setup: done (bin/plexus-cni, bin/plexusd, bin/plexusctl are built)"
