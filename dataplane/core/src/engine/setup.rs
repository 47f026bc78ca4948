//! Connection setup between two engines in one process: the job of the
//! connection manager (DESIGN.md §4), done directly for the demo, the
//! benchmarks and the tests.
//!
//! Layer: engine, setup only (not on the datapath). Owns [`PairSpec`] and
//! [`connect`], which allocate each side's receive SPI (from its shard's
//! range of its node's SPIs, under its node's current generation), hand
//! the derived keys to the other side, and add mirrored connections (CIDs,
//! initial PSNs and RSNs, addresses).

use psp::Version;

use crate::delivery::{DeliveryConfig, OrderingMode};
use crate::engine::{
    ConfigError, ConnectionConfig, ConnectionHandle, ConnectionPsp, Engine, InitialSequence,
};
use crate::ids::{ConnectionId, DestinationFunction};
use crate::port::PacketBuf;
use crate::resources::CreditLimits;
use crate::seq::{Psn, Rsn};
use crate::time::Timestamp;
use crate::transaction::DataSource;

/// What two mirrored connections share.
#[derive(Debug, Clone)]
pub struct PairSpec {
    /// The connection id on engine A (B sends to it).
    pub a_cid: ConnectionId,
    /// The connection id on engine B.
    pub b_cid: ConnectionId,
    /// Ordered or unordered.
    pub ordering: OrderingMode,
    /// A's initial sequence numbers (B's are mirrored).
    pub sequence: InitialSequence,
    /// A's Destination Function (what B sends, A checks).
    pub a_function: DestinationFunction,
    /// B's Destination Function.
    pub b_function: DestinationFunction,
    /// Delivery parameters for both; `None` takes each engine's.
    pub delivery: Option<DeliveryConfig>,
    /// Credit limits for both; `None` takes each engine's.
    pub credits: Option<CreditLimits>,
    /// PSP cipher suite.
    pub version: Version,
    /// Rate cap of both connections, bit/s
    /// ([`ConnectionConfig::rate_cap`]). Default none.
    pub rate_cap: Option<u64>,
}

impl Default for PairSpec {
    /// CIDs 0x10 (A) and 0x20 (B), ordered, sequence numbers near the
    /// 2^32 wrap (so every run crosses it), AES-128-GCM.
    fn default() -> Self {
        PairSpec {
            a_cid: ConnectionId::truncating(0x10),
            b_cid: ConnectionId::truncating(0x20),
            ordering: OrderingMode::Ordered,
            sequence: InitialSequence {
                tx_request_psn: Psn::new(u32::MAX - 100),
                tx_data_psn: Psn::new(u32::MAX - 200),
                rx_request_psn: Psn::new(u32::MAX - 300),
                rx_data_psn: Psn::new(u32::MAX - 400),
                tx_rsn: Rsn::new(u32::MAX - 500),
                rx_rsn: Rsn::new(u32::MAX - 600),
            },
            a_function: DestinationFunction::truncating(0xA),
            b_function: DestinationFunction::truncating(0xB),
            delivery: None,
            credits: None,
            version: Version::Aes128Gcm,
            rate_cap: None,
        }
    }
}

/// Adds mirrored connections to `a` and `b` (with SAs when both run PSP)
/// and returns their handles.
///
/// # Errors
///
/// [`ConfigError`]: one engine runs PSP and the other not, or either
/// `add_connection` refused.
pub fn connect<B: PacketBuf, S: DataSource>(
    now: Timestamp,
    a: &mut Engine<B, S>,
    b: &mut Engine<B, S>,
    spec: &PairSpec,
) -> Result<(ConnectionHandle, ConnectionHandle), ConfigError> {
    let (psp_a, psp_b) = match (&a.psp, &b.psp) {
        (None, None) => (None, None),
        (Some(a_psp), Some(b_psp)) => {
            // A receive SPI is of its receiver's current generation (OCP
            // Falcon 0.9 §9.2.1), which rotations advance.
            let (gen_a, gen_b) = (a_psp.globals.cur_gen, b_psp.globals.cur_gen);
            // Each receiver picks its SPI; the sender gets the derived key.
            let (spi_a, key_to_a) = a.allocate_spi(spec.version)?;
            let (spi_b, key_to_b) = b.allocate_spi(spec.version)?;
            (
                Some(ConnectionPsp {
                    rx_generation: gen_a,
                    ..ConnectionPsp::new(spi_b, key_to_b, spi_a)
                }),
                Some(ConnectionPsp {
                    rx_generation: gen_b,
                    ..ConnectionPsp::new(spi_a, key_to_a, spi_b)
                }),
            )
        }
        _ => {
            return Err(ConfigError::new(
                "psp",
                "both engines must run PSP, or neither",
            ))
        }
    };
    let side = |local_cid,
                remote_cid,
                remote: &Engine<B, S>,
                sequence,
                local_function,
                remote_function,
                psp| {
        let mut config =
            ConnectionConfig::new(local_cid, remote_cid, remote.local_ip, remote.local_mac);
        config.ordering = spec.ordering;
        config.sequence = sequence;
        config.local_function = local_function;
        config.remote_function = remote_function;
        config.delivery = spec.delivery.clone();
        config.credits = spec.credits;
        config.psp = psp;
        config.rate_cap = spec.rate_cap;
        config
    };
    let config_a = side(
        spec.a_cid,
        spec.b_cid,
        b,
        spec.sequence,
        spec.a_function,
        spec.b_function,
        psp_a,
    );
    let config_b = side(
        spec.b_cid,
        spec.a_cid,
        a,
        spec.sequence.mirrored(),
        spec.b_function,
        spec.a_function,
        psp_b,
    );
    let handle_a = a.add_connection(now, config_a)?;
    let handle_b = match b.add_connection(now, config_b) {
        Ok(handle) => handle,
        Err(e) => {
            a.close(now, handle_a);
            return Err(e);
        }
    };
    Ok((handle_a, handle_b))
}
