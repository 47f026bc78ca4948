//! The NBD transmission phase: one connection's reader and its replies.
//!
//! Layer: gateway protocol. The reader (the connection's thread) parses
//! each request, checks it against the export's [`Geometry`] and hands it
//! to the [`Backend`] without waiting for the one before; completions,
//! from the backend on any thread, go into the connection's outbox ([`super::outbox`]),
//! which sends each simple reply with the request's cookie from the
//! completing thread (a writer thread beside the reader only finishes
//! sends the socket could not take at once), so replies go out in
//! completion order (proto.md "Ordering of messages and writes" allows
//! any order). A window bounds the requests and payload bytes in flight
//! per connection, so a client that does not read its replies cannot grow
//! the server's memory without end.
//!
//! Never panics on client input. A request the protocol lets the server
//! answer with an error is answered (`NBD_EINVAL`, `NBD_ENOSPC`,
//! `NBD_EPERM`); a request it cannot stay in step after (bad magic, a
//! write payload above 32 MiB, a truncated request) ends the connection
//! with a named [`CloseReason`].

use std::io::{self, BufRead, BufReader, Read};
use std::net::Shutdown;
use std::sync::Arc;

pub use super::outbox::{MAX_INFLIGHT_BYTES, MAX_INFLIGHT_REQUESTS};

use super::backend::{Backend, Completion, Geometry, Kind, Op, Reply, Request};
use super::outbox::{cost, Outbox};
use super::proto::{cmd, cmd_flag, errno, RequestRepr, MAX_PAYLOAD, REQUEST_LEN};
use super::stats::{CloseReason, Stats};
use super::stream::Stream;

/// How the transmission phase ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum End {
    /// `NBD_CMD_DISC`: every request before it was answered.
    Disconnect,
    /// End of file between requests (the client closed, or the server is
    /// stopping); every request read was answered.
    Eof,
    /// The server closed the connection on a protocol violation.
    Closed(CloseReason, String),
    /// The socket failed.
    Broken(String),
}

/// Serves requests on a connection whose handshake chose the export,
/// until one of the [`End`]s. Returns after every reply was written (or
/// the socket failed).
pub fn serve(
    mut reader: BufReader<Stream>,
    writer: Stream,
    backend: &Arc<dyn Backend>,
    geometry: Geometry,
    stats: &Arc<Stats>,
) -> End {
    let control = match writer.try_clone() {
        Ok(s) => s,
        Err(e) => return End::Broken(format!("cannot clone the socket: {e}")),
    };
    let outbox = Arc::new(Outbox::new(writer, Arc::clone(stats)));
    let writer_thread = {
        let outbox = Arc::clone(&outbox);
        std::thread::Builder::new()
            .name("nbd-writer".into())
            .spawn(move || outbox.run_writer())
    };
    let writer_thread = match writer_thread {
        Ok(t) => t,
        Err(e) => return End::Broken(format!("cannot start the writer thread: {e}")),
    };
    let end = read_requests(&mut reader, &outbox, backend, geometry);
    backend.unplug();
    if let End::Closed(..) = end {
        // A hard disconnect: replies still queued are not sent.
        control.shutdown(Shutdown::Both);
    }
    // The writer ends once every reply queued and every completion still
    // held by the backend has been sent.
    outbox.reader_done();
    match writer_thread.join() {
        Ok(Ok(())) => end,
        Ok(Err(e)) if matches!(end, End::Eof | End::Disconnect) => {
            End::Broken(format!("writing a reply: {e}"))
        }
        Ok(Err(_)) => end,
        Err(_) => End::Broken("the writer thread panicked".into()),
    }
}

/// The reader: parse, check, submit, until the connection ends. Replies
/// completed while it works through requests already in its buffer are
/// held in the outbox and sent together before it next waits (on the
/// socket or on the window).
fn read_requests(
    reader: &mut BufReader<Stream>,
    outbox: &Arc<Outbox>,
    backend: &Arc<dyn Backend>,
    geometry: Geometry,
) -> End {
    // Corked while working through requests already read: replies wait in
    // the outbox and requests in the (plugged) backend until the reader is
    // about to wait. Every reply queued and request submitted follows a
    // cork, so the uncork before the next wait sends and starts it.
    let mut corked = false;
    let cork = |corked: &mut bool| {
        if !*corked {
            outbox.cork();
            *corked = true;
        }
    };
    let uncork = |corked: &mut bool| {
        if *corked {
            outbox.uncork();
            backend.unplug();
            *corked = false;
        }
    };
    loop {
        let mut header = [0u8; REQUEST_LEN];
        if reader.buffer().len() < REQUEST_LEN {
            uncork(&mut corked);
        }
        match reader.fill_buf() {
            Ok([]) => return End::Eof,
            Ok(_) => {}
            Err(e) => return End::Broken(format!("reading a request: {e}")),
        }
        if let Err(e) = reader.read_exact(&mut header) {
            return truncated(e, "request header");
        }
        cork(&mut corked);
        let request = match super::proto::Request::new_checked(&header[..])
            .and_then(|view| RequestRepr::parse(&view))
        {
            Ok(r) => r,
            Err(e) => return End::Closed(CloseReason::BadRequestMagic, e.to_string()),
        };
        if request.kind == cmd::DISC {
            return End::Disconnect;
        }
        // proto.md "Size constraints": past 2^25 bytes a payload may be
        // taken for a denial of service; the server cannot skip it safely.
        if request.kind == cmd::WRITE && request.length > MAX_PAYLOAD {
            return End::Closed(
                CloseReason::OversizedPayload,
                format!("write of {} bytes", request.length),
            );
        }
        let verdict = check(&request, &geometry);
        let (kind, length) = match verdict {
            Ok(c) => (c.kind(), request.length),
            // A refused write still brings its payload, read and dropped.
            Err(_) if request.kind == cmd::WRITE => (Kind::Refused, request.length),
            Err(_) => (Kind::Refused, 0),
        };
        let window = outbox.window();
        if !window.try_acquire(cost(kind, length)) {
            // Room comes back only as replies are sent.
            uncork(&mut corked);
            if !window.acquire(cost(kind, length)) {
                // The socket failed: nobody reads the replies any more.
                return End::Broken("the writer stopped".into());
            }
            cork(&mut corked);
        }
        let payload = if request.kind == cmd::WRITE {
            let mut data = vec![0u8; request.length as usize];
            if reader.buffer().len() < data.len() {
                uncork(&mut corked);
            }
            if let Err(e) = reader.read_exact(&mut data) {
                window.release(cost(kind, length));
                return truncated(e, "write payload");
            }
            cork(&mut corked);
            data
        } else {
            Vec::new()
        };
        let checked = match verdict {
            Ok(c) => c,
            Err(error) => {
                outbox.queue(&Reply {
                    cookie: request.cookie,
                    kind: Kind::Refused,
                    length,
                    error,
                    data: Vec::new(),
                });
                continue;
            }
        };
        // proto.md leaves zero-length requests to the server: answered
        // here, so no backend sees one.
        if request.length == 0 && kind != Kind::Flush {
            outbox.queue(&Reply {
                cookie: request.cookie,
                kind,
                length: 0,
                error: 0,
                data: Vec::new(),
            });
            continue;
        }
        // Flush: offset and length are reserved (proto.md NBD_CMD_FLUSH).
        let (offset, length) = match checked {
            Checked::Flush => (0, 0),
            _ => (request.offset, request.length),
        };
        let completion = Completion::new(request.cookie, kind, length, outbox);
        let op = checked.into_op(payload);
        backend.submit(Request { op, offset, length }, completion);
    }
}

fn truncated(e: io::Error, what: &str) -> End {
    if e.kind() == io::ErrorKind::UnexpectedEof {
        End::Closed(
            CloseReason::TruncatedRequest,
            format!("the connection ended inside a {what}"),
        )
    } else {
        End::Broken(format!("reading a {what}: {e}"))
    }
}

/// A request that may go to the backend: [`Op`] before its payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Checked {
    Read,
    Write { fua: bool },
    Flush,
    Trim { fua: bool },
    WriteZeroes { fua: bool, no_hole: bool },
}

impl Checked {
    pub fn kind(self) -> Kind {
        match self {
            Checked::Read => Kind::Read,
            Checked::Write { .. } => Kind::Write,
            Checked::Flush => Kind::Flush,
            Checked::Trim { .. } => Kind::Trim,
            Checked::WriteZeroes { .. } => Kind::WriteZeroes,
        }
    }

    /// The operation, with a write's payload (ignored by the others).
    fn into_op(self, payload: Vec<u8>) -> Op {
        match self {
            Checked::Read => Op::Read,
            Checked::Write { fua } => Op::Write { data: payload, fua },
            Checked::Flush => Op::Flush,
            Checked::Trim { fua } => Op::Trim { fua },
            Checked::WriteZeroes { fua, no_hole } => Op::WriteZeroes { fua, no_hole },
        }
    }
}

/// Checks a request against the export: type, flags, capabilities,
/// read-only, alignment, payload size and range. `Err` is the NBD error
/// value to answer with (proto.md "Error values": `NBD_EINVAL` for an
/// unknown type or flag, misalignment, or a read or trim past the end;
/// `NBD_ENOSPC` for a write or zeroing past the end; `NBD_EPERM` for a
/// write to a read-only export).
pub fn check(request: &RequestRepr, g: &Geometry) -> Result<Checked, u32> {
    let caps = g.caps;
    let fua = request.flags & cmd_flag::FUA != 0;
    let no_hole = request.flags & cmd_flag::NO_HOLE != 0;
    let (checked, allowed, supported, writes) = match request.kind {
        cmd::READ => (Checked::Read, cmd_flag::FUA, true, false),
        cmd::WRITE => (Checked::Write { fua }, cmd_flag::FUA, true, true),
        cmd::FLUSH => (Checked::Flush, cmd_flag::FUA, caps.flush, false),
        cmd::TRIM => (Checked::Trim { fua }, cmd_flag::FUA, caps.trim, true),
        cmd::WRITE_ZEROES => (
            Checked::WriteZeroes { fua, no_hole },
            cmd_flag::FUA | cmd_flag::NO_HOLE,
            caps.write_zeroes,
            true,
        ),
        // NBD_CMD_CACHE and NBD_CMD_BLOCK_STATUS are not advertised.
        _ => return Err(errno::EINVAL),
    };
    if !supported {
        return Err(errno::EINVAL);
    }
    // proto.md "Command flags": with NBD_FLAG_SEND_FUA the server MUST
    // accept FUA on every command; any flag not valid for the command (DF
    // without structured replies, FAST_ZERO not advertised) is EINVAL.
    if request.flags & !allowed != 0 || (fua && !caps.fua) {
        return Err(errno::EINVAL);
    }
    if writes && caps.read_only {
        return Err(errno::EPERM);
    }
    // Flush: offset and length are reserved (proto.md NBD_CMD_FLUSH) and
    // not looked at.
    if checked == Checked::Flush {
        return Ok(checked);
    }
    let minimum = u64::from(g.block.minimum);
    if request.offset % minimum != 0 || u64::from(request.length) % minimum != 0 {
        return Err(errno::EINVAL);
    }
    let payload = matches!(checked, Checked::Read | Checked::Write { .. });
    if payload && request.length > g.block.maximum {
        return Err(errno::EINVAL);
    }
    let inside = request
        .offset
        .checked_add(u64::from(request.length))
        .is_some_and(|end| end <= g.size);
    if !inside {
        return Err(match checked {
            Checked::Write { .. } | Checked::WriteZeroes { .. } => errno::ENOSPC,
            _ => errno::EINVAL,
        });
    }
    Ok(checked)
}

#[cfg(test)]
mod tests;
