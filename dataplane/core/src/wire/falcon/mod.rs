//! Falcon 0.9 packet formats.
//!
//! Layer: wire. Owns a zero-copy view and a `Repr` for every header OCP Falcon
//! rev 0.9 §7 defines, the code points (§7.2–7.8), the CC-info word, the
//! on-wire timestamp, and the dispatch [`FalconRepr`]. It judges structure
//! only (lengths, version, type, Push Data length); windows, connections and
//! policy for unknown codes belong to the delivery and transaction layers.
//! It never panics on packet input and never allocates.
//!
//! The byte layouts are spec/falcon.md §1–3, recovered from the figures of
//! the OCP PDF (ocp/falcon-transport-rev0.9.pdf); where the PDF's text and
//! figures disagree, the decisions of spec/falcon.md §9 are applied and noted
//! at the point of use (Push Data: figure; RUE-info width: text; OWN bit
//! order).
//!
//! Reserved fields and bits are ignored on parse and written as zero on emit.
//! Unassigned codes parse to `Unknown(n)`; only a reserved *packet type*
//! fails ([`ParseError::UnknownPacketType`](crate::wire::ParseError)), since
//! its layout is unknown.

pub mod ack;
pub mod base;
pub mod cc_info;
pub mod codes;
pub(crate) mod common;
pub mod nack;
pub mod packet;
pub mod pull_data;
pub mod pull_request;
pub mod push_data;
pub mod resync;
pub mod time;

pub use ack::{BackPacket, BackRepr, EackPacket, EackRepr};
pub use base::{BaseHeader, Packet as BasePacket, Repr as BaseRepr};
pub use cc_info::{
    AckRueInfo, CcInfo, EcnCount, HopCount, NackCcInfo, NackRueInfo, Own, RxBufferLevel,
};
pub use codes::{NackCode, PacketType, ProtocolType, ResyncCode, RnrTimeout, Window};
pub use common::{FALCON_VERSION, PEEK_LEN};
pub use nack::{Packet as NackPacket, Repr as NackRepr};
pub use packet::{peek_connection_id, peek_packet_type, Repr as FalconRepr};
pub use pull_data::Repr as PullDataRepr;
pub use pull_request::{Packet as PullRequestPacket, Repr as PullRequestRepr};
pub use push_data::{Packet as PushDataPacket, Repr as PushDataRepr};
pub use resync::{Packet as ResyncPacket, Repr as ResyncRepr};
pub use time::FalconTime32;
