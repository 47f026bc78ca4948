//! The NBD handshake, server side: fixed newstyle negotiation.
//!
//! Layer: gateway protocol. Owns option haggling from the greeting to the
//! transmission phase (or to the end of the session). Reads the client
//! through a `BufRead` (the same buffer the transmission phase reads on,
//! so nothing the client pipelined is lost) and writes each option's
//! replies in one piece. Never panics on client input: every length is
//! checked before it is used, and a violation ends the session with a
//! named [`CloseReason`].
//!
//! proto.md "Fixed newstyle negotiation": the server offers
//! `NBD_FLAG_FIXED_NEWSTYLE | NBD_FLAG_NO_ZEROES`; it answers
//! `NBD_OPT_EXPORT_NAME`, `NBD_OPT_GO`, `NBD_OPT_INFO` (`NBD_INFO_EXPORT`,
//! `NBD_INFO_BLOCK_SIZE`, `NBD_INFO_NAME`, `NBD_INFO_DESCRIPTION`),
//! `NBD_OPT_LIST` and `NBD_OPT_ABORT`, and every other option with
//! `NBD_REP_ERR_UNSUP` — structured replies included: the transmission
//! phase sends simple replies only.

use std::io::{self, BufRead, Write};

use super::backend::Geometry;
use super::proto::{
    self, client_flag, emit_greeting, emit_info_block_size, emit_info_export, handshake_flag, info,
    opt, rep, InfoRequest, OptionReplyRepr, OptionRepr, EXPORT_NAME_ZEROES, OPTION_LEN,
};
use super::stats::CloseReason;

/// Largest option data the server reads: an `NBD_OPT_GO` with a
/// 4096-byte name and every information type fits many times over.
pub const MAX_OPTION_DATA: u32 = 1 << 20;

/// The one export this server offers.
#[derive(Debug, Clone)]
pub struct Export {
    /// Its name; the empty name (the default export) also selects it.
    pub name: String,
    /// Shown by `NBD_OPT_LIST` and `NBD_INFO_DESCRIPTION`.
    pub description: String,
    pub geometry: Geometry,
}

impl Export {
    fn matches(&self, name: &[u8]) -> bool {
        name.is_empty() || name == self.name.as_bytes()
    }
}

/// How the negotiation ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The client chose the export: the transmission phase starts.
    Transmission,
    /// The client ended the session (`NBD_OPT_ABORT`, or it closed).
    ClientEnded,
    /// The server ended the session on a protocol violation.
    Closed(CloseReason, String),
}

/// Runs the negotiation on a freshly accepted connection.
///
/// # Errors
///
/// An IO error other than end-of-file (which is [`Outcome::ClientEnded`])
/// or a read timeout (which is [`CloseReason::HandshakeTimeout`]).
pub fn negotiate<R: BufRead, W: Write>(
    reader: &mut R,
    writer: &mut W,
    export: &Export,
) -> io::Result<Outcome> {
    match run(reader, writer, export) {
        Ok(outcome) => Ok(outcome),
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(Outcome::ClientEnded),
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ) =>
        {
            Ok(Outcome::Closed(
                CloseReason::HandshakeTimeout,
                "no option in time".into(),
            ))
        }
        Err(e) => Err(e),
    }
}

fn run<R: BufRead, W: Write>(
    reader: &mut R,
    writer: &mut W,
    export: &Export,
) -> io::Result<Outcome> {
    let offered = handshake_flag::FIXED_NEWSTYLE | handshake_flag::NO_ZEROES;
    writer.write_all(&emit_greeting(offered))?;
    writer.flush()?;
    let mut flags = [0u8; 4];
    reader.read_exact(&mut flags)?;
    let flags = u32::from_be_bytes(flags);
    // proto.md "Client flags": the server MUST drop the connection on an
    // unknown flag.
    if flags & !client_flag::KNOWN != 0 {
        return Ok(Outcome::Closed(
            CloseReason::BadClientFlags,
            format!("client flags {flags:#x}"),
        ));
    }
    let no_zeroes = flags & client_flag::NO_ZEROES != 0;
    let g = export.geometry;
    let tx_flags = g.caps.transmission_flags();
    loop {
        let mut header = [0u8; OPTION_LEN];
        reader.read_exact(&mut header)?;
        let option = match OptionRepr::parse(&header) {
            Ok(o) => o,
            Err(e) => return Ok(Outcome::Closed(CloseReason::BadOptionMagic, e.to_string())),
        };
        if option.length > MAX_OPTION_DATA {
            return Ok(Outcome::Closed(
                CloseReason::OptionTooLong,
                format!(
                    "{} with {} bytes of data",
                    proto::option_name(option.option),
                    option.length
                ),
            ));
        }
        let mut data = vec![0u8; option.length as usize];
        reader.read_exact(&mut data)?;
        let mut out = Replies::new(option.option);
        match option.option {
            opt::EXPORT_NAME => {
                // proto.md: an export that cannot be served MUST end the
                // session (this option has no error reply).
                if !export.matches(&data) {
                    return Ok(Outcome::Closed(
                        CloseReason::UnknownExport,
                        format!("NBD_OPT_EXPORT_NAME {:?}", String::from_utf8_lossy(&data)),
                    ));
                }
                let mut reply = Vec::with_capacity(10 + EXPORT_NAME_ZEROES);
                reply.extend_from_slice(&g.size.to_be_bytes());
                reply.extend_from_slice(&tx_flags.to_be_bytes());
                if !no_zeroes {
                    reply.extend_from_slice(&[0u8; EXPORT_NAME_ZEROES]);
                }
                writer.write_all(&reply)?;
                writer.flush()?;
                return Ok(Outcome::Transmission);
            }
            opt::ABORT => {
                // proto.md: the server MUST reply NBD_REP_ACK; the client
                // may have closed already, which ends the session as well.
                out.push(rep::ACK, &[]);
                let _ = out.send(writer);
                return Ok(Outcome::ClientEnded);
            }
            opt::LIST if !data.is_empty() => {
                out.error(rep::ERR_INVALID, "NBD_OPT_LIST carries no data");
            }
            opt::LIST => {
                let mut server = Vec::with_capacity(4 + export.name.len());
                server.extend_from_slice(&(export.name.len() as u32).to_be_bytes());
                server.extend_from_slice(export.name.as_bytes());
                server.extend_from_slice(export.description.as_bytes());
                out.push(rep::SERVER, &server);
                out.push(rep::ACK, &[]);
            }
            opt::INFO | opt::GO => match InfoRequest::parse(&data) {
                Err(why) => out.error(rep::ERR_INVALID, why),
                Ok(request) if !export.matches(&request.name) => out.error(
                    rep::ERR_UNKNOWN,
                    &format!(
                        "no export named {:?} (this server has {:?})",
                        String::from_utf8_lossy(&request.name),
                        export.name
                    ),
                ),
                Ok(request) => {
                    out.push(rep::INFO, &emit_info_export(g.size, tx_flags));
                    // Sent whether asked for or not (proto.md allows it):
                    // a backend with a minimum block size above 1 needs
                    // the client to know it.
                    out.push(
                        rep::INFO,
                        &emit_info_block_size(g.block.minimum, g.block.preferred, g.block.maximum),
                    );
                    if request.requests.contains(&info::NAME) {
                        out.push(rep::INFO, &info_string(info::NAME, &export.name));
                    }
                    if request.requests.contains(&info::DESCRIPTION)
                        && !export.description.is_empty()
                    {
                        out.push(
                            rep::INFO,
                            &info_string(info::DESCRIPTION, &export.description),
                        );
                    }
                    out.push(rep::ACK, &[]);
                    if option.option == opt::GO {
                        out.send(writer)?;
                        return Ok(Outcome::Transmission);
                    }
                }
            },
            opt::STRUCTURED_REPLY => out.error(
                rep::ERR_UNSUP,
                "structured replies are not supported: this server sends simple replies",
            ),
            other => out.error(
                rep::ERR_UNSUP,
                &format!("{} ({other}) is not supported", proto::option_name(other)),
            ),
        }
        out.send(writer)?;
    }
}

/// `NBD_INFO_NAME` / `NBD_INFO_DESCRIPTION`: type, then the string.
fn info_string(kind: u16, text: &str) -> Vec<u8> {
    let mut b = Vec::with_capacity(2 + text.len());
    b.extend_from_slice(&kind.to_be_bytes());
    b.extend_from_slice(text.as_bytes());
    b
}

/// The replies to one option, written together.
struct Replies {
    option: u32,
    bytes: Vec<u8>,
}

impl Replies {
    fn new(option: u32) -> Self {
        Replies {
            option,
            bytes: Vec::with_capacity(64),
        }
    }

    fn push(&mut self, reply: u32, data: &[u8]) {
        let header = OptionReplyRepr {
            option: self.option,
            reply,
            length: data.len() as u32,
        };
        self.bytes.extend_from_slice(&header.emit());
        self.bytes.extend_from_slice(data);
    }

    /// An error reply; its data is a message for a human (proto.md
    /// "Option reply types").
    fn error(&mut self, reply: u32, message: &str) {
        self.push(reply, message.as_bytes());
    }

    fn send<W: Write>(self, writer: &mut W) -> io::Result<()> {
        writer.write_all(&self.bytes)?;
        writer.flush()
    }
}

#[cfg(test)]
mod tests {
    use std::io::{BufReader, Read};
    use std::os::unix::net::UnixStream;
    use std::thread;

    use super::*;
    use crate::nbd::backend::{BlockSize, Capabilities};
    use crate::nbd::proto::{magic, OPTION_REPLY_LEN};

    fn export() -> Export {
        Export {
            name: "disk".into(),
            description: "a test disk".into(),
            geometry: Geometry {
                size: 1 << 20,
                block: BlockSize::DEFAULT,
                caps: Capabilities {
                    flush: true,
                    ..Capabilities::default()
                },
            },
        }
    }

    /// Runs the server side on a socket pair; returns the client end and
    /// the server's outcome to come.
    fn serve() -> (UnixStream, thread::JoinHandle<io::Result<Outcome>>) {
        let (client, server) = UnixStream::pair().unwrap();
        let handle = thread::spawn(move || {
            let mut reader = BufReader::new(server.try_clone().unwrap());
            let mut writer = server;
            negotiate(&mut reader, &mut writer, &export())
        });
        (client, handle)
    }

    fn greet(c: &mut UnixStream, flags: u32) {
        let mut g = [0u8; 18];
        c.read_exact(&mut g).unwrap();
        assert_eq!(
            u64::from_be_bytes(g[0..8].try_into().unwrap()),
            magic::NBDMAGIC
        );
        assert_eq!(
            u64::from_be_bytes(g[8..16].try_into().unwrap()),
            magic::IHAVEOPT
        );
        assert_eq!(u16::from_be_bytes([g[16], g[17]]), 3);
        c.write_all(&flags.to_be_bytes()).unwrap();
    }

    fn send_option(c: &mut UnixStream, option: u32, data: &[u8]) {
        let h = OptionRepr {
            option,
            length: data.len() as u32,
        };
        c.write_all(&h.emit()).unwrap();
        c.write_all(data).unwrap();
    }

    fn read_reply(c: &mut UnixStream) -> (OptionReplyRepr, Vec<u8>) {
        let mut h = [0u8; OPTION_REPLY_LEN];
        c.read_exact(&mut h).unwrap();
        let r = OptionReplyRepr::parse(&h).unwrap();
        let mut data = vec![0u8; r.length as usize];
        c.read_exact(&mut data).unwrap();
        (r, data)
    }

    #[test]
    fn go_answers_export_and_block_size_then_ack() {
        let (mut c, server) = serve();
        greet(&mut c, 3);
        let go = InfoRequest {
            name: b"disk".to_vec(),
            requests: vec![info::BLOCK_SIZE, info::NAME, 999],
        };
        send_option(&mut c, opt::GO, &go.emit());
        let mut infos = Vec::new();
        loop {
            let (r, data) = read_reply(&mut c);
            assert_eq!(r.option, opt::GO);
            if r.reply == rep::ACK {
                break;
            }
            assert_eq!(r.reply, rep::INFO);
            infos.push(data);
        }
        let export_info = &infos[0];
        assert_eq!(
            u16::from_be_bytes([export_info[0], export_info[1]]),
            info::EXPORT
        );
        assert_eq!(
            u64::from_be_bytes(export_info[2..10].try_into().unwrap()),
            1 << 20
        );
        assert_eq!(
            u16::from_be_bytes([export_info[10], export_info[11]]),
            0b101
        );
        let block = &infos[1];
        assert_eq!(block.len(), 14);
        assert_eq!(u32::from_be_bytes(block[2..6].try_into().unwrap()), 1);
        assert_eq!(u32::from_be_bytes(block[6..10].try_into().unwrap()), 4096);
        assert_eq!(
            u32::from_be_bytes(block[10..14].try_into().unwrap()),
            1 << 25
        );
        assert_eq!(&infos[2][2..], b"disk");
        assert_eq!(infos.len(), 3, "the unknown information type is ignored");
        assert_eq!(server.join().unwrap().unwrap(), Outcome::Transmission);
    }

    #[test]
    fn unknown_options_list_info_errors_then_export_name() {
        let (mut c, server) = serve();
        greet(&mut c, 1); // zeroes wanted
        send_option(&mut c, 0xdead, b"whatever");
        let (r, msg) = read_reply(&mut c);
        assert_eq!((r.option, r.reply), (0xdead, rep::ERR_UNSUP));
        assert!(String::from_utf8_lossy(&msg).contains("not supported"));
        send_option(&mut c, opt::STRUCTURED_REPLY, &[]);
        assert_eq!(read_reply(&mut c).0.reply, rep::ERR_UNSUP);
        send_option(&mut c, opt::STARTTLS, &[]);
        assert_eq!(read_reply(&mut c).0.reply, rep::ERR_UNSUP);
        send_option(&mut c, opt::LIST, &[]);
        let (r, data) = read_reply(&mut c);
        assert_eq!(r.reply, rep::SERVER);
        assert_eq!(u32::from_be_bytes(data[0..4].try_into().unwrap()), 4);
        assert_eq!(&data[4..8], b"disk");
        assert_eq!(read_reply(&mut c).0.reply, rep::ACK);
        send_option(&mut c, opt::LIST, b"x");
        assert_eq!(read_reply(&mut c).0.reply, rep::ERR_INVALID);
        let info = InfoRequest {
            name: b"other".to_vec(),
            requests: vec![],
        };
        send_option(&mut c, opt::INFO, &info.emit());
        assert_eq!(read_reply(&mut c).0.reply, rep::ERR_UNKNOWN);
        send_option(&mut c, opt::INFO, &[0, 0, 0, 9, 0, 0]);
        assert_eq!(read_reply(&mut c).0.reply, rep::ERR_INVALID);
        // NBD_OPT_INFO succeeds without leaving negotiation.
        let info = InfoRequest {
            name: Vec::new(),
            requests: vec![info::DESCRIPTION],
        };
        send_option(&mut c, opt::INFO, &info.emit());
        let mut last = read_reply(&mut c);
        let mut saw_description = false;
        while last.0.reply != rep::ACK {
            saw_description |= last.1.starts_with(&info::DESCRIPTION.to_be_bytes());
            last = read_reply(&mut c);
        }
        assert!(saw_description);
        send_option(&mut c, opt::EXPORT_NAME, b"disk");
        let mut reply = [0u8; 10 + EXPORT_NAME_ZEROES];
        c.read_exact(&mut reply).unwrap();
        assert_eq!(u64::from_be_bytes(reply[0..8].try_into().unwrap()), 1 << 20);
        assert!(reply[10..].iter().all(|&b| b == 0));
        assert_eq!(server.join().unwrap().unwrap(), Outcome::Transmission);
    }

    #[test]
    fn export_name_without_zeroes_when_negotiated() {
        let (mut c, server) = serve();
        greet(&mut c, 3);
        send_option(&mut c, opt::EXPORT_NAME, b"");
        let mut reply = [0u8; 10];
        c.read_exact(&mut reply).unwrap();
        assert_eq!(server.join().unwrap().unwrap(), Outcome::Transmission);
        drop(c.shutdown(std::net::Shutdown::Write));
    }

    #[test]
    fn violations_close_with_a_named_reason() {
        let (mut c, server) = serve();
        greet(&mut c, 1 << 7);
        assert!(matches!(
            server.join().unwrap().unwrap(),
            Outcome::Closed(CloseReason::BadClientFlags, _)
        ));

        let (mut c, server) = serve();
        greet(&mut c, 1);
        c.write_all(&[0x55; OPTION_LEN]).unwrap();
        assert!(matches!(
            server.join().unwrap().unwrap(),
            Outcome::Closed(CloseReason::BadOptionMagic, _)
        ));

        let (mut c, server) = serve();
        greet(&mut c, 1);
        let h = OptionRepr {
            option: opt::GO,
            length: u32::MAX,
        };
        c.write_all(&h.emit()).unwrap();
        assert!(matches!(
            server.join().unwrap().unwrap(),
            Outcome::Closed(CloseReason::OptionTooLong, _)
        ));

        let (mut c, server) = serve();
        greet(&mut c, 1);
        send_option(&mut c, opt::EXPORT_NAME, b"nope");
        assert!(matches!(
            server.join().unwrap().unwrap(),
            Outcome::Closed(CloseReason::UnknownExport, _)
        ));
    }

    #[test]
    fn abort_is_acknowledged_and_eof_ends_quietly() {
        let (mut c, server) = serve();
        greet(&mut c, 1);
        send_option(&mut c, opt::ABORT, &[]);
        assert_eq!(read_reply(&mut c).0.reply, rep::ACK);
        assert_eq!(server.join().unwrap().unwrap(), Outcome::ClientEnded);

        let (mut c, server) = serve();
        greet(&mut c, 1);
        c.write_all(&[0x49, 0x48]).unwrap();
        drop(c);
        assert_eq!(server.join().unwrap().unwrap(), Outcome::ClientEnded);
    }
}
