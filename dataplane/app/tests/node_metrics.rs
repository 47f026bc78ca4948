//! `falcon node --metrics ADDR` scraped while the node runs: the endpoint
//! answers `GET /metrics` with Prometheus text whose counters grow between
//! scrapes, and Prometheus' own `promtool check metrics` (Debian's
//! `prometheus`, installed by `scripts/setup.sh`) finds no error and no
//! lint warning in it.

use std::process::{Command, Stdio};
use std::time::Duration;

mod common;
use common::metrics::{promtool, scrape};
use common::{free_tcp, free_udp, BIN};

fn value(text: &str, sample: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(sample)?.strip_prefix(' '))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{sample} in\n{text}"))
}

#[test]
fn the_metrics_endpoint_grows_and_passes_promtool() {
    let (a, b) = (free_udp().to_string(), free_udp().to_string());
    let control = free_tcp().to_string();
    let (metrics_t, metrics_i) = (free_tcp().to_string(), free_tcp().to_string());
    let node = |role: &str, bind: &str, peer: &str, core: &str, metrics: &str| {
        let mut c = Command::new(BIN);
        c.args([
            "node",
            "--role",
            role,
            "--bind",
            bind,
            "--peer",
            peer,
            "--control",
            &control,
            "--core",
            core,
            "--metrics",
            metrics,
            "--quiet",
            "--json",
        ]);
        if role == "initiator" {
            c.args(["--workload", "bulk", "--seconds", "3"]);
        } else {
            c.args(["--seconds", "30"]);
        }
        c.stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let target = node("target", &a, &b, "1", &metrics_t);
    std::thread::sleep(Duration::from_millis(300));
    let initiator = node("initiator", &b, &a, "0", &metrics_i);
    let first = scrape(&metrics_i, Duration::from_secs(10), "");
    std::thread::sleep(Duration::from_millis(1500));
    let later = scrape(&metrics_i, Duration::from_secs(5), "");
    let target_text = scrape(&metrics_t, Duration::from_secs(5), "");
    let (i, t) = (
        initiator.wait_with_output().unwrap(),
        target.wait_with_output().unwrap(),
    );
    assert!(i.status.success(), "{}", String::from_utf8_lossy(&i.stderr));
    assert!(t.status.success(), "{}", String::from_utf8_lossy(&t.stderr));

    assert!(first.contains("falcon_node_info{role=\"initiator\",port=\"udp\",psp=\"on\"} 1"));
    let tx = "falcon_tx_frames_total";
    assert!(
        value(&later, tx) > value(&first, tx),
        "{first}\n---\n{later}"
    );
    assert!(value(&later, "falcon_payload_bytes_total{kind=\"push\"}") > 0);
    assert!(later.contains("falcon_op_latency_seconds{quantile=\"0.99\"}"));
    assert!(target_text.contains("falcon_drops_total{reason=\"not_udp\"} 0"));

    for text in [&later, &target_text] {
        promtool(text);
    }
}
