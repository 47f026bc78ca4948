//! A frame buffer shaped like a DPDK mbuf, and a port of them over the
//! loopback, to run the engine on a buffer type that is not a `Vec`.
//!
//! [`TestMbuf`] has what the engine must not assume away: a fixed headroom
//! before the frame (`RTE_PKTMBUF_HEADROOM`, 128 bytes), a fixed data room
//! per size class (2 KiB, or 9 KiB for jumbo frames, as a port with two
//! mempools), a reference count (shared handles are read-only, as a
//! shared mbuf is), an identity, and a pool it returns to when the last
//! handle drops, which counts what is outstanding. [`MbufPort`] plays the
//! NIC over a [`LoopbackPort`]: the wire carries heap frames, and each
//! frame is copied into a `TestMbuf` on receive and out of one on
//! transmit, as DMA would; the engine only ever sees the mbufs.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use crate::port::{FrameBuf, PacketBuf, Port, PortCapabilities};
use crate::time::Timestamp;

use super::loopback::LoopbackPort;

/// Bytes before the frame in every buffer (`RTE_PKTMBUF_HEADROOM`).
pub const HEADROOM: usize = 128;
/// Data room of the small class (DPDK's default mbuf).
pub const SMALL_ROOM: usize = 2048;
/// Data room of the jumbo class.
pub const LARGE_ROOM: usize = 9216;

/// A pool of [`TestMbuf`] storage, in two size classes.
#[derive(Debug)]
pub struct MbufPool {
    free: RefCell<[Vec<Box<[u8]>>; 2]>,
    /// Buffers each class may have out at once.
    limit: usize,
    /// Buffers out, per class (allocated and not yet back).
    outstanding: [Cell<usize>; 2],
    /// The most ever out at once, per class.
    peak: [Cell<usize>; 2],
    next_id: Cell<u64>,
}

impl MbufPool {
    /// A pool of `limit` buffers per class.
    pub fn new(limit: usize) -> Rc<MbufPool> {
        Rc::new(MbufPool {
            free: RefCell::new([Vec::new(), Vec::new()]),
            limit,
            outstanding: [Cell::new(0), Cell::new(0)],
            peak: [Cell::new(0), Cell::new(0)],
            next_id: Cell::new(1),
        })
    }

    /// A buffer whose data room holds `len` bytes, from the smallest class
    /// that fits, or `None` (too long, or the class is exhausted).
    pub fn alloc(self: &Rc<Self>, len: usize) -> Option<TestMbuf> {
        let class = match len {
            0..=SMALL_ROOM => 0,
            _ if len <= LARGE_ROOM => 1,
            _ => return None,
        };
        let out = self.outstanding[class].get();
        if out >= self.limit {
            return None;
        }
        let room = [SMALL_ROOM, LARGE_ROOM][class];
        let storage = self.free.borrow_mut()[class]
            .pop()
            .unwrap_or_else(|| vec![0u8; HEADROOM + room].into_boxed_slice());
        self.outstanding[class].set(out + 1);
        self.peak[class].set(self.peak[class].get().max(out + 1));
        let id = self.next_id.get();
        self.next_id.set(id + 1);
        Some(TestMbuf {
            storage: Some(Rc::new(storage)),
            class,
            data_len: 0,
            id,
            pool: Rc::clone(self),
        })
    }

    /// Buffers out now: (small, jumbo).
    pub fn outstanding(&self) -> (usize, usize) {
        (self.outstanding[0].get(), self.outstanding[1].get())
    }

    /// The most ever out at once: (small, jumbo).
    pub fn peak(&self) -> (usize, usize) {
        (self.peak[0].get(), self.peak[1].get())
    }

    fn give_back(&self, class: usize, storage: Box<[u8]>) {
        self.outstanding[class].set(self.outstanding[class].get() - 1);
        self.free.borrow_mut()[class].push(storage);
    }
}

/// One mbuf-like frame buffer: storage with [`HEADROOM`] bytes before the
/// frame, shared by reference count; writable only through its only
/// handle.
#[derive(Debug)]
pub struct TestMbuf {
    /// `None` only while dropping.
    storage: Option<Rc<Box<[u8]>>>,
    class: usize,
    data_len: usize,
    id: u64,
    pool: Rc<MbufPool>,
}

impl TestMbuf {
    /// Its identity (allocation order in its pool).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Handles sharing the storage (the mbuf's `refcnt`).
    pub fn refcnt(&self) -> usize {
        self.storage.as_ref().map_or(0, Rc::strong_count)
    }

    /// Another handle on the same storage (`rte_mbuf_refcnt_update`):
    /// both read it; neither may write while both live.
    pub fn share(&self) -> TestMbuf {
        TestMbuf {
            storage: self.storage.clone(),
            class: self.class,
            data_len: self.data_len,
            id: self.id,
            pool: Rc::clone(&self.pool),
        }
    }
}

impl PacketBuf for TestMbuf {
    fn data(&self) -> &[u8] {
        match &self.storage {
            Some(storage) => storage
                .get(HEADROOM..HEADROOM + self.data_len)
                .unwrap_or_default(),
            None => &[],
        }
    }

    fn data_mut(&mut self) -> &mut [u8] {
        let len = self.data_len;
        match self.storage.as_mut().and_then(Rc::get_mut) {
            Some(storage) => storage
                .get_mut(HEADROOM..HEADROOM + len)
                .unwrap_or_default(),
            None => &mut [],
        }
    }

    fn buffer_mut(&mut self) -> &mut [u8] {
        match self.storage.as_mut().and_then(Rc::get_mut) {
            Some(storage) => storage.get_mut(HEADROOM..).unwrap_or_default(),
            None => &mut [],
        }
    }

    fn set_len(&mut self, len: usize) {
        self.data_len = len.min(self.capacity());
    }

    fn len(&self) -> usize {
        self.data_len
    }

    fn capacity(&self) -> usize {
        self.storage
            .as_ref()
            .map_or(0, |s| s.len().saturating_sub(HEADROOM))
    }
}

impl Drop for TestMbuf {
    fn drop(&mut self) {
        if let Some(storage) = self.storage.take() {
            // The last handle returns the storage.
            if let Ok(storage) = Rc::try_unwrap(storage) {
                self.pool.give_back(self.class, storage);
            }
        }
    }
}

/// A port of [`TestMbuf`]s over a loopback end (see the module doc).
#[derive(Debug)]
pub struct MbufPort {
    wire: LoopbackPort,
    pool: Rc<MbufPool>,
    scratch: Vec<FrameBuf>,
    /// Ids of every buffer handed to the engine by `rx_burst`.
    pub received: Vec<u64>,
}

impl MbufPort {
    /// Over `wire`, with buffers from `pool`.
    pub fn new(wire: LoopbackPort, pool: Rc<MbufPool>) -> Self {
        MbufPort {
            wire,
            pool,
            scratch: Vec::new(),
            received: Vec::new(),
        }
    }

    /// Its pool.
    pub fn pool(&self) -> &Rc<MbufPool> {
        &self.pool
    }
}

impl Port for MbufPort {
    type Buf = TestMbuf;

    fn capabilities(&self) -> PortCapabilities {
        PortCapabilities {
            max_frame_len: LARGE_ROOM,
            ..self.wire.capabilities()
        }
    }

    fn alloc(&mut self, len: usize) -> Option<TestMbuf> {
        self.pool.alloc(len)
    }

    fn free(&mut self, buf: TestMbuf) {
        drop(buf);
    }

    fn rx_burst(&mut self, now: Timestamp, out: &mut Vec<TestMbuf>, max: usize) -> usize {
        let n = self.wire.rx_burst(now, &mut self.scratch, max);
        for frame in self.scratch.drain(..) {
            // A frame with no buffer for it is dropped, as a NIC with an
            // empty mempool does.
            if let Some(mut mbuf) = self.pool.alloc(frame.len()) {
                mbuf.buffer_mut()[..frame.len()].copy_from_slice(frame.data());
                mbuf.set_len(frame.len());
                self.received.push(mbuf.id());
                out.push(mbuf);
            }
            self.wire.free(frame);
        }
        n
    }

    fn tx_burst(&mut self, now: Timestamp, frames: &mut Vec<TestMbuf>) -> usize {
        for mbuf in frames.iter() {
            let Some(mut frame) = self.wire.alloc(mbuf.len()) else {
                break;
            };
            frame.buffer_mut()[..mbuf.len()].copy_from_slice(mbuf.data());
            frame.set_len(mbuf.len());
            self.scratch.push(frame);
        }
        let sent = self.wire.tx_burst(now, &mut self.scratch);
        let mut unsent = Vec::new();
        core::mem::swap(&mut unsent, &mut self.scratch);
        self.wire.free_burst(&mut unsent);
        self.scratch = unsent;
        // The sent mbufs go back to their pool; the rest stay with the
        // caller.
        frames.drain(..sent);
        sent
    }

    fn poll_timeout(&self) -> Option<Timestamp> {
        self.wire.poll_timeout()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_have_headroom_classes_and_return_to_their_pool() {
        let pool = MbufPool::new(2);
        let mut ack = pool.alloc(90).expect("small");
        assert_eq!(ack.capacity(), SMALL_ROOM);
        let jumbo = pool.alloc(4200).expect("jumbo");
        assert_eq!(jumbo.capacity(), LARGE_ROOM);
        assert!(
            pool.alloc(LARGE_ROOM + 1).is_none(),
            "beyond the largest room"
        );
        ack.buffer_mut()[..3].copy_from_slice(b"abc");
        ack.set_len(3);
        assert_eq!(ack.data(), b"abc");
        let storage = ack.storage.as_ref().expect("live");
        assert_eq!(
            &storage[HEADROOM..HEADROOM + 3],
            b"abc",
            "after the headroom"
        );

        // Shared: read-only until one handle is gone; the storage returns
        // with the last one.
        let shared = ack.share();
        assert_eq!((ack.refcnt(), shared.data()), (2, &b"abc"[..]));
        assert!(ack.data_mut().is_empty(), "shared storage is not writable");
        drop(shared);
        assert_eq!(ack.data_mut(), b"abc");
        assert_eq!(pool.outstanding(), (1, 1));
        let _second = pool.alloc(10).expect("the class holds two");
        assert!(pool.alloc(10).is_none(), "class exhausted");
        drop(ack);
        drop(jumbo);
        assert_eq!(pool.outstanding(), (1, 0));
        assert_eq!(pool.peak(), (2, 1));
    }
}
