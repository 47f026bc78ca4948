//! The per-connection state table of the RUE core, split hot/cold.
//!
//! Layer: storage inside the engine, indexed by connection id. It owns every
//! connection's algorithm state and nothing else; after construction it
//! allocates only a chunk of cold slots, at the first use of one of the
//! chunk's [`COLD_CHUNK`] connections.
//!
//! Each connection has a 2-byte hot word, a 4-byte PLB word and a 64-byte
//! cold slot (one cache line, a [`ConnectionState`]). Cold slots come in
//! chunks allocated when first written: single-path Swift never writes one
//! unless a retransmit event or a caller's `get` moves its state there, and
//! allocated up front they would be 64 of the 70 bytes per connection (64 MiB
//! at 1 M connections, `falcon bench scale`). Single-path Swift, the
//! common case, keeps its ncwnd fraction in the hot word and its PLB
//! counters in the PLB word (the rest of [`SwiftState`] is multipath's), and
//! profiles without PLB and PRR never touch the PLB word. Everything else
//! (DCQCN, multipath Swift) lives in the cold slot, and the hot word says
//! so. A default Swift event then reads and writes 2 bytes of a 2 MiB array
//! at 1 M connections instead of a cache line of a 64 MiB one.
//!
//! Measured on the 2-core KVM AMD EPYC (Zen 3, 32 MiB L3, 4 KiB pages, no
//! huge pages for us): a standalone loop of random read-modify-writes over
//! 1 M connections, 64-byte slots 13–16 ns per access, 8-byte words 2.1 ns;
//! pointer chasing 15–18 ns up to 4 MiB, 77 ns at 8 MiB (beyond the 2048
//! entries of the L2 TLB), 160 ns at 64 MiB. In `falcon bench rue` an 8-byte
//! hot word (8 MiB) still cost ≈ 18 ns per event in the lookahead's loads
//! (`perf annotate`) at 1 M connections, hence 2 bytes.

use crate::algorithm::ConnectionState;
use crate::plb::PlbState;
use crate::swift::{MultipathState, SwiftState};

/// One cold slot: a connection's [`ConnectionState`] on its own 64-byte
/// cache line.
#[derive(Clone, Copy, Debug, Default)]
#[repr(align(64))]
pub(super) struct Slot(pub(super) ConnectionState);

/// Where a connection's state lives, and single-path Swift's ncwnd
/// fraction: bits 0..10 the fraction (1/1024 requests), bits 14..16 the kind
/// (0 empty, 1 Swift here, 2 in the cold slot). Zero is an empty connection,
/// which is also single-path Swift's default state, so a zeroed table is a
/// table of new connections.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Hot(u16);

impl Hot {
    const EMPTY: Hot = Hot(0);
    const KIND_SHIFT: u32 = 14;
    const KIND_SWIFT: u16 = 1;
    const KIND_COLD: u16 = 2;
    pub(super) const COLD: Hot = Hot(Self::KIND_COLD << Self::KIND_SHIFT);
    /// Largest fraction the hot word holds (Swift's are ≤ 1023).
    const MAX_FRACTION: u16 = 1023;

    /// Single-path Swift state kept here (a fraction ≤ 1023).
    #[inline(always)]
    pub(super) fn swift(ncwnd_fraction: u16) -> Hot {
        Hot(Self::KIND_SWIFT << Self::KIND_SHIFT | (ncwnd_fraction & Self::MAX_FRACTION))
    }

    /// The state is in the cold slot.
    #[inline(always)]
    pub(super) fn is_cold(self) -> bool {
        self.0 >> Self::KIND_SHIFT == Self::KIND_COLD
    }

    #[inline(always)]
    fn is_swift(self) -> bool {
        self.0 >> Self::KIND_SHIFT == Self::KIND_SWIFT
    }

    /// Swift's ncwnd fraction (0 when empty).
    #[inline(always)]
    pub(super) fn ncwnd_fraction(self) -> u16 {
        self.0 & Self::MAX_FRACTION
    }
}

/// Cold slots per chunk (64 KiB).
pub const COLD_CHUNK: usize = 1024;

/// An empty cold slot, read where a chunk is not allocated.
static EMPTY_SLOT: Slot = Slot(ConnectionState::Empty);

/// The cold slots of `len` connections in chunks of [`COLD_CHUNK`],
/// allocated when one of their slots is first written. A slot of a chunk
/// not allocated reads as [`ConnectionState::Empty`].
#[derive(Clone, Debug)]
pub(super) struct ColdSlots {
    chunks: Vec<Option<Box<[Slot]>>>,
    len: usize,
}

impl ColdSlots {
    fn new(len: usize) -> Self {
        ColdSlots {
            chunks: vec![None; len.div_ceil(COLD_CHUNK)],
            len,
        }
    }

    #[inline]
    pub(super) fn get(&self, index: usize) -> Option<&Slot> {
        if index >= self.len {
            return None;
        }
        Some(match &self.chunks[index / COLD_CHUNK] {
            Some(chunk) => &chunk[index % COLD_CHUNK],
            None => &EMPTY_SLOT,
        })
    }

    /// The slot, its chunk allocated if it was not.
    #[inline]
    pub(super) fn get_mut(&mut self, index: usize) -> Option<&mut Slot> {
        if index >= self.len {
            return None;
        }
        let chunk = self.chunks[index / COLD_CHUNK]
            .get_or_insert_with(|| vec![Slot::default(); COLD_CHUNK].into_boxed_slice());
        Some(&mut chunk[index % COLD_CHUNK])
    }

    /// The slot if its chunk is allocated (a reset of a slot never written
    /// allocates nothing).
    fn get_mut_allocated(&mut self, index: usize) -> Option<&mut Slot> {
        let chunk = self.chunks.get_mut(index / COLD_CHUNK)?.as_mut()?;
        chunk.get_mut(index % COLD_CHUNK)
    }

    /// Chunks allocated.
    #[cfg(test)]
    fn allocated_chunks(&self) -> usize {
        self.chunks.iter().filter(|c| c.is_some()).count()
    }
}

/// The per-connection state table, indexed by connection id.
///
/// Invariants: a connection's PLB word holds its Swift PLB counters while
/// its hot word says Swift, and is zero while the hot word says empty.
#[derive(Clone, Debug)]
pub struct StateTable {
    pub(super) hot: Vec<Hot>,
    pub(super) plb: Vec<PlbState>,
    pub(super) cold: ColdSlots,
}

impl StateTable {
    /// A table for ids `0..connections`, all empty. Allocates
    /// `connections × 6` bytes and a pointer per [`COLD_CHUNK`] (2 MiB hot,
    /// 4 MiB PLB for 1 M connections), then 64 KiB per chunk of cold slots
    /// in use.
    pub fn new(connections: u32) -> Self {
        let n = connections as usize;
        StateTable {
            hot: vec![Hot::EMPTY; n],
            plb: vec![PlbState::default(); n],
            cold: ColdSlots::new(n),
        }
    }

    /// Number of slots.
    pub fn len(&self) -> usize {
        self.hot.len()
    }

    /// Whether the table has no slots.
    pub fn is_empty(&self) -> bool {
        self.hot.is_empty()
    }

    /// A connection's state, if the id has a slot. Takes `&mut self`
    /// because a state kept in the hot word is moved to the cold slot to be
    /// lent out (the connection's later events then use the cold slot, with
    /// the same results).
    pub fn get(&mut self, connection_id: u32) -> Option<&ConnectionState> {
        self.get_mut(connection_id).map(|state| &*state)
    }

    /// A connection's state, mutable, if the id has a slot (moved to the
    /// cold slot as for [`StateTable::get`]).
    #[inline]
    pub fn get_mut(&mut self, connection_id: u32) -> Option<&mut ConnectionState> {
        let index = connection_id as usize;
        let hot = self.hot.get_mut(index)?;
        let plb = *self.plb.get(index)?;
        let slot = &mut self.cold.get_mut(index)?.0;
        if hot.is_cold() {
            return Some(slot);
        }
        *slot = if hot.is_swift() {
            ConnectionState::Swift(SwiftState {
                ncwnd_fraction: hot.ncwnd_fraction(),
                plb,
                multipath: MultipathState::default(),
            })
        } else {
            ConnectionState::Empty
        };
        *hot = Hot::COLD;
        Some(slot)
    }

    /// Forgets a connection's state (when its id is reused).
    pub fn reset(&mut self, connection_id: u32) {
        let index = connection_id as usize;
        if let (Some(hot), Some(plb)) = (self.hot.get_mut(index), self.plb.get_mut(index)) {
            *hot = Hot::EMPTY;
            *plb = PlbState::default();
            if let Some(slot) = self.cold.get_mut_allocated(index) {
                slot.0 = ConnectionState::Empty;
            }
        }
    }

    /// Single-path Swift's state of a connection whose state is in the cold
    /// slot: a Swift state there with multipath flows (or a fraction the hot
    /// word cannot hold) stays there and is used in place by `run`;
    /// otherwise the connection moves to its hot and PLB words, starting
    /// from the cold Swift state's fields, or from Swift's default for
    /// another algorithm's state (as `AnyAlgorithm::on_event`).
    pub(super) fn swift_from_cold<R>(
        &mut self,
        index: usize,
        run: impl FnOnce(&mut u16, &mut PlbState) -> R,
    ) -> Option<R> {
        let hot = self.hot.get_mut(index)?;
        let plb_word = self.plb.get_mut(index)?;
        let slot = &mut self.cold.get_mut(index)?.0;
        let (mut fraction, mut plb) = match slot {
            ConnectionState::Swift(state)
                if state.multipath != MultipathState::default()
                    || state.ncwnd_fraction > Hot::MAX_FRACTION =>
            {
                return Some(run(&mut state.ncwnd_fraction, &mut state.plb));
            }
            ConnectionState::Swift(state) => (state.ncwnd_fraction, state.plb),
            _ => (0, PlbState::default()),
        };
        let result = run(&mut fraction, &mut plb);
        if fraction > Hot::MAX_FRACTION {
            // Never with Swift's arithmetic (fractions ≤ 1023); kept total.
            *slot = ConnectionState::Swift(SwiftState {
                ncwnd_fraction: fraction,
                plb,
                multipath: MultipathState::default(),
            });
            return Some(result);
        }
        *hot = Hot::swift(fraction);
        *plb_word = plb;
        Some(result)
    }

    /// The prefetch by load of a connection's hot word (and its PLB word
    /// with `plb`).
    #[inline(always)]
    pub(super) fn touch_hot(&self, connection_id: u32, plb: bool) -> u32 {
        let index = connection_id as usize;
        let hot = self.hot.get(index).map_or(0, |hot| u32::from(hot.0 & 1));
        if plb {
            hot ^ self.plb.get(index).map_or(0, |plb| plb.bits() & 1)
        } else {
            hot
        }
    }

    /// The prefetch by load of a connection's hot word and cold slot.
    #[inline(always)]
    pub(super) fn touch_cold(&self, connection_id: u32) -> u32 {
        let cold = self.cold.get(connection_id as usize).map_or(0, |slot| {
            u32::from(matches!(slot.0, ConnectionState::Empty))
        });
        self.touch_hot(connection_id, false) ^ cold
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cold_chunks_are_allocated_at_first_write_only() {
        let n = 3 * COLD_CHUNK as u32 + 5;
        let mut table = StateTable::new(n);
        assert_eq!(table.cold.allocated_chunks(), 0);
        table.reset(7);
        assert_eq!(table.cold.allocated_chunks(), 0, "a reset writes nothing");
        assert!(matches!(
            table.cold.get(2 * COLD_CHUNK).map(|s| s.0),
            Some(ConnectionState::Empty)
        ));
        assert!(table.cold.get(n as usize).is_none());
        assert!(table.get_mut(n).is_none());
        // A Swift state in the hot word moves to its cold slot when lent.
        table.hot[COLD_CHUNK + 1] = Hot::swift(500);
        let lent = table.get(COLD_CHUNK as u32 + 1).copied();
        assert!(matches!(lent, Some(ConnectionState::Swift(s)) if s.ncwnd_fraction == 500));
        assert_eq!(table.cold.allocated_chunks(), 1);
        assert!(table.hot[COLD_CHUNK + 1].is_cold());
        // The last, partial chunk holds the last ids.
        assert!(table.get_mut(n - 1).is_some());
        assert_eq!(table.cold.allocated_chunks(), 2);
        table.reset(COLD_CHUNK as u32 + 1);
        assert!(matches!(
            table.cold.get(COLD_CHUNK + 1).map(|s| s.0),
            Some(ConnectionState::Empty)
        ));
        assert_eq!(table.hot[COLD_CHUNK + 1], Hot::EMPTY);
    }
}
