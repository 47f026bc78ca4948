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
//! A transaction is handed over by value: a small inline [`UlpHeader`] and,
//! for a push, a [`DataSource`] the engine reads when it builds the packet
//! and again on each retransmission, so data goes from the ULP's memory
//! into the frame once. The source comes back in [`Completion::source`]
//! (or with the whole transaction in [`Rejected::returned`] if refused).
//! A received Push Data or Pull Data payload reaches the ULP as a
//! [`Payload`]: a view into the received frame's own buffer, held until
//! the ULP gives it back with `Engine::release` (see `transaction::payload`).
//! One transaction is one packet (OCP Falcon 0.9 §8.1: a transaction "may
//! result in one or more packets" — in rev 0.9 every packet type carries
//! one transaction's data, so a ULP segments messages larger than a packet
//! into several transactions, as RDMA over Falcon does per MTU).

use core::fmt;

use crate::delivery::ConnectionError;
use crate::port::{FrameBuf, PacketBuf};
use crate::resources::{CreditClass, Shortage};
use crate::seq::Rsn;
use crate::transaction::payload::Payload;
use crate::transaction::{DataSource, UlpHeader};

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

/// A transaction the initiator ULP submits: a push of a header and a data
/// source, or a pull of a header and a length.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transaction<S = Vec<u8>> {
    /// The ULP's own identifier, returned in the completion.
    pub tag: u64,
    /// The ULP headers: the first bytes of the Push Data payload, or the
    /// whole Pull Request payload.
    pub header: UlpHeader,
    /// Push data or pull length.
    pub op: Op<S>,
    /// Sets the AR bit on the packet, every transmission of it (OCP Falcon
    /// 0.9 §7.2: the target acknowledges it at once rather than
    /// coalescing), whatever the AR policy decides (§9.1.6). For a ULP
    /// that must know soon, e.g. RDMA's last packet of a message.
    pub ack_request: bool,
}

/// What a [`Transaction`] moves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op<S> {
    /// Push: `header` then the source's bytes go out as Push Data; its ACK
    /// (after the target ULP's) completes it.
    Push(S),
    /// Pull: `header` goes out as a Pull Request asking for
    /// `request_length` bytes of Pull Data (the Request Length field,
    /// the target's ULP headers and data included).
    Pull {
        /// Bytes of Pull Data expected.
        request_length: u16,
    },
}

impl<S: DataSource> Transaction<S> {
    /// A push of `data`, with no ULP header.
    pub fn push(tag: u64, data: S) -> Self {
        Transaction {
            tag,
            header: UlpHeader::EMPTY,
            op: Op::Push(data),
            ack_request: false,
        }
    }

    /// A pull of `request_length` bytes, with no ULP header.
    pub fn pull(tag: u64, request_length: u16) -> Self {
        Transaction {
            tag,
            header: UlpHeader::EMPTY,
            op: Op::Pull { request_length },
            ack_request: false,
        }
    }

    /// The same transaction with `header` as its ULP header.
    pub fn with_header(mut self, header: UlpHeader) -> Self {
        self.header = header;
        self
    }

    /// The same transaction with the AR bit set on its packet.
    pub fn with_ack_request(mut self) -> Self {
        self.ack_request = true;
        self
    }

    /// Push or pull.
    pub fn kind(&self) -> TransactionKind {
        match self.op {
            Op::Push(_) => TransactionKind::Push,
            Op::Pull { .. } => TransactionKind::Pull,
        }
    }

    /// Bytes the packet carries: header and data of a push, the header of
    /// a pull.
    pub fn payload_len(&self) -> usize {
        match &self.op {
            Op::Push(data) => self.header.len() + data.len(),
            Op::Pull { .. } => self.header.len(),
        }
    }
}

/// Completion codes to the initiator ULP (OCP Falcon 0.9 §11, table p.96).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
///
/// Each discriminant is the variant's code, so [`code`](Self::code) is a cast,
/// not a jump table on every completion.
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
#[derive(Debug, PartialEq, Eq)]
pub struct Completion<B: PacketBuf = FrameBuf, S = Vec<u8>> {
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
    /// Pull: the Pull Data payload, in its frame (see [`Payload`]). Push:
    /// empty. Read it in place and give it back with `Engine::release`.
    pub data: Payload<B>,
    /// A push's data source, handed back (`None` for a pull, or in the rare
    /// case a retransmission may still need it: the engine drops it when
    /// the packet leaves the retransmit buffer).
    pub source: Option<S>,
}

/// A request delivered to the target ULP (OCP Falcon 0.9 §8.5.3: Push Data
/// or a Pull Request), in RSN order on ordered connections. The ULP answers
/// with `Engine::ulp_ack` / `Engine::ulp_nack`, and serves a pull with
/// `Engine::submit_pull_data`.
#[derive(Debug, PartialEq, Eq)]
pub struct Request<B: PacketBuf = FrameBuf> {
    /// The connection.
    pub connection: ConnectionHandle,
    /// The request's RSN (the key of the ULP's answer).
    pub rsn: Rsn,
    /// Push Data or Pull Request.
    pub kind: TransactionKind,
    /// Push: the payload length. Pull: bytes of Pull Data expected.
    pub request_length: u16,
    /// Pull: the ULP headers of the Pull Request (copied, see
    /// `transaction::payload`). Push: empty.
    pub header: UlpHeader,
    /// Push: the Push Data payload (ULP headers and data), in its frame.
    /// Read it in place (it dereferences to `[u8]`) and give it back with
    /// `Engine::release`. Pull: empty.
    pub payload: Payload<B>,
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
#[derive(Debug, PartialEq, Eq)]
pub enum UlpEvent<B: PacketBuf = FrameBuf, S = Vec<u8>> {
    /// A transaction completed at the initiator.
    Completion(Completion<B, S>),
    /// A connection error (fatal ones first complete every outstanding
    /// transaction with kCmplDeadConn).
    ConnectionError {
        /// The connection.
        connection: ConnectionHandle,
        /// What happened.
        fault: ConnectionFault,
    },
    /// A request for the target ULP.
    Request(Request<B>),
    /// The connection's credits of `class` ran out: stop submitting what
    /// takes them (pushes and pulls for [`CreditClass::Request`], Pull
    /// Data for [`CreditClass::Data`]) until the `Xon` of that class
    /// (per-connection flow control, OCP Falcon 0.9 §8.2.3).
    Xoff {
        /// The connection.
        connection: ConnectionHandle,
        /// The credits that ran out.
        class: CreditClass,
    },
    /// Credits of `class` are back after its `Xoff`.
    Xon {
        /// The connection.
        connection: ConnectionHandle,
        /// The credits that are back.
        class: CreditClass,
    },
}

/// The target ULP refused one of our pushes with RNR (OCP Falcon 0.9
/// §8.5.3.4). Falcon retransmits it after `timeout` by itself, as often as
/// the target refuses; this report is for a ULP that limits how often it
/// lets that happen (RDMA's `rnr_retry`), and comes only when it asked
/// (`Engine::report_receiver_not_ready`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RnrNack {
    /// The connection.
    pub connection: ConnectionHandle,
    /// The push's RSN.
    pub rsn: Rsn,
    /// The ULP's tag from the submit.
    pub tag: u64,
    /// The RNR timeout the target asked for.
    pub timeout: crate::wire::RnrTimeout,
    /// The target ULP's code.
    pub ulp_nack_code: u8,
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

/// A refused command, with what the ULP handed over handed back: the
/// [`Transaction`] of a submit, the data source of a Pull Data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejected<T> {
    /// Why.
    pub reason: RejectReason,
    /// The ULP's transaction or source, untouched.
    pub returned: T,
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

impl<T> fmt::Display for Rejected<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.reason, f)
    }
}

impl<T: fmt::Debug> std::error::Error for Rejected<T> {}

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
