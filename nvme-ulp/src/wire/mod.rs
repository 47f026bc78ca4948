//! NVMe-over-Falcon packets: the NBTH, the six packet types and our two
//! vendor command packets.
//!
//! Layer: wire, the payload of a Falcon Push Data, Pull Request or Pull Data.
//! Owns the zero-copy views, the `Repr` value types, [`PacketType`],
//! [`ParseError`] and [`NvmePacket`], the one parse that dispatches on the
//! packet type. Never panics on input: every view checks its length once
//! (`check_len`) and every accessor stays in bounds after that. Knows
//! nothing of Falcon sequence numbers, connections or data sources: a data
//! part is a borrowed slice on receive, and on transmit the caller writes
//! it after the header that `emit` wrote.
//!
//! NVMe-0.9 §8.1.3 (p.26), the packet types and their Falcon transactions:
//!
//! ```text
//!  type  sent by    Falcon          packet               after the 32-byte NBTH
//!  0     initiator  Push Request    Write Request        32-byte command block
//!  1     target     Pull Request    Write Data Request   nothing
//!  2     initiator  Pull Response   Write Data Response  4 reserved, data (DIX)
//!  3     target     Push Request    Write Completion     2 reserved, status
//!  4     initiator  Push Request    Read Request         32-byte command block
//!  5     target     Push Request    Read Response        2 reserved, status, data (DIF)
//!  6     initiator  Push Request    Command Request      vendor extension ([`command`])
//!  7     target     Push Request    Command Response     vendor extension ([`command`])
//!  8–15  reserved
//! ```
//!
//! Types 6 and 7 are reserved in rev 0.9; we use them for the commands it
//! does not map (ulp.md §3.9), only between ends that both enable them.
//!
//! Byte and bit order (decision D6, ulp.md §3.4): the figures (pp.26–35)
//! number the bits of each 32-bit word 0–31 left to right under the byte
//! labels 0–3, so bits 0–7 are the word's first byte on the wire. We read
//! bit 0 as the most significant bit of that byte, as in the Falcon base
//! header figures of the same family (the version is the high nibble of
//! byte 0), and every multi-byte field as big-endian. The spec never states
//! the byte order.
//!
//! The buffer a parser is given must end where the NVMe packet ends (the
//! Falcon Request Length): the fixed-size packets reject trailing bytes
//! ([`ParseError::TrailingBytes`]) and the data of a Read Response or Write
//! Data Response is everything after its header.

use core::fmt;

mod bytes;
pub mod command;
pub mod nbth;
pub mod request;
pub mod response;
pub mod write_data;

pub use command::{CommandRequest, CommandResponse, Cqe, NvmOpcode, Sqe};
pub use nbth::{IcmdId, InitiatorFunction, InitiatorTag, Nbth, NcmdGroup, TargetTag};
pub use request::{Command, DirectiveType, Prinfo, ReadRequest, WriteRequest};
pub use response::{ReadResponse, WriteCompletion};
pub use write_data::{WriteDataRequest, WriteDataResponse};

/// The NBTH Version every packet carries (NVMe-0.9 §8.2: "must be set to 1").
pub const VERSION: u8 = 1;

/// The ULP code of the Falcon NACK (complete-in-error) that answers a
/// request whose NVMe packet does not parse or is of a type its receiver
/// never gets. NVMe-0.9 defines no NACK codes; the value is opaque to
/// Falcon and reaches the peer's completion as its `ulp_nack_code`.
pub const MALFORMED_NACK_CODE: u8 = 0x01;

/// Most data a Read Response or Write Data Response carries: 4096 bytes of
/// data and 128 bytes of metadata (NVMe-0.9 §8.4 p.31, §8.7 p.34).
pub const MAX_DATA_LEN: usize = 4224;

/// NVMe-over-Falcon packet type (NBTH word 0 bits 4–7, NVMe-0.9 §8.1.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PacketType {
    WriteRequest = 0,
    WriteDataRequest = 1,
    WriteDataResponse = 2,
    WriteCompletion = 3,
    ReadRequest = 4,
    ReadResponse = 5,
    /// Vendor extension (ulp.md §3.9), reserved in rev 0.9.
    CommandRequest = 6,
    /// Vendor extension (ulp.md §3.9), reserved in rev 0.9.
    CommandResponse = 7,
}

impl PacketType {
    /// Every packet type, in code order.
    pub const ALL: [PacketType; 8] = [
        PacketType::WriteRequest,
        PacketType::WriteDataRequest,
        PacketType::WriteDataResponse,
        PacketType::WriteCompletion,
        PacketType::ReadRequest,
        PacketType::ReadResponse,
        PacketType::CommandRequest,
        PacketType::CommandResponse,
    ];

    /// The type for a 4-bit code.
    ///
    /// # Errors
    ///
    /// [`ParseError::ReservedPacketType`] for 8–15 (and for anything wider,
    /// which a 4-bit field never holds).
    pub const fn from_code(code: u8) -> Result<PacketType, ParseError> {
        match code {
            0 => Ok(PacketType::WriteRequest),
            1 => Ok(PacketType::WriteDataRequest),
            2 => Ok(PacketType::WriteDataResponse),
            3 => Ok(PacketType::WriteCompletion),
            4 => Ok(PacketType::ReadRequest),
            5 => Ok(PacketType::ReadResponse),
            6 => Ok(PacketType::CommandRequest),
            7 => Ok(PacketType::CommandResponse),
            other => Err(ParseError::ReservedPacketType(other)),
        }
    }

    /// The 4-bit code.
    pub const fn code(self) -> u8 {
        self as u8
    }

    /// Bytes before the data part: the whole packet for the four types
    /// without data.
    pub const fn header_len(self) -> usize {
        match self {
            PacketType::WriteRequest | PacketType::ReadRequest => request::HEADER_LEN,
            PacketType::WriteDataRequest => nbth::HEADER_LEN,
            PacketType::WriteDataResponse => write_data::RESPONSE_HEADER_LEN,
            PacketType::WriteCompletion | PacketType::ReadResponse => response::HEADER_LEN,
            PacketType::CommandRequest => command::REQUEST_HEADER_LEN,
            PacketType::CommandResponse => command::RESPONSE_HEADER_LEN,
        }
    }

    /// Most bytes of data after the header.
    pub const fn max_data_len(self) -> usize {
        match self {
            PacketType::CommandRequest | PacketType::CommandResponse => command::MAX_CAPSULE_LEN,
            PacketType::WriteDataResponse | PacketType::ReadResponse => MAX_DATA_LEN,
            _ => 0,
        }
    }

    /// Whether a data part follows the header.
    pub const fn carries_data(self) -> bool {
        matches!(
            self,
            PacketType::WriteDataResponse
                | PacketType::ReadResponse
                | PacketType::CommandRequest
                | PacketType::CommandResponse
        )
    }
}

impl fmt::Display for PacketType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PacketType::WriteRequest => "Write Request",
            PacketType::WriteDataRequest => "Write Data Request",
            PacketType::WriteDataResponse => "Write Data Response",
            PacketType::WriteCompletion => "Write Completion",
            PacketType::ReadRequest => "Read Request",
            PacketType::ReadResponse => "Read Response",
            PacketType::CommandRequest => "Command Request",
            PacketType::CommandResponse => "Command Response",
        })
    }
}

/// What is wrong with the bytes a parser was given. A small `Copy` value
/// that names the fault, so that the receive path counts a precise drop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParseError {
    /// The buffer ends before the header.
    Truncated {
        /// The header that does not fit.
        what: &'static str,
        /// Bytes needed.
        need: usize,
        /// Bytes present.
        have: usize,
    },
    /// The NBTH Version is not 1.
    BadVersion(u8),
    /// The NBTH Packet Type is 8–15, reserved in rev 0.9 and unused by
    /// our extension.
    ReservedPacketType(u8),
    /// A typed parser was given another packet type.
    UnexpectedPacketType {
        /// The type the parser handles.
        expected: PacketType,
        /// The type in the NBTH.
        found: PacketType,
    },
    /// Bytes follow a packet that has no data part.
    TrailingBytes {
        /// The packet.
        what: &'static str,
        /// How many bytes follow it.
        extra: usize,
    },
    /// A data part longer than [`MAX_DATA_LEN`].
    DataTooLong {
        /// Its length, in bytes.
        len: usize,
    },
}

impl ParseError {
    /// A stable snake_case name, for drop counters.
    pub const fn name(&self) -> &'static str {
        match self {
            ParseError::Truncated { .. } => "nvme_truncated",
            ParseError::BadVersion(_) => "nvme_bad_version",
            ParseError::ReservedPacketType(_) => "nvme_reserved_packet_type",
            ParseError::UnexpectedPacketType { .. } => "nvme_unexpected_packet_type",
            ParseError::TrailingBytes { .. } => "nvme_trailing_bytes",
            ParseError::DataTooLong { .. } => "nvme_data_too_long",
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
                write!(f, "unsupported NBTH version {version} (must be 1)")
            }
            ParseError::ReservedPacketType(code) => {
                write!(f, "reserved NVMe packet type {code}")
            }
            ParseError::UnexpectedPacketType { expected, found } => {
                write!(f, "expected a {expected}, found a {found}")
            }
            ParseError::TrailingBytes { what, extra } => {
                write!(f, "{extra} bytes after a {what}")
            }
            ParseError::DataTooLong { len } => {
                write!(f, "data part of {len} bytes exceeds {MAX_DATA_LEN}")
            }
        }
    }
}

impl std::error::Error for ParseError {}

/// A received NVMe-over-Falcon packet, any type. The data parts borrow the
/// received buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NvmePacket<'a> {
    WriteRequest(WriteRequest),
    WriteDataRequest(WriteDataRequest),
    WriteDataResponse {
        repr: WriteDataResponse,
        data: &'a [u8],
    },
    WriteCompletion(WriteCompletion),
    ReadRequest(ReadRequest),
    ReadResponse {
        repr: ReadResponse,
        data: &'a [u8],
    },
    CommandRequest {
        repr: CommandRequest,
        data: &'a [u8],
    },
    CommandResponse {
        repr: CommandResponse,
        data: &'a [u8],
    },
}

impl<'a> NvmePacket<'a> {
    /// Parses a whole NVMe packet (the Falcon payload): the NBTH's version
    /// and type first, then the packet its type names.
    ///
    /// # Errors
    ///
    /// [`ParseError::Truncated`], [`ParseError::BadVersion`],
    /// [`ParseError::ReservedPacketType`], [`ParseError::TrailingBytes`] or
    /// [`ParseError::DataTooLong`].
    pub fn parse(bytes: &'a [u8]) -> Result<NvmePacket<'a>, ParseError> {
        let packet_type = nbth::Packet::new_checked(bytes)?.checked_type()?;
        Ok(match packet_type {
            PacketType::WriteRequest => NvmePacket::WriteRequest(WriteRequest::parse(
                &request::Packet::new_checked(bytes)?,
            )?),
            PacketType::ReadRequest => {
                NvmePacket::ReadRequest(ReadRequest::parse(&request::Packet::new_checked(bytes)?)?)
            }
            PacketType::WriteDataRequest => NvmePacket::WriteDataRequest(WriteDataRequest::parse(
                &nbth::Packet::new_checked(bytes)?,
            )?),
            PacketType::WriteDataResponse => {
                let packet = write_data::Packet::new_checked(bytes)?;
                NvmePacket::WriteDataResponse {
                    repr: WriteDataResponse::parse(&packet)?,
                    data: packet.data(),
                }
            }
            PacketType::WriteCompletion => NvmePacket::WriteCompletion(WriteCompletion::parse(
                &response::Packet::new_checked(bytes)?,
            )?),
            PacketType::ReadResponse => {
                let packet = response::Packet::new_checked(bytes)?;
                NvmePacket::ReadResponse {
                    repr: ReadResponse::parse(&packet)?,
                    data: packet.data(),
                }
            }
            PacketType::CommandRequest => {
                let packet = command::RequestPacket::new_checked(bytes)?;
                NvmePacket::CommandRequest {
                    repr: CommandRequest::parse(&packet)?,
                    data: packet.data(),
                }
            }
            PacketType::CommandResponse => {
                let packet = command::ResponsePacket::new_checked(bytes)?;
                NvmePacket::CommandResponse {
                    repr: CommandResponse::parse(&packet)?,
                    data: packet.data(),
                }
            }
        })
    }

    pub const fn packet_type(&self) -> PacketType {
        match self {
            NvmePacket::WriteRequest(_) => PacketType::WriteRequest,
            NvmePacket::WriteDataRequest(_) => PacketType::WriteDataRequest,
            NvmePacket::WriteDataResponse { .. } => PacketType::WriteDataResponse,
            NvmePacket::WriteCompletion(_) => PacketType::WriteCompletion,
            NvmePacket::ReadRequest(_) => PacketType::ReadRequest,
            NvmePacket::ReadResponse { .. } => PacketType::ReadResponse,
            NvmePacket::CommandRequest { .. } => PacketType::CommandRequest,
            NvmePacket::CommandResponse { .. } => PacketType::CommandResponse,
        }
    }

    /// The NBTH fields.
    pub const fn nbth(&self) -> &Nbth {
        match self {
            NvmePacket::WriteRequest(repr) => &repr.nbth,
            NvmePacket::WriteDataRequest(repr) => &repr.nbth,
            NvmePacket::WriteDataResponse { repr, .. } => &repr.nbth,
            NvmePacket::WriteCompletion(repr) => &repr.nbth,
            NvmePacket::ReadRequest(repr) => &repr.nbth,
            NvmePacket::ReadResponse { repr, .. } => &repr.nbth,
            NvmePacket::CommandRequest { repr, .. } => &repr.nbth,
            NvmePacket::CommandResponse { repr, .. } => &repr.nbth,
        }
    }

    /// The data part (empty for the types without one).
    pub const fn data(&self) -> &'a [u8] {
        match self {
            NvmePacket::WriteDataResponse { data, .. }
            | NvmePacket::ReadResponse { data, .. }
            | NvmePacket::CommandRequest { data, .. }
            | NvmePacket::CommandResponse { data, .. } => data,
            _ => &[],
        }
    }

    /// Bytes [`emit_header`](Self::emit_header) writes.
    pub const fn header_len(&self) -> usize {
        self.packet_type().header_len()
    }

    /// Header and data length.
    pub const fn buffer_len(&self) -> usize {
        self.header_len() + self.data().len()
    }

    /// Writes the header part into `buffer[..header_len()]`; the data part
    /// is the caller's.
    ///
    /// # Panics
    ///
    /// If `buffer` is shorter than [`header_len`](Self::header_len).
    pub fn emit_header(&self, buffer: &mut [u8]) {
        let header = &mut buffer[..self.header_len()];
        match self {
            NvmePacket::WriteRequest(repr) => {
                repr.emit(&mut request::Packet::new_unchecked(header));
            }
            NvmePacket::ReadRequest(repr) => repr.emit(&mut request::Packet::new_unchecked(header)),
            NvmePacket::WriteDataRequest(repr) => {
                repr.emit(&mut nbth::Packet::new_unchecked(header));
            }
            NvmePacket::WriteDataResponse { repr, .. } => {
                repr.emit(&mut write_data::Packet::new_unchecked(header));
            }
            NvmePacket::WriteCompletion(repr) => {
                repr.emit(&mut response::Packet::new_unchecked(header));
            }
            NvmePacket::ReadResponse { repr, .. } => {
                repr.emit(&mut response::Packet::new_unchecked(header));
            }
            NvmePacket::CommandRequest { repr, .. } => repr.emit(header),
            NvmePacket::CommandResponse { repr, .. } => repr.emit(header),
        }
    }
}

impl fmt::Display for NvmePacket<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NVMe {} {}", self.packet_type(), self.nbth())?;
        match self {
            NvmePacket::WriteRequest(repr) => write!(f, " {}", repr.command),
            NvmePacket::ReadRequest(repr) => write!(f, " {}", repr.command),
            NvmePacket::WriteCompletion(repr) => write!(f, " status {}", repr.status),
            NvmePacket::ReadResponse { repr, data } => {
                write!(f, " status {} data {}", repr.status, data.len())
            }
            NvmePacket::WriteDataResponse { data, .. } => write!(f, " data {}", data.len()),
            NvmePacket::WriteDataRequest(_) => Ok(()),
            NvmePacket::CommandRequest { repr, data } => write!(
                f,
                " SQID {} opcode {:#04x} NSID {} data {}",
                repr.target_sqid,
                repr.sqe.opcode(),
                repr.sqe.nsid(),
                data.len()
            ),
            NvmePacket::CommandResponse { repr, data } => {
                write!(f, " status {} data {}", repr.cqe.status, data.len())
            }
        }
    }
}

#[cfg(test)]
mod tests;
