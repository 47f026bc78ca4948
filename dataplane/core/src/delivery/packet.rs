//! The values that cross the delivery sublayer's boundary.
//!
//! Layer: delivery. Owns what the transaction sublayer hands down
//! ([`OutgoingPacket`], [`PayloadHandle`]), what the delivery sublayer hands
//! back for transmission ([`TxPacket`]) and for delivery ([`Arrival`]), and
//! the per-packet receive metadata the PSP stage supplies ([`RxMeta`]).
//! Plain `Copy` values: no IO, no allocation.
//!
//! # The retransmit buffer holds metadata, not bytes
//!
//! OCP Falcon 0.9 §9 lets the transmitter keep "packets (or packet header and
//! metadata necessary to construct the full packet)". We keep the metadata:
//! packet kind, PSN (the slot), RSN, request length, payload length and a
//! [`PayloadHandle`] naming the payload, which stays owned by the layer
//! above until the packet is acknowledged ([`Event::Acked`]) or replaced by
//! a Resync ([`Event::Nacked`], [`Event::RetransmitExhausted`]). A
//! retransmission is rebuilt from these fields plus the current piggy-backed
//! ACK state, exactly like the first transmission.
//!
//! [`Event::Acked`]: super::Event::Acked
//! [`Event::Nacked`]: super::Event::Nacked
//! [`Event::RetransmitExhausted`]: super::Event::RetransmitExhausted

use crate::seq::{Psn, Rsn};
use crate::wire::{FalconRepr, FalconTime32, PacketType, ResyncCode, Window};

/// Names a packet's payload (ULP headers and data) in the layer above: an
/// index, a buffer id, an mbuf handle. Opaque to the delivery sublayer,
/// which only hands it back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct PayloadHandle(pub u64);

/// The transaction packets the layer above submits (OCP Falcon 0.9 §7.3–7.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PacketKind {
    /// Pull Data (data window), the target's response to a Pull Request.
    PullData,
    /// Pull Request (request window).
    PullRequest,
    /// Push Data (data window).
    PushData,
}

impl PacketKind {
    /// The sliding window the packet travels in (OCP Falcon 0.9 §9: Pull
    /// Requests in the request window, Push and Pull Data in the data
    /// window).
    pub const fn window(self) -> Window {
        match self {
            PacketKind::PullRequest => Window::Request,
            PacketKind::PullData | PacketKind::PushData => Window::Data,
        }
    }

    /// The wire packet type.
    pub const fn packet_type(self) -> PacketType {
        match self {
            PacketKind::PullData => PacketType::PullData,
            PacketKind::PullRequest => PacketType::PullRequest,
            PacketKind::PushData => PacketType::PushData,
        }
    }

    /// Starts a transaction, so it counts against ncwnd (RORC/DORC, OCP
    /// Falcon 0.9 §9.1.1–9.1.2): Pull Request and Push Data.
    pub const fn is_request(self) -> bool {
        matches!(self, PacketKind::PullRequest | PacketKind::PushData)
    }

    /// The kind of a received packet type, if it is a transaction packet.
    pub const fn from_packet_type(packet_type: PacketType) -> Option<PacketKind> {
        match packet_type {
            PacketType::PullData => Some(PacketKind::PullData),
            PacketType::PullRequest => Some(PacketKind::PullRequest),
            PacketType::PushData => Some(PacketKind::PushData),
            _ => None,
        }
    }
}

/// A packet the transaction sublayer wants sent. The delivery sublayer
/// assigns its PSN at first transmission (OCP Falcon 0.9 §9.1.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct OutgoingPacket {
    /// Pull Request, Pull Data or Push Data.
    pub kind: PacketKind,
    /// The transaction's RSN (for Pull Data: the Pull Request's RSN).
    pub rsn: Rsn,
    /// Request Length: for a Pull Request, the Pull Data bytes expected; for
    /// Push Data, the payload size (must equal `payload_len`); for Pull Data,
    /// ignored.
    pub request_length: u16,
    /// Bytes after the Falcon header (ULP headers, and data for Push and
    /// Pull Data).
    pub payload_len: u16,
    /// The payload, owned by the layer above.
    pub handle: PayloadHandle,
    /// The ULP asked for the AR bit (OCP Falcon 0.9 §7.2: the receiver
    /// acknowledges the packet at once): set on every transmission of it,
    /// whatever the AR policy (§9.1.6) decides.
    pub ack_request: bool,
}

/// What a retransmit-buffer slot rebuilds: a transaction packet or the
/// Resync that replaced it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SentKind {
    /// A Pull Data, Pull Request or Push Data.
    Transaction(PacketKind),
    /// A Resync with the original packet's PSN and RSN (OCP Falcon 0.9
    /// §9.1.8).
    Resync {
        /// Why.
        code: ResyncCode,
        /// The original packet's kind.
        original: PacketKind,
    },
}

impl SentKind {
    /// The kind of the original transaction packet.
    pub const fn original(self) -> PacketKind {
        match self {
            SentKind::Transaction(kind) | SentKind::Resync { original: kind, .. } => kind,
        }
    }

    /// The wire packet type sent for this slot.
    #[cfg(any(test, feature = "testing"))]
    pub const fn packet_type(self) -> PacketType {
        match self {
            SentKind::Transaction(kind) => kind.packet_type(),
            SentKind::Resync { .. } => PacketType::Resync,
        }
    }
}

/// Why a packet is being sent again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Retransmission {
    /// Early retransmission (EACK OOO-distance, EACK-OWN, RACK-TLP; OCP
    /// Falcon 0.9 §9.1.4).
    Early,
    /// Its retransmit timer expired (§9.1.5).
    Timeout,
}

/// A packet to put on the wire now, from
/// [`DeliveryConnection::poll_transmit`](super::DeliveryConnection::poll_transmit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxPacket {
    /// The Falcon header to emit: PSN, RSN, AR bit and the piggy-backed
    /// RBPSN/DBPSN are filled in. For Pull Request, Pull Data and Push Data
    /// the payload of `payload_len` bytes (the repr's payload range) comes
    /// from `handle`.
    pub repr: FalconRepr,
    /// The header's PSN (a Resync's is the original's), as the sender chose it:
    /// read back from `repr` it would cost a dispatch on the packet type per
    /// first transmission.
    pub psn: Psn,
    /// The payload to copy after the header (`None` for a Resync).
    pub handle: Option<PayloadHandle>,
    /// `None` for a first transmission.
    pub retransmission: Option<Retransmission>,
}

impl TxPacket {
    /// The packet's PSN.
    pub fn psn(&self) -> Psn {
        self.psn
    }

    /// The AR (ACK request) bit.
    #[cfg(any(test, feature = "testing"))]
    pub fn ack_request(&self) -> bool {
        match &self.repr {
            FalconRepr::PullRequest(r) => r.header.ack_request,
            FalconRepr::PullData(r) => r.header.ack_request,
            FalconRepr::PushData(r) => r.header.ack_request,
            FalconRepr::Resync(r) => r.header.ack_request,
            _ => false,
        }
    }
}

/// Receive metadata of one packet, from the stages before the delivery
/// sublayer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RxMeta {
    /// The sender's TX time from the PSP IV (`IV >> 17`, DESIGN.md §4): t1
    /// of a data packet, t3 of an ACK/NACK (OCP Falcon 0.9 §10.5).
    pub tx_time: FalconTime32,
    /// The IP ECN field was CE (congestion experienced).
    pub ecn_ce: bool,
    /// The received IP TTL / hop limit (hop count = initial TTL − this).
    pub ttl: u8,
}

/// A new in-window transaction packet, from
/// [`DeliveryConnection::handle_packet`](super::DeliveryConnection::handle_packet).
/// The layer above must answer with
/// [`admit`](super::DeliveryConnection::admit) (it took the packet: the
/// receiver marks it received, and acknowledged unless it is Push Data) or
/// [`refuse`](super::DeliveryConnection::refuse) (no resources, xLR: the
/// receiver sends a NACK and leaves the PSN open), before handing this
/// connection another packet. Dropping it unanswered is a silent drop: the
/// peer will retransmit.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "answer with admit or refuse"]
pub struct Arrival {
    /// Pull Request, Pull Data or Push Data.
    pub kind: PacketKind,
    /// The PSN in `kind`'s window.
    pub psn: Psn,
    /// The RSN from the header.
    pub rsn: Rsn,
    /// The Request Length field (Pull Request, Push Data), else 0.
    pub request_length: u16,
    /// The AR bit.
    pub ack_request: bool,
}
