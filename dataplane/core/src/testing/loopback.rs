//! An in-process loopback pair of ports, and a fault-injecting wrapper.
//!
//! Layer: IO, in memory. Owns [`Loopback`] (two [`LoopbackPort`]s joined by
//! two one-way delay lines that release frames by virtual time) and
//! [`FaultInjector`], which wraps any [`Port`] and applies seeded loss,
//! duplication, reordering and corruption to what it sends (smoltcp's
//! `phy::FaultInjector`, quinn's test `Pair`). Sans-IO: no clock (`now` is
//! passed in), no OS randomness (a seed is), no threads. The two ends share
//! state behind a mutex so each can be handed to its own owner, even on
//! another thread; a burst takes the lock once.
//!
//! It never parses frames: corruption flips bits anywhere, and the engine's
//! checks (PSP ICV, checksums, parsers) must catch it.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use core::time::Duration;

use crate::port::{FrameBuf, PacketBuf, Port, PortCapabilities};
use crate::random::{Random, SplitMix64};
use crate::time::Timestamp;

/// Configuration of a [`Loopback`] pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoopbackConfig {
    /// One-way delay of each direction. Default 2 µs.
    pub one_way_delay: Duration,
    /// Capacity of every frame buffer, in bytes. Default 9216 (a 9000-byte
    /// MTU plus headers).
    pub frame_capacity: usize,
    /// Buffers the pair may allocate in total (the mempool size); `alloc`
    /// returns `None` beyond. Default 8192.
    pub pool_size: usize,
    /// Frames in flight per direction; `tx_burst` stops when full. Default
    /// 4096.
    pub queue_capacity: usize,
    /// Free buffers each end keeps for itself and moves to and from the
    /// shared pool at a time (DPDK's per-lcore mempool cache; at least 1).
    /// It sets how many buffers circulate, so how much memory the frames
    /// of a steady loop touch: each end holds up to two batches. Default
    /// 32.
    pub cache_batch: usize,
}

impl LoopbackConfig {
    /// The default [`cache_batch`](Self::cache_batch).
    pub const DEFAULT_CACHE_BATCH: usize = 32;
}

impl Default for LoopbackConfig {
    fn default() -> Self {
        LoopbackConfig {
            one_way_delay: Duration::from_micros(2),
            frame_capacity: 9216,
            pool_size: 8192,
            queue_capacity: 4096,
            cache_batch: Self::DEFAULT_CACHE_BATCH,
        }
    }
}

/// Counters of one loopback port.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoopbackStats {
    /// Frames sent.
    pub tx_frames: u64,
    /// Frame bytes sent.
    pub tx_bytes: u64,
    /// Frames received.
    pub rx_frames: u64,
    /// Frames `tx_burst` left to the caller because the line was full.
    pub tx_full: u64,
}

/// A pair of in-memory ports: what one sends, the other receives
/// `one_way_delay` later, in order.
#[derive(Debug)]
pub struct Loopback;

impl Loopback {
    /// The two ends, A and B.
    pub fn pair(mut config: LoopbackConfig) -> (LoopbackPort, LoopbackPort) {
        config.cache_batch = config.cache_batch.max(1);
        let shared = Arc::new(Mutex::new(Shared {
            lines: [Line::default(), Line::default()],
            free: Vec::new(),
            empties: Vec::new(),
            allocated: 0,
            stats: [LoopbackStats::default(); 2],
        }));
        let end = |side| LoopbackPort {
            shared: Arc::clone(&shared),
            side,
            config,
            cache: Vec::new(),
            full: Vec::new(),
        };
        (end(0), end(1))
    }
}

/// One end of a [`Loopback`] pair.
#[derive(Debug)]
pub struct LoopbackPort {
    shared: Arc<Mutex<Shared>>,
    /// 0 = A (sends on line 0, receives from line 1), 1 = B.
    side: usize,
    config: LoopbackConfig,
    /// Free buffers kept by this end (DPDK's per-core mempool cache), fewer
    /// than `cache_batch`: alloc pops, free pushes.
    cache: Vec<FrameBuf>,
    /// Empty, or one full batch of `cache_batch` free buffers held back
    /// before anything goes to the shared pool: alloc and free take the
    /// shared lock at most once per `cache_batch` buffers.
    full: Vec<FrameBuf>,
}

/// One direction's delay line: the frames of each `tx_burst` as one batch under
/// their release time, oldest first. A burst moves in and out as a whole vector
/// (a bulk copy), not frame by frame through a queue of (release time, frame)
/// pairs. A whole burst sent, and a whole batch received into an empty vector,
/// exchange vectors with the caller instead of copying (the caller's `frames`
/// is left an empty spare, its `out` goes to the spares).
#[derive(Debug, Default)]
struct Line {
    /// (release time, frames sent in one `tx_burst`); never an empty batch.
    batches: VecDeque<(Timestamp, Vec<FrameBuf>)>,
    /// Frames in all batches.
    frames: usize,
    /// Emptied batch vectors, kept for their capacity.
    spare: Vec<Vec<FrameBuf>>,
}

#[derive(Debug)]
struct Shared {
    /// `lines[s]` carries what side `s` sends.
    lines: [Line; 2],
    /// Free buffers, in whole batches of `cache_batch`: a batch changes hands
    /// as one vector, not buffer by buffer.
    free: Vec<Vec<FrameBuf>>,
    /// Emptied batch vectors, kept for their capacity.
    empties: Vec<Vec<FrameBuf>>,
    allocated: usize,
    stats: [LoopbackStats; 2],
}

impl LoopbackPort {
    /// This end's counters.
    pub fn stats(&self) -> LoopbackStats {
        self.lock().stats[self.side]
    }

    /// Buffers the pair has allocated so far (at most `pool_size`; each
    /// is in a pool, in flight, or held by a user).
    pub fn buffers_allocated(&self) -> usize {
        self.lock().allocated
    }

    /// Frames in flight towards this end.
    pub fn in_flight(&self) -> usize {
        self.lock().lines[1 - self.side].frames
    }

    /// The cache is empty: the held-back batch, else a batch from the shared
    /// pool, else a new buffer while the pool allows.
    fn refill(&mut self) -> Option<FrameBuf> {
        if self.full.is_empty() {
            let mut shared = self.shared.lock().unwrap_or_else(|e| e.into_inner());
            match shared.free.pop() {
                Some(batch) => {
                    let empty = core::mem::replace(&mut self.cache, batch);
                    shared.empties.push(empty);
                }
                None if shared.allocated >= self.config.pool_size => return None,
                None => {
                    shared.allocated += 1;
                    drop(shared);
                    return Some(FrameBuf::new(self.config.frame_capacity));
                }
            }
        } else {
            core::mem::swap(&mut self.cache, &mut self.full);
        }
        self.cache.pop()
    }

    /// The cache holds a whole batch: it is held back, and the batch held
    /// back before goes to the shared pool.
    fn spill(&mut self) {
        if !self.full.is_empty() {
            let mut shared = self.shared.lock().unwrap_or_else(|e| e.into_inner());
            let empty = shared.empties.pop().unwrap_or_default();
            let batch = core::mem::replace(&mut self.full, empty);
            shared.free.push(batch);
        }
        core::mem::swap(&mut self.cache, &mut self.full);
    }

    fn lock(&self) -> MutexGuard<'_, Shared> {
        // A panic while holding the lock leaves plain queues behind, still
        // consistent: keep using them.
        self.shared.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Port for LoopbackPort {
    type Buf = FrameBuf;

    fn capabilities(&self) -> PortCapabilities {
        PortCapabilities {
            max_frame_len: self.config.frame_capacity,
            rx_checksums_verified: false,
            psp_inline: false,
        }
    }

    // The cache hit inline and untouched (lengths are zeroed on `free`): a
    // `FrameBuf` modified and then returned through memory is copied right
    // after the store to its length, a store-forwarding stall per frame.
    // One size of buffer, `frame_capacity`: every frame fits one.
    #[inline]
    fn alloc(&mut self, len: usize) -> Option<FrameBuf> {
        if len > self.config.frame_capacity {
            return None;
        }
        match self.cache.pop() {
            Some(buf) => Some(buf),
            None => self.refill(),
        }
    }

    // Always inline: with `FrameBuf` holding a `Vec` (32 bytes), LLVM leaves it
    // out of `receive_burst`, a call per frame.
    #[inline(always)]
    fn free(&mut self, mut buf: FrameBuf) {
        buf.set_len(0);
        self.cache.push(buf);
        if self.cache.len() >= self.config.cache_batch {
            self.spill();
        }
    }

    fn rx_burst(&mut self, now: Timestamp, out: &mut Vec<FrameBuf>, max: usize) -> usize {
        let side = self.side;
        let mut shared = self.lock();
        let line = &mut shared.lines[1 - side];
        let mut n = 0;
        while n < max {
            let Some((release, batch)) = line.batches.front_mut() else {
                break;
            };
            if *release > now {
                break;
            }
            let take = batch.len().min(max - n);
            if take == batch.len() {
                if out.is_empty() {
                    core::mem::swap(out, batch);
                } else {
                    out.append(batch);
                }
                if let Some((_, empty)) = line.batches.pop_front() {
                    line.spare.push(empty);
                }
            } else {
                out.extend(batch.drain(..take));
            }
            n += take;
        }
        line.frames -= n;
        shared.stats[side].rx_frames += n as u64;
        n
    }

    fn tx_burst(&mut self, now: Timestamp, frames: &mut Vec<FrameBuf>) -> usize {
        let (side, capacity) = (self.side, self.config.queue_capacity);
        let release = now + self.config.one_way_delay;
        let mut shared = self.lock();
        let line = &mut shared.lines[side];
        let room = capacity.saturating_sub(line.frames);
        let n = room.min(frames.len());
        let bytes: u64 = frames[..n].iter().map(|buf| buf.len() as u64).sum();
        if n > 0 {
            let mut batch = line.spare.pop().unwrap_or_default();
            if n == frames.len() {
                core::mem::swap(frames, &mut batch);
            } else {
                batch.extend(frames.drain(..n));
            }
            line.batches.push_back((release, batch));
            line.frames += n;
        }
        let stats = &mut shared.stats[side];
        stats.tx_frames += n as u64;
        stats.tx_bytes += bytes;
        stats.tx_full += frames.len() as u64;
        n
    }

    fn poll_timeout(&self) -> Option<Timestamp> {
        self.lock().lines[1 - self.side]
            .batches
            .front()
            .map(|(release, _)| *release)
    }
}

/// Fault probabilities of a [`FaultInjector`], per frame sent, in parts per
/// million.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Faults {
    /// Probability a frame is lost.
    pub loss_ppm: u32,
    /// Probability a frame is sent twice.
    pub duplicate_ppm: u32,
    /// Probability a frame is held back (up to `reorder_delay`), so later
    /// frames overtake it.
    pub reorder_ppm: u32,
    /// Longest extra delay of a reordered frame.
    pub reorder_delay: Duration,
    /// Probability one random bit of the frame is flipped.
    pub corrupt_ppm: u32,
}

impl Faults {
    /// Percent to parts per million.
    pub const fn percent(p: u32) -> u32 {
        p * 10_000
    }
}

/// What a [`FaultInjector`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultStats {
    /// Frames dropped.
    pub lost: u64,
    /// Extra copies sent.
    pub duplicated: u64,
    /// Frames held back.
    pub reordered: u64,
    /// Frames sent with a flipped bit (a copy of a corrupted frame counts
    /// again: it carries the same flip).
    pub corrupted: u64,
}

/// One bit a [`FaultInjector`] flipped in a frame it sent: byte `offset`
/// from the start of the frame, XORed with `1 << bit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BitFlip {
    /// Byte offset in the frame.
    pub offset: usize,
    /// Bit within the byte, 0 (least significant) ..= 7.
    pub bit: u8,
}

/// Wraps a port and applies seeded [`Faults`] to the frames it sends.
/// Held-back frames are released by virtual time on the next `tx_burst` or
/// `rx_burst` at or after their release time; [`Port::poll_timeout`]
/// reports it.
#[derive(Debug)]
pub struct FaultInjector<P: Port> {
    inner: P,
    /// The fault probabilities (may be changed between bursts).
    pub faults: Faults,
    rng: SplitMix64,
    held: Vec<(Timestamp, P::Buf)>,
    scratch: Vec<P::Buf>,
    stats: FaultStats,
    /// The flips of frames sent, when logged ([`log_flips`](Self::log_flips)).
    flips: Option<Vec<BitFlip>>,
}

impl<P: Port> FaultInjector<P> {
    /// Wraps `inner` with `faults`, drawing from a generator seeded with
    /// `seed`.
    pub fn new(inner: P, faults: Faults, seed: u64) -> Self {
        FaultInjector {
            inner,
            faults,
            rng: SplitMix64::new(seed),
            held: Vec::new(),
            scratch: Vec::new(),
            stats: FaultStats::default(),
            flips: None,
        }
    }

    /// Starts logging where each flipped bit lands (one [`BitFlip`] per
    /// corrupted frame sent, copies included), for a caller that accounts
    /// for what the receiver's checks can and cannot see. Take the log
    /// with [`drain_flips`](Self::drain_flips); it grows until then.
    pub fn log_flips(&mut self) {
        self.flips.get_or_insert_with(Vec::new);
    }

    /// The flips logged since the last call (none unless
    /// [`log_flips`](Self::log_flips) was called).
    pub fn drain_flips(&mut self) -> impl Iterator<Item = BitFlip> + '_ {
        self.flips.iter_mut().flat_map(|log| log.drain(..))
    }

    /// What was done so far.
    pub fn stats(&self) -> FaultStats {
        self.stats
    }

    /// The wrapped port.
    pub fn inner(&self) -> &P {
        &self.inner
    }

    /// The wrapped port, mutable.
    pub fn inner_mut(&mut self) -> &mut P {
        &mut self.inner
    }

    /// Frames held back, not yet sent.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// Counts a corrupted frame sent, and logs where its flip is.
    fn note_flip(&mut self, at: BitFlip) {
        self.stats.corrupted += 1;
        if let Some(log) = &mut self.flips {
            log.push(at);
        }
    }

    /// Sends the held frames whose release time has come.
    fn release_held(&mut self, now: Timestamp) {
        if self.held.is_empty() {
            return;
        }
        let mut i = 0;
        while i < self.held.len() {
            if self.held[i].0 <= now {
                let (_, buf) = self.held.swap_remove(i);
                self.scratch.push(buf);
            } else {
                i += 1;
            }
        }
        self.flush_scratch(now);
    }

    /// Hands `scratch` to the inner port; frames it refuses are held again
    /// for the next burst.
    fn flush_scratch(&mut self, now: Timestamp) {
        if self.scratch.is_empty() {
            return;
        }
        self.inner.tx_burst(now, &mut self.scratch);
        for buf in self.scratch.drain(..) {
            self.held.push((now, buf));
        }
    }
}

impl<P: Port> Port for FaultInjector<P> {
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

    fn free_burst(&mut self, bufs: &mut Vec<P::Buf>) {
        self.inner.free_burst(bufs);
    }

    fn rx_burst(&mut self, now: Timestamp, out: &mut Vec<P::Buf>, max: usize) -> usize {
        self.release_held(now);
        self.inner.rx_burst(now, out, max)
    }

    fn prefetch(&self, frames: &[P::Buf]) {
        self.inner.prefetch(frames);
    }

    fn tx_burst(&mut self, now: Timestamp, frames: &mut Vec<P::Buf>) -> usize {
        self.release_held(now);
        let n = frames.len();
        let faults = self.faults;
        for mut buf in frames.drain(..) {
            if self.rng.chance(faults.loss_ppm, 1_000_000) {
                self.stats.lost += 1;
                self.inner.free(buf);
                continue;
            }
            let mut flip = None;
            if self.rng.chance(faults.corrupt_ppm, 1_000_000) && !buf.is_empty() {
                let bit = self.rng.below(buf.len() as u32 * 8) as usize;
                let at = BitFlip {
                    offset: bit / 8,
                    bit: (bit % 8) as u8,
                };
                buf.data_mut()[at.offset] ^= 1 << at.bit;
                flip = Some(at);
                self.note_flip(at);
            }
            if self.rng.chance(faults.duplicate_ppm, 1_000_000) {
                if let Some(mut copy) = self.inner.alloc(buf.len()) {
                    let len = buf.len().min(copy.capacity());
                    copy.buffer_mut()[..len].copy_from_slice(&buf.data()[..len]);
                    copy.set_len(len);
                    self.stats.duplicated += 1;
                    // The copy carries the same flip: a second corrupted
                    // frame on the wire.
                    if let Some(at) = flip.filter(|at| at.offset < len) {
                        self.note_flip(at);
                    }
                    self.scratch.push(copy);
                }
            }
            if self.rng.chance(faults.reorder_ppm, 1_000_000) {
                let extra = u64::try_from(faults.reorder_delay.as_nanos()).unwrap_or(u64::MAX);
                let extra = self.rng.next_u64() % extra.max(1) + 1;
                self.stats.reordered += 1;
                self.held.push((now + Duration::from_nanos(extra), buf));
                continue;
            }
            self.scratch.push(buf);
        }
        self.flush_scratch(now);
        n
    }

    fn poll_timeout(&self) -> Option<Timestamp> {
        let held = self.held.iter().map(|(release, _)| *release).min();
        match (held, self.inner.poll_timeout()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn send(port: &mut impl Port<Buf = FrameBuf>, now: Timestamp, payload: &[u8]) {
        let mut buf = port.alloc(64).expect("pool");
        buf.buffer_mut()[..payload.len()].copy_from_slice(payload);
        buf.set_len(payload.len());
        let mut frames = vec![buf];
        assert_eq!(port.tx_burst(now, &mut frames), 1);
    }

    fn receive(port: &mut impl Port<Buf = FrameBuf>, now: Timestamp) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        port.rx_burst(now, &mut out, 64);
        let frames = out.iter().map(|b| b.data().to_vec()).collect();
        for buf in out {
            port.free(buf);
        }
        frames
    }

    #[test]
    fn frames_arrive_after_the_one_way_delay_in_order() {
        let config = LoopbackConfig {
            one_way_delay: Duration::from_micros(5),
            ..LoopbackConfig::default()
        };
        let (mut a, mut b) = Loopback::pair(config);
        let t0 = Timestamp::from_micros(100);
        send(&mut a, t0, b"one");
        send(&mut a, t0 + Duration::from_micros(1), b"two");
        send(&mut b, t0, b"back");
        assert_eq!(b.poll_timeout(), Some(t0 + Duration::from_micros(5)));
        assert!(receive(&mut b, t0 + Duration::from_micros(4)).is_empty());
        assert_eq!(receive(&mut b, t0 + Duration::from_micros(5)), vec![b"one"]);
        assert_eq!(receive(&mut b, t0 + Duration::from_micros(9)), vec![b"two"]);
        assert_eq!(
            receive(&mut a, t0 + Duration::from_micros(9)),
            vec![b"back"]
        );
        assert_eq!(a.stats().tx_frames, 2);
        assert_eq!(b.stats().rx_frames, 2);
        assert_eq!(b.poll_timeout(), None);
    }

    #[test]
    fn a_burst_is_received_in_order_across_smaller_bursts() {
        let (mut a, mut b) = Loopback::pair(LoopbackConfig::default());
        let t0 = Timestamp::from_micros(10);
        let burst = |a: &mut LoopbackPort, now, from: u8, count: u8| {
            let mut frames: Vec<FrameBuf> = (from..from + count)
                .map(|i| FrameBuf::from_frame(&[i], 16))
                .collect();
            assert_eq!(a.tx_burst(now, &mut frames), count as usize);
        };
        burst(&mut a, t0, 0, 5);
        burst(&mut a, t0 + Duration::from_micros(1), 5, 3);
        assert_eq!(b.in_flight(), 8);
        let later = t0 + Duration::from_micros(10);
        let mut got = Vec::new();
        let mut take = |max| {
            let mut out = Vec::new();
            let n = b.rx_burst(later, &mut out, max);
            assert_eq!(n, out.len());
            got.extend(out.iter().map(|f| f.data()[0]));
            n
        };
        assert_eq!(take(2), 2);
        assert_eq!(take(4), 4, "the rest of the first burst and one more");
        assert_eq!(take(0), 0);
        assert_eq!(take(64), 2);
        assert_eq!(take(64), 0);
        assert_eq!(got, (0..8).collect::<Vec<u8>>());
        assert_eq!((b.in_flight(), b.poll_timeout()), (0, None));
        assert_eq!(b.stats().rx_frames, 8);
        assert_eq!(a.stats().tx_bytes, 8);
    }

    #[test]
    fn full_line_leaves_frames_with_the_caller_and_pool_is_bounded() {
        let config = LoopbackConfig {
            queue_capacity: 2,
            pool_size: 4,
            ..LoopbackConfig::default()
        };
        let (mut a, _b) = Loopback::pair(config);
        let mut frames: Vec<FrameBuf> = (0..3).map(|_| a.alloc(64).unwrap()).collect();
        assert_eq!(a.tx_burst(Timestamp::ZERO, &mut frames), 2);
        assert_eq!(frames.len(), 1);
        assert_eq!(a.stats().tx_full, 1);
        let last = a.alloc(64);
        assert!(last.is_some());
        assert!(a.alloc(64).is_none(), "pool of 4 exhausted");
        a.free(frames.pop().unwrap());
        assert!(a.alloc(64).is_some());
    }

    #[test]
    fn buffers_freed_at_one_end_are_reused_by_the_other_in_batches() {
        let config = LoopbackConfig {
            one_way_delay: Duration::ZERO,
            pool_size: 96,
            ..LoopbackConfig::default()
        };
        let (mut a, mut b) = Loopback::pair(config);
        let now = Timestamp::ZERO;
        let mut frames: Vec<FrameBuf> = (0..96).map(|_| a.alloc(64).unwrap()).collect();
        assert!(a.alloc(64).is_none(), "pool of 96 exhausted");
        assert_eq!(a.tx_burst(now, &mut frames), 96);
        let mut got = Vec::new();
        assert_eq!(b.rx_burst(now, &mut got, 96), 96);
        for frame in got.drain(..) {
            b.free(frame);
        }
        // B holds back its last whole batch; the two before went to the
        // pool, where A takes them back without allocating.
        let mut reused = Vec::new();
        while let Some(buf) = a.alloc(64) {
            assert!(buf.is_empty(), "lengths are zeroed on free");
            reused.push(buf);
        }
        assert_eq!(reused.len(), 64);
        assert_eq!(a.buffers_allocated(), 96);
        // What B still holds it hands out itself.
        let held: Vec<FrameBuf> = (0..32).map(|_| b.alloc(64).unwrap()).collect();
        assert!(b.alloc(64).is_none());
        for buf in reused.into_iter().chain(held) {
            a.free(buf);
        }
        assert_eq!(a.buffers_allocated(), 96, "nothing was allocated twice");
    }

    /// Buffers a steady loop of `burst`-frame bursts from A to B ends up
    /// circulating, for a cache batch of `batch`.
    fn circulating(batch: usize, burst: usize) -> usize {
        let (mut a, mut b) = Loopback::pair(LoopbackConfig {
            one_way_delay: Duration::ZERO,
            cache_batch: batch,
            ..LoopbackConfig::default()
        });
        let now = Timestamp::ZERO;
        let (mut frames, mut got) = (Vec::new(), Vec::new());
        for _ in 0..100 {
            frames.extend((0..burst).map(|_| a.alloc(64).unwrap()));
            assert_eq!(a.tx_burst(now, &mut frames), burst);
            assert_eq!(b.rx_burst(now, &mut got, burst), burst);
            for frame in got.drain(..) {
                b.free(frame);
            }
        }
        a.buffers_allocated()
    }

    #[test]
    fn the_cache_batch_sets_how_many_buffers_circulate() {
        // A burst in flight, plus what the two ends hold back: each up to
        // two batches (its cache and the whole batch held before the pool).
        for (batch, burst) in [(32, 16), (8, 16), (4, 4), (1, 3)] {
            let n = circulating(batch, burst);
            assert!(n >= burst, "batch {batch}: {n}");
            assert!(n <= burst + 4 * batch, "batch {batch}: {n} buffers");
        }
        assert!(circulating(8, 16) < circulating(32, 16));
        // 0 is taken as 1, not as "never spill".
        assert!(circulating(0, 3) <= 3 + 4);
    }

    #[test]
    fn fault_injector_is_seeded_and_counts() {
        let run = |seed| {
            let (a, mut b) = Loopback::pair(LoopbackConfig::default());
            let faults = Faults {
                loss_ppm: Faults::percent(10),
                duplicate_ppm: Faults::percent(10),
                reorder_ppm: Faults::percent(10),
                reorder_delay: Duration::from_micros(20),
                corrupt_ppm: Faults::percent(10),
            };
            let mut a = FaultInjector::new(a, faults, seed);
            let mut t = Timestamp::from_micros(1);
            for i in 0..1000u32 {
                send(&mut a, t, &i.to_be_bytes());
                t = t + Duration::from_micros(1);
            }
            t = t + Duration::from_micros(50);
            a.rx_burst(t, &mut Vec::new(), 0); // releases held frames
            assert_eq!(a.held(), 0);
            let mut received = Vec::new();
            loop {
                let got = receive(&mut b, t);
                if got.is_empty() {
                    break;
                }
                received.extend(got);
            }
            (a.stats(), received)
        };
        let (stats, received) = run(7);
        assert_eq!(run(7).1, received, "same seed, same frames");
        assert!((60..140).contains(&stats.lost), "{stats:?}");
        assert!((60..140).contains(&stats.duplicated), "{stats:?}");
        assert!((60..140).contains(&stats.reordered), "{stats:?}");
        assert!((60..140).contains(&stats.corrupted), "{stats:?}");
        assert_eq!(
            received.len() as u64,
            1000 - stats.lost + stats.duplicated,
            "every frame not lost arrives, copies included"
        );
        let in_order = received.windows(2).filter(|w| w[0] <= w[1]).count();
        assert!(in_order < received.len() - 1, "some frames overtaken");
    }

    #[test]
    fn every_corrupted_frame_sent_is_counted_and_its_flip_logged() {
        let (a, mut b) = Loopback::pair(LoopbackConfig::default());
        let faults = Faults {
            duplicate_ppm: Faults::percent(30),
            corrupt_ppm: Faults::percent(30),
            ..Faults::default()
        };
        let mut a = FaultInjector::new(a, faults, 11);
        a.log_flips();
        let frame: Vec<u8> = (0..64u8).collect();
        let mut t = Timestamp::from_micros(1);
        for _ in 0..500 {
            send(&mut a, t, &frame);
            t = t + Duration::from_micros(1);
        }
        let received = receive_all(&mut b, t + Duration::from_micros(10));
        let flips: Vec<BitFlip> = a.drain_flips().collect();
        // The frames that arrive differing from the original, each in the
        // one bit logged for it, in order: copies of a corrupted frame are
        // corrupted frames too.
        let differing: Vec<BitFlip> = received
            .iter()
            .filter(|got| **got != frame)
            .map(|got| {
                let offset = (0..64).find(|&i| got[i] != frame[i]).unwrap();
                let diff = got[offset] ^ frame[offset];
                assert_eq!(diff.count_ones(), 1, "one bit flipped");
                assert!(got[offset + 1..] == frame[offset + 1..]);
                BitFlip {
                    offset,
                    bit: diff.trailing_zeros() as u8,
                }
            })
            .collect();
        assert_eq!(differing, flips);
        let stats = a.stats();
        assert_eq!(stats.corrupted, flips.len() as u64, "{stats:?}");
        assert!(stats.corrupted > 100 && stats.duplicated > 100, "{stats:?}");
        assert!(
            received.windows(2).any(|w| w[0] == w[1] && w[0] != frame),
            "some corrupted frame was duplicated, flip and all"
        );
        assert_eq!(a.drain_flips().count(), 0, "drained");
        // Unlogged, nothing is kept.
        let (c, _d) = Loopback::pair(LoopbackConfig::default());
        let mut c = FaultInjector::new(c, faults, 11);
        send(&mut c, t, &frame);
        send(&mut c, t, &frame);
        assert_eq!(c.drain_flips().count(), 0);
    }

    fn receive_all(port: &mut impl Port<Buf = FrameBuf>, now: Timestamp) -> Vec<Vec<u8>> {
        let mut all = Vec::new();
        loop {
            let got = receive(port, now);
            if got.is_empty() {
                return all;
            }
            all.extend(got);
        }
    }
}
