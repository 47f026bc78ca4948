//! Flush: an NVM Flush of a whole initiator namespace, as our vendor
//! Command Request to every target namespace it maps to.
//!
//! Layer: NVMe initiator, beside the iCMD slots. Owns the flush slots and
//! the Command Requests and Responses of [`crate::wire::command`]. NVMe-0.9
//! maps only Read and Write; ulp.md §3.9 leaves Flush to a vendor
//! extension both ends enable ([`InitiatorConfig::vendor_commands`] here,
//! the target's `vendor_commands` there). Without it FUA writes are the
//! only durable writes.
//!
//! A flush reaches every distinct (connection, Target NSID, Target SQID)
//! of the namespace's valid LBA table rows
//! ([`TranslationTables::destinations`](crate::lba::TranslationTables::destinations)),
//! one Command Request each carrying an NVMe Flush SQE; it completes when
//! every Command Response is in, with the first non-success status, like
//! an iCMD. As in NVMe (NVM Command Set 1.0 §3.2.1) it makes durable the
//! writes that completed before it was submitted: a caller that needs a
//! write covered waits for that write's completion before it flushes.
//!
//! Identifiers: the iCMD Identifier is the flush slot and its generation
//! (its own id space: Command Responses are their own packet type), the
//! Initiator Tag the destination's index and the generation, as an nCMD's.
//! The engine tag of a Command Request has [`COMMAND_TAG`] in the index
//! field, which no nCMD index reaches.

use std::sync::Arc;

use falcon_core::api::{
    CompletionStatus, ConnectionHandle, Engine, PacketBuf, Timestamp, Transaction, UlpHeader,
};

use crate::data::{HostBuffers, NvmeData};
use crate::lba::Destination;
use crate::status::Status;
use crate::tag::SlotIds;
use crate::wire::command::{CommandResponse, REQUEST_HEADER_LEN, SQE_LEN};
use crate::wire::{nbth, CommandRequest, IcmdId, InitiatorTag, Nbth, Sqe};

use super::icmd::INITIATOR_TAG;
use super::{IcmdBuffers, IcmdCompletion, Initiator, InitiatorStats, RefuseReason};

/// Flushes outstanding at most.
pub const FLUSH_SLOTS: usize = 64;

/// The flushes' iCMD Identifiers: slot and generation.
const FLUSH_IDS: SlotIds = match SlotIds::for_slots(FLUSH_SLOTS) {
    Some(ids) => ids,
    None => panic!("64 flush slots fit an iCMD Identifier"),
};

/// Marks a Command Request's engine tag (in the 16-bit index field).
const COMMAND_TAG: u64 = 1 << 15;

/// Destinations a flush reaches at most (the Initiator Tag's 9 index
/// bits).
const MAX_DESTINATIONS: usize = 1 << 9;

/// One destination of a flush.
#[derive(Debug)]
struct Route {
    destination: Destination,
    /// Found in the engine when the request goes out.
    connection: Option<ConnectionHandle>,
    sent: bool,
    done: bool,
}

/// A flush between submission and completion.
#[derive(Debug)]
struct ActiveFlush {
    tag: u64,
    routes: Vec<Route>,
    submitted: Timestamp,
    deadline: Timestamp,
    done: usize,
    status: Status,
}

#[derive(Debug, Default)]
struct Slot {
    generation: u32,
    flush: Option<ActiveFlush>,
}

/// The flush slots.
#[derive(Debug)]
pub(super) struct Flushes {
    ids: SlotIds,
    slots: Vec<Slot>,
    free: Vec<u32>,
}

impl Flushes {
    pub(super) fn new() -> Flushes {
        Flushes {
            ids: FLUSH_IDS,
            slots: (0..FLUSH_SLOTS).map(|_| Slot::default()).collect(),
            free: (0..FLUSH_SLOTS as u32).rev().collect(),
        }
    }

    /// Flushes outstanding.
    pub(super) fn outstanding(&self) -> usize {
        FLUSH_SLOTS - self.free.len()
    }

    /// The earliest deadline of an outstanding flush.
    pub(super) fn next_deadline(&self) -> Option<Timestamp> {
        self.slots
            .iter()
            .filter_map(|s| s.flush.as_ref().map(|f| f.deadline))
            .min()
    }
}

/// A Command Request's engine tag.
const fn engine_tag(slot: u32, generation: u32, route: usize) -> u64 {
    ((generation as u64) << 40) | ((slot as u64) << 16) | COMMAND_TAG | route as u64
}

/// Whether `tag` is a Command Request's, and its slot, generation and route.
const fn decode_engine_tag(tag: u64) -> Option<(u32, u32, usize)> {
    if tag & COMMAND_TAG == 0 {
        return None;
    }
    Some((
        ((tag >> 16) & 0xFF_FFFF) as u32,
        (tag >> 40) as u32,
        (tag & (COMMAND_TAG - 1)) as usize,
    ))
}

impl Initiator {
    /// Takes a Flush of initiator namespace `nsid`; its Command Requests
    /// go out on the next turn and its completion comes through
    /// [`poll_completion`](Self::poll_completion) with `tag`, empty write
    /// buffers and one nCMD per destination.
    ///
    /// # Errors
    ///
    /// [`RefuseReason::VendorCommandsOff`] unless both ends enabled the
    /// extension, [`RefuseReason::QueueFull`] with [`FLUSH_SLOTS`]
    /// flushes outstanding, an unknown namespace, or a namespace whose
    /// rows do not all translate.
    pub fn submit_flush(
        &mut self,
        now: Timestamp,
        tag: u64,
        nsid: u32,
    ) -> Result<(), RefuseReason> {
        let refused = |stats: &mut InitiatorStats, reason| {
            stats.refused += 1;
            Err(reason)
        };
        if !self.config.vendor_commands {
            return refused(&mut self.stats, RefuseReason::VendorCommandsOff);
        }
        if self
            .namespaces
            .get(nsid as usize)
            .copied()
            .flatten()
            .is_none()
        {
            return refused(&mut self.stats, RefuseReason::UnknownNamespace(nsid));
        }
        let destinations = match self.tables.destinations(nsid) {
            Ok(d) if d.len() <= MAX_DESTINATIONS => d,
            Ok(_) => return refused(&mut self.stats, RefuseReason::TooManyDestinations),
            Err(e) => return refused(&mut self.stats, RefuseReason::Translate(e)),
        };
        let Some(slot) = self.flushes.free.pop() else {
            self.stats.queue_full += 1;
            return refused(&mut self.stats, RefuseReason::QueueFull);
        };
        let deadline = now.saturating_add(self.config.icmd_timeout);
        self.stats.submitted += 1;
        self.stats.flushes += 1;
        self.flushes.slots[slot as usize].flush = Some(ActiveFlush {
            tag,
            routes: destinations
                .into_iter()
                .map(|destination| Route {
                    destination,
                    connection: None,
                    sent: false,
                    done: false,
                })
                .collect(),
            submitted: now,
            deadline,
            done: 0,
            status: Status::SUCCESS,
        });
        self.next_deadline = Some(self.next_deadline.map_or(deadline, |d| d.min(deadline)));
        // A namespace with no valid row has nothing to flush.
        self.complete_flush_if_done(now, slot);
        Ok(())
    }

    /// Pushes the Command Requests not yet sent.
    pub(super) fn send_flushes<B: PacketBuf>(
        &mut self,
        now: Timestamp,
        engine: &mut Engine<B, NvmeData>,
    ) {
        if self.flushes.outstanding() == 0 {
            return;
        }
        for slot in 0..FLUSH_SLOTS as u32 {
            let generation = self.flushes.slots[slot as usize].generation;
            let Some(flush) = self.flushes.slots[slot as usize].flush.as_mut() else {
                continue;
            };
            let mut failed = Vec::new();
            for (index, route) in flush.routes.iter_mut().enumerate() {
                if route.sent || route.done {
                    continue;
                }
                if route.connection.is_none() {
                    route.connection = engine.connection(route.destination.connection_id);
                }
                let Some(connection) = route.connection else {
                    failed.push(index);
                    continue;
                };
                if self.blocked.contains(&connection) {
                    continue;
                }
                let Some((header, data)) = command_request(
                    &self.flushes.ids,
                    self.config.initiator_function,
                    slot,
                    generation,
                    index,
                    &route.destination,
                ) else {
                    failed.push(index);
                    continue;
                };
                let transaction = Transaction::push(engine_tag(slot, generation, index), data)
                    .with_header(header);
                match engine.submit(now, connection, transaction) {
                    Ok(_) => {
                        route.sent = true;
                        self.stats.ncmds_sent += 1;
                    }
                    Err(rejected) => match rejected.reason {
                        falcon_core::api::RejectReason::NoResources(_) => {
                            self.stats.credit_waits += 1;
                            self.blocked.push(connection);
                        }
                        _ => failed.push(index),
                    },
                }
            }
            for index in failed {
                self.finish_route(now, slot, index, Status::TRANSIENT_TRANSPORT_ERROR);
            }
        }
    }

    /// A Command Response: its destination's status.
    pub(super) fn on_command_response(&mut self, now: Timestamp, repr: &CommandResponse) -> bool {
        let id = repr.nbth.icmd_id.value();
        let ids = self.flushes.ids;
        let (slot, generation) = (ids.slot(id), ids.generation(id));
        let Some(entry) = self.flushes.slots.get(slot as usize) else {
            return false;
        };
        let tag = repr.nbth.initiator_tag.value();
        let Some(flush) = entry
            .flush
            .as_ref()
            .filter(|_| entry.generation == generation)
        else {
            self.stats.stale += 1;
            return true;
        };
        if INITIATOR_TAG.generation(tag) != generation & INITIATOR_TAG.generation_mask() {
            return false;
        }
        let index = INITIATOR_TAG.slot(tag) as usize;
        match flush.routes.get(index) {
            None => false,
            Some(route) if route.done => {
                self.stats.stale += 1;
                true
            }
            Some(_) => {
                self.finish_route(now, slot, index, repr.cqe.status);
                true
            }
        }
    }

    /// A Command Request push ended at Falcon; `true` if `tag` was one.
    pub(super) fn on_command_push_done(
        &mut self,
        now: Timestamp,
        tag: u64,
        status: CompletionStatus,
    ) -> bool {
        let Some((slot, generation, index)) = decode_engine_tag(tag) else {
            return false;
        };
        let live = self
            .flushes
            .slots
            .get(slot as usize)
            .is_some_and(|e| e.generation == generation && e.flush.is_some());
        if !status.is_ok() && live {
            self.stats.push_failures += 1;
            // A target without the extension NACKs the reserved type as
            // malformed: the command is not supported there.
            let nvme = match status {
                CompletionStatus::TargetCompletionInError => Status::INVALID_OPCODE,
                _ => Status::TRANSIENT_TRANSPORT_ERROR,
            };
            self.finish_route(now, slot, index, nvme);
        }
        true
    }

    /// Flushes past their deadline fail with Command Aborted By Host.
    pub(super) fn expire_flushes(&mut self, now: Timestamp) {
        for slot in 0..FLUSH_SLOTS as u32 {
            let expired = self.flushes.slots[slot as usize]
                .flush
                .as_ref()
                .is_some_and(|f| f.deadline <= now);
            if expired {
                self.stats.timeouts += 1;
                self.fail_flush(now, slot, |_| true, Status::ABORTED_BY_HOST);
            }
        }
    }

    /// Fails the destinations on `connection` of every flush.
    pub(super) fn fail_flushes_on(&mut self, now: Timestamp, connection: ConnectionHandle) {
        for slot in 0..FLUSH_SLOTS as u32 {
            self.fail_flush(
                now,
                slot,
                |route| route.connection == Some(connection),
                Status::TRANSIENT_TRANSPORT_ERROR,
            );
        }
    }

    fn fail_flush(
        &mut self,
        now: Timestamp,
        slot: u32,
        which: impl Fn(&Route) -> bool,
        status: Status,
    ) {
        let Some(flush) = self.flushes.slots[slot as usize].flush.as_ref() else {
            return;
        };
        let routes: Vec<usize> = (0..flush.routes.len())
            .filter(|&i| !flush.routes[i].done && which(&flush.routes[i]))
            .collect();
        for index in routes {
            self.finish_route(now, slot, index, status);
        }
    }

    /// Records destination `index`'s status; completes the flush after
    /// its last.
    fn finish_route(&mut self, now: Timestamp, slot: u32, index: usize, status: Status) {
        let Some(flush) = self.flushes.slots[slot as usize].flush.as_mut() else {
            return;
        };
        let Some(route) = flush.routes.get_mut(index).filter(|r| !r.done) else {
            return;
        };
        route.done = true;
        flush.done += 1;
        if flush.status.is_success() && !status.is_success() {
            flush.status = status;
        }
        self.stats.ncmds.record(status);
        self.complete_flush_if_done(now, slot);
    }

    fn complete_flush_if_done(&mut self, now: Timestamp, slot: u32) {
        let entry = &mut self.flushes.slots[slot as usize];
        if !entry
            .flush
            .as_ref()
            .is_some_and(|f| f.done == f.routes.len())
        {
            return;
        }
        let Some(flush) = entry.flush.take() else {
            return;
        };
        entry.generation = self.flushes.ids.next_generation(entry.generation);
        self.flushes.free.push(slot);
        self.stats.completed.record(flush.status);
        self.completions.push_back(IcmdCompletion {
            tag: flush.tag,
            status: flush.status,
            buffers: IcmdBuffers::Write(Arc::new(HostBuffers::default())),
            latency: now
                .checked_duration_since(flush.submitted)
                .unwrap_or_default(),
            // At most MAX_DESTINATIONS (512).
            ncmds: flush.routes.len() as u16,
        });
    }
}

/// The Command Request of destination `index` of the flush in `slot`: the
/// NBTH and word 8 as the ULP header, the SQE as data.
fn command_request(
    ids: &SlotIds,
    initiator_function: crate::wire::InitiatorFunction,
    slot: u32,
    generation: u32,
    index: usize,
    destination: &Destination,
) -> Option<(UlpHeader, NvmeData)> {
    let request = CommandRequest {
        nbth: Nbth {
            initiator_function,
            initiator_tag: InitiatorTag::truncating(INITIATOR_TAG.encode(index as u32, generation)),
            icmd_id: IcmdId::truncating(ids.encode(slot, generation)),
            ..Nbth::default()
        },
        target_sqid: destination.target_sqid,
        // The CID is the destination's index, echoed in the CQE.
        sqe: Sqe::flush(index as u16, u32::from(destination.target_nsid)),
        data_len: 0,
    };
    let mut bytes = [0u8; REQUEST_HEADER_LEN];
    request.emit(&mut bytes);
    let (head, sqe) = bytes.split_at(REQUEST_HEADER_LEN - SQE_LEN);
    debug_assert_eq!(head.len(), nbth::HEADER_LEN + 4);
    let header = UlpHeader::new(head).ok()?;
    let data = NvmeData::Plain {
        buffers: Arc::new(HostBuffers::new(sqe.to_vec())),
        range: 0..SQE_LEN,
    };
    Some((header, data))
}
