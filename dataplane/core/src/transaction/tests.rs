//! Tests of the target side against a real delivery sublayer: requests
//! arriving in any order (with duplicates) reach the ULP in RSN order on
//! ordered connections and exactly once on both kinds; RNR NACKs block the
//! connection until the redelivered request is accepted; large pushes
//! offered with their frame take the frame over, once.

use std::collections::BTreeSet;

use proptest::prelude::*;

use super::*;
use crate::delivery::{
    ConnectionParams, DeliveryConfig, DeliveryConnection, OrderingMode, RxMeta, RxOutcome, UlpNack,
};
use crate::drop::DropReason;
use crate::ids::{ConnectionId, DestinationFunction};
use crate::port::{FrameBuf, PacketBuf};
use crate::random::{Random, SplitMix64};
use crate::resources::{Credit, ResourceConfig, Resources};
use crate::seq::Psn;
use crate::testing::{MbufPool, TestMbuf};
use crate::wire::{
    BaseHeader, FalconRepr, NackCode, ProtocolType, PullRequestRepr, PushDataRepr, RnrTimeout,
    RxBufferLevel,
};

const DATA_PSN: u32 = 5_000;
const REQUEST_PSN: u32 = 9_000;

/// The one connection of the transaction sublayer's tests (CIDs 1 and 2,
/// RDMA), sending from PSN 0 in both windows and expecting the given PSNs.
pub(super) fn connection_params(
    ordering: OrderingMode,
    rx_request_psn: Psn,
    rx_data_psn: Psn,
) -> ConnectionParams {
    ConnectionParams {
        connection_id: ConnectionId::truncating(1),
        peer_connection_id: ConnectionId::truncating(2),
        destination_function: DestinationFunction::truncating(3),
        protocol: ProtocolType::Rdma,
        ordering,
        tx_request_psn: Psn::new(0),
        tx_data_psn: Psn::new(0),
        rx_request_psn,
        rx_data_psn,
        seed: 1,
    }
}

/// A delivery sublayer over [`connection_params`], with default resources
/// (one account) and transaction config: what a test's initiator or target
/// runs on.
pub(super) fn sublayer<B: PacketBuf>(
    ordering: OrderingMode,
    rx_request_psn: Psn,
    rx_data_psn: Psn,
) -> (DeliveryConnection, crate::resources::Account, Shared<B>) {
    let params = connection_params(ordering, rx_request_psn, rx_data_psn);
    let mut resources = Resources::new(ResourceConfig::default());
    let account = resources.open_account(None, 0, 0);
    (
        DeliveryConnection::new(&DeliveryConfig::default(), params),
        account,
        Shared::new(resources, TransactionConfig::default()),
    )
}

/// A frame buffer the tests can fill: the heap one, and the mbuf-shaped
/// one of the `testing` module (headroom, reference count, a pool), so
/// the sublayer runs over both.
trait TestBuf: PacketBuf + Sized + core::fmt::Debug {
    /// A buffer holding `bytes`.
    fn holding(bytes: &[u8]) -> Self;
}

impl TestBuf for FrameBuf {
    fn holding(bytes: &[u8]) -> Self {
        FrameBuf::from_frame(bytes, bytes.len())
    }
}

thread_local! {
    static MBUFS: std::rc::Rc<MbufPool> = MbufPool::new(1 << 16);
}

impl TestBuf for TestMbuf {
    fn holding(bytes: &[u8]) -> Self {
        let mut mbuf = MBUFS
            .with(|pool| pool.alloc(bytes.len()))
            .expect("a test mbuf");
        mbuf.buffer_mut()[..bytes.len()].copy_from_slice(bytes);
        mbuf.set_len(bytes.len());
        mbuf
    }
}

struct Harness<B: TestBuf = FrameBuf> {
    delivery: DeliveryConnection,
    account: crate::resources::Account,
    shared: Shared<B>,
    target: Target<B>,
    now: Timestamp,
}

impl<B: TestBuf> Harness<B> {
    fn new(ordering: OrderingMode) -> Self {
        let (delivery, account, shared) =
            sublayer(ordering, Psn::new(REQUEST_PSN), Psn::new(DATA_PSN));
        Harness {
            delivery,
            account,
            shared,
            target: Target::new(
                ordering,
                Rsn::new(u32::MAX - 20),
                core::time::Duration::from_secs(1),
            ),
            now: Timestamp::from_micros(10),
        }
    }

    fn ctx(&mut self) -> (Ctx<'_, B>, &mut Target<B>) {
        (
            Ctx {
                now: self.now,
                connection: ConnectionHandle {
                    index: 0,
                    generation: 0,
                },
                delivery: &mut self.delivery,
                account: &mut self.account,
                shared: &mut self.shared,
            },
            &mut self.target,
        )
    }

    fn arrive(&mut self, request: &Sent) {
        let payload = request.rsn.value().to_le_bytes();
        let bytes: &[u8] = match request.kind {
            TransactionKind::Push => &[payload, payload].concat(),
            TransactionKind::Pull => &[],
        };
        let mut frame = Some(B::holding(bytes));
        let range = 0..bytes.len();
        self.arrive_with(
            request,
            RxPayload {
                frame: &mut frame,
                range,
            },
        );
    }

    /// `request` arrives with `payload` (as the engine's receive path
    /// offers it).
    fn arrive_with(&mut self, request: &Sent, payload: RxPayload<'_, B>) {
        let header = BaseHeader {
            connection_id: ConnectionId::truncating(1),
            destination_function: DestinationFunction::truncating(3),
            protocol: ProtocolType::Rdma,
            ack_request: false,
            data_bpsn: Psn::new(0),
            request_bpsn: Psn::new(0),
            psn: request.psn,
            rsn: request.rsn,
        };
        let repr = match request.kind {
            TransactionKind::Push => FalconRepr::PushData(PushDataRepr {
                header,
                request_length: 8,
            }),
            TransactionKind::Pull => FalconRepr::PullRequest(PullRequestRepr {
                header,
                request_length: 16,
                payload_len: 0,
            }),
        };
        self.now = self.now + core::time::Duration::from_micros(1);
        match self
            .delivery
            .handle_packet(self.now, &repr, RxMeta::default())
        {
            RxOutcome::Deliver(arrival) => {
                let (mut ctx, target) = self.ctx();
                target.on_request(&mut ctx, arrival, payload);
            }
            RxOutcome::Dropped(reason) => self.shared.drops.record(reason),
            RxOutcome::Processed => {}
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Sent {
    kind: TransactionKind,
    rsn: Rsn,
    psn: Psn,
}

/// `n` requests as an initiator sends them: RSNs in order (from near the
/// wrap), PSNs in order per window.
fn requests(kinds: &[bool]) -> Vec<Sent> {
    let (mut data, mut request) = (Psn::new(DATA_PSN), Psn::new(REQUEST_PSN));
    kinds
        .iter()
        .enumerate()
        .map(|(i, &push)| {
            let rsn = Rsn::new(u32::MAX - 20).wrapping_add(i as u32);
            if push {
                data = data.next();
                Sent {
                    kind: TransactionKind::Push,
                    rsn,
                    psn: data.wrapping_sub(1),
                }
            } else {
                request = request.next();
                Sent {
                    kind: TransactionKind::Pull,
                    rsn,
                    psn: request.wrapping_sub(1),
                }
            }
        })
        .collect()
}

/// Runs the arrivals in `order` (indices into the requests, duplicates
/// allowed); the ULP answers every request at once, RNR-NACKing a push's
/// first delivery with probability `rnr_percent`. Returns the delivered
/// (RSN, redelivery) sequence.
fn run<B: TestBuf>(
    ordering: OrderingMode,
    kinds: &[bool],
    order: &[usize],
    rnr_percent: u32,
    seed: u64,
) -> Vec<(Rsn, bool)> {
    let sent = requests(kinds);
    let mut h = Harness::<B>::new(ordering);
    let mut rng = SplitMix64::new(seed);
    let mut queue: Vec<usize> = order.to_vec();
    let mut delivered = Vec::new();
    let mut accepted = BTreeSet::new();
    let mut step = 0;
    let mut next_retransmission = 0;
    while step < queue.len() {
        let index = queue[step];
        step += 1;
        assert!(step < 100_000, "no progress: {delivered:?}");
        h.arrive(&sent[index]);
        while let Some(event) = h.shared.events.pop_front() {
            let UlpEvent::Request(request) = event else {
                panic!("unexpected {event:?}");
            };
            delivered.push((request.rsn, request.redelivery));
            let (mut ctx, target) = h.ctx();
            if request.kind == TransactionKind::Push
                && !request.redelivery
                && rng.chance(rnr_percent, 100)
            {
                let nack = UlpNack::ReceiverNotReady {
                    timeout: RnrTimeout::SHORTEST,
                    ulp_nack_code: 0,
                };
                target.ulp_nack(&mut ctx, request.rsn, nack).unwrap();
                continue;
            }
            assert!(
                accepted.insert(request.rsn.value()),
                "accepted twice: {}",
                request.rsn
            );
            match request.kind {
                TransactionKind::Push => {
                    assert_eq!(request.payload.len(), 8);
                    assert_eq!(request.payload[..4], request.rsn.value().to_le_bytes());
                    target.ulp_ack(&mut ctx, request.rsn).unwrap();
                }
                TransactionKind::Pull => {
                    assert_eq!(request.request_length, 16);
                    target
                        .submit_pull_data(
                            &mut ctx,
                            request.rsn,
                            UlpHeader::EMPTY,
                            vec![1; 16],
                            Some,
                        )
                        .unwrap();
                }
            }
        }
        // The initiator retransmits every Push Data RNR-NACKed, by the ULP
        // or (ordered, §8.5.3.4) by the layer for a request behind it,
        // after the same RNR timeout: in the order of the NACKs, mixed with
        // the other arrivals.
        while let Some(ack) = h.delivery.poll_ack(h.now, RxBufferLevel::truncating(0)) {
            if let FalconRepr::Nack(nack) = ack {
                assert_eq!(nack.code, NackCode::ReceiverNotReady);
                let index = sent
                    .iter()
                    .position(|s| s.kind == TransactionKind::Push && s.psn == nack.nack_psn)
                    .expect("a NACK for a Push Data sent");
                let at = (step + rng.below(4) as usize).max(next_retransmission);
                let at = at.min(queue.len());
                queue.insert(at, index);
                next_retransmission = at + 1;
            }
        }
    }
    assert_eq!(accepted.len(), kinds.len(), "every request accepted once");
    delivered
}

fn arrival_order() -> impl Strategy<Value = (Vec<bool>, Vec<usize>)> {
    proptest::collection::vec(any::<bool>(), 1..40).prop_flat_map(|kinds| {
        let n = kinds.len();
        let order = Just((0..n).collect::<Vec<usize>>()).prop_shuffle();
        let dups = proptest::collection::vec(0..n, 0..8);
        (Just(kinds), order, dups).prop_map(|(kinds, mut order, dups)| {
            for (i, d) in dups.into_iter().enumerate() {
                let at = (i * 7) % (order.len() + 1);
                order.insert(at, d);
            }
            (kinds, order)
        })
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Ordered: whatever the arrival order, first deliveries follow RSN
    /// order, and after an RNR NACK the next delivery is the redelivery of
    /// that request (§8.5.2, §8.5.3.4).
    #[test]
    fn ordered_deliveries_follow_rsn_order((kinds, order) in arrival_order(), seed in any::<u64>()) {
        let delivered = run::<FrameBuf>(OrderingMode::Ordered, &kinds, &order, 30, seed);
        // The same over mbuf-shaped buffers, delivery for delivery.
        prop_assert_eq!(
            &run::<TestMbuf>(OrderingMode::Ordered, &kinds, &order, 30, seed),
            &delivered
        );
        let first: Vec<Rsn> = delivered.iter().filter(|d| !d.1).map(|d| d.0).collect();
        for pair in first.windows(2) {
            prop_assert_eq!(pair[1], pair[0].next(), "{:?}", delivered);
        }
        prop_assert_eq!(first.len(), kinds.len());
        // A redelivery is always of the lowest RSN not accepted yet.
        let mut accepted: BTreeSet<u32> = BTreeSet::new();
        for (i, &(rsn, redelivery)) in delivered.iter().enumerate() {
            if redelivery {
                prop_assert!(delivered[..i].iter().any(|d| d.0 == rsn));
            }
            accepted.insert(rsn.value());
        }
    }

    /// Unordered: every request is delivered, and accepted exactly once.
    #[test]
    fn unordered_deliveries_are_exactly_once((kinds, order) in arrival_order(), seed in any::<u64>()) {
        let delivered = run::<FrameBuf>(OrderingMode::Unordered, &kinds, &order, 30, seed);
        prop_assert_eq!(
            &run::<TestMbuf>(OrderingMode::Unordered, &kinds, &order, 30, seed),
            &delivered
        );
        let first: BTreeSet<u32> = delivered.iter().filter(|d| !d.1).map(|d| d.0.value()).collect();
        prop_assert_eq!(first.len(), kinds.len());
    }
}

#[test]
fn resource_refusal_is_a_nack_and_hol_still_gets_in() {
    let mut h = Harness::<FrameBuf>::new(OrderingMode::Ordered);
    h.shared.resources = Resources::new(ResourceConfig {
        green_zone_percent: 50,
        ..ResourceConfig::tiny(4, 64)
    });
    h.account = h.shared.resources.open_account(None, 0, 0);
    let sent = requests(&[true; 6]);
    // RSNs 1..5 arrive first (not HoL): two fit the green zone, the rest
    // are refused with a resource NACK.
    for request in &sent[1..] {
        h.arrive(request);
    }
    assert!(h.shared.events.is_empty(), "waiting for RSN 0");
    assert_eq!(h.shared.stats.resource_refusals, 3);
    // Each refused RSN (past the ring's back on arrival) is a hole.
    for request in &sent[3..] {
        assert_eq!(h.target.state(request.rsn), Some(TargetState::Unseen));
    }
    assert_eq!(h.shared.drops.get(DropReason::InsufficientResources), 3);
    let nack = h
        .delivery
        .poll_ack(h.now, crate::wire::RxBufferLevel::truncating(0));
    assert!(
        matches!(nack, Some(FalconRepr::Nack(n)) if n.code == crate::wire::NackCode::InsufficientResources)
    );
    // The HoL request is admitted in the red zone and releases the others.
    h.arrive(&sent[0]);
    let rsns: Vec<Rsn> = h
        .shared
        .events
        .iter()
        .filter_map(|e| match e {
            UlpEvent::Request(r) => Some(r.rsn),
            _ => None,
        })
        .collect();
    assert_eq!(rsns, vec![sent[0].rsn, sent[1].rsn, sent[2].rsn]);
}

/// A push that may go at once (NRSN on an ordered connection, any on an
/// unordered one) is delivered straight from its arrival; one that may not
/// is held in its slot and delivered in its turn. Both reach the ULP alike,
/// in RSN order when ordered, and retire alike once ULP-ACKed.
#[test]
fn pushes_delivered_on_arrival_and_after_being_held_alike() {
    for ordering in [OrderingMode::Ordered, OrderingMode::Unordered] {
        let mut h = Harness::<FrameBuf>::new(ordering);
        let sent = requests(&[true; 3]);
        // RSN 1 before RSN 0: held when ordered, RSN 0 a hole.
        h.arrive(&sent[1]);
        let first = match ordering {
            OrderingMode::Ordered => TargetState::PushDataRx,
            OrderingMode::Unordered => TargetState::PushReqUlpTx,
        };
        assert_eq!(h.target.state(sent[1].rsn), Some(first));
        assert_eq!(h.target.state(sent[0].rsn), Some(TargetState::Unseen));
        // RSN 0 fills the hole and goes at once (RSN 1 after it when
        // ordered); RSN 2, past the ring's back, goes at once.
        h.arrive(&sent[0]);
        h.arrive(&sent[2]);
        let delivered: Vec<Request> = core::iter::from_fn(|| next_request(&mut h)).collect();
        let order = match ordering {
            OrderingMode::Ordered => [0, 1, 2],
            OrderingMode::Unordered => [1, 0, 2],
        };
        assert_eq!(
            delivered.iter().map(|r| r.rsn).collect::<Vec<_>>(),
            order.map(|i| sent[i].rsn)
        );
        for request in &delivered {
            let bytes = request.rsn.value().to_le_bytes();
            assert_eq!(request.kind, TransactionKind::Push);
            assert_eq!(request.request_length, 8);
            assert!(!request.redelivery);
            assert_eq!(request.payload, [bytes, bytes].concat());
            assert_eq!(h.target.state(request.rsn), Some(TargetState::PushReqUlpTx));
        }
        assert_eq!(h.shared.stats.requests_delivered, 3);
        assert!(h.shared.events.is_empty());
        for request in &delivered {
            let (mut ctx, target) = h.ctx();
            target.ulp_ack(&mut ctx, request.rsn).unwrap();
        }
        let end = sent[2].rsn.next();
        assert_eq!(h.target.rsns(), (end, end));
        assert_eq!(h.shared.resources.used(Credit::NetReqPktRx), 0);
        assert_eq!(h.shared.resources.used(Credit::NetReqBufRx), 0);
    }
}

#[test]
fn rnr_blocks_until_the_redelivered_request_is_accepted() {
    let kinds = [true; 20];
    let order: Vec<usize> = (0..20).rev().collect();
    let delivered = run::<TestMbuf>(OrderingMode::Ordered, &kinds, &order, 50, 3);
    let redeliveries = delivered.iter().filter(|d| d.1).count();
    assert!(redeliveries > 0, "{delivered:?}");
    for (i, &(rsn, redelivery)) in delivered.iter().enumerate() {
        if !redelivery && i > 0 && !delivered[i - 1].1 {
            assert_eq!(rsn, delivered[i - 1].0.next());
        }
    }
}

/// A 9216-byte frame buffer with `len` payload bytes at offset 60 derived
/// from `seed`, and the payload's range.
fn frame(seed: u8, len: usize) -> (Option<FrameBuf>, core::ops::Range<usize>) {
    let mut frame = vec![0xEE; 9216];
    let range = 60..60 + len;
    for (i, b) in frame[range.clone()].iter_mut().enumerate() {
        *b = seed ^ i as u8;
    }
    (Some(FrameBuf::from_frame(&frame, 9216)), range)
}

fn next_request(h: &mut Harness) -> Option<Request> {
    match h.shared.events.pop_front()? {
        UlpEvent::Request(request) => Some(request),
        event => panic!("unexpected {event:?}"),
    }
}

/// Receive without a copy at the target: a stored push takes its frame,
/// which reaches the ULP holding the payload in place; a duplicate packet
/// and a Pull Request leave the frame with the caller (a Pull Request's
/// header is copied into the request).
#[test]
fn stored_pushes_take_their_frame_everything_else_leaves_it() {
    let mut h = Harness::<FrameBuf>::new(OrderingMode::Ordered);
    let sent = requests(&[true, true, false]);

    let (mut f0, range) = frame(1, 1500);
    let expect0 = f0.as_ref().expect("frame").data()[range.clone()].to_vec();
    h.arrive_with(
        &sent[0],
        RxPayload {
            frame: &mut f0,
            range: range.clone(),
        },
    );
    assert!(f0.is_none(), "the delivered push took its frame");
    let r0 = next_request(&mut h).expect("delivered");
    assert_eq!((r0.payload.range(), &*r0.payload), (range, &expect0[..]));
    assert_eq!(r0.payload.frame().map(PacketBuf::capacity), Some(9216));

    // The same packet again (a duplicate): dropped, the frame left alone.
    let (mut dup, range) = frame(1, 1500);
    h.arrive_with(
        &sent[0],
        RxPayload {
            frame: &mut dup,
            range,
        },
    );
    assert!(dup.is_some(), "a duplicate leaves its frame");

    // A Pull Request ahead of its turn: its header copied, the frame left.
    let (mut f2, _) = frame(3, 0);
    let header = 77u64.to_le_bytes();
    f2.as_mut().expect("frame").data_mut()[60..68].copy_from_slice(&header);
    h.arrive_with(
        &sent[2],
        RxPayload {
            frame: &mut f2,
            range: 60..68,
        },
    );
    assert!(f2.is_some(), "a Pull Request's header is copied");
    assert!(next_request(&mut h).is_none(), "RSN 2 waits for RSN 1");
    let (mut f1, range) = frame(2, 700);
    let expect1 = f1.as_ref().expect("frame").data()[range.clone()].to_vec();
    h.arrive_with(
        &sent[1],
        RxPayload {
            frame: &mut f1,
            range,
        },
    );
    assert!(f1.is_none());
    let r1 = next_request(&mut h).expect("RSN 1");
    assert_eq!(r1.payload, expect1);
    let r2 = next_request(&mut h).expect("RSN 2");
    assert_eq!(
        (r2.kind, r2.header.as_slice()),
        (TransactionKind::Pull, &header[..])
    );
    assert!(r2.payload.is_empty());
    assert_eq!(h.shared.stats.zero_copy_receives, 2);
    assert!(
        h.shared.released.is_empty(),
        "nothing dropped by the target"
    );
}

/// A push the ULP RNR-NACKs is redelivered in the retransmitted packet's
/// frame.
#[test]
fn an_rnr_redelivery_takes_the_retransmitted_frame() {
    let mut h = Harness::<FrameBuf>::new(OrderingMode::Ordered);
    let sent = requests(&[true]);
    let (mut f0, range) = frame(1, 1500);
    h.arrive_with(
        &sent[0],
        RxPayload {
            frame: &mut f0,
            range,
        },
    );
    let first = next_request(&mut h).expect("delivered");
    let (mut ctx, target) = h.ctx();
    let nack = UlpNack::ReceiverNotReady {
        timeout: RnrTimeout::SHORTEST,
        ulp_nack_code: 0,
    };
    target.ulp_nack(&mut ctx, sent[0].rsn, nack).unwrap();
    drop(first);
    let (mut retx, range) = frame(1, 1500);
    let expect = retx.as_ref().expect("frame").data()[range.clone()].to_vec();
    h.arrive_with(
        &sent[0],
        RxPayload {
            frame: &mut retx,
            range,
        },
    );
    assert!(retx.is_none());
    let again = next_request(&mut h).expect("redelivered");
    assert!(again.redelivery);
    assert_eq!(again.payload, expect);
    assert_eq!(h.shared.stats.zero_copy_receives, 2);
}
