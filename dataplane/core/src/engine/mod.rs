//! The per-core engine: connections, timers, PSP, the RUE, and the ULP
//! interface (DESIGN.md §3, §5).
//!
//! Layer: the top of `falcon-core`. Owns [`Engine`] — a slab of connections
//! keyed by local CID, each with its packet delivery sublayer
//! (`crate::delivery`) and transaction sublayer (`crate::transaction`);
//! one timing wheel for every connection's deadlines and a pacing wheel
//! for the release times of paced ones (`crate::pacing`); the connection
//! scheduler; the PSP boundary (open + connection checks on receive, seal
//! in place on transmit); the RUE run inline; resources; counters. It is
//! sans-IO in the quinn-proto style: frames come in and go out in the
//! port's own buffers (generic `B`; a received payload reaches the ULP in
//! its frame, and a transmitted one is read from the ULP's data source `S`
//! into the frame), time comes in as `now`, randomness from seeds in the
//! config. It never reads a clock, never panics on packet input, and does
//! not allocate per packet once warmed up (see
//! `crate::transaction::payload` and `crate::transaction::source`).
//!
//! # Files, by concern
//!
//! | file | what it holds |
//! |---|---|
//! | `mod.rs` | the types, construction, `poll_event` |
//! | `config.rs`, `setup.rs` | the configurations; `connect` of two engines in one process |
//! | `connections.rs` | add, look up, close and fail connections; the sublayers' contexts |
//! | `rx.rs`, `tx.rs` | the receive and transmit paths |
//! | `ulp.rs` | the ULP's commands (submit, answers, Pull Data, release, credits) |
//! | `upkeep.rs` | timers, the wheel and the pacing wheel, and what runs after every input (RUE, occupancy, Xon) |
//! | `queries.rs` | getters: stats, snapshots, limits, released frames |
//! | `io.rs` | the burst loops over a `Port` |
//! | `shard.rs`, `rotation.rs`, `cm.rs` | node membership, PSP key rotation, connection-manager events |
//! | `rue_inline.rs`, `reset.rs`, `cid.rs`, `stats.rs`, `unchecked.rs` | the RUE's queues, reset, the CID table, counters, unchecked header fields |
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
//!   so slots are filled in place (`crate::transaction`'s slot rings,
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
mod connections;
mod io;
mod queries;
mod reset;
mod rotation;
mod rue_inline;
mod rx;
mod setup;
mod shard;
mod slab;
mod stats;
mod tx;
mod ulp;
mod unchecked;
mod upkeep;

#[cfg(test)]
mod tests;

use psp::{Backend, CachedTxSa, RxSecurity, SaDatabase, SecurityGlobals, TxContextCache};
use rue::{CcResult, Profiles, Rue, RueChannel, RueConfig};

use crate::delivery::tx_window::WindowPool;
use crate::delivery::{BufferLevel, DeliveryConnection, PoolOccupancy};
use crate::ids::{ConnectionId, DestinationFunction};
use crate::pacing::Carousel;
use crate::port::{FrameBuf, PacketBuf};
use crate::random::SplitMix64;
use crate::resources::{Account, Resources};
use crate::scheduler::Scheduler;
use crate::time::Timestamp;
use crate::timer::TimingWheel;
use crate::transaction::{DataSource, Initiator, Shared, Target, TransactionConfig, UlpEvent};
use crate::wire::{ChecksumChecks, EthernetAddress, FrameTemplate, LocalAddresses};
use slab::Slab;

use cid::CidTable;
use rue_inline::RueExternal;
use upkeep::arm_connection;

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
    connections: Slab<Connection<B, S>>,
    generations: Vec<u32>,
    free_slots: Vec<u32>,
    by_cid: CidTable,
    shared: Shared<B, S>,
    wheel: TimingWheel<ConnectionHandle>,
    fired: Vec<(ConnectionHandle, Timestamp)>,
    /// The release times of paced connections (`crate::pacing`), apart
    /// from `wheel`: a release only puts its connection back on the data
    /// ring, and a connection that is not paced never enters it.
    pacing: Carousel<ConnectionHandle>,
    released: Vec<(ConnectionHandle, Timestamp)>,
    /// Slots whose deadlines may have moved since their last look at the
    /// wheel (see [`Engine::arm`]).
    unarmed: Vec<u32>,
    /// TX window rings of idle connections (`delivery::tx_window`).
    windows: WindowPool,
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
    /// The release time this connection has in the pacing wheel (the
    /// earliest one inserted and not yet handed back).
    departure: Option<Timestamp>,
    /// On the engine's data and ACK scheduler rings (`scheduler.rs`).
    on_data_ring: bool,
    on_ack_ring: bool,
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
            connections: Slab::new(0),
            generations: Vec::new(),
            free_slots: Vec::new(),
            by_cid: CidTable::default(),
            shared: Shared::new(Resources::new(config.resources), transaction),
            wheel: TimingWheel::new(config.timer_slots, now),
            fired: Vec::new(),
            pacing: Carousel::new(config.pacing_granularity, config.pacing_slots, now),
            released: Vec::new(),
            unarmed: Vec::with_capacity(config.max_connections as usize),
            windows: WindowPool::default(),
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

    /// The next event for the ULPs.
    pub fn poll_event(&mut self) -> Option<UlpEvent<B, S>> {
        self.shared.events.pop_front()
    }
}

/// The connection in `slot`. Callers hold a slot from `slot()` /
/// `live_slot()`, the scheduler rings or the wheel (checked with `slot()`),
/// which only name live slots.
#[inline(always)]
fn conn_in<B: PacketBuf, S>(
    connections: &mut Slab<Connection<B, S>>,
    slot: u32,
) -> &mut Connection<B, S> {
    // Invariant: a slot's rings and wheel entries are removed or ignored
    // (generation check) once its connection is closed, and callers check
    // `slot()` first.
    connections
        .value_mut(slot as usize)
        .expect("slot names a live connection")
}

impl<B: PacketBuf, S: DataSource> Connection<B, S> {}

impl<B: PacketBuf, S> core::fmt::Debug for Engine<B, S> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Engine")
            .field("local_ip", &self.local_ip)
            .field("connections", &self.by_cid.len)
            .field("timers", &self.wheel.len())
            .field("paced", &self.pacing.len())
            .finish_non_exhaustive()
    }
}
