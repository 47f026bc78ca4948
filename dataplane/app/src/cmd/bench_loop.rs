//! The engine-level figures of `falcon bench core` (issue 4, DESIGN §8):
//! whole transactions through two engines on one core, against the
//! crypto-only bounds measured in the same run.
//!
//! * `push64_mops` / `push64_psp_mops`: 64-byte push transactions completed
//!   per second (millions) through an initiator and a target engine over the
//!   in-process loopback (no faults, no delay), without and with PSP. Each
//!   transaction is the initiator's submit, scheduling, header build,
//!   (seal), frame emit, the target's frame parse, (open and checks),
//!   delivery and transaction layers, the ULP ACK, the ACK back and the
//!   completion. The ULP does nothing but acknowledge, release received
//!   frames and reuse its send buffers.
//! * `loop4k_psp_gbps`: goodput of 4 KiB pushes the same way, with PSP.
//! * `crypto4k_gbps` / `crypto64_mops`: the crypto-only bound on this core:
//!   one PSP seal plus one PSP open of a 4 KiB / 64-byte Push Data packet
//!   (28-byte Falcon header + payload) back to back, nothing else.
//! * Ratios and bars: `loop4k_psp_gbps` ≥ 0.75 × `crypto4k_gbps`,
//!   `push64_psp_mops` ≥ 0.5 × `crypto64_mops`.
//! * Every measurement runs in [`ROUNDS`] slices interleaved with the others
//!   and each ratio is the median of its per-round ratios (see [`run`]).
//! * `copy_crypto4k_gbps` / `floor4k_ratio`: the 4 KiB floor, the transmit
//!   copy plus seal and open over 64 rotating frames and nothing else — the
//!   ceiling of `loop4k_ratio` for an engine that copies the payload into
//!   the frame once (see below why it must).
//! * `loop4k_gbps`: the 4 KiB loop without PSP (the engines and the
//!   transmit copy, no crypto), for the budget below.
//! * The budget of each bar, per transaction, from the means of the run:
//!   `*_budget_ns` is what the bar leaves for everything but the crypto
//!   bound (bound time × (1 / bar − 1)); `*_plain_ns` is the same loop
//!   without PSP (the engines, the copies, the loopback); `*_psp_extra_ns`
//!   is what the PSP loop takes beyond its plain loop and its bound (the
//!   ACKs' seals and opens, the PSP header, SA and replay work outside the
//!   bound's seal and open, and the crypto's cache misses in a loop). A bar
//!   is met when `plain + extra ≤ budget`.
//!
//! # What the loop does per transaction, and what it does not
//!
//! * Every header is built and parsed: Ethernet, IPv4 (its header checksum
//!   computed on transmit and **verified** on receive: `ChecksumChecks::ALL`,
//!   the software default, no NIC offload assumed), UDP (checksum 0, as PSP
//!   senders use), PSP, Falcon. With PSP on, every data packet and every ACK
//!   is sealed and opened with its SPI, PCID and replay checks.
//! * The engine copies the payload once, from the ULP's vector (the push's
//!   data source) into the frame on transmit (the in-place seal needs the
//!   plaintext kept for retransmission). On receive, every push reaches the
//!   target ULP in the opened frame's own buffer
//!   (`falcon_core::transaction::payload`); the ULP releases it
//!   (`Engine::release`) and the next receive burst returns the frame to
//!   the port.
//! * The initiator ULP owns `depth` payload vectors, filled once: each
//!   completion hands the submitted vector back untouched
//!   (`Completion::source`) and the next push reuses it, as a ULP with a
//!   fixed set of send buffers does. A fresh vector filled for every push
//!   would be ULP work (an allocation and, at 4 KiB, a copy and page
//!   faults), not transport work. The clock is read at each engine's
//!   receive and transmit (see `EngineLoop::run`).

use std::time::{Duration, Instant};

use falcon_core::engine::{connect, ConnectionHandle, Engine, EngineConfig, PairSpec, PspConfig};
use falcon_core::port::FrameBuf;
use falcon_core::testing::{Loopback, LoopbackConfig, LoopbackPort};
use falcon_core::time::Timestamp;
use falcon_core::transaction::{
    Completion, CompletionStatus, Op, Transaction, TransactionKind, UlpEvent,
};
use falcon_core::wire::EthernetAddress;
use psp::{Backend, MasterKey, MasterKeys, SaDatabase, TxSa, TxSaConfig, Version, ICV_LEN};
use serde::Serialize;

use super::slices::{median, range, ratios, Rates};
use crate::error::{AppError, Result};

/// Push Data header bytes in front of the payload (OCP Falcon 0.9 §7.5).
const PUSH_HEADER: usize = 28;
/// How the four engine loops run (`bench core --depth`, `--burst`,
/// `--tx-burst`, `--cache-batch`), reported with their figures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Shape {
    /// Push transactions the initiator ULP keeps outstanding; also the
    /// number of ULP payload vectors it owns, and of frames in the 4 KiB
    /// floor.
    pub depth: usize,
    /// Frames each engine takes from its port per receive burst.
    pub burst: usize,
    /// Frames each engine builds per transmit burst, the clock read before
    /// each (`Engine::transmit_burst`).
    pub tx_burst: usize,
    /// The loopback's per-end buffer cache batch
    /// (`LoopbackConfig::cache_batch`).
    pub cache_batch: usize,
}

impl Shape {
    /// `bench core`'s defaults: 64 outstanding, receive bursts of 32,
    /// transmit bursts of 8, the loopback's default cache batch. Every
    /// figure in `PERFORMANCE.md` and the README not marked otherwise is of
    /// this shape; those before "Transmit bursts of a bounded length" were
    /// measured with transmit bursts of unbounded length.
    pub const DEFAULT: Shape = Shape {
        depth: 64,
        burst: 32,
        tx_burst: 8,
        cache_batch: LoopbackConfig::DEFAULT_CACHE_BATCH,
    };
}

impl Default for Shape {
    fn default() -> Self {
        Shape::DEFAULT
    }
}
/// Each measurement's time is cut into this many slices, run round-robin
/// with the other measurements (see [`run`]).
pub const ROUNDS: usize = 10;
/// DESIGN §8: `push64_psp_mops` ≥ this × `crypto64_mops`.
const PUSH64_BAR: f64 = 0.5;
/// DESIGN §8: `loop4k_psp_gbps` ≥ this × `crypto4k_gbps`.
const LOOP4K_BAR: f64 = 0.75;

/// How this binary was built ([`LoopReport::build`]): `scripts/build-pgo.sh`
/// sets `FALCON_PGO` for its profile-guided build.
const BUILD: &str = if cfg!(debug_assertions) {
    "debug"
} else if option_env!("FALCON_PGO").is_some() {
    "release+pgo"
} else {
    "release"
};

#[derive(Debug, Serialize, Default)]
pub struct LoopReport {
    pub push64_mops: f64,
    pub push64_psp_mops: f64,
    pub loop4k_psp_gbps: f64,
    pub crypto4k_gbps: f64,
    pub crypto64_mops: f64,
    /// The AES-GCM code `ring` runs on this CPU for the engines and the
    /// crypto bounds alike ([`Backend::aes_gcm_path`]): `vaes-avx2`,
    /// `aes-ni-avx`, ... Both bars are ratios against crypto, so they
    /// depend on it (`dataplane/app/PERFORMANCE.md`).
    pub aes_gcm_path: &'static str,
    /// How this binary was built: `release`, `release+pgo`
    /// (`scripts/build-pgo.sh`) or `debug`. The engines' share of each
    /// loop depends on it (`dataplane/app/PERFORMANCE.md`); the crypto
    /// bounds, `ring`'s assembly, barely do.
    pub build: &'static str,
    /// How the engine loops ran.
    pub shape: Shape,
    /// `loop4k_psp_gbps / crypto4k_gbps`, the median over the rounds of the
    /// ratio of the two slices run side by side; bar 0.75.
    pub loop4k_ratio: f64,
    /// `push64_psp_mops / crypto64_mops`, the same way; bar 0.5.
    pub push64_ratio: f64,
    /// Lowest and highest per-round `loop4k_ratio`: the spread host noise
    /// left.
    pub loop4k_ratio_range: [f64; 2],
    /// Lowest and highest per-round `push64_ratio`.
    pub push64_ratio_range: [f64; 2],
    /// Rounds the ratios are the median of.
    pub rounds: usize,
    pub loop4k_meets_bar: bool,
    pub push64_meets_bar: bool,
    /// The 4 KiB floor: the payload copied from one of 64 ULP buffers into
    /// one of 64 frames, then sealed and opened there — what the engine
    /// must do per 4 KiB push at least (the in-place seal needs the
    /// plaintext in the frame and retransmission needs it kept), with
    /// nothing else.
    pub copy_crypto4k_gbps: f64,
    /// `copy_crypto4k_gbps / crypto4k_gbps` (median over the rounds): the
    /// highest `loop4k_ratio` an engine with that one copy could reach if
    /// all its other work were free.
    pub floor4k_ratio: f64,
    /// 4 KiB push goodput through the same loop without PSP.
    pub loop4k_gbps: f64,
    /// Nanoseconds per transaction the 64-byte bar leaves for everything
    /// but one seal and one open: `1e3 / crypto64_mops × (1 / 0.5 − 1)`.
    pub push64_budget_ns: f64,
    /// Nanoseconds per 64-byte transaction without PSP: `1e3 / push64_mops`.
    pub push64_plain_ns: f64,
    /// Nanoseconds per 64-byte PSP transaction beyond the plain loop and the
    /// crypto bound (negative if the two overlap).
    pub push64_psp_extra_ns: f64,
    /// The same three for the 4 KiB bar (0.75).
    pub loop4k_budget_ns: f64,
    pub loop4k_plain_ns: f64,
    pub loop4k_psp_extra_ns: f64,
    /// Retransmissions and drops in the four engine runs. 0 expected at
    /// the default shape: the loop loses nothing. A `--burst` above the
    /// receiver's 128-PSN data window lets the target take more Push Data
    /// in one burst than its window holds before its ULP acknowledges any:
    /// those are counted `out_of_window` drops, which the initiator
    /// retransmits.
    pub loop_retransmissions: u64,
    pub loop_drops: u64,
    /// How each engine loop ran: its turns, ACKs and its initiator's Swift.
    pub loops: Loops,
}

/// [`LoopRun`] of each of the four engine loops.
#[derive(Debug, Serialize, Default)]
pub struct Loops {
    pub push64: LoopRun,
    pub push64_psp: LoopRun,
    pub loop4k: LoopRun,
    pub loop4k_psp: LoopRun,
}

/// How one engine loop ran. A frame's t1 is the time read before its
/// transmit burst, so the rest of the burst's building counts in the RTT
/// the initiator's Swift measures (both ends share the core). With long
/// bursts (`--tx-burst`) Swift may then hold the PSP loops' fcwnd below the
/// outstanding transactions, and the loop needs more turns, each with one
/// ACK, per transaction (`dataplane/app/PERFORMANCE.md`).
#[derive(Debug, Serialize, Default)]
pub struct LoopRun {
    /// Loop turns per completed transaction in the measured slices
    /// (64 outstanding: 2/64 = 0.03125 when each turn sends 32).
    pub turns_per_transaction: f64,
    /// ACKs (BACK, EACK, NACK) the target sent per completed transaction in
    /// the measured slices.
    pub acks_per_transaction: f64,
    /// The initiator's mean RTT sample, µs (the whole run, warm-up
    /// included).
    pub rtt_mean_us: f64,
    /// The initiator's lowest and highest fcwnd, packets (the whole run).
    pub fcwnd_range: [f64; 2],
}

/// Runs every engine-level measurement, `each` long apiece.
///
/// The seven measurements do not run one after the other: each one's time is
/// cut into [`ROUNDS`] slices and every round runs one slice of each (in
/// reverse order every other round), so a loop and the crypto bound it is
/// divided by always ran within a fraction of a second of each other. Each
/// ratio is the median of its per-round ratios. On a shared 2-core VM the
/// crypto bound alone moved by up to 25 % between runs seconds apart
/// (17.7–23.4 Gbit/s at 4 KiB), which made ratios of back-to-back
/// measurements swing by ±0.1 run to run; side by side, both sides of a
/// ratio see the same host.
pub fn run(each: Duration, shape: Shape) -> Result<LoopReport> {
    let slice = each / ROUNDS as u32;
    let mut push64 = EngineLoop::new(64, false, shape)?;
    let mut push64_psp = EngineLoop::new(64, true, shape)?;
    let mut loop4k = EngineLoop::new(4096, true, shape)?;
    let mut loop4k_plain = EngineLoop::new(4096, false, shape)?;
    let mut crypto64 = CryptoBound::new(64)?;
    let mut crypto4k = CryptoBound::new(4096)?;
    let mut floor4k = CopyCryptoFloor::new(4096, shape.depth)?;
    {
        let mut runners: [&mut dyn Runner; 7] = [
            &mut push64,
            &mut push64_psp,
            &mut crypto64,
            &mut loop4k_plain,
            &mut loop4k,
            &mut crypto4k,
            &mut floor4k,
        ];
        // Warm-up: caches, buffer pools, the RUE's windows; not counted.
        for runner in runners.iter_mut() {
            runner.run_for(slice / 2)?;
            runner.rates().clear();
        }
        for round in 0..ROUNDS {
            if round % 2 == 1 {
                runners.reverse();
            }
            for runner in runners.iter_mut() {
                runner.run_for(slice)?;
            }
            if round % 2 == 1 {
                runners.reverse();
            }
        }
    }
    let push64_ratios = ratios(&push64_psp.rates, &crypto64.rates);
    let loop4k_ratios = ratios(&loop4k.rates, &crypto4k.rates);
    let mut r = LoopReport {
        push64_mops: push64.rates.mean() / 1e6,
        push64_psp_mops: push64_psp.rates.mean() / 1e6,
        loop4k_psp_gbps: loop4k.rates.mean() * 4096.0 * 8.0 / 1e9,
        crypto4k_gbps: crypto4k.rates.mean() * 4096.0 * 8.0 / 1e9,
        crypto64_mops: crypto64.rates.mean() / 1e6,
        aes_gcm_path: Backend::Ring.aes_gcm_path(),
        build: BUILD,
        shape,
        copy_crypto4k_gbps: floor4k.rates.mean() * 4096.0 * 8.0 / 1e9,
        push64_ratio: median(&push64_ratios),
        loop4k_ratio: median(&loop4k_ratios),
        push64_ratio_range: range(&push64_ratios),
        loop4k_ratio_range: range(&loop4k_ratios),
        floor4k_ratio: median(&ratios(&floor4k.rates, &crypto4k.rates)),
        loop4k_gbps: loop4k_plain.rates.mean() * 4096.0 * 8.0 / 1e9,
        rounds: ROUNDS,
        ..LoopReport::default()
    };
    let ns = |rates: &Rates| 1e9 / rates.mean().max(f64::MIN_POSITIVE);
    let budget = |bound: f64, plain: f64, psp: f64, bar: f64| {
        [bound * (1.0 / bar - 1.0), plain, psp - plain - bound]
    };
    [r.push64_budget_ns, r.push64_plain_ns, r.push64_psp_extra_ns] = budget(
        ns(&crypto64.rates),
        ns(&push64.rates),
        ns(&push64_psp.rates),
        PUSH64_BAR,
    );
    [r.loop4k_budget_ns, r.loop4k_plain_ns, r.loop4k_psp_extra_ns] = budget(
        ns(&crypto4k.rates),
        ns(&loop4k_plain.rates),
        ns(&loop4k.rates),
        LOOP4K_BAR,
    );
    let stats = [
        push64.stats(),
        push64_psp.stats(),
        loop4k_plain.stats(),
        loop4k.stats(),
    ];
    r.loops = Loops {
        push64: push64.run_stats(),
        push64_psp: push64_psp.run_stats(),
        loop4k: loop4k_plain.run_stats(),
        loop4k_psp: loop4k.run_stats(),
    };
    r.loop_retransmissions = stats.iter().map(|s| s.0).sum();
    r.loop_drops = stats.iter().map(|s| s.1).sum();
    r.loop4k_meets_bar = r.loop4k_ratio >= LOOP4K_BAR;
    r.push64_meets_bar = r.push64_ratio >= PUSH64_BAR;
    Ok(r)
}

/// One measurement that can run in slices.
trait Runner {
    /// Runs for about `duration`, recording the slice's rate.
    fn run_for(&mut self, duration: Duration) -> Result<()>;
    /// The rates recorded so far.
    fn rates(&mut self) -> &mut Rates;
}

fn failed(what: &str, e: &dyn std::fmt::Display) -> AppError {
    AppError::Failed(format!("bench core: {what}: {e}"))
}

/// Push transactions of `size` bytes through two engines, slice by slice.
///
/// The engines' clock is the loop's own running time: it stands still
/// between slices, so the other measurements' slices look to the engines
/// like nothing at all, not like a stall that fires retransmit timers.
struct EngineLoop {
    size: usize,
    shape: Shape,
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
    /// The initiator ULP's own payload vectors: each completion hands the
    /// submitted vector back untouched and the next push reuses it, as a
    /// ULP with a fixed set of send buffers does.
    free: Vec<Vec<u8>>,
    /// Running time of the slices before the current one.
    ran: Duration,
    rates: Rates,
}

impl EngineLoop {
    fn new(size: usize, with_psp: bool, shape: Shape) -> Result<Self> {
        let keys = |k: u8| MasterKeys {
            k0: MasterKey::new([k; 32]),
            k1: MasterKey::new([k ^ 0xff; 32]),
        };
        let now = Self::clock(Duration::ZERO);
        let config = |ip: &str, mac: u8, k: u8| -> Result<EngineConfig> {
            Ok(EngineConfig {
                local_ip: ip.parse().map_err(|e| failed("address", &e))?,
                local_mac: EthernetAddress([2, 0, 0, 0, 0, mac]),
                psp: with_psp.then(|| PspConfig::new(keys(k))),
                ..EngineConfig::default()
            })
        };
        let mut a =
            Engine::new(config("10.0.0.1", 1, 1)?, now).map_err(|e| failed("engine", &e))?;
        let mut b =
            Engine::new(config("10.0.0.2", 2, 3)?, now).map_err(|e| failed("engine", &e))?;
        let (ca, cb) = connect(now, &mut a, &mut b, &PairSpec::default())
            .map_err(|e| failed("connect", &e))?;
        let (pa, pb) = Loopback::pair(LoopbackConfig {
            one_way_delay: Duration::ZERO,
            cache_batch: shape.cache_batch,
            ..LoopbackConfig::default()
        });
        Ok(EngineLoop {
            size,
            shape,
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
            free: (0..shape.depth).map(|_| vec![0xA5u8; size]).collect(),
            ran: Duration::ZERO,
            rates: Rates::default(),
        })
    }

    fn clock(ran: Duration) -> Timestamp {
        Timestamp::from_nanos(1_000_000_000 + ran.as_nanos() as u64)
    }

    /// Turns and ACKs per transaction in the measured slices; the
    /// initiator's RTT and fcwnd over the whole run.
    fn run_stats(&self) -> LoopRun {
        let per = |n: u64| n as f64 / self.rates.ops.max(1) as f64;
        let a = self.a.stats();
        let rtt_mean = a.rtt_sum.as_secs_f64() / a.rtt_samples.max(1) as f64;
        LoopRun {
            turns_per_transaction: per(self.rates.turns),
            acks_per_transaction: per(self.rates.acks),
            rtt_mean_us: rtt_mean * 1e6,
            fcwnd_range: [a.fcwnd_min, a.fcwnd_max],
        }
    }

    /// Retransmissions and drops of both engines so far.
    fn stats(&self) -> (u64, u64) {
        let (sa, sb) = (self.a.stats(), self.b.stats());
        (
            sa.retransmissions + sb.retransmissions,
            sa.drops.total() + sb.drops.total(),
        )
    }
}

impl Runner for EngineLoop {
    fn rates(&mut self) -> &mut Rates {
        &mut self.rates
    }

    fn run_for(&mut self, duration: Duration) -> Result<()> {
        self.run(Until::Elapsed(duration))
    }
}

/// The engines' clock advance per loop turn in a `--profile` run.
const VIRTUAL_TURN: Duration = Duration::from_nanos(100);

/// When an [`EngineLoop`] run stops.
#[derive(Debug, Clone, Copy)]
enum Until {
    /// After this much running time (the interleaved slices).
    Elapsed(Duration),
    /// After this many completions (`--profile`: a fixed amount of work,
    /// so instruction counts repeat under callgrind).
    Completed(u64),
}

impl EngineLoop {
    fn run(&mut self, until: Until) -> Result<()> {
        let EngineLoop {
            size,
            shape,
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
        let size = *size;
        let Shape {
            depth,
            burst,
            tx_burst,
            ..
        } = *shape;
        let timed = matches!(until, Until::Elapsed(_));
        let start = Instant::now();
        let mut completed = 0u64;
        let mut turns = 0u64;
        let acks_before = b.stats().tx_acks;
        loop {
            let elapsed = start.elapsed();
            let done = match until {
                Until::Elapsed(duration) => elapsed >= duration,
                Until::Completed(n) => completed >= n,
            };
            if done {
                if timed {
                    *ran += elapsed;
                }
                rates.record(completed, elapsed);
                rates.turns += turns;
                rates.acks += b.stats().tx_acks - acks_before;
                return Ok(());
            }
            turns += 1;
            let mut now = match until {
                Until::Elapsed(_) => Self::clock(*ran + elapsed),
                // Virtual time, a fixed step a loop turn: the same work
                // however slowly the host (or valgrind) runs it, where
                // wall time would fire retransmit timers under valgrind.
                Until::Completed(_) => {
                    *ran += VIRTUAL_TURN;
                    Self::clock(*ran)
                }
            };
            while *outstanding < depth {
                *tag += 1;
                // Empty only if a completion came back without its source
                // (a retransmission may still have needed it): then a fresh
                // one.
                let payload = free.pop().unwrap_or_else(|| vec![0xA5u8; size]);
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
                // The clock again at each engine's receive and transmit
                // (timed runs): both engines share this core, and one read
                // per turn put the peer's whole processing into every RTT as
                // fabric delay, where Swift shrank fcwnd to ~1.3 packets
                // (64-byte PSP loop) and ~2.6 (4 KiB) against this loop's 64
                // outstanding. Read this way, a receiver's own work falls
                // between its t2 and t3 and is subtracted, as between hosts.
                if timed {
                    now = Self::clock(*ran + start.elapsed());
                }
                engine.receive_burst(now, port, rx, burst);
                if engine.poll_timeout().is_some_and(|t| t <= now) {
                    engine.handle_timeout(now);
                }
                while let Some(event) = engine.poll_event() {
                    match event {
                        UlpEvent::Request(r) => {
                            if r.kind == TransactionKind::Push {
                                engine
                                    .ulp_ack(now, conn, r.rsn)
                                    .map_err(|e| failed("ULP ACK", &format!("{e:?}")))?;
                            }
                            engine.release(r.payload);
                        }
                        // Only the fields the ULP reads, moved out one by one:
                        // the whole `Completion` bound to a name would be
                        // copied to the stack first.
                        UlpEvent::Completion(Completion {
                            status,
                            tag,
                            data,
                            source,
                            ..
                        }) => {
                            if status != CompletionStatus::Ack {
                                return Err(AppError::Failed(format!(
                                    "bench core: transaction {tag} {status:?}"
                                )));
                            }
                            *outstanding -= 1;
                            completed += 1;
                            free.extend(source);
                            engine.release(data);
                        }
                        UlpEvent::ConnectionError { fault, .. } => {
                            return Err(AppError::Failed(format!(
                                "bench core: connection error {fault:?}"
                            )));
                        }
                        UlpEvent::Xoff { .. } | UlpEvent::Xon { .. } => {}
                    }
                }
                // Bursts of `tx_burst`, the clock read before each (timed
                // runs): a frame's t1 is then at most one burst's building
                // time before it leaves (`Engine::transmit_burst`).
                let clock = || {
                    if timed {
                        Self::clock(*ran + start.elapsed())
                    } else {
                        now
                    }
                };
                engine.transmit_bursts(clock, port, tx, tx_burst);
            }
        }
    }
}

/// One engine loop of `bench core` on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Profile {
    /// 64-byte pushes, no PSP (`push64_mops`).
    Push64,
    /// 64-byte pushes with PSP (`push64_psp_mops`).
    Push64Psp,
    /// 4 KiB pushes with PSP (`loop4k_psp_gbps`).
    Loop4kPsp,
    /// 4 KiB pushes without PSP (`loop4k_gbps`).
    Loop4k,
    /// The 64-byte crypto bound alone: seal + open pairs (`crypto64_mops`).
    Crypto64,
    /// The 4 KiB crypto bound alone: seal + open pairs (`crypto4k_gbps`).
    Crypto4k,
    /// The 4 KiB floor alone: copy + seal + open (`copy_crypto4k_gbps`).
    Floor4k,
}

/// What `bench core --profile` measured.
#[derive(Debug, Serialize)]
pub struct ProfileReport {
    pub profile: Profile,
    /// Transactions completed; seal + open pairs for the crypto-only
    /// profiles.
    pub transactions: u64,
    pub seconds: f64,
    /// Millions of `transactions` per second.
    pub mops: f64,
    pub retransmissions: u64,
    pub drops: u64,
    /// How this binary was built ([`LoopReport::build`]).
    pub build: &'static str,
    /// The AES-GCM code `ring` runs on this CPU ([`LoopReport::aes_gcm_path`]):
    /// the PSP profiles' instruction counts depend on it.
    pub aes_gcm_path: &'static str,
    /// How the loop ran (the engine profiles; the floor takes its depth).
    pub shape: Shape,
}

/// Runs one loop for `transactions` completions (the ACK that reaches the
/// number may complete up to a burst more) after a warm-up of a tenth of
/// them (at least 1 000), in virtual time: the same work every time, for
/// `valgrind --tool=callgrind` on the shipped binary (instruction counts
/// of the test binary's copy of the loop move with the test code around
/// it).
pub fn profile(profile: Profile, transactions: u64, shape: Shape) -> Result<ProfileReport> {
    let warm_up = (transactions / 10).max(1_000);
    let (size, psp) = match profile {
        Profile::Push64 => (64, false),
        Profile::Push64Psp => (64, true),
        Profile::Loop4kPsp => (4096, true),
        Profile::Loop4k => (4096, false),
        Profile::Crypto64 => {
            return bound_profile(profile, CryptoBound::new(64)?, warm_up, transactions, shape)
        }
        Profile::Crypto4k => {
            return bound_profile(
                profile,
                CryptoBound::new(4096)?,
                warm_up,
                transactions,
                shape,
            )
        }
        Profile::Floor4k => {
            let floor = CopyCryptoFloor::new(4096, shape.depth)?;
            return bound_profile(profile, floor, warm_up, transactions, shape);
        }
    };
    let mut run = EngineLoop::new(size, psp, shape)?;
    run.run(Until::Completed(warm_up))?;
    run.rates.clear();
    run.run(Until::Completed(transactions))?;
    let (retransmissions, drops) = run.stats();
    Ok(ProfileReport {
        profile,
        transactions: run.rates.ops,
        seconds: run.rates.secs,
        mops: run.rates.mean() / 1e6,
        retransmissions,
        drops,
        build: BUILD,
        aes_gcm_path: Backend::Ring.aes_gcm_path(),
        shape,
    })
}

/// A bound or the floor alone, in whole batches (64 pairs): at least
/// `transactions` pairs after `warm_up`. Side by side with a loop's
/// profile, `perf` shows whether the loop's seals and opens cost what
/// the bound's do.
fn bound_profile(
    profile: Profile,
    mut bound: impl Batches,
    warm_up: u64,
    transactions: u64,
    shape: Shape,
) -> Result<ProfileReport> {
    let mut done = 0;
    while done < warm_up {
        done += bound.batch()?;
    }
    let mut pairs = 0;
    let start = Instant::now();
    while pairs < transactions {
        pairs += bound.batch()?;
    }
    let seconds = start.elapsed().as_secs_f64().max(1e-9);
    Ok(ProfileReport {
        profile,
        transactions: pairs,
        seconds,
        mops: pairs as f64 / seconds / 1e6,
        retransmissions: 0,
        drops: 0,
        build: BUILD,
        aes_gcm_path: Backend::Ring.aes_gcm_path(),
        shape,
    })
}

/// The crypto-only runners' unit of work.
trait Batches {
    /// Runs one batch of seal + open pairs and returns how many.
    fn batch(&mut self) -> Result<u64>;
    /// The rates of the timed slices.
    fn batch_rates(&mut self) -> &mut Rates;
}

/// A crypto-only runner's timed slice: whole batches until `duration`.
impl<B: Batches> Runner for B {
    fn rates(&mut self) -> &mut Rates {
        self.batch_rates()
    }

    fn run_for(&mut self, duration: Duration) -> Result<()> {
        let mut pairs = 0u64;
        let start = Instant::now();
        while start.elapsed() < duration {
            pairs += self.batch()?;
        }
        self.batch_rates().record(pairs, start.elapsed());
        Ok(())
    }
}

pub fn print_profile(r: &ProfileReport) {
    let name = serde_json::to_value(r.profile)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    match r.profile {
        Profile::Crypto64 | Profile::Crypto4k | Profile::Floor4k => println!(
            "{name}: {} seal + open pairs in {:.3} s, {:.3} M pairs/s ({:.1} ns a pair)",
            r.transactions,
            r.seconds,
            r.mops,
            1e3 / r.mops.max(f64::MIN_POSITIVE)
        ),
        _ => println!(
            "{name}: {} transactions in {:.3} s, {:.3} Mops ({} retransmissions, {} drops; {} outstanding, receive bursts of {}, transmit bursts of {}, cache batch {})",
            r.transactions,
            r.seconds,
            r.mops,
            r.retransmissions,
            r.drops,
            r.shape.depth,
            r.shape.burst,
            r.shape.tx_burst,
            r.shape.cache_batch
        ),
    }
}

/// The crypto bounds' SAs, as the engine's: a receive SA database and the
/// TX SA of one of its SPIs (`ring`, AES-GCM-128).
fn crypto_sas() -> Result<(SaDatabase, TxSa)> {
    let keys = MasterKeys {
        k0: MasterKey::new([5; 32]),
        k1: MasterKey::new([6; 32]),
    };
    let mut db = SaDatabase::new(Backend::Ring, keys, 16);
    let (spi, key) = db
        .allocate_spi(Version::Aes128Gcm)
        .map_err(|e| AppError::Failed(format!("SPI: {e}")))?;
    let tx = TxSa::new(Backend::Ring, &key, TxSaConfig::falcon(spi, None))
        .map_err(|e| AppError::Failed(format!("TX SA: {e}")))?;
    Ok((db, tx))
}

/// Seal + open pairs of one Push Data packet of `size` payload bytes, PSP
/// as the engine does it (TX SA with IV clock; SA database).
struct CryptoBound {
    db: SaDatabase,
    tx: TxSa,
    buf: Vec<u8>,
    falcon_len: usize,
    now_ps: u64,
    rates: Rates,
}

impl CryptoBound {
    fn new(size: usize) -> Result<Self> {
        let (db, tx) = crypto_sas()?;
        let falcon_len = PUSH_HEADER + size;
        let buf = vec![0x3Cu8; tx.header_len() + falcon_len + ICV_LEN];
        Ok(CryptoBound {
            db,
            tx,
            buf,
            falcon_len,
            now_ps: 1_000_000_000_000,
            rates: Rates::default(),
        })
    }
}

impl Batches for CryptoBound {
    /// 64 seal + open pairs.
    #[inline]
    fn batch(&mut self) -> Result<u64> {
        let len = self.buf.len();
        for _ in 0..64 {
            self.now_ps += 1000;
            self.tx
                .seal(self.now_ps, &mut self.buf, 0, self.falcon_len)
                .map_err(|e| AppError::Failed(format!("seal: {e}")))?;
            self.db
                .open(&mut self.buf, 0, len)
                .map_err(|e| AppError::Failed(format!("open: {e}")))?;
        }
        Ok(64)
    }

    fn batch_rates(&mut self) -> &mut Rates {
        &mut self.rates
    }
}

/// Copy + seal + open of `size`-byte Push Data payloads: each round copies
/// ULP buffer k into frame k (k over `depth` of each, as the engine's
/// transmit path does with the outstanding transactions), seals the frame
/// and opens it.
struct CopyCryptoFloor {
    db: SaDatabase,
    tx: TxSa,
    ulp: Vec<Vec<u8>>,
    frames: Vec<Vec<u8>>,
    size: usize,
    now_ps: u64,
    rates: Rates,
}

impl CopyCryptoFloor {
    fn new(size: usize, depth: usize) -> Result<Self> {
        let (db, tx) = crypto_sas()?;
        let len = tx.header_len() + PUSH_HEADER + size + ICV_LEN;
        let depth = depth.max(1);
        Ok(CopyCryptoFloor {
            db,
            tx,
            ulp: (0..depth).map(|k| vec![k as u8; size]).collect(),
            frames: (0..depth).map(|_| vec![0x3Cu8; len]).collect(),
            size,
            now_ps: 1_000_000_000_000,
            rates: Rates::default(),
        })
    }
}

impl Batches for CopyCryptoFloor {
    /// One round: `depth` copies, seals and opens.
    #[inline]
    fn batch(&mut self) -> Result<u64> {
        let size = self.size;
        let falcon_len = PUSH_HEADER + size;
        let payload_at = self.tx.header_len() + PUSH_HEADER;
        for (frame, payload) in self.frames.iter_mut().zip(&self.ulp) {
            self.now_ps += 1000;
            let len = frame.len();
            frame[payload_at..payload_at + size].copy_from_slice(payload);
            self.tx
                .seal(self.now_ps, frame, 0, falcon_len)
                .map_err(|e| AppError::Failed(format!("seal: {e}")))?;
            self.db
                .open(frame, 0, len)
                .map_err(|e| AppError::Failed(format!("open: {e}")))?;
        }
        Ok(self.frames.len() as u64)
    }

    fn batch_rates(&mut self) -> &mut Rates {
        &mut self.rates
    }
}

pub fn print_text(r: &LoopReport) {
    println!(
        "Two engines on one core over the in-process loopback (push transactions; AES-GCM: ring on {}; {} build)",
        r.aes_gcm_path, r.build
    );
    println!(
        "  {} outstanding, receive bursts of {}, transmit bursts of {}, loopback cache batch {} (--depth, --burst, --tx-burst, --cache-batch)",
        r.shape.depth, r.shape.burst, r.shape.tx_burst, r.shape.cache_batch
    );
    println!("  push64        {:8.3} Mops  (no PSP)", r.push64_mops);
    println!(
        "  push64 + PSP  {:8.3} Mops  vs crypto-only {:.3} Mops: ratio {:.3} [{:.3}–{:.3}] (bar {PUSH64_BAR}: {})",
        r.push64_psp_mops,
        r.crypto64_mops,
        r.push64_ratio,
        r.push64_ratio_range[0],
        r.push64_ratio_range[1],
        if r.push64_meets_bar { "met" } else { "NOT met" }
    );
    println!(
        "  4 KiB + PSP   {:8.2} Gbit/s vs crypto-only {:.2} Gbit/s: ratio {:.3} [{:.3}–{:.3}] (bar {LOOP4K_BAR}: {})",
        r.loop4k_psp_gbps,
        r.crypto4k_gbps,
        r.loop4k_ratio,
        r.loop4k_ratio_range[0],
        r.loop4k_ratio_range[1],
        if r.loop4k_meets_bar { "met" } else { "NOT met" }
    );
    println!(
        "  4 KiB floor   {:8.2} Gbit/s copy + seal + open over {} frames: ratio {:.3} (the most an engine with one transmit copy can reach)",
        r.copy_crypto4k_gbps, r.shape.depth, r.floor4k_ratio
    );
    println!("  4 KiB         {:8.2} Gbit/s  (no PSP)", r.loop4k_gbps);
    println!("  per transaction, what each bar leaves beside the crypto bound, and what is spent:");
    for (name, budget, plain, extra) in [
        (
            "push64",
            r.push64_budget_ns,
            r.push64_plain_ns,
            r.push64_psp_extra_ns,
        ),
        (
            "4 KiB ",
            r.loop4k_budget_ns,
            r.loop4k_plain_ns,
            r.loop4k_psp_extra_ns,
        ),
    ] {
        println!(
            "    {name}  budget {budget:6.0} ns: loop without PSP {plain:6.0} ns + PSP beyond the bound {extra:5.0} ns = {:6.0} ns",
            plain + extra
        );
    }
    println!(
        "  per loop: turns and target ACKs per transaction; the initiator's RTT and fcwnd (Swift):"
    );
    for (name, l) in [
        ("push64      ", &r.loops.push64),
        ("push64 + PSP", &r.loops.push64_psp),
        ("4 KiB       ", &r.loops.loop4k),
        ("4 KiB + PSP ", &r.loops.loop4k_psp),
    ] {
        println!(
            "    {name}  {:.4} turns {:.4} ACKs  RTT {:6.1} µs  fcwnd {:.1}–{:.1}",
            l.turns_per_transaction,
            l.acks_per_transaction,
            l.rtt_mean_us,
            l.fcwnd_range[0],
            l.fcwnd_range[1]
        );
    }
    println!(
        "  ratios: median of {} rounds run side by side [lowest–highest round]",
        r.rounds
    );
    println!(
        "  {} spurious retransmissions, {} drops in the engine runs",
        r.loop_retransmissions, r.loop_drops
    );
}
