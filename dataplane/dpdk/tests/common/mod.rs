//! The ULPs and data patterns of the engine tests over DPDK ports.
#![allow(dead_code)]

use std::collections::{HashMap, VecDeque};

use falcon_core::api::*;
use falcon_dpdk::eal::Eal;
use falcon_dpdk::mbuf::Mbuf;

/// The test binary's EAL: no hugepages, no PCI, 256 MiB, on `lcores`
/// (`-l`), its runtime files under a prefix of `name` and the process id.
pub fn eal(name: &str, lcores: &str) -> &'static Eal {
    eal_with(name, lcores, &[])
}

/// [`eal`] with more arguments (virtual devices).
pub fn eal_with(name: &str, lcores: &str, more: &[&str]) -> &'static Eal {
    let prefix = format!("--file-prefix=falcon-dpdk-{name}-{}", std::process::id());
    let mut args = vec![
        "--no-huge",
        "-m",
        "256",
        "--no-pci",
        "--no-shconf",
        "--no-telemetry",
        &prefix,
        "-l",
        lcores,
        "--log-level=lib.eal:error",
    ];
    args.extend_from_slice(more);
    Eal::init(&args).expect("EAL up")
}

/// Headroom (DPDK's default) plus the largest frame the test sends.
pub const DATA_ROOM: u16 = 128 + 4352;
pub const MAX_FRAME: usize = 4352;

/// The initiator's ULP: submits its backlog, checks each completion (a
/// push's source comes back unchanged, a pull's data is what the target
/// sent for that RSN).
pub struct Initiator {
    pub connection: ConnectionHandle,
    pub backlog: VecDeque<Transaction<Vec<u8>>>,
    pub pull_lengths: HashMap<u64, usize>,
    pub done: usize,
    pub pulled_bytes: usize,
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

/// A ULP for winding down: submits nothing and gives back the frames of
/// whatever event comes.
pub struct Drain;

impl Ulp<Mbuf, Vec<u8>> for Drain {
    fn submit(&mut self, _now: Timestamp, _engine: &mut Engine<Mbuf>) {}

    fn on_event(&mut self, _now: Timestamp, engine: &mut Engine<Mbuf>, event: UlpEvent<Mbuf>) {
        match event {
            UlpEvent::Completion(c) => engine.release(c.data),
            UlpEvent::Request(r) => engine.release(r.payload),
            _ => {}
        }
    }
}

/// The target's ULP: checks every pushed byte, answers pulls.
pub struct Target {
    pub pushed_bytes: usize,
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
pub fn push_bytes(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (len as u8).wrapping_mul(31) ^ i as u8)
        .collect()
}

pub fn pull_bytes(rsn: Rsn, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (rsn.value() as u8).wrapping_add(i as u8))
        .collect()
}

/// The 300 transactions of the tests: pushes of 1..=4000 bytes, every
/// third a pull of 1..=4000.
pub fn backlog() -> VecDeque<Transaction<Vec<u8>>> {
    (0..300u64)
        .map(|tag| {
            let len = 1 + (tag as usize * 733) % 4000;
            if tag % 3 == 2 {
                Transaction::pull(tag, len as u16)
            } else {
                Transaction::push(tag, push_bytes(len))
            }
        })
        .collect()
}

/// What the target must have received of [`backlog`]'s pushes.
pub fn backlog_push_bytes() -> usize {
    (0..300u64)
        .filter(|t| t % 3 != 2)
        .map(|t| 1 + (t as usize * 733) % 4000)
        .sum()
}

/// Engine configuration for side `side` (1 or 2), PSP on.
pub fn engine_config(side: u8) -> EngineConfig {
    falcon_core::testing::psp_engine_config(side)
}
