//! Differential test of the RUE core's batched hot path against the
//! straightforward per-event path.
//!
//! The reference is what `Rue` did before the batched path existed: for each
//! event in order, pick the profile (`Profiles::for_event`), find the
//! connection's `ConnectionState` (a blank one for ids outside the table)
//! and call `AnyAlgorithm::on_event`. The engine runs the same events through
//! its queues (single and batched push/pop, results read in place, many
//! `process` budgets and lookaheads) and every `CcResult` must be equal
//! field by field, as must the counters and every connection's final state.
//!
//! The event streams are ~100 k seeded random events whose clock crosses the
//! 24-bit wrap, with duplicates of a connection inside one batch, ids outside
//! the table, every event type, NACK code, delay select and profile index,
//! windows from 0 to the maximum (pacing below one packet) and, half of the
//! time, the CC state carried from the connection's previous result as the
//! datapath does. One stream also starts new connection instances on
//! reused ids (`new_instance`, the state reset at the event's turn).
//!
//! `REFERENCE_DIGEST` pins the reference path itself: it is a hash of every
//! result of the mixed stream computed with the implementation before the
//! batched path (the per-event Swift of commit 42a8d44), so a change of the
//! arithmetic anywhere (not only a divergence between the two paths) fails.

use std::collections::HashMap;

use rue::{
    AnyAlgorithm, BypassConfig, CcEvent, CcResult, ConnectionState, DcqcnConfig, DelaySelect,
    EventType, Fcwnd, NcwndDirection, PlbConfig, ProfileConfig, Profiles, PrrConfig,
    RetransmitReason, Rue, RueConfig, SwiftConfig, Time24,
};

/// FNV-1a over every encoded result of [`mixed_profiles`]' stream, then the
/// profile counters, computed with the pre-batching implementation.
const REFERENCE_DIGEST: u64 = 0x3286_fd5a_6ef1_5761;

/// The same for [`swift_default_batched_equals_per_event`]' stream.
const SWIFT_REFERENCE_DIGEST: u64 = 0x5f25_3aea_6a0f_e234;

/// Events per stream.
const EVENTS: usize = 100_000;

struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    fn below(&mut self, n: u32) -> u32 {
        (((self.next() >> 32) * u64::from(n)) >> 32) as u32
    }

    fn bit(&mut self) -> bool {
        self.next() & 1 == 1
    }
}

/// The straightforward per-event path (the RUE core before batching).
struct Reference {
    profiles: Profiles,
    states: Vec<ConnectionState>,
    outside: u64,
}

impl Reference {
    fn new(connections: u32, profiles: Profiles) -> Self {
        Reference {
            profiles,
            states: vec![ConnectionState::Empty; connections as usize],
            outside: 0,
        }
    }

    fn on_event(&mut self, event: &CcEvent) -> CcResult {
        if event.new_instance {
            if let Some(state) = self.states.get_mut(event.connection_id as usize) {
                *state = ConnectionState::Empty;
            }
        }
        let algorithm: &mut AnyAlgorithm = self
            .profiles
            .for_event(event)
            .expect("profile 0 is installed");
        match self.states.get_mut(event.connection_id as usize) {
            Some(slot) => algorithm.on_event(event, slot),
            None => {
                self.outside += 1;
                let mut scratch = ConnectionState::Empty;
                algorithm.on_event(event, &mut scratch)
            }
        }
    }
}

/// Shape of a generated stream.
#[derive(Clone, Copy)]
struct Stream {
    /// Connections with a slot in the table.
    connections: u32,
    /// Ids beyond the table (events run from a blank state).
    outside: u32,
    /// Profile indices events draw from (0..profiles; indices beyond the
    /// installed ones fall back to profile 0).
    profile_indices: u8,
    /// Retransmit events per 100.
    retransmit_percent: u32,
    /// Events per 100 that start a new instance of their connection id.
    new_instance_percent: u32,
    seed: u64,
}

/// Generates the stream, computing the reference results on the way (events
/// carry state from their connection's previous reference result).
fn generate(stream: Stream, reference: &mut Reference) -> (Vec<CcEvent>, Vec<CcResult>) {
    let mut rng = XorShift(stream.seed | 1);
    let mut last: HashMap<u32, CcResult> = HashMap::new();
    let mut instances: HashMap<u32, u32> = HashMap::new();
    let hot: Vec<u32> = (0..8).map(|_| rng.below(stream.connections)).collect();
    // Starts 20 000 units before the wrap; ~2.5 units per event, so the
    // clock wraps after about 8 000 events (and again after 2^24 units).
    let mut now: u32 = (1 << 24) - 20_000;
    let mut events = Vec::with_capacity(EVENTS);
    let mut results = Vec::with_capacity(EVENTS);
    for _ in 0..EVENTS {
        now = now.wrapping_add(rng.below(6)) & 0xFF_FFFF;
        let connection_id = match rng.below(8) {
            // A few hot connections: duplicates within one batch.
            0 | 1 => hot[rng.below(hot.len() as u32) as usize],
            2 => stream.connections + rng.below(stream.outside.max(1)),
            _ => rng.below(stream.connections),
        };
        let kind = rng.below(100);
        let event_type = if kind < stream.retransmit_percent {
            EventType::Retransmit
        } else if kind < stream.retransmit_percent + 12 {
            EventType::Nack
        } else {
            EventType::Ack
        };
        let rtt = match rng.below(4) {
            0 => rng.below(1 << 24),
            _ => 20 + rng.below(2000),
        };
        let t1 = now.wrapping_sub(rtt);
        let t2 = t1.wrapping_add(rng.below(rtt.max(1)));
        let t3 = t2.wrapping_add(rng.below(200));
        let marker = |rng: &mut XorShift| match rng.below(4) {
            0 => Time24::new(rng.next() as u32),
            _ => Time24::new(now.wrapping_sub(rng.below(4000))),
        };
        let fcwnd = match rng.below(6) {
            0 => Fcwnd::from_raw(rng.below(1024)), // below one packet: pacing
            1 => Fcwnd::from_raw(rng.next() as u32), // anything, 0 ..= max
            2 => Fcwnd::from_raw(rng.below(4)),
            _ => Fcwnd::from_raw(1024 + rng.below(256 << 10)),
        };
        let profile = rng.below(u32::from(stream.profile_indices)) as u8;
        let mut event = CcEvent {
            connection_id,
            event_type,
            t1: Time24::new(t1),
            t2: Time24::new(t2),
            t3: Time24::new(t3),
            t4: Time24::new(now),
            retransmit_count: rng.below(8) as u8,
            retransmit_reason: if rng.below(4) == 0 {
                RetransmitReason::Early
            } else {
                RetransmitReason::Timeout
            },
            nack_code: match event_type {
                EventType::Nack => rng.below(9) as u8,
                _ if rng.below(16) == 0 => rng.below(256) as u8,
                _ => 0,
            },
            forward_hops: rng.below(16) as u8,
            rx_buffer_level: rng.below(32) as u8,
            cc_metadata: rng.below(1 << 24),
            fcwnd,
            inter_packet_gap: rng.below(1 << 20),
            ncwnd: rng.below(2048) as u16,
            retransmit_timeout: Time24::new(rng.next() as u32),
            num_packets_acked: match rng.below(4) {
                0 => rng.below(1024) as u16,
                _ => rng.below(17) as u16,
            },
            eack_drop: rng.bit(),
            eack: rng.bit(),
            event_queue_select: rng.below(4) as u8,
            delay_select: match rng.below(8) {
                0 => DelaySelect::Full,
                1 => DelaySelect::Forward,
                2 => DelaySelect::Reverse,
                _ => DelaySelect::Fabric,
            },
            fabric_window_time_marker: marker(&mut rng),
            nic_window_time_marker: marker(&mut rng),
            ncwnd_direction: if rng.bit() {
                NcwndDirection::Increase
            } else {
                NcwndDirection::Decrease
            },
            base_delay_target: Profiles::base_delay_field(profile) | rng.below(1 << 21),
            delay_state: rng.below(1 << 24),
            rtt_state: match rng.below(3) {
                0 => rng.below(1 << 24),
                _ => rtt,
            },
            cc_opaque: rng.below(4) as u8,
            ecn_accumulated: rng.below(1 << 14) as u16,
            instance: 0,
            new_instance: false,
            gen: rng.bit(),
        };
        // No draw unless the stream asks for new instances: the other
        // streams' events (and their digests) stay as they were.
        if stream.new_instance_percent > 0 && rng.below(100) < stream.new_instance_percent {
            let instance = instances.entry(connection_id).or_insert(0);
            *instance = (*instance + 1) & 0xFF_FFFF;
            event.new_instance = true;
            last.remove(&connection_id);
        }
        event.instance = instances.get(&connection_id).copied().unwrap_or(0);
        // The datapath's part, most of the time: the connection's state as
        // its last result left it.
        if rng.below(2) == 0 {
            if let Some(previous) = last.get(&connection_id) {
                let base_delay_target = event.base_delay_target;
                event.carry_state(previous);
                // Keep the drawn profile now and then (profile changes).
                if rng.below(8) == 0 {
                    event.base_delay_target = base_delay_target;
                }
            }
        }
        let mut result = reference.on_event(&event);
        // The RUE passes the instance through, whatever the algorithm.
        result.instance = event.instance;
        last.insert(connection_id, result);
        events.push(event);
        results.push(result);
    }
    (events, results)
}

/// How the engine is driven.
#[derive(Clone, Copy, Debug)]
struct Drive {
    lookahead: usize,
    /// Events pushed per datapath turn.
    push: usize,
    /// `process` budget per turn.
    budget: usize,
    /// Queue capacity (entries).
    capacity: usize,
    /// Use the batched push/pop of the channel.
    batched_channel: bool,
    /// Read the results in place (`pop_each`), with the batched push.
    pop_in_place: bool,
}

/// Runs the events through the engine's queues and returns the results.
fn run_engine(
    stream: Stream,
    profiles: Profiles,
    events: &[CcEvent],
    drive: Drive,
) -> (Rue, Vec<CcResult>) {
    let mut rue = Rue::new(
        RueConfig {
            connections: stream.connections,
            lookahead: drive.lookahead,
        },
        profiles,
    )
    .unwrap();
    let mut channel = rue.add_core(drive.capacity);
    let mut results = Vec::with_capacity(events.len());
    let mut buffer = vec![CcResult::default(); drive.capacity];
    let mut next = 0;
    while results.len() < events.len() {
        let end = (next + drive.push).min(events.len());
        if drive.batched_channel {
            next += channel.push_slice(&events[next..end]);
        } else {
            while next < end && channel.push(events[next]).is_ok() {
                next += 1;
            }
        }
        rue.process(drive.budget);
        if drive.pop_in_place {
            channel.pop_each(usize::MAX, |result| results.push(*result));
        } else if drive.batched_channel {
            let n = channel.pop_slice(&mut buffer);
            results.extend_from_slice(&buffer[..n]);
        } else {
            results.extend(std::iter::from_fn(|| channel.pop()));
        }
    }
    (rue, results)
}

fn compare(label: &str, expected: &[CcResult], got: &[CcResult]) {
    assert_eq!(expected.len(), got.len(), "{label}: result count");
    for (i, (e, g)) in expected.iter().zip(got).enumerate() {
        // Every field (derive(PartialEq) on the struct), and the wire form.
        assert_eq!(e, g, "{label}: result {i} differs");
        assert_eq!(e.encode(), g.encode(), "{label}: result {i} wire form");
    }
}

fn profile_counters(profiles: &Profiles) -> Vec<String> {
    (0..rue::MAX_PROFILES)
        .map(|i| match profiles.get(i) {
            Some(AnyAlgorithm::Swift(s)) => format!("{:?}", s.counters()),
            Some(AnyAlgorithm::Dcqcn(d)) => format!("{:?}", d.counters()),
            Some(AnyAlgorithm::Bypass(b)) => format!("bypass {}", b.events()),
            None => String::new(),
        })
        .collect()
}

fn check_stream(stream: Stream, configs: &[ProfileConfig], drives: &[Drive]) -> u64 {
    let profiles = || Profiles::new(configs).unwrap();
    let mut reference = Reference::new(stream.connections, profiles());
    let (events, expected) = generate(stream, &mut reference);
    for &drive in drives {
        let label = format!("{drive:?}");
        let (mut rue, got) = run_engine(stream, profiles(), &events, drive);
        compare(&label, &expected, &got);
        let counters = rue.counters();
        assert_eq!(counters.events, events.len() as u64, "{label}");
        assert_eq!(counters.outside_table, reference.outside, "{label}");
        assert_eq!(
            profile_counters(rue.profiles()),
            profile_counters(&reference.profiles),
            "{label}: profile counters"
        );
        for (id, state) in reference.states.iter().enumerate() {
            assert_eq!(rue.state(id as u32), Some(state), "{label}: state {id}");
        }
    }
    let mut hash = 0xcbf2_9ce4_8422_2325u64;
    let mut fnv = |bytes: &[u8]| {
        for &b in bytes {
            hash ^= u64::from(b);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    };
    for result in &expected {
        fnv(&result.encode());
    }
    for line in profile_counters(&reference.profiles) {
        fnv(line.as_bytes());
    }
    if std::env::var_os("RUE_DIFF_VERBOSE").is_some() {
        let gaps = expected.iter().filter(|r| r.inter_packet_gap > 0).count();
        let repaths = expected.iter().filter(|r| r.randomize_path).count();
        eprintln!(
            "{} events, {} outside, {gaps} paced, {repaths} repaths, counters {:?}",
            expected.len(),
            reference.outside,
            profile_counters(&reference.profiles)
        );
    }
    hash
}

fn drives() -> Vec<Drive> {
    let d = Drive {
        lookahead: rue::engine::DEFAULT_LOOKAHEAD,
        push: 256,
        budget: 256,
        capacity: 1024,
        batched_channel: true,
        pop_in_place: false,
    };
    vec![
        d,
        Drive {
            pop_in_place: true,
            ..d
        },
        Drive {
            batched_channel: false,
            ..d
        },
        Drive { lookahead: 0, ..d },
        Drive {
            lookahead: 7,
            push: 1000,
            budget: 77,
            ..d
        },
        // Results back up: `process` stops at the result queue's room.
        Drive {
            push: 300,
            budget: usize::MAX,
            capacity: 333,
            ..d
        },
        Drive {
            push: 1,
            budget: 1,
            capacity: 4,
            ..d
        },
    ]
}

/// The benchmark's case: one Swift profile (default configuration).
#[test]
fn swift_default_batched_equals_per_event() {
    let stream = Stream {
        connections: 50_000,
        outside: 100,
        profile_indices: 1,
        retransmit_percent: 2,
        new_instance_percent: 0,
        seed: 0x5eed_0001,
    };
    let digest = check_stream(
        stream,
        &[ProfileConfig::Swift(SwiftConfig::default())],
        &drives(),
    );
    assert_eq!(
        digest, SWIFT_REFERENCE_DIGEST,
        "reference results changed: {digest:#x}"
    );
}

/// Every option of Swift that changes the arithmetic, one profile each, with
/// DCQCN, bypass and absent profiles (fallback to 0) in the same stream.
#[test]
fn mixed_profiles() {
    let tuned = SwiftConfig {
        max_decrease_on_eack_nack_drop: true,
        calc_rtt_smooth: true,
        delay_smoothing_alpha: 0.25,
        min_fcwnd: 0.001,
        max_fcwnd: 1000.0,
        max_ncwnd: 1000.0,
        min_ncwnd: 2.0,
        nic_additive_increment: 2.0,
        target_rx_buffer_level: 0,
        retransmit_limit: 2,
        ipg_bits: 20,
        plb: PlbConfig {
            enabled: true,
            congestion_threshold: 0.25,
            attempt_threshold: 2,
            ..PlbConfig::default()
        },
        prr: PrrConfig {
            enabled: true,
            min_retransmit_count: 2,
            plb_pause_rounds: 3,
        },
        ..SwiftConfig::default()
    };
    let configs = [
        ProfileConfig::Swift(SwiftConfig::default()),
        ProfileConfig::Swift(tuned),
        ProfileConfig::Swift(SwiftConfig {
            multipath: true,
            ..SwiftConfig::default()
        }),
        ProfileConfig::Dcqcn(DcqcnConfig::default()),
        ProfileConfig::Bypass(BypassConfig::default()),
        ProfileConfig::Swift(SwiftConfig {
            target_rx_buffer_level: 31,
            rtt_smoothing_alpha: 0.0,
            ..tuned
        }),
    ];
    let stream = Stream {
        connections: 3000,
        outside: 50,
        profile_indices: 8,
        retransmit_percent: 8,
        new_instance_percent: 0,
        seed: 0x5eed_0002,
    };
    let digest = check_stream(stream, &configs, &drives());
    assert_eq!(
        digest, REFERENCE_DIGEST,
        "reference results changed: {digest:#x}"
    );
}

/// Two Swift profiles interleaved at random: per-batch dispatch must split
/// batches at every profile change.
#[test]
fn profile_changes_inside_batches() {
    let stream = Stream {
        connections: 500,
        outside: 10,
        profile_indices: 2,
        retransmit_percent: 5,
        new_instance_percent: 0,
        seed: 0x5eed_0003,
    };
    check_stream(
        stream,
        &[
            ProfileConfig::Swift(SwiftConfig::default()),
            ProfileConfig::Swift(SwiftConfig {
                plb: PlbConfig {
                    enabled: true,
                    ..PlbConfig::default()
                },
                ..SwiftConfig::default()
            }),
        ],
        &drives()[..2],
    );
}

/// Connection ids reused at random (5 % of events start a new instance,
/// often inside a batch with the id's previous connection's events): the
/// batched path resets the state exactly where the per-event path does, and
/// every result carries its event's instance.
#[test]
fn new_instances_inside_batches() {
    let stream = Stream {
        connections: 200,
        outside: 10,
        profile_indices: 2,
        retransmit_percent: 5,
        new_instance_percent: 5,
        seed: 0x5eed_0004,
    };
    check_stream(
        stream,
        &[
            ProfileConfig::Swift(SwiftConfig::default()),
            ProfileConfig::Dcqcn(DcqcnConfig::default()),
        ],
        &drives()[..2],
    );
}
