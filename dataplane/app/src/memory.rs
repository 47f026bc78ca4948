//! What the process holds on the heap, from the allocator itself.
//!
//! Layer: application. Owns the binary's global allocator: the system
//! allocator behind `stats_alloc`'s counters (atomic adds on every
//! allocation and free; no `unsafe` here), so that `falcon bench scale` can
//! report the bytes a connection costs as the heap saw them, not as
//! `size_of` sums predict. The counters see the bytes asked for; what
//! malloc adds per block (headers, rounding) shows in the resident set
//! ([`resident_bytes`]), which the same command reports beside them.

use stats_alloc::{StatsAlloc, INSTRUMENTED_SYSTEM};

#[global_allocator]
static GLOBAL: &StatsAlloc<std::alloc::System> = &INSTRUMENTED_SYSTEM;

/// Bytes allocated and not yet freed, process-wide, and the number of
/// allocations made so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Heap {
    /// Live bytes (asked for, so without malloc's own overhead).
    pub live_bytes: u64,
    /// Allocations made since the start (reallocations not counted).
    pub allocations: u64,
}

impl Heap {
    /// The counters now. Other threads' allocations count too: measure
    /// where nothing else runs.
    pub fn now() -> Heap {
        let s = GLOBAL.stats();
        Heap {
            live_bytes: (s.bytes_allocated as u64).saturating_sub(s.bytes_deallocated as u64),
            allocations: s.allocations as u64,
        }
    }

    /// What was allocated since `before` (live bytes may have shrunk: then
    /// a negative difference).
    pub fn since(self, before: Heap) -> HeapDelta {
        HeapDelta {
            live_bytes: self.live_bytes as i64 - before.live_bytes as i64,
            allocations: self.allocations - before.allocations,
        }
    }
}

/// The difference of two [`Heap`] readings.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HeapDelta {
    pub live_bytes: i64,
    pub allocations: u64,
}

impl core::ops::AddAssign for HeapDelta {
    fn add_assign(&mut self, other: HeapDelta) {
        self.live_bytes += other.live_bytes;
        self.allocations += other.allocations;
    }
}

/// The process's resident set, bytes (Linux `/proc/self/statm`); `None`
/// where that file is not to be read.
pub fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // The kernel's page size; 4 KiB on every Linux this runs on.
    Some(pages * 4096)
}

/// Memory the kernel says can be allocated without swapping, bytes
/// (`MemAvailable` of `/proc/meminfo`); `None` where that is not to be
/// read.
pub fn available_bytes() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_a_live_vector_and_its_free() {
        let before = Heap::now();
        let v = std::hint::black_box(vec![1u8; 1 << 20]);
        let held = Heap::now().since(before);
        drop(v);
        let after = Heap::now().since(before);
        // Other tests run on other threads and allocate too: a margin.
        assert!(
            (1 << 20) - 65_536 < held.live_bytes && held.live_bytes < (1 << 20) + 65_536,
            "{held:?}"
        );
        assert!(after.live_bytes < 65_536, "{after:?}");
    }

    #[test]
    fn resident_set_and_available_memory_are_read() {
        assert!(resident_bytes().is_some_and(|b| b > 0));
        assert!(available_bytes().is_some_and(|b| b > 0));
    }
}
