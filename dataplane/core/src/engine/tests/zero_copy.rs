//! Zero-copy receive end to end: two engines over the loopback, PSP on,
//! the target taking large pushes' frame buffers over and the initiator
//! large Pull Data's (`handle_frame` through `receive_burst`) while the
//! port's pool keeps its size and the engine stops allocating once warm;
//! small payloads and plain slices still copied; duplicates, corrupted
//! frames, loss and reordering still leave exactly one delivery per push
//! and one completion per pull; Pull Data held for its turn, unmatched,
//! zero-length or on a closed connection never leaks or panics.

use std::collections::HashMap;

use core::time::Duration;

use super::faults;
use super::harness::{pattern, Pair, Setup};
use crate::delivery::OrderingMode;
use crate::drop::DropReason;
use crate::engine::{ConnectionHandle, Engine, EngineStats};
use crate::port::{FrameBuf, Loopback, LoopbackConfig, LoopbackPort, PacketBuf, Port};
use crate::seq::Rsn;
use crate::time::Timestamp;
use crate::transaction::{
    Completion, CompletionStatus, RejectReason, Request, Transaction, TransactionKind, UlpEvent,
    UlpNack, ZERO_COPY_MIN_LEN,
};

/// The loopback pair's buffers (small, so reuse is exercised).
const POOL: usize = 512;
/// Pushes in flight.
const WINDOW: u64 = 64;

fn engines() -> (Engine, Engine, ConnectionHandle, ConnectionHandle) {
    super::psp_pair(Timestamp::from_micros(1))
}

/// How B takes its frames in.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Receive {
    /// `receive_burst`: `handle_frame` on the loopback's heap buffers.
    Burst,
    /// `handle_packet` on each frame's bytes (a port without `vec_mut`).
    Slices,
}

impl Receive {
    /// Hands `engine` every frame `port` has for it now.
    fn run(
        self,
        engine: &mut Engine,
        port: &mut LoopbackPort,
        rx: &mut Vec<FrameBuf>,
        now: Timestamp,
    ) {
        match self {
            Receive::Burst => {
                engine.receive_burst(now, port, rx, 64);
            }
            Receive::Slices => {
                port.rx_burst(now, rx, 64);
                for mut frame in rx.drain(..) {
                    engine.handle_packet(now, frame.data_mut());
                    port.free(frame);
                }
            }
        }
    }
}

struct Outcome {
    /// Stats of the engine receiving the payloads (B for pushes, A for
    /// pulls).
    rx: EngineStats,
    delivered: u64,
    /// Its `allocated_buffers` after a quarter of the transactions, and at
    /// the end.
    allocated_warm: u64,
    allocated_end: u64,
    /// Buffers the pool handed out when drained at the end, and how many of
    /// them had the full frame capacity.
    pool_drained: usize,
    pool_full_size: usize,
}

impl Outcome {
    /// The spares were allocated while warming up (at most one per payload
    /// the ULP can hold at once, two windows' worth), then only recycled;
    /// the port's pool neither shrank nor grew: every buffer back, each
    /// with the whole frame capacity.
    fn assert_buffers_circulate(&self) {
        assert_eq!(
            self.allocated_end, self.allocated_warm,
            "no allocation once warm"
        );
        assert!(
            self.allocated_end <= 2 * WINDOW,
            "{} spares",
            self.allocated_end
        );
        assert_eq!((self.pool_drained, self.pool_full_size), (POOL, POOL));
    }

    /// Copies came from recycled vectors once warm; the pool is whole.
    fn assert_copies_recycled(&self) {
        assert_eq!(self.allocated_end, self.allocated_warm, "copies recycled");
        assert_eq!((self.pool_drained, self.pool_full_size), (POOL, POOL));
    }
}

/// The state both bulk drivers share: the engine pair over a loopback
/// with a `POOL`-buffer pool, the virtual clock, the burst vectors, the
/// transactions submitted and expected, and the turn count.
struct Bulk {
    a: Engine,
    b: Engine,
    ca: ConnectionHandle,
    cb: ConnectionHandle,
    pa: LoopbackPort,
    pb: LoopbackPort,
    config: LoopbackConfig,
    now: Timestamp,
    rx: Vec<FrameBuf>,
    tx: Vec<FrameBuf>,
    /// (tag, size) of every submitted transaction not yet seen, by RSN.
    expected: HashMap<u32, (u64, usize)>,
    submitted: u64,
    turns: u32,
    quiet: u32,
}

impl Bulk {
    fn new() -> Bulk {
        let (a, b, ca, cb) = engines();
        let config = LoopbackConfig {
            pool_size: POOL,
            ..LoopbackConfig::default()
        };
        let (pa, pb) = Loopback::pair(config);
        Bulk {
            a,
            b,
            ca,
            cb,
            pa,
            pb,
            config,
            now: Timestamp::from_micros(10),
            rx: Vec::new(),
            tx: Vec::new(),
            expected: HashMap::new(),
            submitted: 0,
            turns: 0,
            quiet: 0,
        }
    }

    /// Starts a turn (the clock 1 µs on) while transactions are
    /// outstanding, then 20 more for the last ACKs (every frame back in the
    /// pool); false when done.
    fn turn(&mut self, completed: u64, n: u64) -> bool {
        if completed >= n && self.quiet >= 20 {
            return false;
        }
        self.turns += 1;
        assert!(
            self.turns < 1_000_000,
            "no progress: {completed} of {n} completed"
        );
        if completed == n {
            self.quiet += 1;
        }
        self.now = self.now + Duration::from_micros(1);
        true
    }

    /// A submits up to `WINDOW` outstanding of `n` transactions, sizes
    /// cycling through `sizes`, `make(tag, size)` building each.
    fn submit(
        &mut self,
        n: u64,
        completed: u64,
        sizes: &[usize],
        make: impl Fn(u64, usize) -> Transaction,
    ) {
        while self.submitted < n && self.submitted - completed < WINDOW {
            let size = sizes[self.submitted as usize % sizes.len()];
            match self.a.submit(self.now, self.ca, make(self.submitted, size)) {
                Ok(rsn) => {
                    self.expected.insert(rsn.value(), (self.submitted, size));
                    self.submitted += 1;
                }
                Err(rejected) => {
                    assert!(matches!(rejected.reason, RejectReason::NoResources(_)));
                    break;
                }
            }
        }
    }

    /// Every transaction seen, nothing in flight: the outcome, with the
    /// receiving engine's (`B` for pushes, `A` for pulls) figures.
    fn finish(
        mut self,
        receiver_is_b: bool,
        delivered: u64,
        allocated_warm: Option<u64>,
    ) -> Outcome {
        assert!(self.expected.is_empty(), "every transaction seen");
        assert_eq!((self.pa.in_flight(), self.pb.in_flight()), (0, 0));
        let (pool_drained, pool_full_size) =
            drain_pool(&mut self.pa, &mut self.pb, self.config.frame_capacity);
        let receiver = if receiver_is_b { &self.b } else { &self.a };
        Outcome {
            rx: receiver.stats(),
            delivered,
            allocated_warm: allocated_warm.unwrap_or(0),
            allocated_end: receiver.allocated_buffers(),
            pool_drained,
            pool_full_size,
        }
    }
}

/// `n` pushes from A to B, sizes cycling through `sizes`, `WINDOW` in
/// flight. B's ULP checks every byte against what A submitted, ACKs and
/// recycles the payload; A recycles the completions.
fn pushes(sizes: &[usize], n: u64, receive: Receive) -> Outcome {
    let mut t = Bulk::new();
    let (mut completed, mut delivered) = (0u64, 0u64);
    let mut allocated_warm = None;
    while t.turn(completed, n) {
        t.submit(n, completed, sizes, |tag, size| {
            Transaction::push(tag, pattern(tag, size))
        });
        let now = t.now;
        t.a.receive_burst(now, &mut t.pa, &mut t.rx, 64);
        t.a.handle_timeout(now);
        while let Some(event) = t.a.poll_event() {
            if let UlpEvent::Completion(c) = event {
                assert!(c.status.is_ok(), "{c:?}");
                completed += 1;
                t.a.recycle(c.request);
            }
        }
        t.a.transmit_burst(now, &mut t.pa, &mut t.tx, usize::MAX);

        receive.run(&mut t.b, &mut t.pb, &mut t.rx, now);
        t.b.handle_timeout(now);
        while let Some(event) = t.b.poll_event() {
            let UlpEvent::Request(r) = event else {
                continue;
            };
            assert_eq!(r.kind, TransactionKind::Push);
            let (tag, size) = t
                .expected
                .remove(&r.rsn.value())
                .unwrap_or_else(|| panic!("{} delivered twice or never sent", r.rsn));
            assert_eq!(r.payload, pattern(tag, size), "push {tag} ({size} bytes)");
            t.b.ulp_ack(now, t.cb, r.rsn).expect("ULP ACK");
            t.b.recycle(r.payload);
            delivered += 1;
            if delivered == n / 4 {
                allocated_warm = Some(t.b.allocated_buffers());
            }
        }
        t.b.transmit_burst(now, &mut t.pb, &mut t.tx, usize::MAX);
        assert!(t.tx.is_empty(), "loopback line full");
    }
    t.finish(true, delivered, allocated_warm)
}

/// Allocates every buffer the pair's pool can give (both ends' caches,
/// the shared list, then new ones up to `pool_size`): all `POOL` of them
/// if none was lost. Returns (buffers, those of `capacity` bytes).
fn drain_pool(pa: &mut LoopbackPort, pb: &mut LoopbackPort, capacity: usize) -> (usize, usize) {
    let mut all = Vec::new();
    for port in [pa, pb] {
        while let Some(buf) = port.alloc() {
            all.push(buf);
        }
    }
    let full = all.iter().filter(|b| b.capacity() == capacity).count();
    (all.len(), full)
}

#[test]
fn large_pushes_are_received_zero_copy_and_buffers_circulate() {
    let n = 1_000;
    let out = pushes(&[4096], n, Receive::Burst);
    assert_eq!(out.delivered, n);
    assert_eq!(out.rx.transactions.requests_delivered, n);
    assert_eq!(
        out.rx.transactions.zero_copy_receives, n,
        "every 4 KiB push delivered in its frame's buffer"
    );
    assert_eq!(out.rx.drops.total(), 0);
    // The spares: allocated while warming up (at most one per push the
    // ULP can hold at once), then only recycled frames.
    out.assert_buffers_circulate();
}

#[test]
fn small_pushes_are_still_copied() {
    let n = 1_000;
    let out = pushes(&[64], n, Receive::Burst);
    assert_eq!(out.delivered, n);
    assert_eq!(out.rx.transactions.zero_copy_receives, 0);
    out.assert_copies_recycled();
}

#[test]
fn the_threshold_splits_copies_from_exchanges() {
    let n = 400;
    let out = pushes(
        &[ZERO_COPY_MIN_LEN - 1, ZERO_COPY_MIN_LEN],
        n,
        Receive::Burst,
    );
    assert_eq!(out.delivered, n);
    assert_eq!(out.rx.transactions.zero_copy_receives, n / 2);
    assert_eq!((out.pool_drained, out.pool_full_size), (POOL, POOL));
}

#[test]
fn frames_handed_in_as_slices_are_copied() {
    let n = 300;
    let out = pushes(&[4096], n, Receive::Slices);
    assert_eq!(out.delivered, n);
    assert_eq!(out.rx.transactions.zero_copy_receives, 0);
    assert_eq!((out.pool_drained, out.pool_full_size), (POOL, POOL));
}

/// The same frame twice, and a corrupted copy: the first is taken over,
/// the others are dropped before anything is stored and keep their
/// buffers.
#[test]
fn a_frame_is_taken_over_once_duplicates_and_corruption_keep_theirs() {
    let (mut a, mut b, ca, cb) = engines();
    let now = Timestamp::from_micros(10);
    a.submit(now, ca, Transaction::push(7, pattern(7, 4096)))
        .expect("submit");
    let mut frame = vec![0u8; 9216];
    let len = a.poll_transmit(now, &mut frame).expect("a push frame");
    let mut duplicate = frame.clone();
    let mut corrupted = frame.clone();
    corrupted[len / 2] ^= 0x10;

    let (original, copy, bad) = (frame.as_ptr(), duplicate.as_ptr(), corrupted.as_ptr());
    b.handle_frame(now, &mut corrupted, len);
    assert_eq!(
        corrupted.as_ptr(),
        bad,
        "a frame failing the ICV is not taken"
    );
    assert_eq!(
        b.stats()
            .drops
            .get(DropReason::Psp(psp::RxDrop::AuthFailed)),
        1
    );
    b.handle_frame(now, &mut frame, len);
    assert_ne!(frame.as_ptr(), original, "taken over");
    assert_eq!(frame.len(), 9216, "a frame-sized spare in its place");
    b.handle_frame(now, &mut duplicate, len);
    assert_eq!(duplicate.as_ptr(), copy, "a duplicate is not taken");

    let stats = b.stats();
    assert_eq!(stats.transactions.zero_copy_receives, 1);
    assert_eq!(stats.drops.total(), 2, "{:?}", stats.drops);
    let mut requests = Vec::new();
    while let Some(event) = b.poll_event() {
        if let UlpEvent::Request(r) = event {
            requests.push(r);
        }
    }
    assert_eq!(requests.len(), 1, "delivered once");
    let r = requests.pop().expect("one request");
    assert_eq!(r.payload, pattern(7, 4096));
    assert_eq!(
        r.payload.buffer().as_ptr(),
        original,
        "in the frame's buffer"
    );
    b.ulp_ack(now, cb, r.rsn).expect("ULP ACK");
    b.recycle(r.payload);
    assert_eq!(b.cached_frame_buffers(), 1, "the frame is a spare now");
}

/// Exactly once under loss, duplication and reordering with the target
/// taking frames over (the harness receives with `receive_burst` and
/// checks every byte, delivery and completion): each push is stored, and
/// taken over, once; so is each Pull Data the other way.
#[test]
fn exactly_once_with_taken_frames_under_faults() {
    let mut pair = Pair::new(Setup {
        faults: faults(3, 3, 5),
        seed: 61,
        ..Setup::default()
    });
    let pushes = 200;
    for _ in 0..pushes {
        pair.queue(0, 0, TransactionKind::Push, 4096);
    }
    for _ in 0..50 {
        pair.queue(1, 0, TransactionKind::Pull, 4096);
    }
    pair.run_to_completion(Duration::from_secs(2));
    pair.assert_all_ok(0);
    pair.assert_all_ok(1);
    let (a, b) = (pair.nodes[0].engine.stats(), pair.nodes[1].engine.stats());
    assert!(pair.nodes[0].port.stats().duplicated > 0, "duplicates sent");
    assert!(
        b.drops.get(DropReason::DuplicatePacket) > 0,
        "duplicates reached the target and were dropped"
    );
    assert_eq!(b.transactions.requests_delivered, pushes);
    assert_eq!(
        b.transactions.zero_copy_receives, pushes,
        "one frame taken per push, duplicates none"
    );
    assert_eq!(a.transactions.zero_copy_receives, 0, "pull requests copied");
    assert_eq!(
        b.transactions.zero_copy_pull_data, 50,
        "Pull Data taken once"
    );
    assert_eq!(a.transactions.zero_copy_pull_data, 0);
}

/// `n` pulls by A from B, sizes cycling through `sizes`, `WINDOW` in
/// flight, A taking its frames in as `receive` says. B's ULP serves each
/// pull with `pattern(rsn, size)`; A's ULP checks every byte of the Pull
/// Data and the tag, and recycles the data and the request.
fn pulls(sizes: &[usize], n: u64, receive: Receive) -> Outcome {
    let mut t = Bulk::new();
    // Pull Data B's ULP could not submit yet (no credits), retried.
    let mut deferred: Vec<(Rsn, Vec<u8>)> = Vec::new();
    let mut completed = 0u64;
    let mut allocated_warm = None;
    while t.turn(completed, n) {
        t.submit(n, completed, sizes, |tag, size| {
            Transaction::pull(tag, size as u16, Vec::new())
        });
        let now = t.now;
        receive.run(&mut t.a, &mut t.pa, &mut t.rx, now);
        t.a.handle_timeout(now);
        while let Some(event) = t.a.poll_event() {
            let UlpEvent::Completion(c) = event else {
                continue;
            };
            assert!(c.status.is_ok(), "{c:?}");
            let (tag, size) = t
                .expected
                .remove(&c.rsn.value())
                .unwrap_or_else(|| panic!("{} completed twice or never sent", c.rsn));
            assert_eq!(c.tag, tag);
            assert_eq!(
                c.data,
                pattern(u64::from(c.rsn.value()), size),
                "pull {tag} ({size} bytes)"
            );
            completed += 1;
            if completed == n / 4 {
                allocated_warm = Some(t.a.allocated_buffers());
            }
            t.a.recycle(c.data);
            t.a.recycle(c.request);
        }
        t.a.transmit_burst(now, &mut t.pa, &mut t.tx, usize::MAX);

        t.b.receive_burst(now, &mut t.pb, &mut t.rx, 64);
        t.b.handle_timeout(now);
        while let Some(event) = t.b.poll_event() {
            let UlpEvent::Request(r) = event else {
                continue;
            };
            assert_eq!(r.kind, TransactionKind::Pull);
            let data = pattern(u64::from(r.rsn.value()), usize::from(r.request_length));
            deferred.push((r.rsn, data));
            t.b.recycle(r.payload);
        }
        for (rsn, data) in core::mem::take(&mut deferred) {
            if let Err(rejected) = t.b.submit_pull_data(now, t.cb, rsn, data) {
                assert!(matches!(rejected.reason, RejectReason::NoResources(_)));
                deferred.push((rsn, rejected.payload));
            }
        }
        t.b.transmit_burst(now, &mut t.pb, &mut t.tx, usize::MAX);
        assert!(t.tx.is_empty(), "loopback line full");
    }
    t.finish(false, completed, allocated_warm)
}

#[test]
fn large_pull_data_is_received_zero_copy_and_buffers_circulate() {
    let n = 1_000;
    let out = pulls(&[4096], n, Receive::Burst);
    assert_eq!(out.delivered, n);
    assert_eq!(out.rx.transactions.completed_ok(), n);
    assert_eq!(
        out.rx.transactions.zero_copy_pull_data, n,
        "every 4 KiB Pull Data completed in its frame's buffer"
    );
    assert_eq!(out.rx.transactions.zero_copy_receives, 0, "no pushes");
    assert_eq!(out.rx.drops.total(), 0);
    out.assert_buffers_circulate();
}

#[test]
fn pull_data_threshold_splits_copies_from_exchanges() {
    let n = 400;
    let out = pulls(
        &[ZERO_COPY_MIN_LEN - 1, ZERO_COPY_MIN_LEN, 64],
        n - n % 3,
        Receive::Burst,
    );
    assert_eq!(out.rx.transactions.zero_copy_pull_data, n / 3);
    out.assert_copies_recycled();
}

#[test]
fn pull_data_handed_in_as_slices_is_copied() {
    let n = 300;
    let out = pulls(&[4096], n, Receive::Slices);
    assert_eq!(out.delivered, n);
    assert_eq!(out.rx.transactions.zero_copy_pull_data, 0);
    out.assert_copies_recycled();
}

/// Exactly once under loss, duplication and reordering with the initiator
/// taking Pull Data frames over (the harness checks every byte and that
/// each pull completes once, in RSN order when ordered): each Pull Data is
/// stored, and taken over, once.
#[test]
fn pull_data_exactly_once_with_taken_frames_under_faults() {
    for (ordering, seed) in [(OrderingMode::Ordered, 62), (OrderingMode::Unordered, 63)] {
        let mut pair = Pair::new(Setup {
            faults: faults(3, 3, 5),
            ordering,
            seed,
            ..Setup::default()
        });
        let pulls = 200;
        for _ in 0..pulls {
            pair.queue(0, 0, TransactionKind::Pull, 4096);
        }
        for _ in 0..50 {
            pair.queue(1, 0, TransactionKind::Push, 4096);
        }
        pair.run_to_completion(Duration::from_secs(2));
        pair.assert_all_ok(0);
        pair.assert_all_ok(1);
        let (a, b) = (pair.nodes[0].engine.stats(), pair.nodes[1].engine.stats());
        assert!(pair.nodes[1].port.stats().duplicated > 0, "duplicates sent");
        assert!(
            a.drops.get(DropReason::DuplicatePacket) > 0,
            "duplicates reached the initiator and were dropped"
        );
        assert_eq!(a.transactions.completed_ok(), pulls);
        assert_eq!(
            a.transactions.zero_copy_pull_data, pulls,
            "{ordering:?}: one frame taken per Pull Data, duplicates none"
        );
        assert_eq!(a.transactions.zero_copy_receives, 50, "pushes taken too");
        assert_eq!(b.transactions.zero_copy_pull_data, 0);
    }
}

/// A frame and its length.
type Frame = (Vec<u8>, usize);

/// Every frame `engine` has to send now, each in its own frame-sized
/// buffer.
fn transmit_all(engine: &mut Engine, now: Timestamp) -> Vec<Frame> {
    let mut frames = Vec::new();
    loop {
        let mut frame = vec![0u8; 9216];
        match engine.poll_transmit(now, &mut frame) {
            Some(len) => frames.push((frame, len)),
            None => return frames,
        }
    }
}

/// A's pulls of `sizes` bytes, their Pull Requests delivered to B. Returns
/// B's requests in RSN order.
fn pull_requests(
    a: &mut Engine,
    b: &mut Engine,
    ca: ConnectionHandle,
    now: Timestamp,
    sizes: &[u16],
) -> Vec<Request> {
    for (tag, &size) in sizes.iter().enumerate() {
        a.submit(now, ca, Transaction::pull(tag as u64, size, Vec::new()))
            .expect("submit");
    }
    for (mut frame, len) in transmit_all(a, now) {
        b.handle_frame(now, &mut frame, len);
    }
    let mut requests = Vec::new();
    while let Some(event) = b.poll_event() {
        if let UlpEvent::Request(r) = event {
            requests.push(r);
        }
    }
    assert_eq!(requests.len(), sizes.len());
    requests
}

/// B serves `request` with `pattern(rsn, length)`; the frames it sends then
/// (the Pull Data, and any ACK), and the index of the Pull Data (the
/// longest).
fn serve(
    b: &mut Engine,
    cb: ConnectionHandle,
    now: Timestamp,
    request: &Request,
) -> (Vec<Frame>, usize) {
    let data = pattern(
        u64::from(request.rsn.value()),
        usize::from(request.request_length),
    );
    b.submit_pull_data(now, cb, request.rsn, data)
        .expect("Pull Data");
    let frames = transmit_all(b, now);
    let data = (0..frames.len())
        .max_by_key(|&i| frames[i].1)
        .expect("B sent something");
    (frames, data)
}

fn completions(engine: &mut Engine) -> Vec<Completion> {
    let mut done = Vec::new();
    while let Some(event) = engine.poll_event() {
        if let UlpEvent::Completion(c) = event {
            done.push(c);
        }
    }
    done
}

/// The Pull Data frame is taken over once: a corrupted copy before it and
/// a duplicate after it are dropped before anything is stored and keep
/// their buffers; the completion's data is the frame's own buffer, which
/// becomes a spare once recycled.
#[test]
fn a_pull_data_frame_is_taken_over_once_duplicates_and_corruption_keep_theirs() {
    let (mut a, mut b, ca, cb) = engines();
    let now = Timestamp::from_micros(10);
    let requests = pull_requests(&mut a, &mut b, ca, now, &[4096]);
    let (mut frames, i) = serve(&mut b, cb, now, &requests[0]);
    let (mut frame, len) = core::mem::take(&mut frames[i]);
    let mut duplicate = frame.clone();
    let mut corrupted = frame.clone();
    corrupted[len / 2] ^= 0x10;
    let (original, copy, bad) = (frame.as_ptr(), duplicate.as_ptr(), corrupted.as_ptr());

    a.handle_frame(now, &mut corrupted, len);
    assert_eq!(
        corrupted.as_ptr(),
        bad,
        "a frame failing the ICV is not taken"
    );
    for (mut other, len) in frames.into_iter().filter(|f| f.1 > 0) {
        a.handle_frame(now, &mut other, len);
    }
    a.handle_frame(now, &mut frame, len);
    assert_ne!(frame.as_ptr(), original, "taken over");
    assert_eq!(frame.len(), 9216, "a frame-sized spare in its place");
    a.handle_frame(now, &mut duplicate, len);
    assert_eq!(duplicate.as_ptr(), copy, "a duplicate is not taken");

    let stats = a.stats();
    assert_eq!(stats.transactions.zero_copy_pull_data, 1);
    // The Pull Data moved the data window's base on: its duplicate is
    // behind it.
    assert_eq!(stats.drops.get(DropReason::StalePacket), 1);
    assert_eq!(stats.drops.total(), 2, "{:?}", stats.drops);
    let mut done = completions(&mut a);
    assert_eq!(done.len(), 1, "completed once");
    let c = done.pop().expect("one completion");
    assert_eq!(c.status, CompletionStatus::Ack);
    assert_eq!(c.data, pattern(u64::from(c.rsn.value()), 4096));
    assert_eq!(c.data.buffer().as_ptr(), original, "in the frame's buffer");
    a.recycle(c.data);
    assert_eq!(a.cached_frame_buffers(), 1, "the frame is a spare now");
}

/// Ordered: Pull Data arriving ahead of its turn takes its frame and is
/// held there (no completion) until the pulls before it complete, then all
/// complete in RSN order, each in its own frame's buffer.
#[test]
fn pull_data_out_of_rsn_order_is_held_in_its_frame_until_its_turn() {
    let (mut a, mut b, ca, cb) = engines();
    let now = Timestamp::from_micros(10);
    let requests = pull_requests(&mut a, &mut b, ca, now, &[4096, 2048, 1024]);
    let mut served: Vec<(Vec<Frame>, usize)> =
        requests.iter().map(|r| serve(&mut b, cb, now, r)).collect();
    // A duplicate of the last Pull Data, arriving while it is held.
    let (mut duplicate, dup_len) = served[2].0[served[2].1].clone();
    let mut ptrs = Vec::new();
    for (k, (frames, i)) in served.iter_mut().enumerate().rev() {
        ptrs.push(frames[*i].0.as_ptr());
        for (j, (frame, len)) in frames.iter_mut().enumerate() {
            let ptr = frame.as_ptr();
            a.handle_frame(now, frame, *len);
            assert_eq!(frame.as_ptr() != ptr, j == *i, "only the Pull Data taken");
        }
        if k == 2 {
            let ptr = duplicate.as_ptr();
            a.handle_frame(now, &mut duplicate, dup_len);
            assert_eq!(duplicate.as_ptr(), ptr, "a duplicate is not taken");
            assert_eq!(a.stats().drops.get(DropReason::DuplicatePacket), 1);
        }
        if k > 0 {
            assert!(completions(&mut a).is_empty(), "RSN {k} held for its turn");
        }
    }
    ptrs.reverse();
    let done = completions(&mut a);
    assert_eq!(done.len(), 3);
    for (k, c) in done.iter().enumerate() {
        assert_eq!(c.rsn, requests[k].rsn, "RSN order");
        assert_eq!(c.status, CompletionStatus::Ack);
        let len = usize::from(requests[k].request_length);
        assert_eq!(c.data, pattern(u64::from(c.rsn.value()), len));
        assert_eq!(c.data.buffer().as_ptr(), ptrs[k], "in its frame");
    }
    assert_eq!(a.stats().transactions.zero_copy_pull_data, 3);
    assert_eq!(a.stats().drops.total(), 1, "the duplicate");
}

/// The connection closes while Pull Data is held for its turn: the pull
/// before it completes with kCmplDeadConn, the held one completes once
/// with its data (already received) in its frame, which the ULP can
/// recycle; nothing panics and nothing else holds the frame.
#[test]
fn closing_a_connection_with_held_pull_data_neither_leaks_nor_panics() {
    let (mut a, mut b, ca, cb) = engines();
    let now = Timestamp::from_micros(10);
    let requests = pull_requests(&mut a, &mut b, ca, now, &[4096, 4096]);
    let (mut frames, i) = serve(&mut b, cb, now, &requests[1]);
    let held = frames[i].0.as_ptr();
    for (frame, len) in frames.iter_mut() {
        a.handle_frame(now, frame, *len);
    }
    assert!(completions(&mut a).is_empty(), "held behind RSN 0");
    assert_eq!(a.stats().transactions.zero_copy_pull_data, 1);

    a.close(now, ca);
    let done = completions(&mut a);
    let statuses: Vec<_> = done.iter().map(|c| (c.rsn, c.status)).collect();
    assert_eq!(
        statuses,
        vec![
            (requests[0].rsn, CompletionStatus::DeadConnection),
            (requests[1].rsn, CompletionStatus::Ack),
        ]
    );
    assert!(done[0].data.is_empty());
    assert_eq!(
        done[1].data,
        pattern(u64::from(requests[1].rsn.value()), 4096)
    );
    assert_eq!(done[1].data.buffer().as_ptr(), held);
    for c in done {
        a.recycle(c.data);
    }
    assert_eq!(a.cached_frame_buffers(), 1, "the held frame came back");

    // The Pull Data for the failed pull arrives after the close: dropped
    // before anything looks at it, its frame kept.
    let (mut frames, i) = serve(&mut b, cb, now, &requests[0]);
    let (frame, len) = &mut frames[i];
    let ptr = frame.as_ptr();
    a.handle_frame(now, frame, *len);
    assert_eq!(frame.as_ptr(), ptr, "not taken");
    assert_eq!(a.stats().transactions.zero_copy_pull_data, 1);
    assert!(completions(&mut a).is_empty());
}

/// Pull Data for a pull that already completed (timed out): acknowledged
/// and dropped as unmatched, its frame kept, no second completion.
#[test]
fn pull_data_for_a_completed_pull_keeps_its_frame() {
    let (mut a, mut b, ca, cb) = engines();
    let now = Timestamp::from_micros(10);
    let requests = pull_requests(&mut a, &mut b, ca, now, &[4096]);
    let (mut frames, _) = serve(&mut b, cb, now, &requests[0]);
    let later = now + Duration::from_millis(1_100);
    a.handle_timeout(later);
    let done = completions(&mut a);
    assert_eq!(done.len(), 1);
    assert_eq!(done[0].status, CompletionStatus::LocalTimeout);

    let ptrs: Vec<_> = frames.iter().map(|f| f.0.as_ptr()).collect();
    for (frame, len) in frames.iter_mut() {
        a.handle_frame(later, frame, *len);
    }
    let kept: Vec<_> = frames.iter().map(|f| f.0.as_ptr()).collect();
    assert_eq!(kept, ptrs, "nothing taken");
    let stats = a.stats();
    assert_eq!(
        stats.drops.get(DropReason::UnmatchedPullData),
        1,
        "{:?}",
        stats.drops
    );
    assert_eq!(stats.transactions.zero_copy_pull_data, 0);
    assert!(completions(&mut a).is_empty(), "no second completion");
}

/// The target ULP completes a pull in error (CIE): a zero-length Pull Data
/// (§8.5.3.5), which completes the pull with kCmplTargetCIE and takes no
/// frame.
#[test]
fn a_zero_length_pull_data_completes_in_error_and_takes_no_frame() {
    let (mut a, mut b, ca, cb) = engines();
    let now = Timestamp::from_micros(10);
    let requests = pull_requests(&mut a, &mut b, ca, now, &[4096]);
    let nack = UlpNack::CompletionInError { ulp_nack_code: 9 };
    b.ulp_nack(now, cb, requests[0].rsn, nack).expect("CIE");
    let mut frames = transmit_all(&mut b, now);
    assert!(!frames.is_empty());
    let ptrs: Vec<_> = frames.iter().map(|f| f.0.as_ptr()).collect();
    for (frame, len) in frames.iter_mut() {
        a.handle_frame(now, frame, *len);
    }
    let kept: Vec<_> = frames.iter().map(|f| f.0.as_ptr()).collect();
    assert_eq!(kept, ptrs, "nothing taken");
    let done = completions(&mut a);
    assert_eq!(done.len(), 1);
    assert_eq!(done[0].status, CompletionStatus::TargetCompletionInError);
    assert!(done[0].data.is_empty());
    assert_eq!(a.stats().transactions.zero_copy_pull_data, 0);
    assert_eq!(a.stats().drops.total(), 0);
}
