//! The RUE on another core (DESIGN.md §3; `RueMode::External`): events
//! leave through `Engine::poll_rue_event`, results come back through
//! `Engine::handle_rue_result`; one RUE core serves both engines through
//! one queue pair each, with disjoint connection-id ranges.

use core::time::Duration;

use super::harness::{Pair, Setup};
use crate::engine::{Engine, EngineConfig, RueMode};
use crate::port::{Faults, FrameBuf};
use crate::time::Timestamp;

#[test]
fn external_rue_serves_two_engines_under_loss() {
    let mut pair = Pair::new(Setup {
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
    let mut pair = Pair::new(Setup {
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
