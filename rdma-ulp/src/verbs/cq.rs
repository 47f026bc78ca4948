//! Completion queues and work completions.
//!
//! Layer: verbs. Owns [`WorkCompletion`] with the fields of `struct ibv_wc`
//! that mean something here, its status ([`WcStatus`], the
//! `IBV_WC_*` names and codes), opcode ([`WcOpcode`]) and flags
//! ([`WcFlags`]), and `CompletionQueue`: a bounded queue of completions
//! with verbs' overrun rule. Never drops a completion silently: one that
//! finds the queue full marks it overrun, and the device raises
//! `IBV_EVENT_CQ_ERR` and moves the QP that completed into it to the
//! Error state, as InfiniBand treats a CQ overrun.

use core::fmt;
use std::collections::VecDeque;

use super::flags;

/// Handle of a completion queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cq(pub(crate) u32);

impl Cq {
    /// The raw handle (for a C shim's `ibv_cq *` table).
    pub const fn raw(self) -> u32 {
        self.0
    }
}

/// How a work request completed (`enum ibv_wc_status`; each discriminant
/// is libibverbs' value).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(u32)]
pub enum WcStatus {
    #[default]
    Success = 0,
    /// The message does not fit: a receive buffer too short, a message
    /// too long for the QP.
    LocLenErr = 1,
    /// A local QP operation error (a path MTU the engine's frames cannot
    /// carry, a connection unknown to the engine).
    LocQpOpErr = 2,
    /// A local key or address that the work request may not use.
    LocProtErr = 4,
    /// Flushed: the QP is in the Error state.
    WrFlushErr = 5,
    /// The response does not match the request (opcode, length, QP).
    BadRespErr = 7,
    /// A local access error found while placing response data.
    LocAccessErr = 8,
    /// The responder found the request invalid (unknown QP, bad sequence,
    /// too long for the receive, an unsupported operation).
    RemInvReqErr = 9,
    /// The responder refused the access (key, bounds, rights).
    RemAccessErr = 10,
    /// The responder could not complete the operation (its QP in error,
    /// a local error of its own).
    RemOpErr = 11,
    /// The transport gave up (Falcon timed out, resynced or lost the
    /// connection).
    RetryExcErr = 12,
    /// The responder was not ready `rnr_retry` times.
    RnrRetryExcErr = 13,
    /// A fatal error (the CQ overran).
    FatalErr = 19,
    GeneralErr = 21,
}

impl WcStatus {
    /// libibverbs' value.
    pub const fn code(self) -> u32 {
        self as u32
    }

    /// libibverbs' name (`ibv_wc_status_str` gives the text).
    pub const fn name(self) -> &'static str {
        match self {
            WcStatus::Success => "IBV_WC_SUCCESS",
            WcStatus::LocLenErr => "IBV_WC_LOC_LEN_ERR",
            WcStatus::LocQpOpErr => "IBV_WC_LOC_QP_OP_ERR",
            WcStatus::LocProtErr => "IBV_WC_LOC_PROT_ERR",
            WcStatus::WrFlushErr => "IBV_WC_WR_FLUSH_ERR",
            WcStatus::BadRespErr => "IBV_WC_BAD_RESP_ERR",
            WcStatus::LocAccessErr => "IBV_WC_LOC_ACCESS_ERR",
            WcStatus::RemInvReqErr => "IBV_WC_REM_INV_REQ_ERR",
            WcStatus::RemAccessErr => "IBV_WC_REM_ACCESS_ERR",
            WcStatus::RemOpErr => "IBV_WC_REM_OP_ERR",
            WcStatus::RetryExcErr => "IBV_WC_RETRY_EXC_ERR",
            WcStatus::RnrRetryExcErr => "IBV_WC_RNR_RETRY_EXC_ERR",
            WcStatus::FatalErr => "IBV_WC_FATAL_ERR",
            WcStatus::GeneralErr => "IBV_WC_GENERAL_ERR",
        }
    }

    pub const fn is_ok(self) -> bool {
        matches!(self, WcStatus::Success)
    }
}

impl fmt::Display for WcStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What completed (`enum ibv_wc_opcode`, libibverbs' values).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(u32)]
pub enum WcOpcode {
    #[default]
    Send = 0,
    RdmaWrite = 1,
    RdmaRead = 2,
    CompSwap = 3,
    FetchAdd = 4,
    /// A receive consumed by a SEND.
    Recv = 128,
    /// A receive consumed by a WRITE with immediate.
    RecvRdmaWithImm = 129,
}

impl WcOpcode {
    pub const fn code(self) -> u32 {
        self as u32
    }
}

flags! {
    /// Work completion flags (`enum ibv_wc_flags`).
    pub struct WcFlags: u32 {
        /// The first 40 bytes of a UD receive hold a GRH (never set here:
        /// Falcon carries none, the bytes are left as they were).
        const GRH = 1;
        /// `imm_data` is valid.
        const WITH_IMM = 2;
        /// `invalidated_rkey` is valid.
        const WITH_INV = 8;
    }
}

/// A work completion (`struct ibv_wc`, the fields this transport fills).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WorkCompletion {
    /// The work request's id.
    pub wr_id: u64,
    pub status: WcStatus,
    pub opcode: WcOpcode,
    /// Our reason behind an error status (a stable code, `vendor_err`).
    pub vendor_err: u32,
    /// Bytes received (receives), read (READ, atomics: 8) or sent.
    pub byte_len: u32,
    /// With [`WcFlags::WITH_IMM`]: the immediate data, in host order.
    pub imm_data: u32,
    /// With [`WcFlags::WITH_INV`]: the rkey the SEND invalidated.
    pub invalidated_rkey: u32,
    /// The local QP number.
    pub qp_num: u32,
    /// The sender's QP (UD receives).
    pub src_qp: u32,
    pub wc_flags: WcFlags,
}

/// A completion queue's entries (see the module doc).
#[derive(Debug)]
pub(crate) struct CompletionQueue {
    entries: VecDeque<WorkCompletion>,
    depth: usize,
    overrun: bool,
    /// QPs that send or receive their completions here.
    pub(crate) users: u32,
}

/// A completion found the queue full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Overrun {
    /// The first overrun of the queue (the one that raises the event).
    pub(crate) first: bool,
}

impl CompletionQueue {
    pub(crate) fn new(depth: usize) -> CompletionQueue {
        CompletionQueue {
            entries: VecDeque::with_capacity(depth.min(4096)),
            depth,
            overrun: false,
            users: 0,
        }
    }

    /// Queues `wc`, or reports the overrun (the completion is lost, as on
    /// an HCA whose CQ overflows).
    pub(crate) fn push(&mut self, wc: WorkCompletion) -> Result<(), Overrun> {
        if self.entries.len() >= self.depth {
            let first = !self.overrun;
            self.overrun = true;
            return Err(Overrun { first });
        }
        self.entries.push_back(wc);
        Ok(())
    }

    pub(crate) fn pop(&mut self) -> Option<WorkCompletion> {
        self.entries.pop_front()
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(crate) fn overrun(&self) -> bool {
        self.overrun
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_libibverbs() {
        let table = [
            (WcStatus::Success, 0, "IBV_WC_SUCCESS"),
            (WcStatus::LocLenErr, 1, "IBV_WC_LOC_LEN_ERR"),
            (WcStatus::LocProtErr, 4, "IBV_WC_LOC_PROT_ERR"),
            (WcStatus::WrFlushErr, 5, "IBV_WC_WR_FLUSH_ERR"),
            (WcStatus::RemInvReqErr, 9, "IBV_WC_REM_INV_REQ_ERR"),
            (WcStatus::RemAccessErr, 10, "IBV_WC_REM_ACCESS_ERR"),
            (WcStatus::RemOpErr, 11, "IBV_WC_REM_OP_ERR"),
            (WcStatus::RetryExcErr, 12, "IBV_WC_RETRY_EXC_ERR"),
            (WcStatus::RnrRetryExcErr, 13, "IBV_WC_RNR_RETRY_EXC_ERR"),
        ];
        for (status, code, name) in table {
            assert_eq!((status.code(), status.name()), (code, name));
        }
        assert_eq!(WcOpcode::RecvRdmaWithImm.code(), 129);
        assert_eq!(WcFlags::WITH_INV.bits(), 8);
    }

    #[test]
    fn a_full_queue_overruns_once_and_keeps_what_it_had() {
        let mut cq = CompletionQueue::new(2);
        let wc = |wr_id| WorkCompletion {
            wr_id,
            ..WorkCompletion::default()
        };
        cq.push(wc(1)).expect("room");
        cq.push(wc(2)).expect("room");
        assert_eq!(cq.push(wc(3)), Err(Overrun { first: true }));
        assert_eq!(cq.push(wc(4)), Err(Overrun { first: false }));
        assert!(cq.overrun());
        assert_eq!(cq.len(), 2);
        assert_eq!(cq.pop().map(|w| w.wr_id), Some(1));
        assert_eq!(cq.pop().map(|w| w.wr_id), Some(2));
        assert_eq!(cq.pop(), None);
    }
}
