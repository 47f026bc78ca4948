//! Events for the connection manager (CM): what the receive path must tell
//! it besides counting a drop.
//!
//! Layer: engine, boundary to the CM. Owns [`CmEvent`] and
//! [`SpiCheckFailure`], [`Engine::poll_cm_event`], and the limiter that
//! keeps a flood of bad frames from flooding the CM: at most one event per
//! (reason, SPI) per [`EngineConfig::spi_failure_interval`], the frames in
//! between carried as a count in the next one, a bounded table of pairs
//! and a bounded queue. Only dropped frames reach this module, through an
//! out-of-line cold call that reads the frame again: a good packet never
//! does, and the receive path carries nothing for it. It never allocates
//! once the engine is built, looks a connection up only for an event,
//! never reads a clock (time is the `now` of the frame) and never panics.
//!
//! OCP Falcon 0.9 §9.2.2.3: "If the SPI check fails, the receiver must
//! signal an error to the CM." §9.2.2.1: a packet that fails decryption
//! is discarded and, optionally, "an error indication must be sent to the
//! CM": an SPI of a master key rotated away, or one the receiver never
//! issued, fails there (the SA key derived for it does not authenticate the
//! frame), so those are reported too.
//!
//! [`EngineConfig::spi_failure_interval`]: crate::engine::EngineConfig::spi_failure_interval

use core::time::Duration;
use std::collections::VecDeque;

use psp::{Header, RxDrop, Spi, HEADER_LEN, NEXT_HEADER_FALCON};

use crate::engine::{ConnectionHandle, Engine};
use crate::ids::ConnectionId;
use crate::port::PacketBuf;
use crate::time::Timestamp;
use crate::transaction::DataSource;
use crate::wire::frame::parse_with;
use crate::wire::{peek_connection_id, ChecksumChecks};

/// (reason, SPI) pairs the limiter tracks at once. Each yields at most one
/// event per interval, so this also bounds the events per interval: a flood
/// of frames with random SPIs raises at most this many.
pub const SPI_FAILURE_PAIRS: usize = 64;

/// Events queued for the CM and not yet polled. Past it, failures are
/// counted as suppressed instead of queued.
pub const CM_EVENT_CAPACITY: usize = 256;

/// An event for the connection manager, from [`Engine::poll_cm_event`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmEvent {
    /// Received frames failed the SPI check or did not decrypt (OCP Falcon
    /// 0.9 §9.2.2.3, §9.2.2.1); rate-limited per (reason, SPI).
    SpiCheckFailed(SpiCheckFailure),
}

/// Frames of one (reason, SPI) dropped by the SPI check or for failing
/// decryption. The drop counter of the same reason counts every frame,
/// reported or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpiCheckFailure {
    /// When the frame that raised the event arrived.
    pub at: Timestamp,
    /// Why: [`RxDrop::SpiMismatch`] (neither the connection's current SPI
    /// nor an allowed previous one, or not of an allowed generation),
    /// [`RxDrop::SpiUnconfigured`], [`RxDrop::PcidMismatch`] (the PCID term
    /// of the SPI check), [`RxDrop::UnknownSa`] (no master key for the
    /// SPI's key selector) or [`RxDrop::AuthFailed`] (the ICV did not
    /// verify: an SPI of a key rotated away, a wrong key, a corrupted
    /// frame).
    pub reason: RxDrop,
    /// The SPI of the PSP header (unauthenticated for `UnknownSa` and
    /// `AuthFailed`).
    pub spi: Spi,
    /// The destination CID of the Falcon header: decrypted for an SPI check
    /// failure; for a frame that did not decrypt, read from the part the
    /// crypt offset leaves in clear (unauthenticated), `None` if encrypted.
    pub cid: Option<ConnectionId>,
    /// The connection `cid` names; else the one whose current or previous
    /// receive SPI is `spi`; `None` if neither.
    pub connection: Option<ConnectionHandle>,
    /// Frames of the same (reason, SPI) dropped without an event since the
    /// previous event for it.
    pub suppressed: u64,
    /// Frames of other pairs dropped without any event (the limiter's
    /// table or the event queue was full) since the previous event of any
    /// pair.
    pub suppressed_other: u64,
}

/// Whether a PSP drop reason is reported to the CM.
pub(super) const fn reported(reason: RxDrop) -> bool {
    matches!(
        reason,
        RxDrop::SpiMismatch
            | RxDrop::SpiUnconfigured
            | RxDrop::PcidMismatch
            | RxDrop::UnknownSa
            | RxDrop::AuthFailed
    )
}

/// The engine's CM events: the queue and its limiter.
#[derive(Debug)]
pub(super) struct CmEvents {
    queue: VecDeque<CmEvent>,
    limiter: Limiter,
}

impl CmEvents {
    pub(super) fn new(interval: Duration) -> CmEvents {
        CmEvents {
            queue: VecDeque::with_capacity(CM_EVENT_CAPACITY),
            limiter: Limiter::new(interval, SPI_FAILURE_PAIRS),
        }
    }
}

impl<B: PacketBuf, S: DataSource> Engine<B, S> {
    /// The next event for the connection manager. Poll after every input,
    /// with [`poll_event`](Self::poll_event); unpolled events past
    /// [`CM_EVENT_CAPACITY`] are only counted (as suppressed).
    pub fn poll_cm_event(&mut self) -> Option<CmEvent> {
        self.cm.queue.pop_front()
    }

    /// `frame`, dropped for `reason` (a [`reported`] one, already
    /// counted), to the CM: its SPI, CID and connection read again from the
    /// frame. After an SPI check failure the frame was decrypted in place,
    /// so the CID is the authenticated one; after a decryption failure only
    /// the part the crypt offset leaves in clear is read.
    #[cold]
    #[inline(never)]
    pub(super) fn report_psp_drop(&mut self, now: Timestamp, reason: RxDrop, frame: &[u8]) {
        // Checked once on receipt (addresses included); a UDP checksum no
        // longer holds once the payload is decrypted in place. The full
        // parse, not `parse_rx`: a second caller of that kept it from being
        // inlined into the receive path.
        let Ok(parsed) = parse_with(frame, ChecksumChecks::OFFLOADED) else {
            return;
        };
        let Some(Ok(header)) = frame.get(parsed.layers.payload).map(Header::new_checked) else {
            return;
        };
        let spi = header.spi();
        let room = self.cm.queue.len() < CM_EVENT_CAPACITY;
        let Some(counts) = self.cm.limiter.admit(now, (reason, spi), room) else {
            return;
        };
        // Only for an event: a flood costs no connection lookups.
        let decrypted = !matches!(reason, RxDrop::UnknownSa | RxDrop::AuthFailed);
        let cid = if decrypted {
            peek_connection_id(header.payload()).ok()
        } else {
            clear_cid(&header)
        };
        let connection = cid
            .and_then(|cid| self.connection(cid))
            .or_else(|| self.connection_by_rx_spi(spi));
        self.stats.spi_failure_events += 1;
        self.cm
            .queue
            .push_back(CmEvent::SpiCheckFailed(SpiCheckFailure {
                at: now,
                reason,
                spi,
                cid,
                connection,
                suppressed: counts.suppressed,
                suppressed_other: counts.suppressed_other,
            }));
    }

    /// The live connection whose current or previous receive SPI is `spi`.
    fn connection_by_rx_spi(&self, spi: Spi) -> Option<ConnectionHandle> {
        self.connections
            .iter()
            .flatten()
            .filter(|conn| !conn.dead)
            .find(|conn| {
                conn.rx_security
                    .as_ref()
                    .is_some_and(|s| s.spi.cur_spi == spi || s.spi.prev_spi == spi)
            })
            .map(|conn| conn.handle)
    }
}

/// The destination CID of a Falcon packet behind `header`, if the crypt
/// offset leaves it in clear (Falcon's SAs keep it so:
/// `psp::TxSaConfig::falcon`).
fn clear_cid(header: &Header<&[u8]>) -> Option<ConnectionId> {
    if header.next_header() != NEXT_HEADER_FALCON {
        return None;
    }
    let header_len = header.header_len();
    let clear_end = HEADER_LEN + usize::from(header.crypt_offset()) * 4;
    let falcon = header.payload();
    // Bytes 1–3 of the Falcon header.
    if clear_end < header_len + 4 {
        return None;
    }
    peek_connection_id(falcon).ok()
}

/// What an admitted failure carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Admitted {
    suppressed: u64,
    suppressed_other: u64,
}

/// One tracked (reason, SPI) pair.
#[derive(Debug, Clone, Copy)]
struct Pair {
    key: (RxDrop, Spi),
    /// No event for the pair before this.
    quiet_until: Timestamp,
    suppressed: u64,
}

/// At most one event per (reason, SPI) per `interval`, over a table of
/// `capacity` pairs. A pair leaves the table only once its interval is
/// over, so the per-pair bound holds across evictions; what an evicted
/// pair had suppressed moves to `untracked`, reported with the next event.
#[derive(Debug)]
struct Limiter {
    interval: Duration,
    capacity: usize,
    pairs: Vec<Pair>,
    /// Failures not counted in any pair's `suppressed` and not yet
    /// reported.
    untracked: u64,
}

impl Limiter {
    fn new(interval: Duration, capacity: usize) -> Limiter {
        Limiter {
            interval,
            capacity,
            pairs: Vec::with_capacity(capacity),
            untracked: 0,
        }
    }

    /// A failure of `key` at `now`: `Some` with the counts to report if an
    /// event is due (`room`: the queue can take one), `None` if it is
    /// suppressed (and counted).
    fn admit(&mut self, now: Timestamp, key: (RxDrop, Spi), room: bool) -> Option<Admitted> {
        let index = match self.pairs.iter().position(|p| p.key == key) {
            Some(i) => {
                let pair = &mut self.pairs[i];
                if now < pair.quiet_until || !room {
                    pair.suppressed += 1;
                    return None;
                }
                i
            }
            None if !room => {
                self.untracked += 1;
                return None;
            }
            None if self.pairs.len() < self.capacity => {
                self.pairs.push(Pair {
                    key,
                    quiet_until: now,
                    suppressed: 0,
                });
                self.pairs.len() - 1
            }
            None => {
                let Some(i) = self.pairs.iter().position(|p| now >= p.quiet_until) else {
                    self.untracked += 1;
                    return None;
                };
                let evicted = &mut self.pairs[i];
                self.untracked += evicted.suppressed;
                *evicted = Pair {
                    key,
                    quiet_until: now,
                    suppressed: 0,
                };
                i
            }
        };
        let pair = &mut self.pairs[index];
        pair.quiet_until = now.saturating_add(self.interval);
        Some(Admitted {
            suppressed: core::mem::take(&mut pair.suppressed),
            suppressed_other: core::mem::take(&mut self.untracked),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    const SECOND: Duration = Duration::from_secs(1);
    const MISMATCH: RxDrop = RxDrop::SpiMismatch;

    fn at_micros(us: u64) -> Timestamp {
        Timestamp::from_micros(us)
    }

    /// 10 000 failures of one pair, one every 250 µs (2.5 s): events at 0,
    /// 1 s and 2 s, each carrying the 3 999 failures since the one before;
    /// the last 1 999 wait for the next event.
    #[test]
    fn a_flood_of_one_pair_is_one_event_per_interval_with_the_count() {
        let mut limiter = Limiter::new(SECOND, SPI_FAILURE_PAIRS);
        let mut events = Vec::new();
        for i in 0..10_000u64 {
            let now = at_micros(1_000_000 + 250 * i);
            if let Some(a) = limiter.admit(now, (MISMATCH, Spi(7)), true) {
                events.push((i, a.suppressed));
            }
        }
        assert_eq!(events, [(0, 0), (4_000, 3_999), (8_000, 3_999)]);
        assert_eq!(limiter.pairs[0].suppressed, 1_999);
    }

    /// Pairs are limited apart: reason and SPI both make the key.
    #[test]
    fn each_reason_and_spi_has_its_own_interval() {
        let mut limiter = Limiter::new(SECOND, SPI_FAILURE_PAIRS);
        let now = at_micros(5);
        assert!(limiter.admit(now, (MISMATCH, Spi(1)), true).is_some());
        assert!(limiter.admit(now, (MISMATCH, Spi(2)), true).is_some());
        assert!(limiter
            .admit(now, (RxDrop::AuthFailed, Spi(1)), true)
            .is_some());
        assert!(limiter.admit(now, (MISMATCH, Spi(1)), true).is_none());
        let later = now + SECOND;
        let a = limiter.admit(later, (MISMATCH, Spi(1)), true);
        assert_eq!(
            a,
            Some(Admitted {
                suppressed: 1,
                suppressed_other: 0
            })
        );
    }

    /// A flood of distinct SPIs fills the table: then at most `capacity`
    /// events per interval, the rest counted and reported with the next
    /// event; an evicted pair's count is not lost.
    #[test]
    fn random_spis_cannot_exceed_the_table() {
        let mut limiter = Limiter::new(SECOND, 4);
        let now = at_micros(0);
        let admitted: Vec<bool> = (0..10u32)
            .map(|spi| limiter.admit(now, (MISMATCH, Spi(spi)), true).is_some())
            .collect();
        assert_eq!(admitted.iter().filter(|&&a| a).count(), 4);
        assert_eq!(limiter.untracked, 6);
        assert!(limiter.admit(now, (MISMATCH, Spi(0)), true).is_none());
        // An interval later a new SPI evicts SPI 0 (expired), whose
        // suppressed failure moves to the untracked count.
        let a = limiter.admit(now + SECOND, (MISMATCH, Spi(99)), true);
        assert_eq!(
            a,
            Some(Admitted {
                suppressed: 0,
                suppressed_other: 7
            })
        );
        // A full queue admits nothing and loses no count.
        let later = now + 3 * SECOND;
        assert!(limiter.admit(later, (MISMATCH, Spi(1)), false).is_none());
        assert!(limiter.admit(later, (MISMATCH, Spi(500)), false).is_none());
        let a = limiter.admit(later, (MISMATCH, Spi(1)), true);
        assert_eq!(
            a,
            Some(Admitted {
                suppressed: 1,
                suppressed_other: 1
            })
        );
    }

    proptest! {
        /// Against a model: every failure is either reported as an event or
        /// counted in exactly one later event or still pending; no pair has
        /// two events less than an interval apart; no more events than
        /// pairs per interval.
        #[test]
        fn counts_are_conserved_and_intervals_respected(
            steps in proptest::collection::vec((0u32..12, 0u64..400_000, any::<bool>()), 1..400),
        ) {
            let capacity = 5;
            let mut limiter = Limiter::new(SECOND, capacity);
            let mut now = at_micros(0);
            let mut last_event: BTreeMap<u32, Timestamp> = BTreeMap::new();
            let mut event_times = Vec::new();
            let (mut failures, mut accounted) = (0u64, 0u64);
            for (spi, gap_us, room) in steps {
                now = now + Duration::from_micros(gap_us);
                failures += 1;
                if let Some(a) = limiter.admit(now, (MISMATCH, Spi(spi)), room) {
                    prop_assert!(room);
                    accounted += 1 + a.suppressed + a.suppressed_other;
                    if let Some(&last) = last_event.get(&spi) {
                        prop_assert!(now >= last + SECOND);
                    }
                    last_event.insert(spi, now);
                    event_times.push(now);
                }
            }
            let pending: u64 = limiter.pairs.iter().map(|p| p.suppressed).sum();
            prop_assert_eq!(failures, accounted + pending + limiter.untracked);
            for (i, &t) in event_times.iter().enumerate() {
                let in_window = event_times[i..].iter().take_while(|&&u| u < t + SECOND).count();
                prop_assert!(in_window <= capacity);
            }
        }
    }
}
