//! The Falcon transaction sublayer (OCP Falcon 0.9 §8).
//!
//! Layer: between the ULPs (above) and the packet delivery sublayer
//! (below), per connection. Owns push and pull transactions at both ends —
//! the initiator's RSN allocation, transaction states and completion
//! ordering ([`initiator`]), the target's RSN reordering, delivery to the
//! ULP, ULP ACK/NACK handling and Pull Data ([`target`]) — their resources
//! ([`crate::resources`]), the error flows of §11 (RNR, CIE, NRE, invalid
//! CID, resync, soft-state timeouts) and the per-connection transmit queues
//! the connection scheduler feeds into the delivery sublayer. Sans-IO: it
//! never reads a clock (`now` comes in the context), never parses a frame
//! (payloads come in as views into the received frame, which the ULP gets
//! without a copy: [`payload`]; they leave as a ULP header and a data
//! source read into the frame: [`source`]), and never panics
//! on packet input: a violation is a counted drop and a connection error
//! event.
//!
//! # How the engine drives it
//!
//! ```text
//! ULP submit ─► Initiator::submit_with (credits, RSN = NRSN++) ─► queue
//! scheduler pick ─► top_up(): queue heads ─► DeliveryConnection::submit (one per kind at a time)
//!                   DeliveryConnection::poll_transmit ─► first_transmit (state *Tx, PSN, timeout)
//! rx Deliver(arrival) ─► Target::on_request (HoL, network credits, admit/refuse, reorder, deliver)
//!                     ─► Initiator::on_pull_data (match RSN, admit, complete)
//! delivery events  ─► on_delivery_event (Acked, Nacked, ReceiverNotReady, RetransmitExhausted, Resynced)
//! ULP ack/nack/pull data ─► Target::{ulp_ack, ulp_nack, submit_pull_data}
//! timers ─► handle_timeout (transaction timeouts, pull RNR redelivery, soft-state reclaim)
//! ```
//!
//! # Decisions where the spec is ambiguous
//!
//! * One transaction is one packet (§8.1, every rev 0.9 packet type carries
//!   one transaction); ULPs segment.
//! * RSNs are consumed only by accepted submits: a refused submit (no
//!   credits, §8.2.3 "reject ULP transactions ... complete in error and
//!   continue") returns synchronously with the payload, so the target never
//!   waits for an RSN that will not come.
//! * The transaction timeout (kCmplLocalTO, §11) runs from the first
//!   transmission, not from the submit: a transaction still queued behind
//!   the congestion window is the scheduler's, and an ordered target could
//!   not skip an RSN that never reached the wire. On expiry the packet is
//!   replaced by a Resync (code 0x4) so the target skips the RSN.
//! * A push NACKed with CIE/NRE/invalid CID completes when the Resync that
//!   replaced it is acknowledged (spec/falcon.md §4.4, flow §6.6.5).
//! * A zero-length Pull Data for a non-empty pull is the target ULP's CIE
//!   (§8.5.3.5) and completes with kCmplTargetNackCIE; a shorter one is
//!   normal (§11 footnote 2); a longer one completes with kCmplOpErr
//!   immediately (§11 table offers kCmplOpErr or kCmplLocalTO). The ULP's
//!   NRE on a pull is also answered with zero-length Pull Data; its invalid
//!   CID on a pull reclaims the resources and sends nothing (§11 target
//!   table), so the initiator times out.
//! * Unmatched Pull Data (§8.4.3.2 "must be discarded") is acknowledged at
//!   the packet level and dropped here: it is typically the late answer to
//!   a transaction that already timed out.
//! * RNR on an ordered connection (§8.5.3.4: later RSNs "continue to be RNR
//!   NACKed until the ULP accepts" RSN N): the engine stops delivering new
//!   requests of that connection while an RNR-NACKed request awaits its
//!   redelivery, and delivers the held ones in RSN order once the ULP has
//!   accepted it. Requests the ULP already holds are the ULP's to NACK.
//! * Head of line (§8.2.4): on an ordered connection the request whose RSN
//!   is the next to deliver (or the RNR redelivery awaited); on an
//!   unordered one the packet at its window's base PSN.
//! * Resources: the Tx part of a demand is released when the packet leaves
//!   the retransmit buffer (ACK of it, or of the Resync that replaced it),
//!   the Rx part when the completion reaches the ULP (initiator) or the ULP
//!   answers (target). Target network resources held by a request the ULP
//!   never answers are reclaimed after `target_timeout` (§11: "all Falcon
//!   physical resources are ultimately guarded and reclaimed by timeout").

pub mod initiator;
pub mod payload;
mod ring;
pub mod source;
pub mod target;
pub mod ulp;

use std::collections::VecDeque;

use core::time::Duration;

use crate::delivery::{DeliveryConnection, PayloadHandle};
use crate::drop::DropCounters;
use crate::port::{FrameBuf, PacketBuf};
use crate::resources::{Account, CreditClass, Demand, Resources};
use crate::seq::Rsn;
use crate::time::Timestamp;
use ring::RingPool;

/// The target ULP's refusal of a request (RNR with its timeout, CIE, NRE,
/// invalid CID, each with the ULP's code), for `Engine::ulp_nack`.
pub use crate::delivery::UlpNack;
pub use initiator::Initiator;
#[cfg(any(test, feature = "testing"))]
pub use initiator::InitiatorState;
pub use payload::{Payload, RxPayload};
pub(crate) use source::TxPayload;
pub use source::{DataSource, HeaderTooLong, UlpHeader, ULP_HEADER_CAPACITY};
pub use target::Target;
#[cfg(any(test, feature = "testing"))]
pub use target::TargetState;
pub use ulp::{
    Completion, CompletionStatus, ConnectionFault, ConnectionHandle, Op, RejectReason, Rejected,
    Request, RnrNack, Transaction, TransactionKind, UlpCommandError, UlpEvent,
};

/// Tunables of the transaction sublayer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransactionConfig {
    /// Initiator soft-state timeout, from the first transmission
    /// (kCmplLocalTO, OCP Falcon 0.9 §11; "significantly larger" than the
    /// packet layer's). Default 1 s.
    pub transaction_timeout: Duration,
    /// Target: network resources of a request the ULP has not answered are
    /// reclaimed after this long. Default 1 s.
    pub target_timeout: Duration,
    /// Target: how far ahead of its base RSN a request may be (the RSN
    /// reorder ring's bound). Default 65536.
    pub max_rsn_span: u32,
    /// Largest payload of one packet (set by the engine from the MTU).
    pub max_payload: usize,
}

impl Default for TransactionConfig {
    fn default() -> Self {
        TransactionConfig {
            transaction_timeout: Duration::from_secs(1),
            target_timeout: Duration::from_secs(1),
            max_rsn_span: 1 << 16,
            max_payload: 4096,
        }
    }
}

/// Counters of the transaction sublayer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TransactionStats {
    /// Push transactions accepted from the ULP.
    pub pushes_submitted: u64,
    /// Pull transactions accepted from the ULP.
    pub pulls_submitted: u64,
    /// Submits refused (no credits, too long, dead connection).
    pub rejected: u64,
    /// Completions handed to the ULP, by 4-bit completion code.
    pub completions: [u64; 16],
    /// Completed push payload bytes (status Ack).
    pub push_bytes_completed: u64,
    /// Completed Pull Data bytes (status Ack).
    pub pull_bytes_completed: u64,
    /// Requests delivered to the target ULP (redeliveries included).
    pub requests_delivered: u64,
    /// Of those, redeliveries after an RNR NACK.
    pub redeliveries: u64,
    /// Push Data frames kept for the target ULP (the payload delivered in
    /// its frame, [`payload`]). Each is delivered once (a duplicate is
    /// dropped before it is stored).
    pub zero_copy_receives: u64,
    /// Pull Data frames kept for the initiator ULP, each completed once (a
    /// duplicate is dropped before it is stored).
    pub zero_copy_pull_data: u64,
    /// RNR NACKs received for our Push Data.
    pub rnr_received: u64,
    /// ULP NACKs at the target (RNR, CIE, NRE, invalid CID).
    pub ulp_nacks: u64,
    /// Push Data the target RNR-NACKed itself because an earlier request
    /// of the ordered connection awaits its RNR redelivery (§8.5.3.4).
    pub rnr_sent_behind: u64,
    /// Pull Data submitted by the target ULP.
    pub pull_data_submitted: u64,
    /// Requests refused for lack of network resources (resource NACKs).
    pub resource_refusals: u64,
    /// Transactions that timed out (kCmplLocalTO).
    pub timeouts: u64,
    /// Target requests whose resources were reclaimed by `target_timeout`.
    pub reclaimed: u64,
    /// Xoff events.
    pub xoff: u64,
    /// Xon events.
    pub xon: u64,
}

impl TransactionStats {
    /// Completions with status Ack.
    pub fn completed_ok(&self) -> u64 {
        self.completions[0]
    }

    /// Completions with an error status.
    pub fn completed_error(&self) -> u64 {
        self.completions.iter().skip(1).sum()
    }
}

/// The engine-wide state the transaction sublayer works with.
#[derive(Debug)]
pub struct Shared<B: PacketBuf = FrameBuf, S = Vec<u8>> {
    /// The engine's resource accounting.
    pub resources: Resources,
    /// Frames the transaction sublayer or the ULP let go of (a stored
    /// payload dropped, a delivered one released), for the engine's loop
    /// to return to the port.
    pub released: Vec<B>,
    /// Events for the ULPs.
    pub events: VecDeque<UlpEvent<B, S>>,
    /// Counters.
    pub stats: TransactionStats,
    /// Drop counters.
    pub drops: DropCounters,
    /// Tunables.
    pub config: TransactionConfig,
    /// Connections told Xoff, to be checked for Xon after releases.
    pub xoff_waiting: Vec<ConnectionHandle>,
    /// Pool occupancy changed since the engine last looked: resources were
    /// released (Xon may be due) or a received request reserved
    /// network-request resources; either way the receive-buffer level
    /// takes a new sample (§10.2: the EMA is "updated each time the
    /// occupancy changes").
    pub occupancy_changed: bool,
    /// RNR NACKs received for our pushes, kept for the ULP when it asked
    /// for them (`Engine::report_receiver_not_ready`); `None` otherwise, so
    /// that a ULP that never drains them holds nothing.
    pub rnr_reports: Option<VecDeque<RnrNack>>,
    /// Slot arrays of idle initiators and targets, lent to the next that
    /// needs one (`ring.rs`).
    pub(crate) initiator_rings: RingPool<initiator::Slot<B, S>>,
    pub(crate) target_rings: RingPool<target::Slot<B, S>>,
}

impl<B: PacketBuf, S> Shared<B, S> {
    /// Engine-wide state with empty pools.
    pub fn new(resources: Resources, config: TransactionConfig) -> Self {
        Shared {
            resources,
            released: Vec::new(),
            events: VecDeque::new(),
            stats: TransactionStats::default(),
            drops: DropCounters::new(),
            config,
            xoff_waiting: Vec::new(),
            occupancy_changed: false,
            rnr_reports: None,
            initiator_rings: RingPool::default(),
            target_rings: RingPool::default(),
        }
    }

    /// Whether `account` has credits of `class` again after an Xoff: room
    /// for a one-cell push (requests) or a one-cell Pull Data (data).
    pub fn xon_due(&self, account: &Account, class: CreditClass) -> bool {
        let cell = self.resources.config().cell_size;
        let len = usize::from(cell);
        let demand = match class {
            CreditClass::Request => Demand::push(len, cell),
            CreditClass::Data => Demand::pull_data(len, cell),
        };
        self.resources.ulp_fits(account, &demand)
    }
}

impl<B: PacketBuf, S> Shared<B, S> {
    /// Lets go of a stored payload: its frame goes back to the port.
    #[inline]
    pub(crate) fn release(&mut self, payload: Payload<B>) {
        if let Some(frame) = payload.into_frame() {
            self.released.push(frame);
        }
    }
}

/// One connection's context for a transaction-layer call.
pub struct Ctx<'a, B: PacketBuf = FrameBuf, S = Vec<u8>> {
    /// Now.
    pub now: Timestamp,
    /// The connection.
    pub connection: ConnectionHandle,
    /// Its packet delivery sublayer.
    pub delivery: &'a mut DeliveryConnection,
    /// Its credit account.
    pub account: &'a mut Account,
    /// Engine-wide state.
    pub shared: &'a mut Shared<B, S>,
}

impl<B: PacketBuf, S> Ctx<'_, B, S> {
    /// Releases `demand` from the connection's account.
    #[inline(always)]
    pub(crate) fn release(&mut self, demand: &Demand) {
        if demand.is_zero() {
            return;
        }
        self.shared.resources.release(self.account, demand);
        self.shared.occupancy_changed = true;
    }

    /// Releases the lanes `lanes` of `demand` (its Tx or Rx part, see
    /// [`Resources::release_lanes`]).
    pub(crate) fn release_lanes(&mut self, demand: &Demand, lanes: [u32; 8]) {
        if self
            .shared
            .resources
            .release_lanes(self.account, demand, lanes)
        {
            self.shared.occupancy_changed = true;
        }
    }

    /// Tells the ULP to stop submitting on this connection (once), and
    /// remembers to tell it `Xon` when credits are back.
    pub(crate) fn xoff(&mut self, class: CreditClass) {
        xoff(self.shared, self.account, self.connection, class);
    }
}

/// [`Ctx::xoff`] with the parts of the context it uses.
pub(crate) fn xoff<B: PacketBuf, S>(
    shared: &mut Shared<B, S>,
    account: &mut Account,
    connection: ConnectionHandle,
    class: CreditClass,
) {
    let stopped = &mut account.xoff[class.index()];
    if *stopped {
        return;
    }
    *stopped = true;
    shared.stats.xoff += 1;
    if account.xoff != [true; 2] {
        // The first class stopped: the connection is now waited on.
        shared.xoff_waiting.push(connection);
    }
    shared
        .events
        .push_back(UlpEvent::Xoff { connection, class });
}

/// Whose packet a [`PayloadHandle`] names: the initiator's (Pull Request,
/// Push Data) or the target's (Pull Data), with the RSN.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Our request (Push Data or Pull Request) with our RSN.
    Initiator,
    /// Our Pull Data with the peer's RSN.
    Target,
}

/// The delivery sublayer's handle of one of our packets: role bit above the
/// RSN (initiator and target RSNs are separate spaces).
pub const fn payload_handle(role: Role, rsn: Rsn) -> PayloadHandle {
    let role_bit = match role {
        Role::Initiator => 0,
        Role::Target => 1u64 << 32,
    };
    PayloadHandle(role_bit | rsn.value() as u64)
}

/// The role and RSN a handle names.
pub const fn decode_handle(handle: PayloadHandle) -> (Role, Rsn) {
    let role = if handle.0 >> 32 == 0 {
        Role::Initiator
    } else {
        Role::Target
    };
    (role, Rsn::new(handle.0 as u32))
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod handle_tests {
    use super::*;

    #[test]
    fn handles_keep_role_and_rsn() {
        for rsn in [0, 7, u32::MAX] {
            for role in [Role::Initiator, Role::Target] {
                let handle = payload_handle(role, Rsn::new(rsn));
                assert_eq!(decode_handle(handle), (role, Rsn::new(rsn)));
            }
        }
    }
}
