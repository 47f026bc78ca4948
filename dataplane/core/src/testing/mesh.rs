//! A node's port in a full mesh of loopback links.
//!
//! Layer: IO, in memory, above the loopback. Owns [`MeshPort`]: one link
//! per peer node (a port of its own loopback pair, wrapped in a
//! [`FaultInjector`] seeded for that link), and the forwarding table that
//! sends each frame down the link of the node it is addressed to. The
//! engine has one port; a node of a [`Cluster`](super::Cluster) reaches
//! every other through this one, as a host reaches a switch.
//!
//! The mesh reads the Ethernet destination address of the frames it sends
//! (an L2 switch's forwarding decision, taken before the link's faults, so
//! a corrupted frame still reaches the peer that must reject it) and
//! nothing else. A frame addressed to no peer is freed and counted
//! ([`unroutable`](MeshPort::unroutable)).

use crate::port::{PacketBuf, Port, PortCapabilities};
use crate::time::Timestamp;
use crate::wire::EthernetAddress;

use super::loopback::{FaultInjector, FaultStats, Faults};

/// One link of a [`MeshPort`]: the port towards one peer node.
pub struct MeshLink<P: Port> {
    /// The peer node's index in the cluster.
    pub peer: usize,
    /// The peer's MAC address: frames sent to it take this link.
    pub mac: EthernetAddress,
    /// This node's end of the link, with the faults of this direction.
    pub port: FaultInjector<P>,
}

/// A node's port: one [`MeshLink`] per peer, frames routed by their
/// Ethernet destination (see the module doc).
///
/// Buffers are allocated from and freed to the first link's port (every
/// link of a node draws on the same pool: the node's mbuf pool, or heap
/// buffers any loopback end takes back).
pub struct MeshPort<P: Port> {
    links: Vec<MeshLink<P>>,
    /// Per link: the frames of the burst being sent down it.
    outgoing: Vec<Vec<P::Buf>>,
    /// The link `rx_burst` reads first, rotated each call so no link
    /// starves the others.
    next_rx: usize,
    unroutable: u64,
}

impl<P: Port> MeshPort<P> {
    /// A port over `links` (at least one).
    pub fn new(links: Vec<MeshLink<P>>) -> Self {
        assert!(!links.is_empty(), "a mesh port needs a link");
        let outgoing = links.iter().map(|_| Vec::new()).collect();
        MeshPort {
            links,
            outgoing,
            next_rx: 0,
            unroutable: 0,
        }
    }

    /// The links, one per peer, in peer order.
    pub fn links(&self) -> &[MeshLink<P>] {
        &self.links
    }

    /// The links, mutable (to change one link's faults).
    pub fn links_mut(&mut self) -> &mut [MeshLink<P>] {
        &mut self.links
    }

    /// The link towards node `peer`.
    pub fn link(&self, peer: usize) -> Option<&MeshLink<P>> {
        self.links.iter().find(|link| link.peer == peer)
    }

    /// Sets the faults of every link this node sends on.
    pub fn set_faults(&mut self, faults: Faults) {
        for link in &mut self.links {
            link.port.faults = faults;
        }
    }

    /// What the fault injectors of this node's links did, summed.
    pub fn stats(&self) -> FaultStats {
        self.links
            .iter()
            .map(|link| link.port.stats())
            .fold(FaultStats::default(), |sum, s| FaultStats {
                lost: sum.lost + s.lost,
                duplicated: sum.duplicated + s.duplicated,
                reordered: sum.reordered + s.reordered,
                corrupted: sum.corrupted + s.corrupted,
            })
    }

    /// Frames sent to an address no link leads to (freed).
    pub fn unroutable(&self) -> u64 {
        self.unroutable
    }

    fn route(&self, frame: &[u8]) -> Option<usize> {
        let dst = frame.get(..6)?;
        self.links.iter().position(|link| link.mac.0 == dst)
    }
}

impl<P: Port> Port for MeshPort<P> {
    type Buf = P::Buf;

    fn capabilities(&self) -> PortCapabilities {
        self.links[0].port.capabilities()
    }

    fn alloc(&mut self, len: usize) -> Option<P::Buf> {
        self.links[0].port.alloc(len)
    }

    fn free(&mut self, buf: P::Buf) {
        self.links[0].port.free(buf);
    }

    fn free_burst(&mut self, bufs: &mut Vec<P::Buf>) {
        self.links[0].port.free_burst(bufs);
    }

    fn prefetch(&self, frames: &[P::Buf]) {
        // Every link's port is of one kind: the first speaks for all.
        self.links[0].port.prefetch(frames);
    }

    fn rx_burst(&mut self, now: Timestamp, out: &mut Vec<P::Buf>, max: usize) -> usize {
        let count = self.links.len();
        let first = self.next_rx % count;
        self.next_rx = self.next_rx.wrapping_add(1);
        let mut n = 0;
        for i in 0..count {
            if n >= max {
                break;
            }
            n += self.links[(first + i) % count]
                .port
                .rx_burst(now, out, max - n);
        }
        n
    }

    fn tx_burst(&mut self, now: Timestamp, frames: &mut Vec<P::Buf>) -> usize {
        let offered = frames.len();
        for frame in frames.drain(..) {
            match self.route(frame.data()) {
                Some(link) => self.outgoing[link].push(frame),
                None => {
                    self.unroutable += 1;
                    self.links[0].port.free(frame);
                }
            }
        }
        for (link, batch) in self.links.iter_mut().zip(&mut self.outgoing) {
            if !batch.is_empty() {
                link.port.tx_burst(now, batch);
                // What the line refused goes back to the caller.
                frames.append(batch);
            }
        }
        offered - frames.len()
    }

    fn poll_timeout(&self) -> Option<Timestamp> {
        self.links
            .iter()
            .filter_map(|link| link.port.poll_timeout())
            .min()
    }
}
