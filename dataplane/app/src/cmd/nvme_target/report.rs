//! What `falcon nvme-target` prints: a stats line a second on stderr and
//! the final figures (text, or one JSON object with `--json`).
//!
//! Layer: application, output only. Reads the target's, the engine's and
//! the port's counters; changes nothing.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use falcon_core::api::{Clock, EngineStats, Lcore};
use nvme_ulp::data::NvmeData;
use nvme_ulp::target::Target;
use serde::Serialize;

use super::serve::{ServedPort, Sessions};
use crate::cli::NvmeTargetArgs;
use crate::cmd::node::DpdkCounters;
use crate::cmd::nvme_perf::errors_by_status;
use crate::nvmecfg::{Plan, PortPlan};
use crate::udp::UdpPortStats;

/// A namespace as served.
#[derive(Debug, Clone, Serialize)]
pub struct NamespaceReport {
    pub nsid: u16,
    /// `ram` or `file`.
    pub backing: &'static str,
    pub path: Option<String>,
    pub blocks: u64,
    pub lba_size: u32,
    pub metadata: u32,
    pub protection: String,
    /// `ram`, `file (O_DIRECT)` or `file (buffered)`.
    pub mode: String,
    /// A file namespace: whether it got O_DIRECT.
    pub direct_io: Option<bool>,
    /// The target SQID its commands go to.
    pub sqid: u8,
}

impl NamespaceReport {
    /// One line: what the namespace is and how it is stored.
    pub fn describe(&self) -> String {
        let place = match &self.path {
            Some(path) => format!("{} {path}", self.mode),
            None => self.mode.clone(),
        };
        format!(
            "namespace {}: {place}, {} blocks of {} + {} B metadata ({} MiB), protection {}, SQID {}",
            self.nsid,
            self.blocks,
            self.lba_size,
            self.metadata,
            (self.blocks * u64::from(self.lba_size)) >> 20,
            self.protection,
            self.sqid
        )
    }
}

/// Initiators served.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct ConnectionCounts {
    /// Offers that got a connection.
    pub accepted: u64,
    /// Ended by their initiator's `Done`.
    pub closed: u64,
    /// Ended by a control channel that closed or broke.
    pub lost: u64,
    /// Ended by a Falcon connection that failed.
    pub failed: u64,
    /// Offers refused (named to the initiator).
    pub refused: u64,
    /// Connected when the target stopped.
    pub at_stop: u64,
}

/// The figures of the final report.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub config: String,
    pub port: &'static str,
    pub bind: Option<SocketAddr>,
    pub control: SocketAddr,
    pub psp: bool,
    pub core: Option<usize>,
    pub namespaces: Vec<NamespaceReport>,
    pub seconds: f64,
    /// `signal` or `duration`.
    pub stopped_by: &'static str,
    pub connections: ConnectionCounts,
    /// tCMDs (an iCMD split at a chunk boundary is two).
    pub read_ios: u64,
    pub write_ios: u64,
    pub iops: f64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub read_mib_s: f64,
    pub write_mib_s: f64,
    /// Read Responses and Write Completions sent.
    pub responses: u64,
    /// Of them, with a status other than success.
    pub errors: u64,
    pub errors_by_status: BTreeMap<&'static str, u64>,
    /// Requests NACKed receiver-not-ready (Falcon retried them).
    pub rnr_nacks: u64,
    /// tCMDs ended by their connection's end, or by their timeout.
    pub aborted_tcmds: u64,
    pub timed_out_tcmds: u64,
    /// Transactions Falcon did not complete (most on closed connections).
    pub transport_failures: u64,
    pub retransmissions: u64,
    pub drops: u64,
    pub drops_by_reason: BTreeMap<&'static str, u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub udp: Option<UdpPortStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dpdk: Option<DpdkCounters>,
    /// Namespaces whose flush at stop failed.
    pub flush_failures: u64,
    /// Times the kernel took the target's CPU from it.
    pub preemptions: Option<u64>,
    pub build: &'static str,
}

/// Counters a stats line shows the change of.
#[derive(Debug, Clone, Copy, Default)]
pub struct Progress {
    connections: usize,
    reads: u64,
    writes: u64,
    bytes_read: u64,
    bytes_written: u64,
    errors: u64,
    rnr_nacks: u64,
    retransmissions: u64,
}

impl Progress {
    pub fn of(target: &Target, sessions: &Sessions, engine: EngineStats) -> Progress {
        let t = target.stats();
        Progress {
            connections: sessions.connected(),
            reads: t.read_tcmds,
            writes: t.write_tcmds,
            bytes_read: t.bytes_read,
            bytes_written: t.bytes_written,
            errors: t.responses.errors(),
            rnr_nacks: rnr_nacks(target),
            retransmissions: engine.retransmissions,
        }
    }
}

fn rnr_nacks(target: &Target) -> u64 {
    let t = target.stats();
    t.rnr_no_slot + t.rnr_no_buffer + t.rnr_worker_busy + t.rnr_behind_parked
}

const MIB: f64 = (1u64 << 20) as f64;

/// The stats line: rates over the last `dt` seconds, counts since start.
pub fn stats_line(elapsed: Duration, now: Progress, then: Progress, dt: f64) {
    let rate = |a: u64, b: u64| a.saturating_sub(b) as f64 / dt;
    eprintln!(
        "[nvme-target {:6.1} s] connections {}  IOPS {:9.1} (read {:9.1}, write {:9.1})  read {:8.2} MiB/s  write {:8.2} MiB/s  errors {}  RNR NACKs {}  retx {}",
        elapsed.as_secs_f64(),
        now.connections,
        rate(now.reads + now.writes, then.reads + then.writes),
        rate(now.reads, then.reads),
        rate(now.writes, then.writes),
        rate(now.bytes_read, then.bytes_read) / MIB,
        rate(now.bytes_written, then.bytes_written) / MIB,
        now.errors,
        now.rnr_nacks,
        now.retransmissions.saturating_sub(then.retransmissions),
    );
}

const BUILD: &str = if cfg!(debug_assertions) {
    "debug"
} else {
    "release"
};

/// The figures at stop.
#[allow(clippy::too_many_arguments)]
pub fn final_report<P: ServedPort, C: Clock>(
    args: &NvmeTargetArgs,
    plan: &Plan,
    lcore: &Lcore<P, C, NvmeData>,
    target: &Target,
    connections: ConnectionCounts,
    namespaces: Vec<NamespaceReport>,
    seconds: f64,
    stopped_by: &'static str,
) -> Report {
    let t = target.stats();
    let e = lcore.engine.stats();
    let per_s = |n: u64| {
        if seconds > 0.0 {
            n as f64 / seconds
        } else {
            0.0
        }
    };
    Report {
        config: args.config.display().to_string(),
        port: plan.port.kind(),
        bind: match &plan.port {
            PortPlan::Udp { bind, .. } => Some(*bind),
            PortPlan::Dpdk { .. } => None,
        },
        control: plan.control,
        psp: plan.psp.is_some(),
        core: plan.core,
        namespaces,
        seconds,
        stopped_by,
        connections,
        read_ios: t.read_tcmds,
        write_ios: t.write_tcmds,
        iops: per_s(t.read_tcmds + t.write_tcmds),
        bytes_read: t.bytes_read,
        bytes_written: t.bytes_written,
        read_mib_s: per_s(t.bytes_read) / MIB,
        write_mib_s: per_s(t.bytes_written) / MIB,
        responses: t.read_ncmds + t.write_ncmds,
        errors: t.responses.errors(),
        errors_by_status: errors_by_status(&t.responses),
        rnr_nacks: rnr_nacks(target),
        aborted_tcmds: t.aborted_tcmds,
        timed_out_tcmds: t.timed_out_tcmds,
        transport_failures: t.transport_failures,
        retransmissions: e.retransmissions,
        drops: e.drops.total(),
        drops_by_reason: e.drops.iter().filter(|&(_, n)| n > 0).collect(),
        udp: None,
        dpdk: None,
        flush_failures: 0,
        preemptions: crate::cmd::node::preemptions(),
        build: BUILD,
    }
}

/// The final figures as text.
pub fn print_text(r: &Report) {
    println!(
        "nvme-target ({}, {} port{}, PSP {}): {:.1} s, stopped by {}",
        r.config,
        r.port,
        r.bind.map(|b| format!(" {b}")).unwrap_or_default(),
        if r.psp { "on" } else { "off" },
        r.seconds,
        r.stopped_by
    );
    for n in &r.namespaces {
        println!("  {}", n.describe());
    }
    let c = &r.connections;
    println!(
        "  initiators: {} connected, {} closed, {} lost, {} failed, {} refused, {} at stop",
        c.accepted, c.closed, c.lost, c.failed, c.refused, c.at_stop
    );
    println!(
        "  I/O: {} reads, {} writes ({:.1} IOPS); read {} B ({:.2} MiB/s), written {} B ({:.2} MiB/s)",
        r.read_ios, r.write_ios, r.iops, r.bytes_read, r.read_mib_s, r.bytes_written, r.write_mib_s
    );
    let errors = if r.errors_by_status.is_empty() {
        String::new()
    } else {
        format!(
            " ({})",
            r.errors_by_status
                .iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    println!(
        "  responses {}, errors {}{errors}; RNR NACKs {}; tCMDs aborted {}, timed out {}; transport failures {}",
        r.responses, r.errors, r.rnr_nacks, r.aborted_tcmds, r.timed_out_tcmds, r.transport_failures
    );
    let reasons: Vec<String> = r
        .drops_by_reason
        .iter()
        .map(|(name, n)| format!("{name} {n}"))
        .collect();
    println!(
        "  Falcon: retransmissions {}, drops {} ({})",
        r.retransmissions,
        r.drops,
        if reasons.is_empty() {
            "none".to_string()
        } else {
            reasons.join(", ")
        }
    );
    if let Some(u) = &r.udp {
        println!(
            "  udp: rx {} datagrams ({} truncated, {} unknown source), tx {} ({} errors, {} unroutable)",
            u.rx_datagrams,
            u.rx_truncated,
            u.rx_unknown_source,
            u.tx_datagrams,
            u.tx_errors,
            u.tx_unroutable
        );
    }
    if let Some(d) = &r.dpdk {
        println!(
            "  {} ({}): rx {} frames, tx {}; missed {}, rx errors {}, tx errors {}, no mbuf {}",
            d.device,
            d.driver,
            d.rx_frames,
            d.tx_frames,
            d.rx_missed,
            d.rx_errors,
            d.tx_errors,
            d.rx_no_mbuf
        );
    }
    if r.flush_failures > 0 {
        println!(
            "  {} namespace(s) failed their flush at stop",
            r.flush_failures
        );
    }
}
