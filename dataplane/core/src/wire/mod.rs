//! Wire formats: zero-copy views and value types for every header on a
//! Falcon frame.
//!
//! Layer: wire, the bottom of `falcon-core`. Owns the byte layouts of
//! Ethernet II (+ one 802.1Q tag), IPv4, IPv6, UDP and all Falcon 0.9 headers,
//! the Internet checksum, and the frame helper that walks Ethernet → IP → UDP.
//! It never does IO, never keeps state across packets, never allocates, and
//! never panics on packet input: malformed bytes are a
//! [`ParseError`], which the pipeline counts as a
//! [`DropReason`](crate::drop::DropReason).
//!
//! # Two levels, as in smoltcp
//!
//! * **Views** (`Packet<T: AsRef<[u8]>>`, e.g. [`Ipv4Packet`], [`NackPacket`])
//!   read and write fields in place over any buffer (a slice, a `Vec`, an mbuf's
//!   data). Each module's private `field` module holds every field's byte range
//!   once. A view judges nothing: it can represent every value, reserved ones
//!   included. **After `check_len` (or `new_checked`) succeeds, no getter
//!   panics.** Use `new_checked` on received bytes. Do not use it to emit into
//!   a recycled buffer, whose stale length fields could make it fail: use
//!   `new_unchecked` and size the buffer with `Repr::buffer_len`.
//! * **Reprs** (e.g. [`Ipv4Repr`], [`PushDataRepr`]) are validated values:
//!   `Repr::parse(&packet)` checks what the view does not (versions, packet
//!   types, checksums, length agreement); `Repr::emit(&self, &mut packet)`
//!   writes every header field, reserved bits as zero, and never panics on a
//!   buffer of `buffer_len()` bytes. Payloads stay where they are: emit writes
//!   headers only, the caller fills (or already filled) the payload.
//!
//! Views and Reprs print one tcpdump-like line with `Display`. Checksum
//! verification returns `true` under `--cfg fuzzing` (smoltcp's habit) so
//! fuzzers reach the code behind it.
//!
//! # Decision: our own Ethernet/IPv4/IPv6/UDP views, not `smoltcp::wire`
//!
//! smoltcp's wire module is the model for this code, but we do not depend on
//! it. The four outer headers are small and fixed (about 1,500 lines of code
//! here, tests aside), and owning them buys what the dataplane needs:
//!
//! * errors that name the field and the layer, so every drop has a precise
//!   [`DropReason`](crate::drop::DropReason) (smoltcp's `wire::Error` is a unit
//!   struct, spec/style-models.md §1.5);
//! * one [`ParseError`], one `Display` style and one
//!   set of checksum rules across Ethernet, IP, UDP and Falcon (UDP checksum 0
//!   accepted over IPv4 and IPv6, as PSP requires; checks skippable when the NIC
//!   verified them);
//! * the exact scope we use (one 802.1Q tag, IPv4 options skipped, IPv6
//!   without extension headers) with no feature matrix to keep in sync
//!   (spec/style-models.md §1.4) and no extra dependency in the core.
//!
//! Like smoltcp's, the views are zero-copy over any `AsRef<[u8]>` (an mbuf's
//! data included) and writable in place (a simulated switch marks ECN CE, PLB
//! rewrites the flow label).
//!
//! # Falcon packet types (OCP Falcon 0.9 §7; spec/falcon.md §1–3)
//!
//! | type | code | header | after the header | view / Repr | spec |
//! |---|---|---|---|---|---|
//! | Pull Request | 0000b | 32 B | ULP headers | [`PullRequestPacket`] / [`PullRequestRepr`] | §7.3 p.27 |
//! | Pull Data | 0011b | 24 B | ULP headers + data (= the request length) | [`BasePacket`] / [`PullDataRepr`] | §7.4 p.28 |
//! | Push Data | 0101b | 28 B | ULP headers + data (= request length) | [`PushDataPacket`] / [`PushDataRepr`] | §7.5 p.29, §9 item 2 |
//! | Resync | 0110b | 32 B | – | [`ResyncPacket`] / [`ResyncRepr`] | §7.6 p.30–31 |
//! | NACK | 1000b | 40 B | – | [`NackPacket`] / [`NackRepr`] | §7.8 p.35–37 |
//! | BACK | 1001b | 32 B | – | [`BackPacket`] / [`BackRepr`] | §7.7.1 p.31–32 |
//! | EACK | 1010b | 72 B | – | [`EackPacket`] / [`EackRepr`] | §7.7.2 p.33–34 |
//! | any | byte 7 | – | – | [`FalconRepr`] (dispatch) | §7.2 p.25 |
//!
//! The base header (24 B, §7.2 p.24–26) starts every non-ACK packet:
//! [`BasePacket`] / [`BaseRepr`] / [`BaseHeader`]. The CC-info word of ACKs
//! and NACKs is [`CcInfo`] / [`NackCcInfo`]; t1 and t2 are [`FalconTime32`].
//!
//! # Outer headers
//!
//! | header | length | view / Repr | reference |
//! |---|---|---|---|
//! | Ethernet II | 14 B (18 B with 802.1Q) | [`EthernetPacket`] / [`EthernetRepr`] | IEEE 802.3, 802.1Q |
//! | IPv4 | 20–60 B | [`Ipv4Packet`] / [`Ipv4Repr`] | RFC 791 |
//! | IPv6 | 40 B | [`Ipv6Packet`] / [`Ipv6Repr`] | RFC 8200 |
//! | UDP | 8 B | [`UdpPacket`] / [`UdpRepr`] | RFC 768 |
//! | all three | – | [`frame::parse`] / [`FrameRepr::emit`] | – |

pub(crate) mod bytes;
pub mod checksum;
pub mod datapath;
mod error;
pub mod ethernet;
pub mod falcon;
pub mod frame;
pub mod ip;
pub mod ipv4;
pub mod ipv6;
pub mod udp;

#[cfg(test)]
mod fuzz_tests;
#[cfg(test)]
pub(crate) mod testing;

pub use checksum::{internet_checksum, PseudoHeader};
pub use datapath::{parse_rx, FrameTemplate, LocalAddresses, RxFrame};
pub use error::ParseError;
pub use ethernet::{
    Address as EthernetAddress, EtherType, Packet as EthernetPacket, Repr as EthernetRepr, VlanTag,
};
pub use falcon::{
    peek_connection_id, peek_packet_type, AckRueInfo, BackPacket, BackRepr, BaseHeader, BasePacket,
    BaseRepr, CcInfo, EackPacket, EackRepr, EcnCount, FalconRepr, FalconTime32, HopCount,
    NackCcInfo, NackCode, NackPacket, NackRepr, NackRueInfo, Own, PacketType, ProtocolType,
    PullDataRepr, PullRequestPacket, PullRequestRepr, PushDataPacket, PushDataRepr, ResyncCode,
    ResyncPacket, ResyncRepr, RnrTimeout, RxBufferLevel, Window, FALCON_VERSION,
};
pub use frame::{
    ChecksumChecks, EmitError, Frame, FrameError, FrameRepr, IpFields, Layers, UdpChecksum,
    PSP_UDP_PORT,
};
pub use ip::{Dscp, Ecn, IpProtocol};
pub use ipv4::{Packet as Ipv4Packet, Repr as Ipv4Repr};
pub use ipv6::{FlowLabel, Packet as Ipv6Packet, Repr as Ipv6Repr};
pub use udp::{Packet as UdpPacket, Repr as UdpRepr};
