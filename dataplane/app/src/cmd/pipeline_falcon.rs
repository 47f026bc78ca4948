//! The Falcon half of `falcon bench pipeline`: a Falcon target fed over
//! DPDK against the same target fed from memory (issue #25, item 6;
//! DESIGN §8: DPDK I/O takes under a fifth of the Falcon loop's packet
//! budget).
//!
//! Layer: application (a benchmark). Each round:
//!
//! 1. **Record** (not timed): a real initiator engine pushes `size`-byte
//!    transactions to a scratch target over the in-process loopback; every
//!    frame it sends (Push Data with fresh PSNs, sealed when PSP is on) is
//!    copied into a [`Recording`].
//! 2. **From memory** (`engine_mpps`): a fresh target engine, set up as the
//!    scratch one was (same keys, CIDs and SPIs, so the recorded frames are
//!    its own traffic), runs the lcore loop over a [`MemoryPort`] whose
//!    receive bursts are mbufs filled from the recording before the clock
//!    starts, in chunks, and whose transmit frees the target's ACKs.
//! 3. **Over DPDK** (`falcon_mpps`): a third such target runs the same
//!    loop on lcore 0 over a `DpdkPort` on a `net_ring` port, while a
//!    generator on lcore 1 copies the recording into mbufs and sends it
//!    through the other port of the ring pair (the ring pushes back when
//!    full, so nothing is lost) and frees the ACKs that come back.
//!
//! Both targets do the whole receive path (parse, PSP open, replay check,
//! window, transaction layer, ULP delivery and ULP ACK, ACK generation);
//! the only difference is where frames come from and go to. Steps 2 and 3
//! alternate their order by round; `falcon_ratio` is the median of the
//! per-round ratios.

#![cfg(feature = "dpdk")]

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use falcon_core::api::*;
use falcon_core::testing::{Loopback, LoopbackConfig, LoopbackPort};
use falcon_dpdk::clock::TscClock;
use falcon_dpdk::eal::Eal;
use falcon_dpdk::ethdev::{EthPort, PortConfig};
use falcon_dpdk::mbuf::Mbuf;
use falcon_dpdk::mempool::Mempool;
use falcon_dpdk::port::DpdkPort;

use crate::error::{AppError, Result};

/// Recorded frames per round at most, and the bytes they may take.
const MAX_FRAMES: usize = 200_000;
const MAX_RECORDING_BYTES: usize = 256 << 20;
/// Frames the memory port holds ready at a time (filled untimed). Small
/// enough that a chunk of 4 KiB frames (2.2 MiB) is still in the caches
/// when the target reads it, as the generator's frames are in the shared
/// cache when they come off the ring: with 8192 (36 MiB) the memory-fed
/// target read its frames from DRAM and ran slower than the DPDK-fed one
/// (`falcon_ratio` 1.05 at 4 KiB).
pub(super) const CHUNK: usize = 512;
/// Largest frame: a 4 KiB push with every header, PSP included.
pub const MAX_FRAME: usize = 4352;
/// The mbufs' data room: DPDK's default headroom plus the largest frame.
pub const DATA_ROOM: u16 = 128 + MAX_FRAME as u16;
/// Descriptors of each direction of the ring pair.
const RING_SLOTS: u32 = 1024;
/// A round that takes longer than this has lost frames.
pub(super) const ROUND_LIMIT: Duration = Duration::from_secs(20);

/// One round's two rates.
#[derive(Debug, Clone)]
pub struct Round {
    pub frames: u64,
    pub engine_pps: f64,
    pub falcon_pps: f64,
    /// Frames the DPDK-fed target dropped, by reason.
    pub drops: DropCounters,
    /// Frames per receive burst of the DPDK-fed target, over the bursts
    /// that brought any: 32 when the target is the bottleneck, less when
    /// the generator falls behind.
    pub rx_burst: f64,
}

/// The ports and pool the rounds share (a process has one EAL and creates
/// its ring pair once).
pub struct Rig {
    eal: &'static Eal,
    pool: &'static Mempool,
    generator: Option<EthPort>,
    target: Option<DpdkPort>,
    psp: bool,
    size: usize,
}

impl Rig {
    /// The ring pair and a pool for `size`-byte pushes (at most 4096),
    /// PSP on or off.
    pub fn new(eal: &'static Eal, psp: bool, size: usize) -> Result<Rig> {
        let failed = |e: falcon_dpdk::DpdkError| AppError::Failed(format!("bench pipeline: {e}"));
        let pool: &'static Mempool = Box::leak(Box::new(
            Mempool::new(eal, "pipeline_falcon", 16383, 256, DATA_ROOM).map_err(failed)?,
        ));
        let (gen_id, target_id) =
            EthPort::ring_pair(eal, "pl_gen", "pl_tgt", RING_SLOTS).map_err(failed)?;
        let generator = EthPort::start(eal, gen_id, PortConfig::default(), pool).map_err(failed)?;
        let target = EthPort::start(eal, target_id, PortConfig::default(), pool).map_err(failed)?;
        Ok(Rig {
            eal,
            pool,
            generator: Some(generator),
            target: Some(DpdkPort::new(target, 0, pool, MAX_FRAME)),
            psp,
            size,
        })
    }

    /// One round: record, then both targets in the order `dpdk_first`
    /// says.
    pub fn round(&mut self, dpdk_first: bool) -> Result<Round> {
        let clock = TscClock::new(self.eal);
        let mut set = Engines::new(clock, self.psp)?;
        let recording = Arc::new(record(&mut set, clock, self.size)?);
        let frames = recording.len() as u64;
        let Engines {
            memory_target,
            dpdk_target,
            ..
        } = set;
        let (engine, falcon) = if dpdk_first {
            let falcon = self.fed_over_dpdk(dpdk_target, clock, &recording)?;
            (
                self.fed_from_memory(memory_target, clock, &recording)?,
                falcon,
            )
        } else {
            let engine = self.fed_from_memory(memory_target, clock, &recording)?;
            (engine, self.fed_over_dpdk(dpdk_target, clock, &recording)?)
        };
        Ok(Round {
            frames,
            engine_pps: frames as f64 / engine.0.as_secs_f64().max(1e-9),
            falcon_pps: frames as f64 / falcon.0.as_secs_f64().max(1e-9),
            drops: falcon.1,
            rx_burst: falcon.2,
        })
    }

    /// The target fed from memory: time spent turning the loop, chunk
    /// fills excluded.
    fn fed_from_memory(
        &self,
        target: Engine<Mbuf>,
        clock: TscClock,
        recording: &Recording,
    ) -> Result<(Duration, DropCounters)> {
        let port = MemoryPort {
            pool: self.pool,
            ready: VecDeque::with_capacity(CHUNK),
            sent: 0,
        };
        let mut lcore = Lcore::new(target, port, clock);
        let mut sink = Sink::default();
        let mut busy = Duration::ZERO;
        let limit = Instant::now() + ROUND_LIMIT;
        for chunk in (0..recording.len()).step_by(CHUNK) {
            for i in chunk..recording.len().min(chunk + CHUNK) {
                let m = fill(self.pool, recording.frame(i))?;
                lcore.port.ready.push_back(m);
            }
            let goal = recording.len().min(chunk + CHUNK) as u64;
            // The fill was a pause of this benchmark's, not a stall of the
            // loop's (which would read several bursts in its next turn).
            lcore.resume();
            let start = Instant::now();
            while !sink.done(&lcore.engine, goal, lcore.turns) {
                lcore.turn(&mut sink);
                if lcore.turns % 1024 == 0 && Instant::now() > limit {
                    return Err(lost("from memory", &sink, &lcore.engine, goal));
                }
            }
            busy += start.elapsed();
        }
        sink.check()?;
        Ok((busy, lcore.engine.stats().drops))
    }

    /// The target on this lcore over the ring port, the generator on the
    /// first worker lcore: from the first frame received to the last
    /// handled.
    fn fed_over_dpdk(
        &mut self,
        target: Engine<Mbuf>,
        clock: TscClock,
        recording: &Arc<Recording>,
    ) -> Result<(Duration, DropCounters, f64)> {
        let failed = |e: falcon_dpdk::DpdkError| AppError::Failed(format!("bench pipeline: {e}"));
        let worker = *falcon_dpdk::lcore::workers(self.eal)
            .first()
            .ok_or_else(|| {
                AppError::Failed("bench pipeline: the EAL has no worker lcore".into())
            })?;
        let stop = Arc::new(AtomicBool::new(false));
        let generator = self.generator.take().expect("the generator port is back");
        let launched = falcon_dpdk::lcore::launch(self.eal, worker, {
            let (recording, stop, pool) = (Arc::clone(recording), Arc::clone(&stop), self.pool);
            move || generate(generator, pool, &recording, &stop)
        })
        .map_err(failed)?;
        let port = self.target.take().expect("the target port is back");
        let mut lcore = Lcore::new(target, port, clock);
        let mut sink = Sink::default();
        let goal = recording.len() as u64;
        let limit = Instant::now() + ROUND_LIMIT;
        let mut started = None;
        let mut outcome = Ok(());
        let (mut received, mut receiving_turns) = (0u64, 0u64);
        while !sink.done(&lcore.engine, goal, lcore.turns) {
            let turn = lcore.turn(&mut sink);
            if turn.received > 0 {
                started.get_or_insert_with(Instant::now);
                received += turn.received as u64;
                receiving_turns += 1;
            }
            if lcore.turns % 1024 == 0 && Instant::now() > limit {
                outcome = Err(lost("over DPDK", &sink, &lcore.engine, goal));
                break;
            }
        }
        let elapsed = started.map_or(Duration::ZERO, |s| s.elapsed());
        // The generator drains the last ACKs until told to stop.
        stop.store(true, Ordering::Release);
        let generated = launched
            .wait()
            .map_err(|_| AppError::Failed("bench pipeline: the generator lcore panicked".into()))?;
        self.generator = Some(generated.port);
        let drops = lcore.engine.stats().drops;
        let burst = received as f64 / receiving_turns.max(1) as f64;
        let Lcore { port, .. } = lcore;
        self.target = Some(port);
        outcome?;
        sink.check()?;
        if let Some(e) = generated.error {
            return Err(AppError::Failed(format!("bench pipeline: generator: {e}")));
        }
        Ok((elapsed, drops, burst))
    }
}

/// The engines of one round: the initiator and the scratch target of the
/// recording, and the two measured targets (built alike, each with an
/// idle initiator of its own so that `connect` gives it the scratch
/// target's CIDs and SPIs).
struct Engines {
    initiator: Engine,
    scratch: Engine,
    initiator_handle: ConnectionHandle,
    memory_target: Engine<Mbuf>,
    dpdk_target: Engine<Mbuf>,
}

impl Engines {
    fn new(mut clock: TscClock, psp: bool) -> Result<Engines> {
        let now = clock.now();
        let config_error = |e: ConfigError| AppError::Failed(format!("bench pipeline: {e}"));
        let mut initiator: Engine =
            Engine::new(engine_config(1, psp), now).map_err(config_error)?;
        let mut scratch: Engine = Engine::new(engine_config(2, psp), now).map_err(config_error)?;
        let (initiator_handle, _) =
            connect(now, &mut initiator, &mut scratch, &PairSpec::default())
                .map_err(config_error)?;
        let measured = || -> Result<Engine<Mbuf>> {
            let mut peer: Engine<Mbuf> =
                Engine::new(engine_config(1, psp), now).map_err(config_error)?;
            let mut target: Engine<Mbuf> =
                Engine::new(engine_config(2, psp), now).map_err(config_error)?;
            connect(now, &mut peer, &mut target, &PairSpec::default()).map_err(config_error)?;
            Ok(target)
        };
        let memory_target = measured()?;
        let dpdk_target = measured()?;
        Ok(Engines {
            initiator,
            scratch,
            initiator_handle,
            memory_target,
            dpdk_target,
        })
    }
}

/// Engine configuration of side 1 (initiator) or 2 (target).
pub(super) fn engine_config(side: u8, psp: bool) -> EngineConfig {
    let config = falcon_core::testing::psp_engine_config(side);
    EngineConfig {
        max_frame_len: MAX_FRAME,
        psp: if psp { config.psp } else { None },
        ..config
    }
}

/// Frames back to back, each found by its end offset.
pub struct Recording {
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

impl Recording {
    pub(super) fn len(&self) -> usize {
        self.ends.len()
    }

    pub(super) fn frame(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.bytes[start..self.ends[i]]
    }
}

/// The initiator pushes to the scratch target over the loopback until
/// enough frames are recorded.
fn record(set: &mut Engines, clock: TscClock, size: usize) -> Result<Recording> {
    let want = MAX_FRAMES.min(MAX_RECORDING_BYTES / (size + 128));
    let initiator = std::mem::replace(&mut set.initiator, placeholder(clock)?);
    let scratch = std::mem::replace(&mut set.scratch, placeholder(clock)?);
    record_frames(initiator, scratch, set.initiator_handle, clock, size, want)
}

/// `want` frames `initiator` sends on `connection` while pushing
/// `size`-byte transactions to `scratch` over the in-process loopback.
pub(super) fn record_frames(
    initiator: Engine,
    scratch: Engine,
    connection: ConnectionHandle,
    clock: TscClock,
    size: usize,
    want: usize,
) -> Result<Recording> {
    let (a, b): (LoopbackPort, LoopbackPort) = Loopback::pair(LoopbackConfig::default());
    let recorder = Recorder {
        inner: a,
        recording: Recording {
            bytes: Vec::with_capacity(want * (size + 128)),
            ends: Vec::with_capacity(want),
        },
        want,
    };
    let mut li = Lcore::new(initiator, recorder, clock);
    let mut lt = Lcore::new(scratch, b, clock);
    let mut pusher = Pusher {
        connection,
        size,
        submitted: 0,
        want: want as u64,
    };
    let mut sink = Sink::default();
    let limit = Instant::now() + ROUND_LIMIT;
    while li.port.recording.len() < want {
        li.turn(&mut pusher);
        lt.turn(&mut sink);
        if Instant::now() > limit {
            return Err(AppError::Failed(format!(
                "bench pipeline: recorded {} of {want} frames in {ROUND_LIMIT:?}",
                li.port.recording.len()
            )));
        }
    }
    sink.check()?;
    let Lcore { port, .. } = li;
    Ok(port.recording)
}

/// An engine with no connection, to stand in for one moved out.
fn placeholder(mut clock: TscClock) -> Result<Engine> {
    Engine::new(EngineConfig::default(), clock.now())
        .map_err(|e| AppError::Failed(format!("bench pipeline: {e}")))
}

/// The initiator's ULP while recording: keeps pushing `size` bytes.
struct Pusher {
    connection: ConnectionHandle,
    size: usize,
    submitted: u64,
    want: u64,
}

impl Ulp<FrameBuf, Vec<u8>> for Pusher {
    fn submit(&mut self, now: Timestamp, engine: &mut Engine) {
        while self.submitted < self.want {
            let t = Transaction::push(self.submitted, vec![self.submitted as u8; self.size]);
            if engine.submit(now, self.connection, t).is_err() {
                break;
            }
            self.submitted += 1;
        }
    }

    fn on_event(&mut self, _now: Timestamp, engine: &mut Engine, event: UlpEvent) {
        if let UlpEvent::Completion(c) = event {
            engine.release(c.data);
        }
    }
}

/// The targets' ULP: acknowledges every push at once and counts it, and
/// anything else it is handed.
#[derive(Default)]
pub(super) struct Sink {
    pub(super) delivered: u64,
    unexpected: u64,
}

impl Sink {
    /// Frames the target is done with: delivered, or dropped by name.
    pub(super) fn handled<B: PacketBuf>(&self, engine: &Engine<B>) -> u64 {
        self.delivered + engine.stats().drops.total()
    }

    /// Every frame handled. The drop counters are read only every 1024
    /// turns and once all but the dropped are delivered (reading them
    /// copies the engine's statistics).
    pub(super) fn done<B: PacketBuf>(&self, engine: &Engine<B>, goal: u64, turns: u64) -> bool {
        self.delivered >= goal || (turns % 1024 == 0 && self.handled(engine) >= goal)
    }

    pub(super) fn check(&self) -> Result<()> {
        if self.unexpected > 0 {
            return Err(AppError::Failed(format!(
                "bench pipeline: the target was handed {} events other than pushes",
                self.unexpected
            )));
        }
        Ok(())
    }
}

impl<B: PacketBuf> Ulp<B, Vec<u8>> for Sink {
    fn submit(&mut self, _now: Timestamp, _engine: &mut Engine<B>) {}

    fn on_event(&mut self, now: Timestamp, engine: &mut Engine<B>, event: UlpEvent<B>) {
        match event {
            UlpEvent::Request(r) if r.kind == TransactionKind::Push => {
                self.delivered += 1;
                if engine.ulp_ack(now, r.connection, r.rsn).is_err() {
                    self.unexpected += 1;
                }
                engine.release(r.payload);
            }
            UlpEvent::Completion(c) => {
                engine.release(c.data);
            }
            UlpEvent::Xoff { .. } | UlpEvent::Xon { .. } => {}
            _ => self.unexpected += 1,
        }
    }
}

fn lost<B: PacketBuf>(what: &str, sink: &Sink, engine: &Engine<B>, goal: u64) -> AppError {
    AppError::Failed(format!(
        "bench pipeline: the target {what} handled {} of {goal} frames in {ROUND_LIMIT:?} \
         ({} delivered; drops {:?})",
        sink.handled(engine),
        sink.delivered,
        engine.stats().drops
    ))
}

/// A port that copies every frame the initiator sends into the recording
/// on its way out.
struct Recorder<P: Port> {
    inner: P,
    recording: Recording,
    want: usize,
}

impl<P: Port> Port for Recorder<P> {
    type Buf = P::Buf;

    fn capabilities(&self) -> PortCapabilities {
        self.inner.capabilities()
    }

    fn alloc(&mut self, len: usize) -> Option<P::Buf> {
        self.inner.alloc(len)
    }

    fn free(&mut self, buf: P::Buf) {
        self.inner.free(buf);
    }

    fn rx_burst(&mut self, now: Timestamp, out: &mut Vec<P::Buf>, max: usize) -> usize {
        self.inner.rx_burst(now, out, max)
    }

    fn prefetch(&self, frames: &[P::Buf]) {
        self.inner.prefetch(frames);
    }

    fn tx_burst(&mut self, now: Timestamp, frames: &mut Vec<P::Buf>) -> usize {
        let before = self.recording.len();
        for f in frames.iter() {
            if self.recording.len() < self.want {
                self.recording.bytes.extend_from_slice(f.data());
                self.recording.ends.push(self.recording.bytes.len());
            }
        }
        let offered = self.recording.len() - before;
        let sent = self.inner.tx_burst(now, frames);
        // Frames the port did not take are offered again next burst.
        for _ in sent.min(offered)..offered {
            self.recording.ends.pop();
        }
        if let Some(&end) = self.recording.ends.last() {
            self.recording.bytes.truncate(end);
        } else {
            self.recording.bytes.clear();
        }
        sent
    }

    fn poll_timeout(&self) -> Option<Timestamp> {
        self.inner.poll_timeout()
    }
}

/// Frames from memory: receive bursts from mbufs filled before the clock
/// started; transmitted frames (the ACKs) freed at once, as a port whose
/// wire took them would.
struct MemoryPort {
    pool: &'static Mempool,
    ready: VecDeque<Mbuf>,
    sent: u64,
}

impl Port for MemoryPort {
    type Buf = Mbuf;

    fn capabilities(&self) -> PortCapabilities {
        PortCapabilities {
            max_frame_len: MAX_FRAME,
            rx_checksums_verified: false,
            psp_inline: false,
        }
    }

    fn alloc(&mut self, len: usize) -> Option<Mbuf> {
        if len > MAX_FRAME {
            return None;
        }
        self.pool.alloc()
    }

    fn free(&mut self, buf: Mbuf) {
        drop(buf);
    }

    fn rx_burst(&mut self, _now: Timestamp, out: &mut Vec<Mbuf>, max: usize) -> usize {
        let n = max.min(self.ready.len());
        out.extend(self.ready.drain(..n));
        n
    }

    fn tx_burst(&mut self, _now: Timestamp, frames: &mut Vec<Mbuf>) -> usize {
        let n = frames.len();
        self.sent += n as u64;
        frames.clear();
        n
    }
}

/// An mbuf holding a copy of `frame`.
pub(super) fn fill(pool: &Mempool, frame: &[u8]) -> Result<Mbuf> {
    let mut m = pool
        .alloc()
        .ok_or_else(|| AppError::Failed("bench pipeline: the mbuf pool ran dry".into()))?;
    let room = m.append(frame.len()).ok_or_else(|| {
        AppError::Failed(format!(
            "bench pipeline: a {}-byte frame does not fit an mbuf",
            frame.len()
        ))
    })?;
    room.copy_from_slice(frame);
    Ok(m)
}

/// What the generator lcore gives back.
struct Generated {
    port: EthPort,
    error: Option<String>,
}

/// The generator: the recording into mbufs and out through `port`, bursts
/// of 32, each refilled only by what the ring took; the ACKs coming back
/// freed; after the last frame, ACKs drained until `stop`.
fn generate(
    mut port: EthPort,
    pool: &Mempool,
    recording: &Recording,
    stop: &AtomicBool,
) -> Generated {
    let mut tx: Vec<Mbuf> = Vec::with_capacity(32);
    let mut rx: Vec<Mbuf> = Vec::with_capacity(32);
    let mut next = 0;
    let mut error = None;
    while (next < recording.len() || !tx.is_empty()) && !stop.load(Ordering::Relaxed) {
        while tx.len() < 32 && next < recording.len() {
            // A dry pool is momentary (frames in the rings and the
            // target's hands): send what there is, refill next burst.
            let Some(mut m) = pool.alloc() else { break };
            let frame = recording.frame(next);
            let Some(room) = m.append(frame.len()) else {
                error = Some(format!("a {}-byte frame does not fit an mbuf", frame.len()));
                next = recording.len();
                break;
            };
            room.copy_from_slice(frame);
            tx.push(m);
            next += 1;
        }
        port.tx_burst(0, &mut tx);
        if port.rx_burst(0, &mut rx, 32) > 0 {
            rx.clear();
        }
    }
    tx.clear();
    while !stop.load(Ordering::Acquire) {
        if port.rx_burst(0, &mut rx, 32) > 0 {
            rx.clear();
        }
    }
    Generated { port, error }
}
