//! `falcon bench scale` end to end: the binary with its counting allocator,
//! at a small N.

use serde_json::Value;

mod common;
use common::{falcon, stderr};

#[test]
fn bench_scale_reports_memory_and_op_rate_at_n_and_at_1k() {
    let o = falcon(&[
        "bench",
        "scale",
        "--connections",
        "2000",
        "--seconds",
        "0.3",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let f = |key: &str| {
        v[key]
            .as_f64()
            .unwrap_or_else(|| panic!("{key} missing: {v}"))
    };
    assert_eq!(v["connections"], 2000, "{v}");
    // Measured from the allocator: every connection holds its state on the
    // heap (well over 1 KB in the engine's slab), and the engine-wide part
    // is a share of it.
    let bytes = f("bytes_per_connection");
    assert!(bytes > 1_000.0 && bytes < 1_000_000.0, "{v}");
    assert_eq!(
        bytes,
        f("initiator_bytes_per_connection").max(f("target_bytes_per_connection"))
    );
    let parts = f("engine_bytes_per_connection") + f("add_connection_bytes");
    assert!(
        (parts - f("initiator_bytes_per_connection")).abs() < 1.0,
        "{v}"
    );
    // Connections live in the slab's chunks of 64, not one allocation each.
    let allocations = f("allocations_per_connection");
    assert!(allocations > 0.0 && allocations < 0.5, "{v}");
    assert!(f("rss_bytes_per_connection") > 0.0, "{v}");
    assert!(f("bytes_per_connection_1k") > 0.0, "{v}");
    assert!(f("ops_per_sec") > 0.0 && f("ops_per_sec_1k") > 0.0, "{v}");
    assert!(f("ratio_to_1k") > 0.0, "{v}");
    assert!(
        f("transactions") > 0.0 && f("connections_used") > 0.0,
        "{v}"
    );
    assert_eq!(v["rounds"], 10);
    assert_eq!(v["push_bytes"], 64);
    assert_eq!(v["meets_memory_bar"], bytes <= 2147.0);
    // Drops need a stalled host (an RTO retransmission arriving after its
    // original): not asserted absent, but each one is counted by reason.
    let by_reason: u64 = v["drops_by_reason"]
        .as_object()
        .unwrap()
        .values()
        .map(|n| n.as_u64().unwrap())
        .sum();
    assert_eq!(v["drops"].as_u64(), Some(by_reason), "{v}");
    assert!(f("bytes_per_connection_after_run") > 0.0, "{v}");
}

#[test]
fn bench_scale_refuses_zero_connections() {
    let o = falcon(&["bench", "scale", "--connections", "0"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}
