//! The batched hot path of the RUE core: one batch of events at a time, split
//! into runs of one profile, each run dispatched once; a single-path Swift
//! run goes through Swift's lanes.
//!
//! Layer: inside the engine, between its queues and the algorithms. It owns
//! no state; it must produce, event for event, exactly what the per-event
//! path (`run_one`) produces, in order (`tests/differential.rs` checks every
//! result field, the counters and the final state table; the lanes' own
//! tests check their arithmetic against the building blocks).
//!
//! A Swift run, in three loops:
//! 1. the event-only step of every event over lanes (`Swift::prepare_acks`:
//!    target, smoothing, fabric window, marker, gap, RTO);
//! 2. the NIC window over lanes of the ACK/NACK events whose connection's
//!    state is in its hot word and appears for the first time in the batch
//!    (`Swift::nic_batch`);
//! 3. per event in order: the state words, PLB, counters and the result;
//!    the events left out of step 2 (retransmits, repeats of a connection,
//!    cold or unknown connections) run there one by one, so that an event
//!    sees what an earlier one of its connection wrote.
//!
//! Why: one event's path was a dependency chain (square root → division →
//! window → fixed point → NIC window → fraction) longer than the
//! out-of-order window, with data-dependent rule choices that LLVM compiled
//! to branches (≈ 2 mispredictions per event, callgrind --branch-sim), so
//! events ran one after the other at the chain's latency. Over lanes, the
//! steps are branch-free and independent across events. Measured numbers
//! are in `engine`'s module doc.

use crate::algorithm::{AnyAlgorithm, Profiles};
use crate::format::{CcEvent, CcResult, EventType};
use crate::plb::PlbState;
use crate::swift::{AckLanes, AckStep, NicInputs, NicLanes, Swift};

use super::table::Hot;
use super::{run_one, StateTable};

/// Events per compute batch.
pub(super) const BATCH: usize = 32;

/// Runs `events` (at most [`BATCH`]) in order, writing their results to
/// `results` in place (no copy through a buffer), and returns how many ran:
/// all of them unless the result queue lacks room (the caller checks first).
#[inline]
pub(super) fn run_batch(
    profiles: &mut Profiles,
    table: &mut StateTable,
    outside: &mut u64,
    events: &[CcEvent],
    results: &mut rtrb::Producer<CcResult>,
) -> usize {
    let mut start = 0;
    while let Some(first) = events.get(start) {
        let index = profiles.effective_index(first);
        let run = events[start..]
            .iter()
            .take_while(|e| profiles.effective_index(e) == index)
            .count();
        let run_events = &events[start..start + run];
        // Slots initialized with `Default` (three stores each), then written
        // in place. (`fill_from_iter` passed each result through an `Option`
        // in memory, ≈ 60 instructions per event in callgrind; a buffer and
        // a copy measured no better than this.)
        let Ok(mut chunk) = results.write_chunk(run) else {
            return start;
        };
        let (first, second) = chunk.as_mut_slices();
        let slots = first.iter_mut().chain(second.iter_mut());
        match profiles.get_mut(index) {
            Some(AnyAlgorithm::Swift(swift)) if swift.is_single_path() => {
                swift_run(swift, table, outside, run_events, slots);
            }
            Some(algorithm) => {
                for (slot, event) in slots.zip(run_events) {
                    *slot = run_one(algorithm, table, outside, event);
                }
            }
            // Profiles always hold profile 0; echo rather than panic.
            None => {
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

/// A run of one single-path Swift profile.
#[inline(always)]
fn swift_run<'a>(
    swift: &mut Swift,
    table: &mut StateTable,
    outside: &mut u64,
    events: &[CcEvent],
    slots: impl Iterator<Item = &'a mut CcResult>,
) {
    let mut lanes = AckLanes::<BATCH>::default();
    // Retransmit events get a step too (unused): a branch here would cost
    // more than the 2 % of wasted work.
    swift.prepare_acks(events, &mut lanes);

    // The NIC window of every ACK/NACK event whose connection's state is in
    // its hot word and appears for the first time in the batch, over lanes;
    // the others run one by one below, in order, so that an event sees what
    // an earlier one of its connection wrote. (A lane event has no earlier
    // event of its connection in the batch, so its gathered state is the
    // state it would have seen.) Repeats are found with a 4096-bit filter on
    // the id: a collision only sends an event down the one-by-one path.
    let mut seen = [0u64; 64];
    let mut nic_inputs = NicInputs::<BATCH>::default();
    let mut in_lanes = [false; BATCH];
    for (i, event) in events.iter().enumerate().take(BATCH) {
        let index = event.connection_id as usize;
        let bit = index & 4095;
        let word = &mut seen[bit >> 6];
        let repeat = *word & (1 << (bit & 63)) != 0;
        *word |= 1 << (bit & 63);
        if repeat || event.event_type == EventType::Retransmit {
            continue;
        }
        if let Some(hot) = table.hot.get(index).filter(|hot| !hot.is_cold()) {
            nic_inputs.set(i, event, hot.ncwnd_fraction());
            in_lanes[i] = true;
        }
    }
    let mut nic = NicLanes::<BATCH>::default();
    swift.nic_batch(&nic_inputs, &lanes, &mut nic);

    let with_plb = swift.uses_plb_state();
    // Indices below BATCH, so the lanes need no bounds checks.
    for ((i, event), slot) in events.iter().enumerate().take(BATCH).zip(slots) {
        let step = &lanes.step(i);
        let index = event.connection_id as usize;
        let retransmit = event.event_type == EventType::Retransmit;
        let StateTable { hot, plb, .. } = &mut *table;
        *slot = match (hot.get_mut(index), plb.get_mut(index)) {
            // The common case: the connection's Swift state (or none yet,
            // which reads as Swift's default) is in its hot and PLB words.
            (Some(word), Some(plb_word)) if !word.is_cold() => {
                let mut fraction = word.ncwnd_fraction();
                // Without PLB and PRR the counters are neither read nor
                // written (a default stands in), so the PLB word stays cold.
                let mut unused = PlbState::default();
                let counters = if with_plb { plb_word } else { &mut unused };
                let result = if in_lanes[i] {
                    swift.finish_with_nic(event, step, &nic.lane(i), &mut fraction, counters)
                } else if retransmit {
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
        };
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
