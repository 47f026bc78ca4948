//! One datapath lcore of `falcon run`: its engine's connections with their
//! ULP roles ([`ShardUlp`]), and the loop that turns it until told to stop,
//! drains, and publishes a snapshot a second ([`drive`]).
//!
//! Layer: application, generic over the port and the clock: the DPDK
//! lcores run it on `DpdkPort` and the TSC, the tests on the in-process
//! loopback.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use falcon_core::api::{
    Clock, ConnectionHandle, Engine, EngineStats, Lcore, PacketBuf, Port, Timestamp, Ulp, UlpEvent,
};
use hdrhistogram::Histogram;

use crate::cmd::node::workload::{Initiator, Pattern, Target};

/// A connection's local end.
pub enum End {
    Initiator(Box<Initiator>),
    Target(Box<Target>),
}

/// The ULP of one shard: each connection's end, events routed by
/// connection.
#[derive(Default)]
pub struct ShardUlp {
    ends: Vec<End>,
    by_connection: HashMap<ConnectionHandle, usize>,
    /// Told to stop.
    stopped: bool,
}

impl ShardUlp {
    /// Adds connection `connection`'s end.
    pub fn add(&mut self, connection: ConnectionHandle, end: End) {
        self.by_connection.insert(connection, self.ends.len());
        self.ends.push(end);
    }

    /// Connections on this shard.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// No connections.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Initiators submit nothing more.
    pub fn stop(&mut self) {
        self.stopped = true;
        for end in &mut self.ends {
            if let End::Initiator(i) = end {
                i.stop();
            }
        }
    }

    /// Every initiator's work is done (verify: all its transactions;
    /// otherwise only once stopped) and nothing is outstanding.
    pub fn initiators_finished(&self) -> bool {
        self.ends.iter().all(|e| match e {
            End::Initiator(i) => i.finished(),
            End::Target(_) => true,
        })
    }

    /// Transactions submitted and not completed.
    pub fn outstanding(&self) -> usize {
        self.ends
            .iter()
            .map(|e| match e {
                End::Initiator(i) => i.outstanding(),
                End::Target(_) => 0,
            })
            .sum()
    }

    /// The workload's counts so far.
    pub fn counts(&self) -> WorkloadCounts {
        let mut c = WorkloadCounts::default();
        for end in &self.ends {
            match end {
                End::Initiator(i) => {
                    c.initiators += 1;
                    c.completions += i.completions;
                    c.ops += i.ops;
                    c.push_bytes += i.push_bytes;
                    c.pull_bytes += i.pull_bytes;
                    c.response_bytes += i.response_bytes;
                    c.verified_bytes += i.pull_bytes + i.response_bytes;
                    c.failures += i.failures.count;
                    if c.first_failure.is_none() {
                        c.first_failure.clone_from(&i.failures.first);
                    }
                }
                End::Target(t) => {
                    c.targets += 1;
                    c.requests += t.requests;
                    c.pushes_served += t.pushes;
                    c.pulls_served += t.pulls;
                    c.served_push_bytes += t.push_bytes;
                    c.served_pull_bytes += t.pull_bytes;
                    c.verified_bytes += t.push_bytes;
                    c.failures += t.failures.count;
                    if c.first_failure.is_none() {
                        c.first_failure.clone_from(&t.failures.first);
                    }
                }
            }
        }
        c
    }

    /// Every op latency of the run so far (ns), all initiators.
    fn latency(&self) -> Histogram<u64> {
        // Invariant: 3 significant digits is a valid precision.
        let mut all = Histogram::new(3).expect("3 significant digits");
        for end in &self.ends {
            if let End::Initiator(i) = end {
                let _ = all.add(&i.latency);
            }
        }
        all
    }
}

impl<B: PacketBuf + std::fmt::Debug> Ulp<B, Pattern> for ShardUlp {
    fn submit(&mut self, now: Timestamp, engine: &mut Engine<B, Pattern>) {
        for end in &mut self.ends {
            match end {
                End::Initiator(i) => i.submit(now, engine),
                End::Target(t) => t.submit(now, engine),
            }
        }
    }

    fn on_event(
        &mut self,
        now: Timestamp,
        engine: &mut Engine<B, Pattern>,
        event: UlpEvent<B, Pattern>,
    ) {
        let connection = match &event {
            UlpEvent::Completion(c) => c.connection,
            UlpEvent::Request(r) => r.connection,
            UlpEvent::ConnectionError { connection, .. }
            | UlpEvent::Xoff { connection, .. }
            | UlpEvent::Xon { connection, .. } => *connection,
        };
        match self
            .by_connection
            .get(&connection)
            .map(|&i| &mut self.ends[i])
        {
            Some(End::Initiator(i)) => i.on_event(now, engine, event),
            Some(End::Target(t)) => t.on_event(now, engine, event),
            // Invariant: every connection of the engine was added here.
            None => match event {
                UlpEvent::Completion(c) => engine.release(c.data),
                UlpEvent::Request(r) => engine.release(r.payload),
                _ => {}
            },
        }
    }
}

/// A shard's workload counts.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct WorkloadCounts {
    pub initiators: u64,
    pub targets: u64,
    /// Initiators: transactions completed, ops, acknowledged push bytes,
    /// verified pull and response bytes.
    pub completions: u64,
    pub ops: u64,
    pub push_bytes: u64,
    pub pull_bytes: u64,
    pub response_bytes: u64,
    /// Targets: requests served (pushes received, pulls answered), push
    /// bytes verified, pull bytes served (data, without the workload's
    /// header).
    pub requests: u64,
    pub pushes_served: u64,
    pub pulls_served: u64,
    pub served_push_bytes: u64,
    pub served_pull_bytes: u64,
    /// Bytes checked against the pattern on this shard (both roles).
    pub verified_bytes: u64,
    pub failures: u64,
    pub first_failure: Option<String>,
}

/// A port's counters as the report shows them.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct PortCounters {
    /// Frames this lcore's port handed to other shards, took from them, and
    /// dropped for a full ring (software dispatch).
    pub dispatched: u64,
    pub dispatch_received: u64,
    pub dispatch_ring_full: u64,
    /// The mbuf pool was empty.
    pub alloc_failures: u64,
    /// Frames dropped for a checksum the device flagged bad.
    pub rx_bad_checksums: u64,
}

/// What `falcon run` needs of a port beside [`Port`].
pub trait RunPort: Port {
    fn counters(&self) -> PortCounters;
}

/// One lcore's figures at one moment.
#[derive(Debug, Clone)]
pub struct LcoreSnapshot {
    /// Shard (datapath lcore `1 + shard`).
    pub shard: u16,
    pub engine: EngineStats,
    pub port: PortCounters,
    pub workload: WorkloadCounts,
    /// Op latency of the run so far (ns; a reporter subtracts the
    /// previous snapshot's for a second's).
    pub latency: Histogram<u64>,
    pub rue_events: u64,
    pub rue_results: u64,
    pub turns: u64,
    pub idle_turns: u64,
    pub connections: usize,
    pub outstanding: usize,
    pub initiators_finished: bool,
    /// The lcore has stopped and drained (its last snapshot).
    pub last: bool,
}

/// How an lcore is told to stop, and how long it may drain.
#[derive(Debug, Clone)]
pub struct Control {
    pub stop: Arc<AtomicBool>,
    pub drain: Duration,
    pub interval: Duration,
    /// Lcores of the node whose initiators still have transactions
    /// outstanding after the stop. Each lcore turns until none has: its
    /// target ends answer, acknowledge and retransmit for the initiators
    /// on the other lcores. Against an lcore that no longer turns, those
    /// transactions end kCmplLocalTO (OCP Falcon 0.9 §11 initiator table,
    /// footnote 1: retransmit attempts exhausted, or a Pull Request
    /// acknowledged whose Pull Data never comes).
    draining: Arc<AtomicUsize>,
}

impl Control {
    /// The control of a node's `lcores` datapath lcores.
    pub fn new(stop: Arc<AtomicBool>, drain: Duration, interval: Duration, lcores: usize) -> Self {
        Control {
            stop,
            drain,
            interval,
            draining: Arc::new(AtomicUsize::new(lcores)),
        }
    }
}

/// Turns `lcore` until `control.stop`, then stops the initiators and turns
/// on until no lcore of the node has a transaction outstanding or
/// `control.drain` has passed; `publish` gets a snapshot every
/// `control.interval` and a last one.
pub fn drive<P: RunPort, C: Clock>(
    shard: u16,
    lcore: &mut Lcore<P, C, Pattern>,
    ulp: &mut ShardUlp,
    control: &Control,
    mut publish: impl FnMut(LcoreSnapshot),
) where
    P::Buf: std::fmt::Debug,
{
    let mut driver = Driver::new(shard, lcore, control);
    while driver.turn(lcore, ulp, &mut publish) {}
    driver.finish(lcore, ulp, publish);
}

/// [`drive`] a turn at a time (a test interleaves the lcores of a node on
/// one virtual clock).
#[derive(Debug)]
pub struct Driver {
    shard: u16,
    control: Control,
    /// ns.
    interval: u64,
    next_report: u64,
    /// Stopped: the end of the drain (ns).
    drain_until: Option<u64>,
    /// This lcore's initiators have nothing outstanding (counted out of
    /// `control.draining`).
    drained: bool,
    turns: u32,
}

impl Driver {
    pub fn new<P: RunPort, C: Clock>(
        shard: u16,
        lcore: &mut Lcore<P, C, Pattern>,
        control: &Control,
    ) -> Self {
        let interval = control.interval.as_nanos() as u64;
        Driver {
            shard,
            control: control.clone(),
            interval,
            next_report: lcore.clock.now().as_nanos() + interval,
            drain_until: None,
            drained: false,
            turns: 0,
        }
    }

    /// One turn of the loop; false once the lcore is to stop (then
    /// [`finish`](Self::finish)).
    pub fn turn<P: RunPort, C: Clock>(
        &mut self,
        lcore: &mut Lcore<P, C, Pattern>,
        ulp: &mut ShardUlp,
        publish: &mut impl FnMut(LcoreSnapshot),
    ) -> bool
    where
        P::Buf: std::fmt::Debug,
    {
        lcore.turn(ulp);
        self.turns = self.turns.wrapping_add(1);
        // The clock and the flags every 64 turns: a turn is microseconds.
        if self.turns % 64 != 0 {
            return true;
        }
        let now = lcore.clock.now().as_nanos();
        if now >= self.next_report {
            self.next_report = now + self.interval;
            publish(snapshot(self.shard, lcore, ulp, false));
        }
        let control = &self.control;
        match self.drain_until {
            None => {
                if control.stop.load(Ordering::Relaxed) {
                    ulp.stop();
                    self.drain_until = Some(now + control.drain.as_nanos() as u64);
                }
                true
            }
            Some(deadline) => {
                // Stopped initiators submit nothing more: once drained, an
                // lcore stays drained.
                if !self.drained && ulp.outstanding() == 0 {
                    self.drained = true;
                    control.draining.fetch_sub(1, Ordering::AcqRel);
                }
                control.draining.load(Ordering::Acquire) > 0 && now < deadline
            }
        }
    }

    /// A few more turns (the last ACKs out, the peer's last requests in),
    /// then the last snapshot.
    pub fn finish<P: RunPort, C: Clock>(
        self,
        lcore: &mut Lcore<P, C, Pattern>,
        ulp: &mut ShardUlp,
        mut publish: impl FnMut(LcoreSnapshot),
    ) where
        P::Buf: std::fmt::Debug,
    {
        for _ in 0..256 {
            lcore.turn(ulp);
        }
        publish(snapshot(self.shard, lcore, ulp, true));
    }
}

fn snapshot<P: RunPort, C: Clock>(
    shard: u16,
    lcore: &Lcore<P, C, Pattern>,
    ulp: &ShardUlp,
    last: bool,
) -> LcoreSnapshot {
    LcoreSnapshot {
        shard,
        engine: lcore.engine.stats(),
        port: lcore.port.counters(),
        workload: ulp.counts(),
        latency: ulp.latency(),
        rue_events: lcore.rue_events,
        rue_results: lcore.rue_results,
        turns: lcore.turns,
        idle_turns: lcore.idle_turns,
        connections: ulp.len(),
        outstanding: ulp.outstanding(),
        initiators_finished: ulp.initiators_finished(),
        last,
    }
}
