//! `falcon bench scale`: one engine pair with N established connections,
//! what each connection costs in memory and what the op rate keeps of the
//! rate at 1 000 connections (DESIGN §8, "scale": 1 M connections in
//! ≤ 2 GiB, op rate at 1 M ≥ 0.7 of the rate at 1 K).
//!
//! Layer: application (a benchmark). Two engines, an initiator and a
//! target, each with N connections to the other (PSP on, an SA pair per
//! connection; Swift run inline; the engines' defaults otherwise), over the
//! in-process loopback on one core. The initiator ULP keeps `--depth`
//! 64-byte push transactions outstanding, each on a connection picked at
//! random (seeded, uniform over the N), so at 1 M nearly every transaction
//! meets a connection no cache holds; the target ULP acknowledges each
//! push at once. A transaction counts when the initiator sees its
//! completion.
//!
//! * `bytes_per_connection`: heap bytes live after setting up the engine
//!   with its N connections minus those live before it was built, over N,
//!   from the binary's counting allocator ([`crate::memory`]); per engine,
//!   the larger of the two (they differ by little: each side of a
//!   connection holds an initiator and a target). Everything an engine
//!   allocates in `Engine::new` for `max_connections = N` (slots, scheduler
//!   rings, the RUE state table, the SA database) counts, as does every
//!   connection's own state (delivery windows, transaction slots, SA
//!   contexts, frame template, CID table chunks). Bytes asked of malloc:
//!   its own per-block overhead shows in `rss_bytes_per_connection`.
//! * `ops_per_sec` at N and `ops_per_sec_1k` at 1 000 connections run in
//!   the same process, their time cut into [`ROUNDS`] slices run in turn
//!   (as `bench core` does), and `ratio_to_1k` is the median of the
//!   per-round ratios.

use std::time::{Duration, Instant};

use falcon_core::engine::{
    ConnectionConfig, ConnectionHandle, ConnectionPsp, Engine, EngineConfig, InitialSequence,
    PspConfig,
};
use falcon_core::ids::{ConnectionId, DestinationFunction};
use falcon_core::port::FrameBuf;
use falcon_core::testing::{Loopback, LoopbackConfig, LoopbackPort};
use falcon_core::time::Timestamp;
use falcon_core::transaction::{Completion, CompletionStatus, Op, Transaction, UlpEvent};
use falcon_core::wire::EthernetAddress;
use psp::{MasterKey, MasterKeys, Version};
use serde::Serialize;

use super::slices::{median, range, ratios, Rates};
use crate::cli::BenchScaleArgs;
use crate::error::{AppError, Result};
use crate::memory::{available_bytes, resident_bytes, Heap, HeapDelta};

/// DESIGN §8: 1 M connections in ≤ 2 GiB, per connection (2^31 / 10^6).
pub const BAR_BYTES_PER_CONNECTION: f64 = 2_147.0;
/// DESIGN §8: op rate at 1 M connections ≥ this × the rate at 1 K.
pub const BAR_RATIO: f64 = 0.7;
/// The reference point of `ratio_to_1k`.
pub const REFERENCE_CONNECTIONS: u32 = 1_000;
/// Push payload bytes.
pub const PUSH_BYTES: usize = 64;
/// Slices each measurement's time is cut into.
pub const ROUNDS: usize = 10;
/// Frames an engine takes from its port per receive burst.
const RX_BURST: usize = 32;
/// Frames an engine builds per transmit burst.
const TX_BURST: usize = 8;

#[derive(Debug, Serialize)]
pub struct Report {
    /// Connections on each engine.
    pub connections: u32,
    /// Heap bytes per connection per engine (the larger engine's), from
    /// the allocator: the engine built for N connections plus its N
    /// connections, over N.
    pub bytes_per_connection: f64,
    /// The initiator engine's bytes per connection.
    pub initiator_bytes_per_connection: f64,
    /// The target engine's bytes per connection.
    pub target_bytes_per_connection: f64,
    /// Of the initiator's: what `Engine::new` allocated for
    /// `max_connections = N` before any connection was added, over N.
    pub engine_bytes_per_connection: f64,
    /// Of the initiator's: what adding one connection allocated (SPI and
    /// SA setup included).
    pub add_connection_bytes: f64,
    /// Heap allocations per connection per engine (the initiator's).
    pub allocations_per_connection: f64,
    /// Growth of the resident set over both engines' setup, over 2 N:
    /// malloc's per-block overhead and page rounding included.
    pub rss_bytes_per_connection: f64,
    /// Heap bytes of the larger engine with its N connections, GiB.
    pub engine_gib: f64,
    /// Heap bytes per connection per engine after the run, both engines'
    /// growth since before they were built over 2 N: the rings of the
    /// connections still busy and the engines' pools of idle ones (an idle
    /// connection lends its transaction slots and TX window rings to its
    /// engine), the SA caches' tables, the free lists and the loopback's
    /// frames included.
    pub bytes_per_connection_after_run: f64,
    /// The same at 1 000 connections, per connection.
    pub bytes_per_connection_1k: f64,
    /// 64-byte push transactions completed per second at N connections.
    pub ops_per_sec: f64,
    /// The same at 1 000 connections, in the same run.
    pub ops_per_sec_1k: f64,
    /// `ops_per_sec / ops_per_sec_1k`: the median of the per-round ratios.
    pub ratio_to_1k: f64,
    /// Lowest and highest per-round ratio.
    pub ratio_range: [f64; 2],
    /// Rounds the ratio is the median of.
    pub rounds: usize,
    /// Transactions completed at N in the measured slices.
    pub transactions: u64,
    /// Distinct connections of the N that carried a transaction (warm-up
    /// included).
    pub connections_used: u64,
    /// Push payload bytes.
    pub push_bytes: usize,
    /// Transactions the initiator ULP keeps outstanding.
    pub depth: usize,
    /// Seed of the connection choice.
    pub seed: u64,
    /// Seconds setting up the N connections on both engines took.
    pub setup_seconds: f64,
    /// `bytes_per_connection ≤ 2147` (DESIGN §8).
    pub meets_memory_bar: bool,
    /// `ratio_to_1k ≥ 0.7` (DESIGN §8).
    pub meets_ratio_bar: bool,
    /// Retransmissions and drops of both engines at N (0 expected: the
    /// loopback loses nothing).
    pub retransmissions: u64,
    pub drops: u64,
    /// The drops by reason (both engines at N), those counted only.
    pub drops_by_reason: std::collections::BTreeMap<&'static str, u64>,
    pub build: &'static str,
}

/// Progress of long work, one line a second on stderr.
struct Progress {
    quiet: bool,
    last: Instant,
}

impl Progress {
    fn new(quiet: bool) -> Self {
        Progress {
            quiet,
            last: Instant::now(),
        }
    }

    fn tick(&mut self, line: impl FnOnce() -> String) {
        if !self.quiet && self.last.elapsed() >= Duration::from_secs(1) {
            self.last = Instant::now();
            eprintln!("bench scale: {}", line());
        }
    }
}

pub fn run(args: &BenchScaleArgs) -> Result<Report> {
    if !(args.seconds.is_finite() && args.seconds > 0.0) {
        return Err(AppError::Usage(format!(
            "--seconds must be positive, got {}",
            args.seconds
        )));
    }
    let mut progress = Progress::new(args.quiet);
    let reference = Scale::new(REFERENCE_CONNECTIONS, args, &mut progress)?;
    let [a, b] = reference.memory;
    let per_connection = a.live_bytes.max(b.live_bytes) as f64 / f64::from(REFERENCE_CONNECTIONS);
    check_fits(per_connection, args.connections, available_bytes())?;
    let setup_start = Instant::now();
    let mut large = Scale::new(args.connections, args, &mut progress)?;
    let setup_seconds = setup_start.elapsed().as_secs_f64();
    let mut reference = reference;
    let slice = Duration::from_secs_f64(args.seconds) / ROUNDS as u32;
    // Warm-up: the free lists, the wheel, the RUE; not counted.
    reference.run_for(slice / 2)?;
    large.run_for(slice / 2)?;
    reference.rates.clear();
    large.rates.clear();
    for round in 0..ROUNDS {
        if round % 2 == 0 {
            reference.run_for(slice)?;
            large.run_for(slice)?;
        } else {
            large.run_for(slice)?;
            reference.run_for(slice)?;
        }
        progress.tick(|| {
            format!(
                "round {}/{ROUNDS}: {:.0} ops/s at {}, {:.0} at {}",
                round + 1,
                large.rates.per_slice.last().copied().unwrap_or(0.0),
                args.connections,
                reference.rates.per_slice.last().copied().unwrap_or(0.0),
                REFERENCE_CONNECTIONS
            )
        });
    }
    let ratios = ratios(&large.rates, &reference.rates);
    let ratio_to_1k = median(&ratios);
    let n = f64::from(args.connections);
    let per = |bytes: i64| bytes as f64 / n;
    let [initiator, target] = large.memory;
    let bytes_per_connection = per(initiator.live_bytes.max(target.live_bytes));
    let (sa, sb) = (large.a.stats(), large.b.stats());
    let mut drops_by_reason = std::collections::BTreeMap::new();
    for (reason, count) in sa.drops.iter().chain(sb.drops.iter()) {
        if count > 0 {
            *drops_by_reason.entry(reason).or_insert(0) += count;
        }
    }
    let after_run = Heap::now().since(large.heap_before).live_bytes;
    Ok(Report {
        connections: args.connections,
        bytes_per_connection,
        initiator_bytes_per_connection: per(initiator.live_bytes),
        target_bytes_per_connection: per(target.live_bytes),
        engine_bytes_per_connection: per(large.engine_new.live_bytes),
        add_connection_bytes: per(initiator.live_bytes - large.engine_new.live_bytes),
        allocations_per_connection: initiator.allocations as f64 / n,
        rss_bytes_per_connection: large.rss_bytes as f64 / (2.0 * n),
        engine_gib: initiator.live_bytes.max(target.live_bytes) as f64 / f64::from(1u32 << 30),
        bytes_per_connection_after_run: after_run as f64 / (2.0 * n),
        bytes_per_connection_1k: {
            let [a, b] = reference.memory;
            a.live_bytes.max(b.live_bytes) as f64 / f64::from(REFERENCE_CONNECTIONS)
        },
        ops_per_sec: large.rates.mean(),
        ops_per_sec_1k: reference.rates.mean(),
        ratio_to_1k,
        ratio_range: range(&ratios),
        rounds: ROUNDS,
        transactions: large.rates.ops,
        connections_used: large.used.iter().filter(|&&u| u).count() as u64,
        push_bytes: PUSH_BYTES,
        depth: args.depth as usize,
        seed: args.seed,
        setup_seconds,
        meets_memory_bar: bytes_per_connection <= BAR_BYTES_PER_CONNECTION,
        meets_ratio_bar: ratio_to_1k >= BAR_RATIO,
        retransmissions: sa.retransmissions + sb.retransmissions,
        drops: sa.drops.total() + sb.drops.total(),
        drops_by_reason,
        build: if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
    })
}

pub fn print_text(r: &Report) {
    println!(
        "Scale: one initiator and one target engine, {} connections each (PSP, Swift inline)",
        r.connections
    );
    println!(
        "  memory   {:8.0} B per connection per engine (initiator {:.0}, target {:.0}; bar {:.0}) {}",
        r.bytes_per_connection,
        r.initiator_bytes_per_connection,
        r.target_bytes_per_connection,
        BAR_BYTES_PER_CONNECTION,
        verdict(r.meets_memory_bar)
    );
    println!(
        "           {:8.0} B of it from Engine::new, {:.0} B per add_connection, {:.1} allocations; resident {:.0} B; {:.3} GiB per engine",
        r.engine_bytes_per_connection,
        r.add_connection_bytes,
        r.allocations_per_connection,
        r.rss_bytes_per_connection,
        r.engine_gib
    );
    println!(
        "           {:8.0} B per connection per engine after the run (busy rings, pools, caches)",
        r.bytes_per_connection_after_run
    );
    println!(
        "  ops      {:8.0} /s at {} connections, {:.0} /s at {}: ratio {:.3} ({:.3}..{:.3}; bar {}) {}",
        r.ops_per_sec,
        r.connections,
        r.ops_per_sec_1k,
        REFERENCE_CONNECTIONS,
        r.ratio_to_1k,
        r.ratio_range[0],
        r.ratio_range[1],
        BAR_RATIO,
        verdict(r.meets_ratio_bar)
    );
    println!(
        "  {} transactions of {} B on {} connections, depth {}, setup {:.1} s, {} retransmissions, {} drops",
        r.transactions,
        r.push_bytes,
        r.connections_used,
        r.depth,
        r.setup_seconds,
        r.retransmissions,
        r.drops
    );
}

/// Refuses an N whose two engines would not fit the memory available, as
/// estimated from the bytes a connection took at 1 000 (which carry the
/// engines' fixed parts too, so the estimate is high): swapping or the
/// OOM killer would measure nothing, on a machine others share.
fn check_fits(per_connection: f64, connections: u32, available: Option<u64>) -> Result<()> {
    let Some(available) = available else {
        return Ok(());
    };
    let need = per_connection * 2.0 * f64::from(connections);
    let gib = |bytes: f64| bytes / f64::from(1u32 << 30);
    if need > 0.9 * available as f64 {
        return Err(AppError::Usage(format!(
            "--connections {connections}: the two engines need about {:.1} GiB \
             ({per_connection:.0} B a connection each, measured at {REFERENCE_CONNECTIONS}), \
             more than the {:.1} GiB available; ask for fewer",
            gib(need),
            gib(available as f64)
        )));
    }
    Ok(())
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "meets the bar"
    } else {
        "BELOW THE BAR"
    }
}

fn failed(what: &str, e: &dyn std::fmt::Display) -> AppError {
    AppError::Failed(format!("bench scale: {what}: {e}"))
}

/// xorshift64*: the connection choice, seeded (the app's own; the engines
/// have theirs).
struct Choice(u64);

impl Choice {
    fn below(&mut self, n: u32) -> u32 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let x = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D);
        (((x >> 32) * u64::from(n)) >> 32) as u32
    }
}

/// Two engines with `n` connections each and their loopback.
struct Scale {
    n: u32,
    a: Engine,
    b: Engine,
    /// Connection `i` on the initiator and on the target.
    handles: Vec<(ConnectionHandle, ConnectionHandle)>,
    /// Which connections carried a transaction.
    used: Vec<bool>,
    pa: LoopbackPort,
    pb: LoopbackPort,
    rx: Vec<FrameBuf>,
    tx: Vec<FrameBuf>,
    depth: usize,
    outstanding: usize,
    tag: u64,
    choice: Choice,
    free: Vec<Vec<u8>>,
    /// Running time of the slices so far (the engines' clock stands still
    /// between slices).
    ran: Duration,
    rates: Rates,
    /// Heap growth of the initiator and of the target, engine and
    /// connections.
    memory: [HeapDelta; 2],
    /// Of the initiator's: `Engine::new` alone.
    engine_new: HeapDelta,
    /// Resident-set growth over the whole setup.
    rss_bytes: u64,
    /// The heap before either engine was built.
    heap_before: Heap,
}

impl Scale {
    fn clock(ran: Duration) -> Timestamp {
        Timestamp::from_nanos(1_000_000_000 + ran.as_nanos() as u64)
    }

    /// Builds both engines and sets up `n` connection pairs, measuring each
    /// engine's heap growth call by call.
    fn new(n: u32, args: &BenchScaleArgs, progress: &mut Progress) -> Result<Scale> {
        if n == 0 || n > 1 << 24 {
            return Err(AppError::Usage(format!(
                "--connections must be in 1..=16777216 (24-bit connection ids), got {n}"
            )));
        }
        let keys = |k: u8| MasterKeys {
            k0: MasterKey::new([k; 32]),
            k1: MasterKey::new([k ^ 0xff; 32]),
        };
        let now = Self::clock(Duration::ZERO);
        let config = |ip: &str, mac: u8, k: u8| -> Result<EngineConfig> {
            Ok(EngineConfig {
                local_ip: ip.parse().map_err(|e| failed("address", &e))?,
                local_mac: EthernetAddress([2, 0, 0, 0, 0, mac]),
                psp: Some(PspConfig::new(keys(k))),
                max_connections: n,
                ..EngineConfig::default()
            })
        };
        let (config_a, config_b) = (config("10.0.0.1", 1, 1)?, config("10.0.0.2", 2, 3)?);
        // The benchmark's own bookkeeping, allocated before the measured
        // region.
        let mut handles = Vec::with_capacity(n as usize);
        let used = vec![false; n as usize];
        let rss_before = resident_bytes().unwrap_or(0);
        let mut memory = [HeapDelta::default(); 2];
        let heap_before = Heap::now();
        let before = heap_before;
        let mut a = Engine::new(config_a, now).map_err(|e| failed("engine", &e))?;
        let engine_new = Heap::now().since(before);
        memory[0] += engine_new;
        let before = Heap::now();
        let mut b = Engine::new(config_b, now).map_err(|e| failed("engine", &e))?;
        memory[1] += Heap::now().since(before);
        let (ip_a, ip_b) = (config("10.0.0.1", 1, 1)?, config("10.0.0.2", 2, 3)?);
        for i in 0..n {
            // CIDs 1..=n on both engines; the connection manager's job
            // (engine::connect), done side by side so each engine's
            // allocations are counted apart.
            let cid = ConnectionId::truncating(i + 1);
            let before = Heap::now();
            let (spi_a, key_to_a) = a
                .allocate_spi(Version::Aes128Gcm)
                .map_err(|e| failed("allocate_spi", &e))?;
            memory[0] += Heap::now().since(before);
            let before = Heap::now();
            let (spi_b, key_to_b) = b
                .allocate_spi(Version::Aes128Gcm)
                .map_err(|e| failed("allocate_spi", &e))?;
            memory[1] += Heap::now().since(before);
            let side = |remote: &EngineConfig, psp: ConnectionPsp, sequence| {
                let mut c = ConnectionConfig::new(cid, cid, remote.local_ip, remote.local_mac);
                c.sequence = sequence;
                c.local_function = DestinationFunction::truncating(0xA);
                c.remote_function = DestinationFunction::truncating(0xA);
                c.psp = Some(psp);
                c
            };
            let sequence = InitialSequence::ZERO;
            let ca = side(&ip_b, ConnectionPsp::new(spi_b, key_to_b, spi_a), sequence);
            let cb = side(
                &ip_a,
                ConnectionPsp::new(spi_a, key_to_a, spi_b),
                sequence.mirrored(),
            );
            let before = Heap::now();
            let ha = a
                .add_connection(now, ca)
                .map_err(|e| failed("add_connection", &e))?;
            memory[0] += Heap::now().since(before);
            let before = Heap::now();
            let hb = b
                .add_connection(now, cb)
                .map_err(|e| failed("add_connection", &e))?;
            memory[1] += Heap::now().since(before);
            handles.push((ha, hb));
            progress.tick(|| format!("set up {}/{n} connections", i + 1));
        }
        let rss_bytes = resident_bytes().unwrap_or(0).saturating_sub(rss_before);
        let (pa, pb) = Loopback::pair(LoopbackConfig {
            one_way_delay: Duration::ZERO,
            ..LoopbackConfig::default()
        });
        let depth = args.depth as usize;
        Ok(Scale {
            n,
            a,
            b,
            handles,
            used,
            pa,
            pb,
            rx: Vec::new(),
            tx: Vec::new(),
            depth,
            outstanding: 0,
            tag: 0,
            choice: Choice(args.seed | 1),
            free: (0..depth).map(|_| vec![0xA5u8; PUSH_BYTES]).collect(),
            ran: Duration::ZERO,
            rates: Rates::default(),
            memory,
            engine_new,
            rss_bytes,
            heap_before,
        })
    }

    /// Runs the transactions for `duration` and records the slice's rate.
    fn run_for(&mut self, duration: Duration) -> Result<()> {
        let start = Instant::now();
        let mut completed = 0u64;
        loop {
            let elapsed = start.elapsed();
            if elapsed >= duration {
                self.ran += elapsed;
                self.rates.record(completed, elapsed);
                return Ok(());
            }
            let now = Self::clock(self.ran + elapsed);
            while self.outstanding < self.depth {
                let i = self.choice.below(self.n) as usize;
                self.tag += 1;
                let payload = self.free.pop().unwrap_or_else(|| vec![0xA5u8; PUSH_BYTES]);
                match self
                    .a
                    .submit(now, self.handles[i].0, Transaction::push(self.tag, payload))
                {
                    Ok(_) => {
                        self.outstanding += 1;
                        self.used[i] = true;
                    }
                    Err(rejected) => {
                        if let Op::Push(payload) = rejected.returned.op {
                            self.free.push(payload);
                        }
                        break;
                    }
                }
            }
            for initiator in [true, false] {
                let (engine, port) = if initiator {
                    (&mut self.a, &mut self.pa)
                } else {
                    (&mut self.b, &mut self.pb)
                };
                let now = Self::clock(self.ran + start.elapsed());
                engine.receive_burst(now, port, &mut self.rx, RX_BURST);
                if engine.poll_timeout().is_some_and(|t| t <= now) {
                    engine.handle_timeout(now);
                }
                while let Some(event) = engine.poll_event() {
                    match event {
                        UlpEvent::Request(r) => {
                            engine
                                .ulp_ack(now, r.connection, r.rsn)
                                .map_err(|e| failed("ULP ACK", &format!("{e:?}")))?;
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
                                    "bench scale: transaction {tag} {status:?}"
                                )));
                            }
                            self.outstanding -= 1;
                            completed += 1;
                            self.free.extend(source);
                            engine.release(data);
                        }
                        UlpEvent::ConnectionError { fault, .. } => {
                            return Err(AppError::Failed(format!(
                                "bench scale: connection error {fault:?}"
                            )));
                        }
                        UlpEvent::Xoff { .. } | UlpEvent::Xon { .. } => {}
                    }
                }
                let ran = self.ran;
                let clock = || Self::clock(ran + start.elapsed());
                engine.transmit_bursts(clock, port, &mut self.tx, TX_BURST);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_what_would_not_fit() {
        let gib = 1u64 << 30;
        assert!(check_fits(20_000.0, 1_000_000, Some(24 * gib)).is_err());
        assert!(check_fits(2_500.0, 1_000_000, Some(24 * gib)).is_ok());
        assert!(
            check_fits(20_000.0, 1_000_000, None).is_ok(),
            "unknown: try"
        );
    }

    #[test]
    fn choice_is_uniform_enough_and_in_range() {
        let mut c = Choice(7);
        let mut counts = [0u32; 10];
        for _ in 0..100_000 {
            counts[c.below(10) as usize] += 1;
        }
        assert!(
            counts.iter().all(|&k| (9_000..11_000).contains(&k)),
            "{counts:?}"
        );
    }

    #[test]
    fn small_run_measures_memory_and_ops() {
        let args = BenchScaleArgs {
            connections: 3_000,
            seconds: 0.2,
            depth: 64,
            seed: 1,
            quiet: true,
            json: true,
        };
        let r = run(&args).unwrap();
        assert!(r.bytes_per_connection > 0.0, "{r:?}");
        assert!(r.ops_per_sec > 0.0 && r.ops_per_sec_1k > 0.0, "{r:?}");
        assert!(r.connections_used > 100, "{r:?}");
        assert_eq!(r.drops, r.drops_by_reason.values().sum::<u64>(), "{r:?}");
    }
}
