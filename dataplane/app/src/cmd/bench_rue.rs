//! `falcon bench rue`: CC events per second per core through the
//! queue-driven RUE core (DESIGN §8: ≥ 20 M events/s per core with
//! 1 000 000 connections; the Falcon paper's FAE reaches 20 M/s).
//!
//! One core runs the datapath's side and the RUE inline, as a datapath
//! lcore with an inline RUE would: per batch of 256 events it pushes them
//! into the core's lossless event queue (one slice copy), runs
//! `Rue::process`, and consumes the 256 results in the result queue (two
//! fields of each folded into a checksum) and frees their slots. Events are pre-generated outside the timed
//! loop from a seeded xorshift (random connection ids over all
//! connections, realistic timestamps, windows, levels and ECN counts), and
//! the state table holds every connection, so state accesses miss the
//! caches as they would at scale. (The table is split hot/cold: a Swift
//! event reads and writes its connection's 2-byte hot word, 2 MiB at 1 M
//! connections, which misses L1/L2 but mostly stays in L3 here; DCQCN reads
//! and writes a 64-byte cold slot of a 64 MiB array.)
//!
//! In the same run, in alternating rounds (so frequency changes and noise
//! from the other core hit all alike):
//! * the algorithm with the FAE lookahead (prefetch by load, K = 32): the
//!   headline `events_per_sec`;
//! * the same without the lookahead (K = 0): does the prefetch help;
//! * the queues with the no-op bypass algorithm, which touches no state:
//!   `queue_only_events_per_sec`, the plumbing's own ceiling.

use std::time::{Duration, Instant};

use rue::engine::DEFAULT_LOOKAHEAD;
use rue::{
    BypassConfig, CcEvent, DcqcnConfig, DelaySelect, EventType, Fcwnd, NcwndDirection,
    ProfileConfig, Profiles, RetransmitReason, Rue, RueChannel, RueConfig, SwiftConfig, Time24,
    BYTES_PER_CONNECTION, HOT_BYTES_PER_CONNECTION, PLB_BYTES_PER_CONNECTION,
};
use serde::Serialize;

use crate::cli::{BenchRueArgs, RueAlgorithmArg};
use crate::error::{AppError, Result};

/// DESIGN §8 bar, events per second per core.
const BAR_EVENTS_PER_SEC: f64 = 20e6;
/// Events per push → process → pop turn (a datapath loop turn).
const BATCH: usize = 256;
/// Entries per queue.
const QUEUE_CAPACITY: usize = 1024;
/// Pre-generated events (cycled).
const EVENTS: usize = 1 << 21;
/// Alternating rounds per run.
const ROUNDS: u32 = 10;
/// Turns between clock reads.
const TURNS_PER_CHECK: u64 = 32;

#[derive(Debug, Serialize)]
pub struct Report {
    /// Algorithm under test (`swift` or `dcqcn`).
    pub algorithm: String,
    /// Connections with state in the RUE table; event ids are uniform over them.
    pub connections: u32,
    /// Measuring time of the headline configuration, seconds.
    pub seconds: f64,
    /// Events per push → process → pop turn.
    pub batch_events: usize,
    /// Lookahead K of the prefetch by load, events.
    pub lookahead_events: usize,
    /// Events through the headline configuration.
    pub events: u64,
    /// Headline: events per second on one core, push → process → pop.
    pub events_per_sec: f64,
    /// The same, as nanoseconds per event.
    pub ns_per_event: f64,
    /// The RUE core's share alone: events per second of time spent inside
    /// `Rue::process` (what a dedicated RUE lcore would do, without the
    /// datapath's push and pop).
    pub rue_only_events_per_sec: f64,
    /// The same events with the lookahead off (K = 0).
    pub lookahead_off_events_per_sec: f64,
    /// `events_per_sec / lookahead_off_events_per_sec`.
    pub lookahead_speedup: f64,
    /// Baseline: the same events through the queues with the no-op bypass
    /// algorithm (no state access).
    pub queue_only_events_per_sec: f64,
    /// `events_per_sec / queue_only_events_per_sec`.
    pub ratio_to_queue_only: f64,
    /// RUE cold state per connection (the 64-byte slot DCQCN and multipath
    /// Swift use), bytes.
    pub state_bytes_per_connection: usize,
    /// RUE hot state per connection (what a single-path Swift event reads
    /// and writes without PLB and PRR), bytes.
    pub hot_state_bytes_per_connection: usize,
    /// RUE state table, hot, PLB and cold words together, MiB.
    pub state_table_mib: f64,
    /// The bar, events per second per core.
    pub bar_events_per_sec: f64,
    /// `events_per_sec / bar_events_per_sec`.
    pub ratio_to_bar: f64,
    /// Whether the headline meets the bar.
    pub meets_bar: bool,
}

/// One configuration under test: an RUE with one core's queues.
struct Setup {
    rue: Rue,
    channel: RueChannel,
    events: u64,
    time: Duration,
    /// Time inside `Rue::process` alone (the RUE core's share).
    rue_time: Duration,
    cursor: usize,
    checksum: u64,
}

impl Setup {
    fn new(connections: u32, lookahead: usize, profile: ProfileConfig) -> Result<Self> {
        let profiles =
            Profiles::new(&[profile]).map_err(|e| AppError::Failed(format!("RUE profile: {e}")))?;
        let mut rue = Rue::new(
            RueConfig {
                connections,
                lookahead,
            },
            profiles,
        )
        .map_err(|e| AppError::Failed(format!("RUE: {e}")))?;
        let channel = rue.add_core(QUEUE_CAPACITY);
        Ok(Setup {
            rue,
            channel,
            events: 0,
            time: Duration::ZERO,
            rue_time: Duration::ZERO,
            cursor: 0,
            checksum: 0,
        })
    }

    /// One datapath turn: push a batch, run the RUE inline, consume the
    /// results.
    ///
    /// The batch is queued with one slice copy and one index publication
    /// (`push_slice`), and the results are read where they lie in the
    /// result queue and freed together (`pop_each`), as a datapath loop
    /// turn does with a burst. Per-event `push` and `pop` would each move an
    /// event or a result and publish an index (see `RueChannel::push_slice`).
    #[inline]
    fn turn(&mut self, events: &[CcEvent]) -> Result<()> {
        let end = self.cursor + BATCH;
        if self.channel.push_slice(&events[self.cursor..end]) != BATCH {
            return Err(AppError::Failed(
                "RUE event queue full in a drained loop".into(),
            ));
        }
        self.cursor = if end + BATCH > events.len() { 0 } else { end };
        let started = Instant::now();
        let processed = self.rue.process(BATCH);
        self.rue_time += started.elapsed();
        let mut checksum = self.checksum;
        let popped = self.channel.pop_each(BATCH, |result| {
            checksum = checksum
                .wrapping_add(u64::from(result.fcwnd.raw()) ^ u64::from(result.inter_packet_gap));
        });
        self.checksum = checksum;
        if processed != BATCH || popped != BATCH {
            return Err(AppError::Failed(format!(
                "RUE turn: {processed} processed, {popped} results of {BATCH}"
            )));
        }
        Ok(())
    }

    /// Runs turns for about `budget`, adding to the totals.
    fn run_for(&mut self, events: &[CcEvent], budget: Duration) -> Result<()> {
        let start = Instant::now();
        let mut turns = 0u64;
        loop {
            for _ in 0..TURNS_PER_CHECK {
                self.turn(events)?;
            }
            turns += TURNS_PER_CHECK;
            if start.elapsed() >= budget {
                break;
            }
        }
        self.time += start.elapsed();
        self.events += turns * BATCH as u64;
        Ok(())
    }

    fn events_per_sec(&self) -> f64 {
        self.events as f64 / self.time.as_secs_f64().max(1e-9)
    }

    fn rue_events_per_sec(&self) -> f64 {
        self.events as f64 / self.rue_time.as_secs_f64().max(1e-9)
    }
}

pub fn run(args: &BenchRueArgs) -> Result<Report> {
    if args.connections == 0 || args.connections > 1 << 24 {
        return Err(AppError::Usage(format!(
            "--connections {}: must be in 1 ..= 16777216",
            args.connections
        )));
    }
    if !(args.seconds > 0.0 && args.seconds.is_finite()) {
        return Err(AppError::Usage(format!(
            "--seconds {}: must be > 0",
            args.seconds
        )));
    }
    let (name, profile) = match args.algorithm {
        RueAlgorithmArg::Swift => ("swift", ProfileConfig::Swift(SwiftConfig::default())),
        RueAlgorithmArg::Dcqcn => ("dcqcn", ProfileConfig::Dcqcn(DcqcnConfig::default())),
    };
    // Two events per connection per pass (at least 16 batches), so each pass
    // touches the whole table; at most EVENTS.
    let count = (args.connections as usize * 2).clamp(BATCH * 16, EVENTS) / BATCH * BATCH;
    let events = generate(args.connections, count, 0x05ee_df41_c0e5_u64);

    let mut setups = [
        Setup::new(args.connections, DEFAULT_LOOKAHEAD, profile)?,
        Setup::new(args.connections, 0, profile)?,
        Setup::new(
            args.connections,
            0,
            ProfileConfig::Bypass(BypassConfig::default()),
        )?,
    ];
    // Warm-up: one pass over the events fills every state slot (page faults
    // and first-touch initialisation stay out of the timed rounds).
    for setup in &mut setups {
        for _ in 0..events.len() / BATCH {
            setup.turn(&events)?;
        }
        setup.cursor = 0;
        setup.rue_time = Duration::ZERO;
    }
    let round = Duration::from_secs_f64(args.seconds / f64::from(ROUNDS));
    for _ in 0..ROUNDS {
        for setup in &mut setups {
            setup.run_for(&events, round)?;
        }
    }
    let [main, no_lookahead, queue_only] = &setups;
    if main.rue.counters().outside_table != 0 {
        return Err(AppError::Failed(
            "events outside the RUE state table".into(),
        ));
    }
    // Keep the results observable (the checksum feeds nothing else).
    std::hint::black_box(
        main.checksum
            ^ no_lookahead.checksum
            ^ queue_only.checksum
            ^ u64::from(main.rue.touch_sink()),
    );

    let events_per_sec = main.events_per_sec();
    let ratio_to_bar = events_per_sec / BAR_EVENTS_PER_SEC;
    Ok(Report {
        algorithm: name.to_string(),
        connections: args.connections,
        seconds: main.time.as_secs_f64(),
        batch_events: BATCH,
        lookahead_events: DEFAULT_LOOKAHEAD,
        events: main.events,
        events_per_sec,
        ns_per_event: 1e9 / events_per_sec,
        rue_only_events_per_sec: main.rue_events_per_sec(),
        lookahead_off_events_per_sec: no_lookahead.events_per_sec(),
        lookahead_speedup: events_per_sec / no_lookahead.events_per_sec(),
        queue_only_events_per_sec: queue_only.events_per_sec(),
        ratio_to_queue_only: events_per_sec / queue_only.events_per_sec(),
        state_bytes_per_connection: BYTES_PER_CONNECTION,
        hot_state_bytes_per_connection: HOT_BYTES_PER_CONNECTION,
        state_table_mib: ((BYTES_PER_CONNECTION
            + HOT_BYTES_PER_CONNECTION
            + PLB_BYTES_PER_CONNECTION) as f64
            * f64::from(args.connections))
            / (1024.0 * 1024.0),
        bar_events_per_sec: BAR_EVENTS_PER_SEC,
        ratio_to_bar,
        meets_bar: ratio_to_bar >= 1.0,
    })
}

pub fn print_text(report: &Report) {
    println!(
        "rue {}: {} connections, {} B cold + {} B hot state each ({:.0} MiB), batches of {}, one core inline",
        report.algorithm,
        report.connections,
        report.state_bytes_per_connection,
        report.hot_state_bytes_per_connection,
        report.state_table_mib,
        report.batch_events
    );
    println!(
        "  events/s per core   {:>8.2} M  ({:.1} ns/event, lookahead K = {})",
        report.events_per_sec / 1e6,
        report.ns_per_event,
        report.lookahead_events
    );
    println!(
        "  RUE share only      {:>8.2} M  (time inside Rue::process)",
        report.rue_only_events_per_sec / 1e6
    );
    println!(
        "  lookahead off       {:>8.2} M  (prefetch speedup ×{:.2})",
        report.lookahead_off_events_per_sec / 1e6,
        report.lookahead_speedup
    );
    println!(
        "  queues only (no-op) {:>8.2} M  (algorithm at {:.0} % of the plumbing ceiling)",
        report.queue_only_events_per_sec / 1e6,
        report.ratio_to_queue_only * 100.0
    );
    println!(
        "  bar {:.0} M events/s: ratio {:.2} — {}",
        report.bar_events_per_sec / 1e6,
        report.ratio_to_bar,
        if report.meets_bar { "met" } else { "NOT met" }
    );
}

/// Events with random connection ids and plausible contents, from a seeded
/// xorshift (the RUE itself never draws randomness).
fn generate(connections: u32, count: usize, seed: u64) -> Vec<CcEvent> {
    let mut rng = XorShift(seed | 1);
    let mut ecn = vec![0u16; connections.min(1 << 20) as usize];
    (0..count)
        .map(|i| {
            let connection_id = rng.below(connections);
            let now = (i as u32).wrapping_mul(2) & 0xFF_FFFF;
            let rtt = 150 + rng.below(450); // ≈ 20–80 µs
            let fabric_delay = rtt - rng.below(rtt / 2);
            let t1 = now.wrapping_sub(rtt);
            let t2 = t1.wrapping_add(fabric_delay / 2);
            let t3 = t2.wrapping_add(rtt - fabric_delay);
            let kind = rng.below(100);
            let event_type = match kind {
                0..=1 => EventType::Retransmit,
                2..=4 => EventType::Nack,
                _ => EventType::Ack,
            };
            // ECN marks on about 1 event in 8, per connection counter.
            let slot = connection_id as usize % ecn.len().max(1);
            if let Some(count) = ecn.get_mut(slot) {
                if rng.below(8) == 0 {
                    *count = (*count + 1) & 0x3FFF;
                }
            }
            CcEvent {
                connection_id,
                event_type,
                t1: Time24::new(t1),
                t2: Time24::new(t2),
                t3: Time24::new(t3),
                t4: Time24::new(now),
                retransmit_count: if event_type == EventType::Retransmit {
                    1 + rng.below(3) as u8
                } else {
                    0
                },
                retransmit_reason: RetransmitReason::Timeout,
                nack_code: if event_type == EventType::Nack {
                    1 + rng.below(2) as u8
                } else {
                    0
                },
                forward_hops: rng.below(6) as u8,
                rx_buffer_level: rng.below(32) as u8,
                fcwnd: Fcwnd::from_raw(52 + rng.below(64 << 10)), // 0.05 .. 64 packets
                ncwnd: 16 + rng.below(112) as u16,
                retransmit_timeout: Time24::new(7629),
                num_packets_acked: 1 + rng.below(16) as u16,
                delay_select: DelaySelect::Fabric,
                fabric_window_time_marker: Time24::new(now.wrapping_sub(rng.below(2000))),
                nic_window_time_marker: Time24::new(now.wrapping_sub(rng.below(2000))),
                ncwnd_direction: if rng.below(2) == 0 {
                    NcwndDirection::Decrease
                } else {
                    NcwndDirection::Increase
                },
                delay_state: fabric_delay,
                rtt_state: rtt,
                ecn_accumulated: ecn.get(slot).copied().unwrap_or(0),
                ..CcEvent::default()
            }
        })
        .collect()
}

/// xorshift64 (Marsaglia), for reproducible event streams.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// Uniform-enough in `0..n` (n > 0; 0 gives 0).
    fn below(&mut self, n: u32) -> u32 {
        if n == 0 {
            return 0;
        }
        (((self.next() >> 32) * u64::from(n)) >> 32) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_run_reports_consistent_numbers() {
        let args = BenchRueArgs {
            connections: 1000,
            algorithm: RueAlgorithmArg::Swift,
            seconds: 0.05,
            json: true,
        };
        let report = run(&args).unwrap();
        assert_eq!(report.algorithm, "swift");
        assert_eq!(report.state_bytes_per_connection, 64);
        assert!(report.events > 0 && report.events_per_sec > 0.0);
        assert!((report.ratio_to_bar - report.events_per_sec / 20e6).abs() < 1e-9);
        let args = BenchRueArgs {
            algorithm: RueAlgorithmArg::Dcqcn,
            ..args
        };
        assert_eq!(run(&args).unwrap().algorithm, "dcqcn");
    }

    #[test]
    fn generated_events_are_valid_and_spread() {
        let events = generate(1_000_000, 10_000, 1);
        assert!(events
            .iter()
            .all(|e| e.validate().is_ok() && e.connection_id < 1_000_000));
        let distinct: std::collections::HashSet<u32> =
            events.iter().map(|e| e.connection_id).collect();
        assert!(distinct.len() > 9_900);
    }
}
