//! [`UdpPort`]: the engine's [`Port`] over a kernel UDP socket.
//!
//! Layer: application, an IO backend beside the DPDK port (DESIGN §1, §5:
//! "a kernel UDP socket (Falcon between processes and hosts without DPDK,
//! for development and tools)"). Owns the socket, a pool of heap frame
//! buffers and the peer table (socket address ⇄ the engine's IP and MAC of
//! that peer; given at construction, or learnt at runtime from the
//! connection manager with [`UdpPort::add_peer`] and forgotten with
//! [`UdpPort::remove_peer`]). Transmit strips the engine's Ethernet/IP/UDP headers and
//! sends the rest, PSP header onward, as one datagram to the peer whose
//! engine address the frame is for; receive puts back, in front of each
//! datagram, the headers a frame from that peer to this node would carry
//! ([`super::headers`] says why that is sound under PSP). Bursts are one
//! `recvmmsg` / `sendmmsg` call each.
//!
//! Never blocks, never panics on what arrives: a send error, a datagram cut
//! short by its buffer, one from an address that is no peer, a frame the
//! port cannot route are each counted in [`UdpPortStats`] and dropped.
//! ECN is not carried (the kernel socket hides the IP header): every frame
//! arrives Not-ECT, so only delay (Swift) signals congestion here.

use std::io::IoSliceMut;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;

use falcon_core::api::{EthernetAddress, FrameBuf, PacketBuf, Port, PortCapabilities, Timestamp};
use nix::errno::Errno;
use nix::sys::socket::{
    recvmmsg, sendmmsg, setsockopt, sockopt, ControlMessage, MsgFlags, MultiHeaders,
    SockaddrStorage,
};
use serde::Serialize;

use super::headers::{outer_len, HeaderTemplate};
use super::offload::Offload;

/// Datagrams per `recvmmsg` / `sendmmsg` call at most.
pub const BATCH: usize = 64;

/// A peer: where its datagrams come from and go to, and the engine
/// addresses its frames carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpPeer {
    /// The peer's socket.
    pub socket: SocketAddr,
    /// The peer engine's IP address (`EngineConfig::local_ip` there).
    pub ip: IpAddr,
    /// The peer engine's MAC address.
    pub mac: EthernetAddress,
}

/// How a [`UdpPort`] is set up.
#[derive(Debug, Clone)]
pub struct UdpPortConfig {
    /// This node's engine IP address (frames are rebuilt to it).
    pub local_ip: IpAddr,
    /// This node's engine MAC address.
    pub local_mac: EthernetAddress,
    /// The largest frame, headers included: the engine's
    /// `max_frame_len`. A datagram longer than this less the rebuilt
    /// headers is truncated and dropped.
    pub max_frame_len: usize,
    /// Frame buffers the port hands out at most (received frames held by
    /// the ULP count until released).
    pub pool_size: usize,
    /// Kernel socket buffer asked for, each direction, bytes (as root the
    /// system limit is passed over; otherwise `net.core.rmem_max` caps it).
    pub socket_buffer: usize,
    /// Segmentation offload: UDP GSO on transmit (runs of frames as one
    /// datagram the kernel cuts, `UDP_SEGMENT`) and GRO on receive
    /// (`UDP_GRO`: such runs arrive whole, cut here). Turned off by itself
    /// when the kernel refuses it.
    pub offload: bool,
}

impl UdpPortConfig {
    /// Defaults for `local_ip` / `local_mac` and frames of `max_frame_len`:
    /// 8192 buffers, 4 MiB socket buffers.
    pub fn new(local_ip: IpAddr, local_mac: EthernetAddress, max_frame_len: usize) -> Self {
        UdpPortConfig {
            local_ip,
            local_mac,
            max_frame_len,
            pool_size: 8192,
            socket_buffer: 4 << 20,
            offload: true,
        }
    }
}

/// What the port did and dropped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct UdpPortStats {
    pub rx_datagrams: u64,
    pub rx_bytes: u64,
    /// `recvmmsg` calls that returned datagrams, and all of them.
    pub rx_calls_with_data: u64,
    pub rx_calls: u64,
    pub tx_datagrams: u64,
    pub tx_bytes: u64,
    pub tx_calls: u64,
    /// Datagrams longer than a frame buffer holds: dropped.
    pub rx_truncated: u64,
    /// Datagrams from an address that is no peer: dropped.
    pub rx_unknown_source: u64,
    /// `recvmmsg` errors other than "nothing to read".
    pub rx_errors: u64,
    /// Frames dropped on a `sendmmsg` error other than "socket full".
    pub tx_errors: u64,
    /// Bursts the socket would not take in full (the frames stay queued).
    pub tx_full: u64,
    /// Frames that are not IP/UDP or are for no peer: dropped.
    pub tx_unroutable: u64,
    /// `alloc` calls refused (pool exhausted or frame too long).
    pub alloc_failures: u64,
    /// Datagrams sent as GSO runs of more than one frame, and the frames
    /// in them.
    pub tx_gso_datagrams: u64,
    pub tx_gso_frames: u64,
    /// Datagrams received coalesced by GRO, and the frames cut from them.
    pub rx_gro_datagrams: u64,
    pub rx_gro_frames: u64,
    /// The kernel refused GSO or GRO, and the port went on without.
    pub offload_refused: u64,
}

pub(super) struct Peer {
    pub(super) socket: SocketAddr,
    pub(super) sockaddr: SockaddrStorage,
    pub(super) ip: IpAddr,
    mac: EthernetAddress,
    pub(super) template: HeaderTemplate,
}

/// A [`Port`] over a non-blocking kernel UDP socket.
pub struct UdpPort {
    pub(super) socket: UdpSocket,
    pub(super) peers: Vec<Peer>,
    local_ip: IpAddr,
    local_mac: EthernetAddress,
    /// Rebuilt header bytes (every peer is of the local address family).
    pub(super) header_len: usize,
    pub(super) capacity: usize,
    pool: Vec<FrameBuf>,
    allocated: usize,
    pool_size: usize,
    rx_bufs: Vec<FrameBuf>,
    /// Per received datagram: length, peer index (`None`: unknown), cut.
    rx_meta: Vec<(usize, Option<usize>, bool)>,
    rx_headers: MultiHeaders<SockaddrStorage>,
    tx_headers: MultiHeaders<SockaddrStorage>,
    pub(super) tx_addrs: Vec<Option<SockaddrStorage>>,
    pub(super) tx_offsets: Vec<usize>,
    /// GSO and GRO state; `None` when offload is off or was refused.
    pub(super) offload: Option<Offload>,
    pub(super) stats: UdpPortStats,
}

impl UdpPort {
    /// A port on `socket` (bound; made non-blocking here) to `peers`.
    ///
    /// # Errors
    ///
    /// A message naming what failed: a peer of another address family than
    /// `config.local_ip`, a frame size with no room for the headers, the
    /// socket's options.
    pub fn new(
        socket: UdpSocket,
        peers: &[UdpPeer],
        config: UdpPortConfig,
    ) -> Result<Self, String> {
        socket
            .set_nonblocking(true)
            .map_err(|e| format!("udp port: non-blocking socket: {e}"))?;
        let buffer = config.socket_buffer;
        // As root the forced options pass over net.core.{r,w}mem_max.
        if setsockopt(&socket, sockopt::RcvBufForce, &buffer).is_err() {
            setsockopt(&socket, sockopt::RcvBuf, &buffer)
                .map_err(|e| format!("udp port: SO_RCVBUF {buffer}: {e}"))?;
        }
        if setsockopt(&socket, sockopt::SndBufForce, &buffer).is_err() {
            setsockopt(&socket, sockopt::SndBuf, &buffer)
                .map_err(|e| format!("udp port: SO_SNDBUF {buffer}: {e}"))?;
        }
        // Every peer is of the local family: the headers are that long.
        let header_len = HeaderTemplate::new(
            config.local_mac,
            config.local_ip,
            config.local_mac,
            config.local_ip,
            0,
        )
        .map_or(0, |t| t.len());
        if config.max_frame_len <= header_len {
            return Err(format!(
                "udp port: frames of {} bytes leave no room after {header_len} header bytes",
                config.max_frame_len
            ));
        }
        let offload = if config.offload {
            Offload::enable(&socket)
        } else {
            None
        };
        let mut port = UdpPort {
            offload,
            socket,
            peers: Vec::with_capacity(peers.len()),
            local_ip: config.local_ip,
            local_mac: config.local_mac,
            header_len,
            capacity: config.max_frame_len,
            pool: Vec::new(),
            allocated: 0,
            pool_size: config.pool_size,
            rx_bufs: Vec::with_capacity(BATCH),
            rx_meta: Vec::with_capacity(BATCH),
            rx_headers: MultiHeaders::preallocate(BATCH, None),
            tx_headers: MultiHeaders::preallocate(BATCH, None),
            tx_addrs: Vec::with_capacity(BATCH),
            tx_offsets: Vec::with_capacity(BATCH),
            stats: UdpPortStats::default(),
        };
        for &peer in peers {
            port.add_peer(peer)?;
        }
        Ok(port)
    }

    /// Adds `peer`: its datagrams are received from now on, and frames to
    /// its engine address are sent to its socket.
    ///
    /// # Errors
    ///
    /// A message naming the conflict: the socket or the engine address is
    /// already another peer's (frames are routed by engine address), or
    /// the engine address is not of the local family.
    pub fn add_peer(&mut self, peer: UdpPeer) -> Result<(), String> {
        if let Some(p) = self
            .peers
            .iter()
            .find(|p| p.socket == peer.socket || p.ip == peer.ip)
        {
            return Err(format!(
                "udp port: peer {} (engine address {}) conflicts with peer {} (engine address {})",
                peer.socket, peer.ip, p.socket, p.ip
            ));
        }
        let template = HeaderTemplate::new(
            self.local_mac,
            self.local_ip,
            peer.mac,
            peer.ip,
            peer.socket.port(),
        )
        .filter(|t| t.len() == self.header_len)
        .ok_or_else(|| {
            format!(
                "udp port: peer {} has engine address {}, local is {}: one family only",
                peer.socket, peer.ip, self.local_ip
            )
        })?;
        self.peers.push(Peer {
            socket: peer.socket,
            sockaddr: SockaddrStorage::from(peer.socket),
            ip: peer.ip,
            mac: peer.mac,
            template,
        });
        Ok(())
    }

    /// Forgets the peer whose socket is `socket`, if there is one: its
    /// datagrams count as from an unknown source from now on, and frames
    /// to its engine address as unroutable.
    pub fn remove_peer(&mut self, socket: SocketAddr) -> Option<UdpPeer> {
        let index = self.peers.iter().position(|p| p.socket == socket)?;
        let p = self.peers.swap_remove(index);
        Some(UdpPeer {
            socket: p.socket,
            ip: p.ip,
            mac: p.mac,
        })
    }

    /// The peers, in no particular order.
    pub fn peers(&self) -> impl Iterator<Item = UdpPeer> + '_ {
        self.peers.iter().map(|p| UdpPeer {
            socket: p.socket,
            ip: p.ip,
            mac: p.mac,
        })
    }

    /// The socket's own address.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    /// Counters so far.
    pub fn stats(&self) -> UdpPortStats {
        self.stats
    }

    /// Buffers handed out and not yet back.
    pub fn buffers_in_use(&self) -> usize {
        let backlog = self.offload.as_ref().map_or(0, Offload::backlog);
        self.allocated - self.pool.len() - self.rx_bufs.len() - backlog
    }

    pub(super) fn take_buf(&mut self) -> Option<FrameBuf> {
        if let Some(buf) = self.pool.pop() {
            return Some(buf);
        }
        if self.allocated >= self.pool_size {
            return None;
        }
        self.allocated += 1;
        Some(FrameBuf::new(self.capacity))
    }

    pub(super) fn peer_of_ip(&self, ip: IpAddr) -> Option<usize> {
        self.peers.iter().position(|p| p.ip == ip)
    }

    /// Sends `frames[..n]` (routed: `tx_addrs`, `tx_offsets` filled) in one
    /// call; returns how many the kernel took, or the error.
    fn send_batch(&mut self, frames: &[FrameBuf]) -> Result<usize, Errno> {
        let slices: Vec<[std::io::IoSlice<'_>; 1]> = frames
            .iter()
            .zip(&self.tx_offsets)
            .map(|(f, &offset)| [std::io::IoSlice::new(&f.data()[offset..])])
            .collect();
        let no_cmsgs: [ControlMessage<'_>; 0] = [];
        let sent = sendmmsg(
            self.socket.as_raw_fd(),
            &mut self.tx_headers,
            &slices,
            &self.tx_addrs,
            no_cmsgs,
            MsgFlags::MSG_DONTWAIT,
        )?;
        Ok(sent.count())
    }
}

impl Port for UdpPort {
    type Buf = FrameBuf;

    fn capabilities(&self) -> PortCapabilities {
        PortCapabilities {
            max_frame_len: self.capacity,
            rx_checksums_verified: false,
            psp_inline: false,
        }
    }

    fn alloc(&mut self, len: usize) -> Option<FrameBuf> {
        let buf = (len <= self.capacity).then(|| self.take_buf()).flatten();
        if buf.is_none() {
            self.stats.alloc_failures += 1;
        }
        buf
    }

    fn free(&mut self, mut buf: FrameBuf) {
        buf.set_len(0);
        self.pool.push(buf);
    }

    fn rx_burst(&mut self, _now: Timestamp, out: &mut Vec<FrameBuf>, max: usize) -> usize {
        if self.offload.is_some() {
            return self.rx_gro(out, max);
        }
        let want = max.min(BATCH);
        while self.rx_bufs.len() < want {
            match self.take_buf() {
                Some(buf) => self.rx_bufs.push(buf),
                None => {
                    self.stats.alloc_failures += 1;
                    break;
                }
            }
        }
        if self.rx_bufs.is_empty() {
            return 0;
        }
        self.stats.rx_calls += 1;
        let hdr = self.header_len;
        let n = want.min(self.rx_bufs.len());
        self.rx_meta.clear();
        {
            let mut slices: Vec<[IoSliceMut<'_>; 1]> = self.rx_bufs[..n]
                .iter_mut()
                .map(|b| [IoSliceMut::new(&mut b.buffer_mut()[hdr..])])
                .collect();
            match recvmmsg(
                self.socket.as_raw_fd(),
                &mut self.rx_headers,
                slices.iter_mut(),
                MsgFlags::MSG_DONTWAIT,
                None,
            ) {
                Ok(received) => {
                    for datagram in received {
                        let peer = datagram.address.and_then(|a| {
                            let a = socket_addr(&a)?;
                            self.peers.iter().position(|p| p.socket == a)
                        });
                        let cut = datagram.flags.contains(MsgFlags::MSG_TRUNC);
                        self.rx_meta.push((datagram.bytes, peer, cut));
                    }
                }
                Err(Errno::EAGAIN) => return 0,
                Err(_) => {
                    self.stats.rx_errors += 1;
                    return 0;
                }
            }
        }
        if self.rx_meta.is_empty() {
            return 0;
        }
        self.stats.rx_calls_with_data += 1;
        let mut delivered = 0;
        for (mut buf, &(len, peer, cut)) in
            self.rx_bufs.drain(..self.rx_meta.len()).zip(&self.rx_meta)
        {
            self.stats.rx_datagrams += 1;
            self.stats.rx_bytes += len as u64;
            let Some(peer) = peer else {
                self.stats.rx_unknown_source += 1;
                self.pool.push(buf);
                continue;
            };
            if cut || hdr + len > self.capacity {
                self.stats.rx_truncated += 1;
                self.pool.push(buf);
                continue;
            }
            if !self.peers[peer].template.write(buf.buffer_mut(), len) {
                self.stats.rx_truncated += 1;
                self.pool.push(buf);
                continue;
            }
            buf.set_len(hdr + len);
            out.push(buf);
            delivered += 1;
        }
        delivered
    }

    fn tx_burst(&mut self, _now: Timestamp, frames: &mut Vec<FrameBuf>) -> usize {
        if self.offload.is_some() {
            return self.tx_gso(frames);
        }
        let mut taken = 0;
        while !frames.is_empty() {
            self.tx_addrs.clear();
            self.tx_offsets.clear();
            for frame in frames.iter().take(BATCH) {
                let Some((offset, dst)) = outer_len(frame.data()) else {
                    break;
                };
                let Some(peer) = self.peer_of_ip(dst) else {
                    break;
                };
                self.tx_addrs.push(Some(self.peers[peer].sockaddr));
                self.tx_offsets.push(offset);
            }
            if self.tx_addrs.is_empty() {
                // The front frame cannot be routed: drop it by name.
                self.stats.tx_unroutable += 1;
                let buf = frames.remove(0);
                self.free(buf);
                taken += 1;
                continue;
            }
            let batch = self.tx_addrs.len();
            self.stats.tx_calls += 1;
            match self.send_batch(&frames[..batch]) {
                Ok(sent) => {
                    for buf in frames.drain(..sent) {
                        self.stats.tx_datagrams += 1;
                        self.stats.tx_bytes += buf.len() as u64;
                        self.pool.push(buf);
                    }
                    taken += sent;
                    if sent < batch {
                        self.stats.tx_full += 1;
                        break;
                    }
                }
                Err(Errno::EAGAIN | Errno::ENOBUFS | Errno::EINTR) => {
                    self.stats.tx_full += 1;
                    break;
                }
                Err(_) => {
                    // The first datagram of the batch failed (e.g. an ICMP
                    // error queued on the socket): drop it, go on.
                    self.stats.tx_errors += 1;
                    let buf = frames.remove(0);
                    self.free(buf);
                    taken += 1;
                }
            }
        }
        taken
    }
}

impl std::fmt::Debug for UdpPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UdpPort")
            .field("socket", &self.socket.local_addr().ok())
            .field(
                "peers",
                &self.peers.iter().map(|p| p.socket).collect::<Vec<_>>(),
            )
            .field("stats", &self.stats)
            .finish()
    }
}

pub(super) fn socket_addr(a: &SockaddrStorage) -> Option<SocketAddr> {
    if let Some(v4) = a.as_sockaddr_in() {
        return Some(SocketAddr::V4((*v4).into()));
    }
    a.as_sockaddr_in6().map(|v6| SocketAddr::V6((*v6).into()))
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use falcon_core::api::{Disposition, Engine, EngineConfig};

    use super::*;

    fn mac(n: u8) -> EthernetAddress {
        EthernetAddress([2, 0, 0, 0, 0, n])
    }

    fn ip(n: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, n])
    }

    fn bind() -> UdpSocket {
        UdpSocket::bind("127.0.0.1:0").expect("a loopback socket")
    }

    fn port(n: u8, socket: UdpSocket, peers: &[UdpPeer]) -> UdpPort {
        UdpPort::new(socket, peers, UdpPortConfig::new(ip(n), mac(n), 2048)).expect("port")
    }

    fn port_without_offload(n: u8, socket: UdpSocket, peers: &[UdpPeer]) -> UdpPort {
        let config = UdpPortConfig {
            offload: false,
            ..UdpPortConfig::new(ip(n), mac(n), 2048)
        };
        UdpPort::new(socket, peers, config).expect("port")
    }

    /// A frame as engine `from` builds it for engine `to`: headers, then
    /// `payload`.
    fn frame(port: &mut UdpPort, from: u8, from_port: u16, to: u8, payload: &[u8]) -> FrameBuf {
        let t = HeaderTemplate::new(mac(to), ip(to), mac(from), ip(from), from_port).expect("v4");
        let mut buf = port.alloc(2048).expect("a buffer");
        assert!(t.write(buf.buffer_mut(), payload.len()));
        buf.buffer_mut()[t.len()..t.len() + payload.len()].copy_from_slice(payload);
        buf.set_len(t.len() + payload.len());
        buf
    }

    fn receive(port: &mut UdpPort, n: usize) -> Vec<FrameBuf> {
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut out = Vec::new();
        while out.len() < n && Instant::now() < deadline {
            port.rx_burst(Timestamp::from_nanos(1), &mut out, 32);
        }
        out
    }

    /// 100 frames of many sizes, then 200 of one size with a short one
    /// every 7th (GSO runs, cut again by GRO), cross from `a` to `b`
    /// unchanged, in order; every buffer is accounted for.
    fn exchange(offload: bool) {
        let (sa, sb) = (bind(), bind());
        let (aa, ab) = (sa.local_addr().unwrap(), sb.local_addr().unwrap());
        let make = if offload { port } else { port_without_offload };
        let mut a = make(
            1,
            sa,
            &[UdpPeer {
                socket: ab,
                ip: ip(2),
                mac: mac(2),
            }],
        );
        let mut b = make(
            2,
            sb,
            &[UdpPeer {
                socket: aa,
                ip: ip(1),
                mac: mac(1),
            }],
        );
        let sizes = (0..100u16).map(|i| 1 + i * 19).chain((0..200u16).map(|i| {
            if i % 7 == 6 {
                100 + i
            } else {
                1500
            }
        }));
        let sent: Vec<FrameBuf> = sizes
            .enumerate()
            .map(|(i, len)| {
                let payload: Vec<u8> = (0..len).map(|j| (i as u16 ^ j) as u8).collect();
                frame(&mut a, 1, aa.port(), 2, &payload)
            })
            .collect();
        let expected: Vec<Vec<u8>> = sent.iter().map(|f| f.data().to_vec()).collect();
        let mut tx = sent;
        let deadline = Instant::now() + Duration::from_secs(5);
        while !tx.is_empty() && Instant::now() < deadline {
            // Bursts of 8, as the lcore loop sends them.
            let mut burst: Vec<FrameBuf> = tx.drain(..tx.len().min(8)).collect();
            while !burst.is_empty() {
                a.tx_burst(Timestamp::from_nanos(1), &mut burst);
            }
        }
        let got = receive(&mut b, 300);
        assert_eq!(got.len(), 300, "{:?}", b.stats());
        for (g, e) in got.iter().zip(&expected) {
            assert_eq!(g.data(), &e[..]);
        }
        let (sa, sb) = (a.stats(), b.stats());
        assert_eq!((sa.tx_datagrams, sb.rx_datagrams), (300, 300));
        assert_eq!(sb.rx_truncated + sb.rx_unknown_source + sa.tx_errors, 0);
        assert_eq!(sa.offload_refused, 0);
        if offload {
            assert!(
                sa.tx_gso_datagrams > 0 && sa.tx_gso_frames > sa.tx_gso_datagrams,
                "{sa:?}"
            );
            assert_eq!(
                (sb.rx_gro_datagrams, sb.rx_gro_frames),
                (sa.tx_gso_datagrams, sa.tx_gso_frames)
            );
        } else {
            assert_eq!(sa.tx_gso_datagrams + sb.rx_gro_datagrams, 0);
        }
        // Every buffer a sent; b's are with the receiver until freed.
        assert_eq!(a.buffers_in_use(), 0);
        assert_eq!(b.buffers_in_use(), 300);
        for buf in got {
            b.free(buf);
        }
        assert_eq!(b.buffers_in_use(), 0);
    }

    #[test]
    fn two_ports_exchange_frames_byte_for_byte_with_gso_and_gro() {
        exchange(true);
    }

    #[test]
    fn two_ports_exchange_frames_byte_for_byte_without_offload() {
        exchange(false);
    }

    #[test]
    fn truncated_unknown_and_garbage_datagrams_are_counted_and_dropped() {
        misfits(true);
        misfits(false);
    }

    fn misfits(offload: bool) {
        let make = if offload { port } else { port_without_offload };
        let (sb, peer, stranger) = (bind(), bind(), bind());
        let b_addr = sb.local_addr().unwrap();
        let mut b = make(
            2,
            sb,
            &[UdpPeer {
                socket: peer.local_addr().unwrap(),
                ip: ip(1),
                mac: mac(1),
            }],
        );
        peer.send_to(&[0xAB; 3000], b_addr).unwrap(); // longer than a 2048-byte frame
        stranger.send_to(&[0xCD; 100], b_addr).unwrap();
        peer.send_to(&[0xEF; 40], b_addr).unwrap(); // not PSP
        let got = receive(&mut b, 1);
        let deadline = Instant::now() + Duration::from_secs(5);
        while b.stats().rx_datagrams < 3 && Instant::now() < deadline {
            let mut more = Vec::new();
            b.rx_burst(Timestamp::from_nanos(1), &mut more, 32);
            assert!(more.is_empty());
        }
        let s = b.stats();
        assert_eq!(
            (s.rx_datagrams, s.rx_truncated, s.rx_unknown_source),
            (3, 1, 1),
            "{s:?}"
        );
        // The garbage reaches the engine with rebuilt headers, which drops
        // it by name.
        assert_eq!(got.len(), 1);
        let now = Timestamp::from_micros(1);
        let config = EngineConfig {
            local_ip: ip(2),
            local_mac: mac(2),
            ..EngineConfig::default()
        };
        let mut engine: Engine = Engine::new(config, now).expect("config");
        let received = engine.handle_packet(now, got.into_iter().next().unwrap());
        assert!(
            matches!(received.disposition, Disposition::Dropped(_)),
            "{:?}",
            received.disposition
        );
        assert_eq!(engine.stats().drops.total(), 1);
    }

    #[test]
    fn frames_for_no_peer_are_dropped_by_name() {
        let (sa, sb) = (bind(), bind());
        let ab = sb.local_addr().unwrap();
        let mut a = port(
            1,
            sa,
            &[UdpPeer {
                socket: ab,
                ip: ip(2),
                mac: mac(2),
            }],
        );
        let mut garbage = a.alloc(64).expect("a buffer");
        garbage.buffer_mut()[..11].copy_from_slice(b"not a frame");
        garbage.set_len(11);
        let mut tx = vec![
            frame(&mut a, 1, 1, 3, b"to nobody"),
            garbage,
            frame(&mut a, 1, 1, 2, b"ok"),
        ];
        while !tx.is_empty() {
            a.tx_burst(Timestamp::from_nanos(1), &mut tx);
        }
        let s = a.stats();
        assert_eq!((s.tx_unroutable, s.tx_datagrams), (2, 1), "{s:?}");
        assert!(UdpPort::new(
            bind(),
            &[UdpPeer {
                socket: ab,
                ip: "::1".parse().unwrap(),
                mac: mac(2)
            }],
            UdpPortConfig::new(ip(1), mac(1), 2048)
        )
        .is_err());
    }

    /// A port built with no peers learns one at runtime: frames cross both
    /// ways; once it is removed, its datagrams are from an unknown source
    /// and frames to it unroutable, each counted; a conflicting peer is
    /// refused by name.
    #[test]
    fn peers_are_added_and_removed_at_runtime() {
        let (sa, sb) = (bind(), bind());
        let (aa, ab) = (sa.local_addr().unwrap(), sb.local_addr().unwrap());
        let mut a = port_without_offload(1, sa, &[]);
        let mut b = port_without_offload(2, sb, &[]);
        let to_a = UdpPeer {
            socket: aa,
            ip: ip(1),
            mac: mac(1),
        };
        let to_b = UdpPeer {
            socket: ab,
            ip: ip(2),
            mac: mac(2),
        };
        // Before: a's frame to b is unroutable.
        let mut tx = vec![frame(&mut a, 1, aa.port(), 2, b"early")];
        a.tx_burst(Timestamp::from_nanos(1), &mut tx);
        assert_eq!(a.stats().tx_unroutable, 1);
        a.add_peer(to_b).unwrap();
        b.add_peer(to_a).unwrap();
        assert_eq!(a.peers().collect::<Vec<_>>(), vec![to_b]);
        let sent = frame(&mut a, 1, aa.port(), 2, b"hello b");
        let expected = sent.data().to_vec();
        let mut tx = vec![sent];
        while !tx.is_empty() {
            a.tx_burst(Timestamp::from_nanos(1), &mut tx);
        }
        let got = receive(&mut b, 1);
        assert_eq!(got.len(), 1, "{:?}", b.stats());
        assert_eq!(got[0].data(), &expected[..]);
        for buf in got {
            b.free(buf);
        }
        // The same engine address or socket twice is refused.
        let e = a
            .add_peer(UdpPeer {
                socket: "127.0.0.1:9".parse().unwrap(),
                ..to_b
            })
            .unwrap_err();
        assert!(e.contains("conflicts with peer"), "{e}");
        let e = a
            .add_peer(UdpPeer {
                ip: "::1".parse().unwrap(),
                socket: "127.0.0.1:9".parse().unwrap(),
                ..to_b
            })
            .unwrap_err();
        assert!(e.contains("one family only"), "{e}");
        // Removed: b no longer takes a's datagrams, a no longer routes to b.
        assert_eq!(b.remove_peer(aa), Some(to_a));
        assert_eq!(b.remove_peer(aa), None);
        let mut tx = vec![frame(&mut a, 1, aa.port(), 2, b"after")];
        while !tx.is_empty() {
            a.tx_burst(Timestamp::from_nanos(1), &mut tx);
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while b.stats().rx_unknown_source == 0 && Instant::now() < deadline {
            let mut none = Vec::new();
            b.rx_burst(Timestamp::from_nanos(1), &mut none, 32);
            assert!(none.is_empty());
        }
        assert_eq!(b.stats().rx_unknown_source, 1);
        a.remove_peer(ab);
        let mut tx = vec![frame(&mut a, 1, aa.port(), 2, b"gone")];
        a.tx_burst(Timestamp::from_nanos(1), &mut tx);
        assert_eq!(a.stats().tx_unroutable, 2);
        assert_eq!(a.stats().tx_datagrams, 2);
    }
}
