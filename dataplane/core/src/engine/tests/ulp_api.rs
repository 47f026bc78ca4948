//! What the ULPs need of the engine beyond submit and answer: Xoff/Xon
//! that name the credit class, the per-connection credit query, and the
//! per-transaction AR bit.

use core::time::Duration;

use crate::engine::{connect, Engine, EngineConfig, PairSpec};
use crate::port::FrameBuf;
use crate::resources::{Credit, CreditClass, CreditLimits};
use crate::time::Timestamp;
use crate::transaction::{RejectReason, Transaction, TransactionKind, UlpEvent, UlpHeader};
use crate::wire::{frame, EthernetAddress, FalconRepr};

fn plain(side: u8) -> EngineConfig {
    let mut config = EngineConfig {
        local_ip: core::net::IpAddr::V4([10, 0, 0, side].into()),
        local_mac: EthernetAddress([2, 0, 0, 0, 0, side]),
        ..EngineConfig::default()
    };
    // No AR from the policy: only the ULP's.
    config.delivery.ack_request_percent = 0;
    config.delivery.ack_request_fcwnd_threshold = 0.0;
    config
}

/// Moves frames both ways until nothing moves; returns the events of each.
fn exchange(now: Timestamp, a: &mut Engine, b: &mut Engine) -> [Vec<UlpEvent>; 2] {
    let mut events = [Vec::new(), Vec::new()];
    let mut buf = vec![0u8; a.max_frame_len()];
    for _ in 0..64 {
        let mut moved = false;
        while let Some(len) = a.poll_transmit_into(now, &mut buf) {
            let _ = b.handle_packet(now, FrameBuf::from_frame(&buf[..len], 0));
            moved = true;
        }
        while let Some(len) = b.poll_transmit_into(now, &mut buf) {
            let _ = a.handle_packet(now, FrameBuf::from_frame(&buf[..len], 0));
            moved = true;
        }
        while let Some(e) = a.poll_event() {
            events[0].push(e);
        }
        while let Some(e) = b.poll_event() {
            events[1].push(e);
        }
        if !moved {
            break;
        }
    }
    events
}

/// RDMA over Falcon: Read Responses (Pull Data) keep flowing while the
/// connection's requests are stopped. A's request credits run out (Xoff
/// for requests only); A still serves B's pull with its data credits; the
/// Xon for requests comes once A's pushes complete.
#[test]
fn xoff_names_the_class_and_pull_data_flows_while_requests_are_stopped() {
    let now = Timestamp::from_micros(1);
    let mut a: Engine = Engine::new(plain(1), now).expect("config");
    let mut b: Engine = Engine::new(plain(2), now).expect("config");
    let spec = PairSpec {
        credits: Some(CreditLimits {
            req_pkt_tx: 2,
            ..CreditLimits::UNLIMITED
        }),
        ..PairSpec::default()
    };
    let (ca, cb) = connect(now, &mut a, &mut b, &spec).expect("connect");
    a.submit(now, ca, Transaction::push(1, vec![1; 100]))
        .expect("1st");
    a.submit(now, ca, Transaction::push(2, vec![2; 100]))
        .expect("2nd");
    assert_eq!(a.credits(ca).map(|c| c.used(Credit::ReqPktTx)), Some(2));
    assert_eq!(
        a.credits(ca).map(|c| c.available(Credit::ReqPktTx)),
        Some(0)
    );
    let refused = a
        .submit(now, ca, Transaction::push(3, vec![3; 100]))
        .expect_err("out of request credits");
    assert!(matches!(refused.reason, RejectReason::NoResources(_)));
    let xoff = a.poll_event();
    assert!(
        matches!(xoff, Some(UlpEvent::Xoff { connection, class: CreditClass::Request }) if connection == ca),
        "{xoff:?}"
    );

    // B pulls from A: A's data credits are untouched.
    b.submit(
        now,
        cb,
        Transaction::pull(9, 64).with_header(UlpHeader::new(&[9]).expect("short")),
    )
    .expect("pull");
    let [a_events, b_events] = exchange(now, &mut a, &mut b);
    let mut xon = false;
    let mut served = false;
    for event in a_events {
        match event {
            UlpEvent::Request(r) if r.kind == TransactionKind::Pull => {
                a.submit_pull_data(now, ca, r.rsn, UlpHeader::EMPTY, vec![7; 64])
                    .expect("Pull Data while requests are stopped");
                served = true;
            }
            UlpEvent::Xon { class, .. } => {
                assert_eq!(class, CreditClass::Request);
                xon = true;
            }
            UlpEvent::Xoff { class, .. } => panic!("a second Xoff, {class:?}"),
            _ => {}
        }
    }
    for event in b_events {
        if let UlpEvent::Request(r) = event {
            b.ulp_ack(now, cb, r.rsn).expect("ack");
        }
    }
    assert!(served, "A served the pull");
    let [a_events, b_events] = exchange(now + Duration::from_micros(10), &mut a, &mut b);
    xon |= a_events.iter().any(|e| {
        matches!(
            e,
            UlpEvent::Xon {
                class: CreditClass::Request,
                ..
            }
        )
    });
    assert!(xon, "requests resume once A's pushes complete");
    assert!(b_events
        .iter()
        .any(|e| matches!(e, UlpEvent::Completion(c) if c.tag == 9 && c.status.is_ok())));
}

/// A transaction submitted with the AR bit carries it on its packet (the
/// AR policy is off here); one without does not.
#[test]
fn the_ulp_sets_the_ar_bit_of_its_transaction() {
    let now = Timestamp::from_micros(1);
    let mut a: Engine = Engine::new(plain(1), now).expect("config");
    let mut b: Engine = Engine::new(plain(2), now).expect("config");
    let (ca, _) = connect(now, &mut a, &mut b, &PairSpec::default()).expect("connect");
    a.submit(now, ca, Transaction::push(1, vec![1; 64]))
        .expect("plain");
    a.submit(
        now,
        ca,
        Transaction::push(2, vec![2; 64]).with_ack_request(),
    )
    .expect("with AR");
    let mut buf = vec![0u8; a.max_frame_len()];
    let mut bits = Vec::new();
    while let Some(len) = a.poll_transmit_into(now, &mut buf) {
        let parsed = frame::parse(&buf[..len]).expect("a frame");
        let falcon = FalconRepr::parse(&buf[parsed.layers.payload]).expect("Falcon");
        if let FalconRepr::PushData(p) = falcon {
            bits.push((p.header.rsn.value(), p.header.ack_request));
        }
    }
    let first = bits[0].0;
    assert_eq!(bits, [(first, false), (first + 1, true)]);
}
