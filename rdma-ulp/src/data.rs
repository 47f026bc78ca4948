//! What RDMA over Falcon transmits after a packet's headers: the data
//! source the engine reads when it builds a frame.
//!
//! Layer: RDMA ULP, the boundary to `falcon-core`'s transmit path. Owns
//! [`RdmaData`], the one [`DataSource`] of the device's pushes and Pull
//! Data. Never copies into an intermediate buffer: `copy_to` reads the
//! registered region straight into the frame, on the first transmission
//! and on each retransmission (DESIGN.md §5 "Buffers end to end"); a
//! region is shared with the engine by an `Arc`, so deregistering it while
//! a packet is in flight leaves the bytes readable until Falcon lets go.
//!
//! A source is a [`Body`] and the RBTH's pad: the zero bytes after the
//! payload that end it on a 4-byte boundary (RDMA-0.9 §8.2). The bodies:
//!
//! * [`Body::None`]: header-only packets (READ and atomic requests, an
//!   atomic's response, a zero-length message).
//! * [`Body::Region`]: a byte range of one region (a piece inside one
//!   scatter entry, a READ response).
//! * [`Body::Gather`]: a piece spanning several scatter entries.
//! * [`Body::Inline`]: bytes copied at post time (`IBV_SEND_INLINE`).

use core::fmt;
use std::sync::Arc;

use falcon_core::api::DataSource;

use crate::verbs::Region;

/// A byte range of a region.
#[derive(Clone)]
pub struct Segment {
    pub region: Region,
    pub offset: usize,
    pub len: usize,
}

impl fmt::Debug for Segment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}[{}..+{}]", self.region, self.offset, self.len)
    }
}

/// The data part of an RDMA-over-Falcon transmission: a body and its pad
/// (see the module doc).
#[derive(Clone, Default)]
pub struct RdmaData {
    pub body: Body,
    /// Zero bytes after the body (0..=3, the RBTH Pad).
    pub pad: u8,
}

impl RdmaData {
    /// No data.
    pub const NONE: RdmaData = RdmaData {
        body: Body::None,
        pad: 0,
    };

    /// `body` padded to a multiple of 4 bytes.
    pub fn padded(body: Body) -> RdmaData {
        let pad = crate::wire::PadCount::for_payload(body.len()).value();
        RdmaData { body, pad }
    }
}

impl DataSource for RdmaData {
    #[inline]
    fn len(&self) -> usize {
        self.body.len() + usize::from(self.pad)
    }

    fn copy_to(&self, offset: usize, dst: &mut [u8]) {
        let body = self.body.len();
        let split = body.saturating_sub(offset).min(dst.len());
        let (head, tail) = dst.split_at_mut(split);
        if !head.is_empty() {
            self.body.copy_to(offset, head);
        }
        tail.fill(0);
    }
}

/// The bytes of a transmission before its pad.
#[derive(Clone, Default)]
pub enum Body {
    #[default]
    None,
    Region(Segment),
    /// Pieces of several regions, in order.
    Gather(Arc<[Segment]>),
    /// `bytes[start..start + len]`.
    Inline {
        bytes: Arc<[u8]>,
        start: usize,
        len: usize,
    },
}

impl Body {
    #[inline]
    pub fn len(&self) -> usize {
        match self {
            Body::None => 0,
            Body::Region(segment) => segment.len,
            Body::Gather(segments) => segments.iter().map(|s| s.len).sum(),
            Body::Inline { len, .. } => *len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `dst.len()` bytes from `offset`. Bytes past what the region holds
    /// (never, for a checked access) are zero-filled: a frame never
    /// carries stale bytes.
    pub fn copy_to(&self, offset: usize, dst: &mut [u8]) {
        match self {
            Body::None => dst.fill(0),
            Body::Region(segment) => copy_segment(segment, offset, dst),
            Body::Gather(segments) => {
                let mut skip = offset;
                let mut out = dst;
                for segment in segments.iter() {
                    if out.is_empty() {
                        break;
                    }
                    if skip >= segment.len {
                        skip -= segment.len;
                        continue;
                    }
                    let n = (segment.len - skip).min(out.len());
                    let (now, rest) = out.split_at_mut(n);
                    copy_segment(segment, skip, now);
                    skip = 0;
                    out = rest;
                }
                out.fill(0);
            }
            Body::Inline { bytes, start, len } => {
                let window = bytes
                    .get(*start..start.saturating_add(*len))
                    .unwrap_or_default();
                let available = window.get(offset..).unwrap_or_default();
                let n = available.len().min(dst.len());
                dst[..n].copy_from_slice(&available[..n]);
                dst[n..].fill(0);
            }
        }
    }
}

/// `dst.len()` bytes of `segment` from `offset`, zero past its end.
fn copy_segment(segment: &Segment, offset: usize, dst: &mut [u8]) {
    let within = segment.len.saturating_sub(offset).min(dst.len());
    let (head, tail) = dst.split_at_mut(within);
    segment.region.copy_out(segment.offset + offset, head);
    tail.fill(0);
}

impl fmt::Debug for RdmaData {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} pad {}", self.body, self.pad)
    }
}

impl fmt::Debug for Body {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Body::None => f.write_str("None"),
            Body::Region(segment) => write!(f, "Region({segment:?})"),
            Body::Gather(segments) => write!(f, "Gather({} segments)", segments.len()),
            Body::Inline { len, .. } => write!(f, "Inline({len})"),
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn read_all(source: &RdmaData, chunk: usize) -> Vec<u8> {
        let mut out = vec![0xEE; source.len()];
        for (i, window) in out.chunks_mut(chunk).enumerate() {
            source.copy_to(i * chunk, window);
        }
        out
    }

    proptest! {
        /// A gather reads the concatenation of its segments, in any
        /// window size, as a frame builder or a retransmission would.
        #[test]
        fn gather_is_the_concatenation(
            cuts in proptest::collection::vec((0usize..300, 0usize..300), 1..5),
            chunk in 1usize..700,
        ) {
            let region = Region::from_vec((0..600).map(|i| (i * 7) as u8).collect());
            let segments: Vec<Segment> = cuts
                .iter()
                .map(|&(a, b)| Segment { region: region.clone(), offset: a, len: b })
                .collect();
            let expected: Vec<u8> = cuts
                .iter()
                .flat_map(|&(a, b)| region.to_vec()[a..a + b].to_vec())
                .collect();
            let source = RdmaData { body: Body::Gather(segments.into()), pad: 0 };
            prop_assert_eq!(source.len(), expected.len());
            prop_assert_eq!(read_all(&source, chunk), expected);
        }
    }

    #[test]
    fn region_inline_none_and_the_pad() {
        let region = Region::from_vec((0..10).collect());
        let source = RdmaData::padded(Body::Region(Segment {
            region,
            offset: 3,
            len: 5,
        }));
        assert_eq!(source.pad, 3);
        assert_eq!(read_all(&source, 2), [3, 4, 5, 6, 7, 0, 0, 0]);
        let mut past = [0xFF; 3];
        source.copy_to(4, &mut past);
        assert_eq!(past, [7, 0, 0]);
        let inline = RdmaData::padded(Body::Inline {
            bytes: Arc::from(&b"hello world"[..]),
            start: 6,
            len: 4,
        });
        assert_eq!((inline.pad, read_all(&inline, 3)), (0, b"worl".to_vec()));
        assert_eq!(RdmaData::NONE.len(), 0);
        let mut dst = [1u8; 2];
        Body::None.copy_to(0, &mut dst);
        assert_eq!(dst, [0, 0]);
    }
}
