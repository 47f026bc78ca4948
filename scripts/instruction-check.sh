#!/usr/bin/env bash
# Guards the engines' speed by instruction count, not by time: callgrind
# counts the instructions `falcon bench core --profile P` runs per
# transaction (deterministic: the profiles run in virtual time, and the
# count repeats to within ~100 in 100 M), and this compares them with the
# committed baseline, failing on more than +3 %.
#
#   scripts/instruction-check.sh            check against the baseline
#   scripts/instruction-check.sh --update   measure and write the baseline
#
# Per transaction = (Ir of a run of 2N − Ir of a run of N) / the
# transactions between them (each run also warms up on max(N/10, 1 000)),
# so start-up and set-up cancel out. A change that must cost more updates
# the baseline in the same commit and says why in its message.
#
# The count depends on the compiler and on the AES-GCM code `ring` picks
# for the CPU (the PSP profiles), so the baseline records both; where
# either differs the check says so and passes without comparing.
set -euo pipefail
cd "$(dirname "$0")/.."

baseline=scripts/instruction-baseline.txt
bin=target/release/falcon
# profile and N: a few seconds each under callgrind.
checks=("push64-psp 20000" "loop4k-psp 4000")
limit_percent=3

update=false
case "${1:-}" in
    --update) update=true ;;
    "") ;;
    *) echo "usage: $0 [--update]" >&2; exit 2 ;;
esac

command -v valgrind >/dev/null || { echo "instruction-check: valgrind is missing (scripts/setup.sh installs it)" >&2; exit 1; }
cargo build --release -p falcon --quiet

rustc_version=$(rustc -V)
aes_path=$("$bin" bench core --profile push64-psp --transactions 1000 --json |
    sed -n 's/.*"aes_gcm_path":"\([^"]*\)".*/\1/p')

# Instructions of `falcon bench core --profile $1 --transactions $2`.
instructions() {
    local out
    out=$(valgrind --tool=callgrind --callgrind-out-file=/dev/null \
        "$bin" bench core --profile "$1" --transactions "$2" 2>&1 >/dev/null)
    sed -n 's/.*Collected : \([0-9]*\).*/\1/p' <<<"$out"
}

# Transactions a run of N completes, warm-up included.
total() {
    local n=$1 warm=$(($1 / 10))
    ((warm < 1000)) && warm=1000
    echo $((n + warm))
}

declare -A measured
for check in "${checks[@]}"; do
    read -r profile n <<<"$check"
    a=$(instructions "$profile" "$n")
    b=$(instructions "$profile" $((2 * n)))
    measured[$profile]=$(awk -v a="$a" -v b="$b" -v d=$(($(total $((2 * n))) - $(total "$n"))) \
        'BEGIN { printf "%.1f", (b - a) / d }')
    echo "instruction-check: $profile ${measured[$profile]} instructions per transaction"
done

if $update; then
    {
        echo "# Instructions per transaction of falcon bench core --profile P"
        echo "# (scripts/instruction-check.sh --update; see the script)."
        echo "compiler $rustc_version"
        echo "aes_gcm_path $aes_path"
        for check in "${checks[@]}"; do
            read -r profile _ <<<"$check"
            echo "profile $profile ${measured[$profile]}"
        done
    } >"$baseline"
    echo "instruction-check: wrote $baseline"
    exit 0
fi

[ -f "$baseline" ] || { echo "instruction-check: no $baseline (run with --update)" >&2; exit 1; }
base_rustc=$(sed -n 's/^compiler //p' "$baseline")
base_path=$(sed -n 's/^aes_gcm_path //p' "$baseline")
if [ "$base_rustc" != "$rustc_version" ] || [ "$base_path" != "$aes_path" ]; then
    echo "instruction-check: baseline taken with '$base_rustc' on AES-GCM path '$base_path'," \
        "this is '$rustc_version' on '$aes_path': not comparable, not compared"
    exit 0
fi

status=0
for check in "${checks[@]}"; do
    read -r profile _ <<<"$check"
    base=$(sed -n "s/^profile $profile //p" "$baseline")
    [ -n "$base" ] || { echo "instruction-check: $profile missing from $baseline" >&2; status=1; continue; }
    verdict=$(awk -v m="${measured[$profile]}" -v b="$base" -v l="$limit_percent" 'BEGIN {
        change = (m - b) / b * 100
        if (change > l) printf "FAIL %+.1f %%", change
        else if (change < -l) printf "lower %+.1f %% (update the baseline)", change
        else printf "ok %+.1f %%", change }')
    echo "instruction-check: $profile ${measured[$profile]} against $base: $verdict"
    [[ $verdict == FAIL* ]] && status=1
done
exit $status
