//! Payload buffers that circulate between the port, the ULP and the engine.
//!
//! Layer: transaction sublayer, memory. Owns [`Buffers`], two bounded free
//! lists of `Vec<u8>`s:
//!
//! * **ordinary vectors**, for copies: the engine copies a received payload
//!   out of the frame (small pushes and Pull Data, Pull Requests' ULP
//!   headers, frames that came in as a plain slice) into a recycled vector
//!   ([`copy_of`](Buffers::copy_of)) and hands it to the ULP;
//! * **frame-sized vectors**, for exchanges: a large push or Pull Data
//!   received in a frame whose buffer is a heap vector is not copied; the
//!   target (push) or initiator (Pull Data) takes the frame's vector over
//!   and puts a spare of the same length in its place
//!   ([`exchange`](Buffers::exchange)), which the port gets back (see
//!   `transaction::payload`).
//!
//! The ULP gives vectors back with `Engine::recycle` (and gets its
//! submitted ones back in the completion); [`give`](Buffers::give) sorts
//! them by capacity: at least the last exchanged frame's length, a frame
//! spare, else an ordinary vector. Once warmed up, a ULP that recycles
//! causes no allocation on the hot path; one that does not simply makes the
//! engine allocate. Never panics; bounded (beyond `max_cached` vectors in
//! a list, returned ones are dropped).

/// The free lists of payload vectors.
#[derive(Debug, Clone)]
pub struct Buffers {
    /// Ordinary vectors, for copies.
    free: Vec<Vec<u8>>,
    /// Vectors of at least `frame_len` bytes' capacity, spares for frames.
    frames: Vec<Vec<u8>>,
    /// Length of the last frame vector exchanged (`usize::MAX` before the
    /// first): a returned vector this large is a frame spare.
    frame_len: usize,
    max_cached: usize,
    /// Vectors allocated because a free list was empty (copies and
    /// spares).
    pub allocated: u64,
}

impl Default for Buffers {
    /// No cached vectors at all (`max_cached` 0).
    fn default() -> Self {
        Buffers::new(0)
    }
}

impl Buffers {
    /// Free lists keeping at most `max_cached` vectors each.
    pub fn new(max_cached: usize) -> Self {
        Buffers {
            free: Vec::new(),
            frames: Vec::new(),
            frame_len: usize::MAX,
            max_cached,
            allocated: 0,
        }
    }

    /// A vector holding a copy of `bytes`.
    #[inline]
    pub fn copy_of(&mut self, bytes: &[u8]) -> Vec<u8> {
        let mut buf = match self.free.pop() {
            Some(buf) => buf,
            None => {
                self.allocated += 1;
                Vec::with_capacity(bytes.len())
            }
        };
        buf.clear();
        buf.extend_from_slice(bytes);
        buf
    }

    /// Takes `frame` over, leaving a spare vector of the same length in its
    /// place (its bytes unspecified); returns the frame's vector. The spare
    /// comes from the frame list (allocated, zeroed, when it is empty).
    pub fn exchange(&mut self, frame: &mut Vec<u8>) -> Vec<u8> {
        let len = frame.len();
        self.frame_len = len;
        let spare = match self.frames.pop() {
            // A recycled frame vector keeps its length (`Engine::recycle`
            // takes the whole buffer), so this resize writes nothing; only
            // one truncated by `Payload::into_vec` is zero-filled back.
            Some(mut spare) if spare.capacity() >= len => {
                spare.resize(len, 0);
                spare
            }
            _ => {
                self.allocated += 1;
                vec![0; len]
            }
        };
        core::mem::replace(frame, spare)
    }

    /// An empty vector (from the ordinary list if possible).
    pub fn empty(&mut self) -> Vec<u8> {
        let mut buf = self.free.pop().unwrap_or_default();
        buf.clear();
        buf
    }

    /// Takes a vector back: onto the frame list if it could be a spare for
    /// the frames exchanged so far, else onto the ordinary list (either
    /// full: dropped).
    #[inline]
    pub fn give(&mut self, buf: Vec<u8>) {
        if buf.capacity() >= self.frame_len {
            if self.frames.len() < self.max_cached {
                self.frames.push(buf);
            }
        } else if self.free.len() < self.max_cached && buf.capacity() > 0 {
            self.free.push(buf);
        }
    }

    /// Vectors on both free lists.
    pub fn cached(&self) -> usize {
        self.free.len() + self.frames.len()
    }

    /// Of those, frame spares.
    pub fn cached_frames(&self) -> usize {
        self.frames.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recycled_vectors_are_reused_without_allocating() {
        let mut buffers = Buffers::new(2);
        let a = buffers.copy_of(b"hello");
        assert_eq!((a.as_slice(), buffers.allocated), (&b"hello"[..], 1));
        let ptr = a.as_ptr();
        buffers.give(a);
        let b = buffers.copy_of(b"hi");
        assert_eq!(b, b"hi");
        assert_eq!((b.as_ptr(), buffers.allocated), (ptr, 1));
        buffers.give(b);
        buffers.give(vec![1]);
        buffers.give(vec![2]);
        assert_eq!(buffers.cached(), 2, "bounded");
        // `empty` hands a cached vector back cleared, its allocation kept.
        let reused = buffers.empty();
        assert!(reused.is_empty() && reused.capacity() > 0);
        assert_eq!(buffers.cached(), 1);
        // A vector with no allocation is not worth a place on the list.
        let mut buffers = Buffers::new(2);
        buffers.give(Vec::new());
        assert_eq!(buffers.cached(), 0);
    }

    #[test]
    fn exchange_hands_out_a_spare_of_the_frames_length() {
        let mut buffers = Buffers::new(4);
        let mut frame = vec![7u8; 9216];
        let frame_ptr = frame.as_ptr();
        let taken = buffers.exchange(&mut frame);
        assert_eq!(
            (taken.as_ptr(), taken.len()),
            (frame_ptr, 9216),
            "the frame itself"
        );
        assert_eq!(frame.len(), 9216, "spare as long as the frame");
        assert_ne!(frame.as_ptr(), frame_ptr);
        assert_eq!(buffers.allocated, 1, "first spare allocated");

        // The ULP recycles the frame: it becomes the next spare, no
        // allocation, and the copy list is untouched.
        buffers.give(taken);
        assert_eq!((buffers.cached_frames(), buffers.cached()), (1, 1));
        let mut next = vec![1u8; 9216];
        let next_ptr = next.as_ptr();
        let taken = buffers.exchange(&mut next);
        assert_eq!(
            next.as_ptr(),
            frame_ptr,
            "recycled frame reused as the spare"
        );
        assert_eq!((next.len(), buffers.allocated), (9216, 1));
        assert_eq!(taken.as_ptr(), next_ptr);

        // A frame vector truncated by `Payload::into_vec` is still a spare,
        // grown back to the frame's length without reallocating.
        let mut short = taken;
        short.truncate(10);
        buffers.give(short);
        let mut again = vec![0u8; 9216];
        let _ = buffers.exchange(&mut again);
        assert_eq!(
            (again.as_ptr(), again.len(), buffers.allocated),
            (next_ptr, 9216, 1)
        );
    }

    #[test]
    fn the_two_lists_are_kept_apart_and_each_bounded() {
        let mut buffers = Buffers::new(2);
        let mut frame = vec![0u8; 2048];
        let _ = buffers.exchange(&mut frame);
        for _ in 0..5 {
            buffers.give(vec![0u8; 2048]);
            buffers.give(Vec::with_capacity(100));
        }
        assert_eq!(
            (buffers.cached_frames(), buffers.cached()),
            (2, 4),
            "2 each"
        );
        // Copies never take a frame spare, spares never a copy vector.
        let before = buffers.allocated;
        let copy = buffers.copy_of(&[1; 50]);
        assert!(copy.capacity() < 2048);
        let _ = buffers.exchange(&mut frame);
        let _ = buffers.exchange(&mut frame);
        assert_eq!(buffers.allocated, before, "both from the lists");
        let _ = buffers.exchange(&mut frame);
        assert_eq!(buffers.allocated, before + 1, "frame list empty: allocate");
        assert_eq!(buffers.cached(), 1, "one copy vector left");
    }

    #[test]
    fn a_spare_too_small_for_the_frame_is_replaced() {
        let mut buffers = Buffers::new(4);
        let mut small = vec![0u8; 1000];
        let taken = buffers.exchange(&mut small);
        buffers.give(taken);
        let mut big = vec![0u8; 4000];
        let _ = buffers.exchange(&mut big);
        assert_eq!((big.len(), buffers.allocated), (4000, 2));
    }
}
