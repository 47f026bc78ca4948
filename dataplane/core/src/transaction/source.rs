//! What a ULP transmits: a small inline ULP header and a data source.
//!
//! Layer: transaction sublayer, boundary to the ULPs (DESIGN.md §5
//! "Buffers end to end"). Owns [`UlpHeader`] (the ULP's own headers, copied
//! into the transaction: RDMA's RBTH and extension headers, NVMe's NBTH),
//! the [`DataSource`] trait (the data part, read from the ULP's memory
//! when the frame is built and again on each retransmission), its
//! implementations for plain byte containers, and `TxPayload` (the two
//! as the transmit path writes them into a frame).
//!
//! A Falcon packet's payload is the ULP's headers followed by its data
//! (OCP Falcon 0.9 §7.3–7.5: Request Length counts both). The header is
//! small and copied once into the transaction; the data is copied once,
//! from the source into the frame, per transmission. Nothing goes through
//! an intermediate vector.

use std::sync::Arc;

use core::fmt;

/// Bytes a [`UlpHeader`] holds: the longest ULP header of RDMA and NVMe
/// over Falcon 0.9 is 56 bytes (RDMA's atomic request: RBTH, AtomicETH,
/// SETH and STETH, `spec/ulp.md` §1.14), NVMe's NBTH is 32.
pub const ULP_HEADER_CAPACITY: usize = 63;

/// The ULP's headers of a transaction, inline (no allocation): the first
/// bytes of a Push Data, Pull Request or Pull Data payload. Up to
/// [`ULP_HEADER_CAPACITY`] bytes.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct UlpHeader {
    len: u8,
    bytes: [u8; ULP_HEADER_CAPACITY],
}

/// A ULP header longer than [`ULP_HEADER_CAPACITY`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderTooLong {
    /// The length offered.
    pub len: usize,
}

impl fmt::Display for HeaderTooLong {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ULP header of {} bytes, longer than {ULP_HEADER_CAPACITY}",
            self.len
        )
    }
}

impl std::error::Error for HeaderTooLong {}

impl UlpHeader {
    /// No header.
    pub const EMPTY: UlpHeader = UlpHeader {
        len: 0,
        bytes: [0; ULP_HEADER_CAPACITY],
    };

    /// A copy of `bytes`.
    ///
    /// # Errors
    ///
    /// [`HeaderTooLong`] beyond [`ULP_HEADER_CAPACITY`] bytes.
    pub fn new(bytes: &[u8]) -> Result<Self, HeaderTooLong> {
        let mut header = UlpHeader::EMPTY;
        let dst = header
            .bytes
            .get_mut(..bytes.len())
            .ok_or(HeaderTooLong { len: bytes.len() })?;
        dst.copy_from_slice(bytes);
        // In range: at most ULP_HEADER_CAPACITY < 256.
        header.len = bytes.len() as u8;
        Ok(header)
    }

    /// The header bytes.
    #[inline]
    pub fn as_slice(&self) -> &[u8] {
        self.bytes.get(..usize::from(self.len)).unwrap_or_default()
    }

    /// Header bytes.
    #[inline]
    pub const fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether there is no header.
    #[inline]
    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Default for UlpHeader {
    fn default() -> Self {
        UlpHeader::EMPTY
    }
}

impl fmt::Debug for UlpHeader {
    /// As the byte slice.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_slice(), f)
    }
}

impl core::ops::Deref for UlpHeader {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl TryFrom<&[u8]> for UlpHeader {
    type Error = HeaderTooLong;

    fn try_from(bytes: &[u8]) -> Result<Self, HeaderTooLong> {
        UlpHeader::new(bytes)
    }
}

/// The data part of a transmitted payload, in the ULP's memory (a
/// registered region, an NVMe buffer, a plain vector). The engine keeps
/// the source until the packet can no longer be retransmitted, and reads
/// it each time it builds the packet: the bytes must not change while the
/// engine holds it.
pub trait DataSource {
    /// Bytes of data.
    fn len(&self) -> usize;

    /// Copies bytes `offset .. offset + dst.len()` into `dst`. The engine
    /// asks only for bytes within [`len`](Self::len).
    fn copy_to(&self, offset: usize, dst: &mut [u8]);

    /// Whether there is no data.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Copies `src[offset..][..dst.len()]`, zero-filling what `src` lacks
/// (never reached from the engine, which asks within `len`).
#[inline]
fn copy_slice(src: &[u8], offset: usize, dst: &mut [u8]) {
    let available = src.get(offset..).unwrap_or_default();
    let n = available.len().min(dst.len());
    dst[..n].copy_from_slice(&available[..n]);
    if n < dst.len() {
        dst[n..].fill(0);
    }
}

macro_rules! byte_source {
    ($($ty:ty),*) => {$(
        impl DataSource for $ty {
            #[inline]
            fn len(&self) -> usize {
                <[u8]>::len(self)
            }

            #[inline]
            fn copy_to(&self, offset: usize, dst: &mut [u8]) {
                copy_slice(self, offset, dst);
            }
        }
    )*};
}

byte_source!(Vec<u8>, Box<[u8]>, Arc<[u8]>, &'static [u8]);

/// A transmitted payload as the frame builder reads it: the ULP header,
/// then the source's data.
#[derive(Debug)]
pub(crate) struct TxPayload<'a, S> {
    pub(crate) header: &'a [u8],
    pub(crate) data: Option<&'a S>,
}

impl<S> Clone for TxPayload<'_, S> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<S> Copy for TxPayload<'_, S> {}

impl<'a, S: DataSource> TxPayload<'a, S> {
    /// No payload.
    pub(crate) const EMPTY: TxPayload<'a, S> = TxPayload {
        header: &[],
        data: None,
    };

    /// Writes the payload into `dst`: the header, then the data; what
    /// neither covers is zero-filled (the transaction sublayer sizes
    /// packets from the same two lengths, so there is none).
    ///
    /// Each part is written only when it has bytes: a call to copy or fill
    /// nothing still costs a `memcpy`/`memset` call per packet.
    #[inline]
    pub(crate) fn write(self, dst: &mut [u8]) {
        let h = self.header.len().min(dst.len());
        let (head, mut rest) = dst.split_at_mut(h);
        if h > 0 {
            head.copy_from_slice(&self.header[..h]);
        }
        if let Some(data) = self.data {
            let n = data.len().min(rest.len());
            let (body, tail) = rest.split_at_mut(n);
            if n > 0 {
                data.copy_to(0, body);
            }
            rest = tail;
        }
        if !rest.is_empty() {
            rest.fill(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_holds_up_to_its_capacity() {
        let h = UlpHeader::new(&[1, 2, 3]).expect("short");
        assert_eq!((h.len(), h.as_slice()), (3, &[1, 2, 3][..]));
        assert!(UlpHeader::EMPTY.is_empty());
        let full = [7u8; ULP_HEADER_CAPACITY];
        assert_eq!(UlpHeader::new(&full).expect("fits").len(), full.len());
        assert_eq!(
            UlpHeader::new(&[0; ULP_HEADER_CAPACITY + 1]),
            Err(HeaderTooLong {
                len: ULP_HEADER_CAPACITY + 1
            })
        );
        assert_eq!(format!("{h:?}"), "[1, 2, 3]");
    }

    #[test]
    fn byte_sources_copy_any_window() {
        let data: Vec<u8> = (0..10).collect();
        let mut dst = [0xFFu8; 4];
        data.copy_to(3, &mut dst);
        assert_eq!(dst, [3, 4, 5, 6]);
        // Past the end: zero-filled, no panic.
        data.copy_to(8, &mut dst);
        assert_eq!(dst, [8, 9, 0, 0]);
        data.copy_to(100, &mut dst);
        assert_eq!(dst, [0; 4]);
        let shared: Arc<[u8]> = Arc::from(&data[..]);
        assert_eq!(DataSource::len(&shared), 10);
    }

    #[test]
    fn tx_payload_writes_header_then_data() {
        let header = UlpHeader::new(&[0xAA, 0xBB]).expect("short");
        let data = vec![1u8, 2, 3];
        let payload = TxPayload {
            header: header.as_slice(),
            data: Some(&data),
        };
        let mut dst = [0xFFu8; 7];
        payload.write(&mut dst);
        assert_eq!(dst, [0xAA, 0xBB, 1, 2, 3, 0, 0]);
        let mut short = [0u8; 3];
        payload.write(&mut short);
        assert_eq!(short, [0xAA, 0xBB, 1]);
        TxPayload::<Vec<u8>>::EMPTY.write(&mut dst);
        assert_eq!(dst, [0; 7]);
    }
}
