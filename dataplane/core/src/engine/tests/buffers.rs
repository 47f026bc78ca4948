//! Buffers end to end (DESIGN.md §5): a transmitted payload's data is
//! copied once, from the ULP's data source into the frame; a received one
//! is not copied at all (the ULP reads it in the frame the port received);
//! and every frame goes back to its pool.

use std::cell::Cell;
use std::rc::Rc;

use core::time::Duration;

use psp::{MasterKey, MasterKeys};

use crate::engine::{connect, Engine, EngineConfig, PairSpec, PspConfig};
use crate::port::PacketBuf;
use crate::testing::pattern;
use crate::testing::{Loopback, LoopbackConfig};
use crate::testing::{MbufPool, MbufPort, TestMbuf};
use crate::time::Timestamp;
use crate::transaction::{DataSource, Payload, Transaction, TransactionKind, UlpEvent, UlpHeader};
use crate::wire::EthernetAddress;

/// A data source in "ULP memory" that counts the bytes read out of it.
#[derive(Debug)]
struct CountingSource {
    data: Rc<[u8]>,
    copied: Rc<Cell<u64>>,
}

impl DataSource for CountingSource {
    fn len(&self) -> usize {
        self.data.len()
    }

    fn copy_to(&self, offset: usize, dst: &mut [u8]) {
        dst.copy_from_slice(&self.data[offset..offset + dst.len()]);
        self.copied.set(self.copied.get() + dst.len() as u64);
    }
}

/// Whether `payload` is a view into the frame the port received (its
/// bytes where the port put them), not a copy.
fn in_its_frame(payload: &Payload<TestMbuf>, port: &MbufPort) -> bool {
    let Some(frame) = payload.frame() else {
        return payload.is_empty();
    };
    let start = frame.data()[payload.range()].as_ptr();
    port.received.contains(&frame.id()) && core::ptr::eq(start, payload.as_slice().as_ptr())
}

#[test]
fn payload_bytes_are_copied_once_on_transmit_and_never_on_receive() {
    type Node = Engine<TestMbuf, CountingSource>;
    let mut now = Timestamp::from_micros(1);
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
    let mut a: Node = Engine::new(config(1), now).expect("config");
    let mut b: Node = Engine::new(config(2), now).expect("config");
    let (ca, cb) = connect(now, &mut a, &mut b, &PairSpec::default()).expect("connect");
    let (la, lb) = Loopback::pair(LoopbackConfig::default());
    let mut ports = [
        MbufPort::new(la, MbufPool::new(4096)),
        MbufPort::new(lb, MbufPool::new(4096)),
    ];
    let copied = Rc::new(Cell::new(0u64));
    let source = |tag: u64, len: usize| CountingSource {
        data: pattern(tag, len).into(),
        copied: Rc::clone(&copied),
    };

    // Pushes and pulls of every size class, ULP headers on some.
    let sizes = [1usize, 64, 500, 1500, 2100, 4000];
    let mut expected_copies = 0u64;
    let mut outstanding = 0;
    for (i, &len) in sizes.iter().enumerate() {
        let tag = i as u64;
        a.submit(now, ca, Transaction::push(tag, source(tag, len)))
            .expect("push");
        expected_copies += len as u64;
        let header = UlpHeader::new(&tag.to_le_bytes()).expect("8 bytes");
        let pull = Transaction::pull(100 + tag, len as u16).with_header(header);
        a.submit(now, ca, pull).expect("pull");
        expected_copies += len as u64; // the target's Pull Data
        outstanding += 2;
    }

    let mut delivered = 0;
    let (mut rx, mut tx) = (Vec::new(), Vec::new());
    let deadline = now + Duration::from_millis(100);
    while outstanding > 0 {
        assert!(now < deadline, "{outstanding} transactions outstanding");
        for (side, (engine, conn)) in [(&mut a, ca), (&mut b, cb)].into_iter().enumerate() {
            let port = &mut ports[side];
            engine.receive_burst(now, port, &mut rx, 64);
            engine.handle_timeout(now);
            while let Some(event) = engine.poll_event() {
                match event {
                    UlpEvent::Request(r) if r.kind == TransactionKind::Push => {
                        let tag = delivered_push_tag(&r.payload, &sizes);
                        assert_eq!(r.payload, pattern(tag, sizes[tag as usize]));
                        assert!(in_its_frame(&r.payload, port), "push read in place");
                        engine.ulp_ack(now, conn, r.rsn).expect("ack");
                        engine.release(r.payload);
                        delivered += 1;
                    }
                    UlpEvent::Request(r) => {
                        let tag = u64::from_le_bytes(r.header[..8].try_into().expect("tag"));
                        let data = source(100 + tag, usize::from(r.request_length));
                        engine
                            .submit_pull_data(now, conn, r.rsn, UlpHeader::EMPTY, data)
                            .expect("pull data");
                    }
                    UlpEvent::Completion(c) => {
                        assert!(c.status.is_ok(), "{:?}", c.status);
                        if c.kind == TransactionKind::Pull {
                            let tag = c.tag - 100;
                            assert_eq!(c.data, pattern(100 + tag, sizes[tag as usize]));
                            assert!(in_its_frame(&c.data, port), "Pull Data read in place");
                        }
                        engine.release(c.data);
                        outstanding -= 1;
                    }
                    _ => {}
                }
            }
            engine.transmit_burst(now, port, &mut tx, 64);
        }
        now = now + Duration::from_micros(1);
    }
    assert_eq!(delivered, sizes.len());
    for engine in [&a, &b] {
        let stats = engine.stats();
        assert_eq!(stats.retransmissions, 0, "one transmission each");
        assert_eq!(stats.drops.total(), 0);
    }
    assert_eq!(
        copied.get(),
        expected_copies,
        "each data byte copied once from its source"
    );
    // Frames of every size class were used, and all came back.
    for port in &ports {
        let (small, large) = port.pool().peak();
        assert!(small > 0 && large > 0, "ACKs in small buffers, jumbo data");
    }
    for _ in 0..4 {
        for (side, engine) in [&mut a, &mut b].into_iter().enumerate() {
            engine.receive_burst(now, &mut ports[side], &mut rx, 64);
        }
        now = now + Duration::from_micros(5);
    }
    for port in &ports {
        assert_eq!(port.pool().outstanding(), (0, 0), "every frame returned");
    }
}

/// The tag of a delivered push, from its length (the sizes are distinct).
fn delivered_push_tag(payload: &Payload<TestMbuf>, sizes: &[usize]) -> u64 {
    sizes
        .iter()
        .position(|&len| len == payload.len())
        .expect("a submitted size") as u64
}
