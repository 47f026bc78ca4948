#!/usr/bin/env bash
# The one test command (README, CI). Installs what is missing, then runs the
# formatter check, clippy with warnings as errors, every test of the workspace,
# the DPDK wrappers' tests on virtual devices, a build of the fuzz targets,
# the instruction-count check and the profile-guided build's pipeline.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh

export CARGO_TERM_COLOR=never
# Property tests: enough cases to find bugs, few enough for a 2-core CI machine.
export PROPTEST_CASES="${PROPTEST_CASES:-256}"

echo "== cargo fmt --check"
cargo fmt --all -- --check

echo "== cargo clippy"
cargo clippy --workspace --all-targets -- -D warnings
# falcon-core's library without its `testing` feature (the workspace build
# above has it: the falcon binary enables it).
cargo clippy -p falcon-core --lib -- -D warnings

echo "== cargo test"
# The libraries' tests run in the dev profile (debug assertions and overflow
# checks on). The falcon binary's end-to-end tests run the release build:
# `falcon demo` puts both nodes on one core with the machine's real clock,
# and a debug build starved of CPU by the suite's other tests can still
# stretch a node's transmit burst far beyond Swift's 25 µs target delay,
# collapse the fabric window and let queued pulls reach their 1 s timeout —
# a property of the slow build, not of the transport (the release demo
# keeps fcwnd above 1).
# `testing` on: falcon-core's module docs and its cluster test
# (tests/cluster.rs) need it; about a second.
cargo test --workspace --exclude falcon --features falcon-core/testing
cargo test --release -p falcon
# (That includes tests/node_udp.rs: two `falcon node` processes over the
# kernel UDP port on 127.0.0.1, the verify workload under 1 % loss, and
# `falcon bench udp`; about two seconds.)

echo "== DPDK: the bindings and their wrappers on virtual devices"
# falcon-dpdk with its `dpdk` feature: bindgen over the installed DPDK
# 22.11, the wrappers' lints, and their tests on an EAL with no hugepages
# and no PCI (each test binary is one process and one EAL).
cargo clippy -p falcon-dpdk --features dpdk --all-targets -- -D warnings
cargo clippy -p falcon --features dpdk --all-targets -- -D warnings
# (testpmd_peer runs Debian's dpdk-testpmd on core 1 as the memif peer.)
cargo test -p falcon-dpdk --features dpdk
# `falcon bench pipeline` on two null ports, the binary built with DPDK.
# One DPDK process at a time: each polls both cores.
cargo test --release -p falcon --features dpdk --test bench_pipeline -- --test-threads=1
# `falcon node` pairs as two processes over memif, and (as root) over
# af_packet and af_xdp on veth pairs between network namespaces.
cargo test --release -p falcon --features dpdk --test node_dpdk -- --test-threads=1
# `falcon run`: the loopback node on two lcores (dispatch, stats lines,
# metrics through promtool, SIGINT) and the initiator/target pair over memif.
cargo test --release -p falcon --features dpdk --test run_dpdk -- --test-threads=1
# `falcon pktgen`: a generator and a reflector as two processes over memif,
# flat out, at a rate, and IMIX pushes and pulls; both sides' counts agree.
cargo test --release -p falcon --features dpdk --test pktgen_dpdk -- --test-threads=1
# `falcon nvme-target` serving net_memif, `nvme-perf --connect --port memif
# --verify` against a RAM and a file namespace.
cargo test --release -p falcon --features dpdk --test nvme_target_dpdk -- --test-threads=1

echo "== fuzz targets build"
cargo build --manifest-path fuzz/Cargo.toml --bins
# The engine harnesses' own tests: the seeds reach the engine, past crash
# inputs (fuzz/regressions/) run clean.
cargo test --manifest-path fuzz/Cargo.toml

echo "== release binary smoke test"
cargo build --release -p falcon

echo "== instruction counts (scripts/instruction-check.sh)"
# The engines' instructions per transaction against the committed
# baseline: more than +3 % fails (a change that must cost more updates
# scripts/instruction-baseline.txt in the same commit and says why).
bash scripts/instruction-check.sh

echo "== profile-guided build (scripts/build-pgo.sh --quick)"
# The whole pipeline: instrumented build, training runs, merge, optimised
# build; then the binary must run a loop and say how it was built.
bash scripts/build-pgo.sh --quick
report=$(target/pgo/release/falcon bench core --profile push64-psp --transactions 20000 --json)
case "$report" in
    *'"build":"release+pgo"'*) echo "profile-guided binary: $report" ;;
    *) echo "the profile-guided binary does not report build release+pgo: $report" >&2; exit 1 ;;
esac
