//! A peer nobody here wrote: `dpdk-testpmd` (Debian's `dpdk-dev`) on the
//! other end of a `net_memif` link, pinned to core 1 while this process's
//! lcore loop polls core 0 (issue #25, item 8).
//!
//! 1. **A flood of frames that are not Falcon** (`txonly`): every frame
//!    testpmd sent reaches the engine and is dropped by name, none reaches
//!    the ULP, and the counters add up: testpmd's TX-packets = this port's
//!    received frames = the engine's drops.
//! 2. **Its own frames reflected** (`macswap`: the Ethernet addresses
//!    swapped, the IP header untouched): an initiator's Push Data comes
//!    back addressed to the peer's IP, and is dropped as not addressed to
//!    this node.
//! 3. **Its own frames reflected unchanged** (`io`) on a connection whose
//!    peer shares this node's addresses: the frames pass the address
//!    checks and fail PSP (sealed under the peer's key, not ours), dropped
//!    as unauthenticated.
//!
//! In 2 and 3, testpmd's RX-packets = what this port sent, its
//! TX-packets = what this port received = the engine's drops, and every
//! transaction the ULP handed over completes (in error, once the
//! connection is closed): none is lost silently.
//!
//! testpmd runs interactively over a pipe: `start`, then `stop` (which
//! prints its counters while the link is still up, so this side drains
//! every frame before it quits), then `quit`.
#![cfg(feature = "dpdk")]

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use falcon_core::api::*;
use falcon_dpdk::clock::TscClock;
use falcon_dpdk::ethdev::{EthPort, PortConfig, PortStats};
use falcon_dpdk::mbuf::Mbuf;
use falcon_dpdk::mempool::Mempool;
use falcon_dpdk::port::DpdkPort;

mod common;
use common::{engine_config, push_bytes};

/// memif's default buffer is 2 KiB: frames stay below it.
const DATA_ROOM: u16 = 128 + 2048;
const MAX_FRAME: usize = 2048;

#[test]
fn testpmd_floods_and_reflects_and_every_frame_is_dropped_by_name() {
    let socket = std::env::temp_dir().join(format!("falcon-testpmd-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&socket);
    let vdev = format!("--vdev=net_memif0,role=server,socket={}", socket.display());
    let eal = common::eal_with("testpmd", "0", &[&vdev]);
    let pool: &'static Mempool = Box::leak(Box::new(
        Mempool::new(eal, "tpmd_pool", 8191, 256, DATA_ROOM).unwrap(),
    ));
    let id = EthPort::id_by_name(eal, "net_memif0").unwrap();
    let eth = EthPort::start(eal, id, PortConfig::default(), pool).unwrap();
    let mut port = Some(DpdkPort::new(eth, 0, pool, MAX_FRAME));
    let clock = TscClock::new(eal);

    // 1. A flood of frames that are not Falcon.
    {
        let (engine, _) = engines(clock, false);
        let lcore = Lcore::new(engine, port.take().unwrap(), clock);
        let mut ulp = Passive::default();
        let (lcore, before, after, peer) =
            run_with_testpmd(&socket, "txonly", lcore, &mut ulp, |_| {}, |_| {});
        let received = after.rx_packets - before.rx_packets;
        let drops = lcore.engine.stats().drops;
        assert!(received > 10_000, "a flood, not a trickle: {received}");
        assert_eq!(
            peer.tx_packets, received,
            "testpmd sent = this port received"
        );
        assert_eq!(drops.total(), received, "every frame dropped: {drops:?}");
        // testpmd's txonly frames go to its default peer address
        // 02:00:00:00:00:00, not this node's 02:00:00:00:00:01.
        let by_name: Vec<_> = drops.iter().filter(|&(_, n)| n > 0).collect();
        assert_eq!(by_name, [("destination_mac_mismatch", received)]);
        assert_eq!(ulp.requests, 0);
        port = Some(lcore.port);
    }

    // 2. Its own frames, Ethernet addresses swapped.
    // 3. Its own frames unchanged, on a connection to this node's address.
    for (mode, self_addressed, reason) in [
        ("macswap", false, "destination_ip_mismatch"),
        ("io", true, "psp_"),
    ] {
        let (engine, handle) = engines(clock, self_addressed);
        let lcore = Lcore::new(engine, port.take().unwrap(), clock);
        let mut ulp = Pusher::new(handle, 64);
        let (mut lcore, before, after, peer) = run_with_testpmd(
            &socket,
            mode,
            lcore,
            &mut ulp,
            |u| u.active = true,
            |lc| {
                // Stop sending before testpmd stops: close the connection.
                let now = lc.clock.now();
                lc.engine.close(now, handle);
            },
        );
        let sent = after.tx_packets - before.tx_packets;
        let received = after.rx_packets - before.rx_packets;
        let drops = lcore.engine.stats().drops;
        assert!(sent > 0, "{mode}: Push Data sent");
        assert_eq!(
            peer.rx_packets, sent,
            "{mode}: testpmd received what was sent"
        );
        assert_eq!(
            peer.tx_packets, received,
            "{mode}: testpmd sent back = received"
        );
        assert_eq!(
            drops.total(),
            received,
            "{mode}: every frame dropped: {drops:?}"
        );
        let named: u64 = drops
            .iter()
            .filter(|(name, _)| name.starts_with(reason))
            .map(|(_, n)| n)
            .sum();
        assert_eq!(named, received, "{mode}: dropped as {reason}*: {drops:?}");
        // Nothing handed over is lost: every push the engine took
        // completed, in error; the rest are still the ULP's.
        lcore.turn(&mut ulp);
        assert!(ulp.submitted > 0, "{mode}");
        assert_eq!(ulp.submitted + ulp.backlog.len() as u64, 64, "{mode}");
        assert_eq!(ulp.completed_ok, 0, "{mode}");
        assert_eq!(
            ulp.completed_in_error, ulp.submitted,
            "{mode}: {:?}",
            ulp.statuses
        );
        port = Some(lcore.port);
    }

    drop(port);
    let _ = std::fs::remove_file(&socket);
    let _ = std::fs::remove_dir_all(eal.runtime_dir());
}

/// The engine under test (side 1, PSP on) and, when there is a peer, the
/// connection to it: a second engine (side 2, never run) is set up as the
/// peer, so the frames are sealed under its key. `self_addressed`: the
/// peer has this node's MAC and IP addresses.
fn engines(mut clock: TscClock, self_addressed: bool) -> (Engine<Mbuf>, ConnectionHandle) {
    let now = clock.now();
    let mut ours: Engine<Mbuf> = Engine::new(engine_config(1), now).unwrap();
    let mut peer_config = engine_config(2);
    if self_addressed {
        let mine = engine_config(1);
        peer_config.local_ip = mine.local_ip;
        peer_config.local_mac = mine.local_mac;
    }
    let mut peer: Engine<Mbuf> = Engine::new(peer_config, now).unwrap();
    let (handle, _) = connect(now, &mut ours, &mut peer, &PairSpec::default()).unwrap();
    (ours, handle)
}

/// Runs `lcore` on this thread while testpmd (`mode`) runs on core 1:
/// started (then `on_start` called on the ULP: nothing is sent before
/// testpmd forwards), left to run for a while, `before_stop` called on the
/// lcore,
/// the loop drained, testpmd stopped (its counters read), the loop
/// drained again, testpmd quit. Returns the lcore, this port's counters
/// before and after, and testpmd's accumulated counters.
fn run_with_testpmd<U: Ulp<Mbuf, Vec<u8>>>(
    socket: &std::path::Path,
    mode: &str,
    mut lcore: Lcore<DpdkPort, TscClock>,
    ulp: &mut U,
    on_start: impl FnOnce(&mut U),
    before_stop: impl FnOnce(&mut Lcore<DpdkPort, TscClock>),
) -> (
    Lcore<DpdkPort, TscClock>,
    PortStats,
    PortStats,
    PeerCounters,
) {
    let prefix = format!("--file-prefix=falcon-testpmd-peer-{}", std::process::id());
    let vdev = format!("--vdev=net_memif0,role=client,socket={}", socket.display());
    // Line-buffered: testpmd prints with stdio, which a pipe would hold
    // back until it exits.
    let mut child = Command::new("stdbuf")
        .args([
            "-oL",
            "dpdk-testpmd",
            "--no-huge",
            "-m",
            "512",
            "--no-pci",
            "--no-telemetry",
            &prefix,
            "--lcores",
            "0@1,1@1",
            &vdev,
            "--",
            "-i",
            "--total-num-mbufs=16384",
            // Frames sent the moment forwarding starts are forwarded and
            // counted, not flushed.
            "--no-flush-rx",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("dpdk-testpmd (Debian's dpdk-dev; scripts/setup.sh installs it)");
    let output = Arc::new(Mutex::new(String::new()));
    let reader = {
        let stdout = child.stdout.take().unwrap();
        let output = Arc::clone(&output);
        // Raw reads: the prompt ends no line.
        std::thread::spawn(move || {
            let mut stdout = stdout;
            let mut buf = [0u8; 4096];
            while let Ok(n) = stdout.read(&mut buf) {
                if n == 0 {
                    break;
                }
                output
                    .lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        })
    };
    let mut stdin = child.stdin.take().unwrap();
    let until = |lcore: &mut Lcore<DpdkPort, TscClock>, ulp: &mut U, d: Duration| {
        let end = Instant::now() + d;
        while Instant::now() < end {
            lcore.turn(ulp);
        }
    };
    let linked = |output: &Mutex<String>| output.lock().unwrap().contains("testpmd>");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !linked(&output) {
        assert!(Instant::now() < deadline, "testpmd did not come up");
        until(&mut lcore, ulp, Duration::from_millis(10));
    }
    // memif reports no counters while its link is down: read them up.
    let before = lcore.port.eth().stats().unwrap();
    writeln!(stdin, "set fwd {mode}\nstart").unwrap();
    while !output
        .lock()
        .unwrap()
        .contains("packet forwarding - ports=")
    {
        assert!(Instant::now() < deadline, "testpmd did not start");
        until(&mut lcore, ulp, Duration::from_millis(10));
    }
    on_start(ulp);
    until(&mut lcore, ulp, Duration::from_millis(1500));
    before_stop(&mut lcore);
    until(&mut lcore, ulp, Duration::from_millis(300));
    writeln!(stdin, "stop").unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !output
        .lock()
        .unwrap()
        .contains("Accumulated forward statistics")
    {
        assert!(
            Instant::now() < deadline,
            "testpmd did not stop: {}",
            output.lock().unwrap()
        );
        until(&mut lcore, ulp, Duration::from_millis(10));
    }
    // The link is still up: what testpmd sent last is drained here.
    until(&mut lcore, ulp, Duration::from_millis(300));
    let after = lcore.port.eth().stats().unwrap();
    writeln!(stdin, "quit").unwrap();
    drop(stdin);
    let status = child.wait().unwrap();
    reader.join().unwrap();
    assert!(status.success(), "testpmd: {status}");
    let text = output.lock().unwrap().clone();
    let peer = PeerCounters::parse(&text);
    (lcore, before, after, peer)
}

/// testpmd's accumulated forward statistics.
#[derive(Debug)]
struct PeerCounters {
    rx_packets: u64,
    tx_packets: u64,
}

impl PeerCounters {
    fn parse(text: &str) -> PeerCounters {
        let section = &text[text
            .find("Accumulated forward statistics")
            .unwrap_or_else(|| panic!("no statistics in: {text}"))..];
        let field = |name: &str| -> u64 {
            let at = section
                .find(name)
                .unwrap_or_else(|| panic!("{name} in {section}"));
            section[at + name.len()..]
                .split_whitespace()
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("{name} in {section}"))
        };
        PeerCounters {
            rx_packets: field("RX-packets:"),
            tx_packets: field("TX-packets:"),
        }
    }
}

/// A ULP that submits nothing and counts what reaches it.
#[derive(Default)]
struct Passive {
    requests: u64,
}

impl Ulp<Mbuf, Vec<u8>> for Passive {
    fn submit(&mut self, _now: Timestamp, _engine: &mut Engine<Mbuf>) {}

    fn on_event(&mut self, _now: Timestamp, engine: &mut Engine<Mbuf>, event: UlpEvent<Mbuf>) {
        if let UlpEvent::Request(r) = event {
            self.requests += 1;
            engine.release(r.payload);
        }
    }
}

/// Submits `total` pushes of 1000 bytes once active and counts
/// completions by status.
struct Pusher {
    active: bool,
    connection: ConnectionHandle,
    backlog: VecDeque<Transaction<Vec<u8>>>,
    submitted: u64,
    completed_ok: u64,
    completed_in_error: u64,
    statuses: Vec<CompletionStatus>,
}

impl Pusher {
    fn new(connection: ConnectionHandle, total: u64) -> Pusher {
        Pusher {
            active: false,
            connection,
            backlog: (0..total)
                .map(|tag| Transaction::push(tag, push_bytes(1000)))
                .collect(),
            submitted: 0,
            completed_ok: 0,
            completed_in_error: 0,
            statuses: Vec::new(),
        }
    }
}

impl Ulp<Mbuf, Vec<u8>> for Pusher {
    fn submit(&mut self, now: Timestamp, engine: &mut Engine<Mbuf>) {
        if !self.active {
            return;
        }
        while let Some(t) = self.backlog.pop_front() {
            match engine.submit(now, self.connection, t) {
                Ok(_) => self.submitted += 1,
                Err(rejected) => {
                    self.backlog.push_front(rejected.returned);
                    break;
                }
            }
        }
    }

    fn on_event(&mut self, _now: Timestamp, engine: &mut Engine<Mbuf>, event: UlpEvent<Mbuf>) {
        if let UlpEvent::Completion(c) = event {
            if c.status == CompletionStatus::Ack {
                self.completed_ok += 1;
            } else {
                self.completed_in_error += 1;
                self.statuses.push(c.status);
            }
            engine.release(c.data);
        }
    }
}
