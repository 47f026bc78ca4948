//! The RDMA phase of `falcon demo`: RDMA over Falcon after the NVMe phase.
//!
//! Layer: application. An [`RdmaPair`] (two engines built from the demo's
//! file, RUE inline, over a loopback pair of their own with the demo's
//! seeded faults; an `rdma-ulp` [`Device`] on each; `qps` RC QPs, each on
//! its own Falcon connection, ordered for strong ordering and unordered
//! for weak, RDMA-0.9 §6.2) runs a fixed number of operations that the
//! [`Plan`] draws: RDMA WRITE (some with immediate, each consuming a
//! receive posted on the responder), RDMA READ, SEND (some with
//! immediate) into receives posted on the responder, fetch-and-add and
//! compare-and-swap on 8-byte counters (RDMA-0.9 §6.7: messages beyond
//! the MTU are cut into several packets). Every byte is checked against
//! the plan's oracle: a WRITE's in the responder's region and a SEND's in
//! its receive buffer once the operation completes, a READ's in the
//! requester's buffer (what the responder's region holds), each atomic's
//! prior value, and at the end the counters. Before an operation is
//! posted, the bytes it must change are set to the complement of what it
//! must leave, so a byte it does not place fails the check. One thread
//! turns both loops on the real clock. An error completion, a wrong byte,
//! or an operation not complete within the timeout is a failure, by QP
//! and operation.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use falcon_core::engine::{connect, Engine};
use falcon_core::lcore::{Clock, Lcore, SystemClock};
use falcon_core::testing::{
    faulty_lcore_pair, FaultInjector, FaultStats, LoopbackConfig, LoopbackPort,
};
use falcon_core::wire::RnrTimeout;
use rdma_ulp::verbs::{
    Access, Cq, MemoryRegion, Mtu, QpAttr, QpCap, QpInitAttr, QpOrdering, QpState, QpType, RecvWr,
    Region, SendWr, SgList, Sge, WcFlags, WcOpcode, WcStatus, WorkCompletion, WrOp,
};
use rdma_ulp::wire::Qpn;
use rdma_ulp::{Device, RdmaData};

use super::rdma_plan::{payload, Kind, Op, Plan, FETCH_ADD_COUNTERS, MAX_FAILURES};
use super::report::{psp_label, RdmaFalcon, RdmaReport};
use crate::cmd::nvme_io::Latency;
use crate::democfg::build::setup;
use crate::democfg::schema::{Ordering, RuePlacement};
use crate::democfg::{Origin, RdmaWorkload};
use crate::error::{AppError, Result};

type Side = Lcore<FaultInjector<LoopbackPort>, SystemClock, RdmaData>;

/// A WRITE or SEND longer than one MTU gathers from this many entries, a
/// READ or a receive scatters into two: the scatter/gather lists of
/// RDMA-0.9 §6.7's segmentation across entries.
const GATHER: u32 = 3;
const SCATTER: u32 = 2;
/// Receive-not-ready retries: receives are posted before the operation
/// that consumes them, so a NACK is never expected; 7 is InfiniBand's
/// "retry forever".
const RNR_RETRY: u8 = 7;

/// Runs the RDMA phase; `quiet` drops the progress lines on stderr.
///
/// # Errors
///
/// [`AppError::Failed`] if the pair cannot be built. What goes wrong while
/// it runs is in the report's failures.
pub(super) fn run(workload: &RdmaWorkload, quiet: bool) -> Result<(RdmaReport, Vec<String>)> {
    let mut pair = RdmaPair::new(workload)?;
    let mut plan = Plan::new(
        workload.operations,
        workload.qps,
        workload.queue_depth,
        &workload.sizes,
        workload.mtu.bytes(),
        workload.seed,
    )?;
    let mut in_flight: BTreeMap<u64, InFlight> = BTreeMap::new();
    let start = Instant::now();
    let mut last_completion = start;
    let mut last_line = start;
    while !plan.done(in_flight.len()) {
        for qp in 0..workload.qps {
            while let Some(op) = plan.next(qp) {
                let bytes = if op.kind.is_atomic() {
                    Vec::new()
                } else {
                    payload(plan.seed(), op.id, op.len)
                };
                if let Err(e) = pair.post(&op, &bytes) {
                    plan.fail(format!("{}: not posted: {e}", op.describe()));
                    plan.retire(&op, false, Duration::ZERO);
                    plan.stop();
                    break;
                }
                in_flight.insert(
                    op.id,
                    InFlight {
                        op,
                        bytes,
                        posted: Instant::now(),
                        latency: None,
                        requester_ok: false,
                        received: !op.kind.consumes_receive(),
                    },
                );
            }
        }
        pair.turn();
        while let Some(wc) = pair.da.poll_cq_one(pair.cq_a) {
            last_completion = Instant::now();
            requester_done(&pair, &mut plan, &mut in_flight, &wc);
        }
        while let Some(wc) = pair.db.poll_cq_one(pair.cq_b) {
            last_completion = Instant::now();
            responder_done(&pair, &mut plan, &mut in_flight, &wc);
        }
        let now = Instant::now();
        // Ids grow with the posting time: the first is the oldest.
        let late = in_flight
            .first_key_value()
            .is_some_and(|(_, f)| now.duration_since(f.posted) > workload.timeout);
        if late {
            for f in in_flight.values().take(MAX_FAILURES) {
                if now.duration_since(f.posted) > workload.timeout {
                    plan.fail(format!(
                        "{}: not complete after {:.1} s",
                        f.op.describe(),
                        workload.timeout.as_secs_f64()
                    ));
                }
            }
            plan.stop();
            break;
        }
        if !quiet && now.duration_since(last_line) >= Duration::from_secs(1) {
            last_line = now;
            eprintln!(
                "  {:>6.1} s  {:>9} of {} RDMA operations  {} retransmissions",
                now.duration_since(start).as_secs_f64(),
                plan.counts.operations,
                plan.operations(),
                pair.falcon().retransmissions
            );
        }
    }
    let elapsed = last_completion.duration_since(start);
    if in_flight.is_empty() && plan.issued() > 0 {
        plan.check_counters(&pair.counter_words());
    }
    let falcon = pair.falcon();
    Ok(finish(plan, workload, elapsed, falcon))
}

/// An operation posted and not yet retired.
struct InFlight {
    op: Op,
    /// The bytes it writes (WRITE, SEND) or reads (READ).
    bytes: Vec<u8>,
    posted: Instant,
    /// Post to the requester's completion.
    latency: Option<Duration>,
    requester_ok: bool,
    /// The responder's receive completed (true when it consumes none).
    received: bool,
}

/// A completion on the requester's CQ: checked, and what the operation
/// left verified.
fn requester_done(
    pair: &RdmaPair,
    plan: &mut Plan,
    in_flight: &mut BTreeMap<u64, InFlight>,
    wc: &WorkCompletion,
) {
    let Some(f) = in_flight.get_mut(&wc.wr_id) else {
        plan.fail(format!(
            "a requester completion names work request {}, not in flight",
            wc.wr_id
        ));
        return;
    };
    let op = f.op;
    f.latency = Some(f.posted.elapsed());
    if wc.status != WcStatus::Success {
        plan.fail(format!(
            "{}: completed with status {} (vendor error {})",
            op.describe(),
            wc.status,
            wc.vendor_err
        ));
        plan.stop();
        retire(plan, in_flight, op.id, false);
        return;
    }
    let opcode = match op.kind {
        Kind::Write | Kind::WriteWithImm => WcOpcode::RdmaWrite,
        Kind::Read => WcOpcode::RdmaRead,
        Kind::Send | Kind::SendWithImm => WcOpcode::Send,
        Kind::FetchAdd => WcOpcode::FetchAdd,
        Kind::CompareSwap => WcOpcode::CompSwap,
    };
    if wc.opcode != opcode {
        plan.fail(format!(
            "{}: completed as {:?}, {opcode:?} expected",
            op.describe(),
            wc.opcode
        ));
    }
    f.requester_ok = true;
    let at = pair.offset(op.slot);
    let len = op.len as usize;
    match op.kind {
        Kind::Write | Kind::WriteWithImm => pair.remote.with(|b| {
            plan.verify(&op, "the responder's region", &f.bytes, &b[at..at + len]);
        }),
        Kind::Read => pair.local.with(|a| {
            plan.verify(&op, "the requester's buffer", &f.bytes, &a[at..at + len]);
        }),
        Kind::Send | Kind::SendWithImm => {}
        Kind::FetchAdd => plan.fetch_add_done(&op, pair.prior(op.slot)),
        Kind::CompareSwap => plan.compare_swap_done(&op, Some(pair.prior(op.slot))),
    }
    if f.received {
        retire(plan, in_flight, op.id, true);
    }
}

/// A completion on the responder's CQ: a receive an operation consumed.
fn responder_done(
    pair: &RdmaPair,
    plan: &mut Plan,
    in_flight: &mut BTreeMap<u64, InFlight>,
    wc: &WorkCompletion,
) {
    let Some(f) = in_flight.get_mut(&wc.wr_id) else {
        plan.fail(format!(
            "a responder completion names work request {}, not in flight",
            wc.wr_id
        ));
        return;
    };
    let op = f.op;
    f.received = true;
    if wc.status != WcStatus::Success {
        plan.fail(format!(
            "{}: the responder's receive completed with status {} (vendor error {})",
            op.describe(),
            wc.status,
            wc.vendor_err
        ));
        plan.stop();
        retire(plan, in_flight, op.id, false);
        return;
    }
    let opcode = if op.kind == Kind::WriteWithImm {
        WcOpcode::RecvRdmaWithImm
    } else {
        WcOpcode::Recv
    };
    let imm = wc
        .wc_flags
        .contains(WcFlags::WITH_IMM)
        .then_some(wc.imm_data);
    let expected_imm = op.kind.has_imm().then_some(op.imm);
    if wc.opcode != opcode || imm != expected_imm {
        plan.fail(format!(
            "{}: the responder's receive completed as {:?} with immediate {imm:?}, {opcode:?} with {expected_imm:?} expected",
            op.describe(),
            wc.opcode
        ));
    }
    if matches!(op.kind, Kind::Send | Kind::SendWithImm) {
        if wc.byte_len != op.len {
            plan.fail(format!(
                "{}: the responder received {} bytes",
                op.describe(),
                wc.byte_len
            ));
        }
        let at = pair.offset(op.slot);
        let len = op.len as usize;
        pair.recv.with(|b| {
            plan.verify(&op, "the receive buffer", &f.bytes, &b[at..at + len]);
        });
    }
    if f.requester_ok {
        retire(plan, in_flight, op.id, true);
    }
}

fn retire(plan: &mut Plan, in_flight: &mut BTreeMap<u64, InFlight>, id: u64, success: bool) {
    if let Some(f) = in_flight.remove(&id) {
        let latency = f.latency.unwrap_or_else(|| f.posted.elapsed());
        plan.retire(&f.op, success, latency);
    }
}

/// The report and the failures.
fn finish(
    plan: Plan,
    workload: &RdmaWorkload,
    elapsed: Duration,
    falcon: RdmaFalcon,
) -> (RdmaReport, Vec<String>) {
    let secs = elapsed.as_secs_f64().max(1e-9);
    let latency_us = plan
        .latency()
        .into_iter()
        .map(|(name, h)| (name, Latency::from_histogram(h)))
        .collect();
    let all = Latency::from_histogram(&plan.all);
    let c = plan.counts.clone();
    let failed = plan.failures.len() as u64;
    let failures: Vec<String> = plan
        .failures
        .into_iter()
        .take(MAX_FAILURES)
        .map(|f| format!("RDMA: {f}"))
        .collect();
    let report = RdmaReport {
        ok: failed == 0 && c.operations == workload.operations && c.errors == 0,
        transport: transport(workload),
        qps: workload.qps,
        queue_depth: workload.queue_depth,
        mtu: workload.mtu.bytes(),
        ordering: match workload.ordering {
            QpOrdering::Strong => "strong",
            QpOrdering::Weak => "weak",
            QpOrdering::Unordered => "unordered",
        },
        sizes: workload.sizes.clone(),
        operations: c.operations,
        writes: c.of(Kind::Write) + c.of(Kind::WriteWithImm),
        writes_with_imm: c.of(Kind::WriteWithImm),
        reads: c.of(Kind::Read),
        sends: c.of(Kind::Send) + c.of(Kind::SendWithImm),
        sends_with_imm: c.of(Kind::SendWithImm),
        fetch_adds: c.of(Kind::FetchAdd),
        compare_swaps: c.of(Kind::CompareSwap),
        compare_swaps_swapped: c.swaps,
        multi_mtu: c.multi_mtu,
        bytes: c.bytes,
        verified_bytes: c.verified_bytes,
        loss: f64::from(workload.faults.loss_ppm) / 1e6,
        reorder: f64::from(workload.faults.reorder_ppm) / 1e6,
        duplicate: f64::from(workload.faults.duplicate_ppm) / 1e6,
        elapsed_s: secs,
        ops_per_sec: c.operations as f64 / secs,
        mib_s: c.bytes as f64 / secs / f64::from(1 << 20),
        latency_us: all,
        latency_by_kind_us: latency_us,
        errors: c.errors,
        verify_failures: c.verify_failures,
        failures: failed,
        falcon,
    };
    (report, failures)
}

/// How the pair's engines run, for the report.
fn transport(workload: &RdmaWorkload) -> String {
    let d = &workload.engines;
    let psp = match psp_label(d) {
        "off" => "PSP off".to_string(),
        label => format!("PSP on ({label})"),
    };
    let connections = match workload.ordering.falcon() {
        falcon_core::api::OrderingMode::Ordered => "ordered",
        falcon_core::api::OrderingMode::Unordered => "unordered",
    };
    format!(
        "{psp}, {}, {connections} connections",
        d.rue.algorithm.label()
    )
}

/// The requester (A) and the responder (B): engines, devices and the
/// verbs objects (see the module doc).
struct RdmaPair {
    a: Side,
    b: Side,
    da: Device,
    db: Device,
    cq_a: Cq,
    cq_b: Cq,
    qps_a: Vec<Qpn>,
    qps_b: Vec<Qpn>,
    /// The requester's buffers (WRITE and SEND sources, READ and atomic
    /// sinks), a slot each.
    local: Region,
    local_mr: MemoryRegion,
    /// The responder's region WRITEs land in and READs read.
    remote: Region,
    remote_mr: MemoryRegion,
    /// The responder's receive buffers.
    recv: Region,
    recv_mr: MemoryRegion,
    /// The responder's counters: fetch-and-add ones, then each QP's
    /// compare-and-swap one.
    counters: Region,
    counters_mr: MemoryRegion,
    /// Bytes of a slot: the largest size.
    slot_bytes: usize,
    mtu: u32,
}

impl RdmaPair {
    fn new(workload: &RdmaWorkload) -> Result<RdmaPair> {
        let failed =
            |what: &str, e: &dyn std::fmt::Display| AppError::Failed(format!("RDMA {what}: {e}"));
        let mut demo = (*workload.engines).clone();
        demo.connection.ordering = Ordering::from(workload.ordering.falcon());
        // The pair's loops have no RUE core beside them.
        demo.rue.placement = RuePlacement::Inline;
        let built = setup(&demo, &Origin::default())?;
        let clock = SystemClock::new();
        let mut now_clock = clock;
        let now = now_clock.now();
        let mut a = Engine::<_, RdmaData>::new(built.initiator.clone(), now)
            .map_err(|e| failed("requester engine", &e))?;
        let mut b = Engine::<_, RdmaData>::new(built.target.clone(), now)
            .map_err(|e| failed("responder engine", &e))?;
        let mut da = Device::default();
        let mut db = Device::default();
        let depth = workload.queue_depth as u32;
        let cqe = (depth * workload.qps as u32 * 2).max(64);
        let (pd_a, pd_b) = (
            da.alloc_pd().map_err(|e| failed("PD", &e))?,
            db.alloc_pd().map_err(|e| failed("PD", &e))?,
        );
        let cq_a = da.create_cq(cqe).map_err(|e| failed("CQ", &e))?;
        let cq_b = db.create_cq(cqe).map_err(|e| failed("CQ", &e))?;
        let init = |cq| QpInitAttr {
            cap: QpCap {
                max_send_wr: depth,
                max_recv_wr: depth,
                max_send_sge: GATHER,
                max_recv_sge: SCATTER,
                max_inline_data: 0,
            },
            ordering: workload.ordering,
            ..QpInitAttr::new(QpType::Rc, cq)
        };
        let (mut qps_a, mut qps_b) = (Vec::new(), Vec::new());
        for i in 0..workload.qps as u32 {
            // One Falcon connection per QP, its CIDs the file's plus i
            // (RDMA-0.9 §6.6.1: an RC QP's connection is its CID).
            let spec = falcon_core::engine::PairSpec {
                a_cid: falcon_core::ids::ConnectionId::truncating(built.pair.a_cid.value() + i),
                b_cid: falcon_core::ids::ConnectionId::truncating(built.pair.b_cid.value() + i),
                ..built.pair.clone()
            };
            connect(now, &mut a, &mut b, &spec).map_err(|e| failed("connect", &e))?;
            let qa = da
                .create_qp(pd_a, init(cq_a))
                .map_err(|e| failed("QP", &e))?;
            let qb = db
                .create_qp(pd_b, init(cq_b))
                .map_err(|e| failed("QP", &e))?;
            ready(&mut da, qa, qb, spec.a_cid, workload.mtu).map_err(|e| failed("QP", &e))?;
            ready(&mut db, qb, qa, spec.b_cid, workload.mtu).map_err(|e| failed("QP", &e))?;
            qps_a.push(qa);
            qps_b.push(qb);
        }
        let slot_bytes = workload.sizes.iter().copied().max().unwrap_or(8).max(8) as usize;
        let bytes = slot_bytes * workload.qps * workload.queue_depth;
        let local = Region::new(bytes);
        let remote = Region::new(bytes);
        let recv = Region::new(bytes);
        let counters = Region::new(8 * (FETCH_ADD_COUNTERS + workload.qps));
        let local_mr = da
            .reg_mr(pd_a, &local, Access::LOCAL_WRITE)
            .map_err(|e| failed("MR", &e))?;
        let remote_mr = db
            .reg_mr(
                pd_b,
                &remote,
                Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
            )
            .map_err(|e| failed("MR", &e))?;
        let recv_mr = db
            .reg_mr(pd_b, &recv, Access::LOCAL_WRITE)
            .map_err(|e| failed("MR", &e))?;
        let counters_mr = db
            .reg_mr(pd_b, &counters, Access::LOCAL_WRITE | Access::REMOTE_ATOMIC)
            .map_err(|e| failed("MR", &e))?;

        let seed = workload.seed ^ 0x5244_4D41;
        let one_way_delay = LoopbackConfig::default().one_way_delay;
        let (a, b) = faulty_lcore_pair(a, b, workload.faults, seed, one_way_delay, clock);
        Ok(RdmaPair {
            a,
            b,
            da,
            db,
            cq_a,
            cq_b,
            qps_a,
            qps_b,
            local,
            local_mr,
            remote,
            remote_mr,
            recv,
            recv_mr,
            counters,
            counters_mr,
            slot_bytes,
            mtu: workload.mtu.bytes(),
        })
    }

    fn offset(&self, slot: usize) -> usize {
        slot * self.slot_bytes
    }

    /// `len` bytes of `mr` at slot offset `at`, as `pieces` entries when
    /// longer than one MTU.
    fn entries(&self, mr: &MemoryRegion, at: usize, len: u32, pieces: u32) -> SgList {
        let pieces = if len > self.mtu { pieces } else { 1 };
        let mut list = SgList::EMPTY;
        let mut start = 0;
        for i in 1..=pieces {
            let end = len / pieces * i + if i == pieces { len % pieces } else { 0 };
            let sge = Sge {
                addr: mr.addr_at((at as u64) + u64::from(start)),
                length: end - start,
                lkey: mr.lkey(),
            };
            // At most GATHER entries, within MAX_SGE.
            let _ = list.push(sge);
            start = end;
        }
        list
    }

    /// Posts `op` (and the receive it consumes first); `bytes` what it
    /// writes or reads. The bytes it must change are set to their
    /// complement first.
    fn post(&mut self, op: &Op, bytes: &[u8]) -> std::result::Result<(), String> {
        let at = self.offset(op.slot);
        let len = op.len as usize;
        let complement = |region: &Region| {
            region.with_mut(|b| {
                for (d, s) in b[at..at + len].iter_mut().zip(bytes) {
                    *d = !s;
                }
            });
        };
        let (qa, qb) = (self.qps_a[op.qp], self.qps_b[op.qp]);
        let remote_addr = self.remote_mr.addr_at(at as u64);
        let rkey = self.remote_mr.rkey();
        let counter_addr = self.counters_mr.addr_at(8 * op.counter as u64);
        let counter_rkey = self.counters_mr.rkey();
        let local = |pieces| self.entries(&self.local_mr, at, op.len, pieces);
        let (wr_op, sg_list) = match op.kind {
            Kind::Write => (WrOp::Write { remote_addr, rkey }, local(GATHER)),
            Kind::WriteWithImm => (
                WrOp::WriteWithImm {
                    remote_addr,
                    rkey,
                    imm: op.imm,
                },
                local(GATHER),
            ),
            Kind::Read => (WrOp::Read { remote_addr, rkey }, local(SCATTER)),
            Kind::Send => (WrOp::Send, local(GATHER)),
            Kind::SendWithImm => (WrOp::SendWithImm(op.imm), local(GATHER)),
            Kind::FetchAdd => (
                WrOp::FetchAdd {
                    remote_addr: counter_addr,
                    rkey: counter_rkey,
                    add: op.operand,
                },
                local(1),
            ),
            Kind::CompareSwap => (
                WrOp::CompareSwap {
                    remote_addr: counter_addr,
                    rkey: counter_rkey,
                    compare: op.compare,
                    swap: op.operand,
                },
                local(1),
            ),
        };
        match op.kind {
            Kind::Write | Kind::WriteWithImm => {
                self.local.write(at, bytes).map_err(|e| e.to_string())?;
                complement(&self.remote);
            }
            Kind::Read => {
                self.remote.write(at, bytes).map_err(|e| e.to_string())?;
                complement(&self.local);
            }
            Kind::Send | Kind::SendWithImm => {
                self.local.write(at, bytes).map_err(|e| e.to_string())?;
                complement(&self.recv);
            }
            Kind::FetchAdd | Kind::CompareSwap => {
                self.local
                    .write(at, &[0xFF; 8])
                    .map_err(|e| e.to_string())?;
            }
        }
        if op.kind.consumes_receive() {
            let sg_list = if op.kind == Kind::WriteWithImm {
                SgList::EMPTY
            } else {
                self.entries(&self.recv_mr, at, op.len, SCATTER)
            };
            self.db
                .post_recv(qb, RecvWr::new(op.id, sg_list))
                .map_err(|e| format!("the responder's receive: {e}"))?;
        }
        self.da
            .post_send(qa, SendWr::new(op.id, wr_op, sg_list))
            .map_err(|e| e.to_string())
    }

    /// The value an atomic left in its slot of the requester's buffers.
    fn prior(&self, slot: usize) -> u64 {
        let mut word = [0u8; 8];
        // The slot is at least 8 bytes and inside the region.
        let _ = self.local.read(self.offset(slot), &mut word);
        u64::from_le_bytes(word)
    }

    /// The responder's counters.
    fn counter_words(&self) -> Vec<u64> {
        self.counters.with(|b| {
            b.chunks_exact(8)
                .map(|w| u64::from_le_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]))
                .collect()
        })
    }

    /// One turn of each loop.
    fn turn(&mut self) {
        self.a.turn(&mut self.da);
        self.b.turn(&mut self.db);
    }

    /// What Falcon and the loopback did beneath the operations.
    fn falcon(&self) -> RdmaFalcon {
        let (a, b) = (self.a.engine.stats(), self.b.engine.stats());
        let mut drops = a.drops.clone();
        drops.merge(&b.drops);
        let (fa, fb) = (self.a.port.stats(), self.b.port.stats());
        let faults = FaultStats {
            lost: fa.lost + fb.lost,
            duplicated: fa.duplicated + fb.duplicated,
            reordered: fa.reordered + fb.reordered,
            corrupted: fa.corrupted + fb.corrupted,
        };
        let (sa, sb) = (self.da.stats(), self.db.stats());
        RdmaFalcon {
            retransmissions: a.retransmissions + b.retransmissions,
            drops: drops.iter().collect(),
            frames: a.tx_frames + b.tx_frames,
            frames_lost: faults.lost,
            frames_reordered: faults.reordered,
            frames_duplicated: faults.duplicated,
            pushes: sa.pushes + sb.pushes,
            pulls: sa.pulls + sb.pulls,
            rnr_nacks: sa.rnr_nacks,
            credit_waits: sa.credit_waits + sb.credit_waits,
        }
    }
}

/// RESET → INIT → RTR → RTS to `peer` over connection `cid` (RDMA-0.9
/// §6.6.1).
fn ready(
    device: &mut Device,
    qp: Qpn,
    peer: Qpn,
    cid: falcon_core::ids::ConnectionId,
    mtu: Mtu,
) -> std::result::Result<(), rdma_ulp::verbs::VerbsError> {
    let max_rd_atomic = device.caps().max_qp_rd_atom;
    let steps = [
        QpAttr {
            state: Some(QpState::Init),
            access: Some(Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC),
            ..QpAttr::default()
        },
        QpAttr {
            state: Some(QpState::Rtr),
            path_mtu: Some(mtu),
            dest_qpn: Some(peer),
            cid: Some(cid),
            max_dest_rd_atomic: Some(max_rd_atomic),
            min_rnr_timer: Some(RnrTimeout::SHORTEST),
            ..QpAttr::default()
        },
        QpAttr {
            state: Some(QpState::Rts),
            rnr_retry: Some(RNR_RETRY),
            max_rd_atomic: Some(max_rd_atomic),
            ..QpAttr::default()
        },
    ];
    for attr in steps {
        device.modify_qp(qp, &attr)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use falcon_core::testing::Faults;

    use super::*;
    use crate::democfg::schema::DemoConfig;

    fn workload(operations: u64, faults: Faults, ordering: QpOrdering) -> RdmaWorkload {
        RdmaWorkload {
            operations,
            qps: 3,
            queue_depth: 4,
            sizes: vec![64, 5000, 20000],
            mtu: Mtu::B1024,
            ordering,
            faults,
            engines: Box::new(DemoConfig::default()),
            seed: 4,
            timeout: Duration::from_secs(20),
        }
    }

    /// Strong and weak ordering under 3 % loss and reordering: every
    /// operation completes and verifies, every kind runs, messages of
    /// several MTUs among them, and Falcon retransmitted beneath them.
    #[test]
    fn the_phase_verifies_every_operation_under_loss() {
        let faults = Faults {
            loss_ppm: Faults::percent(3),
            reorder_ppm: Faults::percent(3),
            reorder_delay: Duration::from_micros(20),
            ..Faults::default()
        };
        for ordering in [QpOrdering::Strong, QpOrdering::Weak] {
            let (r, failures) = run(&workload(300, faults, ordering), true).unwrap();
            assert!(failures.is_empty() && r.ok, "{ordering:?}: {failures:?}");
            assert_eq!(r.operations, 300);
            assert!(
                r.writes_with_imm > 0
                    && r.writes > r.writes_with_imm
                    && r.reads > 0
                    && r.sends_with_imm > 0
                    && r.sends > r.sends_with_imm
                    && r.fetch_adds > 0
                    && r.compare_swaps > 0,
                "{r:?}"
            );
            assert!(r.multi_mtu > 50, "{r:?}");
            assert_eq!(r.verify_failures, 0);
            assert_eq!(r.verified_bytes, r.bytes, "every byte compared");
            assert!(
                r.falcon.frames_lost > 0 && r.falcon.retransmissions > 0,
                "{r:?}"
            );
        }
    }
}
