//! CC event and CC result: the 64-byte entries of the RUE event and result
//! queues (OCP Falcon 0.9 §10.6.2.1–10.6.2.2; spec/falcon.md §7.1–7.2), the
//! 24-bit wrap-safe Falcon time type and the fixed-point fabric window.
//!
//! Layer: the interface between the packet delivery sublayer (producer of
//! events, consumer of results) and the rate update engine. This module owns
//! the plain structs, their field ranges and their exact 512-bit wire form.
//! It never computes congestion control and never reads a clock.
//!
//! # Bit order
//!
//! The spec lists fields in order with widths but no bit numbering. We follow
//! isekai's packed GCC bitfields (`struct Event_Gen1`, `Response_Gen1`) on a
//! little-endian host: the 64 bytes are one 512-bit little-endian integer, the
//! first field of the table occupies its least-significant bits (bit 0 of
//! byte 0 upwards) and each next field follows immediately. So
//! `connection_id` is bits 0..24 (bytes 0–2, low byte first), `event_type` is
//! bits 24..26 (the low two bits of byte 3), and the `gen` bit of an event is
//! bit 511 (the top bit of byte 63).
//!
//! # Tables followed
//!
//! * Event: the OCP Falcon 0.9 §10.6.2.1 CC Event Queue table (p.88–91),
//!   its 33 rows in order at their widths (512 bits; isekai `Event_GEN1`
//!   agrees). `cc_metadata` is 24 bits, isekai's `eack_own:2` below its
//!   22-bit `cc_metadata`: the ACK's OWN bits and its 22-bit RUE info
//!   (spec/falcon.md §3.1, text over figure for the RUE-info width).
//! * Result: the §10.6.2.2 CC Result Queue table (p.91–92) sums to 508 bits;
//!   isekai's `Response_GEN1` order, which is the spec's plus
//!   `event_queue_select:2` and `delay_select:2` after `retransmit_timeout`
//!   (spec/rue.md §2.2, spec/falcon.md §7.2).
//!
//! `rue/tests/layout.rs` pins every field's first bit, written out by hand
//! from these tables (e.g. event `fcwnd_fraction` at bit 167, result
//! `delay_select` at 127), by known-answer encodes and decodes.
//!
//! # Connection instances (our extension)
//!
//! The datapath reuses a connection id once its connection is closed, and
//! with the RUE on another core an event of the closed connection may still
//! be queued, or its result in flight, when the id's next connection starts.
//! The spec's entries carry nothing to tell the two apart. We carry it in
//! bits the spec reserves: the event's `instance` (24 bits, the datapath's
//! count of the id's uses, modulo 2^24) and `new_instance` (1 bit: the first
//! event of that use) at bits 404..429 of the event's 107 reserved bits, and
//! the result's `instance`, passed through like `connection_id`, at bits
//! 252..276 of its 260 padding bits. The RUE starts the state of an event
//! with `new_instance` from blank (an id's previous connection never leaks
//! into the next); the datapath applies a result only if its `instance` is
//! the connection's. Zero in both (a datapath that does not use them) is the
//! spec's behaviour. In memory the two fields make a queued `CcEvent` 80
//! bytes and a `CcResult` 52 (76 and 48 without them).
//!
//! # Who keeps the CC state
//!
//! The spec carries the per-connection CC state inside every event (time
//! markers, `delay_state`, `rtt_state`, `base_delay_target`, `fcwnd`, `ncwnd`,
//! `ncwnd_direction`, `cc_opaque`): the datapath keeps a copy of the last
//! result per connection and copies those fields into the next event. The RUE
//! core keeps, in addition, its own compact per-connection table (see
//! `engine`) for state the Gen1 format has no room for (the ncwnd fraction,
//! PLB counters, DCQCN rates, per-flow windows).
//!
//! # Units
//!
//! * Falcon time unit: 131.072 ns = 2^17 ps ([`Time24`], RTO, `delay_state`,
//!   `rtt_state`, `base_delay_target`);
//! * timing-wheel (traffic-shaper) unit: 512 ns (`inter_packet_gap`;
//!   DESIGN §4, spec/rue.md §1.11 item 8);
//! * windows in packets (`fcwnd` 11.10 fixed point, `ncwnd` integer).

use std::fmt;

// ---------------------------------------------------------------------------
// Time
// ---------------------------------------------------------------------------

/// Number of bits of every RUE time value (OCP Falcon 0.9 §10.6.2.1).
pub const TIME_BITS: u32 = 24;
/// Mask of a 24-bit time value.
pub const TIME_MASK: u32 = (1 << TIME_BITS) - 1;
/// One Falcon time unit, in picoseconds (2^17 ps = 131.072 ns).
pub const FALCON_UNIT_PS: u64 = 1 << 17;
/// One timing-wheel (traffic-shaper) unit, in nanoseconds (DESIGN §4).
pub const TIMING_WHEEL_UNIT_NS: u64 = 512;

/// A point in time (or a duration) in 24-bit Falcon time units of
/// 131.072 ns; wraps every 2^24 units ≈ 2.199 s.
///
/// Differences are taken modulo 2^24 (`TimeBits()` in isekai), so
/// `later.wrapping_sub(earlier)` is correct as long as the two are less than
/// one wrap epoch apart. Never compare two raw values with `<`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Time24(u32);

impl Time24 {
    /// Time zero.
    pub const ZERO: Time24 = Time24(0);

    /// A time from a raw value, masked to 24 bits.
    pub const fn new(units: u32) -> Self {
        Time24(units & TIME_MASK)
    }

    /// The raw 24-bit value, in Falcon time units.
    pub const fn value(self) -> u32 {
        self.0
    }

    /// The Falcon time of a picosecond timestamp (`ps >> 17`, masked).
    pub const fn from_picos(picos: u64) -> Self {
        Time24((picos >> 17) as u32 & TIME_MASK)
    }

    /// The Falcon time of a nanosecond timestamp. Exact modulo 2^24 for any
    /// input: the wrapping multiply keeps the low 64 bits of the picosecond
    /// value, and only bits 17..41 of it are used.
    pub const fn from_nanos(nanos: u64) -> Self {
        Self::from_picos(nanos.wrapping_mul(1000))
    }

    /// `self − earlier` modulo 2^24, in Falcon time units.
    pub const fn wrapping_sub(self, earlier: Time24) -> u32 {
        self.0.wrapping_sub(earlier.0) & TIME_MASK
    }

    /// `self + units` modulo 2^24.
    pub const fn wrapping_add(self, units: u32) -> Time24 {
        Time24(self.0.wrapping_add(units) & TIME_MASK)
    }

    /// `self − units` modulo 2^24.
    pub const fn wrapping_sub_units(self, units: u32) -> Time24 {
        Time24(self.0.wrapping_sub(units) & TIME_MASK)
    }

    /// A number of Falcon time units converted to nanoseconds (truncated).
    pub const fn units_to_nanos(units: u32) -> u64 {
        units as u64 * FALCON_UNIT_PS / 1000
    }
}

impl fmt::Display for Time24 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}u", self.0)
    }
}

// ---------------------------------------------------------------------------
// Fixed-point fabric window
// ---------------------------------------------------------------------------

/// Fabric congestion window: 21-bit unsigned fixed point with 10 fractional
/// bits (`fcwnd_integer:11` above `fcwnd_fraction:10`, OCP Falcon 0.9
/// §10.6.2.1), in packets. Range 0 ..= 2047.999 (raw 0 ..= 2^21 − 1).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Fcwnd(u32);

impl Fcwnd {
    /// Number of fractional bits.
    pub const FRACTION_BITS: u32 = 10;
    /// Total width on the wire, in bits.
    pub const BITS: u32 = 21;
    /// Largest raw value.
    pub const MAX_RAW: u32 = (1 << Self::BITS) - 1;
    /// One packet.
    pub const ONE: Fcwnd = Fcwnd(1 << Self::FRACTION_BITS);
    /// The largest window, 2047 + 1023/1024 packets.
    pub const MAX: Fcwnd = Fcwnd(Self::MAX_RAW);

    /// A window from its raw fixed-point value, masked to 21 bits.
    pub const fn from_raw(raw: u32) -> Self {
        Fcwnd(raw & Self::MAX_RAW)
    }

    /// The raw fixed-point value (packets × 1024).
    pub const fn raw(self) -> u32 {
        self.0
    }

    /// A window from packets: `round(x × 1024)` (isekai `FloatToFixed`),
    /// saturating to 0 ..= [`Fcwnd::MAX`]; NaN becomes 0.
    pub fn from_f64(packets: f64) -> Self {
        let scaled = packets * (1u32 << Self::FRACTION_BITS) as f64;
        if scaled.is_nan() || scaled < 0.5 {
            return Fcwnd(0);
        }
        if scaled >= Self::MAX_RAW as f64 {
            return Self::MAX;
        }
        // Round half away from zero for a positive value; `f64::round` is a
        // libm call on baseline x86-64 (no SSE4.1), this is two instructions.
        Fcwnd((scaled + 0.5) as u32)
    }

    /// The window in packets.
    pub fn to_f64(self) -> f64 {
        self.0 as f64 / (1u32 << Self::FRACTION_BITS) as f64
    }

    /// Integer part, in packets (`fcwnd_integer`, 11 bits).
    pub const fn integer(self) -> u16 {
        (self.0 >> Self::FRACTION_BITS) as u16
    }

    /// Fractional part, in 1/1024 packet (`fcwnd_fraction`, 10 bits).
    pub const fn fraction(self) -> u16 {
        (self.0 & ((1 << Self::FRACTION_BITS) - 1)) as u16
    }
}

impl fmt::Display for Fcwnd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.3}", self.to_f64())
    }
}

// ---------------------------------------------------------------------------
// Enumerations
// ---------------------------------------------------------------------------

/// What triggered a CC event (`event_type`, 2 bits).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum EventType {
    /// An ACK (BACK or EACK) was received.
    #[default]
    Ack = 0,
    /// A NACK was received.
    Nack = 1,
    /// A packet was retransmitted (timeout or early).
    Retransmit = 2,
}

impl EventType {
    fn from_code(code: u32) -> Result<Self, FormatError> {
        match code {
            0 => Ok(EventType::Ack),
            1 => Ok(EventType::Nack),
            2 => Ok(EventType::Retransmit),
            other => Err(FormatError::UnknownEventType(other as u8)),
        }
    }
}

/// Why a packet was retransmitted (`retransmit_reason`, 1 bit).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum RetransmitReason {
    /// Retransmission timeout (RTO).
    #[default]
    Timeout = 0,
    /// Early retransmission (OOO distance, EACK-OWN, RACK, TLP).
    Early = 1,
}

/// Which delay the RUE computes from the four timestamps (`delay_select`,
/// 2 bits; OCP Falcon 0.9 §10.6.2.1).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum DelaySelect {
    /// `t4 − t1` (the full RTT).
    Full = 0,
    /// `(t4 − t1) − (t3 − t2)`: RTT without the receiver's ACK turnaround.
    #[default]
    Fabric = 1,
    /// `t2 − t1` (needs synchronized clocks).
    Forward = 2,
    /// `t4 − t3` (needs synchronized clocks).
    Reverse = 3,
}

impl DelaySelect {
    fn from_code(code: u32) -> Self {
        match code & 3 {
            0 => DelaySelect::Full,
            1 => DelaySelect::Fabric,
            2 => DelaySelect::Forward,
            _ => DelaySelect::Reverse,
        }
    }
}

/// Direction of the last ncwnd change (`ncwnd_direction`, 1 bit).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum NcwndDirection {
    /// The last change decreased ncwnd (or it sits at its minimum).
    #[default]
    Decrease = 0,
    /// The last change increased ncwnd (or it sits at its maximum).
    Increase = 1,
}

impl NcwndDirection {
    fn from_bit(bit: u32) -> Self {
        if bit & 1 == 1 {
            NcwndDirection::Increase
        } else {
            NcwndDirection::Decrease
        }
    }
}

/// NACK codes the RUE distinguishes (`nack_code`, 8 bits; isekai `falcon.h`).
pub mod nack_code {
    /// Not a NACK.
    pub const NOT_A_NACK: u8 = 0;
    /// The receiver dropped for lack of RX resources (ncwnd max decrease).
    pub const RX_RESOURCE_EXHAUSTION: u8 = 1;
    /// The ULP at the receiver was not ready (RNR).
    pub const ULP_RECEIVER_NOT_READY: u8 = 2;
    /// xLR drop.
    pub const XLR_DROP: u8 = 4;
    /// The packet was outside the receiver's window (isekai `kRxWindowError`,
    /// called `kReserved` in some isekai versions): Swift's optional max
    /// decrease reacts to it.
    pub const RX_WINDOW_ERROR: u8 = 5;
    /// ULP completion in error.
    pub const ULP_COMPLETION_IN_ERROR: u8 = 6;
    /// ULP non-recoverable error.
    pub const ULP_NON_RECOVERABLE_ERROR: u8 = 7;
    /// Invalid connection id.
    pub const INVALID_CID_ERROR: u8 = 8;
}

// ---------------------------------------------------------------------------
// Field widths (shared by both structs)
// ---------------------------------------------------------------------------

/// Largest connection id (24 bits).
pub const MAX_CONNECTION_ID: u32 = (1 << 24) - 1;
/// Largest `retransmit_count` (3 bits in Gen1).
pub const MAX_RETRANSMIT_COUNT: u8 = 7;
/// Largest `forward_hops` (4 bits).
pub const MAX_FORWARD_HOPS: u8 = 15;
/// Largest `rx_buffer_level` (5 bits).
pub const MAX_RX_BUFFER_LEVEL: u8 = 31;
/// Largest `cc_metadata` (24 bits).
pub const MAX_CC_METADATA: u32 = (1 << 24) - 1;
/// Largest `inter_packet_gap` (20 bits, timing-wheel units).
pub const MAX_INTER_PACKET_GAP: u32 = (1 << 20) - 1;
/// Largest `ncwnd` (11 bits, packets).
pub const MAX_NCWND: u16 = (1 << 11) - 1;
/// Largest `num_packets_acked` (10 bits; the counter saturates here).
pub const MAX_NUM_PACKETS_ACKED: u16 = (1 << 10) - 1;
/// Largest `event_queue_select` (2 bits).
pub const MAX_EVENT_QUEUE_SELECT: u8 = 3;
/// Largest 24-bit state field (`base_delay_target`, `delay_state`, `rtt_state`).
pub const MAX_STATE_24: u32 = (1 << 24) - 1;
/// Largest `cc_opaque` (2 bits).
pub const MAX_CC_OPAQUE: u8 = 3;
/// Largest `ecn_accumulated` (14 bits).
pub const MAX_ECN_ACCUMULATED: u16 = (1 << 14) - 1;
/// Largest `instance` (24 bits, our extension: see the module doc).
pub const MAX_INSTANCE: u32 = (1 << 24) - 1;

/// `num_packets_acked` from a packet count: saturates at 1023 (OCP Falcon 0.9
/// §10.6.2.1: "Counter ceils without wrapping around").
pub const fn saturate_acked(packets: u32) -> u16 {
    if packets > MAX_NUM_PACKETS_ACKED as u32 {
        MAX_NUM_PACKETS_ACKED
    } else {
        packets as u16
    }
}

// ---------------------------------------------------------------------------
// CC event
// ---------------------------------------------------------------------------

/// One CC event queue entry (Gen1, OCP Falcon 0.9 §10.6.2.1; spec/falcon.md
/// §7.1), produced by the packet delivery sublayer on an ACK, a NACK or a
/// retransmission. Fields in spec order, with their widths.
///
/// `Default` is an ACK event with every number zero and `delay_select`
/// Fabric (isekai's default), so callers can use struct update syntax. [`CcEvent::validate`] checks every field against its width;
/// [`CcEvent::encode`] masks out-of-range values.
///
/// # Time of the event
///
/// The RUE never reads a clock: "now" for an event is `t4`. For ACK/NACK
/// events `t4` is the ACK/NACK receive time (the spec's meaning); for
/// retransmit events, where the spec leaves `t1..t4` unused, the datapath
/// writes the time of the retransmission into `t4`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct CcEvent {
    /// Connection id, 24 bits.
    pub connection_id: u32,
    /// What triggered the event, 2 bits.
    pub event_type: EventType,
    /// Forward-path data packet TX time, Falcon units, 24 bits (ACK/NACK).
    pub t1: Time24,
    /// Forward-path data packet RX time at the peer, Falcon units, 24 bits (ACK/NACK).
    pub t2: Time24,
    /// Reverse-path ACK/NACK TX time at the peer, Falcon units, 24 bits (ACK/NACK).
    pub t3: Time24,
    /// Reverse-path ACK/NACK RX time, Falcon units, 24 bits; the event's "now",
    /// also for retransmit events (see the type's doc).
    pub t4: Time24,
    /// Cumulative timeout-retransmission count of the packet, 3 bits (retransmit
    /// events; isekai caps it at 6).
    pub retransmit_count: u8,
    /// Why the packet was retransmitted, 1 bits (retransmit events).
    pub retransmit_reason: RetransmitReason,
    /// NACK code as in the NACK header, 8 bits ([`nack_code`]; 0 for ACKs).
    pub nack_code: u8,
    /// Forward-path hop count (initial TTL − received TTL), 4 bits.
    pub forward_hops: u8,
    /// Quantized peer RX request-buffer level, 0..=31, 5 bits (ACK/NACK).
    pub rx_buffer_level: u8,
    /// RUE-to-RUE metadata from the ACK's CC info, low 24 bits, 24 bits
    /// (isekai splits it as `eack_own:2` in the low bits + `cc_metadata:22`).
    pub cc_metadata: u32,
    /// Current fabric congestion window, packets, 11.10 fixed point, 21 bits.
    pub fcwnd: Fcwnd,
    /// Current pacing gap, timing-wheel units of 512 ns, 20 bits.
    pub inter_packet_gap: u32,
    /// Current NIC congestion window, requests, 11 bits.
    pub ncwnd: u16,
    /// Current retransmit timeout, Falcon units, 24 bits.
    pub retransmit_timeout: Time24,
    /// Packets ACKed since the last event of this connection, saturating at
    /// 1023, 10 bits (see [`saturate_acked`]).
    pub num_packets_acked: u16,
    /// The triggering EACK showed loss by the OOO-distance rule, 1 bits.
    pub eack_drop: bool,
    /// The event was triggered by an EACK, 1 bits.
    pub eack: bool,
    /// Which RUE event queue the connection uses, 2 bits.
    pub event_queue_select: u8,
    /// Which delay the RUE computes, 2 bits.
    pub delay_select: DelaySelect,
    /// Fabric window guard time marker, Falcon units, 24 bits (§10.3.6).
    pub fabric_window_time_marker: Time24,
    /// NIC window guard time marker, Falcon units, 24 bits (§10.3.6).
    pub nic_window_time_marker: Time24,
    /// Direction of the last ncwnd change, 1 bits.
    pub ncwnd_direction: NcwndDirection,
    /// Base target delay field, 24 bits; our Swift (as isekai's) keeps the
    /// profile index in bits `[23:21]` and takes the base delay from the
    /// profile (spec/rue.md §2.10; see [`crate::profile_index`]).
    pub base_delay_target: u32,
    /// Smoothed delay state, Falcon units, 24 bits.
    pub delay_state: u32,
    /// Smoothed RTT state, Falcon units, 24 bits.
    pub rtt_state: u32,
    /// Software RUE scratch bits, 2 bits, reflected through the datapath.
    pub cc_opaque: u8,
    /// ECN-marked packets the peer has seen, wrapping counter, 14 bits.
    pub ecn_accumulated: u16,
    /// Which use of `connection_id` the event belongs to, 24 bits, in
    /// reserved bits (our extension, see the module doc); the RUE passes
    /// it through to the result.
    pub instance: u32,
    /// The first event of this instance: the RUE starts the connection's
    /// state from blank before running it, 1 bits, in reserved bits (our
    /// extension, see the module doc).
    pub new_instance: bool,
    /// Generation bit for software polling of new entries, 1 bits.
    pub gen: bool,
}

impl CcEvent {
    /// Size of the wire form, in bytes.
    pub const LEN: usize = 64;

    /// Checks every field against its width.
    ///
    /// # Errors
    ///
    /// [`FormatError::OutOfRange`] naming the first field that does not fit.
    pub fn validate(&self) -> Result<(), FormatError> {
        check("connection_id", self.connection_id, MAX_CONNECTION_ID)?;
        check(
            "retransmit_count",
            self.retransmit_count.into(),
            MAX_RETRANSMIT_COUNT.into(),
        )?;
        check(
            "forward_hops",
            self.forward_hops.into(),
            MAX_FORWARD_HOPS.into(),
        )?;
        check(
            "rx_buffer_level",
            self.rx_buffer_level.into(),
            MAX_RX_BUFFER_LEVEL.into(),
        )?;
        check("cc_metadata", self.cc_metadata, MAX_CC_METADATA)?;
        check(
            "inter_packet_gap",
            self.inter_packet_gap,
            MAX_INTER_PACKET_GAP,
        )?;
        check("ncwnd", self.ncwnd.into(), MAX_NCWND.into())?;
        check(
            "num_packets_acked",
            self.num_packets_acked.into(),
            MAX_NUM_PACKETS_ACKED.into(),
        )?;
        check(
            "event_queue_select",
            self.event_queue_select.into(),
            MAX_EVENT_QUEUE_SELECT.into(),
        )?;
        check("base_delay_target", self.base_delay_target, MAX_STATE_24)?;
        check("delay_state", self.delay_state, MAX_STATE_24)?;
        check("rtt_state", self.rtt_state, MAX_STATE_24)?;
        check("cc_opaque", self.cc_opaque.into(), MAX_CC_OPAQUE.into())?;
        check(
            "ecn_accumulated",
            self.ecn_accumulated.into(),
            MAX_ECN_ACCUMULATED.into(),
        )?;
        check("instance", self.instance, MAX_INSTANCE)
    }

    /// The 64-byte wire form (bit order in the module doc). Values wider
    /// than their field are masked; reserved bits are zero.
    pub fn encode(&self) -> [u8; 64] {
        use field::event as f;
        let mut w = [0u64; 8];
        put(&mut w, f::CONNECTION_ID, self.connection_id);
        put(&mut w, f::EVENT_TYPE, self.event_type as u32);
        put(&mut w, f::T1, self.t1.value());
        put(&mut w, f::T2, self.t2.value());
        put(&mut w, f::T3, self.t3.value());
        put(&mut w, f::T4, self.t4.value());
        put(&mut w, f::RETRANSMIT_COUNT, self.retransmit_count.into());
        put(&mut w, f::RETRANSMIT_REASON, self.retransmit_reason as u32);
        put(&mut w, f::NACK_CODE, self.nack_code.into());
        put(&mut w, f::FORWARD_HOPS, self.forward_hops.into());
        put(&mut w, f::RX_BUFFER_LEVEL, self.rx_buffer_level.into());
        put(&mut w, f::CC_METADATA, self.cc_metadata);
        put(&mut w, f::FCWND, self.fcwnd.raw());
        put(&mut w, f::INTER_PACKET_GAP, self.inter_packet_gap);
        put(&mut w, f::NCWND, self.ncwnd.into());
        put(
            &mut w,
            f::RETRANSMIT_TIMEOUT,
            self.retransmit_timeout.value(),
        );
        put(&mut w, f::NUM_PACKETS_ACKED, self.num_packets_acked.into());
        put(&mut w, f::EACK_DROP, self.eack_drop.into());
        put(&mut w, f::EACK, self.eack.into());
        put(
            &mut w,
            f::EVENT_QUEUE_SELECT,
            self.event_queue_select.into(),
        );
        put(&mut w, f::DELAY_SELECT, self.delay_select as u32);
        put(
            &mut w,
            f::FABRIC_WINDOW_TIME_MARKER,
            self.fabric_window_time_marker.value(),
        );
        put(
            &mut w,
            f::NIC_WINDOW_TIME_MARKER,
            self.nic_window_time_marker.value(),
        );
        put(&mut w, f::NCWND_DIRECTION, self.ncwnd_direction as u32);
        put(&mut w, f::BASE_DELAY_TARGET, self.base_delay_target);
        put(&mut w, f::DELAY_STATE, self.delay_state);
        put(&mut w, f::RTT_STATE, self.rtt_state);
        put(&mut w, f::CC_OPAQUE, self.cc_opaque.into());
        put(&mut w, f::ECN_ACCUMULATED, self.ecn_accumulated.into());
        put(&mut w, f::INSTANCE, self.instance);
        put(&mut w, f::NEW_INSTANCE, self.new_instance.into());
        put(&mut w, f::GEN, self.gen.into());
        words_to_bytes(&w)
    }

    /// Copies the connection's CC state from its last result into this
    /// event (what the datapath does before every event; see the module
    /// doc): windows, gap, RTO, time markers, direction, base delay field,
    /// delay and RTT state, `cc_opaque`, event queue and delay select. Not
    /// `cc_metadata`, which in an event is the peer's (from the ACK).
    pub fn carry_state(&mut self, last: &CcResult) {
        self.fcwnd = last.fcwnd;
        self.inter_packet_gap = last.inter_packet_gap;
        self.ncwnd = last.ncwnd;
        self.retransmit_timeout = last.retransmit_timeout;
        self.event_queue_select = last.event_queue_select;
        self.delay_select = last.delay_select;
        self.fabric_window_time_marker = last.fabric_window_time_marker;
        self.nic_window_time_marker = last.nic_window_time_marker;
        self.ncwnd_direction = last.ncwnd_direction;
        self.base_delay_target = last.base_delay_target;
        self.delay_state = last.delay_state;
        self.rtt_state = last.rtt_state;
        self.cc_opaque = last.cc_opaque;
    }

    /// Parses the 64-byte wire form. Reserved bits are ignored.
    ///
    /// # Errors
    ///
    /// [`FormatError::UnknownEventType`] for `event_type` code 3 (every other
    /// field decodes to a valid value by construction of its width).
    pub fn decode(bytes: &[u8; 64]) -> Result<CcEvent, FormatError> {
        use field::event as f;
        let w = bytes_to_words(bytes);
        Ok(CcEvent {
            connection_id: get(&w, f::CONNECTION_ID),
            event_type: EventType::from_code(get(&w, f::EVENT_TYPE))?,
            t1: Time24::new(get(&w, f::T1)),
            t2: Time24::new(get(&w, f::T2)),
            t3: Time24::new(get(&w, f::T3)),
            t4: Time24::new(get(&w, f::T4)),
            retransmit_count: get(&w, f::RETRANSMIT_COUNT) as u8,
            retransmit_reason: if get(&w, f::RETRANSMIT_REASON) == 0 {
                RetransmitReason::Timeout
            } else {
                RetransmitReason::Early
            },
            nack_code: get(&w, f::NACK_CODE) as u8,
            forward_hops: get(&w, f::FORWARD_HOPS) as u8,
            rx_buffer_level: get(&w, f::RX_BUFFER_LEVEL) as u8,
            cc_metadata: get(&w, f::CC_METADATA),
            fcwnd: Fcwnd::from_raw(get(&w, f::FCWND)),
            inter_packet_gap: get(&w, f::INTER_PACKET_GAP),
            ncwnd: get(&w, f::NCWND) as u16,
            retransmit_timeout: Time24::new(get(&w, f::RETRANSMIT_TIMEOUT)),
            num_packets_acked: get(&w, f::NUM_PACKETS_ACKED) as u16,
            eack_drop: get(&w, f::EACK_DROP) == 1,
            eack: get(&w, f::EACK) == 1,
            event_queue_select: get(&w, f::EVENT_QUEUE_SELECT) as u8,
            delay_select: DelaySelect::from_code(get(&w, f::DELAY_SELECT)),
            fabric_window_time_marker: Time24::new(get(&w, f::FABRIC_WINDOW_TIME_MARKER)),
            nic_window_time_marker: Time24::new(get(&w, f::NIC_WINDOW_TIME_MARKER)),
            ncwnd_direction: NcwndDirection::from_bit(get(&w, f::NCWND_DIRECTION)),
            base_delay_target: get(&w, f::BASE_DELAY_TARGET),
            delay_state: get(&w, f::DELAY_STATE),
            rtt_state: get(&w, f::RTT_STATE),
            cc_opaque: get(&w, f::CC_OPAQUE) as u8,
            ecn_accumulated: get(&w, f::ECN_ACCUMULATED) as u16,
            instance: get(&w, f::INSTANCE),
            new_instance: get(&w, f::NEW_INSTANCE) == 1,
            gen: get(&w, f::GEN) == 1,
        })
    }
}

// ---------------------------------------------------------------------------
// CC result
// ---------------------------------------------------------------------------

/// One CC result queue entry (Gen1, OCP Falcon 0.9 §10.6.2.2; spec/falcon.md
/// §7.2), produced by the RUE for every event it consumes. The datapath
/// applies the windows, gap and RTO, repaths on `randomize_path`, and keeps
/// the state fields to copy into the connection's next event.
///
/// spec/falcon.md §9 item 10: the spec's result table lacks
/// `event_queue_select` and `delay_select`; we carry them where isekai's
/// `Response_Gen1` does (after `retransmit_timeout`), which makes 512 bits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct CcResult {
    /// Connection id, passed through from the event, 24 bits.
    pub connection_id: u32,
    /// Change the connection's path (new IPv6 flow label / UDP source port)
    ///, 1 bits (PLB or PRR).
    pub randomize_path: bool,
    /// RUE-to-RUE metadata to put in outgoing ACKs, 24 bits.
    pub cc_metadata: u32,
    /// New fabric congestion window, packets, 11.10 fixed point, 21 bits.
    pub fcwnd: Fcwnd,
    /// New pacing gap, timing-wheel units of 512 ns, 20 bits; 0 when fcwnd ≥ 1.
    /// The datapath sets a packet's departure to `now + gap`.
    pub inter_packet_gap: u32,
    /// New NIC congestion window, requests, 11 bits.
    pub ncwnd: u16,
    /// New retransmit timeout, Falcon units, 24 bits; applies to outstanding
    /// packets too.
    pub retransmit_timeout: Time24,
    /// Event queue select, passed through, 2 bits.
    pub event_queue_select: u8,
    /// Delay select, passed through, 2 bits.
    pub delay_select: DelaySelect,
    /// New fabric window time marker, Falcon units, 24 bits.
    pub fabric_window_time_marker: Time24,
    /// New NIC window time marker, Falcon units, 24 bits.
    pub nic_window_time_marker: Time24,
    /// New direction of the last ncwnd change, 1 bits.
    pub ncwnd_direction: NcwndDirection,
    /// Base target delay field, passed through, 24 bits.
    pub base_delay_target: u32,
    /// New smoothed delay state, Falcon units, 24 bits.
    pub delay_state: u32,
    /// New smoothed RTT state, Falcon units, 24 bits.
    pub rtt_state: u32,
    /// Software RUE scratch bits, 2 bits.
    pub cc_opaque: u8,
    /// The event's `instance`, passed through, 24 bits, in padding bits
    /// (our extension, see the module doc).
    pub instance: u32,
}

impl CcResult {
    /// Size of the wire form, in bytes.
    pub const LEN: usize = 64;

    /// Checks every field against its width.
    ///
    /// # Errors
    ///
    /// [`FormatError::OutOfRange`] naming the first field that does not fit.
    pub fn validate(&self) -> Result<(), FormatError> {
        check("connection_id", self.connection_id, MAX_CONNECTION_ID)?;
        check("cc_metadata", self.cc_metadata, MAX_CC_METADATA)?;
        check(
            "inter_packet_gap",
            self.inter_packet_gap,
            MAX_INTER_PACKET_GAP,
        )?;
        check("ncwnd", self.ncwnd.into(), MAX_NCWND.into())?;
        check(
            "event_queue_select",
            self.event_queue_select.into(),
            MAX_EVENT_QUEUE_SELECT.into(),
        )?;
        check("base_delay_target", self.base_delay_target, MAX_STATE_24)?;
        check("delay_state", self.delay_state, MAX_STATE_24)?;
        check("rtt_state", self.rtt_state, MAX_STATE_24)?;
        check("cc_opaque", self.cc_opaque.into(), MAX_CC_OPAQUE.into())?;
        check("instance", self.instance, MAX_INSTANCE)
    }

    /// The 64-byte wire form (bit order in the module doc). Values wider
    /// than their field are masked; the 236 padding bits are zero.
    pub fn encode(&self) -> [u8; 64] {
        use field::result as f;
        let mut w = [0u64; 8];
        put(&mut w, f::CONNECTION_ID, self.connection_id);
        put(&mut w, f::RANDOMIZE_PATH, self.randomize_path.into());
        put(&mut w, f::CC_METADATA, self.cc_metadata);
        put(&mut w, f::FCWND, self.fcwnd.raw());
        put(&mut w, f::INTER_PACKET_GAP, self.inter_packet_gap);
        put(&mut w, f::NCWND, self.ncwnd.into());
        put(
            &mut w,
            f::RETRANSMIT_TIMEOUT,
            self.retransmit_timeout.value(),
        );
        put(
            &mut w,
            f::EVENT_QUEUE_SELECT,
            self.event_queue_select.into(),
        );
        put(&mut w, f::DELAY_SELECT, self.delay_select as u32);
        put(
            &mut w,
            f::FABRIC_WINDOW_TIME_MARKER,
            self.fabric_window_time_marker.value(),
        );
        put(
            &mut w,
            f::NIC_WINDOW_TIME_MARKER,
            self.nic_window_time_marker.value(),
        );
        put(&mut w, f::NCWND_DIRECTION, self.ncwnd_direction as u32);
        put(&mut w, f::BASE_DELAY_TARGET, self.base_delay_target);
        put(&mut w, f::DELAY_STATE, self.delay_state);
        put(&mut w, f::RTT_STATE, self.rtt_state);
        put(&mut w, f::CC_OPAQUE, self.cc_opaque.into());
        put(&mut w, f::INSTANCE, self.instance);
        words_to_bytes(&w)
    }

    /// Parses the 64-byte wire form. Padding bits are ignored.
    ///
    /// # Errors
    ///
    /// None today (every field decodes to a valid value); the `Result` keeps
    /// the signature symmetric with [`CcEvent::decode`].
    pub fn decode(bytes: &[u8; 64]) -> Result<CcResult, FormatError> {
        use field::result as f;
        let w = bytes_to_words(bytes);
        Ok(CcResult {
            connection_id: get(&w, f::CONNECTION_ID),
            randomize_path: get(&w, f::RANDOMIZE_PATH) == 1,
            cc_metadata: get(&w, f::CC_METADATA),
            fcwnd: Fcwnd::from_raw(get(&w, f::FCWND)),
            inter_packet_gap: get(&w, f::INTER_PACKET_GAP),
            ncwnd: get(&w, f::NCWND) as u16,
            retransmit_timeout: Time24::new(get(&w, f::RETRANSMIT_TIMEOUT)),
            event_queue_select: get(&w, f::EVENT_QUEUE_SELECT) as u8,
            delay_select: DelaySelect::from_code(get(&w, f::DELAY_SELECT)),
            fabric_window_time_marker: Time24::new(get(&w, f::FABRIC_WINDOW_TIME_MARKER)),
            nic_window_time_marker: Time24::new(get(&w, f::NIC_WINDOW_TIME_MARKER)),
            ncwnd_direction: NcwndDirection::from_bit(get(&w, f::NCWND_DIRECTION)),
            base_delay_target: get(&w, f::BASE_DELAY_TARGET),
            delay_state: get(&w, f::DELAY_STATE),
            rtt_state: get(&w, f::RTT_STATE),
            cc_opaque: get(&w, f::CC_OPAQUE) as u8,
            instance: get(&w, f::INSTANCE),
        })
    }

    /// The CC state a new connection starts from, before its first result
    /// (isekai `DefaultRue` / simulator defaults, spec/rue.md §1.7, §1.9):
    /// fcwnd 32, ncwnd 64, RTO 1 ms (7629 units), RTT and delay state
    /// 25 µs (191 units), markers at `now`, direction Increase, fabric
    /// delay, no pacing. `base_delay_target` selects the profile (see
    /// `Profiles::base_delay_field`).
    pub fn initial(connection_id: u32, base_delay_target: u32, now: Time24) -> CcResult {
        CcResult {
            connection_id: connection_id & MAX_CONNECTION_ID,
            randomize_path: false,
            cc_metadata: 0,
            fcwnd: Fcwnd(32 << Fcwnd::FRACTION_BITS),
            inter_packet_gap: 0,
            ncwnd: 64,
            retransmit_timeout: Time24::new(7629),
            event_queue_select: 0,
            delay_select: DelaySelect::Fabric,
            fabric_window_time_marker: now,
            nic_window_time_marker: now,
            ncwnd_direction: NcwndDirection::Increase,
            base_delay_target: base_delay_target & MAX_STATE_24,
            delay_state: 191,
            rtt_state: 191,
            cc_opaque: 0,
            instance: 0,
        }
    }

    /// A result that leaves everything as the event had it (the bypass
    /// baseline every algorithm starts from).
    pub fn reflect(event: &CcEvent) -> CcResult {
        CcResult {
            connection_id: event.connection_id,
            randomize_path: false,
            cc_metadata: event.cc_metadata,
            fcwnd: event.fcwnd,
            inter_packet_gap: event.inter_packet_gap,
            ncwnd: event.ncwnd,
            retransmit_timeout: event.retransmit_timeout,
            event_queue_select: event.event_queue_select,
            delay_select: event.delay_select,
            fabric_window_time_marker: event.fabric_window_time_marker,
            nic_window_time_marker: event.nic_window_time_marker,
            ncwnd_direction: event.ncwnd_direction,
            base_delay_target: event.base_delay_target,
            delay_state: event.delay_state,
            rtt_state: event.rtt_state,
            cc_opaque: event.cc_opaque,
            instance: event.instance,
        }
    }
}

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

/// Why an event or result could not be decoded or does not fit its fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FormatError {
    /// `event_type` carried the undefined code 3.
    UnknownEventType(u8),
    /// A field's value is wider than the field.
    OutOfRange {
        /// The field, as named in the spec.
        field: &'static str,
        /// The offending value.
        value: u32,
        /// The largest value the field holds.
        max: u32,
    },
}

impl fmt::Display for FormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FormatError::UnknownEventType(code) => write!(f, "unknown RUE event type {code}"),
            FormatError::OutOfRange { field, value, max } => {
                write!(f, "{field} = {value} exceeds its maximum {max}")
            }
        }
    }
}

impl std::error::Error for FormatError {}

fn check(field: &'static str, value: u32, max: u32) -> Result<(), FormatError> {
    if value > max {
        return Err(FormatError::OutOfRange { field, value, max });
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Bit positions (LSB-first, see the module doc)
// ---------------------------------------------------------------------------

/// A field of the 512-bit entry: first bit (from bit 0 of byte 0) and width.
#[derive(Clone, Copy)]
struct Field {
    offset: u16,
    width: u16,
}

const fn after(prev: Field, width: u16) -> Field {
    Field {
        offset: prev.offset + prev.width,
        width,
    }
}

mod field {
    pub(super) mod event {
        use super::super::{after, Field};
        // OCP Falcon 0.9 §10.6.2.1 table order; widths sum to 512.
        pub const CONNECTION_ID: Field = Field {
            offset: 0,
            width: 24,
        };
        pub const EVENT_TYPE: Field = after(CONNECTION_ID, 2);
        pub const T1: Field = after(EVENT_TYPE, 24);
        pub const T2: Field = after(T1, 24);
        pub const T3: Field = after(T2, 24);
        pub const T4: Field = after(T3, 24);
        pub const RETRANSMIT_COUNT: Field = after(T4, 3);
        pub const RETRANSMIT_REASON: Field = after(RETRANSMIT_COUNT, 1);
        pub const NACK_CODE: Field = after(RETRANSMIT_REASON, 8);
        pub const FORWARD_HOPS: Field = after(NACK_CODE, 4);
        pub const RX_BUFFER_LEVEL: Field = after(FORWARD_HOPS, 5);
        pub const CC_METADATA: Field = after(RX_BUFFER_LEVEL, 24);
        // fcwnd_fraction:10 then fcwnd_integer:11 = one 21-bit 11.10 value.
        pub const FCWND: Field = after(CC_METADATA, 21);
        pub const INTER_PACKET_GAP: Field = after(FCWND, 20);
        pub const NCWND: Field = after(INTER_PACKET_GAP, 11);
        pub const RETRANSMIT_TIMEOUT: Field = after(NCWND, 24);
        pub const NUM_PACKETS_ACKED: Field = after(RETRANSMIT_TIMEOUT, 10);
        pub const EACK_DROP: Field = after(NUM_PACKETS_ACKED, 1);
        pub const EACK: Field = after(EACK_DROP, 1);
        pub const RESERVED_0: Field = after(EACK, 8);
        pub const EVENT_QUEUE_SELECT: Field = after(RESERVED_0, 2);
        pub const DELAY_SELECT: Field = after(EVENT_QUEUE_SELECT, 2);
        pub const FABRIC_WINDOW_TIME_MARKER: Field = after(DELAY_SELECT, 24);
        pub const NIC_WINDOW_TIME_MARKER: Field = after(FABRIC_WINDOW_TIME_MARKER, 24);
        pub const NCWND_DIRECTION: Field = after(NIC_WINDOW_TIME_MARKER, 1);
        pub const BASE_DELAY_TARGET: Field = after(NCWND_DIRECTION, 24);
        pub const DELAY_STATE: Field = after(BASE_DELAY_TARGET, 24);
        pub const RTT_STATE: Field = after(DELAY_STATE, 24);
        pub const CC_OPAQUE: Field = after(RTT_STATE, 2);
        pub const ECN_ACCUMULATED: Field = after(CC_OPAQUE, 14);
        // 107 reserved bits (isekai: 64 + 43), then the generation bit. Our
        // extension takes the first 25 of them (see the module doc).
        pub const INSTANCE: Field = after(ECN_ACCUMULATED, 24);
        pub const NEW_INSTANCE: Field = after(INSTANCE, 1);
        pub const RESERVED_1: Field = after(NEW_INSTANCE, 82);
        pub const GEN: Field = after(RESERVED_1, 1);
    }

    pub(super) mod result {
        use super::super::{after, Field};
        // OCP Falcon 0.9 §10.6.2.2 table order plus isekai's event/delay
        // select (spec/falcon.md §9 item 10); 252 bits used, 260 padding,
        // of which our extension takes the first 24 (see the module doc).
        pub const CONNECTION_ID: Field = Field {
            offset: 0,
            width: 24,
        };
        pub const RANDOMIZE_PATH: Field = after(CONNECTION_ID, 1);
        pub const CC_METADATA: Field = after(RANDOMIZE_PATH, 24);
        pub const FCWND: Field = after(CC_METADATA, 21);
        pub const INTER_PACKET_GAP: Field = after(FCWND, 20);
        pub const NCWND: Field = after(INTER_PACKET_GAP, 11);
        pub const RETRANSMIT_TIMEOUT: Field = after(NCWND, 24);
        pub const EVENT_QUEUE_SELECT: Field = after(RETRANSMIT_TIMEOUT, 2);
        pub const DELAY_SELECT: Field = after(EVENT_QUEUE_SELECT, 2);
        pub const FABRIC_WINDOW_TIME_MARKER: Field = after(DELAY_SELECT, 24);
        pub const NIC_WINDOW_TIME_MARKER: Field = after(FABRIC_WINDOW_TIME_MARKER, 24);
        pub const NCWND_DIRECTION: Field = after(NIC_WINDOW_TIME_MARKER, 1);
        pub const BASE_DELAY_TARGET: Field = after(NCWND_DIRECTION, 24);
        pub const DELAY_STATE: Field = after(BASE_DELAY_TARGET, 24);
        pub const RTT_STATE: Field = after(DELAY_STATE, 24);
        pub const CC_OPAQUE: Field = after(RTT_STATE, 2);
        pub const INSTANCE: Field = after(CC_OPAQUE, 24);
        pub const PADDING: Field = after(INSTANCE, 236);
    }
}

// The layouts must fill exactly one 64-byte cache line (isekai static_asserts).
const _: () = assert!(field::event::GEN.offset + field::event::GEN.width == 512);
const _: () = assert!(field::result::PADDING.offset + field::result::PADDING.width == 512);

fn bytes_to_words(bytes: &[u8; 64]) -> [u64; 8] {
    let mut words = [0u64; 8];
    for (word, chunk) in words.iter_mut().zip(bytes.chunks_exact(8)) {
        let mut le = [0u8; 8];
        le.copy_from_slice(chunk);
        *word = u64::from_le_bytes(le);
    }
    words
}

fn words_to_bytes(words: &[u64; 8]) -> [u8; 64] {
    let mut bytes = [0u8; 64];
    for (chunk, word) in bytes.chunks_exact_mut(8).zip(words) {
        chunk.copy_from_slice(&word.to_le_bytes());
    }
    bytes
}

/// Reads a field of at most 32 bits. Fields never extend past bit 511, so
/// `index + 1 < 8` whenever a field straddles a word boundary.
#[inline]
fn get(words: &[u64; 8], field: Field) -> u32 {
    let index = (field.offset / 64) as usize;
    let shift = u32::from(field.offset % 64);
    let mask = (1u64 << field.width) - 1;
    let mut value = words[index] >> shift;
    if shift + u32::from(field.width) > 64 {
        value |= words[index + 1] << (64 - shift);
    }
    (value & mask) as u32
}

/// Writes a field of at most 32 bits into zeroed bits, masking the value.
#[inline]
fn put(words: &mut [u64; 8], field: Field, value: u32) {
    let index = (field.offset / 64) as usize;
    let shift = u32::from(field.offset % 64);
    let mask = (1u64 << field.width) - 1;
    let value = u64::from(value) & mask;
    words[index] |= value << shift;
    if shift + u32::from(field.width) > 64 {
        words[index + 1] |= value >> (64 - shift);
    }
}

#[cfg(test)]
mod tests;
