//! Identifiers carried in Falcon headers.
//!
//! Layer: wire types shared with the connection table. Owns
//! [`ConnectionId`] and [`DestinationFunction`], both 24-bit fields whose
//! constructors reject wider values ([`RangeError`](crate::error::RangeError)),
//! so a value of these types always fits its field. Decoding from the wire
//! cannot fail: three bytes always make a valid value.

bounded_uint! {
    /// Destination Connection ID (24 bits), chosen by the receiver; the source
    /// CID is never on the wire (OCP Falcon 0.9 §7.2 p.25, §7.7.1 p.32).
    /// Travels in clear: the PSP crypt offset leaves the first 4 Falcon bytes
    /// unencrypted (§7.1 p.23).
    pub struct ConnectionId(u32, bits = 24, what = "connection id");
}

bounded_uint! {
    /// Destination Function (24 bits): the `<Host, PF, VF>` tuple of the
    /// receiving function (OCP Falcon 0.9 §7.2 p.25). The spec never gives the
    /// sub-field split (spec/falcon.md §10), so it is an opaque per-connection
    /// value, checked on receive (DESIGN.md §4).
    pub struct DestinationFunction(u32, bits = 24, what = "destination function");
}

impl PartialOrd for ConnectionId {
    fn partial_cmp(&self, other: &Self) -> Option<core::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// Connection ids are plain identifiers (no wrap), so ordering them for
/// ordered maps and sharding is meaningful.
impl Ord for ConnectionId {
    fn cmp(&self, other: &Self) -> core::cmp::Ordering {
        self.0.cmp(&other.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::RangeError;

    #[test]
    fn connection_id_is_24_bits() {
        assert_eq!(ConnectionId::MAX.value(), 0x00FF_FFFF);
        assert_eq!(
            ConnectionId::new(0x00AB_CDEF).map(|c| c.value()),
            Ok(0x00AB_CDEF)
        );
        assert_eq!(
            ConnectionId::new(0x0100_0000),
            Err(RangeError {
                what: "connection id",
                value: 0x0100_0000,
                max: 0x00FF_FFFF
            })
        );
        assert_eq!(ConnectionId::truncating(0x1234_5678).value(), 0x0034_5678);
        assert_eq!(ConnectionId::saturating(u32::MAX), ConnectionId::MAX);
        assert!(ConnectionId::truncating(1) < ConnectionId::truncating(2));
        assert_eq!(ConnectionId::try_from(5u32).map(u32::from), Ok(5));
    }

    #[test]
    fn destination_function_is_opaque_24_bits() {
        assert!(DestinationFunction::new(0x00FF_FFFF).is_ok());
        assert!(DestinationFunction::new(0x0100_0000).is_err());
        assert_eq!(
            DestinationFunction::truncating(0xFF12_3456).to_string(),
            "1193046"
        );
    }
}
