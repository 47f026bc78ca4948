//! Format tests: round trips, bit positions, ranges, time and window types.

use proptest::prelude::*;

use super::*;

fn event_type() -> impl Strategy<Value = EventType> {
    prop_oneof![
        Just(EventType::Ack),
        Just(EventType::Nack),
        Just(EventType::Retransmit)
    ]
}

fn delay_select() -> impl Strategy<Value = DelaySelect> {
    (0u32..4).prop_map(DelaySelect::from_code)
}

fn t24() -> impl Strategy<Value = Time24> {
    (0u32..=TIME_MASK).prop_map(Time24::new)
}

prop_compose! {
    fn any_event()(
        (connection_id, event_type, t1, t2, t3, t4) in
            (0..=MAX_CONNECTION_ID, event_type(), t24(), t24(), t24(), t24()),
        (retransmit_count, early, nack_code, forward_hops, rx_buffer_level, cc_metadata) in
            (0..=MAX_RETRANSMIT_COUNT, any::<bool>(), any::<u8>(), 0..=MAX_FORWARD_HOPS,
             0..=MAX_RX_BUFFER_LEVEL, 0..=MAX_CC_METADATA),
        (fcwnd, inter_packet_gap, ncwnd, retransmit_timeout, num_packets_acked, eack_drop,
         eack) in
            (0..=Fcwnd::MAX_RAW, 0..=MAX_INTER_PACKET_GAP, 0..=MAX_NCWND, t24(),
             0..=MAX_NUM_PACKETS_ACKED, any::<bool>(), any::<bool>()),
        (event_queue_select, delay_select, fabric_window_time_marker,
         nic_window_time_marker, increase, base_delay_target) in
            (0..=MAX_EVENT_QUEUE_SELECT, delay_select(), t24(), t24(), any::<bool>(),
             0..=MAX_STATE_24),
        (delay_state, rtt_state, cc_opaque, ecn_accumulated, gen) in
            (0..=MAX_STATE_24, 0..=MAX_STATE_24, 0..=MAX_CC_OPAQUE, 0..=MAX_ECN_ACCUMULATED,
             any::<bool>()),
        (instance, new_instance) in (0..=MAX_INSTANCE, any::<bool>()),
    ) -> CcEvent {
        CcEvent {
            connection_id, event_type, t1, t2, t3, t4, retransmit_count,
            retransmit_reason: if early { RetransmitReason::Early } else { RetransmitReason::Timeout },
            nack_code, forward_hops, rx_buffer_level, cc_metadata,
            fcwnd: Fcwnd::from_raw(fcwnd), inter_packet_gap, ncwnd, retransmit_timeout,
            num_packets_acked, eack_drop, eack, event_queue_select, delay_select,
            fabric_window_time_marker, nic_window_time_marker,
            ncwnd_direction: NcwndDirection::from_bit(increase.into()),
            base_delay_target, delay_state, rtt_state, cc_opaque, ecn_accumulated, instance,
            new_instance, gen,
        }
    }
}

prop_compose! {
    fn any_result()(
        (connection_id, randomize_path, cc_metadata, fcwnd, inter_packet_gap, ncwnd) in
            (0..=MAX_CONNECTION_ID, any::<bool>(), 0..=MAX_CC_METADATA, 0..=Fcwnd::MAX_RAW,
             0..=MAX_INTER_PACKET_GAP, 0..=MAX_NCWND),
        (retransmit_timeout, event_queue_select, delay_select, fabric_window_time_marker,
         nic_window_time_marker, increase) in
            (t24(), 0..=MAX_EVENT_QUEUE_SELECT, delay_select(), t24(), t24(), any::<bool>()),
        (base_delay_target, delay_state, rtt_state, cc_opaque, instance) in
            (0..=MAX_STATE_24, 0..=MAX_STATE_24, 0..=MAX_STATE_24, 0..=MAX_CC_OPAQUE,
             0..=MAX_INSTANCE),
    ) -> CcResult {
        CcResult {
            connection_id, randomize_path, cc_metadata, fcwnd: Fcwnd::from_raw(fcwnd),
            inter_packet_gap, ncwnd, retransmit_timeout, event_queue_select, delay_select,
            fabric_window_time_marker, nic_window_time_marker,
            ncwnd_direction: NcwndDirection::from_bit(increase.into()),
            base_delay_target, delay_state, rtt_state, cc_opaque, instance,
        }
    }
}

proptest! {
    #[test]
    fn event_round_trips(event in any_event()) {
        prop_assert_eq!(event.validate(), Ok(()));
        let bytes = event.encode();
        prop_assert_eq!(CcEvent::decode(&bytes), Ok(event));
    }

    #[test]
    fn result_round_trips(result in any_result()) {
        prop_assert_eq!(result.validate(), Ok(()));
        let bytes = result.encode();
        prop_assert_eq!(CcResult::decode(&bytes), Ok(result));
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::array::uniform32(any::<u8>())) {
        let mut full = [0u8; 64];
        full[..32].copy_from_slice(&bytes);
        full[32..].copy_from_slice(&bytes);
        if let Ok(event) = CcEvent::decode(&full) {
            prop_assert_eq!(event.validate(), Ok(()));
            // Re-encoding drops only reserved bits.
            prop_assert_eq!(CcEvent::decode(&event.encode()), Ok(event));
        }
        let result = CcResult::decode(&full);
        prop_assert!(result.is_ok());
    }

    #[test]
    fn time_wrapping_sub_inverts_add(a in 0u32..=TIME_MASK, d in 0u32..=TIME_MASK) {
        let t = Time24::new(a);
        prop_assert_eq!(t.wrapping_add(d).wrapping_sub(t), d);
        prop_assert_eq!(t.wrapping_sub_units(d).wrapping_add(d), t);
    }

    #[test]
    fn fcwnd_from_f64_saturates(x in -10.0f64..5000.0) {
        let w = Fcwnd::from_f64(x);
        prop_assert!(w.raw() <= Fcwnd::MAX_RAW);
        if (0.0..2047.0).contains(&x) {
            prop_assert!((w.to_f64() - x).abs() <= 0.5 / 1024.0 + 1e-12);
        }
    }
}

#[test]
fn first_field_sits_in_the_low_bits_of_byte_0() {
    let event = CcEvent {
        connection_id: 0x12_3456,
        event_type: EventType::Retransmit,
        delay_select: DelaySelect::Full,
        gen: true,
        ..CcEvent::default()
    };
    let bytes = event.encode();
    assert_eq!(&bytes[..3], &[0x56, 0x34, 0x12]);
    assert_eq!(bytes[3] & 0b11, 2);
    assert_eq!(bytes[63], 0x80);
    assert_eq!(bytes[4..63].iter().filter(|b| **b != 0).count(), 0);
}

#[test]
fn fcwnd_sits_after_cc_metadata_fraction_first() {
    // Event bit 167 starts fcwnd: byte 20, bit 7.
    let bytes = CcEvent {
        fcwnd: Fcwnd::from_raw(1),
        ..CcEvent::default()
    }
    .encode();
    assert_eq!(bytes[20], 0x80);
    let bytes = CcEvent {
        fcwnd: Fcwnd::ONE,
        ..CcEvent::default()
    }
    .encode();
    // 1.0 = raw 1024 = bit 10 of the field = bit 177 = byte 22, bit 1.
    assert_eq!(bytes[22], 0x02);
}

#[test]
fn event_type_3_is_rejected() {
    let mut bytes = CcEvent::default().encode();
    bytes[3] |= 0b11;
    assert_eq!(
        CcEvent::decode(&bytes),
        Err(FormatError::UnknownEventType(3))
    );
}

#[test]
fn validate_names_the_field() {
    let event = CcEvent {
        rx_buffer_level: 32,
        ..CcEvent::default()
    };
    assert_eq!(
        event.validate(),
        Err(FormatError::OutOfRange {
            field: "rx_buffer_level",
            value: 32,
            max: 31
        })
    );
    let result = CcResult {
        ncwnd: 2048,
        ..CcResult::default()
    };
    assert_eq!(
        result.validate(),
        Err(FormatError::OutOfRange {
            field: "ncwnd",
            value: 2048,
            max: 2047
        })
    );
}

#[test]
fn time_conversions() {
    assert_eq!(Time24::from_picos(131_072).value(), 1);
    assert_eq!(Time24::from_nanos(25_000).value(), 190); // 25 µs = 190.7 units
    assert_eq!(Time24::from_picos(1 << 41).value(), 0); // wraps at 2^24 units
    assert_eq!(Time24::units_to_nanos(191), 25_034);
    assert_eq!(Time24::new(0x1FF_FFFF).value(), TIME_MASK);
    // spec/rue.md §2.4 (isekai util_test.cc GetWindowDelta).
    assert_eq!(Time24::new(1000).wrapping_sub(Time24::new(0)), 1000);
    assert_eq!(Time24::new(1000).wrapping_sub(Time24::new(400)), 600);
    assert_eq!(
        Time24::new(1000).wrapping_sub(Time24::new((1 << 24) - 100)),
        1100
    );
    assert_eq!(
        Time24::new(1000).wrapping_sub(Time24::new(1100)),
        (1 << 24) - 100
    );
}

#[test]
fn fcwnd_parts() {
    let w = Fcwnd::from_f64(17.45);
    assert_eq!(w.integer(), 17);
    assert_eq!(w.fraction(), 461); // round(0.45 × 1024) = 460.8
    assert_eq!(Fcwnd::from_f64(f64::NAN), Fcwnd::from_raw(0));
    assert_eq!(Fcwnd::from_f64(1e9), Fcwnd::MAX);
    assert_eq!(Fcwnd::ONE.to_f64(), 1.0);
    assert_eq!(saturate_acked(5000), 1023);
}

#[test]
fn carry_state_round_trips_the_cc_state() {
    let last = CcResult {
        cc_metadata: 77,
        randomize_path: true,
        ..CcResult::initial(5, 1 << 21, Time24::new(900))
    };
    let mut next = CcEvent {
        connection_id: 5,
        cc_metadata: 3,
        ..CcEvent::default()
    };
    next.carry_state(&last);
    assert_eq!(next.fcwnd, Fcwnd::from_f64(32.0));
    assert_eq!(
        (next.ncwnd, next.rtt_state, next.delay_state),
        (64, 191, 191)
    );
    assert_eq!(next.base_delay_target, 1 << 21);
    assert_eq!(next.fabric_window_time_marker, Time24::new(900));
    assert_eq!(next.cc_metadata, 3, "the event keeps the peer's metadata");
    // Everything the result carries as state comes back unchanged.
    let reflected = CcResult {
        randomize_path: true,
        cc_metadata: 77,
        ..CcResult::reflect(&next)
    };
    assert_eq!(reflected, last);
}
