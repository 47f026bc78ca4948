//! What the initiator receives from a target: Read Responses and Write
//! Completions (pushes), Write Data Requests (pulls).
//!
//! Layer: NVMe initiator, receive path. Parses each packet once, finds its
//! nCMD by iCMD Identifier and Initiator Tag (slot and generation), and
//! answers Falcon: a push is ULP-ACKed (NACKed complete-in-error when it
//! does not parse), a pull is answered with its Write Data Response. Never
//! panics on a packet: what does not match an outstanding nCMD is counted
//! and dropped.

use falcon_core::api::{
    Engine, PacketBuf, Request, Timestamp, TransactionKind, UlpHeader, UlpNack,
};

use crate::data::NvmeData;
use crate::split::Ncmd;
use crate::status::Status;
use crate::wire::write_data::{self, RESPONSE_HEADER_LEN};
use crate::wire::{
    Nbth, NvmePacket, ReadResponse, WriteCompletion, WriteDataResponse, MALFORMED_NACK_CODE,
};

use super::icmd::INITIATOR_TAG;
use super::{Initiator, PullAnswer};

/// The nCMD a packet names.
enum Lookup {
    /// An nCMD still waiting for its response.
    Live {
        slot: u32,
        index: u16,
        group: usize,
        ncmd: Ncmd,
    },
    /// Its iCMD is gone, or it already has its response.
    Stale,
    /// No nCMD of ours could carry these fields.
    Mismatch,
}

/// What to tell Falcon about a received push.
enum Verdict {
    Accept,
    Malformed,
}

impl Initiator {
    pub(super) fn on_request<B: PacketBuf>(
        &mut self,
        now: Timestamp,
        engine: &mut Engine<B, NvmeData>,
        request: Request<B>,
    ) {
        match request.kind {
            TransactionKind::Push => self.on_push(now, engine, request),
            TransactionKind::Pull => self.on_write_data_request(now, engine, request),
        }
    }

    /// A Read Response or Write Completion.
    fn on_push<B: PacketBuf>(
        &mut self,
        now: Timestamp,
        engine: &mut Engine<B, NvmeData>,
        request: Request<B>,
    ) {
        let verdict = match NvmePacket::parse(&request.payload) {
            Ok(NvmePacket::ReadResponse { repr, data }) => self.on_read_response(now, &repr, data),
            Ok(NvmePacket::WriteCompletion(repr)) => self.on_write_completion(now, &repr),
            Ok(NvmePacket::CommandResponse { repr, .. }) if self.config.vendor_commands => {
                if self.on_command_response(now, &repr) {
                    Verdict::Accept
                } else {
                    Verdict::Malformed
                }
            }
            Ok(_) | Err(_) => Verdict::Malformed,
        };
        let answered = match verdict {
            Verdict::Accept => engine.ulp_ack(now, request.connection, request.rsn),
            Verdict::Malformed => {
                self.stats.malformed += 1;
                let nack = UlpNack::CompletionInError {
                    ulp_nack_code: MALFORMED_NACK_CODE,
                };
                engine.ulp_nack(now, request.connection, request.rsn, nack)
            }
        };
        if answered.is_err() {
            self.stats.push_failures += 1;
        }
        engine.release(request.payload);
    }

    fn on_read_response(&mut self, now: Timestamp, repr: &ReadResponse, data: &[u8]) -> Verdict {
        let (slot, index, ncmd) = match self.lookup(&repr.nbth) {
            Lookup::Live {
                slot, index, ncmd, ..
            } => (slot, index, ncmd),
            Lookup::Stale => {
                self.stats.stale += 1;
                return Verdict::Accept;
            }
            Lookup::Mismatch => return Verdict::Malformed,
        };
        let Some(icmd) = self.slots[slot as usize].icmd.as_mut() else {
            return Verdict::Accept;
        };
        if icmd.is_write() {
            return Verdict::Malformed;
        }
        let status = if !repr.status.is_success() {
            repr.status
        } else if icmd.place_read(&ncmd, data).is_ok() {
            Status::SUCCESS
        } else {
            // A success whose data is not the nCMD's blocks: the read
            // cannot be trusted.
            self.stats.malformed += 1;
            Status::DATA_TRANSFER_ERROR
        };
        self.finish_ncmd(now, slot, index, status);
        Verdict::Accept
    }

    fn on_write_completion(&mut self, now: Timestamp, repr: &WriteCompletion) -> Verdict {
        let (slot, index, group) = match self.lookup(&repr.nbth) {
            Lookup::Live {
                slot, index, group, ..
            } => (slot, index, group),
            Lookup::Stale => {
                self.stats.stale += 1;
                return Verdict::Accept;
            }
            Lookup::Mismatch => return Verdict::Malformed,
        };
        let Some(icmd) = self.slots[slot as usize].icmd.as_ref() else {
            return Verdict::Accept;
        };
        if !icmd.is_write() {
            return Verdict::Malformed;
        }
        // NVMe-0.9 §7.2: the target may complete every nCMD but the last
        // before its device has written; seen from here, a completion
        // while the group still has data to send.
        if usize::from(icmd.data_sent[group]) < icmd.group_ncmds(group) {
            self.stats.early_write_completions += 1;
        }
        self.finish_ncmd(now, slot, index, repr.status);
        Verdict::Accept
    }

    /// A Write Data Request: the pull is answered with the nCMD's data in
    /// DIX, or with INV and no data when the data cannot be sent (the
    /// iCMD is gone, the request does not match it, the initiator's PI
    /// check failed), so that the target writes nothing.
    fn on_write_data_request<B: PacketBuf>(
        &mut self,
        now: Timestamp,
        engine: &mut Engine<B, NvmeData>,
        request: Request<B>,
    ) {
        let connection = request.connection;
        engine.release(request.payload);
        let nbth = match NvmePacket::parse(&request.header) {
            Ok(NvmePacket::WriteDataRequest(repr)) => repr.nbth,
            Ok(_) | Err(_) => {
                self.stats.malformed += 1;
                let nack = UlpNack::CompletionInError {
                    ulp_nack_code: MALFORMED_NACK_CODE,
                };
                if engine.ulp_nack(now, connection, request.rsn, nack).is_err() {
                    self.stats.push_failures += 1;
                }
                return;
            }
        };
        let data = match self.lookup(&nbth) {
            Lookup::Live {
                slot, group, ncmd, ..
            } => self.write_data(slot, group, &ncmd, request.request_length),
            Lookup::Stale => {
                self.stats.stale += 1;
                None
            }
            Lookup::Mismatch => {
                self.stats.malformed += 1;
                None
            }
        };
        let response = WriteDataResponse {
            nbth: Nbth {
                data_invalid: data.is_none(),
                ..nbth
            },
            // At most one nCMD's payload (4224 bytes).
            data_len: data
                .as_ref()
                .map_or(0, |d| falcon_core::api::DataSource::len(d) as u16),
        };
        let mut bytes = [0u8; RESPONSE_HEADER_LEN];
        response.emit(&mut write_data::Packet::new_unchecked(&mut bytes[..]));
        let Ok(header) = UlpHeader::new(&bytes) else {
            return;
        };
        // Take the request first (its network resources go back), then
        // answer when Pull Data credits allow.
        if engine.ulp_ack(now, connection, request.rsn).is_err() {
            self.stats.push_failures += 1;
        }
        self.answer_pull(
            now,
            engine,
            PullAnswer {
                connection,
                rsn: request.rsn,
                header,
                data: data.unwrap_or_default(),
            },
        );
    }

    /// nCMD `ncmd`'s write data, if the request asks for exactly it and
    /// the PI policy lets it go.
    fn write_data(
        &mut self,
        slot: u32,
        group: usize,
        ncmd: &Ncmd,
        request_length: u16,
    ) -> Option<NvmeData> {
        let icmd = self.slots[slot as usize].icmd.as_mut()?;
        if !icmd.is_write() {
            self.stats.malformed += 1;
            return None;
        }
        icmd.data_sent[group] = icmd.data_sent[group].saturating_add(1);
        let expected = RESPONSE_HEADER_LEN + icmd.span(ncmd).payload_len();
        if usize::from(request_length) != expected {
            self.stats.malformed += 1;
            return None;
        }
        let data = icmd.write_data(group, ncmd);
        if data.is_none() {
            self.stats.invalidated += 1;
        }
        data
    }

    /// The nCMD an NBTH names (iCMD slot and generation, nCMD index and
    /// generation, and the nCMD's group and NCNT fields).
    fn lookup(&self, nbth: &Nbth) -> Lookup {
        let id = nbth.icmd_id.value();
        let (slot, generation) = (self.ids.slot(id), self.ids.generation(id));
        let Some(entry) = self.slots.get(slot as usize) else {
            return Lookup::Mismatch;
        };
        let Some(icmd) = entry
            .icmd
            .as_ref()
            .filter(|_| entry.generation == generation)
        else {
            return Lookup::Stale;
        };
        let tag = nbth.initiator_tag.value();
        if INITIATOR_TAG.generation(tag) != generation & INITIATOR_TAG.generation_mask() {
            return Lookup::Mismatch;
        }
        // Fits: 9 bits.
        let index = INITIATOR_TAG.slot(tag) as u16;
        let Some((group, ncmd)) = icmd.ncmd(index) else {
            return Lookup::Mismatch;
        };
        if ncmd.group != nbth.group
            || ncmd.ncnt_offset != nbth.ncnt_offset
            || ncmd.ncnt_total != nbth.ncnt_total
        {
            return Lookup::Mismatch;
        }
        if icmd.is_done(index) {
            return Lookup::Stale;
        }
        Lookup::Live {
            slot,
            index,
            group,
            ncmd,
        }
    }
}
