//! N engines over faulty loopback links in virtual time, with a scripted
//! ULP at each node that checks every payload, exactly-once completion and
//! RSN order (quinn-proto's test `Pair`, for any number of engines).
//!
//! Layer: test driver above the engine. Owns [`Cluster`] (the nodes, the
//! virtual clock, the books of what was submitted) and [`ClusterNode`] (an
//! engine, its [`MeshPort`], its connections and its ULP's records). The
//! topology: node `i` has MAC `02:00:00:00:00:i+1` and IPv4 `10.0.0.i+1`;
//! every two nodes share a loopback pair (a full mesh of links, each with
//! its own seeded [`FaultInjector`] per direction) and
//! [`Setup::connections`] connections. One engine port per node, as on a
//! host, and one link per pair of nodes, so per-link faults need no switch
//! model: the [`MeshPort`] only picks the link by destination address.
//!
//! The driver never reads a clock or the OS RNG: time jumps to the next
//! timer, frame or delayed answer, and every random choice comes from
//! [`Setup::seed`], so a run replays bit for bit.

use std::collections::{BTreeMap, HashMap, VecDeque};

use core::time::Duration;

use psp::{MasterKey, MasterKeys};

use crate::delivery::{DeliveryConfig, OrderingMode, UlpNack};
use crate::engine::{
    connect, ConnectionHandle, Engine, EngineConfig, PairSpec, PspConfig, RueMode,
};
use crate::ids::ConnectionId;
use crate::port::Port;
use crate::random::{Random, SplitMix64};
use crate::resources::ResourceConfig;
use crate::seq::Rsn;
use crate::time::Timestamp;
use crate::transaction::{
    Completion, CompletionStatus, RejectReason, Request, Transaction, TransactionConfig,
    TransactionKind, UlpHeader,
};
use crate::wire::EthernetAddress;

use super::loopback::{FaultInjector, Faults, Loopback, LoopbackConfig, LoopbackPort};
use super::mbuf::{MbufPool, MbufPort};
use super::mesh::{MeshLink, MeshPort};
use super::ulp::{Answer, Policy};

/// The payload of transaction `tag`: `len` bytes derived from the tag (the
/// scripted ULP sends it and checks it on arrival).
pub fn pattern(tag: u64, len: usize) -> Vec<u8> {
    let mut x = tag.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// How a [`Cluster`] is built.
#[derive(Debug, Clone)]
pub struct Setup {
    /// Engines in the cluster (at least 2). Default 2.
    pub nodes: usize,
    /// PSP on every connection. Default on.
    pub psp: bool,
    /// Ordering of every connection. Default ordered.
    pub ordering: OrderingMode,
    /// Faults on each direction of each link.
    pub faults: Faults,
    /// Seed of the engines, the fault injectors and the random workload.
    pub seed: u64,
    /// Connections between every two nodes. Default 1.
    pub connections: usize,
    /// Every engine's resource pools.
    pub resources: ResourceConfig,
    /// Every engine's delivery configuration.
    pub delivery: DeliveryConfig,
    /// Every engine's transaction configuration.
    pub transaction: TransactionConfig,
    /// Where the rate-update engine runs. `External`: one RUE core serves
    /// every node, one queue pair each (its `id_base` is set per node).
    pub rue: RueMode,
    /// One-way delay of every link. Default 2 µs.
    pub one_way_delay: Duration,
}

impl Default for Setup {
    fn default() -> Self {
        Setup {
            nodes: 2,
            psp: true,
            ordering: OrderingMode::Ordered,
            faults: Faults::default(),
            seed: 1,
            connections: 1,
            resources: ResourceConfig::default(),
            delivery: DeliveryConfig::default(),
            transaction: TransactionConfig::default(),
            rue: RueMode::Swift,
            one_way_delay: Duration::from_micros(2),
        }
    }
}

/// What an initiator submitted, as the checkers expect to see it again.
#[derive(Debug, Clone)]
pub struct Expect {
    /// Push or pull.
    pub kind: TransactionKind,
    /// The ULP's tag (the payload is [`pattern`]`(tag, len)`).
    pub tag: u64,
    /// Payload bytes (push) or requested bytes (pull).
    pub len: usize,
}

/// One node: an engine, its port, its connections, and its ULP's books.
/// Connections are indexed per node: `conns[c]`, `backlog[c]`,
/// `completions[c]`... all describe the same connection.
pub struct ClusterNode<P: Port> {
    /// The engine.
    pub engine: Engine<P::Buf>,
    /// Its port: one faulty link per peer node.
    pub port: MeshPort<P>,
    /// Its connections: to each peer in node order, [`Setup::connections`]
    /// each, then any added later.
    pub conns: Vec<ConnectionHandle>,
    /// Per connection: the peer node and the peer's index of the same
    /// connection (`None` for an orphan, which has no peer end).
    pub peers: Vec<Option<(usize, usize)>>,
    /// Per connection: transactions not yet accepted by `submit`.
    pub backlog: Vec<VecDeque<Transaction>>,
    /// Per connection: the engine said Xoff and no Xon since.
    pub xoff: Vec<bool>,
    /// Per connection: target ULP policy.
    pub policy: Vec<Policy>,
    /// (connection, RSN) → answers for successive deliveries.
    pub plans: HashMap<(usize, u32), VecDeque<Answer>>,
    /// Delayed answers: (when, connection, request).
    pub(super) pending: Vec<(Timestamp, usize, Request<P::Buf>)>,
    /// Completions, per connection, in arrival order (their Pull Data
    /// checked and released).
    pub completions: Vec<Vec<Completion<P::Buf>>>,
    /// First deliveries (RSN), per connection, in order.
    pub deliveries: Vec<Vec<Rsn>>,
    /// Deliveries flagged as redeliveries.
    pub redeliveries: u64,
    /// Every delivery per connection: (RSN, redelivery, when).
    pub log: Vec<Vec<(Rsn, bool, Timestamp)>>,
    /// Requests that got a NACK answer, per connection.
    pub nacked: Vec<Vec<Rsn>>,
    /// Ordered: the RSN this ULP RNR-NACKed and has not accepted since, and
    /// the NACK it repeats for every later request meanwhile (§8.5.3.4).
    pub(super) rnr_hold: Vec<Option<(Rsn, UlpNack)>>,
    /// Pull Data refused for lack of credits, retried every turn.
    pub(super) deferred: Vec<(usize, Rsn, Vec<u8>)>,
    /// Xon events received.
    pub xon: u64,
    /// Xoff events received.
    pub xoff_events: u64,
    /// Codes of the connection errors reported to the ULP.
    pub connection_errors: Vec<u8>,
    rx: Vec<P::Buf>,
    tx: Vec<P::Buf>,
}

impl<P: Port> ClusterNode<P> {
    /// Adds the books of one more connection.
    fn push_connection(&mut self, handle: ConnectionHandle, peer: Option<(usize, usize)>) {
        self.conns.push(handle);
        self.peers.push(peer);
        self.backlog.push(VecDeque::new());
        self.xoff.push(false);
        self.policy.push(Policy::Immediate);
        self.completions.push(Vec::new());
        self.deliveries.push(Vec::new());
        self.log.push(Vec::new());
        self.nacked.push(Vec::new());
        self.rnr_hold.push(None);
    }
}

/// N nodes in virtual time (see the module doc).
pub struct Cluster<P: Port = LoopbackPort> {
    /// The nodes, by index.
    pub nodes: Vec<ClusterNode<P>>,
    /// With `Setup::rue` external: one RUE core serving every node (as a
    /// RUE lcore serves several datapath lcores), one queue pair each.
    pub external_rue: Option<(rue::Rue, Vec<rue::RueChannel>)>,
    /// Per initiator node: (connection, RSN) → what was submitted.
    pub expected: Vec<HashMap<(usize, u32), Expect>>,
    /// The virtual clock.
    pub now: Timestamp,
    /// Ordering of every connection.
    pub ordering: OrderingMode,
    rng: SplitMix64,
    next_tag: u64,
}

fn keys(seed: u8) -> MasterKeys {
    MasterKeys {
        k0: MasterKey::new([seed; 32]),
        k1: MasterKey::new([seed ^ 0xFF; 32]),
    }
}

/// The MAC address of node `i`.
fn mac(i: usize) -> EthernetAddress {
    EthernetAddress([2, 0, 0, 0, 0, node_byte(i)])
}

/// The IPv4 address of node `i`.
fn ip(i: usize) -> core::net::IpAddr {
    core::net::IpAddr::V4(core::net::Ipv4Addr::new(10, 0, 0, node_byte(i)))
}

/// Node `i`'s last address byte (`i + 1`).
fn node_byte(i: usize) -> u8 {
    u8::try_from(i + 1).expect("at most 254 nodes")
}

impl Cluster<LoopbackPort> {
    /// `setup.nodes` engines over the heap-buffer loopback.
    pub fn new(setup: Setup) -> Cluster {
        Cluster::with_ports(setup, |wires| wires)
    }
}

/// A port the cluster runs the engines over: the loopback's heap buffers,
/// or mbuf-like ones ([`MbufPort`]).
pub trait TestPort: Port + Sized {
    /// One node's ports, over its ends of the loopback links (one per
    /// peer); they share the node's buffer pool, if the port has one.
    fn node_ports(wires: Vec<LoopbackPort>) -> Vec<Self>;

    /// Buffers out of the port's pool (allocated, not yet freed), where
    /// the port counts them.
    fn buffers_out(&self) -> Option<usize>;
}

impl TestPort for LoopbackPort {
    fn node_ports(wires: Vec<LoopbackPort>) -> Vec<Self> {
        wires
    }

    fn buffers_out(&self) -> Option<usize> {
        None
    }
}

impl TestPort for MbufPort {
    fn node_ports(wires: Vec<LoopbackPort>) -> Vec<Self> {
        let pool = MbufPool::new(8192);
        wires
            .into_iter()
            .map(|wire| MbufPort::new(wire, std::rc::Rc::clone(&pool)))
            .collect()
    }

    fn buffers_out(&self) -> Option<usize> {
        let (small, large) = self.pool().outstanding();
        Some(small + large)
    }
}

impl<P: TestPort> Cluster<P> {
    /// `setup.nodes` engines over ports of type `P`.
    pub fn over(setup: Setup) -> Self {
        Cluster::with_ports(setup, P::node_ports)
    }

    /// Once everything completed: every buffer the engines and ULPs were
    /// given went back to its pool (for ports that count them).
    pub fn assert_no_buffer_held(&self) {
        for (i, node) in self.nodes.iter().enumerate() {
            for link in node.port.links() {
                if let Some(out) = link.port.inner().buffers_out() {
                    assert_eq!(out, 0, "node {i}: buffers not returned to the pool");
                }
            }
        }
    }
}

impl<P: Port> Cluster<P> {
    /// `setup.nodes` engines over the loopback links as `ports` makes
    /// them: it gets one node's ends (one per peer, in peer order) and
    /// returns that node's ports in the same order (a port of another
    /// buffer type wraps them).
    pub fn with_ports(setup: Setup, mut ports: impl FnMut(Vec<LoopbackPort>) -> Vec<P>) -> Self {
        assert!(setup.nodes >= 2, "a cluster has at least two nodes");
        let n = setup.nodes;
        let now = Timestamp::from_micros(1_000);
        let mut engines: Vec<Engine<P::Buf>> = (0..n)
            .map(|i| {
                let config = EngineConfig {
                    local_mac: mac(i),
                    local_ip: ip(i),
                    psp: setup.psp.then(|| PspConfig::new(keys(node_byte(i)))),
                    // Each node's connections follow the previous node's
                    // (1024 slots each by default) in the shared table.
                    rue: match setup.rue {
                        RueMode::External { .. } => RueMode::External {
                            id_base: (i as u32) << 10,
                        },
                        ref mode => mode.clone(),
                    },
                    delivery: setup.delivery.clone(),
                    resources: setup.resources,
                    transaction: setup.transaction,
                    seed: setup.seed ^ i as u64,
                    ..EngineConfig::default()
                };
                Engine::<P::Buf>::new(config, now).expect("valid engine config")
            })
            .collect();
        let external_rue = match setup.rue {
            RueMode::External { .. } => {
                let config = rue::RueConfig {
                    connections: (n as u32) << 10,
                    ..rue::RueConfig::default()
                };
                let mut core =
                    rue::Rue::new(config, rue::Profiles::swift_default()).expect("RUE config");
                let channels = (0..n).map(|_| core.add_core(1024)).collect();
                Some((core, channels))
            }
            _ => None,
        };
        // Per node: (peer, connection handles) and its loopback ends, in
        // peer order.
        let mut conns: Vec<Vec<(usize, ConnectionHandle)>> = (0..n).map(|_| Vec::new()).collect();
        let mut wires: Vec<Vec<(usize, LoopbackPort)>> = (0..n).map(|_| Vec::new()).collect();
        for a in 0..n {
            for b in a + 1..n {
                // Node-local CIDs: 0x100 × (node + 1) + connection, plus
                // 0x10000 × the peer's rank among the node's peers.
                let cid = |node: usize, peer: usize, c: usize| {
                    let rank = if peer < node { peer } else { peer - 1 };
                    ConnectionId::truncating((0x100 * (node + 1) + c + (rank << 16)) as u32)
                };
                let (left, right) = engines.split_at_mut(b);
                let (ea, eb) = (&mut left[a], &mut right[0]);
                for c in 0..setup.connections {
                    let spec = PairSpec {
                        a_cid: cid(a, b, c),
                        b_cid: cid(b, a, c),
                        ordering: setup.ordering,
                        ..PairSpec::default()
                    };
                    let (ca, cb) = connect(now, ea, eb, &spec).expect("connect");
                    conns[a].push((b, ca));
                    conns[b].push((a, cb));
                }
                let (pa, pb) = Loopback::pair(LoopbackConfig {
                    one_way_delay: setup.one_way_delay,
                    ..LoopbackConfig::default()
                });
                wires[a].push((b, pa));
                wires[b].push((a, pb));
            }
        }
        let mut nodes = Vec::with_capacity(n);
        for (i, (engine, wires)) in engines.into_iter().zip(wires).enumerate() {
            let peers: Vec<usize> = wires.iter().map(|(peer, _)| *peer).collect();
            let ports = ports(wires.into_iter().map(|(_, wire)| wire).collect());
            assert_eq!(ports.len(), peers.len(), "one port per link");
            let links = peers
                .iter()
                .zip(ports)
                .enumerate()
                .map(|(rank, (&peer, port))| MeshLink {
                    peer,
                    mac: mac(peer),
                    port: FaultInjector::new(port, setup.faults, link_seed(setup.seed, i, rank)),
                })
                .collect();
            let mut node = ClusterNode {
                engine,
                port: MeshPort::new(links),
                conns: Vec::new(),
                peers: Vec::new(),
                backlog: Vec::new(),
                xoff: Vec::new(),
                policy: Vec::new(),
                plans: HashMap::new(),
                pending: Vec::new(),
                completions: Vec::new(),
                deliveries: Vec::new(),
                redeliveries: 0,
                log: Vec::new(),
                nacked: Vec::new(),
                rnr_hold: Vec::new(),
                deferred: Vec::new(),
                xon: 0,
                xoff_events: 0,
                connection_errors: Vec::new(),
                rx: Vec::new(),
                tx: Vec::new(),
            };
            // A node's connections are grouped by peer, in peer order, so
            // the c-th to `peer` here is the c-th to this node there.
            for (k, &(peer, handle)) in conns[i].iter().enumerate() {
                let first = |list: &[(usize, ConnectionHandle)], to| {
                    list.iter().position(|&(p, _)| p == to).unwrap_or(0)
                };
                let c = k - first(&conns[i], peer);
                node.push_connection(handle, Some((peer, first(&conns[peer], i) + c)));
            }
            nodes.push(node);
        }
        Cluster {
            nodes,
            expected: (0..n).map(|_| HashMap::new()).collect(),
            external_rue,
            now,
            ordering: setup.ordering,
            rng: SplitMix64::new(setup.seed ^ 0xABCD),
            next_tag: 1,
        }
    }

    /// The RSN of the `k`-th transaction `node` submits on its connection
    /// `conn` (none refused): RSNs count from the initial ones of
    /// `PairSpec`, whose `a` end is the lower-numbered node.
    pub fn rsn(&self, node: usize, conn: usize, k: u32) -> u32 {
        let spec = PairSpec::default();
        let a_end = match self.nodes[node].peers[conn] {
            Some((peer, _)) => node < peer,
            None => true,
        };
        let first = if a_end {
            spec.sequence.tx_rsn
        } else {
            spec.sequence.rx_rsn
        };
        first.wrapping_add(k).value()
    }

    /// Adds a connection on `node` towards `peer` that `peer` does not
    /// have: its packets are dropped there as unknown connections. Returns
    /// its index on `node`.
    pub fn add_orphan_connection(&mut self, node: usize, peer: usize) -> usize {
        let now = self.now;
        let (spi_peer, key) = self.nodes[peer]
            .engine
            .allocate_spi(psp::Version::Aes128Gcm)
            .expect("PSP on");
        let (spi_local, _) = self.nodes[node]
            .engine
            .allocate_spi(psp::Version::Aes128Gcm)
            .expect("PSP on");
        let mut config = crate::engine::ConnectionConfig::new(
            ConnectionId::truncating(0x999),
            ConnectionId::truncating(0x998),
            ip(peer),
            mac(peer),
        );
        config.psp = Some(crate::engine::ConnectionPsp::new(spi_peer, key, spi_local));
        config.ordering = self.ordering;
        let near = &mut self.nodes[node];
        let handle = near.engine.add_connection(now, config).expect("orphan");
        near.push_connection(handle, None);
        near.conns.len() - 1
    }

    /// Queues a transaction from `node` on its connection `conn`; returns
    /// its tag.
    pub fn queue(&mut self, node: usize, conn: usize, kind: TransactionKind, len: usize) -> u64 {
        let tag = self.next_tag;
        self.next_tag += 1;
        let transaction = match kind {
            TransactionKind::Push => Transaction::push(tag, pattern(tag, len)),
            TransactionKind::Pull => Transaction::pull(tag, len as u16)
                .with_header(UlpHeader::new(&tag.to_le_bytes()).expect("8 bytes")),
        };
        self.nodes[node].backlog[conn].push_back(transaction);
        tag
    }

    /// Queues `n` random transactions (push or pull, 0..=max_len bytes) on
    /// every connection of `node`.
    pub fn queue_random(&mut self, node: usize, n: usize, max_len: usize) {
        for conn in 0..self.nodes[node].conns.len() {
            for _ in 0..n {
                let kind = if self.rng.chance(1, 2) {
                    TransactionKind::Push
                } else {
                    TransactionKind::Pull
                };
                let len = self.rng.below(max_len as u32 + 1) as usize;
                self.queue(node, conn, kind, len);
            }
        }
    }

    /// Transactions submitted or queued and not yet completed.
    pub fn unfinished(&self) -> usize {
        self.nodes
            .iter()
            .zip(&self.expected)
            .map(|(node, expected)| {
                let queued: usize = node.backlog.iter().map(VecDeque::len).sum();
                let done: usize = node.completions.iter().map(Vec::len).sum();
                queued + expected.len() - done
            })
            .sum()
    }

    /// One turn of every node, then a jump to the next event. Returns false
    /// when nothing is left to happen.
    pub fn step(&mut self) -> bool {
        for i in 0..self.nodes.len() {
            self.turn(i);
        }
        let mut next: Option<Timestamp> = None;
        let mut consider = |t: Option<Timestamp>| {
            if let Some(t) = t {
                next = Some(next.map_or(t, |n: Timestamp| n.min(t)));
            }
        };
        for node in &self.nodes {
            consider(node.engine.poll_timeout());
            consider(node.port.poll_timeout());
            consider(node.pending.iter().map(|p| p.0).min());
        }
        match next {
            Some(t) => {
                self.now = self.now.max(t);
                true
            }
            None => false,
        }
    }

    /// Steps until `done`, within `max_time` of virtual time; panics on
    /// livelock or deadline.
    pub fn drive(&mut self, max_time: Duration, mut done: impl FnMut(&Cluster<P>) -> bool) {
        let deadline = self.now + max_time;
        let mut last = self.now;
        let mut stuck = 0;
        loop {
            if done(self) {
                return;
            }
            assert!(
                self.now <= deadline,
                "not done by {deadline} (virtual); {} unfinished",
                self.unfinished()
            );
            if !self.step() {
                assert!(
                    done(self),
                    "idle but not done: {} unfinished",
                    self.unfinished()
                );
                return;
            }
            if self.now == last {
                stuck += 1;
                assert!(stuck < 10_000, "livelock at {}", self.now);
            } else {
                stuck = 0;
                last = self.now;
            }
        }
    }

    /// Drives until every queued transaction completed, then until the
    /// last ACKs arrived and no engine holds resources (at most 50 ms of
    /// virtual time more).
    pub fn run_to_completion(&mut self, max_time: Duration) {
        self.drive(max_time, |c| c.unfinished() == 0);
        self.drive(Duration::from_millis(50), |c| {
            c.nodes.iter().all(|n| {
                crate::resources::Credit::ALL
                    .iter()
                    .all(|&credit| n.engine.resources_used(credit) == 0)
            })
        });
    }

    /// Every completion of `node` has status Ack.
    pub fn assert_all_ok(&self, node: usize) {
        for (conn, done) in self.nodes[node].completions.iter().enumerate() {
            for c in done {
                assert_eq!(
                    c.status,
                    CompletionStatus::Ack,
                    "node {node} conn {conn} {} (tag {})",
                    c.rsn,
                    c.tag
                );
            }
        }
    }

    /// Completions of `node` by status.
    pub fn statuses(&self, node: usize) -> BTreeMap<&'static str, usize> {
        let mut map = BTreeMap::new();
        for done in &self.nodes[node].completions {
            for c in done {
                *map.entry(c.status.name()).or_insert(0) += 1;
            }
        }
        map
    }

    fn turn(&mut self, side: usize) {
        let now = self.now;
        // Submit what the ULP has, unless told Xoff.
        let node = &mut self.nodes[side];
        for conn in 0..node.conns.len() {
            while !node.xoff[conn] {
                let Some(transaction) = node.backlog[conn].pop_front() else {
                    break;
                };
                let (kind, tag, len) = (
                    transaction.kind(),
                    transaction.tag,
                    match transaction.op {
                        crate::transaction::Op::Push(ref data) => data.len(),
                        crate::transaction::Op::Pull { request_length } => {
                            usize::from(request_length)
                        }
                    },
                );
                match node.engine.submit(now, node.conns[conn], transaction) {
                    Ok(rsn) => {
                        let previous = self.expected[side]
                            .insert((conn, rsn.value()), Expect { kind, tag, len });
                        assert!(previous.is_none(), "RSN {rsn} assigned twice");
                    }
                    Err(rejected) => {
                        assert!(
                            matches!(rejected.reason, RejectReason::NoResources(_)),
                            "{rejected}"
                        );
                        node.backlog[conn].push_front(rejected.returned);
                        node.xoff[conn] = true;
                    }
                }
            }
        }
        // Frames in.
        let node = &mut self.nodes[side];
        node.engine
            .receive_burst(now, &mut node.port, &mut node.rx, usize::MAX);
        node.engine.handle_timeout(now);
        self.run_external_rue(side);
        self.run_ulp(side);
        // Frames out.
        let node = &mut self.nodes[side];
        node.engine
            .transmit_burst(now, &mut node.port, &mut node.tx, usize::MAX);
        assert!(node.tx.is_empty(), "loopback line full");
    }

    /// The loop's part with a RUE on another core: events out, the RUE's
    /// turn (on its own core it would run meanwhile), results in.
    fn run_external_rue(&mut self, side: usize) {
        let Some((core, channels)) = &mut self.external_rue else {
            return;
        };
        let (engine, channel) = (&mut self.nodes[side].engine, &mut channels[side]);
        while let Some(event) = engine.poll_rue_event(
            self.now,
            channel.event_occupancy(),
            channel.event_capacity(),
        ) {
            channel
                .push(event)
                .expect("admission keeps the queue from overflowing");
        }
        core.process(usize::MAX);
        while let Some(result) = channel.pop() {
            assert!(
                engine.handle_rue_result(self.now, &result),
                "result for a live connection"
            );
        }
    }
}

/// The fault injector's seed of node `node`'s link to its `rank`-th peer:
/// distinct per direction and per link.
fn link_seed(seed: u64, node: usize, rank: usize) -> u64 {
    let node = node as u64;
    seed.wrapping_mul(2 * node + 3)
        .wrapping_add(node)
        .wrapping_add((rank as u64) << 32)
}
