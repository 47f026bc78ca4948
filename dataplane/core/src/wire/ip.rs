//! Field types shared by IPv4 and IPv6.
//!
//! Layer: wire. Owns [`IpProtocol`] (IPv4 protocol / IPv6 next header),
//! [`Dscp`] and [`Ecn`], the two halves of the IPv4 DSCP/ECN byte and of the
//! IPv6 traffic class (RFC 2474, RFC 3168). ECN marks feed Falcon's congestion
//! control (the ECN count in ACKs, OCP Falcon 0.9 §7.7.1). Values only; no IO.

enum_with_unknown! {
    /// IP protocol number (IPv4 Protocol, IPv6 Next Header; IANA registry).
    pub enum IpProtocol(u8) {
        /// IPv6 Hop-by-Hop Options (an extension header; not walked here).
        HopByHop = 0,
        /// ICMP.
        Icmp = 1,
        /// TCP.
        Tcp = 6,
        /// UDP: the only protocol the Falcon frame path accepts.
        Udp = 17,
        /// IPv6 Routing header.
        Ipv6Route = 43,
        /// IPv6 Fragment header.
        Ipv6Fragment = 44,
        /// ICMPv6.
        Icmpv6 = 58,
    }
}

bounded_uint! {
    /// Differentiated Services Code Point: the upper 6 bits of the IPv4
    /// DSCP/ECN byte and of the IPv6 traffic class (RFC 2474).
    pub struct Dscp(u8, bits = 6, what = "DSCP");
}

/// Explicit Congestion Notification codepoint: the low 2 bits of the IPv4
/// DSCP/ECN byte and of the IPv6 traffic class (RFC 3168 §5). All four values
/// are assigned, so decoding cannot fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Ecn {
    /// 00: not ECN-capable transport.
    #[default]
    NotEct,
    /// 01: ECN-capable transport, ECT(1).
    Ect1,
    /// 10: ECN-capable transport, ECT(0).
    Ect0,
    /// 11: congestion experienced.
    Ce,
}

impl Ecn {
    /// Decodes the low 2 bits of `bits`.
    pub const fn from_bits(bits: u8) -> Self {
        match bits & 0b11 {
            0b00 => Ecn::NotEct,
            0b01 => Ecn::Ect1,
            0b10 => Ecn::Ect0,
            _ => Ecn::Ce,
        }
    }

    /// The 2-bit codepoint.
    pub const fn bits(self) -> u8 {
        match self {
            Ecn::NotEct => 0b00,
            Ecn::Ect1 => 0b01,
            Ecn::Ect0 => 0b10,
            Ecn::Ce => 0b11,
        }
    }

    /// The packet was marked by a congested queue.
    pub const fn is_congestion_experienced(self) -> bool {
        matches!(self, Ecn::Ce)
    }
}

/// Packs DSCP and ECN into the IPv4 DSCP/ECN byte or IPv6 traffic class.
pub(crate) const fn traffic_class(dscp: Dscp, ecn: Ecn) -> u8 {
    (dscp.value() << 2) | ecn.bits()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ecn_codepoints() {
        for bits in 0..4u8 {
            assert_eq!(Ecn::from_bits(bits).bits(), bits);
        }
        assert!(Ecn::from_bits(3).is_congestion_experienced());
        assert_eq!(Ecn::from_bits(0b10), Ecn::Ect0);
        assert_eq!(traffic_class(Dscp::truncating(46), Ecn::Ce), 0xBB);
    }

    #[test]
    fn protocol_codes() {
        assert_eq!(IpProtocol::from(17), IpProtocol::Udp);
        assert_eq!(IpProtocol::from(99), IpProtocol::Unknown(99));
        assert_eq!(u8::from(IpProtocol::Unknown(99)), 99);
        assert!(Dscp::new(64).is_err());
    }
}
