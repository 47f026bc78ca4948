//! End-to-end tests of the device: two engines over the in-process
//! loopback with seeded faults, PSP on, each driven by its lcore loop in
//! virtual time, one [`Device`] on each, and RC QPs connected one per
//! Falcon connection.
//!
//! Layer: tests. [`Pair`] is the harness: it turns both loops, advances
//! the clock to the next timer when both sides are idle (a run replays
//! from its seed), and holds each side's device, PD, CQ and QPs
//! ([`Node`]). The files: `ops.rs` (each opcode, multi-MTU transfers
//! against an oracle, scatter/gather), `modes.rs` (ordering and error
//! modes), `security.rs` (a hostile peer), `flow.rs` (RNR, credits,
//! atomics under loss), `verbs.rs` (state machine, SRQ, CQ overrun, UD).

mod flow;
mod modes;
mod ops;
mod security;
mod verbs;

use std::cell::Cell;
use std::rc::Rc;

use core::time::Duration;

use falcon_core::api::{
    connect, ConnectionHandle, ConnectionId, CreditLimits, DeliveryConfig, Engine, Lcore, PairSpec,
    RnrTimeout, Timestamp,
};
use falcon_core::testing::{
    faulty_lcore_pair, psp_engine_config, FaultInjector, Faults, HandClock, LoopbackPort,
};

use crate::data::RdmaData;
use crate::verbs::{
    Access, Cq, ErrorMode, MemoryRegion, Mtu, Pd, QpAttr, QpCap, QpInitAttr, QpOrdering, QpState,
    QpType, RecvWr, Region, SendWr, Sge, WorkCompletion,
};
use crate::wire::Qpn;
use crate::Device;

pub(crate) type Side = Lcore<FaultInjector<LoopbackPort>, HandClock, RdmaData>;

/// What a [`Pair`] is built with.
#[derive(Debug, Clone)]
pub(crate) struct Setup {
    /// RC QP pairs, one Falcon connection each.
    pub(crate) qps: usize,
    pub(crate) ordering: QpOrdering,
    pub(crate) error_mode: ErrorMode,
    pub(crate) mtu: Mtu,
    pub(crate) faults: Faults,
    pub(crate) seed: u64,
    pub(crate) credits: Option<CreditLimits>,
    pub(crate) cap: QpCap,
    pub(crate) cq_depth: u32,
    pub(crate) rnr_retry: u8,
    pub(crate) min_rnr_timer: RnrTimeout,
    /// The rights each QP grants peers.
    pub(crate) access: Access,
    pub(crate) sq_sig_all: bool,
    pub(crate) one_way_delay: Duration,
    /// Delivery parameters of the connections (`None`: the engine's).
    pub(crate) delivery: Option<DeliveryConfig>,
}

impl Default for Setup {
    fn default() -> Setup {
        Setup {
            qps: 1,
            ordering: QpOrdering::Strong,
            error_mode: ErrorMode::VerbsCompatible,
            mtu: Mtu::B1024,
            faults: Faults::default(),
            seed: 1,
            credits: None,
            cap: QpCap {
                max_send_wr: 1024,
                max_recv_wr: 1024,
                max_send_sge: 16,
                max_recv_sge: 16,
                max_inline_data: 64,
            },
            cq_depth: 1 << 16,
            rnr_retry: 7,
            // 0.01 ms.
            min_rnr_timer: RnrTimeout::SHORTEST,
            access: Access::LOCAL_WRITE
                | Access::REMOTE_WRITE
                | Access::REMOTE_READ
                | Access::REMOTE_ATOMIC,
            sq_sig_all: false,
            one_way_delay: Duration::from_micros(2),
            delivery: None,
        }
    }
}

/// Loss and reordering of `percent` % each, held-back frames up to 20 µs.
pub(crate) fn lossy(percent: u32) -> Faults {
    Faults {
        loss_ppm: Faults::percent(percent),
        reorder_ppm: Faults::percent(percent),
        reorder_delay: Duration::from_micros(20),
        ..Faults::default()
    }
}

/// One side's verbs objects.
pub(crate) struct Node {
    pub(crate) device: Device,
    pub(crate) pd: Pd,
    pub(crate) cq: Cq,
    /// Its QPs, the i-th on the i-th connection.
    pub(crate) qps: Vec<Qpn>,
    /// The local CIDs of the connections.
    pub(crate) cids: Vec<ConnectionId>,
    /// The connection handles.
    pub(crate) connections: Vec<ConnectionHandle>,
}

impl Node {
    /// A region of `len` bytes of `pattern(seed)`, registered with
    /// `access`.
    pub(crate) fn region(
        &mut self,
        len: usize,
        seed: u64,
        access: Access,
    ) -> (Region, MemoryRegion) {
        let region = Region::from_vec(pattern(seed, len));
        let mr = self
            .device
            .reg_mr(self.pd, &region, access)
            .expect("registered");
        (region, mr)
    }

    /// `len` bytes of `mr` from `offset` as one scatter entry.
    pub(crate) fn sge(mr: &MemoryRegion, offset: u64, len: u32) -> Sge {
        Sge {
            addr: mr.addr_at(offset),
            length: len,
            lkey: mr.lkey(),
        }
    }

    pub(crate) fn post_send(&mut self, qp: usize, wr: SendWr) {
        self.device.post_send(self.qps[qp], wr).expect("posted");
    }

    pub(crate) fn post_recv(&mut self, qp: usize, wr: RecvWr) {
        self.device.post_recv(self.qps[qp], wr).expect("posted");
    }

    /// Every completion waiting in the CQ.
    pub(crate) fn drain(&mut self) -> Vec<WorkCompletion> {
        let mut out = Vec::new();
        while let Some(wc) = self.device.poll_cq_one(self.cq) {
            out.push(wc);
        }
        out
    }

    pub(crate) fn state(&self, qp: usize) -> QpState {
        self.device.qp_state(self.qps[qp]).expect("a QP")
    }
}

/// Two devices over a lossy loopback (see the module doc).
pub(crate) struct Pair {
    time: Rc<Cell<Timestamp>>,
    pub(crate) a: Side,
    pub(crate) b: Side,
    pub(crate) na: Node,
    pub(crate) nb: Node,
    /// Completions taken from the CQs so far, per side.
    pub(crate) wa: Vec<WorkCompletion>,
    pub(crate) wb: Vec<WorkCompletion>,
    /// Each step takes the completions from the CQs (else they stay).
    pub(crate) drain: bool,
}

impl Pair {
    pub(crate) fn new(setup: Setup) -> Pair {
        let time = Rc::new(Cell::new(Timestamp::from_nanos(1_000_000_000)));
        let now = time.get();
        let config = psp_engine_config;
        let mut a: Engine<_, RdmaData> = Engine::new(config(1), now).expect("engine A");
        let mut b: Engine<_, RdmaData> = Engine::new(config(2), now).expect("engine B");
        let mut na = Node::new(&setup);
        let mut nb = Node::new(&setup);
        for i in 0..setup.qps {
            let spec = PairSpec {
                a_cid: ConnectionId::truncating(0x10 + i as u32),
                b_cid: ConnectionId::truncating(0x1000 + i as u32),
                ordering: setup.ordering.falcon(),
                credits: setup.credits,
                delivery: setup.delivery.clone(),
                ..PairSpec::default()
            };
            let (ca, cb) = connect(now, &mut a, &mut b, &spec).expect("connect");
            na.cids.push(spec.a_cid);
            nb.cids.push(spec.b_cid);
            na.connections.push(ca);
            nb.connections.push(cb);
            let (qa, qb) = (na.create_qp(&setup, None), nb.create_qp(&setup, None));
            na.qps.push(qa);
            nb.qps.push(qb);
        }
        for i in 0..setup.qps {
            let (qa, qb) = (na.qps[i], nb.qps[i]);
            na.connect(&setup, qa, qb, na.cids[i]);
            nb.connect(&setup, qb, qa, nb.cids[i]);
        }
        let clock = HandClock(Rc::clone(&time));
        let (a, b) = faulty_lcore_pair(a, b, setup.faults, setup.seed, setup.one_way_delay, clock);
        Pair {
            time,
            a,
            b,
            na,
            nb,
            wa: Vec::new(),
            wb: Vec::new(),
            drain: true,
        }
    }

    pub(crate) fn now(&self) -> Timestamp {
        self.time.get()
    }

    /// One turn of each side; then, if nothing happened, the clock moves
    /// to the next timer. `false` when nothing is left to happen.
    pub(crate) fn step(&mut self) -> bool {
        let turn_a = self.a.turn(&mut self.na.device);
        let turn_b = self.b.turn(&mut self.nb.device);
        if self.drain {
            self.wa.extend(self.na.drain());
            self.wb.extend(self.nb.drain());
        }
        if !turn_a.is_idle() || !turn_b.is_idle() {
            return true;
        }
        let next = [
            self.a.engine.poll_timeout(),
            self.b.engine.poll_timeout(),
            falcon_core::api::Port::poll_timeout(&self.a.port),
            falcon_core::api::Port::poll_timeout(&self.b.port),
        ]
        .into_iter()
        .flatten()
        .min();
        match next {
            Some(at) => {
                let at = at.max(self.now().saturating_add(Duration::from_nanos(1)));
                self.time.set(at);
                true
            }
            None => false,
        }
    }

    /// Steps until `done`, within `limit` of virtual time.
    pub(crate) fn run_until(&mut self, limit: Duration, mut done: impl FnMut(&Pair) -> bool) {
        let deadline = self.now().saturating_add(limit);
        while !done(self) {
            assert!(
                self.now() <= deadline,
                "not done after {limit:?} of virtual time: A {:?} / B {:?}\nA {:#?}\nB {:#?}",
                self.wa.len(),
                self.wb.len(),
                self.na.device.stats(),
                self.nb.device.stats()
            );
            if !self.step() {
                assert!(done(self), "idle but not done");
                return;
            }
        }
    }

    /// Steps until A has `a` completions and B `b` (taken so far, since
    /// the last [`take`](Self::take)).
    pub(crate) fn until_completions(&mut self, a: usize, b: usize) {
        self.run_until(Duration::from_secs(30), |p| {
            p.wa.len() >= a && p.wb.len() >= b
        });
    }

    /// Steps until nothing is left to happen (or `limit` passes).
    pub(crate) fn settle(&mut self, limit: Duration) {
        let deadline = self.now().saturating_add(limit);
        while self.now() <= deadline && self.step() {}
    }

    /// The completions taken so far, per side, emptied.
    pub(crate) fn take(&mut self) -> (Vec<WorkCompletion>, Vec<WorkCompletion>) {
        (core::mem::take(&mut self.wa), core::mem::take(&mut self.wb))
    }
}

impl Node {
    fn new(setup: &Setup) -> Node {
        let mut device = Device::default();
        let pd = device.alloc_pd().expect("PD");
        let cq = device.create_cq(setup.cq_depth).expect("CQ");
        Node {
            device,
            pd,
            cq,
            qps: Vec::new(),
            cids: Vec::new(),
            connections: Vec::new(),
        }
    }

    /// An RC QP of `setup` (receives from `srq` if given), in RESET.
    pub(crate) fn create_qp(&mut self, setup: &Setup, srq: Option<crate::verbs::Srq>) -> Qpn {
        let init = QpInitAttr {
            srq,
            cap: setup.cap,
            sq_sig_all: setup.sq_sig_all,
            ordering: setup.ordering,
            error_mode: setup.error_mode,
            ..QpInitAttr::new(QpType::Rc, self.cq)
        };
        self.device.create_qp(self.pd, init).expect("QP")
    }

    /// RESET → INIT → RTR → RTS to `peer` over connection `cid`.
    pub(crate) fn connect(&mut self, setup: &Setup, qp: Qpn, peer: Qpn, cid: ConnectionId) {
        let steps = [
            QpAttr {
                state: Some(QpState::Init),
                access: Some(setup.access),
                ..QpAttr::default()
            },
            QpAttr {
                state: Some(QpState::Rtr),
                path_mtu: Some(setup.mtu),
                dest_qpn: Some(peer),
                cid: Some(cid),
                max_dest_rd_atomic: Some(16),
                min_rnr_timer: Some(setup.min_rnr_timer),
                ..QpAttr::default()
            },
            QpAttr {
                state: Some(QpState::Rts),
                rnr_retry: Some(setup.rnr_retry),
                max_rd_atomic: Some(16),
                ..QpAttr::default()
            },
        ];
        for attr in steps {
            self.device.modify_qp(qp, &attr).expect("modify");
        }
    }
}

/// `len` bytes of a pattern named by `seed`.
pub(crate) fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

/// Every completion of `wcs` succeeded.
pub(crate) fn assert_all_ok(wcs: &[WorkCompletion]) {
    for wc in wcs {
        assert!(wc.status.is_ok(), "{wc:?}");
    }
}
