//! The engine's getters: statistics, snapshots and limits.
//!
//! Layer: engine, read-only (but [`Engine::take_released`], which hands the
//! frames waiting for the port to the caller's loop).

use crate::port::PacketBuf;
use crate::resources::Credit;
use crate::transaction::DataSource;

use super::{ConnectionHandle, ConnectionSnapshot, Engine, EngineStats};

impl<B: PacketBuf, S: DataSource> Engine<B, S> {
    /// The counters.
    pub fn stats(&self) -> EngineStats {
        let mut stats = self.stats.clone();
        stats.transactions = self.shared.stats;
        stats.drops = self.shared.drops.clone();
        stats.tx_context_misses = self.tx_contexts.misses();
        stats.pacing_clamped = self.pacing.clamped();
        stats
    }

    /// The receive-buffer level this node reports in its ACKs (§10.2: the
    /// EMA of the network-request pools' occupancy, quantized to 0–31,
    /// the higher of the two pools).
    pub fn rx_buffer_level(&self) -> crate::wire::RxBufferLevel {
        self.buffer_level.level()
    }

    /// One connection's state.
    pub fn connection_snapshot(&self, connection: ConnectionHandle) -> Option<ConnectionSnapshot> {
        let conn = self
            .connections
            .get(self.slot(connection)? as usize)?
            .as_ref()?;
        Some(ConnectionSnapshot {
            delivery: *conn.delivery.stats(),
            cc: *conn.delivery.cc_state(),
            rtt: *conn.delivery.rtt(),
            initiator_rsns: conn.initiator.rsns(),
            target_rsns: conn.target.rsns(),
            outstanding: conn.initiator.outstanding(),
            credits_used: Credit::ALL.map(|c| conn.account.credits.used(c)),
            failed: conn.dead,
        })
    }

    /// The largest payload one transaction carries.
    pub fn max_payload(&self) -> usize {
        self.shared.config.max_payload
    }

    /// The longest frame the engine builds (a full Push Data or Pull Data
    /// packet; ACKs are far shorter).
    pub fn max_frame_len(&self) -> usize {
        self.max_frame_len
    }

    /// Frames waiting to go back to the port: released by the ULP
    /// ([`release`](Self::release)) or by the engine (a stored payload it
    /// dropped). The burst loops (`io.rs`) free them with every burst; a
    /// loop of its own frees them with [`take_released`](Self::take_released).
    pub fn released_frames(&self) -> usize {
        self.shared.released.len()
    }

    /// Moves the frames waiting to go back to the port onto `out`.
    pub fn take_released(&mut self, out: &mut Vec<B>) {
        out.append(&mut self.shared.released);
    }

    /// Units of `credit`'s region in use node-wide.
    pub fn resources_used(&self, credit: Credit) -> u32 {
        self.shared.resources.used(credit)
    }
}
