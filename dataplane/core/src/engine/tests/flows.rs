//! Scripted error flows (OCP Falcon 0.9 §8.4.3.4, §8.5.3.4–8.5.3.5, §11):
//! RNR for push (initiator retries) and pull (target retries locally), CIE
//! for push (NACK, Resync, completion in error) and pull (zero-length Pull
//! Data), NRE, invalid CID (ULP NACK, and packets to an unknown CID),
//! transaction timeouts with soft-state reclaim, and a connection that dies
//! with transactions outstanding.

use std::collections::VecDeque;

use core::time::Duration;

use crate::delivery::{DeliveryConfig, OrderingMode, UlpNack, XlrFilter};
use crate::drop::DropReason;
use crate::port::Port;
use crate::resources::Credit;
use crate::seq::Rsn;
use crate::testing::Faults;
use crate::testing::{Answer, Cluster, Policy, Setup, TestPort};
use crate::transaction::{CompletionStatus, TransactionConfig, TransactionKind};
use crate::wire::RnrTimeout;

fn plan<P: Port>(pair: &mut Cluster<P>, side: usize, conn: usize, rsn: u32, answers: &[Answer]) {
    pair.nodes[side].plans.insert(
        (conn, rsn),
        answers.iter().copied().collect::<VecDeque<_>>(),
    );
}

fn rnr(code: u8) -> UlpNack {
    UlpNack::ReceiverNotReady {
        timeout: RnrTimeout::new(code).expect("5-bit code"),
        ulp_nack_code: 0x20,
    }
}

fn statuses<P: Port>(
    pair: &Cluster<P>,
    side: usize,
) -> Vec<(TransactionKind, CompletionStatus, u8)> {
    pair.nodes[side].completions[0]
        .iter()
        .map(|c| (c.kind, c.status, c.ulp_nack_code))
        .collect()
}

/// §8.5.3.4 / §11: the target ULP RNR-NACKs a push; the initiator
/// retransmits after max(RTO, RNR timeout); the target redelivers it, and on
/// the ordered connection delivers nothing after it until it is accepted.
fn rnr_for_push_is_retried_by_the_initiator<P: TestPort>() {
    let mut pair = Cluster::<P>::over(Setup::default());
    let first = pair.rsn(0, 0, 0);
    pair.queue(0, 0, TransactionKind::Push, 100);
    pair.queue(0, 0, TransactionKind::Push, 200);
    pair.queue(0, 0, TransactionKind::Pull, 300);
    // RNR timeout code 13 = 0.96 ms, twice, then accepted.
    plan(
        &mut pair,
        1,
        0,
        first,
        &[Answer::Nack(rnr(13)), Answer::Nack(rnr(13)), Answer::Accept],
    );
    let start = pair.now;
    pair.run_to_completion(Duration::from_millis(100));
    pair.assert_all_ok(0);
    let (a, b) = (pair.nodes[0].engine.stats(), pair.nodes[1].engine.stats());
    assert!(a.transactions.rnr_received >= 2, "RNR NACKs on the wire");
    assert!(b.transactions.redeliveries >= 2);
    // The three requests arrive in one burst and are delivered in order;
    // the ULP RNR-NACKs the first, and (ordered) the later ones with it;
    // each is redelivered when its retransmission arrives, the first until
    // the ULP accepts it, then the others in RSN order.
    let log = &pair.nodes[1].log[0];
    let first_deliveries: Vec<u32> = log.iter().filter(|d| !d.1).map(|d| d.0.value()).collect();
    assert_eq!(
        first_deliveries,
        vec![first, first.wrapping_add(1), first.wrapping_add(2)]
    );
    let redelivered: Vec<u32> = log.iter().filter(|d| d.1).map(|d| d.0.value()).collect();
    let accepted_first = redelivered
        .iter()
        .rposition(|&r| r == first)
        .expect("redelivered");
    assert!(
        redelivered[accepted_first + 1..]
            .iter()
            .all(|&r| r != first),
        "after RSN {first} is accepted, only later RSNs: {redelivered:?}"
    );
    let first_redeliveries = redelivered.iter().filter(|&&r| r == first).count();
    assert_eq!(
        first_redeliveries, 2,
        "NACKed twice, accepted on the second redelivery"
    );
    // Each redelivery waited at least the RNR timeout.
    let times: Vec<_> = log
        .iter()
        .filter(|d| d.0.value() == first)
        .map(|d| d.2)
        .collect();
    assert!(times[1] - times[0] >= Duration::from_micros(960));
    assert!(times[2] - times[1] >= Duration::from_micros(960));
    assert!(pair.nodes[0].completions[0][0].rsn == Rsn::new(first));
    assert!(pair.now - start >= Duration::from_micros(1_920));
}

/// The RNR NACKs a push meets reach the initiator ULP that asked for them
/// (`report_receiver_not_ready`), one report per NACK, with the push's
/// tag, RSN and the target's timeout and code; a ULP that did not ask
/// holds none.
fn rnr_nacks_are_reported_to_the_ulp_that_asks<P: TestPort>() {
    for asked in [true, false] {
        let mut pair = Cluster::<P>::over(Setup::default());
        pair.nodes[0].engine.report_receiver_not_ready(asked);
        let first = pair.rsn(0, 0, 0);
        let tag = pair.queue(0, 0, TransactionKind::Push, 100);
        plan(
            &mut pair,
            1,
            0,
            first,
            &[Answer::Nack(rnr(13)), Answer::Nack(rnr(13)), Answer::Accept],
        );
        pair.run_to_completion(Duration::from_millis(100));
        pair.assert_all_ok(0);
        let connection = pair.nodes[0].conns[0];
        let engine = &mut pair.nodes[0].engine;
        let mut reports = Vec::new();
        while let Some(report) = engine.poll_receiver_not_ready() {
            reports.push(report);
        }
        if !asked {
            assert!(reports.is_empty());
            assert!(engine.shared.rnr_reports.is_none(), "nothing held");
            continue;
        }
        assert_eq!(reports.len(), 2, "{reports:?}");
        for report in reports {
            assert_eq!(report.connection, connection);
            assert_eq!(report.rsn, Rsn::new(first));
            assert_eq!(report.tag, tag);
            assert_eq!(report.timeout, RnrTimeout::new(13).expect("5-bit code"));
            assert_eq!(report.ulp_nack_code, 0x20);
        }
        engine.report_receiver_not_ready(false);
        assert!(engine.shared.rnr_reports.is_none());
    }
}

/// §8.5.3.4 with the long RNR timeouts (codes 25 = 61.44 ms, 31 = 491.52
/// ms, 0 = 655.36 ms), on ordered and unordered connections, under 1 %
/// loss each way: the ULP RNR-NACKs two pushes and a pull once each while
/// later pushes and pulls are outstanding. Every transaction completes with
/// Ack — none times out, none is resynced away — because the requests
/// behind an RNR-NACKed one on an ordered connection are RNR-NACKed too
/// (their waits count toward no retransmit limit) and an RNR NACK restarts
/// the initiator's transaction timeout.
fn long_rnr_timeouts_fail_no_later_request<P: TestPort>() {
    for ordering in [OrderingMode::Ordered, OrderingMode::Unordered] {
        for code in [0u8, 25, 31] {
            for seed in 1..=3 {
                let mut pair = Cluster::<P>::over(Setup {
                    ordering,
                    seed,
                    faults: Faults {
                        loss_ppm: Faults::percent(1),
                        ..Faults::default()
                    },
                    // A pull's RNR waits stay at the target (§8.5.3.4): the
                    // initiator hears nothing, so its soft-state timeout
                    // must outlast them. Here the pull is refused twice
                    // (once behind the first push, once by plan): 1.31 s at
                    // code 0, past the default 1 s.
                    transaction: TransactionConfig {
                        transaction_timeout: Duration::from_secs(4),
                        target_timeout: Duration::from_secs(4),
                        ..TransactionConfig::default()
                    },
                    ..Setup::default()
                });
                let first = pair.rsn(0, 0, 0);
                for k in 0..60u32 {
                    let kind = if k % 3 == 1 {
                        TransactionKind::Pull
                    } else {
                        TransactionKind::Push
                    };
                    pair.queue(0, 0, kind, 64 + (k as usize % 7) * 100);
                }
                // RSN +3 and +30 are pushes, +7 a pull.
                for k in [3u32, 7, 30] {
                    let rsn = first.wrapping_add(k);
                    plan(
                        &mut pair,
                        1,
                        0,
                        rsn,
                        &[Answer::Nack(rnr(code)), Answer::Accept],
                    );
                }
                let start = pair.now;
                pair.run_to_completion(Duration::from_secs(10));
                let context = format!("{ordering:?}, RNR code {code}, seed {seed}");
                assert_eq!(pair.nodes[0].completions[0].len(), 60, "{context}");
                pair.assert_all_ok(0);
                let (a, b) = (pair.nodes[0].engine.stats(), pair.nodes[1].engine.stats());
                assert_eq!(a.transactions.timeouts, 0, "{context}");
                assert_eq!(a.resyncs, 0, "{context}: nothing resynced away");
                assert!(a.transactions.rnr_received >= 2, "{context}");
                let wait = RnrTimeout::new(code).unwrap().as_duration();
                assert!(pair.now - start >= wait, "{context}");
                if ordering == OrderingMode::Ordered {
                    assert!(
                        b.transactions.rnr_sent_behind > 0,
                        "{context}: later pushes RNR-NACKed behind the first"
                    );
                } else {
                    assert_eq!(b.transactions.rnr_sent_behind, 0, "{context}");
                }
            }
        }
    }
}

/// OCP Falcon 0.9 §11, the xLR drop filter at both ends, on ordered and
/// unordered connections with pushes and pulls: set at the target, every
/// request is dropped with NACK code 4 (no resources taken, nothing
/// delivered), resynced away with 0x5 and completed kCmplRemoteErr; set at
/// the initiator, every request leaves as a Resync 0x2 and completes
/// kCmplLocalXlr, and the target delivers nothing. Cleared, the same
/// connection carries transactions again: both windows moved on.
fn xlr_drop_filter_at_either_end_finishes_requests_by_name<P: TestPort>() {
    for ordering in [OrderingMode::Ordered, OrderingMode::Unordered] {
        for (side, expected) in [
            (1, CompletionStatus::RemoteError),
            (0, CompletionStatus::LocalXlr),
        ] {
            let mut pair = Cluster::<P>::over(Setup {
                ordering,
                ..Setup::default()
            });
            let handle = pair.nodes[side].conns[0];
            let filter = if side == 1 {
                XlrFilter {
                    target: true,
                    ..XlrFilter::default()
                }
            } else {
                XlrFilter {
                    initiator: true,
                    ..XlrFilter::default()
                }
            };
            assert!(pair.nodes[side].engine.set_xlr_filter(handle, filter));
            for k in 0..12 {
                let kind = if k % 3 == 2 {
                    TransactionKind::Pull
                } else {
                    TransactionKind::Push
                };
                pair.queue(0, 0, kind, 100 + k * 10);
            }
            pair.run_to_completion(Duration::from_millis(200));
            let context = format!("{ordering:?}, filter at side {side}");
            let done = statuses(&pair, 0);
            assert_eq!(done.len(), 12, "{context}");
            assert!(
                done.iter().all(|&(_, status, _)| status == expected),
                "{context}: {done:?}"
            );
            assert!(pair.nodes[1].deliveries[0].is_empty(), "{context}");
            let (a, b) = (pair.nodes[0].engine.stats(), pair.nodes[1].engine.stats());
            assert_eq!(a.transactions.completions[usize::from(expected.code())], 12);
            let snapshot = pair.nodes[0]
                .engine
                .connection_snapshot(pair.nodes[0].conns[0]);
            let resyncs = snapshot.unwrap().delivery.resyncs_sent;
            assert!(resyncs >= 12, "{context}: one Resync a request, {resyncs}");
            if side == 1 {
                assert!(b.drops.get(DropReason::XlrDrop) >= 12, "{context}");
            } else {
                assert_eq!(b.drops.get(DropReason::XlrDrop), 0, "{context}");
            }
            // Cleared: the connection carries transactions again.
            assert!(pair.nodes[side]
                .engine
                .set_xlr_filter(handle, XlrFilter::default()));
            pair.queue(0, 0, TransactionKind::Push, 300);
            pair.queue(0, 0, TransactionKind::Pull, 400);
            pair.run_to_completion(Duration::from_millis(200));
            let done = statuses(&pair, 0);
            assert_eq!(done.len(), 14, "{context}");
            assert!(
                done[12..]
                    .iter()
                    .all(|&(_, status, _)| status == CompletionStatus::Ack),
                "{context}: {done:?}"
            );
        }
    }
}

/// §8.5.3.4: an RNR on a pull is handled at the target: it redelivers the
/// Pull Request to its ULP after the timeout; nothing goes on the wire.
fn rnr_for_pull_is_retried_locally_by_the_target<P: TestPort>() {
    let mut pair = Cluster::<P>::over(Setup::default());
    let first = pair.rsn(0, 0, 0);
    pair.queue(0, 0, TransactionKind::Pull, 1000);
    // Code 8 = 0.16 ms.
    plan(
        &mut pair,
        1,
        0,
        first,
        &[Answer::Nack(rnr(8)), Answer::Accept],
    );
    pair.run_to_completion(Duration::from_millis(100));
    pair.queue(0, 0, TransactionKind::Push, 64);
    pair.run_to_completion(Duration::from_millis(100));
    pair.assert_all_ok(0);
    let (a, b) = (pair.nodes[0].engine.stats(), pair.nodes[1].engine.stats());
    assert_eq!(a.transactions.rnr_received, 0, "no RNR NACK on the wire");
    assert_eq!(b.transactions.redeliveries, 1);
    let snapshot = pair.nodes[1]
        .engine
        .connection_snapshot(pair.nodes[1].conns[0])
        .unwrap();
    assert_eq!(snapshot.delivery.nacks_sent, 0);
    let log = &pair.nodes[1].log[0];
    assert_eq!((log[0].0.value(), log[0].1), (first, false));
    assert_eq!((log[1].0.value(), log[1].1), (first, true));
    assert!(log[1].2 - log[0].2 >= Duration::from_micros(160));
    assert_eq!(log[2].0.value(), first.wrapping_add(1));
}

/// §9.3.3.5 / §11: a push NACKed with CIE carries the ULP's code back; the
/// initiator resyncs and completes it in error (kCmplTargetNackCIE); the
/// connection goes on. Same shape for NRE and invalid CID.
fn cie_nre_and_invalid_cid_on_push_complete_in_error_and_the_connection_goes_on<P: TestPort>() {
    let mut pair = Cluster::<P>::over(Setup::default());
    for k in 0..5 {
        pair.queue(0, 0, TransactionKind::Push, 100 + k);
    }
    let nacks = [
        UlpNack::CompletionInError {
            ulp_nack_code: 0x42,
        },
        UlpNack::NonRecoverableError {
            ulp_nack_code: 0x43,
        },
        UlpNack::InvalidCid {
            ulp_nack_code: 0x44,
        },
    ];
    for (k, nack) in nacks.into_iter().enumerate() {
        let rsn = pair.rsn(0, 0, 1 + k as u32);
        plan(&mut pair, 1, 0, rsn, &[Answer::Nack(nack)]);
    }
    pair.run_to_completion(Duration::from_millis(100));
    assert_eq!(
        statuses(&pair, 0),
        vec![
            (TransactionKind::Push, CompletionStatus::Ack, 0),
            (
                TransactionKind::Push,
                CompletionStatus::TargetCompletionInError,
                0x42
            ),
            (
                TransactionKind::Push,
                CompletionStatus::TargetNonRecoverableError,
                0x43
            ),
            (
                TransactionKind::Push,
                CompletionStatus::TargetInvalidCid,
                0x44
            ),
            (TransactionKind::Push, CompletionStatus::Ack, 0),
        ]
    );
    assert_eq!(CompletionStatus::TargetCompletionInError.code(), 0x1);
    let a = pair.nodes[0].engine.stats();
    assert_eq!(a.resyncs, 3, "one Resync per NACKed push");
    assert_eq!(pair.nodes[1].engine.stats().transactions.ulp_nacks, 3);
}

/// §8.5.3.5: a pull completes in error with zero-length Pull Data (the
/// ULP's CIE or NRE on a pull); an invalid CID on a pull reclaims the
/// target's resources and sends nothing, so the initiator times out.
fn pull_errors_zero_length_pull_data_and_invalid_cid_timeout<P: TestPort>() {
    let mut pair = Cluster::<P>::over(Setup {
        transaction: TransactionConfig {
            transaction_timeout: Duration::from_millis(5),
            ..TransactionConfig::default()
        },
        ..Setup::default()
    });
    for _ in 0..4 {
        pair.queue(0, 0, TransactionKind::Pull, 500);
    }
    let cie = UlpNack::CompletionInError { ulp_nack_code: 1 };
    let nre = UlpNack::NonRecoverableError { ulp_nack_code: 2 };
    let cid = UlpNack::InvalidCid { ulp_nack_code: 3 };
    let (r0, r1, r2) = (pair.rsn(0, 0, 0), pair.rsn(0, 0, 1), pair.rsn(0, 0, 2));
    plan(&mut pair, 1, 0, r0, &[Answer::Nack(cie)]);
    plan(&mut pair, 1, 0, r1, &[Answer::Nack(nre)]);
    plan(&mut pair, 1, 0, r2, &[Answer::Nack(cid)]);
    pair.run_to_completion(Duration::from_millis(100));
    assert_eq!(
        statuses(&pair, 0),
        vec![
            (
                TransactionKind::Pull,
                CompletionStatus::TargetCompletionInError,
                0
            ),
            (
                TransactionKind::Pull,
                CompletionStatus::TargetCompletionInError,
                0
            ),
            (TransactionKind::Pull, CompletionStatus::LocalTimeout, 0),
            (TransactionKind::Pull, CompletionStatus::Ack, 0),
        ]
    );
    assert!(pair.nodes[0].completions[0][0].data.is_empty());
    assert_eq!(pair.nodes[0].engine.stats().transactions.timeouts, 1);
}

/// Packets to a connection id the receiver does not have are dropped and
/// counted (no ACK, no NACK); the sender's transactions do not vanish: they
/// fail (timeout, then the connection dies when its Resync exhausts) with an
/// error completion and a connection error event.
fn unknown_connection_id_is_counted_and_the_sender_fails_cleanly<P: TestPort>() {
    let mut pair = Cluster::<P>::over(Setup {
        delivery: DeliveryConfig {
            max_retransmit_attempts: 2,
            ..DeliveryConfig::default()
        },
        transaction: TransactionConfig {
            transaction_timeout: Duration::from_millis(50),
            ..TransactionConfig::default()
        },
        ..Setup::default()
    });
    let orphan = pair.add_orphan_connection(0, 1);
    pair.queue(0, 0, TransactionKind::Push, 64);
    for _ in 0..3 {
        pair.queue(0, orphan, TransactionKind::Push, 64);
    }
    pair.run_to_completion(Duration::from_millis(200));
    let b = pair.nodes[1].engine.stats();
    assert!(b.drops.get(DropReason::UnknownConnection) > 0);
    let failed: Vec<CompletionStatus> = pair.nodes[0].completions[orphan]
        .iter()
        .map(|c| c.status)
        .collect();
    assert_eq!(failed.len(), 3, "every transaction completes");
    assert!(failed.iter().all(|s| !s.is_ok()), "{failed:?}");
    assert!(
        pair.nodes[0].connection_errors.contains(&3),
        "ResyncExhausted reported"
    );
    assert_eq!(
        pair.nodes[0].completions[0][0].status,
        CompletionStatus::Ack,
        "the other connection is fine"
    );
    let snapshot = pair.nodes[0]
        .engine
        .connection_snapshot(pair.nodes[0].conns[orphan])
        .unwrap();
    assert!(snapshot.failed);
    let handle = pair.nodes[0].conns[orphan];
    let again = pair.nodes[0].engine.submit(
        pair.now,
        handle,
        crate::transaction::Transaction::push(99, vec![1]),
    );
    assert_eq!(
        again.map_err(|r| r.reason),
        Err(crate::transaction::RejectReason::ConnectionNotAlive)
    );
}

/// A link that goes dark: every outstanding transaction completes with an
/// error (the packet layer gives up, then the connection dies: §11), none
/// is lost, and every resource returns.
fn dead_link_fails_every_outstanding_transaction<P: TestPort>() {
    let mut pair = Cluster::<P>::over(Setup {
        delivery: DeliveryConfig {
            max_retransmit_attempts: 2,
            ..DeliveryConfig::default()
        },
        ..Setup::default()
    });
    pair.queue_random(0, 40, 2000);
    // The first turn submits and sends; then the link dies.
    pair.step();
    let dead = Faults {
        loss_ppm: 1_000_000,
        ..Faults::default()
    };
    pair.nodes[0].port.set_faults(dead);
    pair.nodes[1].port.set_faults(dead);
    pair.drive(Duration::from_millis(500), |p| p.unfinished() == 0);
    let statuses = pair.statuses(0);
    assert_eq!(statuses.values().sum::<usize>(), 40);
    assert!(
        statuses.get("kCmplDeadConn").copied().unwrap_or(0)
            + statuses.get("kCmplLocalTO").copied().unwrap_or(0)
            > 0,
        "{statuses:?}"
    );
    assert!(pair.nodes[0].connection_errors.contains(&3));
    for credit in Credit::ALL {
        assert_eq!(pair.nodes[0].engine.resources_used(credit), 0, "{credit:?}");
    }
}

/// A target ULP that never answers: the initiator's transactions time out
/// (kCmplLocalTO, Resync 0x4) and the target reclaims the network resources
/// the unanswered requests held (§11: soft state reclaimed by timeout).
fn soft_state_timeouts_reclaim_resources_at_both_ends<P: TestPort>() {
    let mut pair = Cluster::<P>::over(Setup {
        transaction: TransactionConfig {
            transaction_timeout: Duration::from_millis(3),
            target_timeout: Duration::from_millis(6),
            ..TransactionConfig::default()
        },
        ..Setup::default()
    });
    pair.nodes[1].policy[0] = Policy::Never;
    for _ in 0..10 {
        pair.queue(0, 0, TransactionKind::Push, 600);
    }
    pair.run_to_completion(Duration::from_millis(100));
    let statuses = pair.statuses(0);
    assert_eq!(statuses.get("kCmplLocalTO"), Some(&10), "{statuses:?}");
    let b = pair.nodes[1].engine.stats();
    assert_eq!(b.transactions.reclaimed, 10);
    for side in 0..2 {
        for credit in Credit::ALL {
            assert_eq!(
                pair.nodes[side].engine.resources_used(credit),
                0,
                "side {side} {credit:?}"
            );
        }
    }
}

/// Once every transaction has completed and been acknowledged, a
/// connection holds no timer at either end (no soft-state sweep, no wheel
/// deadline it would act on), no transaction slots and no TX window rings
/// (lent to the engine's pools). At 1 M connections a timer left on each idle one fired
/// on a connection no cache held, and each first use took fresh heap
/// (`falcon bench scale`).
fn an_idle_connection_holds_no_timer<P: TestPort>() {
    let mut pair = Cluster::<P>::over(Setup::default());
    // Pushes alone retire on the ACK's fast path; pulls through `settle`.
    for i in 0..20 {
        pair.queue(0, 0, TransactionKind::Push, 700);
        if i % 3 == 0 {
            pair.queue(1, 0, TransactionKind::Pull, 300);
        }
    }
    pair.run_to_completion(Duration::from_millis(100));
    pair.assert_all_ok(0);
    pair.assert_all_ok(1);
    // The last ACKs left with their coalescing timers: run past them.
    let until = pair.now + Duration::from_millis(1);
    while pair.now < until && pair.step() {}
    for (side, node) in pair.nodes.iter_mut().enumerate() {
        let engine = &mut node.engine;
        engine.arm_pending();
        for conn in engine.connections.iter().flatten() {
            assert_eq!(conn.initiator.next_deadline(), None, "side {side}");
            assert_eq!(conn.target.next_deadline(), None, "side {side}");
            assert_eq!(conn.delivery.poll_timeout(), None, "side {side}");
            assert_eq!(
                conn.armed, None,
                "side {side}: a stale wheel entry would act"
            );
            assert_eq!(
                conn.initiator.slots_held(),
                0,
                "side {side}: lent to the pool"
            );
            assert_eq!(conn.target.slots_held(), 0, "side {side}: lent to the pool");
            assert_eq!(conn.delivery.window_slots_held(), 0, "side {side}: lent");
        }
        // Both ends initiated and served: each pool holds the slots lent.
        assert!(engine.shared.initiator_rings.len() > 0, "side {side}");
        assert!(engine.shared.target_rings.len() > 0, "side {side}");
        assert!(!engine.windows.is_empty(), "side {side}");
    }
}

over_both_buffers!(
    an_idle_connection_holds_no_timer,
    rnr_for_push_is_retried_by_the_initiator,
    rnr_nacks_are_reported_to_the_ulp_that_asks,
    long_rnr_timeouts_fail_no_later_request,
    xlr_drop_filter_at_either_end_finishes_requests_by_name,
    rnr_for_pull_is_retried_locally_by_the_target,
    cie_nre_and_invalid_cid_on_push_complete_in_error_and_the_connection_goes_on,
    pull_errors_zero_length_pull_data_and_invalid_cid_timeout,
    unknown_connection_id_is_counted_and_the_sender_fails_cleanly,
    dead_link_fails_every_outstanding_transaction,
    soft_state_timeouts_reclaim_resources_at_both_ends,
);
