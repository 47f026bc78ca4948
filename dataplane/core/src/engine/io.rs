//! The engine over a [`Port`]: the two burst loops every datapath loop runs
//! (the demo, the benchmarks, the tests; the DPDK lcore later).
//!
//! Layer: engine, convenience over the sans-IO API — it moves buffers
//! between a port and [`Engine::handle_packet`] / [`Engine::poll_transmit`]
//! (and returns to the port the frames the engine or the ULP let go of)
//! and nothing else; `now` still comes from the caller.
//!
//! Each frame goes through every stage before the next one starts (parse, PSP
//! open, Falcon, delivery, transaction; or pick, header, copy, seal). Staging a
//! burst instead (one pass for the PSP opens, or the copies and seals, and one
//! for the engine work, so that 4 KiB payloads would not evict the engines'
//! state between packets) and a software prefetch of the next frame measured no
//! gain (`dataplane/app/PERFORMANCE.md`, "Instruction histories moved out of
//! the code"), and the prefetch would need `unsafe`.

use crate::engine::Engine;
use crate::port::PacketBuf;
use crate::port::Port;
use crate::time::Timestamp;
use crate::transaction::DataSource;

impl<B: PacketBuf, S: DataSource> Engine<B, S> {
    /// Receives up to `max` frames from `port` and hands each to
    /// [`handle_packet`](Self::handle_packet), then returns to the port the
    /// frames it handed back and those released since the last burst
    /// ([`release`](Self::release)). `scratch` is the caller's reusable
    /// burst vector (left empty). Returns how many frames came in.
    pub fn receive_burst<P: Port<Buf = B>>(
        &mut self,
        now: Timestamp,
        port: &mut P,
        scratch: &mut Vec<B>,
        max: usize,
    ) -> usize {
        let n = port.rx_burst(now, scratch, max);
        port.prefetch(scratch);
        for frame in scratch.drain(..) {
            if let Some(frame) = self.handle_packet(now, frame).frame {
                self.shared.released.push(frame);
            }
        }
        port.free_burst(&mut self.shared.released);
        n
    }

    /// Builds up to `max` of the frames [`poll_transmit`](Self::poll_transmit)
    /// has into buffers of `port` and sends them in one burst. Frames the
    /// port had no room for stay in `staging` (the caller's reusable vector)
    /// for the next call. Returns how many frames the port took: fewer than
    /// `max` when the engine had no more to send (or the port was full), so
    /// a caller with more time sends again, reading its clock first.
    ///
    /// # Why the burst is bounded
    ///
    /// Every frame of a burst is stamped with `now`: its t1, the PSP IV's
    /// transmit time (DESIGN §4), which the peer's ACK echoes for the
    /// latest packet it took in. A frame leaves only when the whole burst
    /// is built, so a burst's building time counts in the RTT the sender's
    /// Swift measures, as fabric delay (OCP Falcon 0.9 §10.5: fabric delay
    /// = (t4 − t1) − (t3 − t2)). Unbounded, a 4 KiB PSP burst was as long
    /// as the window let it be: 30–64 frames sealed in ~25–50 µs, and the
    /// `bench core` loop's Swift saw 50–55 µs of RTT on a loopback of zero
    /// delay and held fcwnd below the loop's 64 outstanding. Bursts of
    /// `max`, the clock read again between them, keep a frame's wait to its
    /// own burst (`dataplane/app/PERFORMANCE.md`, "Transmit bursts of a
    /// bounded length").
    pub fn transmit_burst<P: Port<Buf = B>>(
        &mut self,
        now: Timestamp,
        port: &mut P,
        staging: &mut Vec<B>,
        max: usize,
    ) -> usize {
        while staging.len() < max {
            let Some(frame) = self.poll_transmit(now, |len| port.alloc(len)) else {
                break;
            };
            staging.push(frame);
        }
        if !self.shared.released.is_empty() {
            port.free_burst(&mut self.shared.released);
        }
        if staging.is_empty() {
            // The call that finds nothing more to send: no port call.
            return 0;
        }
        port.tx_burst(now, staging)
    }

    /// [`transmit_burst`](Self::transmit_burst) again and again, `clock`
    /// read before each burst, until a burst comes back short: everything
    /// the engine has to send, each frame stamped within one burst of its
    /// departure. Returns how many frames the port took.
    pub fn transmit_bursts<P: Port<Buf = B>>(
        &mut self,
        mut clock: impl FnMut() -> Timestamp,
        port: &mut P,
        staging: &mut Vec<B>,
        max: usize,
    ) -> usize {
        let mut sent = 0;
        loop {
            let n = self.transmit_burst(clock(), port, staging, max);
            sent += n;
            if n < max {
                return sent;
            }
        }
    }
}
