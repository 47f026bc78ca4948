//! Which shard of a node a received frame belongs to, from its bytes.
//!
//! Layer: the node's receive distribution (the core or NIC queue that hands
//! frames to the shards), per packet. Owns [`Steering`]: the node's shard
//! layout and a short walk of the frame to the one field that names the
//! shard. RSS cannot do this job: it hashes the UDP source port, which PLB
//! rewrites to move a connection to another path (DESIGN.md §5), so a
//! connection's frames would change lcores.
//!
//! With PSP on, the SPI names the shard (each shard allocates receive SPIs
//! from its own range, `psp::space`); it sits in clear in the PSP header,
//! so no key, no decryption and no SA lookup is needed. With PSP off, the
//! destination connection id in the Falcon header does (each shard owns a
//! range of local CIDs). It reads at most the Ethernet (one 802.1Q tag),
//! IPv4 or IPv6 and UDP headers and four bytes after them, checks no
//! checksum and no address (the engine does), and never panics or
//! allocates. `None`: a frame that is not Falcon on this node's UDP port,
//! too short, an IPv4 fragment, or an SPI or CID of no shard; the caller
//! counts it and drops it (or hands it to shard 0, whose engine counts its
//! drop reason).

use psp::{Spi, SpiSpace};

use crate::ids::ConnectionId;

/// Byte offsets of the fields read, per header (IEEE 802.1Q, RFC 791,
/// RFC 8200, RFC 768, PSP header, OCP Falcon 0.9 §7.2).
mod field {
    /// Ethernet: EtherType of an untagged frame, and the header lengths.
    pub(super) const ETHERTYPE: usize = 12;
    pub(super) const ETHERNET_LEN: usize = 14;
    /// With one 802.1Q tag: the inner EtherType.
    pub(super) const TAGGED_ETHERTYPE: usize = 16;
    pub(super) const TAGGED_LEN: usize = 18;
    pub(super) const ETHERTYPE_VLAN: u16 = 0x8100;
    pub(super) const ETHERTYPE_IPV4: u16 = 0x0800;
    pub(super) const ETHERTYPE_IPV6: u16 = 0x86DD;
    /// IPv4, from its header: version and IHL, flags and fragment offset,
    /// protocol.
    pub(super) const IPV4_VERSION_IHL: usize = 0;
    pub(super) const IPV4_FRAGMENT: usize = 6;
    /// MF and the 13-bit fragment offset.
    pub(super) const IPV4_FRAGMENT_MASK: u16 = 0x3FFF;
    pub(super) const IPV4_PROTOCOL: usize = 9;
    /// IPv6, from its header: version, next header, header length.
    pub(super) const IPV6_VERSION: usize = 0;
    pub(super) const IPV6_NEXT_HEADER: usize = 6;
    pub(super) const IPV6_LEN: usize = 40;
    pub(super) const PROTOCOL_UDP: u8 = 17;
    /// UDP, from its header: destination port, length, header length.
    pub(super) const UDP_DST_PORT: usize = 2;
    pub(super) const UDP_LENGTH: usize = 4;
    pub(super) const UDP_LEN: usize = 8;
    /// PSP header, from the UDP payload: the SPI (bytes 4–7).
    pub(super) const PSP_SPI: core::ops::Range<usize> = 4..8;
    /// Falcon header, from the UDP payload: the destination CID (bytes 1–3).
    pub(super) const FALCON_CID: core::ops::Range<usize> = 1..4;
}

/// Bits of a connection id.
const CID_BITS: u32 = 24;

/// A node's shard layout and the steering of received frames (see the
/// module doc). A `Copy` value: the distributing core keeps its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Steering {
    spis: SpiSpace,
    psp: bool,
    udp_port: u16,
}

impl Steering {
    pub(crate) const fn new(spis: SpiSpace, psp: bool, udp_port: u16) -> Steering {
        Steering {
            spis,
            psp,
            udp_port,
        }
    }

    /// The number of shards.
    pub const fn shards(&self) -> u16 {
        self.spis.shards()
    }

    /// UDP destination port of Falcon frames.
    pub const fn udp_port(&self) -> u16 {
        self.udp_port
    }

    /// The SPI layout (which SPIs each shard owns).
    pub const fn spi_space(&self) -> SpiSpace {
        self.spis
    }

    /// The shard `frame` (Ethernet to the end) belongs to: the one whose
    /// receive SPI is in its PSP header (PSP on) or whose local CID is its
    /// Falcon destination CID (PSP off). `None` for a frame it cannot
    /// steer (see the module doc).
    #[inline]
    pub fn shard_of(&self, frame: &[u8]) -> Option<u16> {
        let payload = udp_payload(frame, self.udp_port)?;
        if self.psp {
            let spi = payload.get(field::PSP_SPI)?;
            let spi = Spi(u32::from_be_bytes(spi.try_into().ok()?));
            self.spis.shard_of(spi)
        } else {
            let cid = payload.get(field::FALCON_CID)?;
            let cid = u32::from_be_bytes([0, cid[0], cid[1], cid[2]]);
            self.shard_of_cid(ConnectionId::truncating(cid))
        }
    }

    /// The shard that owns receive SPI `spi` (see `psp::space`).
    pub const fn shard_of_spi(&self, spi: Spi) -> Option<u16> {
        self.spis.shard_of(spi)
    }

    /// The shard that owns local connection id `cid`: the top ⌈log2
    /// shards⌉ bits of its 24.
    pub const fn shard_of_cid(&self, cid: ConnectionId) -> Option<u16> {
        let bits = self.spis.shard_bits();
        let shard = if bits == 0 {
            0
        } else {
            cid.value() >> (CID_BITS - bits)
        };
        if shard < self.spis.shards() as u32 {
            Some(shard as u16)
        } else {
            None
        }
    }

    /// Local connection ids each shard owns: 2^(24 − ⌈log2 shards⌉).
    pub const fn cids_per_shard(&self) -> u32 {
        1 << (CID_BITS - self.spis.shard_bits())
    }

    /// The `n`-th local connection id (from 0) of `shard`; `None` out of
    /// range.
    pub const fn cid(&self, shard: u16, n: u32) -> Option<ConnectionId> {
        if shard >= self.spis.shards() || n >= self.cids_per_shard() {
            return None;
        }
        Some(ConnectionId::truncating(
            (shard as u32) * self.cids_per_shard() + n,
        ))
    }
}

/// The UDP payload of an Ethernet (one optional 802.1Q tag) / IPv4 (not a
/// fragment) or IPv6 (UDP as the next header) / UDP frame to `port`, as
/// long as the UDP length says and the frame holds.
#[inline]
fn udp_payload(frame: &[u8], port: u16) -> Option<&[u8]> {
    let be16 = |at: usize| -> Option<u16> {
        let bytes = frame.get(at..at + 2)?;
        Some(u16::from_be_bytes([bytes[0], bytes[1]]))
    };
    let (ethertype, l3) = match be16(field::ETHERTYPE)? {
        field::ETHERTYPE_VLAN => (be16(field::TAGGED_ETHERTYPE)?, field::TAGGED_LEN),
        ethertype => (ethertype, field::ETHERNET_LEN),
    };
    let l4 = match ethertype {
        field::ETHERTYPE_IPV4 => {
            let version_ihl = *frame.get(l3 + field::IPV4_VERSION_IHL)?;
            let ihl = usize::from(version_ihl & 0x0F) * 4;
            // A fragment's UDP header is in the first fragment only.
            if version_ihl >> 4 != 4
                || ihl < 20
                || *frame.get(l3 + field::IPV4_PROTOCOL)? != field::PROTOCOL_UDP
                || be16(l3 + field::IPV4_FRAGMENT)? & field::IPV4_FRAGMENT_MASK != 0
            {
                return None;
            }
            l3 + ihl
        }
        field::ETHERTYPE_IPV6 => {
            if *frame.get(l3 + field::IPV6_VERSION)? >> 4 != 6
                || *frame.get(l3 + field::IPV6_NEXT_HEADER)? != field::PROTOCOL_UDP
            {
                return None;
            }
            l3 + field::IPV6_LEN
        }
        _ => return None,
    };
    if be16(l4 + field::UDP_DST_PORT)? != port {
        return None;
    }
    let udp_len = usize::from(be16(l4 + field::UDP_LENGTH)?);
    if udp_len < field::UDP_LEN {
        return None;
    }
    frame.get(l4 + field::UDP_LEN..l4 + udp_len)
}

#[cfg(test)]
mod tests;
