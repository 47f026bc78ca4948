//! Command Requests at the target: our vendor extension (ulp.md §3.9,
//! [`crate::wire::command`]), Flush first.
//!
//! Layer: NVMe target, beside the tCMD table. Owns the commands waiting
//! for their worker. Only a target built with
//! [`TargetConfig::vendor_commands`](super::TargetConfig::vendor_commands)
//! takes them; without it a Command Request is a reserved packet type,
//! NACKed as malformed like any other.
//!
//! A Flush (NVM Command Set 1.0 §3.2.1) goes to its Target SQID's worker,
//! which makes the namespace's completed writes durable (a file
//! namespace's `sync_data`); its Command Response carries the worker's
//! status in a CQE whose CID is the SQE's. Another opcode, a fused
//! command or in-capsule data is answered at once with Invalid Command
//! Opcode or Invalid Field; an unknown namespace with Invalid Namespace;
//! an unknown SQID with Invalid Field. With every command slot taken or
//! the worker's queue full, the request is NACKed receiver-not-ready.

use falcon_core::api::{ConnectionHandle, Engine, PacketBuf, Timestamp};

use crate::data::NvmeData;
use crate::namespace::workers::{Completion as IoCompletion, RejectReason, Request as IoRequest};
use crate::namespace::BlockStore;
use crate::status::Status;
use crate::wire::command::RESPONSE_HEADER_LEN;
use crate::wire::{CommandRequest, CommandResponse, Cqe, Nbth, NvmOpcode, TargetTag};

use super::requests::Answer;
use super::tcmd::{TxKind, TxTag};
use super::Target;

/// Commands waiting for their worker at most.
pub const COMMAND_SLOTS: usize = 64;

/// Marks a command's storage request tag (tCMD tags are slot << 32 |
/// generation with slots below 2^16).
pub(super) const COMMAND_IO_TAG: u64 = 1 << 63;

/// A command on its worker.
#[derive(Debug)]
struct Pending {
    connection: ConnectionHandle,
    nbth: Nbth,
    cid: u16,
    sqid: u8,
    /// Its connection closed: nothing is sent when the worker is done.
    aborted: bool,
}

/// The command slots.
#[derive(Debug)]
pub(super) struct Commands {
    slots: Vec<Option<Pending>>,
    generations: Vec<u32>,
    free: Vec<u32>,
}

impl Commands {
    pub(super) fn new() -> Commands {
        Commands {
            slots: (0..COMMAND_SLOTS).map(|_| None).collect(),
            generations: vec![0; COMMAND_SLOTS],
            free: (0..COMMAND_SLOTS as u32).rev().collect(),
        }
    }

    /// Nothing is answered for `connection`'s commands any more.
    pub(super) fn abort_on(&mut self, connection: ConnectionHandle) {
        for pending in self.slots.iter_mut().flatten() {
            if pending.connection == connection {
                pending.aborted = true;
            }
        }
    }
}

/// The status that answers `request` without storage: an opcode other
/// than Flush, a fused command or in-capsule data, an unknown namespace
/// (`known` false) or SQID (`served` false).
fn refusal(request: &CommandRequest, known: bool, served: bool) -> Option<Status> {
    let sqe = &request.sqe;
    if sqe.opcode() != NvmOpcode::Flush as u8 {
        Some(Status::INVALID_OPCODE)
    } else if sqe.fuse() != 0 || request.data_len != 0 {
        Some(Status::INVALID_FIELD)
    } else if !known {
        Some(Status::INVALID_NAMESPACE)
    } else if !served {
        Some(Status::INVALID_FIELD)
    } else {
        None
    }
}

impl<S: BlockStore + 'static> Target<S> {
    /// A Command Request: to its worker, or answered at once.
    pub(super) fn on_command_request<B: PacketBuf>(
        &mut self,
        now: Timestamp,
        engine: &mut Engine<B, NvmeData>,
        connection: ConnectionHandle,
        request: &CommandRequest,
    ) -> Answer {
        self.stats.commands += 1;
        let sqe = &request.sqe;
        let known = u16::try_from(sqe.nsid())
            .ok()
            .and_then(|nsid| self.namespace(nsid))
            .is_some();
        let served = self.workers.serves(request.target_sqid);
        let answer_now = refusal(request, known, served);
        if let Some(status) = answer_now {
            self.send_command_response(
                now,
                engine,
                connection,
                &request.nbth,
                sqe.cid(),
                request.target_sqid,
                status,
            );
            return Answer::Accept;
        }
        let Some(slot) = self.commands.free.pop() else {
            self.stats.rnr_no_slot += 1;
            return Answer::NotReady;
        };
        let generation = self.commands.generations[slot as usize];
        let tag = COMMAND_IO_TAG | u64::from(slot) << 32 | u64::from(generation);
        // Fits: checked against the namespaces above.
        let nsid = sqe.nsid() as u16;
        match self
            .workers
            .submit(request.target_sqid, IoRequest::flush(tag, nsid))
        {
            Ok(()) => {
                self.commands.slots[slot as usize] = Some(Pending {
                    connection,
                    nbth: request.nbth,
                    cid: sqe.cid(),
                    sqid: request.target_sqid,
                    aborted: false,
                });
                Answer::Accept
            }
            Err(rejected) => {
                self.commands.free.push(slot);
                match rejected.reason {
                    RejectReason::Busy => {
                        self.stats.rnr_worker_busy += 1;
                        Answer::NotReady
                    }
                    RejectReason::UnknownSqid | RejectReason::Stopped => {
                        self.send_command_response(
                            now,
                            engine,
                            connection,
                            &request.nbth,
                            sqe.cid(),
                            request.target_sqid,
                            Status::INTERNAL_ERROR,
                        );
                        Answer::Accept
                    }
                }
            }
        }
    }

    /// A command's storage request finished: its Command Response goes.
    pub(super) fn on_command_done<B: PacketBuf>(
        &mut self,
        now: Timestamp,
        engine: &mut Engine<B, NvmeData>,
        completion: &IoCompletion,
    ) {
        let slot = ((completion.tag & !COMMAND_IO_TAG) >> 32) as usize;
        let generation = completion.tag as u32;
        let live = self.commands.generations.get(slot) == Some(&generation);
        let Some(pending) = self
            .commands
            .slots
            .get_mut(slot)
            .filter(|_| live)
            .and_then(Option::take)
        else {
            self.stats.stale += 1;
            return;
        };
        self.commands.generations[slot] = generation.wrapping_add(1);
        // Fits: slots < COMMAND_SLOTS.
        self.commands.free.push(slot as u32);
        self.stats.io.record(completion.status);
        if completion.status.is_success() {
            self.stats.flushes += 1;
        }
        if pending.aborted {
            return;
        }
        self.send_command_response(
            now,
            engine,
            pending.connection,
            &pending.nbth,
            pending.cid,
            pending.sqid,
            completion.status,
        );
    }

    /// Pushes a Command Response: the request's NBTH (Target Tag 0) and a
    /// CQE with `status`.
    #[allow(clippy::too_many_arguments)]
    fn send_command_response<B: PacketBuf>(
        &mut self,
        now: Timestamp,
        engine: &mut Engine<B, NvmeData>,
        connection: ConnectionHandle,
        request: &Nbth,
        cid: u16,
        sqid: u8,
        status: Status,
    ) {
        let response = CommandResponse {
            nbth: Nbth {
                data_invalid: false,
                target_tag: TargetTag::ZERO,
                ..*request
            },
            cqe: Cqe {
                cid,
                sqid: u16::from(sqid),
                status,
                ..Cqe::default()
            },
            data_len: 0,
        };
        let mut bytes = [0u8; RESPONSE_HEADER_LEN];
        response.emit(&mut bytes);
        let tag = TxTag {
            kind: TxKind::Untracked,
            target_tag: 0,
            offset: 0,
        };
        self.respond(now, engine, connection, tag, &bytes, NvmeData::None, status);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::Sqe;

    #[test]
    fn only_a_plain_flush_of_a_known_namespace_and_queue_goes_to_storage() {
        let flush = CommandRequest {
            sqe: Sqe::flush(1, 1),
            ..CommandRequest::default()
        };
        assert_eq!(refusal(&flush, true, true), None);
        assert_eq!(
            refusal(&flush, false, true),
            Some(Status::INVALID_NAMESPACE)
        );
        assert_eq!(refusal(&flush, true, false), Some(Status::INVALID_FIELD));
        let mut write = flush;
        write.sqe.0[0] = NvmOpcode::Write as u8;
        assert_eq!(refusal(&write, true, true), Some(Status::INVALID_OPCODE));
        let mut fused = flush;
        fused.sqe.0[1] = 0x01;
        assert_eq!(refusal(&fused, true, true), Some(Status::INVALID_FIELD));
        let with_data = CommandRequest {
            data_len: 8,
            ..flush
        };
        assert_eq!(refusal(&with_data, true, true), Some(Status::INVALID_FIELD));
    }
}
