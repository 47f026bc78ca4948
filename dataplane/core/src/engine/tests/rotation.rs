//! PSP key rotation on running engines (OCP Falcon 0.9 §9.2.2.3 CM steps;
//! spec/psp.md §4): traffic across rotations, the old SPI's fate at each
//! step, step-order errors, IVs across the SA switch, Remote Time re-seeded
//! at rotation (§9.2.2.2).

use crate::port::FrameBuf;
use core::time::Duration;

use psp::{Header, MasterKey, RxDrop, Version};

use crate::drop::DropReason;
use crate::engine::{rekey_pair, ConnectionHandle, Engine, EngineConfig, RotationError};
use crate::testing::Faults;
use crate::testing::{Cluster, Setup};
use crate::time::Timestamp;
use crate::transaction::{Transaction, UlpEvent};
use crate::wire::frame::parse_with;
use crate::wire::ChecksumChecks;

/// Steps 1–3 on both nodes of the pair, for every connection.
fn rotate(pair: &mut Cluster, key_seed: u8) {
    for (side, node) in pair.nodes.iter_mut().enumerate() {
        let seed = key_seed.wrapping_add(side as u8);
        node.engine
            .begin_key_rotation(MasterKey::new([seed; 32]))
            .expect("begin");
    }
    let [a, b] = &mut pair.nodes[..] else {
        unreachable!("a pair")
    };
    for (&ha, &hb) in a.conns.iter().zip(&b.conns) {
        rekey_pair(
            pair.now,
            &mut a.engine,
            &mut b.engine,
            (ha, hb),
            Version::Aes128Gcm,
        )
        .expect("rekey");
    }
}

fn spi_drops(engine: &Engine) -> u64 {
    let drops = engine.stats().drops;
    drops.get(DropReason::Psp(RxDrop::SpiMismatch))
        + drops.get(DropReason::Psp(RxDrop::UnknownSa))
        + drops.get(DropReason::Psp(RxDrop::AuthFailed))
}

/// Two full rotations (the second evicts the first key) in the middle of
/// two-way traffic over a lossy, reordering link: every transaction
/// completes exactly once with its data (the cluster verifies payloads),
/// whatever was sealed with a retired SPI is dropped by name and recovered
/// by retransmission.
#[test]
fn traffic_survives_two_rotations_under_loss() {
    let mut pair = Cluster::new(Setup {
        connections: 3,
        faults: Faults {
            loss_ppm: 10_000,
            reorder_ppm: 20_000,
            ..Faults::default()
        },
        ..Setup::default()
    });
    pair.queue_random(0, 300, 2000);
    pair.queue_random(1, 300, 2000);
    let total = pair.unfinished();
    for round in 0..2u8 {
        // Let a third of the work through, then rotate with traffic in
        // flight.
        let until = total - total * (usize::from(round) + 1) / 3;
        pair.drive(Duration::from_secs(2), |p| p.unfinished() <= until);
        rotate(&mut pair, 0x40 + 2 * round);
        for node in &pair.nodes {
            assert!(node.engine.connections_to_rekey().is_empty());
            assert_eq!(
                node.engine.key_generation(),
                Some((psp::SpiGeneration(u32::from(round) + 1), true))
            );
        }
        // A few RTTs with both SPIs accepted, then steps 4 and 5.
        let later = pair.now + Duration::from_micros(200);
        pair.drive(Duration::from_secs(1), |p| {
            p.now >= later || p.unfinished() == 0
        });
        for node in &mut pair.nodes {
            node.engine.retire_previous_spis();
            node.engine.end_key_rotation().expect("all rekeyed");
        }
    }
    pair.run_to_completion(Duration::from_secs(5));
    for side in 0..2 {
        pair.assert_all_ok(side);
        let stats = pair.nodes[side].engine.stats();
        assert_eq!(stats.key_rotations, 2);
        assert_eq!(stats.drops.get(DropReason::Psp(RxDrop::Replay)), 0);
    }
}

/// Two engines, one connection, no link: frames move by hand.
pub(super) struct Bench {
    pub(super) a: Engine,
    pub(super) b: Engine,
    pub(super) ca: ConnectionHandle,
    pub(super) cb: ConnectionHandle,
    pub(super) now: Timestamp,
}

impl Bench {
    pub(super) fn new() -> Bench {
        let now = Timestamp::from_micros(1_000);
        let (a, b, ca, cb) = super::psp_pair(now);
        Bench { a, b, ca, cb, now }
    }

    /// A submits a push; returns the data frame it sends.
    pub(super) fn push_frame(&mut self, tag: u64) -> Vec<u8> {
        self.now = self.now + Duration::from_micros(10);
        self.a
            .submit(
                self.now,
                self.ca,
                Transaction::push(tag, vec![tag as u8; 100]),
            )
            .unwrap();
        let mut buf = vec![0u8; self.a.max_frame_len()];
        let len = self
            .a
            .poll_transmit_into(self.now, &mut buf)
            .expect("a data frame");
        buf.truncate(len);
        buf
    }

    /// Hands `frame` to B, acknowledges what its ULP got; returns how many
    /// requests B's ULP saw.
    pub(super) fn deliver_to_b(&mut self, frame: &[u8]) -> usize {
        let copy = frame.to_vec();
        let _ = self
            .b
            .handle_packet(self.now, FrameBuf::from_frame(&copy, 0));
        let mut seen = 0;
        while let Some(event) = self.b.poll_event() {
            if let UlpEvent::Request(r) = event {
                self.b.ulp_ack(self.now, self.cb, r.rsn).unwrap();
                seen += 1;
            }
        }
        seen
    }
}

/// The PSP SPI and IV of a frame this engine sent.
fn spi_iv(frame: &[u8]) -> (u32, u64) {
    let parsed = parse_with(frame, ChecksumChecks::ALL).expect("frame");
    let psp = Header::new_checked(&frame[parsed.layers.payload]).expect("PSP header");
    (psp.spi().0, psp.iv())
}

/// The old SPI at each step: accepted after steps 1–3 (AllowPrevGen),
/// refused by name after step 4, and after a second rotation its key is
/// gone altogether. The new SA's IVs continue the old one's.
#[test]
fn old_spi_passes_until_retired_then_is_dropped_by_name() {
    let mut t = Bench::new();
    let before = t.push_frame(1);
    let replay_later = t.push_frame(2);
    assert_eq!(t.deliver_to_b(&before), 1);

    t.b.begin_key_rotation(MasterKey::new([0x77; 32])).unwrap();
    let (spi, key) = t.b.rekey_receive(t.now, t.cb, Version::Aes128Gcm).unwrap();
    // A still sends with the old SA: accepted via the previous SPI.
    assert_eq!(t.deliver_to_b(&replay_later), 1);
    t.a.install_transmit_sa(t.ca, spi, &key).unwrap();
    let after = t.push_frame(3);
    let (old_spi, old_iv) = spi_iv(&replay_later);
    let (new_spi, new_iv) = spi_iv(&after);
    assert_eq!(new_spi, spi.0);
    assert_ne!(new_spi, old_spi);
    assert_ne!(
        new_spi >> 31,
        old_spi >> 31,
        "new SPIs come from the other master key"
    );
    assert!(new_iv > old_iv, "IVs keep increasing across the SA switch");
    assert_eq!(t.deliver_to_b(&after), 1);

    // Step 4: the previous SPI stops passing; no ACK or NACK for it.
    t.b.retire_previous_spis();
    let old_again = t.push_frame(4);
    // Forge what an attacker replaying an old-SPI frame would send: the
    // captured frame of tag 2 once more.
    let spi_before = t.b.stats().drops.get(DropReason::Psp(RxDrop::SpiMismatch));
    assert_eq!(t.deliver_to_b(&replay_later), 0);
    assert_eq!(
        t.b.stats().drops.get(DropReason::Psp(RxDrop::SpiMismatch)),
        spi_before + 1
    );
    assert_eq!(t.deliver_to_b(&old_again), 1, "the current SA still works");
    t.b.end_key_rotation().unwrap();

    // A second rotation evicts the first master key: the frame sealed
    // under it no longer authenticates at all.
    t.b.begin_key_rotation(MasterKey::new([0x99; 32])).unwrap();
    let unauth_before = spi_drops(&t.b);
    assert_eq!(t.deliver_to_b(&before), 0);
    assert_eq!(spi_drops(&t.b), unauth_before + 1);
    assert_eq!(t.b.stats().key_rotations, 2);
}

/// Drops of B counted as replays.
fn replays(engine: &Engine) -> u64 {
    engine.stats().drops.get(DropReason::Psp(RxDrop::Replay))
}

/// OCP Falcon 0.9 §9.2.2.2: at rotation the CM re-seeds Remote Time from
/// the estimate of the transmitter's time. After a second of silence, a
/// frame sent before it and delayed, still under the allowed previous SPI,
/// passes the replay check of the old Remote Time; once B has rekeyed
/// (step 2) it is refused as a replay, as it would be behind newer traffic.
/// A frame sent just before the rotation and the first under the new SA
/// pass either way.
#[test]
fn rekey_reseeds_remote_time_from_the_transmitters_clock() {
    // The same deterministic run with and without B's step 2: (replays of
    // the delayed frame, of the recent one, of the first under the new SA).
    let run = |rekey: bool| {
        let mut t = Bench::new();
        // Silent since setup too: the estimate counts from the last packet
        // received, not from the seeding at setup.
        t.now = t.now + Duration::from_secs(1);
        let first = t.push_frame(1);
        let delayed = t.push_frame(2);
        assert_eq!(t.deliver_to_b(&first), 1);
        t.now = t.now + Duration::from_secs(1);
        let recent = t.push_frame(3);
        t.now = t.now + Duration::from_micros(10);
        t.b.begin_key_rotation(MasterKey::new([0x55; 32])).unwrap();
        if rekey {
            let (spi, key) = t.b.rekey_receive(t.now, t.cb, Version::Aes128Gcm).unwrap();
            t.a.install_transmit_sa(t.ca, spi, &key).unwrap();
        }
        let mut refused = [0; 3];
        for (i, frame) in [delayed, recent].iter().enumerate() {
            let before = replays(&t.b);
            t.deliver_to_b(frame);
            refused[i] = replays(&t.b) - before;
        }
        let new_sa = t.push_frame(4);
        let before = replays(&t.b);
        t.deliver_to_b(&new_sa);
        refused[2] = replays(&t.b) - before;
        let others = t.b.stats().drops.total() - replays(&t.b);
        assert_eq!(others, 0, "only replays are dropped");
        refused
    };
    assert_eq!(run(false), [0, 0, 0], "the old Remote Time takes all three");
    assert_eq!(
        run(true),
        [1, 0, 0],
        "re-seeded: the delayed frame is a replay"
    );
}

/// What §9.2.2.2's rule is for: a connection silent for longer than half
/// the IV space (2^63 ps, 107 days). Never re-seeded, its Remote Time falls
/// so far behind that the modulo comparison takes every new IV for an old
/// one, and the connection is never heard again; with a key rotation every
/// 30 days (daily in practice), the first packet after 110 days passes.
#[test]
fn remote_time_keeps_up_with_an_idle_connection_across_rotations() {
    const DAY: u64 = 86_400;
    let run = |rotate: bool| {
        let mut t = Bench::new();
        let first = t.push_frame(1);
        assert_eq!(t.deliver_to_b(&first), 1);
        for round in 1..=3u8 {
            t.now = t.now + Duration::from_secs(30 * DAY);
            if rotate {
                t.b.begin_key_rotation(MasterKey::new([round; 32])).unwrap();
                let (spi, key) = t.b.rekey_receive(t.now, t.cb, Version::Aes128Gcm).unwrap();
                t.a.install_transmit_sa(t.ca, spi, &key).unwrap();
                t.b.retire_previous_spis();
                t.b.end_key_rotation().unwrap();
            }
        }
        t.now = t.now + Duration::from_secs(20 * DAY);
        let late = t.push_frame(2);
        (t.deliver_to_b(&late), replays(&t.b))
    };
    assert_eq!(run(false), (0, 1), "110 days behind: taken for a replay");
    assert_eq!(run(true), (1, 0), "re-seeded at each rotation");
}

/// The steps in the wrong order are refused by name and change nothing.
#[test]
fn rotation_steps_out_of_order_are_refused() {
    let mut t = Bench::new();
    // Step 2 before step 1.
    assert_eq!(
        t.b.rekey_receive(t.now, t.cb, Version::Aes128Gcm).err(),
        Some(RotationError::AlreadyCurrent)
    );
    t.b.begin_key_rotation(MasterKey::new([1; 32])).unwrap();
    // A second rotation before the first ended would strand connections.
    assert_eq!(
        t.b.begin_key_rotation(MasterKey::new([2; 32])),
        Err(RotationError::RotationInProgress)
    );
    // Step 5 before step 2.
    assert_eq!(t.b.connections_to_rekey(), vec![t.cb]);
    assert_eq!(t.b.end_key_rotation(), Err(RotationError::NotRekeyed(1)));
    let (spi, key) = t.b.rekey_receive(t.now, t.cb, Version::Aes128Gcm).unwrap();
    // Twice in one rotation.
    assert_eq!(
        t.b.rekey_receive(t.now, t.cb, Version::Aes128Gcm).err(),
        Some(RotationError::AlreadyCurrent)
    );
    t.b.end_key_rotation().unwrap();
    // An SA with SPI 0 is refused; handles of closed connections too.
    assert_eq!(
        t.a.install_transmit_sa(t.ca, psp::Spi(0), &key),
        Err(RotationError::BadSa)
    );
    t.a.install_transmit_sa(t.ca, spi, &key).unwrap();
    let frame = t.push_frame(9);
    assert_eq!(t.deliver_to_b(&frame), 1);
    t.a.close(t.now, t.ca);
    assert_eq!(
        t.a.install_transmit_sa(t.ca, spi, &key),
        Err(RotationError::UnknownConnection)
    );
    // Without PSP there is nothing to rotate.
    let mut plain: Engine = Engine::new(EngineConfig::default(), t.now).unwrap();
    assert_eq!(
        plain.begin_key_rotation(MasterKey::new([3; 32])),
        Err(RotationError::PspOff)
    );
}

/// Rotation far faster than any connection manager would: both nodes every
/// 12 µs of virtual time (three RTTs of this link), steps 4–5 of the
/// previous rotation first, with pushes and pulls under loss and
/// reordering. Whatever a retired SPI or an evicted key drops is
/// retransmitted under the current SA: everything completes.
#[test]
fn rapid_rotation_keeps_pushes_and_pulls_alive() {
    for seed in 0..6u64 {
        let mut pair = Cluster::new(Setup {
            faults: Faults {
                loss_ppm: 10_000,
                reorder_ppm: 20_000,
                ..Faults::default()
            },
            seed,
            ..Setup::default()
        });
        pair.queue_random(0, 1500, 4000);
        pair.queue_random(1, 500, 4000);
        let (mut last, mut round) = (pair.now, 0u8);
        let deadline = pair.now + Duration::from_secs(2);
        while pair.unfinished() > 0 {
            assert!(
                pair.now < deadline,
                "seed {seed}: {} unfinished",
                pair.unfinished()
            );
            assert!(
                pair.step(),
                "seed {seed}: idle with {} unfinished",
                pair.unfinished()
            );
            if pair.now >= last + Duration::from_micros(12) {
                last = pair.now;
                round = round.wrapping_add(1);
                for node in &mut pair.nodes {
                    if node.engine.key_generation().is_some_and(|(_, open)| open) {
                        node.engine.retire_previous_spis();
                        node.engine.end_key_rotation().expect("all rekeyed");
                    }
                }
                rotate(&mut pair, round.wrapping_mul(7));
            }
        }
        pair.run_to_completion(Duration::from_millis(100));
        pair.assert_all_ok(0);
        pair.assert_all_ok(1);
        let rotations = pair.nodes[0].engine.stats().key_rotations;
        assert!(rotations >= 10, "seed {seed}: {rotations} rotations");
    }
}

/// A connection set up after a rotation ended expects its SPI under the
/// receiver's current generation (OCP Falcon 0.9 §9.2.1): its packets pass
/// the SPI check, and it is rekeyed with the others at the next rotation.
#[test]
fn connections_set_up_after_a_rotation_pass_the_spi_check() {
    let mut t = Bench::new();
    for (engine, key) in [(&mut t.a, 0x61), (&mut t.b, 0x62)] {
        engine
            .begin_key_rotation(MasterKey::new([key; 32]))
            .expect("begin");
    }
    rekey_pair(t.now, &mut t.a, &mut t.b, (t.ca, t.cb), Version::Aes128Gcm).expect("rekey");
    t.a.end_key_rotation().expect("end");
    t.b.end_key_rotation().expect("end");

    let spec = crate::engine::PairSpec {
        a_cid: crate::ids::ConnectionId::truncating(0x11),
        b_cid: crate::ids::ConnectionId::truncating(0x21),
        ..crate::engine::PairSpec::default()
    };
    let (ca2, cb2) = crate::engine::connect(t.now, &mut t.a, &mut t.b, &spec).expect("connect");
    (t.ca, t.cb) = (ca2, cb2);
    let frame = t.push_frame(5);
    assert_eq!(t.deliver_to_b(&frame), 1, "the new connection's push");
    assert_eq!(spi_drops(&t.b), 0);

    t.b.begin_key_rotation(MasterKey::new([0x63; 32]))
        .expect("begin");
    assert_eq!(t.b.connections_to_rekey().len(), 2, "both connections");
}
