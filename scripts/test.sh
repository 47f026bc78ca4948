#!/usr/bin/env bash
# The one test command (README, CI). Installs what is missing, then runs the
# formatter check, clippy with warnings as errors, every test of the workspace,
# and a build of the fuzz targets.
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

echo "== cargo test"
cargo test --workspace

echo "== fuzz targets build"
cargo build --manifest-path fuzz/Cargo.toml --bins

echo "== release binary smoke test"
cargo build --release -p falcon
