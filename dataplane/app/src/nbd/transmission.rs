//! The NBD transmission phase: one connection's reader and writer.
//!
//! Layer: gateway protocol. The reader (the connection's thread) parses
//! each request, checks it against the export's [`Geometry`] and hands it
//! to the [`Backend`] without waiting for the one before; completions,
//! from the backend on any thread, reach the writer through a queue, and
//! the writer sends each simple reply with the request's cookie as it
//! arrives, so replies go out in completion order (proto.md "Ordering of
//! messages and writes" allows any order). A window bounds the requests
//! and payload bytes in flight per connection, so a client that does not
//! read its replies cannot grow the server's memory without end.
//!
//! Never panics on client input. A request the protocol lets the server
//! answer with an error is answered (`NBD_EINVAL`, `NBD_ENOSPC`,
//! `NBD_EPERM`); a request it cannot stay in step after (bad magic, a
//! write payload above 32 MiB, a truncated request) ends the connection
//! with a named [`CloseReason`].

use std::io::{self, BufRead, BufReader, BufWriter, Read, Write};
use std::net::Shutdown;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use super::backend::{Backend, Completion, Geometry, Kind, Op, Reply, Request};
use super::proto::{cmd, cmd_flag, errno, RequestRepr, SimpleReplyRepr, MAX_PAYLOAD, REQUEST_LEN};
use super::stats::{CloseReason, Stats};
use super::stream::Stream;

/// Requests in flight per connection at most (fio's iodepth 32, nbdcopy's
/// 64 per connection, with room to spare).
pub const MAX_INFLIGHT_REQUESTS: usize = 512;
/// Read and write payload bytes in flight per connection at most (one
/// request is always let through, whatever its size).
pub const MAX_INFLIGHT_BYTES: u64 = 128 << 20;
/// The reader's and the writer's buffer: many 4 KiB requests and replies
/// per system call.
const BUFFER: usize = 256 << 10;

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
    let window = Arc::new(Window::default());
    let (queue, replies) = channel::<Reply>();
    let control = match writer.try_clone() {
        Ok(s) => s,
        Err(e) => return End::Broken(format!("cannot clone the socket: {e}")),
    };
    let writer_thread = {
        let window = Arc::clone(&window);
        let stats = Arc::clone(stats);
        std::thread::Builder::new()
            .name("nbd-writer".into())
            .spawn(move || write_replies(replies, writer, &window, &stats))
    };
    let writer_thread = match writer_thread {
        Ok(t) => t,
        Err(e) => return End::Broken(format!("cannot start the writer thread: {e}")),
    };
    let end = read_requests(&mut reader, &queue, backend, geometry, &window);
    if let End::Closed(..) = end {
        // A hard disconnect: replies still queued are not sent.
        control.shutdown(Shutdown::Both);
    }
    // The writer ends once every reply queued and every completion still
    // held by the backend has been through it.
    drop(queue);
    match writer_thread.join() {
        Ok(Ok(())) => end,
        Ok(Err(e)) if matches!(end, End::Eof | End::Disconnect) => {
            End::Broken(format!("writing a reply: {e}"))
        }
        Ok(Err(_)) => end,
        Err(_) => End::Broken("the writer thread panicked".into()),
    }
}

/// The reader: parse, check, submit, until the connection ends.
fn read_requests(
    reader: &mut BufReader<Stream>,
    queue: &Sender<Reply>,
    backend: &Arc<dyn Backend>,
    geometry: Geometry,
    window: &Window,
) -> End {
    loop {
        let mut header = [0u8; REQUEST_LEN];
        match reader.fill_buf() {
            Ok([]) => return End::Eof,
            Ok(_) => {}
            Err(e) => return End::Broken(format!("reading a request: {e}")),
        }
        if let Err(e) = reader.read_exact(&mut header) {
            return truncated(e, "request header");
        }
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
        if !window.acquire(cost(kind, length)) {
            // The writer failed: nobody reads the replies any more.
            return End::Broken("the writer stopped".into());
        }
        let payload = if request.kind == cmd::WRITE {
            let mut data = vec![0u8; request.length as usize];
            if let Err(e) = reader.read_exact(&mut data) {
                window.release(cost(kind, length));
                return truncated(e, "write payload");
            }
            data
        } else {
            Vec::new()
        };
        let checked = match verdict {
            Ok(c) => c,
            Err(error) => {
                let _ = queue.send(Reply {
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
            let _ = queue.send(Reply {
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
        let completion = Completion::new(request.cookie, kind, length, queue.clone());
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

/// A reply's weight in the window: the request, and its payload bytes.
fn cost(kind: Kind, length: u32) -> (usize, u64) {
    match kind {
        Kind::Read | Kind::Write | Kind::Refused => (1, u64::from(length)),
        _ => (1, 0),
    }
}

/// Requests and payload bytes in flight on one connection.
#[derive(Debug, Default)]
struct Window {
    state: Mutex<WindowState>,
    freed: Condvar,
}

#[derive(Debug, Default)]
struct WindowState {
    requests: usize,
    bytes: u64,
    /// The writer failed: nothing is released any more.
    closed: bool,
}

impl Window {
    fn lock(&self) -> MutexGuard<'_, WindowState> {
        // Only counters live under the lock; they stay consistent.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits for room; false once the writer has failed.
    fn acquire(&self, (requests, bytes): (usize, u64)) -> bool {
        let mut s = self.lock();
        loop {
            if s.closed {
                return false;
            }
            let fits = s.requests + requests <= MAX_INFLIGHT_REQUESTS
                && (s.bytes + bytes <= MAX_INFLIGHT_BYTES || s.requests == 0);
            if fits {
                s.requests += requests;
                s.bytes += bytes;
                return true;
            }
            s = self.freed.wait(s).unwrap_or_else(|e| e.into_inner());
        }
    }

    fn release(&self, (requests, bytes): (usize, u64)) {
        let mut s = self.lock();
        s.requests = s.requests.saturating_sub(requests);
        s.bytes = s.bytes.saturating_sub(bytes);
        drop(s);
        self.freed.notify_one();
    }

    fn close(&self) {
        self.lock().closed = true;
        self.freed.notify_all();
    }
}

/// The writer: each reply as it arrives, flushed when the queue runs
/// empty (one system call for a burst of completions).
fn write_replies(
    replies: Receiver<Reply>,
    stream: Stream,
    window: &Window,
    stats: &Stats,
) -> io::Result<()> {
    let control = stream.try_clone();
    let mut out = BufWriter::with_capacity(BUFFER, stream);
    let result = (|| -> io::Result<()> {
        while let Ok(first) = replies.recv() {
            let mut next = Some(first);
            while let Some(reply) = next {
                put(&mut out, &reply)?;
                stats.record(&reply);
                window.release(cost(reply.kind, reply.length));
                next = replies.try_recv().ok();
            }
            out.flush()?;
        }
        Ok(())
    })();
    if result.is_err() {
        // The client can no longer be answered: stop the reader, and let
        // the completions still to come drain without a socket.
        window.close();
        if let Ok(c) = control {
            c.shutdown(Shutdown::Both);
        }
        for _ in replies.iter() {}
    }
    result
}

fn put<W: Write>(out: &mut W, reply: &Reply) -> io::Result<()> {
    let header = SimpleReplyRepr {
        error: reply.error,
        cookie: reply.cookie,
    };
    out.write_all(&header.emit())?;
    // proto.md "Simple reply message": data only for a successful read.
    if reply.kind == Kind::Read && reply.error == 0 {
        out.write_all(&reply.data)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
