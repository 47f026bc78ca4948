//! One connection's packet delivery sublayer: the sans-IO state machine.
//!
//! Layer: delivery. Owns [`DeliveryConnection`], which ties the transmitter
//! windows, the receiver windows, ACK generation, retransmission, resync
//! and the RUE interface together for one connection, and its receive path
//! for data packets (OCP Falcon 0.9 §9.2.2), its commands and ACK output.
//! ACK/NACK processing is in `ack_rx`, Resync in `resync`, the transmit
//! path in `transmit`, timers in `retransmit`, early retransmission in
//! `early_retx` and [`rack`](super::rack).
//!
//! It never reads a clock or an RNG (time comes in as `now`; the AR policy
//! draws from a generator seeded by [`ConnectionParams::seed`]), never does
//! IO, never panics on packet input, and allocates only when a queue or the
//! retransmit ring grows past its previous high-water mark.

use std::collections::VecDeque;

use core::time::Duration;

use rue::{CcEvent, CcResult, Fcwnd};

use crate::delivery::ack::{build_ack, AckCoalescing, AckCongestion, CREDITS_PACKET, CREDITS_PUSH};
use crate::delivery::config::{DeliveryConfig, OwnPause};
use crate::delivery::events::{
    ConnectionError, DeliveryStats, Event, Refusal, RxOutcome, SubmitError, UlpError, UlpNack,
};
use crate::delivery::gating::{AckRequestPolicy, Gate};
use crate::delivery::packet::{Arrival, OutgoingPacket, PacketKind, RxMeta};
use crate::delivery::rack::RackState;
use crate::delivery::rue_iface::{CcState, RueEvents};
use crate::delivery::rx_window::{NackRecord, RxWindow, WindowCheck};
use crate::delivery::tx_window::{TxWindow, WindowPool};
use crate::drop::DropReason;
use crate::ids::{ConnectionId, DestinationFunction};
use crate::pacing::Timestamper;
use crate::random::SplitMix64;
use crate::seq::Psn;
use crate::time::Timestamp;
use crate::wire::{
    BaseHeader, FalconRepr, HopCount, NackCcInfo, NackCode, NackRepr, NackRueInfo, ProtocolType,
    PushDataRepr, RnrTimeout, RxBufferLevel, Window,
};

/// Whether requests keep their RSN order (OCP Falcon 0.9 §8.4.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OrderingMode {
    /// Ordered: (re)transmissions of Pull Requests and Push Data go in RSN
    /// order across both windows (§9.1.3, §9.1.5).
    Ordered,
    /// Unordered: no order across windows.
    Unordered,
}

/// The xLR drop filter of one connection (OCP Falcon 0.9 §11; spec/falcon.md
/// §10: the spec names the filter, its NACK code 4, Resync codes 0x2 and
/// 0x5 and the completions kCmplLocalXlr and kCmplRemoteErr, but leaves what
/// sets it to the implementation). Here the connection manager or an
/// operator sets it per connection and direction, for example to drain a
/// flow being torn down or migrated: requests stop, each is finished with
/// a named error, and both sliding windows keep moving. Off by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct XlrFilter {
    /// Our own requests on this connection match ("local xLR drop filter",
    /// initiator table): each Pull Request or Push Data due to go out
    /// (first transmission or retransmission) leaves as a Resync 0x2
    /// ("local xLR flow") with its PSN and RSN, and the transaction
    /// completes with kCmplLocalXlr once the Resync is acknowledged.
    pub initiator: bool,
    /// Requests received on this connection match (target table: "drop, no
    /// resource reservation"; delivery receiver table: "drop packet and
    /// send xLR drop NACK"): each is dropped with NACK code 4, the
    /// initiator resyncs it (0x5, "remote xLR flow") and completes it with
    /// kCmplRemoteErr.
    pub target: bool,
}

/// What the connection manager sets up for one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionParams {
    /// Our connection id (the RUE event's `connection_id`).
    pub connection_id: ConnectionId,
    /// The peer's connection id: the destination CID of what we send.
    pub peer_connection_id: ConnectionId,
    /// Destination function of what we send.
    pub destination_function: DestinationFunction,
    /// Upper-layer protocol of what we send.
    pub protocol: ProtocolType,
    /// Ordered or unordered.
    pub ordering: OrderingMode,
    /// First PSN of our request window (RBPSN = RNPSN at setup, §9.1.1).
    pub tx_request_psn: Psn,
    /// First PSN of our data window.
    pub tx_data_psn: Psn,
    /// The peer's first request-window PSN (our receiver's RBPSN, §9.2.1).
    pub rx_request_psn: Psn,
    /// The peer's first data-window PSN.
    pub rx_data_psn: Psn,
    /// Seed of the connection's random generator (AR policy).
    pub seed: u64,
}

/// A NACK waiting to be sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct PendingNack {
    pub window: Window,
    pub psn: Psn,
    pub nack: NackRecord,
}

/// RTT measurements from ACK timestamps (OCP Falcon 0.9 §10.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RttEstimate {
    /// The latest RTT sample, t4 − t1.
    pub latest: Option<Duration>,
    /// The latest fabric delay, (t4 − t1) − (t3 − t2).
    pub fabric_delay: Option<Duration>,
    /// EWMA of the samples (gain 1/8), for the recency checks and RACK-TLP.
    pub smoothed: Option<Duration>,
}

/// What a connection reads of its [`DeliveryConfig`] after construction:
/// 64 bytes where the whole configuration took 184 in every connection
/// (the window sizes, the initial CC values and the RUE admission go to
/// the parts built from them; RACK-TLP's to its boxed state).
#[derive(Debug, Clone, Copy)]
pub(super) struct Settings {
    pub ack_coalescing_timeout: Duration,
    pub ulp_rto: Duration,
    pub submit_queue: u32,
    pub ooo_distance_threshold: u32,
    pub own_pause: Option<OwnPause>,
    pub ack_coalescing_count: u16,
    pub nack_queue: u16,
    pub initial_ttl: u8,
    pub max_retransmit_attempts: u8,
    pub max_early_retransmits: u8,
    pub ack_request_percent: u8,
    pub rue_early_retransmit_events: bool,
}

impl From<&DeliveryConfig> for Settings {
    fn from(c: &DeliveryConfig) -> Self {
        Settings {
            ack_coalescing_timeout: c.ack_coalescing_timeout,
            ulp_rto: c.ulp_rto,
            submit_queue: c.submit_queue,
            ooo_distance_threshold: c.ooo_distance_threshold,
            own_pause: c.own_pause,
            ack_coalescing_count: c.ack_coalescing_count,
            nack_queue: c.nack_queue,
            initial_ttl: c.initial_ttl,
            max_retransmit_attempts: c.max_retransmit_attempts,
            max_early_retransmits: c.max_early_retransmits,
            ack_request_percent: c.ack_request_percent,
            rue_early_retransmit_events: c.rue_early_retransmit_events,
        }
    }
}

/// The first-transmission queues: the figure of OCP Falcon 0.9 §8.3 shows
/// three per connection (spec/falcon.md §9 item 11).
#[derive(Debug, Clone, Default)]
pub(super) struct SubmitQueues {
    pub pull_requests: VecDeque<OutgoingPacket>,
    pub push_data: VecDeque<OutgoingPacket>,
    pub pull_data: VecDeque<OutgoingPacket>,
}

/// The packet delivery sublayer of one connection (OCP Falcon 0.9 §9).
///
/// Methods come in the four kinds of quinn-proto's `Connection`:
///
/// * **getters** (`&self`): [`stats`](Self::stats), [`rtt`](Self::rtt),
///   [`cc_state`](Self::cc_state), window bases, [`error`](Self::error);
/// * **inputs** `handle_*(now, …)`: [`handle_packet`](Self::handle_packet),
///   [`handle_timeout`](Self::handle_timeout),
///   [`handle_rue_result`](Self::handle_rue_result), and the transaction
///   sublayer's answers [`admit`](Self::admit), [`refuse`](Self::refuse),
///   [`handle_ulp_ack`](Self::handle_ulp_ack),
///   [`handle_ulp_nack`](Self::handle_ulp_nack);
/// * **commands**: [`submit`](Self::submit);
/// * **outputs** `poll_*`, to drain after every input in this order:
///   [`poll_transmit`](Self::poll_transmit) (until `None`),
///   [`poll_ack`](Self::poll_ack) (until `None`),
///   [`poll_rue_event`](Self::poll_rue_event),
///   [`poll_event`](Self::poll_event) (until `None`), then
///   [`poll_timeout`](Self::poll_timeout) to arm the caller's timer.
///
/// Inputs must carry non-decreasing `now`.
#[derive(Debug, Clone)]
pub struct DeliveryConnection {
    pub(super) config: Settings,
    pub(super) params: ConnectionParams,
    /// ACK Request Fcwnd Threshold in fixed point.
    pub(super) ar_threshold: Fcwnd,
    pub(super) failed: Option<ConnectionError>,
    // Transmitter (§9.1).
    pub(super) tx_request: TxWindow,
    pub(super) tx_data: TxWindow,
    pub(super) queues: SubmitQueues,
    /// Release times: the RUE's gap when fcwnd < 1, the rate cap.
    pub(super) pacer: Timestamper,
    pub(super) ar_policy: AckRequestPolicy,
    pub(super) rng: SplitMix64,
    /// Lower bound of the earliest retransmit deadline (see `retransmit`).
    pub(super) retransmit_timer: Option<Timestamp>,
    /// Boxed: off by default (an opt-in extension), and 120 bytes inline
    /// in every connection otherwise.
    pub(super) rack: Option<Box<RackState>>,
    /// First transmissions paused by OWN (isekai extension), per window.
    pub(super) own_paused: [bool; 2],
    /// The xLR drop filter (off unless the CM sets it).
    pub(super) xlr: XlrFilter,
    pub(super) round_robin: u8,
    // Receiver (§9.2).
    pub(super) rx_request: RxWindow,
    pub(super) rx_data: RxWindow,
    pub(super) coalescing: AckCoalescing,
    pub(super) nacks: VecDeque<PendingNack>,
    // RUE (§10.6).
    pub(super) rue: RueEvents,
    pub(super) rtt: RttEstimate,
    pub(super) events: VecDeque<Event>,
    pub(super) stats: DeliveryStats,
}

impl DeliveryConnection {
    /// A connection with the CM's initial congestion state from `config`.
    /// The config must be valid ([`DeliveryConfig::validate`]).
    #[cfg(any(test, feature = "testing"))]
    pub fn new(config: &DeliveryConfig, params: ConnectionParams) -> Self {
        Self::with_cc_state(config, params, CcState::from_config(config))
    }

    /// A connection with an explicit initial congestion state (the RUE's
    /// per-connection context as the CM set it up).
    pub fn with_cc_state(config: &DeliveryConfig, params: ConnectionParams, cc: CcState) -> Self {
        debug_assert_eq!(config.validate(), Ok(()), "invalid delivery config");
        DeliveryConnection {
            config: Settings::from(config),
            params,
            ar_threshold: Fcwnd::from_f64(config.ack_request_fcwnd_threshold),
            failed: None,
            tx_request: TxWindow::new(params.tx_request_psn, config.tx_window),
            tx_data: TxWindow::new(params.tx_data_psn, config.tx_window),
            queues: SubmitQueues::default(),
            pacer: Timestamper::default(),
            ar_policy: AckRequestPolicy::default(),
            rng: SplitMix64::new(params.seed),
            retransmit_timer: None,
            rack: config.rack_tlp.map(|c| Box::new(RackState::new(c))),
            own_paused: [false; 2],
            xlr: XlrFilter::default(),
            round_robin: 0,
            rx_request: RxWindow::new(Window::Request, params.rx_request_psn),
            rx_data: RxWindow::new(Window::Data, params.rx_data_psn),
            coalescing: AckCoalescing::default(),
            nacks: VecDeque::new(),
            rue: RueEvents::new(params.connection_id.value(), cc, config.rue_admission),
            rtt: RttEstimate::default(),
            events: VecDeque::new(),
            stats: DeliveryStats::default(),
        }
    }

    // --- Commands -------------------------------------------------------

    /// Queues a packet for its first transmission; its PSN is assigned when
    /// [`poll_transmit`](Self::poll_transmit) sends it. On ordered
    /// connections submit Pull Requests and Push Data in RSN order.
    ///
    /// # Errors
    ///
    /// [`SubmitError`]: the queue is full, a Push Data's lengths disagree,
    /// or the connection failed.
    #[inline]
    pub fn submit(&mut self, packet: OutgoingPacket) -> Result<(), SubmitError> {
        if self.failed.is_some() {
            return Err(SubmitError::ConnectionNotAlive);
        }
        // OCP Falcon 0.9 §7.5: a Push Data's request length "must match" its
        // payload size.
        if packet.kind == PacketKind::PushData && packet.request_length != packet.payload_len {
            return Err(SubmitError::LengthMismatch);
        }
        let capacity = self.config.submit_queue as usize;
        let queue = match packet.kind {
            PacketKind::PullRequest => &mut self.queues.pull_requests,
            PacketKind::PushData => &mut self.queues.push_data,
            PacketKind::PullData => &mut self.queues.pull_data,
        };
        if queue.len() >= capacity {
            return Err(SubmitError::QueueFull);
        }
        queue.push_back(packet);
        Ok(())
    }

    // --- Inputs ---------------------------------------------------------

    /// A packet for this connection arrived (after the PSP stage's integrity,
    /// replay and SPI checks, OCP Falcon 0.9 §9.2.2.1–9.2.2.3).
    ///
    /// ACKs and NACKs are processed here (§9.2.3–9.2.4); a Resync fills its
    /// PSN (§9.2.5); a transaction packet passes the sliding-window check
    /// (§9.2.2.4) and, if new, comes back as [`RxOutcome::Deliver`]. Every
    /// drop names its [`DropReason`] for the caller's counters.
    #[inline]
    pub fn handle_packet(&mut self, now: Timestamp, repr: &FalconRepr, meta: RxMeta) -> RxOutcome {
        // OCP Falcon 0.9 §11: "Connection not alive: drop", piggy-backed ACK
        // not processed.
        if self.failed.is_some() {
            return RxOutcome::Dropped(DropReason::ConnectionNotAlive);
        }
        // One call of `handle_transaction` for the three transaction types, so
        // that it is inlined here: three calls keep it out of line, a call and
        // its register saves per packet.
        let (kind, header, request_length) = match repr {
            FalconRepr::Back(back) => return self.handle_ack(now, back, None, meta),
            FalconRepr::Eack(eack) => return self.handle_ack(now, &eack.back, Some(eack), meta),
            FalconRepr::Nack(nack) => return self.handle_nack(now, nack, meta),
            FalconRepr::Resync(r) => return self.handle_resync(now, r, meta),
            FalconRepr::PullRequest(r) => (PacketKind::PullRequest, &r.header, r.request_length),
            FalconRepr::PullData(r) => (PacketKind::PullData, &r.header, 0),
            FalconRepr::PushData(r) => (PacketKind::PushData, &r.header, r.request_length),
        };
        self.handle_transaction(now, kind, header, request_length, meta)
    }

    /// [`handle_packet`](Self::handle_packet) of a Push Data, for a caller
    /// that parsed it as itself rather than as a [`FalconRepr`].
    #[inline]
    pub fn handle_push_data(
        &mut self,
        now: Timestamp,
        repr: &PushDataRepr,
        meta: RxMeta,
    ) -> RxOutcome {
        if self.failed.is_some() {
            return RxOutcome::Dropped(DropReason::ConnectionNotAlive);
        }
        self.handle_transaction(
            now,
            PacketKind::PushData,
            &repr.header,
            repr.request_length,
            meta,
        )
    }

    /// The transaction sublayer took a delivered packet: the receiver marks
    /// it received — and acknowledged, except Push Data, which waits for
    /// [`handle_ulp_ack`](Self::handle_ulp_ack) (§9.2.2.4) — and counts it
    /// toward ACK coalescing; an AR packet acknowledged now triggers an
    /// immediate ACK (§9.1.6).
    ///
    /// # Errors
    ///
    /// The drop reason if the PSN is no longer new (another packet for the
    /// same PSN was admitted in between) or the connection failed.
    #[inline(always)]
    pub fn admit(&mut self, now: Timestamp, arrival: Arrival) -> Result<(), DropReason> {
        if self.failed.is_some() {
            return Err(DropReason::ConnectionNotAlive);
        }
        let window = arrival.kind.window();
        let bit = match self.rx_mut(window).check_bit(arrival.psn) {
            Ok(bit) => bit,
            // (`check_bit` never refuses with `Accept`.)
            Err(WindowCheck::Duplicate(_) | WindowCheck::Accept) => {
                return Err(DropReason::DuplicatePacket)
            }
            Err(WindowCheck::OutOfWindow) => return Err(DropReason::OutOfWindow),
            Err(WindowCheck::Stale) => return Err(DropReason::StalePacket),
        };
        self.stats.packets_delivered += 1;
        let timeout = self.config.ack_coalescing_timeout;
        if arrival.kind == PacketKind::PushData {
            // §9.2.2.4: the data-ack bit "must not be set to 1b until the
            // packet is explicitly acknowledged by the ULP".
            self.rx_data.receive_bit(bit, arrival.ack_request);
            self.coalescing.add(now, CREDITS_PUSH, timeout);
            return Ok(());
        }
        self.rx_mut(window).acknowledge_bit(bit);
        self.coalescing.add(now, CREDITS_PACKET, timeout);
        if arrival.ack_request {
            self.coalescing.request_immediate();
        }
        Ok(())
    }

    /// The transaction sublayer refuses a delivered packet: it is dropped
    /// and NACKed (code 1 or 4); its PSN stays open for the retransmission
    /// or the Resync (OCP Falcon 0.9 §11 receiver table). Returns the drop
    /// reason to count.
    pub fn refuse(&mut self, now: Timestamp, arrival: Arrival, refusal: Refusal) -> DropReason {
        let (code, reason) = match refusal {
            Refusal::InsufficientResources => (
                NackCode::InsufficientResources,
                DropReason::InsufficientResources,
            ),
            Refusal::Xlr => (NackCode::XlrDrop, DropReason::XlrDrop),
        };
        if self.failed.is_some() {
            return DropReason::ConnectionNotAlive;
        }
        let window = arrival.kind.window();
        self.queue_nack(
            window,
            arrival.psn,
            NackRecord {
                code,
                ulp_nack_code: 0,
                rnr_timeout: RnrTimeout::LONGEST,
            },
        );
        // A discarded packet still counts toward coalescing (§9.2.2.4 note).
        self.coalescing
            .add(now, CREDITS_PACKET, self.config.ack_coalescing_timeout);
        reason
    }

    /// Sets the connection's xLR drop filter ([`XlrFilter`]). Packets
    /// already in flight are not recalled; the filter applies to what is
    /// sent or received from now on.
    pub fn set_xlr_filter(&mut self, filter: XlrFilter) {
        self.xlr = filter;
    }

    /// The connection's xLR drop filter.
    pub fn xlr_filter(&self) -> XlrFilter {
        self.xlr
    }

    /// The target ULP acknowledged a delivered Push Data: set its data-ack
    /// bit, advance DBPSN, count it toward coalescing, and send an immediate
    /// ACK if it carried AR (§9.1.6: "when ULP acknowledges for PushData").
    ///
    /// # Errors
    ///
    /// [`UlpError::NotAwaiting`] if `psn` is not a received Push Data
    /// waiting for the ULP.
    #[inline]
    pub fn handle_ulp_ack(&mut self, now: Timestamp, psn: Psn) -> Result<(), UlpError> {
        if self.failed.is_some() {
            return Err(UlpError::ConnectionNotAlive);
        }
        let Some(ack_request) = self.rx_data.acknowledge_ulp(psn) else {
            return Err(UlpError::NotAwaiting);
        };
        self.coalescing
            .add(now, CREDITS_PUSH, self.config.ack_coalescing_timeout);
        if ack_request {
            self.coalescing.request_immediate();
        }
        Ok(())
    }

    /// The target ULP NACKed a delivered Push Data: send the NACK (§9.1.7).
    /// RNR forgets the reception so the retransmission is delivered again;
    /// CIE, NRE and invalid CID keep it received and repeat the NACK if the
    /// Push Data is retransmitted (isekai `HandleDuplicateNackedPacket`);
    /// the initiator's Resync then acknowledges the PSN (§9.2.5).
    ///
    /// # Errors
    ///
    /// [`UlpError::NotAwaiting`] if `psn` is not a received Push Data
    /// waiting for the ULP.
    pub fn handle_ulp_nack(
        &mut self,
        _now: Timestamp,
        psn: Psn,
        nack: UlpNack,
    ) -> Result<(), UlpError> {
        if self.failed.is_some() {
            return Err(UlpError::ConnectionNotAlive);
        }
        if !self.rx_data.awaits_ulp(psn) {
            return Err(UlpError::NotAwaiting);
        }
        let record = |code, ulp_nack_code, rnr_timeout| NackRecord {
            code,
            ulp_nack_code,
            rnr_timeout,
        };
        let longest = RnrTimeout::LONGEST;
        let nack = match nack {
            UlpNack::ReceiverNotReady {
                timeout,
                ulp_nack_code,
            } => {
                self.rx_data.unreceive(psn);
                record(NackCode::ReceiverNotReady, ulp_nack_code, timeout)
            }
            UlpNack::CompletionInError { ulp_nack_code } => {
                record(NackCode::UlpCompletionInError, ulp_nack_code, longest)
            }
            UlpNack::NonRecoverableError { ulp_nack_code } => {
                record(NackCode::UlpNonRecoverableError, ulp_nack_code, longest)
            }
            UlpNack::InvalidCid { ulp_nack_code } => {
                record(NackCode::InvalidCid, ulp_nack_code, longest)
            }
        };
        if nack.code != NackCode::ReceiverNotReady {
            self.rx_data.record_nack(psn, nack);
        }
        self.queue_nack(Window::Data, psn, nack);
        Ok(())
    }

    /// Applies a RUE result (OCP Falcon 0.9 §10.6.2.2): fcwnd, ncwnd, the
    /// inter-packet gap and the RTO take effect at once (a shorter RTO also
    /// for packets in flight, spec/falcon.md §7.1 field 17); the other fields
    /// are kept for the next event. Returns false (and changes nothing) if
    /// the result names another connection, or another instance of its id.
    pub fn handle_rue_result(&mut self, now: Timestamp, result: &CcResult) -> bool {
        if !self.rue.matches(result) || self.failed.is_some() {
            return false;
        }
        let previous = self.rue.apply(result);
        self.stats.rue_results += 1;
        if result.randomize_path {
            self.events.push_back(Event::RandomizePath);
        }
        if self.rue.state.rto() < previous.rto() {
            // Deadlines moved earlier: rescan at once.
            self.retransmit_timer = Some(now);
        }
        true
    }

    // --- Outputs --------------------------------------------------------

    /// The next ACK or NACK to send, if one is due: queued NACKs first, then
    /// a BACK or EACK when the coalescing count or timer is reached or an AR
    /// packet was acknowledged (§9.1.6–9.1.7). `rx_buffer_level` is the
    /// node's quantized buffer occupancy ([`BufferLevel`](super::BufferLevel)).
    pub fn poll_ack(
        &mut self,
        now: Timestamp,
        rx_buffer_level: RxBufferLevel,
    ) -> Option<FalconRepr> {
        if self.failed.is_some() {
            return None;
        }
        if let Some(pending) = self.nacks.pop_front() {
            self.stats.nacks_sent += 1;
            return Some(FalconRepr::Nack(self.build_nack(pending, rx_buffer_level)));
        }
        if !self
            .coalescing
            .is_due(now, self.config.ack_coalescing_count)
        {
            return None;
        }
        let repr = build_ack(
            self.params.peer_connection_id,
            &self.rx_request,
            &self.rx_data,
            &self.coalescing,
            AckCongestion {
                rx_buffer_level,
                // The event's cc_metadata is V[23:0] of the CC info (RUE info
                // above the 2 OWN bits, spec/falcon.md §3.1): the ACK carries
                // its top 22 bits.
                rue_info: self.rue.state.cc_metadata >> 2,
            },
            self.rack.is_some(),
        );
        if let FalconRepr::Eack(_) = repr {
            // §9.2.1: OWN "is reset to 0 when an outgoing EACK carries the
            // notification".
            self.rx_request.clear_own();
            self.rx_data.clear_own();
            self.stats.eacks_sent += 1;
        } else {
            self.stats.backs_sent += 1;
        }
        self.coalescing.reset();
        Some(repr)
    }

    /// Whether [`poll_ack`](Self::poll_ack) would return an ACK or NACK now
    /// (so the caller computes the buffer level only when one is due).
    pub fn ack_due(&self, now: Timestamp) -> bool {
        self.failed.is_none()
            && (!self.nacks.is_empty()
                || self
                    .coalescing
                    .is_due(now, self.config.ack_coalescing_count))
    }

    /// The next event for the layer above.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Whether [`poll_event`](Self::poll_event) has an event.
    #[inline]
    pub fn has_events(&self) -> bool {
        !self.events.is_empty()
    }

    /// Whether [`poll_rue_event`](Self::poll_rue_event) may return an event:
    /// one is pending and none is outstanding (its admission is not checked).
    #[inline]
    pub fn may_poll_rue_event(&self) -> bool {
        self.failed.is_none() && self.rue.is_pending() && !self.rue.is_outstanding()
    }

    /// The next RUE event, if one is pending and admitted given the RUE
    /// event queue's occupancy and capacity (spec/falcon.md §7.7).
    pub fn poll_rue_event(
        &mut self,
        now: Timestamp,
        queue_occupancy: usize,
        queue_capacity: usize,
    ) -> Option<CcEvent> {
        if self.failed.is_some() {
            return None;
        }
        let event = self.rue.poll(now, queue_occupancy, queue_capacity)?;
        self.stats.rue_events += 1;
        Some(event)
    }

    /// When [`handle_timeout`](Self::handle_timeout) should next run:
    /// retransmit timers, the ACK coalescing timer and RACK-TLP timers (the
    /// pacing release is [`poll_departure`](Self::poll_departure)'s). May be early (the retransmit timer is a lower bound,
    /// recomputed when it fires), never late. Immediate ACKs and NACKs are
    /// not timers: [`poll_ack`](Self::poll_ack) returns them right after the
    /// input that caused them.
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        if self.failed.is_some() {
            return None;
        }
        let mut earliest = self.retransmit_timer;
        let mut consider = |t: Option<Timestamp>| {
            if let Some(t) = t {
                earliest = Some(earliest.map_or(t, |e| e.min(t)));
            }
        };
        consider(self.coalescing.timer());
        consider(self.rack.as_deref().and_then(RackState::timeout));
        earliest
    }

    /// When the packet that pacing holds may leave, if one is held: the
    /// last [`poll_transmit`](Self::poll_transmit) found a packet the gates
    /// allow but its release time (the RUE's gap when fcwnd < 1, the rate
    /// cap) not yet come. Call `poll_transmit` again then; the engine keeps
    /// this time in its pacing wheel (`crate::pacing::Carousel`), apart from
    /// the timers of [`poll_timeout`](Self::poll_timeout).
    #[inline]
    pub fn poll_departure(&self) -> Option<Timestamp> {
        self.pacer.release()
    }

    /// Sets the operator's rate cap, bit/s (`None`: none; see
    /// [`Timestamper`]); `jitter` is the pacing wheel's granularity, the
    /// lateness of a release forgiven. The caller reports each frame sent
    /// ([`handle_departure`](Self::handle_departure)) while a cap is set.
    pub fn set_rate_cap(&mut self, rate: Option<u64>, jitter: Duration) {
        self.pacer.set_rate_cap(rate, jitter);
    }

    /// The rate cap, bit/s.
    #[cfg(any(test, feature = "testing"))]
    pub fn rate_cap(&self) -> Option<u64> {
        self.pacer.rate_cap()
    }

    /// A rate cap is set: report each frame sent to
    /// [`handle_departure`](Self::handle_departure).
    #[inline(always)]
    pub fn is_rate_capped(&self) -> bool {
        self.pacer.is_rate_capped()
    }

    /// The frame of the packet [`poll_transmit`](Self::poll_transmit) just
    /// returned left at `now`, `bytes` long (Ethernet header to PSP ICV):
    /// charged to the rate cap.
    #[inline]
    pub fn handle_departure(&mut self, now: Timestamp, bytes: usize) {
        self.pacer.on_departure(now, bytes);
    }

    // --- Getters --------------------------------------------------------

    /// Counters.
    pub fn stats(&self) -> &DeliveryStats {
        &self.stats
    }

    /// RTT measurements.
    pub fn rtt(&self) -> &RttEstimate {
        &self.rtt
    }

    /// The congestion state (a copy of the last RUE result).
    pub fn cc_state(&self) -> &CcState {
        &self.rue.state
    }

    /// The fatal error, once the connection failed.
    #[cfg(any(test, feature = "testing"))]
    pub fn error(&self) -> Option<&ConnectionError> {
        self.failed.as_ref()
    }

    /// The transmitter's BPSN and NPSN of `window`.
    #[cfg(any(test, feature = "testing"))]
    pub fn tx_bounds(&self, window: Window) -> (Psn, Psn) {
        let tx = self.tx(window);
        (tx.base(), tx.next())
    }

    /// The transmitter's ORC and ORRC of `window` (RORC/RORRC or DORC/DORRC).
    #[cfg(any(test, feature = "testing"))]
    pub fn outstanding_requests(&self, window: Window) -> (u32, u32) {
        let tx = self.tx(window);
        (tx.outstanding_requests(), tx.outstanding_retransmitted())
    }

    /// The receiver's BPSN of `window`.
    pub fn rx_base(&self, window: Window) -> Psn {
        self.rx(window).base()
    }

    /// The receiver's (ack, rx) bitmaps of `window` (bit n = BPSN + n).
    #[cfg(any(test, feature = "testing"))]
    pub fn rx_bitmaps(&self, window: Window) -> (u128, u128) {
        let rx = self.rx(window);
        (rx.ack_bitmap(), rx.rx_bitmap())
    }

    /// Nothing queued, nothing unacknowledged, no ACK or NACK pending.
    #[cfg(any(test, feature = "testing"))]
    pub fn is_idle(&self) -> bool {
        self.queues.pull_requests.is_empty()
            && self.queues.push_data.is_empty()
            && self.queues.pull_data.is_empty()
            && self.tx_request.in_flight() == 0
            && self.tx_data.in_flight() == 0
            && self.nacks.is_empty()
            && !self.coalescing.is_pending()
    }

    // --- Receive path ---------------------------------------------------

    // Always inlined: called from `handle_push_data` as well, LLVM keeps it out
    // of line, the arrival returned through memory and the engine's receive
    // path matching on it again.
    #[inline(always)]
    fn handle_transaction(
        &mut self,
        now: Timestamp,
        kind: PacketKind,
        header: &BaseHeader,
        request_length: u16,
        meta: RxMeta,
    ) -> RxOutcome {
        // §11 receiver table: duplicates and drops still have their
        // piggy-backed ACK processed.
        if let Err(reason) = self.handle_piggyback(header) {
            return RxOutcome::Dropped(reason);
        }
        self.record_arrival(now, meta);
        let window = kind.window();
        let psn = header.psn;
        let reason = match self.rx_mut(window).check(psn) {
            WindowCheck::Accept => {
                return RxOutcome::Deliver(Arrival {
                    kind,
                    psn,
                    rsn: header.rsn,
                    request_length,
                    ack_request: header.ack_request,
                })
            }
            WindowCheck::Duplicate(nack) => {
                if let Some(nack) = nack {
                    // Repeat the ULP's NACK for a retransmitted Push Data.
                    self.queue_nack(window, psn, nack);
                }
                DropReason::DuplicatePacket
            }
            WindowCheck::OutOfWindow => DropReason::OutOfWindow,
            WindowCheck::Stale => DropReason::StalePacket,
        };
        self.discarded(now);
        RxOutcome::Dropped(reason)
    }

    /// The RBPSN/DBPSN of an incoming data packet: a cumulative ACK without
    /// timestamps. A stale one is ignored (reordering makes it common; only
    /// the ACK part is discarded, §9.2.3).
    // Always inlined: out of line, a call and its register saves for the two
    // compares of the usual case.
    #[inline(always)]
    pub(super) fn handle_piggyback(&mut self, header: &BaseHeader) -> Result<(), DropReason> {
        // Nothing new, the usual case for a stream of requests: both bases
        // already ours. Checked here, inline, before the out-of-line
        // `acknowledge_bases`.
        if header.request_bpsn == self.tx_request.base() && header.data_bpsn == self.tx_data.base()
        {
            return Ok(());
        }
        if let Some(acked) = self.acknowledge_bases(header.request_bpsn, header.data_bpsn)? {
            self.rue.on_piggybacked_ack(acked);
        }
        Ok(())
    }

    /// The timestamps, hop count and ECN mark of a packet that reached the
    /// window check.
    #[inline]
    pub(super) fn record_arrival(&mut self, now: Timestamp, meta: RxMeta) {
        let hops = HopCount::from_ttl(self.config.initial_ttl, meta.ttl);
        self.coalescing
            .on_packet(now, meta.tx_time, hops, meta.ecn_ce);
    }

    /// A discarded packet "should also trigger ACK coalescing, but its AR
    /// bit is ignored" (§9.2.2.4).
    pub(super) fn discarded(&mut self, now: Timestamp) {
        self.coalescing
            .add(now, CREDITS_PACKET, self.config.ack_coalescing_timeout);
    }

    pub(super) fn queue_nack(&mut self, window: Window, psn: Psn, nack: NackRecord) {
        if self.nacks.len() >= usize::from(self.config.nack_queue) {
            self.stats.nacks_overflowed += 1;
            return;
        }
        self.nacks.push_back(PendingNack { window, psn, nack });
    }

    /// §9.1.7: latest RBPSN/DBPSN, the NACKed PSN and window, the ULP code
    /// and RNR timeout, the latest t1/t2 and CC info.
    fn build_nack(&self, pending: PendingNack, rx_buffer_level: RxBufferLevel) -> NackRepr {
        let (t1, t2) = self.coalescing.timestamps();
        NackRepr {
            connection_id: self.params.peer_connection_id,
            data_bpsn: self.rx_data.base(),
            request_bpsn: self.rx_request.base(),
            t1,
            t2,
            cc_info: NackCcInfo {
                hop_count: self.coalescing.hop_count(),
                rx_buffer_level,
                ecn_count: self.coalescing.ecn_count(),
                rue_info: NackRueInfo::truncating(self.rue.state.cc_metadata),
            },
            nack_psn: pending.psn,
            code: pending.nack.code,
            rnr_timeout: pending.nack.rnr_timeout,
            window: pending.window,
            ulp_nack_code: pending.nack.ulp_nack_code,
        }
    }

    pub(super) fn tx(&self, window: Window) -> &TxWindow {
        match window {
            Window::Request => &self.tx_request,
            Window::Data => &self.tx_data,
        }
    }

    /// Before [`poll_transmit`](Self::poll_transmit): a window with a
    /// first transmission queued for it and no ring takes one from `pool`
    /// (the engine's, see [`WindowPool`]).
    #[inline]
    pub fn borrow_windows(&mut self, pool: &mut WindowPool) {
        if !self.queues.push_data.is_empty() || !self.queues.pull_data.is_empty() {
            self.tx_data.borrow_if_empty(pool);
        }
        if !self.queues.pull_requests.is_empty() {
            self.tx_request.borrow_if_empty(pool);
        }
    }

    /// Ring slots the two TX windows hold (none when idle: lent to the
    /// pool).
    #[cfg(test)]
    pub(crate) fn window_slots_held(&self) -> usize {
        self.tx_data.slot_capacity() + self.tx_request.slot_capacity()
    }

    /// After an input: a window with nothing in flight gives its ring back
    /// to `pool`.
    #[inline]
    pub fn lend_idle_windows(&mut self, pool: &mut WindowPool) {
        self.tx_data.lend_if_idle(pool);
        self.tx_request.lend_if_idle(pool);
    }

    pub(super) fn tx_mut(&mut self, window: Window) -> &mut TxWindow {
        match window {
            Window::Request => &mut self.tx_request,
            Window::Data => &mut self.tx_data,
        }
    }

    pub(super) fn rx(&self, window: Window) -> &RxWindow {
        match window {
            Window::Request => &self.rx_request,
            Window::Data => &self.rx_data,
        }
    }

    pub(super) fn rx_mut(&mut self, window: Window) -> &mut RxWindow {
        match window {
            Window::Request => &mut self.rx_request,
            Window::Data => &mut self.rx_data,
        }
    }

    pub(super) fn gate(&self) -> Gate {
        Gate {
            fcwnd: self.rue.state.fcwnd,
            ncwnd: self.rue.state.ncwnd,
        }
    }
}
