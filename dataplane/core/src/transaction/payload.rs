//! Received payloads: what the ULPs get, and how it reaches the
//! transaction sublayer.
//!
//! Layer: transaction sublayer, boundary to the ULPs and to the engine's
//! receive path. Owns [`Payload`] (the bytes of a delivered Push Data or of
//! received Pull Data: a view into the received frame's own buffer, the
//! port's buffer type `B`) and [`RxPayload`] (a received payload as the
//! engine offers it to [`Target::on_request`](super::Target::on_request)
//! and [`Initiator::on_pull_data`](super::Initiator::on_pull_data): the
//! frame, which the receiving side takes only if it keeps the payload).
//! Plain values; never panics, whatever the ranges it is given.
//!
//! # Receive without a copy
//!
//! A payload the transaction sublayer keeps takes its whole frame (headers,
//! opened PSP trailer and all): the frame buffer moves into the slot, then
//! to the ULP in [`Request::payload`](super::Request::payload) or
//! [`Completion::data`](super::Completion::data), and the ULP reads the
//! payload where the port put it (an mbuf on DPDK). The ULP gives the frame
//! back with `Engine::release`, and the engine returns it to the port with
//! the next burst. A frame whose payload is not kept (a duplicate, an
//! unmatched or refused packet, an ACK) stays with the caller. Pull
//! Requests' ULP headers are copied into the request's inline
//! [`UlpHeader`]: the target keeps them for an RNR redelivery.

use core::fmt;
use core::ops::{Deref, DerefMut, Range};

use crate::port::PacketBuf;
use crate::transaction::UlpHeader;

/// The payload of a Push Data delivered to the target ULP
/// ([`Request::payload`](super::Request::payload)) or of Pull Data
/// completed to the initiator ULP
/// ([`Completion::data`](super::Completion::data)): bytes `start..end` of
/// the received frame, in the port's buffer `B`, now the ULP's.
///
/// It dereferences to the payload bytes and compares by them; the frame
/// goes back to the port with `Engine::release` (or
/// [`into_frame`](Self::into_frame) for a caller that frees it itself).
/// An empty payload may hold no frame.
pub struct Payload<B> {
    /// Invariant: `start <= end <= frame.len()` (every constructor clamps);
    /// both 0 without a frame.
    frame: Option<B>,
    start: usize,
    end: usize,
}

impl<B> Payload<B> {
    /// An empty payload (no frame).
    pub const fn new() -> Self {
        Payload {
            frame: None,
            start: 0,
            end: 0,
        }
    }

    /// Payload bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.end - self.start
    }

    /// Whether there are no payload bytes.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }

    /// Where the payload sits in the frame.
    pub fn range(&self) -> Range<usize> {
        self.start..self.end
    }

    /// The frame it is in.
    pub fn frame(&self) -> Option<&B> {
        self.frame.as_ref()
    }

    /// The frame, for a caller that returns it to its port itself.
    pub fn into_frame(self) -> Option<B> {
        self.frame
    }

    /// Whether it holds a frame: when not, it is exactly
    /// [`new`](Self::new).
    #[inline(always)]
    pub(crate) fn has_frame(&self) -> bool {
        self.frame.is_some()
    }
}

impl<B: PacketBuf> Payload<B> {
    /// Bytes `range` of `frame`. A range past the end of the frame is
    /// clamped to it.
    pub fn in_frame(frame: B, range: Range<usize>) -> Self {
        let end = range.end.min(frame.len());
        let start = range.start.min(end);
        Payload {
            frame: Some(frame),
            start,
            end,
        }
    }

    /// The payload bytes.
    #[inline]
    pub fn as_slice(&self) -> &[u8] {
        match &self.frame {
            Some(frame) => frame.data().get(self.start..self.end).unwrap_or_default(),
            None => &[],
        }
    }

    /// The payload bytes, mutable.
    #[inline]
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        match &mut self.frame {
            Some(frame) => frame
                .data_mut()
                .get_mut(self.start..self.end)
                .unwrap_or_default(),
            None => &mut [],
        }
    }

    /// A copy of the payload bytes.
    pub fn to_vec(&self) -> Vec<u8> {
        self.as_slice().to_vec()
    }
}

impl<B> Default for Payload<B> {
    fn default() -> Self {
        Payload::new()
    }
}

impl<B: PacketBuf> Deref for Payload<B> {
    type Target = [u8];

    #[inline]
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl<B: PacketBuf> DerefMut for Payload<B> {
    #[inline]
    fn deref_mut(&mut self) -> &mut [u8] {
        self.as_mut_slice()
    }
}

impl<B: PacketBuf> AsRef<[u8]> for Payload<B> {
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl<B: PacketBuf> fmt::Debug for Payload<B> {
    /// As the byte slice (like `Vec<u8>`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_slice(), f)
    }
}

impl<B: PacketBuf, C: PacketBuf> PartialEq<Payload<C>> for Payload<B> {
    fn eq(&self, other: &Payload<C>) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl<B: PacketBuf> Eq for Payload<B> {}

impl<B: PacketBuf> core::hash::Hash for Payload<B> {
    fn hash<H: core::hash::Hasher>(&self, state: &mut H) {
        self.as_slice().hash(state);
    }
}

macro_rules! eq_bytes {
    ($($other:ty),*) => {$(
        impl<B: PacketBuf> PartialEq<$other> for Payload<B> {
            fn eq(&self, other: &$other) -> bool {
                self.as_slice() == &other[..]
            }
        }

        impl<B: PacketBuf> PartialEq<Payload<B>> for $other {
            fn eq(&self, other: &Payload<B>) -> bool {
                &self[..] == other.as_slice()
            }
        }
    )*};
}

eq_bytes!([u8], &[u8], Vec<u8>);

impl<B: PacketBuf, const N: usize> PartialEq<[u8; N]> for Payload<B> {
    fn eq(&self, other: &[u8; N]) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl<B: PacketBuf, const N: usize> PartialEq<&[u8; N]> for Payload<B> {
    fn eq(&self, other: &&[u8; N]) -> bool {
        self.as_slice() == other.as_slice()
    }
}

/// A received payload as the engine offers it to the transaction
/// sublayer: bytes `range` of the frame in `frame`, which the receiving
/// side takes ([`store`](Self::store)) only if it keeps the payload.
#[derive(Debug)]
pub struct RxPayload<'a, B> {
    /// The received frame (`None` once taken, or for a packet with no
    /// payload).
    pub frame: &'a mut Option<B>,
    /// Where the payload is in it.
    pub range: Range<usize>,
}

impl<B: PacketBuf> RxPayload<'_, B> {
    /// The payload bytes (empty if the range is outside the frame).
    #[inline]
    pub fn bytes(&self) -> &[u8] {
        match &*self.frame {
            Some(frame) => frame.data().get(self.range.clone()).unwrap_or_default(),
            None => &[],
        }
    }

    /// Payload bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.bytes().len()
    }

    /// Whether there are no payload bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The payload as stored for a ULP: the frame taken over, and counted
    /// in `held`. Call it only for a payload that is kept: taking is
    /// final.
    #[inline(always)]
    pub fn store(self, held: &mut u64) -> Payload<B> {
        match self.frame.take() {
            Some(frame) => {
                *held += 1;
                Payload::in_frame(frame, self.range)
            }
            None => Payload::new(),
        }
    }

    /// The payload copied into an inline ULP header (a Pull Request's);
    /// the frame stays with the caller.
    ///
    /// # Errors
    ///
    /// [`HeaderTooLong`](crate::transaction::HeaderTooLong) beyond
    /// [`ULP_HEADER_CAPACITY`](crate::transaction::ULP_HEADER_CAPACITY).
    #[inline]
    pub fn header(&self) -> Result<UlpHeader, crate::transaction::HeaderTooLong> {
        UlpHeader::new(self.bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::port::FrameBuf;

    fn framed() -> Payload<FrameBuf> {
        // A 16-byte "frame" with the payload at 4..10.
        let frame: Vec<u8> = (0..16).collect();
        Payload::in_frame(FrameBuf::from_frame(&frame, 16), 4..10)
    }

    #[test]
    fn derefs_to_the_payload_range_only() {
        let mut p = framed();
        assert_eq!((p.len(), p.is_empty(), p.range()), (6, false, 4..10));
        assert_eq!(&*p, &[4, 5, 6, 7, 8, 9]);
        assert_eq!(p.as_ref(), &[4, 5, 6, 7, 8, 9]);
        assert_eq!(p[0], 4);
        assert_eq!(
            p.frame().map(PacketBuf::len),
            Some(16),
            "the frame around it stays"
        );
        p[1] = 0xFF;
        p.as_mut_slice()[2] = 0xEE;
        assert_eq!(p.frame().expect("framed").data()[5..7], [0xFF, 0xEE]);
        assert_eq!(p.to_vec(), [4, 0xFF, 0xEE, 7, 8, 9]);
    }

    #[test]
    fn out_of_range_is_clamped_never_a_panic() {
        let frame = || FrameBuf::from_frame(&[1, 2, 3], 3);
        let p = Payload::in_frame(frame(), 2..100);
        assert_eq!((p.range(), &*p), (2..3, &[3][..]));
        let p = Payload::in_frame(frame(), 7..9);
        assert!(p.is_empty());
        #[allow(clippy::reversed_empty_ranges)]
        let p = Payload::in_frame(frame(), 2..1);
        assert!(p.is_empty());
        let mut held = Some(frame());
        let rx = RxPayload {
            frame: &mut held,
            range: 3..9,
        };
        assert!(rx.is_empty());
        let mut none: Option<FrameBuf> = None;
        let rx = RxPayload {
            frame: &mut none,
            range: 0..9,
        };
        assert!(rx.is_empty());
        let mut held = 0;
        assert!(!rx.store(&mut held).has_frame());
        assert_eq!(held, 0);
    }

    #[test]
    fn compares_by_bytes_with_every_byte_container() {
        let p = framed();
        let bytes = [4u8, 5, 6, 7, 8, 9];
        assert_eq!(p, bytes);
        assert_eq!(p, &bytes);
        assert_eq!(p, bytes.to_vec());
        assert_eq!(p, &bytes[..]);
        assert_eq!(p, bytes[..]);
        assert_eq!(bytes.to_vec(), p);
        assert_eq!(&bytes[..], p);
        let other = Payload::in_frame(FrameBuf::from_frame(&bytes, 6), 0..6);
        assert_eq!(p, other, "frames differ, bytes equal");
        assert_ne!(p, [4u8, 5, 6]);
        assert_ne!(p, Payload::<FrameBuf>::new());
        assert_eq!(format!("{p:?}"), "[4, 5, 6, 7, 8, 9]");
    }

    #[test]
    fn store_takes_the_frame_and_header_copies() {
        let mut frame = Some(FrameBuf::from_frame(&(0..100).collect::<Vec<u8>>(), 128));
        let rx = RxPayload {
            frame: &mut frame,
            range: 10..20,
        };
        assert_eq!(
            rx.header().expect("short").as_slice(),
            &(10..20).collect::<Vec<u8>>()[..]
        );
        assert!(frame.is_some(), "a header copy leaves the frame");
        let mut held = 0;
        let p = RxPayload {
            frame: &mut frame,
            range: 10..20,
        }
        .store(&mut held);
        assert_eq!((p.range(), held, frame.is_none()), (10..20, 1, true));
        assert_eq!(p.frame().map(PacketBuf::capacity), Some(128));
        let mut frame = Some(FrameBuf::from_frame(&[0; 100], 100));
        let long = RxPayload {
            frame: &mut frame,
            range: 0..100,
        };
        assert!(long.header().is_err());
    }
}
