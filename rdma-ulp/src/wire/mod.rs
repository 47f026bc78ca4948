//! RDMA-over-Falcon packets: the RBTH, the extended transport headers
//! (ETHs) that follow it, and the one parse that dispatches on the opcode.
//!
//! Layer: wire, the payload of a Falcon Push Data, Pull Request or Pull
//! Data. Owns one zero-copy view and one `Repr` value per header (a module
//! each), [`Opcode`] with the table of RDMA-0.9 §8.1.3 ([`opcode`]),
//! [`ParseError`], and [`RdmaHeader`] / [`RdmaPacket`] ([`packet`]): the
//! parse of a whole packet and the emit of its headers into a Falcon
//! [`UlpHeader`](falcon_core::api::UlpHeader). Never panics on input: every
//! view checks its length once (`check_len`) and every accessor stays in
//! bounds after that. Knows nothing of queue pairs, memory regions,
//! connections or Falcon sequence numbers: a payload is a borrowed slice on
//! receive, and on transmit the caller's data source follows the header.
//!
//! RDMA-0.9 §8.1 and §8.1.3, the packet and its types:
//!
//! ```text
//!  Falcon header | RBTH (12) | ETHs per opcode | payload | pad (0–3) |
//!
//!  opcode  packet                  sent by    Falcon        after the RBTH     bytes
//!  0x00–02 SEND First/Middle/Last  initiator  Push Data     SETH OETH          20
//!  0x03    SEND Last w/ Immediate  initiator  Push Data     SETH OETH ImmDt    24
//!  0x04    SEND Only               initiator  Push Data     SETH OETH          20
//!  0x05    SEND Only w/ Immediate  initiator  Push Data     SETH OETH ImmDt    24
//!  0x06–08 WRITE First/Middle/Last initiator  Push Data     RETH               28
//!  0x09    WRITE Last w/ Immediate initiator  Push Data     RETH SETH ImmDt    36
//!  0x0A    WRITE Only              initiator  Push Data     RETH               28
//!  0x0B    WRITE Only w/ Immediate initiator  Push Data     RETH SETH ImmDt    36
//!  0x0C    READ Request            initiator  Pull Request  RETH SETH STETH    44
//!  0x0D–10 READ Response F/M/L/O   target     Pull Data     STETH              24
//!  0x12    ATOMIC Response         target     Pull Data     AtomicAckETH STETH 32
//!  0x13    ATOMIC CmpSwap          initiator  Pull Request  AtomicETH SETH STETH 56
//!  0x14    ATOMIC FetchAdd         initiator  Pull Request  AtomicETH SETH STETH 56
//!  0x16    SEND Last w/ Invalidate initiator  Push Data     SETH OETH IETH     24
//!  0x17    SEND Only w/ Invalidate initiator  Push Data     SETH OETH IETH     24
//!  0x64    UD SEND Only            initiator  Push Data     DETH               20
//!  0x65    UD SEND Only w/ Imm.    initiator  Push Data     DETH ImmDt         24
//!  others  reserved
//! ```
//!
//! The table's "Push Request" is the request of a Falcon push transaction,
//! the Push Data packet (Falcon-0.9 §7.5). Bytes are RBTH and ETHs: every
//! header fits the 63 bytes of a Falcon `UlpHeader` (the longest is 56,
//! checked at compile time and by `every_header_fits_a_ulp_header`).
//!
//! Byte and bit order: the figures (pp.20–28) number the bits of each
//! 32-bit word 0–31 left to right under the byte labels 0–3, so bits 0–7
//! are the word's first byte on the wire. We read bit 0 as the most
//! significant bit of that byte, as InfiniBand does (the RBTH Version is the
//! high nibble of byte 0), and every multi-byte field as big-endian, a
//! 64-bit field's word "63:32" first. The IB-derived headers (RETH, ImmDt,
//! AtomicETH, AtomicAckETH, IETH, DETH) are InfiniBand's, which the text
//! makes authoritative for them.
//!
//! Where the OCP text disagrees with itself, or with ulp.md:
//!
//! * RBTH AckReq: in the field table, not in the figure. At bit 18, see
//!   [`rbth`] (ulp.md D1).
//! * Atomics: the §8.1.3 table lists AtomicAckETH in CmpSwap and FetchAdd
//!   and AtomicETH in the ATOMIC Response; §8.3.6 and §8.3.7 of the same
//!   text put AtomicETH in the requests and AtomicAckETH in the response.
//!   We follow §8.3.6–7 (ulp.md D2 agrees): the requests need the address
//!   and operands only the AtomicETH holds.
//! * DETH: the text says InfiniBand's format, the figure draws the Source
//!   QP in the high 24 bits. We follow the text (ulp.md D3), behind one
//!   constant: see [`deth`].
//! * Pad: the RBTH's 2-bit count of bytes after the payload. The parse
//!   drops them from the payload and rejects a count larger than what
//!   follows the headers; their contents are ignored, as in InfiniBand.
//! * §6.7 says SETH and OETH place READ responses; the table gives a READ
//!   Request SETH and STETH and its responses STETH. We follow the table.
//!
//! Revisions: our Chinese copy is a translation of v1.0 (4 April 2024); it
//! has none of the figures, none of the field tables and no §8.1.3 table,
//! so the wire format cannot be compared. Its prose of §8.2–§8.3.10 says
//! what 0.9's says (AtomicETH in requests, AtomicAckETH in responses, the
//! IB-derived headers in InfiniBand's format). Where it differs it is
//! outside the wire format: its §6.2 gives unordered mode in-order
//! completions where 0.9's §6.2 and §6.4 table give out-of-order ones (a
//! slip of the translation, most likely), and its §6.6.2 lacks 0.9's first
//! sentence. Everything here follows 0.9.
//!
//! Not built: XRCETH (RDMA-0.9 §8.3.9). No opcode of the table carries it
//! (ulp.md D5: RC and UD first).

use core::fmt;

use falcon_core::api::TransactionKind;

/// Declares a header module's view `Packet<T>` over a buffer that starts
/// with the header: construction, the length check every accessor relies
/// on, and the bytes after the header.
macro_rules! header_view {
    ($what:literal, $len:expr) => {
        #[doc = concat!("A read/write view of a ", $what, ", or of bytes that start with one.")]
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub struct Packet<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> Packet<T> {
            /// Wraps a buffer without checking it. Use for emitting.
            pub const fn new_unchecked(buffer: T) -> Packet<T> {
                Packet { buffer }
            }

            /// Wraps a buffer and checks its length. Use on received bytes.
            ///
            /// # Errors
            ///
            /// See [`check_len`](Self::check_len).
            pub fn new_checked(buffer: T) -> Result<Packet<T>, $crate::wire::ParseError> {
                let packet = Self::new_unchecked(buffer);
                packet.check_len()?;
                Ok(packet)
            }

            #[doc = concat!("Ensures every accessor stays in bounds: the ", $what, " is [`HEADER_LEN`] bytes.")]
            ///
            /// # Errors
            ///
            #[doc = concat!("[`ParseError::Truncated`](crate::wire::ParseError::Truncated) naming the ", $what, ".")]
            pub fn check_len(&self) -> Result<(), $crate::wire::ParseError> {
                let have = self.buffer.as_ref().len();
                if have < $len {
                    return Err($crate::wire::ParseError::Truncated {
                        what: $what,
                        need: $len,
                        have,
                    });
                }
                Ok(())
            }

            /// Returns the underlying buffer.
            pub fn into_inner(self) -> T {
                self.buffer
            }
        }

        impl<'a, T: AsRef<[u8]> + ?Sized> Packet<&'a T> {
            #[doc = concat!("The bytes after the ", $what, " (empty if the buffer is short).")]
            pub fn rest(&self) -> &'a [u8] {
                self.buffer.as_ref().get($len..).unwrap_or_default()
            }
        }
    };
}

/// Implements [`ExtendedRepr`] for a header module's `Repr` through its
/// view.
macro_rules! extended_repr {
    ($repr:ident, $kind:ident) => {
        impl $crate::wire::ExtendedRepr for $repr {
            const KIND: $crate::wire::ExtendedHeader = $crate::wire::ExtendedHeader::$kind;

            fn read(bytes: &[u8]) -> Result<Self, $crate::wire::ParseError> {
                Self::parse(&Packet::new_checked(bytes)?)
            }

            fn write(&self, bytes: &mut [u8]) {
                self.emit(&mut Packet::new_unchecked(bytes));
            }
        }
    };
}

mod bytes;
pub mod opcode;
pub mod packet;

pub mod atomic_ack_eth;
pub mod atomic_eth;
pub mod deth;
pub mod ieth;
pub mod immdt;
pub mod oeth;
pub mod rbth;
pub mod reth;
pub mod seth;
pub mod steth;

pub use atomic_ack_eth::AtomicAckEth;
pub use atomic_eth::AtomicEth;
pub use deth::Deth;
pub use ieth::Ieth;
pub use immdt::ImmDt;
pub use oeth::Oeth;
pub use opcode::{
    ExtendedHeader, Extra, HeaderLayout, Opcode, Operation, Position, Service, MAX_HEADER_LEN,
};
pub use packet::{Extensions, HeaderMismatch, RdmaHeader, RdmaPacket};
pub use rbth::Rbth;
pub use reth::Reth;
pub use seth::Seth;
pub use steth::Steth;

pub use crate::seq::{Rmsn, Sn};

/// The RBTH Version every packet carries (RDMA-0.9 §8.2: "must be set to
/// 1").
pub const VERSION: u8 = 1;

falcon_core::bounded_uint! {
    /// A 24-bit queue pair number: the RBTH Destination QP, the DETH
    /// Source QP.
    #[derive(PartialOrd, Ord)]
    pub struct Qpn(u32, bits = 24, what = "QP number");
}

falcon_core::bounded_uint! {
    /// The RBTH Pad count (2 bits): bytes after the payload that align it
    /// to 4 bytes.
    #[derive(PartialOrd, Ord)]
    pub struct PadCount(u8, bits = 2, what = "pad count");
}

impl PadCount {
    /// The pad that aligns a payload of `len` bytes to 4.
    pub const fn for_payload(len: usize) -> PadCount {
        // In range: 0..=3.
        PadCount(((4 - len % 4) % 4) as u8)
    }
}

macro_rules! key {
    ($(#[$attr:meta])* $name:ident) => {
        $(#[$attr])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
        pub struct $name(pub u32);

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{:#010x}", self.0)
            }
        }
    };
}

key! {
    /// A remote key: the target's key for a memory region (RETH,
    /// AtomicETH) or the key to invalidate (IETH).
    RKey
}

key! {
    /// A local key: the initiator's key for a sink buffer (STETH).
    LKey
}

key! {
    /// A queue key: what a UD QP accepts datagrams with (DETH).
    QKey
}

/// The Falcon packet an RDMA packet rides in: what decides which opcodes
/// are valid in a received payload (RDMA-0.9 §8.1.3, column "Falcon Packet
/// Type").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FalconPacket {
    /// A push transaction's request (the table's "Push Request"): SEND and
    /// WRITE. Its payload is headers and data.
    PushData,
    /// A pull transaction's request: READ and ATOMIC requests. Its payload
    /// is the headers alone.
    PullRequest,
    /// A pull transaction's response: READ and ATOMIC responses.
    PullData,
}

impl FalconPacket {
    /// All three.
    pub const ALL: [FalconPacket; 3] = [
        FalconPacket::PushData,
        FalconPacket::PullRequest,
        FalconPacket::PullData,
    ];

    /// The packet a target receives for a request of `kind`.
    pub const fn request(kind: TransactionKind) -> FalconPacket {
        match kind {
            TransactionKind::Push => FalconPacket::PushData,
            TransactionKind::Pull => FalconPacket::PullRequest,
        }
    }

    /// The Falcon transaction it belongs to.
    pub const fn transaction_kind(self) -> TransactionKind {
        match self {
            FalconPacket::PushData => TransactionKind::Push,
            FalconPacket::PullRequest | FalconPacket::PullData => TransactionKind::Pull,
        }
    }

    /// The spec's name.
    pub const fn name(self) -> &'static str {
        match self {
            FalconPacket::PushData => "Push Data",
            FalconPacket::PullRequest => "Pull Request",
            FalconPacket::PullData => "Pull Data",
        }
    }
}

impl fmt::Display for FalconPacket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What is wrong with the bytes a parser was given. A small `Copy` value
/// that names the fault, so that the receive path counts a precise drop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParseError {
    /// The buffer ends before the header.
    Truncated {
        /// The header, or the opcode whose headers do not fit.
        what: &'static str,
        /// Bytes needed.
        need: usize,
        /// Bytes present.
        have: usize,
    },
    /// The RBTH Version is not 1.
    BadVersion(u8),
    /// An opcode RDMA-0.9 does not assign.
    ReservedOpcode(u8),
    /// The opcode does not ride in this Falcon packet (a READ Request in a
    /// Push Data, a SEND in a Pull Data...).
    OpcodeNotAllowed {
        opcode: Opcode,
        /// The packet it arrived in.
        found: FalconPacket,
    },
    /// Bytes follow the headers of an opcode that carries no payload.
    TrailingBytes {
        opcode: Opcode,
        /// How many bytes follow the headers.
        extra: usize,
    },
    /// The RBTH's pad count exceeds the bytes after the headers.
    PadBeyondPayload {
        /// The pad count.
        pad: u8,
        /// Bytes after the headers.
        available: usize,
    },
}

impl ParseError {
    /// A stable snake_case name, for drop counters.
    pub const fn name(&self) -> &'static str {
        match self {
            ParseError::Truncated { .. } => "rdma_truncated",
            ParseError::BadVersion(_) => "rdma_bad_version",
            ParseError::ReservedOpcode(_) => "rdma_reserved_opcode",
            ParseError::OpcodeNotAllowed { .. } => "rdma_opcode_not_allowed",
            ParseError::TrailingBytes { .. } => "rdma_trailing_bytes",
            ParseError::PadBeyondPayload { .. } => "rdma_pad_beyond_payload",
        }
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ParseError::Truncated { what, need, have } => {
                write!(f, "truncated {what}: need {need} bytes, have {have}")
            }
            ParseError::BadVersion(version) => {
                write!(f, "unsupported RBTH version {version} (must be 1)")
            }
            ParseError::ReservedOpcode(code) => write!(f, "reserved RDMA opcode {code:#04x}"),
            ParseError::OpcodeNotAllowed { opcode, found } => write!(
                f,
                "{opcode} in a Falcon {found} (it rides in a {})",
                opcode.falcon_packet()
            ),
            ParseError::TrailingBytes { opcode, extra } => {
                write!(f, "{extra} bytes after the headers of a {opcode}")
            }
            ParseError::PadBeyondPayload { pad, available } => write!(
                f,
                "pad of {pad} bytes but {available} bytes after the headers"
            ),
        }
    }
}

impl std::error::Error for ParseError {}

/// An extended header's `Repr` as the dispatching parse and emit use it:
/// read from, and write to, bytes that start with the header.
pub(crate) trait ExtendedRepr: Sized {
    const KIND: ExtendedHeader;

    /// # Errors
    ///
    /// [`ParseError::Truncated`] if `bytes` is shorter than the header.
    fn read(bytes: &[u8]) -> Result<Self, ParseError>;

    /// Writes the header into `bytes[..KIND.header_len()]`.
    fn write(&self, bytes: &mut [u8]);
}

#[cfg(test)]
mod tests;
