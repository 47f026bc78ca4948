//! The run-to-completion loop of one datapath lcore, over any [`Port`].
//!
//! Layer: engine, the loop around the sans-IO API (DESIGN §3). One turn
//! ([`Lcore::turn`]): read the clock; let the ULP submit; receive a burst
//! and hand each frame to the engine (after a stall, more bursts while
//! they come back full and timers are due); run the timers that are due;
//! hand
//! the engine's events to the ULP; transmit in bounded bursts, the clock
//! read again before each (a frame is stamped within one burst of its
//! departure, see [`Engine::transmit_burst`]). The RUE runs inside the
//! engine's calls (inline) or behind its queues on its own core
//! ([`Lcore::with_rue`]: each turn moves the events the engine admits into
//! the lcore's event queue and applies the results waiting in its result
//! queue, `rue::RueChannel`).
//!
//! The clock is the loop's: [`SystemClock`] here, the TSC through DPDK on
//! an lcore (`falcon-dpdk`), virtual time in tests. The same loop drives
//! the DPDK port, the UDP port and the in-process loopback.

use std::time::Instant;

use crate::engine::Engine;
use crate::port::{PacketBuf, Port};
use crate::time::Timestamp;
use crate::transaction::{DataSource, UlpEvent};

/// Frames taken from the port per receive burst.
pub const RX_BURST: usize = 32;
/// Frames built per transmit burst (see [`Engine::transmit_burst`] for why
/// it is bounded).
pub const TX_BURST: usize = 8;
/// Receive bursts a turn may take after a stall, while they come back
/// full, before it runs timers that are due (see [`Lcore::turn`]).
pub const RX_BURSTS_AFTER_STALL: usize = 64;
/// A gap between turns this long is a stall: a turn of the loop takes
/// microseconds, a scheduler slice milliseconds.
pub const STALL: core::time::Duration = core::time::Duration::from_micros(200);

/// Where a loop reads the time. Non-decreasing.
pub trait Clock {
    /// Now.
    fn now(&mut self) -> Timestamp;
}

/// The system's monotonic clock, from an origin of 1 s (so that no
/// timestamp of a run is zero).
#[derive(Debug, Clone, Copy)]
pub struct SystemClock {
    start: Instant,
}

impl SystemClock {
    /// A clock starting now.
    pub fn new() -> Self {
        SystemClock {
            start: Instant::now(),
        }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        SystemClock::new()
    }
}

impl Clock for SystemClock {
    #[inline]
    fn now(&mut self) -> Timestamp {
        let elapsed = u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        Timestamp::from_nanos(1_000_000_000u64.saturating_add(elapsed))
    }
}

/// What the loop asks of the upper-layer protocol on its engine.
pub trait Ulp<B: PacketBuf, S: DataSource> {
    /// Once a turn, before the receive burst: submit what is ready.
    fn submit(&mut self, now: Timestamp, engine: &mut Engine<B, S>);

    /// One event of the engine: a request to answer, a completion, Xoff or
    /// Xon, a connection error. Frames the event carries go back through
    /// [`Engine::release`].
    fn on_event(&mut self, now: Timestamp, engine: &mut Engine<B, S>, event: UlpEvent<B, S>);
}

/// What one turn did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Turn {
    /// Frames received.
    pub received: usize,
    /// Frames the port took.
    pub sent: usize,
    /// Events handed to the ULP.
    pub events: usize,
    /// Timers ran.
    pub timers: bool,
    /// RUE events or results moved (a RUE on its own core).
    pub rue: bool,
}

impl Turn {
    /// Nothing happened (an idle turn).
    pub fn is_idle(&self) -> bool {
        self.received == 0 && self.sent == 0 && self.events == 0 && !self.timers && !self.rue
    }
}

/// One engine on one port with one clock: a datapath lcore's loop.
#[derive(Debug)]
pub struct Lcore<P: Port, C: Clock, S: DataSource = Vec<u8>> {
    /// The engine (public: the ULP and the reporter read and command it
    /// between turns).
    pub engine: Engine<P::Buf, S>,
    /// The port.
    pub port: P,
    /// The clock.
    pub clock: C,
    rx: Vec<P::Buf>,
    tx: Vec<P::Buf>,
    /// When the last turn ended.
    last_turn: Option<Timestamp>,
    /// Turns run.
    pub turns: u64,
    /// Of them, turns that found nothing to do.
    pub idle_turns: u64,
    /// The queue pair to a RUE on another core (`RueMode::External`).
    rue: Option<rue::RueChannel>,
    /// RUE events moved to the RUE's queue.
    pub rue_events: u64,
    /// RUE results applied from its queue.
    pub rue_results: u64,
}

impl<P: Port, C: Clock, S: DataSource> Lcore<P, C, S> {
    /// `engine` over `port`, timed by `clock`.
    pub fn new(engine: Engine<P::Buf, S>, port: P, clock: C) -> Self {
        Lcore {
            engine,
            port,
            clock,
            rx: Vec::with_capacity(RX_BURST),
            tx: Vec::with_capacity(TX_BURST),
            last_turn: None,
            turns: 0,
            idle_turns: 0,
            rue: None,
            rue_events: 0,
            rue_results: 0,
        }
    }

    /// The RUE runs on another core behind `channel` (the engine was built
    /// with `RueMode::External`): each turn exchanges events and results
    /// with it.
    pub fn with_rue(mut self, channel: rue::RueChannel) -> Self {
        self.rue = Some(channel);
        self
    }

    /// Admitted events into the RUE's event queue, results out of its
    /// result queue (OCP Falcon 0.9 §10.6.1: the admission predicates read
    /// the queue's occupancy, so the event queue never overflows: this loop
    /// is its only producer and polls only while there is room).
    fn exchange_with_rue(&mut self, now: Timestamp) -> bool {
        let Some(channel) = &mut self.rue else {
            return false;
        };
        let mut moved = false;
        while let Some(event) =
            self.engine
                .poll_rue_event(now, channel.event_occupancy(), channel.event_capacity())
        {
            // Invariant: admission saw room and nothing else pushes.
            let pushed = channel.push(event);
            debug_assert!(pushed.is_ok(), "the RUE event queue has room");
            self.rue_events += 1;
            moved = true;
        }
        while let Some(result) = channel.pop() {
            self.engine.handle_rue_result(now, &result);
            self.rue_results += 1;
            moved = true;
        }
        moved
    }

    /// One turn of the loop (see the module doc).
    pub fn turn(&mut self, ulp: &mut impl Ulp<P::Buf, S>) -> Turn {
        let mut turn = Turn::default();
        let now = self.clock.now();
        ulp.submit(now, &mut self.engine);
        turn.received = self
            .engine
            .receive_burst(now, &mut self.port, &mut self.rx, RX_BURST);
        let mut now = if turn.received > 0 {
            self.clock.now()
        } else {
            now
        };
        // After a stall (the core taken away for a scheduler slice, a slow
        // turn) a full burst says more frames wait, and they are the ACKs
        // and responses that answer the timers now overdue. Read them, and
        // hand their events to the ULP as they come (its ACKs move the
        // receive windows), before the timers run, so that a packet the
        // peer already answered is not sent again; bounded, so that
        // transmission is not starved. A loop that is merely busy (a
        // coalescing timer due every turn) keeps to one burst a turn.
        let stalled = self
            .last_turn
            .is_some_and(|last| now.saturating_duration_since(last) >= STALL);
        let mut bursts = 1;
        while stalled
            && turn.received == bursts * RX_BURST
            && bursts < RX_BURSTS_AFTER_STALL
            && self.engine.poll_timeout().is_some_and(|t| t <= now)
        {
            while let Some(event) = self.engine.poll_event() {
                turn.events += 1;
                ulp.on_event(now, &mut self.engine, event);
            }
            turn.received += self
                .engine
                .receive_burst(now, &mut self.port, &mut self.rx, RX_BURST);
            now = self.clock.now();
            bursts += 1;
        }
        if self.engine.poll_timeout().is_some_and(|t| t <= now) {
            self.engine.handle_timeout(now);
            turn.timers = true;
        }
        while let Some(event) = self.engine.poll_event() {
            turn.events += 1;
            ulp.on_event(now, &mut self.engine, event);
        }
        if self.exchange_with_rue(now) {
            turn.rue = true;
        }
        let clock = &mut self.clock;
        let mut last = now;
        turn.sent = self.engine.transmit_bursts(
            || {
                last = clock.now();
                last
            },
            &mut self.port,
            &mut self.tx,
            TX_BURST,
        );
        self.last_turn = Some(last);
        self.turns += 1;
        self.idle_turns += u64::from(turn.is_idle());
        turn
    }

    /// Forgets when the last turn ended, so that the next is not taken for
    /// one after a stall: for a caller that paused the loop on purpose
    /// (a benchmark refilling its input between timed stretches).
    pub fn resume(&mut self) {
        self.last_turn = None;
    }

    /// Turns until `done` says so (checked after each turn).
    pub fn run_until(
        &mut self,
        ulp: &mut impl Ulp<P::Buf, S>,
        mut done: impl FnMut(&Self) -> bool,
    ) {
        while !done(self) {
            self.turn(ulp);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use super::*;
    use crate::api::*;
    use crate::testing::{Loopback, LoopbackConfig, LoopbackPort};

    /// A ULP that pushes its queue on one connection and acknowledges
    /// every request; it counts completions and checks bytes.
    struct Pusher {
        connection: Option<ConnectionHandle>,
        queue: VecDeque<Transaction<Vec<u8>>>,
        completed: usize,
        received_bytes: usize,
    }

    impl Ulp<FrameBuf, Vec<u8>> for Pusher {
        fn submit(&mut self, now: Timestamp, engine: &mut Engine) {
            let Some(connection) = self.connection else {
                return;
            };
            while let Some(t) = self.queue.pop_front() {
                if let Err(rejected) = engine.submit(now, connection, t) {
                    self.queue.push_front(rejected.returned);
                    break;
                }
            }
        }

        fn on_event(&mut self, now: Timestamp, engine: &mut Engine, event: UlpEvent) {
            match event {
                UlpEvent::Request(r) => {
                    assert!(r.payload.iter().all(|&b| b == r.payload.len() as u8));
                    self.received_bytes += r.payload.len();
                    engine.ulp_ack(now, r.connection, r.rsn).expect("ack");
                    engine.release(r.payload);
                }
                UlpEvent::Completion(c) => {
                    assert_eq!(c.status, CompletionStatus::Ack);
                    self.completed += 1;
                    engine.release(c.data);
                }
                UlpEvent::Xoff { .. } | UlpEvent::Xon { .. } => {}
                other => panic!("{other:?}"),
            }
        }
    }

    use crate::testing::HandClock;

    /// Pulls `n` of 1000 bytes at once; the target answers each at once.
    struct Puller {
        connection: ConnectionHandle,
        to_submit: u64,
        completed: u64,
        answered: u64,
    }

    impl Ulp<FrameBuf, Vec<u8>> for Puller {
        fn submit(&mut self, now: Timestamp, engine: &mut Engine) {
            while self.to_submit > 0 {
                let t = Transaction::pull(self.to_submit, 1000);
                if engine.submit(now, self.connection, t).is_err() {
                    break;
                }
                self.to_submit -= 1;
            }
        }

        fn on_event(&mut self, now: Timestamp, engine: &mut Engine, event: UlpEvent) {
            match event {
                UlpEvent::Request(r) => {
                    engine
                        .submit_pull_data(now, r.connection, r.rsn, UlpHeader::EMPTY, vec![7; 1000])
                        .expect("pull data");
                    self.answered += 1;
                }
                UlpEvent::Completion(c) => {
                    assert_eq!(c.status, CompletionStatus::Ack);
                    self.completed += 1;
                    engine.release(c.data);
                }
                UlpEvent::Xoff { .. } | UlpEvent::Xon { .. } => {}
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn after_a_stall_the_frames_waiting_are_read_before_timers_fire() {
        let time = std::rc::Rc::new(std::cell::Cell::new(Timestamp::from_nanos(1_000_000_000)));
        let clock = HandClock(time.clone());
        let now = time.get();
        let config = |side: u8| EngineConfig {
            local_ip: core::net::IpAddr::V4([10, 0, 0, side].into()),
            local_mac: EthernetAddress([2, 0, 0, 0, 0, side]),
            ..EngineConfig::default()
        };
        let mut a: Engine = Engine::new(config(1), now).expect("config");
        let mut b: Engine = Engine::new(config(2), now).expect("config");
        let (ca, _) = connect(now, &mut a, &mut b, &PairSpec::default()).expect("connect");
        let (pa, pb) = Loopback::pair(LoopbackConfig::default());
        let mut la = Lcore::new(a, pa, clock.clone());
        let mut lb = Lcore::new(b, pb, clock);
        let mut initiator = Puller {
            connection: ca,
            to_submit: 96,
            completed: 0,
            answered: 0,
        };
        let mut target = Puller {
            connection: ca,
            to_submit: 0,
            completed: 0,
            answered: 0,
        };
        // The pull requests go out; the target answers them all while the
        // initiator does not run (its core taken away), past its
        // retransmit timeout.
        la.turn(&mut initiator);
        for _ in 0..50 {
            time.set(
                time.get()
                    .saturating_add(std::time::Duration::from_micros(3)),
            );
            lb.turn(&mut target);
        }
        let waiting = lb.engine.stats().tx_frames;
        assert!(target.answered > 0);
        assert!(
            waiting > RX_BURST as u64,
            "more frames wait than one burst holds: {waiting}"
        );
        time.set(
            time.get()
                .saturating_add(std::time::Duration::from_millis(50)),
        );
        // Back on its core: it reads every answer before any timer runs.
        la.turn(&mut initiator);
        assert_eq!(initiator.completed, target.answered);
        assert_eq!(
            la.engine.stats().retransmissions,
            0,
            "{:?}",
            la.engine.stats()
        );
    }

    #[test]
    fn two_lcores_over_the_loopback_complete_every_push() {
        let mut clock = SystemClock::new();
        let now = clock.now();
        let config = |side: u8| EngineConfig {
            local_ip: core::net::IpAddr::V4([10, 0, 0, side].into()),
            local_mac: EthernetAddress([2, 0, 0, 0, 0, side]),
            ..EngineConfig::default()
        };
        let mut a: Engine = Engine::new(config(1), now).expect("config");
        let mut b: Engine = Engine::new(config(2), now).expect("config");
        let (ca, _) = connect(now, &mut a, &mut b, &PairSpec::default()).expect("connect");
        let (pa, pb): (LoopbackPort, LoopbackPort) = Loopback::pair(LoopbackConfig::default());
        let mut la = Lcore::new(a, pa, clock);
        let mut lb = Lcore::new(b, pb, clock);
        let mut initiator = Pusher {
            connection: Some(ca),
            queue: (0..500)
                .map(|i| {
                    let len = 1 + i % 200;
                    Transaction::push(i as u64, vec![len as u8; len])
                })
                .collect(),
            completed: 0,
            received_bytes: 0,
        };
        let mut target = Pusher {
            connection: None,
            queue: VecDeque::new(),
            completed: 0,
            received_bytes: 0,
        };
        let deadline = Instant::now() + std::time::Duration::from_secs(20);
        while initiator.completed < 500 {
            assert!(Instant::now() < deadline, "{} of 500", initiator.completed);
            la.turn(&mut initiator);
            lb.turn(&mut target);
        }
        let expected: usize = (0..500).map(|i| 1 + i % 200).sum();
        assert_eq!(target.received_bytes, expected);
        assert!(la.turns > 0 && la.idle_turns < la.turns);
    }

    /// The RUE on its own thread behind one queue pair per lcore: both
    /// lcores' events reach it and its results come back and apply.
    #[test]
    fn a_rue_on_another_thread_serves_both_lcores_through_their_queues() {
        let mut clock = SystemClock::new();
        let now = clock.now();
        let config = |side: u8, id_base: u32| EngineConfig {
            local_ip: core::net::IpAddr::V4([10, 0, 0, side].into()),
            local_mac: EthernetAddress([2, 0, 0, 0, 0, side]),
            rue: RueMode::External { id_base },
            max_connections: 16,
            ..EngineConfig::default()
        };
        let mut a: Engine = Engine::new(config(1, 0), now).expect("config");
        let mut b: Engine = Engine::new(config(2, 16), now).expect("config");
        let (ca, _) = connect(now, &mut a, &mut b, &PairSpec::default()).expect("connect");
        let mut rue = rue::Rue::new(
            rue::RueConfig {
                connections: 32,
                ..rue::RueConfig::default()
            },
            rue::Profiles::swift_default(),
        )
        .expect("RUE");
        let (qa, qb) = (rue.add_core(64), rue.add_core(64));
        let thread = rue.spawn(rue::Idle::Yield).expect("RUE thread");
        let (pa, pb): (LoopbackPort, LoopbackPort) = Loopback::pair(LoopbackConfig::default());
        let mut la = Lcore::new(a, pa, clock).with_rue(qa);
        let mut lb = Lcore::new(b, pb, clock).with_rue(qb);
        let mut initiator = Pusher {
            connection: Some(ca),
            queue: (0..300)
                .map(|i| Transaction::push(i as u64, vec![100; 100]))
                .collect(),
            completed: 0,
            received_bytes: 0,
        };
        let mut target = Pusher {
            connection: None,
            queue: VecDeque::new(),
            completed: 0,
            received_bytes: 0,
        };
        let deadline = Instant::now() + std::time::Duration::from_secs(20);
        while initiator.completed < 300 || la.rue_results < la.rue_events {
            assert!(Instant::now() < deadline, "{} of 300", initiator.completed);
            la.turn(&mut initiator);
            lb.turn(&mut target);
        }
        let rue = thread.stop().expect("the RUE thread ends");
        assert_eq!(target.received_bytes, 300 * 100);
        assert!(la.rue_events > 0, "the initiator's ACKs made events");
        assert_eq!(la.rue_results, la.rue_events);
        assert_eq!(rue.counters().events, la.rue_events + lb.rue_events);
    }
}
