//! Flow control (RDMA-0.9 §6.5, Falcon-0.9 §8.2.3): RNR when no receive
//! is posted and `rnr_retry`, bursts beyond the credits, READ responses
//! while requests are stopped; and atomics executed exactly once under
//! loss.

use std::collections::BTreeSet;

use super::*;
use crate::verbs::{AsyncEventKind, WcStatus, WrOp};
use crate::Refusal;

fn all() -> Access {
    Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC
}

/// A SEND to a QP with no receive posted is RNR-NACKed (with the QP's
/// `min_rnr_timer`) and retried by Falcon for as long as it takes
/// (`rnr_retry` 7): nothing completes until a receive is posted, then the
/// SEND lands whole.
#[test]
fn rnr_until_a_receive_is_posted() {
    let mut pair = Pair::new(Setup {
        // 0.08 ms.
        min_rnr_timer: RnrTimeout::new(4).expect("5-bit code"),
        ..Setup::default()
    });
    let (a_region, a_mr) = pair.na.region(3000, 1, Access::LOCAL_WRITE);
    let (b_region, b_mr) = pair.nb.region(3000, 2, Access::LOCAL_WRITE);
    pair.na
        .post_send(0, SendWr::new(1, WrOp::Send, Node::sge(&a_mr, 0, 3000)));
    let start = pair.now();
    pair.run_until(Duration::from_secs(1), |p| {
        p.now().saturating_duration_since(start) >= Duration::from_millis(2)
    });
    assert!(
        pair.wa.is_empty() && pair.wb.is_empty(),
        "nothing completes: {:?} {:?}\n{:#?}\n{:#?}",
        pair.wa,
        pair.wb,
        pair.na.device.stats(),
        pair.nb.device.stats()
    );
    let nacks = pair.na.device.stats().rnr_nacks;
    // At least one RNR NACK per 0.08 ms (or the RTO) over 2 ms.
    assert!(nacks >= 5, "{nacks} RNR NACKs");
    assert!(pair.nb.device.stats().refused(Refusal::NoReceive) >= nacks);
    pair.nb
        .post_recv(0, RecvWr::new(9, Node::sge(&b_mr, 0, 3000)));
    pair.until_completions(1, 1);
    assert_all_ok(&pair.wa);
    assert_eq!((pair.wb[0].wr_id, pair.wb[0].byte_len), (9, 3000));
    assert_eq!(b_region.to_vec(), a_region.to_vec());
    assert_eq!(pair.na.state(0), QpState::Rts);
}

/// `rnr_retry` as verbs define it: the message fails with
/// RNR_RETRY_EXC_ERR on the RNR NACK after `rnr_retry` retries, the QP goes
/// to ERR (the next request flushes) with IBV_EVENT_QP_FATAL, in either
/// error mode.
#[test]
fn rnr_retry_exhaustion_fails_the_message() {
    for (retry, error_mode) in [
        (0, ErrorMode::VerbsCompatible),
        (2, ErrorMode::VerbsCompatible),
        (3, ErrorMode::CompleteInError),
    ] {
        let mut pair = Pair::new(Setup {
            rnr_retry: retry,
            error_mode,
            ..Setup::default()
        });
        let (_, a_mr) = pair.na.region(100, 1, Access::LOCAL_WRITE);
        pair.na
            .post_send(0, SendWr::new(1, WrOp::Send, Node::sge(&a_mr, 0, 100)));
        pair.run_until(Duration::from_secs(1), |p| !p.wa.is_empty());
        assert_eq!(
            pair.na.device.stats().rnr_nacks,
            u64::from(retry) + 1,
            "retry {retry}: failed on the NACK after the last retry"
        );
        pair.na
            .post_send(0, SendWr::new(2, WrOp::Send, Node::sge(&a_mr, 0, 100)));
        let got: Vec<(u64, WcStatus)> = pair
            .na
            .drain()
            .iter()
            .map(|wc| (wc.wr_id, wc.status))
            .collect();
        assert_eq!(pair.wa[0].status, WcStatus::RnrRetryExcErr);
        assert_eq!(got, [(2, WcStatus::WrFlushErr)]);
        assert_eq!(pair.na.state(0), QpState::Error);
        assert_eq!(pair.na.device.stats().rnr_retry_exceeded, 1);
        let event = pair.na.device.poll_async_event().expect("an event");
        assert_eq!(event.kind, AsyncEventKind::QpFatal);
    }
}

/// Fetch-and-add and compare-and-swap under 5 % loss each way, reordering
/// and duplication: each executes exactly once (a counter incremented by
/// N fetch-and-adds ends at N, the values they return are 0..N, each
/// once), because Falcon delivers a pull request at most once and the
/// result rides in the response's header for every retransmission.
#[test]
fn atomics_execute_exactly_once_under_loss() {
    const N: u64 = 300;
    let mut pair = Pair::new(Setup {
        qps: 2,
        faults: falcon_core::testing::Faults {
            duplicate_ppm: falcon_core::testing::Faults::percent(2),
            ..lossy(5)
        },
        seed: 42,
        ..Setup::default()
    });
    let (a_region, a_mr) = pair
        .na
        .region(8 * (N as usize + 50), 0, Access::LOCAL_WRITE);
    let (b_region, b_mr) = pair.nb.region(64, 0, all());
    b_region.write(0, &[0; 64]).expect("inside");
    for i in 0..N {
        let op = WrOp::FetchAdd {
            remote_addr: b_mr.addr(),
            rkey: b_mr.rkey(),
            add: 1,
        };
        pair.na.post_send(
            (i % 2) as usize,
            SendWr::new(i, op, Node::sge(&a_mr, i * 8, 8)),
        );
    }
    // CAS chain on the second word: 0 → 1 → ... → 50, each expecting the
    // last, each landing its original in its own sink.
    for i in 0..50u64 {
        let op = WrOp::CompareSwap {
            remote_addr: b_mr.addr_at(8),
            rkey: b_mr.rkey(),
            compare: i,
            swap: i + 1,
        };
        let sink = Node::sge(&a_mr, (N + i) * 8, 8);
        pair.na.post_send(0, SendWr::new(N + i, op, sink));
    }
    pair.until_completions(N as usize + 50, 0);
    assert_all_ok(&pair.wa);
    let word =
        |bytes: &[u8], at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8"));
    let b = b_region.to_vec();
    assert_eq!(word(&b, 0), N, "each fetch-and-add once");
    assert_eq!(
        word(&b, 8),
        50,
        "the CAS chain on one QP, in order, once each"
    );
    let a = a_region.to_vec();
    let originals: BTreeSet<u64> = (0..N as usize).map(|i| word(&a, i * 8)).collect();
    assert_eq!(originals, (0..N).collect::<BTreeSet<_>>());
    let chain: Vec<u64> = (0..50).map(|i| word(&a, (N as usize + i) * 8)).collect();
    assert_eq!(
        chain,
        (0..50).collect::<Vec<_>>(),
        "each CAS found its compare"
    );
    assert_eq!(pair.nb.device.stats().atomics_executed, N + 50);
    assert!(pair.a.port.stats().lost + pair.b.port.stats().lost > 0);
}

/// A burst far beyond a connection's credits (8 request packets): every
/// work request completes, none is lost, the refused submits wait for the
/// Xon; the bytes are right.
#[test]
fn a_burst_beyond_the_credits_completes_whole() {
    let mut pair = Pair::new(Setup {
        credits: Some(CreditLimits {
            req_pkt_tx: 8,
            ..CreditLimits::UNLIMITED
        }),
        faults: lossy(1),
        seed: 9,
        ..Setup::default()
    });
    let (a_region, a_mr) = pair.na.region(64 * 1024, 1, all());
    let (b_region, b_mr) = pair.nb.region(64 * 1024, 2, all());
    let b_before = b_region.to_vec();
    let mut receives = 0;
    for i in 0..400u64 {
        let at = (i % 32) * 2048;
        let sge = Node::sge(&a_mr, at, 2048);
        let op = match i % 4 {
            0 | 1 => WrOp::Write {
                remote_addr: b_mr.addr_at(at),
                rkey: b_mr.rkey(),
            },
            2 => WrOp::Read {
                remote_addr: b_mr.addr_at(at),
                rkey: b_mr.rkey(),
            },
            _ => {
                pair.nb
                    .post_recv(0, RecvWr::new(i, Node::sge(&b_mr, 0, 2048)));
                receives += 1;
                WrOp::Send
            }
        };
        pair.na.post_send(0, SendWr::new(i, op, sge));
    }
    pair.until_completions(400, receives);
    assert_all_ok(&pair.wa);
    assert_all_ok(&pair.wb);
    let ids: Vec<u64> = pair.wa.iter().map(|wc| wc.wr_id).collect();
    assert_eq!(ids, (0..400).collect::<Vec<_>>());
    let stats = pair.na.device.stats();
    assert!(stats.credit_waits > 0, "the burst met the credit limit");
    assert!(stats.xoff > 0 && stats.xon > 0, "{stats:?}");
    // Offset k * 2048 sees one kind of request (k % 4, as i % 4 for every
    // i = k mod 32): WRITEs leave A's bytes there, READs bring B's to A,
    // SENDs land in B's first 2048 bytes, in order, the last (i = 399,
    // k = 15) last.
    let a = a_region.to_vec();
    let mut expected = b_before.clone();
    for k in 0..32usize {
        let at = k * 2048;
        match k % 4 {
            0 | 1 => expected[at..at + 2048].copy_from_slice(&a[at..at + 2048]),
            2 => assert_eq!(a[at..at + 2048], b_before[at..at + 2048], "READ at {at}"),
            _ => {}
        }
    }
    expected[..2048].copy_from_slice(&a[15 * 2048..16 * 2048]);
    assert_eq!(b_region.to_vec(), expected);
}

/// RDMA-0.9 §6.5: a stop of the request class must not hold back READ
/// responses. B's SENDs sit RNR-NACKed at A (no receives) holding all of
/// B's request credits, so B is stopped for requests; A's READs from B
/// still complete, answered by B; once A posts receives, B's SENDs land.
#[test]
fn read_responses_flow_while_requests_are_stopped() {
    let mut pair = Pair::new(Setup {
        credits: Some(CreditLimits {
            req_pkt_tx: 4,
            ..CreditLimits::UNLIMITED
        }),
        ..Setup::default()
    });
    let (a_region, a_mr) = pair.na.region(16 * 1024, 1, all());
    let (b_region, b_mr) = pair.nb.region(16 * 1024, 2, all());
    for i in 0..10u64 {
        pair.nb
            .post_send(0, SendWr::new(i, WrOp::Send, Node::sge(&b_mr, 0, 512)));
    }
    pair.settle(Duration::from_millis(1));
    assert!(
        pair.nb.device.stats().credit_waits > 0,
        "B is out of request credits"
    );
    assert!(pair.wb.is_empty());
    for i in 0..16u64 {
        let op = WrOp::Read {
            remote_addr: b_mr.addr_at(i * 1024),
            rkey: b_mr.rkey(),
        };
        pair.na
            .post_send(0, SendWr::new(i, op, Node::sge(&a_mr, i * 1024, 1024)));
    }
    pair.run_until(Duration::from_secs(1), |p| p.wa.len() >= 16);
    assert_all_ok(&pair.wa);
    assert_eq!(a_region.to_vec(), b_region.to_vec(), "every READ answered");
    assert!(pair.wb.is_empty(), "B's SENDs still wait");
    for i in 0..10u64 {
        pair.na
            .post_recv(0, RecvWr::new(100 + i, Node::sge(&a_mr, 0, 512)));
    }
    pair.until_completions(26, 10);
    assert_all_ok(&pair.wb);
}
