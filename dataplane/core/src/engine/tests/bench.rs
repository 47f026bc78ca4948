//! A quick release-mode measurement of the loop `falcon bench core` runs
//! (ignored by default: `cargo test --release -p falcon-core -- --ignored
//! --nocapture engine::tests::bench`). Knobs, by environment variable:
//! `PHASES=1` prints ns per transaction for each phase of the loop,
//! `WINDOW=n` caps transactions in flight (default 128), `OFFLOAD=1` skips
//! the IPv4/UDP checksum checks (as with a NIC that verifies them),
//! `TXNS=n` sets the transactions of the `*_profile` runs (for callgrind),
//! `STATS=1` prints frames per transaction each way (how often ACKs go).

use std::time::Instant;

use psp::{MasterKey, MasterKeys, Version};

use crate::engine::{connect, ConnectionHandle, Engine, EngineConfig, PairSpec, PspConfig};
use crate::port::FrameBuf;
use crate::testing::{Loopback, LoopbackConfig};
use crate::time::Timestamp;
use crate::transaction::{Transaction, TransactionKind, UlpEvent};

fn engines(psp: bool) -> (Engine, Engine, ConnectionHandle, ConnectionHandle) {
    let now = Timestamp::from_micros(1);
    let keys = |k| MasterKeys {
        k0: MasterKey::new([k; 32]),
        k1: MasterKey::new([k + 1; 32]),
    };
    let config = |ip: [u8; 4], mac: u8, k: u8| EngineConfig {
        local_ip: core::net::IpAddr::V4(ip.into()),
        local_mac: crate::wire::EthernetAddress([2, 0, 0, 0, 0, mac]),
        psp: psp.then(|| PspConfig::new(keys(k))),
        checksums: if std::env::var_os("OFFLOAD").is_some() {
            crate::wire::ChecksumChecks::OFFLOADED
        } else {
            crate::wire::ChecksumChecks::ALL
        },
        ..EngineConfig::default()
    };
    let mut a = Engine::new(config([10, 0, 0, 1], 1, 1), now).unwrap();
    let mut b = Engine::new(config([10, 0, 0, 2], 2, 3), now).unwrap();
    let (ca, cb) = connect(now, &mut a, &mut b, &PairSpec::default()).unwrap();
    (a, b, ca, cb)
}

/// Pushes of `size` bytes through two engines on one thread; returns
/// (transactions/s, Gbit/s of payload).
fn run(psp: bool, size: usize, transactions: u64) -> (f64, f64) {
    let (mut a, mut b, ca, cb) = engines(psp);
    let (mut pa, mut pb) = Loopback::pair(LoopbackConfig {
        one_way_delay: core::time::Duration::ZERO,
        ..LoopbackConfig::default()
    });
    let mut free: Vec<Vec<u8>> = (0..256).map(|_| vec![0x5A; size]).collect();
    let (mut rx, mut tx): (Vec<FrameBuf>, Vec<FrameBuf>) = (Vec::new(), Vec::new());
    let mut now = Timestamp::from_micros(10);
    let (mut submitted, mut completed) = (0u64, 0u64);
    let window: u64 = std::env::var("WINDOW")
        .ok()
        .and_then(|w| w.parse().ok())
        .unwrap_or(128);
    let start = Instant::now();
    let mut phase = [core::time::Duration::ZERO; 8];
    let mut mark = Instant::now();
    let mut lap = |i: usize, phase: &mut [core::time::Duration; 8]| {
        let t = Instant::now();
        phase[i] += t - mark;
        mark = t;
    };
    while completed < transactions {
        now = now + core::time::Duration::from_nanos(100);
        while submitted < transactions && submitted - completed < window {
            let Some(payload) = free.pop() else { break };
            match a.submit(now, ca, Transaction::push(submitted, payload)) {
                Ok(_) => submitted += 1,
                Err(r) => {
                    if let crate::transaction::Op::Push(payload) = r.returned.op {
                        free.push(payload);
                    }
                    break;
                }
            }
        }
        lap(7, &mut phase);
        for (side, (engine, port, conn)) in [(&mut a, &mut pa, ca), (&mut b, &mut pb, cb)]
            .into_iter()
            .enumerate()
        {
            engine.receive_burst(now, port, &mut rx, 64);
            engine.handle_timeout(now);
            lap(side * 3, &mut phase);
            while let Some(event) = engine.poll_event() {
                match event {
                    UlpEvent::Request(r) => {
                        debug_assert_eq!(r.kind, TransactionKind::Push);
                        let _ = engine.ulp_ack(now, conn, r.rsn);
                        engine.release(r.payload);
                    }
                    UlpEvent::Completion(c) => {
                        completed += 1;
                        free.extend(c.source);
                    }
                    _ => {}
                }
            }
            lap(side * 3 + 1, &mut phase);
            engine.transmit_burst(now, port, &mut tx, usize::MAX);
            lap(side * 3 + 2, &mut phase);
        }
    }
    if std::env::var_os("PHASES").is_some() {
        let names = [
            "a rx", "a ulp", "a tx", "b rx", "b ulp", "b tx", "-", "submit",
        ];
        for (name, d) in names.iter().zip(phase) {
            eprintln!(
                "  {name}: {:.0} ns/txn",
                d.as_nanos() as f64 / transactions as f64
            );
        }
    }
    if std::env::var_os("STATS").is_some() {
        let (sa, sb) = (a.stats(), b.stats());
        eprintln!(
            "  frames a→b {} b→a {} (acks {}), per txn: {:.3} / {:.3}",
            sa.tx_frames,
            sb.tx_frames,
            sb.tx_acks,
            sa.tx_frames as f64 / transactions as f64,
            sb.tx_frames as f64 / transactions as f64
        );
    }
    let secs = start.elapsed().as_secs_f64();
    let rate = transactions as f64 / secs;
    (rate, rate * size as f64 * 8.0 / 1e9)
}

/// One seal plus one open of a push packet of `size` bytes; per second.
fn crypto(size: usize, n: u64) -> f64 {
    let keys = MasterKeys {
        k0: MasterKey::new([9; 32]),
        k1: MasterKey::new([8; 32]),
    };
    let mut db = psp::SaDatabase::new(psp::Backend::Ring, keys, 64);
    let (spi, key) = db.allocate_spi(Version::Aes128Gcm).unwrap();
    let mut sa =
        psp::TxSa::new(psp::Backend::Ring, &key, psp::TxSaConfig::falcon(spi, None)).unwrap();
    let headroom = 42;
    let falcon = 28 + size;
    let mut buf = vec![0u8; headroom + sa.header_len() + falcon + psp::ICV_LEN];
    let start = Instant::now();
    for i in 0..n {
        let len = sa.seal(i + 1, &mut buf, headroom, falcon).unwrap().len();
        let opened = db.open(&mut buf, headroom, len).unwrap();
        std::hint::black_box(opened.payload().len());
    }
    n as f64 / start.elapsed().as_secs_f64()
}

#[test]
#[ignore = "measurement: run in release with --ignored --nocapture"]
fn push_loop_against_crypto_bounds() {
    let crypto64 = crypto(64, 300_000);
    let crypto4k = crypto(4096, 50_000);
    let (push64, _) = run(false, 64, 300_000);
    let (push64_psp, _) = run(true, 64, 300_000);
    let (loop4k, loop4k_gbps) = run(true, 4096, 50_000);
    let crypto4k_gbps = crypto4k * 4096.0 * 8.0 / 1e9;
    eprintln!(
        "crypto64 {:.2} Mops, crypto4k {:.2} Gbit/s",
        crypto64 / 1e6,
        crypto4k_gbps
    );
    eprintln!(
        "push64 {:.2} Mops, push64_psp {:.2} Mops ({:.2} of crypto64)",
        push64 / 1e6,
        push64_psp / 1e6,
        push64_psp / crypto64
    );
    eprintln!(
        "loop4k_psp {:.2} Gbit/s ({:.0}/s, {:.2} of crypto4k)",
        loop4k_gbps,
        loop4k,
        loop4k_gbps / crypto4k_gbps
    );
}

/// Transactions of a profiling run: `TXNS`, else `default`.
fn profile_txns(default: u64) -> u64 {
    std::env::var("TXNS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(default)
}

#[test]
#[ignore = "profiling: the plain 64-byte push loop alone"]
fn push64_plain_profile() {
    let (rate, _) = run(false, 64, profile_txns(1_000_000));
    eprintln!("push64 {:.2} Mops", rate / 1e6);
}

#[test]
#[ignore = "profiling: the 4 KiB PSP push loop alone"]
fn loop4k_psp_profile() {
    let (rate, gbps) = run(true, 4096, profile_txns(200_000));
    eprintln!("loop4k_psp {:.2} Gbit/s ({:.0}/s)", gbps, rate);
}

#[test]
#[ignore = "profiling: the 64-byte PSP push loop alone"]
fn push64_psp_profile() {
    let (rate, _) = run(true, 64, profile_txns(1_000_000));
    eprintln!("push64_psp {:.2} Mops", rate / 1e6);
}
