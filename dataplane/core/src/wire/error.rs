//! What is wrong with received bytes.
//!
//! Layer: wire. Owns [`ParseError`], which every parser of this layer
//! returns and which names the header or field at fault, so that the
//! pipeline can count a precise drop reason (`crate::drop` maps it; this
//! layer knows nothing of drops). It carries no packet bytes, never
//! allocates and never panics: a small `Copy` value, cheap to return on the
//! hot path.

use core::fmt;

use super::falcon::PacketType;

/// What is wrong with a packet a parser was given.
///
/// Parsers name the header or field in `what`, so a message reads
/// "truncated Falcon base header: need 24 bytes, have 9". The frame helper
/// ([`crate::wire::frame`]) adds the layer on top.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParseError {
    /// The buffer ends before the header or the length a field declares.
    Truncated {
        /// The header or region that does not fit.
        what: &'static str,
        /// Bytes needed, counted from the start of this header.
        need: usize,
        /// Bytes available, counted from the start of this header.
        have: usize,
    },
    /// The version field holds a value this parser does not speak (Falcon:
    /// must be 1; IPv4: 4; IPv6: 6).
    BadVersion(u8),
    /// A length field holds a value that is impossible on its own (an IPv4
    /// IHL below 5, a UDP length below 8, ...).
    InvalidLength {
        /// The length field.
        what: &'static str,
        /// Its value, in bytes.
        value: usize,
    },
    /// Two lengths that must agree do not (for example a Push Data request
    /// length and its payload size).
    LengthMismatch {
        /// The field that declares the length.
        what: &'static str,
        /// The length the field declares, in bytes.
        declared: usize,
        /// The length actually present, in bytes.
        actual: usize,
    },
    /// A checksum does not verify.
    BadChecksum(&'static str),
    /// An IPv4 fragment (MF set or a non-zero offset): Falcon never fragments
    /// and this dataplane does not reassemble.
    Fragmented,
    /// A typed parser was given a Falcon packet of another type.
    UnexpectedPacketType {
        /// The type the parser handles.
        expected: PacketType,
        /// The type in the packet.
        found: PacketType,
    },
    /// The Falcon packet type is reserved in rev 0.9, so its layout is unknown.
    UnknownPacketType(u8),
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ParseError::Truncated { what, need, have } => {
                write!(f, "truncated {what}: need {need} bytes, have {have}")
            }
            ParseError::BadVersion(version) => write!(f, "unsupported version {version}"),
            ParseError::InvalidLength { what, value } => write!(f, "invalid {what}: {value}"),
            ParseError::LengthMismatch {
                what,
                declared,
                actual,
            } => write!(f, "{what} is {declared} but {actual} bytes are present"),
            ParseError::BadChecksum(what) => write!(f, "bad {what} checksum"),
            ParseError::Fragmented => f.write_str("IPv4 fragment"),
            ParseError::UnexpectedPacketType { expected, found } => {
                write!(f, "expected packet type {expected}, found {found}")
            }
            ParseError::UnknownPacketType(code) => {
                write!(f, "reserved Falcon packet type {code:#06b}")
            }
        }
    }
}

impl std::error::Error for ParseError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_what_is_wrong() {
        let e = ParseError::Truncated {
            what: "Falcon base header",
            need: 24,
            have: 9,
        };
        assert_eq!(
            e.to_string(),
            "truncated Falcon base header: need 24 bytes, have 9"
        );
        let e = ParseError::LengthMismatch {
            what: "Push Data request length",
            declared: 100,
            actual: 99,
        };
        assert_eq!(
            e.to_string(),
            "Push Data request length is 100 but 99 bytes are present"
        );
        assert_eq!(
            ParseError::UnknownPacketType(7).to_string(),
            "reserved Falcon packet type 0b0111"
        );
    }
}
