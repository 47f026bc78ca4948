//! What `falcon demo` reports: [`Report`] (the `--json` object) and its
//! text form.
//!
//! Layer: application, output. Owns the report's fields and units and how
//! they print; fills them from the engines' counters at the end of a run.
//! Never decides success: the run's checks do (`ok`, `failure_reasons`).

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use falcon_core::engine::Engine;
use hdrhistogram::Histogram;
use serde::Serialize;

use crate::cmd::nvme_io::Latency;
use crate::cmd::nvme_perf::FalconFigures;
use crate::democfg::schema::{DemoConfig, Ordering, PspVersion, RuePlacement};
use crate::democfg::EffectiveConfig;

#[derive(Debug, Serialize)]
pub struct Report {
    pub ok: bool,
    /// `AES-GCM-128`, `AES-GCM-256` or `off`.
    pub psp: String,
    /// The RUE's algorithm (`Swift`, `DCQCN`, `bypass RUE`, `no RUE`).
    pub rue: String,
    /// Where it ran: `inline` or `thread` (its own thread, both nodes'
    /// events through one queue pair each).
    pub rue_placement: String,
    /// `ordered` or `unordered`.
    pub ordering: String,
    /// Transactions completed, in error or not.
    pub transactions: u64,
    /// Pushes completed with kCmplAck.
    pub pushes: u64,
    /// Pulls completed with kCmplAck, their data verified.
    pub pulls: u64,
    pub verified_bytes: u64,
    /// Push Data frames the target kept for its ULP: the payload read in
    /// its frame buffer, not copied, and the frame released to the port
    /// once the ULP has checked it. Each push delivered counts once (a
    /// duplicate is dropped before it is kept).
    pub zero_copy_receives: u64,
    /// Pull Data frames the initiator kept for its ULP's completions, the
    /// same way.
    pub zero_copy_pull_data: u64,
    pub failures: u64,
    pub elapsed_s: f64,
    pub transactions_per_sec: f64,
    pub goodput_gbps: f64,
    pub latency_p50_us: f64,
    pub latency_p99_us: f64,
    pub latency_max_us: f64,
    pub loss: f64,
    pub reorder: f64,
    pub duplicate: f64,
    /// Fraction of frames with a bit flipped (`--corrupt`).
    pub corrupt: f64,
    pub frames: u64,
    pub retransmissions: u64,
    pub retransmissions_timeout: u64,
    pub retransmissions_early: u64,
    pub resyncs: u64,
    /// Live PSP key rotations of both nodes (`--rotate-keys-every`).
    pub key_rotations: u64,
    /// Events to the connection manager for frames that failed the SPI
    /// check or decryption (OCP Falcon 0.9 §9.2.2.3), both nodes; one per
    /// (reason, SPI) and second at most.
    pub spi_failure_events: u64,
    /// The frames those events account for (each event's own and the ones
    /// it reports as suppressed).
    pub spi_failure_frames: u64,
    /// The first such event, in words.
    pub spi_failure_first: Option<String>,
    pub drops: HashMap<String, u64>,
    /// Frames sent with a flipped bit, both directions (a duplicated
    /// corrupted frame counts twice).
    pub corrupted_frames: u64,
    /// Of those, dropped by a named check: the drops, both nodes, of the
    /// reasons only corruption causes (outer headers, PSP framing and ICV).
    pub corruption_drops: BTreeMap<String, u64>,
    /// Of those, flipped in a field no receiver checks (Ethernet source,
    /// UDP source port; on IPv6 traffic class, flow label, hop limit,
    /// source address), by field: delivered intact, "corrupted, harmless".
    pub corrupted_harmless: BTreeMap<String, u64>,
    /// The corruption drops and the harmless flips add up to the corrupted
    /// frames (with key rotation, the drops at least: an evicted key's
    /// frames fail the ICV too).
    pub corruption_accounted: bool,
    /// Fraction of first deliveries the target's ULP RNR-NACKs (`--rnr`).
    pub rnr: f64,
    /// The timeout its RNR NACKs carry (the table's code nearest
    /// `--rnr-timeout-ms`), µs.
    pub rnr_timeout_us: f64,
    /// RNR NACKs the target's ULP sent, pushes and pulls.
    pub rnr_nacks_sent: u64,
    /// Of those, for pushes: sent to the initiator, which retransmits.
    pub rnr_nacks_sent_push: u64,
    /// Of those, for pulls: the target redelivers them after the timeout
    /// (OCP Falcon 0.9 §8.5.3.4), nothing goes on the wire.
    pub rnr_nacks_sent_pull: u64,
    /// RNR NACKs the target's transaction layer sent itself: on an ordered
    /// connection every Push Data behind a request its ULP refused is
    /// refused too until that request is back (OCP Falcon 0.9 §8.5.3.4).
    pub rnr_nacks_sent_behind: u64,
    /// RNR NACKs the initiator's engine received: the ULP's for pushes and
    /// those sent behind them, less the lost ones (NACKs are unreliable, a
    /// lost one is recovered by the retransmit timeout).
    pub rnr_nacks_received: u64,
    /// Requests the target redelivered to its ULP after an RNR NACK.
    pub rnr_redeliveries: u64,
    /// Longest wait of an RNR-NACKed transaction, from its first RNR NACK
    /// (target's ULP) to its completion (initiator's ULP), µs.
    pub rnr_wait_max_us: f64,
    /// Longest wait from a first RNR NACK to the target ULP's acceptance of
    /// the redelivery, µs.
    pub rnr_redelivery_wait_max_us: f64,
    /// Fraction of transactions the target's ULP completes in error
    /// (`--cie`).
    pub cie: f64,
    /// Transactions completed with kCmplTargetNackCIE, each one the
    /// target's ULP completed in error: counted here, not as failures.
    pub cie_completions: u64,
    /// Of those, pushes (a CIE NACK; the initiator resyncs).
    pub cie_pushes: u64,
    /// Of those, pulls (a zero-length Pull Data, §8.5.3.5).
    pub cie_pulls: u64,
    pub rue_events: u64,
    pub rue_results: u64,
    pub fcwnd_min: f64,
    pub fcwnd_max: f64,
    pub ncwnd_min: u16,
    pub ncwnd_max: u16,
    pub rtt_samples: u64,
    pub rtt_min_us: f64,
    pub rtt_mean_us: f64,
    pub rtt_max_us: f64,
    /// The NVMe phase (`null` with `--no-nvme`).
    pub nvme: Option<NvmeReport>,
    /// The RDMA phase (`null` with `--no-rdma`).
    pub rdma: Option<RdmaReport>,
    /// What failed, when `ok` is false (at most 20 lines a phase, the NVMe
    /// phase's starting `NVMe: `, the RDMA phase's `RDMA: `).
    pub failure_reasons: Vec<String>,
}

/// What the NVMe phase did and measured (the `nvme` object of `--json`).
#[derive(Debug, Serialize)]
pub struct NvmeReport {
    /// Every command completed successfully and every read verified.
    pub ok: bool,
    /// The pair's engines: PSP, RUE and ordering.
    pub transport: String,
    /// Commands completed, reads and writes, in error or not.
    pub commands: u64,
    pub reads: u64,
    pub writes: u64,
    /// Of the writes, those with Force Unit Access.
    pub fua_writes: u64,
    /// Of the reads, those of a range a write had just completed.
    pub read_backs: u64,
    /// Of the reads, those of the namespace's area no command writes
    /// (zeroes expected).
    pub never_written_reads: u64,
    /// Data bytes of the successful reads and writes.
    pub bytes_read: u64,
    pub bytes_written: u64,
    /// Read bytes compared with what their blocks must hold.
    pub verified_bytes: u64,
    pub queue_depth: usize,
    /// Command sizes drawn from, bytes.
    pub sizes: Vec<u64>,
    pub lba_size_bytes: u64,
    pub namespace_bytes: u64,
    /// Fractions of frames the pair's loopback lost and held back.
    pub loss: f64,
    pub reorder: f64,
    /// From the first submission to the last completion.
    pub elapsed_s: f64,
    pub iops: f64,
    /// Data bytes read and written per second, MiB.
    pub mib_s: f64,
    /// Command latency, submission to completion, µs.
    pub latency_us: Latency,
    /// Commands completed with a status other than success, and by status.
    pub errors: u64,
    pub errors_by_status: BTreeMap<&'static str, u64>,
    /// Successful reads with a wrong byte.
    pub verify_failures: u64,
    pub failures: u64,
    /// What Falcon did beneath the commands, both engines: retransmissions,
    /// RNR NACKs, the frames the loopback lost and reordered, drops, nCMDs.
    #[serde(flatten)]
    pub falcon: FalconFigures,
}

/// What the RDMA phase did and measured (the `rdma` object of `--json`).
#[derive(Debug, Serialize)]
pub struct RdmaReport {
    /// Every operation completed successfully and verified.
    pub ok: bool,
    /// The pair's engines: PSP, RUE and the connections' ordering.
    pub transport: String,
    /// RC QPs, one Falcon connection each.
    pub qps: usize,
    /// Operations outstanding per QP at most.
    pub queue_depth: usize,
    /// Path MTU, payload bytes per packet.
    pub mtu: u32,
    /// `strong` or `weak` (RDMA-0.9 §6.2).
    pub ordering: &'static str,
    /// WRITE, READ and SEND sizes drawn from, bytes.
    pub sizes: Vec<u32>,
    /// Operations completed, in error or not, and by kind.
    pub operations: u64,
    pub writes: u64,
    /// Of the WRITEs, those with immediate (each consumed a receive).
    pub writes_with_imm: u64,
    pub reads: u64,
    pub sends: u64,
    /// Of the SENDs, those with immediate.
    pub sends_with_imm: u64,
    pub fetch_adds: u64,
    pub compare_swaps: u64,
    /// Of the compare-and-swaps, those that found the value compared.
    pub compare_swaps_swapped: u64,
    /// WRITEs, READs and SENDs longer than one MTU.
    pub multi_mtu: u64,
    /// Data bytes of the successful operations (atomics: 8 each).
    pub bytes: u64,
    /// Of those, compared with what the oracle says they must be.
    pub verified_bytes: u64,
    /// Fractions of frames the pair's loopback lost, held back and
    /// duplicated.
    pub loss: f64,
    pub reorder: f64,
    pub duplicate: f64,
    /// From the first post to the last completion.
    pub elapsed_s: f64,
    pub ops_per_sec: f64,
    /// Data bytes per second, MiB.
    pub mib_s: f64,
    /// Post to the requester's completion, µs, all operations.
    pub latency_us: Latency,
    /// The same by kind: `write`, `read`, `send`, `atomic`.
    pub latency_by_kind_us: BTreeMap<&'static str, Latency>,
    /// Completions with an error status.
    pub errors: u64,
    /// Operations that left a wrong byte or value.
    pub verify_failures: u64,
    pub failures: u64,
    /// What Falcon did beneath the operations.
    #[serde(flatten)]
    pub falcon: RdmaFalcon,
}

/// What Falcon and the loopback did beneath the RDMA phase, both engines.
#[derive(Debug, Clone, Serialize)]
pub struct RdmaFalcon {
    pub retransmissions: u64,
    pub drops: BTreeMap<&'static str, u64>,
    /// Frames the engines sent.
    pub frames: u64,
    pub frames_lost: u64,
    pub frames_reordered: u64,
    pub frames_duplicated: u64,
    /// Falcon transactions the devices submitted: pushes (WRITE, SEND,
    /// responses) and pulls (READ, atomics).
    pub pushes: u64,
    pub pulls: u64,
    /// RNR NACKs the requester's sends met.
    pub rnr_nacks: u64,
    /// Submissions that waited for Falcon credits.
    pub credit_waits: u64,
}

impl Report {
    pub(super) fn new(effective: &EffectiveConfig, rnr_timeout: Duration) -> Self {
        let c = &effective.config;
        Report {
            ok: false,
            psp: psp_label(c).into(),
            rue: c.rue.algorithm.label().into(),
            rue_placement: match c.rue.placement {
                RuePlacement::Inline => "inline".into(),
                RuePlacement::Thread => "thread".into(),
            },
            ordering: match c.connection.ordering {
                Ordering::Ordered => "ordered".into(),
                Ordering::Unordered => "unordered".into(),
            },
            transactions: 0,
            pushes: 0,
            pulls: 0,
            verified_bytes: 0,
            zero_copy_receives: 0,
            zero_copy_pull_data: 0,
            failures: 0,
            elapsed_s: 0.0,
            transactions_per_sec: 0.0,
            goodput_gbps: 0.0,
            latency_p50_us: 0.0,
            latency_p99_us: 0.0,
            latency_max_us: 0.0,
            loss: c.faults.loss,
            reorder: c.faults.reorder,
            duplicate: c.faults.duplicate,
            corrupt: c.faults.corrupt,
            frames: 0,
            retransmissions: 0,
            retransmissions_timeout: 0,
            retransmissions_early: 0,
            resyncs: 0,
            key_rotations: 0,
            spi_failure_events: 0,
            spi_failure_frames: 0,
            spi_failure_first: None,
            drops: HashMap::new(),
            corrupted_frames: 0,
            corruption_drops: BTreeMap::new(),
            corrupted_harmless: BTreeMap::new(),
            corruption_accounted: true,
            rnr: c.target_ulp.rnr,
            rnr_timeout_us: rnr_timeout.as_secs_f64() * 1e6,
            rnr_nacks_sent: 0,
            rnr_nacks_sent_push: 0,
            rnr_nacks_sent_pull: 0,
            rnr_nacks_sent_behind: 0,
            rnr_nacks_received: 0,
            rnr_redeliveries: 0,
            rnr_wait_max_us: 0.0,
            rnr_redelivery_wait_max_us: 0.0,
            cie: c.target_ulp.cie,
            cie_completions: 0,
            cie_pushes: 0,
            cie_pulls: 0,
            rue_events: 0,
            rue_results: 0,
            fcwnd_min: 0.0,
            fcwnd_max: 0.0,
            ncwnd_min: 0,
            ncwnd_max: 0,
            rtt_samples: 0,
            rtt_min_us: 0.0,
            rtt_mean_us: 0.0,
            rtt_max_us: 0.0,
            nvme: None,
            rdma: None,
            failure_reasons: Vec::new(),
        }
    }

    /// The engines' counters, the latencies and the rate.
    pub(super) fn finish(
        &mut self,
        initiator: &Engine,
        target: &Engine,
        latency: &Histogram<u64>,
        elapsed: Duration,
    ) {
        let (a, b) = (initiator.stats(), target.stats());
        let secs = elapsed.as_secs_f64().max(1e-9);
        self.elapsed_s = secs;
        self.transactions_per_sec = self.transactions as f64 / secs;
        self.goodput_gbps = self.verified_bytes as f64 * 8.0 / secs / 1e9;
        self.latency_p50_us = latency.value_at_quantile(0.50) as f64 / 1e3;
        self.latency_p99_us = latency.value_at_quantile(0.99) as f64 / 1e3;
        self.latency_max_us = latency.max() as f64 / 1e3;
        self.frames = a.tx_frames + b.tx_frames;
        self.zero_copy_receives =
            a.transactions.zero_copy_receives + b.transactions.zero_copy_receives;
        self.zero_copy_pull_data =
            a.transactions.zero_copy_pull_data + b.transactions.zero_copy_pull_data;
        self.retransmissions = a.retransmissions + b.retransmissions;
        self.retransmissions_timeout = a.retransmissions_timeout + b.retransmissions_timeout;
        self.retransmissions_early = a.retransmissions_early + b.retransmissions_early;
        self.resyncs = a.resyncs + b.resyncs;
        self.key_rotations = a.key_rotations;
        self.rnr_nacks_received = a.transactions.rnr_received;
        self.rnr_nacks_sent_behind = b.transactions.rnr_sent_behind;
        self.rnr_redeliveries = b.transactions.redeliveries;
        let mut drops = a.drops.clone();
        drops.merge(&b.drops);
        self.drops = drops
            .iter()
            .map(|(name, n)| (name.to_string(), n))
            .collect();
        self.rue_events = a.rue_events + b.rue_events;
        self.rue_results = a.rue_results + b.rue_results;
        // The initiator's windows: it sends the data (pushes, pull requests).
        self.fcwnd_min = a.fcwnd_min;
        self.fcwnd_max = a.fcwnd_max;
        self.ncwnd_min = a.ncwnd_min;
        self.ncwnd_max = a.ncwnd_max;
        self.rtt_samples = a.rtt_samples + b.rtt_samples;
        let rtts = [&a, &b].into_iter().filter(|s| s.rtt_samples > 0);
        self.rtt_min_us = rtts
            .clone()
            .map(|s| s.rtt_min.as_secs_f64() * 1e6)
            .fold(f64::INFINITY, f64::min);
        if !self.rtt_min_us.is_finite() {
            self.rtt_min_us = 0.0;
        }
        self.rtt_max_us = rtts
            .map(|s| s.rtt_max.as_secs_f64() * 1e6)
            .fold(0.0, f64::max);
        let sum = a.rtt_sum + b.rtt_sum;
        self.rtt_mean_us = if self.rtt_samples > 0 {
            sum.as_secs_f64() * 1e6 / self.rtt_samples as f64
        } else {
            0.0
        };
    }
}

/// `AES-GCM-128`, `AES-GCM-256` or `off`.
pub(super) fn psp_label(c: &DemoConfig) -> &'static str {
    match (c.psp.enabled, c.psp.version) {
        (false, _) => "off",
        (true, PspVersion::AesGcm128) => "AES-GCM-128",
        (true, PspVersion::AesGcm256) => "AES-GCM-256",
    }
}

/// `n name, n name` in name order, or `none`.
fn counts<'a>(items: impl IntoIterator<Item = (&'a String, &'a u64)>) -> String {
    let mut items: Vec<_> = items.into_iter().collect();
    items.sort();
    if items.is_empty() {
        return "none".into();
    }
    let items: Vec<String> = items.iter().map(|(k, v)| format!("{v} {k}")).collect();
    items.join(", ")
}

pub fn print_text(r: &Report) {
    let psp = if r.psp == "off" {
        "PSP off".to_string()
    } else {
        format!("PSP on ({})", r.psp)
    };
    // The default (ordered) keeps the line it always had.
    let ordering = if r.ordering == "ordered" {
        String::new()
    } else {
        format!(", {}", r.ordering)
    };
    let placement = if r.rue_placement == "thread" {
        " (RUE on its own thread)"
    } else {
        ""
    };
    println!(
        "falcon demo: initiator and target over the in-process loopback, {psp}, {}{placement}{ordering}",
        r.rue
    );
    let in_error = if r.cie_completions > 0 {
        format!(", {} completed in error", r.cie_completions)
    } else {
        String::new()
    };
    println!(
        "  transactions  {} ({} push, {} pull{in_error}), {} bytes verified, {}",
        r.transactions,
        r.pushes,
        r.pulls,
        r.verified_bytes,
        if r.ok { "all verified" } else { "FAILED" }
    );
    println!(
        "  buffers       {} Push Data and {} Pull Data payloads read by the ULP in their received frames (no copy on receive)",
        r.zero_copy_receives, r.zero_copy_pull_data
    );
    println!(
        "  rate          {:.0} transactions/s, {:.2} Gbit/s goodput in {:.2} s, both engines on one core",
        r.transactions_per_sec, r.goodput_gbps, r.elapsed_s
    );
    println!(
        "  latency       p50 {:.1} µs, p99 {:.1} µs, max {:.1} µs",
        r.latency_p50_us, r.latency_p99_us, r.latency_max_us
    );
    let corruption = if r.corrupt > 0.0 {
        format!(", {:.1}% corruption", r.corrupt * 100.0)
    } else {
        String::new()
    };
    println!(
        "  faults        {:.1}% loss, {:.1}% reordering, {:.1}% duplication{corruption}: {} retransmissions ({} timeout, {} early), {} resyncs, of {} frames",
        r.loss * 100.0,
        r.reorder * 100.0,
        r.duplicate * 100.0,
        r.retransmissions,
        r.retransmissions_timeout,
        r.retransmissions_early,
        r.resyncs,
        r.frames
    );
    if r.corrupt > 0.0 {
        let dropped: u64 = r.corruption_drops.values().sum();
        let harmless: u64 = r.corrupted_harmless.values().sum();
        println!(
            "  corruption    {} frames with a flipped bit: {dropped} dropped by a check ({}), {harmless} harmless in unchecked fields ({}), {}",
            r.corrupted_frames,
            counts(&r.corruption_drops),
            counts(&r.corrupted_harmless),
            if r.corruption_accounted {
                "all accounted for"
            } else {
                "NOT accounted for"
            }
        );
    }
    if r.rnr > 0.0 {
        println!(
            "  target RNR    {} RNR NACKs ({} push, {} pull; timeout {:.2} ms) and {} for pushes behind them, {} received by the initiator, {} redeliveries; longest RNR wait {:.2} ms to completion, {:.2} ms to redelivery",
            r.rnr_nacks_sent,
            r.rnr_nacks_sent_push,
            r.rnr_nacks_sent_pull,
            r.rnr_timeout_us / 1e3,
            r.rnr_nacks_sent_behind,
            r.rnr_nacks_received,
            r.rnr_redeliveries,
            r.rnr_wait_max_us / 1e3,
            r.rnr_redelivery_wait_max_us / 1e3
        );
    }
    if r.cie > 0.0 {
        println!(
            "  target CIE    {} completed in error ({} push, {} pull), each as the target's ULP decided (not failures)",
            r.cie_completions, r.cie_pushes, r.cie_pulls
        );
    }
    if r.key_rotations > 0 {
        println!(
            "  PSP           {} live key rotations of both nodes (new master keys, new SPIs both ways)",
            r.key_rotations
        );
    }
    if let Some(line) = spi_failure_line(r) {
        println!("{line}");
    }
    println!("  drops         {}", counts(&r.drops));
    println!(
        "  congestion    fcwnd {:.2}..{:.2}, ncwnd {}..{}, {} RUE events, {} RTT samples (min {:.1} µs, mean {:.1} µs, max {:.1} µs)",
        r.fcwnd_min, r.fcwnd_max, r.ncwnd_min, r.ncwnd_max, r.rue_events, r.rtt_samples, r.rtt_min_us, r.rtt_mean_us, r.rtt_max_us
    );
    if let Some(nvme) = &r.nvme {
        print_nvme(nvme);
    }
    if let Some(rdma) = &r.rdma {
        print_rdma(rdma);
    }
    for reason in &r.failure_reasons {
        println!("  FAILURE       {reason}");
    }
}

/// `4 KiB`, `1 MiB`, or bytes.
pub(super) fn size(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} B"),
    }
}

/// The NVMe phase's block.
fn print_nvme(n: &NvmeReport) {
    let sizes: Vec<String> = n.sizes.iter().map(|&b| size(b)).collect();
    println!(
        "NVMe over Falcon: initiator and target (nvme-ulp) over their own loopback, {}; {} RAM namespace of {} B blocks",
        n.transport,
        size(n.namespace_bytes),
        n.lba_size_bytes
    );
    let sizes = match sizes.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    };
    println!(
        "  commands      {} of {sizes} at QD {}: {} writes ({} FUA), {} reads ({} read-backs of the writes, {} of never-written blocks)",
        n.commands,
        n.queue_depth,
        n.writes,
        n.fua_writes,
        n.reads,
        n.read_backs,
        n.never_written_reads
    );
    println!(
        "  verified      {} bytes read compared byte for byte with what was written (zeroes where nothing was), {}",
        n.verified_bytes,
        if n.ok { "all verified" } else { "FAILED" }
    );
    println!(
        "  rate          {:.0} IOPS, {:.1} MiB/s ({} bytes written, {} read) in {:.2} s",
        n.iops, n.mib_s, n.bytes_written, n.bytes_read, n.elapsed_s
    );
    let l = &n.latency_us;
    println!(
        "  latency       avg {:.1} µs, p50 {:.1} µs, p99 {:.1} µs, max {:.1} µs",
        l.average, l.p50, l.p99, l.max
    );
    let f = &n.falcon;
    println!(
        "  faults        {:.1}% loss, {:.1}% reordering: {} frames lost, {} reordered; {} retransmissions, {} RNR NACKs, of {} nCMDs",
        n.loss * 100.0,
        n.reorder * 100.0,
        f.frames_lost,
        f.frames_reordered,
        f.retransmissions,
        f.rnr_nacks,
        f.ncmds
    );
    let drops: BTreeMap<String, u64> = f.drops.iter().map(|(k, v)| (k.to_string(), *v)).collect();
    println!("  drops         {}", counts(&drops));
    if n.errors > 0 {
        let statuses: BTreeMap<String, u64> = n
            .errors_by_status
            .iter()
            .map(|(k, v)| (k.to_string(), *v))
            .collect();
        println!("  errors        {} ({})", n.errors, counts(&statuses));
    }
}

/// `a, b or c`.
fn either(items: &[String]) -> String {
    match items.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    }
}

/// The RDMA phase's block.
fn print_rdma(r: &RdmaReport) {
    let sizes: Vec<String> = r.sizes.iter().map(|&b| size(u64::from(b))).collect();
    println!(
        "RDMA over Falcon: requester and responder (rdma-ulp verbs) over their own loopback, {}; {} RC QPs, {} ordering, MTU {}",
        r.transport, r.qps, r.ordering, r.mtu
    );
    println!(
        "  operations    {} at QD {} per QP: {} WRITE ({} with immediate), {} READ, {} SEND ({} with immediate), {} fetch-and-add, {} compare-and-swap ({} swapped)",
        r.operations,
        r.queue_depth,
        r.writes,
        r.writes_with_imm,
        r.reads,
        r.sends,
        r.sends_with_imm,
        r.fetch_adds,
        r.compare_swaps,
        r.compare_swaps_swapped
    );
    println!(
        "  sizes         {}: {} messages of more than one MTU",
        either(&sizes),
        r.multi_mtu
    );
    println!(
        "  verified      {} bytes compared byte for byte (WRITE and SEND where they landed, READ against the responder's region, atomics against the counters), {}",
        r.verified_bytes,
        if r.ok { "all verified" } else { "FAILED" }
    );
    println!(
        "  rate          {:.0} ops/s, {:.1} MiB/s ({} bytes) in {:.2} s",
        r.ops_per_sec, r.mib_s, r.bytes, r.elapsed_s
    );
    let kinds = ["write", "read", "send", "atomic"];
    for (kind, l) in kinds
        .iter()
        .filter_map(|&k| r.latency_by_kind_us.get(k).map(|l| (k, l)))
    {
        println!(
            "  latency       {kind:<7}avg {:.1} µs, p50 {:.1} µs, p99 {:.1} µs, max {:.1} µs",
            l.average, l.p50, l.p99, l.max
        );
    }
    let f = &r.falcon;
    println!(
        "  faults        {:.1}% loss, {:.1}% reordering, {:.1}% duplication: {} frames lost, {} reordered, {} duplicated; {} retransmissions, {} RNR NACKs, of {} frames",
        r.loss * 100.0,
        r.reorder * 100.0,
        r.duplicate * 100.0,
        f.frames_lost,
        f.frames_reordered,
        f.frames_duplicated,
        f.retransmissions,
        f.rnr_nacks,
        f.frames
    );
    let drops: BTreeMap<String, u64> = f.drops.iter().map(|(k, v)| (k.to_string(), *v)).collect();
    println!("  drops         {}", counts(&drops));
    if r.errors > 0 {
        println!(
            "  errors        {} completions with an error status",
            r.errors
        );
    }
}

/// The summary line of the SPI check failures, if any occurred.
pub(super) fn spi_failure_line(r: &Report) -> Option<String> {
    (r.spi_failure_events > 0).then(|| {
        format!(
            "  SPI check     {} frames failed the SPI check or decryption, reported to the connection manager in {} events (first: {})",
            r.spi_failure_frames,
            r.spi_failure_events,
            r.spi_failure_first.as_deref().unwrap_or("-")
        )
    })
}
