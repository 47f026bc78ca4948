//! What an engine counts.
//!
//! Layer: engine, observability. Owns [`EngineStats`] (frames, bytes,
//! retransmissions, transactions, drops by reason, RUE traffic, the range
//! of congestion windows the RUE set, RTT samples) and
//! [`ConnectionSnapshot`]. Plain values copied out of the engine; no IO.

use core::time::Duration;

use rue::Fcwnd;

use crate::delivery::{CcState, DeliveryStats, RttEstimate};
use crate::drop::DropCounters;
use crate::seq::Rsn;
use crate::transaction::TransactionStats;

/// Counters of one engine (one lcore). Sum several with
/// [`merge`](Self::merge).
#[derive(Debug, Clone, PartialEq)]
pub struct EngineStats {
    /// Frames handed to `handle_packet` or `handle_frame`.
    pub rx_frames: u64,
    /// Their bytes.
    pub rx_bytes: u64,
    /// Frames produced by `poll_transmit`.
    pub tx_frames: u64,
    /// Their bytes.
    pub tx_bytes: u64,
    /// Of those, ACKs and NACKs (BACK, EACK, NACK).
    pub tx_acks: u64,
    /// Retransmissions sent (timeout and early; Resyncs not included).
    pub retransmissions: u64,
    /// Of those, after a retransmit timeout.
    pub retransmissions_timeout: u64,
    /// Of those, early (EACK OOO distance, EACK-OWN, RACK-TLP).
    pub retransmissions_early: u64,
    /// Resyncs sent.
    pub resyncs: u64,
    /// PSP master-key rotations this engine took over (its own
    /// `Engine::begin_key_rotation`, or `Engine::follow_key_rotation` after
    /// its node's).
    pub key_rotations: u64,
    /// The transaction sublayer's counters (submits, completions by code,
    /// deliveries, RNR, resource NACKs, Xon/Xoff, timeouts).
    pub transactions: TransactionStats,
    /// Dropped frames by reason (PSP reasons included).
    pub drops: DropCounters,
    /// RUE events queued.
    pub rue_events: u64,
    /// RUE results applied.
    pub rue_results: u64,
    /// RUE events that found the queue full (kept pending, retried).
    pub rue_queue_full: u64,
    /// Results from an external RUE that no connection took (closed,
    /// failed, or an id outside this engine's range).
    pub rue_results_unmatched: u64,
    /// Of those, results of a closed connection whose slot a new connection
    /// holds now (another instance of the RUE connection id): dropped, not
    /// applied to the new one.
    pub rue_results_stale: u64,
    /// Smallest fcwnd any connection had (initial or set by the RUE), in
    /// packets.
    pub fcwnd_min: f64,
    /// Largest fcwnd, in packets.
    pub fcwnd_max: f64,
    /// Smallest ncwnd.
    pub ncwnd_min: u16,
    /// Largest ncwnd.
    pub ncwnd_max: u16,
    /// RTT samples taken from ACKs and NACKs (t4 − t1).
    pub rtt_samples: u64,
    /// Smallest RTT sample.
    pub rtt_min: Duration,
    /// Largest RTT sample.
    pub rtt_max: Duration,
    /// Sum of the RTT samples (for the mean).
    pub rtt_sum: Duration,
    /// RUE path changes applied (new UDP source port or flow label).
    pub path_changes: u64,
    /// Connection error events (peer violations, fatal failures).
    pub connection_errors: u64,
    /// SPI check and decryption failures reported to the CM
    /// (`Engine::poll_cm_event`; rate-limited, so fewer than the drops).
    pub spi_failure_events: u64,
    /// Packets picked to send for which the port had no buffer of the
    /// frame's size (`Engine::poll_transmit`): each lost as on the wire,
    /// and retransmitted.
    pub tx_no_buffer: u64,
    /// Frames of another shard of the node handed back
    /// (`Disposition::NotOnThisEngine`).
    pub rx_other_shard: u64,
    /// Seals that found no expanded key in the engine's transmit context
    /// cache (`EngineConfig::tx_contexts`) and expanded one: one per
    /// connection's first packet and after each rekey, then only while
    /// more connections send than the cache holds.
    pub tx_context_misses: u64,
    /// Paced connections the pacing wheel released to send
    /// (`crate::pacing`: fcwnd < 1, or a rate cap).
    pub pacing_releases: u64,
    /// Release times beyond the pacing wheel's horizon
    /// (`EngineConfig::pacing_slots`), held in its last slot and put back
    /// from there.
    pub pacing_clamped: u64,
}

impl Default for EngineStats {
    fn default() -> Self {
        EngineStats {
            rx_frames: 0,
            rx_bytes: 0,
            tx_frames: 0,
            tx_bytes: 0,
            tx_acks: 0,
            retransmissions: 0,
            retransmissions_timeout: 0,
            retransmissions_early: 0,
            resyncs: 0,
            key_rotations: 0,
            transactions: TransactionStats::default(),
            drops: DropCounters::new(),
            rue_events: 0,
            rue_results: 0,
            rue_queue_full: 0,
            rue_results_unmatched: 0,
            rue_results_stale: 0,
            fcwnd_min: f64::INFINITY,
            fcwnd_max: 0.0,
            ncwnd_min: u16::MAX,
            ncwnd_max: 0,
            rtt_samples: 0,
            rtt_min: Duration::MAX,
            rtt_max: Duration::ZERO,
            rtt_sum: Duration::ZERO,
            path_changes: 0,
            connection_errors: 0,
            spi_failure_events: 0,
            tx_no_buffer: 0,
            rx_other_shard: 0,
            tx_context_misses: 0,
            pacing_releases: 0,
            pacing_clamped: 0,
        }
    }
}

impl EngineStats {
    /// Transactions completed successfully (kCmplAck).
    pub fn transactions_completed(&self) -> u64 {
        self.transactions.completed_ok()
    }

    /// The mean RTT sample.
    pub fn rtt_mean(&self) -> Option<Duration> {
        let n = u32::try_from(self.rtt_samples).ok().filter(|&n| n > 0)?;
        Some(self.rtt_sum / n)
    }

    /// The fcwnd range seen, if any connection existed.
    pub fn fcwnd_range(&self) -> Option<(f64, f64)> {
        (self.fcwnd_min <= self.fcwnd_max).then_some((self.fcwnd_min, self.fcwnd_max))
    }

    /// The ncwnd range seen.
    pub fn ncwnd_range(&self) -> Option<(u16, u16)> {
        (self.ncwnd_min <= self.ncwnd_max).then_some((self.ncwnd_min, self.ncwnd_max))
    }

    /// Adds another engine's counters (ranges widen).
    pub fn merge(&mut self, other: &EngineStats) {
        self.rx_frames += other.rx_frames;
        self.rx_bytes += other.rx_bytes;
        self.tx_frames += other.tx_frames;
        self.tx_bytes += other.tx_bytes;
        self.tx_acks += other.tx_acks;
        self.retransmissions += other.retransmissions;
        self.retransmissions_timeout += other.retransmissions_timeout;
        self.retransmissions_early += other.retransmissions_early;
        self.resyncs += other.resyncs;
        self.key_rotations += other.key_rotations;
        let (t, o) = (&mut self.transactions, &other.transactions);
        t.pushes_submitted += o.pushes_submitted;
        t.pulls_submitted += o.pulls_submitted;
        t.rejected += o.rejected;
        for (a, b) in t.completions.iter_mut().zip(o.completions) {
            *a += b;
        }
        t.push_bytes_completed += o.push_bytes_completed;
        t.pull_bytes_completed += o.pull_bytes_completed;
        t.requests_delivered += o.requests_delivered;
        t.redeliveries += o.redeliveries;
        t.zero_copy_receives += o.zero_copy_receives;
        t.zero_copy_pull_data += o.zero_copy_pull_data;
        t.rnr_received += o.rnr_received;
        t.ulp_nacks += o.ulp_nacks;
        t.rnr_sent_behind += o.rnr_sent_behind;
        t.pull_data_submitted += o.pull_data_submitted;
        t.resource_refusals += o.resource_refusals;
        t.timeouts += o.timeouts;
        t.reclaimed += o.reclaimed;
        t.xoff += o.xoff;
        t.xon += o.xon;
        self.drops.merge(&other.drops);
        self.rue_events += other.rue_events;
        self.rue_results += other.rue_results;
        self.rue_queue_full += other.rue_queue_full;
        self.rue_results_unmatched += other.rue_results_unmatched;
        self.rue_results_stale += other.rue_results_stale;
        self.fcwnd_min = self.fcwnd_min.min(other.fcwnd_min);
        self.fcwnd_max = self.fcwnd_max.max(other.fcwnd_max);
        self.ncwnd_min = self.ncwnd_min.min(other.ncwnd_min);
        self.ncwnd_max = self.ncwnd_max.max(other.ncwnd_max);
        self.rtt_samples += other.rtt_samples;
        self.rtt_min = self.rtt_min.min(other.rtt_min);
        self.rtt_max = self.rtt_max.max(other.rtt_max);
        self.rtt_sum += other.rtt_sum;
        self.path_changes += other.path_changes;
        self.connection_errors += other.connection_errors;
        self.spi_failure_events += other.spi_failure_events;
        self.tx_no_buffer += other.tx_no_buffer;
        self.rx_other_shard += other.rx_other_shard;
        self.tx_context_misses += other.tx_context_misses;
        self.pacing_releases += other.pacing_releases;
        self.pacing_clamped += other.pacing_clamped;
    }

    pub(crate) fn record_windows(&mut self, fcwnd: Fcwnd, ncwnd: u16) {
        let f = fcwnd.to_f64();
        self.fcwnd_min = self.fcwnd_min.min(f);
        self.fcwnd_max = self.fcwnd_max.max(f);
        self.ncwnd_min = self.ncwnd_min.min(ncwnd);
        self.ncwnd_max = self.ncwnd_max.max(ncwnd);
    }

    pub(crate) fn record_rtt(&mut self, rtt: Duration) {
        self.rtt_samples += 1;
        self.rtt_min = self.rtt_min.min(rtt);
        self.rtt_max = self.rtt_max.max(rtt);
        self.rtt_sum += rtt;
    }
}

/// One connection's state, for inspection.
#[derive(Debug, Clone, PartialEq)]
pub struct ConnectionSnapshot {
    /// The packet delivery sublayer's counters.
    pub delivery: DeliveryStats,
    /// The congestion state (the last RUE result).
    pub cc: CcState,
    /// RTT measurements.
    pub rtt: RttEstimate,
    /// Initiator BRSN and NRSN.
    pub initiator_rsns: (Rsn, Rsn),
    /// Target BRSN (ring base) and NRSN (next to deliver).
    pub target_rsns: (Rsn, Rsn),
    /// Transactions submitted and not yet completed.
    pub outstanding: u32,
    /// Credits the connection holds, by [`Credit`](crate::resources::Credit)
    /// index (packets or cells).
    pub credits_used: [u32; 8],
    /// The connection failed.
    pub failed: bool,
}
