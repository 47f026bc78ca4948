#!/usr/bin/env bash
# The NBD gateway against the reference server, the same fio job on each,
# alternating, in one run (DESIGN §8: the gateway over NVMe-over-Falcon,
# `--backend falcon`, must reach >= 0.7 of `nbdkit memory`; with the RAM
# backend this measures the gateway's own ceiling).
#
#   scripts/bench-nbd.sh [--backend ram|falcon] [--runs 5] [--seconds 5] [--json]
#                        [--perf DIR] [--falcon PATH]
#
# Each run: `falcon nbd-gateway --backend B --size 64M` and `nbdkit memory
# 64M` on a Unix socket, each pinned to CPU 0, with fio on CPU 1 (4 KiB
# randrw, iodepth 32, time-based); the order of the two flips every run.
# Prints each side's IOPS (reads + writes), their ratio per run, and the
# median of the ratios; --json prints one object instead. --perf DIR
# profiles each gateway run from its second second to one before its end:
# `perf stat` per thread (context switches, CPU time) into DIR/run-N.stat
# and `perf record --call-graph dwarf` into DIR/run-N.data (sampling costs
# the gateway IOPS: compare figures taken without it). --falcon PATH runs
# that binary instead of building this tree's (to compare two builds).
set -euo pipefail
cd "$(dirname "$0")/.."

backend=ram
runs=5
seconds=5
json=0
perf_dir=""
falcon=""
while [ $# -gt 0 ]; do
    case "$1" in
        --backend) backend="$2"; shift 2 ;;
        --runs) runs="$2"; shift 2 ;;
        --seconds) seconds="$2"; shift 2 ;;
        --json) json=1; shift ;;
        --perf) perf_dir="$2"; shift 2 ;;
        --falcon) falcon="$2"; shift 2 ;;
        -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "bench-nbd: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
case "$backend" in ram|falcon) ;; *) echo "bench-nbd: --backend wants ram or falcon" >&2; exit 2 ;; esac
case "$runs" in ''|*[!0-9]*|0) echo "bench-nbd: --runs wants a positive integer" >&2; exit 2 ;; esac
case "$seconds" in ''|*[!0-9]*|0) echo "bench-nbd: --seconds wants a positive integer" >&2; exit 2 ;; esac

tools="fio nbdkit taskset"
if [ -n "$perf_dir" ]; then
    tools="$tools perf"
    if [ "$seconds" -lt 3 ]; then
        echo "bench-nbd: --perf wants --seconds 3 or more" >&2
        exit 2
    fi
    mkdir -p "$perf_dir"
fi
for t in $tools; do
    if ! command -v "$t" >/dev/null 2>&1; then
        echo "bench-nbd: $t is not installed: run scripts/setup.sh" >&2
        exit 2
    fi
done
if [ "$(nproc)" -lt 2 ]; then
    echo "bench-nbd: needs 2 CPUs (server on CPU 0, fio on CPU 1)" >&2
    exit 2
fi

log() { if [ "$json" = 0 ]; then echo "$@"; else echo "$@" >&2; fi; }

if [ -z "$falcon" ]; then
    cargo build --release -q -p falcon
    falcon="${CARGO_TARGET_DIR:-target}/release/falcon"
elif [ ! -x "$falcon" ]; then
    echo "bench-nbd: --falcon $falcon is not an executable" >&2
    exit 2
fi

dir=$(mktemp -d /tmp/bench-nbd.XXXXXX)
server_pid=""
cleanup() {
    if [ -n "$server_pid" ]; then
        kill -TERM "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
    fi
    rm -rf "$dir"
}
trap cleanup EXIT

# Waits for a Unix socket to appear (10 s at most).
wait_socket() {
    for _ in $(seq 1 200); do
        [ -S "$1" ] && return 0
        sleep 0.05
    done
    echo "bench-nbd: no socket at $1 after 10 s" >&2
    return 1
}

# fio's job on a socket; prints read + write IOPS (terse v3: field 8 is
# read IOPS, field 49 write IOPS).
fio_iops() {
    taskset -c 1 fio --name=bench --ioengine=nbd --uri="nbd+unix:///?socket=$1" \
        --rw=randrw --bs=4k --iodepth=32 --size=64M --time_based --runtime="$seconds" \
        --output-format=terse --terse-version=3 2>/dev/null |
        awk -F';' 'NF > 100 { printf "%d\n", $8 + $49 }'
}

stop_server() {
    kill -TERM "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    server_pid=""
}

# Each sets $iops (empty when fio measured nothing).
gateway_run() {
    local sock="$dir/gateway.sock"
    rm -f "$sock"
    taskset -c 0 "$falcon" nbd-gateway --listen "unix:$sock" --backend "$backend" \
        --size 64M --quiet --json >"$dir/gateway.json" 2>"$dir/gateway.log" &
    server_pid=$!
    wait_socket "$sock"
    if [ -n "$perf_dir" ]; then
        profile "$server_pid" "$perf_dir/run-$run" &
        local profiler=$!
        iops=$(fio_iops "$sock" || true)
        wait "$profiler" || true
    else
        iops=$(fio_iops "$sock" || true)
    fi
    stop_server
}

# Profiles process $1 while fio runs (threads made before it attaches:
# the connection's, which start when fio connects, hence the first second).
profile() {
    local span=$((seconds - 2))
    sleep 1
    perf stat -e context-switches,cpu-migrations,task-clock --per-thread -p "$1" \
        -o "$2.stat" -- sleep "$span" 2>/dev/null &
    local stat=$!
    perf record -q -F 999 --call-graph dwarf,16384 -p "$1" -o "$2.data" \
        -- sleep "$span" >/dev/null 2>&1 || true
    wait "$stat" || true
}

nbdkit_run() {
    local sock="$dir/nbdkit.sock"
    rm -f "$sock"
    taskset -c 0 nbdkit --foreground --unix "$sock" memory 64M 2>"$dir/nbdkit.log" &
    server_pid=$!
    wait_socket "$sock"
    iops=$(fio_iops "$sock" || true)
    stop_server
}

gateway_all=()
nbdkit_all=()
ratios=()
for run in $(seq 1 "$runs"); do
    if [ $((run % 2)) = 1 ]; then
        gateway_run; g=$iops; nbdkit_run; k=$iops
    else
        nbdkit_run; k=$iops; gateway_run; g=$iops
    fi
    if [ -z "$g" ] || [ -z "$k" ] || [ "$g" = 0 ] || [ "$k" = 0 ]; then
        echo "bench-nbd: run $run measured nothing (gateway '$g', nbdkit '$k'); logs:" >&2
        cat "$dir/gateway.log" "$dir/nbdkit.log" >&2
        exit 1
    fi
    r=$(awk -v g="$g" -v k="$k" 'BEGIN { printf "%.3f", g / k }')
    gateway_all+=("$g"); nbdkit_all+=("$k"); ratios+=("$r")
    log "run $run: falcon nbd-gateway ($backend) $g IOPS, nbdkit memory $k IOPS, ratio $r"
done

median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
ratio_median=$(median "${ratios[@]}")
gateway_median=$(median "${gateway_all[@]}")
nbdkit_median=$(median "${nbdkit_all[@]}")

if [ "$json" = 1 ]; then
    list() { local IFS=,; echo "[$*]"; }
    printf '{"backend":"%s","job":"fio nbd randrw 4k iodepth 32, %s s, unix socket, server on CPU 0, fio on CPU 1","runs":%s,"gateway_iops":%s,"nbdkit_iops":%s,"ratios":%s,"gateway_iops_median":%s,"nbdkit_iops_median":%s,"ratio_median":%s}\n' \
        "$backend" "$seconds" "$runs" "$(list "${gateway_all[@]}")" "$(list "${nbdkit_all[@]}")" \
        "$(list "${ratios[@]}")" "$gateway_median" "$nbdkit_median" "$ratio_median"
else
    echo "median: falcon nbd-gateway $gateway_median IOPS, nbdkit memory $nbdkit_median IOPS; median ratio $ratio_median (DESIGN §8 bar over NVMe-over-Falcon: >= 0.7)"
fi
