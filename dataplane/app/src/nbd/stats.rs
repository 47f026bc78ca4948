//! The gateway's counters: requests by kind, bytes, errors by NBD error
//! value, and connections closed by the server by named reason.
//!
//! Layer: gateway. Written by each connection's writer (one reply, one
//! update) and by its reader (a closed connection); read by the stats line
//! and the summary as a [`Snapshot`]. Relaxed atomics: the figures are
//! rates, not a synchronisation point.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

use super::backend::{Kind, Reply};
use super::proto::errno;

/// Why the server closed a connection (hard disconnect): each is a
/// client's protocol violation, counted and logged by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseReason {
    /// Client flags with a bit the server did not offer.
    BadClientFlags,
    /// An option header without `IHAVEOPT`.
    BadOptionMagic,
    /// An option's data longer than the server reads (1 MiB).
    OptionTooLong,
    /// `NBD_OPT_EXPORT_NAME` for an export that does not exist: the
    /// option cannot carry an error, so the session ends.
    UnknownExport,
    /// No complete handshake within the handshake timeout.
    HandshakeTimeout,
    /// A request without `NBD_REQUEST_MAGIC`.
    BadRequestMagic,
    /// A write whose payload exceeds 32 MiB.
    OversizedPayload,
    /// The connection ended inside a request (a header or write payload
    /// cut short).
    TruncatedRequest,
}

impl CloseReason {
    pub const ALL: [CloseReason; 8] = [
        CloseReason::BadClientFlags,
        CloseReason::BadOptionMagic,
        CloseReason::OptionTooLong,
        CloseReason::UnknownExport,
        CloseReason::HandshakeTimeout,
        CloseReason::BadRequestMagic,
        CloseReason::OversizedPayload,
        CloseReason::TruncatedRequest,
    ];

    /// The counter's name (`--json` key, log field).
    pub fn name(self) -> &'static str {
        match self {
            CloseReason::BadClientFlags => "bad_client_flags",
            CloseReason::BadOptionMagic => "bad_option_magic",
            CloseReason::OptionTooLong => "option_too_long",
            CloseReason::UnknownExport => "unknown_export",
            CloseReason::HandshakeTimeout => "handshake_timeout",
            CloseReason::BadRequestMagic => "bad_request_magic",
            CloseReason::OversizedPayload => "oversized_payload",
            CloseReason::TruncatedRequest => "truncated_request",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Error values counted by name; anything else lands in `other`.
const ERRNO_NAMES: [(u32, &str); 7] = [
    (errno::EPERM, "EPERM"),
    (errno::EIO, "EIO"),
    (errno::ENOMEM, "ENOMEM"),
    (errno::EINVAL, "EINVAL"),
    (errno::ENOSPC, "ENOSPC"),
    (errno::EOVERFLOW, "EOVERFLOW"),
    (errno::ESHUTDOWN, "ESHUTDOWN"),
];

/// The live counters.
#[derive(Debug, Default)]
pub struct Stats {
    reads: AtomicU64,
    writes: AtomicU64,
    flushes: AtomicU64,
    trims: AtomicU64,
    write_zeroes: AtomicU64,
    read_bytes: AtomicU64,
    written_bytes: AtomicU64,
    zeroed_bytes: AtomicU64,
    errors: [AtomicU64; ERRNO_NAMES.len() + 1],
    closed: [AtomicU64; CloseReason::ALL.len()],
    connections: AtomicU64,
    active: AtomicU64,
}

/// The counters at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Snapshot {
    /// Replies sent, by request kind (errors included).
    pub reads: u64,
    pub writes: u64,
    pub flushes: u64,
    pub trims: u64,
    pub write_zeroes: u64,
    /// Payload of successful reads.
    pub read_bytes: u64,
    /// Payload of successful writes.
    pub written_bytes: u64,
    /// Bytes covered by successful trims and zeroings.
    pub zeroed_bytes: u64,
    /// Replies with an error, of any kind.
    pub errors: u64,
    /// Those by NBD error value (`EINVAL`, …, `other`); zeroes left out.
    pub errors_by_code: BTreeMap<String, u64>,
    /// Connections the server closed on a protocol violation, by reason;
    /// zeroes left out.
    pub closed_by_reason: BTreeMap<String, u64>,
    /// Connections accepted since the start.
    pub connections: u64,
    /// Connections open now.
    pub active_connections: u64,
}

impl Snapshot {
    /// Replies of every kind.
    pub fn requests(&self) -> u64 {
        self.reads + self.writes + self.flushes + self.trims + self.write_zeroes
    }
}

impl Stats {
    /// Counts one reply as it goes out.
    pub(crate) fn record(&self, reply: &Reply) {
        let counter = match reply.kind {
            Kind::Read => &self.reads,
            Kind::Write => &self.writes,
            Kind::Flush => &self.flushes,
            Kind::Trim => &self.trims,
            Kind::WriteZeroes => &self.write_zeroes,
            // A refused request's type may be unknown; it counts as an error.
            Kind::Refused => {
                self.count_error(reply.error);
                return;
            }
        };
        counter.fetch_add(1, Ordering::Relaxed);
        if reply.error != 0 {
            self.count_error(reply.error);
            return;
        }
        let bytes = u64::from(reply.length);
        match reply.kind {
            Kind::Read => self.read_bytes.fetch_add(bytes, Ordering::Relaxed),
            Kind::Write => self.written_bytes.fetch_add(bytes, Ordering::Relaxed),
            Kind::Trim | Kind::WriteZeroes => self.zeroed_bytes.fetch_add(bytes, Ordering::Relaxed),
            Kind::Flush | Kind::Refused => 0,
        };
    }

    fn count_error(&self, code: u32) {
        let slot = ERRNO_NAMES
            .iter()
            .position(|(c, _)| *c == code)
            .unwrap_or(ERRNO_NAMES.len());
        self.errors[slot].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn closed(&self, reason: CloseReason) {
        self.closed[reason.index()].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn connection_opened(&self) {
        self.connections.fetch_add(1, Ordering::Relaxed);
        self.active.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn connection_closed(&self) {
        self.active.fetch_sub(1, Ordering::Relaxed);
    }

    /// The counters now.
    pub fn snapshot(&self) -> Snapshot {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let errors_by_code: BTreeMap<String, u64> = ERRNO_NAMES
            .iter()
            .map(|(_, name)| *name)
            .chain(std::iter::once("other"))
            .zip(self.errors.iter().map(get))
            .filter(|(_, n)| *n > 0)
            .map(|(name, n)| (name.to_string(), n))
            .collect();
        let closed_by_reason = CloseReason::ALL
            .iter()
            .map(|r| (r.name().to_string(), get(&self.closed[r.index()])))
            .filter(|(_, n)| *n > 0)
            .collect();
        Snapshot {
            reads: get(&self.reads),
            writes: get(&self.writes),
            flushes: get(&self.flushes),
            trims: get(&self.trims),
            write_zeroes: get(&self.write_zeroes),
            read_bytes: get(&self.read_bytes),
            written_bytes: get(&self.written_bytes),
            zeroed_bytes: get(&self.zeroed_bytes),
            errors: self.errors.iter().map(get).sum(),
            errors_by_code,
            closed_by_reason,
            connections: get(&self.connections),
            active_connections: get(&self.active),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(kind: Kind, length: u32, error: u32) -> Reply {
        Reply {
            cookie: 0,
            kind,
            length,
            error,
            data: Vec::new(),
        }
    }

    #[test]
    fn counts_by_kind_bytes_and_error() {
        let s = Stats::default();
        s.record(&reply(Kind::Read, 4096, 0));
        s.record(&reply(Kind::Write, 512, 0));
        s.record(&reply(Kind::Write, 512, errno::ENOSPC));
        s.record(&reply(Kind::Refused, 0, errno::EINVAL));
        s.record(&reply(Kind::Trim, 1 << 20, 0));
        s.record(&reply(Kind::Flush, 0, 77));
        s.closed(CloseReason::BadRequestMagic);
        let snap = s.snapshot();
        assert_eq!(
            (snap.reads, snap.writes, snap.trims, snap.flushes),
            (1, 2, 1, 1)
        );
        assert_eq!((snap.read_bytes, snap.written_bytes), (4096, 512));
        assert_eq!(snap.zeroed_bytes, 1 << 20);
        assert_eq!(snap.errors, 3);
        assert_eq!(
            snap.errors_by_code,
            BTreeMap::from([
                ("EINVAL".to_string(), 1),
                ("ENOSPC".to_string(), 1),
                ("other".to_string(), 1)
            ])
        );
        assert_eq!(
            snap.closed_by_reason,
            BTreeMap::from([("bad_request_magic".to_string(), 1)])
        );
        assert_eq!(snap.requests(), 5);
    }
}
