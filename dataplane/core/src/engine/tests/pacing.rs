//! Pacing through the engine (`crate::pacing`), in virtual time: rate caps
//! achieved at the receiver, and the RUE's gap when fcwnd < 1.

use core::time::Duration;

use rue::{CcResult, Fcwnd, Profiles};

use crate::engine::RueMode;
use crate::testing::{Cluster, Setup};
use crate::time::Timestamp;
use crate::transaction::TransactionKind;

/// Bytes of every push (one packet each).
const PUSH: usize = 4000;

/// Four connections from node 0 with caps from 1 to 100 Gbit/s on one
/// engine, each backlogged: each one's frames arrive at the cap to within
/// 1 %, and its goodput is the cap times payload over frame bytes.
#[test]
fn rate_caps_from_1_to_100_gbps_hold_at_the_receiver() {
    let caps: [u64; 4] = [
        1_000_000_000,
        10_000_000_000,
        40_000_000_000,
        100_000_000_000,
    ];
    let mut pair = Cluster::new(Setup {
        connections: caps.len(),
        seed: 26,
        ..Setup::default()
    });
    for (c, &cap) in caps.iter().enumerate() {
        let handle = pair.nodes[0].conns[c];
        pair.nodes[0]
            .engine
            .set_rate_cap(handle, Some(cap))
            .expect("live connection");
        // Enough to stay backlogged past the 2 ms measured below.
        let pushes = (cap as f64 * 3e-3 / (PUSH as f64 * 8.0)).ceil() as usize + 20;
        for _ in 0..pushes {
            pair.queue(0, c, TransactionKind::Push, PUSH);
        }
    }
    let start = pair.now;
    let window = Duration::from_millis(2);
    pair.drive(window + Duration::from_micros(100), |p| {
        p.now >= start + window + Duration::from_micros(50)
    });
    let receiver = pair.nodes[1].engine.stats();
    assert_eq!(receiver.drops.total(), 0);
    assert_eq!(pair.nodes[0].engine.stats().retransmissions, 0);
    // Only data frames reach node 1, all of one length.
    assert_eq!(receiver.rx_bytes % receiver.rx_frames, 0);
    let frame = receiver.rx_bytes / receiver.rx_frames;
    assert!(
        frame > PUSH as u64 && frame < PUSH as u64 + 200,
        "{frame} B"
    );
    // The measurement window: from 100 µs in (past the start-up) to its end.
    let from = start + Duration::from_micros(100);
    let to = start + window;
    for (c, &cap) in caps.iter().enumerate() {
        let times: Vec<Timestamp> = pair.nodes[1].log[c]
            .iter()
            .filter(|(_, redelivery, at)| !redelivery && *at >= from && *at <= to)
            .map(|&(_, _, at)| at)
            .collect();
        assert!(times.len() > 50, "conn {c}: {} deliveries", times.len());
        let span = times[times.len() - 1].saturating_duration_since(times[0]);
        let packets = (times.len() - 1) as f64;
        let wire_bps = packets * (frame * 8) as f64 / span.as_secs_f64();
        let goodput_bps = packets * (PUSH * 8) as f64 / span.as_secs_f64();
        let error = wire_bps / cap as f64 - 1.0;
        assert!(
            error.abs() < 0.01,
            "conn {c}: cap {cap} bit/s, frames at {wire_bps:.0} ({:+.3} %)",
            error * 100.0
        );
        let expected_goodput = cap as f64 * PUSH as f64 / frame as f64;
        assert!((goodput_bps / expected_goodput - 1.0).abs() < 0.01);
        // Still backlogged at the end: the cap, not the work, set the rate.
        assert!(!pair.nodes[0].backlog[c].is_empty() || pair.unfinished() > 0);
    }
    let sender = pair.nodes[0].engine.stats();
    assert!(sender.pacing_releases > 0);
    assert_eq!(sender.pacing_clamped, 0);
}

/// A cap that binds, lifted: the connection goes at once, and with no cap
/// a connection never enters the pacing wheel.
#[test]
fn rate_cap_set_and_lifted_live() {
    let mut pair = Cluster::new(Setup {
        seed: 27,
        ..Setup::default()
    });
    let handle = pair.nodes[0].conns[0];
    let engine = &mut pair.nodes[0].engine;
    assert_eq!(
        engine.set_rate_cap(handle, Some(0)).map_err(|e| e.field),
        Err("rate_cap")
    );
    // 100 Mbit/s: a 4 KiB push every ~330 µs.
    engine
        .set_rate_cap(handle, Some(100_000_000))
        .expect("live connection");
    for _ in 0..10 {
        pair.queue(0, 0, TransactionKind::Push, PUSH);
    }
    let start = pair.now;
    pair.drive(Duration::from_millis(1), |p| {
        p.now >= start + Duration::from_micros(700)
    });
    let delivered = pair.nodes[1].log[0].len();
    assert!((2..=4).contains(&delivered), "{delivered} in 700 µs");
    pair.nodes[0]
        .engine
        .set_rate_cap(handle, None)
        .expect("live connection");
    let lifted = pair.now;
    pair.run_to_completion(Duration::from_millis(1));
    pair.assert_all_ok(0);
    let last = pair.nodes[1].log[0].last().expect("deliveries").2;
    assert!(
        last < lifted + Duration::from_micros(100),
        "the rest at once"
    );

    // Uncapped and windowed: no pacing at all.
    let mut plain = Cluster::new(Setup {
        seed: 28,
        ..Setup::default()
    });
    for _ in 0..50 {
        plain.queue(0, 0, TransactionKind::Push, PUSH);
    }
    plain.run_to_completion(Duration::from_millis(10));
    assert_eq!(plain.nodes[0].engine.stats().pacing_releases, 0);
}

/// fcwnd < 1 (a RUE result with fcwnd 0.5 and a 20-unit gap, 10.24 µs):
/// one packet outstanding, and each leaves one gap after it became
/// eligible (the previous one's ACK arrived), so deliveries are one RTT
/// (two 2 µs one-way delays) plus the gap apart, late by less than one
/// slot of the pacing wheel (512 ns).
#[test]
fn rue_paced_connection_departs_one_gap_after_eligibility() {
    let mut pair = Cluster::new(Setup {
        rue: RueMode::External { id_base: 0 },
        seed: 29,
        ..Setup::default()
    });
    // Results by hand: the cluster's RUE core answers nothing.
    pair.external_rue = None;
    let handle = pair.nodes[0].conns[0];
    let mut result = CcResult::initial(
        handle.index(),
        Profiles::base_delay_field(0),
        pair.now.time24(),
    );
    result.fcwnd = Fcwnd::from_f64(0.5);
    result.inter_packet_gap = 20;
    let now = pair.now;
    assert!(pair.nodes[0].engine.handle_rue_result(now, &result));
    for _ in 0..30 {
        pair.queue(0, 0, TransactionKind::Push, 1000);
    }
    pair.run_to_completion(Duration::from_millis(5));
    pair.assert_all_ok(0);
    let times: Vec<Timestamp> = pair.nodes[1].log[0].iter().map(|e| e.2).collect();
    assert_eq!(times.len(), 30);
    let gap = Duration::from_nanos(20 * 512);
    let rtt = Duration::from_micros(4);
    for (k, pair) in times.windows(2).enumerate() {
        let apart = pair[1].saturating_duration_since(pair[0]);
        assert!(
            apart >= rtt + gap && apart < rtt + gap + Duration::from_nanos(512),
            "deliveries {k} and {}: {apart:?} apart",
            k + 1
        );
    }
    let stats = pair.nodes[0].engine.stats();
    assert!(stats.pacing_releases >= 29);
    assert_eq!(stats.retransmissions, 0);
}
