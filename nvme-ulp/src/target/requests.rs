//! The target's datapath: Read and Write Requests in, Write Data
//! Responses in, storage completions in; responses and pulls out.
//!
//! Layer: NVMe target, between the engine's events and the tCMD table.
//! Every request is answered to Falcon before the call returns (ACK,
//! receiver-not-ready, or complete-in-error when it does not parse);
//! every nCMD that arrived gets exactly one response. Never panics on a
//! packet.

use std::sync::Arc;

use falcon_core::api::{
    Completion, CompletionStatus, ConnectionHandle, Engine, PacketBuf, Request, Timestamp,
    Transaction, TransactionKind, UlpHeader, UlpNack,
};

use crate::data::{BlockSpan, NvmeData, SharedBuffers};
use crate::layout::{Format, Layout};
use crate::namespace::workers::{Completion as IoCompletion, RejectReason, Request as IoRequest};
use crate::namespace::BlockStore;
use crate::split::{ncmd_extent, Extent};
use crate::status::Status;
use crate::wire::write_data::RESPONSE_HEADER_LEN;
use crate::wire::{
    nbth, response, Command, Nbth, NvmePacket, ReadResponse, TargetTag, WriteCompletion,
    WriteDataRequest, MALFORMED_NACK_CODE,
};

use super::commands::COMMAND_IO_TAG;
use super::tcmd::{target_tag, Io, Key, NcmdState, Parked, Phase, Shortage, Tcmd, TxKind, TxTag};
use super::Target;

/// How a request is answered to Falcon.
pub(super) enum Answer {
    Accept,
    /// Receiver not ready: Falcon delivers it again later.
    NotReady,
    Malformed,
}

impl<S: BlockStore + 'static> Target<S> {
    pub(super) fn on_request<B: PacketBuf>(
        &mut self,
        now: Timestamp,
        engine: &mut Engine<B, NvmeData>,
        request: Request<B>,
    ) {
        let (connection, rsn) = (request.connection, request.rsn);
        let answer = match (request.kind, NvmePacket::parse(&request.payload)) {
            (TransactionKind::Push, Ok(NvmePacket::ReadRequest(r))) => {
                self.on_command(now, engine, connection, &r.nbth, &r.command, false)
            }
            (TransactionKind::Push, Ok(NvmePacket::WriteRequest(r))) => {
                self.on_command(now, engine, connection, &r.nbth, &r.command, true)
            }
            (TransactionKind::Push, Ok(NvmePacket::CommandRequest { repr, .. }))
                if self.config.vendor_commands =>
            {
                self.on_command_request(now, engine, connection, &repr)
            }
            _ => Answer::Malformed,
        };
        engine.release(request.payload);
        let answered = match answer {
            Answer::Accept => engine.ulp_ack(now, connection, rsn),
            Answer::NotReady => {
                let nack = UlpNack::ReceiverNotReady {
                    timeout: self.config.rnr_timeout,
                    ulp_nack_code: 0,
                };
                engine.ulp_nack(now, connection, rsn, nack)
            }
            Answer::Malformed => {
                self.stats.malformed += 1;
                let nack = UlpNack::CompletionInError {
                    ulp_nack_code: MALFORMED_NACK_CODE,
                };
                engine.ulp_nack(now, connection, rsn, nack)
            }
        };
        if answered.is_err() {
            self.stats.transport_failures += 1;
        }
    }

    /// A Read or Write Request: joins its tCMD (or starts one), or is
    /// answered on its own with the status that refuses it.
    fn on_command<B: PacketBuf>(
        &mut self,
        now: Timestamp,
        engine: &mut Engine<B, NvmeData>,
        connection: ConnectionHandle,
        nbth: &Nbth,
        command: &Command,
        write: bool,
    ) -> Answer {
        if let Err(status) = self.check_command(nbth, command) {
            self.count_ncmd(write);
            self.send_untracked(now, engine, connection, nbth, write, status);
            return Answer::Accept;
        }
        let Some(namespace) = self.namespace(command.target_nsid) else {
            return Answer::Malformed;
        };
        let key = Key {
            connection,
            function: nbth.initiator_function,
            icmd_id: nbth.icmd_id,
            group: nbth.group,
        };
        let ncmd = Parked {
            key,
            nbth: *nbth,
            command: *command,
            format: namespace.format,
            write,
        };
        if let Some(&slot) = self.by_key.get(&key) {
            self.join(now, engine, slot, &ncmd);
            return Answer::Accept;
        }
        let shortage = if self.parked.is_empty() {
            match self.start_tcmd(now, engine, &ncmd) {
                Ok(slot) => {
                    self.join(now, engine, slot, &ncmd);
                    return Answer::Accept;
                }
                Err(shortage) => Some(shortage),
            }
        } else {
            None
        };
        // Falcon 0.9 §6 (p.8): Push Data and Pull Data share the data
        // sliding window, and a first transmission needs PSN < BPSN +
        // fcwnd (§9.1.2). A request NACKed RNR stays at the base of the
        // initiator's window until it is accepted: the nCMDs and Write Data
        // Responses that a tCMD of this connection still waits for may
        // then never be sent, and the resources this request waits for
        // never free. Such a request is accepted and parked until a tCMD
        // can start for it; RNR is left for connections where it blocks
        // nothing a tCMD waits for.
        if self.parked.len() < self.config.parked_ncmds && self.waits_for_initiator(connection) {
            self.parked.push_back(ncmd);
            self.stats.parked += 1;
            return Answer::Accept;
        }
        match shortage {
            Some(Shortage::Slot) => self.stats.rnr_no_slot += 1,
            Some(Shortage::Buffer) => self.stats.rnr_no_buffer += 1,
            Some(Shortage::Worker) => self.stats.rnr_worker_busy += 1,
            // Parked requests wait for the next free tCMD first.
            None => self.stats.rnr_behind_parked += 1,
        }
        Answer::NotReady
    }

    /// Records an nCMD in the tCMD in `slot` (or answers it on its own when
    /// it does not belong there), then moves it on: a write's data is
    /// pulled, a read's response goes as soon as the tCMD's read is done.
    fn join<B: PacketBuf>(
        &mut self,
        now: Timestamp,
        engine: &mut Engine<B, NvmeData>,
        slot: u32,
        ncmd: &Parked,
    ) {
        let offset = ncmd.nbth.ncnt_offset;
        let entry = &mut self.slots[slot as usize];
        let state = entry.ncmds.get_mut(usize::from(offset));
        let tcmd = match (entry.tcmd.as_mut(), state) {
            (Some(tcmd), Some(state))
                if tcmd.write == ncmd.write
                    && tcmd.command == ncmd.command
                    && tcmd.nbth.ncnt_total == ncmd.nbth.ncnt_total
                    && state.phase == Phase::Missing =>
            {
                *state = NcmdState {
                    initiator_tag: ncmd.nbth.initiator_tag,
                    phase: Phase::Waiting,
                };
                tcmd
            }
            _ => {
                // Another command under a live tCMD's key, or an nCMD
                // twice: the peer broke the key's uniqueness.
                self.stats.malformed += 1;
                let connection = ncmd.key.connection;
                self.send_untracked(
                    now,
                    engine,
                    connection,
                    &ncmd.nbth,
                    ncmd.write,
                    Status::INVALID_FIELD,
                );
                return;
            }
        };
        tcmd.arrived += 1;
        self.count_ncmd(ncmd.write);
        let Some(tcmd) = self.slots[slot as usize].tcmd.as_ref() else {
            return;
        };
        if ncmd.write {
            match tcmd.error {
                Some(error) => self.data_arrived(now, engine, slot, offset, error),
                None => self.pull(now, engine, slot, offset),
            }
        } else if let Io::Done(_) = tcmd.io {
            self.send_read_response(now, engine, slot, offset);
        }
    }

    /// Counts an nCMD taken in (once: not its RNR redeliveries).
    fn count_ncmd(&mut self, write: bool) {
        if write {
            self.stats.write_ncmds += 1;
        } else {
            self.stats.read_ncmds += 1;
        }
    }

    /// Whether a tCMD of `connection` still waits for something the
    /// initiator sends in its data window: an nCMD, or a write's data.
    fn waits_for_initiator(&self, connection: ConnectionHandle) -> bool {
        self.slots
            .iter()
            .filter_map(|slot| slot.tcmd.as_ref())
            .any(|tcmd| {
                tcmd.key.connection == connection
                    && !tcmd.aborted
                    && (tcmd.arrived < tcmd.ncmds || (tcmd.write && tcmd.data_in < tcmd.ncmds))
            })
    }

    /// Parked nCMDs, oldest first: those of a live tCMD join it, the others
    /// start tCMDs while resources last (in order: once one cannot start,
    /// later ones wait behind it).
    pub(super) fn start_parked<B: PacketBuf>(
        &mut self,
        now: Timestamp,
        engine: &mut Engine<B, NvmeData>,
    ) {
        let mut blocked = false;
        for _ in 0..self.parked.len() {
            let Some(ncmd) = self.parked.pop_front() else {
                break;
            };
            if let Some(&slot) = self.by_key.get(&ncmd.key) {
                self.join(now, engine, slot, &ncmd);
                continue;
            }
            if !blocked {
                if let Ok(slot) = self.start_tcmd(now, engine, &ncmd) {
                    self.join(now, engine, slot, &ncmd);
                    continue;
                }
                blocked = true;
            }
            self.parked.push_back(ncmd);
        }
    }

    /// What refuses an nCMD on its own (no tCMD): unknown namespace, bad
    /// NCNT fields, LBAs past the namespace, unknown SQID, a tCMD larger
    /// than the buffers.
    fn check_command(&self, nbth: &Nbth, command: &Command) -> Result<(), Status> {
        let namespace = self
            .namespace(command.target_nsid)
            .ok_or(Status::INVALID_NAMESPACE)?;
        ncmd_extent(
            namespace.format.lba_size,
            command.nlb,
            nbth.ncnt_total,
            nbth.ncnt_offset,
        )
        .map_err(|_| Status::INVALID_FIELD)?;
        let blocks = u64::from(command.nlb) + 1;
        match command.slba.checked_add(blocks) {
            Some(end) if end <= namespace.blocks => {}
            _ => return Err(Status::LBA_OUT_OF_RANGE),
        }
        if !self.workers.serves(command.target_sqid)
            || namespace.format.data_len(blocks as usize) > self.config.max_tcmd_len
        {
            return Err(Status::INVALID_FIELD);
        }
        Ok(())
    }

    /// A new tCMD for `ncmd`'s key, or what is missing to start one: a
    /// slot, a buffer, room on its worker.
    fn start_tcmd<B: PacketBuf>(
        &mut self,
        now: Timestamp,
        engine: &mut Engine<B, NvmeData>,
        ncmd: &Parked,
    ) -> Result<u32, Shortage> {
        let Parked {
            key,
            nbth,
            command,
            format,
            write,
        } = *ncmd;
        if self.free.is_empty() {
            return Err(Shortage::Slot);
        }
        if self.pool.is_empty() {
            self.reclaim();
        }
        if self.pool.is_empty() {
            return Err(Shortage::Buffer);
        }
        if self.workers.in_flight_on(command.target_sqid) >= self.workers.queue_depth() {
            return Err(Shortage::Worker);
        }
        let (Some(slot), Some(mut buffers)) = (self.free.pop(), self.pool.pop()) else {
            return Err(Shortage::Slot);
        };
        let entry = &mut self.slots[slot as usize];
        let generation = entry.generation;
        let mut tcmd = Tcmd {
            key,
            write,
            command,
            format,
            ncmds: u16::from(nbth.ncnt_total) + 1,
            nbth: Nbth {
                initiator_function: nbth.initiator_function,
                data_invalid: false,
                group: nbth.group,
                target_tag: target_tag(&self.ids, slot, generation),
                ncnt_total: nbth.ncnt_total,
                initiator_tag: nbth.initiator_tag,
                ncnt_offset: 0,
                icmd_id: nbth.icmd_id,
            },
            arrived: 0,
            data_in: 0,
            responded: 0,
            io: Io::Idle,
            error: None,
            buffers: None,
            deadline: now.saturating_add(self.config.tcmd_timeout),
            aborted: false,
        };
        // Unique: pool buffers are held by nothing else, and the lengths
        // fit (check_command bounds the tCMD by max_tcmd_len).
        if let Some(owned) = Arc::get_mut(&mut buffers) {
            let sized = owned.data.set_len(tcmd.data_len()).is_ok()
                && owned.metadata.set_len(tcmd.metadata_len()).is_ok();
            if !sized {
                tcmd.error = Some(Status::INTERNAL_ERROR);
            }
        }
        tcmd.buffers = Some(buffers);
        for state in entry.ncmds.iter_mut().take(usize::from(tcmd.ncmds)) {
            state.phase = Phase::Missing;
        }
        self.next_deadline = Some(
            self.next_deadline
                .map_or(tcmd.deadline, |d| d.min(tcmd.deadline)),
        );
        if write {
            self.stats.write_tcmds += 1;
        } else {
            self.stats.read_tcmds += 1;
        }
        entry.tcmd = Some(tcmd);
        self.by_key.insert(key, slot);
        if !write {
            // NVMe-0.9 §7.1 step 4: the whole tCMD goes to the device on
            // its first Read Request.
            if let Some(status) = self.start_io(slot) {
                self.io_finished(now, engine, slot, status);
            }
        }
        Ok(slot)
    }

    /// Hands the tCMD in `slot` to its worker. `None`: in flight, or
    /// backlogged until the worker has room; `Some(status)`: it failed at
    /// once.
    fn start_io(&mut self, slot: u32) -> Option<Status> {
        let entry = &mut self.slots[slot as usize];
        let generation = entry.generation;
        let tcmd = entry.tcmd.as_mut()?;
        let tag = (u64::from(slot) << 32) | u64::from(generation);
        let (nsid, slba, blocks) = (tcmd.command.target_nsid, tcmd.command.slba, tcmd.blocks());
        let (write, fua, pi) = (tcmd.write, tcmd.command.fua, tcmd.pi());
        let Some(buffers) = tcmd.buffers.as_mut().and_then(Arc::get_mut) else {
            return Some(Status::INTERNAL_ERROR);
        };
        let data = core::mem::take(&mut buffers.data);
        let metadata = core::mem::take(&mut buffers.metadata);
        let request = match (write, fua) {
            (true, true) => IoRequest::write(tag, nsid, slba, blocks, data, metadata).with_fua(),
            (true, false) => IoRequest::write(tag, nsid, slba, blocks, data, metadata),
            (false, _) => IoRequest::read(tag, nsid, slba, blocks, data, metadata),
        }
        .with_pi(pi);
        let sqid = tcmd.command.target_sqid;
        match self.workers.submit(sqid, request) {
            Ok(()) => {
                tcmd.io = Io::InFlight;
                None
            }
            Err(rejected) => {
                if let Some(buffers) = tcmd.buffers.as_mut().and_then(Arc::get_mut) {
                    buffers.data = rejected.request.data;
                    buffers.metadata = rejected.request.metadata;
                }
                match rejected.reason {
                    RejectReason::Busy => {
                        tcmd.io = Io::Backlogged;
                        self.io_backlog.push_back((slot, generation));
                        None
                    }
                    RejectReason::UnknownSqid | RejectReason::Stopped => {
                        Some(Status::INTERNAL_ERROR)
                    }
                }
            }
        }
    }

    /// tCMDs that waited for room on their worker.
    pub(super) fn start_backlogged_io<B: PacketBuf>(
        &mut self,
        now: Timestamp,
        engine: &mut Engine<B, NvmeData>,
    ) {
        for _ in 0..self.io_backlog.len() {
            let Some((slot, generation)) = self.io_backlog.pop_front() else {
                break;
            };
            let entry = &self.slots[slot as usize];
            let waiting = entry.generation == generation
                && entry
                    .tcmd
                    .as_ref()
                    .is_some_and(|tcmd| tcmd.io == Io::Backlogged);
            if !waiting {
                continue;
            }
            if let Some(status) = self.start_io(slot) {
                self.io_finished(now, engine, slot, status);
            }
        }
    }

    /// A storage request finished.
    pub(super) fn on_io_done<B: PacketBuf>(
        &mut self,
        now: Timestamp,
        engine: &mut Engine<B, NvmeData>,
        completion: IoCompletion,
    ) {
        if completion.tag & COMMAND_IO_TAG != 0 {
            self.on_command_done(now, engine, &completion);
            return;
        }
        let slot = (completion.tag >> 32) as u32;
        let generation = completion.tag as u32;
        let Some(entry) = self.slots.get_mut(slot as usize) else {
            return;
        };
        // A tCMD with I/O out is never freed, so this always matches.
        let Some(tcmd) = entry
            .tcmd
            .as_mut()
            .filter(|_| entry.generation == generation)
        else {
            self.stats.stale += 1;
            return;
        };
        if let Some(buffers) = tcmd.buffers.as_mut().and_then(Arc::get_mut) {
            buffers.data = completion.data;
            buffers.metadata = completion.metadata;
        }
        self.io_finished(now, engine, slot, completion.status);
    }

    /// The tCMD's I/O ended with `status`: the responses waiting for it go.
    fn io_finished<B: PacketBuf>(
        &mut self,
        now: Timestamp,
        engine: &mut Engine<B, NvmeData>,
        slot: u32,
        status: Status,
    ) {
        let Some(tcmd) = self.slots[slot as usize].tcmd.as_mut() else {
            return;
        };
        tcmd.io = Io::Done(status);
        self.stats.io.record(status);
        if status.is_success() {
            let bytes = tcmd.data_len() as u64;
            if tcmd.write {
                self.stats.bytes_written += bytes;
            } else {
                self.stats.bytes_read += bytes;
            }
        }
        if tcmd.aborted {
            self.free(slot);
            return;
        }
        let (write, ncmds) = (tcmd.write, tcmd.ncmds);
        for offset in 0..ncmds {
            // Fits: at most 256 nCMDs, offsets 0..=255.
            let offset = offset as u8;
            if self.slots[slot as usize].ncmds[usize::from(offset)].phase != Phase::Waiting {
                continue;
            }
            if write {
                self.send_write_completion(now, engine, slot, offset, status);
            } else {
                self.send_read_response(now, engine, slot, offset);
            }
        }
        self.free_if_finished(slot);
    }

    /// Pulls nCMD `offset`'s data: a Write Data Request whose Request
    /// Length is the Write Data Response's (NVMe-0.9 §8.6).
    fn pull<B: PacketBuf>(
        &mut self,
        now: Timestamp,
        engine: &mut Engine<B, NvmeData>,
        slot: u32,
        offset: u8,
    ) {
        let entry = &mut self.slots[slot as usize];
        let Some(tcmd) = entry.tcmd.as_ref() else {
            return;
        };
        let state = &mut entry.ncmds[usize::from(offset)];
        let Some(extent) = tcmd.extent(offset) else {
            return;
        };
        state.phase = Phase::Pulling;
        let repr = WriteDataRequest {
            nbth: tcmd.response_nbth(offset, state.initiator_tag),
        };
        let mut bytes = [0u8; nbth::HEADER_LEN];
        repr.emit(&mut nbth::Packet::new_unchecked(&mut bytes[..]));
        let Ok(header) = UlpHeader::new(&bytes) else {
            return;
        };
        // At most 36 + 4224 bytes.
        let request_length = (RESPONSE_HEADER_LEN + extent.payload_len(tcmd.format)) as u16;
        let tag = TxTag {
            kind: TxKind::WriteDataRequest,
            target_tag: tcmd.nbth.target_tag.value(),
            offset,
        };
        let connection = tcmd.key.connection;
        self.stats.write_data_requests += 1;
        let transaction = Transaction::pull(tag.encode(), request_length).with_header(header);
        self.transmit(now, engine, connection, transaction);
    }

    /// A Write Data Response (the pull's completion), or the pull failed.
    fn on_write_data<B: PacketBuf>(
        &mut self,
        now: Timestamp,
        engine: &mut Engine<B, NvmeData>,
        tag: TxTag,
        falcon: CompletionStatus,
        payload: &[u8],
    ) {
        let Some(slot) = self.live_slot(tag.target_tag) else {
            self.stats.stale += 1;
            return;
        };
        let offset = tag.offset;
        let entry = &mut self.slots[slot as usize];
        let (Some(tcmd), Some(state)) = (entry.tcmd.as_mut(), entry.ncmds.get(usize::from(offset)))
        else {
            return;
        };
        if state.phase != Phase::Pulling {
            self.stats.stale += 1;
            return;
        }
        let status = if !falcon.is_ok() {
            self.stats.transport_failures += 1;
            Status::TRANSIENT_TRANSPORT_ERROR
        } else {
            match NvmePacket::parse(payload) {
                Ok(NvmePacket::WriteDataResponse { repr, data })
                    if repr.nbth.target_tag == tcmd.nbth.target_tag
                        && repr.nbth.ncnt_offset == offset =>
                {
                    if repr.nbth.data_invalid {
                        self.stats.invalid_data += 1;
                        Status::DATA_TRANSFER_ERROR
                    } else if tcmd.error.is_some() {
                        // Never written: the data is not needed.
                        Status::SUCCESS
                    } else if unpack(tcmd, offset, data) {
                        Status::SUCCESS
                    } else {
                        self.stats.malformed += 1;
                        Status::DATA_TRANSFER_ERROR
                    }
                }
                _ => {
                    self.stats.malformed += 1;
                    Status::DATA_TRANSFER_ERROR
                }
            }
        };
        self.data_arrived(now, engine, slot, offset, status);
    }

    /// nCMD `offset`'s data is in (or will never be: `status`). Every nCMD
    /// but the last is completed now (NVMe-0.9 §7.2: "all nCMDs except the
    /// last one without waiting for the write completion"); after the
    /// last, the tCMD is written unless an nCMD's data was bad.
    fn data_arrived<B: PacketBuf>(
        &mut self,
        now: Timestamp,
        engine: &mut Engine<B, NvmeData>,
        slot: u32,
        offset: u8,
        status: Status,
    ) {
        let Some(tcmd) = self.slots[slot as usize].tcmd.as_mut() else {
            return;
        };
        tcmd.data_in += 1;
        if !status.is_success() && tcmd.error.is_none() {
            tcmd.error = Some(status);
        }
        if tcmd.data_in < tcmd.ncmds {
            let status = tcmd.error.unwrap_or(Status::SUCCESS);
            if status.is_success() {
                self.stats.early_write_completions += 1;
            }
            self.send_write_completion(now, engine, slot, offset, status);
            return;
        }
        match tcmd.error {
            Some(error) => self.send_write_completion(now, engine, slot, offset, error),
            None => {
                self.slots[slot as usize].ncmds[usize::from(offset)].phase = Phase::Waiting;
                if let Some(status) = self.start_io(slot) {
                    self.io_finished(now, engine, slot, status);
                }
            }
        }
    }

    /// nCMD `offset`'s Read Response: its blocks in DIF from the tCMD
    /// buffer, or the error status and no data.
    fn send_read_response<B: PacketBuf>(
        &mut self,
        now: Timestamp,
        engine: &mut Engine<B, NvmeData>,
        slot: u32,
        offset: u8,
    ) {
        let entry = &mut self.slots[slot as usize];
        let Some(tcmd) = entry.tcmd.as_ref() else {
            return;
        };
        let (Io::Done(status), Some(extent), Some(buffers)) =
            (tcmd.io, tcmd.extent(offset), tcmd.buffers.as_ref())
        else {
            return;
        };
        let state = &mut entry.ncmds[usize::from(offset)];
        state.phase = Phase::Responding;
        let data = if status.is_success() {
            let shared: SharedBuffers = Arc::clone(buffers) as SharedBuffers;
            NvmeData::blocks(shared, span(tcmd.format, &extent), Layout::READ_RESPONSE)
        } else {
            NvmeData::None
        };
        let repr = ReadResponse {
            nbth: tcmd.response_nbth(offset, state.initiator_tag),
            status,
            // At most one nCMD's payload (4224 bytes).
            data_len: falcon_core::api::DataSource::len(&data) as u16,
        };
        let mut bytes = [0u8; response::HEADER_LEN];
        repr.emit(&mut response::Packet::new_unchecked(&mut bytes[..]));
        let tag = TxTag {
            kind: TxKind::ReadResponse,
            target_tag: tcmd.nbth.target_tag.value(),
            offset,
        };
        let connection = tcmd.key.connection;
        self.respond(now, engine, connection, tag, &bytes, data, status);
    }

    fn send_write_completion<B: PacketBuf>(
        &mut self,
        now: Timestamp,
        engine: &mut Engine<B, NvmeData>,
        slot: u32,
        offset: u8,
        status: Status,
    ) {
        let entry = &mut self.slots[slot as usize];
        let Some(tcmd) = entry.tcmd.as_ref() else {
            return;
        };
        let state = &mut entry.ncmds[usize::from(offset)];
        state.phase = Phase::Responding;
        let repr = WriteCompletion {
            nbth: tcmd.response_nbth(offset, state.initiator_tag),
            status,
        };
        let mut bytes = [0u8; response::HEADER_LEN];
        repr.emit(&mut response::Packet::new_unchecked(&mut bytes[..]));
        let tag = TxTag {
            kind: TxKind::WriteCompletion,
            target_tag: tcmd.nbth.target_tag.value(),
            offset,
        };
        let connection = tcmd.key.connection;
        self.respond(now, engine, connection, tag, &bytes, NvmeData::None, status);
    }

    /// An nCMD's response without a tCMD: the request's own NBTH and the
    /// status that refused it, no data.
    fn send_untracked<B: PacketBuf>(
        &mut self,
        now: Timestamp,
        engine: &mut Engine<B, NvmeData>,
        connection: ConnectionHandle,
        request: &Nbth,
        write: bool,
        status: Status,
    ) {
        let nbth = Nbth {
            data_invalid: false,
            target_tag: TargetTag::ZERO,
            ..*request
        };
        let mut bytes = [0u8; response::HEADER_LEN];
        let mut packet = response::Packet::new_unchecked(&mut bytes[..]);
        if write {
            WriteCompletion { nbth, status }.emit(&mut packet);
        } else {
            ReadResponse {
                nbth,
                status,
                data_len: 0,
            }
            .emit(&mut packet);
        }
        let tag = TxTag {
            kind: TxKind::Untracked,
            target_tag: 0,
            offset: request.ncnt_offset,
        };
        self.respond(now, engine, connection, tag, &bytes, NvmeData::None, status);
    }

    /// Pushes a response.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn respond<B: PacketBuf>(
        &mut self,
        now: Timestamp,
        engine: &mut Engine<B, NvmeData>,
        connection: ConnectionHandle,
        tag: TxTag,
        header: &[u8],
        data: NvmeData,
        status: Status,
    ) {
        let Ok(header) = UlpHeader::new(header) else {
            return;
        };
        self.stats.responses.record(status);
        let transaction = Transaction::push(tag.encode(), data).with_header(header);
        self.transmit(now, engine, connection, transaction);
    }

    /// A transaction of ours completed at Falcon.
    pub(super) fn on_completion<B: PacketBuf>(
        &mut self,
        now: Timestamp,
        engine: &mut Engine<B, NvmeData>,
        completion: Completion<B, NvmeData>,
    ) {
        let Completion {
            tag, status, data, ..
        } = completion;
        match TxTag::decode(tag) {
            Some(
                tag @ TxTag {
                    kind: TxKind::WriteDataRequest,
                    ..
                },
            ) => self.on_write_data(now, engine, tag, status, &data),
            Some(tag) => {
                if !status.is_ok() {
                    self.stats.transport_failures += 1;
                }
                if tag.kind != TxKind::Untracked {
                    self.response_done(tag);
                }
            }
            None => self.stats.stale += 1,
        }
        engine.release(data);
    }

    /// A transaction the engine refused outright (its connection is gone):
    /// as if Falcon had failed it.
    pub(super) fn transaction_failed<B: PacketBuf>(
        &mut self,
        now: Timestamp,
        engine: &mut Engine<B, NvmeData>,
        tag: u64,
    ) {
        match TxTag::decode(tag) {
            Some(
                tag @ TxTag {
                    kind: TxKind::WriteDataRequest,
                    ..
                },
            ) => self.on_write_data(now, engine, tag, CompletionStatus::DeadConnection, &[]),
            Some(tag) if tag.kind != TxKind::Untracked => self.response_done(tag),
            _ => {}
        }
    }

    /// A response's Falcon transaction ended.
    fn response_done(&mut self, tag: TxTag) {
        let Some(slot) = self.live_slot(tag.target_tag) else {
            self.stats.stale += 1;
            return;
        };
        let entry = &mut self.slots[slot as usize];
        let (Some(tcmd), Some(state)) = (
            entry.tcmd.as_mut(),
            entry.ncmds.get_mut(usize::from(tag.offset)),
        ) else {
            return;
        };
        if state.phase != Phase::Responding {
            self.stats.stale += 1;
            return;
        }
        state.phase = Phase::Done;
        tcmd.responded += 1;
        self.free_if_finished(slot);
    }

    /// The slot of a live tCMD's Target Tag.
    fn live_slot(&self, target_tag: u32) -> Option<u32> {
        let slot = self.ids.slot(target_tag);
        let entry = self.slots.get(slot as usize)?;
        (entry.generation == self.ids.generation(target_tag) && entry.tcmd.is_some())
            .then_some(slot)
    }

    fn free_if_finished(&mut self, slot: u32) {
        if self.slots[slot as usize]
            .tcmd
            .as_ref()
            .is_some_and(Tcmd::finished)
        {
            self.free(slot);
        }
    }

    /// Ends the tCMD in `slot`: its key, slot and buffer go back.
    fn free(&mut self, slot: u32) {
        let entry = &mut self.slots[slot as usize];
        let Some(tcmd) = entry.tcmd.take() else {
            return;
        };
        entry.generation = self.ids.next_generation(entry.generation);
        if self.by_key.get(&tcmd.key) == Some(&slot) {
            self.by_key.remove(&tcmd.key);
        }
        if let Some(buffers) = tcmd.buffers {
            if Arc::strong_count(&buffers) == 1 {
                self.pool.push(buffers);
            } else {
                self.lent.push(buffers);
            }
        }
        self.free.push(slot);
    }

    /// `connection` is gone (closed by the control plane, which the engine
    /// does not report as an event, or failed): its tCMDs end (one with I/O
    /// on a worker when the I/O is back), and what waited for its credits
    /// goes.
    pub fn handle_connection_closed(&mut self, connection: ConnectionHandle) {
        self.tx.retain(|outgoing| outgoing.connection != connection);
        self.parked.retain(|ncmd| ncmd.key.connection != connection);
        self.commands.abort_on(connection);
        for slot in 0..self.slots.len() as u32 {
            let Some(tcmd) = self.slots[slot as usize].tcmd.as_mut() else {
                continue;
            };
            if tcmd.key.connection != connection || tcmd.aborted {
                continue;
            }
            self.stats.aborted_tcmds += 1;
            if tcmd.io == Io::InFlight {
                tcmd.aborted = true;
            } else {
                self.free(slot);
            }
        }
    }

    /// tCMDs past their timeout answer what they owe with Transient
    /// Transport Error and end (one with I/O on a worker gets more time:
    /// its I/O comes back first).
    pub(super) fn expire<B: PacketBuf>(
        &mut self,
        now: Timestamp,
        engine: &mut Engine<B, NvmeData>,
    ) {
        match self.next_deadline {
            Some(deadline) if deadline <= now => {}
            _ => return,
        }
        let mut next: Option<Timestamp> = None;
        for slot in 0..self.slots.len() as u32 {
            let Some(tcmd) = self.slots[slot as usize].tcmd.as_mut() else {
                continue;
            };
            if tcmd.deadline > now || tcmd.io == Io::InFlight {
                if tcmd.deadline <= now {
                    tcmd.deadline = now.saturating_add(self.config.tcmd_timeout);
                }
                next = Some(next.map_or(tcmd.deadline, |n| n.min(tcmd.deadline)));
                continue;
            }
            self.stats.timed_out_tcmds += 1;
            let (connection, write, ncmds) = (tcmd.key.connection, tcmd.write, tcmd.ncmds);
            for offset in 0..ncmds {
                // Fits: offsets 0..=255.
                let offset = offset as u8;
                let entry = &self.slots[slot as usize];
                let (Some(tcmd), state) = (entry.tcmd.as_ref(), entry.ncmds[usize::from(offset)])
                else {
                    break;
                };
                if matches!(state.phase, Phase::Pulling | Phase::Waiting) {
                    let nbth = tcmd.response_nbth(offset, state.initiator_tag);
                    self.send_untracked(
                        now,
                        engine,
                        connection,
                        &nbth,
                        write,
                        Status::TRANSIENT_TRANSPORT_ERROR,
                    );
                }
            }
            self.free(slot);
        }
        self.next_deadline = next;
    }
}

/// The blocks of `extent` in a tCMD buffer of `format`.
fn span(format: Format, extent: &Extent) -> BlockSpan {
    BlockSpan {
        format,
        first_block: extent.first_block,
        blocks: extent.blocks,
    }
}

/// A Write Data Response's DIX data into the tCMD buffer at nCMD
/// `offset`'s place; `false` unless it is exactly that nCMD's blocks.
fn unpack(tcmd: &mut Tcmd, offset: u8, payload: &[u8]) -> bool {
    let Some(extent) = tcmd.extent(offset) else {
        return false;
    };
    let format = tcmd.format;
    if payload.len() != extent.payload_len(format) {
        return false;
    }
    let Some(buffers) = tcmd.buffers.as_mut().and_then(Arc::get_mut) else {
        return false;
    };
    let data_range = extent.data_offset..extent.data_offset + extent.data_len;
    let metadata_start = extent.metadata_offset(format);
    let metadata_range = metadata_start..metadata_start + extent.metadata_len(format);
    let (Some(data), Some(metadata)) = (
        buffers.data.get_mut(data_range),
        buffers.metadata.get_mut(metadata_range),
    ) else {
        return false;
    };
    matches!(
        Layout::WRITE_DATA_RESPONSE.unpack(format, payload, data, metadata),
        Ok(blocks) if blocks == extent.blocks as usize
    )
}
