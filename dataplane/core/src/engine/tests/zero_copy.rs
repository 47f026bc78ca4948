//! Zero-copy receive end to end: two engines over the loopback, PSP on,
//! the target taking large pushes' frame buffers over (`handle_frame`
//! through `receive_burst`) while the port's pool keeps its size and the
//! engine stops allocating once warm; small pushes and plain slices still
//! copied; duplicates, corrupted frames, loss and reordering still leave
//! exactly one delivery per push.

use std::collections::HashMap;

use core::time::Duration;

use psp::{MasterKey, MasterKeys};

use super::faults;
use super::harness::{pattern, Pair, Setup};
use crate::drop::DropReason;
use crate::engine::PspConfig;
use crate::engine::{connect, ConnectionHandle, Engine, EngineConfig, EngineStats, PairSpec};
use crate::port::{FrameBuf, Loopback, LoopbackConfig, LoopbackPort, PacketBuf, Port};
use crate::time::Timestamp;
use crate::transaction::{RejectReason, Transaction, TransactionKind, UlpEvent, ZERO_COPY_MIN_LEN};
use crate::wire::EthernetAddress;

/// The loopback pair's buffers (small, so reuse is exercised).
const POOL: usize = 512;
/// Pushes in flight.
const WINDOW: u64 = 64;

fn engines() -> (Engine, Engine, ConnectionHandle, ConnectionHandle) {
    let now = Timestamp::from_micros(1);
    let keys = |k: u8| MasterKeys {
        k0: MasterKey::new([k; 32]),
        k1: MasterKey::new([k ^ 0xFF; 32]),
    };
    let config = |ip: [u8; 4], mac: u8, k: u8| EngineConfig {
        local_ip: core::net::IpAddr::V4(ip.into()),
        local_mac: EthernetAddress([2, 0, 0, 0, 0, mac]),
        psp: Some(PspConfig::new(keys(k))),
        ..EngineConfig::default()
    };
    let mut a = Engine::new(config([10, 0, 0, 1], 1, 1), now).expect("engine A");
    let mut b = Engine::new(config([10, 0, 0, 2], 2, 3), now).expect("engine B");
    let (ca, cb) = connect(now, &mut a, &mut b, &PairSpec::default()).expect("connect");
    (a, b, ca, cb)
}

/// How B takes its frames in.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Receive {
    /// `receive_burst`: `handle_frame` on the loopback's heap buffers.
    Burst,
    /// `handle_packet` on each frame's bytes (a port without `vec_mut`).
    Slices,
}

struct Outcome {
    b: EngineStats,
    delivered: u64,
    /// B's `allocated_buffers` after a quarter of the pushes, and at the end.
    allocated_warm: u64,
    allocated_end: u64,
    /// Buffers the pool handed out when drained at the end, and how many of
    /// them had the full frame capacity.
    pool_drained: usize,
    pool_full_size: usize,
}

/// `n` pushes from A to B, sizes cycling through `sizes`, `WINDOW` in
/// flight. B's ULP checks every byte against what A submitted, ACKs and
/// recycles the payload; A recycles the completions.
fn pushes(sizes: &[usize], n: u64, receive: Receive) -> Outcome {
    let (mut a, mut b, ca, cb) = engines();
    let config = LoopbackConfig {
        pool_size: POOL,
        ..LoopbackConfig::default()
    };
    let (mut pa, mut pb) = Loopback::pair(config);
    let mut now = Timestamp::from_micros(10);
    let (mut rx, mut tx): (Vec<FrameBuf>, Vec<FrameBuf>) = (Vec::new(), Vec::new());
    let mut expected: HashMap<u32, (u64, usize)> = HashMap::new();
    let (mut submitted, mut completed, mut delivered) = (0u64, 0u64, 0u64);
    let mut allocated_warm = None;
    let mut turns = 0;
    // Until every push completed, then a little longer for the last ACKs
    // (every frame back in the pool).
    let mut quiet = 0;
    while completed < n || quiet < 20 {
        turns += 1;
        assert!(
            turns < 1_000_000,
            "no progress: {completed} of {n} completed"
        );
        if completed == n {
            quiet += 1;
        }
        now = now + Duration::from_micros(1);
        while submitted < n && submitted - completed < WINDOW {
            let size = sizes[submitted as usize % sizes.len()];
            match a.submit(
                now,
                ca,
                Transaction::push(submitted, pattern(submitted, size)),
            ) {
                Ok(rsn) => {
                    expected.insert(rsn.value(), (submitted, size));
                    submitted += 1;
                }
                Err(rejected) => {
                    assert!(matches!(rejected.reason, RejectReason::NoResources(_)));
                    break;
                }
            }
        }
        a.receive_burst(now, &mut pa, &mut rx, 64);
        a.handle_timeout(now);
        while let Some(event) = a.poll_event() {
            if let UlpEvent::Completion(c) = event {
                assert!(c.status.is_ok(), "{c:?}");
                completed += 1;
                a.recycle(c.request);
            }
        }
        a.transmit_burst(now, &mut pa, &mut tx);

        match receive {
            Receive::Burst => {
                b.receive_burst(now, &mut pb, &mut rx, 64);
            }
            Receive::Slices => {
                pb.rx_burst(now, &mut rx, 64);
                for mut frame in rx.drain(..) {
                    b.handle_packet(now, frame.data_mut());
                    pb.free(frame);
                }
            }
        }
        b.handle_timeout(now);
        while let Some(event) = b.poll_event() {
            let UlpEvent::Request(r) = event else {
                continue;
            };
            assert_eq!(r.kind, TransactionKind::Push);
            let (tag, size) = expected
                .remove(&r.rsn.value())
                .unwrap_or_else(|| panic!("{} delivered twice or never sent", r.rsn));
            assert_eq!(r.payload, pattern(tag, size), "push {tag} ({size} bytes)");
            b.ulp_ack(now, cb, r.rsn).expect("ULP ACK");
            b.recycle(r.payload);
            delivered += 1;
            if delivered == n / 4 {
                allocated_warm = Some(b.allocated_buffers());
            }
        }
        b.transmit_burst(now, &mut pb, &mut tx);
        assert!(tx.is_empty(), "loopback line full");
    }
    assert!(expected.is_empty(), "every push delivered");
    assert_eq!((pa.in_flight(), pb.in_flight()), (0, 0));
    let (pool_drained, pool_full_size) = drain_pool(&mut pa, &mut pb, config.frame_capacity);
    Outcome {
        b: b.stats(),
        delivered,
        allocated_warm: allocated_warm.unwrap_or(0),
        allocated_end: b.allocated_buffers(),
        pool_drained,
        pool_full_size,
    }
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
    assert_eq!(out.b.transactions.requests_delivered, n);
    assert_eq!(
        out.b.transactions.zero_copy_receives, n,
        "every 4 KiB push delivered in its frame's buffer"
    );
    assert_eq!(out.b.drops.total(), 0);
    // The spares: allocated while warming up (at most one per push the
    // ULP can hold at once), then only recycled frames.
    assert_eq!(
        out.allocated_end, out.allocated_warm,
        "no allocation once warm"
    );
    assert!(
        out.allocated_end <= 2 * WINDOW,
        "{} spares",
        out.allocated_end
    );
    // The port's pool neither shrank nor grew: every buffer back, each
    // with the whole frame capacity.
    assert_eq!((out.pool_drained, out.pool_full_size), (POOL, POOL));
}

#[test]
fn small_pushes_are_still_copied() {
    let n = 1_000;
    let out = pushes(&[64], n, Receive::Burst);
    assert_eq!(out.delivered, n);
    assert_eq!(out.b.transactions.zero_copy_receives, 0);
    assert_eq!(out.allocated_end, out.allocated_warm, "copies recycled");
    assert_eq!((out.pool_drained, out.pool_full_size), (POOL, POOL));
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
    assert_eq!(out.b.transactions.zero_copy_receives, n / 2);
    assert_eq!((out.pool_drained, out.pool_full_size), (POOL, POOL));
}

#[test]
fn frames_handed_in_as_slices_are_copied() {
    let n = 300;
    let out = pushes(&[4096], n, Receive::Slices);
    assert_eq!(out.delivered, n);
    assert_eq!(out.b.transactions.zero_copy_receives, 0);
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
/// taken over, once; Pull Data the other way is still copied.
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
}
