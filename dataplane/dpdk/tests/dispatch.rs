//! Software dispatch between the lcores of one node (issue #26, item 2):
//! two nodes of two shards each, PSP on, over a ring-port pair with two
//! queues each way. A device queue is not a shard: what one node sends on
//! transmit queue `i` the other receives on receive queue `i`, whichever
//! shard owns the connection there. Connections cross shards both ways, so
//! most frames arrive at the other shard's lcore, which steers them by SPI
//! ([`Steering`]) over an `rte_ring` to their own. Every transaction
//! completes, every byte arrives as sent, the dispatch counters show the
//! frames went round, and every mbuf goes back to the pool.
#![cfg(feature = "dpdk")]

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use falcon_core::api::*;
use falcon_dpdk::clock::TscClock;
use falcon_dpdk::ethdev::{EthPort, PortConfig};
use falcon_dpdk::mbuf::Mbuf;
use falcon_dpdk::mempool::Mempool;
use falcon_dpdk::port::{Dispatch, DpdkPort};
use falcon_dpdk::ring::mbuf_ring;
use psp::{MasterKey, MasterKeys};

mod common;
use common::{backlog, backlog_push_bytes, Initiator, Target, DATA_ROOM, MAX_FRAME};

const SHARDS: u16 = 2;

/// A node of [`SHARDS`] shards, PSP on, keys from `side`.
fn node(side: u8) -> Arc<Node> {
    let keys = MasterKeys {
        k0: MasterKey::new([side; 32]),
        k1: MasterKey::new([side ^ 0xFF; 32]),
    };
    Node::new(NodeConfig {
        shards: SHARDS,
        psp: Some(PspConfig::new(keys)),
        ..NodeConfig::default()
    })
    .unwrap()
}

fn shard_engine(node: &Arc<Node>, side: u8, shard: u16, now: Timestamp) -> Engine<Mbuf> {
    Engine::new(
        EngineConfig {
            local_ip: core::net::IpAddr::V4([10, 0, 0, side].into()),
            local_mac: EthernetAddress([2, 0, 0, 0, 0, side]),
            node: Some(NodeShard {
                node: Arc::clone(node),
                shard,
            }),
            ..EngineConfig::default()
        },
        now,
    )
    .unwrap()
}

/// The shards' ports on `port`, each dispatching to the others over a
/// ring.
fn dispatching_ports(
    eal: &'static falcon_dpdk::eal::Eal,
    name: &str,
    port: EthPort,
    node: &Node,
    pool: &'static Mempool,
) -> Vec<DpdkPort> {
    let mut ports = DpdkPort::on_queues(port, SHARDS, pool, MAX_FRAME).unwrap();
    let mut senders = Vec::new();
    let mut receivers = Vec::new();
    for shard in 0..SHARDS {
        let (tx, rx) = mbuf_ring(eal, &format!("{name}_shard{shard}"), 1024).unwrap();
        senders.push(tx);
        receivers.push(rx);
    }
    for (shard, (port, inbound)) in ports.iter_mut().zip(receivers).enumerate() {
        let outbound = senders
            .iter()
            .enumerate()
            .map(|(s, ring)| (s != shard).then(|| ring.clone()))
            .collect();
        port.set_dispatch(Dispatch {
            shard: shard as u16,
            steering: node.steering(),
            inbound,
            outbound,
        });
    }
    ports
}

/// The initiators of one shard: one per connection, the backlog dealt
/// round robin.
struct Initiators(Vec<Initiator>);

impl Ulp<Mbuf, Vec<u8>> for Initiators {
    fn submit(&mut self, now: Timestamp, engine: &mut Engine<Mbuf>) {
        for i in &mut self.0 {
            i.submit(now, engine);
        }
    }

    fn on_event(&mut self, now: Timestamp, engine: &mut Engine<Mbuf>, event: UlpEvent<Mbuf>) {
        let connection = match &event {
            UlpEvent::Completion(c) => Some(c.connection),
            _ => None,
        };
        let i = connection
            .and_then(|c| self.0.iter().position(|i| i.connection == c))
            .unwrap_or(0);
        self.0[i].on_event(now, engine, event);
    }
}

#[test]
fn frames_reach_their_shard_through_the_dispatch_rings() {
    let eal = common::eal("dispatch", "0");
    let pool: &'static Mempool = Box::leak(Box::new(
        Mempool::new(eal, "dispatch_pool", 8191, 64, DATA_ROOM).unwrap(),
    ));
    let (ida, idb) =
        EthPort::ring_pair_with_queues(eal, "net_ring_da", "net_ring_db", 1024, SHARDS).unwrap();
    let config = PortConfig {
        rx_queues: SHARDS,
        tx_queues: SHARDS,
        ..PortConfig::default()
    };
    let (node_a, node_b) = (node(1), node(2));
    let start = |id, name, node: &Node| {
        let port = EthPort::start(eal, id, config, pool).unwrap();
        dispatching_ports(eal, name, port, node, pool)
    };
    let ports_a = start(ida, "a", &node_a);
    let ports_b = start(idb, "b", &node_b);

    let mut clock = TscClock::new(eal);
    let now = clock.now();
    let mut a: Vec<Engine<Mbuf>> = (0..SHARDS)
        .map(|s| shard_engine(&node_a, 1, s, now))
        .collect();
    let mut b: Vec<Engine<Mbuf>> = (0..SHARDS)
        .map(|s| shard_engine(&node_b, 2, s, now))
        .collect();
    // Every initiator shard to every target shard.
    let mut initiators: Vec<Initiators> = (0..SHARDS).map(|_| Initiators(Vec::new())).collect();
    let mut all = backlog();
    let total = all.len();
    let pairs = usize::from(SHARDS * SHARDS);
    let mut n = 0u32;
    for sa in 0..SHARDS {
        for sb in 0..SHARDS {
            n += 1;
            let spec = PairSpec {
                a_cid: node_a.steering().cid(sa, n).unwrap(),
                b_cid: node_b.steering().cid(sb, n).unwrap(),
                ..PairSpec::default()
            };
            let (ea, eb) = (&mut a[usize::from(sa)], &mut b[usize::from(sb)]);
            let (ca, _) = connect(now, ea, eb, &spec).unwrap();
            let share: VecDeque<_> = (0..total / pairs).filter_map(|_| all.pop_front()).collect();
            initiators[usize::from(sa)].0.push(Initiator {
                connection: ca,
                backlog: share,
                pull_lengths: HashMap::new(),
                done: 0,
                pulled_bytes: 0,
            });
        }
    }
    let submitted: usize = initiators
        .iter()
        .flat_map(|i| &i.0)
        .map(|i| i.backlog.len())
        .sum();
    let mut la: Vec<_> = a
        .into_iter()
        .zip(ports_a)
        .map(|(e, p)| Lcore::new(e, p, clock))
        .collect();
    let mut lb: Vec<_> = b
        .into_iter()
        .zip(ports_b)
        .map(|(e, p)| Lcore::new(e, p, clock))
        .collect();
    let mut targets: Vec<Target> = (0..SHARDS).map(|_| Target { pushed_bytes: 0 }).collect();
    let done = |i: &[Initiators]| i.iter().flat_map(|i| &i.0).map(|i| i.done).sum::<usize>();
    let deadline = Instant::now() + Duration::from_secs(30);
    while done(&initiators) < submitted {
        assert!(
            Instant::now() < deadline,
            "{} of {submitted} done in time",
            done(&initiators)
        );
        for (l, u) in la.iter_mut().zip(&mut initiators) {
            l.turn(u);
        }
        for (l, u) in lb.iter_mut().zip(&mut targets) {
            l.turn(u);
        }
    }

    // Wind down: the last ACKs still in flight, through the rings too.
    let mut drain = common::Drain;
    for _ in 0..100 {
        for l in la.iter_mut().chain(&mut lb) {
            l.turn(&mut drain);
        }
    }

    // Every shard's frames went through another shard's queue: both
    // directions of both nodes dispatched, and nothing was lost on a ring.
    for (side, lcores) in [("initiator", &la), ("target", &lb)] {
        let dispatched: u64 = lcores.iter().map(|l| l.port.stats().dispatched).sum();
        let received: u64 = lcores
            .iter()
            .map(|l| l.port.stats().dispatch_received)
            .sum();
        let full: u64 = lcores
            .iter()
            .map(|l| l.port.stats().dispatch_ring_full)
            .sum();
        assert!(dispatched > 0, "{side}: nothing dispatched");
        assert_eq!(dispatched, received, "{side}: what went in came out");
        assert_eq!(full, 0, "{side}");
        for l in lcores.iter() {
            assert!(
                l.port.stats().dispatch_received > 0,
                "{side}: a shard got none"
            );
        }
    }
    let drops: u64 = la
        .iter()
        .chain(&lb)
        .map(|l| l.engine.stats().drops.total())
        .sum();
    let retransmissions: u64 = la
        .iter()
        .chain(&lb)
        .map(|l| l.engine.stats().retransmissions)
        .sum();
    assert!(drops <= retransmissions, "{drops} drops");
    assert_eq!(submitted, total, "the backlog dealt out whole");
    let pushed: usize = targets.iter().map(|t| t.pushed_bytes).sum();
    assert_eq!(pushed, backlog_push_bytes());

    // Wind down: engines, ports and rings gone, every mbuf back.
    drop((la, lb));
    assert_eq!(pool.in_use(), 0);
    let _ = std::fs::remove_dir_all(eal.runtime_dir());
}
