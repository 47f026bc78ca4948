//! RUE core tests: inline and threaded modes, lossless queues with visible
//! occupancy, profiles, the lookahead, the state table.

use std::thread;

use super::*;
use crate::algorithm::ProfileConfig;
use crate::bypass::BypassConfig;
use crate::dcqcn::DcqcnConfig;
use crate::format::{Fcwnd, Time24};
use crate::swift::{Swift, SwiftConfig, SwiftState};
use crate::Algorithm;

fn event(connection_id: u32, now: u32) -> CcEvent {
    CcEvent {
        connection_id,
        t1: Time24::new(now - 300),
        t2: Time24::new(now - 200),
        t3: Time24::new(now - 150),
        t4: Time24::new(now),
        fcwnd: Fcwnd::from_f64(16.0),
        ncwnd: 64,
        num_packets_acked: 2,
        rtt_state: 300,
        delay_state: 250,
        ..CcEvent::default()
    }
}

fn rue(connections: u32, lookahead: usize) -> Rue {
    Rue::new(
        RueConfig {
            connections,
            lookahead,
        },
        Profiles::swift_default(),
    )
    .unwrap()
}

#[test]
fn bytes_per_connection_is_one_cache_line() {
    assert_eq!(BYTES_PER_CONNECTION, 64);
    assert_eq!(std::mem::align_of::<Slot>(), 64);
}

#[test]
fn inline_push_process_pop() {
    let mut rue = rue(100, 4);
    let mut channel = rue.add_core(64);
    let events: Vec<CcEvent> = (0..40).map(|i| event(i % 10, 10_000 + i * 50)).collect();
    for ev in &events {
        channel.push(*ev).unwrap();
    }
    assert_eq!(channel.event_occupancy(), 40);
    assert_eq!(rue.process(16), 16);
    assert_eq!(channel.event_occupancy(), 24);
    assert_eq!(channel.result_occupancy(), 16);
    assert_eq!(rue.process(1000), 24);
    // Results in event order, equal to Swift run directly with per-connection state.
    let mut swift = Swift::new(SwiftConfig::default()).unwrap();
    let mut states = [SwiftState::default(); 10];
    for ev in &events {
        let expected = swift.on_event(ev, &mut states[ev.connection_id as usize]);
        assert_eq!(channel.pop(), Some(expected));
    }
    assert_eq!(channel.pop(), None);
    assert_eq!(rue.counters().events, 40);
    assert!(matches!(rue.state(3), Some(ConnectionState::Swift(_))));
    rue.reset_connection(3);
    assert_eq!(rue.state(3), Some(&ConnectionState::Empty));
}

#[test]
fn pop_each_hands_results_in_order_and_frees_them() {
    let mut reference = rue(100, 4);
    let mut reference_channel = reference.add_core(8);
    let mut rue = rue(100, 4);
    let mut channel = rue.add_core(8);
    let mut now = 10_000;
    // Turns of 5 events in queues of 8: the results wrap around the ring,
    // so `pop_each` sees them in two slices.
    for turn in 0..20u32 {
        for i in 0..5 {
            now += 50;
            let ev = event((turn * 5 + i) % 7, now);
            channel.push(ev).unwrap();
            reference_channel.push(ev).unwrap();
        }
        assert_eq!(rue.process(100), 5);
        assert_eq!(reference.process(100), 5);
        let mut got = Vec::new();
        // At most `max`, then the rest.
        assert_eq!(channel.pop_each(2, |result| got.push(*result)), 2);
        assert_eq!(channel.result_occupancy(), 3);
        assert_eq!(channel.pop_each(usize::MAX, |result| got.push(*result)), 3);
        assert_eq!(channel.result_occupancy(), 0);
        assert_eq!(channel.pop_each(usize::MAX, |_| unreachable!()), 0);
        let want: Vec<CcResult> = std::iter::from_fn(|| reference_channel.pop()).collect();
        assert_eq!(got, want, "turn {turn}");
    }
}

#[test]
fn queues_are_lossless_and_show_occupancy() {
    let mut rue = rue(16, 8);
    let mut channel = rue.add_core(4);
    for i in 0..4 {
        channel.push(event(i, 5000)).unwrap();
    }
    // A full queue hands the event back instead of overwriting.
    let extra = event(9, 5000);
    assert_eq!(channel.push(extra), Err(extra));
    assert_eq!(channel.event_occupancy(), channel.event_capacity());
    let policy = Admission::new(crate::AdmissionConfig::for_capacity(4)).unwrap();
    assert_eq!(channel.admission(&policy, 0, 0), Verdict::Full);
    assert_eq!(rue.process(100), 4);
    // Results are not popped: the result queue is full, the RUE stops and
    // keeps the events.
    for i in 4..8 {
        channel.push(event(i, 5000)).unwrap();
    }
    assert_eq!(rue.process(100), 0);
    assert_eq!(rue.counters().result_queue_full, 1);
    assert_eq!(channel.event_occupancy(), 4);
    let ids: Vec<u32> = std::iter::from_fn(|| channel.pop())
        .map(|r| r.connection_id)
        .collect();
    assert_eq!(ids, [0, 1, 2, 3]);
    assert_eq!(rue.process(100), 4);
    let ids: Vec<u32> = std::iter::from_fn(|| channel.pop())
        .map(|r| r.connection_id)
        .collect();
    assert_eq!(ids, [4, 5, 6, 7]);
}

#[test]
fn threaded_mode_serves_two_datapath_cores() {
    const PER_CORE: u32 = 20_000;
    let mut rue = rue(1 << 12, DEFAULT_LOOKAHEAD);
    let channels = [rue.add_core(256), rue.add_core(256)];
    let thread = rue.spawn(Idle::Yield).unwrap();
    let workers: Vec<_> = channels
        .into_iter()
        .enumerate()
        .map(|(core, mut channel)| {
            thread::spawn(move || {
                let base = core as u32 * 2048;
                let (mut sent, mut received) = (0u32, 0u32);
                while received < PER_CORE {
                    while sent < PER_CORE {
                        match channel.push(event(base + sent % 2048, 10_000 + sent)) {
                            Ok(()) => sent += 1,
                            Err(_) => break,
                        }
                    }
                    while let Some(result) = channel.pop() {
                        // Per-core order is kept.
                        assert_eq!(result.connection_id, base + received % 2048);
                        received += 1;
                    }
                    thread::yield_now();
                }
                received
            })
        })
        .collect();
    let received: u32 = workers.into_iter().map(|w| w.join().unwrap()).sum();
    let rue = thread.stop().expect("the RUE thread does not panic");
    assert_eq!(received, 2 * PER_CORE);
    assert_eq!(rue.counters().events, u64::from(2 * PER_CORE));
    assert_eq!(rue.counters().outside_table, 0);
}

#[test]
fn stop_drains_queued_events() {
    let mut rue = rue(16, 0);
    let mut channel = rue.add_core(64);
    for i in 0..10 {
        channel.push(event(i, 5000)).unwrap();
    }
    let thread = rue.spawn(Idle::Yield).unwrap();
    let rue = thread.stop().unwrap();
    assert_eq!(rue.counters().events, 10);
    assert_eq!(std::iter::from_fn(|| channel.pop()).count(), 10);
}

#[test]
fn lookahead_does_not_change_results() {
    let mut ids = 12345u32;
    let events: Vec<CcEvent> = (0..3000)
        .map(|i| {
            ids ^= ids << 13;
            ids ^= ids >> 17;
            ids ^= ids << 5;
            event(ids % 5000, 10_000 + i)
        })
        .collect();
    let run = |lookahead| {
        let mut rue = rue(4096, lookahead);
        let mut channel = rue.add_core(512);
        let mut out = Vec::new();
        for chunk in events.chunks(300) {
            for ev in chunk {
                channel.push(*ev).unwrap();
            }
            rue.process(usize::MAX);
            out.extend(std::iter::from_fn(|| channel.pop()));
        }
        (out, rue.counters())
    };
    let (plain, counters) = run(0);
    assert_eq!(plain.len(), 3000);
    assert!(
        counters.outside_table > 0,
        "ids ≥ 4096 run from a blank state"
    );
    assert_eq!(run(8).0, plain);
    assert_eq!(run(64).0, plain);
}

#[test]
fn profiles_pick_the_algorithm_per_connection() {
    let profiles = Profiles::new(&[
        ProfileConfig::Swift(SwiftConfig::default()),
        ProfileConfig::Dcqcn(DcqcnConfig::default()),
        ProfileConfig::Bypass(BypassConfig {
            fcwnd: Some(3.0),
            ..BypassConfig::default()
        }),
    ])
    .unwrap();
    let mut rue = Rue::new(
        RueConfig {
            connections: 8,
            lookahead: 2,
        },
        profiles,
    )
    .unwrap();
    let with_profile = |id, profile| CcEvent {
        base_delay_target: Profiles::base_delay_field(profile),
        ..event(id, 9000)
    };
    rue.handle_event(&with_profile(0, 0));
    rue.handle_event(&with_profile(1, 1));
    let r = rue.handle_event(&with_profile(2, 2));
    assert_eq!(r.fcwnd, Fcwnd::from_f64(3.0));
    assert_eq!(r.base_delay_target, Profiles::base_delay_field(2));
    assert!(matches!(rue.state(0), Some(ConnectionState::Swift(_))));
    assert!(matches!(rue.state(1), Some(ConnectionState::Dcqcn(_))));
    assert_eq!(rue.state(2), Some(&ConnectionState::Empty)); // bypass keeps none
    assert!(Rue::new(
        RueConfig {
            connections: (1 << 24) + 1,
            lookahead: 0
        },
        Profiles::swift_default()
    )
    .is_err());
}

/// An event with `new_instance` runs on a blank state, reset at its turn:
/// events of the id's previous connection queued ahead of it in the same
/// batch still see the old state, and the new connection never inherits it
/// (batched lanes, one by one, and `handle_event` alike); every result
/// carries its event's instance.
#[test]
fn new_instance_starts_from_a_blank_state_at_its_turn() {
    // Id 7's first connection (instance 0) builds up state: a NIC window
    // that shrinks by fractions of a request (the peer's buffers fill).
    let old = |i: u32| CcEvent {
        ncwnd: 20,
        rx_buffer_level: 25,
        ..event(7, 10_000 + i * 40)
    };
    let mut warm_up: Vec<CcEvent> = (0..24).map(old).collect();
    // Then one batch: two more of the old connection's events, others'
    // events, the new connection's first event (instance 1, new) and its
    // next one, so that both runs are long enough for the lanes.
    let mut batch = vec![
        old(24),
        event(1, 11_000),
        event(2, 11_000),
        event(3, 11_000),
    ];
    batch.push(old(25));
    let first = CcEvent {
        instance: 1,
        new_instance: true,
        ..event(7, 11_100)
    };
    let next = CcEvent {
        instance: 1,
        ..event(7, 11_140)
    };
    batch.extend([
        first,
        event(4, 11_100),
        event(5, 11_100),
        next,
        event(6, 11_100),
    ]);

    // Reference: Swift directly, each connection's state kept apart.
    let mut swift = Swift::new(SwiftConfig::default()).unwrap();
    let mut states = [SwiftState::default(); 10];
    let mut expected = Vec::new();
    for ev in warm_up.iter().chain(&batch) {
        if ev.new_instance {
            let inherited = states[7];
            assert_ne!(
                inherited,
                SwiftState::default(),
                "the old connection left state to inherit"
            );
            let (mut kept, mut blank) = (inherited, SwiftState::default());
            swift.clone().on_event(ev, &mut kept);
            swift.clone().on_event(ev, &mut blank);
            assert_ne!(kept, blank, "the inherited state would carry over");
            states[7] = SwiftState::default();
        }
        let mut result = swift.on_event(ev, &mut states[ev.connection_id as usize]);
        result.instance = ev.instance;
        expected.push(result);
    }

    // Queued: the warm-up, then the batch in one `process`.
    let mut core = rue(100, 4);
    let mut channel = core.add_core(64);
    let mut got = Vec::new();
    for ev in &warm_up {
        channel.push(*ev).unwrap();
        core.process(1);
        got.extend(channel.pop());
    }
    for ev in &batch {
        channel.push(*ev).unwrap();
    }
    assert_eq!(core.process(usize::MAX), batch.len());
    got.extend(std::iter::from_fn(|| channel.pop()));
    assert_eq!(got, expected);
    assert_eq!(core.state(7), Some(&ConnectionState::Swift(states[7])));
    let instances: Vec<u32> = got[warm_up.len()..]
        .iter()
        .filter(|r| r.connection_id == 7)
        .map(|r| r.instance)
        .collect();
    assert_eq!(instances, [0, 0, 1, 1]);

    // One at a time.
    let mut direct = rue(100, 4);
    warm_up.extend(batch);
    let got: Vec<CcResult> = warm_up.iter().map(|ev| direct.handle_event(ev)).collect();
    assert_eq!(got, expected);
    assert_eq!(direct.state(7), Some(&ConnectionState::Swift(states[7])));
}
