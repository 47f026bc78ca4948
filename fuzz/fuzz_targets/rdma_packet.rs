//! Fuzz target: every RDMA-over-Falcon parser, `rdma_ulp::wire`.
//!
//! Arbitrary bytes into the dispatching parse as each of the three Falcon
//! packets, and into every header's view. Whatever parses must be as long
//! as its input, agree with the typed parser of each of its headers at the
//! offset the opcode table gives, and emit and parse back to the same
//! value, through a `UlpHeader` too when it has no payload.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rdma_ulp::wire::{
    atomic_ack_eth, atomic_eth, deth, ieth, immdt, oeth, rbth, reth, seth, steth, AtomicAckEth,
    AtomicEth, Deth, ExtendedHeader, FalconPacket, Ieth, ImmDt, Oeth, RdmaPacket, Reth, Seth,
    Steth,
};

fn views(data: &[u8]) {
    if let Ok(v) = rbth::Packet::new_checked(data) {
        let _ = (
            v.checked_opcode(),
            v.pad(),
            v.sn(),
            v.destination_qp(),
            v.rest(),
        );
    }
    if let Ok(v) = reth::Packet::new_checked(data) {
        let _ = (v.virtual_address(), v.r_key(), v.length());
    }
    if let Ok(v) = steth::Packet::new_checked(data) {
        let _ = (v.virtual_address(), v.l_key());
    }
    if let Ok(v) = atomic_eth::Packet::new_checked(data) {
        let _ = (v.virtual_address(), v.r_key(), v.swap_or_add(), v.compare());
    }
    if let Ok(v) = deth::Packet::new_checked(data) {
        let _ = (v.q_key(), v.source_qp());
    }
}

fn typed_parsers_agree(packet: &RdmaPacket<'_>, data: &[u8]) {
    let ext = packet.header.extensions();
    let mut at = rbth::HEADER_LEN;
    for &kind in packet.opcode().headers() {
        let b = &data[at..];
        match kind {
            ExtendedHeader::Reth => assert_eq!(
                reth::Packet::new_checked(b)
                    .and_then(|p| Reth::parse(&p))
                    .ok(),
                ext.reth()
            ),
            ExtendedHeader::Seth => assert_eq!(
                seth::Packet::new_checked(b)
                    .and_then(|p| Seth::parse(&p))
                    .ok(),
                ext.seth()
            ),
            ExtendedHeader::Oeth => assert_eq!(
                oeth::Packet::new_checked(b)
                    .and_then(|p| Oeth::parse(&p))
                    .ok(),
                ext.oeth()
            ),
            ExtendedHeader::Steth => assert_eq!(
                steth::Packet::new_checked(b)
                    .and_then(|p| Steth::parse(&p))
                    .ok(),
                ext.steth()
            ),
            ExtendedHeader::ImmDt => assert_eq!(
                immdt::Packet::new_checked(b)
                    .and_then(|p| ImmDt::parse(&p))
                    .ok(),
                ext.immediate()
            ),
            ExtendedHeader::AtomicEth => assert_eq!(
                atomic_eth::Packet::new_checked(b)
                    .and_then(|p| AtomicEth::parse(&p))
                    .ok(),
                ext.atomic()
            ),
            ExtendedHeader::AtomicAckEth => assert_eq!(
                atomic_ack_eth::Packet::new_checked(b)
                    .and_then(|p| AtomicAckEth::parse(&p))
                    .ok(),
                ext.atomic_ack()
            ),
            ExtendedHeader::Ieth => assert_eq!(
                ieth::Packet::new_checked(b)
                    .and_then(|p| Ieth::parse(&p))
                    .ok(),
                ext.ieth()
            ),
            ExtendedHeader::Deth => assert_eq!(
                deth::Packet::new_checked(b)
                    .and_then(|p| Deth::parse(&p))
                    .ok(),
                ext.deth()
            ),
        }
        at += kind.header_len();
    }
    assert_eq!(at, packet.header.header_len());
}

fuzz_target!(|data: &[u8]| {
    views(data);
    let mut accepted = 0;
    for falcon in FalconPacket::ALL {
        let Ok(packet) = RdmaPacket::parse(falcon, data) else {
            continue;
        };
        accepted += 1;
        assert_eq!(packet.opcode().falcon_packet(), falcon);
        assert_eq!(packet.buffer_len(), data.len());
        typed_parsers_agree(&packet, data);
        let mut out = vec![0x5A; packet.buffer_len()];
        packet.emit(&mut out);
        assert_eq!(RdmaPacket::parse(falcon, &out), Ok(packet));
        if !packet.opcode().carries_payload() {
            let ulp = packet.header.to_ulp_header();
            assert_eq!(ulp.as_slice(), data);
        }
        let _ = format!("{packet}");
    }
    // An opcode rides in one Falcon packet only.
    assert!(accepted <= 1);
});
