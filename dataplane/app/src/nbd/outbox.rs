//! A connection's replies on their way to the socket: sent by the thread
//! that completes them, without waiting, and by a writer thread only when
//! the socket is full.
//!
//! Layer: gateway IO, between the backends' [`Completion`](super::backend::Completion)s and the
//! client's socket. Owns the encoded replies not yet sent, the count of
//! completions still to come, and the connection's `Window` (requests
//! and payload bytes in flight, released as their replies leave).
//!
//! A reply is encoded into the outbox under its lock and sent with a
//! non-blocking `send` by whoever completes it (a backend's lcore thread,
//! or the connection's reader for a backend that completes inline), so a
//! reply costs no thread hand-off: with the writer thread in the path, each
//! reply woke it and switched to it, which was a fifth of a request's cost
//! on the gateway pinned to one CPU (`dataplane/app/PERFORMANCE.md`). Never
//! blocks the completing thread: when the socket takes only part of the
//! bytes, the writer thread takes over and sends the rest with blocking
//! writes, outside the lock, and everything after them, until the outbox
//! is empty again. Replies never interleave: one sender at a time, under
//! the lock or as the writer.
//!
//! Two ways to send fewer, larger writes: the reader *corks* the outbox
//! while it works through requests already in its buffer, and sends
//! everything completed meanwhile before it next waits on the socket
//! (`Outbox::cork`, `Outbox::uncork`); a backend that completes many
//! requests in one pass queues them in a [`ReplyBatch`], which sends each
//! connection's replies once at the end.

use std::collections::VecDeque;
use std::io::{self, Write};
use std::net::Shutdown;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use nix::errno::Errno;
use nix::sys::socket::{send, MsgFlags};

use super::backend::{Kind, Reply};
use super::proto::SimpleReplyRepr;
use super::stats::Stats;
use super::stream::Stream;

/// Requests in flight per connection at most (fio's iodepth 32, nbdcopy's
/// 64 per connection, with room to spare).
pub const MAX_INFLIGHT_REQUESTS: usize = 512;
/// Read and write payload bytes in flight per connection at most (one
/// request is always let through, whatever its size).
pub const MAX_INFLIGHT_BYTES: u64 = 128 << 20;

/// A reply's weight in the window: the request, and its payload bytes.
pub(crate) fn cost(kind: Kind, length: u32) -> (usize, u64) {
    match kind {
        Kind::Read | Kind::Write | Kind::Refused => (1, u64::from(length)),
        _ => (1, 0),
    }
}

/// One connection's replies (see the module doc).
#[derive(Debug)]
pub(crate) struct Outbox {
    state: Mutex<State>,
    /// The writer thread waits here for work or for the end.
    writer_wake: Condvar,
    socket: Stream,
    fd: RawFd,
    window: Window,
    stats: Arc<Stats>,
}

#[derive(Debug, Default)]
struct State {
    /// Encoded replies; `out[sent..]` is still to go.
    out: Vec<u8>,
    sent: usize,
    /// The replies in `out`, in order, with where each ends.
    replies: VecDeque<Queued>,
    /// The writer thread is sending: a send would block, or did.
    writer: bool,
    corked: bool,
    /// Completions handed out and not yet answered.
    completions: usize,
    /// The reader has stopped: no more completions will be handed out.
    reader_done: bool,
    /// The socket failed: nothing more is sent.
    failed: Option<(io::ErrorKind, String)>,
}

#[derive(Debug, Clone, Copy)]
struct Queued {
    /// Offset in `out` just past the reply.
    end: usize,
    kind: Kind,
    length: u32,
    error: u32,
}

impl Queued {
    /// What the counters need of it.
    fn reply(self) -> Reply {
        Reply {
            cookie: 0,
            kind: self.kind,
            length: self.length,
            error: self.error,
            data: Vec::new(),
        }
    }
}

impl Outbox {
    /// The outbox of the connection on `socket` (a handle of its own).
    pub(crate) fn new(socket: Stream, stats: Arc<Stats>) -> Outbox {
        let fd = socket.as_raw_fd();
        Outbox {
            state: Mutex::new(State::default()),
            writer_wake: Condvar::new(),
            socket,
            fd,
            window: Window::default(),
            stats,
        }
    }

    pub(crate) fn window(&self) -> &Window {
        &self.window
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state stays consistent across a panic: each change is whole.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A completion is handed out; the writer waits for its reply before
    /// it ends.
    pub(crate) fn expect_reply(&self) {
        self.lock().completions += 1;
    }

    /// Queues the reply of a completion handed out by
    /// [`expect_reply`](Self::expect_reply), without sending it.
    pub(crate) fn queue_completed(&self, reply: &Reply) {
        let mut s = self.lock();
        s.completions = s.completions.saturating_sub(1);
        Self::encode(&mut s, reply);
        if s.completions == 0 && s.reader_done {
            self.writer_wake.notify_one();
        }
    }

    /// Queues a reply the reader answers itself, without sending it.
    pub(crate) fn queue(&self, reply: &Reply) {
        Self::encode(&mut self.lock(), reply);
    }

    fn encode(s: &mut State, reply: &Reply) {
        if s.failed.is_some() {
            return;
        }
        let header = SimpleReplyRepr {
            error: reply.error,
            cookie: reply.cookie,
        };
        s.out.extend_from_slice(&header.emit());
        // proto.md "Simple reply message": data only for a successful read.
        if reply.kind == Kind::Read && reply.error == 0 {
            s.out.extend_from_slice(&reply.data);
        }
        let end = s.out.len();
        s.replies.push_back(Queued {
            end,
            kind: reply.kind,
            length: reply.length,
            error: reply.error,
        });
    }

    /// Sends what is queued, unless the reader has corked the outbox or
    /// the writer is sending; never blocks.
    pub(crate) fn flush(&self) {
        let mut s = self.lock();
        if !s.corked {
            self.send_now(&mut s);
        }
    }

    /// Holds replies back while the reader works through requests it
    /// already has.
    pub(crate) fn cork(&self) {
        self.lock().corked = true;
    }

    /// Sends everything held back: the reader is about to wait.
    pub(crate) fn uncork(&self) {
        let mut s = self.lock();
        s.corked = false;
        self.send_now(&mut s);
    }

    /// The reader has stopped: the writer ends once every completion
    /// handed out has been answered and sent.
    pub(crate) fn reader_done(&self) {
        let mut s = self.lock();
        s.reader_done = true;
        s.corked = false;
        self.send_now(&mut s);
        self.writer_wake.notify_one();
    }

    /// Non-blocking sends of `out[sent..]`; hands the rest to the writer
    /// when the socket is full.
    fn send_now(&self, s: &mut State) {
        if s.writer || s.failed.is_some() || s.sent == s.out.len() {
            return;
        }
        // MSG_NOSIGNAL: a client gone is an error here, not a SIGPIPE.
        let flags = MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL;
        while s.sent < s.out.len() {
            match send(self.fd, &s.out[s.sent..], flags) {
                Ok(n) => s.sent += n,
                Err(Errno::EINTR) => {}
                Err(Errno::EAGAIN) => break,
                Err(e) => {
                    self.fail(s, io::Error::from(e));
                    return;
                }
            }
        }
        self.sent(s);
        if s.sent < s.out.len() {
            s.writer = true;
            self.writer_wake.notify_one();
        }
    }

    /// Counts and releases the replies sent whole; empties `out` once all
    /// of it has gone.
    fn sent(&self, s: &mut State) {
        let mut released = (0, 0);
        while let Some(&queued) = s.replies.front() {
            if queued.end > s.sent {
                break;
            }
            s.replies.pop_front();
            self.stats.record(&queued.reply());
            let (requests, bytes) = cost(queued.kind, queued.length);
            released.0 += requests;
            released.1 += bytes;
        }
        if s.sent == s.out.len() {
            s.out.clear();
            s.sent = 0;
            if s.reader_done && s.completions == 0 {
                // The last reply has gone: the writer may end.
                self.writer_wake.notify_one();
            }
        }
        if released.0 > 0 {
            self.window.release(released);
        }
    }

    /// The client can no longer be answered: drop what is queued, stop the
    /// reader (its window refuses, its socket reads end).
    fn fail(&self, s: &mut State, error: io::Error) {
        s.failed = Some((error.kind(), error.to_string()));
        s.out.clear();
        s.sent = 0;
        s.replies.clear();
        s.writer = false;
        self.window.close();
        self.socket.shutdown(Shutdown::Both);
        self.writer_wake.notify_one();
    }

    /// The writer thread: sends with blocking writes when the socket was
    /// full, until the reader has stopped and every reply has gone.
    ///
    /// # Errors
    ///
    /// The socket's error, once it failed.
    pub(crate) fn run_writer(&self) -> io::Result<()> {
        let mut spare = Vec::new();
        let mut s = self.lock();
        loop {
            if let Some((kind, message)) = &s.failed {
                return Err(io::Error::new(*kind, message.clone()));
            }
            if s.writer {
                // Take the bytes out and send them without the lock, so
                // that completing threads keep queueing meanwhile.
                let sent = std::mem::take(&mut s.sent);
                let out = std::mem::replace(&mut s.out, std::mem::take(&mut spare));
                let replies = std::mem::take(&mut s.replies);
                drop(s);
                let result = (&self.socket).write_all(&out[sent..]);
                s = self.lock();
                match result {
                    Ok(()) => self.written(&replies),
                    Err(e) => {
                        self.fail(&mut s, e);
                        continue;
                    }
                }
                spare = out;
                spare.clear();
                // More came meanwhile: try it without blocking first.
                s.writer = false;
                self.send_now(&mut s);
                continue;
            }
            if s.reader_done && s.completions == 0 && s.sent == s.out.len() {
                return Ok(());
            }
            s = self.writer_wake.wait(s).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Counts and releases replies the writer sent.
    fn written(&self, replies: &VecDeque<Queued>) {
        let mut released = (0, 0);
        for queued in replies {
            self.stats.record(&queued.reply());
            let (requests, bytes) = cost(queued.kind, queued.length);
            released.0 += requests;
            released.1 += bytes;
        }
        if released.0 > 0 {
            self.window.release(released);
        }
    }
}

/// Replies completed in one pass of a backend, sent together: one send
/// per connection for the pass instead of one per reply. Sends on
/// [`flush`](Self::flush) and when dropped.
#[derive(Debug, Default)]
pub struct ReplyBatch {
    outboxes: Vec<Arc<Outbox>>,
}

impl ReplyBatch {
    pub(crate) fn add(&mut self, outbox: &Arc<Outbox>) {
        // A handful of connections per pass: a scan beats a hash.
        if !self.outboxes.iter().any(|o| Arc::ptr_eq(o, outbox)) {
            self.outboxes.push(Arc::clone(outbox));
        }
    }

    /// Sends every connection's queued replies.
    pub fn flush(&mut self) {
        for outbox in self.outboxes.drain(..) {
            outbox.flush();
        }
    }
}

impl Drop for ReplyBatch {
    fn drop(&mut self) {
        self.flush();
    }
}

/// Requests and payload bytes in flight on one connection: the reader
/// takes room before it reads a request's payload, the outbox gives it
/// back once the reply has been sent, so a client that does not read its
/// replies cannot grow the server's memory without end.
#[derive(Debug, Default)]
pub(crate) struct Window {
    state: Mutex<WindowState>,
    freed: Condvar,
}

#[derive(Debug, Default)]
struct WindowState {
    requests: usize,
    bytes: u64,
    /// The reader waits for room (so a release must wake it).
    waiting: bool,
    /// The writer failed: nothing is released any more.
    closed: bool,
}

impl Window {
    fn lock(&self) -> MutexGuard<'_, WindowState> {
        // Only counters live under the lock; they stay consistent.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes room if there is some now; never waits.
    pub(crate) fn try_acquire(&self, (requests, bytes): (usize, u64)) -> bool {
        let mut s = self.lock();
        if s.closed || !fits(&s, requests, bytes) {
            return false;
        }
        s.requests += requests;
        s.bytes += bytes;
        true
    }

    /// Waits for room; false once the window is closed.
    pub(crate) fn acquire(&self, (requests, bytes): (usize, u64)) -> bool {
        let mut s = self.lock();
        loop {
            if s.closed {
                return false;
            }
            if fits(&s, requests, bytes) {
                s.requests += requests;
                s.bytes += bytes;
                s.waiting = false;
                return true;
            }
            s.waiting = true;
            s = self.freed.wait(s).unwrap_or_else(|e| e.into_inner());
        }
    }

    pub(crate) fn release(&self, (requests, bytes): (usize, u64)) {
        let mut s = self.lock();
        s.requests = s.requests.saturating_sub(requests);
        s.bytes = s.bytes.saturating_sub(bytes);
        // A notify is a system call; most releases have nobody to wake.
        let wake = s.waiting;
        drop(s);
        if wake {
            self.freed.notify_one();
        }
    }

    pub(crate) fn close(&self) {
        self.lock().closed = true;
        self.freed.notify_all();
    }
}

fn fits(s: &WindowState, requests: usize, bytes: u64) -> bool {
    s.requests + requests <= MAX_INFLIGHT_REQUESTS
        && (s.bytes + bytes <= MAX_INFLIGHT_BYTES || s.requests == 0)
}

#[cfg(test)]
mod tests;
