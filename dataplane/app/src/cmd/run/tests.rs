//! `falcon run`'s node logic without DPDK: a node configuration's plan,
//! its connections set up on two shards of one node, each shard's loop on
//! its own thread over the in-process loopback, stopped and drained as the
//! main lcore does, and the report.

use std::cell::Cell;
use std::path::Path;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use falcon_core::api::{
    Clock, Engine, EngineConfig, EthernetAddress, Lcore, Node, NodeConfig, NodeShard, PspConfig,
    SystemClock, Timestamp,
};
use falcon_core::testing::{Loopback, LoopbackConfig, LoopbackPort};
use psp::{MasterKey, MasterKeys, Version};

use super::connect;
use super::report::{End, NodeInfo, Reporter};
use super::shard::{drive, Control, Driver, PortCounters, RunPort};
use crate::cmd::node::workload::Pattern;
use crate::democfg::Origin;
use crate::runcfg;

impl RunPort for LoopbackPort {
    fn counters(&self) -> PortCounters {
        PortCounters::default()
    }
}

/// The node both tests run: two shards on one port (the port is not
/// started; the shards run over the in-process loopback).
const NODE: &str = r#"
[eal]
args = ["--vdev=net_ring0"]

[node]
ip = "10.0.0.1"

[port]
device = "net_ring0"

[lcores]
main = 0
datapath = [0, 0]
"#;

/// The rest of the first test's configuration.
const CONFIG: &str = r#"
# Shared cores: a thread preempted for a scheduler slice must not look
# like loss (as configs/run-loopback.toml).
[delivery]
initial_rto_us = 10000

# Nor like congestion: a frame waits in the loopback while the other
# lcore is off its CPU, and the wait counts as fabric delay (OCP Falcon 0.9
# §10.1 assumes no queueing between the wire and Falcon on receive). Two
# lcores time-sliced on one CPU measure round trips of ~7 ms: under a
# 200 µs target fcwnd falls to its floor (0.0098, packets paced 33.5 ms
# apart) and the node does ~440 ops in 2 s. The target is a scheduler
# slice's worth (10 ms).
[rue.swift]
fabric_base_delay = 76294
min_retransmit_timeout = 76294

[[connections]]
peer = "self"
count = 3
role = "initiator"
workload = "verify"
transactions = 200
size = 3000
inflight = 8

[[connections]]
peer = "self"
count = 2
role = "initiator"
workload = "bulk"
size = 512
inflight = 4
ordering = "ordered"
"#;

#[test]
fn a_two_shard_node_serves_its_own_connections_and_drains_on_stop() {
    let path = Path::new("node.toml");
    let text = format!("{NODE}{CONFIG}");
    let config = runcfg::parse(path, &text).expect("parses");
    let plan = runcfg::check::plan(&config, &Origin::file(path, &text)).expect("checks");
    assert_eq!(plan.connections.len(), 5);
    let node = Node::new(NodeConfig {
        shards: 2,
        psp: Some(PspConfig::new(MasterKeys {
            k0: MasterKey::new([3; 32]),
            k1: MasterKey::new([4; 32]),
        })),
        ..NodeConfig::default()
    })
    .expect("node");
    let mut clock = SystemClock::new();
    let now = clock.now();
    let mac = EthernetAddress([2, 0, 0, 0, 0, 1]);
    let mut engines: Vec<Engine<_, Pattern>> = (0..2)
        .map(|shard| {
            Engine::new(
                EngineConfig {
                    local_ip: plan.ip,
                    local_mac: mac,
                    node: Some(NodeShard {
                        node: Arc::clone(&node),
                        shard,
                    }),
                    rue: plan.rue.clone(),
                    delivery: plan.delivery.clone(),
                    ..EngineConfig::default()
                },
                now,
            )
            .expect("engine")
        })
        .collect();
    let wiring = connect::set_up(
        now,
        &plan,
        &mut engines,
        node.steering(),
        mac,
        Version::Aes128Gcm,
    )
    .expect("set up");
    // Each connection's two ends on different shards: both have five.
    assert_eq!(wiring.ulps[0].len(), 5);
    assert_eq!(wiring.ulps[1].len(), 5);
    // Shard 0 on one end of the loopback, shard 1 on the other: every
    // frame goes from one shard's port to the other's.
    let (pa, pb) = Loopback::pair(LoopbackConfig::default());
    let stop = Arc::new(AtomicBool::new(false));
    let control = Control::new(
        Arc::clone(&stop),
        Duration::from_secs(5),
        Duration::from_millis(100),
        2,
    );
    let (tx, rx) = std::sync::mpsc::channel();
    let mut threads = Vec::new();
    for (shard, ((engine, port), mut ulp)) in engines
        .into_iter()
        .zip([pa, pb])
        .zip(wiring.ulps)
        .enumerate()
    {
        let (control, tx) = (control.clone(), tx.clone());
        threads.push(std::thread::spawn(move || {
            let mut lcore = Lcore::new(engine, port, clock);
            drive(shard as u16, &mut lcore, &mut ulp, &control, |s| {
                let _ = tx.send(s);
            });
        }));
    }
    drop(tx);
    let mut reporter = Reporter::new(vec![0, 0]);
    let deadline = Instant::now() + Duration::from_secs(60);
    // The verify connections end on their own (600 transactions take
    // milliseconds); the bulk ones run until stopped.
    let started = Instant::now();
    while !reporter.all_last() {
        assert!(Instant::now() < deadline, "the node stops in time");
        if let Ok(s) = rx.recv_timeout(Duration::from_millis(100)) {
            reporter.take(s);
            let lines = reporter.lines(None, None, true);
            assert!(
                (2..=3).contains(&lines.len()),
                "the node's line and one per lcore that reported: {lines:?}"
            );
        }
        if started.elapsed() > Duration::from_secs(2) {
            stop.store(true, Ordering::Relaxed);
        }
    }
    for t in threads {
        t.join().expect("lcore thread");
    }
    let report = reporter.report(&info(), None, end());
    assert!(report.ok, "{report:#?}");
    assert_eq!(report.failures, 0);
    assert_eq!(report.undrained, 0);
    assert_eq!(report.connections, 10, "both ends of five connections");
    // Every initiator transaction was served by a target end and checked.
    let initiated = report.per_lcore.iter().map(|l| l.transactions).sum::<u64>();
    assert_eq!(initiated, report.transactions);
    // Every verify transaction is an op; bulk pushes came beside them.
    assert!(
        report.ops > 600,
        "verify ops and some bulk ops: {}",
        report.ops
    );
    assert!(report.pull_bytes > 0 && report.served_pull_bytes == report.pull_bytes);
    assert!(report.verified_bytes > 0);
    assert!(report.latency_p50_us > 0.0);
}

/// One rr-pull connection: its initiator end on shard 0, its target end
/// on shard 1 (which has no initiator of its own).
const RR_PULL: &str = r#"
[delivery]
initial_rto_us = 10000

[rue]
algorithm = "off"

[[connections]]
peer = "self"
role = "initiator"
workload = "rr-pull"
size = 512
inflight = 4
"#;

/// A clock the test moves.
#[derive(Clone)]
struct VirtualClock(Rc<Cell<Timestamp>>);

impl Clock for VirtualClock {
    fn now(&mut self) -> Timestamp {
        self.0.get()
    }
}

/// The stop finds requests of shard 0 on their way to shard 1, whose own
/// initiators (none) have drained at once. Shard 1 must keep turning until
/// shard 0's have drained too: its target end owes them their Pull Data
/// and ACKs. In virtual time, both lcores on one thread: deterministic.
#[test]
fn every_lcore_serves_its_targets_until_the_whole_node_has_drained() {
    let path = Path::new("node.toml");
    let text = format!("{NODE}{RR_PULL}");
    let config = runcfg::parse(path, &text).expect("parses");
    let plan = runcfg::check::plan(&config, &Origin::file(path, &text)).expect("checks");
    let node = Node::new(NodeConfig {
        shards: 2,
        ..NodeConfig::default()
    })
    .expect("node");
    let time = Rc::new(Cell::new(Timestamp::from_nanos(1_000_000_000)));
    let now = time.get();
    let mac = EthernetAddress([2, 0, 0, 0, 0, 1]);
    let mut engines: Vec<Engine<_, Pattern>> = (0..2)
        .map(|shard| {
            let config = EngineConfig {
                local_ip: plan.ip,
                local_mac: mac,
                node: Some(NodeShard {
                    node: Arc::clone(&node),
                    shard,
                }),
                rue: plan.rue.clone(),
                delivery: plan.delivery.clone(),
                ..EngineConfig::default()
            };
            Engine::new(config, now).expect("engine")
        })
        .collect();
    let wiring = connect::set_up(
        now,
        &plan,
        &mut engines,
        node.steering(),
        mac,
        Version::Aes128Gcm,
    )
    .expect("set up");
    let mut ulps = wiring.ulps;
    assert_eq!(ulps[0].counts().initiators, 1);
    assert_eq!(ulps[1].counts().initiators, 0);
    // Frames take 1 ms from one lcore to the other (a long path, or a
    // queue): at the stop, a millisecond of requests is on its way.
    let (pa, pb) = Loopback::pair(LoopbackConfig {
        one_way_delay: Duration::from_millis(1),
        ..LoopbackConfig::default()
    });
    let clock = VirtualClock(Rc::clone(&time));
    let mut lcores = vec![
        Lcore::new(engines.remove(0), pa, clock.clone()),
        Lcore::new(engines.remove(0), pb, clock),
    ];
    let stop = Arc::new(AtomicBool::new(false));
    let control = Control::new(
        Arc::clone(&stop),
        Duration::from_millis(500),
        Duration::from_secs(10),
        2,
    );
    let mut drivers: Vec<Option<Driver>> = lcores
        .iter_mut()
        .enumerate()
        .map(|(shard, lcore)| Some(Driver::new(shard as u16, lcore, &control)))
        .collect();
    let step = Duration::from_micros(1);
    let stop_at = now.saturating_add(Duration::from_millis(20));
    let give_up = now.saturating_add(Duration::from_secs(2));
    while drivers.iter().any(Option::is_some) {
        assert!(time.get() < give_up, "both lcores stop within the drain");
        if time.get() >= stop_at {
            stop.store(true, Ordering::Relaxed);
        }
        for (shard, driver) in drivers.iter_mut().enumerate() {
            let Some(d) = driver else { continue };
            if !d.turn(&mut lcores[shard], &mut ulps[shard], &mut |_| {}) {
                if let Some(d) = driver.take() {
                    d.finish(&mut lcores[shard], &mut ulps[shard], |_| {});
                }
            }
        }
        time.set(time.get().saturating_add(step));
    }
    let initiator = ulps[0].counts();
    assert!(initiator.ops > 0, "{initiator:?}");
    assert_eq!(initiator.failures, 0, "{initiator:?}");
    assert_eq!(ulps[0].outstanding(), 0, "every transaction completed");
    assert_eq!(ulps[1].counts().served_pull_bytes, initiator.pull_bytes);
    for lcore in &lcores {
        let stats = lcore.engine.stats();
        assert_eq!(stats.retransmissions, 0, "{stats:?}");
        assert_eq!(stats.transactions.timeouts, 0, "{stats:?}");
    }
}

fn info() -> NodeInfo {
    NodeInfo {
        config: "node.toml".into(),
        device: "loopback".into(),
        driver: "in-process".into(),
        psp: true,
        rue: "inline",
    }
}

fn end() -> End {
    End {
        seconds: 1.0,
        stopped_by: "test",
        peers_ok: true,
    }
}
