//! The RUE core: per-datapath-core CC event and result queues, the
//! per-connection state table, and the loop that runs algorithms over them
//! (OCP Falcon 0.9 §10.6; DESIGN §3–§4).
//!
//! Layer: the engine behind the datapath. It owns one lossless SPSC event
//! queue and one result queue per datapath core (`rtrb`: a full queue
//! refuses, never overwrites; both ends see their occupancy), the state
//! table (one 64-byte cache line per connection, sized up front for up to
//! 2^24 connections), and the profiles. It never reads a clock (time comes
//! in events), never allocates after construction, and never drops an
//! event: when a result queue is full it stops and leaves events queued.
//!
//! # Driving it from a datapath loop
//!
//! Inline (one core runs the datapath and the RUE):
//!
//! ```
//! use rue::{Admission, AdmissionConfig, CcEvent, CcResult, Profiles, Rue, RueConfig, Time24, Verdict};
//!
//! let mut rue = Rue::new(RueConfig { connections: 1024, ..RueConfig::default() }, Profiles::swift_default())
//!     .expect("valid config");
//! let mut channel = rue.add_core(1024); // one per datapath core
//! let admission = Admission::new(AdmissionConfig::for_capacity(1024)).expect("valid thresholds");
//!
//! // The datapath keeps each connection's last result as its CC state.
//! let mut cc = CcResult::initial(7, Profiles::base_delay_field(0), Time24::new(0));
//!
//! // On an ACK: measurements plus the carried state make the event ...
//! let mut event = CcEvent {
//!     connection_id: 7,
//!     t1: Time24::new(1000),
//!     t2: Time24::new(1080),
//!     t3: Time24::new(1090),
//!     t4: Time24::new(1200),
//!     num_packets_acked: 4,
//!     ..CcEvent::default()
//! };
//! event.carry_state(&cc);
//! // ... pushed if the admission policy agrees (OCP Falcon 0.9 §10.6.1).
//! if channel.admission(&admission, 1200, 4) == Verdict::Admit {
//!     channel.push(event).expect("admitted, so not full");
//! }
//! // Once per loop turn, run the RUE for a bounded budget ...
//! rue.process(64);
//! // ... and apply the results (windows, gap, RTO, repath) and keep them.
//! while let Some(result) = channel.pop() {
//!     assert_eq!(result.connection_id, 7);
//!     cc = result;
//! }
//! assert!(cc.fcwnd.to_f64() > 32.0); // delay below target: additive increase
//! ```
//!
//! Threaded (the RUE on its own thread or lcore): build the `Rue`, take
//! one [`RueChannel`] per datapath core with [`Rue::add_core`], hand the
//! channels to the datapath threads, then [`Rue::spawn`]; [`RueThread::stop`]
//! ends the loop after draining what was queued and returns the `Rue`.
//!
//! # FAE lookahead
//!
//! The Falcon paper's FAE prefetches the state of upcoming events. This
//! crate forbids `unsafe` (and `_mm_prefetch` needs it, even on x86-64), so
//! the prefetch is a plain load: every K events, the first byte of the
//! state slots of events `i + K .. i + 2K` is read in a tight loop and
//! folded into a sink (a "prefetch by load" in bursts). The burst's misses
//! and TLB walks overlap each other; by the time those events run, their
//! lines are in cache. Measured numbers are on [`DEFAULT_LOOKAHEAD`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};

use crate::admission::{Admission, Verdict};
use crate::algorithm::{ConnectionState, Profiles};
use crate::config::ConfigError;
use crate::format::{CcEvent, CcResult, MAX_CONNECTION_ID};

/// Default lookahead distance K of the prefetch-by-load, in events.
///
/// Measured with the loop of `falcon bench rue` at 1 M connections
/// (release, 2-core KVM AMD EPYC with other builds running, one core,
/// inline push → process → pop, batches of 256, Swift, random connection
/// ids; 64 MiB state table on 4 KiB pages):
///
/// | K | events/s | ns/event |
/// |---|---|---|
/// | 0 (off) | 4.2–5.2 M | 190–240 |
/// | 8 | 7.7–9.2 M | 108–130 |
/// | 16 | 8.8–10.3 M | 97–114 |
/// | 32 | 9.5–10.6 M | 94–105 |
/// | 64 | 10.7 M | 93 |
/// | 128 | 9.9 M | 101 |
///
/// A first version that touched slot `i + K` inside the per-event loop
/// (instead of in bursts) measured 0.9–1.05× (no gain): each touch missed
/// while the long per-event path filled the reorder buffer behind it.
/// Random 64-byte reads over 64 MiB reach ≈ 12 ns each here in a tight loop
/// (≈ 190 ns dependent), which bounds what any lookahead can hide.
pub const DEFAULT_LOOKAHEAD: usize = 32;

/// Events per `process` call of the threaded loop.
const THREAD_BATCH: usize = 256;

/// RUE core tunables.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RueConfig {
    /// Connections with state in the table: ids `0..connections`, at most
    /// 2^24. Events of other ids are processed from a blank state (and
    /// counted). Default 65 536.
    pub connections: u32,
    /// Lookahead K of the prefetch-by-load, in events; 0 disables.
    /// Default [`DEFAULT_LOOKAHEAD`].
    pub lookahead: usize,
}

impl Default for RueConfig {
    fn default() -> Self {
        RueConfig {
            connections: 1 << 16,
            lookahead: DEFAULT_LOOKAHEAD,
        }
    }
}

impl RueConfig {
    /// Checks the ranges.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming the first bad field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.connections > MAX_CONNECTION_ID + 1 {
            return Err(ConfigError::new(
                "rue",
                "connections",
                "must be ≤ 2^24 (24-bit connection ids)",
            ));
        }
        if self.lookahead > 256 {
            return Err(ConfigError::new("rue", "lookahead", "must be ≤ 256 events"));
        }
        Ok(())
    }
}

/// Counters of the RUE core.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RueCounters {
    /// Events processed (one result each).
    pub events: u64,
    /// Events whose connection id has no slot in the table.
    pub outside_table: u64,
    /// `process` calls that stopped because a result queue was full while
    /// events were waiting.
    pub result_queue_full: u64,
}

/// One state-table slot: a connection's [`ConnectionState`] on its own
/// 64-byte cache line.
#[derive(Clone, Copy, Debug, Default)]
#[repr(align(64))]
struct Slot(ConnectionState);

/// Bytes of RUE state per connection (one cache line).
pub const BYTES_PER_CONNECTION: usize = std::mem::size_of::<Slot>();

/// The per-connection state table, indexed by connection id.
#[derive(Clone, Debug)]
pub struct StateTable {
    slots: Vec<Slot>,
}

impl StateTable {
    /// A table for ids `0..connections`, all empty. Allocates
    /// `connections × 64` bytes (64 MiB for 1 M connections).
    pub fn new(connections: u32) -> Self {
        StateTable {
            slots: vec![Slot::default(); connections as usize],
        }
    }

    /// Number of slots.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether the table has no slots.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// A connection's state, if the id has a slot.
    pub fn get(&self, connection_id: u32) -> Option<&ConnectionState> {
        self.slots.get(connection_id as usize).map(|s| &s.0)
    }

    /// A connection's state, mutable, if the id has a slot.
    #[inline]
    pub fn get_mut(&mut self, connection_id: u32) -> Option<&mut ConnectionState> {
        self.slots.get_mut(connection_id as usize).map(|s| &mut s.0)
    }

    /// Forgets a connection's state (when its id is reused).
    pub fn reset(&mut self, connection_id: u32) {
        if let Some(slot) = self.get_mut(connection_id) {
            *slot = ConnectionState::Empty;
        }
    }

    /// The prefetch by load: reads the slot's tag byte, so its cache line is
    /// on its way by the time the event is processed.
    #[inline(always)]
    fn touch(&self, connection_id: u32) -> u32 {
        self.slots.get(connection_id as usize).map_or(0, |slot| {
            u32::from(matches!(slot.0, ConnectionState::Empty))
        })
    }
}

/// The datapath end of one core's queues: push events, pop results.
pub struct RueChannel {
    events: rtrb::Producer<CcEvent>,
    results: rtrb::Consumer<CcResult>,
}

impl RueChannel {
    /// Queues an event. A full queue hands the event back (lossless: nothing
    /// is overwritten; the admission policy should have said [`Verdict::Full`]).
    ///
    /// # Errors
    ///
    /// The event itself when the queue is full.
    #[inline]
    pub fn push(&mut self, event: CcEvent) -> Result<(), CcEvent> {
        self.events
            .push(event)
            .map_err(|rtrb::PushError::Full(event)| event)
    }

    /// The next result, in event order.
    #[inline]
    pub fn pop(&mut self) -> Option<CcResult> {
        self.results.pop().ok()
    }

    /// Events queued and not yet taken by the RUE.
    pub fn event_occupancy(&self) -> usize {
        self.event_capacity() - self.events.slots()
    }

    /// Capacity of the event queue, in events.
    pub fn event_capacity(&self) -> usize {
        self.events.buffer().capacity()
    }

    /// Results waiting to be popped.
    pub fn result_occupancy(&self) -> usize {
        self.results.slots()
    }

    /// The admission verdict for an event of a connection, from this
    /// channel's occupancy (OCP Falcon 0.9 §10.6.1).
    pub fn admission(
        &self,
        policy: &Admission,
        since_last_event: u32,
        packets_acked: u32,
    ) -> Verdict {
        policy.verdict(
            self.event_occupancy(),
            self.event_capacity(),
            since_last_event,
            packets_acked,
        )
    }
}

/// The RUE end of one core's queues.
struct CoreQueues {
    events: rtrb::Consumer<CcEvent>,
    results: rtrb::Producer<CcResult>,
}

/// The RUE core. See the module doc for how a datapath drives it.
pub struct Rue {
    profiles: Profiles,
    table: StateTable,
    cores: Vec<CoreQueues>,
    next_core: usize,
    lookahead: usize,
    counters: RueCounters,
    /// Folds the prefetch loads so the compiler keeps them.
    touch_sink: u32,
}

impl Rue {
    /// An RUE core with its state table allocated and no queues yet.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] from [`RueConfig::validate`].
    pub fn new(config: RueConfig, profiles: Profiles) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(Rue {
            profiles,
            table: StateTable::new(config.connections),
            cores: Vec::new(),
            next_core: 0,
            lookahead: config.lookahead,
            counters: RueCounters::default(),
            touch_sink: 0,
        })
    }

    /// Adds the queue pair of one datapath core, each holding `capacity`
    /// entries, and returns the datapath's end.
    pub fn add_core(&mut self, capacity: usize) -> RueChannel {
        let (event_tx, event_rx) = rtrb::RingBuffer::new(capacity);
        let (result_tx, result_rx) = rtrb::RingBuffer::new(capacity);
        self.cores.push(CoreQueues {
            events: event_rx,
            results: result_tx,
        });
        RueChannel {
            events: event_tx,
            results: result_rx,
        }
    }

    /// Processes up to `max_events` queued events across all cores (round
    /// robin, starting after the core served first last time) and returns
    /// how many it processed.
    pub fn process(&mut self, max_events: usize) -> usize {
        let cores = self.cores.len();
        if cores == 0 {
            return 0;
        }
        let start = self.next_core % cores;
        self.next_core = start + 1;
        let mut done = 0;
        for k in 0..cores {
            if done >= max_events {
                break;
            }
            done += self.process_core((start + k) % cores, max_events - done);
        }
        done
    }

    /// Processes up to `max_events` events of one core's queue.
    pub fn process_core(&mut self, core: usize, max_events: usize) -> usize {
        let Rue {
            profiles,
            table,
            cores,
            lookahead,
            counters,
            touch_sink,
            ..
        } = self;
        let Some(queues) = cores.get_mut(core) else {
            return 0;
        };
        let waiting = queues.events.slots();
        let n = max_events.min(waiting).min(queues.results.slots());
        if n == 0 {
            if waiting > 0 && max_events > 0 {
                counters.result_queue_full += 1;
            }
            return 0;
        }
        // Neither chunk can fail: n ≤ the slots each side reported.
        let Ok(read) = queues.events.read_chunk(n) else {
            return 0;
        };
        let Ok(mut write) = queues.results.write_chunk(n) else {
            return 0;
        };
        let (head, tail) = read.as_slices();
        let (out_head, out_tail) = write.as_mut_slices();
        let at = |i: usize| {
            if i < head.len() {
                head.get(i)
            } else {
                tail.get(i - head.len())
            }
        };
        // FAE lookahead in bursts of K: before processing events i..i+K, the
        // slots of events i+K..i+2K are read in a tight loop, so their
        // misses (and TLB walks) overlap each other instead of each stalling
        // the long per-event path; by the time those events run, their
        // lines are in cache.
        let k = *lookahead;
        let mut sink = 0u32;
        for ev in head.iter().chain(tail).take(k) {
            sink ^= table.touch(ev.connection_id);
        }
        let mut outside = 0u64;
        let mut until_burst = 0usize;
        let slots = out_head.iter_mut().chain(out_tail.iter_mut());
        for (i, (event, out)) in head.iter().chain(tail).zip(slots).enumerate() {
            if k > 0 {
                if until_burst == 0 {
                    until_burst = k;
                    for j in i + k..(i + 2 * k).min(n) {
                        if let Some(ahead) = at(j) {
                            sink ^= table.touch(ahead.connection_id);
                        }
                    }
                }
                until_burst -= 1;
            }
            *out = run_one(profiles, table, &mut outside, event);
        }
        write.commit_all();
        read.commit_all();
        *touch_sink ^= sink;
        counters.events += n as u64;
        counters.outside_table += outside;
        n
    }

    /// Processes one event directly, without queues (simulations, tests).
    pub fn handle_event(&mut self, event: &CcEvent) -> CcResult {
        self.counters.events += 1;
        let mut outside = 0;
        let result = run_one(&mut self.profiles, &mut self.table, &mut outside, event);
        self.counters.outside_table += outside;
        result
    }

    /// Runs the loop on this thread until `stop` is set, then drains what is
    /// queued (as far as result queues have room) and returns.
    pub fn run(&mut self, stop: &AtomicBool, idle: Idle) {
        while !stop.load(Ordering::Acquire) {
            if self.process(THREAD_BATCH) == 0 {
                idle.wait();
            }
        }
        while self.process(THREAD_BATCH) > 0 {}
    }

    /// Moves the RUE to its own thread running [`Rue::run`].
    ///
    /// # Errors
    ///
    /// The OS error if the thread cannot be spawned.
    pub fn spawn(mut self, idle: Idle) -> std::io::Result<RueThread> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let handle = thread::Builder::new().name("rue".into()).spawn(move || {
            self.run(&flag, idle);
            self
        })?;
        Ok(RueThread { stop, handle })
    }

    /// A connection's state, if the id has a slot.
    pub fn state(&self, connection_id: u32) -> Option<&ConnectionState> {
        self.table.get(connection_id)
    }

    /// Forgets a connection's state (call when a connection id is reused).
    pub fn reset_connection(&mut self, connection_id: u32) {
        self.table.reset(connection_id);
    }

    /// The profiles (for their counters and configurations).
    pub fn profiles(&self) -> &Profiles {
        &self.profiles
    }

    /// Counters since construction.
    pub fn counters(&self) -> RueCounters {
        self.counters
    }

    /// Connections with a slot in the state table.
    pub fn connections(&self) -> usize {
        self.table.len()
    }

    /// The prefetch sink (only to keep the loads observable).
    pub fn touch_sink(&self) -> u32 {
        self.touch_sink
    }
}

#[inline(always)]
fn run_one(
    profiles: &mut Profiles,
    table: &mut StateTable,
    outside: &mut u64,
    event: &CcEvent,
) -> CcResult {
    let Some(algorithm) = profiles.for_event(event) else {
        // Profiles always hold profile 0 (Profiles::new and swift_default);
        // echo the event rather than panic if that ever breaks.
        return CcResult::reflect(event);
    };
    match table.get_mut(event.connection_id) {
        Some(slot) => algorithm.on_event(event, slot),
        None => {
            *outside += 1;
            let mut scratch = ConnectionState::Empty;
            algorithm.on_event(event, &mut scratch)
        }
    }
}

/// What the threaded loop does when no event is waiting.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Idle {
    /// Busy-poll with a spin hint (a dedicated lcore).
    #[default]
    Spin,
    /// Yield the thread (shared cores, tests).
    Yield,
}

impl Idle {
    fn wait(self) {
        match self {
            Idle::Spin => std::hint::spin_loop(),
            Idle::Yield => thread::yield_now(),
        }
    }
}

/// An RUE running on its own thread.
pub struct RueThread {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<Rue>,
}

impl RueThread {
    /// Stops the loop (after it drains queued events) and returns the RUE,
    /// or `None` if its thread panicked.
    pub fn stop(self) -> Option<Rue> {
        self.stop.store(true, Ordering::Release);
        self.handle.join().ok()
    }
}

#[cfg(test)]
mod tests;
