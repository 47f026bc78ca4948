//! `falcon bench pipeline` end to end. Without the `dpdk` feature the
//! binary says how to get it; with it (`scripts/test.sh` runs this file
//! with `--features dpdk`), a short run on two null ports reports both
//! loops and their ratio.

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
    let o = falcon(&["bench", "pipeline", "--seconds", "0.4", "--json"]);
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
}

#[cfg(feature = "dpdk")]
#[test]
fn bench_pipeline_refuses_what_it_does_not_measure() {
    let o = falcon(&["bench", "pipeline", "--vdev", "net_memif"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("net_memif"), "{}", stderr(&o));
}
