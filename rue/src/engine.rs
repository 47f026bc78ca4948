//! The RUE core: per-datapath-core CC event and result queues, the
//! per-connection state table, and the loop that runs algorithms over them
//! (OCP Falcon 0.9 §10.6; DESIGN §3–§4).
//!
//! Layer: the engine behind the datapath. It owns one lossless SPSC event
//! queue and one result queue per datapath core (`rtrb`: a full queue
//! refuses, never overwrites; both ends see their occupancy), the state
//! table ([`StateTable`]: a 2-byte hot word, a 4-byte PLB word and a 64-byte
//! cold slot per connection, sized up front for up to 2^24 connections),
//! and the profiles. It never reads a clock (time comes in events), never
//! allocates after construction, and never drops an event: when a result
//! queue is full it stops and leaves events queued.
//!
//! A connection id's state belongs to the connection that holds the id: an
//! event with `new_instance` set (the first of a connection that reuses the
//! id, see [`crate::format`]) runs on a blank state, reset when the event's
//! turn comes, so events of the id's previous connection still queued ahead
//! of it run on their own state and never leave it to the new one.
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
//! # Batches
//!
//! `process` takes events in batches of 32: each batch is split into runs
//! of one profile, dispatched once per run, and a single-path Swift run is
//! computed over lanes (branch-free loops over the batch, which LLVM
//! vectorizes) before the per-event part that reads and writes the state
//! table runs in order. Results are exactly those of the per-event path
//! ([`Rue::handle_event`]); `tests/differential.rs` checks it on ~100 k
//! random events per stream. The batched path's cost rests on f64 lanes
//! (`swift::lanes`), results written in place in the result queue (built on the
//! stack and copied, each would be a store-forwarding stall), lanes kept in
//! [`Rue`] rather than zeroed per batch, and no per-event profile lookup when
//! one profile runs every event. Measured figures are on [`DEFAULT_LOOKAHEAD`]
//! and in `dataplane/app/PERFORMANCE.md`.
//!
//! # FAE lookahead
//!
//! The Falcon paper's FAE prefetches the state of upcoming events. This
//! crate forbids `unsafe` (and `_mm_prefetch` needs it, even on x86-64), so
//! the prefetch is a plain load: before a batch runs, the state words of
//! the events up to K past its end are read in a tight loop and folded into
//! a sink (a "prefetch by load" in bursts). The burst's misses and TLB
//! walks overlap each other; by the time those events run, their lines are
//! in cache. Measured numbers are on [`DEFAULT_LOOKAHEAD`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};

use crate::admission::{Admission, Verdict};
use crate::algorithm::{Algorithm, AnyAlgorithm, ConnectionState, Profiles, StateWords};
use crate::config::ConfigError;
use crate::format::{CcEvent, CcResult, MAX_CONNECTION_ID};

/// Default lookahead distance K of the prefetch-by-load, in events.
///
/// Measured with the loop of `falcon bench rue` at 1 M connections (release,
/// 2-core KVM AMD EPYC, inline push → process → pop, Swift, random connection
/// ids, three runs, other jobs on the other core): with the hot/cold table (a
/// Swift event reads 2 bytes of a 2 MiB array), the batched path, the f64 lanes
/// and `push_slice`/`pop_each`, the lookahead is a wash for single-path Swift:
/// K = 32 19.8–21.3 M/s, K = 0 20.3–21.0 M/s. It pays for DCQCN and multipath
/// Swift, whose state is in the 64-byte cold slots (for one 64-byte slot per
/// connection, K = 32 about doubles the event rate:
/// `dataplane/app/PERFORMANCE.md`).
///
/// Touching slot `i + K` inside the per-event loop, rather than in bursts,
/// gains nothing: each touch misses while the long per-event path fills the
/// reorder buffer behind it. Random 64-byte reads over 64 MiB reach ≈ 12 ns
/// each here in a tight loop (≈ 190 ns dependent), which bounds what any
/// lookahead can hide.
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

/// Bytes of cold RUE state per connection (one cache line; DCQCN and
/// multipath Swift keep their state there).
pub const BYTES_PER_CONNECTION: usize = std::mem::size_of::<Slot>();

/// Bytes of hot RUE state per connection: the hot word, which holds
/// single-path Swift's ncwnd fraction (see [`StateTable`]). A Swift event
/// of a profile without PLB and PRR reads and writes only these.
pub const HOT_BYTES_PER_CONNECTION: usize = std::mem::size_of::<table::Hot>();

/// Bytes of PLB state per connection (single-path Swift's PLB counters,
/// touched only by profiles with PLB or PRR on).
pub const PLB_BYTES_PER_CONNECTION: usize = std::mem::size_of::<crate::plb::PlbState>();

/// The datapath end of one core's queues: push events, pop results.
pub struct RueChannel {
    events: rtrb::Producer<CcEvent>,
    results: rtrb::Consumer<CcResult>,
}

impl core::fmt::Debug for RueChannel {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RueChannel")
            .field("events", &self.event_occupancy())
            .field("event_capacity", &self.event_capacity())
            .field("results", &self.result_occupancy())
            .finish()
    }
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

    /// Queues as many of `events` as fit, in order, and returns how many
    /// (one copy and one index publication for the whole slice; lossless as
    /// [`RueChannel::push`]: what does not fit stays with the caller).
    ///
    /// Fewer index publications matter when the RUE runs on another core.
    /// Inline, with [`pop_slice`] for the results, `falcon bench rue`'s
    /// queue-only loop ran at ≈ 23 M/s against ≈ 35 M/s with `push` and
    /// `pop` (2-core KVM AMD EPYC); with [`pop_each`] instead, the Swift
    /// loop at 1 M connections ran at 18.6–19.5 M/s against 14.6–17.8 M/s
    /// with `push` and `pop` (the same build, alternating runs, other jobs
    /// on the other core), so the bench uses `push_slice` and `pop_each`.
    ///
    /// [`pop_slice`]: RueChannel::pop_slice
    /// [`pop_each`]: RueChannel::pop_each
    #[inline]
    pub fn push_slice(&mut self, events: &[CcEvent]) -> usize {
        let (pushed, _rest) = self.events.push_partial_slice(events);
        pushed.len()
    }

    /// The next result, in event order.
    #[inline]
    pub fn pop(&mut self) -> Option<CcResult> {
        self.results.pop().ok()
    }

    /// Moves up to `out.len()` results, in event order, to the front of
    /// `out` and returns how many (one copy and one index publication).
    #[inline]
    pub fn pop_slice(&mut self, out: &mut [CcResult]) -> usize {
        let (popped, _rest) = self.results.pop_partial_slice(out);
        popped.len()
    }

    /// Hands up to `max` results, in event order, to `consume` where they
    /// lie in the queue (no copy), then frees their slots with one index
    /// publication, and returns how many.
    ///
    /// The cheapest way to drain the results inline: in `falcon bench
    /// rue`'s loop (callgrind, 1 M connections, no-op algorithm) 103
    /// instructions per event against 127 with `pop` per result, which
    /// moves each 48-byte result out and publishes the index each time.
    #[inline]
    pub fn pop_each(&mut self, max: usize, mut consume: impl FnMut(&CcResult)) -> usize {
        let n = self.results.slots().min(max);
        // Cannot fail: n ≤ the slots the queue reported.
        let Ok(chunk) = self.results.read_chunk(n) else {
            return 0;
        };
        let (first, second) = chunk.as_slices();
        first.iter().for_each(&mut consume);
        second.iter().for_each(&mut consume);
        chunk.commit_all();
        n
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
    /// Scratch of the batched Swift path, reused batch after batch.
    lanes: Box<batch::Lanes>,
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
            lanes: Box::default(),
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
            lanes,
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
        // Cannot fail: n ≤ the slots the queue reported.
        let Ok(read) = queues.events.read_chunk(n) else {
            return 0;
        };
        let (head, tail) = read.as_slices();
        let k = *lookahead;
        let mut sink = 0u32;
        let mut outside = 0u64;
        // Events [0, touched) have had their state slot touched.
        let mut touched = 0usize;
        let mut done = 0usize;
        'parts: for part in [head, tail] {
            for events in part.chunks(batch::BATCH) {
                // FAE lookahead in bursts: before a batch runs, the state of
                // the events up to K past its end is read in one tight loop
                // (each event once), so the misses and TLB walks overlap each
                // other instead of each stalling the batch's computation.
                if k > 0 {
                    let until = (done + events.len() + k).min(n);
                    let (a, b) = span(head, tail, touched, until);
                    sink ^= match profiles.only_index() {
                        Some(index) => {
                            let words = profiles.state_words(index);
                            touch(table, words, a) ^ touch(table, words, b)
                        }
                        None => a.iter().chain(b).fold(0, |sink, ahead| {
                            let words = profiles.state_words(profiles.effective_index(ahead));
                            sink ^ touch(table, words, std::slice::from_ref(ahead))
                        }),
                    };
                    touched = touched.max(until);
                }
                // All run: done + events.len() ≤ n ≤ the result queue's free
                // slots, and only this side writes.
                let ran = batch::run_batch(
                    profiles,
                    table,
                    lanes,
                    &mut outside,
                    events,
                    &mut queues.results,
                );
                done += ran;
                if ran < events.len() {
                    break 'parts;
                }
            }
        }
        read.commit(done);
        *touch_sink ^= sink;
        counters.events += done as u64;
        counters.outside_table += outside;
        done
    }

    /// Processes one event directly, without queues (simulations, tests).
    pub fn handle_event(&mut self, event: &CcEvent) -> CcResult {
        self.counters.events += 1;
        if event.new_instance {
            self.table.reset(event.connection_id);
        }
        let Some(algorithm) = self.profiles.for_event(event) else {
            // Profiles always hold profile 0 (Profiles::new and swift_default);
            // echo the event rather than panic if that ever breaks.
            return CcResult::reflect(event);
        };
        let mut outside = 0;
        let result = run_one(algorithm, &mut self.table, &mut outside, event);
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

    /// A connection's state, if the id has a slot (`&mut self`: see
    /// [`StateTable::get`]).
    pub fn state(&mut self, connection_id: u32) -> Option<&ConnectionState> {
        self.table.get(connection_id)
    }

    /// Forgets a connection's state (when a connection id is reused; an
    /// event with `new_instance` does the same on the RUE's own core).
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

/// Events `from..to` of a queue chunk's two slices, as two slices.
#[inline(always)]
fn span<'a, T>(head: &'a [T], tail: &'a [T], from: usize, to: usize) -> (&'a [T], &'a [T]) {
    let split = head.len();
    let first = head.get(from.min(split)..to.min(split)).unwrap_or(&[]);
    let second = tail
        .get(from.saturating_sub(split)..to.saturating_sub(split))
        .unwrap_or(&[]);
    (first, second)
}

/// The prefetch by load of the state words of `events`, all of one
/// profile that uses `words`: one tight loop per kind of word, so that the
/// loads' misses overlap.
#[inline(always)]
fn touch(table: &StateTable, words: StateWords, events: &[CcEvent]) -> u32 {
    match words {
        StateWords::None => 0,
        StateWords::Hot => events
            .iter()
            .fold(0, |sink, e| sink ^ table.touch_hot(e.connection_id, false)),
        StateWords::HotPlb => events
            .iter()
            .fold(0, |sink, e| sink ^ table.touch_hot(e.connection_id, true)),
        StateWords::Cold => events
            .iter()
            .fold(0, |sink, e| sink ^ table.touch_cold(e.connection_id)),
    }
}

/// One event of an algorithm with the connection's slot (a blank state for
/// ids outside the table): the per-event path.
#[inline(always)]
fn run_one(
    algorithm: &mut AnyAlgorithm,
    table: &mut StateTable,
    outside: &mut u64,
    event: &CcEvent,
) -> CcResult {
    let id = event.connection_id;
    // Stateless: the table is neither read nor written (`get_mut` would move
    // a hot state to the cold slot).
    if let AnyAlgorithm::Bypass(bypass) = algorithm {
        *outside += u64::from(id as usize >= table.len());
        return bypass.on_event(event, &mut ());
    }
    match table.get_mut(id) {
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

mod batch;
mod table;

use table::Slot;
pub use table::StateTable;

#[cfg(test)]
mod tests;
