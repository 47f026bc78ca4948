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
//!
//! A port with several lcores ([`DpdkPort::on_queues`]) gives each lcore
//! its own transmit queue and, while the device has them, its own receive
//! queue. Where the device cannot steer a connection's frames to the lcore
//! that owns it (no RSS, or PLB moved the connection's UDP source port),
//! the port dispatches in software ([`Dispatch`]): each frame received is
//! steered by its SPI or CID ([`Steering`]), and a frame of another shard
//! goes to that shard's lcore over an `rte_ring`, which its port reads
//! before its device queue.

use std::sync::Arc;

use falcon_core::api::Steering;
use falcon_core::port::{Port, PortCapabilities};
use falcon_core::time::Timestamp;

use falcon_core::wire::frame::parse_with;
use falcon_core::wire::{ChecksumChecks, FrameError, ParseError};

use crate::ethdev::EthPort;
use crate::mbuf::{Mbuf, RxChecksum};
use crate::mempool::Mempool;
use crate::ring::{RingReceiver, RingSender};

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
    /// Frames received here that belong to another shard, handed to its
    /// lcore (software dispatch).
    pub dispatched: u64,
    /// Frames another lcore handed to this one.
    pub dispatch_received: u64,
    /// Frames of another shard dropped because its ring was full.
    pub dispatch_ring_full: u64,
}

/// The software dispatcher of one lcore's port (see the module doc).
#[derive(Debug)]
pub struct Dispatch {
    /// This lcore's shard.
    pub shard: u16,
    /// How a frame's shard is told.
    pub steering: Steering,
    /// Frames other lcores received for this shard.
    pub inbound: RingReceiver,
    /// The rings of the other shards, by shard (`None` at `shard`).
    pub outbound: Vec<Option<RingSender>>,
}

/// A dispatcher's state beside its rings.
#[derive(Debug)]
struct Dispatcher {
    rings: Dispatch,
    /// Frames waiting for each shard's ring within one receive burst.
    pending: Vec<Vec<Mbuf>>,
    /// The burst's frames while they are sorted.
    scratch: Vec<Mbuf>,
}

/// A transmit queue of an ethdev port, with a receive queue of it or none
/// (an lcore that only gets frames from a dispatcher), and the mempool its
/// frames come from.
#[derive(Debug)]
pub struct DpdkPort {
    port: Arc<EthPort>,
    /// Invariant: no other `DpdkPort` of this ethdev port has the same
    /// receive queue or the same transmit queue (`new` owns the port,
    /// `on_queues` hands out distinct queues).
    rx_queue: Option<u16>,
    tx_queue: u16,
    pool: &'static Mempool,
    /// Bytes a frame may have: the pool's data room past the headroom.
    max_frame_len: usize,
    dispatcher: Option<Dispatcher>,
    stats: DpdkPortStats,
}

impl DpdkPort {
    /// Queue `queue` of `port` (receive and transmit), frames from `pool`,
    /// each at most `max_frame_len` bytes (no more than the pool's mbufs
    /// hold past their headroom).
    pub fn new(port: EthPort, queue: u16, pool: &'static Mempool, max_frame_len: usize) -> Self {
        DpdkPort {
            port: Arc::new(port),
            rx_queue: Some(queue),
            tx_queue: queue,
            pool,
            max_frame_len,
            dispatcher: None,
            stats: DpdkPortStats::default(),
        }
    }

    /// One port per lcore on `port`, `lcores` of them: lcore `i` sends on
    /// transmit queue `i` and receives on receive queue `i` while the port
    /// was started with that many (lcores past them receive only what a
    /// [`Dispatch`] hands them). Frames from `pool`, at most
    /// `max_frame_len` bytes each.
    ///
    /// # Errors
    ///
    /// The port was started with fewer transmit queues than `lcores`.
    pub fn on_queues(
        port: EthPort,
        lcores: u16,
        pool: &'static Mempool,
        max_frame_len: usize,
    ) -> Result<Vec<DpdkPort>, crate::DpdkError> {
        let config = *port.config();
        if lcores == 0 || config.tx_queues < lcores {
            return Err(crate::DpdkError::usage(
                "DpdkPort::on_queues",
                format!(
                    "{lcores} lcores need as many transmit queues; the port has {}",
                    config.tx_queues
                ),
            ));
        }
        let port = Arc::new(port);
        Ok((0..lcores)
            .map(|i| DpdkPort {
                port: Arc::clone(&port),
                rx_queue: (i < config.rx_queues).then_some(i),
                tx_queue: i,
                pool,
                max_frame_len,
                dispatcher: None,
                stats: DpdkPortStats::default(),
            })
            .collect())
    }

    /// Dispatches frames in software from now on (see the module doc).
    pub fn set_dispatch(&mut self, dispatch: Dispatch) {
        let shards = dispatch.outbound.len();
        self.dispatcher = Some(Dispatcher {
            rings: dispatch,
            pending: (0..shards).map(|_| Vec::with_capacity(32)).collect(),
            scratch: Vec::with_capacity(32),
        });
    }

    /// The receive queue this port polls (none: it only gets dispatched
    /// frames) and its transmit queue.
    pub fn queues(&self) -> (Option<u16>, u16) {
        (self.rx_queue, self.tx_queue)
    }

    /// The ethdev port (device counters, MAC).
    pub fn eth(&self) -> &EthPort {
        &self.port
    }

    /// A handle on the ethdev port that outlives this queue's port: for a
    /// reporter on another thread to read the device's counters.
    pub fn eth_shared(&self) -> Arc<EthPort> {
        Arc::clone(&self.port)
    }

    /// The ethdev port, for calls on the device itself (the forwarding
    /// baseline of `falcon bench pipeline`); `None` while other lcores'
    /// ports share it.
    pub fn eth_mut(&mut self) -> Option<&mut EthPort> {
        Arc::get_mut(&mut self.port)
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

impl DpdkPort {
    /// Hands the frames of `out[start..]` that belong to another shard to
    /// its ring, keeping this shard's (and those no shard claims: the
    /// engine drops them by name) in order.
    fn dispatch(&mut self, out: &mut Vec<Mbuf>, start: usize) {
        let Some(d) = &mut self.dispatcher else {
            return;
        };
        let me = d.rings.shard;
        d.scratch.extend(out.drain(start..));
        for m in d.scratch.drain(..) {
            match d.rings.steering.shard_of(m.data()) {
                Some(shard) if shard != me && usize::from(shard) < d.pending.len() => {
                    d.pending[usize::from(shard)].push(m);
                }
                _ => out.push(m),
            }
        }
        for (shard, frames) in d.pending.iter_mut().enumerate() {
            if frames.is_empty() {
                continue;
            }
            if let Some(ring) = &d.rings.outbound[shard] {
                self.stats.dispatched += ring.enqueue_burst(frames) as u64;
            }
            // What the ring had no room for is dropped here, by name.
            self.stats.dispatch_ring_full += frames.len() as u64;
            frames.clear();
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
        if let Some(d) = &mut self.dispatcher {
            self.stats.dispatch_received += d.rings.inbound.dequeue_burst(out, max) as u64;
        }
        let room = max - (out.len() - start);
        let Some(queue) = self.rx_queue else {
            return out.len() - start;
        };
        if room == 0 {
            return out.len() - start;
        }
        let device = out.len();
        // SAFETY: this port is the only poller of `queue` (the field's
        // invariant).
        let n = unsafe { self.port.rx_burst_shared(queue, out, room) };
        if n > 0 && self.port.offloads().rx_checksums {
            self.drop_bad_checksums(out, device);
        }
        if n > 0 && self.dispatcher.is_some() {
            self.dispatch(out, device);
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
        // SAFETY: this port is the only sender on its transmit queue (the
        // `rx_queue` field's invariant).
        unsafe { self.port.tx_burst_shared(self.tx_queue, frames) }
    }
}
