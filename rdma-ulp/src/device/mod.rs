//! The RDMA device: verbs objects over one Falcon engine.
//!
//! Layer: RDMA ULP over `falcon-core`'s public ULP API. Owns [`Device`]:
//! every verbs object of one engine (PDs, MRs, CQs, SRQs, AHs, QPs), the
//! verbs calls on them (the names are libibverbs': `alloc_pd`, `reg_mr`,
//! `create_cq`, `create_qp`, `modify_qp`, `post_send`, `post_recv`,
//! `poll_cq`...), and the [`Ulp<B, RdmaData>`](Ulp) the engine's lcore loop
//! drives for all its QPs. Sans-IO: verbs calls only queue work and read
//! results; the loop's turns move packets ([`Ulp::submit`]: work requests
//! into Falcon transactions; [`Ulp::on_event`]: requests, completions,
//! flow control and faults). Never reads a clock, never blocks, allocates
//! per work request only for multi-entry gathers and inline data.
//!
//! | file | concern |
//! |---|---|
//! | `mod.rs` | the object API, the loop hooks |
//! | `qp.rs` | QP contexts, the QP table |
//! | `requester.rs` | segmentation, submits, completions, RNR retries |
//! | `responder.rs` | requests: checks, placement, READ and atomics |
//! | `complete.rs` | work completions, in-order reporting, the ERR state |
//! | `flow.rs` | Xoff/Xon per connection and class, answers waiting |
//! | `pieces.rs` | the transactions in flight, by tag |
//! | `stats.rs` | counters, refusal reasons |

mod code;
mod complete;
mod flow;
mod pieces;
mod qp;
mod requester;
mod responder;
mod stats;

use core::ops::Range;
use std::collections::VecDeque;
use std::sync::Arc;

use falcon_core::api::{Engine, PacketBuf, Timestamp, Ulp, UlpEvent};

use crate::data::RdmaData;
use crate::verbs::ah::AddressHandle;
use crate::verbs::cq::CompletionQueue;
use crate::verbs::mr::MrTable;
use crate::verbs::qp::transition;
use crate::verbs::srq::{ReceiveQueue, SharedReceiveQueue};
use crate::verbs::table::Table;
use crate::verbs::{
    Access, Ah, AhAttr, AsyncEvent, Cq, ErrorMode, MemoryRegion, Pd, PostError, QpAttr, QpInfo,
    QpInitAttr, QpOrdering, QpState, QpType, RecvWr, Region, SendFlags, SendWr, Srq, SrqInitAttr,
    VerbsError, WcOpcode, WcStatus, WorkCompletion, WrOp, MAX_RD_ATOMIC, MAX_SGE,
};
use crate::wire::Qpn;

use flow::Flow;
use pieces::PieceTable;
use qp::{Qp, QpTable, SendEntry};

pub use code::RemoteCode;
pub use responder::UD_GRH_LEN;
pub use stats::{DeviceStats, Refusal};

/// The largest message: 2^31 bytes (InfiniBand's).
pub const MAX_MESSAGE_LEN: u64 = 1 << 31;

/// What a device offers (`struct ibv_device_attr`, the limits that apply).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceCaps {
    /// QPs (at most 65,536: a QPN's slot is 16 bits).
    pub max_qp: u32,
    /// Work requests per send or receive queue.
    pub max_qp_wr: u32,
    pub max_sge: u32,
    pub max_cq: u32,
    pub max_cqe: u32,
    pub max_mr: u32,
    pub max_pd: u32,
    pub max_srq: u32,
    pub max_srq_wr: u32,
    pub max_ah: u32,
    /// READs and atomics outstanding per QP.
    pub max_qp_rd_atom: u8,
    pub max_inline_data: u32,
}

impl Default for DeviceCaps {
    fn default() -> Self {
        DeviceCaps {
            max_qp: 4096,
            max_qp_wr: 16_384,
            max_sge: MAX_SGE as u32,
            max_cq: 4096,
            max_cqe: 1 << 20,
            max_mr: 1 << 16,
            max_pd: 4096,
            max_srq: 1024,
            max_srq_wr: 16_384,
            max_ah: 1 << 16,
            max_qp_rd_atom: MAX_RD_ATOMIC,
            max_inline_data: 256,
        }
    }
}

/// A protection domain as the device keeps it.
#[derive(Debug, Default)]
struct ProtectionDomain {
    /// MRs, QPs, SRQs and AHs in it.
    users: u32,
}

/// The RDMA device of one engine (see the module doc).
#[derive(Debug)]
pub struct Device {
    caps: DeviceCaps,
    pds: Table<ProtectionDomain>,
    mrs: MrTable,
    cqs: Table<CompletionQueue>,
    srqs: Table<SharedReceiveQueue>,
    ahs: Table<AddressHandle>,
    qps: QpTable,
    pieces: PieceTable,
    flow: Flow,
    /// QPs with pieces to submit (slot indices).
    active: VecDeque<u32>,
    /// QPs whose completion overran a CQ: to ERR at the end of the call.
    overran: Vec<u32>,
    /// Completions being reported, reused (no allocation per completion).
    send_scratch: Vec<(Option<WorkCompletion>, bool)>,
    recv_scratch: Vec<WorkCompletion>,
    events: VecDeque<AsyncEvent>,
    /// Epochs are unique across QPs (a new QP in a reused slot never
    /// takes a completion of its predecessor for its own).
    next_epoch: u32,
    stats: DeviceStats,
}

impl Default for Device {
    fn default() -> Self {
        Device::new(DeviceCaps::default())
    }
}

impl Device {
    /// A device with `caps` and no object.
    pub fn new(caps: DeviceCaps) -> Device {
        Device {
            caps,
            pds: Table::new(caps.max_pd as usize),
            mrs: MrTable::new(caps.max_mr as usize),
            cqs: Table::new(caps.max_cq as usize),
            srqs: Table::new(caps.max_srq as usize),
            ahs: Table::new(caps.max_ah as usize),
            qps: QpTable::new(caps.max_qp as usize),
            pieces: PieceTable::default(),
            flow: Flow::default(),
            active: VecDeque::new(),
            overran: Vec::new(),
            send_scratch: Vec::new(),
            recv_scratch: Vec::new(),
            events: VecDeque::new(),
            next_epoch: 1,
            stats: DeviceStats::default(),
        }
    }

    /// `ibv_query_device`.
    pub fn caps(&self) -> &DeviceCaps {
        &self.caps
    }

    pub fn stats(&self) -> &DeviceStats {
        &self.stats
    }

    /// `ibv_alloc_pd`.
    ///
    /// # Errors
    ///
    /// [`VerbsError::LimitReached`].
    pub fn alloc_pd(&mut self) -> Result<Pd, VerbsError> {
        self.pds
            .insert(ProtectionDomain::default())
            .map(Pd)
            .ok_or(VerbsError::LimitReached { what: "PDs" })
    }

    /// `ibv_dealloc_pd`.
    ///
    /// # Errors
    ///
    /// [`VerbsError::UnknownHandle`], or [`VerbsError::Busy`] while MRs,
    /// QPs, SRQs or AHs are in it.
    pub fn dealloc_pd(&mut self, pd: Pd) -> Result<(), VerbsError> {
        let entry = self
            .pds
            .get(pd.0)
            .ok_or(VerbsError::UnknownHandle { what: "PD" })?;
        if entry.users > 0 {
            return Err(VerbsError::Busy { what: "PD" });
        }
        self.pds.remove(pd.0);
        Ok(())
    }

    fn pd_use(&mut self, pd: Pd, delta: i32) -> Result<(), VerbsError> {
        let entry = self
            .pds
            .get_mut(pd.0)
            .ok_or(VerbsError::UnknownHandle { what: "PD" })?;
        entry.users = entry.users.saturating_add_signed(delta);
        Ok(())
    }

    /// `ibv_reg_mr` of the whole of `region`.
    ///
    /// # Errors
    ///
    /// See [`reg_mr_range`](Self::reg_mr_range).
    pub fn reg_mr(
        &mut self,
        pd: Pd,
        region: &Region,
        access: Access,
    ) -> Result<MemoryRegion, VerbsError> {
        self.reg_mr_range(pd, region, 0..region.len(), access)
    }

    /// `ibv_reg_mr` of `range` of `region`: no copy, the device places
    /// into and reads from the caller's region.
    ///
    /// # Errors
    ///
    /// [`VerbsError::UnknownHandle`] (PD), [`VerbsError::InvalidAttribute`]
    /// (a range outside the region; REMOTE_WRITE or REMOTE_ATOMIC without
    /// LOCAL_WRITE), [`VerbsError::LimitReached`].
    pub fn reg_mr_range(
        &mut self,
        pd: Pd,
        region: &Region,
        range: Range<usize>,
        access: Access,
    ) -> Result<MemoryRegion, VerbsError> {
        if self.pds.get(pd.0).is_none() {
            return Err(VerbsError::UnknownHandle { what: "PD" });
        }
        let mr = self.mrs.register(pd, region, range, access)?;
        self.pd_use(pd, 1)?;
        Ok(mr)
    }

    /// `ibv_dereg_mr`: its keys fail from now on (a packet already in
    /// Falcon still reads the region it holds).
    ///
    /// # Errors
    ///
    /// [`VerbsError::UnknownHandle`] if already deregistered.
    pub fn dereg_mr(&mut self, mr: &MemoryRegion) -> Result<(), VerbsError> {
        if !self.mrs.deregister(mr.lkey().0) {
            return Err(VerbsError::UnknownHandle { what: "MR" });
        }
        self.pd_use(mr.pd(), -1)
    }

    /// Whether the memory region of `mr` is registered and not
    /// invalidated (a SEND with Invalidate invalidates it).
    pub fn mr_valid(&self, mr: &MemoryRegion) -> bool {
        self.mrs.is_valid(mr.lkey().0)
    }

    /// `ibv_create_cq` with room for `cqe` completions.
    ///
    /// # Errors
    ///
    /// [`VerbsError::InvalidAttribute`] (0 or above `max_cqe`),
    /// [`VerbsError::LimitReached`].
    pub fn create_cq(&mut self, cqe: u32) -> Result<Cq, VerbsError> {
        if cqe == 0 || cqe > self.caps.max_cqe {
            return Err(VerbsError::InvalidAttribute {
                name: "cqe",
                why: "1..=max_cqe",
            });
        }
        self.cqs
            .insert(CompletionQueue::new(cqe as usize))
            .map(Cq)
            .ok_or(VerbsError::LimitReached { what: "CQs" })
    }

    /// `ibv_destroy_cq`.
    ///
    /// # Errors
    ///
    /// [`VerbsError::UnknownHandle`], or [`VerbsError::Busy`] while QPs
    /// complete into it.
    pub fn destroy_cq(&mut self, cq: Cq) -> Result<(), VerbsError> {
        let entry = self
            .cqs
            .get(cq.0)
            .ok_or(VerbsError::UnknownHandle { what: "CQ" })?;
        if entry.users > 0 {
            return Err(VerbsError::Busy { what: "CQ" });
        }
        self.cqs.remove(cq.0);
        Ok(())
    }

    /// `ibv_poll_cq`: the oldest completions into `wc`; how many.
    ///
    /// # Errors
    ///
    /// [`VerbsError::UnknownHandle`].
    pub fn poll_cq(&mut self, cq: Cq, wc: &mut [WorkCompletion]) -> Result<usize, VerbsError> {
        let entry = self
            .cqs
            .get_mut(cq.0)
            .ok_or(VerbsError::UnknownHandle { what: "CQ" })?;
        let mut n = 0;
        for slot in wc.iter_mut() {
            let Some(completion) = entry.pop() else {
                break;
            };
            *slot = completion;
            n += 1;
        }
        Ok(n)
    }

    /// The oldest completion of `cq`, if any (an unknown CQ has none).
    pub fn poll_cq_one(&mut self, cq: Cq) -> Option<WorkCompletion> {
        self.cqs.get_mut(cq.0)?.pop()
    }

    /// Completions waiting in `cq`, and whether it overran.
    pub fn cq_state(&self, cq: Cq) -> Option<(usize, bool)> {
        let entry = self.cqs.get(cq.0)?;
        Some((entry.len(), entry.overrun()))
    }

    /// `ibv_create_srq`.
    ///
    /// # Errors
    ///
    /// [`VerbsError::UnknownHandle`] (PD), [`VerbsError::InvalidAttribute`]
    /// (sizes), [`VerbsError::LimitReached`].
    pub fn create_srq(&mut self, pd: Pd, attr: SrqInitAttr) -> Result<Srq, VerbsError> {
        if self.pds.get(pd.0).is_none() {
            return Err(VerbsError::UnknownHandle { what: "PD" });
        }
        if attr.max_wr == 0 || attr.max_wr > self.caps.max_srq_wr {
            return Err(VerbsError::InvalidAttribute {
                name: "max_wr",
                why: "1..=max_srq_wr",
            });
        }
        if attr.max_sge == 0 || attr.max_sge > self.caps.max_sge {
            return Err(VerbsError::InvalidAttribute {
                name: "max_sge",
                why: "1..=max_sge",
            });
        }
        let srq = self
            .srqs
            .insert(SharedReceiveQueue {
                pd,
                queue: ReceiveQueue::new(attr.max_wr as usize, attr.max_sge as usize),
                limit: attr.srq_limit,
                users: 0,
            })
            .map(Srq)
            .ok_or(VerbsError::LimitReached { what: "SRQs" })?;
        self.pd_use(pd, 1)?;
        Ok(srq)
    }

    /// `ibv_modify_srq` of the limit: arms `IBV_EVENT_SRQ_LIMIT_REACHED`
    /// for when fewer than `limit` receives remain (0 disarms).
    ///
    /// # Errors
    ///
    /// [`VerbsError::UnknownHandle`].
    pub fn arm_srq_limit(&mut self, srq: Srq, limit: u32) -> Result<(), VerbsError> {
        let entry = self
            .srqs
            .get_mut(srq.0)
            .ok_or(VerbsError::UnknownHandle { what: "SRQ" })?;
        entry.limit = limit;
        Ok(())
    }

    /// `ibv_destroy_srq`.
    ///
    /// # Errors
    ///
    /// [`VerbsError::UnknownHandle`], [`VerbsError::Busy`] while QPs use it.
    pub fn destroy_srq(&mut self, srq: Srq) -> Result<(), VerbsError> {
        let entry = self
            .srqs
            .get(srq.0)
            .ok_or(VerbsError::UnknownHandle { what: "SRQ" })?;
        if entry.users > 0 {
            return Err(VerbsError::Busy { what: "SRQ" });
        }
        let pd = entry.pd;
        self.srqs.remove(srq.0);
        self.pd_use(pd, -1)
    }

    /// `ibv_post_srq_recv`.
    ///
    /// # Errors
    ///
    /// [`PostError::UnknownQueue`], [`PostError::QueueFull`],
    /// [`PostError::TooManySge`].
    pub fn post_srq_recv(&mut self, srq: Srq, wr: RecvWr) -> Result<(), PostError> {
        self.srqs
            .get_mut(srq.0)
            .ok_or(PostError::UnknownQueue)?
            .queue
            .post(wr)
    }

    /// Receives posted to `srq` and not yet consumed.
    pub fn srq_len(&self, srq: Srq) -> Option<usize> {
        Some(self.srqs.get(srq.0)?.queue.len())
    }

    /// `ibv_create_ah`: the UD destination of a Falcon connection
    /// (RDMA-0.9 §6.6.3).
    ///
    /// # Errors
    ///
    /// [`VerbsError::UnknownHandle`] (PD), [`VerbsError::LimitReached`].
    pub fn create_ah(&mut self, pd: Pd, attr: AhAttr) -> Result<Ah, VerbsError> {
        if self.pds.get(pd.0).is_none() {
            return Err(VerbsError::UnknownHandle { what: "PD" });
        }
        let ah = self
            .ahs
            .insert(AddressHandle { pd, attr })
            .map(Ah)
            .ok_or(VerbsError::LimitReached { what: "AHs" })?;
        self.pd_use(pd, 1)?;
        Ok(ah)
    }

    /// `ibv_destroy_ah`.
    ///
    /// # Errors
    ///
    /// [`VerbsError::UnknownHandle`].
    pub fn destroy_ah(&mut self, ah: Ah) -> Result<(), VerbsError> {
        let entry = self
            .ahs
            .remove(ah.0)
            .ok_or(VerbsError::UnknownHandle { what: "AH" })?;
        self.pd_use(entry.pd, -1)
    }

    /// `ibv_create_qp`, in RESET; its QP number.
    ///
    /// # Errors
    ///
    /// [`VerbsError::UnknownHandle`] (PD, CQs, SRQ),
    /// [`VerbsError::WrongPd`] (an SRQ of another PD),
    /// [`VerbsError::InvalidAttribute`] (queue sizes beyond the device's;
    /// an unordered QP in verbs-compatible error mode, which RDMA-0.9 §6.4
    /// does not offer), [`VerbsError::LimitReached`].
    pub fn create_qp(&mut self, pd: Pd, init: QpInitAttr) -> Result<Qpn, VerbsError> {
        if self.pds.get(pd.0).is_none() {
            return Err(VerbsError::UnknownHandle { what: "PD" });
        }
        for cq in [init.send_cq, init.recv_cq] {
            if self.cqs.get(cq.0).is_none() {
                return Err(VerbsError::UnknownHandle { what: "CQ" });
            }
        }
        if let Some(srq) = init.srq {
            let entry = self
                .srqs
                .get(srq.0)
                .ok_or(VerbsError::UnknownHandle { what: "SRQ" })?;
            if entry.pd != pd {
                return Err(VerbsError::WrongPd { what: "SRQ" });
            }
        }
        let cap = init.cap;
        let invalid = |name, why| Err(VerbsError::InvalidAttribute { name, why });
        if cap.max_send_wr == 0 || cap.max_send_wr > self.caps.max_qp_wr {
            return invalid("max_send_wr", "1..=max_qp_wr");
        }
        if init.srq.is_none() && (cap.max_recv_wr == 0 || cap.max_recv_wr > self.caps.max_qp_wr) {
            return invalid("max_recv_wr", "1..=max_qp_wr");
        }
        if cap.max_send_sge > self.caps.max_sge || cap.max_recv_sge > self.caps.max_sge {
            return invalid("max_sge", "at most max_sge");
        }
        if cap.max_inline_data > self.caps.max_inline_data {
            return invalid("max_inline_data", "at most the device's");
        }
        if init.ordering == QpOrdering::Unordered && init.error_mode == ErrorMode::VerbsCompatible {
            return invalid(
                "error_mode",
                "an unordered QP completes in error (RDMA-0.9 §6.4)",
            );
        }
        let qpn = self
            .qps
            .next_qpn()
            .ok_or(VerbsError::LimitReached { what: "QPs" })?;
        let mut qp = Qp::new(QpInfo::new(qpn, pd, init));
        qp.epoch = self.new_epoch();
        self.qps.insert(qp);
        self.pd_use(pd, 1)?;
        for cq in [init.send_cq, init.recv_cq] {
            if let Some(entry) = self.cqs.get_mut(cq.0) {
                entry.users += 1;
            }
        }
        if let Some(entry) = init.srq.and_then(|srq| self.srqs.get_mut(srq.0)) {
            entry.users += 1;
        }
        Ok(qpn)
    }

    fn new_epoch(&mut self) -> u32 {
        let epoch = self.next_epoch;
        self.next_epoch = self.next_epoch.wrapping_add(1);
        epoch
    }

    /// `ibv_modify_qp`: a state change and attributes, checked against the
    /// state machine and its attribute table
    /// ([`verbs::qp`](crate::verbs::qp)). To RESET empties the queues
    /// without completions; to ERR flushes them (`IBV_WC_WR_FLUSH_ERR`).
    ///
    /// # Errors
    ///
    /// [`VerbsError::UnknownHandle`], the state machine's errors, and
    /// [`VerbsError::InvalidAttribute`] for a `min_rnr_timer`,
    /// `max_rd_atomic` or `path_mtu` the device does not offer.
    pub fn modify_qp(&mut self, qpn: Qpn, attr: &QpAttr) -> Result<(), VerbsError> {
        let index = self
            .qps
            .index(qpn)
            .ok_or(VerbsError::UnknownHandle { what: "QP" })?;
        let (qp_type, from) = {
            let qp = self
                .qps
                .at(index)
                .ok_or(VerbsError::UnknownHandle { what: "QP" })?;
            (qp.info.init.qp_type, qp.info.state)
        };
        let to = transition(qp_type, from, attr)?;
        for (value, name) in [
            (attr.max_rd_atomic, "max_rd_atomic"),
            (attr.max_dest_rd_atomic, "max_dest_rd_atomic"),
        ] {
            if value.is_some_and(|n| n > self.caps.max_qp_rd_atom) {
                return Err(VerbsError::InvalidAttribute {
                    name,
                    why: "above max_qp_rd_atom",
                });
            }
        }
        if to == QpState::Error && from != QpState::Error {
            // A modify to ERR raises no asynchronous event: the caller
            // asked for it.
            self.fail_qp(index, None, None);
            return Ok(());
        }
        let epoch = (to == QpState::Reset).then(|| self.new_epoch());
        let Some(qp) = self.qps.at_mut(index) else {
            return Err(VerbsError::UnknownHandle { what: "QP" });
        };
        if let Some(epoch) = epoch {
            qp.reset();
            qp.epoch = epoch;
        }
        if attr.cid.is_some() {
            qp.connection = None;
        }
        qp.info.apply(attr, to);
        if to == QpState::Rts && !qp.sq.is_empty() {
            self.activate(index);
        }
        Ok(())
    }

    /// `ibv_query_qp`.
    ///
    /// # Errors
    ///
    /// [`VerbsError::UnknownHandle`].
    pub fn query_qp(&self, qpn: Qpn) -> Result<QpInfo, VerbsError> {
        self.qps
            .get(qpn)
            .map(|qp| qp.info)
            .ok_or(VerbsError::UnknownHandle { what: "QP" })
    }

    /// The state of QP `qpn`.
    pub fn qp_state(&self, qpn: Qpn) -> Option<QpState> {
        self.qps.get(qpn).map(|qp| qp.info.state)
    }

    /// `ibv_destroy_qp`: its work requests go without completions, work in
    /// Falcon is ignored when it completes.
    ///
    /// # Errors
    ///
    /// [`VerbsError::UnknownHandle`].
    pub fn destroy_qp(&mut self, qpn: Qpn) -> Result<(), VerbsError> {
        let index = self
            .qps
            .index(qpn)
            .ok_or(VerbsError::UnknownHandle { what: "QP" })?;
        let qp = self
            .qps
            .remove(qpn)
            .ok_or(VerbsError::UnknownHandle { what: "QP" })?;
        self.active.retain(|&i| i != index);
        self.overran.retain(|&i| i != index);
        let init = qp.info.init;
        for cq in [init.send_cq, init.recv_cq] {
            if let Some(entry) = self.cqs.get_mut(cq.0) {
                entry.users = entry.users.saturating_sub(1);
            }
        }
        if let Some(entry) = init.srq.and_then(|srq| self.srqs.get_mut(srq.0)) {
            entry.users = entry.users.saturating_sub(1);
        }
        self.pd_use(qp.info.pd, -1)
    }

    /// `ibv_post_send`: queues `wr`; its packets go on the loop's next
    /// turn. In ERR it completes at once with `IBV_WC_WR_FLUSH_ERR`.
    ///
    /// # Errors
    ///
    /// [`PostError::UnknownQueue`], [`PostError::WrongState`] (RESET, INIT,
    /// RTR), [`PostError::QueueFull`], [`PostError::TooManySge`],
    /// [`PostError::Unsupported`] (READ, WRITE or atomics on UD; WRITE with
    /// immediate on an unordered QP, RDMA-0.9 §6.4),
    /// [`PostError::TooLong`] (a UD send or an unordered QP's SEND above
    /// one MTU, RDMA-0.9 §6.4; any message above 2^31 bytes),
    /// [`PostError::BadDestination`], [`PostError::InlineTooLong`].
    pub fn post_send(&mut self, qpn: Qpn, wr: SendWr) -> Result<(), PostError> {
        let index = self.qps.index(qpn).ok_or(PostError::UnknownQueue)?;
        let qp = self.qps.at(index).ok_or(PostError::UnknownQueue)?;
        let info = qp.info;
        let state = info.state;
        if !matches!(state, QpState::Rts | QpState::Error) {
            return Err(PostError::WrongState(state));
        }
        if qp.sq.len() >= info.init.cap.max_send_wr as usize {
            return Err(PostError::QueueFull);
        }
        let max_sge = info.init.cap.max_send_sge.max(1) as usize;
        if wr.sg_list.len() > max_sge {
            return Err(PostError::TooManySge { max: max_sge });
        }
        let len = wr.sg_list.total_len();
        if len > MAX_MESSAGE_LEN {
            return Err(PostError::TooLong {
                len,
                max: MAX_MESSAGE_LEN,
            });
        }
        let mtu = u64::from(info.path_mtu.bytes());
        match info.init.qp_type {
            QpType::Ud => {
                if !matches!(wr.op, WrOp::Send | WrOp::SendWithImm(_)) {
                    return Err(PostError::Unsupported {
                        why: "a UD QP only sends",
                    });
                }
                let ud = wr.ud.ok_or(PostError::BadDestination)?;
                let ah = self.ahs.get(ud.ah.0).ok_or(PostError::BadDestination)?;
                if ah.pd != info.pd {
                    return Err(PostError::BadDestination);
                }
                if len > mtu {
                    return Err(PostError::TooLong { len, max: mtu });
                }
            }
            QpType::Rc => {
                if info.init.ordering == QpOrdering::Unordered {
                    if matches!(wr.op, WrOp::WriteWithImm { .. }) {
                        return Err(PostError::Unsupported {
                            why: "no WRITE with immediate on an unordered QP (RDMA-0.9 §6.4)",
                        });
                    }
                    if wr.op.is_send() && len > mtu {
                        return Err(PostError::TooLong { len, max: mtu });
                    }
                }
            }
        }
        let inline = if wr.send_flags.contains(SendFlags::INLINE) && !wr.op.writes_locally() {
            let max = info.init.cap.max_inline_data as usize;
            // In range: at most 2^31.
            if len as usize > max {
                return Err(PostError::InlineTooLong {
                    len: len as usize,
                    max,
                });
            }
            self.copy_inline(&wr, info.pd)
        } else {
            None
        };
        let signaled = info.init.sq_sig_all || wr.send_flags.contains(SendFlags::SIGNALED);
        self.stats.sends_posted += 1;
        let entry = SendEntry::new(wr, signaled, inline);
        if state == QpState::Error {
            self.flush_posted_send(index, entry);
            return Ok(());
        }
        if let Some(qp) = self.qps.at_mut(index) {
            qp.sq.push_back(entry);
        }
        self.activate(index);
        Ok(())
    }

    /// The bytes of an inline send, copied now; `None` if a key does not
    /// allow it (the send then fails with `IBV_WC_LOC_PROT_ERR`).
    fn copy_inline(&self, wr: &SendWr, pd: Pd) -> Option<Arc<[u8]>> {
        let mut bytes = Vec::with_capacity(wr.sg_list.total_len() as usize);
        for sge in wr.sg_list.iter() {
            let span = self
                .mrs
                .check(
                    sge.lkey.0,
                    pd,
                    sge.addr,
                    u64::from(sge.length),
                    Access::EMPTY,
                )
                .ok()?;
            let start = bytes.len();
            bytes.resize(start + span.len, 0);
            span.region.read(span.offset, &mut bytes[start..]).ok()?;
        }
        Some(bytes.into())
    }

    /// `ibv_post_recv`. In ERR it completes at once with
    /// `IBV_WC_WR_FLUSH_ERR`.
    ///
    /// # Errors
    ///
    /// [`PostError::UnknownQueue`], [`PostError::WrongState`] (RESET),
    /// [`PostError::UsesSrq`], [`PostError::QueueFull`],
    /// [`PostError::TooManySge`].
    pub fn post_recv(&mut self, qpn: Qpn, wr: RecvWr) -> Result<(), PostError> {
        let index = self.qps.index(qpn).ok_or(PostError::UnknownQueue)?;
        let qp = self.qps.at_mut(index).ok_or(PostError::UnknownQueue)?;
        let state = qp.info.state;
        if !state.takes_receives() {
            return Err(PostError::WrongState(state));
        }
        if qp.info.init.srq.is_some() {
            return Err(PostError::UsesSrq);
        }
        if state == QpState::Error {
            let wc = WorkCompletion {
                wr_id: wr.wr_id,
                status: WcStatus::WrFlushErr,
                opcode: WcOpcode::Recv,
                qp_num: qp.qpn().value(),
                ..WorkCompletion::default()
            };
            let cq = qp.info.init.recv_cq;
            self.push_wc(cq, index, wc);
            self.fail_overrun();
            return Ok(());
        }
        qp.rq.post(wr)
    }

    /// `ibv_get_async_event`: the next asynchronous event, if any.
    pub fn poll_async_event(&mut self) -> Option<AsyncEvent> {
        self.events.pop_front()
    }

    /// Puts QP slot `index` on the list of QPs with pieces to submit.
    fn activate(&mut self, index: u32) {
        if let Some(qp) = self.qps.at_mut(index) {
            if !qp.active {
                qp.active = true;
                self.active.push_back(index);
            }
        }
    }
}

impl<B: PacketBuf> Ulp<B, RdmaData> for Device {
    fn submit(&mut self, now: Timestamp, engine: &mut Engine<B, RdmaData>) {
        engine.report_receiver_not_ready(true);
        self.take_rnr_nacks(engine);
        self.send_waiting_answers(now, engine);
        self.send_work(now, engine);
        self.fail_overrun();
    }

    fn on_event(
        &mut self,
        now: Timestamp,
        engine: &mut Engine<B, RdmaData>,
        event: UlpEvent<B, RdmaData>,
    ) {
        match event {
            UlpEvent::Request(request) => self.on_request(now, engine, request),
            UlpEvent::Completion(completion) => self.on_completion(engine, completion),
            UlpEvent::ConnectionError { connection, fault } => {
                self.stats.connection_faults += 1;
                if fault.is_fatal() {
                    self.on_connection_lost(connection);
                }
            }
            UlpEvent::Xoff { connection, class } => {
                self.stats.xoff += 1;
                self.flow.stop(connection, class);
            }
            UlpEvent::Xon { connection, class } => {
                self.stats.xon += 1;
                self.flow.start(connection, class);
            }
        }
        self.fail_overrun();
    }
}
