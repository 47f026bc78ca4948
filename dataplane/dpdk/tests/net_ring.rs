//! The wrappers on a real DPDK: an EAL without hugepages or PCI, a
//! `net_ring` vdev (one port whose transmit ring is its receive ring), a
//! mempool, mbufs out and back. One test binary is one process and one
//! EAL, so every check runs in one test.
#![cfg(feature = "dpdk")]

use falcon_core::lcore::Clock;
use falcon_dpdk::clock::TscClock;
use falcon_dpdk::eal::Eal;
use falcon_dpdk::ethdev::{EthPort, PortConfig};
use falcon_dpdk::mempool::Mempool;

fn eal_args() -> Vec<String> {
    vec![
        "--no-huge".into(),
        "-m".into(),
        "128".into(),
        "--no-pci".into(),
        "--no-shconf".into(),
        "--no-telemetry".into(),
        format!("--file-prefix=falcon-dpdk-test-{}", std::process::id()),
        "-l".into(),
        "0".into(),
        "--log-level=lib.eal:error".into(),
        "--vdev=net_ring0".into(),
    ]
}

#[test]
fn frames_go_out_and_come_back_through_a_ring_port_and_every_mbuf_returns() {
    let args = eal_args();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let eal = Eal::init(&args).expect("EAL up");
    // Same arguments: the same EAL; others: refused by name.
    assert!(std::ptr::eq(Eal::init(&args).unwrap(), eal));
    let err = Eal::init(&["--no-huge"]).unwrap_err();
    assert!(err.to_string().contains("once per process"), "{err}");
    assert!(eal.tsc_hz() > 0);
    // The lcore clock: the TSC in nanoseconds, never backwards, in step
    // with the system's clock (a sleep of 20 ms reads as at least that,
    // and not wildly more).
    let mut clock = TscClock::new(eal);
    let (t0, wall) = (clock.now(), std::time::Instant::now());
    std::thread::sleep(std::time::Duration::from_millis(20));
    let (t1, wall) = (clock.now(), wall.elapsed());
    let tsc = t1.saturating_duration_since(t0);
    assert!(
        t1 >= t0 && tsc >= std::time::Duration::from_millis(19),
        "{tsc:?}"
    );
    assert!(
        tsc <= wall + std::time::Duration::from_millis(50),
        "{tsc:?} against {wall:?}"
    );

    let pool: &'static Mempool = Box::leak(Box::new(
        Mempool::new(eal, "test_pool", 4095, 64, 2048 + 128).unwrap(),
    ));
    assert_eq!(pool.in_use(), 0);
    // A second pool of the same name is DPDK's error, named.
    let dup = Mempool::new(eal, "test_pool", 511, 0, 2176).unwrap_err();
    assert_eq!(dup.call, "rte_pktmbuf_pool_create");

    // An mbuf: default headroom, appends and prepends within its room.
    let mut m = pool.alloc().unwrap();
    assert_eq!(
        (m.len(), m.headroom(), m.refcnt(), m.segment_count()),
        (0, 128, 1, 1)
    );
    m.append(60).unwrap().copy_from_slice(&[0xAB; 60]);
    m.prepend(4).unwrap().copy_from_slice(&[1, 2, 3, 4]);
    assert_eq!(m.len(), 64);
    assert_eq!(&m.data()[..5], &[1, 2, 3, 4, 0xAB]);
    assert_eq!(m.headroom(), 124);
    assert!(m.append(m.tailroom() + 1).is_none(), "past the tailroom");
    assert!(m.adj(4) && m.trim(10));
    assert_eq!(m.len(), 50);
    m.data_mut()[0] = 0xCD;
    assert_eq!(m.segments().map(<[u8]>::len).sum::<usize>(), 50);
    drop(m);
    assert_eq!(pool.in_use(), 0, "dropped mbufs go back");

    let id = EthPort::id_by_name(eal, "net_ring0").unwrap();
    assert!(EthPort::id_by_name(eal, "net_nothing9").is_err());
    let mut port = EthPort::start(eal, id, PortConfig::default(), pool).unwrap();

    // 100 frames out, numbered; the ring port hands them back in order.
    let mut out = Vec::new();
    for i in 0..100u8 {
        let mut m = pool.alloc().unwrap();
        let bytes = m.append(64 + usize::from(i)).unwrap();
        bytes.fill(i);
        out.push(m);
    }
    let sent = port.tx_burst(0, &mut out);
    assert_eq!((sent, out.len()), (100, 0));
    let mut back = Vec::new();
    while back.len() < 100 {
        let n = port.rx_burst(0, &mut back, 32);
        assert!(n > 0, "frames lost in the ring: {} back", back.len());
    }
    for (i, m) in back.iter().enumerate() {
        assert_eq!(m.len(), 64 + i);
        assert!(m.data().iter().all(|&b| b == i as u8), "frame {i}");
    }
    let stats = port.stats().unwrap();
    assert_eq!(
        (stats.tx_packets, stats.rx_packets),
        (100, 100),
        "{stats:?}"
    );
    back.clear();
    // The port's receive queue holds none of the pool's mbufs (a ring port
    // does not pre-fill), so all are back.
    assert_eq!(pool.in_use(), 0);
    // A queue the port does not have moves nothing.
    assert_eq!(port.rx_burst(7, &mut back, 32), 0);
    let dir = eal.runtime_dir();
    assert!(
        dir.ends_with(format!("falcon-dpdk-test-{}", std::process::id())),
        "{dir:?}"
    );
    let _ = std::fs::remove_dir_all(dir);
}
