//! What a device counts.
//!
//! Layer: RDMA ULP, observability. Owns [`DeviceStats`] and [`Refusal`]:
//! every received packet the device does not take as asked (dropped,
//! NACKed, answered in error) is counted under one named reason (STYLE.md
//! habit 9; the engine's `DropReason` counts what never reached us).

use core::fmt;

/// Why the device refused, dropped or failed something it received. Each
/// has a stable snake_case name for counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Refusal {
    /// The RDMA headers do not parse (the parse error's own name is in
    /// [`DeviceStats::last_malformed`]).
    Malformed,
    /// The destination QP does not exist.
    UnknownQp,
    /// A request on another connection than its QP's (RDMA-0.9 §6.9):
    /// NACKed with invalid CID, the QP carries on.
    RequestWrongCid,
    /// A response naming a QP of another connection (RDMA-0.9 §6.9):
    /// dropped without a NACK.
    ResponseWrongCid,
    /// A request to a QP in RESET or INIT.
    QpNotReady,
    /// A request to a QP in ERR.
    QpInError,
    /// A request out of sequence (SN, RMSN, First/Middle/Last) or of an
    /// opcode the QP does not take.
    InvalidRequest,
    /// A key, bound or right refused (RETH, AtomicETH, IETH).
    AccessDenied,
    /// A message longer than its receive, a READ longer than the MTU.
    TooLong,
    /// A receive's own local key refused the data.
    ReceiveProtection,
    /// No receive posted: RNR NACK.
    NoReceive,
    /// A UD datagram with the wrong Q_Key: dropped (as in InfiniBand).
    QkeyMismatch,
    /// A UD datagram with no receive posted, or longer than it: dropped.
    UdDropped,
    /// A response that does not match its request (opcode, SN, STETH,
    /// length).
    BadResponse,
    /// A completion for work gone (its QP reset, failed or destroyed).
    Stale,
}

impl Refusal {
    pub const ALL: [Refusal; 15] = [
        Refusal::Malformed,
        Refusal::UnknownQp,
        Refusal::RequestWrongCid,
        Refusal::ResponseWrongCid,
        Refusal::QpNotReady,
        Refusal::QpInError,
        Refusal::InvalidRequest,
        Refusal::AccessDenied,
        Refusal::TooLong,
        Refusal::ReceiveProtection,
        Refusal::NoReceive,
        Refusal::QkeyMismatch,
        Refusal::UdDropped,
        Refusal::BadResponse,
        Refusal::Stale,
    ];

    pub const fn name(self) -> &'static str {
        match self {
            Refusal::Malformed => "malformed",
            Refusal::UnknownQp => "unknown_qp",
            Refusal::RequestWrongCid => "request_wrong_cid",
            Refusal::ResponseWrongCid => "response_wrong_cid",
            Refusal::QpNotReady => "qp_not_ready",
            Refusal::QpInError => "qp_in_error",
            Refusal::InvalidRequest => "invalid_request",
            Refusal::AccessDenied => "access_denied",
            Refusal::TooLong => "too_long",
            Refusal::ReceiveProtection => "receive_protection",
            Refusal::NoReceive => "no_receive",
            Refusal::QkeyMismatch => "qkey_mismatch",
            Refusal::UdDropped => "ud_dropped",
            Refusal::BadResponse => "bad_response",
            Refusal::Stale => "stale",
        }
    }

    const fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A device's counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeviceStats {
    /// Send work requests taken by `post_send`.
    pub sends_posted: u64,
    /// Send work requests retired (completion reported, or unsignalled
    /// and done), by outcome.
    pub sends_ok: u64,
    pub sends_failed: u64,
    /// Falcon transactions submitted: pushes and pulls.
    pub pushes: u64,
    pub pulls: u64,
    /// Payload bytes sent by pushes (SEND, WRITE).
    pub bytes_pushed: u64,
    /// Submits Falcon refused for credits, kept for after the Xon.
    pub credit_waits: u64,
    /// RNR NACKs our sends met, and messages failed by `rnr_retry`.
    pub rnr_nacks: u64,
    pub rnr_retry_exceeded: u64,
    /// Receives completed (successfully or not).
    pub receives: u64,
    /// Requests answered: pushes ACKed, pulls answered with data.
    pub requests: u64,
    /// Bytes placed in local memory: received SENDs and WRITEs, READ
    /// responses.
    pub bytes_placed: u64,
    /// Bytes served to READs.
    pub bytes_served: u64,
    /// SEND packets placed before an earlier packet of their QP's
    /// messages (weak and unordered QPs place as packets come).
    pub placed_out_of_order: u64,
    pub atomics_executed: u64,
    /// Pull answers (data or error) kept for after a Data-class Xon.
    pub answer_waits: u64,
    pub xoff: u64,
    pub xon: u64,
    pub connection_faults: u64,
    /// QPs that went to ERR.
    pub qp_errors: u64,
    refusals: [u64; Refusal::ALL.len()],
    /// The name of the last parse error counted as [`Refusal::Malformed`].
    pub last_malformed: Option<&'static str>,
}

impl DeviceStats {
    /// How many times `reason` happened.
    pub fn refused(&self, reason: Refusal) -> u64 {
        self.refusals[reason.index()]
    }

    /// Every reason with its count.
    pub fn refusals(&self) -> impl Iterator<Item = (Refusal, u64)> + '_ {
        Refusal::ALL.iter().map(|&r| (r, self.refused(r)))
    }

    pub(crate) fn refuse(&mut self, reason: Refusal) {
        self.refusals[reason.index()] += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_has_its_counter_and_name() {
        let mut stats = DeviceStats::default();
        for (i, &reason) in Refusal::ALL.iter().enumerate() {
            assert_eq!(reason.index(), i);
            for _ in 0..=i {
                stats.refuse(reason);
            }
        }
        for (i, (reason, count)) in stats.refusals().enumerate() {
            assert_eq!(count, i as u64 + 1, "{reason}");
        }
        let names: std::collections::BTreeSet<_> = Refusal::ALL.iter().map(|r| r.name()).collect();
        assert_eq!(names.len(), Refusal::ALL.len());
    }
}
