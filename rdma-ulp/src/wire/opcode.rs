//! The opcode table: per opcode, the Falcon packet it rides in and the
//! extended headers that follow its RBTH (RDMA-0.9 §8.1.3).
//!
//! Layer: wire. Owns [`Opcode`] (one `opcode_table!` invocation below is
//! the whole table, the only place it is written), [`HeaderLayout`] (the
//! sequences of extended headers), [`ExtendedHeader`] and the values a
//! queue pair asks of an opcode ([`Service`], [`Operation`], [`Position`],
//! [`Extra`]). Pure data: nothing here reads a packet.

use core::fmt;

use super::{
    atomic_ack_eth, atomic_eth, deth, ieth, immdt, oeth, rbth, reth, seth, steth, FalconPacket,
    ParseError,
};

/// The InfiniBand transport service, opcode bits 7–5 (RDMA-0.9 §8.1.3:
/// 000b RC, 011b UD; Falcon carries no UC, RD or XRC opcodes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Service {
    ReliableConnection,
    UnreliableDatagram,
}

/// What a packet does, whatever its place in a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    Send,
    Write,
    ReadRequest,
    ReadResponse,
    CompareSwap,
    FetchAdd,
    AtomicResponse,
}

/// A packet's place in a multi-packet message (RDMA-0.9 §6.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Position {
    First,
    Middle,
    Last,
    Only,
}

impl Position {
    /// The packet ends its message: Last or Only, where CE, immediate data
    /// and invalidation go.
    pub const fn ends_message(self) -> bool {
        matches!(self, Position::Last | Position::Only)
    }
}

/// What a message's last packet adds for the target's completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Extra {
    Plain,
    /// An ImmDt.
    Immediate,
    /// An IETH.
    Invalidate,
}

/// One extended transport header (RDMA-0.9 §8.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExtendedHeader {
    Reth,
    Seth,
    Oeth,
    Steth,
    ImmDt,
    AtomicEth,
    AtomicAckEth,
    Ieth,
    Deth,
}

impl ExtendedHeader {
    /// Its length, in bytes.
    pub const fn header_len(self) -> usize {
        match self {
            ExtendedHeader::Reth => reth::HEADER_LEN,
            ExtendedHeader::Seth => seth::HEADER_LEN,
            ExtendedHeader::Oeth => oeth::HEADER_LEN,
            ExtendedHeader::Steth => steth::HEADER_LEN,
            ExtendedHeader::ImmDt => immdt::HEADER_LEN,
            ExtendedHeader::AtomicEth => atomic_eth::HEADER_LEN,
            ExtendedHeader::AtomicAckEth => atomic_ack_eth::HEADER_LEN,
            ExtendedHeader::Ieth => ieth::HEADER_LEN,
            ExtendedHeader::Deth => deth::HEADER_LEN,
        }
    }

    /// The spec's name.
    pub const fn name(self) -> &'static str {
        match self {
            ExtendedHeader::Reth => "RETH",
            ExtendedHeader::Seth => "SETH",
            ExtendedHeader::Oeth => "OETH",
            ExtendedHeader::Steth => "STETH",
            ExtendedHeader::ImmDt => "ImmDt",
            ExtendedHeader::AtomicEth => "AtomicETH",
            ExtendedHeader::AtomicAckEth => "AtomicAckETH",
            ExtendedHeader::Ieth => "IETH",
            ExtendedHeader::Deth => "DETH",
        }
    }
}

impl fmt::Display for ExtendedHeader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A sequence of extended headers after the RBTH: the "RDMA Headers
/// Present" column of RDMA-0.9 §8.1.3, one value per distinct entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HeaderLayout {
    /// SEND First, Middle, Last, Only.
    Send,
    SendImmediate,
    SendInvalidate,
    /// WRITE First, Middle, Last, Only.
    Write,
    WriteImmediate,
    ReadRequest,
    ReadResponse,
    /// CmpSwap and FetchAdd.
    AtomicRequest,
    AtomicResponse,
    /// UD SEND Only.
    Datagram,
    DatagramImmediate,
}

impl HeaderLayout {
    /// The extended headers, in wire order.
    ///
    /// The two atomic layouts follow §8.3.6 and §8.3.7 (AtomicETH in the
    /// requests, AtomicAckETH in the response), not the §8.1.3 table, which
    /// swaps them: a CmpSwap needs the address and operands only the
    /// AtomicETH holds (ulp.md §1.7 erratum 1, decision D2).
    pub const fn headers(self) -> &'static [ExtendedHeader] {
        use ExtendedHeader::*;
        match self {
            HeaderLayout::Send => &[Seth, Oeth],
            HeaderLayout::SendImmediate => &[Seth, Oeth, ImmDt],
            HeaderLayout::SendInvalidate => &[Seth, Oeth, Ieth],
            HeaderLayout::Write => &[Reth],
            HeaderLayout::WriteImmediate => &[Reth, Seth, ImmDt],
            HeaderLayout::ReadRequest => &[Reth, Seth, Steth],
            HeaderLayout::ReadResponse => &[Steth],
            HeaderLayout::AtomicRequest => &[AtomicEth, Seth, Steth],
            HeaderLayout::AtomicResponse => &[AtomicAckEth, Steth],
            HeaderLayout::Datagram => &[Deth],
            HeaderLayout::DatagramImmediate => &[Deth, ImmDt],
        }
    }

    /// RBTH and extended headers, in bytes.
    pub const fn header_len(self) -> usize {
        let headers = self.headers();
        let mut len = rbth::HEADER_LEN;
        let mut i = 0;
        while i < headers.len() {
            len += headers[i].header_len();
            i += 1;
        }
        len
    }

    /// Whether data follows the headers. A READ Request or an atomic
    /// request asks for data; an ATOMIC Response's result is in its header.
    pub const fn carries_payload(self) -> bool {
        !matches!(
            self,
            HeaderLayout::ReadRequest | HeaderLayout::AtomicRequest | HeaderLayout::AtomicResponse
        )
    }

    /// The ImmDt or IETH it ends with, if any.
    pub const fn extra(self) -> Extra {
        match self {
            HeaderLayout::SendImmediate
            | HeaderLayout::WriteImmediate
            | HeaderLayout::DatagramImmediate => Extra::Immediate,
            HeaderLayout::SendInvalidate => Extra::Invalidate,
            _ => Extra::Plain,
        }
    }
}

/// Declares [`Opcode`] from the rows of the table: code, variant, the
/// spec's name, operation, position, Falcon packet, header layout.
macro_rules! opcode_table {
    (@position None) => { None };
    (@position $position:ident) => { Some(Position::$position) };
    ($(
        $code:literal $variant:ident $name:literal
            $operation:ident $position:ident $falcon:ident $layout:ident;
    )*) => {
        /// An RDMA-over-Falcon opcode: InfiniBand's encoding (bits 7–5 the
        /// service, 4–0 the operation), restricted to the codes RDMA-0.9
        /// §8.1.3 assigns. Each discriminant is the wire code.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(u8)]
        pub enum Opcode {
            $(
                #[doc = $name]
                $variant = $code,
            )*
        }

        impl Opcode {
            /// Every assigned opcode, in code order.
            pub const ALL: &'static [Opcode] = &[$(Opcode::$variant),*];

            /// The opcode for a wire code.
            ///
            /// # Errors
            ///
            /// [`ParseError::ReservedOpcode`] for every other code:
            /// 0x11 (InfiniBand's Acknowledge; Falcon acknowledges), 0x15,
            /// 0x18–0x1F, 0x60–0x63, 0x66–0x7F, and the UC, RD, CNP and
            /// XRC groups.
            pub const fn from_code(code: u8) -> Result<Opcode, ParseError> {
                match code {
                    $($code => Ok(Opcode::$variant),)*
                    other => Err(ParseError::ReservedOpcode(other)),
                }
            }

            /// The spec's name.
            pub const fn name(self) -> &'static str {
                match self {
                    $(Opcode::$variant => $name,)*
                }
            }

            pub const fn operation(self) -> Operation {
                match self {
                    $(Opcode::$variant => Operation::$operation,)*
                }
            }

            /// The place in its message; `None` for the single-packet
            /// requests and the ATOMIC Response.
            pub const fn position(self) -> Option<Position> {
                match self {
                    $(Opcode::$variant => opcode_table!(@position $position),)*
                }
            }

            /// The Falcon packet it must ride in.
            pub const fn falcon_packet(self) -> FalconPacket {
                match self {
                    $(Opcode::$variant => FalconPacket::$falcon,)*
                }
            }

            /// The extended headers after its RBTH.
            pub const fn layout(self) -> HeaderLayout {
                match self {
                    $(Opcode::$variant => HeaderLayout::$layout,)*
                }
            }
        }
    };
}

opcode_table! {
    // code  variant              name                          operation   position falcon       layout
    0x00 SendFirst                "SEND First"                  Send           First  PushData    Send;
    0x01 SendMiddle               "SEND Middle"                 Send           Middle PushData    Send;
    0x02 SendLast                 "SEND Last"                   Send           Last   PushData    Send;
    0x03 SendLastImmediate        "SEND Last with Immediate"    Send           Last   PushData    SendImmediate;
    0x04 SendOnly                 "SEND Only"                   Send           Only   PushData    Send;
    0x05 SendOnlyImmediate        "SEND Only with Immediate"    Send           Only   PushData    SendImmediate;
    0x06 WriteFirst               "WRITE First"                 Write          First  PushData    Write;
    0x07 WriteMiddle              "WRITE Middle"                Write          Middle PushData    Write;
    0x08 WriteLast                "WRITE Last"                  Write          Last   PushData    Write;
    0x09 WriteLastImmediate       "WRITE Last with Immediate"   Write          Last   PushData    WriteImmediate;
    0x0A WriteOnly                "WRITE Only"                  Write          Only   PushData    Write;
    0x0B WriteOnlyImmediate       "WRITE Only with Immediate"   Write          Only   PushData    WriteImmediate;
    0x0C ReadRequest              "READ Request"                ReadRequest    None   PullRequest ReadRequest;
    0x0D ReadResponseFirst        "READ Response First"         ReadResponse   First  PullData    ReadResponse;
    0x0E ReadResponseMiddle       "READ Response Middle"        ReadResponse   Middle PullData    ReadResponse;
    0x0F ReadResponseLast         "READ Response Last"          ReadResponse   Last   PullData    ReadResponse;
    0x10 ReadResponseOnly         "READ Response Only"          ReadResponse   Only   PullData    ReadResponse;
    0x12 AtomicResponse           "ATOMIC Response"             AtomicResponse None   PullData    AtomicResponse;
    0x13 CompareSwap              "ATOMIC CmpSwap"              CompareSwap    None   PullRequest AtomicRequest;
    0x14 FetchAdd                 "ATOMIC FetchAdd"             FetchAdd       None   PullRequest AtomicRequest;
    0x16 SendLastInvalidate       "SEND Last with Invalidate"   Send           Last   PushData    SendInvalidate;
    0x17 SendOnlyInvalidate       "SEND Only with Invalidate"   Send           Only   PushData    SendInvalidate;
    0x64 UdSendOnly               "UD SEND Only"                Send           Only   PushData    Datagram;
    0x65 UdSendOnlyImmediate      "UD SEND Only with Immediate" Send           Only   PushData    DatagramImmediate;
}

/// The longest RBTH and extended headers of any opcode: 56 bytes, an
/// atomic request's (12 + 28 + 4 + 12, ulp.md §1.14).
pub const MAX_HEADER_LEN: usize = max_header_len();

const fn max_header_len() -> usize {
    let mut max = 0;
    let mut i = 0;
    while i < Opcode::ALL.len() {
        let len = Opcode::ALL[i].header_len();
        if len > max {
            max = len;
        }
        i += 1;
    }
    max
}

// Every header of the table fits a Falcon transaction's inline ULP header.
const _: () = assert!(MAX_HEADER_LEN <= falcon_core::api::ULP_HEADER_CAPACITY);

impl Opcode {
    /// The wire code.
    pub const fn code(self) -> u8 {
        self as u8
    }

    /// RC or UD, from bits 7–5.
    pub const fn service(self) -> Service {
        if self.code() >> 5 == 0b011 {
            Service::UnreliableDatagram
        } else {
            Service::ReliableConnection
        }
    }

    /// The extended headers after the RBTH, in wire order.
    pub const fn headers(self) -> &'static [ExtendedHeader] {
        self.layout().headers()
    }

    /// RBTH and extended headers, in bytes: where the payload starts.
    pub const fn header_len(self) -> usize {
        self.layout().header_len()
    }

    /// Whether data follows the headers.
    pub const fn carries_payload(self) -> bool {
        self.layout().carries_payload()
    }

    /// The ImmDt or IETH it carries, if any.
    pub const fn extra(self) -> Extra {
        self.layout().extra()
    }

    /// The opcode of a packet, for the sender of a segmented message:
    /// `None` where the table has no such row (immediate data before the
    /// last packet, a multi-packet UD SEND, a positioned READ Request...).
    pub const fn for_packet(
        service: Service,
        operation: Operation,
        position: Option<Position>,
        extra: Extra,
    ) -> Option<Opcode> {
        let mut i = 0;
        while i < Opcode::ALL.len() {
            let opcode = Opcode::ALL[i];
            if opcode.service() as u8 == service as u8
                && opcode.operation() as u8 == operation as u8
                && same_position(opcode.position(), position)
                && opcode.extra() as u8 == extra as u8
            {
                return Some(opcode);
            }
            i += 1;
        }
        None
    }
}

/// `a == b`, in a `const fn`.
const fn same_position(a: Option<Position>, b: Option<Position>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => a as u8 == b as u8,
        _ => false,
    }
}

impl fmt::Display for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use ExtendedHeader::*;
    use FalconPacket::{PullData, PullRequest, PushData};

    /// RDMA-0.9 §8.1.3 as printed (ocp/rdma-over-falcon-rev0.9.txt
    /// pp.17–19), written out once more by hand, with the atomic rows as
    /// corrected by D2; and the header bytes of ulp.md §1.14.
    const SPEC: &[(u8, &str, FalconPacket, &[ExtendedHeader], usize)] = &[
        (0x00, "SEND First", PushData, &[Seth, Oeth], 20),
        (0x01, "SEND Middle", PushData, &[Seth, Oeth], 20),
        (0x02, "SEND Last", PushData, &[Seth, Oeth], 20),
        (
            0x03,
            "SEND Last with Immediate",
            PushData,
            &[Seth, Oeth, ImmDt],
            24,
        ),
        (0x04, "SEND Only", PushData, &[Seth, Oeth], 20),
        (
            0x05,
            "SEND Only with Immediate",
            PushData,
            &[Seth, Oeth, ImmDt],
            24,
        ),
        (0x06, "WRITE First", PushData, &[Reth], 28),
        (0x07, "WRITE Middle", PushData, &[Reth], 28),
        (0x08, "WRITE Last", PushData, &[Reth], 28),
        (
            0x09,
            "WRITE Last with Immediate",
            PushData,
            &[Reth, Seth, ImmDt],
            36,
        ),
        (0x0A, "WRITE Only", PushData, &[Reth], 28),
        (
            0x0B,
            "WRITE Only with Immediate",
            PushData,
            &[Reth, Seth, ImmDt],
            36,
        ),
        (0x0C, "READ Request", PullRequest, &[Reth, Seth, Steth], 44),
        (0x0D, "READ Response First", PullData, &[Steth], 24),
        (0x0E, "READ Response Middle", PullData, &[Steth], 24),
        (0x0F, "READ Response Last", PullData, &[Steth], 24),
        (0x10, "READ Response Only", PullData, &[Steth], 24),
        (
            0x12,
            "ATOMIC Response",
            PullData,
            &[AtomicAckEth, Steth],
            32,
        ),
        (
            0x13,
            "ATOMIC CmpSwap",
            PullRequest,
            &[AtomicEth, Seth, Steth],
            56,
        ),
        (
            0x14,
            "ATOMIC FetchAdd",
            PullRequest,
            &[AtomicEth, Seth, Steth],
            56,
        ),
        (
            0x16,
            "SEND Last with Invalidate",
            PushData,
            &[Seth, Oeth, Ieth],
            24,
        ),
        (
            0x17,
            "SEND Only with Invalidate",
            PushData,
            &[Seth, Oeth, Ieth],
            24,
        ),
        (0x64, "UD SEND Only", PushData, &[Deth], 20),
        (
            0x65,
            "UD SEND Only with Immediate",
            PushData,
            &[Deth, ImmDt],
            24,
        ),
    ];

    #[test]
    fn the_table_is_the_spec() {
        assert_eq!(Opcode::ALL.len(), SPEC.len());
        for (&opcode, &(code, name, falcon, headers, len)) in Opcode::ALL.iter().zip(SPEC) {
            assert_eq!(opcode.code(), code, "{name}");
            assert_eq!(opcode.name(), name);
            assert_eq!(opcode.falcon_packet(), falcon, "{name}");
            assert_eq!(opcode.headers(), headers, "{name}");
            assert_eq!(opcode.header_len(), len, "{name}");
            assert_eq!(Opcode::from_code(code), Ok(opcode));
        }
    }

    #[test]
    fn every_other_code_is_reserved() {
        let assigned: Vec<u8> = SPEC.iter().map(|row| row.0).collect();
        for code in 0..=u8::MAX {
            match Opcode::from_code(code) {
                Ok(opcode) => assert!(assigned.contains(&opcode.code())),
                Err(err) => {
                    assert!(!assigned.contains(&code));
                    assert_eq!(err, ParseError::ReservedOpcode(code));
                }
            }
        }
    }

    #[test]
    fn every_header_fits_a_ulp_header() {
        assert_eq!(MAX_HEADER_LEN, 56);
        for &opcode in Opcode::ALL {
            assert!(
                opcode.header_len() <= falcon_core::api::ULP_HEADER_CAPACITY,
                "{opcode}"
            );
        }
    }

    #[test]
    fn services_operations_and_positions() {
        for &opcode in Opcode::ALL {
            let service = if opcode.code() >= 0x60 {
                Service::UnreliableDatagram
            } else {
                Service::ReliableConnection
            };
            assert_eq!(opcode.service(), service, "{opcode}");
            // Only a message's last packet carries immediate data or an IETH.
            if opcode.extra() != Extra::Plain {
                assert!(
                    opcode.position().is_some_and(Position::ends_message),
                    "{opcode}"
                );
            }
            // Requests ride in Pull Requests, their answers in Pull Data.
            let pull = matches!(
                opcode.operation(),
                Operation::ReadRequest | Operation::CompareSwap | Operation::FetchAdd
            );
            assert_eq!(opcode.falcon_packet() == PullRequest, pull, "{opcode}");
            assert_eq!(
                opcode.carries_payload(),
                matches!(
                    opcode.operation(),
                    Operation::Send | Operation::Write | Operation::ReadResponse
                ),
                "{opcode}"
            );
            assert_eq!(
                Opcode::for_packet(
                    opcode.service(),
                    opcode.operation(),
                    opcode.position(),
                    opcode.extra()
                ),
                Some(opcode)
            );
        }
        let send = |position, extra| {
            Opcode::for_packet(
                Service::ReliableConnection,
                Operation::Send,
                Some(position),
                extra,
            )
        };
        assert_eq!(send(Position::Middle, Extra::Immediate), None);
        assert_eq!(
            send(Position::Last, Extra::Invalidate),
            Some(Opcode::SendLastInvalidate)
        );
        assert_eq!(
            Opcode::for_packet(
                Service::UnreliableDatagram,
                Operation::Send,
                Some(Position::First),
                Extra::Plain
            ),
            None
        );
    }
}
