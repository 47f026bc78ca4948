//! Big-endian field access for the wire views.
//!
//! Layer: wire internals. Owns the only code that turns byte slices into
//! integers and back. Every function takes a slice that a view cut with a
//! `field` range constant, whose length equals the integer's width; views call
//! them only after `check_len` succeeded, so slicing cannot fail. The widths are
//! asserted in debug builds.

pub(crate) type Field = core::ops::Range<usize>;

pub(crate) fn read_u16(bytes: &[u8]) -> u16 {
    debug_assert_eq!(bytes.len(), 2, "field range must be 2 bytes");
    u16::from_be_bytes([bytes[0], bytes[1]])
}

pub(crate) fn read_u24(bytes: &[u8]) -> u32 {
    debug_assert_eq!(bytes.len(), 3, "field range must be 3 bytes");
    u32::from_be_bytes([0, bytes[0], bytes[1], bytes[2]])
}

pub(crate) fn read_u32(bytes: &[u8]) -> u32 {
    debug_assert_eq!(bytes.len(), 4, "field range must be 4 bytes");
    u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])
}

pub(crate) fn read_u64(bytes: &[u8]) -> u64 {
    let mut array = [0u8; 8];
    // Invariant: field ranges passed here are 8 bytes long (the `field`
    // constants), so `copy_from_slice` cannot see a length mismatch.
    array.copy_from_slice(bytes);
    u64::from_be_bytes(array)
}

pub(crate) fn read_u128(bytes: &[u8]) -> u128 {
    let mut array = [0u8; 16];
    // Invariant: field ranges passed here are 16 bytes long.
    array.copy_from_slice(bytes);
    u128::from_be_bytes(array)
}

pub(crate) fn write_u16(bytes: &mut [u8], value: u16) {
    bytes.copy_from_slice(&value.to_be_bytes());
}

/// Writes the low 24 bits of `value`.
pub(crate) fn write_u24(bytes: &mut [u8], value: u32) {
    bytes.copy_from_slice(&value.to_be_bytes()[1..]);
}

pub(crate) fn write_u32(bytes: &mut [u8], value: u32) {
    bytes.copy_from_slice(&value.to_be_bytes());
}

pub(crate) fn write_u64(bytes: &mut [u8], value: u64) {
    bytes.copy_from_slice(&value.to_be_bytes());
}

pub(crate) fn write_u128(bytes: &mut [u8], value: u128) {
    bytes.copy_from_slice(&value.to_be_bytes());
}

/// Replaces the bits of `*byte` under `mask` with `value` shifted into place;
/// bits of `value` that do not fit under the mask are dropped.
pub(crate) fn write_bits(byte: &mut u8, mask: u8, shift: u32, value: u8) {
    *byte = (*byte & !mask) | ((value << shift) & mask);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn big_endian_round_trip() {
        let mut b = [0u8; 16];
        write_u24(&mut b[..3], 0xAB_CDEF);
        assert_eq!(&b[..3], &[0xAB, 0xCD, 0xEF]);
        assert_eq!(read_u24(&b[..3]), 0xAB_CDEF);
        write_u128(&mut b, 0x0102_0304_0506_0708_090A_0B0C_0D0E_0F10);
        assert_eq!(b[0], 0x01);
        assert_eq!(b[15], 0x10);
        assert_eq!(read_u64(&b[8..]), 0x090A_0B0C_0D0E_0F10);
        let mut byte = 0b1010_1010;
        write_bits(&mut byte, 0x1E, 1, 0xF);
        assert_eq!(byte, 0b1011_1110);
    }
}
