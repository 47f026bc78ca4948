//! The Internet checksum (RFC 1071) and the UDP pseudo-header.
//!
//! Layer: wire. Owns the ones'-complement sum used by the IPv4 header checksum
//! and the UDP checksum over the IPv4 (RFC 768) or IPv6 (RFC 8200 §8.1)
//! pseudo-header. Pure functions over byte slices; no allocation, no panics.
//!
//! Performance: a plain 16-bit word loop. NICs verify and fill checksums in
//! hardware on the DPDK path, and Falcon traffic normally sends UDP checksum 0
//! (spec/psp.md §1.1), so this code runs off the hot path (pcap tools, sim).
//! The exception is the software receive path's IPv4 header check, once per
//! frame: `ipv4_header_checksum_ok` sums 32-bit words.

use core::net::{Ipv4Addr, Ipv6Addr};

/// The IP addresses a UDP checksum covers besides the datagram itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PseudoHeader {
    /// RFC 768: source, destination, zero, protocol 17, UDP length.
    V4 {
        /// IPv4 source address.
        src: Ipv4Addr,
        /// IPv4 destination address.
        dst: Ipv4Addr,
    },
    /// RFC 8200 §8.1: source, destination, upper-layer length (32 bits),
    /// three zero bytes, next header 17.
    V6 {
        /// IPv6 source address.
        src: Ipv6Addr,
        /// IPv6 destination address.
        dst: Ipv6Addr,
    },
}

/// IP protocol number of UDP, as the pseudo-header carries it.
const UDP_PROTOCOL: u64 = 17;

impl PseudoHeader {
    /// The unfolded sum of the pseudo-header for a UDP datagram of
    /// `udp_len` bytes (header included).
    fn sum(&self, udp_len: usize) -> u64 {
        let addresses = match self {
            PseudoHeader::V4 { src, dst } => {
                sum_words(&src.octets(), 0) + sum_words(&dst.octets(), 0)
            }
            PseudoHeader::V6 { src, dst } => {
                sum_words(&src.octets(), 0) + sum_words(&dst.octets(), 0)
            }
        };
        // The length is 16 bits in IPv4 and 32 bits in IPv6; both are summed
        // as 16-bit words, which gives the same result for lengths < 2^16.
        let len = udp_len as u64;
        addresses + UDP_PROTOCOL + (len >> 16) + (len & 0xFFFF)
    }
}

/// Adds the bytes of `data` as big-endian 16-bit words to `acc`; an odd last
/// byte is padded with zero (RFC 1071 §4.1). A u64 accumulator cannot
/// overflow for any buffer that fits in memory.
pub(crate) fn sum_words(data: &[u8], acc: u64) -> u64 {
    let mut chunks = data.chunks_exact(2);
    let mut sum = acc;
    for word in chunks.by_ref() {
        sum += u64::from(u16::from_be_bytes([word[0], word[1]]));
    }
    if let [last] = chunks.remainder() {
        sum += u64::from(*last) << 8;
    }
    sum
}

/// Folds carries into 16 bits (the ones'-complement sum).
pub(crate) fn fold(mut sum: u64) -> u16 {
    while sum > 0xFFFF {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    sum as u16
}

/// The Internet checksum of `data`: the complement of its ones'-complement
/// sum. Over a header whose checksum field holds a correct checksum, the
/// result is 0.
pub fn internet_checksum(data: &[u8]) -> u16 {
    !fold(sum_words(data, 0))
}

/// Whether a 20-byte IPv4 header (no options) holds a correct header
/// checksum (RFC 791 §3.1): the same answer as
/// `internet_checksum(header) == 0`, from wider adds.
///
/// `internet_checksum` is 0 exactly when the sum S of the big-endian 16-bit
/// words folds to 0xFFFF, that is when S ≠ 0 and S ≡ 0 (mod 0xFFFF) (folding
/// keeps the value mod 0xFFFF and never turns a non-zero sum into 0). Here
/// the header is summed as five little-endian 32-bit words: as 2^16 ≡ 1,
/// each is ≡ the sum of its two 16-bit halves, and a byte-swapped 16-bit
/// word is ≡ 256 times the word (RFC 1071 §2(B): the sum is byte-order
/// independent), so this sum is ≡ 256·S; 256 is prime to 0xFFFF, so it is
/// ≡ 0 exactly when S is, and it is 0 exactly when every byte is (then S
/// is 0 too). Five loads and adds and a remainder by a constant (a multiply),
/// ~20 instructions, instead of ten 16-bit words swapped, widened and summed
/// and the fold's loop, ~30.
#[inline]
pub(crate) fn ipv4_header_checksum_ok(header: &[u8; 20]) -> bool {
    let word = |at: usize| {
        u64::from(u32::from_le_bytes([
            header[at],
            header[at + 1],
            header[at + 2],
            header[at + 3],
        ]))
    };
    let sum = word(0) + word(4) + word(8) + word(12) + word(16);
    sum != 0 && sum % 0xFFFF == 0
}

/// The UDP checksum of `datagram` (header and payload, with the checksum
/// field as found) under `pseudo`: the complement of the folded sum. With the
/// checksum field zeroed this is the value to transmit (after mapping 0 to
/// 0xFFFF, RFC 768); over a datagram carrying a correct checksum it is 0.
pub(crate) fn udp_checksum(pseudo: &PseudoHeader, datagram: &[u8]) -> u16 {
    !fold(sum_words(datagram, pseudo.sum(datagram.len())))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn rfc1071_example() {
        // RFC 1071 §3: the words 0001 f203 f4f5 f6f7 sum to 0xddf2.
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(fold(sum_words(&data, 0)), 0xddf2);
        assert_eq!(internet_checksum(&data), !0xddf2);
    }

    #[test]
    fn odd_length_pads_with_zero() {
        assert_eq!(fold(sum_words(&[0x12, 0x34, 0x56], 0)), 0x1234 + 0x5600);
    }

    #[test]
    fn ipv4_header_check_edges() {
        // All zero: the sum is 0, not a ones'-complement zero (checksum 0xFFFF).
        assert!(!ipv4_header_checksum_ok(&[0; 20]));
        assert_eq!(internet_checksum(&[0; 20]), 0xFFFF);
        // All ones: ten words 0xFFFF fold to 0xFFFF (checksum 0).
        assert!(ipv4_header_checksum_ok(&[0xFF; 20]));
        assert_eq!(internet_checksum(&[0xFF; 20]), 0);
    }

    proptest! {
        /// The wide check agrees with the plain checksum on any 20 bytes...
        #[test]
        fn ipv4_header_check_is_the_plain_checksum(header in proptest::array::uniform20(any::<u8>())) {
            prop_assert_eq!(
                ipv4_header_checksum_ok(&header),
                internet_checksum(&header) == 0
            );
        }

        /// ... and on headers that carry their correct checksum, then with
        /// one byte changed (the random case above almost never passes).
        #[test]
        fn ipv4_header_check_on_checksummed_headers(
            mut header in proptest::array::uniform20(any::<u8>()),
            flip in 0usize..20,
            xor in 1u8..,
        ) {
            header[10..12].fill(0);
            let checksum = internet_checksum(&header);
            header[10..12].copy_from_slice(&checksum.to_be_bytes());
            prop_assert!(ipv4_header_checksum_ok(&header));
            prop_assert_eq!(internet_checksum(&header), 0);
            header[flip] ^= xor;
            prop_assert_eq!(
                ipv4_header_checksum_ok(&header),
                internet_checksum(&header) == 0
            );
        }
    }

    #[test]
    fn known_ipv4_header_checksum() {
        // A classic example header (Wikipedia "IPv4 header checksum"):
        // checksum 0xb861.
        let header = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert_eq!(internet_checksum(&header), 0xb861);
        let mut with_sum = header;
        with_sum[10..12].copy_from_slice(&0xb861u16.to_be_bytes());
        assert_eq!(internet_checksum(&with_sum), 0);
        assert!(ipv4_header_checksum_ok(&with_sum));
        assert!(!ipv4_header_checksum_ok(&header));
    }
}
