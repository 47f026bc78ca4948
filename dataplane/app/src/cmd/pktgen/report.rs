//! What `falcon pktgen` prints: the stats line once a second on stderr and
//! the summary at the end (text, or one JSON object with units in the key
//! names, DESIGN §6).
//!
//! Layer: application, output only. Owns [`Report`], the [`Sample`] of
//! counters a stats line shows the change of, and the text forms of both.

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::cmd::node::DpdkCounters;

/// One side's summary.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub role: &'static str,
    pub port: &'static str,
    pub psp: bool,
    /// `--cc`: `swift` or `off`.
    pub cc: &'static str,
    pub core: usize,
    /// Falcon connections (the reflector: those the generator set up).
    pub connections: usize,
    /// `push` or `push-pull:N` (generator).
    pub mix: String,
    /// `--size` as given, or `imix` (generator).
    pub sizes: String,
    pub inflight: usize,
    /// Measured time, s. Generator: the first submit to the end of
    /// `--seconds` (with `--count`: to the last completion). Reflector:
    /// the first request to the generator's end.
    pub seconds: f64,
    /// `--rate-gbps` / `--rate-mpps`; both `None` when flat out.
    pub configured_gbps: Option<f64>,
    pub configured_mpps: Option<f64>,
    /// Payload Gbit/s and million transactions a second completed in the
    /// measured time (the generator's offered rate, as the reflector took
    /// it).
    pub achieved_gbps: f64,
    pub achieved_mpps: f64,
    /// Achieved over configured, in the configured unit.
    pub achieved_ratio: Option<f64>,
    /// Frames the port sent and received in the measured time (Falcon
    /// data, ACKs, retransmissions alike), and their rates.
    pub tx_frames: u64,
    pub rx_frames: u64,
    pub tx_mpps: f64,
    pub rx_mpps: f64,
    /// The same frames' bytes on the wire (Ethernet header to PSP
    /// trailer), Gbit/s.
    pub tx_wire_gbps: f64,
    pub rx_wire_gbps: f64,
    /// Push and pull payload bytes completed in the measured time, Gbit/s.
    pub goodput_gbps: f64,
    /// Transactions completed (generator) or answered (reflector) in the
    /// whole run, pushes and pulls.
    pub ops: u64,
    /// Of them in the measured time, per second.
    pub ops_mpps: f64,
    pub pushes: u64,
    pub pulls: u64,
    /// Payload bytes (pktgen header and data) of the whole run.
    pub push_bytes: u64,
    pub pull_bytes: u64,
    /// Bytes this side checked against the pattern (`--verify`).
    pub verified_bytes: u64,
    /// Push latency, submit to completion (the Falcon ACK), µs
    /// (generator; 0 at the reflector).
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
    pub latency_samples: u64,
    /// Pull latency, submit to Pull Data, µs (generator with pulls).
    pub pull_p50_us: f64,
    pub pull_p99_us: f64,
    pub retransmissions: u64,
    /// Of them, on a retransmit timeout.
    pub retransmissions_timeout: u64,
    /// Round-trip time the engine measured (Falcon's t1..t4), average, µs.
    pub rtt_avg_us: f64,
    /// The fabric window's range over the run, packets.
    pub fcwnd_min: f64,
    pub fcwnd_max: f64,
    /// Frames the engine dropped, by reason.
    pub drops: u64,
    pub drops_by_reason: serde_json::Map<String, serde_json::Value>,
    /// The DPDK port's counters over the whole run.
    pub dpdk: Option<DpdkCounters>,
    /// Times the kernel took this process's core (see `falcon node`).
    pub preemptions: Option<u64>,
    pub failures: u64,
    pub first_failure: Option<String>,
    /// The reflector's report, as it sent it back (generator only).
    pub peer_report: Option<serde_json::Value>,
    /// No failure, and (generator) both sides counted the same.
    pub ok: bool,
    pub build: &'static str,
}

/// µs at quantile `q` of a histogram of ns.
pub fn us(h: &Histogram<u64>, q: f64) -> f64 {
    if h.is_empty() {
        0.0
    } else {
        h.value_at_quantile(q) as f64 / 1e3
    }
}

/// Counters a stats line shows the change of.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sample {
    pub rx_frames: u64,
    pub tx_frames: u64,
    pub rx_bytes: u64,
    pub tx_bytes: u64,
    pub ops: u64,
    pub payload_bytes: u64,
    pub retransmissions: u64,
    pub drops: u64,
}

/// The line a second: `[generator   3.0 s] tx  2.105 Mpps  rx  1.052 Mpps
/// 1.08 Gbit/s  2.104 M ops/s  drops 0  retx 0  p50 28.4 us  p99 61.0 us`
/// (latency at the generator only).
pub fn stats_line(
    role: &str,
    elapsed: f64,
    now: Sample,
    then: Sample,
    dt: f64,
    latency: Option<&Histogram<u64>>,
) -> String {
    let rate = |a: u64, b: u64| a.saturating_sub(b) as f64 / dt;
    let mut line = format!(
        "[{role} {elapsed:5.1} s] tx {:7.3} Mpps  rx {:7.3} Mpps  {:6.2} Gbit/s  {:7.3} M ops/s  drops {}  retx {}",
        rate(now.tx_frames, then.tx_frames) / 1e6,
        rate(now.rx_frames, then.rx_frames) / 1e6,
        rate(now.payload_bytes, then.payload_bytes) * 8.0 / 1e9,
        rate(now.ops, then.ops) / 1e6,
        now.drops.saturating_sub(then.drops),
        now.retransmissions.saturating_sub(then.retransmissions),
    );
    if let Some(h) = latency {
        line.push_str(&format!(
            "  p50 {:.1} us  p99 {:.1} us",
            us(h, 0.5),
            us(h, 0.99)
        ));
    }
    line
}

/// The summary in text.
pub fn print_text(r: &Report) {
    println!(
        "pktgen {} ({} over {}, PSP {}, {} connection{}, sizes {}): {:.2} s",
        r.role,
        r.mix,
        r.port,
        if r.psp { "on" } else { "off" },
        r.connections,
        if r.connections == 1 { "" } else { "s" },
        r.sizes,
        r.seconds
    );
    println!(
        "  tx {:.3} Mpps ({} frames, {:.2} Gbit/s on the wire), rx {:.3} Mpps ({} frames, {:.2} Gbit/s)",
        r.tx_mpps, r.tx_frames, r.tx_wire_gbps, r.rx_mpps, r.rx_frames, r.rx_wire_gbps
    );
    println!(
        "  goodput {:.2} Gbit/s, {:.3} M ops/s; {} ops in all ({} pushes, {} pulls; {} + {} payload bytes, {} verified here)",
        r.goodput_gbps,
        r.ops_mpps,
        r.ops,
        r.pushes,
        r.pulls,
        r.push_bytes,
        r.pull_bytes,
        r.verified_bytes
    );
    match (r.configured_gbps, r.configured_mpps, r.achieved_ratio) {
        (Some(g), _, Some(x)) => println!(
            "  rate: configured {g:.3} Gbit/s, achieved {:.3} ({x:.3} of it)",
            r.achieved_gbps
        ),
        (_, Some(m), Some(x)) => println!(
            "  rate: configured {m:.3} Mpps, achieved {:.3} ({x:.3} of it)",
            r.achieved_mpps
        ),
        _ => {}
    }
    if r.latency_samples > 0 {
        println!(
            "  push latency p50 {:.1} us, p99 {:.1} us, p99.9 {:.1} us, max {:.1} us ({} samples)",
            r.p50_us, r.p99_us, r.p999_us, r.max_us, r.latency_samples
        );
    }
    if r.pulls > 0 && r.role == "generator" {
        println!(
            "  pull latency p50 {:.1} us, p99 {:.1} us",
            r.pull_p50_us, r.pull_p99_us
        );
    }
    let reasons: Vec<String> = r
        .drops_by_reason
        .iter()
        .map(|(name, n)| format!("{name} {n}"))
        .collect();
    println!(
        "  retransmissions {} ({} on timeout), drops {} ({}), RTT avg {:.1} us",
        r.retransmissions,
        r.retransmissions_timeout,
        r.drops,
        reasons.join(", "),
        r.rtt_avg_us
    );
    if let Some(d) = &r.dpdk {
        println!(
            "  {} ({}): rx {} frames, tx {}; missed {}, rx errors {}, tx errors {}, no mbuf {}; pool empty {}",
            d.device,
            d.driver,
            d.rx_frames,
            d.tx_frames,
            d.rx_missed,
            d.rx_errors,
            d.tx_errors,
            d.rx_no_mbuf,
            d.alloc_failures
        );
    }
    if let Some(p) = &r.peer_report {
        let mpps = |key: &str| p[key].as_f64().unwrap_or(f64::NAN);
        println!(
            "  reflector: {} pushes, {} pulls, rx {:.3} Mpps, tx {:.3} Mpps, {} failures",
            p["pushes"],
            p["pulls"],
            mpps("rx_mpps"),
            mpps("tx_mpps"),
            p["failures"]
        );
    }
    match &r.first_failure {
        None => println!("  ok"),
        Some(f) => println!("  {} FAILURES; first: {f}", r.failures),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stats_line_shows_rates_over_the_interval() {
        let then = Sample {
            tx_frames: 1_000_000,
            ops: 1_000_000,
            ..Sample::default()
        };
        let now = Sample {
            tx_frames: 3_000_000,
            rx_frames: 1_000_000,
            ops: 2_000_000,
            payload_bytes: 125_000_000,
            retransmissions: 3,
            ..Sample::default()
        };
        let mut h = Histogram::<u64>::new(3).unwrap();
        h.record(20_000).unwrap();
        let line = stats_line("generator", 2.0, now, then, 0.5, Some(&h));
        assert!(line.contains("tx   4.000 Mpps"), "{line}");
        assert!(line.contains("rx   2.000 Mpps"), "{line}");
        assert!(line.contains("2.00 Gbit/s"), "{line}");
        assert!(line.contains("2.000 M ops/s"), "{line}");
        assert!(line.contains("retx 3"), "{line}");
        assert!(line.contains("p50 20.0 us"), "{line}");
    }
}
