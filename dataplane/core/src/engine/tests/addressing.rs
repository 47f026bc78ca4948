//! Engines over IPv6, and PSP with virtualization cookies and PCID
//! matching (OCP Falcon 0.9 §9.2.1 "PCID Match Enable", §9.2.2.3
//! `pcidMatches`; spec/psp.md: the VC carries the PCID): set up by hand
//! with `add_connection`, as a connection manager does.

use crate::port::FrameBuf;
use crate::transaction::UlpHeader;
use core::net::{IpAddr, Ipv6Addr};
use core::time::Duration;

use psp::{Header, MasterKey, MasterKeys, RxDrop, SpiGeneration, Version};

use crate::drop::DropReason;
use crate::engine::PspConfig;
use crate::engine::{ConnectionConfig, ConnectionHandle, ConnectionPsp, Engine, EngineConfig};
use crate::ids::ConnectionId;
use crate::testing::pattern;
use crate::time::Timestamp;
use crate::transaction::{CompletionStatus, Payload, Transaction, TransactionKind, UlpEvent};
use crate::wire::frame::parse_with;
use crate::wire::{ChecksumChecks, EthernetAddress};

/// PCIDs of the two ends (each sends the other's in its VC).
const PCID_A: u64 = 0x0A0A_0000_0000_0001;
const PCID_B: u64 = 0x0B0B_0000_0000_0002;

struct Link {
    a: Engine,
    b: Engine,
    ca: ConnectionHandle,
    cb: ConnectionHandle,
    now: Timestamp,
}

fn ip(last: u16) -> IpAddr {
    IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, last))
}

/// Two IPv6 engines with PCID matching on; `b_expects` is the PCID B's
/// connection compares received VCs with (PCID_B when set up right).
fn link(b_expects: u64) -> Link {
    let now = Timestamp::from_micros(1_000);
    let engine = |last: u16, k: u8| {
        let mut psp = PspConfig::new(MasterKeys {
            k0: MasterKey::new([k; 32]),
            k1: MasterKey::new([k ^ 0xFF; 32]),
        });
        psp.globals.pcid_match_enable = true;
        let config = EngineConfig {
            local_ip: ip(last),
            local_mac: EthernetAddress([2, 0, 0, 0, 0, last as u8]),
            psp: Some(psp),
            ..EngineConfig::default()
        };
        Engine::new(config, now).expect("engine")
    };
    let (mut a, mut b) = (engine(1, 1), engine(2, 2));
    let (spi_a, key_to_a) = a.allocate_spi(Version::Aes256Gcm).unwrap();
    let (spi_b, key_to_b) = b.allocate_spi(Version::Aes256Gcm).unwrap();
    let side = |local: u32, remote: u32, peer: &Engine, psp: ConnectionPsp| {
        let mut c = ConnectionConfig::new(
            ConnectionId::truncating(local),
            ConnectionId::truncating(remote),
            peer.local_ip,
            peer.local_mac,
        );
        c.psp = Some(psp);
        c
    };
    let psp_a = ConnectionPsp {
        tx_vc: Some(PCID_B),
        pcid: PCID_A,
        rx_generation: SpiGeneration(0),
        ..ConnectionPsp::new(spi_b, key_to_b, spi_a)
    };
    let psp_b = ConnectionPsp {
        tx_vc: Some(PCID_A),
        pcid: b_expects,
        ..ConnectionPsp::new(spi_a, key_to_a, spi_b)
    };
    let ca = a.add_connection(now, side(0x31, 0x32, &b, psp_a)).unwrap();
    let cb = b.add_connection(now, side(0x32, 0x31, &a, psp_b)).unwrap();
    Link { a, b, ca, cb, now }
}

impl Link {
    /// Moves frames both ways and answers the ULP events until nothing
    /// moves; returns (completions of A, requests B's ULP saw).
    fn run(&mut self) -> (Vec<(u64, CompletionStatus, Payload<FrameBuf>)>, usize) {
        let mut done = Vec::new();
        let mut seen = 0;
        let mut pushes = 0u64;
        let mut buf = vec![0u8; self.a.max_frame_len().max(self.b.max_frame_len())];
        for _ in 0..10_000 {
            self.now = self.now + Duration::from_micros(5);
            let mut moved = false;
            while let Some(len) = self.a.poll_transmit_into(self.now, &mut buf) {
                check_ipv6_vc(&buf[..len], PCID_B);
                let _ = self
                    .b
                    .handle_packet(self.now, FrameBuf::from_frame(&buf[..len], 0));
                moved = true;
            }
            while let Some(len) = self.b.poll_transmit_into(self.now, &mut buf) {
                check_ipv6_vc(&buf[..len], PCID_A);
                let _ = self
                    .a
                    .handle_packet(self.now, FrameBuf::from_frame(&buf[..len], 0));
                moved = true;
            }
            while let Some(event) = self.b.poll_event() {
                if let UlpEvent::Request(r) = event {
                    seen += 1;
                    match r.kind {
                        TransactionKind::Push => {
                            // Ordered: the pushes arrive as tags 1, 2, ...
                            pushes += 1;
                            assert_eq!(r.payload, pattern(pushes, r.payload.len()));
                            self.b.ulp_ack(self.now, self.cb, r.rsn).unwrap();
                        }
                        TransactionKind::Pull => {
                            let len = usize::from(r.request_length);
                            let data = pattern(len as u64, len);
                            self.b
                                .submit_pull_data(self.now, self.cb, r.rsn, UlpHeader::EMPTY, data)
                                .unwrap();
                        }
                    }
                    moved = true;
                }
            }
            while let Some(event) = self.a.poll_event() {
                if let UlpEvent::Completion(c) = event {
                    done.push((c.tag, c.status, c.data));
                }
            }
            if self.a.poll_timeout().is_some_and(|t| t <= self.now) {
                self.a.handle_timeout(self.now);
                moved = true;
            }
            if self.b.poll_timeout().is_some_and(|t| t <= self.now) {
                self.b.handle_timeout(self.now);
                moved = true;
            }
            if !moved && done.len() >= 4 {
                break;
            }
        }
        (done, seen)
    }
}

/// Every frame is IPv6 with a flow label, and carries the receiver's PCID
/// in the PSP VC.
fn check_ipv6_vc(frame: &[u8], pcid: u64) {
    assert_eq!(
        u16::from_be_bytes([frame[12], frame[13]]),
        0x86DD,
        "IPv6 ethertype"
    );
    let parsed = parse_with(frame, ChecksumChecks::ALL).expect("our own frame parses");
    let psp = Header::new_checked(&frame[parsed.layers.payload]).expect("PSP header");
    assert_eq!(psp.vc(), Some(pcid));
}

#[test]
fn ipv6_with_pcid_matching_completes_pushes_and_pulls() {
    let mut l = link(PCID_B);
    for tag in 1..=2u64 {
        l.a.submit(l.now, l.ca, Transaction::push(tag, pattern(tag, 700)))
            .unwrap();
    }
    l.a.submit(
        l.now,
        l.ca,
        Transaction::pull(3, 1500).with_header(UlpHeader::new(&[3; 8]).expect("short header")),
    )
    .unwrap();
    l.a.submit(
        l.now,
        l.ca,
        Transaction::pull(4, 0).with_header(UlpHeader::new(&[4; 8]).expect("short header")),
    )
    .unwrap();
    let (done, seen) = l.run();
    assert_eq!(seen, 4);
    assert_eq!(done.len(), 4);
    for (tag, status, data) in &done {
        assert_eq!(*status, CompletionStatus::Ack, "tag {tag}");
        if *tag == 3 {
            assert_eq!(*data, pattern(1500, 1500));
        }
    }
    assert_eq!(l.a.stats().drops.total(), 0);
    assert_eq!(l.b.stats().drops.total(), 0);
}

/// B expects another PCID: every frame A sends is dropped by name before
/// the delivery sublayer (no ACK, no NACK, nothing delivered); A retries
/// and finally completes the push with a local timeout, never an ACK.
#[test]
fn wrong_pcid_is_dropped_by_name_and_nothing_is_delivered() {
    let mut l = link(PCID_B ^ 1);
    l.a.submit(l.now, l.ca, Transaction::push(1, pattern(1, 100)))
        .unwrap();
    let (done, seen) = l.run();
    assert_eq!(seen, 0);
    // The ULP hears of it: the transaction times out, it is not lost.
    assert_eq!(done.len(), 1, "{done:?}");
    assert_eq!(done[0].1, CompletionStatus::LocalTimeout);
    assert!(l.a.stats().retransmissions > 0, "A keeps retrying");
    let b = l.b.stats();
    assert!(b.drops.get(DropReason::Psp(RxDrop::PcidMismatch)) > 0);
    assert_eq!(b.tx_frames, 0, "B answered nothing");
}
