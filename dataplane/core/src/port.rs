//! The port: where frames enter and leave the dataplane.
//!
//! Layer: IO boundary of the engine loop (DESIGN.md §5; smoltcp's
//! `phy::Device`, burst-oriented like DPDK's `rte_eth_rx_burst`). Owns the
//! [`Port`] trait every backend implements (DPDK in `falcon-dpdk`, the
//! simulated fabric in `falcon-sim`, the in-process loopback of the
//! `testing` module), the frame buffer trait [`PacketBuf`] with the
//! heap-backed [`FrameBuf`], and [`PortCapabilities`]. Wrappers compose:
//! the `testing` module's fault injector wraps any port.
//!
//! The engine is generic over the port's buffer type (no trait objects on
//! the hot path): a received frame whose Push Data or Pull Data payload
//! goes to the ULP stays in its buffer, which the ULP reads in place and
//! releases (`Engine::release`); the engine's burst loops then return it
//! to the port (`transaction::payload`). Frames are taken at the size they
//! need ([`Port::alloc`]): an ACK fits a small buffer, only full data
//! packets need a jumbo one.
//!
//! A port never parses or builds Falcon packets and never reads a clock:
//! `now` is passed in (the loopback releases frames by virtual time). The
//! engine ([`crate::engine::Engine`]) never sees a port either: the loop
//! moves frames between them.
//!
//! ```text
//! loop {
//!     port.rx_burst(now, &mut rx, 32);            // frames in
//!     for buf in rx.drain(..) {
//!         if let Some(buf) = engine.handle_packet(now, buf).frame { port.free(buf) }
//!     }
//!     // (`Engine::receive_burst` does this, and frees the released frames.)
//!     engine.handle_timeout(now);
//!     while let Some(buf) = engine.poll_transmit(now, |len| port.alloc(len)) {
//!         tx.push(buf);                            // frames out
//!     }
//!     port.tx_burst(now, &mut tx);                 // unsent frames stay in `tx`
//! }
//! ```
//!
//! (`Engine::transmit_burst` does the transmit half for up to `max` frames,
//! and `Engine::transmit_bursts` repeats it with the clock read before each
//! burst: a frame's t1 is the `now` it was built with, so a long burst
//! would count its own building as fabric delay in the sender's Swift.)

use crate::time::Timestamp;

/// A frame buffer a port hands out (DESIGN.md §5: an mbuf on DPDK): a data
/// room of fixed capacity after the port's headroom, and a frame length
/// within it. `data` is the frame; `buffer_mut` the whole data room, to
/// build a frame in before [`set_len`](Self::set_len).
pub trait PacketBuf {
    /// The frame bytes.
    fn data(&self) -> &[u8];
    /// The frame bytes, mutable (the engine opens PSP in place).
    fn data_mut(&mut self) -> &mut [u8];
    /// The whole buffer, to write a frame into.
    fn buffer_mut(&mut self) -> &mut [u8];
    /// Sets the frame length (clamped to the capacity).
    fn set_len(&mut self, len: usize);
    /// The frame length.
    fn len(&self) -> usize;
    /// Whether the frame is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Bytes the buffer can hold (its data room).
    fn capacity(&self) -> usize;
}

/// What a port can do, for the loop to pick its path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortCapabilities {
    /// Largest frame the port sends or receives, in bytes (Ethernet header
    /// included, FCS excluded).
    pub max_frame_len: usize,
    /// Received frames had their IPv4 and UDP checksums verified by the
    /// port (the engine may skip them: `ChecksumChecks::OFFLOADED`).
    pub rx_checksums_verified: bool,
    /// The port seals and opens PSP inline (a NIC with PSP offload); the
    /// engine then runs without software PSP.
    pub psp_inline: bool,
}

/// A burst-oriented frame port (DESIGN.md §5).
///
/// Buffers come from the port ([`alloc`](Self::alloc)) and go back to it
/// ([`free`](Self::free), or [`tx_burst`](Self::tx_burst), which takes the
/// ones it sends). Inputs carry non-decreasing `now`.
pub trait Port {
    /// The port's frame buffer.
    type Buf: PacketBuf;

    /// What the port can do.
    fn capabilities(&self) -> PortCapabilities;

    /// A free buffer that holds at least `len` bytes, or `None` when the
    /// pool of that size is exhausted (or `len` is beyond
    /// [`PortCapabilities::max_frame_len`]).
    fn alloc(&mut self, len: usize) -> Option<Self::Buf>;

    /// Returns a buffer to the pool.
    fn free(&mut self, buf: Self::Buf);

    /// Returns every buffer of `bufs` to the pool, first to last, leaving
    /// it empty: [`free`](Self::free) of each, which a port may do in bulk.
    fn free_burst(&mut self, bufs: &mut Vec<Self::Buf>) {
        for buf in bufs.drain(..) {
            self.free(buf);
        }
    }

    /// Appends up to `max` received frames to `out` and returns how many.
    fn rx_burst(&mut self, now: Timestamp, out: &mut Vec<Self::Buf>, max: usize) -> usize;

    /// A hint before the engine handles `frames` (just received): a port
    /// whose frames arrive cold (written by another core or a device) may
    /// ask the CPU to bring their first lines in, so that the misses of a
    /// burst overlap. The default does nothing.
    fn prefetch(&self, frames: &[Self::Buf]) {
        let _ = frames;
    }

    /// Sends frames from the front of `frames`, removes the ones it took and
    /// returns how many; the rest (the port is full) stay in `frames` for
    /// the next call.
    fn tx_burst(&mut self, now: Timestamp, frames: &mut Vec<Self::Buf>) -> usize;

    /// When a frame next becomes receivable or a held frame is released
    /// (virtual-time ports; `None` for hardware ports, which are polled).
    fn poll_timeout(&self) -> Option<Timestamp> {
        None
    }
}

/// A heap frame buffer: the loopback's (and the tests') [`PacketBuf`]. A
/// vector of its whole capacity (length = capacity, every byte
/// initialized) and the frame length within it.
#[derive(Clone, PartialEq, Eq)]
pub struct FrameBuf {
    /// The whole buffer; `bytes.len()` is the capacity.
    bytes: Vec<u8>,
    len: usize,
}

impl FrameBuf {
    /// An empty frame in a zeroed buffer of `capacity` bytes.
    pub fn new(capacity: usize) -> Self {
        FrameBuf {
            bytes: vec![0u8; capacity],
            len: 0,
        }
    }

    /// A buffer holding a copy of `frame` (capacity = its length, or more).
    pub fn from_frame(frame: &[u8], capacity: usize) -> Self {
        let mut buf = FrameBuf::new(capacity.max(frame.len()));
        buf.bytes[..frame.len()].copy_from_slice(frame);
        buf.len = frame.len();
        buf
    }
}

impl PacketBuf for FrameBuf {
    #[inline]
    fn data(&self) -> &[u8] {
        let len = self.len();
        &self.bytes[..len]
    }

    #[inline]
    fn data_mut(&mut self) -> &mut [u8] {
        let len = self.len();
        &mut self.bytes[..len]
    }

    fn buffer_mut(&mut self) -> &mut [u8] {
        &mut self.bytes
    }

    #[inline]
    fn set_len(&mut self, len: usize) {
        self.len = len.min(self.bytes.len());
    }

    #[inline]
    fn len(&self) -> usize {
        self.len.min(self.bytes.len())
    }

    fn capacity(&self) -> usize {
        self.bytes.len()
    }
}

impl core::fmt::Debug for FrameBuf {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("FrameBuf")
            .field("len", &self.len)
            .field("capacity", &self.bytes.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_buf_len_is_clamped() {
        let mut buf = FrameBuf::new(8);
        assert!(buf.is_empty());
        buf.buffer_mut()[..3].copy_from_slice(b"abc");
        buf.set_len(3);
        assert_eq!(buf.data(), b"abc");
        buf.set_len(100);
        assert_eq!(buf.len(), 8);
        let copy = FrameBuf::from_frame(b"xyz", 2);
        assert_eq!((copy.data(), copy.capacity()), (&b"xyz"[..], 3));
    }
}
