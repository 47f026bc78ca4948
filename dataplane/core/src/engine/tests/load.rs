//! Isolation and fairness under load: a connection whose ULP stops
//! acknowledging does not stop a fast one; the connection scheduler serves
//! backlogged connections round robin, and Pull Requests and Push Data
//! alternate on an unordered connection.

use core::time::Duration;

use crate::delivery::OrderingMode;
use crate::engine::{connect, Engine, EngineConfig, PairSpec, RueMode};
use crate::ids::ConnectionId;
use crate::resources::{Alpha, Credit, CreditLimits, ResourceConfig, RxPool};
use crate::testing::{Cluster, Policy, Setup};
use crate::time::Timestamp;
use crate::transaction::{CompletionStatus, Transaction, TransactionKind};
use crate::wire::{frame, peek_connection_id, peek_packet_type, PacketType};

/// B's ULP never answers connection 0 (slow); connection 1 is served at
/// once. The slow connection holds at most its dynamic-threshold share of
/// B's network-request region (α = 1: half), and the fast one completes
/// everything within a bounded virtual time.
#[test]
fn slow_connection_does_not_stop_a_fast_one() {
    let resources = ResourceConfig {
        rx_packet: RxPool {
            ulp_request: 8192,
            network_request: 48,
        },
        rx_buffer: RxPool {
            ulp_request: 131_072,
            network_request: 48 * 4,
        },
        per_connection: CreditLimits::uniform(1024, 16_384),
        isolation_alpha: Alpha::ONE,
        ..ResourceConfig::default()
    };
    let mut pair = Cluster::new(Setup {
        connections: 2,
        resources,
        seed: 61,
        ..Setup::default()
    });
    pair.nodes[1].policy[0] = Policy::Never;
    for _ in 0..200 {
        pair.queue(0, 0, TransactionKind::Push, 1000);
        pair.queue(0, 1, TransactionKind::Push, 1000);
    }
    pair.drive(Duration::from_millis(200), |p| {
        p.nodes[0].completions[1].len() == 200
    });
    assert!(pair.nodes[0].completions[1]
        .iter()
        .all(|c| c.status == CompletionStatus::Ack));
    assert!(
        pair.nodes[0].completions[0].is_empty(),
        "nothing acknowledged on the slow one"
    );
    let b = &pair.nodes[1].engine;
    let slow = b.connection_snapshot(pair.nodes[1].conns[0]).unwrap();
    let held = slow.credits_used[Credit::NetReqPktRx.index()];
    assert!(held > 0, "the slow connection holds requests");
    assert!(held <= 24, "α = 1 bounds it to half the region: {held}");
    let fast = b.connection_snapshot(pair.nodes[1].conns[1]).unwrap();
    assert_eq!(fast.credits_used[Credit::NetReqPktRx.index()], 0);
    assert!(pair.nodes[1].engine.stats().transactions.resource_refusals > 0);
}

fn engines(
    connections: u32,
    ordering: OrderingMode,
) -> (Engine, Vec<crate::engine::ConnectionHandle>) {
    let now = Timestamp::from_micros(1);
    let config = |ip: [u8; 4], mac: u8| EngineConfig {
        local_ip: core::net::IpAddr::V4(ip.into()),
        local_mac: crate::wire::EthernetAddress([2, 0, 0, 0, 0, mac]),
        rue: RueMode::Off,
        ..EngineConfig::default()
    };
    let mut a = Engine::new(config([10, 0, 0, 1], 1), now).unwrap();
    let mut b = Engine::new(config([10, 0, 0, 2], 2), now).unwrap();
    let handles = (0..connections)
        .map(|i| {
            let spec = PairSpec {
                a_cid: ConnectionId::truncating(0x100 + i),
                b_cid: ConnectionId::truncating(0x200 + i),
                ordering,
                ..PairSpec::default()
            };
            connect(now, &mut a, &mut b, &spec).unwrap().0
        })
        .collect();
    (a, handles)
}

/// The first `n` frames `a` sends: (destination CID, packet type).
fn first_frames(a: &mut Engine, n: usize) -> Vec<(u32, PacketType)> {
    let now = Timestamp::from_micros(2);
    let mut buf = vec![0u8; a.max_frame_len()];
    (0..n)
        .map_while(|_| {
            let len = a.poll_transmit_into(now, &mut buf)?;
            let parsed = frame::parse(&buf[..len]).ok()?;
            let falcon = &buf[parsed.layers.payload];
            Some((
                peek_connection_id(falcon).ok()?.value(),
                peek_packet_type(falcon).ok()?,
            ))
        })
        .collect()
}

/// §8.3: round robin across connections: backlogged connections take
/// turns, one packet each.
#[test]
fn scheduler_round_robins_across_connections() {
    let (mut a, conns) = engines(3, OrderingMode::Ordered);
    let now = Timestamp::from_micros(2);
    for (i, &c) in conns.iter().enumerate() {
        // Uneven backlogs: 100, 100, 5.
        let n = if i == 2 { 5 } else { 100 };
        for k in 0..n {
            a.submit(now, c, Transaction::push(k, vec![0; 64])).unwrap();
        }
    }
    let frames = first_frames(&mut a, 45);
    let count = |cid| frames.iter().filter(|f| f.0 == cid).count();
    assert_eq!(count(0x202), 5, "the short backlog drains, then is masked");
    assert_eq!(count(0x200), 20);
    assert_eq!(count(0x201), 20);
    // Strict alternation while all three were backlogged.
    let order: Vec<u32> = frames.iter().take(15).map(|f| f.0).collect();
    assert_eq!(order[..3], [0x200, 0x201, 0x202]);
    assert!(
        order.chunks(3).all(|c| c == [0x200, 0x201, 0x202]),
        "{order:x?}"
    );
    // Out of window (fcwnd 32 with no ACKs): a connection is masked out.
    let more = first_frames(&mut a, 100);
    assert_eq!(
        more.iter().filter(|f| f.0 == 0x200).count(),
        12,
        "32 in flight"
    );
    assert!(first_frames(&mut a, 10).is_empty());
}

/// §8.3 across transaction types: on an unordered connection Pull Requests
/// and Push Data take turns; on an ordered one they go in RSN order.
#[test]
fn scheduler_round_robins_across_queues() {
    for (ordering, expect_pulls) in [(OrderingMode::Unordered, 10), (OrderingMode::Ordered, 0)] {
        let (mut a, conns) = engines(1, ordering);
        let now = Timestamp::from_micros(2);
        for k in 0..30 {
            a.submit(now, conns[0], Transaction::push(k, vec![0; 64]))
                .unwrap();
        }
        for k in 0..30 {
            a.submit(now, conns[0], Transaction::pull(k, 64)).unwrap();
        }
        let frames = first_frames(&mut a, 20);
        let pulls = frames
            .iter()
            .filter(|f| f.1 == PacketType::PullRequest)
            .count();
        assert_eq!(pulls, expect_pulls, "{ordering:?}");
    }
}

/// An engine (and a loopback end) can move to its own lcore thread.
#[test]
fn engine_and_ports_are_send() {
    fn send<T: Send>() {}
    send::<Engine>();
    send::<crate::testing::LoopbackPort>();
    send::<crate::testing::FaultInjector<crate::testing::LoopbackPort>>();
}
