//! The storage behind an NBD export: an asynchronous submit/complete trait.
//!
//! Layer: the gateway's lower edge. The transmission phase validates each
//! request against the export's [`Geometry`] (range, alignment, flags,
//! capabilities) before [`Backend::submit`], so a backend sees only
//! requests it advertised it can serve. `submit` returns at once; the
//! backend answers later through the [`Completion`] handle, from any
//! thread and in any order (the NVMe-over-Falcon initiator completes on
//! its own lcore). Completing sends the reply from the completing thread
//! without blocking it ([`super::outbox`]); a backend that completes many
//! requests in one pass sends them together with
//! [`Completion::complete_into`] a [`ReplyBatch`]. A backend must never
//! block the caller of `submit` on I/O, and never panic on a request.

#[cfg(test)]
use std::sync::mpsc::Sender;
use std::sync::Arc;

use super::outbox::Outbox;
pub use super::outbox::ReplyBatch;
use super::proto::{errno, tx_flag, MAX_PAYLOAD};

/// The export's size, block sizes and what the backend can do; the
/// handshake advertises it as it is (proto.md "Size constraints",
/// "Transmission flags").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    /// Export size in bytes; a multiple of `block.minimum`.
    pub size: u64,
    pub block: BlockSize,
    pub caps: Capabilities,
}

/// `NBD_INFO_BLOCK_SIZE`: the backend's alignment and payload limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockSize {
    /// Smallest addressable unit: a power of two, at most 64 KiB; requests
    /// not aligned to it fail with `NBD_EINVAL`.
    pub minimum: u32,
    /// The size at which aligned I/O is efficient: a power of two, at least
    /// `max(minimum, 512)`.
    pub preferred: u32,
    /// Largest read or write payload: at least `preferred`, at most 32 MiB
    /// ([`MAX_PAYLOAD`]).
    pub maximum: u32,
}

impl BlockSize {
    /// proto.md's defaults: 1 byte, 4 KiB, 32 MiB.
    pub const DEFAULT: BlockSize = BlockSize {
        minimum: 1,
        preferred: 4096,
        maximum: MAX_PAYLOAD,
    };
}

/// What the backend supports; each maps to a transmission flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Capabilities {
    /// Writes fail with `NBD_EPERM` (`NBD_FLAG_READ_ONLY`).
    pub read_only: bool,
    /// [`Op::Flush`] (`NBD_FLAG_SEND_FLUSH`).
    pub flush: bool,
    /// The `fua` flag of writes, trims and zeroes (`NBD_FLAG_SEND_FUA`).
    pub fua: bool,
    /// [`Op::Trim`] (`NBD_FLAG_SEND_TRIM`).
    pub trim: bool,
    /// [`Op::WriteZeroes`] (`NBD_FLAG_SEND_WRITE_ZEROES`).
    pub write_zeroes: bool,
    /// One store behind every connection, no per-connection cache: a flush
    /// or FUA on one connection covers writes completed on all
    /// (`NBD_FLAG_CAN_MULTI_CONN`).
    pub multi_conn: bool,
}

impl Capabilities {
    /// The transmission flags these capabilities advertise.
    pub fn transmission_flags(&self) -> u16 {
        let mut flags = tx_flag::HAS_FLAGS;
        for (on, flag) in [
            (self.read_only, tx_flag::READ_ONLY),
            (self.flush, tx_flag::SEND_FLUSH),
            (self.fua, tx_flag::SEND_FUA),
            (self.trim, tx_flag::SEND_TRIM),
            (self.write_zeroes, tx_flag::SEND_WRITE_ZEROES),
            (self.multi_conn, tx_flag::CAN_MULTI_CONN),
        ] {
            if on {
                flags |= flag;
            }
        }
        flags
    }
}

impl Geometry {
    /// Checks what proto.md requires of advertised sizes.
    ///
    /// # Errors
    ///
    /// A sentence naming the value that breaks a rule.
    pub fn validate(&self) -> Result<(), String> {
        let b = self.block;
        if !b.minimum.is_power_of_two() || b.minimum > 1 << 16 {
            return Err(format!(
                "minimum block size {}: must be a power of two up to 65536",
                b.minimum
            ));
        }
        if !b.preferred.is_power_of_two() || b.preferred < b.minimum.max(512) {
            return Err(format!(
                "preferred block size {}: must be a power of two of at least max(minimum, 512)",
                b.preferred
            ));
        }
        if b.maximum < b.preferred || b.maximum > MAX_PAYLOAD {
            return Err(format!(
                "maximum payload {}: must be between the preferred block size and 32 MiB",
                b.maximum
            ));
        }
        if self.size == 0 || self.size % u64::from(b.minimum) != 0 {
            return Err(format!(
                "export size {}: must be a positive multiple of the minimum block size {}",
                self.size, b.minimum
            ));
        }
        Ok(())
    }
}

/// One validated request. `offset + length` lies within the export and
/// both are multiples of the minimum block size.
#[derive(Debug)]
pub struct Request {
    pub op: Op,
    /// Byte offset into the export.
    pub offset: u64,
    /// Bytes the operation covers (0 for [`Op::Flush`]).
    pub length: u32,
}

/// The operation of a [`Request`].
#[derive(Debug)]
pub enum Op {
    /// Read `length` bytes; complete with them.
    Read,
    /// Write `data` (`length` bytes); `fua`: durable before completing.
    Write { data: Vec<u8>, fua: bool },
    /// Make every write completed before this one durable.
    Flush,
    /// The range is no longer needed (its contents become unspecified).
    Trim { fua: bool },
    /// The range reads back as zeroes; `no_hole`: keep it allocated.
    WriteZeroes { fua: bool, no_hole: bool },
}

impl Op {
    /// Which counter the request lands in.
    pub fn kind(&self) -> Kind {
        match self {
            Op::Read => Kind::Read,
            Op::Write { .. } => Kind::Write,
            Op::Flush => Kind::Flush,
            Op::Trim { .. } => Kind::Trim,
            Op::WriteZeroes { .. } => Kind::WriteZeroes,
        }
    }
}

/// Request kinds, for counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Read,
    Write,
    Flush,
    Trim,
    WriteZeroes,
    /// A request refused before reaching the backend (unknown type, bad
    /// flags, out of range).
    Refused,
}

/// Why a backend failed a request; each maps to an NBD error value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendError {
    /// The device failed (`NBD_EIO`).
    Io,
    /// The backend refused the request's parameters (`NBD_EINVAL`).
    InvalidArgument,
    /// No room to write (`NBD_ENOSPC`).
    NoSpace,
    /// The export is read-only (`NBD_EPERM`).
    ReadOnly,
    /// The backend is stopping (`NBD_ESHUTDOWN`).
    Shutdown,
}

impl BackendError {
    /// proto.md "Error values".
    pub fn errno(self) -> u32 {
        match self {
            BackendError::Io => errno::EIO,
            BackendError::InvalidArgument => errno::EINVAL,
            BackendError::NoSpace => errno::ENOSPC,
            BackendError::ReadOnly => errno::EPERM,
            BackendError::Shutdown => errno::ESHUTDOWN,
        }
    }
}

/// The storage behind an export.
pub trait Backend: Send + Sync {
    /// Size, block sizes and capabilities; the same for the backend's life.
    fn geometry(&self) -> Geometry;

    /// Takes `request` and returns at once; the backend calls
    /// `completion.complete(…)` exactly once, now or later, on any thread.
    /// Requests in flight together may complete in any order. A backend
    /// may hold a request back until the next [`unplug`](Self::unplug).
    fn submit(&self, request: Request, completion: Completion);

    /// The caller has submitted what it had for now and is about to wait
    /// (as the Linux block layer's plug/unplug): a backend that starts
    /// requests on another thread wakes it here, once for the burst,
    /// rather than once per request.
    fn unplug(&self) {}
}

/// A reply on its way to a connection's socket.
#[derive(Debug)]
pub(crate) struct Reply {
    pub cookie: u64,
    pub kind: Kind,
    /// Bytes the request covered (what the counters add).
    pub length: u32,
    /// 0 or an NBD error value.
    pub error: u32,
    /// A successful read's data: exactly `length` bytes.
    pub data: Vec<u8>,
}

/// The handle a backend answers a request through. Consumed by
/// [`complete`](Self::complete) or [`complete_into`](Self::complete_into);
/// dropped without either, the request fails with `NBD_EIO` (so a client
/// never waits forever on a lost request).
#[derive(Debug)]
pub struct Completion {
    cookie: u64,
    kind: Kind,
    length: u32,
    sink: Option<Sink>,
}

/// Where a completion's reply goes.
#[derive(Debug)]
enum Sink {
    Outbox(Arc<Outbox>),
    /// A backend's unit tests read the replies from a channel.
    #[cfg(test)]
    Channel(Sender<Reply>),
}

impl Completion {
    pub(crate) fn new(cookie: u64, kind: Kind, length: u32, outbox: &Arc<Outbox>) -> Self {
        outbox.expect_reply();
        Completion {
            cookie,
            kind,
            length,
            sink: Some(Sink::Outbox(Arc::clone(outbox))),
        }
    }

    /// A completion whose reply goes to `queue`.
    #[cfg(test)]
    pub(crate) fn channel(cookie: u64, kind: Kind, length: u32, queue: Sender<Reply>) -> Self {
        Completion {
            cookie,
            kind,
            length,
            sink: Some(Sink::Channel(queue)),
        }
    }

    /// Ends the request and sends its reply: `Ok(data)` with a read's
    /// `length` bytes (empty for every other operation), or the error. A
    /// read whose data is not `length` bytes long is answered `NBD_EIO`: a
    /// simple reply cannot carry a short read.
    pub fn complete(mut self, result: Result<Vec<u8>, BackendError>) {
        let (error, data) = self.answer(result);
        self.send(error, data, None);
    }

    /// Ends the request as [`complete`](Self::complete) does, its reply
    /// sent with the rest of `batch`.
    pub fn complete_into(mut self, batch: &mut ReplyBatch, result: Result<Vec<u8>, BackendError>) {
        let (error, data) = self.answer(result);
        self.send(error, data, Some(batch));
    }

    fn answer(&self, result: Result<Vec<u8>, BackendError>) -> (u32, Vec<u8>) {
        match result {
            Ok(data) if self.kind == Kind::Read && data.len() != self.length as usize => {
                tracing::error!(
                    cookie = self.cookie,
                    expected = self.length,
                    got = data.len(),
                    "backend completed a read with the wrong length; answering EIO"
                );
                (errno::EIO, Vec::new())
            }
            Ok(data) if self.kind == Kind::Read => (0, data),
            Ok(_) => (0, Vec::new()),
            Err(e) => (e.errno(), Vec::new()),
        }
    }

    /// The request's cookie (for a backend's own logs).
    pub fn cookie(&self) -> u64 {
        self.cookie
    }

    fn send(&mut self, error: u32, data: Vec<u8>, batch: Option<&mut ReplyBatch>) {
        let Some(sink) = self.sink.take() else {
            return;
        };
        let reply = Reply {
            cookie: self.cookie,
            kind: self.kind,
            length: self.length,
            error,
            data,
        };
        match sink {
            Sink::Outbox(outbox) => {
                outbox.queue_completed(&reply);
                match batch {
                    Some(batch) => batch.add(&outbox),
                    None => outbox.flush(),
                }
            }
            // The receiver has gone only when the test has: the reply has
            // nowhere to go.
            #[cfg(test)]
            Sink::Channel(queue) => {
                let _ = queue.send(reply);
            }
        }
    }
}

impl Drop for Completion {
    fn drop(&mut self) {
        if self.sink.is_some() {
            tracing::error!(
                cookie = self.cookie,
                "backend dropped a request without completing it; answering EIO"
            );
            self.send(errno::EIO, Vec::new(), None);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc::channel;

    use super::*;

    #[test]
    fn flags_follow_capabilities() {
        assert_eq!(
            Capabilities::default().transmission_flags(),
            tx_flag::HAS_FLAGS
        );
        let all = Capabilities {
            read_only: false,
            flush: true,
            fua: true,
            trim: true,
            write_zeroes: true,
            multi_conn: true,
        };
        assert_eq!(all.transmission_flags(), 0b1_0110_1101);
    }

    #[test]
    fn geometry_rules() {
        let good = Geometry {
            size: 1 << 20,
            block: BlockSize::DEFAULT,
            caps: Capabilities::default(),
        };
        assert!(good.validate().is_ok());
        let mut g = good;
        g.block.minimum = 3;
        assert!(g.validate().is_err());
        let mut g = good;
        g.block.minimum = 512;
        g.size = 1000;
        assert!(g.validate().is_err());
        let mut g = good;
        g.block.maximum = MAX_PAYLOAD + 1;
        assert!(g.validate().is_err());
        let mut g = good;
        g.block.preferred = 256;
        assert!(g.validate().is_err());
    }

    #[test]
    fn dropped_completion_answers_eio_once() {
        let (tx, rx) = channel();
        drop(Completion::channel(9, Kind::Write, 512, tx.clone()));
        let reply = rx.recv().unwrap();
        assert_eq!((reply.cookie, reply.error), (9, errno::EIO));
        Completion::channel(10, Kind::Flush, 0, tx).complete(Ok(Vec::new()));
        let reply = rx.recv().unwrap();
        assert_eq!((reply.cookie, reply.error), (10, 0));
        assert!(rx.recv().is_err(), "exactly one reply each");
    }

    #[test]
    fn short_read_answers_eio() {
        let (tx, rx) = channel();
        Completion::channel(1, Kind::Read, 4096, tx).complete(Ok(vec![0; 512]));
        let reply = rx.recv().unwrap();
        assert_eq!(reply.error, errno::EIO);
        assert!(reply.data.is_empty());
    }
}
