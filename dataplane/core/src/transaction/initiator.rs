//! The initiator side of a connection's transaction sublayer (OCP Falcon
//! 0.9 §8.4).
//!
//! Layer: transaction sublayer. Owns the initiator variables BRSN (oldest
//! transaction not completed to the ULP) and NRSN (next RSN to assign), the
//! per-transaction state of §8.4.1's table, the queues of Pull Requests and
//! Push Data not yet handed to the delivery sublayer, the transaction
//! soft-state timeouts, and completion ordering (§8.4.2: in RSN order on
//! ordered connections, interleaving push completions with Pull Data). It
//! never builds a packet (the delivery sublayer does) and never panics on
//! packet input.

use core::time::Duration;

use crate::delivery::{
    Arrival, DeliveryConnection, OrderingMode, OutgoingPacket, PacketKind, PayloadHandle, SentKind,
    SubmitError,
};
use crate::drop::DropReason;
use crate::engine::ConnectionHandle;
use crate::port::{FrameBuf, PacketBuf};
use crate::resources::{Account, CreditClass, Demand, ALL_LANES, RX_LANES, TX_LANES};
use crate::seq::{Psn, Rsn};
use crate::time::Timestamp;
use crate::transaction::payload::{Payload, RxPayload};
use crate::transaction::ring::{RingPool, SlotRing};
use crate::transaction::source::{DataSource, TxPayload, UlpHeader};
use crate::transaction::ulp::{
    Completion, CompletionStatus, Op, RejectReason, Rejected, Transaction, TransactionKind,
    UlpEvent,
};
use crate::transaction::{decode_handle, payload_handle, xoff, Ctx, Role, Shared};
use crate::wire::{NackCode, ResyncCode};

/// Initiator transaction states (OCP Falcon 0.9 §8.4.1, table p.47–48).
///
/// The two sent states' discriminants are those of their [`TransactionKind`]s
/// (Pull 0, Push 1), so the state of a first transmission is its slot's kind as
/// it is, not worked out from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum InitiatorState {
    /// Pull request received from the ULP.
    PullReqUlpRx = 2,
    /// Pull Request packet sent to the target.
    PullReqTx = 0,
    /// Pull Request packet ACKed by the target.
    PullReqAckd = 3,
    /// Pull Data packet received from the target.
    PullDataRx = 4,
    /// Pull Data delivered to the ULP (the completion).
    PullDataUlpTx = 5,
    /// Push transaction received from the ULP.
    PushReqUlpRx = 6,
    /// Push Data packet sent to the target.
    PushDataTx = 1,
    /// Push Data packet ACKed by the target (its ULP accepted it).
    PushDataAckd = 7,
    /// Push completion delivered to the ULP.
    PushCplTx = 8,
}

/// One outstanding transaction.
#[derive(Debug)]
pub(crate) struct Slot<B: PacketBuf, S> {
    state: InitiatorState,
    kind: TransactionKind,
    tag: u64,
    request_length: u16,
    /// The ULP header of the packet.
    header: UlpHeader,
    /// A push's data source, kept for retransmissions.
    source: Option<S>,
    /// The ULP asked for the AR bit ([`Transaction::ack_request`]).
    ack_request: bool,
    /// Pull Data received, in its frame: held here until the pull
    /// completes in its turn.
    data: Payload<B>,
    demand: Demand,
    /// The Tx part of `demand` is held: the packet, or the Resync that
    /// replaced it, is queued or in the retransmit buffer.
    tx_held: bool,
    /// The PSN, once sent.
    psn: Option<Psn>,
    /// When it was first sent (its soft-state timeout runs from here).
    sent_at: Option<Timestamp>,
    /// A NACK's outcome, waiting for the ACK of the Resync that replaced
    /// the packet.
    nacked: Option<(CompletionStatus, u8)>,
    /// The known outcome; completes when ordering allows.
    outcome: Option<(CompletionStatus, u8)>,
    /// The completion went to the ULP.
    completed: bool,
}

impl<B: PacketBuf, S> Default for Slot<B, S> {
    /// A slot before `submit` fills it in.
    fn default() -> Self {
        Slot {
            state: InitiatorState::PushReqUlpRx,
            kind: TransactionKind::Push,
            tag: 0,
            request_length: 0,
            header: UlpHeader::EMPTY,
            source: None,
            ack_request: false,
            data: Payload::new(),
            demand: Demand::ZERO,
            tx_held: true,
            psn: None,
            sent_at: None,
            nacked: None,
            outcome: None,
            completed: false,
        }
    }
}

/// The initiator of one connection, holding received frames `B` and the
/// ULP's data sources `S`.
#[derive(Debug)]
pub struct Initiator<B: PacketBuf = FrameBuf, S = Vec<u8>> {
    ordering: OrderingMode,
    /// RSN of `slots[0]`.
    retired: Rsn,
    /// BRSN: the oldest RSN not yet completed to the ULP (§8.4.1).
    brsn: Rsn,
    /// NRSN: the next RSN to assign (§8.4.1).
    nrsn: Rsn,
    slots: SlotRing<Slot<B, S>>,
    /// Per kind ([pull, push]), the queue of transactions not yet handed to
    /// the delivery sublayer, as a cursor over the slot ring: every slot of
    /// that kind from this RSN on (RSN order) is queued, none before it.
    /// The slots already say which kind they are, so the queue is a position,
    /// not a copy of their RSNs: a `VecDeque<Rsn>` per kind would cost a push
    /// in `submit` and a pop in `top_up` per transaction.
    queued: [Rsn; 2],
    /// How many transactions each queue holds: an empty queue is known
    /// without scanning the ring for its kind.
    queued_len: [u32; 2],
    /// Handed to the delivery sublayer and not yet sent: [pull, push].
    in_delivery: [u32; 2],
    /// The transaction timeout (from the first transmission).
    timeout: Duration,
    /// When the next timeout sweep is due: the earliest deadline of the
    /// transactions sent and not finished (exact after a sweep; a lower
    /// bound otherwise). Sweeps scan the outstanding ring, so the timer
    /// state is bounded by the credits, not by the transaction rate.
    sweep_at: Option<Timestamp>,
    /// The earliest deadline added since the engine last looked
    /// ([`take_new_deadline`](Self::take_new_deadline)).
    new_deadline: Option<Timestamp>,
}

impl<B: PacketBuf, S: DataSource> Initiator<B, S> {
    /// An initiator whose first RSN is `first_rsn` (set by the CM, §8.4.1),
    /// timing transactions out `timeout` after their first transmission.
    pub fn new(ordering: OrderingMode, first_rsn: Rsn, timeout: Duration) -> Self {
        Initiator {
            ordering,
            retired: first_rsn,
            brsn: first_rsn,
            nrsn: first_rsn,
            slots: SlotRing::new(),
            queued: [first_rsn; 2],
            queued_len: [0; 2],
            in_delivery: [0; 2],
            timeout,
            sweep_at: None,
            new_deadline: None,
        }
    }

    /// §8.4.3.1 / §8.4.3.3: a ULP push or pull. Checks the length, assigns
    /// resources (all of the transaction's, Pull Data's Rx included), then
    /// RSN = NRSN, NRSN + 1, and queues it for the connection scheduler.
    ///
    /// # Errors
    ///
    /// [`Rejected`] with the payload: too long, or out of credits (the ULP
    /// also gets an Xoff).
    #[inline]
    pub(crate) fn submit_with(
        &mut self,
        shared: &mut Shared<B, S>,
        account: &mut Account,
        connection: ConnectionHandle,
        transaction: Transaction<S>,
    ) -> Result<Rsn, Rejected<Transaction<S>>> {
        let max = shared.config.max_payload;
        let cell = shared.resources.config().cell_size;
        let payload_len = transaction.payload_len();
        let too_long = match transaction.op {
            Op::Push(_) => payload_len > max,
            Op::Pull { request_length } => usize::from(request_length) > max || payload_len > max,
        };
        if too_long {
            shared.stats.rejected += 1;
            return Err(Rejected {
                reason: RejectReason::PayloadTooLong { max },
                returned: transaction,
            });
        }
        // Two matches, not one returning a pair: the pair would put the demand
        // on the stack and copy it again.
        let demand = match transaction.op {
            Op::Push(_) => Demand::push_cells(shared.resources.cells(payload_len)),
            Op::Pull { request_length } => {
                Demand::pull_request(payload_len, usize::from(request_length), cell)
            }
        };
        let request_length = match transaction.op {
            // Invariant: max_payload ≤ u16::MAX (engine config), so the
            // length fits.
            Op::Push(_) => payload_len as u16,
            Op::Pull { request_length } => request_length,
        };
        if let Err(shortage) = shared.resources.reserve_ulp(account, &demand) {
            shared.stats.rejected += 1;
            let class = shortage.credit.class().unwrap_or(CreditClass::Request);
            xoff(shared, account, connection, class);
            return Err(Rejected {
                reason: RejectReason::NoResources(shortage),
                returned: transaction,
            });
        }
        let rsn = self.nrsn;
        self.nrsn = rsn.next();
        // Filled in place, every field (see `SlotRing`); queued for the
        // connection scheduler by being at or after its kind's cursor
        // (`queued`). The state and the kind stored in the kind's own arm, with
        // its counts: a state worked out before the slot is taken would be kept
        // on the stack across the reservation.
        self.slots.borrow_if_empty(&mut shared.initiator_rings);
        let slot = self.slots.push_back();
        match transaction.op {
            Op::Push(source) => {
                shared.stats.pushes_submitted += 1;
                self.queued_len[1] += 1;
                slot.state = InitiatorState::PushReqUlpRx;
                slot.kind = TransactionKind::Push;
                slot.source = Some(source);
            }
            Op::Pull { .. } => {
                shared.stats.pulls_submitted += 1;
                self.queued_len[0] += 1;
                slot.state = InitiatorState::PullReqUlpRx;
                slot.kind = TransactionKind::Pull;
                slot.source = None;
            }
        }
        slot.tag = transaction.tag;
        slot.request_length = request_length;
        slot.header = transaction.header;
        slot.ack_request = transaction.ack_request;
        debug_assert!(!slot.data.has_frame(), "a retired slot holds no frame");
        slot.demand = demand;
        slot.tx_held = true;
        slot.psn = None;
        slot.sent_at = None;
        slot.nacked = None;
        slot.outcome = None;
        slot.completed = false;
        Ok(rsn)
    }

    /// Hands the heads of the Pull Request and Push Data queues to the
    /// delivery sublayer, one of each kind at a time: the delivery
    /// sublayer's transmit pick then chooses between them (RSN order on
    /// ordered connections, §9.1.3; round robin otherwise), and this layer
    /// keeps the rest until the scheduler turns to the connection again.
    ///
    /// The queues are cursors over the slot ring (`queued`): no push in
    /// `submit` and no pop here.
    #[inline(always)]
    pub fn top_up(&mut self, delivery: &mut DeliveryConnection) {
        for (i, kind) in [(0, PacketKind::PullRequest), (1, PacketKind::PushData)] {
            if self.in_delivery[i] > 0 || self.queued_len[i] == 0 {
                continue;
            }
            let Some(index) = self.next_queued(i) else {
                debug_assert!(false, "a queued transaction has a slot");
                continue;
            };
            let rsn = self.retired.wrapping_add(index as u32);
            // The slots skipped are of the other kind (or retired).
            self.queued[i] = rsn;
            let slot = &self.slots[index];
            // Invariant: payloads are checked against max_payload ≤ u16::MAX.
            // A push's Request Length is its payload length (`submit`).
            let payload_len = match slot.kind {
                TransactionKind::Push => slot.request_length,
                // Invariant: at most ULP_HEADER_CAPACITY bytes.
                TransactionKind::Pull => slot.header.len() as u16,
            };
            let packet = OutgoingPacket {
                kind,
                rsn,
                request_length: slot.request_length,
                payload_len,
                handle: payload_handle(Role::Initiator, rsn),
                ack_request: slot.ack_request,
            };
            match delivery.submit(packet) {
                Ok(()) => {
                    self.queued[i] = rsn.next();
                    self.queued_len[i] -= 1;
                    self.in_delivery[i] += 1;
                }
                Err(SubmitError::QueueFull | SubmitError::ConnectionNotAlive) => return,
                Err(SubmitError::LengthMismatch) => {
                    debug_assert!(false, "push built with request length = payload length");
                    return;
                }
            }
        }
    }

    /// Whether transactions wait in this layer's queues.
    #[cfg(any(test, feature = "testing"))]
    pub fn has_queued(&self) -> bool {
        self.queued_len != [0; 2]
    }

    /// The slot index of the first transaction of queue `i` (0: Pull
    /// Requests, 1: Push Data) not yet handed to the delivery sublayer:
    /// the first slot of that kind from the queue's cursor on. A cursor
    /// behind the front (the slots it passed over retired since) starts at
    /// the front: retired slots were all handed over (a slot not handed
    /// over holds its Tx resources, so it is not retired).
    #[inline]
    fn next_queued(&self, i: usize) -> Option<usize> {
        let kind = if i == 0 {
            TransactionKind::Pull
        } else {
            TransactionKind::Push
        };
        let start = self.queued[i].offset_from(self.retired).max(0) as usize;
        (start..self.slots.len()).find(|&index| self.slots[index].kind == kind)
    }

    /// PullReqTx / PushDataTx for slot `index`, sent with `psn` at `now`.
    /// Inline: out of line, every first transmission would pay a call and its
    /// register saves, and the slot would be found again.
    #[inline]
    fn mark_sent(&mut self, index: usize, now: Timestamp, psn: Psn) {
        let slot = &mut self.slots[index];
        let i = usize::from(slot.kind == TransactionKind::Push);
        self.in_delivery[i] = self.in_delivery[i].saturating_sub(1);
        slot.psn = Some(psn);
        slot.state = match slot.kind {
            TransactionKind::Pull => InitiatorState::PullReqTx,
            TransactionKind::Push => InitiatorState::PushDataTx,
        };
        slot.sent_at = Some(now);
        if self.sweep_at.is_none() {
            let deadline = now.saturating_add(self.timeout);
            self.sweep_at = Some(deadline);
            self.new_deadline = Some(deadline);
        }
    }

    /// The earliest deadline added since the last call (the engine re-arms
    /// its wheel entry only when something earlier than it appeared).
    pub fn take_new_deadline(&mut self) -> Option<Timestamp> {
        self.new_deadline.take()
    }

    /// The earliest deadline added since the engine last took them, left in
    /// place.
    pub fn new_deadline(&self) -> Option<Timestamp> {
        self.new_deadline
    }

    /// The first transmission of our Pull Request or Push Data `rsn` left
    /// with `psn` (states PullReqTx / PushDataTx, §8.4.3); its soft-state
    /// timeout starts. Returns the payload to build the packet with (one
    /// slot lookup for both). Inline in the transmit
    /// loop, its only caller: out of line it would pay a call and its register
    /// saves per first transmission.
    #[inline]
    pub(crate) fn first_transmit(
        &mut self,
        now: Timestamp,
        rsn: Rsn,
        psn: Psn,
    ) -> TxPayload<'_, S> {
        let Some(index) = self.index(rsn) else {
            return TxPayload::EMPTY;
        };
        self.mark_sent(index, now, psn);
        self.slots[index].tx_payload()
    }

    /// Our request `rsn` left as a Resync 0x2 (the local xLR drop filter,
    /// OCP Falcon 0.9 §11): if this was its first transmission, it is
    /// recorded sent as its first transmission would be.
    pub fn on_local_xlr_sent(&mut self, now: Timestamp, rsn: Rsn, psn: Psn) {
        if let Some(index) = self.index(rsn).filter(|&i| self.slots[i].psn.is_none()) {
            self.mark_sent(index, now, psn);
        }
    }

    /// The payload of our packet `rsn` (for building it).
    pub(crate) fn payload(&self, rsn: Rsn) -> Option<TxPayload<'_, S>> {
        self.index(rsn).map(|i| self.slots[i].tx_payload())
    }

    /// Our packet for `rsn` (or the Resync that replaced it) was
    /// acknowledged: it left the retransmit buffer.
    #[cfg(any(test, feature = "testing"))]
    pub fn on_acked(&mut self, ctx: &mut Ctx<'_, B, S>, rsn: Rsn, sent: SentKind) {
        let mut owed = Demand::ZERO;
        self.acknowledge(ctx.shared, ctx.connection, rsn, sent, &mut owed);
        ctx.release(&owed);
        self.retire(ctx);
    }

    /// [`on_acked`](Self::on_acked) for `rsn`, then for each acknowledgement
    /// of ours at the front of the delivery sublayer's events: a cumulative
    /// ACK releases a run of packets (~64 pushes per BACK in
    /// `push64_psp_profile`), walked here with one context, one release of
    /// the resources they held and one pass retiring the finished slots.
    /// Each packet is otherwise handled exactly as `on_acked` handles it
    /// (same completions, same order, same request handback); the run stops at
    /// the first other event, which the engine dispatches as usual. The
    /// resources of the run are released at once (see also `retire` and
    /// `complete_slot`).
    pub fn on_acked_run(&mut self, ctx: &mut Ctx<'_, B, S>, rsn: Rsn, sent: SentKind) {
        let mut owed = Demand::ZERO;
        // The acknowledgements take the parts of `ctx` they use: the walk
        // over the delivery sublayer's queue (`take_acked_run`) holds
        // `ctx.delivery`.
        let (shared, connection) = (&mut *ctx.shared, ctx.connection);
        self.acknowledge(shared, connection, rsn, sent, &mut owed);
        ctx.delivery.take_acked_run(is_ours, |rsn, sent| {
            self.acknowledge(shared, connection, rsn, sent, &mut owed);
        });
        ctx.release(&owed);
        self.retire(ctx);
    }

    /// [`on_acked`](Self::on_acked) but for retiring the finished slots at
    /// the front and returning resources: what it frees is added to `owed`.
    /// Deferring both to the end of a run changes nothing the run can see:
    /// slots are found by RSN wherever the front is, and nothing in it reads
    /// the pools. (A push that completes at the front retires at once: the
    /// end of the run would only pop it.)
    #[inline(always)]
    fn acknowledge(
        &mut self,
        shared: &mut Shared<B, S>,
        connection: ConnectionHandle,
        rsn: Rsn,
        sent: SentKind,
        owed: &mut Demand,
    ) {
        let Some(index) = self.index(rsn) else {
            return;
        };
        let slot = &mut self.slots[index];
        match sent {
            SentKind::Transaction(PacketKind::PullRequest) => {
                if slot.state == InitiatorState::PullReqTx {
                    slot.state = InitiatorState::PullReqAckd;
                }
            }
            SentKind::Transaction(PacketKind::PushData) => {
                if slot.outcome.is_none() {
                    // §8.4.3.3: ACKed by the target (its ULP accepted it).
                    // The usual push (its packet still held, next to
                    // complete) takes the general path's `completes_now`
                    // branch below with everything it tests known here: the
                    // outcome kCmplAck (no outcome means not completed), the
                    // kind Push (as a Push Data's slot always is), the
                    // request handed back. As constants they are neither stored
                    // as PushDataAckd nor read back after the stores.
                    if slot.tx_held
                        && slot.kind == TransactionKind::Push
                        && (self.ordering == OrderingMode::Unordered || rsn == self.brsn)
                    {
                        debug_assert!(!slot.completed, "completed with no outcome");
                        slot.tx_held = false;
                        slot.outcome = Some((CompletionStatus::Ack, 0));
                        complete_with(
                            shared,
                            connection,
                            slot,
                            rsn,
                            TransactionKind::Push,
                            (CompletionStatus::Ack, 0),
                            true,
                            ALL_LANES,
                            owed,
                        );
                        if index == 0 {
                            // Retired at once, as below; then BRSN is at the
                            // front, and the next slot alone says whether
                            // `complete_ready` has anything to do (it usually
                            // has not; found by its RSN, the slot would take
                            // the whole index computation).
                            self.retire_finished_front(rsn);
                            match self.slots.front() {
                                None => return,
                                Some(next)
                                    if !next.completed
                                        && (self.ordering == OrderingMode::Unordered
                                            || next.outcome.is_none()) =>
                                {
                                    return
                                }
                                Some(_) => {}
                            }
                        }
                        self.complete_ready(shared, connection, rsn, owed);
                        return;
                    }
                    slot.state = InitiatorState::PushDataAckd;
                    slot.outcome = Some((CompletionStatus::Ack, 0));
                }
            }
            SentKind::Resync { code, .. } => {
                // §9.3.3.5 (CIE NACK): the push completes in error once the
                // Resync moved the target's window on; likewise a request
                // the local xLR drop filter matched (§11: kCmplLocalXlr).
                if let Some(nacked) = slot.nacked.take() {
                    slot.outcome.get_or_insert(nacked);
                } else if code == ResyncCode::LocalXlrFlow {
                    slot.outcome.get_or_insert((CompletionStatus::LocalXlr, 0));
                }
            }
            SentKind::Transaction(PacketKind::PullData) => return,
        }
        if slot.tx_held {
            slot.tx_held = false;
            if slot.completed {
                // The completion left the source here for a retransmission
                // that can no longer come.
                slot.source = None;
            }
            // The usual push: acknowledged with its outcome, and the next to
            // complete. It completes here, owing the Tx and Rx parts of its
            // demand at once, just as `settle` would complete it first
            // (ordered: it is at BRSN; unordered: `settle` completes `rsn`
            // first). One release instead of two.
            let completes_now = !slot.completed
                && slot.outcome.is_some()
                && (self.ordering == OrderingMode::Unordered || rsn == self.brsn);
            if completes_now {
                complete_slot(shared, connection, slot, rsn, ALL_LANES, owed);
                if index == 0 {
                    // Finished at the front (the usual in-order push), it
                    // retires here: `retire` would only pop it at the end of
                    // the run (the completion took its request and data). BRSN,
                    // which is `rsn` at the front, moves past it as
                    // `complete_ready` would first. Both would find the slot
                    // again.
                    self.retire_finished_front(rsn);
                }
            } else {
                owed.add_lanes(&slot.demand, TX_LANES);
            }
        }
        self.complete_ready(shared, connection, rsn, owed);
    }

    /// The target NACKed our packet `rsn` with CIE, NRE, invalid CID or xLR
    /// drop; the delivery sublayer is resyncing it (§9.2.4, §11).
    pub fn on_nacked(&mut self, rsn: Rsn, code: NackCode, ulp_nack_code: u8) {
        let Some(index) = self.index(rsn) else {
            return;
        };
        // §11 initiator table: the completion code of each remote NACK.
        let status = match code {
            NackCode::UlpCompletionInError => CompletionStatus::TargetCompletionInError,
            NackCode::UlpNonRecoverableError => CompletionStatus::TargetNonRecoverableError,
            NackCode::InvalidCid => CompletionStatus::TargetInvalidCid,
            _ => CompletionStatus::RemoteError,
        };
        self.slots[index].nacked = Some((status, ulp_nack_code));
    }

    /// The delivery sublayer gave up on our packet `rsn` (Max Retransmit
    /// Attempts; a Resync 0x3 takes its PSN): kCmplLocalTO (§11 footnote 1).
    pub fn on_exhausted(&mut self, ctx: &mut Ctx<'_, B, S>, rsn: Rsn) {
        let Some(index) = self.index(rsn) else {
            return;
        };
        let slot = &mut self.slots[index];
        if slot.outcome.is_none() && !slot.completed {
            slot.outcome = Some((CompletionStatus::LocalTimeout, 0));
            ctx.shared.stats.timeouts += 1;
        }
        self.settle(ctx, rsn);
    }

    /// The target resynced its Pull Data for our pull `rsn` away: it will
    /// never come (kCmplRemoteErr).
    pub fn on_pull_data_resynced(&mut self, ctx: &mut Ctx<'_, B, S>, rsn: Rsn) {
        let Some(index) = self.index(rsn) else {
            return;
        };
        let slot = &mut self.slots[index];
        if slot.kind == TransactionKind::Pull && slot.outcome.is_none() && !slot.completed {
            slot.outcome = Some((CompletionStatus::RemoteError, 0));
        }
        self.settle(ctx, rsn);
    }

    /// §8.4.3.2: Pull Data arrived. Match its RSN against the outstanding
    /// pulls, take it (into the Rx resources the Pull Request reserved),
    /// and complete in RSN order. Unmatched Pull Data is acknowledged and
    /// dropped (see the module decisions).
    ///
    /// Pull Data that is stored takes its frame, which reaches the ULP
    /// without a copy ([`RxPayload::store`]): a duplicate, unmatched,
    /// refused, too long or zero-length one leaves it with the caller.
    pub fn on_pull_data(
        &mut self,
        ctx: &mut Ctx<'_, B, S>,
        arrival: Arrival,
        payload: RxPayload<'_, B>,
    ) {
        let rsn = arrival.rsn;
        let matched = self.index(rsn).filter(|&i| {
            let slot = &self.slots[i];
            slot.kind == TransactionKind::Pull
                && slot.outcome.is_none()
                && !slot.completed
                && matches!(
                    slot.state,
                    InitiatorState::PullReqTx | InitiatorState::PullReqAckd
                )
        });
        let admitted = ctx.delivery.admit(ctx.now, arrival);
        let Some(index) = matched else {
            ctx.shared.drops.record(DropReason::UnmatchedPullData);
            return;
        };
        if let Err(reason) = admitted {
            ctx.shared.drops.record(reason);
            return;
        }
        let slot = &mut self.slots[index];
        slot.state = InitiatorState::PullDataRx;
        slot.outcome = Some(if payload.len() > usize::from(slot.request_length) {
            (CompletionStatus::OperationError, 0)
        } else if payload.is_empty() && slot.request_length > 0 {
            // §8.5.3.5: the target ULP completes a pull in error with a
            // zero-length Pull Data.
            (CompletionStatus::TargetCompletionInError, 0)
        } else {
            slot.data = payload.store(&mut ctx.shared.stats.zero_copy_pull_data);
            (CompletionStatus::Ack, 0)
        });
        self.settle(ctx, rsn);
    }

    /// Transaction timeouts due at `now` (§11 initiator table: kCmplLocalTO,
    /// Rx resources reclaimed). A packet still in the retransmit buffer is
    /// replaced by a Resync (0x4) so the target skips the RSN.
    pub fn handle_timeout(&mut self, ctx: &mut Ctx<'_, B, S>) {
        if self.sweep_at.map_or(true, |at| at > ctx.now) {
            return;
        }
        let mut next: Option<Timestamp> = None;
        let mut index = 0;
        while index < self.slots.len() {
            let slot = &mut self.slots[index];
            index += 1;
            let Some(sent_at) = slot.sent_at else {
                continue;
            };
            if slot.outcome.is_some() || slot.completed {
                continue;
            }
            let deadline = sent_at.saturating_add(self.timeout);
            if deadline > ctx.now {
                next = Some(next.map_or(deadline, |n| n.min(deadline)));
                continue;
            }
            if slot.tx_held && slot.nacked.is_none() {
                if let Some(psn) = slot.psn {
                    let window = match slot.kind {
                        TransactionKind::Pull => PacketKind::PullRequest.window(),
                        TransactionKind::Push => PacketKind::PushData.window(),
                    };
                    // Not outstanding any more (acknowledged, already a
                    // Resync): nothing to replace.
                    let _ = ctx
                        .delivery
                        .resync(window, psn, ResyncCode::TransactionTimedOut);
                }
            }
            slot.outcome = Some((CompletionStatus::LocalTimeout, 0));
            ctx.shared.stats.timeouts += 1;
            let rsn = self.retired.wrapping_add(index as u32 - 1);
            let before = self.slots.len();
            self.settle(ctx, rsn);
            // Settling may retire slots at the front (this one, and finished
            // ones after it): keep the position among the rest.
            index = index.saturating_sub(before - self.slots.len());
        }
        self.sweep_at = next;
    }

    /// The target RNR-NACKed our request `rsn` at `now`: its soft-state
    /// timeout restarts. An RNR NACK is the target's answer, so the
    /// transaction is not lost; §8.5.3.4 lets a slow ULP (and, on an
    /// ordered connection, every request behind the one it refused) wait
    /// RNR timeouts of up to 655.36 ms, any number of times. Moving a
    /// deadline later keeps `sweep_at` a lower bound.
    ///
    /// Returns the transaction's tag while it is outstanding.
    pub fn on_receiver_not_ready(&mut self, now: Timestamp, rsn: Rsn) -> Option<u64> {
        let index = self.index(rsn)?;
        let slot = &mut self.slots[index];
        if slot.sent_at.is_some() && slot.outcome.is_none() && !slot.completed {
            slot.sent_at = Some(now);
            return Some(slot.tag);
        }
        None
    }

    /// Gives the slots to `pool` if none is in use (the engine's upkeep,
    /// once a burst, on each connection an input touched; `ring.rs`).
    #[inline]
    pub(crate) fn lend_idle(&mut self, pool: &mut RingPool<Slot<B, S>>) {
        self.slots.lend_if_idle(pool);
    }

    /// Slots held, in use or not (none when idle: lent to the pool).
    #[cfg(test)]
    pub(crate) fn slots_held(&self) -> usize {
        self.slots.capacity()
    }

    /// The next timeout sweep.
    pub fn next_deadline(&self) -> Option<Timestamp> {
        self.sweep_at
    }

    /// The connection died: every transaction not yet completed completes
    /// with kCmplDeadConn (in RSN order), and all its resources return
    /// (§11: "Connection not alive ... reclaim").
    pub fn fail_all(&mut self, ctx: &mut Ctx<'_, B, S>) {
        self.queued = [self.nrsn; 2];
        self.queued_len = [0; 2];
        self.in_delivery = [0; 2];
        self.sweep_at = None;
        for slot in self.slots.iter_mut() {
            if slot.tx_held {
                slot.tx_held = false;
                ctx.release_lanes(&slot.demand, TX_LANES);
            }
            if !slot.completed && slot.outcome.is_none() {
                slot.outcome = Some((CompletionStatus::DeadConnection, 0));
            }
        }
        let mut rsn = self.brsn;
        while rsn != self.nrsn {
            self.settle(ctx, rsn);
            rsn = rsn.next();
        }
    }

    /// BRSN and NRSN.
    pub fn rsns(&self) -> (Rsn, Rsn) {
        (self.brsn, self.nrsn)
    }

    /// Transactions submitted and not yet completed to the ULP.
    pub fn outstanding(&self) -> u32 {
        self.brsn.distance(self.nrsn)
    }

    /// The state of transaction `rsn`, if it is still tracked.
    #[cfg(any(test, feature = "testing"))]
    pub fn state(&self, rsn: Rsn) -> Option<InitiatorState> {
        self.index(rsn).map(|i| self.slots[i].state)
    }

    /// Completes what can be completed after `rsn` changed: on ordered
    /// connections every transaction from BRSN on that has an outcome, in
    /// RSN order (§8.4.2); on unordered ones `rsn` itself. Then retires the
    /// finished slots at the front.
    fn settle(&mut self, ctx: &mut Ctx<'_, B, S>, rsn: Rsn) {
        let mut owed = Demand::ZERO;
        self.complete_ready(ctx.shared, ctx.connection, rsn, &mut owed);
        ctx.release(&owed);
        self.retire(ctx);
    }

    /// [`settle`](Self::settle) but for retiring and returning resources:
    /// the Rx parts of the demands of what it completes are added to `owed`.
    #[inline(always)]
    fn complete_ready(
        &mut self,
        shared: &mut Shared<B, S>,
        connection: ConnectionHandle,
        rsn: Rsn,
        owed: &mut Demand,
    ) {
        match self.ordering {
            OrderingMode::Ordered => {
                while let Some(index) = self.index(self.brsn) {
                    let slot = &self.slots[index];
                    if !slot.completed {
                        if slot.outcome.is_none() {
                            break;
                        }
                        self.complete(shared, connection, index, RX_LANES, owed);
                    }
                    self.brsn = self.brsn.next();
                }
            }
            OrderingMode::Unordered => {
                if let Some(index) = self.index(rsn).filter(|&i| !self.slots[i].completed) {
                    self.complete(shared, connection, index, RX_LANES, owed);
                }
                while let Some(index) = self.index(self.brsn) {
                    if !self.slots[index].completed {
                        break;
                    }
                    self.brsn = self.brsn.next();
                }
            }
        }
    }

    /// Retires the finished slots at the front (completed, and their packet
    /// out of the retransmit buffer).
    #[inline]
    fn retire(&mut self, ctx: &mut Ctx<'_, B, S>) {
        while let Some(front) = self.slots.front() {
            if !front.completed || front.tx_held {
                break;
            }
            if let Some(front) = self.slots.pop_front() {
                // Both are normally empty by now (the completion or the ACK
                // after it took them): test before writing.
                front.source = None;
                if front.data.has_frame() {
                    ctx.shared.release(core::mem::take(&mut front.data));
                }
            }
            self.retired = self.retired.next();
        }
        if self.slots.len() == 0 {
            // Nothing outstanding, nothing to time out: an idle connection
            // holds no soft-state deadline (at 1 M connections each one
            // would fire on a connection no cache holds).
            self.sweep_at = None;
        }
    }

    /// Hands slot `index`'s completion to the ULP if it has an outcome and
    /// has not completed (PushCplTx / PullDataUlpTx), adding the `lanes` of
    /// its demand to `owed`: its Rx part, or all of it when the caller
    /// frees the Tx part at the same time.
    #[inline]
    fn complete(
        &mut self,
        shared: &mut Shared<B, S>,
        connection: ConnectionHandle,
        index: usize,
        lanes: [u32; 8],
        owed: &mut Demand,
    ) {
        let rsn = self.retired.wrapping_add(index as u32);
        complete_slot(shared, connection, &mut self.slots[index], rsn, lanes, owed);
    }

    /// Retires the front slot, `rsn`, just completed with its packet out
    /// of the retransmit buffer (the completion took its request and
    /// data); BRSN, which is `rsn` at the front, moves past it as
    /// `complete_ready` would first.
    #[inline(always)]
    fn retire_finished_front(&mut self, rsn: Rsn) {
        self.slots.retire_front();
        self.retired = rsn.next();
        self.brsn = rsn.next();
        if self.slots.len() == 0 {
            // As in `retire`: idle, no soft-state deadline.
            self.sweep_at = None;
        }
    }

    fn index(&self, rsn: Rsn) -> Option<usize> {
        let offset = rsn.offset_from(self.retired);
        (offset >= 0 && (offset as usize) < self.slots.len()).then_some(offset as usize)
    }
}

/// [`Initiator::complete`] of `slot`, which holds `rsn`. Inlined where a push
/// completes on its ACK (the common case): no call, no register saves, and the
/// slot is not found again.
#[inline(always)]
fn complete_slot<B: PacketBuf, S>(
    shared: &mut Shared<B, S>,
    connection: ConnectionHandle,
    slot: &mut Slot<B, S>,
    rsn: Rsn,
    lanes: [u32; 8],
    owed: &mut Demand,
) {
    if slot.completed {
        return;
    }
    let Some(outcome) = slot.outcome else {
        return;
    };
    let (kind, request_free) = (slot.kind, !slot.tx_held);
    complete_with(
        shared,
        connection,
        slot,
        rsn,
        kind,
        outcome,
        request_free,
        lanes,
        owed,
    );
}

/// [`complete_slot`] of `slot`, not completed, of `kind` with its
/// `outcome`, its request handed back if `request_free` (its packet out of
/// the retransmit buffer): all three constants where a push completes on
/// its ACK.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn complete_with<B: PacketBuf, S>(
    shared: &mut Shared<B, S>,
    connection: ConnectionHandle,
    slot: &mut Slot<B, S>,
    rsn: Rsn,
    kind: TransactionKind,
    (status, ulp_nack_code): (CompletionStatus, u8),
    request_free: bool,
    lanes: [u32; 8],
    owed: &mut Demand,
) {
    slot.completed = true;
    slot.state = match kind {
        TransactionKind::Pull => InitiatorState::PullDataUlpTx,
        TransactionKind::Push => InitiatorState::PushCplTx,
    };
    let stats = &mut shared.stats;
    stats.completions[usize::from(status.code())] += 1;
    if status.is_ok() {
        match kind {
            TransactionKind::Push => stats.push_bytes_completed += u64::from(slot.request_length),
            TransactionKind::Pull => stats.pull_bytes_completed += slot.data.len() as u64,
        }
    }
    owed.add_lanes(&slot.demand, lanes);
    // Built in the push, after every other effect: with the request and the
    // data taken into locals first and the statistics in between, the event
    // would be assembled on the stack and copied again into the queue.
    shared.events.push_back(UlpEvent::Completion(Completion {
        connection,
        rsn,
        tag: slot.tag,
        kind,
        status,
        ulp_nack_code,
        // The request goes back to the ULP unless a retransmission may still
        // copy from it. Taken before `data`: the other way round, the data
        // would be parked on the stack across this branch and copied twice.
        source: if request_free {
            slot.source.take()
        } else {
            None
        },
        data: core::mem::take(&mut slot.data),
    }));
}

impl<B: PacketBuf, S: DataSource> Slot<B, S> {
    /// The packet's payload: the ULP header, then a push's data.
    #[inline(always)]
    fn tx_payload(&self) -> TxPayload<'_, S> {
        TxPayload {
            header: self.header.as_slice(),
            data: self.source.as_ref(),
        }
    }
}

/// Whether a payload handle names one of the initiator's packets.
fn is_ours(handle: PayloadHandle) -> bool {
    decode_handle(handle).0 == Role::Initiator
}

#[cfg(test)]
mod tests {
    use crate::transaction::UlpHeader;
    use proptest::prelude::*;

    use super::*;
    use crate::delivery::Event;
    use crate::resources::{Account, Credit};
    use crate::transaction::{Shared, Transaction};
    use crate::wire::{PacketType, RnrTimeout, Window};

    /// An initiator over a delivery sublayer whose events the test scripts.
    struct Harness {
        delivery: DeliveryConnection,
        account: Account,
        shared: Shared,
        initiator: Initiator,
        now: Timestamp,
    }

    impl Harness {
        fn new(ordering: OrderingMode) -> Self {
            let (delivery, account, shared) =
                super::super::tests::sublayer(ordering, Psn::new(0), Psn::new(0));
            Harness {
                delivery,
                account,
                shared,
                initiator: Initiator::new(
                    ordering,
                    Rsn::new(u32::MAX - 20),
                    core::time::Duration::from_secs(1),
                ),
                now: Timestamp::from_micros(10),
            }
        }

        fn ctx(&mut self) -> (&mut Initiator, Ctx<'_>) {
            (
                &mut self.initiator,
                Ctx {
                    now: self.now,
                    connection: ConnectionHandle {
                        index: 0,
                        generation: 0,
                    },
                    delivery: &mut self.delivery,
                    account: &mut self.account,
                    shared: &mut self.shared,
                },
            )
        }

        /// Hands the queued events to the initiator as the engine's
        /// dispatch does: runs of its acknowledgements through
        /// `on_acked_run` (`batched`) or each through `on_acked`.
        fn dispatch(&mut self, batched: bool) {
            while let Some(event) = self.delivery.poll_event() {
                let (initiator, mut ctx) = self.ctx();
                match event {
                    Event::Acked {
                        rsn, kind, handle, ..
                    } if is_ours(handle) => {
                        if batched {
                            initiator.on_acked_run(&mut ctx, rsn, kind);
                        } else {
                            initiator.on_acked(&mut ctx, rsn, kind);
                        }
                    }
                    Event::Nacked {
                        rsn,
                        code,
                        ulp_nack_code,
                        ..
                    } => initiator.on_nacked(rsn, code, ulp_nack_code),
                    Event::RetransmitExhausted { rsn, .. } => initiator.on_exhausted(&mut ctx, rsn),
                    Event::Resynced {
                        rsn,
                        original: PacketType::PullData,
                        ..
                    } => initiator.on_pull_data_resynced(&mut ctx, rsn),
                    _ => {}
                }
            }
        }

        /// Everything the ULP and the pools can see.
        fn observed(&mut self) -> impl PartialEq + core::fmt::Debug {
            let events: Vec<_> = self.shared.events.drain(..).collect();
            let used: Vec<u32> = Credit::ALL
                .iter()
                .map(|&c| self.shared.resources.used(c))
                .collect();
            (
                events,
                used,
                self.shared.stats,
                self.shared.released.len(),
                self.initiator.rsns(),
                self.initiator.outstanding(),
            )
        }
    }

    /// What a packet of the initiator's can still go through: its
    /// transaction packet is outstanding, or a Resync replaced it.
    #[derive(Clone, Copy, PartialEq)]
    enum Packet {
        Outstanding,
        Resyncing(ResyncCode),
        Gone,
    }

    /// The events `ops` (pairs of an action and a transaction) script for
    /// transactions of `kinds` (true: pull) with RSNs from `first`, in
    /// batches: every packet leaves the retransmit buffer once (ACKed, or
    /// NACKed or exhausted and its Resync ACKed), as the delivery sublayer
    /// guarantees; a Pull Data may be resynced away (and is, at the end, if
    /// it has not been: this initiator gets no Pull Data); the target's
    /// packets and RNR notifications cut the runs.
    fn script(first: Rsn, kinds: &[bool], ops: &[(u8, usize)]) -> Vec<Vec<Event>> {
        let mut packets = vec![Packet::Outstanding; kinds.len()];
        let mut pull_data_resynced = vec![false; kinds.len()];
        let mut batches = vec![Vec::new()];
        let original = |i: usize| {
            if kinds[i] {
                PacketKind::PullRequest
            } else {
                PacketKind::PushData
            }
        };
        let window = |i: usize| original(i).window();
        let ack = |i: usize, kind: SentKind| {
            let rsn = first.wrapping_add(i as u32);
            Event::Acked {
                window: window(i),
                psn: Psn::new(i as u32),
                rsn,
                kind,
                handle: payload_handle(Role::Initiator, rsn),
            }
        };
        let all = ops
            .iter()
            .copied()
            .chain((0..kinds.len()).flat_map(|i| [(0, i), (0, i), (6, i)]));
        for (action, i) in all {
            let i = i % kinds.len();
            let rsn = first.wrapping_add(i as u32);
            let batch = batches.last_mut().expect("one batch at least");
            match (action, packets[i]) {
                (0..=3, Packet::Outstanding) => {
                    batch.push(ack(i, SentKind::Transaction(original(i))));
                    packets[i] = Packet::Gone;
                }
                (0..=3, Packet::Resyncing(code)) => {
                    let original = original(i);
                    batch.push(ack(i, SentKind::Resync { code, original }));
                    packets[i] = Packet::Gone;
                }
                (4, Packet::Outstanding) => {
                    let (code, resync) = [
                        (
                            NackCode::UlpCompletionInError,
                            ResyncCode::TargetUlpCompletionInError,
                        ),
                        (
                            NackCode::UlpNonRecoverableError,
                            ResyncCode::TargetUlpNonRecoverableError,
                        ),
                        (NackCode::InvalidCid, ResyncCode::TargetUlpInvalidCid),
                        (NackCode::XlrDrop, ResyncCode::RemoteXlrFlow),
                    ][i % 4];
                    batch.push(Event::Nacked {
                        window: window(i),
                        psn: Psn::new(i as u32),
                        rsn,
                        code,
                        ulp_nack_code: i as u8,
                        handle: payload_handle(Role::Initiator, rsn),
                    });
                    packets[i] = Packet::Resyncing(resync);
                }
                (5, Packet::Outstanding) => {
                    batch.push(Event::RetransmitExhausted {
                        window: window(i),
                        psn: Psn::new(i as u32),
                        rsn,
                        handle: payload_handle(Role::Initiator, rsn),
                    });
                    packets[i] = Packet::Resyncing(ResyncCode::RetransmissionExhausted);
                }
                (6, _) if kinds[i] && !pull_data_resynced[i] => {
                    pull_data_resynced[i] = true;
                    batch.push(Event::Resynced {
                        window: Window::Data,
                        psn: Psn::new(i as u32),
                        rsn,
                        code: ResyncCode::TargetUlpCompletionInError,
                        original: PacketType::PullData,
                    });
                }
                (7, _) => batch.push(Event::Acked {
                    window: Window::Data,
                    psn: Psn::new(i as u32),
                    rsn,
                    kind: SentKind::Transaction(PacketKind::PullData),
                    handle: payload_handle(Role::Target, rsn),
                }),
                (8, _) => batch.push(Event::ReceiverNotReady {
                    psn: Psn::new(i as u32),
                    rsn,
                    timeout: RnrTimeout::LONGEST,
                    ulp_nack_code: 0,
                    handle: payload_handle(Role::Initiator, rsn),
                }),
                (9, _) => batches.push(Vec::new()),
                _ => {}
            }
        }
        batches
    }

    /// Replays the script of `ops` on two initiators, one walking runs of
    /// acknowledgements with `on_acked_run`, the other taking every event
    /// on its own with `on_acked`: the ULP, the pools and the counters see
    /// the same after every batch.
    fn same_as_per_event(ordering: OrderingMode, kinds: &[bool], ops: &[(u8, usize)]) {
        let [mut batched, mut single] = [Harness::new(ordering), Harness::new(ordering)];
        let mut first = None;
        for (i, &pull) in kinds.iter().enumerate() {
            for h in [&mut batched, &mut single] {
                let now = h.now;
                let (initiator, ctx) = h.ctx();
                let payload = vec![i as u8; 8 + i % 5];
                let transaction = if pull {
                    Transaction::pull(i as u64, 16)
                        .with_header(UlpHeader::new(&payload).expect("short header"))
                } else {
                    Transaction::push(i as u64, payload)
                };
                let rsn = initiator
                    .submit_with(ctx.shared, ctx.account, ctx.connection, transaction)
                    .expect("credits");
                let _ = initiator.first_transmit(now, rsn, Psn::new(i as u32));
                first.get_or_insert(rsn);
            }
        }
        let first = first.expect("one transaction at least");
        for batch in script(first, kinds, ops) {
            for (h, batched_side) in [(&mut batched, true), (&mut single, false)] {
                for &event in &batch {
                    h.delivery.push_event(event);
                }
                h.dispatch(batched_side);
            }
            assert_eq!(batched.observed(), single.observed());
        }
        // Every transaction completed, and everything went back.
        assert_eq!(batched.initiator.outstanding(), 0);
        assert!(Credit::ALL
            .iter()
            .all(|&c| batched.shared.resources.used(c) == 0));
    }

    proptest! {
        /// Pushes, pulls, NACKs, exhaustions, resynced Pull Data and the
        /// target's events, in any order and any batching, on both kinds of
        /// connection.
        #[test]
        fn acknowledgement_runs_match_single_events(
            ordered in any::<bool>(),
            kinds in proptest::collection::vec(any::<bool>(), 1..40),
            ops in proptest::collection::vec((0u8..12, 0usize..40), 0..160),
        ) {
            let ordering = if ordered { OrderingMode::Ordered } else { OrderingMode::Unordered };
            same_as_per_event(ordering, &kinds, &ops);
        }
    }

    /// Submits a push (`false`) or a pull (`true`); returns its RSN.
    fn submit_kind(h: &mut Harness, pull: bool) -> Rsn {
        let (initiator, ctx) = h.ctx();
        let transaction = if pull {
            Transaction::pull(0, 16).with_header(UlpHeader::new(&[1; 8]).expect("short header"))
        } else {
            Transaction::push(0, vec![2; 8])
        };
        initiator
            .submit_with(ctx.shared, ctx.account, ctx.connection, transaction)
            .expect("credits")
    }

    /// Tops the delivery sublayer up and sends what it picks, as the
    /// engine's transmit does, until it has nothing (at most `max`
    /// packets): the RSNs sent with their kind (true: Pull Request).
    fn transmit(h: &mut Harness, max: usize) -> Vec<(bool, Rsn)> {
        let mut sent = Vec::new();
        while sent.len() < max {
            h.initiator.top_up(&mut h.delivery);
            let Some(packet) = h.delivery.poll_transmit(h.now) else {
                break;
            };
            let (role, rsn) = decode_handle(packet.handle.expect("a transaction packet"));
            assert_eq!(role, Role::Initiator);
            let pull = matches!(packet.repr, crate::wire::FalconRepr::PullRequest(_));
            let _ = h.initiator.first_transmit(h.now, rsn, packet.psn());
            sent.push((pull, rsn));
        }
        sent
    }

    /// The per-kind queues are cursors over the slot ring: each kind goes
    /// out exactly once and in RSN order, the cursors passing over the
    /// other kind's slots, whether the next of a kind is right at its
    /// cursor (the fast case) or further on.
    #[test]
    fn queues_hand_each_kind_over_in_rsn_order() {
        for ordering in [OrderingMode::Ordered, OrderingMode::Unordered] {
            let mut h = Harness::new(ordering);
            let kinds = [false, true, false, true, true, false, false, true];
            let rsns: Vec<Rsn> = kinds.iter().map(|&k| submit_kind(&mut h, k)).collect();
            assert!(h.initiator.has_queued());
            let sent = transmit(&mut h, usize::MAX);
            assert!(!h.initiator.has_queued());
            let mut all: Vec<Rsn> = sent.iter().map(|&(_, rsn)| rsn).collect();
            all.sort_by_key(|rsn| rsn.offset_from(rsns[0]));
            assert_eq!(all, rsns, "each transaction sent once");
            for kind in [false, true] {
                let of_kind: Vec<Rsn> = sent
                    .iter()
                    .filter(|&&(k, _)| k == kind)
                    .map(|&(_, rsn)| rsn)
                    .collect();
                let expected: Vec<Rsn> = rsns
                    .iter()
                    .zip(kinds)
                    .filter(|&(_, k)| k == kind)
                    .map(|(&rsn, _)| rsn)
                    .collect();
                assert_eq!(of_kind, expected, "RSN order within a kind");
            }
            // Submitted after everything went out: queued again.
            let late = submit_kind(&mut h, true);
            assert_eq!(transmit(&mut h, usize::MAX), vec![(true, late)]);
        }
    }

    /// A cursor left on a slot of the other kind that retires before the
    /// cursor's next turn restarts at the front (everything retired was
    /// handed over).
    #[test]
    fn a_queue_cursor_behind_the_front_restarts_there() {
        let mut h = Harness::new(OrderingMode::Ordered);
        let push = submit_kind(&mut h, false);
        let pull = submit_kind(&mut h, true);
        // The push cursor now rests on the pull's slot.
        assert_eq!(transmit(&mut h, 2).len(), 2);
        let next = submit_kind(&mut h, false);
        // Both first transactions finish and retire: the push ACKed, the
        // pull ACKed and its Pull Data resynced away.
        let ack = |rsn: Rsn, kind: PacketKind| Event::Acked {
            window: kind.window(),
            psn: Psn::new(0),
            rsn,
            kind: SentKind::Transaction(kind),
            handle: payload_handle(Role::Initiator, rsn),
        };
        h.delivery.push_event(ack(push, PacketKind::PushData));
        h.delivery.push_event(ack(pull, PacketKind::PullRequest));
        h.delivery.push_event(Event::Resynced {
            window: Window::Data,
            psn: Psn::new(0),
            rsn: pull,
            code: ResyncCode::TargetUlpCompletionInError,
            original: PacketType::PullData,
        });
        h.dispatch(true);
        assert_eq!(h.initiator.outstanding(), 1);
        assert_eq!(
            h.initiator.index(next),
            Some(0),
            "the finished slots retired"
        );
        assert_eq!(transmit(&mut h, usize::MAX), vec![(false, next)]);
        assert!(!h.initiator.has_queued());
    }

    /// The common case, spelled out: one cumulative ACK of a window of
    /// pushes, with a NACKed push, its Resync and a pull resynced away among
    /// them.
    #[test]
    fn a_window_of_pushes_in_one_run() {
        let kinds: Vec<bool> = (0..64).map(|i| i == 10).collect();
        let ops = [(4, 3), (6, 10), (9, 0), (0, 3), (0, 10)];
        same_as_per_event(OrderingMode::Ordered, &kinds, &ops);
        same_as_per_event(OrderingMode::Unordered, &kinds, &ops);
    }
}
