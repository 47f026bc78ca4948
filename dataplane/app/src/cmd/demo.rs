//! `falcon demo`: the main job on the embedded default (DESIGN §1).
//!
//! An initiator engine and a target engine run on one core, in one process,
//! over the in-process loopback with seeded faults (loss, reordering,
//! duplication), PSP on, Swift congestion control in the inline RUE (or,
//! with `--rue-thread`, one RUE core on its own thread serving both engines
//! through one event/result queue pair each, DESIGN §3). The
//! initiator keeps `--depth` transactions outstanding, a mix of pushes and
//! pulls of random sizes; the target checks every pushed byte and serves
//! every pull with bytes the initiator checks in turn. Time is the real
//! clock (so timers, RTTs and latencies are this machine's), read at each
//! node's receive and transmit so that, as between two hosts, a node's own
//! processing falls between its receive and ACK timestamps and Swift does
//! not count it as fabric delay (read once per loop turn, a debug build's
//! millisecond turns drove the fabric window to its floor); the faults are
//! seeded. The run fails (exit 1) if any transaction is lost, duplicated,
//! completes in error, or carries a wrong byte.
//!
//! What runs — addresses, PSP, the connection (CIDs, initial PSNs and
//! RSNs, ordering), delivery, resources, RUE, workload and faults — is the
//! embedded default, a `--config` file and the flags, merged and checked by
//! [`crate::democfg`].
//!
//! Each transaction's ULP header is its 8-byte tag; the bytes after it are a
//! function of the tag, so either side can verify without shared state.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use falcon_core::drop::DropReason;
use falcon_core::engine::{connect, rekey_pair, CmEvent, ConnectionHandle, Engine};
use falcon_core::port::{FaultInjector, Loopback, LoopbackConfig};
use falcon_core::random::{Random, SplitMix64};
use falcon_core::time::Timestamp;
use falcon_core::transaction::{CompletionStatus, Transaction, TransactionKind, UlpEvent};
use hdrhistogram::Histogram;
use serde::Serialize;

use crate::democfg::schema::{Ordering, PspVersion, RuePlacement};
use crate::democfg::EffectiveConfig;
use crate::error::{AppError, Result};

/// Shortest time between two key rotations, and the multiple of the
/// connection's smoothed RTT it grows to. Each rotation first retires the
/// previous one's SPIs (steps 4–5, "after a few RTTs", OCP Falcon 0.9
/// §9.2.2.3), so a frame sealed just before a rotation has this long to
/// arrive. A fixed 1 ms was not enough in a debug build on a loaded
/// machine: frames queued behind the 32-frame receive bursts for several
/// loop turns outlived two rotations, every drop cut Swift's window, and
/// pulls timed out; the smoothed RTT includes that queueing.
const MIN_ROTATION_INTERVAL: Duration = Duration::from_millis(1);
const ROTATION_RTTS: u32 = 8;

/// When the next key rotation may begin after the last one.
fn rotation_interval(
    initiator: &Engine,
    conn_i: ConnectionHandle,
    target: &Engine,
    conn_t: ConnectionHandle,
) -> Duration {
    let srtt = |engine: &Engine, conn| {
        engine
            .connection_snapshot(conn)
            .and_then(|s| s.rtt.smoothed)
            .unwrap_or(Duration::ZERO)
    };
    let rtt = srtt(initiator, conn_i).max(srtt(target, conn_t));
    MIN_ROTATION_INTERVAL.max(rtt * ROTATION_RTTS)
}

/// Frames per `rx_burst`, as the DPDK loop.
const BURST: usize = 32;
/// Frames per transmit burst (`Engine::transmit_burst`), the clock read
/// before each: at 4 KiB with PSP a frame takes ~0.8 µs to build here, so
/// a burst of 8 keeps the last frame's t1 within ~6 µs of its departure
/// (`bench core --tx-burst`, the same; measured against 16 and unbounded
/// in `dataplane/app/PERFORMANCE.md`, "Transmit bursts of a bounded
/// length").
const TX_BURST: usize = 8;
/// The ULP header: the transaction's tag.
const TAG_LEN: usize = 8;

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
    pub transactions: u64,
    pub pushes: u64,
    pub pulls: u64,
    pub verified_bytes: u64,
    /// Pushes the target received zero-copy: their frame buffers went to
    /// its ULP, exchanged for recycled spares, instead of being copied
    /// (pushes of at least `ZERO_COPY_MIN_LEN` bytes).
    pub zero_copy_receives: u64,
    /// Pulls whose Pull Data the initiator received zero-copy: the frame
    /// buffer completed to its ULP the same way (Pull Data of at least
    /// `ZERO_COPY_MIN_LEN` bytes).
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
    /// What failed, when `ok` is false (at most 20 lines).
    pub failure_reasons: Vec<String>,
}

/// Bytes of a transaction with `tag`: the tag, then a tag-seeded pattern.
fn fill(tag: u64, len: usize, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&tag.to_be_bytes()[..TAG_LEN.min(len)]);
    let mut rng = SplitMix64::new(tag ^ 0x5eed);
    while out.len() < len {
        out.extend_from_slice(&rng.next_u64().to_le_bytes()[..(len - out.len()).min(8)]);
    }
}

/// Checks `data` is what `fill(tag, len)` makes; returns the tag it names.
fn verify(data: &[u8], scratch: &mut Vec<u8>) -> Option<u64> {
    let tag = u64::from_be_bytes(data.get(..TAG_LEN)?.try_into().ok()?);
    fill(tag, data.len(), scratch);
    (scratch.as_slice() == data).then_some(tag)
}

struct Outstanding {
    kind: TransactionKind,
    len: usize,
    submitted: Instant,
}

/// Runs the demo on `effective` (checked here: a bad value is exit 2 by
/// key or flag); `quiet` drops the progress lines on stderr.
pub fn run(effective: &EffectiveConfig, quiet: bool) -> Result<Report> {
    let setup = effective.setup()?;
    let workload = &setup.workload;
    let start = Instant::now();
    // The engines' clock: nanoseconds since the run started, from 1 s so the
    // PSP IVs (ps) and the replay windows start well above zero.
    let clock = |at: Instant| {
        Timestamp::from_nanos(1_000_000_000 + at.duration_since(start).as_nanos() as u64)
    };
    let mut now = clock(Instant::now());

    let engine_error = |e| effective.engine_error(e);
    let mut initiator = Engine::new(setup.initiator.clone(), now).map_err(engine_error)?;
    let mut target = Engine::new(setup.target.clone(), now).map_err(engine_error)?;
    let (conn_i, conn_t) =
        connect(now, &mut initiator, &mut target, &setup.pair).map_err(engine_error)?;

    // With `rue.placement = "thread"`: one RUE core on its own thread, a
    // queue pair per engine (DESIGN §3); the loop below moves events out and
    // results in, as a datapath lcore does.
    let mut rue_thread = None;
    let mut rue_channels = Vec::new();
    if let Some(profiles) = &setup.rue_core {
        let config = rue::RueConfig {
            connections: setup.initiator.max_connections + setup.target.max_connections,
            ..rue::RueConfig::default()
        };
        let mut core = rue::Rue::new(config, profiles.clone())
            .map_err(|e| AppError::Failed(format!("RUE core: {e}")))?;
        rue_channels.push(core.add_core(setup.initiator.rue_queue));
        rue_channels.push(core.add_core(setup.target.rue_queue));
        // Yield when idle: this machine's cores are shared with the loop.
        let thread = core
            .spawn(rue::Idle::Yield)
            .map_err(|e| AppError::Failed(format!("RUE thread: {e}")))?;
        rue_thread = Some(thread);
    }

    let (pa, pb) = Loopback::pair(LoopbackConfig::default());
    let mut port_i = FaultInjector::new(pa, setup.faults, workload.seed.wrapping_add(2));
    let mut port_t = FaultInjector::new(pb, setup.faults, workload.seed.wrapping_add(3));

    // `setup` keeps every size within 8..=max_payload.
    let sizes = &workload.sizes;
    let mut rng = SplitMix64::new(workload.seed);
    let mut outstanding: HashMap<u64, Outstanding> = HashMap::new();
    let mut latency = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3)
        .map_err(|e| AppError::Failed(format!("histogram: {e}")))?;
    let mut report = Report::new(effective);
    let mut failures: Vec<String> = Vec::new();
    let mut scratch = Vec::new();
    // Push tags the target ULP has taken: each exactly once.
    let mut pushed: HashSet<u64> = HashSet::new();
    let (mut rx, mut tx_i, mut tx_t) = (Vec::new(), Vec::new(), Vec::new());
    let mut next_tag: u64 = 1;
    let mut completed: u64 = 0;
    let mut xoff = false;
    let deadline = start + workload.timeout;
    let mut rotations: u64 = 0;
    let mut last_rotation: Option<Timestamp> = None;
    let mut next_rotation = match setup.rotate_every {
        0 => u64::MAX,
        every => every,
    };
    let mut last_progress = Instant::now();

    while completed < workload.transactions {
        let wall = Instant::now();
        now = clock(wall);
        if wall > deadline {
            failures.push(format!(
                "timed out after {:.1} s with {} of {} transactions complete",
                workload.timeout.as_secs_f64(),
                completed,
                workload.transactions
            ));
            break;
        }

        // Initiator ULP: keep `depth` transactions outstanding.
        while !xoff && next_tag <= workload.transactions && outstanding.len() < workload.depth {
            let len = sizes[(rng.next_u64() % sizes.len() as u64) as usize];
            let push = (rng.next_u64() % 1000) < (workload.push_fraction * 1000.0) as u64;
            let tag = next_tag;
            let transaction = if push {
                let mut payload = Vec::with_capacity(len);
                fill(tag, len, &mut payload);
                Transaction::push(tag, payload)
            } else {
                Transaction::pull(tag, len as u16, tag.to_be_bytes().to_vec())
            };
            match initiator.submit(now, conn_i, transaction) {
                Ok(_) => {
                    let kind = if push {
                        TransactionKind::Push
                    } else {
                        TransactionKind::Pull
                    };
                    outstanding.insert(
                        tag,
                        Outstanding {
                            kind,
                            len,
                            submitted: wall,
                        },
                    );
                    next_tag += 1;
                }
                // Resources or credits exhausted: retry on a later turn.
                Err(rejected) => {
                    initiator.recycle(rejected.payload);
                    break;
                }
            }
        }

        for side in [Side::Initiator, Side::Target] {
            let (engine, port, tx, conn) = match side {
                Side::Initiator => (&mut initiator, &mut port_i, &mut tx_i, conn_i),
                Side::Target => (&mut target, &mut port_t, &mut tx_t, conn_t),
            };
            // The clock is read again at each node's receive and transmit:
            // the two nodes share this core, and a time read once per turn
            // would put the peer's whole processing into the RTT as fabric
            // delay. Stamped this way, the receiver's processing falls
            // between its t2 (receive) and t3 (ACK sent) and is subtracted
            // (OCP Falcon §10.3: fabric delay = (t4 − t1) − (t3 − t2)), as
            // it is between two hosts.
            now = clock(Instant::now());
            engine.receive_burst(now, port, &mut rx, BURST);
            if engine.poll_timeout().is_some_and(|t| t <= now) {
                engine.handle_timeout(now);
            }
            if let Some(channel) = rue_channels.get_mut(side as usize) {
                if !exchange_with_rue(engine, channel, now) {
                    failures.push("a CC event found the RUE queue full".into());
                }
            }
            while let Some(event) = engine.poll_event() {
                match event {
                    UlpEvent::Request(r) => {
                        serve(
                            engine,
                            now,
                            conn,
                            r,
                            &mut scratch,
                            &mut pushed,
                            &mut report,
                            &mut failures,
                        )?;
                    }
                    UlpEvent::Completion(c) => {
                        let Some(o) = outstanding.remove(&c.tag) else {
                            failures.push(format!(
                                "transaction {} completed twice or was never submitted",
                                c.tag
                            ));
                            continue;
                        };
                        completed += 1;
                        latency
                            .saturating_record(wall.duration_since(o.submitted).as_nanos() as u64);
                        if c.status != CompletionStatus::Ack {
                            failures.push(format!(
                                "transaction {} ({:?}) completed with {:?}",
                                c.tag, o.kind, c.status
                            ));
                        } else if o.kind == TransactionKind::Pull {
                            report.pulls += 1;
                            if c.data.len() != o.len || verify(&c.data, &mut scratch) != Some(c.tag)
                            {
                                failures.push(format!(
                                    "pull {}: data differs from what the target served",
                                    c.tag
                                ));
                            } else {
                                report.verified_bytes += c.data.len() as u64;
                            }
                        } else {
                            report.pushes += 1;
                        }
                        engine.recycle(c.data);
                        engine.recycle(c.request);
                    }
                    UlpEvent::Xoff { .. } => xoff = true,
                    UlpEvent::Xon { .. } => xoff = false,
                    UlpEvent::ConnectionError { fault, .. } => {
                        failures.push(format!("connection error: {fault:?}"));
                    }
                }
            }
            record_cm_events(engine, side, &mut report);
            // Bursts of `TX_BURST`, the clock read before each: a frame's
            // t1 is then at most a burst's building time before it leaves.
            let read = || {
                now = clock(Instant::now());
                now
            };
            engine.transmit_bursts(read, port, tx, TX_BURST);
        }

        if completed >= next_rotation
            && last_rotation.map_or(true, |t| {
                now >= t + rotation_interval(&initiator, conn_i, &target, conn_t)
            })
        {
            last_rotation = Some(now);
            next_rotation = completed.saturating_add(setup.rotate_every);
            rotations += 1;
            let keys = (workload.seed, rotations);
            if let Err(e) = rotate_keys(
                now,
                &mut initiator,
                &mut target,
                (conn_i, conn_t),
                &setup,
                keys,
            ) {
                failures.push(format!("key rotation {rotations}: {e}"));
            }
        }

        if !failures.is_empty() && failures.len() >= 20 {
            break;
        }
        if !quiet && last_progress.elapsed() >= Duration::from_secs(1) {
            last_progress = Instant::now();
            eprintln!(
                "  {:>6.1} s  {completed:>9} of {} transactions  {} retransmissions",
                start.elapsed().as_secs_f64(),
                workload.transactions,
                initiator.stats().retransmissions + target.stats().retransmissions
            );
        }
    }

    let elapsed = start.elapsed();
    if let Some(thread) = rue_thread {
        if thread.stop().is_none() {
            failures.push("the RUE thread panicked".into());
        }
    }
    report.transactions = completed;
    report.finish(&initiator, &target, &latency, elapsed);
    report.failures = failures.len() as u64;
    report.ok = failures.is_empty() && completed == workload.transactions;
    failures.truncate(20);
    report.failure_reasons = failures;
    Ok(report)
}

/// One live key rotation of both nodes, the connection manager's steps of
/// OCP Falcon 0.9 §9.2.2.3: the previous rotation retired and ended (steps
/// 4–5: the peers switched when it began), a fresh master key (step 1), new
/// SPIs both ways and the peers' TX SAs switched (steps 2–3). The fresh keys
/// come from the seed and the rotation's number: a demo's keys; a real
/// connection manager draws them from a CSPRNG.
fn rotate_keys(
    now: Timestamp,
    initiator: &mut Engine,
    target: &mut Engine,
    connections: (ConnectionHandle, ConnectionHandle),
    setup: &crate::democfg::build::Setup,
    (seed, rotation): (u64, u64),
) -> std::result::Result<(), falcon_core::engine::RotationError> {
    for (side, engine) in [initiator as &mut Engine, target].into_iter().enumerate() {
        if engine.key_generation().is_some_and(|(_, open)| open) {
            engine.retire_previous_spis();
            engine.end_key_rotation()?;
        }
        let mut rng = SplitMix64::new(seed ^ rotation.rotate_left(17) ^ side as u64);
        let mut key = [0u8; 32];
        for chunk in key.chunks_exact_mut(8) {
            chunk.copy_from_slice(&rng.next_u64().to_le_bytes());
        }
        engine.begin_key_rotation(psp::MasterKey::new(key))?;
    }
    rekey_pair(now, initiator, target, connections, setup.pair.version)
}

/// A datapath loop's side of a RUE on another thread: admitted events into
/// the event queue, results out of the result queue. False if an event
/// found the queue full (the admission saw room and only this thread
/// pushes, so it cannot happen; the connection's CC loop would stall).
fn exchange_with_rue(engine: &mut Engine, channel: &mut rue::RueChannel, now: Timestamp) -> bool {
    let mut ok = true;
    while let Some(event) =
        engine.poll_rue_event(now, channel.event_occupancy(), channel.event_capacity())
    {
        if channel.push(event).is_err() {
            ok = false;
            break;
        }
    }
    while let Some(result) = channel.pop() {
        engine.handle_rue_result(now, &result);
    }
    ok
}

#[derive(Clone, Copy)]
enum Side {
    Initiator,
    Target,
}

/// Takes the connection manager's events of `engine` into the report.
/// Frames failing the SPI check are dropped and counted by the engine; a
/// key rotation may leave some in flight under a retired SPI, so they are
/// reported, not failures.
fn record_cm_events(engine: &mut Engine, side: Side, report: &mut Report) {
    while let Some(CmEvent::SpiCheckFailed(f)) = engine.poll_cm_event() {
        report.spi_failure_events += 1;
        report.spi_failure_frames += 1 + f.suppressed + f.suppressed_other;
        report.spi_failure_first.get_or_insert_with(|| {
            let cid = f
                .cid
                .map_or("unknown".into(), |c| format!("{:#08x}", c.value()));
            let node = match side {
                Side::Initiator => "initiator",
                Side::Target => "target",
            };
            format!(
                "{} of SPI {} to CID {cid} at the {node}",
                DropReason::Psp(f.reason).name(),
                f.spi
            )
        });
    }
}

/// The summary line of the SPI check failures, if any occurred.
fn spi_failure_line(r: &Report) -> Option<String> {
    (r.spi_failure_events > 0).then(|| {
        format!(
            "  SPI check     {} frames failed the SPI check or decryption, reported to the connection manager in {} events (first: {})",
            r.spi_failure_frames,
            r.spi_failure_events,
            r.spi_failure_first.as_deref().unwrap_or("-")
        )
    })
}

/// Target ULP: verify a push (bytes, and that it arrives once) and
/// acknowledge it; serve a pull.
#[allow(clippy::too_many_arguments)]
fn serve(
    engine: &mut Engine,
    now: Timestamp,
    conn: ConnectionHandle,
    request: falcon_core::transaction::Request,
    scratch: &mut Vec<u8>,
    pushed: &mut HashSet<u64>,
    report: &mut Report,
    failures: &mut Vec<String>,
) -> Result<()> {
    match request.kind {
        TransactionKind::Push => {
            match verify(&request.payload, scratch) {
                Some(tag) if pushed.insert(tag) => {
                    report.verified_bytes += request.payload.len() as u64
                }
                Some(tag) => failures.push(format!(
                    "push {tag} (RSN {}) delivered to the target twice",
                    request.rsn
                )),
                None => failures.push(format!(
                    "push RSN {}: payload differs from what was sent",
                    request.rsn
                )),
            }
            engine
                .ulp_ack(now, conn, request.rsn)
                .map_err(|e| AppError::Failed(format!("ULP ACK of RSN {}: {e:?}", request.rsn)))?;
            engine.recycle(request.payload);
        }
        TransactionKind::Pull => {
            let Some(tag) = request
                .payload
                .get(..TAG_LEN)
                .and_then(|h| h.try_into().ok())
                .map(u64::from_be_bytes)
            else {
                failures.push(format!(
                    "pull RSN {}: no tag in the ULP header",
                    request.rsn
                ));
                return Ok(());
            };
            let mut data = Vec::with_capacity(usize::from(request.request_length));
            fill(tag, usize::from(request.request_length), &mut data);
            if let Err(rejected) = engine.submit_pull_data(now, conn, request.rsn, data) {
                failures.push(format!(
                    "pull RSN {}: pull data refused: {:?}",
                    request.rsn, rejected.reason
                ));
            }
            engine.recycle(request.payload);
        }
    }
    Ok(())
}

impl Report {
    fn new(effective: &EffectiveConfig) -> Self {
        let c = &effective.config;
        Report {
            ok: false,
            psp: match (c.psp.enabled, c.psp.version) {
                (false, _) => "off".into(),
                (true, PspVersion::AesGcm128) => "AES-GCM-128".into(),
                (true, PspVersion::AesGcm256) => "AES-GCM-256".into(),
            },
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
            failure_reasons: Vec::new(),
        }
    }

    fn finish(
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
    println!(
        "  transactions  {} ({} push, {} pull), {} bytes verified, {}",
        r.transactions,
        r.pushes,
        r.pulls,
        r.verified_bytes,
        if r.ok { "all verified" } else { "FAILED" }
    );
    println!(
        "  buffers       {} of {} pushes and {} of {} pulls received zero-copy (frame buffer handed to the ULP, not copied)",
        r.zero_copy_receives, r.pushes, r.zero_copy_pull_data, r.pulls
    );
    println!(
        "  rate          {:.0} transactions/s, {:.2} Gbit/s goodput in {:.2} s, both engines on one core",
        r.transactions_per_sec, r.goodput_gbps, r.elapsed_s
    );
    println!(
        "  latency       p50 {:.1} µs, p99 {:.1} µs, max {:.1} µs",
        r.latency_p50_us, r.latency_p99_us, r.latency_max_us
    );
    println!(
        "  faults        {:.1}% loss, {:.1}% reordering, {:.1}% duplication: {} retransmissions ({} timeout, {} early), {} resyncs, of {} frames",
        r.loss * 100.0,
        r.reorder * 100.0,
        r.duplicate * 100.0,
        r.retransmissions,
        r.retransmissions_timeout,
        r.retransmissions_early,
        r.resyncs,
        r.frames
    );
    if r.key_rotations > 0 {
        println!(
            "  PSP           {} live key rotations of both nodes (new master keys, new SPIs both ways)",
            r.key_rotations
        );
    }
    if let Some(line) = spi_failure_line(r) {
        println!("{line}");
    }
    let mut drops: Vec<_> = r.drops.iter().collect();
    drops.sort();
    let drops: Vec<String> = drops.iter().map(|(k, v)| format!("{v} {k}")).collect();
    println!(
        "  drops         {}",
        if drops.is_empty() {
            "none".to_string()
        } else {
            drops.join(", ")
        }
    );
    println!(
        "  congestion    fcwnd {:.2}..{:.2}, ncwnd {}..{}, {} RUE events, {} RTT samples (min {:.1} µs, mean {:.1} µs, max {:.1} µs)",
        r.fcwnd_min, r.fcwnd_max, r.ncwnd_min, r.ncwnd_max, r.rue_events, r.rtt_samples, r.rtt_min_us, r.rtt_mean_us, r.rtt_max_us
    );
    for reason in &r.failure_reasons {
        println!("  FAILURE       {reason}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::DemoArgs;

    #[test]
    fn fill_and_verify_agree_and_catch_a_flipped_byte() {
        let (mut a, mut scratch) = (Vec::new(), Vec::new());
        for len in [8, 9, 64, 4096] {
            fill(42, len, &mut a);
            assert_eq!(a.len(), len);
            assert_eq!(verify(&a, &mut scratch), Some(42));
            a[len - 1] ^= 1;
            assert_ne!(verify(&a, &mut scratch), Some(42));
        }
    }

    /// `falcon demo` with these flags and no file.
    fn run_flags(args: DemoArgs) -> Result<Report> {
        run(&EffectiveConfig::resolve(&args)?, true)
    }

    #[test]
    fn unusable_flags_are_refused_by_name() {
        let base = DemoArgs {
            transactions: Some(10),
            depth: Some(4),
            loss: Some(0.0),
            reorder: Some(0.0),
            duplicate: Some(0.0),
            push_fraction: Some(0.5),
            seed: Some(1),
            timeout: Some(10.0),
            json: true,
            ..DemoArgs::default()
        };
        let with = |edit: fn(&mut DemoArgs)| {
            let mut args = base.clone();
            edit(&mut args);
            run_flags(args).err().unwrap()
        };
        let err = with(|a| a.loss = Some(0.9));
        assert_eq!(err.exit_code(), 2);
        assert!(err.to_string().contains("--loss"), "{err}");
        let err = with(|a| a.depth = Some(0));
        assert!(err.to_string().contains("--depth"), "{err}");
        let err = with(|a| a.push_fraction = Some(f64::NAN));
        assert!(err.to_string().contains("--push-fraction"), "{err}");
        // Once a panic in `Duration::from_secs_f64`.
        let err = with(|a| a.timeout = Some(1e300));
        assert!(err.to_string().contains("--timeout"), "{err}");
        assert!(run_flags(base).unwrap().ok);
    }

    /// Frames a peer seals with an SPI the target never gave this
    /// connection: the target's CM events reach the report (the second
    /// frame, within the interval, in the third's count) and the summary
    /// prints their line; a run without any prints none.
    #[test]
    fn spi_check_failures_reach_the_summary() {
        use falcon_core::engine::{EngineConfig, PairSpec, PspConfig};
        use falcon_core::transaction::Transaction;
        use psp::{MasterKey, MasterKeys, Version};

        let effective = EffectiveConfig::resolve(&DemoArgs::default()).unwrap();
        let mut report = Report::new(&effective);
        assert_eq!(spi_failure_line(&report), None);
        let keys = |k| MasterKeys {
            k0: MasterKey::new([k; 32]),
            k1: MasterKey::new([k + 1; 32]),
        };
        let config = |k, ip: &str, mac| EngineConfig {
            psp: Some(PspConfig::new(keys(k))),
            local_ip: ip.parse().unwrap(),
            local_mac: falcon_core::wire::EthernetAddress([2, 0, 0, 0, 0, mac]),
            ..EngineConfig::default()
        };
        let mut now = Timestamp::from_micros(1_000);
        let mut a = Engine::new(config(1, "10.0.0.1", 1), now).unwrap();
        let mut b = Engine::new(config(3, "10.0.0.2", 2), now).unwrap();
        let (ca, _) = connect(now, &mut a, &mut b, &PairSpec::default()).unwrap();
        let (stray, key) = b.allocate_spi(Version::Aes128Gcm).unwrap();
        a.install_transmit_sa(ca, stray, &key).unwrap();
        a.submit(now, ca, Transaction::push(1, vec![1; 64]))
            .unwrap();
        let mut frame = vec![0; a.max_frame_len()];
        let len = a.poll_transmit(now, &mut frame).unwrap();
        frame.truncate(len);
        for _ in 0..3 {
            b.handle_packet(now, &mut frame.clone());
            record_cm_events(&mut b, Side::Target, &mut report);
            now = now + Duration::from_millis(500);
        }
        assert_eq!(
            (report.spi_failure_events, report.spi_failure_frames),
            (2, 3)
        );
        let line = spi_failure_line(&report).unwrap();
        assert!(
            line.contains("3 frames failed the SPI check")
                && line.contains("in 2 events")
                && line.contains(&format!(
                    "psp_spi_mismatch of SPI {stray} to CID 0x000020 at the target"
                )),
            "{line}"
        );
    }

    #[test]
    fn short_lossy_run_completes_and_verifies_everything() {
        let args = DemoArgs {
            transactions: Some(400),
            depth: Some(32),
            loss: Some(0.02),
            reorder: Some(0.05),
            duplicate: Some(0.01),
            push_fraction: Some(0.5),
            seed: Some(7),
            timeout: Some(60.0),
            json: true,
            ..DemoArgs::default()
        };
        let r = run_flags(args).unwrap();
        assert!(r.ok, "{:?}", r.failure_reasons);
        assert_eq!(
            (r.psp.as_str(), r.rue.as_str(), r.ordering.as_str()),
            ("AES-GCM-128", "Swift", "ordered")
        );
        assert_eq!(r.transactions, 400);
        assert_eq!(r.pushes + r.pulls, 400);
        assert!(r.pushes > 100 && r.pulls > 100);
        assert!(r.retransmissions > 0, "2% loss must cause retransmissions");
        assert!(r.rtt_samples > 0 && r.rue_events > 0);
        // Sizes 64..4096: the pushes of 1024 bytes and more (about 3/5)
        // reach the target's ULP in their frame buffers, each once.
        assert!(
            r.zero_copy_receives > r.pushes / 3 && r.zero_copy_receives <= r.pushes,
            "{} of {} pushes zero-copy",
            r.zero_copy_receives,
            r.pushes
        );
        // Likewise the Pull Data of 1024 bytes and more.
        assert!(
            r.zero_copy_pull_data > r.pulls / 3 && r.zero_copy_pull_data <= r.pulls,
            "{} of {} pulls zero-copy",
            r.zero_copy_pull_data,
            r.pulls
        );
    }
}
