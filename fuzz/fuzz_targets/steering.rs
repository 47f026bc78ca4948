//! Fuzz target: the steering of received frames to a node's shards,
//! `falcon_core::node::Steering`.
//!
//! The first byte picks the node's shard count (1..=256), the second PSP on
//! or off; the rest is the frame. Nothing may panic, no answer may name a shard
//! beyond the count, and where the full frame parser accepts the frame the
//! answer must be the shard of the SPI (PSP) or destination CID it finds.
#![no_main]

use falcon_core::engine::PspConfig;
use falcon_core::ids::ConnectionId;
use falcon_core::node::{Node, NodeConfig};
use falcon_core::wire::frame::{self, ChecksumChecks};
use libfuzzer_sys::fuzz_target;
use psp::{MasterKey, MasterKeys, Spi};

fuzz_target!(|data: &[u8]| {
    let [shard_byte, psp_byte, frame @ ..] = data else {
        return;
    };
    let shards = u16::from(*shard_byte) + 1;
    let psp = psp_byte & 1 == 1;
    let keys = MasterKeys {
        k0: MasterKey::new([7; 32]),
        k1: MasterKey::new([9; 32]),
    };
    let node = Node::new(NodeConfig {
        shards,
        psp: psp.then(|| PspConfig::new(keys)),
        ..NodeConfig::default()
    })
    .expect("1..=256 shards");
    let steering = node.steering();
    let got = steering.shard_of(frame);
    assert!(got.map_or(true, |shard| shard < shards));

    let checks = ChecksumChecks {
        ipv4_header: false,
        udp: false,
    };
    let Ok(parsed) = frame::parse_with(frame, checks) else {
        return;
    };
    let payload = &frame[parsed.layers.payload];
    let expected = if parsed.repr.dst_port != steering.udp_port() {
        None
    } else if psp {
        payload
            .get(4..8)
            .map(|b| Spi(u32::from_be_bytes([b[0], b[1], b[2], b[3]])))
            .and_then(|spi| steering.shard_of_spi(spi))
    } else {
        payload
            .get(1..4)
            .map(|b| ConnectionId::truncating(u32::from_be_bytes([0, b[0], b[1], b[2]])))
            .and_then(|cid| steering.shard_of_cid(cid))
    };
    assert_eq!(got, expected);
});
