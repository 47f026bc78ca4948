//! Test fixtures for the delivery sublayer: a fixed-window RUE stand-in,
//! endpoints with a scripted ULP, and a lossy virtual-time link.
//!
//! Layer: tests only (`cfg(test)`). The real simulator is `falcon-sim`;
//! this is the minimum to drive two [`DeliveryConnection`]s against each
//! other in virtual time (quinn-proto's `tests/util.rs` `Pair`): seeded
//! loss, duplication and reordering per direction, ACK loss, every packet
//! emitted to bytes and parsed back.

use std::collections::{BTreeSet, VecDeque};

use core::time::Duration;

use rue::{CcEvent, CcResult, Fcwnd, Time24};

use crate::delivery::{
    ConnectionParams, DeliveryConfig, DeliveryConnection, Event, OrderingMode, OutgoingPacket,
    PacketKind, PayloadHandle, RxMeta, RxOutcome, SubmitError, TxPacket,
};
use crate::drop::DropCounters;
use crate::ids::{ConnectionId, DestinationFunction};
use crate::random::{Random, SplitMix64};
use crate::seq::{Psn, Rsn};
use crate::time::{to_falcon_units, Timestamp};
use crate::wire::{FalconRepr, ProtocolType, RxBufferLevel};

/// A fixed-window RUE: every event gets a result that keeps the event's
/// state and sets fcwnd, ncwnd and the RTO to constants.
#[derive(Debug, Clone, Copy)]
pub struct FixedRue {
    /// The fabric window every result carries.
    pub fcwnd: Fcwnd,
    /// The NIC window every result carries.
    pub ncwnd: u16,
    /// The RTO every result carries.
    pub rto: Duration,
    /// The inter-packet gap (512 ns units).
    pub inter_packet_gap: u32,
}

impl FixedRue {
    /// The result for `event`.
    pub fn on_event(&self, event: &CcEvent) -> CcResult {
        let mut result = CcResult::reflect(event);
        result.fcwnd = self.fcwnd;
        result.ncwnd = self.ncwnd;
        result.retransmit_timeout = Time24::new(to_falcon_units(self.rto));
        result.inter_packet_gap = self.inter_packet_gap;
        // Something for the peer's RUE to echo (22 bits in ACKs).
        result.cc_metadata = 0xABC << 2;
        result
    }
}

/// Connection parameters for endpoint `side` (0 or 1) of a pair whose PSNs
/// start at `first_psn` in every window.
pub fn params(side: u32, first_psn: u32, ordering: OrderingMode) -> ConnectionParams {
    let cid = |n: u32| ConnectionId::truncating(0x100 + n);
    ConnectionParams {
        connection_id: cid(side),
        peer_connection_id: cid(1 - side),
        destination_function: DestinationFunction::truncating(7),
        protocol: ProtocolType::Rdma,
        ordering,
        tx_request_psn: Psn::new(first_psn),
        tx_data_psn: Psn::new(first_psn.wrapping_add(1000)),
        rx_request_psn: Psn::new(first_psn),
        rx_data_psn: Psn::new(first_psn.wrapping_add(1000)),
        seed: 0x5EED + u64::from(side),
    }
}

/// Emits a transmitted packet to bytes (header and a payload naming its
/// transaction), as the wire would carry it.
pub fn to_bytes(repr: &FalconRepr, handle: Option<PayloadHandle>) -> Vec<u8> {
    let mut bytes = vec![0u8; repr.buffer_len()];
    repr.emit(&mut bytes);
    if let (Some(range), Some(handle)) = (repr.payload_range(), handle) {
        for (i, byte) in bytes[range].iter_mut().enumerate() {
            *byte = handle.0.to_le_bytes()[i % 8];
        }
    }
    bytes
}

/// The payload pattern of `handle` over `len` bytes (what `to_bytes`
/// writes).
pub fn payload_ok(bytes: &[u8], handle: u64) -> bool {
    bytes
        .iter()
        .enumerate()
        .all(|(i, &b)| b == handle.to_le_bytes()[i % 8])
}

/// One direction's fault model.
#[derive(Debug, Clone, Copy, Default)]
pub struct Faults {
    /// Drop probability of data packets, in percent.
    pub data_loss_percent: u32,
    /// Drop probability of ACKs and NACKs, in percent.
    pub ack_loss_percent: u32,
    /// Duplication probability, in percent.
    pub duplicate_percent: u32,
    /// Probability that a packet takes up to `reorder_delay` extra, percent.
    pub reorder_percent: u32,
    /// The extra delay of a reordered packet, at most.
    pub reorder_delay: Duration,
}

#[derive(Debug)]
struct InFlight {
    arrival: Timestamp,
    sequence: u64,
    bytes: Vec<u8>,
    meta: RxMeta,
}

/// A one-way link with a fixed latency and seeded faults.
#[derive(Debug)]
pub struct Link {
    /// One-way latency.
    pub latency: Duration,
    /// Fault model.
    pub faults: Faults,
    rng: SplitMix64,
    queue: Vec<InFlight>,
    sequence: u64,
    /// Packets dropped by the fault model.
    pub dropped: u64,
}

impl Link {
    /// A link with `latency` and no faults.
    pub fn new(latency: Duration, seed: u64) -> Self {
        Link {
            latency,
            faults: Faults::default(),
            rng: SplitMix64::new(seed),
            queue: Vec::new(),
            sequence: 0,
            dropped: 0,
        }
    }

    /// Sends `bytes` at `now`.
    pub fn send(&mut self, now: Timestamp, bytes: Vec<u8>, is_ack: bool) {
        let loss = if is_ack {
            self.faults.ack_loss_percent
        } else {
            self.faults.data_loss_percent
        };
        if self.rng.chance(loss, 100) {
            self.dropped += 1;
            return;
        }
        let copies = if self.rng.chance(self.faults.duplicate_percent, 100) {
            2
        } else {
            1
        };
        for _ in 0..copies {
            let mut arrival = now + self.latency;
            if self.rng.chance(self.faults.reorder_percent, 100) {
                let extra = self.faults.reorder_delay.as_nanos() as u32;
                arrival = arrival + Duration::from_nanos(u64::from(self.rng.below(extra.max(1))));
            }
            let meta = RxMeta {
                tx_time: now.falcon_time32(),
                ecn_ce: self.rng.chance(1, 50),
                ttl: 61,
            };
            self.sequence += 1;
            self.queue.push(InFlight {
                arrival,
                sequence: self.sequence,
                bytes: bytes.clone(),
                meta,
            });
        }
    }

    /// The earliest arrival.
    pub fn next_arrival(&self) -> Option<Timestamp> {
        self.queue.iter().map(|p| p.arrival).min()
    }

    /// Removes and returns the packets arrived by `now`, in arrival order.
    pub fn arrivals(&mut self, now: Timestamp) -> Vec<(Vec<u8>, RxMeta)> {
        let mut due: Vec<InFlight> = Vec::new();
        let mut kept = Vec::new();
        for packet in self.queue.drain(..) {
            if packet.arrival <= now {
                due.push(packet);
            } else {
                kept.push(packet);
            }
        }
        self.queue = kept;
        due.sort_by_key(|p| (p.arrival, p.sequence));
        due.into_iter().map(|p| (p.bytes, p.meta)).collect()
    }
}

/// A delivery connection with a scripted ULP above it: it admits every
/// arrival, ULP-acks Push Data after `ulp_delay`, answers each Pull Request
/// with a Pull Data of the requested length, and records deliveries and
/// completions so tests can check exactly-once.
#[derive(Debug)]
pub struct Endpoint {
    /// The connection.
    pub conn: DeliveryConnection,
    /// The RUE stand-in.
    pub rue: FixedRue,
    /// When set, the real Swift algorithm of the `rue` crate answers the
    /// events instead of the stand-in (issue 5: events reach the RUE and
    /// its results come back in the delivery-layer tests).
    pub swift: Option<(rue::Swift, rue::SwiftState)>,
    /// Drops counted from `RxOutcome::Dropped`.
    pub drops: DropCounters,
    /// Delay before the ULP acknowledges a Push Data.
    pub ulp_delay: Duration,
    /// (kind, RSN) of every admitted arrival; a repeat fails the test.
    pub delivered: BTreeSet<(u8, u32)>,
    /// (kind, RSN) of every acknowledged packet of ours.
    pub completed: BTreeSet<(u8, u32)>,
    /// Every event, in order.
    pub events: Vec<Event>,
    /// Packets not yet accepted by `submit`.
    pub backlog: VecDeque<OutgoingPacket>,
    ulp_acks: VecDeque<(Timestamp, Psn)>,
    rue_results: VecDeque<CcResult>,
}

impl Endpoint {
    /// An endpoint with `rue`.
    pub fn new(config: &DeliveryConfig, params: ConnectionParams, rue: FixedRue) -> Self {
        Endpoint {
            conn: DeliveryConnection::new(config, params),
            rue,
            swift: None,
            drops: DropCounters::new(),
            ulp_delay: Duration::from_micros(2),
            delivered: BTreeSet::new(),
            completed: BTreeSet::new(),
            events: Vec::new(),
            backlog: VecDeque::new(),
            ulp_acks: VecDeque::new(),
            rue_results: VecDeque::new(),
        }
    }

    /// Queues a packet (through the backlog if the submit queue is full).
    pub fn submit(&mut self, packet: OutgoingPacket) {
        self.backlog.push_back(packet);
        self.flush_backlog();
    }

    fn flush_backlog(&mut self) {
        while let Some(packet) = self.backlog.front().copied() {
            match self.conn.submit(packet) {
                Ok(()) => {
                    self.backlog.pop_front();
                }
                Err(SubmitError::QueueFull) => return,
                Err(error) => panic!("submit: {error}"),
            }
        }
    }

    /// Hands a received packet to the connection and plays the ULP.
    pub fn receive(&mut self, now: Timestamp, bytes: &[u8], meta: RxMeta) {
        let repr = match FalconRepr::parse(bytes) {
            Ok(repr) => repr,
            Err(error) => panic!("link corrupted a packet: {error}"),
        };
        match self.conn.handle_packet(now, &repr, meta) {
            RxOutcome::Deliver(arrival) => {
                if let Some(range) = repr.payload_range() {
                    assert!(
                        payload_ok(&bytes[range], u64::from(arrival.rsn.value())),
                        "payload of {:?} {} corrupted",
                        arrival.kind,
                        arrival.rsn
                    );
                }
                let key = (arrival.kind.packet_type().into(), arrival.rsn.value());
                assert!(self.delivered.insert(key), "delivered twice: {key:?}");
                let (kind, psn, rsn, length) = (
                    arrival.kind,
                    arrival.psn,
                    arrival.rsn,
                    arrival.request_length,
                );
                if let Err(reason) = self.conn.admit(now, arrival) {
                    panic!("admit refused: {reason}");
                }
                match kind {
                    PacketKind::PushData => self.ulp_acks.push_back((now + self.ulp_delay, psn)),
                    PacketKind::PullRequest => self.submit(OutgoingPacket {
                        kind: PacketKind::PullData,
                        rsn,
                        request_length: 0,
                        payload_len: length,
                        handle: PayloadHandle(u64::from(rsn.value())),
                        ack_request: false,
                    }),
                    PacketKind::PullData => {}
                }
            }
            RxOutcome::Dropped(reason) => self.drops.record(reason),
            RxOutcome::Processed => {}
        }
    }

    /// Drains every output: transmissions and ACKs onto `link`, RUE events
    /// through the stand-in, events into the log.
    pub fn drive(&mut self, now: Timestamp, link: &mut Link) {
        while let Some((at, psn)) = self.ulp_acks.front().copied() {
            if at > now {
                break;
            }
            self.ulp_acks.pop_front();
            // A ULP ACK may find the PSN already resynced: not an error here.
            let _ = self.conn.handle_ulp_ack(now, psn);
        }
        while let Some(result) = self.rue_results.pop_front() {
            self.conn.handle_rue_result(now, &result);
        }
        self.flush_backlog();
        while let Some(TxPacket { repr, handle, .. }) = self.conn.poll_transmit(now) {
            link.send(now, to_bytes(&repr, handle), false);
        }
        while let Some(ack) = self.conn.poll_ack(now, RxBufferLevel::truncating(3)) {
            link.send(now, to_bytes(&ack, None), true);
        }
        if let Some(event) = self.conn.poll_rue_event(now, 0, 64) {
            // The result comes back at the next turn, as from a RUE queue.
            let result = match &mut self.swift {
                Some((swift, state)) => rue::Algorithm::on_event(swift, &event, state),
                None => self.rue.on_event(&event),
            };
            self.rue_results.push_back(result);
        }
        while let Some(event) = self.conn.poll_event() {
            if let Event::Acked { kind, rsn, .. } = event {
                let key = (kind.packet_type().into(), rsn.value());
                assert!(self.completed.insert(key), "completed twice: {key:?}");
            }
            self.events.push(event);
        }
    }

    /// The endpoint's next timer (connection, ULP ACKs, pending results).
    pub fn next_timeout(&self, now: Timestamp) -> Option<Timestamp> {
        let mut next = self.conn.poll_timeout();
        let mut consider = |t: Timestamp| next = Some(next.map_or(t, |n: Timestamp| n.min(t)));
        if let Some(&(at, _)) = self.ulp_acks.front() {
            consider(at);
        }
        if !self.rue_results.is_empty() || !self.backlog.is_empty() {
            consider(now);
        }
        next
    }
}

/// Two endpoints and two links in virtual time.
#[derive(Debug)]
pub struct Pair {
    /// Endpoint 0 (the initiator in most tests).
    pub a: Endpoint,
    /// Endpoint 1.
    pub b: Endpoint,
    /// a → b.
    pub ab: Link,
    /// b → a.
    pub ba: Link,
    /// Virtual time.
    pub now: Timestamp,
}

impl Pair {
    /// A pair with `config`, PSNs from `first_psn`, the stand-in RUE, a
    /// one-way latency of 5 µs and no faults.
    pub fn new(
        config: &DeliveryConfig,
        first_psn: u32,
        ordering: OrderingMode,
        rue: FixedRue,
    ) -> Self {
        Pair {
            a: Endpoint::new(config, params(0, first_psn, ordering), rue),
            b: Endpoint::new(config, params(1, first_psn, ordering), rue),
            ab: Link::new(Duration::from_micros(5), 1),
            ba: Link::new(Duration::from_micros(5), 2),
            now: Timestamp::from_micros(1_000),
        }
    }

    /// One turn: drive both endpoints, jump to the next event (arrival or
    /// timer), deliver arrivals, run timers. Returns false when nothing is
    /// left to happen.
    pub fn step(&mut self) -> bool {
        self.a.drive(self.now, &mut self.ab);
        self.b.drive(self.now, &mut self.ba);
        let candidates = [
            self.ab.next_arrival(),
            self.ba.next_arrival(),
            self.a.next_timeout(self.now),
            self.b.next_timeout(self.now),
        ];
        let Some(next) = candidates.into_iter().flatten().min() else {
            return false;
        };
        self.now = self.now.max(next);
        for (bytes, meta) in self.ab.arrivals(self.now) {
            self.b.receive(self.now, &bytes, meta);
        }
        for (bytes, meta) in self.ba.arrivals(self.now) {
            self.a.receive(self.now, &bytes, meta);
        }
        self.a.conn.handle_timeout(self.now);
        self.b.conn.handle_timeout(self.now);
        true
    }

    /// Steps until `done` holds, at most `max_steps` turns and `max_time` of
    /// virtual time; panics on livelock.
    pub fn drive_until(
        &mut self,
        max_steps: u32,
        max_time: Duration,
        mut done: impl FnMut(&Pair) -> bool,
    ) {
        let deadline = self.now + max_time;
        for _ in 0..max_steps {
            if done(self) {
                return;
            }
            assert!(self.now <= deadline, "not done by {deadline} (virtual)");
            if !self.step() {
                assert!(done(self), "idle but not done");
                return;
            }
        }
        panic!("livelock: {max_steps} steps");
    }
}

/// Per-kind RSN bookkeeping of a traffic mix.
pub fn keys(kind: PacketKind, rsns: impl Iterator<Item = u32>) -> BTreeSet<(u8, u32)> {
    rsns.map(|rsn| (kind.packet_type().into(), rsn)).collect()
}

/// An outgoing packet of `kind` whose handle is its RSN.
pub fn outgoing(kind: PacketKind, rsn: u32, len: u16) -> OutgoingPacket {
    OutgoingPacket {
        kind,
        rsn: Rsn::new(rsn),
        request_length: if kind == PacketKind::PullData { 0 } else { len },
        payload_len: if kind == PacketKind::PullRequest {
            0
        } else {
            len
        },
        handle: PayloadHandle(u64::from(rsn)),
        ack_request: false,
    }
}
