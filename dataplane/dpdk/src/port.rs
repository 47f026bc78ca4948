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

use falcon_core::wire::frame::parse_with;
use falcon_core::wire::{ChecksumChecks, FrameError, ParseError};

use crate::ethdev::EthPort;
use crate::mbuf::{Mbuf, RxChecksum};
use crate::mempool::Mempool;

/// What the port refused, dropped or could not do, counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DpdkPortStats {
    /// `alloc` found the pool empty.
    pub alloc_failures: u64,
    /// `alloc` asked for more than a segment holds.
    pub alloc_too_long: u64,
    /// Received frames the device (or this port, for a frame the device
    /// left unverified) found with a wrong IPv4 header checksum, dropped
    /// here: with receive checksum offload the engine checks none.
    pub rx_bad_ip_checksum: u64,
    /// The same for a wrong (non-zero) UDP checksum.
    pub rx_bad_udp_checksum: u64,
    /// Frames the device left unverified that this port checked in
    /// software (right or wrong).
    pub rx_checked_in_software: u64,
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

impl DpdkPort {
    /// With receive checksum offload the port reports checksums verified
    /// (`PortCapabilities::rx_checksums_verified`, so the engine may skip
    /// them): the frames of `out[start..]` the device flagged bad are
    /// dropped here by name, and those it left unverified are checked in
    /// software first.
    fn drop_bad_checksums(&mut self, out: &mut Vec<Mbuf>, start: usize) {
        let stats = &mut self.stats;
        let mut i = start;
        while i < out.len() {
            let m = &out[i];
            let (ip, l4) = (m.rx_ip_checksum(), m.rx_l4_checksum());
            let verdict = if ip == RxChecksum::Bad {
                Some(&mut stats.rx_bad_ip_checksum)
            } else if l4 == RxChecksum::Bad {
                Some(&mut stats.rx_bad_udp_checksum)
            } else if ip != RxChecksum::Good || l4 != RxChecksum::Good {
                stats.rx_checked_in_software += 1;
                match parse_with(m.data(), ChecksumChecks::ALL) {
                    Err(FrameError::Ipv4(ParseError::BadChecksum(_))) => {
                        Some(&mut stats.rx_bad_ip_checksum)
                    }
                    Err(FrameError::Udp(ParseError::BadChecksum(_))) => {
                        Some(&mut stats.rx_bad_udp_checksum)
                    }
                    // Right, or wrong otherwise: the engine names it.
                    _ => None,
                }
            } else {
                None
            };
            match verdict {
                Some(counter) => {
                    *counter += 1;
                    // `remove`, not `swap_remove`: the burst keeps its order.
                    drop(out.remove(i));
                }
                None => i += 1,
            }
        }
    }
}

impl Port for DpdkPort {
    type Buf = Mbuf;

    fn capabilities(&self) -> PortCapabilities {
        PortCapabilities {
            max_frame_len: self.max_frame_len,
            rx_checksums_verified: self.port.offloads().rx_checksums,
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
        let start = out.len();
        let n = self.port.rx_burst(self.queue, out, max);
        if n > 0 && self.port.offloads().rx_checksums {
            self.drop_bad_checksums(out, start);
        }
        out.len() - start
    }

    /// Every frame's header line, then its first bytes: the PMD handed
    /// over pointers only (a ring; memif's copy made on the other core), so
    /// the misses of a whole burst overlap instead of each frame stalling
    /// the engine in turn.
    #[inline]
    fn prefetch(&self, frames: &[Mbuf]) {
        for m in frames {
            m.prefetch_header();
        }
        for m in frames {
            m.prefetch_data();
        }
    }

    #[inline]
    fn tx_burst(&mut self, _now: Timestamp, frames: &mut Vec<Mbuf>) -> usize {
        self.port.tx_burst(self.queue, frames)
    }
}
