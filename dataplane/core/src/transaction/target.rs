//! The target side of a connection's transaction sublayer (OCP Falcon 0.9
//! §8.5).
//!
//! Layer: transaction sublayer. Owns the target variables BRSN (the base of
//! the RSN ring: oldest request not finished) and NRSN (next RSN to deliver
//! on an ordered connection), the per-request state of §8.5.1's table, the
//! network-request admission of arrivals (HoL, credits; a refusal is a
//! resource NACK), reordering by RSN (§8.5.2), the ULP's answers (ACK, RNR,
//! CIE, NRE, invalid CID; §8.5.3.4–8.5.3.5, §11 target table), Pull Data
//! and its queue, pull RNR redelivery timers and the soft-state reclaim of
//! requests the ULP never answers. A Push Data payload it keeps keeps its
//! frame, which reaches the ULP without a copy ([`RxPayload::store`], see
//! [`crate::transaction::payload`]). Never builds
//! a packet; never panics on packet input (an RSN outside the ring or a
//! repeated RSN is a counted drop and a connection error event).

use std::collections::VecDeque;

use core::time::Duration;

use crate::delivery::{Arrival, OrderingMode, OutgoingPacket, PacketKind, Refusal, UlpNack};
use crate::drop::DropReason;
use crate::port::{FrameBuf, PacketBuf};
use crate::resources::{CreditClass, Demand};
use crate::seq::{Psn, Rsn};
use crate::time::Timestamp;
use crate::transaction::payload::{Payload, RxPayload};
use crate::transaction::ring::{RingPool, SlotRing};
use crate::transaction::source::{DataSource, TxPayload, UlpHeader, ULP_HEADER_CAPACITY};
use crate::transaction::ulp::{
    ConnectionFault, RejectReason, Rejected, Request, TransactionKind, UlpCommandError, UlpEvent,
};
use crate::transaction::{payload_handle, Ctx, Role};
use crate::wire::RnrTimeout;

/// Target request states (OCP Falcon 0.9 §8.5.1, table p.51), plus the
/// ring's own states (`Unseen`, `Skipped`) and the RNR and NACK outcomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TargetState {
    /// Not arrived yet: a hole in the RSN ring.
    Unseen,
    /// Pull Request received from the network (held until its turn).
    PullReqRx,
    /// Pull Request delivered to the ULP.
    PullReqUlpTx,
    /// Pull Request ACKed by the ULP.
    PullReqUlpAckd,
    /// Pull Data received from the ULP.
    PullDataUlpRx,
    /// Pull Data sent to the initiator.
    PullDataTx,
    /// Pull Data ACKed by the initiator: finished.
    PullDataAckd,
    /// Push Data received from the network (held until its turn).
    PushDataRx,
    /// Push Data delivered to the ULP.
    PushReqUlpTx,
    /// Push Data ACKed by the ULP: finished.
    PushReqUlpAckd,
    /// The ULP RNR-NACKed a pull: redelivered after its timeout (§8.5.3.4).
    PullReqRnrWait,
    /// The ULP RNR-NACKed a push: redelivered when the initiator
    /// retransmits it (§8.5.3.4, §11 target table).
    PushDataRnrWait,
    /// The ULP NACKed it (CIE, NRE, invalid CID): finished.
    Nacked,
    /// The initiator resynced this RSN away: finished.
    Skipped,
}

impl TargetState {
    const fn is_finished(self) -> bool {
        matches!(
            self,
            TargetState::PullDataAckd
                | TargetState::PushReqUlpAckd
                | TargetState::Nacked
                | TargetState::Skipped
        )
    }

    /// Received and waiting for its turn to be delivered.
    const fn is_held(self) -> bool {
        matches!(self, TargetState::PullReqRx | TargetState::PushDataRx)
    }

    /// Delivered and awaiting the ULP's answer.
    const fn awaits_ulp(self) -> bool {
        matches!(self, TargetState::PullReqUlpTx | TargetState::PushReqUlpTx)
    }
}

#[derive(Debug)]
pub(crate) struct Slot<B: PacketBuf, S> {
    state: TargetState,
    kind: TransactionKind,
    psn: Psn,
    request_length: u16,
    /// A received Push Data payload, in its frame, until delivered: held
    /// in state `PushDataRx` only.
    payload: Payload<B>,
    /// A Pull Request's ULP header (kept for an RNR redelivery), then the
    /// Pull Data's.
    header: UlpHeader,
    /// The Pull Data's source until it is acknowledged.
    source: Option<S>,
    /// Network-request resources held (§8.2.4).
    network: Demand,
    /// ULP-data resources held by the Pull Data.
    data: Demand,
    /// Delivered again after an RNR NACK.
    redelivery: bool,
    /// When it was (last) delivered to the ULP.
    delivered_at: Timestamp,
}

impl<B: PacketBuf, S> Default for Slot<B, S> {
    fn default() -> Self {
        Slot::unseen()
    }
}

impl<B: PacketBuf, S> Slot<B, S> {
    /// Back to [`unseen`](Self::unseen), field by field in place (see
    /// `SlotRing`).
    fn reset(&mut self) {
        self.state = TargetState::Unseen;
        self.kind = TransactionKind::Push;
        self.psn = Psn::new(0);
        self.request_length = 0;
        debug_assert!(
            !self.payload.has_frame(),
            "a frame is released when its state ends"
        );
        self.payload = Payload::new();
        self.header = UlpHeader::EMPTY;
        self.source = None;
        self.network = Demand::ZERO;
        self.data = Demand::ZERO;
        self.redelivery = false;
        self.delivered_at = Timestamp::ZERO;
    }

    const fn unseen() -> Self {
        Slot {
            state: TargetState::Unseen,
            kind: TransactionKind::Push,
            psn: Psn::new(0),
            request_length: 0,
            payload: Payload::new(),
            header: UlpHeader::EMPTY,
            source: None,
            network: Demand::ZERO,
            data: Demand::ZERO,
            redelivery: false,
            delivered_at: Timestamp::ZERO,
        }
    }
}

/// The target of one connection, holding received frames `B` and the
/// ULP's Pull Data sources `S`.
#[derive(Debug)]
pub struct Target<B: PacketBuf = FrameBuf, S = Vec<u8>> {
    ordering: OrderingMode,
    /// RSN of `slots[0]`: the oldest request not finished (§8.5.1 BRSN).
    base: Rsn,
    /// NRSN: the next RSN to deliver on an ordered connection (§8.5.1).
    next: Rsn,
    slots: SlotRing<Slot<B, S>>,
    /// Ordered: RNR-NACKed requests not yet accepted on redelivery; while
    /// any, only the lowest of them is delivered (§8.5.3.4).
    blocked: Vec<Rsn>,
    /// Ordered: the ULP's latest RNR answer to a blocked request, repeated
    /// to every later Push Data until the block lifts (§8.5.3.4).
    blocked_answer: UlpNack,
    /// Pull RNR redeliveries: (when, RSN).
    rnr_timers: Vec<(Timestamp, Rsn)>,
    /// Pull Data not yet handed to the delivery sublayer.
    pull_data: VecDeque<Rsn>,
    /// Pull Data handed to the delivery sublayer and not yet sent.
    in_delivery: u32,
    /// Network resources of a request the ULP has not answered this long
    /// after its delivery are reclaimed.
    timeout: Duration,
    /// When the next reclaim sweep is due (the earliest deadline of the
    /// delivered, unanswered requests holding resources; a lower bound
    /// between sweeps). Sweeps scan the ring: bounded state.
    sweep_at: Option<Timestamp>,
    /// The earliest deadline added since the engine last looked.
    new_deadline: Option<Timestamp>,
}

impl<B: PacketBuf, S: DataSource> Target<B, S> {
    /// A target whose first expected RSN is `first_rsn` (set by the CM),
    /// reclaiming unanswered requests' resources after `timeout`.
    pub fn new(ordering: OrderingMode, first_rsn: Rsn, timeout: Duration) -> Self {
        Target {
            ordering,
            base: first_rsn,
            next: first_rsn,
            slots: SlotRing::new(),
            blocked: Vec::new(),
            blocked_answer: UlpNack::ReceiverNotReady {
                timeout: RnrTimeout::SHORTEST,
                ulp_nack_code: 0,
            },
            rnr_timers: Vec::new(),
            pull_data: VecDeque::new(),
            in_delivery: 0,
            timeout,
            sweep_at: None,
            new_deadline: None,
        }
    }

    /// §8.5.3.1 / §8.5.3.3: a Pull Request or Push Data arrived from the
    /// network. Allocate network-request resources (refused: resource NACK,
    /// the packet is dropped and retransmitted), take it, and deliver it —
    /// in RSN order on an ordered connection.
    ///
    /// A Push Data payload that is stored takes its frame
    /// ([`RxPayload::store`]): a duplicate, a refusal or a violation leaves
    /// it with the caller. A Pull Request's ULP header is copied.
    #[inline]
    pub fn on_request(
        &mut self,
        ctx: &mut Ctx<'_, B, S>,
        arrival: Arrival,
        payload: RxPayload<'_, B>,
    ) {
        let rsn = arrival.rsn;
        let offset = rsn.offset_from(self.base);
        if offset < 0 || offset as u32 >= ctx.shared.config.max_rsn_span {
            self.fault(
                ctx,
                DropReason::RsnOutOfRange,
                ConnectionFault::RsnOutOfRange {
                    rsn,
                    base: self.base,
                },
            );
            return;
        }
        let index = offset as usize;
        self.slots.borrow_if_empty(&mut ctx.shared.target_rings);
        // The RSNs before it not seen yet enter the ring as holes.
        while self.slots.len() < index {
            self.slots.push_back().reset();
        }
        // The RSN just past the ring's back (every in-order arrival): its
        // slot is taken in only once the request is admitted, and filled
        // without a reset first (a refusal leaves it a hole, as before).
        let fresh = index == self.slots.len();
        let kind = match arrival.kind {
            PacketKind::PushData => TransactionKind::Push,
            _ => TransactionKind::Pull,
        };
        if !fresh {
            match self.slots[index].state {
                TargetState::Unseen => {}
                TargetState::PushDataRnrWait if kind == TransactionKind::Push => {}
                _ => {
                    self.fault(
                        ctx,
                        DropReason::DuplicateRsn,
                        ConnectionFault::DuplicateRsn { rsn },
                    );
                    return;
                }
            }
        }
        if ctx.delivery.xlr_filter().target {
            self.xlr_drop(ctx, arrival, fresh);
            return;
        }
        if kind == TransactionKind::Push && self.behind_block(rsn) {
            self.nack_behind_block(ctx, arrival, index, fresh);
            return;
        }
        let head_of_line = match self.ordering {
            OrderingMode::Ordered => rsn == self.head(),
            OrderingMode::Unordered => arrival.psn == ctx.delivery.rx_base(arrival.kind.window()),
        };
        if kind == TransactionKind::Pull && payload.len() > ULP_HEADER_CAPACITY {
            ctx.shared.drops.record(DropReason::UlpHeaderTooLong);
            self.keep_hole(fresh);
            return;
        }
        let cell = ctx.shared.resources.config().cell_size;
        let demand = match kind {
            TransactionKind::Push => Demand::network_push(payload.len(), cell),
            TransactionKind::Pull => Demand::network_pull_request(),
        };
        if ctx
            .shared
            .resources
            .reserve_network(ctx.account, &demand, head_of_line)
            .is_err()
        {
            // §8.5.3.1: "discard ... and generate a NACK event"; §11: resource
            // drop NACK (code 1), retransmitted as normal.
            let reason = ctx
                .delivery
                .refuse(ctx.now, arrival, Refusal::InsufficientResources);
            ctx.shared.drops.record(reason);
            ctx.shared.stats.resource_refusals += 1;
            self.keep_hole(fresh);
            return;
        }
        let (psn, request_length) = (arrival.psn, arrival.request_length);
        if let Err(reason) = ctx.delivery.admit(ctx.now, arrival) {
            ctx.shared.resources.release(ctx.account, &demand);
            ctx.shared.drops.record(reason);
            self.keep_hole(fresh);
            return;
        }
        // The network-request pools' occupancy grew: a buffer-level sample.
        ctx.shared.occupancy_changed = true;
        // A push `deliver_ready` would deliver at once (§8.5.2): unordered, or
        // NRSN with no RNR redelivery awaited. Its payload goes straight into
        // the ULP event instead of into the slot and out again, with the slot
        // past the back filled without a reset first.
        let deliver_now = kind == TransactionKind::Push
            && match self.ordering {
                OrderingMode::Ordered => self.blocked.is_empty() && rsn == self.next,
                OrderingMode::Unordered => true,
            };
        let slot = if fresh {
            // As `retire` (or `SlotRing::new`) left it: payload empty.
            let slot = self.slots.push_back();
            slot.data = Demand::ZERO;
            slot.redelivery = false;
            slot.delivered_at = Timestamp::ZERO;
            slot
        } else {
            &mut self.slots[index]
        };
        slot.kind = kind;
        slot.psn = psn;
        slot.request_length = request_length;
        slot.network = demand;
        // No `retire`: an arrival finishes no slot (the front is retired by
        // whatever finished it: the ULP's answer, a resync, the sweep), so
        // there is nothing to pop here.
        if deliver_now {
            // What `deliver_ready` → `deliver` do with it, the payload
            // never stored in the slot (a delivered push's stays empty).
            debug_assert!(!slot.payload.has_frame());
            slot.state = TargetState::PushReqUlpTx;
            let stored = payload.store(&mut ctx.shared.stats.zero_copy_receives);
            Self::hand_over(slot, ctx, rsn, stored);
            self.note_delivery(ctx.now);
            if self.ordering == OrderingMode::Ordered {
                self.next = self.next.next();
                // Held requests after it follow in RSN order; none is held past
                // the ring's back.
                if index + 1 < self.slots.len() {
                    self.deliver_ready(ctx, rsn);
                }
            }
        } else {
            slot.state = match kind {
                TransactionKind::Push => TargetState::PushDataRx,
                TransactionKind::Pull => TargetState::PullReqRx,
            };
            match kind {
                TransactionKind::Push => {
                    slot.payload = payload.store(&mut ctx.shared.stats.zero_copy_receives);
                }
                // Within the capacity, checked above.
                TransactionKind::Pull => slot.header = payload.header().unwrap_or_default(),
            }
            self.deliver_ready(ctx, rsn);
        }
        debug_assert!(!self.slots.front().is_some_and(|f| f.state.is_finished()));
    }

    /// §11 target table, "Match local xLR drop filter: Drop, no resource
    /// reservation"; the delivery sublayer sends the xLR drop NACK (code 4)
    /// and the initiator resyncs the RSN away.
    #[cold]
    #[inline(never)]
    fn xlr_drop(&mut self, ctx: &mut Ctx<'_, B, S>, arrival: Arrival, fresh: bool) {
        let reason = ctx.delivery.refuse(ctx.now, arrival, Refusal::Xlr);
        ctx.shared.drops.record(reason);
        self.keep_hole(fresh);
    }

    /// A refused request's RSN, if it was past the ring's back, still
    /// enters the ring, as a hole.
    fn keep_hole(&mut self, fresh: bool) {
        if fresh {
            self.slots.push_back().reset();
        }
    }

    /// The ULP accepted request `rsn` (§8.5.3.1 PullReqUlpAckd, §8.5.3.3
    /// PushReqUlpAckd: the delivery sublayer may now acknowledge the Push
    /// Data).
    ///
    /// # Errors
    ///
    /// [`UlpCommandError::NotAwaiting`] if `rsn` is not delivered and
    /// unanswered.
    #[inline]
    pub fn ulp_ack(&mut self, ctx: &mut Ctx<'_, B, S>, rsn: Rsn) -> Result<(), UlpCommandError> {
        let slot = self.awaiting_mut(rsn)?;
        match slot.kind {
            TransactionKind::Push => {
                slot.state = TargetState::PushReqUlpAckd;
                // The initiator may have resynced it meanwhile: nothing to ACK.
                let _ = ctx.delivery.handle_ulp_ack(ctx.now, slot.psn);
            }
            TransactionKind::Pull => {
                slot.state = TargetState::PullReqUlpAckd;
            }
        }
        // Released from the slot, then cleared: taken out first, its 32 bytes
        // would be copied to the stack for `release` to read back.
        ctx.release(&slot.network);
        slot.network = Demand::ZERO;
        if self.blocked.is_empty() {
            // Nothing becomes deliverable: with no RNR redelivery awaited,
            // every arrival, resync and RNR timer already ran
            // `deliver_ready`, so the slot at NRSN is not held, and the
            // answered `rsn` was delivered. What `unblock` would do is the
            // timer cleanup and the retirement.
            if !self.rnr_timers.is_empty() {
                self.rnr_timers.retain(|&(_, r)| r != rsn);
            }
            self.retire();
        } else {
            self.unblock(ctx, rsn);
        }
        Ok(())
    }

    /// The ULP refused request `rsn` (§8.5.3.4–8.5.3.5, §11 target table):
    /// RNR on a push → RNR NACK, redelivered on retransmission; RNR on a
    /// pull → redelivered locally after the timeout; CIE/NRE/invalid CID on
    /// a push → NACK, the initiator resyncs; CIE/NRE on a pull → zero-length
    /// Pull Data; invalid CID on a pull → resources reclaimed, no answer.
    ///
    /// # Errors
    ///
    /// [`UlpCommandError::NotAwaiting`] if `rsn` is not delivered and
    /// unanswered; [`UlpCommandError::NoCredits`] if a zero-length Pull Data
    /// finds no ULP-data credit (retry after Xon).
    pub fn ulp_nack(
        &mut self,
        ctx: &mut Ctx<'_, B, S>,
        rsn: Rsn,
        nack: UlpNack,
    ) -> Result<(), UlpCommandError> {
        let index = self.awaiting(rsn)?;
        let slot = &mut self.slots[index];
        let (kind, psn) = (slot.kind, slot.psn);
        match (kind, nack) {
            (TransactionKind::Push, UlpNack::ReceiverNotReady { .. }) => {
                // The delivery sublayer forgets the reception: the
                // retransmission is delivered again.
                let _ = ctx.delivery.handle_ulp_nack(ctx.now, psn, nack);
                slot.state = TargetState::PushDataRnrWait;
                slot.redelivery = true;
                let network = core::mem::take(&mut slot.network);
                ctx.release(&network);
                self.block(rsn, nack);
                self.nack_held_behind(ctx, rsn);
            }
            (TransactionKind::Push, _) => {
                let _ = ctx.delivery.handle_ulp_nack(ctx.now, psn, nack);
                slot.state = TargetState::Nacked;
                let network = core::mem::take(&mut slot.network);
                ctx.release(&network);
                self.unblock(ctx, rsn);
            }
            (TransactionKind::Pull, UlpNack::ReceiverNotReady { timeout, .. }) => {
                // §8.5.3.4: "initialize a retransmit timer for the pull
                // transaction based on the RNR NACK timeout value".
                slot.state = TargetState::PullReqRnrWait;
                slot.redelivery = true;
                let when = ctx.now.saturating_add(timeout.as_duration());
                self.rnr_timers.push((when, rsn));
                self.note_deadline(when);
                self.block(rsn, nack);
                self.nack_held_behind(ctx, rsn);
            }
            (TransactionKind::Pull, UlpNack::InvalidCid { .. }) => {
                slot.state = TargetState::Nacked;
                let network = core::mem::take(&mut slot.network);
                ctx.release(&network);
                self.unblock(ctx, rsn);
            }
            (TransactionKind::Pull, _) => {
                // §8.5.3.5: a pull completes in error with zero-length Pull
                // Data.
                self.submit_pull_data(ctx, rsn, UlpHeader::EMPTY, (), |()| None)
                    .map_err(|_| UlpCommandError::NoCredits)?;
            }
        }
        ctx.shared.stats.ulp_nacks += 1;
        Ok(())
    }

    /// §8.5.3.2: the ULP's Pull Data for pull `rsn` (delivered, answered or
    /// not: Pull Data implies the ULP's ACK). Assigns ULP-data resources
    /// and queues it for the connection scheduler.
    ///
    /// # Errors
    ///
    /// [`Rejected`] with the source: no such pull awaiting data, longer
    /// than requested, or out of credits (the ULP also gets an Xoff).
    ///
    /// `data` is what the ULP handed over, handed back if refused;
    /// `source` makes the Pull Data's source of it once accepted (`None`
    /// for a zero-length Pull Data).
    pub fn submit_pull_data<T: PullSource<S>>(
        &mut self,
        ctx: &mut Ctx<'_, B, S>,
        rsn: Rsn,
        header: UlpHeader,
        data: T,
        source: impl FnOnce(T) -> Option<S>,
    ) -> Result<(), Rejected<T>> {
        let reject = |reason, returned| Err(Rejected { reason, returned });
        let len = header.len() + data.data_len();
        let payload = data;
        let Some(index) = self.index(rsn).filter(|&i| {
            matches!(
                self.slots[i].state,
                TargetState::PullReqUlpTx | TargetState::PullReqUlpAckd
            )
        }) else {
            return reject(RejectReason::UnknownRequest, payload);
        };
        let request_length = self.slots[index].request_length;
        if len > usize::from(request_length) {
            return reject(
                RejectReason::LengthExceedsRequest { request_length },
                payload,
            );
        }
        let cell = ctx.shared.resources.config().cell_size;
        let demand = Demand::pull_data(len, cell);
        if let Err(shortage) = ctx.shared.resources.reserve_ulp(ctx.account, &demand) {
            ctx.xoff(shortage.credit.class().unwrap_or(CreditClass::Data));
            return reject(RejectReason::NoResources(shortage), payload);
        }
        let slot = &mut self.slots[index];
        let network = core::mem::take(&mut slot.network);
        slot.state = TargetState::PullDataUlpRx;
        slot.header = header;
        slot.source = source(payload);
        slot.data = demand;
        ctx.release(&network);
        ctx.shared.stats.pull_data_submitted += 1;
        self.pull_data.push_back(rsn);
        self.unblock(ctx, rsn);
        Ok(())
    }

    /// Hands the head of the Pull Data queue to the delivery sublayer (one
    /// at a time, see [`Initiator::top_up`](super::Initiator::top_up)).
    #[inline]
    pub fn top_up(&mut self, delivery: &mut crate::delivery::DeliveryConnection) {
        if self.in_delivery > 0 {
            return;
        }
        let Some(&rsn) = self.pull_data.front() else {
            return;
        };
        let Some(index) = self.index(rsn) else {
            self.pull_data.pop_front();
            return;
        };
        // Invariant: Pull Data ≤ its request length (u16).
        let slot = &self.slots[index];
        let payload_len = (slot.header.len() + slot.source.as_ref().map_or(0, S::len)) as u16;
        let packet = OutgoingPacket {
            kind: PacketKind::PullData,
            rsn,
            request_length: 0,
            payload_len,
            handle: payload_handle(Role::Target, rsn),
            ack_request: false,
        };
        if delivery.submit(packet).is_ok() {
            self.pull_data.pop_front();
            self.in_delivery += 1;
        }
    }

    /// Whether Pull Data waits in this layer's queue.
    pub fn has_queued(&self) -> bool {
        !self.pull_data.is_empty()
    }

    /// Our Pull Data `rsn` left for the first time (PullDataTx).
    #[inline]
    pub fn on_first_transmit(&mut self, rsn: Rsn) {
        self.in_delivery = self.in_delivery.saturating_sub(1);
        if let Some(index) = self.index(rsn) {
            self.slots[index].state = TargetState::PullDataTx;
        }
    }

    /// The payload of our Pull Data `rsn`.
    pub(crate) fn payload(&self, rsn: Rsn) -> Option<TxPayload<'_, S>> {
        self.index(rsn).map(|i| {
            let slot = &self.slots[i];
            TxPayload {
                header: slot.header.as_slice(),
                data: slot.source.as_ref(),
            }
        })
    }

    /// Our Pull Data `rsn` (or the Resync that replaced it) was
    /// acknowledged: PullDataAckd, resources back.
    pub fn on_pull_data_acked(&mut self, ctx: &mut Ctx<'_, B, S>, rsn: Rsn) {
        let Some(index) = self.index(rsn) else {
            return;
        };
        let slot = &mut self.slots[index];
        if slot.state.is_finished() {
            return;
        }
        slot.state = TargetState::PullDataAckd;
        let data = core::mem::take(&mut slot.data);
        // The ULP's source is done with: dropped, which returns it to the
        // ULP's own pool if it has one.
        slot.source = None;
        ctx.release(&data);
        self.retire();
    }

    /// The initiator resynced request `rsn` away (§9.2.5): skip it. A held
    /// request is dropped and its resources return; one the ULP holds is
    /// finished by the ULP's answer.
    pub fn on_resynced(&mut self, ctx: &mut Ctx<'_, B, S>, rsn: Rsn) {
        let offset = rsn.offset_from(self.base);
        if offset < 0 || offset as u32 >= ctx.shared.config.max_rsn_span {
            return;
        }
        let index = offset as usize;
        self.slots.borrow_if_empty(&mut ctx.shared.target_rings);
        while self.slots.len() <= index {
            self.slots.push_back().reset();
        }
        let slot = &mut self.slots[index];
        match slot.state {
            TargetState::Unseen | TargetState::PushDataRnrWait => {}
            TargetState::PushDataRx | TargetState::PullReqRx => {
                let network = core::mem::take(&mut slot.network);
                ctx.shared.release(core::mem::take(&mut slot.payload));
                ctx.release(&network);
            }
            _ => return,
        }
        self.slots[index].state = TargetState::Skipped;
        self.unblock(ctx, rsn);
    }

    /// Timers due at `now`: pull RNR redeliveries (§8.5.3.4: "when the
    /// retransmit timer expires, the target must redeliver the pull request
    /// to the ULP") and the soft-state reclaim of unanswered requests.
    pub fn handle_timeout(&mut self, ctx: &mut Ctx<'_, B, S>) {
        let mut i = 0;
        while i < self.rnr_timers.len() {
            let (when, rsn) = self.rnr_timers[i];
            if when > ctx.now {
                i += 1;
                continue;
            }
            self.rnr_timers.swap_remove(i);
            if let Some(index) = self.index(rsn) {
                if self.slots[index].state == TargetState::PullReqRnrWait {
                    self.slots[index].state = TargetState::PullReqRx;
                    self.deliver_ready(ctx, rsn);
                    self.retire();
                }
            }
        }
        if self.sweep_at.map_or(true, |at| at > ctx.now) {
            return;
        }
        let mut next: Option<Timestamp> = None;
        for slot in self.slots.iter_mut() {
            if !slot.state.awaits_ulp() || slot.network.is_zero() {
                continue;
            }
            let deadline = slot.delivered_at.saturating_add(self.timeout);
            if deadline > ctx.now {
                next = Some(next.map_or(deadline, |n| n.min(deadline)));
                continue;
            }
            let network = core::mem::take(&mut slot.network);
            ctx.release(&network);
            ctx.shared.stats.reclaimed += 1;
        }
        self.sweep_at = next;
    }

    /// Gives the slots to `pool` if none is in use (see
    /// `Initiator::lend_idle`).
    #[inline]
    pub(crate) fn lend_idle(&mut self, pool: &mut RingPool<Slot<B, S>>) {
        self.slots.lend_if_idle(pool);
    }

    /// Slots held, in use or not (none when idle: lent to the pool).
    #[cfg(test)]
    pub(crate) fn slots_held(&self) -> usize {
        self.slots.capacity()
    }

    /// The next timer: an RNR redelivery or a reclaim sweep.
    pub fn next_deadline(&self) -> Option<Timestamp> {
        let rnr = self.rnr_timers.iter().map(|&(t, _)| t).min();
        match (rnr, self.sweep_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The earliest deadline added since the last call.
    pub fn take_new_deadline(&mut self) -> Option<Timestamp> {
        self.new_deadline.take()
    }

    /// The earliest deadline added since the engine last took them, left in
    /// place.
    pub fn new_deadline(&self) -> Option<Timestamp> {
        self.new_deadline
    }

    fn note_deadline(&mut self, deadline: Timestamp) {
        self.new_deadline = Some(self.new_deadline.map_or(deadline, |d| d.min(deadline)));
    }

    /// The connection died: all resources return; nothing more is delivered.
    pub fn fail_all(&mut self, ctx: &mut Ctx<'_, B, S>) {
        for slot in self.slots.iter_mut() {
            let network = core::mem::take(&mut slot.network);
            let data = core::mem::take(&mut slot.data);
            ctx.release(&network);
            ctx.release(&data);
            ctx.shared.release(core::mem::take(&mut slot.payload));
            slot.source = None;
            if !slot.state.is_finished() {
                slot.state = TargetState::Skipped;
            }
        }
        self.blocked.clear();
        self.rnr_timers.clear();
        self.pull_data.clear();
        self.sweep_at = None;
        self.in_delivery = 0;
        self.retire();
    }

    /// The state of request `rsn`, if it is in the ring.
    #[cfg(any(test, feature = "testing"))]
    pub fn state(&self, rsn: Rsn) -> Option<TargetState> {
        self.index(rsn).map(|i| self.slots[i].state)
    }

    /// BRSN (the ring base) and NRSN (next to deliver, ordered).
    pub fn rsns(&self) -> (Rsn, Rsn) {
        (self.base, self.next)
    }

    /// The request that is head of line on an ordered connection: the
    /// lowest RNR redelivery awaited, else NRSN.
    fn head(&self) -> Rsn {
        self.blocked
            .iter()
            .copied()
            .min_by_key(|rsn| rsn.offset_from(self.base))
            .unwrap_or(self.next)
    }

    /// Delivers what may go after `rsn` changed (§8.5.2): on an ordered
    /// connection the awaited RNR redelivery if it is back, else every held
    /// request from NRSN on in RSN order (skipping resynced RSNs); on an
    /// unordered one `rsn` itself if it is held. Retires nothing: delivering
    /// finishes no slot (callers that finished one retire after).
    #[inline]
    fn deliver_ready(&mut self, ctx: &mut Ctx<'_, B, S>, rsn: Rsn) {
        match self.ordering {
            OrderingMode::Ordered => {
                if !self.blocked.is_empty() {
                    let head = self.head();
                    if let Some(index) = self.index(head) {
                        if self.slots[index].state.is_held() {
                            self.deliver(ctx, index);
                        }
                    }
                    return;
                }
                while let Some(index) = self.index(self.next) {
                    let state = self.slots[index].state;
                    if state.is_held() {
                        self.deliver(ctx, index);
                    } else if state != TargetState::Skipped {
                        break;
                    }
                    self.next = self.next.next();
                }
            }
            OrderingMode::Unordered => {
                if let Some(index) = self.index(rsn) {
                    if self.slots[index].state.is_held() {
                        self.deliver(ctx, index);
                    }
                }
            }
        }
    }

    /// §8.5.3.1 / §8.5.3.3: deliver to the ULP (PullReqUlpTx /
    /// PushReqUlpTx).
    #[inline]
    fn deliver(&mut self, ctx: &mut Ctx<'_, B, S>, index: usize) {
        let rsn = self.base.wrapping_add(index as u32);
        let slot = &mut self.slots[index];
        slot.state = match slot.kind {
            TransactionKind::Push => TargetState::PushReqUlpTx,
            TransactionKind::Pull => TargetState::PullReqUlpTx,
        };
        // Push Data moves to the ULP (an RNR redelivery comes with the
        // retransmission); a Pull Request's ULP header is copied, and stays
        // for a local RNR redelivery until the ULP accepts it.
        let payload = core::mem::take(&mut slot.payload);
        Self::hand_over(slot, ctx, rsn, payload);
        self.note_delivery(ctx.now);
    }

    /// Request `rsn`, its `slot` marked delivered, goes to the ULP with
    /// `payload`.
    #[inline(always)]
    fn hand_over(slot: &mut Slot<B, S>, ctx: &mut Ctx<'_, B, S>, rsn: Rsn, payload: Payload<B>) {
        let stats = &mut ctx.shared.stats;
        stats.requests_delivered += 1;
        if slot.redelivery {
            stats.redeliveries += 1;
        }
        ctx.shared.events.push_back(UlpEvent::Request(Request {
            connection: ctx.connection,
            rsn,
            kind: slot.kind,
            request_length: slot.request_length,
            header: slot.header,
            payload,
            redelivery: slot.redelivery,
        }));
        slot.delivered_at = ctx.now;
    }

    /// A request was delivered at `now`: the reclaim sweep is due at the
    /// latest `timeout` after it.
    #[inline(always)]
    fn note_delivery(&mut self, now: Timestamp) {
        if self.sweep_at.is_none() {
            let deadline = now.saturating_add(self.timeout);
            self.sweep_at = Some(deadline);
            self.note_deadline(deadline);
        }
    }

    /// Ordered: `rsn` awaits redelivery after the ULP's RNR `answer`;
    /// nothing new is delivered meanwhile.
    fn block(&mut self, rsn: Rsn, answer: UlpNack) {
        if self.ordering == OrderingMode::Ordered && !self.blocked.contains(&rsn) {
            self.blocked.push(rsn);
            self.blocked_answer = answer;
        }
    }

    /// Whether request `rsn` comes after a request whose RNR redelivery
    /// has not happened yet on an ordered connection. Once the refused
    /// request is back with its ULP, later ones are held as usual: the
    /// ULP's answer comes soon, and a second RNR NACKs them then
    /// ([`nack_held_behind`](Self::nack_held_behind)). NACKing them too
    /// would cost each request behind a chain of refused ones one RNR
    /// timeout per link.
    #[inline(always)]
    fn behind_block(&self, rsn: Rsn) -> bool {
        !self.blocked.is_empty() && self.behind_refused(rsn)
    }

    /// [`behind_block`](Self::behind_block) with a block present.
    #[cold]
    #[inline(never)]
    fn behind_refused(&self, rsn: Rsn) -> bool {
        let head = self.head();
        head.before(rsn)
            && self.index(head).is_some_and(|index| {
                matches!(
                    self.slots[index].state,
                    TargetState::PushDataRnrWait | TargetState::PullReqRnrWait
                )
            })
    }

    /// §8.5.3.4: "On an ordered connection, if a transaction with RSN value
    /// of N is RNR NACKed by the ULP, all subsequent transactions (with RSN
    /// greater than N) continue to be RNR NACKed until the ULP accepts the
    /// retransmitted transaction with RSN value of N." A Push Data `arrival`
    /// behind a block is taken by the delivery sublayer and RNR-NACKed with
    /// the ULP's answer to N, without network resources or a delivery: the
    /// initiator retransmits it after the RNR wait, which counts toward no
    /// Max Retransmit Attempts, instead of its waiting here for the ULP RTO
    /// to exhaust it. (Pull Requests behind a block wait here: they are
    /// acknowledged already and the target redelivers them itself.) Out of
    /// line: inlined, it made `on_request` too large for its hot callees
    /// (the short payload's copy, the resource release) to be inlined.
    #[cold]
    #[inline(never)]
    fn nack_behind_block(
        &mut self,
        ctx: &mut Ctx<'_, B, S>,
        arrival: Arrival,
        index: usize,
        fresh: bool,
    ) {
        let (psn, request_length) = (arrival.psn, arrival.request_length);
        if let Err(reason) = ctx.delivery.admit(ctx.now, arrival) {
            ctx.shared.drops.record(reason);
            self.keep_hole(fresh);
            return;
        }
        let _ = ctx
            .delivery
            .handle_ulp_nack(ctx.now, psn, self.blocked_answer);
        let slot = if fresh {
            let slot = self.slots.push_back();
            slot.reset();
            slot
        } else {
            &mut self.slots[index]
        };
        slot.state = TargetState::PushDataRnrWait;
        slot.kind = TransactionKind::Push;
        slot.psn = psn;
        slot.request_length = request_length;
        // Not delivered: to the ULP its next delivery is a first one
        // (unless the ULP itself refused it before).
        ctx.shared.stats.rnr_sent_behind += 1;
    }

    /// §8.5.3.4 for the Push Data already received and held behind `rsn`,
    /// which the ULP just RNR-NACKed: each is RNR-NACKed in turn (see
    /// [`nack_behind_block`](Self::nack_behind_block)), its payload and
    /// resources released.
    fn nack_held_behind(&mut self, ctx: &mut Ctx<'_, B, S>, rsn: Rsn) {
        if self.ordering != OrderingMode::Ordered {
            return;
        }
        let Some(first) = self.index(rsn) else {
            return;
        };
        let answer = self.blocked_answer;
        for index in first + 1..self.slots.len() {
            let slot = &mut self.slots[index];
            if slot.state != TargetState::PushDataRx {
                continue;
            }
            let _ = ctx.delivery.handle_ulp_nack(ctx.now, slot.psn, answer);
            slot.state = TargetState::PushDataRnrWait;
            let network = core::mem::take(&mut slot.network);
            ctx.shared.release(core::mem::take(&mut slot.payload));
            ctx.release(&network);
            ctx.shared.stats.rnr_sent_behind += 1;
        }
    }

    /// `rsn` was answered or skipped: lift its block and deliver what may
    /// go now.
    fn unblock(&mut self, ctx: &mut Ctx<'_, B, S>, rsn: Rsn) {
        if !self.blocked.is_empty() {
            self.blocked.retain(|&b| b != rsn);
        }
        if !self.rnr_timers.is_empty() {
            self.rnr_timers.retain(|&(_, r)| r != rsn);
        }
        self.deliver_ready(ctx, rsn);
        self.retire();
    }

    /// Pops finished requests off the front of the ring (BRSN moves on).
    #[inline]
    fn retire(&mut self) {
        while let Some(front) = self.slots.front() {
            if !front.state.is_finished() {
                break;
            }
            // A slot's payload is most often already empty (a delivered push's
            // never held one): then nothing is dropped or written.
            // Nothing to drop: a frame and a Pull Data source are let go of
            // when their state ends (delivery, resync, acknowledgement).
            if let Some(front) = self.slots.pop_front() {
                debug_assert!(!front.payload.has_frame() && front.source.is_none());
            }
            self.base = self.base.next();
        }
        if self.next.before(self.base) {
            self.next = self.base;
        }
        if self.slots.len() == 0 {
            // Nothing held: no reclaim sweep due (see `Initiator::retire`).
            self.sweep_at = None;
        }
    }

    /// [`awaiting`](Self::awaiting)'s slot, found with one bounds check.
    #[inline]
    fn awaiting_mut(&mut self, rsn: Rsn) -> Result<&mut Slot<B, S>, UlpCommandError> {
        usize::try_from(rsn.offset_from(self.base))
            .ok()
            .and_then(|index| self.slots.get_mut(index))
            .filter(|slot| slot.state.awaits_ulp())
            .ok_or(UlpCommandError::NotAwaiting)
    }

    fn awaiting(&self, rsn: Rsn) -> Result<usize, UlpCommandError> {
        self.index(rsn)
            .filter(|&i| self.slots[i].state.awaits_ulp())
            .ok_or(UlpCommandError::NotAwaiting)
    }

    fn fault(&mut self, ctx: &mut Ctx<'_, B, S>, reason: DropReason, fault: ConnectionFault) {
        ctx.shared.drops.record(reason);
        ctx.shared.events.push_back(UlpEvent::ConnectionError {
            connection: ctx.connection,
            fault,
        });
    }

    fn index(&self, rsn: Rsn) -> Option<usize> {
        let offset = rsn.offset_from(self.base);
        (offset >= 0 && (offset as usize) < self.slots.len()).then_some(offset as usize)
    }
}

/// What a ULP hands over as Pull Data, for
/// [`Target::submit_pull_data`]: a data source, or nothing (the
/// zero-length Pull Data of a refused pull).
pub trait PullSource<S> {
    /// Bytes of data.
    fn data_len(&self) -> usize;
}

impl<S: DataSource> PullSource<S> for S {
    fn data_len(&self) -> usize {
        self.len()
    }
}

impl<S: DataSource> PullSource<S> for () {
    fn data_len(&self) -> usize {
        0
    }
}
