//! I/O buffers that O_DIRECT accepts and that move between the datapath
//! and the storage workers without a copy.
//!
//! Layer: NVMe target storage. Owns [`IoBuffer`], a byte window aligned
//! to [`IO_ALIGN`] inside an over-allocated `Vec` (alignment without
//! `unsafe`), and [`BufferPool`], the datapath's free list so that steady
//! state I/O allocates nothing. Never reallocates a buffer's storage: the
//! window's address stays aligned for the buffer's life.

use core::fmt;
use core::ops::{Deref, DerefMut};

/// Alignment of every [`IoBuffer`]: the largest logical block size a
/// namespace has, and the page size, so O_DIRECT takes the buffer on any
/// device whose logical block is at most 4 KiB.
pub const IO_ALIGN: usize = 4096;

/// A byte buffer whose first byte is aligned to [`IO_ALIGN`], with a length
/// that can change up to a fixed capacity.
pub struct IoBuffer {
    /// `capacity + IO_ALIGN - 1` bytes (none for capacity 0), never
    /// resized, so the window at `start` stays aligned.
    storage: Vec<u8>,
    len: usize,
    /// Offset of the aligned window in `storage`, below [`IO_ALIGN`].
    start: u16,
}

impl IoBuffer {
    /// An empty buffer of capacity 0; allocates nothing.
    pub const fn new() -> IoBuffer {
        IoBuffer {
            storage: Vec::new(),
            len: 0,
            start: 0,
        }
    }

    /// A zeroed buffer of `capacity` bytes, length 0.
    pub fn with_capacity(capacity: usize) -> IoBuffer {
        if capacity == 0 {
            return IoBuffer::new();
        }
        let storage = vec![0; capacity + IO_ALIGN - 1];
        let address = storage.as_ptr() as usize;
        let start = (IO_ALIGN - address % IO_ALIGN) % IO_ALIGN;
        IoBuffer {
            storage,
            len: 0,
            // Below IO_ALIGN (4096), so it fits.
            start: start as u16,
        }
    }

    /// A zeroed buffer of `len` bytes (capacity `len`).
    pub fn zeroed(len: usize) -> IoBuffer {
        let mut buffer = IoBuffer::with_capacity(len);
        buffer.len = len;
        buffer
    }

    /// A buffer holding a copy of `bytes`.
    pub fn from_slice(bytes: &[u8]) -> IoBuffer {
        let mut buffer = IoBuffer::zeroed(bytes.len());
        buffer.copy_from_slice(bytes);
        buffer
    }

    pub fn capacity(&self) -> usize {
        self.storage.len().saturating_sub(IO_ALIGN - 1)
    }

    /// Sets the length. Bytes past the old length keep what they last held
    /// (zero for a new buffer).
    ///
    /// # Errors
    ///
    /// [`CapacityError`] when `len` exceeds the capacity; the length is
    /// unchanged.
    pub fn set_len(&mut self, len: usize) -> Result<(), CapacityError> {
        if len > self.capacity() {
            return Err(CapacityError {
                len,
                capacity: self.capacity(),
            });
        }
        self.len = len;
        Ok(())
    }

    /// Whether the first byte sits on an [`IO_ALIGN`] boundary: always,
    /// but for a capacity-0 buffer.
    pub fn is_aligned(&self) -> bool {
        is_aligned(self)
    }
}

/// Whether `bytes` starts on an [`IO_ALIGN`] boundary.
pub(crate) fn is_aligned(bytes: &[u8]) -> bool {
    bytes.as_ptr() as usize % IO_ALIGN == 0
}

impl Default for IoBuffer {
    fn default() -> IoBuffer {
        IoBuffer::new()
    }
}

impl Deref for IoBuffer {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        let start = usize::from(self.start);
        &self.storage[start..start + self.len]
    }
}

impl DerefMut for IoBuffer {
    fn deref_mut(&mut self) -> &mut [u8] {
        let start = usize::from(self.start);
        &mut self.storage[start..start + self.len]
    }
}

impl Clone for IoBuffer {
    /// A new aligned allocation with the same capacity and contents (a
    /// derived clone would copy the offset into a differently placed
    /// allocation).
    fn clone(&self) -> IoBuffer {
        let mut copy = IoBuffer::with_capacity(self.capacity());
        copy.len = self.len;
        copy.copy_from_slice(self);
        copy
    }
}

impl fmt::Debug for IoBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IoBuffer")
            .field("len", &self.len)
            .field("capacity", &self.capacity())
            .finish()
    }
}

/// A length past an [`IoBuffer`]'s capacity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CapacityError {
    pub len: usize,
    pub capacity: usize,
}

impl fmt::Display for CapacityError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "I/O buffer length {} over its capacity {}",
            self.len, self.capacity
        )
    }
}

impl std::error::Error for CapacityError {}

/// A fixed set of equal [`IoBuffer`]s, allocated once. The datapath takes
/// a buffer for a command, hands it to a worker inside the request, gets it
/// back in the completion and puts it back here.
#[derive(Debug)]
pub struct BufferPool {
    free: Vec<IoBuffer>,
    count: usize,
    capacity: usize,
}

impl BufferPool {
    /// `count` buffers of `capacity` bytes each.
    pub fn new(count: usize, capacity: usize) -> BufferPool {
        BufferPool {
            free: (0..count)
                .map(|_| IoBuffer::with_capacity(capacity))
                .collect(),
            count,
            capacity,
        }
    }

    /// A free buffer with length = capacity, or `None` when every buffer is
    /// out (the target then answers RNR, ulp.md §3.9).
    pub fn take(&mut self) -> Option<IoBuffer> {
        let mut buffer = self.free.pop()?;
        buffer.len = buffer.capacity();
        Some(buffer)
    }

    /// Returns a buffer. One of another capacity (e.g. the empty buffer of
    /// a flush), or one past the pool's count, is dropped instead.
    pub fn put(&mut self, buffer: IoBuffer) {
        if buffer.capacity() == self.capacity && self.free.len() < self.count {
            self.free.push(buffer);
        }
    }

    /// Buffers ready to take.
    pub fn available(&self) -> usize {
        self.free.len()
    }

    /// Capacity of each buffer.
    pub fn buffer_capacity(&self) -> usize {
        self.capacity
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_aligned_and_zeroed() {
        for capacity in [1, 511, 512, 4096, 4097, 65536, 1 << 20] {
            let buffer = IoBuffer::zeroed(capacity);
            assert!(buffer.is_aligned(), "capacity {capacity}");
            assert_eq!(buffer.as_ptr() as usize % IO_ALIGN, 0);
            assert_eq!(buffer.len(), capacity);
            assert!(buffer.iter().all(|&byte| byte == 0));
        }
        let empty = IoBuffer::new();
        assert_eq!(empty.len(), 0);
        assert_eq!(empty.capacity(), 0);
    }

    #[test]
    fn length_stays_within_capacity() {
        let mut buffer = IoBuffer::with_capacity(8192);
        assert!(buffer.is_empty());
        buffer.set_len(4096).unwrap();
        buffer.fill(7);
        let address = buffer.as_ptr();
        buffer.set_len(8192).unwrap();
        assert_eq!(buffer.as_ptr(), address);
        assert_eq!(&buffer[..4096], &[7; 4096][..]);
        assert_eq!(
            buffer.set_len(8193),
            Err(CapacityError {
                len: 8193,
                capacity: 8192
            })
        );
        assert_eq!(buffer.len(), 8192);
    }

    #[test]
    fn moving_keeps_the_alignment_and_clone_realigns() {
        let buffer = IoBuffer::from_slice(&[1, 2, 3]);
        let address = buffer.as_ptr();
        let moved = [buffer];
        assert_eq!(moved[0].as_ptr(), address);
        let copy = moved[0].clone();
        assert!(copy.is_aligned());
        assert_eq!(&copy[..], &[1, 2, 3]);
        assert_ne!(copy.as_ptr(), address);
    }

    #[test]
    fn pool_hands_out_each_buffer_once() {
        let mut pool = BufferPool::new(2, 4096);
        let first = pool.take().unwrap();
        let second = pool.take().unwrap();
        assert_ne!(first.as_ptr(), second.as_ptr());
        assert_eq!(first.len(), 4096);
        assert!(pool.take().is_none());
        let address = first.as_ptr();
        pool.put(first);
        pool.put(IoBuffer::new());
        assert_eq!(pool.available(), 1);
        assert_eq!(pool.take().unwrap().as_ptr(), address);
        pool.put(second);
        pool.put(IoBuffer::with_capacity(4096));
        pool.put(IoBuffer::with_capacity(4096));
        assert_eq!(pool.available(), 2, "never more than the pool's count");
    }
}
