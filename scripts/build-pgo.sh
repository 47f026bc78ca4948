#!/usr/bin/env bash
# Builds the `falcon` binary with profile-guided optimisation (PGO), for
# deployments and for `falcon bench` figures at the engines' best.
#
#   scripts/build-pgo.sh           build target/pgo/release/falcon
#   scripts/build-pgo.sh --quick   shorter training runs (the test suite's check)
#
# Three steps, each in its own target directory so the ordinary
# `cargo build --release` (target/release) is left alone:
#
#   1. an instrumented build (`-Cprofile-generate`) in target/pgo-gen;
#   2. training runs of it, each writing a raw profile: `falcon demo` (the
#      default job: push and pull, loss, reordering, PSP on) and the four
#      engine loops of `falcon bench core --profile` (64-byte and 4 KiB pushes,
#      with and without PSP), the transport's hot paths;
#   3. the raw profiles merged by `llvm-profdata` and the release build redone
#      with `-Cprofile-use` in target/pgo.
#
# `llvm-profdata` must come from the LLVM that rustc itself is built on (its
# raw profile format changes between LLVM releases): `rustc -vV` names it, and
# scripts/setup.sh installs Debian's `llvm-N` for it. The binary reports
# `"build": "release+pgo"` in `falcon bench core --json`.
#
# Measured in dataplane/app/PERFORMANCE.md ("A profile-guided build"): the
# engines' instructions per 64-byte push transaction 2 523 -> 2 303, and the
# 4 KiB loop without PSP ~10 % faster than the plain release build (median of
# alternating pairs).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

quick=0
case "${1:-}" in
    "") ;;
    --quick) quick=1 ;;
    -h | --help)
        sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//'
        exit 0
        ;;
    *)
        echo "build-pgo: unknown argument '$1' (see --help)" >&2
        exit 2
        ;;
esac

major=$(rustc -vV | sed -n 's/^LLVM version: \([0-9]*\).*/\1/p')
if [ -z "$major" ]; then
    echo "build-pgo: 'rustc -vV' names no LLVM version" >&2
    exit 1
fi
profdata=""
for candidate in "llvm-profdata-$major" "/usr/lib/llvm-$major/bin/llvm-profdata"; do
    if command -v "$candidate" >/dev/null 2>&1; then
        profdata=$candidate
        break
    fi
done
if [ -z "$profdata" ]; then
    echo "build-pgo: no llvm-profdata of LLVM $major (rustc's LLVM); install Debian's llvm-$major (scripts/setup.sh does)" >&2
    exit 1
fi

data="$root/target/pgo-data"
gen_dir="$root/target/pgo-gen"
out_dir="$root/target/pgo"

echo "== build-pgo: instrumented build (target/pgo-gen)"
CARGO_TARGET_DIR="$gen_dir" RUSTFLAGS="-Cprofile-generate=$data" \
    cargo build --release -p falcon
# Build scripts ran instrumented too and left profiles of their own.
rm -rf "$data"
mkdir -p "$data"

if [ "$quick" -eq 1 ]; then
    n64=20000
    n4k=10000
else
    n64=400000
    n4k=150000
fi
falcon="$gen_dir/release/falcon"
echo "== build-pgo: training runs"
LLVM_PROFILE_FILE="$data/demo-%p.profraw" "$falcon" demo >/dev/null
for profile in push64 push64-psp loop4k loop4k-psp; do
    case "$profile" in
        loop4k*) n=$n4k ;;
        *) n=$n64 ;;
    esac
    LLVM_PROFILE_FILE="$data/$profile-%p.profraw" "$falcon" bench core --profile "$profile" --transactions "$n" >/dev/null
done
"$profdata" merge -o "$data/falcon.profdata" "$data"/*.profraw

echo "== build-pgo: optimised build (target/pgo)"
CARGO_TARGET_DIR="$out_dir" RUSTFLAGS="-Cprofile-use=$data/falcon.profdata" FALCON_PGO=1 \
    cargo build --release -p falcon
echo "build-pgo: $out_dir/release/falcon"
