//! Every bit of a received frame, flipped: which the receive path drops by
//! name, and which it accepts ([`UncheckedField`], the fields no receiver
//! checks), over IPv4 and IPv6 with PSP on.

use crate::port::FrameBuf;
use std::collections::BTreeMap;

use core::net::{IpAddr, Ipv6Addr};

use super::psp_pair;
use crate::drop::{DropCounters, DropReason};
use crate::engine::{
    connect, ConnectionHandle, Engine, EngineConfig, PairSpec, PspConfig, UncheckedField,
};
use crate::testing::pattern;
use crate::time::Timestamp;
use crate::transaction::Transaction;
use crate::wire::EthernetAddress;

/// Two IPv6 engines with PSP on and one connection.
fn ipv6_pair(now: Timestamp) -> (Engine, Engine, ConnectionHandle) {
    use psp::{MasterKey, MasterKeys};
    let config = |last: u16, k: u8| EngineConfig {
        local_ip: IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, last)),
        local_mac: EthernetAddress([2, 0, 0, 0, 0, last as u8]),
        psp: Some(PspConfig::new(MasterKeys {
            k0: MasterKey::new([k; 32]),
            k1: MasterKey::new([k ^ 0xFF; 32]),
        })),
        ..EngineConfig::default()
    };
    let mut a = Engine::new(config(1, 1), now).expect("engine A");
    let mut b = Engine::new(config(2, 3), now).expect("engine B");
    let (ca, _) = connect(now, &mut a, &mut b, &PairSpec::default()).expect("connect");
    (a, b, ca)
}

/// The reasons B counted between two snapshots.
fn new_drops(before: &DropCounters, after: &DropCounters) -> Vec<(DropReason, u64)> {
    DropReason::ALL
        .iter()
        .map(|&r| (r, after.get(r) - before.get(r)))
        .filter(|&(_, n)| n > 0)
        .collect()
}

/// A's first Push Data, handed to B intact, then once per bit with that bit
/// flipped: for each (byte, bit), the reason B dropped it for, or `None`
/// when it passed every check (B then finds it a duplicate of the intact
/// one, or takes it as it is).
fn flip_every_bit(
    mut a: Engine,
    mut b: Engine,
    ca: ConnectionHandle,
    now: Timestamp,
) -> BTreeMap<(usize, u8), Option<DropReason>> {
    a.submit(now, ca, Transaction::push(1, pattern(1, 100)))
        .unwrap();
    let mut buf = vec![0u8; a.max_frame_len()];
    let len = a.poll_transmit_into(now, &mut buf).expect("the push");
    let frame = buf[..len].to_vec();
    let _ = b.handle_packet(now, FrameBuf::from_frame(&frame.clone(), 0));
    assert_eq!(b.stats().drops.total(), 0, "the intact frame is taken");
    let mut outcome = BTreeMap::new();
    for offset in 0..frame.len() {
        for bit in 0..8u8 {
            let mut copy = frame.clone();
            copy[offset] ^= 1 << bit;
            let before = b.stats().drops;
            let _ = b.handle_packet(now, FrameBuf::from_frame(&copy, 0));
            let drops = new_drops(&before, &b.stats().drops);
            let reason = match drops.as_slice() {
                [] | [(DropReason::DuplicatePacket | DropReason::StalePacket, 1)] => None,
                [(reason, 1)] => Some(*reason),
                other => panic!("byte {offset} bit {bit}: {other:?}"),
            };
            outcome.insert((offset, bit), reason);
        }
    }
    outcome
}

/// Every bit is dropped by name except exactly the ones
/// [`UncheckedField::at`] names; returns the drops by reason and the
/// unchecked bits by field.
fn check_family(
    family: IpAddr,
    outcome: &BTreeMap<(usize, u8), Option<DropReason>>,
) -> (BTreeMap<DropReason, u64>, BTreeMap<UncheckedField, u64>) {
    let (mut dropped, mut unchecked) = (BTreeMap::new(), BTreeMap::new());
    for (&(offset, bit), reason) in outcome {
        let field = UncheckedField::at(family, offset, bit);
        match (reason, field) {
            (Some(reason), None) => *dropped.entry(*reason).or_default() += 1,
            (None, Some(field)) => *unchecked.entry(field).or_default() += 1,
            (reason, field) => panic!("byte {offset} bit {bit}: {reason:?}, {field:?}"),
        }
    }
    (dropped, unchecked)
}

#[test]
fn ipv4_every_bit_but_the_source_mac_and_port_is_dropped_by_name() {
    let now = Timestamp::from_micros(1_000);
    let (a, b, ca, _) = psp_pair(now);
    let family = a.local_ip;
    let (dropped, unchecked) = check_family(family, &flip_every_bit(a, b, ca, now));
    assert_eq!(
        unchecked.into_iter().collect::<Vec<_>>(),
        [
            (UncheckedField::EthernetSource, 48),
            (UncheckedField::UdpSourcePort, 16)
        ]
    );
    assert_eq!(dropped[&DropReason::DestinationMacMismatch], 48);
    // The IPv4 header's checksum sees most of its 160 bits first.
    assert!(dropped[&DropReason::BadIpChecksum] > 100, "{dropped:?}");
    assert_eq!(dropped[&DropReason::BadUdpChecksum], 16);
    assert_eq!(dropped[&DropReason::NotFalconPort], 16);
    assert!(dropped[&DropReason::Psp(psp::RxDrop::AuthFailed)] > 1000);
}

#[test]
fn ipv6_every_bit_but_the_unchecked_fields_is_dropped_by_name() {
    let now = Timestamp::from_micros(1_000);
    let (a, b, ca) = ipv6_pair(now);
    let family = a.local_ip;
    let (dropped, unchecked) = check_family(family, &flip_every_bit(a, b, ca, now));
    assert_eq!(
        unchecked.into_iter().collect::<Vec<_>>(),
        [
            (UncheckedField::EthernetSource, 48),
            (UncheckedField::Ipv6TrafficClass, 8),
            (UncheckedField::Ipv6FlowLabel, 20),
            (UncheckedField::Ipv6HopLimit, 8),
            (UncheckedField::Ipv6Source, 128),
            (UncheckedField::UdpSourcePort, 16),
        ]
    );
    // No checksum covers the IPv6 destination address: only the address
    // check does.
    assert_eq!(dropped[&DropReason::DestinationIpMismatch], 128);
    assert_eq!(dropped[&DropReason::DestinationMacMismatch], 48);
    assert_eq!(dropped[&DropReason::BadUdpChecksum], 16);
    assert!(dropped[&DropReason::Psp(psp::RxDrop::AuthFailed)] > 1000);
}
