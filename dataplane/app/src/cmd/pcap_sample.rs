//! `falcon pcap sample`: writes a capture holding one packet of every Falcon
//! type, each in Ethernet/IP/UDP/PSP as the dataplane builds it (PSP sealed
//! in place with a TX SA whose key is derived from the given master keys;
//! the `falcon` binary defaults to the built-in example keys,
//! [`crate::refcfg::example_keys`]).
//!
//! It is the fixture for trying `falcon pcap decode`, Wireshark or another
//! decoder, and the integration tests decode it back field by field.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::Path;
use std::time::Duration;

use falcon_core::ids::{ConnectionId, DestinationFunction};
use falcon_core::seq::{Psn, Rsn};
use falcon_core::wire::falcon::{
    AckRueInfo, BaseHeader, CcInfo, NackCcInfo, NackCode, NackRueInfo, Own, ProtocolType,
    PullDataRepr, PullRequestRepr, PushDataRepr, ResyncCode, ResyncRepr, RnrTimeout, Window,
};
use falcon_core::wire::frame::{FrameRepr, IpFields, UdpChecksum, PSP_UDP_PORT};
use falcon_core::wire::{
    BackRepr, Dscp, EackRepr, Ecn, EcnCount, EthernetAddress, FalconRepr, FalconTime32, FlowLabel,
    HopCount, NackRepr, PacketType, RxBufferLevel,
};
use psp::{Backend, MasterKeys, Spi, TxSa, TxSaConfig, Version, ICV_LEN};

use crate::error::{AppError, Result};
use crate::pcapio::{Frame, Writer};

/// SPI of the sample SA (top bit set: master key 1).
pub const SAMPLE_SPI: Spi = Spi(0x9A34_5678);
/// Connection id of the sample packets.
pub const SAMPLE_CID: u32 = 0x00_1234;
/// First TX timestamp (picoseconds since the clock epoch: 1 s).
const START_PS: u64 = 1_000_000_000_000;

/// The Falcon packets of the sample, in order, with their payload lengths.
pub fn sample_packets() -> Vec<FalconRepr> {
    let cid = ConnectionId::truncating(SAMPLE_CID);
    let base = |psn: u32, rsn: u32, ack_request: bool| BaseHeader {
        connection_id: cid,
        destination_function: DestinationFunction::truncating(0x00_0102),
        protocol: ProtocolType::Rdma,
        ack_request,
        data_bpsn: Psn::new(0xFFFF_FFF0),
        request_bpsn: Psn::new(7),
        psn: Psn::new(psn),
        rsn: Rsn::new(rsn),
    };
    let cc = CcInfo {
        hop_count: HopCount::truncating(3),
        rx_buffer_level: RxBufferLevel::truncating(12),
        ecn_count: EcnCount::truncating(42),
        rue_info: AckRueInfo::truncating(0x2A_BCDE),
        own: Own {
            request: false,
            data: true,
        },
    };
    let back = BackRepr {
        connection_id: cid,
        data_bpsn: Psn::new(0xFFFF_FFF8),
        request_bpsn: Psn::new(9),
        t1: FalconTime32::from_picos(START_PS),
        t2: FalconTime32::from_picos(START_PS + 2_000_000),
        cc_info: cc,
    };
    vec![
        FalconRepr::PullRequest(PullRequestRepr {
            header: base(7, 100, false),
            request_length: 256,
            payload_len: 0,
        }),
        FalconRepr::PushData(PushDataRepr {
            header: base(0xFFFF_FFF0, 101, true),
            request_length: 64,
        }),
        FalconRepr::PullData(PullDataRepr {
            header: base(0xFFFF_FFF1, 100, false),
            payload_len: 256,
        }),
        FalconRepr::Resync(ResyncRepr {
            header: base(0xFFFF_FFF2, 102, false),
            code: ResyncCode::TargetUlpCompletionInError,
            original_packet_type: PacketType::PushData,
            vendor_defined: 0,
        }),
        FalconRepr::Back(back),
        FalconRepr::Eack(EackRepr {
            back,
            data_ack_bitmap: 0b1010_0000,
            data_rx_bitmap: 0b1111_0001,
            request_bitmap: 0b110,
        }),
        FalconRepr::Nack(NackRepr {
            connection_id: cid,
            data_bpsn: Psn::new(0xFFFF_FFF8),
            request_bpsn: Psn::new(9),
            t1: FalconTime32::from_picos(START_PS),
            t2: FalconTime32::from_picos(START_PS + 3_000_000),
            cc_info: NackCcInfo {
                hop_count: HopCount::truncating(3),
                rx_buffer_level: RxBufferLevel::truncating(31),
                ecn_count: EcnCount::truncating(43),
                rue_info: NackRueInfo::truncating(0xAB_CDEF),
            },
            nack_psn: Psn::new(0xFFFF_FFF9),
            code: NackCode::ReceiverNotReady,
            rnr_timeout: RnrTimeout::truncating(14),
            window: Window::Data,
            ulp_nack_code: 32,
        }),
    ]
}

/// Builds the sample frames: IPv4 for the data packets, IPv6 (with a flow
/// label) for the ACKs and the NACK, so both outer headers appear.
pub fn sample_frames(keys: &MasterKeys, backend: Backend) -> Result<Vec<Frame>> {
    let key = keys.derive(SAMPLE_SPI, Version::Aes128Gcm);
    let mut tx = TxSa::new(backend, &key, TxSaConfig::falcon(SAMPLE_SPI, None))
        .map_err(|e| AppError::Failed(format!("TX SA: {e}")))?;
    let v4 = IpFields::V4 {
        src: Ipv4Addr::new(10, 0, 0, 1),
        dst: Ipv4Addr::new(10, 0, 0, 2),
        ttl: 64,
        dscp: Dscp::truncating(26),
        ecn: Ecn::Ect0,
        ident: 0,
        dont_fragment: true,
    };
    let v6 = IpFields::V6 {
        src: Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2),
        dst: Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1),
        hop_limit: 64,
        dscp: Dscp::truncating(26),
        ecn: Ecn::Ect0,
        flow_label: FlowLabel::truncating(0xBEEF),
    };
    let mut frames = Vec::new();
    for (i, falcon) in sample_packets().iter().enumerate() {
        let ip = if falcon.payload_range().is_some() || matches!(falcon, FalconRepr::Resync(_)) {
            v4
        } else {
            v6
        };
        let outer = FrameRepr {
            destination: EthernetAddress([0x02, 0, 0, 0, 0, 2]),
            source: EthernetAddress([0x02, 0, 0, 0, 0, 1]),
            vlan: None,
            ip,
            src_port: 0xC000 | (SAMPLE_CID as u16 & 0x3FFF),
            dst_port: PSP_UDP_PORT,
            udp_checksum: UdpChecksum::Zero,
        };
        let falcon_len = falcon.buffer_len();
        let psp_len = tx.header_len() + falcon_len + ICV_LEN;
        let headroom = outer.header_len();
        let mut data = vec![0u8; headroom + psp_len];
        let at = headroom + tx.header_len();
        falcon.emit(&mut data[at..]);
        if let Some(range) = falcon.payload_range() {
            for (j, byte) in data[at + range.start..at + range.end]
                .iter_mut()
                .enumerate()
            {
                *byte = j as u8;
            }
        }
        let now_ps = START_PS + i as u64 * 1_000_000;
        tx.seal(now_ps, &mut data, headroom, falcon_len)
            .map_err(|e| AppError::Failed(format!("seal: {e}")))?;
        outer
            .emit(&mut data, psp_len)
            .map_err(|e| AppError::Failed(format!("frame: {e}")))?;
        frames.push(Frame {
            timestamp: Duration::from_nanos(now_ps / 1000),
            data,
        });
    }
    Ok(frames)
}

/// Writes the sample capture.
pub fn write(path: &Path, keys: &MasterKeys, backend: Backend) -> Result<usize> {
    let frames = sample_frames(keys, backend)?;
    let mut w = Writer::create(path)?;
    for f in &frames {
        w.write(f)?;
    }
    w.finish()?;
    Ok(frames.len())
}
