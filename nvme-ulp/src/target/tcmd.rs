//! One tCMD being reassembled: its key, its command, where each of its
//! nCMDs stands, its storage I/O and its buffer.
//!
//! Layer: NVMe target, the state behind a Target Tag. Owns [`TcmdSlot`]
//! (allocated once per slot: the nCMD table is reused by each tCMD the
//! slot holds), [`Tcmd`], [`Key`] and the engine tags of the target's
//! transactions. Plain state and arithmetic: the engine and the workers
//! are the caller's.

use std::sync::Arc;

use falcon_core::api::{ConnectionHandle, Timestamp};

use crate::layout::Format;
use crate::namespace::pi::{CommandPi, PrInfo};
use crate::split::{ncmd_extent, Extent, MAX_NCMDS_PER_GROUP};
use crate::status::Status;
use crate::wire::{Command, IcmdId, InitiatorFunction, InitiatorTag, Nbth, NcmdGroup, TargetTag};

use super::TcmdBuffers;

/// The reassembly key of ulp.md §3.9.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct Key {
    pub(super) connection: ConnectionHandle,
    pub(super) function: InitiatorFunction,
    pub(super) icmd_id: IcmdId,
    pub(super) group: NcmdGroup,
}

/// An nCMD accepted before its tCMD could start (see
/// `Target::waits_for_initiator`), or on its way into one.
#[derive(Debug, Clone, Copy)]
pub(super) struct Parked {
    pub(super) key: Key,
    pub(super) nbth: Nbth,
    pub(super) command: Command,
    pub(super) format: Format,
    pub(super) write: bool,
}

/// What a new tCMD lacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Shortage {
    Slot,
    Buffer,
    Worker,
}

/// Where one nCMD of a tCMD stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    /// Its request has not arrived.
    Missing,
    /// Write: its data is being pulled.
    Pulling,
    /// Its response waits for the tCMD's I/O (a read's nCMDs, a write's
    /// last).
    Waiting,
    /// Its response is sent (or queued for credits).
    Responding,
    /// Its response completed (or failed) at Falcon.
    Done,
}

/// One nCMD's state.
#[derive(Debug, Clone, Copy)]
pub(super) struct NcmdState {
    pub(super) initiator_tag: InitiatorTag,
    pub(super) phase: Phase,
}

/// The tCMD's storage request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Io {
    /// Not issued (a write still gathering its data).
    Idle,
    /// Waiting for room on its worker.
    Backlogged,
    InFlight,
    Done(Status),
}

/// A tCMD slot: its generation and the tCMD in it.
#[derive(Debug)]
pub(super) struct TcmdSlot {
    pub(super) generation: u32,
    pub(super) tcmd: Option<Tcmd>,
    /// One entry per nCMD of the tCMD in the slot, kept between tCMDs.
    pub(super) ncmds: Box<[NcmdState]>,
}

impl TcmdSlot {
    pub(super) fn new() -> TcmdSlot {
        TcmdSlot {
            generation: 0,
            tcmd: None,
            ncmds: vec![
                NcmdState {
                    initiator_tag: InitiatorTag::ZERO,
                    phase: Phase::Missing,
                };
                MAX_NCMDS_PER_GROUP
            ]
            .into_boxed_slice(),
        }
    }
}

/// A tCMD in progress.
#[derive(Debug)]
pub(super) struct Tcmd {
    pub(super) key: Key,
    pub(super) write: bool,
    /// The command block every nCMD of the tCMD repeats.
    pub(super) command: Command,
    pub(super) format: Format,
    /// nCMDs of the tCMD (NCNT Total + 1).
    pub(super) ncmds: u16,
    /// The NBTH fields every response repeats (its Target Tag included).
    pub(super) nbth: Nbth,
    /// Requests arrived.
    pub(super) arrived: u16,
    /// Write: data arrived (or given up on).
    pub(super) data_in: u16,
    /// Responses whose Falcon transaction ended.
    pub(super) responded: u16,
    pub(super) io: Io,
    /// Write: why the tCMD will not be written (INV, a failed pull, bad
    /// data); every completion still to send carries it.
    pub(super) error: Option<Status>,
    pub(super) buffers: Option<Arc<TcmdBuffers>>,
    pub(super) deadline: Timestamp,
    /// Its connection failed: freed as soon as its I/O is back.
    pub(super) aborted: bool,
}

impl Tcmd {
    /// Blocks of the tCMD (NLB + 1).
    pub(super) fn blocks(&self) -> u32 {
        u32::from(self.command.nlb) + 1
    }

    /// Data bytes of the tCMD.
    pub(super) fn data_len(&self) -> usize {
        self.format.data_len(self.blocks() as usize)
    }

    /// Metadata bytes of the tCMD.
    pub(super) fn metadata_len(&self) -> usize {
        self.format.metadata_len(self.blocks() as usize)
    }

    /// Where nCMD `offset` sits in the tCMD (checked when the tCMD
    /// started, so only an offset past NCNT Total fails).
    pub(super) fn extent(&self, offset: u8) -> Option<Extent> {
        ncmd_extent(
            self.format.lba_size,
            self.command.nlb,
            self.nbth.ncnt_total,
            offset,
        )
        .ok()
    }

    /// The NBTH of nCMD `offset`'s response.
    pub(super) fn response_nbth(&self, offset: u8, initiator_tag: InitiatorTag) -> Nbth {
        Nbth {
            initiator_tag,
            ncnt_offset: offset,
            ..self.nbth
        }
    }

    /// The PI fields the namespace checks against (ulp.md §3.7: passed
    /// from the command as they are).
    pub(super) fn pi(&self) -> CommandPi {
        CommandPi {
            prinfo: PrInfo::from_bits(self.command.prinfo.value()),
            ref_tag: self.command.reference_tag,
            app_tag: self.command.app_tag,
            app_tag_mask: self.command.app_tag_mask,
        }
    }

    /// Whether every nCMD arrived and was answered and no I/O is out.
    pub(super) fn finished(&self) -> bool {
        self.arrived == self.ncmds
            && self.responded == self.ncmds
            && !matches!(self.io, Io::InFlight | Io::Backlogged)
    }
}

/// What a target transaction is, in its engine tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TxKind {
    ReadResponse = 1,
    WriteCompletion = 2,
    WriteDataRequest = 3,
    /// A response sent without a tCMD (an nCMD refused on its own).
    Untracked = 4,
}

/// A target transaction's engine tag: its kind, the tCMD's Target Tag and
/// the nCMD's NCNT Offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct TxTag {
    pub(super) kind: TxKind,
    pub(super) target_tag: u32,
    pub(super) offset: u8,
}

impl TxTag {
    pub(super) const fn encode(self) -> u64 {
        ((self.kind as u64) << 32) | ((self.target_tag as u64) << 8) | self.offset as u64
    }

    pub(super) const fn decode(tag: u64) -> Option<TxTag> {
        let kind = match tag >> 32 {
            1 => TxKind::ReadResponse,
            2 => TxKind::WriteCompletion,
            3 => TxKind::WriteDataRequest,
            4 => TxKind::Untracked,
            _ => return None,
        };
        Some(TxTag {
            kind,
            target_tag: ((tag >> 8) & 0xFF_FFFF) as u32,
            offset: (tag & 0xFF) as u8,
        })
    }
}

/// The Target Tag of the tCMD in `slot` at `generation`.
pub(super) fn target_tag(ids: &crate::tag::SlotIds, slot: u32, generation: u32) -> TargetTag {
    TargetTag::truncating(ids.encode(slot, generation))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tx_tags_round_trip() {
        for kind in [
            TxKind::ReadResponse,
            TxKind::WriteCompletion,
            TxKind::WriteDataRequest,
            TxKind::Untracked,
        ] {
            let tag = TxTag {
                kind,
                target_tag: 0xAB_CDEF,
                offset: 255,
            };
            assert_eq!(TxTag::decode(tag.encode()), Some(tag));
        }
        assert_eq!(TxTag::decode(0), None);
        assert_eq!(TxTag::decode(9 << 32), None);
    }
}
