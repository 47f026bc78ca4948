//! The parsers together: dispatch on the packet type, round trips of every
//! packet, and arbitrary bytes into every parser (the stable-toolchain
//! counterpart of `fuzz/fuzz_targets/nvme_packet.rs`).

use proptest::prelude::*;

use super::*;
use crate::status::Status;

fn nbth() -> impl Strategy<Value = Nbth> {
    (
        (0u32..=0xFF_FFFF, any::<bool>(), 0u8..3, 0u32..=0xFF_FFFF),
        (any::<u8>(), 0u32..=0xFF_FFFF, any::<u8>(), 0u32..=0xFF_FFFF),
    )
        .prop_map(
            |(
                (function, data_invalid, group, target_tag),
                (ncnt_total, initiator_tag, ncnt_offset, icmd_id),
            )| Nbth {
                initiator_function: InitiatorFunction::truncating(function),
                data_invalid,
                group: [NcmdGroup::Whole, NcmdGroup::First, NcmdGroup::Second][usize::from(group)],
                target_tag: TargetTag::truncating(target_tag),
                ncnt_total,
                initiator_tag: InitiatorTag::truncating(initiator_tag),
                ncnt_offset,
                icmd_id: IcmdId::truncating(icmd_id),
            },
        )
}

fn command() -> impl Strategy<Value = Command> {
    (
        (any::<u16>(), any::<u16>(), any::<u64>(), any::<u16>()),
        (0u8..16, any::<bool>(), any::<bool>(), any::<u8>()),
        (any::<u32>(), any::<u16>(), any::<u16>(), any::<u8>()),
    )
        .prop_map(
            |(
                (initiator_nsid, target_nsid, slba, nlb),
                (prinfo, fua, limited_retry, dsm),
                (reference_tag, app_tag_mask, app_tag, target_sqid),
            )| Command {
                initiator_nsid,
                target_nsid,
                slba,
                nlb,
                prinfo: Prinfo::truncating(prinfo),
                fua,
                limited_retry,
                dsm,
                reference_tag,
                app_tag_mask,
                app_tag,
                target_sqid,
            },
        )
}

fn status() -> impl Strategy<Value = Status> {
    any::<u16>().prop_map(Status::from_half_word)
}

/// Any packet with a data part of its declared length, as owned bytes.
fn packet() -> impl Strategy<Value = (Vec<u8>, PacketType)> {
    let data = proptest::collection::vec(any::<u8>(), 0..=MAX_DATA_LEN);
    (
        nbth(),
        command(),
        status(),
        0u8..16,
        any::<u16>(),
        data,
        0u8..8,
        (
            proptest::collection::vec(any::<u8>(), 64),
            any::<(u32, u32, u16, u16, u16)>(),
        ),
    )
        .prop_map(
            |(nbth, command, status, dtype, dspec, mut data, code, (sqe, cqe))| {
                // Invariant: 0..8 are the assigned codes.
                let packet_type = PacketType::from_code(code).expect("assigned code");
                data.truncate(packet_type.max_data_len());
                let data_len = data.len() as u16;
                let mut sqe_bytes = [0u8; 64];
                sqe_bytes.copy_from_slice(&sqe);
                let (dw0, dw1, sqhd, sqid, cid) = cqe;
                let cqe = Cqe {
                    dw0,
                    dw1,
                    sqhd,
                    sqid,
                    cid,
                    status,
                };
                let packet = match packet_type {
                    PacketType::WriteRequest => NvmePacket::WriteRequest(WriteRequest {
                        nbth,
                        command,
                        dtype: DirectiveType::truncating(dtype),
                        dspec,
                    }),
                    PacketType::ReadRequest => {
                        NvmePacket::ReadRequest(ReadRequest { nbth, command })
                    }
                    PacketType::WriteDataRequest => {
                        NvmePacket::WriteDataRequest(WriteDataRequest { nbth })
                    }
                    PacketType::WriteCompletion => {
                        NvmePacket::WriteCompletion(WriteCompletion { nbth, status })
                    }
                    PacketType::WriteDataResponse => NvmePacket::WriteDataResponse {
                        repr: WriteDataResponse { nbth, data_len },
                        data: &[],
                    },
                    PacketType::ReadResponse => NvmePacket::ReadResponse {
                        repr: ReadResponse {
                            nbth,
                            status,
                            data_len,
                        },
                        data: &[],
                    },
                    PacketType::CommandRequest => NvmePacket::CommandRequest {
                        repr: CommandRequest {
                            nbth,
                            target_sqid: command.target_sqid,
                            sqe: Sqe(sqe_bytes),
                            data_len,
                        },
                        data: &[],
                    },
                    PacketType::CommandResponse => NvmePacket::CommandResponse {
                        repr: CommandResponse {
                            nbth,
                            cqe,
                            data_len,
                        },
                        data: &[],
                    },
                };
                let mut bytes = vec![0xA5; packet.header_len() + data.len()];
                packet.emit_header(&mut bytes);
                bytes[packet.header_len()..].copy_from_slice(&data);
                (bytes, packet_type)
            },
        )
}

/// Re-emits a parsed packet into fresh bytes.
fn emit(packet: &NvmePacket<'_>) -> Vec<u8> {
    let mut out = vec![0x5A; packet.buffer_len()];
    packet.emit_header(&mut out);
    out[packet.header_len()..].copy_from_slice(packet.data());
    out
}

/// Every parser on `bytes`: none panics, and whatever parses emits and
/// parses back to the same value. Returns the dispatching parse.
fn every_parser(bytes: &[u8]) -> Result<NvmePacket<'_>, ParseError> {
    let parsed = NvmePacket::parse(bytes);
    if let Ok(packet) = &parsed {
        assert_eq!(packet.buffer_len(), bytes.len());
        let out = emit(packet);
        assert_eq!(NvmePacket::parse(&out).as_ref(), Ok(packet));
        assert!(!format!("{packet}").is_empty());
    }
    let mut typed_ok = 0;
    if let Ok(view) = nbth::Packet::new_checked(bytes) {
        let _ = (view.payload(), view.checked_type());
        if let Ok(repr) = WriteDataRequest::parse(&view) {
            typed_ok += 1;
            let mut out = [0u8; nbth::HEADER_LEN];
            repr.emit(&mut nbth::Packet::new_unchecked(&mut out[..]));
            assert_eq!(
                WriteDataRequest::parse(&nbth::Packet::new_unchecked(&out[..])),
                Ok(repr)
            );
        }
    }
    if let Ok(view) = request::Packet::new_checked(bytes) {
        let _ = (view.dtype(), view.dspec(), view.slba());
        for repr in [
            ReadRequest::parse(&view).map(NvmePacket::ReadRequest),
            WriteRequest::parse(&view).map(NvmePacket::WriteRequest),
        ]
        .into_iter()
        .flatten()
        {
            typed_ok += 1;
            assert_eq!(NvmePacket::parse(&emit(&repr)), Ok(repr));
        }
    }
    if let Ok(view) = response::Packet::new_checked(bytes) {
        let _ = (view.status_word(), view.data());
        if let Ok(repr) = WriteCompletion::parse(&view) {
            typed_ok += 1;
            let packet = NvmePacket::WriteCompletion(repr);
            assert_eq!(NvmePacket::parse(&emit(&packet)), Ok(packet));
        }
        if let Ok(repr) = ReadResponse::parse(&view) {
            typed_ok += 1;
            assert_eq!(usize::from(repr.data_len), view.data().len());
            let packet = NvmePacket::ReadResponse {
                repr,
                data: view.data(),
            };
            assert_eq!(NvmePacket::parse(&emit(&packet)), Ok(packet));
        }
    }
    if let Ok(view) = write_data::Packet::new_checked(bytes) {
        if let Ok(repr) = WriteDataResponse::parse(&view) {
            typed_ok += 1;
            let packet = NvmePacket::WriteDataResponse {
                repr,
                data: view.data(),
            };
            assert_eq!(NvmePacket::parse(&emit(&packet)), Ok(packet));
        }
    }
    if let Ok(view) = command::RequestPacket::new_checked(bytes) {
        let _ = (view.sqe().opcode(), view.sqe().nsid(), view.target_sqid());
        if let Ok(repr) = CommandRequest::parse(&view) {
            typed_ok += 1;
            let packet = NvmePacket::CommandRequest {
                repr,
                data: view.data(),
            };
            assert_eq!(NvmePacket::parse(&emit(&packet)), Ok(packet));
        }
    }
    if let Ok(view) = command::ResponsePacket::new_checked(bytes) {
        let _ = view.cqe_dw3();
        if let Ok(repr) = CommandResponse::parse(&view) {
            typed_ok += 1;
            let packet = NvmePacket::CommandResponse {
                repr,
                data: view.data(),
            };
            assert_eq!(NvmePacket::parse(&emit(&packet)), Ok(packet));
        }
    }
    // The typed parsers accept exactly what the dispatching one accepts.
    assert_eq!(typed_ok, usize::from(parsed.is_ok()));
    parsed
}

#[test]
fn dispatch_names_the_fault() {
    assert_eq!(
        NvmePacket::parse(&[0x10; 31]),
        Err(ParseError::Truncated {
            what: "NBTH",
            need: 32,
            have: 31
        })
    );
    let mut bytes = [0u8; 64];
    bytes[0] = 0x20;
    assert_eq!(NvmePacket::parse(&bytes), Err(ParseError::BadVersion(2)));
    bytes[0] = 0x18;
    assert_eq!(
        NvmePacket::parse(&bytes),
        Err(ParseError::ReservedPacketType(8))
    );
    bytes[0] = 0x16;
    assert_eq!(
        NvmePacket::parse(&bytes),
        Err(ParseError::Truncated {
            what: "NVMe Command Request",
            need: 100,
            have: 64
        })
    );
    bytes[0] = 0x14;
    assert_eq!(
        NvmePacket::parse(&bytes[..40]),
        Err(ParseError::Truncated {
            what: "NVMe Read/Write Request",
            need: 64,
            have: 40
        })
    );
    assert!(matches!(
        NvmePacket::parse(&bytes),
        Ok(NvmePacket::ReadRequest(_))
    ));
    bytes[0] = 0x11;
    assert_eq!(
        NvmePacket::parse(&bytes),
        Err(ParseError::TrailingBytes {
            what: "Write Data Request",
            extra: 32
        })
    );
    bytes[0] = 0x15;
    let Ok(NvmePacket::ReadResponse { repr, data }) = NvmePacket::parse(&bytes) else {
        panic!("a Read Response");
    };
    assert_eq!(repr.data_len, 28);
    assert_eq!(data.as_ptr(), bytes[36..].as_ptr(), "zero copy");
    assert_eq!(
        ParseError::DataTooLong { len: 5000 }.name(),
        "nvme_data_too_long"
    );
    assert_eq!(
        ParseError::ReservedPacketType(9).to_string(),
        "reserved NVMe packet type 9"
    );
}

#[test]
fn header_len_per_type() {
    let lens: Vec<_> = PacketType::ALL.iter().map(|t| t.header_len()).collect();
    assert_eq!(lens, [64, 32, 36, 36, 64, 36, 100, 48]);
    let data: Vec<_> = PacketType::ALL.iter().map(|t| t.carries_data()).collect();
    assert_eq!(data, [false, false, true, false, false, true, true, true]);
    for packet_type in PacketType::ALL {
        assert_eq!(PacketType::from_code(packet_type.code()), Ok(packet_type));
    }
}

proptest! {
    #[test]
    fn every_packet_round_trips((bytes, packet_type) in packet()) {
        let packet = every_parser(&bytes);
        prop_assert_eq!(packet.map(|p| p.packet_type()), Ok(packet_type));
        let packet = NvmePacket::parse(&bytes).unwrap();
        prop_assert_eq!(emit(&packet), bytes);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = every_parser(&bytes);
    }

    /// Arbitrary bytes behind a valid version and type, so that the parsers
    /// get past the first byte.
    #[test]
    fn arbitrary_bodies_never_panic(
        code in 0u8..16,
        mut bytes in proptest::collection::vec(any::<u8>(), 1..4400),
    ) {
        bytes[0] = 0x10 | code;
        let parsed = every_parser(&bytes);
        let expected = match PacketType::from_code(code) {
            _ if bytes.len() < nbth::HEADER_LEN => Err(ParseError::Truncated {
                what: "",
                need: nbth::HEADER_LEN,
                have: bytes.len(),
            }),
            Err(err) => Err(err),
            Ok(t) if bytes.len() < t.header_len() => Err(ParseError::Truncated {
                what: "",
                need: t.header_len(),
                have: bytes.len(),
            }),
            Ok(t) if !t.carries_data() && bytes.len() > t.header_len() => {
                Err(ParseError::TrailingBytes { what: "", extra: bytes.len() - t.header_len() })
            }
            Ok(t) if bytes.len() - t.header_len() > t.max_data_len() => {
                Err(ParseError::DataTooLong { len: bytes.len() - t.header_len() })
            }
            Ok(t) => Ok(t),
        };
        // Compare without the `what` names.
        let strip = |r: Result<PacketType, ParseError>| r.map_err(|e| match e {
            ParseError::Truncated { need, have, .. } => ParseError::Truncated { what: "", need, have },
            ParseError::TrailingBytes { extra, .. } => ParseError::TrailingBytes { what: "", extra },
            other => other,
        });
        prop_assert_eq!(strip(parsed.map(|p| p.packet_type())), expected);
    }
}
