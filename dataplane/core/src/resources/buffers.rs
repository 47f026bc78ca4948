//! Payload buffers that circulate between the ULP and the engine.
//!
//! Layer: transaction sublayer, memory. Owns [`Buffers`], a free list of
//! `Vec<u8>`s. The engine copies a received payload out of the frame (the
//! frame buffer goes back to the port at once) into a recycled vector and
//! hands that vector to the ULP in the event; the ULP gives vectors back
//! with `Engine::recycle` (and gets its submitted ones back in the
//! completion). Once warmed up, a ULP that recycles causes no allocation on
//! the hot path; one that does not simply makes the engine allocate.
//! Never panics; bounded (beyond `max_cached` vectors, returned ones are
//! dropped).

/// A free list of payload vectors.
#[derive(Debug, Clone, Default)]
pub struct Buffers {
    free: Vec<Vec<u8>>,
    max_cached: usize,
    /// Vectors allocated because the free list was empty.
    pub allocated: u64,
}

impl Buffers {
    /// A free list keeping at most `max_cached` vectors.
    pub fn new(max_cached: usize) -> Self {
        Buffers {
            free: Vec::new(),
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

    /// An empty vector (from the free list if possible).
    pub fn empty(&mut self) -> Vec<u8> {
        let mut buf = self.free.pop().unwrap_or_default();
        buf.clear();
        buf
    }

    /// Takes a vector back.
    pub fn give(&mut self, buf: Vec<u8>) {
        if self.free.len() < self.max_cached && buf.capacity() > 0 {
            self.free.push(buf);
        }
    }

    /// Vectors on the free list.
    pub fn cached(&self) -> usize {
        self.free.len()
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
    }
}
