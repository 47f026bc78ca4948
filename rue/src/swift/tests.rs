//! Swift tests: golden numbers of spec/rue.md §1.2–1.6 and §2.4, property
//! tests (bounds, pacing gap, wrap, once-per-RTT decrease), a scripted
//! series, PLB/PRR through Swift, and multipath.

use proptest::prelude::*;

use super::*;
use crate::blocks::TargetDelayParams;
use crate::format::{DelaySelect, TIME_MASK};
use crate::plb::{PlbConfig, PrrConfig};

const FAR: u32 = 100_000; // a time marker this far back always allows a change

fn swift() -> Swift {
    Swift::new(SwiftConfig::default()).unwrap()
}

/// An ACK at `now` with the given RTT and fabric delay (Falcon units).
fn ack(now: u32, rtt: u32, delay: u32) -> CcEvent {
    let t1 = now.wrapping_sub(rtt);
    let t2 = t1.wrapping_add(delay / 2);
    let t3 = t2.wrapping_add(rtt - delay);
    CcEvent {
        connection_id: 42,
        t1: Time24::new(t1),
        t2: Time24::new(t2),
        t3: Time24::new(t3),
        t4: Time24::new(now),
        delay_select: DelaySelect::Fabric,
        fcwnd: Fcwnd::from_f64(32.0),
        ncwnd: 64,
        rx_buffer_level: 0,
        num_packets_acked: 1,
        rtt_state: rtt,
        delay_state: delay,
        retransmit_timeout: Time24::new(7629),
        fabric_window_time_marker: Time24::new(now.wrapping_sub(FAR)),
        nic_window_time_marker: Time24::new(now.wrapping_sub(FAR)),
        ..CcEvent::default()
    }
}

/// The datapath's part: copy the result's CC state into the next event.
fn carry(event: &mut CcEvent, result: &CcResult) {
    event.fcwnd = result.fcwnd;
    event.inter_packet_gap = result.inter_packet_gap;
    event.ncwnd = result.ncwnd;
    event.retransmit_timeout = result.retransmit_timeout;
    event.fabric_window_time_marker = result.fabric_window_time_marker;
    event.nic_window_time_marker = result.nic_window_time_marker;
    event.ncwnd_direction = result.ncwnd_direction;
    event.delay_state = result.delay_state;
    event.rtt_state = result.rtt_state;
    event.cc_opaque = result.cc_opaque;
}

/// Sets an event's timestamps for `now`, keeping its other fields.
fn retime(event: &mut CcEvent, now: u32, rtt: u32, delay: u32) {
    let fresh = ack(now, rtt, delay);
    event.t1 = fresh.t1;
    event.t2 = fresh.t2;
    event.t3 = fresh.t3;
    event.t4 = fresh.t4;
}

// ---------------------------------------------------------------------------
// Golden numbers
// ---------------------------------------------------------------------------

//= spec/rue.md §1.2: target(fcwnd=32, hops=5) = 259 through the profile.
#[test]
fn golden_target_delay() {
    let s = swift();
    assert_eq!(s.target_delay(1.0, 3), 445);
    assert_eq!(s.target_delay(32.0, 5), 259);
    assert_eq!(s.target_delay(0.25, 3), 691);
}

//= spec/rue.md §1.3: fcwnd 32, target 259, delay 600 → scale 0.568,
//= β·scale 0.455 → fcwnd = 32 × 0.545 = 17.45; the marker moves to now.
#[test]
fn golden_fabric_decrease() {
    let mut s = swift();
    let mut st = SwiftState::default();
    let ev = CcEvent {
        forward_hops: 5,
        ..ack(50_000, 700, 600)
    };
    let r = s.on_event(&ev, &mut st);
    assert!((r.fcwnd.to_f64() - 17.45).abs() < 0.002, "{}", r.fcwnd);
    assert_eq!(r.fcwnd, Fcwnd::from_f64(32.0 * (1.0 - 0.8 * 341.0 / 600.0)));
    assert_eq!(r.fabric_window_time_marker, Time24::new(50_000));
    assert_eq!(r.delay_state, 600); // delay_smoothing_alpha = 0
    assert_eq!(r.rtt_state, 700);
    assert_eq!(r.inter_packet_gap, 0);
    assert_eq!(s.counters().fabric_decreases, 1);
}

//= spec/rue.md §1.3: additive increase: +ai·acked/fcwnd above one packet,
//= +ai·acked below.
#[test]
fn golden_fabric_increase() {
    let mut s = swift();
    let mut st = SwiftState::default();
    let ev = CcEvent {
        num_packets_acked: 8,
        ..ack(50_000, 300, 100)
    };
    let r = s.on_event(&ev, &mut st);
    assert_eq!(r.fcwnd, Fcwnd::from_f64(32.0 + 8.0 / 32.0));
    let ev = CcEvent {
        num_packets_acked: 2,
        fcwnd: Fcwnd::from_f64(0.25),
        ..ack(50_000, 300, 100)
    };
    let r = s.on_event(&ev, &mut st);
    assert_eq!(r.fcwnd, Fcwnd::from_f64(2.25));
    // Exactly at the target: no increase (isekai's <, not the PDF's ≤), and
    // a decrease of scale 0.
    let target = s.target_delay(32.0, 0);
    let ev = CcEvent {
        num_packets_acked: 8,
        ..ack(50_000, target + 10, target)
    };
    assert_eq!(s.on_event(&ev, &mut st).fcwnd, Fcwnd::from_f64(32.0));
}

//= spec/rue.md §1.4: ncwnd 64, level 25, target 15 → scale 0.4 → ×0.8 =
//= 0.32 → 43.52; the wire carries 43, the fraction stays in the state.
#[test]
fn golden_nic_decrease() {
    let mut s = swift();
    let mut st = SwiftState::default();
    let ev = CcEvent {
        rx_buffer_level: 25,
        ..ack(50_000, 300, 100)
    };
    let r = s.on_event(&ev, &mut st);
    assert_eq!(r.ncwnd, 43);
    assert_eq!(st.ncwnd_fraction, 532); // 0.52 × 1024 = 532.5
    assert_eq!(r.ncwnd_direction, NcwndDirection::Decrease);
    assert_eq!(r.nic_window_time_marker, Time24::new(50_000));
    // Next event within the RTT: no further decrease, fraction kept.
    let mut next = ack(50_100, 300, 100);
    carry(&mut next, &r);
    next.rx_buffer_level = 25;
    let r2 = s.on_event(&next, &mut st);
    assert_eq!(r2.ncwnd, 43);
    assert_eq!(st.ncwnd_fraction, 532);
    // Below target after a decrease: +1 at once (direction was Decrease).
    next.rx_buffer_level = 3;
    let r3 = s.on_event(&next, &mut st);
    assert_eq!(r3.ncwnd, 44);
    assert_eq!(r3.ncwnd_direction, NcwndDirection::Increase);
    // A second increase within the RTT is refused (DNA rule).
    carry(&mut next, &r3);
    let r4 = s.on_event(&next, &mut st);
    assert_eq!(r4.ncwnd, 44);
}

//= OCP Falcon 0.9 §10.3.3: a resource-exhaustion NACK halves ncwnd if the
//= last change was an increase, even within the RTT.
#[test]
fn nack_resource_exhaustion_halves_ncwnd() {
    let mut s = swift();
    let mut st = SwiftState::default();
    let ev = CcEvent {
        event_type: EventType::Nack,
        nack_code: nack_code::RX_RESOURCE_EXHAUSTION,
        ncwnd_direction: NcwndDirection::Increase,
        nic_window_time_marker: Time24::new(49_990),
        ..ack(50_000, 300, 100)
    };
    let r = s.on_event(&ev, &mut st);
    assert_eq!(r.ncwnd, 32);
    assert_eq!(r.ncwnd_direction, NcwndDirection::Decrease);
}

//= spec/rue.md §1.5: retransmit: count 1 → max MD (once per RTT), counts
//= 2..limit−1 → nothing, count ≥ limit (3) → min_fcwnd; RTO from rtt_state.
#[test]
fn golden_retransmit() {
    let mut s = swift();
    let mut st = SwiftState::default();
    let retx = |count, marker: u32| CcEvent {
        event_type: EventType::Retransmit,
        retransmit_count: count,
        t4: Time24::new(50_000),
        fcwnd: Fcwnd::from_f64(0.25),
        rtt_state: 400,
        fabric_window_time_marker: Time24::new(marker),
        ncwnd: 20,
        ..CcEvent::default()
    };
    let r = s.on_event(&retx(1, 0), &mut st);
    assert_eq!(r.fcwnd, Fcwnd::from_f64(0.125));
    assert_eq!(r.fabric_window_time_marker, Time24::new(50_000));
    // gap = (400/0.125 − 400) × 0.256 = 716.8; RTO = 800 + 717/0.256 = 3600 < 7629.
    assert_eq!(r.inter_packet_gap, 717);
    assert_eq!(r.retransmit_timeout, Time24::new(7629));
    assert_eq!((r.ncwnd, r.rtt_state), (20, 400));
    // Within the RTT: no decrease.
    assert_eq!(
        s.on_event(&retx(1, 49_800), &mut st).fcwnd,
        Fcwnd::from_f64(0.25)
    );
    assert_eq!(
        s.on_event(&retx(2, 0), &mut st).fcwnd,
        Fcwnd::from_f64(0.25)
    );
    let r = s.on_event(&retx(3, 0), &mut st);
    assert_eq!(r.fcwnd, Fcwnd::from_f64(0.01));
    // The RTO term without the 1 ms floor.
    let mut low = Swift::new(SwiftConfig {
        min_retransmit_timeout: 1,
        ..SwiftConfig::default()
    })
    .unwrap();
    assert_eq!(
        low.on_event(&retx(1, 0), &mut st).retransmit_timeout,
        Time24::new(3600)
    );
}

//= spec/rue.md §1.6: fcwnd 0.25, rtt 400 → gap (1600 − 400) × 0.256 = 307.
#[test]
fn golden_pacing_gap() {
    let mut s = swift();
    let mut st = SwiftState::default();
    let ev = CcEvent {
        fcwnd: Fcwnd::from_f64(0.25),
        num_packets_acked: 0,
        ..ack(50_000, 400, 100)
    };
    let r = s.on_event(&ev, &mut st);
    assert_eq!(r.fcwnd, Fcwnd::from_f64(0.25));
    assert_eq!(r.inter_packet_gap, 307);
    // RTO: srtt 400 × 2 + 307 / 0.256 = 1999 → the 7629 floor.
    assert_eq!(r.retransmit_timeout, Time24::new(7629));
}

//= spec/rue.md §2.4: a decrease is allowed across the 24-bit wrap when the
//= marker was dragged along by events in between.
#[test]
fn golden_marker_across_wrap() {
    let mut s = swift();
    let mut st = SwiftState::default();
    // Marker 100 units before the wrap, now = 1000 after it: 1100 ≥ rtt 700.
    let mut ev = CcEvent {
        forward_hops: 5,
        ..ack(1000, 700, 600)
    };
    ev.fabric_window_time_marker = Time24::new((1 << 24) - 100);
    let r = s.on_event(&ev, &mut st);
    assert!(r.fcwnd < Fcwnd::from_f64(32.0));
    // 1100 − 1000 would be within the RTT without the wrap-safe delta.
    ev.fabric_window_time_marker = Time24::new((1 << 24) - 100 + 700);
    assert_eq!(s.on_event(&ev, &mut st).fcwnd, Fcwnd::from_f64(32.0));
}

// ---------------------------------------------------------------------------
// Scripted series
// ---------------------------------------------------------------------------

/// Delay above target: fcwnd falls once per RTT, halving (max MDF), and
/// pacing starts below one packet. Delay below target: additive recovery.
/// RX buffer level above target: ncwnd falls once per RTT.
#[test]
fn scripted_series() {
    let mut s = swift();
    let mut st = SwiftState::default();
    let rtt = 3000;
    let step = rtt / 4;
    let mut ev = ack(10_000, rtt, 2900);
    let mut now = 10_000;
    let mut decreases = Vec::new();
    let mut fcwnd: f64 = 32.0;

    // Phase 1: 10 RTTs at delay 2900 ≫ target; the max MD (0.5) applies
    // since 0.8 × (2900 − t)/2900 > 0.5 for every target up to 954 (the
    // largest: base + max flow scaling).
    for _ in 0..40 {
        retime(&mut ev, now, rtt, 2900);
        let r = s.on_event(&ev, &mut st);
        if r.fcwnd < ev.fcwnd {
            decreases.push(now);
            fcwnd /= 2.0;
            assert_eq!(r.fcwnd, Fcwnd::from_f64(fcwnd.max(0.01)));
        }
        if r.fcwnd.to_f64() < 1.0 {
            // Pacing: the gap spaces packets by rtt/fcwnd.
            let expected = (f64::from(rtt) / r.fcwnd.to_f64() - f64::from(rtt)) * 0.256;
            assert!((f64::from(r.inter_packet_gap) - expected).abs() <= expected * 0.01 + 1.0);
        } else {
            assert_eq!(r.inter_packet_gap, 0);
        }
        carry(&mut ev, &r);
        now += step;
    }
    // Decreases exactly one RTT apart, one per RTT: 10.
    assert_eq!(decreases.len(), 10, "{decreases:?}");
    assert!(decreases.windows(2).all(|w| w[1] - w[0] == rtt));
    let paced = ev.fcwnd.to_f64();
    assert!(paced < 0.05, "{paced}");
    assert!(ev.inter_packet_gap > 0);

    // Phase 2: delay 100 < target: +1 per ACKed packet below one packet,
    // then ≈ +1 per RTT (fcwnd packets ACKed per RTT).
    let mut last = ev.fcwnd;
    let mut per_rtt = Vec::new();
    for i in 0..200 {
        retime(&mut ev, now, rtt, 100);
        ev.num_packets_acked = (ev.fcwnd.to_f64().ceil() as u16 / 4).max(1);
        let r = s.on_event(&ev, &mut st);
        assert!(r.fcwnd > last, "additive recovery never stalls");
        last = r.fcwnd;
        carry(&mut ev, &r);
        if i % 4 == 3 {
            per_rtt.push(r.fcwnd.to_f64());
        }
        now += step;
    }
    assert!(
        per_rtt[0] >= 1.0,
        "one RTT of ACKs lifts a paced window above 1"
    );
    let late: Vec<f64> = per_rtt.windows(2).skip(20).map(|w| w[1] - w[0]).collect();
    assert!(late.iter().all(|d| (0.7..=1.6).contains(d)), "{late:?}");
    assert_eq!(ev.inter_packet_gap, 0);

    // Phase 3: rx buffer level 25 > 15: ncwnd × 0.68 once per RTT. (ncwnd
    // grew during phases 1–2, the level being 0; restart it at 64.)
    ev.ncwnd = 64;
    st.ncwnd_fraction = 0;
    ev.nic_window_time_marker = Time24::new(now.wrapping_sub(FAR));
    let mut ncwnd_seen = vec![ev.ncwnd];
    for _ in 0..12 {
        retime(&mut ev, now, rtt, 100);
        ev.rx_buffer_level = 25;
        let r = s.on_event(&ev, &mut st);
        if r.ncwnd != *ncwnd_seen.last().unwrap_or(&0) {
            ncwnd_seen.push(r.ncwnd);
            assert_eq!(r.ncwnd_direction, NcwndDirection::Decrease);
        }
        carry(&mut ev, &r);
        now += step;
    }
    // 64 → 43.52 → 29.59 → 20.12: three RTTs, three decreases.
    assert_eq!(ncwnd_seen, vec![64, 43, 29, 20]);
}

// ---------------------------------------------------------------------------
// PLB, PRR, multipath
// ---------------------------------------------------------------------------

#[test]
fn plb_repaths_after_congested_rounds() {
    let config = SwiftConfig {
        plb: PlbConfig {
            enabled: true,
            ..PlbConfig::default()
        },
        ..SwiftConfig::default()
    };
    let mut s = Swift::new(config).unwrap();
    let mut st = SwiftState::default();
    // fcwnd 4 with acked 4 per event: one round per event, delay 700 ≫ target.
    let mut repaths = Vec::new();
    for i in 0..12 {
        let ev = CcEvent {
            fcwnd: Fcwnd::from_f64(4.0),
            num_packets_acked: 4,
            fabric_window_time_marker: Time24::new(50_000),
            ..ack(50_000 + i, 800, 700)
        };
        repaths.push(s.on_event(&ev, &mut st).randomize_path);
    }
    assert_eq!(repaths.iter().filter(|r| **r).count(), 2);
    assert!(repaths[4] && repaths[9]);
    assert_eq!(s.counters().plb_repaths, 2);
    // cc_opaque bit 0 forces a repath (isekai Gen1 hook).
    let ev = CcEvent {
        cc_opaque: 1,
        num_packets_acked: 0,
        ..ack(60_000, 300, 100)
    };
    assert!(s.on_event(&ev, &mut st).randomize_path);
    // PLB off: never.
    let mut off = swift();
    assert!(!off.on_event(&ev, &mut st).randomize_path);
}

#[test]
fn prr_repaths_on_timeout_only() {
    let config = SwiftConfig {
        prr: PrrConfig {
            enabled: true,
            ..PrrConfig::default()
        },
        ..SwiftConfig::default()
    };
    let mut s = Swift::new(config).unwrap();
    let mut st = SwiftState::default();
    let mut ev = CcEvent {
        event_type: EventType::Retransmit,
        retransmit_count: 1,
        t4: Time24::new(5000),
        fcwnd: Fcwnd::from_f64(8.0),
        rtt_state: 300,
        ..CcEvent::default()
    };
    assert!(s.on_event(&ev, &mut st).randomize_path);
    assert_eq!(st.plb.pause_rounds(), 255);
    ev.retransmit_reason = RetransmitReason::Early;
    assert!(!s.on_event(&ev, &mut st).randomize_path);
    assert_eq!(s.counters().prr_repaths, 1);
}

#[test]
fn multipath_updates_only_the_event_flow() {
    let config = SwiftConfig {
        multipath: true,
        plb: PlbConfig {
            enabled: true,
            ..PlbConfig::default()
        },
        ..SwiftConfig::default()
    };
    let mut s = Swift::new(config).unwrap();
    let mut st = SwiftState::default();
    // First event on flow 2 with delay far above target: 32 splits into 4 × 8,
    // flow 2 halves to 4, the connection window is 28.
    let ev = CcEvent {
        cc_opaque: 2,
        ..ack(50_000, 800, 700)
    };
    let r = s.on_event(&ev, &mut st);
    assert_eq!(
        st.multipath.flow_fcwnd.map(|w| w.to_f64()),
        [8.0, 8.0, 4.0, 8.0]
    );
    assert_eq!(r.fcwnd, Fcwnd::from_f64(28.0));
    assert_eq!(r.cc_opaque, 2);
    // Flow 2's marker and RTT live in the state; the result keeps flow 0's.
    assert_eq!(
        st.multipath.flows[1].fabric_window_time_marker,
        Time24::new(50_000)
    );
    assert_eq!(r.fabric_window_time_marker, ev.fabric_window_time_marker);
    assert_eq!(r.rtt_state, ev.rtt_state);
    // Flow 2 again within its RTT: no second decrease; flow 0 may decrease.
    let mut next = CcEvent {
        cc_opaque: 2,
        ..ack(50_100, 800, 700)
    };
    carry(&mut next, &r);
    next.cc_opaque = 2;
    let r2 = s.on_event(&next, &mut st);
    assert_eq!(r2.fcwnd, Fcwnd::from_f64(28.0));
    next.cc_opaque = 0;
    let r3 = s.on_event(&next, &mut st);
    assert_eq!(r3.fcwnd, Fcwnd::from_f64(24.0));
    assert_eq!(r3.fabric_window_time_marker, Time24::new(50_100));
    assert_eq!(st.multipath.weights(), [3, 5, 3, 5]);
    // A timeout on flow 3 halves only flow 3.
    let retx = CcEvent {
        event_type: EventType::Retransmit,
        retransmit_count: 1,
        cc_opaque: 3,
        ..next
    };
    let r4 = s.on_event(&retx, &mut st);
    assert_eq!(
        st.multipath.flow_fcwnd.map(|w| w.to_f64()),
        [4.0, 8.0, 4.0, 4.0]
    );
    assert_eq!(r4.fcwnd, Fcwnd::from_f64(20.0));
    assert_eq!(r4.cc_opaque, 3);
}

// ---------------------------------------------------------------------------
// Properties
// ---------------------------------------------------------------------------

prop_compose! {
    fn any_event()(
        event_type in prop_oneof![Just(EventType::Ack), Just(EventType::Nack), Just(EventType::Retransmit)],
        t in proptest::array::uniform4(0u32..=TIME_MASK),
        retransmit_count in 0u8..=7,
        nack in prop_oneof![Just(0u8), Just(1u8), Just(5u8), any::<u8>()],
        forward_hops in 0u8..=15,
        rx_buffer_level in 0u8..=31,
        fcwnd in 0u32..=Fcwnd::MAX_RAW,
        ncwnd in 0u16..=2047,
        num_packets_acked in 0u16..=1023,
        eack in any::<(bool, bool)>(),
        delay_select in 0u8..4,
        markers in any::<(u32, u32)>(),
        increase in any::<bool>(),
        states in any::<(u32, u32)>(),
        cc_opaque in 0u8..4,
    ) -> CcEvent {
        CcEvent {
            connection_id: 1,
            event_type,
            t1: Time24::new(t[0]), t2: Time24::new(t[1]), t3: Time24::new(t[2]), t4: Time24::new(t[3]),
            retransmit_count,
            nack_code: nack,
            forward_hops,
            rx_buffer_level,
            fcwnd: Fcwnd::from_raw(fcwnd),
            ncwnd,
            num_packets_acked,
            eack: eack.0,
            eack_drop: eack.1,
            delay_select: [DelaySelect::Full, DelaySelect::Fabric, DelaySelect::Forward, DelaySelect::Reverse]
                [usize::from(delay_select)],
            fabric_window_time_marker: Time24::new(markers.0),
            nic_window_time_marker: Time24::new(markers.1),
            ncwnd_direction: if increase { NcwndDirection::Increase } else { NcwndDirection::Decrease },
            delay_state: states.0 & TIME_MASK,
            rtt_state: states.1 & TIME_MASK,
            cc_opaque,
            ..CcEvent::default()
        }
    }
}

fn configs() -> impl Strategy<Value = SwiftConfig> {
    (any::<bool>(), any::<bool>(), any::<bool>(), any::<bool>()).prop_map(
        |(plb, prr, multipath, maxd)| SwiftConfig {
            plb: PlbConfig {
                enabled: plb,
                ..PlbConfig::default()
            },
            prr: PrrConfig {
                enabled: prr,
                ..PrrConfig::default()
            },
            multipath,
            max_decrease_on_eack_nack_drop: maxd,
            calc_rtt_smooth: plb && prr,
            ..SwiftConfig::default()
        },
    )
}

/// Every sub-packet window Swift can answer with, for a spread of RTTs:
/// the gap paces at rtt/fcwnd within the quantization bound that
/// `swift_gap_matches_its_window` samples randomly (the random test once
/// found a case the first bound missed; this sweep covers the range).
#[test]
fn swift_gap_sweep_over_sub_packet_windows() {
    let mut s = swift();
    for rtt in (100u32..5000).step_by(97) {
        for fcwnd in 1u32..1100 {
            for acked in 0u16..2 {
                let mut st = SwiftState::default();
                let ev = CcEvent {
                    fcwnd: Fcwnd::from_raw(fcwnd),
                    num_packets_acked: acked,
                    ..ack(1 << 20, rtt, rtt / 4)
                };
                let r = s.on_event(&ev, &mut st);
                assert_gap_paces(r.fcwnd, r.inter_packet_gap, rtt)
                    .unwrap_or_else(|e| panic!("fcwnd {fcwnd} rtt {rtt}: {e}"));
            }
        }
    }
}

/// The pacing check shared by the sweep and the property test.
fn assert_gap_paces(fcwnd: Fcwnd, gap: u32, rtt: u32) -> Result<(), String> {
    if fcwnd > Fcwnd::ONE {
        return if gap == 0 {
            Ok(())
        } else {
            Err(format!("gap {gap} above one packet"))
        };
    }
    if fcwnd.raw() >= 1023 || gap >= (1 << 16) - 1 {
        return Ok(());
    }
    let w = fcwnd.to_f64();
    let spacing = f64::from(gap) / 0.256 + f64::from(rtt);
    let ideal = f64::from(rtt) / w;
    // fcwnd is rounded to the nearest 1/1024 packet, so the window Swift
    // paced with is within half a unit of `w`: the relative error of rtt/w
    // is at most 0.5 / (raw − 0.5). The gap itself rounds to whole 512 ns
    // units: within 2 Falcon units.
    let quantization = 0.5 / (f64::from(fcwnd.raw()) - 0.5);
    if (spacing - ideal).abs() <= ideal * quantization + 2.0 {
        Ok(())
    } else {
        Err(format!("spacing {spacing} vs ideal {ideal}"))
    }
}

proptest! {
    /// Windows stay within the profile's bounds, the result fits its wire
    /// fields, and no event panics.
    #[test]
    fn windows_stay_in_bounds(config in configs(), events in proptest::collection::vec(any_event(), 1..20)) {
        let mut s = Swift::new(config).unwrap();
        let mut st = SwiftState::default();
        for ev in events {
            let r = s.on_event(&ev, &mut st);
            prop_assert_eq!(r.validate(), Ok(()));
            prop_assert!(r.fcwnd >= Fcwnd::from_f64(config.min_fcwnd));
            prop_assert!(r.fcwnd <= Fcwnd::from_f64(config.max_fcwnd));
            if ev.event_type != EventType::Retransmit {
                prop_assert!((1..=256).contains(&r.ncwnd), "ncwnd {}", r.ncwnd);
            }
            prop_assert!(r.inter_packet_gap < 1 << 16);
            prop_assert!(r.retransmit_timeout.value() >= config.min_retransmit_timeout);
        }
    }

    /// The gap is 0 when fcwnd ≥ 1 and spaces packets by ≈ rtt/fcwnd below.
    #[test]
    fn gap_follows_rtt_over_fcwnd(fcwnd in 0.001f64..64.0, rtt in 1u32..200_000) {
        let gap = inter_packet_gap(0.256, 20, fcwnd, rtt);
        if fcwnd >= 1.0 {
            prop_assert_eq!(gap, 0);
        } else {
            let spacing = f64::from(gap) / 0.256 + f64::from(rtt);
            let ideal = f64::from(rtt) / fcwnd;
            let max = (1u32 << 20) - 1;
            if gap < max {
                // Rounding to whole 512 ns units: within 2 Falcon units.
                prop_assert!((spacing - ideal).abs() <= 2.0, "{spacing} vs {ideal}");
            } else {
                prop_assert!((ideal - f64::from(rtt)) * 0.256 >= f64::from(max) - 1.0);
            }
        }
    }

    /// Through Swift: results above one packet never pace; results below one
    /// packet pace at ≈ rtt/fcwnd (up to the 11.10 quantization of fcwnd).
    #[test]
    fn swift_gap_matches_its_window(fcwnd in 1u32..8192, rtt in 100u32..5000, acked in 0u16..4) {
        let mut s = swift();
        let mut st = SwiftState::default();
        let ev = CcEvent { fcwnd: Fcwnd::from_raw(fcwnd), num_packets_acked: acked, ..ack(1 << 20, rtt, rtt / 4) };
        let r = s.on_event(&ev, &mut st);
        prop_assert_eq!(assert_gap_paces(r.fcwnd, r.inter_packet_gap, rtt), Ok(()));
    }

    /// Time markers behave across the 24-bit wrap: shifting every time of a
    /// scripted connection by any offset (so the series crosses the wrap)
    /// gives the same windows and shifted markers.
    #[test]
    fn markers_are_shift_invariant_across_wrap(
        offset in 0u32..=TIME_MASK,
        script in proptest::collection::vec((1u32..600, 50u32..1500, 0u8..32, 1u16..16), 1..60),
    ) {
        let run = |base: u32| {
            let mut s = swift();
            let mut st = SwiftState::default();
            let rtt = 600;
            let mut ev = ack(base, rtt, 100);
            ev.fabric_window_time_marker = Time24::new(base);
            ev.nic_window_time_marker = Time24::new(base);
            let mut now = base;
            let mut out = Vec::new();
            for (gap, delay, level, acked) in &script {
                now = now.wrapping_add(*gap) & TIME_MASK;
                retime(&mut ev, now, rtt, (*delay).min(rtt));
                ev.rx_buffer_level = *level;
                ev.num_packets_acked = *acked;
                let r = s.on_event(&ev, &mut st);
                out.push((r.fcwnd, r.ncwnd, r.fabric_window_time_marker.wrapping_sub(Time24::new(base)),
                          r.nic_window_time_marker.wrapping_sub(Time24::new(base)), r.inter_packet_gap));
                carry(&mut ev, &r);
            }
            out
        };
        prop_assert_eq!(run(0), run(offset));
    }

    /// At most one fabric decrease per RTT, whatever the delays and event
    /// spacing, when the datapath echoes results into events.
    #[test]
    fn at_most_one_fabric_decrease_per_rtt(
        start in 0u32..=TIME_MASK,
        script in proptest::collection::vec((0u32..400, 10u32..1000, any::<bool>()), 1..120),
    ) {
        let mut s = swift();
        let mut st = SwiftState::default();
        let rtt = 1000;
        let mut ev = ack(start, rtt, 100);
        ev.fabric_window_time_marker = Time24::new(start.wrapping_sub(FAR));
        let mut now = start;
        let mut last_decrease: Option<u32> = None;
        for (gap, delay, eack_drop) in script {
            now = now.wrapping_add(gap) & TIME_MASK;
            retime(&mut ev, now, rtt, delay);
            ev.eack = eack_drop;
            ev.eack_drop = eack_drop;
            let r = s.on_event(&ev, &mut st);
            if r.fcwnd < ev.fcwnd {
                if let Some(t) = last_decrease {
                    let since = Time24::new(now).wrapping_sub(Time24::new(t));
                    prop_assert!(since >= rtt, "two decreases {since} units apart");
                }
                last_decrease = Some(now);
            }
            carry(&mut ev, &r);
        }
    }
}

#[test]
fn target_params_are_precomputed() {
    let s = swift();
    let TargetDelayParams {
        base_delay,
        topo_scaling_per_hop,
        max_flow_scaling,
        ..
    } = s.target;
    assert_eq!(
        (base_delay, topo_scaling_per_hop, max_flow_scaling),
        (191, 8, 763)
    );
}
