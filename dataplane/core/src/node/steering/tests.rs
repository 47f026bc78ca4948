//! Steering tests: frames built by the engines' transmit path (PSP on and
//! off, IPv4 and IPv6) go to the shard that owns their connection, which
//! takes them; altered frames (a VLAN tag, IPv4 options) still steer;
//! frames it cannot steer are `None`; and against the full frame parser as
//! the oracle on generated and on arbitrary frames.

use core::net::IpAddr;
use std::sync::Arc;

use proptest::prelude::*;
use psp::{MasterKey, MasterKeys, Spi, SpiSpace};

use super::*;
use crate::engine::{connect, ConnectionHandle, Engine, EngineConfig, PairSpec, PspConfig};
use crate::ids::ConnectionId;
use crate::node::{Node, NodeConfig, NodeShard};
use crate::port::{FrameBuf, PacketBuf};
use crate::time::Timestamp;
use crate::transaction::{Transaction, UlpEvent};
use crate::wire::frame::parse_with;
use crate::wire::testing::frame_repr;
use crate::wire::{ChecksumChecks, EthernetAddress, PSP_UDP_PORT};

fn keys(k: u8) -> MasterKeys {
    MasterKeys {
        k0: MasterKey::new([k; 32]),
        k1: MasterKey::new([k ^ 0xFF; 32]),
    }
}

/// Node X (`shards` engines) and a peer engine Y, one connection from Y to
/// each shard, set up at `now`.
struct Setup {
    node: Arc<Node>,
    shards: Vec<Engine>,
    y: Engine,
    /// Per shard: (X's handle, Y's handle).
    conns: Vec<(ConnectionHandle, ConnectionHandle)>,
    now: Timestamp,
}

fn setup(shards: u16, psp: bool, v6: bool) -> Setup {
    let now = Timestamp::from_micros(1);
    let ip = |host: u8| -> IpAddr {
        if v6 {
            format!("fd00::{host}").parse().expect("literal address")
        } else {
            format!("10.0.0.{host}").parse().expect("literal address")
        }
    };
    let node = Node::new(NodeConfig {
        shards,
        psp: psp.then(|| PspConfig::new(keys(1))),
        ..NodeConfig::default()
    })
    .expect("node");
    let mut x: Vec<Engine> = (0..shards)
        .map(|shard| {
            let config = EngineConfig {
                local_ip: ip(1),
                local_mac: EthernetAddress([2, 0, 0, 0, 0, 1]),
                node: Some(NodeShard {
                    node: Arc::clone(&node),
                    shard,
                }),
                ..EngineConfig::default()
            };
            Engine::new(config, now).expect("shard engine")
        })
        .collect();
    let mut y = Engine::new(
        EngineConfig {
            local_ip: ip(2),
            local_mac: EthernetAddress([2, 0, 0, 0, 0, 2]),
            psp: psp.then(|| PspConfig::new(keys(3))),
            ..EngineConfig::default()
        },
        now,
    )
    .expect("engine Y");
    let steering = node.steering();
    let conns = x
        .iter_mut()
        .enumerate()
        .map(|(shard, engine)| {
            let spec = PairSpec {
                a_cid: steering.cid(shard as u16, 7).expect("a CID of the shard"),
                b_cid: ConnectionId::truncating(0x100 + shard as u32),
                ..PairSpec::default()
            };
            connect(now, engine, &mut y, &spec).expect("connect")
        })
        .collect();
    Setup {
        node,
        shards: x,
        y,
        conns,
        now,
    }
}

impl Setup {
    /// Y pushes on its connection to `shard`: the data frame it sends.
    fn frame_to(&mut self, shard: usize) -> Vec<u8> {
        let (_, hy) = self.conns[shard];
        self.y
            .submit(self.now, hy, Transaction::push(1, vec![5; 64]))
            .expect("submit");
        let mut buf = vec![0u8; self.y.max_frame_len()];
        let len = self
            .y
            .poll_transmit_into(self.now, &mut buf)
            .expect("a frame");
        buf.truncate(len);
        buf
    }

    /// Whether `shard`'s engine takes `frame` as a request of its
    /// connection.
    fn taken_by(&mut self, shard: usize, frame: &[u8]) -> bool {
        let (hx, _) = self.conns[shard];
        let engine = &mut self.shards[shard];
        let _ = engine.handle_packet(self.now, FrameBuf::from_frame(frame, 0));
        let mut taken = false;
        while let Some(event) = engine.poll_event() {
            taken |= matches!(event, UlpEvent::Request(r) if r.connection == hx);
        }
        taken
    }
}

/// The transmit path's frames, PSP on and off, IPv4 and IPv6: each steers
/// to the shard whose connection it is for, and that shard takes it (the
/// other would drop it as an unknown SA or connection).
#[test]
fn frames_from_the_transmit_path_steer_to_their_shard() {
    for psp in [true, false] {
        for v6 in [false, true] {
            let mut t = setup(3, psp, v6);
            for shard in [2, 0, 1] {
                let frame = t.frame_to(shard);
                let label = format!("psp {psp} v6 {v6} shard {shard}");
                assert_eq!(t.node.steer(&frame), Some(shard as u16), "{label}");
                let wrong = (shard + 1) % 3;
                assert!(!t.taken_by(wrong, &frame), "{label}: not another's");
                assert!(t.taken_by(shard, &frame), "{label}: taken");
            }
        }
    }
}

/// What the transmit path does not emit but a fabric may deliver: an
/// 802.1Q tag, IPv4 options. The SPI or CID still names the shard.
#[test]
fn tagged_frames_and_ipv4_options_steer() {
    let mut t = setup(2, true, false);
    let frame = t.frame_to(1);
    let mut tagged = frame[..12].to_vec();
    tagged.extend_from_slice(&[0x81, 0x00, 0x20, 0x2A]);
    tagged.extend_from_slice(&frame[12..]);
    assert_eq!(t.node.steer(&tagged), Some(1));

    // IHL 6: four bytes of options (two NOPs, two EOLs) after the header.
    let mut options = frame[..34].to_vec();
    options.extend_from_slice(&[1, 1, 0, 0]);
    options.extend_from_slice(&frame[34..]);
    options[14] = 0x46;
    let total = u16::from_be_bytes([options[16], options[17]]) + 4;
    options[16..18].copy_from_slice(&total.to_be_bytes());
    assert_eq!(t.node.steer(&options), Some(1));
}

/// Frames it cannot steer: truncated anywhere, another UDP port, not UDP,
/// an IPv4 fragment, neither IPv4 nor IPv6, an SPI or CID of no shard.
#[test]
fn frames_it_cannot_steer_are_none() {
    let mut t = setup(3, true, false);
    let frame = t.frame_to(2);
    let steering = t.node.steering();
    assert_eq!(steering.shard_of(&frame), Some(2));
    for len in 0..frame.len() {
        assert_eq!(steering.shard_of(&frame[..len]), None, "cut at {len}");
    }
    let edit = |at: usize, byte: u8| {
        let mut f = frame.clone();
        f[at] = byte;
        steering.shard_of(&f)
    };
    assert_eq!(edit(36, 0x99), None, "UDP destination port");
    assert_eq!(edit(23, 6), None, "TCP");
    assert_eq!(edit(20, 0x20), None, "MF set: a first fragment");
    assert_eq!(edit(21, 0x01), None, "a later fragment");
    assert_eq!(edit(12, 0x88), None, "EtherType");
    assert_eq!(edit(14, 0x65), None, "IP version 6 in an IPv4 EtherType");
    // Three shards use two SPI bits: shard 3 is no shard's.
    let mut no_shard = frame.clone();
    no_shard[46] |= 0x60;
    assert_eq!(steering.shard_of(&no_shard), None, "SPI of shard 3");

    let t = setup(3, false, true);
    let steering = t.node.steering();
    assert_eq!(
        steering.shard_of_cid(ConnectionId::truncating(0xFF_FFFF)),
        None
    );
    assert_eq!(
        steering.shard_of_cid(ConnectionId::truncating(0xBF_FFFF)),
        Some(2)
    );
}

#[test]
fn cid_ranges_and_a_single_shard() {
    let two = Steering::new(SpiSpace::new(2).unwrap(), false, PSP_UDP_PORT);
    assert_eq!(two.cids_per_shard(), 1 << 23);
    assert_eq!(two.cid(1, 0), Some(ConnectionId::truncating(0x80_0000)));
    assert_eq!(two.cid(1, 1 << 23), None);
    assert_eq!(two.cid(2, 0), None);
    let one = Steering::new(SpiSpace::SINGLE, true, PSP_UDP_PORT);
    assert_eq!(one.cids_per_shard(), 1 << 24);
    assert_eq!(
        one.shard_of_cid(ConnectionId::truncating(0xFF_FFFF)),
        Some(0)
    );
    assert_eq!(one.shard_of_spi(Spi(0x9A34_5678)), Some(0));
}

/// A frame Y sent to shard 1 of a two-shard node, PSP on or off (built
/// once).
fn transmitted(psp: bool) -> &'static [u8] {
    static FRAMES: std::sync::OnceLock<[Vec<u8>; 2]> = std::sync::OnceLock::new();
    let frames = FRAMES.get_or_init(|| [false, true].map(|psp| setup(2, psp, false).frame_to(1)));
    &frames[usize::from(psp)]
}

/// The oracle: the full frame parser's UDP payload, then the SPI's (or
/// CID's) shard.
fn oracle(steering: &Steering, psp: bool, frame: &[u8]) -> Option<u16> {
    let checks = ChecksumChecks {
        ipv4_header: false,
        udp: false,
    };
    let parsed = parse_with(frame, checks).ok()?;
    if parsed.repr.dst_port != steering.udp_port() {
        return None;
    }
    let payload = frame.get(parsed.layers.payload)?;
    if psp {
        let spi = u32::from_be_bytes(payload.get(4..8)?.try_into().ok()?);
        steering.shard_of_spi(Spi(spi))
    } else {
        let cid = payload.get(1..4)?;
        let cid = u32::from_be_bytes([0, cid[0], cid[1], cid[2]]);
        steering.shard_of_cid(ConnectionId::truncating(cid))
    }
}

proptest! {
    /// Any frame the wire emitter builds (IPv4 or IPv6, tagged or not,
    /// any port) steers as the full parser says.
    #[test]
    fn steering_agrees_with_the_full_parser(
        repr in frame_repr(),
        to_falcon_port in any::<bool>(),
        payload in proptest::collection::vec(any::<u8>(), 0..48),
        shards in 1u16..=256,
        psp in any::<bool>(),
    ) {
        let mut repr = repr;
        if to_falcon_port {
            repr.dst_port = PSP_UDP_PORT;
        }
        let mut frame = vec![0u8; repr.buffer_len(payload.len())];
        frame[repr.header_len()..].copy_from_slice(&payload);
        repr.emit(&mut frame, payload.len()).unwrap();
        let steering = Steering::new(SpiSpace::new(shards).unwrap(), psp, PSP_UDP_PORT);
        prop_assert_eq!(steering.shard_of(&frame), oracle(&steering, psp, &frame));
    }

    /// Arbitrary bytes (and a valid frame with bytes changed): never a
    /// panic, never a shard beyond the count, and the full parser's answer
    /// wherever it accepts the frame.
    #[test]
    fn steering_arbitrary_bytes(
        bytes in proptest::collection::vec(any::<u8>(), 0..120),
        flips in proptest::collection::vec((0usize..120, any::<u8>()), 0..4),
        shards in 1u16..=256,
        psp in any::<bool>(),
    ) {
        let steering = Steering::new(SpiSpace::new(shards).unwrap(), psp, PSP_UDP_PORT);
        let check = |frame: &[u8]| -> Result<(), TestCaseError> {
            let got = steering.shard_of(frame);
            prop_assert!(got.map_or(true, |s| s < shards));
            if parse_with(frame, ChecksumChecks { ipv4_header: false, udp: false }).is_ok() {
                prop_assert_eq!(got, oracle(&steering, psp, frame));
            }
            Ok(())
        };
        check(&bytes)?;
        let mut frame = transmitted(psp).to_vec();
        for (at, byte) in flips {
            if let Some(b) = frame.get_mut(at) {
                *b = byte;
            }
        }
        check(&frame)?;
    }
}

/// An engine that is one of several shards hands a frame of another
/// shard back, unopened and not counted as a drop, naming its owner.
#[test]
fn an_engine_hands_back_frames_of_other_shards() {
    use crate::engine::Disposition;
    for psp in [true, false] {
        let mut s = setup(2, psp, false);
        let frame = s.frame_to(1);
        let wrong = &mut s.shards[0];
        let received = wrong.handle_packet(s.now, FrameBuf::from_frame(&frame, 0));
        assert_eq!(
            received.disposition,
            Disposition::NotOnThisEngine { shard: 1 },
            "psp {psp}"
        );
        let back = received.frame.expect("handed back");
        assert_eq!(back.data(), &frame[..], "not opened in place");
        let stats = wrong.stats();
        assert_eq!((stats.rx_other_shard, stats.drops.total()), (1, 0));
        let right = s.shards[1].handle_packet(s.now, back);
        assert_eq!(right.disposition, Disposition::Consumed);
    }
}
