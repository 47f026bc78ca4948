//! Ethernet II header, with at most one IEEE 802.1Q VLAN tag.
//!
//! Layer: wire. Owns the zero-copy [`Packet`] view and the [`Repr`] of the
//! link-layer header. Judges nothing above it: the EtherType is reported, not
//! enforced (the frame helper does that). Never panics on input after
//! [`Packet::check_len`].
//!
//! Decision: one 802.1Q tag (TPID 0x8100) is understood, because a DPDK port
//! with VLAN stripping off delivers tagged frames and datacenter hosts often
//! sit on a tagged access port. Stacked tags (802.1ad S-tag 0x88A8 or a second
//! 0x8100) are not walked: such frames report the inner TPID as their
//! EtherType, which the frame helper rejects as unsupported.
//!
//! ```text
//!  0      6      12       14     16        18
//!  +------+------+--------+-------------------+
//!  | dst  | src  | type   |  payload ...      |            untagged: 14 bytes
//!  +------+------+--------+------+------------+
//!  | dst  | src  | 0x8100 | TCI  | type | payload ...      tagged: 18 bytes
//! ```

use core::fmt;

use crate::wire::bytes::{read_u16, write_u16};
use crate::wire::ParseError;

/// A 48-bit MAC address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Address(pub [u8; 6]);

impl Address {
    /// The broadcast address ff:ff:ff:ff:ff:ff.
    pub const BROADCAST: Address = Address([0xFF; 6]);

    /// The I/G bit is set (multicast or broadcast).
    pub const fn is_multicast(&self) -> bool {
        self.0[0] & 0x01 != 0
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            b[0], b[1], b[2], b[3], b[4], b[5]
        )
    }
}

enum_with_unknown! {
    /// EtherType (IEEE 802.3 / IANA).
    pub enum EtherType(u16) {
        /// IPv4.
        Ipv4 = 0x0800,
        /// ARP.
        Arp = 0x0806,
        /// IEEE 802.1Q VLAN tag (C-tag TPID).
        Vlan = 0x8100,
        /// IPv6.
        Ipv6 = 0x86DD,
    }
}

/// An 802.1Q tag control information word: priority (PCP, 3 bits), drop
/// eligible (DEI, 1 bit), VLAN id (12 bits). Every 16-bit value is valid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct VlanTag {
    tci: u16,
}

impl VlanTag {
    /// Builds a tag from its parts.
    ///
    /// # Errors
    ///
    /// [`RangeError`](crate::error::RangeError) if `priority > 7` or
    /// `vlan_id > 4095`.
    pub const fn new(
        priority: u8,
        drop_eligible: bool,
        vlan_id: u16,
    ) -> Result<Self, crate::error::RangeError> {
        if priority > 7 {
            return Err(crate::error::RangeError {
                what: "VLAN priority",
                value: priority as u64,
                max: 7,
            });
        }
        if vlan_id > 0x0FFF {
            return Err(crate::error::RangeError {
                what: "VLAN id",
                value: vlan_id as u64,
                max: 0x0FFF,
            });
        }
        let dei = if drop_eligible { 0x1000 } else { 0 };
        Ok(VlanTag {
            tci: ((priority as u16) << 13) | dei | vlan_id,
        })
    }

    /// Wraps a raw TCI word.
    pub const fn from_tci(tci: u16) -> Self {
        VlanTag { tci }
    }

    /// The raw TCI word.
    pub const fn tci(self) -> u16 {
        self.tci
    }

    /// Priority code point (0..=7).
    pub const fn priority(self) -> u8 {
        (self.tci >> 13) as u8
    }

    /// Drop eligible indicator.
    pub const fn drop_eligible(self) -> bool {
        self.tci & 0x1000 != 0
    }

    /// VLAN identifier (0..=4095).
    pub const fn vlan_id(self) -> u16 {
        self.tci & 0x0FFF
    }
}

mod field {
    use crate::wire::bytes::Field;

    pub(super) const DESTINATION: Field = 0..6;
    pub(super) const SOURCE: Field = 6..12;
    pub(super) const ETHERTYPE: Field = 12..14;
    /// Present only when `ETHERTYPE` is 0x8100.
    pub(super) const VLAN_TCI: Field = 14..16;
    /// The payload's EtherType of a tagged frame.
    pub(super) const VLAN_ETHERTYPE: Field = 16..18;
}

/// Length of an untagged Ethernet II header.
pub const HEADER_LEN: usize = field::ETHERTYPE.end;
/// Length of an Ethernet II header with one 802.1Q tag.
pub const VLAN_HEADER_LEN: usize = field::VLAN_ETHERTYPE.end;

/// A read/write view of an Ethernet II frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking it; accessors may panic until
    /// [`check_len`](Self::check_len) succeeds. Use for emitting.
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps a buffer and checks its length. Use on received bytes.
    ///
    /// # Errors
    ///
    /// See [`check_len`](Self::check_len).
    pub fn new_checked(buffer: T) -> Result<Packet<T>, ParseError> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Ensures every accessor stays in bounds: 14 bytes, or 18 when tagged.
    ///
    /// # Errors
    ///
    /// [`ParseError::Truncated`] naming the Ethernet header or the VLAN tag.
    pub fn check_len(&self) -> Result<(), ParseError> {
        let have = self.buffer.as_ref().len();
        if have < HEADER_LEN {
            return Err(ParseError::Truncated {
                what: "Ethernet header",
                need: HEADER_LEN,
                have,
            });
        }
        if self.is_tagged() && have < VLAN_HEADER_LEN {
            return Err(ParseError::Truncated {
                what: "802.1Q tag",
                need: VLAN_HEADER_LEN,
                have,
            });
        }
        Ok(())
    }

    /// Returns the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Destination MAC address.
    pub fn destination(&self) -> Address {
        let mut address = [0u8; 6];
        address.copy_from_slice(&self.buffer.as_ref()[field::DESTINATION]);
        Address(address)
    }

    /// Source MAC address.
    pub fn source(&self) -> Address {
        let mut address = [0u8; 6];
        address.copy_from_slice(&self.buffer.as_ref()[field::SOURCE]);
        Address(address)
    }

    /// The EtherType field at bytes 12–13 (0x8100 when tagged).
    pub fn ethertype(&self) -> EtherType {
        EtherType::from(read_u16(&self.buffer.as_ref()[field::ETHERTYPE]))
    }

    /// The frame carries an 802.1Q tag.
    pub fn is_tagged(&self) -> bool {
        self.ethertype() == EtherType::Vlan
    }

    /// The 802.1Q tag, if any.
    pub fn vlan_tag(&self) -> Option<VlanTag> {
        if !self.is_tagged() {
            return None;
        }
        Some(VlanTag::from_tci(read_u16(
            &self.buffer.as_ref()[field::VLAN_TCI],
        )))
    }

    /// The EtherType of the payload (after the tag, when tagged).
    pub fn payload_ethertype(&self) -> EtherType {
        if !self.is_tagged() {
            return self.ethertype();
        }
        EtherType::from(read_u16(&self.buffer.as_ref()[field::VLAN_ETHERTYPE]))
    }

    /// Header length: 14, or 18 when tagged.
    pub fn header_len(&self) -> usize {
        if self.is_tagged() {
            VLAN_HEADER_LEN
        } else {
            HEADER_LEN
        }
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Packet<&'a T> {
    /// The bytes after the header (including any trailing padding).
    pub fn payload(&self) -> &'a [u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the destination MAC address.
    pub fn set_destination(&mut self, address: Address) {
        self.buffer.as_mut()[field::DESTINATION].copy_from_slice(&address.0);
    }

    /// Sets the source MAC address.
    pub fn set_source(&mut self, address: Address) {
        self.buffer.as_mut()[field::SOURCE].copy_from_slice(&address.0);
    }

    /// Sets the EtherType field at bytes 12–13. Setting 0x8100 changes the
    /// header length: the buffer must then hold 18 bytes.
    pub fn set_ethertype(&mut self, ethertype: EtherType) {
        write_u16(
            &mut self.buffer.as_mut()[field::ETHERTYPE],
            ethertype.into(),
        );
    }

    /// Sets the 802.1Q TCI (bytes 14–15; meaningful only when tagged).
    pub fn set_vlan_tag(&mut self, tag: VlanTag) {
        write_u16(&mut self.buffer.as_mut()[field::VLAN_TCI], tag.tci());
    }

    /// Sets the payload EtherType of a tagged frame (bytes 16–17).
    pub fn set_vlan_ethertype(&mut self, ethertype: EtherType) {
        write_u16(
            &mut self.buffer.as_mut()[field::VLAN_ETHERTYPE],
            ethertype.into(),
        );
    }

    /// The bytes after the header, writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let start = self.header_len();
        &mut self.buffer.as_mut()[start..]
    }
}

impl<T: AsRef<[u8]>> fmt::Display for Packet<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match Repr::parse(self) {
            Ok(repr) => fmt::Display::fmt(&repr, f),
            Err(err) => write!(f, "Ethernet ({err})"),
        }
    }
}

/// The Ethernet header as values.
///
/// Invariant kept by [`Repr::parse`]: `ethertype` is [`EtherType::Vlan`] only
/// when `vlan` is `Some` (a second tag is reported, not walked). Emitting
/// `vlan: None` with `ethertype: Vlan` produces a frame that parses as tagged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    /// Destination MAC address.
    pub destination: Address,
    /// Source MAC address.
    pub source: Address,
    /// The 802.1Q tag, if any.
    pub vlan: Option<VlanTag>,
    /// The payload's EtherType.
    pub ethertype: EtherType,
}

impl Repr {
    /// Reads the header.
    ///
    /// # Errors
    ///
    /// [`ParseError::Truncated`] when the buffer is too short.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr, ParseError> {
        packet.check_len()?;
        Ok(Repr {
            destination: packet.destination(),
            source: packet.source(),
            vlan: packet.vlan_tag(),
            ethertype: packet.payload_ethertype(),
        })
    }

    /// Header length: 14, or 18 with a tag.
    pub const fn buffer_len(&self) -> usize {
        match self.vlan {
            Some(_) => VLAN_HEADER_LEN,
            None => HEADER_LEN,
        }
    }

    /// Writes the header; the payload is the caller's.
    ///
    /// # Panics
    ///
    /// If the buffer is shorter than [`buffer_len`](Self::buffer_len).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_destination(self.destination);
        packet.set_source(self.source);
        match self.vlan {
            Some(tag) => {
                packet.set_ethertype(EtherType::Vlan);
                packet.set_vlan_tag(tag);
                packet.set_vlan_ethertype(self.ethertype);
            }
            None => packet.set_ethertype(self.ethertype),
        }
    }
}

impl fmt::Display for Repr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Ethernet {} > {}", self.source, self.destination)?;
        if let Some(tag) = self.vlan {
            write!(f, " vlan {} pcp {}", tag.vlan_id(), tag.priority())?;
        }
        write!(f, " type {:#06x}", u16::from(self.ethertype))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::wire::testing::ethernet_repr;

    const UNTAGGED: [u8; 16] = [
        0x02, 0x00, 0x00, 0x00, 0x00, 0x02, // dst
        0x02, 0x00, 0x00, 0x00, 0x00, 0x01, // src
        0x86, 0xDD, // IPv6
        0xAA, 0xBB, // payload
    ];

    const TAGGED: [u8; 19] = [
        0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, // dst
        0x02, 0x00, 0x00, 0x00, 0x00, 0x01, // src
        0x81, 0x00, // 802.1Q
        0xB0, 0x64, // PCP 5, DEI 1, VID 100
        0x08, 0x00, // IPv4
        0xCC,
    ];

    #[test]
    fn deconstruct_untagged() {
        let packet = Packet::new_checked(&UNTAGGED[..]).unwrap();
        assert_eq!(packet.destination(), Address([2, 0, 0, 0, 0, 2]));
        assert_eq!(packet.source(), Address([2, 0, 0, 0, 0, 1]));
        assert_eq!(packet.ethertype(), EtherType::Ipv6);
        assert_eq!(packet.vlan_tag(), None);
        assert_eq!(packet.header_len(), 14);
        assert_eq!(packet.payload(), &[0xAA, 0xBB]);
    }

    #[test]
    fn deconstruct_tagged() {
        let packet = Packet::new_checked(&TAGGED[..]).unwrap();
        let tag = packet.vlan_tag().unwrap();
        assert_eq!(tag.priority(), 5);
        assert!(tag.drop_eligible());
        assert_eq!(tag.vlan_id(), 100);
        assert_eq!(packet.payload_ethertype(), EtherType::Ipv4);
        assert_eq!(packet.payload(), &[0xCC]);
        assert!(packet.destination().is_multicast());
    }

    #[test]
    fn emit_matches_fixture() {
        let repr = Repr {
            destination: Address::BROADCAST,
            source: Address([2, 0, 0, 0, 0, 1]),
            vlan: Some(VlanTag::new(5, true, 100).unwrap()),
            ethertype: EtherType::Ipv4,
        };
        let mut bytes = [0u8; 18];
        repr.emit(&mut Packet::new_unchecked(&mut bytes[..]));
        assert_eq!(bytes, TAGGED[..18]);
        assert_eq!(repr.buffer_len(), 18);
    }

    #[test]
    fn truncated_names_the_part() {
        assert_eq!(
            Packet::new_checked(&UNTAGGED[..13]).unwrap_err(),
            ParseError::Truncated {
                what: "Ethernet header",
                need: 14,
                have: 13
            }
        );
        assert_eq!(
            Packet::new_checked(&TAGGED[..17]).unwrap_err(),
            ParseError::Truncated {
                what: "802.1Q tag",
                need: 18,
                have: 17
            }
        );
    }

    #[test]
    fn vlan_tag_validates() {
        assert!(VlanTag::new(8, false, 1).is_err());
        assert!(VlanTag::new(7, false, 4096).is_err());
        assert_eq!(VlanTag::new(7, false, 4095).unwrap().tci(), 0xEFFF);
    }

    proptest! {
        #[test]
        fn repr_round_trip(repr in ethernet_repr()) {
            let mut bytes = vec![0u8; repr.buffer_len()];
            repr.emit(&mut Packet::new_unchecked(&mut bytes[..]));
            let packet = Packet::new_checked(&bytes[..]).unwrap();
            prop_assert_eq!(packet.header_len(), bytes.len());
            prop_assert_eq!(Repr::parse(&packet), Ok(repr));
        }
    }
}
