//! Received payloads: what the ULPs get, and how it reaches the
//! transaction sublayer.
//!
//! Layer: transaction sublayer, boundary to the ULPs and to the engine's
//! receive path. Owns [`Payload`] (the bytes of a delivered request or of
//! received Pull Data: a vector and the range of it they occupy) and
//! [`RxPayload`] (a received payload as the engine hands it to
//! [`Target::on_request`](super::Target::on_request) and
//! [`Initiator::on_pull_data`](super::Initiator::on_pull_data): borrowed
//! from a frame, or with the frame's vector itself to take over), and the
//! one place that decides between taking a frame over and copying
//! ([`RxPayload::store`]). Plain values; never panics, whatever the ranges
//! it is given.
//!
//! # Zero-copy receive by buffer exchange
//!
//! A Push Data payload at the target, or a Pull Data payload at the
//! initiator, of at least [`ZERO_COPY_MIN_LEN`] bytes that comes in
//! through `Engine::handle_frame` is not copied: the receiving side takes
//! the whole frame vector (headers, opened PSP trailer and all) into its
//! slot and puts a spare vector of the same length from the engine's free
//! list in its place, which the caller's frame buffer then carries back to
//! the port. The delivered [`Payload`] (`Request::payload`,
//! `Completion::data`) is that frame vector with the payload's range; the
//! ULP reads it in place and hands it back with `Engine::recycle`, and it
//! becomes a spare for a later frame. Only a payload that is stored takes
//! its frame: a duplicate, unmatched or refused packet leaves it with the
//! caller. Smaller payloads, Pull Requests' ULP headers, frames passed as
//! a plain slice (`Engine::handle_packet`) and ports whose buffers are not
//! heap vectors (a DPDK mbuf) keep the copy into a recycled vector.

use core::fmt;
use core::ops::{Deref, DerefMut, Range};

use crate::resources::Buffers;

/// Push and Pull Data payloads shorter than this are copied even when the
/// frame could be taken over. In instructions the exchange wins at every size (callgrind,
/// the bench loop's PSP push, per transaction: 12 fewer at 64 B, 30 at
/// 256 B, 77 at 512 B, 125 at 1 KiB, 413 at 4 KiB, of 6,200–25,000), but
/// below 512 B the saving is under 0.5 % and lost in the wall-time noise,
/// while each payload the ULP holds would pin a whole frame buffer (9 KiB
/// on the loopback, 18× a 512-byte payload and more below). From 512 B the
/// gain is ≥ 1 % of instructions and grows with the size; the 4 KiB PSP
/// loop gains more in time than in instructions (~5 % more goodput in
/// `falcon bench core`, 5–7 % less CPU time in the core bench loop).
pub const ZERO_COPY_MIN_LEN: usize = 512;

/// The payload of a request delivered to the target ULP
/// ([`Request::payload`](super::Request::payload)) or of Pull Data
/// completed to the initiator ULP
/// ([`Completion::data`](super::Completion::data)): bytes `start..end` of
/// a vector the ULP now owns.
///
/// The vector is either a recycled one holding just the payload (`start`
/// 0), or — zero-copy receive, see the [module docs](self) — the received
/// frame's own buffer, the payload in the middle of it. Either way it
/// dereferences to the payload bytes, compares by them, and goes back to
/// the engine with `Engine::recycle` (which takes the whole vector).
/// [`into_vec`](Self::into_vec) turns it into a plain `Vec<u8>` of the
/// payload.
#[derive(Default)]
pub struct Payload {
    /// Invariant: `start <= end <= buf.len()` (every constructor clamps).
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

impl Payload {
    /// An empty payload (no allocation).
    pub const fn new() -> Self {
        Payload {
            buf: Vec::new(),
            start: 0,
            end: 0,
        }
    }

    /// Bytes `range` of `buf` (a received frame's buffer). A range past
    /// the end of `buf` is clamped to it.
    pub fn in_buffer(buf: Vec<u8>, range: Range<usize>) -> Self {
        let end = range.end.min(buf.len());
        let start = range.start.min(end);
        Payload { buf, start, end }
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

    /// The payload bytes.
    #[inline]
    pub fn as_slice(&self) -> &[u8] {
        self.buf.get(self.start..self.end).unwrap_or_default()
    }

    /// The payload bytes, mutable.
    #[inline]
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        self.buf.get_mut(self.start..self.end).unwrap_or_default()
    }

    /// Where the payload sits in [`buffer`](Self::buffer).
    pub fn range(&self) -> Range<usize> {
        self.start..self.end
    }

    /// The whole backing vector (for a frame-backed payload, the frame).
    pub fn buffer(&self) -> &[u8] {
        &self.buf
    }

    /// The payload as a plain vector of exactly its bytes. Copy-free when
    /// the payload starts the vector (a copied payload): the vector is
    /// truncated. A frame-backed payload's bytes are moved down to the
    /// front first (one `memmove` of the payload, no allocation); the
    /// vector keeps the frame's capacity.
    pub fn into_vec(self) -> Vec<u8> {
        let Payload {
            mut buf,
            start,
            end,
        } = self;
        if start > 0 {
            // In bounds by the invariant `start <= end <= buf.len()`.
            buf.copy_within(start..end, 0);
        }
        buf.truncate(end - start);
        buf
    }

    /// Whether it holds an allocated vector: when not, it is exactly
    /// [`new`](Self::new) (capacity 0, so length, start and end 0).
    #[inline(always)]
    pub(crate) fn is_allocated(&self) -> bool {
        self.buf.capacity() != 0
    }

    /// The whole backing vector, for recycling (its length is unspecified
    /// for a copied payload; a frame-backed one keeps the frame's).
    pub fn into_buffer(self) -> Vec<u8> {
        self.buf
    }
}

impl Deref for Payload {
    type Target = [u8];

    #[inline]
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl DerefMut for Payload {
    #[inline]
    fn deref_mut(&mut self) -> &mut [u8] {
        self.as_mut_slice()
    }
}

impl AsRef<[u8]> for Payload {
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl AsMut<[u8]> for Payload {
    fn as_mut(&mut self) -> &mut [u8] {
        self.as_mut_slice()
    }
}

impl From<Vec<u8>> for Payload {
    /// The whole vector is the payload.
    fn from(buf: Vec<u8>) -> Self {
        let end = buf.len();
        Payload { buf, start: 0, end }
    }
}

impl From<Payload> for Vec<u8> {
    /// [`Payload::into_vec`].
    fn from(payload: Payload) -> Self {
        payload.into_vec()
    }
}

impl Clone for Payload {
    /// A copy of the payload bytes only (not of the frame around them).
    fn clone(&self) -> Self {
        Payload::from(self.as_slice().to_vec())
    }
}

impl fmt::Debug for Payload {
    /// As the byte slice (like `Vec<u8>`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_slice(), f)
    }
}

impl PartialEq for Payload {
    fn eq(&self, other: &Payload) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for Payload {}

impl core::hash::Hash for Payload {
    fn hash<H: core::hash::Hasher>(&self, state: &mut H) {
        self.as_slice().hash(state);
    }
}

macro_rules! eq_bytes {
    ($($other:ty),*) => {$(
        impl PartialEq<$other> for Payload {
            fn eq(&self, other: &$other) -> bool {
                self.as_slice() == &other[..]
            }
        }

        impl PartialEq<Payload> for $other {
            fn eq(&self, other: &Payload) -> bool {
                &self[..] == other.as_slice()
            }
        }
    )*};
}

eq_bytes!([u8], &[u8], Vec<u8>);

impl<const N: usize> PartialEq<[u8; N]> for Payload {
    fn eq(&self, other: &[u8; N]) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl<const N: usize> PartialEq<&[u8; N]> for Payload {
    fn eq(&self, other: &&[u8; N]) -> bool {
        self.as_slice() == other.as_slice()
    }
}

/// A received payload as the engine hands it to the transaction sublayer.
#[derive(Debug)]
pub enum RxPayload<'a> {
    /// Bytes in a frame the caller keeps (copied if stored).
    Borrowed(&'a [u8]),
    /// Bytes `range` of a frame whose vector the receiving side may take
    /// over, leaving a spare of the same length in its place (see the
    /// [module docs](self)).
    Frame {
        /// The frame's buffer (its whole length, not just the frame).
        frame: &'a mut Vec<u8>,
        /// Where the payload is in it.
        range: Range<usize>,
    },
}

impl RxPayload<'_> {
    /// The payload bytes (empty if the range is outside the frame).
    #[inline]
    pub fn bytes(&self) -> &[u8] {
        match self {
            RxPayload::Borrowed(bytes) => bytes,
            RxPayload::Frame { frame, range } => frame.get(range.clone()).unwrap_or_default(),
        }
    }

    /// The same payload, a [`Frame`](Self::Frame) one inside its frame and
    /// shorter than [`ZERO_COPY_MIN_LEN`] as its bytes: [`store`](Self::store)
    /// only copies those, so the range is checked against the frame once
    /// here, where [`len`](Self::len) and the copy checked it each
    /// (callgrind, push64: 2592.4 → 2580.4 instructions per transaction,
    /// `Target::on_request` 360.4 → 348.5 inclusive).
    #[inline(always)]
    pub(crate) fn short_borrowed(self) -> Self {
        match self {
            RxPayload::Frame { frame, range }
                if range.start <= range.end
                    && range.end <= frame.len()
                    && range.end - range.start < ZERO_COPY_MIN_LEN =>
            {
                RxPayload::Borrowed(&frame[range])
            }
            payload => payload,
        }
    }

    /// Payload bytes.
    #[inline]
    pub fn len(&self) -> usize {
        match self {
            RxPayload::Borrowed(bytes) => bytes.len(),
            RxPayload::Frame { .. } => self.bytes().len(),
        }
    }

    /// Whether there are no payload bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The payload as stored for a ULP: a [`Frame`](Self::Frame) payload of
    /// at least [`ZERO_COPY_MIN_LEN`] bytes takes the frame's vector over
    /// ([`Buffers::exchange`] leaves a spare in its place) and counts it in
    /// `taken`; anything else is copied into a recycled vector. Call it
    /// only for a payload that is kept: taking is final.
    ///
    /// Always inlined: out of line (LLVM's choice under `#[inline]`, with
    /// two callers in `Target::on_request`) a 64-byte push's copy paid a
    /// call, four register saves and the `Payload` returned through memory
    /// (callgrind, push64: 2900.8 → 2888.8 instructions per transaction,
    /// `on_request` 379 → 367 inclusive).
    #[inline(always)]
    pub fn store(self, buffers: &mut Buffers, taken: &mut u64) -> Payload {
        match self {
            RxPayload::Frame { frame, range } if range.len() >= ZERO_COPY_MIN_LEN => {
                take_frame(buffers, frame, range, taken)
            }
            payload => payload.copy(buffers),
        }
    }

    /// The payload copied into a recycled vector (never takes the frame).
    #[inline]
    pub fn copy(self, buffers: &mut Buffers) -> Payload {
        Payload::from(buffers.copy_of(self.bytes()))
    }
}

/// Zero-copy receive: `frame`'s vector becomes the payload, a spare takes
/// its place. Out of line so that the copying callers stay as small as
/// they were (callgrind, push64_plain_profile).
#[inline(never)]
fn take_frame(
    buffers: &mut Buffers,
    frame: &mut Vec<u8>,
    range: Range<usize>,
    taken: &mut u64,
) -> Payload {
    *taken += 1;
    Payload::in_buffer(buffers.exchange(frame), range)
}

impl<'a> From<&'a [u8]> for RxPayload<'a> {
    fn from(bytes: &'a [u8]) -> Self {
        RxPayload::Borrowed(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn framed() -> Payload {
        // A 16-byte "frame" with the payload at 4..10.
        let frame: Vec<u8> = (0..16).collect();
        Payload::in_buffer(frame, 4..10)
    }

    #[test]
    fn derefs_to_the_payload_range_only() {
        let mut p = framed();
        assert_eq!((p.len(), p.is_empty(), p.range()), (6, false, 4..10));
        assert_eq!(&*p, &[4, 5, 6, 7, 8, 9]);
        assert_eq!(p.as_ref(), &[4, 5, 6, 7, 8, 9]);
        assert_eq!(p[0], 4);
        assert_eq!(p.buffer().len(), 16, "the frame around it stays");
        p[1] = 0xFF;
        p.as_mut_slice()[2] = 0xEE;
        assert_eq!(p.buffer()[5..7], [0xFF, 0xEE]);
        assert_eq!(
            p.iter().map(|&b| u32::from(b)).sum::<u32>(),
            4 + 255 + 238 + 7 + 8 + 9
        );
    }

    #[test]
    fn into_vec_without_offset_truncates_in_place() {
        let mut buf = Vec::with_capacity(64);
        buf.extend_from_slice(b"hello, world");
        let ptr = buf.as_ptr();
        let p = Payload::in_buffer(buf, 0..5);
        let v = p.into_vec();
        assert_eq!(v, b"hello");
        assert_eq!((v.as_ptr(), v.capacity()), (ptr, 64), "same allocation");
    }

    #[test]
    fn into_vec_with_offset_moves_the_bytes_down() {
        let p = framed();
        let ptr = p.buffer().as_ptr();
        let v = p.into_vec();
        assert_eq!(v, [4, 5, 6, 7, 8, 9]);
        assert_eq!(v.as_ptr(), ptr, "no new allocation");
        let v: Vec<u8> = Payload::in_buffer((0..8).collect(), 8..8).into();
        assert!(v.is_empty());
    }

    #[test]
    fn out_of_range_is_clamped_never_a_panic() {
        let p = Payload::in_buffer(vec![1, 2, 3], 2..100);
        assert_eq!((p.range(), &*p), (2..3, &[3][..]));
        let p = Payload::in_buffer(vec![1, 2, 3], 7..9);
        assert!(p.is_empty());
        #[allow(clippy::reversed_empty_ranges)]
        let p = Payload::in_buffer(vec![1, 2, 3], 2..1);
        assert!(p.is_empty());
        assert_eq!(p.into_vec(), Vec::<u8>::new());
        let mut frame = vec![0u8; 4];
        let rx = RxPayload::Frame {
            frame: &mut frame,
            range: 3..9,
        };
        assert!(rx.is_empty());
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
        assert_eq!(
            p,
            Payload::from(bytes.to_vec()),
            "backing differs, bytes equal"
        );
        assert_ne!(p, [4u8, 5, 6]);
        assert_ne!(p, Payload::new());
        let copy = p.clone();
        assert_eq!(
            (copy.range(), copy.buffer().len()),
            (0..6, 6),
            "clone copies the payload only"
        );
        assert_eq!(copy, p);
        assert_eq!(format!("{p:?}"), "[4, 5, 6, 7, 8, 9]");
    }

    #[test]
    fn store_takes_large_frames_and_copies_everything_else() {
        let mut buffers = Buffers::new(4);
        let mut taken = 0;
        let mut frame: Vec<u8> = (0..2048).map(|i| i as u8).collect();
        let ptr = frame.as_ptr();
        let range = 100..100 + ZERO_COPY_MIN_LEN;
        let expect = frame[range.clone()].to_vec();
        let rx = RxPayload::Frame {
            frame: &mut frame,
            range: range.clone(),
        };
        let p = rx.store(&mut buffers, &mut taken);
        assert_eq!((p.buffer().as_ptr(), p.range(), taken), (ptr, range, 1));
        assert_eq!(p, expect);
        assert_eq!(frame.len(), 2048, "a spare of the frame's length left");
        assert_ne!(frame.as_ptr(), ptr);

        // One byte short: copied, the frame kept.
        let ptr = frame.as_ptr();
        let rx = RxPayload::Frame {
            frame: &mut frame,
            range: 1..ZERO_COPY_MIN_LEN,
        };
        let p = rx.store(&mut buffers, &mut taken);
        assert_eq!((p.range(), taken, frame.as_ptr()), (0..511, 1, ptr));
        // Borrowed, however long, and `copy`: copied.
        let p = RxPayload::Borrowed(&frame[..1024]).store(&mut buffers, &mut taken);
        assert_eq!((p.len(), taken), (1024, 1));
        let rx = RxPayload::Frame {
            frame: &mut frame,
            range: 0..1024,
        };
        let p = rx.copy(&mut buffers);
        assert_eq!((p.range(), taken, frame.as_ptr()), (0..1024, 1, ptr));
    }

    #[test]
    fn from_vec_is_the_whole_vector() {
        let p = Payload::from(vec![9u8; 3]);
        assert_eq!((p.range(), p.len()), (0..3, 3));
        assert_eq!(Payload::default(), Payload::new());
        assert!(Payload::new().is_empty());
    }
}
