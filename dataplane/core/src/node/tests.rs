//! Node tests: the rotation steps across shards, SPI ranges per shard, an
//! engine without a node as a node of one shard, and what a shard's engine
//! refuses.

use std::collections::BTreeSet;
use std::sync::Arc;

use psp::{MasterKey, MasterKeys, Spi, SpiGeneration, Version};

use super::*;
use crate::engine::{ConnectionConfig, ConnectionPsp, Engine, EngineConfig};
use crate::ids::ConnectionId;
use crate::time::Timestamp;
use crate::wire::EthernetAddress;

fn keys(k: u8) -> MasterKeys {
    MasterKeys {
        k0: MasterKey::new([k; 32]),
        k1: MasterKey::new([k ^ 0xFF; 32]),
    }
}

fn now() -> Timestamp {
    Timestamp::from_micros(1)
}

fn psp_node(shards: u16) -> Arc<Node> {
    Node::new(NodeConfig {
        shards,
        psp: Some(PspConfig::new(keys(1))),
        ..NodeConfig::default()
    })
    .expect("node")
}

fn shard_engine(node: &Arc<Node>, shard: u16) -> Engine {
    let config = EngineConfig {
        node: Some(NodeShard {
            node: Arc::clone(node),
            shard,
        }),
        ..EngineConfig::default()
    };
    Engine::new(config, now()).expect("shard engine")
}

/// Step 1 once on the node, then each shard follows and ends; the node's
/// rotation is open until the last shard ends it, and the next one is
/// refused until then. A shard that has not followed can neither hand out
/// an SPI nor end the rotation.
#[test]
fn rotation_is_node_wide_and_ends_with_the_last_shard() {
    let node = psp_node(2);
    let mut shards = [shard_engine(&node, 0), shard_engine(&node, 1)];
    assert_eq!(node.key_generation(), Some((SpiGeneration(0), false)));
    assert_eq!(
        node.begin_key_rotation(MasterKey::new([7; 32])),
        Ok(SpiGeneration(1))
    );
    assert_eq!(node.key_generation(), Some((SpiGeneration(1), true)));
    assert_eq!(node.shards_rotating(), vec![0, 1]);
    assert_eq!(
        node.begin_key_rotation(MasterKey::new([8; 32])),
        Err(RotationError::RotationInProgress)
    );

    // Shard 0 follows and ends; shard 1 is behind.
    assert_eq!(shards[0].follow_key_rotation(), Ok(SpiGeneration(1)));
    assert_eq!(
        shards[0].follow_key_rotation(),
        Ok(SpiGeneration(1)),
        "idempotent"
    );
    assert_eq!(shards[0].key_generation(), Some((SpiGeneration(1), true)));
    assert_eq!(shards[1].key_generation(), Some((SpiGeneration(0), false)));
    let (spi, _) = shards[0].allocate_spi(Version::Aes128Gcm).expect("SPI");
    assert_eq!(spi, Spi(0x8000_0001), "shard 0, new key, numbering from 1");
    assert_eq!(
        shards[1]
            .allocate_spi(Version::Aes128Gcm)
            .err()
            .map(|e| e.field),
        Some("psp"),
        "behind the node"
    );
    assert_eq!(shards[1].end_key_rotation(), Err(RotationError::Behind));
    shards[0].end_key_rotation().expect("end on shard 0");
    assert_eq!(shards[0].key_generation(), Some((SpiGeneration(1), false)));
    assert_eq!(node.shards_rotating(), vec![1]);
    assert_eq!(node.key_generation(), Some((SpiGeneration(1), true)));

    shards[1].follow_key_rotation().expect("follow");
    let (spi, _) = shards[1].allocate_spi(Version::Aes128Gcm).expect("SPI");
    assert_eq!(spi, Spi(0xC000_0001), "shard 1's range under the new key");
    shards[1].end_key_rotation().expect("end on shard 1");
    assert_eq!(node.key_generation(), Some((SpiGeneration(1), false)));
    assert!(node.shards_rotating().is_empty());

    // The engine's own begin is the node's step 1 and its follow.
    assert_eq!(
        shards[1].begin_key_rotation(MasterKey::new([9; 32])),
        Ok(SpiGeneration(2))
    );
    assert_eq!((node.rotations(), shards[1].stats().key_rotations), (2, 2));
    assert_eq!(shards[0].stats().key_rotations, 1);
    assert_eq!(
        shards[0].begin_key_rotation(MasterKey::new([10; 32])),
        Err(RotationError::RotationInProgress)
    );
}

/// An engine built without a node is a node of one shard: SPIs numbered
/// as before nodes, any CID, its own rotation.
#[test]
fn an_engine_without_a_node_is_a_node_of_one_shard() {
    let mut engine: Engine = Engine::new(
        EngineConfig {
            psp: Some(PspConfig::new(keys(1))),
            ..EngineConfig::default()
        },
        now(),
    )
    .expect("engine");
    assert_eq!((engine.node().shards(), engine.shard()), (1, 0));
    assert_eq!(engine.allocate_spi(Version::Aes128Gcm).unwrap().0, Spi(1));
    assert_eq!(engine.allocate_spi(Version::Aes128Gcm).unwrap().0, Spi(2));
    assert_eq!(engine.node().spis_allocated(0), 2);
    engine.begin_key_rotation(MasterKey::new([5; 32])).unwrap();
    assert_eq!(engine.node().rotations(), 1);
    assert_eq!(
        engine.allocate_spi(Version::Aes128Gcm).unwrap().0,
        Spi(0x8000_0001)
    );
    let steering = engine.node().steering();
    assert_eq!(
        steering.shard_of_cid(ConnectionId::truncating(0xFF_FFFF)),
        Some(0)
    );
    // Without PSP: a node without keys.
    let plain: Engine = Engine::new(EngineConfig::default(), now()).expect("engine");
    assert!(!plain.node().runs_psp());
    assert_eq!(plain.node().key_generation(), None);
}

/// Shards never hand out the same SPI: their ranges are disjoint under
/// each key, and every SPI names its shard.
#[test]
fn shards_allocate_disjoint_spis() {
    let node = psp_node(3);
    let mut shards: Vec<Engine> = (0..3).map(|s| shard_engine(&node, s)).collect();
    let mut seen = BTreeSet::new();
    for round in 0..2 {
        for (s, engine) in shards.iter_mut().enumerate() {
            for _ in 0..500 {
                let (spi, key) = engine.allocate_spi(Version::Aes256Gcm).unwrap();
                assert!(seen.insert(spi.0), "{spi:?} handed out twice");
                assert_eq!(node.steering().shard_of_spi(spi), Some(s as u16));
                assert_eq!(key.version(), Version::Aes256Gcm);
            }
        }
        assert_eq!(node.spis_allocated(1), 500);
        if round == 0 {
            node.begin_key_rotation(MasterKey::new([3; 32])).unwrap();
            for engine in &mut shards {
                engine.follow_key_rotation().unwrap();
                engine.end_key_rotation().unwrap();
            }
        }
    }
    assert_eq!(seen.len(), 3000);
}

/// Configuration errors name their field.
#[test]
fn configurations_are_checked() {
    for shards in [0, 257] {
        let e = Node::new(NodeConfig {
            shards,
            ..NodeConfig::default()
        })
        .unwrap_err();
        assert_eq!(e.field, "shards");
    }
    let node = psp_node(2);
    let member = |shard| {
        Some(NodeShard {
            node: Arc::clone(&node),
            shard,
        })
    };
    let bad = |config: EngineConfig| {
        Engine::<crate::port::FrameBuf>::new(config, now())
            .err()
            .map(|e| e.field)
    };
    assert_eq!(
        bad(EngineConfig {
            node: member(0),
            psp: Some(PspConfig::new(keys(2))),
            ..EngineConfig::default()
        }),
        Some("psp")
    );
    assert_eq!(
        bad(EngineConfig {
            node: member(2),
            ..EngineConfig::default()
        }),
        Some("node.shard")
    );
    assert_eq!(
        bad(EngineConfig {
            node: member(1),
            udp_port: 4791,
            ..EngineConfig::default()
        }),
        Some("udp_port")
    );
    assert_eq!(
        format!("{node:?}"),
        "Node { shards: 2, psp: true, udp_port: 1000, .. }"
    );
}

/// A shard takes only connections of its own: local CID in its range and,
/// with PSP, a receive SPI of its range.
#[test]
fn a_shard_refuses_connections_of_another_shard() {
    let node = psp_node(2);
    let mut shard1 = shard_engine(&node, 1);
    let mut shard0 = shard_engine(&node, 0);
    let steering = node.steering();
    let (own_spi, key) = shard1.allocate_spi(Version::Aes128Gcm).unwrap();
    let (other_spi, _) = shard0.allocate_spi(Version::Aes128Gcm).unwrap();
    let config = |cid: ConnectionId, rx_spi| {
        let mut c = ConnectionConfig::new(
            cid,
            ConnectionId::truncating(0x42),
            "10.0.0.2".parse().expect("literal address"),
            EthernetAddress([2, 0, 0, 0, 0, 2]),
        );
        c.psp = Some(ConnectionPsp::new(Spi(0x1234), key.clone(), rx_spi));
        c
    };
    let own_cid = steering.cid(1, 5).unwrap();
    let other_cid = steering.cid(0, 5).unwrap();
    let refused = |e: &mut Engine, c| e.add_connection(now(), c).err().map(|e| e.field);
    assert_eq!(
        refused(&mut shard1, config(other_cid, own_spi)),
        Some("local_cid")
    );
    assert_eq!(
        refused(&mut shard1, config(own_cid, other_spi)),
        Some("psp.rx_spi")
    );
    assert_eq!(refused(&mut shard1, config(own_cid, own_spi)), None);
}
