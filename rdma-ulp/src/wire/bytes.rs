//! Big-endian field access for the views.
//!
//! Layer: wire internals. Owns the only code of this crate that turns byte
//! slices into integers and back. Every function takes a slice a view cut
//! with a `field` range constant whose length equals the integer's width;
//! views call them only after `check_len` succeeded, so slicing cannot fail.

pub(crate) type Field = core::ops::Range<usize>;

pub(crate) fn read_u24(bytes: &[u8]) -> u32 {
    debug_assert_eq!(bytes.len(), 3, "field range must be 3 bytes");
    u32::from_be_bytes([0, bytes[0], bytes[1], bytes[2]])
}

pub(crate) fn read_u32(bytes: &[u8]) -> u32 {
    debug_assert_eq!(bytes.len(), 4, "field range must be 4 bytes");
    u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])
}

pub(crate) fn read_u64(bytes: &[u8]) -> u64 {
    debug_assert_eq!(bytes.len(), 8, "field range must be 8 bytes");
    let mut word = [0u8; 8];
    word.copy_from_slice(bytes);
    u64::from_be_bytes(word)
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

/// Replaces the bits of `*byte` under `mask` with `value` shifted into
/// place; bits of `value` that do not fit under the mask are dropped.
pub(crate) fn write_bits(byte: &mut u8, mask: u8, shift: u32, value: u8) {
    *byte = (*byte & !mask) | ((value << shift) & mask);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn big_endian_and_masked_bits() {
        let mut b = [0u8; 8];
        write_u24(&mut b[1..4], 0xAB_CDEF);
        assert_eq!(b[..4], [0, 0xAB, 0xCD, 0xEF]);
        assert_eq!(read_u24(&b[1..4]), 0xAB_CDEF);
        write_u32(&mut b[4..], 0x0102_0304);
        assert_eq!(b[4..], [1, 2, 3, 4]);
        assert_eq!(read_u32(&b[4..]), 0x0102_0304);
        write_u64(&mut b, 0x1122_3344_5566_7788);
        assert_eq!(b, [0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88]);
        assert_eq!(read_u64(&b), 0x1122_3344_5566_7788);
        let mut byte = 0xFF;
        write_bits(&mut byte, 0x0C, 2, 0b01);
        assert_eq!(byte, 0b1111_0111);
        write_bits(&mut byte, 0x0C, 2, 0xFF);
        assert_eq!(byte, 0xFF, "bits beyond the mask are dropped");
    }
}
