//! The requester's Falcon transactions in flight, by engine tag.
//!
//! Layer: RDMA ULP, state under the requester. Owns [`Piece`] (what the
//! requester must know when a transaction completes: its QP, epoch and
//! work request, and what a pull's response must look like) and
//! [`PieceTable`], a slab whose handle is the transaction's engine tag:
//! `generation << 32 | slot`, so a tag that comes back twice, or after its
//! slot was reused, finds nothing. Reuses its slots: no allocation per
//! packet once warm.

use falcon_core::api::ConnectionHandle;

use crate::wire::{Sn, Steth};

/// What a piece asked of the responder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PieceKind {
    /// A push (SEND, WRITE): completes with Falcon's ACK.
    Push,
    /// A READ pull: `len` bytes to land where `steth` says.
    Read { steth: Steth, len: u32 },
    /// An atomic pull: the original value lands where `steth` says.
    Atomic { steth: Steth },
}

/// One transaction in flight.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Piece {
    /// The QP's table slot and epoch.
    pub(crate) qp: u32,
    pub(crate) epoch: u32,
    /// The work request's sequence number in its QP's send queue.
    pub(crate) wr_seq: u64,
    /// The connection it went out on.
    pub(crate) connection: ConnectionHandle,
    /// Its RBTH SN (a response carries the same, RDMA-0.9 §8.2).
    pub(crate) sn: Sn,
    pub(crate) kind: PieceKind,
    /// RNR NACKs it met.
    pub(crate) rnr_nacks: u8,
}

impl Piece {
    pub(crate) fn is_pull(&self) -> bool {
        !matches!(self.kind, PieceKind::Push)
    }
}

/// See the module doc.
#[derive(Debug, Default)]
pub(crate) struct PieceTable {
    slots: Vec<(u32, Option<Piece>)>,
    free: Vec<u32>,
}

impl PieceTable {
    /// Stores `piece`; its tag.
    pub(crate) fn insert(&mut self, piece: Piece) -> u64 {
        let index = match self.free.pop() {
            Some(index) => index,
            None => {
                self.slots.push((0, None));
                // In range: more than 2^32 transactions in flight cannot be.
                (self.slots.len() - 1) as u32
            }
        };
        let slot = &mut self.slots[index as usize];
        slot.1 = Some(piece);
        u64::from(slot.0) << 32 | u64::from(index)
    }

    fn slot(&mut self, tag: u64) -> Option<&mut (u32, Option<Piece>)> {
        let slot = self.slots.get_mut((tag & 0xFFFF_FFFF) as usize)?;
        (u64::from(slot.0) == tag >> 32).then_some(slot)
    }

    pub(crate) fn get_mut(&mut self, tag: u64) -> Option<&mut Piece> {
        self.slot(tag)?.1.as_mut()
    }

    /// Takes the piece of `tag` out; the tag names nothing from now on.
    pub(crate) fn remove(&mut self, tag: u64) -> Option<Piece> {
        let slot = self.slot(tag)?;
        let piece = slot.1.take()?;
        slot.0 = slot.0.wrapping_add(1);
        self.free.push((tag & 0xFFFF_FFFF) as u32);
        Some(piece)
    }

    /// Pieces in flight.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.slots.len() - self.free.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tag_completes_once() {
        let mut table = PieceTable::default();
        let handle = {
            // Any handle: the table does not look at it.
            let mut engine: falcon_core::api::Engine = falcon_core::api::Engine::new(
                falcon_core::api::EngineConfig::default(),
                falcon_core::api::Timestamp::from_micros(1),
            )
            .expect("engine");
            let config = falcon_core::api::ConnectionConfig::new(
                falcon_core::api::ConnectionId::truncating(1),
                falcon_core::api::ConnectionId::truncating(2),
                "10.0.0.2".parse().expect("literal"),
                falcon_core::api::EthernetAddress([2, 0, 0, 0, 0, 2]),
            );
            engine
                .add_connection(falcon_core::api::Timestamp::from_micros(1), config)
                .expect("connection")
        };
        let piece = Piece {
            qp: 3,
            epoch: 0,
            wr_seq: 9,
            connection: handle,
            sn: Sn::FIRST,
            kind: PieceKind::Push,
            rnr_nacks: 0,
        };
        let a = table.insert(piece);
        assert_eq!(table.len(), 1);
        assert!(table.remove(a).is_some_and(|p| p.wr_seq == 9));
        assert!(table.remove(a).is_none(), "once");
        let b = table.insert(piece);
        assert_ne!(a, b, "the slot's next tag differs");
        assert!(table.get_mut(a).is_none());
        assert!(table.get_mut(b).is_some());
        assert_eq!(table.len(), 1);
    }
}
