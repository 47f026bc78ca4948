//! Fuzz target: every NVMe-over-Falcon parser (the vendor command packets
//! included), `nvme_ulp::wire`, and what a
//! target computes from a parsed packet (`nvme_ulp::split::ncmd_extent`,
//! `nvme_ulp::layout`).
//!
//! Arbitrary bytes into the dispatching parse and into each typed parser;
//! whatever parses must emit and parse back to the same value, and the
//! typed parsers must accept exactly what the dispatching one accepts. A
//! parsed request's NLB and NCNT fields go through `ncmd_extent`, a parsed
//! data part through `Layout::unpack` in every format: none may panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nvme_ulp::layout::{Format, Layout};
use nvme_ulp::split::ncmd_extent;
use nvme_ulp::wire::{
    command, nbth, request, response, write_data, CommandRequest, CommandResponse, NvmePacket,
    ReadRequest, ReadResponse, WriteCompletion, WriteDataRequest, WriteDataResponse, WriteRequest,
};

fn emit(packet: &NvmePacket<'_>) -> Vec<u8> {
    let mut out = vec![0x5A; packet.buffer_len()];
    packet.emit_header(&mut out);
    out[packet.header_len()..].copy_from_slice(packet.data());
    out
}

fn round_trip(packet: NvmePacket<'_>) {
    let out = emit(&packet);
    assert_eq!(NvmePacket::parse(&out), Ok(packet));
}

fuzz_target!(|data: &[u8]| {
    let parsed = NvmePacket::parse(data);
    let mut typed = 0;
    if let Ok(view) = nbth::Packet::new_checked(data) {
        let _ = (view.payload().len(), view.checked_type());
        if let Ok(repr) = WriteDataRequest::parse(&view) {
            typed += 1;
            round_trip(NvmePacket::WriteDataRequest(repr));
        }
    }
    if let Ok(view) = request::Packet::new_checked(data) {
        let _ = (view.dtype(), view.dspec(), view.slba());
        if let Ok(repr) = ReadRequest::parse(&view) {
            typed += 1;
            round_trip(NvmePacket::ReadRequest(repr));
        }
        if let Ok(repr) = WriteRequest::parse(&view) {
            typed += 1;
            round_trip(NvmePacket::WriteRequest(repr));
        }
    }
    if let Ok(view) = response::Packet::new_checked(data) {
        let _ = view.status_word();
        if let Ok(repr) = WriteCompletion::parse(&view) {
            typed += 1;
            round_trip(NvmePacket::WriteCompletion(repr));
        }
        if let Ok(repr) = ReadResponse::parse(&view) {
            typed += 1;
            round_trip(NvmePacket::ReadResponse {
                repr,
                data: view.data(),
            });
        }
    }
    if let Ok(view) = write_data::Packet::new_checked(data) {
        if let Ok(repr) = WriteDataResponse::parse(&view) {
            typed += 1;
            round_trip(NvmePacket::WriteDataResponse {
                repr,
                data: view.data(),
            });
        }
    }
    if let Ok(view) = command::RequestPacket::new_checked(data) {
        let _ = (view.sqe().opcode(), view.sqe().nsid(), view.target_sqid());
        if let Ok(repr) = CommandRequest::parse(&view) {
            typed += 1;
            round_trip(NvmePacket::CommandRequest {
                repr,
                data: view.data(),
            });
        }
    }
    if let Ok(view) = command::ResponsePacket::new_checked(data) {
        let _ = view.cqe_dw3();
        if let Ok(repr) = CommandResponse::parse(&view) {
            typed += 1;
            round_trip(NvmePacket::CommandResponse {
                repr,
                data: view.data(),
            });
        }
    }
    assert_eq!(typed, usize::from(parsed.is_ok()));
    let Ok(packet) = parsed else {
        return;
    };
    assert_eq!(packet.buffer_len(), data.len());
    let _ = format!("{packet}");

    let command = match packet {
        NvmePacket::ReadRequest(repr) => Some(repr.command),
        NvmePacket::WriteRequest(repr) => Some(repr.command),
        _ => None,
    };
    let mut data_out = [0u8; 4096];
    let mut metadata_out = [0u8; 128];
    for format in Format::ALL {
        if let Some(command) = command {
            let nbth = packet.nbth();
            let extent = ncmd_extent(
                format.lba_size,
                command.nlb,
                nbth.ncnt_total,
                nbth.ncnt_offset,
            );
            if let Ok(extent) = extent {
                assert!(extent.data_len > 0 && extent.data_len <= 4096);
                assert!(extent.payload_len(format) <= nvme_ulp::wire::MAX_DATA_LEN);
            }
        }
        for layout in [Layout::Dif, Layout::Dix] {
            let _ = layout.unpack(format, packet.data(), &mut data_out, &mut metadata_out);
        }
    }
});
