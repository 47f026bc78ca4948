//! Arbitrary bytes into every parser (tests only): the stable-toolchain
//! counterpart of the cargo-fuzz targets in `fuzz/`.
//!
//! Nothing may panic; every view that passes `check_len` must answer every
//! getter; whatever parses must emit and parse back to the same value, and
//! the dispatch must agree with the typed parsers.

use proptest::collection::vec;
use proptest::prelude::*;

use super::falcon::{ack, base, nack, pull_data, pull_request, push_data, resync};
use super::frame::{self, ChecksumChecks};
use super::testing::{falcon_repr, frame_repr};
use super::{ethernet, ipv4, ipv6, udp, FalconRepr, PacketType};

/// Parses `bytes` with a view + Repr pair; if it parses, emits into a fresh
/// buffer of `buffer_len()` bytes, parses that, and demands equality.
/// Returns the parsed Repr.
macro_rules! round_trip {
    ($bytes:expr, $($view:ident)::+, $($repr:ident)::+) => {{
        let bytes: &[u8] = $bytes;
        match $($view)::+::new_checked(bytes) {
            Err(_) => None,
            Ok(packet) => {
                let _ = format!("{packet}");
                match $($repr)::+::parse(&packet) {
                    Err(_) => None,
                    Ok(repr) => {
                        let _ = format!("{repr}");
                        let mut out = vec![0u8; repr.buffer_len()];
                        repr.emit(&mut $($view)::+::new_unchecked(&mut out[..]));
                        let reparsed = $($view)::+::new_checked(&out[..])
                            .and_then(|p| $($repr)::+::parse(&p));
                        assert_eq!(reparsed, Ok(repr), "{}", stringify!($($repr)::+));
                        Some(repr)
                    }
                }
            }
        }
    }};
}

fn exercise_outer(bytes: &[u8]) {
    if let Ok(packet) = ethernet::Packet::new_checked(bytes) {
        let _ = (packet.destination(), packet.source(), packet.vlan_tag());
        let _ = (packet.payload_ethertype(), packet.payload().len());
    }
    round_trip!(bytes, ethernet::Packet, ethernet::Repr);

    if let Ok(packet) = ipv4::Packet::new_checked(bytes) {
        let _ = (packet.dscp(), packet.ecn(), packet.ident(), packet.ttl());
        let _ = (
            packet.fragment_offset(),
            packet.protocol(),
            packet.checksum(),
        );
        let _ = (
            packet.src_addr(),
            packet.dst_addr(),
            packet.verify_checksum(),
        );
        let _ = (packet.options().len(), packet.payload().len());
        if let Ok(repr) = ipv4::Repr::parse_offloaded(&packet) {
            let mut out = vec![0u8; repr.buffer_len()];
            repr.emit(&mut ipv4::Packet::new_unchecked(&mut out[..]));
            let reparsed = ipv4::Repr::parse(&ipv4::Packet::new_checked(&out[..]).unwrap());
            assert_eq!(reparsed, Ok(repr));
        }
    }
    round_trip!(bytes, ipv4::Packet, ipv4::Repr);

    if let Ok(packet) = ipv6::Packet::new_checked(bytes) {
        let _ = (
            packet.dscp(),
            packet.ecn(),
            packet.flow_label(),
            packet.hop_limit(),
        );
        let _ = (packet.next_header(), packet.src_addr(), packet.dst_addr());
        let _ = packet.payload().len();
    }
    round_trip!(bytes, ipv6::Packet, ipv6::Repr);

    if let Ok(packet) = udp::Packet::new_checked(bytes) {
        let _ = (packet.src_port(), packet.dst_port(), packet.checksum());
        let _ = packet.payload().len();
    }
    round_trip!(bytes, udp::Packet, udp::Repr);

    for checks in [ChecksumChecks::ALL, ChecksumChecks::OFFLOADED] {
        match frame::parse_with(bytes, checks) {
            Err(err) => {
                let _ = err.to_string();
            }
            Ok(parsed) => {
                let _ = format!("{}", parsed.repr);
                assert!(parsed.layers.payload.end <= bytes.len());
                let payload_len = parsed.layers.payload.len();
                let mut out = vec![0u8; parsed.repr.buffer_len(payload_len)];
                let layers = parsed.repr.emit(&mut out, payload_len).unwrap();
                assert_eq!(layers.payload.len(), payload_len);
                let reparsed = frame::parse(&out).unwrap();
                assert_eq!(reparsed.repr, parsed.repr);
                assert_eq!(reparsed.layers, layers);
            }
        }
    }
}

fn exercise_falcon(bytes: &[u8]) {
    let _ = super::peek_connection_id(bytes);
    let peeked = super::peek_packet_type(bytes);

    let base = round_trip!(bytes, base::Packet, base::Repr);
    let pull_request = round_trip!(bytes, pull_request::Packet, pull_request::Repr);
    let pull_data = round_trip!(bytes, pull_data::Packet, pull_data::Repr);
    let push_data = round_trip!(bytes, push_data::Packet, push_data::Repr);
    let resync = round_trip!(bytes, resync::Packet, resync::Repr);
    let back = round_trip!(bytes, ack::BackPacket, ack::BackRepr);
    let eack = round_trip!(bytes, ack::EackPacket, ack::EackRepr);
    let nack = round_trip!(bytes, nack::Packet, nack::Repr);

    if let Ok(packet) = ack::EackPacket::new_checked(bytes) {
        let _ = (
            packet.data_ack_bitmap(),
            packet.data_rx_bitmap(),
            packet.request_bitmap(),
        );
        let _ = (packet.t1(), packet.t2(), packet.cc_info());
    }
    if let Ok(packet) = nack::Packet::new_checked(bytes) {
        let _ = (
            packet.nack_psn(),
            packet.nack_code(),
            packet.rnr_timeout().as_nanos(),
        );
        let _ = (packet.window(), packet.ulp_nack_code(), packet.cc_info());
    }

    match FalconRepr::parse(bytes) {
        Err(err) => {
            let _ = err.to_string();
        }
        Ok(repr) => {
            let _ = format!("{repr}");
            assert_eq!(peeked, Ok(repr.packet_type()));
            assert!(base.is_some(), "a Falcon packet has a version-1 prefix");
            match repr {
                FalconRepr::PullRequest(r) => assert_eq!(pull_request, Some(r)),
                FalconRepr::PullData(r) => assert_eq!(pull_data, Some(r)),
                FalconRepr::PushData(r) => assert_eq!(push_data, Some(r)),
                FalconRepr::Resync(r) => assert_eq!(resync, Some(r)),
                FalconRepr::Back(r) => assert_eq!(back, Some(r)),
                FalconRepr::Eack(r) => assert_eq!(eack, Some(r)),
                FalconRepr::Nack(r) => assert_eq!(nack, Some(r)),
            }
            if let Some(range) = repr.payload_range() {
                assert_eq!(range.end, bytes.len(), "data packets end at the buffer end");
            }
            let mut out = vec![0u8; repr.buffer_len()];
            repr.emit(&mut out);
            assert_eq!(FalconRepr::parse(&out), Ok(repr));
        }
    }
}

fn exercise(bytes: &[u8]) {
    exercise_outer(bytes);
    exercise_falcon(bytes);
}

/// Bytes that start like a Falcon header (version 1, any type) so the typed
/// parsers get past their first checks.
fn falcon_like() -> impl Strategy<Value = Vec<u8>> {
    (vec(any::<u8>(), 8..120), 0u8..16).prop_map(|(mut bytes, packet_type)| {
        bytes[0] = 0x10 | (bytes[0] & 0x0F);
        bytes[7] = (bytes[7] & 0xE1) | (packet_type << 1);
        bytes
    })
}

/// A valid packet with a few bytes overwritten and maybe truncated.
fn mutated(valid: Vec<u8>, edits: Vec<(usize, u8)>, cut: usize) -> Vec<u8> {
    let mut bytes = valid;
    if !bytes.is_empty() {
        for (at, value) in edits {
            let len = bytes.len();
            bytes[at % len] = value;
        }
    }
    let keep = bytes.len().saturating_sub(cut);
    bytes.truncate(keep);
    bytes
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in vec(any::<u8>(), 0..160)) {
        exercise(&bytes);
    }

    #[test]
    fn falcon_like_bytes_never_panic(bytes in falcon_like()) {
        exercise_falcon(&bytes);
    }

    #[test]
    fn mutated_falcon_packets_never_panic(
        repr in falcon_repr(),
        edits in vec((any::<usize>(), any::<u8>()), 0..4),
        cut in prop_oneof![Just(0usize), 0usize..80],
    ) {
        let mut valid = vec![0u8; repr.buffer_len()];
        repr.emit(&mut valid);
        prop_assert_eq!(FalconRepr::parse(&valid), Ok(repr));
        exercise_falcon(&mutated(valid, edits, cut));
    }

    #[test]
    fn mutated_frames_never_panic(
        repr in frame_repr(),
        payload in vec(any::<u8>(), 0..64),
        edits in vec((any::<usize>(), any::<u8>()), 0..4),
        cut in prop_oneof![Just(0usize), 0usize..80],
    ) {
        let mut valid = vec![0u8; repr.buffer_len(payload.len())];
        valid[repr.header_len()..].copy_from_slice(&payload);
        repr.emit(&mut valid, payload.len()).unwrap();
        exercise(&mutated(valid, edits, cut));
    }
}

#[test]
fn every_reserved_type_is_refused_by_the_dispatch() {
    for code in [1u8, 2, 4, 7, 11, 12, 13, 14, 15] {
        let mut bytes = [0u8; 80];
        bytes[0] = 0x10;
        bytes[7] = code << 1;
        assert_eq!(
            FalconRepr::parse(&bytes),
            Err(crate::wire::ParseError::UnknownPacketType(code))
        );
        assert_eq!(
            super::peek_packet_type(&bytes),
            Ok(PacketType::Unknown(code))
        );
    }
}
