//! `falcon bench pipeline` end to end. Without the `dpdk` feature the
//! binary says how to get it; with it (`scripts/test.sh` runs this file
//! with `--features dpdk`), a short run on two null ports reports both
//! loops and their ratio, and the Falcon target fed over a ring pair by a
//! generator lcore handles every recorded frame, PSP on and off; the
//! scaling runs on one and two lcores handle every frame of each shard,
//! by queue and dispatched.

#[cfg(feature = "dpdk")]
use serde_json::Value;

mod common;
use common::{falcon, stderr};

#[cfg(not(feature = "dpdk"))]
#[test]
fn bench_pipeline_without_dpdk_says_how_to_build_it() {
    let o = falcon(&["bench", "pipeline", "--json"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--features dpdk"), "{}", stderr(&o));
}

#[cfg(feature = "dpdk")]
#[test]
fn bench_pipeline_forwards_between_null_ports_both_ways() {
    let o = falcon(&[
        "bench",
        "pipeline",
        "--seconds",
        "0.4",
        "--falcon-rounds",
        "2",
        "--psp",
        "off",
        "--scaling-rounds",
        "1",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_slice(&o.stdout).expect("one JSON object");
    let f = |key: &str| v[key].as_f64().unwrap_or_else(|| panic!("{key}: {v}"));
    assert!(f("forward_mpps") > 0.1, "{v}");
    assert!(f("port_forward_mpps") > 0.1, "{v}");
    let ratio = f("port_ratio");
    let [low, high] = [
        v["port_ratio_range"][0].as_f64(),
        v["port_ratio_range"][1].as_f64(),
    ];
    assert!(low.unwrap() <= ratio && ratio <= high.unwrap(), "{v}");
    assert_eq!(v["meets_port_bar"], ratio >= 0.9);
    assert_eq!(v["vdev"], "net_null");
    assert_eq!(v["rounds"], 10);
    falcon_half(&v, false, 64, 2);
    scaling(&v["scaling"], 1);
}

/// The scaling part of a report on two lcores: both ways of steering
/// handled every frame of both shards; dispatch moved exactly the second
/// shard's frames; rates and efficiencies within their ranges.
#[cfg(feature = "dpdk")]
fn scaling(s: &Value, rounds: u64) {
    let f = |v: &Value, key: &str| v[key].as_f64().unwrap_or_else(|| panic!("{key}: {s}"));
    assert_eq!(s["lcores"].as_u64(), Some(2), "{s}");
    assert_eq!(s["rounds"].as_u64(), Some(rounds), "{s}");
    let frames = s["frames_per_lcore"].as_u64().unwrap();
    assert!(frames >= 10_000, "{s}");
    assert!(f(s, "one_lcore_mpps") > 0.01, "{s}");
    for (way, dispatched) in [("by_queue", 0), ("dispatched", frames)] {
        let w = &s[way];
        let lcores = w["lcore_mpps"]
            .as_array()
            .unwrap_or_else(|| panic!("{way}: {s}"));
        assert_eq!(lcores.len(), 2, "{s}");
        assert!(lcores.iter().all(|m| m.as_f64().unwrap() > 0.01), "{s}");
        let total = f(w, "total_mpps");
        // The node's rate is at most the sum of its lcores' own rates.
        let sum: f64 = lcores.iter().map(|m| m.as_f64().unwrap()).sum();
        assert!(total > 0.01 && total <= sum * 1.0001, "{s}");
        let e = f(w, "scaling_efficiency");
        let range = &w["scaling_efficiency_range"];
        assert!(
            range[0].as_f64().unwrap() <= e && e <= range[1].as_f64().unwrap(),
            "{s}"
        );
        assert_eq!(
            w["dispatched_frames"].as_u64(),
            Some(dispatched),
            "{way}: {s}"
        );
        assert_eq!(w["dispatch_ring_full"].as_u64(), Some(0), "{s}");
        let named: u64 = w["drop_reasons"]
            .as_object()
            .unwrap()
            .values()
            .map(|n| n.as_u64().unwrap())
            .sum();
        assert_eq!(w["drops"].as_u64(), Some(named), "{s}");
    }
}

/// The Falcon half of a report: both rates, their ratio within its range,
/// every recorded frame handled (a frame dropped is named, and the drops
/// add up).
#[cfg(feature = "dpdk")]
fn falcon_half(v: &Value, psp: bool, push_bytes: u64, rounds: u64) {
    let f = |key: &str| v[key].as_f64().unwrap_or_else(|| panic!("{key}: {v}"));
    assert!(f("falcon_mpps") > 0.01, "{v}");
    assert!(f("engine_mpps") > 0.01, "{v}");
    let ratio = f("falcon_ratio");
    let range = &v["falcon_ratio_range"];
    assert!(
        range[0].as_f64().unwrap() <= ratio && ratio <= range[1].as_f64().unwrap(),
        "{v}"
    );
    assert_eq!(v["meets_falcon_bar"], ratio >= 0.8);
    assert_eq!(v["psp"], psp);
    assert_eq!(v["push_bytes"].as_u64(), Some(push_bytes));
    assert_eq!(v["falcon_rounds"].as_u64(), Some(rounds));
    assert!(v["falcon_frames"].as_u64().unwrap() >= 10_000, "{v}");
    let named: u64 = v["falcon_drop_reasons"]
        .as_object()
        .unwrap()
        .values()
        .map(|n| n.as_u64().unwrap())
        .sum();
    assert_eq!(v["falcon_drops"].as_u64(), Some(named), "{v}");
    let burst = f("falcon_rx_burst");
    // A turn reads one burst of 32, or up to 64 after a stall (a busy
    // host's preemption): `falcon_core::lcore::RX_BURSTS_AFTER_STALL`.
    assert!((1.0..=32.0 * 64.0).contains(&burst), "{v}");
}

#[cfg(feature = "dpdk")]
#[test]
fn bench_pipeline_feeds_a_psp_target_4k_pushes_over_a_ring() {
    let o = falcon(&[
        "bench",
        "pipeline",
        "--seconds",
        "0.2",
        "--size",
        "4096",
        "--falcon-rounds",
        "1",
        "--scaling-rounds",
        "1",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_slice(&o.stdout).expect("one JSON object");
    falcon_half(&v, true, 4096, 1);
    scaling(&v["scaling"], 1);
}

#[cfg(feature = "dpdk")]
#[test]
fn bench_pipeline_refuses_more_lcores_than_cpus() {
    let o = falcon(&["bench", "pipeline", "--lcores", "64"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--lcores 64"), "{}", stderr(&o));
    assert!(stderr(&o).contains("CPUs"), "{}", stderr(&o));
}

#[cfg(feature = "dpdk")]
#[test]
fn bench_pipeline_refuses_pushes_beyond_4k() {
    let o = falcon(&["bench", "pipeline", "--size", "8000", "--seconds", "0.2"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("4096"), "{}", stderr(&o));
}

#[cfg(feature = "dpdk")]
#[test]
fn bench_pipeline_refuses_what_it_does_not_measure() {
    let o = falcon(&["bench", "pipeline", "--vdev", "net_memif"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("net_memif"), "{}", stderr(&o));
}
