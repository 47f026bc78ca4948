//! Two engines as the shards of one node (X) with connections to a third
//! engine (node Y), in virtual time over a lossy wire. Y's frames reach X's
//! shards only through the node's `Steering`. Issue #24 item 4: the shards
//! never share an SPI, and node-wide key rotation (both nodes, twice, the
//! second evicting the first key) under traffic completes every
//! transaction exactly once with its data.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::Arc;

use core::time::Duration;

use psp::{MasterKey, MasterKeys, Spi, SpiGeneration, Version};

use crate::drop::DropReason;
use crate::engine::{connect, ConnectionHandle, Engine, EngineConfig, PairSpec, PspConfig};
use crate::ids::ConnectionId;
use crate::node::{Node, NodeConfig, NodeShard};
use crate::port::FrameBuf;
use crate::random::{Random, SplitMix64};
use crate::testing::pattern;
use crate::time::Timestamp;
use crate::transaction::{CompletionStatus, Op, Transaction, TransactionKind, UlpEvent, UlpHeader};
use crate::wire::frame::parse_with;
use crate::wire::{ChecksumChecks, EthernetAddress};

/// Engines 0 and 1 are X's shards, engine 2 is Y.
const Y: usize = 2;

fn keys(k: u8) -> MasterKeys {
    MasterKeys {
        k0: MasterKey::new([k; 32]),
        k1: MasterKey::new([k ^ 0xFF; 32]),
    }
}

/// One connection between a shard of X and Y.
struct Link {
    shard: usize,
    /// The connection's handle on X's shard and on Y.
    handles: [ConnectionHandle; 2],
    /// Per side (X, Y): transactions not yet submitted.
    backlog: [VecDeque<Transaction>; 2],
    /// Per side: tag → (kind, payload length) of what is submitted and
    /// not completed.
    outstanding: [HashMap<u64, (TransactionKind, usize)>; 2],
}

struct Net {
    x: Arc<Node>,
    engines: Vec<Engine>,
    links: Vec<Link>,
    /// Frames in flight: (arrival, to Y, bytes).
    wire: Vec<(Timestamp, bool, Vec<u8>)>,
    now: Timestamp,
    rng: SplitMix64,
    next_tag: u64,
    completed: u64,
    /// Frames from Y that no shard of X was found for.
    unsteered: u64,
    /// Per shard of X: the SPIs on the frames steered to it, and the
    /// receive SPIs it handed out at rotations.
    spis: [BTreeSet<u32>; 2],
}

const DELAY: Duration = Duration::from_micros(3);
/// Frames lost on the wire, per million.
const LOSS_PPM: u32 = 10_000;
const MAX_OUTSTANDING: usize = 8;
/// Transactions each end of a link submits.
const PER_SIDE: usize = 150;

impl Net {
    fn new() -> Net {
        let now = Timestamp::from_micros(1_000);
        let x = Node::new(NodeConfig {
            shards: 2,
            psp: Some(PspConfig::new(keys(1))),
            ..NodeConfig::default()
        })
        .expect("node X");
        let mut engines: Vec<Engine> = (0..2)
            .map(|shard| {
                let config = EngineConfig {
                    local_ip: "10.0.0.1".parse().expect("literal address"),
                    local_mac: EthernetAddress([2, 0, 0, 0, 0, 1]),
                    node: Some(NodeShard {
                        node: Arc::clone(&x),
                        shard,
                    }),
                    seed: u64::from(shard),
                    ..EngineConfig::default()
                };
                Engine::new(config, now).expect("shard of X")
            })
            .collect();
        let y = EngineConfig {
            local_ip: "10.0.0.2".parse().expect("literal address"),
            local_mac: EthernetAddress([2, 0, 0, 0, 0, 2]),
            psp: Some(PspConfig::new(keys(3))),
            seed: 2,
            ..EngineConfig::default()
        };
        engines.push(Engine::new(y, now).expect("node Y"));
        let mut net = Net {
            x,
            engines,
            links: Vec::new(),
            wire: Vec::new(),
            now,
            rng: SplitMix64::new(24),
            next_tag: 1,
            completed: 0,
            unsteered: 0,
            spis: [BTreeSet::new(), BTreeSet::new()],
        };
        for i in 0..6 {
            net.add_link(i % 2);
        }
        net
    }

    /// A connection between shard `shard` of X (a CID of its range) and Y,
    /// with `PER_SIDE` random transactions queued each way.
    fn add_link(&mut self, shard: usize) {
        let n = self.links.len() as u32;
        let spec = PairSpec {
            a_cid: self
                .x
                .steering()
                .cid(shard as u16, 0x10 + n)
                .expect("a CID of the shard"),
            b_cid: ConnectionId::truncating(0x100 + n),
            ..PairSpec::default()
        };
        let (x_side, y_side) = self.engines.split_at_mut(Y);
        let (hx, hy) =
            connect(self.now, &mut x_side[shard], &mut y_side[0], &spec).expect("connect");
        let mut link = Link {
            shard,
            handles: [hx, hy],
            backlog: [VecDeque::new(), VecDeque::new()],
            outstanding: [HashMap::new(), HashMap::new()],
        };
        for side in 0..2 {
            for _ in 0..PER_SIDE {
                let tag = self.next_tag;
                self.next_tag += 1;
                let len = 8 + self.rng.below(1500) as usize;
                let transaction = if self.rng.chance(1, 2) {
                    let mut payload = tag.to_le_bytes().to_vec();
                    payload.extend(pattern(tag, len - 8));
                    Transaction::push(tag, payload)
                } else {
                    Transaction::pull(tag, len as u16)
                        .with_header(UlpHeader::new(&tag.to_le_bytes()).expect("8 bytes"))
                };
                link.backlog[side].push_back(transaction);
            }
        }
        self.links.push(link);
    }

    fn unfinished(&self) -> usize {
        self.links
            .iter()
            .flat_map(|l| (0..2).map(move |s| l.backlog[s].len() + l.outstanding[s].len()))
            .sum()
    }

    /// Engine index and link side of a link's end.
    fn end(link: &Link, side: usize) -> usize {
        if side == 0 {
            link.shard
        } else {
            Y
        }
    }

    fn step(&mut self) {
        self.now = self.now + Duration::from_micros(1);
        let now = self.now;
        // Frames that arrived.
        let (due, later): (Vec<_>, Vec<_>) = self.wire.drain(..).partition(|(at, ..)| *at <= now);
        self.wire = later;
        for (_, to_y, frame) in due {
            let engine = if to_y {
                Y
            } else {
                let Some(shard) = self.x.steer(&frame) else {
                    self.unsteered += 1;
                    continue;
                };
                self.spis[usize::from(shard)].insert(spi_of(&frame).0);
                usize::from(shard)
            };
            let received = self.engines[engine].handle_packet(now, FrameBuf::from_frame(&frame, 0));
            drop(received);
        }
        for e in 0..self.engines.len() {
            self.engines[e].handle_timeout(now);
            self.ulp(e);
            self.submit(e);
            let mut buf = vec![0u8; self.engines[e].max_frame_len()];
            while let Some(len) = self.engines[e].poll_transmit_into(now, &mut buf) {
                if !self.rng.chance(LOSS_PPM, 1_000_000) {
                    self.wire.push((now + DELAY, e != Y, buf[..len].to_vec()));
                }
            }
        }
    }

    fn link_of(&self, engine: usize, handle: ConnectionHandle) -> (usize, usize) {
        let side = usize::from(engine == Y);
        let link = self
            .links
            .iter()
            .position(|l| Net::end(l, side) == engine && l.handles[side] == handle)
            .expect("a link's connection");
        (link, side)
    }

    /// The ULP of engine `e`: serve requests (checking push data), check
    /// completions (pull data), exactly once.
    fn ulp(&mut self, e: usize) {
        let now = self.now;
        while let Some(event) = self.engines[e].poll_event() {
            match event {
                UlpEvent::Request(r) => {
                    let engine = &mut self.engines[e];
                    match r.kind {
                        TransactionKind::Push => {
                            let tag = u64::from_le_bytes(r.payload[..8].try_into().expect("a tag"));
                            assert_eq!(&r.payload[8..], &pattern(tag, r.payload.len() - 8)[..]);
                            engine.ulp_ack(now, r.connection, r.rsn).expect("ulp_ack");
                            engine.release(r.payload);
                        }
                        TransactionKind::Pull => {
                            let tag = u64::from_le_bytes(r.header[..8].try_into().expect("a tag"));
                            engine.ulp_ack(now, r.connection, r.rsn).expect("ulp_ack");
                            let data = pattern(tag, usize::from(r.request_length));
                            engine
                                .submit_pull_data(now, r.connection, r.rsn, UlpHeader::EMPTY, data)
                                .expect("pull data");
                        }
                    }
                }
                UlpEvent::Completion(c) => {
                    let (link, side) = self.link_of(e, c.connection);
                    let (kind, len) = self.links[link].outstanding[side]
                        .remove(&c.tag)
                        .unwrap_or_else(|| panic!("tag {} completed twice or unknown", c.tag));
                    assert_eq!(c.status, CompletionStatus::Ack, "tag {}", c.tag);
                    assert_eq!(c.kind, kind);
                    if kind == TransactionKind::Pull {
                        assert_eq!(&c.data[..], &pattern(c.tag, len)[..]);
                    }
                    self.engines[e].release(c.data);
                    self.completed += 1;
                }
                UlpEvent::ConnectionError { fault, .. } => panic!("connection error {fault:?}"),
                UlpEvent::Xoff { .. } | UlpEvent::Xon { .. } => {}
            }
        }
    }

    fn submit(&mut self, e: usize) {
        let now = self.now;
        for link in &mut self.links {
            let side = usize::from(e == Y);
            if Net::end(link, side) != e {
                continue;
            }
            while link.outstanding[side].len() < MAX_OUTSTANDING {
                let Some(transaction) = link.backlog[side].pop_front() else {
                    break;
                };
                let (tag, kind) = (transaction.tag, transaction.kind());
                let len = match &transaction.op {
                    Op::Push(data) => data.len(),
                    Op::Pull { request_length } => usize::from(*request_length),
                };
                self.engines[e]
                    .submit(now, link.handles[side], transaction)
                    .expect("submit");
                link.outstanding[side].insert(tag, (kind, len));
            }
        }
    }

    fn run_for(&mut self, span: Duration) {
        let until = self.now + span;
        while self.now < until {
            self.step();
        }
    }

    /// Both nodes rotate with traffic in flight: X once for its two shards
    /// (each follows and rekeys its connections; Y installs the new SAs),
    /// Y on its own (X's shards install its new SAs).
    fn rotate(&mut self, key: u8) {
        let now = self.now;
        let generation = self
            .x
            .begin_key_rotation(MasterKey::new([key; 32]))
            .expect("node X begins");
        for shard in 0..2 {
            assert_eq!(self.engines[shard].follow_key_rotation(), Ok(generation));
            let rekeyed = self.engines[shard]
                .rekey_connections(now, Version::Aes128Gcm)
                .expect("rekey");
            assert_eq!(
                rekeyed.len(),
                self.links.iter().filter(|l| l.shard == shard).count()
            );
            for sa in rekeyed {
                self.spis[shard].insert(sa.spi.0);
                let (link, _) = self.link_of(shard, sa.connection);
                let hy = self.links[link].handles[1];
                self.engines[Y]
                    .install_transmit_sa(hy, sa.spi, &sa.key)
                    .expect("Y sends with X's new SA");
            }
        }
        self.engines[Y]
            .begin_key_rotation(MasterKey::new([key ^ 0x55; 32]))
            .expect("node Y begins");
        for sa in self.engines[Y]
            .rekey_connections(now, Version::Aes128Gcm)
            .expect("rekey")
        {
            let (link, _) = self.link_of(Y, sa.connection);
            let (shard, hx) = (self.links[link].shard, self.links[link].handles[0]);
            self.engines[shard]
                .install_transmit_sa(hx, sa.spi, &sa.key)
                .expect("X's shard sends with Y's new SA");
        }
    }

    /// Steps 4 and 5 everywhere.
    fn end_rotation(&mut self) {
        for engine in &mut self.engines {
            engine.retire_previous_spis();
            engine.end_key_rotation().expect("every connection rekeyed");
        }
    }
}

/// The SPI in the PSP header of a frame.
fn spi_of(frame: &[u8]) -> Spi {
    let parsed = parse_with(frame, ChecksumChecks::ALL).expect("a frame");
    let psp = psp::Header::new_checked(&frame[parsed.layers.payload]).expect("PSP header");
    psp.spi()
}

#[test]
fn shards_never_share_an_spi_and_node_wide_rotation_completes_every_transaction() {
    let mut net = Net::new();
    let total = net.unfinished();
    net.run_for(Duration::from_micros(100));
    for round in 0..2u8 {
        assert!(
            net.unfinished() > 0,
            "traffic in flight at rotation {round}"
        );
        net.rotate(0x40 + round);
        assert_eq!(
            net.x.key_generation(),
            Some((SpiGeneration(u32::from(round) + 1), true))
        );
        assert_eq!(net.x.shards_rotating(), vec![0, 1]);
        // A few RTTs with both SPIs accepted, then steps 4 and 5.
        net.run_for(Duration::from_micros(100));
        net.end_rotation();
        assert_eq!(
            net.x.key_generation(),
            Some((SpiGeneration(u32::from(round) + 1), false))
        );
        if round == 0 {
            // Connections set up after a rotation, on both shards.
            net.add_link(0);
            net.add_link(1);
        }
        net.run_for(Duration::from_micros(150));
    }
    let deadline = net.now + Duration::from_secs(2);
    while net.unfinished() > 0 {
        assert!(net.now < deadline, "{} unfinished", net.unfinished());
        net.step();
    }

    assert_eq!(net.completed as usize, total + 2 * 2 * PER_SIDE);
    assert_eq!(net.unsteered, 0, "every frame of Y found its shard");
    assert!(net.spis.iter().all(|s| !s.is_empty()));
    assert!(
        net.spis[0].is_disjoint(&net.spis[1]),
        "the shards never share an SPI"
    );
    for (shard, spis) in net.spis.iter().enumerate() {
        for &spi in spis {
            assert_eq!(net.x.steering().shard_of_spi(Spi(spi)), Some(shard as u16));
        }
        // Steered right: no shard saw a frame of the other's connections.
        let stats = net.engines[shard].stats();
        assert_eq!(stats.drops.get(DropReason::UnknownConnection), 0);
        assert_eq!(stats.key_rotations, 2);
        assert!(stats.retransmissions > 0, "losses were recovered");
    }
    assert_eq!(net.x.rotations(), 2);
}
