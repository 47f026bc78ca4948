//! The engine's connection lookup by local CID.
//!
//! Layer: engine. Owns [`CidTable`]: the per-packet map from a received
//! packet's destination connection id to the connection's slot. No hashing,
//! no allocation on lookup, never panics.

use crate::ids::ConnectionId;

/// Local connection id → slot: a two-level table over the 24-bit CID
/// space (4096 chunks of 4096 entries, allocated when a CID in them is
/// first used). Two loads per lookup on the per-packet path, no hashing;
/// 16 KiB per chunk in use (CIDs are ours to choose, so they are usually
/// dense).
#[derive(Default)]
pub(super) struct CidTable {
    chunks: Vec<Option<Box<[u32; CHUNK]>>>,
    /// Connection ids held.
    pub(super) len: usize,
}

const CHUNK: usize = 4096;
const NO_SLOT: u32 = u32::MAX;

impl CidTable {
    pub(super) fn get(&self, cid: ConnectionId) -> Option<u32> {
        let (chunk, entry) = Self::split(cid);
        let slot = self.chunks.get(chunk)?.as_ref()?[entry];
        (slot != NO_SLOT).then_some(slot)
    }

    pub(super) fn insert(&mut self, cid: ConnectionId, slot: u32) {
        let (chunk, entry) = Self::split(cid);
        if self.chunks.len() <= chunk {
            self.chunks.resize_with(chunk + 1, || None);
        }
        let table = self.chunks[chunk].get_or_insert_with(|| Box::new([NO_SLOT; CHUNK]));
        if table[entry] == NO_SLOT {
            self.len += 1;
        }
        table[entry] = slot;
    }

    pub(super) fn remove(&mut self, cid: ConnectionId) {
        let (chunk, entry) = Self::split(cid);
        if let Some(Some(table)) = self.chunks.get_mut(chunk) {
            if table[entry] != NO_SLOT {
                table[entry] = NO_SLOT;
                self.len -= 1;
            }
        }
    }

    const fn split(cid: ConnectionId) -> (usize, usize) {
        let v = cid.value() as usize;
        (v / CHUNK, v % CHUNK)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_get_remove_across_chunks() {
        let mut table = CidTable::default();
        let cid = |v| ConnectionId::truncating(v);
        assert_eq!(table.get(cid(5)), None);
        table.insert(cid(5), 1);
        table.insert(cid(0xFF_FFFF), 2);
        table.insert(cid(4096), 3);
        assert_eq!(table.get(cid(5)), Some(1));
        assert_eq!(table.get(cid(0xFF_FFFF)), Some(2));
        assert_eq!(table.get(cid(4096)), Some(3));
        assert_eq!(table.get(cid(4097)), None);
        assert_eq!(table.len, 3);
        table.remove(cid(5));
        table.remove(cid(5));
        assert_eq!((table.get(cid(5)), table.len), (None, 2));
    }
}

/// What one connection costs inline, part by part (`falcon bench scale`
/// measures the heap; `dataplane/app/PERFORMANCE.md` has the breakdown).
/// In an engine submodule because `Connection` is private to `engine`.
#[cfg(test)]
mod layout {
    use core::mem::size_of;

    use crate::delivery::DeliveryConnection;
    use crate::engine::Connection;
    use crate::resources::Account;
    use crate::transaction::{Initiator, Target};
    use crate::wire::FrameTemplate;

    /// The parts, printed with `cargo test -p falcon-core --lib
    /// connection_layout -- --nocapture`; fails when a part outgrows what
    /// it measures now, so that growth is a decision.
    #[test]
    fn connection_layout() {
        let parts = [
            (
                "Connection (boxed, one allocation)",
                size_of::<Connection<crate::port::FrameBuf, Vec<u8>>>(),
                1_872,
            ),
            (
                "  DeliveryConnection",
                size_of::<DeliveryConnection>(),
                1_136,
            ),
            (
                "    TxWindow (x2, slots on the heap at first use)",
                size_of::<crate::delivery::tx_window::TxWindow>(),
                96,
            ),
            (
                "    RxWindow (x2, NACK table on the heap at first NACK)",
                size_of::<crate::delivery::rx_window::RxWindow>(),
                96,
            ),
            (
                "    RueEvents",
                size_of::<crate::delivery::rue_iface::RueEvents>(),
                192,
            ),
            (
                "    DeliveryStats",
                size_of::<crate::delivery::DeliveryStats>(),
                120,
            ),
            (
                "  Initiator (slot ring on the heap)",
                size_of::<Initiator<crate::port::FrameBuf, Vec<u8>>>(),
                120,
            ),
            (
                "  Target (slot ring on the heap)",
                size_of::<Target<crate::port::FrameBuf, Vec<u8>>>(),
                176,
            ),
            ("  Account", size_of::<Account>(), 72),
            ("  FrameTemplate", size_of::<FrameTemplate>(), 160),
            (
                "  CachedTxSa (SA key; AES-GCM schedule cached engine-wide)",
                size_of::<psp::CachedTxSa>(),
                104,
            ),
            ("  RxSecurity", size_of::<psp::RxSecurity>(), 32),
            (
                "SentPacket (a retransmit slot)",
                size_of::<crate::delivery::tx_window::SentPacket>(),
                48,
            ),
        ];
        for (name, size, _) in parts {
            println!("{name:58} {size:5} B");
        }
        for (name, size, budget) in parts {
            assert!(size <= budget, "{name}: {size} B, more than {budget}");
        }
    }
}
