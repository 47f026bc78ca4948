//! The transmit path: which packet goes next, and building its header.
//!
//! Layer: delivery (transmitter side). Implements
//! [`DeliveryConnection::poll_transmit`]: retransmissions before first
//! transmissions, each gated by fcwnd/ncwnd (OCP Falcon 0.9 §9.1.2) and
//! paced when fcwnd < 1 or rate-capped; PSN order within a window and, on ordered
//! connections, RSN order across windows (§9.1.3, §9.1.5); the AR bit
//! (§9.1.3.1); and the piggy-backed RBPSN/DBPSN that may stop the ACK
//! coalescing timer (§9.1.6). No IO: the caller emits the returned header
//! and copies the payload named by the handle.

use rue::RetransmitReason;

use crate::delivery::connection::{DeliveryConnection, OrderingMode};
use crate::delivery::packet::{PacketKind, PayloadHandle, Retransmission, SentKind, TxPacket};
use crate::delivery::tx_window::SentPacket;
use crate::seq::{Psn, Rsn};
use crate::time::{Timestamp, TIMING_WHEEL_UNIT_NANOS};
use crate::wire::{
    BaseHeader, FalconRepr, PullDataRepr, PullRequestRepr, PushDataRepr, ResyncCode, ResyncRepr,
    Window,
};

/// The three first-transmission queues.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Queue {
    // Push Data first: the usual queue is then the variant tested first (zero)
    // where `send_first` dispatches on it.
    PushData,
    PullData,
    PullRequests,
}

impl Queue {
    /// The kind of every packet in the queue.
    const fn kind(self) -> PacketKind {
        match self {
            Queue::PullData => PacketKind::PullData,
            Queue::PullRequests => PacketKind::PullRequest,
            Queue::PushData => PacketKind::PushData,
        }
    }
}

/// What [`DeliveryConnection::pick_retransmit`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RetransmitPick {
    /// Retransmit this packet now.
    Send(Window, Psn),
    /// Nothing marked may go, and nothing marked holds the requests.
    Nothing,
    /// A marked request may not go now: no request's first transmission
    /// may either (ordered connections); Pull Data still may.
    HoldRequests,
}

impl DeliveryConnection {
    /// The next packet to put on the wire, if the congestion windows and the
    /// pacing gap allow one now: retransmissions (and Resyncs) first, then
    /// first transmissions, which get their PSN here (§9.1.3). Call until
    /// `None` after every input.
    #[inline]
    pub fn poll_transmit(&mut self, now: Timestamp) -> Option<TxPacket> {
        if self.failed.is_some() {
            return None;
        }
        // Nothing marked in either window (the common case): the out-of-line
        // `pick_retransmit` is skipped.
        let marked =
            self.tx_request.retransmit_pending() > 0 || self.tx_data.retransmit_pending() > 0;
        // A retransmission and a first transmission each go from their own pick
        // to their own send: one `Option<Candidate>` for both would be packed
        // into a register and unpacked again per packet.
        if marked {
            match self.pick_retransmit() {
                RetransmitPick::Send(window, psn) => {
                    if !self.pace(now) {
                        return None;
                    }
                    return self.send_retransmission(now, window, psn);
                }
                RetransmitPick::HoldRequests => return self.send_first_pull_data(now),
                RetransmitPick::Nothing => {}
            }
        }
        let Some(queue) = self.pick_first() else {
            self.pacer.cancel();
            return None;
        };
        if !self.pace(now) {
            return None;
        }
        self.send_first(now, queue)
    }

    /// Whether the packet picked may leave now, and if so its turn is taken
    /// (the round robin moves on).
    #[inline(always)]
    fn pace(&mut self, now: Timestamp) -> bool {
        if self.gate().is_paced() || self.pacer.is_rate_capped() {
            if !self.pace_held(now) {
                return false;
            }
        } else {
            self.pacer.cancel();
        }
        self.round_robin = self.round_robin.wrapping_add(1);
        true
    }

    /// [`pace`](Self::pace) for a connection that is paced: whether its
    /// release time has come. Out of line: inlined, the larger transmit
    /// path of every connection no longer inlined the window push.
    #[inline(never)]
    fn pace_held(&mut self, now: Timestamp) -> bool {
        // §10.3.5: with fcwnd < 1 the timing wheel spaces packets by the
        // inter-packet gap (512 ns units, spec/rue.md §1.11 item 8), counted
        // from when the packet became eligible (`crate::pacing::Timestamper`);
        // otherwise only the rate cap holds it.
        let gap = if self.gate().is_paced() {
            u64::from(self.rue.state.inter_packet_gap) * TIMING_WHEEL_UNIT_NANOS
        } else {
            0
        };
        self.pacer.admit(now, gap)
    }

    /// The retransmission to send now, if any; on an ordered connection a
    /// marked request that cannot go (its gate is shut, or it waits behind
    /// a packet whose gate is) holds every later first transmission of a
    /// request too. §9.1.5: "On an ordered connection, the transmitter must
    /// retransmit the packet in RSN order across both request and data
    /// sliding windows", and a first transmission has a higher RSN than
    /// every packet already sent, so it may not overtake one.
    fn pick_retransmit(&self) -> RetransmitPick {
        if let Some((window, psn)) = self.pick_open_retransmit() {
            return RetransmitPick::Send(window, psn);
        }
        let waiting_request = self.tx_request.first_marked().is_some()
            || self.tx_data.first_marked_request().is_some();
        if self.params.ordering == OrderingMode::Ordered && waiting_request {
            RetransmitPick::HoldRequests
        } else {
            RetransmitPick::Nothing
        }
    }

    /// The lowest marked PSN of a window whose gate is open. §9.1.5: PSN
    /// order within a window; on ordered connections RSN order across the
    /// windows for the initiator's requests (Pull Data carries the peer's
    /// RSNs and is not ordered against them).
    fn pick_open_retransmit(&self) -> Option<(Window, Psn)> {
        let gate = self.gate();
        let head = |window: Window| {
            let tx = self.tx(window);
            let psn = tx.first_marked()?;
            let slot = tx.slot(psn)?;
            Some((window, psn, *slot))
        };
        let open = |(window, psn, slot): (Window, Psn, SentPacket)| {
            gate.allows_retransmit(self.tx(window), psn, slot.is_request())
        };
        let pick = |(window, psn, _): (Window, Psn, SentPacket)| (window, psn);
        match (head(Window::Request), head(Window::Data)) {
            (None, None) => None,
            (Some(one), None) | (None, Some(one)) => open(one).then(|| pick(one)),
            (Some(request), Some(data)) => {
                if self.params.ordering == OrderingMode::Ordered {
                    if data.2.is_request() {
                        let first = if data.2.rsn.before(request.2.rsn) {
                            data
                        } else {
                            request
                        };
                        return open(first).then(|| pick(first));
                    }
                    // The data head is Pull Data, free of our RSN order; the
                    // Pull Request still waits behind a marked Push Data of
                    // lower RSN further up the data window.
                    let behind_push = self
                        .tx_data
                        .first_marked_request()
                        .and_then(|psn| self.tx_data.slot(psn))
                        .is_some_and(|push| push.rsn.before(request.2.rsn));
                    if behind_push {
                        return open(data).then(|| pick(data));
                    }
                }
                let order = if self.round_robin & 1 == 0 {
                    [request, data]
                } else {
                    [data, request]
                };
                order.into_iter().find(|&c| open(c)).map(pick)
            }
        }
    }

    /// The submit queue whose head may go now. Initiator requests (Pull
    /// Request, Push Data) take turns with the target's Pull Data; on
    /// ordered connections the lower RSN of the two request heads goes
    /// first or nothing does (§9.1.3: "transmit the packet in RSN order
    /// across both the request and data sliding windows").
    #[inline]
    fn pick_first(&self) -> Option<Queue> {
        let gate = self.gate();
        // A queue holds one kind (`submit` queues by kind), so its window and
        // its ncwnd gating are the queue's, not read from the head packet: only
        // the ordered choice between two request heads reads a head.
        let ready = |queue: Queue| {
            let kind = queue.kind();
            let window = kind.window();
            let tx = self.tx(window);
            let paused = self.own_paused[usize::from(window == Window::Data)];
            tx.has_room() && !paused && gate.allows_first(tx, kind.is_request())
        };
        let requests = !self.queues.pull_requests.is_empty();
        let pushes = !self.queues.push_data.is_empty();
        if !requests && self.queues.pull_data.is_empty() {
            // Push Data alone (the usual initiator): no turn to take between
            // the queues, so no round-robin choice of the result.
            return Some(Queue::PushData).filter(|&q| pushes && ready(q));
        }
        let initiator = match (requests, pushes) {
            (false, false) => None,
            (true, false) => Some(Queue::PullRequests).filter(|&q| ready(q)),
            (false, true) => Some(Queue::PushData).filter(|&q| ready(q)),
            (true, true) if self.params.ordering == OrderingMode::Ordered => {
                let (Some(r), Some(p)) = (
                    self.queues.pull_requests.front(),
                    self.queues.push_data.front(),
                ) else {
                    unreachable!("both queues are non-empty");
                };
                let first = if p.rsn.before(r.rsn) {
                    Queue::PushData
                } else {
                    Queue::PullRequests
                };
                Some(first).filter(|&q| ready(q))
            }
            (true, true) => {
                let order = if self.round_robin & 1 == 0 {
                    [Queue::PullRequests, Queue::PushData]
                } else {
                    [Queue::PushData, Queue::PullRequests]
                };
                order.into_iter().find(|&q| ready(q))
            }
        };
        let target =
            Some(Queue::PullData).filter(|&q| !self.queues.pull_data.is_empty() && ready(q));
        if self.round_robin & 2 == 0 {
            initiator.or(target)
        } else {
            target.or(initiator)
        }
    }

    /// OCP Falcon 0.9 §11 initiator table, "Match local xLR drop filter":
    /// request `psn`, just given its PSN, goes out as a Resync 0x2 ("local
    /// xLR flow") instead, so the target skips its RSN and both windows move
    /// on; the transaction completes with kCmplLocalXlr when the Resync is
    /// acknowledged. Out of the hot path: the filter is off unless set.
    #[cold]
    #[inline(never)]
    fn send_local_xlr_resync(
        &mut self,
        now: Timestamp,
        window: Window,
        psn: Psn,
    ) -> Option<TxPacket> {
        self.stats.packets_sent += 1;
        self.stats.xlr_local += 1;
        self.start_resync(window, psn, ResyncCode::LocalXlrFlow);
        self.send_retransmission(now, window, psn)
    }

    /// The first transmission of a Pull Data, the one kind free of our RSN
    /// order, while a retransmission holds the requests.
    fn send_first_pull_data(&mut self, now: Timestamp) -> Option<TxPacket> {
        let tx = &self.tx_data;
        let ready = !self.queues.pull_data.is_empty()
            && tx.has_room()
            && !self.own_paused[1]
            && self.gate().allows_first(tx, false);
        if !ready {
            self.pacer.cancel();
            return None;
        }
        if !self.pace(now) {
            return None;
        }
        self.send_first_of(now, Queue::PullData)
    }

    /// §9.1.3: PSN = NPSN, NPSN + 1, buffer until acknowledged, start the
    /// retransmit timer.
    #[inline]
    fn send_first(&mut self, now: Timestamp, queue: Queue) -> Option<TxPacket> {
        // One copy per queue, each with its kind a constant: the queue's
        // `VecDeque`, the window, the ORC count and the header's packet type
        // are then fixed, not looked up from the popped packet.
        match queue {
            Queue::PullRequests => self.send_first_of(now, Queue::PullRequests),
            Queue::PushData => self.send_first_of(now, Queue::PushData),
            Queue::PullData => self.send_first_of(now, Queue::PullData),
        }
    }

    /// [`send_first`](Self::send_first) from `queue`, a constant where it
    /// is inlined.
    #[inline(always)]
    fn send_first_of(&mut self, now: Timestamp, queue: Queue) -> Option<TxPacket> {
        let packet = match queue {
            Queue::PullRequests => self.queues.pull_requests.pop_front(),
            Queue::PushData => self.queues.push_data.pop_front(),
            Queue::PullData => self.queues.pull_data.pop_front(),
        }?;
        debug_assert_eq!(packet.kind, queue.kind(), "submit queues by kind");
        let kind = queue.kind();
        let window = kind.window();
        let psn = self.tx_mut(window).push_first(now, kind, &packet);
        if kind.is_request() && self.xlr.initiator {
            return self.send_local_xlr_resync(now, window, psn);
        }
        self.stats.packets_sent += 1;
        self.arm_retransmit_timer(self.rto_deadline(now));
        let fields = SlotFields {
            kind: SentKind::Transaction(kind),
            rsn: packet.rsn,
            request_length: packet.request_length,
            payload_len: packet.payload_len,
            handle: packet.handle,
            ack_request: packet.ack_request,
        };
        Some(self.build(now, psn, fields, None))
    }

    /// §9.1.5: the same PSN again; restart its timer.
    fn send_retransmission(
        &mut self,
        now: Timestamp,
        window: Window,
        psn: Psn,
    ) -> Option<TxPacket> {
        let mut slot = *self.tx(window).slot(psn)?;
        if self.xlr.initiator
            && matches!(slot.kind, SentKind::Transaction(kind) if kind.is_request())
        {
            self.stats.xlr_local += 1;
            self.start_resync(window, psn, ResyncCode::LocalXlrFlow);
            slot = *self.tx(window).slot(psn)?;
        }
        // A Resync's first transmission is reported as such, not as a
        // retransmission (`retransmitted` is cleared when the slot turns into
        // a Resync).
        let retransmission = match slot.kind {
            SentKind::Resync { .. } if !slot.retransmitted => {
                self.stats.resyncs_sent += 1;
                None
            }
            _ => Some(slot.reason),
        };
        self.tx_mut(window).on_retransmitted(now, psn);
        let reason = match retransmission {
            Some(Retransmission::Timeout) => {
                self.stats.retransmits_timeout += 1;
                Some(RetransmitReason::Timeout)
            }
            Some(Retransmission::Early) => {
                self.stats.retransmits_early += 1;
                self.config
                    .rue_early_retransmit_events
                    .then_some(RetransmitReason::Early)
            }
            None => None,
        };
        if let Some(reason) = reason {
            // §10.6.2.1: a retransmit event with the packet's retransmit count.
            if !self.rue.on_retransmit(now, slot.retransmit_count, reason) {
                self.stats.rue_events_suppressed += 1;
            }
        }
        self.arm_retransmit_timer(self.rto_deadline(now));
        Some(self.build(now, psn, SlotFields::of(&slot), retransmission))
    }

    /// When a packet sent at `now` is due for retransmission (§9.1.5: the RUE's
    /// RTO). In nanoseconds, not through `Duration`, which costs more per
    /// packet.
    #[inline]
    fn rto_deadline(&self, now: Timestamp) -> Timestamp {
        now.saturating_add_nanos(self.rue.state.rto_nanos())
    }

    /// The header of `psn`, whose slot holds `fields`, with the AR bit and the
    /// piggy-backed ACK. Always inline: left to LLVM it goes out of line
    /// whenever unrelated code grows, and the `TxPacket` it returns is then
    /// built in memory and copied.
    #[inline(always)]
    fn build(
        &mut self,
        now: Timestamp,
        psn: Psn,
        fields: SlotFields,
        retransmission: Option<Retransmission>,
    ) -> TxPacket {
        let SlotFields {
            kind,
            rsn,
            request_length,
            payload_len,
            handle,
            ack_request: asked,
        } = fields;
        let fcwnd = self.rue.state.fcwnd;
        // The policy runs for every packet, asked or not, so that its
        // draws do not depend on the ULP's requests.
        let ack_request = self.ar_policy.next(
            fcwnd,
            self.ar_threshold,
            self.config.ack_request_percent,
            &mut self.rng,
        ) | asked;
        // §9.1.6: stop the coalescing timer when the piggy-backed bases say
        // everything (all three bitmaps zero, R-OWN and D-OWN clear). An
        // AR-triggered ACK stays due. The receive bitmaps are only looked at
        // when there is a timer to stop (never on a connection that only sends
        // data).
        if self.coalescing.is_counting() && self.rx_request.is_quiet() && self.rx_data.is_quiet() {
            self.coalescing.stop_timer();
        }
        self.rack_on_transmit(now);
        // §9.1.6: "advance the RBPSN and DBPSN to the latest value and
        // piggyback them onto the outgoing packet".
        let header = BaseHeader {
            connection_id: self.params.peer_connection_id,
            destination_function: self.params.destination_function,
            protocol: self.params.protocol,
            ack_request,
            data_bpsn: self.rx_data.base(),
            request_bpsn: self.rx_request.base(),
            psn,
            rsn,
        };
        let payload_len = usize::from(payload_len);
        // The packet is built last, in the returned value: built into locals
        // before the timer and RACK updates above, it would be assembled on the
        // stack and copied again.
        match kind {
            SentKind::Transaction(PacketKind::PullRequest) => TxPacket {
                repr: FalconRepr::PullRequest(PullRequestRepr {
                    header,
                    request_length,
                    payload_len,
                }),
                psn,
                handle: Some(handle),
                retransmission,
            },
            SentKind::Transaction(PacketKind::PullData) => TxPacket {
                repr: FalconRepr::PullData(PullDataRepr {
                    header,
                    payload_len,
                }),
                psn,
                handle: Some(handle),
                retransmission,
            },
            SentKind::Transaction(PacketKind::PushData) => TxPacket {
                repr: FalconRepr::PushData(PushDataRepr {
                    header,
                    request_length,
                }),
                psn,
                handle: Some(handle),
                retransmission,
            },
            // §9.1.8: the original PSN and RSN, the original packet type and
            // the reason code.
            SentKind::Resync { code, original } => TxPacket {
                repr: FalconRepr::Resync(ResyncRepr {
                    header,
                    code,
                    original_packet_type: original.packet_type(),
                    vendor_defined: 0,
                }),
                psn,
                handle: None,
                retransmission,
            },
        }
    }
}

/// What [`DeliveryConnection::build`] needs of a retransmit-buffer slot. Handed
/// over by the caller, which has the values at hand (the packet it just pushed,
/// the slot it copied), rather than looked up again, which would re-check the
/// PSN against the window and the TX ack bitmap.
#[derive(Debug, Clone, Copy)]
struct SlotFields {
    kind: SentKind,
    rsn: Rsn,
    request_length: u16,
    payload_len: u16,
    handle: PayloadHandle,
    /// The ULP's AR request.
    ack_request: bool,
}

impl SlotFields {
    /// The fields of `slot`.
    fn of(slot: &SentPacket) -> Self {
        SlotFields {
            kind: slot.kind,
            rsn: slot.rsn,
            request_length: slot.request_length,
            payload_len: slot.payload_len,
            handle: slot.handle,
            ack_request: slot.ack_request,
        }
    }
}
