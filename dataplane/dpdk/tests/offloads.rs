//! Device capabilities, offloads and extended counters on real PMDs.
//!
//! - `net_ring` offers no checksum offload and no RSS: a port asking for
//!   everything "where available" gets neither, and its `DpdkPort` says
//!   checksums are the engine's to verify.
//! - `net_tap` verifies IPv4 and UDP checksums on receive. Frames are sent
//!   into the tap's kernel interface from a `net_af_packet` port bound to
//!   it (so they reach the tap PMD as received frames): the right frame
//!   arrives, the one with a wrong IPv4 header checksum and the one with a
//!   wrong UDP checksum are dropped by `DpdkPort`, each counted by name.
//!   Creating a tap interface needs root; without it that part says so
//!   and is skipped.
#![cfg(feature = "dpdk")]

use std::process::Command;
use std::time::{Duration, Instant};

use falcon_core::api::{Port, Timestamp};
use falcon_core::wire::internet_checksum;
use falcon_dpdk::ethdev::{EthPort, Offloads, PortConfig};
use falcon_dpdk::mbuf::Mbuf;
use falcon_dpdk::mempool::Mempool;
use falcon_dpdk::port::DpdkPort;

mod common;

const MARK: &[u8] = b"falcon-offload-test";

#[test]
fn offloads_are_taken_where_the_device_has_them_and_bad_checksums_are_dropped_by_name() {
    let root = std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false);
    let iface = format!("ftap{}", std::process::id() % 100_000);
    let tap = format!("--vdev=net_tap0,iface={iface}");
    let packet = format!("--vdev=net_af_packet0,iface={iface}");
    let extra: Vec<&str> = if root { vec![&tap, &packet] } else { vec![] };
    let eal = common::eal_with("offloads", "0", &extra);
    let pool: &'static Mempool = Box::leak(Box::new(
        Mempool::new(eal, "offload_pool", 4095, 64, 128 + 2048).unwrap(),
    ));

    // net_ring: nothing to take.
    let (a, _b) = EthPort::ring_pair(eal, "off_a", "off_b", 256).unwrap();
    let ring = EthPort::start(eal, a, PortConfig::default(), pool).unwrap();
    assert_eq!(ring.info().driver, "net_ring");
    assert!(!ring.info().has_rx_checksums());
    assert_eq!(ring.offloads(), Offloads::NONE);
    let xstats = ring.xstats().unwrap();
    assert!(
        xstats.iter().any(|(name, _)| name == "rx_good_packets"),
        "{xstats:?}"
    );
    let ring = DpdkPort::new(ring, 0, pool, 2048);
    assert!(!ring.capabilities().rx_checksums_verified);
    drop(ring);

    // Asking for more queues than the device has names the device.
    let (c, _d) = EthPort::ring_pair(eal, "off_c", "off_d", 256).unwrap();
    let too_many = PortConfig {
        rx_queues: 64,
        ..PortConfig::default()
    };
    let e = EthPort::start(eal, c, too_many, pool).unwrap_err();
    assert!(e.to_string().contains("net_ring"), "{e}");

    if !root {
        eprintln!("offloads: not root, the net_tap checksum part is skipped");
        return;
    }
    let tap_id = EthPort::id_by_name(eal, "net_tap0").unwrap();
    let tap = EthPort::start(eal, tap_id, PortConfig::default(), pool).unwrap();
    assert_eq!(tap.info().driver, "net_tap");
    assert!(tap.offloads().rx_checksums, "{:?}", tap.info());
    let mut tap = DpdkPort::new(tap, 0, pool, 2048);
    assert!(tap.capabilities().rx_checksums_verified);
    let packet_id = EthPort::id_by_name(eal, "net_af_packet0").unwrap();
    let mut sender = EthPort::start(eal, packet_id, PortConfig::default(), pool).unwrap();

    // The kernel sends through the interface once it is up (else
    // ENETDOWN); the tap PMD's start leaves that to the administrator.
    let up = Command::new("ip")
        .args(["link", "set", "dev", &iface, "up"])
        .status()
        .expect("ip (iproute2, scripts/setup.sh)");
    assert!(up.success(), "ip link set {iface} up: {up}");
    // The tap PMD takes its interface down and up while starting, and
    // the packet socket bound to it reports that once, failing a burst
    // (ENETDOWN) whose frames it may still send later: prime it with
    // right frames of another payload until one is counted out, then
    // send the three under test once.
    let one = |bytes: &[u8]| {
        let mut m = pool.alloc().unwrap();
        m.append(bytes.len()).unwrap().copy_from_slice(bytes);
        m
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while sender.stats().unwrap().tx_packets == 0 {
        assert!(
            Instant::now() < deadline,
            "af_packet sent nothing: {:?}",
            sender.stats()
        );
        let mut primer = vec![one(&frame(Fault::None, b"primer"))];
        sender.tx_burst(0, &mut primer);
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut frames: Vec<Mbuf> = [Fault::None, Fault::IpChecksum, Fault::UdpChecksum]
        .into_iter()
        .map(|fault| one(&frame(fault, MARK)))
        .collect();
    let sent = sender.stats().unwrap().tx_packets;
    while !frames.is_empty() {
        assert!(Instant::now() < deadline, "af_packet took no frames");
        sender.tx_burst(0, &mut frames);
    }
    let s = sender.stats().unwrap();
    assert_eq!(s.tx_packets, sent + 3, "{s:?}");

    // The kernel adds its own frames on a fresh interface (IPv6 neighbour
    // discovery): only ours are counted.
    let mut ours = Vec::new();
    let mut rx = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline {
        tap.rx_burst(Timestamp::from_nanos(1), &mut rx, 32);
        for m in rx.drain(..) {
            if m.data().ends_with(MARK) {
                ours.push(m.data().to_vec());
            }
        }
        let s = tap.stats();
        if !ours.is_empty() && s.rx_bad_ip_checksum + s.rx_bad_udp_checksum >= 2 {
            break;
        }
    }
    let s = tap.stats();
    assert_eq!(
        ours,
        [frame(Fault::None, MARK)],
        "only the right frame arrives: {s:?}"
    );
    assert_eq!(s.rx_bad_ip_checksum, 1, "{s:?}");
    assert_eq!(s.rx_bad_udp_checksum, 1, "{s:?}");
    let _ = std::fs::remove_dir_all(eal.runtime_dir());
}

#[derive(Clone, Copy)]
enum Fault {
    None,
    IpChecksum,
    UdpChecksum,
}

/// An Ethernet/IPv4/UDP frame to port 1000 carrying `payload`, its
/// checksums right (UDP's computed, not 0) unless `fault` says otherwise.
fn frame(fault: Fault, payload: &[u8]) -> Vec<u8> {
    let (src, dst) = ([10, 9, 0, 1], [10, 9, 0, 2]);
    let udp_len = 8 + payload.len();
    let mut f = Vec::new();
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01, 0x08, 0x00]);
    let total = (20 + udp_len) as u16;
    let mut ip = [
        0x45, 0, 0, 0, 0, 1, 0x40, 0, 64, 17, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    ];
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip[12..16].copy_from_slice(&src);
    ip[16..20].copy_from_slice(&dst);
    let mut ip_sum = internet_checksum(&ip);
    if matches!(fault, Fault::IpChecksum) {
        ip_sum ^= 0x5a5a;
    }
    ip[10..12].copy_from_slice(&ip_sum.to_be_bytes());
    f.extend_from_slice(&ip);
    let mut udp = Vec::new();
    udp.extend_from_slice(&4000u16.to_be_bytes());
    udp.extend_from_slice(&1000u16.to_be_bytes());
    udp.extend_from_slice(&(udp_len as u16).to_be_bytes());
    udp.extend_from_slice(&[0, 0]);
    udp.extend_from_slice(payload);
    // The pseudo-header (RFC 768) then the datagram.
    let mut pseudo = Vec::new();
    pseudo.extend_from_slice(&src);
    pseudo.extend_from_slice(&dst);
    pseudo.extend_from_slice(&[0, 17]);
    pseudo.extend_from_slice(&(udp_len as u16).to_be_bytes());
    pseudo.extend_from_slice(&udp);
    if pseudo.len() % 2 == 1 {
        pseudo.push(0);
    }
    let mut udp_sum = internet_checksum(&pseudo);
    if udp_sum == 0 {
        udp_sum = 0xffff;
    }
    if matches!(fault, Fault::UdpChecksum) {
        udp_sum ^= 0x0f0f;
    }
    udp[6..8].copy_from_slice(&udp_sum.to_be_bytes());
    f.extend_from_slice(&udp);
    f
}
