//! The engine's connection slots, stored in place.
//!
//! Layer: engine, memory. Owns [`Slab`]: slot `i` is an `Option<T>` in a
//! chunk of [`CHUNK`] slots, the chunk allocated when a slot in it is first
//! written. Connections were boxed, one allocation each behind a table of
//! pointers: at a million connections every lookup missed the cache twice,
//! once on the pointer table (8 MiB) and once on the connection. The chunk
//! table here is 1/[`CHUNK`] of that (128 KiB at a million), so a lookup
//! reaches the connection with one miss, and no per-connection allocation
//! (or malloc header) remains.

use core::ops::{Index, IndexMut};

/// Slots a chunk holds (a chunk of connections is ~120 KiB).
const CHUNK: usize = 64;

/// Slots `0..len`, each `None` or a value, chunks allocated on first write.
#[derive(Debug)]
pub(super) struct Slab<T> {
    chunks: Vec<Option<Box<[Option<T>; CHUNK]>>>,
    len: usize,
    /// What a slot of a chunk not yet allocated reads as.
    none: Option<T>,
}

impl<T> Slab<T> {
    /// Slots `0..len`, all empty; nothing allocated but the chunk table.
    pub(super) fn new(len: usize) -> Self {
        Slab {
            chunks: (0..len.div_ceil(CHUNK)).map(|_| None).collect(),
            len,
            none: None,
        }
    }

    /// Slots.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// More slots, up to `len` (never fewer).
    pub(super) fn grow_to(&mut self, len: usize) {
        if len > self.len {
            self.chunks.resize_with(len.div_ceil(CHUNK), || None);
            self.len = len;
        }
    }

    /// Slot `index`, if it exists.
    #[inline]
    pub(super) fn get(&self, index: usize) -> Option<&Option<T>> {
        if index >= self.len {
            return None;
        }
        Some(match &self.chunks[index / CHUNK] {
            Some(chunk) => &chunk[index % CHUNK],
            None => &self.none,
        })
    }

    /// Slot `index` for writing, if it exists (its chunk allocated).
    #[inline]
    pub(super) fn get_mut(&mut self, index: usize) -> Option<&mut Option<T>> {
        if index >= self.len {
            return None;
        }
        let chunk = self.chunks[index / CHUNK].get_or_insert_with(new_chunk);
        Some(&mut chunk[index % CHUNK])
    }

    /// The value in slot `index`, if any (nothing allocated).
    #[inline]
    pub(super) fn value(&self, index: usize) -> Option<&T> {
        self.chunks.get(index / CHUNK)?.as_ref()?[index % CHUNK].as_ref()
    }

    /// The value in slot `index` for writing, if any (nothing allocated).
    #[inline]
    pub(super) fn value_mut(&mut self, index: usize) -> Option<&mut T> {
        self.chunks.get_mut(index / CHUNK)?.as_mut()?[index % CHUNK].as_mut()
    }

    /// The values, slot order.
    pub(super) fn iter(&self) -> impl Iterator<Item = &Option<T>> {
        self.chunks.iter().flatten().flat_map(|chunk| chunk.iter())
    }

    /// The values, slot order, for writing (only allocated chunks).
    pub(super) fn iter_mut(&mut self) -> impl Iterator<Item = &mut Option<T>> {
        self.chunks
            .iter_mut()
            .flatten()
            .flat_map(|chunk| chunk.iter_mut())
    }
}

/// A chunk of empty slots, built on the heap (a chunk of connections is too
/// large for the stack). An array, not a slice: indexing it by
/// `index % CHUNK` needs no bounds check.
fn new_chunk<T>() -> Box<[Option<T>; CHUNK]> {
    let slots: Box<[Option<T>]> = (0..CHUNK).map(|_| None).collect();
    match slots.try_into() {
        Ok(chunk) => chunk,
        Err(_) => unreachable!("CHUNK slots collected"),
    }
}

impl<T> Index<usize> for Slab<T> {
    type Output = Option<T>;

    /// Panics past `len`, as a slice does.
    #[inline]
    fn index(&self, index: usize) -> &Option<T> {
        match self.get(index) {
            Some(slot) => slot,
            None => panic!("slot {index} of {}", self.len),
        }
    }
}

impl<T> IndexMut<usize> for Slab<T> {
    /// Panics past `len`, as a slice does.
    #[inline]
    fn index_mut(&mut self, index: usize) -> &mut Option<T> {
        let len = self.len;
        match self.get_mut(index) {
            Some(slot) => slot,
            None => panic!("slot {index} of {len}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_read_empty_until_written_and_chunks_come_at_first_write() {
        let mut slab: Slab<u64> = Slab::new(200);
        assert_eq!(slab.len(), 200);
        assert_eq!(slab[150], None);
        assert!(slab.get(200).is_none());
        assert_eq!(slab.iter().count(), 0, "no chunk yet");
        slab[130] = Some(7);
        slab[5] = Some(1);
        assert_eq!((slab[130], slab[5], slab[131]), (Some(7), Some(1), None));
        assert_eq!((slab.value(130), slab.value(131)), (Some(&7), None));
        assert_eq!(slab.value(70), None, "chunk never written: not allocated");
        assert_eq!(slab.value(9_999), None);
        *slab.value_mut(5).unwrap() = 2;
        assert_eq!(slab[5], Some(2));
        slab[5] = Some(1);
        assert_eq!(slab.iter().count(), 2 * CHUNK, "two chunks");
        let values: Vec<u64> = slab.iter().flatten().copied().collect();
        assert_eq!(values, [1, 7]);
        for v in slab.iter_mut().flatten() {
            *v += 1;
        }
        assert_eq!(slab[130].take(), Some(8));
        assert_eq!(slab[130], None);
        slab.grow_to(300);
        slab[299] = Some(3);
        assert_eq!(slab.get(299), Some(&Some(3)));
        slab.grow_to(10);
        assert_eq!(slab.len(), 300, "never shrinks");
    }

    #[test]
    #[should_panic(expected = "slot 12 of 12")]
    fn indexing_past_the_end_panics_as_a_slice_does() {
        let slab: Slab<u8> = Slab::new(12);
        let _ = slab[12];
    }
}
