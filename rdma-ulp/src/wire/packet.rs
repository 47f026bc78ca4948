//! A whole RDMA-over-Falcon packet: the parse that dispatches on the opcode
//! and the emit of its headers.
//!
//! Layer: wire. Owns [`Extensions`] (the extended headers of each
//! [`HeaderLayout`], as one value a queue pair matches on), [`RdmaHeader`]
//! (an RBTH and the extensions its opcode calls for, consistent by
//! construction) and [`RdmaPacket`] (a parsed header and its payload, a
//! slice of the received bytes). Never panics on input.
//!
//! A receiver calls [`RdmaPacket::parse`] with the Falcon packet the bytes
//! came in, because the opcodes each may carry differ (RDMA-0.9 §8.1.3):
//! a target's `Request` gives its `kind` ([`FalconPacket::request`]) and
//! its payload (Push Data) or header (Pull Request); an initiator's pull
//! `Completion` gives the Pull Data. A sender builds an [`RdmaHeader`] and
//! puts [`RdmaHeader::to_ulp_header`] in its `Transaction`; the data source
//! supplies the payload and the pad bytes the RBTH counts.

use core::fmt;

use falcon_core::api::UlpHeader;

use super::opcode::MAX_HEADER_LEN;
use super::rbth::{self, Rbth};
use super::{
    AtomicAckEth, AtomicEth, Deth, ExtendedRepr, FalconPacket, HeaderLayout, Ieth, ImmDt, Oeth,
    Opcode, ParseError, Reth, Seth, Steth,
};

/// The extended headers after an RBTH, one variant per [`HeaderLayout`],
/// fields in wire order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Extensions {
    /// SEND First, Middle, Last, Only.
    Send {
        seth: Seth,
        oeth: Oeth,
    },
    SendImmediate {
        seth: Seth,
        oeth: Oeth,
        immediate: ImmDt,
    },
    SendInvalidate {
        seth: Seth,
        oeth: Oeth,
        ieth: Ieth,
    },
    /// WRITE First, Middle, Last, Only.
    Write {
        reth: Reth,
    },
    WriteImmediate {
        reth: Reth,
        seth: Seth,
        immediate: ImmDt,
    },
    ReadRequest {
        reth: Reth,
        seth: Seth,
        steth: Steth,
    },
    ReadResponse {
        steth: Steth,
    },
    /// CmpSwap and FetchAdd.
    AtomicRequest {
        atomic: AtomicEth,
        seth: Seth,
        steth: Steth,
    },
    AtomicResponse {
        atomic_ack: AtomicAckEth,
        steth: Steth,
    },
    /// UD SEND Only.
    Datagram {
        deth: Deth,
    },
    DatagramImmediate {
        deth: Deth,
        immediate: ImmDt,
    },
}

impl Extensions {
    /// The layout these headers have.
    pub const fn layout(&self) -> HeaderLayout {
        match self {
            Extensions::Send { .. } => HeaderLayout::Send,
            Extensions::SendImmediate { .. } => HeaderLayout::SendImmediate,
            Extensions::SendInvalidate { .. } => HeaderLayout::SendInvalidate,
            Extensions::Write { .. } => HeaderLayout::Write,
            Extensions::WriteImmediate { .. } => HeaderLayout::WriteImmediate,
            Extensions::ReadRequest { .. } => HeaderLayout::ReadRequest,
            Extensions::ReadResponse { .. } => HeaderLayout::ReadResponse,
            Extensions::AtomicRequest { .. } => HeaderLayout::AtomicRequest,
            Extensions::AtomicResponse { .. } => HeaderLayout::AtomicResponse,
            Extensions::Datagram { .. } => HeaderLayout::Datagram,
            Extensions::DatagramImmediate { .. } => HeaderLayout::DatagramImmediate,
        }
    }

    /// Bytes of the extended headers (the RBTH not counted).
    pub const fn buffer_len(&self) -> usize {
        self.layout().header_len() - rbth::HEADER_LEN
    }

    pub const fn reth(&self) -> Option<Reth> {
        match *self {
            Extensions::Write { reth }
            | Extensions::WriteImmediate { reth, .. }
            | Extensions::ReadRequest { reth, .. } => Some(reth),
            _ => None,
        }
    }

    pub const fn seth(&self) -> Option<Seth> {
        match *self {
            Extensions::Send { seth, .. }
            | Extensions::SendImmediate { seth, .. }
            | Extensions::SendInvalidate { seth, .. }
            | Extensions::WriteImmediate { seth, .. }
            | Extensions::ReadRequest { seth, .. }
            | Extensions::AtomicRequest { seth, .. } => Some(seth),
            _ => None,
        }
    }

    pub const fn oeth(&self) -> Option<Oeth> {
        match *self {
            Extensions::Send { oeth, .. }
            | Extensions::SendImmediate { oeth, .. }
            | Extensions::SendInvalidate { oeth, .. } => Some(oeth),
            _ => None,
        }
    }

    pub const fn steth(&self) -> Option<Steth> {
        match *self {
            Extensions::ReadRequest { steth, .. }
            | Extensions::ReadResponse { steth }
            | Extensions::AtomicRequest { steth, .. }
            | Extensions::AtomicResponse { steth, .. } => Some(steth),
            _ => None,
        }
    }

    pub const fn immediate(&self) -> Option<ImmDt> {
        match *self {
            Extensions::SendImmediate { immediate, .. }
            | Extensions::WriteImmediate { immediate, .. }
            | Extensions::DatagramImmediate { immediate, .. } => Some(immediate),
            _ => None,
        }
    }

    pub const fn ieth(&self) -> Option<Ieth> {
        match *self {
            Extensions::SendInvalidate { ieth, .. } => Some(ieth),
            _ => None,
        }
    }

    pub const fn atomic(&self) -> Option<AtomicEth> {
        match *self {
            Extensions::AtomicRequest { atomic, .. } => Some(atomic),
            _ => None,
        }
    }

    pub const fn atomic_ack(&self) -> Option<AtomicAckEth> {
        match *self {
            Extensions::AtomicResponse { atomic_ack, .. } => Some(atomic_ack),
            _ => None,
        }
    }

    pub const fn deth(&self) -> Option<Deth> {
        match *self {
            Extensions::Datagram { deth } | Extensions::DatagramImmediate { deth, .. } => {
                Some(deth)
            }
            _ => None,
        }
    }

    /// Reads the headers of `layout` from the start of `bytes`.
    ///
    /// # Errors
    ///
    /// [`ParseError::Truncated`] naming the first header that does not fit.
    pub fn parse(layout: HeaderLayout, bytes: &[u8]) -> Result<Extensions, ParseError> {
        let mut r = Reader { bytes, at: 0 };
        Ok(match layout {
            HeaderLayout::Send => Extensions::Send {
                seth: r.next()?,
                oeth: r.next()?,
            },
            HeaderLayout::SendImmediate => Extensions::SendImmediate {
                seth: r.next()?,
                oeth: r.next()?,
                immediate: r.next()?,
            },
            HeaderLayout::SendInvalidate => Extensions::SendInvalidate {
                seth: r.next()?,
                oeth: r.next()?,
                ieth: r.next()?,
            },
            HeaderLayout::Write => Extensions::Write { reth: r.next()? },
            HeaderLayout::WriteImmediate => Extensions::WriteImmediate {
                reth: r.next()?,
                seth: r.next()?,
                immediate: r.next()?,
            },
            HeaderLayout::ReadRequest => Extensions::ReadRequest {
                reth: r.next()?,
                seth: r.next()?,
                steth: r.next()?,
            },
            HeaderLayout::ReadResponse => Extensions::ReadResponse { steth: r.next()? },
            HeaderLayout::AtomicRequest => Extensions::AtomicRequest {
                atomic: r.next()?,
                seth: r.next()?,
                steth: r.next()?,
            },
            HeaderLayout::AtomicResponse => Extensions::AtomicResponse {
                atomic_ack: r.next()?,
                steth: r.next()?,
            },
            HeaderLayout::Datagram => Extensions::Datagram { deth: r.next()? },
            HeaderLayout::DatagramImmediate => Extensions::DatagramImmediate {
                deth: r.next()?,
                immediate: r.next()?,
            },
        })
    }

    /// Writes the headers into `buffer[..buffer_len()]`.
    ///
    /// # Panics
    ///
    /// If `buffer` is shorter than [`buffer_len`](Self::buffer_len).
    pub fn emit(&self, buffer: &mut [u8]) {
        let mut w = Writer {
            bytes: buffer,
            at: 0,
        };
        match self {
            Extensions::Send { seth, oeth } => {
                w.put(seth);
                w.put(oeth);
            }
            Extensions::SendImmediate {
                seth,
                oeth,
                immediate,
            } => {
                w.put(seth);
                w.put(oeth);
                w.put(immediate);
            }
            Extensions::SendInvalidate { seth, oeth, ieth } => {
                w.put(seth);
                w.put(oeth);
                w.put(ieth);
            }
            Extensions::Write { reth } => w.put(reth),
            Extensions::WriteImmediate {
                reth,
                seth,
                immediate,
            } => {
                w.put(reth);
                w.put(seth);
                w.put(immediate);
            }
            Extensions::ReadRequest { reth, seth, steth } => {
                w.put(reth);
                w.put(seth);
                w.put(steth);
            }
            Extensions::ReadResponse { steth } => w.put(steth),
            Extensions::AtomicRequest {
                atomic,
                seth,
                steth,
            } => {
                w.put(atomic);
                w.put(seth);
                w.put(steth);
            }
            Extensions::AtomicResponse { atomic_ack, steth } => {
                w.put(atomic_ack);
                w.put(steth);
            }
            Extensions::Datagram { deth } => w.put(deth),
            Extensions::DatagramImmediate { deth, immediate } => {
                w.put(deth);
                w.put(immediate);
            }
        }
    }
}

/// Reads extended headers one after the other.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn next<H: ExtendedRepr>(&mut self) -> Result<H, ParseError> {
        let header = H::read(self.bytes.get(self.at..).unwrap_or_default())?;
        self.at += H::KIND.header_len();
        Ok(header)
    }
}

/// Writes extended headers one after the other.
struct Writer<'a> {
    bytes: &'a mut [u8],
    at: usize,
}

impl Writer<'_> {
    fn put<H: ExtendedRepr>(&mut self, header: &H) {
        let end = self.at + H::KIND.header_len();
        header.write(&mut self.bytes[self.at..end]);
        self.at = end;
    }
}

impl fmt::Display for Extensions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let headers: [Option<&dyn fmt::Display>; 3] = match self {
            Extensions::Send { seth, oeth } => [Some(seth), Some(oeth), None],
            Extensions::SendImmediate {
                seth,
                oeth,
                immediate,
            } => [Some(seth), Some(oeth), Some(immediate)],
            Extensions::SendInvalidate { seth, oeth, ieth } => [Some(seth), Some(oeth), Some(ieth)],
            Extensions::Write { reth } => [Some(reth), None, None],
            Extensions::WriteImmediate {
                reth,
                seth,
                immediate,
            } => [Some(reth), Some(seth), Some(immediate)],
            Extensions::ReadRequest { reth, seth, steth } => [Some(reth), Some(seth), Some(steth)],
            Extensions::ReadResponse { steth } => [Some(steth), None, None],
            Extensions::AtomicRequest {
                atomic,
                seth,
                steth,
            } => [Some(atomic), Some(seth), Some(steth)],
            Extensions::AtomicResponse { atomic_ack, steth } => {
                [Some(atomic_ack), Some(steth), None]
            }
            Extensions::Datagram { deth } => [Some(deth), None, None],
            Extensions::DatagramImmediate { deth, immediate } => {
                [Some(deth), Some(immediate), None]
            }
        };
        let mut first = true;
        for header in headers.into_iter().flatten() {
            if !first {
                f.write_str(" | ")?;
            }
            first = false;
            header.fmt(f)?;
        }
        Ok(())
    }
}

/// An RBTH whose opcode calls for other extended headers than the ones
/// given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderMismatch {
    pub opcode: Opcode,
    /// The layout of the extensions given.
    pub found: HeaderLayout,
}

impl fmt::Display for HeaderMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} takes {:?} headers, not {:?}",
            self.opcode,
            self.opcode.layout(),
            self.found
        )
    }
}

impl std::error::Error for HeaderMismatch {}

/// The headers of one packet: an RBTH and the extended headers its opcode
/// calls for. Consistent by construction, so [`emit`](Self::emit) cannot
/// fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RdmaHeader {
    rbth: Rbth,
    extensions: Extensions,
}

impl RdmaHeader {
    /// # Errors
    ///
    /// [`HeaderMismatch`] unless `extensions` has the layout
    /// `rbth.opcode` calls for.
    pub const fn new(rbth: Rbth, extensions: Extensions) -> Result<RdmaHeader, HeaderMismatch> {
        let found = extensions.layout();
        if rbth.opcode.layout() as u8 != found as u8 {
            return Err(HeaderMismatch {
                opcode: rbth.opcode,
                found,
            });
        }
        Ok(RdmaHeader { rbth, extensions })
    }

    pub const fn rbth(&self) -> &Rbth {
        &self.rbth
    }

    pub const fn extensions(&self) -> &Extensions {
        &self.extensions
    }

    pub const fn opcode(&self) -> Opcode {
        self.rbth.opcode
    }

    /// The RBTH and extended headers, in bytes.
    pub const fn header_len(&self) -> usize {
        self.rbth.opcode.header_len()
    }

    /// Writes the headers into `buffer[..header_len()]`.
    ///
    /// # Panics
    ///
    /// If `buffer` is shorter than [`header_len`](Self::header_len).
    pub fn emit(&self, buffer: &mut [u8]) {
        let (rbth_bytes, rest) = buffer.split_at_mut(rbth::HEADER_LEN);
        self.rbth.emit(&mut rbth::Packet::new_unchecked(rbth_bytes));
        self.extensions.emit(rest);
    }

    /// The headers as a Falcon transaction's ULP header.
    pub fn to_ulp_header(&self) -> UlpHeader {
        let mut bytes = [0u8; MAX_HEADER_LEN];
        let header = &mut bytes[..self.header_len()];
        self.emit(header);
        // Invariant: header_len() <= MAX_HEADER_LEN <= ULP_HEADER_CAPACITY,
        // asserted at compile time in `opcode`.
        UlpHeader::new(header).expect("RDMA headers fit a ULP header")
    }
}

impl fmt::Display for RdmaHeader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RDMA {} | {}", self.rbth, self.extensions)
    }
}

/// A received RDMA-over-Falcon packet: its headers and its payload, which
/// borrows the received bytes (the pad bytes excluded).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RdmaPacket<'a> {
    pub header: RdmaHeader,
    pub payload: &'a [u8],
}

impl<'a> RdmaPacket<'a> {
    /// Parses the RDMA part of a Falcon packet: the RBTH's version and
    /// opcode first, whether that opcode rides in `falcon`, then the
    /// extended headers the opcode calls for, then the payload less the
    /// RBTH's pad. `bytes` must end where the Falcon payload ends (the
    /// Request Length).
    ///
    /// # Errors
    ///
    /// [`ParseError::Truncated`], [`ParseError::BadVersion`],
    /// [`ParseError::ReservedOpcode`], [`ParseError::OpcodeNotAllowed`],
    /// [`ParseError::TrailingBytes`] (bytes after a READ or ATOMIC request
    /// or an ATOMIC Response) or [`ParseError::PadBeyondPayload`].
    pub fn parse(falcon: FalconPacket, bytes: &'a [u8]) -> Result<RdmaPacket<'a>, ParseError> {
        let rbth = Rbth::parse(&rbth::Packet::new_checked(bytes)?)?;
        let opcode = rbth.opcode;
        if opcode.falcon_packet() != falcon {
            return Err(ParseError::OpcodeNotAllowed {
                opcode,
                found: falcon,
            });
        }
        let header_len = opcode.header_len();
        let (Some(headers), Some(rest)) = (
            bytes.get(rbth::HEADER_LEN..header_len),
            bytes.get(header_len..),
        ) else {
            return Err(ParseError::Truncated {
                what: opcode.name(),
                need: header_len,
                have: bytes.len(),
            });
        };
        let extensions = Extensions::parse(opcode.layout(), headers)?;
        if !opcode.carries_payload() && !rest.is_empty() {
            return Err(ParseError::TrailingBytes {
                opcode,
                extra: rest.len(),
            });
        }
        let pad = usize::from(rbth.pad.value());
        if pad > rest.len() {
            return Err(ParseError::PadBeyondPayload {
                pad: rbth.pad.value(),
                available: rest.len(),
            });
        }
        let payload = &rest[..rest.len() - pad];
        Ok(RdmaPacket {
            header: RdmaHeader { rbth, extensions },
            payload,
        })
    }

    pub const fn opcode(&self) -> Opcode {
        self.header.opcode()
    }

    /// Headers, payload and pad: the bytes it was parsed from.
    pub const fn buffer_len(&self) -> usize {
        self.header.header_len() + self.payload.len() + self.header.rbth.pad.value() as usize
    }

    /// Writes headers, payload and zeroed pad into
    /// `buffer[..buffer_len()]`.
    ///
    /// # Panics
    ///
    /// If `buffer` is shorter than [`buffer_len`](Self::buffer_len).
    pub fn emit(&self, buffer: &mut [u8]) {
        let header_len = self.header.header_len();
        let payload_end = header_len + self.payload.len();
        self.header.emit(&mut buffer[..header_len]);
        buffer[header_len..payload_end].copy_from_slice(self.payload);
        buffer[payload_end..self.buffer_len()].fill(0);
    }
}

impl fmt::Display for RdmaPacket<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} | payload {}", self.header, self.payload.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seq::{Rmsn, Sn};
    use crate::wire::{LKey, PadCount, Qpn, RKey};

    fn read_request() -> RdmaHeader {
        RdmaHeader::new(
            Rbth::new(Opcode::ReadRequest, Qpn::truncating(0x00_0102), Sn::new(7)),
            Extensions::ReadRequest {
                reth: Reth {
                    virtual_address: 0x1000,
                    r_key: RKey(0x22),
                    length: 4096,
                },
                seth: Seth { rmsn: Rmsn::new(3) },
                steth: Steth {
                    virtual_address: 0x2000,
                    l_key: LKey(0x33),
                },
            },
        )
        .unwrap()
    }

    /// A SEND First with 5 bytes of data and 3 of pad, byte by byte.
    #[test]
    fn send_first_as_bytes() {
        let mut rbth = Rbth::new(Opcode::SendFirst, Qpn::truncating(0x00_00AB), Sn::FIRST);
        rbth.pad = PadCount::for_payload(5);
        let header = RdmaHeader::new(
            rbth,
            Extensions::Send {
                seth: Seth { rmsn: Rmsn::FIRST },
                oeth: Oeth { message_offset: 0 },
            },
        )
        .unwrap();
        let packet = RdmaPacket {
            header,
            payload: b"hello",
        };
        let mut bytes = [0xEEu8; 28];
        packet.emit(&mut bytes);
        assert_eq!(
            bytes,
            [
                0x10, 0x00, 0x0C, 0x00, // RBTH: V=1 | Pad=3 | SEND First
                0x00, 0x00, 0xAB, 0x00, // Destination QP
                0x00, 0x00, 0x00, 0x01, // SN 1
                0x00, 0x00, 0x00, 0x01, // SETH: RMSN 1
                0x00, 0x00, 0x00, 0x00, // OETH: offset 0
                b'h', b'e', b'l', b'l', b'o', 0, 0, 0, // payload, pad
            ]
        );
        assert_eq!(packet.buffer_len(), 28);
        let parsed = RdmaPacket::parse(FalconPacket::PushData, &bytes).unwrap();
        assert_eq!(parsed, packet);
        assert_eq!(parsed.payload.as_ptr(), bytes[20..].as_ptr(), "zero copy");
        assert_eq!(
            header.to_string(),
            "RDMA SEND First qp 171 SN 1 pad 3 | SETH RMSN 1 | OETH offset 0"
        );
    }

    #[test]
    fn read_request_fills_a_ulp_header() {
        let header = read_request();
        let ulp = header.to_ulp_header();
        assert_eq!(ulp.len(), 44);
        let mut bytes = [0u8; 44];
        header.emit(&mut bytes);
        assert_eq!(ulp.as_slice(), &bytes);
        let parsed = RdmaPacket::parse(FalconPacket::PullRequest, &ulp).unwrap();
        assert_eq!(parsed.header, header);
        assert!(parsed.payload.is_empty());
    }

    #[test]
    fn headers_must_match_the_opcode() {
        let rbth = Rbth::new(Opcode::WriteLastImmediate, Qpn::ZERO, Sn::FIRST);
        let write = Extensions::Write {
            reth: Reth::default(),
        };
        assert_eq!(
            RdmaHeader::new(rbth, write),
            Err(HeaderMismatch {
                opcode: Opcode::WriteLastImmediate,
                found: HeaderLayout::Write
            })
        );
        let rbth = Rbth {
            opcode: Opcode::WriteMiddle,
            ..rbth
        };
        assert!(RdmaHeader::new(rbth, write).is_ok());
    }

    #[test]
    fn dispatch_names_the_fault() {
        let mut bytes = [0u8; 64];
        read_request().emit(&mut bytes);
        assert_eq!(
            RdmaPacket::parse(FalconPacket::PullRequest, &bytes[..11]),
            Err(ParseError::Truncated {
                what: "RBTH",
                need: 12,
                have: 11
            })
        );
        assert_eq!(
            RdmaPacket::parse(FalconPacket::PullRequest, &bytes[..43]),
            Err(ParseError::Truncated {
                what: "READ Request",
                need: 44,
                have: 43
            })
        );
        assert_eq!(
            RdmaPacket::parse(FalconPacket::PullRequest, &bytes),
            Err(ParseError::TrailingBytes {
                opcode: Opcode::ReadRequest,
                extra: 20
            })
        );
        for found in [FalconPacket::PushData, FalconPacket::PullData] {
            assert_eq!(
                RdmaPacket::parse(found, &bytes[..44]),
                Err(ParseError::OpcodeNotAllowed {
                    opcode: Opcode::ReadRequest,
                    found
                })
            );
        }
        bytes[3] = 0x11;
        assert_eq!(
            RdmaPacket::parse(FalconPacket::PullRequest, &bytes[..44]),
            Err(ParseError::ReservedOpcode(0x11))
        );
        bytes[0] = 0x00;
        assert_eq!(
            RdmaPacket::parse(FalconPacket::PullRequest, &bytes[..44]),
            Err(ParseError::BadVersion(0))
        );
        // A READ Response Only with pad 2 and one byte after its headers.
        bytes[0] = 0x10;
        bytes[2] = 0x08;
        bytes[3] = Opcode::ReadResponseOnly.code();
        assert_eq!(
            RdmaPacket::parse(FalconPacket::PullData, &bytes[..25]),
            Err(ParseError::PadBeyondPayload {
                pad: 2,
                available: 1
            })
        );
        let packet = RdmaPacket::parse(FalconPacket::PullData, &bytes[..26]).unwrap();
        assert!(packet.payload.is_empty(), "two bytes, both pad");
        assert_eq!(
            ParseError::OpcodeNotAllowed {
                opcode: Opcode::SendOnly,
                found: FalconPacket::PullData
            }
            .to_string(),
            "SEND Only in a Falcon Pull Data (it rides in a Push Data)"
        );
        assert_eq!(
            ParseError::ReservedOpcode(0x11).name(),
            "rdma_reserved_opcode"
        );
    }
}
