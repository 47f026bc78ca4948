//! `falcon nvme-perf`: NVMe I/O with spdk_nvme_perf's options and output
//! (ulp.md §4.3, §4.5), over NVMe over Falcon.
//!
//! Layer: application. Drives the in-process pair ([`crate::nvme`]): keeps
//! `-q` iCMDs outstanding, each `-o` bytes at an offset aligned to its size
//! (sequential or uniform random), reads with probability `-M` %; until
//! `-t` seconds or `--ios` I/Os, then waits for the last completion. With
//! `--verify` every write fills its blocks (data and metadata) with a
//! pattern keyed by LBA and the write's generation, every read is compared
//! with the last generation written at its offset (zeroes before any), and
//! no I/O is started on an offset that has one in flight (else what a read
//! returns is undefined). Errors are NVMe statuses other than success,
//! counted by status; they fail the run unless `--allow-errors`, as does
//! any verify mismatch.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use falcon_core::random::{Random, SplitMix64};
use hdrhistogram::Histogram;
use nvme_ulp::data::HostBuffers;
use nvme_ulp::initiator::{Icmd, IcmdBuffers, IcmdCompletion, RefuseReason};
use nvme_ulp::layout::{Format, LbaSize, MetadataSize};
use nvme_ulp::status::StatusCounts;
use nvme_ulp::Status;
use serde::Serialize;

use crate::cli::{NvmePattern, NvmePerfArgs};
use crate::error::{AppError, Result};
use crate::nvme::{NvmePair, PairConfig, PairStats, NSID};

/// Smallest and largest I/O: an iCMD carries 4 KiB to 1 MiB (NVMe-0.9
/// §6.5, the initiator's MDTS).
const MIN_IO: u64 = 4096;
const MAX_IO: u64 = 1 << 20;
/// How long a run waits without any completion before it fails: past the
/// iCMD timeout, every outstanding command has completed (in error).
const ICMD_TIMEOUT: Duration = Duration::from_secs(30);
const STALL_LIMIT: Duration = Duration::from_secs(40);

/// What a run measured (the `--json` object; units in the key names).
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub transport: &'static str,
    pub workload: &'static str,
    pub read_percent: u8,
    pub io_size_bytes: u64,
    pub queue_depth: u32,
    pub lba_size_bytes: u32,
    pub metadata_bytes: u32,
    pub namespace_bytes: u64,
    pub loss_percent: f64,
    pub seed: u64,
    pub verify: bool,
    pub duration_s: f64,
    pub ios: u64,
    pub reads: u64,
    pub writes: u64,
    pub iops: f64,
    pub mib_s: f64,
    pub latency_us: Latency,
    /// I/Os completed with a status other than success.
    pub errors: u64,
    /// Of them, by status (only the non-zero ones).
    pub errors_by_status: BTreeMap<&'static str, u64>,
    /// Reads (successful) whose data or metadata differed from what was
    /// written.
    pub verify_failures: u64,
    pub first_verify_failure: Option<String>,
    pub falcon: FalconFigures,
    pub ok: bool,
}

/// spdk_nvme_perf's latency columns and percentile rows, in µs.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Latency {
    pub average: f64,
    pub min: f64,
    pub max: f64,
    pub p50: f64,
    pub p99: f64,
    pub p99_9: f64,
    pub p99_99: f64,
}

/// What Falcon did beneath the I/Os, both engines.
#[derive(Debug, Clone, Serialize)]
pub struct FalconFigures {
    pub retransmissions: u64,
    pub drops_total: u64,
    pub drops: BTreeMap<&'static str, u64>,
    /// Requests the target NACKed receiver-not-ready.
    pub rnr_nacks: u64,
    pub frames_lost: u64,
    pub frames_reordered: u64,
    /// nCMD request pushes sent by the initiator.
    pub ncmds: u64,
    /// Write Completions the target sent before writing (NVMe-0.9 §7.2).
    pub early_write_completions: u64,
    /// Submissions that waited for Falcon credits.
    pub credit_waits: u64,
    /// iCMDs failed by the initiator's timeout.
    pub icmd_timeouts: u64,
}

/// The non-zero counts of `counts` but success, by name.
pub fn errors_by_status(counts: &StatusCounts) -> BTreeMap<&'static str, u64> {
    [
        ("invalid_field", counts.invalid_field),
        ("invalid_namespace", counts.invalid_namespace),
        ("lba_out_of_range", counts.lba_out_of_range),
        ("data_transfer", counts.data_transfer),
        ("internal", counts.internal),
        ("transient_transport", counts.transport),
        ("aborted_by_host", counts.aborted),
        ("integrity", counts.integrity),
        ("media", counts.media),
        ("other", counts.other),
    ]
    .into_iter()
    .filter(|&(_, n)| n > 0)
    .collect()
}

impl FalconFigures {
    pub fn from_stats(stats: &PairStats) -> FalconFigures {
        FalconFigures {
            retransmissions: stats.retransmissions,
            drops_total: stats.drops.total(),
            drops: stats.drops.iter().collect(),
            rnr_nacks: stats.rnr_nacks,
            frames_lost: stats.faults.lost,
            frames_reordered: stats.faults.reordered,
            ncmds: stats.initiator.ncmds_sent,
            early_write_completions: stats.initiator.early_write_completions,
            credit_waits: stats.initiator.credit_waits + stats.target.credit_waits,
            icmd_timeouts: stats.initiator.timeouts,
        }
    }
}

/// The pattern a write of generation `generation` leaves in block `lba`:
/// `data` (one block) and `metadata` (its metadata). Generation 0 is a
/// block never written: zeroes.
fn fill_block(lba: u64, generation: u32, data: &mut [u8], metadata: &mut [u8]) {
    if generation == 0 {
        data.fill(0);
        metadata.fill(0);
        return;
    }
    let mut rng = SplitMix64::new((lba << 24) ^ u64::from(generation) ^ 0xA5A5_5A5A_0F0F_F0F0);
    for part in [data, metadata] {
        for chunk in part.chunks_mut(8) {
            let word = rng.next_u64().to_le_bytes();
            chunk.copy_from_slice(&word[..chunk.len()]);
        }
    }
}

/// The pattern of `blocks` blocks from `slba` at `generation`.
fn fill(format: Format, slba: u64, generation: u32, buffers: &mut HostBuffers, blocks: usize) {
    let lba = format.lba_size.bytes();
    let md = format.metadata.bytes();
    buffers.data.resize(blocks * lba, 0);
    buffers.metadata.resize(blocks * md, 0);
    for block in 0..blocks {
        fill_block(
            slba + block as u64,
            generation,
            &mut buffers.data[block * lba..(block + 1) * lba],
            &mut buffers.metadata[block * md..(block + 1) * md],
        );
    }
}

/// Where and what the next I/Os are.
struct Workload {
    format: Format,
    random: bool,
    read_percent: u32,
    blocks_per_io: u64,
    /// Offsets (aligned I/O-sized slots) in the namespace.
    slots: u64,
    next_sequential: u64,
    rng: SplitMix64,
    /// The I/O in flight on each slot: (write, generation).
    in_flight: Vec<Option<(bool, u32)>>,
    /// With `--verify`: the last generation written successfully to each
    /// slot (0: never; `u32::MAX`: a write failed, content unknown).
    generations: Option<Vec<u32>>,
    next_generation: u32,
}

const UNKNOWN: u32 = u32::MAX;

impl Workload {
    /// A free slot, or none when every slot tried is in flight.
    fn pick(&mut self) -> Option<u64> {
        if self.random {
            for _ in 0..16 {
                let slot = self.rng.next_u64() % self.slots;
                if self.in_flight[slot as usize].is_none() {
                    return Some(slot);
                }
            }
            None
        } else {
            let slot = self.next_sequential;
            if self.in_flight[slot as usize].is_some() {
                return None;
            }
            self.next_sequential = (slot + 1) % self.slots;
            Some(slot)
        }
    }
}

/// Checks `args` and builds the pair's configuration and the workload.
fn prepare(args: &NvmePerfArgs) -> Result<(PairConfig, Workload)> {
    let usage = |m: String| Err(AppError::Usage(m));
    if let Some(trid) = &args.remote {
        return usage(format!(
            "-r {trid}: a remote target (over UDP or DPDK) is not implemented yet; \
             nvme-perf runs the initiator and the target in this process without -r"
        ));
    }
    let Some(lba_size) = LbaSize::from_bytes(args.lba_size as usize) else {
        return usage(format!("--lba-size {}: must be 512 or 4096", args.lba_size));
    };
    let Some(metadata) = MetadataSize::from_bytes(args.metadata as usize) else {
        return usage(format!("--metadata {}: must be 0, 8 or 16", args.metadata));
    };
    let lba = lba_size.bytes() as u64;
    if !(MIN_IO..=MAX_IO).contains(&args.io_size) || args.io_size % lba != 0 {
        return usage(format!(
            "-o {}: must be 4k to 1M, a multiple of the {lba}-byte LBA size",
            args.io_size
        ));
    }
    if args.size % args.io_size != 0 {
        return usage(format!(
            "--size {}: must be a multiple of the I/O size {}",
            args.size, args.io_size
        ));
    }
    let slots = args.size / args.io_size;
    if slots < u64::from(args.queue_depth) * 2 {
        return usage(format!(
            "--size {}: {slots} I/O-sized offsets, fewer than twice the queue depth {}",
            args.size, args.queue_depth
        ));
    }
    if !(0.0..=100.0).contains(&args.loss) {
        return usage(format!("--loss {}: must be 0 to 100", args.loss));
    }
    if args.time.is_some_and(|t| !(t > 0.0 && t < 1e7)) {
        return usage("-t: must be a positive number of seconds".into());
    }
    if args.ios == Some(0) {
        return usage("--ios: must be positive".into());
    }
    let format = Format { lba_size, metadata };
    let pair = PairConfig {
        format,
        size: args.size,
        queue_depth: args.queue_depth as usize,
        loss_ppm: (args.loss * 10_000.0).round() as u32,
        seed: args.seed,
        icmd_timeout: ICMD_TIMEOUT,
        ..PairConfig::default()
    };
    let (random, read_percent) = match args.workload {
        NvmePattern::Read => (false, 100),
        NvmePattern::Write => (false, 0),
        NvmePattern::Randread => (true, 100),
        NvmePattern::Randwrite => (true, 0),
        NvmePattern::Rw => (false, u32::from(args.read_percent)),
        NvmePattern::Randrw => (true, u32::from(args.read_percent)),
    };
    let workload = Workload {
        format,
        random,
        read_percent,
        blocks_per_io: args.io_size / lba,
        slots,
        next_sequential: 0,
        rng: SplitMix64::new(args.seed ^ 0x1D0_5EED),
        in_flight: vec![None; slots as usize],
        generations: args.verify.then(|| vec![0; slots as usize]),
        next_generation: 1,
    };
    Ok((pair, workload))
}

fn pattern_name(pattern: NvmePattern) -> &'static str {
    match pattern {
        NvmePattern::Read => "read",
        NvmePattern::Write => "write",
        NvmePattern::Randread => "randread",
        NvmePattern::Randwrite => "randwrite",
        NvmePattern::Rw => "rw",
        NvmePattern::Randrw => "randrw",
    }
}

/// Counts of the run so far.
#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    ios: u64,
    reads: u64,
    writes: u64,
    bytes: u64,
    errors: u64,
}

/// Runs `args` (see the module doc).
///
/// # Errors
///
/// [`AppError::Usage`] for a bad option; [`AppError::Failed`] if the pair
/// cannot be built, refuses a command, or no I/O completes for 40 s.
pub fn run(args: &NvmePerfArgs) -> Result<Report> {
    let (config, mut workload) = prepare(args)?;
    let mut pair = NvmePair::new(&config)?;
    let format = workload.format;
    let blocks = workload.blocks_per_io as usize;
    let nlb = (workload.blocks_per_io - 1) as u16;
    let io_bytes = args.io_size as usize;
    // Without --verify every write sends the same buffers.
    let mut shared = HostBuffers::default();
    fill(format, 0, 1, &mut shared, blocks);
    let shared = Arc::new(shared);
    let mut read_pool: Vec<HostBuffers> = (0..args.queue_depth)
        .map(|_| HostBuffers {
            data: Vec::with_capacity(io_bytes),
            metadata: Vec::with_capacity(blocks * format.metadata.bytes()),
        })
        .collect();
    let mut expected = HostBuffers::default();
    let mut histogram = Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3)
        .map_err(|e| AppError::Failed(format!("histogram: {e}")))?;
    let mut counts = Counts::default();
    let mut statuses = StatusCounts::default();
    let mut verify_failures = 0u64;
    let mut first_verify_failure = None;

    let time = args
        .ios
        .is_none()
        .then(|| Duration::from_secs_f64(args.time.unwrap_or(5.0)));
    let start = Instant::now();
    let mut submitted = 0u64;
    let mut submitting = true;
    let mut last_completion = start;
    let mut last_line = start;
    let mut at_last_line = counts;

    loop {
        while submitting && pair.has_room() {
            if args.ios.is_some_and(|n| submitted >= n) {
                submitting = false;
                break;
            }
            let Some(slot) = workload.pick() else { break };
            let slba = slot * workload.blocks_per_io;
            let read = workload.rng.chance(workload.read_percent, 100);
            let icmd = if read {
                let buffers = read_pool.pop().unwrap_or_default();
                workload.in_flight[slot as usize] = Some((false, 0));
                Icmd::read(slot, NSID, slba, nlb, buffers)
            } else {
                let buffers = if workload.generations.is_some() {
                    let generation = workload.next_generation;
                    workload.next_generation = match generation + 1 {
                        UNKNOWN => 1,
                        next => next,
                    };
                    workload.in_flight[slot as usize] = Some((true, generation));
                    let mut buffers = HostBuffers::default();
                    fill(format, slba, generation, &mut buffers, blocks);
                    Arc::new(buffers)
                } else {
                    workload.in_flight[slot as usize] = Some((true, 0));
                    Arc::clone(&shared)
                };
                Icmd::write(slot, NSID, slba, nlb, buffers)
            };
            match pair.submit(icmd) {
                Ok(()) => submitted += 1,
                Err(refused) => {
                    workload.in_flight[slot as usize] = None;
                    if refused.reason == RefuseReason::QueueFull {
                        break;
                    }
                    return Err(AppError::Failed(format!(
                        "the initiator refused an I/O at LBA {slba}: {refused}"
                    )));
                }
            }
        }
        pair.turn();
        while let Some(done) = pair.poll_completion() {
            last_completion = Instant::now();
            complete(
                done,
                &mut workload,
                &mut counts,
                &mut statuses,
                &mut histogram,
                &mut read_pool,
                &mut expected,
                (&mut verify_failures, &mut first_verify_failure),
            );
        }
        let now = Instant::now();
        if time.is_some_and(|t| now.duration_since(start) >= t) {
            submitting = false;
        }
        if !submitting && pair.outstanding() == 0 {
            break;
        }
        if now.duration_since(last_completion) > STALL_LIMIT {
            return Err(AppError::Failed(format!(
                "no I/O completed for {} s; {} outstanding",
                STALL_LIMIT.as_secs(),
                pair.outstanding()
            )));
        }
        if !args.quiet && now.duration_since(last_line) >= Duration::from_secs(1) {
            let dt = now.duration_since(last_line).as_secs_f64();
            eprintln!(
                "[nvme-perf {:5.1} s] IOPS {:10.1}  MiB/s {:9.2}  errors {}",
                now.duration_since(start).as_secs_f64(),
                (counts.ios - at_last_line.ios) as f64 / dt,
                (counts.bytes - at_last_line.bytes) as f64 / dt / (1 << 20) as f64,
                counts.errors
            );
            last_line = now;
            at_last_line = counts;
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    let stats = pair.stats();
    let us = |ns: u64| ns as f64 / 1e3;
    let latency = if histogram.is_empty() {
        Latency::default()
    } else {
        Latency {
            average: histogram.mean() / 1e3,
            min: us(histogram.min()),
            max: us(histogram.max()),
            p50: us(histogram.value_at_quantile(0.5)),
            p99: us(histogram.value_at_quantile(0.99)),
            p99_9: us(histogram.value_at_quantile(0.999)),
            p99_99: us(histogram.value_at_quantile(0.9999)),
        }
    };
    let ok = (counts.errors == 0 || args.allow_errors) && verify_failures == 0;
    Ok(Report {
        transport: "NVMe over Falcon, in-process loopback (unordered connection, PSP, Swift)",
        workload: pattern_name(args.workload),
        read_percent: workload.read_percent as u8,
        io_size_bytes: args.io_size,
        queue_depth: args.queue_depth,
        lba_size_bytes: args.lba_size,
        metadata_bytes: args.metadata,
        namespace_bytes: args.size,
        loss_percent: args.loss,
        seed: args.seed,
        verify: args.verify,
        duration_s: elapsed,
        ios: counts.ios,
        reads: counts.reads,
        writes: counts.writes,
        iops: counts.ios as f64 / elapsed,
        mib_s: counts.bytes as f64 / elapsed / (1 << 20) as f64,
        latency_us: latency,
        errors: counts.errors,
        errors_by_status: errors_by_status(&statuses),
        verify_failures,
        first_verify_failure,
        falcon: FalconFigures::from_stats(&stats),
        ok,
    })
}

/// One completion: counted, its latency recorded, a read checked.
#[allow(clippy::too_many_arguments)]
fn complete(
    done: IcmdCompletion,
    workload: &mut Workload,
    counts: &mut Counts,
    statuses: &mut StatusCounts,
    histogram: &mut Histogram<u64>,
    read_pool: &mut Vec<HostBuffers>,
    expected: &mut HostBuffers,
    (failures, first): (&mut u64, &mut Option<String>),
) {
    let slot = done.tag;
    let Some((write, generation)) = workload
        .in_flight
        .get_mut(slot as usize)
        .and_then(Option::take)
    else {
        *failures += 1;
        first.get_or_insert_with(|| format!("a completion names slot {slot}, not in flight"));
        return;
    };
    statuses.record(done.status);
    counts.ios += 1;
    histogram.saturating_record(u64::try_from(done.latency.as_nanos()).unwrap_or(u64::MAX));
    let success = done.status == Status::SUCCESS;
    if !success {
        counts.errors += 1;
    }
    let slba = slot * workload.blocks_per_io;
    match done.buffers {
        IcmdBuffers::Write(buffers) => {
            counts.writes += 1;
            counts.bytes += buffers.data.len() as u64;
            if let Some(generations) = &mut workload.generations {
                generations[slot as usize] = if success { generation } else { UNKNOWN };
            }
            debug_assert!(write);
        }
        IcmdBuffers::Read(buffers) => {
            counts.reads += 1;
            counts.bytes += buffers.data.len() as u64;
            if let (Some(generations), true) = (&workload.generations, success) {
                let generation = generations[slot as usize];
                if generation != UNKNOWN {
                    let blocks = workload.blocks_per_io as usize;
                    fill(workload.format, slba, generation, expected, blocks);
                    if *expected != buffers {
                        *failures += 1;
                        first.get_or_insert_with(|| {
                            format!(
                                "read at LBA {slba} ({} blocks) differs from write generation {generation}",
                                blocks
                            )
                        });
                    }
                }
            }
            read_pool.push(buffers);
        }
    }
}

/// Prints `report` in spdk_nvme_perf's shape, then the Falcon figures.
pub fn print_text(report: &Report) {
    let l = &report.latency_us;
    println!(
        "{} {}: {} B I/O, QD {}, {} B LBA + {} B metadata, {:.1} % loss, {}",
        report.transport,
        report.workload,
        report.io_size_bytes,
        report.queue_depth,
        report.lba_size_bytes,
        report.metadata_bytes,
        report.loss_percent,
        if report.verify {
            "verified"
        } else {
            "not verified"
        }
    );
    println!("========================================================");
    println!("{:>95}", "Latency(us)");
    println!(
        "{:<45}: {:>12} {:>10} {:>10} {:>10} {:>10}",
        "Device Information", "IOPS", "MiB/s", "Average", "min", "max"
    );
    let row = |name: &str| {
        println!(
            "{name:<45}: {:>12.2} {:>10.2} {:>10.2} {:>10.2} {:>10.2}",
            report.iops, report.mib_s, l.average, l.min, l.max
        );
    };
    row(&format!("Falcon NVMe in-process NSID {NSID} from core 0"));
    println!("========================================================");
    row("Total");
    println!();
    println!("Summary latency data for Falcon NVMe in-process NSID {NSID} from core 0:");
    println!("=================================================================================");
    for (p, v) in [
        (50.0, l.p50),
        (99.0, l.p99),
        (99.9, l.p99_9),
        (99.99, l.p99_99),
    ] {
        println!("{p:>10.5}% : {v:>12.3}us");
    }
    println!();
    let f = &report.falcon;
    let drops = if f.drops.is_empty() {
        "none".to_string()
    } else {
        f.drops
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    println!(
        "Falcon: {} nCMDs, {} retransmissions, {} RNR NACKs, {} early write completions, {} credit waits; \
         loopback lost {} and reordered {} frames; drops: {drops}",
        f.ncmds,
        f.retransmissions,
        f.rnr_nacks,
        f.early_write_completions,
        f.credit_waits,
        f.frames_lost,
        f.frames_reordered
    );
    println!(
        "I/Os: {} in {:.2} s ({} reads, {} writes); errors {}{}; verify failures {}",
        report.ios,
        report.duration_s,
        report.reads,
        report.writes,
        report.errors,
        if report.errors_by_status.is_empty() {
            String::new()
        } else {
            format!(
                " ({})",
                report
                    .errors_by_status
                    .iter()
                    .map(|(k, v)| format!("{k} {v}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        },
        report.verify_failures
    );
}

/// `falcon nvme-perf`: run, print, and fail on errors.
///
/// # Errors
///
/// As [`run`]; [`AppError::Failed`] when the run found errors (unless
/// `--allow-errors`) or verify failures.
pub fn main(args: &NvmePerfArgs) -> Result<()> {
    let report = run(args)?;
    if args.json {
        println!("{}", serde_json::to_string(&report).unwrap_or_default());
    } else {
        print_text(&report);
    }
    if report.ok {
        Ok(())
    } else {
        Err(AppError::Failed(format!(
            "nvme-perf: {} errors, {} verify failures{}",
            report.errors,
            report.verify_failures,
            report
                .first_verify_failure
                .as_deref()
                .map(|f| format!("; first: {f}"))
                .unwrap_or_default()
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pattern_depends_on_lba_and_generation() {
        let format = Format {
            lba_size: LbaSize::B512,
            metadata: MetadataSize::B8,
        };
        let mut a = HostBuffers::default();
        let mut b = HostBuffers::default();
        fill(format, 8, 1, &mut a, 2);
        fill(format, 8, 2, &mut b, 2);
        assert_ne!(a.data, b.data);
        assert_ne!(a.metadata, b.metadata);
        fill(format, 9, 1, &mut b, 2);
        assert_eq!(a.data[512..], b.data[..512]);
        assert_eq!(a.metadata[8..], b.metadata[..8]);
        fill(format, 8, 0, &mut b, 2);
        assert!(b.data.iter().chain(&b.metadata).all(|&x| x == 0));
    }

    /// A read that returns other bytes than the last write there is a
    /// verify failure; the same read with the right bytes is not.
    #[test]
    fn a_read_that_differs_from_the_last_write_fails_verification() {
        let args = NvmePerfArgs {
            queue_depth: 4,
            io_size: 4096,
            workload: NvmePattern::Randrw,
            read_percent: 50,
            time: None,
            ios: Some(1),
            verify: true,
            lba_size: 512,
            metadata: 8,
            size: 1 << 20,
            loss: 0.0,
            seed: 1,
            remote: None,
            allow_errors: false,
            quiet: true,
            json: false,
        };
        let (_, mut workload) = prepare(&args).expect("valid");
        let format = workload.format;
        let mut counts = Counts::default();
        let mut statuses = StatusCounts::default();
        let mut histogram = Histogram::<u64>::new(3).expect("histogram");
        let mut pool = Vec::new();
        let mut expected = HostBuffers::default();
        let mut failures = 0;
        let mut first = None;
        let mut finish = |workload: &mut Workload, tag: u64, buffers: IcmdBuffers| {
            complete(
                IcmdCompletion {
                    tag,
                    status: Status::SUCCESS,
                    buffers,
                    latency: Duration::from_micros(10),
                    ncmds: 1,
                },
                workload,
                &mut counts,
                &mut statuses,
                &mut histogram,
                &mut pool,
                &mut expected,
                (&mut failures, &mut first),
            );
            (failures, first.clone())
        };
        // Slot 3 (LBAs 24..32) written at generation 5.
        let mut written = HostBuffers::default();
        fill(format, 24, 5, &mut written, 8);
        workload.in_flight[3] = Some((true, 5));
        finish(
            &mut workload,
            3,
            IcmdBuffers::Write(Arc::new(written.clone())),
        );
        workload.in_flight[3] = Some((false, 0));
        assert_eq!(
            finish(&mut workload, 3, IcmdBuffers::Read(written.clone())).0,
            0
        );
        let mut wrong = written.clone();
        wrong.metadata[63] ^= 1;
        workload.in_flight[3] = Some((false, 0));
        let (failures, first) = finish(&mut workload, 3, IcmdBuffers::Read(wrong));
        assert_eq!(failures, 1);
        assert!(first.is_some_and(|f| f.contains("LBA 24")));
        // Never written: zeroes expected, the pattern is a failure.
        workload.in_flight[4] = Some((false, 0));
        let mut zero = HostBuffers::default();
        fill(format, 32, 0, &mut zero, 8);
        assert_eq!(finish(&mut workload, 4, IcmdBuffers::Read(zero)).0, 1);
        workload.in_flight[4] = Some((false, 0));
        assert_eq!(finish(&mut workload, 4, IcmdBuffers::Read(written)).0, 2);
    }

    #[test]
    fn the_remote_form_is_a_clear_usage_error() {
        use clap::Parser;
        let args = crate::cli::Cli::try_parse_from([
            "falcon",
            "nvme-perf",
            "-r",
            "trtype:UDP traddr:10.0.0.2",
        ])
        .expect("parses");
        let crate::cli::Command::NvmePerf(args) = args.command else {
            panic!("nvme-perf");
        };
        match run(&args) {
            Err(AppError::Usage(m)) => assert!(m.contains("not implemented yet"), "{m}"),
            other => panic!("{other:?}"),
        }
    }
}
