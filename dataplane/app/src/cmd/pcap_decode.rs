//! `falcon pcap decode`: every field of every Falcon/PSP packet of a capture.
//!
//! Each packet becomes one JSON value (layers as nested objects); the text
//! output prints the same tree, so both forms always carry the same fields.
//! With master keys the PSP packet is authenticated and decrypted (through
//! the same `SaDatabase::open` the dataplane uses) and the Falcon header is
//! decoded by type; without keys only the clear part is shown: the PSP
//! header and, when the crypt offset leaves them clear, the Falcon version
//! and destination connection id. A packet that does not parse is reported
//! with its drop reason and counted; decoding goes on.

use std::collections::BTreeMap;

use falcon_core::drop::DropReason;
use falcon_core::wire::falcon::{BaseHeader, CcInfo, NackCcInfo};
use falcon_core::wire::frame::{self, ChecksumChecks, IpFields, UdpChecksum};
use falcon_core::wire::{peek_connection_id, FalconRepr};
use psp::{Backend, Header, HeaderRepr, SaDatabase, ICV_LEN, NEXT_HEADER_FALCON};
use serde_json::{json, Map, Value};

use crate::cli::DecodeArgs;
use crate::cmd::psp_tool::master_keys;
use crate::error::Result;
use crate::pcapio;
use crate::refcfg;

/// What a decode run saw.
#[derive(Debug, Default)]
pub struct Summary {
    pub packets: u64,
    pub falcon: u64,
    pub decrypted: u64,
    pub drops: BTreeMap<&'static str, u64>,
}

pub fn run(args: &DecodeArgs) -> Result<Summary> {
    let mut db = match &args.keys {
        Some(path) => Some(SaDatabase::new(
            Backend::Ring,
            master_keys(&refcfg::read_decrypt(path)?),
            4096,
        )),
        None => None,
    };
    let frames = pcapio::read_all(&args.file)?;
    let mut summary = Summary::default();
    for (i, frame) in frames.iter().enumerate() {
        let mut value = json!({
            "index": i + 1,
            "timestamp_us": frame.timestamp.as_micros() as u64,
            "length": frame.data.len(),
        });
        if let (Value::Object(map), Value::Object(layers)) = (
            &mut value,
            decode_frame(&frame.data, db.as_mut(), &mut summary),
        ) {
            map.extend(layers);
        }
        summary.packets += 1;
        if args.json {
            crate::outln!("{value}");
        } else {
            print_text(i + 1, &value);
        }
    }
    if !args.json {
        let drops: Vec<String> = summary
            .drops
            .iter()
            .map(|(r, n)| format!("{n} {r}"))
            .collect();
        crate::outln!(
            "{} packets, {} Falcon, {} decrypted, {} not decoded{}",
            summary.packets,
            summary.falcon,
            summary.decrypted,
            summary.drops.values().sum::<u64>(),
            if drops.is_empty() {
                String::new()
            } else {
                format!(" ({})", drops.join(", "))
            }
        );
    }
    Ok(summary)
}

/// Decodes one Ethernet frame into a JSON object; parse failures become an
/// `error` and a `drop_reason` field and are counted in `summary`.
pub fn decode_frame(data: &[u8], db: Option<&mut SaDatabase>, summary: &mut Summary) -> Value {
    let mut out = Map::new();
    let drop =
        |out: &mut Map<String, Value>, summary: &mut Summary, reason: DropReason, error: String| {
            *summary.drops.entry(reason.name()).or_default() += 1;
            out.insert("error".into(), json!(error));
            out.insert("drop_reason".into(), json!(reason.name()));
        };

    let parsed = match frame::parse_with(data, ChecksumChecks::ALL) {
        Ok(parsed) => parsed,
        Err(e) => {
            drop(&mut out, summary, DropReason::for_frame(&e), e.to_string());
            return Value::Object(out);
        }
    };
    let repr = &parsed.repr;
    let mut eth = Map::new();
    eth.insert("destination".into(), json!(repr.destination.to_string()));
    eth.insert("source".into(), json!(repr.source.to_string()));
    if let Some(tag) = repr.vlan {
        eth.insert("vlan".into(), json!(format!("{tag:?}")));
    }
    out.insert("ethernet".into(), Value::Object(eth));
    out.insert("ip".into(), ip_json(&repr.ip));
    out.insert(
        "udp".into(),
        json!({
            "source_port": repr.src_port,
            "destination_port": repr.dst_port,
            "length": parsed.layers.payload.len() + 8,
            "checksum": match repr.udp_checksum { UdpChecksum::Zero => "zero", UdpChecksum::Computed => "verified" },
        }),
    );
    if repr.dst_port != frame::PSP_UDP_PORT {
        drop(
            &mut out,
            summary,
            DropReason::NotFalconPort,
            format!("UDP port {} is not PSP (1000)", repr.dst_port),
        );
        return Value::Object(out);
    }

    let udp_payload = &data[parsed.layers.payload.clone()];
    let header = match Header::new_checked(udp_payload).and_then(|h| HeaderRepr::parse(&h)) {
        Ok(header) => header,
        Err(e) => {
            let reason = DropReason::Psp(e.drop_reason());
            drop(&mut out, summary, reason, format!("PSP header: {e}"));
            return Value::Object(out);
        }
    };
    let header_len = header.buffer_len();
    let icv = udp_payload
        .get(udp_payload.len().saturating_sub(ICV_LEN)..)
        .unwrap_or_default();
    out.insert("psp".into(), psp_json(&header, header_len, icv));
    if header.next_header != NEXT_HEADER_FALCON {
        out.insert(
            "psp_payload".into(),
            json!(format!("next header {} (not Falcon)", header.next_header)),
        );
    }

    let Some(db) = db else {
        // Without keys: what the crypt offset leaves in clear.
        let clear_end = psp::HEADER_LEN + usize::from(header.crypt_offset) * 4;
        if header.next_header == NEXT_HEADER_FALCON && clear_end >= header_len + 4 {
            let falcon = &udp_payload[header_len..];
            let version = falcon.first().map(|b| b >> 4);
            if let (Some(version), Ok(cid)) = (version, peek_connection_id(falcon)) {
                out.insert(
                    "falcon_clear".into(),
                    json!({ "version": version, "connection_id": cid.value(), "rest": "encrypted" }),
                );
            }
        }
        return Value::Object(out);
    };

    let mut buf = udp_payload.to_vec();
    let len = buf.len();
    let opened = match db.open(&mut buf, 0, len) {
        Ok(opened) => opened,
        Err(reason) => {
            drop(
                &mut out,
                summary,
                DropReason::Psp(reason),
                format!("PSP open: {reason}"),
            );
            return Value::Object(out);
        }
    };
    summary.decrypted += 1;
    out.insert("authenticated".into(), json!(true));
    if opened.next_header() != NEXT_HEADER_FALCON {
        out.insert("payload_length".into(), json!(opened.payload().len()));
        return Value::Object(out);
    }
    match FalconRepr::parse(opened.payload()) {
        Ok(falcon) => {
            summary.falcon += 1;
            out.insert("falcon".into(), falcon_json(&falcon));
        }
        Err(e) => {
            let reason = DropReason::for_falcon(&e);
            drop(&mut out, summary, reason, format!("Falcon: {e}"));
        }
    }
    Value::Object(out)
}

fn ip_json(ip: &IpFields) -> Value {
    match *ip {
        IpFields::V4 {
            src,
            dst,
            ttl,
            dscp,
            ecn,
            ident,
            dont_fragment,
        } => json!({
            "version": 4, "source": src.to_string(), "destination": dst.to_string(), "ttl": ttl,
            "dscp": dscp.value(), "ecn": format!("{ecn:?}"), "identification": ident,
            "dont_fragment": dont_fragment,
        }),
        IpFields::V6 {
            src,
            dst,
            hop_limit,
            dscp,
            ecn,
            flow_label,
        } => json!({
            "version": 6, "source": src.to_string(), "destination": dst.to_string(),
            "hop_limit": hop_limit, "dscp": dscp.value(), "ecn": format!("{ecn:?}"),
            "flow_label": flow_label.value(),
        }),
    }
}

fn psp_json(h: &HeaderRepr, header_len: usize, icv: &[u8]) -> Value {
    let mut m = Map::new();
    m.insert("next_header".into(), json!(h.next_header));
    m.insert("hdr_ext_len".into(), json!((header_len / 8) - 1));
    m.insert("crypt_offset".into(), json!(h.crypt_offset));
    m.insert("sample".into(), json!(h.sample));
    m.insert("drop_after_sampling".into(), json!(h.drop_after_sampling));
    m.insert("version".into(), json!(h.version.raw()));
    m.insert("algorithm".into(), json!(h.version.name()));
    m.insert("spi".into(), json!(format!("0x{:08x}", h.spi.0)));
    m.insert("master_key".into(), json!(h.spi.key_selector()));
    m.insert("iv".into(), json!(format!("0x{:016x}", h.iv)));
    // DESIGN §4: the IV is the TX timestamp in picoseconds; t1 = IV >> 17.
    m.insert("iv_time_ns".into(), json!(h.iv / 1000));
    if let Some(vc) = h.vc {
        m.insert(
            "virtualization_cookie".into(),
            json!(format!("0x{vc:016x}")),
        );
    }
    m.insert("icv".into(), json!(hex::encode(icv)));
    Value::Object(m)
}

fn base_json(h: &BaseHeader) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("connection_id".into(), json!(h.connection_id.value()));
    m.insert(
        "destination_function".into(),
        json!(h.destination_function.value()),
    );
    m.insert("protocol".into(), json!(format!("{:?}", h.protocol)));
    m.insert("ack_request".into(), json!(h.ack_request));
    m.insert("data_bpsn".into(), json!(h.data_bpsn.value()));
    m.insert("request_bpsn".into(), json!(h.request_bpsn.value()));
    m.insert("psn".into(), json!(h.psn.value()));
    m.insert("rsn".into(), json!(h.rsn.value()));
    m
}

fn cc_json(cc: &CcInfo) -> Value {
    json!({
        "hop_count": cc.hop_count.value(),
        "rx_buffer_level": cc.rx_buffer_level.value(),
        "ecn_count": cc.ecn_count.value(),
        "rue_info": cc.rue_info.value(),
        "own_request": cc.own.request,
        "own_data": cc.own.data,
    })
}

fn nack_cc_json(cc: &NackCcInfo) -> Value {
    json!({
        "hop_count": cc.hop_count.value(),
        "rx_buffer_level": cc.rx_buffer_level.value(),
        "ecn_count": cc.ecn_count.value(),
        "rue_info": cc.rue_info.value(),
    })
}

/// Every field of a Falcon header, by packet type.
pub fn falcon_json(repr: &FalconRepr) -> Value {
    let mut m = Map::new();
    m.insert("packet_type".into(), json!(repr.packet_type().to_string()));
    match repr {
        FalconRepr::PullRequest(r) => {
            m.extend(base_json(&r.header));
            m.insert("request_length".into(), json!(r.request_length));
            m.insert("payload_length".into(), json!(r.payload_len));
        }
        FalconRepr::PullData(r) => {
            m.extend(base_json(&r.header));
            m.insert("payload_length".into(), json!(r.payload_len));
        }
        FalconRepr::PushData(r) => {
            m.extend(base_json(&r.header));
            m.insert("request_length".into(), json!(r.request_length));
        }
        FalconRepr::Resync(r) => {
            m.extend(base_json(&r.header));
            m.insert("resync_code".into(), json!(format!("{:?}", r.code)));
            m.insert(
                "resync_packet_type".into(),
                json!(r.original_packet_type.to_string()),
            );
            m.insert("vendor_defined".into(), json!(r.vendor_defined));
        }
        FalconRepr::Back(r) => back_fields(&mut m, r),
        FalconRepr::Eack(r) => {
            back_fields(&mut m, &r.back);
            m.insert(
                "data_ack_bitmap".into(),
                json!(format!("{:032x}", r.data_ack_bitmap)),
            );
            m.insert(
                "data_rx_bitmap".into(),
                json!(format!("{:032x}", r.data_rx_bitmap)),
            );
            m.insert(
                "request_bitmap".into(),
                json!(format!("{:016x}", r.request_bitmap)),
            );
        }
        FalconRepr::Nack(r) => {
            m.insert("connection_id".into(), json!(r.connection_id.value()));
            m.insert("data_bpsn".into(), json!(r.data_bpsn.value()));
            m.insert("request_bpsn".into(), json!(r.request_bpsn.value()));
            m.insert("t1".into(), json!(r.t1.value()));
            m.insert("t2".into(), json!(r.t2.value()));
            m.insert("cc_info".into(), nack_cc_json(&r.cc_info));
            m.insert("nack_psn".into(), json!(r.nack_psn.value()));
            m.insert("nack_code".into(), json!(format!("{:?}", r.code)));
            m.insert("rnr_timeout".into(), json!(r.rnr_timeout.to_string()));
            m.insert("window".into(), json!(format!("{:?}", r.window)));
            m.insert("ulp_nack_code".into(), json!(r.ulp_nack_code));
        }
    }
    Value::Object(m)
}

fn back_fields(m: &mut Map<String, Value>, r: &falcon_core::wire::BackRepr) {
    m.insert("connection_id".into(), json!(r.connection_id.value()));
    m.insert("data_bpsn".into(), json!(r.data_bpsn.value()));
    m.insert("request_bpsn".into(), json!(r.request_bpsn.value()));
    m.insert("t1".into(), json!(r.t1.value()));
    m.insert("t2".into(), json!(r.t2.value()));
    m.insert("cc_info".into(), cc_json(&r.cc_info));
}

/// The JSON tree as indented `key: value` lines.
fn print_text(index: usize, value: &Value) {
    crate::outln!("packet {index}");
    if let Value::Object(map) = value {
        for (key, v) in map {
            if key != "index" {
                print_node(key, v, 1);
            }
        }
    }
}

fn print_node(key: &str, value: &Value, depth: usize) {
    let pad = "  ".repeat(depth);
    match value {
        Value::Object(map) => {
            crate::outln!("{pad}{key}:");
            for (k, v) in map {
                print_node(k, v, depth + 1);
            }
        }
        Value::String(s) => crate::outln!("{pad}{key}: {s}"),
        other => crate::outln!("{pad}{key}: {other}"),
    }
}
