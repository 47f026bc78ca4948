//! The engine as one shard of a node ([`crate::node`]).
//!
//! Layer: engine, setup and control path only (never per packet). Owns the
//! engine's membership in its node: which shard it is, and which of the
//! node's master-key rotations its SA database has followed. Builds the
//! engine's PSP state from the node's, takes receive SPIs from the node's
//! range for its shard, and refuses connections whose local connection id
//! or receive SPI belongs to another shard. An engine built without a node
//! gets a private node of one shard here, from its own PSP configuration.

use std::sync::Arc;

use psp::{SaDatabase, SaKey, Spi, Version};

use crate::engine::{ConfigError, ConnectionConfig, Engine, EngineConfig, PspState};
use crate::node::{Node, NodeConfig, SpiRefusal};
use crate::port::PacketBuf;
use crate::transaction::DataSource;

/// An engine's place in its node.
pub(super) struct Membership {
    pub(super) node: Arc<Node>,
    pub(super) shard: u16,
    /// The node's master-key rotations the engine's keys are those of.
    pub(super) rotations: u64,
}

/// The engine's node and shard, and its PSP state built from the node's
/// (`sa_database`, of an engine being reset, is reset to the node's keys
/// instead of a new one allocated).
pub(super) fn join(
    config: &EngineConfig,
    sa_database: Option<SaDatabase>,
) -> Result<(Membership, Option<PspState>), ConfigError> {
    let (node, shard) = match &config.node {
        Some(member) => (Arc::clone(&member.node), member.shard),
        None => {
            let own = NodeConfig {
                shards: 1,
                psp: config.psp.clone(),
                udp_port: config.udp_port,
            };
            (Node::new(own)?, 0)
        }
    };
    let mut rotations = 0;
    let psp = node.shard_psp(shard).map(|view| {
        rotations = view.keys.rotations();
        let db = match sa_database {
            Some(mut db) => {
                db.reset_to(view.keys);
                db
            }
            None => SaDatabase::with_key_slots(view.backend, view.keys, view.sa_cache),
        };
        PspState {
            db,
            globals: view.globals,
        }
    });
    let membership = Membership {
        node,
        shard,
        rotations,
    };
    Ok((membership, psp))
}

impl From<SpiRefusal> for ConfigError {
    fn from(refusal: SpiRefusal) -> Self {
        match refusal {
            SpiRefusal::PspOff => ConfigError::new("psp", "PSP is off in this engine"),
            SpiRefusal::Behind => ConfigError::new(
                "psp",
                "the node rotated its master key: follow_key_rotation first",
            ),
            SpiRefusal::Exhausted => ConfigError::new(
                "psp",
                "this shard's SPI space of the active master key exhausted",
            ),
        }
    }
}

impl<B: PacketBuf, S: DataSource> Engine<B, S> {
    /// The node this engine is a shard of (its own node of one shard if
    /// built without one).
    pub fn node(&self) -> &Arc<Node> {
        &self.shard.node
    }

    /// Which of the node's shards this engine is.
    pub fn shard(&self) -> u16 {
        self.shard.shard
    }

    /// A fresh receive SPI of this shard under the node's active master key,
    /// and its SA key from the engine's copy of that key.
    pub(super) fn allocate_receive_spi(
        &mut self,
        version: Version,
    ) -> Result<(Spi, SaKey), SpiRefusal> {
        let psp = self.psp.as_ref().ok_or(SpiRefusal::PspOff)?;
        let spi = self
            .shard
            .node
            .allocate_spi(self.shard.shard, self.shard.rotations)?;
        // The node checked that the engine holds the key of the SPI's slot.
        let key = psp.db.derive(spi, version).ok_or(SpiRefusal::Exhausted)?;
        Ok((spi, key))
    }

    /// A connection of this shard: its local connection id in the shard's
    /// range and, with PSP, its receive SPI too (`crate::node`, "Shards").
    pub(super) fn check_shard(&self, config: &ConnectionConfig) -> Result<(), ConfigError> {
        let steering = self.shard.node.steering();
        if steering.shard_of_cid(config.local_cid) != Some(self.shard.shard) {
            return Err(ConfigError::new(
                "local_cid",
                "outside this shard's connection ids (Steering::cid)",
            ));
        }
        if let (Some(_), Some(c)) = (&self.psp, &config.psp) {
            if steering.shard_of_spi(c.rx_spi) != Some(self.shard.shard) {
                return Err(ConfigError::new(
                    "psp.rx_spi",
                    "not an SPI of this shard (allocate it with Engine::allocate_spi)",
                ));
            }
        }
        Ok(())
    }
}
