#!/usr/bin/env bash
# A `falcon pktgen` generator/reflector pair over net_memif, RUNS times:
# the reflector on core 1, the generator on core 0, each run started once
# both cores have been at least 90 % idle for a second (this machine's cores
# are shared; a run on busy cores measures the other tenant). Prints each
# run's figures and their medians (dataplane/app/PERFORMANCE.md).
#
#   scripts/pktgen-pair.sh RUNS [generator flags...]
#   scripts/pktgen-pair.sh 5 --size 64 --seconds 5
#
# FALCON names the binary (default target/release/falcon, built with
# `cargo build --release -p falcon --features dpdk`); IDLE_WAIT is how long
# a run waits for idle cores, seconds (default 60; then it runs anyway and
# says so).
set -euo pipefail
cd "$(dirname "$0")/.."

runs=${1:?usage: scripts/pktgen-pair.sh RUNS [generator flags...]}
shift
falcon=${FALCON:-target/release/falcon}
socket=/tmp/falcon-pktgen-pair-$$.sock
control=127.0.0.1:17890
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# Waits (at most IDLE_WAIT s) until both cores were >= 90 % idle over a second.
wait_idle() {
    for _ in $(seq "${IDLE_WAIT:-60}"); do
        read -r _ u n s i w x y z _ < /proc/stat
        sleep 1
        read -r _ u2 n2 s2 i2 w2 x2 y2 z2 _ < /proc/stat
        busy=$(( (u2 + n2 + s2 + x2 + y2 + z2) - (u + n + s + x + y + z) ))
        idle=$(( (i2 + w2) - (i + w) ))
        if (( idle * 100 >= (busy + idle) * 90 )); then
            return 0
        fi
    done
    echo "cores still busy after ${IDLE_WAIT:-60} s; running anyway" >&2
}

for run in $(seq "$runs"); do
    wait_idle
    "$falcon" pktgen --role reflector --core 1 --socket "$socket" --control "$control" \
        --seconds 120 --quiet --json > "$out/r$run.json" &
    reflector=$!
    sleep 0.5
    "$falcon" pktgen --role generator --core 0 --socket "$socket" --control "$control" \
        --quiet --json "$@" > "$out/g$run.json"
    wait "$reflector"
    python3 - "$out/g$run.json" "$run" <<'PY'
import json, sys
g = json.load(open(sys.argv[1]))
print(f"run {sys.argv[2]}: tx {g['tx_mpps']:.3f} Mpps, rx {g['rx_mpps']:.3f} Mpps, "
      f"goodput {g['goodput_gbps']:.2f} Gbit/s, {g['ops_mpps']:.3f} M ops/s, "
      f"p50 {g['p50_us']:.1f} us, p99 {g['p99_us']:.1f} us, retx {g['retransmissions']}, "
      f"fcwnd {g['fcwnd_min']:.3g}..{g['fcwnd_max']:.3g}, preemptions {g['preemptions']}"
      + (f", achieved {g['achieved_ratio']:.4f} of the rate" if g['achieved_ratio'] else ""))
PY
done
python3 - "$out" "$runs" <<'PY'
import json, statistics, sys
out, runs = sys.argv[1], int(sys.argv[2])
g = [json.load(open(f"{out}/g{i}.json")) for i in range(1, runs + 1)]
for key in ["tx_mpps", "rx_mpps", "goodput_gbps", "ops_mpps", "p50_us", "p99_us"]:
    values = sorted(x[key] for x in g)
    print(f"median {key} {statistics.median(values):.3f} (runs {', '.join(f'{v:.3f}' for v in values)})")
PY
