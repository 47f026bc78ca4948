//! Proptest strategies for every wire `Repr` (tests only).
//!
//! Layer: test support for the wire module. Generates only valid values
//! (fields within their widths, canonical codes), so that emit → parse must
//! give the value back.

use core::net::{Ipv4Addr, Ipv6Addr};

use proptest::prelude::*;

use super::ethernet::{Address as EthernetAddress, EtherType, Repr as EthernetRepr, VlanTag};
use super::falcon::{
    AckRueInfo, BackRepr, BaseHeader, BaseRepr, CcInfo, EackRepr, EcnCount, FalconRepr,
    FalconTime32, HopCount, NackCcInfo, NackCode, NackRepr, NackRueInfo, Own, PacketType,
    ProtocolType, PullDataRepr, PullRequestRepr, PushDataRepr, ResyncCode, ResyncRepr, RnrTimeout,
    RxBufferLevel, Window,
};
use super::frame::{FrameRepr, IpFields, UdpChecksum};
use super::ip::{Dscp, Ecn, IpProtocol};
use super::ipv4::{self, Repr as Ipv4Repr};
use super::ipv6::{self, FlowLabel, Repr as Ipv6Repr};
use super::udp::{self, Repr as UdpRepr};
use crate::ids::{ConnectionId, DestinationFunction};
use crate::seq::{Psn, Rsn};

pub(crate) fn psn() -> impl Strategy<Value = Psn> {
    any::<u32>().prop_map(Psn::new)
}

pub(crate) fn rsn() -> impl Strategy<Value = Rsn> {
    any::<u32>().prop_map(Rsn::new)
}

pub(crate) fn connection_id() -> impl Strategy<Value = ConnectionId> {
    (0u32..=0x00FF_FFFF).prop_map(ConnectionId::truncating)
}

pub(crate) fn falcon_time() -> impl Strategy<Value = FalconTime32> {
    any::<u32>().prop_map(FalconTime32::new)
}

pub(crate) fn packet_type() -> impl Strategy<Value = PacketType> {
    (0u8..16).prop_map(PacketType::from)
}

pub(crate) fn base_header() -> impl Strategy<Value = BaseHeader> {
    (
        connection_id(),
        (0u32..=0x00FF_FFFF).prop_map(DestinationFunction::truncating),
        (0u8..8).prop_map(ProtocolType::from),
        any::<bool>(),
        psn(),
        psn(),
        psn(),
        rsn(),
    )
        .prop_map(
            |(
                connection_id,
                destination_function,
                protocol,
                ack_request,
                data_bpsn,
                request_bpsn,
                psn,
                rsn,
            )| {
                BaseHeader {
                    connection_id,
                    destination_function,
                    protocol,
                    ack_request,
                    data_bpsn,
                    request_bpsn,
                    psn,
                    rsn,
                }
            },
        )
}

pub(crate) fn base_repr() -> impl Strategy<Value = BaseRepr> {
    (packet_type(), base_header()).prop_map(|(packet_type, header)| BaseRepr {
        packet_type,
        header,
    })
}

pub(crate) fn pull_request_repr() -> impl Strategy<Value = PullRequestRepr> {
    (base_header(), any::<u16>(), 0usize..200).prop_map(|(header, request_length, payload_len)| {
        PullRequestRepr {
            header,
            request_length,
            payload_len,
        }
    })
}

pub(crate) fn pull_data_repr() -> impl Strategy<Value = PullDataRepr> {
    (base_header(), 0usize..5000).prop_map(|(header, payload_len)| PullDataRepr {
        header,
        payload_len,
    })
}

pub(crate) fn push_data_repr() -> impl Strategy<Value = PushDataRepr> {
    let length = prop_oneof![0u16..5000, Just(u16::MAX)];
    (base_header(), length).prop_map(|(header, request_length)| PushDataRepr {
        header,
        request_length,
    })
}

pub(crate) fn resync_repr() -> impl Strategy<Value = ResyncRepr> {
    (base_header(), any::<u8>(), packet_type(), any::<u32>()).prop_map(
        |(header, code, original_packet_type, vendor_defined)| ResyncRepr {
            header,
            code: ResyncCode::from(code),
            original_packet_type,
            vendor_defined,
        },
    )
}

pub(crate) fn cc_info() -> impl Strategy<Value = CcInfo> {
    (
        0u8..16,
        0u8..32,
        0u16..0x4000,
        0u32..(1 << 22),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(hops, level, ecn, rue, request, data)| CcInfo {
            hop_count: HopCount::truncating(hops),
            rx_buffer_level: RxBufferLevel::truncating(level),
            ecn_count: EcnCount::truncating(ecn),
            rue_info: AckRueInfo::truncating(rue),
            own: Own { request, data },
        })
}

pub(crate) fn nack_cc_info() -> impl Strategy<Value = NackCcInfo> {
    (0u8..16, 0u8..32, 0u16..0x4000, 0u32..(1 << 24)).prop_map(|(hops, level, ecn, rue)| {
        NackCcInfo {
            hop_count: HopCount::truncating(hops),
            rx_buffer_level: RxBufferLevel::truncating(level),
            ecn_count: EcnCount::truncating(ecn),
            rue_info: NackRueInfo::truncating(rue),
        }
    })
}

pub(crate) fn back_repr() -> impl Strategy<Value = BackRepr> {
    (
        connection_id(),
        psn(),
        psn(),
        falcon_time(),
        falcon_time(),
        cc_info(),
    )
        .prop_map(
            |(connection_id, data_bpsn, request_bpsn, t1, t2, cc_info)| BackRepr {
                connection_id,
                data_bpsn,
                request_bpsn,
                t1,
                t2,
                cc_info,
            },
        )
}

pub(crate) fn eack_repr() -> impl Strategy<Value = EackRepr> {
    (back_repr(), any::<u128>(), any::<u128>(), any::<u64>()).prop_map(
        |(back, data_ack_bitmap, data_rx_bitmap, request_bitmap)| EackRepr {
            back,
            data_ack_bitmap,
            data_rx_bitmap,
            request_bitmap,
        },
    )
}

pub(crate) fn nack_repr() -> impl Strategy<Value = NackRepr> {
    (
        connection_id(),
        psn(),
        psn(),
        falcon_time(),
        falcon_time(),
        nack_cc_info(),
        psn(),
        any::<u8>(),
        0u8..32,
        any::<bool>(),
        any::<u8>(),
    )
        .prop_map(
            |(
                connection_id,
                data_bpsn,
                request_bpsn,
                t1,
                t2,
                cc_info,
                nack_psn,
                code,
                rnr,
                w,
                ulp,
            )| {
                NackRepr {
                    connection_id,
                    data_bpsn,
                    request_bpsn,
                    t1,
                    t2,
                    cc_info,
                    nack_psn,
                    code: NackCode::from(code),
                    rnr_timeout: RnrTimeout::truncating(rnr),
                    window: Window::from_bit(w),
                    ulp_nack_code: ulp,
                }
            },
        )
}

pub(crate) fn falcon_repr() -> impl Strategy<Value = FalconRepr> {
    prop_oneof![
        pull_request_repr().prop_map(FalconRepr::PullRequest),
        pull_data_repr().prop_map(FalconRepr::PullData),
        push_data_repr().prop_map(FalconRepr::PushData),
        resync_repr().prop_map(FalconRepr::Resync),
        nack_repr().prop_map(FalconRepr::Nack),
        back_repr().prop_map(FalconRepr::Back),
        eack_repr().prop_map(FalconRepr::Eack),
    ]
}

fn ethernet_address() -> impl Strategy<Value = EthernetAddress> {
    any::<[u8; 6]>().prop_map(EthernetAddress)
}

fn vlan() -> impl Strategy<Value = Option<VlanTag>> {
    proptest::option::of(any::<u16>().prop_map(VlanTag::from_tci))
}

pub(crate) fn ethernet_repr() -> impl Strategy<Value = EthernetRepr> {
    let ethertype = any::<u16>()
        .prop_filter("a second tag is not walked", |t| *t != 0x8100)
        .prop_map(EtherType::from);
    (ethernet_address(), ethernet_address(), vlan(), ethertype).prop_map(
        |(destination, source, vlan, ethertype)| EthernetRepr {
            destination,
            source,
            vlan,
            ethertype,
        },
    )
}

fn dscp() -> impl Strategy<Value = Dscp> {
    (0u8..64).prop_map(Dscp::truncating)
}

fn ecn() -> impl Strategy<Value = Ecn> {
    (0u8..4).prop_map(Ecn::from_bits)
}

pub(crate) fn ipv4_repr() -> impl Strategy<Value = Ipv4Repr> {
    let payload_len = prop_oneof![0usize..2000, Just(ipv4::MAX_PAYLOAD_LEN)];
    (
        any::<[u8; 4]>(),
        any::<[u8; 4]>(),
        any::<u8>(),
        payload_len,
        any::<u8>(),
        dscp(),
        ecn(),
        any::<u16>(),
        any::<bool>(),
    )
        .prop_map(
            |(src, dst, protocol, payload_len, ttl, dscp, ecn, ident, dont_fragment)| Ipv4Repr {
                src_addr: Ipv4Addr::from(src),
                dst_addr: Ipv4Addr::from(dst),
                protocol: IpProtocol::from(protocol),
                payload_len,
                ttl,
                dscp,
                ecn,
                ident,
                dont_fragment,
            },
        )
}

pub(crate) fn ipv6_repr() -> impl Strategy<Value = Ipv6Repr> {
    let payload_len = prop_oneof![0usize..2000, Just(ipv6::MAX_PAYLOAD_LEN)];
    (
        any::<[u8; 16]>(),
        any::<[u8; 16]>(),
        any::<u8>(),
        payload_len,
        any::<u8>(),
        dscp(),
        ecn(),
        (0u32..(1 << 20)).prop_map(FlowLabel::truncating),
    )
        .prop_map(
            |(src, dst, next_header, payload_len, hop_limit, dscp, ecn, flow_label)| Ipv6Repr {
                src_addr: Ipv6Addr::from(src),
                dst_addr: Ipv6Addr::from(dst),
                next_header: IpProtocol::from(next_header),
                payload_len,
                hop_limit,
                dscp,
                ecn,
                flow_label,
            },
        )
}

pub(crate) fn udp_repr() -> impl Strategy<Value = UdpRepr> {
    let payload_len = prop_oneof![0usize..2000, Just(udp::MAX_PAYLOAD_LEN)];
    (any::<u16>(), any::<u16>(), payload_len).prop_map(|(src_port, dst_port, payload_len)| {
        UdpRepr {
            src_port,
            dst_port,
            payload_len,
        }
    })
}

fn ip_fields() -> impl Strategy<Value = IpFields> {
    let v4 = (
        any::<[u8; 4]>(),
        any::<[u8; 4]>(),
        any::<u8>(),
        dscp(),
        ecn(),
        any::<u16>(),
        any::<bool>(),
    )
        .prop_map(
            |(src, dst, ttl, dscp, ecn, ident, dont_fragment)| IpFields::V4 {
                src: Ipv4Addr::from(src),
                dst: Ipv4Addr::from(dst),
                ttl,
                dscp,
                ecn,
                ident,
                dont_fragment,
            },
        );
    let v6 = (
        any::<[u8; 16]>(),
        any::<[u8; 16]>(),
        any::<u8>(),
        dscp(),
        ecn(),
        (0u32..(1 << 20)).prop_map(FlowLabel::truncating),
    )
        .prop_map(
            |(src, dst, hop_limit, dscp, ecn, flow_label)| IpFields::V6 {
                src: Ipv6Addr::from(src),
                dst: Ipv6Addr::from(dst),
                hop_limit,
                dscp,
                ecn,
                flow_label,
            },
        );
    prop_oneof![v4, v6]
}

pub(crate) fn frame_repr() -> impl Strategy<Value = FrameRepr> {
    (
        ethernet_address(),
        ethernet_address(),
        vlan(),
        ip_fields(),
        any::<u16>(),
        any::<u16>(),
        prop_oneof![Just(UdpChecksum::Zero), Just(UdpChecksum::Computed)],
    )
        .prop_map(
            |(destination, source, vlan, ip, src_port, dst_port, udp_checksum)| FrameRepr {
                destination,
                source,
                vlan,
                ip,
                src_port,
                dst_port,
                udp_checksum,
            },
        )
}
