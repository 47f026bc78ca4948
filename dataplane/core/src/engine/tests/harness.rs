//! Two engines over a faulty loopback in virtual time, with a scripted ULP
//! at each end that checks every payload, exactly-once completion and RSN
//! order (quinn-proto's test `Pair`).

use std::collections::{BTreeMap, HashMap, VecDeque};

use core::time::Duration;

use psp::{MasterKey, MasterKeys};

use crate::delivery::{DeliveryConfig, OrderingMode, UlpNack};
use crate::engine::{
    connect, ConnectionHandle, Engine, EngineConfig, PairSpec, PspConfig, RueMode,
};
use crate::ids::ConnectionId;
use crate::port::{FaultInjector, Faults, Loopback, LoopbackConfig, LoopbackPort, Port};

use super::mbuf::{MbufPool, MbufPort};
use crate::random::{Random, SplitMix64};
use crate::resources::ResourceConfig;
use crate::seq::Rsn;
use crate::time::Timestamp;
use crate::transaction::{
    Completion, CompletionStatus, RejectReason, Request, Transaction, TransactionConfig,
    TransactionKind, UlpEvent, UlpHeader,
};
use crate::wire::EthernetAddress;

/// The payload of transaction `tag`: `len` bytes derived from the tag.
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

/// How the setup is built.
#[derive(Debug, Clone)]
pub struct Setup {
    pub psp: bool,
    pub ordering: OrderingMode,
    /// Faults on each direction.
    pub faults: Faults,
    pub seed: u64,
    pub connections: usize,
    pub resources: ResourceConfig,
    pub delivery: DeliveryConfig,
    pub transaction: TransactionConfig,
    pub rue: RueMode,
    pub one_way_delay: Duration,
}

impl Default for Setup {
    fn default() -> Self {
        Setup {
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

/// What the target ULP does with one delivery of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// ACK (push) or serve the Pull Data (pull).
    Accept,
    /// NACK it.
    Nack(UlpNack),
    /// Never answer.
    Ignore,
}

/// The target ULP's default for a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// Answer at once.
    Immediate,
    /// Answer after this long.
    Delay(Duration),
    /// Never answer (a stuck ULP).
    Never,
}

#[derive(Debug, Clone)]
pub struct Expect {
    pub kind: TransactionKind,
    pub tag: u64,
    pub len: usize,
}

/// One end: an engine, its port, its connections, and its ULP's books.
pub struct Node<P: Port> {
    pub engine: Engine<P::Buf>,
    pub port: FaultInjector<P>,
    pub conns: Vec<ConnectionHandle>,
    /// Per connection: transactions not yet accepted by `submit`.
    pub backlog: Vec<VecDeque<Transaction>>,
    pub xoff: Vec<bool>,
    /// Per connection: target ULP policy.
    pub policy: Vec<Policy>,
    /// (connection, RSN) → answers for successive deliveries.
    pub plans: HashMap<(usize, u32), VecDeque<Answer>>,
    /// Delayed answers: (when, connection, request).
    pending: Vec<(Timestamp, usize, Request<P::Buf>)>,
    /// Completions, per connection, in arrival order (their Pull Data
    /// checked and released).
    pub completions: Vec<Vec<Completion<P::Buf>>>,
    /// First deliveries (RSN), per connection, in order.
    pub deliveries: Vec<Vec<Rsn>>,
    pub redeliveries: u64,
    /// Every delivery per connection: (RSN, redelivery, when).
    pub log: Vec<Vec<(Rsn, bool, Timestamp)>>,
    /// Requests that got a NACK answer, per connection.
    pub nacked: Vec<Vec<Rsn>>,
    /// Ordered: the RSN this ULP RNR-NACKed and has not accepted since, and
    /// the NACK it repeats for every later request meanwhile (§8.5.3.4).
    rnr_hold: Vec<Option<(Rsn, UlpNack)>>,
    /// Pull Data refused for lack of credits, retried every turn.
    deferred: Vec<(usize, Rsn, Vec<u8>)>,
    pub xon: u64,
    pub xoff_events: u64,
    pub connection_errors: Vec<u8>,
    rx: Vec<P::Buf>,
    tx: Vec<P::Buf>,
}

/// Two nodes in virtual time.
pub struct Pair<P: Port = LoopbackPort> {
    pub nodes: [Node<P>; 2],
    /// With `Setup::rue` external: one RUE core serving both nodes (as a
    /// RUE lcore serves several datapath lcores), one queue pair each.
    pub external_rue: Option<(rue::Rue, [rue::RueChannel; 2])>,
    /// Per initiator side: (connection, RSN) → what was submitted.
    pub expected: [HashMap<(usize, u32), Expect>; 2],
    pub now: Timestamp,
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

impl Pair<LoopbackPort> {
    /// Two engines over the heap-buffer loopback.
    pub fn new(setup: Setup) -> Pair {
        Pair::with_ports(setup, |a, b| (a, b))
    }
}

/// A port the suites run the engines over: the loopback's heap buffers,
/// or mbuf-like ones ([`MbufPort`]).
pub trait TestPort: Port + Sized {
    /// The two ends, over the loopback's.
    fn ends(a: LoopbackPort, b: LoopbackPort) -> (Self, Self);

    /// Buffers out of the port's pool (allocated, not yet freed), where
    /// the port counts them.
    fn buffers_out(&self) -> Option<usize>;
}

impl TestPort for LoopbackPort {
    fn ends(a: LoopbackPort, b: LoopbackPort) -> (Self, Self) {
        (a, b)
    }

    fn buffers_out(&self) -> Option<usize> {
        None
    }
}

impl TestPort for MbufPort {
    fn ends(a: LoopbackPort, b: LoopbackPort) -> (Self, Self) {
        (
            MbufPort::new(a, MbufPool::new(8192)),
            MbufPort::new(b, MbufPool::new(8192)),
        )
    }

    fn buffers_out(&self) -> Option<usize> {
        let (small, large) = self.pool().outstanding();
        Some(small + large)
    }
}

impl<P: TestPort> Pair<P> {
    /// Two engines over ports of type `P`.
    pub fn over(setup: Setup) -> Self {
        Pair::with_ports(setup, P::ends)
    }

    /// Once everything completed: every buffer the engines and ULPs were
    /// given went back to its pool (for ports that count them).
    pub fn assert_no_buffer_held(&self) {
        for (side, node) in self.nodes.iter().enumerate() {
            if let Some(out) = node.port.inner().buffers_out() {
                assert_eq!(out, 0, "side {side}: buffers not returned to the pool");
            }
        }
    }
}

impl<P: Port> Pair<P> {
    /// Two engines over the loopback's ends as `ports` makes them (a port
    /// of another buffer type wraps them).
    pub fn with_ports(
        setup: Setup,
        ports: impl FnOnce(LoopbackPort, LoopbackPort) -> (P, P),
    ) -> Self {
        let now = Timestamp::from_micros(1_000);
        let engine = |side: u8| {
            let config = EngineConfig {
                local_mac: EthernetAddress([2, 0, 0, 0, 0, side + 1]),
                local_ip: core::net::IpAddr::V4(core::net::Ipv4Addr::new(10, 0, 0, side + 1)),
                psp: setup.psp.then(|| PspConfig::new(keys(side + 1))),
                // Node 1's connections follow node 0's (1024 slots each by
                // default) in the shared table.
                rue: match setup.rue {
                    RueMode::External { .. } => RueMode::External {
                        id_base: u32::from(side) << 10,
                    },
                    ref mode => mode.clone(),
                },
                delivery: setup.delivery.clone(),
                resources: setup.resources,
                transaction: setup.transaction,
                seed: setup.seed ^ u64::from(side),
                ..EngineConfig::default()
            };
            Engine::<P::Buf>::new(config, now).expect("valid engine config")
        };
        let (mut a, mut b) = (engine(0), engine(1));
        let external_rue = match setup.rue {
            RueMode::External { .. } => {
                let config = rue::RueConfig {
                    connections: 1 << 11,
                    ..rue::RueConfig::default()
                };
                let mut core =
                    rue::Rue::new(config, rue::Profiles::swift_default()).expect("RUE config");
                let channels = [core.add_core(1024), core.add_core(1024)];
                Some((core, channels))
            }
            _ => None,
        };
        let mut conns = (Vec::new(), Vec::new());
        for i in 0..setup.connections {
            let spec = PairSpec {
                a_cid: ConnectionId::truncating(0x100 + i as u32),
                b_cid: ConnectionId::truncating(0x200 + i as u32),
                ordering: setup.ordering,
                ..PairSpec::default()
            };
            let (ca, cb) = connect(now, &mut a, &mut b, &spec).expect("connect");
            conns.0.push(ca);
            conns.1.push(cb);
        }
        let (pa, pb) = Loopback::pair(LoopbackConfig {
            one_way_delay: setup.one_way_delay,
            ..LoopbackConfig::default()
        });
        let (pa, pb) = ports(pa, pb);
        let node = |engine, port, conns: Vec<ConnectionHandle>, seed| -> Node<P> {
            let n = conns.len();
            Node {
                engine,
                port: FaultInjector::new(port, setup.faults, seed),
                conns,
                backlog: vec![VecDeque::new(); n],
                xoff: vec![false; n],
                policy: vec![Policy::Immediate; n],
                plans: HashMap::new(),
                pending: Vec::new(),
                completions: (0..n).map(|_| Vec::new()).collect(),
                deliveries: vec![Vec::new(); n],
                redeliveries: 0,
                log: vec![Vec::new(); n],
                nacked: vec![Vec::new(); n],
                rnr_hold: vec![None; n],
                deferred: Vec::new(),
                xon: 0,
                xoff_events: 0,
                connection_errors: Vec::new(),
                rx: Vec::new(),
                tx: Vec::new(),
            }
        };
        Pair {
            nodes: [
                node(a, pa, conns.0, setup.seed.wrapping_mul(3)),
                node(b, pb, conns.1, setup.seed.wrapping_mul(5) + 1),
            ],
            expected: [HashMap::new(), HashMap::new()],
            external_rue,
            now,
            ordering: setup.ordering,
            rng: SplitMix64::new(setup.seed ^ 0xABCD),
            next_tag: 1,
        }
    }

    /// The RSN of the `k`-th transaction `side` submits on a connection
    /// (none refused): RSNs count from the initial one of `PairSpec`.
    pub fn rsn(&self, side: usize, k: u32) -> u32 {
        let spec = PairSpec::default();
        let first = if side == 0 {
            spec.sequence.tx_rsn
        } else {
            spec.sequence.rx_rsn
        };
        first.wrapping_add(k).value()
    }

    /// Adds a connection on `side` whose peer CID the other side does not
    /// have: its packets are dropped there as unknown connections.
    pub fn add_orphan_connection(&mut self, side: usize) -> usize {
        let now = self.now;
        let (ours, theirs) = if side == 0 { (0, 1) } else { (1, 0) };
        let (spi_peer, key) = self.nodes[theirs]
            .engine
            .allocate_spi(psp::Version::Aes128Gcm)
            .expect("PSP on");
        let (spi_local, _) = self.nodes[ours]
            .engine
            .allocate_spi(psp::Version::Aes128Gcm)
            .expect("PSP on");
        let peer = &self.nodes[theirs].engine;
        let mut config = crate::engine::ConnectionConfig::new(
            ConnectionId::truncating(0x999),
            ConnectionId::truncating(0x998),
            peer.local_ip,
            peer.local_mac,
        );
        config.psp = Some(crate::engine::ConnectionPsp::new(spi_peer, key, spi_local));
        config.ordering = self.ordering;
        let node = &mut self.nodes[side];
        let handle = node.engine.add_connection(now, config).expect("orphan");
        node.conns.push(handle);
        node.backlog.push(VecDeque::new());
        node.xoff.push(false);
        node.policy.push(Policy::Immediate);
        node.completions.push(Vec::new());
        node.deliveries.push(Vec::new());
        node.log.push(Vec::new());
        node.nacked.push(Vec::new());
        node.rnr_hold.push(None);
        node.conns.len() - 1
    }

    /// Queues a transaction from `side` on connection `conn`.
    pub fn queue(&mut self, side: usize, conn: usize, kind: TransactionKind, len: usize) -> u64 {
        let tag = self.next_tag;
        self.next_tag += 1;
        let transaction = match kind {
            TransactionKind::Push => Transaction::push(tag, pattern(tag, len)),
            TransactionKind::Pull => Transaction::pull(tag, len as u16)
                .with_header(UlpHeader::new(&tag.to_le_bytes()).expect("8 bytes")),
        };
        self.nodes[side].backlog[conn].push_back(transaction);
        tag
    }

    /// Queues `n` random transactions (push or pull, 0..=max_len bytes) on
    /// every connection of `side`.
    pub fn queue_random(&mut self, side: usize, n: usize, max_len: usize) {
        for conn in 0..self.nodes[side].conns.len() {
            for _ in 0..n {
                let kind = if self.rng.chance(1, 2) {
                    TransactionKind::Push
                } else {
                    TransactionKind::Pull
                };
                let len = self.rng.below(max_len as u32 + 1) as usize;
                self.queue(side, conn, kind, len);
            }
        }
    }

    /// Transactions submitted or queued and not yet completed.
    pub fn unfinished(&self) -> usize {
        (0..2)
            .map(|side| {
                let node = &self.nodes[side];
                let queued: usize = node.backlog.iter().map(VecDeque::len).sum();
                let done: usize = node.completions.iter().map(Vec::len).sum();
                queued + self.expected[side].len() - done
            })
            .sum()
    }

    /// One turn of both nodes, then a jump to the next event. Returns false
    /// when nothing is left to happen.
    pub fn step(&mut self) -> bool {
        for side in 0..2 {
            self.turn(side);
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
    pub fn drive(&mut self, max_time: Duration, mut done: impl FnMut(&Pair<P>) -> bool) {
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
    /// last ACKs arrived and both engines hold no resources (at most 50 ms
    /// of virtual time more).
    pub fn run_to_completion(&mut self, max_time: Duration) {
        self.drive(max_time, |p| p.unfinished() == 0);
        self.drive(Duration::from_millis(50), |p| {
            p.nodes.iter().all(|n| {
                crate::resources::Credit::ALL
                    .iter()
                    .all(|&c| n.engine.resources_used(c) == 0)
            })
        });
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

    fn run_ulp(&mut self, side: usize) {
        let now = self.now;
        // Delayed answers that are due.
        let mut due = Vec::new();
        let node = &mut self.nodes[side];
        let mut i = 0;
        while i < node.pending.len() {
            if node.pending[i].0 <= now {
                let (_, conn, request) = node.pending.swap_remove(i);
                due.push((conn, request));
            } else {
                i += 1;
            }
        }
        // In arrival order, as `retain` kept them.
        due.sort_by_key(|(_, request)| request.rsn.value());
        for (conn, request) in due {
            self.answer(side, conn, request, Answer::Accept);
        }
        let node = &mut self.nodes[side];
        for (conn, rsn, data) in core::mem::take(&mut node.deferred) {
            if let Err(rejected) =
                node.engine
                    .submit_pull_data(now, node.conns[conn], rsn, UlpHeader::EMPTY, data)
            {
                node.deferred.push((conn, rsn, rejected.returned));
            }
        }
        while let Some(event) = self.nodes[side].engine.poll_event() {
            match event {
                UlpEvent::Completion(c) => self.on_completion(side, c),
                UlpEvent::Request(r) => self.on_request(side, r),
                UlpEvent::Xoff { .. } => self.nodes[side].xoff_events += 1,
                UlpEvent::Xon { connection, .. } => {
                    let node = &mut self.nodes[side];
                    node.xon += 1;
                    if let Some(i) = node.conns.iter().position(|&c| c == connection) {
                        node.xoff[i] = false;
                    }
                }
                UlpEvent::ConnectionError { fault, .. } => {
                    self.nodes[side].connection_errors.push(fault.code());
                }
            }
        }
        // Xon may have reopened submits: let the next turn submit.
    }

    fn conn_index(&self, side: usize, handle: ConnectionHandle) -> usize {
        self.nodes[side]
            .conns
            .iter()
            .position(|&c| c == handle)
            .expect("event of a known connection")
    }

    fn on_request(&mut self, side: usize, request: Request<P::Buf>) {
        let conn = self.conn_index(side, request.connection);
        let peer = 1 - side;
        let expect = self.expected[peer]
            .get(&(conn, request.rsn.value()))
            .unwrap_or_else(|| panic!("request {} nobody submitted", request.rsn))
            .clone();
        assert_eq!(request.kind, expect.kind);
        match expect.kind {
            TransactionKind::Push => {
                assert_eq!(
                    request.payload,
                    pattern(expect.tag, expect.len),
                    "push payload of tag {}",
                    expect.tag
                );
            }
            TransactionKind::Pull => {
                assert_eq!(usize::from(request.request_length), expect.len);
                assert_eq!(request.header.as_slice(), expect.tag.to_le_bytes());
                assert!(request.payload.is_empty());
            }
        }
        let node = &mut self.nodes[side];
        node.log[conn].push((request.rsn, request.redelivery, self.now));
        if request.redelivery {
            node.redeliveries += 1;
        } else {
            if self.ordering == OrderingMode::Ordered {
                if let Some(last) = node.deliveries[conn].last() {
                    assert_eq!(
                        request.rsn,
                        last.next(),
                        "target delivered out of RSN order"
                    );
                }
            } else {
                assert!(
                    !node.deliveries[conn].contains(&request.rsn),
                    "delivered twice"
                );
            }
            node.deliveries[conn].push(request.rsn);
        }
        let planned = node
            .plans
            .get_mut(&(conn, request.rsn.value()))
            .and_then(VecDeque::pop_front);
        // §8.5.3.4: after RNR-NACKing N, an ordered ULP keeps NACKing later
        // requests until it accepts N.
        let held_back = match node.rnr_hold[conn] {
            Some((held, nack))
                if self.ordering == OrderingMode::Ordered && request.rsn.after(held) =>
            {
                Some(nack)
            }
            _ => None,
        };
        let planned = match held_back {
            Some(nack) => {
                if let Some(answers) = planned {
                    // The plan's answer is for a later delivery.
                    node.plans
                        .entry((conn, request.rsn.value()))
                        .or_default()
                        .push_front(answers);
                }
                Some(Answer::Nack(nack))
            }
            None => planned,
        };
        if let Some(Answer::Nack(nack @ UlpNack::ReceiverNotReady { .. })) = planned {
            if node.rnr_hold[conn].is_none() {
                node.rnr_hold[conn] = Some((request.rsn, nack));
            }
        }
        if matches!(planned, None | Some(Answer::Accept))
            && node.rnr_hold[conn].is_some_and(|(held, _)| held == request.rsn)
        {
            node.rnr_hold[conn] = None;
        }
        let answer = match (planned, node.policy[conn]) {
            (Some(answer), _) => answer,
            (None, Policy::Immediate) => Answer::Accept,
            (None, Policy::Delay(d)) => {
                node.pending.push((self.now + d, conn, request));
                return;
            }
            (None, Policy::Never) => Answer::Ignore,
        };
        self.answer(side, conn, request, answer);
    }

    fn answer(&mut self, side: usize, conn: usize, mut request: Request<P::Buf>, answer: Answer) {
        let now = self.now;
        let node = &mut self.nodes[side];
        let handle = node.conns[conn];
        // The ULP is done with the payload whatever its answer (an ignored
        // request's too: the peer's retransmission or timeout ends it).
        node.engine.release(core::mem::take(&mut request.payload));
        match answer {
            Answer::Ignore => {}
            Answer::Nack(nack) => {
                node.nacked[conn].push(request.rsn);
                node.engine
                    .ulp_nack(now, handle, request.rsn, nack)
                    .expect("ulp_nack");
            }
            Answer::Accept => match request.kind {
                TransactionKind::Push => {
                    node.engine
                        .ulp_ack(now, handle, request.rsn)
                        .expect("ulp_ack");
                }
                TransactionKind::Pull => {
                    // Take the request first (PullReqUlpAckd releases its
                    // network resources), then answer when credits allow:
                    // holding an unanswered pull while waiting for Pull Data
                    // credits would tie the network region to the data one.
                    node.engine
                        .ulp_ack(now, handle, request.rsn)
                        .expect("ulp_ack");
                    let tag =
                        u64::from_le_bytes(request.header[..8].try_into().expect("8-byte tag"));
                    let data = pattern(tag, usize::from(request.request_length));
                    if let Err(rejected) = node.engine.submit_pull_data(
                        now,
                        handle,
                        request.rsn,
                        UlpHeader::EMPTY,
                        data,
                    ) {
                        // Out of Pull Data credits: a real ULP retries after
                        // the Xon; this one retries every turn.
                        assert!(
                            matches!(rejected.reason, RejectReason::NoResources(_)),
                            "{rejected}"
                        );
                        node.deferred.push((conn, request.rsn, rejected.returned));
                    }
                }
            },
        }
    }

    fn on_completion(&mut self, side: usize, mut completion: Completion<P::Buf>) {
        let conn = self.conn_index(side, completion.connection);
        let expect = self.expected[side]
            .get(&(conn, completion.rsn.value()))
            .unwrap_or_else(|| panic!("completion of unknown {}", completion.rsn))
            .clone();
        assert_eq!(completion.tag, expect.tag);
        assert_eq!(completion.kind, expect.kind);
        let node = &mut self.nodes[side];
        let done = &mut node.completions[conn];
        assert!(
            !done.iter().any(|c| c.rsn == completion.rsn),
            "completed twice: {}",
            completion.rsn
        );
        if self.ordering == OrderingMode::Ordered {
            if let Some(last) = done.last() {
                assert_eq!(
                    completion.rsn,
                    last.rsn.next(),
                    "completion out of RSN order"
                );
            }
        }
        if completion.status == CompletionStatus::Ack {
            match expect.kind {
                TransactionKind::Push => {
                    assert!(completion.data.is_empty());
                    if let Some(source) = &completion.source {
                        assert_eq!(*source, pattern(expect.tag, expect.len));
                    }
                }
                TransactionKind::Pull => {
                    assert_eq!(
                        completion.data,
                        pattern(expect.tag, expect.len),
                        "pull data of tag {}",
                        expect.tag
                    );
                }
            }
        }
        node.engine.release(core::mem::take(&mut completion.data));
        done.push(completion);
    }

    /// Every completion of `side` has status Ack.
    pub fn assert_all_ok(&self, side: usize) {
        for (conn, done) in self.nodes[side].completions.iter().enumerate() {
            for c in done {
                assert_eq!(
                    c.status,
                    CompletionStatus::Ack,
                    "conn {conn} {} (tag {})",
                    c.rsn,
                    c.tag
                );
            }
        }
    }

    /// Completions of `side` by status.
    pub fn statuses(&self, side: usize) -> BTreeMap<&'static str, usize> {
        let mut map = BTreeMap::new();
        for done in &self.nodes[side].completions {
            for c in done {
                *map.entry(c.status.name()).or_insert(0) += 1;
            }
        }
        map
    }
}
