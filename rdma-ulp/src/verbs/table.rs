//! A slab of objects named by generation-checked handles.
//!
//! Layer: verbs, storage of PDs, CQs, SRQs, AHs and MRs. Owns [`Table`]:
//! a handle is `index << 8 | generation`, so a destroyed object's handle
//! never names the object that reuses its slot (within 256 reuses of the
//! slot). Never panics on a handle from outside: an unknown or stale one is
//! `None`.

/// Bits of a handle's generation.
pub(crate) const GENERATION_BITS: u32 = 8;
const GENERATION_MASK: u32 = (1 << GENERATION_BITS) - 1;

#[derive(Debug)]
struct Slot<T> {
    generation: u8,
    value: Option<T>,
}

/// Objects with handles (see the module doc).
#[derive(Debug)]
pub(crate) struct Table<T> {
    slots: Vec<Slot<T>>,
    free: Vec<u32>,
    live: usize,
    limit: usize,
}

impl<T> Table<T> {
    /// An empty table holding at most `limit` objects (and at most 2^24).
    pub(crate) fn new(limit: usize) -> Table<T> {
        Table {
            slots: Vec::new(),
            free: Vec::new(),
            live: 0,
            limit: limit.min(1 << (32 - GENERATION_BITS)),
        }
    }

    /// Stores `value`; its handle, or `None` at the limit.
    pub(crate) fn insert(&mut self, value: T) -> Option<u32> {
        if self.live >= self.limit {
            return None;
        }
        let index = match self.free.pop() {
            Some(index) => index,
            None => {
                self.slots.push(Slot {
                    generation: 0,
                    value: None,
                });
                // In range: at most `limit` ≤ 2^24 slots.
                (self.slots.len() - 1) as u32
            }
        };
        let slot = &mut self.slots[index as usize];
        slot.value = Some(value);
        self.live += 1;
        Some(index << GENERATION_BITS | u32::from(slot.generation))
    }

    fn slot(&self, handle: u32) -> Option<&Slot<T>> {
        let slot = self.slots.get((handle >> GENERATION_BITS) as usize)?;
        (u32::from(slot.generation) == handle & GENERATION_MASK).then_some(slot)
    }

    pub(crate) fn get(&self, handle: u32) -> Option<&T> {
        self.slot(handle)?.value.as_ref()
    }

    pub(crate) fn get_mut(&mut self, handle: u32) -> Option<&mut T> {
        let slot = self.slots.get_mut((handle >> GENERATION_BITS) as usize)?;
        if u32::from(slot.generation) != handle & GENERATION_MASK {
            return None;
        }
        slot.value.as_mut()
    }

    /// Takes the object out; its handle (and every older one of the slot)
    /// names nothing from now on.
    pub(crate) fn remove(&mut self, handle: u32) -> Option<T> {
        let index = handle >> GENERATION_BITS;
        let slot = self.slots.get_mut(index as usize)?;
        if u32::from(slot.generation) != handle & GENERATION_MASK {
            return None;
        }
        let value = slot.value.take()?;
        slot.generation = slot.generation.wrapping_add(1);
        self.free.push(index);
        self.live -= 1;
        Some(value)
    }

    /// Live objects.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.live
    }

    /// Every live object with its handle.
    #[cfg(test)]
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u32, &T)> {
        self.slots.iter().enumerate().filter_map(|(index, slot)| {
            let value = slot.value.as_ref()?;
            Some((
                (index as u32) << GENERATION_BITS | u32::from(slot.generation),
                value,
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_removed_handle_never_names_the_next_occupant() {
        let mut table = Table::new(2);
        let a = table.insert("a").expect("room");
        let b = table.insert("b").expect("room");
        assert_eq!(table.insert("c"), None, "limit");
        assert_eq!(table.remove(a), Some("a"));
        assert_eq!(table.remove(a), None);
        let c = table.insert("c").expect("room again");
        assert_eq!(c >> GENERATION_BITS, a >> GENERATION_BITS, "slot reused");
        assert_ne!(c, a);
        assert_eq!(table.get(a), None);
        assert_eq!(table.get(c), Some(&"c"));
        assert_eq!(table.get(b), Some(&"b"));
        assert_eq!(table.get(0xFFFF_FFFF), None);
        assert_eq!(table.len(), 2);
        let mut names: Vec<_> = table.iter().map(|(_, v)| *v).collect();
        names.sort_unstable();
        assert_eq!(names, ["b", "c"]);
    }
}
