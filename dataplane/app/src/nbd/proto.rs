//! NBD wire format: the protocol's numbers and the fixed-size messages.
//!
//! Layer: wire. Owns every constant of the NBD protocol this server speaks
//! (NetworkBlockDevice `doc/proto.md`, cited below as "proto.md") and the
//! codecs of its fixed-size messages: zero-copy views with a private
//! `field` module and `Repr` values with `parse` / `emit`. No IO, and no
//! panic on any input after a length check.
//!
//! ```text
//!  handshake (server):  NBDMAGIC u64 | IHAVEOPT u64 | handshake flags u16
//!  handshake (client):  client flags u32
//!  option (client):     IHAVEOPT u64 | option u32 | length u32 | data
//!  option reply:        0x3e889045565a9 u64 | option u32 | type u32 | length u32 | data
//!  request:             0x25609513 u32 | flags u16 | type u16 | cookie u64 | offset u64 | length u32 | (write data)
//!  simple reply:        0x67446698 u32 | error u32 | cookie u64 | (read data)
//! ```
//!
//! Every field is big-endian (proto.md "Conventions").

use core::fmt;

/// Magic numbers (proto.md "Newstyle negotiation", "Fixed newstyle
/// negotiation", "Request message", "Simple reply message").
pub mod magic {
    /// ASCII `NBDMAGIC`, the server's first 8 bytes.
    pub const NBDMAGIC: u64 = 0x4e42_444d_4147_4943;
    /// ASCII `IHAVEOPT`: after `NBDMAGIC`, and before every option.
    pub const IHAVEOPT: u64 = 0x4948_4156_454f_5054;
    /// Before every option reply.
    pub const OPTION_REPLY: u64 = 0x0003_e889_0455_65a9;
    /// `NBD_REQUEST_MAGIC`.
    pub const REQUEST: u32 = 0x2560_9513;
    /// `NBD_SIMPLE_REPLY_MAGIC`.
    pub const SIMPLE_REPLY: u32 = 0x6744_6698;
}

/// Handshake flags the server sends (proto.md "Handshake flags").
pub mod handshake_flag {
    pub const FIXED_NEWSTYLE: u16 = 1 << 0;
    pub const NO_ZEROES: u16 = 1 << 1;
}

/// Client flags (proto.md "Client flags"): any other bit closes the
/// connection.
pub mod client_flag {
    pub const FIXED_NEWSTYLE: u32 = 1 << 0;
    pub const NO_ZEROES: u32 = 1 << 1;
    pub const KNOWN: u32 = FIXED_NEWSTYLE | NO_ZEROES;
}

/// Option types (proto.md "Option types").
pub mod opt {
    pub const EXPORT_NAME: u32 = 1;
    pub const ABORT: u32 = 2;
    pub const LIST: u32 = 3;
    pub const STARTTLS: u32 = 5;
    pub const INFO: u32 = 6;
    pub const GO: u32 = 7;
    pub const STRUCTURED_REPLY: u32 = 8;
    pub const LIST_META_CONTEXT: u32 = 9;
    pub const SET_META_CONTEXT: u32 = 10;
    pub const EXTENDED_HEADERS: u32 = 11;
}

/// Option reply types (proto.md "Option reply types"); errors have bit 31.
pub mod rep {
    pub const ACK: u32 = 1;
    pub const SERVER: u32 = 2;
    pub const INFO: u32 = 3;
    pub const ERR_UNSUP: u32 = (1 << 31) + 1;
    pub const ERR_POLICY: u32 = (1 << 31) + 2;
    pub const ERR_INVALID: u32 = (1 << 31) + 3;
    pub const ERR_PLATFORM: u32 = (1 << 31) + 4;
    pub const ERR_TLS_REQD: u32 = (1 << 31) + 5;
    pub const ERR_UNKNOWN: u32 = (1 << 31) + 6;
    pub const ERR_SHUTDOWN: u32 = (1 << 31) + 7;
    pub const ERR_BLOCK_SIZE_REQD: u32 = (1 << 31) + 8;
    pub const ERR_TOO_BIG: u32 = (1 << 31) + 9;
}

/// Information types of `NBD_REP_INFO` (proto.md "Option reply types").
pub mod info {
    pub const EXPORT: u16 = 0;
    pub const NAME: u16 = 1;
    pub const DESCRIPTION: u16 = 2;
    pub const BLOCK_SIZE: u16 = 3;
}

/// Transmission flags (proto.md "Transmission flags").
pub mod tx_flag {
    pub const HAS_FLAGS: u16 = 1 << 0;
    pub const READ_ONLY: u16 = 1 << 1;
    pub const SEND_FLUSH: u16 = 1 << 2;
    pub const SEND_FUA: u16 = 1 << 3;
    pub const ROTATIONAL: u16 = 1 << 4;
    pub const SEND_TRIM: u16 = 1 << 5;
    pub const SEND_WRITE_ZEROES: u16 = 1 << 6;
    pub const SEND_DF: u16 = 1 << 7;
    pub const CAN_MULTI_CONN: u16 = 1 << 8;
    pub const SEND_CACHE: u16 = 1 << 10;
    pub const SEND_FAST_ZERO: u16 = 1 << 11;
}

/// Request types (proto.md "Request types").
pub mod cmd {
    pub const READ: u16 = 0;
    pub const WRITE: u16 = 1;
    pub const DISC: u16 = 2;
    pub const FLUSH: u16 = 3;
    pub const TRIM: u16 = 4;
    pub const CACHE: u16 = 5;
    pub const WRITE_ZEROES: u16 = 6;
    pub const BLOCK_STATUS: u16 = 7;
}

/// Command flags (proto.md "Command flags").
pub mod cmd_flag {
    pub const FUA: u16 = 1 << 0;
    pub const NO_HOLE: u16 = 1 << 1;
    pub const DF: u16 = 1 << 2;
    pub const REQ_ONE: u16 = 1 << 3;
    pub const FAST_ZERO: u16 = 1 << 4;
}

/// Error values of a reply (proto.md "Error values").
pub mod errno {
    pub const EPERM: u32 = 1;
    pub const EIO: u32 = 5;
    pub const ENOMEM: u32 = 12;
    pub const EINVAL: u32 = 22;
    pub const ENOSPC: u32 = 28;
    pub const EOVERFLOW: u32 = 75;
    pub const ENOTSUP: u32 = 95;
    pub const ESHUTDOWN: u32 = 108;
}

/// proto.md "Size constraints": a payload up to 2^25 bytes "SHOULD NOT be
/// considered a denial of service attack"; a longer write closes the
/// connection, and no backend may advertise a larger maximum.
pub const MAX_PAYLOAD: u32 = 1 << 25;

/// proto.md "Conventions": a string "MUST be no longer than 4096 bytes".
pub const MAX_STRING: usize = 4096;

/// Length of the server's first message (`NBDMAGIC`, `IHAVEOPT`, flags).
pub const GREETING_LEN: usize = 18;
/// Length of the reply to `NBD_OPT_EXPORT_NAME` without its zero padding.
pub const EXPORT_NAME_REPLY_LEN: usize = 10;
/// The zero padding after it unless both sides set `NO_ZEROES`.
pub const EXPORT_NAME_ZEROES: usize = 124;

/// A message that does not parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParseError {
    /// Fewer bytes than the message's fixed length.
    Truncated {
        what: &'static str,
        need: usize,
        have: usize,
    },
    /// The magic number is not the one the message must start with.
    BadMagic { what: &'static str, found: u64 },
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseError::Truncated { what, need, have } => {
                write!(f, "{what}: {have} bytes, need {need}")
            }
            ParseError::BadMagic { what, found } => write!(f, "{what}: bad magic {found:#x}"),
        }
    }
}

impl std::error::Error for ParseError {}

fn read_u16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}

fn read_u32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

fn read_u64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}

fn check(what: &'static str, have: usize, need: usize) -> Result<(), ParseError> {
    if have < need {
        return Err(ParseError::Truncated { what, need, have });
    }
    Ok(())
}

/// The server's greeting: `NBDMAGIC`, `IHAVEOPT`, the handshake flags.
pub fn emit_greeting(flags: u16) -> [u8; GREETING_LEN] {
    let mut b = [0u8; GREETING_LEN];
    b[0..8].copy_from_slice(&magic::NBDMAGIC.to_be_bytes());
    b[8..16].copy_from_slice(&magic::IHAVEOPT.to_be_bytes());
    b[16..18].copy_from_slice(&flags.to_be_bytes());
    b
}

/// The request header, a zero-copy view (proto.md "Request message").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request<T: AsRef<[u8]>> {
    buffer: T,
}

mod request_field {
    use core::ops::Range;

    pub(super) const MAGIC: Range<usize> = 0..4;
    pub(super) const FLAGS: Range<usize> = 4..6;
    pub(super) const TYPE: Range<usize> = 6..8;
    pub(super) const COOKIE: Range<usize> = 8..16;
    pub(super) const OFFSET: Range<usize> = 16..24;
    pub(super) const LENGTH: Range<usize> = 24..28;
}

/// Length of a request header (the write data follows it).
pub const REQUEST_LEN: usize = request_field::LENGTH.end;

impl<T: AsRef<[u8]>> Request<T> {
    /// Wraps a buffer and checks its length.
    ///
    /// # Errors
    ///
    /// [`ParseError::Truncated`] below 28 bytes.
    pub fn new_checked(buffer: T) -> Result<Self, ParseError> {
        check("NBD request", buffer.as_ref().len(), REQUEST_LEN)?;
        Ok(Request { buffer })
    }

    pub fn magic(&self) -> u32 {
        read_u32(&self.buffer.as_ref()[request_field::MAGIC])
    }
    pub fn flags(&self) -> u16 {
        read_u16(&self.buffer.as_ref()[request_field::FLAGS])
    }
    pub fn kind(&self) -> u16 {
        read_u16(&self.buffer.as_ref()[request_field::TYPE])
    }
    pub fn cookie(&self) -> u64 {
        read_u64(&self.buffer.as_ref()[request_field::COOKIE])
    }
    pub fn offset(&self) -> u64 {
        read_u64(&self.buffer.as_ref()[request_field::OFFSET])
    }
    pub fn length(&self) -> u32 {
        read_u32(&self.buffer.as_ref()[request_field::LENGTH])
    }
}

/// A request header as values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestRepr {
    /// Command flags ([`cmd_flag`]).
    pub flags: u16,
    /// Request type ([`cmd`]).
    pub kind: u16,
    /// The client's opaque cookie, echoed in the reply.
    pub cookie: u64,
    /// Byte offset into the export.
    pub offset: u64,
    /// Bytes to read, write, trim or zero.
    pub length: u32,
}

impl RequestRepr {
    /// Reads a request header.
    ///
    /// # Errors
    ///
    /// [`ParseError::BadMagic`] unless it starts with `NBD_REQUEST_MAGIC`.
    pub fn parse<T: AsRef<[u8]>>(request: &Request<T>) -> Result<Self, ParseError> {
        if request.magic() != magic::REQUEST {
            return Err(ParseError::BadMagic {
                what: "NBD request",
                found: u64::from(request.magic()),
            });
        }
        Ok(RequestRepr {
            flags: request.flags(),
            kind: request.kind(),
            cookie: request.cookie(),
            offset: request.offset(),
            length: request.length(),
        })
    }

    /// The 28-byte header.
    pub fn emit(&self) -> [u8; REQUEST_LEN] {
        let mut b = [0u8; REQUEST_LEN];
        b[request_field::MAGIC].copy_from_slice(&magic::REQUEST.to_be_bytes());
        b[request_field::FLAGS].copy_from_slice(&self.flags.to_be_bytes());
        b[request_field::TYPE].copy_from_slice(&self.kind.to_be_bytes());
        b[request_field::COOKIE].copy_from_slice(&self.cookie.to_be_bytes());
        b[request_field::OFFSET].copy_from_slice(&self.offset.to_be_bytes());
        b[request_field::LENGTH].copy_from_slice(&self.length.to_be_bytes());
        b
    }
}

/// Length of a simple reply header (the read data follows it).
pub const SIMPLE_REPLY_LEN: usize = 16;

/// A simple reply header as values (proto.md "Simple reply message").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimpleReplyRepr {
    /// 0, or an [`errno`] value.
    pub error: u32,
    /// The request's cookie.
    pub cookie: u64,
}

impl SimpleReplyRepr {
    /// Reads a simple reply header (the test clients' side).
    ///
    /// # Errors
    ///
    /// [`ParseError::Truncated`] below 16 bytes, [`ParseError::BadMagic`].
    pub fn parse(b: &[u8]) -> Result<Self, ParseError> {
        check("NBD simple reply", b.len(), SIMPLE_REPLY_LEN)?;
        let found = read_u32(&b[0..4]);
        if found != magic::SIMPLE_REPLY {
            return Err(ParseError::BadMagic {
                what: "NBD simple reply",
                found: u64::from(found),
            });
        }
        Ok(SimpleReplyRepr {
            error: read_u32(&b[4..8]),
            cookie: read_u64(&b[8..16]),
        })
    }

    /// The 16-byte header.
    pub fn emit(&self) -> [u8; SIMPLE_REPLY_LEN] {
        let mut b = [0u8; SIMPLE_REPLY_LEN];
        b[0..4].copy_from_slice(&magic::SIMPLE_REPLY.to_be_bytes());
        b[4..8].copy_from_slice(&self.error.to_be_bytes());
        b[8..16].copy_from_slice(&self.cookie.to_be_bytes());
        b
    }
}

/// Length of an option header (its data follows it).
pub const OPTION_LEN: usize = 16;

/// An option header as values (proto.md "Newstyle negotiation").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptionRepr {
    /// Option type ([`opt`]).
    pub option: u32,
    /// Length of the option's data.
    pub length: u32,
}

impl OptionRepr {
    /// Reads an option header.
    ///
    /// # Errors
    ///
    /// [`ParseError::Truncated`] below 16 bytes, [`ParseError::BadMagic`]
    /// unless it starts with `IHAVEOPT`.
    pub fn parse(b: &[u8]) -> Result<Self, ParseError> {
        check("NBD option", b.len(), OPTION_LEN)?;
        let found = read_u64(&b[0..8]);
        if found != magic::IHAVEOPT {
            return Err(ParseError::BadMagic {
                what: "NBD option",
                found,
            });
        }
        Ok(OptionRepr {
            option: read_u32(&b[8..12]),
            length: read_u32(&b[12..16]),
        })
    }

    /// The 16-byte header (the test clients' side).
    pub fn emit(&self) -> [u8; OPTION_LEN] {
        let mut b = [0u8; OPTION_LEN];
        b[0..8].copy_from_slice(&magic::IHAVEOPT.to_be_bytes());
        b[8..12].copy_from_slice(&self.option.to_be_bytes());
        b[12..16].copy_from_slice(&self.length.to_be_bytes());
        b
    }
}

/// Length of an option reply header (its data follows it).
pub const OPTION_REPLY_LEN: usize = 20;

/// An option reply header as values (proto.md "Fixed newstyle
/// negotiation").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptionReplyRepr {
    /// The option this answers.
    pub option: u32,
    /// Reply type ([`rep`]).
    pub reply: u32,
    /// Length of the reply's data.
    pub length: u32,
}

impl OptionReplyRepr {
    /// Reads an option reply header (the test clients' side).
    ///
    /// # Errors
    ///
    /// [`ParseError::Truncated`] below 20 bytes, [`ParseError::BadMagic`].
    pub fn parse(b: &[u8]) -> Result<Self, ParseError> {
        check("NBD option reply", b.len(), OPTION_REPLY_LEN)?;
        let found = read_u64(&b[0..8]);
        if found != magic::OPTION_REPLY {
            return Err(ParseError::BadMagic {
                what: "NBD option reply",
                found,
            });
        }
        Ok(OptionReplyRepr {
            option: read_u32(&b[8..12]),
            reply: read_u32(&b[12..16]),
            length: read_u32(&b[16..20]),
        })
    }

    /// The 20-byte header.
    pub fn emit(&self) -> [u8; OPTION_REPLY_LEN] {
        let mut b = [0u8; OPTION_REPLY_LEN];
        b[0..8].copy_from_slice(&magic::OPTION_REPLY.to_be_bytes());
        b[8..12].copy_from_slice(&self.option.to_be_bytes());
        b[12..16].copy_from_slice(&self.reply.to_be_bytes());
        b[16..20].copy_from_slice(&self.length.to_be_bytes());
        b
    }
}

/// The data of `NBD_OPT_INFO` and `NBD_OPT_GO` (proto.md "Option
/// types"): an export name and the information requested.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InfoRequest {
    /// The export name as sent (empty: the default export).
    pub name: Vec<u8>,
    /// Information types requested ([`info`]), unknown ones included.
    pub requests: Vec<u16>,
}

impl InfoRequest {
    /// Reads the option's data.
    ///
    /// # Errors
    ///
    /// A short reason when the lengths inside do not add up to the data's
    /// length (answered `NBD_REP_ERR_INVALID`).
    pub fn parse(data: &[u8]) -> Result<Self, &'static str> {
        // 32-bit name length, name, 16-bit count, 16 bits per request.
        if data.len() < 6 {
            return Err("shorter than 6 bytes");
        }
        let name_len = read_u32(&data[0..4]) as usize;
        if name_len > data.len() - 6 {
            return Err("name length beyond the option data");
        }
        if name_len > MAX_STRING {
            return Err("export name longer than 4096 bytes");
        }
        let name = data[4..4 + name_len].to_vec();
        let rest = &data[4 + name_len..];
        let count = usize::from(read_u16(&rest[0..2]));
        let list = &rest[2..];
        if list.len() != 2 * count {
            return Err("information request count does not match the option length");
        }
        let requests = list.chunks_exact(2).map(read_u16).collect();
        Ok(InfoRequest { name, requests })
    }

    /// The option's data (the test clients' side).
    pub fn emit(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(6 + self.name.len() + 2 * self.requests.len());
        b.extend_from_slice(&(self.name.len() as u32).to_be_bytes());
        b.extend_from_slice(&self.name);
        b.extend_from_slice(&(self.requests.len() as u16).to_be_bytes());
        for r in &self.requests {
            b.extend_from_slice(&r.to_be_bytes());
        }
        b
    }
}

/// `NBD_INFO_EXPORT`'s payload: type, size, transmission flags.
pub fn emit_info_export(size: u64, flags: u16) -> [u8; 12] {
    let mut b = [0u8; 12];
    b[0..2].copy_from_slice(&info::EXPORT.to_be_bytes());
    b[2..10].copy_from_slice(&size.to_be_bytes());
    b[10..12].copy_from_slice(&flags.to_be_bytes());
    b
}

/// `NBD_INFO_BLOCK_SIZE`'s payload: type, minimum, preferred, maximum.
pub fn emit_info_block_size(minimum: u32, preferred: u32, maximum: u32) -> [u8; 14] {
    let mut b = [0u8; 14];
    b[0..2].copy_from_slice(&info::BLOCK_SIZE.to_be_bytes());
    b[2..6].copy_from_slice(&minimum.to_be_bytes());
    b[6..10].copy_from_slice(&preferred.to_be_bytes());
    b[10..14].copy_from_slice(&maximum.to_be_bytes());
    b
}

/// The name of an option type, for logs and error messages.
pub fn option_name(option: u32) -> &'static str {
    match option {
        opt::EXPORT_NAME => "NBD_OPT_EXPORT_NAME",
        opt::ABORT => "NBD_OPT_ABORT",
        opt::LIST => "NBD_OPT_LIST",
        opt::STARTTLS => "NBD_OPT_STARTTLS",
        opt::INFO => "NBD_OPT_INFO",
        opt::GO => "NBD_OPT_GO",
        opt::STRUCTURED_REPLY => "NBD_OPT_STRUCTURED_REPLY",
        opt::LIST_META_CONTEXT => "NBD_OPT_LIST_META_CONTEXT",
        opt::SET_META_CONTEXT => "NBD_OPT_SET_META_CONTEXT",
        opt::EXTENDED_HEADERS => "NBD_OPT_EXTENDED_HEADERS",
        _ => "an unknown option",
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn request_round_trip() {
        let repr = RequestRepr {
            flags: cmd_flag::FUA,
            kind: cmd::WRITE,
            cookie: 0x0102_0304_0506_0708,
            offset: 1 << 40,
            length: 4096,
        };
        let bytes = repr.emit();
        assert_eq!(&bytes[0..4], &[0x25, 0x60, 0x95, 0x13]);
        let view = Request::new_checked(&bytes[..]).unwrap();
        assert_eq!(RequestRepr::parse(&view), Ok(repr));
    }

    #[test]
    fn request_bad_magic_and_short() {
        let mut bytes = RequestRepr {
            flags: 0,
            kind: cmd::READ,
            cookie: 1,
            offset: 0,
            length: 1,
        }
        .emit();
        bytes[0] ^= 1;
        let view = Request::new_checked(&bytes[..]).unwrap();
        assert!(matches!(
            RequestRepr::parse(&view),
            Err(ParseError::BadMagic { .. })
        ));
        assert!(matches!(
            Request::new_checked(&bytes[..27]),
            Err(ParseError::Truncated { need: 28, .. })
        ));
    }

    #[test]
    fn replies_and_options_round_trip() {
        let r = SimpleReplyRepr {
            error: errno::EINVAL,
            cookie: 7,
        };
        assert_eq!(SimpleReplyRepr::parse(&r.emit()), Ok(r));
        let o = OptionRepr {
            option: opt::GO,
            length: 12,
        };
        assert_eq!(OptionRepr::parse(&o.emit()), Ok(o));
        let p = OptionReplyRepr {
            option: opt::GO,
            reply: rep::ERR_UNSUP,
            length: 0,
        };
        assert_eq!(OptionReplyRepr::parse(&p.emit()), Ok(p));
        assert_eq!(&emit_greeting(3)[0..8], b"NBDMAGIC");
        assert_eq!(&emit_greeting(3)[8..16], b"IHAVEOPT");
    }

    #[test]
    fn info_request_lengths_must_add_up() {
        let good = InfoRequest {
            name: b"disk".to_vec(),
            requests: vec![info::BLOCK_SIZE, info::NAME],
        };
        assert_eq!(InfoRequest::parse(&good.emit()), Ok(good.clone()));
        let mut long = good.emit();
        long.push(0);
        assert!(InfoRequest::parse(&long).is_err());
        let mut bad_name = good.emit();
        bad_name[3] = 200;
        assert!(InfoRequest::parse(&bad_name).is_err());
        assert!(InfoRequest::parse(&[0, 0, 0, 0, 0]).is_err());
    }

    proptest! {
        /// Every parser on arbitrary bytes: an answer, never a panic.
        #[test]
        fn parsers_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            if let Ok(view) = Request::new_checked(&bytes[..]) {
                let _ = RequestRepr::parse(&view);
            }
            let _ = SimpleReplyRepr::parse(&bytes);
            let _ = OptionRepr::parse(&bytes);
            let _ = OptionReplyRepr::parse(&bytes);
            let _ = InfoRequest::parse(&bytes);
        }

        #[test]
        fn request_emit_parse(flags: u16, kind: u16, cookie: u64, offset: u64, length: u32) {
            let repr = RequestRepr { flags, kind, cookie, offset, length };
            let bytes = repr.emit();
            prop_assert_eq!(RequestRepr::parse(&Request::new_checked(&bytes[..]).unwrap()), Ok(repr));
        }
    }
}
