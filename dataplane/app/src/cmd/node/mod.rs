//! `falcon node`: one side of a two-process run (issue #25, items 5 and 7).
//!
//! Layer: application. Owns the assembly of one node: the engine (PSP on
//! by default, fresh master keys from the OS), the port (the kernel UDP
//! port, wrapped in the seeded fault injector when `--loss` is given), the
//! connection set up with the peer over the control channel
//! ([`crate::cm`]), the lcore loop ([`falcon_core::api::Lcore`]) with the
//! workload's ULP ([`workload`]), a stats line a second on stderr and the
//! summary. The initiator runs the workload and tells the target over the
//! control channel when it is done; the target answers with its own
//! counts, which the initiator checks against its own and reports beside
//! them.

pub(crate) mod dpdk;
pub mod metrics;
pub mod workload;

pub use dpdk::DpdkCounters;

use std::net::{IpAddr, SocketAddr, TcpListener, UdpSocket};
use std::time::{Duration, Instant};

use falcon_core::api::{
    Clock, ConnectionHandle, ConnectionId, DeliveryConfig, DestinationFunction, Engine,
    EngineConfig, EthernetAddress, FrameBuf, Lcore, PacketBuf, Port, PspConfig, RueMode,
    SystemClock, Timestamp,
};
use falcon_core::testing::{FaultInjector, Faults};
use psp::{MasterKey, MasterKeys, Version};
use rue::{ProfileConfig, Profiles, SwiftConfig};
use serde::Serialize;

use self::workload::{Initiator, Pattern, Target, Workload, HEADER_LEN};
use crate::cli::{NodeArgs, NodeRole, NodeWorkload, OnOff, PortKind};
use crate::cm::{self, Channel, Local, Message};
use crate::error::{AppError, Result};
use crate::metrics::MetricsServer;
use crate::udp::{UdpPeer, UdpPort, UdpPortConfig, UdpPortStats};

/// How long the sides wait for each other to come up.
const SETUP_TIMEOUT: Duration = Duration::from_secs(60);
/// An initiator with transactions outstanding and none completing for this
/// long gives up.
const STALL: Duration = Duration::from_secs(10);

/// What one node did.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub role: &'static str,
    pub workload: &'static str,
    pub port: &'static str,
    pub psp: bool,
    pub core: Option<usize>,
    pub bind: Option<SocketAddr>,
    pub peer: Option<SocketAddr>,
    /// Measured time: from the connection's setup to the end of the
    /// workload (bulk, rr: the `--seconds` window; verify: the whole run).
    pub seconds: f64,
    /// Data bytes per transaction (verify: the largest).
    pub size: usize,
    pub inflight: usize,
    /// Injected loss at this node's port, each direction it sends.
    pub loss: f64,
    /// Completions (initiator) or requests (target).
    pub transactions: u64,
    /// Ops (an rr op is a push and a pull).
    pub ops: u64,
    /// Push data bytes: acknowledged (initiator), verified (target).
    pub push_bytes: u64,
    /// Pull data bytes: verified (initiator), served (target).
    pub pull_bytes: u64,
    /// rr's responses (pushes from the target): verified (initiator),
    /// acknowledged (target).
    pub response_bytes: u64,
    /// Bytes this node checked against the pattern itself.
    pub verified_bytes: u64,
    /// Push and pull data bytes in the measured time, Gbit/s.
    pub goodput_gbps: f64,
    /// Ops completed per second in the measured time.
    pub ops_per_s: f64,
    /// Op latency (rr: push submitted to pull completed), initiator only.
    pub latency_p50_us: f64,
    pub latency_p99_us: f64,
    pub latency_max_us: f64,
    pub failures: u64,
    pub first_failure: Option<String>,
    pub retransmissions: u64,
    /// Of them, on a retransmit timeout.
    pub retransmissions_timeout: u64,
    /// Round-trip time the engine measured (Falcon's t1..t4), average and
    /// least, µs.
    pub rtt_avg_us: f64,
    pub rtt_min_us: f64,
    /// The fabric window's range over the run, packets.
    pub fcwnd_min: f64,
    pub fcwnd_max: f64,
    pub drops: u64,
    pub drops_by_reason: serde_json::Map<String, serde_json::Value>,
    /// Frames the fault injector dropped on transmit.
    pub injected_losses: u64,
    /// The UDP port's counters (`--port udp`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub udp: Option<UdpPortStats>,
    /// The DPDK port's counters (`--port memif|af-packet|af-xdp`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dpdk: Option<DpdkCounters>,
    /// Times the kernel took this process's core from it (another task on
    /// the core, `nonvoluntary_ctxt_switches`): a busy-polling node pinned
    /// to a core of its own sees none, and each one stalls its timers and
    /// its peer's ACKs for a scheduler slice.
    pub preemptions: Option<u64>,
    /// The target's report, as it sent it back (initiator only).
    pub peer_report: Option<serde_json::Value>,
    /// No failure, and (verify) both sides counted the same bytes.
    pub ok: bool,
    pub build: &'static str,
}

const BUILD: &str = if cfg!(debug_assertions) {
    "debug"
} else {
    "release"
};

/// The engine addresses of each role (the UDP port maps them to sockets).
fn addresses(role: NodeRole) -> (IpAddr, EthernetAddress, u32) {
    match role {
        NodeRole::Initiator => (
            IpAddr::from([10, 0, 0, 1]),
            EthernetAddress([2, 0, 0, 0, 0, 1]),
            0x10,
        ),
        NodeRole::Target => (
            IpAddr::from([10, 0, 0, 2]),
            EthernetAddress([2, 0, 0, 0, 0, 2]),
            0x20,
        ),
    }
}

pub(crate) fn master_keys() -> Result<MasterKeys> {
    let path = std::path::Path::new("/dev/urandom");
    let mut bytes = [0u8; 64];
    use std::io::Read;
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| AppError::io(path, e))?;
    let half = |i: usize| -> [u8; 32] {
        let mut k = [0u8; 32];
        k.copy_from_slice(&bytes[i * 32..(i + 1) * 32]);
        k
    };
    Ok(MasterKeys {
        k0: MasterKey::new(half(0)),
        k1: MasterKey::new(half(1)),
    })
}

/// Falcon time unit (131.072 ns; DESIGN §4), in µs.
const FALCON_UNIT_US: f64 = 0.131_072;

/// Swift with a target delay and a least RTO for the kernel's network
/// stack: its defaults (25 µs, 1 ms) are a NIC's. Over loopback UDP an
/// idle round trip through two processes' sockets measures 12–110 µs
/// here, and a process preempted by another on its core stalls for a
/// scheduler tick (1–4 ms): under the defaults every such stall is a
/// spurious timeout that cuts the window to its floor.
fn swift_for_the_host_stack(args: &NodeArgs) -> Result<RueMode> {
    swift(args.target_delay_us, args.min_rto_us)
}

/// Swift with this base target delay and least RTO (µs; the flags
/// `--target-delay-us`, `--min-rto-us`).
pub(crate) fn swift(target_delay_us: f64, min_rto_us: f64) -> Result<RueMode> {
    let units = |us: f64, flag: &str| -> Result<u32> {
        let units = (us / FALCON_UNIT_US).round();
        if us.is_finite() && (1.0..=f64::from((1u32 << 24) - 1)).contains(&units) {
            Ok(units as u32)
        } else {
            Err(AppError::Usage(format!(
                "--{flag} {us}: 0.14 ..= 2 199 000 µs"
            )))
        }
    };
    let swift = SwiftConfig {
        fabric_base_delay: units(target_delay_us, "target-delay-us")?,
        min_retransmit_timeout: units(min_rto_us, "min-rto-us")?,
        ..SwiftConfig::default()
    };
    let profiles = Profiles::new(&[ProfileConfig::Swift(swift)])
        .map_err(|e| AppError::Usage(format!("swift: {}: {}", e.field, e.problem)))?;
    Ok(RueMode::Profiles(Box::new(profiles)))
}

/// Pins this process to `core`.
///
/// # Errors
///
/// The core does not exist or may not be used.
pub fn pin(core: usize) -> Result<()> {
    use nix::sched::{sched_setaffinity, CpuSet};
    use nix::unistd::Pid;
    let mut set = CpuSet::new();
    set.set(core)
        .map_err(|e| AppError::Usage(format!("--core {core}: {e}")))?;
    sched_setaffinity(Pid::from_raw(0), &set)
        .map_err(|e| AppError::Usage(format!("--core {core}: sched_setaffinity: {e}")))
}

/// Runs one node to its end.
///
/// # Errors
///
/// Usage errors (bad flags, an address in use), setup failures (the peer
/// never came, the offers disagree) and a stalled run; a run that ends
/// with failures returns its report with `ok` false.
pub fn run(args: &NodeArgs) -> Result<Report> {
    if !(0.0..=0.5).contains(&args.loss) {
        return Err(AppError::Usage(format!(
            "--loss {}: in [0, 0.5]",
            args.loss
        )));
    }
    if let Some(s) = args.seconds {
        if !(s.is_finite() && s > 0.0) {
            return Err(AppError::Usage(format!("--seconds {s}: must be positive")));
        }
    }
    match args.port {
        PortKind::Udp => run_udp(args),
        PortKind::Memif | PortKind::AfPacket | PortKind::AfXdp => dpdk::run(args),
    }
}

/// The node over the kernel UDP port.
fn run_udp(args: &NodeArgs) -> Result<Report> {
    let (Some(bind), Some(peer)) = (args.bind, args.peer) else {
        return Err(AppError::Usage("--port udp needs --bind and --peer".into()));
    };
    if let Some(core) = args.core {
        pin(core)?;
    }
    let (ip, mac, _) = addresses(args.role);
    let mut clock = SystemClock::new();
    let mut engine: Engine<FrameBuf, Pattern> = new_engine(args, ip, mac, None, clock.now())?;
    let setup = Setup::new(args, &engine)?;
    let socket =
        UdpSocket::bind(bind).map_err(|e| AppError::Usage(format!("--bind {bind}: {e}")))?;
    let (channel, connection, theirs) = set_up_connection(args, &mut engine, &mut clock, ip, mac)?;
    let peer = UdpPeer {
        socket: peer,
        ip: theirs.ip,
        mac: EthernetAddress(theirs.mac),
    };
    let port_config = UdpPortConfig {
        offload: args.udp_offload == OnOff::On,
        ..UdpPortConfig::new(ip, mac, engine.max_frame_len())
    };
    let port = UdpPort::new(socket, &[peer], port_config).map_err(|e| failed(args, e))?;
    drive_with_faults(args, engine, port, clock, connection, channel, &setup)
}

fn failed(args: &NodeArgs, e: String) -> AppError {
    AppError::Failed(format!("node {}: {e}", args.role.name()))
}

/// The engine of this node: PSP on (fresh master keys) unless `--psp off`,
/// Swift set for the path.
fn new_engine<B: PacketBuf>(
    args: &NodeArgs,
    ip: IpAddr,
    mac: EthernetAddress,
    max_frame_len: Option<usize>,
    now: Timestamp,
) -> Result<Engine<B, Pattern>> {
    let defaults = EngineConfig::default();
    let config = EngineConfig {
        local_ip: ip,
        local_mac: mac,
        max_frame_len: max_frame_len.unwrap_or(defaults.max_frame_len),
        psp: match args.psp {
            OnOff::On => Some(PspConfig::new(master_keys()?)),
            OnOff::Off => None,
        },
        seed: u64::from(std::process::id()),
        rue: swift_for_the_host_stack(args)?,
        delivery: DeliveryConfig {
            initial_rto: Duration::from_secs_f64(args.min_rto_us / 1e6),
            ..DeliveryConfig::default()
        },
        ..defaults
    };
    Engine::new(config, now)
        .map_err(|e| AppError::Usage(format!("node: engine configuration: {e}")))
}

/// The connection with the peer, set up over the control channel: the
/// channel (kept for the end of the run), the connection and the peer's
/// offer.
fn set_up_connection<B: PacketBuf, C: Clock>(
    args: &NodeArgs,
    engine: &mut Engine<B, Pattern>,
    clock: &mut C,
    ip: IpAddr,
    mac: EthernetAddress,
) -> Result<(Channel, ConnectionHandle, cm::Offer)> {
    let (_, _, cid) = addresses(args.role);
    let local = Local {
        role: args.role.name(),
        cid: ConnectionId::truncating(cid),
        ip,
        mac,
        function: DestinationFunction::truncating(cid),
        version: Version::Aes128Gcm,
        workload: args.workload.name().to_string(),
        ordering: falcon_core::api::OrderingMode::Ordered,
    };
    let failed = |e: String| failed(args, e);
    let (mut channel, ours, theirs) = match args.role {
        NodeRole::Initiator => {
            let ours = cm::offer(engine, &local, Some(cm::initiator_sequence())).map_err(failed)?;
            let mut channel = Channel::connect(args.control, SETUP_TIMEOUT).map_err(failed)?;
            let theirs = cm::exchange(&mut channel, &ours, SETUP_TIMEOUT).map_err(failed)?;
            (channel, ours, theirs)
        }
        NodeRole::Target => {
            let listener = TcpListener::bind(args.control)
                .map_err(|e| AppError::Usage(format!("--control {}: {e}", args.control)))?;
            let mut channel = Channel::accept(&listener, SETUP_TIMEOUT).map_err(failed)?;
            let theirs = match channel.recv(SETUP_TIMEOUT).map_err(failed)? {
                Message::Offer(o) => o,
                other => {
                    return Err(failed(format!(
                        "expected the initiator's offer, got {other:?}"
                    )))
                }
            };
            let ours = cm::offer(engine, &local, None).map_err(failed)?;
            (channel, ours, theirs)
        }
    };
    let connection = cm::add_connection(clock.now(), engine, &ours, &theirs).map_err(|e| {
        let _ = channel.send(&Message::Abort { reason: e.clone() });
        failed(e)
    })?;
    if args.role == NodeRole::Target {
        channel
            .send(&Message::Offer(ours.clone()))
            .map_err(failed)?;
    }
    Ok((channel, connection, theirs))
}

/// The lcore loop over `port`, in the seeded fault injector when `--loss`
/// is given.
fn drive_with_faults<P, C>(
    args: &NodeArgs,
    engine: Engine<P::Buf, Pattern>,
    port: P,
    clock: C,
    connection: ConnectionHandle,
    channel: Channel,
    setup: &Setup<'_>,
) -> Result<Report>
where
    P: NodePort,
    C: Clock,
    FaultInjector<P>: NodePort<Buf = P::Buf>,
{
    let pattern = Pattern::new(setup.max_data);
    if args.loss > 0.0 {
        let faults = Faults {
            loss_ppm: (args.loss * 1e6).round() as u32,
            ..Faults::default()
        };
        let port = FaultInjector::new(port, faults, u64::from(std::process::id()));
        drive(
            Lcore::new(engine, port, clock),
            connection,
            pattern,
            channel,
            setup,
        )
    } else {
        drive(
            Lcore::new(engine, port, clock),
            connection,
            pattern,
            channel,
            setup,
        )
    }
}

struct Setup<'a> {
    args: &'a NodeArgs,
    workload: Workload,
    size: usize,
    inflight: usize,
    /// Data bytes a frame carries past the ULP header.
    max_data: usize,
}

impl<'a> Setup<'a> {
    /// The workload the flags ask for, its sizes checked against what a
    /// frame of `engine` carries.
    fn new<B: PacketBuf>(args: &'a NodeArgs, engine: &Engine<B, Pattern>) -> Result<Setup<'a>> {
        let max_data = engine.max_payload() - HEADER_LEN;
        let (workload, size, inflight) = match args.workload {
            NodeWorkload::Verify => (
                Workload::Verify {
                    transactions: args.transactions,
                },
                args.size.unwrap_or(4000.min(max_data)),
                args.inflight.map_or(64, |n| n as usize),
            ),
            NodeWorkload::Bulk => (
                Workload::Bulk,
                args.size.unwrap_or(max_data),
                args.inflight.map_or(64, |n| n as usize),
            ),
            NodeWorkload::Rr => (
                Workload::Rr,
                args.size.unwrap_or(4096.min(max_data)),
                args.inflight.map_or(100, |n| n as usize),
            ),
            NodeWorkload::RrPull => (
                Workload::RrPull,
                args.size.unwrap_or(4096.min(max_data)),
                args.inflight.map_or(100, |n| n as usize),
            ),
        };
        if size == 0 || size > max_data {
            return Err(AppError::Usage(format!(
                "--size {size}: 1 ..= {max_data} bytes (one frame's payload less the {HEADER_LEN}-byte ULP header)"
            )));
        }
        Ok(Setup {
            args,
            workload,
            size,
            inflight,
            max_data,
        })
    }
}

/// The port under the loop, with or without injected loss: what the stats
/// line and the report read of it.
pub(crate) trait NodePort: Port<Buf: std::fmt::Debug> {
    /// Frames received and sent (datagrams on the UDP port).
    fn frames(&self) -> (u64, u64);
    /// Frames the fault injector dropped.
    fn injected_losses(&self) -> u64;
    /// The port's own counters, into the report.
    fn report_into(&self, report: &mut Report);
}

impl NodePort for UdpPort {
    fn frames(&self) -> (u64, u64) {
        let u = self.stats();
        (u.rx_datagrams, u.tx_datagrams)
    }
    fn injected_losses(&self) -> u64 {
        0
    }
    fn report_into(&self, report: &mut Report) {
        report.udp = Some(self.stats());
    }
}

impl<P: NodePort> NodePort for FaultInjector<P> {
    fn frames(&self) -> (u64, u64) {
        self.inner().frames()
    }
    fn injected_losses(&self) -> u64 {
        self.stats().lost
    }
    fn report_into(&self, report: &mut Report) {
        self.inner().report_into(report);
    }
}

/// The ULP's counts in a metrics snapshot.
struct Counts<'a> {
    transactions: u64,
    ops: u64,
    push_bytes: u64,
    pull_bytes: u64,
    response_bytes: u64,
    failures: u64,
    latency: Option<&'a hdrhistogram::Histogram<u64>>,
}

impl<'a> Counts<'a> {
    fn initiator(u: &'a Initiator) -> Self {
        Counts {
            transactions: u.completions,
            ops: u.ops,
            push_bytes: u.push_bytes,
            pull_bytes: u.pull_bytes,
            response_bytes: u.response_bytes,
            failures: u.failures.count,
            latency: Some(&u.latency),
        }
    }

    fn target(u: &'a Target) -> Self {
        Counts {
            transactions: u.requests,
            ops: u.requests,
            push_bytes: u.push_bytes,
            pull_bytes: u.pull_bytes,
            response_bytes: u.response_bytes,
            failures: u.failures.count,
            latency: None,
        }
    }
}

/// Counters a stats line shows the change of.
#[derive(Debug, Clone, Copy, Default)]
struct Progress {
    bytes: u64,
    ops: u64,
    rx_frames: u64,
    tx_frames: u64,
    retransmissions: u64,
    drops: u64,
}

fn stats_line(role: &str, elapsed: f64, now: Progress, then: Progress, dt: f64) {
    let rate = |a: u64, b: u64| (a - b) as f64 / dt;
    eprintln!(
        "[{role} {elapsed:5.1} s] {:6.2} Gbit/s  {:8.1} k ops/s  rx {:7.1} k frames/s  tx {:7.1} k frames/s  retx {}  drops {}",
        rate(now.bytes, then.bytes) * 8.0 / 1e9,
        rate(now.ops, then.ops) / 1e3,
        rate(now.rx_frames, then.rx_frames) / 1e3,
        rate(now.tx_frames, then.tx_frames) / 1e3,
        now.retransmissions - then.retransmissions,
        now.drops - then.drops,
    );
}

fn drive<P: NodePort, C: Clock>(
    mut lcore: Lcore<P, C, Pattern>,
    connection: falcon_core::api::ConnectionHandle,
    pattern: Pattern,
    mut channel: Channel,
    setup: &Setup<'_>,
) -> Result<Report> {
    let args = setup.args;
    let role = args.role.name();
    let start = Instant::now();
    let deadline = args.seconds.map(|s| start + Duration::from_secs_f64(s));
    // The first tick comes at once (a snapshot for the metrics endpoint,
    // no stats line), then one a second.
    let mut next_line = start;
    let mut last_line = (start, Progress::default());
    let mut metrics = match args.metrics {
        None => None,
        Some(addr) => Some(
            MetricsServer::start(addr, metrics::render)
                .map_err(|e| AppError::Usage(format!("--metrics {addr}: {e}")))?,
        ),
    };
    // A snapshot of the node with the ULP's counts (the initiator's
    // latency too), for the metrics endpoint.
    let snapshot = |lcore: &Lcore<P, C, Pattern>, counts: Counts<'_>| {
        let (port_rx_frames, port_tx_frames) = lcore.port.frames();
        metrics::Snapshot {
            role,
            port: args.port.name(),
            psp: args.psp == OnOff::On,
            uptime_seconds: start.elapsed().as_secs_f64(),
            engine: lcore.engine.stats(),
            port_rx_frames,
            port_tx_frames,
            injected_losses: lcore.port.injected_losses(),
            transactions: counts.transactions,
            ops: counts.ops,
            push_bytes: counts.push_bytes,
            pull_bytes: counts.pull_bytes,
            response_bytes: counts.response_bytes,
            failures: counts.failures,
            latency: counts.latency.and_then(metrics::latency),
        }
    };
    let progress = |lcore: &Lcore<P, C, Pattern>, bytes: u64, ops: u64| {
        let s = lcore.engine.stats();
        let (rx_frames, tx_frames) = lcore.port.frames();
        Progress {
            bytes,
            ops,
            rx_frames,
            tx_frames,
            retransmissions: s.retransmissions,
            drops: s.drops.total(),
        }
    };
    // Once a second: the stats line on stderr and a snapshot for the
    // metrics endpoint.
    let mut tick = |t: Instant, lcore: &Lcore<P, C, Pattern>, counts: Counts<'_>| {
        if t < next_line {
            return;
        }
        let bytes = counts.push_bytes + counts.pull_bytes + counts.response_bytes;
        let now = progress(lcore, bytes, counts.ops);
        let dt = (t - last_line.0).as_secs_f64();
        if !args.quiet && dt > 0.5 {
            stats_line(role, (t - start).as_secs_f64(), now, last_line.1, dt);
        }
        if let Some(m) = &mut metrics {
            m.publish(snapshot(lcore, counts));
        }
        last_line = (t, now);
        next_line += Duration::from_secs(1);
    };
    let mut report = match args.role {
        NodeRole::Initiator => {
            let mut ulp = Initiator::new(
                connection,
                setup.workload,
                pattern,
                setup.size,
                setup.inflight,
            );
            let mut measured: Option<(Instant, u64, u64)> = None;
            let mut last_completion = (start, 0u64);
            while !ulp.finished() {
                lcore.turn(&mut ulp);
                if lcore.turns % 16 != 0 {
                    continue;
                }
                let t = Instant::now();
                if ulp.completions != last_completion.1 {
                    last_completion = (t, ulp.completions);
                } else if t - last_completion.0 > STALL {
                    let _ = channel.send(&Message::Abort {
                        reason: "the initiator stalled".into(),
                    });
                    return Err(AppError::Failed(format!(
                        "node initiator: no completion for {STALL:?} with {} transactions outstanding (engine {:?}, port frames rx/tx {:?})",
                        ulp.outstanding(),
                        lcore.engine.stats(),
                        lcore.port.frames()
                    )));
                }
                if deadline.is_some_and(|d| t >= d) && measured.is_none() {
                    measured = Some((
                        t,
                        ulp.push_bytes + ulp.pull_bytes + ulp.response_bytes,
                        ulp.ops,
                    ));
                    ulp.stop();
                }
                tick(t, &lcore, Counts::initiator(&ulp));
            }
            let (end, bytes, ops) = measured.unwrap_or((
                Instant::now(),
                ulp.push_bytes + ulp.pull_bytes + ulp.response_bytes,
                ulp.ops,
            ));
            let seconds = (end - start).as_secs_f64();
            let us = |q: f64| ulp.latency.value_at_quantile(q) as f64 / 1e3;
            let mut report = base_report(args, setup, &lcore, seconds);
            report.transactions = ulp.completions;
            report.ops = ulp.ops;
            report.push_bytes = ulp.push_bytes;
            report.pull_bytes = ulp.pull_bytes;
            report.response_bytes = ulp.response_bytes;
            report.verified_bytes = ulp.pull_bytes + ulp.response_bytes;
            report.goodput_gbps = bytes as f64 * 8.0 / seconds / 1e9;
            report.ops_per_s = ops as f64 / seconds;
            report.latency_p50_us = us(0.5);
            report.latency_p99_us = us(0.99);
            report.latency_max_us = ulp.latency.max() as f64 / 1e3;
            report.failures = ulp.failures.count;
            report.first_failure = ulp.failures.first.clone();
            // The target's counts come back over the control channel.
            let ours = serde_json::to_value(&report).unwrap_or_default();
            channel
                .send(&Message::Done { report: ours })
                .map_err(|e| AppError::Failed(format!("node initiator: {e}")))?;
            match channel.recv(SETUP_TIMEOUT) {
                Ok(Message::Done { report: theirs }) => {
                    let n = |key: &str| theirs[key].as_u64().unwrap_or(u64::MAX);
                    if n("push_bytes") != report.push_bytes || n("pull_bytes") != report.pull_bytes
                    {
                        report.failures += 1;
                        report.first_failure.get_or_insert_with(|| {
                            format!(
                                "the target counted {} push, {} pull and {} response bytes, the initiator {}, {} and {}",
                                n("push_bytes"),
                                n("pull_bytes"),
                                n("response_bytes"),
                                report.push_bytes,
                                report.pull_bytes,
                                report.response_bytes
                            )
                        });
                    }
                    if n("failures") != 0 {
                        report.failures += 1;
                        report.first_failure.get_or_insert_with(|| {
                            format!("the target failed: {}", theirs["first_failure"])
                        });
                    }
                    report.peer_report = Some(theirs);
                }
                Ok(other) => {
                    return Err(AppError::Failed(format!(
                        "node initiator: expected the target's summary, got {other:?}"
                    )))
                }
                Err(e) => return Err(AppError::Failed(format!("node initiator: {e}"))),
            }
            report
        }
        NodeRole::Target => {
            let mut ulp = Target::new(pattern);
            let mut next_poll = start;
            let theirs = loop {
                lcore.turn(&mut ulp);
                if lcore.turns % 16 != 0 {
                    continue;
                }
                let t = Instant::now();
                if t >= next_poll {
                    next_poll = t + Duration::from_millis(1);
                    match channel.try_recv() {
                        Ok(None) => {}
                        Ok(Some(Message::Done { report })) => break Some(report),
                        Ok(Some(Message::Abort { reason })) => {
                            return Err(AppError::Failed(format!(
                                "node target: the initiator gave up: {reason}"
                            )))
                        }
                        Ok(Some(other)) => {
                            return Err(AppError::Failed(format!(
                                "node target: unexpected {other:?}"
                            )))
                        }
                        Err(e) => return Err(AppError::Failed(format!("node target: {e}"))),
                    }
                }
                if deadline.is_some_and(|d| t >= d) {
                    break None;
                }
                tick(t, &lcore, Counts::target(&ulp));
            };
            let seconds = theirs
                .as_ref()
                .and_then(|r| r["seconds"].as_f64())
                .unwrap_or_else(|| start.elapsed().as_secs_f64());
            let mut report = base_report(args, setup, &lcore, seconds);
            report.transactions = ulp.requests;
            report.ops = ulp.requests;
            report.push_bytes = ulp.push_bytes;
            report.pull_bytes = ulp.pull_bytes;
            report.response_bytes = ulp.response_bytes;
            report.verified_bytes = ulp.push_bytes;
            report.goodput_gbps = (ulp.push_bytes + ulp.pull_bytes + ulp.response_bytes) as f64
                * 8.0
                / start.elapsed().as_secs_f64()
                / 1e9;
            report.ops_per_s = ulp.requests as f64 / start.elapsed().as_secs_f64();
            report.failures = ulp.failures.count;
            report.first_failure = ulp.failures.first.clone();
            if theirs.is_none() {
                report.failures += 1;
                report.first_failure.get_or_insert_with(|| {
                    "--seconds passed before the initiator said it was done".into()
                });
            } else {
                let ours = serde_json::to_value(&report).unwrap_or_default();
                channel
                    .send(&Message::Done { report: ours })
                    .map_err(|e| AppError::Failed(format!("node target: {e}")))?;
            }
            report
        }
    };
    report.ok = report.failures == 0;
    Ok(report)
}

fn base_report<P: NodePort, C: Clock>(
    args: &NodeArgs,
    setup: &Setup<'_>,
    lcore: &Lcore<P, C, Pattern>,
    seconds: f64,
) -> Report {
    let stats = lcore.engine.stats();
    let mut report = Report {
        role: args.role.name(),
        workload: args.workload.name(),
        port: args.port.name(),
        psp: args.psp == OnOff::On,
        core: args.core,
        bind: args.bind,
        peer: args.peer,
        seconds,
        size: setup.size,
        inflight: setup.inflight,
        loss: args.loss,
        transactions: 0,
        ops: 0,
        push_bytes: 0,
        pull_bytes: 0,
        response_bytes: 0,
        verified_bytes: 0,
        goodput_gbps: 0.0,
        ops_per_s: 0.0,
        latency_p50_us: 0.0,
        latency_p99_us: 0.0,
        latency_max_us: 0.0,
        failures: 0,
        first_failure: None,
        retransmissions: stats.retransmissions,
        retransmissions_timeout: stats.retransmissions_timeout,
        rtt_avg_us: if stats.rtt_samples == 0 {
            0.0
        } else {
            stats.rtt_sum.as_secs_f64() * 1e6 / stats.rtt_samples as f64
        },
        rtt_min_us: stats.rtt_min.as_secs_f64() * 1e6,
        fcwnd_min: stats.fcwnd_min,
        fcwnd_max: stats.fcwnd_max,
        drops: stats.drops.total(),
        drops_by_reason: stats
            .drops
            .iter()
            .filter(|&(_, n)| n > 0)
            .map(|(name, n)| (name.to_string(), n.into()))
            .collect(),
        injected_losses: lcore.port.injected_losses(),
        udp: None,
        dpdk: None,
        preemptions: preemptions(),
        peer_report: None,
        ok: false,
        build: BUILD,
    };
    lcore.port.report_into(&mut report);
    report
}

/// This process's involuntary context switches so far (Linux).
pub(crate) fn preemptions() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("nonvoluntary_ctxt_switches:"))
        .and_then(|v| v.trim().parse().ok())
}

/// The summary in text.
pub fn print_text(r: &Report) {
    println!(
        "node {} ({} over {}, PSP {}): {:.2} s, {} transactions, {} ops",
        r.role,
        r.workload,
        r.port,
        if r.psp { "on" } else { "off" },
        r.seconds,
        r.transactions,
        r.ops
    );
    println!(
        "  verified {} bytes here; push {} B, pull {} B; {:.2} Gbit/s, {:.0} ops/s",
        r.verified_bytes, r.push_bytes, r.pull_bytes, r.goodput_gbps, r.ops_per_s
    );
    if r.role == "initiator" {
        println!(
            "  latency p50 {:.1} us, p99 {:.1} us, max {:.1} us",
            r.latency_p50_us, r.latency_p99_us, r.latency_max_us
        );
    }
    let reasons: Vec<String> = r
        .drops_by_reason
        .iter()
        .map(|(name, n)| format!("{name} {n}"))
        .collect();
    println!(
        "  retransmissions {}, drops {} ({}), injected losses {}",
        r.retransmissions,
        r.drops,
        reasons.join(", "),
        r.injected_losses
    );
    if let Some(u) = &r.udp {
        println!(
            "  udp: rx {} datagrams ({} truncated, {} unknown), tx {} ({} errors, {} unroutable)",
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
    match &r.first_failure {
        None => println!("  ok"),
        Some(f) => println!("  {} FAILURES; first: {f}", r.failures),
    }
}
