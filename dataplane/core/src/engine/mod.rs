//! The per-core engine: connections, timers, PSP, the RUE, and the ULP
//! interface (DESIGN.md §3, §5).
//!
//! Layer: the top of `falcon-core`. Owns [`Engine`] — a slab of connections
//! keyed by local CID, each with its packet delivery sublayer
//! ([`crate::delivery`]) and transaction sublayer ([`crate::transaction`]);
//! one timing wheel for every connection's deadlines; the connection
//! scheduler; the PSP boundary (open + connection checks on receive, seal
//! in place on transmit); the RUE run inline; resources; counters. It is
//! sans-IO in the quinn-proto style: frames come in and go out in the
//! port's own buffers (generic `B`; a received payload reaches the ULP in
//! its frame, and a transmitted one is read from the ULP's data source `S`
//! into the frame), time comes in as `now`, randomness from seeds in the
//! config. It never reads a clock, never panics on packet input, and does
//! not allocate per packet once warmed up (see
//! [`crate::transaction::payload`] and [`crate::transaction::source`]).
//!
//! # Methods, in quinn-proto's four kinds
//!
//! * **getters**: [`stats`](Engine::stats),
//!   [`connection_snapshot`](Engine::connection_snapshot),
//!   [`connection`](Engine::connection), [`max_payload`](Engine::max_payload),
//!   [`max_frame_len`](Engine::max_frame_len);
//! * **inputs** `handle_*(now, …)`: [`handle_packet`](Engine::handle_packet)
//!   (a frame in the port's buffer, kept while a payload in it awaits the
//!   ULP),
//!   [`handle_timeout`](Engine::handle_timeout), and with a RUE on another
//!   core ([`RueMode::External`]) [`handle_rue_result`](Engine::handle_rue_result);
//! * **commands**: setup ([`add_connection`](Engine::add_connection),
//!   [`allocate_spi`](Engine::allocate_spi), [`close`](Engine::close),
//!   [`set_isolation_alpha`](Engine::set_isolation_alpha)), PSP key
//!   rotation ([`begin_key_rotation`](Engine::begin_key_rotation),
//!   [`rekey_receive`](Engine::rekey_receive),
//!   [`install_transmit_sa`](Engine::install_transmit_sa),
//!   [`retire_previous_spis`](Engine::retire_previous_spis),
//!   [`end_key_rotation`](Engine::end_key_rotation); see `rotation.rs`)
//!   and the ULP's
//!   ([`submit`](Engine::submit), [`ulp_ack`](Engine::ulp_ack),
//!   [`ulp_nack`](Engine::ulp_nack),
//!   [`submit_pull_data`](Engine::submit_pull_data),
//!   [`release`](Engine::release));
//! * **outputs** `poll_*`, after every input or command, in this order:
//!   [`poll_transmit`](Engine::poll_transmit) until `None`,
//!   [`poll_event`](Engine::poll_event) until `None`,
//!   [`poll_cm_event`](Engine::poll_cm_event) (SPI check failures for the
//!   connection manager, see `cm.rs`) until `None`, with an external RUE
//!   [`poll_rue_event`](Engine::poll_rue_event) until `None`, then
//!   [`poll_timeout`](Engine::poll_timeout) for when to call
//!   [`handle_timeout`](Engine::handle_timeout).
//!
//! Inputs must carry non-decreasing `now`.
//!
//! # Cost per transaction
//!
//! What keeps a 64-byte push through both engines cheap, largest first (the
//! figures, measured with `engine::tests::bench` under callgrind and with
//! `falcon bench core`, are in `dataplane/app/PERFORMANCE.md`):
//!
//! * no store-forwarding stalls: a value built field by field and then copied
//!   whole (a returned `FalconRepr`, a `Slot` pushed into a `VecDeque`, a
//!   `SentPacket`, a `Demand` part, a bit set in a `u128`) stalls ~10 cycles,
//!   so slots are filled in place ([`crate::transaction`]'s slot rings,
//!   `TxWindow::push_first`), and the per-packet parse is inlined;
//! * the outer frame: a per-connection header template on transmit and a short
//!   parse of the untagged IPv4 frame on receive ([`crate::wire::datapath`]);
//! * timer bookkeeping once per transmit burst, not after every packet
//!   (`Engine::arm`);
//! * the per-packet chain inlined (`#[inline]` on the delivery, transaction and
//!   resource steps each packet takes once, `#[inline(always)]` on the Falcon
//!   parse);
//! * skipping work with nothing to do: the piggy-backed bases that did not
//!   move, the buffer level when no ACK is due, the bitmap scans of a
//!   cumulative ACK with nothing selectively acknowledged, and the resource
//!   checks of levels that are unlimited.
//!
//! # Example: two engines over the loopback, PSP on
//!
//! (The loopback is in the `testing` module, behind the `testing` feature.)
//!
//! ```
//! use std::time::Duration;
//!
//! use falcon_core::engine::{connect, Engine, EngineConfig, PairSpec, PspConfig};
//! use falcon_core::port::Port;
//! use falcon_core::testing::{Loopback, LoopbackConfig};
//! use falcon_core::time::Timestamp;
//! use falcon_core::transaction::{Transaction, TransactionKind, UlpEvent, UlpHeader};
//! use psp::{MasterKey, MasterKeys};
//!
//! let keys = |k| MasterKeys { k0: MasterKey::new([k; 32]), k1: MasterKey::new([k + 1; 32]) };
//! let mut now = Timestamp::from_micros(1);
//! // Over the loopback's heap buffers, with `Vec<u8>` data sources (the
//! // defaults of `Engine`'s two type parameters).
//! let mut a: Engine = Engine::new(EngineConfig { psp: Some(PspConfig::new(keys(1))), ..EngineConfig::default() }, now)?;
//! let mut b: Engine = Engine::new(
//!     EngineConfig {
//!         local_ip: "10.0.0.2".parse()?,
//!         local_mac: falcon_core::wire::EthernetAddress([2, 0, 0, 0, 0, 2]),
//!         psp: Some(PspConfig::new(keys(3))),
//!         ..EngineConfig::default()
//!     },
//!     now,
//! )?;
//! // Mirrored connections (CIDs, PSNs, RSNs, SAs) on both engines.
//! let (ca, cb) = connect(now, &mut a, &mut b, &PairSpec::default())?;
//! let (mut pa, mut pb) = Loopback::pair(LoopbackConfig::default());
//!
//! // The initiator submits a push (its data source moves in) and a pull.
//! a.submit(now, ca, Transaction::push(1, vec![7; 1000]))?;
//! a.submit(now, ca, Transaction::pull(2, 500))?;
//!
//! let mut completed = 0;
//! let (mut rx, mut tx) = (Vec::new(), Vec::new());
//! while completed < 2 {
//!     for (engine, port, conn) in [(&mut a, &mut pa, ca), (&mut b, &mut pb, cb)] {
//!         port.rx_burst(now, &mut rx, 32);
//!         for frame in rx.drain(..) {
//!             // The frame comes back unless a payload in it went to the ULP.
//!             if let Some(frame) = engine.handle_packet(now, frame).frame {
//!                 port.free(frame);
//!             }
//!         }
//!         engine.handle_timeout(now);
//!         while let Some(event) = engine.poll_event() {
//!             match event {
//!                 // Target: take the push (read in its frame), serve the pull.
//!                 UlpEvent::Request(r) if r.kind == TransactionKind::Push => {
//!                     assert_eq!(r.payload, vec![7; 1000]);
//!                     engine.ulp_ack(now, conn, r.rsn)?;
//!                     engine.release(r.payload);
//!                 }
//!                 UlpEvent::Request(r) => {
//!                     let data = vec![9; usize::from(r.request_length)];
//!                     engine.submit_pull_data(now, conn, r.rsn, UlpHeader::EMPTY, data)?;
//!                 }
//!                 // Initiator: completions, in RSN order (ordered connection).
//!                 UlpEvent::Completion(c) => {
//!                     assert!(c.status.is_ok());
//!                     if c.kind == TransactionKind::Pull {
//!                         assert_eq!(c.data, vec![9; 500]);
//!                     }
//!                     engine.release(c.data);
//!                     completed += 1;
//!                 }
//!                 _ => {}
//!             }
//!         }
//!         // Frames out, each in a buffer of its own length.
//!         while let Some(frame) = engine.poll_transmit(now, |len| port.alloc(len)) {
//!             tx.push(frame);
//!         }
//!         port.tx_burst(now, &mut tx);
//!         // Frames the ULP released go back to the port.
//!         let mut released = Vec::new();
//!         engine.take_released(&mut released);
//!         port.free_burst(&mut released);
//!     }
//!     now = now + Duration::from_micros(1);
//! }
//! let stats = a.stats();
//! assert_eq!(stats.transactions_completed(), 2);
//! assert_eq!(stats.drops.total(), 0);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod cid;
mod cm;
mod config;
mod io;
mod reset;
mod rotation;
mod rue_inline;
mod rx;
mod setup;
mod shard;
mod stats;
mod tx;
mod ulp;
mod unchecked;

#[cfg(test)]
mod tests;

use psp::{
    Backend, CachedTxSa, RxSecurity, SaDatabase, SaKey, SecurityGlobals, Spi, SpiCheck,
    TxContextCache, TxSaConfig, Version,
};
use rue::{CcResult, Profiles, Rue, RueChannel, RueConfig};

use crate::delivery::{
    BufferLevel, CcState, ConnectionParams, DeliveryConnection, PoolOccupancy, XlrFilter,
};
use crate::ids::{ConnectionId, DestinationFunction};
use crate::port::{FrameBuf, PacketBuf};
use crate::random::SplitMix64;
use crate::resources::{Account, Alpha, Credit, CreditClass, Resources};
use crate::scheduler::Scheduler;
use crate::time::Timestamp;
use crate::timer::TimingWheel;
use crate::transaction::{
    Ctx, DataSource, Initiator, Shared, Target, TransactionConfig, UlpCommandError, UlpEvent,
};
use crate::wire::{
    ChecksumChecks, Dscp, Ecn, EthernetAddress, FrameRepr, FrameTemplate, IpFields, LocalAddresses,
    UdpChecksum,
};

use cid::CidTable;
use rue_inline::{rue_offer_due, RueExternal};

pub use crate::transaction::ConnectionHandle;
pub use cm::{CmEvent, SpiCheckFailure, CM_EVENT_CAPACITY, SPI_FAILURE_PAIRS};
pub use config::{
    ConfigError, ConnectionConfig, ConnectionPsp, EngineConfig, InitialSequence, PspConfig, RueMode,
};
pub use rotation::{rekey_pair, NewReceiveSa, RotationError};
pub use rx::{Disposition, Received};
pub use setup::{connect, PairSpec};
pub use stats::{ConnectionSnapshot, EngineStats};
pub use unchecked::UncheckedField;

/// One lcore's Falcon engine, over the port's frame buffers `B` (a
/// received payload reaches the ULP in its frame) and the ULP's data
/// sources `S` (read into each frame built). See the module doc for the
/// call order and a complete example.
pub struct Engine<B: PacketBuf = FrameBuf, S = Vec<u8>> {
    local_mac: EthernetAddress,
    local_ip: core::net::IpAddr,
    udp_port: u16,
    max_frame_len: usize,
    checksums: ChecksumChecks,
    /// `local_mac` and `local_ip`, as received frames must carry them.
    addresses: LocalAddresses,
    default_delivery: crate::delivery::DeliveryConfig,
    /// Connection slots (boxed: an empty slot costs 8 bytes).
    connections: Vec<Option<Box<Connection<B, S>>>>,
    generations: Vec<u32>,
    free_slots: Vec<u32>,
    by_cid: CidTable,
    shared: Shared<B, S>,
    wheel: TimingWheel<ConnectionHandle>,
    fired: Vec<(ConnectionHandle, Timestamp)>,
    /// Slots whose deadlines may have moved since their last look at the
    /// wheel (see [`Engine::arm`]).
    unarmed: Vec<u32>,
    data_ring: Scheduler,
    ack_ring: Scheduler,
    psp: Option<PspState>,
    /// The expanded keys of the connections' transmit SAs.
    tx_contexts: TxContextCache,
    /// The node this engine is a shard of, and what of it it follows.
    shard: shard::Membership,
    /// With several shards in the node: its steering and this engine's
    /// shard, to hand back frames of the others (`Disposition`).
    shard_check: Option<(crate::node::Steering, u16)>,
    rue: Option<RueInline>,
    rue_external: Option<RueExternal>,
    rue_results: Vec<CcResult>,
    buffer_level: BufferLevel<2>,
    rng: SplitMix64,
    stats: EngineStats,
    cm: cm::CmEvents,
    /// The configuration it was built from, for [`reset`](Engine::reset).
    config: Box<EngineConfig>,
}

/// The receive side of PSP: the SA database and the global check state.
struct PspState {
    db: SaDatabase,
    globals: SecurityGlobals,
}

/// The RUE core and this engine's queue pair, run inline.
struct RueInline {
    rue: Rue,
    channel: RueChannel,
    /// Events were queued since the last `process`.
    pending: bool,
}

/// One connection: both sublayers, its PSP state, its frame template and
/// its timer.
struct Connection<B: PacketBuf, S> {
    handle: ConnectionHandle,
    local_cid: ConnectionId,
    local_function: DestinationFunction,
    delivery: DeliveryConnection,
    initiator: Initiator<B, S>,
    target: Target<B, S>,
    account: Account,
    frame: FrameTemplate,
    tx_sa: Option<CachedTxSa>,
    rx_security: Option<RxSecurity>,
    /// When Remote Time was last known good: the receipt of the last packet
    /// that passed the PSP checks, or its last seeding (setup, rotation).
    /// Remote Time is re-seeded from it at key rotation (`rotation.rs`).
    remote_time_at: Timestamp,
    /// The deadline this connection has in the wheel (the earliest one
    /// inserted and not yet fired).
    armed: Option<Timestamp>,
    /// On the engine's `unarmed` list.
    unarmed: bool,
    /// Failed (fatal error) or closed.
    dead: bool,
    /// On the external RUE's list of connections to poll for an event.
    rue_listed: bool,
}

impl<B: PacketBuf, S: DataSource> Engine<B, S> {
    /// An engine with no connections.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming the first invalid field.
    pub fn new(config: EngineConfig, now: Timestamp) -> Result<Engine<B, S>, ConfigError> {
        Engine::build(config, now, None)
    }

    /// [`new`](Self::new), with `sa_database` (built from the same PSP
    /// configuration) reset instead of a new one allocated.
    fn build(
        config: EngineConfig,
        now: Timestamp,
        sa_database: Option<SaDatabase>,
    ) -> Result<Engine<B, S>, ConfigError> {
        config.validate()?;
        let max_payload = config.max_payload();
        let (shard, psp) = shard::join(&config, sa_database)?;
        let backend = psp.as_ref().map_or(Backend::Ring, |p| p.db.backend());
        let tx_contexts = TxContextCache::new(backend, config.tx_contexts);
        let profiles = match &config.rue {
            RueMode::Swift => Some(Profiles::swift_default()),
            RueMode::Profiles(p) => Some(Profiles::clone(p)),
            RueMode::External { .. } | RueMode::Off => None,
        };
        let rue_external = match config.rue {
            RueMode::External { id_base } => Some(RueExternal::new(id_base)),
            _ => None,
        };
        let rue = match profiles {
            Some(profiles) => {
                let rue_config = RueConfig {
                    connections: config.max_connections,
                    ..RueConfig::default()
                };
                let mut rue = Rue::new(rue_config, profiles)
                    .map_err(|_| ConfigError::new("rue", "invalid RUE configuration"))?;
                let channel = rue.add_core(config.rue_queue);
                Some(RueInline {
                    rue,
                    channel,
                    pending: false,
                })
            }
            None => None,
        };
        let r = &config.resources;
        let pool = |capacity| PoolOccupancy::evenly_spaced(1, capacity);
        let buffer_level = BufferLevel {
            pools: [
                pool(r.rx_packet.network_request)?,
                pool(r.rx_buffer.network_request)?,
            ],
        };
        let transaction = TransactionConfig {
            max_payload,
            ..config.transaction
        };
        let mut engine = Engine {
            local_mac: config.local_mac,
            local_ip: config.local_ip,
            udp_port: config.udp_port,
            max_frame_len: config.max_frame_len,
            checksums: config.checksums,
            addresses: LocalAddresses::new(config.local_mac, config.local_ip),
            default_delivery: config.delivery.clone(),
            connections: Vec::new(),
            generations: Vec::new(),
            free_slots: Vec::new(),
            by_cid: CidTable::default(),
            shared: Shared::new(Resources::new(config.resources), transaction),
            wheel: TimingWheel::new(config.timer_slots, now),
            fired: Vec::new(),
            unarmed: Vec::with_capacity(config.max_connections as usize),
            data_ring: Scheduler::with_slots(config.max_connections as usize),
            ack_ring: Scheduler::with_slots(config.max_connections as usize),
            psp,
            shard_check: (shard.node.shards() > 1).then(|| (shard.node.steering(), shard.shard)),
            tx_contexts,
            shard,
            rue,
            rue_external,
            rue_results: Vec::new(),
            buffer_level,
            rng: SplitMix64::new(config.seed),
            stats: EngineStats::default(),
            cm: cm::CmEvents::new(config.spi_failure_interval),
            config: Box::new(config.clone()),
        };
        engine.slots_reserve(config.max_connections);
        Ok(engine)
    }

    /// A fresh receive SPI of this engine's shard from the node's active
    /// master key, and the SA key the peer must send with (PSP: the
    /// receiver picks the SPI; the CM carries both to the peer).
    ///
    /// # Errors
    ///
    /// [`ConfigError`] if PSP is off, the node rotated its key and this
    /// engine has not followed, or the shard's SPI space is exhausted.
    pub fn allocate_spi(&mut self, version: Version) -> Result<(Spi, SaKey), ConfigError> {
        self.allocate_receive_spi(version)
            .map_err(ConfigError::from)
    }

    /// Sets up a connection (the connection manager's job, DESIGN.md §4).
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming the field: a CID already in use, no free
    /// slot, an address family other than the engine's, PSP state missing,
    /// an invalid field.
    pub fn add_connection(
        &mut self,
        now: Timestamp,
        config: ConnectionConfig,
    ) -> Result<ConnectionHandle, ConfigError> {
        config.validate()?;
        self.check_shard(&config)?;
        if self.by_cid.get(config.local_cid).is_some() {
            return Err(ConfigError::new(
                "local_cid",
                "already used by another connection",
            ));
        }
        let Some(slot) = self.free_slots.pop() else {
            return Err(ConfigError::new(
                "max_connections",
                "every connection slot is in use",
            ));
        };
        let result = self.build_connection(now, slot, config);
        match result {
            Ok(connection) => {
                let handle = connection.handle;
                self.by_cid.insert(connection.local_cid, handle.index);
                self.stats.record_windows(
                    connection.delivery.cc_state().fcwnd,
                    connection.delivery.cc_state().ncwnd,
                );
                self.connections[slot as usize] = Some(Box::new(connection));
                if let Some(rue) = &mut self.rue {
                    rue.rue.reset_connection(slot);
                }
                Ok(handle)
            }
            Err(e) => {
                self.free_slots.push(slot);
                Err(e)
            }
        }
    }

    /// The connection whose local CID is `cid`.
    pub fn connection(&self, cid: ConnectionId) -> Option<ConnectionHandle> {
        let slot = self.by_cid.get(cid)?;
        self.connections[slot as usize].as_ref().map(|c| c.handle)
    }

    /// Closes a connection: every transaction not completed completes with
    /// kCmplDeadConn, its resources return, its CID and slot are freed.
    pub fn close(&mut self, now: Timestamp, connection: ConnectionHandle) {
        let Some(slot) = self.slot(connection) else {
            return;
        };
        self.kill(slot, now);
        if let Some(conn) = self.connections[slot as usize].take() {
            self.by_cid.remove(conn.local_cid);
            if let Some(sa) = &conn.tx_sa {
                self.tx_contexts.forget(sa);
            }
        }
        self.data_ring.remove(slot);
        self.ack_ring.remove(slot);
        self.generations[slot as usize] = self.generations[slot as usize].wrapping_add(1);
        self.free_slots.push(slot);
        self.finish(now);
    }

    /// Sets a connection's dynamic-threshold factor (its share of the
    /// network-request regions, see [`crate::resources`]). The rev 0.9 RUE
    /// result has no field for it; a RUE policy or the CM calls this.
    pub fn set_isolation_alpha(&mut self, connection: ConnectionHandle, alpha: Alpha) {
        if let Some(conn) = self.conn_mut(connection) {
            conn.account.alpha = Alpha(alpha.0.max(1));
        }
    }

    /// Sets a connection's xLR drop filter ([`XlrFilter`]: OCP Falcon 0.9
    /// §11, off by default). Returns whether the connection exists. Queued
    /// requests meet the filter when they are sent.
    pub fn set_xlr_filter(&mut self, connection: ConnectionHandle, filter: XlrFilter) -> bool {
        let Some(slot) = self.slot(connection) else {
            return false;
        };
        let Some(conn) = self.connections[slot as usize].as_deref_mut() else {
            return false;
        };
        conn.delivery.set_xlr_filter(filter);
        self.data_ring.activate(slot);
        true
    }

    // --- Outputs --------------------------------------------------------

    /// The next event for the ULPs.
    pub fn poll_event(&mut self) -> Option<UlpEvent<B, S>> {
        self.shared.events.pop_front()
    }

    /// When [`handle_timeout`](Self::handle_timeout) should next run. May
    /// be early (a deadline that moved later), never late.
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        // The wheel, and what the connections not yet armed would put on it.
        let mut next = self.wheel.next_deadline();
        for &slot in &self.unarmed {
            if let Some(conn) = self.connections[slot as usize].as_deref() {
                next = earliest(next, conn.deadline_to_arm());
            }
        }
        next
    }

    /// Runs the timers due at `now`: retransmissions, ACK coalescing,
    /// pacing releases, RNR waits, transaction timeouts and reclaims.
    pub fn handle_timeout(&mut self, now: Timestamp) {
        self.arm_pending();
        let mut fired = core::mem::take(&mut self.fired);
        self.wheel.expire(now, &mut fired);
        for (handle, deadline) in fired.drain(..) {
            let Some(slot) = self.slot(handle) else {
                continue;
            };
            let conn = conn_in(&mut self.connections, slot);
            if conn.armed != Some(deadline) {
                continue; // stale: the connection re-armed earlier
            }
            conn.armed = None;
            if conn.dead {
                continue;
            }
            conn.delivery.handle_timeout(now);
            {
                let (initiator, mut ctx) = conn.initiator_ctx(now, &mut self.shared);
                initiator.handle_timeout(&mut ctx);
            }
            let conn = conn_in(&mut self.connections, slot);
            {
                let (target, mut ctx) = conn.target_ctx(now, &mut self.shared);
                target.handle_timeout(&mut ctx);
            }
            self.after_input(slot, now);
        }
        self.fired = fired;
        self.finish(now);
    }

    // --- Getters --------------------------------------------------------

    /// The counters.
    pub fn stats(&self) -> EngineStats {
        let mut stats = self.stats.clone();
        stats.transactions = self.shared.stats;
        stats.drops = self.shared.drops.clone();
        stats.tx_context_misses = self.tx_contexts.misses();
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

    // --- Internals ------------------------------------------------------

    fn slots_reserve(&mut self, max: u32) {
        self.connections.resize_with(max as usize, || None);
        self.generations.resize(max as usize, 0);
        self.free_slots = (0..max).rev().collect();
    }

    fn build_connection(
        &mut self,
        now: Timestamp,
        slot: u32,
        config: ConnectionConfig,
    ) -> Result<Connection<B, S>, ConfigError> {
        let handle = ConnectionHandle {
            index: slot,
            generation: self.generations[slot as usize],
        };
        let delivery_config = config
            .delivery
            .clone()
            .unwrap_or_else(|| self.default_delivery.clone());
        let ip = match (self.local_ip, config.remote_ip) {
            (core::net::IpAddr::V4(src), core::net::IpAddr::V4(dst)) => IpFields::V4 {
                src,
                dst,
                ttl: delivery_config.initial_ttl,
                dscp: Dscp::ZERO,
                ecn: Ecn::Ect0,
                ident: 0,
                dont_fragment: true,
            },
            (core::net::IpAddr::V6(src), core::net::IpAddr::V6(dst)) => IpFields::V6 {
                src,
                dst,
                hop_limit: delivery_config.initial_ttl,
                dscp: Dscp::ZERO,
                ecn: Ecn::Ect0,
                flow_label: crate::wire::FlowLabel::truncating(config.seed as u32),
            },
            _ => {
                return Err(ConfigError::new(
                    "remote_ip",
                    "must be of the engine's address family",
                ))
            }
        };
        let frame = FrameRepr {
            destination: config.remote_mac,
            source: self.local_mac,
            vlan: None,
            ip,
            src_port: config.udp_source_port,
            dst_port: self.udp_port,
            udp_checksum: UdpChecksum::Zero,
        };
        let (tx_sa, rx_security) = match (&self.psp, &config.psp) {
            (None, _) => (None, None),
            (Some(_), None) => {
                return Err(ConfigError::new(
                    "psp",
                    "the engine runs PSP: the connection needs its SAs",
                ))
            }
            (Some(_), Some(c)) => {
                let tx = CachedTxSa::new(&c.tx_key, TxSaConfig::falcon(c.tx_spi, c.tx_vc))
                    .map_err(|_| ConfigError::new("psp.tx_key", "cannot build the TX SA"))?;
                let rx = RxSecurity::new(
                    SpiCheck::new(c.rx_spi, c.rx_generation),
                    c.pcid,
                    psp::ReplayCheck::new(c.remote_time_ps),
                );
                (Some(tx), Some(rx))
            }
        };
        let s = config.sequence;
        let params = ConnectionParams {
            // The RUE state table is indexed densely by slot (after the
            // external RUE's id base), not by the 24-bit wire CID.
            connection_id: ConnectionId::truncating(self.rue_id_base() + slot),
            peer_connection_id: config.remote_cid,
            destination_function: config.remote_function,
            protocol: config.protocol,
            ordering: config.ordering,
            tx_request_psn: s.tx_request_psn,
            tx_data_psn: s.tx_data_psn,
            rx_request_psn: s.rx_request_psn,
            rx_data_psn: s.rx_data_psn,
            seed: config.seed,
        };
        let cc = initial_cc_state(slot, config.rue_profile, &delivery_config, now);
        let mut delivery = DeliveryConnection::with_cc_state(&delivery_config, params, cc);
        delivery.set_rue_instance(handle.generation);
        let mut account =
            self.shared
                .resources
                .open_account(config.credits, config.function, config.host);
        if let Some(alpha) = config.isolation_alpha {
            account.alpha = alpha;
        }
        Ok(Connection {
            handle,
            local_cid: config.local_cid,
            local_function: config.local_function,
            delivery,
            initiator: Initiator::new(
                config.ordering,
                s.tx_rsn,
                self.shared.config.transaction_timeout,
            ),
            target: Target::new(config.ordering, s.rx_rsn, self.shared.config.target_timeout),
            account,
            frame: FrameTemplate::new(frame),
            tx_sa,
            rx_security,
            remote_time_at: now,
            armed: None,
            unarmed: false,
            dead: false,
            rue_listed: false,
        })
    }

    fn slot(&self, handle: ConnectionHandle) -> Option<u32> {
        let live = self
            .connections
            .get(handle.index as usize)?
            .as_ref()
            .is_some_and(|c| c.handle == handle);
        live.then_some(handle.index)
    }

    fn live_slot(&self, handle: ConnectionHandle) -> Result<u32, UlpCommandError> {
        let slot = self
            .slot(handle)
            .ok_or(UlpCommandError::UnknownConnection)?;
        match &self.connections[slot as usize] {
            Some(conn) if !conn.dead => Ok(slot),
            _ => Err(UlpCommandError::ConnectionNotAlive),
        }
    }

    fn conn_mut(&mut self, handle: ConnectionHandle) -> Option<&mut Connection<B, S>> {
        let slot = self.slot(handle)?;
        self.connections[slot as usize].as_deref_mut()
    }

    /// After any input or command on a connection: hand its delivery events
    /// to the transaction sublayer, feed the RUE, put it on the scheduler
    /// rings and re-arm its timer.
    ///
    /// `arm` and the RUE offer share one lookup of the slot. Arming only lists
    /// the slot for `arm_pending`, so it may come before the RUE offer. The
    /// receive path does the same on the connection it holds
    /// (`Engine::receive`), without looking the slot up.
    #[inline(always)]
    fn after_input(&mut self, slot: u32, now: Timestamp) {
        self.drain_delivery_events(slot, now);
        self.data_ring.activate(slot);
        self.ack_ring.activate(slot);
        let Some(conn) = self.connections[slot as usize].as_mut() else {
            return;
        };
        arm_connection(&mut self.unarmed, conn, slot);
        if rue_offer_due(&self.rue, &self.rue_external, conn) {
            self.offer_rue_event(slot, now);
        }
    }

    /// Notes that the connection's deadlines may have moved: its wheel entry is
    /// brought up to date at the end of the transmit burst
    /// ([`poll_transmit`](Self::poll_transmit) returning `None`) or before the
    /// wheel is read ([`handle_timeout`](Self::handle_timeout);
    /// [`poll_timeout`](Self::poll_timeout) adds what the connections not yet
    /// armed would insert, so it is never late). Every input and every
    /// transmitted packet moves deadlines, so this runs several times per
    /// transaction, and the comparison with the wheel is made once per burst.
    /// The wheel only loses entries for deadlines that moved later again before
    /// the burst ended: early wake-ups that would have found nothing due.
    fn arm(&mut self, slot: u32) {
        if let Some(conn) = self.connections[slot as usize].as_mut() {
            arm_connection(&mut self.unarmed, conn, slot);
        }
    }

    /// Arms every connection noted by [`arm`](Self::arm).
    fn arm_pending(&mut self) {
        let mut unarmed = core::mem::take(&mut self.unarmed);
        for slot in unarmed.drain(..) {
            let Some(conn) = self.connections[slot as usize].as_mut() else {
                continue;
            };
            conn.unarmed = false;
            if let Some(next) = conn.deadline_to_arm() {
                conn.armed = Some(next);
                self.wheel.insert(conn.handle, next);
            }
            conn.initiator.take_new_deadline();
            conn.target.take_new_deadline();
        }
        self.unarmed = unarmed;
    }

    /// End of every top-level call: run the RUE on what was queued, tell
    /// waiting ULPs Xon, refresh the buffer level. Only the two checks are
    /// inline: as one out-of-line function most of a call would go to saving
    /// and restoring the registers its inlined bodies need.
    /// `drain_delivery_events` and `rue_offer` are split the same way.
    #[inline(always)]
    fn finish(&mut self, now: Timestamp) {
        if self.rue.as_ref().is_some_and(|rue| rue.pending) {
            self.rue_service(now);
        }
        if self.shared.occupancy_changed {
            self.after_occupancy_change();
        }
    }

    /// Resources came back or a received request took some: Xon to the
    /// ULPs that wait for them (nothing to do after a reservation), and
    /// the buffer level's new occupancy sample (§10.2).
    ///
    /// The Xon check stays out of line behind its emptiness test: inlined here,
    /// its loop would make every call (~2 per transaction) save and restore
    /// four registers for the two EMA updates.
    ///
    /// The samples come before the Xon check (which reads credits, never the
    /// pools' occupancy or the buffer level), so the check is a tail call and
    /// no register lives across it: no callee-saved register to save and
    /// restore on every call.
    #[inline(never)]
    fn after_occupancy_change(&mut self) {
        self.shared.occupancy_changed = false;
        let r = &self.shared.resources;
        let [packets, cells] = &mut self.buffer_level.pools;
        packets.update(r.used(Credit::NetReqPktRx));
        cells.update(r.used(Credit::NetReqBufRx));
        if !self.shared.xoff_waiting.is_empty() {
            self.check_xon();
        }
    }

    #[inline(never)]
    fn check_xon(&mut self) {
        let mut waiting = core::mem::take(&mut self.shared.xoff_waiting);
        waiting.retain(|&handle| {
            let Some(slot) = self.slot(handle) else {
                return false;
            };
            let Some(conn) = self.connections[slot as usize].as_mut() else {
                return false;
            };
            for class in CreditClass::ALL {
                if conn.account.xoff[class.index()] && self.shared.xon_due(&conn.account, class) {
                    conn.account.xoff[class.index()] = false;
                    self.shared.stats.xon += 1;
                    self.shared.events.push_back(UlpEvent::Xon {
                        connection: handle,
                        class,
                    });
                }
            }
            // Waited on while either class is stopped.
            conn.account.xoff != [false; 2]
        });
        waiting.append(&mut self.shared.xoff_waiting);
        self.shared.xoff_waiting = waiting;
    }

    /// A fatal error or a close: every transaction completes with
    /// kCmplDeadConn and every resource returns.
    fn kill(&mut self, slot: u32, now: Timestamp) {
        let conn = conn_in(&mut self.connections, slot);
        if conn.dead {
            return;
        }
        conn.dead = true;
        {
            let (initiator, mut ctx) = conn.initiator_ctx(now, &mut self.shared);
            initiator.fail_all(&mut ctx);
        }
        let conn = conn_in(&mut self.connections, slot);
        let (target, mut ctx) = conn.target_ctx(now, &mut self.shared);
        target.fail_all(&mut ctx);
        self.data_ring.remove(slot);
        self.ack_ring.remove(slot);
    }
}

/// [`Engine::arm`] on the connection in `slot`, already found.
#[inline(always)]
fn arm_connection<B: PacketBuf, S>(unarmed: &mut Vec<u32>, conn: &mut Connection<B, S>, slot: u32) {
    if !conn.unarmed {
        conn.unarmed = true;
        unarmed.push(slot);
    }
}

/// The connection in `slot`. Callers hold a slot from `slot()` /
/// `live_slot()`, the scheduler rings or the wheel (checked with `slot()`),
/// which only name live slots.
#[inline(always)]
fn conn_in<B: PacketBuf, S>(
    connections: &mut [Option<Box<Connection<B, S>>>],
    slot: u32,
) -> &mut Connection<B, S> {
    // Invariant: a slot's rings and wheel entries are removed or ignored
    // (generation check) once its connection is closed, and callers check
    // `slot()` first.
    connections[slot as usize]
        .as_mut()
        .expect("slot names a live connection")
}

impl<B: PacketBuf, S: DataSource> Connection<B, S> {
    /// The deadline to put on the wheel: the connection's next one, if it is
    /// earlier than the one already there. Cheap when nothing moved earlier:
    /// the delivery sublayer's timer and the deadlines the transaction
    /// sublayer added since the last look are compared with the armed one;
    /// the full minimum is computed only when the wheel entry fired or is
    /// beaten.
    fn deadline_to_arm(&self) -> Option<Timestamp> {
        if self.dead {
            return None;
        }
        let delivery = self.delivery.poll_timeout();
        let fresh = earliest(self.initiator.new_deadline(), self.target.new_deadline());
        if let Some(armed) = self.armed {
            if delivery.map_or(true, |d| d >= armed) && fresh.map_or(true, |f| f >= armed) {
                return None;
            }
        }
        let transactions = earliest(self.initiator.next_deadline(), self.target.next_deadline());
        let next = earliest(delivery, transactions)?;
        if self.armed.is_some_and(|armed| armed <= next) {
            return None;
        }
        Some(next)
    }

    fn initiator_ctx<'a>(
        &'a mut self,
        now: Timestamp,
        shared: &'a mut Shared<B, S>,
    ) -> (&'a mut Initiator<B, S>, Ctx<'a, B, S>) {
        (
            &mut self.initiator,
            Ctx {
                now,
                connection: self.handle,
                delivery: &mut self.delivery,
                account: &mut self.account,
                shared,
            },
        )
    }

    fn target_ctx<'a>(
        &'a mut self,
        now: Timestamp,
        shared: &'a mut Shared<B, S>,
    ) -> (&'a mut Target<B, S>, Ctx<'a, B, S>) {
        (
            &mut self.target,
            Ctx {
                now,
                connection: self.handle,
                delivery: &mut self.delivery,
                account: &mut self.account,
                shared,
            },
        )
    }
}

/// The CC state a connection starts from: the RUE's initial result
/// (`rue::CcResult::initial`, isekai's defaults: RTT and delay state
/// 25 µs, markers at now) with the profile index, and the configured
/// initial fcwnd, ncwnd and RTO.
fn initial_cc_state(
    slot: u32,
    profile: u8,
    config: &crate::delivery::DeliveryConfig,
    now: Timestamp,
) -> CcState {
    let initial = CcResult::initial(slot, Profiles::base_delay_field(profile), now.time24());
    let from_config = CcState::from_config(config);
    CcState {
        fcwnd: from_config.fcwnd,
        ncwnd: from_config.ncwnd,
        inter_packet_gap: initial.inter_packet_gap,
        retransmit_timeout: from_config.retransmit_timeout,
        cc_metadata: initial.cc_metadata,
        event_queue_select: initial.event_queue_select,
        delay_select: initial.delay_select,
        fabric_window_time_marker: initial.fabric_window_time_marker,
        nic_window_time_marker: initial.nic_window_time_marker,
        ncwnd_direction: initial.ncwnd_direction,
        base_delay_target: initial.base_delay_target,
        delay_state: initial.delay_state,
        rtt_state: initial.rtt_state,
        cc_opaque: initial.cc_opaque,
    }
}

/// The earlier of two optional deadlines.
fn earliest(a: Option<Timestamp>, b: Option<Timestamp>) -> Option<Timestamp> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

impl<B: PacketBuf, S> core::fmt::Debug for Engine<B, S> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Engine")
            .field("local_ip", &self.local_ip)
            .field("connections", &self.by_cid.len)
            .field("timers", &self.wheel.len())
            .finish_non_exhaustive()
    }
}
