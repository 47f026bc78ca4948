//! The generator's ULP: Push Data (or pushes and pulls) over one or many
//! connections, flat out or on a schedule, each timed from its submit to
//! its completion.
//!
//! Layer: application, the ULP on the generator's lcore loop. Owns the
//! transactions in flight (a slot each, its index the transaction's tag),
//! the round robin over the connections, the latency histograms and the
//! counts. Each transaction's ULP header names its slice of the shared
//! pattern ([`node::workload`](crate::cmd::node::workload)), so the
//! reflector can check a push and serve a pull that this side checks in
//! turn. Never panics on what arrives: an unexpected event or status is a
//! counted failure.

use falcon_core::api::{
    CompletionStatus, ConnectionHandle, Engine, PacketBuf, Timestamp, Transaction, TransactionKind,
    Ulp, UlpEvent,
};
use hdrhistogram::Histogram;

use super::traffic::{MixSource, Rate, Schedule, SizeSource};
use crate::cmd::node::workload::{
    check, header, offset_of, Failures, Pattern, HEADER_LEN, RESPOND,
};

/// Transactions a generator that fell behind its rate may release at
/// once: one receive burst's worth.
pub const CATCH_UP_BURST: usize = 32;

/// What the generator submits.
#[derive(Debug, Clone)]
pub struct Plan {
    pub sizes: SizeSource,
    pub mix: MixSource,
    /// `None`: flat out.
    pub rate: Option<Rate>,
    /// Mean payload bytes (for the catch-up bound of a rate in Gbit/s).
    pub mean_size: f64,
    /// Transactions outstanding at most, over all connections.
    pub inflight: usize,
    /// Transactions to submit in all (`--count`); `None`: until stopped.
    pub count: Option<u64>,
    /// Check the bytes of every Pull Data against the pattern.
    pub verify: bool,
}

/// One transaction in flight.
#[derive(Debug, Clone, Copy)]
struct Slot {
    submitted: Timestamp,
    /// Payload bytes: the ULP header and the data.
    size: u32,
    id: u32,
}

/// What the generator has done.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Transactions the engine took.
    pub submitted: u64,
    /// Completed with an ACK (pushes) or their data (pulls).
    pub pushes: u64,
    pub pulls: u64,
    /// Payload bytes of those.
    pub push_bytes: u64,
    pub pull_bytes: u64,
    /// Pull payload bytes checked against the pattern.
    pub verified_bytes: u64,
}

impl Counts {
    pub fn ops(&self) -> u64 {
        self.pushes + self.pulls
    }

    pub fn bytes(&self) -> u64 {
        self.push_bytes + self.pull_bytes
    }
}

/// The generator's ULP.
pub struct Generator {
    connections: Vec<ConnectionHandle>,
    next_connection: usize,
    pattern: Pattern,
    plan: Plan,
    schedule: Option<Schedule>,
    /// The next transaction's (size, pull), drawn before the schedule is
    /// asked and kept until it goes.
    upcoming: Option<(usize, bool)>,
    /// A transaction every connection turned away, and its slot: the first
    /// to go next turn.
    pending: Option<(Transaction<Pattern>, usize)>,
    slots: Vec<Option<Slot>>,
    free: Vec<usize>,
    outstanding: usize,
    next_id: u32,
    stopped: bool,
    /// Push latency (submit to ACK) since the last [`take_interval`](Self::take_interval), ns.
    interval: Histogram<u64>,
    /// Push latency over the whole run, ns (without the current interval
    /// until it is taken).
    pub push_latency: Histogram<u64>,
    /// Pull latency (submit to Pull Data), ns.
    pub pull_latency: Histogram<u64>,
    pub counts: Counts,
    pub failures: Failures,
}

fn histogram() -> Histogram<u64> {
    // Invariant: 3 significant digits is a valid precision.
    Histogram::new(3).expect("3 significant digits")
}

impl Generator {
    /// Submits over `connections` (at least one) as `plan` says.
    pub fn new(connections: Vec<ConnectionHandle>, pattern: Pattern, plan: Plan) -> Self {
        let inflight = plan.inflight.max(1);
        let schedule = plan.rate.map(|rate| {
            let mean_cost = match rate {
                Rate::Gbps(_) => plan.mean_size * 8.0,
                Rate::Mpps(_) => 1.0,
            };
            Schedule::new(rate, CATCH_UP_BURST, mean_cost)
        });
        Generator {
            connections,
            next_connection: 0,
            pattern,
            plan: Plan { inflight, ..plan },
            schedule,
            upcoming: None,
            pending: None,
            slots: vec![None; inflight + 1],
            free: (0..=inflight).rev().collect(),
            outstanding: 0,
            next_id: 0,
            stopped: false,
            interval: histogram(),
            push_latency: histogram(),
            pull_latency: histogram(),
            counts: Counts::default(),
            failures: Failures::default(),
        }
    }

    /// Submits nothing more; [`finished`](Self::finished) once the
    /// outstanding transactions complete.
    pub fn stop(&mut self) {
        self.stopped = true;
        if let Some((_, slot)) = self.pending.take() {
            self.slots[slot] = None;
            self.free.push(slot);
        }
    }

    /// Stopped (or `--count` submitted) and nothing outstanding.
    pub fn finished(&self) -> bool {
        (self.stopped || self.all_submitted()) && self.outstanding == 0 && self.pending.is_none()
    }

    fn all_submitted(&self) -> bool {
        self.plan.count.is_some_and(|n| self.counts.submitted >= n)
    }

    /// Transactions submitted and not completed.
    pub fn outstanding(&self) -> usize {
        self.outstanding
    }

    /// Releases under the rate so far: (transactions, their cost in the
    /// rate's unit).
    pub fn released(&self) -> Option<(u64, f64)> {
        self.schedule
            .as_ref()
            .map(|s| (s.released, s.released_cost))
    }

    /// The push latencies recorded since the last call (folded into
    /// [`push_latency`](Self::push_latency)), ns.
    pub fn take_interval(&mut self) -> Histogram<u64> {
        let interval = std::mem::replace(&mut self.interval, histogram());
        // Both histograms auto-resize: adding cannot fail.
        let _ = self.push_latency.add(&interval);
        interval
    }

    /// The next transaction, if one may go now: within `--inflight` and
    /// `--count`, and due under the rate.
    fn next_transaction(&mut self, now: Timestamp) -> Option<(Transaction<Pattern>, usize)> {
        // A slot is free for every transaction within `inflight` (and one
        // more for the pending one, which is not asked for while it waits).
        if self.stopped
            || self.all_submitted()
            || self.outstanding >= self.plan.inflight
            || self.free.is_empty()
        {
            return None;
        }
        let (size, pull) = *self
            .upcoming
            .get_or_insert_with(|| (self.plan.sizes.next_size(), self.plan.mix.next_is_pull()));
        if let (Some(schedule), Some(rate)) = (&mut self.schedule, self.plan.rate) {
            if !schedule.try_release(now.as_nanos(), rate.cost(size)) {
                return None;
            }
        }
        self.upcoming = None;
        let slot = self.free.pop()?;
        let id = self.next_id & !RESPOND;
        self.next_id = self.next_id.wrapping_add(1);
        let len = size - HEADER_LEN;
        self.slots[slot] = Some(Slot {
            submitted: now,
            size: size as u32,
            id,
        });
        let h = header(id, len);
        let t = if pull {
            // Sizes are checked against the frame (at most 4 KiB and the
            // headers): they fit the request length.
            Transaction::pull(slot as u64, size as u16).with_header(h)
        } else {
            Transaction::push(slot as u64, self.pattern.slice(offset_of(id), len)).with_header(h)
        };
        Some((t, slot))
    }
}

impl<B: PacketBuf + std::fmt::Debug> Ulp<B, Pattern> for Generator {
    fn submit(&mut self, now: Timestamp, engine: &mut Engine<B, Pattern>) {
        let n = self.connections.len();
        if n == 0 {
            return;
        }
        loop {
            let Some((t, slot)) = self.pending.take().or_else(|| self.next_transaction(now)) else {
                return;
            };
            // Round robin; a connection out of credits passes its turn.
            let mut refused = Some(t);
            for _ in 0..n {
                let Some(t) = refused.take() else { break };
                let c = self.next_connection;
                self.next_connection = (c + 1) % n;
                if let Err(rejected) = engine.submit(now, self.connections[c], t) {
                    refused = Some(rejected.returned);
                }
            }
            if let Some(t) = refused {
                self.pending = Some((t, slot));
                return;
            }
            if let Some(s) = &mut self.slots[slot] {
                s.submitted = now;
            }
            self.outstanding += 1;
            self.counts.submitted += 1;
        }
    }

    fn on_event(
        &mut self,
        now: Timestamp,
        engine: &mut Engine<B, Pattern>,
        event: UlpEvent<B, Pattern>,
    ) {
        let c = match event {
            UlpEvent::Completion(c) => c,
            UlpEvent::Xoff { .. } | UlpEvent::Xon { .. } => return,
            UlpEvent::Request(r) => {
                self.failures
                    .add(|| format!("generator got a request (rsn {:?})", r.rsn));
                engine.release(r.payload);
                return;
            }
            other => {
                self.failures.add(|| format!("generator: {other:?}"));
                return;
            }
        };
        let slot = usize::try_from(c.tag).unwrap_or(usize::MAX);
        let Some(s) = self.slots.get_mut(slot).and_then(Option::take) else {
            self.failures
                .add(|| format!("a completion for no transaction (tag {})", c.tag));
            engine.release(c.data);
            return;
        };
        self.free.push(slot);
        self.outstanding = self.outstanding.saturating_sub(1);
        let size = s.size as usize;
        let ns = now.as_nanos().saturating_sub(s.submitted.as_nanos()).max(1);
        if c.status != CompletionStatus::Ack {
            self.failures
                .add(|| format!("transaction {} completed {:?}", s.id, c.status));
        } else {
            match c.kind {
                TransactionKind::Push => {
                    self.counts.pushes += 1;
                    self.counts.push_bytes += size as u64;
                    let _ = self.interval.record(ns);
                }
                TransactionKind::Pull => {
                    let ok = if self.plan.verify {
                        check(&self.pattern, &c.data) == Some((s.id, size - HEADER_LEN))
                    } else {
                        c.data.len() == size
                    };
                    if ok {
                        self.counts.pulls += 1;
                        self.counts.pull_bytes += size as u64;
                        if self.plan.verify {
                            self.counts.verified_bytes += size as u64;
                        }
                        let _ = self.pull_latency.record(ns);
                    } else {
                        self.failures.add(|| {
                            format!(
                                "pull {}: {} bytes back, not the {size} of its slice",
                                s.id,
                                c.data.len()
                            )
                        });
                    }
                }
            }
        }
        engine.release(c.data);
    }
}
