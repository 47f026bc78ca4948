//! `falcon pktgen`: a Falcon/PSP traffic generator and reflector on DPDK
//! ports (issue #26, item 5).
//!
//! Layer: application. Owns one side of a generator/reflector pair: the
//! engine (PSP on by default, fresh master keys from the OS; Swift set as
//! `falcon node` sets it), the connections set up with the peer over the
//! control channel ([`crate::cm`]: the generator offers `--connections`
//! of them in turn, the reflector accepts each as it comes), the lcore
//! loop ([`falcon_core::api::Lcore`]) with the generator's or the
//! reflector's ULP ([`generator`], [`reflector`]), a stats line a second
//! and the summary ([`report`]). The port comes from `falcon node`'s DPDK
//! backends ([`dpdk`]); the loops here are generic over it, so they run
//! over the in-process loopback in the tests below. At the end the
//! generator sends its report over the control channel, the reflector
//! answers with its own, and the generator checks that both counted the
//! same pushes, pulls and bytes.

// Without DPDK no port drives the loops but the tests' loopback.
#![cfg_attr(not(feature = "dpdk"), allow(dead_code))]

mod dpdk;
pub mod generator;
pub mod reflector;
pub mod report;
pub mod traffic;

use std::net::IpAddr;
use std::time::{Duration, Instant};

use falcon_core::api::{
    Clock, ConnectionHandle, ConnectionId, DeliveryConfig, DestinationFunction, Engine,
    EngineConfig, EthernetAddress, Lcore, PacketBuf, Port, PspConfig, RueMode, Timestamp,
};
use hdrhistogram::Histogram;
use psp::Version;

use self::generator::{Generator, Plan};
use self::reflector::Reflector;
use self::report::{stats_line, us, Report, Sample};
use self::traffic::{MixSource, Rate, SizeSource, SizeSpec};
use crate::cli::{OnOff, PktgenArgs, PktgenCc, PktgenRole};
use crate::cm::{self, Channel, Local, Message};
use crate::cmd::node::workload::{Pattern, HEADER_LEN};
use crate::cmd::node::{self, DpdkCounters};
use crate::error::{AppError, Result};

/// How long the sides wait for each other to come up.
pub(crate) const SETUP_TIMEOUT: Duration = Duration::from_secs(60);
/// A generator with transactions outstanding and none completing for this
/// long gives up.
const STALL: Duration = Duration::from_secs(10);
/// The smallest transaction: the pktgen header and 8 data bytes.
pub const MIN_SIZE: usize = 16;
/// `--seconds` of a generator given neither it nor `--count`.
const DEFAULT_SECONDS: f64 = 5.0;
/// The generator's first connection id; the reflector's.
const GENERATOR_CID: u32 = 0x100;
const REFLECTOR_CID: u32 = 0x10_000;

/// The port under the loop: its frame and byte counters, and what the
/// report shows of it.
pub(crate) trait CountedPort: Port<Buf: std::fmt::Debug> {
    /// Frames and bytes received and sent.
    fn wire(&self) -> Wire;
    /// The DPDK port's counters, if it is one.
    fn dpdk(&self) -> Option<DpdkCounters>;
}

/// A port's frame and byte counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Wire {
    pub rx_frames: u64,
    pub tx_frames: u64,
    pub rx_bytes: u64,
    pub tx_bytes: u64,
}

/// Runs one side to its end.
///
/// # Errors
///
/// Usage errors (bad flags, sizes a frame cannot carry), setup failures
/// (the peer never came, the offers disagree) and a stalled run; a run
/// that ends with failures returns its report with `ok` false.
pub fn run(args: &PktgenArgs) -> Result<Report> {
    for (flag, value) in [
        ("--seconds", args.seconds),
        ("--rate-gbps", args.rate_gbps),
        ("--rate-mpps", args.rate_mpps),
    ] {
        if let Some(v) = value {
            if !(v.is_finite() && v > 0.0) {
                return Err(AppError::Usage(format!("{flag} {v}: must be positive")));
            }
        }
    }
    if args.count == Some(0) {
        return Err(AppError::Usage("--count 0: must be positive".into()));
    }
    if let SizeSpec::List(sizes) = &args.size {
        if sizes.is_empty() {
            return Err(AppError::Usage("--size: no size given".into()));
        }
    }
    dpdk::run(args)
}

/// Prints a side's summary; an error (exit 1) if it failed.
///
/// # Errors
///
/// The report is not ok.
pub fn outcome(report: &Report, json: bool) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string(report).unwrap_or_default());
    } else {
        report::print_text(report);
    }
    if report.ok {
        Ok(())
    } else {
        Err(AppError::Failed(format!(
            "pktgen {}: {} failures; first: {}",
            report.role,
            report.failures,
            report.first_failure.as_deref().unwrap_or("none named")
        )))
    }
}

/// The sizes `--size` or `--imix` ask for.
fn sizes(args: &PktgenArgs) -> SizeSpec {
    if args.imix {
        SizeSpec::imix()
    } else {
        args.size.clone()
    }
}

/// The engine addresses of each role (the port's MAC replaces the one
/// here on a DPDK port).
fn address(role: PktgenRole) -> IpAddr {
    match role {
        PktgenRole::Generator => IpAddr::from([10, 0, 0, 1]),
        PktgenRole::Reflector => IpAddr::from([10, 0, 0, 2]),
    }
}

/// The engine of this side: PSP on (fresh master keys) unless `--psp off`,
/// Swift set as `falcon node` sets it, room for `--connections`.
pub(crate) fn new_engine<B: PacketBuf>(
    args: &PktgenArgs,
    mac: EthernetAddress,
    max_frame_len: usize,
    now: Timestamp,
) -> Result<Engine<B, Pattern>> {
    let defaults = EngineConfig::default();
    let config = EngineConfig {
        local_ip: address(args.role),
        local_mac: mac,
        max_frame_len,
        max_connections: defaults.max_connections.max(args.connections),
        psp: match args.psp {
            OnOff::On => Some(PspConfig::new(node::master_keys()?)),
            OnOff::Off => None,
        },
        seed: u64::from(std::process::id()),
        rue: match args.cc {
            PktgenCc::Swift => node::swift(args.target_delay_us, args.min_rto_us)?,
            PktgenCc::Off => RueMode::Off,
        },
        delivery: DeliveryConfig {
            initial_rto: Duration::from_secs_f64(args.min_rto_us / 1e6),
            ..DeliveryConfig::default()
        },
        ..defaults
    };
    Engine::new(config, now)
        .map_err(|e| AppError::Usage(format!("pktgen: engine configuration: {e}")))
}

pub(crate) fn failed(role: PktgenRole, e: impl std::fmt::Display) -> AppError {
    AppError::Failed(format!("pktgen {}: {e}", role.name()))
}

/// This side's half of connection `index`.
fn local(role: PktgenRole, index: u32, mac: EthernetAddress) -> Local {
    let cid = match role {
        PktgenRole::Generator => GENERATOR_CID,
        PktgenRole::Reflector => REFLECTOR_CID,
    } + index;
    Local {
        role: match role {
            PktgenRole::Generator => "initiator",
            PktgenRole::Reflector => "target",
        },
        cid: ConnectionId::truncating(cid),
        ip: address(role),
        mac,
        function: DestinationFunction::truncating(cid),
        version: Version::Aes128Gcm,
        workload: "pktgen".into(),
        ordering: falcon_core::api::OrderingMode::Ordered,
    }
}

/// The generator's side of the setup: `--connections` offers over the
/// channel, each answered by the reflector's.
pub(crate) fn connect_all<B: PacketBuf>(
    args: &PktgenArgs,
    engine: &mut Engine<B, Pattern>,
    mac: EthernetAddress,
    now: Timestamp,
    channel: &mut Channel,
) -> Result<Vec<ConnectionHandle>> {
    let role = args.role;
    let mut connections = Vec::with_capacity(args.connections as usize);
    for i in 0..args.connections {
        let local = local(role, i, mac);
        let ours = cm::offer(engine, &local, Some(cm::initiator_sequence()))
            .map_err(|e| failed(role, e))?;
        channel
            .send(&Message::Offer(ours.clone()))
            .map_err(|e| failed(role, e))?;
        let theirs = match channel.recv(SETUP_TIMEOUT).map_err(|e| failed(role, e))? {
            Message::Offer(o) => o,
            Message::Abort { reason } => {
                return Err(failed(
                    role,
                    format!("the reflector refused connection {i}: {reason}"),
                ))
            }
            other => {
                return Err(failed(
                    role,
                    format!("expected the reflector's offer, got {other:?}"),
                ))
            }
        };
        let handle =
            cm::add_connection(now, engine, &ours, &theirs).map_err(|e| failed(role, e))?;
        connections.push(handle);
    }
    Ok(connections)
}

/// The reflector's side of one connection: the generator's offer answered
/// with ours, the connection added.
fn accept_offer<B: PacketBuf>(
    engine: &mut Engine<B, Pattern>,
    mac: EthernetAddress,
    now: Timestamp,
    channel: &mut Channel,
    index: u32,
    theirs: &cm::Offer,
) -> Result<ConnectionHandle> {
    let role = PktgenRole::Reflector;
    let local = local(role, index, mac);
    let ours = cm::offer(engine, &local, None).map_err(|e| failed(role, e))?;
    let handle = cm::add_connection(now, engine, &ours, theirs).map_err(|e| {
        let _ = channel.send(&Message::Abort { reason: e.clone() });
        failed(role, e)
    })?;
    channel
        .send(&Message::Offer(ours))
        .map_err(|e| failed(role, e))?;
    Ok(handle)
}

/// Checks the sizes against what a frame of `engine` carries.
fn checked_sizes<B: PacketBuf>(args: &PktgenArgs, engine: &Engine<B, Pattern>) -> Result<SizeSpec> {
    let spec = sizes(args);
    let (lo, hi) = spec.bounds();
    let max = engine.max_payload().min(usize::from(u16::MAX));
    if lo < MIN_SIZE || hi > max {
        return Err(AppError::Usage(format!(
            "--size {spec}: each {MIN_SIZE} ..= {max} bytes (the {HEADER_LEN}-byte pktgen header and the data; {max} is what one frame of this port carries)"
        )));
    }
    Ok(spec)
}

/// Runs this side's loop on `lcore` to its end, its control channel from
/// `open` (once the flags are checked against the engine).
pub(crate) fn drive<P: CountedPort, C: Clock>(
    args: &PktgenArgs,
    lcore: Lcore<P, C, Pattern>,
    mac: EthernetAddress,
    open: impl FnOnce() -> Result<Channel>,
) -> Result<Report> {
    match args.role {
        PktgenRole::Generator => {
            let spec = checked_sizes(args, &lcore.engine)?;
            generate(args, lcore, mac, spec, open()?)
        }
        PktgenRole::Reflector => reflect(args, lcore, mac, open()?),
    }
}

const BUILD: &str = if cfg!(debug_assertions) {
    "debug"
} else {
    "release"
};

/// What both roles' reports start from.
fn base_report<P: CountedPort, C: Clock>(
    args: &PktgenArgs,
    lcore: &Lcore<P, C, Pattern>,
    connections: usize,
    seconds: f64,
    wire: Wire,
) -> Report {
    let stats = lcore.engine.stats();
    let per_s = |n: u64| n as f64 / seconds.max(1e-9);
    let (configured_gbps, configured_mpps) = match args.role {
        PktgenRole::Generator => (args.rate_gbps, args.rate_mpps),
        PktgenRole::Reflector => (None, None),
    };
    Report {
        role: args.role.name(),
        port: args.port.kind().name(),
        psp: args.psp == OnOff::On,
        cc: match args.cc {
            PktgenCc::Swift => "swift",
            PktgenCc::Off => "off",
        },
        core: args.core,
        connections,
        mix: args.mix.to_string(),
        sizes: sizes(args).to_string(),
        inflight: args.inflight as usize,
        seconds,
        configured_gbps,
        configured_mpps,
        achieved_gbps: 0.0,
        achieved_mpps: 0.0,
        achieved_ratio: None,
        tx_frames: wire.tx_frames,
        rx_frames: wire.rx_frames,
        tx_mpps: per_s(wire.tx_frames) / 1e6,
        rx_mpps: per_s(wire.rx_frames) / 1e6,
        tx_wire_gbps: per_s(wire.tx_bytes) * 8.0 / 1e9,
        rx_wire_gbps: per_s(wire.rx_bytes) * 8.0 / 1e9,
        goodput_gbps: 0.0,
        ops: 0,
        ops_mpps: 0.0,
        pushes: 0,
        pulls: 0,
        push_bytes: 0,
        pull_bytes: 0,
        verified_bytes: 0,
        p50_us: 0.0,
        p99_us: 0.0,
        p999_us: 0.0,
        max_us: 0.0,
        latency_samples: 0,
        pull_p50_us: 0.0,
        pull_p99_us: 0.0,
        retransmissions: stats.retransmissions,
        retransmissions_timeout: stats.retransmissions_timeout,
        rtt_avg_us: if stats.rtt_samples == 0 {
            0.0
        } else {
            stats.rtt_sum.as_secs_f64() * 1e6 / stats.rtt_samples as f64
        },
        fcwnd_min: stats.fcwnd_min,
        fcwnd_max: stats.fcwnd_max,
        drops: stats.drops.total(),
        drops_by_reason: stats
            .drops
            .iter()
            .filter(|&(_, n)| n > 0)
            .map(|(name, n)| (name.to_string(), n.into()))
            .collect(),
        dpdk: lcore.port.dpdk(),
        preemptions: node::preemptions(),
        failures: 0,
        first_failure: None,
        peer_report: None,
        ok: false,
        build: BUILD,
    }
}

/// The change of the port's counters from `then` to `now`.
fn wire_delta(now: Wire, then: Wire) -> Wire {
    Wire {
        rx_frames: now.rx_frames.saturating_sub(then.rx_frames),
        tx_frames: now.tx_frames.saturating_sub(then.tx_frames),
        rx_bytes: now.rx_bytes.saturating_sub(then.rx_bytes),
        tx_bytes: now.tx_bytes.saturating_sub(then.tx_bytes),
    }
}

/// The counters a stats line reads.
fn sample<P: CountedPort, C: Clock>(lcore: &Lcore<P, C, Pattern>, ops: u64, bytes: u64) -> Sample {
    let s = lcore.engine.stats();
    let w = lcore.port.wire();
    Sample {
        rx_frames: w.rx_frames,
        tx_frames: w.tx_frames,
        rx_bytes: w.rx_bytes,
        tx_bytes: w.tx_bytes,
        ops,
        payload_bytes: bytes,
        retransmissions: s.retransmissions,
        drops: s.drops.total(),
    }
}

/// Once a second: the stats line.
struct Ticker {
    role: &'static str,
    quiet: bool,
    start: Instant,
    next: Instant,
    last: (Instant, Sample),
}

impl Ticker {
    fn new(role: &'static str, quiet: bool, start: Instant, first: Sample) -> Self {
        Ticker {
            role,
            quiet,
            start,
            next: start + Duration::from_secs(1),
            last: (start, first),
        }
    }

    fn due(&self, t: Instant) -> bool {
        t >= self.next
    }

    fn tick(&mut self, t: Instant, now: Sample, latency: Option<&Histogram<u64>>) {
        let dt = (t - self.last.0).as_secs_f64();
        if !self.quiet && dt > 0.5 {
            eprintln!(
                "{}",
                stats_line(
                    self.role,
                    (t - self.start).as_secs_f64(),
                    now,
                    self.last.1,
                    dt,
                    latency
                )
            );
        }
        self.last = (t, now);
        self.next += Duration::from_secs(1);
    }
}

/// Where the generator's measured time ended.
#[derive(Debug, Clone, Copy)]
struct Window {
    end: Instant,
    wire: Wire,
    ops: u64,
    bytes: u64,
}

fn generate<P: CountedPort, C: Clock>(
    args: &PktgenArgs,
    mut lcore: Lcore<P, C, Pattern>,
    mac: EthernetAddress,
    spec: SizeSpec,
    mut channel: Channel,
) -> Result<Report> {
    let role = args.role;
    let now = lcore.clock.now();
    let connections = connect_all(args, &mut lcore.engine, mac, now, &mut channel)?;
    let n_connections = connections.len();
    let plan = Plan {
        sizes: SizeSource::new(spec.clone(), args.seed),
        mix: MixSource::new(args.mix),
        rate: match (args.rate_gbps, args.rate_mpps) {
            (Some(g), _) => Some(Rate::Gbps(g)),
            (None, Some(m)) => Some(Rate::Mpps(m)),
            (None, None) => None,
        },
        mean_size: spec.mean(),
        inflight: args.inflight as usize,
        count: args.count,
        verify: args.verify,
    };
    let pattern = Pattern::new(spec.bounds().1);
    let mut ulp = Generator::new(connections, pattern, plan);
    let seconds = match args.count {
        Some(_) => args.seconds,
        None => Some(args.seconds.unwrap_or(DEFAULT_SECONDS)),
    };
    // The measured time starts with the first submit: the next turn.
    let start = Instant::now();
    let deadline = seconds.map(|s| start + Duration::from_secs_f64(s));
    let wire_start = lcore.port.wire();
    let mut ticker = Ticker::new(role.name(), args.quiet, start, sample(&lcore, 0, 0));
    let mut window: Option<Window> = None;
    let mut last_completion = (start, 0u64);
    while !ulp.finished() {
        lcore.turn(&mut ulp);
        if lcore.turns % 16 != 0 {
            continue;
        }
        let t = Instant::now();
        let ops = ulp.counts.ops();
        if ops != last_completion.1 || ulp.outstanding() == 0 {
            last_completion = (t, ops);
        } else if t - last_completion.0 > STALL {
            let _ = channel.send(&Message::Abort {
                reason: "the generator stalled".into(),
            });
            return Err(failed(
                role,
                format!(
                    "no completion for {STALL:?} with {} transactions outstanding (engine {:?}, port {:?})",
                    ulp.outstanding(),
                    lcore.engine.stats(),
                    lcore.port.wire()
                ),
            ));
        }
        if window.is_none() && deadline.is_some_and(|d| t >= d) {
            window = Some(Window {
                end: t,
                wire: lcore.port.wire(),
                ops,
                bytes: ulp.counts.bytes(),
            });
            ulp.stop();
        }
        if ticker.due(t) {
            let interval = ulp.take_interval();
            ticker.tick(t, sample(&lcore, ops, ulp.counts.bytes()), Some(&interval));
        }
    }
    let window = window.unwrap_or_else(|| Window {
        end: Instant::now(),
        wire: lcore.port.wire(),
        ops: ulp.counts.ops(),
        bytes: ulp.counts.bytes(),
    });
    ulp.take_interval();
    let seconds = (window.end - start).as_secs_f64().max(1e-9);
    let mut report = base_report(
        args,
        &lcore,
        n_connections,
        seconds,
        wire_delta(window.wire, wire_start),
    );
    let c = ulp.counts;
    report.ops = c.ops();
    report.pushes = c.pushes;
    report.pulls = c.pulls;
    report.push_bytes = c.push_bytes;
    report.pull_bytes = c.pull_bytes;
    report.verified_bytes = c.verified_bytes;
    report.goodput_gbps = window.bytes as f64 * 8.0 / seconds / 1e9;
    report.ops_mpps = window.ops as f64 / seconds / 1e6;
    report.achieved_gbps = report.goodput_gbps;
    report.achieved_mpps = report.ops_mpps;
    report.achieved_ratio = match (args.rate_gbps, args.rate_mpps) {
        (Some(g), _) => Some(report.achieved_gbps / g),
        (None, Some(m)) => Some(report.achieved_mpps / m),
        (None, None) => None,
    };
    let h = &ulp.push_latency;
    report.p50_us = us(h, 0.5);
    report.p99_us = us(h, 0.99);
    report.p999_us = us(h, 0.999);
    report.max_us = if h.is_empty() {
        0.0
    } else {
        h.max() as f64 / 1e3
    };
    report.latency_samples = h.len();
    report.pull_p50_us = us(&ulp.pull_latency, 0.5);
    report.pull_p99_us = us(&ulp.pull_latency, 0.99);
    report.failures = ulp.failures.count;
    report.first_failure = ulp.failures.first.clone();
    // The reflector's counts come back over the control channel.
    let ours = serde_json::to_value(&report).unwrap_or_default();
    channel
        .send(&Message::Done { report: ours })
        .map_err(|e| failed(role, e))?;
    let theirs = match channel.recv(SETUP_TIMEOUT).map_err(|e| failed(role, e))? {
        Message::Done { report } => report,
        other => {
            return Err(failed(
                role,
                format!("expected the reflector's summary, got {other:?}"),
            ))
        }
    };
    compare(&mut report, &theirs);
    report.peer_report = Some(theirs);
    report.ok = report.failures == 0;
    Ok(report)
}

/// Counts a failure for each count the reflector's report disagrees on,
/// and for the reflector's own failures.
fn compare(report: &mut Report, theirs: &serde_json::Value) {
    let n = |key: &str| theirs[key].as_u64().unwrap_or(u64::MAX);
    let ours = [
        ("pushes", report.pushes),
        ("pulls", report.pulls),
        ("push_bytes", report.push_bytes),
        ("pull_bytes", report.pull_bytes),
    ];
    for (key, mine) in ours {
        if n(key) != mine {
            report.failures += 1;
            report.first_failure.get_or_insert_with(|| {
                format!(
                    "the reflector counted {} {key}, the generator {mine}",
                    n(key)
                )
            });
        }
    }
    if n("failures") != 0 {
        report.failures += 1;
        report
            .first_failure
            .get_or_insert_with(|| format!("the reflector failed: {}", theirs["first_failure"]));
    }
}

fn reflect<P: CountedPort, C: Clock>(
    args: &PktgenArgs,
    mut lcore: Lcore<P, C, Pattern>,
    mac: EthernetAddress,
    mut channel: Channel,
) -> Result<Report> {
    let role = args.role;
    let start = Instant::now();
    let deadline = args.seconds.map(|s| start + Duration::from_secs_f64(s));
    let pattern = Pattern::new(lcore.engine.max_payload());
    let mut ulp = Reflector::new(pattern, args.verify);
    let mut connections = 0u32;
    let wire_start = lcore.port.wire();
    let mut ticker = Ticker::new(role.name(), args.quiet, start, sample(&lcore, 0, 0));
    let mut next_poll = start;
    let mut first_request: Option<Instant> = None;
    let theirs = loop {
        lcore.turn(&mut ulp);
        if lcore.turns % 16 != 0 {
            continue;
        }
        let t = Instant::now();
        if first_request.is_none() && ulp.counts.ops() > 0 {
            first_request = Some(t);
        }
        if t >= next_poll {
            next_poll = t + Duration::from_millis(1);
            match channel.try_recv().map_err(|e| failed(role, e))? {
                None => {}
                Some(Message::Offer(o)) => {
                    let now = lcore.clock.now();
                    accept_offer(&mut lcore.engine, mac, now, &mut channel, connections, &o)?;
                    connections += 1;
                    // Offers come back to back: the next one without
                    // waiting for the poll.
                    next_poll = t;
                }
                Some(Message::Done { report }) => break Some(report),
                Some(Message::Abort { reason }) => {
                    return Err(failed(role, format!("the generator gave up: {reason}")))
                }
            }
        }
        if deadline.is_some_and(|d| t >= d) {
            break None;
        }
        if ticker.due(t) {
            ticker.tick(
                t,
                sample(&lcore, ulp.counts.ops(), ulp.counts.bytes()),
                None,
            );
        }
    };
    let end = Instant::now();
    let seconds = (end - first_request.unwrap_or(start))
        .as_secs_f64()
        .max(1e-9);
    let mut report = base_report(
        args,
        &lcore,
        connections as usize,
        seconds,
        wire_delta(lcore.port.wire(), wire_start),
    );
    let c = ulp.counts;
    report.ops = c.ops();
    report.pushes = c.pushes;
    report.pulls = c.pulls;
    report.push_bytes = c.push_bytes;
    report.pull_bytes = c.pull_bytes;
    report.verified_bytes = c.verified_bytes;
    report.goodput_gbps = c.bytes() as f64 * 8.0 / seconds / 1e9;
    report.ops_mpps = c.ops() as f64 / seconds / 1e6;
    report.achieved_gbps = report.goodput_gbps;
    report.achieved_mpps = report.ops_mpps;
    report.failures = ulp.failures.count;
    report.first_failure = ulp.failures.first.clone();
    if let Some(generator) = &theirs {
        // The generator's configuration, for this side's report.
        report.mix = generator["mix"].as_str().unwrap_or_default().to_string();
        report.sizes = generator["sizes"].as_str().unwrap_or_default().to_string();
        report.inflight = generator["inflight"].as_u64().unwrap_or(0) as usize;
        report.ok = report.failures == 0;
        let ours = serde_json::to_value(&report).unwrap_or_default();
        channel
            .send(&Message::Done { report: ours })
            .map_err(|e| failed(role, e))?;
    } else {
        report.failures += 1;
        report
            .first_failure
            .get_or_insert_with(|| "--seconds passed before the generator said it was done".into());
    }
    report.ok = report.failures == 0;
    Ok(report)
}

#[cfg(test)]
mod tests;
