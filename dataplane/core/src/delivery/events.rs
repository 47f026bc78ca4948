//! What the delivery sublayer reports to the layer above, and its errors.
//!
//! Layer: delivery. Owns [`Event`] (acknowledgements of our packets, NACK
//! notifications, resyncs, path changes, connection errors), the outcome of
//! a received packet ([`RxOutcome`]), the transaction sublayer's answers to
//! it ([`Refusal`], [`UlpNack`]), the command errors and [`DeliveryStats`].
//! Plain values; no IO.

use core::fmt;

use crate::delivery::packet::{Arrival, PayloadHandle, SentKind};
use crate::drop::DropReason;
use crate::seq::{Psn, Rsn};
use crate::wire::{NackCode, PacketType, ResyncCode, RnrTimeout, Window};

/// An output of [`DeliveryConnection::poll_event`](super::DeliveryConnection::poll_event).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// One of our packets was acknowledged (cumulatively or by an EACK
    /// bitmap): its retransmit slot is free and its payload may be released.
    /// For a `SentKind::Resync` this is the Resync's acknowledgement: the
    /// initiator may now complete the transaction in error (spec/falcon.md
    /// §4.4 CIE flow).
    Acked {
        /// The window it was sent in.
        window: Window,
        /// Its PSN.
        psn: Psn,
        /// Its RSN.
        rsn: Rsn,
        /// What it was.
        kind: SentKind,
        /// Its payload.
        handle: PayloadHandle,
    },
    /// The peer NACKed a Push Data with RNR (code 2): it is retransmitted
    /// after max(RTO, timeout) (OCP Falcon 0.9 §9.2.4, §11).
    ReceiverNotReady {
        /// PSN of the Push Data.
        psn: Psn,
        /// Its RSN.
        rsn: Rsn,
        /// The RNR timeout from the NACK.
        timeout: RnrTimeout,
        /// The ULP's code, opaque to Falcon.
        ulp_nack_code: u8,
        /// Its payload (whose transaction it is).
        handle: PayloadHandle,
    },
    /// The peer NACKed a packet with xLR drop, complete-in-error,
    /// non-recoverable error or invalid CID (codes 4, 6, 7, 8): the packet
    /// left the retransmit buffer (its payload may be released) and a Resync
    /// with the matching code takes its PSN (§9.2.4, §11).
    Nacked {
        /// The window.
        window: Window,
        /// The NACKed PSN.
        psn: Psn,
        /// Its RSN (§9.2.4: "with the RSN of the packet that was dropped").
        rsn: Rsn,
        /// The NACK code.
        code: NackCode,
        /// The ULP's code, opaque to Falcon.
        ulp_nack_code: u8,
        /// The dropped packet's payload.
        handle: PayloadHandle,
    },
    /// A packet reached Max Retransmit Attempts: a Resync (code 0x3) takes
    /// its PSN (OCP Falcon 0.9 §11; the transaction sublayer completes it
    /// with kCmplLocalTO, footnote 1).
    RetransmitExhausted {
        /// The window.
        window: Window,
        /// The PSN.
        psn: Psn,
        /// Its RSN.
        rsn: Rsn,
        /// The abandoned packet's payload.
        handle: PayloadHandle,
    },
    /// The peer resynced one of our receive PSNs: the PSN is acknowledged
    /// without a transaction packet (§9.2.5). The transaction sublayer skips
    /// the RSN.
    Resynced {
        /// The window chosen from the Resync Packet Type field.
        window: Window,
        /// The PSN.
        psn: Psn,
        /// The RSN of the original packet.
        rsn: Rsn,
        /// Why the peer resynced.
        code: ResyncCode,
        /// The original packet's type.
        original: PacketType,
    },
    /// The RUE asked for a new path (new IPv6 flow label or UDP source port;
    /// `randomize_path`, OCP Falcon 0.9 §10.6.2.2).
    RandomizePath,
    /// A connection error. Fatal ones stop the connection: every later input
    /// is dropped with [`DropReason::ConnectionNotAlive`].
    Error(ConnectionError),
}

/// A connection-level error, with a numeric code for counters and the CM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectionError {
    /// The peer acknowledged PSNs never sent (its BPSN beyond our NPSN). The
    /// ACK was dropped; the connection goes on.
    AckBeyondNextPsn {
        /// The window.
        window: Window,
        /// The BPSN the peer sent.
        acked: Psn,
        /// Our NPSN.
        next: Psn,
    },
    /// A NACK with a reserved code (0, 3, 5, 9–255; OCP Falcon 0.9 §7.8).
    /// Dropped; the connection goes on.
    ReservedNackCode(u8),
    /// A Resync reached Max Retransmit Attempts: "connection fatal
    /// interrupt" (OCP Falcon 0.9 §11; spec/falcon.md §9 item 3). Fatal.
    ResyncExhausted {
        /// The window.
        window: Window,
        /// The PSN.
        psn: Psn,
        /// The RSN.
        rsn: Rsn,
    },
}

impl ConnectionError {
    /// A stable numeric code.
    pub const fn code(&self) -> u8 {
        match self {
            ConnectionError::AckBeyondNextPsn { .. } => 1,
            ConnectionError::ReservedNackCode(_) => 2,
            ConnectionError::ResyncExhausted { .. } => 3,
        }
    }

    /// The connection stops.
    pub const fn is_fatal(&self) -> bool {
        matches!(self, ConnectionError::ResyncExhausted { .. })
    }
}

impl fmt::Display for ConnectionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConnectionError::AckBeyondNextPsn {
                window,
                acked,
                next,
            } => write!(f, "peer acknowledged {window:?} {acked} beyond next {next}"),
            ConnectionError::ReservedNackCode(code) => write!(f, "NACK with reserved code {code}"),
            ConnectionError::ResyncExhausted { window, psn, rsn } => write!(
                f,
                "resync of {window:?} {psn} ({rsn}) exhausted its retransmissions"
            ),
        }
    }
}

impl std::error::Error for ConnectionError {}

/// What [`DeliveryConnection::handle_packet`](super::DeliveryConnection::handle_packet)
/// did with a packet.
#[derive(Debug, PartialEq, Eq)]
pub enum RxOutcome {
    /// A new in-window transaction packet: deliver it to the transaction
    /// sublayer and answer with `admit` or `refuse`.
    Deliver(Arrival),
    /// Dropped; count the reason. A piggy-backed ACK may have been processed
    /// (OCP Falcon 0.9 §11 receiver table).
    Dropped(DropReason),
    /// An ACK, NACK or Resync was processed; nothing to deliver.
    Processed,
}

/// Why the transaction sublayer refuses an [`Arrival`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// No receive resources: resource-drop NACK (code 1), retransmitted
    /// normally (OCP Falcon 0.9 §8.2, §11).
    InsufficientResources,
    /// Matches the xLR drop filter: xLR-drop NACK (code 4); the initiator
    /// resyncs (§11).
    Xlr,
}

/// The target ULP's negative answer to a delivered Push Data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UlpNack {
    /// Complete in error (NACK code 6); the initiator resyncs.
    CompletionInError {
        /// The ULP's code, opaque to Falcon.
        ulp_nack_code: u8,
    },
    /// Invalid CID (NACK code 8); the initiator resyncs.
    InvalidCid {
        /// The ULP's code.
        ulp_nack_code: u8,
    },
    /// Non-recoverable error (NACK code 7); the initiator resyncs.
    NonRecoverableError {
        /// The ULP's code.
        ulp_nack_code: u8,
    },
    /// Receiver not ready (NACK code 2): the initiator retransmits after
    /// `timeout`, and the retransmission is delivered again.
    ReceiverNotReady {
        /// How long the initiator waits.
        timeout: RnrTimeout,
        /// The ULP's code.
        ulp_nack_code: u8,
    },
}

/// Why [`submit`](super::DeliveryConnection::submit) refused a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubmitError {
    /// The connection failed.
    ConnectionNotAlive,
    /// A Push Data whose request length differs from its payload length
    /// (OCP Falcon 0.9 §7.5: "must match").
    LengthMismatch,
    /// The packet kind's submit queue is full; retry after transmissions.
    QueueFull,
}

/// Why [`resync`](super::DeliveryConnection::resync) refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResyncError {
    /// The connection failed.
    ConnectionNotAlive,
    /// The PSN is not an outstanding packet of that window, or is already
    /// a Resync.
    NotOutstanding,
}

impl fmt::Display for ResyncError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ResyncError::ConnectionNotAlive => "connection not alive",
            ResyncError::NotOutstanding => "PSN is not an outstanding transaction packet",
        })
    }
}

impl std::error::Error for ResyncError {}

/// Why a ULP ACK or NACK was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UlpError {
    /// The connection failed.
    ConnectionNotAlive,
    /// The PSN is not a received Push Data awaiting the ULP (already
    /// acknowledged, resynced, never delivered, or outside the window).
    NotAwaiting,
}

impl fmt::Display for SubmitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SubmitError::ConnectionNotAlive => "connection not alive",
            SubmitError::LengthMismatch => "Push Data request length differs from payload length",
            SubmitError::QueueFull => "submit queue full",
        })
    }
}

impl fmt::Display for UlpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            UlpError::ConnectionNotAlive => "connection not alive",
            UlpError::NotAwaiting => "PSN is not a Push Data awaiting the ULP",
        })
    }
}

impl std::error::Error for SubmitError {}
impl std::error::Error for UlpError {}

/// Per-connection counters (drops are counted by the caller from
/// [`RxOutcome::Dropped`] into its [`DropCounters`](crate::drop::DropCounters)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DeliveryStats {
    /// First transmissions.
    pub packets_sent: u64,
    /// Timeout retransmissions.
    pub retransmits_timeout: u64,
    /// Early retransmissions (OOO distance, EACK-OWN, RACK-TLP).
    pub retransmits_early: u64,
    /// Resyncs sent (first transmissions of a Resync).
    pub resyncs_sent: u64,
    /// Requests the local xLR drop filter sent as Resyncs 0x2 instead.
    pub xlr_local: u64,
    /// BACKs sent.
    pub backs_sent: u64,
    /// EACKs sent.
    pub eacks_sent: u64,
    /// NACKs sent.
    pub nacks_sent: u64,
    /// NACKs not sent because the NACK queue was full.
    pub nacks_overflowed: u64,
    /// ACKs and NACKs processed (not stale).
    pub acks_received: u64,
    /// Packets acknowledged by the peer.
    pub packets_acked: u64,
    /// Packets delivered upward (admitted).
    pub packets_delivered: u64,
    /// RUE events handed out.
    pub rue_events: u64,
    /// NACK and retransmit events dropped because one was outstanding
    /// (spec/falcon.md §7.7, isekai).
    pub rue_events_suppressed: u64,
    /// RUE results applied.
    pub rue_results: u64,
}
