//! [`DpdkPort`]: the engine's [`Port`] on an ethdev queue pair, with mbufs
//! as its frame buffers.
//!
//! Frames are sealed and opened in place in their mbufs (the engine writes
//! a frame into [`PacketBuf::buffer_mut`] and PSP works on
//! [`PacketBuf::data_mut`]); a received payload reaches the ULP as a view
//! into its mbuf and the mbuf goes back to its pool when the ULP releases
//! it (the engine's burst loops hand released frames to
//! [`Port::free_burst`]). Bursts ask the device only for what the caller's
//! burst has room for, and the mbuf pointers go between the device and the
//! caller's vector in place (`Mbuf` is a transparent pointer).

use falcon_core::port::{Port, PortCapabilities};
use falcon_core::time::Timestamp;

use crate::ethdev::EthPort;
use crate::mbuf::Mbuf;
use crate::mempool::Mempool;

/// What the port refused or could not do, counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DpdkPortStats {
    /// `alloc` found the pool empty.
    pub alloc_failures: u64,
    /// `alloc` asked for more than a segment holds.
    pub alloc_too_long: u64,
}

/// One queue pair of an ethdev port, and the mempool its frames come from.
#[derive(Debug)]
pub struct DpdkPort {
    port: EthPort,
    queue: u16,
    pool: &'static Mempool,
    /// Bytes a frame may have: the pool's data room past the headroom.
    max_frame_len: usize,
    stats: DpdkPortStats,
}

impl DpdkPort {
    /// Queue `queue` of `port` (receive and transmit), frames from `pool`,
    /// each at most `max_frame_len` bytes (no more than the pool's mbufs
    /// hold past their headroom).
    pub fn new(port: EthPort, queue: u16, pool: &'static Mempool, max_frame_len: usize) -> Self {
        DpdkPort {
            port,
            queue,
            pool,
            max_frame_len,
            stats: DpdkPortStats::default(),
        }
    }

    /// The ethdev port (device counters, MAC).
    pub fn eth(&self) -> &EthPort {
        &self.port
    }

    /// The ethdev port, for calls on the device itself (the forwarding
    /// baseline of `falcon bench pipeline`).
    pub fn eth_mut(&mut self) -> &mut EthPort {
        &mut self.port
    }

    /// What the port refused or could not do.
    pub fn stats(&self) -> DpdkPortStats {
        self.stats
    }

    /// The pool frames come from.
    pub fn pool(&self) -> &'static Mempool {
        self.pool
    }
}

impl Port for DpdkPort {
    type Buf = Mbuf;

    fn capabilities(&self) -> PortCapabilities {
        PortCapabilities {
            max_frame_len: self.max_frame_len,
            rx_checksums_verified: false,
            psp_inline: false,
        }
    }

    #[inline]
    fn alloc(&mut self, len: usize) -> Option<Mbuf> {
        if len > self.max_frame_len {
            self.stats.alloc_too_long += 1;
            return None;
        }
        let m = self.pool.alloc();
        if m.is_none() {
            self.stats.alloc_failures += 1;
        }
        m
    }

    #[inline]
    fn free(&mut self, buf: Mbuf) {
        drop(buf);
    }

    /// Every frame is one segment: ports are started without receive
    /// scatter (`EthPort::start`), so a PMD never chains a frame. Were one
    /// to, the engine would see its first segment only and drop it by name
    /// (its IP length runs past the frame).
    #[inline]
    fn rx_burst(&mut self, _now: Timestamp, out: &mut Vec<Mbuf>, max: usize) -> usize {
        self.port.rx_burst(self.queue, out, max)
    }

    #[inline]
    fn tx_burst(&mut self, _now: Timestamp, frames: &mut Vec<Mbuf>) -> usize {
        self.port.tx_burst(self.queue, frames)
    }
}
