//! One outstanding iCMD: its nCMDs, where they go, what came back.
//!
//! Layer: NVMe initiator, the state behind an iCMD slot. Owns
//! [`ActiveIcmd`]: the split, the route of each tCMD group (connection,
//! command block), the caller's buffers, the nCMDs done and the first
//! failing status. Builds the request packets and places read data; knows
//! nothing of the engine but the connection lookup.

use core::time::Duration;
use std::sync::Arc;

use falcon_core::api::{ConnectionHandle, Engine, PacketBuf, Timestamp, UlpHeader};
use falcon_core::ids::ConnectionId;

use crate::data::{BlockSpan, HostBuffers, NvmeData, SharedBuffers, COMMAND_BLOCK_LEN};
use crate::layout::{Format, Layout};
use crate::lba::TranslationTables;
use crate::namespace::pi::{self, CommandPi};
use crate::namespace::PrInfo;
use crate::split::{self, IoOpcode, Ncmd, Split};
use crate::status::Status;
use crate::tag::SlotIds;
use crate::wire::nbth;
use crate::wire::request::{self, HEADER_LEN};
use crate::wire::{
    Command, DirectiveType, IcmdId, InitiatorFunction, InitiatorTag, Nbth, Prinfo, ReadRequest,
    TargetTag, WriteRequest,
};

use super::{
    Icmd, IcmdBuffers, IcmdCompletion, NamespaceEntry, PiPolicy, RefuseReason, MAX_NCMDS_PER_ICMD,
};

/// The Initiator Tag: the nCMD's index in its iCMD (9 bits, up to 511)
/// and the low 15 bits of the iCMD's generation.
pub(super) const INITIATOR_TAG: SlotIds = match SlotIds::with_slot_bits(9) {
    Some(ids) => ids,
    None => panic!("9 slot bits leave 15 of generation"),
};

/// Words of the done bitmap: one bit per nCMD.
const DONE_WORDS: usize = MAX_NCMDS_PER_ICMD.div_ceil(64);

/// An iCMD slot: its generation, and the iCMD in it.
#[derive(Debug, Default)]
pub(super) struct Slot {
    pub(super) generation: u32,
    pub(super) icmd: Option<ActiveIcmd>,
}

/// Where one tCMD group goes.
#[derive(Debug, Clone, Copy)]
pub(super) struct Route {
    connection_id: ConnectionId,
    /// Found in the engine when the first nCMD goes out.
    connection: Option<ConnectionHandle>,
    pub(super) command: Command,
}

/// An iCMD between submission and completion.
#[derive(Debug)]
pub(super) struct ActiveIcmd {
    tag: u64,
    pub(super) format: Format,
    pi: PiPolicy,
    pub(super) buffers: IcmdBuffers,
    split: Split,
    routes: [Route; 2],
    submitted: Timestamp,
    pub(super) deadline: Timestamp,
    pub(super) ncmds: u16,
    done: u16,
    done_bits: [u64; DONE_WORDS],
    status: Status,
    /// Write Data Requests answered, per group.
    pub(super) data_sent: [u16; 2],
}

impl ActiveIcmd {
    /// Checks, translates and splits `icmd`.
    ///
    /// # Errors
    ///
    /// The refusal, with the command handed back.
    pub(super) fn new(
        mut icmd: Icmd,
        namespace: &NamespaceEntry,
        tables: &TranslationTables,
        now: Timestamp,
        deadline: Timestamp,
    ) -> Result<ActiveIcmd, (RefuseReason, Icmd)> {
        let format = namespace.format;
        let blocks = usize::from(icmd.nlb) + 1;
        let (data_len, metadata_len) = (format.data_len(blocks), format.metadata_len(blocks));
        let opcode = match &mut icmd.buffers {
            IcmdBuffers::Write(buffers) => {
                for (what, expected, actual) in [
                    ("data", data_len, buffers.data.len()),
                    ("metadata", metadata_len, buffers.metadata.len()),
                ] {
                    if expected != actual {
                        let reason = RefuseReason::BufferLength {
                            what,
                            expected,
                            actual,
                        };
                        return Err((reason, icmd));
                    }
                }
                IoOpcode::Write
            }
            IcmdBuffers::Read(buffers) => {
                buffers.data.resize(data_len, 0);
                buffers.metadata.resize(metadata_len, 0);
                IoOpcode::Read
            }
        };
        let shape = split::Icmd {
            opcode,
            slba: icmd.slba,
            nlb: icmd.nlb,
        };
        let split = match split::split(shape, &namespace.spec.translation) {
            Ok(split) => split,
            Err(e) => return Err((RefuseReason::Split(e), icmd)),
        };
        let route = |group: &split::Group| -> Result<Route, RefuseReason> {
            let target = tables
                .translate(icmd.nsid, group.slba)
                .map_err(RefuseReason::Translate)?;
            let (prinfo, reference_tag, app_tag) = match namespace.spec.pi {
                PiPolicy::Off => (Prinfo::ZERO, u32::MAX, u16::MAX),
                // NVMe-0.9 §6.7 steps 1–5: PRACT = 0, tags from the target
                // LBA (truncations intended: its low 32 and 16 bits).
                PiPolicy::Checked { prchk, .. } => (
                    Prinfo::truncating(prchk.bits() & !PrInfo::PRACT.bits()),
                    target.target_lba as u32,
                    target.target_lba as u16,
                ),
            };
            Ok(Route {
                connection_id: target.connection_id,
                connection: None,
                command: Command {
                    // Fits: initiator NSIDs are 1..=65535 (lba.rs).
                    initiator_nsid: icmd.nsid as u16,
                    target_nsid: target.target_nsid,
                    slba: target.target_lba,
                    nlb: group.nlb,
                    prinfo,
                    fua: icmd.fua,
                    limited_retry: false,
                    dsm: 0,
                    reference_tag,
                    app_tag_mask: u16::MAX,
                    app_tag,
                    target_sqid: target.target_sqid,
                },
            })
        };
        // `split` makes one group or two.
        let groups = split.groups();
        let routes = match (groups.first().map(&route), groups.get(1).map(&route)) {
            (Some(Ok(first)), None) => [first, first],
            (Some(Ok(first)), Some(Ok(second))) => [first, second],
            (Some(Err(reason)), _) | (_, Some(Err(reason))) => return Err((reason, icmd)),
            (None, _) => {
                return Err((
                    RefuseReason::Split(split::SplitError::TooLarge { len: 0 }),
                    icmd,
                ))
            }
        };
        let ncmds = split.ncmd_count();
        Ok(ActiveIcmd {
            tag: icmd.tag,
            format,
            pi: namespace.spec.pi,
            buffers: icmd.buffers,
            split,
            routes,
            submitted: now,
            deadline,
            // At most MAX_NCMDS_PER_ICMD (257): split refuses more.
            ncmds: ncmds as u16,
            done: 0,
            done_bits: [0; DONE_WORDS],
            status: Status::SUCCESS,
            data_sent: [0; 2],
        })
    }

    pub(super) fn is_write(&self) -> bool {
        matches!(self.buffers, IcmdBuffers::Write(_))
    }

    /// nCMD `index` and its group index.
    pub(super) fn ncmd(&self, index: u16) -> Option<(usize, Ncmd)> {
        self.split.ncmd(usize::from(index))
    }

    /// nCMDs in group `group`.
    pub(super) fn group_ncmds(&self, group: usize) -> usize {
        self.split.groups().get(group).map_or(0, |g| g.ncmds())
    }

    /// The connection of group `group`, found in the engine once.
    pub(super) fn connection<B: PacketBuf>(
        &mut self,
        group: usize,
        engine: &Engine<B, NvmeData>,
    ) -> Option<ConnectionHandle> {
        let route = self.routes.get_mut(group)?;
        if route.connection.is_none() {
            route.connection = engine.connection(route.connection_id);
        }
        route.connection
    }

    /// Whether an nCMD of this iCMD went out on `connection`.
    pub(super) fn uses(&self, connection: ConnectionHandle) -> bool {
        let groups = self.split.groups().len();
        self.routes[..groups]
            .iter()
            .any(|route| route.connection == Some(connection))
    }

    /// The Read or Write Request of nCMD `index`: the NBTH as the ULP
    /// header, the command block as data.
    pub(super) fn request(
        &self,
        ids: &SlotIds,
        initiator_function: InitiatorFunction,
        slot: u32,
        generation: u32,
        index: u16,
    ) -> Option<(UlpHeader, [u8; COMMAND_BLOCK_LEN])> {
        let (group, ncmd) = self.ncmd(index)?;
        let nbth = Nbth {
            initiator_function,
            data_invalid: false,
            group: ncmd.group,
            target_tag: TargetTag::ZERO,
            ncnt_total: ncmd.ncnt_total,
            initiator_tag: InitiatorTag::truncating(
                INITIATOR_TAG.encode(u32::from(index), generation),
            ),
            ncnt_offset: ncmd.ncnt_offset,
            icmd_id: IcmdId::truncating(ids.encode(slot, generation)),
        };
        let command = self.routes[group].command;
        let mut bytes = [0u8; HEADER_LEN];
        let mut packet = request::Packet::new_unchecked(&mut bytes[..]);
        if self.is_write() {
            WriteRequest {
                nbth,
                command,
                dtype: DirectiveType::ZERO,
                dspec: 0,
            }
            .emit(&mut packet);
        } else {
            ReadRequest { nbth, command }.emit(&mut packet);
        }
        let (head, tail) = bytes.split_at(nbth::HEADER_LEN);
        let header = UlpHeader::new(head).ok()?;
        let block = <[u8; COMMAND_BLOCK_LEN]>::try_from(tail).ok()?;
        Some((header, block))
    }

    /// The blocks nCMD `ncmd` carries, counted in the iCMD's buffers.
    pub(super) fn span(&self, ncmd: &Ncmd) -> BlockSpan {
        let shift = self.format.lba_size.shift();
        BlockSpan {
            format: self.format,
            // Fit: an iCMD has at most 2048 blocks.
            first_block: (ncmd.icmd_offset >> shift) as u32,
            blocks: (ncmd.data_len >> shift) as u32,
        }
    }

    /// A Read Response's data (DIF) into the caller's buffers.
    ///
    /// # Errors
    ///
    /// When the data is not exactly the nCMD's blocks.
    pub(super) fn place_read(&mut self, ncmd: &Ncmd, payload: &[u8]) -> Result<(), ()> {
        let span = self.span(ncmd);
        if payload.len() != span.payload_len() {
            return Err(());
        }
        let IcmdBuffers::Read(buffers) = &mut self.buffers else {
            return Err(());
        };
        let HostBuffers { data, metadata } = buffers;
        let (Some(data), Some(metadata)) = (
            data.get_mut(span.data_range()),
            metadata.get_mut(span.metadata_range()),
        ) else {
            return Err(());
        };
        match Layout::READ_RESPONSE.unpack(self.format, payload, data, metadata) {
            Ok(blocks) if blocks == span.blocks as usize => Ok(()),
            _ => Err(()),
        }
    }

    /// The Write Data Response data of nCMD `ncmd`: its slice of the
    /// caller's buffers in DIX, or `None` when the initiator's own PI
    /// check fails (the response then goes with INV).
    pub(super) fn write_data(&self, group: usize, ncmd: &Ncmd) -> Option<NvmeData> {
        let IcmdBuffers::Write(buffers) = &self.buffers else {
            return None;
        };
        let span = self.span(ncmd);
        if let PiPolicy::Checked {
            prchk,
            verify_writes: true,
        } = self.pi
        {
            let command = &self.routes[group].command;
            let tcmd_block = (ncmd.tcmd_offset >> self.format.lba_size.shift()) as u32;
            let expected = CommandPi {
                prinfo: prchk,
                ref_tag: command.reference_tag.wrapping_add(tcmd_block),
                app_tag: command.app_tag,
                app_tag_mask: command.app_tag_mask,
            };
            let data = buffers.data.get(span.data_range())?;
            let metadata = buffers.metadata.get(span.metadata_range())?;
            pi::verify(self.format, data, metadata, &expected).ok()?;
        }
        let shared: SharedBuffers = Arc::<HostBuffers>::clone(buffers);
        Some(NvmeData::blocks(shared, span, Layout::WRITE_DATA_RESPONSE))
    }

    pub(super) fn is_done(&self, index: u16) -> bool {
        let index = usize::from(index);
        self.done_bits
            .get(index / 64)
            .is_some_and(|word| word & (1 << (index % 64)) != 0)
    }

    /// Records nCMD `index`'s status; `false` if it already had one (or
    /// does not exist).
    pub(super) fn mark_done(&mut self, index: u16, status: Status) -> bool {
        if index >= self.ncmds || self.is_done(index) {
            return false;
        }
        let index = usize::from(index);
        self.done_bits[index / 64] |= 1 << (index % 64);
        self.done += 1;
        if self.status.is_success() && !status.is_success() {
            self.status = status;
        }
        true
    }

    pub(super) fn all_done(&self) -> bool {
        self.done == self.ncmds
    }

    pub(super) fn into_completion(self, now: Timestamp) -> IcmdCompletion {
        IcmdCompletion {
            tag: self.tag,
            status: self.status,
            buffers: self.buffers,
            latency: now
                .checked_duration_since(self.submitted)
                .unwrap_or(Duration::ZERO),
            ncmds: self.ncmds,
        }
    }
}
