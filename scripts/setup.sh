#!/usr/bin/env bash
# Installs the system packages the build and the tests need. Idempotent: it
# installs only what is missing, and does nothing when everything is present.
#
#   pkg-config, clang, libclang-dev  bindgen for the DPDK bindings (dataplane/dpdk)
#   libdpdk-dev, dpdk                DPDK 22.11 headers, libraries and PMDs
#   dpdk-dev                         dpdk-testpmd, the peer nobody here wrote
#   libnuma-dev                      linked by DPDK's pkg-config flags
#   g++                              libFuzzer runtime for the fuzz targets
#   valgrind                         callgrind, for scripts/instruction-check.sh
#   prometheus                       promtool, which lints the metrics endpoint
#   iproute2                         `ip netns` and veth pairs for the af_packet
#                                    and af_xdp node tests (root), `ip link` for
#                                    the net_tap offload test
#   llvm-N                           llvm-profdata of rustc's own LLVM (N from
#                                    `rustc -vV`), for scripts/build-pgo.sh
#   fio, qemu-utils, libnbd-bin      the NBD clients `falcon nbd-gateway`'s tests
#                                    drive (fio's nbd engine, qemu-img,
#                                    nbdinfo and nbdcopy)
#   nbdkit                           the reference NBD server scripts/bench-nbd.sh
#                                    measures the gateway against
set -euo pipefail

packages=(pkg-config clang libclang-dev libdpdk-dev dpdk dpdk-dev libnuma-dev g++ valgrind iproute2 prometheus
          fio qemu-utils libnbd-bin nbdkit)
# The profile-guided build needs the llvm-profdata of the LLVM rustc is built
# on: raw profiles change format between LLVM releases.
llvm_major=$(rustc -vV 2>/dev/null | sed -n 's/^LLVM version: \([0-9]*\).*/\1/p' || true)
if [ -n "$llvm_major" ]; then
    packages+=("llvm-$llvm_major")
fi

missing=()
for p in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$p")
    fi
done

if [ ${#missing[@]} -eq 0 ]; then
    echo "setup: all system packages present"
else
    echo "setup: installing ${missing[*]}"
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# rustfmt and clippy come with the toolchain; add them when a minimal profile lacks them.
if command -v rustup >/dev/null 2>&1; then
    rustup component list --installed 2>/dev/null | grep -q '^rustfmt' || rustup component add rustfmt
    rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy
fi
