//! The RUE on another core (DESIGN.md §3; `RueMode::External`): events
//! leave through `Engine::poll_rue_event`, results come back through
//! `Engine::handle_rue_result`; one RUE core serves both engines through
//! one queue pair each, with disjoint connection-id ranges.

use core::time::Duration;

use rue::{CcEvent, CcResult, DcqcnConfig, ProfileConfig, Profiles, Rue, RueChannel, RueConfig};

use crate::engine::{connect, ConnectionHandle, Engine, EngineConfig, PairSpec, RueMode};
use crate::ids::ConnectionId;
use crate::port::FrameBuf;
use crate::testing::Faults;
use crate::testing::{Cluster, Setup};
use crate::time::Timestamp;
use crate::transaction::{Transaction, UlpEvent};
use crate::wire::EthernetAddress;

#[test]
fn external_rue_serves_two_engines_under_loss() {
    let mut pair = Cluster::new(Setup {
        rue: RueMode::External { id_base: 0 },
        connections: 3,
        faults: Faults {
            loss_ppm: 10_000,
            reorder_ppm: 20_000,
            ..Faults::default()
        },
        seed: 5,
        ..Setup::default()
    });
    pair.queue_random(0, 200, 3000);
    pair.queue_random(1, 200, 3000);
    pair.run_to_completion(Duration::from_secs(3));
    for side in 0..2 {
        pair.assert_all_ok(side);
        let stats = pair.nodes[side].engine.stats();
        // One event per connection and loop turn at most (the delivery
        // sublayer folds the ACKs of a turn into it): fewer than inline.
        assert!(
            stats.rue_events > 20,
            "events left the engine: {}",
            stats.rue_events
        );
        assert_eq!(
            stats.rue_results, stats.rue_events,
            "every event answered and applied"
        );
        assert_eq!(stats.rue_results_unmatched, 0);
        let (low, high) = stats.fcwnd_range().expect("windows seen");
        assert!(low < high, "Swift moved the windows: {low}..{high}");
    }
    // Both engines' connections live in the one table, apart.
    let (core, _) = pair.external_rue.as_mut().expect("external RUE");
    for id in [0, 1, 2, 1024, 1025, 1026] {
        assert!(core.state(id).is_some(), "RUE state of connection {id}");
    }
    assert_eq!(core.counters().outside_table, 0);
}

/// A result for an id outside the engine's range, or for a closed
/// connection, is refused and counted; an inline engine hands out nothing.
#[test]
fn unmatched_results_are_counted_and_inline_engines_hand_out_no_events() {
    let mut pair = Cluster::new(Setup {
        rue: RueMode::External { id_base: 0 },
        ..Setup::default()
    });
    pair.queue_random(0, 5, 100);
    pair.run_to_completion(Duration::from_millis(50));
    let now = pair.now;
    let engine = &mut pair.nodes[1].engine;
    let stray = rue::CcResult {
        connection_id: 5,
        ..rue::CcResult::default()
    };
    assert!(!engine.handle_rue_result(now, &stray));
    assert_eq!(engine.stats().rue_results_unmatched, 1);

    let mut inline: Engine =
        Engine::new(EngineConfig::default(), Timestamp::from_micros(1)).unwrap();
    assert!(inline
        .poll_rue_event(Timestamp::from_micros(2), 0, 1024)
        .is_none());
    let bad = EngineConfig {
        rue: RueMode::External {
            id_base: (1 << 24) - 10,
        },
        ..EngineConfig::default()
    };
    assert_eq!(
        Engine::<FrameBuf>::new(bad, Timestamp::from_micros(1))
            .err()
            .map(|e| e.field),
        Some("rue.id_base")
    );
}

/// Engine A with a RUE on another core (driven by hand here), engine B with
/// its RUE inline, frames moved by hand.
struct SlotReuse {
    a: Engine,
    b: Engine,
    core: Rue,
    channel: RueChannel,
    now: Timestamp,
}

impl SlotReuse {
    fn new() -> SlotReuse {
        let now = Timestamp::from_micros(1_000);
        let a = Engine::new(
            EngineConfig {
                rue: RueMode::External { id_base: 0 },
                max_connections: 4,
                ..EngineConfig::default()
            },
            now,
        )
        .expect("engine A");
        let b = Engine::new(
            EngineConfig {
                local_ip: "10.0.0.2".parse().expect("literal address"),
                local_mac: EthernetAddress([2, 0, 0, 0, 0, 2]),
                ..EngineConfig::default()
            },
            now,
        )
        .expect("engine B");
        let mut core = Rue::new(rue_config(), dcqcn()).expect("RUE");
        let channel = core.add_core(16);
        SlotReuse {
            a,
            b,
            core,
            channel,
            now,
        }
    }

    fn connect(&mut self, a_cid: u32, b_cid: u32) -> (ConnectionHandle, ConnectionHandle) {
        let spec = PairSpec {
            a_cid: ConnectionId::truncating(a_cid),
            b_cid: ConnectionId::truncating(b_cid),
            ..PairSpec::default()
        };
        connect(self.now, &mut self.a, &mut self.b, &spec).expect("connect")
    }

    /// A pushes 1000 bytes on `ca`, B takes it on `cb`; frames go both ways
    /// (timers run) until the push completed and its ACK reached A, which
    /// then has a RUE event.
    fn push(&mut self, ca: ConnectionHandle, cb: ConnectionHandle) {
        self.now = self.now + Duration::from_micros(20);
        self.a
            .submit(self.now, ca, Transaction::push(1, vec![7; 1000]))
            .expect("submit");
        let mut buf = vec![0u8; self.a.max_frame_len()];
        let mut completed = 0;
        for _ in 0..100 {
            self.now = self.now + Duration::from_micros(2);
            let now = self.now;
            self.a.handle_timeout(now);
            self.b.handle_timeout(now);
            while let Some(len) = self.a.poll_transmit_into(now, &mut buf) {
                let _ = self
                    .b
                    .handle_packet(now, FrameBuf::from_frame(&buf[..len], 0));
            }
            while let Some(len) = self.b.poll_transmit_into(now, &mut buf) {
                let _ = self
                    .a
                    .handle_packet(now, FrameBuf::from_frame(&buf[..len], 0));
            }
            while let Some(event) = self.b.poll_event() {
                if let UlpEvent::Request(r) = event {
                    self.b.ulp_ack(now, cb, r.rsn).expect("ulp_ack");
                }
            }
            while let Some(event) = self.a.poll_event() {
                if let UlpEvent::Completion(c) = event {
                    assert!(c.status.is_ok());
                    completed += 1;
                }
            }
        }
        assert_eq!(completed, 1, "the push completed");
    }

    /// A's next RUE event, into the RUE's queue.
    fn event_out(&mut self) -> CcEvent {
        let event = self
            .a
            .poll_rue_event(
                self.now,
                self.channel.event_occupancy(),
                self.channel.event_capacity(),
            )
            .expect("an ACK made a RUE event");
        self.channel.push(event).expect("room in the queue");
        event
    }
}

fn rue_config() -> RueConfig {
    RueConfig {
        connections: 4,
        ..RueConfig::default()
    }
}

/// DCQCN: every event moves its connection's RUE-side state (byte counter,
/// timers, alpha), so a state carried over from an earlier connection
/// shows.
fn dcqcn() -> Profiles {
    Profiles::new(&[ProfileConfig::Dcqcn(DcqcnConfig::default())]).expect("profiles")
}

/// Issue #24 item 4: a connection closed with a RUE event in flight on
/// another core, its slot (so its RUE connection id) reused at once. The
/// new connection starts from a fresh RUE state, and the old connection's
/// result, which comes back after the new one's first event went out, is
/// dropped and counted, not applied to the new connection.
#[test]
fn reused_slot_starts_from_fresh_rue_state_and_drops_stale_results() {
    let mut t = SlotReuse::new();
    let (ca, cb) = t.connect(0x10, 0x20);
    // The first connection's RUE state builds up over a few events.
    let mut sent = Vec::new();
    for _ in 0..4 {
        t.push(ca, cb);
        sent.push(t.event_out());
        t.core.process(usize::MAX);
        let result = t.channel.pop().expect("a result");
        assert!(t.a.handle_rue_result(t.now, &result));
    }
    // One more event leaves and is still queued at the RUE when the
    // connection closes and a new one takes its slot.
    t.push(ca, cb);
    let old = t.event_out();
    sent.push(old);
    t.a.close(t.now, ca);
    t.b.close(t.now, cb);
    let (ca2, cb2) = t.connect(0x11, 0x21);
    assert_eq!(ca2.index, ca.index, "the slot is reused");
    let fresh_cc = t.a.connection_snapshot(ca2).expect("live").cc;
    t.push(ca2, cb2);
    let new = t.event_out();
    assert_eq!(new.connection_id, old.connection_id, "the same RUE id");
    // The RUE runs both, in queue order.
    assert_eq!(t.core.process(usize::MAX), 2);
    let (stale, current): (CcResult, CcResult) = (
        t.channel.pop().expect("the old event's result"),
        t.channel.pop().expect("the new event's result"),
    );

    // The old connection's result is dropped by name.
    assert!(!t.a.handle_rue_result(t.now, &stale));
    let stats = t.a.stats();
    assert_eq!(
        (stats.rue_results_stale, stats.rue_results_unmatched),
        (1, 1)
    );
    assert_eq!(
        t.a.connection_snapshot(ca2).expect("live").cc,
        fresh_cc,
        "no stale result applied"
    );

    // The new connection's first event ran on a blank state: as on a RUE
    // that never saw the id. Without the reset the old state would show.
    let id = new.connection_id;
    let mut blank = Rue::new(rue_config(), dcqcn()).expect("RUE");
    assert_eq!(current, blank.handle_event(&new));
    assert_eq!(t.core.state(id), blank.state(id));
    let mut inherited = Rue::new(rue_config(), dcqcn()).expect("RUE");
    for event in &sent {
        inherited.handle_event(event);
    }
    inherited.handle_event(&CcEvent {
        new_instance: false,
        ..new
    });
    assert_ne!(
        inherited.state(id),
        blank.state(id),
        "the old connection left state a reused id would inherit"
    );

    // Its result applies, and the connection goes on. What told them
    // apart: the instance each event carries, and the new one's first
    // event marked as such.
    assert!(t.a.handle_rue_result(t.now, &current));
    assert_eq!(t.a.stats().rue_results_stale, 1);
    t.push(ca2, cb2);
    let next = t.event_out();
    assert_ne!(new.instance, old.instance);
    assert_eq!(
        (stale.instance, current.instance),
        (old.instance, new.instance)
    );
    assert_eq!(next.instance, new.instance);
    assert!(new.new_instance && !old.new_instance && !next.new_instance);
}
