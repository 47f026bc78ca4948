//! The generator and the reflector end to end, each on its own thread over
//! the in-process loopback with a real control channel on 127.0.0.1: what
//! `falcon pktgen` does over DPDK (tests/pktgen_dpdk.rs), without DPDK.

use std::net::TcpListener;
use std::time::Duration;

use clap::Parser;
use falcon_core::api::{EthernetAddress, FrameBuf, Lcore, SystemClock};

use super::generator::{Generator, Plan};
use super::reflector::{self, Reflector};
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
    // Fixed windows: these threads share two cores with the crate's other
    // tests, and Swift would read every preemption as congestion (the
    // DPDK pair in tests/pktgen_dpdk.rs runs Swift on cores of its own).
    let mut full = vec![
        "falcon",
        "pktgen",
        "--control",
        "127.0.0.1:9",
        "--quiet",
        "--cc",
        "off",
    ];
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

/// A clock the test sets: both loops of a virtual-time pair read it.
#[derive(Clone, Default)]
struct HandClock(std::rc::Rc<std::cell::Cell<u64>>);

impl Clock for HandClock {
    fn now(&mut self) -> Timestamp {
        Timestamp::from_nanos(self.0.get())
    }
}

/// A generator and a reflector on one thread over the loopback, on
/// virtual time stepped 1 µs a turn of each for `micros`: the generator's
/// counts and the reflector's, after the generator stops and drains.
fn virtual_pair(line: &[&str], connections: u32, micros: u64) -> (Generator, Reflector) {
    let mut full = vec!["--role", "generator"];
    full.extend_from_slice(line);
    let g_args = args(&full);
    let r_args = args(&["--role", "reflector"]);
    let clock = HandClock::default();
    clock.0.set(1_000_000_000);
    let now = Timestamp::from_nanos(clock.0.get());
    let mac = |n| EthernetAddress([2, 0, 0, 0, 0, n]);
    let mut ge = new_engine::<FrameBuf>(&g_args, mac(1), 4352, now).unwrap();
    let mut re = new_engine::<FrameBuf>(&r_args, mac(2), 4352, now).unwrap();
    let mut handles = Vec::new();
    for i in 0..connections {
        let ours = cm::offer(
            &mut ge,
            &local(PktgenRole::Generator, i, mac(1)),
            Some(cm::initiator_sequence()),
        )
        .unwrap();
        let theirs = cm::offer(&mut re, &local(PktgenRole::Reflector, i, mac(2)), None).unwrap();
        handles.push(cm::add_connection(now, &mut ge, &ours, &theirs).unwrap());
        cm::add_connection(now, &mut re, &theirs, &ours).unwrap();
    }
    let spec = checked_sizes(&g_args, &ge).unwrap();
    let rate = match (g_args.rate_gbps, g_args.rate_mpps) {
        (Some(g), _) => Some(Rate::Gbps(g)),
        (None, m) => m.map(Rate::Mpps),
    };
    let plan = Plan {
        sizes: SizeSource::new(spec.clone(), 1),
        mix: MixSource::new(g_args.mix),
        rate,
        mean_size: spec.mean(),
        inflight: g_args.inflight as usize,
        count: None,
        verify: true,
    };
    let (a, b) = Loopback::pair(LoopbackConfig::default());
    let mut lg = Lcore::new(ge, a, clock.clone());
    let mut lr = Lcore::new(re, b, clock.clone());
    let mut generator = Generator::new(handles, Pattern::new(spec.bounds().1), plan);
    let mut reflector = Reflector::new(Pattern::new(4352), true);
    let mut step = |g: &mut Generator, r: &mut Reflector| {
        clock.0.set(clock.0.get() + 1_000);
        lg.turn(g);
        lr.turn(r);
    };
    for _ in 0..micros {
        step(&mut generator, &mut reflector);
    }
    generator.stop();
    for _ in 0..100_000 {
        if generator.finished() {
            break;
        }
        step(&mut generator, &mut reflector);
    }
    assert!(generator.finished(), "drained");
    (generator, reflector)
}

#[test]
fn a_rated_generator_keeps_its_rate_on_virtual_time() {
    // 1 Mpps for 20 ms over two connections: a transaction each µs, the
    // first at 1 µs.
    let (g, r) = virtual_pair(&["--rate-mpps", "1", "--size", "64"], 2, 20_000);
    assert_eq!(g.released().map(|(n, _)| n), Some(20_000));
    assert_eq!(g.counts.submitted, 20_000);
    assert_eq!(g.counts.pushes, 20_000);
    assert_eq!(r.counts.pushes, 20_000);
    assert_eq!(g.failures.count + r.failures.count, 0);
    // 0.5 Gbit/s of payload over sizes 64, 512, 4096 in turn: 10 Mbit in
    // 20 ms, within one transaction (at most 4096 × 8 bits).
    let (g, r) = virtual_pair(
        &[
            "--rate-gbps",
            "0.5",
            "--size",
            "64,512,4096",
            "--mix",
            "push-pull",
        ],
        3,
        20_000,
    );
    let (_, bits) = g.released().unwrap();
    assert!((bits - 10e6).abs() <= 4096.0 * 8.0, "{bits} bits");
    assert_eq!(g.counts.bytes() as f64 * 8.0, bits);
    assert_eq!(
        r.counts,
        reflector::Counts {
            verified_bytes: r.counts.push_bytes,
            ..r.counts
        }
    );
    assert_eq!(
        (r.counts.pushes, r.counts.pulls),
        (g.counts.pushes, g.counts.pulls)
    );
    assert!(g.counts.pulls > 0 && g.counts.verified_bytes == g.counts.pull_bytes);
    // Flat out the same pair goes far beyond either rate.
    let (g, _) = virtual_pair(&["--size", "64"], 2, 20_000);
    assert!(g.counts.pushes > 40_000, "{:?}", g.counts);
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
