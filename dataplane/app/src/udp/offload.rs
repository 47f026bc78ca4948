//! UDP segmentation offload for the kernel UDP port: GSO on transmit, GRO
//! on receive.
//!
//! Layer: application, inside [`UdpPort`]. Owns the receive slots GRO
//! fills, the frames cut from them and not yet handed out, and the
//! planning of a transmit burst into GSO runs. Over loopback the sender's
//! `sendmmsg` also runs the receiver's half of the kernel stack (route,
//! IP, UDP demux, socket enqueue): profiled at 4 KiB request/response that
//! was 64 % of the initiator's core, once per frame. A GSO run crosses that
//! path once, and with GRO on the receiving socket it arrives as one
//! datagram, cut into frames here (one copy of each frame, which the
//! direct path's `recvmmsg` made too).
//!
//! A run is frames to one peer whose payloads (PSP header onward) all have
//! the run's segment size except the last, which may be shorter
//! (`UDP_SEGMENT`, udp(7)); one `sendmmsg` call carries runs of one segment
//! size, the first frame's, so a frame longer than that ends the call.

use std::collections::VecDeque;
use std::io::{IoSlice, IoSliceMut};
use std::net::UdpSocket;
use std::os::fd::AsRawFd;

use falcon_core::api::{FrameBuf, PacketBuf, Port};
use nix::errno::Errno;
use nix::sys::socket::{
    getsockopt, recvmmsg, sendmmsg, setsockopt, sockopt, ControlMessage, ControlMessageOwned,
    MsgFlags, MultiHeaders, SockaddrStorage,
};

use super::headers::outer_len;
use super::port::{socket_addr, UdpPort, BATCH};

/// Frames in one GSO run at most (the kernel's `UDP_MAX_SEGMENTS` is 64
/// on older kernels, 128 on newer ones).
const MAX_SEGMENTS: usize = 64;
/// Payload bytes of one run at most: an IPv4 UDP datagram's 65 507, less
/// room for IPv6's longer header.
const MAX_RUN_BYTES: usize = 65_000;
/// GRO receive slots (one coalesced datagram each) per `recvmmsg`.
const GRO_SLOTS: usize = 16;
/// A GRO slot: the largest UDP payload.
const GRO_SLOT_BYTES: usize = 65_536;

/// The offload state of a [`UdpPort`].
pub(super) struct Offload {
    rx_slots: Vec<Vec<u8>>,
    rx_headers: MultiHeaders<SockaddrStorage>,
    /// A call returned datagrams since `rx_headers` were made: recvmmsg
    /// leaves each header's control length at what the kernel wrote last,
    /// and a header that got no control message would get none again.
    rx_headers_used: bool,
    /// Frames cut from GRO datagrams beyond a burst's `max`.
    rx_backlog: VecDeque<FrameBuf>,
    /// Per received datagram: length, peer index, cut short, GRO segment.
    rx_meta: Vec<(usize, Option<usize>, bool, Option<usize>)>,
    tx_headers: MultiHeaders<SockaddrStorage>,
    /// Per run of a planned call: its first frame and its frames.
    tx_runs: Vec<(usize, usize)>,
}

impl Offload {
    /// GRO on `socket`, and GSO known to the kernel; `None` if either is
    /// refused.
    pub(super) fn enable(socket: &UdpSocket) -> Option<Offload> {
        setsockopt(socket, sockopt::UdpGroSegment, &true).ok()?;
        getsockopt(socket, sockopt::UdpGsoSegment).ok()?;
        Some(Offload {
            rx_slots: vec![vec![0u8; GRO_SLOT_BYTES]; GRO_SLOTS],
            rx_headers: gro_headers(),
            rx_headers_used: false,
            rx_backlog: VecDeque::new(),
            rx_meta: Vec::with_capacity(GRO_SLOTS),
            tx_headers: MultiHeaders::preallocate(BATCH, Some(nix::cmsg_space!(u16))),
            tx_runs: Vec::with_capacity(BATCH),
        })
    }

    /// Frames received and not yet handed out.
    pub(super) fn backlog(&self) -> usize {
        self.rx_backlog.len()
    }
}

/// Receive headers with room for the GRO control message.
fn gro_headers() -> MultiHeaders<SockaddrStorage> {
    MultiHeaders::preallocate(GRO_SLOTS, Some(nix::cmsg_space!(i32)))
}

impl UdpPort {
    /// [`Port::rx_burst`] with GRO: coalesced datagrams are cut into
    /// frames; what exceeds `max` waits for the next burst.
    pub(super) fn rx_gro(&mut self, out: &mut Vec<FrameBuf>, max: usize) -> usize {
        // Invariant: called only with offload on.
        let mut off = self.offload.take().expect("offload on");
        let delivered = self.rx_gro_with(&mut off, out, max);
        self.offload = Some(off);
        delivered
    }

    fn rx_gro_with(&mut self, off: &mut Offload, out: &mut Vec<FrameBuf>, max: usize) -> usize {
        let mut delivered = 0;
        while delivered < max {
            let Some(buf) = off.rx_backlog.pop_front() else {
                break;
            };
            out.push(buf);
            delivered += 1;
        }
        if !off.rx_backlog.is_empty() || delivered == max {
            return delivered;
        }
        self.stats.rx_calls += 1;
        off.rx_meta.clear();
        if off.rx_headers_used {
            off.rx_headers = gro_headers();
            off.rx_headers_used = false;
        }
        {
            let mut slices: Vec<[IoSliceMut<'_>; 1]> = off
                .rx_slots
                .iter_mut()
                .map(|slot| [IoSliceMut::new(slot)])
                .collect();
            match recvmmsg(
                self.socket.as_raw_fd(),
                &mut off.rx_headers,
                slices.iter_mut(),
                MsgFlags::MSG_DONTWAIT,
                None,
            ) {
                Ok(received) => {
                    off.rx_headers_used = true;
                    for datagram in received {
                        let peer = datagram.address.and_then(|a| {
                            let a = socket_addr(&a)?;
                            self.peers.iter().position(|p| p.socket == a)
                        });
                        let cut = datagram.flags.contains(MsgFlags::MSG_TRUNC);
                        let segment = datagram.cmsgs().ok().and_then(|mut cmsgs| {
                            cmsgs.find_map(|c| match c {
                                ControlMessageOwned::UdpGroSegments(size) => {
                                    usize::try_from(size).ok().filter(|&s| s > 0)
                                }
                                _ => None,
                            })
                        });
                        off.rx_meta.push((datagram.bytes, peer, cut, segment));
                    }
                }
                Err(Errno::EAGAIN) => return delivered,
                Err(_) => {
                    self.stats.rx_errors += 1;
                    return delivered;
                }
            }
        }
        if off.rx_meta.is_empty() {
            return delivered;
        }
        self.stats.rx_calls_with_data += 1;
        let hdr = self.header_len;
        for (slot, &(len, peer, cut, segment)) in off.rx_slots.iter().zip(&off.rx_meta) {
            let Some(peer) = peer else {
                self.stats.rx_datagrams += 1;
                self.stats.rx_bytes += len as u64;
                self.stats.rx_unknown_source += 1;
                continue;
            };
            if cut {
                self.stats.rx_datagrams += 1;
                self.stats.rx_bytes += len as u64;
                self.stats.rx_truncated += 1;
                continue;
            }
            let data = &slot[..len.min(slot.len())];
            let segment = segment.unwrap_or(len).max(1);
            if segment < len {
                self.stats.rx_gro_datagrams += 1;
            }
            for chunk in data.chunks(segment) {
                self.stats.rx_datagrams += 1;
                self.stats.rx_bytes += chunk.len() as u64;
                if segment < len {
                    self.stats.rx_gro_frames += 1;
                }
                if hdr + chunk.len() > self.capacity {
                    self.stats.rx_truncated += 1;
                    continue;
                }
                let Some(mut buf) = self.take_buf() else {
                    self.stats.alloc_failures += 1;
                    continue;
                };
                let room = buf.buffer_mut();
                if !self.peers[peer].template.write(room, chunk.len()) {
                    self.stats.rx_truncated += 1;
                    self.free(buf);
                    continue;
                }
                room[hdr..hdr + chunk.len()].copy_from_slice(chunk);
                buf.set_len(hdr + chunk.len());
                if delivered < max {
                    out.push(buf);
                    delivered += 1;
                } else {
                    off.rx_backlog.push_back(buf);
                }
            }
        }
        delivered
    }

    /// [`Port::tx_burst`] with GSO (see the module doc for the runs).
    pub(super) fn tx_gso(&mut self, frames: &mut Vec<FrameBuf>) -> usize {
        // Invariant: called only with offload on.
        let mut off = self.offload.take().expect("offload on");
        let mut taken = 0;
        while !frames.is_empty() {
            let segment = self.plan_runs(&mut off, frames);
            if off.tx_runs.is_empty() {
                // The front frame cannot be routed: drop it by name.
                self.stats.tx_unroutable += 1;
                let buf = frames.remove(0);
                self.free(buf);
                taken += 1;
                continue;
            }
            let planned: usize = off.tx_runs.iter().map(|&(_, n)| n).sum();
            self.stats.tx_calls += 1;
            let result = {
                let iov: Vec<IoSlice<'_>> = frames[..planned]
                    .iter()
                    .zip(&self.tx_offsets)
                    .map(|(f, &offset)| IoSlice::new(&f.data()[offset..]))
                    .collect();
                let runs: Vec<&[IoSlice<'_>]> = off
                    .tx_runs
                    .iter()
                    .map(|&(first, n)| &iov[first..first + n])
                    .collect();
                // Invariant: plan_runs keeps the segment within a run's
                // 65 000 bytes.
                let segment = segment as u16;
                let cmsgs = [ControlMessage::UdpGsoSegments(&segment)];
                sendmmsg(
                    self.socket.as_raw_fd(),
                    &mut off.tx_headers,
                    &runs,
                    &self.tx_addrs,
                    cmsgs,
                    MsgFlags::MSG_DONTWAIT,
                )
                .map(Iterator::count)
            };
            match result {
                Ok(sent_runs) => {
                    let sent: usize = off.tx_runs[..sent_runs].iter().map(|&(_, n)| n).sum();
                    for &(_, n) in &off.tx_runs[..sent_runs] {
                        if n > 1 {
                            self.stats.tx_gso_datagrams += 1;
                            self.stats.tx_gso_frames += n as u64;
                        }
                    }
                    for buf in frames.drain(..sent) {
                        self.stats.tx_datagrams += 1;
                        self.stats.tx_bytes += buf.len() as u64;
                        self.free(buf);
                    }
                    taken += sent;
                    if sent_runs < off.tx_runs.len() {
                        self.stats.tx_full += 1;
                        break;
                    }
                }
                Err(Errno::EAGAIN | Errno::ENOBUFS | Errno::EINTR) => {
                    self.stats.tx_full += 1;
                    break;
                }
                Err(Errno::EIO | Errno::EINVAL | Errno::EOPNOTSUPP | Errno::ENOPROTOOPT)
                    if self.stats.tx_gso_datagrams == 0 =>
                {
                    // GSO refused before it ever worked (no checksum
                    // offload on the route's device): go on without.
                    self.stats.offload_refused += 1;
                    let _ = setsockopt(&self.socket, sockopt::UdpGroSegment, &false);
                    for buf in off.rx_backlog.drain(..) {
                        self.free(buf);
                    }
                    return taken
                        + self.tx_burst(falcon_core::api::Timestamp::from_nanos(0), frames);
                }
                Err(_) => {
                    self.stats.tx_errors += 1;
                    let buf = frames.remove(0);
                    self.free(buf);
                    taken += 1;
                }
            }
        }
        self.offload = Some(off);
        taken
    }

    /// Plans the next call: `tx_runs`, with `tx_addrs` (one per run) and
    /// `tx_offsets` (one per frame) filled; returns the segment size.
    fn plan_runs(&mut self, off: &mut Offload, frames: &[FrameBuf]) -> usize {
        off.tx_runs.clear();
        self.tx_addrs.clear();
        self.tx_offsets.clear();
        let mut segment = 0;
        // Whether the last run takes another frame, its peer and bytes.
        let mut open = false;
        let (mut run_peer, mut run_bytes) = (usize::MAX, 0);
        for (i, frame) in frames.iter().enumerate() {
            let Some((offset, dst)) = outer_len(frame.data()) else {
                break;
            };
            let Some(peer) = self.peer_of_ip(dst) else {
                break;
            };
            let len = frame.len() - offset;
            if i == 0 {
                segment = len.min(MAX_RUN_BYTES);
            }
            if len == 0 || len > segment {
                break;
            }
            let joins = open
                && peer == run_peer
                && off.tx_runs.last().is_some_and(|&(_, n)| n < MAX_SEGMENTS)
                && run_bytes + len <= MAX_RUN_BYTES;
            if joins {
                if let Some(run) = off.tx_runs.last_mut() {
                    run.1 += 1;
                }
                run_bytes += len;
            } else {
                if off.tx_runs.len() == BATCH {
                    break;
                }
                off.tx_runs.push((i, 1));
                self.tx_addrs.push(Some(self.peers[peer].sockaddr));
                (run_peer, run_bytes) = (peer, len);
            }
            self.tx_offsets.push(offset);
            // Only a full segment may be followed in its run.
            open = len == segment;
        }
        segment
    }
}
