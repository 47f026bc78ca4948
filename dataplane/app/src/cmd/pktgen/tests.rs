//! The generator and the reflector end to end, each on its own thread over
//! the in-process loopback with a real control channel on 127.0.0.1: what
//! `falcon pktgen` does over DPDK (tests/pktgen_dpdk.rs), without DPDK.

use std::net::TcpListener;
use std::time::Duration;

use clap::Parser;
use falcon_core::api::{EthernetAddress, FrameBuf, Lcore, SystemClock};
use falcon_core::testing::{Loopback, LoopbackConfig, LoopbackPort};

use super::*;
use crate::cli::{Cli, Command};

impl CountedPort for LoopbackPort {
    fn wire(&self) -> Wire {
        let s = self.stats();
        Wire {
            rx_frames: s.rx_frames,
            tx_frames: s.tx_frames,
            rx_bytes: 0,
            tx_bytes: s.tx_bytes,
        }
    }

    fn dpdk(&self) -> Option<DpdkCounters> {
        None
    }
}

fn args(line: &[&str]) -> PktgenArgs {
    let mut full = vec!["falcon", "pktgen", "--control", "127.0.0.1:9", "--quiet"];
    full.extend_from_slice(line);
    match Cli::try_parse_from(full)
        .expect("a valid command line")
        .command
    {
        Command::Pktgen(a) => a,
        other => panic!("not pktgen: {other:?}"),
    }
}

/// Runs a generator with `generator` flags against a reflector with
/// `reflector` flags; both reports.
fn pair(generator: &[&str], reflector: &[&str]) -> (Result<Report>, Result<Report>) {
    // Each pair polls two threads flat out: one pair at a time on this
    // machine's two cores, or their timers fire while the other pair runs.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut g_line = vec!["--role", "generator"];
    g_line.extend_from_slice(generator);
    let mut r_line = vec!["--role", "reflector", "--seconds", "60"];
    r_line.extend_from_slice(reflector);
    let (g_args, r_args) = (args(&g_line), args(&r_line));
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let control = listener.local_addr().unwrap();
    let (a, b) = Loopback::pair(LoopbackConfig::default());
    let clock = SystemClock::new();
    let max_frame = 4352;
    let mac = |n| EthernetAddress([2, 0, 0, 0, 0, n]);
    let reflector = std::thread::spawn(move || {
        let engine = new_engine(&r_args, mac(2), max_frame, clock.clone().now())?;
        drive(&r_args, Lcore::new(engine, b, clock), mac(2), || {
            Channel::accept(&listener, Duration::from_secs(10))
                .map_err(|e| failed(PktgenRole::Reflector, e))
        })
    });
    let generated = (|| {
        let engine = new_engine(&g_args, mac(1), max_frame, clock.clone().now())?;
        drive(&g_args, Lcore::new(engine, a, clock), mac(1), || {
            Channel::connect(control, Duration::from_secs(10))
                .map_err(|e| failed(PktgenRole::Generator, e))
        })
    })();
    (generated, reflector.join().expect("the reflector thread"))
}

#[test]
fn flat_out_over_several_connections_both_sides_count_every_op() {
    let (g, r) = pair(
        &[
            "--connections",
            "3",
            "--size",
            "64,512,4096",
            "--mix",
            "push-pull:2",
            "--count",
            "3000",
            "--verify",
        ],
        &["--verify"],
    );
    let (g, r) = (g.expect("generator"), r.expect("reflector"));
    assert!(g.ok, "{g:?}");
    assert!(r.ok, "{r:?}");
    assert_eq!(g.ops, 3000);
    assert_eq!((g.pushes, g.pulls), (2000, 1000));
    // Every size in turn: 1000 of each, pushes and pulls alike.
    assert_eq!(g.push_bytes + g.pull_bytes, 1000 * (64 + 512 + 4096));
    assert_eq!((r.pushes, r.pulls), (g.pushes, g.pulls));
    assert_eq!((r.push_bytes, r.pull_bytes), (g.push_bytes, g.pull_bytes));
    // Each side checked what it received.
    assert_eq!(r.verified_bytes, r.push_bytes);
    assert_eq!(g.verified_bytes, g.pull_bytes);
    assert_eq!(r.connections, 3);
    assert_eq!(g.connections, 3);
    assert_eq!(g.latency_samples, 2000);
    assert!(
        g.p50_us > 0.0 && g.p50_us <= g.p99_us && g.p99_us <= g.max_us,
        "{g:?}"
    );
    assert!(g.tx_frames >= 3000 && r.rx_frames >= 3000, "{g:?}\n{r:?}");
    assert!(g.peer_report.is_some());
}

#[test]
fn a_rated_generator_keeps_its_rate() {
    // 20 000 transactions a second for 0.6 s: 12 000, far below what the
    // pair does flat out even in a debug build.
    let (g, r) = pair(
        &["--size", "256", "--rate-mpps", "0.02", "--seconds", "0.6"],
        &[],
    );
    let (g, r) = (g.expect("generator"), r.expect("reflector"));
    assert!(g.ok && r.ok, "{g:?}\n{r:?}");
    let ratio = g.achieved_ratio.expect("a configured rate");
    assert!(
        (0.93..=1.02).contains(&ratio),
        "achieved {ratio} of the rate: {g:?}"
    );
    assert_eq!(g.configured_mpps, Some(0.02));
    assert_eq!(r.pushes, g.pushes);
}

#[test]
fn sizes_a_frame_cannot_carry_are_refused() {
    let g = args(&["--role", "generator", "--psp", "off"]);
    let mac = EthernetAddress([2, 0, 0, 0, 0, 1]);
    let engine: Engine<FrameBuf, Pattern> =
        new_engine(&g, mac, 4352, Timestamp::from_micros(1)).unwrap();
    let check = |line: &[&str]| {
        let mut full = vec!["--role", "generator"];
        full.extend_from_slice(line);
        checked_sizes(&args(&full), &engine)
    };
    assert_eq!(
        check(&["--size", "16,4096"]).unwrap(),
        SizeSpec::List(vec![16, 4096])
    );
    assert_eq!(check(&["--imix"]).unwrap(), SizeSpec::imix());
    for bad in ["64-5000", "8", "64,5000"] {
        let e = check(&["--size", bad]).expect_err(bad);
        assert!(e.to_string().contains(&format!("--size {bad}")), "{e}");
    }
    // Refused before the control channel is opened: the reflector is
    // never asked for a connection.
    let e = drive(
        &args(&["--role", "generator", "--size", "8"]),
        {
            let (a, _b) = Loopback::pair(LoopbackConfig::default());
            Lcore::new(
                new_engine(&g, mac, 4352, Timestamp::from_micros(1)).unwrap(),
                a,
                SystemClock::new(),
            )
        },
        mac,
        || panic!("no channel for a bad --size"),
    )
    .expect_err("--size 8");
    assert!(e.to_string().contains("--size 8"), "{e}");
}

#[test]
fn disagreeing_counts_are_failures() {
    let (g, _) = pair(&["--count", "50"], &[]);
    let mut g = g.expect("generator");
    assert!(g.ok);
    let mut theirs = g.peer_report.clone().unwrap();
    compare(&mut g, &theirs);
    assert_eq!(g.failures, 0);
    theirs["pushes"] = serde_json::json!(49);
    compare(&mut g, &theirs);
    assert_eq!(g.failures, 1);
    assert!(
        g.first_failure.as_deref().unwrap().contains("49 pushes"),
        "{:?}",
        g.first_failure
    );
}
