//! The ULP code of our NACKs: why a responder refused a request.
//!
//! Layer: RDMA ULP, a wire value. Falcon carries an 8-bit ULP NACK code it
//! does not interpret (Falcon-0.9 §7.6); RDMA-0.9 assigns it no values, so
//! these are ours, chosen so that the requester can both name the verbs
//! status ([`RemoteCode::status`]) and know whether the refused SEND took
//! a receive at the responder ([`RemoteCode::consumes_receive`]): in
//! complete-in-error mode the requester then numbers its next message
//! (SETH RMSN, RDMA-0.9 §8.3.2) as the responder expects.
//!
//! A pull refused in error comes back as zero-length Pull Data, which has
//! no code (Falcon-0.9 §8.5.3.5): the requester of a READ or atomic
//! reports `IBV_WC_REM_ACCESS_ERR`, the cause of almost every such
//! refusal, and the responder's counters name the precise one.

use crate::verbs::WcStatus;

/// See the module doc. Each discriminant is the wire code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum RemoteCode {
    /// The request is invalid: unknown QP, out of sequence, an opcode the
    /// QP does not take, malformed. Took no receive.
    InvalidRequest = 1,
    /// A key, bound or right refused the access. Took no receive.
    RemoteAccess = 2,
    /// The responder's QP is in ERR (or not ready). Took no receive.
    QpNotReceiving = 3,
    /// The message is longer than the receive it took.
    MessageTooLong = 4,
    /// The receive's own keys refused the data.
    ReceiveProtection = 5,
    /// The key a SEND with Invalidate named could not be invalidated; the
    /// message itself was received.
    InvalidateFailed = 6,
}

impl RemoteCode {
    /// The code of a wire value; an unknown one reads as
    /// [`RemoteCode::QpNotReceiving`] (`IBV_WC_REM_OP_ERR`, nothing taken).
    pub const fn from_wire(code: u8) -> RemoteCode {
        match code {
            1 => RemoteCode::InvalidRequest,
            2 => RemoteCode::RemoteAccess,
            4 => RemoteCode::MessageTooLong,
            5 => RemoteCode::ReceiveProtection,
            6 => RemoteCode::InvalidateFailed,
            _ => RemoteCode::QpNotReceiving,
        }
    }

    pub const fn wire(self) -> u8 {
        self as u8
    }

    /// The requester's work completion status (InfiniBand's NAK codes:
    /// invalid request, remote access error, remote operational error).
    pub const fn status(self) -> WcStatus {
        match self {
            RemoteCode::InvalidRequest
            | RemoteCode::MessageTooLong
            | RemoteCode::InvalidateFailed => WcStatus::RemInvReqErr,
            RemoteCode::RemoteAccess => WcStatus::RemAccessErr,
            RemoteCode::QpNotReceiving | RemoteCode::ReceiveProtection => WcStatus::RemOpErr,
        }
    }

    /// Whether the refused SEND (or WRITE with immediate) took a receive,
    /// and with it its RMSN.
    pub const fn consumes_receive(self) -> bool {
        matches!(
            self,
            RemoteCode::MessageTooLong
                | RemoteCode::ReceiveProtection
                | RemoteCode::InvalidateFailed
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_name_a_status() {
        let all = [
            RemoteCode::InvalidRequest,
            RemoteCode::RemoteAccess,
            RemoteCode::QpNotReceiving,
            RemoteCode::MessageTooLong,
            RemoteCode::ReceiveProtection,
            RemoteCode::InvalidateFailed,
        ];
        for code in all {
            assert_eq!(RemoteCode::from_wire(code.wire()), code);
            assert!(!code.status().is_ok());
        }
        assert_eq!(RemoteCode::from_wire(0), RemoteCode::QpNotReceiving);
        assert_eq!(RemoteCode::from_wire(200).status(), WcStatus::RemOpErr);
        assert_eq!(RemoteCode::RemoteAccess.status(), WcStatus::RemAccessErr);
    }
}
