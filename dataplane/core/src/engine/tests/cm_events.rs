//! SPI check failures reach the connection manager (OCP Falcon 0.9
//! §9.2.2.3; decryption failures, §9.2.2.1): one event per (reason, SPI) and
//! interval naming the connection, the SPI and the reason, the drop counted
//! every time, no ACK or NACK for the frame.

use crate::port::FrameBuf;
use core::time::Duration;

use psp::{Header, MasterKey, RxDrop, Spi, Version};

use super::rotation::Bench;
use crate::drop::DropReason;
use crate::engine::{CmEvent, Engine, SpiCheckFailure};
use crate::ids::ConnectionId;
use crate::wire::frame::parse_with;
use crate::wire::ChecksumChecks;

/// B's connection id (`PairSpec::default`): the CID of what A sends.
const B_CID: u32 = 0x20;

/// Every CM event B has queued.
fn cm_events(engine: &mut Engine) -> Vec<SpiCheckFailure> {
    core::iter::from_fn(|| engine.poll_cm_event())
        .map(|CmEvent::SpiCheckFailed(f)| f)
        .collect()
}

fn drops(engine: &Engine, reason: RxDrop) -> u64 {
    engine.stats().drops.get(DropReason::Psp(reason))
}

/// The frame's PSP header, to read or forge.
fn psp_header(frame: &mut [u8]) -> Header<&mut [u8]> {
    let range = parse_with(frame, ChecksumChecks::ALL)
        .expect("frame")
        .layers
        .payload;
    Header::new_checked(&mut frame[range]).expect("PSP header")
}

/// Hands `frame` to B and checks B answers it with nothing (no ACK, no
/// NACK: §9.2.2.3); what B had to send before is sent (and lost) first.
fn deliver_unanswered(t: &mut Bench, frame: &[u8]) {
    let mut buf = vec![0u8; t.b.max_frame_len()];
    while t.b.poll_transmit_into(t.now, &mut buf).is_some() {}
    assert_eq!(t.deliver_to_b(frame), 0);
    assert_eq!(
        t.b.poll_transmit_into(t.now, &mut buf),
        None,
        "no ACK or NACK"
    );
}

/// An SPI the receiver issued but not to this connection (the peer sends
/// with the wrong SA): the frame decrypts and fails the SPI check. One
/// event, naming B's connection, its CID, the SPI and the reason; the
/// same frame again within the interval is counted, not reported.
#[test]
fn an_spi_not_of_the_connection_is_reported_with_the_connection() {
    let mut t = Bench::new();
    let (stray, key) = t.b.allocate_spi(Version::Aes128Gcm).unwrap();
    t.a.install_transmit_sa(t.ca, stray, &key).unwrap();
    let frame = t.push_frame(1);
    deliver_unanswered(&mut t, &frame);
    let events = cm_events(&mut t.b);
    assert_eq!(
        events,
        [SpiCheckFailure {
            at: t.now,
            reason: RxDrop::SpiMismatch,
            spi: stray,
            cid: Some(ConnectionId::truncating(B_CID)),
            connection: Some(t.cb),
            suppressed: 0,
            suppressed_other: 0,
        }]
    );
    t.now = t.now + Duration::from_millis(999);
    deliver_unanswered(&mut t, &frame);
    assert!(cm_events(&mut t.b).is_empty(), "within the interval");
    assert_eq!(drops(&t.b, RxDrop::SpiMismatch), 2);
    t.now = t.now + Duration::from_millis(1);
    deliver_unanswered(&mut t, &frame);
    let events = cm_events(&mut t.b);
    assert_eq!(events.len(), 1);
    assert_eq!((events[0].at, events[0].suppressed), (t.now, 1));
    // The same once more, a second later.
    t.now = t.now + Duration::from_secs(1);
    let _ = t.b.handle_packet(t.now, FrameBuf::from_frame(&frame, 0));
    let events = cm_events(&mut t.b);
    assert_eq!(events.len(), 1);
    assert_eq!(
        (events[0].spi, events[0].connection, events[0].suppressed),
        (stray, Some(t.cb), 0)
    );
    assert_eq!(t.b.stats().spi_failure_events, 3);
    assert_eq!(drops(&t.b, RxDrop::SpiMismatch), 4);
}

/// An SPI the receiver never issued (forged into a valid frame): the SA key
/// derived for it does not authenticate the frame. Reported with the SPI
/// and the connection of the CID the crypt offset leaves in clear. With the
/// CID encrypted too (crypt offset forged to 0), the SPI names the
/// connection if it is one of its receive SPIs.
#[test]
fn an_spi_never_issued_is_reported_as_a_decryption_failure() {
    let mut t = Bench::new();
    let good = t.push_frame(1);
    let forged_spi = Spi(0x8000_4242);
    let mut forged = good.clone();
    psp_header(&mut forged).set_spi(forged_spi);
    deliver_unanswered(&mut t, &forged);
    let events = cm_events(&mut t.b);
    assert_eq!(events.len(), 1);
    let e = events[0];
    assert_eq!(
        (e.reason, e.spi, e.cid, e.connection),
        (
            RxDrop::AuthFailed,
            forged_spi,
            Some(ConnectionId::truncating(B_CID)),
            Some(t.cb)
        )
    );

    let mut hidden = good.clone();
    let spi = psp_header(&mut hidden).spi();
    psp_header(&mut hidden).set_crypt_offset(0);
    deliver_unanswered(&mut t, &hidden);
    let events = cm_events(&mut t.b);
    assert_eq!(events.len(), 1);
    assert_eq!(
        (
            events[0].reason,
            events[0].spi,
            events[0].cid,
            events[0].connection
        ),
        (RxDrop::AuthFailed, spi, None, Some(t.cb)),
        "the connection found by its receive SPI"
    );
    // Neither CID nor SPI known: no connection named (an interval later:
    // the forged SPI was reported above).
    t.now = t.now + Duration::from_secs(1);
    psp_header(&mut hidden).set_spi(forged_spi);
    deliver_unanswered(&mut t, &hidden);
    let events = cm_events(&mut t.b);
    assert_eq!((events[0].cid, events[0].connection), (None, None));
    assert_eq!(drops(&t.b, RxDrop::AuthFailed), 3);
    // The genuine frame still passes.
    assert_eq!(t.deliver_to_b(&good), 1);
    assert!(cm_events(&mut t.b).is_empty());
}

/// Rotation: a peer still sending with the previous generation's SPI once
/// AllowPrevGen is off fails the SPI check (a wrong generation); after a
/// second rotation its key is gone and the same SPI no longer decrypts (a
/// key rotated away). One event each, with the SPI and the connection.
#[test]
fn a_wrong_generation_and_a_key_rotated_away_are_reported() {
    let mut t = Bench::new();
    let old_spi = {
        let mut frame = t.push_frame(1);
        assert_eq!(t.deliver_to_b(&frame), 1);
        psp_header(&mut frame).spi()
    };
    t.b.begin_key_rotation(MasterKey::new([0x31; 32])).unwrap();
    // B rekeys, A never installs the new SA.
    t.b.rekey_receive(t.now, t.cb, Version::Aes128Gcm).unwrap();
    let during = t.push_frame(2);
    assert_eq!(t.deliver_to_b(&during), 1, "previous generation allowed");
    assert!(cm_events(&mut t.b).is_empty());
    t.b.end_key_rotation().unwrap();
    let stale = t.push_frame(3);
    deliver_unanswered(&mut t, &stale);
    let events = cm_events(&mut t.b);
    assert_eq!(events.len(), 1);
    assert_eq!(
        (events[0].reason, events[0].spi, events[0].connection),
        (RxDrop::SpiMismatch, old_spi, Some(t.cb))
    );
    assert_eq!(events[0].cid, Some(ConnectionId::truncating(B_CID)));

    t.b.begin_key_rotation(MasterKey::new([0x32; 32])).unwrap();
    let gone = t.push_frame(4);
    deliver_unanswered(&mut t, &gone);
    let events = cm_events(&mut t.b);
    assert_eq!(events.len(), 1);
    assert_eq!(
        (events[0].reason, events[0].spi, events[0].connection),
        (RxDrop::AuthFailed, old_spi, Some(t.cb))
    );
    assert_eq!(drops(&t.b, RxDrop::SpiMismatch), 1);
    assert_eq!(drops(&t.b, RxDrop::AuthFailed), 1);
}

/// A flood of 10 000 bad frames, one every 250 µs (2.5 s): three events
/// (at 0, 1 s, 2 s), each after the first carrying the 3 999 frames since
/// the one before; every frame counted; nothing sent back. A replay, not
/// an SPI failure, is never reported.
#[test]
fn a_flood_is_one_event_per_interval_with_the_count() {
    let mut t = Bench::new();
    let (stray, key) = t.b.allocate_spi(Version::Aes128Gcm).unwrap();
    t.a.install_transmit_sa(t.ca, stray, &key).unwrap();
    let frame = t.push_frame(1);
    let start = t.now;
    let mut events = Vec::new();
    for i in 0..10_000u32 {
        t.now = start + Duration::from_micros(250) * i;
        let _ =
            t.b.handle_packet(t.now, FrameBuf::from_frame(&frame.clone(), 0));
        events.extend(cm_events(&mut t.b).into_iter().map(|e| {
            assert_eq!(
                (e.reason, e.spi, e.connection),
                (RxDrop::SpiMismatch, stray, Some(t.cb))
            );
            ((e.at - start).as_millis(), e.suppressed, e.suppressed_other)
        }));
    }
    assert_eq!(events, [(0, 0, 0), (1_000, 3_999, 0), (2_000, 3_999, 0)]);
    assert_eq!(drops(&t.b, RxDrop::SpiMismatch), 10_000);
    assert_eq!(t.b.stats().spi_failure_events, 3);
    let mut buf = vec![0u8; t.b.max_frame_len()];
    assert_eq!(t.b.poll_transmit_into(t.now, &mut buf), None);

    // A replayed good frame: dropped and counted, not reported.
    let mut t = Bench::new();
    let good = t.push_frame(1);
    let newer = t.push_frame(2);
    assert_eq!(t.deliver_to_b(&good), 1);
    assert_eq!(t.deliver_to_b(&newer), 1);
    t.now = t.now + Duration::from_secs(1);
    let late = t.push_frame(3);
    assert_eq!(t.deliver_to_b(&late), 1);
    let _ =
        t.b.handle_packet(t.now, FrameBuf::from_frame(&good.clone(), 0));
    assert_eq!(drops(&t.b, RxDrop::Replay), 1);
    assert!(cm_events(&mut t.b).is_empty());
}
