//! What the engine fuzz targets share: the engines they feed, built once
//! per process and reset before every input, the connection they set up,
//! and the sealed-frame harness with its input format ([`sealed`]).
//!
//! Layer: test harness, outside the workspace. It drives `falcon-core`
//! through its public API only, never checks behaviour beyond "no panic,
//! no hang, no leak", and holds no state from one input to the next that
//! the engine could see (every input meets an engine as `Engine::new`
//! built it, so a crash reproduces from its input alone).

#![forbid(unsafe_code)]

pub mod sealed;
pub mod seeds;

use falcon_core::api::OrderingMode;
use falcon_core::engine::{
    ConnectionConfig, ConnectionHandle, ConnectionPsp, Engine, EngineConfig, PairSpec, PspConfig,
};
use falcon_core::time::Timestamp;
use falcon_core::wire::EthernetAddress;
use psp::{MasterKey, MasterKeys, SaKey, Spi};

/// The engine's clock at the start of every input.
pub const START: Timestamp = Timestamp::from_micros(1);

/// The engine under test: 10.0.0.1, MAC 02:00:00:00:00:01.
pub const LOCAL_MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 1]);
/// The peer the harness plays: 10.0.0.2, MAC 02:00:00:00:00:02.
pub const PEER_MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 2]);

/// The SPI the engine sends with (the peer chose it; any valid one).
const TX_SPI: Spi = Spi(0x0000_0001);

/// What the engine's connection was set up with, as the peer sees it.
pub struct Peer {
    /// The engine's connection.
    pub connection: ConnectionHandle,
    /// With PSP: the SPI the engine receives on and its key, for the peer
    /// to seal with.
    pub rx_sa: Option<(Spi, SaKey)>,
    /// The connection's shape (CIDs, functions, initial sequence numbers).
    pub spec: PairSpec,
}

/// The engine configuration of the targets: the defaults, with PSP or not,
/// sized for the one connection. `Engine::reset` rebuilds everything but
/// the SA cache from the configuration, and under AddressSanitizer the
/// default sizes (1024 connection slots, RUE table and queue entries and
/// cached SAs; 4096 wheel slots) cost ~1 ms per input, half of it freeing
/// and allocating the wheel's slots (perf, `engine_rx`: 900 executions/s).
/// Here: 1 connection slot, a 64-entry RUE queue, 4 cached SAs (so the
/// cache's eviction runs too) and 64 wheel slots (a 33 µs horizon:
/// retransmission and transaction timeouts go through the wheel's overflow
/// heap, the path long deadlines take anyway).
pub fn engine_config(psp: bool) -> EngineConfig {
    EngineConfig {
        max_connections: 1,
        rue_queue: 64,
        timer_slots: 64,
        local_ip: "10.0.0.1".parse().expect("literal address"),
        local_mac: LOCAL_MAC,
        psp: psp.then(|| PspConfig {
            sa_cache: 4,
            ..PspConfig::new(MasterKeys {
                k0: MasterKey::new([1; 32]),
                k1: MasterKey::new([2; 32]),
            })
        }),
        ..EngineConfig::default()
    }
}

/// Resets `engine` to [`START`] and sets up its one connection to the peer,
/// as [`falcon_core::engine::connect`] would with `PairSpec::default()`
/// (engine = side A), in `ordering`.
pub fn reset_and_connect(engine: &mut Engine, ordering: OrderingMode) -> Peer {
    engine.reset(START);
    let spec = PairSpec {
        ordering,
        ..PairSpec::default()
    };
    let rx_sa = engine.allocate_spi(spec.version).ok();
    let mut config = ConnectionConfig::new(
        spec.a_cid,
        spec.b_cid,
        "10.0.0.2".parse().expect("literal address"),
        PEER_MAC,
    );
    config.ordering = spec.ordering;
    config.sequence = spec.sequence;
    config.local_function = spec.a_function;
    config.remote_function = spec.b_function;
    config.psp = rx_sa
        .as_ref()
        .map(|(rx_spi, _)| ConnectionPsp::new(TX_SPI, tx_key(), *rx_spi));
    // Invariant: the configuration is the one `connect` builds for a fresh
    // engine, which accepts it (the engine was just reset).
    let connection = engine
        .add_connection(START, config)
        .expect("a fresh engine takes the connection");
    Peer {
        connection,
        rx_sa,
        spec,
    }
}

/// The key of the SA the engine sends with (the peer derived it from its
/// master key for [`TX_SPI`]), derived once per thread.
fn tx_key() -> SaKey {
    thread_local! {
        static KEY: SaKey = MasterKey::new([3; 32]).derive(TX_SPI, PairSpec::default().version);
    }
    KEY.with(SaKey::clone)
}
