//! The batched hot path of the RUE core: one batch of events at a time, split
//! into runs of one profile, each run dispatched once; a single-path Swift
//! run goes through Swift's lanes.
//!
//! Layer: inside the engine, between its queues and the algorithms. It owns
//! no state (the lanes it computes in are scratch the engine lends it); it
//! must produce, event for event, exactly what the per-event path
//! (`run_one`) produces, in order (`tests/differential.rs` checks every
//! result field, the counters and the final state table; the lanes' own
//! tests check their arithmetic against the building blocks).
//!
//! A Swift run, in three loops:
//! 1. per event: the connection's ncwnd fraction from its hot word, and
//!    whether the lanes' NIC window applies (an ACK/NACK event whose
//!    connection's state is in its hot word and appears for the first time
//!    in the batch);
//! 2. over lanes (`Swift::prepare_batch`): one gather of the events' fields,
//!    then the event-only step (target, smoothing, fabric window, marker,
//!    gap, RTO) and the NIC window, branch-free;
//! 3. per event in order: the result, written straight into its queue slot,
//!    and the hot word; the events left out of the lanes' NIC window
//!    (retransmits, repeats of a connection, cold or unknown connections)
//!    run one by one there, so that an event sees what an earlier one of
//!    its connection wrote.
//!
//! Why: one event's path is a dependency chain (square root → division → window
//! → fixed point → NIC window → fraction) longer than the out-of-order window,
//! with data-dependent rule choices that LLVM compiles to branches (≈ 2
//! mispredictions per event, callgrind --branch-sim), so events run one after
//! the other at the chain's latency. Over lanes, the steps are branch-free and
//! independent across events. Measured figures are in
//! `dataplane/app/PERFORMANCE.md`.

use crate::algorithm::{AnyAlgorithm, Profiles};
use crate::format::{CcEvent, CcResult, EventType};
use crate::plb::PlbState;
use crate::swift::{AckStep, BatchLanes, Swift};

use super::table::Hot;
use super::{run_one, StateTable};

/// Events per compute batch.
pub(super) const BATCH: usize = 32;

/// Shortest run worth the lanes: their loops run over all [`BATCH`] lanes
/// and clear a 4096-bit repeat filter whatever the run's length, so one
/// event cost ≈ 3 900 instructions through them against ≈ 600 one by one
/// (callgrind, `falcon-core`'s `push64_psp_profile`, where the engine runs
/// the RUE inline with one event per call). Shorter runs go one by one,
/// which is the reference path the lanes are checked against.
pub(super) const MIN_LANE_RUN: usize = 4;

/// The lanes a Swift batch computes in, kept by the engine across batches.
pub(super) type Lanes = BatchLanes<BATCH>;

/// Runs `events` (at most [`BATCH`]) in order, writing their results to
/// `results` in place (no copy through a buffer), and returns how many ran:
/// all of them unless the result queue lacks room (the caller checks first).
#[inline]
pub(super) fn run_batch(
    profiles: &mut Profiles,
    table: &mut StateTable,
    lanes: &mut Lanes,
    outside: &mut u64,
    events: &[CcEvent],
    results: &mut rtrb::Producer<CcResult>,
) -> usize {
    let only = profiles.only_index();
    let mut start = 0;
    while let Some(first) = events.get(start) {
        let (index, mut run) = match only {
            Some(index) => (index, events.len() - start),
            None => {
                let index = profiles.effective_index(first);
                let run = events[start..]
                    .iter()
                    .take_while(|e| profiles.effective_index(e) == index)
                    .count();
                (index, run)
            }
        };
        // The first event of a connection instance starts from a blank state
        // (rue::format, "Connection instances"): it opens a run of its own,
        // whose state is reset before it runs, so that the events before it
        // in the batch (its id's previous connection) run on the old state.
        if first.new_instance {
            table.reset(first.connection_id);
        }
        if let Some(next) = events[start + 1..start + run]
            .iter()
            .position(|e| e.new_instance)
        {
            run = next + 1;
        }
        let run_events = &events[start..start + run];
        // Slots initialized with `Default` (three stores each), then written in
        // place. (`fill_from_iter` would pass each result through an `Option`
        // in memory; a buffer and a copy are no better.)
        let Ok(mut chunk) = results.write_chunk(run) else {
            return start;
        };
        let (first, second) = chunk.as_mut_slices();
        match profiles.get_mut(index) {
            Some(AnyAlgorithm::Swift(swift)) if swift.is_single_path() && run >= MIN_LANE_RUN => {
                swift_run(swift, table, lanes, outside, run_events, (first, second));
            }
            Some(algorithm) => {
                let slots = first.iter_mut().chain(second.iter_mut());
                for (slot, event) in slots.zip(run_events) {
                    *slot = run_one(algorithm, table, outside, event);
                }
            }
            // Profiles always hold profile 0; echo rather than panic.
            None => {
                let slots = first.iter_mut().chain(second.iter_mut());
                for (slot, event) in slots.zip(run_events) {
                    *slot = CcResult::reflect(event);
                }
            }
        }
        chunk.commit_all();
        start += run;
    }
    start
}

/// A run of one single-path Swift profile (at most [`BATCH`] events), in
/// three loops (see the module doc).
#[inline(always)]
fn swift_run(
    swift: &mut Swift,
    table: &mut StateTable,
    lanes: &mut Lanes,
    outside: &mut u64,
    events: &[CcEvent],
    (first, second): (&mut [CcResult], &mut [CcResult]),
) {
    // 1. Repeats are found with a 4096-bit filter on the id: a collision
    // only sends an event down the one-by-one path. (A lane event has no
    // earlier event of its connection in the batch, so the state gathered
    // here is the state it would have seen.)
    let mut seen = [0u64; 64];
    let mut fractions = [0u16; BATCH];
    let mut in_lanes = [false; BATCH];
    for (i, event) in events.iter().enumerate().take(BATCH) {
        let index = event.connection_id as usize;
        let bit = index & 4095;
        let word = &mut seen[bit >> 6];
        let repeat = *word & (1 << (bit & 63)) != 0;
        *word |= 1 << (bit & 63);
        // Ids outside the table read as cold: one by one.
        let hot = table.hot.get(index).copied().unwrap_or(Hot::COLD);
        fractions[i] = hot.ncwnd_fraction();
        in_lanes[i] = !repeat & !hot.is_cold() & (event.event_type != EventType::Retransmit);
    }

    // 2. Retransmit events get lanes too (unused): a branch in the gather
    // would cost more than the 2 % of wasted work.
    swift.prepare_batch(events, &fractions, lanes);

    // 3. The two parts of the result chunk, each with its events.
    let split = first.len().min(events.len());
    let (events_first, events_second) = events.split_at(split);
    let parts = [(events_first, first, 0), (events_second, second, split)];
    if swift.uses_plb_state() {
        for (events, slots, offset) in parts {
            finish::<true>(
                swift, table, lanes, outside, &in_lanes, events, slots, offset,
            );
        }
    } else {
        for (events, slots, offset) in parts {
            finish::<false>(
                swift, table, lanes, outside, &in_lanes, events, slots, offset,
            );
        }
    }
}

/// Loop 3 of a Swift run over `events`, the batch's events from `offset`
/// on, and their result slots. `PLB`: the profile uses the PLB word (PLB or
/// PRR on); without, a lane event's PLB counters are neither read nor
/// written, so the PLB word stays cold.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn finish<const PLB: bool>(
    swift: &mut Swift,
    table: &mut StateTable,
    lanes: &Lanes,
    outside: &mut u64,
    in_lanes: &[bool; BATCH],
    events: &[CcEvent],
    slots: &mut [CcResult],
    offset: usize,
) {
    for (i, (event, slot)) in events.iter().zip(slots).enumerate() {
        let i = offset + i;
        let index = event.connection_id as usize;
        // `i < BATCH`: the run has at most BATCH events.
        if in_lanes.get(i).copied().unwrap_or(false) {
            let StateTable { hot, plb, .. } = &mut *table;
            // Invariant: a lane event's id is in the table (else it would
            // not be in the lanes); the fallback below would still be right.
            if let Some(word) = hot.get_mut(index) {
                if PLB {
                    if let Some(counters) = plb.get_mut(index) {
                        let (result, fraction) =
                            swift.finish_lane::<BATCH, true>(event, lanes, i, counters);
                        *slot = result;
                        *word = Hot::swift(fraction);
                        continue;
                    }
                } else {
                    let mut unused = PlbState::default();
                    let (result, fraction) =
                        swift.finish_lane::<BATCH, false>(event, lanes, i, &mut unused);
                    *slot = result;
                    *word = Hot::swift(fraction);
                    continue;
                }
            }
        }
        *slot = one_by_one(swift, table, outside, event, &lanes.ack.step(i));
    }
}

/// An event the lanes' NIC window left out (a retransmit, a repeat of a
/// connection in the batch, a cold or unknown connection), with the
/// per-event path.
#[inline(never)]
fn one_by_one(
    swift: &mut Swift,
    table: &mut StateTable,
    outside: &mut u64,
    event: &CcEvent,
    step: &AckStep,
) -> CcResult {
    let index = event.connection_id as usize;
    let retransmit = event.event_type == EventType::Retransmit;
    let with_plb = swift.uses_plb_state();
    let StateTable { hot, plb, .. } = &mut *table;
    match (hot.get_mut(index), plb.get_mut(index)) {
        // The connection's Swift state (or none yet, which reads as Swift's
        // default) is in its hot and PLB words.
        (Some(word), Some(plb_word)) if !word.is_cold() => {
            let mut fraction = word.ncwnd_fraction();
            let mut unused = PlbState::default();
            let counters = if with_plb { plb_word } else { &mut unused };
            let result = if retransmit {
                swift.on_retransmit(event, counters)
            } else {
                swift.finish_ack(event, step, &mut fraction, counters)
            };
            *word = Hot::swift(fraction);
            result
        }
        (Some(_), _) => cold_event(swift, table, index, event, step),
        _ => {
            *outside += 1;
            let (mut fraction, mut plb) = (0, PlbState::default());
            if retransmit {
                swift.on_retransmit(event, &mut plb)
            } else {
                swift.finish_ack(event, step, &mut fraction, &mut plb)
            }
        }
    }
}

/// An event of a connection whose state is in the cold slot (it last ran
/// another algorithm, a multipath profile, or was inspected).
#[inline(never)]
fn cold_event(
    swift: &mut Swift,
    table: &mut StateTable,
    index: usize,
    event: &CcEvent,
    step: &AckStep,
) -> CcResult {
    let run = |fraction: &mut u16, plb: &mut PlbState| {
        if event.event_type == EventType::Retransmit {
            swift.on_retransmit(event, plb)
        } else {
            swift.finish_ack(event, step, fraction, plb)
        }
    };
    // Invariant: the caller found the id in the table.
    table
        .swift_from_cold(index, run)
        .unwrap_or_else(|| CcResult::reflect(event))
}
