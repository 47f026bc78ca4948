//! `falcon demo`: the main job on the embedded default (DESIGN §1).
//!
//! An initiator engine and a target engine run on one core, in one process,
//! over the in-process loopback with seeded faults (loss, reordering,
//! duplication, and with `--corrupt` a flipped bit), PSP on, Swift
//! congestion control in the inline RUE (or, with `--rue-thread`, one RUE
//! core on its own thread serving both engines through one event/result
//! queue pair each, DESIGN §3). The initiator keeps `--depth` transactions
//! outstanding, a mix of pushes and pulls of random sizes; the target checks
//! every pushed byte and serves every pull with bytes the initiator checks
//! in turn. The target's ULP may answer a first delivery with an RNR NACK
//! (`--rnr`) or complete a transaction in error (`--cie`): the demo holds
//! each completion to what the target decided ([`ulp`]). Time is the real
//! clock (so timers, RTTs and latencies are this machine's), read at each
//! node's receive and transmit so that, as between two hosts, a node's own
//! processing falls between its receive and ACK timestamps and Swift does
//! not count it as fabric delay (read once per loop turn, a debug build's
//! millisecond turns drove the fabric window to its floor); the faults are
//! seeded. After the last completion the loopback is drained, faults off,
//! so that every corrupted frame has reached its receiver and is accounted
//! for ([`corruption`]). The run fails (exit 1) if any transaction is lost,
//! duplicated, completes out of order on an ordered connection or in error
//! other than as the target's ULP decided, carries a wrong byte, or if a
//! corrupted frame is neither dropped by name nor harmless.
//!
//! Then, unless `--no-nvme`, the NVMe phase ([`nvme`]): an NVMe-over-Falcon
//! initiator and target in this process over a loopback pair of their own
//! with the same seeded loss, PSP on, reads and writes of mixed sizes with
//! FUA on some, every write read back and every read compared byte for
//! byte; a failed command or a wrong byte fails the run too. Then, unless
//! `--no-rdma`, the RDMA phase ([`rdma`]): an RDMA-over-Falcon requester
//! and responder over a loopback pair of their own, WRITE, READ, SEND and
//! atomics over several RC QPs, every byte checked against an oracle
//! ([`rdma_plan`]). The report carries every phase's figures
//! ([`Report::nvme`], [`Report::rdma`]).
//!
//! What runs — addresses, PSP, the connection (CIDs, initial PSNs and
//! RSNs, ordering), delivery, resources, RUE, workload, the target ULP's
//! answers, faults and the NVMe phase — is the embedded default, a
//! `--config` file and the flags, merged and checked by
//! [`crate::democfg`].

mod corruption;
mod nvme;
mod rdma;
mod rdma_plan;
mod report;
mod ulp;

use std::time::{Duration, Instant};

use falcon_core::drop::DropReason;
use falcon_core::engine::{connect, rekey_pair, CmEvent, ConnectionHandle, Engine};
use falcon_core::port::FrameBuf;
use falcon_core::random::{Random, SplitMix64};
use falcon_core::resources::CreditClass;
use falcon_core::testing::{FaultInjector, Faults, Loopback, LoopbackConfig, LoopbackPort};
use falcon_core::time::Timestamp;
use falcon_core::transaction::UlpEvent;

use crate::democfg::schema::Ordering;
use crate::democfg::{EffectiveConfig, Setup};
use crate::error::{AppError, Result};

pub use report::{print_text, NvmeReport, RdmaReport, Report};

use corruption::Corruption;
use ulp::{InitiatorUlp, TargetAnswers};

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
/// Longest the loopback may take to drain after the last completion: with
/// the faults off a frame arrives 2 µs after it is sent, a held one within
/// `faults.reorder_delay_us` (at most 1 s).
const DRAIN_LIMIT: Duration = Duration::from_secs(2);

/// The engines' clock: nanoseconds since the run started, from 1 s so the
/// PSP IVs (ps) and the replay windows start well above zero.
fn stamp(start: Instant, at: Instant) -> Timestamp {
    Timestamp::from_nanos(1_000_000_000 + at.duration_since(start).as_nanos() as u64)
}

/// The two nodes: engines, their ends of the connection and of the
/// loopback, and with a RUE thread their queue pairs to it.
struct Nodes {
    initiator: Engine,
    target: Engine,
    conn_i: ConnectionHandle,
    conn_t: ConnectionHandle,
    /// The initiator's end, then the target's; each injects faults into
    /// what its node sends.
    ports: [FaultInjector<LoopbackPort>; 2],
    tx: [Vec<FrameBuf>; 2],
    rx: Vec<FrameBuf>,
    rue_channels: Vec<rue::RueChannel>,
}

/// The two ULPs and what the run found.
struct Ulps {
    initiator: InitiatorUlp,
    target: TargetAnswers,
    scratch: Vec<u8>,
    report: Report,
    failures: Vec<String>,
}

#[derive(Clone, Copy)]
enum Side {
    Initiator,
    Target,
}

impl Nodes {
    /// One turn of each node: receive a burst, run due timers, exchange
    /// with the RUE thread, hand the events to the ULPs, transmit. Returns
    /// the last time read.
    fn turn(&mut self, start: Instant, ulps: &mut Ulps) -> Result<Timestamp> {
        let mut now = stamp(start, Instant::now());
        for side in [Side::Initiator, Side::Target] {
            let (engine, port, tx, conn) = match side {
                Side::Initiator => (
                    &mut self.initiator,
                    &mut self.ports[0],
                    &mut self.tx[0],
                    self.conn_i,
                ),
                Side::Target => (
                    &mut self.target,
                    &mut self.ports[1],
                    &mut self.tx[1],
                    self.conn_t,
                ),
            };
            // The clock is read again at each node's receive and transmit:
            // the two nodes share this core, and a time read once per turn
            // would put the peer's whole processing into the RTT as fabric
            // delay. Stamped this way, the receiver's processing falls
            // between its t2 (receive) and t3 (ACK sent) and is subtracted
            // (OCP Falcon §10.3: fabric delay = (t4 − t1) − (t3 − t2)), as
            // it is between two hosts.
            let wall = Instant::now();
            now = stamp(start, wall);
            engine.receive_burst(now, port, &mut self.rx, BURST);
            if engine.poll_timeout().is_some_and(|t| t <= now) {
                engine.handle_timeout(now);
            }
            if let Some(channel) = self.rue_channels.get_mut(side as usize) {
                if !exchange_with_rue(engine, channel, now) {
                    ulps.failures
                        .push("a CC event found the RUE queue full".into());
                }
            }
            while let Some(event) = engine.poll_event() {
                match event {
                    UlpEvent::Request(r) => ulps.target.serve(
                        engine,
                        now,
                        wall,
                        conn,
                        r,
                        &mut ulps.scratch,
                        &mut ulps.report,
                        &mut ulps.failures,
                    )?,
                    UlpEvent::Completion(c) => ulps.initiator.complete(
                        engine,
                        wall,
                        c,
                        &mut ulps.target,
                        &mut ulps.scratch,
                        &mut ulps.report,
                        &mut ulps.failures,
                    ),
                    UlpEvent::Xoff {
                        class: CreditClass::Request,
                        ..
                    } => ulps.initiator.xoff = true,
                    UlpEvent::Xon {
                        class: CreditClass::Request,
                        ..
                    } => ulps.initiator.xoff = false,
                    // The initiator sends no Pull Data.
                    UlpEvent::Xoff { .. } | UlpEvent::Xon { .. } => {}
                    UlpEvent::ConnectionError { fault, .. } => {
                        ulps.failures.push(format!("connection error: {fault:?}"));
                    }
                }
            }
            record_cm_events(engine, side, &mut ulps.report);
            // Bursts of `TX_BURST`, the clock read before each: a frame's
            // t1 is then at most a burst's building time before it leaves.
            let read = || {
                now = stamp(start, Instant::now());
                now
            };
            engine.transmit_bursts(read, port, tx, TX_BURST);
        }
        Ok(now)
    }

    /// Nothing in flight or held back either way.
    fn drained(&self) -> bool {
        self.ports
            .iter()
            .all(|port| port.held() == 0 && port.inner().in_flight() == 0)
    }

    /// After the last completion: the faults off, turns until every frame
    /// sent has reached its receiver, so the corrupted ones are counted
    /// where they ended. Frames the engines still send (ACKs, a late
    /// retransmission) go through the same checks.
    fn drain(&mut self, start: Instant, ulps: &mut Ulps) -> Result<()> {
        for port in &mut self.ports {
            port.faults = Faults::default();
        }
        let until = Instant::now() + DRAIN_LIMIT;
        while !self.drained() {
            if Instant::now() > until {
                ulps.failures.push(format!(
                    "frames still in flight {} s after the last completion",
                    DRAIN_LIMIT.as_secs()
                ));
                break;
            }
            self.turn(start, ulps)?;
        }
        Ok(())
    }
}

/// Runs the demo on `effective` (checked here: a bad value is exit 2 by
/// key or flag): the Falcon workload, then the NVMe phase unless
/// `nvme.enabled = false`, then the RDMA phase unless `rdma.enabled =
/// false`; `quiet` drops the progress lines on stderr.
pub fn run(effective: &EffectiveConfig, quiet: bool) -> Result<Report> {
    let setup = effective.setup()?;
    let mut report = run_falcon(effective, &setup, quiet)?;
    if let Some(workload) = &setup.nvme {
        let (nvme, failures) = nvme::run(workload, quiet)?;
        report.ok &= nvme.ok;
        report.failures += nvme.failures;
        report.failure_reasons.extend(failures);
        report.nvme = Some(nvme);
    }
    if let Some(workload) = &setup.rdma {
        let (rdma, failures) = rdma::run(workload, quiet)?;
        report.ok &= rdma.ok;
        report.failures += rdma.failures;
        report.failure_reasons.extend(failures);
        report.rdma = Some(rdma);
    }
    Ok(report)
}

/// The Falcon workload between the two engines.
fn run_falcon(effective: &EffectiveConfig, setup: &Setup, quiet: bool) -> Result<Report> {
    let workload = &setup.workload;
    let start = Instant::now();
    let now = stamp(start, Instant::now());

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
    let mut ports = [
        FaultInjector::new(pa, setup.faults, workload.seed.wrapping_add(2)),
        FaultInjector::new(pb, setup.faults, workload.seed.wrapping_add(3)),
    ];
    for port in &mut ports {
        port.log_flips();
    }
    let mut nodes = Nodes {
        initiator,
        target,
        conn_i,
        conn_t,
        ports,
        tx: [Vec::new(), Vec::new()],
        rx: Vec::new(),
        rue_channels,
    };
    let ordered = effective.config.connection.ordering == Ordering::Ordered;
    let rnr_timeout = setup.target_ulp.rnr_timeout.as_duration();
    let mut ulps = Ulps {
        initiator: InitiatorUlp::new(workload.seed, ordered.then_some(setup.pair.sequence.tx_rsn))?,
        target: TargetAnswers::new(setup.target_ulp, workload.seed),
        scratch: Vec::new(),
        report: Report::new(effective, rnr_timeout),
        failures: Vec::new(),
    };
    // A watchdog on progress, not on the whole run: an ordered connection
    // whose ULP RNR-NACKs stalls for each RNR timeout (up to 655.36 ms, OCP
    // Falcon 0.9 §8.5.3.4), so a long run may rightly take minutes.
    let mut stalled_since = start;
    let mut completed_before = 0;
    let mut rotations: u64 = 0;
    let mut last_rotation: Option<Timestamp> = None;
    let mut next_rotation = match setup.rotate_every {
        0 => u64::MAX,
        every => every,
    };
    let mut last_progress = Instant::now();

    while ulps.initiator.completed < workload.transactions {
        let wall = Instant::now();
        if ulps.initiator.completed != completed_before {
            completed_before = ulps.initiator.completed;
            stalled_since = wall;
        } else if wall - stalled_since > workload.timeout {
            ulps.failures.push(format!(
                "no transaction completed for {:.1} s; {} of {} transactions complete",
                workload.timeout.as_secs_f64(),
                ulps.initiator.completed,
                workload.transactions
            ));
            break;
        }
        // Initiator ULP: keep `depth` transactions outstanding.
        let now = stamp(start, wall);
        ulps.initiator
            .submit(&mut nodes.initiator, now, wall, conn_i, workload);
        let now = nodes.turn(start, &mut ulps)?;

        let completed = ulps.initiator.completed;
        if completed >= next_rotation
            && last_rotation.map_or(true, |t| {
                now >= t + rotation_interval(&nodes.initiator, conn_i, &nodes.target, conn_t)
            })
        {
            last_rotation = Some(now);
            next_rotation = completed.saturating_add(setup.rotate_every);
            rotations += 1;
            let keys = (workload.seed, rotations);
            let connections = (conn_i, conn_t);
            if let Err(e) = rotate_keys(
                now,
                &mut nodes.initiator,
                &mut nodes.target,
                connections,
                setup,
                keys,
            ) {
                ulps.failures.push(format!("key rotation {rotations}: {e}"));
            }
        }

        if ulps.failures.len() >= 20 {
            break;
        }
        if !quiet && last_progress.elapsed() >= Duration::from_secs(1) {
            last_progress = Instant::now();
            eprintln!(
                "  {:>6.1} s  {completed:>9} of {} transactions  {} retransmissions",
                start.elapsed().as_secs_f64(),
                workload.transactions,
                nodes.initiator.stats().retransmissions + nodes.target.stats().retransmissions
            );
        }
    }

    let elapsed = start.elapsed();
    let completed = ulps.initiator.completed;
    let finished = completed == workload.transactions && ulps.failures.len() < 20;
    if finished {
        nodes.drain(start, &mut ulps)?;
    }
    if let Some(thread) = rue_thread {
        if thread.stop().is_none() {
            ulps.failures.push("the RUE thread panicked".into());
        }
    }

    let Ulps {
        initiator: initiator_ulp,
        target: target_ulp,
        mut report,
        mut failures,
        ..
    } = ulps;
    report.transactions = completed;
    report.finish(
        &nodes.initiator,
        &nodes.target,
        &initiator_ulp.latency,
        elapsed,
    );
    report.rnr_nacks_sent_push = target_ulp.rnr_sent_push;
    report.rnr_nacks_sent_pull = target_ulp.rnr_sent_pull;
    report.rnr_nacks_sent = target_ulp.rnr_sent_push + target_ulp.rnr_sent_pull;
    report.rnr_wait_max_us = initiator_ulp.longest_rnr_wait.as_secs_f64() * 1e6;
    report.rnr_redelivery_wait_max_us = target_ulp.longest_redelivery_wait.as_secs_f64() * 1e6;
    if finished && target_ulp.completions_in_error_pending() > 0 {
        failures.push(format!(
            "{} transactions the target's ULP completed in error never completed so",
            target_ulp.completions_in_error_pending()
        ));
    }

    // Every corrupted frame: dropped by a named check, or harmless.
    let mut corruption = Corruption::new(effective.config.target.ip);
    for port in &mut nodes.ports {
        corruption.absorb(port);
    }
    let mut drops = nodes.initiator.stats().drops;
    drops.merge(&nodes.target.stats().drops);
    let account = corruption.close(&drops, setup.rotate_every > 0);
    report.corrupted_frames = account.frames;
    report.corrupted_harmless = account.harmless;
    report.corruption_drops = account.drops;
    // Checked once every frame arrived (`drain`), else not meaningful.
    if finished {
        report.corruption_accounted = account.mismatch.is_none();
        failures.extend(account.mismatch);
    }

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
    setup: &Setup,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::DemoArgs;

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
            no_nvme: true,
            no_rdma: true,
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
        let err = with(|a| {
            a.no_nvme = false;
            a.nvme_commands = Some(0);
        });
        assert!(err.to_string().contains("--nvme-commands"), "{err}");
        let err = with(|a| {
            a.no_rdma = false;
            a.rdma_ops = Some(0);
        });
        assert!(err.to_string().contains("--rdma-ops"), "{err}");
        let r = run_flags(base).unwrap();
        assert!(r.ok && r.nvme.is_none() && r.rdma.is_none());
    }

    /// The NVMe phase under 3 % loss and reordering: every command
    /// completes, every write is read back, every read byte is compared,
    /// and Falcon retransmitted what the loopback lost beneath it. Short
    /// (small commands) so that a debug build runs it in seconds.
    #[test]
    fn nvme_phase_runs_and_verifies_under_loss() {
        let mut effective = EffectiveConfig::resolve(&DemoArgs {
            transactions: Some(50),
            loss: Some(0.03),
            seed: Some(5),
            json: true,
            ..DemoArgs::default()
        })
        .unwrap();
        let nvme = &mut effective.config.nvme;
        nvme.commands = 150;
        nvme.queue_depth = 8;
        nvme.sizes = vec![4096, 12288, 65536];
        let r = run(&effective, true).unwrap();
        assert!(r.ok, "{:?}", r.failure_reasons);
        let n = r.nvme.unwrap();
        assert!(n.ok && n.failures == 0 && n.errors == 0);
        assert_eq!(n.commands, 150);
        assert_eq!(n.reads + n.writes, 150);
        assert_eq!(n.read_backs, n.writes, "every write read back");
        assert!(n.writes > 20, "{n:?}");
        assert!(n.never_written_reads >= 3, "{n:?}");
        assert_eq!(n.verified_bytes, n.bytes_read, "every read byte compared");
        assert!(n.bytes_read >= n.bytes_written && n.bytes_written > 0);
        assert_eq!(
            (n.loss, n.reorder),
            (0.03, 0.02),
            "[faults] as the Falcon phase"
        );
        assert!(
            n.falcon.frames_lost > 0 && n.falcon.frames_reordered > 0,
            "{n:?}"
        );
        assert!(n.falcon.retransmissions > 0, "{n:?}");
        assert!(n.iops > 0.0 && n.latency_us.p50 > 0.0 && n.latency_us.max >= n.latency_us.p99);
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
            no_nvme: true,
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
        // Every push reaches the target's ULP in its frame buffer, once (no
        // RNR or CIE here, so each is delivered exactly once); likewise
        // every Pull Data the initiator's ULP.
        assert_eq!(
            (r.zero_copy_receives, r.zero_copy_pull_data),
            (r.pushes, r.pulls),
            "frames kept for the ULPs"
        );
    }

    /// Frames a peer seals with an SPI the target never gave this
    /// connection: the target's CM events reach the report (the second
    /// frame, within the interval, in the third's count) and the summary
    /// prints their line; a run without any prints none.
    #[test]
    fn spi_check_failures_reach_the_summary() {
        use falcon_core::engine::{Disposition, EngineConfig, PairSpec, PspConfig};
        use falcon_core::transaction::Transaction;
        use psp::{MasterKey, MasterKeys, Version};

        use super::report::spi_failure_line;

        let effective = EffectiveConfig::resolve(&DemoArgs::default()).unwrap();
        let mut report = Report::new(&effective, Duration::ZERO);
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
        let mut a: Engine = Engine::new(config(1, "10.0.0.1", 1), now).unwrap();
        let mut b: Engine = Engine::new(config(3, "10.0.0.2", 2), now).unwrap();
        let (ca, _) = connect(now, &mut a, &mut b, &PairSpec::default()).unwrap();
        let (stray, key) = b.allocate_spi(Version::Aes128Gcm).unwrap();
        a.install_transmit_sa(ca, stray, &key).unwrap();
        a.submit(now, ca, Transaction::push(1, vec![1; 64]))
            .unwrap();
        let mut frame = vec![0; a.max_frame_len()];
        let len = a.poll_transmit_into(now, &mut frame).unwrap();
        frame.truncate(len);
        for _ in 0..3 {
            let received = b.handle_packet(now, FrameBuf::from_frame(&frame, len));
            assert!(matches!(received.disposition, Disposition::Dropped(_)));
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
}
