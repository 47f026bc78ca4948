//! The parsers together: round trips of every header and every opcode,
//! the typed parsers against the dispatching one, and arbitrary bytes into
//! every parser (the stable-toolchain counterpart of
//! `fuzz/fuzz_targets/rdma_packet.rs`).

use proptest::prelude::*;
use proptest::strategy::ValueTree;

use super::*;

fn reth() -> impl Strategy<Value = Reth> {
    any::<(u64, u32, u32)>().prop_map(|(virtual_address, r_key, length)| Reth {
        virtual_address,
        r_key: RKey(r_key),
        length,
    })
}

fn seth() -> impl Strategy<Value = Seth> {
    any::<u32>().prop_map(|rmsn| Seth {
        rmsn: Rmsn::new(rmsn),
    })
}

fn oeth() -> impl Strategy<Value = Oeth> {
    any::<u32>().prop_map(|message_offset| Oeth { message_offset })
}

fn steth() -> impl Strategy<Value = Steth> {
    any::<(u64, u32)>().prop_map(|(virtual_address, l_key)| Steth {
        virtual_address,
        l_key: LKey(l_key),
    })
}

fn immediate() -> impl Strategy<Value = ImmDt> {
    any::<u32>().prop_map(|data| ImmDt { data })
}

fn ieth() -> impl Strategy<Value = Ieth> {
    any::<u32>().prop_map(|r_key| Ieth { r_key: RKey(r_key) })
}

fn atomic() -> impl Strategy<Value = AtomicEth> {
    any::<(u64, u32, u64, u64)>().prop_map(|(virtual_address, r_key, swap_or_add, compare)| {
        AtomicEth {
            virtual_address,
            r_key: RKey(r_key),
            swap_or_add,
            compare,
        }
    })
}

fn atomic_ack() -> impl Strategy<Value = AtomicAckEth> {
    any::<u64>().prop_map(|original_data| AtomicAckEth { original_data })
}

fn deth() -> impl Strategy<Value = Deth> {
    (any::<u32>(), 0u32..=0xFF_FFFF).prop_map(|(q_key, source_qp)| Deth {
        q_key: QKey(q_key),
        source_qp: Qpn::truncating(source_qp),
    })
}

/// Extensions of `layout`, every field arbitrary.
fn extensions(layout: HeaderLayout) -> BoxedStrategy<Extensions> {
    match layout {
        HeaderLayout::Send => (seth(), oeth())
            .prop_map(|(seth, oeth)| Extensions::Send { seth, oeth })
            .boxed(),
        HeaderLayout::SendImmediate => (seth(), oeth(), immediate())
            .prop_map(|(seth, oeth, immediate)| Extensions::SendImmediate {
                seth,
                oeth,
                immediate,
            })
            .boxed(),
        HeaderLayout::SendInvalidate => (seth(), oeth(), ieth())
            .prop_map(|(seth, oeth, ieth)| Extensions::SendInvalidate { seth, oeth, ieth })
            .boxed(),
        HeaderLayout::Write => reth().prop_map(|reth| Extensions::Write { reth }).boxed(),
        HeaderLayout::WriteImmediate => (reth(), seth(), immediate())
            .prop_map(|(reth, seth, immediate)| Extensions::WriteImmediate {
                reth,
                seth,
                immediate,
            })
            .boxed(),
        HeaderLayout::ReadRequest => (reth(), seth(), steth())
            .prop_map(|(reth, seth, steth)| Extensions::ReadRequest { reth, seth, steth })
            .boxed(),
        HeaderLayout::ReadResponse => steth()
            .prop_map(|steth| Extensions::ReadResponse { steth })
            .boxed(),
        HeaderLayout::AtomicRequest => (atomic(), seth(), steth())
            .prop_map(|(atomic, seth, steth)| Extensions::AtomicRequest {
                atomic,
                seth,
                steth,
            })
            .boxed(),
        HeaderLayout::AtomicResponse => (atomic_ack(), steth())
            .prop_map(|(atomic_ack, steth)| Extensions::AtomicResponse { atomic_ack, steth })
            .boxed(),
        HeaderLayout::Datagram => deth()
            .prop_map(|deth| Extensions::Datagram { deth })
            .boxed(),
        HeaderLayout::DatagramImmediate => (deth(), immediate())
            .prop_map(|(deth, immediate)| Extensions::DatagramImmediate { deth, immediate })
            .boxed(),
    }
}

fn opcode() -> impl Strategy<Value = Opcode> {
    proptest::sample::select(Opcode::ALL)
}

/// Any packet of `opcode`'s headers, a payload if it carries one, and a pad
/// within that payload, as owned bytes (pad bytes zero).
fn packet_of(opcode: Opcode) -> impl Strategy<Value = (RdmaHeader, Vec<u8>)> {
    let payload_len = if opcode.carries_payload() { 64 } else { 0 };
    (
        any::<(bool, bool, bool)>(),
        0u8..4,
        0u32..=0xFF_FFFF,
        any::<u32>(),
        extensions(opcode.layout()),
        proptest::collection::vec(any::<u8>(), 0..=payload_len),
    )
        .prop_map(
            move |((solicited_event, ack_request, complete_in_error), pad, qp, sn, ext, data)| {
                let pad = if opcode.carries_payload() { pad } else { 0 };
                let rbth = Rbth {
                    opcode,
                    solicited_event,
                    ack_request,
                    complete_in_error,
                    pad: PadCount::truncating(pad),
                    destination_qp: Qpn::truncating(qp),
                    sn: Sn::new(sn),
                };
                // Invariant: the strategy drew the opcode's own layout.
                let header = RdmaHeader::new(rbth, ext).expect("layout of the opcode");
                let packet = RdmaPacket {
                    header,
                    payload: &data,
                };
                let mut bytes = vec![0xA5; packet.buffer_len()];
                packet.emit(&mut bytes);
                (header, bytes)
            },
        )
}

fn packet() -> impl Strategy<Value = (RdmaHeader, Vec<u8>)> {
    opcode().prop_flat_map(packet_of)
}

/// Re-emits a parsed packet into fresh bytes.
fn emit(packet: &RdmaPacket<'_>) -> Vec<u8> {
    let mut out = vec![0x5A; packet.buffer_len()];
    packet.emit(&mut out);
    out
}

/// What the dispatching parse must return for `bytes` in `falcon`, from the
/// RBTH's bytes and the table alone: the opcode and the payload length, or
/// the fault's name.
fn oracle(falcon: FalconPacket, bytes: &[u8]) -> Result<(Opcode, usize), &'static str> {
    if bytes.len() < 12 {
        return Err("rdma_truncated");
    }
    if bytes[0] >> 4 != 1 {
        return Err("rdma_bad_version");
    }
    let Some(&opcode) = Opcode::ALL.iter().find(|o| o.code() == bytes[3]) else {
        return Err("rdma_reserved_opcode");
    };
    if opcode.falcon_packet() != falcon {
        return Err("rdma_opcode_not_allowed");
    }
    let Some(rest) = bytes.len().checked_sub(opcode.header_len()) else {
        return Err("rdma_truncated");
    };
    if !opcode.carries_payload() && rest > 0 {
        return Err("rdma_trailing_bytes");
    }
    let pad = usize::from((bytes[2] >> 2) & 3);
    rest.checked_sub(pad)
        .map(|payload| (opcode, payload))
        .ok_or("rdma_pad_beyond_payload")
}

/// Each extended header of a parsed packet read again with its own typed
/// view and `Repr` at the offset the table gives; equal to the dispatching
/// parse's.
fn typed_parsers_agree(packet: &RdmaPacket<'_>, bytes: &[u8]) {
    let rbth = Rbth::parse(&rbth::Packet::new_checked(bytes).unwrap()).unwrap();
    assert_eq!(&rbth, packet.header.rbth());
    let ext = packet.header.extensions();
    let mut at = rbth::HEADER_LEN;
    for &kind in packet.opcode().headers() {
        let b = &bytes[at..];
        match kind {
            ExtendedHeader::Reth => assert_eq!(
                Reth::parse(&reth::Packet::new_checked(b).unwrap()).ok(),
                ext.reth()
            ),
            ExtendedHeader::Seth => assert_eq!(
                Seth::parse(&seth::Packet::new_checked(b).unwrap()).ok(),
                ext.seth()
            ),
            ExtendedHeader::Oeth => assert_eq!(
                Oeth::parse(&oeth::Packet::new_checked(b).unwrap()).ok(),
                ext.oeth()
            ),
            ExtendedHeader::Steth => assert_eq!(
                Steth::parse(&steth::Packet::new_checked(b).unwrap()).ok(),
                ext.steth()
            ),
            ExtendedHeader::ImmDt => assert_eq!(
                ImmDt::parse(&immdt::Packet::new_checked(b).unwrap()).ok(),
                ext.immediate()
            ),
            ExtendedHeader::AtomicEth => assert_eq!(
                AtomicEth::parse(&atomic_eth::Packet::new_checked(b).unwrap()).ok(),
                ext.atomic()
            ),
            ExtendedHeader::AtomicAckEth => assert_eq!(
                AtomicAckEth::parse(&atomic_ack_eth::Packet::new_checked(b).unwrap()).ok(),
                ext.atomic_ack()
            ),
            ExtendedHeader::Ieth => assert_eq!(
                Ieth::parse(&ieth::Packet::new_checked(b).unwrap()).ok(),
                ext.ieth()
            ),
            ExtendedHeader::Deth => assert_eq!(
                Deth::parse(&deth::Packet::new_checked(b).unwrap()).ok(),
                ext.deth()
            ),
        }
        at += kind.header_len();
    }
    assert_eq!(at, packet.header.header_len());
    let payload = &bytes[at..at + packet.payload.len()];
    assert_eq!(payload.as_ptr(), packet.payload.as_ptr(), "zero copy");
}

/// Every view's accessors on arbitrary bytes: none panics after
/// `new_checked`, and `rest` never does.
fn every_view(bytes: &[u8]) {
    if let Ok(v) = rbth::Packet::new_checked(bytes) {
        let _ = (v.checked_opcode(), v.pad(), v.ack_request(), v.sn());
        let _ = (v.destination_qp(), v.solicited_event(), v.rest());
    }
    if let Ok(v) = reth::Packet::new_checked(bytes) {
        let _ = (v.virtual_address(), v.r_key(), v.length(), v.rest());
    }
    if let Ok(v) = seth::Packet::new_checked(bytes) {
        let _ = (v.rmsn(), v.rest());
    }
    if let Ok(v) = oeth::Packet::new_checked(bytes) {
        let _ = (v.message_offset(), v.rest());
    }
    if let Ok(v) = steth::Packet::new_checked(bytes) {
        let _ = (v.virtual_address(), v.l_key(), v.rest());
    }
    if let Ok(v) = immdt::Packet::new_checked(bytes) {
        let _ = (v.data(), v.rest());
    }
    if let Ok(v) = atomic_eth::Packet::new_checked(bytes) {
        let _ = (v.virtual_address(), v.r_key(), v.swap_or_add(), v.compare());
    }
    if let Ok(v) = atomic_ack_eth::Packet::new_checked(bytes) {
        let _ = (v.original_data(), v.rest());
    }
    if let Ok(v) = ieth::Packet::new_checked(bytes) {
        let _ = (v.r_key(), v.rest());
    }
    if let Ok(v) = deth::Packet::new_checked(bytes) {
        let _ = (v.q_key(), v.source_qp(), v.rest());
    }
    let _ = rbth::Packet::new_unchecked(bytes).rest();
}

/// Every parser on `bytes` in every Falcon packet: none panics, the
/// dispatching parse returns what the oracle says, whatever parses agrees
/// with the typed parsers and emits and parses back to the same value.
fn every_parser(bytes: &[u8]) {
    every_view(bytes);
    for falcon in FalconPacket::ALL {
        let parsed = RdmaPacket::parse(falcon, bytes);
        let expected = oracle(falcon, bytes);
        match (&parsed, expected) {
            (Ok(packet), Ok((opcode, payload_len))) => {
                assert_eq!(
                    (packet.opcode(), packet.payload.len()),
                    (opcode, payload_len)
                );
                assert_eq!(packet.buffer_len(), bytes.len());
                typed_parsers_agree(packet, bytes);
                let out = emit(packet);
                assert_eq!(RdmaPacket::parse(falcon, &out).as_ref(), Ok(packet));
                // The headers alone (a Pull Request's whole payload) parse
                // back, unless the RBTH counts pad bytes that are not there.
                assert_eq!(
                    RdmaPacket::parse(falcon, &packet.header.to_ulp_header()).map(|p| p.header),
                    if packet.opcode().carries_payload()
                        && packet.header.rbth().pad != PadCount::ZERO
                    {
                        Err(ParseError::PadBeyondPayload {
                            pad: packet.header.rbth().pad.value(),
                            available: 0,
                        })
                    } else {
                        Ok(packet.header)
                    }
                );
                assert!(!packet.to_string().is_empty());
            }
            (Err(err), Err(name)) => {
                assert_eq!(err.name(), name, "{err}");
                assert!(!err.to_string().is_empty());
            }
            (parsed, expected) => panic!("parse {parsed:?}, oracle {expected:?}"),
        }
    }
}

#[test]
fn every_header_round_trips_per_opcode() {
    // One packet per opcode with fixed field values: emit, parse in its own
    // Falcon packet, refused in the two others.
    for &opcode in Opcode::ALL {
        let mut runner = proptest::test_runner::TestRunner::deterministic();
        let (header, bytes) = packet_of(opcode).new_tree(&mut runner).unwrap().current();
        assert_eq!(header.opcode(), opcode);
        let parsed = RdmaPacket::parse(opcode.falcon_packet(), &bytes).unwrap();
        assert_eq!(parsed.header, header);
        assert_eq!(emit(&parsed), bytes, "{opcode}");
        for falcon in FalconPacket::ALL {
            if falcon != opcode.falcon_packet() {
                assert_eq!(
                    RdmaPacket::parse(falcon, &bytes),
                    Err(ParseError::OpcodeNotAllowed {
                        opcode,
                        found: falcon
                    })
                );
            }
        }
    }
}

proptest! {
    #[test]
    fn every_packet_round_trips((header, bytes) in packet()) {
        let packet = RdmaPacket::parse(header.opcode().falcon_packet(), &bytes);
        prop_assert_eq!(packet.map(|p| p.header), Ok(header));
        let packet = RdmaPacket::parse(header.opcode().falcon_packet(), &bytes).unwrap();
        prop_assert_eq!(emit(&packet), bytes.clone());
        every_parser(&bytes);
    }

    #[test]
    fn every_header_round_trips(
        reth in reth(), seth in seth(), oeth in oeth(), steth in steth(),
        imm in immediate(), ieth in ieth(), atomic in atomic(),
        atomic_ack in atomic_ack(), deth in deth(),
    ) {
        let mut b = [0u8; 28];
        reth.emit(&mut reth::Packet::new_unchecked(&mut b[..]));
        prop_assert_eq!(Reth::parse(&reth::Packet::new_checked(&b[..16]).unwrap()), Ok(reth));
        seth.emit(&mut seth::Packet::new_unchecked(&mut b[..]));
        prop_assert_eq!(Seth::parse(&seth::Packet::new_checked(&b[..4]).unwrap()), Ok(seth));
        oeth.emit(&mut oeth::Packet::new_unchecked(&mut b[..]));
        prop_assert_eq!(Oeth::parse(&oeth::Packet::new_checked(&b[..4]).unwrap()), Ok(oeth));
        steth.emit(&mut steth::Packet::new_unchecked(&mut b[..]));
        prop_assert_eq!(Steth::parse(&steth::Packet::new_checked(&b[..12]).unwrap()), Ok(steth));
        imm.emit(&mut immdt::Packet::new_unchecked(&mut b[..]));
        prop_assert_eq!(ImmDt::parse(&immdt::Packet::new_checked(&b[..4]).unwrap()), Ok(imm));
        ieth.emit(&mut ieth::Packet::new_unchecked(&mut b[..]));
        prop_assert_eq!(Ieth::parse(&ieth::Packet::new_checked(&b[..4]).unwrap()), Ok(ieth));
        atomic.emit(&mut atomic_eth::Packet::new_unchecked(&mut b[..]));
        prop_assert_eq!(
            AtomicEth::parse(&atomic_eth::Packet::new_checked(&b[..28]).unwrap()),
            Ok(atomic)
        );
        atomic_ack.emit(&mut atomic_ack_eth::Packet::new_unchecked(&mut b[..]));
        prop_assert_eq!(
            AtomicAckEth::parse(&atomic_ack_eth::Packet::new_checked(&b[..8]).unwrap()),
            Ok(atomic_ack)
        );
        deth.emit(&mut deth::Packet::new_unchecked(&mut b[..]));
        prop_assert_eq!(Deth::parse(&deth::Packet::new_checked(&b[..8]).unwrap()), Ok(deth));
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..100)) {
        every_parser(&bytes);
    }

    /// Arbitrary bytes behind version 1 and an assigned opcode, so that the
    /// parsers get past the RBTH.
    #[test]
    fn arbitrary_bodies_never_panic(
        opcode in opcode(),
        mut bytes in proptest::collection::vec(any::<u8>(), 12..100),
    ) {
        bytes[0] = 0x10 | (bytes[0] & 0x0F);
        bytes[3] = opcode.code();
        every_parser(&bytes);
    }
}
