//! Two engines, PSP on, over two real ethdev ports wired ring to ring
//! (`rte_eth_from_rings`), their frames in mbufs from one mempool, each
//! driven by the lcore loop (`falcon_core::lcore::Lcore`) on the TSC clock:
//! pushes and pulls of many sizes complete, every byte arrives as sent,
//! and every mbuf goes back to the pool. One test binary, one process, one
//! EAL.
#![cfg(feature = "dpdk")]

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use falcon_core::api::*;
use falcon_dpdk::clock::TscClock;
use falcon_dpdk::eal::Eal;
use falcon_dpdk::ethdev::{EthPort, PortConfig};
use falcon_dpdk::mbuf::Mbuf;
use falcon_dpdk::mempool::Mempool;
use falcon_dpdk::port::DpdkPort;
use psp::{MasterKey, MasterKeys};

/// Headroom (DPDK's default) plus the largest frame the test sends.
const DATA_ROOM: u16 = 128 + 4352;
const MAX_FRAME: usize = 4352;

/// The initiator's ULP: submits its backlog, checks each completion (a
/// push's source comes back unchanged, a pull's data is what the target
/// sent for that RSN).
struct Initiator {
    connection: ConnectionHandle,
    backlog: VecDeque<Transaction<Vec<u8>>>,
    pull_lengths: HashMap<u64, usize>,
    done: usize,
    pulled_bytes: usize,
}

impl Ulp<Mbuf, Vec<u8>> for Initiator {
    fn submit(&mut self, now: Timestamp, engine: &mut Engine<Mbuf>) {
        while let Some(t) = self.backlog.pop_front() {
            if let Op::Pull { request_length } = t.op {
                self.pull_lengths.insert(t.tag, usize::from(request_length));
            }
            if let Err(rejected) = engine.submit(now, self.connection, t) {
                self.backlog.push_front(rejected.returned);
                break;
            }
        }
    }

    fn on_event(&mut self, _now: Timestamp, engine: &mut Engine<Mbuf>, event: UlpEvent<Mbuf>) {
        match event {
            UlpEvent::Completion(c) => {
                assert_eq!(c.status, CompletionStatus::Ack, "tag {}", c.tag);
                match c.kind {
                    TransactionKind::Push => {
                        let sent = c.source.expect("the push's source comes back");
                        assert_eq!(sent, push_bytes(sent.len()));
                    }
                    TransactionKind::Pull => {
                        let len = self.pull_lengths[&c.tag];
                        assert_eq!(&*c.data, &pull_bytes(c.rsn, len)[..], "tag {}", c.tag);
                        self.pulled_bytes += len;
                    }
                }
                engine.release(c.data);
                self.done += 1;
            }
            UlpEvent::Xoff { .. } | UlpEvent::Xon { .. } => {}
            other => panic!("{other:?}"),
        }
    }
}

/// The target's ULP: checks every pushed byte, answers pulls.
struct Target {
    pushed_bytes: usize,
}

impl Ulp<Mbuf, Vec<u8>> for Target {
    fn submit(&mut self, _now: Timestamp, _engine: &mut Engine<Mbuf>) {}

    fn on_event(&mut self, now: Timestamp, engine: &mut Engine<Mbuf>, event: UlpEvent<Mbuf>) {
        let UlpEvent::Request(r) = event else {
            panic!("{event:?}");
        };
        match r.kind {
            TransactionKind::Push => {
                assert_eq!(&*r.payload, &push_bytes(r.payload.len())[..]);
                self.pushed_bytes += r.payload.len();
                engine.ulp_ack(now, r.connection, r.rsn).unwrap();
                engine.release(r.payload);
            }
            TransactionKind::Pull => {
                let data = pull_bytes(r.rsn, usize::from(r.request_length));
                engine
                    .submit_pull_data(now, r.connection, r.rsn, UlpHeader::EMPTY, data)
                    .unwrap();
            }
        }
    }
}

/// A push's bytes, known from its length alone (the target checks them).
fn push_bytes(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (len as u8).wrapping_mul(31) ^ i as u8)
        .collect()
}

fn pull_bytes(rsn: Rsn, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (rsn.value() as u8).wrapping_add(i as u8))
        .collect()
}

#[test]
fn pushes_and_pulls_complete_over_ring_ports_with_every_byte_and_mbuf_accounted() {
    let prefix = format!("--file-prefix=falcon-dpdk-pair-{}", std::process::id());
    let eal = Eal::init(&[
        "--no-huge",
        "-m",
        "256",
        "--no-pci",
        "--no-shconf",
        "--no-telemetry",
        &prefix,
        "-l",
        "0",
        "--log-level=lib.eal:error",
    ])
    .expect("EAL up");
    let pool: &'static Mempool = Box::leak(Box::new(
        Mempool::new(eal, "pair_pool", 8191, 64, DATA_ROOM).unwrap(),
    ));
    let (ida, idb) = EthPort::ring_pair(eal, "net_ring_a", "net_ring_b", 1024).unwrap();
    let start_port = |id| {
        let port = EthPort::start(eal, id, PortConfig::default(), pool).unwrap();
        DpdkPort::new(port, 0, pool, MAX_FRAME)
    };
    let (pa, pb) = (start_port(ida), start_port(idb));

    let keys = |k: u8| MasterKeys {
        k0: MasterKey::new([k; 32]),
        k1: MasterKey::new([k ^ 0xFF; 32]),
    };
    let config = |side: u8| EngineConfig {
        local_ip: core::net::IpAddr::V4([10, 0, 0, side].into()),
        local_mac: EthernetAddress([2, 0, 0, 0, 0, side]),
        psp: Some(PspConfig::new(keys(side))),
        ..EngineConfig::default()
    };
    let mut clock = TscClock::new(eal);
    let now = clock.now();
    let mut a: Engine<Mbuf> = Engine::new(config(1), now).unwrap();
    let mut b: Engine<Mbuf> = Engine::new(config(2), now).unwrap();
    let (ca, _cb) = connect(now, &mut a, &mut b, &PairSpec::default()).unwrap();
    // Two lcore loops, turned in turn on this thread, one TSC clock.
    let mut la = Lcore::new(a, pa, clock);
    let mut lb = Lcore::new(b, pb, clock);

    // 300 transactions: pushes of 1..=4000 bytes, pulls of 1..=4000.
    let mut initiator = Initiator {
        connection: ca,
        backlog: (0..300u64)
            .map(|tag| {
                let len = 1 + (tag as usize * 733) % 4000;
                if tag % 3 == 2 {
                    Transaction::pull(tag, len as u16)
                } else {
                    Transaction::push(tag, push_bytes(len))
                }
            })
            .collect(),
        pull_lengths: HashMap::new(),
        done: 0,
        pulled_bytes: 0,
    };
    let mut target = Target { pushed_bytes: 0 };
    let deadline = Instant::now() + Duration::from_secs(20);
    while initiator.done < 300 {
        assert!(
            Instant::now() < deadline,
            "{} of 300 done in time",
            initiator.done
        );
        la.turn(&mut initiator);
        lb.turn(&mut target);
    }
    let (pushed_bytes, pulled_bytes) = (target.pushed_bytes, initiator.pulled_bytes);
    let (a, b) = (&la.engine, &lb.engine);
    let (pa, pb) = (&la.port, &lb.port);
    let expected_push: usize = (0..300u64)
        .filter(|t| t % 3 != 2)
        .map(|t| 1 + (t as usize * 733) % 4000)
        .sum();
    assert_eq!(pushed_bytes, expected_push);
    assert!(pulled_bytes > 0);
    let (sa, sb) = (a.stats(), b.stats());
    // The ring ports lose nothing, but the clock is real: a slow (debug,
    // shared-core) run may retransmit on a timeout, and each spurious copy
    // is dropped at most once by name (a duplicate), never more.
    let drops = sa.drops.total() + sb.drops.total();
    let retransmissions = sa.retransmissions + sb.retransmissions;
    assert!(
        drops <= retransmissions,
        "{drops} drops, {retransmissions} retransmissions: {sa:?} {sb:?}"
    );
    assert_eq!(pa.stats().alloc_failures + pb.stats().alloc_failures, 0);
    let (ea, eb) = (pa.eth().stats().unwrap(), pb.eth().stats().unwrap());
    assert_eq!(ea.tx_packets, eb.rx_packets);
    assert_eq!(eb.tx_packets, ea.rx_packets);
    // Engines and ports gone: every mbuf is back in the pool.
    drop((la, lb));
    assert_eq!(pool.in_use(), 0);
    let _ = std::fs::remove_dir_all(eal.runtime_dir());
}
