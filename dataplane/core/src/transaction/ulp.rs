//! The ULP interface of the transaction sublayer: what a ULP submits, what
//! it is told, and how it answers.
//!
//! Layer: transaction sublayer, boundary to the ULPs (DESIGN.md §5 "ULP
//! interface"). Owns the values that cross it: [`Transaction`] (a push or
//! pull the initiator ULP submits), [`Request`] (a push or pull delivered to
//! the target ULP), [`Completion`] (the initiator's completion, with the
//! OCP completion code [`CompletionStatus`]), [`UlpEvent`], and the command
//! errors. Plain values, no behaviour beyond conversions.
//!
//! # Payload ownership
//!
//! Payloads are handed over by value: the ULP moves its `Vec<u8>` into
//! [`Transaction::payload`] and gets it back, untouched, in
//! [`Completion::request`] (or in [`Rejected::payload`] if refused). A
//! received payload reaches the ULP in [`Request::payload`], a [`Payload`]:
//! a large Push Data payload is the received frame's own buffer, taken over
//! without a copy (the port gets a recycled spare in exchange, see
//! [`super::payload`]); anything else is copied out of the frame into a
//! vector from the engine's free list. Pull Data reaches the initiator ULP
//! the same way, as the [`Payload`] in [`Completion::data`]. The ULP
//! returns buffers it is done with — `Payload`s and vectors alike —
//! through `Engine::recycle`. No vector is allocated per
//! packet once the free lists are warm; retransmissions copy from the kept
//! request vector, so nothing is copied until the frame is built. One
//! transaction is one packet (OCP Falcon 0.9 §8.1: a transaction "may
//! result in one or more packets" — in rev 0.9 every packet type carries
//! one transaction's data, so a ULP segments messages larger than a packet
//! into several transactions, as RDMA over Falcon does per MTU).

use core::fmt;

use crate::delivery::ConnectionError;
use crate::resources::Shortage;
use crate::seq::Rsn;
use crate::transaction::payload::Payload;

/// Names a connection of an engine: a slot and its generation (a closed
/// connection's handle never names its successor).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnectionHandle {
    pub(crate) index: u32,
    pub(crate) generation: u32,
}

impl ConnectionHandle {
    /// The slot index (dense, from 0): also the connection's id in the RUE
    /// state table.
    pub const fn index(self) -> u32 {
        self.index
    }
}

impl fmt::Display for ConnectionHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "conn#{}.{}", self.index, self.generation)
    }
}

/// Push or pull (OCP Falcon 0.9 §8.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TransactionKind {
    /// Pull: a Pull Request out, Pull Data (the completion) back.
    Pull,
    /// Push: Push Data out, its ACK (after the target ULP's ACK) completes it.
    Push,
}

/// A transaction the initiator ULP submits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transaction {
    /// Push or pull.
    pub kind: TransactionKind,
    /// The ULP's own identifier, returned in the completion.
    pub tag: u64,
    /// Pull: bytes of Pull Data expected (the Request Length field, ULP
    /// headers and data included). Push: ignored (the payload length).
    pub request_length: u16,
    /// Push: the Push Data payload (ULP headers and data). Pull: the ULP
    /// headers carried in the Pull Request (may be empty).
    pub payload: Vec<u8>,
}

impl Transaction {
    /// A push of `payload`.
    pub fn push(tag: u64, payload: Vec<u8>) -> Self {
        Transaction {
            kind: TransactionKind::Push,
            tag,
            request_length: 0,
            payload,
        }
    }

    /// A pull of `request_length` bytes, with `header` (ULP headers) in the
    /// Pull Request.
    pub fn pull(tag: u64, request_length: u16, header: Vec<u8>) -> Self {
        Transaction {
            kind: TransactionKind::Pull,
            tag,
            request_length,
            payload: header,
        }
    }
}

/// Completion codes to the initiator ULP (OCP Falcon 0.9 §11, table p.96).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
///
/// Each discriminant is the variant's code, so [`code`](Self::code) is a
/// cast: as a `match` it was a jump table on every completion (callgrind,
/// push64: 2378.6 → 2375.4 instructions per transaction).
#[repr(u8)]
pub enum CompletionStatus {
    /// kCmplAck (0x0): completed.
    Ack = 0x0,
    /// kCmplDeadConn (0xA): the connection is not alive.
    DeadConnection = 0xA,
    /// kCmplLocalTO (0x8): the transaction timed out (or the packet layer
    /// gave up on it: Max Retransmit Attempts, §11 footnote 1).
    LocalTimeout = 0x8,
    /// kCmplOpErr (0x9): Pull Data longer than requested.
    OperationError = 0x9,
    /// kCmplRemoteErr (0xD): the target dropped it (remote xLR), or resynced
    /// our Pull Data away.
    RemoteError = 0xD,
    /// kCmplTargetNackCID (0x4): the target ULP said invalid CID.
    TargetInvalidCid = 0x4,
    /// kCmplTargetNackCIE (0x1): the target ULP completed it in error (a
    /// push's CIE NACK, or a zero-length Pull Data for a pull, §8.5.3.5).
    TargetCompletionInError = 0x1,
    /// kCmplTargetNackNRE (0x3): the target ULP had a non-recoverable error.
    TargetNonRecoverableError = 0x3,
    /// kCmplLocalXlr (0xF; "kCmplXlr" in the initiator table): the local
    /// xLR drop filter matched it, and a Resync 0x2 took its PSN.
    LocalXlr = 0xF,
}

impl CompletionStatus {
    /// The 4-bit completion code of the spec's table.
    pub const fn code(self) -> u8 {
        self as u8
    }

    /// The spec's name.
    pub const fn name(self) -> &'static str {
        match self {
            CompletionStatus::Ack => "kCmplAck",
            CompletionStatus::TargetCompletionInError => "kCmplTargetNackCIE",
            CompletionStatus::TargetNonRecoverableError => "kCmplTargetNackNRE",
            CompletionStatus::TargetInvalidCid => "kCmplTargetNackCID",
            CompletionStatus::LocalTimeout => "kCmplLocalTO",
            CompletionStatus::OperationError => "kCmplOpErr",
            CompletionStatus::DeadConnection => "kCmplDeadConn",
            CompletionStatus::RemoteError => "kCmplRemoteErr",
            CompletionStatus::LocalXlr => "kCmplLocalXlr",
        }
    }

    /// Whether it completed successfully.
    pub const fn is_ok(self) -> bool {
        matches!(self, CompletionStatus::Ack)
    }
}

/// A transaction completed at the initiator (OCP Falcon 0.9 §8.4.3: push
/// completion, or Pull Data delivered to the ULP). In RSN order on ordered
/// connections.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completion {
    /// The connection.
    pub connection: ConnectionHandle,
    /// The transaction's RSN.
    pub rsn: Rsn,
    /// The ULP's tag from the submit.
    pub tag: u64,
    /// Push or pull.
    pub kind: TransactionKind,
    /// How it completed.
    pub status: CompletionStatus,
    /// The target ULP's NACK code (CIE, NRE, invalid CID), else 0.
    pub ulp_nack_code: u8,
    /// Pull: the Pull Data payload (a large one in its frame's buffer,
    /// see [`Payload`]). Push: empty. Read it in place and hand it back
    /// with `Engine::recycle`, or take it with [`Payload::into_vec`].
    pub data: Payload,
    /// The submitted payload, handed back for reuse (empty in the rare case
    /// a retransmission may still need it; the engine recycles it then).
    pub request: Vec<u8>,
}

/// A request delivered to the target ULP (OCP Falcon 0.9 §8.5.3: Push Data
/// or a Pull Request), in RSN order on ordered connections. The ULP answers
/// with `Engine::ulp_ack` / `Engine::ulp_nack`, and serves a pull with
/// `Engine::submit_pull_data`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The connection.
    pub connection: ConnectionHandle,
    /// The request's RSN (the key of the ULP's answer).
    pub rsn: Rsn,
    /// Push Data or Pull Request.
    pub kind: TransactionKind,
    /// Push: the payload length. Pull: bytes of Pull Data expected.
    pub request_length: u16,
    /// Push: the data. Pull: the ULP headers of the Pull Request. Read it
    /// in place (it dereferences to `[u8]`) and hand it back with
    /// `Engine::recycle`, or take it with [`Payload::into_vec`].
    pub payload: Payload,
    /// Delivered again after the ULP's RNR NACK (§8.5.3.4).
    pub redelivery: bool,
}

/// A peer protocol violation or a connection failure, with a stable code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectionFault {
    /// From the packet delivery sublayer (codes 1–3).
    Delivery(ConnectionError),
    /// A request whose RSN repeats one already received with another PSN.
    DuplicateRsn {
        /// The RSN.
        rsn: Rsn,
    },
    /// A request whose RSN is before the target's base or too far ahead of
    /// it (`max_rsn_span`).
    RsnOutOfRange {
        /// The RSN.
        rsn: Rsn,
        /// The target's base RSN.
        base: Rsn,
    },
}

impl ConnectionFault {
    /// A stable numeric code (delivery errors keep theirs).
    pub const fn code(&self) -> u8 {
        match self {
            ConnectionFault::Delivery(e) => e.code(),
            ConnectionFault::DuplicateRsn { .. } => 16,
            ConnectionFault::RsnOutOfRange { .. } => 17,
        }
    }

    /// The connection stopped: every outstanding transaction completes with
    /// kCmplDeadConn.
    pub const fn is_fatal(&self) -> bool {
        match self {
            ConnectionFault::Delivery(e) => e.is_fatal(),
            _ => false,
        }
    }
}

impl fmt::Display for ConnectionFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConnectionFault::Delivery(e) => fmt::Display::fmt(e, f),
            ConnectionFault::DuplicateRsn { rsn } => write!(f, "request {rsn} received twice"),
            ConnectionFault::RsnOutOfRange { rsn, base } => {
                write!(f, "request {rsn} outside the target window at {base}")
            }
        }
    }
}

/// What the engine tells the ULPs, from `Engine::poll_event`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UlpEvent {
    /// A transaction completed at the initiator.
    Completion(Completion),
    /// A connection error (fatal ones first complete every outstanding
    /// transaction with kCmplDeadConn).
    ConnectionError {
        /// The connection.
        connection: ConnectionHandle,
        /// What happened.
        fault: ConnectionFault,
    },
    /// A request for the target ULP.
    Request(Request),
    /// The connection's credits ran out: stop submitting until `Xon`
    /// (per-connection flow control, OCP Falcon 0.9 §8.2.3).
    Xoff {
        /// The connection.
        connection: ConnectionHandle,
    },
    /// Credits are back after an `Xoff`.
    Xon {
        /// The connection.
        connection: ConnectionHandle,
    },
}

/// Why a submit was refused. Nothing was consumed: no RSN, no credit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RejectReason {
    /// The connection failed or was closed.
    ConnectionNotAlive,
    /// Pull Data longer than the Pull Request asked for.
    LengthExceedsRequest {
        /// The request length.
        request_length: u16,
    },
    /// Out of credits (§8.2.3: "reject ULP transactions if it is out of
    /// resources"; the ULP also got an `Xoff`).
    NoResources(Shortage),
    /// The payload does not fit one packet.
    PayloadTooLong {
        /// The largest payload a packet carries.
        max: usize,
    },
    /// No such request awaiting Pull Data.
    UnknownRequest,
    /// No such connection.
    UnknownConnection,
}

/// A refused submit, with the payload handed back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejected {
    /// Why.
    pub reason: RejectReason,
    /// The ULP's payload, untouched.
    pub payload: Vec<u8>,
}

impl fmt::Display for RejectReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RejectReason::ConnectionNotAlive => f.write_str("connection not alive"),
            RejectReason::LengthExceedsRequest { request_length } => {
                write!(
                    f,
                    "Pull Data longer than the request length {request_length}"
                )
            }
            RejectReason::NoResources(s) => write!(f, "no resources: {s}"),
            RejectReason::PayloadTooLong { max } => {
                write!(f, "payload longer than {max} bytes (one packet)")
            }
            RejectReason::UnknownRequest => f.write_str("no such request awaiting Pull Data"),
            RejectReason::UnknownConnection => f.write_str("no such connection"),
        }
    }
}

impl fmt::Display for Rejected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.reason, f)
    }
}

impl std::error::Error for Rejected {}

/// Why a ULP ACK or NACK was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UlpCommandError {
    /// The connection failed or was closed.
    ConnectionNotAlive,
    /// The zero-length Pull Data that answers a pull's CIE/NRE found no
    /// ULP-data credit: retry after the Xon.
    NoCredits,
    /// No request with that RSN is waiting for the ULP's answer.
    NotAwaiting,
    /// No such connection.
    UnknownConnection,
}

impl fmt::Display for UlpCommandError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            UlpCommandError::ConnectionNotAlive => "connection not alive",
            UlpCommandError::NoCredits => "no Pull Data credits; retry after Xon",
            UlpCommandError::NotAwaiting => "no request with that RSN awaits the ULP",
            UlpCommandError::UnknownConnection => "no such connection",
        })
    }
}

impl std::error::Error for UlpCommandError {}
