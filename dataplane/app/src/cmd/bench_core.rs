//! `falcon bench core`: the packet delivery sublayer on one core, in
//! memory, no crypto.
//!
//! Two `DeliveryConnection`s run in one loop on one core: the initiator
//! sends Push Data of `--size` payload bytes (so both sliding-window sides,
//! the ncwnd/fcwnd gates and the ULP-ACK path are exercised), the target
//! admits and ULP-acknowledges each one at once, and its ACKs (coalesced
//! BACKs, immediate ones on AR) go back. RUE events are answered at once by
//! `CcResult::reflect` (the bypass: the RUE's own cost is `falcon bench
//! rue`'s). The clock is read once per burst of 32, as the datapath loop
//! does.
//!
//! **What `delivery_mpps` counts:** Push Data packets per second through,
//! per packet, the initiator's `submit` + `poll_transmit` (PSN, gating, AR,
//! piggy-backed ACK, header repr) and the target's `handle_packet` +
//! `admit` + `handle_ulp_ack`, plus, amortized, the target's ACK generation
//! (`poll_ack`), the initiator's ACK processing (`handle_packet` on the
//! BACK: base advance, slot release, RTT sample, RUE event), the
//! completion events both sides emit, RUE event/result handling and the
//! timer checks — all of it on one core, so the figure is "packets per
//! second per core for both ends of a connection's delivery layer". Not
//! counted: payload bytes (never touched), PSP, Ethernet/IP/UDP.
//! `delivery_wire_mpps` repeats the run with every Falcon header (data and
//! ACK) emitted into a buffer and parsed back with `FalconRepr::parse`, as
//! the pipeline would. After each run every packet must have been delivered
//! once and acknowledged once, or the command fails.
//!
//! **What pacing costs** (`falcon_core::pacing`, spec/rue.md §5):
//! `pacing_wheel_ns_per_op` is one insertion into the pacing wheel plus its
//! expiry, with 1 024 connections held on the engine's default wheel (512 ns
//! slots, 65 536 of them) at gaps from 328 ns to 31 µs;
//! `pacing_stamp_ns_per_op` is one packet's release time and departure
//! charge on a rate-capped connection (`Timestamper`). `push64_uncapped_mops`
//! and `push64_capped_mops` are 64-byte push transactions through two
//! engines (no PSP, the loopback, 64 outstanding) without a rate cap and
//! with one that never binds (1 Pbit/s), in interleaved slices;
//! `rate_cap_cost_ratio` is the median of the per-slice ratios capped /
//! uncapped: the bookkeeping a cap costs when it does not hold anything
//! back. `capped_pacing_releases` counts the releases the cap caused (its
//! 1 ns gaps, from the carried remainder, land a packet in the wheel now
//! and then).

use std::time::{Duration, Instant};

use falcon_core::delivery::{
    ConnectionParams, DeliveryConfig, DeliveryConnection, Event, OrderingMode, OutgoingPacket,
    PacketKind, PayloadHandle, RxMeta, RxOutcome,
};
use falcon_core::engine::{connect, ConnectionHandle, Engine, EngineConfig, PairSpec};
use falcon_core::ids::{ConnectionId, DestinationFunction};
use falcon_core::pacing::{Carousel, Timestamper};
use falcon_core::port::FrameBuf;
use falcon_core::seq::{Psn, Rsn};
use falcon_core::testing::{Loopback, LoopbackConfig, LoopbackPort};
use falcon_core::time::Timestamp;
use falcon_core::transaction::{Completion, CompletionStatus, Op, Transaction, UlpEvent};
use falcon_core::wire::{EthernetAddress, FalconRepr, ProtocolType, RxBufferLevel};
use rue::CcResult;
use serde::Serialize;

use super::slices::{median, ratios, Rates};
use crate::cli::BenchCoreArgs;
use crate::error::{AppError, Result};

/// Packets per burst (one `rx_burst` of the datapath loop).
const BURST: usize = 32;
/// RUE event queue size the admission sees (isekai default).
const RUE_QUEUE: usize = 65_536;

#[derive(Debug, Serialize)]
pub struct Report {
    /// Payload bytes per Push Data.
    pub size_bytes: u32,
    /// Push Data packets per second through both ends' delivery layer on one
    /// core (see the module doc for what is counted).
    pub delivery_mpps: f64,
    /// The same with Falcon header emit and parse on every data packet and
    /// ACK.
    pub delivery_wire_mpps: f64,
    /// Nanoseconds per packet for both ends together (1000 / delivery_mpps).
    pub delivery_ns_per_packet: f64,
    /// Push Data packets sent in the delivery-only run.
    pub packets: u64,
    /// ACKs (BACK/EACK) the target sent in that run.
    pub acks: u64,
    /// ACKs per data packet.
    pub acks_per_packet: f64,
    /// RUE events handed out by both ends.
    pub rue_events: u64,
    /// Retransmissions (expected 0: the in-memory link loses nothing).
    pub retransmits: u64,
    /// Measured time of the delivery-only run, seconds.
    pub seconds: f64,
    /// Measured time of the wire run, seconds.
    pub wire_seconds: f64,
    /// Whole transactions through two engines, and the crypto-only bounds
    /// (cmd/bench_loop.rs).
    #[serde(flatten)]
    pub engine: super::bench_loop::LoopReport,
    /// What pacing costs (see the module doc).
    #[serde(flatten)]
    pub pacing: PacingReport,
}

/// The pacing figures of `bench core` (see the module doc).
#[derive(Debug, Serialize, Default)]
pub struct PacingReport {
    /// Nanoseconds per insertion into the pacing wheel plus its expiry.
    pub pacing_wheel_ns_per_op: f64,
    /// Nanoseconds per packet for a rate-capped connection's release time
    /// and departure charge.
    pub pacing_stamp_ns_per_op: f64,
    /// 64-byte pushes through two engines, no rate cap, millions per second.
    pub push64_uncapped_mops: f64,
    /// The same with a rate cap that never binds.
    pub push64_capped_mops: f64,
    /// Median of the per-slice ratios capped / uncapped.
    pub rate_cap_cost_ratio: f64,
    /// The cap of the capped run, bit/s.
    pub rate_cap_bps: u64,
    /// Pacing-wheel releases in the capped run.
    pub capped_pacing_releases: u64,
}

/// What one run measured.
struct Run {
    packets: u64,
    acks: u64,
    rue_events: u64,
    retransmits: u64,
    elapsed: Duration,
}

pub fn run(args: &BenchCoreArgs) -> Result<Report> {
    if !(args.seconds.is_finite() && args.seconds > 0.0) {
        return Err(AppError::Usage(format!(
            "--seconds must be positive, got {}",
            args.seconds
        )));
    }
    let size = u16::try_from(args.size)
        .map_err(|_| AppError::Usage(format!("--size must be at most 65535, got {}", args.size)))?;
    // Two delivery runs, seven engine/crypto runs and three of pacing share
    // the time.
    let share = Duration::from_secs_f64(args.seconds / 12.0);
    let delivery = run_once(size, share, false)?;
    let wire = run_once(size, share, true)?;
    let engine = super::bench_loop::run(share, args.shape())?;
    let pacing = pacing(share)?;
    let mpps = |r: &Run| r.packets as f64 / r.elapsed.as_secs_f64() / 1e6;
    let delivery_mpps = mpps(&delivery);
    Ok(Report {
        size_bytes: args.size,
        delivery_mpps,
        delivery_wire_mpps: mpps(&wire),
        delivery_ns_per_packet: 1e3 / delivery_mpps.max(f64::MIN_POSITIVE),
        packets: delivery.packets,
        acks: delivery.acks,
        acks_per_packet: delivery.acks as f64 / delivery.packets.max(1) as f64,
        rue_events: delivery.rue_events,
        retransmits: delivery.retransmits,
        seconds: delivery.elapsed.as_secs_f64(),
        wire_seconds: wire.elapsed.as_secs_f64(),
        engine,
        pacing,
    })
}

pub fn print_text(r: &Report) {
    println!(
        "Delivery sublayer, both ends on one core, in memory ({} B Push Data, no crypto)",
        r.size_bytes
    );
    println!(
        "  delivery       {:8.2} Mpps  ({:.1} ns per packet, both ends)",
        r.delivery_mpps, r.delivery_ns_per_packet
    );
    println!(
        "  + header wire  {:8.2} Mpps  (emit + parse of every data packet and ACK)",
        r.delivery_wire_mpps
    );
    println!(
        "  {} packets, {} ACKs ({:.2} per packet), {} RUE events, {} retransmissions in {:.2} s",
        r.packets, r.acks, r.acks_per_packet, r.rue_events, r.retransmits, r.seconds
    );
    super::bench_loop::print_text(&r.engine);
    let p = &r.pacing;
    println!("Pacing (spec/rue.md §5)");
    println!(
        "  wheel          {:8.1} ns  (insert + expire, 1024 connections, 512 ns slots)",
        p.pacing_wheel_ns_per_op
    );
    println!(
        "  timestamp      {:8.1} ns  (release time + departure charge of a capped packet)",
        p.pacing_stamp_ns_per_op
    );
    println!(
        "  push64 {:.2} Mops uncapped, {:.2} capped at {} bit/s: ratio {:.3} ({} releases)",
        p.push64_uncapped_mops,
        p.push64_capped_mops,
        p.rate_cap_bps,
        p.rate_cap_cost_ratio,
        p.capped_pacing_releases
    );
}

/// The pacing figures, in `share` each for the wheel and the timestamper
/// and `share` for the two engine loops together.
fn pacing(share: Duration) -> Result<PacingReport> {
    const CAP: u64 = falcon_core::pacing::MAX_RATE_CAP;
    let mut uncapped = CapLoop::new(None)?;
    let mut capped = CapLoop::new(Some(CAP))?;
    // Warm-up, then slices taken in turn.
    let warm = share / 20;
    uncapped.run_for(warm)?;
    capped.run_for(warm)?;
    uncapped.rates = Rates::default();
    capped.rates = Rates::default();
    let releases_before = capped.a.stats().pacing_releases;
    let slice = share / (2 * ROUNDS as u32);
    for _ in 0..ROUNDS {
        uncapped.run_for(slice)?;
        capped.run_for(slice)?;
    }
    Ok(PacingReport {
        pacing_wheel_ns_per_op: wheel_ns_per_op(share),
        pacing_stamp_ns_per_op: stamp_ns_per_op(share),
        push64_uncapped_mops: uncapped.rates.mean() / 1e6,
        push64_capped_mops: capped.rates.mean() / 1e6,
        rate_cap_cost_ratio: median(&ratios(&capped.rates, &uncapped.rates)),
        rate_cap_bps: CAP,
        capped_pacing_releases: capped.a.stats().pacing_releases - releases_before,
    })
}

/// Slices of each engine loop in `pacing`.
const ROUNDS: usize = 10;

/// Nanoseconds per insertion plus expiry on a wheel holding 1 024 keys,
/// each put back at its own gap after it comes out.
fn wheel_ns_per_op(duration: Duration) -> f64 {
    const KEYS: u64 = 1024;
    let gap = |key: u64| 328 + (key * 7919) % 30_000;
    let start = Timestamp::from_nanos(1_000_000_000);
    let mut wheel = Carousel::new(Duration::from_nanos(512), 1 << 16, start);
    for key in 0..KEYS {
        wheel.insert(key, start.saturating_add_nanos(gap(key)));
    }
    let mut out = Vec::with_capacity(KEYS as usize);
    let mut ops = 0u64;
    let began = Instant::now();
    loop {
        for _ in 0..256 {
            let Some(due) = wheel.next_deadline() else {
                break;
            };
            wheel.expire(due, &mut out);
            for (key, at) in out.drain(..) {
                wheel.insert(key, at.saturating_add_nanos(gap(key)));
                ops += 1;
            }
        }
        let elapsed = began.elapsed();
        if elapsed >= duration {
            return elapsed.as_nanos() as f64 / ops.max(1) as f64;
        }
    }
}

/// Nanoseconds per packet of a connection capped at 10 Gbit/s sending
/// frames of 1 500 and 64 bytes in turn back to back: the held packet's
/// release time, its admission at that time and its departure charge.
fn stamp_ns_per_op(duration: Duration) -> f64 {
    let mut pacer = Timestamper::default();
    // The rate opaque, as a connection's is: not a constant to divide by.
    pacer.set_rate_cap(
        Some(std::hint::black_box(10_000_000_000)),
        Duration::from_nanos(512),
    );
    let mut now = Timestamp::from_nanos(1_000_000_000);
    let mut ops = 0u64;
    let began = Instant::now();
    loop {
        for _ in 0..4096 {
            if !pacer.admit(now, 0) {
                now = pacer.release().unwrap_or(now);
                pacer.admit(now, 0);
            }
            pacer.on_departure(now, if ops % 2 == 0 { 1500 } else { 64 });
            ops += 1;
        }
        let elapsed = began.elapsed();
        if elapsed >= duration {
            std::hint::black_box(now);
            return elapsed.as_nanos() as f64 / ops as f64;
        }
    }
}

/// 64-byte pushes through two engines over the loopback, no PSP, 64
/// outstanding, the initiator's connection capped at `rate_cap`; its clock
/// is its own running time, as `bench_loop`'s.
struct CapLoop {
    a: Engine,
    b: Engine,
    ca: ConnectionHandle,
    cb: ConnectionHandle,
    pa: LoopbackPort,
    pb: LoopbackPort,
    rx: Vec<FrameBuf>,
    tx: Vec<FrameBuf>,
    outstanding: usize,
    tag: u64,
    free: Vec<Vec<u8>>,
    ran: Duration,
    rates: Rates,
}

/// Push transactions kept outstanding by [`CapLoop`].
const CAP_LOOP_DEPTH: usize = 64;

impl CapLoop {
    fn new(rate_cap: Option<u64>) -> Result<Self> {
        let failed = |what: &str, e: &dyn std::fmt::Display| {
            AppError::Failed(format!("bench core: pacing loop {what}: {e}"))
        };
        let now = Timestamp::from_nanos(1_000_000_000);
        let config = |ip: [u8; 4], mac: u8| EngineConfig {
            local_ip: std::net::IpAddr::V4(ip.into()),
            local_mac: EthernetAddress([2, 0, 0, 0, 0, mac]),
            ..EngineConfig::default()
        };
        let mut a = Engine::new(config([10, 0, 0, 1], 1), now).map_err(|e| failed("engine", &e))?;
        let mut b = Engine::new(config([10, 0, 0, 2], 2), now).map_err(|e| failed("engine", &e))?;
        let spec = PairSpec {
            rate_cap,
            ..PairSpec::default()
        };
        let (ca, cb) = connect(now, &mut a, &mut b, &spec).map_err(|e| failed("connect", &e))?;
        let (pa, pb) = Loopback::pair(LoopbackConfig {
            one_way_delay: Duration::ZERO,
            ..LoopbackConfig::default()
        });
        Ok(CapLoop {
            a,
            b,
            ca,
            cb,
            pa,
            pb,
            rx: Vec::new(),
            tx: Vec::new(),
            outstanding: 0,
            tag: 0,
            free: (0..CAP_LOOP_DEPTH).map(|_| vec![0xA5; 64]).collect(),
            ran: Duration::ZERO,
            rates: Rates::default(),
        })
    }

    /// Runs for `duration` of wall time and records the slice.
    fn run_for(&mut self, duration: Duration) -> Result<()> {
        let CapLoop {
            a,
            b,
            ca,
            cb,
            pa,
            pb,
            rx,
            tx,
            outstanding,
            tag,
            free,
            ran,
            rates,
        } = self;
        let clock = |ran: Duration| Timestamp::from_nanos(1_000_000_000 + ran.as_nanos() as u64);
        let start = Instant::now();
        let mut completed = 0u64;
        loop {
            let elapsed = start.elapsed();
            if elapsed >= duration {
                *ran += elapsed;
                rates.record(completed, elapsed);
                return Ok(());
            }
            let now = clock(*ran + elapsed);
            while *outstanding < CAP_LOOP_DEPTH {
                *tag += 1;
                let payload = free.pop().unwrap_or_else(|| vec![0xA5; 64]);
                match a.submit(now, *ca, Transaction::push(*tag, payload)) {
                    Ok(_) => *outstanding += 1,
                    Err(rejected) => {
                        if let Op::Push(payload) = rejected.returned.op {
                            free.push(payload);
                        }
                        break;
                    }
                }
            }
            for (engine, port, conn) in [(&mut *a, &mut *pa, *ca), (&mut *b, &mut *pb, *cb)] {
                let now = clock(*ran + start.elapsed());
                engine.receive_burst(now, port, rx, 32);
                if engine.poll_timeout().is_some_and(|t| t <= now) {
                    engine.handle_timeout(now);
                }
                while let Some(event) = engine.poll_event() {
                    match event {
                        UlpEvent::Request(r) => {
                            engine.ulp_ack(now, conn, r.rsn).map_err(|e| {
                                AppError::Failed(format!("bench core: ULP ACK {e:?}"))
                            })?;
                            engine.release(r.payload);
                        }
                        UlpEvent::Completion(Completion {
                            status,
                            tag,
                            data,
                            source,
                            ..
                        }) => {
                            if status != CompletionStatus::Ack {
                                return Err(AppError::Failed(format!(
                                    "bench core: pacing loop transaction {tag} {status:?}"
                                )));
                            }
                            *outstanding -= 1;
                            completed += 1;
                            free.extend(source);
                            engine.release(data);
                        }
                        UlpEvent::ConnectionError { fault, .. } => {
                            return Err(AppError::Failed(format!(
                                "bench core: pacing loop connection error {fault:?}"
                            )));
                        }
                        UlpEvent::Xoff { .. } | UlpEvent::Xon { .. } => {}
                    }
                }
                let ran = *ran;
                engine.transmit_bursts(|| clock(ran + start.elapsed()), port, tx, 8);
            }
        }
    }
}

fn params(side: u32) -> ConnectionParams {
    let cid = |n: u32| ConnectionId::truncating(0x10 + n);
    ConnectionParams {
        connection_id: cid(side),
        peer_connection_id: cid(1 - side),
        destination_function: DestinationFunction::truncating(1),
        protocol: ProtocolType::Rdma,
        ordering: OrderingMode::Ordered,
        // Start near the wrap so the run crosses 2^32.
        tx_request_psn: Psn::new(u32::MAX - 1000),
        tx_data_psn: Psn::new(u32::MAX - 1000),
        rx_request_psn: Psn::new(u32::MAX - 1000),
        rx_data_psn: Psn::new(u32::MAX - 1000),
        seed: u64::from(side) + 1,
    }
}

/// Runs the loop for `duration`; with `wire`, every header goes through
/// emit and parse.
fn run_once(size: u16, duration: Duration, wire: bool) -> Result<Run> {
    let config = DeliveryConfig::default();
    config
        .validate()
        .map_err(|e| AppError::Failed(format!("delivery config: {e}")))?;
    let mut initiator = DeliveryConnection::new(&config, params(0));
    let mut target = DeliveryConnection::new(&config, params(1));
    let mut buffer = vec![0u8; 128 + usize::from(size)];
    let level = RxBufferLevel::truncating(0);
    let start = Instant::now();
    // The connections' clock: real nanoseconds since the start, read once
    // per burst.
    let clock =
        |start: &Instant| Timestamp::from_nanos(1_000_000 + start.elapsed().as_nanos() as u64);
    let mut submitted: u64 = 0;
    let mut sent: u64 = 0;
    let mut delivered: u64 = 0;
    let mut completed: u64 = 0;
    let mut acks: u64 = 0;
    let mut rue_events: u64 = 0;
    let mut now;
    loop {
        now = clock(&start);
        if now.as_nanos() - 1_000_000 >= duration.as_nanos() as u64 {
            break;
        }
        // Keep a burst queued ahead of the gate.
        while submitted - sent < 2 * BURST as u64 {
            let packet = OutgoingPacket {
                kind: PacketKind::PushData,
                rsn: Rsn::new(submitted as u32),
                request_length: size,
                payload_len: size,
                handle: PayloadHandle(submitted),
                ack_request: false,
            };
            if initiator.submit(packet).is_err() {
                break;
            }
            submitted += 1;
        }
        for _ in 0..BURST {
            let Some(tx) = initiator.poll_transmit(now) else {
                break;
            };
            sent += 1;
            let meta = RxMeta {
                tx_time: now.falcon_time32(),
                ecn_ce: false,
                ttl: 62,
            };
            let repr = if wire {
                through_wire(&tx.repr, &mut buffer)?
            } else {
                tx.repr
            };
            match target.handle_packet(now, &repr, meta) {
                RxOutcome::Deliver(arrival) => {
                    let psn = arrival.psn;
                    target
                        .admit(now, arrival)
                        .map_err(|reason| AppError::Failed(format!("admit refused: {reason}")))?;
                    target
                        .handle_ulp_ack(now, psn)
                        .map_err(|e| AppError::Failed(format!("ULP ACK: {e}")))?;
                    delivered += 1;
                }
                other => {
                    return Err(AppError::Failed(format!(
                        "data packet not delivered: {other:?}"
                    )))
                }
            }
        }
        acks += exchange_acks(now, &mut target, &mut initiator, level, wire, &mut buffer)?;
        completed += drain_events(&mut initiator)?;
        drain_events(&mut target)?;
        rue_events += answer_rue(now, &mut initiator) + answer_rue(now, &mut target);
        initiator.handle_timeout(now);
        target.handle_timeout(now);
    }
    let elapsed = start.elapsed();
    // Drain: the last ACKs (coalescing timer), then check exactly-once.
    let mut drain_now = now;
    for _ in 0..1_000 {
        if completed == sent {
            break;
        }
        drain_now = drain_now + Duration::from_micros(10);
        target.handle_timeout(drain_now);
        initiator.handle_timeout(drain_now);
        acks += exchange_acks(
            drain_now,
            &mut target,
            &mut initiator,
            level,
            wire,
            &mut buffer,
        )?;
        completed += drain_events(&mut initiator)?;
        answer_rue(drain_now, &mut initiator);
        answer_rue(drain_now, &mut target);
    }
    if delivered != sent || completed != sent {
        return Err(AppError::Failed(format!(
            "sent {sent} packets, delivered {delivered}, acknowledged {completed}"
        )));
    }
    let stats = initiator.stats();
    Ok(Run {
        packets: sent,
        acks,
        rue_events,
        retransmits: stats.retransmits_timeout + stats.retransmits_early,
        elapsed,
    })
}

/// Emits `repr` into `buffer` and parses it back (the payload bytes are
/// whatever the buffer holds: never read).
fn through_wire(repr: &FalconRepr, buffer: &mut [u8]) -> Result<FalconRepr> {
    let len = repr.buffer_len();
    let bytes = buffer
        .get_mut(..len)
        .ok_or_else(|| AppError::Failed(format!("packet of {len} bytes exceeds the buffer")))?;
    repr.emit(bytes);
    FalconRepr::parse(bytes).map_err(|e| AppError::Failed(format!("parse of own packet: {e}")))
}

/// Carries every due ACK from `from` to `to`; returns how many.
fn exchange_acks(
    now: Timestamp,
    from: &mut DeliveryConnection,
    to: &mut DeliveryConnection,
    level: RxBufferLevel,
    wire: bool,
    buffer: &mut [u8],
) -> Result<u64> {
    let mut count = 0;
    while let Some(ack) = from.poll_ack(now, level) {
        let ack = if wire {
            through_wire(&ack, buffer)?
        } else {
            ack
        };
        let meta = RxMeta {
            tx_time: now.falcon_time32(),
            ecn_ce: false,
            ttl: 62,
        };
        match to.handle_packet(now, &ack, meta) {
            RxOutcome::Processed => count += 1,
            other => return Err(AppError::Failed(format!("ACK not processed: {other:?}"))),
        }
    }
    Ok(count)
}

/// Drains a connection's events; returns the acknowledgements among them.
fn drain_events(conn: &mut DeliveryConnection) -> Result<u64> {
    let mut acked = 0;
    while let Some(event) = conn.poll_event() {
        match event {
            Event::Acked { .. } => acked += 1,
            Event::Error(error) => {
                return Err(AppError::Failed(format!("connection error: {error}")))
            }
            _ => {}
        }
    }
    Ok(acked)
}

/// Answers a pending RUE event with the bypass result; returns 1 if there
/// was one.
fn answer_rue(now: Timestamp, conn: &mut DeliveryConnection) -> u64 {
    match conn.poll_rue_event(now, 0, RUE_QUEUE) {
        Some(event) => {
            conn.handle_rue_result(now, &CcResult::reflect(&event));
            1
        }
        None => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::bench_loop::Shape;

    const DEFAULT: Shape = Shape::DEFAULT;

    #[test]
    fn short_run_delivers_everything_once() {
        let args = BenchCoreArgs {
            size: 64,
            seconds: 0.05,
            json: true,
            profile: None,
            transactions: 1,
            depth: DEFAULT.depth as u32,
            burst: DEFAULT.burst as u32,
            tx_burst: DEFAULT.tx_burst as u32,
            cache_batch: DEFAULT.cache_batch as u32,
        };
        let report = run(&args).unwrap();
        // How many packets 50 ms holds depends on the machine's load; what
        // holds at any count is checked, and the ACK ratio once enough
        // packets went for ACKs to be coalesced.
        assert!(report.packets > 0, "{report:?}");
        assert!(report.delivery_mpps > 0.0 && report.delivery_wire_mpps > 0.0);
        assert_eq!(report.retransmits, 0);
        assert!(report.acks_per_packet <= 1.0, "{report:?}");
        let p = &report.pacing;
        assert!(p.pacing_wheel_ns_per_op > 0.0 && p.pacing_stamp_ns_per_op > 0.0);
        assert!(p.push64_uncapped_mops > 0.0 && p.push64_capped_mops > 0.0);
        assert!(p.rate_cap_cost_ratio > 0.0, "{p:?}");
        if report.packets > 1_000 {
            assert!(
                report.acks_per_packet > 0.01 && report.acks_per_packet < 1.0,
                "{report:?}"
            );
        }
    }

    #[test]
    fn bad_arguments_are_usage_errors() {
        let bad = BenchCoreArgs {
            size: 70_000,
            seconds: 1.0,
            json: false,
            profile: None,
            transactions: 1,
            depth: DEFAULT.depth as u32,
            burst: DEFAULT.burst as u32,
            tx_burst: DEFAULT.tx_burst as u32,
            cache_batch: DEFAULT.cache_batch as u32,
        };
        assert!(matches!(run(&bad), Err(AppError::Usage(_))));
        let bad = BenchCoreArgs {
            size: 64,
            seconds: 0.0,
            json: false,
            profile: None,
            transactions: 1,
            depth: DEFAULT.depth as u32,
            burst: DEFAULT.burst as u32,
            tx_burst: DEFAULT.tx_burst as u32,
            cache_batch: DEFAULT.cache_batch as u32,
        };
        assert!(matches!(run(&bad), Err(AppError::Usage(_))));
    }
}
