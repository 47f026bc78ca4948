//! What `falcon run` tells its operator: a stats line a second (the node's,
//! and with `--verbose` each lcore's, in the manner of dpdk-testpmd), the
//! Prometheus exposition of the same figures, and the final report.
//!
//! Layer: application, on the main lcore. The datapath lcores publish
//! [`LcoreSnapshot`]s (latest wins); the [`Reporter`] keeps the latest of
//! each and the one before, so each line shows the last second's rates.

use std::time::Instant;

use falcon_core::api::{DropReason, EngineStats};
use hdrhistogram::Histogram;
use serde::Serialize;

use super::shard::{LcoreSnapshot, PortCounters, WorkloadCounts};
use crate::metrics::Exposition;

/// The device's own counters (`rte_eth_stats`), read by the main lcore.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct DeviceCounters {
    pub rx_packets: u64,
    pub tx_packets: u64,
    pub rx_bytes: u64,
    pub tx_bytes: u64,
    pub rx_missed: u64,
    pub rx_errors: u64,
    pub tx_errors: u64,
    pub rx_no_mbuf: u64,
}

/// The node's figures summed over its lcores.
#[derive(Debug, Clone, Default)]
struct Totals {
    engine: EngineStats,
    port: PortCounters,
    workload: WorkloadCounts,
    rue_events: u64,
    latency_count: u64,
}

fn totals<'a>(snapshots: impl Iterator<Item = &'a LcoreSnapshot>) -> Totals {
    let mut t = Totals::default();
    for s in snapshots {
        let e = &s.engine;
        t.engine.rx_frames += e.rx_frames;
        t.engine.rx_bytes += e.rx_bytes;
        t.engine.tx_frames += e.tx_frames;
        t.engine.tx_bytes += e.tx_bytes;
        t.engine.tx_acks += e.tx_acks;
        t.engine.retransmissions += e.retransmissions;
        t.engine.retransmissions_timeout += e.retransmissions_timeout;
        t.engine.rue_events += e.rue_events;
        t.engine.rue_results += e.rue_results;
        t.engine.rtt_samples += e.rtt_samples;
        t.engine.rtt_sum += e.rtt_sum;
        t.engine.drops.merge(&e.drops);
        t.port.dispatched += s.port.dispatched;
        t.port.dispatch_received += s.port.dispatch_received;
        t.port.dispatch_ring_full += s.port.dispatch_ring_full;
        t.port.alloc_failures += s.port.alloc_failures;
        t.port.rx_bad_checksums += s.port.rx_bad_checksums;
        let (w, x) = (&mut t.workload, &s.workload);
        w.initiators += x.initiators;
        w.targets += x.targets;
        w.completions += x.completions;
        w.ops += x.ops;
        w.push_bytes += x.push_bytes;
        w.pull_bytes += x.pull_bytes;
        w.response_bytes += x.response_bytes;
        w.requests += x.requests;
        w.pushes_served += x.pushes_served;
        w.pulls_served += x.pulls_served;
        w.served_push_bytes += x.served_push_bytes;
        w.served_pull_bytes += x.served_pull_bytes;
        w.verified_bytes += x.verified_bytes;
        w.failures += x.failures;
        if w.first_failure.is_none() {
            w.first_failure.clone_from(&x.first_failure);
        }
        t.rue_events += s.rue_events;
        t.latency_count += s.latency.len();
    }
    t
}

/// Workload bytes moved: pushes acknowledged, pulls and responses verified
/// (initiators) and push bytes verified (targets of remote initiators are
/// counted at the initiator's node, loopback targets here).
fn goodput_bytes(w: &WorkloadCounts) -> u64 {
    w.push_bytes + w.pull_bytes + w.response_bytes
}

/// The latest snapshot of each lcore and the one before.
pub struct Reporter {
    start: Instant,
    latest: Vec<Option<LcoreSnapshot>>,
    previous: Vec<Option<LcoreSnapshot>>,
    previous_at: Instant,
    /// The CPU of each datapath lcore, for the per-lcore lines.
    cpus: Vec<usize>,
}

impl Reporter {
    pub fn new(cpus: Vec<usize>) -> Self {
        let n = cpus.len();
        Reporter {
            start: Instant::now(),
            latest: vec![None; n],
            previous: vec![None; n],
            previous_at: Instant::now(),
            cpus,
        }
    }

    /// Seconds since the lcores started.
    pub fn elapsed(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    /// Takes in a published snapshot.
    pub fn take(&mut self, snapshot: LcoreSnapshot) {
        let i = usize::from(snapshot.shard);
        if i < self.latest.len() {
            self.latest[i] = Some(snapshot);
        }
    }

    /// Every lcore has sent its last snapshot.
    pub fn all_last(&self) -> bool {
        self.latest
            .iter()
            .all(|s| s.as_ref().is_some_and(|s| s.last))
    }

    /// Every lcore reported, and every initiator's work is done; `false`
    /// for a node with no initiator (a target runs until told to stop).
    pub fn initiators_done(&self) -> bool {
        let t = totals(self.latest.iter().flatten());
        t.workload.initiators > 0
            && self
                .latest
                .iter()
                .all(|s| s.as_ref().is_some_and(|s| s.initiators_finished))
    }

    /// The lines for the second that ended now; the snapshots become the
    /// previous ones.
    pub fn lines(
        &mut self,
        device: Option<DeviceCounters>,
        device_then: Option<DeviceCounters>,
        verbose: bool,
    ) -> Vec<String> {
        let dt = self.previous_at.elapsed().as_secs_f64().max(1e-9);
        let mut lines = Vec::new();
        let now = totals(self.latest.iter().flatten());
        let then = totals(self.previous.iter().flatten());
        let latency = interval_latency(&self.latest, &self.previous);
        let port = match (device, device_then) {
            (Some(d), Some(p)) => format!(
                " | port missed {} nombuf {} err {}",
                d.rx_missed - p.rx_missed,
                d.rx_no_mbuf - p.rx_no_mbuf,
                (d.rx_errors + d.tx_errors) - (p.rx_errors + p.tx_errors)
            ),
            _ => String::new(),
        };
        lines.push(format!(
            "[run {:6.1} s] {}{}{port}",
            self.elapsed(),
            rates(&now, &then, dt),
            match &latency {
                Some(h) => format!(
                    " | p50 {:.1} us p99 {:.1} us",
                    h.value_at_quantile(0.5) as f64 / 1e3,
                    h.value_at_quantile(0.99) as f64 / 1e3
                ),
                None => String::new(),
            },
        ));
        if verbose {
            for (i, s) in self.latest.iter().enumerate() {
                let Some(s) = s else { continue };
                let now = totals(std::iter::once(s));
                let then = totals(self.previous[i].iter());
                lines.push(format!(
                    "  lcore {} (shard {i}, cpu {}, {} conns): {} | dispatch out {:.0}/s in {:.0}/s full {}",
                    i + 1,
                    self.cpus.get(i).copied().unwrap_or(0),
                    s.connections,
                    rates(&now, &then, dt),
                    (now.port.dispatched - then.port.dispatched) as f64 / dt,
                    (now.port.dispatch_received - then.port.dispatch_received) as f64 / dt,
                    now.port.dispatch_ring_full - then.port.dispatch_ring_full,
                ));
            }
        }
        self.previous.clone_from(&self.latest);
        self.previous_at = Instant::now();
        lines
    }

    /// The Prometheus exposition of the latest snapshots.
    pub fn render(&self, device: Option<DeviceCounters>, info: &NodeInfo) -> String {
        render(&self.latest, self.elapsed(), device, info)
    }

    /// The final report.
    pub fn report(&self, info: &NodeInfo, device: Option<DeviceCounters>, end: End) -> RunReport {
        let t = totals(self.latest.iter().flatten());
        let seconds = end.seconds.max(1e-9);
        // Invariant: 3 significant digits is a valid precision.
        let mut latency = Histogram::<u64>::new(3).expect("3 significant digits");
        for s in self.latest.iter().flatten() {
            let _ = latency.add(&s.latency);
        }
        let us = |q: f64| {
            if latency.is_empty() {
                0.0
            } else {
                latency.value_at_quantile(q) as f64 / 1e3
            }
        };
        let drops_by_reason = t
            .engine
            .drops
            .iter()
            .filter(|&(_, n)| n > 0)
            .map(|(r, n)| (r.to_string(), serde_json::Value::from(n)))
            .collect();
        let outstanding: usize = self.latest.iter().flatten().map(|s| s.outstanding).sum();
        let w = &t.workload;
        let failures = w.failures;
        let lcores: Vec<LcoreReport> = self
            .latest
            .iter()
            .enumerate()
            .filter_map(|(i, s)| {
                let s = s.as_ref()?;
                Some(LcoreReport {
                    lcore: i + 1,
                    shard: s.shard,
                    cpu: self.cpus.get(i).copied().unwrap_or(0),
                    connections: s.connections,
                    rx_frames: s.engine.rx_frames,
                    tx_frames: s.engine.tx_frames,
                    rx_mpps: s.engine.rx_frames as f64 / seconds / 1e6,
                    tx_mpps: s.engine.tx_frames as f64 / seconds / 1e6,
                    transactions: s.workload.completions + s.workload.requests,
                    retransmissions: s.engine.retransmissions,
                    drops: s.engine.drops.total(),
                    rue_events: s.rue_events.max(s.engine.rue_events),
                    port: s.port,
                    idle_turn_fraction: s.idle_turns as f64 / s.turns.max(1) as f64,
                })
            })
            .collect();
        RunReport {
            config: info.config.clone(),
            device: info.device.clone(),
            driver: info.driver.clone(),
            psp: info.psp,
            rue: info.rue,
            lcores: lcores.len(),
            seconds,
            stopped_by: end.stopped_by,
            connections: lcores.iter().map(|l| l.connections).sum(),
            transactions: w.completions + w.requests,
            ops: w.ops,
            ops_per_s: w.ops as f64 / seconds,
            push_bytes: w.push_bytes,
            pull_bytes: w.pull_bytes,
            response_bytes: w.response_bytes,
            served_push_bytes: w.served_push_bytes,
            served_pull_bytes: w.served_pull_bytes,
            pushes_served: w.pushes_served,
            pulls_served: w.pulls_served,
            verified_bytes: w.verified_bytes,
            goodput_gbps: goodput_bytes(w) as f64 * 8.0 / seconds / 1e9,
            rx_frames: t.engine.rx_frames,
            tx_frames: t.engine.tx_frames,
            rx_mpps: t.engine.rx_frames as f64 / seconds / 1e6,
            tx_mpps: t.engine.tx_frames as f64 / seconds / 1e6,
            rx_gbps: t.engine.rx_bytes as f64 * 8.0 / seconds / 1e9,
            tx_gbps: t.engine.tx_bytes as f64 * 8.0 / seconds / 1e9,
            retransmissions: t.engine.retransmissions,
            retransmissions_timeout: t.engine.retransmissions_timeout,
            drops: t.engine.drops.total(),
            drops_by_reason,
            rue_events: t.rue_events.max(t.engine.rue_events),
            rtt_avg_us: if t.engine.rtt_samples > 0 {
                t.engine.rtt_sum.as_secs_f64() * 1e6 / t.engine.rtt_samples as f64
            } else {
                0.0
            },
            latency_p50_us: us(0.5),
            latency_p99_us: us(0.99),
            latency_p999_us: us(0.999),
            latency_max_us: if latency.is_empty() {
                0.0
            } else {
                latency.max() as f64 / 1e3
            },
            dispatched: t.port.dispatched,
            dispatch_ring_full: t.port.dispatch_ring_full,
            device_counters: device,
            undrained: outstanding,
            failures,
            first_failure: w.first_failure.clone(),
            ok: failures == 0 && outstanding == 0 && end.peers_ok,
            per_lcore: lcores,
        }
    }
}

/// The latencies of the last second, all lcores.
fn interval_latency(
    latest: &[Option<LcoreSnapshot>],
    previous: &[Option<LcoreSnapshot>],
) -> Option<Histogram<u64>> {
    // Invariant: 3 significant digits is a valid precision.
    let mut h = Histogram::<u64>::new(3).expect("3 significant digits");
    for (now, then) in latest.iter().zip(previous) {
        let Some(now) = now else { continue };
        let mut second = now.latency.clone();
        if let Some(then) = then {
            // The run's histogram only grows, so this never underflows.
            let _ = second.subtract(&then.latency);
        }
        let _ = h.add(&second);
    }
    (!h.is_empty()).then_some(h)
}

/// One stats line's rates.
fn rates(now: &Totals, then: &Totals, dt: f64) -> String {
    let per_s = |a: u64, b: u64| a.saturating_sub(b) as f64 / dt;
    format!(
        "rx {:6.3} Mpps {:6.2} Gbit/s | tx {:6.3} Mpps {:6.2} Gbit/s | {:8.1} k txn/s {:6.2} Gbit/s data | retx {} drops {} | rue {:.1} k ev/s",
        per_s(now.engine.rx_frames, then.engine.rx_frames) / 1e6,
        per_s(now.engine.rx_bytes, then.engine.rx_bytes) * 8.0 / 1e9,
        per_s(now.engine.tx_frames, then.engine.tx_frames) / 1e6,
        per_s(now.engine.tx_bytes, then.engine.tx_bytes) * 8.0 / 1e9,
        per_s(
            now.workload.completions + now.workload.requests,
            then.workload.completions + then.workload.requests
        ) / 1e3,
        per_s(goodput_bytes(&now.workload), goodput_bytes(&then.workload)) * 8.0 / 1e9,
        now.engine.retransmissions.saturating_sub(then.engine.retransmissions),
        now.engine.drops.total().saturating_sub(then.engine.drops.total()),
        per_s(now.rue_events.max(now.engine.rue_events), then.rue_events.max(then.engine.rue_events)) / 1e3,
    )
}

/// What the report and the metrics say of the node itself.
#[derive(Debug, Clone)]
pub struct NodeInfo {
    pub config: String,
    pub device: String,
    pub driver: String,
    pub psp: bool,
    /// `inline` or `lcore`.
    pub rue: &'static str,
}

/// How the run ended.
#[derive(Debug, Clone, Copy)]
pub struct End {
    pub seconds: f64,
    /// `signal`, `duration`, `done` (every initiator's work) or `peers`
    /// (every remote initiator said it was done).
    pub stopped_by: &'static str,
    /// The peers' end of the run went as agreed.
    pub peers_ok: bool,
}

/// One datapath lcore in the final report.
#[derive(Debug, Clone, Serialize)]
pub struct LcoreReport {
    pub lcore: usize,
    pub shard: u16,
    pub cpu: usize,
    pub connections: usize,
    pub rx_frames: u64,
    pub tx_frames: u64,
    pub rx_mpps: f64,
    pub tx_mpps: f64,
    pub transactions: u64,
    pub retransmissions: u64,
    pub drops: u64,
    pub rue_events: u64,
    pub port: PortCounters,
    /// Turns that found nothing to do.
    pub idle_turn_fraction: f64,
}

/// `falcon run`'s final report.
#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    pub config: String,
    pub device: String,
    pub driver: String,
    pub psp: bool,
    pub rue: &'static str,
    pub lcores: usize,
    pub seconds: f64,
    pub stopped_by: &'static str,
    pub connections: usize,
    /// Completed at initiators plus served at targets.
    pub transactions: u64,
    pub ops: u64,
    pub ops_per_s: f64,
    pub push_bytes: u64,
    pub pull_bytes: u64,
    pub response_bytes: u64,
    pub served_push_bytes: u64,
    pub served_pull_bytes: u64,
    /// Pushes received and pulls answered by this node's target ends.
    pub pushes_served: u64,
    pub pulls_served: u64,
    pub verified_bytes: u64,
    pub goodput_gbps: f64,
    pub rx_frames: u64,
    pub tx_frames: u64,
    pub rx_mpps: f64,
    pub tx_mpps: f64,
    pub rx_gbps: f64,
    pub tx_gbps: f64,
    pub retransmissions: u64,
    pub retransmissions_timeout: u64,
    pub drops: u64,
    pub drops_by_reason: serde_json::Map<String, serde_json::Value>,
    pub rue_events: u64,
    pub rtt_avg_us: f64,
    pub latency_p50_us: f64,
    pub latency_p99_us: f64,
    pub latency_p999_us: f64,
    pub latency_max_us: f64,
    pub dispatched: u64,
    pub dispatch_ring_full: u64,
    pub device_counters: Option<DeviceCounters>,
    /// Transactions still outstanding when the drain gave up.
    pub undrained: usize,
    pub failures: u64,
    pub first_failure: Option<String>,
    pub ok: bool,
    pub per_lcore: Vec<LcoreReport>,
}

/// The report as text.
pub fn print_text(r: &RunReport) {
    println!(
        "falcon run: {} on {} ({}), {} datapath lcore(s), RUE {}, PSP {}",
        r.config,
        r.device,
        r.driver,
        r.lcores,
        r.rue,
        if r.psp { "on" } else { "off" }
    );
    println!(
        "  {:.1} s, stopped by {}; {} connections",
        r.seconds, r.stopped_by, r.connections
    );
    println!(
        "  transactions {}  ops {} ({:.1} k/s)  goodput {:.2} Gbit/s  verified {} bytes",
        r.transactions,
        r.ops,
        r.ops_per_s / 1e3,
        r.goodput_gbps,
        r.verified_bytes
    );
    println!(
        "  rx {:.3} Mpps {:.2} Gbit/s  tx {:.3} Mpps {:.2} Gbit/s",
        r.rx_mpps, r.rx_gbps, r.tx_mpps, r.tx_gbps
    );
    println!(
        "  latency p50 {:.1} us  p99 {:.1} us  p99.9 {:.1} us  max {:.1} us  (rtt avg {:.1} us)",
        r.latency_p50_us, r.latency_p99_us, r.latency_p999_us, r.latency_max_us, r.rtt_avg_us
    );
    let reasons: Vec<String> = r
        .drops_by_reason
        .iter()
        .map(|(reason, n)| format!("{reason} {n}"))
        .collect();
    println!(
        "  retransmissions {} ({} on timeout)  drops {}{}  rue events {}",
        r.retransmissions,
        r.retransmissions_timeout,
        r.drops,
        if reasons.is_empty() {
            String::new()
        } else {
            format!(" ({})", reasons.join(", "))
        },
        r.rue_events
    );
    println!(
        "  dispatched {} (ring full {})  undrained {}  failures {}{}",
        r.dispatched,
        r.dispatch_ring_full,
        r.undrained,
        r.failures,
        r.first_failure
            .as_deref()
            .map(|f| format!(" (first: {f})"))
            .unwrap_or_default()
    );
    for l in &r.per_lcore {
        println!(
            "  lcore {} shard {} cpu {}: {} conns  rx {:.3} Mpps  tx {:.3} Mpps  transactions {}  dispatched {} received {}",
            l.lcore,
            l.shard,
            l.cpu,
            l.connections,
            l.rx_mpps,
            l.tx_mpps,
            l.transactions,
            l.port.dispatched,
            l.port.dispatch_received
        );
    }
    println!("  {}", if r.ok { "ok" } else { "FAILED" });
}

/// The Prometheus text of the latest snapshots.
fn render(
    latest: &[Option<LcoreSnapshot>],
    uptime: f64,
    device: Option<DeviceCounters>,
    info: &NodeInfo,
) -> String {
    let mut e = Exposition::new();
    e.gauge(
        "falcon_node_info",
        "The node: its device, driver, RUE placement and whether PSP is on (always 1).",
        &[(
            &[
                ("device", info.device.as_str()),
                ("driver", info.driver.as_str()),
                ("rue", info.rue),
                ("psp", if info.psp { "on" } else { "off" }),
            ],
            1.0,
        )],
    );
    e.gauge(
        "falcon_uptime_seconds",
        "Seconds since the datapath lcores started.",
        &[(&[], uptime)],
    );
    let names: Vec<String> = latest
        .iter()
        .enumerate()
        .map(|(i, _)| (i + 1).to_string())
        .collect();
    let snaps: Vec<(&str, &LcoreSnapshot)> = latest
        .iter()
        .zip(&names)
        .filter_map(|(s, n)| Some((n.as_str(), s.as_ref()?)))
        .collect();
    let per_lcore = |f: &dyn Fn(&LcoreSnapshot) -> u64| -> Vec<(Vec<(&str, &str)>, u64)> {
        snaps
            .iter()
            .map(|(n, s)| (vec![("lcore", *n)], f(s)))
            .collect()
    };
    type Family<'a> = (&'a str, &'a str, &'a dyn Fn(&LcoreSnapshot) -> u64);
    let families: [Family<'_>; 13] = [
        (
            "falcon_rx_frames_total",
            "Frames the engine took in.",
            &|s| s.engine.rx_frames,
        ),
        (
            "falcon_rx_bytes_total",
            "Bytes of the frames the engine took in.",
            &|s| s.engine.rx_bytes,
        ),
        ("falcon_tx_frames_total", "Frames the engine built.", &|s| {
            s.engine.tx_frames
        }),
        (
            "falcon_tx_bytes_total",
            "Bytes of the frames the engine built.",
            &|s| s.engine.tx_bytes,
        ),
        (
            "falcon_retransmissions_total",
            "Packets sent again, on any trigger.",
            &|s| s.engine.retransmissions,
        ),
        (
            "falcon_rue_events_total",
            "Congestion-control events handed to the RUE.",
            &|s| s.rue_events.max(s.engine.rue_events),
        ),
        (
            "falcon_transactions_total",
            "Transactions completed (initiators) or served (targets).",
            &|s| s.workload.completions + s.workload.requests,
        ),
        ("falcon_ops_total", "Workload operations completed.", &|s| {
            s.workload.ops
        }),
        (
            "falcon_verified_bytes_total",
            "Payload bytes checked against the pattern.",
            &|s| s.workload.verified_bytes,
        ),
        (
            "falcon_workload_failures_total",
            "Checks the workload failed (bytes, statuses).",
            &|s| s.workload.failures,
        ),
        (
            "falcon_dispatched_frames_total",
            "Frames handed to another lcore's shard (software dispatch).",
            &|s| s.port.dispatched,
        ),
        (
            "falcon_dispatch_ring_full_drops_total",
            "Frames dropped because the owning lcore's ring was full.",
            &|s| s.port.dispatch_ring_full,
        ),
        (
            "falcon_mbuf_alloc_failures_total",
            "Frames the engine could not build for an empty mbuf pool.",
            &|s| s.port.alloc_failures,
        ),
    ];
    for (name, help, f) in families {
        let samples = per_lcore(f);
        let refs: Vec<(&[(&str, &str)], u64)> = samples.iter().map(|(l, v)| (&l[..], *v)).collect();
        e.counter(name, help, &refs);
    }
    // Every reason on every lcore, zero or not.
    let mut drop_labels = Vec::new();
    for (n, s) in &snaps {
        for &r in DropReason::ALL.iter() {
            drop_labels.push(([("lcore", *n), ("reason", r.name())], s.engine.drops.get(r)));
        }
    }
    let drops: Vec<(&[(&str, &str)], u64)> =
        drop_labels.iter().map(|(l, v)| (&l[..], *v)).collect();
    e.counter(
        "falcon_drops_total",
        "Frames the engine dropped, by reason.",
        &drops,
    );
    if let Some(d) = device {
        let port: [(&str, &str, u64); 6] = [
            (
                "falcon_port_rx_packets_total",
                "Frames the device received.",
                d.rx_packets,
            ),
            (
                "falcon_port_tx_packets_total",
                "Frames the device sent.",
                d.tx_packets,
            ),
            (
                "falcon_port_rx_bytes_total",
                "Bytes the device received.",
                d.rx_bytes,
            ),
            (
                "falcon_port_tx_bytes_total",
                "Bytes the device sent.",
                d.tx_bytes,
            ),
            (
                "falcon_port_rx_missed_total",
                "Frames the device dropped for want of descriptors.",
                d.rx_missed,
            ),
            (
                "falcon_port_rx_no_mbuf_total",
                "Receive buffer allocation failures in the device.",
                d.rx_no_mbuf,
            ),
        ];
        for (name, help, value) in port {
            e.counter(name, help, &[(&[], value)]);
        }
    }
    // Invariant: 3 significant digits is a valid precision.
    let mut latency = Histogram::<u64>::new(3).expect("3 significant digits");
    for (_, s) in &snaps {
        let _ = latency.add(&s.latency);
    }
    if !latency.is_empty() {
        let quantiles: Vec<(f64, f64)> = [0.5, 0.9, 0.99, 0.999]
            .iter()
            .map(|&q| (q, latency.value_at_quantile(q) as f64 / 1e9))
            .collect();
        e.summary(
            "falcon_op_latency_seconds",
            "Workload op latency at the initiators, submit to completion.",
            &quantiles,
            latency.len(),
            latency.mean() * latency.len() as f64 / 1e9,
        );
    }
    e.finish()
}
