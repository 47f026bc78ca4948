//! Two engines, PSP on, over two real ethdev ports wired ring to ring
//! (`rte_eth_from_rings`), their frames in mbufs from one mempool, each
//! driven by the lcore loop (`falcon_core::lcore::Lcore`) on the TSC clock:
//! pushes and pulls of many sizes complete, every byte arrives as sent,
//! and every mbuf goes back to the pool. One test binary, one process, one
//! EAL.
#![cfg(feature = "dpdk")]

use std::collections::HashMap;
use std::time::{Duration, Instant};

use falcon_core::api::*;
use falcon_dpdk::clock::TscClock;
use falcon_dpdk::ethdev::{EthPort, PortConfig};
use falcon_dpdk::mbuf::Mbuf;
use falcon_dpdk::mempool::Mempool;
use falcon_dpdk::port::DpdkPort;

mod common;
use common::{backlog, backlog_push_bytes, engine_config, Initiator, Target, DATA_ROOM, MAX_FRAME};

#[test]
fn pushes_and_pulls_complete_over_ring_ports_with_every_byte_and_mbuf_accounted() {
    let eal = common::eal("pair", "0");
    let pool: &'static Mempool = Box::leak(Box::new(
        Mempool::new(eal, "pair_pool", 8191, 64, DATA_ROOM).unwrap(),
    ));
    let (ida, idb) = EthPort::ring_pair(eal, "net_ring_a", "net_ring_b", 1024).unwrap();
    let start_port = |id| {
        let port = EthPort::start(eal, id, PortConfig::default(), pool).unwrap();
        DpdkPort::new(port, 0, pool, MAX_FRAME)
    };
    let (pa, pb) = (start_port(ida), start_port(idb));

    let mut clock = TscClock::new(eal);
    let now = clock.now();
    let mut a: Engine<Mbuf> = Engine::new(engine_config(1), now).unwrap();
    let mut b: Engine<Mbuf> = Engine::new(engine_config(2), now).unwrap();
    let (ca, _cb) = connect(now, &mut a, &mut b, &PairSpec::default()).unwrap();
    // Two lcore loops, turned in turn on this thread, one TSC clock.
    let mut la = Lcore::new(a, pa, clock);
    let mut lb = Lcore::new(b, pb, clock);

    // 300 transactions: pushes of 1..=4000 bytes, pulls of 1..=4000.
    let mut initiator = Initiator {
        connection: ca,
        backlog: backlog(),
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
    let expected_push = backlog_push_bytes();
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
