//! End-to-end tests of the engine: two engines over the loopback with
//! seeded faults, PSP on; exactly-once completion and byte verification
//! (the `testing` cluster), RSN order, tiny pools, scripted error flows, isolation of a
//! slow connection, scheduler fairness.

/// Runs tests generic over the port (`fn name<P: TestPort>()`) once per
/// frame buffer type: the loopback's heap buffers (`over_heap::name`) and
/// the mbuf-like ones (`over_mbuf::name`, see `testing::mbuf`).
macro_rules! over_both_buffers {
    ($($name:ident),* $(,)?) => {
        mod over_heap {
            $(
                #[test]
                fn $name() {
                    super::$name::<crate::testing::LoopbackPort>();
                }
            )*
        }

        mod over_mbuf {
            $(
                #[test]
                fn $name() {
                    super::$name::<crate::testing::MbufPort>();
                }
            )*
        }
    };
}

mod addressing;
mod bench;
mod buffers;
mod cm_events;
mod flows;
mod header_checks;
mod load;
mod node;
mod pacing;
mod rotation;
mod rue_external;
mod ulp_api;

use core::time::Duration;

use proptest::prelude::*;

use crate::delivery::OrderingMode;
use crate::drop::DropReason;
use crate::testing::Faults;
use crate::transaction::TransactionKind;

use crate::testing::{Cluster, Setup, TestPort};

/// Two engines and their ends of one connection: (A, B, A's, B's).
type EnginePair = (
    crate::engine::Engine,
    crate::engine::Engine,
    crate::engine::ConnectionHandle,
    crate::engine::ConnectionHandle,
);

/// Two IPv4 engines with PSP on (AES-GCM-128; master keys `k`/`k ^ 0xFF`,
/// 1 for A and 3 for B) and one connection between them set up at `now`:
/// (A, B, A's handle, B's handle).
fn psp_pair(now: crate::time::Timestamp) -> EnginePair {
    psp_pair_with(now, crate::resources::ResourceConfig::default())
}

/// [`psp_pair`] with both nodes' resource pools set to `resources`.
fn psp_pair_with(
    now: crate::time::Timestamp,
    resources: crate::resources::ResourceConfig,
) -> EnginePair {
    use crate::engine::{connect, Engine, EngineConfig, PairSpec, PspConfig};
    use psp::{MasterKey, MasterKeys};
    let keys = |k: u8| MasterKeys {
        k0: MasterKey::new([k; 32]),
        k1: MasterKey::new([k ^ 0xFF; 32]),
    };
    let config = |ip: [u8; 4], mac: u8, k: u8| EngineConfig {
        local_ip: core::net::IpAddr::V4(ip.into()),
        local_mac: crate::wire::EthernetAddress([2, 0, 0, 0, 0, mac]),
        psp: Some(PspConfig::new(keys(k))),
        resources,
        ..EngineConfig::default()
    };
    let mut a = Engine::new(config([10, 0, 0, 1], 1, 1), now).expect("engine A");
    let mut b = Engine::new(config([10, 0, 0, 2], 2, 3), now).expect("engine B");
    let (ca, cb) = connect(now, &mut a, &mut b, &PairSpec::default()).expect("connect");
    (a, b, ca, cb)
}

fn faults(loss: u32, duplicate: u32, reorder: u32) -> Faults {
    Faults {
        loss_ppm: Faults::percent(loss),
        duplicate_ppm: Faults::percent(duplicate),
        reorder_ppm: Faults::percent(reorder),
        reorder_delay: Duration::from_micros(20),
        corrupt_ppm: 0,
    }
}

/// A mix of pushes and pulls of random sizes both ways under loss,
/// duplication and reordering, PSP on: every transaction completes exactly
/// once with every byte right; on ordered connections in RSN order (the
/// cluster checks deliveries and completions as they happen).
fn exactly_once<P: TestPort>(ordering: OrderingMode, seed: u64) -> Cluster<P> {
    let mut pair = Cluster::<P>::over(Setup {
        ordering,
        faults: faults(3, 2, 5),
        seed,
        ..Setup::default()
    });
    pair.queue_random(0, 300, 4000);
    pair.queue_random(1, 200, 1500);
    pair.run_to_completion(Duration::from_secs(2));
    pair.assert_all_ok(0);
    pair.assert_all_ok(1);
    for side in 0..2 {
        let stats = pair.nodes[side].engine.stats();
        assert_eq!(stats.drops.get(DropReason::UnknownConnection), 0);
        assert_eq!(stats.connection_errors, 0);
        let injected = pair.nodes[side].port.stats();
        assert!(injected.lost > 0 && injected.duplicated > 0 && injected.reordered > 0);
    }
    let a = pair.nodes[0].engine.stats();
    assert!(a.retransmissions > 0, "loss recovered by retransmission");
    assert!(
        a.drops.get(DropReason::DuplicatePacket) + a.drops.get(DropReason::StalePacket) > 0
            || pair.nodes[1]
                .engine
                .stats()
                .drops
                .get(DropReason::DuplicatePacket)
                > 0
    );
    pair
}

fn exactly_once_ordered_under_loss_reordering_duplication<P: TestPort>() {
    let pair = exactly_once::<P>(OrderingMode::Ordered, 11);
    let a = pair.nodes[0].engine.stats();
    assert_eq!(a.transactions.completed_ok(), 300);
    assert!(a.rue_events > 0 && a.rue_results > 0, "Swift ran inline");
    assert!(a.rtt_samples > 0 && a.rtt_mean().is_some());
    assert!(a.fcwnd_range().is_some() && a.ncwnd_range().is_some());
    pair.assert_no_buffer_held();
}

fn exactly_once_unordered_under_loss_reordering_duplication<P: TestPort>() {
    let pair = exactly_once::<P>(OrderingMode::Unordered, 12);
    assert_eq!(
        pair.nodes[1].engine.stats().transactions.completed_ok(),
        200
    );
    pair.assert_no_buffer_held();
}

/// Sans-IO determinism: the same seed replays the same run, counter for
/// counter.
#[test]
fn same_seed_replays_bit_for_bit() {
    let run = || {
        let mut pair = Cluster::new(Setup {
            faults: Faults {
                corrupt_ppm: Faults::percent(1),
                ..faults(3, 2, 5)
            },
            seed: 77,
            ..Setup::default()
        });
        pair.queue_random(0, 80, 3000);
        pair.queue_random(1, 80, 3000);
        pair.run_to_completion(Duration::from_secs(2));
        (
            pair.now,
            pair.nodes[0].engine.stats(),
            pair.nodes[1].engine.stats(),
        )
    };
    assert_eq!(run(), run());
}

fn corrupted_frames_are_dropped_by_psp_and_recovered<P: TestPort>() {
    let mut pair = Cluster::<P>::over(Setup {
        faults: Faults {
            corrupt_ppm: Faults::percent(5),
            ..faults(1, 0, 0)
        },
        seed: 21,
        ..Setup::default()
    });
    pair.queue_random(0, 100, 2000);
    pair.run_to_completion(Duration::from_secs(2));
    pair.assert_all_ok(0);
    let drops = |side: usize| pair.nodes[side].engine.stats().drops;
    let bad: u64 = (0..2)
        .map(|s| {
            let d = drops(s);
            d.get(DropReason::Psp(psp::RxDrop::AuthFailed))
                + d.get(DropReason::BadIpChecksum)
                + d.total().saturating_sub(
                    d.get(DropReason::DuplicatePacket) + d.get(DropReason::StalePacket),
                )
        })
        .sum();
    assert!(bad > 0, "corruption detected and counted");
}

fn plaintext_mode_works_without_psp<P: TestPort>() {
    let mut pair = Cluster::<P>::over(Setup {
        psp: false,
        faults: faults(2, 1, 3),
        seed: 31,
        ..Setup::default()
    });
    pair.queue_random(0, 80, 3000);
    pair.queue_random(1, 80, 3000);
    pair.run_to_completion(Duration::from_secs(2));
    pair.assert_all_ok(0);
    pair.assert_all_ok(1);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Deliveries (target) and completions (initiator) follow RSN order on
    /// ordered connections whatever the faults (the cluster asserts it on
    /// every event; this explores seeds and fault rates).
    #[test]
    fn ordered_connections_deliver_in_rsn_order(
        seed in any::<u64>(),
        loss in 0u32..8,
        duplicate in 0u32..5,
        reorder in 0u32..20,
    ) {
        let mut pair = Cluster::new(Setup {
            faults: faults(loss, duplicate, reorder),
            seed,
            ..Setup::default()
        });
        pair.queue_random(0, 30, 1200);
        pair.queue_random(1, 20, 1200);
        pair.run_to_completion(Duration::from_secs(3));
        pair.assert_all_ok(0);
        pair.assert_all_ok(1);
        let delivered: usize = pair.nodes[1].deliveries.iter().map(Vec::len).sum();
        prop_assert_eq!(delivered, 30);
    }
}

/// Tiny pools, heavy two-way push+pull load, several connections, loss:
/// no deadlock — every transaction completes within a bounded virtual time
/// (resource NACKs and Xoff/Xon do the throttling).
fn tiny_pools_make_progress_under_heavy_two_way_load<P: TestPort>() {
    let mut pair = Cluster::<P>::over(Setup {
        connections: 3,
        resources: crate::resources::ResourceConfig {
            cell_size: 256,
            green_zone_percent: 60,
            ..crate::resources::ResourceConfig::tiny(6, 24)
        },
        faults: faults(1, 0, 2),
        seed: 41,
        ..Setup::default()
    });
    // One target ULP answers late: its requests hold resources longer.
    pair.nodes[1].policy[2] = crate::testing::Policy::Delay(Duration::from_micros(30));
    pair.queue_random(0, 120, 1500);
    pair.queue_random(1, 120, 1500);
    pair.run_to_completion(Duration::from_millis(1500));
    pair.assert_all_ok(0);
    pair.assert_all_ok(1);
    let (a, b) = (pair.nodes[0].engine.stats(), pair.nodes[1].engine.stats());
    assert!(
        a.transactions.xoff + b.transactions.xoff > 0,
        "credits throttled the ULPs"
    );
    assert!(
        a.transactions.resource_refusals + b.transactions.resource_refusals > 0,
        "network regions ran out and NACKed"
    );
    assert_eq!(pair.nodes[0].xon, pair.nodes[0].xoff_events);
    for side in 0..2 {
        for credit in crate::resources::Credit::ALL {
            assert_eq!(
                pair.nodes[side].engine.resources_used(credit),
                0,
                "{credit:?} leaked"
            );
        }
    }
}

fn transactions_keep_kinds_and_sizes_at_the_edges<P: TestPort>() {
    let mut pair = Cluster::<P>::over(Setup {
        seed: 51,
        ..Setup::default()
    });
    let max = pair.nodes[0].engine.max_payload();
    for len in [0, 1, 255, 256, 257, 4096, max] {
        pair.queue(0, 0, TransactionKind::Push, len);
        pair.queue(0, 0, TransactionKind::Pull, len.min(u16::MAX as usize));
    }
    pair.run_to_completion(Duration::from_millis(100));
    pair.assert_all_ok(0);
}

/// The tiny-pool load over several seeds and both orderings (the cluster
/// checks order, bytes and exactly-once on every event).
#[test]
fn tiny_pools_seed_sweep() {
    for seed in 0..6u64 {
        for ordering in [OrderingMode::Ordered, OrderingMode::Unordered] {
            let mut pair = Cluster::new(Setup {
                connections: 2,
                ordering,
                resources: crate::resources::ResourceConfig {
                    cell_size: 256,
                    green_zone_percent: 60,
                    ..crate::resources::ResourceConfig::tiny(6, 24)
                },
                faults: faults(2, 1, 4),
                seed: 100 + seed,
                ..Setup::default()
            });
            pair.queue_random(0, 40, 1500);
            pair.queue_random(1, 40, 1500);
            pair.run_to_completion(Duration::from_millis(200));
            pair.assert_all_ok(0);
            pair.assert_all_ok(1);
        }
    }
}

/// §10.2: the receive-buffer level follows the network-request pools'
/// occupancy as it grows (requests held by a ULP that does not answer), not
/// only when resources come back; and it falls again once they do.
#[test]
fn rx_buffer_level_rises_with_held_requests_and_falls_after_answers() {
    use crate::port::FrameBuf;
    use crate::testing::{Loopback, LoopbackConfig};
    use crate::time::Timestamp;
    use crate::transaction::{Transaction, UlpEvent};

    let mut now = Timestamp::from_micros(1);
    // Small network-request pools (64 packets, 1024 cells of 256 B), so 32
    // held 4 KiB requests are half of each.
    let (mut a, mut b, ca, cb) =
        psp_pair_with(now, crate::resources::ResourceConfig::tiny(64, 1024));
    let (mut pa, mut pb) = Loopback::pair(LoopbackConfig::default());
    let (mut rx, mut tx): (Vec<FrameBuf>, Vec<FrameBuf>) = (Vec::new(), Vec::new());
    let mut held = Vec::new();
    let mut turn =
        |now, a: &mut crate::engine::Engine, b: &mut crate::engine::Engine, held: &mut Vec<_>| {
            a.receive_burst(now, &mut pa, &mut rx, 64);
            a.handle_timeout(now);
            while a.poll_event().is_some() {}
            a.transmit_burst(now, &mut pa, &mut tx, usize::MAX);
            b.receive_burst(now, &mut pb, &mut rx, 64);
            b.handle_timeout(now);
            while let Some(event) = b.poll_event() {
                if let UlpEvent::Request(r) = event {
                    held.push(r.rsn);
                }
            }
            b.transmit_burst(now, &mut pb, &mut tx, usize::MAX);
        };
    assert_eq!(b.rx_buffer_level().value(), 0);
    // 32: what the initial windows let through without an answer.
    for tag in 0..32 {
        a.submit(now, ca, Transaction::push(tag, vec![7; 4096]))
            .expect("room for 32 pushes");
    }
    for _ in 0..200 {
        now = now + Duration::from_micros(1);
        turn(now, &mut a, &mut b, &mut held);
    }
    assert_eq!(held.len(), 32, "every push delivered and held");
    let peak = b.rx_buffer_level().value();
    assert!(
        (12..=16).contains(&peak),
        "32 held 4 KiB requests of 64 packets / 1024 cells: level {peak} of 31"
    );
    let answered = held[0];
    for rsn in held.drain(..) {
        b.ulp_ack(now, cb, rsn).expect("ULP ACK");
    }
    // The errors of the answer's single lookups (connection, then slot).
    use crate::transaction::UlpCommandError;
    assert_eq!(
        b.ulp_ack(now, cb, answered),
        Err(UlpCommandError::NotAwaiting),
        "answered already"
    );
    assert_eq!(
        b.ulp_ack(now, cb, answered.wrapping_add(1000)),
        Err(UlpCommandError::NotAwaiting),
        "never received"
    );
    let stale = crate::engine::ConnectionHandle {
        generation: cb.generation.wrapping_add(1),
        ..cb
    };
    assert_eq!(
        b.ulp_ack(now, stale, answered),
        Err(UlpCommandError::UnknownConnection)
    );
    for _ in 0..200 {
        now = now + Duration::from_micros(1);
        turn(now, &mut a, &mut b, &mut held);
    }
    assert!(
        b.rx_buffer_level().value() < peak,
        "answered requests give their buffers back"
    );
}

/// `transmit_burst` builds at most `max` frames a call and leaves the rest
/// queued in the engine, so a caller that reads its clock before each burst
/// stamps every frame (its t1, in the PSP IV) within one burst of its
/// departure; a short count says there is nothing more to send.
/// `transmit_bursts` is that caller.
#[test]
fn transmit_burst_builds_at_most_max_frames_a_call() {
    use crate::port::FrameBuf;
    use crate::testing::{Loopback, LoopbackConfig};
    use crate::time::Timestamp;
    use crate::transaction::{Transaction, UlpEvent};

    let now = Timestamp::from_micros(1);
    let (mut a, mut b, ca, cb) = psp_pair(now);
    let (mut pa, mut pb) = Loopback::pair(LoopbackConfig {
        one_way_delay: Duration::ZERO,
        ..LoopbackConfig::default()
    });
    let (mut rx, mut tx): (Vec<FrameBuf>, Vec<FrameBuf>) = (Vec::new(), Vec::new());
    for tag in 0..20 {
        a.submit(now, ca, Transaction::push(tag, vec![7; 64]))
            .expect("room for 20 pushes");
    }
    let mut sent = Vec::new();
    for burst in 0..5u64 {
        let at = now + Duration::from_micros(burst);
        let n = a.transmit_burst(at, &mut pa, &mut tx, 8);
        sent.push(n);
        // What the port took is on the wire now, each frame stamped `at`.
        assert_eq!(b.receive_burst(at, &mut pb, &mut rx, 64), n);
    }
    assert_eq!(sent, [8, 8, 4, 0, 0], "20 pushes in bursts of at most 8");
    let mut delivered = 0;
    while let Some(event) = b.poll_event() {
        if let UlpEvent::Request(r) = event {
            delivered += 1;
            b.ulp_ack(now + Duration::from_micros(5), cb, r.rsn)
                .expect("answered");
            b.release(r.payload);
        }
    }
    assert_eq!(delivered, 20);
    // The answers go back (once the ACK coalescing timer fires), so the
    // window has room again.
    let mut completed = 0;
    for step in 1..=100 {
        let at = now + Duration::from_micros(10 * step);
        b.handle_timeout(at);
        b.transmit_burst(at, &mut pb, &mut tx, usize::MAX);
        a.receive_burst(at, &mut pa, &mut rx, 64);
        a.handle_timeout(at);
        completed += core::iter::from_fn(|| a.poll_event())
            .filter(|e| matches!(e, UlpEvent::Completion(_)))
            .count();
    }
    assert_eq!(completed, 20);
    let now = now + Duration::from_millis(1);
    // `transmit_bursts`: the same bursts in one call, the clock read once
    // before each.
    for tag in 20..40 {
        a.submit(now, ca, Transaction::push(tag, vec![7; 64]))
            .expect("room for 20 more pushes");
    }
    let mut reads = 0;
    let clock = || {
        reads += 1;
        now + Duration::from_micros(10 + reads)
    };
    assert_eq!(a.transmit_bursts(clock, &mut pa, &mut tx, 8), 20);
    assert_eq!(reads, 3, "bursts of 8, 8 and 4");
    let later = now + Duration::from_micros(20);
    assert_eq!(b.receive_burst(later, &mut pb, &mut rx, 64), 20);
    assert_eq!(b.stats().drops.total(), 0);
}

over_both_buffers!(
    exactly_once_ordered_under_loss_reordering_duplication,
    exactly_once_unordered_under_loss_reordering_duplication,
    corrupted_frames_are_dropped_by_psp_and_recovered,
    plaintext_mode_works_without_psp,
    tiny_pools_make_progress_under_heavy_two_way_load,
    transactions_keep_kinds_and_sizes_at_the_edges,
);
