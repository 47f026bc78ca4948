//! Many rate-capped flows on one Carousel, in virtual time: the achieved
//! rates and the spacing of departures.

use core::time::Duration;

use crate::random::{Random, SplitMix64};
use crate::time::Timestamp;

use super::{Carousel, Timestamper};

/// One flow's pacing and what it sent.
struct Flow {
    pacer: Timestamper,
    rate: u64,
    bytes: usize,
    first: Option<u64>,
    last: u64,
    packets: u64,
    /// Closest two departures, ns.
    closest: u64,
}

/// `flows` flows with rates log-uniform in 1..=100 Gbit/s and frame sizes
/// from 64 B to 4 KiB, each sending whenever its pacer allows, on one wheel
/// of `granularity`, for `run` of virtual time. Returns the flows.
fn run_wheel(flows: usize, granularity: Duration, run: Duration, seed: u64) -> Vec<Flow> {
    const SIZES: [usize; 8] = [64, 128, 256, 512, 1024, 1500, 2048, 4096];
    let mut rng = SplitMix64::new(seed);
    let start = Timestamp::from_micros(1_000);
    let end = start.saturating_add(run);
    let mut wheel = Carousel::new(granularity, 1 << 16, start);
    let mut all: Vec<Flow> = (0..flows)
        .map(|_| {
            // 10^(9 + 2u) bit/s, u uniform in [0, 1].
            let u = f64::from(rng.below(1_000_001)) / 1e6;
            let rate = 10f64.powf(9.0 + 2.0 * u).round() as u64;
            let mut pacer = Timestamper::default();
            pacer.set_rate_cap(Some(rate), granularity);
            Flow {
                pacer,
                rate,
                bytes: SIZES[rng.below(SIZES.len() as u32) as usize],
                first: None,
                last: 0,
                packets: 0,
                closest: u64::MAX,
            }
        })
        .collect();
    // Staggered starts over the first 10 µs.
    for (i, _) in all.iter().enumerate() {
        let at = start.saturating_add_nanos(u64::from(rng.below(10_000)));
        assert!(wheel.insert(i, at));
    }
    let mut out = Vec::new();
    while let Some(due) = wheel.next_deadline() {
        if due > end {
            break;
        }
        wheel.expire(due, &mut out);
        let now = due.as_nanos();
        for (i, _) in out.drain(..) {
            let flow = &mut all[i];
            while flow.pacer.admit(due, 0) {
                flow.pacer.on_departure(due, flow.bytes);
                if flow.packets > 0 {
                    flow.closest = flow.closest.min(now - flow.last);
                }
                flow.first.get_or_insert(now);
                flow.last = now;
                flow.packets += 1;
            }
            let release = flow.pacer.release().expect("a capped flow waits");
            assert!(release > due);
            assert!(wheel.insert(i, release), "within the horizon");
        }
    }
    all
}

/// Each flow's rate over its run is within 1 % of its cap, and no two of
/// its departures are closer than its gap minus one granularity, with the
/// wheel's slots finer than most gaps (64 ns) and coarser than many
/// (2 048 ns: a 4 KiB frame at 100 Gbit/s is 328 ns, 64 B at 10 Gbit/s 51 ns).
#[test]
fn thousand_flows_from_1_to_100_gbps_within_one_percent() {
    for granularity in [64u64, 512, 2_048] {
        let g = Duration::from_nanos(granularity);
        let flows = run_wheel(1_000, g, Duration::from_micros(400), 7 + granularity);
        for (i, flow) in flows.iter().enumerate() {
            let gap = flow.bytes as f64 * 8e9 / flow.rate as f64;
            let first = flow.first.expect("every flow sent");
            let span = (flow.last - first) as f64;
            assert!(flow.packets > 5, "flow {i}: {} packets", flow.packets);
            let achieved = (flow.packets - 1) as f64 * flow.bytes as f64 * 8e9 / span;
            let error = achieved / flow.rate as f64 - 1.0;
            assert!(
                error.abs() < 0.01,
                "g {granularity} ns, flow {i}: {} B at {} bit/s achieved {achieved:.0} ({:+.3} %)",
                flow.bytes,
                flow.rate,
                error * 100.0
            );
            assert!(
                flow.closest as f64 >= gap - granularity as f64 - 1.0,
                "g {granularity} ns, flow {i}: departures {} ns apart, gap {gap:.1} ns",
                flow.closest
            );
        }
    }
}
