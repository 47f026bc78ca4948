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
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::{Duration, Instant};

use falcon_core::api::{Clock, Port};
use falcon_core::random::{Random, SplitMix64};
use falcon_core::testing::Faults;
use hdrhistogram::Histogram;
use nvme_ulp::data::HostBuffers;
use nvme_ulp::initiator::{Icmd, IcmdBuffers, IcmdCompletion, RefuseReason};
use nvme_ulp::layout::{Format, LbaSize, MetadataSize};
use nvme_ulp::status::StatusCounts;
use nvme_ulp::Status;
use serde::Serialize;

use crate::cli::{NvmePattern, NvmePerfArgs, OnOff, PortKind};
use crate::cm::OfferPort;
use crate::cmd::nvme_io::{check_read, fill, latency_histogram, Latency, MAX_IO, MIN_IO};
use crate::error::{AppError, Result};
use crate::nvme::remote::{RemoteConfig, RemoteInitiator};
use crate::nvme::{DeviceStats, NvmeDevice, NvmePair, PairConfig, SubmitRefusal};
/// How long a run waits without any completion before it fails: past the
/// iCMD timeout, every outstanding command has completed (in error).
const ICMD_TIMEOUT: Duration = Duration::from_secs(30);
const STALL_LIMIT: Duration = Duration::from_secs(40);

/// What a run measured (the `--json` object; units in the key names).
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub transport: String,
    /// The initiator NSID the I/Os went to.
    pub nsid: u32,
    pub workload: &'static str,
    pub read_percent: u8,
    pub io_size_bytes: u64,
    pub queue_depth: u32,
    pub lba_size_bytes: u32,
    pub metadata_bytes: u32,
    /// The bytes the I/Os covered.
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
    /// Reads (successful) compared with what this run wrote there.
    pub verified_reads: u64,
    /// Of them, reads whose data or metadata differed.
    pub verify_failures: u64,
    pub first_verify_failure: Option<String>,
    /// The remote target was lost and not reconnected to in time: why.
    pub disconnected: Option<String>,
    pub falcon: FalconFigures,
    pub ok: bool,
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
    /// Remote target: connections set up (the first one included) and
    /// lost.
    pub connects: u64,
    pub disconnects: u64,
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
    /// From a device's counters (or the in-process pair's).
    pub fn from_stats<S: Clone + Into<DeviceStats>>(stats: &S) -> FalconFigures {
        let stats: DeviceStats = stats.clone().into();
        FalconFigures {
            retransmissions: stats.retransmissions,
            drops_total: stats.drops.total(),
            drops: stats.drops.iter().collect(),
            rnr_nacks: stats.rnr_nacks,
            frames_lost: stats.faults.lost,
            frames_reordered: stats.faults.reordered,
            ncmds: stats.initiator.ncmds_sent,
            early_write_completions: stats.initiator.early_write_completions,
            credit_waits: stats.initiator.credit_waits + stats.target.map_or(0, |t| t.credit_waits),
            icmd_timeouts: stats.initiator.timeouts,
            connects: stats.connects,
            disconnects: stats.disconnects,
        }
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

/// The options checked before a device exists.
struct Options {
    /// The remote target's control address; `None`: in process.
    remote: Option<SocketAddr>,
    random: bool,
    read_percent: u32,
}

/// Checks what `args` say independently of the device.
fn options(args: &NvmePerfArgs) -> Result<Options> {
    let usage = |m: String| Err(AppError::Usage(m));
    let remote = match (&args.connect, &args.remote) {
        (Some(addr), _) => Some(resolve("--connect", addr)?),
        (None, Some(trid)) => Some(transport_id(trid)?),
        (None, None) => None,
    };
    if remote.is_none() && args.port != PortKind::Udp {
        return usage(format!(
            "--port {}: only with a remote target (--connect or -r)",
            args.port.name()
        ));
    }
    if remote.is_some() {
        for (given, flag) in [
            (args.lba_size.is_some(), "--lba-size"),
            (args.metadata.is_some(), "--metadata"),
            (args.loss != 0.0, "--loss"),
        ] {
            if given {
                return usage(format!(
                    "{flag}: only for the in-process target (a remote namespace has its own format, and the UDP port injects no loss)"
                ));
            }
        }
        if !(args.reconnect_timeout.is_finite() && args.reconnect_timeout >= 0.0) {
            return usage(format!(
                "--reconnect-timeout {}: must be zero or more seconds",
                args.reconnect_timeout
            ));
        }
    }
    if !(MIN_IO..=MAX_IO).contains(&args.io_size) {
        return usage(format!("-o {}: must be 4k to 1M", args.io_size));
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
    let (random, read_percent) = match args.workload {
        NvmePattern::Read => (false, 100),
        NvmePattern::Write => (false, 0),
        NvmePattern::Randread => (true, 100),
        NvmePattern::Randwrite => (true, 0),
        NvmePattern::Rw => (false, u32::from(args.read_percent)),
        NvmePattern::Randrw => (true, u32::from(args.read_percent)),
    };
    Ok(Options {
        remote,
        random,
        read_percent,
    })
}

/// `HOST:PORT` as a socket address.
pub(crate) fn resolve(flag: &str, addr: &str) -> Result<SocketAddr> {
    addr.to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| AppError::Usage(format!("{flag} {addr}: not a HOST:PORT that resolves")))
}

/// spdk_nvme_perf's `-r 'trtype:UDP traddr:HOST trsvcid:PORT'`.
fn transport_id(trid: &str) -> Result<SocketAddr> {
    let (mut trtype, mut traddr, mut trsvcid) = (None, None, None);
    for pair in trid.split_whitespace() {
        let (key, value) = pair.split_once(':').unwrap_or((pair, ""));
        match key.to_ascii_lowercase().as_str() {
            "trtype" => trtype = Some(value),
            "traddr" => traddr = Some(value),
            "trsvcid" => trsvcid = Some(value),
            other => {
                return Err(AppError::Usage(format!(
                    "-r {trid}: unknown key `{other}` (trtype, traddr, trsvcid)"
                )))
            }
        }
    }
    if !trtype.is_some_and(|t| t.eq_ignore_ascii_case("udp")) {
        return Err(AppError::Usage(format!(
            "-r {trid}: trtype must be UDP (NVMe over Falcon on the kernel UDP port)"
        )));
    }
    let (Some(host), Some(port)) = (traddr, trsvcid) else {
        return Err(AppError::Usage(format!(
            "-r {trid}: needs traddr (the target's host) and trsvcid (its control port)"
        )));
    };
    let addr = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    resolve("-r", &addr)
}

/// The in-process pair `args` ask for.
fn pair_config(args: &NvmePerfArgs) -> Result<PairConfig> {
    let lba_size = args.lba_size.unwrap_or(512);
    let metadata = args.metadata.unwrap_or(0);
    let Some(lba_size) = LbaSize::from_bytes(lba_size as usize) else {
        return Err(AppError::Usage(format!(
            "--lba-size {lba_size}: must be 512 or 4096"
        )));
    };
    let Some(metadata) = MetadataSize::from_bytes(metadata as usize) else {
        return Err(AppError::Usage(format!(
            "--metadata {metadata}: must be 0, 8 or 16"
        )));
    };
    Ok(PairConfig {
        format: Format { lba_size, metadata },
        size: args.size,
        queue_depth: args.queue_depth as usize,
        faults: loopback_faults(args.loss),
        seed: args.seed,
        icmd_timeout: ICMD_TIMEOUT,
        ..PairConfig::default()
    })
}

/// The workload over the first `args.size` bytes of `device`'s namespace.
/// `zeroed`: the namespace starts zeroed (in process), so a never-written
/// offset reads as zeroes; otherwise its contents are unknown.
fn workload(
    args: &NvmePerfArgs,
    options: &Options,
    format: Format,
    namespace_blocks: u64,
    zeroed: bool,
) -> Result<Workload> {
    let usage = |m: String| Err(AppError::Usage(m));
    let lba = format.lba_size.bytes() as u64;
    if args.io_size % lba != 0 {
        return usage(format!(
            "-o {}: must be a multiple of the {lba}-byte LBA size",
            args.io_size
        ));
    }
    let region = args.size.min(namespace_blocks.saturating_mul(lba));
    if region % args.io_size != 0 {
        return usage(format!(
            "--size {region}: must be a multiple of the I/O size {}",
            args.io_size
        ));
    }
    let slots = region / args.io_size;
    if slots < u64::from(args.queue_depth) * 2 {
        return usage(format!(
            "--size {region}: {slots} I/O-sized offsets, fewer than twice the queue depth {}",
            args.queue_depth
        ));
    }
    let initial = if zeroed { 0 } else { UNKNOWN };
    Ok(Workload {
        format,
        random: options.random,
        read_percent: options.read_percent,
        blocks_per_io: args.io_size / lba,
        slots,
        next_sequential: 0,
        rng: SplitMix64::new(args.seed ^ 0x1D0_5EED),
        in_flight: vec![None; slots as usize],
        generations: args.verify.then(|| vec![initial; slots as usize]),
        next_generation: 1,
    })
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
    /// Reads compared with what was written.
    verified_reads: u64,
}

/// Runs `args` (see the module doc).
///
/// # Errors
///
/// [`AppError::Usage`] for a bad option; [`AppError::Failed`] if the
/// device cannot be set up (the pair built, the remote target reached),
/// refuses a command, or no I/O completes for 40 s.
pub fn run(args: &NvmePerfArgs) -> Result<Report> {
    let options = options(args)?;
    if let Some(core) = args.core {
        crate::cmd::node::pin(core)?;
    }
    match options.remote {
        Some(control) => {
            let config = RemoteConfig {
                bind: args.bind,
                nsid: args.nsid,
                queue_depth: args.queue_depth as usize,
                icmd_timeout: ICMD_TIMEOUT,
                psp: args.psp == OnOff::On,
                reconnect_deadline: Duration::from_secs_f64(args.reconnect_timeout),
                ..RemoteConfig::new(control)
            };
            if args.port != PortKind::Udp {
                return remote_on_dpdk(args, &options, config);
            }
            let device = RemoteInitiator::connect(config)?;
            remote(args, &options, device)
        }
        None => {
            let config = pair_config(args)?;
            let workload = workload(
                args,
                &options,
                config.format,
                config.size / config.format.lba_size.bytes() as u64,
                true,
            )?;
            let mut pair = NvmePair::new(&config)?;
            drive(args, &mut pair, workload)
        }
    }
}

/// `--loss PERCENT`: that share of the frames lost and as many held back
/// 20 µs (reordered), each way.
fn loopback_faults(percent: f64) -> Faults {
    let ppm = (percent * 10_000.0).round() as u32;
    Faults {
        loss_ppm: ppm,
        reorder_ppm: ppm,
        reorder_delay: Duration::from_micros(20),
        ..Faults::default()
    }
}

/// The run on a remote device, which is closed at the end.
fn remote<P: Port + OfferPort, C: Clock>(
    args: &NvmePerfArgs,
    options: &Options,
    mut device: RemoteInitiator<P, C>,
) -> Result<Report> {
    let workload = workload(args, options, device.format(), device.blocks(), false)?;
    let report = drive(args, &mut device, workload);
    device.close(Duration::from_secs(5));
    report
}

/// The initiator's engine address on a DPDK port: the port's MAC, and the
/// address `falcon node`'s initiator has (one initiator per DPDK port).
#[cfg(feature = "dpdk")]
const DPDK_ENGINE_IP: [u8; 4] = [10, 0, 0, 1];

/// The remote run on a DPDK port (`--port memif|af-packet|af-xdp`): one
/// EAL on `--core`, the port as `falcon node` opens it.
#[cfg(feature = "dpdk")]
fn remote_on_dpdk(args: &NvmePerfArgs, options: &Options, config: RemoteConfig) -> Result<Report> {
    use crate::cmd::node::dpdk::{with_port, Opened, PortSpec};
    use crate::nvme::remote::EngineAddress;
    let spec = PortSpec {
        kind: args.port,
        server: false,
        socket: &args.socket,
        iface: args.iface.as_deref(),
        core: args.core.unwrap_or(0),
        who: "nvme-perf".into(),
    };
    with_port(&spec, |opened| {
        let Opened {
            port,
            mac,
            max_frame,
            clock,
        } = opened;
        let address = EngineAddress {
            ip: std::net::IpAddr::from(DPDK_ENGINE_IP),
            mac,
        };
        let device = RemoteInitiator::connect_on(config, port, clock, address, max_frame)?;
        remote(args, options, device)
    })
}

#[cfg(not(feature = "dpdk"))]
fn remote_on_dpdk(
    args: &NvmePerfArgs,
    _options: &Options,
    _config: RemoteConfig,
) -> Result<Report> {
    Err(AppError::Usage(format!(
        "--port {}: this falcon was built without DPDK; build it with \
         `cargo build --release --features dpdk` (DPDK 22.11 from scripts/setup.sh)",
        args.port.name()
    )))
}

/// Keeps `-q` I/Os outstanding on `device` until the time or the count
/// is reached, then waits for the last completion.
fn drive<D: NvmeDevice>(
    args: &NvmePerfArgs,
    device: &mut D,
    mut workload: Workload,
) -> Result<Report> {
    let nsid = device.nsid();
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
    let mut histogram = latency_histogram()?;
    let mut counts = Counts::default();
    let mut statuses = StatusCounts::default();
    let mut verify_failures = 0u64;
    let mut first_verify_failure = None;
    let mut disconnected = None;

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
        while submitting && device.has_room() {
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
                Icmd::read(slot, nsid, slba, nlb, buffers)
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
                Icmd::write(slot, nsid, slba, nlb, buffers)
            };
            match device.submit(icmd) {
                Ok(()) => submitted += 1,
                Err(refused) => {
                    workload.in_flight[slot as usize] = None;
                    if let IcmdBuffers::Read(buffers) = refused.icmd.buffers {
                        read_pool.push(buffers);
                    }
                    match refused.reason {
                        SubmitRefusal::Initiator(RefuseReason::QueueFull)
                        | SubmitRefusal::Reconnecting(_) => break,
                        SubmitRefusal::Disconnected(why) => {
                            disconnected = Some(why);
                            submitting = false;
                            break;
                        }
                        SubmitRefusal::Initiator(reason) => {
                            return Err(AppError::Failed(format!(
                                "the initiator refused an I/O at LBA {slba}: {reason}"
                            )));
                        }
                    }
                }
            }
        }
        device.turn();
        while let Some(done) = device.poll_completion() {
            last_completion = Instant::now();
            complete(
                done,
                &mut workload,
                &mut counts,
                &mut statuses,
                &mut histogram,
                &mut read_pool,
                (&mut verify_failures, &mut first_verify_failure),
            );
        }
        let now = Instant::now();
        if time.is_some_and(|t| now.duration_since(start) >= t) {
            submitting = false;
        }
        if !submitting && device.outstanding() == 0 {
            break;
        }
        if device.outstanding() > 0 && now.duration_since(last_completion) > STALL_LIMIT {
            return Err(AppError::Failed(format!(
                "no I/O completed for {} s; {} outstanding",
                STALL_LIMIT.as_secs(),
                device.outstanding()
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
    let stats = device.stats();
    let latency = Latency::from_histogram(&histogram);
    let ok =
        (counts.errors == 0 || args.allow_errors) && verify_failures == 0 && disconnected.is_none();
    Ok(Report {
        transport: device.transport(),
        nsid,
        workload: pattern_name(args.workload),
        read_percent: workload.read_percent as u8,
        io_size_bytes: args.io_size,
        queue_depth: args.queue_depth,
        lba_size_bytes: format.lba_size.bytes() as u32,
        metadata_bytes: format.metadata.bytes() as u32,
        namespace_bytes: workload.slots * args.io_size,
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
        verified_reads: counts.verified_reads,
        verify_failures,
        first_verify_failure,
        disconnected,
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
                let blocks = workload.blocks_per_io as usize;
                let known = (generation != UNKNOWN).then_some(generation);
                if known.is_some() {
                    counts.verified_reads += 1;
                }
                if let Err(mismatch) =
                    check_read(workload.format, slba, blocks, |_| known, &buffers)
                {
                    *failures += 1;
                    first.get_or_insert_with(|| {
                        format!("read at LBA {slba} ({blocks} blocks): {mismatch}")
                    });
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
    let device = if report.transport.contains("in-process") {
        format!("Falcon NVMe in-process NSID {}", report.nsid)
    } else {
        format!("Falcon NVMe remote NSID {}", report.nsid)
    };
    row(&format!("{device} from core 0"));
    println!("========================================================");
    row("Total");
    println!();
    println!("Summary latency data for {device} from core 0:");
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
    if f.connects > 0 {
        println!(
            "Target: {} connection(s), {} lost{}",
            f.connects,
            f.disconnects,
            report
                .disconnected
                .as_deref()
                .map(|why| format!("; gave up: {why}"))
                .unwrap_or_default()
        );
    }
    println!(
        "I/Os: {} in {:.2} s ({} reads, {} writes); errors {}{}; {} reads verified, {} failures",
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
        report.verified_reads,
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
            "nvme-perf: {} errors, {} verify failures{}{}",
            report.errors,
            report.verify_failures,
            report
                .first_verify_failure
                .as_deref()
                .map(|f| format!("; first: {f}"))
                .unwrap_or_default(),
            report
                .disconnected
                .as_deref()
                .map(|why| format!("; the target is lost: {why}"))
                .unwrap_or_default()
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A read that returns other bytes than the last write there is a
    /// verify failure; the same read with the right bytes is not.
    #[test]
    fn a_read_that_differs_from_the_last_write_fails_verification() {
        use clap::Parser;
        let cli = crate::cli::Cli::try_parse_from([
            "falcon",
            "nvme-perf",
            "-q",
            "4",
            "-w",
            "randrw",
            "--ios",
            "1",
            "--verify",
            "--metadata",
            "8",
            "--size",
            "1M",
        ])
        .expect("parses");
        let crate::cli::Command::NvmePerf(args) = cli.command else {
            panic!("nvme-perf");
        };
        let options = options(&args).expect("valid");
        let config = pair_config(&args).expect("valid");
        let mut workload = workload(&args, &options, config.format, 2048, true).expect("valid");
        let format = workload.format;
        let mut counts = Counts::default();
        let mut statuses = StatusCounts::default();
        let mut histogram = Histogram::<u64>::new(3).expect("histogram");
        let mut pool = Vec::new();
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

    /// `-r` is spdk_nvme_perf's form of `--connect`; what the remote form
    /// cannot do is refused by name.
    #[test]
    fn the_remote_forms_are_checked() {
        use clap::Parser;
        let parse = |extra: &[&str]| {
            let mut all = vec!["falcon", "nvme-perf"];
            all.extend_from_slice(extra);
            let crate::cli::Command::NvmePerf(args) = crate::cli::Cli::try_parse_from(all)
                .expect("parses")
                .command
            else {
                panic!("nvme-perf");
            };
            args
        };
        let args = parse(&["-r", "trtype:UDP traddr:127.0.0.1 trsvcid:4420"]);
        assert_eq!(
            options(&args).unwrap().remote,
            Some("127.0.0.1:4420".parse().unwrap())
        );
        let args = parse(&["--connect", "localhost:4420"]);
        assert!(options(&args).unwrap().remote.is_some());
        for (extra, expected) in [
            (
                &["-r", "trtype:TCP traddr:10.0.0.2 trsvcid:4420"][..],
                "trtype must be UDP",
            ),
            (&["-r", "trtype:UDP traddr:10.0.0.2"][..], "needs traddr"),
            (&["-r", "trtype:UDP subnqn:x"][..], "unknown key `subnqn`"),
            (
                &["--connect", "127.0.0.1:4420", "--loss", "1"][..],
                "--loss: only for the in-process target",
            ),
            (
                &["--connect", "127.0.0.1:4420", "--lba-size", "4096"][..],
                "--lba-size: only for",
            ),
            (&["--connect", "no port"][..], "not a HOST:PORT"),
        ] {
            match options(&parse(extra)) {
                Err(AppError::Usage(m)) => assert!(m.contains(expected), "{extra:?}: {m}"),
                other => panic!("{extra:?}: {:?}", other.map(|o| o.remote)),
            }
        }
    }
}
