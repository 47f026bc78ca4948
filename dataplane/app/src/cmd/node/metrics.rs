//! What `falcon node --metrics ADDR` serves: a snapshot of the node taken
//! once a second on its lcore (counters copied, nothing rendered there),
//! rendered as Prometheus text when scraped.

use falcon_core::api::{DropReason, EngineStats};
use hdrhistogram::Histogram;

use crate::metrics::Exposition;

/// One node's figures at one moment.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub role: &'static str,
    pub port: &'static str,
    pub psp: bool,
    pub uptime_seconds: f64,
    pub engine: EngineStats,
    /// Port frames received and sent.
    pub port_rx_frames: u64,
    pub port_tx_frames: u64,
    pub injected_losses: u64,
    /// Completions (initiator) or requests (target).
    pub transactions: u64,
    pub ops: u64,
    pub push_bytes: u64,
    pub pull_bytes: u64,
    pub response_bytes: u64,
    pub failures: u64,
    /// The initiator's op latency.
    pub latency: Option<Latency>,
}

/// A latency summary: (quantile, seconds) pairs, the count of
/// observations and their sum in seconds.
#[derive(Debug, Clone)]
pub struct Latency {
    pub quantiles: Vec<(f64, f64)>,
    pub count: u64,
    pub sum_seconds: f64,
}

/// The latency part of a snapshot from the initiator's histogram (ns).
pub fn latency(h: &Histogram<u64>) -> Option<Latency> {
    let quantiles = [0.5, 0.9, 0.99, 0.999]
        .iter()
        .map(|&q| (q, h.value_at_quantile(q) as f64 / 1e9))
        .collect();
    Some(Latency {
        quantiles,
        count: h.len(),
        sum_seconds: h.mean() * h.len() as f64 / 1e9,
    })
}

/// The exposition text of `s`.
pub fn render(s: &Snapshot) -> String {
    let mut e = Exposition::new();
    let who: &[(&str, &str)] = &[
        ("role", s.role),
        ("port", s.port),
        ("psp", if s.psp { "on" } else { "off" }),
    ];
    e.gauge(
        "falcon_node_info",
        "The node: its role, port and whether PSP is on (always 1).",
        &[(who, 1.0)],
    );
    e.gauge(
        "falcon_node_uptime_seconds",
        "Seconds since the node's connection was set up.",
        &[(&[], s.uptime_seconds)],
    );
    let g = &s.engine;
    let counters: [(&str, &str, u64); 14] = [
        (
            "falcon_port_rx_frames_total",
            "Frames the port received.",
            s.port_rx_frames,
        ),
        (
            "falcon_port_tx_frames_total",
            "Frames the port sent.",
            s.port_tx_frames,
        ),
        (
            "falcon_rx_frames_total",
            "Frames the engine took in.",
            g.rx_frames,
        ),
        (
            "falcon_rx_bytes_total",
            "Bytes of the frames the engine took in.",
            g.rx_bytes,
        ),
        (
            "falcon_tx_frames_total",
            "Frames the engine built.",
            g.tx_frames,
        ),
        (
            "falcon_tx_bytes_total",
            "Bytes of the frames the engine built.",
            g.tx_bytes,
        ),
        (
            "falcon_tx_acks_total",
            "ACK and NACK frames sent.",
            g.tx_acks,
        ),
        (
            "falcon_retransmissions_total",
            "Packets sent again, on any trigger.",
            g.retransmissions,
        ),
        (
            "falcon_retransmission_timeouts_total",
            "Retransmissions on a retransmit timeout.",
            g.retransmissions_timeout,
        ),
        (
            "falcon_rue_events_total",
            "Congestion-control events handed to the RUE.",
            g.rue_events,
        ),
        (
            "falcon_transactions_total",
            "Transactions completed (initiator) or served (target).",
            s.transactions,
        ),
        ("falcon_ops_total", "Workload operations completed.", s.ops),
        (
            "falcon_injected_losses_total",
            "Frames the fault injector dropped on transmit (--loss).",
            s.injected_losses,
        ),
        (
            "falcon_workload_failures_total",
            "Checks the workload failed (bytes, statuses).",
            s.failures,
        ),
    ];
    for (name, help, value) in counters {
        e.counter(name, help, &[(&[], value)]);
    }
    e.counter(
        "falcon_payload_bytes_total",
        "Payload bytes of the workload, by kind: push, pull, response.",
        &[
            (&[("kind", "push")], s.push_bytes),
            (&[("kind", "pull")], s.pull_bytes),
            (&[("kind", "response")], s.response_bytes),
        ],
    );
    // Every reason, zero or not: a series exists before its first drop.
    let drops: Vec<(&str, u64)> = DropReason::ALL
        .iter()
        .map(|&r| (r.name(), g.drops.get(r)))
        .collect();
    let labels: Vec<[(&str, &str); 1]> = drops.iter().map(|&(r, _)| [("reason", r)]).collect();
    let samples: Vec<(&[(&str, &str)], u64)> = labels
        .iter()
        .zip(&drops)
        .map(|(l, &(_, n))| (&l[..], n))
        .collect();
    e.counter(
        "falcon_drops_total",
        "Frames the engine dropped, by reason.",
        &samples,
    );
    if g.rtt_samples > 0 {
        e.gauge(
            "falcon_rtt_average_seconds",
            "Average round-trip time the engine measured (t1 to t4).",
            &[(&[], g.rtt_sum.as_secs_f64() / g.rtt_samples as f64)],
        );
    }
    if let Some(l) = &s.latency {
        e.summary(
            "falcon_op_latency_seconds",
            "Workload op latency at the initiator, submit to completion.",
            &l.quantiles,
            l.count,
            l.sum_seconds,
        );
    }
    e.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_renders_every_family_once() {
        let mut h = Histogram::<u64>::new(3).unwrap();
        h.record(250_000).unwrap();
        let s = Snapshot {
            role: "initiator",
            port: "udp",
            psp: true,
            uptime_seconds: 1.5,
            engine: EngineStats::default(),
            port_rx_frames: 10,
            port_tx_frames: 12,
            injected_losses: 1,
            transactions: 5,
            ops: 5,
            push_bytes: 4096,
            pull_bytes: 0,
            response_bytes: 0,
            failures: 0,
            latency: latency(&h),
        };
        let text = render(&s);
        for family in [
            "falcon_node_info",
            "falcon_port_rx_frames_total",
            "falcon_drops_total",
            "falcon_payload_bytes_total",
            "falcon_op_latency_seconds",
        ] {
            let type_lines = text
                .lines()
                .filter(|l| l.starts_with(&format!("# TYPE {family} ")))
                .count();
            assert_eq!(type_lines, 1, "{family}:\n{text}");
        }
        assert!(text.contains("falcon_port_rx_frames_total 10\n"), "{text}");
        assert!(text.contains("falcon_payload_bytes_total{kind=\"push\"} 4096\n"));
        assert!(
            text.contains("falcon_drops_total{reason=\"not_udp\"} 0\n"),
            "{text}"
        );
        assert!(
            text.contains("falcon_op_latency_seconds_count 1\n"),
            "{text}"
        );
    }
}
