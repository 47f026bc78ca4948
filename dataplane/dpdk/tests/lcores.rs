//! Work on an EAL worker lcore: a closure's value and a closure's panic
//! brought back, then an initiator engine's loop on lcore 1 and its
//! target's on the main lcore at the same time, over two ring ports. One
//! test binary, one process, one EAL with two lcores.
#![cfg(feature = "dpdk")]

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use falcon_core::api::*;
use falcon_dpdk::clock::TscClock;
use falcon_dpdk::ethdev::{EthPort, PortConfig};
use falcon_dpdk::lcore::{current, launch, workers};
use falcon_dpdk::mbuf::Mbuf;
use falcon_dpdk::mempool::Mempool;
use falcon_dpdk::port::DpdkPort;

mod common;
use common::{
    backlog, backlog_push_bytes, engine_config, Drain, Initiator, Target, DATA_ROOM, MAX_FRAME,
};

#[test]
fn closures_and_an_engine_loop_run_on_a_worker_lcore_beside_the_main_one() {
    let eal = common::eal("lcores", "0-1");
    assert_eq!(current(), 0, "the test runs on the main lcore");
    let lcores = workers(eal);
    assert_eq!(lcores, [1]);
    // A value computed on the worker, which knows it is lcore 1.
    let job = launch(eal, 1, || (current(), (1..=100u64).sum::<u64>())).unwrap();
    assert_eq!(job.lcore(), 1);
    assert_eq!(job.wait().unwrap(), (1, 5050));
    // A panic is caught there and handed back, and the lcore is usable
    // again.
    let job = launch(eal, 1, || -> u32 { panic!("on purpose") }).unwrap();
    let panic = job.wait().unwrap_err();
    assert_eq!(panic.downcast_ref::<&str>(), Some(&"on purpose"));
    assert_eq!(launch(eal, 1, current).unwrap().wait().unwrap(), 1);
    // Not a worker: DPDK's error, by name.
    let err = launch(eal, 0, || ()).unwrap_err();
    assert_eq!(err.call, "rte_eal_remote_launch");

    // The appliance's shape: the initiator engine's loop on lcore 1, the
    // target's on the main lcore, at the same time, over two ring ports.
    let pool: &'static Mempool = Box::leak(Box::new(
        Mempool::new(eal, "lcores_pool", 8191, 64, DATA_ROOM).unwrap(),
    ));
    let (ida, idb) = EthPort::ring_pair(eal, "lcore_ring_a", "lcore_ring_b", 1024).unwrap();
    let port = |id| {
        DpdkPort::new(
            EthPort::start(eal, id, PortConfig::default(), pool).unwrap(),
            0,
            pool,
            MAX_FRAME,
        )
    };
    let mut clock = TscClock::new(eal);
    let now = clock.now();
    let mut a: Engine<Mbuf> = Engine::new(engine_config(1), now).unwrap();
    let mut b: Engine<Mbuf> = Engine::new(engine_config(2), now).unwrap();
    let (ca, _) = connect(now, &mut a, &mut b, &PairSpec::default()).unwrap();
    let mut la = Lcore::new(a, port(ida), clock);
    let mut lb = Lcore::new(b, port(idb), clock);
    let finished = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&finished);
    let initiator_lcore = launch(eal, 1, move || {
        let mut ulp = Initiator {
            connection: ca,
            backlog: backlog(),
            pull_lengths: HashMap::new(),
            done: 0,
            pulled_bytes: 0,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while ulp.done < 300 && Instant::now() < deadline {
            la.turn(&mut ulp);
        }
        flag.store(true, Ordering::Release);
        (current(), ulp.done, ulp.pulled_bytes, la)
    })
    .unwrap();
    let mut target = Target { pushed_bytes: 0 };
    while !finished.load(Ordering::Acquire) {
        lb.turn(&mut target);
    }
    let (lcore, done, pulled, la) = initiator_lcore.wait().expect("the initiator lcore returns");
    assert_eq!(
        (lcore, done),
        (1, 300),
        "every transaction completed on lcore 1"
    );
    assert!(pulled > 0);
    assert_eq!(target.pushed_bytes, backlog_push_bytes());
    assert!(la.turns > 0 && lb.turns > 0);
    // Frames still in the rings when the loops stopped (the initiator's
    // last ACK, say) are received and freed: both loops turn, on this
    // lcore, until neither has anything to do for a while.
    let (mut la, mut lb) = (la, lb);
    let mut quiet = 0;
    while quiet < 1000 {
        let busy = !la.turn(&mut Drain).is_idle() | !lb.turn(&mut Drain).is_idle();
        quiet = if busy { 0 } else { quiet + 1 };
    }
    drop((la, lb));
    assert_eq!(pool.in_use(), 0, "every mbuf back in the pool");
    let _ = std::fs::remove_dir_all(eal.runtime_dir());
}
