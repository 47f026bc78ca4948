//! The engine over a [`Port`]: the two burst loops every datapath loop runs
//! (the demo, the benchmarks, the tests; the DPDK lcore later).
//!
//! Layer: engine, convenience over the sans-IO API — it moves buffers
//! between a port and [`Engine::handle_frame`] (or
//! [`Engine::handle_packet`]) / [`Engine::poll_transmit`] and nothing else;
//! `now` still comes from the caller.

use crate::engine::Engine;
use crate::port::{PacketBuf, Port};
use crate::time::Timestamp;

impl Engine {
    /// Receives up to `max` frames from `port` and hands each to
    /// [`handle_frame`](Self::handle_frame) when its buffer is a heap vector
    /// ([`PacketBuf::vec_mut`]; a large push's buffer is then exchanged for
    /// a spare, not copied), else to [`handle_packet`](Self::handle_packet),
    /// freeing it after. `scratch` is the caller's reusable burst vector
    /// (left empty). Returns how many frames came in.
    pub fn receive_burst<P: Port>(
        &mut self,
        now: Timestamp,
        port: &mut P,
        scratch: &mut Vec<P::Buf>,
        max: usize,
    ) -> usize {
        let n = port.rx_burst(now, scratch, max);
        for mut frame in scratch.drain(..) {
            let len = frame.len();
            match frame.vec_mut() {
                Some(vec) => self.handle_frame(now, vec, len),
                None => self.handle_packet(now, frame.data_mut()),
            }
            port.free(frame);
        }
        n
    }

    /// Builds every frame [`poll_transmit`](Self::poll_transmit) has into
    /// buffers of `port` and sends them in one burst. Frames the port had
    /// no room for stay in `staging` (the caller's reusable vector) for the
    /// next call. Returns how many frames the port took.
    pub fn transmit_burst<P: Port>(
        &mut self,
        now: Timestamp,
        port: &mut P,
        staging: &mut Vec<P::Buf>,
    ) -> usize {
        while let Some(mut buf) = port.alloc() {
            let Some(len) = self.poll_transmit(now, buf.buffer_mut()) else {
                port.free(buf);
                break;
            };
            buf.set_len(len);
            staging.push(buf);
        }
        port.tx_burst(now, staging)
    }
}
