//! What every Falcon header shares: the first 16 bytes.
//!
//! Layer: wire internals. Owns the byte ranges of the fields at the same
//! place in the base, ACK and NACK headers (OCP Falcon 0.9 §7.2 p.25: "ACK and
//! NACK's own headers also have this Packet Type field at the same location";
//! §7.7.1 p.31 and §7.8 p.35 figures), and the macros that give each view its
//! accessors for them, so each range is written down once. Generated
//! accessors index only below 16 bytes, which every view's `check_len`
//! guarantees.
//!
//! ```text
//!  byte  0: Version (7:4) | reserved (3:0)
//!  bytes 1–3: Destination Connection ID (24b)
//!  bytes 4–6: Destination Function (base header) / reserved (ACK, NACK)
//!  byte  7: Protocol Type (7:5, base) | Packet Type (4:1) | AR (0, base) / R
//!  bytes 8–11: Receiver Data Window Base PSN
//!  bytes 12–15: Receiver Request Window Base PSN
//! ```

/// The Falcon version this crate speaks (OCP Falcon 0.9 §7.2 p.25: "must be
/// set to 1").
pub const FALCON_VERSION: u8 = 1;

pub(crate) mod field {
    use crate::wire::bytes::Field;

    pub(crate) const VERSION: usize = 0;
    pub(crate) const VERSION_MASK: u8 = 0xF0;
    pub(crate) const VERSION_SHIFT: u32 = 4;
    pub(crate) const CONNECTION_ID: Field = 1..4;
    /// Byte 7 holds protocol type, packet type and AR.
    pub(crate) const TYPE_BYTE: usize = 7;
    pub(crate) const PACKET_TYPE_MASK: u8 = 0x1E;
    pub(crate) const PACKET_TYPE_SHIFT: u32 = 1;
    pub(crate) const DATA_BPSN: Field = 8..12;
    pub(crate) const REQUEST_BPSN: Field = 12..16;
}

/// Bytes needed to read the version, connection id and packet type.
pub const PEEK_LEN: usize = field::TYPE_BYTE + 1;

/// Getters for the shared fields, for an `impl<T: AsRef<[u8]>>` block of a
/// view with a `buffer: T` field.
macro_rules! common_getters {
    () => {
        /// Version (byte 0 bits 7:4); 1 in Falcon 0.9.
        // Inline with `packet_type`: the typed parsers' repeated checks fold
        // into the dispatch's.
        #[inline]
        pub fn version(&self) -> u8 {
            use $crate::wire::falcon::common::field;
            (self.buffer.as_ref()[field::VERSION] & field::VERSION_MASK) >> field::VERSION_SHIFT
        }

        /// Destination connection id (bytes 1–3).
        pub fn connection_id(&self) -> $crate::ids::ConnectionId {
            use $crate::wire::falcon::common::field;
            let raw = $crate::wire::bytes::read_u24(&self.buffer.as_ref()[field::CONNECTION_ID]);
            $crate::ids::ConnectionId::truncating(raw)
        }

        /// Packet type (byte 7 bits 4:1).
        #[inline]
        pub fn packet_type(&self) -> $crate::wire::falcon::PacketType {
            use $crate::wire::falcon::common::field;
            let byte = self.buffer.as_ref()[field::TYPE_BYTE];
            $crate::wire::falcon::PacketType::from(
                (byte & field::PACKET_TYPE_MASK) >> field::PACKET_TYPE_SHIFT,
            )
        }

        /// Receiver data-window base PSN (bytes 8–11): the piggy-backed
        /// cumulative ACK of the data window.
        pub fn data_bpsn(&self) -> $crate::seq::Psn {
            use $crate::wire::falcon::common::field;
            $crate::seq::Psn::new($crate::wire::bytes::read_u32(
                &self.buffer.as_ref()[field::DATA_BPSN],
            ))
        }

        /// Receiver request-window base PSN (bytes 12–15): the piggy-backed
        /// cumulative ACK of the request window.
        pub fn request_bpsn(&self) -> $crate::seq::Psn {
            use $crate::wire::falcon::common::field;
            $crate::seq::Psn::new($crate::wire::bytes::read_u32(
                &self.buffer.as_ref()[field::REQUEST_BPSN],
            ))
        }
    };
}

/// Setters for the shared fields, for an
/// `impl<T: AsRef<[u8]> + AsMut<[u8]>>` block. `set_version` also zeroes
/// the reserved low nibble of byte 0.
macro_rules! common_setters {
    () => {
        /// Sets the version and zeroes the reserved bits of byte 0.
        pub fn set_version(&mut self, version: u8) {
            use $crate::wire::falcon::common::field;
            self.buffer.as_mut()[field::VERSION] =
                (version << field::VERSION_SHIFT) & field::VERSION_MASK;
        }

        /// Sets the destination connection id.
        pub fn set_connection_id(&mut self, cid: $crate::ids::ConnectionId) {
            use $crate::wire::falcon::common::field;
            $crate::wire::bytes::write_u24(
                &mut self.buffer.as_mut()[field::CONNECTION_ID],
                cid.value(),
            );
        }

        /// Sets the packet type, keeping the other bits of byte 7.
        pub fn set_packet_type(&mut self, packet_type: $crate::wire::falcon::PacketType) {
            use $crate::wire::falcon::common::field;
            $crate::wire::bytes::write_bits(
                &mut self.buffer.as_mut()[field::TYPE_BYTE],
                field::PACKET_TYPE_MASK,
                field::PACKET_TYPE_SHIFT,
                packet_type.into(),
            );
        }

        /// Sets the receiver data-window base PSN.
        pub fn set_data_bpsn(&mut self, psn: $crate::seq::Psn) {
            use $crate::wire::falcon::common::field;
            $crate::wire::bytes::write_u32(
                &mut self.buffer.as_mut()[field::DATA_BPSN],
                psn.value(),
            );
        }

        /// Sets the receiver request-window base PSN.
        pub fn set_request_bpsn(&mut self, psn: $crate::seq::Psn) {
            use $crate::wire::falcon::common::field;
            $crate::wire::bytes::write_u32(
                &mut self.buffer.as_mut()[field::REQUEST_BPSN],
                psn.value(),
            );
        }
    };
}

pub(crate) use {common_getters, common_setters};

/// Checks the version and the packet type of a header whose length was
/// checked: the first two validations of every typed `Repr::parse`.
pub(crate) fn check_version_and_type(
    version: u8,
    found: super::PacketType,
    expected: super::PacketType,
) -> Result<(), crate::wire::ParseError> {
    if version != FALCON_VERSION {
        return Err(crate::wire::ParseError::BadVersion(version));
    }
    if found != expected {
        return Err(crate::wire::ParseError::UnexpectedPacketType { expected, found });
    }
    Ok(())
}
